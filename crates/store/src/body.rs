//! A document's content on its way into the store, and the indexed values read out of it.
//!
//! Most writers build a [`serde_json::Value`] and hand it over. The scheduler's journal
//! and the event recorder write many documents per second from typed structs: building a
//! `Value` (an allocated map and key per member) only to serialize it again cost them
//! more than the rest of their work. They serialize the struct straight to text
//! ([`Body::serialize`]); the store then reads only the indexed paths back out of that
//! text ([`members`] when each path is one member name, else [`select`]), skipping
//! everything else by its delimiters.

use std::borrow::Cow;

use drover_query::Path;
use memchr::memmem;
use serde::Serialize;
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

    /// A text body of any text, to test how the store reads text it did not expect.
    #[cfg(test)]
    pub(crate) fn unchecked_text(text: &str) -> Body {
        Body(Repr::Text(text.to_string()))
    }

    /// The JSON text, for a body that came as text.
    pub(crate) fn as_text(&self) -> Option<&str> {
        match &self.0 {
            Repr::Text(text) => Some(text),
            Repr::Value(_) => None,
        }
    }

    /// What indexing `paths` needs of the document: the document itself, or for text, a
    /// value holding only what lies along those paths (see [`select`]).
    /// `None` for a text body that is not JSON.
    pub(crate) fn indexed_part(&self, paths: &PathTree) -> Option<Cow<'_, Value>> {
        match &self.0 {
            Repr::Value(value) => Some(Cow::Borrowed(value)),
            Repr::Text(_) if paths.is_empty() => Some(Cow::Owned(Value::Null)),
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
/// `None` for text that is not JSON as far as the scanner reads it (text bodies come from
/// serde_json, so this is a bug's sign; values no path reaches are skipped unchecked).
pub(crate) fn select(text: &str, tree: &PathTree) -> Option<Value> {
    let mut scanner = Scanner { text, at: 0 };
    let value = scanner.value(tree)?;
    scanner.rest_is_blank().then_some(value)
}

/// Indexed paths that are each one member name, and what finds each name quoted.
#[derive(Debug, Clone)]
pub(crate) struct MemberNames {
    names: Vec<String>,
    quoted: Vec<memmem::Finder<'static>>,
}

impl MemberNames {
    pub fn new(names: Vec<String>) -> Self {
        let quoted = names
            .iter()
            .map(|name| memmem::Finder::new(format!("\"{name}\"").as_bytes()).into_owned())
            .collect();
        Self { names, quoted }
    }

    /// Whether no member of these names can be in `rest`: none is there as a quoted
    /// string and nothing is escaped (an escaped key could spell one).
    fn cannot_be_in(&self, rest: &str) -> bool {
        let rest = rest.as_bytes();
        memchr::memchr(b'\\', rest).is_none() && self.quoted.iter().all(|q| q.find(rest).is_none())
    }
}

/// The values of the members `names` of the JSON object `text` (`None` for a missing
/// one), as [`select`] would keep them: for paths of one member each, all that indexing
/// needs, without building an object. `None` when `text` is not an object this scanner
/// reads (the caller then uses [`select`]).
///
/// Reading stops once every name is found and the rest of the text cannot repeat one
/// (typed documents put their indexed members first: an event's are in its first 150 of
/// 450 bytes). The rest is then not checked: text bodies come from serde_json.
pub(crate) fn members(text: &str, names: &MemberNames) -> Option<Vec<Option<Value>>> {
    let mut scanner = Scanner { text, at: 0 };
    let mut found = vec![None; names.names.len()];
    let mut missing = found.len();
    scanner.eat(b'{')?;
    if scanner.peek()? == b'}' {
        scanner.at += 1;
        return scanner.rest_is_blank().then_some(found);
    }
    loop {
        let (raw, escaped) = scanner.string()?;
        scanner.eat(b':')?;
        if escaped {
            return None;
        }
        match names.names.iter().position(|n| *n == raw) {
            Some(slot) => {
                missing -= usize::from(found[slot].is_none());
                // A repeated member: the last one counts, as in a parsed value.
                found[slot] = Some(scanner.whole()?);
                if missing == 0 && names.cannot_be_in(&text[scanner.at..]) {
                    return Some(found);
                }
            }
            None => scanner.skip()?,
        }
        if !scanner.another(b'}')? {
            return scanner.rest_is_blank().then_some(found);
        }
    }
}

/// A cursor over JSON text that skips what no path reaches by looking only for the bytes
/// that end it (quotes, brackets, commas), and hands what a path wants whole to serde.
/// Every method answers `None` on anything unexpected.
struct Scanner<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(&b) = bytes.get(self.at) {
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(b);
            }
            self.at += 1;
        }
        None
    }

    fn eat(&mut self, expected: u8) -> Option<()> {
        (self.peek()? == expected).then(|| self.at += 1)
    }

    /// After a member or an element: `true` past a comma (another follows), `false`
    /// past the `close`ing bracket, `None` at anything else.
    fn another(&mut self, close: u8) -> Option<bool> {
        let next = self.peek()?;
        if next != b',' && next != close {
            return None;
        }
        self.at += 1;
        Some(next == b',')
    }

    fn rest_is_blank(&mut self) -> bool {
        self.peek().is_none()
    }

    /// The part of the value here that `tree` reaches (see [`select`]).
    fn value(&mut self, tree: &PathTree) -> Option<Value> {
        if tree.whole || tree.by_index {
            return self.whole();
        }
        match self.peek()? {
            b'{' => self.object(tree),
            b'[' => {
                self.at += 1;
                let mut kept = Vec::new();
                if self.peek()? == b']' {
                    self.at += 1;
                    return Some(Value::Array(kept));
                }
                loop {
                    if self.peek()? == b'{' {
                        kept.push(self.object(tree)?);
                    } else {
                        self.skip()?;
                    }
                    if !self.another(b']')? {
                        return Some(Value::Array(kept));
                    }
                }
            }
            _ => {
                self.skip()?;
                Some(Value::Null)
            }
        }
    }

    fn object(&mut self, tree: &PathTree) -> Option<Value> {
        self.eat(b'{')?;
        let mut kept = Map::with_capacity(tree.children.len());
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(Value::Object(kept));
        }
        loop {
            let (raw, escaped) = self.string()?;
            self.eat(b':')?;
            let key: Cow<'a, str> = if escaped {
                Cow::Owned(serde_json::from_str(&format!("\"{raw}\"")).ok()?)
            } else {
                Cow::Borrowed(raw)
            };
            match tree.child(&key) {
                Some(child) => {
                    let value = self.value(child)?;
                    kept.insert(key.into_owned(), value);
                }
                None => self.skip()?,
            }
            if !self.another(b'}')? {
                return Some(Value::Object(kept));
            }
        }
    }

    /// The string here, without its quotes and unescaped, and whether it has escapes.
    fn string(&mut self) -> Option<(&'a str, bool)> {
        self.eat(b'"')?;
        let start = self.at;
        let bytes = self.text.as_bytes();
        let mut escaped = false;
        loop {
            match *bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    let text: &'a str = self.text;
                    return Some((&text[start..self.at - 1], escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.at += 2;
                }
                _ => self.at += 1,
            }
        }
    }

    /// Moves past the value here.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                let bytes = self.text.as_bytes();
                let mut depth = 0usize;
                loop {
                    match *bytes.get(self.at)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                // A number, true, false or null: up to what ends it.
                let bytes = self.text.as_bytes();
                let start = self.at;
                while let Some(&b) = bytes.get(self.at) {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.at += 1;
                }
                (self.at > start).then_some(())
            }
        }
    }

    /// The whole value here, parsed by serde_json (plain strings, the most common, here).
    fn whole(&mut self) -> Option<Value> {
        if self.peek()? == b'"' {
            let from = self.at;
            let (raw, escaped) = self.string()?;
            if !escaped {
                return Some(Value::String(raw.to_string()));
            }
            self.at = from;
        }
        let mut values =
            serde_json::Deserializer::from_str(&self.text[self.at..]).into_iter::<Value>();
        let value = values.next()?.ok()?;
        self.at += values.byte_offset();
        Some(value)
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
        assert!(select("{\"r\": [", &tree).is_none());
        assert!(select("{} trailing", &tree).is_none());
    }

    #[test]
    fn escaped_keys_and_blank_text_are_read_bad_text_is_an_error() {
        let (_, tree) = tree(&["a\"b", "c"]);
        let text = "{ \"x\" : [1, {\"y\": \"}\"}] ,\n \"a\\\"b\" : 1, \"c\": {\"d\": [\"]\"]} }";
        assert_eq!(
            select(text, &tree).unwrap(),
            json!({"a\"b": 1, "c": {"d": ["]"]}})
        );
        for bad in ["{\"c\": }", "{\"c\": 1", "{\"c\": 1} 2", "[1, }", "\"open"] {
            assert!(select(bad, &tree).is_none(), "{bad}");
        }
    }

    #[test]
    fn members_stop_reading_once_the_rest_cannot_repeat_one() {
        let names = MemberNames::new(vec!["a".into(), "b".into()]);
        let read = |text| {
            members(text, &names).map(|found| found.into_iter().flatten().collect::<Vec<_>>())
        };
        // The rest is not read: garbage there goes unseen.
        assert_eq!(
            read(r#"{"a": 1, "b": 2, "c": [garbage"#),
            Some(vec![json!(1), json!(2)])
        );
        // Unless it could hold a repeated member: then all of it is read.
        assert_eq!(read(r#"{"a": 1, "b": 2, "c": ["a", garbage"#), None);
        assert_eq!(read(r#"{"a": 1, "b": 2, "c": "\n", garbage"#), None);
        assert_eq!(
            read(r#"{"a": 1, "b": 2, "ab": 3, "a": 4}"#),
            Some(vec![json!(4), json!(2)])
        );
        // A missing member: all of it is read.
        assert_eq!(read(r#"{"a": 1, "c": [garbage"#), None);
    }

    proptest! {
        /// The order keys of every testing path agree between the whole document and
        /// what `select` keeps of its text: indexing text is exact.
        #[test]
        fn indexing_the_selection_is_indexing_the_document(doc in drover_query::testing::document()) {
            let (paths, tree) = tree(&["a", "b", "b.c", "b.x", "n", "r", "r.x", "r.0", "r.1.x", "z"]);
            let kept = select(&doc.to_string(), &tree).unwrap();
            // Whitespace between tokens changes nothing.
            let pretty = serde_json::to_string_pretty(&doc).unwrap();
            prop_assert_eq!(&kept, &select(&pretty, &tree).unwrap());
            for path in &paths {
                let whole = path.first_value(&doc);
                let part = path.first_value(&kept);
                prop_assert_eq!(order::key(whole.value), order::key(part.value), "{}", path.as_str());
                prop_assert_eq!(whole.crossed_array, part.crossed_array, "{}", path.as_str());
            }
        }
    }
}
