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

/// The fields the document gives a body are fields the operation reads: a body naming
/// each of them (null: "not given") draws no "unknown field" and no "not a field" for
/// any, so the document cannot promise a field the handler drops or refuses.
#[test]
fn every_documented_body_field_is_read_by_its_operation() {
    let server = TestServer::builder()
        .config(|c| c.scheduler.enable_job_arrays = true)
        .start();
    let document = server.get_as(Auth::None, "/rest/openapi.json").json();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(schema) =
                op["requestBody"]["content"]["application/json"]["schema"].as_object()
            else {
                continue;
            };
            let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
                continue;
            };
            let body: serde_json::Map<String, Value> = properties
                .iter()
                .filter(|(_, p)| p["readOnly"] != true)
                .map(|(name, _)| (name.clone(), Value::Null))
                .collect();
            let concrete = path.replace(['{', '}'], "");
            let params = op["parameters"].as_array().unwrap();
            let required: Vec<&Value> = params
                .iter()
                .filter(|p| p["required"] == true && p["in"] == "query")
                .collect();
            // Each value of an enumerated required parameter (change-mode...): a field is
            // wrong when no value reads it.
            let variants: Vec<String> = match required.first() {
                None => vec![String::new()],
                Some(p) => p["schema"]["enum"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| format!("{}={}", p["name"].as_str().unwrap(), v.as_str().unwrap()))
                    .collect(),
            };
            let mut refused_everywhere: Option<Vec<String>> = None;
            for query in &variants {
                let target = format!("{concrete}?{query}");
                let reply = server.call(
                    &method.to_uppercase(),
                    &target,
                    Auth::Admin,
                    Some((
                        "application/json",
                        Value::Object(body.clone()).to_string().into_bytes(),
                    )),
                );
                checked += 1;
                let answer: Value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
                let refused = [
                    "unknown field",
                    "not a field",
                    "cannot be given",
                    "cannot be changed",
                ];
                let here: Vec<String> = answer["messages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter(|m| {
                        body.keys().any(|name| m.starts_with(&format!("{name}: ")))
                            && refused.iter().any(|r| m.contains(r))
                    })
                    .map(|m| format!("{} {concrete}: {m}", method.to_uppercase()))
                    .collect();
                let field = |m: &String| m.split(": ").nth(1).unwrap_or_default().to_string();
                refused_everywhere = Some(match refused_everywhere {
                    None => here,
                    Some(before) => before
                        .into_iter()
                        .filter(|m| here.iter().any(|h| field(h) == field(m)))
                        .collect(),
                });
            }
            wrong.extend(refused_everywhere.unwrap_or_default());
        }
    }
    assert!(checked > 30, "only {checked} bodies checked");
    assert!(
        wrong.is_empty(),
        "documented fields not read:\n{}",
        wrong.join("\n")
    );
}
