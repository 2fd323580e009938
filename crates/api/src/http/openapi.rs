//! The OpenAPI 3 document, rendered from the route registrations (so it lists exactly
//! the routes that exist), served at `GET /rest/openapi.json` without authentication.

use axum::extract::State;
use axum::http::{Method, header};
use axum::response::IntoResponse;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::routes::{Access, ParamIn, RouteDoc, Routes};

pub(crate) fn register(routes: &mut Routes) {
    routes
        .get("/rest/openapi.json", Access::Public, serve)
        .summary("This OpenAPI document")
        .response(
            200,
            "The OpenAPI 3.1 description of every route",
            Some(schema::any_object()),
        );
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

    /// `schema`, or null (3.1: `"null"` joins its `type`).
    pub fn nullable(mut schema: Value) -> Value {
        if let Some(Value::Array(values)) = schema.get_mut("enum")
            && !values.contains(&Value::Null)
        {
            values.push(Value::Null);
        }
        match schema.get_mut("type") {
            Some(Value::String(t)) => {
                let t = t.clone();
                schema["type"] = json!([t, "null"]);
            }
            Some(Value::Array(types)) => {
                if !types.contains(&json!("null")) {
                    types.push(json!("null"));
                }
            }
            _ => return json!({"anyOf": [schema, {"type": "null"}]}),
        }
        schema
    }

    /// A string or null.
    pub fn string_or_null() -> Value {
        nullable(string())
    }

    /// An object schema whose properties `names` must be present.
    pub fn required(mut schema: Value, names: &[&str]) -> Value {
        schema["required"] = json!(names);
        schema
    }

    /// One of `values`.
    pub fn one_of(values: &[&str]) -> Value {
        json!({"type": "string", "enum": values})
    }

    /// A string of at least one character.
    pub fn text() -> Value {
        json!({"type": "string", "minLength": 1})
    }

    /// An integer within `min..=max`.
    pub fn integer_in(min: i64, max: i64) -> Value {
        json!({"type": "integer", "minimum": min, "maximum": max})
    }

    /// `schema`, answered but never read (3.1 `readOnly`: clients need not send it).
    pub fn read_only(mut schema: Value) -> Value {
        schema["readOnly"] = json!(true);
        schema
    }

    /// A list of `item`.
    pub fn array(item: Value) -> Value {
        json!({"type": "array", "items": item})
    }

    /// An object of any properties.
    pub fn any_object() -> Value {
        json!({"type": "object"})
    }

    /// A date the service reads: `yyyy-MM-dd HH:mm:ss` and a zone (UTC always works).
    pub fn date_input() -> Value {
        json!({"anyOf": [
            {"type": "string",
             "pattern": "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8]) ([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9] UTC$"},
            // As `input::Fields::date` reads it.
            {"type": "integer", "minimum": 0, "maximum": crate::input::MAX_EPOCH_SECOND,
             "description": "seconds since 1970-01-01 00:00:00 UTC"},
        ],
        "description": "yyyy-MM-dd HH:mm:ss ZZZ (any zone the deployment knows; UTC shown), or seconds since the epoch"})
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
        required(object(&[("messages", strings())]), &["messages"])
    }

    /// The list envelope around `item`.
    pub fn envelope(item: Value) -> Value {
        required(
            object(&[
                ("totalCount", integer()),
                ("resultCount", integer()),
                ("results", json!({"type": "array", "items": item})),
            ]),
            &["totalCount", "resultCount", "results"],
        )
    }
}

fn query_param(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

/// A query parameter whose value is JSON text of `schema`.
fn json_query_param(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description,
           "content": {"application/json": {"schema": schema}}})
}

/// A dotted field path as `fields` reads one: trimmed, then `.`-separated segments, none
/// empty (a segment may hold spaces inside a name).
const FIELD_PATH: &str =
    "\\s*([^,.\\s]([^,.]*[^,.\\s])?|[^,.\\s][^,.]*(\\.[^,.]+)*\\.[^,.]*[^,.\\s])\\s*";

/// The characters `str::trim` drops (Unicode White_Space), as a regex class's inside.
const WHITESPACE: &str =
    "\\t\\n\\u000b\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

