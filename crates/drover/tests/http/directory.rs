//! Directory (LDAP) logins against a real slapd (`scripts/services/ldap.sh`: its plain
//! and StartTLS address in `DROVER_TEST_LDAP`, its LDAPS address in `DROVER_TEST_LDAPS`,
//! its self-signed certificate in `DROVER_TEST_LDAP_CA`), failed-login throttling and the
//! audit trail.

use std::time::{Duration, Instant};

use drover_auth::{DirectoryConfig, SecurityType};
use drover_testkit::{Auth, TestServer, submit_as, submitted};
use serde_json::{Value, json};

/// The test directory's address, if there is one; with `DROVER_REQUIRE_LDAP=1`, there
/// must be.
fn test_directory() -> Option<(String, u16)> {
    let address = drover_testkit::outside_service("DROVER_TEST_LDAP", "DROVER_REQUIRE_LDAP")?;
    let (host, port) = address.rsplit_once(':').expect("host:port");
    Some((host.to_string(), port.parse().expect("a port")))
}

#[test]
fn starttls_and_ldaps_logins_check_the_directory_certificate() {
    let Some((host, port)) = test_directory() else {
        eprintln!("no test directory (DROVER_TEST_LDAP): skipped");
        return;
    };
    let ldaps =
        std::env::var("DROVER_TEST_LDAPS").expect("DROVER_TEST_LDAPS with DROVER_TEST_LDAP");
    let ca =
        std::env::var("DROVER_TEST_LDAP_CA").expect("DROVER_TEST_LDAP_CA with DROVER_TEST_LDAP");
    let ldaps_port: u16 = ldaps.rsplit_once(':').unwrap().1.parse().unwrap();
    for (security, port) in [
        (SecurityType::StartTls, port),
        (SecurityType::Ldaps, ldaps_port),
    ] {
        for trusted in [true, false] {
            let mut config = directory(&host, port);
            config.security_type = security;
            config.ca_file = trusted.then(|| ca.clone().into());
            let server = TestServer::builder()
                .config(|c| c.ldap = Some(config))
                .start();
            let reply = server.get_as(login("lena", "lenapw"), "/rest/diag/auth");
            // An untrusted certificate is a directory that cannot be asked: never a login.
            let expected = if trusted { 200 } else { 503 };
            assert_eq!(
                reply.status, expected,
                "{security:?} trusted={trusted}: {}",
                reply.body
            );
        }
    }
}

fn directory(server: &str, port: u16) -> DirectoryConfig {
    DirectoryConfig {
        server: server.into(),
        port: Some(port),
        security_type: SecurityType::None,
        base_dns: vec!["dc=example,dc=org".into()],
        bind_user: Some("cn=admin,dc=example,dc=org".into()),
        bind_password: Some("adminpw".into()),
        user_object_class: "inetOrgPerson".into(),
        user_name_attribute: "uid".into(),
        ca_file: None,
    }
}

fn login(name: &str, password: &str) -> Auth {
    Auth::Basic(name.into(), password.into())
}

#[test]
fn directory_users_log_in_and_get_the_roles_of_their_groups() {
    let Some((host, port)) = test_directory() else {
        eprintln!("no test directory (DROVER_TEST_LDAP): skipped");
        return;
    };
    let server = TestServer::builder()
        .config(|c| c.ldap = Some(directory(&host, port)))
        .start();
    // lena is in cn=schedulers; otto in no group; both in ou=staff.
    let mapped = server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "schedulers", "attachedRoles": ["operator"],
                "groups": [{"name": "schedulers", "type": "LDAPGROUP"}]}),
    );
    assert_eq!(mapped.status, 201, "{}", mapped.body);
    let node_change = |auth: Auth| {
        server
            .call(
                "PUT",
                "/rest/nodes/no-such-node",
                auth,
                Some(("application/json", b"{}".to_vec())),
            )
            .status
    };
    assert_eq!(
        node_change(login("lena", "lenapw")),
        404,
        "an operator: past the gate"
    );
    assert_eq!(
        node_change(login("otto", "ottopw")),
        403,
        "the default user role"
    );
    assert_eq!(
        server.get_as(login("otto", "ottopw"), "/rest/jobs").status,
        200
    );
    // Wrong passwords, unknown users, empty passwords: the same 401.
    let wrong = server.get_as(login("otto", "nope"), "/rest/diag/auth");
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    for auth in [login("nobody", "nope"), login("otto", ""), login("*", "x")] {
        let reply = server.get_as(auth, "/rest/diag/auth");
        assert_eq!((reply.status, &reply.body), (401, &wrong.body));
    }
    // An organizational unit maps too.
    server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "staff", "attachedRoles": ["administrator"],
                "groups": [{"name": "staff", "type": "LDAPOU"}]}),
    );
    assert_eq!(
        server
            .get_as(login("otto", "ottopw"), "/rest/principals")
            .status,
        200
    );
    // The configuration shows, the bind password never.
    let shown = server.get("/rest/diag/ldap");
    assert_eq!(shown.json()["bindUser"], "cn=admin,dc=example,dc=org");
    assert!(!shown.body.contains("adminpw"), "{}", shown.body);
}

#[test]
fn a_directory_that_does_not_answer_gives_503_never_a_login() {
    // Nothing listens on port 1.
    let server = TestServer::builder()
        .config(|c| c.ldap = Some(directory("127.0.0.1", 1)))
        .start();
    let reply = server.get_as(login("someone", "pw"), "/rest/diag/auth");
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(reply.messages().contains("directory"), "{}", reply.body);
    // Local users do not need the directory.
    assert_eq!(server.get("/rest/diag/auth").status, 200);
}

