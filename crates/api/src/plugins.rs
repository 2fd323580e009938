//! `/rest/plugins` and `/rest/plugin-types` (spec 2.14, 4.12, part 3): plugin types
//! uploaded as Rhai scripts (or a zip archive of them), plugins and their lifecycle, and
//! their web services, over `drover_plugins::registry::Plugins`.
//!
//! - `PUT /rest/plugin-types` reads a script (`text/plain`, `application/x-groovy`) or,
//!   with `jar-filename`, an archive (`application/x-jar`); any other content type is read
//!   as JSON and refused. It answers every type, as `GET` does.
//! - A plugin's `PUT` answers messages that report the update and a start (part 3); its
//!   `DELETE` answers `{}` with the detail in `X-SVC-Message`.
//! - `/rest/plugins/<id>/services/<name>` takes any method; the script function gets
//!   `#{method, params, body}` and what it answers is answered as JSON.
//!
//! Plugins run as root's scripts in a sandbox, acting with the permissions of the user who
//! created them; only administrators (by default) manage them.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use drover_auth::{Action, Permission};
use drover_plugins::registry::{
    self, NewPlugin, Plugin, PluginChange, PluginError, PluginState, Plugins, TypeView,
};
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult, Kind};
use crate::input::{Fields, read_object};
use crate::openapi::schema::{integer, object, string};
use crate::params::{CommonParams, ListParams};
use crate::reply::{self, parse_json};
use crate::routes::{Access, Caller, ItemChange, ItemRead, Routes, Submission};

const READ: Access = Access::Needs(Permission::read("plugins"));
const CREATE: Access = Access::Needs(Permission::create("plugins"));
const UPDATE: Access = Access::Needs(Permission::update("plugins"));
const DELETE: Access = Access::Needs(Permission::delete("plugins"));
const TYPES_READ: Access = Access::Needs(Permission::read("plugin-types"));
const TYPES_UPLOAD: Access = Access::Needs(Permission::update("plugin-types"));
const SERVICES: Access = Access::Needs(Permission::new("plugin-services", Action::Use));

/// What creating (`new`) or changing a plugin reads.
fn plugin_input(new: bool) -> Value {
    let interval = crate::openapi::schema::integer_in(
        registry::MIN_POLL_INTERVAL as i64,
        registry::MAX_POLL_INTERVAL as i64,
    );
    let mut input = object(&[
        ("id", crate::openapi::schema::text()),
        ("pluginType", crate::openapi::schema::text()),
        (
            "state",
            crate::openapi::schema::one_of(&["STARTED", "STOPPED", "PAUSED"]),
        ),
        ("pollInterval", interval),
        ("autoStart", json!({"type": "boolean"})),
        ("config", object(&[])),
    ]);
    input["additionalProperties"] = json!(false);
    if new {
        crate::openapi::schema::required(input, &["id", "pluginType"])
    } else {
        input
    }
}

fn plugin_schema() -> Value {
    object(&[
        ("id", string()),
        ("pluginType", string()),
        ("state", string()),
        ("pollInterval", integer()),
        ("autoStart", json!({"type": "boolean"})),
        ("config", object(&[])),
        ("lastPollDate", string()),
        ("nextPollDate", string()),
        ("errorMessage", string()),
    ])
}

fn type_schema() -> Value {
    object(&[
        ("id", string()),
        ("author", string()),
        ("description", string()),
        (
            "instances",
            json!({"type": "array", "items": object(&[("id", string())])}),
        ),
    ])
}

