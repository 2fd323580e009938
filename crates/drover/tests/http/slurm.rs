//! The service over a real Slurm cluster (`[resource_manager] kind = "slurm"`, issue
//! #30): nodes come from Slurm, jobs run as Slurm jobs pinned to the nodes chosen here,
//! as their user, and end with their exit code. Runs with `DROVER_TEST_SLURM=1` (as
//! `scripts/test` sets after starting `scripts/services/slurm.sh`), else is skipped.

use std::process::Command;
use std::time::{Duration, Instant};

use drover_testkit::wait_for_value as wait;
use drover_testkit::{Auth, PASSWORD, TestServer, scratch_dir, script, send, slurm_state};
use serde_json::{Value, json};

use crate::security::{BOB, CAROL, system_accounts};

/// Slurm is one cluster: its tests take turns (a node drained by one would slow the
/// others, and every server sees the jobs of the others as submitted directly).
static SLURM: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    SLURM.lock().unwrap_or_else(|e| e.into_inner())
}

/// A server on Slurm that reads Slurm's nodes (and looks for jobs) every second.
fn slurm_server() -> TestServer {
    TestServer::builder()
        .user(BOB, false)
        .user(CAROL, false)
        .config(|c| {
            c.resource_manager.kind = drover::config::ResourceManagerKind::Slurm;
            c.resource_manager.slurm_node_poll_seconds = 1;
        })
        .start()
}

/// Runs a Slurm command (or another), which must succeed; its output.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Submits `sleep <seconds>` to Slurm directly, as drover-bob; Slurm's job id.
fn sbatch_by_hand(name: &str, seconds: u32) -> String {
    sbatch_by_hand_with(name, seconds, &[])
}

/// [`sbatch_by_hand`] with more of sbatch's options.
fn sbatch_by_hand_with(name: &str, seconds: u32, options: &[&str]) -> String {
    let name = format!("--job-name={name}");
    let wrap = format!("--wrap=sleep {seconds}");
    let mut args = vec![
        "-u",
        BOB,
        "--",
        "sbatch",
        "--parsable",
        "--chdir=/tmp",
        "--output=/dev/null",
        &name,
        &wrap,
    ];
    args.extend(options);
    let out = run("runuser", &args);
    let id = out.trim().split(';').next().unwrap().to_string();
    assert!(
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
        "{out}"
    );
    id
}

/// The job Drover shows for a Slurm job, once it shows one.
fn shown_job(server: &TestServer, slurm_id: &str) -> Option<Value> {
    let list = server.get("/rest/jobs?fields=id,sourceRmJobId").json();
    let id = list["results"]
        .as_array()?
        .iter()
        .find(|j| j["sourceRmJobId"] == slurm_id)?["id"]
        .as_str()?
        .to_string();
    Some(server.get(&format!("/rest/jobs/{id}")).json())
}

/// Resumes a drained node when dropped (the test passed or not).
struct Resume(&'static str);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = Command::new("scontrol")
            .args(["update", &format!("nodename={}", self.0), "state=resume"])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn submit_as_bob(server: &TestServer, body: Value) -> String {
    let reply = server.call(
        "POST",
        "/rest/jobs",
        Auth::Basic(BOB.into(), PASSWORD.into()),
        Some(("application/json", body.to_string().into_bytes())),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.json()["id"].as_str().unwrap().to_string()
}

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
    let _turn = turn();
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
    // Its start is Slurm's (the test machine's clock is UTC, as the dates shown).
    let slurm_start = run(
        "squeue",
        &[
            "-h",
            "--states=all",
            &format!("--jobs={slurm_id}"),
            "-o",
            "%S",
        ],
    );
    let slurm_start = format!("{} UTC", slurm_start.trim().replace('T', " "));
    assert_eq!(job["startDate"], slurm_start.as_str(), "{job}");
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

/// A job held here never reaches Slurm until released; once it runs there, suspend and
/// resume are Slurm's, and a requeue ends its Slurm job and starts a new one.
#[test]
fn slurm_jobs_are_held_released_suspended_resumed_and_requeued() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let work = scratch_dir();
    let sleeper = script(work.path(), "sleep.sh", "sleep 120");
    let id = submit_as_bob(
        &server,
        json!({"commandFile": sleeper, "initialWorkingDirectory": work.path(),
               "holds": ["USER"], "flags": ["SUSPENDABLE", "RESTARTABLE"]}),
    );
    std::thread::sleep(Duration::from_secs(2));
    let job = server.get(&format!("/rest/jobs/{id}")).json();
    assert_eq!(job["state"], "HOLD", "{job}");
    // Not in Slurm: no Slurm job id yet (the job's own id stands for it).
    assert_eq!(job["sourceRmJobId"], id.as_str(), "{job}");

    let reply = server.send("PUT", &format!("/rest/jobs/{id}/unhold"), Auth::Admin);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let first = wait("it runs in Slurm", 60, || {
        let job = server.get(&format!("/rest/jobs/{id}")).json();
        let slurm_id = job["sourceRmJobId"].as_str()?.to_string();
        (slurm_id != id && slurm_state(&slurm_id) == "RUNNING").then_some(slurm_id)
    });

    let reply = server.send("PUT", &format!("/rest/jobs/{id}/suspend"), Auth::Admin);
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait("Slurm suspends it", 30, || {
        (slurm_state(&first) == "SUSPENDED").then_some(())
    });
    let v2 = server.get(&format!("/rest/jobs/{id}?api-version=2")).json();
    assert_eq!(v2["states"]["state"], "Suspended", "{v2}");
    let reply = server.send("PUT", &format!("/rest/jobs/{id}/resume"), Auth::Admin);
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait("Slurm resumes it", 30, || {
        (slurm_state(&first) == "RUNNING").then_some(())
    });

    let reply = server.send("PUT", &format!("/rest/jobs/{id}/requeue"), Auth::Admin);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let second = wait("it runs again as another Slurm job", 90, || {
        let job = server.get(&format!("/rest/jobs/{id}")).json();
        let slurm_id = job["sourceRmJobId"].as_str()?.to_string();
        (slurm_id != first && job["startCount"] == 2 && slurm_state(&slurm_id) == "RUNNING")
            .then_some(slurm_id)
    });
    wait("the first Slurm job is over", 60, || {
        let state = slurm_state(&first);
        (state.is_empty() || !matches!(state.as_str(), "RUNNING" | "SUSPENDED" | "PENDING"))
            .then_some(())
    });
    assert_eq!(
        server
            .call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None)
            .status,
        200
    );
    wait("the second Slurm job is cancelled", 60, || {
        (slurm_state(&second) != "RUNNING").then_some(())
    });
}

