//! Who is calling: the identity of a request's Basic login (local users, remembered
//! logins, the directory, with throttling and audit), and the identity a honoured
//! `proxy-user` stands for. The gate (`routes`) calls these and decides with the roles.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use drover_auth::roles::{Authority, Member, Scope};
use drover_auth::throttle::source_group;
use drover_auth::{
    Authenticator, DirectoryConfig, DirectoryError, Identity, Origin, basic_credentials,
};
use drover_sched::sysuser::SystemUser;

use crate::AppState;
use crate::access::AccessControl;
use crate::audit::{self, Audit};
use crate::error::ApiError;

/// How long a proxied user's identity is reused (a portal proxies many requests for the
/// same users; finding one may ask the directory), and how many are kept.
const PROXIED_TTL: Duration = Duration::from_secs(60);
const MAX_PROXIED: usize = 10_000;

/// Password checks (argon2 for local users, a bind for directory users) waiting for one
/// source address, or for one user name, at most; more are answered 429 unchecked.
const PENDING_CHECKS: usize = 128;

/// Bounds the password checks that run at once. Checks from one source address take
/// turns, and so do checks of one user name: the throttle's "is it blocked?" and its
/// count of a failure then have no other check of that source or that name between
/// them, so guesses sent at once, from one address or from many, cannot outrun the count
/// (and a flood from one address uses one core). Argon2 verifications (about 19 MiB and
/// a core for milliseconds each) run at most one per core (at least two) whatever their
/// source; directory binds wait on the network, not on a core, and take no part in that.
pub(crate) struct PasswordChecks {
    cores: Arc<tokio::sync::Semaphore>,
    sources: Turns,
    names: Turns,
}

/// Turns by key (a source address or a user name): how many checks wait, and the turn
/// they take one at a time.
#[derive(Default)]
struct Turns(Mutex<HashMap<String, Waiting>>);

struct Waiting {
    pending: usize,
    turn: Arc<tokio::sync::Mutex<()>>,
}

/// A key's turn to check a password: while held, no other check of that key runs.
pub(crate) struct Turn<'a> {
    _turn: tokio::sync::OwnedMutexGuard<()>,
    _pending: Pending<'a>,
}

/// One check counted as waiting for a key, until dropped.
struct Pending<'a> {
    turns: &'a Turns,
    key: String,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut turns = self.turns.0.lock().unwrap();
        if let Some(waiting) = turns.get_mut(&self.key) {
            waiting.pending -= 1;
            if waiting.pending == 0 {
                turns.remove(&self.key);
            }
        }
    }
}

impl Turns {
    /// Waits for `key`'s turn; refused when too many checks of it wait already.
    async fn take(&self, key: &str, what: &str) -> Result<Turn<'_>, ApiError> {
        let turn = {
            let mut turns = self.0.lock().unwrap();
            let waiting = turns.entry(key.to_string()).or_insert_with(|| Waiting {
                pending: 0,
                turn: Arc::new(tokio::sync::Mutex::new(())),
            });
            if waiting.pending >= PENDING_CHECKS {
                return Err(ApiError::new(
                    crate::error::Kind::TooManyRequests,
                    [
                        format!("Too many logins are being checked for this {what}"),
                        "Reuse a connection's login, or try again in a moment".to_string(),
                    ],
                ));
            }
            waiting.pending += 1;
            waiting.turn.clone()
        };
        let pending = Pending {
            turns: self,
            key: key.to_string(),
        };
        Ok(Turn {
            _turn: turn.lock_owned().await,
            _pending: pending,
        })
    }
}

