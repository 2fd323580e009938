//! The sources each name has logged in from, kept in the store as documents of
//! [`KNOWN_SOURCES`] so that a restart does not forget them: a known source is blocked
//! only by its own failures of that name (`throttle`), so a stranger's guesses cannot
//! lock a user out of an address they use, before or after a restart.
//!
//! A pair is written when it first logs in (rarely: once per name and source) and kept
//! [`KEEP_DAYS`] after it was last written; the newest [`crate::throttle::MAX_KNOWN`]
//! are loaded at start. Every call blocks on the store.

use std::sync::Arc;

use drover_domain::dates::WireDates;
use drover_query::{Filter, ListQuery, Paging, Sort};
use drover_store::{CollectionSpec, DocumentStore, StoreError};
use serde_json::json;

use crate::tokens::{hex, now_seconds};

pub const KNOWN_SOURCES: &str = "login_sources";
/// How long a source stays known without a login that writes it again.
pub const KEEP_DAYS: i64 = 180;

pub struct KnownSources {
    store: Arc<dyn DocumentStore>,
}

/// The document id of a pair: a digest, so that any name and source make a valid id.
fn pair_id(name: &str, source: &str) -> String {
    use blake2::Digest;
    let digest = blake2::Blake2b512::digest(format!("{name}\0{source}").as_bytes());
    hex(&digest[..24])
}

impl KnownSources {
    /// Ensures the collection (indexed by when each pair was last written).
    pub fn open(store: Arc<dyn DocumentStore>) -> Result<Self, StoreError> {
        store.ensure_collection(&CollectionSpec::new(KNOWN_SOURCES).index(&["seen"]))?;
        Ok(Self { store })
    }

    /// The newest `max` pairs (name, source) still kept.
    pub fn load(&self, max: usize) -> Result<Vec<(String, String)>, StoreError> {
        let since = now_seconds() - KEEP_DAYS * 86_400;
        let page = self.store.list(
            KNOWN_SOURCES,
            &ListQuery {
                filter: Filter::parse(&json!({"seen": {"$gt": since}}), &WireDates::utc())
                    .expect("a valid filter"),
                sort: Sort::parse(&json!({"seen": -1})).expect("a valid sort"),
                paging: Paging {
                    offset: 0,
                    max: Some(max),
                },
            },
        )?;
        Ok(page
            .items
            .iter()
            .filter_map(|d| {
                let text = |key: &str| d.body[key].as_str().map(String::from);
                Some((text("name")?, text("source")?))
            })
            .collect())
    }

    /// Records that `name` logged in from `source` now.
    pub fn record(&self, name: &str, source: &str) -> Result<(), StoreError> {
        let body = json!({"name": name, "source": source, "seen": now_seconds()});
        self.store
            .put(KNOWN_SOURCES, &pair_id(name, source), None, body)
            .map(|_| ())
    }

    /// Deletes the pairs not written for [`KEEP_DAYS`]; answers how many.
    pub fn purge_old(&self) -> Result<usize, StoreError> {
        let before = now_seconds() - KEEP_DAYS * 86_400;
        let old = self.store.list(
            KNOWN_SOURCES,
            &ListQuery {
                filter: Filter::parse(&json!({"seen": {"$lte": before}}), &WireDates::utc())
                    .expect("a valid filter"),
                ..ListQuery::default()
            },
        )?;
        for document in &old.items {
            match self.store.delete(KNOWN_SOURCES, &document.id, None) {
                Ok(()) | Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(old.items.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_survive_a_reopen_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let open = || -> Arc<dyn DocumentStore> {
            drover_store::open(path.to_str().unwrap()).unwrap().into()
        };
        let known = KnownSources::open(open()).unwrap();
        known.record("admin", "10.0.0.1").unwrap();
        known.record("lena", "2001:db8::/64").unwrap();
        known.record("admin", "10.0.0.1").unwrap();
        drop(known);
        let known = KnownSources::open(open()).unwrap();
        let mut pairs = known.load(10).unwrap();
        pairs.sort();
        assert_eq!(
            pairs,
            [
                ("admin".to_string(), "10.0.0.1".to_string()),
                ("lena".to_string(), "2001:db8::/64".to_string())
            ]
        );
        assert_eq!(known.load(1).unwrap().len(), 1);
        assert_eq!(known.purge_old().unwrap(), 0);
    }
}
