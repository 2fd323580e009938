//! Images over HTTP (spec 2.2, 4.3): creation rules, reads by id and name, lists,
//! changes with versions, deletion of images in use, permissions, restarts.

use drover_testkit::{Auth, Reply, TestServer};
use serde_json::{Value, json};

use crate::support::names;

/// A list of images with `query` and `sort` (JSON, encoded here) and other parameters.
fn list(server: &TestServer, query: Value, sort: Value, more: &str) -> Value {
    let encode =
        |v: &Value| form_urlencoded::byte_serialize(v.to_string().as_bytes()).collect::<String>();
    let path = format!(
        "/rest/images?query={}&sort={}{more}",
        encode(&query),
        encode(&sort)
    );
    let reply = server.get(&path);
    assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    reply.json()
}

/// A valid image named `name`, with `more` fields.
fn image(name: &str, more: Value) -> Value {
    let mut body = json!({"name": name, "hypervisor": false, "osType": "linux",
                          "supportsPhysicalMachine": true});
    for (k, v) in more.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn create(server: &TestServer, body: &Value) -> Value {
    let reply = server.send_json("POST", "/rest/images", body);
    assert_eq!(reply.status, 201, "{body}: {}", reply.body);
    reply.json()
}

#[test]
fn images_are_created_read_listed_changed_and_deleted() {
    let server = TestServer::start();
    let reply = server.send_json(
        "POST",
        "/rest/images",
        &image(
            "centos-7.9",
            json!({"type": "linkedclone", "templateName": "gold", "features": ["gpu"],
                   "extensions": {"xcat": {"os": "centos7", "architecture": "x86_64",
                                           "profile": "compute"}},
                   "boot": {"kernel": "centos/vmlinuz", "initramfs": "centos/initrd.img"}}),
        ),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let created = reply.json();
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 24);
    assert!(
        reply
            .header("location")
            .unwrap()
            .ends_with(&format!("/rest/images/{id}"))
    );
    assert_eq!(created["version"], 1);
    assert_eq!(created["active"], true);
    assert_eq!(created["type"], "linkedclone");
    assert_eq!(created["templateName"], "gold");
    assert_eq!(created["supportsVirtualMachine"], false);
    assert_eq!(created["virtualizedImages"], json!([]));
    assert_eq!(
        created["boot"],
        json!({"kernel": "centos/vmlinuz", "initramfs": "centos/initrd.img", "disk": "",
               "readyLine": ""})
    );
    assert_eq!(server.get(&format!("/rest/images/{id}")).json(), created);
    assert_eq!(server.get("/rest/images/centos-7.9").json(), created);
    assert_eq!(server.get("/rest/image/centos-7.9").json(), created);
    server
        .get("/rest/images/nope")
        .assert_refused(404, "nope", &"unknown image");

    // A plain image has an empty templateName.
    let plain = create(
        &server,
        &image("alpine", json!({"supportsVirtualMachine": true})),
    );
    assert_eq!(plain["templateName"], "");
    assert_eq!(plain["type"], "stateful");
    create(&server, &image("debian", json!({"type": "stateless"})));

    // Lists: query, sort, paging, fields.
    let all = list(&server, json!({}), json!({"name": 1}), "");
    assert_eq!(all["totalCount"], 3);
    assert_eq!(names(&all["results"]), ["alpine", "centos-7.9", "debian"]);
    let vms = list(
        &server,
        json!({"supportsVirtualMachine": true}),
        json!({}),
        "",
    );
    assert_eq!(names(&vms["results"]), ["alpine"]);
    let page = list(
        &server,
        json!({"type": {"$ne": "linkedclone"}}),
        json!({"name": -1}),
        "&max=1&fields=name,id",
    );
    assert_eq!(
        (page["totalCount"].clone(), page["resultCount"].clone()),
        (json!(2), json!(1))
    );
    assert_eq!(names(&page["results"]), ["debian"]);
    assert_eq!(page["results"][0].as_object().unwrap().len(), 2);
    let by_id = list(&server, json!({"id": id}), json!({}), "");
    assert_eq!(names(&by_id["results"]), ["centos-7.9"]);

    // A change replaces what it gives; the version grows; a stale one is a conflict.
    let path = format!("/rest/images/{id}");
    let changed = server.send_json(
        "PUT",
        &path,
        &json!({"version": 1, "features": ["gpu", "ib"], "active": false, "name": "centos-7"}),
    );
    assert_eq!(changed.status, 200, "{}", changed.body);
    let changed = changed.json();
    assert_eq!(changed["version"], 2);
    assert_eq!(changed["features"], json!(["gpu", "ib"]));
    assert_eq!(changed["active"], false);
    assert_eq!(changed["templateName"], "gold");
    assert_eq!(server.get("/rest/images/centos-7").json(), changed);
    server
        .send_json("PUT", &path, &json!({"version": 1, "active": true}))
        .assert_refused(409, "stale", &"stale version");
    server
        .send_json("PUT", &path, &json!({"name": "alpine"}))
        .assert_refused(409, "taken", &"rename to a taken name");
    server
        .send_json("PUT", &path, &json!({"type": "stateful"}))
        .assert_refused(
            400,
            "templateName",
            &"leaving linkedclone with a template name",
        );
    server
        .send_json("PUT", "/rest/images/nope", &json!({"active": true}))
        .assert_refused(404, "nope", &"change of an unknown image");
    // Unchanged by the refusals.
    assert_eq!(server.get(&path).json()["version"], 2);

    // The singular path changes and deletes too.
    let singular = server.send_json("PUT", "/rest/image/debian", &json!({"osType": "Linux"}));
    assert_eq!(singular.status, 200, "{}", singular.body);
    assert_eq!(singular.json()["osType"], "Linux");
    let deleted = server.send("DELETE", "/rest/image/debian", Auth::Admin);
    assert_eq!((deleted.status, deleted.json()), (200, json!({})));
    let deleted = server.send("DELETE", &path, Auth::Admin);
    assert_eq!((deleted.status, deleted.json()), (200, json!({})));
    server
        .send("DELETE", &path, Auth::Admin)
        .assert_refused(404, "No image", &"deleted twice");
    assert_eq!(
        names(&server.get("/rest/images").json()["results"]),
        ["alpine"]
    );
}

#[test]
fn every_rule_of_an_image_is_a_clear_refusal() {
    let server = TestServer::start();
    create(&server, &image("taken", json!({})));
    let guest = create(
        &server,
        &image("guest", json!({"supportsVirtualMachine": true})),
    );
    let hv = |more: Value| {
        let mut body = image("hv", json!({"hypervisor": true}));
        for (k, v) in more.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let xcat = json!({"os": "c7", "architecture": "x86_64", "profile": "compute"});
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            json!({"hypervisor": false, "osType": "linux", "supportsPhysicalMachine": true}),
            400,
            "name: required",
        ),
        (
            json!({"name": "a", "osType": "linux", "supportsPhysicalMachine": true}),
            400,
            "hypervisor: required",
        ),
        (
            json!({"name": "a", "hypervisor": false, "supportsPhysicalMachine": true}),
            400,
            "osType: required",
        ),
        (image("a b", json!({})), 400, "name:"),
        (image("a/b", json!({})), 400, "name:"),
        (image("", json!({})), 400, "name:"),
        (image(&"n".repeat(129), json!({})), 400, "name:"),
        (
            image("0123456789abcdef01234567", json!({})),
            400,
            "form of an image id",
        ),
        (image("taken", json!({})), 409, "taken"),
        (
            image("a", json!({"hypervisor": "maybe"})),
            400,
            "hypervisor:",
        ),
        (image("a", json!({"osType": ""})), 400, "osType:"),
        (
            image("a", json!({"supportsPhysicalMachine": false})),
            400,
            "supportsPhysicalMachine",
        ),
        (
            image(
                "a",
                json!({"supportsPhysicalMachine": false, "supportsVirtualMachine": false}),
            ),
            400,
            "physical machine, a virtual machine or both",
        ),
        (image("a", json!({"type": "cloned"})), 400, "type:"),
        (
            image("a", json!({"templateName": "gold"})),
            400,
            "templateName:",
        ),
        (
            image("a", json!({"type": "stateless", "templateName": "gold"})),
            400,
            "linkedclone",
        ),
        (
            image("a", json!({"features": {"gpu": 1}})),
            400,
            "features:",
        ),
        (
            image("a", json!({"features": ["gpu", ""]})),
            400,
            "features[1]",
        ),
        (
            image("a", json!({"virtualizedImages": [{"name": "guest"}]})),
            400,
            "hypervisor",
        ),
        (
            hv(json!({"virtualizedImages": [{"name": "nope"}, {"id": "0"}]})),
            400,
            "name 'nope'",
        ),
        (
            hv(json!({"virtualizedImages": [{"name": "nope"}, {"id": "0"}]})),
            400,
            "id '0'",
        ),
        (
            hv(json!({"virtualizedImages": [{"title": "guest"}]})),
            400,
            "virtualizedImages[0].id",
        ),
        (
            hv(json!({"virtualizedImages": ["guest"]})),
            400,
            "virtualizedImages[0]",
        ),
        (image("a", json!({"extensions": []})), 400, "extensions:"),
        (
            image("a", json!({"extensions": {"xcat": "rhel"}})),
            400,
            "extensions.xcat:",
        ),
        (
            image(
                "a",
                json!({"extensions": {"xcat": {"os": "c7", "architecture": "x86_64"}}}),
            ),
            400,
            "extensions.xcat.profile",
        ),
        (
            hv(json!({"extensions": {"xcat": xcat}})),
            400,
            "extensions.xcat.hvType",
        ),
        (
            hv(json!({"extensions": {"xcat": xcat}})),
            400,
            "extensions.xcat.vmGroupName",
        ),
        (image("a", json!({"version": 3})), 400, "version:"),
        (image("a", json!({"supportsVM": true})), 400, "supportsVM"),
        (
            image("a", json!({"boot": {"kernel": "/boot/vmlinuz"}})),
            400,
            "boot.kernel",
        ),
        (
            image("a", json!({"boot": {"disk": "../disk.img"}})),
            400,
            "boot.disk",
        ),
        (
            image("a", json!({"boot": {"initramfs": "a/../../b"}})),
            400,
            "'..'",
        ),
        (
            image("a", json!({"boot": {"kernel": "a\u{0}b"}})),
            400,
            "boot.kernel",
        ),
        (
            image("a", json!({"boot": {"initrd": "x"}})),
            400,
            "boot.initrd",
        ),
        (image("a", json!({"boot": "vmlinuz"})), 400, "boot:"),
        (json!([1]), 400, "object"),
    ];
    for (body, status, words) in &cases {
        server
            .send_json("POST", "/rest/images", body)
            .assert_refused(*status, words, body);
    }
    let broken = server.call(
        "POST",
        "/rest/images",
        Auth::Admin,
        Some(("application/json", b"{".to_vec())),
    );
    broken.assert_refused(400, "Malformed JSON", &"broken JSON");
    // One answer names every problem, the missing references among them.
    let both = server.send_json(
        "POST",
        "/rest/images",
        &json!({"name": "a", "hypervisor": true, "supportsPhysicalMachine": true,
                "virtualizedImages": [{"name": "nope"}]}),
    );
    both.assert_refused(400, "osType: required", &"several problems");
    assert!(both.messages().contains("name 'nope'"), "{}", both.body);
    assert_eq!(
        server.get("/rest/images").json()["totalCount"],
        2,
        "nothing more was created"
    );

    // What the rules allow.
    let host = create(
        &server,
        &hv(
            json!({"virtualizedImages": [{"name": "guest"}, {"id": guest["id"]}],
                   "extensions": {"xcat": {"os": "c7", "architecture": "x86_64",
                       "profile": "compute", "hvType": "kvm", "hvGroupName": "hv",
                       "vmGroupName": "vm"}, "other-manager": {"anything": [1, 2]}}}),
        ),
    );
    assert_eq!(host["virtualizedImages"], json!([{"id": guest["id"]}]));
    assert_eq!(
        host["extensions"]["other-manager"],
        json!({"anything": [1, 2]})
    );
    // An image cannot virtualize itself; a hypervisor keeps its images unless it lets go.
    server
        .send_json(
            "PUT",
            "/rest/images/hv",
            &json!({"virtualizedImages": [{"name": "hv"}]}),
        )
        .assert_refused(400, "itself", &"self reference");
    server
        .send_json("PUT", "/rest/images/hv", &json!({"hypervisor": false}))
        .assert_refused(400, "virtualizedImages", &"no longer a hypervisor");
}

