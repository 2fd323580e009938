//! Reservations and their ACL rules over HTTP: the record, the refusals, and the
//! scheduler keeping jobs the ACL does not admit off reserved nodes.

use drover_sched::node::NodeConfig;
use drover_testkit::{Auth, TestServer, scratch_dir, script};
use serde_json::{Value, json};

fn server() -> TestServer {
    TestServer::builder()
        .config(|c| {
            c.nodes = vec![NodeConfig::new("n1", 1), NodeConfig::new("n2", 1)];
            c.scheduler.kill_grace_seconds = 1;
        })
        .start()
}

fn create(server: &TestServer, body: Value) -> String {
    let reply = server.send_json("POST", "/rest/reservations", &body);
    assert_eq!(reply.status, 201, "{}", reply.body);
    let id = reply.json()["id"].as_str().unwrap().to_string();
    assert!(
        reply
            .header("location")
            .unwrap()
            .ends_with(&format!("/rest/reservations/{id}"))
    );
    id
}

fn submit(server: &TestServer, command: &str, account: &str, reservation: Option<&str>) -> String {
    // Wall times let backfill plan; a job without one is taken to run for ever.
    let mut body = json!({"commandFile": command, "credentials": {"account": account},
                          "duration": 600});
    if let Some(r) = reservation {
        body["reservationRequested"] = json!({"name": r});
    }
    drover_testkit::submit_v2(server, body)
}

fn job(server: &TestServer, name: &str) -> Value {
    server
        .get(&format!("/rest/jobs/{name}?api-version=2"))
        .json()
}

fn node_of(server: &TestServer, name: &str) -> Value {
    job(server, name)["masterNode"]["name"].clone()
}

fn wait_running(server: &TestServer, name: &str) -> Value {
    drover_testkit::wait_state_v2(server, name, "Running")
}

