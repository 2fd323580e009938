//! What the stored images and service templates share: documents of one collection,
//! each under an id the service assigns, with a unique name and a `version`, found by
//! id, else by name. A cloud has tens of these, not millions: lists run the query over
//! every document in memory, with the evaluator that defines list answers
//! ([`ListQuery::run_positions`]), on the stored form plus `id` and `version`.
//!
//! Writes are serialized by the caller holding [`Catalog::lock`], which also hands out the
//! ids, so that the checks that read other documents see what the write applies to.

use std::sync::{Arc, Mutex, MutexGuard};

use drover_domain::dates::Timestamp;
use drover_domain::ids::IdSequence;
use drover_query::{ListQuery, Page};
use drover_store::{CollectionSpec, Document, DocumentStore, StoreError, Write};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::images::{CloudError, Result};

/// A stored value with the id and version the store keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored<T> {
    pub id: String,
    pub version: i64,
    pub value: T,
}

impl<T: DeserializeOwned> Stored<T> {
    pub(crate) fn read(document: &Document) -> Result<Self> {
        let value =
            serde_json::from_value(document.body.clone()).map_err(|e| CloudError::Unreadable {
                id: document.id.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            id: document.id.clone(),
            version: document.version,
            value,
        })
    }
}

impl<T: Serialize> Stored<T> {
    /// What list queries read: the stored form with `id` and `version`.
    pub fn document(&self) -> Value {
        let mut out = serde_json::to_value(&self.value).unwrap_or_default();
        out["id"] = json!(self.id);
        out["version"] = json!(self.version);
        out
    }
}

/// One collection of named documents.
pub(crate) struct Catalog {
    pub(crate) store: Arc<dyn DocumentStore>,
    pub(crate) collection: &'static str,
    /// What a document is called in messages (`image`).
    noun: &'static str,
    /// Held by every write; hands out the ids.
    writes: Mutex<IdSequence>,
}

impl Catalog {
    /// Ensures the collection; new ids continue after the last stored one.
    pub(crate) fn open(
        store: Arc<dyn DocumentStore>,
        collection: &'static str,
        noun: &'static str,
    ) -> Result<Self> {
        store.ensure_collection(&CollectionSpec::new(collection))?;
        let last = store.last_created(collection)?;
        let ids =
            IdSequence::starting_after(last.as_ref().map(|d| d.id.as_str()), Timestamp::now());
        Ok(Self {
            store,
            collection,
            noun,
            writes: Mutex::new(ids),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, IdSequence> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every document, in creation order.
    pub(crate) fn all<T: DeserializeOwned>(&self) -> Result<Vec<Stored<T>>> {
        self.store
            .list(self.collection, &ListQuery::default())?
            .items
            .iter()
            .map(Stored::read)
            .collect()
    }

    /// The document whose id, else name, is `key`.
    pub(crate) fn find<T: DeserializeOwned>(&self, key: &str) -> Result<Option<Stored<T>>> {
        let document = match self.store.get(self.collection, key)? {
            Some(document) => Some(document),
            None => self.store.get_by_name(self.collection, key)?,
        };
        document.as_ref().map(Stored::read).transpose()
    }

    /// [`Catalog::find`], or not found.
    pub(crate) fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Stored<T>> {
        self.find(key)?
            .ok_or_else(|| CloudError::NotFound(format!("No {} '{key}'", self.noun)))
    }

    /// The documents `query` selects, sorted and paged, and how many match.
    pub(crate) fn list<T: Serialize + DeserializeOwned>(
        &self,
        query: &ListQuery,
    ) -> Result<Page<Stored<T>>> {
        let mut all = self.all::<T>()?;
        let documents: Vec<Value> = all.iter().map(Stored::document).collect();
        let page = query.run_positions(&documents);
        let mut slots: Vec<Option<Stored<T>>> = all.drain(..).map(Some).collect();
        Ok(Page {
            total: page.total,
            items: page
                .items
                .into_iter()
                .filter_map(|i| slots[i].take())
                .collect(),
        })
    }

    /// A stale `version` (not the stored one) is a conflict.
    pub(crate) fn check_version(
        &self,
        asked: Option<i64>,
        stored: i64,
        summary: &str,
    ) -> Result<()> {
        match asked {
            Some(version) if version != stored => Err(CloudError::Conflict {
                summary: summary.into(),
                reason: format!(
                    "version {version} is stale: the {} is at version {stored}",
                    self.noun
                ),
                advice: Some(format!(
                    "read the {} again and apply the change to it",
                    self.noun
                )),
            }),
            _ => Ok(()),
        }
    }

    /// The write of `value` under `id` and its name: an insert, or (with the version it
    /// was read at) an update that fails if it changed meanwhile.
    pub(crate) fn put<T: Serialize>(
        &self,
        id: &str,
        name: &str,
        value: &T,
        read_at: Option<i64>,
    ) -> Write {
        let body = serde_json::to_value(value).unwrap_or_default().into();
        let (collection, id, name) = (self.collection.into(), id.to_string(), Some(name.into()));
        match read_at {
            None => Write::Insert {
                collection,
                id,
                name,
                body,
            },
            Some(version) => Write::Update {
                collection,
                id,
                name,
                body,
                expected_version: Some(version),
            },
        }
    }

    /// Writes `writes` in one batch; a store conflict means `name` is taken, or a
    /// document changed meanwhile.
    pub(crate) fn commit(&self, writes: &[Write], summary: &str, name: &str) -> Result<()> {
        self.store
            .write(writes)
            .map(drop)
            .map_err(|error| match error {
                StoreError::Conflict(reason) => CloudError::Conflict {
                    summary: summary.into(),
                    reason: format!(
                        "the name '{name}' is taken, or {} changed meanwhile ({reason})",
                        self.noun
                    ),
                    advice: Some(format!("read the {}s again and retry", self.noun)),
                },
                other => other.into(),
            })
    }
}