/// A node Slurm drains is Drained here and gets no new job; resumed, it takes work again.
#[test]
fn nodes_slurm_drains_take_no_work_until_resumed() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let node_state = |server: &TestServer| server.get("/rest/nodes/node3").json()["state"].clone();
    assert_ne!(node_state(&server), "Drained");
    let _resume = Resume("node3");
    run(
        "scontrol",
        &[
            "update",
            "nodename=node3",
            "state=drain",
            "reason=drover test",
        ],
    );
    wait("node3 shows Drained", 30, || {
        (node_state(&server) == "Drained").then_some(())
    });
    let node = server.get("/rest/nodes/node3").json();
    assert_eq!(node["availableProcessors"], 0, "{node}");

    // Three jobs of a whole node each (4 processors): two run on node1 and node2, the
    // third waits rather than go to node3.
    let work = scratch_dir();
    let sleeper = script(work.path(), "sleep.sh", "sleep 60");
    let body = json!({"commandFile": sleeper, "initialWorkingDirectory": work.path(),
        "requirements": {"requiredProcessorsPerTask": 4}});
    let jobs: Vec<String> = (0..3)
        .map(|_| submit_as_bob(&server, body.clone()))
        .collect();
    let hosts = |server: &TestServer, id: &str| {
        let job = server.get(&format!("/rest/jobs/{id}")).json();
        (
            job["state"].as_str().unwrap_or_default().to_string(),
            job["hosts"].clone(),
        )
    };
    wait("two jobs run", 30, || {
        let running = jobs
            .iter()
            .filter(|id| hosts(&server, id).0 == "RUNNING")
            .count();
        (running == 2).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let mut waiting = Vec::new();
    for id in &jobs {
        let (state, on) = hosts(&server, id);
        assert!(
            !on.to_string().contains("node3"),
            "{id} went to node3: {on}"
        );
        if state != "RUNNING" {
            waiting.push(id.clone());
        }
    }
    assert_eq!(waiting.len(), 1, "one job waits: {waiting:?}");

    // Resumed: node3 is back, and the waiting job runs there.
    run("scontrol", &["update", "nodename=node3", "state=resume"]);
    wait("node3 is back", 30, || {
        (node_state(&server) != "Drained").then_some(())
    });
    let on = wait("the third job runs", 30, || {
        let (state, on) = hosts(&server, &waiting[0]);
        (state == "RUNNING").then_some(on)
    });
    assert_eq!(on, json!(["node3"]));
    for id in &jobs {
        server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
    }

    // Down in Slurm: Down here; resumed: back. Only once Slurm has let the cancelled
    // jobs go: with `ReturnToService=2` a node set down while a job still ends on it
    // comes back at once when its slurmd registers again.
    wait("node3 runs nothing in Slurm", 60, || {
        run(
            "squeue",
            &["-h", "--states=all", "-w", "node3", "-o", "%i %T"],
        )
        .lines()
        .all(|line| !line.contains("RUNNING") && !line.contains("COMPLETING"))
        .then_some(())
    });
    run(
        "scontrol",
        &[
            "update",
            "nodename=node3",
            "state=down",
            "reason=drover test",
        ],
    );
    wait("node3 shows Down", 30, || {
        (node_state(&server) == "Down").then_some(())
    });
    run("scontrol", &["update", "nodename=node3", "state=resume"]);
    wait("node3 is up again", 30, || {
        (node_state(&server) != "Down").then_some(())
    });
}

/// A dynamic Slurm node (`slurmd -Z`) stopped and removed from Slurm when dropped.
struct DynamicNode {
    name: &'static str,
    slurmd: std::process::Child,
}

impl DynamicNode {
    /// Registers `name` with slurmctld as a node of 4 processors.
    fn start(name: &'static str) -> DynamicNode {
        std::fs::create_dir_all(format!("/var/lib/slurm/slurmd/{name}")).unwrap();
        let slurmd = Command::new("/usr/sbin/slurmd")
            .args(["-D", "-Z", "-N", name, "--conf", "CPUs=4 RealMemory=1000"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("slurmd starts");
        DynamicNode { name, slurmd }
    }

    /// Stops its slurmd and deletes the node from Slurm.
    fn remove(&mut self) {
        let _ = self.slurmd.kill();
        let _ = self.slurmd.wait();
        let node = format!("nodename={}", self.name);
        let deadline = Instant::now() + Duration::from_secs(30);
        // Slurm deletes a node only once nothing runs on it.
        while !Command::new("scontrol")
            .args(["delete", &node])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for DynamicNode {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A node Slurm gains while the service runs is added and takes work; one it loses is
/// down here, also after a restart of the service.
#[test]
fn nodes_slurm_gains_take_work_and_those_it_loses_go_down() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    assert_eq!(server.get("/rest/nodes/node9").status, 404);
    let mut node9 = DynamicNode::start("node9");
    let node = wait("node9 shows", 30, || {
        let reply = server.get("/rest/nodes/node9");
        (reply.status == 200).then(|| reply.json())
    });
    assert_eq!(node["totalProcessors"], 4, "{node}");
    assert_eq!(node["totalMemory"], 1000, "{node}");
    assert_eq!(node["partition"], "debug", "{node}");

    // Four jobs of a whole node each: one of them runs on node9.
    let work = scratch_dir();
    let sleeper = script(work.path(), "sleep.sh", "sleep 60");
    let body = json!({"commandFile": sleeper, "initialWorkingDirectory": work.path(),
        "requirements": {"requiredProcessorsPerTask": 4}});
    let jobs: Vec<String> = (0..4)
        .map(|_| submit_as_bob(&server, body.clone()))
        .collect();
    let hosts = wait("the four jobs run", 60, || {
        let hosts: Vec<Value> = jobs
            .iter()
            .map(|id| server.get(&format!("/rest/jobs/{id}")).json())
            .filter(|job| job["state"] == "RUNNING")
            .map(|job| job["hosts"].clone())
            .collect();
        (hosts.len() == 4).then_some(hosts)
    });
    assert!(hosts.contains(&json!(["node9"])), "{hosts:?}");
    for id in &jobs {
        server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
    }
    wait("node9 runs nothing in Slurm", 60, || {
        run("squeue", &["-h", "-w", "node9", "-o", "%i"])
            .trim()
            .is_empty()
            .then_some(())
    });

    // Gone from Slurm: down here, and still so after a restart.
    node9.remove();
    let node = wait("node9 shows Down", 30, || {
        let node = server.get("/rest/nodes/node9").json();
        (node["state"] == "Down").then_some(node)
    });
    assert!(node.to_string().contains("no longer reports"), "{node}");
    let server = server.restart_after(Duration::ZERO);
    let node = server.get("/rest/nodes/node9").json();
    assert_eq!(node["state"], "Down", "{node}");
}

/// A job sbatch'ed by hand shows here as its user's, holds its node, may be cancelled
/// by an administrator (not by another user) and ends; its number is never given again.
#[test]
fn jobs_submitted_to_slurm_directly_show_and_an_administrator_cancels_them() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let slurm_id = sbatch_by_hand_with("by-hand", 120, &["--mem=700"]);
    let job = wait("the job shows", 30, || {
        shown_job(&server, &slurm_id).filter(|j| j["state"] == "RUNNING")
    });
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job["user"], BOB, "{job}");
    assert_eq!(job["destinationRmJobId"], slurm_id.as_str(), "{job}");
    assert_eq!(job["rmName"], "slurm", "{job}");
    assert!(
        job["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("RM_DETECTED")),
        "{job}"
    );
    let host = job["hosts"][0].as_str().unwrap().to_string();
    assert!(host.starts_with("node"), "{job}");
    let v2 = server.get(&format!("/rest/jobs/{id}?api-version=2")).json();
    assert_eq!(v2["customName"], "by-hand", "{v2}");
    // Its node holds it (its processor and memory are taken).
    let node = server.get(&format!("/rest/nodes/{host}")).json();
    assert!(node["jobs"].to_string().contains(&id), "{node}");
    assert!(node["availableProcessors"].as_i64().unwrap() < 4, "{node}");
    assert!(
        node["availableMemory"].as_i64().unwrap() <= 2000 - 700,
        "{node}"
    );

    // Its user reads it; another user neither reads nor cancels it.
    let bob = Auth::Basic(BOB.into(), PASSWORD.into());
    let carol = Auth::Basic(CAROL.into(), PASSWORD.into());
    assert_eq!(
        server
            .get_as(bob.clone(), &format!("/rest/jobs/{id}"))
            .status,
        200
    );
    assert_eq!(
        server
            .get_as(carol.clone(), &format!("/rest/jobs/{id}"))
            .status,
        404
    );
    let reply = server.call("DELETE", &format!("/rest/jobs/{id}"), carol, None);
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(slurm_state(&slurm_id), "RUNNING");
    // It is Slurm's to run: not changed here (only cancelled).
    let reply = server.call(
        "PUT",
        &format!("/rest/jobs/{id}"),
        bob,
        Some((
            "application/json",
            json!({"holds": ["user"]}).to_string().into_bytes(),
        )),
    );
    assert!(reply.status >= 400, "{}", reply.body);

    // Seen again and again, it stays one job.
    std::thread::sleep(Duration::from_secs(3));
    let list = server.get("/rest/jobs?fields=id,sourceRmJobId").json();
    let copies = list["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["sourceRmJobId"] == slurm_id.as_str())
        .count();
    assert_eq!(copies, 1, "{list}");

    // An administrator cancels it: scancel, and it ends here.
    let reply = server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    // (SIGTERM first: it ends FAILED, or CANCELLED once the grace period is over.)
    wait("Slurm ends it", 30, || {
        matches!(slurm_state(&slurm_id).as_str(), "FAILED" | "CANCELLED").then_some(())
    });
    wait("its node is free of it", 30, || {
        let node = server.get(&format!("/rest/nodes/{host}")).json();
        (!node["jobs"].to_string().contains(&id)).then_some(())
    });
    let job = server.get(&format!("/rest/jobs/{id}")).json();
    assert_ne!(job["state"], "RUNNING", "{job}");

    // A later submission gets a later number.
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "true");
    let next = submit_as_bob(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path()}),
    );
    let number = |id: &str| id.rsplit_once('.').unwrap().1.parse::<u64>().unwrap();
    assert!(number(&next) > number(&id), "{next} after {id}");
}

/// A restart of the service adopts its running Slurm jobs (and the one submitted
/// directly), and reads back the end of one that ended while it was down.
#[test]
fn a_restarted_service_adopts_slurm_jobs_and_reads_their_ends() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let work = scratch_dir();
    // The jobs by hand first, the short ones long enough to be seen running by all
    // (each one by hand shows only at a look for them, every second) on a loaded machine.
    let by_hand = sbatch_by_hand("by-hand-restart", 120);
    let short_by_hand = sbatch_by_hand("by-hand-short", 8);
    let quick = script(work.path(), "quick.sh", "sleep 6\nexit 5");
    let long = script(work.path(), "long.sh", "sleep 25\nexit 6");
    let quick = submit_as_bob(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path()}),
    );
    let long = submit_as_bob(
        &server,
        json!({"commandFile": long, "initialWorkingDirectory": work.path()}),
    );
    let shown = wait("the job by hand shows", 30, || shown_job(&server, &by_hand));
    let short = wait("the short job by hand shows", 30, || {
        shown_job(&server, &short_by_hand)
    });
    let slurm_id_of = |id: &str| {
        wait(&format!("{id} runs"), 30, || {
            let job = server.get(&format!("/rest/jobs/{id}")).json();
            job["sourceRmJobId"].as_str().map(str::to_string)
        })
    };
    let long_slurm = slurm_id_of(&long);
    let quick_slurm = slurm_id_of(&quick);
    // Started in Slurm (Drover's RUNNING begins when sbatch answers), not yet over;
    // so is the short one by hand (it may have been seen waiting: IDLE here).
    wait("the quick jobs start in Slurm", 60, || {
        (slurm_state(&quick_slurm) == "RUNNING" && slurm_state(&short_by_hand) == "RUNNING")
            .then_some(())
    });

    // Down long enough for the quick ones to end.
    let server = server.restart_after(Duration::from_secs(10));
    let job = server.get(&format!("/rest/jobs/{quick}")).json();
    assert_eq!(job["state"], "COMPLETED", "{job}");
    assert_eq!(job["completionCode"], 5, "{job}");
    let job = server.get(&format!("/rest/jobs/{long}")).json();
    assert_eq!(job["state"], "RUNNING", "{job}");
    assert_eq!(job["sourceRmJobId"], long_slurm.as_str(), "{job}");
    let again = shown_job(&server, &by_hand).expect("still shown");
    assert_eq!(again["id"], shown["id"], "the same job, not a new one");
    // (Seen waiting before the restart, it may be IDLE until the watcher's first look.)
    wait("the job by hand shows running", 30, || {
        let id = again["id"].as_str().unwrap();
        (server.get(&format!("/rest/jobs/{id}")).json()["state"] == "RUNNING").then_some(())
    });
    // The short one by hand ended meanwhile: its end is read back too.
    let id = short["id"].as_str().unwrap();
    let short = server.get(&format!("/rest/jobs/{id}")).json();
    assert_eq!(short["state"], "COMPLETED", "{short}");
    assert_eq!(short["completionCode"], 0, "{short}");

    // The adopted job's end is read when it comes.
    let job = wait("the long job ends", 60, || {
        let job = server.get(&format!("/rest/jobs/{long}")).json();
        (job["state"] == "COMPLETED").then_some(job)
    });
    assert_eq!(job["completionCode"], 6, "{job}");
    let id = again["id"].as_str().unwrap();
    server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
}

