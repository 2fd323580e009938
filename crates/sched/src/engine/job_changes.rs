//! Changing a job (`modify`): what may change, by whom, and the holds that follow.

use std::sync::Arc;

use super::CredentialKind;
use super::core::Engine;
use crate::job::JobSpec;
use crate::job::{Block, Hold, Job, JobMessage, JobState};
use crate::limits::{MAX_JOB_MESSAGES, MAX_MESSAGE_BYTES};
use crate::request::summary;
use crate::request::{JobChanges, Requester, SchedError};
use crate::validate;

impl Engine {
    pub(super) fn find(&self, id: &str) -> Result<usize, SchedError> {
        self.position(id)
            .ok_or_else(|| SchedError::NotFound(format!("No job '{id}'")))
    }

    /// Without permission over every job, a caller acts only on their own: those whose
    /// user they are (which they also are of every job they submitted). Another user's
    /// job is answered as missing, as a read of it is: a 403 would tell that it exists.
    pub(super) fn may_change(&self, job: &Job, by: &Requester) -> Result<(), SchedError> {
        if !(by.over_all || job.user() == by.user) {
            return Err(SchedError::NotFound(format!("No job '{}'", job.id)));
        }
        if let Some(task) = &job.spec.extra.system_task {
            return Err(SchedError::refused(
                format!("Job {} was not changed", job.id),
                format!(
                    "it is the {} system job of VM {}: the service runs it; act on the VM \
                     (/rest/vms/{})",
                    task.template(),
                    task.vm(),
                    task.vm()
                ),
            ));
        }
        Ok(())
    }

    pub(crate) fn modify(
        &mut self,
        id: &str,
        changes: JobChanges,
        by: &Requester,
    ) -> Result<Vec<String>, SchedError> {
        let position = self.find(id)?;
        let job = self.job_at(position);
        self.may_change(&job, by)?;
        if job.spec.extra.rm_detected {
            let why = match &job.spec.extra.reported_by {
                Some(reporter) => format!(
                    "it is work another resource manager runs, which {reporter} reports: change it there"
                ),
                None => "it was submitted to the resource manager directly: it may only be \
                         cancelled here"
                    .into(),
            };
            return Err(SchedError::refused(
                format!("Job {id} was not changed"),
                why,
            ));
        }
        self.check_changes(&job, &changes, by)?;
        let new_holds = match &changes.holds {
            Some(wanted) => Some(self.holds_after_setting(&job, wanted, by)?),
            None => None,
        };
        self.remember_credential(CredentialKind::Accounts, changes.account.as_deref());
        self.remember_credential(CredentialKind::Classes, changes.job_class.as_deref());
        self.remember_credential(CredentialKind::Qoses, changes.qos_requested.as_deref());
        let now = self.now();
        let changed = self.update(position, |job| {
            apply_changes(job, changes, new_holds, &by.user, now)
        });
        self.emit(
            "jobmodify",
            "job",
            id,
            Some(by),
            vec![("fields".into(), changed.join(","))],
        );
        self.needs_schedule = true;
        Ok(vec![if changed.is_empty() {
            format!("Job {id} was not changed: the request named nothing to modify")
        } else {
            format!("Job {id} was modified: {}", changed.join(", "))
        }])
    }

    /// Refuses changes the job's state does not allow, malformed ones, and those the
    /// caller may not make.
    fn check_changes(
        &self,
        job: &Job,
        changes: &JobChanges,
        by: &Requester,
    ) -> Result<(), SchedError> {
        let id = &job.id;
        let refuse = |reason: String| SchedError::refused(summary::job_not_modified(id), reason);
        let invalid = |reason: String| SchedError::invalid(summary::job_not_modified(id), reason);
        let only_messages = *changes
            == JobChanges {
                messages: changes.messages.clone(),
                ..Default::default()
            };
        if job.status.state.is_final() && !only_messages {
            return Err(refuse(format!(
                "the job has ended ({}); only messages can be added",
                job.status.state.as_str()
            )));
        }
        if job.status.state.is_running()
            && (changes.partition.is_some() || changes.job_class.is_some())
        {
            return Err(refuse(
                "the partition and class of a running job cannot change".into(),
            ));
        }
        if let Some(flags) = &changes.flags {
            validate::flags(flags).map_err(invalid)?;
        }
        for (name, value) in &changes.variables {
            validate::variable_name(name).map_err(invalid)?;
            if let Some(value) = value {
                validate::variable_value(name, value).map_err(invalid)?;
            }
        }
        if changes.duration.is_some_and(|d| d < 0) {
            return Err(invalid("duration: must not be negative".into()));
        }
        if !by.over_all {
            self.check_change_size(job, changes).map_err(invalid)?;
        }
        if changes.system_priority.is_some() && !by.over_all {
            return Err(SchedError::Forbidden(
                "only administrators may set the system priority".into(),
            ));
        }
        Ok(())
    }

