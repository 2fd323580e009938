//! What the engine tells the outside world happened. The monitoring issue stores these
//! through its own [`EventSink`]; until then the default sink drops them.

use std::sync::Mutex;

use crate::clock::Seconds;

/// One scheduler event (the version-1 event vocabulary: `jobsubmit`, `jobstart`...).
#[derive(Debug, Clone, PartialEq)]
pub struct SchedEvent {
    pub time: Seconds,
    /// `jobsubmit`, `jobstart`, `jobend`, `jobmodify`, `jobhold`, `jobrelease`,
    /// `jobsuspend`, `jobresume`, `jobcancel`, `jobrequeue`, `nodemodify`.
    pub event_type: &'static str,
    /// `job` or `node`.
    pub facility: &'static str,
    pub object_id: String,
    /// Who caused it (`None` for the scheduler itself).
    pub user: Option<String>,
    pub proxy_user: Option<String>,
    pub details: Vec<(String, String)>,
}

pub trait EventSink: Send + Sync {
    fn emit(&self, event: SchedEvent);
}

/// Drops every event.
pub struct DiscardEvents;

impl EventSink for DiscardEvents {
    fn emit(&self, _event: SchedEvent) {}
}

/// Keeps every event in memory (tests).
#[derive(Default)]
pub struct RecordedEvents(pub Mutex<Vec<SchedEvent>>);

impl EventSink for RecordedEvents {
    fn emit(&self, event: SchedEvent) {
        self.0.lock().unwrap().push(event);
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
