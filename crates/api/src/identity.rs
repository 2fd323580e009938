//! Who is calling: the identity of a request's Basic login (local users, remembered
//! logins, the directory, with throttling and audit), and the identity a honoured
//! `proxy-user` stands for. The gate (`routes`) calls these and decides with the roles.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use drover_auth::roles::{Authority, Member};
use drover_auth::{DirectoryError, Identity, Origin, basic_credentials};
use drover_sched::sysuser::SystemUser;

use crate::AppState;
use crate::audit::{self, Audit};
use crate::error::ApiError;

/// How long a proxied user's identity is reused (a portal proxies many requests for the
/// same users; finding one may ask the directory), and how many are kept.
const PROXIED_TTL: Duration = Duration::from_secs(60);
const MAX_PROXIED: usize = 10_000;

/// Password checks (argon2 for local users, a bind for directory users) pending from one
/// source address at most; more are answered 429 unchecked.
const PENDING_CHECKS_PER_SOURCE: usize = 128;

/// Bounds the password checks that run at once: each argon2 verification takes about
/// 19 MiB and a core for milliseconds, so a flood of logins that are not remembered
/// must queue, not run all at once. At most one per core runs; the rest wait in turn,
/// and one source may have only so many waiting.
pub(crate) struct PasswordChecks {
    running: Arc<tokio::sync::Semaphore>,
    pending: Mutex<HashMap<String, usize>>,
}

/// A password check's turn: while held, it may run.
pub(crate) struct CheckTurn<'a> {
    _running: tokio::sync::OwnedSemaphorePermit,
    _pending: Pending<'a>,
}

/// One check counted as pending from a source, until dropped.
struct Pending<'a> {
    checks: &'a PasswordChecks,
    source: Option<String>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(source) = &self.source {
            let mut pending = self.checks.pending.lock().unwrap();
            if let Some(count) = pending.get_mut(source) {
                *count -= 1;
                if *count == 0 {
                    pending.remove(source);
                }
            }
        }
    }
}

impl PasswordChecks {
    pub(crate) fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        PasswordChecks {
            running: Arc::new(tokio::sync::Semaphore::new(cores.max(2))),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a turn to check a password from `source`; refused when that source has
    /// too many checks waiting already.
    async fn turn(&self, source: Option<&str>) -> Result<CheckTurn<'_>, ApiError> {
        if let Some(source) = source {
            let mut pending = self.pending.lock().unwrap();
            let count = pending.entry(source.to_string()).or_default();
            if *count >= PENDING_CHECKS_PER_SOURCE {
                return Err(ApiError::new(
                    crate::error::Kind::TooManyRequests,
                    [
                        "Too many logins are being checked for this address".to_string(),
                        "Reuse a connection's login, or try again in a moment".to_string(),
                    ],
                ));
            }
            *count += 1;
        }
        let pending = Pending {
            checks: self,
            source: source.map(String::from),
        };
        let running = self
            .running
            .clone()
            .acquire_owned()
            .await
            .map_err(ApiError::internal)?;
        Ok(CheckTurn {
            _running: running,
            _pending: pending,
        })
    }
}

/// Proxied identities found lately.
#[derive(Default)]
pub(crate) struct ProxiedIdentities(Mutex<HashMap<String, (Instant, Identity)>>);

impl ProxiedIdentities {
    fn get(&self, name: &str) -> Option<Identity> {
        let found = self.0.lock().unwrap();
        let (when, identity) = found.get(name)?;
        (when.elapsed() < PROXIED_TTL).then(|| identity.clone())
    }

    fn put(&self, identity: &Identity) {
        let mut found = self.0.lock().unwrap();
        if found.len() >= MAX_PROXIED {
            found.retain(|_, (when, _)| when.elapsed() < PROXIED_TTL);
            if found.len() >= MAX_PROXIED {
                found.clear();
            }
        }
        found.insert(identity.name.clone(), (Instant::now(), identity.clone()));
    }
}

/// `proxy-user` is honoured with `ENABLEPROXY` for the configured proxy users and for
/// holders of a role that names `proxy-user:use`.
pub(crate) fn may_proxy(state: &AppState, authority: &Authority, identity: &Identity) -> bool {
    let proxy = &state.settings().proxy;
    proxy.may_proxy(&identity.name) || (proxy.enabled && authority.may_proxy(identity))
}