/// Whether the cluster keeps accounts (`slurmdbd`, as `scripts/services/slurm.sh`
/// starts by default): `sacct` answers.
fn accounting() -> bool {
    let answers = Command::new("sacct")
        .args(["-n", "-X", "--jobs=1"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !answers {
        eprintln!("skipped: the Slurm cluster keeps no accounts (no slurmdbd)");
    }
    answers
}

/// Sets slurmctld's `MinJobAge` (how long it lists an ended job) in slurm.conf and has
/// it read again; the value it had is set back when dropped.
struct MinJobAge(String);

impl MinJobAge {
    fn set(seconds: u32) -> MinJobAge {
        let before = Self::write(&format!("MinJobAge={seconds}"));
        MinJobAge(before)
    }

    /// Replaces the `MinJobAge=` line; the line it replaced.
    fn write(line: &str) -> String {
        let path = std::env::var("SLURM_CONF").unwrap_or_else(|_| "/etc/slurm/slurm.conf".into());
        let conf = std::fs::read_to_string(&path).expect("slurm.conf");
        let before = conf
            .lines()
            .find(|l| l.starts_with("MinJobAge="))
            .expect("slurm.conf sets MinJobAge")
            .to_string();
        std::fs::write(&path, conf.replace(&before, line)).unwrap();
        run("scontrol", &["reconfigure"]);
        before
    }
}

impl Drop for MinJobAge {
    fn drop(&mut self) {
        Self::write(&self.0);
    }
}

/// Issue #56, item 3: the service down for longer than Slurm's `MinJobAge` while its
/// jobs end (slurmctld forgets them) reads each end from accounting (`sacct`, through
/// slurmdbd) with its true code: a code, a signal, a success; a job still running is
/// adopted and its end read as it comes.
#[test]
fn ends_slurm_forgets_while_the_service_is_down_are_read_from_accounting() {
    if !slurm() || !accounting() {
        return;
    }
    let _turn = turn();
    let _age = MinJobAge::set(2);
    let server = slurm_server();
    let work = scratch_dir();
    let ends = [
        ("code", "sleep 4\nexit 3", 3),
        ("signal", "sleep 4\nkill -9 $$", 137),
        ("success", "sleep 4\nexit 0", 0),
    ];
    let ids: Vec<(String, i64)> = ends
        .iter()
        .map(|(name, body, code)| {
            let file = script(work.path(), &format!("{name}.sh"), body);
            let id = submit_as_bob(
                &server,
                json!({"commandFile": file, "initialWorkingDirectory": work.path()}),
            );
            (id, *code)
        })
        .collect();
    let long = script(work.path(), "long.sh", "sleep 40\nexit 8");
    let long = submit_as_bob(
        &server,
        json!({"commandFile": long, "initialWorkingDirectory": work.path()}),
    );
    let slurm_id_of = |id: &str| {
        wait(&format!("{id} runs in Slurm"), 60, || {
            let job = server.get(&format!("/rest/jobs/{id}")).json();
            let slurm_id = job["sourceRmJobId"].as_str()?.to_string();
            (slurm_state(&slurm_id) == "RUNNING").then_some(slurm_id)
        })
    };
    let slurm_ids: Vec<String> = ids.iter().map(|(id, _)| slurm_id_of(id)).collect();
    let long_slurm = slurm_id_of(&long);

    // Down until slurmctld has forgotten the three (they ended, then MinJobAge passed).
    let server = server.restart_once(|| {
        wait("slurmctld forgets the ended jobs", 120, || {
            slurm_ids
                .iter()
                .all(|id| slurm_state(id).is_empty())
                .then_some(())
        });
    });
    for ((id, code), slurm_id) in ids.iter().zip(&slurm_ids) {
        let job = server.get(&format!("/rest/jobs/{id}")).json();
        assert_eq!(job["state"], "COMPLETED", "{job}");
        assert_eq!(job["completionCode"], *code, "Slurm job {slurm_id}: {job}");
    }
    let job = server.get(&format!("/rest/jobs/{long}")).json();
    assert_eq!(job["state"], "RUNNING", "{job}");
    assert_eq!(job["sourceRmJobId"], long_slurm.as_str(), "{job}");
    // The adopted job ends while the service runs: the watcher, too, reads it from
    // accounting if slurmctld forgot it before a look.
    let job = wait("the long job ends", 90, || {
        let job = server.get(&format!("/rest/jobs/{long}")).json();
        (job["state"] == "COMPLETED").then_some(job)
    });
    assert_eq!(job["completionCode"], 8, "{job}");
}

/// Where `scripts/services/slurm.sh` keeps its daemons' PID files and logs.
fn slurm_run_dir() -> std::path::PathBuf {
    std::env::var_os("RUN").map_or_else(|| "/tmp/drover-slurm".into(), Into::into)
}

/// Stops slurmctld (the one `scripts/services/slurm.sh` started), leaving munged and
/// the slurmd nodes (and their jobs) running.
fn stop_slurmctld() {
    let pid_file = slurm_run_dir().join("slurmctld.pid");
    let pid = std::fs::read_to_string(&pid_file).expect("slurmctld's PID file");
    let pid = pid.trim().to_string();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert_eq!(comm.trim(), "slurmctld", "PID {pid} is slurmctld");
    run("kill", &[&pid]);
    wait("slurmctld stops", 30, || {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        (comm.trim() != "slurmctld" || state.contains(") Z ")).then_some(())
    });
}

/// Starts slurmctld again as the script does (its saved state recovered), and waits
/// until it answers.
fn start_slurmctld() {
    let dir = slurm_run_dir();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("slurmctld.log"))
        .unwrap();
    let mut child = Command::new("/usr/sbin/slurmctld")
        .arg("-D")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("slurmctld starts");
    std::fs::write(dir.join("slurmctld.pid"), format!("{}\n", child.id())).unwrap();
    // It outlives the test (the script stops it); reaped here should it end before.
    std::thread::spawn(move || child.wait());
    wait("slurmctld answers", 60, || {
        Command::new("scontrol")
            .arg("ping")
            .output()
            .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("UP"))
            .then_some(())
    });
}

