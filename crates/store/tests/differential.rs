//! Random documents and random list queries through the evaluator (the reference),
//! SQLite and PostgreSQL: all three must answer the same total and the same page.
//!
//! Some paths are indexed (SQL decides), some are not (the evaluator decides on what SQL
//! narrowed down), and documents put arrays on indexed paths now and then, so every way
//! of answering in `pushdown.rs` is exercised.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};

use drover_domain::dates::WireDates;
use drover_query::testing::{document, filter, sort};
use drover_query::{Filter, ListQuery, Paging, Sort};
use drover_store::{Body, CollectionSpec, Write};
use proptest::prelude::*;

fn spec(name: &str) -> CollectionSpec {
    CollectionSpec::new(name)
        .index(&["a"])
        .index(&["b.c", "n"])
        .index(&["r.x"])
        .index(&["b"])
        // Rows whose `a` is "a" are left out of this one; their queries go elsewhere.
        .index_newest_first_except(&["a", "n"], serde_json::json!("a"))
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
        // Every other document arrives as text (as the engine writes them): the store
        // indexes the paths it reads out of the text, which must answer the same.
        let writes: Vec<Write> = docs.iter().enumerate().map(|(i, d)| Write::Insert {
            collection: collection.clone(), id: format!("d{i}"), name: None,
            body: if i % 2 == 0 { d.clone().into() } else { Body::serialize(d).unwrap() },
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
