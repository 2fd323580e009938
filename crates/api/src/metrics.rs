//! `GET /metrics`: the service's state and timings in the Prometheus text exposition
//! format, for operators' scrapers (permission `metrics:read`: administrators and
//! operators hold it, the built-in `user` role does not).
//!
//! Gauges (jobs and nodes by state, processors) are read from the engine's published
//! state at scrape time: the job book's state index counts jobs without a walk. Timings
//! are kept where they happen, each a `static` histogram of atomics beside the code it
//! measures (`sched::engine::PASS_SECONDS`, `store::journal`, `monitor::recorder`);
//! those are the process's, as a process serves one Drover (test servers sharing a
//! process share them). HTTP timings are this router's: one histogram per route
//! pattern (never the raw path, so the label set is bounded by the registry) and
//! status, made on first use and then reached without a lock.

use std::sync::OnceLock;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use drover_auth::Permission;
use drover_metrics::{Exposition, Histogram, LATENCY_SECONDS};
use drover_sched::JobBook;
use drover_sched::book::Attribute;
use drover_sched::job::JobState;
use drover_sched::node::NodeState;

use crate::AppState;
use crate::routes::{Access, RouteDoc, Routes};

/// The permission `GET /metrics` needs.
pub const READ: Permission = Permission::read("metrics");

/// The content type of the text exposition format.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(crate) fn register(routes: &mut Routes) {
    routes
        .get("/metrics", Access::Needs(READ), serve)
        .summary("Metrics in the Prometheus text exposition format (listed in docs/events.md)")
        .text_response(
            200,
            EXPOSITION,
            "Jobs and nodes by state, processors, scheduling, HTTP, store and event-log timings",
            serde_json::json!({"type": "string"}),
        );
}

/// Statuses with a histogram of their own per route; any other is counted as `other`.
const STATUSES: [u16; 19] = [
    200, 201, 202, 204, 400, 401, 403, 404, 405, 406, 408, 409, 413, 414, 415, 429, 431, 500, 503,
];

/// The route a response came from, which the gate puts in its extensions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatchedRoute(pub(crate) usize);

/// Request latencies by route and status.
pub(crate) struct HttpMetrics {
    /// One per registered route, in registration order, then one for requests that
    /// matched none (unknown paths, methods a path does not serve, heads refused early).
    routes: Vec<RouteTimings>,
}

struct RouteTimings {
    method: String,
    route: &'static str,
    /// Indexed like [`STATUSES`], then `other`.
    by_status: [OnceLock<Box<Histogram>>; STATUSES.len() + 1],
}

impl HttpMetrics {
    pub(crate) fn new(docs: &[RouteDoc]) -> Self {
        let timings = |method: &str, route| RouteTimings {
            method: method.to_string(),
            route,
            by_status: [const { OnceLock::new() }; STATUSES.len() + 1],
        };
        let mut routes: Vec<RouteTimings> = docs
            .iter()
            .map(|d| timings(d.method.as_str(), d.path))
            .collect();
        routes.push(timings("any", "unmatched"));
        Self { routes }
    }

    /// Counts one answered request of `route` (`None`: it matched no route).
    pub(crate) fn observe(&self, route: Option<MatchedRoute>, status: u16, elapsed: Duration) {
        let unmatched = self.routes.len() - 1;
        let index = route.map_or(unmatched, |r| r.0.min(unmatched));
        let slot = STATUSES
            .iter()
            .position(|s| *s == status)
            .unwrap_or(STATUSES.len());
        self.routes[index].by_status[slot]
            .get_or_init(|| Box::new(Histogram::new(LATENCY_SECONDS)))
            .observe_duration(elapsed);
    }

