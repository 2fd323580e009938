//! Roles and permissions over the whole router: what each built-in role may and may not
//! do, roles managed through `/rest/roles`, ownership scoping, proxying by role.

use drover_testkit::{ADMIN, Auth, PASSWORD, TestServer, USER};
use serde_json::{Value, json};

use crate::access::documented_routes;

fn as_user(name: &str) -> Auth {
    Auth::Basic(name.into(), PASSWORD.into())
}

/// A server with `olga`, made an operator through a principal naming her (PAM, as local
/// users are named), and `nora`, who holds no role at all once the default role is gone.
fn server_with_roles(default_roles: &[&str]) -> TestServer {
    let roles: Vec<String> = default_roles.iter().map(|r| r.to_string()).collect();
    let server = TestServer::builder()
        .user("olga", false)
        .user("nora", false)
        .config(move |c| c.access.default_roles = roles)
        .start();
    let created = server.send_json(
        "POST",
        "/rest/principals",
        &json!({
            "name": "operators",
            "attachedRoles": [{"name": "operator"}],
            "users": [{"name": "olga", "type": "PAM"}],
        }),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    server
}

#[test]
fn every_route_declares_a_permission_and_refuses_a_user_without_it() {
    let server = server_with_roles(&[]);
    let document = server.get_as(Auth::None, "/rest/openapi.json").json();
    let mut checked = 0;
    for (method, path, public) in documented_routes(&server) {
        if public {
            continue;
        }
        let template = document["paths"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(p, _)| {
                p.split('/')
                    .map(|s| if s.starts_with('{') { "x" } else { s })
                    .collect::<Vec<_>>()
                    .join("/")
                    == path
            })
            .unwrap()
            .1;
        // The OAuth endpoints authenticate a portal client, not a user with roles
        // (`oauth.rs` tests them).
        if template[method.to_lowercase()]["security"] == serde_json::json!([{"oauthClient": []}]) {
            continue;
        }
        let permission = template[method.to_lowercase()]["x-drover-permission"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} declares no permission"))
            .to_string();
        let body = Some(("application/json", b"{}".to_vec()));
        let refused = server.call(&method, &path, as_user("nora"), body.clone());
        assert_eq!(refused.status, 403, "{method} {path}: {}", refused.body);
        assert!(
            refused.messages().contains(&permission) && refused.messages().contains("nora"),
            "{method} {path}: {}",
            refused.body
        );
        // A stream's answer never ends: the administrator's is opened in event_stream.rs.
        let operation = &template[method.to_lowercase()];
        if operation["responses"]["200"]["content"]
            .get("text/event-stream")
            .is_some()
        {
            checked += 1;
            continue;
        }
        // The administrator passes the gate everywhere (the handler may still refuse
        // the placeholder id or the empty body).
        let admin = server.call(&method, &path, Auth::Admin, body);
        assert!(
            ![401, 403].contains(&admin.status),
            "{method} {path}: {}",
            admin.body
        );
        checked += 1;
    }
    assert!(checked > 60, "{checked} routes");
}

#[test]
fn each_built_in_role_is_allowed_and_denied_on_representative_routes() {
    let server = server_with_roles(&["user"]);
    // (method, path, administrator, operator, user): whether the gate lets them through.
    let table: &[(&str, &str, bool, bool, bool)] = &[
        ("GET", "/rest/jobs", true, true, true),
        ("POST", "/rest/jobs", true, true, true),
        ("DELETE", "/rest/jobs/x", true, true, true),
        ("GET", "/rest/nodes", true, true, true),
        ("PUT", "/rest/nodes/x", true, true, false),
        ("GET", "/rest/diag/about", true, true, true),
        ("GET", "/rest/permissions", true, true, true),
        ("GET", "/rest/job-templates", true, true, true),
        ("POST", "/rest/reservations", true, true, true),
        ("GET", "/rest/events", true, true, false),
        ("POST", "/rest/events?api-version=3", true, true, false),
        ("DELETE", "/rest/reports/x", true, true, false),
        ("GET", "/rest/reports", true, true, true),
        ("GET", "/rest/principals", true, true, false),
        ("POST", "/rest/principals", true, false, false),
        ("DELETE", "/rest/principals/x", true, false, false),
        ("GET", "/rest/roles", true, true, false),
        ("POST", "/rest/roles", true, false, false),
        ("PUT", "/rest/roles/user", true, false, false),
        ("POST", "/rest/roles/user/reset", true, false, false),
        ("GET", "/rest/accounting/usage-records", true, true, false),
        ("POST", "/rest/accounting/allocations", true, false, false),
    ];
    for &(method, path, admin, operator, user) in table {
        for (who, auth, allowed) in [
            ("administrator", Auth::Admin, admin),
            ("operator", as_user("olga"), operator),
            ("user", Auth::User, user),
        ] {
            let reply = server.call(
                method,
                path,
                auth,
                Some(("application/json", b"{}".to_vec())),
            );
            assert_eq!(
                reply.status != 403,
                allowed,
                "{who} {method} {path}: {} {}",
                reply.status,
                reply.body
            );
        }
    }
}

#[test]
fn roles_are_created_changed_reset_and_deleted_and_decide_at_once() {
    let server = server_with_roles(&["user"]);
    let roles = server.get("/rest/roles?sort=%7B%22name%22%3A1%7D").json();
    let names: Vec<&str> = roles["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["administrator", "operator", "user"]);
    let user_role = server.get("/rest/roles/user").json();
    assert_eq!(user_role["builtIn"], true);
    assert!(
        user_role["permissions"]
            .as_array()
            .unwrap()
            .contains(&json!({"id": "jobs:*", "resource": "jobs", "action": "*", "scope": "OWN"})),
        "{user_role}"
    );

    // Refusals name the field; nothing is created.
    for (body, needle) in [
        (json!({}), "name: required"),
        (json!({"name": "a b"}), "name"),
        (
            json!({"name": "r", "permissions": ["nosuch:read"]}),
            "no permission nosuch:read",
        ),
        (
            json!({"name": "r", "permissions": ["jobs:fly"]}),
            "not an action",
        ),
        (
            json!({"name": "r", "permissions": [{"id": "jobs:read", "scope": "SOME"}]}),
            "scope",
        ),
        (
            json!({"name": "r", "permissions": "jobs:read"}),
            "expected a list",
        ),
        (json!({"name": "r", "permissions": [7]}), "permissions[0]"),
    ] {
        let reply = server.send_json("POST", "/rest/roles", &body);
        reply.assert_refused(400, needle, &body);
    }
    assert_eq!(server.get("/rest/roles").json()["totalCount"], 3);
    let taken = server.send_json("POST", "/rest/roles", &json!({"name": "operator"}));
    assert_eq!(taken.status, 409, "{}", taken.body);

    // A role that reads events, given to alice through a principal.
    let created = server.send_json(
        "POST",
        "/rest/roles",
        &json!({"name": "event-readers", "description": "reads events",
                "permissions": ["events:read", {"resource": "reports", "action": "*", "scope": "OWN"}]}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let role = created.json();
    let role_path = format!("/rest/roles/{}", role["id"].as_str().unwrap());
    assert_eq!(
        created.header("location").map(|l| l.ends_with(&role_path)),
        Some(true)
    );
    assert_eq!(role["permissions"][1]["scope"], "OWN");
    assert_eq!(server.get_as(Auth::User, "/rest/events").status, 403);
    let principal = server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "readers", "attachedRoles": ["event-readers"],
                "users": [{"name": USER, "type": "PAM"}]}),
    );
    assert_eq!(principal.status, 201, "{}", principal.body);
    assert_eq!(
        principal.json()["attachedRoles"],
        json!([{"id": role["id"], "name": "event-readers"}])
    );
    assert_eq!(server.get_as(Auth::User, "/rest/events").status, 200);
    // An LDAP user of the same name is someone else.
    let ldap_only = server.send_json(
        "PUT",
        "/rest/principals/readers",
        &json!({"users": [{"name": USER, "type": "LDAP"}]}),
    );
    assert_eq!(ldap_only.status, 200, "{}", ldap_only.body);
    assert_eq!(server.get_as(Auth::User, "/rest/events").status, 403);
    server.send_json(
        "PUT",
        "/rest/principals/readers",
        &json!({"users": [{"name": USER, "type": "PAM"}]}),
    );

    // change-mode on permissions; a stale version is refused and changes nothing.
    let version = server.get(&role_path).json()["version"].clone();
    let removed = server.send_json(
        "PUT",
        &format!("{role_path}?change-mode=remove"),
        &json!({"permissions": ["events:read"], "version": version}),
    );
    assert_eq!(removed.status, 200, "{}", removed.body);
    assert_eq!(removed.json()["permissions"].as_array().unwrap().len(), 1);
    assert_eq!(server.get_as(Auth::User, "/rest/events").status, 403);
    let stale = server.send_json(
        "PUT",
        &format!("{role_path}?change-mode=add"),
        &json!({"permissions": ["events:read"], "version": version}),
    );
    assert_eq!(stale.status, 409, "{}", stale.body);
    assert_eq!(server.get_as(Auth::User, "/rest/events").status, 403);
    let added = server.send_json(
        "PUT",
        &format!("{role_path}?change-mode=add"),
        &json!({"permissions": ["events:read"]}),
    );
    assert_eq!(added.json()["permissions"].as_array().unwrap().len(), 2);
    let set = server.send_json(
        "PUT",
        &role_path,
        &json!({"permissions": ["events:*"], "description": "events only"}),
    );
    assert_eq!(
        set.json()["permissions"],
        json!([{"id": "events:*", "resource": "events", "action": "*", "scope": "ALL"}])
    );
    assert_eq!(server.get_as(Auth::User, "/rest/events").status, 200);

    // A built-in role changes, and resets to its defaults.
    let changed = server.send_json(
        "PUT",
        "/rest/roles/user?change-mode=remove",
        &json!({"permissions": ["jobs:*"]}),
    );
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_eq!(server.get_as(Auth::User, "/rest/jobs").status, 403);
    let reset = server.call("POST", "/rest/roles/user/reset", Auth::Admin, None);
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(reset.json()["permissions"], user_role["permissions"]);
    assert_eq!(server.get_as(Auth::User, "/rest/jobs").status, 200);
    let not_built_in = server.call("POST", &format!("{role_path}/reset"), Auth::Admin, None);
    assert_eq!(not_built_in.status, 400, "{}", not_built_in.body);

    // Deleting: built-in roles stay; a role a principal attaches is kept (409).
    assert_eq!(
        server
            .call("DELETE", "/rest/roles/operator", Auth::Admin, None)
            .status,
        400
    );
    let attached = server.call("DELETE", &role_path, Auth::Admin, None);
    assert_eq!(attached.status, 409, "{}", attached.body);
    assert!(attached.messages().contains("readers"), "{}", attached.body);

    // Roles and what they decide survive a restart.
    let server = server.restart();
    assert_eq!(server.get_as(Auth::User, "/rest/events").status, 200);
    assert_eq!(server.get(&role_path).json()["description"], "events only");
    assert_eq!(
        server
            .call("DELETE", "/rest/principals/readers", Auth::Admin, None)
            .status,
        200
    );
    assert_eq!(server.get_as(Auth::User, "/rest/events").status, 403);
    assert_eq!(
        server.call("DELETE", &role_path, Auth::Admin, None).status,
        200
    );
    assert_eq!(server.get(&role_path).status, 404);
    let unknown = server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "p", "attachedRoles": ["event-readers"]}),
    );
    assert_eq!(unknown.status, 400, "{}", unknown.body);
}

