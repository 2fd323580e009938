//! Job lists, answered without rendering every job ([`list`]).
//!
//! The query language means what the evaluator says over the rendered documents
//! (`ListQuery::run`); this module gets the same answer faster:
//! - equality (`$eq`, `$in` of strings) on the state, queue status, credential fields
//!   and custom name is looked up in the job book's indexes instead of scanned
//!   (`lookup`);
//! - when nothing else is asked, counting needs no rendering at all;
//! - no sort, or a sort on the submission date, is the book's own order (ties keep
//!   submission order, as the stable sort of the reference does), so only the page is
//!   rendered;
//! - anything else is a `scan` of the candidates the indexes leave: each job
//!   is read with only the paths of what the index lookups leave of the filter and of
//!   the sort, the lookups being checked again on the job's row (`fields`: typed
//!   cells, most from the book's scan rows; a member the cells do not know is rendered
//!   alone, by the HTTP layer's [`JobShape`]); only the page's best `offset + max` are
//!   kept (`query::Top`), or only which positions match when the sort is the book's
//!   order, the book's lock is given up every 200 us (checked between jobs: the engine
//!   never waits long on a list, even when the scan's thread loses its core; what may
//!   still hold it longer is keeping a very large page's best), the candidates are
//!   judged in runs side by side, one per processor, and the scan stops at its deadline.
//!   At most a few scans run at once, each at a lower CPU priority (`threads`).
//!
//! What the page shows of each job is the HTTP layer's: it renders a job in the shape of
//! its representation version ([`JobShape`]), with what [`Render`] holds.

mod derived;
mod fields;
mod lookup;
mod scan;
mod threads;

use std::time::{Duration, Instant};

use drover_domain::dates::WireDates;
use drover_query::{ListQuery, Page};
use serde_json::Value;

use crate::Scheduler;
use crate::job::Job;
use lookup::Outcome;

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
    /// Whether the list shows `job` (as it is now).
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
    /// The moment durations are measured to.
    pub now: i64,
    /// How dates are written.
    pub dates: &'a WireDates,
    /// The representation version, 1 or 2.
    pub version: u32,
    /// The resource manager's name (`rmName`).
    pub rm_name: &'a str,
    /// The scheduler's name (`schedName`).
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

/// How a list shows jobs: what rendering needs, and the shape of the documents.
#[derive(Clone, Copy)]
struct Showing<'a> {
    render: &'a Render<'a>,
    shape: &'a dyn JobShape,
}

impl Showing<'_> {
    /// The job's document.
    fn job(&self, job: &Job) -> Value {
        self.shape.job(job, self.render)
    }
}

/// A job list to answer.
pub struct ListRequest<'a> {
    /// Which jobs the list shows.
    pub listing: Listing,
    /// The only user whose jobs the caller may see (`None`: everybody's).
    pub owner: Option<&'a str>,
    /// The filter, sort and page.
    pub query: &'a ListQuery,
    /// The representation version (1 or 2) whose paths the query names and in whose
    /// shape the page shows jobs.
    pub version: u32,
    /// How the page writes dates (the filter and the sort compare them in UTC).
    pub dates: &'a WireDates,
    /// The documents of the page, in the shape of `version`.
    pub shape: &'static dyn JobShape,
    /// How long the list may take, its wait for a turn to scan included.
    pub budget: Duration,
}

/// Why a list was not answered.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// Other lists that scan held every turn for the whole budget.
    #[error("other lists that scan are running")]
    Busy,
    /// The scan reached the budget after judging `judged` jobs one by one.
    #[error("the query had to judge jobs one by one and stopped after {judged}")]
    Stopped { judged: usize },
    /// The scan could not run: a bug, or the machine out of threads.
    #[error("{0}")]
    Failed(String),
}

/// Answers a job list: from the job book's indexes when they cover it, else by a scan on
/// a thread of its own once it has a turn (`threads`), each within the request's
/// budget.
pub async fn list(
    scheduler: &Scheduler,
    request: &ListRequest<'_>,
) -> Result<Page<Value>, ListError> {
    let budget = request.budget;
    let deadline = Instant::now() + budget;
    let shown = Render::of(scheduler, request.version, request.dates);
    let outcome = scheduler.with_jobs(|book| {
        lookup::by_indexes(
            book,
            request.listing,
            request.owner,
            request.query,
            request.version,
            Showing {
                render: &shown,
                shape: request.shape,
            },
        )
    });
    let scan = match outcome {
        Outcome::Page(page) => return Ok(page),
        Outcome::Scan(scan) => scan,
    };
    let turn = tokio::time::timeout(budget, threads::scan_turns(scan.is_narrow()).acquire())
        .await
        .map_err(|_| ListError::Busy)?
        .map_err(|e| ListError::Failed(format!("the list turns closed: {e}")))?;
    let scheduler = scheduler.clone();
    let (version, dates, shape) = (request.version, request.dates.clone(), request.shape);
    threads::beside_the_service(move || {
        // The turn ends with the scan, not with the request: a client that hangs up does
        // not free a turn while its scan still runs.
        let _turn = turn;
        // Filter and sort over UTC dates (what the query language compares); render the
        // page in the deployment's zone.
        let utc = WireDates::utc();
        let filter_render = Render::of(&scheduler, version, &utc);
        let shown = Render::of(&scheduler, version, &dates);
        let showing = |render| Showing { render, shape };
        scan::scan(
            &scheduler,
            &scan,
            showing(&filter_render),
            showing(&shown),
            deadline,
        )
    })
    .await?
    .map_err(|stopped| ListError::Stopped {
        judged: stopped.judged,
    })
}