#[test]
fn the_acl_keeps_other_jobs_off_reserved_nodes_and_lets_admitted_ones_in() {
    let server = server();
    let dir = scratch_dir();
    let sleep = script(dir.path(), "sleep.sh", "sleep 30");
    let reservation = create(
        &server,
        json!({"hostListExpression": "n1", "duration": 3600,
               "aclRules": [{"type": "ACCOUNT", "value": "physics"}]}),
    );
    // Not admitted: n2 only; the next one waits although n1 is idle.
    let outsider = submit(&server, &sleep, "chem", None);
    wait_running(&server, &outsider);
    assert_eq!(node_of(&server, &outsider), "n2");
    let waiting = submit(&server, &sleep, "chem", None);
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_eq!(job(&server, &waiting)["states"]["state"], "Idle");
    // Admitted: it gets n1.
    let member = submit(&server, &sleep, "physics", None);
    wait_running(&server, &member);
    assert_eq!(node_of(&server, &member), "n1");
    let record = server
        .get(&format!("/rest/reservations/{reservation}"))
        .json();
    assert_eq!(record["isActive"], true);
    assert!(
        record["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("ISACTIVE"))
    );

    // Released: once n1 is free again, the waiting job may use it.
    let cancelled = server.call("DELETE", &format!("/rest/jobs/{member}"), Auth::Admin, None);
    assert_eq!(cancelled.status, 200);
    assert_eq!(
        server
            .call(
                "DELETE",
                &format!("/rest/reservations/{reservation}"),
                Auth::Admin,
                None
            )
            .status,
        200
    );
    wait_running(&server, &waiting);
    assert_eq!(node_of(&server, &waiting), "n1");
    assert_eq!(
        server
            .get(&format!("/rest/reservations/{reservation}"))
            .status,
        404
    );
    for id in [&outsider, &waiting] {
        server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
    }
}

#[test]
fn a_job_asking_for_a_reservation_runs_only_in_it_and_must_name_one_that_exists() {
    let server = server();
    let dir = scratch_dir();
    let sleep = script(dir.path(), "sleep.sh", "sleep 30");
    let reservation = create(
        &server,
        json!({"hostListExpression": "n2", "duration": 3600,
               "aclRules": [{"type": "ACCOUNT", "value": "physics"}]}),
    );
    let inside = submit(&server, &sleep, "physics", Some(&reservation));
    wait_running(&server, &inside);
    assert_eq!(
        node_of(&server, &inside),
        "n2",
        "not n1, although n1 is free"
    );
    let second = submit(&server, &sleep, "physics", Some(&reservation));
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_eq!(
        job(&server, &second)["states"]["state"],
        "Idle",
        "its one node is busy"
    );
    let record = server
        .get(&format!("/rest/reservations/{reservation}"))
        .json();
    assert_eq!(record["statistics"]["caps"], 1, "{record}");
    let refused = server.send_json(
        "POST",
        "/rest/jobs?api-version=2",
        &json!({"commandFile": "/bin/true", "reservationRequested": {"name": "res.999"}}),
    );
    assert_eq!(refused.status, 400);
    assert!(
        refused.messages().contains("reservationRequested"),
        "{}",
        refused.body
    );
    for id in [&inside, &second] {
        server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
    }
}

#[test]
fn the_record_variables_and_acl_rules() {
    let server = server();
    let id = create(
        &server,
        json!({
            "duration": "2:00:00",
            "requirements": {"taskCount": 1},
            "idPrefix": "maint",
            "owner": {"name": "ann", "type": "USER"},
            "flags": ["spaceflex"],
            "comments": "kernel update",
            "accountingAccount": "ops",
            "variables": {"a": "1", "b": "2"},
            "aclRules": [
                {"type": "USER", "value": "bob", "affinity": "NEUTRAL", "comparator": "LEXIGRAPHIC_EQUAL"},
                {"type": "DURATION", "value": "3600", "comparator": "LESS_THAN_OR_EQUAL"}
            ]
        }),
    );
    assert!(id.starts_with("maint."), "{id}");
    let r = server.get(&format!("/rest/reservations/{id}")).json();
    assert_eq!(r["duration"], 7200);
    assert_eq!(r["allocatedProcessorCount"], 1);
    assert_eq!(r["allocatedNodeCount"], 1);
    assert_eq!(r["allocatedNodes"], json!([{"id": "n1"}]));
    assert_eq!(r["owner"], json!({"name": "ann", "type": "USER"}));
    assert_eq!(r["comments"], "kernel update");
    assert_eq!(r["accountingAccount"], "ops");
    assert_eq!(r["resources"]["PROCS"], 1);
    assert!(r["flags"].as_array().unwrap().contains(&json!("SPACEFLEX")));
    assert_eq!(r["aclRules"].as_array().unwrap().len(), 2);
    for key in [
        "startDate",
        "endDate",
        "creationDate",
        "expireDate",
        "statistics",
        "requirements",
    ] {
        assert!(!r[key].is_null(), "{key} in {r}");
    }

    // Variables: change-mode is required; add, remove, set.
    let path = format!("/rest/reservations/{id}");
    let missing = server.send_json("PUT", &path, &json!({"variables": {"c": "3"}}));
    assert_eq!(missing.status, 400);
    assert!(missing.messages().contains("change-mode"));
    let wrong = server.send_json(
        "PUT",
        &format!("{path}?change-mode=merge"),
        &json!({"variables": {}}),
    );
    assert_eq!(wrong.status, 400);
    let add = server.send_json(
        "PUT",
        &format!("{path}?change-mode=add"),
        &json!({"variables": {"c": "3"}}),
    );
    assert_eq!(add.status, 200, "{}", add.body);
    let variables = |s: &TestServer| s.get(&path).json()["variables"].clone();
    assert_eq!(variables(&server), json!({"a": "1", "b": "2", "c": "3"}));
    server.send_json(
        "PUT",
        &format!("{path}?change-mode=remove"),
        &json!({"variables": {"a": ""}}),
    );
    assert_eq!(variables(&server), json!({"b": "2", "c": "3"}));
    server.send_json(
        "PUT",
        &format!("{path}?change-mode=set"),
        &json!({"variables": {"z": "9"}}),
    );
    assert_eq!(variables(&server), json!({"z": "9"}));
    let other = server.send_json(
        "PUT",
        &format!("{path}?change-mode=set"),
        &json!({"duration": 5}),
    );
    assert_eq!(other.status, 400);
    assert!(other.messages().contains("duration"), "{}", other.body);

    // ACL rules: a rule with the same type and value is overwritten; delete by type:value.
    let rules = format!("{path}/acl-rules");
    let put = server.send_json(
        "PUT",
        &rules,
        &json!({"aclRules": [{"type": "USER", "value": "bob", "affinity": "POSITIVE"},
                             {"type": "GROUP", "value": "staff"}]}),
    );
    assert_eq!(put.status, 200, "{}", put.body);
    let acl = server.get(&path).json()["aclRules"].clone();
    assert_eq!(acl.as_array().unwrap().len(), 3, "{acl}");
    assert!(acl.as_array().unwrap().contains(&json!(
        {"type": "USER", "value": "bob", "affinity": "POSITIVE", "comparator": null}
    )));
    let gone = server.call("DELETE", &format!("{rules}/GROUP:staff"), Auth::Admin, None);
    assert_eq!(gone.status, 200, "{}", gone.body);
    assert_eq!(
        server.get(&path).json()["aclRules"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        server
            .call("DELETE", &format!("{rules}/GROUP:staff"), Auth::Admin, None)
            .status,
        404
    );
    assert_eq!(
        server
            .call("DELETE", &format!("{rules}/nocolon"), Auth::Admin, None)
            .status,
        400
    );
    for bad in [
        json!({"aclRules": []}),
        json!({"aclRules": [{"type": "PLANET", "value": "mars"}]}),
        json!({"aclRules": [{"type": "USER"}]}),
        json!({"aclRules": [{"type": "USER", "value": "x", "affinity": "SIDEWAYS"}]}),
    ] {
        let reply = server.send_json("PUT", &rules, &bad);
        assert_eq!(reply.status, 400, "{bad}: {}", reply.body);
    }
    assert_eq!(
        server.get(&path).json()["aclRules"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "unchanged"
    );

    // Only one's own: another user sees none of them and cannot change them.
    let theirs = server.get_as(Auth::User, "/rest/reservations").json();
    assert_eq!(theirs["totalCount"], 0, "{theirs}");
    assert_eq!(server.get_as(Auth::User, &path).status, 404);
    assert_eq!(server.get("/rest/reservations").json()["totalCount"], 1);
    assert_eq!(server.call("DELETE", &path, Auth::User, None).status, 404);
    let listed = server
        .get("/rest/reservations?query=%7B%22owner.name%22%3A%22ann%22%7D&fields=id")
        .json();
    assert_eq!(listed["results"], json!([{"id": id}]));
}

#[test]
fn dedicated_resources_conflict_and_bad_creations_are_refused() {
    let server = server();
    let first = create(
        &server,
        json!({"hostListExpression": "n1", "duration": 600, "flags": ["DEDICATEDRESOURCE"]}),
    );
    let count = || server.get("/rest/reservations").json()["totalCount"].clone();
    let clash = server.send_json(
        "POST",
        "/rest/reservations",
        &json!({"hostListExpression": "n1,n2", "duration": 600, "flags": ["DEDICATEDRESOURCE"]}),
    );
    assert_eq!(clash.status, 409, "{}", clash.body);
    assert!(clash.messages().contains(&first), "{}", clash.body);
    // Another node, or another window, is fine.
    create(
        &server,
        json!({"hostListExpression": "n2", "duration": 600, "flags": ["DEDICATEDRESOURCE"]}),
    );
    assert_eq!(count(), 2);
    for (body, expected) in [
        (json!({"hostListExpression": "n1"}), "duration or endDate"),
        (
            json!({"hostListExpression": "n9", "duration": 60}),
            "no node 'n9'",
        ),
        (json!({"duration": -5}), "duration"),
        (json!({"duration": "soon"}), "duration"),
        (
            json!({"duration": 60, "aclRules": [{"type": "PLANET", "value": "x"}]}),
            "type",
        ),
        (json!({"duration": 60, "idPrefix": "a b"}), "idPrefix"),
        (
            json!({"duration": 60, "startDate": "tomorrow"}),
            "startDate",
        ),
        (
            json!({"startDate": "2030-01-02 00:00:00 UTC", "endDate": "2030-01-01 00:00:00 UTC"}),
            "endDate",
        ),
        (
            json!({"duration": 60, "requirements": {"taskCount": 5}}),
            "requirements",
        ),
        (
            json!({"duration": 60, "owner": {"type": "USER"}}),
            "owner.name",
        ),
    ] {
        let reply = server.send_json("POST", "/rest/reservations", &body);
        assert_eq!(reply.status / 100, 4, "{body}: {}", reply.body);
        assert!(
            reply.messages().contains(expected),
            "{body}: {}",
            reply.body
        );
    }
    assert_eq!(count(), 2, "nothing was created");
}

#[test]
fn reservations_survive_a_restart() {
    let server = server();
    let id = create(
        &server,
        json!({"hostListExpression": "n2", "duration": 3600, "variables": {"k": "v"},
               "aclRules": [{"type": "USER", "value": "bob"}]}),
    );
    // Statistics count elapsed time: everything else is the same after the restart.
    let without_statistics = |server: &TestServer| {
        let mut record = server.get(&format!("/rest/reservations/{id}")).json();
        record.as_object_mut().unwrap().remove("statistics");
        record
    };
    let before = without_statistics(&server);
    let server = server.restart();
    assert_eq!(without_statistics(&server), before);
    let next = create(&server, json!({"duration": 60}));
    assert_ne!(next, id, "ids are not reused");
}

#[test]
fn standing_reservations_are_configured_recur_and_are_read_only() {
    use drover_sched::reservation::{StandingReservation, StandingRule};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // Began a minute ago (today, or yesterday just after midnight), lasts two hours.
    let minute = (now.div_euclid(60) - 1).rem_euclid(24 * 60);
    let server = TestServer::builder()
        .config(|c| {
            c.nodes = vec![NodeConfig::new("n1", 1), NodeConfig::new("n2", 1)];
            c.standing_reservations = vec![StandingReservation {
                id: "nightly".into(),
                hosts: vec!["n1".into()],
                start: format!("{:02}:{:02}", minute / 60, minute % 60),
                duration: 7200,
                days: vec![],
                acl: vec![StandingRule {
                    kind: "ACCOUNT".into(),
                    value: "ops".into(),
                    affinity: None,
                    comparator: None,
                }],
                flags: vec![],
            }];
        })
        .start();
    let r = server.get("/rest/reservations/nightly").json();
    assert_eq!(r["isActive"], true, "{r}");
    assert_eq!(r["standing"], true);
    assert_eq!(r["duration"], 7200);
    assert_eq!(r["aclRules"][0]["type"], "ACCOUNT");
    for (method, path, body) in [
        (
            "PUT",
            "/rest/reservations/nightly/acl-rules",
            json!({"aclRules": [{"type": "USER", "value": "x"}]}),
        ),
        (
            "PUT",
            "/rest/reservations/nightly?change-mode=set",
            json!({"variables": {}}),
        ),
    ] {
        let reply = server.send_json(method, path, &body);
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        assert!(reply.messages().contains("standing"), "{}", reply.body);
    }
    for path in [
        "/rest/reservations/nightly/acl-rules/ACCOUNT:ops",
        "/rest/reservations/nightly",
    ] {
        let reply = server.call("DELETE", path, Auth::Admin, None);
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
    }
    // It holds n1 like any reservation.
    let dir = scratch_dir();
    let sleep = script(dir.path(), "sleep.sh", "sleep 30");
    let job = submit(&server, &sleep, "chem", None);
    wait_running(&server, &job);
    assert_eq!(node_of(&server, &job), "n2");
    server.call("DELETE", &format!("/rest/jobs/{job}"), Auth::Admin, None);
}

#[test]
fn affinity_steers_admitted_jobs_toward_or_away_from_reserved_nodes() {
    let server = TestServer::builder()
        .config(|c| {
            c.nodes = vec![
                NodeConfig::new("n1", 1),
                NodeConfig::new("n2", 1),
                NodeConfig::new("n3", 1),
            ];
            c.scheduler.kill_grace_seconds = 1;
        })
        .start();
    let dir = scratch_dir();
    let sleep = script(dir.path(), "sleep.sh", "sleep 30");
    // n2 for physics (preferred), n1 for chem (admitted but avoided).
    create(
        &server,
        json!({"hostListExpression": "n2", "duration": 3600,
               "aclRules": [{"type": "ACCOUNT", "value": "physics", "affinity": "POSITIVE"}]}),
    );
    create(
        &server,
        json!({"hostListExpression": "n1", "duration": 3600,
               "aclRules": [{"type": "ACCOUNT", "value": "chem", "affinity": "NEGATIVE"}]}),
    );
    let physics = submit(&server, &sleep, "physics", None);
    wait_running(&server, &physics);
    assert_eq!(
        node_of(&server, &physics),
        "n2",
        "its reservation's node first"
    );
    let chem = submit(&server, &sleep, "chem", None);
    wait_running(&server, &chem);
    assert_eq!(node_of(&server, &chem), "n3", "its reservation's node last");
    for id in [&physics, &chem] {
        server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
    }
}
