//! The shared backend: PostgreSQL, bodies in `jsonb`, key columns in `bytea` (whose
//! byte-wise order is the order keys' order, as in SQLite).
//!
//! A small pool of connections, each caching its prepared statements. The `postgres`
//! client blocks; it must not be called from inside an async task (use
//! `spawn_blocking`), like every method of the store.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use drover_query::{ListQuery, Page};
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, NoTls, Statement, Transaction};

use crate::layout::{self, Catalog, Collection, Layout, RowWriter, Stored};
use crate::pushdown::{self, Dialect, EachRow, ReadConn, Row};
use crate::{
    ActiveLease, Body, CollectionSpec, Document, DocumentStore, Find, LeaseHolder, Result,
    StoreError, StoreInfo, Write,
};

/// Serialises schema changes between Drover processes sharing one database.
const SCHEMA_LOCK: i64 = 0x6472_6f76_6572; // "drover"

const MAX_IDLE_CONNECTIONS: usize = 8;

/// Rows per multi-row INSERT (PostgreSQL allows 65535 parameters per statement).
const INSERT_ROWS: usize = 100;

pub struct PostgresStore {
    url: String,
    schema: Option<String>,
    idle: Mutex<Vec<Conn>>,
    collections: Catalog,
    /// The session holding the active server's lock (see [`ActiveLease`]).
    lease_session: Mutex<Option<Client>>,
    /// The epoch this server holds the lease at; 0 while it holds none (writes are then
    /// not fenced: a store no server shares has no lease).
    fence: AtomicI64,
    /// The transactions of writes whose COMMIT got no answer (the connection was lost)
    /// and whose outcome is not known yet: see [`DocumentStore::settle`]. Every one, not
    /// the last: the journal holds the answers of all of them until all are settled.
    in_doubt: Mutex<Vec<i64>>,
}

/// What became of a transaction whose COMMIT got no answer.
#[derive(Debug, PartialEq)]
enum CommitOutcome {
    Committed,
    Aborted,
    /// Still in progress (the server has not yet seen the connection go), or the
    /// database cannot say.
    Unknown,
}

/// How often, and how far apart, a lost COMMIT's outcome is asked before it is left in
/// doubt: the server ends a transaction whose client went away within moments.
const OUTCOME_TRIES: u32 = 5;
const OUTCOME_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// The advisory lock of the active server: this number and the schema's hash.
const ACTIVE_LOCK: i32 = 0x0d0e;
const LEASE_TABLE: &str = "CREATE TABLE IF NOT EXISTS drover_lease (id INTEGER PRIMARY KEY, \
     epoch BIGINT NOT NULL, holder TEXT NOT NULL, url TEXT NOT NULL, since BIGINT NOT NULL)";

struct Conn {
    client: Client,
    statements: HashMap<String, Statement>,
    /// Not to be used again (its COMMIT failed: the client may not know yet that the
    /// connection is gone).
    broken: bool,
}

/// The synchronous client panics when it is dropped inside an async runtime (it runs a
/// runtime of its own), and the last holder of a store may be a task of the server's
/// runtime (a connection's service outliving shutdown by a moment): the idle connections
/// are closed on a thread of their own, where that cannot happen.
impl Drop for PostgresStore {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|e| e.into_inner()));
        let session = self
            .lease_session
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if idle.is_empty() && session.is_none() {
            return;
        }
        let closing = std::thread::spawn(move || drop((idle, session)));
        let _ = closing.join();
    }
}

type Param<'a> = &'a (dyn ToSql + Sync);

