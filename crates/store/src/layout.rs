//! How a collection is laid out in a table, shared by both backends.
//!
//! Table `doc_<collection>`: `seq` (creation order), `id` (unique), `name` (unique when
//! set), `version`, `body`, and for every indexed path number n two columns kept by the
//! store on every write: `k<n>`, the order key of the path's first value
//! ([`drover_query::Path::first_value`], [`drover_query::order::key`]), and `u<n>`, 1
//! when resolving the path crossed an array. When `u<n>` is 0 the path resolves to at
//! most that one value, so conditions on `k<n>` decide the filter exactly; rows with
//! `u<n>` = 1 are re-checked by the evaluator.
//!
//! What a write means (versions, a miss, a taken id or name) is decided once here
//! ([`apply`]); each backend only runs its row statements ([`RowWriter`]).
//!
//! `drover_counts` holds each table's number of documents, updated in the transaction
//! of every batch (a put answering version 1 created its document), so an unfiltered
//! list takes its `totalCount` from there instead of counting a million rows.
//! A newest-first index (`CollectionSpec::index_newest_first`) is `(k<n> DESC, seq)`:
//! a descending sort whose ties keep creation order then reads just the page. The
//! `_except` form makes it partial, leaving out rows whose first path holds one common
//! value (`WHERE k<n> != X'..'`), so those writes skip the index; `pushdown.rs` repeats that
//! condition word for word in a query whose own condition implies it (both databases
//! must see it to use the index) and counts the common value as the total minus the
//! rows the index holds.

use drover_query::Path;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use drover_query::order;
use serde_json::Value;

use crate::body::{self, PathTree};
use crate::pushdown::Dialect;
use crate::{Body, CollectionSpec, Result, StoreError, Write};

/// The collections a store has been told about (by `ensure_collection`), by name.
#[derive(Default)]
pub(crate) struct Catalog(RwLock<HashMap<String, Arc<Collection>>>);

impl Catalog {
    pub fn get(&self, name: &str) -> Result<Arc<Collection>> {
        self.0
            .read()
            .unwrap()
            .get(name)
            .cloned()
            .ok_or_else(|| StoreError::UnknownCollection(name.into()))
    }

    /// The collections each write of `batch` goes to.
    pub fn for_batch(&self, batch: &[crate::Write]) -> Result<Vec<Arc<Collection>>> {
        batch.iter().map(|w| self.get(w.collection())).collect()
    }

    pub fn insert(&self, name: &str, layout: Layout, dialect: Dialect) {
        let sql = WriteSql::new(&layout, dialect);
        self.0
            .write()
            .unwrap()
            .insert(name.to_string(), Arc::new(Collection { layout, sql }));
    }

    /// The table of every known collection.
    pub fn tables(&self) -> Vec<String> {
        self.0
            .read()
            .unwrap()
            .values()
            .map(|c| c.layout.table.clone())
            .collect()
    }
}

/// A collection as a backend knows it: its layout and its write statements.
#[derive(Debug, Clone)]
pub(crate) struct Collection {
    pub layout: Layout,
    pub sql: WriteSql,
}

/// The statements that write one collection, built once per layout. Parameters:
/// 1 id, 2 name, 3 body, then `k<n>`, `u<n>` as 4 + 2n and 5 + 2n; the versioned
/// update takes the expected version last.
#[derive(Debug, Clone)]
pub(crate) struct WriteSql {
    pub insert: String,
    pub put: String,
    pub update: String,
    pub update_versioned: String,
    pub delete: String,
    pub delete_versioned: String,
    pub version_of: String,
}

