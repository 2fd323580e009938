//! Turning a [`ListQuery`] into SQL over the key columns, and running it.
//!
//! Each filter condition on an indexed path becomes a condition on that path's key
//! column `k<n>`. Order keys make this exact (see `drover_query::order`): equality is key
//! equality, `$lt`.. are key ranges inside the literal's kind, date literals are ranges
//! of instants. Such a condition is exact for rows whose `u<n>` is 0.
//!
//! Three ways to answer, from fastest:
//! 1. every condition is on an indexed path and no stored row of those paths crossed an
//!    array: SQL filters, counts, sorts (when the sort paths are indexed) and pages;
//! 2. otherwise SQL narrows the rows down to a superset and the evaluator decides:
//!    conditions it cannot decide become true (or, for equality with plain strings, a
//!    search of the body's text), and where some row crossed an array on an indexed
//!    path, such rows pass that path's conditions;
//! 3. sorting on a path with no index is done in Rust after filtering.
//!
//! Whatever the way, the answer is the reference answer of `ListQuery::run` over the
//! collection in creation (`seq`) order; the differential test checks it.

use std::collections::BTreeSet;

use drover_query::order::{Kind, date_prefix, key};
use drover_query::{Cond, Direction, Filter, ListQuery, Literal, Page};

use crate::layout::Layout;
use crate::{Document, Result, StoreError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    pub fn placeholder(self, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }

    fn no_limit(self) -> &'static str {
        match self {
            Dialect::Sqlite => "-1",
            Dialect::Postgres => "ALL",
        }
    }

    /// Parameter `n`, which carries JSON text, as a body value.
    pub fn json_param(self, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}::text::jsonb"),
        }
    }

    pub fn body(self) -> &'static str {
        match self {
            Dialect::Sqlite => "body",
            Dialect::Postgres => "body::text",
        }
    }
}

/// A raw row as the backends read it.
pub(crate) struct Row {
    pub id: String,
    pub name: Option<String>,
    pub version: i64,
    pub body: String,
}

impl Row {
    pub fn into_document(self) -> Result<Document> {
        let body = serde_json::from_str(&self.body).map_err(|e| {
            StoreError::Backend(format!("stored document '{}' is not JSON: {e}", self.id))
        })?;
        Ok(Document {
            id: self.id,
            name: self.name,
            version: self.version,
            body,
        })
    }
}

/// What is done with each row a read finds; an error stops the read.
pub(crate) type EachRow<'a> = &'a mut dyn FnMut(Row) -> Result<()>;

