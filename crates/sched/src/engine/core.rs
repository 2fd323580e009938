//! The engine: its parts, its thread's loop, scheduling passes, process ends and
//! time-driven work.
//!
//! One step of the loop handles every message waiting in the inbox (up to
//! `MAX_MESSAGES_PER_STEP`), runs time-driven work when the tick is due, runs one
//! scheduling pass if anything changed, publishes what readers see, and hands the step's
//! writes to the journal: a burst of submissions shares one pass and one commit.
//!
//! A pass walks the queue lazily (`queue::QueueWalk`): in the queue's own order
//! when priorities are static (system priority, user priority, submission order), from a
//! merge of its rank classes otherwise (`queue::RankClass`: one rank per class of like
//! jobs). It stops as soon as nothing is free (and does not begin when nothing is), and
//! applies the starts after planning, so a pass over a deep queue costs what it places.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use drover_store::{Body, CollectionSpec, DocumentStore, Write};

use super::credential_names::CredentialNames;
use super::journal_handoff::JournalHandoff;
use super::node_pool::NodePool;
use super::queue::Queue;
use super::reservation_table::ReservationTable;
use super::system_accounts::SystemAccounts;
use super::virtual_container_table::ContainerTable;
use super::{CredentialKind, EngineParts, Inbox, SchedConfig, Scheduler, Shared};
use crate::book::JobBook;
use crate::clock::{Clock, Seconds};
use crate::dependency::{self, Verdict};
use crate::events::{EventSink, SchedEvent};
use crate::job::{EndIntent, Hold, Job, JobMessage, JobState, ProcessRecord};
use crate::node::Node;
use crate::place;
use crate::policy::Runs;
use crate::policy::planner::{Decision, Held, Planner};
use crate::policy::priority::Usage;
use crate::request::{Requester, SchedError};
use crate::rm::{Exit, JobSignal, ResourceManager, RmEvent};
use crate::sysuser::{self, SystemUser};

/// The store collection of jobs (one document per job, the [`Job`] model as JSON).
pub const JOBS: &str = "jobs";
/// The store collection of node overrides.
pub(crate) const NODES: &str = "nodes";

/// Inbox messages handled before the journal gets the step's writes.
const MAX_MESSAGES_PER_STEP: usize = 4096;

/// The engine: what it works with, and its state in parts that each keep their own
/// rules. Jobs themselves are in the shared book (`shared.jobs`), which only the engine
/// writes.
pub(crate) struct Engine {
    pub(super) config: SchedConfig,
    pub(super) shared: Arc<Shared>,
    pub(super) store: Arc<dyn DocumentStore>,
    pub(super) rm: Arc<dyn ResourceManager>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) events: Arc<dyn EventSink>,
    pub(super) accountant: Arc<dyn crate::accountant::Accountant>,
    /// This step's writes, events and answers, for the journal.
    pub(super) journal: JournalHandoff,
    /// Book positions of the jobs this step added (true) or changed (false), written
    /// once each at the step's end (`flush_journal`): a job submitted and started, or
    /// started and ended, in one step is serialized and written once, not at each change.
    unwritten_jobs: BTreeMap<usize, bool>,
    pub(super) queue: Queue,
    /// Job arrays, by the book position of their master.
    pub(super) arrays: super::arrays::ArrayTallies,
    pub(super) nodes: NodePool,
    pub(super) reservations: ReservationTable,
    pub(super) containers: ContainerTable,
    pub(super) vms: super::vm_commands::VmTable,
    /// Makes the guests of VMs.
    pub(super) vm_host: Arc<dyn crate::vm_host::VmHost>,
    /// VMs with an operation handed to the VM host and not yet reported (kept across a
    /// reload, so that an operation is not handed over twice).
    pub(super) vms_in_flight: std::collections::HashSet<String>,
    /// Processes being started off the engine thread.
    pub(super) launchers: super::launcher::Launchers,
    pub(super) credentials: CredentialNames,
    pub(super) accounts: SystemAccounts,
    /// Recent usage per user: the fair-share factor.
    pub(super) usage: Usage,
    /// The last run times of each user's ended jobs: run-time predictions.
    pub(super) runs: Runs,
    /// Why changes cannot be taken now (the journal failed), if they cannot.
    pub(super) degraded: Option<String>,
    /// A scheduling pass is due at the end of this step.
    pub(super) needs_schedule: bool,
}