impl WriteSql {
    pub fn new(layout: &Layout, dialect: Dialect) -> Self {
        let table = &layout.table;
        let n = layout.paths.len();
        let p = |i: usize| dialect.placeholder(i);
        let body = dialect.json_param(3);
        let columns = format!("id, name, version, body{}", layout.key_column_list());
        let keys: String = (0..n)
            .map(|c| format!(", {}, {}", p(4 + 2 * c), p(5 + 2 * c)))
            .collect();
        let values = format!("VALUES ({}, {}, 1, {body}{keys})", p(1), p(2));
        let from_excluded: String = (0..n)
            .map(|c| format!(", k{c} = excluded.k{c}, u{c} = excluded.u{c}"))
            .collect();
        let from_params: String = (0..n)
            .map(|c| format!(", k{c} = {}, u{c} = {}", p(4 + 2 * c), p(5 + 2 * c)))
            .collect();
        let update = format!(
            "UPDATE {table} SET name = {}, body = {body}, version = version + 1{from_params} WHERE id = {}",
            p(2),
            p(1)
        );
        Self {
            insert: format!("INSERT INTO {table} ({columns}) {values}"),
            put: format!(
                "INSERT INTO {table} ({columns}) {values} ON CONFLICT (id) DO UPDATE SET \
                 name = excluded.name, body = excluded.body, version = {table}.version + 1{from_excluded} \
                 RETURNING version"
            ),
            update_versioned: format!("{update} AND version = {} RETURNING version", p(4 + 2 * n)),
            update: format!("{update} RETURNING version"),
            delete: format!("DELETE FROM {table} WHERE id = {}", p(1)),
            delete_versioned: format!(
                "DELETE FROM {table} WHERE id = {} AND version = {}",
                p(1),
                p(2)
            ),
            version_of: format!("SELECT version FROM {table} WHERE id = {}", p(1)),
        }
    }
}

/// A newest-first index as column numbers.
#[derive(Debug, Clone)]
pub(crate) struct NewestFirst {
    pub columns: Vec<usize>,
    /// The order key of the value on the first column whose rows the index leaves out.
    pub leaves_out: Option<Vec<u8>>,
}

