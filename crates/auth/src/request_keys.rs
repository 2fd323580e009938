//! Idempotency keys: what a caller's creating request with an `Idempotency-Key` was
//! answered, so that a retry is answered the same instead of creating again. Kept in
//! the store (documents of [`REQUEST_KEYS`]) for a window, so that they survive a
//! restart.
//!
//! A key is the caller's: its document's id is a digest of the caller and the key, so
//! another caller's same key is another document. Claiming a key inserts its document
//! (pending) before the creation runs: the store refuses a second insert of one id, so
//! of concurrent retries exactly one runs and the others are told to wait. The answer is
//! written once the creation answered.
//!
//! Where the creation is the engine's (job submissions), the claim is `in_transaction`:
//! the engine writes the key's document again, with the job's id as `created` and the
//! answer's `shape`, in the transaction that stores the job (`drover_sched::Receipt`).
//! A pending key then tells, even after a crash, whether its job exists: with `created`
//! its answer is made from the shape; without, nothing was created and a retry runs.
//! Any other pending key whose server stopped meanwhile (another boot) stays refused
//! until its window ends, since whether it created something is unknown. Each user
//! holds at most `max_per_caller` live keys. Every call blocks on the store.

use std::sync::Arc;
use std::time::Duration;

use drover_domain::dates::WireDates;
use drover_query::{Filter, ListQuery, Paging};
use drover_store::{CollectionSpec, DocumentStore, StoreError};
use serde_json::{Value, json};

use crate::tokens::{hex, now_seconds};

pub const REQUEST_KEYS: &str = "idempotency_keys";

/// The longest key a client may send; keys are visible ASCII without spaces.
pub const MAX_KEY_CHARS: usize = 255;

/// How long keys are kept, and how many one caller may hold at once.
#[derive(Debug, Clone, Copy)]
pub struct RequestKeySettings {
    pub window: Duration,
    pub max_per_caller: usize,
}

/// An answer kept for replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptAnswer {
    pub status: u16,
    pub content_type: Option<String>,
    pub location: Option<String>,
    pub body: String,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The key is this request's: run it, then [`RequestKeys::answered`] or
    /// [`RequestKeys::release`] the id. `record` is the key's document as claimed
    /// (what a receipt writes again, with `created` and `shape`).
    Claimed { id: String, record: Value },
    /// The first request with this key was answered so.
    Answered(KeptAnswer),
    /// A request with this key is under way (or was, when a server stopped).
    Pending { interrupted: bool },
    /// The key was used for another request (another body, path or query).
    OtherRequest,
    /// The caller holds `max_per_caller` live keys already.
    TooMany(usize),
}

/// The stored keys. Blocking.
pub struct RequestKeys {
    store: Arc<dyn DocumentStore>,
    settings: RequestKeySettings,
    /// This process's run: a pending key of another run was interrupted.
    boot: String,
}

/// Whether `key` is one a client may send (1 to [`MAX_KEY_CHARS`] visible ASCII).
pub fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_CHARS && key.bytes().all(|b| b.is_ascii_graphic())
}

fn digest(parts: &[&[u8]]) -> String {
    use blake2::Digest;
    let mut hasher = blake2::Blake2b512::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hex(&hasher.finalize()[..32])
}

/// The shape of a creation's answer, for a receipt: `status`, `{field: <created id>}`
/// and `Location: <location><created id>`.
pub fn answer_shape(status: u16, location: &str, field: &str) -> Value {
    json!({"status": status, "location": location, "field": field})
}

/// The answer a receipt's `shape` makes for the object `created`.
fn answer_of(created: &str, shape: &Value) -> KeptAnswer {
    let field = shape["field"].as_str().unwrap_or("id");
    let mut body = serde_json::Map::new();
    body.insert(field.to_string(), json!(created));
    KeptAnswer {
        status: shape["status"].as_u64().unwrap_or(201) as u16,
        content_type: Some("application/json".into()),
        location: Some(format!(
            "{}{created}",
            shape["location"].as_str().unwrap_or_default()
        )),
        body: Value::Object(body).to_string(),
    }
}

/// The fingerprint of a request: what a retry must repeat exactly.
pub fn fingerprint(method: &str, target: &str, body: &[u8]) -> String {
    digest(&[method.as_bytes(), target.as_bytes(), body])
}

impl RequestKeys {
    /// Ensures the collection (indexed by user and expiry, and by expiry for the purge).
    pub fn open(
        store: Arc<dyn DocumentStore>,
        settings: RequestKeySettings,
    ) -> Result<Self, StoreError> {
        store.ensure_collection(
            &CollectionSpec::new(REQUEST_KEYS)
                .index(&["user", "expires"])
                .index(&["expires"]),
        )?;
        let mut boot = [0u8; 16];
        getrandom::fill(&mut boot).expect("the operating system's random source works");
        Ok(Self {
            store,
            settings,
            boot: hex(&boot),
        })
    }

