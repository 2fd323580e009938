//! SQLite's WAL is copied into the database file in the background, starts over while
//! writes go on, and stays bounded.

use drover_store::{CollectionSpec, DocumentStore, SqliteStore, WAL_LIMITS, WalLimits, Write};
use serde_json::json;

fn batch(from: usize, n: usize) -> Vec<Write> {
    (from..from + n)
        .map(|i| Write::Insert {
            collection: "jobs".into(),
            id: format!("j{i}"),
            name: None,
            body: json!({"user": format!("user{}", i % 50), "pad": "x".repeat(2000)}).into(),
        })
        .collect()
}

/// The store at `path` with these WAL limits and its "jobs" collection.
fn open(path: &std::path::Path, limits: WalLimits) -> SqliteStore {
    let store = SqliteStore::open_with(path, limits).unwrap();
    store
        .ensure_collection(&CollectionSpec::new("jobs").index(&["user"]))
        .unwrap();
    store
}

fn size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[test]
fn the_background_checkpointer_copies_the_wal_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drover.db");
    let limits = WalLimits {
        checkpoint_frames: 64,
        tail_frames: 16,
        restart_frames: 1_000_000,
    };
    let store = open(&path, limits);
    let before = size(&path);
    for round in 0..20 {
        store.write(&batch(round * 50, 50)).unwrap();
    }
    // The database file grows only by checkpoints, and the store is still open.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while size(&path) <= before + 1_000_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint happened"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(store.get("jobs", "j999").unwrap().unwrap().id, "j999");
}

#[test]
fn the_writer_bounds_the_wal_when_the_checkpointer_is_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drover.db");
    let limits = WalLimits {
        checkpoint_frames: i32::MAX,
        tail_frames: 16,
        restart_frames: 200,
    };
    let store = open(&path, limits);
    let wal = dir.path().join("drover.db-wal");
    let mut largest = 0;
    for round in 0..40 {
        store.write(&batch(round * 50, 50)).unwrap();
        largest = largest.max(size(&wal));
    }
    // 40 batches of about 30 pages each would be 1200 frames without restarts; the WAL
    // starts over at 200 frames (plus the batch that crossed the limit).
    assert!(largest < 400 * 4200, "the WAL grew to {largest} bytes");
    drop(store);
    let store = open(&path, WAL_LIMITS);
    assert!(store.get("jobs", "j1999").unwrap().is_some());
}

#[test]
fn the_wal_starts_over_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drover.db");
    let limits = WalLimits {
        checkpoint_frames: 200,
        tail_frames: 20,
        restart_frames: 1_000_000,
    };
    let store = open(&path, limits);
    let wal = dir.path().join("drover.db-wal");
    let (mut largest, rounds) = (0, 400);
    // One commit after another, as fast as they go: a background pass never finds the
    // WAL all copied, so it would only grow (to about 38,000 frames, 150 MB) unless the
    // writer copies the rest itself (it stays near 2 MB; the bound leaves room for a
    // slow machine).
    for round in 0..rounds {
        store.write(&batch(round * 50, 50)).unwrap();
        largest = largest.max(size(&wal));
    }
    assert!(
        largest < 10_000 * 4120,
        "the WAL grew to {largest} bytes over {rounds} commits"
    );
    drop(store);
    let store = open(&path, WAL_LIMITS);
    for i in [0, 9_999, 19_999] {
        assert!(
            store.get("jobs", &format!("j{i}")).unwrap().is_some(),
            "j{i}"
        );
    }
}
