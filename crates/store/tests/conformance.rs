//! One conformance suite, run against every backend (see `support`).

// A test tells one story from setup to the last check; it may be long (issue #54).
#![allow(clippy::too_many_lines)]

mod support;

use drover_domain::dates::WireDates;
use drover_query::{Filter, ListQuery, Paging, Sort};
use drover_store::{CollectionSpec, DocumentStore, StoreError, Write};
use serde_json::{Value, json};
use support::backends;

fn jobs_spec() -> CollectionSpec {
    CollectionSpec::new("jobs")
        .index(&["state"])
        .index(&["credentials.user", "submitDate"])
}

fn query(filter: &str, sort: &str, max: Option<&str>, offset: Option<&str>) -> ListQuery {
    ListQuery {
        filter: Filter::parse_str(filter, &WireDates::utc()).unwrap(),
        sort: Sort::parse_str(sort).unwrap(),
        paging: Paging::parse(max, offset).unwrap(),
    }
}

fn ids(store: &dyn DocumentStore, q: &ListQuery) -> (usize, Vec<String>) {
    let page = store.list("jobs", q).unwrap();
    (page.total, page.items.into_iter().map(|d| d.id).collect())
}

#[test]
fn create_read_update_delete() {
    for b in backends() {
        let s = &*b.store;
        s.ensure_collection(&jobs_spec()).unwrap();
        assert_eq!(
            s.insert("jobs", "j1", Some("first"), json!({"state": "Idle"}))
                .unwrap(),
            1
        );
        let doc = s.get("jobs", "j1").unwrap().unwrap();
        assert_eq!(
            (doc.name.as_deref(), doc.version, &doc.body),
            (Some("first"), 1, &json!({"state": "Idle"}))
        );
        assert_eq!(s.get_by_name("jobs", "first").unwrap().unwrap().id, "j1");
        assert_eq!(s.get("jobs", "nope").unwrap(), None, "{}", b.name());
        assert_eq!(s.get_by_name("jobs", "nope").unwrap(), None);

        assert_eq!(
            s.update(
                "jobs",
                "j1",
                Some("renamed"),
                json!({"state": "Running"}),
                None
            )
            .unwrap(),
            2
        );
        assert_eq!(s.get_by_name("jobs", "first").unwrap(), None);
        let doc = s.get_by_name("jobs", "renamed").unwrap().unwrap();
        assert_eq!((doc.version, &doc.body["state"]), (2, &json!("Running")));

        assert_eq!(
            s.put("jobs", "j1", None, json!({"state": "Completed"}))
                .unwrap(),
            3
        );
        assert_eq!(
            s.put("jobs", "j2", None, json!({"state": "Idle"})).unwrap(),
            1
        );
        assert_eq!(s.get("jobs", "j1").unwrap().unwrap().name, None);

        s.delete("jobs", "j1", None).unwrap();
        assert_eq!(s.get("jobs", "j1").unwrap(), None);
        assert!(
            matches!(
                s.delete("jobs", "j1", None),
                Err(StoreError::NotFound { .. })
            ),
            "{}",
            b.name()
        );
        assert!(matches!(
            s.update("jobs", "j1", None, json!({}), None),
            Err(StoreError::NotFound { .. })
        ));
    }
}

#[test]
fn stale_versions_conflict() {
    for b in backends() {
        let s = &*b.store;
        s.ensure_collection(&jobs_spec()).unwrap();
        s.insert("jobs", "j1", None, json!({"n": 1})).unwrap();
        assert_eq!(
            s.update("jobs", "j1", None, json!({"n": 2}), Some(1))
                .unwrap(),
            2
        );
        let err = s
            .update("jobs", "j1", None, json!({"n": 3}), Some(1))
            .unwrap_err();
        match err {
            StoreError::Conflict(m) => assert!(m.contains("version 2, not 1"), "{m}"),
            other => panic!("{}: {other:?}", b.name()),
        }
        assert_eq!(
            s.get("jobs", "j1").unwrap().unwrap().body,
            json!({"n": 2}),
            "the stale write changed nothing"
        );
        assert!(matches!(
            s.delete("jobs", "j1", Some(1)),
            Err(StoreError::Conflict(_))
        ));
        s.delete("jobs", "j1", Some(2)).unwrap();
        assert!(matches!(
            s.update("jobs", "j1", None, json!({}), Some(2)),
            Err(StoreError::NotFound { .. })
        ));
    }
}