#[test]
fn an_image_in_use_is_not_deleted() {
    let server = TestServer::start();
    let guest = create(
        &server,
        &image("guest", json!({"supportsVirtualMachine": true})),
    );
    create(
        &server,
        &image(
            "hv",
            json!({"hypervisor": true, "virtualizedImages": [{"name": "guest"}]}),
        ),
    );
    let guest_path = format!("/rest/images/{}", guest["id"].as_str().unwrap());
    server
        .send("DELETE", &guest_path, Auth::Admin)
        .assert_refused(409, "hv", &"deleting an image another virtualizes");
    assert_eq!(server.get(&guest_path).status, 200);
    let freed = server.send_json("PUT", "/rest/images/hv", &json!({"virtualizedImages": []}));
    assert_eq!(freed.status, 200, "{}", freed.body);
    assert_eq!(server.send("DELETE", &guest_path, Auth::Admin).status, 200);
}

#[test]
fn ordinary_users_read_images_and_only_administrators_change_them() {
    let server = TestServer::start();
    create(&server, &image("base", json!({})));
    let as_user = |method: &str, path: &str, body: Option<&Value>| -> Reply {
        let body = body.map(|b| ("application/json", b.to_string().into_bytes()));
        server.call(method, path, Auth::User, body)
    };
    assert_eq!(as_user("GET", "/rest/images", None).json()["totalCount"], 1);
    assert_eq!(as_user("GET", "/rest/images/base", None).status, 200);
    let new = image("mine", json!({}));
    for (method, path) in [
        ("POST", "/rest/images"),
        ("PUT", "/rest/images/base"),
        ("PUT", "/rest/image/base"),
        ("DELETE", "/rest/images/base"),
        ("DELETE", "/rest/image/base"),
    ] {
        as_user(method, path, Some(&new)).assert_refused(
            403,
            "images:",
            &format!("{method} {path}"),
        );
        server.call(method, path, Auth::None, None).assert_refused(
            401,
            "authenticated",
            &format!("{method} {path} unauthenticated"),
        );
    }
    server.get_as(Auth::None, "/rest/images").assert_refused(
        401,
        "authenticated",
        &"list unauthenticated",
    );
    assert_eq!(server.get("/rest/images/base").json()["version"], 1);
}

#[test]
fn images_survive_a_restart() {
    let server = TestServer::start();
    let guest = create(
        &server,
        &image("guest", json!({"supportsVirtualMachine": true})),
    );
    let host = create(
        &server,
        &image(
            "hv",
            json!({"hypervisor": true, "virtualizedImages": [{"name": "guest"}],
                            "boot": {"disk": "hv/disk.qcow2"}}),
        ),
    );
    let server = server.restart();
    assert_eq!(server.get("/rest/images/hv").json(), host);
    assert_eq!(server.get("/rest/images/guest").json(), guest);
    // New ids still follow the old ones, and the use survives too.
    let third = create(&server, &image("third", json!({})));
    assert!(third["id"].as_str().unwrap() > host["id"].as_str().unwrap());
    server
        .send("DELETE", "/rest/images/guest", Auth::Admin)
        .assert_refused(409, "in use", &"use after a restart");
}
