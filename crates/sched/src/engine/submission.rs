//! Submissions: the checks a job passes, in order (`Engine::check_submission`), and
//! the new job or job array they make.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::core::Engine;
use crate::book::Attribute;
use crate::dependency::DependencyKind;
use crate::fsfacts::{Facts, FileFacts};
use crate::job::{ArrayOutcome, ArrayPart, ArraySpec, Job, JobDates, JobSpec, JobState, JobStatus};
use crate::request::summary::{ARRAY_NOT_SUBMITTED, JOB_NOT_SUBMITTED};
use crate::request::{Requester, SchedError};
use crate::sysuser::{self, SystemUser};
use crate::validate;

/// A submission that passed every check, completed.
struct Checked {
    spec: JobSpec,
    /// The system user that will run the job.
    user: Arc<SystemUser>,
    /// The indices of a job array's sub-jobs (none for a single job).
    indices: Vec<i64>,
}

impl Engine {
    pub(crate) fn submit(&mut self, spec: JobSpec, by: &Requester) -> Result<String, SchedError> {
        let Checked { spec, user, .. } = self.check_submission(spec, None, by)?;
        let container = spec.extra.virtual_containers.first().cloned();
        let job = self.new_job(spec, &user, by);
        let id = job.id.clone();
        let position = self.add_job(job);
        if let Some(container) = container {
            self.join_container(&id, &container);
        }
        let job = self.job_at(position);
        self.requeue_index(position, &job);
        self.emit("jobsubmit", "job", &id, Some(by), Vec::new());
        Ok(id)
    }

    /// A job array: the master (stored) and its sub-jobs (in memory only: they are made
    /// from the master again after a restart, and stored once something happens to them).
    pub(crate) fn submit_array(
        &mut self,
        spec: JobSpec,
        array: ArraySpec,
        by: &Requester,
    ) -> Result<String, SchedError> {
        let Checked {
            mut spec,
            user,
            indices,
        } = self.check_submission(spec, Some(&array), by)?;
        mark_array_master(&mut spec, &array);
        let mut master = self.new_job(spec, &user, by);
        master.array = Some(Box::new(ArrayPart::Master(array)));
        let id = master.id.clone();
        let shared = master.array_member_spec();
        let members: Vec<Job> = indices
            .iter()
            .map(|&i| master.array_member_with(i, &shared))
            .collect();
        let master_position = self.add_job(master);
        let first = master_position + 1;
        {
            let mut book = self.shared.jobs.write().unwrap();
            for member in members {
                book.push(member);
            }
        }
        for position in first..first + indices.len() {
            let job = self.job_at(position);
            self.requeue_index(position, &job);
        }
        self.track_array(master_position);
        self.emit(
            "jobsubmit",
            "job",
            &id,
            Some(by),
            vec![("arraySize".into(), indices.len().to_string())],
        );
        Ok(id)
    }

    /// Every check a submission (of a job array, with `array`) passes, in order, the
    /// first failing one refusing it; completes what it leaves out (working directory,
    /// class).
    fn check_submission(
        &mut self,
        mut spec: JobSpec,
        array: Option<&ArraySpec>,
        by: &Requester,
    ) -> Result<Checked, SchedError> {
        if let Some(array) = array {
            self.check_array(array, by)?;
        }
        // A job joins only a container its submitter may act on (HOLDJOBS holds it).
        let containers = &self.containers;
        validate::submission(&spec, |id| containers.position_for(id, by).is_some())?;
        spec.extra.shrink();
        let policy = spec.extra.vm_usage_policy.as_deref();
        if crate::vm::wants_vm(policy) && !self.rm.runs_jobs_in_guests() {
            return Err(SchedError::invalid(
                JOB_NOT_SUBMITTED,
                format!(
                    "vmUsagePolicy {}: jobs in VMs are not run by the {} resource manager",
                    policy.unwrap_or_default(),
                    self.rm.name()
                ),
            ));
        }
        let user = self.job_user(&spec, by)?;
        if let Some(group) = &spec.group {
            self.check_group(group, &spec, by, &user)?;
        }
        let directory = self.check_files(&spec, &user)?;
        spec.working_directory = Some(directory.to_string_lossy().into_owned());
        self.check_dependencies(&spec)?;
        if let Some(wanted) = &spec.extra.reservation_requested
            && self.reservations.position(wanted).is_none()
        {
            return Err(SchedError::invalid(
                JOB_NOT_SUBMITTED,
                format!("reservationRequested: no reservation '{wanted}'"),
            ));
        }
        if spec.job_class.is_none() {
            spec.job_class = self.config.credentials.classes.first().cloned();
        }
        let indices = array.map(ArraySpec::indices).unwrap_or_default();
        self.check_queued_limit(by, &spec, array.map_or(1, |_| indices.len()))?;
        Ok(Checked {
            spec,
            user,
            indices,
        })
    }

