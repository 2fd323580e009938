//! `/rest/services` (spec 2.11, 4.10): services made from templates or types, over the
//! stored [`ServiceRecords`] of `drover-cloud`; the service controller
//! (`drover_control::services`) brings them up and tears them down. `<key>` is an id or a
//! name.
//!
//! - A creation is read here and made by `drover_control::service_creation` (who may
//!   create for whom, the account, the plan of the whole tree, images, the user's limit);
//!   the answer is `201 {"name"}` of the top-level service, which the controller sets up
//!   from its start date on.
//! - An ordinary user sees and changes their own services; the others are answered as
//!   if they did not exist.
//! - `PUT` changes `attributes` (each key given replaces that key, `null` removes it),
//!   `status` and `statusCode`; a body that changes anything else, `attributes.sched`
//!   included, is refused (400). Fields given with their stored value are accepted, so
//!   that a client may send back what it read.
//! - `DELETE` marks the service and what it holds for teardown and answers `{}`; from
//!   then on it is not found (404), while the controller tears it down and its record
//!   goes once everything it made is gone. A service others depend on is not deleted
//!   (409) unless `force-delete=true`; one its container's template defines never alone
//!   (409).
//! - `show-vc=true` answers `attributes.sched.vc` as the virtual container itself;
//!   `show-recursive-vc=true` also its nested containers, jobs and VMs, each in full.

use std::collections::HashSet;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use drover_auth::Permission;
use drover_cloud::{CloudError, ServiceRecords, StoredService};
use drover_control::service_creation::{Creation, Creator, NOT_CREATED, ServiceMaker};
use drover_domain::dates::WireDates;
use drover_domain::service::{self, ServiceEntry};
use drover_domain::service_template::{ServiceType, TemplateKey};
use drover_domain::virtual_container::VirtualContainer;
use drover_domain::vm::MAX_TIME_TO_LIVE;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::input::{Fields, read_object};
use crate::openapi::schema::{integer, object, string, strings};
use crate::params::{CommonParams, ListParams};
use crate::reply::{self, parse_json};
use crate::routes::{Access, Caller, ItemChange, ItemRead, Routes, Submission};

const READ: Access = Access::Needs(Permission::read("services"));
const CREATE: Access = Access::Needs(Permission::create("services"));
const UPDATE: Access = Access::Needs(Permission::update("services"));
const DELETE: Access = Access::Needs(Permission::delete("services"));

const PATH: &str = "/rest/services";

/// The fields of a creation body, and of an entry of its `data`.
const CREATE_FIELDS: &[&str] = &[
    "user",
    "account",
    "startDateRequested",
    "earliestStartDateRequested",
    "durationRequested",
    "data",
];
const ENTRY_FIELDS: &[&str] = &[
    "name",
    "serviceTemplate",
    "type",
    "extends",
    "label",
    "includedServices",
    "attributes",
];
/// What the system keeps for itself and never answers.
const INTERNAL: &[&str] = &["startsAt", "endsAt", "removeWhenDown"];

fn schema() -> Value {
    object(&[
        ("id", string()),
        ("name", string()),
        ("type", string()),
        ("label", string()),
        ("user", string()),
        ("account", string()),
        ("status", string()),
        ("statusCode", integer()),
        ("phase", string()),
        ("parent", string()),
        ("includedServices", strings()),
        ("startDateRequested", string()),
        ("startDateScheduled", string()),
        ("durationRequested", integer()),
        (
            "serviceTemplate",
            object(&[("id", string()), ("name", string())]),
        ),
        ("attributes", object(&[])),
        ("version", integer()),
    ])
}

