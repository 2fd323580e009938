//! Nodes (spec 2.8, 4.7): every field readable (unknown numbers are -1); state, power,
//! os, partition, messages, generic events and metrics, and variables modifiable.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use drover_auth::Permission;
use drover_auth::roles::Scope;
use drover_domain::dates::WireDates;
use drover_domain::request::summary;
use drover_sched::NodeChanges;
use drover_sched::node::{Node, NodeState};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::input::read_object;
use crate::openapi::schema::*;
use crate::params::ListParams;
use crate::reply::{self, parse_json};
use crate::routes::{Access, Caller, Collection, ItemRead, Routes};
use crate::wire::{self, Zero};

const READ: Access = Access::Needs(Permission::read("nodes"));
const UPDATE: Access = Access::Needs(Permission::update("nodes"));

pub(crate) fn register(routes: &mut Routes) {
    let node = || {
        object(&[
            ("id", string()),
            ("state", string()),
            ("totalProcessors", integer()),
        ])
    };
    routes.collection(
        Collection {
            path: "/rest/nodes",
            item_path: "/rest/nodes/{id}",
            access: READ,
            schema: crate::openapi::schema::required(node(), &["id"]),
            list: ("Every node", "Nodes"),
            item: ("One node", "The node's id", "The node", "No such node"),
        },
        list,
        one,
    );
    routes
        .put("/rest/nodes/{id}", UPDATE, modify)
        .summary("Modifies state, power, os, partition, messages, genericEvents, genericMetrics, variables")
        .path_param("id", "The node's id")
        .json_body(object(&[
            ("state", one_of(&NodeState::ALL.map(NodeState::as_str))),
            ("power", one_of(&["on", "off"])),
            ("messages", strings()),
            ("os", string()),
            ("partition", string()),
            ("genericMetrics", json!({"type": "object", "additionalProperties": number()})),
            ("variables", json!({"type": "object",
                                 "additionalProperties": {"type": ["string", "number", "boolean", "null"]}})),
            ("genericEvents", array(required(
                object(&[("name", text()), ("message", string())]),
                &["name"],
            ))),
        ]))
        .response(200, "Modified", Some(object(&[("messages", strings())])));
}

fn date(dates: &WireDates, version: u32, seconds: i64) -> Value {
    wire::date(dates, version, Some(seconds), Zero::Null)
}

fn known(n: Option<u64>) -> i64 {
    n.map_or(-1, |n| n as i64)
}

/// Why the resource manager keeps work off the node (Slurm's reason for a down or
/// drained node), unless an administrator's state here decides instead.
fn rm_block_reason(node: &Node) -> Value {
    match (&node.rm_state, &node.rm_reason, &node.overrides.state) {
        (Some(_), Some(reason), state) if state.is_none_or(|s| s.follows_load()) => {
            json!({ "message": reason, "type": "ResourceManager" })
        }
        _ => Value::Null,
    }
}

/// A node in its wire shape.
pub fn render(node: &Node, rm_name: &str, dates: &WireDates, version: u32) -> Value {
    let config = &node.config;
    let o = &node.overrides;
    let free_memory = node.free_memory();
    let state = node.state();
    let vms: Vec<Value> = node.vms.iter().map(|id| json!({ "id": id })).collect();
    let mut first = json!({
        "id": config.id,
        "accessPolicy": "SHARED",
        "aliases": [],
        "architecture": config.architecture,
        "availableClasses": [],
        "availableDisk": known(node.free_disk()),
        "availableEndDate": null,
        "availableGenericResources": config.generic_resources,
        "availableMemory": known(free_memory),
        "availableProcessors": if node.accepts_jobs() { i64::from(node.free_processors()) } else { 0 },
        "availableStartDate": null,
        "availableSwap": known(config.swap),
        "blockReason": rm_block_reason(node),
        "comments": null,
        "configuredClasses": [],
        "cpuLoad": -1,
        "dynamic": false,
        "externalLoad": node.external_processors.map_or(-1, i64::from),
        "features": config.features,
        "flags": ["RM_DETECTED"],
        "genericEvents": o.generic_events.iter().map(|e| json!({ "name": e.name, "message": e.message, "date": date(dates, version, e.created) })).collect::<Vec<_>>(),
        "genericMetrics": o.generic_metrics,
        "genericResources": config.generic_resources,
        "hypervisorType": null,
        "iOLoad": -1,
        "index": node.index,
        "jobs": node.jobs.iter().map(|id| json!({ "id": id })).collect::<Vec<_>>(),
        "lastStateUpdateDate": date(dates, version, o.state_updated),
        "lastUpdateDate": date(dates, version, o.last_update),
    });
    let second = json!({
        "messages": o.messages.iter().map(|m| json!({ "message": m.text, "createdDate": date(dates, version, m.created) })).collect::<Vec<_>>(),
        "network": null,
        "networkAddress": null,
        "networkLoad": -1,
        "nextOS": null,
        "operations": [],
        "os": node.os(),
        "osList": node.os().into_iter().collect::<Vec<_>>(),
        "overcommit": null,
        "partition": node.partition(),
        "power": if node.powered_on() { "On" } else { "Off" },
        "powerPolicy": "STATIC",
        "powerSelected": if node.powered_on() { "On" } else { "Off" },
        "priority": 0,
        "priorityFunction": null,
        "procSpeed": -1,
        "profilingEnabled": false,
        "rack": config.rack.unwrap_or(-1),
        "reservationCount": 0,
        "reservations": [],
        "rmAccessList": [rm_name],
        "size": 1,
        "slot": config.slot.unwrap_or(-1),
        "speed": 1.0,
        "speedWeight": -1,
        "state": state.as_str(),
        "substate": null,
        "taskCount": node.jobs.len(),
        "totalActiveTime": -1,
        "totalAvailableTime": -1,
        "totalDisk": known(config.disk),
        "totalMemory": known(config.memory),
        "totalProcessors": config.processors,
        "totalStatsTime": -1,
        "totalSwap": known(config.swap),
        "totalUpTime": -1,
        "type": "Compute",
        "variables": o.variables,
        "version": o.version,
        "virtualMachines": vms,
        "vmOsList": [],
    });
    if let (Some(first), Value::Object(second)) = (first.as_object_mut(), second) {
        first.extend(second);
        // Limits this scheduler does not enforce (yet): unknown.
        for limit in [
            "maxIOIn",
            "maxIOLoad",
            "maxIOOut",
            "maxJob",
            "maxJobPerUser",
            "maxLoad",
            "maxPEPerJob",
            "maxPageIn",
            "maxPageOut",
            "maxProc",
            "maxProcPerClass",
        ] {
            first.insert(limit.into(), json!(-1));
        }
    }
    first
}