/// Starts slurmctld again when dropped, should the test fail while it is stopped.
struct Restart(bool);

impl Drop for Restart {
    fn drop(&mut self) {
        if self.0 {
            start_slurmctld();
        }
    }
}

/// slurmctld stopped and started again while jobs run (one ending meanwhile) loses
/// nothing: the ends are read back, the job by hand is the same job.
#[test]
fn a_restart_of_slurmctld_loses_nothing() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "sleep 4\nexit 4");
    let quick = submit_as_bob(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path()}),
    );
    let by_hand = sbatch_by_hand("by-hand-ctld", 120);
    let shown = wait("the job by hand shows", 30, || shown_job(&server, &by_hand));
    let quick_slurm = wait("the job runs", 30, || {
        let job = server.get(&format!("/rest/jobs/{quick}")).json();
        (job["state"] == "RUNNING").then(|| job["sourceRmJobId"].as_str().unwrap().to_string())
    });
    // Running in Slurm too (Drover's RUNNING begins when sbatch answers).
    wait("both run in Slurm", 30, || {
        (slurm_state(&quick_slurm) == "RUNNING" && slurm_state(&by_hand) == "RUNNING").then_some(())
    });

    stop_slurmctld();
    let mut restart = Restart(true);
    // The service restarts meanwhile: it starts with the nodes it knew (the store keeps
    // what Slurm said of them) and adopts its jobs without an answer from Slurm. A new
    // server that never read Slurm starts too, with no node until Slurm answers.
    let server = server.restart_after(Duration::ZERO);
    let node_ids = |server: &TestServer| -> Vec<String> {
        let nodes = server.get("/rest/nodes").json();
        let mut ids: Vec<String> = nodes["results"]
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .filter_map(|n| n["id"].as_str().map(str::to_string))
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(node_ids(&server), ["node1", "node2", "node3"]);
    let fresh = slurm_server();
    assert_eq!(node_ids(&fresh), Vec::<String>::new());
    // A job submitted meanwhile cannot start: it waits (it is not held).
    let during = script(work.path(), "during.sh", "exit 7");
    let during = submit_as_bob(
        &server,
        json!({"commandFile": during, "initialWorkingDirectory": work.path()}),
    );
    // The quick job ends while slurmctld is away; the service keeps asking. (sbatch
    // gives up after about 9 s.)
    std::thread::sleep(Duration::from_secs(12));
    let job = server.get(&format!("/rest/jobs/{quick}")).json();
    assert_eq!(job["state"], "RUNNING", "no end is made up: {job}");
    start_slurmctld();
    restart.0 = false;
    wait("the new server reads Slurm's nodes", 30, || {
        (node_ids(&fresh) == ["node1", "node2", "node3"]).then_some(())
    });
    // (It shows the other server's jobs as submitted directly: they are not its to end.)
    fresh.stop_leaving_jobs();

    let job = wait("the quick job's end is read", 60, || {
        let job = server.get(&format!("/rest/jobs/{quick}")).json();
        (job["state"] == "COMPLETED").then_some(job)
    });
    assert_eq!(job["completionCode"], 4, "{job}");
    let job = wait("the job submitted meanwhile runs and ends", 90, || {
        let job = server.get(&format!("/rest/jobs/{during}")).json();
        (job["state"] == "COMPLETED").then_some(job)
    });
    assert_eq!(job["completionCode"], 7, "{job}");
    assert_eq!(job["holds"], json!([]), "{job}");
    // Not even tried while slurmctld was known to be away (the restarted service knew
    // it from its first reading of the nodes): started once, when it answered.
    assert_eq!(job["startCount"], 1, "{job}");
    let again = shown_job(&server, &by_hand).expect("still shown");
    assert_eq!(again["id"], shown["id"]);
    assert_eq!(again["state"], "RUNNING", "{again}");
    assert_eq!(slurm_state(&by_hand), "RUNNING");

    // And work goes on.
    let next = script(work.path(), "next.sh", "exit 0");
    let next = submit_as_bob(
        &server,
        json!({"commandFile": next, "initialWorkingDirectory": work.path()}),
    );
    let job = wait("a new job runs and ends", 60, || {
        let job = server.get(&format!("/rest/jobs/{next}")).json();
        (job["state"] == "COMPLETED").then_some(job)
    });
    assert_eq!(job["completionCode"], 0, "{job}");
    let id = again["id"].as_str().unwrap();
    server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
}