fn backend(e: postgres::Error) -> StoreError {
    StoreError::Backend(format!("postgresql: {e}"))
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`) and migrates it.
    pub fn connect(url: &str) -> Result<Self> {
        Self::connect_in_schema(url, None)
    }

    /// Like [`PostgresStore::connect`], keeping every table in `schema` (created if
    /// needed): several deployments, or test runs, can then share one database.
    pub fn connect_in_schema(url: &str, schema: Option<&str>) -> Result<Self> {
        if let Some(s) = schema {
            layout::validate_collection_name(s)?;
        }
        let store = Self {
            url: url.to_string(),
            schema: schema.map(Into::into),
            idle: Mutex::new(Vec::new()),
            collections: Catalog::default(),
            lease_session: Mutex::new(None),
            fence: AtomicI64::new(0),
            in_doubt: Mutex::new(Vec::new()),
        };
        store.with_conn(|conn| {
            let mut tx = conn.client.transaction().map_err(backend)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
                .map_err(backend)?;
            tx.batch_execute("CREATE TABLE IF NOT EXISTS drover_schema (version INTEGER NOT NULL)")
                .map_err(backend)?;
            let done: i64 = tx
                .query_one(
                    "SELECT COALESCE(MAX(version), 0)::BIGINT FROM drover_schema",
                    &[],
                )
                .map_err(backend)?
                .get(0);
            if done as usize > layout::MIGRATIONS.len() {
                return Err(StoreError::Backend(format!(
                    "the database schema is version {done}, newer than this program's {}",
                    layout::MIGRATIONS.len()
                )));
            }
            for (i, sql) in layout::MIGRATIONS.iter().enumerate().skip(done as usize) {
                tx.batch_execute(sql).map_err(backend)?;
                tx.execute(
                    "INSERT INTO drover_schema (version) VALUES ($1)",
                    &[&(i as i32 + 1)],
                )
                .map_err(backend)?;
            }
            tx.commit().map_err(backend)
        })?;
        Ok(store)
    }

    /// Drops the schema this store was opened in, with everything in it (for tests).
    pub fn drop_schema(&self) -> Result<()> {
        let Some(schema) = &self.schema else {
            return Ok(());
        };
        self.with_conn(|conn| {
            conn.client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .map_err(backend)
        })
    }

    fn open_conn(&self) -> Result<Conn> {
        let mut client = Client::connect(&self.url, NoTls)
            .map_err(|e| StoreError::Backend(format!("cannot connect to PostgreSQL: {e}")))?;
        if let Some(schema) = &self.schema {
            client
                .batch_execute(&format!(
                    "CREATE SCHEMA IF NOT EXISTS {schema}; SET search_path TO {schema}"
                ))
                .map_err(backend)?;
        }
        Ok(Conn {
            client,
            statements: HashMap::new(),
            broken: false,
        })
    }

    /// Asks a new connection what became of transaction `txid`, whose COMMIT got no
    /// answer.
    fn commit_outcome(&self, txid: i64, tries: u32) -> CommitOutcome {
        for attempt in 0..tries {
            if attempt > 0 {
                std::thread::sleep(OUTCOME_PAUSE);
            }
            let status = self.open_conn().and_then(|mut conn| {
                conn.client
                    .query_one("SELECT txid_status($1)::TEXT", &[&txid])
                    .map(|row| row.get::<_, Option<String>>(0))
                    .map_err(backend)
            });
            match status.ok().flatten().as_deref() {
                Some("committed") => return CommitOutcome::Committed,
                Some("aborted") => return CommitOutcome::Aborted,
                _ => {}
            }
        }
        CommitOutcome::Unknown
    }

    /// The answer to a write whose COMMIT failed with `error`. An error the server sent
    /// means nothing was made; any other (the connection lost, reset or timed out) may
    /// have come after the server committed, so the database is asked.
    fn after_failed_commit(&self, txid: i64, error: postgres::Error) -> Result<()> {
        if error.as_db_error().is_some() {
            return Err(backend(error));
        }
        match self.commit_outcome(txid, OUTCOME_TRIES) {
            CommitOutcome::Committed => Ok(()),
            CommitOutcome::Aborted => Err(backend(error)),
            CommitOutcome::Unknown => {
                self.in_doubt.lock().unwrap().push(txid);
                Err(StoreError::InDoubt(format!(
                    "postgresql: the connection was lost during COMMIT ({error}), and the \
                     database cannot be asked whether it committed"
                )))
            }
        }
    }

    fn with_conn<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T>) -> Result<T> {
        let pooled = self.idle.lock().unwrap().pop();
        let mut conn = match pooled {
            Some(c) if !c.client.is_closed() => c,
            _ => self.open_conn()?,
        };
        let out = f(&mut conn);
        if !conn.broken && !conn.client.is_closed() {
            let mut idle = self.idle.lock().unwrap();
            if idle.len() < MAX_IDLE_CONNECTIONS {
                idle.push(conn);
            }
        }
        out
    }
}

/// Refuses the transaction unless this server's epoch is still the lease's. The row is
/// read `FOR SHARE`: a new holder's increment waits for the writes in flight, and every
/// write after it sees the new epoch.
fn check_fence(
    tx: &mut Transaction<'_>,
    statements: &mut HashMap<String, Statement>,
    fence: i64,
) -> Result<()> {
    let statement = prepare(
        statements,
        tx,
        "SELECT epoch FROM drover_lease WHERE id = 1 FOR SHARE",
    )?;
    let epoch: Option<i64> = tx
        .query_opt(&statement, &[])
        .map_err(backend)?
        .map(|row| row.get(0));
    if epoch == Some(fence) {
        Ok(())
    } else {
        Err(StoreError::Backend(
            "this server is no longer the active one: another server holds the lease".into(),
        ))
    }
}

impl ActiveLease for PostgresStore {
    fn try_acquire(&self, holder: &str, url: &str) -> Result<Option<i64>> {
        let mut session = self.lease_session.lock().unwrap_or_else(|e| e.into_inner());
        if session.as_ref().is_none_or(|c| c.is_closed()) {
            *session = Some(self.open_conn()?.client);
        }
        let client = session.as_mut().expect("opened above");
        let locked: bool = client
            .query_one(
                "SELECT pg_try_advisory_lock($1, hashtext(current_schema()))",
                &[&ACTIVE_LOCK],
            )
            .map_err(backend)?
            .get(0);
        if !locked {
            return Ok(None);
        }
        client.batch_execute(LEASE_TABLE).map_err(backend)?;
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let epoch: i64 = client
            .query_one(
                "INSERT INTO drover_lease (id, epoch, holder, url, since) VALUES (1, 1, $1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET epoch = drover_lease.epoch + 1, \
                 holder = EXCLUDED.holder, url = EXCLUDED.url, since = EXCLUDED.since \
                 RETURNING epoch",
                &[&holder, &url, &since],
            )
            .map_err(backend)?
            .get(0);
        self.fence.store(epoch, Ordering::SeqCst);
        Ok(Some(epoch))
    }

    fn still_held(&self) -> Result<bool> {
        let fence = self.fence.load(Ordering::SeqCst);
        let mut session = self.lease_session.lock().unwrap_or_else(|e| e.into_inner());
        let Some(client) = session.as_mut().filter(|c| !c.is_closed()) else {
            return Ok(false);
        };
        let epoch: Option<i64> =
            match client.query_opt("SELECT epoch FROM drover_lease WHERE id = 1", &[]) {
                Ok(row) => row.map(|row| row.get(0)),
                // The session, and with it the lock, is gone.
                Err(_) if client.is_closed() => return Ok(false),
                Err(e) => return Err(backend(e)),
            };
        Ok(fence != 0 && epoch == Some(fence))
    }

    fn holder(&self) -> Result<Option<LeaseHolder>> {
        self.with_conn(|conn| {
            let row = match conn.client.query_opt(
                "SELECT holder, url, epoch, since FROM drover_lease WHERE id = 1",
                &[],
            ) {
                Ok(row) => row,
                // No server has held the lease yet.
                Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => None,
                Err(e) => return Err(backend(e)),
            };
            Ok(row.map(|row| LeaseHolder {
                holder: row.get(0),
                url: row.get(1),
                epoch: row.get(2),
                since: row.get(3),
            }))
        })
    }
}

/// A cached prepared statement (one parse per connection and SQL text).
fn prepare(
    cache: &mut HashMap<String, Statement>,
    client: &mut impl postgres::GenericClient,
    sql: &str,
) -> Result<Statement> {
    if let Some(s) = cache.get(sql) {
        return Ok(s.clone());
    }
    let stmt = client.prepare(sql).map_err(backend)?;
    cache.insert(sql.to_string(), stmt.clone());
    Ok(stmt)
}

/// A read-only transaction that sees one snapshot throughout.
fn read_snapshot(client: &mut postgres::Client) -> Result<Transaction<'_>> {
    client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(backend)
}

fn to_row(r: &postgres::Row) -> Row {
    Row {
        id: r.get(0),
        name: r.get(1),
        version: r.get(2),
        body: r.get(3),
    }
}

struct Reader<'a, 'b> {
    tx: &'a mut Transaction<'b>,
    statements: &'a mut HashMap<String, Statement>,
}

fn byte_params(params: &[Vec<u8>]) -> Vec<Param<'_>> {
    params.iter().map(|p| p as Param<'_>).collect()
}

impl ReadConn for Reader<'_, '_> {
    fn count(&mut self, sql: &str, params: &[Vec<u8>]) -> Result<usize> {
        let stmt = prepare(self.statements, self.tx, sql)?;
        let n: i64 = self
            .tx
            .query_one(&stmt, &byte_params(params))
            .map_err(backend)?
            .get(0);
        Ok(n as usize)
    }

    fn for_each_row(&mut self, sql: &str, params: &[Vec<u8>], each: EachRow<'_>) -> Result<()> {
        let stmt = prepare(self.statements, self.tx, sql)?;
        for r in self
            .tx
            .query(&stmt, &byte_params(params))
            .map_err(backend)?
        {
            each(to_row(&r))?;
        }
        Ok(())
    }
}

/// The owned parameters of one row: id, name, body text, then (key, crossed) pairs.
struct RowParams {
    id: String,
    name: Option<String>,
    body: String,
    keys: Vec<(Vec<u8>, i16)>,
}

impl RowParams {
    fn of(layout: &Layout, doc: &Stored<'_>) -> Result<Self> {
        Self::new(layout, doc.collection, doc.id, doc.name, doc.body)
    }

    fn new(
        layout: &Layout,
        collection: &str,
        id: &str,
        name: Option<&str>,
        body: &Body,
    ) -> Result<Self> {
        Ok(Self {
            id: id.to_string(),
            name: name.map(Into::into),
            body: layout::body_text(collection, id, body)?,
            keys: layout.body_keys(body)?,
        })
    }

    fn params(&self) -> Vec<Param<'_>> {
        let mut p: Vec<Param<'_>> = vec![&self.id, &self.name, &self.body];
        for (k, u) in &self.keys {
            p.push(k);
            p.push(u);
        }
        p
    }
}

fn conflict(e: postgres::Error, collection: &str, id: &str, name: Option<&str>) -> StoreError {
    match e.as_db_error() {
        Some(db) if *db.code() == SqlState::UNIQUE_VIOLATION => {
            let on_name = db.constraint().is_some_and(|c| c.ends_with("_name"));
            layout::taken(collection, on_name, id, name)
        }
        _ => backend(e),
    }
}

/// A unique violation of a multi-row insert: PostgreSQL's detail names the value
/// (`Key (id)=(j1) already exists.`).
fn conflict_in_rows(e: postgres::Error, collection: &str) -> StoreError {
    match e.as_db_error() {
        Some(db) if *db.code() == SqlState::UNIQUE_VIOLATION => {
            let value = db
                .detail()
                .and_then(|d| {
                    d.split_once(")=(")?
                        .1
                        .rsplit_once(") already exists")
                        .map(|(v, _)| v.to_string())
                })
                .unwrap_or_default();
            let on_name = db.constraint().is_some_and(|c| c.ends_with("_name"));
            layout::taken(collection, on_name, &value, Some(&value))
        }
        _ => backend(e),
    }
}

/// The positions of `batch` with each collection's writes together (collections in the
/// order they first appear, each one's writes in their order). Writes to different
/// collections do not depend on each other (no foreign keys), and a batch of the engine's
/// interleaves them (a job insert, its event's insert, the next job's...): grouped, runs
/// of inserts fill multi-row statements instead of costing a round trip each.
fn by_collection(batch: &[Write]) -> Vec<usize> {
    let mut collections: Vec<&str> = Vec::new();
    let rank: Vec<usize> = batch
        .iter()
        .map(
            |w| match collections.iter().position(|c| *c == w.collection()) {
                Some(rank) => rank,
                None => {
                    collections.push(w.collection());
                    collections.len() - 1
                }
            },
        )
        .collect();
    let mut order: Vec<usize> = (0..batch.len()).collect();
    order.sort_by_key(|&i| rank[i]); // stable: each collection keeps its order
    order
}

/// Inserts consecutive documents of one collection with one statement per
/// `INSERT_ROWS` of them: a round trip per row would cap throughput at the network's pace.
fn insert_rows(
    tx: &mut Transaction<'_>,
    cache: &mut HashMap<String, Statement>,
    collection: &Collection,
    name: &str,
    writes: &[&Write],
) -> Result<()> {
    for chunk in writes.chunks(INSERT_ROWS) {
        let rows = chunk
            .iter()
            .map(|w| match w {
                Write::Insert {
                    id,
                    name: doc_name,
                    body,
                    ..
                } => RowParams::new(&collection.layout, name, id, doc_name.as_deref(), body),
                _ => unreachable!("insert_rows takes inserts only"),
            })
            .collect::<Result<Vec<_>>>()?;
        let params: Vec<Param<'_>> = rows.iter().flat_map(RowParams::params).collect();
        let stmt = prepare(
            cache,
            tx,
            &collection
                .layout
                .insert_rows_sql(rows.len(), Dialect::Postgres),
        )?;
        tx.execute(&stmt, &params)
            .map_err(|e| conflict_in_rows(e, name))?;
    }
    Ok(())
}

/// PostgreSQL's row statements, inside a write transaction, with the connection's
/// prepared statements.
struct PostgresRows<'t, 'c> {
    tx: &'t mut Transaction<'c>,
    statements: &'t mut HashMap<String, Statement>,
}

impl PostgresRows<'_, '_> {
    fn prepare(&mut self, sql: &str) -> Result<Statement> {
        prepare(self.statements, self.tx, sql)
    }
}

impl RowWriter for PostgresRows<'_, '_> {
    fn insert(&mut self, collection: &Collection, doc: &Stored<'_>) -> Result<()> {
        let row = RowParams::of(&collection.layout, doc)?;
        let stmt = self.prepare(&collection.sql.insert)?;
        self.tx
            .execute(&stmt, &row.params())
            .map_err(|e| conflict(e, doc.collection, doc.id, doc.name))
            .map(drop)
    }

    fn put(&mut self, collection: &Collection, doc: &Stored<'_>) -> Result<i64> {
        let row = RowParams::of(&collection.layout, doc)?;
        let stmt = self.prepare(&collection.sql.put)?;
        self.tx
            .query_one(&stmt, &row.params())
            .map_err(|e| conflict(e, doc.collection, doc.id, doc.name))
            .map(|r| r.get(0))
    }

    fn update(
        &mut self,
        collection: &Collection,
        doc: &Stored<'_>,
        expected: Option<i64>,
    ) -> Result<Option<i64>> {
        let row = RowParams::of(&collection.layout, doc)?;
        let mut params = row.params();
        let statement = match &expected {
            Some(v) => {
                params.push(v);
                &collection.sql.update_versioned
            }
            None => &collection.sql.update,
        };
        let stmt = self.prepare(statement)?;
        self.tx
            .query_opt(&stmt, &params)
            .map_err(|e| conflict(e, doc.collection, doc.id, doc.name))
            .map(|found| found.map(|r| r.get(0)))
    }

    fn delete(&mut self, collection: &Collection, id: &str, expected: Option<i64>) -> Result<u64> {
        match expected {
            Some(v) => {
                let stmt = self.prepare(&collection.sql.delete_versioned)?;
                self.tx.execute(&stmt, &[&id, &v])
            }
            None => {
                let stmt = self.prepare(&collection.sql.delete)?;
                self.tx.execute(&stmt, &[&id])
            }
        }
        .map_err(backend)
    }

    fn version_of(&mut self, collection: &Collection, id: &str) -> Result<Option<i64>> {
        let stmt = self.prepare(&collection.sql.version_of)?;
        Ok(self
            .tx
            .query_opt(&stmt, &[&id])
            .map_err(backend)?
            .map(|r| r.get(0)))
    }

    fn add_to_count(&mut self, table: &str, delta: i64) -> Result<()> {
        let stmt = self.prepare(&layout::count_update_sql(Dialect::Postgres))?;
        self.tx
            .execute(&stmt, &[&table, &delta])
            .map(drop)
            .map_err(backend)
    }
}

impl DocumentStore for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgresql"
    }

    fn ensure_collection(&self, spec: &CollectionSpec) -> Result<()> {
        let layout = self.with_conn(|conn| {
            let mut tx = conn.client.transaction().map_err(backend)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
                .map_err(backend)?;
            let existing: Vec<String> = tx
                .query_opt(
                    "SELECT paths FROM drover_collections WHERE name = $1",
                    &[&spec.name],
                )
                .map_err(backend)?
                .map(|r| serde_json::from_str(r.get::<_, &str>(0)).unwrap_or_default())
                .unwrap_or_default();
            let (layout, added) = Layout::new(spec, &existing)?;
            for statement in layout.schema_sql(&added, Dialect::Postgres) {
                tx.batch_execute(&statement).map_err(backend)?;
            }
            if !added.is_empty() {
                let rows = tx
                    .query(
                        &format!("SELECT seq, body::text FROM {}", layout.table),
                        &[],
                    )
                    .map_err(backend)?;
                for r in rows {
                    let seq: i64 = r.get(0);
                    let body: serde_json::Value = serde_json::from_str(r.get::<_, &str>(1))
                        .map_err(|e| StoreError::Backend(e.to_string()))?;
                    let keys = layout.row_keys(&body);
                    for &n in &added {
                        let (k, u) = &keys[n];
                        tx.execute(&layout.backfill_sql(n, Dialect::Postgres), &[k, u, &seq])
                            .map_err(backend)?;
                    }
                }
            }
            tx.execute(
                "INSERT INTO drover_collections (name, paths) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET paths = EXCLUDED.paths",
                &[&spec.name, &layout.catalog_paths()],
            )
            .map_err(backend)?;
            tx.commit().map_err(backend)?;
            // Tables changed shape: statements prepared against the old shape are stale.
            conn.statements.clear();
            Ok(layout)
        })?;
        self.idle
            .lock()
            .unwrap()
            .iter_mut()
            .for_each(|c| c.statements.clear());
        self.collections
            .insert(&spec.name, layout, Dialect::Postgres);
        Ok(())
    }

    fn write(&self, batch: &[Write]) -> Result<Vec<i64>> {
        let collections = self.collections.for_batch(batch)?;
        let order = by_collection(batch);
        let fence = self.fence.load(Ordering::SeqCst);
        self.with_conn(|conn| {
            let mut tx = conn.client.transaction().map_err(backend)?;
            if fence != 0 {
                check_fence(&mut tx, &mut conn.statements, fence)?;
            }
            let mut versions = vec![0; batch.len()];
            let mut k = 0;
            while k < order.len() {
                let i = order[k];
                // A run of inserts into one collection goes in multi-row statements.
                let run = order[k..]
                    .iter()
                    .take_while(|&&j| {
                        matches!(batch[j], Write::Insert { .. })
                            && batch[j].collection() == batch[i].collection()
                    })
                    .count();
                if run > 1 {
                    let writes: Vec<&Write> =
                        order[k..k + run].iter().map(|&j| &batch[j]).collect();
                    insert_rows(
                        &mut tx,
                        &mut conn.statements,
                        &collections[i],
                        batch[i].collection(),
                        &writes,
                    )?;
                    for &j in &order[k..k + run] {
                        versions[j] = 1;
                    }
                    k += run;
                } else {
                    let mut rows = PostgresRows {
                        tx: &mut tx,
                        statements: &mut conn.statements,
                    };
                    versions[i] = layout::apply(&mut rows, &collections[i], &batch[i])?;
                    k += 1;
                }
            }
            let mut rows = PostgresRows {
                tx: &mut tx,
                statements: &mut conn.statements,
            };
            layout::count_batch(&mut rows, batch, &versions, &collections)?;
            // Asked before COMMIT, so that a COMMIT whose answer is lost can be looked up.
            let statement = prepare(&mut conn.statements, &mut tx, "SELECT txid_current()")?;
            let txid: i64 = tx.query_one(&statement, &[]).map_err(backend)?.get(0);
            match tx.commit() {
                Ok(()) => Ok(versions),
                Err(e) => {
                    conn.broken = true;
                    self.after_failed_commit(txid, e).map(|()| versions)
                }
            }
        })
    }

    /// The writes in doubt are settled when the database says each one's transaction
    /// aborted. One that committed after all stays in doubt: its answers say "unknown",
    /// which is true.
    fn settle(&self) -> Result<()> {
        let mut in_doubt = self.in_doubt.lock().unwrap();
        in_doubt.retain(|&txid| self.commit_outcome(txid, 1) != CommitOutcome::Aborted);
        match in_doubt.first() {
            None => Ok(()),
            Some(txid) => Err(StoreError::InDoubt(format!(
                "postgresql: transaction {txid}, whose COMMIT got no answer, did not abort"
            ))),
        }
    }

    fn find(&self, collection: &str, which: Find<'_>) -> Result<Option<Document>> {
        let table = &self.collections.get(collection)?.layout.table;
        let (sql, value) = which.sql(table, Dialect::Postgres);
        self.with_conn(|conn| {
            let stmt = prepare(&mut conn.statements, &mut conn.client, &sql)?;
            let params: Vec<Param<'_>> = value.iter().map(|v| v as Param<'_>).collect();
            let found = conn.client.query_opt(&stmt, &params).map_err(backend)?;
            found.map(|r| to_row(&r).into_document()).transpose()
        })
    }

    fn visit_all(&self, collection: &str, visit: &mut dyn FnMut(&str, &str)) -> Result<()> {
        use postgres::fallible_iterator::FallibleIterator;
        let table = &self.collections.get(collection)?.layout.table;
        self.with_conn(|conn| {
            // One snapshot from the first document to the last; rows come as they are read.
            let mut tx = read_snapshot(&mut conn.client)?;
            let select = format!("SELECT id, body::text FROM {table} ORDER BY seq");
            let mut rows = tx
                .query_raw(select.as_str(), std::iter::empty::<&str>())
                .map_err(backend)?;
            while let Some(row) = rows.next().map_err(backend)? {
                let id: &str = row.try_get(0).map_err(backend)?;
                let body: &str = row.try_get(1).map_err(backend)?;
                visit(id, body);
            }
            drop(rows);
            tx.commit().map_err(backend)
        })
    }

    fn list(&self, collection: &str, query: &ListQuery) -> Result<Page<Document>> {
        let layout = &self.collections.get(collection)?.layout;
        self.with_conn(|conn| {
            // One snapshot for the count and the page.
            let mut tx = read_snapshot(&mut conn.client)?;
            let page = pushdown::list(
                &mut Reader {
                    tx: &mut tx,
                    statements: &mut conn.statements,
                },
                layout,
                Dialect::Postgres,
                query,
            )?;
            tx.commit().map_err(backend)?;
            Ok(page)
        })
    }

    fn maintain(&self) -> Result<()> {
        let tables = self.collections.tables();
        self.with_conn(|conn| {
            for table in tables {
                conn.client
                    .batch_execute(&format!("VACUUM ANALYZE {table}"))
                    .map_err(backend)?;
            }
            Ok(())
        })
    }

    fn describe(&self) -> Result<StoreInfo> {
        let config: postgres::Config = self.url.parse().map_err(backend)?;
        let host = config.get_hosts().first().map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        });
        let version = self.with_conn(|conn| {
            let row = conn
                .client
                .query_one("SHOW server_version", &[])
                .map_err(backend)?;
            Ok(row.get::<_, String>(0))
        })?;
        Ok(StoreInfo {
            backend: "postgresql",
            host,
            port: Some(config.get_ports().first().copied().unwrap_or(5432)),
            database: config
                .get_dbname()
                .or(config.get_user())
                .unwrap_or("postgres")
                .to_string(),
            username: config.get_user().map(Into::into),
            version,
        })
    }

    fn flush(&self) -> Result<()> {
        Ok(()) // every commit is already on the server
    }

    fn lease(&self) -> Option<&dyn ActiveLease> {
        Some(self)
    }

    fn ping(&self) -> Result<()> {
        self.with_conn(|conn| {
            conn.client
                .simple_query("SELECT 1")
                .map(|_| ())
                .map_err(backend)
        })
    }
}