fn submit(server: &TestServer, auth: Auth, extra: Value) -> String {
    let mut body = json!({"commandFile": "/bin/true", "holds": ["User"]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    drover_testkit::submitted(&drover_testkit::submit_as(server, auth, &body))
}

#[test]
fn ordinary_users_see_and_change_only_their_own_jobs() {
    let server = server_with_roles(&["user"]);
    let admins = submit(&server, Auth::Admin, json!({}));
    let alices = submit(&server, Auth::User, json!({}));
    let mine = |auth: Auth, path: &str| -> Vec<String> {
        server.get_as(auth, path).json()["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        mine(Auth::User, "/rest/jobs?api-version=2"),
        [alices.as_str()]
    );
    assert_eq!(
        mine(Auth::User, "/rest/jobs/active?api-version=2"),
        [alices.as_str()]
    );
    let query = "/rest/jobs?api-version=2&query=%7B%22credentials.user%22%3A%22admin%22%7D";
    assert!(mine(Auth::User, query).is_empty());
    assert_eq!(mine(as_user("olga"), "/rest/jobs?api-version=2").len(), 2);
    assert_eq!(mine(Auth::Admin, query), [admins.as_str()]);
    assert_eq!(
        server
            .get_as(Auth::User, &format!("/rest/jobs/{admins}"))
            .status,
        404
    );
    assert_eq!(
        server
            .get_as(Auth::User, &format!("/rest/jobs/{alices}"))
            .status,
        200
    );
    // Not someone else's job (answered as missing, as a read of it is), not as someone else.
    let cancel = server.call("DELETE", &format!("/rest/jobs/{admins}"), Auth::User, None);
    assert_eq!(cancel.status, 404, "{}", cancel.body);
    let body = json!({"commandFile": "/bin/true", "credentials": {"user": ADMIN}});
    let as_other = server.call(
        "POST",
        "/rest/jobs?api-version=2",
        Auth::User,
        Some(("application/json", body.to_string().into_bytes())),
    );
    assert_eq!(as_other.status, 403, "{}", as_other.body);
    assert_eq!(mine(Auth::Admin, "/rest/jobs?api-version=2").len(), 2);
    // Their own job they hold and release, but may not force it to start past the queue.
    let own = |action: &str| {
        server
            .call(
                "PUT",
                &format!("/rest/jobs/{alices}/{action}"),
                Auth::User,
                None,
            )
            .status
    };
    assert_eq!(own("hold"), 200);
    assert_eq!(own("execute"), 403);
    // An operator acts on every job.
    let cancelled = server.send("DELETE", &format!("/rest/jobs/{alices}"), as_user("olga"));
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
}

#[test]
fn proxying_is_granted_by_role_and_acts_with_the_proxied_users_rights() {
    let server = TestServer::builder()
        .user("pat", false)
        .config(|c| c.scheduler.enable_proxy = true)
        .start();
    let whoami = |auth: Auth, proxied: &str| {
        server.send(
            "GET",
            &format!("/rest/jobs?api-version=2&proxy-user={proxied}"),
            auth,
        )
    };
    submit(&server, Auth::User, json!({}));
    // pat may not proxy yet: the parameter is ignored and pat sees pat's jobs (none).
    assert_eq!(whoami(as_user("pat"), USER).json()["totalCount"], 0);
    let role = server.send_json(
        "POST",
        "/rest/roles",
        &json!({"name": "portal", "permissions": ["proxy-user:use"]}),
    );
    assert_eq!(role.status, 201, "{}", role.body);
    server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "portal", "attachedRoles": ["portal"], "users": [{"name": "pat", "type": "PAM"}]}),
    );
    // Now pat acts as alice, with alice's rights: her jobs, and no more.
    assert_eq!(whoami(as_user("pat"), USER).json()["totalCount"], 1);
    let denied = server.call(
        "POST",
        &format!("/rest/principals?proxy-user={USER}"),
        as_user("pat"),
        Some(("application/json", b"{\"name\":\"x\"}".to_vec())),
    );
    assert_eq!(denied.status, 403, "{}", denied.body);
    assert!(denied.messages().contains(USER), "{}", denied.body);
    // A PAMGROUP principal names the system groups of a local user's account.
    server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "nogroup-operators", "attachedRoles": ["operator"],
                "groups": [{"name": "nogroup", "type": "PAMGROUP"}]}),
    );
    assert_eq!(
        whoami(as_user("pat"), "nobody").json()["totalCount"],
        1,
        "nobody (in nogroup) proxied sees every job"
    );
    // The administrator's wildcard does not grant proxying (only the configured proxy
    // users and an explicit proxy-user:use do).
    assert_eq!(whoami(Auth::Admin, "ghost").json()["totalCount"], 1);
}