pub(crate) fn register(routes: &mut Routes) {
    let messages = || Some(object(&[("messages", json!({"type": "array"}))]));
    routes
        .get("/rest/plugin-types", TYPES_READ, list_types)
        .summary("Plugin types: the built-in Native and those uploaded")
        .list()
        .response(
            200,
            "Plugin types",
            Some(crate::openapi::schema::envelope(type_schema())),
        );
    routes
        .get("/rest/plugin-types/{id}", TYPES_READ, one_type)
        .summary("One plugin type")
        .path_param("id", "The type's id")
        .response(200, "The plugin type", Some(type_schema()))
        .response(404, "No such type", None);
    routes
        .put("/rest/plugin-types", TYPES_UPLOAD, upload)
        .summary("Uploads a Rhai script (text/plain, application/x-groovy) or a zip archive of them (application/x-jar, jar-filename)")
        .flag("reload-plugins", "Reload the plugins of the uploaded types (default true)")
        .query("jar-filename", "The name of an uploaded archive (application/x-jar)", string())
        .body("text/plain", string())
        .response(200, "Every plugin type", Some(crate::openapi::schema::envelope(type_schema())))
        .response(400, "The script does not compile, or the content type is not accepted", None);
    routes
        .get("/rest/plugins", READ, list)
        .summary("Plugins")
        .list()
        .response(
            200,
            "Plugins",
            Some(crate::openapi::schema::envelope(plugin_schema())),
        );
    routes
        .get("/rest/plugins/{id}", READ, one)
        .summary("One plugin")
        .path_param("id", "The plugin's id")
        .response(200, "The plugin", Some(plugin_schema()))
        .response(404, "No such plugin", None);
    routes
        .post("/rest/plugins", CREATE, create)
        .summary("Creates a plugin (id and pluginType required); an autoStart one starts")
        .json_body(plugin_input(true))
        .response(201, "The plugin's id", Some(object(&[("id", string())])))
        .response(
            400,
            "A field is wrong, the type does not exist or the configuration is invalid",
            None,
        )
        .response(409, "The id is taken", None);
    routes
        .put("/rest/plugins/{id}", UPDATE, modify)
        .summary("Changes state (STARTED, STOPPED, PAUSED), pollInterval, autoStart or config")
        .path_param("id", "The plugin's id")
        .json_body(plugin_input(false))
        .response(200, "What was done", messages())
        .response(
            400,
            "A field is wrong, or the configuration is refused",
            None,
        )
        .response(404, "No such plugin", None);
    routes
        .post("/rest/plugins/{id}/poll", UPDATE, poll)
        .summary("Polls a plugin now")
        .path_param("id", "The plugin's id")
        .no_body()
        .response(200, "Polled", messages())
        .response(400, "The poll failed (the plugin is ERRORED)", None)
        .response(404, "No such plugin", None);
    routes
        .delete("/rest/plugins/{id}", DELETE, remove)
        .summary("Stops and deletes a plugin (X-SVC-Message says so)")
        .path_param("id", "The plugin's id")
        .response(200, "Deleted", Some(object(&[])))
        .response(404, "No such plugin", None);
    for method in [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
    ] {
        let reads_body = [Method::POST, Method::PUT, Method::PATCH].contains(&method);
        let route = routes
            .add(
                method,
                "/rest/plugins/{id}/services/{service}",
                SERVICES,
                call_service,
            )
            .summary("Calls a plugin's web service (camelCase or hyphenated name)")
            .path_param("id", "The plugin's id")
            .path_param("service", "The service's name");
        let route = if reads_body {
            route.optional_json_body(json!({}))
        } else {
            route
        };
        route
            .response(200, "What the service answered", Some(json!({})))
            .response(404, "No such plugin or service", None);
    }
}

async fn blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&Plugins) -> Result<T, PluginError> + Send + 'static,
) -> ApiResult<T> {
    let plugins = state.plugins().clone();
    tokio::task::spawn_blocking(move || work(&plugins))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(error)
}

fn error(error: PluginError) -> ApiError {
    match error {
        PluginError::Invalid(messages) => ApiError::new(Kind::BadRequest, messages),
        PluginError::NotFound(what) => ApiError::not_found(what),
        PluginError::Conflict(messages) => ApiError::new(Kind::Conflict, messages),
        PluginError::Store(e) => e.into(),
    }
}

fn type_wire(view: &TypeView) -> Value {
    let config: Map<String, Value> = view
        .config
        .iter()
        .map(|k| {
            (
                k.name.clone(),
                json!({"type": k.kind.as_str(), "required": k.required, "default": k.default}),
            )
        })
        .collect();
    json!({
        "id": view.id,
        "author": view.author,
        "description": view.description,
        "instances": view.instances.iter().map(|i| json!({"id": i})).collect::<Vec<_>>(),
        "config": config,
    })
}

async fn list_types(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    let types = blocking(&state, |p| Ok(p.types())).await?;
    let documents: Vec<Value> = types.iter().map(type_wire).collect();
    Ok(reply::list_in_memory(&documents, &params))
}

async fn one_type(ItemRead(state, _, _, id): ItemRead) -> ApiResult<Json<Value>> {
    let types = blocking(&state, |p| Ok(p.types())).await?;
    types
        .iter()
        .find(|t| t.id == id)
        .map(|t| Json(type_wire(t)))
        .ok_or_else(|| ApiError::not_found(format!("No plugin type '{id}'")))
}

const NOT_UPLOADED: &str = "The plugin type was not uploaded";

