//! The service of roles and principals: stored documents with a unique name and a
//! `version`. Their handlers call [`Named`]; only this module and [`crate::access`]
//! (which loads the decisions of the gate) touch their collections. Every change
//! rebuilds those decisions.

use std::sync::{Mutex, OnceLock};

use drover_auth::roles::built_in_roles;
use drover_domain::dates::Timestamp;
use drover_domain::ids::IdSequence;
use drover_query::ListQuery;
use drover_store::{Document, DocumentStore, StoreError, Write};
use serde_json::{Value, json};

use crate::AppState;
use crate::access::role_body;
use crate::error::{ApiError, ApiResult};
use crate::params::ChangeMode;

/// One collection of named documents.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Named {
    pub collection: &'static str,
    /// What one is called in messages: `role`, `principal`.
    pub what: &'static str,
}

pub(crate) const ROLES: Named = Named {
    collection: crate::access::ROLES,
    what: "role",
};

pub(crate) const PRINCIPALS: Named = Named {
    collection: crate::access::PRINCIPALS,
    what: "principal",
};

/// What a request body gives of the fields every named document has (`None`: not given).
pub(crate) struct Common {
    pub name: Option<String>,
    pub description: Option<String>,
    pub version: Option<i64>,
}

impl Named {
    /// Every document, in its wire shape.
    pub async fn list(self, state: &AppState) -> ApiResult<Vec<Value>> {
        with_store(state, false, move |store| {
            Ok(store
                .list(self.collection, &ListQuery::default())?
                .items
                .iter()
                .map(render)
                .collect())
        })
        .await
    }

    /// The document whose id, else name, is `key`, in its wire shape.
    pub async fn get(self, state: &AppState, key: String) -> ApiResult<Value> {
        with_store(state, false, move |store| {
            find(store, self.collection, &key, self.what)
        })
        .await
        .map(|document| render(&document))
    }

    /// Stores a new document (`body` names it) under a new id; a taken name is a 409.
    pub async fn create(
        self,
        state: &AppState,
        body: Value,
        summary: &'static str,
    ) -> ApiResult<Value> {
        with_store(state, true, move |store| {
            insert_named(store, self.collection, &next_id(), body, summary)
        })
        .await
        .map(|document| render(&document))
    }

    /// Changes the document `key`: the name and description given, then `edit` (its
    /// lists, by `mode`). A stale version or a taken name is a 409.
    pub async fn modify(
        self,
        state: &AppState,
        key: String,
        given: Common,
        summary: String,
        edit: impl FnOnce(&mut Value) + Send + 'static,
    ) -> ApiResult<Value> {
        with_store(state, true, move |store| {
            let current = find(store, self.collection, &key, self.what)?;
            check_version(given.version, &current, &summary, self.what)?;
            let mut record = current.body.clone();
            if let Some(name) = &given.name {
                record["name"] = json!(name);
            }
            if let Some(description) = &given.description {
                record["description"] = json!(description);
            }
            edit(&mut record);
            update_named(store, self.collection, &current, record, &summary)
        })
        .await
        .map(|document| render(&document))
    }

    /// Deletes the document `key`. A built-in role, or one a principal attaches, stays.
    pub async fn remove(self, state: &AppState, key: String) -> ApiResult<()> {
        with_store(state, true, move |store| {
            let current = find(store, self.collection, &key, self.what)?;
            if self.collection == ROLES.collection {
                role_may_go(store, &current, &format!("The role {key} was not deleted"))?;
            }
            store.write(&[Write::Delete {
                collection: self.collection.into(),
                id: current.id,
                expected_version: None,
            }])?;
            Ok(())
        })
        .await
    }
}

/// Creates a role; the names of the built-in roles are taken even when they were renamed.
pub(crate) async fn create_role(
    state: &AppState,
    role: drover_auth::roles::Role,
    summary: &'static str,
) -> ApiResult<Value> {
    if built_in_roles().iter().any(|r| r.name == role.name) {
        return Err(ApiError::conflict(
            summary,
            format!("the name '{}' is taken", role.name),
        ));
    }
    let id = role.id.clone();
    with_store(state, true, move |store| {
        insert_named(
            store,
            ROLES.collection,
            &id,
            role_body(&role, false),
            summary,
        )
    })
    .await
    .map(|document| render(&document))
}

/// Gives the built-in role `key` back its defaults.
pub(crate) async fn reset_role(state: &AppState, key: String) -> ApiResult<Value> {
    with_store(state, true, move |store| {
        let current = find(store, ROLES.collection, &key, ROLES.what)?;
        let Some(default) = built_in_roles().into_iter().find(|r| r.id == current.id) else {
            return Err(ApiError::bad_request(
                format!("The role {key} was not reset"),
                "only built-in roles have defaults",
            ));
        };
        update_named(
            store,
            ROLES.collection,
            &current,
            role_body(&default, true),
            "The role was not reset",
        )
    })
    .await
    .map(|document| render(&document))
}

