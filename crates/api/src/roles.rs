//! `/rest/roles`: named sets of permissions (decisions: role-based access control).
//!
//! A role's `permissions` are grants `{resource, action, scope}`: a resource and action
//! among those `/rest/permissions` lists (`*` for every one), on `ALL` objects or only
//! the caller's `OWN` (jobs, reservations, containers). The built-in roles
//! (`administrator`, `operator`, `user`) may be changed but not deleted, and
//! `POST /rest/roles/<id>/reset` gives one back its defaults. A role attached to a
//! principal cannot be deleted (409).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Response;
use drover_auth::Permission;
use drover_auth::roles::{Grant, Role, Scope, built_in_roles};
use drover_query::ListQuery;
use drover_store::Write;
use serde_json::{Value, json};

use crate::AppState;
use crate::access::{
    PRINCIPALS, ROLES, change_list, check_version, find, grant_json, insert_named, next_id, render,
    role_body, update_named, with_store,
};
use crate::error::{ApiError, ApiResult};
use crate::input::{Fields, read_object};
use crate::openapi::schema::{object, string};
use crate::params::{ChangeMode, CommonParams, ListParams};
use crate::reply::{self, parse_json};
use crate::routes::{Access, Collection, Routes};

const READ: Access = Access::Needs(Permission::read("roles"));
const CREATE: Access = Access::Needs(Permission::create("roles"));
const UPDATE: Access = Access::Needs(Permission::update("roles"));
const DELETE: Access = Access::Needs(Permission::delete("roles"));

pub(crate) fn register(routes: &mut Routes) {
    let role = || {
        object(&[
            ("id", string()),
            ("name", string()),
            ("description", string()),
            (
                "permissions",
                serde_json::json!({"type": "array", "items": object(&[
                    ("resource", string()),
                    ("action", string()),
                    ("scope", string()),
                ])}),
            ),
        ])
    };
    routes.collection(
        Collection {
            path: "/rest/roles",
            item_path: "/rest/roles/{key}",
            access: READ,
            schema: role(),
            list: ("Every role", "Roles"),
            item: (
                "One role, by id or name",
                "The role's id or name",
                "The role",
                "No such role",
            ),
        },
        list,
        one,
    );
    routes
        .post("/rest/roles", CREATE, create)
        .summary("Creates a role")
        .body("application/json", role())
        .response(201, "The created role", Some(role()))
        .response(409, "The name is taken", None);
    routes
        .put("/rest/roles/{key}", UPDATE, modify)
        .summary("Modifies a role; change-mode add, remove or set (the default) for permissions")
        .path_param("key", "The role's id or name")
        .body("application/json", role())
        .response(200, "The modified role", Some(role()))
        .response(409, "Stale version, or the name is taken", None);
    routes
        .delete("/rest/roles/{key}", DELETE, remove)
        .summary("Deletes a role that no principal attaches (built-in roles stay)")
        .path_param("key", "The role's id or name")
        .response(200, "Deleted", Some(object(&[])))
        .response(409, "Principals attach the role", None);
    routes
        .post("/rest/roles/{key}/reset", UPDATE, reset)
        .summary("Gives a built-in role back its default permissions and description")
        .path_param("key", "The built-in role's id or name")
        .response(200, "The reset role", Some(role()));
}

/// What a request body gives (`None`: not given).
struct Given {
    name: Option<String>,
    description: Option<String>,
    grants: Option<Vec<Grant>>,
    version: Option<i64>,
}

/// Role and principal names: letters, digits, period, dash, underscore (part 8).
pub(crate) fn check_name(f: &mut Fields<'_>, name: &Option<String>) {
    if let Some(name) = name
        && (name.is_empty()
            || name.len() > 128
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
    {
        f.problem(
            "name",
            format!("'{name}' must be letters, digits, period, dash and underscore"),
        );
    }
}

/// The grant an item of `permissions` names: `"resource:action"`, or an object with
/// `id` (or `resource` and `action`) and an optional `scope` (`ALL`, the default, or
/// `OWN`). The resource must be one some permission has (or `*`).
fn read_grant(item: &Value, known: &[Permission]) -> Result<Grant, String> {
    let (id, scope) = match item {
        Value::String(id) => (id.clone(), None),
        Value::Object(o) => {
            let text = |k: &str| o.get(k).and_then(Value::as_str);
            let id = match (text("id"), text("resource"), text("action")) {
                (Some(id), _, _) => id.to_string(),
                (None, Some(resource), Some(action)) => format!("{resource}:{action}"),
                _ => return Err("give \"id\", or \"resource\" and \"action\"".into()),
            };
            (id, o.get("scope").filter(|s| !s.is_null()))
        }
        _ => return Err("expected \"resource:action\" or an object".into()),
    };
    let scope = match scope {
        None => Scope::All,
        Some(value) => value
            .as_str()
            .and_then(Scope::parse)
            .ok_or_else(|| format!("scope {value} is not ALL or OWN"))?,
    };
    let grant = Grant::parse(&id, scope)?;
    let exists = grant.resource == "*"
        || known.iter().any(|p| {
            p.resource == grant.resource
                && (grant.action == "*" || grant.action == p.action.as_str())
        });
    if !exists {
        return Err(format!("no permission {id} (see /rest/permissions)"));
    }
    Ok(grant)
}

fn read_given(f: &mut Fields<'_>, known: &[Permission]) -> Given {
    let name = f.string("name");
    check_name(f, &name);
    let grants = match f.raw("permissions").filter(|v| !v.is_null()) {
        None => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    read_grant(item, known)
                        .map_err(|why| f.problem(&format!("permissions[{i}]"), why))
                        .ok()
                })
                .collect(),
        ),
        Some(_) => {
            f.problem("permissions", "expected a list");
            None
        }
    };
    Given {
        name,
        description: f.string("description"),
        grants,
        version: f.integer("version"),
    }
}

