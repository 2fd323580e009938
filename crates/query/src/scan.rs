//! Filters prepared for scanning many compact documents.
//!
//! The reference evaluator ([`Filter::matches`]) is written once for every
//! [`crate::DocView`]; each equality test goes through the literal's JSON value and a
//! closure per resolved value. Over a million documents that generality is most of the
//! cost, so a [`Prepared`] filter sorts out the literals of the common conditions once —
//! `$eq`/`$in` on strings and numbers, their negations `$ne`/`$nin`, and `$lt`..`$gte`
//! against a number — and tests the compact encoding's strings and numbers directly.
//! Every other condition runs through the reference evaluator, and the conditions it
//! prepares keep their exact meaning (a property test compares the two).

use std::cmp::Ordering;

use serde_json::Value;

use crate::compact::{Compact, Leaf, Step, same_bytes};
use crate::filter::{Cond, Filter, Literal};
use crate::path::{Path, Segment};

/// A filter prepared for [`Compact`] documents; matches exactly what the filter does.
pub struct Prepared<'f>(Node<'f>);

enum Node<'f> {
    All(Vec<Node<'f>>),
    Any(Vec<Node<'f>>),
    /// Some value equals one of `texts` or `numbers` (negated for `$ne`/`$nin`).
    Equals {
        path: &'f Path,
        texts: Vec<&'f [u8]>,
        numbers: Vec<f64>,
        negated: bool,
    },
    /// Some number compares with `number` as `wanted` asks.
    Compare {
        path: &'f Path,
        number: f64,
        wanted: fn(Ordering) -> bool,
    },
    /// Anything else: the reference evaluator.
    Reference(&'f Filter),
}

impl<'f> Prepared<'f> {
    pub fn new(filter: &'f Filter) -> Self {
        Self(prepare(filter))
    }

    #[inline]
    pub fn matches(&self, doc: Compact<'_>) -> bool {
        self.0.matches(doc)
    }
}

fn prepare<'f>(filter: &'f Filter) -> Node<'f> {
    let (path, cond) = match filter {
        Filter::And(all) => return Node::All(all.iter().map(prepare).collect()),
        Filter::Or(any) => return Node::Any(any.iter().map(prepare).collect()),
        // An index segment (`a.0.b`) may also name an array element: such paths run
        // through the reference evaluator, as do the conditions `prepare` leaves.
        Filter::Field(path, _) if path.segments().iter().any(|s| s.index.is_some()) => {
            return Node::Reference(filter);
        }
        Filter::Field(path, cond) => (path, cond),
    };
    let equals = |lits: &'f [Literal], negated| equality(path, lits, negated);
    let compare = |lit: &Literal, wanted: fn(Ordering) -> bool| match (lit.date, &lit.value) {
        (None, Value::Number(_)) => lit.number().map(|number| Node::Compare {
            path,
            number,
            wanted,
        }),
        _ => None,
    };
    let prepared = match cond {
        Cond::Eq(lit) => equals(std::slice::from_ref(lit), false),
        Cond::Ne(lit) => equals(std::slice::from_ref(lit), true),
        Cond::In(lits) => equals(lits, false),
        Cond::Nin(lits) => equals(lits, true),
        Cond::Lt(lit) => compare(lit, Ordering::is_lt),
        Cond::Lte(lit) => compare(lit, Ordering::is_le),
        Cond::Gt(lit) => compare(lit, Ordering::is_gt),
        Cond::Gte(lit) => compare(lit, Ordering::is_ge),
        Cond::Exists(_) | Cond::Type(_) => None,
    };
    prepared.unwrap_or(Node::Reference(filter))
}

/// An `Equals` node when every literal is a number or a string that is not a date
/// (dates compare as instants, `null` also matches nothing, objects and arrays compare
/// as wholes: those stay with the reference evaluator).
fn equality<'f>(path: &'f Path, lits: &'f [Literal], negated: bool) -> Option<Node<'f>> {
    let (mut texts, mut numbers) = (Vec::new(), Vec::new());
    for lit in lits {
        match (&lit.value, lit.date) {
            (Value::String(s), None) => texts.push(s.as_bytes()),
            (Value::Number(_), _) => numbers.push(lit.number()?),
            _ => return None,
        }
    }
    Some(Node::Equals {
        path,
        texts,
        numbers,
        negated,
    })
}

impl Node<'_> {
    fn matches(&self, doc: Compact<'_>) -> bool {
        match self {
            Node::All(all) => all.iter().all(|n| n.matches(doc)),
            Node::Any(any) => any.iter().any(|n| n.matches(doc)),
            Node::Equals {
                path,
                texts,
                numbers,
                negated,
            } => {
                // Like the evaluator: a resolved array matches by one of its elements.
                let found = any_value(doc, path.segments(), &mut |x| match x.leaf() {
                    Leaf::Array(mut elements) => elements.any(|e| equals(e.leaf(), texts, numbers)),
                    leaf => equals(leaf, texts, numbers),
                });
                found != *negated
            }
            Node::Compare {
                path,
                number,
                wanted,
            } => any_value(doc, path.segments(), &mut |x| match x.leaf() {
                Leaf::Array(mut elements) => elements.any(|e| compares(e.leaf(), *number, *wanted)),
                leaf => compares(leaf, *number, *wanted),
            }),
            Node::Reference(filter) => filter.matches(doc),
        }
    }
}

/// [`Path::any_value`] over a compact document, for a path without index segments: the
/// same walk, one step per segment (`Compact::step`) instead of a member lookup and then a
/// kind test. Kept apart from the generic walk because it is measured faster: 84–106 ms
/// against 115–128 ms per 1M-document scan (`DROVER_BENCH_SCAN=prepared drover-bench
/// evaluator`); the property test of `Prepared` holds both to the same answers.
#[inline(always)]
fn any_value<'a>(
    mut x: Compact<'a>,
    segments: &[Segment],
    visit: &mut impl FnMut(Compact<'a>) -> bool,
) -> bool {
    for (i, segment) in segments.iter().enumerate() {
        match x.step(segment) {
            Step::Member(child) => x = child,
            // Through an array: on in each of its objects, from the same segment.
            Step::Elements(mut elements) => {
                let rest = &segments[i..];
                return elements.any(|e| e.is_object() && any_value_in(e, rest, visit));
            }
            Step::Nothing => return false,
        }
    }
    visit(x)
}

/// `any_value` again, as a function of its own: a recursive call cannot be inlined.
fn any_value_in<'a>(
    x: Compact<'a>,
    segments: &[Segment],
    visit: &mut impl FnMut(Compact<'a>) -> bool,
) -> bool {
    any_value(x, segments, visit)
}

#[inline(always)]
fn equals(leaf: Leaf<'_>, texts: &[&[u8]], numbers: &[f64]) -> bool {
    match leaf {
        Leaf::Text(text) => texts.iter().any(|t| same_bytes(text, t)),
        Leaf::Number(n) => numbers.contains(&n),
        Leaf::Array(_) | Leaf::Other => false,
    }
}

#[inline(always)]
fn compares(leaf: Leaf<'_>, number: f64, wanted: fn(Ordering) -> bool) -> bool {
    match leaf {
        Leaf::Number(n) => wanted(n.total_cmp(&number)),
        _ => false,
    }
}
