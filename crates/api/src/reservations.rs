//! Reservations (spec 2.7, 4.8) and their ACL rules (2.1, 4.1). The engine owns them;
//! this module reads and writes the wire shape. A caller sees and changes only the
//! reservations they created or own, an administrator all of them.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use drover_auth::Permission;
use drover_domain::dates::{Timestamp, WireDates};
use drover_domain::request::summary;
use drover_sched::request::{ChangeMode as SchedChangeMode, ReservationChange, ReservationRequest};
use drover_sched::reservation::{Reservation, parse_duration};
use drover_sched::{Requester, Scheduler};
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::acl;
use crate::error::{ApiError, ApiResult};
use crate::input::{Fields, read_object};
use crate::openapi::schema::*;
use crate::params::{ChangeMode, ListParams};
use crate::reply::{self, parse_json};
use crate::routes::{Access, Caller, Collection, ItemChange, ItemRead, Routes};
use crate::wire::{self, Zero};

const READ: Access = Access::Needs(Permission::read("reservations"));
const CREATE: Access = Access::Needs(Permission::create("reservations"));
const UPDATE: Access = Access::Needs(Permission::update("reservations"));
const DELETE: Access = Access::Needs(Permission::delete("reservations"));

/// The paths of one, of its ACL rules, and of one rule.
const ITEM: &str = "/rest/reservations/{id}";
const RULES: &str = "/rest/reservations/{id}/acl-rules";
const RULE: &str = "/rest/reservations/{id}/acl-rules/{rule}";
/// What deleting one and its ACL rules' routes say (see [`acl::register`]).
const DOCS: acl::Docs = acl::Docs {
    noun: "reservation",
    id: "The reservation's id",
    delete: ("Releases a reservation", "Released"),
    put_rules: "Adds ACL rules; a rule with an existing type and value replaces it",
};

/// Creation fields kept and shown as given.
const GIVEN: [&str; 14] = [
    "accountingAccount",
    "accountingGroup",
    "accountingQOS",
    "accountingUser",
    "comments",
    "excludeJobs",
    "hostListExpression",
    "idPrefix",
    "label",
    "partitionId",
    "profile",
    "reservationGroup",
    "subType",
    "trigger",
];

pub(crate) fn register(routes: &mut Routes) {
    let reservation = || {
        object(&[
            ("id", string()),
            ("startDate", string()),
            ("endDate", string_or_null()),
            ("allocatedProcessorCount", integer()),
        ])
    };
    routes.collection(
        Collection {
            path: "/rest/reservations",
            item_path: "/rest/reservations/{id}",
            access: READ,
            schema: crate::openapi::schema::required(reservation(), &["id"]),
            list: (
                "Reservations: the caller's own, or all for an administrator",
                "Reservations",
            ),
            item: (
                "One reservation",
                "The reservation's id",
                "The reservation",
                "No such reservation (or not the caller's)",
            ),
        },
        list,
        one,
    );
    routes
        .post("/rest/reservations", CREATE, create)
        .idempotent_with_receipt()
        .summary("Creates a reservation: resources set aside for a time window")
        .body(
            "application/json",
            object(&[
                ("duration", integer_in(1, i64::MAX / 4)),
                ("startDate", date_input()),
                ("endDate", date_input()),
                ("hostListExpression", string()),
                ("flags", strings()),
            ]),
        )
        .response(201, "Created", Some(object(&[("id", string())])))
        .response(400, "Refused; the messages say why", None)
        .response(
            409,
            "Conflicts with a reservation (DEDICATEDRESOURCE), or no room",
            None,
        );
    routes
        .put("/rest/reservations/{id}", UPDATE, modify)
        .summary("Changes variables; change-mode add, remove or set is required")
        .path_param("id", "The reservation's id")
        .change_mode(true, "add, remove or set the given variables")
        .json_body({
            let mut body = required(object(&[("variables", any_object())]), &["variables"]);
            body["additionalProperties"] = serde_json::json!(false);
            body
        })
        .response(200, "Changed", Some(object(&[("messages", strings())])));
    acl::register::<Reservations>(routes);
}

