//! Work handed to Slurm ahead of its nodes' freeing (issue #56): the jobs the plan
//! starts next wait in Slurm, pinned to their nodes, `STARTING` here until Slurm starts
//! them (their start is Slurm's); one withdrawn here is cancelled there and never runs.
//! And a start recorded without its Slurm job (a crash in between) takes the Slurm job
//! of its name at the restart, never one another user named so. Runs with
//! `DROVER_TEST_SLURM=1`, as the other Slurm tests.

use drover_testkit::wait_for_value as wait;
use drover_testkit::{Auth, TestServer, bob, carol, scratch_dir, script, slurm_state};
use serde_json::{Value, json};

use crate::security::{BOB, CAROL};
use crate::slurm::{run, slurm, slurm_server, submit_as_bob, turn, wait_state};

/// The processors of the cluster's nodes that take work.
fn cluster_processors() -> usize {
    let out = run("sinfo", &["-h", "-o", "%C"]);
    let total: usize = out
        .trim()
        .split('/')
        .nth(3)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("sinfo -o %C: {out:?}"));
    assert!(total > 0, "{out}");
    total
}

/// Bob's jobs of `sleep <seconds>`, one per processor of the cluster: the next ones are
/// handed ahead.
fn fill_cluster(server: &TestServer, work: &std::path::Path, seconds: u32) -> Vec<String> {
    let fill = script(work, "fill.sh", &format!("sleep {seconds}"));
    (0..cluster_processors())
        .map(|_| {
            submit_as_bob(
                server,
                json!({"commandFile": fill, "initialWorkingDirectory": work}),
            )
        })
        .collect()
}

fn job(server: &TestServer, id: &str) -> Value {
    server.get(&format!("/rest/jobs/{id}")).json()
}

/// The Slurm job of a Drover job, once it has one.
fn slurm_job_of(server: &TestServer, id: &str) -> String {
    wait(&format!("{id} is handed to Slurm"), 60, || {
        // (The job's own id until the hand-over is answered.)
        job(server, id)["sourceRmJobId"]
            .as_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_string)
    })
}

#[test]
fn jobs_the_plan_starts_next_wait_in_slurm_and_start_when_their_nodes_free() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let work = scratch_dir();
    let fills = fill_cluster(&server, work.path(), 20);
    let marker = |name: &str| work.path().join(name);
    let next = script(
        work.path(),
        "next.sh",
        &format!("touch {}", marker("next-ran").display()),
    );
    let withdrawn = script(
        work.path(),
        "withdrawn.sh",
        &format!("touch {}", marker("withdrawn-ran").display()),
    );
    let next = submit_as_bob(
        &server,
        json!({"commandFile": next, "initialWorkingDirectory": work.path()}),
    );
    let withdrawn = submit_as_bob(
        &server,
        json!({"commandFile": withdrawn, "initialWorkingDirectory": work.path()}),
    );
    for id in &fills {
        wait_state(&server, id, "RUNNING");
    }
    // Handed over while every processor is taken: waiting in Slurm, pinned to a node,
    // and starting here (not running).
    let next_slurm = slurm_job_of(&server, &next);
    let withdrawn_slurm = slurm_job_of(&server, &withdrawn);
    let pending_since = chrono_now();
    assert_eq!(slurm_state(&next_slurm), "PENDING");
    assert_eq!(slurm_state(&withdrawn_slurm), "PENDING");
    let shown = job(&server, &next);
    assert_eq!(shown["state"], "STARTING", "{shown}");
    assert!(shown["startDate"].is_null(), "{shown}");
    let pinned = run(
        "squeue",
        &["-h", "-o", "%R|%j", &format!("--jobs={next_slurm}")],
    );
    assert!(
        pinned.contains(&format!("-{next}")),
        "named after the job: {pinned}"
    );
    let requested = run("scontrol", &["show", "job", &next_slurm, "--oneliner"]);
    assert!(
        requested.contains(" ReqNodeList=node"),
        "pinned: {requested}"
    );

    // Another user may not withdraw it; its user may, and Slurm never runs it.
    let refused = server.call("DELETE", &format!("/rest/jobs/{withdrawn}"), carol(), None);
    assert!(matches!(refused.status, 403 | 404), "{}", refused.body);
    assert_eq!(slurm_state(&withdrawn_slurm), "PENDING");
    let cancelled = server.call("DELETE", &format!("/rest/jobs/{withdrawn}"), bob(), None);
    assert!(cancelled.status < 300, "{}", cancelled.body);
    wait("Slurm cancels the withdrawn job", 30, || {
        (slurm_state(&withdrawn_slurm) == "CANCELLED").then_some(())
    });
    assert_eq!(job(&server, &withdrawn)["state"], "REMOVED");

    // The next one runs once its node frees, from Slurm's start.
    let done = wait_state(&server, &next, "COMPLETED");
    assert_eq!(done["sourceRmJobId"], next_slurm.as_str(), "{done}");
    let slurm_start = run(
        "squeue",
        &[
            "-h",
            "--states=all",
            &format!("--jobs={next_slurm}"),
            "-o",
            "%S",
        ],
    );
    let slurm_start = format!("{} UTC", slurm_start.trim().replace('T', " "));
    assert_eq!(done["startDate"], slurm_start.as_str(), "{done}");
    assert!(
        slurm_start.as_str() >= pending_since.as_str(),
        "started in Slurm ({slurm_start}) after it was seen waiting ({pending_since})"
    );
    assert!(marker("next-ran").exists());
    for id in &fills {
        wait_state(&server, id, "COMPLETED");
    }
    assert!(
        !marker("withdrawn-ran").exists(),
        "a withdrawn job never runs"
    );
}

