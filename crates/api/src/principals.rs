//! Principals (spec 2.19, 4.16): named mappings of directory users and groups to roles.
//! Stored as documents (unique name, `version` for concurrent changes); every change
//! rebuilds the decisions of the gate ([`crate::access`]). A principal's `LDAP` users and
//! `LDAPGROUP`/`LDAPOU` groups name directory logins; its `PAM` users name local users
//! and `PAMGROUP` groups their system groups.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use drover_auth::Permission;
use drover_auth::access_store::{AccessCollection, Common};
use drover_auth::roles::Authority;
use serde_json::{Value, json};

use crate::AppState;
use crate::access_resources::{self, change_list, stored};
use crate::error::ApiResult;
use crate::input::{Fields, read_object};
use crate::openapi::schema::*;
use crate::roles::check_name;
use crate::routes::{Access, Collection, ItemChange, Routes};

const READ: Access = Access::Needs(Permission::read("principals"));
const CREATE: Access = Access::Needs(Permission::create("principals"));
const UPDATE: Access = Access::Needs(Permission::update("principals"));
const DELETE: Access = Access::Needs(Permission::delete("principals"));

const USER_TYPES: [&str; 2] = ["LDAP", "PAM"];
const GROUP_TYPES: [&str; 3] = ["LDAPGROUP", "LDAPOU", "PAMGROUP"];

pub(crate) fn register(routes: &mut Routes) {
    let principal = || {
        object(&[
            ("id", read_only(string())),
            (
                "name",
                serde_json::json!({"type": "string", "pattern": drover_domain::image::SIMPLE_NAME_PATTERN}),
            ),
            (
                "attachedRoles",
                array(object(&[("id", string()), ("name", string())])),
            ),
            (
                "users",
                array(required(
                    object(&[("name", text()), ("type", one_of(&USER_TYPES))]),
                    &["name", "type"],
                )),
            ),
            (
                "groups",
                array(required(
                    object(&[("name", text()), ("type", one_of(&GROUP_TYPES))]),
                    &["name", "type"],
                )),
            ),
        ])
    };
    routes.collection(
        Collection {
            path: "/rest/principals",
            item_path: "/rest/principals/{key}",
            access: READ,
            schema: crate::openapi::schema::required(principal(), &["id"]),
            list: ("Every principal", "Principals"),
            item: (
                "One principal, by id or name",
                "The principal's id or name",
                "The principal",
                "No such principal",
            ),
        },
        access_resources::list::<Principals>,
        access_resources::one::<Principals>,
    );
    // The singular path is an alias of the plural one.
    routes
        .get(
            "/rest/principal/{key}",
            READ,
            access_resources::one::<Principals>,
        )
        .summary("One principal, by id or name")
        .path_param("key", "The principal's id or name")
        .response(200, "The principal", Some(principal()))
        .response(404, "No such principal", None);
    for path in ["/rest/principals/{key}", "/rest/principal/{key}"] {
        routes
            .put(path, UPDATE, modify)
            .summary("Modifies a principal; change-mode add, remove or set (the default)")
            .change_mode(false, "add, remove or set (the default) the lists given")
            .path_param("key", "The principal's id or name")
            .body("application/json", principal())
            .response(200, "The modified principal", Some(principal()))
            .response(409, "Stale version, or the name is taken", None);
        routes
            .delete(path, DELETE, access_resources::remove::<Principals>)
            .summary("Deletes a principal")
            .path_param("key", "The principal's id or name")
            .response(200, "Deleted", Some(object(&[])));
    }
    routes
        .post("/rest/principals", CREATE, create)
        .summary("Creates a principal")
        .json_body(required(principal(), &["name"]))
        .response(201, "The created principal", Some(principal()))
        .response(409, "The name is taken", None);
}

/// What a request body gives (`None`: not given).
struct Given {
    common: Common,
    roles: Option<Vec<Value>>,
    groups: Option<Vec<Value>>,
    users: Option<Vec<Value>>,
}

fn read_given(f: &mut Fields<'_>, authority: &Authority) -> Given {
    let name = f.string("name");
    check_name(f, &name);
    let roles = f.references("attachedRoles", "id").map(|roles| {
        roles
            .into_iter()
            .filter_map(|key| {
                let found = authority.find_role(&key);
                if found.is_none() {
                    f.problem(
                        "attachedRoles",
                        format!("no role '{key}' (see /rest/roles)"),
                    );
                }
                found.map(|r| json!({"id": r.id, "name": r.name}))
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
        common: Common {
            name,
            description: f.string("description"),
            version: f.integer("version"),
        },
        roles,
        groups,
        users,
    }
}

/// Principals: see [`access_resources`](crate::access_resources).
struct Principals;

impl access_resources::Resource for Principals {
    const COLLECTION: AccessCollection = AccessCollection::Principal;
}

async fn create(State(state): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let summary = "The principal was not created";
    let authority = state.access().authority();
    let read = |f: &mut Fields<'_>| read_given(f, &authority);
    let given = access_resources::read_new(&body, summary, read, |g| &g.common)?;
    let record = json!({
        "name": given.common.name.unwrap_or_default(),
        "description": given.common.description,
        "attachedRoles": given.roles.unwrap_or_default(),
        "groups": given.groups.unwrap_or_default(),
        "users": given.users.unwrap_or_default(),
    });
    let created = stored(&state, true, move |s| s.create_principal(record, summary));
    Ok(access_resources::created(
        &state,
        "/rest/principals",
        created.await?,
    ))
}

async fn modify(ItemChange(state, params, _, key, body): ItemChange) -> ApiResult<Json<Value>> {
    let (mode, body, summary) =
        access_resources::change_request(&params, &body, &key, "principal")?;
    let authority = state.access().authority();
    let given = read_object(&body, &summary, |f| read_given(f, &authority))?;
    let (roles, groups, users) = (given.roles, given.groups, given.users);
    let edit = move |record: &mut Value| {
        change_list(record, "attachedRoles", roles, mode, &["id"]);
        change_list(record, "groups", groups, mode, &["name", "type"]);
        change_list(record, "users", users, mode, &["name", "type"]);
    };
    access_resources::modify(
        &state,
        AccessCollection::Principal,
        key,
        given.common,
        summary,
        edit,
    )
    .await
}