/// Whether `caller` may see `reservation`.
fn visible(reservation: &Reservation, caller: &Caller) -> bool {
    let by = caller.requester();
    by.over_all || reservation.belongs_to(&by.user)
}

async fn list(
    State(state): State<AppState>,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    let scheduler = state.scheduler();
    let reservations = scheduler.reservations();
    let mine: Vec<&Reservation> = reservations
        .iter()
        .filter(|r| visible(r, &caller))
        .collect();
    let dates = &state.settings().dates;
    Ok(reply::list_rendered(
        &mine,
        &params,
        dates,
        |r, dates, version| render(r, scheduler, dates, version),
    ))
}

async fn one(ItemRead(state, params, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    let scheduler = state.scheduler();
    let reservations = scheduler.reservations();
    let reservation = reservations
        .iter()
        .find(|r| r.id == id && visible(r, &caller))
        .ok_or_else(|| ApiError::not_found(format!("No reservation '{id}'")))?;
    Ok(Json(render(
        reservation,
        scheduler,
        &state.settings().dates,
        params.api_version.number(),
    )))
}

async fn create(State(state): State<AppState>, caller: Caller, body: Bytes) -> ApiResult<Response> {
    crate::input::within_submission_bound(
        &state,
        &caller,
        &body,
        summary::RESERVATION_NOT_CREATED,
    )?;
    let body: Value = parse_json(&body)?;
    let request = read_object(&body, summary::RESERVATION_NOT_CREATED, |f| {
        creation(f, &state.settings().dates)
    })?;
    let location = format!("{}/rest/reservations/", state.settings().base_url);
    let receipt = crate::idempotency::receipt(201, &location, "id");
    let id = state
        .scheduler()
        .reserve_with_receipt(request, caller.requester(), receipt)
        .await
        .map_err(ApiError::from)?;
    Ok(reply::created(
        state.settings(),
        &format!("/rest/reservations/{id}"),
        json!({ "id": id }),
    ))
}

fn creation(f: &mut Fields<'_>, dates: &WireDates) -> ReservationRequest {
    let mut given = Map::new();
    for key in GIVEN {
        if let Some(value) = f.raw(key).filter(|v| !v.is_null()) {
            given.insert(key.to_string(), value.clone());
        }
    }
    let hosts = f
        .string("hostListExpression")
        .map(|list| {
            list.split(|c: char| c == ',' || c.is_whitespace())
                .filter(|h| !h.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let duration = match f.raw("duration") {
        Some(Value::String(text)) => match parse_duration(text) {
            Some(seconds) => Some(seconds),
            None => {
                f.problem(
                    "duration",
                    format!("'{text}' is not a number of seconds or [[DD:]HH:]MM:SS"),
                );
                None
            }
        },
        _ => f.integer_in("duration", 1, i64::MAX / 4),
    };
    let mut request = ReservationRequest {
        // `Now` (or no startDate) is the scheduler's now, on its own clock.
        start: date_unless_now(f, "startDate", dates).flatten(),
        end: date_unless_now(f, "endDate", dates)
            .map(|end| end.unwrap_or_else(|| Timestamp::now().as_second())),
        duration,
        hosts,
        flags: f
            .strings("flags")
            .unwrap_or_default()
            .into_iter()
            .map(|flag| flag.to_ascii_uppercase())
            .collect(),
        acl: acl::rules(f),
        owner: acl::owner(f),
        id_prefix: f.string("idPrefix"),
        partition: f.string("partitionId"),
        variables: f.string_map("variables").unwrap_or_default(),
        ..ReservationRequest::default()
    };
    if let Some(resources) = f.raw("resources") {
        if resources.is_object() {
            given.insert("resources".into(), resources.clone());
        } else if !resources.is_null() {
            f.problem("resources", "expected an object of {name: number}");
        }
    }
    let requirements = f.object("requirements", |r| {
        let features = match r.raw("featureList") {
            Some(Value::String(list)) => list
                .split([',', ':', ' '])
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            _ => r.strings("featureList").unwrap_or_default(),
        };
        (
            r.string("architecture"),
            features,
            r.integer_in("memory", 0, i64::MAX / 4).map(|m| m as u64),
            r.string("os"),
            r.integer_in("taskCount", 1, i64::from(u32::MAX))
                .map(|n| n as u32),
        )
    });
    if let Some((architecture, features, memory, os, task_count)) = requirements {
        request.architecture = architecture;
        request.features = features;
        request.memory = memory;
        request.os = os;
        request.task_count = task_count;
        if let Some(value) = f.raw("requirements") {
            given.insert("requirements".into(), value.clone());
        }
    }
    request.given = given;
    request
}

/// A date (`Some(Some(..))`), `Now` (`Some(None)`), or nothing given (`None`).
fn date_unless_now(f: &mut Fields<'_>, key: &str, dates: &WireDates) -> Option<Option<i64>> {
    match f.raw(key) {
        Some(Value::String(text)) if text.eq_ignore_ascii_case("now") => Some(None),
        _ => f.date(key, dates).map(Some),
    }
}

async fn modify(ItemChange(state, params, caller, id, body): ItemChange) -> ApiResult<Json<Value>> {
    let mode = match ChangeMode::parse(params.raw.get("change-mode")?, None)? {
        ChangeMode::Add => SchedChangeMode::Add,
        ChangeMode::Remove => SchedChangeMode::Remove,
        ChangeMode::Set => SchedChangeMode::Set,
    };
    let body: Value = parse_json(&body)?;
    let summary = summary::reservation_not_changed(&id);
    let variables = read_object(&body, &summary, |f| {
        let variables = f.string_map("variables");
        if variables.is_none() && !f.has("variables") {
            f.problem("variables", "required (only variables can be changed here)");
        }
        let others: Vec<String> = f.keys().filter(|k| *k != "variables").cloned().collect();
        for key in others {
            f.problem(
                &key,
                "cannot be changed here (only variables; ACL rules through acl-rules)",
            );
        }
        variables.unwrap_or_default()
    })?;
    acl::change::<Reservations>(
        &state,
        &caller,
        &id,
        ReservationChange::Variables(mode, variables),
    )
    .await
}

/// Releasing and ACL rules: see [`acl::register`].
struct Reservations;

impl acl::Governed for Reservations {
    type Change = ReservationChange;
    const PATHS: [&'static str; 3] = [ITEM, RULES, RULE];
    const ACCESS: [Access; 2] = [UPDATE, DELETE];
    const DOCS: acl::Docs = DOCS;
    const PUT_RULES: fn(Vec<acl::AclRule>) -> ReservationChange = ReservationChange::PutRules;
    const DELETE_RULE: fn(String) -> ReservationChange = ReservationChange::DeleteRule;
    const DELETE: ReservationChange = ReservationChange::Delete;

    async fn apply(s: &Scheduler, id: &str, c: Self::Change, by: Requester) -> acl::Answer {
        s.change_reservation(id, c, by).await
    }
}

fn date(dates: &WireDates, version: u32, seconds: i64) -> Value {
    wire::date(dates, version, Some(seconds), Zero::Date)
}

/// Processors used now by jobs that asked for the reservation, on its nodes.
fn busy_processors(r: &Reservation, scheduler: &Scheduler) -> u64 {
    let nodes = scheduler.nodes();
    let by_id: std::collections::HashMap<&str, &drover_sched::node::Node> =
        nodes.iter().map(|n| (n.id(), n)).collect();
    let mut busy = 0u64;
    for held in &r.held {
        if let Some(node) = by_id.get(held.node.as_str()) {
            for job_id in &node.jobs {
                if let Some(job) = scheduler.job(job_id)
                    && job.spec.extra.reservation_requested.as_deref() == Some(r.id.as_str())
                {
                    busy += job
                        .status
                        .allocation
                        .iter()
                        .filter(|a| a.node == held.node)
                        .map(|a| u64::from(a.tasks * job.spec.request.processors_per_task))
                        .sum::<u64>();
                }
            }
        }
    }
    busy
}

/// The wire shape of a reservation (spec 2.7).
fn render(r: &Reservation, scheduler: &Scheduler, dates: &WireDates, version: u32) -> Value {
    let now = scheduler.now();
    let active = r.is_active(now);
    let processors = r.processors();
    let given = |key: &str| r.given.get(key).cloned().unwrap_or(Value::Null);
    let mut flags = r.flags.clone();
    if active && !flags.iter().any(|f| f == "ISACTIVE") {
        flags.push("ISACTIVE".into());
    }
    let busy = busy_processors(r, scheduler);
    let elapsed = (now.min(r.end) - r.start).max(0) as f64;
    let taps = r.used_processor_seconds;
    let tips = (f64::from(processors) * elapsed - taps).max(0.0);
    let mut resources = Map::new();
    resources.insert("PROCS".into(), json!(processors));
    if let Some(Value::Object(extra)) = r.given.get("resources") {
        for (k, v) in extra {
            resources.entry(k.clone()).or_insert(v.clone());
        }
    }
    let requirements = r.given.get("requirements").and_then(Value::as_object);
    let requirement = |key: &str| {
        requirements
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or(Value::Null)
    };
    json!({
        "id": r.id,
        "accountingAccount": given("accountingAccount"),
        "accountingGroup": given("accountingGroup"),
        "accountingQOS": given("accountingQOS"),
        "accountingUser": given("accountingUser"),
        "aclRules": r.acl.iter().map(|rule| json!({
            "type": rule.kind,
            "value": rule.value,
            "affinity": rule.affinity(),
            "comparator": rule.comparator,
        })).collect::<Vec<_>>(),
        "allocatedNodeCount": r.held.len(),
        "allocatedProcessorCount": processors,
        "allocatedTaskCount": r.task_count,
        "allocatedNodes": r.held.iter().map(|h| json!({"id": h.node})).collect::<Vec<_>>(),
        "comments": given("comments"),
        "creationDate": date(dates, version, r.created),
        "duration": r.end - r.start,
        "endDate": date(dates, version, r.end),
        "excludeJobs": r.given.get("excludeJobs").cloned().unwrap_or(json!([])),
        "expireDate": date(dates, version, r.end),
        "flags": flags,
        "globalId": r.id,
        "hostListExpression": given("hostListExpression"),
        "idPrefix": given("idPrefix"),
        "isActive": active,
        "isTracked": false,
        "label": given("label"),
        "maxTasks": r.task_count,
        "messages": [],
        "owner": r.owner.as_ref().map(|o| json!({"name": o.name, "type": o.kind})),
        "partitionId": given("partitionId"),
        "profile": given("profile"),
        "requirements": {
            "architecture": requirement("architecture"),
            "featureList": requirement("featureList"),
            "featureMode": requirement("featureMode"),
            "memory": requirement("memory"),
            "nodeCount": r.held.len(),
            "nodeIds": r.held.iter().map(|h| h.node.clone()).collect::<Vec<_>>(),
            "os": requirement("os"),
            "taskCount": r.task_count,
        },
        "reservationGroup": given("reservationGroup"),
        "resources": resources,
        "startDate": date(dates, version, r.start),
        "statistics": {
            "caps": busy,
            "cips": if active { u64::from(processors).saturating_sub(busy) } else { 0 },
            "taps": taps,
            "tips": tips,
        },
        "subType": given("subType"),
        "taskCount": r.task_count,
        "trigger": given("trigger"),
        "triggerIds": [],
        "uniqueIndex": r.id.rsplit_once('.').and_then(|(_, n)| n.parse::<u64>().ok()),
        "variables": r.variables,
        "standing": r.standing,
    })
}