async fn upload(
    headers: HeaderMap,
    Submission(state, params, _caller, body): Submission,
) -> ApiResult<Json<Value>> {
    let reload = match params.raw.get("reload-plugins")? {
        None => true,
        Some(_) => params.raw.flag("reload-plugins")?,
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let jar = params.raw.get("jar-filename")?.map(String::from);
    match (content_type.as_str(), jar) {
        ("application/x-jar" | "application/java-archive" | "application/zip", Some(name)) => {
            if !name.ends_with(".jar") && !name.ends_with(".zip") {
                return Err(ApiError::bad_request(
                    NOT_UPLOADED,
                    "jar-filename: must end in .jar",
                ));
            }
            blocking(&state, move |p| p.upload_archive(&body, &name, reload)).await?;
        }
        ("application/x-jar" | "application/java-archive" | "application/zip", None) => {
            return Err(ApiError::bad_request(
                NOT_UPLOADED,
                "jar-filename: required with an archive",
            ));
        }
        ("text/plain" | "application/x-groovy" | "text/x-rhai" | "application/x-rhai", _) => {
            let source = String::from_utf8(body.to_vec())
                .map_err(|_| ApiError::bad_request(NOT_UPLOADED, "the script is not UTF-8 text"))?;
            blocking(&state, move |p| p.upload_script(&source, reload)).await?;
        }
        _ => {
            // Read as JSON, as the spec says, and refused either way.
            let reason = match parse_json(&body) {
                Err(_) => {
                    "the body is read as JSON (its content type is not a script's) and is not JSON"
                }
                Ok(_) => "a JSON body is not a plugin type",
            };
            return Err(ApiError::new(
                Kind::BadRequest,
                [
                    NOT_UPLOADED,
                    reason,
                    "send a Rhai script as text/plain (or application/x-groovy), or a zip archive of \
                     .rhai scripts as application/x-jar with jar-filename",
                ],
            ));
        }
    }
    let types = blocking(&state, |p| Ok(p.types())).await?;
    let documents: Vec<Value> = types.iter().map(type_wire).collect();
    Ok(Json(
        json!({"totalCount": documents.len(), "resultCount": documents.len(), "results": documents}),
    ))
}

/// Whether `caller` may see and manage `plugin`: with their permission over everybody's
/// objects, or over their own and it is theirs (it acts with its creator's rights: anyone
/// else changing it would act with them).
fn theirs(caller: &Caller, plugin: &registry::Plugin) -> bool {
    caller.over_all() || caller.effective_user.as_deref() == Some(plugin.created_by.user.as_str())
}

/// The plugin `id`, if `caller` may reach it (else, as if there were none, 404).
async fn reachable(state: &AppState, caller: &Caller, id: &str) -> ApiResult<registry::Plugin> {
    let wanted = id.to_string();
    let plugin = blocking(state, move |p| p.plugin(&wanted)).await?;
    if theirs(caller, &plugin) {
        Ok(plugin)
    } else {
        Err(ApiError::not_found(format!("No plugin '{id}'")))
    }
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    params: ListParams,
) -> ApiResult<Json<Value>> {
    let plugins = blocking(&state, |p| Ok(p.plugins())).await?;
    let documents: Vec<Value> = plugins
        .iter()
        .filter(|p| theirs(&caller, p))
        .map(wire)
        .collect();
    Ok(reply::list_in_memory(&documents, &params))
}

async fn one(ItemRead(state, _, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    let plugin = reachable(&state, &caller, &id).await?;
    Ok(Json(wire(&plugin)))
}

const NOT_CREATED: &str = "The plugin was not created";

fn read_config(f: &mut Fields<'_>) -> Option<Map<String, Value>> {
    match f.raw("config") {
        None | Some(Value::Null) => None,
        Some(Value::Object(config)) => Some(config.clone()),
        Some(_) => {
            f.problem("config", "expected an object of name: value");
            None
        }
    }
}

fn read_interval(f: &mut Fields<'_>) -> Option<u64> {
    f.integer_in(
        "pollInterval",
        registry::MIN_POLL_INTERVAL as i64,
        registry::MAX_POLL_INTERVAL as i64,
    )
    .map(|n| n as u64)
}

async fn create(Submission(state, _params, caller, body): Submission) -> ApiResult<Response> {
    crate::input::within_submission_bound(&state, &caller, &body, NOT_CREATED)?;
    let body = parse_json(&body)?;
    let new = read_object(&body, NOT_CREATED, |f| {
        f.only(
            &[
                "id",
                "pluginType",
                "pollInterval",
                "autoStart",
                "config",
                "state",
            ],
            "not a field of a plugin",
        );
        let id = f.string("id");
        let plugin_type = f.string("pluginType");
        for (key, given) in [("id", id.is_some()), ("pluginType", plugin_type.is_some())] {
            if !given && !f.has(key) {
                f.problem(key, "required");
            }
        }
        NewPlugin {
            id: id.unwrap_or_default(),
            plugin_type: plugin_type.unwrap_or_default(),
            poll_interval: read_interval(f),
            auto_start: f.boolean("autoStart"),
            config: read_config(f).unwrap_or_default(),
        }
    })?;
    let by = match &caller.identity {
        // Acting for someone else (proxy-user) is acting as them, without their groups.
        Some(identity) if Some(&identity.name) == caller.effective_user.as_ref() => {
            registry::Acting {
                user: identity.name.clone(),
                admin: identity.admin,
                groups: identity
                    .groups
                    .iter()
                    .map(|g| (g.kind.clone(), g.name.clone()))
                    .collect(),
            }
        }
        _ => registry::Acting {
            user: acting_user(&caller),
            ..registry::Acting::default()
        },
    };
    let id = new.id.clone();
    blocking(&state, move |p| p.create(new, by)).await?;
    Ok(reply::created(
        state.settings(),
        &format!("/rest/plugins/{id}"),
        json!({"id": id}),
    ))
}

fn acting_user(caller: &Caller) -> String {
    caller
        .effective_user
        .clone()
        .or_else(|| caller.identity.as_ref().map(|i| i.name.clone()))
        .unwrap_or_default()
}

async fn modify(
    ItemChange(state, _params, caller, id, body): ItemChange,
) -> ApiResult<Json<Value>> {
    let summary = format!("The plugin {id} was not changed");
    crate::input::within_submission_bound(&state, &caller, &body, &summary)?;
    reachable(&state, &caller, &id).await?;
    let body = parse_json(&body)?;
    let change = read_object(&body, &summary, |f| {
        f.only(
            &[
                "state",
                "pollInterval",
                "autoStart",
                "config",
                "id",
                "pluginType",
            ],
            "not a field a change may give",
        );
        let state = f.string("state").and_then(|text| {
            let state = PluginState::parse(&text);
            if state.is_none() {
                f.problem(
                    "state",
                    format!("'{text}' is not STARTED, STOPPED or PAUSED"),
                );
            }
            state
        });
        PluginChange {
            state,
            poll_interval: read_interval(f),
            auto_start: f.boolean("autoStart"),
            config: read_config(f),
        }
    })?;
    let messages = blocking(&state, move |p| p.modify(&id, change)).await?;
    Ok(reply::messages(messages))
}

async fn poll(ItemRead(state, _, caller, id): ItemRead) -> ApiResult<Json<Value>> {
    reachable(&state, &caller, &id).await?;
    let messages = blocking(&state, move |p| p.poll(&id)).await?;
    Ok(reply::messages(messages))
}

async fn remove(ItemRead(state, _, caller, id): ItemRead) -> ApiResult<Response> {
    // A failure is `{messages: [summary, reason]}` (4.12).
    let with_summary = |mut e: ApiError| {
        if e.messages.len() == 1 {
            e.messages.insert(0, "The plugin was not deleted".into());
        }
        e
    };
    reachable(&state, &caller, &id)
        .await
        .map_err(with_summary)?;
    let message = blocking(&state, move |p| p.delete(&id))
        .await
        .map_err(with_summary)?;
    let mut response = reply::deleted().into_response();
    if let Ok(value) = HeaderValue::from_str(&message) {
        response.headers_mut().insert("X-SVC-Message", value);
    }
    Ok(response)
}

async fn call_service(
    method: Method,
    Path((id, service)): Path<(String, String)>,
    Submission(state, params, caller, body): Submission,
) -> ApiResult<Json<Value>> {
    crate::input::within_submission_bound(
        &state,
        &caller,
        &body,
        "The web service was not called",
    )?;
    reachable(&state, &caller, &id).await?;
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        parse_json(&body)?
    };
    let request = json!({
        "method": method.as_str(),
        "params": query_map(&params),
        "body": body,
        "user": acting_user(&caller),
    });
    let answer = blocking(&state, move |p| p.call_service(&id, &service, request)).await?;
    Ok(Json(answer))
}

fn query_map(params: &CommonParams) -> Value {
    Value::Object(
        params
            .raw
            .pairs()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect(),
    )
}

/// The wire shape of a plugin.
fn wire(plugin: &Plugin) -> Value {
    json!({
        "id": plugin.id,
        "pluginType": plugin.plugin_type,
        "state": plugin.state,
        "pollInterval": plugin.poll_interval,
        "autoStart": plugin.auto_start,
        "config": plugin.config,
        "lastPollDate": plugin.last_poll_date,
        "nextPollDate": plugin.next_poll_date,
        "errorMessage": plugin.error,
    })
}
