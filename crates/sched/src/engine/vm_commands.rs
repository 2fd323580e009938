//! VMs in the engine: creating, changing, migrating and destroying them, their system
//! jobs, time to live, and finding them again after a restart.
//!
//! A VM holds its processors and memory on its host node from the moment it is asked
//! for until it is destroyed (or its setup fails), so the planner never gives them to a
//! job; a migration holds them on both nodes until it is done. The guest itself is the
//! [`VmHost`](crate::vm_host::VmHost)'s work: an operation is handed to it once the
//! change that asks for it is durable, and its outcome comes back to the inbox
//! ([`Inbox::VmDone`](super::Inbox)), which ends the system job and moves the VM on.

use std::collections::HashSet;
use std::sync::Arc;

use drover_store::{Body, Write};

use super::core::Engine;
use super::id_table::IdTable;
use super::node_pool::VmSize;
use super::{Inbox, VmAnswer};
use crate::job::{Job, JobDates, JobMessage, JobSpec, JobState, JobStatus, ResourceRequest};
use crate::request::summary::{self, VM_NOT_CREATED};
use crate::request::{Requester, SchedError};
use crate::vm::{
    DEFAULT_MEMORY_MB, DEFAULT_PROCESSORS, QueuedOperation, SystemTask, Vm, VmChange, VmCommand,
    VmPhase, VmRequest,
};
use crate::vm_host::{Outcome, VmOperation};

/// The store collection of VMs.
pub(crate) const VMS: &str = "vms";

/// The VMs, by id.
pub(crate) type VmTable = IdTable<Vm>;

impl IdTable<Vm> {
    /// The id of a new VM: `vm.<next number>`, skipping ids users chose.
    fn new_vm_id(&mut self) -> String {
        loop {
            let id = format!("vm.{}", self.next_number());
            if self.position(&id).is_none() {
                return id;
            }
        }
    }

    /// The VMs `user` asked for (those made for their jobs are their jobs' business).
    fn count_owned_by(&self, user: &str) -> usize {
        self.all()
            .iter()
            .filter(|v| v.owner == user && v.for_job.is_none())
            .count()
    }
}

/// The bytes of what users write on a VM and it keeps.
fn carried_bytes(vm: &Vm) -> usize {
    fn size(value: &impl serde::Serialize) -> usize {
        serde_json::to_vec(value).map_or(0, |bytes| bytes.len())
    }
    size(&vm.variables)
        + size(&vm.triggers)
        + size(&vm.generic_metrics)
        + size(&vm.generic_events)
        + vm.description.as_ref().map_or(0, String::len)
}

/// Whose a VM is and how long it would live from now: what the reservations on a node
/// it may go to are judged against.
pub(super) struct Lifetime<'a> {
    pub(super) owner: &'a str,
    /// Seconds; `None`: until destroyed.
    pub(super) time_to_live: Option<i64>,
}

/// What the VM is doing that a power change would have to wait for, if anything.
fn under_way(vm: &Vm) -> Option<String> {
    match &vm.queued {
        _ if vm.phase.busy() => Some(vm.phase.substate().to_string()),
        Some(QueuedOperation::Migrate { job, .. }) => {
            Some(format!("waiting to be migrated (job {job})"))
        }
        Some(QueuedOperation::Destroy { job }) => {
            Some(format!("waiting to be destroyed (job {job})"))
        }
        None => None,
    }
}

/// The destroy under way or asked for on the VM, if any.
fn being_destroyed(vm: &Vm) -> Option<&str> {
    match &vm.queued {
        Some(QueuedOperation::Destroy { job }) => Some(job),
        _ if vm.phase == VmPhase::Destroying => vm.active_job.as_deref(),
        _ => None,
    }
}

/// Who a system job of the scheduler's own (a time-to-live expiry) acts for.
fn scheduler_itself() -> Requester {
    Requester {
        user: "root".into(),
        proxy_user: None,
        over_all: true,
        may_name_owners: true,
    }
}

impl Engine {
    pub(crate) fn vm_command(
        &mut self,
        command: VmCommand,
        by: &Requester,
    ) -> Result<VmAnswer, SchedError> {
        match command {
            VmCommand::Create(request) => self.create_vm(*request, by).map(VmAnswer::Job),
            VmCommand::Modify(id, change) => self.modify_vm(&id, *change, by).map(VmAnswer::Said),
            VmCommand::Migrate(id, to) => self.migrate_vm(&id, to, by).map(VmAnswer::Job),
            VmCommand::Destroy(id) => {
                let position = self.vm_position(&id, by)?;
                self.destroy_vm(position, by).map(VmAnswer::Job)
            }
        }
    }

    fn vm_position(&self, id: &str, by: &Requester) -> Result<usize, SchedError> {
        self.vms
            .position_for(id, by)
            .ok_or_else(|| SchedError::NotFound(format!("No VM '{id}'")))
    }

