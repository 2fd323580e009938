//! The `query` filter: its syntax tree, parser and reference evaluator.
//!
//! Syntax (a subset of the document-store query language):
//! - `{"a.b": <literal>}` equality; several fields in one object are combined with AND;
//! - `{"a": {"$eq"|"$ne"|"$lt"|"$lte"|"$gt"|"$gte": <literal>}}`,
//!   `{"$in"|"$nin": [<literal>...]}`, `{"$exists": true|false}`,
//!   `{"$type": 10 | "null" | ...}`; several operators on one field are combined with AND;
//! - `{"$and": [<query>...]}`, `{"$or": [<query>...]}` (non-empty arrays).
//!
//! Meaning, for a field whose path resolves to the values V (see [`crate::path`]):
//! - equality holds when some value of V, or some element of an array in V, equals the
//!   literal in the order of [`crate::order`]; `null` also matches when V is empty;
//! - `$lt`.. hold when some such value has the literal's kind (see [`Kind`]) and compares
//!   as asked; values of other kinds never match (`{"$lt": 5}` skips strings);
//! - a literal that is a wire date (in UTC, GMT or the deployment's own zone) compares as
//!   an instant, for equality too, against the UTC dates of stored documents;
//! - `$ne` and `$nin` are the negations of equality and `$in` (so they match missing fields);
//! - `$exists: true` holds when V is not empty; `$type` when some value (or array element)
//!   has one of the selected kinds.

use drover_domain::dates::WireDates;
use serde_json::{Map, Value};

use crate::compact::same_bytes;
use crate::order::{Kind, compare_values, number_f64};
use crate::view::DocView;
use crate::{Path, QueryError};

/// A parsed filter. The default matches every document.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Field(Path, Cond),
}

impl Default for Filter {
    fn default() -> Self {
        Filter::And(Vec::new())
    }
}

/// One condition on the values a path resolves to.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    Eq(Literal),
    Ne(Literal),
    In(Vec<Literal>),
    Nin(Vec<Literal>),
    Lt(Literal),
    Lte(Literal),
    Gt(Literal),
    Gte(Literal),
    Exists(bool),
    /// `$type`: the kinds it selects (`string` selects dates too).
    Type(Vec<Kind>),
}

/// A literal of a condition, with its date meaning worked out once at parse time.
#[derive(Debug, Clone, PartialEq)]
pub struct Literal {
    pub value: Value,
    /// Seconds since the epoch when the literal is a wire date.
    pub date: Option<i64>,
    /// The kind of the literal in the value order (dates in a local zone are `String`
    /// here; `date` is what decides how they compare).
    pub kind: Kind,
    /// The number as a double, for numbers (worked out once: every comparison reads it).
    number: Option<f64>,
}

impl Literal {
    fn new(value: Value, dates: &WireDates) -> Self {
        let date = match &value {
            Value::String(s) => dates.parse(s).ok().map(|t| t.as_second()),
            _ => None,
        };
        let kind = (&value).kind();
        let number = match &value {
            Value::Number(n) => Some(number_f64(n)),
            _ => None,
        };
        Self {
            value,
            date,
            kind,
            number,
        }
    }

    /// The literal as a double, for numbers.
    pub fn number(&self) -> Option<f64> {
        self.number
    }

    /// Whether `x` (one resolved value, not unwrapped, whose text is `text`) equals
    /// this literal.
    fn equals<'a, V: DocView<'a>>(&self, x: V, text: Option<&[u8]>) -> bool {
        if let Some(seconds) = self.date {
            return x.date() == Some(seconds);
        }
        match &self.value {
            // Equal text means the same kind too: a UTC date literal has `date` set.
            Value::String(s) => text.is_some_and(|t| same_bytes(t, s.as_bytes())),
            Value::Number(_) => x.number() == self.number,
            Value::Null => x.kind() == Kind::Null,
            Value::Bool(b) => x.kind() == Kind::Bool && x.truth() == *b,
            other => compare_values(x, other).is_eq(),
        }
    }

    /// How `x` compares with this literal, when it is of a comparable kind.
    fn compare<'a, V: DocView<'a>>(&self, x: V) -> Option<std::cmp::Ordering> {
        match (self.date, &self.value) {
            (Some(seconds), _) => Some(x.date()?.cmp(&seconds)),
            (None, Value::Number(_)) => Some(x.number()?.total_cmp(&self.number?)),
            (None, _) => (x.kind() == self.kind).then(|| compare_values(x, &self.value)),
        }
    }
}

