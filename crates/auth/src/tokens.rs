//! Bearer access tokens (the OAuth 2 token endpoint's): issued to a user for a portal
//! client, kept in the store as documents of [`TOKENS`] so that they survive a restart.
//!
//! A token is 32 bytes from the operating system's random source, shown to its client
//! once (base64url); the store keeps only its BLAKE2b digest as the document's id (a
//! token has 256 bits of entropy, so an unkeyed digest cannot be reversed or guessed
//! from), with its user, their origin, the client and the expiry. Each user has at most
//! `max_per_user` live tokens: issuing one more drops their oldest. Every call blocks
//! on the store.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use drover_domain::dates::WireDates;
use drover_query::{Filter, ListQuery, Paging, Sort};
use drover_store::{CollectionSpec, DocumentStore, StoreError, Write};
use serde_json::{Value, json};

use crate::Origin;

pub const TOKENS: &str = "oauth_tokens";

/// The length of a token as clients see it (32 bytes in base64url without padding).
const TOKEN_CHARS: usize = 43;

/// How long tokens live and how many one user may hold.
#[derive(Debug, Clone, Copy)]
pub struct TokenSettings {
    pub lifetime: Duration,
    pub max_per_user: usize,
}

/// A portal client of the token endpoint (`[[oauth.clients]]`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthClient {
    /// The `client_id`.
    pub id: String,
    /// The argon2 hash of the `client_secret` (`drover hash-password` makes one).
    pub secret_hash: String,
    /// Whom a `client_credentials` grant acts as; without it that grant is refused
    /// (`unauthorized_client`).
    #[serde(default)]
    pub principal: Option<String>,
}

/// A token just issued: the secret (shown once) and its lifetime in seconds.
#[derive(Debug, Clone)]
pub struct Issued {
    pub token: String,
    pub expires_in: u64,
}

/// Whom a live token was issued to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenOwner {
    pub user: String,
    pub origin: Origin,
    pub client: String,
}

/// The stored tokens. Blocking.
pub struct Tokens {
    store: Arc<dyn DocumentStore>,
    settings: TokenSettings,
}

/// The first whole second at which a token issued at `issued` for `lifetime` seconds is
/// dead: the second after `issued + lifetime`, so that it lives at least its lifetime
/// (and less than a second more). From `issued`'s whole second alone, a token issued
/// just before a second's end would die that much too early.
fn expiry(issued: SystemTime, lifetime: u64) -> i64 {
    let since = issued.duration_since(UNIX_EPOCH).unwrap_or_default();
    since.as_secs() as i64 + lifetime as i64 + i64::from(since.subsec_nanos() > 0)
}

pub(crate) fn now_seconds() -> i64 {
    seconds_of(SystemTime::now())
}

