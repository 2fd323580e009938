//! VMs at their edges, kept as regression tests of attacks on them: another
//! user taking a job's VM name, a job's VM outliving its job, a requeued job in a VM,
//! a huge time to live, what gathers on a VM, a job's VM larger than its node's share,
//! and odd requests (no 5xx).

use std::time::Duration;

use drover_testkit::{Auth, TestServer, send, wait_until};
use serde_json::{Value, json};

/// Submits (as alice, version 1) a job `(name, script)` whose command runs in a VM of its
/// own, with `more` fields; answers its id.
fn submit_in_vm(
    server: &TestServer,
    work: &std::path::Path,
    job: (&str, &str),
    more: Value,
) -> String {
    let (name, body) = job;
    let command = drover_testkit::script(work, &format!("{name}.sh"), body);
    let mut fields = json!({"name": name, "commandFile": command,
                            "initialWorkingDirectory": work, "vmUsagePolicy": "CREATEVM"});
    fields
        .as_object_mut()
        .unwrap()
        .extend(more.as_object().unwrap().clone());
    let reply = send(server, "POST", "/rest/jobs", Auth::User, &fields);
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.json()["id"].as_str().unwrap().to_string()
}

/// A server with guests (`None`: no QEMU here, the test is skipped) and a folder for jobs.
fn lab() -> Option<(TestServer, crate::vms::Guests, tempfile::TempDir)> {
    let (server, guests) = crate::vms::start(TestServer::builder(), |_| {})?;
    Some((server, guests, drover_testkit::scratch_dir()))
}

/// A job's requirement of `count` processors.
fn processors(count: u32) -> Value {
    json!({"requirements": [{"requiredProcessorCountMinimum": count}]})
}

fn bob() -> Auth {
    drover_testkit::login_as("bob")
}

