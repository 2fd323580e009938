//! What the engine asks of an accounting manager: to hold a job's funds before it starts
//! (or say why it may not), and to charge a run when it ends. The answers are store
//! writes that join the journal batch of the start or the end, so the money moves exactly
//! when the job does. `drover` plugs the embedded ledger in; [`NoAccounting`] charges
//! nothing.

use drover_store::Write;

use crate::clock::Seconds;
use crate::job::Job;

pub trait Accountant: Send + Sync {
    /// The job is about to start: the writes that hold its funds, or why it may not.
    fn start(&self, job: &Job, now: Seconds) -> Result<Vec<Write>, String>;

    /// A run of the job ended (or never began) after `seconds` of activity: the writes
    /// that charge it and release what was held.
    fn end(&self, job: &Job, seconds: i64, now: Seconds) -> Vec<Write>;

    /// Goes back to what the store recorded, after a failed commit: what `start` and
    /// `end` changed in memory for writes that were not made is undone.
    fn reload(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Accounting disabled.
pub struct NoAccounting;

impl Accountant for NoAccounting {
    fn start(&self, _job: &Job, _now: Seconds) -> Result<Vec<Write>, String> {
        Ok(Vec::new())
    }

    fn end(&self, _job: &Job, _seconds: i64, _now: Seconds) -> Vec<Write> {
        Vec::new()
    }
}
