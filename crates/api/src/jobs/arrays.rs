//! `POST /rest/job-arrays` (spec 2.5, 4.5): a job array, served only when
//! `ENABLEJOBARRAYS` is TRUE. The prototype is read exactly like a version-2 job
//! submission (templates included); the sub-jobs are read back through the job GETs.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use drover_domain::request::summary;
use drover_sched::job::{ArrayOutcome, ArraySpec, IndexRange};
use serde_json::{Value, json};

use super::{CREATE, templates, v2};
use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::input::read_object;
use crate::openapi::schema::{object, string};
use crate::reply::{self, parse_json};
use crate::routes::{Caller, Routes};

pub(crate) fn register(routes: &mut Routes) {
    routes
        .post("/rest/job-arrays", CREATE, submit)
        .idempotent_with_receipt()
        .summary("Submits a job array (when ENABLEJOBARRAYS is TRUE); answers the master's {name}")
        .body(
            "application/json",
            object(&[
                ("name", string()),
                ("jobPrototype", object(&[("commandFile", string())])),
                (
                    "slotLimit",
                    crate::openapi::schema::integer_in(1, i64::from(u32::MAX)),
                ),
                (
                    "indexRanges",
                    crate::openapi::schema::array(crate::openapi::schema::required(
                        object(&[
                            ("startIndex", crate::openapi::schema::integer()),
                            ("endIndex", crate::openapi::schema::integer()),
                            ("increment", crate::openapi::schema::integer()),
                        ]),
                        &["startIndex", "endIndex"],
                    )),
                ),
                (
                    "indexValues",
                    crate::openapi::schema::array(crate::openapi::schema::integer()),
                ),
            ]),
        )
        .response(201, "Submitted", Some(object(&[("name", string())])))
        .response(
            400,
            "Refused (or job arrays are not enabled); the messages say why",
            None,
        );
}

async fn submit(State(state): State<AppState>, caller: Caller, body: Bytes) -> ApiResult<Response> {
    if !state.settings().job_arrays {
        return Err(ApiError::bad_request(
            summary::ARRAY_NOT_SUBMITTED,
            "job arrays are not enabled on this service (ENABLEJOBARRAYS is not TRUE)",
        ));
    }
    crate::input::within_submission_bound(&state, &caller, &body, summary::ARRAY_NOT_SUBMITTED)?;
    let body: Value = parse_json(&body)?;
    let (array, prototype) = read_array(&body)?;
    let prototype = prototype.ok_or_else(|| {
        ApiError::bad_request(
            summary::ARRAY_NOT_SUBMITTED,
            "jobPrototype: required (a version-2 job submission)",
        )
    })?;
    let mut spec = v2::submission(&prototype, &state.settings().dates)?;
    templates::apply(&mut spec, &prototype, &state.settings().job_templates)?;
    let location = format!("{}/rest/jobs/", state.settings().base_url);
    let receipt = crate::idempotency::receipt(201, &location, "name");
    let id = state
        .scheduler()
        .submit_array_with_receipt(spec, array, caller.requester(), receipt)
        .await
        .map_err(ApiError::from)?;
    Ok(reply::created(
        state.settings(),
        &format!("/rest/jobs/{id}"),
        json!({ "name": id }),
    ))
}

/// The array's own fields, and its prototype (not read yet).
fn read_array(body: &Value) -> Result<(ArraySpec, Option<Value>), ApiError> {
    read_object(body, summary::ARRAY_NOT_SUBMITTED, |f| {
        let name = f.string("name");
        let ranges = f
            .each("indexRanges", |r| {
                let mut bound = |key: &str| {
                    let value = r.integer(key);
                    if value.is_none() && !r.has(key) {
                        r.problem(key, "required");
                    }
                    value.unwrap_or(0)
                };
                let start = bound("startIndex");
                let end = bound("endIndex");
                IndexRange {
                    start,
                    end,
                    increment: r.integer("increment").unwrap_or(1),
                }
            })
            .unwrap_or_default();
        let values = match f.raw("indexValues") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut values = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item.as_i64() {
                        Some(v) => values.push(v),
                        None => f.problem(&format!("indexValues[{i}]"), "expected an integer"),
                    }
                }
                values
            }
            Some(_) => {
                f.problem("indexValues", "expected a list of integers");
                Vec::new()
            }
        };
        let slot_limit = f
            .integer_in("slotLimit", 1, i64::from(u32::MAX))
            .map(|n| n as u32);
        let (first, any) = f
            .object("cancellationPolicy", |c| {
                let mut outcome = |key: &str| {
                    let text = c.string(key)?;
                    match text.to_ascii_uppercase().as_str() {
                        "FAILURE" => Some(ArrayOutcome::Failure),
                        "SUCCESS" => Some(ArrayOutcome::Success),
                        _ => {
                            c.problem(key, format!("'{text}' is neither FAILURE nor SUCCESS"));
                            None
                        }
                    }
                };
                (outcome("firstJob"), outcome("anyJob"))
            })
            .unwrap_or_default();
        let prototype = match f.raw("jobPrototype") {
            Some(Value::Object(o)) => Some(Value::Object(o.clone())),
            Some(Value::Null) | None => None,
            Some(_) => {
                f.problem(
                    "jobPrototype",
                    "expected an object (a version-2 job submission)",
                );
                None
            }
        };
        let array = ArraySpec {
            name,
            ranges,
            values,
            slot_limit,
            cancel_on_first: first,
            cancel_on_any: any,
        };
        (array, prototype)
    })
}
