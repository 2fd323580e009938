//! Virtual containers (spec 2.10, 4.9) and their ACL rules (4.1; affinity and comparator
//! are ignored). The spec shows only the record; the read interface here is the usual
//! one: `GET /rest/vcs` (a list, the caller's own or all for an administrator) and
//! `GET /rest/vcs/<id>`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use drover_auth::Permission;
use drover_domain::dates::WireDates;
use drover_domain::request::summary;
use drover_sched::request::{ContainerChange, ContainerRequest};
use drover_sched::virtual_container::{Members, VirtualContainer};
use drover_sched::{Requester, Scheduler};
use serde_json::{Value, json};

use crate::AppState;
use crate::acl;
use crate::error::{ApiError, ApiResult};
use crate::input::read_object;
use crate::openapi::schema::*;
use crate::params::{ChangeMode, ListParams};
use crate::reply::{self, parse_json};
use crate::routes::{Access, Caller, Collection, ItemChange, ItemRead, Routes};
use crate::wire::{self, Zero};

const READ: Access = Access::Needs(Permission::read("vcs"));
const CREATE: Access = Access::Needs(Permission::create("vcs"));
const UPDATE: Access = Access::Needs(Permission::update("vcs"));
const DELETE: Access = Access::Needs(Permission::delete("vcs"));

/// The paths of one, of its ACL rules, and of one rule.
const ITEM: &str = "/rest/vcs/{id}";
const RULES: &str = "/rest/vcs/{id}/acl-rules";
const RULE: &str = "/rest/vcs/{id}/acl-rules/{rule}";
/// What deleting one and its ACL rules' routes say (see [`acl::register`]).
const DOCS: acl::Docs = acl::Docs {
    noun: "virtual container",
    id: "The container's id",
    delete: ("Deletes a virtual container", "Deleted"),
    put_rules: "Adds ACL rules (affinity and comparator are ignored)",
};

pub(crate) fn register(routes: &mut Routes) {
    let container = || {
        object(&[
            ("id", string()),
            ("description", string_or_null()),
            ("creator", string()),
        ])
    };
    routes.collection(
        Collection {
            path: "/rest/vcs",
            item_path: "/rest/vcs/{id}",
            access: READ,
            schema: crate::openapi::schema::required(container(), &["id"]),
            list: (
                "Virtual containers: the caller's own, or all for an administrator",
                "Virtual containers",
            ),
            item: (
                "One virtual container",
                "The container's id",
                "The container",
                "No such container (or not the caller's)",
            ),
        },
        list,
        one,
    );
    routes
        .post("/rest/vcs", CREATE, create)
        .summary("Creates a virtual container")
        .body(
            "application/json",
            object(&[("description", string()), ("owner", owner())]),
        )
        .response(201, "Created", Some(object(&[("id", string())])));
    routes
        .put("/rest/vcs/{id}", UPDATE, modify)
        .summary("add/remove members (jobs, nodes, reservations, virtualContainers, virtualMachines) or set description, flags, owner, variables; change-mode required")
        .path_param("id", "The container's id")
        .change_mode(true, "add or remove members, or set the container's own attributes")
        .json_body(object(&[
            ("jobs", references()),
            ("nodes", references()),
            ("reservations", references()),
            ("virtualContainers", references()),
            ("virtualMachines", references()),
            ("description", string()),
            ("flags", strings()),
            ("owner", owner()),
            ("variables", any_object()),
        ]))
        .response(200, "Changed", Some(object(&[("messages", strings())])));
    acl::register::<Containers>(routes);
}

/// `{name, type}`, the name required.
fn owner() -> serde_json::Value {
    required(object(&[("name", text()), ("type", string())]), &["name"])
}

/// `[{id}]`.
fn references() -> serde_json::Value {
    array(required(object(&[("id", text())]), &["id"]))
}

fn visible(container: &VirtualContainer, caller: &Caller) -> bool {
    let by = caller.requester();
    by.over_all || container.belongs_to(&by.user)
}

async fn list(
    State(state): State<AppState>,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    let containers = state.scheduler().containers();
    let mine: Vec<&VirtualContainer> = containers.iter().filter(|c| visible(c, &caller)).collect();
    let dates = &state.settings().dates;
    Ok(reply::list_rendered(
        &mine,
        &params,
        dates,
        |c, dates, version| render(c, dates, version),
    ))
}