    fn create_vm(&mut self, request: VmRequest, by: &Requester) -> Result<String, SchedError> {
        let invalid = |reason: String| SchedError::invalid(VM_NOT_CREATED, reason);
        let limit = self.config.limits.user_vm_max_count;
        if !by.over_all && self.vms.count_owned_by(&by.user) >= limit {
            return Err(invalid(format!(
                "{} already has {limit} VMs, the most an ordinary user may have \
                 ([scheduler.limits] user_vm_max_count)",
                by.user
            )));
        }
        let id = match request.id.clone() {
            Some(id) => {
                if let Some(why) = crate::vm::id_problem(&id) {
                    return Err(invalid(format!("id: '{id}' cannot be a VM id: {why}")));
                }
                if id.starts_with(crate::vm::JOB_VM_PREFIX) {
                    return Err(invalid(format!(
                        "id: '{id}': ids starting with '{}' are the VMs of jobs'",
                        crate::vm::JOB_VM_PREFIX
                    )));
                }
                if self.vms.position(&id).is_some() {
                    // Another user's VM is not theirs to know of (its read is a 404):
                    // ids are shared, so only that this one cannot be had is said.
                    let why = match self.vms.position_for(&id, by) {
                        Some(_) => format!("id: a VM '{id}' exists already"),
                        None => format!(
                            "id: '{id}' is not available; choose another, or leave it out \
                             and one is chosen"
                        ),
                    };
                    return Err(SchedError::Conflict(vec![VM_NOT_CREATED.into(), why]));
                }
                id
            }
            None => {
                let id = self.vms.new_vm_id();
                self.remember_number(VMS, &id);
                id
            }
        };
        let (size, disks) = self.new_vm_size(&request, by)?;
        if !by.over_all {
            self.within_users_vm_share(&by.user, size)?;
        }
        let default_ttl = self.config.limits.user_vm_default_time_to_live_seconds;
        let time_to_live = request
            .time_to_live
            .or((!by.over_all && !request.for_service && default_ttl > 0).then_some(default_ttl));
        // Refused only when no node could ever hold it; else it waits for room.
        self.could_ever_hold(size, request.node.as_deref(), None)
            .map_err(invalid)?;
        let now = self.now();
        let mut vm = Vm {
            disk: request.disk,
            image: request.image,
            time_to_live,
            description: request.description,
            template: request.template,
            storage: request.storage,
            disks,
            sovereign: request.sovereign,
            triggers: request.triggers,
            variables: request.variables,
            account: request.account,
            for_service: request.for_service,
            ..Vm::new(
                id.clone(),
                by.user.clone(),
                request.node.clone().unwrap_or_default(),
                (size.processors, size.memory),
                now,
            )
        };
        // Its account must pay for its first interval (`vm_charges`).
        self.vm_could_be_funded(&vm).map_err(invalid)?;
        // It holds nothing until a node has room (now, most often: `start_waiting_vm`).
        vm.phase = VmPhase::Waiting;
        self.vms.push(vm);
        let position = self.vms.len() - 1;
        let job = self.new_system_job(position, SystemTask::VmCreate { vm: id }, by);
        {
            let vm = self.vms.get_mut(position);
            vm.setup_job = Some(job.clone());
            vm.active_job = Some(job.clone());
        }
        self.start_waiting_vm(position, true);
        self.store_vm(position);
        self.needs_schedule = true;
        Ok(job)
    }

    /// What a new VM takes from its host, and its extra disks, as `request` asks (the
    /// defaults, 1 processor and 128 MB, when it does not).
    fn new_vm_size(
        &self,
        request: &VmRequest,
        by: &Requester,
    ) -> Result<(VmSize, Vec<crate::vm::StorageDisk>), SchedError> {
        let invalid = |reason: String| SchedError::invalid(VM_NOT_CREATED, reason);
        let processors = request.processors.unwrap_or(DEFAULT_PROCESSORS);
        let memory = request.memory.unwrap_or(DEFAULT_MEMORY_MB);
        if processors == 0 {
            return Err(invalid("totalProcessors: a VM needs at least 1".into()));
        }
        if memory < 16 {
            return Err(invalid(
                "totalMemory: a VM needs at least 16 MB (the default is 128)".into(),
            ));
        }
        let disks = match &request.storage {
            Some(spec) => {
                crate::vm::parse_storage(spec).map_err(|why| invalid(format!("storage: {why}")))?
            }
            None => Vec::new(),
        };
        let storage_gb: u64 = disks.iter().map(|d| d.size_gb).sum();
        let storage_limit = self.config.limits.user_vm_max_storage_gb;
        if !by.over_all && storage_gb > storage_limit {
            return Err(invalid(format!(
                "storage: {storage_gb} GB asked for; an ordinary user's VM may have at most \
                 {storage_limit} GB ([scheduler.limits] user_vm_max_storage_gb)"
            )));
        }
        if request
            .time_to_live
            .is_some_and(|t| t <= 0 || t > crate::vm::MAX_TIME_TO_LIVE)
        {
            return Err(invalid(format!(
                "requestedTimeToLive: must be a number of seconds from 1 to {} (ten years)",
                crate::vm::MAX_TIME_TO_LIVE
            )));
        }
        let size = VmSize {
            processors,
            memory,
            disk: request.disk.unwrap_or(0),
        };
        Ok((size, disks))
    }

