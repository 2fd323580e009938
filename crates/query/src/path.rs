//! Dotted paths (`credentials.user`, `requirements.taskCount`) and how they reach into
//! documents.
//!
//! Resolution follows the document-store convention: a segment applied to an array
//! applies to each object element of the array (and a numeric segment also selects the
//! element at that index), so one path may resolve to several values. Nested arrays are
//! not unwrapped further.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::QueryError;
use crate::compact::key_hash;
use crate::order::Kind;
use crate::shape;
use crate::view::DocView;

/// A non-empty dotted path with non-empty segments.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Path {
    text: String,
    segments: Vec<Segment>,
}

/// One segment of a path, with the hash compact documents index members by, and the
/// inline cache of shaped compact objects ([`crate::shape`]).
pub struct Segment {
    pub name: Box<str>,
    pub hash: u32,
    /// The array index the segment also names, when it is all digits.
    pub index: Option<usize>,
    /// The last shape this segment met and the slot of its key there:
    /// `(shape id + 1) << 32 | slot`, slot `u32::MAX` when the shape lacks the key;
    /// 0 before any. Relaxed atomics: a stale or torn-free read only costs a lookup.
    shape_slot: AtomicU64,
}

impl Segment {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            hash: key_hash(name),
            index: index(name),
            shape_slot: AtomicU64::new(0),
        }
    }

    /// The slot of this segment's key in the shape `id`, `None` when it has none.
    #[inline(always)]
    pub fn slot_in(&self, id: u32) -> Option<usize> {
        let cached = self.shape_slot.load(Ordering::Relaxed);
        let slot = if (cached >> 32) == u64::from(id) + 1 {
            cached as u32
        } else {
            let slot = shape::get(id)
                .slot(&self.name)
                .map_or(u32::MAX, |s| s as u32);
            self.shape_slot.store(
                ((u64::from(id) + 1) << 32) | u64::from(slot),
                Ordering::Relaxed,
            );
            slot
        };
        (slot != u32::MAX).then_some(slot as usize)
    }
}

impl Clone for Segment {
    fn clone(&self) -> Self {
        Self::new(&self.name)
    }
}

impl PartialEq for Segment {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Segment {}

impl std::hash::Hash for Segment {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Segment({:?})", self.name)
    }
}

