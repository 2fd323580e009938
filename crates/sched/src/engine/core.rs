//! The engine thread: its state, its loop, the journal hand-off, scheduling passes,
//! process ends and time-driven work.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use drover_store::{Body, CollectionSpec, DocumentStore, Write};

use super::{CredentialKind, EngineParts, Inbox, SchedConfig, Scheduler, Shared};
use crate::book::JobBook;
use crate::clock::{Clock, Seconds};
use crate::dependency::{self, Verdict};
use crate::events::{EventSink, SchedEvent};
use crate::job::{EndIntent, Hold, Job, JobMessage, JobState};
use crate::node::{Node, NodeConfig};
use crate::place;
use crate::policy::plan::{Decision, Held, Planner};
use crate::policy::priority::{Priority, QueueRank, Usage};
use crate::request::{Requester, SchedError};
use crate::rm::{Exit, JobSignal, ResourceManager, RmEvent};
use crate::sysuser::{self, SystemUser};
use drover_store::journal::{self, Batch};

/// The store collection of jobs (one document per job, the [`Job`] model as JSON).
pub const JOBS: &str = "jobs";
/// The store collection of node overrides.
pub(crate) const NODES: &str = "nodes";

/// Inbox messages handled before the journal gets the step's writes.
const MAX_MESSAGES_PER_STEP: usize = 4096;
/// How long a system account looked up stays good (see `Engine::accounts`).
const ACCOUNT_FRESHNESS: std::time::Duration = std::time::Duration::from_secs(30);

/// The order of the queue: system priority, then user priority (both highest first),
/// then submission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct QueueKey {
    system: std::cmp::Reverse<i64>,
    user: std::cmp::Reverse<i64>,
    seq: u64,
    /// Sub-jobs of an array share their master's `seq`: then the index orders them.
    index: i64,
}

impl QueueKey {
    pub(crate) fn of(job: &Job) -> QueueKey {
        QueueKey {
            system: std::cmp::Reverse(job.status.system_priority),
            user: std::cmp::Reverse(job.spec.user_priority),
            seq: job.seq,
            index: job.array_member().map_or(-1, |(_, index)| index),
        }
    }
}

/// The order of one pass over the queue.
pub(crate) enum QueueWalk {
    /// The queue's own order, resumed after the last key given (the queue may change
    /// during the pass).
    Listed { after: Option<QueueKey> },
    Ranked {
        /// Goes first (and is skipped when the heap yields it again).
        first: Option<usize>,
        given: Option<usize>,
        heap: std::collections::BinaryHeap<Ranked>,
    },
}

/// A job's rank with its position, ordered so that the best is the heap's top.
pub(crate) struct Ranked(QueueRank, usize);

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // QueueRank puts the best first; the heap pops the greatest.
        other.0.queue_cmp(&self.0)
    }
}

impl QueueWalk {
    fn next(&mut self, queue: &BTreeMap<QueueKey, usize>) -> Option<usize> {
        match self {
            QueueWalk::Listed { after } => {
                let (&key, &position) = match after {
                    Some(last) => queue
                        .range((std::ops::Bound::Excluded(*last), std::ops::Bound::Unbounded))
                        .next()?,
                    None => queue.iter().next()?,
                };
                *after = Some(key);
                Some(position)
            }
            QueueWalk::Ranked { first, given, heap } => {
                if let Some(position) = first.take() {
                    *given = Some(position);
                    return Some(position);
                }
                loop {
                    let Ranked(_, position) = heap.pop()?;
                    if Some(position) != *given {
                        return Some(position);
                    }
                }
            }
        }
    }
}