/// Refuses to delete a built-in role, or one that principals attach.
fn role_may_go(store: &dyn DocumentStore, role: &Document, summary: &str) -> ApiResult<()> {
    if role.body["builtIn"] == json!(true) {
        return Err(ApiError::bad_request(
            summary,
            "built-in roles cannot be deleted; change or reset them instead",
        ));
    }
    let attaching: Vec<String> = store
        .list(PRINCIPALS.collection, &ListQuery::default())?
        .items
        .iter()
        .filter(|p| {
            p.body["attachedRoles"]
                .as_array()
                .is_some_and(|roles| roles.iter().any(|r| r["id"] == json!(role.id)))
        })
        .map(|p| p.body["name"].as_str().unwrap_or_default().to_string())
        .collect();
    if !attaching.is_empty() {
        return Err(ApiError::conflict(
            summary,
            format!("principals attach it: {}", attaching.join(", ")),
        ));
    }
    Ok(())
}

/// Runs `work` on the store off the async runtime, then rebuilds the decisions when it
/// changed something (`changes`).
async fn with_store<T: Send + 'static>(
    state: &AppState,
    changes: bool,
    work: impl FnOnce(&dyn DocumentStore) -> Result<T, ApiError> + Send + 'static,
) -> ApiResult<T> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        let store = state.store().clone();
        let result = work(store.as_ref())?;
        if changes {
            state.access().reload(store.as_ref())?;
        }
        Ok(result)
    })
    .await
    .map_err(|e| ApiError::unavailable("The change was not made", e.to_string()))?
}

/// The document of `collection` whose id, else name, is `key` (`what`: for the 404).
fn find(
    store: &dyn DocumentStore,
    collection: &str,
    key: &str,
    what: &str,
) -> Result<Document, ApiError> {
    match store.get(collection, key)? {
        Some(doc) => Ok(doc),
        None => store
            .get_by_name(collection, key)?
            .ok_or_else(|| ApiError::not_found(format!("No {what} '{key}'"))),
    }
}

/// A stored document in its wire shape: the body with `id` and `version`.
fn render(document: &Document) -> Value {
    let mut out = document.body.clone();
    out["id"] = json!(document.id);
    out["version"] = json!(document.version);
    out
}

/// The version check of a modify: `given` (if any) must be the stored one.
fn check_version(
    given: Option<i64>,
    current: &Document,
    summary: &str,
    what: &str,
) -> Result<(), ApiError> {
    match given {
        Some(version) if version != current.version => Err(ApiError::conflict(
            summary,
            format!(
                "version {version} is stale: the {what} is at version {}",
                current.version
            ),
        )),
        _ => Ok(()),
    }
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

/// A new id for a role or principal (time-ordered, unique in this process).
pub(crate) fn next_id() -> String {
    static IDS: OnceLock<Mutex<IdSequence>> = OnceLock::new();
    IDS.get_or_init(|| Mutex::new(IdSequence::starting_after(None, Timestamp::now())))
        .lock()
        .unwrap()
        .next_id()
}

/// Inserts a document named by `body["name"]` and reads it back; a taken name is a 409.
fn insert_named(
    store: &dyn DocumentStore,
    collection: &str,
    id: &str,
    body: Value,
    summary: &str,
) -> Result<Document, ApiError> {
    let name = body["name"].as_str().unwrap_or_default().to_string();
    store
        .write(&[Write::Insert {
            collection: collection.into(),
            id: id.to_string(),
            name: Some(name.clone()),
            body: body.into(),
        }])
        .map_err(|e| match e {
            StoreError::Conflict(_) => {
                ApiError::conflict(summary, format!("the name '{name}' is taken"))
            }
            other => other.into(),
        })?;
    find(store, collection, id, collection)
}

/// Writes `body` over `current` if it is still at the version read, and reads it back; a
/// stale version or a taken name is a 409.
fn update_named(
    store: &dyn DocumentStore,
    collection: &str,
    current: &Document,
    body: Value,
    summary: &str,
) -> Result<Document, ApiError> {
    store
        .write(&[Write::Update {
            collection: collection.into(),
            id: current.id.clone(),
            name: body["name"].as_str().map(String::from),
            body: body.into(),
            expected_version: Some(current.version),
        }])
        .map_err(|e| match e {
            StoreError::Conflict(reason) => ApiError::conflict(summary, reason),
            other => other.into(),
        })?;
    find(store, collection, &current.id, collection)
}
