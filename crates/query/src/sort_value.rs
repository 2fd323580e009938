//! A sort value kept to be compared many times.
//!
//! A list sorted over a deep table keeps the sort values of the page's best documents
//! and compares each new document against the worst of them ([`crate::Top`]): millions
//! of comparisons against the same few values. Kept as `serde_json::Value`, each
//! comparison would parse a date's text again (twice: its kind, then its instant) and
//! check again that an object's members are in key order. A [`SortValue`] has its kind
//! and instant worked out once and its members sorted once.

use crate::order::Kind;
use crate::view::DocView;

/// A value of a document as its sort compares it ([`crate::order`]), owned.
#[derive(Debug, Clone, PartialEq)]
pub enum SortValue {
    Null,
    /// The double it compares as (`-0.0` is `0.0`).
    Number(f64),
    /// A UTC wire date: its instant, and its text.
    Date(i64, String),
    Text(String),
    Bool(bool),
    Array(Vec<SortValue>),
    /// Members sorted by key bytes.
    Object(Vec<(String, SortValue)>),
}

impl SortValue {
    /// An owned copy of the value `view` shows.
    pub fn of<'a, V: DocView<'a>>(view: V) -> SortValue {
        match view.kind() {
            Kind::Missing | Kind::Null => SortValue::Null,
            Kind::Number => SortValue::Number(view.number().unwrap_or(0.0)),
            Kind::Date => SortValue::Date(
                view.date().unwrap_or_default(),
                view.text().unwrap_or_default().to_string(),
            ),
            Kind::String => SortValue::Text(view.text().unwrap_or_default().to_string()),
            Kind::Bool => SortValue::Bool(view.truth()),
            Kind::Array => SortValue::Array(view.elements().map(SortValue::of).collect()),
            Kind::Object => {
                let mut members: Vec<(String, SortValue)> = view
                    .entries()
                    .map(|(key, member)| (key.to_string(), SortValue::of(member)))
                    .collect();
                members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                SortValue::Object(members)
            }
        }
    }
}

type Members<'a> = std::iter::Map<
    std::slice::Iter<'a, (String, SortValue)>,
    fn(&'a (String, SortValue)) -> (&'a str, &'a SortValue),
>;

fn member(entry: &(String, SortValue)) -> (&str, &SortValue) {
    (entry.0.as_str(), &entry.1)
}

impl<'a> DocView<'a> for &'a SortValue {
    type Elements = std::slice::Iter<'a, SortValue>;
    type Entries = Members<'a>;

    fn kind(self) -> Kind {
        match self {
            SortValue::Null => Kind::Null,
            SortValue::Number(_) => Kind::Number,
            SortValue::Date(..) => Kind::Date,
            SortValue::Text(_) => Kind::String,
            SortValue::Bool(_) => Kind::Bool,
            SortValue::Array(_) => Kind::Array,
            SortValue::Object(_) => Kind::Object,
        }
    }

    fn number(self) -> Option<f64> {
        match self {
            SortValue::Number(n) => Some(*n),
            _ => None,
        }
    }

    fn text(self) -> Option<&'a str> {
        match self {
            SortValue::Date(_, text) | SortValue::Text(text) => Some(text),
            _ => None,
        }
    }

    fn date(self) -> Option<i64> {
        match self {
            SortValue::Date(seconds, _) => Some(*seconds),
            _ => None,
        }
    }

    fn get(self, key: &str) -> Option<Self> {
        match self {
            SortValue::Object(members) => members.iter().find(|(k, _)| k == key).map(|m| &m.1),
            _ => None,
        }
    }

    fn element(self, index: usize) -> Option<Self> {
        match self {
            SortValue::Array(items) => items.get(index),
            _ => None,
        }
    }

    fn elements(self) -> Self::Elements {
        match self {
            SortValue::Array(items) => items.iter(),
            _ => [].iter(),
        }
    }

    fn entries(self) -> Self::Entries {
        match self {
            SortValue::Object(members) => members.iter(),
            _ => [].iter(),
        }
        .map(member as fn(_) -> _)
    }

    fn keys_in_order(self) -> bool {
        true
    }

    fn truth(self) -> bool {
        matches!(self, SortValue::Bool(true))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use std::cmp::Ordering;

    use super::*;
    use crate::order::compare;

    fn values() -> Vec<Value> {
        vec![
            json!(null),
            json!(-0.0),
            json!(0),
            json!(2.5),
            json!("2024-05-01 10:00:00 UTC"),
            json!("2024-05-01 10:00:00 GMT"),
            json!("2024-05-01 10:00:01 UTC"),
            json!(""),
            json!("abc"),
            json!({"b": 1, "a": 2}),
            json!({"a": 2, "b": 1}),
            json!({"a": 2}),
            json!({"a": "2024-05-01 10:00:00 UTC", "c": [1, {"z": 1, "y": 2}]}),
            json!([1, 2]),
            json!([1]),
            json!([{"b": null, "a": true}]),
            json!(true),
            json!(false),
        ]
    }

    #[test]
    fn kept_values_compare_as_the_documents_they_came_from() {
        let all = values();
        for a in &all {
            for b in &all {
                let kept = SortValue::of(b);
                assert_eq!(
                    compare(Some(a), Some(&kept)),
                    compare(Some(a), Some(b)),
                    "{a} against {b}"
                );
                assert_eq!(
                    compare(Some(&SortValue::of(a)), Some(&kept)),
                    compare(Some(a), Some(b)),
                    "{a} kept, against {b}"
                );
            }
            assert_eq!(
                compare(None::<&Value>, Some(&SortValue::of(a))),
                Ordering::Less
            );
        }
    }
}