impl NewestFirst {
    /// The condition rows of a partial index meet (`k<n> != <key>`, as a literal, so
    /// that a query's condition can repeat it word for word: both databases then know
    /// the index applies).
    pub fn predicate(&self, dialect: Dialect) -> Option<String> {
        let key = self.leaves_out.as_ref()?;
        let hex: String = key.iter().map(|b| format!("{b:02X}")).collect();
        let col = self.columns[0];
        Some(match dialect {
            Dialect::Sqlite => format!("k{col} != X'{hex}'"),
            Dialect::Postgres => format!("k{col} <> '\\x{hex}'::bytea"),
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub table: String,
    /// Indexed paths; the position is the column number n of `k<n>` / `u<n>`.
    pub paths: Vec<Path>,
    /// Each index as the column numbers it covers, in order.
    pub indexes: Vec<Vec<usize>>,
    /// Indexes whose last column descends: `(k<a>, ..., k<z> DESC, seq)`.
    pub newest_first: Vec<NewestFirst>,
    /// `paths` as a tree, to read them out of a body's text.
    tree: PathTree,
    /// When every path is one member name (the common case): those names, read out of a
    /// body's text without building even a pruned value.
    members: Option<body::MemberNames>,
}

impl Layout {
    /// The layout for `spec`, keeping the column numbers of `existing` paths (from the
    /// catalog) and appending new ones. Also answers which column numbers are new.
    pub fn new(spec: &CollectionSpec, existing: &[String]) -> Result<(Layout, Vec<usize>)> {
        validate_collection_name(&spec.name)?;
        let mut names: Vec<String> = existing.to_vec();
        let mut added = Vec::new();
        let mut indexes = Vec::new();
        let newest_first_paths = spec.newest_first.iter().map(|i| &i.paths);
        for index in spec.indexes.iter().chain(newest_first_paths) {
            if index.is_empty() {
                return Err(StoreError::Invalid(format!(
                    "collection {}: an index needs at least one path",
                    spec.name
                )));
            }
            let mut columns = Vec::new();
            for path in index {
                let n = match names.iter().position(|p| p == path) {
                    Some(n) => n,
                    None => {
                        names.push(path.clone());
                        added.push(names.len() - 1);
                        names.len() - 1
                    }
                };
                columns.push(n);
            }
            indexes.push(columns);
        }
        let paths: Vec<Path> = names
            .iter()
            .map(|p| Path::parse(p, "index").map_err(|e| StoreError::Invalid(e.message)))
            .collect::<Result<_>>()?;
        // The newest-first indexes were registered last, in the same loop.
        let newest_first = indexes
            .split_off(spec.indexes.len())
            .into_iter()
            .zip(&spec.newest_first)
            .map(|(columns, index)| NewestFirst {
                columns,
                leaves_out: index.leaves_out.as_ref().map(|v| order::key(Some(v))),
            })
            .collect();
        Ok((
            Layout {
                table: format!("doc_{}", spec.name),
                tree: PathTree::new(&paths),
                members: paths
                    .iter()
                    .map(|p| match p.segments() {
                        [one] => Some(one.name.to_string()),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .map(body::MemberNames::new),
                paths,
                indexes,
                newest_first,
            },
            added,
        ))
    }

    pub fn column_of(&self, path: &Path) -> Option<usize> {
        self.paths.iter().position(|p| p == path)
    }

    /// The (`k<n>`, `u<n>`) values of `body` for every indexed path.
    pub fn row_keys(&self, body: &Value) -> Vec<(Vec<u8>, i16)> {
        self.paths
            .iter()
            .map(|path| {
                let first = path.first_value(body);
                (order::key(first.value), i16::from(first.crossed_array))
            })
            .collect()
    }

    /// The (`k<n>`, `u<n>`) values of a body being written.
    pub fn body_keys(&self, body: &Body) -> Result<Vec<(Vec<u8>, i16)>> {
        if self.paths.is_empty() {
            return Ok(Vec::new());
        }
        if let (Some(names), Some(text)) = (&self.members, body.as_text())
            && let Some(values) = body::members(text, names)
        {
            // A path of one member resolves to the member's value; it crosses an array
            // only when that value is one.
            return Ok(values
                .iter()
                .map(|v| {
                    let crossed = v.as_ref().is_some_and(Value::is_array);
                    (order::key(v.as_ref()), i16::from(crossed))
                })
                .collect());
        }
        let part = body
            .indexed_part(&self.tree)
            .ok_or_else(|| StoreError::Invalid("a text body that is not JSON".into()))?;
        Ok(self.row_keys(&part))
    }

    /// `, k0, u0, k1, u1...` for column lists.
    pub fn key_column_list(&self) -> String {
        (0..self.paths.len())
            .map(|n| format!(", k{n}, u{n}"))
            .collect()
    }

    /// The DDL that creates the table or brings it up to this layout; `added` are the key
    /// columns new to it (their values must then be backfilled).
    pub fn schema_sql(&self, added: &[usize], dialect: Dialect) -> Vec<String> {
        let table = &self.table;
        let (seq, integer, body, blob, one, small) = match dialect {
            Dialect::Sqlite => (
                "INTEGER PRIMARY KEY",
                "INTEGER",
                "TEXT",
                "BLOB",
                "X'01'",
                "INTEGER",
            ),
            Dialect::Postgres => (
                "BIGSERIAL PRIMARY KEY",
                "BIGINT",
                "JSONB",
                "BYTEA",
                "'\\x01'::bytea",
                "SMALLINT",
            ),
        };
        let mut sql = vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {table} (seq {seq}, id TEXT NOT NULL UNIQUE, name TEXT, \
                 version {integer} NOT NULL, body {body} NOT NULL)"
            ),
            // Partial: most documents have no name and need no index entry.
            format!(
                "CREATE UNIQUE INDEX IF NOT EXISTS {table}_name ON {table} (name) WHERE name IS NOT NULL"
            ),
        ];
        for n in added {
            // The default is the key of a missing value; the backfill sets the real one.
            sql.push(format!(
                "ALTER TABLE {table} ADD COLUMN k{n} {blob} NOT NULL DEFAULT {one}"
            ));
            sql.push(format!(
                "ALTER TABLE {table} ADD COLUMN u{n} {small} NOT NULL DEFAULT 0"
            ));
            sql.push(format!(
                "CREATE INDEX IF NOT EXISTS {table}_u{n} ON {table} (u{n}) WHERE u{n} = 1"
            ));
        }
        for index in &self.indexes {
            let columns: Vec<String> = index.iter().map(|n| format!("k{n}")).collect();
            sql.push(format!(
                "CREATE INDEX IF NOT EXISTS {} ON {table} ({})",
                self.index_name(index),
                columns.join(", ")
            ));
        }
        for index in &self.newest_first {
            let mut columns: Vec<String> = index.columns.iter().map(|n| format!("k{n}")).collect();
            if let Some(last) = columns.last_mut() {
                last.push_str(" DESC");
            }
            let full = format!("{}_desc", self.index_name(&index.columns));
            let (name, condition) = match index.predicate(dialect) {
                Some(predicate) => {
                    // A database from before the index left the value out has the full
                    // one. (A partial index a spec stops declaring stays; none has yet.)
                    sql.push(format!("DROP INDEX IF EXISTS {full}"));
                    // Named after what it leaves out: a changed value makes a new index.
                    let name = format!("{full}_{:016x}", fnv1a(predicate.as_bytes()));
                    (name, format!(" WHERE {predicate}"))
                }
                None => (full, String::new()),
            };
            sql.push(format!(
                "CREATE INDEX IF NOT EXISTS {name} ON {table} ({}, seq){condition}",
                columns.join(", ")
            ));
        }
        // The document count starts from the rows there are (once per table).
        sql.push(format!(
            "INSERT INTO drover_counts (tbl, documents) SELECT '{table}', COUNT(*) FROM {table} \
             WHERE 1=1 ON CONFLICT (tbl) DO NOTHING"
        ));
        sql
    }

    /// How many documents the table holds, from `drover_counts`.
    pub fn count_sql(&self) -> String {
        format!(
            "SELECT documents FROM drover_counts WHERE tbl = '{}'",
            self.table
        )
    }

    /// One INSERT of `rows` documents (parameters as for `WriteSql::insert`, row after row).
    pub fn insert_rows_sql(&self, rows: usize, dialect: Dialect) -> String {
        let per_row = 3 + 2 * self.paths.len();
        let values: Vec<String> = (0..rows)
            .map(|r| {
                let base = r * per_row;
                let mut v = vec![
                    dialect.placeholder(base + 1),
                    dialect.placeholder(base + 2),
                    "1".to_string(),
                    dialect.json_param(base + 3),
                ];
                v.extend((0..2 * self.paths.len()).map(|k| dialect.placeholder(base + 4 + k)));
                format!("({})", v.join(", "))
            })
            .collect();
        format!(
            "INSERT INTO {} (id, name, version, body{}) VALUES {}",
            self.table,
            self.key_column_list(),
            values.join(", ")
        )
    }

    /// The statement that sets key column `n` of the row `seq` (parameters: key, crossed, seq).
    pub fn backfill_sql(&self, n: usize, dialect: Dialect) -> String {
        let p = |i| dialect.placeholder(i);
        format!(
            "UPDATE {} SET k{n} = {}, u{n} = {} WHERE seq = {}",
            self.table,
            p(1),
            p(2),
            p(3)
        )
    }

    /// The catalog's record of the indexed paths, in column order.
    pub fn catalog_paths(&self) -> String {
        let paths: Vec<&str> = self.paths.iter().map(|p| p.as_str()).collect();
        serde_json::to_string(&paths).unwrap_or_default()
    }

    /// SQL index names are derived from the columns they cover.
    pub fn index_name(&self, columns: &[usize]) -> String {
        let cols: Vec<String> = columns.iter().map(|n| format!("k{n}")).collect();
        format!("{}_by_{}", self.table, cols.join("_"))
    }
}

/// FNV-1a: a short name for an index's condition, the same in every build.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The table of document counts (a migration of each backend creates it).
pub(crate) const COUNTS_TABLE: &str =
    "CREATE TABLE drover_counts (tbl TEXT PRIMARY KEY, documents BIGINT NOT NULL)";

/// Schema migrations of the store's own tables, applied in order by both backends
/// (SQLite records how many ran in `PRAGMA user_version`, PostgreSQL in
/// `drover_schema`). Collection tables are made by `ensure_collection`.
pub(crate) const MIGRATIONS: &[&str] = &[
    "CREATE TABLE drover_collections (
        name TEXT PRIMARY KEY,
        paths TEXT NOT NULL -- JSON array: the indexed path of key column n at position n
    )",
    COUNTS_TABLE,
];

/// Adds `delta` to a table's count: parameters table, delta.
pub(crate) fn count_update_sql(dialect: Dialect) -> String {
    format!(
        "UPDATE drover_counts SET documents = documents + {} WHERE tbl = {}",
        dialect.placeholder(2),
        dialect.placeholder(1)
    )
}

/// What a batch did to each table's number of documents, given each write's resulting
/// version (a put that answers version 1 created its document).
fn count_changes(
    batch: &[crate::Write],
    versions: &[i64],
    collections: &[Arc<Collection>],
) -> Vec<(String, i64)> {
    let mut changes: Vec<(String, i64)> = Vec::new();
    for ((write, version), collection) in batch.iter().zip(versions).zip(collections) {
        let delta = match write {
            crate::Write::Insert { .. } => 1,
            crate::Write::Put { .. } if *version == 1 => 1,
            crate::Write::Delete { .. } => -1,
            _ => 0,
        };
        if delta == 0 {
            continue;
        }
        let table = &collection.layout.table;
        match changes.iter_mut().find(|(t, _)| t == table) {
            Some((_, total)) => *total += delta,
            None => changes.push((table.clone(), delta)),
        }
    }
    changes
}

/// Collection names become table names: only `[a-z][a-z0-9_]*`, at most 48 characters.
pub(crate) fn validate_collection_name(name: &str) -> Result<()> {
    let ok = name.len() <= 48
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "invalid collection name '{name}': use lower-case letters, digits and _"
        )))
    }
}

