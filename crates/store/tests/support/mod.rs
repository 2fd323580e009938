//! The backends every store test runs against: SQLite always; PostgreSQL when
//! `DROVER_TEST_POSTGRES_URL` names a server (required when `DROVER_REQUIRE_POSTGRES=1`,
//! as in CI, so that a missing server fails the run instead of skipping half of it).

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use drover_store::{DocumentStore, PostgresStore, SqliteStore};

/// A store under test and what keeps its storage alive (dropped at the end).
pub struct Backend {
    pub store: Box<dyn DocumentStore>,
    reopen: Box<dyn Fn() -> Box<dyn DocumentStore> + Send + Sync>,
    _dir: Option<tempfile::TempDir>,
    pg: Option<PostgresStore>,
}

impl Backend {
    pub fn name(&self) -> &'static str {
        self.store.backend()
    }

    /// Closes the store and opens the same storage again.
    pub fn reopen(&mut self) {
        let fresh = (self.reopen)();
        self.store = fresh;
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(pg) = &self.pg {
            let _ = pg.drop_schema();
        }
    }
}

pub use drover_store::test_postgres_url as postgres_url;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh SQLite store in a temporary directory.
pub fn sqlite() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drover.db");
    let open_path = path.clone();
    Backend {
        store: Box::new(SqliteStore::open(&path).unwrap()),
        reopen: Box::new(move || Box::new(SqliteStore::open(&open_path).unwrap())),
        _dir: Some(dir),
        pg: None,
    }
}

/// A schema name no other test, run or process uses, starting with `prefix`.
pub fn unique_schema(prefix: &str) -> String {
    format!(
        "{prefix}{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    )
}

/// Writes the document `{"id": id}` to the collection `things`.
pub fn put_thing(store: &dyn DocumentStore, id: &str) -> drover_store::Result<Vec<i64>> {
    store.write(&[drover_store::Write::Put {
        collection: "things".into(),
        id: id.into(),
        name: None,
        body: serde_json::json!({"id": id}).into(),
    }])
}

/// A fresh PostgreSQL store in a schema of its own, if a server is configured.
pub fn postgres() -> Option<Backend> {
    let url = postgres_url()?;
    let schema = unique_schema("t");
    let open = move || PostgresStore::connect_in_schema(&url, Some(&schema)).unwrap();
    let first = open();
    let keeper = open();
    Some(Backend {
        store: Box::new(first),
        reopen: Box::new(move || Box::new(open())),
        _dir: None,
        pg: Some(keeper),
    })
}

/// Every configured backend, fresh.
pub fn backends() -> Vec<Backend> {
    let mut all = vec![sqlite()];
    all.extend(postgres());
    all
}