/// A local user's identity with the groups of the system account of the same name (what
/// `PAMGROUP` principals name). Blocking (the system's user database).
fn with_system_groups(mut identity: Identity) -> Identity {
    if let Some(account) = SystemUser::lookup(&identity.name) {
        identity.groups = account
            .group_names()
            .iter()
            .map(|g| Member::new("PAMGROUP", g))
            .collect();
    }
    identity
}

/// Who a proxied name stands for (found lately, or found now): a local user, else a directory user (with the groups
/// the directory gives) when there is a directory, else a system account's user by name
/// (with its system groups).
pub(crate) async fn proxied_identity(state: &AppState, name: &str) -> Result<Identity, ApiError> {
    let cache = state.access().proxied();
    if let Some(identity) = cache.get(name) {
        return Ok(identity);
    }
    let identity = find_proxied(state, name).await?;
    cache.put(&identity);
    Ok(identity)
}

/// A local user, else a directory user, else a system account's user, as the doc of
/// [`proxied_identity`] says.
async fn find_proxied(state: &AppState, name: &str) -> Result<Identity, ApiError> {
    let local = match state.auth().user(name) {
        Some(user) => Identity::local(&user.name, user.admin),
        None => match &state.settings().directory {
            Some(directory) => {
                return match directory.lookup(name).await {
                    Ok(identity) => Ok(identity),
                    // Not in the directory: a name only, which default roles and
                    // principals naming it still describe.
                    Err(DirectoryError::Refused) => Ok(Identity {
                        origin: Origin::Directory,
                        ..Identity::local(name, false)
                    }),
                    Err(DirectoryError::Unavailable(why)) => Err(directory_down(why)),
                };
            }
            None => Identity::local(name, false),
        },
    };
    tokio::task::spawn_blocking(move || with_system_groups(local))
        .await
        .map_err(ApiError::internal)
}

fn directory_down(why: String) -> ApiError {
    ApiError::unavailable(
        "The directory cannot be reached to check this login",
        format!("{why}; try again later"),
    )
}

/// The identity of the request's Basic credentials: remembered logins on the async
/// runtime, then a local user's argon2 verification on a blocking thread, or the
/// directory. Refused unchecked while the source or the name is throttled.
pub(crate) async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    source: Option<IpAddr>,
) -> Result<Identity, ApiError> {
    let (user, password) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(basic_credentials)
        .ok_or_else(ApiError::unauthorized)?;
    let auth = state.auth();
    if let Some(identity) = auth.remembered(&user, &password) {
        return Ok(identity);
    }
    // Formatted only past the remembered logins: most requests never need it.
    let source = source.map(|ip| ip.to_string());
    let source = source.as_deref();
    let access = state.access();
    // Counted before the check, so that attempts sent at once cannot outrun the count.
    let throttle = access.throttle();
    let starts_block = match throttle.attempt(source, &user) {
        Ok(starts_block) => starts_block,
        // Not audited one by one (a flood would fill the store): the block's start was.
        Err(wait) => return Err(ApiError::throttled(wait.as_secs().max(1))),
    };
    let turn = access.password_checks().turn(source).await?;
    // Another request's check may have verified this very login meanwhile.
    if let Some(identity) = auth.remembered(&user, &password) {
        throttle.succeeded(source, &user);
        return Ok(identity);
    }
    let verified = match (&state.settings().directory, auth.is_local(&user)) {
        (Some(directory), false) => match directory.login(&user, &password).await {
            Ok(identity) => {
                auth.remember(&user, &password, identity.clone());
                Some(identity)
            }
            Err(DirectoryError::Refused) => None,
            Err(DirectoryError::Unavailable(why)) => return Err(directory_down(why)),
        },
        _ => {
            let auth = auth.clone();
            let name = user.clone();
            tokio::task::spawn_blocking(move || {
                let identity = with_system_groups(auth.verify(&name, &password)?);
                // Remembered again, with its groups.
                auth.remember(&name, &password, identity.clone());
                Some(identity)
            })
            .await
            .map_err(ApiError::internal)?
        }
    };
    drop(turn);
    match verified {
        Some(identity) => {
            throttle.succeeded(source, &user);
            audit::record(state, Audit::Login, &user, source, "login checked".into());
            Ok(identity)
        }
        None => {
            audit::record(
                state,
                Audit::LoginFailed,
                &user,
                source,
                "login refused".into(),
            );
            if starts_block {
                audit::record(
                    state,
                    Audit::LoginThrottled,
                    &user,
                    source,
                    "too many failed logins: further logins refused unchecked for a while".into(),
                );
            }
            Err(ApiError::unauthorized())
        }
    }
}