/// The JSON text of a body, refusing what one of the backends could not store.
pub(crate) fn body_text(collection: &str, id: &str, body: &Body) -> Result<String> {
    if id.is_empty() {
        return Err(StoreError::Invalid(format!(
            "a document of {collection} needs a non-empty id"
        )));
    }
    let text = body
        .text()
        .map_err(|e| StoreError::Invalid(e.to_string()))?
        .into_owned();
    // PostgreSQL's jsonb cannot hold U+0000; refuse it everywhere so both backends agree.
    if text.contains("\\u0000") {
        return Err(StoreError::Invalid(format!(
            "document '{id}' of {collection} contains the character U+0000, which cannot be stored"
        )));
    }
    Ok(text)
}

/// The message of a unique-constraint failure, worded for the client.
pub(crate) fn taken(collection: &str, on_name: bool, id: &str, name: Option<&str>) -> StoreError {
    if on_name {
        StoreError::Conflict(format!(
            "the name '{}' is already taken in {collection}",
            name.unwrap_or_default()
        ))
    } else {
        StoreError::Conflict(format!(
            "a document with id '{id}' already exists in {collection}"
        ))
    }
}

/// The error for a change that matched no row: missing document or stale version.
/// The document one insert, put or update stores.
pub(crate) struct Stored<'a> {
    pub collection: &'a str,
    pub id: &'a str,
    pub name: Option<&'a str>,
    pub body: &'a Body,
}

