//! Services at their edges, kept as regression tests of attacks on them: a cycle of
//! containers under `show-recursive-vc`, what gathers on a service through `PUT`, nesting
//! deeper than allowed, VM services larger than a VM request may be, a container id
//! given again after a restart, and odd requests (no 5xx).

use std::time::{Duration, Instant};

use drover_testkit::{Auth, Reply, TestServer, bob, carol, send};
use serde_json::{Value, json};

use crate::security::{BOB, CAROL};

const PATH: &str = "/rest/services";

fn server() -> TestServer {
    TestServer::builder()
        .user(BOB, false)
        .user(CAROL, false)
        .start()
}

fn item(name: &str) -> String {
    format!("{PATH}/{name}")
}

/// Creates a service as `auth`; answers the top-level name.
fn create(server: &TestServer, auth: Auth, body: &Value) -> String {
    let reply = send(server, "POST", PATH, auth, body);
    assert_eq!(reply.status, 201, "{body}: {}", reply.body);
    reply.json()["name"].as_str().unwrap().to_string()
}

/// Waits (60 s at most) until the service `name` is in `phase`.
fn wait_phase(server: &TestServer, name: &str, phase: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let reply = server.get(&item(name));
        if reply.status == 200 && reply.json()["phase"] == phase {
            return reply.json();
        }
        assert!(
            Instant::now() < deadline,
            "{name} never became {phase}: {} {}",
            reply.status,
            reply.body
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Creates a virtual container as `auth`; answers its id.
fn container(server: &TestServer, auth: Auth, description: &str) -> String {
    let reply = send(
        server,
        "POST",
        "/rest/vcs",
        auth,
        &json!({"description": description}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.json()["id"].as_str().unwrap().to_string()
}

fn add_container(server: &TestServer, auth: Auth, to: &str, member: &str) {
    let reply = send(
        server,
        "PUT",
        &format!("/rest/vcs/{to}?change-mode=add"),
        auth,
        &json!({"virtualContainers": [{"id": member}]}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// An error answer is a 4xx with messages.
fn assert_client_error(reply: &Reply, case: &dyn std::fmt::Display) {
    assert!(
        (400..500).contains(&reply.status),
        "{case}: {} {}",
        reply.status,
        reply.body
    );
    assert!(
        reply.json()["messages"]
            .as_array()
            .is_some_and(|m| !m.is_empty()),
        "{case}: {}",
        reply.body
    );
}

/// bob's containers may contain each other (only containing itself is refused), and
/// bob puts one of such a ring into his service's container. `show-recursive-vc` went
/// down every member to depth 8 each time it met it: with 4 containers each holding
/// the 3 others, 3^9 renderings (each cloning every container), a body of megabytes;
/// with 10, billions: one GET held the server. Each container is shown once now.
#[test]
fn a_ring_of_containers_is_shown_once_each_with_show_recursive_vc() {
    let server = server();
    let top = create(
        &server,
        bob(),
        &json!({"data": [{"name": "ring", "type": "container"}]}),
    );
    let up = wait_phase(&server, &top, "up");
    let vc = up["attributes"]["sched"]["vc"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let ring: Vec<String> = (0..4)
        .map(|i| container(&server, bob(), &format!("ring {i}")))
        .collect();
    for a in &ring {
        for b in &ring {
            if a != b {
                add_container(&server, bob(), a, b);
            }
        }
    }
    add_container(&server, bob(), &vc, &ring[0]);
    let started = Instant::now();
    let reply = server.get_as(bob(), &format!("{}?show-recursive-vc=true", item(&top)));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply.body.len() < 64 * 1024,
        "{} bytes in {:?}",
        reply.body.len(),
        started.elapsed()
    );
    // Every container of the ring is there, in full, once.
    let text = reply.body.clone();
    for id in &ring {
        assert!(text.contains(&format!("\"{id}\"")), "{id}: {text}");
    }
    let listed = server.get_as(bob(), &format!("{PATH}?show-recursive-vc=true"));
    assert_eq!(listed.status, 200);
    assert!(listed.body.len() < 64 * 1024, "{} bytes", listed.body.len());
}

/// Each PUT may carry at most max_submission_bytes, but each adds its keys to the
/// service's attributes: a loop of PUTs grew one record without bound (every
/// controller pass and every list reads all of them). What gathers on a service of an
/// ordinary user now stays within what one request may carry, as on a VM.
#[test]
fn what_puts_gather_on_a_service_stays_within_one_request() {
    let server = server();
    let top = create(
        &server,
        bob(),
        &json!({"data": [{"name": "grow", "type": "container"}]}),
    );
    let chunk = "x".repeat(40 * 1024);
    let first = send(
        &server,
        "PUT",
        &item(&top),
        bob(),
        &json!({"attributes": {"a": chunk}}),
    );
    assert_eq!(first.status, 200, "{}", first.body);
    let second = send(
        &server,
        "PUT",
        &item(&top),
        bob(),
        &json!({"attributes": {"b": chunk}}),
    );
    assert_eq!(second.status, 400, "a second 40 KiB key: {}", second.status);
    assert!(
        second.messages().contains("max_submission_bytes"),
        "{}",
        second.messages()
    );
    let kept = server.get(&item(&top)).json();
    assert!(kept["attributes"].get("b").is_none(), "nothing changed");
    // Replacing a key, or removing one, is still possible.
    let replaced = send(
        &server,
        "PUT",
        &item(&top),
        bob(),
        &json!({"attributes": {"a": null, "b": chunk}}),
    );
    assert_eq!(replaced.status, 200, "{}", replaced.body);
    // An administrator is not bound.
    let admin = send(
        &server,
        "PUT",
        &item(&top),
        Auth::Admin,
        &json!({"attributes": {"c": chunk}}),
    );
    assert_eq!(admin.status, 200, "{}", admin.body);
}

/// `MAX_DEPTH` bounded only templates that include templates: entries that include
/// each other (includedServices) nested as deep as MAX_SERVICES, each level a virtual
/// container joined to the one above. The finished tree is bounded now, whatever made it.
#[test]
fn entries_nest_no_deeper_than_templates_may() {
    let server = server();
    let chain = |depth: usize| -> Value {
        let entries: Vec<Value> = (0..depth)
            .map(|i| {
                let mut entry = json!({"name": format!("level{i}"), "type": "container"});
                if i + 1 < depth {
                    entry["includedServices"] = json!([format!("level{}", i + 1)]);
                }
                entry
            })
            .collect();
        json!({"data": entries})
    };
    let deep = chain(20);
    send(&server, "POST", PATH, bob(), &deep).assert_refused(400, "deeper", &"20 levels");
    assert_eq!(server.get_as(bob(), PATH).json()["totalCount"], 0);
    // As deep as a template may nest is accepted.
    create(&server, bob(), &chain(9));
}

/// A VM request of an ordinary user is bounded (totalProcessors 4096, totalMemory 2^30
/// MB, totalDisk 2^40 MB); a `vm` service's resources went to the engine as they were
/// given (saturated to u32/u64::MAX), past those bounds: a node whose memory or disk is
/// not known takes such a VM. Refused at creation now, with the field named.
#[test]
fn a_vm_service_asks_no_more_than_a_vm_request_may() {
    let server = crate::vms::without_provisioner();
    for (key, value) in [
        ("procs", json!(1e9)),
        ("mem", json!(1e18)),
        ("disk", json!(1e300)),
    ] {
        let body = json!({"data": [{"name": "big", "type": "vm",
            "attributes": {"sched": {"job": {"image": "guest", "template": "genericVM",
                                             "resources": {key: value}}}}}]});
        send(&server, "POST", PATH, Auth::User, &body).assert_refused(400, key, &body);
    }
    assert_eq!(server.get(PATH).json()["totalCount"], 0);
}

/// Container ids go on from the highest one there is: after a restart, the id of a
/// deleted container is given again. bob's service kept the id of its container, which
/// bob deleted himself; carol's next container got that id, and `show-vc` on bob's
/// service showed carol's container (its description, members and ACL rules). A
/// service shows only a container of its user.
#[test]
fn a_container_id_given_again_shows_nothing_of_another_user() {
    let server = server();
    let top = create(
        &server,
        bob(),
        &json!({"data": [{"name": "stale", "type": "container"}]}),
    );
    let up = wait_phase(&server, &top, "up");
    let vc = up["attributes"]["sched"]["vc"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        server
            .call("DELETE", &format!("/rest/vcs/{vc}"), bob(), None)
            .status,
        200
    );
    let server = server.restart();
    let theirs = container(&server, carol(), "carol's secret project");
    let shown = server.get_as(bob(), &format!("{}?show-recursive-vc=true", item(&top)));
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert!(
        !shown.body.contains("secret"),
        "{theirs} is carol's: {}",
        shown.body
    );
    // And bob's service still goes when deleted (it does not wait on carol's container).
    assert_eq!(server.call("DELETE", &item(&top), bob(), None).status, 200);
    crate::services::wait_gone(&server, &top);
    assert_eq!(server.get(&format!("/rest/vcs/{theirs}")).status, 200);
}

/// Odd and careless requests answer a 4xx with messages, never a 5xx.
#[test]
fn odd_requests_answer_4xx() {
    let server = server();
    let entry = json!({"name": "x", "type": "container"});
    let mut deep = json!(1);
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let creations = [
        json!(null),
        json!([]),
        json!("text"),
        json!({}),
        json!({"data": null}),
        json!({"data": {}}),
        json!({"data": []}),
        json!({"data": [1]}),
        json!({"data": [null]}),
        json!({"data": [{}]}),
        json!({"data": [{"name": "", "type": "container"}]}),
        json!({"data": [{"name": "a:b", "type": "container"}]}),
        json!({"data": [{"name": "x".repeat(10_000), "type": "container"}]}),
        json!({"data": [{"name": "x", "type": "nope"}]}),
        json!({"data": [{"name": "x", "type": 7}]}),
        json!({"data": [{"name": "x", "serviceTemplate": 7}]}),
        json!({"data": [{"name": "x", "serviceTemplate": {}}]}),
        json!({"data": [{"name": "x", "serviceTemplate": "none"}]}),
        json!({"data": [{"name": "x", "serviceTemplate": "none", "type": "pm"}]}),
        json!({"data": [entry, entry]}),
        json!({"data": [entry], "durationRequested": 1e308}),
        json!({"data": [entry], "durationRequested": -5}),
        json!({"data": [entry], "durationRequested": 0}),
        json!({"data": [entry], "durationRequested": "soon"}),
        json!({"data": [entry], "startDateRequested": "yesterday"}),
        json!({"data": [entry], "startDateRequested": 1e308}),
        json!({"data": [entry], "user": 5}),
        json!({"data": [entry], "user": CAROL}),
        json!({"data": [entry], "bogus": 1}),
        json!({"data": [{"name": "x", "type": "container", "includedServices": ["x"]}]}),
        json!({"data": [{"name": "x", "type": "container", "includedServices": "y"}]}),
        json!({"data": [{"name": "x", "type": "container", "extends": "x::y"}]}),
        json!({"data": [entry, {"name": "y", "extends": "x::"}]}),
        json!({"data": [entry, {"name": "y", "extends": "::::"}]}),
        json!({"data": [{"name": "x", "type": "container", "attributes": 5}]}),
        json!({"data": [{"name": "x", "type": "container",
                         "attributes": {"sched": {"vc": {"id": "vc.1"}}}}]}),
        json!({"data": [{"name": "x", "type": "pm",
                         "attributes": {"sched": {"job": {"id": "Moab.1", "image": "i",
                                                          "template": "t"}}}}]}),
        json!({"data": [{"name": "x", "type": "pm",
                         "attributes": {"sched": {"job": {"image": "i", "template": "t",
                                                          "resources": {"procs": -1}}}}}]}),
        json!({"data": [{"name": "x", "type": "pm",
                         "attributes": {"sched": {"job": {"image": "i", "template": "t",
                                                          "resources": {"mem": "lots"}}}}}]}),
        json!({"data": [{"name": "x", "type": "container",
                         "attributes": {"sched": {"dependencies": [{"service": "a",
                                                                    "dependency": 5}]}}}]}),
        json!({"data": [{"name": "x", "type": "container",
                         "attributes": {"sched": {"dependencies": [{"service": "a",
                                                                    "dependency": ["b"]}]}}}]}),
        json!({"data": [{"name": "s", "type": "storage"}]}),
        json!({"data": [entry], "padding": deep}),
    ];
    for body in &creations {
        let reply = send(&server, "POST", PATH, bob(), body);
        assert_client_error(&reply, body);
    }
    let raw = server.call(
        "POST",
        PATH,
        bob(),
        Some(("application/json", b"{\"data\": [".to_vec())),
    );
    assert_client_error(&raw, &"truncated JSON");
    let huge = json!({"data": [entry], "padding": "x".repeat(200 * 1024)});
    assert_client_error(&send(&server, "POST", PATH, bob(), &huge), &"200 KiB");

    let top = create(&server, bob(), &json!({"data": [entry]}));
    let changes = [
        json!(null),
        json!([]),
        json!({"status": 5}),
        json!({"status": "x".repeat(2000)}),
        json!({"statusCode": 1e308}),
        json!({"statusCode": 1.5}),
        json!({"statusCode": "1"}),
        json!({"attributes": 5}),
        json!({"attributes": {"sched": null}}),
        json!({"attributes": {"sched": {"vc": {"id": "vc.1"}}}}),
        json!({"name": "other"}),
        json!({"user": CAROL}),
        json!({"phase": "up"}),
        json!({"parent": "someone"}),
    ];
    for body in &changes {
        let reply = send(&server, "PUT", &item(&top), bob(), body);
        assert_client_error(&reply, body);
    }
    for query in [
        "show-vc=maybe",
        "show-recursive-vc=2",
        "query=%7B",
        "sort=x",
        "max=-1",
        "offset=1e308",
    ] {
        let reply = server.get_as(bob(), &format!("{PATH}?{query}"));
        assert_client_error(&reply, &query);
    }
    let reply = server.call(
        "DELETE",
        &format!("{}?force-delete=maybe", item(&top)),
        bob(),
        None,
    );
    assert_client_error(&reply, &"force-delete=maybe");
    // Deleting twice, and changing it while it goes, are answered plainly.
    assert_eq!(server.call("DELETE", &item(&top), bob(), None).status, 200);
    let second = server.call("DELETE", &item(&top), bob(), None);
    assert!(
        second.status == 200 || second.status == 404,
        "{}",
        second.body
    );
    let late = send(&server, "PUT", &item(&top), bob(), &json!({"status": "x"}));
    assert!(late.status == 200 || late.status == 404, "{}", late.body);
    assert_client_error(
        &server.call("DELETE", &item("no-such.1"), bob(), None),
        &"missing",
    );
}

/// What a service finds again by name (a container described `Service <name>`, a VM
/// `svc-<id>`) is never another user's: bob's container described as carol's next
/// service is not taken by it, and bob cannot name a VM `svc-`.
#[test]
fn lookups_by_name_take_nothing_of_another_user() {
    let server = server();
    let first = create(
        &server,
        carol(),
        &json!({"data": [{"name": "web", "type": "container"}]}),
    );
    let number: u64 = first.rsplit_once('.').unwrap().1.parse().unwrap();
    let next = format!("web.{}", number + 1);
    let trap = container(&server, bob(), &format!("Service {next}"));
    let second = create(
        &server,
        carol(),
        &json!({"data": [{"name": "web", "type": "container"}]}),
    );
    assert_eq!(second, next);
    let up = wait_phase(&server, &second, "up");
    assert_ne!(up["attributes"]["sched"]["vc"]["id"], trap.as_str(), "{up}");
    assert_eq!(
        server.call("DELETE", &item(&second), carol(), None).status,
        200
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get(&item(&second)).status != 404 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        server.get(&format!("/rest/vcs/{trap}")).status,
        200,
        "bob's container stays"
    );
    // bob sees none of carol's services, by name or id.
    let id = server.get(&item(&first)).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    for key in [&first, &id] {
        assert_eq!(server.get_as(bob(), &item(key)).status, 404);
    }
}

/// The count of a user's services was read, and the new ones written, in two steps:
/// creations sent at once each saw the count before the others and passed
/// user_service_max_count together. It is checked where they are written now.
#[test]
fn creations_at_once_stay_within_the_users_limit() {
    let server = server();
    let body = {
        let mut entries = vec![json!({"name": "top", "type": "container",
            "includedServices": (0..15).map(|i| format!("c{i}")).collect::<Vec<_>>()})];
        entries.extend((0..15).map(|i| json!({"name": format!("c{i}"), "type": "container"})));
        json!({"data": entries})
    };
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| send(&server, "POST", PATH, bob(), &body).status))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let made = server.get_as(bob(), PATH).json()["totalCount"]
        .as_u64()
        .unwrap();
    assert!(made <= 64, "{made} services: {statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 201 || *s == 400),
        "{statuses:?}"
    );
}

/// The VM of a service, torn from under it: deleted while its guest is being made, and
/// destroyed by its user through /rest/vms once up. Each time the service ends plainly
/// (failed, then deleted) and leaves no VM or guest behind.
#[test]
fn a_vm_service_survives_its_vm_going_at_any_time() {
    let Some((server, _guests)) = crate::vms::start(TestServer::builder(), |_| {}) else {
        return;
    };
    let body = json!({"data": [{"name": "vm", "type": "vm",
        "attributes": {"sched": {"job": {"image": "guest", "template": "genericVM",
                                         "resources": {"procs": 1, "mem": 128}}}}}]});
    let gone = |name: &str| {
        let deadline = Instant::now() + Duration::from_secs(90);
        while server.get(&item(name)).status != 404 {
            assert!(
                Instant::now() < deadline,
                "{}",
                server.get(&item(name)).body
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.get("/rest/vms").json()["totalCount"] != 0
            || !crate::vms::qemu_pids(server.data_dir(), None).is_empty()
        {
            assert!(
                Instant::now() < deadline,
                "{}",
                server.get("/rest/vms").body
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Deleted while setting up.
    let early = create(&server, Auth::User, &body);
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get(&item(&early)).json()["attributes"]["sched"]["job"]["vm"].is_null() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        server
            .call("DELETE", &item(&early), Auth::User, None)
            .status,
        200
    );
    let twice = server.call("DELETE", &item(&early), Auth::User, None);
    assert!(twice.status == 200 || twice.status == 404, "{}", twice.body);
    gone(&early);
    // Its VM destroyed by its user once up.
    let late = create(&server, Auth::User, &body);
    let up = wait_phase(&server, &late, "up");
    let vm = up["attributes"]["sched"]["job"]["vm"]
        .as_str()
        .unwrap()
        .to_string();
    let destroyed = server.call("DELETE", &format!("/rest/vms/{vm}"), Auth::User, None);
    assert_eq!(destroyed.status, 202, "{}", destroyed.body);
    let failed = wait_phase(&server, &late, "failed");
    assert!(failed["status"].as_str().unwrap().contains(&vm), "{failed}");
    assert_eq!(
        server.call("DELETE", &item(&late), Auth::User, None).status,
        200
    );
    gone(&late);
}
