//! An acknowledged batch survives `kill -9` of the process that wrote it, and a batch
//! is never half there (SQLite, the embedded default).
//!
//! The test runs its own binary again as the writer (`crash_writer`, which does nothing
//! unless `DROVER_CRASH_WRITER` names a database), kills it with SIGKILL in the middle of
//! its writes, and reopens the database.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use drover_domain::dates::WireDates;
use drover_query::{Filter, ListQuery};
use drover_store::{CollectionSpec, DocumentStore, SqliteStore, Write};
use serde_json::json;

const PER_BATCH: usize = 50;

fn spec() -> CollectionSpec {
    CollectionSpec::new("jobs").index(&["batch"])
}

#[test]
fn crash_writer() {
    let Ok(path) = std::env::var("DROVER_CRASH_WRITER") else {
        return;
    };
    let store = SqliteStore::open(std::path::Path::new(&path)).unwrap();
    store.ensure_collection(&spec()).unwrap();
    for batch in 0.. {
        let writes: Vec<Write> = (0..PER_BATCH)
            .map(|i| Write::Insert {
                collection: "jobs".into(),
                id: format!("b{batch}-{i}"),
                name: None,
                body: json!({"batch": batch, "i": i, "pad": "x".repeat(200)}).into(),
            })
            .collect();
        store.write(&writes).unwrap();
        println!("acknowledged {batch}");
    }
}

fn count_batch(store: &dyn DocumentStore, batch: u64) -> usize {
    let filter = Filter::parse(&json!({"batch": batch}), &WireDates::utc()).unwrap();
    let query = ListQuery {
        filter,
        ..Default::default()
    };
    store.list("jobs", &query).unwrap().total
}

#[test]
fn acknowledged_batches_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drover.db");
    let mut writer = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_writer", "--nocapture", "--test-threads=1"])
        .env("DROVER_CRASH_WRITER", &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut last_acknowledged = None;
    for line in BufReader::new(writer.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("acknowledged ") {
            let n: u64 = n.parse().unwrap();
            last_acknowledged = Some(n);
            if n == 150 {
                writer.kill().unwrap(); // SIGKILL
                break;
            }
        }
    }
    writer.wait().unwrap();
    let last = last_acknowledged.expect("the writer acknowledged batches");

    let store = SqliteStore::open(&path).unwrap();
    store.ensure_collection(&spec()).unwrap();
    for batch in 0..=last {
        assert_eq!(
            count_batch(&store, batch),
            PER_BATCH,
            "acknowledged batch {batch}"
        );
    }
    // Batches written after the last one read before the kill are each there entirely
    // or not at all, and form a prefix (the writer is sequential).
    let mut seen_gap = false;
    for batch in last + 1..last + 100 {
        let found = count_batch(&store, batch);
        assert!(
            found == 0 || found == PER_BATCH,
            "batch {batch}: {found} documents"
        );
        assert!(
            !(seen_gap && found > 0),
            "batch {batch} after a missing one"
        );
        seen_gap |= found == 0;
    }
}