    /// Whether `user`'s VMs (not those made for jobs, which hold their jobs' share)
    /// stay within the processors and memory an ordinary user's VMs may hold with one
    /// more of `size`.
    fn within_users_vm_share(&self, user: &str, size: VmSize) -> Result<(), SchedError> {
        let limits = &self.config.limits;
        let (processors, memory) = self
            .vms
            .all()
            .iter()
            .filter(|vm| vm.owner == user && vm.for_job.is_none())
            .fold((size.processors, size.memory), |(p, m), vm| {
                (p.saturating_add(vm.processors), m.saturating_add(vm.memory))
            });
        let refuse = |what: String| Err(SchedError::invalid(VM_NOT_CREATED, what));
        if processors > limits.user_vm_max_processors {
            return refuse(format!(
                "totalProcessors: {user}'s VMs would hold {processors} processors; an ordinary \
                 user's VMs may hold {} ([scheduler.limits] user_vm_max_processors)",
                limits.user_vm_max_processors
            ));
        }
        if memory > limits.user_vm_max_memory_mb {
            return refuse(format!(
                "totalMemory: {user}'s VMs would hold {memory} MB; an ordinary user's VMs may \
                 hold {} MB ([scheduler.limits] user_vm_max_memory_mb)",
                limits.user_vm_max_memory_mb
            ));
        }
        Ok(())
    }

    /// Processors of `node` that reservations hold while a VM would live on it and do
    /// not admit its owner: a VM is placed around them as a job is.
    pub(super) fn reserved_against(&self, node: &crate::node::Node, lives: &Lifetime) -> u32 {
        let now = self.now();
        let end = lives
            .time_to_live
            .map_or(i64::MAX, |ttl| now.saturating_add(ttl));
        self.reservations
            .held_against(node.id(), lives.owner, now, end)
    }

    fn modify_vm(
        &mut self,
        id: &str,
        change: VmChange,
        by: &Requester,
    ) -> Result<Vec<String>, SchedError> {
        let position = self.vm_position(id, by)?;
        let refuse = |reason: String| SchedError::refused(summary::vm_not_changed(id), reason);
        let vm = self.vms.get(position).clone();
        if change.os.as_ref().is_some_and(|os| *os != vm.image) {
            return Err(refuse(
                "os: a VM's image cannot be changed; destroy it and create one from the new image"
                    .into(),
            ));
        }
        let power = change.power_on.filter(|on| *on != vm.power_on);
        if let Some(job) = vm.for_job.as_ref().filter(|_| power.is_some()) {
            return Err(refuse(format!(
                "powerState: it is job {job}'s VM, which lives and ends with the job"
            )));
        }
        // A power change is answered as done (200), with no job to follow: it is not
        // queued behind an operation under way (docs/decisions.md).
        if power.is_some()
            && let Some(what) = under_way(&vm)
        {
            return Err(SchedError::Conflict(vec![
                summary::vm_not_changed(id),
                format!("powerState: the VM is {what}; try again when that is done"),
            ]));
        }
        if power.is_some() && matches!(vm.phase, VmPhase::Failed | VmPhase::Lost) {
            return Err(refuse(format!(
                "powerState: the VM's guest is {}; it can only be destroyed",
                vm.phase.substate()
            )));
        }
        let now = self.now();
        let mut said = self.vms.get_mut(position).apply(change, now);
        // What changes gather on a VM stays within what one request may carry.
        let limit = self.config.limits.max_submission_bytes;
        let carried = carried_bytes(self.vms.get(position));
        if !by.over_all && carried > limit {
            *self.vms.get_mut(position) = vm;
            return Err(refuse(format!(
                "its variables, triggers, generic metrics and events would take {carried} bytes; \
                 an ordinary user's VM may carry {limit} ([scheduler.limits] max_submission_bytes)"
            )));
        }
        if power == Some(true)
            && let Err(reason) = self.fund_power_on(position)
        {
            *self.vms.get_mut(position) = vm;
            return Err(refuse(format!("powerState: {reason}")));
        }
        if let Some(on) = power {
            let (phase, operation) = if on {
                (VmPhase::PoweringOn, VmOperation::PowerOn)
            } else {
                (VmPhase::PoweringOff, VmOperation::PowerOff)
            };
            let vm = self.vms.get_mut(position);
            vm.power_on = on;
            vm.enter(phase, now);
            said.push("powerState");
            self.dispatch_when_committed(position, None, operation);
        }
        self.store_vm(position);
        if said.is_empty() {
            return Ok(vec![format!(
                "VM {id} was not changed: the request named nothing to modify"
            )]);
        }
        self.emit(
            "vmmodify",
            "vm",
            id,
            Some(by),
            vec![("changed".into(), said.join(","))],
        );
        Ok(vec![format!("VM {id} was modified: {}", said.join(", "))])
    }

