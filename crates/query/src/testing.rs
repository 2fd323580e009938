//! Generators of random documents and list queries, for property tests of anything
//! that must answer like the evaluator (the compact form, the stores). Enabled by the
//! `testing` feature; not part of the service.
//!
//! Values come from small pools so that documents and literals often collide, which is
//! where boundary mistakes show. Paths: `a`, `b`, `b.c`, `b.x`, `n`, `r`, `r.x` (`r` is an
//! array of objects), `z` (never present).

use proptest::prelude::*;
use serde_json::{Map, Value, json};

pub fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => (-1i64..3).prop_map(|n| json!(n)),
        1 => Just(json!(1.5)),
        1 => Just(json!(-0.0)),
        3 => prop::sample::select(vec![
            "",
            "a",
            "ab",
            "é",
            "2026-01-01 00:00:00 UTC",
            "2026-01-01 00:00:00 GMT",
            "2025-06-30 12:00:00 UTC",
            "2026-01-01 01:00:00 CET"
        ])
        .prop_map(|s| json!(s)),
    ]
}

pub fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(vec!["x", "y"]), inner), 0..3).prop_map(
                |kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            ),
        ]
    })
}

/// Mostly scalars on the top fields, sometimes arrays and objects.
pub fn document() -> impl Strategy<Value = Value> {
    let field =
        prop_oneof![12 => scalar().prop_map(Some), 3 => Just(None), 1 => value().prop_map(Some)];
    let r = prop_oneof![4 => Just(vec![]), 1 => prop::collection::vec(value(), 1..3)];
    (field.clone(), field.clone(), field.clone(), field, r).prop_map(|(a, b, c, n, r)| {
        let mut m = Map::new();
        if let Some(a) = a {
            m.insert("a".into(), a);
        }
        if let Some(c) = c {
            m.insert("b".into(), json!({"c": c, "x": b.clone()}));
        } else if let Some(b) = b {
            m.insert("b".into(), b);
        }
        if let Some(n) = n {
            m.insert("n".into(), n);
        }
        if !r.is_empty() {
            m.insert(
                "r".into(),
                Value::Array(r.into_iter().map(|x| json!({"x": x})).collect()),
            );
        }
        Value::Object(m)
    })
}

/// `a`, `b.c`, `n` and `b` come up more often (the differential test indexes them).
pub fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec!["a", "b.c", "n", "b"]),
        1 => prop::sample::select(vec!["b.x", "r.x", "r", "z"]),
    ]
    .prop_map(String::from)
}

pub fn condition() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => prop_oneof![3 => scalar(), 1 => value()],
        4 => (prop::sample::select(vec!["$eq", "$ne", "$lt", "$lte", "$gt", "$gte"]),
              prop_oneof![3 => scalar(), 1 => value()])
            .prop_map(|(op, v)| json!({op: v})),
        1 => (prop::sample::select(vec!["$in", "$nin"]), prop::collection::vec(scalar(), 0..3))
            .prop_map(|(op, v)| json!({op: v})),
        1 => any::<bool>().prop_map(|b| json!({"$exists": b})),
        1 => prop::sample::select(vec![json!(10), json!(2), json!(1), json!("array"), json!(3), json!(8), json!(9)])
            .prop_map(|t| json!({"$type": t})),
    ]
}

pub fn filter() -> impl Strategy<Value = Value> {
    let leaf = prop::collection::vec((path(), condition()), 0..3)
        .prop_map(|fields| Value::Object(fields.into_iter().collect()));
    leaf.prop_recursive(2, 6, 3, |inner| {
        (
            prop::sample::select(vec!["$and", "$or"]),
            prop::collection::vec(inner, 1..3),
        )
            .prop_map(|(op, parts)| json!({op: parts}))
    })
}

pub fn sort() -> impl Strategy<Value = Value> {
    prop::collection::vec((path(), prop::sample::select(vec![1, -1])), 0..3)
        .prop_map(|keys| Value::Object(keys.into_iter().map(|(p, d)| (p, json!(d))).collect()))
}
