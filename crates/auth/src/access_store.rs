//! The stored roles and principals: documents of the collections [`ROLES`] and
//! [`PRINCIPALS`], each with a unique name and a `version`. [`AccessStore`] is the only
//! code that reads or writes them; it writes the built-in roles the store lacks, and
//! builds an [`Authority`] from what is stored. Every call blocks on the store.

use std::sync::{Arc, Mutex};

use drover_domain::dates::Timestamp;
use drover_domain::ids::IdSequence;
use drover_query::ListQuery;
use drover_store::{CollectionSpec, Document, DocumentStore, StoreError, Write};
use serde_json::{Value, json};

use crate::roles::{
    Authority, Grant, Member, OPERATOR, PrincipalMap, Role, Scope, USER, built_in_roles,
};

pub const ROLES: &str = "roles";
pub const PRINCIPALS: &str = "principals";

/// Which of the two collections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessCollection {
    Role,
    Principal,
}

impl AccessCollection {
    pub fn collection(self) -> &'static str {
        match self {
            AccessCollection::Role => ROLES,
            AccessCollection::Principal => PRINCIPALS,
        }
    }

    /// What one is called in messages: `role`, `principal`.
    pub fn what(self) -> &'static str {
        match self {
            AccessCollection::Role => "role",
            AccessCollection::Principal => "principal",
        }
    }
}