pub(crate) fn register(routes: &mut Routes) {
    let key = ("key", "The service's id or name");
    routes
        .get(PATH, READ, list)
        .flag("show-vc", "Also answer each service's virtual container")
        .flag(
            "show-recursive-vc",
            "Also answer the containers of included services",
        )
        .summary(
            "Services: the caller's own, or all for an administrator (show-vc, show-recursive-vc)",
        )
        .list()
        .response(
            200,
            "Services",
            Some(crate::openapi::schema::envelope(schema())),
        );
    routes
        .get("/rest/services/{key}", READ, one)
        .summary("One service, by id or name (show-vc, show-recursive-vc)")
        .flag("show-vc", "Also answer the service's virtual container")
        .flag(
            "show-recursive-vc",
            "Also answer the containers of included services",
        )
        .path_param(key.0, key.1)
        .response(200, "The service", Some(schema()))
        .response(404, "No such service (or not the caller's)", None);
    routes
        .post(PATH, CREATE, create)
        .idempotent()
        .summary("Creates a service from entries (data) naming templates or types")
        .body("application/json", {
            let mut body = object(&[
                ("user", string()),
                ("account", string()),
                ("startDateRequested", crate::openapi::schema::date_input()),
                (
                    "earliestStartDateRequested",
                    crate::openapi::schema::date_input(),
                ),
                (
                    "durationRequested",
                    crate::openapi::schema::integer_in(1, MAX_TIME_TO_LIVE),
                ),
                (
                    "data",
                    // At least one entry.
                    json!({"type": "array", "items": {"type": "object"}, "minItems": 1}),
                ),
            ]);
            body["additionalProperties"] = json!(false);
            crate::openapi::schema::required(body, &["data"])
        })
        .response(
            201,
            "The top-level service's name",
            Some(object(&[("name", string())])),
        )
        .response(400, "An entry breaks a rule of 4.10", None);
    routes
        .put("/rest/services/{key}", UPDATE, modify)
        .summary("Changes attributes (not sched), status and statusCode of a service")
        .path_param(key.0, key.1)
        .body("application/json", schema())
        .response(200, "The changed service", Some(schema()))
        .response(
            400,
            "A field other than attributes, status, statusCode is changed",
            None,
        )
        .response(404, "No such service", None);
    routes
        .delete("/rest/services/{key}", DELETE, remove)
        .flag("force-delete", "Skip the check of services depending on it")
        .summary("Tears a service down and deletes it (force-delete skips the dependency check)")
        .path_param(key.0, key.1)
        .response(200, "Teardown begun", Some(object(&[])))
        .response(404, "No such service", None)
        .response(409, "Other services depend on it", None);
}

/// A deleted service is gone at once for everybody, while its teardown goes on.
fn visible(service: &StoredService, caller: &Caller) -> bool {
    !service.value.remove_when_down
        && (caller.over_all()
            || caller.effective_user.as_deref() == Some(service.value.user.as_str()))
}

/// The wire shape: the stored form less the system's own fields.
fn render(stored: &StoredService) -> Value {
    let mut out = stored.document();
    if let Some(map) = out.as_object_mut() {
        for key in INTERNAL {
            map.remove(*key);
        }
    }
    out
}

async fn blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&ServiceRecords) -> Result<T, CloudError> + Send + 'static,
) -> ApiResult<T> {
    crate::state::blocking_on(state.service_records().clone(), work).await
}

/// The service `key`, if the caller may see it.
async fn find(state: &AppState, caller: &Caller, key: &str) -> ApiResult<StoredService> {
    let owned = key.to_string();
    let found = blocking(state, move |records| records.get(&owned)).await?;
    if visible(&found, caller) {
        Ok(found)
    } else {
        Err(ApiError::not_found(format!("No service '{key}'")))
    }
}

/// What `show-vc` and `show-recursive-vc` ask for.
#[derive(Clone, Copy)]
enum ShowVc {
    No,
    Own,
    Recursive,
}

fn show_vc(params: &CommonParams) -> ApiResult<ShowVc> {
    Ok(if params.raw.flag("show-recursive-vc")? {
        ShowVc::Recursive
    } else if params.raw.flag("show-vc")? {
        ShowVc::Own
    } else {
        ShowVc::No
    })
}

