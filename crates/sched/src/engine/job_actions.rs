//! The job actions: hold, unhold, suspend, resume, cancel, requeue, execute,
//! checkpoint; each its own method.

use super::core::Engine;
use super::job_changes::{set_holds, sorted};
use crate::clock::Seconds;
use crate::job::{EndIntent, Hold, Job, JobMessage, JobState};
use crate::place::{self, Fit};
use crate::request::summary;
use crate::request::{JobAction, Requester, SchedError};
use crate::rm::JobSignal;

/// The job an action is on, with who asks and when.
struct Target<'a> {
    position: usize,
    job: &'a Job,
    by: &'a Requester,
    action: &'static str,
    now: Seconds,
}

impl Target<'_> {
    fn id(&self) -> &str {
        &self.job.id
    }

    fn state(&self) -> JobState {
        self.job.status.state
    }

    /// The action is refused for `reason`.
    fn refuse(&self, reason: impl Into<String>) -> SchedError {
        SchedError::refused(summary::job_action_refused(self.action, self.id()), reason)
    }

    fn not_running(&self) -> SchedError {
        self.refuse(format!(
            "the job is not running ({})",
            self.state().as_str()
        ))
    }
}

impl Engine {
    pub(crate) fn act(
        &mut self,
        id: &str,
        action: JobAction,
        by: &Requester,
    ) -> Result<String, SchedError> {
        let position = self.find(id)?;
        let job = self.job_at(position);
        self.may_change(&job, by)?;
        let target = Target {
            position,
            job: &job,
            by,
            action: action.name(),
            now: self.now(),
        };
        if job.array_spec().is_some() && !matches!(action, JobAction::Cancel) {
            return Err(target.refuse(
                "it is a job array master, which does not run itself: act on its sub-jobs, or cancel the array",
            ));
        }
        if let Some(reporter) = &job.spec.extra.reported_by {
            // Only an administrator's cancel, which removes the record (a stale one).
            if by.over_all && matches!(action, JobAction::Cancel) && !target.state().is_final() {
                return Ok(self.forget_reported(position, by));
            }
            return Err(target.refuse(format!(
                "it is work another resource manager runs, which {reporter} reports: act on it there"
            )));
        }
        if job.spec.extra.rm_detected && !matches!(action, JobAction::Cancel) {
            return Err(target.refuse(format!(
                "it was submitted to the resource manager ({}) directly: it may only be cancelled here",
                self.shared.rm_name
            )));
        }
        if target.state().is_final() {
            return Err(target.refuse(format!(
                "the job has already ended ({})",
                target.state().as_str()
            )));
        }
        match action {
            JobAction::Hold(holds) => self.hold(&target, holds),
            JobAction::Unhold(holds) => self.unhold(&target, holds),
            JobAction::Suspend => self.suspend(&target),
            JobAction::Resume => self.resume(&target),
            JobAction::Cancel => self.cancel(position, &job, by),
            JobAction::Requeue => self.requeue(&target),
            JobAction::Execute => self.execute(&target),
            JobAction::Checkpoint => self.checkpoint(&target),
        }
    }

    /// Adds holds (a User hold when none is named); ordinary users place only User holds.
    fn hold(&mut self, target: &Target, holds: Vec<Hold>) -> Result<String, SchedError> {
        let (id, by, now) = (target.id(), target.by, target.now);
        let holds = if holds.is_empty() {
            vec![Hold::User]
        } else {
            holds
        };
        if !by.over_all
            && let Some(h) = holds.iter().find(|h| **h != Hold::User)
        {
            return Err(SchedError::Forbidden(format!(
                "only administrators may place {} holds",
                h.as_str()
            )));
        }
        let mut all = target.job.status.holds.clone();
        all.extend(holds);
        let all = sorted(all);
        self.update(target.position, |job| set_holds(job, all, now));
        self.emit("jobhold", "job", id, Some(by), Vec::new());
        Ok(format!("Job {id} is held"))
    }

