//! Reading stored events: the service the events resource calls (events are written by
//! the [`crate::recorder`]). Store calls run off the async runtime.

use std::sync::Arc;

use drover_query::{ListQuery, Page};
use drover_store::{DocumentStore, StoreError};

use crate::event::{COLLECTION, Event, V1_RENAMES};

/// Why events could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blocking read did not complete.
    #[error("{0}")]
    Interrupted(String),
    /// A stored body this version cannot read (the event's id).
    #[error("event {0} cannot be read")]
    Unreadable(String),
}

/// The stored events; cheap to clone.
#[derive(Clone)]
pub struct StoredEvents {
    store: Arc<dyn DocumentStore>,
}

impl StoredEvents {
    pub fn new(store: Arc<dyn DocumentStore>) -> Self {
        Self { store }
    }

    /// The page of events `query` selects (its paths in version-1 names when `v1`), each
    /// with its stored version; bodies this version cannot read are left out.
    pub async fn list(
        &self,
        mut query: ListQuery,
        v1: bool,
    ) -> Result<Page<(Event, i64)>, ReadError> {
        if v1 {
            query.filter = query.filter.renamed(V1_RENAMES);
            query.sort = query.sort.renamed(V1_RENAMES);
        }
        let store = self.store.clone();
        let page = tokio::task::spawn_blocking(move || store.list(COLLECTION, &query))
            .await
            .map_err(|e| ReadError::Interrupted(e.to_string()))??;
        let items = page
            .items
            .into_iter()
            .filter_map(|d| {
                let version = d.version;
                Event::from_document(d.body).map(|e| (e, version))
            })
            .collect();
        Ok(Page {
            total: page.total,
            items,
        })
    }

    /// The event `id` with its stored version, if there is one.
    pub async fn get(&self, id: &str) -> Result<Option<(Event, i64)>, ReadError> {
        let store = self.store.clone();
        let key = id.to_string();
        let document = tokio::task::spawn_blocking(move || store.get(COLLECTION, &key))
            .await
            .map_err(|e| ReadError::Interrupted(e.to_string()))??;
        let Some(document) = document else {
            return Ok(None);
        };
        let version = document.version;
        match Event::from_document(document.body) {
            Some(event) => Ok(Some((event, version))),
            None => Err(ReadError::Unreadable(id.to_string())),
        }
    }
}