/// The sequence number of the next job, learnt by submitting a held job.
fn next_seq(server: &TestServer, work: &std::path::Path) -> u64 {
    let command = drover_testkit::script(work, "noop.sh", "true");
    let reply = send(
        server,
        "POST",
        "/rest/jobs",
        Auth::User,
        &json!({"commandFile": command, "initialWorkingDirectory": work, "holds": ["User"]}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let id = reply.json()["id"].as_str().unwrap().to_string();
    id.rsplit('.').next().unwrap().parse::<u64>().unwrap() + 1
}

/// bob tries to name his own VM after the VM alice's next CREATEVM job will have (job
/// ids are sequential): were it allowed, alice's job would run in bob's guest (fd 5 to
/// the agent of bob's VM, her script, environment and input there). Ids of jobs' VMs
/// are reserved (`job-`): refused, and alice's job runs in a guest of its own.
#[test]
fn another_users_vm_named_after_my_job_is_not_where_my_job_runs() {
    let Some((server, _guests)) =
        crate::vms::start(TestServer::builder().user("bob", false), |_| {})
    else {
        return;
    };
    let work = drover_testkit::scratch_dir();
    let seq = next_seq(&server, work.path());
    let trap = format!("job-Drover.{seq}");
    let created = send(&server, "POST", "/rest/vms", bob(), &json!({"id": trap}));
    created.assert_refused(400, "VMs of jobs", &"a VM id a job's VM will have");
    let id = submit_in_vm(
        &server,
        work.path(),
        ("guest", "echo vm=$DROVER_VM_ID"),
        json!({}),
    );
    assert_eq!(format!("job-{id}"), trap, "the job id was predicted");
    let owner = server.wait_for(&format!("/rest/vms/{trap}"), "alice's job's VM", |_| true);
    assert_eq!(owner["user"], drover_testkit::USER);
    let job = server.wait_for(&format!("/rest/jobs/{id}"), "alice's job ends", |j| {
        j["state"] == "COMPLETED"
    });
    assert_eq!(job["completionCode"], 0, "{job}");
    let out = std::fs::read_to_string(work.path().join(format!("guest.o{seq}"))).unwrap();
    assert_eq!(out.trim(), format!("vm={trap}"));
}

/// Without QEMU: bob cannot name a VM after alice's next job (were his VM left `failed`
/// under that name, her job would wait for it forever); her job, whose VM cannot be
/// made, is held saying why rather than left Starting.
#[test]
fn another_users_failed_vm_named_after_my_job_does_not_wedge_it() {
    let server = crate::vms::without_provisioner();
    let work = drover_testkit::scratch_dir();
    let seq = next_seq(&server, work.path());
    let trap = format!("job-Drover.{seq}");
    let created = send(&server, "POST", "/rest/vms", bob(), &json!({"id": trap}));
    created.assert_refused(400, "VMs of jobs", &"a VM id a job's VM will have");
    let id = submit_in_vm(&server, work.path(), ("guest", "true"), json!({}));
    assert_eq!(format!("job-{id}"), trap);
    let job = server.wait_for(&format!("/rest/jobs/{id}?api-version=2"), "held", |j| {
        j["states"]["state"] == "Hold"
    });
    assert!(
        job.to_string().contains("its VM could not be made"),
        "{job}"
    );
}

/// alice tries to power her job's VM off (were it allowed, the job's end would find it
/// busy and leave it, a guest holding nothing on its node): refused; cancelling the job
/// destroys its VM.
#[test]
fn a_jobs_vm_powered_off_as_its_job_ends_is_destroyed() {
    let Some((server, _guests, work)) = lab() else {
        return;
    };
    let id = submit_in_vm(&server, work.path(), ("long", "sleep 600"), processors(4));
    let vm_id = format!("job-{id}");
    server.wait_for(&format!("/rest/jobs/{id}"), "the job runs", |j| {
        j["state"] == "RUNNING"
    });
    let off = send(
        &server,
        "PUT",
        &format!("/rest/vms/{vm_id}"),
        Auth::User,
        &json!({"powerState": "OFF"}),
    );
    off.assert_refused(
        400,
        "lives and ends with the job",
        &"powering a job's VM off",
    );
    let cancel = server.send("DELETE", &format!("/rest/jobs/{id}"), Auth::User);
    assert!(cancel.status < 300, "{}", cancel.body);
    wait_until("the job's VM is gone", || {
        server.get(&format!("/rest/vms/{vm_id}")).status == 404
    });
    assert!(crate::vms::qemu_pids(server.data_dir(), Some(&vm_id)).is_empty());
    let node = server.get("/rest/nodes/node01").json();
    assert_eq!(node["availableProcessors"], 4, "{node}");
}

/// `requestedTimeToLive` past ten years is refused (it once overflowed `created + ttl`
/// on the engine thread); ten years is kept, the VM not destroyed at once.
#[test]
fn a_huge_time_to_live_is_refused_or_kept() {
    let server = crate::vms::without_provisioner();
    let huge = json!({"id": "forever", "requestedTimeToLive": "9223372036854775807"});
    send(&server, "POST", "/rest/vms", bob(), &huge).assert_refused(
        400,
        "requestedTimeToLive",
        &"a time to live past ten years",
    );
    // Ten years is kept: the VM is not destroyed at once, and the engine goes on.
    let decade = json!({"id": "decade", "requestedTimeToLive": 10 * 366 * 86_400});
    let created = send(&server, "POST", "/rest/vms", bob(), &decade);
    assert_eq!(created.status, 202, "{}", created.body);
    std::thread::sleep(Duration::from_secs(3));
    let vm = server.get("/rest/vms/decade");
    assert_eq!(vm.status, 200, "{}", vm.body);
    assert_ne!(vm.json()["substate"], "destroying", "{}", vm.body);
    let after = send(&server, "POST", "/rest/vms", bob(), &json!({"id": "after"}));
    assert_eq!(
        after.status, 202,
        "the engine no longer answers: {}",
        after.body
    );
}

/// What PUTs gather on a VM is bounded (it once grew with every `genericEvents`, each
/// change writing the whole VM to the store).
#[test]
fn what_changes_gather_on_a_vm_stays_within_max_submission_bytes() {
    let server = crate::vms::without_provisioner();
    let created = send(&server, "POST", "/rest/vms", bob(), &json!({"id": "mine"}));
    assert_eq!(created.status, 202, "{}", created.body);
    server.wait_for("/rest/vms/mine", "its setup failed", |vm| {
        vm["substate"] == "failed"
    });
    let message = "x".repeat(60_000);
    for _ in 0..20 {
        let reply = send(
            &server,
            "PUT",
            "/rest/vms/mine",
            bob(),
            &json!({"genericEvents": [{"name": "e", "message": message}]}),
        );
        if reply.status != 200 {
            return; // refused: bounded
        }
    }
    let vm = server.get_as(bob(), "/rest/vms/mine");
    assert!(
        vm.body.len() <= 65_536 * 2,
        "20 PUTs of 60 KB left a VM of {} bytes (max_submission_bytes is 65536)",
        vm.body.len()
    );
}

/// A job spread over two nodes gets one VM on its first node, of what it holds there
/// (it once got all its processors and memory, more than that node had for it).
#[test]
fn a_jobs_vm_is_no_larger_than_what_the_job_holds_on_its_node() {
    let Some((server, _guests, work)) = lab() else {
        return;
    };
    let id = submit_in_vm(
        &server,
        work.path(),
        ("wide", "nproc; sleep 5"),
        processors(8),
    );
    let vm = server.wait_for(&format!("/rest/vms/job-{id}"), "its VM", |vm| {
        vm["id"].is_string()
    });
    let job = server.get(&format!("/rest/jobs/{id}")).json();
    let node = vm["node"]["id"].as_str().unwrap_or("?").to_string();
    let total = server.get(&format!("/rest/nodes/{node}")).json()["totalProcessors"].clone();
    assert!(
        vm["totalProcessors"].as_i64() <= total.as_i64(),
        "the job's VM has {} processors on {node} of {total}; job hosts {}",
        vm["totalProcessors"],
        job["hosts"]
    );
    // Its guest goes with it before the test ends: one still being made when the
    // server stops would be started after the test's guard looked for guests.
    server.send("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin);
    wait_until("the job's VM is gone", || {
        server.get(&format!("/rest/vms/job-{id}")).status == 404
    });
}

/// A RESTARTABLE job in a VM, requeued while it runs: its end starts its VM's destroy;
/// placed again, it waits for that destroy and gets a new VM (it once stayed Starting
/// forever, holding its node).
#[test]
fn a_requeued_job_in_a_vm_starts_again() {
    let Some((server, _guests, work)) = lab() else {
        return;
    };
    let id = submit_in_vm(
        &server,
        work.path(),
        ("again", "sleep 600"),
        json!({"flags": ["RESTARTABLE"]}),
    );
    server.wait_for(&format!("/rest/vms/job-{id}"), "its VM runs", |vm| {
        vm["substate"] == "running"
    });
    server.wait_for(&format!("/rest/jobs/{id}"), "the job runs", |j| {
        j["state"] == "RUNNING"
    });
    let requeued = server.send("PUT", &format!("/rest/jobs/{id}/requeue"), Auth::User);
    assert_eq!(requeued.status, 200, "{}", requeued.body);
    std::thread::sleep(Duration::from_secs(20));
    let job = server.get(&format!("/rest/jobs/{id}?api-version=2")).json();
    let vm = server.get(&format!("/rest/vms/job-{id}"));
    assert_ne!(
        job["states"]["state"], "Starting",
        "the requeued job is stuck starting; its VM: {} {}",
        vm.status, vm.body
    );
}

/// Odd bodies and ids on the VM and pending-action routes: never a 5xx.
#[test]
fn odd_vm_requests_are_answered_without_a_server_error() {
    let server = crate::vms::without_provisioner();
    let created = send(&server, "POST", "/rest/vms", bob(), &json!({"id": "mine"}));
    assert_eq!(created.status, 202, "{}", created.body);
    let mut bad = Vec::new();
    let bodies = [
        json!({"id": 5}),
        json!({"id": null}),
        json!({"id": ""}),
        json!({"id": "x".repeat(65)}),
        json!({"node": []}),
        json!({"node": [{}]}),
        json!({"node": {"id": 5}}),
        json!({"node": null}),
        json!({"node": ""}),
        json!({"totalProcessors": 1e300}),
        json!({"totalProcessors": -1}),
        json!({"totalProcessors": "4294967296"}),
        json!({"totalMemory": 18446744073709551615u64}),
        json!({"totalDisk": -5}),
        json!({"storage": 5}),
        json!({"storage": "data:65536,data:65536"}),
        json!({"storage": "a:1@,b:1@@,,,:"}),
        json!({"triggers": "x"}),
        json!({"triggers": [1, "a"]}),
        json!({"variables": [1]}),
        json!({"variables": {"a": {"b": 1}}}),
        json!({"os": 5}),
        json!({"requestedTimeToLive": 1.5}),
        json!({"sovereign": "maybe"}),
        json!([]),
        json!("x"),
        json!(null),
        json!({"template": {"a": 1}}),
        json!({"description": ["x"]}),
    ];
    for body in &bodies {
        let r = send(&server, "POST", "/rest/vms", bob(), body);
        if r.status >= 500 {
            bad.push(format!("POST {body}: {} {}", r.status, r.body));
        }
    }
    let changes = [
        json!({"node": null}),
        json!({"node": 5}),
        json!({"node": []}),
        json!({"node": [{}]}),
        json!({"node": {"id": null}}),
        json!({"node": {"id": "ANY"}, "powerState": 5}),
        json!({"node": "node-x"}),
        json!({"powerState": null}),
        json!({"powerState": 1}),
        json!({"state": 5}),
        json!({"genericEvents": "x"}),
        json!({"genericEvents": [5]}),
        json!({"genericEvents": [{"name": 5}]}),
        json!({"genericMetrics": {"a": "NaN"}}),
        json!({"genericMetrics": {"a": "1e999"}}),
        json!({"genericMetrics": [1]}),
        json!({"variables": null}),
        json!({"triggers": null}),
        json!({"os": null}),
        json!([]),
        json!(null),
        json!(5),
    ];
    for path in [
        "/rest/vms/mine",
        "/rest/vms/none",
        "/rest/vms/%2e%2e",
        "/rest/vms/a%00b",
    ] {
        for body in &changes {
            let r = send(&server, "PUT", path, bob(), body);
            if r.status >= 500 {
                bad.push(format!("PUT {path} {body}: {} {}", r.status, r.body));
            }
        }
        for method in ["GET", "DELETE"] {
            let r = server.send(method, path, bob());
            if r.status >= 500 {
                bad.push(format!("{method} {path}: {} {}", r.status, r.body));
            }
        }
    }
    for query in [
        "",
        "?first-result=-1",
        "?max-results=-1",
        "?max-results=99999999999999999999",
        "?first-result=18446744073709551615",
        "?sort=%7B%22vmId%22%3A1%7D",
        "?sort=garbage",
        "?query=%7B%22vmId%22%3A%7B%22%24regex%22%3A%22(a%2B)%2B%24%22%7D%7D",
        "?query=nonsense",
        "?fields=id&fields=vmId",
        "?api-version=99",
        "?api-version=x",
        "?proxy-user=alice",
    ] {
        for path in [
            "/rest/pending-actions",
            "/rest/vms",
            "/rest/nodes/node01/vms",
        ] {
            let r = server.get_as(bob(), &format!("{path}{query}"));
            if r.status >= 500 {
                bad.push(format!("GET {path}{query}: {} {}", r.status, r.body));
            }
        }
    }
    // Still alive.
    let r = send(&server, "POST", "/rest/vms", bob(), &json!({"id": "after"}));
    if r.status >= 500 {
        bad.push(format!("the engine after: {} {}", r.status, r.body));
    }
    assert!(bad.is_empty(), "{bad:#?}");
}