    /// An array's indices and rules must be well formed, and it no larger than the
    /// caller may submit.
    fn check_array(&self, array: &ArraySpec, by: &Requester) -> Result<(), SchedError> {
        let max_size = if by.over_all {
            ArraySpec::MAX_SIZE
        } else {
            self.config.limits.max_array_size
        };
        let problems = array.problems(max_size);
        if problems.is_empty() {
            return Ok(());
        }
        let mut messages = vec![ARRAY_NOT_SUBMITTED.to_string()];
        messages.extend(problems);
        Err(SchedError::Invalid(messages))
    }

    /// The job's working directory (its user's home, else `/tmp`, when it names none),
    /// which its user must be able to enter, and its command file, which they must be
    /// able to read. Judged as the job's user sees the file system: a directory they
    /// cannot reach is answered like one that does not exist.
    fn check_files(&mut self, spec: &JobSpec, user: &SystemUser) -> Result<PathBuf, SchedError> {
        let facts = self.accounts.file_facts();
        let (directory, checked) = match &spec.working_directory {
            Some(dir) => (PathBuf::from(dir), false),
            None => default_directory(user, facts),
        };
        let usable = checked
            || (directory.is_absolute()
                && facts.reachable(&directory, user)
                && facts.check(&directory, |f| f.is_some_and(|f| user.may_enter(&f))));
        if !usable {
            return Err(SchedError::invalid(
                JOB_NOT_SUBMITTED,
                format!(
                    "initialWorkingDirectory: '{}' is not an existing directory that user '{}' \
                     can enter (give an absolute path)",
                    directory.display(),
                    user.name
                ),
            ));
        }
        let command = directory.join(&spec.command_file);
        if !(facts.reachable(&command, user)
            && facts.check(&command, |f| f.is_some_and(|f| user.may_read(&f))))
        {
            return Err(SchedError::invalid(
                JOB_NOT_SUBMITTED,
                format!(
                    "commandFile: '{}' does not exist or user '{}' cannot read it",
                    command.display(),
                    user.name
                ),
            ));
        }
        for (field, given) in [
            ("standardOutputFilePath", &spec.stdout_path),
            ("standardErrorFilePath", &spec.stderr_path),
        ] {
            let Some(given) = given else { continue };
            let path = directory.join(given);
            if !output_writable(facts, &path, user) {
                return Err(SchedError::invalid(
                    JOB_NOT_SUBMITTED,
                    format!(
                        "{field}: user '{}' cannot write '{}' (its directory does not exist, \
                         or they may not write there)",
                        user.name,
                        path.display()
                    ),
                ));
            }
        }
        Ok(directory)
    }

    /// A new job of `spec` with the next id, as submitted now.
    fn new_job(&mut self, spec: JobSpec, user: &SystemUser, by: &Requester) -> Job {
        let now = self.now();
        let seq = self.queue.take_seq();
        let id = format!("{}.{seq}", self.config.name);
        let holds = spec.holds.clone();
        let state = if holds.is_empty() {
            JobState::Idle
        } else {
            JobState::Hold
        };
        self.credentials.remember_job(&spec, &by.user);
        Job {
            id,
            seq,
            status: JobStatus {
                state,
                hold_reason: (!holds.is_empty()).then(|| "requested at submission".into()),
                holds,
                submitter: by.user.clone(),
                exec_user: user.name.clone(),
                dates: JobDates {
                    submit: now,
                    hold: (state == JobState::Hold).then_some(now),
                    last_updated: now,
                    state_updated: now,
                    ..Default::default()
                },
                ..Default::default()
            },
            spec: Arc::new(spec),
            array: None,
        }
    }

