//! The roles and principals in force, kept in memory for the gate.
//!
//! The gate decides every request from an in-memory [`Authority`], which
//! [`AccessStore`] builds from the stored roles and principals. It is rebuilt after each
//! change made through the interface (roles and principals are few, and change rarely),
//! and at most every [`REFRESH_AFTER`] while requests come, so that servers sharing one
//! PostgreSQL store see each other's changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use drover_auth::access_store::{AccessError, AccessStore};
use drover_auth::known_sources::KnownSources;
use drover_auth::roles::Authority;
use drover_auth::throttle::LoginThrottle;

use crate::AppState;
use crate::identity::{PasswordChecks, ProxiedIdentities};

/// How old the decisions may grow before a request has them reloaded (in the background).
pub const REFRESH_AFTER: Duration = Duration::from_secs(10);

/// The decisions of the moment, and how to remake them.
pub struct AccessControl {
    stored: AccessStore,
    authority: RwLock<Arc<Authority>>,
    loaded: Mutex<Instant>,
    refreshing: AtomicBool,
    default_roles: Vec<String>,
    throttle: LoginThrottle,
    /// Refused bearer tokens, counted per source for the audit only (never blocking).
    token_refusals: LoginThrottle,
    /// Where the sources names logged in from are kept across restarts.
    known_sources: Arc<KnownSources>,
    password_checks: PasswordChecks,
    proxied: ProxiedIdentities,
}

impl AccessControl {
    /// Loads the decisions from `stored`. Blocking.
    /// The throttle knows the sources `known_sources` kept. Blocking.
    pub fn load(
        stored: AccessStore,
        default_roles: Vec<String>,
        throttle: LoginThrottle,
        known_sources: Arc<KnownSources>,
    ) -> Result<Self, AccessError> {
        throttle.preload_known(known_sources.load(drover_auth::throttle::MAX_KNOWN)?);
        let control = Self {
            stored,
            authority: RwLock::new(Arc::new(Authority::default())),
            loaded: Mutex::new(Instant::now()),
            refreshing: AtomicBool::new(false),
            default_roles,
            token_refusals: LoginThrottle::counting_only(throttle.window()),
            throttle,
            known_sources,
            password_checks: PasswordChecks::new(),
            proxied: ProxiedIdentities::default(),
        };
        control.reload()?;
        Ok(control)
    }

    /// Rebuilds the decisions from the store. Blocking.
    pub fn reload(&self) -> Result<(), AccessError> {
        let authority = self.stored.authority(self.default_roles.clone())?;
        *self.authority.write().unwrap() = Arc::new(authority);
        *self.loaded.lock().unwrap() = Instant::now();
        Ok(())
    }

    /// The stored roles and principals (blocking calls).
    pub fn stored(&self) -> &AccessStore {
        &self.stored
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
                let _ = state.access().reload();
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

    pub fn known_sources(&self) -> &Arc<KnownSources> {
        &self.known_sources
    }

    pub(crate) fn token_refusals(&self) -> &LoginThrottle {
        &self.token_refusals
    }

    pub(crate) fn password_checks(&self) -> &PasswordChecks {
        &self.password_checks
    }
}

#[cfg(test)]
mod tests {
    use drover_auth::Identity;
    use drover_auth::access_store::PRINCIPALS;
    use drover_auth::roles::{Scope, USER};
    use drover_store::DocumentStore;
    use serde_json::json;

    use super::*;

    #[test]
    fn decisions_follow_the_store_after_a_reload_and_reloads_are_claimed_once() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn DocumentStore> =
            drover_store::open(dir.path().join("s.db").to_str().unwrap())
                .unwrap()
                .into();
        let control = AccessControl::load(
            AccessStore::open(store.clone()).unwrap(),
            vec![USER.into()],
            LoginThrottle::new(0, Duration::ZERO),
            Arc::new(KnownSources::open(store.clone()).unwrap()),
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
        control.reload().unwrap();
        control.refreshed();
        assert_eq!(control.authority().scope_of(&olga, nodes), Some(Scope::All));
        assert!(!control.claim_refresh());
    }
}
