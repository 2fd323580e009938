//! Durable collections of JSON documents.
//!
//! A collection holds documents, each with a unique `id`, an optional unique `name`, a
//! `version` (1 on insert, +1 on every change, checked on request for optimistic
//! concurrency) and a JSON `body`. [`DocumentStore`] is the one interface; it has two
//! backends: [`SqliteStore`] (the embedded default, one file, WAL) and [`PostgresStore`]
//! (a shared server, `jsonb`).
//!
//! Listing answers exactly what [`drover_query::ListQuery::run`] answers over the same
//! documents in creation order. Each collection declares indexes on paths; for those
//! paths the store keeps the value's order key ([`drover_query::order`]) in a column, so
//! filters, sorting and paging on them run in SQL. Anything else is evaluated in Rust on
//! the rows SQL narrowed down (see `pushdown.rs`).
//!
//! The trait is synchronous: SQLite is an in-process library, and the engine's journal
//! writer is one dedicated thread. Async callers use `spawn_blocking`.

mod body;
mod identity;
pub mod journal;
mod layout;
mod postgres;
mod pushdown;
mod sqlite;
mod wal_buffer;

use drover_query::{ListQuery, Page};
use serde_json::Value;

pub use crate::body::Body;
pub use crate::identity::service_identity;
pub use crate::postgres::PostgresStore;
pub use crate::sqlite::{SqliteStore, WAL_LIMITS, WalLimits};

/// What a collection is called and which paths it indexes.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionSpec {
    pub name: String,
    /// Each index is a list of paths (a composite index when there are several).
    pub indexes: Vec<Vec<String>>,
    /// Indexes for descending sorts ("newest first") on their last path, after equality
    /// on the others: ties keep creation order in both directions, which a plain index
    /// only gives ascending sorts.
    pub newest_first: Vec<NewestFirstIndex>,
}

/// A newest-first index (see [`CollectionSpec::newest_first`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewestFirstIndex {
    pub paths: Vec<String>,
    /// Documents whose first path holds this value are left out of the index (see
    /// [`CollectionSpec::index_newest_first_except`]).
    pub leaves_out: Option<Value>,
}

impl CollectionSpec {
    /// A collection named `name` (lower-case letters, digits and `_`, starting with a letter).
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            indexes: Vec::new(),
            newest_first: Vec::new(),
        }
    }

    /// An index for descending sorts on the last of `paths` after equality on the others
    /// (see [`CollectionSpec::newest_first`]); it serves what `index(paths)` would too.
    pub fn index_newest_first(mut self, paths: &[&str]) -> Self {
        self.newest_first.push(NewestFirstIndex {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            leaves_out: None,
        });
        self
    }

    /// Like [`CollectionSpec::index_newest_first`], but documents whose first path holds
    /// `common` get no entry: for a value most documents hold, this spares most writes an
    /// index update. Queries for other values use the index; queries for `common` are
    /// answered through the collection's other indexes (which should include one on the
    /// sort path alone), and their count as all documents minus the indexed ones.
    pub fn index_newest_first_except(mut self, paths: &[&str], common: Value) -> Self {
        self.newest_first.push(NewestFirstIndex {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            leaves_out: Some(common),
        });
        self
    }

    /// Adds an index on `paths` (e.g. `["credentials.user", "dates.submitDate"]`).
    pub fn index(mut self, paths: &[&str]) -> Self {
        self.indexes
            .push(paths.iter().map(|p| p.to_string()).collect());
        self
    }
}

/// A stored document.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub id: String,
    pub name: Option<String>,
    pub version: i64,
    pub body: Value,
}

/// One change; a batch of them is applied in one transaction, all or nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Creates a document (version 1); fails if the id or the name is taken.
    Insert {
        collection: String,
        id: String,
        name: Option<String>,
        body: Body,
    },
    /// Replaces an existing document's name and body; with `expected_version`, only if
    /// the stored version is that one.
    Update {
        collection: String,
        id: String,
        name: Option<String>,
        body: Body,
        expected_version: Option<i64>,
    },
    /// Creates or replaces, whatever the stored version (the engine's journal).
    Put {
        collection: String,
        id: String,
        name: Option<String>,
        body: Body,
    },
    /// Removes a document; with `expected_version`, only if it is still that version.
    Delete {
        collection: String,
        id: String,
        expected_version: Option<i64>,
    },
}

impl Write {
    pub fn collection(&self) -> &str {
        match self {
            Write::Insert { collection, .. }
            | Write::Update { collection, .. }
            | Write::Put { collection, .. }
            | Write::Delete { collection, .. } => collection,
        }
    }
}