impl Filter {
    /// This filter with its paths renamed (see [`Path::renamed_by`]).
    pub fn renamed(&self, renames: &[(&str, &str)]) -> Filter {
        match self {
            Filter::And(all) => Filter::And(all.iter().map(|f| f.renamed(renames)).collect()),
            Filter::Or(any) => Filter::Or(any.iter().map(|f| f.renamed(renames)).collect()),
            Filter::Field(path, cond) => Filter::Field(path.renamed_by(renames), cond.clone()),
        }
    }

    /// Parses the text of a `query` parameter.
    pub fn parse_str(text: &str, dates: &WireDates) -> Result<Filter, QueryError> {
        let json: Value = serde_json::from_str(text)
            .map_err(|e| QueryError::new(format!("query is not valid JSON: {e}")))?;
        Filter::parse(&json, dates)
    }

    /// Parses a `query` given as JSON; date literals are read with `dates`.
    pub fn parse(json: &Value, dates: &WireDates) -> Result<Filter, QueryError> {
        match json {
            Value::Object(map) => parse_object(map, dates),
            other => Err(QueryError::new(format!(
                "query must be a JSON object, got {}",
                describe(other)
            ))),
        }
    }

    /// Whether `doc` matches (the reference semantics).
    pub fn matches<'a, V: DocView<'a>>(&self, doc: V) -> bool {
        match self {
            Filter::And(all) => all.iter().all(|f| f.matches(doc)),
            Filter::Or(any) => any.iter().any(|f| f.matches(doc)),
            Filter::Field(path, cond) => cond.matches(path, doc),
        }
    }
}

impl Cond {
    fn matches<'a, V: DocView<'a>>(&self, path: &Path, doc: V) -> bool {
        match self {
            Cond::Eq(lit) => equals_any(path, doc, std::slice::from_ref(lit)),
            Cond::Ne(lit) => !equals_any(path, doc, std::slice::from_ref(lit)),
            Cond::In(lits) => equals_any(path, doc, lits),
            Cond::Nin(lits) => !equals_any(path, doc, lits),
            Cond::Lt(lit) => compares(path, doc, lit, |o| o.is_lt()),
            Cond::Lte(lit) => compares(path, doc, lit, |o| o.is_le()),
            Cond::Gt(lit) => compares(path, doc, lit, |o| o.is_gt()),
            Cond::Gte(lit) => compares(path, doc, lit, |o| o.is_ge()),
            Cond::Exists(wanted) => path.any_value(doc, &mut |_| true) == *wanted,
            Cond::Type(kinds) => path.any_value(doc, &mut |x| {
                any_unwrapped(x, |v| kinds.contains(&v.kind()))
            }),
        }
    }
}

/// Whether `test` holds for a resolved value or, when it is an array, for one of its
/// elements.
fn any_unwrapped<'a, V: DocView<'a>>(x: V, mut test: impl FnMut(V) -> bool) -> bool {
    test(x) || (x.kind() == Kind::Array && x.elements().any(test))
}

/// Whether the path has a value (or array element) equal to one of `lits`; a `null`
/// among them also matches a path that resolves to nothing.
fn equals_any<'a, V: DocView<'a>>(path: &Path, doc: V, lits: &[Literal]) -> bool {
    let mut resolved_any = false;
    let found = path.any_value(doc, &mut |x| {
        resolved_any = true;
        any_unwrapped(x, |v| {
            // Read once for all the literals (an `$in` has several).
            let text = v.text_bytes();
            lits.iter().any(|lit| lit.equals(v, text))
        })
    });
    found || (!resolved_any && lits.iter().any(|lit| lit.value.is_null()))
}

fn compares<'a, V: DocView<'a>>(
    path: &Path,
    doc: V,
    lit: &Literal,
    wanted: impl Fn(std::cmp::Ordering) -> bool,
) -> bool {
    path.any_value(doc, &mut |x| {
        any_unwrapped(x, |v| lit.compare(v).is_some_and(&wanted))
    })
}

fn describe(v: &Value) -> String {
    let text = v.to_string();
    if text.len() > 60 {
        format!("{}...", &text[..text.floor_char_boundary(57)])
    } else {
        text
    }
}

