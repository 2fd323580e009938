//! A field of a body the operation does not read is named in the answer, never dropped
//! in silence (issue #32 item 5).

use drover_testkit::{Auth, TestServer, submit_as};
use serde_json::{Value, json};

fn messages(answer: &Value) -> Vec<String> {
    answer["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_job_submitted_with_args_is_told_args_is_not_a_field() {
    let server = TestServer::start();
    // Version 2 names it `commandLineArguments`.
    let reply = submit_as(
        &server,
        Auth::Admin,
        &json!({"commandFile": "/bin/true", "args": ["-v"], "duration": 60}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let answer = reply.json();
    assert!(answer["name"].is_string(), "{answer}");
    assert_eq!(
        messages(&answer),
        ["args: unknown field, ignored"],
        "{answer}"
    );
    // Nested objects too, by path; known fields are not named.
    let reply = submit_as(
        &server,
        Auth::Admin,
        &json!({"commandFile": "/bin/true", "commandLineArguments": ["-v"],
                "credentials": {"acount": "x"}}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(
        messages(&reply.json()),
        ["credentials.acount: unknown field, ignored"]
    );
    let reply = submit_as(&server, Auth::Admin, &json!({"commandFile": "/bin/true"}));
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert!(reply.json().get("messages").is_none(), "{}", reply.body);
    // A refused body names its unknown fields beside its problems.
    let reply = submit_as(&server, Auth::Admin, &json!({"args": ["-v"]}));
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(
        messages(&reply.json()).contains(&"args: unknown field, ignored".to_string()),
        "{}",
        reply.body
    );
}

#[test]
fn a_version_1_job_and_a_container_name_their_unknown_fields_too() {
    let server = TestServer::start();
    let reply = server.send_json(
        "POST",
        "/rest/jobs",
        &json!({"commandFile": "/bin/true", "commandLineArguments": "-v", "wallclock": 5}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(
        messages(&reply.json()),
        ["wallclock: unknown field, ignored"]
    );
    let reply = server.send_json(
        "POST",
        "/rest/vcs",
        &json!({"description": "mine", "descripton": "typo"}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let answer = reply.json();
    assert!(answer["id"].is_string(), "{answer}");
    assert_eq!(messages(&answer), ["descripton: unknown field, ignored"]);
    // Where the operation refuses what it does not know, the refusal names it.
    let id = answer["id"].as_str().unwrap();
    let reply = server.send_json(
        "PUT",
        &format!("/rest/vcs/{id}?change-mode=set"),
        &json!({"description": "new", "colour": "red"}),
    );
    reply.assert_refused(400, "colour", &"an unknown field of a container change");
    // A change answering {messages} gets the warning after its own message.
    let nodes = server.get("/rest/nodes").json();
    let node = nodes["results"][0]["id"].as_str().unwrap().to_string();
    let reply = server.send_json(
        "PUT",
        &format!("/rest/nodes/{node}"),
        &json!({"messages": ["maintenance on Friday"], "colour": "red"}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let said = messages(&reply.json());
    assert_eq!(
        said.last().unwrap(),
        "colour: unknown field, ignored",
        "{said:?}"
    );
    assert!(said.len() >= 2, "{said:?}");
}

/// What an unknown field holds is not kept, so a NUL character inside it is no reason to
/// refuse the body (Schemathesis found a container refused for one); a NUL in a field
/// that is read, or in a field's name, still is.
#[test]
fn a_nul_inside_an_unknown_field_is_ignored_with_it() {
    let server = TestServer::start();
    let reply = server.send_json(
        "POST",
        "/rest/vcs",
        &json!({"description": "mine", "extra": {"k\u{0}": ["\u{0}"]}}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(messages(&reply.json()), ["extra: unknown field, ignored"]);
    let reply = server.send_json("POST", "/rest/vcs", &json!({"description": "a\u{0}b"}));
    assert_eq!(reply.status, 400, "{}", reply.body);
    let reply = server.send_json(
        "POST",
        "/rest/vcs",
        &json!({"description": "x", "e\u{0}": 1}),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
}

/// A text field takes a string: a boolean or a number is the wrong type, named, not
/// stored as its text (Schemathesis found roles named "false"); and what the document
/// says must not be empty is refused empty.
#[test]
fn a_text_field_refuses_a_boolean_or_a_number() {
    let server = TestServer::start();
    for name in [json!(false), json!(12)] {
        let reply = server.send_json(
            "POST",
            "/rest/roles",
            &json!({"name": name, "permissions": []}),
        );
        assert_eq!(reply.status, 400, "{}", reply.body);
        assert!(
            messages(&reply.json())
                .iter()
                .any(|m| m.starts_with("name: expected a string")),
            "{}",
            reply.body
        );
    }
    let reply = server.send_json(
        "POST",
        "/rest/events",
        &json!({"eventType": "x", "associatedObjects": [{"type": "VM", "id": ""}]}),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
    // A list of strings is a list, not a string of comma-separated items.
    let reply = server.send_json(
        "POST",
        "/rest/events",
        &json!({"eventType": "x", "arguments": "a,b"}),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
    // An owner needs a name that names someone.
    let reply = server.send_json(
        "POST",
        "/rest/vcs",
        &json!({"description": "x", "owner": {"name": ""}}),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
}

/// An image's `id` in a change body is not used (the path names the image) but must
/// still be a string, as the document says (Schemathesis found `"id": {}` taken).
#[test]
fn an_images_id_in_a_body_must_be_a_string() {
    let server = TestServer::start();
    let reply = server.send_json(
        "POST",
        "/rest/images",
        &json!({"name": "img", "hypervisor": false, "osType": "linux",
                "supportsPhysicalMachine": true}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let reply = server.send_json("PUT", "/rest/images/img", &json!({"id": {}, "osType": "x"}));
    assert_eq!(reply.status, 400, "{}", reply.body);
    let reply = server.send_json("PUT", "/rest/images/img", &json!({"osType": "x"}));
    assert_eq!(reply.status, 200, "{}", reply.body);
}
