//! Virtual machines (spec 2.9, 4.7): `/rest/vms`, `/rest/vms/<id>` and a node's VMs,
//! `/rest/nodes/<id>/vms`, over the engine's VMs. An ordinary user sees and changes
//! their own VMs only; the others are answered as if they did not exist.
//!
//! Creating, migrating and destroying answer `202 {"jobId"}`: the system job doing the
//! work (the decisions page), whose progress the VM's `state`/`substate` and the job
//! show; while another operation is under way (or there is no room) the job waits. A `PUT` with `node` is a migration and ignores every other field (`ANY`: the
//! scheduler picks the node); without `node` it changes the modifiable fields and
//! answers `{"messages"}` (a `powerState` change powers the guest off or on). Fields
//! outside those the spec lists for each operation are refused by name.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use drover_auth::Permission;
use drover_cloud::CloudError;
use drover_domain::dates::WireDates;
use drover_domain::request::summary::{self, VM_NOT_CREATED};
use drover_sched::engine::VmAnswer;
use drover_sched::vm::{Vm, VmChange, VmCommand, VmRequest};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::input::{Fields, read_object};
use crate::openapi::schema::{integer, nullable, object, string, strings};
use crate::params::ListParams;
use crate::reply::{self, parse_json};
use crate::routes::{Access, Caller, Collection, ItemChange, ItemRead, Routes, Submission};
use crate::wire::{self, Zero};

const READ: Access = Access::Needs(Permission::read("vms"));
const CREATE: Access = Access::Needs(Permission::create("vms"));
const UPDATE: Access = Access::Needs(Permission::update("vms"));
const DELETE: Access = Access::Needs(Permission::delete("vms"));

/// What a create body may give (spec 2.9, create; `description` too).
const CREATE_FIELDS: &[&str] = &[
    "id",
    "totalDisk",
    "totalMemory",
    "totalProcessors",
    "node",
    "os",
    "sovereign",
    "storage",
    "template",
    "requestedTimeToLive",
    "triggers",
    "variables",
    "description",
];

/// What a modify body may give (spec 2.9, modify).
const MODIFY_FIELDS: &[&str] = &[
    "genericEvents",
    "genericMetrics",
    "os",
    "powerState",
    "state",
    "triggers",
    "variables",
];

/// What creating a VM (`new`) or changing one reads: those fields, no others (a change
/// with `node` is a migration, which reads only `node`).
fn input(new: bool) -> Value {
    use crate::openapi::schema::{any_object, array, boolean, integer_in, one_of};
    let node = crate::openapi::schema::required(object(&[("id", string())]), &["id"]);
    let mut input = if new {
        object(&[
            ("id", string()),
            (
                "totalProcessors",
                integer_in(0, drover_domain::limits::MAX_VM_PROCESSORS.into()),
            ),
            ("totalMemory", integer_in(0, 1 << 30)),
            ("totalDisk", integer_in(0, 1 << 40)),
            ("node", node),
            ("os", string()),
            ("sovereign", boolean()),
            ("storage", string()),
            ("template", string()),
            ("requestedTimeToLive", integer()),
            ("triggers", array(any_object())),
            (
                "variables",
                json!({"type": "object", "additionalProperties": {"type": "string"}}),
            ),
            ("description", string()),
        ])
    } else {
        object(&[
            ("node", node),
            ("genericEvents", array(any_object())),
            (
                "genericMetrics",
                json!({"type": "object", "additionalProperties": {"type": "number"}}),
            ),
            ("os", string()),
            ("powerState", one_of(&["ON", "OFF"])),
            (
                "state",
                one_of(
                    &drover_domain::node::NodeState::ALL
                        .map(drover_domain::node::NodeState::as_str),
                ),
            ),
            ("triggers", array(any_object())),
            (
                "variables",
                json!({"type": "object", "additionalProperties": {"type": "string"}}),
            ),
        ])
    };
    input["additionalProperties"] = json!(false);
    input
}

fn schema() -> Value {
    object(&[
        ("id", string()),
        ("node", nullable(object(&[("id", string())]))),
        ("os", nullable(string())),
        ("state", string()),
        ("substate", string()),
        ("powerState", string()),
        ("totalProcessors", integer()),
        ("totalMemory", integer()),
        ("totalDisk", nullable(integer())),
        ("requestedTimeToLive", nullable(integer())),
        ("flags", strings()),
        ("job", nullable(object(&[("id", string())]))),
    ])
}

