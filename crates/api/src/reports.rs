//! Reports (spec 2.15, 4.15), their datapoints and samples, and the metric types
//! (2.20). How samples become datapoints is `drover_monitor::report`'s business.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Response;
use drover_auth::Permission;
use drover_domain::dates::{Timestamp, WireDates};
use drover_monitor::Reports;
use drover_monitor::report::{Datapoint, History, MAX_REPORT_SIZE, Report};
use drover_monitor::reports::{ReportError, Sample};
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::input::{Fields, read_object};
use crate::openapi::schema::*;
use crate::params::ListParams;
use crate::reply::{self, list_in_memory, parse_json};
use crate::routes::{Access, ItemRead, Routes};
use crate::wire::{self, Zero};

const READ: Access = Access::Needs(Permission::read("reports"));
const CREATE: Access = Access::Needs(Permission::create("reports"));
const UPDATE: Access = Access::Needs(Permission::update("reports"));
const DELETE: Access = Access::Needs(Permission::delete("reports"));
const METRIC_TYPES: Access = Access::Needs(Permission::read("metric-types"));

/// The metric types of spec 2.20 (node `genericMetrics` use them).
pub const METRIC_TYPE_IDS: &[&str] = &[
    "vmcount", "watts", "pwatts", "temp", "cpu", "mem", "io", "ccores", "threads",
];

pub(crate) fn register(routes: &mut Routes) {
    let report = || {
        object(&[
            ("id", string()),
            ("name", string()),
            ("description", string_or_null()),
            ("consolidationFunction", string()),
            ("datapointDuration", integer()),
            ("minimumSampleSize", integer()),
            ("reportSize", integer()),
            ("keepSamples", boolean()),
        ])
    };
    let datapoint = || {
        object(&[
            ("startDate", string()),
            ("endDate", string()),
            ("firstSampleDate", string()),
            ("lastSampleDate", string()),
            ("data", object(&[])),
        ])
    };
    let key = "The report's id or name";
    routes
        .get("/rest/reports", READ, list)
        .summary("Reports, without their datapoints")
        .list()
        .response(200, "Reports", Some(envelope(report())));
    routes
        .post("/rest/reports", CREATE, create)
        .summary("Creates a report (name, datapointDuration and reportSize required; optional historical datapoints)")
        .json_body(required(
            object(&[
                ("name", json!({"type": "string", "pattern": "^[^/\\u0000-\\u001f]*[^/\\s][^/\\u0000-\\u001f]*$"})),
                ("description", string()),
                ("consolidationFunction", one_of(&["average"])),
                ("datapointDuration", integer_in(1, 100 * 366 * 86_400)),
                ("minimumSampleSize", integer_in(0, i64::from(u32::MAX))),
                ("reportSize", integer_in(1, drover_monitor::report::MAX_REPORT_SIZE)),
                ("keepSamples", boolean()),
                ("datapoints", array(any_object())),
            ]),
            &["name", "datapointDuration", "reportSize"],
        ))
        .response(201, "Created", Some(object(&[("messages", strings()), ("id", string()), ("name", string())])))
        .response(409, "A report of that name exists", None);
    routes
        .get("/rest/reports/{key}", READ, one)
        .summary("One report with its datapoints")
        .path_param("key", key)
        .response(200, "The report", Some(report()))
        .response(404, "No such report", None);
    routes
        .delete("/rest/reports/{key}", DELETE, delete)
        .summary("Deletes a report and its samples")
        .path_param("key", key)
        .response(200, "Deleted", Some(object(&[("messages", strings())])));
    routes
        .get("/rest/reports/{key}/datapoints", READ, datapoints)
        .summary("The report's datapoints")
        .path_param("key", key)
        .list()
        .response(200, "Datapoints", Some(envelope(datapoint())));
    routes
        .get("/rest/reports/{key}/samples", READ, samples)
        .summary("The report's samples not yet discarded")
        .path_param("key", key)
        .list()
        .response(
            200,
            "Samples",
            Some(envelope(object(&[
                ("timestamp", string()),
                ("data", object(&[])),
            ]))),
        );
    routes
        .post("/rest/reports/{key}/samples", UPDATE, add_samples)
        .summary(
            "Adds a sample ({data, timestamp?}) or a list of them; each is consolidated at once",
        )
        .path_param("key", key)
        .body(
            "application/json",
            required(
                object(&[("timestamp", date_input()), ("data", any_object())]),
                &["data"],
            ),
        )
        .response(201, "Added", Some(object(&[("messages", strings())])));
    routes
        .get("/rest/metric-types", METRIC_TYPES, metric_types)
        .summary("The metric types nodes and VMs report")
        .list()
        .response(
            200,
            "Metric types",
            Some(envelope(object(&[("id", string())]))),
        );
}

