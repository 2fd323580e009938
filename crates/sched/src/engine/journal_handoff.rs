//! The journal hand-off part of the engine: what a step writes and whom it answers,
//! handed to the journal thread at the end of the step. In the simulator there is no
//! journal: writes are dropped and every step counts as committed at once.

use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use drover_store::journal::{self, Batch};
use drover_store::{DocumentStore, Write};
use tokio::sync::oneshot;

use super::Inbox;
use crate::book::Published;
use crate::events::{EventSink, SchedEvent};
use crate::request::SchedError;

pub(crate) struct JournalHandoff {
    /// False in the simulator: no journal, nothing written.
    journaled: bool,
    journal: Option<Sender<Batch>>,
    thread: Option<JoinHandle<()>>,
    /// Writes and completions of the current step.
    batch: Batch,
    /// Events of the current step, journaled with its changes.
    events: Vec<SchedEvent>,
    /// The engine's own inbox: completions report there (launches, a failed journal).
    inbox: Sender<Inbox>,
    /// The book's length handed to the journal last (and that book's publication):
    /// a step that added no job and wrote nothing need not go to the journal.
    handed: Option<(Arc<Published>, usize)>,
}

impl JournalHandoff {
    pub(super) fn new(
        store: &Arc<dyn DocumentStore>,
        journaled: bool,
        inbox: Sender<Inbox>,
    ) -> JournalHandoff {
        let (journal, thread) = if journaled {
            let (journal, thread) = journal::start(store.clone(), "journal");
            (Some(journal), Some(thread))
        } else {
            (None, None)
        };
        JournalHandoff {
            journaled,
            journal,
            thread,
            batch: Batch::default(),
            events: Vec::new(),
            inbox,
            handed: None,
        }
    }

    /// Whether writes are kept (not in the simulator): callers skip making job
    /// documents that would be dropped.
    #[inline]
    pub(super) fn journaled(&self) -> bool {
        self.journaled
    }

    #[inline]
    pub(super) fn inbox(&self) -> &Sender<Inbox> {
        &self.inbox
    }

    #[inline]
    pub(super) fn write(&mut self, write: Write) {
        self.batch.writes.push(write);
    }

    #[inline]
    pub(super) fn write_all(&mut self, writes: impl IntoIterator<Item = Write>) {
        self.batch.writes.extend(writes);
    }

    #[inline]
    pub(super) fn event(&mut self, event: SchedEvent) {
        self.events.push(event);
    }

    /// Answers once this step's writes are durable; a refusal is answered at once.
    pub(super) fn answer<T: Send + 'static>(
        &mut self,
        reply: oneshot::Sender<Result<T, SchedError>>,
        result: Result<T, SchedError>,
    ) {
        match result {
            Err(refusal) => drop(reply.send(Err(refusal))),
            Ok(value) => self.batch.answers.push(Box::new(move |committed| {
                let _ = reply.send(match committed {
                    Ok(()) => Ok(value),
                    Err(e) if e.outcome_unknown => Err(SchedError::OutcomeUnknown(format!(
                        "the store failed while recording the change and could not tell \
                         within {} s whether it was made: {e}",
                        journal::HOLD_IN_DOUBT.as_secs()
                    ))),
                    Err(e) => Err(SchedError::Unavailable(format!(
                        "the change could not be recorded: {e}"
                    ))),
                });
            })),
        }
    }

    /// Has the job at `position` launched once this step's writes are durable.
    pub(super) fn launch_when_committed(&mut self, position: usize) {
        let inbox = self.inbox.clone();
        self.batch.completions.push(Box::new(move |committed| {
            if committed.is_ok() {
                let _ = inbox.send(Inbox::Launch(vec![position]));
            }
        }));
    }

    /// Runs `work` once this step's writes are durable (never if they fail).
    pub(super) fn run_when_committed(&mut self, work: Box<dyn FnOnce() + Send>) {
        self.batch.completions.push(Box::new(move |committed| {
            if committed.is_ok() {
                work();
            }
        }));
    }

    /// Hands this step's writes (and its events, as `sink` journals them) to the journal;
    /// the book's first `book_len` jobs are shown to readers once they are durable.
    pub(super) fn flush(
        &mut self,
        sink: &dyn EventSink,
        published: &Arc<Published>,
        book_len: usize,
    ) {
        if !self.events.is_empty() {
            let events = sink.journal(std::mem::take(&mut self.events));
            self.batch.writes.extend(events.writes);
            if let Some(committed) = events.committed {
                self.batch.completions.push(Box::new(move |result| {
                    if result.is_ok() {
                        committed();
                    }
                }));
            }
        }
        if !self.journaled {
            published.committed(book_len);
            let completions = std::mem::take(&mut self.batch.completions);
            for completion in completions
                .into_iter()
                .chain(std::mem::take(&mut self.batch.answers))
            {
                completion(&Ok(()));
            }
            self.batch.writes.clear();
            return;
        }
        let grew = !matches!(&self.handed, Some((p, len)) if Arc::ptr_eq(p, published) && *len == book_len);
        if self.batch.is_empty() && !grew {
            return;
        }
        self.handed = Some((published.clone(), book_len));
        let mut batch = std::mem::take(&mut self.batch);
        // First of the completions: a new job is seen only once durable, before its
        // submitter is answered, and a failed batch stops the book's publication before
        // anyone is told "not made". Batches commit in order, so a later batch's success
        // cannot show the jobs of an earlier failed one.
        let publication = published.clone();
        batch.completions.insert(
            0,
            Box::new(move |committed| match committed {
                Ok(()) => publication.committed(book_len),
                Err(_) => publication.failed(),
            }),
        );
        let inbox = self.inbox.clone();
        batch.completions.push(Box::new(move |committed| {
            if let Err(e) = committed {
                let _ = inbox.send(Inbox::JournalFailed(e.to_string()));
            }
        }));
        if let Some(journal) = &self.journal
            && let Err(lost) = journal.send(batch)
        {
            let failed = Err(journal::Failure::not_made("the journal has stopped"));
            for completion in lost.0.completions.into_iter().chain(lost.0.answers) {
                completion(&failed);
            }
        }
    }

    /// Waits until the journal has finished every batch handed to it (committed or
    /// failed), so that a reload from the store sees all of them: a batch handed over
    /// before a failure was noticed may still commit, and its jobs were answered 201.
    pub(super) fn drain(&self, within: std::time::Duration) -> Result<(), String> {
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        let (done, drained) = std::sync::mpsc::channel();
        let barrier = Batch {
            writes: Vec::new(),
            completions: vec![Box::new(move |_| {
                let _ = done.send(());
            })],
            answers: Vec::new(),
        };
        journal
            .send(barrier)
            .map_err(|_| "the journal has stopped".to_string())?;
        drained
            .recv_timeout(within)
            .map_err(|_| "the journal is still writing earlier changes".to_string())
    }

    /// Stops the journal thread once it has written everything handed to it.
    pub(super) fn stop(&mut self) {
        drop(self.journal.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