async fn list(State(state): State<AppState>, params: ListParams, caller: Caller) -> Json<Value> {
    let scheduler = state.scheduler();
    let (nodes, rm_name) = (scheduler.nodes(), scheduler.resource_manager_name());
    let sight = Sight::of(&state, &caller);
    reply::list_rendered(
        &nodes,
        &params,
        &state.settings().dates,
        |node, dates, version| sight.hide_others(&state, render(node, rm_name, dates, version)),
    )
}

async fn one(ItemRead(state, params, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    let nodes = state.scheduler().nodes();
    let node = nodes
        .iter()
        .find(|n| n.id() == id)
        .ok_or_else(|| ApiError::not_found(format!("No node '{id}'")))?;
    let rendered = render(
        node,
        state.scheduler().resource_manager_name(),
        &state.settings().dates,
        params.api_version.number(),
    );
    Ok(Json(
        Sight::of(&state, &caller).hide_others(&state, rendered),
    ))
}

/// Whose jobs and VMs a caller sees on a node: everybody's with `jobs:read` (or
/// `vms:read`) of scope `ALL`, else only their own (another's job or VM is not theirs
/// to know of, as its own read is a 404).
struct Sight {
    user: Option<String>,
    all_jobs: bool,
    all_vms: bool,
}

impl Sight {
    fn of(state: &AppState, caller: &Caller) -> Sight {
        let authority = crate::access::AccessControl::current(state);
        // Proxied, the scope of the proxied user's roles is not looked up: own only.
        let identity = caller
            .identity
            .as_ref()
            .filter(|i| caller.effective_user.as_deref() == Some(i.name.as_str()));
        let all = |resource: &'static str| {
            identity.is_some_and(|i| {
                authority.scope_of(i, Permission::read(resource)) == Some(Scope::All)
            })
        };
        Sight {
            user: caller.effective_user.clone(),
            all_jobs: all("jobs"),
            all_vms: all("vms"),
        }
    }

    /// `node` (rendered) with only the jobs and VMs this caller sees.
    fn hide_others(&self, state: &AppState, mut node: Value) -> Value {
        let mine = |owner: Option<String>| owner.is_some() && owner == self.user;
        if !self.all_jobs
            && let Some(jobs) = node.get_mut("jobs").and_then(Value::as_array_mut)
        {
            let scheduler = state.scheduler();
            jobs.retain(|j| {
                let job = j["id"].as_str().and_then(|id| scheduler.job(id));
                mine(job.map(|job| job.user().to_string()))
            });
            let seen = jobs.len();
            node["taskCount"] = json!(seen);
        }
        if !self.all_vms
            && let Some(vms) = node
                .get_mut("virtualMachines")
                .and_then(Value::as_array_mut)
        {
            let all = state.scheduler().vms();
            vms.retain(|v| {
                let vm = all
                    .iter()
                    .find(|vm| Some(vm.id.as_str()) == v["id"].as_str());
                mine(vm.map(|vm| vm.owner.clone()))
            });
        }
        node
    }
}

fn changes(body: &Value) -> Result<NodeChanges, ApiError> {
    read_object(body, summary::NODE_NOT_MODIFIED, |f| {
        let mut changes = NodeChanges {
            os: f.string("os"),
            partition: f.string("partition"),
            generic_metrics: f.number_map("genericMetrics").unwrap_or_default(),
            variables: f.variable_changes("variables"),
            ..Default::default()
        };
        if let Some(text) = f.string("state") {
            match NodeState::parse(&text) {
                Some(state) => changes.state = Some(state),
                None => f.problem(
                    "state",
                    format!("'{text}' is not a node state (Idle, Busy, Running, Down, Drained, Draining, Flush, Reserved, Unknown)"),
                ),
            }
        }
        if let Some(text) = f.string("power") {
            match text.to_ascii_lowercase().as_str() {
                "on" => changes.power_off = Some(false),
                "off" => changes.power_off = Some(true),
                _ => f.problem("power", format!("must be on or off, not '{text}'")),
            }
        }
        changes.messages = f.messages("messages");
        changes.generic_events = f.generic_events();
        changes
    })
}

async fn modify(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let body: Value = parse_json(&body)?;
    let changes = changes(&body)?;
    let messages = state
        .scheduler()
        .modify_node(&id, changes, caller.requester())
        .await
        .map_err(ApiError::from)?;
    Ok(reply::messages(messages))
}
