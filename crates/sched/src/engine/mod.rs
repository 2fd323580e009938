//! The engine: one thread owns the hot state (jobs, nodes, credentials) and is the only
//! writer of it. Handlers talk to it through [`Scheduler`]: changes are commands sent to
//! its inbox, answered once the journal has made them durable; reads look at the shared
//! state directly (a read lock held for a copy), never waiting for a scheduling pass.
//!
//! `Engine` (in `core`: the loop, scheduling passes, process ends, time-driven work)
//! composes parts that own their fields: `queue`, `journal_handoff`, `node_pool`,
//! `reservation_table` and `virtual_container_table` (both an `id_table`), `credential_names`,
//! `system_accounts`, `arrays`. Commands: `submission`, `job_changes`, `job_actions`,
//! `node_changes`, `reservation_commands`, `virtual_container_commands` (with `acl_edit`),
//! `vm_commands` (VMs, their system jobs and time to live);
//! `launch`, `preempt`, `recovery`.

mod acl_edit;
mod arrays;
mod core;
mod credential_names;
mod id_table;
mod job_actions;
mod job_changes;
mod journal_handoff;
mod launch;
mod launcher;
mod node_changes;
mod node_pool;
mod node_reports;
mod plugin_jobs;
mod preempt;
mod queue;
mod recovery;
mod reservation_commands;
mod reservation_table;
mod rm_reports;
mod submission;
mod system_accounts;
mod virtual_container_commands;
mod virtual_container_table;
mod vm_charges;
mod vm_commands;
mod vm_jobs;
mod vm_queue;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::Sender;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use drover_store::DocumentStore;
use serde::Deserialize;
use tokio::sync::oneshot;

use crate::book::JobBook;
use crate::clock::{Clock, Seconds};
use crate::events::EventSink;
use crate::job::Job;
use crate::node::{Node, NodeConfig};
use crate::request::{JobAction, JobChanges, NodeChanges, Requester, SchedError};
use crate::rm::{ResourceManager, RmEvent};

pub(crate) use self::core::Engine;
pub use self::core::{JOBS, PASS_SECONDS};

/// The scheduler's configuration (`[scheduler]` and `[[nodes]]`).
#[derive(Debug, Clone)]
pub struct SchedConfig {
    /// Job ids are `<name>.<n>`; also reported as `schedName`.
    pub name: String,
    /// Logical nodes; empty means one node describing this machine.
    pub nodes: Vec<NodeConfig>,
    /// The system user for API users without a system account (default: `nobody` when
    /// the service runs as root).
    pub execution_user: Option<String>,
    /// Whether a job may run as root.
    pub allow_root_jobs: bool,
    /// Seconds between SIGTERM and SIGKILL when a job is cancelled.
    pub kill_grace_seconds: u64,
    /// The command run for `checkpoint`, with the job in its environment.
    pub checkpoint_command: Option<String>,
    /// Credentials known before any job names them.
    pub credentials: ConfiguredCredentials,
    /// How often time-driven work runs (wall-time limits, start dates).
    pub tick: Duration,
    /// Queue order, backfill and preemption.
    pub policy: crate::policy::Policy,
    /// Reservations recurring by configuration (read-only through the API).
    pub standing_reservations: Vec<crate::reservation::StandingReservation>,
    /// What one ordinary user may ask.
    pub limits: crate::limits::Limits,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            name: "Drover".into(),
            nodes: Vec::new(),
            execution_user: None,
            allow_root_jobs: false,
            kill_grace_seconds: 5,
            checkpoint_command: None,
            credentials: ConfiguredCredentials::default(),
            tick: Duration::from_millis(500),
            policy: crate::policy::Policy::default(),
            standing_reservations: Vec::new(),
            limits: crate::limits::Limits::default(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConfiguredCredentials {
    pub accounts: Vec<String>,
    pub classes: Vec<String>,
    pub groups: Vec<String>,
    pub qoses: Vec<String>,
    pub users: Vec<String>,
}

/// The kinds of credential of `/rest/credentials/<kind>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CredentialKind {
    Accounts,
    Classes,
    Groups,
    Qoses,
    Users,
}

impl CredentialKind {
    pub const ALL: [CredentialKind; 5] = [
        CredentialKind::Accounts,
        CredentialKind::Classes,
        CredentialKind::Groups,
        CredentialKind::Qoses,
        CredentialKind::Users,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CredentialKind::Accounts => "accounts",
            CredentialKind::Classes => "classes",
            CredentialKind::Groups => "groups",
            CredentialKind::Qoses => "qoses",
            CredentialKind::Users => "users",
        }
    }
}