/// Now as Slurm's dates are shown: `YYYY-MM-DD HH:MM:SS UTC`.
fn chrono_now() -> String {
    run("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"])
        .trim()
        .to_string()
}

/// A crash between a start's record and its Slurm job's: the restart takes the Slurm
/// job of the job's name and user (not a second one), never another user's of that
/// name.
#[test]
fn a_start_recorded_without_its_slurm_job_takes_the_one_of_its_name() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let work = scratch_dir();
    let (id, slurm_id, name) = bobs_running_job(&server, work.path());
    // Carol names a job of hers like it, hoping to pass it off as Bob's.
    let forged = sbatch_as(CAROL, &name, 60);
    let server = restart_unrecorded(server, &id, || {});
    let shown = wait("the job runs again", 60, || {
        let shown = job(&server, &id);
        (shown["state"] == "RUNNING").then_some(shown)
    });
    assert_eq!(shown["sourceRmJobId"], slurm_id.as_str(), "{shown}");
    assert_eq!(slurm_state(&slurm_id), "RUNNING");
    // No second Slurm job of Bob's for it; Carol's is still hers, untouched.
    let bobs = run("squeue", &["-h", "-u", BOB, "-o", "%i|%j"]);
    let named: Vec<&str> = bobs.lines().filter(|l| l.ends_with(&name)).collect();
    assert_eq!(named, [format!("{slurm_id}|{name}").as_str()], "{bobs}");
    assert_eq!(slurm_state(&forged), "RUNNING");
    let cancelled = server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
    assert!(cancelled.status < 300, "{}", cancelled.body);
    run("scancel", &[&forged]);
}

/// Submits `sleep <seconds>` to Slurm directly as `user`, named `name`; its Slurm id.
fn sbatch_as(user: &str, name: &str, seconds: u32) -> String {
    let out = run(
        "runuser",
        &[
            "-u",
            user,
            "--",
            "sbatch",
            "--parsable",
            "--chdir=/tmp",
            "--output=/dev/null",
            &format!("--job-name={name}"),
            &format!("--wrap=sleep {seconds}"),
        ],
    );
    out.trim().split(';').next().unwrap().to_string()
}

/// The Slurm name of a Drover job that runs there.
fn slurm_name_of(slurm_id: &str) -> String {
    run("squeue", &["-h", "-o", "%j", &format!("--jobs={slurm_id}")])
        .trim()
        .to_string()
}

/// A job of Bob's (`sleep 60`) that runs in Slurm: its id, Slurm job and Slurm name.
fn bobs_running_job(server: &TestServer, work: &std::path::Path) -> (String, String, String) {
    let long = script(work, "long.sh", "sleep 60");
    let id = submit_as_bob(
        server,
        json!({"commandFile": long, "initialWorkingDirectory": work}),
    );
    wait_state(server, &id, "RUNNING");
    let slurm_id = slurm_job_of(server, &id);
    let name = slurm_name_of(&slurm_id);
    assert!(name.ends_with(&format!("-{id}")), "{name}");
    (id, slurm_id, name)
}

/// Restarts the server as a crash between a start's record and its Slurm job's leaves
/// the job `id` (`Starting`, no process), after `down` ran while it was down.
fn restart_unrecorded(server: TestServer, id: &str, down: impl FnOnce()) -> TestServer {
    server.restart_with(|store| {
        down();
        store
            .ensure_collection(&drover_store::CollectionSpec::new("jobs"))
            .unwrap();
        let mut document = store.get("jobs", id).unwrap().expect("the job is stored");
        let status = &mut document.body["status"];
        assert_eq!(status["state"], "Running", "{status}");
        status["state"] = json!("Starting");
        let status = status.as_object_mut().unwrap();
        status.remove("process");
        status.remove("rm_job_id");
        store.put("jobs", id, None, document.body).unwrap();
    })
}

/// Bob's unfinished Slurm jobs named `name`.
fn bobs_named(name: &str) -> Vec<String> {
    run("squeue", &["-h", "-u", BOB, "-o", "%i|%j"])
        .lines()
        .filter_map(|l| l.strip_suffix(&format!("|{name}")))
        .map(str::to_string)
        .collect()
}

