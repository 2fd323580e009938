//! The compact form answers exactly like `serde_json::Value`.

use drover_domain::dates::WireDates;
use drover_query::compact::CompactDocs;
use drover_query::order::{compare, compare_values};
use drover_query::scan::Prepared;
use drover_query::testing::{document, filter, sort, value};
use drover_query::{CompactDoc, Filter, Sort};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn filters_match_the_same_documents(doc in document(), filter in filter()) {
        let filter = Filter::parse(&filter, &WireDates::utc()).unwrap();
        let compact = CompactDoc::new(&doc);
        prop_assert_eq!(filter.matches(&doc), filter.matches(compact.root()));
        prop_assert_eq!(filter.matches(&doc), Prepared::new(&filter).matches(compact.root()));
    }

    #[test]
    fn values_order_the_same(a in value(), b in value()) {
        let (ca, cb) = (CompactDoc::new(&a), CompactDoc::new(&b));
        prop_assert_eq!(compare_values(&a, &b), compare_values(ca.root(), cb.root()));
        prop_assert_eq!(compare_values(&a, &b), compare_values(ca.root(), &b));
    }

    #[test]
    fn sort_values_are_the_same(a in document(), b in document(), sort in sort()) {
        let sort = Sort::parse(&sort).unwrap();
        let (ca, cb) = (CompactDoc::new(&a), CompactDoc::new(&b));
        for (path, _) in &sort.keys {
            let (x, y) = (path.first_value(&a), path.first_value(ca.root()));
            prop_assert_eq!(x.crossed_array, y.crossed_array);
            prop_assert_eq!(compare(x.value, y.value), std::cmp::Ordering::Equal);
            prop_assert_eq!(
                compare(path.first_value(&a).value, path.first_value(&b).value),
                compare(path.first_value(ca.root()).value, path.first_value(cb.root()).value)
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_scan_of_one_buffer_keeps_exactly_the_matches(docs in proptest::collection::vec(document(), 0..40), filter in filter()) {
        let filter = Filter::parse(&filter, &WireDates::utc()).unwrap();
        let mut compact = CompactDocs::default();
        docs.iter().for_each(|d| compact.push(d));
        let expected: Vec<usize> = (0..docs.len()).filter(|&i| filter.matches(&docs[i])).collect();
        prop_assert_eq!(compact.matching(&filter).collect::<Vec<_>>(), expected);
    }
}

/// Deeper than the generators go: a path goes on through an array's objects only, not
/// into arrays nested in it, and a resolved array matches by its elements.
#[test]
fn prepared_filters_walk_arrays_like_the_evaluator() {
    let doc = serde_json::json!({"b": [[{"x": 1}], {"x": 2}, {"x": [3, [4]]}], "n": [[5]]});
    let compact = CompactDoc::new(&doc);
    for (filter, expected) in [
        (r#"{"b.x": 1}"#, false),
        (r#"{"b.x": 2}"#, true),
        (r#"{"b.x": 3}"#, true),
        (r#"{"b.x": 4}"#, false),
        (r#"{"b.x": {"$gte": 3}}"#, true),
        (r#"{"b.x": {"$gt": 3}}"#, false),
        (r#"{"n": 5}"#, false),
        (r#"{"b.x": {"$nin": [2, 3]}}"#, false),
    ] {
        let filter = Filter::parse_str(filter, &WireDates::utc()).unwrap();
        assert_eq!(filter.matches(&doc), expected, "{filter:?}");
        assert_eq!(
            Prepared::new(&filter).matches(compact.root()),
            expected,
            "{filter:?}"
        );
    }
}

#[test]
fn numbers_of_every_width_keep_their_value() {
    for n in [
        0.0_f64, -0.0, 1.0, -128.0, 127.0, 128.0, -129.0, 70000.0, -2.5e9, 1e300, 0.5,
    ] {
        let doc = serde_json::json!({ "n": n });
        let compact = CompactDoc::new(&doc);
        let got = drover_query::DocView::get(compact.root(), "n")
            .and_then(drover_query::DocView::number)
            .unwrap();
        // Like the evaluator over `Value`, -0.0 reads as 0.0.
        let expected = if n == 0.0 { 0.0 } else { n };
        assert_eq!(got.to_bits(), expected.to_bits(), "{n}");
    }
}

#[test]
fn long_arrays_use_the_wide_form() {
    let doc = serde_json::json!({ "a": (0..70_000).collect::<Vec<i32>>() });
    let compact = CompactDoc::new(&doc);
    let array = drover_query::DocView::get(compact.root(), "a").unwrap();
    assert_eq!(drover_query::DocView::elements(array).count(), 70_000);
    let last = drover_query::DocView::element(array, 69_999).unwrap();
    assert_eq!(drover_query::DocView::number(last), Some(69_999.0));
}
