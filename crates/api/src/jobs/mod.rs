//! Jobs, versions 1 and 2 (spec 2.3, 2.4, 4.4, 4.5). The scheduler has one model of a
//! job; [`v1`] and [`v2`] convert it to and from the two wire shapes.

mod arrays;
pub mod templates;
pub mod v1;
pub mod v2;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use drover_auth::Permission;
use drover_domain::request::summary;
use drover_sched::JobAction;
use drover_sched::job::{Hold, Job, Output};
use drover_sched::listing::{JobShape, ListError, ListRequest, Listing, Render};
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult, Kind};
use crate::input::Fields;
use crate::openapi::schema::*;
use crate::params::{ApiVersion, CommonParams, ListParams};
use crate::reply::{self, envelope, parse_json};
use crate::routes::{Access, Caller, ItemChange, ItemRead, Routes, Submission};

const READ: Access = Access::Needs(Permission::read("jobs"));
const CREATE: Access = Access::Needs(Permission::create("jobs"));
const UPDATE: Access = Access::Needs(Permission::update("jobs"));
const DELETE: Access = Access::Needs(Permission::delete("jobs"));

pub(crate) fn register(routes: &mut Routes) {
    templates::register(routes);
    arrays::register(routes);
    let job = || {
        object(&[
            ("id", string()),
            ("name", string_or_null()),
            ("state", string()),
        ])
    };
    let list_doc = |route: crate::routes::RouteBuilder<'_>, which: &'static str| {
        route.summary(which).list().response(
            200,
            "Jobs in the version-1 shape, or version 2 with api-version=2",
            Some(crate::openapi::schema::envelope(job())),
        );
    };
    list_doc(routes.get("/rest/jobs", READ, list_all), "Every job");
    list_doc(
        routes.get("/rest/jobs/active", READ, list_active),
        "Jobs that have not ended (queued, held, running)",
    );
    list_doc(
        routes.get("/rest/jobs/complete", READ, list_complete),
        "Jobs that have ended (Completed, Removed, Vacated)",
    );
    let one_doc = |route: crate::routes::RouteBuilder<'_>| {
        route
            .summary("One job, by id (version 1) or name (version 2; the same string)")
            .path_param("id", "The job's id")
            .response(200, "The job", Some(job()))
            .response(404, "No such job", None);
    };
    one_doc(routes.get("/rest/jobs/{id}", READ, one_of_all));
    one_doc(routes.get("/rest/jobs/active/{id}", READ, one_active));
    one_doc(routes.get("/rest/jobs/complete/{id}", READ, one_complete));
    routes
        .post("/rest/jobs", CREATE, submit)
        .idempotent_with_receipt()
        .summary("Submits a job: version 1 answers {id}, version 2 {name}")
        .json_body(required(
            object(&[
                ("commandFile", text()),
                ("commandLineArguments", strings()),
                (
                    "holds",
                    array(one_of(&["User", "System", "Batch", "Defer", "All"])),
                ),
                ("environmentVariables", any_object()),
                ("initialWorkingDirectory", text()),
                ("standardOutputFilePath", text()),
                ("standardErrorFilePath", text()),
                ("variables", any_object()),
            ]),
            &["commandFile"],
        ))
        .response(
            201,
            "Submitted",
            Some(object(&[("id", string()), ("name", string())])),
        )
        .response(400, "Refused; the messages say why", None);
    routes
        .put("/rest/jobs/{id}", UPDATE, modify)
        .summary("Modifies a job (the v1 or v2 modify body); old messages are kept")
        .path_param("id", "The job's id")
        .body("application/json", object(&[]))
        .response(200, "Modified", Some(object(&[("messages", strings())])));
    routes
        .put("/rest/jobs/{id}/{action}", UPDATE, act)
        .summary("hold, unhold, suspend, resume, cancel, requeue, execute, checkpoint")
        .path_param("id", "The job's id")
        .param(crate::routes::ParamDoc {
            name: "action",
            location: crate::routes::ParamIn::Path,
            required: true,
            description: "The action",
            schema: serde_json::json!({"type": "string", "enum": [
                "hold", "unhold", "release", "suspend", "resume", "cancel", "requeue",
                "execute", "checkpoint"]}),
        })
        .optional_json_body(object(&[(
            "holds",
            array(one_of(&["User", "System", "Batch", "Defer", "All"])),
        )]))
        .response(200, "Done", Some(object(&[("messages", strings())])));
    routes
        .delete("/rest/jobs/{id}", DELETE, cancel)
        .summary("Cancels a job; detail in the X-SVC-Message header")
        .path_param("id", "The job's id")
        .response(200, "Cancelled", Some(object(&[])));
}