/// `at`'s whole seconds since the epoch.
fn seconds_of(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The stored id of a token: the hex of the first 32 bytes of its BLAKE2b-512 digest.
fn token_id(token: &str) -> String {
    use blake2::Digest;
    let digest = blake2::Blake2b512::digest(token.as_bytes());
    hex(&digest[..32])
}

fn filter(json: Value) -> Filter {
    Filter::parse(&json, &WireDates::utc()).expect("a valid filter")
}

impl Tokens {
    /// Ensures the collection (indexed by user, and by expiry for the purge).
    pub fn open(
        store: Arc<dyn DocumentStore>,
        settings: TokenSettings,
    ) -> Result<Self, StoreError> {
        store.ensure_collection(
            &CollectionSpec::new(TOKENS)
                .index(&["user", "expires"])
                .index(&["expires"]),
        )?;
        Ok(Self { store, settings })
    }

    pub fn settings(&self) -> TokenSettings {
        self.settings
    }

    /// Issues a token to `user` for `client`; in the same transaction drops the user's
    /// expired tokens and, beyond `max_per_user`, their oldest.
    pub fn issue(&self, user: &str, origin: Origin, client: &str) -> Result<Issued, StoreError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).expect("the operating system's random source works");
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
        // One reading of the clock for the issue and the expiry.
        let issued = SystemTime::now();
        let now = seconds_of(issued);
        let lifetime = self.settings.lifetime.as_secs().max(1);
        let held = self.store.list(
            TOKENS,
            &ListQuery {
                filter: filter(json!({"user": user})),
                sort: Sort::parse(&json!({"issued": 1})).expect("a valid sort"),
                paging: Paging::default(),
            },
        )?;
        let live = held
            .items
            .iter()
            .filter(|d| d.body["expires"].as_i64().unwrap_or(0) > now)
            .count();
        let keep = self.settings.max_per_user.max(1) - 1;
        let mut drop_live = live.saturating_sub(keep);
        let mut batch: Vec<Write> = held
            .items
            .iter()
            .filter(|d| {
                let expired = d.body["expires"].as_i64().unwrap_or(0) <= now;
                // Oldest first: the live ones beyond the bound go first.
                expired
                    || (drop_live > 0 && {
                        drop_live -= 1;
                        true
                    })
            })
            .map(|d| Write::Delete {
                collection: TOKENS.into(),
                id: d.id.clone(),
                expected_version: None,
            })
            .collect();
        batch.push(Write::Insert {
            collection: TOKENS.into(),
            id: token_id(&token),
            name: None,
            body: json!({
                "user": user,
                "origin": origin.user_type(),
                "client": client,
                "issued": now,
                "expires": expiry(issued, lifetime),
            })
            .into(),
        });
        match self.store.write(&batch) {
            // Another request deleted one of the same tokens meanwhile: issue without.
            Err(StoreError::NotFound { .. }) => {
                self.store.write(&batch[batch.len() - 1..])?;
            }
            other => {
                other?;
            }
        }
        Ok(Issued {
            token,
            expires_in: lifetime,
        })
    }

    /// Whom `token` was issued to, while it lives; `None` for anything else.
    pub fn find(&self, token: &str) -> Result<Option<TokenOwner>, StoreError> {
        if !well_formed(token) {
            return Ok(None);
        }
        let Some(document) = self.store.get(TOKENS, &token_id(token))? else {
            return Ok(None);
        };
        let body = &document.body;
        if body["expires"].as_i64().unwrap_or(0) <= now_seconds() {
            return Ok(None);
        }
        Ok(Some(TokenOwner {
            user: body["user"].as_str().unwrap_or_default().to_string(),
            origin: if body["origin"] == "LDAP" {
                Origin::Directory
            } else {
                Origin::Local
            },
            client: body["client"].as_str().unwrap_or_default().to_string(),
        }))
    }

    /// Revokes `token` when it was issued to `client` (RFC 7009: a client revokes only
    /// its own tokens); `true` when one was revoked.
    pub fn revoke(&self, token: &str, client: &str) -> Result<bool, StoreError> {
        if !well_formed(token) {
            return Ok(false);
        }
        let id = token_id(token);
        let Some(document) = self.store.get(TOKENS, &id)? else {
            return Ok(false);
        };
        if document.body["client"] != client {
            return Ok(false);
        }
        match self.store.delete(TOKENS, &id, None) {
            Ok(()) | Err(StoreError::NotFound { .. }) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Revokes every token of `user`; answers how many there were.
    pub fn revoke_user(&self, user: &str) -> Result<usize, StoreError> {
        self.delete_matching(filter(json!({"user": user})))
    }

    /// Deletes the expired tokens; answers how many.
    pub fn purge_expired(&self) -> Result<usize, StoreError> {
        self.delete_matching(filter(json!({"expires": {"$lte": now_seconds()}})))
    }

    fn delete_matching(&self, filter: Filter) -> Result<usize, StoreError> {
        let found = self.store.list(
            TOKENS,
            &ListQuery {
                filter,
                ..ListQuery::default()
            },
        )?;
        let batch: Vec<Write> = found
            .items
            .iter()
            .map(|d| Write::Delete {
                collection: TOKENS.into(),
                id: d.id.clone(),
                expected_version: None,
            })
            .collect();
        for chunk in batch.chunks(1000) {
            // One at a time when another request deleted one of them meanwhile.
            if let Err(StoreError::NotFound { .. }) = self.store.write(chunk) {
                for one in chunk {
                    match self.store.write(std::slice::from_ref(one)) {
                        Ok(_) | Err(StoreError::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(batch.len())
    }
}

/// Whether `token` looks like one this service issues (anything else is not looked up).
fn well_formed(token: &str) -> bool {
    token.len() == TOKEN_CHARS
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_lives_at_least_its_lifetime_whenever_in_a_second_it_is_issued() {
        let at = |millis: u64| UNIX_EPOCH + Duration::from_millis(millis);
        // Issued at 10.999 s for 1 s: alive through 11.999 s, dead from second 12.
        assert_eq!(expiry(at(10_999), 1), 12);
        assert_eq!(expiry(at(10_001), 1), 12);
        // Issued on the second: dead from 11.
        assert_eq!(expiry(at(10_000), 1), 11);
    }

    fn tokens(max_per_user: usize, lifetime: Duration) -> (tempfile::TempDir, Tokens) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn DocumentStore> =
            Arc::new(drover_store::SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let tokens = Tokens::open(
            store,
            TokenSettings {
                lifetime,
                max_per_user,
            },
        )
        .unwrap();
        (dir, tokens)
    }

    #[test]
    fn a_token_finds_its_user_until_revoked_and_is_stored_only_as_a_digest() {
        let (_dir, tokens) = tokens(5, Duration::from_secs(60));
        let issued = tokens.issue("alice", Origin::Local, "portal").unwrap();
        assert_eq!(issued.token.len(), TOKEN_CHARS);
        assert!(tokens.store.get(TOKENS, &issued.token).unwrap().is_none());
        let owner = tokens.find(&issued.token).unwrap().unwrap();
        assert_eq!(
            (owner.user.as_str(), owner.client.as_str()),
            ("alice", "portal")
        );
        assert!(!tokens.revoke(&issued.token, "other-client").unwrap());
        assert!(tokens.find(&issued.token).unwrap().is_some());
        assert!(tokens.revoke(&issued.token, "portal").unwrap());
        assert!(tokens.find(&issued.token).unwrap().is_none());
        for bad in ["", "x", "../../etc", &"a".repeat(43), &"é".repeat(22)] {
            assert!(tokens.find(bad).unwrap().is_none(), "{bad}");
        }
    }

    #[test]
    fn a_user_holds_at_most_so_many_live_tokens_the_oldest_dropped() {
        let (_dir, tokens) = tokens(3, Duration::from_secs(60));
        let issued: Vec<Issued> = (0..5)
            .map(|_| tokens.issue("bob", Origin::Local, "portal").unwrap())
            .collect();
        let live: Vec<bool> = issued
            .iter()
            .map(|i| tokens.find(&i.token).unwrap().is_some())
            .collect();
        assert_eq!(live, [false, false, true, true, true]);
        assert_eq!(tokens.revoke_user("bob").unwrap(), 3);
        assert!(tokens.find(&issued[4].token).unwrap().is_none());
    }
}
