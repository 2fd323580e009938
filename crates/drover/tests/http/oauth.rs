//! Token login for portals: `POST <base>/oauth/token` (OAuth 2), bearer tokens used
//! where Basic is, their expiry and revocation.

use drover_auth::password::{Cost, hash};
use drover_auth::tokens::OAuthClient;
use drover_testkit::{ADMIN, Auth, PASSWORD, Reply, TestServer, USER};
use serde_json::Value;

pub(crate) const CLIENT: &str = "portal";
pub(crate) const SECRET: &str = "portal-secret";

/// The portal client (no principal) and a robot client acting as [`USER`].
pub(crate) fn clients(c: &mut drover::Config) {
    c.oauth.clients = vec![
        OAuthClient {
            id: CLIENT.into(),
            secret_hash: hash(SECRET, Cost::Minimal),
            principal: None,
        },
        OAuthClient {
            id: "robot".into(),
            secret_hash: hash("robot-secret", Cost::Minimal),
            principal: Some(USER.into()),
        },
    ];
}

/// `application/x-www-form-urlencoded` of `pairs`, every byte but letters and digits
/// percent-encoded.
fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    let encode = drover_testkit::percent_encoded;
    pairs
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
        .into_bytes()
}

/// `POST path` with a form body, authenticating the client with `auth`.
pub(crate) fn post_form(
    server: &TestServer,
    path: &str,
    auth: Auth,
    pairs: &[(&str, &str)],
) -> Reply {
    server.call(
        "POST",
        path,
        auth,
        Some(("application/x-www-form-urlencoded", form(pairs))),
    )
}

pub(crate) fn portal() -> Auth {
    Auth::Basic(CLIENT.into(), SECRET.into())
}