    /// Releases the named holds, or every hold the caller may release.
    fn unhold(&mut self, target: &Target, holds: Vec<Hold>) -> Result<String, SchedError> {
        let (id, by, now) = (target.id(), target.by, target.now);
        let releasable = |h: &Hold| by.over_all || *h == Hold::User;
        let had = target.job.status.holds.iter().copied();
        let remaining: Vec<Hold> = if holds.is_empty() {
            had.filter(|h| !releasable(h)).collect()
        } else {
            if let Some(h) = holds.iter().find(|h| !releasable(h)) {
                return Err(SchedError::Forbidden(format!(
                    "only administrators may release {} holds",
                    h.as_str()
                )));
            }
            had.filter(|h| !holds.contains(h)).collect()
        };
        self.update(target.position, |job| set_holds(job, remaining, now));
        self.emit("jobrelease", "job", id, Some(by), Vec::new());
        Ok(match self.job_at(target.position).status.holds.as_slice() {
            [] => format!("Job {id} has no holds left"),
            left => format!(
                "Job {id} still has the holds {}",
                left.iter()
                    .map(|h| h.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }

    fn suspend(&mut self, target: &Target) -> Result<String, SchedError> {
        let (id, now) = (target.id(), target.now);
        if !target.job.has_flag("SUSPENDABLE") {
            return Err(target.refuse("only jobs flagged SUSPENDABLE can be suspended"));
        }
        if target.state() != JobState::Running || target.job.status.ending.is_some() {
            return Err(target.not_running());
        }
        self.signal(target.job, JobSignal::Suspend)
            .map_err(|e| target.refuse(e))?;
        self.update(target.position, |job| {
            job.status.state = JobState::Suspended;
            job.status.suspended_since = Some(now);
        });
        self.emit("jobsuspend", "job", id, Some(target.by), Vec::new());
        Ok(format!("Job {id} is suspended"))
    }

    fn resume(&mut self, target: &Target) -> Result<String, SchedError> {
        let (id, now) = (target.id(), target.now);
        if target.state() != JobState::Suspended {
            return Err(target.refuse(format!(
                "the job is not suspended ({})",
                target.state().as_str()
            )));
        }
        self.signal(target.job, JobSignal::Resume)
            .map_err(|e| target.refuse(e))?;
        self.update(target.position, |job| {
            job.status.state = JobState::Running;
            if let Some(since) = job.status.suspended_since.take() {
                job.status.suspended_seconds += now - since;
            }
        });
        self.emit("jobresume", "job", id, Some(target.by), Vec::new());
        Ok(format!("Job {id} is running again"))
    }

    /// Sends a running job back to the queue (its process is stopped first); a starting
    /// one goes back at once.
    fn requeue(&mut self, target: &Target) -> Result<String, SchedError> {
        let (id, position) = (target.id(), target.position);
        if !target.job.has_flag("RESTARTABLE") {
            return Err(target.refuse("only jobs flagged RESTARTABLE can be requeued"));
        }
        match target.state() {
            JobState::Running | JobState::Suspended => {
                let grace_seconds = self.config.kill_grace_seconds;
                self.signal(target.job, JobSignal::Terminate { grace_seconds })
                    .map_err(|e| target.refuse(e))?;
                self.update(position, |job| {
                    job.status.ending = Some(EndIntent::Requeue);
                    job.status.counts.requeue += 1;
                });
            }
            JobState::Starting => {
                self.charge_nodes(target.job, false);
                self.update(position, |job| {
                    job.status.allocation.clear();
                    job.status.state = JobState::Idle;
                    job.status.counts.requeue += 1;
                });
            }
            _ => return Err(target.not_running()),
        }
        self.emit("jobrequeue", "job", id, Some(target.by), Vec::new());
        Ok(format!("Job {id} is requeued"))
    }

    /// Starts a queued job now: it jumps the queue and drops every hold (System ones
    /// too).
    fn execute(&mut self, target: &Target) -> Result<String, SchedError> {
        let (id, by, state) = (target.id(), target.by, target.state());
        if !by.over_all {
            return Err(SchedError::Forbidden(format!(
                "{} may not force jobs to start: that needs the jobs:update \
                 permission over every job",
                by.user
            )));
        }
        if !state.is_queued() {
            return Err(target.refuse(format!(
                "the job is already {}",
                state.as_str().to_lowercase()
            )));
        }
        let allocation = match place::place(&target.job.spec.request, self.nodes.all()) {
            Fit::Now(allocation) => allocation,
            Fit::Later(reason) | Fit::Never(reason) => {
                return Err(target.refuse(format!("resources are not available now: {reason}")));
            }
        };
        self.begin_start(target.position, allocation)
            .map_err(|e| target.refuse(e))?;
        self.update(target.position, |job| {
            job.status.holds.clear();
            job.status.hold_reason = None;
        });
        let forced = vec![("forced".into(), "true".into())];
        self.emit("jobstart", "job", id, Some(by), forced);
        Ok(format!("Job {id} is starting"))
    }

    /// Runs the configured checkpoint command for a running job, off the engine thread.
    fn checkpoint(&mut self, target: &Target) -> Result<String, SchedError> {
        let (id, by, now) = (target.id(), target.by, target.now);
        let Some(command) = self.config.checkpoint_command.clone() else {
            return Err(target
                .refuse("checkpointing is not supported: no checkpoint command is configured"));
        };
        let Some(process) = target
            .job
            .status
            .process
            .clone()
            .filter(|_| target.state() == JobState::Running)
        else {
            return Err(target.not_running());
        };
        let job_id = id.to_string();
        std::thread::spawn(move || {
            let result = std::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(&command)
                .env("DROVER_JOB_ID", &job_id)
                .env("DROVER_JOB_PID", process.pid.to_string())
                .status();
            if !result.as_ref().is_ok_and(|s| s.success()) {
                eprintln!("drover: the checkpoint command failed for job {job_id}: {result:?}");
            }
        });
        self.update(target.position, |job| {
            job.status.messages.push(JobMessage {
                text: "checkpoint requested".into(),
                author: Some(by.user.clone()),
                created: now,
            });
        });
        self.emit("jobcheckpoint", "job", id, Some(by), Vec::new());
        Ok(format!("Job {id} is being checkpointed"))
    }

    fn cancel(&mut self, position: usize, job: &Job, by: &Requester) -> Result<String, SchedError> {
        if job.array_spec().is_some() {
            return self.cancel_array(position, by);
        }
        self.end_by_cancel(position, job, None)?;
        self.emit("jobcancel", "job", &job.id, Some(by), Vec::new());
        Ok(format!("Job {} was cancelled", job.id))
    }

    /// Ends a job by cancellation: a running one is signalled and Vacated (its resources
    /// stay taken until the process is gone), a queued one Removed. `why` is kept as a
    /// message on the job.
    pub(crate) fn end_by_cancel(
        &mut self,
        position: usize,
        job: &Job,
        why: Option<&str>,
    ) -> Result<(), SchedError> {
        let id = &job.id;
        let now = self.now();
        let note = why.map(|why| JobMessage {
            text: format!("Cancelled: {why}"),
            author: None,
            created: now,
        });
        match job.status.state {
            JobState::Running | JobState::Suspended => {
                if let Some(process) = &job.status.process {
                    self.terminate(process).map_err(|e| {
                        SchedError::refused(summary::job_action_refused("cancel", id), e)
                    })?;
                }
                self.update(position, |job| {
                    job.status.state = JobState::Vacated;
                    job.status.ending = Some(EndIntent::Cancel);
                    job.status.dates.completion = Some(now);
                    job.status.dates.last_canceled = Some(now);
                    job.status.counts.cancel += 1;
                    job.status.messages.extend(note);
                });
                // Resources stay taken until the process is gone; it stays in the running set.
                self.queue.keep_running(position);
            }
            _ => {
                if job.status.state == JobState::Starting {
                    self.charge_nodes(job, false);
                }
                // Waiting in the resource manager (submitted there directly): cancelled
                // there; its end, when heard, only completes the record.
                let in_rm = job
                    .status
                    .process
                    .as_ref()
                    .filter(|_| job.spec.extra.rm_detected);
                if let Some(process) = in_rm {
                    self.terminate(process).map_err(|e| {
                        SchedError::refused(summary::job_action_refused("cancel", id), e)
                    })?;
                }
                let in_rm = in_rm.is_some();
                self.update(position, |job| {
                    if in_rm {
                        job.status.ending = Some(EndIntent::Cancel);
                    }
                    job.status.state = JobState::Removed;
                    job.status.allocation.clear();
                    job.status.dates.completion = Some(now);
                    job.status.dates.last_canceled = Some(now);
                    job.status.counts.cancel += 1;
                    job.status.messages.extend(note);
                });
            }
        }
        Ok(())
    }

    fn signal(&self, job: &Job, signal: JobSignal) -> Result<(), String> {
        match &job.status.process {
            Some(process) => self.rm.signal(process, signal),
            None => Err("the job's process has not started yet".into()),
        }
    }
}