pub(crate) struct Engine {
    pub(crate) config: SchedConfig,
    pub(crate) shared: Arc<Shared>,
    pub(crate) store: Arc<dyn DocumentStore>,
    pub(crate) rm: Arc<dyn ResourceManager>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) events: Arc<dyn EventSink>,
    pub(crate) accountant: Arc<dyn crate::accountant::Accountant>,
    /// Events of the current step, journaled with its changes.
    pub(crate) pending_events: Vec<SchedEvent>,
    pub(crate) inbox: Sender<Inbox>,
    /// False in the simulator: no journal, nothing written.
    journaled: bool,
    journal: Option<Sender<Batch>>,
    journal_thread: Option<std::thread::JoinHandle<()>>,
    /// Writes and completions of the current step.
    pub(crate) batch: Batch,
    /// Jobs waiting to be placed (Idle), by queue order, to their book position.
    pub(crate) queue: BTreeMap<QueueKey, usize>,
    pub(crate) queue_keys: HashMap<usize, QueueKey>,
    /// Book positions of jobs holding resources (Starting, Running, Suspended).
    pub(crate) running: BTreeSet<usize>,
    /// Waiting jobs flagged PREEMPTOR.
    pub(crate) preemptors: BTreeSet<usize>,
    /// Job arrays, by the book position of their master.
    pub(crate) arrays: HashMap<usize, super::arrays::Tally>,
    /// Advance reservations, oldest first.
    pub(crate) reservations: Vec<crate::reservation::Reservation>,
    pub(crate) next_reservation: u64,
    /// Reservations changed since readers last saw them.
    pub(crate) reservations_dirty: bool,
    /// Virtual containers, by number.
    pub(crate) containers: Vec<crate::container::VirtualContainer>,
    pub(crate) next_container: u64,
    pub(crate) containers_dirty: bool,
    pub(crate) nodes: Vec<Node>,
    /// Node ids to their index in `nodes`.
    pub(crate) node_index: HashMap<String, usize, foldhash::fast::FixedState>,
    nodes_changed: bool,
    /// Recent usage per user: the fair-share factor.
    pub(crate) usage: Usage,
    pub(crate) credentials: BTreeMap<CredentialKind, BTreeSet<String>>,
    credentials_changed: bool,
    pub(crate) next_seq: u64,
    /// System accounts looked up lately (`None`: no such account), with when, shared: a
    /// submission only reads one. Looked up again after `ACCOUNT_FRESHNESS`, so that a
    /// group membership taken away stops counting.
    accounts: HashMap<String, (Instant, Option<Arc<SystemUser>>)>,
    pub(crate) service_user: Arc<SystemUser>,
    /// What submissions found of working directories and command files, for a moment.
    pub(crate) file_facts: crate::fsfacts::FileFacts,
    pub(crate) degraded: Option<String>,
    pub(crate) needs_schedule: bool,
}

