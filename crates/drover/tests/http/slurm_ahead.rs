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

fn job(server: &TestServer, id: &str) -> Value {
    server.get(&format!("/rest/jobs/{id}")).json()
}

/// The Slurm job of a Drover job, once it has one.
fn slurm_job_of(server: &TestServer, id: &str) -> String {
    wait(&format!("{id} is handed to Slurm"), 60, || {
        job(server, id)["sourceRmJobId"]
            .as_str()
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
    let fill = script(work.path(), "fill.sh", "sleep 20");
    let fills: Vec<String> = (0..cluster_processors())
        .map(|_| {
            submit_as_bob(
                &server,
                json!({"commandFile": fill, "initialWorkingDirectory": work.path()}),
            )
        })
        .collect();
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
    let long = script(work.path(), "long.sh", "sleep 40");
    let id = submit_as_bob(
        &server,
        json!({"commandFile": long, "initialWorkingDirectory": work.path()}),
    );
    wait_state(&server, &id, "RUNNING");
    let slurm_id = slurm_job_of(&server, &id);
    let name = run("squeue", &["-h", "-o", "%j", &format!("--jobs={slurm_id}")]);
    let name = name.trim().to_string();
    assert!(name.ends_with(&format!("-{id}")), "{name}");
    // Carol names a job of hers like it, hoping to pass it off as Bob's.
    let forged = run(
        "runuser",
        &[
            "-u",
            CAROL,
            "--",
            "sbatch",
            "--parsable",
            "--chdir=/tmp",
            "--output=/dev/null",
            &format!("--job-name={name}"),
            "--wrap=sleep 60",
        ],
    );
    let forged = forged.trim().to_string();

    // As a crash leaves it: the start recorded, the Slurm job not.
    let server = server.restart_with(|store| {
        store
            .ensure_collection(&drover_store::CollectionSpec::new("jobs"))
            .unwrap();
        let mut document = store.get("jobs", &id).unwrap().expect("the job is stored");
        let status = &mut document.body["status"];
        assert_eq!(status["state"], "Running", "{status}");
        status["state"] = json!("Starting");
        let status = status.as_object_mut().unwrap();
        status.remove("process");
        status.remove("rm_job_id");
        store.put("jobs", &id, None, document.body).unwrap();
    });
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