fn events_of(server: &TestServer, event_type: &str) -> Vec<Value> {
    let query = json!({"eventType": event_type}).to_string();
    let encoded: String = form_urlencoded::byte_serialize(query.as_bytes()).collect();
    server
        .get(&format!("/rest/events?api-version=3&query={encoded}"))
        .json()["results"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Polls until `done` holds for the events of `event_type` (they are recorded without
/// holding up the request).
fn wait_for_events(server: &TestServer, event_type: &str, done: impl Fn(&[Value]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = events_of(server, event_type);
        if done(&events) {
            return;
        }
        assert!(Instant::now() < deadline, "{event_type}: {events:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn failed_logins_are_throttled_and_audited() {
    let server = TestServer::builder()
        .config(|c| c.access.max_failed_logins = 3)
        .start();
    // The administrator's login is verified (and remembered) before the attack.
    assert_eq!(server.get("/rest/diag/auth").status, 200);
    for _ in 0..3 {
        assert_eq!(
            server
                .get_as(login("alice", "guess"), "/rest/diag/auth")
                .status,
            401
        );
    }
    // Now even the right password is refused unchecked, for this name from this source,
    // and so is any name from it.
    let throttled = server.get_as(Auth::User, "/rest/diag/auth");
    assert_eq!(throttled.status, 429, "{}", throttled.body);
    assert!(throttled.messages().contains("Too many failed logins"));
    let unknown = server.get_as(login("ghost", "x"), "/rest/diag/auth");
    assert_eq!((unknown.status, unknown.body), (429, throttled.body));
    // A login already verified still passes.
    assert_eq!(server.get("/rest/diag/auth").status, 200);

    // The failures of one address are audited once a window, not one by one.
    wait_for_events(&server, "userloginfailure", |events| {
        events.len() == 1 && events[0]["arguments"][0] == "alice"
    });
    // The block is audited once when it starts, not for every refused attempt.
    wait_for_events(&server, "userloginthrottled", |events| events.len() == 1);
    wait_for_events(&server, "userlogin", |events| {
        events.iter().any(|e| e["arguments"][0] == "admin")
    });
    // A permission denial is audited with what was asked.
    let server = TestServer::start();
    let denied = server.call("DELETE", "/rest/principals/x", Auth::User, None);
    assert_eq!(denied.status, 403);
    wait_for_events(&server, "permissiondenied", |events| {
        events.len() == 1
            && events[0]["arguments"][0] == "alice"
            && events[0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("principals:delete"))
    });
}

/// A directory matches `LENA` and ` lena` to lena; each was a Drover user of its own,
/// with limits of its own (issue #53, item 6). The user is named as the directory names
/// them, and names with spaces around are refused.
#[test]
fn a_directory_user_is_one_user_whatever_the_name_typed() {
    let Some((host, port)) = test_directory() else {
        eprintln!("no test directory (DROVER_TEST_LDAP): skipped");
        return;
    };
    let server = TestServer::builder()
        .config(|c| {
            c.ldap = Some(directory(&host, port));
            c.scheduler.limits.max_queued_jobs_per_user = 1;
        })
        .start();
    for spaced in [" lena", "lena   ", "lena\t"] {
        let reply = server.get_as(login(spaced, "lenapw"), "/rest/diag/auth");
        assert_eq!(reply.status, 401, "{spaced:?}: {}", reply.body);
    }
    let held = json!({"commandFile": "/bin/true", "holds": ["User"]});
    let first = submit_as(&server, login("LENA", "lenapw"), &held);
    let job = submitted(&first);
    let record = server
        .get(&format!("/rest/jobs/{job}?api-version=2"))
        .json();
    assert_eq!(record["credentials"]["user"], "lena", "{record}");
    // The same user's limit, whatever the case typed.
    let second = submit_as(&server, login("Lena", "lenapw"), &held);
    second.assert_refused(
        400,
        "max_queued_jobs_per_user",
        &"lena's second job as Lena",
    );
}

/// A directory user whose name is a local user's but for case (`LENA` for the local
/// lena) passed for the local user: their jobs, their limits (issue #53's review).
#[test]
fn a_directory_user_cannot_pass_for_a_local_user_of_the_same_name() {
    let Some((host, port)) = test_directory() else {
        eprintln!("no test directory (DROVER_TEST_LDAP): skipped");
        return;
    };
    let server = TestServer::builder()
        .user("lena", false)
        .config(|c| c.ldap = Some(directory(&host, port)))
        .start();
    let local = login("lena", drover_testkit::PASSWORD);
    let job = submitted(&submit_as(
        &server,
        local.clone(),
        &json!({"commandFile": "/bin/true", "holds": ["User"]}),
    ));
    for typed in ["LENA", "Lena", "lena"] {
        let reply = server.get_as(login(typed, "lenapw"), &format!("/rest/jobs/{job}"));
        assert_eq!(reply.status, 401, "{typed}: {}", reply.body);
    }
    assert_eq!(
        server.get_as(local, &format!("/rest/jobs/{job}")).status,
        200
    );
    // Other directory users are not affected.
    assert_eq!(
        server
            .get_as(login("otto", "ottopw"), "/rest/diag/auth")
            .status,
        200
    );
}
