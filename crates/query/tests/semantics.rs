//! The query language, rule by rule, through its public API.

use drover_domain::dates::WireDates;
use drover_query::{Filter, ListQuery, Page, Paging, Projection, Sort, Top};
use serde_json::{Value, json};

fn jobs() -> Vec<Value> {
    vec![
        json!({"id": "j1", "state": "Running", "user": "alice", "procs": 4, "flags": ["RESTARTABLE"],
               "credentials": {"user": "alice", "group": "eng"},
               "requirements": [{"taskCount": 2, "features": ["gpu"]}, {"taskCount": 8}],
               "submitDate": "2026-01-05 09:00:00 UTC", "holds": [], "parent": null}),
        json!({"id": "j2", "state": "Idle", "user": "bob", "procs": 16, "flags": [],
               "credentials": {"user": "bob", "group": "ops"},
               "requirements": [{"taskCount": 1}],
               "submitDate": "2026-01-05 11:30:00 UTC", "holds": ["User"]}),
        json!({"id": "j3", "state": "Completed", "user": "alice", "procs": 1.5,
               "flags": ["RESTARTABLE", "SUSPENDABLE"],
               "credentials": {"user": "alice", "group": "ops"},
               "requirements": [], "submitDate": "2025-12-31 23:59:59 UTC", "parent": "p1"}),
        json!({"id": "j4", "state": "Idle", "user": "carol", "procs": "8",
               "credentials": {"user": "carol"}, "submitDate": null}),
    ]
}

fn ids(query: &str) -> Vec<String> {
    ids_in(query, &WireDates::utc())
}

fn ids_in(query: &str, dates: &WireDates) -> Vec<String> {
    let filter = Filter::parse_str(query, dates).unwrap_or_else(|e| panic!("{query}: {e}"));
    jobs()
        .iter()
        .filter(|d| filter.matches(*d))
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect()
}

fn error(query: &str) -> String {
    Filter::parse_str(query, &WireDates::utc())
        .unwrap_err()
        .message
}

