//! Jobs, versions 1 and 2 (spec 2.3, 2.4, 4.4, 4.5). The scheduler has one model of a
//! job; [`v1`] and [`v2`] convert it to and from the two wire shapes.

mod arrays;
mod fields;
mod listing;
pub mod templates;
pub mod v1;
pub mod v2;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use drover_auth::Permission;
use drover_domain::dates::WireDates;
use drover_domain::request::summary;
use drover_sched::job::{Hold, Job, Output};
use drover_sched::listing::{JobShape, Listing, Render};
use drover_sched::{JobAction, Requester, Scheduler};
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

/// Showing jobs in the shape of the version asked for (versions past 2 show them as 2
/// does), with dates written by `dates`.
fn render_with<'a>(
    scheduler: &'a Scheduler,
    version: ApiVersion,
    dates: &'a WireDates,
) -> Render<'a> {
    Render::of(scheduler, version.number().min(2), dates)
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

/// The engine's view of the caller: the effective user, and whether they hold the
/// route's permission over everybody's objects (else only over their own).
pub(crate) fn requester(caller: &Caller) -> Requester {
    let identity = caller.identity.as_ref();
    let user = caller.effective_user.clone().unwrap_or_default();
    let proxied = identity.is_some_and(|i| i.name != user);
    Requester {
        proxy_user: proxied.then(|| user.clone()),
        over_all: caller.over_all(),
        user,
    }
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

/// Lists whose filter or sort the job book's indexes cannot answer scan the book on
/// blocking threads, at most this many at once (half the processors, at least one): the
/// rest of the service keeps processors to answer with, and a scan waits for its turn
/// only as long as its budget lets it. Narrow scans (`Scan::is_narrow`: a few ms over
/// row fields, on one thread) take their turns apart, so that they never queue behind a
/// costly one; they too are bounded (twice the processors: a thread each).
fn scan_turns(narrow: bool) -> &'static tokio::sync::Semaphore {
    static COSTLY: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    static NARROW: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let processors = || std::thread::available_parallelism().map_or(2, |n| n.get());
    if narrow {
        NARROW.get_or_init(|| tokio::sync::Semaphore::new(2 * processors()))
    } else {
        COSTLY.get_or_init(|| tokio::sync::Semaphore::new((processors() / 2).max(1)))
    }
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

/// Lowers the calling thread to the idle scheduling class (`SCHED_IDLE`): it runs only
/// when no thread of the normal class wants its core, and a waking request handler, the
/// engine or the journal takes the core from it at once. A long scan takes a thread per
/// core: at nice 10, 4 clients looping on a one-second list at a million jobs held
/// submissions' p99 at 20.1 ms; at nice 19, 17.2-23.6 ms (`scripts/bench-slow-lists`).
/// Where the class is refused, nice 19.
pub(super) fn lower_this_thread() {
    // SAFETY: sched_setscheduler and setpriority on this thread's id change only this
    // thread's scheduling; a failure leaves it as it was, which is harmless.
    unsafe {
        let parameters = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &parameters) != 0 {
            libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
        }
    }
    LOWERED.set(true);
}

thread_local! {
    /// Whether [`lower_this_thread`] lowered this thread.
    static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `work` at the normal priority on a lowered thread (elsewhere, as it is). A scan
/// reads the job book under its lock. Were the idle-class thread preempted while it held
/// the lock, it would not run again until a core fell idle, and the engine, waiting to
/// write, would wait with it, and every submission behind the engine: a priority
/// inversion (the engine waited up to 18 ms for a hold meant to last 200 us). A hold is
/// short, so it costs the others little to let it finish.
pub(super) fn at_normal_priority<R>(work: impl FnOnce() -> R) -> R {
    if !LOWERED.get() {
        return work();
    }
    let parameters = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in lower_this_thread: this thread's own scheduling only.
    let raised = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &parameters) } == 0;
    let answer = work();
    if raised {
        // SAFETY: as above.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &parameters) };
    }
    answer
}

