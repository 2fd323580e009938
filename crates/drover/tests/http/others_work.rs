//! Another user's jobs and VMs are not a caller's to know of (their reads are 404s), also
//! where a node lists what runs on it and where a VM id is taken (issue #53, item 9).

use drover_testkit::{Auth, PASSWORD, send, submit_as, submitted, wait_state_v2};
use serde_json::{Value, json};

fn bob() -> Auth {
    drover_testkit::login_as("bob")
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
    assert_eq!(hers["taskCount"], 1, "{hers}");
    assert!(ids(&hers, "virtualMachines").is_empty(), "{hers}");
    let listed = server.get_as(Auth::User, "/rest/nodes").json();
    assert!(!listed.to_string().contains("bobvm"), "{listed}");
    // Bob sees his VM, not her job.
    let his = server.get_as(bob(), &path).json();
    assert!(ids(&his, "jobs").is_empty(), "{his}");
    assert_eq!(his["taskCount"], 0, "{his}");
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

/// With a node reserved for carol, bob's VM was placed on it and held it; a user's VMs
/// were bounded in number only, and lived for ever by default (issue #53, item 7).
#[test]
fn vms_keep_out_of_others_reservations_and_within_a_users_share() {
    let (server, _site) = crate::vms::with_site_commands(|c| {
        c.nodes = vec![
            drover_sched::node::NodeConfig::new("n1", 6),
            drover_sched::node::NodeConfig::new("n2", 4),
        ];
        c.users.push(drover_auth::User {
            name: "carol".into(),
            password_hash: drover_auth::password::hash(
                PASSWORD,
                drover_auth::password::Cost::Minimal,
            ),
            admin: false,
        });
        c.scheduler.limits.user_vm_max_processors = 5;
        c.scheduler.limits.user_vm_default_time_to_live_seconds = 3600;
    });
    let carol = || Auth::Basic("carol".into(), PASSWORD.into());
    let reserved = send(
        &server,
        "POST",
        "/rest/reservations",
        Auth::Admin,
        &json!({"hostListExpression": "n2", "duration": 86_400,
                "flags": ["DEDICATEDRESOURCE"],
                "aclRules": [{"type": "USER", "value": "carol"}]}),
    );
    assert_eq!(reserved.status, 201, "{}", reserved.body);
    let vm = |id: &str, extra: Value| {
        let mut body = json!({"id": id, "totalProcessors": 2});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    // Bob's VM for carol's node, even a short-lived one, waits there holding nothing
    // while her reservation keeps it out...
    for (n, ttl) in [json!(null), json!(60)].into_iter().enumerate() {
        let id = format!("on-n2-{n}");
        let body = vm(
            &id,
            json!({"node": {"id": "n2"}, "requestedTimeToLive": ttl}),
        );
        let waits = send(&server, "POST", "/rest/vms", bob(), &body);
        assert_eq!(waits.status, 202, "{}", waits.body);
        let seen = server.get(&format!("/rest/vms/{id}")).json();
        assert_eq!(
            seen["substate"], "waiting",
            "bob's VM on carol's node: {seen}"
        );
        let n2 = server.get("/rest/nodes/n2").json();
        assert_eq!(n2["availableProcessors"], 4, "{n2}");
        let gone = server.send("DELETE", &format!("/rest/vms/{id}"), bob());
        assert_eq!(gone.status, 202, "{}", gone.body);
    }
    // ...and one placed anywhere goes elsewhere; carol's own goes on hers.
    let anywhere = send(&server, "POST", "/rest/vms", bob(), &vm("b1", json!({})));
    assert_eq!(anywhere.status, 202, "{}", anywhere.body);
    assert_eq!(server.get("/rest/vms/b1").json()["node"]["id"], "n1");
    let hers = send(
        &server,
        "POST",
        "/rest/vms",
        carol(),
        &vm("c1", json!({"node": {"id": "n2"}})),
    );
    assert_eq!(hers.status, 202, "{}", hers.body);
    // Bob's VMs hold at most 5 processors in all: 2 + 2, then not 2 more.
    let second = send(&server, "POST", "/rest/vms", bob(), &vm("b2", json!({})));
    assert_eq!(second.status, 202, "{}", second.body);
    send(&server, "POST", "/rest/vms", bob(), &vm("b3", json!({}))).assert_refused(
        400,
        "user_vm_max_processors",
        &"bob's third VM",
    );
    // A VM that asks for no time to live gets the site's default; the administrator's
    // lives until destroyed.
    assert_eq!(
        server.get("/rest/vms/b1").json()["requestedTimeToLive"],
        3600
    );
    let admins = send(
        &server,
        "POST",
        "/rest/vms",
        Auth::Admin,
        &json!({"id": "a1"}),
    );
    assert_eq!(admins.status, 202, "{}", admins.body);
    assert!(server.get("/rest/vms/a1").json()["requestedTimeToLive"].is_null());
}