fn parse_object(map: &Map<String, Value>, dates: &WireDates) -> Result<Filter, QueryError> {
    let mut clauses = Vec::with_capacity(map.len());
    for (key, value) in map {
        if let Some(op) = key.strip_prefix('$') {
            if op != "and" && op != "or" {
                return Err(QueryError::new(format!(
                    "unknown top-level operator {key} in query (use $and, $or, or a field name)"
                )));
            }
            let branches = match value {
                Value::Array(items) if !items.is_empty() => items,
                _ => {
                    return Err(QueryError::new(format!(
                        "{key} needs a non-empty array of queries, got {}",
                        describe(value)
                    )));
                }
            };
            let parsed = branches
                .iter()
                .map(|b| match b {
                    Value::Object(m) => parse_object(m, dates),
                    other => Err(QueryError::new(format!(
                        "{key} needs an array of query objects, got {}",
                        describe(other)
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            clauses.push(if op == "and" {
                Filter::And(parsed)
            } else {
                Filter::Or(parsed)
            });
        } else {
            let path = Path::parse(key, "query")?;
            parse_field(path, value, dates, &mut clauses)?;
        }
    }
    Ok(if clauses.len() == 1 {
        clauses.pop().unwrap()
    } else {
        Filter::And(clauses)
    })
}

fn parse_field(
    path: Path,
    value: &Value,
    dates: &WireDates,
    clauses: &mut Vec<Filter>,
) -> Result<(), QueryError> {
    let operators = match value {
        Value::Object(m) if m.keys().any(|k| k.starts_with('$')) => m,
        _ => {
            clauses.push(Filter::Field(
                path,
                Cond::Eq(Literal::new(value.clone(), dates)),
            ));
            return Ok(());
        }
    };
    for (op, operand) in operators {
        let lit = || Literal::new(operand.clone(), dates);
        let list = || match operand {
            Value::Array(items) => Ok(items
                .iter()
                .map(|v| Literal::new(v.clone(), dates))
                .collect::<Vec<_>>()),
            other => Err(QueryError::new(format!(
                "{op} at {path} needs an array, got {}",
                describe(other)
            ))),
        };
        let cond = match op.as_str() {
            "$eq" => Cond::Eq(lit()),
            "$ne" => Cond::Ne(lit()),
            "$lt" => Cond::Lt(lit()),
            "$lte" => Cond::Lte(lit()),
            "$gt" => Cond::Gt(lit()),
            "$gte" => Cond::Gte(lit()),
            "$in" => Cond::In(list()?),
            "$nin" => Cond::Nin(list()?),
            "$exists" => Cond::Exists(match operand {
                Value::Bool(b) => *b,
                Value::Number(n) if n.as_i64() == Some(0) || n.as_i64() == Some(1) => {
                    n.as_i64() == Some(1)
                }
                other => {
                    return Err(QueryError::new(format!(
                        "$exists at {path} needs true or false, got {}",
                        describe(other)
                    )));
                }
            }),
            "$type" => Cond::Type(type_selector(operand).ok_or_else(|| {
                QueryError::new(format!(
                    "$type at {path}: unknown type {} (use 1, 2, 3, 4, 8, 9, 10, 16, 18, 19, \
                     or number, string, object, array, bool, date, null)",
                    describe(operand)
                ))
            })?),
            _ if op.starts_with('$') => {
                return Err(QueryError::new(format!("unknown operator {op} at {path}")));
            }
            _ => {
                return Err(QueryError::new(format!(
                    "field name '{op}' inside the operators of {path}: an object that holds \
                     operators may hold nothing else"
                )));
            }
        };
        clauses.push(Filter::Field(path.clone(), cond));
    }
    Ok(())
}

/// The kinds a `$type` operand selects (BSON type numbers or aliases).
fn type_selector(operand: &Value) -> Option<Vec<Kind>> {
    let kinds: &[Kind] = match operand {
        Value::Number(n) => match n.as_i64()? {
            1 | 16 | 18 | 19 => &[Kind::Number],
            2 => &[Kind::String, Kind::Date],
            3 => &[Kind::Object],
            4 => &[Kind::Array],
            8 => &[Kind::Bool],
            9 => &[Kind::Date],
            10 => &[Kind::Null],
            _ => return None,
        },
        Value::String(s) => match s.as_str() {
            "number" | "double" | "int" | "long" | "decimal" => &[Kind::Number],
            "string" => &[Kind::String, Kind::Date],
            "object" => &[Kind::Object],
            "array" => &[Kind::Array],
            "bool" => &[Kind::Bool],
            "date" => &[Kind::Date],
            "null" => &[Kind::Null],
            _ => return None,
        },
        _ => return None,
    };
    Some(kinds.to_vec())
}
