//! A document's content on its way into the store, and the indexed values read out of it.
//!
//! Most writers build a [`serde_json::Value`] and hand it over. The scheduler's journal
//! and the event recorder write many documents per second from typed structs: building a
//! `Value` (an allocated map and key per member) only to serialize it again cost them
//! more than the rest of their work. They serialize the struct straight to text
//! ([`Body::serialize`]); the store then reads only the indexed paths back out of that
//! text ([`select`]), skipping everything else without allocating.

use std::borrow::Cow;
use std::fmt;

use drover_query::Path;
use serde::Serialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// What a document holds: a JSON value, or the JSON text of one.
#[derive(Debug, Clone, PartialEq)]
pub struct Body(Repr);

#[derive(Debug, Clone, PartialEq)]
enum Repr {
    Value(Value),
    /// Produced by `serde_json` from a `Serialize` type, so always valid JSON.
    Text(String),
}

impl Body {
    /// The JSON text of `value`, without an intermediate `Value`.
    pub fn serialize<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Body> {
        // Job-like documents take about a kilobyte: start there rather than grow from 128 bytes.
        let mut bytes = Vec::with_capacity(1024);
        serde_json::to_writer(&mut bytes, value)?;
        // serde_json writes UTF-8 only.
        let text = String::from_utf8(bytes).expect("serde_json writes UTF-8");
        Ok(Body(Repr::Text(text)))
    }

    /// The document as JSON text.
    pub fn text(&self) -> serde_json::Result<Cow<'_, str>> {
        match &self.0 {
            Repr::Text(text) => Ok(Cow::Borrowed(text)),
            Repr::Value(value) => {
                let mut bytes = Vec::with_capacity(1024);
                serde_json::to_writer(&mut bytes, value)?;
                Ok(Cow::Owned(
                    String::from_utf8(bytes).expect("serde_json writes UTF-8"),
                ))
            }
        }
    }

    /// What indexing `paths` needs of the document: the document itself, or for text, a
    /// value holding only what lies along those paths (see [`select`]).
    pub(crate) fn indexed_part(&self, paths: &PathTree) -> serde_json::Result<Cow<'_, Value>> {
        match &self.0 {
            Repr::Value(value) => Ok(Cow::Borrowed(value)),
            Repr::Text(_) if paths.is_empty() => Ok(Cow::Owned(Value::Null)),
            Repr::Text(text) => select(text, paths).map(Cow::Owned),
        }
    }
}

impl From<Value> for Body {
    fn from(value: Value) -> Self {
        Body(Repr::Value(value))
    }
}

/// Indexed paths merged into a tree of member names.
#[derive(Debug, Clone, Default)]
pub(crate) struct PathTree {
    /// A path ends here: the whole value below is needed.
    whole: bool,
    /// Some path goes on by an array index here (`a.0.b`): arrays below keep every element.
    by_index: bool,
    children: Vec<(Box<str>, PathTree)>,
}

impl PathTree {
    pub fn new(paths: &[Path]) -> Self {
        let mut root = PathTree::default();
        for path in paths {
            let mut node = &mut root;
            for segment in path.segments() {
                node.by_index |= segment.index.is_some();
                let at = match node.children.iter().position(|(n, _)| *n == segment.name) {
                    Some(at) => at,
                    None => {
                        node.children
                            .push((segment.name.clone(), PathTree::default()));
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[at].1;
            }
            node.whole = true;
        }
        root
    }

    pub fn is_empty(&self) -> bool {
        !self.whole && self.children.is_empty()
    }

    fn child(&self, name: &str) -> Option<&PathTree> {
        self.children
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, child)| child)
    }
}

/// The parts of the JSON document `text` that the paths of `tree` can reach, in a value
/// of the same shape: every path resolves in it exactly as in the whole document
/// ([`Path::first_value`], [`Path::any_value`]). Members off the paths are skipped
/// unparsed; inside arrays, path resolution only looks into objects, so other elements
/// are dropped (unless a path indexes the array, which then stays whole).
pub(crate) fn select(text: &str, tree: &PathTree) -> serde_json::Result<Value> {
    let mut reader = serde_json::Deserializer::from_str(text);
    let value = Select(tree).deserialize(&mut reader)?;
    reader.end()?;
    Ok(value)
}

/// Deserializes the part of a value that `0` reaches.
struct Select<'t>(&'t PathTree);

impl<'de> DeserializeSeed<'de> for Select<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        if self.0.whole || self.0.by_index {
            return serde::Deserialize::deserialize(deserializer);
        }
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Select<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut kept = Map::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match self.0.child(&key) {
                Some(child) => {
                    let value = map.next_value_seed(Select(child))?;
                    kept.insert(key.into_owned(), value);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(kept))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut kept = Vec::new();
        while let Some(element) = seq.next_element_seed(Element(self.0))? {
            kept.extend(element);
        }
        Ok(Value::Array(kept))
    }

    // A scalar where a path wanted to go deeper: the path resolves to nothing in it,
    // as in null.
    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_str<E>(self, _: &str) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// An array element: kept (pruned) when it is an object, dropped otherwise.
struct Element<'t>(&'t PathTree);

impl<'de> DeserializeSeed<'de> for Element<'_> {
    type Value = Option<Value>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Option<Value>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Element<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<Value>, A::Error> {
        Select(self.0).visit_map(map).map(Some)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Value>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_query::order;
    use proptest::prelude::*;
    use serde_json::json;

    fn tree(paths: &[&str]) -> (Vec<Path>, PathTree) {
        let paths: Vec<Path> = paths
            .iter()
            .map(|p| Path::parse(p, "index").unwrap())
            .collect();
        let tree = PathTree::new(&paths);
        (paths, tree)
    }

    #[test]
    fn keeps_only_what_the_paths_reach() {
        let (_, tree) = tree(&["a", "b.c", "r.x"]);
        let doc = json!({
            "a": {"deep": [1, 2]},
            "b": {"c": 1, "d": "skipped"},
            "r": [{"x": 1, "y": 2}, 3, [4], {"y": 5}],
            "s": "skipped"
        });
        let kept = select(&doc.to_string(), &tree).unwrap();
        assert_eq!(
            kept,
            json!({"a": {"deep": [1, 2]}, "b": {"c": 1}, "r": [{"x": 1}, {}]})
        );
    }

    #[test]
    fn an_indexed_array_stays_whole_and_bad_text_is_an_error() {
        let (_, tree) = tree(&["r.1.x"]);
        let doc = json!({"r": [7, {"x": 1, "y": 2}], "s": 1});
        assert_eq!(
            select(&doc.to_string(), &tree).unwrap(),
            json!({"r": [7, {"x": 1, "y": 2}]})
        );
        assert!(select("{\"r\": [", &tree).is_err());
        assert!(select("{} trailing", &tree).is_err());
    }

    proptest! {
        /// The order keys of every testing path agree between the whole document and
        /// what `select` keeps of its text: indexing text is exact.
        #[test]
        fn indexing_the_selection_is_indexing_the_document(doc in drover_query::testing::document()) {
            let (paths, tree) = tree(&["a", "b", "b.c", "b.x", "n", "r", "r.x", "r.0", "r.1.x", "z"]);
            let kept = select(&doc.to_string(), &tree).unwrap();
            for path in &paths {
                let whole = path.first_value(&doc);
                let part = path.first_value(&kept);
                prop_assert_eq!(order::key(whole.value), order::key(part.value), "{}", path.as_str());
                prop_assert_eq!(whole.crossed_array, part.crossed_array, "{}", path.as_str());
            }
        }
    }
}