async fn list(
    State(state): State<AppState>,
    common: CommonParams,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    let show = show_vc(&common)?;
    let all = blocking(&state, |records| records.all()).await?;
    let mine: Vec<Value> = all
        .iter()
        .filter(|s| visible(s, &caller))
        .map(render)
        .collect();
    let page = params.query.run(&mine);
    let items = page
        .items
        .into_iter()
        .map(|s| with_vc(&state, s.clone(), show))
        .collect();
    Ok(reply::listed(page.total, items, &params))
}

async fn one(ItemRead(state, common, caller, key): ItemRead) -> ApiResult<Json<Value>> {
    let show = show_vc(&common)?;
    let found = find(&state, &caller, &key).await?;
    Ok(Json(with_vc(&state, render(&found), show)))
}

/// `attributes.sched.vc` answered as the container itself (and, recursively, what it
/// holds), when asked. Only containers of the service's user are shown (a recorded id
/// may have been given to another's container since), and each at most once (containers
/// may hold each other in a ring).
fn with_vc(state: &AppState, mut service: Value, show: ShowVc) -> Value {
    if matches!(show, ShowVc::No) {
        return service;
    }
    let user = service
        .get("user")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(vc) = service.pointer_mut("/attributes/sched/vc") else {
        return service;
    };
    let Some(id) = vc.get("id").and_then(Value::as_str).map(String::from) else {
        return service;
    };
    let shown = Shown {
        state,
        containers: state.scheduler().containers(),
        user: &user,
        dates: &state.settings().dates,
        recursive: matches!(show, ShowVc::Recursive),
    };
    *vc = shown.container(&id, 0, &mut HashSet::new());
    service
}

/// What `show-vc` and `show-recursive-vc` read from.
struct Shown<'a> {
    state: &'a AppState,
    containers: Arc<Vec<VirtualContainer>>,
    user: &'a str,
    dates: &'a WireDates,
    recursive: bool,
}

impl Shown<'_> {
    fn container(&self, id: &str, depth: usize, seen: &mut HashSet<String>) -> Value {
        let Some(container) = self
            .containers
            .iter()
            .find(|c| c.id == id && c.belongs_to(self.user))
        else {
            return json!({"id": id});
        };
        if !seen.insert(id.to_string()) {
            return json!({"id": id});
        }
        let mut out = crate::virtual_containers::render(container, self.dates, 1);
        if !self.recursive || depth > service::MAX_DEPTH {
            return out;
        }
        let state = self.state;
        let nested: Vec<Value> = container
            .members
            .virtual_containers
            .iter()
            .map(|c| self.container(c, depth + 1, seen))
            .collect();
        let jobs: Vec<Value> = container
            .members
            .jobs
            .iter()
            .map(|j| match state.scheduler().job(j) {
                Some(job) => json!({"id": job.id, "name": job.spec.custom_name,
                                    "state": format!("{:?}", job.status.state),
                                    "user": job.status.exec_user}),
                None => json!({"id": j}),
            })
            .collect();
        let vms = state.scheduler().vms();
        let machines: Vec<Value> = container
            .members
            .virtual_machines
            .iter()
            .map(|v| match vms.iter().find(|vm| &vm.id == v) {
                Some(vm) => {
                    json!({"id": vm.id, "state": vm.phase.state(), "substate": vm.phase.substate(),
                                   "node": {"id": vm.node}, "os": vm.image})
                }
                None => json!({"id": v}),
            })
            .collect();
        out["virtualContainers"] = nested.into();
        out["jobs"] = jobs.into();
        out["virtualMachines"] = machines.into();
        out
    }
}