/// A field path as a key of `sort` (`drover_query::Path::parse`): `.`-separated
/// segments, none empty.
const SORT_PATH: &str = "[^.]+(\\.[^.]+)*";

/// The same as a field of `query`, where a leading `$` names an operator instead.
const QUERY_PATH: &str = "[^.$][^.]*(\\.[^.]+)*";

const QUERY: &str = "#/components/schemas/Query";

/// The `query` language as `drover_query::Filter::parse` reads it: field paths to
/// conditions, and `$and` / `$or` lists of queries. A condition is a value to equal,
/// or an object of operators (one that names an operator holds nothing else).
fn query_schemas() -> (Value, Value) {
    let queries = json!({"type": "array", "minItems": 1, "items": {"$ref": QUERY}});
    let query = json!({
        "type": "object",
        "properties": {"$and": queries, "$or": queries},
        "patternProperties": {(format!("^{QUERY_PATH}$")): {"$ref": "#/components/schemas/Condition"}},
        "additionalProperties": false,
    });
    let any = json!({});
    let condition = json!({"anyOf": [
        {"not": {"type": "object"}},
        {"type": "object", "propertyNames": {"not": {"pattern": "^\\$"}}},
        {
            "type": "object",
            "minProperties": 1,
            "properties": {
                "$eq": any, "$ne": any, "$lt": any, "$lte": any, "$gt": any, "$gte": any,
                "$in": {"type": "array"},
                "$nin": {"type": "array"},
                "$exists": {"enum": [true, false, 0, 1]},
                "$type": {"enum": [1, 2, 3, 4, 8, 9, 10, 16, 18, 19, "number", "double",
                                   "int", "long", "decimal", "string", "object", "array",
                                   "bool", "date", "null"]},
            },
            "additionalProperties": false,
        },
    ]});
    (query, condition)
}

fn common_params(list: bool) -> Vec<Value> {
    let mut params = vec![
        query_param(
            "api-version",
            "Representation version: 1 (the default), 2, 3 or latest",
            json!({"type": "string", "enum": ["1", "2", "3", "latest"]}),
        ),
        query_param(
            "pretty",
            "Indent the JSON answer: true or false (also 1 or 0, any case; given empty, true)",
            json!({"anyOf": [schema::boolean(), {"enum": ["", "0", "1"]}]}),
        ),
        query_param(
            "proxy-user",
            "Act as this user (honoured only when proxying is enabled for the caller)",
            schema::string(),
        ),
    ];
    if list {
        // `\s` of the pattern is Rust's whitespace, which `str::trim` drops (ECMA's
        // `\s` differs: it takes U+FEFF, not U+0085).
        let field = FIELD_PATH
            .replace("\\s*", &format!("[{WHITESPACE}]*"))
            .replace("\\s]", &format!("{WHITESPACE}]"));
        let fields = json!({"type": "string", "pattern": format!("^{field}(,{field})*$")});
        params.extend([
            json_query_param(
                "query",
                "Filter, as a JSON object (document-store syntax: field paths to values or \
                 operator objects such as {\"$gt\": 1})",
                json!({"$ref": QUERY}),
            ),
            json_query_param(
                "sort",
                "Sort keys, as a JSON object of 1 / -1",
                json!({"type": "object", "propertyNames": {"pattern": format!("^{SORT_PATH}$")},
                       "additionalProperties": {"enum": [1, -1, "1", "-1"]}}),
            ),
            query_param(
                "max",
                "At most this many results",
                json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}),
            ),
            query_param(
                "offset",
                "Skip this many leading results",
                json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}),
            ),
            query_param(
                "fields",
                "Comma-separated dotted paths to keep",
                fields.clone(),
            ),
            query_param(
                "exclude-fields",
                "Comma-separated dotted paths to drop",
                fields,
            ),
        ]);
    }
    params
}