    fn migrate_vm(
        &mut self,
        id: &str,
        to: Option<String>,
        by: &Requester,
    ) -> Result<String, SchedError> {
        let position = self.vm_position(id, by)?;
        let refuse = |reason: String| SchedError::refused(summary::vm_not_migrated(id), reason);
        let conflict =
            |reason: String| SchedError::Conflict(vec![summary::vm_not_migrated(id), reason]);
        let vm = self.vms.get(position).clone();
        if let Some(job) = &vm.for_job {
            return Err(refuse(format!(
                "it was made for job {job}, whose node holds its resources"
            )));
        }
        if let Some(job) = being_destroyed(&vm) {
            return Err(conflict(format!("the VM is being destroyed (job {job})")));
        }
        // Queued behind an operation under way; else only a running guest can move.
        if !vm.phase.busy() && vm.phase != VmPhase::Running {
            return Err(conflict(format!(
                "only a running VM can be migrated; this one is {}",
                vm.phase.substate()
            )));
        }
        if let Some(node) = to.as_deref().filter(|n| *n == vm.node && !vm.phase.busy()) {
            return Err(refuse(format!("node: the VM already runs on {node}")));
        }
        self.could_ever_hold(VmSize::of(&vm), to.as_deref(), Some(&vm.node))
            .map_err(refuse)?;
        if let Some(QueuedOperation::Migrate { job, .. }) = &vm.queued {
            // The last asked wins: the migration waiting goes where this one asks.
            let job = job.clone();
            let task = SystemTask::VmMigrate {
                vm: id.to_string(),
                from: vm.node.clone(),
                to: to.clone().unwrap_or_else(|| "ANY".into()),
            };
            self.set_system_task(&job, task);
            self.vms.get_mut(position).queued = Some(QueuedOperation::Migrate {
                job: job.clone(),
                to,
            });
            self.store_vm(position);
            self.needs_schedule = true;
            return Ok(job);
        }
        let task = SystemTask::VmMigrate {
            vm: id.to_string(),
            from: vm.node.clone(),
            to: to.clone().unwrap_or_else(|| "ANY".into()),
        };
        let job = self.new_system_job(position, task, by);
        self.vms.get_mut(position).queued = Some(QueuedOperation::Migrate {
            job: job.clone(),
            to,
        });
        // Now if it can; else once the operation under way is done and there is room.
        self.start_queued_operation(position);
        self.store_vm(position);
        Ok(job)
    }

    pub(super) fn destroy_vm(
        &mut self,
        position: usize,
        by: &Requester,
    ) -> Result<String, SchedError> {
        let vm = self.vms.get(position).clone();
        if let Some(job) = being_destroyed(&vm) {
            return Ok(job.to_string()); // asked again: the same destroy
        }
        // The last asked wins: a migration waiting is not done.
        if let Some(QueuedOperation::Migrate { job, .. }) = &vm.queued {
            let reason = format!("cancelled: VM {} is to be destroyed", vm.id);
            self.cancel_system_job(job, &reason);
            self.vms.get_mut(position).queued = None;
        }
        let task = SystemTask::VmDestroy { vm: vm.id.clone() };
        if vm.phase == VmPhase::Waiting {
            // Never made: its setup is cancelled, and there is no guest to end.
            if let Some(setup) = &vm.active_job {
                let reason = format!("cancelled: VM {} was destroyed before it was made", vm.id);
                self.cancel_system_job(setup, &reason);
            }
            let job = self.new_system_job(position, task, by);
            let now = self.now();
            let waiting = self.vms.get_mut(position);
            waiting.active_job = Some(job.clone());
            waiting.enter(VmPhase::Destroying, now);
            self.vm_done(&vm.id, Some(job.clone()), VmOperation::Destroy, Ok(()));
            return Ok(job);
        }
        let job = self.new_system_job(position, task, by);
        self.vms.get_mut(position).queued = Some(QueuedOperation::Destroy { job: job.clone() });
        self.start_queued_operation(position);
        self.store_vm(position);
        Ok(job)
    }

