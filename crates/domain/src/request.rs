//! What callers ask the engine to do, and how the engine refuses.

use std::collections::BTreeMap;

use crate::clock::Seconds;
use crate::job::Hold;
use crate::node::NodeState;

/// Who is asking: the effective API user (after `proxy-user`) and whether they act
/// over everybody's objects (their permission's scope is `ALL`): then they are not held
/// to an ordinary user's limits and see and change others' objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    pub user: String,
    pub proxy_user: Option<String>,
    pub over_all: bool,
    /// Whether the one asking may name another user than `user` as an owner: with
    /// `over_all`, or when an administrator (scope `ALL`) acts for `user` through
    /// `proxy-user` (spec 4.9: the creator from `proxy-user`, the owner from the body).
    pub may_name_owners: bool,
}

/// Changes to a queued or running job (the modify bodies of spec 4.4 and 4.5). `None`
/// leaves a field alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobChanges {
    pub custom_name: Option<String>,
    pub account: Option<String>,
    pub qos_requested: Option<String>,
    pub job_class: Option<String>,
    pub earliest_start: Option<Seconds>,
    pub deadline: Option<Seconds>,
    pub flags: Option<Vec<String>>,
    /// The holds the job should have (replacing those the caller may change).
    pub holds: Option<Vec<Hold>>,
    /// New messages; old ones are kept.
    pub messages: Vec<String>,
    pub duration: Option<i64>,
    pub partition: Option<String>,
    pub partition_access_list: Option<Vec<String>>,
    pub reservation: Option<String>,
    pub trigger: Option<String>,
    pub user_priority: Option<i64>,
    pub system_priority: Option<i64>,
    /// Variables to set (`Some`) or remove (`None`).
    pub variables: BTreeMap<String, Option<String>>,
}

impl JobChanges {
    /// Whether these change what the job asks (its spec), not only its messages, holds
    /// or system priority.
    pub fn changes_request(&self) -> bool {
        let JobChanges {
            custom_name,
            account,
            qos_requested,
            job_class,
            earliest_start,
            deadline,
            flags,
            holds: _,
            messages: _,
            duration,
            partition,
            partition_access_list,
            reservation,
            trigger,
            user_priority,
            system_priority: _,
            variables,
        } = self;
        custom_name.is_some()
            || account.is_some()
            || qos_requested.is_some()
            || job_class.is_some()
            || earliest_start.is_some()
            || deadline.is_some()
            || flags.is_some()
            || duration.is_some()
            || partition.is_some()
            || partition_access_list.is_some()
            || reservation.is_some()
            || trigger.is_some()
            || user_priority.is_some()
            || !variables.is_empty()
    }
}

/// The job actions of `PUT /rest/jobs/<id>/<action>` and `DELETE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobAction {
    Hold(Vec<Hold>),
    /// Release these holds; empty means all.
    Unhold(Vec<Hold>),
    Suspend,
    Resume,
    Cancel,
    Requeue,
    Execute,
    Checkpoint,
}

impl JobAction {
    pub fn name(&self) -> &'static str {
        match self {
            JobAction::Hold(_) => "hold",
            JobAction::Unhold(_) => "unhold",
            JobAction::Suspend => "suspend",
            JobAction::Resume => "resume",
            JobAction::Cancel => "cancel",
            JobAction::Requeue => "requeue",
            JobAction::Execute => "execute",
            JobAction::Checkpoint => "checkpoint",
        }
    }
}

/// Changes to a node (`PUT /rest/nodes/<id>`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeChanges {
    pub state: Option<NodeState>,
    pub power_off: Option<bool>,
    pub os: Option<String>,
    pub partition: Option<String>,
    pub messages: Vec<String>,
    pub generic_events: Vec<(String, String)>,
    pub generic_metrics: BTreeMap<String, f64>,
    pub variables: BTreeMap<String, Option<String>>,
}

/// One node of a resource-manager plugin's report: what it says of the node's
/// description, and the state, messages and metrics to set like a `PUT` would.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeReportItem {
    pub node: crate::node::ReportedNode,
    pub changes: NodeChanges,
}

/// What a resource-manager plugin reported of work outside this service: the processors
/// it uses on each node named (nodes it named before and not now use none any more).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExternalUse {
    /// Who reported it (`plugin/<id>`).
    pub reporter: String,
    pub processors: std::collections::BTreeMap<String, u32>,
    /// The jobs of that work, shown as jobs here (every one the report names: one it
    /// named before and not now has ended).
    pub jobs: Vec<ReportedJob>,
}

/// A job of work outside this service, as a plugin reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportedJob {
    /// Its id there.
    pub id: String,
    /// The system user it runs as there, if the report says.
    pub user: Option<String>,
    pub state: crate::job::JobState,
    /// The nodes it holds and the processors it holds on each.
    pub placement: Vec<crate::job::Allocation>,
    /// How it ended, once it has and the report says.
    pub completion_code: Option<i32>,
}

/// What a report of outside work did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExternalUseOutcome {
    /// The node names it gave that are no nodes here.
    pub unknown: Vec<String>,
    /// The jobs it added to the book (their ids here).
    pub added: Vec<String>,
    /// How many jobs it ended (reported ended, or no longer reported).
    pub ended: usize,
}

