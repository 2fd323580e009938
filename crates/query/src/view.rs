//! Read access to a JSON document, whatever its representation.
//!
//! The evaluator, path resolution and the value order are written once against
//! [`DocView`]; `&serde_json::Value` implements it, and so does the compact form of
//! [`crate::compact::Compact`], which scans much faster (contiguous bytes instead of a
//! tree of hash maps).

use serde_json::Value;

use std::cmp::Ordering;

use crate::order::{Kind, date_seconds, number_f64};
use crate::path::{Path, Segment};
use crate::sort_value::SortValue;

/// A read-only view of one JSON value inside a document that lives for `'a`.
pub trait DocView<'a>: Copy + 'a {
    type Elements: Iterator<Item = Self>;
    type Entries: Iterator<Item = (&'a str, Self)>;

    /// The value's kind in the order of [`crate::order`] (never `Missing`).
    fn kind(self) -> Kind;
    /// The number as a double, for numbers.
    fn number(self) -> Option<f64>;
    /// The text, for strings (dates included).
    fn text(self) -> Option<&'a str>;
    /// The text's bytes, for strings: what comparisons use (no UTF-8 check needed).
    fn text_bytes(self) -> Option<&'a [u8]> {
        self.text().map(str::as_bytes)
    }
    /// Seconds since the epoch, for strings that are UTC wire dates.
    fn date(self) -> Option<i64>;
    /// The member `key`, for objects.
    fn get(self, key: &str) -> Option<Self>;
    /// The member a path segment names, for objects; `None` for anything else (a
    /// representation may use the segment's precomputed hash or shape cache).
    fn get_segment(self, segment: &Segment) -> Option<Self> {
        self.get(&segment.name)
    }
    /// The element at `index`, for arrays.
    fn element(self, index: usize) -> Option<Self>;
    /// The elements, for arrays (empty otherwise).
    fn elements(self) -> Self::Elements;
    /// The members in document order, for objects (empty otherwise).
    fn entries(self) -> Self::Entries;
    /// Whether the value is `true` (for booleans; false otherwise).
    fn truth(self) -> bool;
    /// Whether an object's members come in key order (by key bytes), so that objects
    /// compare without a sorted copy. A representation that always keeps them so says
    /// so without looking.
    fn keys_in_order(self) -> bool {
        self.entries().map(|(key, _)| key.as_bytes()).is_sorted()
    }
    /// What `path` resolves to in this document, when the representation knows it
    /// without walking the path: `Some(Some(v))` when it resolves to the one value `v`,
    /// `Some(None)` when to nothing, `None` when it must be walked. A rendering made for
    /// a query's paths knows where each of them leads, once for all its documents.
    fn known(self, _path: &Path) -> Option<Option<Self>> {
        None
    }
    /// How this value sorts against a kept sort value, when the representation has a
    /// quicker way to tell than the generic walk of [`crate::order::compare_values`]
    /// (which it must agree with); `None` to walk. A list sorted over a deep table
    /// compares every document with the page's worst ([`crate::Top`]).
    fn compare_kept(self, _kept: &SortValue) -> Option<Ordering> {
        None
    }
}

type ValueEntries<'a> =
    std::iter::Map<serde_json::map::Iter<'a>, fn((&'a String, &'a Value)) -> (&'a str, &'a Value)>;

fn entry<'a>((k, v): (&'a String, &'a Value)) -> (&'a str, &'a Value) {
    (k.as_str(), v)
}

impl<'a> DocView<'a> for &'a Value {
    type Elements = std::slice::Iter<'a, Value>;
    type Entries = ValueEntries<'a>;

    fn kind(self) -> Kind {
        match self {
            Value::Null => Kind::Null,
            Value::Number(_) => Kind::Number,
            Value::String(s) if date_seconds(s).is_some() => Kind::Date,
            Value::String(_) => Kind::String,
            Value::Object(_) => Kind::Object,
            Value::Array(_) => Kind::Array,
            Value::Bool(_) => Kind::Bool,
        }
    }

    fn number(self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(number_f64(n)),
            _ => None,
        }
    }

    fn text(self) -> Option<&'a str> {
        self.as_str()
    }

    fn date(self) -> Option<i64> {
        self.as_str().and_then(date_seconds)
    }

    fn get(self, key: &str) -> Option<Self> {
        self.as_object()?.get(key)
    }

    fn element(self, index: usize) -> Option<Self> {
        self.as_array()?.get(index)
    }

    fn elements(self) -> Self::Elements {
        match self {
            Value::Array(items) => items.iter(),
            _ => [].iter(),
        }
    }

    fn entries(self) -> Self::Entries {
        static EMPTY: std::sync::OnceLock<serde_json::Map<String, Value>> =
            std::sync::OnceLock::new();
        let map = match self {
            Value::Object(map) => map,
            _ => EMPTY.get_or_init(serde_json::Map::new),
        };
        map.iter().map(entry as fn(_) -> _)
    }

    fn truth(self) -> bool {
        self.as_bool() == Some(true)
    }
}