    /// A system job for the VM at `position`, waiting (Idle, a pending action) until
    /// [`Engine::begin_system_job`] starts it. Answers the job's id.
    pub(super) fn new_system_job(
        &mut self,
        position: usize,
        task: SystemTask,
        by: &Requester,
    ) -> String {
        let vm = self.vms.get(position).clone();
        let now = self.now();
        let seq = self.queue.take_seq();
        let id = format!("{}.{seq}", self.config.name);
        let template = task.template();
        let mut spec = JobSpec {
            custom_name: Some(format!("{template} {}", vm.id)),
            user: Some(by.user.clone()),
            flags: vec!["SYSTEMJOB".into()],
            command_file: template.into(),
            request: ResourceRequest {
                task_count: 1,
                processors_per_task: vm.processors,
                memory_per_task: Some(vm.memory),
                ..Default::default()
            },
            ..Default::default()
        };
        spec.extra.templates = vec![template.into()];
        spec.extra.system_task = Some(task);
        let job = Job {
            id: id.clone(),
            seq,
            spec: Arc::new(spec),
            status: JobStatus {
                state: JobState::Idle,
                submitter: by.user.clone(),
                exec_user: by.user.clone(),
                dates: JobDates {
                    submit: now,
                    last_updated: now,
                    state_updated: now,
                    ..Default::default()
                },
                ..Default::default()
            },
            array: None,
        };
        self.add_job(job);
        self.emit(
            "jobsubmit",
            "job",
            &id,
            Some(by),
            vec![
                ("template".into(), template.into()),
                ("vm".into(), vm.id.clone()),
            ],
        );
        id
    }

    /// The work of system job `id` is now `task` (a waiting migration's destination).
    fn set_system_task(&mut self, id: &str, task: SystemTask) {
        if let Some(at) = self.position(id) {
            self.update(at, |job| {
                Arc::make_mut(&mut job.spec).extra.system_task = Some(task)
            });
        }
    }

    /// Starts system job `id` (made by [`Engine::new_system_job`]) on the VM at
    /// `position` to do `task`: it runs, and its operation is handed to the VM host
    /// once this step is durable.
    pub(super) fn begin_system_job(&mut self, position: usize, id: &str, task: SystemTask) {
        let operation = match &task {
            SystemTask::VmCreate { .. } => VmOperation::Create,
            SystemTask::VmMigrate { from, to, .. } => VmOperation::Migrate {
                from: from.clone(),
                to: to.clone(),
            },
            SystemTask::VmDestroy { .. } => VmOperation::Destroy,
        };
        let now = self.now();
        if let Some(at) = self.position(id) {
            self.update(at, |job| {
                Arc::make_mut(&mut job.spec).extra.system_task = Some(task);
                job.status.state = JobState::Running;
                job.status.block = None;
                job.status.dates.start = Some(now);
            });
        }
        self.vms.get_mut(position).active_job = Some(id.to_string());
        self.dispatch_when_committed(position, Some(id.to_string()), operation);
    }

    /// A running system job for the VM at `position`, its operation handed to the VM
    /// host once the job is durable. Answers the job's id.
    fn start_system_job(&mut self, position: usize, task: SystemTask, by: &Requester) -> String {
        let id = self.new_system_job(position, task.clone(), by);
        self.begin_system_job(position, &id, task);
        id
    }

    /// Hands `operation` on the VM at `position` to the VM host once this step is durable.
    pub(super) fn dispatch_when_committed(
        &mut self,
        position: usize,
        job: Option<String>,
        operation: VmOperation,
    ) {
        let vm = self.vms.get(position).clone();
        self.vms_in_flight.insert(vm.id.clone());
        let host = self.vm_host.clone();
        let inbox = self.journal.inbox().clone();
        self.journal.run_when_committed(Box::new(move || {
            let (id, done_operation) = (vm.id.clone(), operation.clone());
            host.run(
                vm,
                operation,
                Box::new(move |outcome| {
                    let _ = inbox.send(Inbox::VmDone {
                        vm: id,
                        job,
                        operation: done_operation,
                        outcome,
                    });
                }),
            );
        }));
    }

