//! The OpenAPI 3 document, rendered from the route registrations (so it lists exactly
//! the routes that exist), served at `GET /rest/openapi.json` without authentication.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::routes::{Access, ParamIn, RouteDoc, Routes};

pub(crate) fn register(routes: &mut Routes) {
    routes
        .get("/rest/openapi.json", Access::Public, serve)
        .summary("This OpenAPI document")
        .response(200, "The OpenAPI 3 description of every route", None);
}

async fn serve(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        state.openapi().to_string(),
    )
}

/// Schemas of the common shapes, for route documentation.
pub mod schema {
    use serde_json::{Value, json};

    pub fn string() -> Value {
        json!({"type": "string"})
    }

    pub fn integer() -> Value {
        json!({"type": "integer"})
    }

    pub fn boolean() -> Value {
        json!({"type": "boolean"})
    }

    pub fn number() -> Value {
        json!({"type": "number"})
    }

    pub fn strings() -> Value {
        json!({"type": "array", "items": {"type": "string"}})
    }

    /// A date string `yyyy-MM-dd HH:mm:ss ZZZ`, or null.
    pub fn date() -> Value {
        json!({"type": ["string", "null"], "description": "yyyy-MM-dd HH:mm:ss ZZZ"})
    }

    /// An object with these properties.
    pub fn object(properties: &[(&str, Value)]) -> Value {
        let properties: serde_json::Map<String, Value> = properties
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        json!({"type": "object", "properties": properties})
    }

    /// `{"messages":[...]}`.
    pub fn messages() -> Value {
        object(&[("messages", strings())])
    }

    /// The list envelope around `item`.
    pub fn envelope(item: Value) -> Value {
        object(&[
            ("totalCount", integer()),
            ("resultCount", integer()),
            ("results", json!({"type": "array", "items": item})),
        ])
    }
}

fn query_param(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

fn common_params(list: bool) -> Vec<Value> {
    let mut params = vec![
        query_param(
            "api-version",
            "Representation version: 1 (the default), 2, 3 or latest",
            json!({"type": "string", "enum": ["1", "2", "3", "latest"]}),
        ),
        query_param("pretty", "Indent the JSON answer", schema::boolean()),
        query_param(
            "proxy-user",
            "Act as this user (honoured only when proxying is enabled for the caller)",
            schema::string(),
        ),
    ];
    if list {
        params.extend([
            query_param(
                "query",
                "Filter, as a JSON object (document-store syntax)",
                schema::string(),
            ),
            query_param(
                "sort",
                "Sort keys, as a JSON object of 1 / -1",
                schema::string(),
            ),
            query_param("max", "At most this many results", schema::integer()),
            query_param(
                "offset",
                "Skip this many leading results",
                schema::integer(),
            ),
            query_param(
                "fields",
                "Comma-separated dotted paths to keep",
                schema::string(),
            ),
            query_param(
                "exclude-fields",
                "Comma-separated dotted paths to drop",
                schema::string(),
            ),
        ]);
    }
    params
}

fn operation(doc: &RouteDoc) -> Value {
    let mut params = common_params(doc.list);
    for p in &doc.params {
        params.push(json!({
            "name": p.name,
            "in": match p.location { ParamIn::Path => "path", ParamIn::Query => "query" },
            "required": p.required,
            "description": p.description,
            "schema": p.schema,
        }));
    }
    // Path parameters nobody documented are still declared.
    for segment in doc.path.split('/') {
        if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            let documented = doc.params.iter().any(|p| p.name == name);
            if !documented {
                params.push(json!({"name": name, "in": "path", "required": true, "schema": schema::string()}));
            }
        }
    }
    let mut responses = Map::new();
    for r in &doc.responses {
        let mut response = json!({"description": r.description});
        if let Some(schema) = &r.schema {
            response["content"] = json!({"application/json": {"schema": schema}});
        }
        responses.insert(r.status.to_string(), response);
    }
    let error = |description: &str| {
        json!({"description": description,
               "content": {"application/json": {"schema": schema::messages()}}})
    };
    responses
        .entry("400")
        .or_insert_with(|| error("Bad parameters or body"));
    let mut op = json!({
        "summary": doc.summary,
        "operationId": format!("{} {}", doc.method, doc.path),
        "parameters": params,
    });
    match doc.access {
        Access::Public => op["security"] = json!([]),
        Access::Needs(permission) => {
            responses.insert("401".into(), error("Missing or wrong credentials"));
            responses.insert("403".into(), error("Not permitted"));
            op["x-drover-permission"] = json!(permission.to_string());
        }
    }
    op["responses"] = Value::Object(responses);
    if let Some((content_type, schema)) = &doc.body {
        op["requestBody"] =
            json!({"required": true, "content": {*content_type: {"schema": schema}}});
    }
    op
}

/// The OpenAPI document of `docs`, deployed under `base_url`.
pub(crate) fn document(docs: &[RouteDoc], base_url: &str) -> String {
    let mut paths = Map::new();
    for doc in docs {
        let item = paths
            .entry(doc.path.to_string())
            .or_insert_with(|| json!({}));
        item[doc.method.as_str().to_ascii_lowercase()] = operation(doc);
    }
    let server = if base_url.is_empty() { "/" } else { base_url };
    let document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Drover",
            "description": "Workload and cloud management web service",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "servers": [{"url": server}],
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}},
        "security": [{"basic": []}],
        "paths": paths,
    });
    serde_json::to_string(&document).expect("a JSON value serializes")
}