fn operation(doc: &RouteDoc) -> Value {
    // A route's own declaration of a common parameter replaces the common one.
    let mut params: Vec<Value> = common_params(doc.list)
        .into_iter()
        .filter(|common| !doc.params.iter().any(|p| common["name"] == p.name))
        .collect();
    for p in &doc.params {
        params.push(json!({
            "name": p.name,
            "in": match p.location {
                ParamIn::Path => "path",
                ParamIn::Query => "query",
                ParamIn::Header => "header",
            },
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
            response["content"] = json!({r.content_type: {"schema": schema}});
        }
        responses.insert(r.status.to_string(), response);
    }
    for (status, description) in error_statuses(doc) {
        responses
            .entry(status.to_string())
            .or_insert_with(|| json!({"description": description}));
    }
    // Every error answers `{"messages": [...]}`, whatever a route said of it.
    for (status, response) in responses.iter_mut() {
        if status.starts_with('4') || status.starts_with('5') {
            response["content"] = json!({"application/json": {"schema": {"$ref": ERROR}}});
        }
    }
    let mut op = json!({
        "summary": doc.summary,
        "operationId": format!("{} {}", doc.method, doc.path),
        "parameters": params,
    });
    match doc.access {
        Access::Public => op["security"] = json!([]),
        Access::Client => op["security"] = json!([{"oauthClient": []}]),
        Access::Needs(permission) => {
            op["x-drover-permission"] = json!(permission.to_string());
        }
    }
    op["responses"] = Value::Object(responses);
    if let Some((content_type, schema)) = &doc.body {
        let mut schema = schema.clone();
        without_nul(&mut schema);
        op["requestBody"] =
            json!({"required": !doc.body_optional, "content": {*content_type: {"schema": schema}}});
    }
    op
}

/// A request schema as the readers take it: the stores cannot keep U+0000, so a body
/// holding it anywhere is refused (`input::read_object`), and every string and field
/// name says so; a null field is not given, so every optional property may be null.
fn without_nul(schema: &mut Value) {
    const NO_NUL: &str = "^[^\\u0000]*$";
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let types: Vec<String> = match object.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    if types.iter().any(|t| t == "string")
        && !object.contains_key("pattern")
        && !object.contains_key("enum")
    {
        object.insert("pattern".into(), json!(NO_NUL));
    }
    if types.iter().any(|t| t == "object") && !object.contains_key("propertyNames") {
        object.insert("propertyNames".into(), json!({"pattern": NO_NUL}));
    }
    let required: Vec<String> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    for (key, value) in object.iter_mut() {
        match key.as_str() {
            "properties" => {
                if let Some(properties) = value.as_object_mut() {
                    for (name, property) in properties.iter_mut() {
                        without_nul(property);
                        // A null field is not given: any optional one may be null.
                        if !required.contains(name) {
                            *property = schema::nullable(property.take());
                        }
                    }
                }
            }
            "items" | "additionalProperties" => without_nul(value),
            "anyOf" | "oneOf" | "allOf" => {
                if let Some(list) = value.as_array_mut() {
                    list.iter_mut().for_each(without_nul);
                }
            }
            _ => {}
        }
    }
}

/// Where the shared error schema is.
const ERROR: &str = "#/components/schemas/Error";

/// The error statuses `doc`'s operation can answer, from what it is: every one may
/// be a bad parameter (400) or find a dependency down (503); one that needs a login may
/// be refused it (401, 429 when logins from the source or for the name failed too often
/// lately) or the permission (403); one with a key in its path may find nothing (404);
/// one that changes something may conflict (409); one with a body may find it too large
/// (413). (No operation answers 415: bodies are read as JSON whatever type they declare,
/// see docs/decisions.md. 405 is the answer of a method a path does not have, so of no
/// operation; 408, 414 and 431, of the transport, to any request.)
pub(crate) fn error_statuses(doc: &RouteDoc) -> Vec<(u16, &'static str)> {
    let mut statuses = vec![(400, "Bad parameters or body")];
    if let Access::Needs(_) = doc.access {
        statuses.extend([
            (401, "Missing or wrong credentials"),
            (403, "Not permitted"),
            (
                429,
                "Too many failed logins lately from this source or for this name",
            ),
        ]);
    }
    if let Access::Client = doc.access {
        statuses.extend([
            (401, "Missing or wrong client credentials"),
            (
                429,
                "Too many failed logins lately from this source or for this name",
            ),
        ]);
    }
    if doc.path.contains('{') {
        statuses.push((404, "No such resource"));
    }
    if doc.method != Method::GET {
        statuses.push((
            409,
            "A conflicting change (a taken name, a stale version...)",
        ));
    }
    if doc.body.is_some() {
        statuses.push((413, "The body is larger than the service reads"));
    }
    statuses.push((
        503,
        "A dependency (the datastore, the directory) does not answer",
    ));
    statuses
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
    add_links(docs, &mut paths);
    let server = if base_url.is_empty() { "/" } else { base_url };
    let (query, condition) = query_schemas();
    let document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Drover",
            "description": "Workload and cloud management web service",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "servers": [{"url": server}],
        "components": {
            "securitySchemes": {
                "basic": {"type": "http", "scheme": "basic"},
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token from POST <base>/oauth/token",
                },
                "oauthClient": {
                    "type": "http",
                    "scheme": "basic",
                    "description": "A portal client's id and secret (or client_id and client_secret in the form)",
                },
            },
            "schemas": {
                "Error": schema::required(schema::messages(), &["messages"]),
                "Query": query,
                "Condition": condition,
            },
        },
        "security": [{"basic": []}, {"bearer": []}],
        "paths": paths,
    });
    serde_json::to_string(&document).expect("a JSON value serializes")
}

