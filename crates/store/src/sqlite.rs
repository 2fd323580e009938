//! The embedded backend: one SQLite file in WAL mode, `synchronous=FULL`, so that a
//! committed batch survives a crash of the process or of the machine.
//!
//! One writer connection (SQLite has one writer anyway) and a small pool of reader
//! connections, which WAL lets read while the writer writes. All of them open the file
//! through [`wal_buffer`]'s VFS, which writes a commit's WAL frames in few large writes.
//!
//! Checkpoints (copying the WAL into the database file) run on a thread of their own,
//! not in the commit that happens to cross SQLite's threshold: a commit only appends to
//! the WAL. The WAL may grow to [`WAL_LIMITS`]`.checkpoint_frames` before it is copied,
//! so that index pages that every batch touches are copied once for many commits.
//!
//! SQLite starts the WAL over (writes it again from its start) only when every frame
//! has been copied, and a checkpointer that runs beside a busy writer never gets there:
//! each pass copies what was there when it began, and the writer has appended more.
//! So the checkpointer makes passes until what is left is the last commit or two (or
//! at most `tail_frames`), and the writer copies that tail itself, between two of its
//! transactions; its next one starts the WAL over. The WAL file is then rewritten in
//! place, in pages the kernel already holds, instead of growing: appending to a growing
//! file cost the kernel a block allocation and a new page-cache page per frame, and
//! truncating it back freed them all again. If the checkpointer cannot keep up, the
//! writer checkpoints everything itself at `restart_frames`, which bounds the WAL.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use drover_query::{ListQuery, Page};
use rusqlite::ffi;
use rusqlite::types::Value as Sql;
use rusqlite::wal::CheckpointMode;
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params_from_iter,
};

use crate::layout::{self, Catalog, Collection, Layout, RowWriter, Stored};
use crate::pushdown::{self, Dialect, EachRow, ReadConn, Row};
use crate::wal_buffer;
use crate::{
    Body, CollectionSpec, Document, DocumentStore, Find, Result, StoreError, StoreInfo, Write,
};

const MAX_IDLE_READERS: usize = 8;

pub struct SqliteStore {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    collections: Catalog,
    /// A commit failed after its frames may have reached the WAL file, and no commit has
    /// succeeded since (see [`DocumentStore::settle`]).
    in_doubt: AtomicBool,
    /// Held for its `Drop`, which stops the thread (after the writer has closed).
    _checkpointer: Checkpointer,
}

/// When the WAL is copied into the database file, in WAL frames (pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalLimits {
    /// The background checkpointer copies the WAL at this many frames.
    pub checkpoint_frames: i32,
    /// The writer copies the frames the checkpointer left behind once they are at most
    /// this many, so that the WAL can start over.
    pub tail_frames: i32,
    /// The writer checkpoints itself (RESTART: it waits for readers and starts the WAL
    /// over) at this many, should the checkpointer fall behind.
    pub restart_frames: i32,
}

/// 64 MiB, 4 MiB and 1 GiB of 4 KiB pages. (256 MiB copied more index pages at once but
/// made each checkpoint's writeback long enough to stall commits: measured slower.)
pub const WAL_LIMITS: WalLimits = WalLimits {
    checkpoint_frames: 16_384,
    tail_frames: 1_024,
    restart_frames: 262_144,
};
/// After a checkpoint that starts the WAL over, its file is cut back to this size:
/// above what a normal cycle reaches (checkpoint frames plus what commits add while the
/// checkpointer catches up), so that only a WAL the writer had to restart is cut.
const WAL_SIZE_LIMIT: i64 = 256 * 1024 * 1024;

/// The background checkpointer: a thread with its own connection that runs a PASSIVE
/// checkpoint (never blocking the writer or readers) when the writer's WAL hook asks.
struct Checkpointer {
    signal: Arc<CheckpointSignal>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct CheckpointSignal {
    state: Mutex<CheckpointState>,
    wake: Condvar,
}

/// The WAL is known by its generation: the number of times it started over, as the writer
/// counts them. A count of copied frames is only good for the generation it was made in.
/// (The counts only decide who copies what when: any checkpoint is safe at any time.)
#[derive(Default)]
struct CheckpointState {
    /// A pass is wanted, over the WAL of this generation.
    wanted: Option<u64>,
    /// The last checkpoint's (generation, frames from the start of the WAL copied).
    last_pass: Option<(u64, i32)>,
    closing: bool,
}

impl CheckpointSignal {
    fn request(&self, generation: u64) {
        self.state.lock().unwrap().wanted = Some(generation);
        self.wake.notify_one();
    }