/// A job by hand that waits in Slurm shows waiting (holding nothing, never scheduled
/// here); once Slurm runs it, it holds its node; one cancelled while it waits is
/// cancelled in Slurm.
#[test]
fn jobs_submitted_to_slurm_directly_that_wait_show_waiting_then_running() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let held = sbatch_by_hand_with("by-hand-held", 120, &["--hold"]);
    let job = wait("the waiting job shows", 30, || shown_job(&server, &held));
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job["state"], "IDLE", "{job}");
    assert_eq!(job["user"], BOB, "{job}");
    assert_eq!(job["hosts"], json!([]), "{job}");
    // Never started here.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        server.get(&format!("/rest/jobs/{id}")).json()["state"],
        "IDLE"
    );
    assert_eq!(slurm_state(&held), "PENDING");

    run("scontrol", &["release", &held]);
    let job = wait("it runs", 30, || {
        let job = server.get(&format!("/rest/jobs/{id}")).json();
        (job["state"] == "RUNNING").then_some(job)
    });
    let host = job["hosts"][0].as_str().expect("a host").to_string();
    let node = server.get(&format!("/rest/nodes/{host}")).json();
    assert!(node["jobs"].to_string().contains(&id), "{node}");

    // Suspended and resumed in Slurm: followed here.
    let state_is = |state: &str| {
        let job = server.get(&format!("/rest/jobs/{id}")).json();
        (job["state"] == state).then_some(())
    };
    run("scontrol", &["suspend", &held]);
    wait("it shows suspended", 30, || state_is("SUSPENDED"));
    run("scontrol", &["resume", &held]);
    wait("it shows running again", 30, || state_is("RUNNING"));

    // Another, cancelled while it waits: cancelled in Slurm too.
    let waiting = sbatch_by_hand_with("by-hand-held-2", 120, &["--hold"]);
    let other = wait("the second shows", 30, || shown_job(&server, &waiting));
    let other = other["id"].as_str().unwrap().to_string();
    let reply = server.call("DELETE", &format!("/rest/jobs/{other}"), Auth::Admin, None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait("Slurm cancels it", 30, || {
        matches!(slurm_state(&waiting).as_str(), "CANCELLED" | "").then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let job = server.get(&format!("/rest/jobs/{other}")).json();
    assert_eq!(job["state"], "REMOVED", "{job}");
    server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
}

/// A node drained in Slurm before the service starts is Drained from the start, not
/// only after the first refresh (every 5 s here).
#[test]
fn a_node_drained_before_the_start_is_drained_at_once() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let _resume = Resume("node2");
    run(
        "scontrol",
        &[
            "update",
            "nodename=node2",
            "state=drain",
            "reason=drover test",
        ],
    );
    let started = Instant::now();
    let server = TestServer::builder()
        .config(|c| c.resource_manager.kind = drover::config::ResourceManagerKind::Slurm)
        .start();
    wait("node2 shows Drained", 2, || {
        (server.get("/rest/nodes/node2").json()["state"] == "Drained").then_some(())
    });
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Two services on one Slurm cluster, under the same scheduler name: each names its
/// Slurm jobs after its own store's identity, never takes the other's for a job
/// submitted directly, and leaves them alone; jobs submitted by hand both see.
#[test]
fn two_services_sharing_a_cluster_never_take_each_others_jobs() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let first = slurm_server();
    let second = slurm_server();
    let work = scratch_dir();
    let command = script(work.path(), "long.sh", "sleep 120");
    let id = submit_as_bob(
        &first,
        json!({"commandFile": command, "initialWorkingDirectory": work.path()}),
    );
    let job = wait_state(&first, &id, "RUNNING");
    let slurm_id = job["destinationRmJobId"].as_str().unwrap().to_string();
    let name = run("squeue", &["-h", "-o", "%j", &format!("--jobs={slurm_id}")]);
    let name = name.trim();
    assert!(
        name.starts_with("drover-")
            && name.ends_with(&format!("-{id}"))
            && name != format!("drover-{id}"),
        "{name}"
    );
    // A job submitted by hand shows in the second service: it looks for such jobs...
    let by_hand = sbatch_by_hand("by-hand", 120);
    wait(
        "the second service shows the job submitted by hand",
        30,
        || shown_job(&second, &by_hand),
    );
    // ...and the first service's job is not one of them.
    assert!(
        shown_job(&second, &slurm_id).is_none(),
        "{}",
        second.get("/rest/jobs").body
    );
    let listed = second.get("/rest/jobs?fields=id,customName").json();
    assert!(!listed.to_string().contains("long"), "{listed}");
    assert_eq!(slurm_state(&slurm_id), "RUNNING");
    run("scancel", &[&by_hand]);
    let reply = first.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
    assert!(reply.status < 300, "{}", reply.body);
}

/// The Slurm jobs of VM `id`'s guest that run or wait: `(job id, node)`.
fn guest_jobs(id: &str) -> Vec<(String, String)> {
    run(
        "squeue",
        &["-h", "-o", "%i %N %j %u", "--states=PENDING,RUNNING"],
    )
    .lines()
    .filter_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let named = fields.get(2)?.ends_with(&format!("-vm-{id}"));
        named.then(|| {
            assert_eq!(fields.get(3), Some(&"drover-guest"), "{line}");
            (
                fields[0].to_string(),
                fields.get(1).unwrap_or(&"").to_string(),
            )
        })
    })
    .collect()
}