    /// An operation on a guest ended: the VM moves on, its system job ends.
    pub(crate) fn vm_done(
        &mut self,
        id: &str,
        job: Option<String>,
        operation: VmOperation,
        outcome: Outcome,
    ) {
        self.vms_in_flight.remove(id);
        let Some(position) = self.vms.position(id) else {
            return;
        };
        let now = self.now();
        let vm = self.vms.get(position).clone();
        let failure = outcome.as_ref().err().cloned();
        let mut remove = false;
        match (&operation, &failure) {
            (VmOperation::Create, None) | (VmOperation::PowerOn, None) => {
                let vm = self.vms.get_mut(position);
                vm.started.get_or_insert(now);
                vm.enter(VmPhase::Running, now);
            }
            (VmOperation::Create, Some(_)) => {
                self.hold_vm_on(&vm.node, &vm, false);
                self.stop_charging_vm(position);
                self.vms.get_mut(position).enter(VmPhase::Failed, now);
            }
            (VmOperation::PowerOn, Some(_)) => {
                let vm = self.vms.get_mut(position);
                vm.power_on = false;
                vm.enter(VmPhase::Off, now);
            }
            (VmOperation::PowerOff, None) => self.vms.get_mut(position).enter(VmPhase::Off, now),
            (VmOperation::PowerOff, Some(_)) => {
                let vm = self.vms.get_mut(position);
                vm.power_on = true;
                vm.enter(VmPhase::Running, now);
                // One powered off for want of funds that runs on is charged on.
                self.resume_charging_vm(position);
            }
            (VmOperation::Migrate { from, to }, None) => {
                self.hold_vm_on(from, &vm, false);
                let vm = self.vms.get_mut(position);
                vm.node = to.clone();
                vm.target = None;
                vm.migration_count += 1;
                vm.last_migration = Some(now);
                vm.enter(VmPhase::Running, now);
            }
            (VmOperation::Migrate { to, .. }, Some(_)) => {
                self.hold_vm_on(to, &vm, false);
                let vm = self.vms.get_mut(position);
                vm.target = None;
                vm.enter(VmPhase::Running, now);
            }
            (VmOperation::Destroy, None) => remove = true,
            (VmOperation::Destroy, Some(_)) => {
                if !matches!(vm.last_phase, Some(VmPhase::Failed | VmPhase::Lost)) {
                    self.hold_vm_on(&vm.node, &vm, false);
                }
                self.stop_charging_vm(position);
                self.vms.get_mut(position).enter(VmPhase::Failed, now);
            }
        }
        {
            let vm = self.vms.get_mut(position);
            if job.is_some() && vm.active_job == job {
                vm.active_job = None;
            }
            if failure.is_some() && job.is_some() {
                vm.failed_job = job.clone();
            }
        }
        if let Some(job) = &job {
            self.end_system_job(job, failure.as_deref());
        }
        self.emit_vm_events(id, job.as_deref(), &operation, failure.as_deref());
        if remove {
            if !matches!(vm.last_phase, Some(VmPhase::Failed | VmPhase::Lost)) {
                self.hold_vm_on(&vm.node, &vm, false);
            }
            self.stop_charging_vm(position);
            self.vms.remove(position);
            self.journal.write(Write::Delete {
                collection: VMS.into(),
                id: id.to_string(),
                expected_version: None,
            });
            self.vm_left_containers(id);
        } else {
            self.store_vm(position);
        }
        self.needs_schedule = true;
        if let Some(job) = &vm.for_job {
            self.vm_job_goes_on(job, id, &operation, failure);
        }
    }

    /// What the VM layer says happened: a version-1 event (`vmcreate`, `vmmigrate`,
    /// `vmdestroy`, `vmpower`, `vmfailure`) and one in version 3's words (`VM Provision`,
    /// `VM Migrate`, `VM Destroy`, `VM Power`, `VM Failure`) with a message; both name
    /// the VM as their object, so that its tenant reaches them.
    fn emit_vm_events(
        &mut self,
        id: &str,
        job: Option<&str>,
        operation: &VmOperation,
        failure: Option<&str>,
    ) {
        let node = self
            .vms
            .position(id)
            .map(|p| self.vms.get(p).node.clone())
            .unwrap_or_default();
        let (v1, v3, done) = match operation {
            VmOperation::Create => ("vmcreate", "VM Provision", "was provisioned"),
            VmOperation::PowerOn => ("vmpower", "VM Power", "was powered on"),
            VmOperation::PowerOff => ("vmpower", "VM Power", "was powered off"),
            VmOperation::Migrate { .. } => ("vmmigrate", "VM Migrate", "was migrated"),
            VmOperation::Destroy => ("vmdestroy", "VM Destroy", "was destroyed"),
        };
        let mut details = vec![("node".to_string(), node.clone())];
        if let Some(job) = job {
            details.push(("job".into(), job.to_string()));
        }
        let (v1, v3, message) = match failure {
            None => (v1, v3, format!("VM {id} {done} on {node}")),
            Some(reason) => {
                details.push(("failure".into(), reason.to_string()));
                let message = format!("VM {id}: {} failed: {reason}", operation.name());
                ("vmfailure", "VM Failure", message)
            }
        };
        self.emit(v1, "vm", id, None, details.clone());
        details.push(("message".into(), message));
        self.emit(v3, "vm", id, None, details);
    }

    /// Ends a system job: Completed with 0, or with 1 and the failure as a message.
    fn end_system_job(&mut self, id: &str, failure: Option<&str>) {
        let Some(position) = self.position(id) else {
            return;
        };
        let now = self.now();
        let template = self
            .job_at(position)
            .spec
            .extra
            .system_task
            .as_ref()
            .map_or("system job", |t| t.template());
        self.update(position, |job| {
            let status = &mut job.status;
            status.state = JobState::Completed;
            status.completion_code = Some(if failure.is_some() { 1 } else { 0 });
            status.dates.completion = Some(now);
            if let Some(reason) = failure {
                status.messages.push(JobMessage {
                    text: format!("{template} failed: {reason}"),
                    author: None,
                    created: now,
                });
            }
        });
        let code = if failure.is_some() { "1" } else { "0" };
        self.emit(
            "jobend",
            "job",
            id,
            None,
            vec![("completionCode".into(), code.into())],
        );
    }

