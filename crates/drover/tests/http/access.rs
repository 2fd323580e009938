//! Authentication and authorization on every route.

use drover_testkit::{Auth, PASSWORD, TestServer, USER};
use serde_json::Value;

use crate::support::{ECHO, WHOAMI, test_routes};

/// Every (method, concrete path, public?) the OpenAPI document lists.
pub fn documented_routes(server: &TestServer) -> Vec<(String, String, bool)> {
    let document = server.get_as(Auth::None, "/rest/openapi.json").json();
    let mut routes = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let concrete: Vec<String> = path
                .split('/')
                .map(|s| {
                    if s.starts_with('{') {
                        "x".to_string()
                    } else {
                        s.to_string()
                    }
                })
                .collect();
            let public = operation["security"] == Value::Array(vec![]);
            routes.push((method.to_uppercase(), concrete.join("/"), public));
        }
    }
    assert!(routes.len() >= 8, "{routes:?}");
    routes
}

#[test]
fn every_route_but_the_public_ones_needs_valid_credentials() {
    let server = TestServer::start();
    let mut public = Vec::new();
    for (method, path, is_public) in documented_routes(&server) {
        if is_public {
            let reply = server.call(&method, &path, Auth::None, None);
            assert_eq!(reply.status, 200, "{method} {path}: {}", reply.body);
            public.push(path);
            continue;
        }
        for auth in [
            Auth::None,
            Auth::Basic("admin".into(), "wrong".into()),
            Auth::Basic("nobody".into(), PASSWORD.into()),
            Auth::Basic("".into(), "".into()),
            Auth::Header("Bearer abc".into()),
            Auth::Header("Basic !!!".into()),
        ] {
            let reply = server.call(&method, &path, auth.clone(), None);
            assert_eq!(
                reply.status, 401,
                "{method} {path} {auth:?}: {}",
                reply.body
            );
            assert!(
                reply
                    .header("www-authenticate")
                    .unwrap()
                    .starts_with("Basic realm="),
                "{method} {path}"
            );
            assert!(reply.messages().contains("authenticated"), "{}", reply.body);
        }
    }
    public.sort();
    // The dashboard's files hold no data (`dashboard`); `/` and `/dashboard` redirect to
    // its page.
    assert_eq!(
        public,
        [
            "/",
            "/dashboard",
            "/dashboard/",
            "/dashboard/app.js",
            "/dashboard/icon.svg",
            "/dashboard/style.css",
            "/rest/diag/health/summary",
            "/rest/openapi.json"
        ]
    );
}

#[test]
fn diag_auth_tells_valid_from_invalid_credentials() {
    let server = TestServer::start();
    let good = server.get("/rest/diag/auth");
    assert_eq!((good.status, good.json()), (200, serde_json::json!({})));
    let bad = server.get_as(
        Auth::Basic("admin".into(), "nope".into()),
        "/rest/diag/auth",
    );
    assert_eq!(bad.status, 401);
    // A good login remembered does not make a wrong password good, nor the other way.
    assert_eq!(server.get("/rest/diag/auth").status, 200);
    let again = server.get_as(
        Auth::Basic("admin".into(), format!("{PASSWORD}x")),
        "/rest/diag/auth",
    );
    assert_eq!(again.status, 401);
    // The answer does not tell unknown users from wrong passwords.
    let unknown = server.get_as(
        Auth::Basic("ghost".into(), "nope".into()),
        "/rest/diag/auth",
    );
    assert_eq!(unknown.body, bad.body);
}

#[test]
fn ordinary_users_read_but_may_not_change() {
    let server = TestServer::builder().routes(test_routes).start();
    assert_eq!(server.get_as(Auth::User, "/rest/diag/about").status, 200);
    let echo = |auth| {
        server.call(
            "POST",
            ECHO,
            auth,
            Some(("application/json", b"{}".to_vec())),
        )
    };
    let refused = echo(Auth::User);
    assert_eq!(refused.status, 403, "{}", refused.body);
    let messages = refused.messages();
    assert!(
        messages.contains(USER) && messages.contains("tests:create"),
        "{messages}"
    );
    assert_eq!(echo(Auth::Admin).status, 200);
}

