//! Events (spec 4.13, part 6): read in the version-1 shape, or the version-3 shape with
//! `api-version=3`; created from the XML of 6.1 (version 1) or JSON (version 3).
//!
//! Events live in the store and grow without bound, so a list query runs there: a
//! version-1 query's field names are first translated to the stored (version-3) names.
//! Creation answers only once the events are durable (see `drover_monitor::recorder`).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use drover_auth::Permission;
use drover_domain::dates::Timestamp;
use drover_monitor::event::{Event, InitiatedBy, ObjectRef, SEVERITIES};
use drover_query::Filter;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult, Kind, NOT_CREATED};
use crate::input::read_object;
use crate::openapi::schema::*;
use crate::params::{ApiVersion, CommonParams, ListParams};
use crate::reply::{self, parse_json};
use crate::routes::{Access, Caller, Collection, ItemRead, Routes};
use crate::wire;

const READ: Access = Access::Needs(Permission::read("events"));
const CREATE: Access = Access::Needs(Permission::create("events"));

pub(crate) fn register(routes: &mut Routes) {
    let event = || {
        object(&[
            ("id", string()),
            ("eventDate", string()),
            ("eventType", string()),
            ("severity", string()),
            ("code", integer()),
            ("origin", string_or_null()),
            ("message", string_or_null()),
            ("arguments", strings()),
        ])
    };
    routes.collection(
        Collection {
            path: "/rest/events",
            item_path: "/rest/events/{id}",
            access: READ,
            schema: crate::openapi::schema::required(event(), &["id"]),
            list: (
                "Events: version-1 shape, or version 3 with api-version=3",
                "Events",
            ),
            item: ("One event", "The event's id", "The event", "No such event"),
        },
        list,
        one,
    );
    routes
        .get("/rest/events/stream", READ, crate::event_stream::stream)
        .summary(
            "Events as they are stored, as Server-Sent Events (id: the event's id; data: its \
             JSON), filtered by query; resumes after the Last-Event-ID header's event",
        )
        .list()
        .text_response(
            200,
            "text/event-stream",
            "A stream of events that ends only when the client or the server leaves",
            // Each event of the stream (OpenAPI before 3.2 describes an event stream
            // by the schema of one event): its id, and the event's JSON as its data.
            required(
                object(&[
                    ("id", string()),
                    ("event", string()),
                    (
                        "data",
                        json!({"type": "string", "contentMediaType": "application/json"}),
                    ),
                ]),
                &["id", "data"],
            ),
        )
        .response(400, "A malformed query or Last-Event-ID", None)
        .response(429, "Too many streams of this user are open", None)
        .response(
            503,
            "Too many streams are open, or the service is shutting down",
            None,
        );
    routes
        .post("/rest/events", CREATE, create)
        .summary("Creates events: version 1 from <Events> XML, version 3 (api-version=3) from JSON")
        .api_versions(&["3"])
        .json_body(required(
            object(&[
                ("eventType", text()),
                ("severity", one_of(drover_monitor::event::SEVERITIES)),
                ("eventDate", date_input()),
                ("code", integer_in(0, i64::from(u32::MAX))),
                ("origin", string()),
                ("message", string()),
                ("arguments", strings()),
                (
                    "associatedObjects",
                    array(required(
                        object(&[("type", text()), ("id", text())]),
                        &["type", "id"],
                    )),
                ),
            ]),
            &["eventType"],
        ))
        .response(
            201,
            "Created (v3: the event; v1: messages and ids)",
            Some(event()),
        )
        .response(
            400,
            "Malformed XML or JSON, missing fields, bad dates: nothing is stored",
            None,
        );
}

fn is_v3(version: ApiVersion) -> bool {
    version == ApiVersion::V3
}

fn render(state: &AppState, event: &Event, version: i64, api: ApiVersion) -> Value {
    if is_v3(api) {
        wire::events::v3(event, version)
    } else {
        wire::events::v1(event, &state.settings().dates)
    }
}

/// `filter` (in stored names) narrowed to the events `caller` may see: all of them with
/// the permission over everybody's (`ALL`), else those they initiated (`initiatedBy.user`
/// is the user the request acts for). The list and the stream both apply it.
pub(crate) fn visible_to(filter: Filter, caller: &Caller, state: &AppState) -> ApiResult<Filter> {
    if caller.over_all() {
        return Ok(filter);
    }
    let me = caller.effective_user.clone().unwrap_or_default();
    let own = Filter::parse(&json!({"initiatedBy.user": me}), &state.settings().dates)?;
    Ok(Filter::And(vec![filter, own]))
}

async fn list(
    State(state): State<AppState>,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    let v1 = !is_v3(params.api_version);
    let mut query = params.query.clone();
    query.filter = visible_to(query.filter, &caller, &state)?;
    let page = state.stored_events().list(query, v1).await?;
    let items = page
        .items
        .iter()
        .map(|(e, version)| render(&state, e, *version, params.api_version))
        .collect();
    Ok(reply::listed(page.total, items, &params))
}

