//! Services over HTTP (spec 2.11, 4.10, part 8): creation from templates and types,
//! `extends`, dependencies honoured at bring-up, teardown in reverse order, reads with
//! `show-vc`/`show-recursive-vc`, changes, deletion, names, permissions, restarts.
//!
//! `pm` services hold a node with a real job of their user, so most of these run
//! without QEMU (they need root and the system accounts of `scripts/test`); the story
//! with VM services and a data disk boots real guests (`tests/http/vms.rs` explains).

use std::time::{Duration, Instant};

use drover_sched::node::NodeConfig;
use drover_testkit::{Auth, TestServer, bob, carol, send};
use serde_json::{Value, json};

use crate::security::{BOB, CAROL, system_accounts};

const PATH: &str = "/rest/services";

/// A server with two nodes of 2 processors and 1 GiB (`n2` is `fast`), and the accounts
/// bob and carol.
fn server() -> TestServer {
    TestServer::builder()
        .user(BOB, false)
        .user(CAROL, false)
        .config(|c| {
            c.nodes = vec![
                NodeConfig {
                    memory: Some(1024),
                    ..NodeConfig::new("n1", 2)
                },
                NodeConfig {
                    memory: Some(1024),
                    features: vec!["fast".into()],
                    ..NodeConfig::new("n2", 2)
                },
            ]
        })
        .start()
}

/// Creates a service template (as the administrator).
fn template(server: &TestServer, body: Value) {
    let reply = server.send_json("POST", "/rest/service-templates", &body);
    assert_eq!(reply.status, 201, "{body}: {}", reply.body);
}

/// A `pm` template `name` asking for one processor.
fn pm_template(server: &TestServer, name: &str) {
    template(
        server,
        json!({"name": name, "type": "pm", "attributes": {"sched": {"job": {
            "image": "centos", "template": "genericPM", "resources": {"procs": 1}}}}}),
    );
}

/// A container template `name` of `db` and `web` (both `pm`), web after db.
fn stack_template(server: &TestServer, name: &str) {
    pm_template(server, "machine");
    template(
        server,
        json!({"name": name, "type": "container",
               "includedServices": [{"localName": "db", "serviceTemplate": "machine"},
                                    {"localName": "web", "serviceTemplate": {"name": "machine"}}],
               "attributes": {"sched": {"dependencies": [{"localName": "web", "dependency": ["db"]}]}}}),
    );
}

/// bob's service `s.<n>` of the template `stack`; answers its name.
fn bobs_stack(server: &TestServer) -> String {
    stack_template(server, "stack");
    create(
        server,
        bob(),
        &json!({"data": [{"name": "s", "serviceTemplate": "stack"}]}),
    )
}

/// Creates a service as `auth`; answers the top-level name.
fn create(server: &TestServer, auth: Auth, body: &Value) -> String {
    let reply = send(server, "POST", PATH, auth, body);
    assert_eq!(reply.status, 201, "{body}: {}", reply.body);
    let answer = reply.json();
    assert_eq!(answer.as_object().unwrap().len(), 1, "{answer}");
    answer["name"].as_str().unwrap().to_string()
}

fn item(name: &str) -> String {
    format!("{PATH}/{name}")
}

