//! `GET /metrics` over HTTP: who may read it, and that it follows what happens.

use drover_testkit::{Auth, TestServer};
use serde_json::json;

use drover_testkit::{scratch_dir, script, submit_v2, wait_state_v2};

/// The value of the sample `line` starts with (name and labels exactly as written).
fn sample(page: &str, line: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(line)?.strip_prefix(' ')?.parse().ok())
}

fn metrics(server: &TestServer) -> String {
    let reply = server.get("/metrics");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    reply.body
}

#[test]
fn metrics_need_a_login_and_the_metrics_permission() {
    let server = TestServer::start();
    let anonymous = server.get_as(Auth::None, "/metrics");
    anonymous.assert_refused(401, "authenticated", &"no login");
    // The built-in user role reads diagnostics, not metrics.
    let user = server.get_as(Auth::User, "/metrics");
    user.assert_refused(403, "metrics:read", &"an ordinary user");
    let wrong = server.get_as(Auth::Basic("admin".into(), "wrong".into()), "/metrics");
    assert_eq!(wrong.status, 401, "{}", wrong.body);
}

#[test]
fn metrics_follow_a_job_to_its_end_and_count_requests_by_route() {
    let server = TestServer::start();
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "exit 0");
    let before = metrics(&server);
    let completed = |page: &str| sample(page, "drover_jobs{state=\"Completed\"}").unwrap();
    assert_eq!(completed(&before), 0.0, "{before}");
    let id = submit_v2(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path()}),
    );
    wait_state_v2(&server, &id, "Completed");
    let page = metrics(&server);
    assert_eq!(completed(&page), 1.0, "{page}");
    assert_eq!(sample(&page, "drover_jobs{state=\"Idle\"}"), Some(0.0));
    assert!(sample(&page, "drover_processors").unwrap() >= 1.0, "{page}");
    // Nodes are published at the end of the engine's step, jobs at once.
    drover_testkit::wait_until("the job's processor is given back", || {
        sample(&metrics(&server), "drover_processors_in_use") == Some(0.0)
    });
    assert!(
        sample(&page, "drover_nodes{state=\"Idle\"}").unwrap() >= 1.0,
        "{page}"
    );
    // The submission's pass, its commits and their batches were timed.
    for timed in [
        "drover_scheduling_pass_seconds_count",
        "drover_store_commit_seconds_count{writer=\"journal\"}",
        "drover_journal_batch_writes_count",
    ] {
        assert!(sample(&page, timed).unwrap() >= 1.0, "{timed}: {page}");
    }
    assert_eq!(
        sample(&page, "drover_event_log_write_errors_total"),
        Some(0.0)
    );
    // Requests by route pattern (the job's id is not a label) and status.
    let submitted = "drover_http_request_duration_seconds_count\
                     {method=\"POST\",route=\"/rest/jobs\",status=\"201\"}";
    assert_eq!(sample(&page, submitted), Some(1.0), "{page}");
    let read = "drover_http_request_duration_seconds_count\
                {method=\"GET\",route=\"/rest/jobs/{id}\",status=\"200\"}";
    assert!(sample(&page, read).unwrap() >= 1.0, "{page}");
    assert!(!page.contains(&id), "a raw path became a label: {page}");
    let refused = server.get_as(Auth::User, "/metrics");
    assert_eq!(refused.status, 403);
    let unknown = server.get("/no/such/path/123");
    assert_eq!(unknown.status, 404);
    let page = metrics(&server);
    let denied = "drover_http_request_duration_seconds_count\
                  {method=\"GET\",route=\"/metrics\",status=\"403\"}";
    assert_eq!(sample(&page, denied), Some(1.0), "{page}");
    let unmatched = "drover_http_request_duration_seconds_count\
                     {method=\"any\",route=\"unmatched\",status=\"404\"}";
    assert_eq!(sample(&page, unmatched), Some(1.0), "{page}");
    assert!(!page.contains("/no/such/path"), "{page}");
    // Every family is declared before its samples, as a scraper expects.
    for family in [
        "drover_jobs gauge",
        "drover_nodes gauge",
        "drover_http_request_duration_seconds histogram",
        "drover_store_commit_seconds histogram",
        "drover_event_log_write_errors_total counter",
    ] {
        assert!(page.contains(&format!("# TYPE {family}\n")), "{family}");
    }
}