/// References to other objects, `[{key: id}, ...]`: by `id` in version 1, by `name` in 2.
fn refs(items: impl IntoIterator<Item = impl AsRef<str>>, key: &str) -> Value {
    let one = |item: &str| {
        let mut reference = serde_json::Map::new();
        reference.insert(key.to_string(), json!(item));
        Value::Object(reference)
    };
    Value::Array(items.into_iter().map(|i| one(i.as_ref())).collect())
}

/// A date of a job in the shape of `render.version`.
fn date(render: &Render, seconds: Option<i64>) -> Value {
    crate::wire::date(
        render.dates,
        render.version,
        seconds,
        crate::wire::Zero::Date,
    )
}

/// The partition the job runs in: the one it asked for, else the default one.
fn partition_of(job: &Job) -> String {
    job.spec
        .request
        .partition
        .clone()
        .unwrap_or_else(|| drover_sched::node::DEFAULT_PARTITION.into())
}

/// A stream's path, once the job has a working directory (from submission on).
fn output_path(job: &Job, output: Output) -> Option<String> {
    job.spec.working_directory.as_ref()?;
    Some(job.output_path(output).to_string_lossy().into_owned())
}

/// Jobs' documents in the shapes of versions 1 ([`v1`]) and 2 ([`v2`]), by
/// `Render::version`.
pub struct Documents;

impl JobShape for Documents {
    fn job(&self, job: &Job, render: &Render) -> Value {
        let mut out = Map::new();
        each_member(job, render, &mut |key, value| {
            out.insert(key.to_string(), value());
        });
        Value::Object(out)
    }

    fn member(&self, job: &Job, name: &str, render: &Render) -> Option<Value> {
        let mut found = None;
        each_member(job, render, &mut |key, value| {
            if found.is_none() && key == name {
                found = Some(value());
            }
        });
        found
    }
}

/// Offers every member of the job in the shape of `render.version`, in order, with how
/// to compute its value.
fn each_member(job: &Job, render: &Render, put: &mut impl FnMut(&str, &dyn Fn() -> Value)) {
    if render.version >= 2 {
        v2::each_member(job, render, put);
    } else {
        v1::each_member(job, render, put);
    }
}

/// The representation version whose shape jobs are shown in: versions past 2 show them
/// as 2 does.
fn shape_version(version: ApiVersion) -> u32 {
    version.number().min(2)
}

/// The holds listed at `key`, either spelling.
pub(crate) fn holds_from(f: &mut Fields<'_>, key: &str) -> Vec<Hold> {
    let mut holds = Vec::new();
    for name in f.strings(key).unwrap_or_default() {
        match Hold::parse(&name) {
            Some(h) => holds.push(h),
            None => f.problem(
                key,
                format!("'{name}' is not a hold type (User, System, Batch, Defer)"),
            ),
        }
    }
    holds.sort();
    holds.dedup();
    holds
}

/// The user whose jobs alone the caller may see; `None`: every job.
fn owner_filter(caller: &Caller) -> Option<String> {
    (!caller.over_all()).then(|| caller.effective_user.clone().unwrap_or_default())
}

async fn list_all(
    State(state): State<AppState>,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    list(&state, &params, Listing::All, owner_filter(&caller)).await
}

async fn list_active(
    State(state): State<AppState>,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    list(&state, &params, Listing::Active, owner_filter(&caller)).await
}

async fn list_complete(
    State(state): State<AppState>,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    list(&state, &params, Listing::Complete, owner_filter(&caller)).await
}

/// The answer to a list past its budget: the service is not failing, this list is too
/// costly now (its wait) or at all (its scan); either way the client learns why and when
/// to ask again.
fn over_budget(budget: std::time::Duration, why: &str) -> ApiError {
    ApiError::unavailable(
        "The list was not answered within its time budget",
        format!(
            "{why} (budget {} ms); try again later, or narrow the query: equality on \
             state, queueStatus, user, account, group, queue (jobClass), qos, name, \
             customName or holds is answered from an index",
            budget.as_millis()
        ),
    )
    .retry_after(budget.as_secs().max(1))
}

/// A job list: `sched::listing` answers it; this reads the request and words the
/// refusals.
async fn list(
    state: &AppState,
    params: &ListParams,
    listing: Listing,
    owner: Option<String>,
) -> ApiResult<Json<Value>> {
    let budget = state.settings().list_budget;
    let request = ListRequest {
        listing,
        owner: owner.as_deref(),
        query: &params.query,
        version: shape_version(params.api_version),
        dates: &state.settings().dates,
        shape: &Documents,
        budget,
    };
    let page = drover_sched::listing::list(state.scheduler(), &request)
        .await
        .map_err(|e| match e {
            ListError::Busy => over_budget(budget, "Other lists that scan are running"),
            ListError::Stopped { judged } => over_budget(
                budget,
                &format!("The query had to judge jobs one by one and stopped after {judged}"),
            ),
            ListError::Failed(why) => ApiError::internal(why),
        })?;
    Ok(envelope(page, params))
}