/// Waits (90 s at most) until the service `name` satisfies `done`.
fn wait_service(
    server: &TestServer,
    name: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let reply = server.get(&item(name));
        if reply.status == 200 && done(&reply.json()) {
            return reply.json();
        }
        assert!(
            Instant::now() < deadline,
            "{name} never became {what}: {} {}",
            reply.status,
            reply.body
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_phase(server: &TestServer, name: &str, phase: &str) -> Value {
    wait_service(server, name, phase, |s| s["phase"] == phase)
}

/// Waits (90 s at most) until the service `name`, deleted, is torn down. It is not found
/// from its deletion on; the event of its teardown says when the teardown is done.
pub(crate) fn wait_gone(server: &TestServer, name: &str) {
    assert_eq!(
        server.get(&item(name)).status,
        404,
        "a deleted service is gone from the interface at once"
    );
    let said = format!("Service {name} was torn down");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let events = server.get("/rest/events?api-version=3").json();
        let results = events["results"].as_array().unwrap();
        if results.iter().any(|e| e.to_string().contains(&said)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} was never torn down: {events}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The names of the included services of `service`, by the start of their name.
fn included<'a>(service: &'a Value, base: &str) -> &'a str {
    service["includedServices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|n| n.starts_with(&format!("{base}.")))
        .unwrap_or_else(|| panic!("no {base} in {service}"))
}

#[test]
fn a_container_of_machines_comes_up_in_dependency_order_and_goes_away_entirely() {
    if !system_accounts() {
        return;
    }
    let server = server();
    stack_template(&server, "stack");
    let body = json!({"user": BOB, "account": "research", "durationRequested": 3600,
                      "data": [{"name": "shop", "serviceTemplate": "stack", "label": "The shop",
                                "attributes": {"sharedData": {"tier": "gold"}}}]});
    let top = create(&server, bob(), &body);
    assert!(top.starts_with("shop."), "{top}");
    let shop = server.get_as(bob(), &item(&top)).json();
    assert_eq!(shop["type"], "container");
    assert_eq!(shop["user"], BOB);
    assert_eq!(shop["account"], "research");
    assert_eq!(shop["label"], "The shop");
    assert_eq!(shop["parent"], Value::Null);
    assert_eq!(shop["durationRequested"], 3600);
    assert_eq!(shop["serviceTemplate"]["name"], "stack");
    assert_eq!(shop["attributes"]["sharedData"]["tier"], "gold");
    let (db, web) = (
        included(&shop, "db").to_string(),
        included(&shop, "web").to_string(),
    );
    assert_eq!(
        shop["attributes"]["sched"]["dependencies"],
        json!([{"service": web, "dependency": [db]}])
    );

    // Up in order: web starts only once db is up.
    let shop = wait_phase(&server, &top, "up");
    let (db_up, web_up) = (
        server.get(&item(&db)).json(),
        server.get(&item(&web)).json(),
    );
    assert_eq!(db_up["phase"], "up");
    assert_eq!(web_up["phase"], "up");
    assert_eq!(db_up["parent"], top.as_str());
    assert!(
        db_up["lastUpdated"].as_str() <= web_up["lastUpdated"].as_str(),
        "db {db_up}\nweb {web_up}"
    );
    let db_job = db_up["attributes"]["sched"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let web_job = web_up["attributes"]["sched"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let job = server.get(&format!("/rest/jobs/{db_job}")).json();
    assert_eq!(job["state"], "RUNNING", "{job}");
    assert_eq!(job["user"], BOB);
    let web_started = server.get(&format!("/rest/jobs/{web_job}")).json()["startDate"].clone();
    let db_started = job["startDate"].clone();
    assert!(
        db_started.as_str() <= web_started.as_str(),
        "{db_started} {web_started}"
    );
    assert_eq!(shop["statusCode"], 2);

    // show-recursive-vc: the container, its jobs, in full.
    let vc = shop["attributes"]["sched"]["vc"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let listed = server
        .get_as(bob(), &format!("{PATH}?show-recursive-vc=true"))
        .json();
    let mine = listed["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == top.as_str())
        .unwrap()
        .clone();
    let detail = &mine["attributes"]["sched"]["vc"];
    assert_eq!(detail["id"], vc.as_str(), "{mine}");
    assert_eq!(detail["description"], format!("Service {top}"));
    let jobs: Vec<&str> = detail["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert!(
        jobs.contains(&db_job.as_str()) && jobs.contains(&web_job.as_str()),
        "{detail}"
    );
    assert_eq!(detail["jobs"][0]["state"], "Running", "{detail}");
    let plain = server.get_as(bob(), &item(&top)).json();
    assert_eq!(plain["attributes"]["sched"]["vc"], json!({"id": vc}));
    let shown = server
        .get_as(bob(), &format!("{}?show-vc=true", item(&top)))
        .json();
    assert_eq!(
        shown["attributes"]["sched"]["vc"]["owner"]["name"], BOB,
        "{shown}"
    );

    // What the template defines goes only with its container (spec 4.10 rule 3).
    for piece in [&db, &web] {
        let refused = server.call("DELETE", &item(piece), bob(), None);
        refused.assert_refused(409, &top, &"a piece of the stack alone");
        let forced = server.call(
            "DELETE",
            &format!("{}?force-delete=true", item(piece)),
            bob(),
            None,
        );
        forced.assert_refused(409, "template", &"a piece of the stack, forced");
    }

    let deleted = server.call("DELETE", &item(&top), bob(), None);
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(deleted.json(), json!({}));
    // Gone at once, pieces and all, while the teardown goes on.
    for name in [&top, &db, &web] {
        assert_eq!(server.get_as(bob(), &item(name)).status, 404, "{name}");
        let again = server.call("DELETE", &item(name), bob(), None);
        assert_eq!(again.status, 404, "{name}: {}", again.body);
    }
    assert_eq!(server.get_as(bob(), PATH).json()["totalCount"], 0);
    wait_gone(&server, &top);
    for name in [&db, &web] {
        assert_eq!(server.get(&item(name)).status, 404);
    }
    for job in [&db_job, &web_job] {
        let state = server.get(&format!("/rest/jobs/{job}")).json()["state"].clone();
        assert_ne!(state, "RUNNING", "job {job} still runs");
    }
    assert_eq!(server.get(&format!("/rest/vcs/{vc}")).status, 404);
    // Events for the creation and the teardown.
    let events = server.get("/rest/events?api-version=3").json();
    let types: Vec<&str> = events["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["eventType"].as_str())
        .collect();
    assert!(
        types.contains(&"Service Create") && types.contains(&"Service Destroy"),
        "{types:?}"
    );
}

#[test]
fn entries_extend_templates_and_include_each_other() {
    if !system_accounts() {
        return;
    }
    let server = server();
    stack_template(&server, "stack");
    // One top-level entry holding a stack and a machine of its own; the stack's web
    // gets more memory and a variable; a dependency is added across them.
    let body = json!({"user": BOB, "data": [
        {"name": "site", "type": "container", "includedServices": ["main", "extra"],
         "attributes": {"sched": {"dependencies": [{"service": "extra", "dependency": "main"}]}}},
        {"name": "main", "serviceTemplate": {"name": "stack"}},
        {"name": "extra", "type": "pm", "attributes": {"sched": {"job": {
            "image": "debian", "template": "genericPM", "resources": {"procs": 1}}}}},
        {"name": "bigger", "extends": "main::web",
         "attributes": {"sched": {"job": {"resources": {"mem": 64}, "variables": {"ROLE": "front"},
                                          "features": ["fast"]}}}}]});
    let top = create(&server, bob(), &body);
    assert!(top.starts_with("site."), "{top}");
    let site = server.get(&item(&top)).json();
    let main = included(&site, "main").to_string();
    let extra = included(&site, "extra").to_string();
    let main_service = server.get(&item(&main)).json();
    assert_eq!(main_service["serviceTemplate"]["name"], "stack");
    let web = included(&main_service, "web").to_string();
    let job = server.get(&item(&web)).json()["attributes"]["sched"]["job"].clone();
    assert_eq!(job["resources"], json!({"procs": 1, "mem": 64}), "{job}");
    assert_eq!(job["variables"]["ROLE"], "front");
    assert_eq!(job["features"], json!(["fast"]));
    assert_eq!(job["image"], "centos");
    assert_eq!(
        site["attributes"]["sched"]["dependencies"],
        json!([{"service": extra, "dependency": [main]}])
    );
    // Nested containers join their parent's virtual container.
    let site = wait_phase(&server, &top, "up");
    let main_vc = server.get(&item(&main)).json()["attributes"]["sched"]["vc"]["id"].clone();
    let shown = server
        .get(&format!("{}?show-recursive-vc=true", item(&top)))
        .json();
    let nested = &shown["attributes"]["sched"]["vc"]["virtualContainers"];
    assert_eq!(nested[0]["id"], main_vc, "{shown}");
    assert_eq!(nested[0]["jobs"].as_array().unwrap().len(), 2, "{nested}");
    assert_eq!(site["phase"], "up");
    let force = server.call(
        "DELETE",
        &format!("{}?force-delete=true", item(&main)),
        Auth::Admin,
        None,
    );
    assert_eq!(force.status, 200, "{}", force.body);
    wait_gone(&server, &main);
    let site = server.get(&item(&top)).json();
    assert_eq!(site["includedServices"], json!([extra]), "{site}");
}

#[test]
fn creations_that_break_a_rule_are_refused_by_field() {
    let server = server();
    stack_template(&server, "stack");
    let cases = [
        (json!({"data": []}), "no service entry"),
        (json!({"user": BOB}), "data"),
        (json!({"data": [{"serviceTemplate": "stack"}]}), "name"),
        (
            json!({"data": [{"name": "a", "serviceTemplate": "nothing"}]}),
            "no service template",
        ),
        (json!({"data": [{"name": "a", "type": "box"}]}), "type"),
        (
            json!({"data": [{"name": "a:b", "type": "container"}]}),
            "colon",
        ),
        (
            json!({"data": [{"name": "a", "type": "container"}, {"name": "b", "type": "container"}]}),
            "one top-level service",
        ),
        (
            json!({"data": [{"name": "a", "serviceTemplate": "stack"},
                         {"name": "x", "extends": "a::nothing"}]}),
            "includes no service 'nothing'",
        ),
        (
            json!({"data": [{"name": "a", "serviceTemplate": "stack"},
                         {"name": "x", "extends": "a::web",
                          "attributes": {"sched": {"job": {"template": "other"}}}}]}),
            "cannot be changed",
        ),
        (
            json!({"data": [{"name": "a", "serviceTemplate": "stack",
                          "attributes": {"sched": {"vc": {"id": "1"}}}}]}),
            "system's",
        ),
        (json!({"data": [{"name": "a", "type": "vm"}]}), "image"),
        (
            json!({"data": [{"name": "a", "type": "vm", "attributes": {"sched": {"job": {
             "image": "no-such-image", "template": "genericVM"}}}}]}),
            "no image 'no-such-image'",
        ),
        (
            json!({"data": [{"name": "a", "type": "container", "includedServices": ["s"]},
                         {"name": "s", "type": "storage",
                          "attributes": {"sched": {"job": {"resources": {"disk": 1}}}}}]}),
            "no single VM service",
        ),
        (
            json!({"data": [{"name": "a", "type": "container", "includedServices": ["b"]},
                         {"name": "b", "type": "container", "includedServices": ["a"]}]}),
            "already included",
        ),
        (
            json!({"data": [{"name": "a", "type": "container", "includedServices": ["b", "c"],
                          "attributes": {"sched": {"dependencies": [
                              {"service": "b", "dependency": ["c"]},
                              {"service": "c", "dependency": ["b"]}]}}},
                         {"name": "b", "type": "container"}, {"name": "c", "type": "container"}]}),
            "cycle",
        ),
        (
            json!({"data": [{"name": "a", "type": "container", "includedServices": ["nope"]}]}),
            "no entry of this request is named 'nope'",
        ),
        (
            json!({"data": [{"name": "a", "type": "pm", "includedServices": ["b"], "attributes":
                          {"sched": {"job": {"image": "i", "template": "t"}}}},
                         {"name": "b", "type": "container"}]}),
            "cannot include services",
        ),
        (
            json!({"data": [{"name": "a", "type": "container"}], "durationRequested": 0}),
            "durationRequested",
        ),
        (
            json!({"data": [{"name": "a", "type": "container"}], "owner": "me"}),
            "owner",
        ),
        (
            json!({"data": [{"name": "a", "type": "container", "colour": 1}]}),
            "colour",
        ),
    ];
    for (body, words) in cases {
        send(&server, "POST", PATH, bob(), &body).assert_refused(400, words, &body);
    }
    // Nothing was made.
    assert_eq!(server.get(PATH).json()["totalCount"], 0);
}

#[test]
fn changes_touch_only_attributes_status_and_status_code() {
    let server = server();
    let top = create(
        &server,
        bob(),
        &json!({"data": [{"name": "box", "type": "container",
        "attributes": {"portal": {"form": 1}}}]}),
    );
    let service = wait_phase(&server, &top, "up");
    let changed = send(
        &server,
        "PUT",
        &item(&top),
        bob(),
        &json!({
        "status": "Ready for customers", "statusCode": 42,
        "attributes": {"sharedData": {"url": "http://shop"}, "portal": null}}),
    );
    assert_eq!(changed.status, 200, "{}", changed.body);
    let changed = changed.json();
    assert_eq!(changed["status"], "Ready for customers");
    assert_eq!(changed["statusCode"], 42);
    assert_eq!(changed["attributes"]["sharedData"]["url"], "http://shop");
    assert!(changed["attributes"].get("portal").is_none(), "{changed}");
    assert_eq!(
        changed["attributes"]["sched"],
        service["attributes"]["sched"]
    );
    // What was read may be sent back; only the three fields change.
    let mut again = changed.clone();
    again["status"] = json!("Again");
    assert_eq!(send(&server, "PUT", &item(&top), bob(), &again).status, 200);
    for (body, words) in [
        (
            json!({"attributes": {"sched": {"vc": {"id": "99"}}}}),
            "attributes.sched",
        ),
        (json!({"name": "other"}), "name"),
        (json!({"user": CAROL}), "user"),
        (json!({"statusCode": "high"}), "statusCode"),
        (json!({"status": 5}), "status"),
        (json!([1]), "object"),
    ] {
        send(&server, "PUT", &item(&top), bob(), &body).assert_refused(400, words, &body);
    }
    assert_eq!(server.get(&item(&top)).json()["name"], top.as_str());
}

#[test]
fn users_see_and_change_their_own_services_only() {
    let server = server();
    let top = create(
        &server,
        bob(),
        &json!({"data": [{"name": "mine", "type": "container"}]}),
    );
    assert_eq!(server.get_as(carol(), &item(&top)).status, 404);
    assert_eq!(server.get_as(carol(), PATH).json()["totalCount"], 0);
    assert_eq!(server.get_as(bob(), PATH).json()["totalCount"], 1);
    assert_eq!(
        send(
            &server,
            "PUT",
            &item(&top),
            carol(),
            &json!({"status": "x"})
        )
        .status,
        404
    );
    assert_eq!(
        server.call("DELETE", &item(&top), carol(), None).status,
        404
    );
    // Nobody makes services for someone else, but an administrator.
    let body = json!({"user": BOB, "data": [{"name": "gift", "type": "container"}]});
    send(&server, "POST", PATH, carol(), &body).assert_refused(403, BOB, &"for bob");
    create(&server, Auth::Admin, &body);
    // The VMs of services are theirs alone.
    let vm = json!({"id": "svc-0123456789abcdef01234567", "totalProcessors": 1});
    send(&server, "POST", "/rest/vms", bob(), &vm).assert_refused(400, "svc-", &vm);
    // Ids look up like names.
    let id = server.get(&item(&top)).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        server.get_as(bob(), &item(&id)).json()["name"],
        top.as_str()
    );
}

#[test]
fn names_are_numbered_and_never_given_twice_even_after_a_restart() {
    let server = server();
    let first = create(
        &server,
        bob(),
        &json!({"data": [{"name": "app", "type": "container"}]}),
    );
    let second = create(
        &server,
        bob(),
        &json!({"data": [{"name": "app", "type": "container"}]}),
    );
    assert_ne!(first, second);
    let number = |name: &str| name.rsplit_once('.').unwrap().1.parse::<u64>().unwrap();
    assert!(number(&second) > number(&first));
    assert_eq!(
        server.call("DELETE", &item(&second), bob(), None).status,
        200
    );
    wait_gone(&server, &second);
    let server = server.restart();
    let third = create(
        &server,
        bob(),
        &json!({"data": [{"name": "app", "type": "container"}]}),
    );
    assert!(number(&third) > number(&second), "{third} after {second}");
    assert_eq!(server.get(&item(&first)).json()["phase"], "up");
}

#[test]
fn a_template_in_use_is_not_deleted() {
    let server = server();
    let top = bobs_stack(&server);
    server
        .call("DELETE", "/rest/service-templates/stack", Auth::Admin, None)
        .assert_refused(409, &top, &"stack in use");
    assert_eq!(
        server
            .call(
                "DELETE",
                &format!("{}?force-delete=true", item(&top)),
                Auth::Admin,
                None
            )
            .status,
        200
    );
    wait_gone(&server, &top);
    assert_eq!(
        server
            .call("DELETE", "/rest/service-templates/stack", Auth::Admin, None)
            .status,
        200
    );
}

/// The job of a `pm` service takes the site's job templates as a submission does: what
/// the service says of it wins (it lasts as long as the service), `DEFAULT` fills the
/// rest.
#[test]
fn a_pm_services_job_takes_the_default_template() {
    if !system_accounts() {
        return;
    }
    let server = TestServer::builder()
        .user(BOB, false)
        .config(|c| {
            c.nodes = vec![NodeConfig::new("n1", 2)];
            c.job_templates = vec![crate::jobs::a_default_template()];
        })
        .start();
    pm_template(&server, "machine");
    let top = create(
        &server,
        bob(),
        &json!({"data": [{"name": "held", "serviceTemplate": "machine"}]}),
    );
    let up = wait_phase(&server, &top, "up");
    let job = up["attributes"]["sched"]["job"]["id"].as_str().unwrap();
    let job = server
        .get(&format!("/rest/jobs/{job}?api-version=2"))
        .json();
    assert_eq!(job["credentials"]["account"], "general", "DEFAULT's: {job}");
    assert_eq!(job["flags"], json!(["RESTARTABLE"]), "{job}");
    assert_eq!(job["duration"], Value::Null, "the service's own: {job}");
    assert_eq!(job["templates"], json!([{"name": "genericPM-setup"}]));
}

#[test]
fn a_service_waits_for_its_start_date_and_ends_with_its_duration() {
    if !system_accounts() {
        return;
    }
    let server = server();
    pm_template(&server, "machine");
    let later = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3))
        .strftime("%Y-%m-%d %H:%M:%S UTC")
        .to_string();
    let top = create(
        &server,
        bob(),
        &json!({"startDateRequested": later, "durationRequested": 4,
        "data": [{"name": "short", "serviceTemplate": "machine"}]}),
    );
    let service = server.get(&item(&top)).json();
    assert_eq!(service["phase"], "pending");
    assert_eq!(service["startDateRequested"], later);
    let up = wait_phase(&server, &top, "up");
    let job = up["attributes"]["sched"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let ended = wait_phase(&server, &top, "ended");
    assert_eq!(ended["statusCode"], 4);
    let state = server.get(&format!("/rest/jobs/{job}")).json()["state"].clone();
    assert_ne!(state, "RUNNING");
}

#[test]
fn a_restart_during_bring_up_resumes_without_making_anything_twice() {
    if !system_accounts() {
        return;
    }
    let server = server();
    let top = bobs_stack(&server);
    // Stop as soon as the first piece exists.
    wait_service(&server, &top, "given a container", |s| {
        !s["attributes"]["sched"]["vc"].is_null()
    });
    let server = server.restart();
    let shop = wait_phase(&server, &top, "up");
    let containers = server.get("/rest/vcs").json();
    let ours = containers["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["description"] == format!("Service {top}"))
        .count();
    assert_eq!(ours, 1, "{containers}");
    let jobs = server.get("/rest/jobs").json();
    let running = jobs["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["state"] == "RUNNING")
        .count();
    assert_eq!(running, 2, "{jobs}");
    assert_eq!(shop["phase"], "up");
}

#[test]
fn a_vm_service_without_a_provisioner_fails_and_says_why() {
    let server = crate::vms::without_provisioner();
    let top = create(
        &server,
        Auth::User,
        &json!({"data": [{"name": "vm", "type": "vm",
        "attributes": {"sched": {"job": {"image": "guest", "template": "genericVM",
                                         "resources": {"procs": 1, "mem": 128}}}}}]}),
    );
    let failed = wait_phase(&server, &top, "failed");
    assert_eq!(failed["statusCode"], -1);
    assert!(
        failed["status"].as_str().unwrap().contains("VM svc-"),
        "{failed}"
    );
    let events = server.get("/rest/events?api-version=3").json();
    assert!(
        events["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["eventType"] == "Service Failure"),
        "{events}"
    );
    // A failed service is deleted like any other, and its VM with it.
    assert_eq!(
        server.call("DELETE", &item(&top), Auth::User, None).status,
        200
    );
    wait_gone(&server, &top);
    assert_eq!(server.get("/rest/vms").json()["totalCount"], 0);
    // Features choose the VM's node; none has these.
    let picky = create(
        &server,
        Auth::User,
        &json!({"data": [{"name": "picky", "type": "vm",
        "attributes": {"sched": {"job": {"image": "guest", "template": "genericVM",
                                         "features": ["gpu"]}}}}]}),
    );
    let failed = wait_phase(&server, &picky, "failed");
    assert!(
        failed["status"]
            .as_str()
            .unwrap()
            .contains("no node has the features gpu"),
        "{failed}"
    );
}

#[test]
fn vm_services_with_a_data_disk_come_up_in_order_and_leave_nothing_behind() {
    let Some((server, _guests)) = crate::vms::start(TestServer::builder().user(BOB, false), |_| {})
    else {
        return;
    };
    let vm = |name: &str| {
        json!({"name": name, "type": "vm", "attributes": {"sched": {"job": {
            "image": "guest", "template": "genericVM", "resources": {"procs": 1, "mem": 128}}}}})
    };
    template(&server, vm("small vm"));
    template(
        &server,
        json!({"name": "data disk", "type": "storage",
        "attributes": {"sched": {"job": {"resources": {"disk": 1}}}}}),
    );
    template(
        &server,
        json!({"name": "web tier", "type": "container",
        "includedServices": [{"localName": "db", "serviceTemplate": "small vm"},
                             {"localName": "data", "serviceTemplate": "data disk"},
                             {"localName": "web", "serviceTemplate": "small vm"}],
        "attributes": {"sched": {"dependencies": [
            {"localName": "db", "dependency": ["data"]},
            {"localName": "web", "dependency": ["db"]}]}}}),
    );
    let top = create(
        &server,
        Auth::User,
        &json!({"data": [{"name": "tier", "serviceTemplate": "web tier"}]}),
    );
    let tier = wait_phase(&server, &top, "up");
    let (db, web, data) = (
        included(&tier, "db").to_string(),
        included(&tier, "web").to_string(),
        included(&tier, "data").to_string(),
    );
    let db_service = server.get(&item(&db)).json();
    let web_service = server.get(&item(&web)).json();
    let db_vm = db_service["attributes"]["sched"]["job"]["vm"]
        .as_str()
        .unwrap()
        .to_string();
    let web_vm = web_service["attributes"]["sched"]["job"]["vm"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(db_vm.starts_with("svc-"), "{db_service}");
    assert_eq!(
        server.get(&item(&data)).json()["attributes"]["sched"]["job"]["vmService"],
        db.as_str()
    );
    // In dependency order: web's guest was made after db's was running.
    let db_vm_record = server.get(&format!("/rest/vms/{db_vm}")).json();
    let web_vm_record = server.get(&format!("/rest/vms/{web_vm}")).json();
    assert_eq!(db_vm_record["state"], "BUSY", "{db_vm_record}");
    assert!(
        db_vm_record["startDate"].as_str() <= web_vm_record["startDate"].as_str(),
        "{db_vm_record}\n{web_vm_record}"
    );
    // db carries the data disk: a second qcow2 beside its image's.
    let disks = |id: &str| {
        std::fs::read_dir(server.data_dir().join("vms").join(id))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".qcow2"))
                    .count()
            })
            .unwrap_or(0)
    };
    assert_eq!(disks(&db_vm), disks(&web_vm) + 1, "db has its data disk");
    assert_eq!(crate::vms::qemu_pids(server.data_dir(), None).len(), 2);
    // Listed with its containers and VMs.
    let listed = server.get(&format!("{PATH}?show-recursive-vc=true")).json();
    let shown = listed["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == top.as_str())
        .unwrap();
    let vms: Vec<&str> = shown["attributes"]["sched"]["vc"]["virtualMachines"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["id"].as_str())
        .collect();
    assert!(
        vms.contains(&db_vm.as_str()) && vms.contains(&web_vm.as_str()),
        "{shown}"
    );
    let vc = tier["attributes"]["sched"]["vc"]["id"]
        .as_str()
        .unwrap()
        .to_string();

    assert_eq!(
        server.call("DELETE", &item(&top), Auth::User, None).status,
        200
    );
    wait_gone(&server, &top);
    assert!(crate::vms::qemu_pids(server.data_dir(), None).is_empty());
    assert_eq!(server.get("/rest/vms").json()["totalCount"], 0);
    assert_eq!(server.get(&format!("/rest/vcs/{vc}")).status, 404);
    for id in [&db_vm, &web_vm] {
        assert_eq!(disks(id), 0, "the disks of {id} are gone");
    }
    let pending = server.get("/rest/pending-actions").json();
    assert_eq!(pending["totalCount"], 0, "{pending}");
}

#[test]
fn a_restart_during_teardown_finishes_it() {
    if !system_accounts() {
        return;
    }
    let server = server();
    let top = bobs_stack(&server);
    let shop = wait_phase(&server, &top, "up");
    let vc = shop["attributes"]["sched"]["vc"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(server.call("DELETE", &item(&top), bob(), None).status, 200);
    // Deleting again while it goes is no error (or it is gone already).
    let again = server.call("DELETE", &item(&top), bob(), None).status;
    assert!(again == 200 || again == 404, "{again}");
    let server = server.restart();
    wait_gone(&server, &top);
    let jobs = server.get("/rest/jobs").json();
    let running = jobs["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["state"] == "RUNNING")
        .count();
    assert_eq!(running, 0, "{jobs}");
    assert_eq!(server.get(&format!("/rest/vcs/{vc}")).status, 404);
}

/// The order assertions of the bring-up tests compare dates to the second, which a
/// violation within one second would pass: here the service depended on never comes up
/// (its job asks for a feature no node has), so the one that waits must never be made.
#[test]
fn a_service_is_not_set_up_while_one_it_depends_on_is_not_up() {
    if !system_accounts() {
        return;
    }
    let server = server();
    stack_template(&server, "stack");
    let top = create(
        &server,
        bob(),
        &json!({"data": [
        {"name": "s", "serviceTemplate": "stack"},
        {"name": "stuck", "extends": "s::db",
         "attributes": {"sched": {"job": {"features": ["no-such-feature"]}}}}]}),
    );
    let shop = server.get(&item(&top)).json();
    let (db, web) = (
        included(&shop, "db").to_string(),
        included(&shop, "web").to_string(),
    );
    wait_service(&server, &db, "given its job", |s| {
        s["attributes"]["sched"]["job"]["id"].is_string()
    });
    // Many controller passes later, db is still setting up and web was never started.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(server.get(&item(&db)).json()["phase"], "settingUp");
    let web = server.get(&item(&web)).json();
    assert_eq!(web["phase"], "pending", "{web}");
    assert!(
        web["attributes"]["sched"]["job"].get("id").is_none(),
        "{web}"
    );
    assert!(web["status"].as_str().unwrap().contains(&db), "{web}");
    assert_eq!(server.call("DELETE", &item(&top), bob(), None).status, 200);
    wait_gone(&server, &top);
}

/// A service's VM lives as its service (no default time to live), and is held to its
/// user's share of VMs unless an administrator made the service (issue #53's review).
#[test]
fn a_services_vm_lives_as_its_service_within_its_makers_limits() {
    let (server, _site) = crate::vms::with_site_commands(|c| {
        c.nodes = vec![drover_sched::node::NodeConfig::new("n1", 32)];
        c.scheduler.limits.user_vm_max_processors = 4;
    });
    let vm_service = |name: &str, procs: u32| {
        json!({"data": [{"name": name, "type": "vm",
            "attributes": {"sched": {"job": {"image": "guest", "template": "genericVM",
                                             "resources": {"procs": procs, "mem": 128}}}}}]})
    };
    let admins = create(&server, Auth::Admin, &vm_service("big", 8));
    wait_phase(&server, &admins, "up");
    let bobs = create(&server, Auth::User, &vm_service("small", 2));
    wait_phase(&server, &bobs, "up");
    let vms = server.get("/rest/vms").json();
    for vm in vms["results"].as_array().unwrap() {
        assert!(vm["requestedTimeToLive"].is_null(), "{vm}");
    }
    assert_eq!(vms["totalCount"], 2, "{vms}");
    let over = create(&server, Auth::User, &vm_service("large", 4));
    let failed = wait_phase(&server, &over, "failed");
    assert!(
        failed["status"]
            .as_str()
            .unwrap()
            .contains("user_vm_max_processors"),
        "{failed}"
    );
}

/// After a forced deletion, a service that waited for the deleted one can never come
/// up: it fails and says why, instead of staying pending for ever (issue #58).
#[test]
fn a_service_waiting_for_a_force_deleted_one_fails_and_says_why() {
    if !system_accounts() {
        return;
    }
    let server = server();
    let machine = |features: Value| {
        json!({"sched": {"job": {"image": "debian", "template": "genericPM",
                                 "resources": {"procs": 1}, "features": features}}})
    };
    // `first` asks for a feature no node has: it never comes up, and `then` waits.
    let body = json!({"user": BOB, "data": [
        {"name": "site", "type": "container", "includedServices": ["first", "then"],
         "attributes": {"sched": {"dependencies": [{"service": "then", "dependency": ["first"]}]}}},
        {"name": "first", "type": "pm", "attributes": machine(json!(["no-such-feature"]))},
        {"name": "then", "type": "pm", "attributes": machine(json!([]))}]});
    let top = create(&server, bob(), &body);
    let site = server.get(&item(&top)).json();
    let (first, then) = (
        included(&site, "first").to_string(),
        included(&site, "then").to_string(),
    );
    wait_service(&server, &then, "waiting for first", |s| {
        s["phase"] == "pending" && s["status"].as_str().unwrap().contains(&first)
    });
    let refused = server.call("DELETE", &item(&first), bob(), None);
    refused.assert_refused(409, &then, &"first, which then waits for");
    let forced = server.call(
        "DELETE",
        &format!("{}?force-delete=true", item(&first)),
        bob(),
        None,
    );
    assert_eq!(forced.status, 200, "{}", forced.body);
    wait_gone(&server, &first);
    let failed = wait_phase(&server, &then, "failed");
    let status = failed["status"].as_str().unwrap();
    assert!(
        status.contains(&first) && status.contains("deleted"),
        "{failed}"
    );
    assert_eq!(failed["statusCode"], -1);
    assert_eq!(
        server.get(&item(&top)).json()["includedServices"],
        json!([then])
    );
    assert_eq!(server.call("DELETE", &item(&top), bob(), None).status, 200);
    wait_gone(&server, &top);
}

/// A VM service whose VM is powered off is down, and up again once it runs; deleted, it
/// is gone at once while its VM's destroy goes on (issue #58). The site's own commands
/// stand in for QEMU here (`vms::with_site_commands`).
#[test]
fn a_vm_service_is_down_while_its_vm_is_off_and_gone_once_deleted() {
    let (server, _site) = crate::vms::with_site_commands(|c| {
        c.nodes = vec![NodeConfig::new("n1", 4)];
    });
    let body = json!({"data": [{"name": "desk", "type": "vm",
        "attributes": {"sched": {"job": {"image": "guest", "template": "genericVM",
                                         "resources": {"procs": 1, "mem": 128}}}}}]});
    let top = create(&server, Auth::User, &body);
    let up = wait_phase(&server, &top, "up");
    let vm = up["attributes"]["sched"]["job"]["vm"]
        .as_str()
        .unwrap()
        .to_string();
    let power = |state: &str| {
        let reply = send(
            &server,
            "PUT",
            &format!("/rest/vms/{vm}"),
            Auth::User,
            &json!({"powerState": state}),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    };
    power("OFF");
    let down = wait_phase(&server, &top, "down");
    assert!(
        down["status"].as_str().unwrap().contains("powered off"),
        "{down}"
    );
    assert_eq!(down["statusCode"], 5);
    power("ON");
    wait_phase(&server, &top, "up");

    assert_eq!(
        server.call("DELETE", &item(&top), Auth::User, None).status,
        200
    );
    assert_eq!(server.get(&item(&top)).status, 404);
    assert_eq!(server.get(PATH).json()["totalCount"], 0);
    wait_gone(&server, &top);
    assert_eq!(server.get(&format!("/rest/vms/{vm}")).status, 404);
}