    /// Refuses dependencies of an unknown type, or on a job that does not exist.
    fn check_dependencies(&self, spec: &JobSpec) -> Result<(), SchedError> {
        for (i, dependency) in spec.extra.dependencies.iter().enumerate() {
            let problem = match DependencyKind::parse(&dependency.kind) {
                None => Some(format!(
                    "dependencies[{i}].type: '{}' is not one of {}",
                    dependency.kind,
                    DependencyKind::ACCEPTED
                )),
                Some(_) if dependency.name.is_empty() => {
                    Some(format!("dependencies[{i}].name: required"))
                }
                Some(kind) if kind.names_a_job() && self.position(&dependency.name).is_none() => {
                    Some(format!(
                        "dependencies[{i}].name: no job '{}'",
                        dependency.name
                    ))
                }
                Some(_) => None,
            };
            if let Some(reason) = problem {
                return Err(SchedError::invalid(JOB_NOT_SUBMITTED, reason));
            }
        }
        Ok(())
    }

    /// The system user a job runs as: the one it names, else the caller's own account,
    /// else the configured execution user. Without root, every job runs as the service
    /// user, whatever it names.
    fn job_user(&mut self, spec: &JobSpec, by: &Requester) -> Result<Arc<SystemUser>, SchedError> {
        let refuse = |reason: String| SchedError::invalid(JOB_NOT_SUBMITTED, reason);
        if let Some(name) = &spec.user
            && *name != by.user
            && !by.over_all
        {
            return Err(SchedError::Forbidden(format!(
                "{} may not submit jobs as another user ('{name}')",
                by.user
            )));
        }
        let named = match &spec.user {
            Some(name) => Some(self.account(name).ok_or_else(|| {
                refuse(format!("user: '{name}' has no system account on this host"))
            })?),
            None => None,
        };
        if !sysuser::running_as_root() {
            return Ok(self.accounts.service_user().clone());
        }
        let user = match named {
            Some(user) => user,
            None => match self.account(&by.user) {
                Some(user) => user,
                None => {
                    let fallback = self.execution_user_name();
                    self.account(&fallback).ok_or_else(|| {
                        refuse(format!(
                            "the execution user '{fallback}' has no system account"
                        ))
                    })?
                }
            },
        };
        if user.uid == 0 && !self.config.allow_root_jobs {
            return Err(refuse(format!(
                "user: jobs may not run as root ('{}'); name another user",
                user.name
            )));
        }
        Ok(user)
    }

    /// An ordinary user may have at most `max_queued_jobs_per_user` jobs waiting to
    /// start; `adding` more would go over it. Counted from the book's indexes.
    fn check_queued_limit(
        &self,
        by: &Requester,
        spec: &JobSpec,
        adding: usize,
    ) -> Result<(), SchedError> {
        if by.over_all {
            return Ok(());
        }
        let limit = self.config.limits.max_queued_jobs_per_user;
        let user = spec.user.as_deref().unwrap_or(&by.user);
        let queued: u64 = {
            let book = self.shared.jobs.read().unwrap();
            match book.with(Attribute::User, user) {
                None => 0,
                Some(theirs) => JobState::ALL
                    .iter()
                    .filter(|s| s.is_queued())
                    .filter_map(|s| book.with(Attribute::State, s.as_str()))
                    .map(|in_state| theirs.intersection_len(in_state))
                    .sum(),
            }
        };
        if queued as usize + adding <= limit {
            return Ok(());
        }
        // Records of work a plugin reports are not the user's submissions here.
        let reported = {
            let book = self.shared.jobs.read().unwrap();
            book.live_positions(Some(user))
                .iter()
                .map(|p| book.at(p as usize))
                .filter(|j| j.spec.extra.reported_by.is_some() && j.status.state.is_queued())
                .count()
        };
        let queued = (queued as usize).saturating_sub(reported);
        if queued + adding <= limit {
            return Ok(());
        }
        Err(SchedError::Refused(vec![
            JOB_NOT_SUBMITTED.into(),
            format!(
                "user '{user}' has {queued} jobs waiting to start and may have at most {limit} \
                 ([scheduler.limits] max_queued_jobs_per_user)"
            ),
        ]))
    }

