//! What the engine tells the outside world happened. The engine collects the events of
//! a step and hands them to its [`EventSink`], which answers the store writes that record
//! them: those join the journal batch of the very changes they report, so an event is
//! durable exactly when its change is (and lost with it when a commit fails).

use std::sync::Mutex;

use drover_store::Write;

use crate::clock::Seconds;

/// One scheduler event (the version-1 event vocabulary: `jobsubmit`, `jobstart`...).
#[derive(Debug, Clone, PartialEq)]
pub struct SchedEvent {
    pub time: Seconds,
    /// `jobsubmit`, `jobstart`, `jobend`, `jobmodify`, `jobhold`, `jobrelease`,
    /// `jobsuspend`, `jobresume`, `jobcancel`, `jobrequeue`, `nodemodify`; the VM layer's
    /// `vmcreate`... and, in version 3's words, `VM Provision`...
    pub event_type: &'static str,
    /// `job`, `node` or `vm`.
    pub facility: &'static str,
    pub object_id: String,
    /// Who caused it (`None` for the scheduler itself).
    pub user: Option<String>,
    pub proxy_user: Option<String>,
    /// Key-value details; a `message` detail is the event's message instead.
    pub details: Vec<(String, String)>,
}

/// What recording a step's events takes.
#[derive(Default)]
pub struct JournaledEvents {
    /// Store writes that join the step's journal batch.
    pub writes: Vec<Write>,
    /// Run once that batch is durable (e.g. to write log lines).
    pub committed: Option<Box<dyn FnOnce() + Send>>,
}

pub trait EventSink: Send + Sync {
    /// Turns one engine step's events into what the journal records (called on the
    /// engine thread: keep it quick).
    fn journal(&self, events: Vec<SchedEvent>) -> JournaledEvents;
}

/// Drops every event.
pub struct DiscardEvents;

impl EventSink for DiscardEvents {
    fn journal(&self, _events: Vec<SchedEvent>) -> JournaledEvents {
        JournaledEvents::default()
    }
}

/// Keeps every event in memory, as soon as the engine hands it over (tests).
#[derive(Default)]
pub struct RecordedEvents(pub Mutex<Vec<SchedEvent>>);

impl EventSink for RecordedEvents {
    fn journal(&self, events: Vec<SchedEvent>) -> JournaledEvents {
        self.0.lock().unwrap().extend(events);
        JournaledEvents::default()
    }
}

impl RecordedEvents {
    pub fn types_for(&self, object_id: &str) -> Vec<&'static str> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.object_id == object_id)
            .map(|e| e.event_type)
            .collect()
    }
}
