//! What strangers' failed logins may cost others (issue #53, items 2-4): nothing. Each
//! attack comes from its own loopback address (127.0.0.0/8), as from another machine,
//! and logins are never remembered, so that every one is checked in full (as after
//! the login cache expired).

use std::net::Ipv4Addr;

use drover_testkit::{ADMIN, Auth, PASSWORD, Reply, TestServer, USER};
use serde_json::{Value, json};

use crate::oauth::{bearer, clients, token_for};

const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 66);
const ADMINS_DESK: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 10);
const PORTAL: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 20);

fn server() -> TestServer {
    TestServer::builder()
        .config(|c| {
            clients(c);
            c.login_cache_seconds = 0;
            c.access.max_failed_logins = 3;
            c.access.failed_login_window_seconds = 600;
        })
        .start()
}

fn auth_from(server: &TestServer, source: Ipv4Addr, auth: Auth) -> Reply {
    server.call_from(source, "GET", "/rest/diag/auth", auth, None)
}

fn admin(password: &str) -> Auth {
    Auth::Basic(ADMIN.into(), password.into())
}

fn grant_from(server: &TestServer, source: Ipv4Addr, secret: &str) -> Reply {
    let form = b"grant_type=client_credentials";
    server.call_from(
        source,
        "POST",
        "/oauth/token",
        Auth::Basic("robot".into(), secret.into()),
        Some(("application/x-www-form-urlencoded", form)),
    )
}

#[test]
fn a_stranger_cannot_lock_the_administrator_out() {
    let server = server();
    // The administrator has logged in from their desk before.
    assert_eq!(auth_from(&server, ADMINS_DESK, admin(PASSWORD)).status, 200);
    for _ in 0..5 {
        let guess = auth_from(&server, ATTACKER, admin("guess"));
        assert!(matches!(guess.status, 401 | 429), "{}", guess.body);
    }
    // The guesser's address is refused, even with the right password...
    auth_from(&server, ATTACKER, admin(PASSWORD)).assert_refused(
        429,
        "Too many failed logins",
        &"the guesser",
    );
    // ...and the administrator is not, from their desk or from an address never used.
    assert_eq!(auth_from(&server, ADMINS_DESK, admin(PASSWORD)).status, 200);
    let elsewhere = Ipv4Addr::new(127, 0, 0, 11);
    assert_eq!(auth_from(&server, elsewhere, admin(PASSWORD)).status, 200);

    // Someone behind the administrator's own address (a shared NAT) guesses other
    // names until that address is blocked: the administrator, known there, goes on.
    for name in ["carol", "dave", "erin", "frank"] {
        auth_from(&server, ADMINS_DESK, Auth::Basic(name.into(), "x".into()));
    }
    auth_from(&server, ADMINS_DESK, Auth::User).assert_refused(
        429,
        "Too many failed logins",
        &"an unknown name from the blocked address",
    );
    assert_eq!(auth_from(&server, ADMINS_DESK, admin(PASSWORD)).status, 200);

    // Many addresses guessing at one name block it for addresses it never used (ten
    // times the limit, from anywhere); the known desk still gets in.
    for i in 0..30u8 {
        auth_from(&server, Ipv4Addr::new(127, 0, 1, i), admin("spray"));
    }
    let fresh = Ipv4Addr::new(127, 0, 2, 1);
    auth_from(&server, fresh, admin(PASSWORD)).assert_refused(
        429,
        "Too many failed logins",
        &"a name guessed from everywhere, from a new address",
    );
    assert_eq!(auth_from(&server, elsewhere, admin(PASSWORD)).status, 200);
}

#[test]
fn a_client_id_is_not_blocked_by_failures_from_other_addresses() {
    let server = server();
    for guess in ["a", "b", "c", "d"] {
        let reply = grant_from(&server, ATTACKER, guess);
        assert!(matches!(reply.status, 401 | 429), "{}", reply.body);
    }
    grant_from(&server, ATTACKER, "robot-secret").assert_refused(
        429,
        "Too many failed logins",
        &"the guesser's grant",
    );
    let granted = grant_from(&server, PORTAL, "robot-secret");
    assert_eq!(granted.status, 200, "{}", granted.body);
}

#[test]
fn refused_tokens_never_block_valid_ones_or_passwords() {
    let server = server();
    let token = token_for(&server, USER);
    // A portal sends tokens that expired or were never valid: ordinary traffic.
    for i in 0..25 {
        let stale = format!("{:A<43}", i);
        let reply = server.get_as(bearer(&stale), "/rest/diag/auth");
        reply.assert_refused(401, "authenticated", &"an unknown token");
    }
    assert_eq!(server.get_as(bearer(&token), "/rest/diag/auth").status, 200);
    assert_eq!(server.get_as(Auth::Admin, "/rest/diag/auth").status, 200);
    // The refusals are audited once for the address and window, not one by one.
    let refused = wait_for_failures(&server, "bearer token");
    assert_eq!(refused.len(), 1, "{refused:?}");
}

