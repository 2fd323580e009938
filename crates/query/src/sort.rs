//! The `sort` parameter: `{"a": 1, "b.c": -1}`, keys applied in the order given.
//!
//! A document sorts by the first value each path resolves to ([`Path::first_value`]),
//! missing before everything, in the order of [`crate::order`]. Ties keep the input
//! order in both directions (the stores feed documents in creation order), so paging
//! through a sorted list is deterministic.

use std::cmp::Ordering;

use serde_json::Value;

use crate::order::{compare, compare_with_kept};
use crate::sort_value::SortValue;
use crate::view::DocView;
use crate::{Path, QueryError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Ascending,
    Descending,
}

/// A parsed `sort`; the default keeps the input order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sort {
    pub keys: Vec<(Path, Direction)>,
}

impl Sort {
    /// This sort with its paths renamed (see [`Path::renamed_by`]).
    pub fn renamed(&self, renames: &[(&str, &str)]) -> Sort {
        Sort {
            keys: self
                .keys
                .iter()
                .map(|(path, direction)| (path.renamed_by(renames), *direction))
                .collect(),
        }
    }

    /// Parses the text of a `sort` parameter.
    pub fn parse_str(text: &str) -> Result<Sort, QueryError> {
        let json: Value = serde_json::from_str(text)
            .map_err(|e| QueryError::new(format!("sort is not valid JSON: {e}")))?;
        Sort::parse(&json)
    }

    pub fn parse(json: &Value) -> Result<Sort, QueryError> {
        let Value::Object(map) = json else {
            return Err(QueryError::new(format!(
                "sort must be a JSON object such as {{\"name\": 1}}, got {json}"
            )));
        };
        let keys = map
            .iter()
            .map(|(field, direction)| {
                let path = Path::parse(field, "sort")?;
                let direction = match direction {
                    Value::Number(n) if n.as_f64() == Some(1.0) => Direction::Ascending,
                    Value::Number(n) if n.as_f64() == Some(-1.0) => Direction::Descending,
                    Value::String(s) if s == "1" => Direction::Ascending,
                    Value::String(s) if s == "-1" => Direction::Descending,
                    other => {
                        return Err(QueryError::new(format!(
                            "sort direction of {field} must be 1 or -1, got {other}"
                        )));
                    }
                };
                Ok((path, direction))
            })
            .collect::<Result<_, _>>()?;
        Ok(Sort { keys })
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// [`Sort::compare_by_keys`] of a document's values with kept ones (a page's worst):
    /// each compared the quicker way when the document's representation has one.
    pub fn compare_with_kept<'a, V: DocView<'a>>(
        &self,
        a: impl IntoIterator<Item = Option<V>>,
        kept: &[Option<SortValue>],
    ) -> Ordering {
        let keys = a.into_iter().zip(kept);
        self.first_difference(keys.map(|(x, y)| compare_with_kept(x, y.as_ref())))
    }

    /// Compares two documents by their sort values, key by key in each key's direction
    /// (equal when they tie); the values are read only as far as the first difference.
    pub fn compare_by_keys<'a, 'b, A: DocView<'a>, B: DocView<'b>>(
        &self,
        a: impl IntoIterator<Item = Option<A>>,
        b: impl IntoIterator<Item = Option<B>>,
    ) -> Ordering {
        self.first_difference(a.into_iter().zip(b).map(|(x, y)| compare(x, y)))
    }

    /// The first of the keys' orders (made one at a time) that is not equal, in its
    /// key's direction.
    fn first_difference(&self, orders: impl Iterator<Item = Ordering>) -> Ordering {
        for (o, (_, direction)) in orders.zip(&self.keys) {
            let o = match direction {
                Direction::Ascending => o,
                Direction::Descending => o.reverse(),
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    /// Compares the resolved sort values of two documents (equal when they tie).
    fn compare_resolved(&self, a: &[Option<&Value>], b: &[Option<&Value>]) -> Ordering {
        self.compare_by_keys(a.iter().copied(), b.iter().copied())
    }

    /// The values `doc` sorts by, owned (so that the document itself can go) and ready
    /// to be compared many times.
    pub fn keys_of<'a, V: DocView<'a>>(&self, doc: V) -> Vec<Option<SortValue>> {
        self.keys
            .iter()
            .map(|(path, _)| path.first(doc).map(SortValue::of))
            .collect()
    }

    /// Compares the keys [`Sort::keys_of`] took of two documents (equal when they tie).
    pub fn compare_keys(&self, a: &[Option<SortValue>], b: &[Option<SortValue>]) -> Ordering {
        self.compare_by_keys(a.iter().map(Option::as_ref), b.iter().map(Option::as_ref))
    }

    /// Sorts `items` stably by the documents `doc` gives for them.
    pub fn sort<T>(&self, items: &mut [T], doc: impl Fn(&T) -> &Value) {
        if self.is_empty() {
            return;
        }
        // Resolve every path once per item instead of once per comparison.
        let mut decorated: Vec<(Vec<Option<&Value>>, usize)> = items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let d = doc(item);
                let keys = self.keys.iter().map(|(p, _)| p.first(d)).collect();
                (keys, i)
            })
            .collect();
        decorated.sort_by(|(a, _), (b, _)| self.compare_resolved(a, b));
        let order: Vec<usize> = decorated.into_iter().map(|(_, i)| i).collect();
        apply_permutation(items, order);
    }
}

/// Rearranges `items` so that position k holds what was at `order[k]`.
fn apply_permutation<T>(items: &mut [T], mut order: Vec<usize>) {
    for start in 0..items.len() {
        let mut current = start;
        while order[current] != start {
            let next = order[current];
            items.swap(current, next);
            order[current] = current;
            current = next;
        }
        order[current] = current;
    }
}