async fn one(ItemRead(state, params, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    let containers = state.scheduler().containers();
    let container = containers
        .iter()
        .find(|c| c.id == id && visible(c, &caller))
        .ok_or_else(|| ApiError::not_found(format!("No virtual container '{id}'")))?;
    Ok(Json(render(
        container,
        &state.settings().dates,
        params.api_version.number(),
    )))
}

async fn create(State(state): State<AppState>, caller: Caller, body: Bytes) -> ApiResult<Response> {
    crate::input::within_submission_bound(&state, &caller, &body, summary::CONTAINER_NOT_CREATED)?;
    let body: Value = parse_json(&body)?;
    let (description, owner) = read_object(&body, summary::CONTAINER_NOT_CREATED, |f| {
        (f.string("description"), acl::owner(f))
    })?;
    let by = caller.requester();
    // The creator is whoever the request acts for: the proxied user when proxying is
    // enabled and honoured for this caller, else the caller. Never a name from the body.
    let creator = by.user.clone();
    let id = state
        .scheduler()
        .create_container(
            ContainerRequest {
                description,
                owner,
                creator,
            },
            by,
        )
        .await
        .map_err(ApiError::from)?;
    Ok(reply::created(
        state.settings(),
        &format!("/rest/vcs/{id}"),
        json!({ "id": id }),
    ))
}

const MEMBER_KINDS: [&str; 5] = [
    "jobs",
    "nodes",
    "reservations",
    "virtualContainers",
    "virtualMachines",
];

async fn modify(ItemChange(state, params, caller, id, body): ItemChange) -> ApiResult<Json<Value>> {
    let mode = ChangeMode::parse(params.raw.get("change-mode")?, None)?;
    let body: Value = parse_json(&body)?;
    let summary = summary::container_not_changed(&id);
    let change = read_object(&body, &summary, |f| {
        let allowed: &[&str] = match mode {
            ChangeMode::Set => &["description", "flags", "owner", "variables"],
            _ => &MEMBER_KINDS,
        };
        let others: Vec<String> = f
            .keys()
            .filter(|k| !allowed.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in others {
            f.problem(
                &key,
                format!(
                    "cannot be changed with change-mode={} (use {})",
                    match mode {
                        ChangeMode::Add => "add",
                        ChangeMode::Remove => "remove",
                        ChangeMode::Set => "set",
                    },
                    allowed.join(", ")
                ),
            );
        }
        match mode {
            ChangeMode::Set => ContainerChange::Set {
                description: f.string("description"),
                flags: f
                    .strings("flags")
                    .map(|flags| flags.into_iter().map(|x| x.to_ascii_uppercase()).collect()),
                owner: acl::owner(f),
                variables: f.string_map("variables"),
            },
            ChangeMode::Add | ChangeMode::Remove => {
                let mut list = |key: &str| f.references(key, "id").unwrap_or_default();
                let members = Members {
                    jobs: list("jobs"),
                    nodes: list("nodes"),
                    reservations: list("reservations"),
                    virtual_containers: list("virtualContainers"),
                    virtual_machines: list("virtualMachines"),
                };
                if mode == ChangeMode::Add {
                    ContainerChange::Add(members)
                } else {
                    ContainerChange::Remove(members)
                }
            }
        }
    })?;
    acl::change::<Containers>(&state, &caller, &id, change).await
}

/// Deletion and ACL rules: see [`acl::register`].
struct Containers;

impl acl::Governed for Containers {
    type Change = ContainerChange;
    const PATHS: [&'static str; 3] = [ITEM, RULES, RULE];
    const ACCESS: [Access; 2] = [UPDATE, DELETE];
    const DOCS: acl::Docs = DOCS;
    const PUT_RULES: fn(Vec<acl::AclRule>) -> ContainerChange = ContainerChange::PutRules;
    const DELETE_RULE: fn(String) -> ContainerChange = ContainerChange::DeleteRule;
    const DELETE: ContainerChange = ContainerChange::Delete;

    async fn apply(s: &Scheduler, id: &str, c: Self::Change, by: Requester) -> acl::Answer {
        s.change_container(id, c, by).await
    }
}

/// The record of spec 2.10.
pub(crate) fn render(c: &VirtualContainer, dates: &WireDates, version: u32) -> Value {
    let ids = |list: &[String]| list.iter().map(|id| json!({"id": id})).collect::<Vec<_>>();
    json!({
        "id": c.id,
        "aclRules": c.acl.iter().map(|r| json!({
            "type": r.kind, "value": r.value, "affinity": null, "comparator": null,
        })).collect::<Vec<_>>(),
        "createDate": wire::date(dates, version, Some(c.created), Zero::Date),
        "creator": c.creator,
        "description": c.description,
        "flags": c.flags,
        "jobs": ids(&c.members.jobs),
        "nodes": ids(&c.members.nodes),
        "owner": c.owner.as_ref().map(|o| json!({"name": o.name, "type": o.kind})),
        "reservations": ids(&c.members.reservations),
        "variables": c.variables,
        "virtualContainers": ids(&c.members.virtual_containers),
        "virtualMachines": ids(&c.members.virtual_machines),
    })
}