/// A token for `user`'s password, through the portal client.
pub(crate) fn token_for(server: &TestServer, user: &str) -> String {
    let reply = post_form(
        server,
        "/oauth/token",
        portal(),
        &[
            ("grant_type", "password"),
            ("username", user),
            ("password", PASSWORD),
        ],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["access_token"].as_str().unwrap().to_string()
}

pub(crate) fn bearer(token: &str) -> Auth {
    Auth::Header(format!("Bearer {token}"))
}

fn whoami(server: &TestServer, auth: Auth) -> Reply {
    server.get_as(auth, "/rest/diag/auth")
}

#[test]
fn a_token_from_the_password_grant_works_as_basic_does() {
    let server = TestServer::builder()
        .config(|c| {
            clients(c);
            c.base_url = "/mws".into();
        })
        .start();
    let reply = post_form(
        &server,
        "/oauth/token",
        portal(),
        &[
            ("grant_type", "password"),
            ("username", USER),
            ("password", PASSWORD),
        ],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    let body = reply.json();
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    let token = body["access_token"].as_str().unwrap();
    assert_eq!(whoami(&server, bearer(token)).status, 200);
    // The same answers as with the user's password: own jobs yes, the admin's no.
    let job = drover_testkit::submit_as(
        &server,
        bearer(token),
        &serde_json::json!({"commandFile": "/bin/true", "holds": ["User"]}),
    );
    let basic = drover_testkit::submit_as(
        &server,
        Auth::User,
        &serde_json::json!({"commandFile": "/bin/true", "holds": ["User"]}),
    );
    assert_eq!(job.status, basic.status, "{} / {}", job.body, basic.body);
    let roles = server.get_as(bearer(token), "/rest/roles");
    assert_eq!(
        roles.status,
        server.get_as(Auth::User, "/rest/roles").status
    );
    assert_eq!(roles.status, 403);
    // Client credentials in the form work as well as Basic.
    let reply = post_form(
        &server,
        "/oauth/token",
        Auth::None,
        &[
            ("grant_type", "password"),
            ("username", ADMIN),
            ("password", PASSWORD),
            ("client_id", CLIENT),
            ("client_secret", SECRET),
        ],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let admin = reply.json()["access_token"].as_str().unwrap().to_string();
    assert_eq!(server.get_as(bearer(&admin), "/rest/roles").status, 200);
}

#[test]
fn the_client_credentials_grant_acts_as_the_configured_principal_or_is_refused() {
    let server = TestServer::builder().config(clients).start();
    let reply = post_form(
        &server,
        "/oauth/token",
        Auth::Basic("robot".into(), "robot-secret".into()),
        &[("grant_type", "client_credentials")],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let token = reply.json()["access_token"].as_str().unwrap().to_string();
    assert_eq!(server.get_as(bearer(&token), "/rest/roles").status, 403);
    assert_eq!(whoami(&server, bearer(&token)).status, 200);
    let reply = post_form(
        &server,
        "/oauth/token",
        portal(),
        &[("grant_type", "client_credentials")],
    );
    assert_eq!(
        (reply.status, &reply.json()["error"]),
        (400, &Value::from("unauthorized_client"))
    );
}

#[test]
fn wrong_clients_passwords_and_grants_are_refused() {
    let server = TestServer::builder().config(clients).start();
    let good = [
        ("grant_type", "password"),
        ("username", USER),
        ("password", PASSWORD),
    ];
    // The client's credentials, the form, and the status and error answered.
    type Case<'a> = (Auth, Vec<(&'a str, &'a str)>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            Auth::Basic(CLIENT.into(), "wrong".into()),
            good.to_vec(),
            401,
            "invalid_client",
        ),
        (
            Auth::Basic("nobody".into(), SECRET.into()),
            good.to_vec(),
            401,
            "invalid_client",
        ),
        (Auth::None, good.to_vec(), 401, "invalid_client"),
        (Auth::User, good.to_vec(), 401, "invalid_client"),
        (
            portal(),
            vec![
                ("grant_type", "password"),
                ("username", USER),
                ("password", "wrong"),
            ],
            400,
            "invalid_grant",
        ),
        (
            portal(),
            vec![
                ("grant_type", "password"),
                ("username", "nobody"),
                ("password", PASSWORD),
            ],
            400,
            "invalid_grant",
        ),
        (
            portal(),
            vec![("grant_type", "password"), ("username", USER)],
            400,
            "invalid_request",
        ),
        (
            portal(),
            vec![("grant_type", "authorization_code"), ("code", "x")],
            400,
            "unsupported_grant_type",
        ),
        (portal(), vec![("username", USER)], 400, "invalid_request"),
        (
            portal(),
            vec![("grant_type", "password"), ("grant_type", "password")],
            400,
            "invalid_request",
        ),
        (
            portal(),
            vec![
                ("client_id", CLIENT),
                ("client_secret", SECRET),
                ("grant_type", "password"),
            ],
            400,
            "invalid_request",
        ),
    ];
    for (auth, pairs, status, error) in cases {
        let reply = post_form(&server, "/oauth/token", auth.clone(), &pairs);
        assert_eq!(reply.status, status, "{auth:?} {pairs:?}: {}", reply.body);
        let body = reply.json();
        assert_eq!(body["error"], error, "{auth:?} {pairs:?}: {}", reply.body);
        assert!(!reply.messages().is_empty(), "{}", reply.body);
        if status == 401 {
            assert!(reply.header("www-authenticate").is_some());
        }
    }
    // Not a form.
    let reply = server.call(
        "POST",
        "/oauth/token",
        portal(),
        Some((
            "application/json",
            b"{\"grant_type\":\"password\"}".to_vec(),
        )),
    );
    assert_eq!(
        (reply.status, &reply.json()["error"]),
        (400, &Value::from("invalid_request"))
    );
    // Bytes that are not UTF-8, and a GET.
    let reply = server.call(
        "POST",
        "/oauth/token",
        portal(),
        Some((
            "application/x-www-form-urlencoded",
            b"grant_type=%ff%fe&\xff=\xfe".to_vec(),
        )),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(server.get_as(portal(), "/oauth/token").status, 405);
    // Nothing was issued by any of these.
}

#[test]
fn a_token_stops_working_when_it_expires_and_when_revoked() {
    let server = TestServer::builder()
        .config(|c| {
            clients(c);
            c.oauth.token_seconds = 2;
        })
        .start();
    let token = token_for(&server, USER);
    assert_eq!(whoami(&server, bearer(&token)).status, 200);
    // It lives at least 2 s and less than 3 s from its issue.
    std::thread::sleep(std::time::Duration::from_millis(3100));
    let expired = whoami(&server, bearer(&token));
    expired.assert_refused(401, "authenticated", &"an expired token");
    assert!(expired.header("www-authenticate").is_some());

    let server = TestServer::builder().config(clients).start();
    let token = token_for(&server, USER);
    // Revoked through RFC 7009 by its client; another client's revocation is a no-op.
    let robot = Auth::Basic("robot".into(), "robot-secret".into());
    let reply = post_form(&server, "/oauth/revoke", robot, &[("token", &token)]);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(whoami(&server, bearer(&token)).status, 200);
    let reply = post_form(&server, "/oauth/revoke", portal(), &[("token", &token)]);
    assert_eq!(reply.status, 200, "{}", reply.body);
    whoami(&server, bearer(&token)).assert_refused(401, "authenticated", &"revoked");
    // An unknown token is not an error (RFC 7009 2.2); a missing one is.
    let reply = post_form(&server, "/oauth/revoke", portal(), &[("token", "nonsense")]);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = post_form(&server, "/oauth/revoke", portal(), &[]);
    assert_eq!(reply.json()["error"], "invalid_request", "{}", reply.body);
    let reply = post_form(&server, "/oauth/revoke", Auth::User, &[("token", &token)]);
    assert_eq!(reply.status, 401, "{}", reply.body);

    // An administrator revokes every token of a user.
    let first = token_for(&server, USER);
    let second = token_for(&server, USER);
    let reply = server.send("DELETE", &format!("/rest/oauth/tokens/{USER}"), Auth::Admin);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.messages().contains("2 token"), "{}", reply.body);
    for token in [first, second] {
        assert_eq!(whoami(&server, bearer(&token)).status, 401);
    }
}

#[test]
fn tokens_survive_a_restart_and_each_user_holds_a_bounded_number() {
    let server = TestServer::builder()
        .config(|c| {
            clients(c);
            c.oauth.max_tokens_per_user = 2;
        })
        .start();
    let tokens: Vec<String> = (0..3).map(|_| token_for(&server, USER)).collect();
    let server = server.restart();
    let live: Vec<u16> = tokens
        .iter()
        .map(|t| whoami(&server, bearer(t)).status)
        .collect();
    assert_eq!(
        live,
        [401, 200, 200],
        "the oldest was dropped; the others survived"
    );
}

#[test]
fn guessing_a_client_secret_is_throttled_like_a_password() {
    let server = TestServer::builder()
        .config(|c| {
            clients(c);
            c.access.max_failed_logins = 3;
            c.access.failed_login_window_seconds = 60;
        })
        .start();
    let grant = [("grant_type", "client_credentials")];
    for guess in ["a", "b", "c"] {
        let wrong = Auth::Basic("robot".into(), guess.into());
        let reply = post_form(&server, "/oauth/token", wrong, &grant);
        assert_eq!(reply.status, 401, "{}", reply.body);
    }
    let right = Auth::Basic("robot".into(), "robot-secret".into());
    let reply = post_form(&server, "/oauth/token", right, &grant);
    reply.assert_refused(429, "Too many failed logins", &"after three guesses");
}