    /// Destroys the VMs whose time to live has run out.
    pub(super) fn expire_vms(&mut self, now: crate::clock::Seconds) {
        let expired: Vec<String> = self
            .vms
            .all()
            .iter()
            .filter(|v| v.phase != VmPhase::Waiting && being_destroyed(v).is_none())
            .filter(|v| v.expires().is_some_and(|at| at <= now))
            .map(|v| v.id.clone())
            .collect();
        for id in expired {
            if let Some(position) = self.vms.position(&id)
                && let Ok(job) = self.destroy_vm(position, &scheduler_itself())
            {
                self.emit("vmexpire", "vm", &id, None, vec![("job".into(), job)]);
            }
        }
    }

    /// Processors and memory a VM takes on `node` (or gives back), unless it was made
    /// for a job, which holds them itself.
    pub(super) fn hold_vm_on(&mut self, node: &str, vm: &Vm, take: bool) {
        if vm.for_job.is_none() {
            self.nodes.hold_vm(node, vm, take);
        }
    }

    /// A job that runs in a VM is about to start: it runs once its VM does (made now,
    /// on the job's first node, of its processors and memory, from the default image).
    pub(super) fn launch_in_vm(&mut self, position: usize, job: &Job) {
        // REQUIREVM: the VM of its user it was given (`vm_jobs`), if it still runs.
        if let Some(vm_id) = &job.status.in_vm {
            return match self.vms.position(vm_id) {
                Some(at)
                    if self.vms.get(at).phase == VmPhase::Running
                        && self.vms.get(at).owner == job.user() =>
                {
                    self.start_in_vm(position, at)
                }
                _ => self.hold_unstarted(
                    position,
                    format!("the VM {vm_id} it was to run in no longer runs"),
                ),
            };
        }
        let id = crate::vm::id_for_job(&job.id);
        if let Some(at) = self.vms.position(&id) {
            let vm = self.vms.get(at);
            if vm.for_job.as_deref() != Some(job.id.as_str()) {
                // Job VM ids cannot be chosen (`job-` is reserved): a bug, not an attack.
                let reason = format!("a VM '{id}' exists that was not made for it");
                return self.hold_unstarted(position, reason);
            }
            match vm.phase {
                VmPhase::Running => self.start_in_vm(position, at),
                // Its end goes on (`vm_job_goes_on`): the job starts, or a new VM is made.
                phase if phase.busy() => {}
                // Off, failed or lost (from an earlier run): made again.
                _ => {
                    let _ = self.destroy_vm(at, &scheduler_itself());
                }
            }
            return;
        }
        // A VM of what the job holds on its first node (a job over several nodes
        // runs in one VM there).
        let Some(allocation) = job.status.allocation.first() else {
            return self.hold_unstarted(position, "it has no node to make its VM on".into());
        };
        let node = allocation.node.clone();
        let request = &job.spec.request;
        let now = self.now();
        let memory = request
            .memory_per_task
            .map(|m| m * u64::from(allocation.tasks))
            .filter(|m| *m >= 16)
            .unwrap_or(DEFAULT_MEMORY_MB);
        let size = (
            (allocation.tasks * request.processors_per_task).max(1),
            memory,
        );
        // Its image is left empty: the VM host's default image.
        let vm = Vm {
            for_job: Some(job.id.clone()),
            description: Some(format!("made for job {}", job.id)),
            ..Vm::new(id.clone(), job.user().to_string(), node, size, now)
        };
        self.vms.push(vm);
        let at = self.vms.len() - 1;
        let by = Requester {
            user: job.user().to_string(),
            proxy_user: None,
            over_all: false,
            may_name_owners: false,
        };
        let setup = self.start_system_job(at, SystemTask::VmCreate { vm: id }, &by);
        self.vms.get_mut(at).setup_job = Some(setup);
        self.store_vm(at);
    }

    /// An operation on the VM of job `job_id` ended. A job still starting starts in it
    /// once it runs (or is held when it could not be made), or gets a new one when it
    /// was destroyed; a VM whose job is not starting or running goes.
    fn vm_job_goes_on(
        &mut self,
        job_id: &str,
        vm_id: &str,
        operation: &VmOperation,
        failure: Option<String>,
    ) {
        let job = self.position(job_id).map(|p| (p, self.job_at(p)));
        let Some((position, job)) = job else {
            return self.job_left_its_vm(job_id);
        };
        match job.status.state {
            JobState::Starting => match (operation, failure) {
                (VmOperation::Create, Some(reason)) => {
                    self.hold_unstarted(position, format!("its VM could not be made: {reason}"))
                }
                (VmOperation::Destroy, None) => self.launch_in_vm(position, &job),
                _ => match self.vms.position(vm_id) {
                    Some(at) if self.vms.get(at).phase == VmPhase::Running => {
                        self.start_in_vm(position, at)
                    }
                    Some(_) => self.launch_in_vm(position, &job),
                    None => self.launch_in_vm(position, &job),
                },
            },
            JobState::Running | JobState::Suspended => {}
            _ => self.job_left_its_vm(job_id),
        }
    }