/// A creation body, read.
pub(crate) fn read_creation(f: &mut Fields<'_>, dates: &WireDates) -> Creation {
    f.only(CREATE_FIELDS, "not a field of a service creation");
    let start = match f.date("startDateRequested", dates) {
        Some(start) => Some(start),
        None => f.date("earliestStartDateRequested", dates),
    };
    let duration = f.integer_in("durationRequested", 1, MAX_TIME_TO_LIVE);
    let entries = f
        .each("data", read_entry)
        .map(|e| e.into_iter().flatten().collect())
        .unwrap_or_default();
    if !f.has("data") {
        f.problem("data", "required: the service entries");
    }
    Creation {
        user: f.string("user"),
        account: f.string("account"),
        start,
        duration,
        entries,
    }
}

fn read_entry(e: &mut Fields<'_>) -> Option<ServiceEntry> {
    e.only(ENTRY_FIELDS, "not a field of a service entry");
    let name = e.string("name");
    if name.is_none() {
        e.problem("name", "required");
    }
    let template = match e.raw("serviceTemplate") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(TemplateKey::Name(name.clone())),
        Some(Value::Object(_)) => e
            .object("serviceTemplate", |t| {
                match (t.string("id"), t.string("name")) {
                    (Some(id), _) => Some(TemplateKey::Id(id)),
                    (None, Some(name)) => Some(TemplateKey::Name(name)),
                    _ => {
                        t.problem("name", "give the template's name or id");
                        None
                    }
                }
            })
            .flatten(),
        Some(_) => {
            e.problem(
                "serviceTemplate",
                "expected a template's name, {name} or {id}",
            );
            None
        }
    };
    let kind = e.string("type").and_then(|text| {
        let kind = ServiceType::parse(&text);
        if kind.is_none() {
            e.problem(
                "type",
                format!("'{text}' is not one of container, vm, storage, pm"),
            );
        }
        kind
    });
    let attributes = match e.raw("attributes") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => {
            e.problem("attributes", "expected an object");
            Map::new()
        }
    };
    Some(ServiceEntry {
        name: name?,
        template,
        kind,
        extends: e.string("extends"),
        label: e.string("label"),
        included_services: e.strings("includedServices").unwrap_or_default(),
        attributes,
    })
}

async fn create(Submission(state, _params, caller, body): Submission) -> ApiResult<Response> {
    crate::input::within_submission_bound(&state, &caller, &body, NOT_CREATED)?;
    let body = parse_json(&body)?;
    let dates = state.settings().dates.clone();
    let creation = read_object(&body, NOT_CREATED, |f| read_creation(f, &dates))?;
    let user = caller.effective_user.clone().unwrap_or_default();
    let creator = Creator {
        identity: caller
            .identity
            .as_ref()
            .map_or_else(|| user.clone(), |i| i.name.clone()),
        user,
        over_all: caller.over_all(),
    };
    let top = maker(&state).create(creation, creator).await?;
    let location = format!("{PATH}/{}", top.id);
    Ok(reply::created(
        state.settings(),
        &location,
        json!({"name": top.value.name}),
    ))
}

/// What creations read and write.
fn maker(state: &AppState) -> ServiceMaker {
    ServiceMaker {
        records: state.service_records().clone(),
        templates: state.service_templates().clone(),
        images: state.images().clone(),
        ledger: state.accounting().cloned(),
        events: state.events().clone(),
        wake: state.service_wake().clone(),
        user_service_max_count: state.settings().cloud.user_service_max_count,
    }
}

