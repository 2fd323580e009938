//! Principals over HTTP (spec 2.19, 4.16): creation rules, change-modes, versions.

use drover_testkit::{Auth, TestServer};
use serde_json::json;

use crate::support::names;

#[test]
fn principals_are_created_changed_by_mode_versioned_and_deleted() {
    let server = TestServer::start();
    let created = server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "physics-staff", "description": "lab",
                "attachedRoles": [{"name": "user"}],
                "groups": [{"name": "physics", "type": "LDAPGROUP"}],
                "users": [{"name": "ann", "type": "LDAP"}]}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let principal = created.json();
    let id = principal["id"].as_str().unwrap().to_string();
    assert_eq!(principal["version"], 1);
    assert_eq!(
        principal["attachedRoles"],
        json!([{"id": "user", "name": "user"}])
    );
    assert_eq!(
        server.get(&format!("/rest/principals/{id}")).json()["name"],
        "physics-staff"
    );
    assert_eq!(
        server.get("/rest/principals/physics-staff").json()["id"],
        id.as_str()
    );
    assert_eq!(server.get("/rest/principal/physics-staff").status, 200);

    let count = || server.get("/rest/principals").json()["totalCount"].clone();
    for (body, status, expected) in [
        (json!({"name": "physics-staff"}), 409, "taken"),
        (json!({"description": "no name"}), 400, "name"),
        (json!({"name": "bad name!"}), 400, "name"),
        (
            json!({"name": "x", "attachedRoles": [{"name": "wizard"}]}),
            400,
            "wizard",
        ),
        (
            json!({"name": "x", "users": [{"name": "bob", "type": "NIS"}]}),
            400,
            "users[0].type",
        ),
        (
            json!({"name": "x", "groups": [{"type": "LDAPOU"}]}),
            400,
            "groups[0].name",
        ),
    ] {
        let reply = server.send_json("POST", "/rest/principals", &body);
        assert_eq!(reply.status, status, "{body}: {}", reply.body);
        assert!(
            reply.messages().contains(expected),
            "{body}: {}",
            reply.body
        );
    }
    assert_eq!(count(), 1, "nothing was created");

    let path = format!("/rest/principals/{id}");
    // add, then remove, then set (the default) which replaces what it names.
    let added = server.send_json(
        "PUT",
        &format!("{path}?change-mode=add"),
        &json!({"users": [{"name": "bob", "type": "PAM"}, {"name": "ann", "type": "LDAP"}]}),
    );
    assert_eq!(added.status, 200, "{}", added.body);
    assert_eq!(names(&added.json()["users"]), ["ann", "bob"]);
    assert_eq!(added.json()["version"], 2);
    let removed = server
        .send_json(
            "PUT",
            &format!("{path}?change-mode=remove"),
            &json!({"users": [{"name": "ann", "type": "LDAP"}]}),
        )
        .json();
    assert_eq!(names(&removed["users"]), ["bob"]);
    let set = server
        .send_json(
            "PUT",
            &path,
            &json!({"users": [{"name": "cy", "type": "LDAP"}], "attachedRoles": [{"id": "operator"}]}),
        )
        .json();
    assert_eq!(names(&set["users"]), ["cy"]);
    assert_eq!(
        set["attachedRoles"],
        json!([{"id": "operator", "name": "operator"}])
    );
    assert_eq!(names(&set["groups"]), ["physics"], "not named: kept");
    // A stale version is a conflict and changes nothing.
    let stale = server.send_json("PUT", &path, &json!({"version": 1, "description": "late"}));
    assert_eq!(stale.status, 409, "{}", stale.body);
    assert_eq!(server.get(&path).json()["description"], "lab");
    let current = server.get(&path).json()["version"].clone();
    let fresh = server.send_json(
        "PUT",
        &path,
        &json!({"version": current, "description": "now"}),
    );
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    assert_eq!(fresh.json()["description"], "now");
    assert_eq!(
        server
            .send_json("PUT", &format!("{path}?change-mode=merge"), &json!({}))
            .status,
        400
    );
    // Another principal may not take its name.
    let other = server
        .send_json("POST", "/rest/principals", &json!({"name": "other"}))
        .json();
    let rename = server.send_json(
        "PUT",
        &format!("/rest/principals/{}", other["id"].as_str().unwrap()),
        &json!({"name": "physics-staff"}),
    );
    assert_eq!(rename.status, 409, "{}", rename.body);

    // The built-in user role does not read principals.
    assert_eq!(server.get_as(Auth::User, &path).status, 403);
    assert_eq!(server.call("DELETE", &path, Auth::User, None).status, 403);
    assert_eq!(server.call("DELETE", &path, Auth::Admin, None).status, 200);
    assert_eq!(server.get(&path).status, 404);
    assert_eq!(server.call("DELETE", &path, Auth::Admin, None).status, 404);
}