    fn write(&self, page: &mut Exposition) {
        const NAME: &str = "drover_http_request_duration_seconds";
        page.family(
            NAME,
            "histogram",
            "Time from a request's arrival to its answer's head, by route pattern and status",
        );
        for route in &self.routes {
            for (slot, histogram) in route.by_status.iter().enumerate() {
                let Some(histogram) = histogram.get() else {
                    continue;
                };
                let status = STATUSES
                    .get(slot)
                    .map_or_else(|| "other".to_string(), u16::to_string);
                let labels = [
                    ("method", route.method.as_str()),
                    ("route", route.route),
                    ("status", status.as_str()),
                ];
                page.histogram(NAME, &labels, histogram);
            }
        }
    }
}

async fn serve(State(state): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, EXPOSITION)], page(&state))
}

/// The whole metrics page.
fn page(state: &AppState) -> String {
    let mut page = Exposition::new();
    let scheduler = state.scheduler();

    page.family(
        "drover_jobs",
        "gauge",
        "Jobs known to the scheduler, by state",
    );
    let counts = scheduler.with_jobs(|book: &JobBook| {
        JobState::ALL.map(|s| {
            let count = book
                .with(Attribute::State, s.as_str())
                .map_or(0, |jobs| jobs.len());
            (s, count)
        })
    });
    for (job_state, count) in counts {
        page.sample(
            "drover_jobs",
            &[("state", job_state.as_str())],
            count as f64,
        );
    }

    let nodes = scheduler.nodes();
    page.family("drover_nodes", "gauge", "Nodes by state");
    for node_state in NodeState::ALL {
        let count = nodes.iter().filter(|n| n.state() == node_state).count();
        page.sample(
            "drover_nodes",
            &[("state", node_state.as_str())],
            count as f64,
        );
    }
    let used: u64 = nodes.iter().map(|n| u64::from(n.used_processors)).sum();
    let total: u64 = nodes.iter().map(|n| u64::from(n.config.processors)).sum();
    page.family(
        "drover_processors_in_use",
        "gauge",
        "Processors held by running jobs and VMs",
    );
    page.sample("drover_processors_in_use", &[], used as f64);
    page.family("drover_processors", "gauge", "Processors of every node");
    page.sample("drover_processors", &[], total as f64);

    page.family(
        "drover_scheduling_pass_seconds",
        "histogram",
        "Duration of the engine's scheduling passes over a non-empty queue",
    );
    page.histogram(
        "drover_scheduling_pass_seconds",
        &[],
        &drover_sched::engine::PASS_SECONDS,
    );

    if let Some(http) = state.http_metrics() {
        http.write(&mut page);
    }

    page.family(
        "drover_store_commit_seconds",
        "histogram",
        "Duration of store transactions: the journal's (the engine's changes) and the event recorder's",
    );
    page.histogram(
        "drover_store_commit_seconds",
        &[("writer", "journal")],
        &drover_store::journal::COMMIT_SECONDS,
    );
    page.histogram(
        "drover_store_commit_seconds",
        &[("writer", "events")],
        &drover_monitor::recorder::COMMIT_SECONDS,
    );
    page.family(
        "drover_journal_batch_writes",
        "histogram",
        "Writes in each of the journal's transactions (group commit)",
    );
    page.histogram(
        "drover_journal_batch_writes",
        &[],
        &drover_store::journal::BATCH_WRITES,
    );
    page.family(
        "drover_event_log_write_errors_total",
        "counter",
        "Times lines could not be written to events.log (the events were stored all the same)",
    );
    page.sample(
        "drover_event_log_write_errors_total",
        &[],
        drover_monitor::recorder::LOG_WRITE_ERRORS.get() as f64,
    );
    let streams = state.event_streams();
    page.family(
        "drover_event_streams",
        "gauge",
        "Open event streams (GET /rest/events/stream)",
    );
    page.sample("drover_event_streams", &[], streams.open() as f64);
    page.family(
        "drover_event_streams_dropped_total",
        "counter",
        "Event streams ended because they fell behind the events (a slow client)",
    );
    page.sample(
        "drover_event_streams_dropped_total",
        &[],
        streams.dropped() as f64,
    );
    page.finish()
}
