//! The roles and principals in force, kept in memory for the gate.
//!
//! Roles (collection `roles`) and principals (collection `principals`) are stored
//! documents; the gate decides every request from an in-memory [`Authority`] built from
//! them, which is rebuilt from the store after each change made through the interface
//! (roles and principals are few, and change rarely), and at most every
//! [`REFRESH_AFTER`] while requests come, so that servers sharing one PostgreSQL store see
//! each other's changes. The built-in roles are written to the store on first start, so
//! they can be read, changed and reset like the others.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use drover_auth::roles::{Authority, Grant, Member, PrincipalMap, Role, Scope, built_in_roles};
use drover_auth::throttle::LoginThrottle;
use drover_query::ListQuery;
use drover_store::{CollectionSpec, Document, DocumentStore, StoreError, Write};
use serde_json::{Value, json};

use crate::AppState;
use crate::identity::{PasswordChecks, ProxiedIdentities};

/// How old the decisions may grow before a request has them reloaded (in the background).
pub const REFRESH_AFTER: Duration = Duration::from_secs(10);

pub const ROLES: &str = "roles";
pub const PRINCIPALS: &str = "principals";

/// The decisions of the moment, and how to remake them.
pub struct AccessControl {
    authority: RwLock<Arc<Authority>>,
    loaded: Mutex<Instant>,
    refreshing: AtomicBool,
    default_roles: Vec<String>,
    throttle: LoginThrottle,
    password_checks: PasswordChecks,
    proxied: ProxiedIdentities,
}

impl AccessControl {
    /// Loads roles and principals (writing the built-in roles the store lacks). Blocking.
    pub fn load(
        store: &dyn DocumentStore,
        default_roles: Vec<String>,
        throttle: LoginThrottle,
    ) -> Result<Self, StoreError> {
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
        let control = Self {
            authority: RwLock::new(Arc::new(Authority::default())),
            loaded: Mutex::new(Instant::now()),
            refreshing: AtomicBool::new(false),
            default_roles,
            throttle,
            password_checks: PasswordChecks::new(),
            proxied: ProxiedIdentities::default(),
        };
        control.reload(store)?;
        Ok(control)
    }

    /// Rebuilds the decisions from the store. Blocking.
    pub fn reload(&self, store: &dyn DocumentStore) -> Result<(), StoreError> {
        let roles = store.list(ROLES, &ListQuery::default())?.items;
        let principals = store.list(PRINCIPALS, &ListQuery::default())?.items;
        let authority = Authority::new(
            roles.iter().filter_map(role_of),
            principals.iter().map(principal_of).collect(),
            self.default_roles.clone(),
        );
        *self.authority.write().unwrap() = Arc::new(authority);
        *self.loaded.lock().unwrap() = Instant::now();
        Ok(())
    }

    /// Whether the decisions are older than [`REFRESH_AFTER`] and no reload is under way;
    /// `true` claims the reload (call [`AccessControl::refreshed`] when it is done).
    pub fn claim_refresh(&self) -> bool {
        self.loaded.lock().unwrap().elapsed() > REFRESH_AFTER
            && !self.refreshing.swap(true, Ordering::AcqRel)
    }

    pub fn refreshed(&self) {
        self.refreshing.store(false, Ordering::Release);
    }

    pub fn authority(&self) -> Arc<Authority> {
        self.authority.read().unwrap().clone()
    }

    /// [`AccessControl::authority`], starting a background reload when it is old (the
    /// request goes on with what is loaded; a failed reload keeps it).
    pub fn current(state: &AppState) -> Arc<Authority> {
        let control = state.access();
        if control.claim_refresh() {
            let state = state.clone();
            tokio::task::spawn_blocking(move || {
                let store = state.store().clone();
                let _ = state.access().reload(store.as_ref());
                state.access().refreshed();
            });
        }
        control.authority()
    }

    pub(crate) fn proxied(&self) -> &ProxiedIdentities {
        &self.proxied
    }

    pub fn throttle(&self) -> &LoginThrottle {
        &self.throttle
    }

    pub(crate) fn password_checks(&self) -> &PasswordChecks {
        &self.password_checks
    }
}

/// The stored body of a role.
pub fn role_body(role: &Role, built_in: bool) -> Value {
    json!({
        "name": role.name,
        "description": role.description,
        "builtIn": built_in,
        "permissions": role.grants.iter().map(grant_json).collect::<Vec<_>>(),
    })
}

pub fn grant_json(grant: &Grant) -> Value {
    json!({
        "id": grant.to_string(),
        "resource": grant.resource,
        "action": grant.action,
        "scope": grant.scope.as_str(),
    })
}

/// A stored role; `None` for a body that is not one (never written by this service).
pub fn role_of(document: &Document) -> Option<Role> {
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
pub fn principal_of(document: &Document) -> PrincipalMap {
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
    use drover_auth::Identity;
    use drover_auth::roles::USER;

    use super::*;

    #[test]
    fn decisions_follow_the_store_after_a_reload_and_reloads_are_claimed_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = drover_store::open(dir.path().join("s.db").to_str().unwrap()).unwrap();
        let control = AccessControl::load(
            store.as_ref(),
            vec![USER.into()],
            LoginThrottle::new(0, Duration::ZERO),
        )
        .unwrap();
        let nodes = drover_auth::Permission::update("nodes");
        let olga = Identity::local("olga", false);
        assert_eq!(control.authority().scope_of(&olga, nodes), None);
        // Another server writes a principal to the shared store.
        store
            .insert(
                PRINCIPALS,
                "p1",
                Some("ops"),
                json!({"name": "ops", "attachedRoles": [{"id": "operator"}],
                       "users": [{"name": "olga", "type": "PAM"}]}),
            )
            .unwrap();
        assert!(!control.claim_refresh(), "fresh decisions are not reloaded");
        *control.loaded.lock().unwrap() = Instant::now() - REFRESH_AFTER * 2;
        assert!(control.claim_refresh());
        assert!(!control.claim_refresh(), "one reload at a time");
        control.reload(store.as_ref()).unwrap();
        control.refreshed();
        assert_eq!(control.authority().scope_of(&olga, nodes), Some(Scope::All));
        assert!(!control.claim_refresh());
    }
}
