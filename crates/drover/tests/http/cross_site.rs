//! Cross-site request forgery (issue #53, item 1): a page of another site makes its
//! visitor's browser post a form to the service, with the Basic login the browser holds.
//! The browser's own test (`scripts/browser-test`) makes a real Chromium do it; these
//! send what such a browser sends.

use drover_testkit::{Auth, Reply, TestServer};

const JOBS: &str = "/rest/jobs?api-version=2";

/// What `<form method=POST enctype=text/plain>` sends for an input named
/// `{"commandFile":"/bin/true","x":"` with the value `"}`: JSON once the `=` is inside.
const FORGED: &str = r#"{"commandFile":"/bin/true","x":"="}"#;

fn post(server: &TestServer, content_type: &str, headers: &[(&str, &str)]) -> Reply {
    server.call_with(
        "POST",
        JOBS,
        Auth::Admin,
        headers,
        Some((content_type, FORGED.as_bytes().to_vec())),
    )
}

fn job_count(server: &TestServer) -> u64 {
    let list = server.get("/rest/jobs?api-version=2");
    assert_eq!(list.status, 200, "{}", list.body);
    list.json()["totalCount"].as_u64().expect("a count")
}

#[test]
fn a_form_of_another_site_cannot_submit_a_job_with_the_browsers_login() {
    let server = TestServer::start();
    // `http://127.0.0.1:<port>`, without the deployment prefix.
    let own = server
        .url("")
        .split('/')
        .take(3)
        .collect::<Vec<_>>()
        .join("/");
    let attacks: [&[(&str, &str)]; 4] = [
        // A current browser, from a page of another site.
        &[
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Mode", "navigate"),
        ],
        // From another port of the same host: another service, the same site.
        &[
            ("Origin", "http://127.0.0.1:1"),
            ("Sec-Fetch-Site", "same-site"),
            ("Sec-Fetch-Mode", "navigate"),
        ],
        // An older browser without fetch metadata: its Origin tells.
        &[("Origin", "http://evil.example")],
        // A sandboxed frame or an opaque redirect.
        &[("Origin", "null")],
    ];
    for headers in attacks {
        post(&server, "text/plain", headers).assert_refused(
            403,
            "Cross-site",
            &format!("{headers:?}"),
        );
        post(&server, "application/x-www-form-urlencoded", headers).assert_refused(
            403,
            "Cross-site",
            &format!("form-encoded {headers:?}"),
        );
    }
    assert_eq!(job_count(&server), 0, "no forged job was made");

    // `curl -d` (form-encoded, no Origin) still works, and so do the dashboard's own
    // requests: JSON from a page of this origin.
    assert_eq!(
        post(&server, "application/x-www-form-urlencoded", &[]).status,
        201
    );
    let dashboard = [
        ("Origin", own.as_str()),
        ("Sec-Fetch-Site", "same-origin"),
        ("Sec-Fetch-Mode", "cors"),
    ];
    let reply = post(&server, "application/json", &dashboard);
    assert_eq!(reply.status, 201, "{}", reply.body);
    let without_metadata = post(&server, "application/json", &[("Origin", own.as_str())]);
    assert_eq!(without_metadata.status, 201, "{}", without_metadata.body);
    // A browser's body must say it is JSON: the types any form may send are refused.
    post(&server, "text/plain", &dashboard).assert_refused(415, "application/json", &"text/plain");
    assert_eq!(job_count(&server), 3);
}

#[test]
fn a_browser_is_never_challenged_for_a_basic_login() {
    let server = TestServer::start();
    let browser = server.call_with(
        "GET",
        "/rest/jobs",
        Auth::None,
        &[("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Site", "none")],
        None,
    );
    assert_eq!(browser.status, 401, "{}", browser.body);
    assert_eq!(
        browser.header("WWW-Authenticate"),
        None,
        "a browser would ask once and send the login to every request after"
    );
    let wrong = server.call_with(
        "GET",
        "/rest/diag/auth",
        Auth::Basic("admin".into(), "wrong".into()),
        &[
            ("Sec-Fetch-Mode", "cors"),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        None,
    );
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.header("WWW-Authenticate"), None);
    // Other clients are challenged, as the interface says.
    let client = server.send("GET", "/rest/jobs", Auth::None);
    assert_eq!(client.status, 401);
    assert!(
        client
            .header("WWW-Authenticate")
            .is_some_and(|v| v.starts_with("Basic"))
    );
}

/// What the reviews found refused stays so: no page of another origin gets a CORS grant
/// (a preflight is answered without one, and so is a read), and JSON nested past what the
/// parser follows is a 400, not a crash.
#[test]
fn no_cors_grant_and_deep_json_is_refused() {
    let server = TestServer::start();
    let preflight = server.call_with(
        "OPTIONS",
        JOBS,
        Auth::None,
        &[
            ("Origin", "http://evil.example"),
            ("Access-Control-Request-Method", "POST"),
            (
                "Access-Control-Request-Headers",
                "authorization, content-type",
            ),
        ],
        None,
    );
    let read = server.call_with(
        "GET",
        "/rest/jobs",
        Auth::Admin,
        &[("Origin", "http://evil.example")],
        None,
    );
    assert_eq!(read.status, 200);
    for reply in [&preflight, &read] {
        let granted: Vec<_> = reply
            .headers
            .iter()
            .filter(|(name, _)| name.to_ascii_lowercase().starts_with("access-control-"))
            .collect();
        assert!(granted.is_empty(), "{granted:?}");
    }
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let reply = server.call(
        "POST",
        JOBS,
        Auth::Admin,
        Some(("application/json", deep.into_bytes())),
    );
    reply.assert_refused(400, "JSON", &"100,000 nested arrays");
    assert_eq!(server.get("/rest/diag/about").status, 200, "still serving");
}