impl<'a> Stored<'a> {
    /// The document `write` stores; `None` for a delete.
    fn of(write: &'a Write) -> Option<Self> {
        match write {
            Write::Insert {
                collection,
                id,
                name,
                body,
            }
            | Write::Put {
                collection,
                id,
                name,
                body,
            }
            | Write::Update {
                collection,
                id,
                name,
                body,
                ..
            } => Some(Stored {
                collection,
                id,
                name: name.as_deref(),
                body,
            }),
            Write::Delete { .. } => None,
        }
    }
}

/// One backend's row statements, inside a write transaction. [`apply`] gives each kind
/// of [`Write`] its meaning (versions, what a miss means) once for both backends.
pub(crate) trait RowWriter {
    /// Inserts a new row; a taken id or name is a conflict.
    fn insert(&mut self, collection: &Collection, doc: &Stored<'_>) -> Result<()>;
    /// Inserts or replaces the row; answers its new version.
    fn put(&mut self, collection: &Collection, doc: &Stored<'_>) -> Result<i64>;
    /// Replaces the row (only at version `expected`, if given); answers its new version,
    /// or `None` when no row matched.
    fn update(
        &mut self,
        collection: &Collection,
        doc: &Stored<'_>,
        expected: Option<i64>,
    ) -> Result<Option<i64>>;
    /// Deletes the row (only at version `expected`, if given); answers how many went.
    fn delete(&mut self, collection: &Collection, id: &str, expected: Option<i64>) -> Result<u64>;
    /// The stored version of a row, if there is one.
    fn version_of(&mut self, collection: &Collection, id: &str) -> Result<Option<i64>>;
    /// Adds `delta` to the count of `table`'s documents in `drover_counts`.
    fn add_to_count(&mut self, table: &str, delta: i64) -> Result<()>;
}

/// Keeps `drover_counts` right after a batch, given each write's resulting version.
pub(crate) fn count_batch(
    rows: &mut impl RowWriter,
    batch: &[Write],
    versions: &[i64],
    collections: &[Arc<Collection>],
) -> Result<()> {
    for (table, delta) in count_changes(batch, versions, collections) {
        rows.add_to_count(&table, delta)?;
    }
    Ok(())
}

/// Applies one write through a backend's row statements; answers the resulting version
/// (0 for a delete).
pub(crate) fn apply(rows: &mut impl RowWriter, target: &Collection, write: &Write) -> Result<i64> {
    // A write that matched no row: missing, or changed meanwhile.
    let miss = |rows: &mut _, collection, id, expected| -> Result<i64> {
        let current = RowWriter::version_of(rows, target, id)?;
        Err(missed(collection, id, expected, current))
    };
    match (write, Stored::of(write)) {
        (Write::Insert { .. }, Some(doc)) => rows.insert(target, &doc).map(|()| 1),
        (Write::Put { .. }, Some(doc)) => rows.put(target, &doc),
        (
            Write::Update {
                expected_version, ..
            },
            Some(doc),
        ) => match rows.update(target, &doc, *expected_version)? {
            Some(version) => Ok(version),
            None => miss(rows, doc.collection, doc.id, *expected_version),
        },
        (
            Write::Delete {
                collection,
                id,
                expected_version,
            },
            _,
        ) => match rows.delete(target, id, *expected_version)? {
            0 => miss(rows, collection, id, *expected_version),
            _ => Ok(0),
        },
        (_, None) => unreachable!("every write but a delete stores a document"),
    }
}

pub(crate) fn missed(
    collection: &str,
    id: &str,
    expected: Option<i64>,
    current: Option<i64>,
) -> StoreError {
    match (current, expected) {
        (Some(current), Some(expected)) => StoreError::Conflict(format!(
            "document '{id}' of {collection} is at version {current}, not {expected}: \
             it was changed meanwhile; read it again and retry"
        )),
        _ => StoreError::NotFound {
            collection: collection.into(),
            id: id.into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout(paths: &[&str]) -> Layout {
        let mut spec = CollectionSpec::new("c");
        for path in paths {
            spec = spec.index(&[path]);
        }
        Layout::new(&spec, &[]).unwrap().0
    }

    proptest! {
        /// A body written as text gets the keys it would get as a value, whether its
        /// paths are all single members (read by `body::members`) or not (`body::select`).
        #[test]
        fn text_bodies_are_indexed_like_values(doc in drover_query::testing::document()) {
            let text = Body::serialize(&doc).unwrap();
            let value = Body::from(doc.clone());
            for paths in [&["a", "b", "n", "r", "z"][..], &["a", "b.c", "r.x", "r.0", "n"][..]] {
                let layout = layout(paths);
                prop_assert_eq!(layout.body_keys(&text).unwrap(), layout.body_keys(&value).unwrap());
            }
        }
    }

    #[test]
    fn repeated_and_escaped_members_read_like_a_parsed_value() {
        let layout = layout(&["a", "b"]);
        for text in [
            r#"{"a": 1, "b": [2], "a": "x"}"#,
            r#"{"\u0061": 1, "b": 2}"#,
            // Both found, then repeated: past a nested member of that name, or escaped.
            r#"{"a": 1, "b": 2, "c": {"a": 3}, "a": 4}"#,
            r#"{"b": 1, "a": 2, "c": "x", "\u0061": 5}"#,
            "[1]",
        ] {
            let parsed: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                layout.body_keys(&Body::unchecked_text(text)).ok(),
                Some(layout.row_keys(&parsed)),
                "{text}"
            );
        }
    }
}