/// What readers see.
pub(crate) struct Shared {
    jobs: RwLock<JobBook>,
    nodes: RwLock<Arc<Vec<Node>>>,
    reservations: RwLock<Arc<Vec<crate::reservation::Reservation>>>,
    containers: RwLock<Arc<Vec<crate::virtual_container::VirtualContainer>>>,
    vms: RwLock<Arc<Vec<crate::vm::Vm>>>,
    credentials: RwLock<BTreeMap<CredentialKind, BTreeSet<String>>>,
    name: String,
    /// The resource manager's name (`rmName`, `rmAccessList`).
    rm_name: String,
    clock: Arc<dyn Clock>,
    degraded: RwLock<Option<String>>,
}

/// A document the engine writes in the very transaction that stores a submitted job
/// (or array, or a reservation), with the new id as its `created` field: so that a caller's record of
/// the submission (an `Idempotency-Key`'s) and the job are durable together or not at
/// all. The engine knows nothing else of it.
#[derive(Debug, Clone)]
pub struct Receipt {
    pub collection: String,
    pub id: String,
    pub body: serde_json::Value,
}

impl Receipt {
    fn write(mut self, created: &str) -> drover_store::Write {
        self.body["created"] = serde_json::Value::from(created);
        drover_store::Write::Put {
            collection: self.collection,
            id: self.id,
            name: None,
            body: self.body.into(),
        }
    }
}

/// The engine's inbox.
pub(crate) enum Inbox {
    Submit {
        spec: Box<crate::job::JobSpec>,
        by: Requester,
        receipt: Option<Receipt>,
        reply: oneshot::Sender<Result<String, SchedError>>,
    },
    Reserve {
        request: Box<crate::request::ReservationRequest>,
        by: Requester,
        receipt: Option<Receipt>,
        reply: oneshot::Sender<Result<String, SchedError>>,
    },
    ChangeReservation {
        id: String,
        change: crate::request::ReservationChange,
        by: Requester,
        reply: oneshot::Sender<Result<Vec<String>, SchedError>>,
    },
    CreateContainer {
        request: Box<crate::request::ContainerRequest>,
        by: Requester,
        reply: oneshot::Sender<Result<String, SchedError>>,
    },
    ChangeContainer {
        id: String,
        change: Box<crate::request::ContainerChange>,
        by: Requester,
        reply: oneshot::Sender<Result<Vec<String>, SchedError>>,
    },
    SubmitArray {
        spec: Box<crate::job::JobSpec>,
        array: Box<crate::job::ArraySpec>,
        by: Requester,
        receipt: Option<Receipt>,
        reply: oneshot::Sender<Result<String, SchedError>>,
    },
    Modify {
        id: String,
        changes: Box<JobChanges>,
        by: Requester,
        reply: oneshot::Sender<Result<Vec<String>, SchedError>>,
    },
    Act {
        id: String,
        action: JobAction,
        by: Requester,
        reply: oneshot::Sender<Result<String, SchedError>>,
    },
    ModifyNode {
        id: String,
        changes: Box<NodeChanges>,
        by: Requester,
        reply: oneshot::Sender<Result<Vec<String>, SchedError>>,
    },
    ReportNodes {
        items: Vec<crate::request::NodeReportItem>,
        by: Requester,
        reply: oneshot::Sender<Result<crate::request::NodeReportOutcome, SchedError>>,
    },
    ReportExternalUse {
        report: crate::request::ExternalUse,
        by: Requester,
        reply: oneshot::Sender<Result<crate::request::ExternalUseOutcome, SchedError>>,
    },
    Vm {
        command: crate::vm::VmCommand,
        by: Requester,
        reply: oneshot::Sender<Result<VmAnswer, SchedError>>,
    },
    /// The VM host finished an operation.
    VmDone {
        vm: String,
        job: Option<String>,
        operation: crate::vm_host::VmOperation,
        outcome: crate::vm_host::Outcome,
    },
    /// A launcher's answer: the process of the job's launch `number`, or why not.
    Started {
        job_id: String,
        number: u64,
        outcome: Result<crate::job::ProcessRecord, String>,
    },
    /// The journal made these job starts durable: launch their processes.
    Launch(Vec<usize>),
    JournalFailed(String),
    Rm(RmEvent),
    Shutdown(oneshot::Sender<()>),
}

/// What a VM command answers: the system job doing the work, or what was changed.
#[derive(Debug, Clone, PartialEq)]
pub enum VmAnswer {
    Job(String),
    Said(Vec<String>),
}

/// What a handler holds: sends commands to the engine, reads the shared state.
#[derive(Clone)]
pub struct Scheduler {
    shared: Arc<Shared>,
    inbox: Sender<Inbox>,
}