/// Runs a blocking report operation off the async runtime.
async fn blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&Reports) -> Result<T, ReportError> + Send + 'static,
) -> ApiResult<T> {
    crate::state::blocking_on(state.reports().clone(), work).await
}

fn date(dates: &WireDates, version: u32, seconds: Option<i64>) -> Value {
    wire::date(dates, version, seconds, Zero::Date)
}

fn render_report(report: &Report) -> Value {
    json!({
        "id": report.id,
        "name": report.name,
        "description": report.description,
        "consolidationFunction": report.consolidation_function,
        "datapointDuration": report.datapoint_duration,
        "minimumSampleSize": report.minimum_sample_size,
        "reportSize": report.report_size,
        "keepSamples": report.keep_samples,
    })
}

fn render_datapoints(report: &Report, dates: &WireDates, version: u32) -> Vec<Value> {
    let one = |d: &Datapoint| {
        json!({
            "startDate": date(dates, version, Some(d.start)),
            "endDate": date(dates, version, Some(d.end)),
            "firstSampleDate": date(dates, version, d.first_sample),
            "lastSampleDate": date(dates, version, d.last_sample),
            "data": d.averages(report.minimum_sample_size),
        })
    };
    report.datapoints.iter().map(one).collect()
}

async fn list(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    let query = params.query.clone();
    let page = blocking(&state, move |r| r.list(&query)).await?;
    let items = page.items.iter().map(render_report).collect();
    Ok(reply::listed(page.total, items, &params))
}

async fn one(ItemRead(state, params, _, key): ItemRead) -> ApiResult<Json<Value>> {
    let report = blocking(&state, move |r| r.find(&key)).await?;
    let mut body = render_report(&report);
    body["datapoints"] = Value::Array(render_datapoints(
        &report,
        &state.settings().dates,
        params.api_version.number(),
    ));
    Ok(Json(body))
}

async fn datapoints(
    State(state): State<AppState>,
    params: ListParams,
    Path(key): Path<String>,
) -> ApiResult<Json<Value>> {
    let report = blocking(&state, move |r| r.find(&key)).await?;
    let all = render_datapoints(
        &report,
        &state.settings().dates,
        params.api_version.number(),
    );
    Ok(list_in_memory(&all, &params))
}

async fn samples(
    State(state): State<AppState>,
    params: ListParams,
    Path(key): Path<String>,
) -> ApiResult<Json<Value>> {
    let query = params.query.clone();
    let now = Timestamp::now().as_second();
    let page = blocking(&state, move |r| r.samples(&key, &query, now)).await?;
    let dates = &state.settings().dates;
    let version = params.api_version.number();
    let items = page
        .items
        .into_iter()
        .map(|d| {
            let at = d
                .body
                .get("timestamp")
                .and_then(Value::as_str)
                .and_then(drover_domain::dates::parse_utc)
                .map(|t| t.as_second());
            json!({ "timestamp": date(dates, version, at), "data": d.body.get("data") })
        })
        .collect();
    Ok(reply::listed(page.total, items, &params))
}

const NOT_CREATED: &str = "The report was not created";

