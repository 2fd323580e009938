//! Routes that only tests add: they go through the same gate and layers as the
//! interface's own, so they exercise the machinery every resource relies on.

use std::time::Duration;

use axum::Json;
use drover_api::reply::{JsonBody, created};
use drover_api::{Access, AppState, Caller, Routes};
use drover_auth::Permission;
use serde_json::{Value, json};

pub const ECHO: &str = "/rest/test/echo";
pub const WHOAMI: &str = "/rest/test/whoami";
pub const PANIC: &str = "/rest/test/panic";
pub const SLOW: &str = "/rest/test/slow";
pub const CREATE: &str = "/rest/test/things";

pub fn test_routes(routes: &mut Routes) {
    let write = Access::Needs(Permission::create("tests"));
    let read = Access::Needs(Permission::read("tests"));
    routes.post(
        ECHO,
        write,
        |JsonBody(body): JsonBody| async move { Json(body) },
    );
    // Every built-in role may ask who it is (proxied users included).
    let anyone = Access::Needs(Permission::read("diag"));
    routes.post(WHOAMI, anyone, |caller: Caller| async move {
        Json(json!({
            "user": caller.identity.map(|i| i.name),
            "effective": caller.effective_user,
            "proxyUser": caller.proxy_user,
        }))
    });
    routes.get(PANIC, read, || async {
        if true {
            panic!("a bug in a handler");
        }
        Json(json!({}))
    });
    routes.get(SLOW, read, || async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        Json(json!({"finished": true}))
    });
    routes.post(
        CREATE,
        write,
        |axum::extract::State(state): axum::extract::State<AppState>| async move {
            created(
                state.settings(),
                "/rest/test/things/t1",
                json!({"id": "t1"}),
            )
        },
    );
}

/// The `name` of each object of `list`.
pub fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}