    /// Waits for a request and answers its generation; `None` when the store is closing.
    fn wait(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap();
        loop {
            if state.closing {
                return None;
            }
            if let Some(generation) = state.wanted.take() {
                return Some(generation);
            }
            state = self.wake.wait(state).unwrap();
        }
    }

    fn record(&self, generation: u64, copied: i32) {
        self.state.lock().unwrap().last_pass = Some((generation, copied));
    }

    fn last_pass(&self) -> Option<(u64, i32)> {
        self.state.lock().unwrap().last_pass
    }
}

/// What the writer does about the WAL after a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WalStep {
    Nothing,
    /// Ask the checkpointer for a pass.
    RequestPass,
    /// Copy the frames the checkpointer left, so that the next transaction starts the
    /// WAL over.
    CopyTail,
    /// Copy everything, waiting for readers, and start the WAL over now.
    Restart,
}

/// The writer's side of the checkpoint policy (see the module's documentation).
struct WalPolicy {
    limits: WalLimits,
    generation: u64,
    /// Frames in the WAL after the previous commit: fewer now means it started over.
    frames: i32,
}

impl WalPolicy {
    fn new(limits: WalLimits) -> Self {
        Self {
            limits,
            generation: 0,
            frames: 0,
        }
    }

    /// The step after a commit that left `frames` in the WAL; `last_pass` is the last
    /// checkpoint's (generation, frames copied).
    fn after_commit(&mut self, frames: i32, last_pass: Option<(u64, i32)>) -> WalStep {
        // What this commit appended, if the WAL did not start over for it.
        let appended = if frames < self.frames {
            self.generation += 1;
            frames
        } else {
            frames - self.frames
        };
        self.frames = frames;
        if frames >= self.limits.restart_frames {
            return WalStep::Restart;
        }
        if frames < self.limits.checkpoint_frames {
            return WalStep::Nothing;
        }
        match last_pass {
            // A pass copies what the WAL held when it began, so the checkpointer gets no
            // closer than the last commit or two: once there, or within the tail, the
            // writer copies the rest.
            Some((generation, copied))
                if generation == self.generation
                    && frames - copied <= self.limits.tail_frames.max(2 * appended) =>
            {
                WalStep::CopyTail
            }
            _ => WalStep::RequestPass,
        }
    }
}

/// A checkpoint's (frames in the WAL, frames copied), or `None` after saying why it
/// failed. Busy is not a failure: a checkpoint was running, or a reader was in the way.
fn report(result: rusqlite::Result<(i32, i32)>) -> Option<(i32, i32)> {
    match result {
        Ok(counts) => Some(counts),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => None,
        Err(e) => {
            eprintln!("drover: sqlite checkpoint failed: {e}");
            None
        }
    }
}

impl Checkpointer {
    fn start(path: &Path) -> Result<Self> {
        let conn = connect(path, CHECKPOINTER_CACHE_KIB)?;
        let signal = Arc::new(CheckpointSignal::default());
        let waiting = signal.clone();
        let thread = std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || {
                while let Some(generation) = waiting.wait() {
                    // A failure (disk full, I/O) leaves the data in the WAL, where it is
                    // durable; the next request tries again.
                    let pass = conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE);
                    if let Some((_, copied)) = report(pass) {
                        // SQLite syncs the database file only in the checkpoint that
                        // reaches the end of the WAL: beside a busy writer, the writer's
                        // tail, which then waited for every page of the cycle's passes
                        // to reach the disk (10-25 ms, a stall of every commit behind
                        // it). Synced here, the tail's sync has only the tail to write.
                        if let Err(e) = sync_database_file(&conn) {
                            eprintln!("drover: cannot sync the database file: {e}");
                        }
                        waiting.record(generation, copied);
                    }
                }
            })
            .map_err(|e| StoreError::Backend(format!("cannot start the checkpointer: {e}")))?;
        Ok(Self {
            signal,
            thread: Some(thread),
        })
    }
}