/// The read operations a backend offers to the planner (within one snapshot).
pub(crate) trait ReadConn {
    fn count(&mut self, sql: &str, params: &[Vec<u8>]) -> Result<usize>;
    fn for_each_row(&mut self, sql: &str, params: &[Vec<u8>], each: EachRow<'_>) -> Result<()>;
}

/// A condition over key columns.
#[derive(Debug, Clone, PartialEq)]
enum SqlCond {
    True,
    False,
    And(Vec<SqlCond>),
    Or(Vec<SqlCond>),
    Not(Box<SqlCond>),
    In(usize, Vec<Vec<u8>>),
    /// `lo` and `hi` bounds of `k<n>`, each with whether it is inclusive.
    Range(usize, Option<(Vec<u8>, bool)>, Option<(Vec<u8>, bool)>),
    /// `u<n> = 1`
    CrossedArray(usize),
    /// The body's JSON text contains one of these strings.
    BodyContains(Vec<String>),
}

fn and(parts: Vec<SqlCond>) -> SqlCond {
    let mut kept = Vec::new();
    for p in parts {
        match p {
            SqlCond::True => {}
            SqlCond::False => return SqlCond::False,
            p => kept.push(p),
        }
    }
    match kept.len() {
        0 => SqlCond::True,
        1 => kept.pop().unwrap(),
        _ => SqlCond::And(kept),
    }
}

fn or(parts: Vec<SqlCond>) -> SqlCond {
    let mut kept = Vec::new();
    for p in parts {
        match p {
            SqlCond::False => {}
            SqlCond::True => return SqlCond::True,
            p => kept.push(p),
        }
    }
    match kept.len() {
        0 => SqlCond::False,
        1 => kept.pop().unwrap(),
        _ => SqlCond::Or(kept),
    }
}

fn not(c: SqlCond) -> SqlCond {
    match c {
        SqlCond::True => SqlCond::False,
        SqlCond::False => SqlCond::True,
        c => SqlCond::Not(Box::new(c)),
    }
}

/// Every key of `kind` is in `[tag, tag + 1)`.
fn kind_range(col: usize, kind: Kind) -> SqlCond {
    SqlCond::Range(
        col,
        Some((vec![kind.tag()], true)),
        Some((vec![kind.tag() + 1], false)),
    )
}

struct Translation {
    /// Exact for rows whose involved `u<n>` are 0.
    exact: SqlCond,
    /// True for every row that may match.
    superset: SqlCond,
    /// Every condition was on an indexed path.
    complete: bool,
    columns: BTreeSet<usize>,
}

/// Translates `filter`; `crossed` are the key columns some stored row crossed an array
/// on (only their conditions need the `u<n> = 1` escape in the superset).
fn translate(filter: &Filter, layout: &Layout, crossed: &BTreeSet<usize>) -> Translation {
    match filter {
        Filter::And(parts) | Filter::Or(parts) => {
            let parts: Vec<Translation> = parts
                .iter()
                .map(|p| translate(p, layout, crossed))
                .collect();
            let complete = parts.iter().all(|p| p.complete);
            let columns = parts
                .iter()
                .flat_map(|p| p.columns.iter().copied())
                .collect();
            let (exact, superset): (Vec<_>, Vec<_>) =
                parts.into_iter().map(|p| (p.exact, p.superset)).unzip();
            let combine = if matches!(filter, Filter::And(_)) {
                and
            } else {
                or
            };
            Translation {
                exact: combine(exact),
                superset: combine(superset),
                complete,
                columns,
            }
        }
        Filter::Field(path, cond) => match layout.column_of(path) {
            Some(col) => {
                let exact = condition(col, cond);
                let superset = if crossed.contains(&col) {
                    or(vec![SqlCond::CrossedArray(col), exact.clone()])
                } else {
                    exact.clone()
                };
                Translation {
                    superset,
                    exact,
                    complete: true,
                    columns: BTreeSet::from([col]),
                }
            }
            None => Translation {
                exact: SqlCond::True,
                superset: text_needles(cond).map_or(SqlCond::True, SqlCond::BodyContains),
                complete: false,
                columns: BTreeSet::new(),
            },
        },
    }
}

/// For equality with plain strings on an unindexed path: the JSON texts of the literals,
/// one of which a matching document's text must contain (a superset test: the text may
/// also contain them elsewhere). Only printable ASCII without `"` and `\`, which both
/// serde_json and PostgreSQL's `jsonb` output write as they are; dates are left out, as
/// they match other spellings of their instant.
fn text_needles(cond: &Cond) -> Option<Vec<String>> {
    let plain = |lit: &Literal| match (&lit.value, lit.date) {
        (serde_json::Value::String(s), None)
            if s.bytes()
                .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\') =>
        {
            Some(format!("\"{s}\""))
        }
        _ => None,
    };
    match cond {
        Cond::Eq(lit) => Some(vec![plain(lit)?]),
        Cond::In(lits) if !lits.is_empty() => lits.iter().map(plain).collect(),
        _ => None,
    }
}

/// `cond` on column `col`, exact for a row whose path resolved without crossing an array
/// (then the path has at most one value, the one `k<col>` encodes).
fn condition(col: usize, cond: &Cond) -> SqlCond {
    use SqlCond::{In, Range};
    let equal = |lit: &Literal| match lit.date {
        Some(s) => Range(
            col,
            Some((date_prefix(s), true)),
            Some((date_prefix(s + 1), false)),
        ),
        // null also matches a missing path
        None if lit.value.is_null() => In(col, vec![key(None), key(Some(&lit.value))]),
        None => In(col, vec![key(Some(&lit.value))]),
    };
    let tag_end = |lit: &Literal| vec![lit.kind.tag() + 1];
    let tag_start = |lit: &Literal| vec![lit.kind.tag()];
    match cond {
        Cond::Eq(lit) => equal(lit),
        Cond::Ne(lit) => not(equal(lit)),
        Cond::In(lits) => or(lits.iter().map(equal).collect()),
        Cond::Nin(lits) => not(or(lits.iter().map(equal).collect())),
        Cond::Lt(lit) => match lit.date {
            Some(s) => Range(
                col,
                Some((vec![Kind::Date.tag()], true)),
                Some((date_prefix(s), false)),
            ),
            None => Range(
                col,
                Some((tag_start(lit), true)),
                Some((key(Some(&lit.value)), false)),
            ),
        },
        Cond::Lte(lit) => match lit.date {
            Some(s) => Range(
                col,
                Some((vec![Kind::Date.tag()], true)),
                Some((date_prefix(s + 1), false)),
            ),
            None => Range(
                col,
                Some((tag_start(lit), true)),
                Some((key(Some(&lit.value)), true)),
            ),
        },
        Cond::Gt(lit) => match lit.date {
            Some(s) => Range(
                col,
                Some((date_prefix(s + 1), true)),
                Some((vec![Kind::Date.tag() + 1], false)),
            ),
            None => Range(
                col,
                Some((key(Some(&lit.value)), false)),
                Some((tag_end(lit), false)),
            ),
        },
        Cond::Gte(lit) => match lit.date {
            Some(s) => Range(
                col,
                Some((date_prefix(s), true)),
                Some((vec![Kind::Date.tag() + 1], false)),
            ),
            None => Range(
                col,
                Some((key(Some(&lit.value)), true)),
                Some((tag_end(lit), false)),
            ),
        },
        Cond::Exists(true) => not(In(col, vec![key(None)])),
        Cond::Exists(false) => In(col, vec![key(None)]),
        Cond::Type(kinds) => or(kinds.iter().map(|k| kind_range(col, *k)).collect()),
    }
}

fn render(c: &SqlCond, dialect: Dialect, params: &mut Vec<Vec<u8>>) -> String {
    let bind = |value: &[u8], params: &mut Vec<Vec<u8>>| {
        params.push(value.to_vec());
        dialect.placeholder(params.len())
    };
    match c {
        SqlCond::True => "1=1".into(),
        SqlCond::False => "1=0".into(),
        SqlCond::And(parts) | SqlCond::Or(parts) => {
            let joiner = if matches!(c, SqlCond::And(_)) {
                " AND "
            } else {
                " OR "
            };
            let rendered: Vec<String> = parts.iter().map(|p| render(p, dialect, params)).collect();
            format!("({})", rendered.join(joiner))
        }
        SqlCond::Not(inner) => format!("NOT {}", render(inner, dialect, params)),
        SqlCond::In(col, keys) if keys.len() == 1 => format!("k{col} = {}", bind(&keys[0], params)),
        SqlCond::In(col, keys) => {
            let marks: Vec<String> = keys.iter().map(|k| bind(k, params)).collect();
            format!("k{col} IN ({})", marks.join(", "))
        }
        SqlCond::Range(col, lo, hi) => {
            let mut parts = Vec::new();
            if let Some((k, inclusive)) = lo {
                parts.push(format!(
                    "k{col} {} {}",
                    if *inclusive { ">=" } else { ">" },
                    bind(k, params)
                ));
            }
            if let Some((k, inclusive)) = hi {
                parts.push(format!(
                    "k{col} {} {}",
                    if *inclusive { "<=" } else { "<" },
                    bind(k, params)
                ));
            }
            format!("({})", parts.join(" AND "))
        }
        SqlCond::CrossedArray(col) => format!("u{col} = 1"),
        SqlCond::BodyContains(needles) => {
            let tests: Vec<String> = needles
                .iter()
                .map(|n| {
                    let mark = bind(n.as_bytes(), params);
                    match dialect {
                        Dialect::Sqlite => format!("instr(body, CAST({mark} AS TEXT)) > 0"),
                        Dialect::Postgres => {
                            format!("strpos(body::text, convert_from({mark}, 'UTF8')) > 0")
                        }
                    }
                })
                .collect();
            format!("({})", tests.join(" OR "))
        }
    }
}

/// `cond` rendered for a WHERE clause, followed by the condition of every partial index
/// it implies (which both databases need to see written out to use that index).
fn where_clause(
    cond: &SqlCond,
    layout: &Layout,
    dialect: Dialect,
    params: &mut Vec<Vec<u8>>,
) -> String {
    let mut sql = render(cond, dialect, params);
    for index in &layout.newest_first {
        if let Some(key) = &index.leaves_out
            && rules_out(cond, index.columns[0], key)
            && let Some(predicate) = index.predicate(dialect)
        {
            sql.push_str(" AND ");
            sql.push_str(&predicate);
        }
    }
    sql
}

/// Whether no row that meets `cond` holds `key` in `k<col>`.
fn rules_out(cond: &SqlCond, col: usize, key: &[u8]) -> bool {
    let outside = |bound: &Option<(Vec<u8>, bool)>, below: bool| match bound {
        None => false,
        Some((edge, inclusive)) => match key.cmp(edge.as_slice()) {
            std::cmp::Ordering::Equal => !inclusive,
            std::cmp::Ordering::Less => below,
            std::cmp::Ordering::Greater => !below,
        },
    };
    match cond {
        SqlCond::False => true,
        SqlCond::In(c, keys) => *c == col && !keys.iter().any(|k| k == key),
        SqlCond::Range(c, lo, hi) => *c == col && (outside(lo, true) || outside(hi, false)),
        SqlCond::Not(inner) => {
            matches!(&**inner, SqlCond::In(c, keys) if *c == col && keys.iter().any(|k| k == key))
        }
        SqlCond::And(parts) => parts.iter().any(|p| rules_out(p, col, key)),
        SqlCond::Or(parts) => parts.iter().all(|p| rules_out(p, col, key)),
        _ => false,
    }
}

/// `cond` as `k<col> = key AND rest`: the rest, when `cond` has that form.
fn without_equality(cond: &SqlCond, col: usize, key: &[u8]) -> Option<SqlCond> {
    let is_it = |c: &SqlCond| matches!(c, SqlCond::In(c, keys) if *c == col && keys == &[key]);
    match cond {
        c if is_it(c) => Some(SqlCond::True),
        SqlCond::And(parts) => {
            let at = parts.iter().position(is_it)?;
            let mut rest = parts.clone();
            rest.remove(at);
            Some(and(rest))
        }
        _ => None,
    }
}

/// How many rows meet `cond`. A partial index leaves out rows of one value, so rows of
/// that value are counted as all the rows minus the rows the index holds.
fn count(
    conn: &mut dyn ReadConn,
    layout: &Layout,
    dialect: Dialect,
    cond: &SqlCond,
) -> Result<usize> {
    let count_where = |conn: &mut dyn ReadConn, cond: &SqlCond, extra: &str| {
        if *cond == SqlCond::True && extra.is_empty() {
            return conn.count(&layout.count_sql(), &[]);
        }
        let mut params = Vec::new();
        let condition = where_clause(cond, layout, dialect, &mut params);
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE {condition}{extra}",
            layout.table
        );
        conn.count(&sql, &params)
    };
    for index in &layout.newest_first {
        if let Some(key) = &index.leaves_out
            && let Some(rest) = without_equality(cond, index.columns[0], key)
            && let Some(predicate) = index.predicate(dialect)
        {
            let all = count_where(conn, &rest, "")?;
            let others = count_where(conn, &rest, &format!(" AND {predicate}"))?;
            return Ok(all.saturating_sub(others));
        }
    }
    count_where(conn, cond, "")
}

