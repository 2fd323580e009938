//! The handlers roles and principals share: list, one by id or name, delete.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::Value;

use crate::AppState;
use crate::documents::Named;
use crate::error::ApiResult;
use crate::params::ListParams;
use crate::reply;

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