impl Engine {
    pub(crate) fn start(config: SchedConfig, parts: EngineParts) -> Result<Scheduler, String> {
        for collection in [
            JOBS,
            NODES,
            super::reservation_commands::RESERVATIONS,
            super::virtual_container_commands::CONTAINERS,
            super::vm_commands::VMS,
            super::recovery::ID_NUMBERS,
            super::node_reports::REPORTED_NODES,
        ] {
            parts
                .store
                .ensure_collection(&CollectionSpec::new(collection))
                .map_err(|e| format!("cannot prepare the {collection} collection: {e}"))?;
        }
        let (mut engine, receiver) = Engine::assemble(config, parts, true)?;
        engine.check_execution_user()?;
        engine.load()?;
        engine.publish();
        engine.flush_journal();
        let scheduler = Scheduler {
            shared: engine.shared.clone(),
            inbox: engine.journal.inbox().clone(),
        };
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || engine.run(receiver))
            .map_err(|e| format!("cannot start the engine thread: {e}"))?;
        Ok(scheduler)
    }

    /// An engine without a thread or a journal, stepped by its caller in virtual time
    /// (the simulator): its writes are dropped and each step counts as committed at
    /// once. Messages it sends itself (launches) arrive on the returned receiver.
    pub(crate) fn simulated(
        config: SchedConfig,
        parts: EngineParts,
    ) -> Result<(Engine, Receiver<Inbox>), String> {
        Engine::assemble(config, parts, false)
    }

    fn assemble(
        config: SchedConfig,
        parts: EngineParts,
        journaled: bool,
    ) -> Result<(Engine, Receiver<Inbox>), String> {
        let store = parts.store;
        let (inbox, receiver) = std::sync::mpsc::channel();
        let notify = {
            let inbox = inbox.clone();
            Arc::new(move |event: RmEvent| {
                let _ = inbox.send(Inbox::Rm(event));
            })
        };
        let rm = (parts.resource_manager)(notify)?;
        let service_user = SystemUser::current().ok_or("the service's own user has no account")?;
        let node_configs = if config.nodes.is_empty() && !rm.describes_nodes() {
            vec![super::node_pool::this_machine()]
        } else {
            config.nodes.clone()
        };
        let nodes: Vec<Node> = node_configs
            .into_iter()
            .enumerate()
            .map(|(i, c)| Node::new(i, c))
            .collect();
        let shared = Arc::new(Shared {
            jobs: RwLock::new(JobBook::new()),
            nodes: RwLock::new(Arc::new(nodes.clone())),
            reservations: RwLock::new(Arc::new(Vec::new())),
            containers: RwLock::new(Arc::new(Vec::new())),
            vms: RwLock::new(Arc::new(Vec::new())),
            credentials: RwLock::new(BTreeMap::new()),
            name: config.name.clone(),
            rm_name: rm.name().to_string(),
            clock: parts.clock.clone(),
            degraded: RwLock::new(None),
        });
        let launchers =
            super::launcher::Launchers::new(journaled.then(|| (rm.clone(), inbox.clone())));
        let engine = Engine {
            journal: JournalHandoff::new(&store, journaled, inbox),
            unwritten_jobs: BTreeMap::new(),
            usage: Usage::new(config.policy.fairshare_half_life),
            runs: Runs::new(),
            config,
            shared,
            store,
            rm,
            clock: parts.clock,
            events: parts.events,
            accountant: parts.accountant,
            queue: Queue::new(),
            arrays: Default::default(),
            nodes: NodePool::new(nodes),
            reservations: ReservationTable::new(),
            containers: ContainerTable::new(),
            vms: super::id_table::IdTable::new(),
            vm_host: parts.vm_host,
            vms_in_flight: Default::default(),
            launchers,
            credentials: CredentialNames::new(),
            accounts: SystemAccounts::new(service_user),
            degraded: None,
            needs_schedule: true,
        };
        Ok((engine, receiver))
    }

    /// The configured execution user must exist (when jobs can switch users at all).
    fn check_execution_user(&mut self) -> Result<(), String> {
        if !sysuser::running_as_root() {
            return Ok(());
        }
        let name = self.execution_user_name();
        match self.account(&name) {
            Some(user) if user.uid == 0 && !self.config.allow_root_jobs => Err(format!(
                "the execution user '{name}' is root, and allow_root_jobs is off"
            )),
            Some(_) => Ok(()),
            None => Err(format!("the execution user '{name}' has no system account")),
        }
    }

    pub(crate) fn execution_user_name(&self) -> String {
        self.config
            .execution_user
            .clone()
            .unwrap_or_else(|| "nobody".into())
    }

    /// The system account `name`, looked up once a while.
    pub(crate) fn account(&mut self, name: &str) -> Option<Arc<SystemUser>> {
        self.accounts.lookup(name)
    }

    fn run(mut self, inbox: Receiver<Inbox>) {
        let mut next_tick = Instant::now() + self.config.tick;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match inbox.recv_timeout(wait) {
                Ok(Inbox::Shutdown(done)) => return self.stop(done),
                Ok(message) => self.handle(message),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            for _ in 1..MAX_MESSAGES_PER_STEP {
                match inbox.try_recv() {
                    Ok(Inbox::Shutdown(done)) => return self.stop(done),
                    Ok(message) => self.handle(message),
                    Err(_) => break,
                }
            }
            if Instant::now() >= next_tick {
                next_tick = Instant::now() + self.config.tick;
                self.tick();
            }
            if self.needs_schedule && self.degraded.is_none() {
                self.needs_schedule = false;
                self.schedule();
            }
            self.publish();
            self.flush_journal();
        }
    }

    /// Writes what is pending, waits for the journal to finish, and says so.
    fn stop(mut self, done: tokio::sync::oneshot::Sender<()>) {
        self.flush_journal();
        self.journal.stop();
        // Everything the engine holds (the event sink too) is released before the
        // caller hears that it stopped.
        drop(self);
        let _ = done.send(());
    }

    pub(crate) fn handle(&mut self, message: Inbox) {
        match message {
            Inbox::Submit {
                spec,
                by,
                receipt,
                reply,
            } => self.command(reply, |e| {
                let id = e.submit(*spec, &by)?;
                e.write_receipt(receipt, &id);
                Ok(id)
            }),
            Inbox::Reserve {
                request,
                by,
                receipt,
                reply,
            } => self.command(reply, |e| {
                let id = e.reserve(*request, &by)?;
                e.write_receipt(receipt, &id);
                Ok(id)
            }),
            Inbox::ChangeReservation {
                id,
                change,
                by,
                reply,
            } => self.command(reply, |e| e.change_reservation(&id, change, &by)),
            Inbox::CreateContainer { request, by, reply } => {
                self.command(reply, |e| e.create_container(*request, &by))
            }
            Inbox::ChangeContainer {
                id,
                change,
                by,
                reply,
            } => self.command(reply, |e| e.change_container(&id, *change, &by)),
            Inbox::SubmitArray {
                spec,
                array,
                by,
                receipt,
                reply,
            } => self.command(reply, |e| {
                let id = e.submit_array(*spec, *array, &by)?;
                e.write_receipt(receipt, &id);
                Ok(id)
            }),
            Inbox::Modify {
                id,
                changes,
                by,
                reply,
            } => self.command(reply, |e| e.modify(&id, *changes, &by)),
            Inbox::Act {
                id,
                action,
                by,
                reply,
            } => self.command(reply, |e| e.act(&id, action, &by)),
            Inbox::ModifyNode {
                id,
                changes,
                by,
                reply,
            } => self.command(reply, |e| e.modify_node(&id, *changes, &by)),
            Inbox::ReportNodes { items, by, reply } => {
                self.command(reply, |e| e.report_nodes(items, &by))
            }
            Inbox::ReportExternalUse { report, by, reply } => {
                self.command(reply, |e| e.report_external_use(report, &by))
            }
            Inbox::Vm { command, by, reply } => self.command(reply, |e| e.vm_command(command, &by)),
            Inbox::VmDone {
                vm,
                job,
                operation,
                outcome,
            } => self.vm_done(&vm, job, operation, outcome),
            Inbox::Launch(positions) => {
                for position in positions {
                    self.launch(position);
                }
            }
            Inbox::JournalFailed(reason) => {
                if self.degraded.is_none() {
                    eprintln!(
                        "drover: the journal failed, reloading the state from the store: {reason}"
                    );
                    self.degraded = Some(reason);
                    // At once, not at the next tick: the failed batch's changes to
                    // existing jobs are visible until the reload undoes them.
                    self.reload();
                }
            }
            Inbox::Rm(RmEvent::Exited { job_id, pid, exit }) => self.exited(&job_id, pid, exit),
            Inbox::Started {
                job_id,
                number,
                outcome,
            } => self.started(&job_id, number, outcome),
            Inbox::Rm(RmEvent::Nodes(nodes)) => self.rm_nodes(nodes),
            Inbox::Rm(RmEvent::Detected(jobs)) => self.rm_detected(jobs),
            Inbox::Rm(RmEvent::Suspended {
                job_id,
                pid,
                suspended,
            }) => self.rm_suspended(&job_id, pid, suspended),
            Inbox::Rm(RmEvent::Started {
                job_id,
                pid,
                placement,
                memory_per_processor,
                start,
            }) => self.rm_started(&job_id, pid, placement, memory_per_processor, start),
            Inbox::Shutdown(_) => unreachable!("handled by the loop"),
        }
    }

    /// Runs a command unless the journal is failing, and answers it.
    fn command<T: Send + 'static>(
        &mut self,
        reply: tokio::sync::oneshot::Sender<Result<T, SchedError>>,
        run: impl FnOnce(&mut Self) -> Result<T, SchedError>,
    ) {
        let result = match &self.degraded {
            Some(reason) => Err(SchedError::Unavailable(format!(
                "the scheduler cannot record changes now: {reason}"
            ))),
            None => run(self),
        };
        self.journal.answer(reply, result);
    }

    /// Joins a creation's receipt to this step's writes: the job's (or reservation's)
    /// insert is among them, so both are committed in one transaction or neither.
    fn write_receipt(&mut self, receipt: Option<super::Receipt>, created: &str) {
        if let Some(receipt) = receipt
            && self.journal.journaled()
        {
            self.journal.write(receipt.write(created));
        }
    }

    /// Hands this step's writes to the journal.
    pub(crate) fn flush_journal(&mut self) {
        self.write_unwritten_jobs();
        let (published, book_len) = {
            let book = self.shared.jobs.read().unwrap();
            (book.publication().clone(), book.len())
        };
        self.journal.flush(&*self.events, &published, book_len);
    }

    /// Makes what changed in the parts (and the degraded state) visible to readers.
    fn publish(&mut self) {
        if let Some(nodes) = self.nodes.take_changed() {
            *self.shared.nodes.write().unwrap() = Arc::new(nodes);
        }
        if let Some(reservations) = self.reservations.take_changed() {
            *self.shared.reservations.write().unwrap() = Arc::new(reservations);
        }
        if let Some(containers) = self.containers.take_changed() {
            *self.shared.containers.write().unwrap() = Arc::new(containers);
        }
        if let Some(vms) = self.vms.take_changed() {
            *self.shared.vms.write().unwrap() = Arc::new(vms);
        }
        if let Some(credentials) = self.credentials.take_changed() {
            *self.shared.credentials.write().unwrap() = credentials;
        }
        let degraded = self.shared.degraded.read().unwrap().clone();
        if degraded != self.degraded {
            *self.shared.degraded.write().unwrap() = self.degraded.clone();
        }
    }

    pub(crate) fn now(&self) -> Seconds {
        self.clock.now()
    }

    pub(crate) fn job_at(&self, position: usize) -> Arc<Job> {
        self.shared.jobs.read().unwrap().at(position).clone()
    }

    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        self.shared.jobs.read().unwrap().position(id)
    }

    /// Adds a new job to the book and the journal.
    pub(crate) fn add_job(&mut self, job: Job) -> usize {
        if !self.journal.journaled() {
            return self.shared.jobs.write().unwrap().push(job);
        }
        let position = self.shared.jobs.write().unwrap().push(job);
        self.unwritten_jobs.insert(position, true);
        position
    }

    /// Changes a job in place (readers holding the old version keep it) and journals it.
    pub(crate) fn update<R>(&mut self, position: usize, change: impl FnOnce(&mut Job) -> R) -> R {
        let now = self.now();
        let (result, job, before) = {
            let mut book = self.shared.jobs.write().unwrap();
            let before = book.at(position).status.state;
            let result = book.change(position, |job| {
                let before = job.status.state;
                let result = change(job);
                job.status.dates.last_updated = now;
                if job.status.state != before {
                    job.status.dates.state_updated = now;
                }
                result
            });
            (result, book.at(position).clone(), before)
        };
        self.requeue_index(position, &job);
        if job.status.state != before && job.array_member().is_some() {
            self.member_moved(&job, before);
        }
        if job.status.state != before && job.status.state.is_final() && !self.containers.is_empty()
        {
            self.job_ended_in_container(&job.id);
        }
        if self.journal.journaled() {
            self.unwritten_jobs.entry(position).or_insert(false);
        }
        result
    }

    /// The jobs added or changed since the last call join the step's writes, as they are
    /// now.
    pub(super) fn write_unwritten_jobs(&mut self) {
        let book = self.shared.jobs.read().unwrap();
        for (position, added) in std::mem::take(&mut self.unwritten_jobs) {
            let job = book.at(position);
            let (id, body) = (
                job.id.clone(),
                Body::serialize(&**job).expect("a job serializes"),
            );
            // A plain insert for a new job (its id never exists): cheaper than the upsert
            // of a change.
            self.journal.write(match added {
                true => Write::Insert {
                    collection: JOBS.into(),
                    id,
                    name: None,
                    body,
                },
                false => Write::Put {
                    collection: JOBS.into(),
                    id,
                    name: None,
                    body,
                },
            });
        }
    }

    /// Keeps the queue and the running set in step with a job's state.
    pub(crate) fn requeue_index(&mut self, position: usize, job: &Job) {
        if self.queue.index(position, job) {
            self.needs_schedule = true;
        }
    }

    pub(crate) fn emit(
        &mut self,
        event_type: &'static str,
        facility: &'static str,
        object_id: &str,
        by: Option<&Requester>,
        details: Vec<(String, String)>,
    ) {
        self.journal.event(SchedEvent {
            time: self.now(),
            event_type,
            facility,
            object_id: object_id.to_string(),
            user: by.map(|b| b.user.clone()),
            proxy_user: by.and_then(|b| b.proxy_user.clone()),
            details,
        });
    }

    pub(crate) fn remember_credential(&mut self, kind: CredentialKind, name: Option<&str>) {
        self.credentials.remember(kind, name);
    }

    /// Node resources taken (`take`) or given back by a job.
    pub(crate) fn charge_nodes(&mut self, job: &Job, take: bool) {
        self.nodes.charge(job, take);
        if !take {
            // The run is over (or never began): charge it, release what was held.
            let now = self.now();
            let seconds = (job.active_seconds(now) - job.status.earlier_active_seconds).max(0);
            let charged = self.accountant.end(job, seconds, now);
            self.journal.write_all(charged);
        }
    }

    /// A pass over the queue in priority order (`policy::priority`): each job starts
    /// now, waits (perhaps with a reservation) or is Blocked for good, as the policy's
    /// planner decides (`policy::planner`).
    pub(crate) fn schedule(&mut self) {
        // VM work waiting for room goes first, as the system's own (`vm_queue`).
        if self.vm_work_waits() {
            self.start_waiting_vm_work();
        }
        if !self.queue.in_user_vms().is_empty() {
            self.start_jobs_in_user_vms();
        }
        if self.queue.is_empty() {
            return;
        }
        // Nothing could start (slurmctld away): the jobs wait; a tick tries again.
        if self.rm.unavailable().is_some() {
            return;
        }
        let _timed = PassTimer(std::time::Instant::now());
        let now = self.now();
        let held = self.held_resources(now);
        // The planner reads the nodes while jobs change; starts are applied after it.
        let nodes = self.nodes.lend();
        let set_asides = self.reservations.set_asides(&self.nodes);
        let mut planner = Planner::new(self.config.policy.backfill, now, &nodes, held)
            .with_reservation_depth(self.config.policy.reservation_depth)
            .with_set_asides(set_asides);
        // Every processor taken: no job could start, and ranking the queue would be
        // wasted (a burst of submissions into a full machine runs no passes). Only a
        // preemptor may make room.
        if planner.exhausted() && self.queue.preemptors().is_empty() {
            drop(planner);
            self.nodes.give_back(nodes);
            return;
        }
        let mut order = {
            let book = self.shared.jobs.read().unwrap();
            self.queue
                .walk(&self.config.policy, &self.usage, &book, now)
        };
        let mut starts = Vec::new();
        let mut array_starts = HashMap::new();
        let held_by_containers = self.containers.held_jobs();
        // PREEMPTOR jobs go first: they may stop running work, so they surely pass
        // waiting work (and the resources freed for them are not taken by others).
        let preemptors: Vec<usize> = self.queue.preemptors().iter().copied().collect();
        let mut walk = preemptors.iter().copied();
        loop {
            let position = match walk.next() {
                Some(position) => position,
                None => match order.next(&self.queue, planner.room_left()) {
                    Some(position) if self.queue.preemptors().contains(&position) => continue,
                    Some(position) => position,
                    None => break,
                },
            };
            if planner.exhausted() {
                break;
            }
            let job = self.job_at(position);
            if job.spec.earliest_start.is_some_and(|t| t > now) {
                continue;
            }
            if !job.spec.extra.dependencies.is_empty() && !self.dependencies_met(position, &job) {
                continue;
            }
            if !held_by_containers.is_empty() && held_by_containers.contains(&job.id) {
                continue; // its container holds its jobs (HOLDJOBS)
            }
            if job.array_member().is_some() && !self.slot_free(&job, &mut array_starts, false) {
                continue;
            }
            let access = self.reservations.access_of(&job);
            let length = self.config.policy.planned_length(&self.runs, &job);
            match planner.consider_with(&job.spec.request, length, &access) {
                Decision::Start(placed) => {
                    self.slot_free(&job, &mut array_starts, true);
                    starts.push((position, place::allocation(&nodes, &placed)))
                }
                Decision::Reserved(_) | Decision::Wait => {}
                Decision::Never(reason) => {
                    self.update(position, |job| {
                        job.status.state = JobState::Blocked;
                        job.status.block = Some(crate::job::Block {
                            kind: "NoResources".into(),
                            message: reason,
                        });
                    });
                }
            }
        }
        drop(planner);
        self.nodes.give_back(nodes);
        for (position, allocation) in starts {
            if let Err(reason) = self.begin_start(position, allocation) {
                self.block_for_funds(position, reason);
            }
        }
        for position in preemptors {
            let job = self.job_at(position);
            let eligible = job.status.state == JobState::Idle
                && job.spec.earliest_start.is_none_or(|t| t <= now);
            if eligible {
                self.preempt_for(position);
            }
        }
    }

    /// What running jobs hold, and until when they are expected to (start plus requested
    /// time, plus time spent suspended; a suspended job or one without a requested time
    /// gives no end).
    fn held_resources(&self, now: Seconds) -> Vec<Held> {
        let book = self.shared.jobs.read().unwrap();
        let mut held = Vec::new();
        for &position in self.queue.running() {
            let job = book.at(position);
            if job.status.in_vm.is_some() {
                continue; // its VM holds what it uses
            }
            let request = &job.spec.request;
            let end = match (job.status.state, job.spec.duration) {
                (JobState::Suspended, _) => None,
                (_, Some(limit)) if limit > 0 => {
                    let start = job.status.dates.start.unwrap_or(now);
                    Some(start + limit + job.status.suspended_seconds)
                }
                _ => None,
            };
            for allocation in &job.status.allocation {
                if let Some(node) = self.nodes.index_of(&allocation.node) {
                    held.push(Held {
                        node,
                        processors: allocation.tasks * request.processors_per_task,
                        memory: u64::from(allocation.tasks) * request.memory_per_task.unwrap_or(0),
                        end,
                    });
                }
            }
        }
        held
    }

    /// Whether the job's dependencies let it start; if not, shows why (Blocked with a
    /// `Dependency` block while it may still happen, `DependencyFailed` once it cannot).
    pub(super) fn dependencies_met(&mut self, position: usize, job: &Job) -> bool {
        let verdict = {
            let book = self.shared.jobs.read().unwrap();
            dependency::judge_all(job, |id| book.get(id).map(|j| &**j))
        };
        let (kind, reason) = match verdict {
            Verdict::Met => return true,
            Verdict::Waiting(reason) => (dependency::WAITING, reason),
            Verdict::Never(reason) => (dependency::FAILED, reason),
        };
        let block = crate::job::Block {
            kind: kind.into(),
            message: reason,
        };
        if job.status.block.as_ref() != Some(&block) || job.status.state != JobState::Blocked {
            self.update(position, |job| {
                job.status.state = JobState::Blocked;
                job.status.block = Some(block);
            });
        }
        false
    }

    /// Places a job: it holds its resources from now, and its process is launched once
    /// the start is durable.
    /// Refused (nothing changed) when the accountant will not hold the job's funds.
    pub(crate) fn begin_start(
        &mut self,
        position: usize,
        allocation: Vec<crate::job::Allocation>,
    ) -> Result<(), String> {
        let mut priced = (*self.job_at(position)).clone();
        priced.status.allocation = allocation.clone();
        let held = self.accountant.start(&priced, self.now())?;
        self.journal.write_all(held);
        let job = self.update(position, |job| {
            job.status.state = JobState::Starting;
            job.status.allocation = allocation;
            job.status.block = None;
            job.clone()
        });
        self.charge_nodes(&job, true);
        self.journal.launch_when_committed(position);
        Ok(())
    }

    /// The job may not start for lack of funds: it stays queued, and shows why.
    pub(super) fn block_for_funds(&mut self, position: usize, reason: String) {
        let block = crate::job::Block {
            kind: "InsufficientFunds".into(),
            message: reason,
        };
        if self.job_at(position).status.block.as_ref() != Some(&block) {
            self.update(position, |job| job.status.block = Some(block));
        }
    }

    /// Starts the process of a job whose start is durable (in a VM made for it first,
    /// when its `vmUsagePolicy` asks for one).
    fn launch(&mut self, position: usize) {
        let job = self.job_at(position);
        if job.status.state != JobState::Starting {
            return; // cancelled or requeued meanwhile
        }
        if crate::vm::wants_vm(job.spec.extra.vm_usage_policy.as_deref()) {
            return self.launch_in_vm(position, &job);
        }
        let launch = self.launch_of(&job);
        self.hand_to_launcher(position, launch);
    }

    /// What came of handing a job to the resource manager: it runs, or is held saying
    /// why.
    pub(super) fn start_process(
        &mut self,
        position: usize,
        outcome: Result<ProcessRecord, String>,
    ) {
        let job = self.job_at(position);
        let now = self.now();
        match outcome {
            Ok(process) => {
                self.update(position, |job| {
                    job.status.state = JobState::Running;
                    job.status.rm_job_id = process.rm_job_id.clone();
                    job.status.process = Some(process);
                    job.status.dates.start = Some(now);
                    job.status.counts.start += 1;
                });
                let nodes = job.node_ids().collect::<Vec<_>>().join(",");
                self.emit(
                    "jobstart",
                    "job",
                    &job.id,
                    None,
                    vec![("nodes".into(), nodes)],
                );
            }
            // The resource manager does not answer (slurmctld away): not the job's
            // fault; it waits again, and starts once the manager is back.
            Err(reason) if self.rm.unavailable().is_some() => {
                self.requeue_unstarted(position, reason)
            }
            Err(reason) => self.hold_unstarted(position, reason),
        }
    }

    /// A job whose start failed because its resource manager is away: its resources go
    /// back and it waits in the queue again, saying why.
    fn requeue_unstarted(&mut self, position: usize, reason: String) {
        let job = self.job_at(position);
        let now = self.now();
        self.charge_nodes(&job, false);
        self.update(position, |job| {
            job.status.state = JobState::Idle;
            job.status.allocation.clear();
            job.status.in_vm = None;
            job.status.messages.push(JobMessage {
                text: format!(
                    "The job could not be started now and waits again (the resource manager does not answer): {reason}"
                ),
                author: None,
                created: now,
            });
        });
        self.job_left_its_vm(&job.id);
    }

    /// A job that could not start: its resources go back and it is held, saying why.
    pub(super) fn hold_unstarted(&mut self, position: usize, reason: String) {
        let job = self.job_at(position);
        let now = self.now();
        self.charge_nodes(&job, false);
        self.update(position, |job| {
            job.status.state = JobState::Hold;
            job.status.allocation.clear();
            job.status.in_vm = None;
            if !job.status.holds.contains(&Hold::Batch) {
                job.status.holds.push(Hold::Batch);
            }
            job.status.dates.hold = Some(now);
            job.status.hold_reason = Some("could not start".into());
            job.status.messages.push(JobMessage {
                text: format!("The job could not be started and was held: {reason}"),
                author: None,
                created: now,
            });
        });
        self.emit(
            "jobhold",
            "job",
            &job.id,
            None,
            vec![("reason".into(), reason)],
        );
        self.job_left_its_vm(&job.id);
    }

    /// Asks a job's process to stop: SIGTERM, then SIGKILL after the configured grace.
    pub(super) fn terminate(&self, process: &ProcessRecord) -> Result<(), String> {
        let grace_seconds = self.config.kill_grace_seconds;
        self.rm
            .signal(process, JobSignal::Terminate { grace_seconds })
    }

    /// A job's process ended.
    pub(crate) fn exited(&mut self, job_id: &str, pid: i32, exit: Exit) {
        let Some(position) = self.position(job_id) else {
            return;
        };
        let job = self.job_at(position);
        if job.status.process.is_none()
            && job.status.state == JobState::Starting
            && self.hold_early_end(job_id, pid, &exit)
        {
            return; // it ended before its start was heard: applied once it is
        }
        if job.status.process.as_ref().map(|p| p.pid) != Some(pid) {
            return; // a process of an earlier run
        }
        self.charge_nodes(&job, false);
        if let Some(process) = job.status.process.clone() {
            let (rm, job_id) = (self.rm.clone(), job.id.clone());
            self.journal
                .run_when_committed(Box::new(move || rm.forget(&job_id, &process)));
        }
        let now = self.now();
        let run = job.active_seconds(now) - job.status.earlier_active_seconds;
        self.charge_reservation(&job, (job.processors() as f64) * run as f64);
        self.usage.record(
            &job.status.exec_user,
            (job.processors() as f64) * run as f64,
            now,
        );
        // A run that went its own way (or to its limit) tells how long the user's jobs
        // run; one cancelled, requeued or never started does not.
        if exit.start_failure.is_none()
            && matches!(job.status.ending, None | Some(EndIntent::WallTime))
        {
            self.runs.record(&job.status.exec_user, run);
        }
        let code = exit.code.unwrap_or(-1);
        let ended = self.update(position, |job| {
            let status = &mut job.status;
            status.process = None;
            status.cpu_seconds += exit.cpu_seconds;
            if let Some(since) = status.suspended_since.take() {
                status.suspended_seconds += now - since;
            }
            match status.ending.take() {
                Some(EndIntent::Cancel) => {
                    status.completion_code = Some(code);
                }
                Some(EndIntent::WallTime) => {
                    status.state = JobState::Vacated;
                    status.completion_code = Some(code);
                    status.dates.completion = Some(now);
                }
                Some(EndIntent::Requeue) => {
                    let run = job.active_seconds(now) - job.status.earlier_active_seconds;
                    let status = &mut job.status;
                    status.earlier_active_seconds += run.max(0);
                    status.allocation.clear();
                    status.suspended_seconds = 0;
                    status.dates.start = None;
                    status.completion_code = None;
                    status.state = if status.holds.is_empty() {
                        JobState::Idle
                    } else {
                        JobState::Hold
                    };
                    return false;
                }
                None => {
                    status.state = JobState::Completed;
                    status.completion_code = Some(code);
                    status.dates.completion = Some(now);
                }
            }
            true
        });
        self.needs_schedule = true;
        // A sub-job that ended by itself (not cancelled) may end its array.
        if ended && job.array_member().is_some() && job.status.ending != Some(EndIntent::Cancel) {
            self.member_ended(&job, code);
        }
        if let Some(reason) = &exit.start_failure {
            // Its command never ran: say why, on the job and in its end's event.
            self.update(position, |job| {
                job.status.messages.push(JobMessage {
                    text: format!("The job's command could not be started: {reason}"),
                    author: None,
                    created: now,
                })
            });
        }
        if ended {
            let mut details = vec![("completionCode".to_string(), code.to_string())];
            if let Some(reason) = &exit.start_failure {
                details.push(("reason".into(), reason.clone()));
            }
            self.emit("jobend", "job", job_id, None, details);
        }
        if crate::vm::wants_vm(job.spec.extra.vm_usage_policy.as_deref()) {
            self.job_left_its_vm(job_id);
        }
    }

    /// Runs the scheduling pass that is due, if one is (the simulator's step).
    pub(crate) fn schedule_if_due(&mut self) {
        if self.needs_schedule {
            self.needs_schedule = false;
            self.schedule();
        }
    }

    /// How many jobs wait, and how many hold resources.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.queue.len(), self.queue.running().len())
    }

    /// After a failed journal write: once the journal has finished what it was handed,
    /// goes back to what is stored, and takes changes again if that worked.
    fn reload(&mut self) {
        // This step's changes first (jobs it took and answered before the failure was
        // heard): handed to the journal and drained with the rest, so that the book read
        // again holds them if they were committed.
        self.flush_journal();
        let reloaded = self
            .journal
            .drain(Duration::from_secs(10))
            .and_then(|()| self.load())
            .and_then(|()| self.accountant.reload());
        match reloaded {
            Ok(()) => {
                eprintln!("drover: the store is back; state reloaded");
                self.degraded = None;
            }
            Err(e) => self.degraded = Some(e),
        }
    }

    /// Time-driven work: wall-time limits, start dates, retrying a failed journal.
    fn tick(&mut self) {
        if self.degraded.is_some() {
            self.reload();
            return;
        }
        let now = self.now();
        let over: Vec<(usize, i64)> = self
            .queue
            .running()
            .iter()
            .map(|&p| (p, self.job_at(p)))
            .filter(|(_, job)| {
                job.status.state != JobState::Starting
                    && job.status.ending.is_none()
                    && job
                        .spec
                        .duration
                        .is_some_and(|limit| limit > 0 && job.active_seconds(now) > limit)
            })
            .map(|(p, job)| (p, job.spec.duration.unwrap_or(0)))
            .collect();
        for (position, limit) in over {
            let job = self.job_at(position);
            if let Some(process) = &job.status.process
                && let Err(e) = self.terminate(process)
            {
                eprintln!("drover: cannot stop job {}: {e}", job.id);
            }
            self.update(position, |job| {
                job.status.ending = Some(EndIntent::WallTime);
                job.status.messages.push(JobMessage {
                    text: format!(
                        "The job exceeded its wall time of {limit} seconds and was stopped"
                    ),
                    author: None,
                    created: now,
                });
            });
            self.emit(
                "jobcancel",
                "job",
                &job.id,
                None,
                vec![("reason".into(), "wall time".into())],
            );
        }
        self.expire_reservations(now);
        if !self.vms.is_empty() {
            self.charge_vms(now);
            self.expire_vms(now);
        }
        if !self.queue.is_empty() || self.vm_work_waits() {
            self.needs_schedule = true;
        }
    }
}

/// How long scheduling passes take (for `GET /metrics`); a pass over an empty queue is
/// not one.
pub static PASS_SECONDS: drover_metrics::Histogram =
    drover_metrics::Histogram::new(drover_metrics::PASS_SECONDS);

/// Observes a pass's duration when it ends, whichever way it returns.
struct PassTimer(std::time::Instant);

impl Drop for PassTimer {
    fn drop(&mut self) {
        PASS_SECONDS.observe_duration(self.0.elapsed());
    }
}