#[test]
fn spraying_from_many_addresses_is_audited_once_an_address_and_lifts_no_block() {
    let server = server();
    for _ in 0..3 {
        auth_from(&server, ATTACKER, admin("guess"));
    }
    // Unknown client ids from 40 addresses, 5 each.
    let sources: Vec<Ipv4Addr> = (0..40).map(|i| Ipv4Addr::new(127, 3, 0, i)).collect();
    for (i, source) in sources.iter().enumerate() {
        for n in 0..5 {
            let form = b"grant_type=client_credentials";
            server.call_from(
                *source,
                "POST",
                "/oauth/token",
                Auth::Basic(format!("nobody-{i}-{n}"), "x".into()),
                Some(("application/x-www-form-urlencoded", form)),
            );
        }
    }
    auth_from(&server, ATTACKER, admin(PASSWORD)).assert_refused(
        429,
        "Too many failed logins",
        &"the first block, after the spray",
    );
    let sprayed = wait_for_failures(&server, "oauth client nobody");
    assert!(
        sprayed.len() <= sources.len(),
        "one audit event an address, not one an attempt: {}",
        sprayed.len()
    );
}

/// The `userloginfailure` events whose name starts with `name`, once at least one is
/// there and a login checked after them has been recorded too.
fn wait_for_failures(server: &TestServer, name: &str) -> Vec<Value> {
    let of_name = |events: Vec<Value>| -> Vec<Value> {
        events
            .into_iter()
            .filter(|e| {
                e["arguments"][0]
                    .as_str()
                    .is_some_and(|a| a.starts_with(name))
            })
            .collect()
    };
    drover_testkit::wait_until("the refusals are audited", || {
        !of_name(events_of(server, "userloginfailure")).is_empty()
    });
    // A login checked now is recorded after the refusals were.
    let marker = Ipv4Addr::new(127, 0, 9, 9);
    assert_eq!(auth_from(server, marker, Auth::User).status, 200);
    drover_testkit::wait_until("the marker login is audited", || {
        events_of(server, "userlogin")
            .iter()
            .any(|e| e["arguments"][1] == marker.to_string())
    });
    of_name(events_of(server, "userloginfailure"))
}

fn events_of(server: &TestServer, event_type: &str) -> Vec<Value> {
    let query = json!({"eventType": event_type}).to_string();
    let encoded: String = form_urlencoded::byte_serialize(query.as_bytes()).collect();
    server
        .get(&format!(
            "/rest/events?api-version=3&query={encoded}&max=10000"
        ))
        .json()["results"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A blocked source was answered 429 for wrong guesses but 200 for the right one when
/// the login was remembered (the user's dashboard kept it so): an oracle.
#[test]
fn a_blocked_source_learns_nothing_from_a_remembered_login() {
    let server = TestServer::builder()
        .config(|c| c.access.max_failed_logins = 3)
        .start();
    assert_eq!(server.get_as(Auth::User, "/rest/diag/auth").status, 200);
    for _ in 0..3 {
        let guess = Auth::Basic(USER.into(), "guess".into());
        assert_eq!(auth_from(&server, ATTACKER, guess).status, 401);
    }
    auth_from(&server, ATTACKER, Auth::User).assert_refused(
        429,
        "Too many failed logins",
        &"the right password from the blocked source",
    );
    // Where alice logged in, she goes on.
    assert_eq!(server.get_as(Auth::User, "/rest/diag/auth").status, 200);
}

/// The sources a name logged in from are kept in the store: after a restart, spraying
/// the administrator's name from many addresses still does not keep them out of theirs.
#[test]
fn a_known_source_stays_known_across_a_restart() {
    let server = server();
    assert_eq!(auth_from(&server, ADMINS_DESK, admin(PASSWORD)).status, 200);
    let server = server.restart();
    for i in 0..30u8 {
        auth_from(&server, Ipv4Addr::new(127, 0, 5, i), admin("spray"));
    }
    let fresh = Ipv4Addr::new(127, 0, 6, 1);
    assert_eq!(auth_from(&server, fresh, admin(PASSWORD)).status, 429);
    assert_eq!(auth_from(&server, ADMINS_DESK, admin(PASSWORD)).status, 200);
}

/// Guesses at one name sent at once from many sources each passed the name's count
/// before any failed: the name-wide limit (here 30) was outrun.
#[test]
fn guesses_at_once_from_many_sources_cannot_outrun_the_names_count() {
    let server = server();
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..90u8)
            .map(|i| {
                let server = &server;
                s.spawn(move || {
                    let source = Ipv4Addr::new(127, 0, 7, i);
                    auth_from(server, source, admin(&format!("guess-{i}"))).status
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let checked = statuses.iter().filter(|&&s| s == 401).count();
    assert!(
        checked <= 30,
        "{checked} guesses were checked: {statuses:?}"
    );
    assert_eq!(checked + statuses.iter().filter(|&&s| s == 429).count(), 90);
}