/// A crash while `sbatch` was under way: Slurm makes the job after the restart has
/// looked for it (the killed service's `sbatch` got its request to slurmctld). The
/// restart waits before making the start again, and takes that job rather than
/// submitting a second one.
#[test]
fn a_slurm_job_made_after_the_restart_looked_is_taken_not_doubled() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let work = scratch_dir();
    let (id, first, name) = bobs_running_job(&server, work.path());
    let server = restart_unrecorded(server, &id, || {
        run("scancel", &[&first]);
        wait("Slurm lets the first one go", 30, || {
            bobs_named(&name).is_empty().then_some(())
        });
    });
    // The killed service's sbatch lands now.
    let late = sbatch_as(BOB, &name, 60);
    let shown = wait("the job runs again", 60, || {
        let shown = job(&server, &id);
        (shown["state"] == "RUNNING").then_some(shown)
    });
    assert_eq!(shown["sourceRmJobId"], late.as_str(), "{shown}");
    assert_eq!(bobs_named(&name), [late.as_str()], "one Slurm job for {id}");
    let cancelled = server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
    assert!(cancelled.status < 300, "{}", cancelled.body);
}

/// A Slurm job of a job's name that is not the one recorded for it (a start a crash
/// left unrecorded, a withdrawal whose `scancel` was lost) is cancelled: the job has
/// another, or is over. One another user named so is left alone.
#[test]
fn slurm_jobs_of_a_jobs_name_that_are_not_its_own_are_cancelled() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let work = scratch_dir();
    let long = script(work.path(), "long.sh", "sleep 60");
    let short = script(work.path(), "short.sh", "exit 0");
    let running = submit_as_bob(
        &server,
        json!({"commandFile": long, "initialWorkingDirectory": work.path()}),
    );
    let over = submit_as_bob(
        &server,
        json!({"commandFile": short, "initialWorkingDirectory": work.path()}),
    );
    let own = slurm_job_of(&server, &running);
    let running_name = slurm_name_of(&own);
    let over_name = running_name.replace(&running, &over);
    wait_state(&server, &running, "RUNNING");
    wait_state(&server, &over, "COMPLETED");

    let carols = sbatch_as(CAROL, &running_name, 60);
    let second = sbatch_as(BOB, &running_name, 60);
    let after_end = sbatch_as(BOB, &over_name, 60);
    for slurm_id in [&second, &after_end] {
        wait(&format!("Slurm job {slurm_id} is cancelled"), 60, || {
            (slurm_state(slurm_id) == "CANCELLED").then_some(())
        });
    }
    // The job keeps its own; Carol's is hers, neither cancelled nor taken here.
    let shown = job(&server, &running);
    assert_eq!(shown["state"], "RUNNING", "{shown}");
    assert_eq!(shown["sourceRmJobId"], own.as_str(), "{shown}");
    assert_eq!(slurm_state(&own), "RUNNING");
    assert!(
        ["RUNNING", "PENDING"].contains(&slurm_state(&carols).as_str()),
        "{carols}"
    );
    let list = server.get("/rest/jobs?fields=id,sourceRmJobId").json();
    for slurm_id in [&carols, &second, &after_end] {
        let shown = list["results"].as_array().unwrap().iter();
        let taken = shown
            .filter(|j| j["sourceRmJobId"] == slurm_id.as_str())
            .count();
        assert_eq!(taken, 0, "{slurm_id} is no job here: {list}");
    }
    assert_eq!(job(&server, &over)["state"], "COMPLETED");
    run("scancel", &[&carols]);
    let cancelled = server.call(
        "DELETE",
        &format!("/rest/jobs/{running}"),
        Auth::Admin,
        None,
    );
    assert!(cancelled.status < 300, "{}", cancelled.body);
}

/// A job handed ahead and withdrawn in Slurm (a re-plan, a cancel) whose withdrawal a
/// crash lost: Slurm never ran it, so the restart puts it back in the queue and it runs
/// then, rather than ending as if it had run.
#[test]
fn a_job_withdrawn_in_slurm_before_a_crash_runs_after_the_restart() {
    if !slurm() {
        return;
    }
    let _turn = turn();
    let server = slurm_server();
    let work = scratch_dir();
    let fills = fill_cluster(&server, work.path(), 15);
    let ran = work.path().join("ran");
    let next = script(
        work.path(),
        "next.sh",
        &format!("touch {}\nexit 3", ran.display()),
    );
    let next = submit_as_bob(
        &server,
        json!({"commandFile": next, "initialWorkingDirectory": work.path()}),
    );
    let ahead = slurm_job_of(&server, &next);
    assert_eq!(slurm_state(&ahead), "PENDING");
    assert_eq!(job(&server, &next)["state"], "STARTING");
    // Withdrawn in Slurm; the crash lost the record of it.
    let server = server.restart_with(|_| {
        run("scancel", &[&ahead]);
        wait("Slurm cancels it", 30, || {
            (slurm_state(&ahead) == "CANCELLED").then_some(())
        });
    });
    let done = wait_state(&server, &next, "COMPLETED");
    assert_eq!(done["completionCode"], 3, "it ran: {done}");
    assert_ne!(done["sourceRmJobId"], ahead.as_str(), "{done}");
    assert!(ran.exists(), "it ran");
    for id in &fills {
        wait_state(&server, id, "COMPLETED");
    }
}