fn read_report(body: &Value, dates: &WireDates) -> Result<(Report, Vec<History>), ApiError> {
    read_object(body, NOT_CREATED, |f| {
        let name = f.string("name").filter(|n| !n.trim().is_empty());
        match &name {
            None => f.problem("name", "required, a non-empty string"),
            Some(n) if n.contains('/') || n.chars().any(char::is_control) => {
                f.problem("name", "must not contain / or control characters")
            }
            Some(_) => {}
        }
        let duration = f.integer_in("datapointDuration", 1, 100 * 366 * 86_400);
        if !f.has("datapointDuration") {
            f.problem("datapointDuration", "required, a number of seconds");
        }
        let size = f.integer_in("reportSize", 1, MAX_REPORT_SIZE);
        if !f.has("reportSize") {
            f.problem("reportSize", "required, the number of datapoints kept");
        }
        let function = f
            .string("consolidationFunction")
            .unwrap_or_else(|| "average".into());
        if !function.eq_ignore_ascii_case("average") {
            f.problem(
                "consolidationFunction",
                format!("'{function}' is not supported (only average)"),
            );
        }
        let report = Report {
            id: String::new(),
            name: name.unwrap_or_default(),
            description: f.string("description"),
            consolidation_function: "average".into(),
            datapoint_duration: duration.unwrap_or(1),
            minimum_sample_size: f
                .integer_in("minimumSampleSize", 0, i64::from(u32::MAX))
                .unwrap_or(1),
            report_size: size.unwrap_or(1),
            keep_samples: f.boolean("keepSamples").unwrap_or(false),
            datapoints: Vec::new(),
        };
        let history = f
            .each("datapoints", |d| {
                let start = d.date("startDate", dates);
                if !d.has("startDate") {
                    d.problem("startDate", "required, a date");
                }
                d.date("endDate", dates);
                History {
                    start: start.unwrap_or(0),
                    first_sample: d.date("firstSampleDate", dates),
                    last_sample: d.date("lastSampleDate", dates),
                    data: numbers(d, "data"),
                }
            })
            .unwrap_or_default();
        (report, history)
    })
}

/// The object of numbers at `key` (`None` for null or missing).
fn numbers(f: &mut Fields<'_>, key: &str) -> Option<Map<String, Value>> {
    let value = f.raw(key)?;
    match value.as_object() {
        Some(o) => Some(o.clone()),
        None => {
            f.problem(key, "expected an object of numbers or null");
            None
        }
    }
}

async fn create(State(state): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let body: Value = parse_json(&body)?;
    let (report, history) = read_report(&body, &state.settings().dates)?;
    let report = blocking(&state, move |r| r.create(report, history)).await?;
    Ok(reply::created(
        state.settings(),
        &format!("/rest/reports/{}", report.id),
        json!({
            "messages": [format!("Report '{}' created", report.name)],
            "id": report.id,
            "name": report.name,
        }),
    ))
}

async fn delete(State(state): State<AppState>, Path(key): Path<String>) -> ApiResult<Json<Value>> {
    let report = blocking(&state, move |r| r.delete(&key)).await?;
    Ok(reply::messages([format!(
        "Report '{}' deleted",
        report.name
    )]))
}

const SAMPLES_NOT_ADDED: &str = "No sample was added";

fn read_samples(body: &Value, dates: &WireDates, now: i64) -> Result<Vec<Sample>, ApiError> {
    // `each` takes a single object as a list of one.
    read_object(&json!({ "samples": body }), SAMPLES_NOT_ADDED, |f| {
        f.each("samples", |s| {
            let at = s.date("timestamp", dates).unwrap_or(now);
            let data = match s.raw("data") {
                Some(Value::Object(o)) => o.clone(),
                Some(_) => {
                    s.problem("data", "expected a JSON object");
                    Map::new()
                }
                None => {
                    s.problem("data", "required, a JSON object");
                    Map::new()
                }
            };
            Sample { at, data }
        })
        .unwrap_or_default()
    })
}

async fn add_samples(
    State(state): State<AppState>,
    Path(key): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let body: Value = parse_json(&body)?;
    let now = Timestamp::now().as_second();
    let samples = read_samples(&body, &state.settings().dates, now)?;
    if samples.is_empty() {
        return Err(ApiError::bad_request(
            SAMPLES_NOT_ADDED,
            "the list of samples is empty",
        ));
    }
    let path_key = key.clone();
    let added = blocking(&state, move |r| r.add_samples(&path_key, &samples, now)).await?;
    let location = format!("/rest/reports/{}/samples", added.report);
    let mut messages = vec![format!(
        "{} sample(s) added to report '{key}'",
        added.folded
    )];
    if added.dropped > 0 {
        messages.push(format!(
            "{} sample(s) were older than every datapoint the report keeps and were dropped",
            added.dropped
        ));
    }
    Ok(reply::created(
        state.settings(),
        &location,
        json!({ "messages": messages }),
    ))
}

async fn metric_types(params: ListParams) -> Json<Value> {
    let all: Vec<Value> = METRIC_TYPE_IDS
        .iter()
        .map(|id| json!({ "id": id }))
        .collect();
    list_in_memory(&all, &params)
}