/// Syncs the connection's main database file through the connection's own file handle
/// (opening and closing another descriptor of the file would drop this process's POSIX
/// locks on it, which SQLite's locking relies on).
fn sync_database_file(conn: &Connection) -> std::result::Result<(), String> {
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: the connection is open and used by this thread only; FILE_POINTER stores a
    // pointer to the main database's file, which the connection owns and keeps open.
    let rc = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast(),
        )
    };
    if rc != ffi::SQLITE_OK || file.is_null() {
        return Err(format!("no database file handle (SQLite code {rc})"));
    }
    // SAFETY: `file` is the open file found above; its methods are the VFS's own.
    let sync = unsafe { (*file).pMethods.as_ref() }
        .and_then(|methods| methods.xSync)
        .ok_or("the database file is not open")?;
    // SAFETY: as above; xSync only syncs the descriptor and takes no SQLite lock.
    match unsafe { sync(file, ffi::SQLITE_SYNC_NORMAL) } {
        ffi::SQLITE_OK => Ok(()),
        rc => Err(format!("SQLite code {rc}")),
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.signal.state.lock().unwrap().closing = true;
        self.signal.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(format!("sqlite: {e}"))
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path` and migrates it.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, WAL_LIMITS)
    }

    /// [`SqliteStore::open`] with other WAL limits (tests use small ones).
    pub fn open_with(path: &Path, limits: WalLimits) -> Result<Self> {
        let mut writer = connect(path, WRITER_CACHE_KIB)?;
        migrate(&writer)?;
        let checkpointer = Checkpointer::start(path)?;
        let mut policy = WalPolicy::new(limits);
        let signal = checkpointer.signal.clone();
        // Replaces SQLite's automatic checkpoint in the committing connection. It never
        // fails: the transaction is committed, and an error from here would tell its
        // caller otherwise. A checkpoint that cannot run now (another one is running, a
        // reader holds frames back) leaves the WAL as it is, durable, for a later one.
        writer
            .wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, frames| {
                match policy.after_commit(frames, signal.last_pass()) {
                    WalStep::Nothing => {}
                    WalStep::RequestPass => signal.request(policy.generation),
                    WalStep::CopyTail => {
                        if let Some((_, copied)) =
                            report(wal.checkpoint_v2(CheckpointMode::PASSIVE))
                        {
                            signal.record(policy.generation, copied);
                        }
                    }
                    WalStep::Restart => {
                        report(wal.checkpoint_v2(CheckpointMode::RESTART));
                    }
                }
                Ok(())
            }))
            .map_err(backend)?;
        Ok(Self {
            path: path.to_path_buf(),
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            collections: Catalog::default(),
            in_doubt: AtomicBool::new(false),
            _checkpointer: checkpointer,
        })
    }

    /// Runs `f` on a reader connection from the pool.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let pooled = self.readers.lock().unwrap().pop();
        let conn = match pooled {
            Some(c) => c,
            None => connect(&self.path, READER_CACHE_KIB)?,
        };
        let out = f(&conn);
        let mut idle = self.readers.lock().unwrap();
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
        out
    }
}

/// Page cache of the writer, in KiB. Enough for the pages a large batch dirties and the
/// index pages inserts keep touching (the end of each key's range), and no more: SQLite
/// scans the whole writer cache at the end of every transaction (pcache1TruncateUnsafe
/// took 6-8% of a 1M-document insert with 256 MiB). Readers have caches of their own.
const WRITER_CACHE_KIB: u32 = 32 * 1024;
/// Page cache of each reader, in KiB (readers also share the OS page cache).
const READER_CACHE_KIB: u32 = 32 * 1024;
/// The checkpointer reads WAL frames and writes database pages; it needs no cache.
const CHECKPOINTER_CACHE_KIB: u32 = 1024;

fn connect(path: &Path, cache_kib: u32) -> Result<Connection> {
    let vfs = wal_buffer::register().map_err(StoreError::Backend)?;
    let conn =
        Connection::open_with_flags_and_vfs(path, OpenFlags::default(), vfs).map_err(|e| {
            StoreError::Backend(format!(
                "cannot open SQLite database {}: {e}",
                path.display()
            ))
        })?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA temp_store = MEMORY;",
    )
    .map_err(backend)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(backend)?;
    conn.execute_batch(&format!(
        "PRAGMA cache_size = -{cache_kib}; PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}"
    ))
    .map_err(backend)?;
    Ok(conn)
}

/// Commits a transaction that changes nothing but still writes a WAL frame (page 1,
/// through the schema cookie's neighbour `user_version`, set to what it is). SQLite
/// writes each commit's frames from the end of the last good commit, so this overwrites
/// the frames of a commit that failed after reaching the file; once its sync succeeds,
/// WAL recovery can never take that commit.
///
/// It waits for locks briefly: the journal tries it again and again while the file
/// system refuses writes, and each try holds the writer.
fn settle_wal(conn: &Connection) -> Result<()> {
    conn.busy_timeout(SETTLE_BUSY_TIMEOUT).map_err(backend)?;
    let settled = conn
        .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
        .and_then(|version| {
            conn.execute_batch(&format!(
                "BEGIN IMMEDIATE; PRAGMA user_version = {version}; COMMIT;"
            ))
        })
        .map_err(|e| {
            // A failed COMMIT leaves the transaction open.
            let _ = conn.execute_batch("ROLLBACK");
            backend(e)
        });
    wal_buffer::take_sync_failure();
    conn.busy_timeout(BUSY_TIMEOUT).map_err(backend)?;
    settled
}

/// Applies `batch` in one transaction of `conn`; answers each write's version.
fn write_batch(
    conn: &mut Connection,
    batch: &[Write],
    collections: &[Arc<Collection>],
) -> Result<Vec<i64>> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    let versions = batch
        .iter()
        .zip(collections)
        .map(|(w, collection)| layout::apply(&mut SqliteRows(&tx), collection, w))
        .collect::<Result<Vec<_>>>()?;
    layout::count_batch(&mut SqliteRows(&tx), batch, &versions, collections)?;
    tx.commit().map_err(backend)?;
    Ok(versions)
}

/// How long a connection waits for another's lock (the `busy_timeout`).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`settle_wal`] waits for one.
const SETTLE_BUSY_TIMEOUT: Duration = Duration::from_millis(100);

fn migrate(conn: &Connection) -> Result<()> {
    let done = conn
        .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
        .map_err(backend)? as usize;
    if done > layout::MIGRATIONS.len() {
        return Err(StoreError::Backend(format!(
            "the database schema is version {done}, newer than this program's {}",
            layout::MIGRATIONS.len()
        )));
    }
    for (i, sql) in layout::MIGRATIONS.iter().enumerate().skip(done) {
        conn.execute_batch(&format!(
            "BEGIN; {sql}; PRAGMA user_version = {}; COMMIT;",
            i + 1
        ))
        .map_err(backend)?;
    }
    Ok(())
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        id: r.get(0)?,
        name: r.get(1)?,
        version: r.get(2)?,
        body: r.get(3)?,
    })
}

struct Reader<'a>(&'a Connection);

impl ReadConn for Reader<'_> {
    fn count(&mut self, sql: &str, params: &[Vec<u8>]) -> Result<usize> {
        let mut stmt = self.0.prepare_cached(sql).map_err(backend)?;
        let n: i64 = stmt
            .query_row(params_from_iter(params), |r| r.get(0))
            .map_err(backend)?;
        Ok(n as usize)
    }

    fn for_each_row(&mut self, sql: &str, params: &[Vec<u8>], each: EachRow<'_>) -> Result<()> {
        let mut stmt = self.0.prepare_cached(sql).map_err(backend)?;
        let mut rows = stmt.query(params_from_iter(params)).map_err(backend)?;
        while let Some(r) = rows.next().map_err(backend)? {
            each(row(r).map_err(backend)?)?;
        }
        Ok(())
    }
}

/// Values bound for `id, name, body, k0, u0, ...` (parameters ?1, ?2, ...).
fn row_values(
    layout: &Layout,
    collection: &str,
    id: &str,
    name: Option<&str>,
    body: &Body,
) -> Result<Vec<Sql>> {
    let text = layout::body_text(collection, id, body)?;
    let mut values = vec![
        Sql::Text(id.to_string()),
        name.map_or(Sql::Null, |n| Sql::Text(n.to_string())),
        Sql::Text(text),
    ];
    for (key, crossed) in layout.body_keys(body)? {
        values.push(Sql::Blob(key));
        values.push(Sql::Integer(i64::from(crossed)));
    }
    Ok(values)
}

fn unique_violation(e: &rusqlite::Error) -> Option<bool> {
    match e {
        rusqlite::Error::SqliteFailure(f, message) if f.code == ErrorCode::ConstraintViolation => {
            Some(message.as_deref().unwrap_or_default().ends_with(".name"))
        }
        _ => None,
    }
}

/// SQLite's row statements, on the writer's connection inside its transaction.
struct SqliteRows<'a>(&'a Connection);

impl SqliteRows<'_> {
    fn values(collection: &Collection, doc: &Stored<'_>) -> Result<Vec<Sql>> {
        row_values(
            &collection.layout,
            doc.collection,
            doc.id,
            doc.name,
            doc.body,
        )
    }

    /// Runs a statement that answers the new version, if it changed a row.
    fn versioned(
        &self,
        statement: &str,
        values: Vec<Sql>,
        doc: &Stored<'_>,
    ) -> Result<Option<i64>> {
        self.0
            .prepare_cached(statement)
            .and_then(|mut s| {
                s.query_row(params_from_iter(values), |r| r.get::<_, i64>(0))
                    .optional()
            })
            .map_err(|e| conflict(e, doc))
    }
}

/// A unique violation names what was taken; anything else is the database's failure.
fn conflict(e: rusqlite::Error, doc: &Stored<'_>) -> StoreError {
    match unique_violation(&e) {
        Some(on_name) => layout::taken(doc.collection, on_name, doc.id, doc.name),
        None => backend(e),
    }
}

impl RowWriter for SqliteRows<'_> {
    fn insert(&mut self, collection: &Collection, doc: &Stored<'_>) -> Result<()> {
        let values = Self::values(collection, doc)?;
        self.0
            .prepare_cached(&collection.sql.insert)
            .and_then(|mut s| s.execute(params_from_iter(values)))
            .map_err(|e| conflict(e, doc))
            .map(drop)
    }

    fn put(&mut self, collection: &Collection, doc: &Stored<'_>) -> Result<i64> {
        let values = Self::values(collection, doc)?;
        self.versioned(&collection.sql.put, values, doc)?
            .ok_or_else(|| StoreError::Backend("upsert answered no version".into()))
    }

    fn update(
        &mut self,
        collection: &Collection,
        doc: &Stored<'_>,
        expected: Option<i64>,
    ) -> Result<Option<i64>> {
        let mut values = Self::values(collection, doc)?;
        let statement = match expected {
            Some(v) => {
                values.push(Sql::Integer(v));
                &collection.sql.update_versioned
            }
            None => &collection.sql.update,
        };
        self.versioned(statement, values, doc)
    }

    fn delete(&mut self, collection: &Collection, id: &str, expected: Option<i64>) -> Result<u64> {
        let sql = &collection.sql;
        match expected {
            Some(v) => self
                .0
                .prepare_cached(&sql.delete_versioned)
                .and_then(|mut s| s.execute(rusqlite::params![id, v])),
            None => self
                .0
                .prepare_cached(&sql.delete)
                .and_then(|mut s| s.execute([id])),
        }
        .map(|n| n as u64)
        .map_err(backend)
    }

    fn version_of(&mut self, collection: &Collection, id: &str) -> Result<Option<i64>> {
        self.0
            .prepare_cached(&collection.sql.version_of)
            .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
            .map_err(backend)
    }

    fn add_to_count(&mut self, table: &str, delta: i64) -> Result<()> {
        self.0
            .prepare_cached(&layout::count_update_sql(Dialect::Sqlite))
            .and_then(|mut s| s.execute(rusqlite::params![table, delta]))
            .map(drop)
            .map_err(backend)
    }
}

impl DocumentStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn ensure_collection(&self, spec: &CollectionSpec) -> Result<()> {
        let mut conn = self.writer.lock().unwrap();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend)?;
        let existing: Vec<String> = tx
            .query_row(
                "SELECT paths FROM drover_collections WHERE name = ?1",
                [&spec.name],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(backend)?
            .map(|text| serde_json::from_str(&text).unwrap_or_default())
            .unwrap_or_default();
        let (layout, added) = Layout::new(spec, &existing)?;
        for statement in layout.schema_sql(&added, Dialect::Sqlite) {
            tx.execute_batch(&statement).map_err(backend)?;
        }
        if !added.is_empty() {
            backfill(&tx, &layout, &added)?;
        }
        tx.execute(
            "INSERT INTO drover_collections (name, paths) VALUES (?1, ?2)
             ON CONFLICT(name) DO UPDATE SET paths = excluded.paths",
            rusqlite::params![spec.name, layout.catalog_paths()],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)?;
        self.collections.insert(&spec.name, layout, Dialect::Sqlite);
        Ok(())
    }

    fn write(&self, batch: &[Write]) -> Result<Vec<i64>> {
        let collections = self.collections.for_batch(batch)?;
        let mut conn = self.writer.lock().unwrap();
        wal_buffer::take_sync_failure();
        match write_batch(&mut conn, batch, &collections) {
            // A commit overwrites the frames of any failed one before it: settled.
            Ok(versions) => {
                self.in_doubt.store(false, Ordering::Release);
                Ok(versions)
            }
            // The frames of a commit whose sync failed may be on disk, and WAL recovery
            // would take them after a restart: settled at once if another commit can be
            // made now, else in doubt until one can.
            Err(e) if wal_buffer::take_sync_failure() => match settle_wal(&conn) {
                Ok(()) => {
                    self.in_doubt.store(false, Ordering::Release);
                    Err(e)
                }
                Err(_) => {
                    self.in_doubt.store(true, Ordering::Release);
                    Err(StoreError::InDoubt(e.to_string()))
                }
            },
            Err(e) => Err(e),
        }
    }

    fn settle(&self) -> Result<()> {
        if !self.in_doubt.load(Ordering::Acquire) {
            return Ok(());
        }
        let conn = self.writer.lock().unwrap();
        settle_wal(&conn)?;
        self.in_doubt.store(false, Ordering::Release);
        Ok(())
    }

    fn find(&self, collection: &str, which: Find<'_>) -> Result<Option<Document>> {
        let table = &self.collections.get(collection)?.layout.table;
        let (sql, value) = which.sql(table, Dialect::Sqlite);
        self.read(|conn| {
            let found = conn
                .prepare_cached(&sql)
                .and_then(|mut s| {
                    s.query_row(rusqlite::params_from_iter(value), row)
                        .optional()
                })
                .map_err(backend)?;
            found.map(Row::into_document).transpose()
        })
    }

    fn list(&self, collection: &str, query: &ListQuery) -> Result<Page<Document>> {
        let layout = &self.collections.get(collection)?.layout;
        self.read(|conn| {
            // One read transaction: the count and the page come from the same snapshot.
            conn.execute_batch("BEGIN").map_err(backend)?;
            let out = pushdown::list(&mut Reader(conn), layout, Dialect::Sqlite, query);
            conn.execute_batch("COMMIT").map_err(backend)?;
            out
        })
    }

    fn visit_all(&self, collection: &str, visit: &mut dyn FnMut(&str, &str)) -> Result<()> {
        let table = &self.collections.get(collection)?.layout.table;
        self.read(|conn| {
            // One read transaction: one snapshot from the first document to the last.
            conn.execute_batch("BEGIN").map_err(backend)?;
            let visited = visit_rows(conn, table, visit);
            conn.execute_batch("COMMIT").map_err(backend)?;
            visited
        })
    }

    fn ping(&self) -> Result<()> {
        self.read(|conn| conn.query_row("SELECT 1", [], |_| Ok(())).map_err(backend))
    }

    fn maintain(&self) -> Result<()> {
        let conn = self.writer.lock().unwrap();
        conn.execute_batch("ANALYZE").map_err(backend)
    }

    fn describe(&self) -> Result<StoreInfo> {
        let version = self.read(|conn| {
            conn.query_row("SELECT sqlite_version()", [], |r| r.get::<_, String>(0))
                .map_err(backend)
        })?;
        Ok(StoreInfo {
            backend: "sqlite",
            host: None,
            port: None,
            database: self.path.display().to_string(),
            username: None,
            version,
        })
    }

    fn flush(&self) -> Result<()> {
        let conn = self.writer.lock().unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(backend)
    }
}

/// Hands each row of `table` to `visit` as it is read, in creation order.
fn visit_rows(conn: &Connection, table: &str, visit: &mut dyn FnMut(&str, &str)) -> Result<()> {
    let mut select = conn
        .prepare(&format!("SELECT id, body FROM {table} ORDER BY seq"))
        .map_err(backend)?;
    let mut rows = select.query([]).map_err(backend)?;
    let text = |row: &rusqlite::Row<'_>, column: usize| -> Result<String> {
        row.get::<_, String>(column).map_err(backend)
    };
    while let Some(row) = rows.next().map_err(backend)? {
        visit(&text(row, 0)?, &text(row, 1)?);
    }
    Ok(())
}

/// Computes the new key columns `added` for every stored document.
fn backfill(tx: &Connection, layout: &Layout, added: &[usize]) -> Result<()> {
    let table = &layout.table;
    let mut select = tx
        .prepare(&format!("SELECT seq, body FROM {table}"))
        .map_err(backend)?;
    let rows: Vec<(i64, String)> = select
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .and_then(|rows| rows.collect())
        .map_err(backend)?;
    for (seq, body) in rows {
        let body: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| StoreError::Backend(e.to_string()))?;
        let keys = layout.row_keys(&body);
        for &n in added {
            let (key, crossed) = &keys[n];
            tx.execute(
                &layout.backfill_sql(n, Dialect::Sqlite),
                rusqlite::params![key, crossed, seq],
            )
            .map_err(backend)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_domain::dates::WireDates;
    use drover_query::{Filter, Paging, Sort};
    use serde_json::json;

    /// Runs the planner's statements and keeps SQLite's plan for each.
    struct Explaining<'a> {
        conn: &'a Connection,
        plans: Vec<String>,
    }

    impl Explaining<'_> {
        fn explain(&mut self, sql: &str, params: &[Vec<u8>]) {
            let mut stmt = self
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap();
            let steps: Vec<String> = stmt
                .query_map(params_from_iter(params), |r| r.get::<_, String>(3))
                .unwrap()
                .map(|s| s.unwrap())
                .collect();
            self.plans.push(steps.join("; "));
        }
    }

    impl ReadConn for Explaining<'_> {
        fn count(&mut self, sql: &str, params: &[Vec<u8>]) -> Result<usize> {
            self.explain(sql, params);
            Reader(self.conn).count(sql, params)
        }

        fn for_each_row(&mut self, sql: &str, params: &[Vec<u8>], each: EachRow<'_>) -> Result<()> {
            self.explain(sql, params);
            Reader(self.conn).for_each_row(sql, params, each)
        }
    }

    /// The plans of the statements that answer `filter`, newest first, 50 at most.
    fn plans(store: &SqliteStore, filter: &str) -> Vec<String> {
        plans_sorted(store, filter, r#"{"date": -1}"#)
    }

    fn plans_sorted(store: &SqliteStore, filter: &str, sort: &str) -> Vec<String> {
        let query = ListQuery {
            filter: Filter::parse_str(filter, &WireDates::utc()).unwrap(),
            sort: Sort::parse_str(sort).unwrap(),
            paging: Paging::parse(Some("50"), None).unwrap(),
        };
        let layout = &store.collections.get("ev").unwrap().layout;
        store
            .read(|conn| {
                let mut explaining = Explaining {
                    conn,
                    plans: Vec::new(),
                };
                pushdown::list(&mut explaining, layout, Dialect::Sqlite, &query)?;
                Ok(explaining.plans)
            })
            .unwrap()
    }

    /// An event stream's resume: the page after an id, in id order, is a range of the
    /// id's index (the events collection indexes `id` for it).
    #[test]
    fn a_page_after_an_id_reads_a_range_of_its_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("d.db")).unwrap();
        let spec = CollectionSpec::new("ev")
            .index_newest_first(&["date"])
            .index(&["id"]);
        store.ensure_collection(&spec).unwrap();
        for i in 0..4 {
            let body = json!({"id": format!("e{i}"), "date": format!("2026-01-01 00:00:0{i} UTC")});
            store.insert("ev", &format!("e{i}"), None, body).unwrap();
        }
        let resume = plans_sorted(&store, r#"{"id": {"$gt": "e1"}}"#, r#"{"id": 1}"#);
        let page = resume.last().unwrap();
        assert!(
            page.contains("USING INDEX doc_ev_by_k0 (k0>?"),
            "{resume:?}"
        );
        assert!(
            !page.contains("TEMP B-TREE"),
            "sorted by the index: {resume:?}"
        );
        for plan in &resume {
            assert!(
                !plan.split("; ").any(|step| step == "SCAN doc_ev"),
                "{plan}"
            );
        }
    }

    #[test]
    fn queries_use_the_index_that_leaves_out_a_common_value_except_for_that_value() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("d.db")).unwrap();
        let spec = CollectionSpec::new("ev")
            .index_newest_first(&["date"])
            .index_newest_first_except(&["level", "date"], json!("INFO"));
        store.ensure_collection(&spec).unwrap();
        for (i, level) in ["INFO", "INFO", "ERROR", "INFO"].iter().enumerate() {
            let body = json!({"level": level, "date": format!("2026-01-01 00:00:0{i} UTC")});
            store.insert("ev", &format!("e{i}"), None, body).unwrap();
        }
        let partial = "USING INDEX doc_ev_by_k1_k0_desc_";
        let covering_partial = "USING COVERING INDEX doc_ev_by_k1_k0_desc_";
        let rare = plans(&store, r#"{"level": "ERROR"}"#);
        assert!(rare[1].contains(covering_partial), "count: {rare:?}");
        assert!(rare[2].contains(partial), "page: {rare:?}");
        let others = plans(&store, r#"{"level": {"$ne": "INFO"}}"#);
        assert!(others[1].contains(covering_partial), "count: {others:?}");
        // The common value: counted as all minus the others, its page read newest first.
        let common = plans(&store, r#"{"level": "INFO"}"#);
        assert!(common[1].contains("drover_counts"), "{common:?}");
        assert!(common[2].contains(covering_partial), "{common:?}");
        assert!(
            common[3].contains("USING INDEX doc_ev_by_k0_desc"),
            "{common:?}"
        );
        // No statement reads the whole table.
        for plan in rare.iter().chain(&others).chain(&common) {
            assert!(
                !plan.split("; ").any(|step| step == "SCAN doc_ev"),
                "{plan}"
            );
        }
    }
}

#[cfg(test)]
mod wal_policy_tests {
    use super::*;

    /// Frames in the WAL of the database `conn` has open (a PASSIVE checkpoint reports them).
    fn wal_frames(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
            .unwrap()
    }

    #[test]
    fn settling_commits_a_frame_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drover.db");
        let conn = connect(&path, CHECKPOINTER_CACHE_KIB).unwrap();
        migrate(&conn).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        // A reader holds a snapshot, so that the checkpoint cannot start the WAL over.
        let reader = connect(&path, CHECKPOINTER_CACHE_KIB).unwrap();
        reader
            .execute_batch("BEGIN; SELECT count(*) FROM drover_collections;")
            .unwrap();
        let before = wal_frames(&conn);
        settle_wal(&conn).unwrap();
        assert!(
            wal_frames(&conn) > before,
            "the settling commit wrote a frame"
        );
        let after: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(after, version);
    }

    #[test]
    fn the_checkpointer_syncs_the_database_file_through_its_own_handle() {
        let dir = tempfile::tempdir().unwrap();
        let conn = connect(&dir.path().join("drover.db"), CHECKPOINTER_CACHE_KIB).unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1)")
            .unwrap();
        sync_database_file(&conn).unwrap();
        // A connection whose main database is in memory has no file to sync.
        let memory = Connection::open_in_memory().unwrap();
        assert!(sync_database_file(&memory).is_err());
    }

    const LIMITS: WalLimits = WalLimits {
        checkpoint_frames: 1000,
        tail_frames: 50,
        restart_frames: 10_000,
    };

    /// A policy that has seen commits leave these frame counts, in order.
    fn after(commits: &[i32]) -> WalPolicy {
        let mut policy = WalPolicy::new(LIMITS);
        for &frames in commits {
            policy.after_commit(frames, None);
        }
        policy
    }

    #[test]
    fn below_the_checkpoint_size_nothing_is_done() {
        assert_eq!(after(&[]).after_commit(999, None), WalStep::Nothing);
    }

    #[test]
    fn past_the_checkpoint_size_a_pass_is_requested_until_one_has_run() {
        assert_eq!(after(&[900]).after_commit(1000, None), WalStep::RequestPass);
        // A pass that left more than the tail and more than the last two commits.
        assert_eq!(
            after(&[900, 1000]).after_commit(1100, Some((0, 850))),
            WalStep::RequestPass
        );
    }

    #[test]
    fn the_writer_copies_what_a_pass_left_within_the_tail() {
        assert_eq!(
            after(&[1000]).after_commit(1010, Some((0, 960))),
            WalStep::CopyTail
        );
    }

    #[test]
    fn the_writer_copies_what_a_pass_left_behind_its_last_two_commits() {
        // Commits of 300 frames: a pass that began before the last one is as close as
        // passes get, though 300 frames are far more than the tail.
        assert_eq!(
            after(&[900, 1200]).after_commit(1500, Some((0, 1200))),
            WalStep::CopyTail
        );
        assert_eq!(
            after(&[900, 1200]).after_commit(1500, Some((0, 900))),
            WalStep::CopyTail
        );
        assert_eq!(
            after(&[900, 1200]).after_commit(1500, Some((0, 899))),
            WalStep::RequestPass
        );
    }

    #[test]
    fn a_pass_over_the_wal_before_it_started_over_counts_for_nothing() {
        let mut policy = after(&[1200, 1300]);
        // The WAL started over: 1,290 frames now are not the 1,290 copied before.
        assert_eq!(policy.after_commit(40, Some((0, 1290))), WalStep::Nothing);
        assert_eq!(policy.generation, 1);
        let mut at = 40;
        while at < 1300 {
            at += 10;
            let step = policy.after_commit(at, Some((0, 1290)));
            assert_ne!(step, WalStep::CopyTail, "at {at} frames");
        }
        assert_eq!(
            policy.after_commit(at + 10, Some((1, 1290))),
            WalStep::CopyTail
        );
    }

    #[test]
    fn at_the_restart_size_the_writer_copies_everything_itself() {
        assert_eq!(
            after(&[9_000]).after_commit(10_000, Some((0, 9_000))),
            WalStep::Restart
        );
    }
}
