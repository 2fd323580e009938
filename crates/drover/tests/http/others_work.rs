//! Another user's jobs and VMs are not a caller's to know of (their reads are 404s), also
//! where a node lists what runs on it and where a VM id is taken (issue #53, item 9).

use drover_testkit::{Auth, PASSWORD, Reply, TestServer, submit_as, submitted, wait_state_v2};
use serde_json::{Value, json};

fn bob() -> Auth {
    Auth::Basic("bob".into(), PASSWORD.into())
}

fn send(server: &TestServer, method: &str, path: &str, auth: Auth, body: &Value) -> Reply {
    let bytes = body.to_string().into_bytes();
    server.call(method, path, auth, Some(("application/json", bytes)))
}

fn ids(node: &Value, field: &str) -> Vec<String> {
    node[field]
        .as_array()
        .unwrap_or_else(|| panic!("no {field} in {node}"))
        .iter()
        .map(|item| item["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_node_shows_each_caller_only_their_own_jobs_and_vms() {
    let (server, _site) = crate::vms::with_site_commands(|_| {});
    let node = server.get("/rest/nodes").json()["results"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/rest/nodes/{node}");
    let alices = submitted(&submit_as(
        &server,
        Auth::User,
        &json!({"commandFile": "/bin/sleep", "commandLineArguments": "60"}),
    ));
    wait_state_v2(&server, &alices, "Running");
    let created = send(&server, "POST", "/rest/vms", bob(), &json!({"id": "bobvm"}));
    assert_eq!(created.status, 202, "{}", created.body);
    crate::vms::wait_substate(&server, "bobvm", "running");
    // The administrator sees both on the node.
    let seen = server.get(&path).json();
    assert!(ids(&seen, "jobs").contains(&alices), "{seen}");
    assert!(
        ids(&seen, "virtualMachines").contains(&"bobvm".into()),
        "{seen}"
    );
    // Alice sees her job and not bob's VM, in the node and in the list of nodes.
    let hers = server.get_as(Auth::User, &path).json();
    assert_eq!(ids(&hers, "jobs"), std::slice::from_ref(&alices), "{hers}");
    assert!(ids(&hers, "virtualMachines").is_empty(), "{hers}");
    let listed = server.get_as(Auth::User, "/rest/nodes").json();
    assert!(!listed.to_string().contains("bobvm"), "{listed}");
    // Bob sees his VM, not her job.
    let his = server.get_as(bob(), &path).json();
    assert!(ids(&his, "jobs").is_empty(), "{his}");
    assert!(
        ids(&his, "virtualMachines").contains(&"bobvm".into()),
        "{his}"
    );
    // Taking bob's VM id tells alice it cannot be had, not that bob's VM exists.
    let taken = send(
        &server,
        "POST",
        "/rest/vms",
        Auth::User,
        &json!({"id": "bobvm"}),
    );
    taken.assert_refused(409, "not available", &"bob's VM id");
    assert!(!taken.body.contains("exists"), "{}", taken.body);
    let own = send(&server, "POST", "/rest/vms", bob(), &json!({"id": "bobvm"}));
    own.assert_refused(409, "exists already", &"his own VM id");
    server.send("DELETE", &format!("/rest/jobs/{alices}"), Auth::Admin);
}