    /// Claims `key` of `caller` for the request of `fingerprint`, or says what it found;
    /// the key counts against `user`'s bound (the authenticated user, whoever they act
    /// for).
    /// `in_transaction`: the creation writes a receipt in its own transaction (see the
    /// module's documentation).
    pub fn claim(
        &self,
        caller: &str,
        user: &str,
        key: &str,
        fingerprint: &str,
        in_transaction: bool,
    ) -> Result<Claim, StoreError> {
        let id = digest(&[caller.as_bytes(), key.as_bytes()]);
        // Twice at most: an expired document is removed, or a concurrent claim won.
        for _ in 0..2 {
            let now = now_seconds();
            if let Some(found) = self.store.get(REQUEST_KEYS, &id)? {
                if found.body["expires"].as_i64().unwrap_or(0) > now {
                    let claim = self.what_was(&found.body, fingerprint);
                    if claim != (Claim::Pending { interrupted: true })
                        || found.body["inTransaction"] != true
                    {
                        return Ok(claim);
                    }
                    // Cut short before its job was stored: nothing was created, so
                    // this retry runs, under this run's claim.
                    let mut record = found.body;
                    record["boot"] = json!(self.boot);
                    return match self.store.update(
                        REQUEST_KEYS,
                        &id,
                        None,
                        record.clone(),
                        Some(found.version),
                    ) {
                        Ok(_) => Ok(Claim::Claimed { id, record }),
                        Err(StoreError::Conflict(_) | StoreError::NotFound { .. }) => {
                            Ok(Claim::Pending { interrupted: false })
                        }
                        Err(e) => Err(e),
                    };
                }
                match self.store.delete(REQUEST_KEYS, &id, Some(found.version)) {
                    Ok(()) | Err(StoreError::NotFound { .. } | StoreError::Conflict(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            let held = self.live_keys(user, now)?;
            if held >= self.settings.max_per_caller {
                return Ok(Claim::TooMany(self.settings.max_per_caller));
            }
            let window = self.settings.window.as_secs().max(1) as i64;
            let record = json!({
                "user": user,
                "fingerprint": fingerprint,
                "state": "pending",
                "boot": self.boot,
                "expires": now + window,
                "inTransaction": in_transaction,
            });
            match self.store.insert(REQUEST_KEYS, &id, None, record.clone()) {
                Ok(_) => return Ok(Claim::Claimed { id, record }),
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(Claim::Pending { interrupted: false })
    }

    fn what_was(&self, body: &Value, fingerprint: &str) -> Claim {
        if body["fingerprint"] != fingerprint {
            return Claim::OtherRequest;
        }
        if body["state"] != "answered" {
            // Its job is stored (the receipt came with it): its answer is known, also
            // when the server stopped before keeping it.
            if let (Some(created), Some(shape)) = (body["created"].as_str(), body.get("shape")) {
                return Claim::Answered(answer_of(created, shape));
            }
            return Claim::Pending {
                interrupted: body["boot"] != self.boot.as_str(),
            };
        }
        let answer = &body["answer"];
        let text = |name: &str| answer[name].as_str().map(str::to_string);
        Claim::Answered(KeptAnswer {
            status: answer["status"].as_u64().unwrap_or(200) as u16,
            content_type: text("contentType"),
            location: text("location"),
            body: text("body").unwrap_or_default(),
        })
    }

    fn live_keys(&self, user: &str, now: i64) -> Result<usize, StoreError> {
        let query = ListQuery {
            filter: Filter::parse(
                &json!({"user": user, "expires": {"$gt": now}}),
                &WireDates::utc(),
            )
            .expect("a valid filter"),
            paging: Paging {
                offset: 0,
                max: Some(0),
            },
            ..ListQuery::default()
        };
        Ok(self.store.list(REQUEST_KEYS, &query)?.total)
    }

    /// Keeps the answer of the request that claimed `id`.
    pub fn answered(&self, id: &str, answer: &KeptAnswer) -> Result<(), StoreError> {
        let Some(found) = self.store.get(REQUEST_KEYS, id)? else {
            return Ok(());
        };
        let mut body = found.body;
        body["state"] = json!("answered");
        body["answer"] = json!({
            "status": answer.status,
            "contentType": answer.content_type,
            "location": answer.location,
            "body": answer.body,
        });
        self.store
            .update(REQUEST_KEYS, id, None, body, Some(found.version))
            .map(|_| ())
    }

    /// Gives up the claim of `id`: the request was refused, so a retry may run. A claim
    /// whose receipt says something was created stays (retries are answered from it).
    pub fn release(&self, id: &str) -> Result<(), StoreError> {
        let Some(found) = self.store.get(REQUEST_KEYS, id)? else {
            return Ok(());
        };
        if found.body.get("created").is_some() {
            return Ok(());
        }
        match self.store.delete(REQUEST_KEYS, id, Some(found.version)) {
            Ok(()) | Err(StoreError::NotFound { .. } | StoreError::Conflict(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes the keys whose window has ended; answers how many.
    pub fn purge_expired(&self) -> Result<usize, StoreError> {
        let query = ListQuery {
            filter: Filter::parse(
                &json!({"expires": {"$lte": now_seconds()}}),
                &WireDates::utc(),
            )
            .expect("a valid filter"),
            paging: Paging {
                offset: 0,
                max: Some(10_000),
            },
            ..ListQuery::default()
        };
        let found = self.store.list(REQUEST_KEYS, &query)?;
        let mut purged = 0;
        for document in found.items {
            // With its version: a key claimed again meanwhile stays.
            match self
                .store
                .delete(REQUEST_KEYS, &document.id, Some(document.version))
            {
                Ok(()) => purged += 1,
                Err(StoreError::NotFound { .. } | StoreError::Conflict(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(purged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(window: Duration, max: usize) -> (tempfile::TempDir, RequestKeys) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn DocumentStore> =
            Arc::new(drover_store::SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let keys = RequestKeys::open(
            store,
            RequestKeySettings {
                window,
                max_per_caller: max,
            },
        )
        .unwrap();
        (dir, keys)
    }

    fn answer() -> KeptAnswer {
        KeptAnswer {
            status: 201,
            content_type: Some("application/json".into()),
            location: Some("/rest/jobs/x.1".into()),
            body: r#"{"id":"x.1"}"#.into(),
        }
    }

    #[test]
    fn a_key_is_claimed_once_answered_and_replayed_per_caller() {
        let (_dir, keys) = keys(Duration::from_secs(60), 10);
        let Claim::Claimed { id, .. } = keys.claim("alice", "alice", "k1", "f1", false).unwrap()
        else {
            panic!("claimed")
        };
        assert_eq!(
            keys.claim("alice", "alice", "k1", "f1", false).unwrap(),
            Claim::Pending { interrupted: false }
        );
        keys.answered(&id, &answer()).unwrap();
        assert_eq!(
            keys.claim("alice", "alice", "k1", "f1", false).unwrap(),
            Claim::Answered(answer())
        );
        assert_eq!(
            keys.claim("alice", "alice", "k1", "f2", false).unwrap(),
            Claim::OtherRequest
        );
        assert!(matches!(
            keys.claim("bob", "bob", "k1", "f1", false).unwrap(),
            Claim::Claimed { .. }
        ));
        // Released: the next request with the key runs.
        let Claim::Claimed { id, .. } = keys.claim("alice", "alice", "k2", "f1", false).unwrap()
        else {
            panic!("claimed")
        };
        keys.release(&id).unwrap();
        assert!(matches!(
            keys.claim("alice", "alice", "k2", "f1", false).unwrap(),
            Claim::Claimed { .. }
        ));
    }

    #[test]
    fn a_claim_cut_short_by_a_restart_is_settled_by_its_receipt() {
        let (_dir, first) = keys(Duration::from_secs(60), 10);
        let settings = first.settings;
        let Claim::Claimed { id, record } = first.claim("a", "a", "job", "f", true).unwrap() else {
            panic!("claimed")
        };
        let Claim::Claimed { .. } = first.claim("a", "a", "other", "f", false).unwrap() else {
            panic!("claimed")
        };
        // Another run of the server over the same store.
        let second = RequestKeys::open(first.store.clone(), settings).unwrap();
        // Outside a transaction: unknown, refused.
        assert_eq!(
            second.claim("a", "a", "other", "f", false).unwrap(),
            Claim::Pending { interrupted: true }
        );
        // In one, with no receipt: nothing was created, the retry runs.
        assert!(matches!(
            second.claim("a", "a", "job", "f", true).unwrap(),
            Claim::Claimed { .. }
        ));
        // With its receipt: the answer is made from it, whoever asks.
        let mut receipt = record;
        receipt["created"] = json!("drover.7");
        receipt["shape"] = answer_shape(201, "/mws/rest/jobs/", "name");
        first.store.put(REQUEST_KEYS, &id, None, receipt).unwrap();
        let third = RequestKeys::open(first.store.clone(), settings).unwrap();
        for keys in [&first, &third] {
            assert_eq!(
                keys.claim("a", "a", "job", "f", true).unwrap(),
                Claim::Answered(KeptAnswer {
                    status: 201,
                    content_type: Some("application/json".into()),
                    location: Some("/mws/rest/jobs/drover.7".into()),
                    body: r#"{"name":"drover.7"}"#.into(),
                })
            );
        }
    }

    #[test]
    fn a_caller_holds_only_so_many_keys() {
        let (_dir, keys) = keys(Duration::from_secs(60), 3);
        for i in 0..3 {
            assert!(matches!(
                keys.claim("alice", "alice", &format!("k{i}"), "f", false)
                    .unwrap(),
                Claim::Claimed { .. }
            ));
        }
        assert_eq!(
            keys.claim("alice", "alice", "k9", "f", false).unwrap(),
            Claim::TooMany(3)
        );
        assert!(matches!(
            keys.claim("bob", "bob", "k9", "f", false).unwrap(),
            Claim::Claimed { .. }
        ));
    }

    #[test]
    fn keys_are_checked() {
        assert!(valid_key("0b6f7c1e-5d1a-4a8e-9d61-6d1b2c3a4f5e"));
        assert!(!valid_key(""));
        assert!(!valid_key("with space"));
        assert!(!valid_key("é"));
        assert!(!valid_key(&"k".repeat(256)));
    }
}
