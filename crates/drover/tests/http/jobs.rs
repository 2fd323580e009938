//! Jobs over HTTP with real processes: submission in both versions, the life cycle,
//! the actions, the refusals of spec part 8, and restarts.

use drover_sched::node::NodeConfig;
use drover_testkit::{
    Auth, TestServer, scratch_dir, script, submit_v1, submit_v2, wait_state_v2, wait_until,
};
use serde_json::{Value, json};

/// `/proc/<pid>/stat` state letter (`S` sleeping, `T` stopped...), `None` when gone.
fn process_state(pid: i64) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat[stat.rfind(')')? + 2..].chars().next()?;
    (state != 'Z').then_some(state)
}

fn wait_for_pid_file(path: &std::path::Path) -> i64 {
    for _ in 0..600 {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the job never wrote {}", path.display());
}

fn nodes(specs: &[(&str, u32)]) -> Vec<NodeConfig> {
    specs
        .iter()
        .map(|(id, processors)| NodeConfig {
            memory: Some(4096),
            ..NodeConfig::new(id, *processors)
        })
        .collect()
}

fn state_v1(server: &TestServer, id: &str) -> String {
    server.get(&format!("/rest/jobs/{id}")).json()["state"]
        .as_str()
        .unwrap()
        .to_string()
}

fn wait_state(server: &TestServer, id: &str, state: &str) -> Value {
    server.wait_for(&format!("/rest/jobs/{id}"), state, |job| {
        job["state"] == state
    })
}

#[test]
fn a_job_runs_to_completion_with_its_exit_code_output_and_environment() {
    let server = TestServer::start();
    let work = scratch_dir();
    let command = script(
        work.path(),
        "hello.sh",
        "echo \"args=$1,$2 id=$DROVER_JOB_ID nodes=$DROVER_NODELIST greeting=$GREETING pwd=$(pwd)\"\necho oops >&2\nexit 3",
    );
    let reply = server.send_json(
        "POST",
        "/rest/jobs",
        &json!({
            "name": "hello",
            "commandFile": command,
            "commandLineArguments": "one 'two words'",
            "initialWorkingDirectory": work.path(),
            "environmentVariables": {"GREETING": "hi"},
            "variables": {"color": "blue"},
            "requirements": [{"requiredProcessorCountMinimum": "1"}],
        }),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let id = reply.json()["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("Drover."), "{id}");
    assert_eq!(
        reply.header("location"),
        Some(format!("/rest/jobs/{id}").as_str())
    );

    let job = wait_state(&server, &id, "COMPLETED");
    assert_eq!(job["completionCode"], 3);
    assert_eq!(job["startCount"], 1);
    assert_eq!(job["queueStatus"], "COMPLETED");
    assert_eq!(job["variables"]["color"], "blue");
    assert!(job["startDate"].is_string() && job["completionDate"].is_string());
    let host = job["hosts"][0].as_str().unwrap().to_string();
    let out = std::fs::read_to_string(
        work.path()
            .join(format!("hello.o{}", id.trim_start_matches("Drover."))),
    )
    .unwrap();
    assert_eq!(
        out.trim(),
        format!(
            "args=one,two words id={id} nodes={host} greeting=hi pwd={}",
            work.path().display()
        )
    );
    let err = std::fs::read_to_string(job["rmStandardErrorFilePath"].as_str().unwrap()).unwrap();
    assert_eq!(err.trim(), "oops");

    // The same job in version 2.
    let v2 = server.get(&format!("/rest/jobs/{id}?api-version=2")).json();
    assert_eq!(v2["name"], id.as_str());
    assert_eq!(v2["customName"], "hello");
    assert_eq!(v2["states"]["state"], "Completed");
    assert_eq!(v2["completionCode"], 3);
    assert_eq!(v2["commandLineArgs"], "one 'two words'");
    assert_eq!(v2["dates"]["startDate"], job["startDate"]);
    assert_eq!(v2["dates"]["submitDate"], job["submitDate"]);
    assert_eq!(v2["credentials"]["user"], job["user"]);
    assert_eq!(v2["isActive"], false);
    assert_eq!(v2["masterNode"]["name"], host.as_str());

    // Listing: complete, not active; query and fields.
    let complete = server.get("/rest/jobs/complete").json();
    assert_eq!(complete["totalCount"], 1);
    assert_eq!(server.get("/rest/jobs/active").json()["totalCount"], 0);
    assert_eq!(server.get(&format!("/rest/jobs/active/{id}")).status, 404);
    assert_eq!(server.get(&format!("/rest/jobs/complete/{id}")).status, 200);
    let listed = server.get("/rest/jobs?api-version=2&query=%7B%22states.state%22%3A%22Completed%22%7D&fields=name,completionCode").json();
    assert_eq!(
        listed["results"],
        json!([{"name": id, "completionCode": 3}])
    );
}

#[test]
fn a_sleeping_job_is_suspended_resumed_and_cancelled() {
    let server = TestServer::builder()
        .config(|c| c.scheduler.kill_grace_seconds = 1)
        .start();
    let work = scratch_dir();
    let pid_file = work.path().join("pid");
    let command = script(work.path(), "sleep.sh", "echo $$ > \"$1\"\nexec sleep 300");
    let name = submit_v2(
        &server,
        json!({
            "commandFile": command,
            "commandLineArguments": pid_file.to_string_lossy(),
            "initialWorkingDirectory": work.path(),
            "flags": ["SUSPENDABLE"],
        }),
    );
    let pid = wait_for_pid_file(&pid_file);
    wait_state(&server, &name, "RUNNING");

    let reply = server.send(
        "PUT",
        &format!("/rest/jobs/{name}/suspend?api-version=2"),
        Auth::Admin,
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.json()["messages"][0].is_string());
    wait_until("the process is stopped", || process_state(pid) == Some('T'));
    let job = server
        .get(&format!("/rest/jobs/{name}?api-version=2"))
        .json();
    assert_eq!(job["states"]["state"], "Suspended");

    // Suspending twice is refused; resuming continues it.
    let again = server.send("PUT", &format!("/rest/jobs/{name}/suspend"), Auth::Admin);
    assert_eq!(again.status, 400, "{}", again.body);
    let reply = server.send("PUT", &format!("/rest/jobs/{name}/resume"), Auth::Admin);
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait_until("the process runs again", || {
        matches!(process_state(pid), Some('S' | 'R'))
    });
    assert_eq!(state_v1(&server, &name), "RUNNING");

    let reply = server.call("DELETE", &format!("/rest/jobs/{name}"), Auth::Admin, None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json(), json!({}));
    assert!(reply.header("x-svc-message").unwrap().contains(&name));
    wait_until("the process is gone", || process_state(pid).is_none());
    let job = wait_state(&server, &name, "VACATED");
    assert_eq!(job["queueStatus"], "COMPLETED");
    // Cancelling an ended job is refused.
    let reply = server.send("PUT", &format!("/rest/jobs/{name}/cancel"), Auth::Admin);
    assert_eq!(reply.status, 400, "{}", reply.body);
}

#[test]
fn suspend_requires_the_flag_and_requeue_restarts_only_restartable_jobs() {
    let server = TestServer::builder()
        .config(|c| c.scheduler.kill_grace_seconds = 1)
        .start();
    let work = scratch_dir();
    let command = script(work.path(), "sleep.sh", "exec sleep 300");
    let plain = submit_v1(
        &server,
        json!({"commandFile": command, "initialWorkingDirectory": work.path()}),
    );
    let restartable = submit_v1(
        &server,
        json!({"commandFile": command, "initialWorkingDirectory": work.path(), "flags": ["restartable"]}),
    );
    wait_state(&server, &plain, "RUNNING");
    wait_state(&server, &restartable, "RUNNING");

    let reply = server.send("PUT", &format!("/rest/jobs/{plain}/suspend"), Auth::Admin);
    assert_eq!(reply.status, 400);
    assert!(reply.messages().contains("SUSPENDABLE"), "{}", reply.body);
    let reply = server.send("PUT", &format!("/rest/jobs/{plain}/requeue"), Auth::Admin);
    assert_eq!(reply.status, 400);
    assert!(reply.messages().contains("RESTARTABLE"), "{}", reply.body);
    let reply = server.send(
        "PUT",
        &format!("/rest/jobs/{plain}/checkpoint"),
        Auth::Admin,
    );
    assert_eq!(reply.status, 400);
    assert!(reply.messages().contains("not supported"), "{}", reply.body);
    let reply = server.send("PUT", &format!("/rest/jobs/{plain}/explode"), Auth::Admin);
    assert_eq!(reply.status, 404, "{}", reply.body);

    let reply = server.send(
        "PUT",
        &format!("/rest/jobs/{restartable}/requeue"),
        Auth::Admin,
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    server.wait_for(
        &format!("/rest/jobs/{restartable}"),
        "a second start",
        |job| job["startCount"] == 2 && job["state"] == "RUNNING",
    );
    for id in [&plain, &restartable] {
        assert_eq!(
            server
                .call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None)
                .status,
            200
        );
    }
}

#[test]
fn holds_unhold_and_execute() {
    let server = TestServer::builder()
        .config(|c| {
            c.nodes = nodes(&[("n1", 2)]);
            c.scheduler.kill_grace_seconds = 1;
        })
        .start();
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "exit 0");
    let sleeper = script(work.path(), "sleep.sh", "exec sleep 300");

    // A held job waits; unhold with no body releases every hold and it runs.
    let held = submit_v1(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path(), "holds": ["USER"]}),
    );
    let job = server.get(&format!("/rest/jobs/{held}")).json();
    assert_eq!(job["state"], "HOLD");
    assert_eq!(job["holds"], json!(["USER"]));
    let v2 = server
        .get(&format!("/rest/jobs/{held}?api-version=2"))
        .json();
    assert_eq!(v2["holds"], json!(["User"]));
    assert_eq!(v2["queueStatus"], "blocked");
    let reply = server.send("PUT", &format!("/rest/jobs/{held}/unhold"), Auth::Admin);
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait_state(&server, &held, "COMPLETED");

    // hold / unhold with bodies on a job waiting for resources.
    let big = submit_v2(
        &server,
        json!({"commandFile": sleeper, "initialWorkingDirectory": work.path(), "requirements": [{"taskCount": 2}]}),
    );
    wait_state(&server, &big, "RUNNING");
    let waiting = submit_v1(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path()}),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(state_v1(&server, &waiting), "IDLE");
    let reply = server.send_json(
        "PUT",
        &format!("/rest/jobs/{waiting}/hold?api-version=2"),
        &json!({"holds": ["User", "System"]}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        server.get(&format!("/rest/jobs/{waiting}")).json()["holds"],
        json!(["USER", "SYSTEM"])
    );
    let reply = server.send_json(
        "PUT",
        &format!("/rest/jobs/{waiting}/unhold"),
        &json!({"holds": ["SYSTEM"]}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        server.get(&format!("/rest/jobs/{waiting}")).json()["holds"],
        json!(["USER"])
    );
    let reply = server.send_json(
        "PUT",
        &format!("/rest/jobs/{waiting}/unhold"),
        &json!({"holds": ["Sideways"]}),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);

    // Execute while the node is full: refused with the reason; once free, it starts now
    // although it is held.
    let reply = server.send("PUT", &format!("/rest/jobs/{waiting}/execute"), Auth::Admin);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.messages().contains("not available"), "{}", reply.body);
    assert_eq!(
        server
            .call("DELETE", &format!("/rest/jobs/{big}"), Auth::Admin, None)
            .status,
        200
    );
    server.wait_for("/rest/nodes/n1", "the node to be free", |node| {
        node["state"] == "Idle"
    });
    assert_eq!(state_v1(&server, &waiting), "HOLD");
    let reply = server.send("PUT", &format!("/rest/jobs/{waiting}/execute"), Auth::Admin);
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait_state(&server, &waiting, "COMPLETED");
    let reply = server.send("PUT", &format!("/rest/jobs/{waiting}/execute"), Auth::Admin);
    assert_eq!(reply.status, 400, "{}", reply.body);
}

