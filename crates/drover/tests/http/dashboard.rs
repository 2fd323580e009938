//! The web dashboard's files: public, static, built in, with a strict policy; and no
//! way from its routes to a file or to data. (What the page does in a browser is
//! `scripts/browser-test`.)

use drover_api::dashboard::{ASSETS, CONTENT_SECURITY_POLICY};
use drover_testkit::{Auth, TestServer};

use crate::access::documented_routes;

fn assert_secure(reply: &drover_testkit::Reply, what: &str) {
    let policy = reply.header("content-security-policy").unwrap_or_default();
    assert_eq!(policy, CONTENT_SECURITY_POLICY, "{what}");
    for needed in [
        "default-src 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
    ] {
        assert!(policy.contains(needed), "{what}: {policy}");
    }
    assert!(!policy.contains("unsafe"), "{what}: {policy}");
    assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(reply.header("x-frame-options"), Some("DENY"));
    assert_eq!(reply.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(
        reply.header("cross-origin-resource-policy"),
        Some("same-origin")
    );
}

#[test]
fn every_file_is_served_without_login_with_its_type_and_policy() {
    let server = TestServer::start();
    for (path, content_type) in [
        ("/dashboard/", "text/html; charset=utf-8"),
        ("/dashboard/app.js", "text/javascript; charset=utf-8"),
        ("/dashboard/style.css", "text/css; charset=utf-8"),
        ("/dashboard/icon.svg", "image/svg+xml"),
    ] {
        let reply = server.get_as(Auth::None, path);
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        assert_eq!(reply.header("content-type"), Some(content_type), "{path}");
        assert_secure(&reply, path);
        let asset = ASSETS.iter().find(|a| a.path == path).unwrap();
        assert_eq!(
            reply.body.as_bytes(),
            asset.body,
            "{path} is the built-in file"
        );
        // The same for everybody: a login changes nothing.
        assert_eq!(server.get(path).body, reply.body, "{path}");
    }
    assert_eq!(ASSETS.len(), 4);
}

#[test]
fn the_root_and_the_path_without_its_slash_redirect_under_any_prefix() {
    for base in ["", "/mws"] {
        let server = TestServer::builder()
            .config(|c| c.base_url = base.into())
            .start();
        // The dashboard's path without its slash, and the service's own address (the
        // one it prints at start, with or without its slash), lead to the dashboard.
        let root = format!("{base}/dashboard/");
        for (path, location) in [
            (format!("{base}/dashboard"), "dashboard/"),
            (format!("{base}/"), root.as_str()),
            (base.to_string(), root.as_str()),
        ] {
            if path.is_empty() {
                continue;
            }
            let answer = server.raw(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            );
            assert!(answer.starts_with("HTTP/1.1 308"), "{path}: {answer}");
            assert!(
                answer
                    .to_ascii_lowercase()
                    .contains(&format!("\r\nlocation: {location}\r\n")),
                "{path}: {answer}"
            );
        }
        // Followed (relative to `<base>/dashboard`): the page.
        let page = server.get_as(Auth::None, "/dashboard");
        assert_eq!(page.status, 200);
        assert!(
            page.body.contains("<script src=\"app.js\""),
            "{}",
            page.body
        );
    }
}

/// The files are looked up in a fixed table of routes: no request names a file.
#[test]
fn no_other_path_reaches_a_file() {
    let server = TestServer::start();
    for path in [
        "/dashboard/../../etc/passwd",
        "/dashboard/..%2f..%2fetc%2fpasswd",
        "/dashboard/%2e%2e/%2e%2e/etc/passwd",
        "/dashboard/....//....//etc/passwd",
        "/dashboard/..\\..\\etc\\passwd",
        "/dashboard//etc/passwd",
        "/dashboard/index.html",
        "/dashboard/dashboard.rs",
        "/dashboard/../dashboard.rs",
        "/dashboard/app.js/",
        "/dashboard/app.js%00",
        "/dashboard/APP.JS",
        "/dashboard/app.js.map",
        "/dashboard/x/app.js",
        "/etc/passwd",
    ] {
        let answer = server
            .raw(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes());
        assert!(
            answer.starts_with("HTTP/1.1 404") || answer.starts_with("HTTP/1.1 400"),
            "{path}: {answer}"
        );
        assert!(!answer.contains("root:"), "{path}: {answer}");
        assert!(!answer.contains("fn register"), "{path}: {answer}");
    }
    // Only reads: the files cannot be changed or deleted.
    for method in ["PUT", "POST", "DELETE"] {
        let reply = server.call(method, "/dashboard/app.js", Auth::Admin, None);
        assert_eq!(reply.status, 405, "{method}: {}", reply.body);
    }
}

/// The dashboard adds public routes (its files) and no other: every other route,
/// `/rest` included, still needs a login (`access` checks each of them).
#[test]
fn the_dashboard_adds_no_public_data() {
    let server = TestServer::start();
    let mut public: Vec<String> = documented_routes(&server)
        .into_iter()
        .filter(|(_, _, public)| *public)
        .map(|(method, path, _)| format!("{method} {path}"))
        .collect();
    public.sort();
    assert_eq!(
        public,
        [
            "GET /",
            "GET /dashboard",
            "GET /dashboard/",
            "GET /dashboard/app.js",
            "GET /dashboard/icon.svg",
            "GET /dashboard/style.css",
            "GET /rest/diag/health/summary",
            "GET /rest/openapi.json",
        ]
    );
    for path in [
        "/rest/jobs",
        "/rest/nodes",
        "/rest/events/stream",
        "/rest/reports",
    ] {
        let reply = server.call_with(
            "GET",
            path,
            Auth::None,
            &[("Referer", &server.url("/dashboard/"))],
            None,
        );
        assert_eq!(reply.status, 401, "{path}: {}", reply.body);
    }
}

/// What the page is made of keeps the rules the policy enforces, so that the policy
/// never has to be loosened: no inline script or style, nothing from elsewhere, no HTML
/// built from strings, the login kept only for the tab.
#[test]
fn the_files_keep_to_the_policy() {
    let text = |path: &str| {
        std::str::from_utf8(ASSETS.iter().find(|a| a.path == path).unwrap().body).unwrap()
    };
    let html = text("/dashboard/");
    let script = text("/dashboard/app.js");
    let style = text("/dashboard/style.css");
    assert_eq!(html.matches("<script").count(), 1);
    assert!(html.contains("<script src=\"app.js\" defer></script>"));
    for inline in [
        " style=",
        " onclick=",
        " onload=",
        " onsubmit=",
        "javascript:",
    ] {
        assert!(!html.contains(inline), "{inline}");
    }
    for file in [html, script, style] {
        let outside = file
            .replace("http://www.w3.org/2000/svg", "")
            .contains("://");
        assert!(!outside, "a URL of another origin");
        assert!(!file.contains("@import"));
    }
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "localStorage",
        "setAttribute(\"style\"",
    ] {
        assert!(!script.contains(sink), "app.js uses {sink}");
    }
    assert!(script.contains("sessionStorage"));
    assert!(script.contains("credentials: \"omit\""));
}