    /// What an ordinary user's change may add: messages of at most `MAX_MESSAGE_BYTES`,
    /// and variables adding up to at most `max_submission_bytes`.
    fn check_change_size(&self, job: &Job, changes: &JobChanges) -> Result<(), String> {
        if let Some(long) = changes
            .messages
            .iter()
            .find(|m| m.len() > MAX_MESSAGE_BYTES)
        {
            return Err(format!(
                "messages: a message may have at most {MAX_MESSAGE_BYTES} bytes, not {}",
                long.len()
            ));
        }
        if changes.variables.is_empty() {
            return Ok(());
        }
        let limit = self.config.limits.max_submission_bytes;
        let kept: usize = job
            .spec
            .variables
            .iter()
            .filter(|(name, _)| !changes.variables.contains_key(*name))
            .map(|(name, value)| name.len() + value.len())
            .sum();
        let added: usize = changes
            .variables
            .iter()
            .filter_map(|(name, value)| value.as_ref().map(|v| name.len() + v.len()))
            .sum();
        // Taking variables away is always allowed.
        if added > 0 && kept + added > limit {
            return Err(format!(
                "variables: they would add up to {} bytes, more than {limit} \
                 ([scheduler.limits] max_submission_bytes)",
                kept + added
            ));
        }
        Ok(())
    }

    /// The holds a job has after a modify that sets them to `wanted`; non-administrators
    /// may change only the User hold.
    fn holds_after_setting(
        &self,
        job: &Job,
        wanted: &[Hold],
        by: &Requester,
    ) -> Result<Vec<Hold>, SchedError> {
        if by.over_all {
            return Ok(sorted(wanted.to_vec()));
        }
        if let Some(h) = wanted.iter().find(|h| **h != Hold::User) {
            return Err(SchedError::Forbidden(format!(
                "only administrators may place or release {} holds",
                h.as_str()
            )));
        }
        let mut holds: Vec<Hold> = job
            .status
            .holds
            .iter()
            .copied()
            .filter(|h| *h != Hold::User)
            .collect();
        holds.extend(wanted.iter().copied());
        Ok(sorted(holds))
    }
}

/// Sets a job's holds and the state that follows from them.
pub(super) fn set_holds(job: &mut Job, holds: Vec<Hold>, now: i64) {
    let had = !job.status.holds.is_empty();
    job.status.holds = holds;
    let has = !job.status.holds.is_empty();
    if has && !had {
        job.status.dates.hold = Some(now);
    }
    if !job.status.holds.contains(&Hold::Batch)
        && job.status.block.as_ref().is_some_and(|b| b.kind == "Hold")
    {
        job.status.block = None;
    }
    if job.status.state.is_queued() {
        job.status.state = if has { JobState::Hold } else { JobState::Idle };
        if !has {
            job.status.hold_reason = None;
            job.status.block = None::<Block>;
        }
    }
}

pub(super) fn sorted(mut holds: Vec<Hold>) -> Vec<Hold> {
    holds.sort();
    holds.dedup();
    holds
}

/// Applies checked changes to a job (made by `author`, at `now`); answers the names of
/// the fields changed. What is asked changes only when a field of it does: a sub-job
/// then gets a copy of its array's submission of its own.
fn apply_changes(
    job: &mut Job,
    mut changes: JobChanges,
    new_holds: Option<Vec<Hold>>,
    author: &str,
    now: i64,
) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if changes.changes_request() {
        set_request_fields(Arc::make_mut(&mut job.spec), &mut changes, &mut changed);
    }
    if let Some(priority) = changes.system_priority {
        job.status.system_priority = priority;
        changed.push("systemPriority");
    }
    if !changes.variables.is_empty() {
        let spec = Arc::make_mut(&mut job.spec);
        for (name, value) in changes.variables {
            match value {
                Some(value) => spec.variables.insert(name, value),
                None => spec.variables.remove(&name),
            };
        }
        changed.push("variables");
    }
    if !changes.messages.is_empty() {
        let messages = &mut job.status.messages;
        for text in changes.messages {
            messages.push(JobMessage {
                text,
                author: Some(author.to_string()),
                created: now,
            });
        }
        let over = messages.len().saturating_sub(MAX_JOB_MESSAGES);
        messages.drain(..over);
        changed.push("messages");
    }
    if let Some(holds) = new_holds {
        set_holds(job, holds, now);
        changed.push("holds");
    }
    if job.status.state == JobState::Blocked {
        // Its request may fit now: let the next pass judge it again.
        job.status.state = JobState::Idle;
        job.status.block = None;
    }
    changed
}

/// Sets the fields of the job's request that `changes` names, noting each in `changed`.
fn set_request_fields(
    spec: &mut JobSpec,
    changes: &mut JobChanges,
    changed: &mut Vec<&'static str>,
) {
    macro_rules! set {
        ($field:expr, $value:expr, $name:literal) => {
            if let Some(value) = $value {
                $field = value;
                changed.push($name);
            }
        };
    }
    let c = changes;
    set!(spec.custom_name, c.custom_name.take().map(Some), "name");
    set!(spec.account, c.account.take().map(Some), "account");
    set!(
        spec.qos_requested,
        c.qos_requested.take().map(Some),
        "qosRequested"
    );
    set!(spec.job_class, c.job_class.take().map(Some), "class");
    set!(
        spec.earliest_start,
        c.earliest_start.take().map(Some),
        "earliestStartDate"
    );
    set!(spec.deadline, c.deadline.take().map(Some), "deadlineDate");
    set!(spec.flags, c.flags.take(), "flags");
    set!(spec.duration, c.duration.take().map(Some), "duration");
    set!(
        spec.request.partition,
        c.partition.take().map(Some),
        "partition"
    );
    set!(
        spec.extra.partition_access_list,
        c.partition_access_list.take(),
        "partitionAccessList"
    );
    set!(
        spec.extra.reservation_requested,
        c.reservation.take().map(Some),
        "reservationRequested"
    );
    set!(spec.extra.trigger, c.trigger.take().map(Some), "trigger");
    set!(spec.user_priority, c.user_priority.take(), "userPriority");
}