impl PasswordChecks {
    pub(crate) fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        PasswordChecks {
            cores: Arc::new(tokio::sync::Semaphore::new(cores.max(2))),
            sources: Turns::default(),
            names: Turns::default(),
        }
    }

    /// Waits for the turn of `source` (when known), then of `name` (always in that
    /// order, so two checks never wait for each other's).
    ///
    /// A name's checks from a source it has logged in from take that pair's turn, so
    /// that a flood of checks of the name from elsewhere never keeps its user waiting;
    /// from any other source they take the name's one turn, so that guesses sent at
    /// once from many sources cannot outrun the name's count.
    pub(crate) async fn turns(
        &self,
        source: Option<&str>,
        name: &str,
        known: bool,
    ) -> Result<(Option<Turn<'_>>, Turn<'_>), ApiError> {
        let name = drover_auth::throttle::fold(name);
        let (source, name) = match source.map(source_group) {
            Some(group) => {
                let turn = self.sources.take(&group, "address").await?;
                let key = if known {
                    format!("{name} from {group}")
                } else {
                    name
                };
                (Some(turn), key)
            }
            None => (None, name),
        };
        let name = self.names.take(&name, "user name").await?;
        Ok((source, name))
    }

    /// Waits for a core to verify an argon2 hash on; held until the verification ends
    /// (move it into the blocking task: a request given up does not stop that task).
    pub(crate) async fn core(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        self.cores
            .clone()
            .acquire_owned()
            .await
            .map_err(ApiError::internal)
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

/// `proxy-user` naming another user is honoured with `ENABLEPROXY` for the configured
/// proxy users and for holders of a role that names `proxy-user:use` with scope `ALL`.
/// Scope `OWN` acts only for oneself: a `proxy-user` it names is ignored, as the
/// interface says of one not allowed.
pub(crate) fn may_proxy_others(
    state: &AppState,
    authority: &Authority,
    identity: &Identity,
) -> bool {
    let proxy = &state.settings().proxy;
    proxy.may_proxy(&identity.name)
        || (proxy.enabled && authority.proxy_scope(identity) == Some(Scope::All))
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

/// Who a proxied name stands for (found lately, or found now): a local user, else a
/// directory user (with the groups the directory gives) when there is a directory, else
/// a system account's user by name (with its system groups).
pub(crate) async fn proxied_identity(state: &AppState, name: &str) -> Result<Identity, ApiError> {
    resolve(
        state.auth(),
        state.access(),
        state.settings().directory.as_ref(),
        name,
    )
    .await
}

/// [`proxied_identity`] over the parts it reads, which exist before the state does.
async fn resolve(
    auth: &Authenticator,
    access: &AccessControl,
    directory: Option<&DirectoryConfig>,
    name: &str,
) -> Result<Identity, ApiError> {
    let cache = access.proxied();
    if let Some(identity) = cache.get(name) {
        return Ok(identity);
    }
    let identity = find_proxied(auth, directory, name).await?;
    cache.put(&identity);
    Ok(identity)
}

/// Who users are now and what the roles in force let them do, as the plugins' hosts
/// ask (`drover_control::plugin_host::People`): made before the state, from its parts.
/// A name resolves as a proxied name does, so that rights a plugin's creator lost since
/// are lost by their plugins too.
pub struct People {
    pub auth: Arc<Authenticator>,
    pub access: Arc<AccessControl>,
    pub directory: Option<DirectoryConfig>,
}

impl drover_control::plugin_host::People for People {
    fn identity_now<'a>(
        &'a self,
        user: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Identity, String>> + Send + 'a>>
    {
        Box::pin(async move {
            resolve(&self.auth, &self.access, self.directory.as_ref(), user)
                .await
                .map_err(|e| e.messages.join("; "))
        })
    }

    fn authority(&self) -> Arc<Authority> {
        self.access.authority()
    }
}

/// A local user, else a directory user, else a system account's user, as the doc of
/// [`proxied_identity`] says.
async fn find_proxied(
    auth: &Authenticator,
    directory: Option<&DirectoryConfig>,
    name: &str,
) -> Result<Identity, ApiError> {
    let local = match auth.user(name) {
        Some(user) => Identity::local(&user.name, user.admin),
        None => match directory {
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

/// The identity of the request's credentials: a bearer token (`Authorization: Bearer`,
/// issued by `<base>/oauth/token`), or a Basic login (see [`login`]).
pub(crate) async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    source: Option<IpAddr>,
) -> Result<Identity, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(ApiError::unauthorized)?;
    if let Some(token) = bearer_token(value) {
        return bearer(state, token.to_string(), source).await;
    }
    let (user, password) = basic_credentials(value).ok_or_else(ApiError::unauthorized)?;
    login(state, user, password, source).await
}

/// The token of an `Authorization: Bearer <token>` value.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The identity of a user name and password: remembered logins on the async runtime,
/// then a local user's argon2 verification on a blocking thread, or the directory.
/// Refused unchecked while the source or the name is throttled. Basic logins and the
/// token endpoint's password grant both come here.
pub(crate) async fn login(
    state: &AppState,
    user: String,
    password: String,
    source: Option<IpAddr>,
) -> Result<Identity, ApiError> {
    let auth = state.auth();
    let source = source.map(|ip| ip.to_string());
    // Throttled before the remembered logins are looked at: else a blocked source would
    // still tell a right guess (answered from memory) from its refused wrong ones.
    if let Some(wait) = state.access().throttle().wait(source.as_deref(), &user) {
        return Err(ApiError::throttled(wait.as_secs().max(1)));
    }
    if let Some(identity) = auth.remembered(&user, &password) {
        logged_in_from(state, source.as_deref(), &user);
        return Ok(identity);
    }
    // In a task of its own: a client that hangs up while its password is checked must
    // not take the count of a failure with it.
    let state = state.clone();
    tokio::spawn(async move { check_password(&state, user, password, source).await })
        .await
        .map_err(ApiError::internal)?
}

/// A good login of `name` from `source`: the throttle forgives the pair's failures and
/// knows the source for the name from now on, and the store keeps that (so that a
/// restart does not forget it) the first time.
pub(crate) fn logged_in_from(state: &AppState, source: Option<&str>, name: &str) {
    let Some((name, source)) = state.access().throttle().succeeded(source, name) else {
        return;
    };
    let known = state.access().known_sources().clone();
    tokio::task::spawn_blocking(move || {
        if let Err(e) = known.record(&name, &source) {
            eprintln!("drover: warning: cannot record a login's source: {e}");
        }
    });
}

/// The identity a live bearer token stands for: its user as they are now (a local user
/// since removed, or a directory user the directory no longer knows, is refused). The
/// token is looked up before anything else: no one's failures block a valid token. A
/// token that is not (or no longer) valid is refused and audited, once a window per
/// source; it is never throttled, as tokens are 256 random bits (there is nothing to
/// guess) and a portal sending expired ones is ordinary traffic.
async fn bearer(
    state: &AppState,
    token: String,
    source: Option<IpAddr>,
) -> Result<Identity, ApiError> {
    let tokens = state.tokens().clone();
    let owner = tokio::task::spawn_blocking(move || tokens.find(&token))
        .await
        .map_err(ApiError::internal)??;
    let identity = match owner {
        Some(owner) if owner.origin == Origin::Local && state.auth().is_local(&owner.user) => {
            Some(proxied_identity(state, &owner.user).await?)
        }
        Some(owner) if owner.origin == Origin::Directory => {
            directory_user_now(state, &owner.user).await?
        }
        _ => None,
    };
    identity.ok_or_else(|| {
        let source = source.map(|ip| ip.to_string());
        let refusals = state.access().token_refusals();
        if let Some(earlier) = refusals.failed(source.as_deref(), "bearer token").report {
            let failure = drover_auth::throttle::Failure {
                blocked: None,
                report: Some(earlier),
            };
            audit::failed_login(
                state,
                "bearer token",
                source.as_deref(),
                &failure,
                "bearer token refused (unknown, expired or revoked)",
            );
        }
        ApiError::unauthorized()
    })
}

/// A directory user as the directory knows them now (found lately, or asked now);
/// `None` when it no longer does, or when there is no directory any more.
async fn directory_user_now(state: &AppState, name: &str) -> Result<Option<Identity>, ApiError> {
    let cache = state.access().proxied();
    if let Some(identity) = cache.get(name).filter(|i| i.origin == Origin::Directory) {
        return Ok(Some(identity));
    }
    let Some(directory) = &state.settings().directory else {
        return Ok(None);
    };
    match directory.lookup(name).await {
        Ok(identity) => {
            cache.put(&identity);
            Ok(Some(identity))
        }
        Err(DirectoryError::Refused) => Ok(None),
        Err(DirectoryError::Unavailable(why)) => Err(directory_down(why)),
    }
}

/// A login that is not remembered: checked in its source's and its name's turn, within
/// the throttle, and counted.
async fn check_password(
    state: &AppState,
    user: String,
    password: String,
    source: Option<String>,
) -> Result<Identity, ApiError> {
    let source = source.as_deref();
    let auth = state.auth();
    let access = state.access();
    let checks = access.password_checks();
    let throttle = access.throttle();
    let known = throttle.is_known(source, &user);
    let _turns = checks.turns(source, &user, known).await?;
    // Another request's check may have verified this very login meanwhile.
    if let Some(identity) = auth.remembered(&user, &password) {
        return Ok(identity);
    }
    if let Some(wait) = throttle.wait(source, &user) {
        // Not audited one by one (a flood would fill the store): the block's start was.
        return Err(ApiError::throttled(wait.as_secs().max(1)));
    }
    let verified = match (&state.settings().directory, auth.is_local(&user)) {
        // A local user's name in another case is a wrong name, not the directory's.
        (Some(_), false) if auth.is_local_but_for_case(&user) => None,
        (Some(directory), false) => match directory.login(&user, &password).await {
            // The directory names its user as a local user is named: not theirs to be.
            Ok(identity) if auth.is_local_but_for_case(&identity.name) => None,
            Ok(identity) => {
                auth.remember(&user, &password, identity.clone());
                Some(identity)
            }
            Err(DirectoryError::Refused) => None,
            Err(DirectoryError::Unavailable(why)) => return Err(directory_down(why)),
        },
        _ => {
            let core = checks.core().await?;
            let auth = auth.clone();
            let name = user.clone();
            tokio::task::spawn_blocking(move || {
                let _core = core;
                let identity = with_system_groups(auth.verify(&name, &password)?);
                // Remembered again, with its groups.
                auth.remember(&name, &password, identity.clone());
                Some(identity)
            })
            .await
            .map_err(ApiError::internal)?
        }
    };
    match verified {
        Some(identity) => {
            logged_in_from(state, source, &user);
            audit::record(state, Audit::Login, &user, source, "login checked".into());
            Ok(identity)
        }
        None => {
            let failure = throttle.failed(source, &user);
            audit::failed_login(state, &user, source, &failure, "login refused");
            Err(ApiError::unauthorized())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn checks_of_one_key_take_turns_and_only_so_many_wait() {
        let checks = PasswordChecks::new();
        let first = checks.turns(Some("10.0.0.1"), "ann", false).await.unwrap();
        // The source's next check waits, and so does the name's from elsewhere; one
        // given up (its client went away) no longer counts.
        for (source, name) in [("10.0.0.1", "bob"), ("10.0.0.2", "ann")] {
            let next = tokio::time::timeout(
                Duration::from_millis(20),
                checks.turns(Some(source), name, false),
            )
            .await;
            assert!(next.is_err(), "{source} {name} waits");
        }
        assert_eq!(checks.sources.0.lock().unwrap()["10.0.0.1"].pending, 1);
        assert_eq!(checks.names.0.lock().unwrap()["ann"].pending, 1);
        // Another source and name do not wait, nor the name from a source it is known at.
        drop(checks.turns(Some("10.0.0.3"), "cid", false).await.unwrap());
        drop(checks.turns(Some("10.0.0.4"), "ann", true).await.unwrap());

        let mut waiting: Vec<_> = (1..PENDING_CHECKS)
            .map(|i| {
                Box::pin(checks.turns(Some("10.0.0.1"), if i % 2 == 0 { "x" } else { "y" }, false))
            })
            .collect();
        for check in &mut waiting {
            let started = tokio::time::timeout(Duration::from_millis(1), check.as_mut()).await;
            assert!(started.is_err(), "the first still holds the source's turn");
        }
        assert!(
            checks.turns(Some("10.0.0.1"), "z", false).await.is_err(),
            "the 129th waiting check of one source is refused"
        );
        drop(waiting);
        drop(first);
        assert!(
            checks.sources.0.lock().unwrap().is_empty(),
            "every count returned"
        );
        assert!(
            checks.names.0.lock().unwrap().is_empty(),
            "every count returned"
        );
    }

    #[tokio::test]
    async fn argon2_checks_run_one_per_core() {
        let checks = PasswordChecks::new();
        let cores = checks.cores.available_permits();
        let held: Vec<_> = futures_util::future::join_all((0..cores).map(|_| checks.core()))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let more = tokio::time::timeout(Duration::from_millis(20), checks.core()).await;
        assert!(more.is_err(), "a check beyond one per core waits");
        drop(held);
        assert!(checks.core().await.is_ok());
    }
}