#[test]
fn a_job_that_can_never_fit_is_blocked_with_a_reason() {
    let server = TestServer::builder()
        .config(|c| c.nodes = nodes(&[("n1", 2), ("n2", 2)]))
        .start();
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "exit 0");
    let name = submit_v2(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path(), "requirements": [{"taskCount": 5}]}),
    );
    let job = server.wait_for(
        &format!("/rest/jobs/{name}?api-version=2"),
        "blocked",
        |j| j["states"]["state"] == "Blocked",
    );
    assert_eq!(job["queueStatus"], "blocked");
    assert!(
        job["blocks"][0]["message"]
            .as_str()
            .unwrap()
            .contains("at most 4"),
        "{job}"
    );
    let v1 = server.get(&format!("/rest/jobs/{name}")).json();
    assert_eq!(v1["blockReason"]["type"], "NoResources");
    let featured = submit_v2(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path(), "requirements": [{"featuresRequested": ["gpu"]}]}),
    );
    let job = wait_state(&server, &featured, "BLOCKED");
    assert!(
        job["blockReason"]["message"]
            .as_str()
            .unwrap()
            .contains("gpu"),
        "{job}"
    );
}

#[test]
fn nodes_times_ppn_spreads_tasks_and_memory_is_per_task() {
    let server = TestServer::builder()
        .config(|c| c.nodes = nodes(&[("n1", 4), ("n2", 4), ("n3", 4)]))
        .start();
    let work = scratch_dir();
    let sleeper = script(work.path(), "sleep.sh", "exec sleep 300");
    let name = submit_v2(
        &server,
        json!({
            "commandFile": sleeper,
            "initialWorkingDirectory": work.path(),
            "requirements": [{"taskCount": 6, "tasksPerNode": 2, "resourcesPerTask": {"memory": {"dedicated": 512}}}],
        }),
    );
    let job = server.wait_for(
        &format!("/rest/jobs/{name}?api-version=2"),
        "running",
        |j| j["states"]["state"] == "Running",
    );
    let requirement = &job["requirements"][0];
    assert_eq!(requirement["taskCount"], 6);
    assert_eq!(requirement["tasksPerNode"], 2);
    assert_eq!(requirement["resourcesPerTask"]["memory"]["dedicated"], 512);
    let mut placed: Vec<&str> = requirement["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    placed.sort();
    assert_eq!(placed, ["n1", "n2", "n3"]);
    let v1 = server.get(&format!("/rest/jobs/{name}")).json();
    assert_eq!(v1["requirements"][0]["requiredProcessorCountMinimum"], 6);
    assert_eq!(v1["requirements"][0]["requiredMemoryPerTask"], 512);
    assert_eq!(v1["memoryRequested"], 3072);
    for node in ["n1", "n2", "n3"] {
        let n = server.get(&format!("/rest/nodes/{node}")).json();
        assert_eq!(n["availableProcessors"], 2, "{n}");
        assert_eq!(n["availableMemory"], 3072, "{n}");
        assert_eq!(n["state"], "Running");
        assert_eq!(n["jobs"], json!([{"id": name}]));
    }
    // The version-1 form of the same request: 3 nodes of 2 tasks.
    let v1_name = submit_v1(
        &server,
        json!({"commandFile": sleeper, "initialWorkingDirectory": work.path(), "holds": ["USER"],
               "requirements": [{"requiredNodeCountMinimum": "3", "tasksPerNode": "2"}]}),
    );
    let v2 = server
        .get(&format!("/rest/jobs/{v1_name}?api-version=2"))
        .json();
    assert_eq!(v2["requirements"][0]["taskCount"], 6);
    assert_eq!(v2["requirements"][0]["tasksPerNode"], 2);
    server.call("DELETE", &format!("/rest/jobs/{name}"), Auth::Admin, None);
}

#[test]
fn every_refusal_of_part_8_names_the_field() {
    let server = TestServer::start();
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "exit 0");
    let base = |extra: Value| {
        let mut body = json!({"commandFile": quick, "initialWorkingDirectory": work.path()});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let cases = [
        (json!({"variables": {"a=b": "1"}}), "variables"),
        (json!({"variables": {"a b": "1"}}), "variables"),
        (json!({"variables": {"a?": "1"}}), "variables"),
        (json!({"variables": {"ok": "x;y"}}), "value of 'ok'"),
        (json!({"variables": {"ok": "x:y"}}), "value of 'ok'"),
        (json!({"variables": {"ok": "x+y"}}), "value of 'ok'"),
        (json!({"variables": {"ok": "x^y"}}), "value of 'ok'"),
        (json!({"holds": ["System"]}), "only a User hold"),
        (json!({"holds": ["Nope"]}), "holds"),
        (
            json!({"virtualContainers": [{"name": "vc1"}, {"name": "vc2"}]}),
            "at most one",
        ),
        (
            json!({"virtualContainers": [{"name": "vc1"}]}),
            "does not exist",
        ),
        (
            json!({"credentials": {"user": "no-such-user-here"}}),
            "no system account",
        ),
        (
            json!({"credentials": {"group": "no-such-group-here"}}),
            "group",
        ),
        (json!({"commandFile": "/no/such/file"}), "commandFile"),
        (json!({"commandFile": ""}), "commandFile"),
        (
            json!({"initialWorkingDirectory": "/no/such/dir"}),
            "initialWorkingDirectory",
        ),
        (json!({"flags": ["FAST"]}), "flags"),
        (
            json!({"requirements": [{"taskCount": "many"}]}),
            "requirements[0].taskCount",
        ),
        (json!({"requirements": [{"taskCount": 0}]}), "taskCount"),
        (
            json!({"requirements": [{"taskCount": 2, "tasksPerNode": 3}]}),
            "tasksPerNode",
        ),
        (json!({"duration": -5}), "duration"),
        (
            json!({"dates": {"earliestRequestedStartDate": "tomorrow"}}),
            "earliestRequestedStartDate",
        ),
        (
            json!({"environmentVariables": ["A"]}),
            "environmentVariables",
        ),
        (json!({"credentials": {"user": "root"}}), "root"),
        (
            json!({"variables": {"ok": "a\u{0}b"}}),
            "variables.ok: must not contain NUL",
        ),
        (json!({"customName": "x\u{0}"}), "customName"),
    ];
    for (extra, expected) in cases {
        let reply = server.send_json("POST", "/rest/jobs?api-version=2", &base(extra.clone()));
        assert_eq!(reply.status, 400, "{extra}: {}", reply.body);
        assert!(
            reply.messages().contains(expected),
            "{extra}: expected {expected:?} in {}",
            reply.body
        );
    }
    // Version 1 has the same rules.
    let reply = server.send_json("POST", "/rest/jobs", &base(json!({"holds": ["BATCH"]})));
    assert_eq!(reply.status, 400, "{}", reply.body);
    let reply = server.send_json(
        "POST",
        "/rest/jobs",
        &base(json!({"user": "no-such-user-here"})),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.messages().contains("user"), "{}", reply.body);
    for bad in ["[]", "\"job\"", "{", ""] {
        let reply = server.call(
            "POST",
            "/rest/jobs",
            Auth::Admin,
            Some(("application/json", bad.as_bytes().to_vec())),
        );
        assert_eq!(reply.status, 400, "{bad}: {}", reply.body);
    }
    // Nothing was submitted.
    assert_eq!(server.get("/rest/jobs").json()["totalCount"], 0);
}

/// The engine remembers what it found of paths for a moment; a refusal is never based on
/// that: a file or directory made right after a refusal is there for the next submission.
#[test]
fn what_was_missing_a_moment_ago_is_found_at_once() {
    let server = TestServer::start();
    let work = scratch_dir();
    let command = work.path().join("later.sh").to_string_lossy().into_owned();
    let directory = work.path().join("later");
    let body =
        json!({"commandFile": command, "initialWorkingDirectory": directory, "holds": ["User"]});
    let refused_for = |field: &str| {
        let refused = server.send_json("POST", "/rest/jobs?api-version=2", &body);
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(refused.messages().contains(field), "{}", refused.body);
    };
    refused_for("initialWorkingDirectory");
    std::fs::create_dir(&directory).unwrap();
    refused_for("commandFile");
    script(work.path(), "later.sh", "exit 0");
    submit_v2(&server, body);
}

#[test]
fn modify_in_both_versions_keeps_old_messages() {
    let server = TestServer::start();
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "exit 0");
    let id = submit_v1(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path(), "holds": ["USER"]}),
    );
    let reply = server.send_json(
        "PUT",
        &format!("/rest/jobs/{id}"),
        &json!({"name": "renamed", "userPriority": "5", "variables": {"a": "1"}, "messages": [{"message": "first"}],
                "account": "physics", "durationRequested": 60, "flags": ["RESTARTABLE"]}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply.json()["messages"][0]
            .as_str()
            .unwrap()
            .contains("modified")
    );
    let reply = server.send_json(
        "PUT",
        &format!("/rest/jobs/{id}?api-version=2"),
        &json!({"customName": "again", "priorities": {"user": 7}, "variables": {"b": "2"},
                "messages": [{"message": "second"}], "credentials": {"qosRequested": "high"}, "duration": 120}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let v1 = server.get(&format!("/rest/jobs/{id}")).json();
    assert_eq!(v1["name"], "again");
    assert_eq!(v1["userPriority"], 7);
    assert_eq!(v1["variables"], json!({"a": "1", "b": "2"}));
    assert_eq!(v1["account"], "physics");
    assert_eq!(v1["qosRequested"], "high");
    assert_eq!(v1["durationRequested"], 120);
    assert_eq!(v1["flags"], json!(["RESTARTABLE"]));
    let texts: Vec<&str> = v1["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["first", "second"]);
    let v2 = server.get(&format!("/rest/jobs/{id}?api-version=2")).json();
    assert_eq!(v2["priorities"]["user"], 7);
    assert_eq!(v2["credentials"]["account"], "physics");

    for (body, field) in [
        (json!({"variables": {"x y": "1"}}), "variables"),
        (json!({"userPriority": "high"}), "userPriority"),
        (json!({"holds": ["Nope"]}), "holds"),
        (json!({"flags": ["FAST"]}), "flags"),
    ] {
        let reply = server.send_json("PUT", &format!("/rest/jobs/{id}"), &body);
        reply.assert_refused(400, field, &body);
    }
    assert_eq!(
        server
            .send_json("PUT", "/rest/jobs/Drover.999", &json!({"name": "x"}))
            .status,
        404
    );
    assert_eq!(server.get("/rest/jobs/Drover.999").status, 404);
    assert_eq!(
        server
            .call("DELETE", "/rest/jobs/Drover.999", Auth::Admin, None)
            .status,
        404
    );

    // Releasing the hold through modify lets it run; an ended job takes only messages.
    let reply = server.send_json(
        "PUT",
        &format!("/rest/jobs/{id}?api-version=2"),
        &json!({"holds": []}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait_state(&server, &id, "COMPLETED");
    let reply = server.send_json("PUT", &format!("/rest/jobs/{id}"), &json!({"name": "late"}));
    assert_eq!(reply.status, 400, "{}", reply.body);
    let reply = server.send_json(
        "PUT",
        &format!("/rest/jobs/{id}"),
        &json!({"messages": [{"message": "post mortem"}]}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[test]
fn credentials_list_what_submissions_named() {
    let server = TestServer::builder()
        .config(|c| c.scheduler.credentials.classes = vec!["batch".into()])
        .start();
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "exit 0");
    // A group of the account the administrator's job runs as: `nobody`'s, unless the
    // host has an account called `admin` (or the tests do not run as root: the
    // service's own).
    let primary_group = |user: Option<&str>| {
        std::process::Command::new("id")
            .arg("-gn")
            .args(user)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let group = if unsafe_is_root() {
        primary_group(Some("admin")).unwrap_or_else(|| "nogroup".into())
    } else {
        primary_group(None).unwrap()
    };
    submit_v2(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path(), "holds": ["User"],
               "credentials": {"account": "physics", "qosRequested": "high", "group": group}}),
    );
    let names = |kind: &str| -> Vec<String> {
        let reply = server.get(&format!("/rest/credentials/{kind}?api-version=2"));
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("accounts"), ["physics"]);
    assert_eq!(names("qoses"), ["high"]);
    assert_eq!(names("classes"), ["batch"]);
    assert_eq!(names("groups"), [group.as_str()]);
    assert_eq!(names("users"), ["admin"]);
    let job = server.get("/rest/jobs/Drover.1").json();
    assert_eq!(job["queue"], "batch");
    assert_eq!(server.get("/rest/credentials/users").status, 400);
}

#[test]
fn nodes_are_readable_and_an_administrator_can_drain_them() {
    let server = TestServer::builder()
        .config(|c| c.nodes = nodes(&[("n1", 2)]))
        .start();
    let list = server.get("/rest/nodes").json();
    assert_eq!(list["totalCount"], 1);
    let node = &list["results"][0];
    assert_eq!(node["id"], "n1");
    assert_eq!(node["totalProcessors"], 2);
    assert_eq!(node["totalMemory"], 4096);
    assert_eq!(node["totalDisk"], -1);
    assert_eq!(node["state"], "Idle");
    assert_eq!(node["power"], "On");
    assert_eq!(server.get("/rest/nodes/nope").status, 404);

    let reply = server.send_json(
        "PUT",
        "/rest/nodes/n1",
        &json!({"state": "drained", "messages": ["maintenance"], "genericMetrics": {"temp": 41.5},
                "variables": {"owner": "ops"}, "genericEvents": [{"name": "fan", "message": "slow"}], "os": "linux"}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let node = server.get("/rest/nodes/n1").json();
    assert_eq!(node["state"], "Drained");
    assert_eq!(node["messages"][0]["message"], "maintenance");
    assert_eq!(node["genericMetrics"]["temp"], 41.5);
    assert_eq!(node["variables"]["owner"], "ops");
    assert_eq!(node["genericEvents"][0]["name"], "fan");
    assert_eq!(node["os"], "linux");

    // A drained node gets no new jobs; back to Idle, the job runs.
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "exit 0");
    let id = submit_v1(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path()}),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(state_v1(&server, &id), "IDLE");
    assert_eq!(
        server
            .send_json("PUT", "/rest/nodes/n1", &json!({"state": "Idle"}))
            .status,
        200
    );
    wait_state(&server, &id, "COMPLETED");

    for (body, field) in [
        (json!({"state": "Sleepy"}), "state"),
        (json!({"power": "maybe"}), "power"),
        (
            json!({"genericMetrics": {"temp": "hot"}}),
            "genericMetrics.temp",
        ),
        (json!({"variables": {"a b": "1"}}), "variables"),
    ] {
        let reply = server.send_json("PUT", "/rest/nodes/n1", &body);
        reply.assert_refused(400, field, &body);
    }
    assert_eq!(
        server
            .send_json("PUT", "/rest/nodes/nope", &json!({"state": "Down"}))
            .status,
        404
    );
    let reply = server.call(
        "PUT",
        "/rest/nodes/n1",
        Auth::User,
        Some(("application/json", b"{\"state\":\"Down\"}".to_vec())),
    );
    assert_eq!(reply.status, 403);

    // A node keeps its newest 100 messages and generic events, however many are sent.
    for round in 0..3 {
        let texts: Vec<String> = (0..50).map(|i| format!("m{round}-{i}")).collect();
        let events: Vec<Value> = (0..50)
            .map(|i| json!({"name": "fan", "message": format!("e{round}-{i}")}))
            .collect();
        let reply = server.send_json(
            "PUT",
            "/rest/nodes/n1",
            &json!({"messages": texts, "genericEvents": events}),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let node = server.get("/rest/nodes/n1").json();
    let messages = node["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 100);
    assert_eq!(messages[99]["message"], "m2-49");
    assert_eq!(node["genericEvents"].as_array().unwrap().len(), 100);
    // Metric and variable names stay for good: a node holds at most 256 of each.
    let metrics: serde_json::Map<String, Value> =
        (0..300).map(|i| (format!("m{i}"), json!(1.0))).collect();
    server
        .send_json("PUT", "/rest/nodes/n1", &json!({"genericMetrics": metrics}))
        .assert_refused(400, "genericMetrics", &"300 metric names");
    let variables: serde_json::Map<String, Value> =
        (0..300).map(|i| (format!("v{i}"), json!("x"))).collect();
    server
        .send_json("PUT", "/rest/nodes/n1", &json!({"variables": variables}))
        .assert_refused(400, "variables", &"300 variables");
}

#[test]
fn a_restart_adopts_running_jobs_and_keeps_everything_answered() {
    let server = TestServer::builder()
        .config(|c| c.scheduler.kill_grace_seconds = 1)
        .start();
    let work = scratch_dir();
    let flag = work.path().join("go");
    let command = script(
        work.path(),
        "wait.sh",
        &format!(
            "while [ ! -e {} ]; do sleep 0.1; done\nexit 7",
            flag.display()
        ),
    );
    let running = submit_v1(
        &server,
        json!({"commandFile": command, "initialWorkingDirectory": work.path()}),
    );
    let held = submit_v1(
        &server,
        json!({"commandFile": command, "initialWorkingDirectory": work.path(), "holds": ["USER"], "name": "kept"}),
    );
    wait_state(&server, &running, "RUNNING");

    let server = server.restart();
    // Still running (adopted), still held; new ids continue after the old ones.
    assert_eq!(state_v1(&server, &running), "RUNNING");
    assert_eq!(
        server.get(&format!("/rest/jobs/{held}")).json()["name"],
        "kept"
    );
    let next = submit_v1(
        &server,
        json!({"commandFile": command, "initialWorkingDirectory": work.path(), "holds": ["USER"]}),
    );
    assert_eq!(next, "Drover.3");
    std::fs::write(&flag, "").unwrap();
    let job = wait_state(&server, &running, "COMPLETED");
    assert_eq!(job["completionCode"], 7);
}

/// The parent of a process, `None` when it is gone.
fn parent_of(pid: i64) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

/// A job, running in `work` until a file `go` appears there, then ending with `code`:
/// its id, the pid of its process, and the path of its flag.
fn a_job_waiting_for_its_flag(
    server: &TestServer,
    work: &std::path::Path,
    code: i32,
) -> (String, i64, std::path::PathBuf) {
    let (flag, pid_file) = (work.join("go"), work.join("pid"));
    let waiting = script(
        work,
        "wait.sh",
        &format!(
            "echo $$ > {}\nwhile [ ! -e {} ]; do sleep 0.1; done\nexit {code}",
            pid_file.display(),
            flag.display()
        ),
    );
    let id = submit_v1(
        server,
        json!({"commandFile": waiting, "initialWorkingDirectory": work}),
    );
    (id, wait_for_pid_file(&pid_file), flag)
}

/// The shepherds' fork server is the parent of the jobs' shepherds, and a job leads its
/// own session. Killed, the jobs it started still end with their codes (written by their
/// shepherds, watched as after a restart), and the next job gets a new one.
#[test]
fn jobs_outlive_their_shepherds_fork_server() {
    let server = TestServer::start();
    let work = scratch_dir();
    let (first, job, flag) = a_job_waiting_for_its_flag(&server, work.path(), 7);
    let shepherd = parent_of(job).expect("the job's shepherd");
    let fork_server = parent_of(shepherd).expect("the shepherds' fork server");
    let command = std::fs::read(format!("/proc/{fork_server}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&command).contains("fork-server"),
        "the shepherd's parent is {}",
        String::from_utf8_lossy(&command)
    );
    let session = |pid: i64| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<String> = stat[stat.rfind(')').unwrap() + 2..]
            .split(' ')
            .map(String::from)
            .collect();
        (fields[2].clone(), fields[3].clone())
    };
    assert_eq!(
        session(job),
        (job.to_string(), job.to_string()),
        "the job leads its group and session"
    );
    let held = |pid: i64| -> Vec<String> {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .map(|entry| {
                let target = std::fs::read_link(entry.unwrap().path()).unwrap_or_default();
                target.to_string_lossy().into_owned()
            })
            .collect()
    };
    // Nothing of the fork server's (its socket to the service, its signalfd) reaches
    // the shepherd, nor anything but files and pipes the job.
    let service_socket = std::fs::read_link(format!("/proc/{fork_server}/fd/3")).unwrap();
    let service_socket = service_socket.to_string_lossy();
    assert!(service_socket.starts_with("socket:"), "{service_socket}");
    for target in held(shepherd) {
        assert!(
            target != service_socket && !target.contains("signalfd"),
            "the shepherd holds {target}"
        );
    }
    for target in held(job) {
        assert!(
            !target.starts_with("socket:") && !target.contains("signalfd"),
            "the job holds {target}"
        );
    }
    unsafe { libc::kill(fork_server as i32, libc::SIGKILL) };

    let quick = script(work.path(), "quick.sh", "exit 5");
    let second = submit_v1(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path()}),
    );
    assert_eq!(
        wait_state(&server, &second, "COMPLETED")["completionCode"],
        5
    );
    assert_eq!(state_v1(&server, &first), "RUNNING");
    std::fs::write(&flag, "").unwrap();
    assert_eq!(
        wait_state(&server, &first, "COMPLETED")["completionCode"],
        7
    );
}

/// A fork server that stops answering (stopped, traced) is ended once a start has waited
/// 10 s for it: the jobs it never answered for (the first and those asked after it) do
/// not run, and are held saying why; the next job gets a new server.
#[test]
fn a_stuck_fork_server_is_replaced_and_its_unanswered_job_never_runs() {
    let server = TestServer::start();
    let work = scratch_dir();
    let (first, job, flag) = a_job_waiting_for_its_flag(&server, work.path(), 0);
    let fork_server = parent_of(parent_of(job).expect("its shepherd")).expect("the server");
    std::fs::write(&flag, "").unwrap();
    wait_state(&server, &first, "COMPLETED");
    unsafe { libc::kill(fork_server as i32, libc::SIGSTOP) };

    let marks = work.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    std::fs::set_permissions(&marks, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let mark = |n: u32| {
        let command = script(
            work.path(),
            &format!("mark{n}.sh"),
            &format!("touch {}/{n}", marks.display()),
        );
        submit_v1(
            &server,
            json!({"commandFile": command, "initialWorkingDirectory": work.path()}),
        )
    };
    // Those the node has room for are asked of the stuck server; the others start
    // later, on the next.
    let mut held = 0;
    let ids: Vec<String> = (0..3).map(mark).collect();
    for (n, id) in ids.iter().enumerate() {
        let job = server.wait_for(&format!("/rest/jobs/{id}?api-version=2"), "its end", |j| {
            j["states"]["state"] == "Hold" || j["states"]["state"] == "Completed"
        });
        if job["states"]["state"] == "Hold" {
            held += 1;
            assert!(job["messages"].to_string().contains("fork server"), "{job}");
            assert!(
                !marks.join(n.to_string()).exists(),
                "{id} was not answered, and ran"
            );
        } else {
            assert!(marks.join(n.to_string()).exists(), "{job}");
        }
    }
    assert!(held >= 1, "no start waited for the stuck server");
    // Ended: reaped by the service just after it answered the starts (a zombie until).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while parent_of(fork_server).is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the stuck server was not ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let next = mark(9);
    wait_state(&server, &next, "COMPLETED");
    assert!(marks.join("9").exists());
}

/// A job cancelled the moment it is submitted (cancelled while it starts: the engine
/// signals its process group as soon as the start is answered) never runs its command
/// to the end: the shepherd leads its group before its pid is given.
#[test]
fn a_job_cancelled_as_it_starts_does_not_run_on() {
    let server = TestServer::start();
    let work = scratch_dir();
    let marks = work.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let job = script(
        work.path(),
        "late.sh",
        &format!("sleep 1\ntouch {}/$DROVER_JOB_ID", marks.display()),
    );
    let ids: Vec<String> = (0..12)
        .map(|_| {
            let id = submit_v1(
                &server,
                json!({"commandFile": job, "initialWorkingDirectory": work.path()}),
            );
            let cancelled = server.send("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin);
            assert!(cancelled.status < 300, "{}", cancelled.body);
            id
        })
        .collect();
    for id in &ids {
        server.wait_for(&format!("/rest/jobs/{id}"), "a final state", |job| {
            matches!(
                job["state"].as_str(),
                Some("COMPLETED" | "REMOVED" | "VACATED")
            )
        });
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let ran: Vec<_> = std::fs::read_dir(&marks).unwrap().collect();
    assert!(ran.is_empty(), "cancelled jobs ran on: {ran:?}");
}

/// The job listing answers from indexes and the book's order where it can; it must
/// answer exactly what the reference semantics (`ListQuery::run` over every rendered
/// job) answers.
#[test]
fn job_listings_agree_with_the_reference_semantics() {
    use drover_query::paging::Paging;

    let server = TestServer::start();
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "exit 0");
    let mut completed = Vec::new();
    for i in 0..24 {
        let held = i % 3 != 0;
        let mut body = json!({
            "commandFile": quick,
            "initialWorkingDirectory": work.path(),
            "customName": format!("j{}", i % 5),
            "credentials": {"account": format!("a{}", i % 4), "qosRequested": if i % 2 == 0 { "high" } else { "low" }},
        });
        if held {
            body["holds"] = json!(["User"]);
        }
        let name = submit_v2(&server, body);
        if !held {
            completed.push(name);
        }
        if i == 11 {
            // Jobs of two different seconds, so date ties and order both matter.
            std::thread::sleep(std::time::Duration::from_millis(1100));
        }
    }
    for name in &completed {
        wait_state(&server, name, "COMPLETED");
    }
    for (version, listing, query, sort, offset, max) in [
        (2, "", "{}", "", 0, None),
        (2, "", "{}", r#"{"dates.submitDate":-1}"#, 2, Some(5)),
        (2, "", "{}", r#"{"dates.submitDate":-1}"#, 0, None),
        (2, "", r#"{"credentials.account":"a1"}"#, "", 0, None),
        (
            2,
            "",
            r#"{"credentials.account":{"$in":["a1","a2"]},"states.state":"Hold"}"#,
            r#"{"dates.submitDate":-1}"#,
            0,
            Some(4),
        ),
        (
            2,
            "",
            r#"{"states.state":"Completed"}"#,
            r#"{"name":1}"#,
            0,
            None,
        ),
        (
            2,
            "",
            r#"{"credentials.account":"a1","customName":"j3"}"#,
            "",
            0,
            None,
        ),
        (
            2,
            "",
            r#"{"$or":[{"credentials.account":"a0"},{"customName":"j1"}]}"#,
            r#"{"dates.submitDate":1}"#,
            1,
            Some(3),
        ),
        (2, "", r#"{"states.state":"IDLE"}"#, "", 0, None),
        (
            2,
            "",
            r#"{"credentials.qos":"high","credentials.user":"admin"}"#,
            r#"{"dates.createdDate":-1}"#,
            0,
            Some(7),
        ),
        (2, "/active", r#"{"states.state":"Completed"}"#, "", 0, None),
        (
            2,
            "/complete",
            r#"{"credentials.account":"a0"}"#,
            r#"{"dates.submitDate":-1}"#,
            0,
            None,
        ),
        (
            1,
            "",
            r#"{"state":"HOLD","account":"a2"}"#,
            r#"{"submitDate":-1}"#,
            0,
            None,
        ),
        (
            1,
            "/active",
            r#"{"qos":{"$in":["low"]}}"#,
            r#"{"submitDate":-1}"#,
            1,
            Some(2),
        ),
        (1, "", r#"{"state":"Hold"}"#, "", 0, None),
    ] {
        // Fields that do not change with time (durations do, between two requests).
        let fields = if version == 2 {
            "name,customName,states,credentials,dates"
        } else {
            "id,name,state,account,qos,submitDate"
        };
        crate::lists::agrees_with_reference(
            &server,
            version,
            listing,
            fields,
            query,
            sort,
            Paging { offset, max },
        );
    }
}

#[test]
fn wall_time_cpu_time_output_paths_and_the_user_a_job_runs_as() {
    let server = TestServer::builder()
        .config(|c| c.scheduler.kill_grace_seconds = 1)
        .start();
    let work = scratch_dir();

    // Over its wall time (duration): stopped, Vacated, with a message.
    let sleeper = script(work.path(), "sleep.sh", "exec sleep 300");
    let slow = submit_v2(
        &server,
        json!({"commandFile": sleeper, "initialWorkingDirectory": work.path(), "duration": 1}),
    );
    let job = server.wait_for(&format!("/rest/jobs/{slow}"), "the wall-time limit", |j| {
        j["state"] == "VACATED"
    });
    assert!(
        job["messages"][0]["message"]
            .as_str()
            .unwrap()
            .contains("wall time"),
        "{job}"
    );
    assert_eq!(job["completionCode"], 143, "SIGTERM ends it: {job}");

    // CPU time is recorded; output goes where it was asked (relative to the directory).
    let burner = script(
        work.path(),
        "burn.sh",
        "i=0\nwhile [ $i -lt 200000 ]; do i=$((i + 1)); done\necho done\necho err >&2\nid -un",
    );
    std::fs::create_dir(work.path().join("out")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            work.path().join("out"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
    }
    let name = submit_v2(
        &server,
        json!({"commandFile": burner, "initialWorkingDirectory": work.path(),
               "standardOutputFilePath": "out/result.txt", "standardErrorFilePath": work.path().join("errors.txt"),
               "environmentRequested": true}),
    );
    let job = server.wait_for(
        &format!("/rest/jobs/{name}?api-version=2"),
        "completion",
        |j| j["states"]["state"] == "Completed",
    );
    // A fixed amount of work (not a wall-clock loop, whose CPU time depends on load).
    assert!(job["cpuTime"].as_f64().unwrap() > 0.02, "{job}");
    assert_eq!(job["environmentRequested"], true);
    assert_eq!(
        job["rmStandardOutputFilePath"],
        work.path()
            .join("out/result.txt")
            .to_string_lossy()
            .as_ref()
    );
    let out = std::fs::read_to_string(work.path().join("out/result.txt")).unwrap();
    assert!(out.starts_with("done\n"), "{out}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("errors.txt")).unwrap(),
        "err\n"
    );
    // Without a system account of its own, the administrator's job ran as the
    // execution user (or, without root, as the service's user). On a host that has an
    // account called `admin`, it ran as that.
    let admin_account = std::process::Command::new("id")
        .arg("admin")
        .output()
        .is_ok_and(|o| o.status.success());
    let expected = match (unsafe_is_root(), admin_account) {
        (true, true) => "admin".to_string(),
        (true, false) => "nobody".to_string(),
        (false, _) => whoami(),
    };
    assert_eq!(out.lines().nth(1), Some(expected.as_str()));

    if unsafe_is_root() {
        // A job naming a user and a group of theirs runs as them; its output belongs
        // to them.
        let who = script(work.path(), "who.sh", "echo $(id -un):$(id -gn)");
        let name = submit_v1(
            &server,
            json!({"commandFile": who, "initialWorkingDirectory": work.path(), "user": "daemon", "group": "daemon",
                   "standardOutputFilePath": "who.txt"}),
        );
        wait_state(&server, &name, "COMPLETED");
        assert_eq!(
            std::fs::read_to_string(work.path().join("who.txt"))
                .unwrap()
                .trim(),
            "daemon:daemon"
        );
        let job = server.get(&format!("/rest/jobs/{name}")).json();
        assert_eq!(job["user"], "daemon");
        assert_eq!(job["group"], "daemon");
        // A job may not write where its user may not: refused at submission when that
        // is known then...
        let private = tempfile::tempdir().unwrap();
        server
            .send_json(
                "POST",
                "/rest/jobs",
                &json!({"commandFile": who, "initialWorkingDirectory": work.path(), "user": "daemon",
                        "standardOutputFilePath": private.path().join("stolen.txt")}),
            )
            .assert_refused(400, "standardOutputFilePath", &"a directory daemon may not write");
        // ...and when the directory is closed to it only later, the output file is not
        // created all the same.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let name = submit_v1(
            &server,
            json!({"commandFile": who, "initialWorkingDirectory": work.path(), "user": "daemon",
                   "standardOutputFilePath": private.path().join("stolen.txt"), "holds": ["USER"]}),
        );
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let released = server.send("PUT", &format!("/rest/jobs/{name}/unhold"), Auth::Admin);
        assert_eq!(released.status, 200, "{}", released.body);
        let job = wait_state(&server, &name, "COMPLETED");
        assert_ne!(job["completionCode"], 0, "{job}");
        assert!(!private.path().join("stolen.txt").exists());
    }
}

fn unsafe_is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false)
}

/// A system account jobs may run as, named in a submission: `nobody` as root (jobs do
/// not run as root), else the tests' own.
pub(crate) fn job_user() -> String {
    if unsafe_is_root() {
        "nobody".into()
    } else {
        whoami()
    }
}

fn whoami() -> String {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn job_templates_are_listed_and_fill_what_a_submission_leaves_out() {
    use drover_sched::template::{JobTemplate, TemplateRequirements};
    let server = TestServer::builder()
        .config(|c| {
            c.job_templates = vec![
                JobTemplate {
                    id: "DEFAULT".into(),
                    account: Some("general".into()),
                    duration_requested: Some(600),
                    ..JobTemplate::default()
                },
                JobTemplate {
                    id: "wide".into(),
                    queue: Some("batch".into()),
                    qos: Some("high".into()),
                    job_flags: vec!["RESTARTABLE".into()],
                    job_template_requirements: vec![TemplateRequirements {
                        required_processors_per_task: Some(2),
                        task_count: Some(3),
                        ..TemplateRequirements::default()
                    }],
                    ..JobTemplate::default()
                },
            ]
        })
        .start();
    let list = server.get("/rest/job-templates").json();
    assert_eq!(list["totalCount"], 15, "{list}");
    for id in [
        "DEFAULT",
        "genericVM",
        "genericVM-migrate",
        "OSStorage-setup",
        "extraStorage-destroy",
    ] {
        assert_eq!(
            server.get(&format!("/rest/job-templates/{id}")).json()["id"],
            id
        );
    }
    assert_eq!(server.get("/rest/job-templates/wide").json()["qos"], "high");
    assert_eq!(server.get("/rest/job-templates/nope").status, 404);

    let name = submit_v2(
        &server,
        json!({"commandFile": "/bin/true", "holds": ["User"], "templates": [{"name": "wide"}],
               "credentials": {"account": "mine"}}),
    );
    let job = server
        .get(&format!("/rest/jobs/{name}?api-version=2"))
        .json();
    assert_eq!(
        job["credentials"]["account"], "mine",
        "the body wins: {job}"
    );
    assert_eq!(job["credentials"]["jobClass"], "batch");
    assert_eq!(job["credentials"]["qosRequested"], "high");
    assert_eq!(job["duration"], 600, "DEFAULT applies too");
    assert!(
        job["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "RESTARTABLE"),
        "{job}"
    );
    assert_eq!(job["requirements"][0]["taskCount"], 3);
    assert_eq!(
        job["requirements"][0]["resourcesPerTask"]["processors"]["dedicated"],
        2
    );
    assert_eq!(job["templates"], json!([{"name": "wide"}]));

    let plain = submit_v2(
        &server,
        json!({"commandFile": "/bin/true", "holds": ["User"]}),
    );
    let plain = server
        .get(&format!("/rest/jobs/{plain}?api-version=2"))
        .json();
    assert_eq!(plain["credentials"]["account"], "general");

    let refused = server.send_json(
        "POST",
        "/rest/jobs?api-version=2",
        &json!({"commandFile": "/bin/true", "templates": [{"name": "nope"}]}),
    );
    assert_eq!(refused.status, 400);
    assert!(
        refused.messages().contains("no job template 'nope'"),
        "{}",
        refused.body
    );
}

#[test]
fn dependencies_hold_a_job_back_release_it_and_block_it_for_good() {
    let server = TestServer::start();
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "exit 0");
    let submit_dependent = |kind: &str, name: &str| {
        submit_v2(
            &server,
            json!({"commandFile": quick, "initialWorkingDirectory": work.path(),
                   "dependencies": [{"type": kind, "name": name}]}),
        )
    };
    let first = submit_v2(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path(), "holds": ["User"]}),
    );
    let after_ok = submit_dependent("afterok", &first);
    let after_not_ok = submit_dependent("afternotok", &first);
    let after_start = submit_dependent("JOBSTART", &first);
    let after_any = submit_dependent("afterany", &first);
    let on_variable = submit_dependent("set", "GO");
    for (id, reason) in [
        (&after_ok, "to succeed"),
        (&after_not_ok, "to fail"),
        (&after_start, "to start"),
        (&after_any, "to end"),
        (&on_variable, "variable GO"),
    ] {
        let job = server.wait_for(&format!("/rest/jobs/{id}"), "the dependency block", |j| {
            j["state"] == "BLOCKED"
        });
        assert_eq!(job["blockReason"]["type"], "Dependency", "{job}");
        assert!(
            job["blockReason"]["message"]
                .as_str()
                .unwrap()
                .contains(reason),
            "{job}"
        );
    }

    // The first job runs and succeeds: afterok, afterstart and afterany follow; afternotok
    // can never be met and says why.
    let reply = server.send("PUT", &format!("/rest/jobs/{first}/unhold"), Auth::Admin);
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait_state(&server, &first, "COMPLETED");
    for id in [&after_ok, &after_start, &after_any] {
        wait_state(&server, id, "COMPLETED");
    }
    let failed = server.wait_for(
        &format!("/rest/jobs/{after_not_ok}"),
        "the failed dependency",
        |j| j["blockReason"]["type"] == "DependencyFailed",
    );
    assert_eq!(failed["state"], "BLOCKED");
    assert!(
        failed["blockReason"]["message"]
            .as_str()
            .unwrap()
            .contains("succeeded"),
        "{failed}"
    );

    // Setting the variable releases the last one.
    assert_eq!(state_v1(&server, &on_variable), "BLOCKED");
    let reply = server.send_json(
        "PUT",
        &format!("/rest/jobs/{on_variable}?api-version=2"),
        &json!({"variables": {"GO": "1"}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait_state(&server, &on_variable, "COMPLETED");

    for (body, problem) in [
        (
            json!([{"type": "beforeok", "name": first}]),
            "dependencies[0].type",
        ),
        (
            json!([{"type": "afterok", "name": "Drover.999999"}]),
            "no job 'Drover.999999'",
        ),
    ] {
        let reply = server.send_json(
            "POST",
            "/rest/jobs?api-version=2",
            &json!({"commandFile": quick, "initialWorkingDirectory": work.path(), "dependencies": body}),
        );
        assert_eq!(reply.status, 400, "{}", reply.body);
        assert!(reply.messages().contains(problem), "{}", reply.body);
    }
}

#[test]
fn job_arrays_need_enabling_run_their_sub_jobs_and_refuse_bad_input() {
    let off = TestServer::start();
    let body = json!({"name": "sweep", "jobPrototype": {"commandFile": "/bin/true"},
                      "indexValues": [1]});
    let refused = off.send_json("POST", "/rest/job-arrays?api-version=2", &body);
    assert_eq!(refused.status, 400);
    assert!(
        refused.messages().contains("ENABLEJOBARRAYS"),
        "{}",
        refused.body
    );

    let server = TestServer::builder()
        .config(|c| {
            c.scheduler.enable_job_arrays = true;
            c.nodes = nodes(&[("n1", 2)]);
        })
        .start();
    let dir = scratch_dir();
    // Each sub-job records its index; the slot limit keeps at most 2 at once.
    let work = script(
        dir.path(),
        "work.sh",
        "echo \"$DROVER_JOB_ID\" >> \"$(dirname \"$0\")/ran\"; sleep 0.2",
    );
    let body = json!({
        "name": "sweep",
        "jobPrototype": {"commandFile": work, "initialWorkingDirectory": dir.path()},
        "indexRanges": [{"startIndex": 1, "endIndex": 5, "increment": 2}],
        "indexValues": [10, 3],
        "slotLimit": 2,
    });
    let reply = server.send_json("POST", "/rest/job-arrays?api-version=2", &body);
    assert_eq!(reply.status, 201, "{}", reply.body);
    let master = reply.json()["name"].as_str().unwrap().to_string();
    // Sub-job names carry brackets: percent-encoded in a path.
    let members: Vec<String> = [1, 3, 5, 10]
        .iter()
        .map(|i| format!("{master}%5B{i}%5D"))
        .collect();
    let first = server
        .get(&format!("/rest/jobs/{}?api-version=2", members[0]))
        .json();
    assert_eq!(first["arrayIndex"], 1, "{first}");
    assert_eq!(first["arrayMasterName"], master.as_str());
    assert_eq!(first["customName"], "sweep");
    assert!(
        first["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("ARRAYJOB"))
    );
    let done = server.wait_for(
        &format!("/rest/jobs/{master}?api-version=2"),
        "the array completes",
        |job| job["states"]["state"] == "Completed",
    );
    assert!(
        done["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("ARRAYMASTER")),
        "{done}"
    );
    assert_eq!(done["arrayIndex"], Value::Null);
    let ran = std::fs::read_to_string(dir.path().join("ran")).unwrap();
    let mut ran: Vec<&str> = ran.lines().collect();
    ran.sort();
    let decoded: Vec<String> = members
        .iter()
        .map(|m| m.replace("%5B", "[").replace("%5D", "]"))
        .collect();
    let mut expected: Vec<&str> = decoded.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(ran, expected, "each sub-job ran once");
    for id in &members {
        assert_eq!(state_v1(&server, id), "COMPLETED");
    }
    // The listing shows the master and its sub-jobs.
    let listed = server
        .get("/rest/jobs?api-version=2&query=%7B%22customName%22%3A%22sweep%22%7D")
        .json();
    assert_eq!(listed["totalCount"], 5, "{listed}");

    let count = || server.get("/rest/jobs").json()["totalCount"].clone();
    let before = count();
    for (body, expected) in [
        (json!({"indexValues": [1]}), "jobPrototype"),
        (
            json!({"jobPrototype": {"commandFile": "/bin/true"}}),
            "indexRanges or indexValues",
        ),
        (
            json!({"jobPrototype": {"commandFile": "/bin/true"},
                   "indexRanges": [{"startIndex": 5, "endIndex": 1}]}),
            "indexRanges[0]",
        ),
        (
            json!({"jobPrototype": {"commandFile": "/bin/true"},
                   "indexRanges": [{"endIndex": 1}]}),
            "indexRanges[0].startIndex",
        ),
        (
            json!({"jobPrototype": {"commandFile": "/bin/true"}, "indexValues": [1, "x"]}),
            "indexValues[1]",
        ),
        (
            json!({"jobPrototype": {"commandFile": "/bin/true"}, "indexValues": [1],
                   "slotLimit": 0}),
            "slotLimit",
        ),
        (
            json!({"jobPrototype": {"commandFile": "/bin/true"}, "indexValues": [1],
                   "cancellationPolicy": {"anyJob": "SOMETIMES"}}),
            "cancellationPolicy.anyJob",
        ),
        (
            json!({"jobPrototype": {}, "indexValues": [1]}),
            "commandFile",
        ),
        (
            json!({"jobPrototype": {"commandFile": "/bin/true"},
                   "indexRanges": [{"startIndex": 0, "endIndex": 2000000}]}),
            "more than 1000000",
        ),
    ] {
        let reply = server.send_json("POST", "/rest/job-arrays?api-version=2", &body);
        reply.assert_refused(400, expected, &body);
    }
    assert_eq!(count(), before, "nothing was created");

    // Cancelling the master cancels its sub-jobs; other actions on it are refused.
    let held = json!({
        "jobPrototype": {"commandFile": "/bin/true", "holds": ["User"]},
        "indexValues": [7, 8],
    });
    let master = server
        .send_json("POST", "/rest/job-arrays?api-version=2", &held)
        .json()["name"]
        .as_str()
        .unwrap()
        .to_string();
    let refused = server.send_json("PUT", &format!("/rest/jobs/{master}/suspend"), &json!({}));
    assert_eq!(refused.status, 400);
    assert!(
        refused.messages().contains("array master"),
        "{}",
        refused.body
    );
    let cancelled = server.call("DELETE", &format!("/rest/jobs/{master}"), Auth::Admin, None);
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    for index in [7, 8] {
        assert_eq!(
            state_v1(&server, &format!("{master}%5B{index}%5D")),
            "REMOVED"
        );
    }
    assert_eq!(state_v1(&server, &master), "REMOVED");
}

#[test]
fn an_output_path_naming_a_directory_gets_the_default_file_name_there() {
    // As real clients of the original do: the directory means "put the file there".
    let server = TestServer::start();
    let work = scratch_dir();
    let logs = work.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::set_permissions(&logs, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let command = script(work.path(), "two.sh", "echo out\necho err >&2");
    let id = submit_v2(
        &server,
        json!({"customName": "two", "commandFile": command,
               "initialWorkingDirectory": work.path(),
               "standardOutputFilePath": logs, "standardErrorFilePath": format!("{}/", logs.display())}),
    );
    let job = wait_state_v2(&server, &id, "Completed");
    assert_eq!(job["completionCode"], 0, "{job}");
    let number = id.trim_start_matches("Drover.");
    let read = |name: String| std::fs::read_to_string(logs.join(name)).unwrap();
    assert_eq!(read(format!("two.o{number}")).trim(), "out");
    assert_eq!(read(format!("two.e{number}")).trim(), "err");
}

#[test]
fn why_a_job_could_not_start_is_a_message_on_it_and_in_its_event() {
    let server = TestServer::start();
    let work = scratch_dir();
    let command = script(work.path(), "never.sh", "echo ran");
    // An output file in a directory that does not exist: known at submission, a 400.
    server
        .send_json(
            "POST",
            "/rest/jobs?api-version=2",
            &json!({"commandFile": command, "initialWorkingDirectory": work.path(),
                    "standardOutputFilePath": "/nonexistent-dir/out"}),
        )
        .assert_refused(
            400,
            "standardOutputFilePath",
            &"an output directory that does not exist",
        );
    // A device its user may write is fine.
    submit_v2(
        &server,
        json!({"commandFile": command, "initialWorkingDirectory": work.path(),
               "standardOutputFilePath": "/dev/null", "standardErrorFilePath": "/dev/null"}),
    );
    // Known only at the start: the directory went away while the job was held.
    let outputs = work.path().join("outputs");
    std::fs::create_dir(&outputs).unwrap();
    std::fs::set_permissions(
        &outputs,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let id = submit_v2(
        &server,
        json!({"commandFile": command, "initialWorkingDirectory": work.path(),
               "standardOutputFilePath": outputs.join("out"), "holds": ["User"]}),
    );
    std::fs::remove_dir(&outputs).unwrap();
    let job = released_until_it_ends(&server, &id);
    assert_ne!(job["completionCode"], 0, "{job}");
    let said = job["messages"].to_string();
    assert!(said.contains("could not be started"), "{job}");
    assert!(said.contains("outputs/out"), "{job}");
    // The book shows the end at once; its event is read from the store, once the end's
    // journal batch has committed.
    let events = server.wait_for(
        &format!(
            "/rest/events?query=%7B%22eventType%22%3A%22jobend%22%2C%22primaryObject.id%22%3A%22{id}%22%7D"
        ),
        "its end event",
        |list| list["resultCount"] != 0,
    );
    assert!(events.to_string().contains("outputs/out"), "{events}");
    // A command file gone while the job was held.
    let gone = script(work.path(), "gone.sh", "echo ran");
    let id = submit_v2(
        &server,
        json!({"commandFile": gone, "initialWorkingDirectory": work.path(), "holds": ["User"]}),
    );
    std::fs::remove_file(&gone).unwrap();
    let job = released_until_it_ends(&server, &id);
    assert_eq!(job["completionCode"], 126, "{job}");
    assert!(
        job["messages"].to_string().contains("cannot be read"),
        "{job}"
    );
}

#[test]
fn a_job_that_ends_while_the_service_is_down_keeps_its_exit_code() {
    let server = TestServer::start();
    let work = scratch_dir();
    let command = script(work.path(), "seven.sh", "sleep 1\necho finished\nexit 7");
    let id = submit_v2(
        &server,
        json!({"customName": "seven", "commandFile": command,
               "initialWorkingDirectory": work.path()}),
    );
    wait_state_v2(&server, &id, "Running");
    // Down for longer than the job has left: its shepherd records how it ended.
    let server = server.restart_after(std::time::Duration::from_secs(3));
    let job = wait_state_v2(&server, &id, "Completed");
    assert_eq!(job["completionCode"], 7, "{job}");
    let number = id.trim_start_matches("Drover.");
    let out = std::fs::read_to_string(work.path().join(format!("seven.o{number}"))).unwrap();
    assert_eq!(out.trim(), "finished");
}

/// A site's `DEFAULT` job template: account `general`, 600 s, `RESTARTABLE`.
pub(crate) fn a_default_template() -> drover_sched::template::JobTemplate {
    drover_sched::template::JobTemplate {
        id: "DEFAULT".into(),
        account: Some("general".into()),
        duration_requested: Some(600),
        job_flags: vec!["RESTARTABLE".into()],
        ..Default::default()
    }
}

/// Releases the held job `id` and waits for its end; its version-2 rendering then.
fn released_until_it_ends(server: &TestServer, id: &str) -> Value {
    let released = server.send_json(
        "PUT",
        &format!("/rest/jobs/{id}?api-version=2"),
        &json!({"holds": []}),
    );
    assert_eq!(released.status, 200, "{}", released.body);
    server.wait_for(&format!("/rest/jobs/{id}?api-version=2"), "its end", |j| {
        j["states"]["state"] == "Completed"
    })
}
