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
use drover_auth::access_store::{AccessCollection, Common, grant_json};
use drover_auth::roles::{Grant, Scope};
use drover_domain::image::simple_name_problem;
use serde_json::Value;

use crate::AppState;
use crate::access_resources::{self, change_list, stored};
use crate::error::ApiResult;
use crate::input::{Fields, read_object};
use crate::openapi::schema::*;
use crate::routes::{Access, Collection, ItemChange, Routes};

const READ: Access = Access::Needs(Permission::read("roles"));
const CREATE: Access = Access::Needs(Permission::create("roles"));
const UPDATE: Access = Access::Needs(Permission::update("roles"));
const DELETE: Access = Access::Needs(Permission::delete("roles"));

pub(crate) fn register(routes: &mut Routes) {
    let role = || {
        object(&[
            ("id", read_only(string())),
            (
                "name",
                serde_json::json!({"type": "string", "pattern": drover_domain::image::SIMPLE_NAME_PATTERN}),
            ),
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
            schema: crate::openapi::schema::required(role(), &["id"]),
            list: ("Every role", "Roles"),
            item: (
                "One role, by id or name",
                "The role's id or name",
                "The role",
                "No such role",
            ),
        },
        access_resources::list::<Roles>,
        access_resources::one::<Roles>,
    );
    routes
        .post("/rest/roles", CREATE, create)
        .summary("Creates a role")
        .json_body(required(role(), &["name"]))
        .response(201, "The created role", Some(role()))
        .response(409, "The name is taken", None);
    routes
        .put("/rest/roles/{key}", UPDATE, modify)
        .summary("Modifies a role; change-mode add, remove or set (the default) for permissions")
        .change_mode(false, "add, remove or set (the default) the lists given")
        .path_param("key", "The role's id or name")
        .body("application/json", role())
        .response(200, "The modified role", Some(role()))
        .response(409, "Stale version, or the name is taken", None);
    routes
        .delete(
            "/rest/roles/{key}",
            DELETE,
            access_resources::remove::<Roles>,
        )
        .summary("Deletes a role that no principal attaches (built-in roles stay)")
        .path_param("key", "The role's id or name")
        .response(200, "Deleted", Some(object(&[])))
        .response(409, "Principals attach the role", None);
    routes
        .post("/rest/roles/{key}/reset", UPDATE, reset)
        .no_body()
        .summary("Gives a built-in role back its default permissions and description")
        .path_param("key", "The built-in role's id or name")
        .response(200, "The reset role", Some(role()));
}

/// What a request body gives (`None`: not given).
struct Given {
    common: Common,
    grants: Option<Vec<Grant>>,
}

/// Role and principal names: letters, digits, period, dash, underscore (part 8).
pub(crate) fn check_name(f: &mut Fields<'_>, name: &Option<String>) {
    if let Some(why) = name.as_deref().and_then(simple_name_problem) {
        f.problem("name", why);
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
        common: Common {
            name,
            description: f.string("description"),
            version: f.integer("version"),
        },
        grants,
    }
}

fn grants_json(grants: &[Grant]) -> Vec<Value> {
    grants.iter().map(grant_json).collect()
}

/// Roles: see [`access_resources`](crate::access_resources).
struct Roles;

impl access_resources::Resource for Roles {
    const COLLECTION: AccessCollection = AccessCollection::Role;
}

async fn create(State(state): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let summary = "The role was not created";
    let read = |f: &mut Fields<'_>| read_given(f, state.permissions());
    let given = access_resources::read_new(&body, summary, read, |g| &g.common)?;
    let name = given.common.name.unwrap_or_default();
    let description = given.common.description.unwrap_or_default();
    let grants = given.grants.unwrap_or_default();
    let created = stored(&state, true, move |s| {
        s.create_role(name, description, grants, summary)
    })
    .await?;
    Ok(access_resources::created(&state, "/rest/roles", created))
}

async fn modify(ItemChange(state, params, _, key, body): ItemChange) -> ApiResult<Json<Value>> {
    let (mode, body, summary) = access_resources::change_request(&params, &body, &key, "role")?;
    let given = read_object(&body, &summary, |f| read_given(f, state.permissions()))?;
    let grants = given.grants.as_deref().map(grants_json);
    let edit = move |record: &mut Value| change_list(record, "permissions", grants, mode, &["id"]);
    access_resources::modify(
        &state,
        AccessCollection::Role,
        key,
        given.common,
        summary,
        edit,
    )
    .await
}

async fn reset(State(state): State<AppState>, Path(key): Path<String>) -> ApiResult<Json<Value>> {
    stored(&state, true, move |s| s.reset_role(&key))
        .await
        .map(Json)
}