/// Builds the resource manager, given where it must report events.
pub type MakeResourceManager = Box<dyn FnOnce(crate::rm::RmNotify) -> ResourceManagerResult>;
pub type ResourceManagerResult = Result<Arc<dyn ResourceManager>, String>;

/// Everything the engine works with besides its configuration.
pub struct EngineParts {
    pub store: Arc<dyn DocumentStore>,
    pub resource_manager: MakeResourceManager,
    pub clock: Arc<dyn Clock>,
    pub events: Arc<dyn EventSink>,
    /// Holds funds before a start and charges runs (`NoAccounting` when disabled).
    pub accountant: Arc<dyn crate::accountant::Accountant>,
    /// Makes the guests of VMs (`vm_host::NoVmHost` when there is no way to).
    pub vm_host: Arc<dyn crate::vm_host::VmHost>,
}

impl Scheduler {
    /// Recovers the state from the store and starts the engine and journal threads.
    /// Blocking (it reads the whole store): call it off the async runtime.
    pub fn start(config: SchedConfig, parts: EngineParts) -> Result<Scheduler, String> {
        core::Engine::start(config, parts)
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The name of the resource manager that runs the jobs (`local` on this machine).
    pub fn resource_manager_name(&self) -> &str {
        &self.shared.rm_name
    }

    pub fn now(&self) -> Seconds {
        self.shared.clock.now()
    }

    /// One job, as it is now, once its submission is durable (`JobBook::published`).
    pub fn job(&self, id: &str) -> Option<Arc<Job>> {
        self.shared.jobs.read().unwrap().published(id).cloned()
    }

    /// Every durable job, in submission order (a copy of the references, taken under a
    /// read lock).
    pub fn jobs(&self) -> Vec<Arc<Job>> {
        self.shared.jobs.read().unwrap().published_jobs().to_vec()
    }

    /// Reads the job book under its read lock. Readers see only its durable prefix
    /// (`JobBook::published_len` and the `published*` methods).
    pub fn with_jobs<R>(&self, read: impl FnOnce(&JobBook) -> R) -> R {
        read(&self.shared.jobs.read().unwrap())
    }

    pub fn nodes(&self) -> Arc<Vec<Node>> {
        self.shared.nodes.read().unwrap().clone()
    }

    /// Every reservation, oldest first.
    pub fn reservations(&self) -> Arc<Vec<crate::reservation::Reservation>> {
        self.shared.reservations.read().unwrap().clone()
    }

    /// Creates a reservation; answers its id.
    pub async fn reserve(
        &self,
        request: crate::request::ReservationRequest,
        by: Requester,
    ) -> Result<String, SchedError> {
        self.reserve_with_receipt(request, by, None).await
    }

    /// [`Scheduler::reserve`], writing `receipt` in the transaction that stores the
    /// reservation.
    pub async fn reserve_with_receipt(
        &self,
        request: crate::request::ReservationRequest,
        by: Requester,
        receipt: Option<Receipt>,
    ) -> Result<String, SchedError> {
        self.ask(|reply| Inbox::Reserve {
            request: Box::new(request),
            by,
            receipt,
            reply,
        })
        .await
    }

    pub async fn change_reservation(
        &self,
        id: &str,
        change: crate::request::ReservationChange,
        by: Requester,
    ) -> Result<Vec<String>, SchedError> {
        self.ask(|reply| Inbox::ChangeReservation {
            id: id.to_string(),
            change,
            by,
            reply,
        })
        .await
    }

    /// Every virtual container, by number.
    pub fn containers(&self) -> Arc<Vec<crate::virtual_container::VirtualContainer>> {
        self.shared.containers.read().unwrap().clone()
    }

    /// Creates a virtual container; answers its id.
    pub async fn create_container(
        &self,
        request: crate::request::ContainerRequest,
        by: Requester,
    ) -> Result<String, SchedError> {
        self.ask(|reply| Inbox::CreateContainer {
            request: Box::new(request),
            by,
            reply,
        })
        .await
    }

    pub async fn change_container(
        &self,
        id: &str,
        change: crate::request::ContainerChange,
        by: Requester,
    ) -> Result<Vec<String>, SchedError> {
        self.ask(|reply| Inbox::ChangeContainer {
            id: id.to_string(),
            change: Box::new(change),
            by,
            reply,
        })
        .await
    }

    /// Every VM, oldest first.
    pub fn vms(&self) -> Arc<Vec<crate::vm::Vm>> {
        self.shared.vms.read().unwrap().clone()
    }

    /// Creates, changes, migrates or destroys a VM.
    pub async fn vm(
        &self,
        command: crate::vm::VmCommand,
        by: Requester,
    ) -> Result<VmAnswer, SchedError> {
        self.ask(|reply| Inbox::Vm { command, by, reply }).await
    }

    pub fn credentials(&self, kind: CredentialKind) -> Vec<String> {
        self.shared
            .credentials
            .read()
            .unwrap()
            .get(&kind)
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Why the engine cannot take changes now (its journal failed), if it cannot.
    pub fn degraded(&self) -> Option<String> {
        self.shared.degraded.read().unwrap().clone()
    }

    pub async fn submit(
        &self,
        spec: crate::job::JobSpec,
        by: Requester,
    ) -> Result<String, SchedError> {
        self.submit_with_receipt(spec, by, None).await
    }

    /// [`Scheduler::submit`], writing `receipt` in the transaction that stores the job.
    pub async fn submit_with_receipt(
        &self,
        spec: crate::job::JobSpec,
        by: Requester,
        receipt: Option<Receipt>,
    ) -> Result<String, SchedError> {
        self.ask(|reply| Inbox::Submit {
            spec: Box::new(spec),
            by,
            receipt,
            reply,
        })
        .await
    }

    /// Submits a job array: `spec` is every sub-job's prototype. Answers the master's id.
    pub async fn submit_array(
        &self,
        spec: crate::job::JobSpec,
        array: crate::job::ArraySpec,
        by: Requester,
    ) -> Result<String, SchedError> {
        self.submit_array_with_receipt(spec, array, by, None).await
    }

    /// [`Scheduler::submit_array`], writing `receipt` in the transaction that stores
    /// the array.
    pub async fn submit_array_with_receipt(
        &self,
        spec: crate::job::JobSpec,
        array: crate::job::ArraySpec,
        by: Requester,
        receipt: Option<Receipt>,
    ) -> Result<String, SchedError> {
        self.ask(|reply| Inbox::SubmitArray {
            spec: Box::new(spec),
            array: Box::new(array),
            by,
            receipt,
            reply,
        })
        .await
    }

    pub async fn modify(
        &self,
        id: &str,
        changes: JobChanges,
        by: Requester,
    ) -> Result<Vec<String>, SchedError> {
        self.ask(|reply| Inbox::Modify {
            id: id.to_string(),
            changes: Box::new(changes),
            by,
            reply,
        })
        .await
    }

    pub async fn act(
        &self,
        id: &str,
        action: JobAction,
        by: Requester,
    ) -> Result<String, SchedError> {
        self.ask(|reply| Inbox::Act {
            id: id.to_string(),
            action,
            by,
            reply,
        })
        .await
    }

    pub async fn modify_node(
        &self,
        id: &str,
        changes: NodeChanges,
        by: Requester,
    ) -> Result<Vec<String>, SchedError> {
        self.ask(|reply| Inbox::ModifyNode {
            id: id.to_string(),
            changes: Box::new(changes),
            by,
            reply,
        })
        .await
    }

    /// Applies a resource-manager plugin's report of nodes (descriptions, states,
    /// messages, metrics), adding the nodes it reports that are not known yet.
    pub async fn report_nodes(
        &self,
        items: Vec<crate::request::NodeReportItem>,
        by: Requester,
    ) -> Result<crate::request::NodeReportOutcome, SchedError> {
        self.ask(|reply| Inbox::ReportNodes { items, by, reply })
            .await
    }

    /// Sets the processors work outside this service uses on the nodes a plugin's
    /// report names, and brings its jobs' records up to date.
    pub async fn report_external_use(
        &self,
        report: crate::request::ExternalUse,
        by: Requester,
    ) -> Result<crate::request::ExternalUseOutcome, SchedError> {
        self.ask(|reply| Inbox::ReportExternalUse { report, by, reply })
            .await
    }

    /// Stops the engine once the journal has written everything; running jobs keep
    /// running and are adopted again by the next start.
    pub async fn shutdown(&self) {
        let (done, finished) = oneshot::channel();
        if self.inbox.send(Inbox::Shutdown(done)).is_ok() {
            let _ = finished.await;
        }
    }

    /// Sends the engine the message `message` makes of a reply channel, and waits for
    /// the answer.
    async fn ask<T>(
        &self,
        message: impl FnOnce(oneshot::Sender<Result<T, SchedError>>) -> Inbox,
    ) -> Result<T, SchedError> {
        let stopped = || SchedError::Unavailable("the scheduler is not running".into());
        let (reply, answer) = oneshot::channel();
        self.inbox.send(message(reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}
