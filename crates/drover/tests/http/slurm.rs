//! The service over a real Slurm cluster (`[resource_manager] kind = "slurm"`, issue
//! #30): nodes come from Slurm, jobs run as Slurm jobs pinned to the nodes chosen here,
//! as their user, and end with their exit code. Runs with `DROVER_TEST_SLURM=1` (as
//! `scripts/test` sets after starting `scripts/services/slurm.sh`), else is skipped.

use drover_testkit::{Auth, PASSWORD, TestServer, scratch_dir, script};
use serde_json::json;

use crate::security::{BOB, system_accounts};

fn slurm() -> bool {
    if std::env::var("DROVER_TEST_SLURM").as_deref() == Ok("1") {
        return system_accounts();
    }
    eprintln!("skipped: DROVER_TEST_SLURM is not set (scripts/test starts Slurm and sets it)");
    false
}

fn wait_state(server: &TestServer, id: &str, state: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let job = server.get(&format!("/rest/jobs/{id}")).json();
        if job["state"] == state {
            return job;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{id} never became {state}: {job}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn jobs_run_on_slurm_nodes_as_their_user_and_end_with_their_code() {
    if !slurm() {
        return;
    }
    let server = TestServer::builder()
        .user(BOB, false)
        .config(|c| c.resource_manager.kind = drover::config::ResourceManagerKind::Slurm)
        .start();
    // The nodes are Slurm's.
    let nodes = server.get("/rest/nodes").json();
    let ids: Vec<&str> = nodes["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    assert!(ids.contains(&"node1") && ids.len() >= 2, "{nodes}");
    let about = server.get("/rest/diag/about").json();
    assert!(about.is_object());

    let work = scratch_dir();
    let command = script(work.path(), "job.sh", "echo \"user=$(id -un)\"\nexit 3");
    let bob = Auth::Basic(BOB.into(), PASSWORD.into());
    let reply = server.call(
        "POST",
        "/rest/jobs",
        bob,
        Some((
            "application/json",
            json!({"commandFile": command, "initialWorkingDirectory": work.path(),
                   "standardOutputFilePath": work.path().join("out.txt")})
            .to_string()
            .into_bytes(),
        )),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let id = reply.json()["id"].as_str().unwrap().to_string();
    let job = wait_state(&server, &id, "COMPLETED");
    assert_eq!(job["completionCode"], 3, "{job}");
    assert_eq!(job["rmName"], "slurm", "{job}");
    // Slurm's own job id, a number, as the resource manager's job id.
    let slurm_id = job["sourceRmJobId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !slurm_id.is_empty() && slurm_id.bytes().all(|b| b.is_ascii_digit()),
        "{job}"
    );
    assert_eq!(job["destinationRmJobId"], slurm_id.as_str());
    let v2 = server.get(&format!("/rest/jobs/{id}?api-version=2")).json();
    assert_eq!(
        v2["resourceManagers"][0]["jobName"],
        slurm_id.as_str(),
        "{v2}"
    );
    assert!(ids.contains(&job["hosts"][0].as_str().unwrap()), "{job}");
    let out = std::fs::read_to_string(work.path().join("out.txt")).unwrap_or_default();
    assert!(out.contains(&format!("user={BOB}")), "{out:?}");

    // A running job is cancelled through Slurm.
    let sleeper = script(work.path(), "sleep.sh", "sleep 60");
    let reply = server.send_json(
        "POST",
        "/rest/jobs",
        &json!({"commandFile": sleeper, "user": BOB,
        "initialWorkingDirectory": work.path()}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let long = reply.json()["id"].as_str().unwrap().to_string();
    wait_state(&server, &long, "RUNNING");
    assert_eq!(
        server
            .call("DELETE", &format!("/rest/jobs/{long}"), Auth::Admin, None)
            .status,
        200
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let state = server.get(&format!("/rest/jobs/{long}")).json()["state"].clone();
        if state != "RUNNING" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{long} still runs");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