fn whoami(server: &TestServer, auth: Auth, query: &str) -> Value {
    let reply = server.call("POST", &format!("{WHOAMI}{query}"), auth, None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

#[test]
fn proxy_user_is_honoured_only_when_enabled_for_the_caller() {
    // Disabled (the default): ignored.
    let server = TestServer::builder().routes(test_routes).start();
    let me = whoami(&server, Auth::Admin, "?proxy-user=bob");
    assert_eq!(me["effective"], "admin");
    assert_eq!(me["proxyUser"], "bob");
    drop(server);

    let server = TestServer::builder()
        .routes(test_routes)
        .config(|c| {
            c.scheduler.enable_proxy = true;
            c.scheduler.proxy_users = vec!["admin".into()];
        })
        .start();
    let me = whoami(&server, Auth::Admin, "?proxy-user=bob");
    assert_eq!(
        (me["user"].as_str(), me["effective"].as_str()),
        (Some("admin"), Some("bob"))
    );
    assert_eq!(whoami(&server, Auth::Admin, "")["effective"], "admin");
    assert_eq!(
        whoami(&server, Auth::Admin, "?proxy-user=")["effective"],
        "admin"
    );
    drop(server);

    // Enabled, but the caller is not among the users allowed to proxy.
    let server = TestServer::builder()
        .routes(test_routes)
        .config(|c| {
            c.scheduler.enable_proxy = true;
            c.scheduler.proxy_users = vec!["someone-else".into()];
            c.users.iter_mut().for_each(|u| u.admin = true);
        })
        .start();
    assert_eq!(
        whoami(&server, Auth::User, "?proxy-user=bob")["effective"],
        USER
    );
    let twice = server.send(
        "POST",
        &format!("{WHOAMI}?proxy-user=a&proxy-user=b"),
        Auth::Admin,
    );
    assert_eq!(twice.status, 400);
    assert!(
        twice.messages().contains("more than once"),
        "{}",
        twice.body
    );
}

/// Sends `requests` on one connection, one after the other, each waiting for its answer
/// (a body, if any, is written 50 ms after the head, as a slow client would), and
/// returns the status codes read.
fn statuses_on_one_connection(server: &TestServer, requests: &[(String, &str)]) -> Vec<u16> {
    use std::io::{BufRead, BufReader, Read, Write};
    let stream = std::net::TcpStream::connect(&server.address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut statuses = Vec::new();
    for (head, body) in requests {
        if writer.write_all(head.as_bytes()).is_err() {
            break;
        }
        if !body.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(50));
            if writer.write_all(body.as_bytes()).is_err() {
                break;
            }
        }
        let mut status_line = String::new();
        if reader.read_line(&mut status_line).unwrap_or(0) == 0 {
            break;
        }
        statuses.push(status_line.split(' ').nth(1).unwrap().parse().unwrap());
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
    }
    statuses
}

#[test]
fn a_connection_stays_usable_after_a_request_refused_before_its_body_was_read() {
    let server = TestServer::start();
    let with_body = |auth: &str| {
        (
            format!(
                "GET /rest/diag/about HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: 2\r\n\r\n"
            ),
            "{}",
        )
    };
    let user = format!(
        "Authorization: Basic {}\r\n",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{USER}:{PASSWORD}")
        )
    );
    let statuses = statuses_on_one_connection(
        &server,
        &[
            with_body(""),
            with_body(&user),
            (
                "GET /rest/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n".into(),
                "{}",
            ),
            (
                "GET /rest/diag/health/summary HTTP/1.1\r\nHost: x\r\n\r\n".into(),
                "",
            ),
        ],
    );
    assert_eq!(statuses, [401, 200, 404, 200]);
}
