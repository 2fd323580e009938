//! Job lists: which jobs a list shows, and what showing a job needs.

mod derived;

use drover_domain::dates::WireDates;
use serde_json::Value;

use crate::Scheduler;
use crate::job::Job;

pub use derived::{
    effective_partitions, expected_state, queue_status, requested_memory, start_priority,
};

/// Which jobs a list shows: every job (`/rest/jobs`), those that have not ended
/// (`/rest/jobs/active`), or those that have (`/rest/jobs/complete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    All,
    Active,
    Complete,
}

impl Listing {
    pub fn shows(self, job: &Job) -> bool {
        match self {
            Listing::All => true,
            Listing::Active => !job.status.state.is_final(),
            Listing::Complete => job.status.state.is_final(),
        }
    }
}

/// What showing a job needs besides the job.
#[derive(Clone, Copy)]
pub struct Render<'a> {
    pub now: i64,
    pub dates: &'a WireDates,
    /// The representation version, 1 or 2.
    pub version: u32,
    pub rm_name: &'a str,
    pub sched_name: &'a str,
}

impl<'a> Render<'a> {
    /// Showing `scheduler`'s jobs as they are now, in representation `version` (1 or 2),
    /// with dates written by `dates`.
    pub fn of(scheduler: &'a Scheduler, version: u32, dates: &'a WireDates) -> Render<'a> {
        Render {
            now: scheduler.now(),
            dates,
            version,
            rm_name: scheduler.resource_manager_name(),
            sched_name: scheduler.name(),
        }
    }
}

/// A job's document in the wire shape of a representation version, which the HTTP layer
/// knows: a list's page is made of them, and a list judges a member its narrow fields do
/// not know by rendering that member alone.
pub trait JobShape: Sync {
    /// The job in the shape of `render.version`.
    fn job(&self, job: &Job, render: &Render<'_>) -> Value;

    /// The job's top-level member `name` alone, as [`JobShape::job`] has it (`None`: it
    /// has no such member); only that member's value is computed.
    fn member(&self, job: &Job, name: &str, render: &Render<'_>) -> Option<Value>;
}
