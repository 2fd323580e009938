//! A journal: a thread of its own that writes batches of changes to the store with
//! group commit.
//!
//! A producer (the scheduler engine, the event recorder) applies a change to its own
//! state, hands the resulting writes and what to do once they are durable to the
//! journal, and goes on. The journal takes every batch that is waiting, writes them all
//! in one transaction, and only then runs the completions (which answer the clients).
//! So an answered change is durable, and many changes share one fsync.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};

use drover_metrics::{Histogram, LATENCY_SECONDS, SIZES};

use crate::{DocumentStore, Write};

/// How long the journal's transactions take to commit (for `GET /metrics`).
pub static COMMIT_SECONDS: Histogram = Histogram::new(LATENCY_SECONDS);
/// How many writes each of the journal's transactions holds.
pub static BATCH_WRITES: Histogram = Histogram::new(SIZES);

/// Called once the batch's transaction has committed (`Ok`) or failed (`Err`).
pub type Completion = Box<dyn FnOnce(&Result<(), String>) + Send>;

/// One engine step's writes and what to do once they are durable.
#[derive(Default)]
pub struct Batch {
    pub writes: Vec<Write>,
    pub completions: Vec<Completion>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.completions.is_empty()
    }
}

/// Most writes merged into one transaction; more wait for the next.
const MAX_WRITES_PER_COMMIT: usize = 8192;

/// Starts the journal thread. Dropping the returned sender stops it once every batch
/// sent before is written.
pub fn start(
    store: Arc<dyn DocumentStore>,
    thread_name: &str,
) -> (Sender<Batch>, std::thread::JoinHandle<()>) {
    let (sender, receiver) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(thread_name.into())
        .spawn(move || run(store, receiver))
        .expect("cannot start the journal thread");
    (sender, handle)
}

fn run(store: Arc<dyn DocumentStore>, batches: Receiver<Batch>) {
    while let Ok(first) = batches.recv() {
        let mut group = vec![first];
        let mut writes = group[0].writes.len();
        while writes < MAX_WRITES_PER_COMMIT {
            match batches.try_recv() {
                Ok(batch) => {
                    writes += batch.writes.len();
                    group.push(batch);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let merged = merge(&mut group);
        let result = if merged.is_empty() {
            Ok(())
        } else {
            let began = std::time::Instant::now();
            let written = store.write(&merged).map(|_| ()).map_err(|e| e.to_string());
            COMMIT_SECONDS.observe_duration(began.elapsed());
            BATCH_WRITES.observe(merged.len() as f64);
            written
        };
        for batch in group {
            for completion in batch.completions {
                completion(&result);
            }
        }
    }
}

/// The writes of a group in order, keeping only the last write of each document.
fn merge(group: &mut [Batch]) -> Vec<Write> {
    let mut merged: Vec<Write> = Vec::new();
    let mut position: HashMap<(String, String), usize> = HashMap::new();
    for batch in group.iter_mut() {
        for write in batch.writes.drain(..) {
            let key = match &write {
                Write::Put { collection, id, .. } => Some((collection.clone(), id.clone())),
                _ => None,
            };
            if let Some(key) = key {
                if let Some(&at) = position.get(&key) {
                    merged[at] = write;
                    continue;
                }
                position.insert(key, merged.len());
            }
            merged.push(write);
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn put(id: &str, n: i64) -> Write {
        Write::Put {
            collection: "jobs".into(),
            id: id.into(),
            name: None,
            body: json!({ "n": n }).into(),
        }
    }

    #[test]
    fn merge_keeps_the_last_write_of_each_document_in_first_order() {
        let mut group = vec![
            Batch {
                writes: vec![put("a", 1), put("b", 1)],
                completions: vec![],
            },
            Batch {
                writes: vec![put("a", 2), put("c", 1)],
                completions: vec![],
            },
        ];
        assert_eq!(
            merge(&mut group),
            vec![put("a", 2), put("b", 1), put("c", 1)]
        );
    }
}
