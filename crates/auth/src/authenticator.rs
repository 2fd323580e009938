//! Checking Basic logins against the local users, with a short-lived cache of verified ones.
//!
//! A verified login is remembered for `login_cache_seconds` as a keyed BLAKE2b digest of
//! the user, the password and a digest of the stored hash (never the password itself;
//! one BLAKE2b block per request), so busy clients do not pay argon2 per request and a
//! changed password stops matching at once. Failures are never remembered, and unknown
//! users pay a decoy verification so that timing does not tell them apart. Checks of
//! one user take turns: the many connections of a client presenting one login at once
//! (at start, or when it leaves the cache) cost one argon2 run, not a stalled machine.
//! Directory logins are remembered the same way, with the identity and groups the
//! directory gave.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;

use crate::password::{self, Cost};
use crate::roles::Member;
use crate::{AuthError, User};

/// At most this many remembered logins; beyond it the cache starts over.
const MAX_REMEMBERED: usize = 10_000;

/// Where a user's login was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A local user (configuration or `users.toml`); principals name them as `PAM` users.
    Local,
    /// The directory (LDAP); principals name them as `LDAP` users.
    Directory,
}

impl Origin {
    /// The principal user type that names a user of this origin.
    pub fn user_type(self) -> &'static str {
        match self {
            Origin::Local => "PAM",
            Origin::Directory => "LDAP",
        }
    }
}

/// Who a request comes from, once their login checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    /// A local administrator: every permission, whatever the roles say.
    pub admin: bool,
    pub origin: Origin,
    /// The groups principals may name them by (`LDAPGROUP`, `LDAPOU`, `PAMGROUP`).
    pub groups: Vec<Member>,
}

impl Identity {
    /// A local user without groups.
    pub fn local(name: &str, admin: bool) -> Self {
        Self {
            name: name.to_string(),
            admin,
            origin: Origin::Local,
            groups: Vec::new(),
        }
    }
}

struct Remembered {
    digest: [u8; 64],
    until: Instant,
    identity: Identity,
}

/// What the digest of a directory login mixes in where a local one has the stored hash.
const DIRECTORY: &[u8] = b"directory login";

/// The local users and the logins verified lately.
///
/// A verified login is remembered as a keyed digest of user and password (never the
/// password itself) for `ttl`; a failed login is never remembered, so a wrong password
/// always pays the full argon2 verification. Verifications of one user take turns: when
/// many connections of a busy client present the same login at once (at start, or when
/// the remembered login expires), one verifies it and the others find it remembered,
/// instead of all of them running argon2 together and stalling the machine.
pub struct Authenticator {
    users: HashMap<String, User>,
    /// Each local user's stored hash, digested: what a remembered local login's digest
    /// mixes in where a directory login has [`DIRECTORY`], short enough that the digest
    /// of a login takes one BLAKE2b block, not two, on every request.
    hash_digests: HashMap<String, [u8; 32]>,
    ttl: Duration,
    key: [u8; 32],
    remembered: Mutex<HashMap<String, Remembered>>,
    /// One turn per known user name.
    turns: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// How many argon2 verifications ran (decoys included).
    verifications: AtomicUsize,
    /// Verified for unknown user names, so that they take as long as known ones.
    decoy: String,
}

impl Authenticator {
    /// Refuses two users of the same name and any invalid user.
    pub fn new(users: impl IntoIterator<Item = User>, ttl: Duration) -> Result<Self, AuthError> {
        let mut by_name = HashMap::new();
        for user in users {
            user.validate()?;
            if by_name.contains_key(&user.name) {
                return Err(AuthError::Invalid(format!(
                    "user '{}' is defined twice (configuration file and users.toml?)",
                    user.name
                )));
            }
            by_name.insert(user.name.clone(), user);
        }
        let key = password::random_key();
        let hash_digests = by_name
            .iter()
            .map(|(name, user)| {
                let digest = password::keyed_digest(&key, &[user.password_hash.as_bytes()]);
                let mut short = [0; 32];
                short.copy_from_slice(&digest[..32]);
                (name.clone(), short)
            })
            .collect();
        Ok(Self {
            users: by_name,
            hash_digests,
            ttl,
            key,
            remembered: Mutex::new(HashMap::new()),
            turns: Mutex::new(HashMap::new()),
            verifications: AtomicUsize::new(0),
            decoy: password::hash(&password::generate(), Cost::Standard),
        })
    }

    pub fn has_admin(&self) -> bool {
        self.users.values().any(|u| u.admin)
    }

    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    /// Whether `name` is a local user (else only the directory can check it).
    pub fn is_local(&self, name: &str) -> bool {
        self.users.contains_key(name)
    }

    /// Whether a local user's name is `name` but for case and surrounding spaces: such
    /// a name is not the directory's to answer for (the directory matches `LENA` to
    /// its lena, who would pass for the local lena).
    pub fn is_local_but_for_case(&self, name: &str) -> bool {
        let name = name.trim();
        self.users
            .keys()
            .any(|local| local.eq_ignore_ascii_case(name))
    }

    fn digest(&self, name: &str, password: &str) -> [u8; 64] {
        let salt = match self.hash_digests.get(name) {
            Some(digest) => digest.as_slice(),
            None => DIRECTORY,
        };
        password::keyed_digest(&self.key, &[name.as_bytes(), password.as_bytes(), salt])
    }

