//! The scheduling policy as the live service runs it: run-time predictions from each
//! user's history (`[scheduler.policy] predict_runtimes`, issue #55).

use std::path::Path;

use drover_sched::node::NodeConfig;
use drover_testkit::{
    Auth, BOB, CAROL, TestServer, bob, carol, scratch_dir, submit_as, submitted, system_accounts,
    wait_state_v2,
};
use serde_json::{Value, json};

fn submit(server: &TestServer, auth: Auth, body: Value) -> String {
    submitted(&submit_as(server, auth, &body))
}

fn state(server: &TestServer, id: &str) -> Value {
    server.get(&format!("/rest/jobs/{id}?api-version=2")).json()["states"]["state"].clone()
}

/// A job of `tasks` one-processor tasks running `command` in `dir` and asking for
/// `seconds`.
fn job(dir: &Path, command: &str, arguments: &str, tasks: u32, seconds: i64) -> Value {
    json!({"commandFile": command, "commandLineArguments": arguments,
           "initialWorkingDirectory": dir, "duration": seconds,
           "requirements": [{"taskCount": tasks}]})
}

#[test]
fn a_users_short_history_backfills_their_long_request_and_no_one_elses() {
    if !system_accounts() {
        return;
    }
    let server = TestServer::builder()
        .user(BOB, false)
        .user(CAROL, false)
        .config(|c| {
            c.nodes = vec![NodeConfig::new("n1", 4)];
            c.scheduler.policy.predict_runtimes = true;
        })
        .start();
    let work = scratch_dir();
    let job =
        |command, arguments, tasks, seconds| job(work.path(), command, arguments, tasks, seconds);
    // Bob's history: a job asking for an hour that ends at once.
    let history = submit(&server, bob(), job("/bin/true", "", 1, 3600));
    wait_state_v2(&server, &history, "Completed");
    // Carol holds 3 of the 4 processors for up to 600 s, and waits with a job of all 4:
    // it is reserved at the first one's requested end.
    let running = submit(&server, carol(), job("/bin/sleep", "600", 3, 600));
    wait_state_v2(&server, &running, "Running");
    let wide = submit(&server, carol(), job("/bin/true", "", 4, 60));
    // Carol has no history: her one-processor job asking for an hour would delay the
    // wide one, and waits.
    let carols = submit(&server, carol(), job("/bin/true", "", 1, 3600));
    // Bob's identical request is predicted to end in a second (his last job's run):
    // it starts in the hole before the reservation, and ends.
    let bobs = submit(&server, bob(), job("/bin/true", "", 1, 3600));
    wait_state_v2(&server, &bobs, "Completed");
    // Every pass since (bob's start and end) judged carol's job by her own history,
    // not bob's: it still waits, as does the wide job.
    assert_eq!(state(&server, &carols), "Idle");
    assert_eq!(state(&server, &wide), "Idle");
    assert_eq!(state(&server, &running), "Running");
    for id in [&running, &wide, &carols] {
        server.send("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin);
    }
}