/// Why a change or a lookup was refused; `summary` and `reason` are the messages a
/// client is shown.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("{summary}: {reason}")]
    Invalid { summary: String, reason: String },
    #[error("{0}")]
    NotFound(String),
    /// A taken name, a stale version, a role principals attach.
    #[error("{summary}: {reason}")]
    Conflict { summary: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub type Result<T, E = AccessError> = std::result::Result<T, E>;

/// What a change gives of the fields every named document has (`None`: not given).
pub struct Common {
    pub name: Option<String>,
    pub description: Option<String>,
    pub version: Option<i64>,
}

/// The service of the stored roles and principals. Blocking.
pub struct AccessStore {
    store: Arc<dyn DocumentStore>,
    ids: Mutex<IdSequence>,
}

impl AccessStore {
    /// Ensures both collections and writes the built-in roles the store lacks.
    pub fn open(store: Arc<dyn DocumentStore>) -> Result<Self> {
        store.ensure_collection(&CollectionSpec::new(ROLES))?;
        store.ensure_collection(&CollectionSpec::new(PRINCIPALS))?;
        let missing: Vec<Write> = built_in_roles()
            .iter()
            .filter(|role| matches!(store.get(ROLES, &role.id), Ok(None)))
            .map(|role| Write::Insert {
                collection: ROLES.into(),
                id: role.id.clone(),
                name: Some(role.name.clone()),
                body: role_body(role, true).into(),
            })
            .collect();
        if !missing.is_empty() {
            store.write(&missing)?;
        }
        upgrade_built_in_roles(store.as_ref())?;
        Ok(Self {
            store,
            ids: Mutex::new(IdSequence::starting_after(None, Timestamp::now())),
        })
    }

    /// The decisions the stored roles and principals make (`default_roles`: those of
    /// every authenticated user).
    pub fn authority(&self, default_roles: Vec<String>) -> Result<Authority> {
        let roles = self.store.list(ROLES, &ListQuery::default())?.items;
        let principals = self.store.list(PRINCIPALS, &ListQuery::default())?.items;
        Ok(Authority::new(
            roles.iter().filter_map(role_of),
            principals.iter().map(principal_of).collect(),
            default_roles,
        ))
    }

    /// Every document, in its wire shape (the body with `id` and `version`).
    pub fn list(&self, named: AccessCollection) -> Result<Vec<Value>> {
        Ok(self
            .store
            .list(named.collection(), &ListQuery::default())?
            .items
            .iter()
            .map(render)
            .collect())
    }

    /// The document whose id, else name, is `key`, in its wire shape.
    pub fn get(&self, named: AccessCollection, key: &str) -> Result<Value> {
        self.find(named.collection(), key, named.what())
            .map(|document| render(&document))
    }

    /// Stores a new principal (`body` names it) under a new id; a taken name is a
    /// conflict.
    pub fn create_principal(&self, body: Value, summary: &str) -> Result<Value> {
        let id = self.next_id();
        self.insert_named(PRINCIPALS, &id, body, summary)
            .map(|document| render(&document))
    }

    /// Stores a new role under a new id; the names of the built-in roles are taken even
    /// when they were renamed.
    pub fn create_role(
        &self,
        name: String,
        description: String,
        grants: Vec<Grant>,
        summary: &str,
    ) -> Result<Value> {
        if built_in_roles().iter().any(|r| r.name == name) {
            return Err(AccessError::Conflict {
                summary: summary.into(),
                reason: format!("the name '{name}' is taken"),
            });
        }
        let role = Role {
            id: self.next_id(),
            name,
            description,
            grants,
        };
        self.insert_named(ROLES, &role.id, role_body(&role, false), summary)
            .map(|document| render(&document))
    }

    /// Changes the document `key`: the name and description given, then `edit` (its
    /// lists). A stale version or a taken name is a conflict.
    pub fn modify(
        &self,
        named: AccessCollection,
        key: &str,
        given: Common,
        summary: &str,
        edit: impl FnOnce(&mut Value),
    ) -> Result<Value> {
        let current = self.find(named.collection(), key, named.what())?;
        check_version(given.version, &current, summary, named.what())?;
        let mut record = current.body.clone();
        if let Some(name) = &given.name {
            record["name"] = json!(name);
        }
        if let Some(description) = &given.description {
            record["description"] = json!(description);
        }
        edit(&mut record);
        self.update_named(named.collection(), &current, record, summary)
            .map(|document| render(&document))
    }

    /// Deletes the document `key`. A built-in role, or one a principal attaches, stays.
    pub fn remove(&self, named: AccessCollection, key: &str) -> Result<()> {
        let current = self.find(named.collection(), key, named.what())?;
        if named == AccessCollection::Role {
            self.role_may_go(&current, &format!("The role {key} was not deleted"))?;
        }
        self.store.write(&[Write::Delete {
            collection: named.collection().into(),
            id: current.id,
            expected_version: None,
        }])?;
        Ok(())
    }

    /// Gives the built-in role `key` back its defaults.
    pub fn reset_role(&self, key: &str) -> Result<Value> {
        let current = self.find(ROLES, key, AccessCollection::Role.what())?;
        let Some(default) = built_in_roles().into_iter().find(|r| r.id == current.id) else {
            return Err(AccessError::Invalid {
                summary: format!("The role {key} was not reset"),
                reason: "only built-in roles have defaults".into(),
            });
        };
        let body = role_body(&default, true);
        self.update_named(ROLES, &current, body, "The role was not reset")
            .map(|document| render(&document))
    }

    /// A new id (time-ordered, unique in this service).
    fn next_id(&self) -> String {
        self.ids.lock().unwrap().next_id()
    }

    /// Refuses to delete a built-in role, or one that principals attach.
    fn role_may_go(&self, role: &Document, summary: &str) -> Result<()> {
        if role.body["builtIn"] == json!(true) {
            return Err(AccessError::Invalid {
                summary: summary.into(),
                reason: "built-in roles cannot be deleted; change or reset them instead".into(),
            });
        }
        let attaching: Vec<String> = self
            .store
            .list(PRINCIPALS, &ListQuery::default())?
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
            return Err(AccessError::Conflict {
                summary: summary.into(),
                reason: format!("principals attach it: {}", attaching.join(", ")),
            });
        }
        Ok(())
    }

    /// The document of `collection` whose id, else name, is `key` (`what`: for the
    /// not-found message).
    fn find(&self, collection: &str, key: &str, what: &str) -> Result<Document> {
        match self.store.get(collection, key)? {
            Some(doc) => Ok(doc),
            None => self
                .store
                .get_by_name(collection, key)?
                .ok_or_else(|| AccessError::NotFound(format!("No {what} '{key}'"))),
        }
    }

    /// Inserts a document named by `body["name"]` and reads it back; a taken name is a
    /// conflict.
    fn insert_named(
        &self,
        collection: &str,
        id: &str,
        body: Value,
        summary: &str,
    ) -> Result<Document> {
        let name = body["name"].as_str().unwrap_or_default().to_string();
        self.store
            .write(&[Write::Insert {
                collection: collection.into(),
                id: id.to_string(),
                name: Some(name.clone()),
                body: body.into(),
            }])
            .map_err(|e| match e {
                StoreError::Conflict(_) => AccessError::Conflict {
                    summary: summary.into(),
                    reason: format!("the name '{name}' is taken"),
                },
                other => other.into(),
            })?;
        self.find(collection, id, collection)
    }

    /// Writes `body` over `current` if it is still at the version read, and reads it
    /// back; a stale version or a taken name is a conflict.
    fn update_named(
        &self,
        collection: &str,
        current: &Document,
        body: Value,
        summary: &str,
    ) -> Result<Document> {
        self.store
            .write(&[Write::Update {
                collection: collection.into(),
                id: current.id.clone(),
                name: body["name"].as_str().map(String::from),
                body: body.into(),
                expected_version: Some(current.version),
            }])
            .map_err(|e| match e {
                StoreError::Conflict(reason) => AccessError::Conflict {
                    summary: summary.into(),
                    reason,
                },
                other => other.into(),
            })?;
        self.find(collection, &current.id, collection)
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
fn check_version(given: Option<i64>, current: &Document, summary: &str, what: &str) -> Result<()> {
    match given {
        Some(version) if version != current.version => Err(AccessError::Conflict {
            summary: summary.into(),
            reason: format!(
                "version {version} is stale: the {what} is at version {}",
                current.version
            ),
        }),
        _ => Ok(()),
    }
}

/// The stored body of a role.
fn role_body(role: &Role, built_in: bool) -> Value {
    json!({
        "name": role.name,
        "description": role.description,
        "builtIn": built_in,
        "permissions": role.grants.iter().map(grant_json).collect::<Vec<_>>(),
    })
}

/// Grants given to a built-in role after it first shipped, by role id. An installation
/// made before keeps its stored role; [`upgrade_built_in_roles`] adds them.
/// In the order they were added.
fn grants_added_later() -> Vec<(&'static str, Grant)> {
    let mut added = vec![(USER, Grant::new("images", "read", Scope::All))];
    // VMs and pending actions (#27).
    added.push((USER, Grant::new("vms", "*", Scope::Own)));
    added.push((USER, Grant::new("pending-actions", "read", Scope::Own)));
    for action in ["create", "update", "delete"] {
        added.push((OPERATOR, Grant::new("vms", action, Scope::All)));
    }
    // Service templates (#28).
    added.push((USER, Grant::new("service-templates", "read", Scope::All)));
    // Services (#28).
    added.push((USER, Grant::new("services", "*", Scope::Own)));
    for action in ["create", "update", "delete"] {
        added.push((OPERATOR, Grant::new("services", action, Scope::All)));
    }
    added
}

/// Brings stored built-in roles that nobody changed up to their current definition: a
/// role whose grants are exactly its definition without the grants added after some
/// point gets the definition. One an administrator changed is left alone (`reset` brings it up to date).
fn upgrade_built_in_roles(store: &dyn DocumentStore) -> Result<()> {
    let added = grants_added_later();
    let mut writes = Vec::new();
    for role in built_in_roles() {
        let later: Vec<String> = added
            .iter()
            .filter(|(id, _)| *id == role.id)
            .map(|(_, grant)| grant.to_string())
            .collect();
        if later.is_empty() {
            continue;
        }
        let Some(document) = store.get(ROLES, &role.id)? else {
            continue;
        };
        let Some(stored) = role_of(&document) else {
            continue;
        };
        let names = |grants: &[Grant]| {
            let mut names: Vec<String> = grants.iter().map(Grant::to_string).collect();
            names.sort();
            names
        };
        let stored_names = names(&stored.grants);
        let unchanged = (0..later.len()).any(|since| {
            let mut before = names(&role.grants);
            before.retain(|grant| !later[since..].contains(grant));
            stored_names == before
        });
        if unchanged {
            writes.push(Write::Update {
                collection: ROLES.into(),
                id: role.id.clone(),
                name: Some(stored.name.clone()),
                body: role_body(&role, true).into(),
                expected_version: Some(document.version),
            });
        }
    }
    if !writes.is_empty() {
        store.write(&writes)?;
    }
    Ok(())
}

/// A grant as a role's `permissions` hold it.
pub fn grant_json(grant: &Grant) -> Value {
    json!({
        "id": grant.to_string(),
        "resource": grant.resource,
        "action": grant.action,
        "scope": grant.scope.as_str(),
    })
}

/// A stored role; `None` for a body that is not one (never written by this service).
fn role_of(document: &Document) -> Option<Role> {
    let body = &document.body;
    let grants = body["permissions"]
        .as_array()?
        .iter()
        .filter_map(|g| {
            let scope = Scope::parse(g["scope"].as_str()?)?;
            Some(Grant::new(
                g["resource"].as_str()?,
                g["action"].as_str()?,
                scope,
            ))
        })
        .collect();
    Some(Role {
        id: document.id.clone(),
        name: body["name"].as_str()?.to_string(),
        description: body["description"].as_str().unwrap_or_default().to_string(),
        grants,
    })
}

/// What a stored principal means for authorization.
fn principal_of(document: &Document) -> PrincipalMap {
    let body = &document.body;
    let members = |key: &str| {
        body[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| Some(Member::new(m["type"].as_str()?, m["name"].as_str()?)))
            .collect::<Vec<_>>()
    };
    let mut all = members("users");
    all.extend(members("groups"));
    PrincipalMap {
        name: body["name"].as_str().unwrap_or_default().to_string(),
        members: all,
        roles: body["attachedRoles"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["id"].as_str().map(String::from))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use drover_store::SqliteStore;

    use super::*;
    use crate::Identity;
    use crate::roles::{ADMINISTRATOR, OPERATOR};

    fn open(dir: &tempfile::TempDir) -> AccessStore {
        let store = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        AccessStore::open(Arc::new(store)).unwrap()
    }

    fn common(version: Option<i64>) -> Common {
        Common {
            name: None,
            description: Some("changed".into()),
            version,
        }
    }

    /// Writes the `user` role as an installation made before `grants` were added had it.
    fn store_user_role_without(dir: &tempfile::TempDir, dropped: &[&str]) {
        let store = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        store
            .ensure_collection(&CollectionSpec::new(ROLES))
            .unwrap();
        let mut user = built_in_roles().into_iter().find(|r| r.id == USER).unwrap();
        user.grants
            .retain(|g| !dropped.contains(&g.to_string().as_str()));
        store
            .insert(ROLES, USER, Some(USER), role_body(&user, true))
            .unwrap();
    }

    fn user_grants(stored: &AccessStore) -> Vec<String> {
        let role = stored.get(AccessCollection::Role, USER).unwrap();
        role["permissions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["id"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn an_unchanged_built_in_role_gets_the_grants_added_since() {
        let later: Vec<String> = grants_added_later()
            .into_iter()
            .filter(|(role, _)| *role == USER)
            .map(|(_, grant)| grant.to_string())
            .collect();
        // Stored before any was added, and after each release that added some (the
        // last: `service-templates:read`).
        for since in 0..later.len() {
            let dir = tempfile::tempdir().unwrap();
            let dropped: Vec<&str> = later[since..].iter().map(String::as_str).collect();
            store_user_role_without(&dir, &dropped);
            let stored = open(&dir);
            let grants = user_grants(&stored);
            for grant in &later {
                assert!(grants.contains(grant), "{grant} after {since}");
            }
        }
    }

    #[test]
    fn a_built_in_role_an_administrator_changed_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        store_user_role_without(&dir, &["images:read", "nodes:read"]);
        let stored = open(&dir);
        let grants = user_grants(&stored);
        assert!(!grants.contains(&"images:read".to_string()), "{grants:?}");
        assert!(!grants.contains(&"nodes:read".to_string()), "{grants:?}");
    }

    #[test]
    fn built_in_roles_are_written_once_and_decide() {
        let dir = tempfile::tempdir().unwrap();
        let stored = open(&dir);
        let roles = stored.list(AccessCollection::Role).unwrap();
        assert_eq!(roles.len(), built_in_roles().len());
        let changed = stored.modify(AccessCollection::Role, OPERATOR, common(None), "s", |_| {});
        assert_eq!(changed.unwrap()["description"], "changed");
        drop(stored);
        // A second start keeps the changed role.
        let stored = open(&dir);
        assert_eq!(
            stored.get(AccessCollection::Role, OPERATOR).unwrap()["version"],
            2
        );
        let admin = Identity::local("root", true);
        let authority = stored.authority(vec![]).unwrap();
        assert!(
            authority
                .roles_of(&admin)
                .iter()
                .any(|r| r == ADMINISTRATOR)
        );
        let reset = stored.reset_role(OPERATOR).unwrap();
        assert_ne!(reset["description"], "changed");
    }

    #[test]
    fn names_versions_and_attached_roles_are_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let stored = open(&dir);
        let taken = stored.create_role("user".into(), String::new(), vec![], "s");
        assert!(matches!(taken, Err(AccessError::Conflict { .. })));
        let role = stored
            .create_role("ops".into(), String::new(), vec![], "s")
            .unwrap();
        let body = json!({"name": "p", "attachedRoles": [{"id": role["id"]}]});
        stored.create_principal(body.clone(), "s").unwrap();
        let again = stored.create_principal(body, "s");
        assert!(
            matches!(again, Err(AccessError::Conflict { reason, .. }) if reason == "the name 'p' is taken")
        );
        let stale = stored.modify(
            AccessCollection::Principal,
            "p",
            common(Some(7)),
            "s",
            |_| {},
        );
        assert!(matches!(stale, Err(AccessError::Conflict { .. })));
        let attached = stored.remove(AccessCollection::Role, "ops");
        assert!(matches!(attached, Err(AccessError::Conflict { reason, .. })
            if reason == "principals attach it: p"));
        stored.remove(AccessCollection::Principal, "p").unwrap();
        stored.remove(AccessCollection::Role, "ops").unwrap();
        assert!(matches!(
            stored.get(AccessCollection::Role, "ops"),
            Err(AccessError::NotFound(m)) if m == "No role 'ops'"
        ));
        let built_in = stored.remove(AccessCollection::Role, OPERATOR);
        assert!(matches!(built_in, Err(AccessError::Invalid { .. })));
        let own = stored.create_role("own".into(), String::new(), vec![], "s");
        let reset = stored.reset_role(own.unwrap()["id"].as_str().unwrap());
        assert!(matches!(reset, Err(AccessError::Invalid { .. })));
    }
}