async fn modify(
    ItemChange(state, _params, caller, key, body): ItemChange,
) -> ApiResult<Json<Value>> {
    let summary = format!("The service {key} was not changed");
    crate::input::within_submission_bound(&state, &caller, &body, &summary)?;
    let body = parse_json(&body)?;
    let Some(given) = body.as_object().cloned() else {
        return Err(ApiError::bad_request(
            summary,
            "the body must be a JSON object",
        ));
    };
    let found = find(&state, &caller, &key).await?;
    let id = found.id.clone();
    let limit = state.settings().max_submission_bytes;
    let admin = caller.over_all();
    let changed = blocking(&state, move |records| {
        records.update(&id, |service| {
            apply_change(service, &given).map_err(|mut reasons| {
                reasons.push(
                    "change only attributes (not attributes.sched), status and statusCode \
                     (spec part 8)"
                        .into(),
                );
                CloudError::Invalid {
                    summary: summary.clone(),
                    reasons,
                }
            })?;
            // What PUTs gather on a service stays within what one request may carry.
            let carried = carried_bytes(service);
            if !admin && carried > limit {
                return Err(CloudError::Invalid {
                    summary: summary.clone(),
                    reasons: vec![
                        format!(
                            "its attributes and status would take {carried} bytes; an ordinary \
                             user's service may carry {limit} ([scheduler.limits] \
                             max_submission_bytes)"
                        ),
                        "remove attributes you no longer need (give them as null)".into(),
                    ],
                });
            }
            Ok(())
        })
    })
    .await?;
    Ok(Json(render(&changed)))
}

/// The bytes of what clients write on a service: its attributes but the system's
/// `sched`, and its status.
fn carried_bytes(service: &drover_domain::service::Service) -> usize {
    let attributes: usize = service
        .attributes
        .iter()
        .filter(|(key, _)| key.as_str() != "sched")
        .map(|(key, value)| key.len() + serde_json::to_vec(value).map_or(0, |v| v.len()))
        .sum();
    attributes + service.status.len()
}

/// Applies a `PUT` body; every field it would change but may not is named.
fn apply_change(
    service: &mut drover_domain::service::Service,
    given: &Map<String, Value>,
) -> Result<(), Vec<String>> {
    let stored = serde_json::to_value(&*service).unwrap_or_default();
    let mut problems = Vec::new();
    for (key, value) in given {
        match key.as_str() {
            "status" => match value {
                Value::String(text) if text.len() <= 1024 => service.status = text.clone(),
                _ => problems.push("status: expected a string of at most 1024 bytes".into()),
            },
            "statusCode" => match value.as_i64() {
                Some(code) => service.status_code = code,
                None => problems.push("statusCode: expected an integer".into()),
            },
            "attributes" => match value {
                Value::Object(attributes) => {
                    for (name, value) in attributes {
                        if name == "sched" {
                            if Some(value) != service.attributes.get("sched") {
                                problems.push(
                                    "attributes.sched: is the system's and cannot be changed (4.10 rule 5)"
                                        .into(),
                                );
                            }
                        } else if value.is_null() {
                            service.attributes.remove(name);
                        } else {
                            service.attributes.insert(name.clone(), value.clone());
                        }
                    }
                }
                _ => problems.push("attributes: expected an object".into()),
            },
            "id" | "version" => {}
            other if stored.get(other) == Some(value) => {}
            other => problems.push(format!(
                "{other}: cannot be changed; only attributes, status and statusCode can"
            )),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

async fn remove(ItemRead(state, params, caller, key): ItemRead) -> ApiResult<Json<Value>> {
    let force = params.raw.flag("force-delete")?;
    let found = find(&state, &caller, &key).await?;
    let summary = format!("The service {key} was not deleted");
    if found.value.template_defined
        && let Some(container) = &found.value.parent
    {
        return Err(CloudError::Conflict {
            summary,
            reason: format!(
                "it is part of what the template of its container '{container}' defines, \
                 and goes only with it"
            ),
            advice: Some(format!("delete '{container}' (or its top-level service)")),
        }
        .into());
    }
    blocking(&state, move |records| {
        if !force {
            let dependents = records.dependents(&found.value)?;
            if !dependents.is_empty() {
                return Err(CloudError::Conflict {
                    summary,
                    reason: format!(
                        "the services {} depend on it",
                        dependents
                            .iter()
                            .map(|d| format!("'{d}'"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    advice: Some("delete them first, or delete with force-delete=true".into()),
                });
            }
        }
        records.tear_down(&found.id, true, "deleted")
    })
    .await?;
    state.service_wake().notify_one();
    Ok(reply::deleted())
}
