//! Principals (spec 2.19, 4.16): named mappings of directory users and groups to roles.
//! Stored as documents (unique name, `version` for concurrent changes). The roles they
//! attach are the built-in ones until roles can be managed (issue #9, next step); roles
//! do not yet decide what a principal's users may do.

use std::sync::{Mutex, OnceLock};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Response;
use drover_auth::Permission;
use drover_domain::dates::Timestamp;
use drover_monitor::event::IdSequence;
use drover_store::{CollectionSpec, Document, StoreError, Write};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::input::{Fields, read_object};
use crate::openapi::schema::{envelope, object, string, strings};
use crate::params::{ChangeMode, CommonParams, ListParams};
use crate::reply::{self, parse_json};
use crate::routes::{Access, Routes};

const READ: Access = Access::Needs(Permission::read("principals"));
const CREATE: Access = Access::Needs(Permission::create("principals"));
const UPDATE: Access = Access::Needs(Permission::update("principals"));
const DELETE: Access = Access::Needs(Permission::delete("principals"));

const COLLECTION: &str = "principals";
/// The built-in roles a principal may attach (by id or name; the id is the name).
pub const ROLES: [&str; 3] = ["administrator", "operator", "user"];
const USER_TYPES: [&str; 2] = ["LDAP", "PAM"];
const GROUP_TYPES: [&str; 3] = ["LDAPGROUP", "LDAPOU", "PAMGROUP"];

pub(crate) fn register(routes: &mut Routes) {
    let principal = || {
        object(&[
            ("id", string()),
            ("name", string()),
            ("attachedRoles", strings()),
        ])
    };
    routes
        .get("/rest/principals", READ, list)
        .summary("Every principal")
        .list()
        .response(200, "Principals", Some(envelope(principal())));
    for path in ["/rest/principals/{key}", "/rest/principal/{key}"] {
        routes
            .get(path, READ, one)
            .summary("One principal, by id or name")
            .path_param("key", "The principal's id or name")
            .response(200, "The principal", Some(principal()))
            .response(404, "No such principal", None);
        routes
            .put(path, UPDATE, modify)
            .summary("Modifies a principal; change-mode add, remove or set (the default)")
            .path_param("key", "The principal's id or name")
            .body("application/json", principal())
            .response(200, "The modified principal", Some(principal()))
            .response(409, "Stale version, or the name is taken", None);
        routes
            .delete(path, DELETE, remove)
            .summary("Deletes a principal")
            .path_param("key", "The principal's id or name")
            .response(200, "Deleted", Some(object(&[])));
    }
    routes
        .post("/rest/principals", CREATE, create)
        .summary("Creates a principal")
        .body("application/json", principal())
        .response(201, "The created principal", Some(principal()))
        .response(409, "The name is taken", None);
}

/// What a request body gives (`None`: not given).
#[derive(Default)]
struct Given {
    name: Option<String>,
    description: Option<String>,
    roles: Option<Vec<String>>,
    groups: Option<Vec<Value>>,
    users: Option<Vec<Value>>,
    version: Option<i64>,
}

fn read_given(f: &mut Fields<'_>) -> Given {
    let name = f.string("name");
    if let Some(name) = &name
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
    let roles = f.references("attachedRoles", "id").map(|roles| {
        roles
            .into_iter()
            .filter_map(|role| {
                let found = ROLES.iter().find(|r| r.eq_ignore_ascii_case(&role));
                if found.is_none() {
                    f.problem(
                        "attachedRoles",
                        format!("no role '{role}' (roles: {})", ROLES.join(", ")),
                    );
                }
                found.map(|r| r.to_string())
            })
            .collect()
    });
    let mut members = |key: &str, types: &[&str]| {
        f.each(key, |m| {
            let name = m.string("name");
            if name.as_deref().is_none_or(str::is_empty) {
                m.problem("name", "required");
            }
            let kind = m.string("type").map(|t| t.to_ascii_uppercase());
            match &kind {
                Some(t) if types.contains(&t.as_str()) => {}
                Some(t) => m.problem("type", format!("'{t}' is not one of {}", types.join(", "))),
                None => m.problem("type", "required"),
            }
            json!({"name": name, "type": kind})
        })
    };
    let users = members("users", &USER_TYPES);
    let groups = members("groups", &GROUP_TYPES);
    Given {
        name,
        description: f.string("description"),
        roles,
        groups,
        users,
        version: f.integer("version"),
    }
}

fn render(document: &Document) -> Value {
    let mut out = document.body.clone();
    out["id"] = json!(document.id);
    out["version"] = json!(document.version);
    out
}

async fn blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&dyn drover_store::DocumentStore) -> Result<T, ApiError> + Send + 'static,
) -> ApiResult<T> {
    let store = state.store().clone();
    tokio::task::spawn_blocking(move || {
        store.ensure_collection(&CollectionSpec::new(COLLECTION))?;
        work(store.as_ref())
    })
    .await
    .map_err(|e| ApiError::unavailable("The principals cannot be read", e.to_string()))?
}

fn find(store: &dyn drover_store::DocumentStore, key: &str) -> Result<Document, ApiError> {
    match store.get(COLLECTION, key)? {
        Some(doc) => Ok(doc),
        None => store
            .get_by_name(COLLECTION, key)?
            .ok_or_else(|| ApiError::not_found(format!("No principal '{key}'"))),
    }
}

