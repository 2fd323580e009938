//! Virtual containers over HTTP: the record, change-modes, ACL rules, jobs joining at
//! submission, and the HOLDJOBS and DESTROYWHENEMPTY flags.

use drover_testkit::{Auth, TestServer, scratch_dir, script};
use serde_json::{Value, json};

fn create(server: &TestServer, path: &str, body: Value) -> String {
    let reply = server.send_json("POST", path, &body);
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.json()["id"].as_str().unwrap().to_string()
}

fn vc(server: &TestServer, id: &str) -> Value {
    server.get(&format!("/rest/vcs/{id}")).json()
}

fn put(server: &TestServer, id: &str, mode: &str, body: Value) -> drover_testkit::Reply {
    server.send_json("PUT", &format!("/rest/vcs/{id}?change-mode={mode}"), &body)
}

fn submit(server: &TestServer, command: &str, container: &str) -> String {
    drover_testkit::submit_v2(
        server,
        json!({"commandFile": command, "virtualContainers": [{"name": container}]}),
    )
}

fn state(server: &TestServer, job: &str) -> Value {
    server
        .get(&format!("/rest/jobs/{job}?api-version=2"))
        .json()["states"]["state"]
        .clone()
}

#[test]
fn the_record_members_flags_and_acl_rules() {
    let server = TestServer::start();
    let id = create(
        &server,
        "/rest/vcs",
        json!({"description": "project x", "owner": {"name": "ann", "type": "USER"}}),
    );
    let record = vc(&server, &id);
    assert_eq!(record["description"], "project x");
    assert_eq!(record["owner"], json!({"name": "ann", "type": "USER"}));
    assert_eq!(record["creator"], "admin", "proxying is off: whoever asked");
    assert!(record["createDate"].is_string());
    for key in [
        "jobs",
        "nodes",
        "reservations",
        "virtualContainers",
        "virtualMachines",
        "aclRules",
    ] {
        assert_eq!(record[key], json!([]), "{key}");
    }

    // change-mode is required; add and remove members; a wrong one changes nothing.
    let missing = server.send_json("PUT", &format!("/rest/vcs/{id}"), &json!({"nodes": []}));
    assert_eq!(missing.status, 400);
    assert!(missing.messages().contains("change-mode"));
    let node = server.get("/rest/nodes").json()["results"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let job = submit(&server, "/bin/true", &id);
    let other = create(&server, "/rest/vcs", json!({"description": "inner"}));
    let reservation = create(&server, "/rest/reservations", json!({"duration": 600}));
    let add = put(
        &server,
        &id,
        "add",
        json!({"nodes": [{"id": node}], "reservations": [{"id": reservation}],
               "virtualContainers": [{"id": other}]}),
    );
    assert_eq!(add.status, 200, "{}", add.body);
    let record = vc(&server, &id);
    assert_eq!(record["jobs"], json!([{"id": job}]), "joined at submission");
    assert_eq!(record["nodes"], json!([{"id": node}]));
    assert_eq!(record["reservations"], json!([{"id": reservation}]));
    assert_eq!(record["virtualContainers"], json!([{"id": other}]));
    for (body, expected) in [
        (json!({"jobs": [{"id": "Drover.999"}]}), "no job"),
        (json!({"nodes": [{"id": "nowhere"}]}), "no node"),
        (json!({"virtualContainers": [{"id": id}]}), "itself"),
        (
            json!({"virtualMachines": [{"id": "vm1"}]}),
            "no virtual machine",
        ),
        (json!({"description": "x"}), "description"),
    ] {
        let reply = put(&server, &id, "add", body.clone());
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert!(
            reply.messages().contains(expected),
            "{body}: {}",
            reply.body
        );
    }
    let not_there = put(
        &server,
        &id,
        "remove",
        json!({"nodes": [{"id": "nowhere"}]}),
    );
    assert_eq!(not_there.status, 400);
    assert_eq!(
        vc(&server, &id)["nodes"],
        json!([{"id": node}]),
        "unchanged"
    );
    assert_eq!(
        put(&server, &id, "remove", json!({"nodes": [{"id": node}]})).status,
        200
    );
    assert_eq!(vc(&server, &id)["nodes"], json!([]));

    // set: the container's own attributes; the creator never changes.
    let set = put(
        &server,
        &id,
        "set",
        json!({"description": "renamed", "flags": ["holdjobs"], "owner": {"name": "bob"},
               "variables": {"k": "v"}}),
    );
    assert_eq!(set.status, 200, "{}", set.body);
    let record = vc(&server, &id);
    assert_eq!(record["description"], "renamed");
    assert_eq!(record["flags"], json!(["HOLDJOBS"]));
    assert_eq!(record["owner"]["name"], "bob");
    assert_eq!(record["variables"], json!({"k": "v"}));
    assert_eq!(record["creator"], "admin");
    assert_eq!(put(&server, &id, "set", json!({"jobs": []})).status, 400);

    // ACL rules: affinity and comparator are ignored.
    let rules = format!("/rest/vcs/{id}/acl-rules");
    let written = server.send_json(
        "PUT",
        &rules,
        &json!({"aclRules": [{"type": "USER", "value": "cy", "affinity": "POSITIVE",
                              "comparator": "LESS_THAN"}]}),
    );
    assert_eq!(written.status, 200, "{}", written.body);
    assert_eq!(
        vc(&server, &id)["aclRules"],
        json!([{"type": "USER", "value": "cy", "affinity": null, "comparator": null}])
    );
    assert_eq!(
        server
            .call("DELETE", &format!("{rules}/USER:cy"), Auth::Admin, None)
            .status,
        200
    );
    assert_eq!(
        server
            .call("DELETE", &format!("{rules}/USER:cy"), Auth::Admin, None)
            .status,
        404
    );

    // Others see none of it; an administrator sees all; deletion.
    assert_eq!(
        server.get_as(Auth::User, "/rest/vcs").json()["totalCount"],
        0
    );
    assert_eq!(
        server.get_as(Auth::User, &format!("/rest/vcs/{id}")).status,
        404
    );
    assert_eq!(server.get("/rest/vcs").json()["totalCount"], 2);
    assert_eq!(
        server
            .call("DELETE", &format!("/rest/vcs/{other}"), Auth::Admin, None)
            .status,
        200
    );
    assert_eq!(
        vc(&server, &id)["virtualContainers"],
        json!([]),
        "no longer a member"
    );
    assert_eq!(server.get(&format!("/rest/vcs/{other}")).status, 404);

    let refused = server.send_json(
        "POST",
        "/rest/jobs?api-version=2",
        &json!({"commandFile": "/bin/true", "virtualContainers": [{"name": "vc.999"}]}),
    );
    assert_eq!(refused.status, 400);
    assert!(refused.messages().contains("vc.999"), "{}", refused.body);
}

#[test]
fn holdjobs_keeps_jobs_queued_and_destroywhenempty_removes_the_container() {
    let server = TestServer::start();
    let dir = scratch_dir();
    let quick = script(dir.path(), "quick.sh", "sleep 0.3");
    let held = create(&server, "/rest/vcs", json!({"description": "held"}));
    assert_eq!(
        put(&server, &held, "set", json!({"flags": ["HOLDJOBS"]})).status,
        200
    );
    let job = submit(&server, &quick, &held);
    std::thread::sleep(std::time::Duration::from_millis(800));
    assert_eq!(state(&server, &job), "Idle", "its container holds it");
    assert_eq!(
        put(
            &server,
            &held,
            "set",
            json!({"flags": ["DESTROYWHENEMPTY"]})
        )
        .status,
        200
    );
    server.wait_for(
        &format!("/rest/jobs/{job}?api-version=2"),
        "it completes",
        |j| j["states"]["state"] == "Completed",
    );
    // Its only job ended: the container went.
    for _ in 0..100 {
        if server.get(&format!("/rest/vcs/{held}")).status == 404 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(server.get(&format!("/rest/vcs/{held}")).status, 404);

    // Removing the last member empties it too.
    let empty = create(&server, "/rest/vcs", json!({}));
    let node = server.get("/rest/nodes").json()["results"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    put(&server, &empty, "add", json!({"nodes": [node.clone()]}));
    put(
        &server,
        &empty,
        "set",
        json!({"flags": ["DESTROYWHENEMPTY"]}),
    );
    assert_eq!(
        server.get(&format!("/rest/vcs/{empty}")).status,
        200,
        "a node is in it"
    );
    let removed = put(&server, &empty, "remove", json!({"nodes": [node]}));
    assert_eq!(removed.status, 200);
    assert!(
        removed.messages().contains("DESTROYWHENEMPTY"),
        "{}",
        removed.body
    );
    assert_eq!(server.get(&format!("/rest/vcs/{empty}")).status, 404);
}

#[test]
fn the_creator_follows_the_proxy_rules_and_containers_survive_a_restart() {
    let server = TestServer::builder()
        .config(|c| {
            c.scheduler.enable_proxy = true;
            c.scheduler.proxy_users = vec!["admin".into(), drover_testkit::USER.into()];
        })
        .start();
    // Acting for bob, the administrator names ann the owner: the creator comes from
    // proxy-user, the owner from the body (spec 4.9), and the administrator's rights
    // decide what owner may be named.
    let for_ann = create(
        &server,
        "/rest/vcs?proxy-user=bob",
        json!({"owner": {"name": "ann", "type": "USER"}}),
    );
    let record = vc(&server, &for_ann);
    assert_eq!(record["creator"], "bob");
    assert_eq!(record["owner"]["name"], "ann");
    // An ordinary user who may proxy gains no right to name owners by it.
    let by_ordinary = server.send_json_as(
        drover_testkit::Auth::User,
        "POST",
        "/rest/vcs?proxy-user=bob",
        &json!({"owner": {"name": "ann"}}),
    );
    assert_eq!(by_ordinary.status, 403, "{}", by_ordinary.body);
    let proxied = create(&server, "/rest/vcs?proxy-user=bob", json!({}));
    assert_eq!(vc(&server, &proxied)["creator"], "bob");
    assert_eq!(vc(&server, &proxied)["owner"]["name"], "bob");
    let owned = create(&server, "/rest/vcs", json!({"owner": {"name": "ann"}}));
    assert_eq!(
        vc(&server, &owned)["creator"],
        "admin",
        "without proxy-user the creator is the caller, whatever owner.name says"
    );
    let before = vc(&server, &owned);
    let server = server.restart();
    assert_eq!(vc(&server, &owned), before);
    let next = create(&server, "/rest/vcs", json!({}));
    assert!(next != owned && next != proxied, "ids are not reused");
}

#[test]
fn a_deleted_containers_id_is_not_given_again_after_a_restart() {
    let server = TestServer::start();
    let first = create(&server, "/rest/vcs", json!({"description": "first"}));
    let deleted = server.call(
        "DELETE",
        &format!("/rest/vcs/{first}"),
        drover_testkit::Auth::Admin,
        None,
    );
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    let server = server.restart();
    let second = create(&server, "/rest/vcs", json!({"description": "second"}));
    assert_ne!(first, second, "a deleted container's id was given again");
    // A container another user's service or client remembers by id is never someone
    // else's: the id of what is gone answers 404.
    assert_eq!(server.get(&format!("/rest/vcs/{first}")).status, 404);
}