/// Runs a scan on a thread of its own at the lowest CPU priority ([`lower_this_thread`];
/// each hold of the job book's lock excepted, [`at_normal_priority`]), so that on a busy
/// machine the engine, the journal and other requests' handlers get the cores first.
/// The thread ends with the scan: no pooled thread keeps the lower priority.
async fn beside_the_service<R: Send + 'static>(
    scan: impl FnOnce() -> R + Send + 'static,
) -> ApiResult<R> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("drover-list-scan".into())
        .spawn(move || {
            lower_this_thread();
            let _ = answer.send(scan());
        })
        .map_err(|e| ApiError::internal(format!("cannot start a list scan: {e}")))?;
    answered
        .await
        .map_err(|_| ApiError::internal("a list scan ended without an answer"))
}

async fn list(
    state: &AppState,
    params: &ListParams,
    listing: Listing,
    owner: Option<String>,
) -> ApiResult<Json<Value>> {
    let budget = state.settings().list_budget;
    let deadline = std::time::Instant::now() + budget;
    let scheduler = state.scheduler();
    let shown = render_with(scheduler, params.api_version, &state.settings().dates);
    let version = shown.version;
    let outcome = scheduler.with_jobs(|book| {
        listing::by_indexes(
            book,
            listing,
            owner.as_deref(),
            &params.query,
            version,
            listing::Showing {
                render: &shown,
                shape: &Documents,
            },
        )
    });
    let page = match outcome {
        listing::Outcome::Page(page) => page,
        listing::Outcome::Scan(scan) => {
            let turn = tokio::time::timeout(budget, scan_turns(scan.is_narrow()).acquire())
                .await
                .map_err(|_| over_budget(budget, "Other lists that scan are running"))?
                .map_err(|e| ApiError::internal(format!("the list turns closed: {e}")))?;
            let (state, api_version) = (state.clone(), params.api_version);
            beside_the_service(move || {
                // The turn ends with the scan, not with the request: a client that hangs
                // up does not free a turn while its scan still runs.
                let _turn = turn;
                let scheduler = state.scheduler();
                // Filter and sort over UTC dates (what the query language compares);
                // render the page in the deployment's zone.
                let utc = WireDates::utc();
                let filter_render = render_with(scheduler, api_version, &utc);
                let shown = render_with(scheduler, api_version, &state.settings().dates);
                let showing = |render| listing::Showing {
                    render,
                    shape: &Documents,
                };
                listing::scan(
                    scheduler,
                    &scan,
                    showing(&filter_render),
                    showing(&shown),
                    deadline,
                )
            })
            .await?
            .map_err(|stopped| {
                over_budget(
                    budget,
                    &format!(
                        "The query had to judge jobs one by one and stopped after {}",
                        stopped.judged
                    ),
                )
            })?
        }
    };
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
    let render = render_with(scheduler, params.api_version, &state.settings().dates);
    Ok(Json(Documents.job(&job, &render)))
}

async fn submit(Submission(state, params, caller, body): Submission) -> ApiResult<Response> {
    crate::input::within_submission_bound(&state, &caller, &body, summary::JOB_NOT_SUBMITTED)?;
    let mut body: Value = parse_json(&body)?;
    let dates = &state.settings().dates;
    let spec = if params.api_version.number() >= 2 {
        templates::apply(&mut body, &state.settings().job_templates)?;
        v2::submission(&body, dates)?
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
        .submit_with_receipt(spec, requester(&caller), receipt)
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
        .modify(&id, changes, requester(&caller))
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
        .act(&id, action, requester(&caller))
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
        .act(&id, JobAction::Cancel, requester(&caller))
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

#[cfg(test)]
mod tests {
    fn policy() -> libc::c_int {
        // SAFETY: reads this thread's own scheduling policy.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn a_scan_thread_holds_the_book_at_the_normal_priority_and_is_lowered_again() {
        std::thread::spawn(|| {
            // A thread that was never lowered is left as it is.
            super::at_normal_priority(|| assert_eq!(policy(), libc::SCHED_OTHER));
            super::lower_this_thread();
            if policy() != libc::SCHED_IDLE {
                return; // the idle class was refused here (nice 19 instead)
            }
            // Leaving the idle class needs privilege (the service runs as root).
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            super::at_normal_priority(|| {
                if root {
                    assert_eq!(policy(), libc::SCHED_OTHER, "a hold of the book's lock");
                }
            });
            assert_eq!(policy(), libc::SCHED_IDLE, "after the hold, idle again");
        })
        .join()
        .expect("the scan thread's checks");
    }
}
