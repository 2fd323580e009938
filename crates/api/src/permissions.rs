//! `GET /rest/permissions[/<id>]`: the permissions the routes declare (resource +
//! action), as a list resource. Roles that bundle them arrive with issue #9.

use axum::Json;
use axum::extract::{Path, State};
use drover_auth::Permission;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::openapi::schema::{object, string};
use crate::params::ListParams;
use crate::reply::{by_id_or_name, list_in_memory};
use crate::routes::{Access, Collection, Routes};

const READ: Access = Access::Needs(Permission::read("permissions"));

pub(crate) fn register(routes: &mut Routes) {
    let permission = || {
        object(&[
            ("id", string()),
            ("name", string()),
            ("resource", string()),
            ("action", string()),
            ("description", string()),
        ])
    };
    routes.collection(
        Collection {
            path: "/rest/permissions",
            item_path: "/rest/permissions/{id}",
            access: READ,
            schema: crate::openapi::schema::required(permission(), &["id"]),
            list: (
                "Every permission a route of this service requires",
                "Permissions",
            ),
            item: (
                "One permission, by id (resource:action) or name",
                "The permission's id or name",
                "The permission",
                "No such permission",
            ),
        },
        list,
        one,
    );
}

/// The permissions in their wire shape, ordered by id.
fn documents(state: &AppState) -> Vec<Value> {
    let mut permissions = state.permissions().to_vec();
    permissions.sort_by_key(|p| p.to_string());
    permissions
        .iter()
        .map(|p| {
            json!({
                "id": p.to_string(),
                "name": p.to_string(),
                "resource": p.resource,
                "action": p.action.as_str(),
                "description": format!("{} {}", p.action.as_str(), p.resource),
            })
        })
        .collect()
}

async fn list(State(state): State<AppState>, params: ListParams) -> Json<Value> {
    list_in_memory(&documents(&state), &params)
}

async fn one(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    by_id_or_name(&documents(&state), &id)
        .cloned()
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("No permission '{id}'")))
}