async fn list(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    let documents = blocking(&state, |store| {
        Ok(store
            .list(COLLECTION, &drover_query::ListQuery::default())?
            .items
            .iter()
            .map(render)
            .collect::<Vec<_>>())
    })
    .await?;
    Ok(reply::list_in_memory(&documents, &params))
}

async fn one(State(state): State<AppState>, Path(key): Path<String>) -> ApiResult<Json<Value>> {
    let document = blocking(&state, move |store| find(store, &key)).await?;
    Ok(Json(render(&document)))
}

fn ids() -> &'static Mutex<IdSequence> {
    static IDS: OnceLock<Mutex<IdSequence>> = OnceLock::new();
    IDS.get_or_init(|| Mutex::new(IdSequence::starting_after(None, Timestamp::now())))
}

async fn create(State(state): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let body: Value = parse_json(&body)?;
    let summary = "The principal was not created";
    let given = read_object(&body, summary, |f| {
        let given = read_given(f);
        if given.name.is_none() {
            f.problem("name", "required");
        }
        given
    })?;
    let name = given.name.clone().unwrap_or_default();
    let record = json!({
        "name": name,
        "description": given.description,
        "attachedRoles": roles_json(given.roles.as_deref().unwrap_or_default()),
        "groups": given.groups.unwrap_or_default(),
        "users": given.users.unwrap_or_default(),
    });
    let id = ids().lock().unwrap().next_id();
    let document = blocking(&state, move |store| {
        store
            .write(&[Write::Insert {
                collection: COLLECTION.into(),
                id: id.clone(),
                name: Some(name.clone()),
                body: record,
            }])
            .map_err(|e| match e {
                StoreError::Conflict(_) => {
                    ApiError::conflict(summary, format!("the name '{name}' is taken"))
                }
                other => other.into(),
            })?;
        find(store, &id)
    })
    .await?;
    Ok(reply::created(
        state.settings(),
        &format!("/rest/principals/{}", document.id),
        render(&document),
    ))
}

fn roles_json(roles: &[String]) -> Value {
    json!(
        roles
            .iter()
            .map(|r| json!({"id": r, "name": r}))
            .collect::<Vec<_>>()
    )
}

/// Applies `given` to the list at `key` of `record` by `mode` (identity: `field`).
fn change_list(
    record: &mut Value,
    key: &str,
    given: Option<Vec<Value>>,
    mode: ChangeMode,
    field: &[&str],
) {
    let Some(given) = given else {
        return;
    };
    let same = |a: &Value, b: &Value| field.iter().all(|f| a.get(*f) == b.get(*f));
    let mut list: Vec<Value> = record[key].as_array().cloned().unwrap_or_default();
    match mode {
        ChangeMode::Set => list = given,
        ChangeMode::Add => {
            for item in given {
                if !list.iter().any(|x| same(x, &item)) {
                    list.push(item);
                }
            }
        }
        ChangeMode::Remove => list.retain(|x| !given.iter().any(|g| same(x, g))),
    }
    record[key] = Value::Array(list);
}

async fn modify(
    State(state): State<AppState>,
    params: CommonParams,
    Path(key): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let mode = ChangeMode::parse(params.raw.get("change-mode")?, Some(ChangeMode::Set))?;
    let body: Value = parse_json(&body)?;
    let summary = format!("The principal {key} was not changed");
    let given = read_object(&body, &summary, read_given)?;
    let document = blocking(&state, move |store| {
        let current = find(store, &key)?;
        if let Some(version) = given.version
            && version != current.version
        {
            return Err(ApiError::conflict(
                summary,
                format!(
                    "version {version} is stale: the principal is at version {}",
                    current.version
                ),
            ));
        }
        let mut record = current.body.clone();
        if let Some(name) = &given.name {
            record["name"] = json!(name);
        }
        if let Some(description) = &given.description {
            record["description"] = json!(description);
        }
        change_list(
            &mut record,
            "attachedRoles",
            given
                .roles
                .as_deref()
                .map(|r| roles_json(r).as_array().cloned().unwrap_or_default()),
            mode,
            &["id"],
        );
        change_list(&mut record, "groups", given.groups, mode, &["name", "type"]);
        change_list(&mut record, "users", given.users, mode, &["name", "type"]);
        let name = record["name"].as_str().map(String::from);
        store
            .write(&[Write::Update {
                collection: COLLECTION.into(),
                id: current.id.clone(),
                name: name.clone(),
                body: record,
                expected_version: Some(current.version),
            }])
            .map_err(|e| match e {
                StoreError::Conflict(reason) => ApiError::conflict(summary, reason),
                other => other.into(),
            })?;
        find(store, &current.id)
    })
    .await?;
    Ok(Json(render(&document)))
}

async fn remove(State(state): State<AppState>, Path(key): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |store| {
        let current = find(store, &key)?;
        store.write(&[Write::Delete {
            collection: COLLECTION.into(),
            id: current.id,
            expected_version: None,
        }])?;
        Ok(())
    })
    .await?;
    Ok(reply::deleted())
}