pub(crate) fn register(routes: &mut Routes) {
    routes.collection(
        Collection {
            path: "/rest/vms",
            item_path: "/rest/vms/{id}",
            access: READ,
            schema: crate::openapi::schema::required(schema(), &["id"]),
            list: (
                "Virtual machines: the caller's own, or all for an administrator",
                "VMs",
            ),
            item: (
                "One virtual machine",
                "The VM's id",
                "The VM",
                "No such VM (or not the caller's)",
            ),
        },
        list,
        one,
    );
    routes
        .get("/rest/nodes/{id}/vms", READ, of_node)
        .summary("The VMs a node hosts (those the caller may see)")
        .path_param("id", "The node's id")
        .list()
        .response(200, "VMs", Some(crate::openapi::schema::envelope(schema())))
        .response(404, "No such node", None);
    let job = || object(&[("jobId", string())]);
    routes
        .post("/rest/vms", CREATE, create)
        .idempotent()
        .summary("Creates a VM: a genericVM-setup system job boots its guest")
        .json_body(input(true))
        .response(
            202,
            "The setup job (it waits while no node has room)",
            Some(job()),
        )
        .response(
            400,
            "A field is wrong, or no node could ever hold the VM",
            None,
        )
        .response(409, "The id is taken", None);
    routes
        .put("/rest/vms/{id}", UPDATE, modify)
        .summary("Changes a VM (powerState, state, variables...), or migrates it when the body has node ({id} or ANY)")
        .path_param("id", "The VM's id")
        .json_body(input(false))
        .response(200, "Changed", Some(object(&[("messages", strings())])))
        .response(202, "A migration: the genericVM-migrate job (it waits for an operation under way, and for room)", Some(job()))
        .response(409, "A power change while an operation is under way, or a migration of a VM being destroyed", None);
    routes
        .delete("/rest/vms/{id}", DELETE, destroy)
        .summary("Destroys a VM: a genericVM-destroy system job ends its guest")
        .path_param("id", "The VM's id")
        .response(
            202,
            "The destroy job (it waits for an operation under way)",
            Some(job()),
        );
}

/// Whether the caller may see `vm`: their own, or any with a permission over all.
pub(crate) fn visible(vm: &Vm, caller: &Caller) -> bool {
    caller.over_all() || caller.effective_user.as_deref() == Some(vm.owner.as_str())
}

async fn list(
    State(state): State<AppState>,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    let vms = state.scheduler().vms();
    let mine: Vec<&Vm> = vms.iter().filter(|v| visible(v, &caller)).collect();
    Ok(reply::list_rendered(
        &mine,
        &params,
        &state.settings().dates,
        |v, dates, version| render(v, dates, version),
    ))
}

async fn of_node(
    State(state): State<AppState>,
    Path(node): Path<String>,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    if !state.scheduler().nodes().iter().any(|n| n.id() == node) {
        return Err(ApiError::not_found(format!("No node '{node}'")));
    }
    let vms = state.scheduler().vms();
    let hosted: Vec<&Vm> = vms
        .iter()
        .filter(|v| v.node == node && visible(v, &caller))
        .collect();
    Ok(reply::list_rendered(
        &hosted,
        &params,
        &state.settings().dates,
        |v, dates, version| render(v, dates, version),
    ))
}