    /// Starts the job at `position` in the running VM at `at`: its process is
    /// `drover guest-run`, holding a connection to the guest's agent.
    fn start_in_vm(&mut self, position: usize, at: usize) {
        let vm = self.vms.get(at).clone();
        let job = self.job_at(position);
        let launch = self.launch_of(&job).and_then(|mut launch| {
            let agent = self.vm_host.connect_agent(&vm)?;
            launch.guest = Some(Arc::new(agent));
            // The guest kills the command at the job's wall time (a week without one).
            let limit = job.spec.duration.filter(|d| *d > 0).unwrap_or(7 * 86_400);
            for (name, value) in [
                ("DROVER_GUEST_TIMEOUT", limit.to_string()),
                ("DROVER_VM_ID", vm.id.clone()),
            ] {
                // The service's values, whatever the job's environment said.
                launch.environment.retain(|(k, _)| k != name);
                launch.environment.push((name.into(), value));
            }
            Ok(launch)
        });
        self.hand_to_launcher(position, launch);
    }

    /// The job a VM was made for has ended (or will not start): its VM is destroyed,
    /// unless an operation on it is under way (whose end comes back here).
    pub(super) fn job_left_its_vm(&mut self, job_id: &str) {
        let id = crate::vm::id_for_job(job_id);
        if let Some(at) = self.vms.position(&id)
            && self.vms.get(at).for_job.as_deref() == Some(job_id)
            && !self.vms.get(at).phase.busy()
        {
            let _ = self.destroy_vm(at, &scheduler_itself());
        }
    }

    pub(super) fn store_vm(&mut self, position: usize) {
        let vm = self.vms.get(position);
        self.journal.write(Write::Put {
            collection: VMS.into(),
            id: vm.id.clone(),
            name: None,
            body: Body::serialize(vm).expect("a VM serializes"),
        });
    }

    /// Loads the VMs: each holds its host's resources again, an operation that was
    /// under way is handed to the VM host again (operations are idempotent), and a
    /// guest believed running that is gone is marked Lost.
    pub(super) fn load_vms(&mut self) -> Result<(), String> {
        let vms: Vec<Vm> = self.load_all(VMS, "VM")?;
        let last = vms
            .iter()
            .map(|v| super::recovery::id_number(&v.id))
            .max()
            .unwrap_or(0)
            .max(self.remembered_number(VMS)?);
        self.vms.replace_all(vms, last);
        let now = self.now();
        let in_flight: HashSet<String> = self.vms_in_flight.clone();
        for position in 0..self.vms.len() {
            let vm = self.vms.get(position).clone();
            if vm.phase == VmPhase::Waiting {
                continue; // it holds nothing yet, and a pass makes it when there is room
            }
            if self.nodes.index_of(&vm.node).is_none() {
                self.stop_charging_vm(position);
                let vm = self.vms.get_mut(position);
                vm.enter(VmPhase::Lost, now);
                self.store_vm(position);
                continue;
            }
            if !matches!(vm.phase, VmPhase::Failed | VmPhase::Lost) {
                self.hold_vm_on(&vm.node, &vm, true);
            }
            if let Some(target) = &vm.target {
                self.hold_vm_on(target, &vm, true);
            }
            if in_flight.contains(&vm.id) {
                continue; // its outcome will still arrive
            }
            if let Some(job) = &vm.for_job
                && !vm.phase.busy()
            {
                let running = self.position(job).is_some_and(|p| {
                    matches!(
                        self.job_at(p).status.state,
                        JobState::Running | JobState::Suspended
                    )
                });
                if !running {
                    self.job_left_its_vm(job);
                    continue;
                }
            }
            let operation = match vm.phase {
                VmPhase::Creating => Some(VmOperation::Create),
                VmPhase::PoweringOn => Some(VmOperation::PowerOn),
                VmPhase::PoweringOff => Some(VmOperation::PowerOff),
                VmPhase::Destroying => Some(VmOperation::Destroy),
                VmPhase::Migrating => vm.target.clone().map(|to| VmOperation::Migrate {
                    from: vm.node.clone(),
                    to,
                }),
                _ => None,
            };
            match operation {
                Some(operation) => {
                    self.dispatch_when_committed(position, vm.active_job.clone(), operation)
                }
                None if vm.phase == VmPhase::Running && !self.vm_host.alive(&vm) => {
                    self.hold_vm_on(&vm.node, &vm, false);
                    self.stop_charging_vm(position);
                    self.vms.get_mut(position).enter(VmPhase::Lost, now);
                    self.store_vm(position);
                    self.emit(
                        "vmfailure",
                        "vm",
                        &vm.id,
                        None,
                        vec![(
                            "failure".into(),
                            "its guest was gone when the service started".into(),
                        )],
                    );
                }
                // A guest found running that is not charged (made before VMs were).
                None => self.resume_charging_vm(position),
            }
        }
        Ok(())
    }
}