/// OpenAPI links from what creates a resource to what reads, changes or deletes it: a
/// `POST <path>` whose created answer (201, or 202 for work done by a job) names the new
/// resource's `id` (else its `name`) leads to every operation under `<path>/{key}`,
/// that answer's value for the key. (Schemathesis' stateful phase follows them.)
fn add_links(docs: &[RouteDoc], paths: &mut Map<String, Value>) {
    for create in docs.iter().filter(|d| d.method == Method::POST) {
        let Some((status, field)) = create.responses.iter().find_map(|r| {
            let properties = r.schema.as_ref()?.get("properties")?;
            let field = ["id", "name"]
                .into_iter()
                .find(|f| properties.get(*f).is_some())?;
            matches!(r.status, 201 | 202).then_some((r.status, field))
        }) else {
            continue;
        };
        let mut links = Map::new();
        for target in docs {
            let Some(rest) = target
                .path
                .strip_prefix(create.path)
                .and_then(|rest| rest.strip_prefix("/{"))
            else {
                continue;
            };
            let Some((key, _)) = rest.split_once('}') else {
                continue;
            };
            let name = format!("{}{}", target.method, &target.path[create.path.len()..])
                .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
            links.insert(
                name,
                json!({
                    "operationId": format!("{} {}", target.method, target.path),
                    "parameters": {format!("path.{key}"): format!("$response.body#/{field}")},
                }),
            );
        }
        if links.is_empty() {
            continue;
        }
        let method = create.method.as_str().to_ascii_lowercase();
        if let Some(response) = paths
            .get_mut(create.path)
            .and_then(|item| item.get_mut(&method))
            .and_then(|op| op["responses"].get_mut(status.to_string()))
        {
            response["links"] = Value::Object(links);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every registered route is in the document, with its parameters, its body where it
    /// reads one, its answer, and every error status it can answer.
    #[test]
    fn every_registered_route_is_documented_whole() {
        let docs = crate::interface().docs();
        assert!(docs.len() > 70, "{}", docs.len());
        let document: Value = serde_json::from_str(&document(&docs, "")).unwrap();
        let mut missing = Vec::new();
        for doc in &docs {
            let name = format!("{} {}", doc.method, doc.path);
            let op = &document["paths"][doc.path][doc.method.as_str().to_ascii_lowercase()];
            if !op.is_object() {
                missing.push(format!("{name}: not in the document"));
                continue;
            }
            let changes = doc.method == Method::POST || doc.method == Method::PUT;
            if changes && doc.body.is_none() && !doc.no_body {
                missing.push(format!("{name}: no body schema (or .no_body())"));
            }
            if doc.body.is_some() {
                let body = &op["requestBody"]["content"];
                let schema = body.as_object().and_then(|c| c.values().next());
                if schema.is_none_or(|s| !s["schema"].is_object()) {
                    missing.push(format!("{name}: an empty body schema"));
                }
            }
            let answers = op["responses"].as_object().unwrap();
            // A redirect (`/dashboard` to `/dashboard/`) is its route's success.
            let success = answers
                .iter()
                .find(|(status, _)| status.starts_with('2') || status.starts_with('3'));
            match success {
                None => missing.push(format!("{name}: no success answer")),
                Some((status, answer)) => {
                    if status != "204"
                        && !status.starts_with('3')
                        && !answer["content"]
                            .as_object()
                            .is_some_and(|c| c.values().all(|c| c["schema"].is_object()))
                    {
                        missing.push(format!("{name}: answer {status} without a schema"));
                    }
                }
            }
            for (status, _) in error_statuses(doc) {
                let answer = &answers[&status.to_string()];
                if answer["content"]["application/json"]["schema"]["$ref"] != ERROR {
                    missing.push(format!("{name}: {status} not documented as an error"));
                }
            }
            for segment in doc.path.split('/') {
                if let Some(param) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    let declared =
                        op["parameters"].as_array().unwrap().iter().any(|p| {
                            p["name"] == param && p["in"] == "path" && p["required"] == true
                        });
                    if !declared {
                        missing.push(format!("{name}: path parameter {param} undeclared"));
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "{} gaps:\n{}",
            missing.len(),
            missing.join("\n")
        );
        assert_eq!(
            document["components"]["schemas"]["Error"]["required"],
            json!(["messages"])
        );
    }

    #[test]
    fn request_strings_and_names_refuse_nul() {
        let mut schema = schema::object(&[
            ("a", schema::string()),
            ("b", schema::array(schema::string())),
            ("c", schema::one_of(&["x"])),
        ]);
        without_nul(&mut schema);
        let no_nul = json!("^[^\\u0000]*$");
        assert_eq!(schema["propertyNames"]["pattern"], no_nul);
        assert_eq!(schema["properties"]["a"]["pattern"], no_nul);
        assert_eq!(schema["properties"]["b"]["items"]["pattern"], no_nul);
        assert!(schema["properties"]["c"].get("pattern").is_none());
    }

    /// What creates a resource links to what reads and deletes it, by the key it answers.
    #[test]
    fn creations_link_to_the_operations_on_what_they_created() {
        let docs = crate::interface().docs();
        let document: Value = serde_json::from_str(&document(&docs, "")).unwrap();
        let links = &document["paths"]["/rest/jobs"]["post"]["responses"]["201"]["links"];
        assert_eq!(
            links["GET__id_"],
            json!({"operationId": "GET /rest/jobs/{id}",
                   "parameters": {"path.id": "$response.body#/id"}})
        );
        assert_eq!(
            links["DELETE__id_"]["operationId"],
            json!("DELETE /rest/jobs/{id}")
        );
        // Every link names an operation of the document.
        let ids: Vec<&Value> = docs
            .iter()
            .map(|d| &document["paths"][d.path][d.method.as_str().to_ascii_lowercase()])
            .map(|op| &op["operationId"])
            .collect();
        let mut count = 0;
        for item in document["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                for response in op["responses"].as_object().unwrap().values() {
                    for link in response["links"]
                        .as_object()
                        .into_iter()
                        .flat_map(|l| l.values())
                    {
                        assert!(ids.contains(&&link["operationId"]), "{link}");
                        count += 1;
                    }
                }
            }
        }
        assert!(count > 20, "{count}");
    }

    #[test]
    fn nullable_schemas_in_the_3_1_style() {
        assert_eq!(
            schema::nullable(schema::string()),
            json!({"type": ["string", "null"]})
        );
        assert_eq!(schema::nullable(schema::date()), schema::date());
        assert_eq!(
            schema::nullable(schema::one_of(&["a"])),
            json!({"type": ["string", "null"], "enum": ["a", null]})
        );
        assert_eq!(
            schema::nullable(json!({"$ref": "#/x"})),
            json!({"anyOf": [{"$ref": "#/x"}, {"type": "null"}]})
        );
    }
}