async fn one_of_all(ItemRead(state, params, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    one(&state, &params, &caller, &id, Listing::All)
}

async fn one_active(ItemRead(state, params, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    one(&state, &params, &caller, &id, Listing::Active)
}

async fn one_complete(ItemRead(state, params, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    one(&state, &params, &caller, &id, Listing::Complete)
}

/// One job; another user's job is "not found" to a caller who may see only their own.
fn one(
    state: &AppState,
    params: &CommonParams,
    caller: &Caller,
    id: &str,
    listing: Listing,
) -> ApiResult<Json<Value>> {
    let scheduler = state.scheduler();
    let owner = owner_filter(caller);
    let job = scheduler
        .job(id)
        .filter(|j| listing.shows(j) && owner.as_deref().is_none_or(|o| j.user() == o))
        .ok_or_else(|| ApiError::not_found(format!("No job '{id}'")))?;
    let version = shape_version(params.api_version);
    let render = Render::of(scheduler, version, &state.settings().dates);
    Ok(Json(Documents.job(&job, &render)))
}

async fn submit(Submission(state, params, caller, body): Submission) -> ApiResult<Response> {
    crate::input::within_submission_bound(&state, &caller, &body, summary::JOB_NOT_SUBMITTED)?;
    let body: Value = parse_json(&body)?;
    let dates = &state.settings().dates;
    let spec = if params.api_version.number() >= 2 {
        let mut spec = v2::submission(&body, dates)?;
        templates::apply(&mut spec, &body, &state.settings().job_templates)?;
        spec
    } else {
        v1::submission(&body, dates)?
    };
    let field = if params.api_version.number() >= 2 {
        "name"
    } else {
        "id"
    };
    let location = format!("{}/rest/jobs/", state.settings().base_url);
    let receipt = crate::idempotency::receipt(201, &location, field);
    let id = state
        .scheduler()
        .submit_with_receipt(spec, caller.requester(), receipt)
        .await
        .map_err(ApiError::from)?;
    let answer = json!({ field: id });
    Ok(reply::created(
        state.settings(),
        &format!("/rest/jobs/{id}"),
        answer,
    ))
}

async fn modify(ItemChange(state, params, caller, id, body): ItemChange) -> ApiResult<Json<Value>> {
    crate::input::within_submission_bound(&state, &caller, &body, &summary::job_not_modified(&id))?;
    let body: Value = parse_json(&body)?;
    let dates = &state.settings().dates;
    let changes = if params.api_version.number() >= 2 {
        v2::changes(&body, dates)?
    } else {
        v1::changes(&body, dates)?
    };
    let messages = state
        .scheduler()
        .modify(&id, changes, caller.requester())
        .await
        .map_err(ApiError::from)?;
    Ok(reply::messages(messages))
}

async fn act(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let holds = || -> ApiResult<Vec<Hold>> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Vec::new());
        }
        let body: Value = parse_json(&body)?;
        let names = crate::input::read_object(&body, "The holds were not changed", |f| {
            f.strings("holds").unwrap_or_default()
        })?;
        v1::hold_names(&names)
    };
    let action = match action.to_ascii_lowercase().as_str() {
        "hold" => JobAction::Hold(holds()?),
        "unhold" | "release" => JobAction::Unhold(holds()?),
        "suspend" => JobAction::Suspend,
        "resume" => JobAction::Resume,
        "cancel" => JobAction::Cancel,
        "requeue" => JobAction::Requeue,
        "execute" => JobAction::Execute,
        "checkpoint" => JobAction::Checkpoint,
        other => {
            return Err(ApiError::new(
                Kind::NotFound,
                [
                    format!("No job action '{other}'"),
                    "Actions are cancel, checkpoint, execute, hold, requeue, resume, suspend and unhold".into(),
                ],
            ));
        }
    };
    // The same effect as DELETE, but the answer of an action: `{"messages":[...]}`
    // (spec 4.4's table).
    let message = state
        .scheduler()
        .act(&id, action, caller.requester())
        .await
        .map_err(ApiError::from)?;
    Ok(reply::messages([message]).into_response())
}

async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let message = state
        .scheduler()
        .act(&id, JobAction::Cancel, caller.requester())
        .await
        .map_err(ApiError::from)?;
    Ok(cancelled(message))
}

/// `{}` with the detail in `X-SVC-Message` (spec 4.4).
fn cancelled(message: String) -> Response {
    let mut response = (StatusCode::OK, reply::deleted()).into_response();
    if let Ok(value) = HeaderValue::from_str(&message) {
        response.headers_mut().insert("X-SVC-Message", value);
    }
    response
}