async fn one(ItemRead(state, params, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    let missing = || ApiError::not_found(format!("No event '{id}'"));
    let (event, version) = state.stored_events().get(&id).await?.ok_or_else(missing)?;
    let initiator = event.initiated_by.as_ref().and_then(|i| i.user.as_ref());
    if !caller.over_all() && initiator != caller.effective_user.as_ref() {
        return Err(missing());
    }
    Ok(Json(render(&state, &event, version, params.api_version)))
}

async fn create(
    State(state): State<AppState>,
    params: CommonParams,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let v3 = is_v3(params.api_version);
    let mut events = if v3 {
        vec![v3_event(&state, &parse_json(&body)?)?]
    } else {
        v1_events(&headers, &body)?
    };
    for event in &mut events {
        if !caller.over_all() {
            refuse_reserved(event)?;
        }
        // Who created an event is who may see it with a permission over their own
        // only, and who it says initiated it: only a caller over all events names
        // someone else.
        if event.initiated_by.is_none() || !caller.over_all() {
            let proxied = caller.effective_user != caller.identity.as_ref().map(|i| i.name.clone());
            event.initiated_by = Some(InitiatedBy {
                user: caller.effective_user.clone(),
                proxy_user: caller
                    .identity
                    .as_ref()
                    .filter(|_| proxied)
                    .map(|i| i.name.clone()),
            });
        }
    }
    let recorded = state.events().record(events).await?;
    let settings = state.settings();
    let location = format!("/rest/events/{}", recorded[0].id);
    if v3 {
        Ok(reply::created(
            settings,
            &location,
            wire::events::v3(&recorded[0], 1),
        ))
    } else {
        let ids: Vec<&str> = recorded.iter().map(|e| e.id.as_str()).collect();
        let count = ids.len();
        let noun = if count == 1 { "event" } else { "events" };
        Ok(reply::created(
            settings,
            &location,
            json!({ "messages": [format!("{count} {noun} created")], "ids": ids }),
        ))
    }
}

/// Origins and the facility the service's own events carry (its audit, services,
/// scheduler and plugins): an event a caller over their own events only posts cannot
/// pass for one.
fn refuse_reserved(event: &Event) -> Result<(), ApiError> {
    // Compared on their letters, digits and slashes alone: `scheduler` with an
    // invisible character in it reads as `scheduler` to whoever looks.
    let visible = |text: Option<&str>| -> String {
        text.unwrap_or_default()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '/')
            .collect::<String>()
            .to_ascii_lowercase()
    };
    let origin = visible(event.origin.as_deref());
    let reserved_origin = origin == "drover"
        || origin.starts_with("drover/")
        || origin == "scheduler"
        || origin.starts_with("plugin/");
    if reserved_origin || visible(event.facility.as_deref()) == "security" {
        return Err(ApiError::new(
            Kind::BadRequest,
            [
                NOT_CREATED.to_string(),
                "origins drover, drover/..., scheduler and plugin/..., and the facility \
                 security, are the service's own"
                    .to_string(),
                "Give the event an origin of your own".to_string(),
            ],
        ));
    }
    Ok(())
}

/// The events of a version-1 body (spec 6.1), all or none.
fn v1_events(headers: &HeaderMap, body: &[u8]) -> Result<Vec<Event>, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request(NOT_CREATED, "the body is not UTF-8 text"))?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            NOT_CREATED,
            "a version-1 event creation needs an <Events> XML body",
        ));
    }
    let json_sent = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.to_ascii_lowercase().contains("json"));
    if json_sent || text.trim_start().starts_with('{') {
        return Err(ApiError::new(
            crate::Kind::BadRequest,
            [
                NOT_CREATED.to_string(),
                "version-1 events are created from an <Events> XML body".into(),
                "to create an event from JSON, add api-version=3".into(),
            ],
        ));
    }
    wire::xml::parse_events(text).map_err(|problems| {
        let mut messages = vec![NOT_CREATED.to_string()];
        messages.extend(problems);
        ApiError::new(crate::Kind::BadRequest, messages)
    })
}

/// The event of a version-3 JSON body (spec 6.2 create input).
fn v3_event(state: &AppState, body: &Value) -> Result<Event, ApiError> {
    let dates = &state.settings().dates;
    read_object(body, NOT_CREATED, |f| {
        let event_type = f.string("eventType").filter(|t| !t.trim().is_empty());
        if event_type.is_none() {
            f.problem("eventType", "required, a non-empty string");
        }
        let severity = match f.string("severity") {
            None => "INFO".to_string(),
            Some(s) => {
                let upper = s.to_ascii_uppercase();
                if !SEVERITIES.contains(&upper.as_str()) {
                    f.problem(
                        "severity",
                        format!("'{s}' is not one of {}", SEVERITIES.join(", ")),
                    );
                }
                upper
            }
        };
        let date = f.date("eventDate", dates);
        let at = date
            .and_then(|s| Timestamp::from_second(s).ok())
            .unwrap_or_else(Timestamp::now);
        let mut event = Event::new(at, event_type.unwrap_or_default(), &severity);
        event.code = f.integer_in("code", 0, i64::from(u32::MAX)).unwrap_or(0);
        event.origin = f.string("origin");
        event.message = f.string("message");
        event.arguments = f.strings("arguments").unwrap_or_default();
        event.associated_objects = f
            .each("associatedObjects", |o| {
                // Both name the object: an empty one names none (the document's
                // `minLength: 1`).
                let kind = o.string("type").filter(|s| !s.is_empty());
                let id = o.string("id").filter(|s| !s.is_empty());
                if kind.is_none() {
                    o.problem("type", "required");
                }
                if id.is_none() {
                    o.problem("id", "required");
                }
                ObjectRef {
                    kind: kind.unwrap_or_default(),
                    id: id.unwrap_or_default(),
                }
            })
            .unwrap_or_default();
        event
    })
}
