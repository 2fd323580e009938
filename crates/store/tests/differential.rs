//! Random documents and random list queries through the evaluator (the reference),
//! SQLite and PostgreSQL: all three must answer the same total and the same page.
//!
//! Some paths are indexed (SQL decides), some are not (the evaluator decides on what SQL
//! narrowed down), and documents put arrays on indexed paths now and then, so every way
//! of answering in `plan.rs` is exercised.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};

use drover_domain::dates::WireDates;
use drover_query::{Filter, ListQuery, Paging, Sort};
use drover_store::{CollectionSpec, Write};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1i64..3).prop_map(|n| json!(n)),
        Just(json!(1.5)),
        Just(json!(-0.0)),
        prop::sample::select(vec![
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

fn value() -> impl Strategy<Value = Value> {
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
fn document() -> impl Strategy<Value = Value> {
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

/// Indexed paths come up more often than the others, so that SQL decides often.
fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec!["a", "b.c", "n", "b"]),
        1 => prop::sample::select(vec!["b.x", "r.x", "r", "z"]),
    ]
    .prop_map(String::from)
}

fn condition() -> impl Strategy<Value = Value> {
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

fn filter() -> impl Strategy<Value = Value> {
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

fn sort() -> impl Strategy<Value = Value> {
    prop::collection::vec((path(), prop::sample::select(vec![1, -1])), 0..3)
        .prop_map(|keys| Value::Object(keys.into_iter().map(|(p, d)| (p, json!(d))).collect()))
}

fn spec(name: &str) -> CollectionSpec {
    CollectionSpec::new(name)
        .index(&["a"])
        .index(&["b.c", "n"])
        .index(&["r.x"])
        .index(&["b"])
}

static CASE: AtomicUsize = AtomicUsize::new(0);

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn stores_answer_like_the_evaluator(
        docs in prop::collection::vec(document(), 0..24),
        filter in filter(),
        sort in sort(),
        offset in prop::option::of(0usize..6),
        max in prop::option::of(0usize..8),
    ) {
        let query = ListQuery {
            filter: Filter::parse(&filter, &WireDates::utc()).unwrap(),
            sort: Sort::parse(&sort).unwrap(),
            paging: Paging { offset: offset.unwrap_or(0), max },
        };
        let reference = query.run(&docs);
        let expected: Vec<String> = reference
            .items
            .iter()
            .map(|v| format!("d{}", docs.iter().position(|d| std::ptr::eq(d, *v)).unwrap()))
            .collect();

        let collection = format!("c{}", CASE.fetch_add(1, Ordering::SeqCst));
        let writes: Vec<Write> = docs.iter().enumerate().map(|(i, d)| Write::Insert {
            collection: collection.clone(), id: format!("d{i}"), name: None, body: d.clone(),
        }).collect();
        for backend in backends() {
            let store = &*backend.store;
            store.ensure_collection(&spec(&collection)).unwrap();
            store.write(&writes).unwrap();
            let page = store.list(&collection, &query).unwrap();
            prop_assert_eq!(page.total, reference.total, "{} total for {} sort {}", store.backend(), filter, sort);
            let got: Vec<String> = page.items.iter().map(|d| d.id.clone()).collect();
            prop_assert_eq!(&got, &expected, "{}: {} sort {} paging {:?}\ndocs {:?}",
                store.backend(), filter, sort, query.paging, docs);
        }
    }
}

/// One SQLite and (when configured) one PostgreSQL store for the whole test, shared
/// across cases: each case uses a collection of its own.
fn backends() -> &'static [support::Backend] {
    use std::sync::OnceLock;
    static ALL: OnceLock<Vec<support::Backend>> = OnceLock::new();
    ALL.get_or_init(support::backends)
}
