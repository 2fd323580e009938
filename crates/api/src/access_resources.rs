//! What the handlers of roles and principals share: list, one by id or name, delete,
//! reading creations and changes, and calling [`AccessStore`] off the async runtime.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::Response;
use drover_auth::access_store::{AccessCollection, AccessError, AccessStore, Common};
use serde_json::Value;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::input::{Fields, read_object};
use crate::params::{ChangeMode, CommonParams, ListParams};
use crate::reply::{self, parse_json};

/// A resource of named documents.
pub(crate) trait Resource: 'static {
    const COLLECTION: AccessCollection;
}

pub(crate) async fn list<R: Resource>(
    State(state): State<AppState>,
    params: ListParams,
) -> ApiResult<Json<Value>> {
    let documents = stored(&state, false, |s| s.list(R::COLLECTION)).await?;
    Ok(reply::list_in_memory(&documents, &params))
}

pub(crate) async fn one<R: Resource>(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> ApiResult<Json<Value>> {
    stored(&state, false, move |s| s.get(R::COLLECTION, &key))
        .await
        .map(Json)
}

pub(crate) async fn remove<R: Resource>(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> ApiResult<Json<Value>> {
    stored(&state, true, move |s| s.remove(R::COLLECTION, &key)).await?;
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

/// Changes the document `key` ([`AccessStore::modify`]) and answers it.
pub(crate) async fn modify(
    state: &AppState,
    named: AccessCollection,
    key: String,
    given: Common,
    summary: String,
    edit: impl FnOnce(&mut Value) + Send + 'static,
) -> ApiResult<Json<Value>> {
    stored(state, true, move |s| {
        s.modify(named, &key, given, &summary, edit)
    })
    .await
    .map(Json)
}

/// Runs `work` on the stored roles and principals off the async runtime, then rebuilds
/// the decisions of the gate when it changed something (`changes`).
pub(crate) async fn stored<T: Send + 'static>(
    state: &AppState,
    changes: bool,
    work: impl FnOnce(&AccessStore) -> Result<T, AccessError> + Send + 'static,
) -> ApiResult<T> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        let access = state.access();
        let result = work(access.stored())?;
        if changes {
            access.reload()?;
        }
        Ok(result)
    })
    .await
    .map_err(|e| ApiError::unavailable("The change was not made", e.to_string()))?
}

/// Applies `given` to the list at `key` of `record` by `mode`; items are the same when
/// their `identity` fields are.
pub(crate) fn change_list(
    record: &mut Value,
    key: &str,
    given: Option<Vec<Value>>,
    mode: ChangeMode,
    identity: &[&str],
) {
    let Some(given) = given else {
        return;
    };
    let same = |a: &Value, b: &Value| identity.iter().all(|f| a.get(*f) == b.get(*f));
    let mut list: Vec<Value> = record[key].as_array().cloned().unwrap_or_default();
    match mode {
        ChangeMode::Set => list = given,
        ChangeMode::Add => {
            for item in given {
                match list.iter_mut().find(|x| same(x, &item)) {
                    Some(existing) => *existing = item,
                    None => list.push(item),
                }
            }
        }
        ChangeMode::Remove => list.retain(|x| !given.iter().any(|g| same(x, g))),
    }
    record[key] = Value::Array(list);
}