fn grants_json(grants: &[Grant]) -> Vec<Value> {
    grants.iter().map(grant_json).collect()
}

async fn list(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    let documents = with_store(&state, false, |store| {
        Ok(store
            .list(ROLES, &ListQuery::default())?
            .items
            .iter()
            .map(render)
            .collect::<Vec<_>>())
    })
    .await?;
    Ok(reply::list_in_memory(&documents, &params))
}

async fn one(State(state): State<AppState>, Path(key): Path<String>) -> ApiResult<Json<Value>> {
    let document = with_store(&state, false, move |store| find(store, ROLES, &key, "role")).await?;
    Ok(Json(render(&document)))
}

async fn create(State(state): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let body: Value = parse_json(&body)?;
    let summary = "The role was not created";
    let given = read_object(&body, summary, |f| {
        let given = read_given(f, state.permissions());
        if given.name.is_none() {
            f.problem("name", "required");
        }
        given
    })?;
    let name = given.name.clone().unwrap_or_default();
    let role = Role {
        id: next_id(),
        name: name.clone(),
        description: given.description.unwrap_or_default(),
        grants: given.grants.unwrap_or_default(),
    };
    let document = with_store(&state, true, move |store| {
        if built_in_roles().iter().any(|r| r.name == name) {
            return Err(ApiError::conflict(
                summary,
                format!("the name '{name}' is taken"),
            ));
        }
        insert_named(store, ROLES, &role.id, role_body(&role, false), summary)
    })
    .await?;
    Ok(reply::created(
        state.settings(),
        &format!("/rest/roles/{}", document.id),
        render(&document),
    ))
}

async fn modify(
    State(state): State<AppState>,
    params: CommonParams,
    Path(key): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let mode = ChangeMode::parse(params.raw.get("change-mode")?, Some(ChangeMode::Set))?;
    let body: Value = parse_json(&body)?;
    let summary = format!("The role {key} was not changed");
    let given = read_object(&body, &summary, |f| read_given(f, state.permissions()))?;
    let document = with_store(&state, true, move |store| {
        let current = find(store, ROLES, &key, "role")?;
        check_version(given.version, &current, &summary, "role")?;
        let mut record = current.body.clone();
        if let Some(name) = &given.name {
            record["name"] = json!(name);
        }
        if let Some(description) = &given.description {
            record["description"] = json!(description);
        }
        let grants = given.grants.as_deref().map(grants_json);
        change_list(&mut record, "permissions", grants, mode, &["id"]);
        update_named(store, ROLES, &current, record, &summary)
    })
    .await?;
    Ok(Json(render(&document)))
}

async fn reset(State(state): State<AppState>, Path(key): Path<String>) -> ApiResult<Json<Value>> {
    let document = with_store(&state, true, move |store| {
        let current = find(store, ROLES, &key, "role")?;
        let Some(default) = built_in_roles().into_iter().find(|r| r.id == current.id) else {
            return Err(ApiError::bad_request(
                format!("The role {key} was not reset"),
                "only built-in roles have defaults",
            ));
        };
        update_named(
            store,
            ROLES,
            &current,
            role_body(&default, true),
            "The role was not reset",
        )
    })
    .await?;
    Ok(Json(render(&document)))
}

async fn remove(State(state): State<AppState>, Path(key): Path<String>) -> ApiResult<Json<Value>> {
    with_store(&state, true, move |store| {
        let current = find(store, ROLES, &key, "role")?;
        let summary = format!("The role {key} was not deleted");
        if current.body["builtIn"] == json!(true) {
            return Err(ApiError::bad_request(
                summary,
                "built-in roles cannot be deleted; change or reset them instead",
            ));
        }
        let attaching: Vec<String> = store
            .list(PRINCIPALS, &ListQuery::default())?
            .items
            .iter()
            .filter(|p| {
                p.body["attachedRoles"]
                    .as_array()
                    .is_some_and(|roles| roles.iter().any(|r| r["id"] == json!(current.id)))
            })
            .map(|p| p.body["name"].as_str().unwrap_or_default().to_string())
            .collect();
        if !attaching.is_empty() {
            return Err(ApiError::conflict(
                summary,
                format!("principals attach it: {}", attaching.join(", ")),
            ));
        }
        store.write(&[Write::Delete {
            collection: ROLES.into(),
            id: current.id,
            expected_version: None,
        }])?;
        Ok(())
    })
    .await?;
    Ok(reply::deleted())
}