    /// A job's group must be one its user belongs to (primary or supplementary, as the
    /// system's name service says), whoever submits it: the job runs with that group id,
    /// and ACL rules of type GROUP judge it.
    fn check_group(
        &mut self,
        group: &str,
        spec: &JobSpec,
        by: &Requester,
        runs_as: &Arc<SystemUser>,
    ) -> Result<(), SchedError> {
        let Some(gid) = sysuser::group_id(group) else {
            return Err(SchedError::invalid(
                JOB_NOT_SUBMITTED,
                format!("group: '{group}' is not a group on this host"),
            ));
        };
        // Without root every job runs as the service's user; the group is then judged
        // against the job user's own account where there is one.
        let name = spec.user.as_deref().unwrap_or(&by.user);
        let member = self.account(name).unwrap_or_else(|| runs_as.clone());
        if member.groups.contains(&gid) {
            return Ok(());
        }
        Err(SchedError::Forbidden(format!(
            "{JOB_NOT_SUBMITTED}: user '{}' is not a member of group '{group}'",
            member.name
        )))
    }
}

/// Whether `user` can write the output file `path` as the job's wrapper opens it: a
/// directory they may make files in (the file gets its default name there), a file they
/// may write, or a new file in a directory they may make files in. Judged as the user
/// sees the file system; checked again when the job starts.
fn output_writable(facts: &mut FileFacts, path: &std::path::Path, user: &SystemUser) -> bool {
    if !facts.reachable(path, user) {
        return false;
    }
    if facts.check(path, |f| {
        f.is_some_and(|f| user.may_create_in(&f) || user.may_write(&f))
    }) {
        return true;
    }
    // Nothing there (or nothing the user may write): a new file in its directory.
    let exists = facts.get(path).is_some();
    let parent = path.parent().unwrap_or(std::path::Path::new("/"));
    !exists && facts.check(parent, |f| f.is_some_and(|f| user.may_create_in(&f)))
}

fn is_dir(facts: Option<Facts>) -> bool {
    facts.is_some_and(|f| f.is_dir)
}

/// The user's home when it is a directory (and `true`: it has just been checked), else
/// `/tmp` (and `false`). A home found missing is taken as missing for a moment
/// ([`FileFacts::get`]): the job then starts in `/tmp`, as it would have
/// a moment earlier.
fn default_directory(user: &SystemUser, facts: &mut FileFacts) -> (PathBuf, bool) {
    let home = Path::new(&user.home);
    if home.is_absolute() && is_dir(facts.get(home)) {
        (home.to_path_buf(), true)
    } else {
        (PathBuf::from("/tmp"), false)
    }
}

/// Flags a job array's master as such, with the array's cancellation rules, and gives it
/// the array's name.
fn mark_array_master(spec: &mut JobSpec, array: &ArraySpec) {
    if array.name.is_some() {
        spec.custom_name = array.name.clone();
    }
    spec.flags.retain(|f| f != "ARRAYJOB" && f != "ARRAYMASTER");
    spec.flags.push("ARRAYMASTER".into());
    for (rule, flag) in [
        (array.cancel_on_first, "FIRST"),
        (array.cancel_on_any, "ANY"),
    ] {
        if let Some(outcome) = rule {
            let outcome = match outcome {
                ArrayOutcome::Failure => "FAILURE",
                ArrayOutcome::Success => "SUCCESS",
            };
            spec.flags.push(format!("CANCELON{flag}{outcome}"));
        }
    }
}
