//! `/rest/credentials/<kind>` (spec 4.14, version 2 only): the accounts, classes,
//! groups, QoS and users the scheduler knows, configured or seen on submissions.

use axum::Json;
use axum::extract::State;
use drover_auth::Permission;
use drover_sched::CredentialKind;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::openapi::schema::*;
use crate::params::ListParams;
use crate::reply::list_in_memory;
use crate::routes::{Access, Routes};

const READ: Access = Access::Needs(Permission::read("credentials"));

pub(crate) fn register(routes: &mut Routes) {
    routes
        .get("/rest/credentials/accounts", READ, accounts)
        .summary("Accounts the scheduler knows (api-version=2)")
        .api_versions(&["2"])
        .list()
        .response(
            200,
            "Accounts",
            Some(envelope(object(&[("name", string())]))),
        );
    routes
        .get("/rest/credentials/classes", READ, classes)
        .summary("Classes (queues) the scheduler knows (api-version=2)")
        .api_versions(&["2"])
        .list()
        .response(
            200,
            "Classes",
            Some(envelope(object(&[("name", string())]))),
        );
    routes
        .get("/rest/credentials/groups", READ, groups)
        .summary("Groups the scheduler knows (api-version=2)")
        .api_versions(&["2"])
        .list()
        .response(200, "Groups", Some(envelope(object(&[("name", string())]))));
    routes
        .get("/rest/credentials/qoses", READ, qoses)
        .summary("QoS the scheduler knows (api-version=2)")
        .api_versions(&["2"])
        .list()
        .response(200, "QoS", Some(envelope(object(&[("name", string())]))));
    routes
        .get("/rest/credentials/users", READ, users)
        .summary("Users the scheduler knows (api-version=2)")
        .api_versions(&["2"])
        .list()
        .response(200, "Users", Some(envelope(object(&[("name", string())]))));
}

fn listing(state: &AppState, params: &ListParams, kind: CredentialKind) -> ApiResult<Json<Value>> {
    if params.api_version.number() < 2 {
        return Err(ApiError::bad_request(
            "Credentials need api-version=2",
            format!(
                "/rest/credentials/{} is served only with api-version=2",
                kind.as_str()
            ),
        ));
    }
    let documents: Vec<Value> = state
        .scheduler()
        .credentials(kind)
        .into_iter()
        .map(|name| json!({ "name": name }))
        .collect();
    Ok(list_in_memory(&documents, params))
}

async fn accounts(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    listing(&state, &params, CredentialKind::Accounts)
}

async fn classes(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    listing(&state, &params, CredentialKind::Classes)
}

async fn groups(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    listing(&state, &params, CredentialKind::Groups)
}

async fn qoses(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    listing(&state, &params, CredentialKind::Qoses)
}

async fn users(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    listing(&state, &params, CredentialKind::Users)
}
