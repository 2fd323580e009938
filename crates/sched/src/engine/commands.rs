//! The commands handlers send: submit, modify, the job actions, node changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::CredentialKind;
use super::core::Engine;
use crate::book::Attribute;
use crate::dependency::DependencyKind;
use crate::fsfacts::{Facts, FileFacts};
use crate::job::{
    ArrayOutcome, ArrayPart, ArraySpec, Block, EndIntent, Hold, Job, JobDates, JobMessage, JobSpec,
    JobState, JobStatus, Output,
};
use crate::limits::{MAX_JOB_MESSAGES, MAX_MESSAGE_BYTES};
use crate::node::{GenericEvent, NodeMessage};
use crate::place::{self, Fit};
use crate::request::{JobAction, JobChanges, NodeChanges, Requester, SchedError};
use crate::rm::{JobSignal, Launch};
use crate::sysuser::{self, SystemUser};
use crate::validate;

impl Engine {
    pub(crate) fn submit(&mut self, spec: JobSpec, by: &Requester) -> Result<String, SchedError> {
        let (spec, user) = self.prepare_submission(spec, by)?;
        self.check_queued_limit(by, &spec, 1)?;
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
        let max_size = if by.admin {
            ArraySpec::MAX_SIZE
        } else {
            self.config.limits.max_array_size
        };
        let problems = array.problems(max_size);
        if !problems.is_empty() {
            let mut messages = vec!["The job array was not submitted".to_string()];
            messages.extend(problems);
            return Err(SchedError::Invalid(messages));
        }
        let (mut spec, user) = self.prepare_submission(spec, by)?;
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
        let indices = array.indices();
        self.check_queued_limit(by, &spec, indices.len())?;
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

    /// Checks a submission and completes it (working directory, class); the system user
    /// that will run it.
    fn prepare_submission(
        &mut self,
        mut spec: JobSpec,
        by: &Requester,
    ) -> Result<(JobSpec, Arc<SystemUser>), SchedError> {
        // A job joins only a container its submitter may act on (HOLDJOBS holds it).
        let containers = &self.containers;
        validate::submission(&spec, |id| containers.position_for(id, by).is_some())?;
        spec.extra.shrink();
        let user = self.job_user(&spec, by)?;
        if let Some(group) = &spec.group {
            self.check_group(group, &spec, by, &user)?;
        }
        let (directory, checked) = match &spec.working_directory {
            Some(dir) => (PathBuf::from(dir), false),
            None => default_directory(&user, self.accounts.file_facts()),
        };
        // Judged as the job's user sees the file system: a directory they cannot reach
        // is answered like one that does not exist.
        let usable = checked
            || (directory.is_absolute()
                && self.accounts.file_facts().reachable(&directory, &user)
                && self.accounts.file_facts().check(&directory, |facts| {
                    facts.is_some_and(|f| user.may_enter(&f))
                }));
        if !usable {
            return Err(SchedError::invalid(
                "The job was not submitted",
                format!(
                    "initialWorkingDirectory: '{}' is not an existing directory that user '{}' \
                     can enter (give an absolute path)",
                    directory.display(),
                    user.name
                ),
            ));
        }
        let command = directory.join(&spec.command_file);
        if !(self.accounts.file_facts().reachable(&command, &user)
            && self
                .accounts
                .file_facts()
                .check(&command, |facts| facts.is_some_and(|f| user.may_read(&f))))
        {
            return Err(SchedError::invalid(
                "The job was not submitted",
                format!(
                    "commandFile: '{}' does not exist or user '{}' cannot read it",
                    command.display(),
                    user.name
                ),
            ));
        }
        spec.working_directory = Some(directory.to_string_lossy().into_owned());
        self.check_dependencies(&spec)?;
        if let Some(wanted) = &spec.extra.reservation_requested
            && self.reservations.position(wanted).is_none()
        {
            return Err(SchedError::invalid(
                "The job was not submitted",
                format!("reservationRequested: no reservation '{wanted}'"),
            ));
        }
        if spec.job_class.is_none() {
            spec.job_class = self.config.credentials.classes.first().cloned();
        }
        Ok((spec, user))
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
        for (kind, name) in [
            (
                CredentialKind::Users,
                Some(spec.user.as_deref().unwrap_or(&by.user)),
            ),
            (CredentialKind::Groups, spec.group.as_deref()),
            (CredentialKind::Accounts, spec.account.as_deref()),
            (CredentialKind::Classes, spec.job_class.as_deref()),
            (CredentialKind::Qoses, spec.qos_requested.as_deref()),
        ] {
            self.remember_credential(kind, name);
        }
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
                return Err(SchedError::invalid("The job was not submitted", reason));
            }
        }
        Ok(())
    }

    /// The system user a job runs as: the one it names, else the caller's own account,
    /// else the configured execution user. Without root, every job runs as the service
    /// user, whatever it names.
    fn job_user(&mut self, spec: &JobSpec, by: &Requester) -> Result<Arc<SystemUser>, SchedError> {
        let refuse = |reason: String| SchedError::invalid("The job was not submitted", reason);
        if let Some(name) = &spec.user
            && *name != by.user
            && !by.admin
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

    /// An ordinary user may have at most `max_queued_jobs_per_user` jobs waiting to
    /// start; `adding` more would go over it. Counted from the book's indexes.
    fn check_queued_limit(
        &self,
        by: &Requester,
        spec: &JobSpec,
        adding: usize,
    ) -> Result<(), SchedError> {
        if by.admin {
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
        Err(SchedError::Refused(vec![
            "The job was not submitted".into(),
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
                "The job was not submitted",
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
            "The job was not submitted: user '{}' is not a member of group '{group}'",
            member.name
        )))
    }

    /// The launch description of a job about to start.
    pub(crate) fn launch_of(&mut self, job: &Job) -> Result<Launch, String> {
        let user = if sysuser::running_as_root() {
            self.account(&job.status.exec_user)
                .ok_or_else(|| format!("the user '{}' no longer exists", job.status.exec_user))?
        } else {
            self.accounts.service_user().clone()
        };
        let gid = match &job.spec.group {
            Some(group) if sysuser::running_as_root() => {
                let gid = sysuser::group_id(group)
                    .ok_or_else(|| format!("the group '{group}' no longer exists"))?;
                // Memberships change while a job waits: judge again what it will run with.
                if !user.groups.contains(&gid) {
                    return Err(format!(
                        "the user '{}' is no longer a member of the group '{group}'",
                        user.name
                    ));
                }
                Some(gid)
            }
            _ => None,
        };
        let directory = PathBuf::from(job.spec.working_directory.as_deref().unwrap_or("/"));
        let nodes: Vec<&str> = job.node_ids().collect();
        let mut environment = vec![
            ("HOME".to_string(), user.home.clone()),
            ("USER".into(), user.name.clone()),
            ("LOGNAME".into(), user.name.clone()),
            (
                "SHELL".into(),
                if user.shell.is_empty() {
                    "/bin/sh".into()
                } else {
                    user.shell.clone()
                },
            ),
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ];
        environment.extend(
            job.spec
                .environment
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        let tasks = job.spec.request.task_count.to_string();
        let processors = job.processors().to_string();
        for (name, value) in [
            ("DROVER_JOB_ID", job.id.clone()),
            (
                "DROVER_JOB_NAME",
                job.spec.custom_name.clone().unwrap_or_default(),
            ),
            ("DROVER_NODELIST", nodes.join(",")),
            ("DROVER_TASK_COUNT", tasks),
            ("DROVER_PROCESSORS", processors.clone()),
            ("DROVER_SUBMIT_USER", job.status.submitter.clone()),
            ("MOAB_JOBID", job.id.clone()),
            (
                "MOAB_JOBNAME",
                job.spec.custom_name.clone().unwrap_or_default(),
            ),
            ("MOAB_NODELIST", nodes.join(",")),
            ("MOAB_PROCCOUNT", processors),
            ("MOAB_USER", user.name.clone()),
        ] {
            environment.retain(|(k, _)| k != name);
            environment.push((name.to_string(), value));
        }
        Ok(Launch {
            job_id: job.id.clone(),
            command_file: directory.join(&job.spec.command_file),
            arguments: split_arguments(&job.spec.arguments),
            working_directory: directory.clone(),
            environment,
            stdout: job.output_path(Output::Stdout),
            stderr: job.output_path(Output::Stderr),
            stdin: job.spec.stdin_path.as_ref().map(|p| directory.join(p)),
            user: SystemUser::clone(&user),
            gid,
        })
    }

    fn find(&self, id: &str) -> Result<usize, SchedError> {
        self.position(id)
            .ok_or_else(|| SchedError::NotFound(format!("No job '{id}'")))
    }

    /// Without permission over every job, a caller acts only on their own: those whose
    /// user they are (which they also are of every job they submitted). Another user's
    /// job is answered as missing, as a read of it is: a 403 would tell that it exists.
    fn may_change(&self, job: &Job, by: &Requester) -> Result<(), SchedError> {
        if by.admin || job.user() == by.user {
            Ok(())
        } else {
            Err(SchedError::NotFound(format!("No job '{}'", job.id)))
        }
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
        let refuse =
            |reason: String| SchedError::refused(format!("Job {id} was not modified"), reason);
        let invalid =
            |reason: String| SchedError::invalid(format!("Job {id} was not modified"), reason);
        let only_messages = changes
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
        if !by.admin {
            self.check_change_size(&job, &changes).map_err(invalid)?;
        }
        if changes.system_priority.is_some() && !by.admin {
            return Err(SchedError::Forbidden(
                "only administrators may set the system priority".into(),
            ));
        }
        let new_holds = match &changes.holds {
            Some(wanted) => Some(self.holds_after_setting(&job, wanted, by)?),
            None => None,
        };
        self.remember_credential(CredentialKind::Accounts, changes.account.as_deref());
        self.remember_credential(CredentialKind::Classes, changes.job_class.as_deref());
        self.remember_credential(CredentialKind::Qoses, changes.qos_requested.as_deref());
        let now = self.now();
        let mut changed = Vec::new();
        // What is asked changes only when a field of it does: a sub-job then gets a copy
        // of its array's submission of its own.
        let changes_request = changes.changes_request();
        let system_priority = changes.system_priority;
        self.update(position, |job| {
            if changes_request {
                let spec = Arc::make_mut(&mut job.spec);
                macro_rules! set {
                    ($field:expr, $value:expr, $name:literal) => {
                        if let Some(value) = $value {
                            $field = value;
                            changed.push($name);
                        }
                    };
                }
                set!(spec.custom_name, changes.custom_name.map(Some), "name");
                set!(spec.account, changes.account.map(Some), "account");
                set!(
                    spec.qos_requested,
                    changes.qos_requested.map(Some),
                    "qosRequested"
                );
                set!(spec.job_class, changes.job_class.map(Some), "class");
                set!(
                    spec.earliest_start,
                    changes.earliest_start.map(Some),
                    "earliestStartDate"
                );
                set!(spec.deadline, changes.deadline.map(Some), "deadlineDate");
                set!(spec.flags, changes.flags, "flags");
                set!(spec.duration, changes.duration.map(Some), "duration");
                set!(
                    spec.request.partition,
                    changes.partition.map(Some),
                    "partition"
                );
                set!(
                    spec.extra.partition_access_list,
                    changes.partition_access_list,
                    "partitionAccessList"
                );
                set!(
                    spec.extra.reservation_requested,
                    changes.reservation.map(Some),
                    "reservationRequested"
                );
                set!(spec.extra.trigger, changes.trigger.map(Some), "trigger");
                set!(spec.user_priority, changes.user_priority, "userPriority");
            }
            if let Some(priority) = system_priority {
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
                        author: Some(by.user.clone()),
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

    /// The holds a job has after a modify that sets them to `wanted`; non-administrators
    /// may change only the User hold.
    fn holds_after_setting(
        &self,
        job: &Job,
        wanted: &[Hold],
        by: &Requester,
    ) -> Result<Vec<Hold>, SchedError> {
        if by.admin {
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

    pub(crate) fn act(
        &mut self,
        id: &str,
        action: JobAction,
        by: &Requester,
    ) -> Result<String, SchedError> {
        let position = self.find(id)?;
        let job = self.job_at(position);
        self.may_change(&job, by)?;
        let name = action.name();
        let state = job.status.state;
        let refuse =
            |reason: String| SchedError::refused(format!("Cannot {name} job {id}"), reason);
        if job.array_spec().is_some() && !matches!(action, JobAction::Cancel) {
            return Err(refuse(
                "it is a job array master, which does not run itself: act on its sub-jobs, or cancel the array".into(),
            ));
        }
        if state.is_final() {
            return Err(refuse(format!(
                "the job has already ended ({})",
                state.as_str()
            )));
        }
        let now = self.now();
        match action {
            JobAction::Hold(holds) => {
                let holds = if holds.is_empty() {
                    vec![Hold::User]
                } else {
                    holds
                };
                if !by.admin
                    && let Some(h) = holds.iter().find(|h| **h != Hold::User)
                {
                    return Err(SchedError::Forbidden(format!(
                        "only administrators may place {} holds",
                        h.as_str()
                    )));
                }
                let mut all = job.status.holds.clone();
                all.extend(holds);
                let all = sorted(all);
                self.update(position, |job| set_holds(job, all, now));
                self.emit("jobhold", "job", id, Some(by), Vec::new());
                Ok(format!("Job {id} is held"))
            }
            JobAction::Unhold(holds) => {
                let releasable = |h: &Hold| by.admin || *h == Hold::User;
                let remaining: Vec<Hold> = if holds.is_empty() {
                    job.status
                        .holds
                        .iter()
                        .copied()
                        .filter(|h| !releasable(h))
                        .collect()
                } else {
                    if let Some(h) = holds.iter().find(|h| !releasable(h)) {
                        return Err(SchedError::Forbidden(format!(
                            "only administrators may release {} holds",
                            h.as_str()
                        )));
                    }
                    job.status
                        .holds
                        .iter()
                        .copied()
                        .filter(|h| !holds.contains(h))
                        .collect()
                };
                self.update(position, |job| set_holds(job, remaining, now));
                self.emit("jobrelease", "job", id, Some(by), Vec::new());
                Ok(match self.job_at(position).status.holds.as_slice() {
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
            JobAction::Suspend => {
                if !job.has_flag("SUSPENDABLE") {
                    return Err(refuse(
                        "only jobs flagged SUSPENDABLE can be suspended".into(),
                    ));
                }
                if state != JobState::Running || job.status.ending.is_some() {
                    return Err(refuse(format!(
                        "the job is not running ({})",
                        state.as_str()
                    )));
                }
                self.signal(&job, JobSignal::Suspend).map_err(&refuse)?;
                self.update(position, |job| {
                    job.status.state = JobState::Suspended;
                    job.status.suspended_since = Some(now);
                });
                self.emit("jobsuspend", "job", id, Some(by), Vec::new());
                Ok(format!("Job {id} is suspended"))
            }
            JobAction::Resume => {
                if state != JobState::Suspended {
                    return Err(refuse(format!(
                        "the job is not suspended ({})",
                        state.as_str()
                    )));
                }
                self.signal(&job, JobSignal::Resume).map_err(&refuse)?;
                self.update(position, |job| {
                    job.status.state = JobState::Running;
                    if let Some(since) = job.status.suspended_since.take() {
                        job.status.suspended_seconds += now - since;
                    }
                });
                self.emit("jobresume", "job", id, Some(by), Vec::new());
                Ok(format!("Job {id} is running again"))
            }
            JobAction::Cancel => self.cancel(position, &job, by),
            JobAction::Requeue => {
                if !job.has_flag("RESTARTABLE") {
                    return Err(refuse(
                        "only jobs flagged RESTARTABLE can be requeued".into(),
                    ));
                }
                match state {
                    JobState::Running | JobState::Suspended => {
                        self.signal(
                            &job,
                            JobSignal::Terminate {
                                grace_seconds: self.config.kill_grace_seconds,
                            },
                        )
                        .map_err(&refuse)?;
                        self.update(position, |job| {
                            job.status.ending = Some(EndIntent::Requeue);
                            job.status.counts.requeue += 1;
                        });
                    }
                    JobState::Starting => {
                        self.charge_nodes(&job, false);
                        self.update(position, |job| {
                            job.status.allocation.clear();
                            job.status.state = JobState::Idle;
                            job.status.counts.requeue += 1;
                        });
                    }
                    _ => {
                        return Err(refuse(format!(
                            "the job is not running ({})",
                            state.as_str()
                        )));
                    }
                }
                self.emit("jobrequeue", "job", id, Some(by), Vec::new());
                Ok(format!("Job {id} is requeued"))
            }
            JobAction::Execute => {
                // Starting now jumps the queue and drops every hold (System ones too).
                if !by.admin {
                    return Err(SchedError::Forbidden(format!(
                        "{} may not force jobs to start: that needs the jobs:update \
                         permission over every job",
                        by.user
                    )));
                }
                if !state.is_queued() {
                    return Err(refuse(format!(
                        "the job is already {}",
                        state.as_str().to_lowercase()
                    )));
                }
                match place::place(&job.spec.request, self.nodes.all()) {
                    Fit::Now(allocation) => {
                        self.begin_start(position, allocation).map_err(&refuse)?;
                        self.update(position, |job| {
                            job.status.holds.clear();
                            job.status.hold_reason = None;
                        });
                        self.emit(
                            "jobstart",
                            "job",
                            id,
                            Some(by),
                            vec![("forced".into(), "true".into())],
                        );
                        Ok(format!("Job {id} is starting"))
                    }
                    Fit::Later(reason) | Fit::Never(reason) => {
                        Err(refuse(format!("resources are not available now: {reason}")))
                    }
                }
            }
            JobAction::Checkpoint => {
                let Some(command) = self.config.checkpoint_command.clone() else {
                    return Err(refuse(
                        "checkpointing is not supported: no checkpoint command is configured"
                            .into(),
                    ));
                };
                let Some(process) = job
                    .status
                    .process
                    .clone()
                    .filter(|_| state == JobState::Running)
                else {
                    return Err(refuse(format!(
                        "the job is not running ({})",
                        state.as_str()
                    )));
                };
                let job_id = id.to_string();
                std::thread::spawn(move || {
                    let result = std::process::Command::new("/bin/sh")
                        .arg("-c")
                        .arg(&command)
                        .env("DROVER_JOB_ID", &job_id)
                        .env("DROVER_JOB_PID", process.pid.to_string())
                        .env("DROVER_JOB_SPOOL", &process.spool)
                        .status();
                    if !result.as_ref().is_ok_and(|s| s.success()) {
                        eprintln!(
                            "drover: the checkpoint command failed for job {job_id}: {result:?}"
                        );
                    }
                });
                self.update(position, |job| {
                    job.status.messages.push(JobMessage {
                        text: "checkpoint requested".into(),
                        author: Some(by.user.clone()),
                        created: now,
                    });
                });
                self.emit("jobcheckpoint", "job", id, Some(by), Vec::new());
                Ok(format!("Job {id} is being checkpointed"))
            }
        }
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
                    let grace = self.config.kill_grace_seconds;
                    self.rm
                        .signal(
                            process,
                            JobSignal::Terminate {
                                grace_seconds: grace,
                            },
                        )
                        .map_err(|e| SchedError::refused(format!("Cannot cancel job {id}"), e))?;
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
                self.update(position, |job| {
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

    pub(crate) fn modify_node(
        &mut self,
        id: &str,
        changes: NodeChanges,
        by: &Requester,
    ) -> Result<Vec<String>, SchedError> {
        if !by.admin {
            return Err(SchedError::Forbidden(format!(
                "{} may not change nodes",
                by.user
            )));
        }
        let index = self
            .nodes
            .all()
            .iter()
            .position(|n| n.config.id == id)
            .ok_or_else(|| SchedError::NotFound(format!("No node '{id}'")))?;
        for name in changes.variables.keys() {
            validate::variable_name(name)
                .map_err(|p| SchedError::invalid(format!("Node {id} was not modified"), p))?;
        }
        let now = self.now();
        let mut changed = Vec::new();
        let node = self.nodes.node_mut(index);
        let overrides = &mut node.overrides;
        if let Some(state) = changes.state {
            overrides.state = if state.follows_load() {
                None
            } else {
                Some(state)
            };
            overrides.state_updated = now;
            changed.push("state");
        }
        if let Some(off) = changes.power_off {
            overrides.power_off = Some(off);
            changed.push("power");
        }
        if let Some(os) = changes.os {
            overrides.os = Some(os);
            changed.push("os");
        }
        if let Some(partition) = changes.partition {
            overrides.partition = Some(partition);
            changed.push("partition");
        }
        if !changes.messages.is_empty() {
            overrides.messages.extend(
                changes
                    .messages
                    .into_iter()
                    .map(|text| NodeMessage { text, created: now }),
            );
            changed.push("messages");
        }
        if !changes.generic_events.is_empty() {
            overrides
                .generic_events
                .extend(
                    changes
                        .generic_events
                        .into_iter()
                        .map(|(name, message)| GenericEvent {
                            name,
                            message,
                            created: now,
                        }),
                );
            changed.push("genericEvents");
        }
        if !changes.generic_metrics.is_empty() {
            overrides.generic_metrics.extend(changes.generic_metrics);
            changed.push("genericMetrics");
        }
        if !changes.variables.is_empty() {
            for (name, value) in changes.variables {
                match value {
                    Some(value) => overrides.variables.insert(name, value),
                    None => overrides.variables.remove(&name),
                };
            }
            changed.push("variables");
        }
        overrides.version += 1;
        overrides.last_update = now;
        let body = drover_store::Body::serialize(&*overrides).expect("node overrides serialize");
        self.journal.write(drover_store::Write::Put {
            collection: super::core::NODES.into(),
            id: id.to_string(),
            name: None,
            body,
        });
        self.needs_schedule = true;
        self.emit(
            "nodemodify",
            "node",
            id,
            Some(by),
            vec![("fields".into(), changed.join(","))],
        );
        Ok(vec![if changed.is_empty() {
            format!("Node {id} was not changed: the request named nothing to modify")
        } else {
            format!("Node {id} was modified: {}", changed.join(", "))
        }])
    }
}

/// Sets a job's holds and the state that follows from them.
fn set_holds(job: &mut Job, holds: Vec<Hold>, now: i64) {
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

fn sorted(mut holds: Vec<Hold>) -> Vec<Hold> {
    holds.sort();
    holds.dedup();
    holds
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

/// Splits a command line into arguments: white space separates, single and double
/// quotes group, a backslash escapes the next character (outside single quotes).
pub fn split_arguments(line: &str) -> Vec<String> {
    let mut arguments = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    current.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => current.extend(chars.next()),
                        _ => current.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                current.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    arguments.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                current.push(c);
            }
        }
    }
    if in_word {
        arguments.push(current);
    }
    arguments
}

#[cfg(test)]
mod tests {
    use super::split_arguments;

    #[test]
    fn arguments_split_like_a_shell() {
        assert_eq!(split_arguments(""), Vec::<String>::new());
        assert_eq!(split_arguments("  a b\tc "), ["a", "b", "c"]);
        assert_eq!(
            split_arguments(r#"'x y' "p \"q\"" r\ s ''"#),
            ["x y", "p \"q\"", "r s", ""]
        );
    }
}