#[test]
fn ids_and_names_are_unique() {
    for b in backends() {
        let s = &*b.store;
        s.ensure_collection(&jobs_spec()).unwrap();
        s.insert("jobs", "j1", Some("alpha"), json!({})).unwrap();
        s.insert("jobs", "j2", None, json!({})).unwrap();
        s.insert("jobs", "j3", None, json!({})).unwrap();
        match s.insert("jobs", "j1", None, json!({})).unwrap_err() {
            StoreError::Conflict(m) => {
                assert!(m.contains("id 'j1' already exists"), "{}: {m}", b.name())
            }
            other => panic!("{other:?}"),
        }
        match s
            .insert("jobs", "j4", Some("alpha"), json!({}))
            .unwrap_err()
        {
            StoreError::Conflict(m) => assert!(
                m.contains("name 'alpha' is already taken"),
                "{}: {m}",
                b.name()
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            s.update("jobs", "j2", Some("alpha"), json!({}), None),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            s.put("jobs", "j3", Some("alpha"), json!({})),
            Err(StoreError::Conflict(_))
        ));
        // Within a batch of inserts too, naming the culprit, and nothing is applied.
        let batch = |ids: &[&str], names: &[Option<&str>]| -> Vec<Write> {
            ids.iter()
                .zip(names)
                .map(|(id, name)| Write::Insert {
                    collection: "jobs".into(),
                    id: id.to_string(),
                    name: name.map(Into::into),
                    body: json!({}).into(),
                })
                .collect()
        };
        match s
            .write(&batch(&["b1", "b2", "j2", "b3"], &[None, None, None, None]))
            .unwrap_err()
        {
            StoreError::Conflict(m) => {
                assert!(m.contains("id 'j2' already exists"), "{}: {m}", b.name())
            }
            other => panic!("{other:?}"),
        }
        match s
            .write(&batch(&["b1", "b2"], &[Some("beta"), Some("beta")]))
            .unwrap_err()
        {
            StoreError::Conflict(m) => assert!(
                m.contains("name 'beta' is already taken"),
                "{}: {m}",
                b.name()
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.get("jobs", "b1").unwrap(), None);
        // The same name in another collection is fine.
        s.ensure_collection(&CollectionSpec::new("other")).unwrap();
        s.insert("other", "j1", Some("alpha"), json!({})).unwrap();
    }
}

#[test]
fn a_batch_interleaving_collections_applies_each_in_its_order() {
    for b in backends() {
        let s = &*b.store;
        s.ensure_collection(&jobs_spec()).unwrap();
        s.ensure_collection(&CollectionSpec::new("notes").index(&["n"]))
            .unwrap();
        let insert = |collection: &str, id: &str, n: i64| Write::Insert {
            collection: collection.into(),
            id: id.into(),
            name: None,
            body: json!({"n": n, "state": "Idle"}).into(),
        };
        // As the engine writes them: a job, its event, the next job, its event...
        let mut batch = Vec::new();
        for i in 0..5 {
            batch.push(insert("jobs", &format!("j{i}"), i));
            batch.push(insert("notes", &format!("e{i}"), i));
        }
        batch.push(Write::Put {
            collection: "jobs".into(),
            id: "j0".into(),
            name: None,
            body: json!({"n": 100}).into(),
        });
        batch.push(Write::Delete {
            collection: "notes".into(),
            id: "e4".into(),
            expected_version: None,
        });
        batch.push(insert("notes", "e4", 44));
        let mut expected = vec![1; 10];
        expected.extend([2, 0, 1]);
        assert_eq!(s.write(&batch).unwrap(), expected, "{}", b.name());
        assert_eq!(s.get("jobs", "j0").unwrap().unwrap().body["n"], 100);
        assert_eq!(s.get("notes", "e4").unwrap().unwrap().body["n"], 44);
        let q = query(r#"{"n": {"$gte": 3}}"#, "{}", None, None);
        assert_eq!(ids(s, &q), (3, vec!["j0".into(), "j3".into(), "j4".into()]));
        assert_eq!(s.list("notes", &ListQuery::default()).unwrap().total, 5);
        // Creation order follows the batch within each collection.
        let notes: Vec<String> = s
            .list("notes", &ListQuery::default())
            .unwrap()
            .items
            .into_iter()
            .map(|d| d.id)
            .collect();
        assert_eq!(notes, ["e0", "e1", "e2", "e3", "e4"], "{}", b.name());
    }
}

#[test]
fn the_last_created_document_is_found_after_changes_and_deletes() {
    for b in backends() {
        let s = &*b.store;
        s.ensure_collection(&jobs_spec()).unwrap();
        assert_eq!(s.last_created("jobs").unwrap(), None, "{}", b.name());
        for id in ["b", "a", "c"] {
            s.insert("jobs", id, None, json!({"id": id})).unwrap();
        }
        // A change keeps a document's place in creation order.
        s.put("jobs", "a", None, json!({"changed": true})).unwrap();
        assert_eq!(
            s.last_created("jobs").unwrap().unwrap().id,
            "c",
            "{}",
            b.name()
        );
        s.delete("jobs", "c", None).unwrap();
        let last = s.last_created("jobs").unwrap().unwrap();
        assert_eq!((last.id.as_str(), last.version), ("a", 2), "{}", b.name());
        assert!(matches!(
            s.last_created("nowhere"),
            Err(StoreError::UnknownCollection(_))
        ));
    }
}

#[test]
fn visiting_a_collection_gives_every_document_in_creation_order_as_stored() {
    for b in backends() {
        let s = &*b.store;
        s.ensure_collection(&jobs_spec()).unwrap();
        let mut seen = Vec::new();
        s.visit_all("jobs", &mut |id, body| {
            seen.push((id.to_string(), body.to_string()))
        })
        .unwrap();
        assert!(seen.is_empty(), "{}", b.name());
        for id in ["b", "a", "c", "d"] {
            s.insert(
                "jobs",
                id,
                None,
                json!({"id": id, "n": [1, 2.5], "s": "é\"x"}),
            )
            .unwrap();
        }
        // A change keeps a document's place and shows its new body; a deleted one is gone.
        s.put("jobs", "a", None, json!({"changed": true})).unwrap();
        s.delete("jobs", "d", None).unwrap();
        s.visit_all("jobs", &mut |id, body| {
            seen.push((id.to_string(), body.to_string()))
        })
        .unwrap();
        let parsed: Vec<(&str, Value)> = seen
            .iter()
            .map(|(id, body)| (id.as_str(), serde_json::from_str(body).unwrap()))
            .collect();
        assert_eq!(
            parsed,
            vec![
                ("b", json!({"id": "b", "n": [1, 2.5], "s": "é\"x"})),
                ("a", json!({"changed": true})),
                ("c", json!({"id": "c", "n": [1, 2.5], "s": "é\"x"})),
            ],
            "{}",
            b.name()
        );
        assert!(matches!(
            s.visit_all("nowhere", &mut |_, _| {}),
            Err(StoreError::UnknownCollection(_))
        ));
    }
}

#[test]
fn a_batch_is_all_or_nothing() {
    for b in backends() {
        let s = &*b.store;
        s.ensure_collection(&jobs_spec()).unwrap();
        let inserts: Vec<Write> = (0..200)
            .map(|i| Write::Insert {
                collection: "jobs".into(),
                id: format!("j{i}"),
                name: None,
                body: json!({"state": "Idle", "i": i}).into(),
            })
            .collect();
        assert_eq!(s.write(&inserts).unwrap(), vec![1; 200]);
        assert_eq!(s.list("jobs", &ListQuery::default()).unwrap().total, 200);

        let failing = vec![
            Write::Put {
                collection: "jobs".into(),
                id: "j0".into(),
                name: None,
                body: json!({"state": "Done"}).into(),
            },
            Write::Insert {
                collection: "jobs".into(),
                id: "new".into(),
                name: None,
                body: json!({}).into(),
            },
            Write::Delete {
                collection: "jobs".into(),
                id: "j1".into(),
                expected_version: None,
            },
            Write::Insert {
                collection: "jobs".into(),
                id: "j5".into(),
                name: None,
                body: json!({}).into(),
            },
        ];
        assert!(
            matches!(s.write(&failing), Err(StoreError::Conflict(_))),
            "{}",
            b.name()
        );
        assert_eq!(s.get("jobs", "j0").unwrap().unwrap().body["state"], "Idle");
        assert_eq!(s.get("jobs", "new").unwrap(), None);
        assert!(s.get("jobs", "j1").unwrap().is_some());
        assert_eq!(s.list("jobs", &ListQuery::default()).unwrap().total, 200);
    }
}

/// Large batches, as group commit makes under load: every kind of write in one, then a
/// conflict and a refused document far into a batch.
#[test]
fn a_large_batch_is_all_or_nothing_too() {
    for b in backends() {
        let s = &*b.store;
        s.ensure_collection(&jobs_spec()).unwrap();
        let insert = |i: usize| Write::Insert {
            collection: "jobs".into(),
            id: format!("j{i}"),
            name: Some(format!("n{i}")),
            body: json!({"state": "Idle", "i": i}).into(),
        };
        assert_eq!(
            s.write(&(0..1000).map(insert).collect::<Vec<_>>()).unwrap(),
            vec![1; 1000]
        );
        let mixed: Vec<Write> = (0..1000)
            .map(|i| match i % 3 {
                0 => Write::Update {
                    collection: "jobs".into(),
                    id: format!("j{i}"),
                    name: None,
                    body: json!({"state": "Done", "i": i}).into(),
                    expected_version: Some(1),
                },
                1 => Write::Put {
                    collection: "jobs".into(),
                    id: format!("p{i}"),
                    name: None,
                    body: json!({"state": "Put", "i": i}).into(),
                },
                _ => Write::Delete {
                    collection: "jobs".into(),
                    id: format!("j{i}"),
                    expected_version: None,
                },
            })
            .collect();
        let versions = s.write(&mixed).unwrap();
        let expected: Vec<i64> = (0..1000).map(|i| [2, 1, 0][i % 3]).collect();
        assert_eq!(versions, expected, "{}", b.name());
        assert_eq!(
            s.get("jobs", "j999").unwrap().unwrap().body["state"],
            "Done"
        );
        assert_eq!(s.get("jobs", "p997").unwrap().unwrap().body["state"], "Put");
        assert_eq!(s.get("jobs", "j998").unwrap(), None);
        let before = s.list("jobs", &ListQuery::default()).unwrap().total;

        // A taken id at write 700, then a document no backend stores at write 500.
        let mut taken: Vec<Write> = (2000..3000).map(insert).collect();
        taken[700] = insert(0);
        let mut refused: Vec<Write> = (2000..3000).map(insert).collect();
        refused[500] = Write::Insert {
            collection: "jobs".into(),
            id: "nul".into(),
            name: None,
            body: json!({"text": "a\u{0}b"}).into(),
        };
        for (batch, what) in [(taken, "a taken id"), (refused, "a NUL")] {
            let outcome = s.write(&batch);
            let expected = match what {
                "a taken id" => matches!(outcome, Err(StoreError::Conflict(_))),
                _ => matches!(outcome, Err(StoreError::Invalid(_))),
            };
            assert!(expected, "{}, {what}: {outcome:?}", b.name());
            assert_eq!(
                s.get("jobs", "j2000").unwrap(),
                None,
                "{}, {what}",
                b.name()
            );
            assert_eq!(s.list("jobs", &ListQuery::default()).unwrap().total, before);
        }
    }
}

#[test]
fn data_survives_reopening_and_new_indexes_cover_old_documents() {
    for mut b in backends() {
        b.store.ensure_collection(&jobs_spec()).unwrap();
        b.store
            .insert(
                "jobs",
                "j1",
                Some("one"),
                json!({"state": "Idle", "queue": "batch"}),
            )
            .unwrap();
        b.store
            .insert(
                "jobs",
                "j2",
                None,
                json!({"state": "Running", "queue": "fast"}),
            )
            .unwrap();
        b.reopen();
        let s = &*b.store;
        assert!(matches!(
            s.get("jobs", "j1"),
            Err(StoreError::UnknownCollection(_))
        ));
        s.ensure_collection(&jobs_spec().index(&["queue"])).unwrap();
        assert_eq!(
            s.get_by_name("jobs", "one").unwrap().unwrap().body["queue"],
            "batch",
            "{}",
            b.name()
        );
        assert_eq!(
            ids(
                s,
                &query(r#"{"queue": "fast"}"#, r#"{"queue": -1}"#, None, None)
            ),
            (1, vec!["j2".into()])
        );
        assert_eq!(
            ids(s, &query("{}", r#"{"queue": -1}"#, None, None)).1,
            ["j2", "j1"]
        );
    }
}

fn load_jobs(s: &dyn DocumentStore) {
    s.ensure_collection(&jobs_spec()).unwrap();
    let docs = [
        json!({"state": "Idle", "credentials": {"user": "alice"}, "submitDate": "2026-01-02 00:00:00 UTC", "procs": 4, "queue": "batch"}),
        json!({"state": "Running", "credentials": {"user": "bob"}, "submitDate": "2026-01-01 00:00:00 UTC", "procs": 2, "queue": "fast"}),
        json!({"state": "Idle", "credentials": {"user": "alice"}, "submitDate": "2026-01-03 00:00:00 UTC", "procs": 8, "queue": ["batch", "fast"]}),
        json!({"state": "Completed", "credentials": {"user": "alice"}, "submitDate": "2025-12-31 00:00:00 UTC", "note": "say \"batch\""}),
        json!({"state": ["Idle", "Held"], "credentials": {"user": "carol"}, "submitDate": null, "procs": 1, "queue": {"batch": 1}}),
    ];
    let batch: Vec<Write> = docs
        .into_iter()
        .enumerate()
        .map(|(i, body)| Write::Insert {
            collection: "jobs".into(),
            id: format!("j{}", i + 1),
            name: None,
            body: body.into(),
        })
        .collect();
    s.write(&batch).unwrap();
}

/// A list request (filter, sort, max, offset) and its answer (total, the page's ids).
type ListCase = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    usize,
    &'static [&'static str],
);

#[test]
fn listing_filters_sorts_and_pages_like_the_evaluator() {
    for b in backends() {
        let s = &*b.store;
        load_jobs(s);
        let cases: &[ListCase] = &[
            // indexed equality + indexed sort + paging
            (
                r#"{"credentials.user": "alice"}"#,
                r#"{"submitDate": -1}"#,
                Some("2"),
                None,
                3,
                &["j3", "j1"],
            ),
            (
                r#"{"credentials.user": "alice"}"#,
                r#"{"submitDate": -1}"#,
                Some("2"),
                Some("2"),
                3,
                &["j4"],
            ),
            (
                r#"{"credentials.user": "alice"}"#,
                r#"{"submitDate": 1}"#,
                Some("0"),
                None,
                3,
                &[],
            ),
            (
                r#"{"credentials.user": "alice"}"#,
                "{}",
                None,
                Some("9"),
                3,
                &[],
            ),
            // a document whose state is an array matches through its elements
            (
                r#"{"state": "Idle"}"#,
                "{}",
                None,
                None,
                3,
                &["j1", "j3", "j5"],
            ),
            (
                r#"{"state": {"$ne": "Idle"}}"#,
                "{}",
                None,
                None,
                2,
                &["j2", "j4"],
            ),
            // unindexed field, unindexed sort
            (
                r#"{"procs": {"$gte": 2}}"#,
                r#"{"procs": -1}"#,
                None,
                None,
                3,
                &["j3", "j1", "j2"],
            ),
            // unindexed equality on strings (SQL narrows by the body's text, the evaluator decides)
            (r#"{"queue": "batch"}"#, "{}", None, None, 2, &["j1", "j3"]),
            (
                r#"{"queue": {"$in": ["fast", "none"]}}"#,
                "{}",
                None,
                None,
                2,
                &["j2", "j3"],
            ),
            (r#"{"note": "say \"batch\""}"#, "{}", None, None, 1, &["j4"]),
            (
                r#"{"queue": "batch", "state": "Idle"}"#,
                r#"{"submitDate": -1}"#,
                Some("1"),
                None,
                2,
                &["j3"],
            ),
            // dates as instants, on an indexed path
            (
                r#"{"submitDate": {"$gt": "2026-01-01 00:00:00 GMT"}}"#,
                r#"{"submitDate": 1}"#,
                None,
                None,
                2,
                &["j1", "j3"],
            ),
            (
                r#"{"submitDate": {"$lte": "2026-01-02 00:00:00 GMT"}}"#,
                r#"{"submitDate": 1}"#,
                None,
                None,
                3,
                &["j4", "j2", "j1"],
            ),
            (
                r#"{"submitDate": {"$lt": "2026-01-02 00:00:00 GMT"}}"#,
                r#"{"submitDate": 1}"#,
                None,
                None,
                2,
                &["j4", "j2"],
            ),
            (
                r#"{"submitDate": {"$gte": "2026-01-02 00:00:00 GMT"}}"#,
                r#"{"submitDate": 1}"#,
                None,
                None,
                2,
                &["j1", "j3"],
            ),
            (
                r#"{"submitDate": "2026-01-02 00:00:00 GMT"}"#,
                "{}",
                None,
                None,
                1,
                &["j1"],
            ),
            (
                r#"{"submitDate": {"$ne": "2026-01-02 00:00:00 GMT"}}"#,
                "{}",
                None,
                None,
                4,
                &["j2", "j3", "j4", "j5"],
            ),
            (
                r#"{"submitDate": {"$type": 10}}"#,
                "{}",
                None,
                None,
                1,
                &["j5"],
            ),
            (
                r#"{"$or": [{"credentials.user": "bob"}, {"procs": 8}]}"#,
                r#"{"credentials.user": 1, "submitDate": 1}"#,
                None,
                None,
                2,
                &["j3", "j2"],
            ),
        ];
        for &(filter, sort, max, offset, total, expected) in cases {
            let q = query(filter, sort, max, offset);
            assert_eq!(
                ids(s, &q),
                (total, expected.iter().map(|e| e.to_string()).collect()),
                "{}: {q:?}",
                b.name()
            );
        }
    }
}

#[test]
fn refused_input() {
    for b in backends() {
        let s = &*b.store;
        assert!(matches!(
            s.ensure_collection(&CollectionSpec::new("Bad-Name")),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            s.ensure_collection(&CollectionSpec::new("x; DROP TABLE y")),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            s.get("never", "x"),
            Err(StoreError::UnknownCollection(_))
        ));
        s.ensure_collection(&jobs_spec()).unwrap();
        match s
            .insert("jobs", "j1", None, json!({"text": "a\u{0}b"}))
            .unwrap_err()
        {
            StoreError::Invalid(m) => assert!(m.contains("U+0000"), "{m}"),
            other => panic!("{}: {other:?}", b.name()),
        }
        assert!(matches!(
            s.insert("jobs", "", None, json!({})),
            Err(StoreError::Invalid(_))
        ));
        // Odd but valid text is stored as is.
        let odd = json!({"quote": "it's \"x\" -- ; DROP", "emoji": "🚀", "big": 1e300});
        s.insert("jobs", "odd'id", Some("na'me"), odd.clone())
            .unwrap();
        assert_eq!(s.get("jobs", "odd'id").unwrap().unwrap().body, odd);
        assert_eq!(
            s.get_by_name("jobs", "na'me").unwrap().unwrap().id,
            "odd'id"
        );
        s.ping().unwrap();
        s.maintain().unwrap();
    }
}

#[test]
fn concurrent_readers_and_writers() {
    for b in backends() {
        let s: &dyn DocumentStore = &*b.store;
        s.ensure_collection(&jobs_spec()).unwrap();
        std::thread::scope(|scope| {
            for t in 0..4 {
                scope.spawn(move || {
                    for i in 0..50 {
                        s.insert(
                            "jobs",
                            &format!("t{t}-{i}"),
                            None,
                            json!({"state": "Idle", "t": t}),
                        )
                        .unwrap();
                        let page = s
                            .list(
                                "jobs",
                                &query(r#"{"state": "Idle"}"#, "{}", Some("5"), None),
                            )
                            .unwrap();
                        assert!(page.total > i);
                    }
                });
            }
        });
        assert_eq!(
            s.list("jobs", &ListQuery::default()).unwrap().total,
            200,
            "{}",
            b.name()
        );
        let _: Value = s.get("jobs", "t3-49").unwrap().unwrap().body;
    }
}

#[test]
fn describe_names_the_database_and_flush_keeps_the_data() {
    for mut b in backends() {
        let s = &*b.store;
        s.ensure_collection(&jobs_spec()).unwrap();
        s.insert("jobs", "j1", None, json!({"state": "Idle"}))
            .unwrap();
        let info = s.describe().unwrap();
        assert_eq!(info.backend, b.name());
        assert!(!info.version.is_empty(), "{info:?}");
        match info.backend {
            "sqlite" => assert!(info.database.ends_with("drover.db"), "{info:?}"),
            _ => assert!(info.host.is_some() && info.port.is_some(), "{info:?}"),
        }
        s.flush().unwrap();
        b.reopen();
        b.store.ensure_collection(&jobs_spec()).unwrap();
        assert!(b.store.get("jobs", "j1").unwrap().is_some());
    }
}

#[test]
fn unfiltered_counts_follow_every_kind_of_write_and_newest_first_sorts_keep_ties() {
    for mut b in backends() {
        let spec = jobs_spec()
            .index_newest_first(&["submitDate"])
            .index_newest_first(&["state", "submitDate"]);
        b.store.ensure_collection(&spec).unwrap();
        let s = &*b.store;
        let body = |date: &str| json!({"state": "Idle", "submitDate": date});
        s.insert("jobs", "a", None, body("2026-01-01 00:00:00 UTC"))
            .unwrap();
        s.put("jobs", "b", None, body("2026-01-01 00:00:00 UTC"))
            .unwrap();
        s.put("jobs", "b", None, body("2026-01-01 00:00:00 UTC"))
            .unwrap();
        s.write(&[
            Write::Insert {
                collection: "jobs".into(),
                id: "c".into(),
                name: None,
                body: body("2026-01-02 00:00:00 UTC").into(),
            },
            Write::Insert {
                collection: "jobs".into(),
                id: "d".into(),
                name: None,
                body: body("2026-01-01 00:00:00 UTC").into(),
            },
            Write::Delete {
                collection: "jobs".into(),
                id: "a".into(),
                expected_version: None,
            },
        ])
        .unwrap();
        s.update("jobs", "c", None, body("2026-01-02 00:00:00 UTC"), None)
            .unwrap();
        // A failed batch changes no count.
        assert!(s.insert("jobs", "b", None, body("x")).is_err());
        let newest = query("{}", r#"{"submitDate": -1}"#, Some("2"), None);
        assert_eq!(
            ids(s, &newest),
            (3, vec!["c".into(), "b".into()]),
            "{}",
            b.name()
        );
        assert_eq!(ids(s, &query("{}", "{}", Some("0"), None)).0, 3);
        let idle = query(
            r#"{"state": "Idle"}"#,
            r#"{"submitDate": -1}"#,
            Some("2"),
            Some("1"),
        );
        assert_eq!(ids(s, &idle), (3, vec!["b".into(), "d".into()]));
        // The count is stored: it holds after reopening too.
        b.reopen();
        b.store.ensure_collection(&spec).unwrap();
        assert_eq!(
            ids(&*b.store, &query("{}", "{}", None, None)),
            (3, vec!["b".into(), "c".into(), "d".into()])
        );
    }
}

#[test]
fn an_index_that_leaves_out_a_common_value_answers_like_a_full_one() {
    for mut b in backends() {
        let full = CollectionSpec::new("jobs").index_newest_first(&["state", "submitDate"]);
        let partial = CollectionSpec::new("jobs")
            .index_newest_first(&["submitDate"])
            .index_newest_first_except(&["state", "submitDate"], json!("Idle"));
        b.store.ensure_collection(&full).unwrap();
        let states = [
            "Idle", "Running", "Idle", "Blocked", "Idle", "Idle", "Running",
        ];
        let docs: Vec<Value> = (0..28)
            .map(|i| {
                let mut doc = json!({
                    "state": states[i % states.len()],
                    "submitDate": format!("2026-01-0{} 00:00:00 UTC", 1 + i % 3),
                });
                if i % 9 == 4 {
                    doc.as_object_mut().unwrap().remove("state");
                }
                doc
            })
            .collect();
        for (i, doc) in docs.iter().enumerate().take(14) {
            b.store
                .insert("jobs", &format!("j{i}"), None, doc.clone())
                .unwrap();
        }
        // A database from before: its full index is replaced, and the documents it
        // already holds are found through the partial one.
        b.reopen();
        b.store.ensure_collection(&partial).unwrap();
        for (i, doc) in docs.iter().enumerate().skip(14) {
            b.store
                .insert("jobs", &format!("j{i}"), None, doc.clone())
                .unwrap();
        }
        let s = &*b.store;
        for filter in [
            r#"{"state": "Idle"}"#,
            r#"{"state": "Running"}"#,
            r#"{"state": {"$ne": "Idle"}}"#,
            r#"{"state": {"$in": ["Running", "Blocked"]}}"#,
            r#"{"state": {"$in": ["Running", "Idle"]}}"#,
            r#"{"state": {"$gt": "Idle"}}"#,
            r#"{"state": {"$lt": "Idle"}}"#,
            r#"{"state": {"$exists": false}}"#,
            r#"{"state": "Idle", "submitDate": "2026-01-02 00:00:00 UTC"}"#,
            r#"{"state": "Running", "submitDate": {"$gte": "2026-01-02 00:00:00 UTC"}}"#,
            r#"{"$or": [{"state": "Blocked"}, {"state": "Running"}]}"#,
        ] {
            for (max, offset) in [(Some("3"), Some("2")), (None, None), (Some("0"), None)] {
                let q = query(filter, r#"{"submitDate": -1}"#, max, offset);
                let reference = q.run(&docs);
                let expected: Vec<String> = reference
                    .items
                    .iter()
                    .map(|v| {
                        format!(
                            "j{}",
                            docs.iter().position(|d| std::ptr::eq(d, *v)).unwrap()
                        )
                    })
                    .collect();
                assert_eq!(
                    ids(s, &q),
                    (reference.total, expected),
                    "{}: {filter} {max:?} {offset:?}",
                    b.name()
                );
            }
        }
    }
}
