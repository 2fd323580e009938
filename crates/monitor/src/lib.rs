//! Monitoring: events, reports and the datastore's health. Knows the store and the
//! scheduler's event sink, not HTTP.
//!
//! - [`event`]: the stored form of an event (its wire shapes and the XML of version-1
//!   creation are `drover_api`'s).
//! - [`health`]: probing the datastore for the health resources.
//! - [`log`]: the `events.log` file, its line format and rolling.
//! - [`recorder`]: the thread that stores events with group commit and logs them; the
//!   scheduler's [`drover_sched::events::EventSink`].
//! - [`stored`]: reading stored events ([`StoredEvents`]), for the events resource.
//! - [`report`]: consolidation of samples into datapoints; [`reports`]: reports in the store.
//! - [`retention`]: exporting, then removing, events and samples past their age.

pub mod event;
pub mod health;
pub mod log;
pub mod recorder;
pub mod report;
pub mod reports;
pub mod retention;
pub mod stored;

pub use event::Event;
pub use recorder::{EventRecorder, RecordError};
pub use reports::{ReportError, Reports};
pub use stored::{ReadError, StoredEvents};
