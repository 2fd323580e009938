//! What the handlers of roles and principals share: list, one by id or name, delete,
//! and reading creations and changes.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::Value;

use crate::AppState;
use crate::documents::{Common, Named};
use crate::error::ApiResult;
use crate::input::{Fields, read_object};
use crate::params::{ChangeMode, CommonParams, ListParams};
use crate::reply::{self, parse_json};

/// A resource of named documents.
pub(crate) trait Resource: 'static {
    const DOCUMENTS: Named;
}

pub(crate) async fn list<R: Resource>(
    State(state): State<AppState>,
    params: ListParams,
) -> ApiResult<Json<Value>> {
    let documents = R::DOCUMENTS.list(&state).await?;
    Ok(reply::list_in_memory(&documents, &params))
}

pub(crate) async fn one<R: Resource>(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> ApiResult<Json<Value>> {
    R::DOCUMENTS.get(&state, key).await.map(Json)
}

pub(crate) async fn remove<R: Resource>(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> ApiResult<Json<Value>> {
    R::DOCUMENTS.remove(&state, key).await?;
    Ok(reply::deleted())
}

/// A creation's body read by `read`; the name is required.
pub(crate) fn read_new<T>(
    body: &[u8],
    summary: &str,
    read: impl FnOnce(&mut Fields<'_>) -> T,
    common: fn(&T) -> &Common,
) -> ApiResult<T> {
    let body: Value = parse_json(body)?;
    read_object(&body, summary, |f| {
        let given = read(f);
        if common(&given).name.is_none() {
            f.problem("name", "required");
        }
        given
    })
}

/// 201 with the new document, at `<path>/<its id>`.
pub(crate) fn created(state: &AppState, path: &str, document: Value) -> Response {
    let location = format!("{path}/{}", document["id"].as_str().unwrap_or_default());
    reply::created(state.settings(), &location, document)
}

/// What a change of the document `key` asks: its change-mode (`set` by default), its
/// body, and the summary of a refusal.
pub(crate) fn change_request(
    params: &CommonParams,
    body: &[u8],
    key: &str,
    what: &str,
) -> ApiResult<(ChangeMode, Value, String)> {
    let mode = ChangeMode::parse(params.raw.get("change-mode")?, Some(ChangeMode::Set))?;
    let body: Value = parse_json(body)?;
    Ok((mode, body, format!("The {what} {key} was not changed")))
}