/// `proxy-user:use` of scope `OWN` acted as `ALL`, and reached the local administrator:
/// bob deleted a principal through `proxy-user=admin` (issue #53, item 11).
#[test]
fn proxying_keeps_its_scope_and_never_reaches_an_administrator() {
    let server = TestServer::builder()
        .user("pat", false)
        .user("olga", false)
        .config(|c| c.scheduler.enable_proxy = true)
        .start();
    submit(&server, Auth::User, json!({}));
    let grant = |role: &str, scope: &str, user: &str| {
        let permission = json!({"resource": "proxy-user", "action": "use", "scope": scope});
        let made = server.send_json(
            "POST",
            "/rest/roles",
            &json!({"name": role, "permissions": [permission]}),
        );
        assert_eq!(made.status, 201, "{}", made.body);
        let mapped = server.send_json(
            "POST",
            "/rest/principals",
            &json!({"name": role, "attachedRoles": [role], "users": [{"name": user, "type": "PAM"}]}),
        );
        assert_eq!(mapped.status, 201, "{}", mapped.body);
    };
    grant("self-only", "OWN", "pat");
    grant("portal", "ALL", "olga");
    let jobs_seen = |who: &str, proxied: &str| {
        let path = format!("/rest/jobs?api-version=2&proxy-user={proxied}");
        server.send("GET", &path, as_user(who)).json()["totalCount"].clone()
    };
    let delete_principal = |who: &str| {
        server.send(
            "DELETE",
            "/rest/principals/portal?proxy-user=admin",
            as_user(who),
        )
    };
    // Scope OWN acts only for oneself: the parameter is ignored.
    assert_eq!(jobs_seen("pat", USER), 0);
    let as_pat = delete_principal("pat");
    as_pat.assert_refused(403, "principals:delete", &"pat through proxy-user=admin");
    // Scope ALL acts for others, but never for an administrator.
    assert_eq!(jobs_seen("olga", USER), 1);
    let as_olga = delete_principal("olga");
    as_olga.assert_refused(
        403,
        "Only an administrator",
        &"olga through proxy-user=admin",
    );
    assert_eq!(
        server.get("/rest/principals/portal").status,
        200,
        "still there"
    );
    // Nor for one an administrator's role or a say over roles makes one: pat holds the
    // built-in administrator role, alice may create principals.
    let mapped = server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "pat-admin", "attachedRoles": ["administrator"],
                "users": [{"name": "pat", "type": "PAM"}]}),
    );
    assert_eq!(mapped.status, 201, "{}", mapped.body);
    let grantor = server.send_json(
        "POST",
        "/rest/roles",
        &json!({"name": "grantor", "permissions": ["principals:create"]}),
    );
    assert_eq!(grantor.status, 201, "{}", grantor.body);
    let mapped = server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "alice-grantor", "attachedRoles": ["grantor"],
                "users": [{"name": USER, "type": "PAM"}]}),
    );
    assert_eq!(mapped.status, 201, "{}", mapped.body);
    for governing in ["pat", USER] {
        let path = format!("/rest/roles?proxy-user={governing}");
        server.send("GET", &path, as_user("olga")).assert_refused(
            403,
            "Only an administrator",
            &governing,
        );
    }
}