/// Answers `query` over the collection laid out as `layout`.
pub(crate) fn list(
    conn: &mut dyn ReadConn,
    layout: &Layout,
    dialect: Dialect,
    query: &ListQuery,
) -> Result<Page<Document>> {
    let table = &layout.table;
    // Which indexed columns the filter uses, and on which of them a stored row crossed an
    // array (a cheap probe of the partial index on u<n>).
    let columns = translate(&query.filter, layout, &BTreeSet::new()).columns;
    let mut crossed = BTreeSet::new();
    for col in columns {
        let sql = format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE u{col} = 1 LIMIT 1) AS probe"
        );
        if conn.count(&sql, &[])? > 0 {
            crossed.insert(col);
        }
    }
    let translation = translate(&query.filter, layout, &crossed);
    let sort_columns: Option<Vec<(usize, Direction)>> = query
        .sort
        .keys
        .iter()
        .map(|(path, direction)| layout.column_of(path).map(|c| (c, *direction)))
        .collect();
    let order_by = {
        let mut terms: Vec<String> = sort_columns
            .iter()
            .flatten()
            .map(|(c, d)| {
                format!(
                    "k{c} {}",
                    if *d == Direction::Ascending {
                        "ASC"
                    } else {
                        "DESC"
                    }
                )
            })
            .collect();
        terms.push("seq ASC".into());
        format!("ORDER BY {}", terms.join(", "))
    };
    let select = format!("SELECT id, name, version, {} FROM {table}", dialect.body());

    // Way 1 when SQL decides the filter on its own; otherwise it narrows down (way 2).
    let decided_by_sql = translation.complete && crossed.is_empty();
    let mut params = Vec::new();
    let condition = where_clause(
        if decided_by_sql {
            &translation.exact
        } else {
            &translation.superset
        },
        layout,
        dialect,
        &mut params,
    );
    if decided_by_sql && sort_columns.is_some() {
        let total = count(conn, layout, dialect, &translation.exact)?;
        let paging = query.paging;
        if paging.max == Some(0) || paging.offset >= total {
            return Ok(Page {
                total,
                items: Vec::new(),
            });
        }
        // No more than are left: a `max` beyond SQL's 64-bit signed LIMIT is refused by
        // the database (SQLite: "datatype mismatch").
        let limit = paging.max.map_or(dialect.no_limit().to_string(), |m| {
            m.min(total - paging.offset).to_string()
        });
        let sql = format!(
            "{select} WHERE {condition} {order_by} LIMIT {limit} OFFSET {}",
            paging.offset
        );
        let mut items = Vec::new();
        conn.for_each_row(&sql, &params, &mut |row| {
            items.push(row.into_document()?);
            Ok(())
        })?;
        return Ok(Page { total, items });
    }

    // The rest is finished in Rust: the evaluator decides what SQL only narrowed down,
    // and sorts on paths with no index.
    let order = if sort_columns.is_some() {
        order_by
    } else {
        "ORDER BY seq ASC".to_string()
    };
    let mut items = Vec::new();
    conn.for_each_row(
        &format!("{select} WHERE {condition} {order}"),
        &params,
        &mut |row| {
            let doc = row.into_document()?;
            if decided_by_sql || query.filter.matches(&doc.body) {
                items.push(doc);
            }
            Ok(())
        },
    )?;
    if sort_columns.is_none() {
        query.sort.sort(&mut items, |d| &d.body);
    }
    Ok(Page {
        total: items.len(),
        items: query.paging.cut(items),
    })
}
