//! VM work that waits, as a portal meets it (issue #58, items 1 and 2), with real QEMU
//! guests: a VM that does not fit now waits for room instead of being refused, and a
//! destroy or migration asked while another operation is under way (or while its
//! target is full) is accepted, its system job waiting as a pending action; the last
//! asked wins. What waits outlives a restart of the service.
//!
//! Room is made scarce, not time: node01 is filled by a VM of all its processors, so
//! what waits for it waits until the test destroys that VM.

use std::time::{Duration, Instant};

use drover_testkit::{Auth, TestServer, send};
use serde_json::{Value, json};

use crate::vms::{available_processors, job_id, qemu_pids, start};

/// Waits up to three minutes (guests boot under TCG on a busy machine) for `check`.
fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn bob() -> Auth {
    drover_testkit::login_as("bob")
}

/// The pending action `id` as `auth` sees it (`Null` when it is not listed).
fn pending_action(server: &TestServer, auth: Auth, id: &str) -> Value {
    let actions = server.get_as(auth, "/rest/pending-actions").json();
    actions["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

fn job(server: &TestServer, id: &str) -> Value {
    server.get(&format!("/rest/jobs/{id}?api-version=2")).json()
}

/// Fills node01: an administrator's VM `id` of its 4 processors.
fn fill_node01(server: &TestServer, id: &str) -> String {
    let body = json!({"id": id, "totalProcessors": 4, "node": {"id": "node01"}});
    job_id(&send(server, "POST", "/rest/vms", Auth::Admin, &body))
}

fn destroyed(server: &TestServer, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let vm = server.get(&format!("/rest/vms/{id}"));
        if vm.status == 404 {
            break;
        }
        let actions = server.get("/rest/pending-actions").body;
        assert!(
            Instant::now() < deadline,
            "{id} is not gone: {} {actions}",
            vm.body
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        qemu_pids(server.data_dir(), Some(id)).is_empty(),
        "{id}'s guest runs on"
    );
}

/// Alice's VM `later` for the full node01 waits, and a migration of it to node02,
/// asked meanwhile, waits behind its setup. Answers both jobs.
fn a_waiting_vm_with_a_queued_migration(server: &TestServer) -> (String, String) {
    let body = json!({"id": "later", "totalProcessors": 2, "node": {"id": "node01"}});
    let setup = job_id(&send(server, "POST", "/rest/vms", Auth::User, &body));
    let vm = server.get_as(Auth::User, "/rest/vms/later").json();
    assert_eq!(
        (&vm["state"], &vm["substate"]),
        (&json!("UNKNOWN"), &json!("waiting")),
        "{vm}"
    );
    assert_eq!(vm["trackingJob"]["id"], setup.as_str(), "{vm}");
    // It holds nothing while it waits.
    assert_eq!(available_processors(server, "node01"), 0);
    assert_eq!(available_processors(server, "node02"), 4);
    let action = pending_action(server, Auth::User, &setup);
    assert_eq!(action["pendingActionState"], "PENDING", "{action}");
    assert_eq!(action["pendingActionType"], "VMCREATE", "{action}");
    let to_node02 = json!({"node": {"id": "node02"}});
    let migrate = job_id(&send(
        server,
        "PUT",
        "/rest/vms/later",
        Auth::User,
        &to_node02,
    ));
    let action = pending_action(server, Auth::User, &migrate);
    assert_eq!(action["pendingActionState"], "PENDING", "{action}");
    assert_eq!(action["pendingActionType"], "VMMIGRATE", "{action}");
    assert_eq!(action["migrationDestination"], "node02", "{action}");
    (setup, migrate)
}

#[test]
fn vm_work_waits_for_room_and_for_the_operation_under_way() {
    let Some((server, _guests)) = start(TestServer::builder().user("bob", false), |_| {}) else {
        return;
    };
    fill_node01(&server, "big");
    let (setup, migrate) = a_waiting_vm_with_a_queued_migration(&server);
    // A power change is not queued (docs/decisions.md): 409 while the VM waits.
    send(
        &server,
        "PUT",
        "/rest/vms/later",
        Auth::User,
        &json!({"powerState": "OFF"}),
    )
    .assert_refused(409, "waiting", &"a power change of a waiting VM");
    // Only what no node could ever hold is refused at once.
    for (body, words) in [
        (json!({"totalProcessors": 5}), "no node could ever hold"),
        (
            json!({"totalMemory": 4096, "node": "node01"}),
            "can never fit",
        ),
    ] {
        send(&server, "POST", "/rest/vms", Auth::User, &body).assert_refused(400, words, &body);
    }
    send(
        &server,
        "PUT",
        "/rest/vms/later",
        Auth::User,
        &json!({"node": {"id": "node09"}}),
    )
    .assert_refused(400, "no node 'node09'", &"a migration to no node");
    // Another ordinary user can neither reach alice's waiting VM nor see its work.
    assert_eq!(server.send("DELETE", "/rest/vms/later", bob()).status, 404);
    let away = json!({"node": {"id": "node01"}});
    assert_eq!(
        send(&server, "PUT", "/rest/vms/later", bob(), &away).status,
        404
    );
    assert!(pending_action(&server, bob(), &setup).is_null());
    assert!(pending_action(&server, bob(), &migrate).is_null());
    assert_eq!(server.get_as(bob(), "/rest/vms/later").status, 404);

    // Room comes: the VM is made on node01, then the waiting migration moves it.
    job_id(&server.send("DELETE", "/rest/vms/big", Auth::Admin));
    eventually("later is made and migrated", || {
        let vm = server.get("/rest/vms/later").json();
        vm["substate"] == "running" && vm["node"]["id"] == "node02"
    });
    let vm = server.get("/rest/vms/later").json();
    assert_eq!(vm["migrationCount"], 1, "{vm}");
    for id in [&setup, &migrate] {
        let done = job(&server, id);
        assert_eq!(
            (&done["states"]["state"], &done["completionCode"]),
            (&json!("Completed"), &json!(0)),
            "{done}"
        );
    }
    destroyed(&server, "big");
    assert_eq!(available_processors(&server, "node01"), 4);
    assert_eq!(available_processors(&server, "node02"), 2);
    assert_eq!(qemu_pids(server.data_dir(), Some("later")).len(), 1);

    // A migration to a full node waits, the guest running on; a destroy asked after it
    // wins: the migration is cancelled.
    fill_node01(&server, "fill");
    let back = job_id(&send(&server, "PUT", "/rest/vms/later", Auth::User, &away));
    let vm = server.get("/rest/vms/later").json();
    assert_eq!(
        (&vm["substate"], &vm["node"]["id"]),
        (&json!("running"), &json!("node02")),
        "{vm}"
    );
    assert_eq!(
        pending_action(&server, Auth::User, &back)["pendingActionState"],
        "PENDING"
    );
    let destroy = job_id(&server.send("DELETE", "/rest/vms/later", Auth::User));
    assert_eq!(job(&server, &back)["states"]["state"], "Removed");
    destroyed(&server, "later");
    assert_eq!(job(&server, &destroy)["completionCode"], 0);
    assert_eq!(available_processors(&server, "node02"), 4);

    // Deleted a moment after it was asked for: accepted, whatever its setup is doing.
    let quick = job_id(&send(
        &server,
        "POST",
        "/rest/vms",
        Auth::User,
        &json!({"id": "quick"}),
    ));
    let gone = job_id(&server.send("DELETE", "/rest/vms/quick", Auth::User));
    assert_ne!(quick, gone);
    destroyed(&server, "quick");
    job_id(&server.send("DELETE", "/rest/vms/fill", Auth::Admin));
    destroyed(&server, "fill");
}

#[test]
fn a_waiting_vm_and_its_queued_operations_outlive_a_restart() {
    let Some((server, guests)) = start(TestServer::builder().user("bob", false), |_| {}) else {
        return;
    };
    fill_node01(&server, "big");
    // Nothing is handed to QEMU at the restart (an in-process restart leaves the old
    // server's operations running beside the new one's): only what waits.
    crate::vms::wait_substate(&server, "big", "running");
    let (setup, migrate) = a_waiting_vm_with_a_queued_migration(&server);

    let server = server.restart();
    let vm = server.get("/rest/vms/later").json();
    assert_eq!(vm["substate"], "waiting", "{vm}");
    assert_eq!(available_processors(&server, "node01"), 0);
    for id in [&setup, &migrate] {
        let action = pending_action(&server, Auth::User, id);
        assert_eq!(action["pendingActionState"], "PENDING", "{action}");
    }
    job_id(&server.send("DELETE", "/rest/vms/big", Auth::Admin));
    eventually("later is made and migrated after the restart", || {
        let vm = server.get("/rest/vms/later").json();
        vm["substate"] == "running" && vm["node"]["id"] == "node02"
    });
    assert_eq!(job(&server, &migrate)["completionCode"], 0);
    job_id(&server.send("DELETE", "/rest/vms/later", Auth::User));
    destroyed(&server, "later");
    destroyed(&server, "big");
    drop(guests);
}