async fn one(ItemRead(state, params, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    let vms = state.scheduler().vms();
    let vm = vms
        .iter()
        .find(|v| v.id == id && visible(v, &caller))
        .ok_or_else(|| ApiError::not_found(format!("No VM '{id}'")))?;
    Ok(Json(render(
        vm,
        &state.settings().dates,
        params.api_version.number(),
    )))
}

/// `202 {"jobId"}`.
fn job_accepted(answer: VmAnswer) -> Response {
    match answer {
        VmAnswer::Job(id) => (StatusCode::ACCEPTED, Json(json!({ "jobId": id }))).into_response(),
        VmAnswer::Said(messages) => reply::messages(messages).into_response(),
    }
}

/// A VM's host node: `{"id": ...}` or the id itself.
fn node_of(f: &mut Fields<'_>) -> Option<String> {
    match f.raw("node") {
        Some(Value::String(_)) => f.string("node"),
        Some(_) => f
            .object("node", |n| {
                let id = n.string("id");
                if id.is_none() {
                    n.problem("id", "required: the node's id (or ANY)");
                }
                id
            })
            .flatten(),
        None => None,
    }
}

fn refuse_others(f: &mut Fields<'_>, allowed: &[&str], what: &str) {
    f.only(
        allowed,
        &format!("cannot be given {what} (accepted: {})", allowed.join(", ")),
    );
}

fn size(f: &mut Fields<'_>, key: &str, max: i64) -> Option<u64> {
    f.integer_in(key, 0, max).map(|n| n as u64)
}

async fn create(Submission(state, _params, caller, body): Submission) -> ApiResult<Response> {
    crate::input::within_submission_bound(&state, &caller, &body, VM_NOT_CREATED)?;
    let body: Value = parse_json(&body)?;
    let mut request = read_object(&body, VM_NOT_CREATED, |f| {
        refuse_others(f, CREATE_FIELDS, "when creating a VM");
        VmRequest {
            id: f.string("id"),
            processors: size(
                f,
                "totalProcessors",
                drover_domain::limits::MAX_VM_PROCESSORS.into(),
            )
            .map(|n| n as u32),
            memory: size(f, "totalMemory", 1 << 30),
            disk: size(f, "totalDisk", 1 << 40),
            node: node_of(f),
            image: f.string("os").unwrap_or_default(),
            sovereign: f.boolean("sovereign").unwrap_or(false),
            storage: f.string("storage"),
            template: f.string("template"),
            time_to_live: f.integer("requestedTimeToLive"),
            triggers: triggers(f).unwrap_or_default(),
            variables: f.string_map("variables").unwrap_or_default(),
            description: f.string("description"),
            for_service: false,
            account: None,
        }
    })?;
    if request.image.is_empty() {
        request.image = state.settings().cloud.default_image.clone();
    }
    // The VMs of services are found again by their id: nobody else may take one.
    if let Some(id) = request.id.as_deref()
        && id.starts_with(drover_domain::vm::SERVICE_VM_PREFIX)
    {
        return Err(ApiError::bad_request(
            VM_NOT_CREATED,
            format!(
                "id: '{id}': ids starting with '{}' are the VMs of services",
                drover_domain::vm::SERVICE_VM_PREFIX
            ),
        ));
    }
    if request.node.as_deref() == Some("ANY") {
        request.node = None;
    }
    check_image(&state, &request.image).await?;
    let answer = state
        .scheduler()
        .vm(VmCommand::Create(Box::new(request)), caller.requester())
        .await?;
    Ok(job_accepted(answer))
}

/// The image a VM boots must exist and support VMs.
async fn check_image(state: &AppState, name: &str) -> ApiResult<()> {
    let key = name.to_string();
    let found = crate::state::blocking_on(state.images().clone(), move |images| {
        match images.get(&key) {
            Ok(image) => Ok(Some(image)),
            Err(CloudError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    })
    .await?;
    let problem = match found {
        Some(image) if image.value.supports_virtual_machine => return Ok(()),
        Some(_) => format!("os: the image '{name}' does not support virtual machines"),
        None => format!(
            "os: no image '{name}' (GET /rest/images lists them; an administrator registers \
             the default guest image by building it into the images directory)"
        ),
    };
    Err(ApiError::bad_request(VM_NOT_CREATED, problem))
}

fn triggers(f: &mut Fields<'_>) -> Option<Vec<Value>> {
    match f.raw("triggers")? {
        Value::Array(items) => Some(items.clone()),
        Value::Object(_) => Some(vec![f.raw("triggers")?.clone()]),
        _ => {
            f.problem("triggers", "expected a list of trigger objects");
            None
        }
    }
}

async fn modify(ItemChange(state, _params, caller, id, body): ItemChange) -> ApiResult<Response> {
    crate::input::within_submission_bound(&state, &caller, &body, &summary::vm_not_changed(&id))?;
    let body: Value = parse_json(&body)?;
    let by = caller.requester();
    // A null node is not given, as any null field.
    if body.get("node").is_some_and(|node| !node.is_null()) {
        // A migration: every other field is ignored (spec 4.7).
        let summary = summary::vm_not_migrated(&id);
        let node = read_object(&body, &summary, |f| {
            f.ignore_others("a body with node is a migration, which reads only node");
            node_of(f)
        })?
        .ok_or_else(|| ApiError::bad_request(&summary, "node: required: {id} or ANY"))?;
        let to = (node != "ANY").then_some(node);
        let answer = state.scheduler().vm(VmCommand::Migrate(id, to), by).await?;
        return Ok(job_accepted(answer));
    }
    let summary = summary::vm_not_changed(&id);
    let change = read_object(&body, &summary, |f| {
        refuse_others(f, MODIFY_FIELDS, "when changing a VM");
        // `node` is known: given (not null) it makes the body a migration, read above.
        f.has("node");
        let power_on = f
            .string("powerState")
            .and_then(|p| match p.to_ascii_uppercase().as_str() {
                "ON" => Some(true),
                "OFF" => Some(false),
                _ => {
                    f.problem("powerState", format!("'{p}' is not ON or OFF"));
                    None
                }
            });
        let state_set = f.string("state");
        if let Some(s) = &state_set
            && drover_domain::node::NodeState::parse(s).is_none()
        {
            f.problem(
                "state",
                format!("'{s}' is not a node state (Idle, Busy, Down...)"),
            );
        }
        let generic_events = f.generic_events();
        VmChange {
            generic_events,
            generic_metrics: f.number_map("genericMetrics").unwrap_or_default(),
            os: f.string("os"),
            power_on,
            state: state_set,
            triggers: triggers(f),
            variables: f.string_map("variables"),
        }
    })?;
    let answer = state
        .scheduler()
        .vm(VmCommand::Modify(id, Box::new(change)), by)
        .await?;
    Ok(job_accepted(answer))
}

async fn destroy(ItemRead(state, _params, caller, id): ItemRead) -> ApiResult<Response> {
    let answer = state
        .scheduler()
        .vm(VmCommand::Destroy(id), caller.requester())
        .await?;
    Ok(job_accepted(answer))
}

/// The record of spec 2.9.
pub fn render(vm: &Vm, dates: &WireDates, version: u32) -> Value {
    // A VM made for a job boots the default image (`[cloud] default_image`).
    let image = match vm.image.as_str() {
        "" => None,
        name => Some(name),
    };
    let date = |t: Option<i64>| wire::date(dates, version, t, Zero::Null);
    let mut flags = Vec::new();
    if vm.started.is_some() {
        flags.push("CREATION_COMPLETED");
    }
    if vm.phase == drover_domain::vm::VmPhase::Running {
        flags.push("CAN_MIGRATE");
    }
    json!({
        "id": vm.id,
        "aliases": [],
        "availableDisk": vm.disk,
        "availableMemory": vm.memory,
        "availableProcessors": vm.processors,
        "cpuLoad": null,
        "description": vm.description,
        "effectiveTimeToLive": vm.time_to_live,
        "flags": flags,
        "genericEvents": vm.generic_events.iter()
            .map(|e| json!({"name": e.name, "message": e.message}))
            .collect::<Vec<_>>(),
        "genericMetrics": vm.generic_metrics,
        "job": vm.setup_job.as_ref().map(|id| json!({"id": id})),
        "lastMigrationDate": date(vm.last_migration),
        "lastSubstate": vm.last_phase.map(|p| p.substate()),
        "lastSubstateModificationDate": date(Some(vm.phase_since)),
        "lastUpdateDate": date(Some(vm.last_update)),
        "migrationCount": vm.migration_count,
        "networkAddress": null,
        // None yet while it waits for any node with room.
        "node": (!vm.node.is_empty()).then(|| json!({"id": vm.node})),
        "os": image,
        "osList": [image],
        "powerSelectState": "NONE",
        "powerState": if vm.power_on { "ON" } else { "OFF" },
        "rack": null,
        "requestedTimeToLive": vm.time_to_live,
        "slot": null,
        "sovereign": vm.sovereign,
        "startDate": date(vm.started),
        "state": vm.state(),
        "storage": vm.storage,
        "substate": vm.phase.substate(),
        "template": vm.template,
        "totalDisk": vm.disk,
        "totalMemory": vm.memory,
        "totalProcessors": vm.processors,
        "trackingJob": vm.active_job.as_ref().map(|id| json!({"id": id})),
        "triggers": vm.triggers,
        "user": vm.owner,
        "variables": vm.variables,
    })
}
