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

/// Where `value` breaks `schema` (types, required properties, enums; recursively), the
/// JSON Schema subset the document uses for answers.
fn violations(schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let fits = types.iter().any(|t| match *t {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            "null" => value.is_null(),
            _ => true,
        });
        if !fits {
            out.push(format!("{at}: {value} is not {types:?}"));
            return;
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(value)
    {
        out.push(format!("{at}: {value} is not one of {values:?}"));
    }
    if let Value::Object(object) = value {
        for name in schema["required"].as_array().into_iter().flatten() {
            if !object.contains_key(name.as_str().unwrap()) {
                out.push(format!("{at}: {name} is required"));
            }
        }
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            if let Some(v) = object.get(name) {
                violations(property, v, &format!("{at}.{name}"), out);
            }
        }
    }
    if let (Value::Array(items), Some(item)) = (value, schema.get("items")) {
        for (i, v) in items.iter().enumerate() {
            violations(item, v, &format!("{at}[{i}]"), out);
        }
    }
}

/// What every read without a key answers fits the document (types, nullable fields,
/// required properties): the document cannot drift from the answers unnoticed.
#[test]
fn every_read_answers_what_the_document_says() {
    let server = TestServer::start();
    // Something in the lists that are empty at first.
    let created = server.send_json(
        "POST",
        "/rest/vcs",
        &serde_json::json!({"description": null}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let report = serde_json::json!({"name": "r", "datapointDuration": 60, "reportSize": 10});
    assert_eq!(
        server.send_json("POST", "/rest/reports", &report).status,
        201
    );
    drover_testkit::submit_v2(&server, serde_json::json!({"commandFile": "/bin/true"}));
    let document = server.get_as(Auth::None, "/rest/openapi.json").json();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (path, item) in document["paths"].as_object().unwrap() {
        let Some(op) = item.get("get") else { continue };
        if path.contains('{') || path == "/rest/openapi.json" {
            continue;
        }
        let required: Vec<String> = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["required"] == true)
            .map(|p| {
                format!(
                    "{}={}",
                    p["name"].as_str().unwrap(),
                    p["schema"]["enum"][0].as_str().unwrap_or("x")
                )
            })
            .collect();
        let Some(schema) = op["responses"]["200"]["content"]["application/json"].get("schema")
        else {
            continue;
        };
        // Every representation version the operation serves.
        let versions: Vec<String> = if required.iter().any(|r| r.starts_with("api-version=")) {
            vec![required.join("&")]
        } else {
            ["1", "2", "3"]
                .iter()
                .map(|v| {
                    let mut query = required.clone();
                    query.push(format!("api-version={v}"));
                    query.join("&")
                })
                .collect()
        };
        for query in versions {
            let reply = server.get(&format!("{path}?{query}"));
            if reply.status == 404 {
                continue; // accounting, where it is off
            }
            if reply.status == 400 && reply.messages().contains("version") {
                continue; // a version the operation does not serve
            }
            assert_eq!(reply.status, 200, "GET {path}?{query}: {}", reply.body);
            checked += 1;
            violations(
                schema,
                &reply.json(),
                &format!("{path}?{query}"),
                &mut wrong,
            );
        }
    }
    assert!(checked > 25, "only {checked} reads checked");
    assert!(
        wrong.is_empty(),
        "answers outside the document:\n{}",
        wrong.join("\n")
    );
}