#[test]
fn equality_and_implicit_conjunction() {
    assert_eq!(ids(r#"{}"#), ["j1", "j2", "j3", "j4"]);
    assert_eq!(ids(r#"{"state": "Idle"}"#), ["j2", "j4"]);
    assert_eq!(ids(r#"{"state": "Idle", "user": "bob"}"#), ["j2"]);
    assert_eq!(ids(r#"{"procs": 4.0}"#), ["j1"]);
    assert_eq!(
        ids(r#"{"procs": 8}"#),
        Vec::<String>::new(),
        "the string \"8\" is not 8"
    );
    assert_eq!(ids(r#"{"state": {"$eq": "Completed"}}"#), ["j3"]);
}

#[test]
fn equality_with_objects_arrays_and_null() {
    assert_eq!(
        ids(r#"{"credentials": {"group": "eng", "user": "alice"}}"#),
        ["j1"]
    );
    assert_eq!(
        ids(r#"{"credentials": {"user": "alice"}}"#),
        Vec::<String>::new()
    );
    assert_eq!(ids(r#"{"flags": ["RESTARTABLE", "SUSPENDABLE"]}"#), ["j3"]);
    assert_eq!(
        ids(r#"{"flags": "SUSPENDABLE"}"#),
        ["j3"],
        "an array matches its elements"
    );
    assert_eq!(ids(r#"{"holds": []}"#), ["j1"]);
    // null matches null and missing
    assert_eq!(ids(r#"{"parent": null}"#), ["j1", "j2", "j4"]);
    assert_eq!(ids(r#"{"submitDate": null}"#), ["j4"]);
}

#[test]
fn dotted_paths_into_objects_and_arrays_of_objects() {
    assert_eq!(ids(r#"{"credentials.group": "ops"}"#), ["j2", "j3"]);
    assert_eq!(ids(r#"{"requirements.taskCount": 8}"#), ["j1"]);
    assert_eq!(ids(r#"{"requirements.taskCount": {"$lt": 2}}"#), ["j2"]);
    assert_eq!(ids(r#"{"requirements.features": "gpu"}"#), ["j1"]);
    assert_eq!(ids(r#"{"requirements.1.taskCount": 8}"#), ["j1"]);
    assert_eq!(
        ids(r#"{"requirements.taskCount": {"$exists": true}}"#),
        ["j1", "j2"]
    );
}

#[test]
fn comparison_operators_stay_within_a_kind() {
    assert_eq!(ids(r#"{"procs": {"$gt": 4}}"#), ["j2"]);
    assert_eq!(ids(r#"{"procs": {"$gte": 4}}"#), ["j1", "j2"]);
    assert_eq!(ids(r#"{"procs": {"$lt": 4}}"#), ["j3"]);
    assert_eq!(ids(r#"{"procs": {"$lte": 4}}"#), ["j1", "j3"]);
    assert_eq!(ids(r#"{"procs": {"$gte": 1, "$lt": 16}}"#), ["j1", "j3"]);
    assert_eq!(ids(r#"{"user": {"$gt": "alice"}}"#), ["j2", "j4"]);
    assert_eq!(
        ids(r#"{"procs": {"$gt": "0"}}"#),
        ["j4"],
        "strings compare with strings only"
    );
}

#[test]
fn ne_in_nin_exists() {
    assert_eq!(ids(r#"{"state": {"$ne": "Idle"}}"#), ["j1", "j3"]);
    assert_eq!(ids(r#"{"parent": {"$ne": null}}"#), ["j3"]);
    assert_eq!(ids(r#"{"flags": {"$ne": "RESTARTABLE"}}"#), ["j2", "j4"]);
    assert_eq!(
        ids(r#"{"state": {"$in": ["Idle", "Running"]}}"#),
        ["j1", "j2", "j4"]
    );
    assert_eq!(ids(r#"{"flags": {"$in": ["SUSPENDABLE", "X"]}}"#), ["j3"]);
    assert_eq!(ids(r#"{"state": {"$nin": ["Idle", "Running"]}}"#), ["j3"]);
    assert_eq!(ids(r#"{"state": {"$in": []}}"#), Vec::<String>::new());
    assert_eq!(ids(r#"{"parent": {"$exists": true}}"#), ["j1", "j3"]);
    assert_eq!(ids(r#"{"parent": {"$exists": false}}"#), ["j2", "j4"]);
}

#[test]
fn type_operator() {
    assert_eq!(
        ids(r#"{"parent": {"$type": 10}}"#),
        ["j1"],
        "10 selects null, not missing"
    );
    assert_eq!(ids(r#"{"submitDate": {"$type": 10}}"#), ["j4"]);
    assert_eq!(ids(r#"{"procs": {"$type": 2}}"#), ["j4"]);
    assert_eq!(ids(r#"{"procs": {"$type": "number"}}"#), ["j1", "j2", "j3"]);
    assert_eq!(ids(r#"{"procs": {"$type": 1}}"#), ["j1", "j2", "j3"]);
    assert_eq!(
        ids(r#"{"credentials": {"$type": 3}}"#),
        ["j1", "j2", "j3", "j4"]
    );
    assert_eq!(ids(r#"{"holds": {"$type": "array"}}"#), ["j1", "j2"]);
    assert_eq!(ids(r#"{"submitDate": {"$type": 9}}"#), ["j1", "j2", "j3"]);
    assert_eq!(
        ids(r#"{"submitDate": {"$type": "string"}}"#),
        ["j1", "j2", "j3"]
    );
}

#[test]
fn and_or() {
    assert_eq!(
        ids(r#"{"$or": [{"state": "Running"}, {"user": "carol"}]}"#),
        ["j1", "j4"]
    );
    assert_eq!(
        ids(r#"{"$and": [{"user": "alice"}, {"flags": "SUSPENDABLE"}]}"#),
        ["j3"]
    );
    assert_eq!(
        ids(r#"{"user": "alice", "$or": [{"procs": 4}, {"procs": 16}]}"#),
        ["j1"]
    );
}

#[test]
fn dates_compare_as_instants() {
    assert_eq!(
        ids(r#"{"submitDate": {"$gte": "2026-01-05 09:00:00 UTC"}}"#),
        ["j1", "j2"]
    );
    assert_eq!(
        ids(r#"{"submitDate": {"$gt": "2026-01-05 09:00:00 GMT"}}"#),
        ["j2"]
    );
    assert_eq!(
        ids(r#"{"submitDate": {"$lt": "2026-01-01 00:00:00 UTC"}}"#),
        ["j3"]
    );
    // A date is not an ordinary string: string ranges do not reach it.
    assert_eq!(ids(r#"{"submitDate": {"$gt": "0"}}"#), Vec::<String>::new());
    // Literals in the deployment's own zone mean the same instant.
    let ny = WireDates::for_zone("America/New_York").unwrap();
    assert_eq!(
        ids_in(r#"{"submitDate": "2026-01-05 04:00:00 EST"}"#, &ny),
        ["j1"]
    );
    assert_eq!(
        ids_in(r#"{"submitDate": {"$gt": "2026-01-05 05:00:00 EST"}}"#, &ny),
        ["j2"]
    );
    assert_eq!(
        ids_in(
            r#"{"submitDate": {"$in": ["2026-01-05 06:30:00 EST"]}}"#,
            &ny
        ),
        ["j2"]
    );
}

#[test]
fn malformed_queries_are_named() {
    assert_eq!(
        error(r#"{"credentials.user": {"$foo": 1}}"#),
        "unknown operator $foo at credentials.user"
    );
    assert!(error("{").starts_with("query is not valid JSON"));
    assert!(error("[1]").starts_with("query must be a JSON object"));
    assert!(error(r#"{"$where": "1"}"#).contains("unknown top-level operator $where"));
    assert!(error(r#"{"$or": []}"#).contains("$or needs a non-empty array"));
    assert!(error(r#"{"$and": {"a": 1}}"#).contains("$and needs a non-empty array"));
    assert!(error(r#"{"$or": [1]}"#).contains("$or needs an array of query objects"));
    assert_eq!(
        error(r#"{"state": {"$in": "Idle"}}"#),
        "$in at state needs an array, got \"Idle\""
    );
    assert!(error(r#"{"state": {"$nin": 3}}"#).contains("$nin at state needs an array"));
    assert!(error(r#"{"a": {"$exists": "yes"}}"#).contains("$exists at a needs true or false"));
    assert!(error(r#"{"a": {"$type": 42}}"#).contains("$type at a: unknown type 42"));
    assert!(error(r#"{"a": {"$type": "colour"}}"#).contains("unknown type \"colour\""));
    assert!(error(r#"{"a..b": 1}"#).contains("'a..b'"));
    assert!(error(r#"{"": 1}"#).contains("empty field name"));
    assert!(error(r#"{"a": {"$gt": 1, "b": 2}}"#).contains("'b' inside the operators of a"));
}

fn sorted_ids(sort: &str) -> Vec<String> {
    let query = ListQuery {
        sort: Sort::parse_str(sort).unwrap(),
        ..Default::default()
    };
    let docs = jobs();
    query
        .run(&docs)
        .items
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn sorting_by_one_and_several_keys() {
    assert_eq!(sorted_ids(r#"{"user": 1}"#), ["j1", "j3", "j2", "j4"]);
    assert_eq!(
        sorted_ids(r#"{"user": -1}"#),
        ["j4", "j2", "j1", "j3"],
        "ties keep input order"
    );
    assert_eq!(
        sorted_ids(r#"{"user": 1, "procs": -1}"#),
        ["j1", "j3", "j2", "j4"]
    );
    assert_eq!(
        sorted_ids(r#"{"state": 1, "procs": 1}"#),
        ["j3", "j2", "j4", "j1"]
    );
    // missing < null < numbers < dates < strings
    assert_eq!(sorted_ids(r#"{"submitDate": 1}"#), ["j4", "j3", "j1", "j2"]);
    assert_eq!(sorted_ids(r#"{"procs": 1}"#), ["j3", "j1", "j2", "j4"]);
    assert_eq!(sorted_ids(r#"{"parent": 1}"#), ["j2", "j4", "j1", "j3"]);
    assert_eq!(
        sorted_ids(r#"{"requirements.taskCount": 1}"#),
        ["j3", "j4", "j2", "j1"]
    );
    assert_eq!(sorted_ids(r#"{}"#), ["j1", "j2", "j3", "j4"]);
}

#[test]
fn malformed_sorts_are_named() {
    let e = |s: &str| Sort::parse_str(s).unwrap_err().message;
    assert!(e("[1]").starts_with("sort must be a JSON object"));
    assert!(e("{").starts_with("sort is not valid JSON"));
    assert_eq!(
        e(r#"{"user": 2}"#),
        "sort direction of user must be 1 or -1, got 2"
    );
    assert!(e(r#"{"user": "up"}"#).contains("must be 1 or -1"));
    assert!(e(r#"{"a..b": 1}"#).contains("'a..b'"));
    assert_eq!(
        Sort::parse_str(r#"{"user": "-1"}"#).unwrap(),
        Sort::parse_str(r#"{"user": -1}"#).unwrap()
    );
}

fn page(max: Option<&str>, offset: Option<&str>) -> (usize, Vec<String>) {
    let query = ListQuery {
        paging: Paging::parse(max, offset).unwrap(),
        ..Default::default()
    };
    let docs = jobs();
    let page = query.run(&docs);
    let ids = page
        .items
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect();
    (page.total, ids)
}

#[test]
fn paging_edges() {
    assert_eq!(page(Some("2"), None), (4, vec!["j1".into(), "j2".into()]));
    assert_eq!(page(Some("2"), Some("3")), (4, vec!["j4".into()]));
    assert_eq!(page(None, Some("10")), (4, vec![]), "offset past the end");
    assert_eq!(page(Some("0"), None), (4, vec![]), "max 0 still counts");
    assert_eq!(page(Some("10"), Some("0")).1.len(), 4);
    for (max, offset) in [
        (Some("-1"), None),
        (Some("x"), None),
        (None, Some("1.5")),
        (None, Some("")),
    ] {
        let err = Paging::parse(max, offset).unwrap_err().message;
        assert!(err.contains("must be a non-negative integer"), "{err}");
    }
}

#[test]
fn projection_of_nested_fields() {
    let doc = jobs().remove(0);
    let fields = |f: &str| Projection::parse(Some(f), None).unwrap().apply(doc.clone());
    assert_eq!(fields("id,state"), json!({"id": "j1", "state": "Running"}));
    assert_eq!(
        fields("credentials.user"),
        json!({"credentials": {"user": "alice"}})
    );
    assert_eq!(
        fields("id, requirements.taskCount"),
        json!({"id": "j1", "requirements": [{"taskCount": 2}, {"taskCount": 8}]})
    );
    assert_eq!(fields("nothing"), json!({}));
    let excluded = Projection::parse(None, Some("requirements.features,credentials"))
        .unwrap()
        .apply(doc.clone());
    assert_eq!(
        excluded["requirements"],
        json!([{"taskCount": 2}, {"taskCount": 8}])
    );
    assert!(excluded.get("credentials").is_none());
    assert_eq!(excluded["user"], "alice");
    let both = Projection::parse(Some("credentials"), Some("credentials.group"))
        .unwrap()
        .apply(doc);
    assert_eq!(both, json!({"credentials": {"user": "alice"}}));
}

#[test]
fn malformed_fields_are_named() {
    let e = |f: &str| Projection::parse(Some(f), None).unwrap_err().message;
    assert!(e("a,,b").contains("fields: empty field name"));
    assert!(e("").contains("empty field name"));
    assert!(e("a..b").contains("'a..b'"));
    let e = Projection::parse(None, Some("x,")).unwrap_err().message;
    assert!(e.starts_with("exclude-fields: empty field name"), "{e}");
}

#[test]
fn a_streamed_run_answers_what_a_run_over_all_documents_does() {
    let docs = jobs();
    for (filter, sort, max, offset) in [
        ("{}", "{}", None, None),
        (r#"{"state": "Idle"}"#, r#"{"procs": -1}"#, Some("2"), None),
        ("{}", r#"{"user": 1, "procs": -1}"#, Some("3"), Some("1")),
        (
            r#"{"procs": {"$gte": 0}}"#,
            r#"{"nothing": 1}"#,
            None,
            Some("1"),
        ),
    ] {
        let query = query_of(filter, sort, max, offset);
        streamed_agrees(&query, &docs, &format!("{filter} {sort}"));
    }
}

fn query_of(filter: &str, sort: &str, max: Option<&str>, offset: Option<&str>) -> ListQuery {
    ListQuery {
        filter: Filter::parse_str(filter, &WireDates::utc()).unwrap(),
        sort: Sort::parse_str(sort).unwrap(),
        paging: Paging::parse(max, offset).unwrap(),
    }
}

/// Checks that a streamed run keeping only the page answers what the run over every
/// position does, and returns the latter.
fn streamed_agrees(query: &ListQuery, docs: &[Value], what: &str) -> Page<usize> {
    let all = query.run_positions(docs);
    let streamed = query.run_streamed(docs.len(), |i| docs[i].clone());
    assert_eq!(
        (&all.total, &all.items),
        (&streamed.total, &streamed.items),
        "{what}"
    );
    all
}

#[test]
fn a_streamed_run_keeping_only_the_page_answers_what_a_full_sort_does() {
    // More documents than the first selection waits for, with many ties, missing
    // values, nulls and mixed kinds: the page kept by selection is the stable sort's.
    let docs: Vec<Value> = (0..5000u64)
        .map(|i| {
            let h = i.wrapping_mul(2654435761) % 1000;
            let mut doc = json!({"n": i, "a": h % 7, "c": {"d": format!("v{}", h % 13)}});
            match h % 5 {
                0 => {}
                1 => doc["b"] = Value::Null,
                2 => doc["b"] = json!(h % 3),
                _ => doc["b"] = json!(format!("s{}", h % 4)),
            }
            doc
        })
        .collect();
    for (filter, sort) in [
        ("{}", r#"{"a": 1}"#),
        ("{}", r#"{"b": -1}"#),
        (r#"{"a": {"$ne": 3}}"#, r#"{"b": 1, "a": -1}"#),
        (r#"{"c.d": {"$in": ["v1", "v2", "v3"]}}"#, r#"{"c.d": -1}"#),
        ("{}", r#"{"missing": 1}"#),
        (r#"{"b": {"$type": 10}}"#, "{}"),
    ] {
        for (max, offset) in [
            (Some("50"), None),
            (Some("7"), Some("993")),
            (Some("0"), Some("3")),
            (None, Some("4990")),
            (Some("3000"), Some("1500")),
        ] {
            let query = query_of(filter, sort, max, offset);
            let all = streamed_agrees(
                &query,
                &docs,
                &format!("{filter} {sort} {max:?} {offset:?}"),
            );
            // The list judged in parts side by side (uneven, merged in any order, a
            // sorted one offered backwards too) is the same page.
            let backwards = [false, !query.sort.is_empty()];
            for (cuts, backwards) in [&[2500][..], &[1, 1800, 4999], &[1100, 1101, 3000]]
                .into_iter()
                .flat_map(|cuts| backwards.map(|b| (cuts, b)))
            {
                let mut bounds = vec![0];
                bounds.extend_from_slice(cuts);
                bounds.push(docs.len());
                let parts: Vec<Top<'_, usize>> = bounds
                    .windows(2)
                    .map(|run| {
                        let mut part = Top::new(&query);
                        let mut run: Vec<usize> = (run[0]..run[1]).collect();
                        if backwards {
                            run.reverse();
                        }
                        for i in run {
                            part.offer_at(i, &docs[i], || i);
                        }
                        part
                    })
                    .collect();
                let merged = parts.into_iter().rev().reduce(Top::merge).unwrap().finish();
                assert_eq!(
                    (&all.total, &all.items),
                    (&merged.total, &merged.items),
                    "{filter} {sort} {max:?} {offset:?} in parts at {cuts:?}, backwards {backwards}"
                );
            }
        }
    }
}