/// Ends the guest account's Slurm jobs when dropped (a failed test leaves its guests').
struct GuestJobs;

impl Drop for GuestJobs {
    fn drop(&mut self) {
        let _ = Command::new("scancel")
            .args(["-u", "drover-guest"])
            .status();
    }
}

/// Whether a QEMU process of VM `id` runs under a `slurmstepd` (inside an allocation).
fn qemu_in_allocation(id: &str) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let is_guest = args
                .first()
                .is_some_and(|a| a.ends_with(b"qemu-system-x86_64"))
                && args
                    .windows(2)
                    .any(|w| w[0] == b"-name" && w[1] == id.as_bytes());
            let parent = std::fs::read_to_string(entry.path().join("status"))
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("PPid:").map(|p| p.trim().to_string()))
                .unwrap_or_default();
            let parent_program =
                std::fs::read_to_string(format!("/proc/{parent}/comm")).unwrap_or_default();
            is_guest && parent_program.trim() == "slurmstepd"
        })
}

/// With the Slurm resource manager a VM's guest runs on the node the engine chose, as a
/// Slurm job of the guest account holding the VM's processors there; a live migration
/// moves it to a job on the other node (its uptime goes on) and frees the first; its
/// deletion ends the job. Needs real guests too (`DROVER_GUEST_IMAGE_DIR`).
#[test]
fn a_vm_guest_runs_in_a_slurm_job_on_its_node_and_migrates_live_between_nodes() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    // Those an earlier failed run left go first.
    drop(GuestJobs);
    let _jobs = GuestJobs;
    // Shared storage: here, a directory the guest account may reach (not the data
    // directory, which only root enters).
    let guest_dir = tempfile::Builder::new()
        .prefix("drover-guests-")
        .tempdir_in("/var/tmp")
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(guest_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = guest_dir.path().join("guests");
    let images = guest_dir.path().join("images");
    let Some((server, _guests)) = crate::vms::start(TestServer::builder(), |c| {
        // The images too are on shared storage, readable by the guest account.
        let from = c.data_dir.join("images").join("guest");
        std::fs::create_dir_all(images.join("guest")).unwrap();
        for file in std::fs::read_dir(&from).unwrap().flatten() {
            std::fs::copy(file.path(), images.join("guest").join(file.file_name())).unwrap();
        }
        for dir in [&images, &images.join("guest")] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        c.cloud.image_dir = Some(images.clone());
        c.cloud.guest_dir = Some(shared.clone());
        c.nodes.clear();
        c.resource_manager.kind = drover::config::ResourceManagerKind::Slurm;
        c.resource_manager.slurm_node_poll_seconds = 1;
    }) else {
        return;
    };
    let body = json!({"id": "roam", "totalProcessors": 2, "totalMemory": 128,
                      "node": {"id": "node1"}});
    let setup = crate::vms::job_id(&send(&server, "POST", "/rest/vms", Auth::User, &body));
    // A generous wait: an emulated guest booting through Slurm on a busy machine.
    let vm = wait("the guest is made", 120, || {
        let vm = server.get("/rest/vms/roam").json();
        (vm["substate"] != "creating").then_some(vm)
    });
    let job = server
        .get(&format!("/rest/jobs/{setup}?api-version=2"))
        .json();
    assert_eq!(vm["substate"], "running", "{job}");
    assert_eq!(vm["node"]["id"], "node1", "{vm}");
    assert_eq!(guest_jobs("roam").len(), 1, "{:?}", guest_jobs("roam"));
    let (first_job, node) = guest_jobs("roam").remove(0);
    assert_eq!(node, "node1");
    assert!(
        qemu_in_allocation("roam"),
        "QEMU does not run under slurmstepd"
    );
    let cpus = run("squeue", &["-h", "-j", &first_job, "-o", "%C"]);
    assert_eq!(cpus.trim(), "2", "the job holds the VM's processors");
    // Another user's job of the guest's name is theirs: shown as a job submitted to
    // Slurm directly, never taken for the guest.
    let name = run("squeue", &["-h", "-j", &first_job, "-o", "%j"]);
    let look_alike = sbatch_by_hand(name.trim(), 300);
    let shown = wait("bob's look-alike is shown", 60, || {
        shown_job(&server, &look_alike)
    });
    assert_eq!(shown["user"], BOB, "{shown}");
    // The look that found it saw the guest's job too, and left it alone.
    let taken = shown_job(&server, &first_job);
    assert!(
        taken.is_none(),
        "the guest's job was taken for a job: {taken:?}"
    );
    run("scancel", &[&look_alike]);
    assert_eq!(guest_jobs("roam").len(), 1);
    // Jobs in VMs are not run over Slurm: refused, not run beside the VM.
    let in_vm = server.send_json(
        "POST",
        "/rest/jobs?api-version=2",
        &json!({"commandFile": "/bin/true", "vmUsagePolicy": "REQUIREVM"}),
    );
    assert_eq!(in_vm.status, 400, "{}", in_vm.body);
    assert!(
        in_vm.body.contains("not run by the slurm resource manager"),
        "{}",
        in_vm.body
    );

    // Live migration to node2: a new job there, the guest's uptime goes on, the first
    // job ends.
    wait("the guest ticks", 120, || {
        (crate::vms::last_tick(&server, "roam") > 0.0).then_some(())
    });
    let before = crate::vms::last_tick(&server, "roam");
    let moved = send(
        &server,
        "PUT",
        "/rest/vms/roam",
        Auth::User,
        &json!({"node": {"id": "node2"}}),
    );
    let migrate = crate::vms::job_id(&moved);
    let job = wait("the migration ends", 180, || {
        let job = server
            .get(&format!("/rest/jobs/{migrate}?api-version=2"))
            .json();
        (job["states"]["state"] == "Completed").then_some(job)
    });
    assert_eq!(job["completionCode"], 0, "{}", job["messages"]);
    let vm = server.get("/rest/vms/roam").json();
    assert!(
        vm["node"]["id"] == "node2" && vm["substate"] == "running",
        "{vm}"
    );
    let now = guest_jobs("roam");
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0].0, first_job);
    assert_eq!(now[0].1, "node2");
    wait("the migrated guest ticks on", 120, || {
        (crate::vms::last_tick(&server, "roam") > before).then_some(())
    });
    // The stream went over TLS with a key made for it, the guest account's alone.
    let key = std::fs::metadata(shared.join("roam").join("tls").join("keys.psk")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(key.mode() & 0o777, 0o600);
    let after = crate::vms::last_tick(&server, "roam");
    assert!(
        after > before,
        "the guest rebooted: uptime {after} after {before}"
    );

    // A restart finds the guest in its job again and reads its console on; other jobs
    // of its name are ended: one unrecorded (an sbatch the restart interrupted) and a
    // migration's destination recorded before the guest was sent, which never got it.
    let name = run("squeue", &["-h", "-j", &now[0].0, "-o", "%j"]);
    let stray = || {
        let args = [
            "--parsable",
            "--uid=drover-guest",
            "--nodelist=node3",
            "-o",
            "/dev/null",
            &format!("--job-name={}", name.trim()),
            "--wrap=sleep 300",
        ];
        run("sbatch", &args).trim().to_string()
    };
    let (unrecorded, destination) = (stray(), stray());
    let recorded = server
        .data_dir()
        .join("vms")
        .join("roam")
        .join("guest.json");
    let mut placement: Value = serde_json::from_slice(&std::fs::read(&recorded).unwrap()).unwrap();
    let slot = if placement["slot"] == "a" { "b" } else { "a" };
    placement["incoming"] = json!({"job": destination.parse::<u64>().unwrap(),
                                   "node": "node3", "slot": slot});
    std::fs::write(&recorded, placement.to_string()).unwrap();
    let server = server.restart();
    wait("the strays are ended", 120, || {
        (!guest_jobs("roam")
            .iter()
            .any(|(job, _)| *job == unrecorded || *job == destination))
        .then_some(())
    });
    assert_eq!(guest_jobs("roam"), now, "the guest's job is kept");
    let vm = server.get("/rest/vms/roam").json();
    assert_eq!(vm["substate"], "running", "{vm}");
    let before = crate::vms::last_tick(&server, "roam");
    wait("the adopted guest's console is read on", 120, || {
        (crate::vms::last_tick(&server, "roam") > before).then_some(())
    });

    // A start while slurmctld is away keeps the guest as it was: unknown is not gone.
    stop_slurmctld();
    let away = Restart(true);
    let server = server.restart();
    let vm = server.get("/rest/vms/roam").json();
    assert_eq!(vm["substate"], "running", "{vm}");
    drop(away);
    assert_eq!(guest_jobs("roam"), now, "the guest's job ran on");

    // Deleted: its job ends, its files go.
    crate::vms::job_id(&server.send("DELETE", "/rest/vms/roam", Auth::User));
    wait("the VM is gone", 120, || {
        (server.get("/rest/vms/roam").status == 404).then_some(())
    });
    wait("its job ended", 60, || {
        guest_jobs("roam").is_empty().then_some(())
    });
    assert!(!shared.join("roam").exists());
}