impl Engine {
    pub(crate) fn start(config: SchedConfig, parts: EngineParts) -> Result<Scheduler, String> {
        for collection in [
            JOBS,
            NODES,
            super::reservations::RESERVATIONS,
            super::containers::CONTAINERS,
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
            inbox: engine.inbox.clone(),
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
        let node_configs = if config.nodes.is_empty() {
            vec![NodeConfig::this_machine()]
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
            credentials: RwLock::new(BTreeMap::new()),
            name: config.name.clone(),
            clock: parts.clock.clone(),
            degraded: RwLock::new(None),
        });
        let (journal, journal_thread) = if journaled {
            let (journal, thread) = journal::start(store.clone(), "journal");
            (Some(journal), Some(thread))
        } else {
            (None, None)
        };
        let node_index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id().to_string(), i))
            .collect();
        let usage = Usage::new(config.policy.fairshare_half_life);
        let engine = Engine {
            config,
            shared,
            store,
            rm,
            clock: parts.clock,
            events: parts.events,
            accountant: parts.accountant,
            pending_events: Vec::new(),
            inbox,
            journaled,
            journal,
            journal_thread,
            batch: Batch::default(),
            queue: BTreeMap::new(),
            queue_keys: HashMap::new(),
            running: BTreeSet::new(),
            preemptors: BTreeSet::new(),
            arrays: HashMap::new(),
            reservations: Vec::new(),
            next_reservation: 0,
            reservations_dirty: true,
            containers: Vec::new(),
            next_container: 0,
            containers_dirty: true,
            nodes,
            node_index,
            nodes_changed: false,
            usage,
            credentials: BTreeMap::new(),
            credentials_changed: true,
            next_seq: 1,
            accounts: HashMap::new(),
            service_user: Arc::new(service_user),
            file_facts: Default::default(),
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

    /// The system account `name`, looked up once.
    pub(crate) fn account(&mut self, name: &str) -> Option<Arc<SystemUser>> {
        if let Some((when, found)) = self.accounts.get(name)
            && when.elapsed() < ACCOUNT_FRESHNESS
        {
            return found.clone();
        }
        let found = SystemUser::lookup(name).map(Arc::new);
        self.accounts
            .insert(name.to_string(), (Instant::now(), found.clone()));
        found
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
        drop(self.journal.take());
        if let Some(thread) = self.journal_thread.take() {
            let _ = thread.join();
        }
        // Everything the engine holds (the event sink too) is released before the
        // caller hears that it stopped.
        drop(self);
        let _ = done.send(());
    }

    pub(crate) fn handle(&mut self, message: Inbox) {
        match message {
            Inbox::Submit { spec, by, reply } => self.command(reply, |e| e.submit(*spec, &by)),
            Inbox::Reserve { request, by, reply } => {
                self.command(reply, |e| e.reserve(*request, &by))
            }
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
                reply,
            } => self.command(reply, |e| e.submit_array(*spec, *array, &by)),
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
                }
            }
            Inbox::Rm(RmEvent::Exited { job_id, pid, exit }) => self.exited(&job_id, pid, exit),
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
        self.answer(reply, result);
    }

    /// Answers once this step's writes are durable; a refusal is answered at once.
    fn answer<T: Send + 'static>(
        &mut self,
        reply: tokio::sync::oneshot::Sender<Result<T, SchedError>>,
        result: Result<T, SchedError>,
    ) {
        match result {
            Err(refusal) => drop(reply.send(Err(refusal))),
            Ok(value) => self.batch.completions.push(Box::new(move |committed| {
                let _ = reply.send(match committed {
                    Ok(()) => Ok(value),
                    Err(e) => Err(SchedError::Unavailable(format!(
                        "the change could not be recorded: {e}"
                    ))),
                });
            })),
        }
    }

    /// Hands this step's writes to the journal.
    pub(crate) fn flush_journal(&mut self) {
        if !self.pending_events.is_empty() {
            let events = self
                .events
                .journal(std::mem::take(&mut self.pending_events));
            self.batch.writes.extend(events.writes);
            if let Some(committed) = events.committed {
                self.batch.completions.push(Box::new(move |result| {
                    if result.is_ok() {
                        committed();
                    }
                }));
            }
        }
        if self.batch.is_empty() {
            return;
        }
        if !self.journaled {
            for completion in std::mem::take(&mut self.batch.completions) {
                completion(&Ok(()));
            }
            self.batch.writes.clear();
            return;
        }
        let mut batch = std::mem::take(&mut self.batch);
        let inbox = self.inbox.clone();
        batch.completions.push(Box::new(move |committed| {
            if let Err(e) = committed {
                let _ = inbox.send(Inbox::JournalFailed(e.clone()));
            }
        }));
        if let Some(journal) = &self.journal
            && let Err(lost) = journal.send(batch)
        {
            for completion in lost.0.completions {
                completion(&Err("the journal has stopped".into()));
            }
        }
    }

    /// Makes node and credential changes visible to readers.
    fn publish(&mut self) {
        if self.nodes_changed {
            *self.shared.nodes.write().unwrap() = Arc::new(self.nodes.clone());
            self.nodes_changed = false;
        }
        if self.reservations_dirty {
            *self.shared.reservations.write().unwrap() = Arc::new(self.reservations.clone());
            self.reservations_dirty = false;
        }
        if self.containers_dirty {
            *self.shared.containers.write().unwrap() = Arc::new(self.containers.clone());
            self.containers_dirty = false;
        }
        if self.credentials_changed {
            *self.shared.credentials.write().unwrap() = self.credentials.clone();
            self.credentials_changed = false;
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
        if !self.journaled {
            return self.shared.jobs.write().unwrap().push(job);
        }
        let body = Body::serialize(&job).expect("a job serializes");
        let id = job.id.clone();
        let position = self.shared.jobs.write().unwrap().push(job);
        // A plain insert (a new id never exists): cheaper than the upsert of a change.
        self.batch.writes.push(Write::Insert {
            collection: JOBS.into(),
            id,
            name: None,
            body,
        });
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
        if !self.journaled {
            return result;
        }
        self.batch.writes.push(Write::Put {
            collection: JOBS.into(),
            id: job.id.clone(),
            name: None,
            body: Body::serialize(&*job).expect("a job serializes"),
        });
        result
    }

    /// Keeps the queue and the running set in step with a job's state.
    pub(crate) fn requeue_index(&mut self, position: usize, job: &Job) {
        if job.array_spec().is_some() {
            return; // a master never runs: its sub-jobs do
        }
        let waiting = job.status.state == JobState::Idle
            || (job.status.state == JobState::Blocked
                && job
                    .status
                    .block
                    .as_ref()
                    .is_some_and(|b| b.kind == dependency::WAITING));
        let key = QueueKey::of(job);
        match (self.queue_keys.get(&position).copied(), waiting) {
            (Some(old), true) if old == key => {}
            (Some(old), _) => {
                self.queue.remove(&old);
                self.queue_keys.remove(&position);
                if waiting {
                    self.queue.insert(key, position);
                    self.queue_keys.insert(position, key);
                }
            }
            (None, true) => {
                self.queue.insert(key, position);
                self.queue_keys.insert(position, key);
                self.needs_schedule = true;
            }
            (None, false) => {}
        }
        if job.status.state.is_running() {
            self.running.insert(position);
        } else {
            self.running.remove(&position);
        }
        if waiting && job.has_flag("PREEMPTOR") {
            self.preemptors.insert(position);
        } else {
            self.preemptors.remove(&position);
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
        self.pending_events.push(SchedEvent {
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
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            let names = self.credentials.entry(kind).or_default();
            if !names.contains(name) {
                names.insert(name.to_string());
                self.credentials_changed = true;
            }
        }
    }

    pub(crate) fn mark_nodes_changed(&mut self) {
        self.nodes_changed = true;
    }

    /// Node resources taken (`take`) or given back by a job.
    pub(crate) fn charge_nodes(&mut self, job: &Job, take: bool) {
        let per_task_memory = job.spec.request.memory_per_task.unwrap_or(0);
        for allocation in &job.status.allocation {
            let Some(&index) = self.node_index.get(&allocation.node) else {
                continue;
            };
            let node = &mut self.nodes[index];
            let processors = allocation.tasks * job.spec.request.processors_per_task;
            let memory = u64::from(allocation.tasks) * per_task_memory;
            if take {
                node.used_processors += processors;
                node.used_memory += memory;
                node.jobs.push(job.id.clone());
            } else {
                node.used_processors = node.used_processors.saturating_sub(processors);
                node.used_memory = node.used_memory.saturating_sub(memory);
                node.jobs.retain(|j| *j != job.id);
            }
        }
        if !take {
            // The run is over (or never began): charge it, release what was held.
            let now = self.now();
            let seconds = (job.active_seconds(now) - job.status.earlier_active_seconds).max(0);
            let charged = self.accountant.end(job, seconds, now);
            self.batch.writes.extend(charged);
        }
        self.nodes_changed = true;
    }

    /// A pass over the queue in priority order (`policy::priority`): each job starts
    /// now, waits (perhaps with a reservation) or is Blocked for good, as the policy's
    /// planner decides (`policy::plan`).
    pub(crate) fn schedule(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        let now = self.now();
        let mut order = self.queue_order(now);
        let held = self.held_resources(now);
        // The planner reads the nodes while jobs change; starts are applied after it.
        let nodes = std::mem::take(&mut self.nodes);
        let set_asides = self.set_asides();
        let mut planner = Planner::new(self.config.policy.backfill, now, &nodes, held)
            .with_reservation_depth(self.config.policy.reservation_depth)
            .with_set_asides(set_asides);
        let mut starts = Vec::new();
        let mut array_starts = HashMap::new();
        let held_by_containers = self.held_by_containers();
        // PREEMPTOR jobs go first: they may stop running work, so they surely pass
        // waiting work (and the resources freed for them are not taken by others).
        let preemptors: Vec<usize> = self.preemptors.iter().copied().collect();
        let mut walk = preemptors.iter().copied();
        loop {
            let position = match walk.next() {
                Some(position) => position,
                None => match order.next(&self.queue) {
                    Some(position) if self.preemptors.contains(&position) => continue,
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
            let access = self.access_of(&job);
            match planner.consider_with(&job.spec.request, job.spec.duration, &access) {
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
        self.nodes = nodes;
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

    /// The waiting jobs, best first, produced lazily: a pass usually stops long before
    /// the end of a long queue. With `reserve_oldest`, the job first in submission order
    /// comes first whatever its priority, so it is the one EASY protects.
    fn queue_order(&self, now: Seconds) -> QueueWalk {
        let policy = &self.config.policy;
        if policy.weights.is_static() {
            // The queue's own order (system, then user priority, then submission) is
            // the priority order.
            return QueueWalk::Listed { after: None };
        }
        let priority = Priority {
            weights: &policy.weights,
            usage: &self.usage,
            now,
        };
        let book = self.shared.jobs.read().unwrap();
        let ranked: Vec<_> = self
            .queue
            .values()
            .map(|&position| Ranked(priority.rank(book.at(position)), position))
            .collect();
        let first = policy
            .reserve_oldest
            .then(|| self.queue.values().next().copied())
            .flatten();
        QueueWalk::Ranked {
            first,
            given: None,
            heap: std::collections::BinaryHeap::from(ranked),
        }
    }

    /// What running jobs hold, and until when they are expected to (start plus requested
    /// time, plus time spent suspended; a suspended job or one without a requested time
    /// gives no end).
    fn held_resources(&self, now: Seconds) -> Vec<Held> {
        let book = self.shared.jobs.read().unwrap();
        let mut held = Vec::new();
        for &position in &self.running {
            let job = book.at(position);
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
                if let Some(&node) = self.node_index.get(&allocation.node) {
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
    fn dependencies_met(&mut self, position: usize, job: &Job) -> bool {
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
        self.batch.writes.extend(held);
        let job = self.update(position, |job| {
            job.status.state = JobState::Starting;
            job.status.allocation = allocation;
            job.status.block = None;
            job.clone()
        });
        self.charge_nodes(&job, true);
        let inbox = self.inbox.clone();
        self.batch.completions.push(Box::new(move |committed| {
            if committed.is_ok() {
                let _ = inbox.send(Inbox::Launch(vec![position]));
            }
        }));
        Ok(())
    }

    /// The job may not start for lack of funds: it stays queued, and shows why.
    fn block_for_funds(&mut self, position: usize, reason: String) {
        let block = crate::job::Block {
            kind: "InsufficientFunds".into(),
            message: reason,
        };
        if self.job_at(position).status.block.as_ref() != Some(&block) {
            self.update(position, |job| job.status.block = Some(block));
        }
    }

    /// Starts the process of a job whose start is durable.
    fn launch(&mut self, position: usize) {
        let job = self.job_at(position);
        if job.status.state != JobState::Starting {
            return; // cancelled or requeued meanwhile
        }
        let launch = self.launch_of(&job);
        let now = self.now();
        match launch.and_then(|l| self.rm.start(l)) {
            Ok(process) => {
                self.update(position, |job| {
                    job.status.state = JobState::Running;
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
            Err(reason) => {
                self.charge_nodes(&job, false);
                self.update(position, |job| {
                    job.status.state = JobState::Hold;
                    job.status.allocation.clear();
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
            }
        }
    }

    /// A job's process ended.
    pub(crate) fn exited(&mut self, job_id: &str, pid: i32, exit: Exit) {
        let Some(position) = self.position(job_id) else {
            return;
        };
        let job = self.job_at(position);
        if job.status.process.as_ref().map(|p| p.pid) != Some(pid) {
            return; // a process of an earlier run
        }
        self.charge_nodes(&job, false);
        let now = self.now();
        let run = job.active_seconds(now) - job.status.earlier_active_seconds;
        self.charge_reservation(&job, (job.processors() as f64) * run as f64);
        self.usage.record(
            &job.status.exec_user,
            (job.processors() as f64) * run as f64,
            now,
        );
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
        if ended {
            self.emit(
                "jobend",
                "job",
                job_id,
                None,
                vec![("completionCode".into(), code.to_string())],
            );
        }
    }

    /// Time-driven work: wall-time limits, start dates, retrying a failed journal.
    fn tick(&mut self) {
        if self.degraded.is_some() {
            match self.load() {
                Ok(()) => {
                    eprintln!("drover: the store is back; state reloaded");
                    self.degraded = None;
                }
                Err(e) => self.degraded = Some(e),
            }
            return;
        }
        let now = self.now();
        let over: Vec<(usize, i64)> = self
            .running
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
            if let Some(process) = &job.status.process {
                let grace = self.config.kill_grace_seconds;
                if let Err(e) = self.rm.signal(
                    process,
                    JobSignal::Terminate {
                        grace_seconds: grace,
                    },
                ) {
                    eprintln!("drover: cannot stop job {}: {e}", job.id);
                }
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
        if !self.queue.is_empty() {
            self.needs_schedule = true;
        }
    }
}
