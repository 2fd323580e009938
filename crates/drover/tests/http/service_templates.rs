//! Service templates over HTTP (spec 2.12, 4.11, part 8): creation answering `{id}`,
//! reads by id and by name as a list of one, lists, changes, deletion of included
//! templates, every refusal of 4.11 and part 8 in three messages, permissions.

use drover_testkit::{Auth, Reply, TestServer};
use serde_json::{Value, json};

use crate::support::names;

const PATH: &str = "/rest/service-templates";

fn item(key: &str) -> String {
    format!("{PATH}/{}", drover_testkit::percent_encoded(key))
}

fn encode(v: &Value) -> String {
    form_urlencoded::byte_serialize(v.to_string().as_bytes()).collect()
}

/// A vm template named `name`, with `more` fields.
fn vm(name: &str, more: Value) -> Value {
    let mut body = json!({"name": name, "type": "vm",
                          "attributes": {"sched": {"job": {"image": "centos", "template": "vm"}}}});
    for (k, v) in more.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// A container template named `name` including `included` (local name, template).
fn container(name: &str, included: &[(&str, Value)], dependencies: Value) -> Value {
    let included: Vec<Value> = included
        .iter()
        .map(|(local, template)| json!({"localName": local, "serviceTemplate": template}))
        .collect();
    json!({"name": name, "type": "container", "includedServices": included,
           "attributes": {"sched": {"dependencies": dependencies}}})
}

/// Creates `body`, answering its id.
fn create(server: &TestServer, body: &Value) -> String {
    let reply = server.send_json("POST", PATH, body);
    assert_eq!(reply.status, 201, "{body}: {}", reply.body);
    let answer = reply.json();
    assert_eq!(
        answer.as_object().unwrap().len(),
        1,
        "only the id: {answer}"
    );
    answer["id"].as_str().unwrap().to_string()
}

/// The one template `key` names (asserting the list envelope of one).
fn read(server: &TestServer, key: &str) -> Value {
    let reply = server.get(&item(key));
    assert_eq!(reply.status, 200, "{key}: {}", reply.body);
    let list = reply.json();
    assert_eq!(
        (list["totalCount"].clone(), list["resultCount"].clone()),
        (json!(1), json!(1)),
        "{list}"
    );
    list["results"][0].clone()
}

/// Asserts a refusal of three or more messages (summary, reason, advice) mentioning
/// `words`.
fn refused(reply: &Reply, status: u16, words: &str, case: &dyn std::fmt::Display) {
    reply.assert_refused(status, words, case);
    let messages = reply.json()["messages"].as_array().unwrap().len();
    assert!(
        messages >= 3,
        "{case}: summary, reason, advice: {}",
        reply.body
    );
}

#[test]
fn service_templates_are_created_read_listed_changed_and_deleted() {
    let server = TestServer::start();
    let reply = server.send_json(
        "POST",
        PATH,
        &vm(
            "web server",
            json!({"label": "A web server", "tags": ["web", "small"],
                   "attributes": {"sched": {"job": {"image": "centos", "template": "vm",
                                   "features": ["ssd"], "requestedHosts": ["n1"],
                                   "resources": {"procs": 2, "mem": 2048},
                                   "variables": {"PORT": "80"}}},
                                  "portal": {"name": "Web", "service-description": "d",
                                             "form": [{"f": 1}], "access": "all"}}}),
        ),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let id = reply.json()["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 24);
    assert!(id.bytes().all(|b| b.is_ascii_alphanumeric()));
    assert!(reply.header("location").unwrap().ends_with(&item(&id)));

    let web = read(&server, &id);
    assert_eq!(read(&server, "web server"), web);
    assert_eq!(web["id"], id.as_str());
    assert_eq!(web["name"], "web server");
    assert_eq!(web["label"], "A web server");
    assert_eq!(web["type"], "vm");
    assert_eq!(web["createdBy"], "admin");
    assert_eq!(web["tags"], json!(["web", "small"]));
    assert_eq!(web["includedServices"], json!([]));
    assert_eq!(web["version"], 1);
    assert!(web["modified"].as_str().unwrap().ends_with(" UTC"), "{web}");
    assert_eq!(web["attributes"]["portal"]["form"], json!([{"f": 1}]));
    assert_eq!(
        web["attributes"]["sched"]["job"]["resources"],
        json!({"procs": 2, "mem": 2048})
    );
    server
        .get(&item("nope"))
        .assert_refused(404, "No service template 'nope'", &"unknown");

    // A container of the web server (by name, {name} and {id}), with dependencies.
    let db = create(&server, &vm("db", json!({})));
    let stack = create(
        &server,
        &container(
            "stack",
            &[
                ("front", json!("web server")),
                ("back", json!({"name": "db"})),
                ("spare", json!({"id": id})),
            ],
            json!([{"localName": "front", "dependency": ["back"]},
                   {"service": "spare", "dependency": ["back", "front"]}]),
        ),
    );
    let stack = read(&server, &stack);
    assert_eq!(
        stack["includedServices"],
        json!([{"localName": "front", "serviceTemplate": {"id": id, "name": "web server"}},
               {"localName": "back", "serviceTemplate": {"id": db, "name": "db"}},
               {"localName": "spare", "serviceTemplate": {"id": id, "name": "web server"}}])
    );
    assert_eq!(
        stack["attributes"]["sched"]["dependencies"][1],
        json!({"localName": "spare", "dependency": ["back", "front"]})
    );

    // Lists: query (on the wire shape), sort, paging, fields.
    let list = |query: Value, sort: Value, more: &str| -> Value {
        let path = format!(
            "{PATH}?query={}&sort={}{more}",
            encode(&query),
            encode(&sort)
        );
        let reply = server.get(&path);
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        reply.json()
    };
    let all = list(json!({}), json!({"name": -1}), "");
    assert_eq!(all["totalCount"], 3);
    assert_eq!(names(&all["results"]), ["web server", "stack", "db"]);
    let vms = list(
        json!({"type": "vm"}),
        json!({"name": 1}),
        "&max=1&fields=name,id",
    );
    assert_eq!(
        (vms["totalCount"].clone(), vms["resultCount"].clone()),
        (json!(2), json!(1))
    );
    assert_eq!(vms["results"], json!([{"name": "db", "id": db}]));
    let including = list(
        json!({"includedServices.serviceTemplate.name": "db"}),
        json!({}),
        "",
    );
    assert_eq!(names(&including["results"]), ["stack"]);
    let tagged = list(json!({"tags": "web", "createdBy": "admin"}), json!({}), "");
    assert_eq!(names(&tagged["results"]), ["web server"]);

    // A change replaces what it gives; the version grows; a stale one is a conflict;
    // a new name reaches the templates that include it.
    let changed = server.send_json(
        "PUT",
        &item(&id),
        &json!({"version": 1, "name": "web", "tags": ["web"], "label": "Web"}),
    );
    assert_eq!(changed.status, 200, "{}", changed.body);
    let changed = changed.json();
    assert_eq!(changed["version"], 2);
    assert_eq!(changed["name"], "web");
    assert_eq!(changed["tags"], json!(["web"]));
    assert_eq!(changed["attributes"], web["attributes"]);
    assert_eq!(changed["createdBy"], "admin");
    assert_eq!(read(&server, "web"), changed);
    assert_eq!(
        read(&server, "stack")["includedServices"][0]["serviceTemplate"],
        json!({"id": id, "name": "web"})
    );
    // What a client read, sent back whole, is a change of nothing but the date.
    let again = server.send_json("PUT", &item("stack"), &read(&server, "stack"));
    assert_eq!(again.status, 200, "{}", again.body);
    let again = again.json();
    assert_eq!(again["version"], 3);
    assert_eq!(
        again["includedServices"],
        read(&server, "stack")["includedServices"]
    );
    assert_eq!(again["attributes"], stack["attributes"]);
    refused(
        &server.send_json("PUT", &item("web"), &json!({"version": 1, "label": "x"})),
        409,
        "stale",
        &"stale version",
    );
    refused(
        &server.send_json("PUT", &item("web"), &json!({"name": "db"})),
        409,
        "not unique",
        &"rename to a taken name",
    );
    refused(
        &server.send_json("PUT", &item("stack"), &json!({"type": "storage"})),
        400,
        "cannot include services",
        &"a storage template including services",
    );
    server
        .send_json("PUT", &item("nope"), &json!({"label": "x"}))
        .assert_refused(404, "nope", &"change of an unknown template");
    assert_eq!(
        read(&server, "web")["version"],
        2,
        "unchanged by the refusals"
    );

    // Deletion: not while included (409 naming the includer); then in order.
    refused(
        &server.send("DELETE", &item("db"), Auth::Admin),
        409,
        "included by the service templates 'stack'",
        &"deleting an included template",
    );
    let deleted = server.send("DELETE", &item("stack"), Auth::Admin);
    assert_eq!((deleted.status, deleted.json()), (200, json!({})));
    let deleted = server.send("DELETE", &item(&db), Auth::Admin);
    assert_eq!((deleted.status, deleted.json()), (200, json!({})));
    server
        .send("DELETE", &item(&db), Auth::Admin)
        .assert_refused(404, "No service template", &"deleted twice");
    assert_eq!(names(&server.get(PATH).json()["results"]), ["web"]);
}

#[test]
fn every_rule_of_a_service_template_is_a_clear_refusal() {
    let server = TestServer::start();
    create(&server, &vm("taken", json!({})));
    create(&server, &vm("db", json!({})));
    let cases: Vec<(Value, u16, &str)> = vec![
        // 4.11 (a) to (d).
        (vm("taken", json!({})), 409, "'taken' is not unique"),
        (
            container("c", &[("a", json!("db")), ("a", json!("taken"))], json!([])),
            400,
            "the local names 'a' are given to more than one",
        ),
        (
            container(
                "c",
                &[
                    ("a", json!("nope")),
                    ("b", json!({"id": "0"})),
                    ("c", json!("db")),
                ],
                json!([]),
            ),
            400,
            "service templates that do not exist: name 'nope', id '0'",
        ),
        (
            container(
                "c",
                &[("a", json!("db"))],
                json!([{"localName": "a", "dependency": ["x", "y"]}]),
            ),
            400,
            "services the template does not include: 'x', 'y'",
        ),
        (vm("a:b", json!({})), 400, "contains a colon"),
        // Part 8: the characters, the form of an id.
        (vm("a_b", json!({})), 400, "contains '_'"),
        (vm("a/b", json!({})), 400, "contains '/'"),
        (vm("a,b", json!({})), 400, "contains ','"),
        (vm("", json!({})), 400, "name:"),
        (vm(&"n".repeat(129), json!({})), 400, "too long"),
        (
            vm("0123456789abcdef01234567", json!({})),
            400,
            "form of a service template id",
        ),
        // vm and pm need an image and a job template.
        (
            json!({"name": "v", "type": "vm"}),
            400,
            "attributes.sched.job.image: required",
        ),
        (
            json!({"name": "v", "type": "pm", "attributes": {"sched": {"job": {"image": "i"}}}}),
            400,
            "attributes.sched.job.template: required",
        ),
        // Only containers include services or carry dependencies.
        (
            vm(
                "v",
                json!({"includedServices": [{"localName": "a", "serviceTemplate": "db"}]}),
            ),
            400,
            "a vm template cannot include services",
        ),
        (
            json!({"name": "s", "type": "storage",
                   "attributes": {"sched": {"dependencies": [{"localName": "a", "dependency": []}]}}}),
            400,
            "a storage template cannot have dependencies",
        ),
        (
            container(
                "c",
                &[("a", json!("db")), ("b", json!("db"))],
                json!([{"localName": "a", "dependency": ["b"]}, {"localName": "b", "dependency": ["a"]}]),
            ),
            400,
            "cycle: a -> b -> a",
        ),
        // Shapes and fields.
        (json!({"name": "x"}), 400, "type: required"),
        (json!({"name": "x", "type": "box"}), 400, "type: 'box'"),
        (vm("x", json!({"owner": "me"})), 400, "owner: not a field"),
        (vm("x", json!({"version": 2})), 400, "version:"),
        (vm("x", json!({"attributes": []})), 400, "attributes:"),
        (
            vm(
                "x",
                json!({"attributes": {"sched": {"vc": {"id": "v"},
                                          "job": {"image": "i", "template": "t"}}}}),
            ),
            400,
            "attributes.sched.vc",
        ),
        (
            vm(
                "x",
                json!({"attributes": {"sched": {"job": {"image": "i", "template": "t",
                                                             "variables": {"A B": "1"}}}}}),
            ),
            400,
            "attributes.sched.job.variables",
        ),
        (
            container("c", &[("a:b", json!("db"))], json!([])),
            400,
            "includedServices[0].localName",
        ),
        (
            json!({"name": "c", "type": "container", "includedServices": [{"localName": "a"}]}),
            400,
            "includedServices[0].serviceTemplate: required",
        ),
        (json!([1]), 400, "object"),
    ];
    for (body, status, words) in &cases {
        let reply = server.send_json("POST", PATH, body);
        reply.assert_refused(*status, words, body);
        if body.is_object() {
            refused(&reply, *status, words, body);
            assert_eq!(
                reply.json()["messages"][0],
                "The service template was not created",
                "{body}"
            );
        }
    }
    // One answer names every problem.
    let several = server.send_json(
        "POST",
        PATH,
        &json!({"name": "a:b", "type": "container",
                "includedServices": [{"localName": "x", "serviceTemplate": "nope"}]}),
    );
    several.assert_refused(400, "colon", &"several problems");
    assert!(
        several.messages().contains("name 'nope'"),
        "{}",
        several.body
    );
    assert_eq!(
        server.get(PATH).json()["totalCount"],
        2,
        "nothing more was created"
    );

    // A template cannot come to include itself.
    create(
        &server,
        &container("inner", &[("d", json!("db"))], json!([])),
    );
    create(
        &server,
        &container("outer", &[("i", json!("inner"))], json!([])),
    );
    refused(
        &server.send_json(
            "PUT",
            &item("inner"),
            &json!({"includedServices": [{"localName": "o", "serviceTemplate": "outer"}]}),
        ),
        400,
        "would include itself: inner -> outer -> inner",
        &"a cycle of inclusion",
    );
    // What the rules allow: every character of part 8, a 24-character non-hex name.
    let odd = "a-b.c?d@e~f#[g]<h>|i=j&(k)*{l}`m$ n";
    let id = create(&server, &json!({"name": odd, "type": "storage"}));
    assert_eq!(read(&server, odd)["id"], id.as_str());
    let long = "abcdefghijklmnopqrstuvwx";
    create(&server, &json!({"name": long, "type": "storage"}));
    assert_eq!(read(&server, long)["name"], long);
}

#[test]
fn ordinary_users_read_service_templates_and_only_administrators_change_them() {
    let server = TestServer::start();
    create(&server, &vm("base", json!({})));
    let as_user = |method: &str, path: &str, body: Option<&Value>| -> Reply {
        let body = body.map(|b| ("application/json", b.to_string().into_bytes()));
        server.call(method, path, Auth::User, body)
    };
    assert_eq!(as_user("GET", PATH, None).json()["totalCount"], 1);
    assert_eq!(as_user("GET", &item("base"), None).status, 200);
    let new = vm("mine", json!({}));
    for (method, path) in [
        ("POST", PATH.to_string()),
        ("PUT", item("base")),
        ("DELETE", item("base")),
    ] {
        as_user(method, &path, Some(&new)).assert_refused(
            403,
            "service-templates:",
            &format!("{method} {path}"),
        );
        server.call(method, &path, Auth::None, None).assert_refused(
            401,
            "authenticated",
            &format!("{method} {path} unauthenticated"),
        );
    }
    assert_eq!(read(&server, "base")["version"], 1);
}

#[test]
fn service_templates_survive_a_restart() {
    let server = TestServer::start();
    let db = create(&server, &vm("db", json!({})));
    create(
        &server,
        &container("stack", &[("d", json!("db"))], json!([])),
    );
    let before = read(&server, "stack");
    let server = server.restart();
    assert_eq!(read(&server, "stack"), before);
    let third = create(&server, &vm("third", json!({})));
    assert!(third > db, "ids keep growing");
    refused(
        &server.send("DELETE", &item("db"), Auth::Admin),
        409,
        "stack",
        &"inclusion after a restart",
    );
}

/// A null member of `attributes` is one not given: it is not kept, so the template is
/// never answered with `"sched": null` where the document says an object (Schemathesis
/// found one).
#[test]
fn null_attributes_are_not_kept() {
    let server = TestServer::start();
    create(
        &server,
        &json!({"name": "nulls", "type": "storage", "attributes": {"sched": null, "x": {"y": null}}}),
    );
    assert_eq!(read(&server, "nulls")["attributes"], json!({"x": {}}));
    let reply = server.send_json(
        "PUT",
        &item("nulls"),
        &json!({"attributes": {"sched": null}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(read(&server, "nulls")["attributes"], json!({}));
}