impl Path {
    /// Parses `a.b.c`; `what` names the parameter for the error message.
    pub fn parse(text: &str, what: &str) -> Result<Self, QueryError> {
        if text.is_empty() {
            return Err(QueryError::new(format!("{what}: empty field name")));
        }
        let segments: Vec<Segment> = text.split('.').map(Segment::new).collect();
        if segments.iter().any(|s| s.name.is_empty()) {
            return Err(QueryError::new(format!(
                "{what}: empty segment in field path '{text}'"
            )));
        }
        Ok(Self {
            text: text.to_string(),
            segments,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// This path with its leading part `from` (a whole number of segments) replaced by
    /// `to`; `None` when it does not start with `from`. For resources whose wire names
    /// differ from their stored names by version.
    pub fn renamed(&self, from: &str, to: &str) -> Option<Path> {
        let rest = self.text.strip_prefix(from)?;
        if !(rest.is_empty() || rest.starts_with('.')) {
            return None;
        }
        Path::parse(&format!("{to}{rest}"), "path").ok()
    }

    /// This path after the first of `renames` (`(from, to)` pairs) that applies.
    pub fn renamed_by(&self, renames: &[(&str, &str)]) -> Path {
        renames
            .iter()
            .find_map(|(from, to)| self.renamed(from, to))
            .unwrap_or_else(|| self.clone())
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Calls `visit` on every value the path resolves to in `doc` (arrays reached at the
    /// end are passed whole), stopping at the first `true`. Answers whether one did.
    #[inline(always)]
    pub fn any_value<'a, V: DocView<'a>>(&self, doc: V, visit: &mut impl FnMut(V) -> bool) -> bool {
        if let Some(known) = doc.known(self) {
            return known.is_some_and(visit);
        }
        // Fast path through objects; the general walk takes over at the first array.
        let mut value = doc;
        for (i, segment) in self.segments.iter().enumerate() {
            match value.get_segment(segment) {
                Some(child) => value = child,
                None if value.kind() == Kind::Array => {
                    return any_value(value, &self.segments[i..], visit);
                }
                None => return false,
            }
        }
        visit(value)
    }

    /// The value that represents this path in `doc` for sorting and indexing: the first
    /// value it resolves to, or `None` when it resolves to nothing. `crossed_array` is
    /// true when resolution met an array (so other values may exist, or the value is an
    /// array): only when it is false is `value` the whole story.
    pub fn first_value<'a, V: DocView<'a>>(&self, doc: V) -> FirstValue<V> {
        let mut crossed_array = false;
        let value = first_value(doc, &self.segments, &mut crossed_array);
        if value.is_some_and(|v| v.kind() == Kind::Array) {
            crossed_array = true;
        }
        FirstValue {
            value,
            crossed_array,
        }
    }

    /// [`Path::first_value`]'s value, without walking the path where the document
    /// knows it ([`DocView::known`]).
    #[inline]
    pub fn first<'a, V: DocView<'a>>(&self, doc: V) -> Option<V> {
        match doc.known(self) {
            Some(known) => known,
            None => self.first_value(doc).value,
        }
    }
}

/// See [`Path::first_value`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FirstValue<V> {
    pub value: Option<V>,
    pub crossed_array: bool,
}

fn any_value<'a, V: DocView<'a>>(
    value: V,
    segments: &[Segment],
    visit: &mut impl FnMut(V) -> bool,
) -> bool {
    let Some((segment, rest)) = segments.split_first() else {
        return visit(value);
    };
    match value.kind() {
        Kind::Object => value
            .get_segment(segment)
            .is_some_and(|child| any_value(child, rest, visit)),
        Kind::Array => {
            if let Some(child) = segment.index.and_then(|i| value.element(i))
                && any_value(child, rest, visit)
            {
                return true;
            }
            value
                .elements()
                .filter(|item| item.kind() == Kind::Object)
                .any(|item| any_value(item, segments, visit))
        }
        _ => false,
    }
}

fn first_value<'a, V: DocView<'a>>(
    value: V,
    segments: &[Segment],
    crossed_array: &mut bool,
) -> Option<V> {
    let Some((segment, rest)) = segments.split_first() else {
        return Some(value);
    };
    match value.kind() {
        Kind::Object => first_value(value.get_segment(segment)?, rest, crossed_array),
        Kind::Array => {
            *crossed_array = true;
            if let Some(found) = segment
                .index
                .and_then(|i| value.element(i))
                .and_then(|child| first_value(child, rest, crossed_array))
            {
                return Some(found);
            }
            value
                .elements()
                .filter(|item| item.kind() == Kind::Object)
                .find_map(|item| first_value(item, segments, crossed_array))
        }
        _ => None,
    }
}

fn index(segment: &str) -> Option<usize> {
    if segment.bytes().all(|b| b.is_ascii_digit()) {
        segment.parse().ok()
    } else {
        None
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Path({})", self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn all(doc: &Value, path: &str) -> Vec<Value> {
        let mut out = vec![];
        Path::parse(path, "t").unwrap().any_value(doc, &mut |v| {
            out.push(v.clone());
            false
        });
        out
    }

    #[test]
    fn renames_whole_leading_segments_only() {
        let renames = [
            ("errorMessage.message", "message"),
            ("eventTime", "eventDate"),
        ];
        let renamed = |p: &str| {
            Path::parse(p, "t")
                .unwrap()
                .renamed_by(&renames)
                .as_str()
                .to_string()
        };
        assert_eq!(renamed("eventTime"), "eventDate");
        assert_eq!(renamed("errorMessage.message"), "message");
        assert_eq!(renamed("errorMessage.errorCode"), "errorMessage.errorCode");
        assert_eq!(renamed("eventTimes"), "eventTimes");
        assert_eq!(renamed("eventTime.x"), "eventDate.x");
    }

    #[test]
    fn resolves_through_objects_and_arrays_of_objects() {
        let doc = json!({"a": {"b": 1}, "r": [{"t": 1}, {"t": [2, 3]}, 7, {"u": 0}]});
        assert_eq!(all(&doc, "a.b"), vec![json!(1)]);
        assert_eq!(all(&doc, "r.t"), vec![json!(1), json!([2, 3])]);
        assert_eq!(all(&doc, "r.1.t"), vec![json!([2, 3])]);
        assert_eq!(all(&doc, "a.c"), Vec::<Value>::new());
        assert_eq!(all(&doc, "a.b.c"), Vec::<Value>::new());
    }

    #[test]
    fn first_value_reports_arrays() {
        let doc = json!({"a": {"b": 1}, "r": [{"t": 1}, {"t": 2}], "l": [1]});
        let p = |s| Path::parse(s, "t").unwrap();
        assert_eq!(
            p("a.b").first_value(&doc),
            FirstValue {
                value: Some(&json!(1)),
                crossed_array: false
            }
        );
        assert_eq!(
            p("r.t").first_value(&doc),
            FirstValue {
                value: Some(&json!(1)),
                crossed_array: true
            }
        );
        assert!(p("l").first_value(&doc).crossed_array);
        assert_eq!(
            p("x.y").first_value(&doc),
            FirstValue {
                value: None,
                crossed_array: false
            }
        );
    }

    #[test]
    fn malformed_paths() {
        assert!(
            Path::parse("", "sort")
                .unwrap_err()
                .message
                .contains("empty")
        );
        assert!(
            Path::parse("a..b", "sort")
                .unwrap_err()
                .message
                .contains("'a..b'")
        );
        assert!(Path::parse(".a", "sort").is_err());
        assert!(Path::parse("a.", "sort").is_err());
    }
}
