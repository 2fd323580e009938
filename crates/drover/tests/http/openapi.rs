//! The OpenAPI document lists every route that exists, and nothing else.

use drover_testkit::{Auth, TestServer};
use serde_json::Value;

/// (method, path) of every endpoint row of the interface specification, with `<x>`
/// placeholders made concrete.
fn spec_endpoints() -> Vec<(String, String)> {
    let spec = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/spec/interface.md"
    );
    let text = std::fs::read_to_string(spec)
        .unwrap_or_else(|e| panic!("{spec}: {e} (../shared must sit beside the repository)"));
    let mut endpoints = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(method) = cells
            .get(1)
            .filter(|m| ["GET", "POST", "PUT", "DELETE"].contains(m))
        else {
            continue;
        };
        for path in line.split('`').skip(1).step_by(2) {
            if !path.starts_with("/rest/") || path.contains("...") {
                continue;
            }
            let path = path.split(['?', '[']).next().unwrap();
            let concrete: Vec<String> = path
                .split('/')
                .map(|s| {
                    if s.starts_with('<') {
                        "x".into()
                    } else {
                        s.into()
                    }
                })
                .collect();
            endpoints.push((method.to_string(), concrete.join("/")));
        }
    }
    assert!(endpoints.len() > 60, "{endpoints:?}");
    endpoints
}

fn documented(document: &Value, method: &str, path: &str) -> bool {
    document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .any(|(template, item)| {
            let a: Vec<&str> = template.split('/').collect();
            let b: Vec<&str> = path.split('/').collect();
            a.len() == b.len()
                && a.iter().zip(&b).all(|(t, p)| t.starts_with('{') || t == p)
                && item.get(method.to_lowercase()).is_some()
        })
}

#[test]
fn every_route_that_answers_is_in_the_openapi_document() {
    let server = TestServer::start();
    let document = server.get_as(Auth::None, "/rest/openapi.json").json();
    assert_eq!(document["openapi"], "3.1.0");
    let mut served = 0;
    for (method, path) in spec_endpoints() {
        let body =
            (method == "POST" || method == "PUT").then(|| ("application/json", b"{}".to_vec()));
        let reply = server.call(&method, &path, Auth::Admin, body);
        let unknown = reply.status == 404 && reply.messages().starts_with("Unknown path");
        let wrong_method = reply.status == 405;
        if unknown || wrong_method {
            assert!(
                !documented(&document, &method, &path),
                "{method} {path} is documented but not served"
            );
            continue;
        }
        served += 1;
        assert!(
            documented(&document, &method, &path),
            "{method} {path} answers {} but is not in the OpenAPI document",
            reply.status
        );
    }
    assert!(
        served >= 5,
        "only {served} endpoints of the specification are served"
    );
}

#[test]
fn operations_document_their_parameters_and_permissions() {
    let server = TestServer::start();
    let document = server.get_as(Auth::None, "/rest/openapi.json").json();
    let list = &document["paths"]["/rest/permissions"]["get"];
    let names: Vec<&str> = list["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for expected in [
        "api-version",
        "pretty",
        "proxy-user",
        "query",
        "sort",
        "max",
        "offset",
        "fields",
        "exclude-fields",
    ] {
        assert!(names.contains(&expected), "{expected} missing: {names:?}");
    }
    assert_eq!(list["x-drover-permission"], "permissions:read");
    assert!(list["responses"]["401"].is_object());
    let one = &document["paths"]["/rest/permissions/{id}"]["get"];
    assert!(
        one["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "id" && p["in"] == "path")
    );
    let health = &document["paths"]["/rest/diag/health/summary"]["get"];
    assert_eq!(health["security"], serde_json::json!([]));
    assert!(health["responses"]["200"]["content"]["application/json"]["schema"].is_object());
}