    /// The identity of a login verified within the last `ttl` (locally or by the
    /// directory); cheap (no argon2, no directory).
    pub fn remembered(&self, name: &str, password: &str) -> Option<Identity> {
        let digest = self.digest(name, password);
        let remembered = self.remembered.lock().unwrap();
        let entry = remembered.get(name)?;
        (entry.until > Instant::now() && password::same(&entry.digest, &digest))
            .then(|| entry.identity.clone())
    }

    /// Remembers a login verified elsewhere (by the directory) for `ttl`.
    pub fn remember(&self, name: &str, password: &str, identity: Identity) {
        let digest = self.digest(name, password);
        let now = Instant::now();
        let mut remembered = self.remembered.lock().unwrap();
        if remembered.len() >= MAX_REMEMBERED {
            remembered.retain(|_, entry| entry.until > now);
            if remembered.len() >= MAX_REMEMBERED {
                remembered.clear();
            }
        }
        remembered.insert(
            name.to_string(),
            Remembered {
                digest,
                until: now + self.ttl,
                identity,
            },
        );
    }

    /// Verifies a login with argon2 (milliseconds: call it off the async runtime) and
    /// remembers it when it is good.
    pub fn verify(&self, name: &str, password: &str) -> Option<Identity> {
        self.verifications.fetch_add(1, Ordering::Relaxed);
        let Some(user) = self.users.get(name) else {
            let _ = password::verify(&self.decoy, password);
            return None;
        };
        let turn = self
            .turns
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .clone();
        let _turn = turn.lock().unwrap_or_else(|e| e.into_inner());
        // Whoever had the turn before may have verified this very login.
        if let Some(identity) = self.remembered(name, password) {
            self.verifications.fetch_sub(1, Ordering::Relaxed);
            return Some(identity);
        }
        if !password::verify(&user.password_hash, password) {
            return None;
        }
        let identity = Identity::local(&user.name, user.admin);
        self.remember(name, password, identity.clone());
        Some(identity)
    }

    /// How many argon2 verifications have run.
    pub fn verifications(&self) -> usize {
        self.verifications.load(Ordering::Relaxed)
    }

    /// [`Authenticator::remembered`], else [`Authenticator::verify`].
    pub fn login(&self, name: &str, password: &str) -> Option<Identity> {
        self.remembered(name, password)
            .or_else(|| self.verify(name, password))
    }
}

/// The user and password of an `Authorization: Basic ...` header value.
pub fn basic_credentials(header: &str) -> Option<(String, String)> {
    let (scheme, encoded) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator(ttl: Duration) -> Authenticator {
        Authenticator::new(
            [
                User {
                    name: "admin".into(),
                    password_hash: password::hash("root-pw", Cost::Minimal),
                    admin: true,
                },
                User {
                    name: "alice".into(),
                    password_hash: password::hash("alice-pw", Cost::Minimal),
                    admin: false,
                },
            ],
            ttl,
        )
        .unwrap()
    }

    #[test]
    fn a_login_presented_by_many_connections_at_once_is_verified_once() {
        let auth = Arc::new(authenticator(Duration::from_secs(60)));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let auth = auth.clone();
                std::thread::spawn(move || auth.verify("alice", "alice-pw"))
            })
            .collect();
        for thread in threads {
            assert_eq!(thread.join().unwrap().unwrap().name, "alice");
        }
        assert_eq!(auth.verifications(), 1);
        // Wrong passwords are still verified every time.
        assert_eq!(auth.verify("alice", "wrong"), None);
        assert_eq!(auth.verify("alice", "wrong"), None);
        assert_eq!(auth.verifications(), 3);
    }

    #[test]
    fn good_logins_are_remembered_and_bad_ones_never() {
        let auth = authenticator(Duration::from_secs(60));
        assert_eq!(auth.remembered("alice", "alice-pw"), None);
        assert_eq!(auth.verify("alice", "wrong"), None);
        assert_eq!(auth.remembered("alice", "wrong"), None);
        let alice = auth.login("alice", "alice-pw").unwrap();
        assert_eq!((alice.name.as_str(), alice.admin), ("alice", false));
        assert_eq!(auth.remembered("alice", "alice-pw"), Some(alice));
        // A remembered good login does not make another password good.
        assert_eq!(auth.remembered("alice", "alice-pw2"), None);
        assert_eq!(auth.login("alice", "alice-pw2"), None);
        assert_eq!(auth.login("nobody", "alice-pw"), None);
        assert!(auth.login("admin", "root-pw").unwrap().admin);
    }

    #[test]
    fn remembered_logins_expire() {
        let auth = authenticator(Duration::from_millis(0));
        assert!(auth.verify("alice", "alice-pw").is_some());
        assert_eq!(auth.remembered("alice", "alice-pw"), None);
    }

    #[test]
    fn duplicate_users_are_refused() {
        let user = User {
            name: "a".into(),
            password_hash: password::hash("x", Cost::Minimal),
            admin: false,
        };
        let error = Authenticator::new([user.clone(), user], Duration::ZERO)
            .err()
            .unwrap();
        assert!(error.to_string().contains("defined twice"), "{error}");
    }

    #[test]
    fn basic_headers() {
        // "admin:pa:ss" — the password may contain colons.
        assert_eq!(
            basic_credentials("Basic YWRtaW46cGE6c3M="),
            Some(("admin".into(), "pa:ss".into()))
        );
        assert_eq!(
            basic_credentials("basic YWRtaW46cGE6c3M=").map(|c| c.0),
            Some("admin".into())
        );
        for bad in ["Bearer abc", "Basic", "Basic !!!", "Basic YWRtaW4="] {
            assert_eq!(basic_credentials(bad), None, "{bad}");
        }
    }
}