/// What [`DocumentStore::describe`] reports: the connection as the health detail shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreInfo {
    /// `"sqlite"` or `"postgresql"`.
    pub backend: &'static str,
    /// Server host; `None` for the embedded SQLite file.
    pub host: Option<String>,
    pub port: Option<u16>,
    /// The database name (PostgreSQL) or file path (SQLite).
    pub database: String,
    pub username: Option<String>,
    /// The database software's version, e.g. `3.50.2` or `16.4`.
    pub version: String,
}

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("no document '{id}' in {collection}")]
    NotFound { collection: String, id: String },
    /// A taken id or name, or a stale version.
    #[error("{0}")]
    Conflict(String),
    /// A document the store cannot hold (the message says why).
    #[error("{0}")]
    Invalid(String),
    #[error("unknown collection '{0}' (ensure_collection was not called for it)")]
    UnknownCollection(String),
    /// The database failed (I/O, connection, SQL); never caused by a client's input.
    #[error("store failure: {0}")]
    Backend(String),
    /// A write failed while committing in a way that may have left it on disk (its
    /// sync failed): whether it was made is unknown until [`DocumentStore::settle`]
    /// succeeds, after which it certainly was not.
    #[error("store failure while committing, outcome unknown: {0}")]
    InDoubt(String),
}

