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
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use drover_metrics::{Histogram, LATENCY_SECONDS, SIZES};

use crate::{DocumentStore, StoreError, Write};

/// How long the journal's transactions take to commit (for `GET /metrics`).
pub static COMMIT_SECONDS: Histogram = Histogram::new(LATENCY_SECONDS);
/// How many writes each of the journal's transactions holds.
pub static BATCH_WRITES: Histogram = Histogram::new(SIZES);

/// Called once the batch's transaction has committed (`Ok`) or failed (`Err`).
pub type Completion = Box<dyn FnOnce(&Result<(), Failure>) + Send>;

/// Why a batch's writes are not (known to be) made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    /// They may have been made after all ([`StoreError::InDoubt`], not settled): never
    /// tell anyone "not made" then.
    pub outcome_unknown: bool,
}

impl Failure {
    pub fn not_made(reason: impl Into<String>) -> Failure {
        Failure {
            reason: reason.into(),
            outcome_unknown: false,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// One engine step's writes and what to do once they are durable.
#[derive(Default)]
pub struct Batch {
    pub writes: Vec<Write>,
    /// Run as soon as the outcome of the transaction is known to the journal.
    pub completions: Vec<Completion>,
    /// Answers to clients, run after the completions. When the store reports a failed
    /// commit in doubt, they wait until it is settled ("not made" is true then), or
    /// until [`HOLD_IN_DOUBT`] has passed (and say the outcome is unknown).
    pub answers: Vec<Completion>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.completions.is_empty() && self.answers.is_empty()
    }
}

/// How long answers to a commit in doubt wait for the store to settle it.
pub const HOLD_IN_DOUBT: Duration = Duration::from_secs(10);
/// How often the journal asks the store to settle while answers wait.
const SETTLE_EVERY: Duration = Duration::from_millis(200);

/// Most writes merged into one transaction; more wait for the next.
const MAX_WRITES_PER_COMMIT: usize = 8192;

/// Starts the journal thread. Dropping the returned sender stops it once every batch
/// sent before is written.
pub fn start(
    store: Arc<dyn DocumentStore>,
    thread_name: &str,
) -> (Sender<Batch>, std::thread::JoinHandle<()>) {
    start_holding(store, thread_name, HOLD_IN_DOUBT)
}

/// [`start`], with answers to a commit in doubt held for `hold` at most.
fn start_holding(
    store: Arc<dyn DocumentStore>,
    thread_name: &str,
    hold: Duration,
) -> (Sender<Batch>, std::thread::JoinHandle<()>) {
    let (sender, receiver) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(thread_name.into())
        .spawn(move || run(store, receiver, hold))
        .expect("cannot start the journal thread");
    (sender, handle)
}

fn run(store: Arc<dyn DocumentStore>, batches: Receiver<Batch>, hold: Duration) {
    let mut held = Held::default();
    loop {
        let first = if held.answers.is_empty() {
            match batches.recv() {
                Ok(batch) => batch,
                Err(_) => break,
            }
        } else {
            match batches.recv_timeout(SETTLE_EVERY) {
                Ok(batch) => batch,
                Err(RecvTimeoutError::Timeout) => {
                    held.try_settle(&*store);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        };
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
            let written = store.write(&merged);
            COMMIT_SECONDS.observe_duration(began.elapsed());
            BATCH_WRITES.observe(merged.len() as f64);
            match written {
                Ok(_) => {
                    // A store may settle a failed commit by committing after it (SQLite
                    // overwrites what it left behind); asked, not assumed.
                    held.try_settle(&*store);
                    Ok(())
                }
                // The reason names the store's failure already.
                Err(StoreError::InDoubt(reason)) => Err(Failure {
                    reason,
                    outcome_unknown: true,
                }),
                Err(e) => Err(Failure::not_made(e.to_string())),
            }
        };
        let mut answers = Vec::new();
        for batch in group {
            for completion in batch.completions {
                completion(&result);
            }
            answers.extend(batch.answers);
        }
        match result {
            Err(failure) if failure.outcome_unknown => held.hold(answers, failure, hold),
            result => {
                for answer in answers {
                    answer(&result);
                }
            }
        }
        // Batches that keep coming must not keep what waits from its deadline.
        if held.overdue() {
            held.try_settle(&*store);
        }
    }
    held.try_settle(&*store);
    held.release(true);
}

/// Answers to commits in doubt, waiting for the store to settle them.
#[derive(Default)]
struct Held {
    answers: Vec<Completion>,
    failure: Option<Failure>,
    until: Option<Instant>,
}

impl Held {
    fn hold(&mut self, answers: Vec<Completion>, failure: Failure, hold: Duration) {
        self.answers.extend(answers);
        self.failure.get_or_insert(failure);
        self.until.get_or_insert_with(|| Instant::now() + hold);
    }

    fn overdue(&self) -> bool {
        self.until.is_some_and(|until| Instant::now() >= until)
    }

    /// Answers what waits "not made" once the store has settled it, or "unknown" once
    /// it has waited long enough.
    fn try_settle(&mut self, store: &dyn DocumentStore) {
        if self.answers.is_empty() {
            return;
        }
        if store.settle().is_ok() {
            self.release(false);
        } else if self.overdue() {
            self.release(true);
        }
    }

    /// Answers what waits: not made, or (`outcome_unknown`) perhaps made.
    fn release(&mut self, outcome_unknown: bool) {
        let Some(mut failure) = self.failure.take() else {
            return;
        };
        failure.outcome_unknown = outcome_unknown;
        let result = Err(failure);
        for answer in std::mem::take(&mut self.answers) {
            answer(&result);
        }
        self.until = None;
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

    /// A store whose writes answer what the test scripted, and which settles only once
    /// allowed to.
    struct Scripted {
        outcomes: std::sync::Mutex<Vec<crate::Result<Vec<i64>>>>,
        settles: std::sync::atomic::AtomicBool,
    }

    impl Scripted {
        fn new(mut outcomes: Vec<crate::Result<Vec<i64>>>) -> Arc<Scripted> {
            outcomes.reverse();
            Arc::new(Scripted {
                outcomes: outcomes.into(),
                settles: false.into(),
            })
        }
    }

    impl DocumentStore for Scripted {
        fn backend(&self) -> &'static str {
            "scripted"
        }
        fn ensure_collection(&self, _: &crate::CollectionSpec) -> crate::Result<()> {
            Ok(())
        }
        fn write(&self, _: &[Write]) -> crate::Result<Vec<i64>> {
            let outcome = self
                .outcomes
                .lock()
                .unwrap()
                .pop()
                .expect("a scripted outcome");
            // Like SQLite's, a commit that succeeds settles the failed one before it.
            if outcome.is_ok() {
                self.settles
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
            outcome
        }
        fn settle(&self) -> crate::Result<()> {
            if self.settles.load(std::sync::atomic::Ordering::SeqCst) {
                Ok(())
            } else {
                Err(StoreError::Backend("still read-only".into()))
            }
        }
        fn find(&self, _: &str, _: crate::Find<'_>) -> crate::Result<Option<crate::Document>> {
            unimplemented!()
        }
        fn list(
            &self,
            _: &str,
            _: &drover_query::ListQuery,
        ) -> crate::Result<drover_query::Page<crate::Document>> {
            unimplemented!()
        }
        fn ping(&self) -> crate::Result<()> {
            Ok(())
        }
        fn maintain(&self) -> crate::Result<()> {
            Ok(())
        }
        fn describe(&self) -> crate::Result<crate::StoreInfo> {
            unimplemented!()
        }
        fn flush(&self) -> crate::Result<()> {
            Ok(())
        }
    }

    type Heard = std::sync::mpsc::Receiver<(&'static str, Result<(), Failure>)>;

    /// A batch of one write whose completion and answer report to the returned channel.
    fn batch(label: &'static str) -> (Batch, Heard) {
        let (tell, heard) = std::sync::mpsc::channel();
        let told = tell.clone();
        let batch = Batch {
            writes: vec![put(label, 1)],
            completions: vec![Box::new(move |r| {
                drop(told.send(("completion", r.clone())))
            })],
            answers: vec![Box::new(move |r| drop(tell.send((label, r.clone()))))],
        };
        (batch, heard)
    }

    fn in_doubt() -> crate::Result<Vec<i64>> {
        Err(StoreError::InDoubt("disk I/O error".into()))
    }

    #[test]
    fn answers_to_a_commit_in_doubt_wait_until_the_store_settles_it_then_say_not_made() {
        let store = Scripted::new(vec![in_doubt()]);
        let (journal, thread) = start_holding(store.clone(), "test", Duration::from_secs(60));
        let (b, heard) = batch("a");
        journal.send(b).unwrap();
        let (what, result) = heard.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            what, "completion",
            "the engine hears of the failure at once"
        );
        assert!(result.is_err());
        assert!(
            heard.recv_timeout(Duration::from_millis(600)).is_err(),
            "no answer while the store cannot settle"
        );
        store
            .settles
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let (what, result) = heard.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(what, "a");
        let failure = result.unwrap_err();
        assert!(!failure.outcome_unknown, "settled: certainly not made");
        assert!(failure.reason.contains("disk I/O error"), "{failure}");
        drop(journal);
        thread.join().unwrap();
    }

    #[test]
    fn a_later_commit_settles_the_answers_waiting_before_its_own() {
        let store = Scripted::new(vec![in_doubt(), Ok(vec![1])]);
        let (journal, thread) = start_holding(store, "test", Duration::from_secs(60));
        let (first, first_heard) = batch("first");
        journal.send(first).unwrap();
        assert_eq!(
            first_heard.recv_timeout(Duration::from_secs(5)).unwrap().0,
            "completion"
        );
        let (second, second_heard) = batch("second");
        journal.send(second).unwrap();
        let (what, result) = first_heard.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(what, "first");
        assert!(!result.unwrap_err().outcome_unknown);
        let heard: Vec<_> = second_heard.iter().take(2).collect();
        assert_eq!(heard, vec![("completion", Ok(())), ("second", Ok(()))]);
        drop(journal);
        thread.join().unwrap();
    }

    #[test]
    fn answers_that_wait_past_the_hold_say_the_outcome_is_unknown() {
        let store = Scripted::new(vec![in_doubt()]);
        let hold = Duration::from_millis(400);
        let (journal, thread) = start_holding(store, "test", hold);
        let began = Instant::now();
        let (b, heard) = batch("a");
        journal.send(b).unwrap();
        assert_eq!(
            heard.recv_timeout(Duration::from_secs(5)).unwrap().0,
            "completion"
        );
        let (what, result) = heard.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(what, "a");
        assert!(began.elapsed() >= hold);
        assert!(
            result.unwrap_err().outcome_unknown,
            "never 'not made' unless settled"
        );
        drop(journal);
        thread.join().unwrap();
    }

    #[test]
    fn batches_that_keep_coming_do_not_keep_the_held_answers_past_the_hold() {
        let store = Scripted::new(vec![in_doubt()]);
        let hold = Duration::from_millis(300);
        let (journal, thread) = start_holding(store, "test", hold);
        let (b, heard) = batch("a");
        journal.send(b).unwrap();
        assert_eq!(
            heard.recv_timeout(Duration::from_secs(5)).unwrap().0,
            "completion"
        );
        // Empty batches (the engine's drain barriers) faster than the settling period.
        let until = Instant::now() + Duration::from_secs(3);
        let answer = loop {
            journal.send(Batch::default()).unwrap();
            if let Ok(answer) = heard.recv_timeout(Duration::from_millis(50)) {
                break Some(answer);
            }
            if Instant::now() > until {
                break None;
            }
        };
        let (what, result) = answer.expect("the held answer within 3 s");
        assert_eq!(what, "a");
        assert!(result.unwrap_err().outcome_unknown);
        drop(journal);
        thread.join().unwrap();
    }

    #[test]
    fn merge_keeps_the_last_write_of_each_document_in_first_order() {
        let mut group = vec![
            Batch {
                writes: vec![put("a", 1), put("b", 1)],
                completions: vec![],
                answers: vec![],
            },
            Batch {
                writes: vec![put("a", 2), put("c", 1)],
                completions: vec![],
                answers: vec![],
            },
        ];
        assert_eq!(
            merge(&mut group),
            vec![put("a", 2), put("b", 1), put("c", 1)]
        );
    }
}
