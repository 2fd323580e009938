//! `fields` and `exclude-fields`: which parts of each returned document are kept.
//!
//! Both take comma-separated dotted paths. A path reaches into objects and into arrays
//! of objects (`requirements.taskCount` keeps `taskCount` in every element of
//! `requirements`). With `fields`, everything not named is dropped (array elements that
//! are not objects are dropped under a nested path); with `exclude-fields`, what is named
//! is removed. Given both, `fields` is applied first.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::{Path, QueryError};

/// A parsed projection; the default keeps documents whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Projection {
    include: Option<Node>,
    exclude: Option<Node>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Node {
    /// The path ends here: the whole value is selected.
    whole: bool,
    children: BTreeMap<String, Node>,
}

impl Projection {
    /// Parses the texts of the `fields` and `exclude-fields` parameters.
    pub fn parse(fields: Option<&str>, exclude: Option<&str>) -> Result<Projection, QueryError> {
        Ok(Projection {
            include: fields.map(|t| parse_list(t, "fields")).transpose()?,
            exclude: exclude
                .map(|t| parse_list(t, "exclude-fields"))
                .transpose()?,
        })
    }

    pub fn is_identity(&self) -> bool {
        self.include.is_none() && self.exclude.is_none()
    }

    /// Applies the projection to one document.
    pub fn apply(&self, doc: Value) -> Value {
        let doc = match &self.include {
            Some(node) => include(doc, node).unwrap_or(Value::Object(Map::new())),
            None => doc,
        };
        match &self.exclude {
            Some(node) => exclude(doc, node),
            None => doc,
        }
    }
}

fn parse_list(text: &str, what: &str) -> Result<Node, QueryError> {
    let mut root = Node::default();
    for name in text.split(',') {
        let name = name.trim();
        if name.is_empty() {
            return Err(QueryError::new(format!(
                "{what}: empty field name in '{text}' (expected comma-separated field names)"
            )));
        }
        let path = Path::parse(name, what)?;
        let mut node = &mut root;
        for segment in path.segments() {
            node = node.children.entry(segment.name.to_string()).or_default();
        }
        node.whole = true;
    }
    Ok(root)
}

/// The part of `value` that `node` selects, or `None` when it selects nothing of it.
fn include(value: Value, node: &Node) -> Option<Value> {
    if node.whole {
        return Some(value);
    }
    match value {
        Value::Object(map) => Some(Value::Object(
            map.into_iter()
                .filter_map(|(k, v)| {
                    let child = node.children.get(&k)?;
                    include(v, child).map(|v| (k, v))
                })
                .collect(),
        )),
        Value::Array(items) => Some(Value::Array(
            items
                .into_iter()
                .filter(|item| item.is_object() || item.is_array())
                .filter_map(|item| include(item, node))
                .collect(),
        )),
        _ => None,
    }
}

fn exclude(value: Value, node: &Node) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter_map(|(k, v)| match node.children.get(&k) {
                    Some(child) if child.whole => None,
                    Some(child) => Some((k, exclude(v, child))),
                    None => Some((k, v)),
                })
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|item| exclude(item, node)).collect())
        }
        other => other,
    }
}
