//! Job arrays in the engine: per master, a tally of its sub-jobs' states (the master's
//! own state sums them up), the slot limit, the cancellation policies, and cancelling
//! the whole array.

use std::collections::HashMap;

use super::core::Engine;
use crate::job::{ArrayOutcome, Job, JobState};
use crate::request::{Requester, SchedError};

/// What the engine knows of one array.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    /// Book positions of the sub-jobs: `first..first + count`.
    pub first: usize,
    pub count: usize,
    by_state: [u32; JobState::ALL.len()],
    /// Sub-jobs that ended by themselves so far.
    ended: u32,
    slot_limit: Option<u32>,
}

impl Tally {
    fn active(&self) -> u32 {
        [JobState::Starting, JobState::Running, JobState::Suspended]
            .iter()
            .map(|&s| self.by_state[s as usize])
            .sum()
    }

    /// The master's state: running while any sub-job runs, queued while any waits,
    /// else how they ended.
    fn summary(&self) -> JobState {
        let n = |s: JobState| self.by_state[s as usize];
        if self.active() > 0 {
            JobState::Running
        } else if n(JobState::Idle) + n(JobState::Blocked) > 0 {
            JobState::Idle
        } else if n(JobState::Hold) > 0 {
            JobState::Hold
        } else if n(JobState::Completed) > 0 {
            JobState::Completed
        } else if n(JobState::Vacated) > 0 {
            JobState::Vacated
        } else {
            JobState::Removed
        }
    }
}

/// The tally of each array, by the book position of its master.
#[derive(Debug, Default)]
pub(crate) struct ArrayTallies(HashMap<usize, Tally>);

impl ArrayTallies {
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    pub(super) fn get(&self, master: usize) -> Option<&Tally> {
        self.0.get(&master)
    }

    /// A sub-job of the array of `master` went from `before` to `after`; says whether
    /// the array is tallied.
    fn moved(&mut self, master: usize, before: JobState, after: JobState) -> bool {
        let Some(tally) = self.0.get_mut(&master) else {
            return false;
        };
        tally.by_state[before as usize] -= 1;
        tally.by_state[after as usize] += 1;
        true
    }

    /// Counts a sub-job that ended by itself; says whether it is the first (`None`: the
    /// array is not tallied).
    fn count_ended(&mut self, master: usize) -> Option<bool> {
        let tally = self.0.get_mut(&master)?;
        let first = tally.ended == 0;
        tally.ended += 1;
        Some(first)
    }
}

impl Engine {
    /// Starts tallying the array whose master is at `master` (its sub-jobs follow it).
    pub(crate) fn track_array(&mut self, master: usize) {
        let job = self.job_at(master);
        let Some(spec) = job.array_spec() else {
            return;
        };
        let count = spec.indices().len();
        let mut tally = Tally {
            first: master + 1,
            count,
            by_state: [0; JobState::ALL.len()],
            ended: 0,
            slot_limit: spec.slot_limit,
        };
        {
            let book = self.shared.jobs.read().unwrap();
            for position in master + 1..master + 1 + count {
                let member = book.at(position);
                tally.by_state[member.status.state as usize] += 1;
                if member.status.state == JobState::Completed {
                    tally.ended += 1;
                }
            }
        }
        self.arrays.0.insert(master, tally);
        self.summarize(master);
    }

    /// A sub-job went from `before` to its current state.
    pub(crate) fn member_moved(&mut self, member: &Job, before: JobState) {
        let Some((master_id, _)) = member.array_member() else {
            return;
        };
        let Some(master) = self.position(master_id) else {
            return;
        };
        if self.arrays.moved(master, before, member.status.state) {
            self.summarize(master);
        }
    }

    /// Brings the master's state in line with its sub-jobs.
    fn summarize(&mut self, master: usize) {
        let Some(summary) = self.arrays.get(master).map(Tally::summary) else {
            return;
        };
        let job = self.job_at(master);
        if job.status.state == summary {
            return;
        }
        let now = self.now();
        self.update(master, |job| {
            job.status.state = summary;
            if summary == JobState::Running && job.status.dates.start.is_none() {
                job.status.dates.start = Some(now);
            }
            job.status.dates.completion = summary.is_final().then_some(now);
        });
    }

    /// Whether the slot limit lets one more sub-job of `member`'s array start, counting
    /// those `starting` in this pass; with `take`, counts this one in.
    pub(crate) fn slot_free(
        &self,
        member: &Job,
        starting: &mut HashMap<usize, u32>,
        take: bool,
    ) -> bool {
        let Some(master) = member.array_member().and_then(|(id, _)| self.position(id)) else {
            return true;
        };
        let Some(tally) = self.arrays.get(master) else {
            return true;
        };
        let chosen = starting.entry(master).or_default();
        if take {
            *chosen += 1;
            return true;
        }
        tally
            .slot_limit
            .is_none_or(|limit| tally.active() + *chosen < limit)
    }

    /// A sub-job ended by itself with `code`: applies the array's cancellation policy.
    pub(crate) fn member_ended(&mut self, member: &Job, code: i32) {
        let Some((master_id, _)) = member.array_member() else {
            return;
        };
        let Some(master) = self.position(master_id) else {
            return;
        };
        let Some(first) = self.arrays.count_ended(master) else {
            return;
        };
        let master_job = self.job_at(master);
        let Some(spec) = master_job.array_spec() else {
            return;
        };
        let outcome = if code == 0 {
            ArrayOutcome::Success
        } else {
            ArrayOutcome::Failure
        };
        let rule = if spec.cancel_on_any == Some(outcome) {
            Some("any")
        } else if first && spec.cancel_on_first == Some(outcome) {
            Some("the first")
        } else {
            None
        };
        if let Some(which) = rule {
            let reason = format!(
                "{which} sub-job ({}) ended in {}",
                member.id,
                if code == 0 { "success" } else { "failure" }
            );
            self.cancel_members(master, &reason);
        }
    }

    /// Cancels every sub-job that has not ended (no event each: the caller reports it).
    pub(crate) fn cancel_members(&mut self, master: usize, reason: &str) {
        let Some(tally) = self.arrays.get(master).cloned() else {
            return;
        };
        for position in tally.first..tally.first + tally.count {
            let job = self.job_at(position);
            if !job.status.state.is_final()
                && let Err(e) = self.end_by_cancel(position, &job, Some(reason))
            {
                eprintln!("drover: cannot cancel sub-job {}: {e}", job.id);
            }
        }
    }

    /// `cancel` on an array master: cancels its sub-jobs.
    pub(crate) fn cancel_array(
        &mut self,
        master: usize,
        by: &Requester,
    ) -> Result<String, SchedError> {
        let job = self.job_at(master);
        self.cancel_members(master, &format!("the array was cancelled by {}", by.user));
        self.emit("jobcancel", "job", &job.id, Some(by), Vec::new());
        Ok(format!("Job array {} was cancelled", job.id))
    }
}