/// Which one document a lookup wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Find<'a> {
    Id(&'a str),
    Name(&'a str),
    /// The last in creation order.
    LastCreated,
}

impl<'a> Find<'a> {
    /// The query that reads the document from `table` (columns id, name, version, body
    /// as text), and the value bound as its one parameter, if it has one.
    fn sql(self, table: &str, dialect: pushdown::Dialect) -> (String, Option<&'a str>) {
        let body = match dialect {
            pushdown::Dialect::Sqlite => "body",
            pushdown::Dialect::Postgres => "body::text",
        };
        let p = dialect.placeholder(1);
        let (selection, value) = match self {
            Find::Id(id) => (format!("WHERE id = {p}"), Some(id)),
            Find::Name(name) => (format!("WHERE name = {p}"), Some(name)),
            Find::LastCreated => ("ORDER BY seq DESC LIMIT 1".into(), None),
        };
        let sql = format!("SELECT id, name, version, {body} FROM {table} {selection}");
        (sql, value)
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Which of the servers sharing a store is the active one. The active server holds a
/// lock of the database for as long as its session lives (a server killed loses it at
/// once), and a number, the epoch, that each new holder increments: once a server
/// holds the lease, the store refuses its writes as soon as the epoch is not its own, so
/// that a server that lost the lease without noticing cannot write beside the new one.
pub trait ActiveLease: Send + Sync {
    /// Tries to become the active server, recording who (`holder`) and where others
    /// reach it (`url`); answers the new epoch when it did, `None` when another holds it.
    fn try_acquire(&self, holder: &str, url: &str) -> Result<Option<i64>>;
    /// Whether this server still holds the lease: its lock session answers and the
    /// recorded epoch is its own.
    fn still_held(&self) -> Result<bool>;
    /// The active server as last recorded, if any was.
    fn holder(&self) -> Result<Option<LeaseHolder>>;
}

/// The active server as recorded by the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub holder: String,
    pub url: String,
    pub epoch: i64,
    /// Epoch seconds when it became active.
    pub since: i64,
}

/// Durable collections of JSON documents. See the crate documentation.
pub trait DocumentStore: Send + Sync {
    /// `"sqlite"` or `"postgresql"`.
    fn backend(&self) -> &'static str;

    /// Creates the collection, or brings an existing one up to `spec` (new index paths
    /// are computed for the documents already stored). Idempotent.
    fn ensure_collection(&self, spec: &CollectionSpec) -> Result<()>;

    /// Applies `batch` in one transaction; answers each write's resulting version
    /// (0 for a delete). On error nothing of the batch is applied.
    fn write(&self, batch: &[Write]) -> Result<Vec<i64>>;

    /// The one document `which` names, if it exists.
    fn find(&self, collection: &str, which: Find<'_>) -> Result<Option<Document>>;

    fn get(&self, collection: &str, id: &str) -> Result<Option<Document>> {
        self.find(collection, Find::Id(id))
    }

    fn get_by_name(&self, collection: &str, name: &str) -> Result<Option<Document>> {
        self.find(collection, Find::Name(name))
    }

    /// The most recently created document of the collection (the last in creation
    /// order), if any: where a collection's ids grow with time, the largest id, with no
    /// index on it.
    fn last_created(&self, collection: &str) -> Result<Option<Document>> {
        self.find(collection, Find::LastCreated)
    }

    /// The documents matching `query`, sorted and paged, with the number of matches.
    fn list(&self, collection: &str, query: &ListQuery) -> Result<Page<Document>>;

    /// Hands every document of `collection` to `visit`, one at a time, in creation order:
    /// its id and its body as stored JSON text. For loading a whole collection (the
    /// engine's recovery) without holding every document in memory at once, as parsed
    /// JSON. The default lists them all first.
    fn visit_all(&self, collection: &str, visit: &mut dyn FnMut(&str, &str)) -> Result<()> {
        for document in self.list(collection, &ListQuery::default())?.items {
            visit(&document.id, &document.body.to_string());
        }
        Ok(())
    }

    /// Checks that the database answers.
    fn ping(&self) -> Result<()>;

    /// Refreshes the planner's statistics (and, on PostgreSQL, the visibility map that
    /// index-only counts rely on); worth calling after a bulk load.
    fn maintain(&self) -> Result<()>;

    /// Where the data lives and what serves it, for the health detail; asks the server
    /// for its version, so it fails like [`DocumentStore::ping`] when the database is down.
    fn describe(&self) -> Result<StoreInfo>;

    /// The lease that makes one of several servers sharing this store the active one,
    /// where the store can be shared (PostgreSQL).
    fn lease(&self) -> Option<&dyn ActiveLease> {
        None
    }

    /// Settles a write that failed [`StoreError::InDoubt`]: once this answers `Ok`, that
    /// write certainly was not made (and never will be, after a restart either). A store
    /// whose failed writes always leave nothing behind answers `Ok` at once.
    fn settle(&self) -> Result<()> {
        Ok(())
    }

    /// Makes the on-disk state self-contained before the process exits (SQLite folds its
    /// write-ahead log into the main file). Every answered write is durable without it.
    fn flush(&self) -> Result<()>;

    fn insert(&self, collection: &str, id: &str, name: Option<&str>, body: Value) -> Result<i64> {
        self.write(&[Write::Insert {
            collection: collection.into(),
            id: id.into(),
            name: name.map(Into::into),
            body: body.into(),
        }])
        .map(|v| v[0])
    }

    fn update(
        &self,
        collection: &str,
        id: &str,
        name: Option<&str>,
        body: Value,
        expected_version: Option<i64>,
    ) -> Result<i64> {
        self.write(&[Write::Update {
            collection: collection.into(),
            id: id.into(),
            name: name.map(Into::into),
            body: body.into(),
            expected_version,
        }])
        .map(|v| v[0])
    }

    fn put(&self, collection: &str, id: &str, name: Option<&str>, body: Value) -> Result<i64> {
        self.write(&[Write::Put {
            collection: collection.into(),
            id: id.into(),
            name: name.map(Into::into),
            body: body.into(),
        }])
        .map(|v| v[0])
    }

    fn delete(&self, collection: &str, id: &str, expected_version: Option<i64>) -> Result<()> {
        self.write(&[Write::Delete {
            collection: collection.into(),
            id: id.into(),
            expected_version,
        }])
        .map(|_| ())
    }
}

/// The PostgreSQL server that test runs use: `DROVER_TEST_POSTGRES_URL`, or `None` when
/// it is unset. With `DROVER_REQUIRE_POSTGRES=1` (as in CI) an unset URL panics, so a
/// missing server fails the run instead of skipping the PostgreSQL half of it.
pub fn test_postgres_url() -> Option<String> {
    match std::env::var("DROVER_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("DROVER_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "DROVER_REQUIRE_POSTGRES=1 but DROVER_TEST_POSTGRES_URL is not set"
            );
            None
        }
    }
}

/// Opens the store a location names: `postgres://...` or `postgresql://...` for
/// PostgreSQL, otherwise a SQLite file path (optionally prefixed with `sqlite://`).
/// A PostgreSQL URL may carry `schema=<name>` among its parameters: the tables then live
/// in that schema (created if needed), so that several deployments can share a database.
pub fn open(location: &str) -> Result<Box<dyn DocumentStore>> {
    if location.starts_with("postgres://") || location.starts_with("postgresql://") {
        let (url, schema) = split_schema(location);
        Ok(Box::new(PostgresStore::connect_in_schema(
            &url,
            schema.as_deref(),
        )?))
    } else {
        let path = location.strip_prefix("sqlite://").unwrap_or(location);
        Ok(Box::new(SqliteStore::open(std::path::Path::new(path))?))
    }
}

/// Takes the `schema` parameter out of a PostgreSQL URL (the driver does not know it).
fn split_schema(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), None);
    };
    let mut schema = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("schema=") {
            Some(name) => {
                schema = Some(name.to_string());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    let url = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (url, schema)
}

#[cfg(test)]
mod tests {
    use super::split_schema;

    #[test]
    fn the_schema_parameter_is_ours() {
        assert_eq!(
            split_schema("postgres://h/db"),
            ("postgres://h/db".into(), None)
        );
        assert_eq!(
            split_schema("postgres://h/db?schema=s1"),
            ("postgres://h/db".into(), Some("s1".into()))
        );
        assert_eq!(
            split_schema("postgres://h/db?connect_timeout=5&schema=s1&sslmode=disable"),
            (
                "postgres://h/db?connect_timeout=5&sslmode=disable".into(),
                Some("s1".into())
            )
        );
    }
}