#[test]
fn ordinary_users_see_and_release_only_their_own_reservations() {
    let server = TestServer::builder()
        .user("olga", false)
        .config(|c| {
            c.nodes = vec![
                drover_sched::node::NodeConfig::new("n1", 1),
                drover_sched::node::NodeConfig::new("n2", 1),
            ];
            // Ordinary users may reserve for up to a day here.
            c.scheduler.limits.user_reservation_max_seconds = 86_400;
        })
        .start();
    let reserve = |auth: Auth, node: &str| {
        let body = json!({"hostListExpression": node, "duration": 3600});
        let reply = server.call(
            "POST",
            "/rest/reservations",
            auth,
            Some(("application/json", body.to_string().into_bytes())),
        );
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.json()["id"].as_str().unwrap().to_string()
    };
    let alices = reserve(Auth::User, "n1");
    let admins = reserve(Auth::Admin, "n2");
    let ids = |auth: Auth| -> Vec<String> {
        server.get_as(auth, "/rest/reservations").json()["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(Auth::User), [alices.as_str()]);
    assert_eq!(ids(Auth::Admin).len(), 2);
    assert!(
        ids(as_user("olga")).is_empty(),
        "olga holds only the user role"
    );
    let path = |id: &str| format!("/rest/reservations/{id}");
    assert_eq!(server.get_as(Auth::User, &path(&admins)).status, 404);
    assert_eq!(
        server
            .call("DELETE", &path(&admins), as_user("olga"), None)
            .status,
        404
    );
    assert_eq!(
        server
            .call("DELETE", &path(&alices), as_user("olga"), None)
            .status,
        404
    );
    assert_eq!(
        server
            .call("DELETE", &path(&alices), Auth::User, None)
            .status,
        200
    );
    assert_eq!(ids(Auth::Admin), [admins.as_str()]);
}