/// What a report of nodes did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeReportOutcome {
    /// Known nodes whose description or overrides changed.
    pub updated: usize,
    /// Nodes the report added.
    pub added: Vec<String>,
    /// Nodes it reported as they were.
    pub unchanged: usize,
    /// `<id>: <why>` for each node the report could not apply.
    pub refused: Vec<String>,
    /// Nodes its reporter described before and no longer names: down from now on.
    pub down: Vec<String>,
}

/// Why the engine refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchedError {
    /// The request is wrong (400); messages name the field.
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    /// The request is fine but the object's state does not allow it (400).
    #[error("{}", .0.join("; "))]
    Refused(Vec<String>),
    #[error("{0}")]
    NotFound(String),
    /// The caller may not do this to this object (403).
    #[error("{0}")]
    Forbidden(String),
    /// The journal cannot be written; nothing was changed (503).
    #[error("{0}")]
    Unavailable(String),
    /// The request conflicts with what exists (409), e.g. a dedicated reservation.
    #[error("{}", .0.join("; "))]
    Conflict(Vec<String>),
    /// The journal failed while committing the change in a way that may have left it
    /// stored, and could not settle which in time (503): the client must look before
    /// trying again.
    #[error("{0}")]
    OutcomeUnknown(String),
}

impl SchedError {
    pub fn invalid(summary: impl Into<String>, reason: impl Into<String>) -> SchedError {
        SchedError::Invalid(vec![summary.into(), reason.into()])
    }

    pub fn refused(summary: impl Into<String>, reason: impl Into<String>) -> SchedError {
        SchedError::Refused(vec![summary.into(), reason.into()])
    }
}

/// The first message of a refusal: what was not done. Clients see these words exactly
/// (tests pin them); refusals take their summary from here.
pub mod summary {
    pub const JOB_NOT_SUBMITTED: &str = "The job was not submitted";
    pub const ARRAY_NOT_SUBMITTED: &str = "The job array was not submitted";
    pub const JOB_NOT_MODIFIED: &str = "The job was not modified";
    pub const NODE_NOT_MODIFIED: &str = "The node was not modified";
    pub const RESERVATION_NOT_CREATED: &str = "The reservation was not created";
    pub const CONTAINER_NOT_CREATED: &str = "The virtual container was not created";

    pub fn job_not_modified(id: &str) -> String {
        format!("Job {id} was not modified")
    }

    /// A job action (`hold`, `cancel`, …) was refused.
    pub fn job_action_refused(action: &str, id: &str) -> String {
        format!("Cannot {action} job {id}")
    }

    pub fn node_not_modified(id: &str) -> String {
        format!("Node {id} was not modified")
    }

    pub fn reservation_not_changed(id: &str) -> String {
        format!("The reservation {id} was not changed")
    }

    pub fn reservation_rules_not_changed(id: &str) -> String {
        format!("The ACL rules of reservation {id} were not changed")
    }

    pub fn container_not_changed(id: &str) -> String {
        format!("The virtual container {id} was not changed")
    }

    pub const VM_NOT_CREATED: &str = "The VM was not created";

    pub fn vm_not_changed(id: &str) -> String {
        format!("The VM {id} was not changed")
    }

    pub fn vm_not_migrated(id: &str) -> String {
        format!("The VM {id} was not migrated")
    }

    pub fn vm_not_destroyed(id: &str) -> String {
        format!("The VM {id} was not destroyed")
    }
}

/// A reservation to create (spec 2.7, create).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReservationRequest {
    pub start: Option<Seconds>,
    pub end: Option<Seconds>,
    pub duration: Option<i64>,
    /// Node names (`hostListExpression`, comma- or space-separated): whole nodes.
    pub hosts: Vec<String>,
    /// Processors (one per task) to find on suitable nodes, without `hosts`.
    pub task_count: Option<u32>,
    pub features: Vec<String>,
    pub architecture: Option<String>,
    pub os: Option<String>,
    /// Megabytes per task.
    pub memory: Option<u64>,
    pub partition: Option<String>,
    pub flags: Vec<String>,
    pub acl: Vec<crate::reservation::AclRule>,
    pub owner: Option<crate::reservation::Owner>,
    pub id_prefix: Option<String>,
    pub variables: BTreeMap<String, String>,
    /// Fields kept and shown as given.
    pub given: serde_json::Map<String, serde_json::Value>,
}

/// How `PUT /rest/reservations/<id>` changes variables (`change-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeMode {
    Add,
    Remove,
    Set,
}

/// Changes to a reservation.
#[derive(Debug, Clone, PartialEq)]
pub enum ReservationChange {
    Variables(ChangeMode, BTreeMap<String, String>),
    /// Adds rules, replacing those with the same type and value.
    PutRules(Vec<crate::reservation::AclRule>),
    /// Removes the rule `<type>:<value>`.
    DeleteRule(String),
    /// Releases the reservation.
    Delete,
}

/// A virtual container to create.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerRequest {
    pub description: Option<String>,
    pub owner: Option<crate::reservation::Owner>,
    /// Who it records as its creator (decided by the caller's proxy rules).
    pub creator: String,
}

/// Changes to a virtual container.
#[derive(Debug, Clone, PartialEq)]
pub enum ContainerChange {
    Add(crate::virtual_container::Members),
    Remove(crate::virtual_container::Members),
    /// The container's own attributes; `None` leaves one alone.
    Set {
        description: Option<String>,
        flags: Option<Vec<String>>,
        owner: Option<crate::reservation::Owner>,
        variables: Option<BTreeMap<String, String>>,
    },
    PutRules(Vec<crate::reservation::AclRule>),
    DeleteRule(String),
    Delete,
}
