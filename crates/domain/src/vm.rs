//! Virtual machines (spec 2.9): guests that take their processors and memory from a
//! host node. The engine owns them (it places them and holds their resources on their
//! node, so jobs cannot use them); a provisioner makes the guest. Creating, moving and
//! destroying one is the work of a **system job** (spec 2.13, the decisions page): a job
//! made from the `genericVM-setup`, `genericVM-migrate` or `genericVM-destroy` template,
//! whose id is the `jobId` answered and which is a pending action while it runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;
use crate::node::GenericEvent;

/// The longest VM id: it names a directory and a process.
pub const MAX_ID: usize = 64;

/// Why `id` cannot be a VM id, if it cannot: only ASCII letters, digits, `.`, `_` and
/// `-`, not starting with a dot, 1 to [`MAX_ID`] long (it becomes a path component and
/// a process name).
pub fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        return Some("it is empty");
    }
    if id.len() > MAX_ID {
        return Some("it is longer than 64 characters");
    }
    if id.starts_with('.') {
        return Some("it starts with a dot");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Some("only letters, digits, '.', '_' and '-' are allowed");
    }
    None
}

/// Where a VM is in its life. The wire `state` and `substate` are made from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VmPhase {
    /// No node has room for it yet: its setup job waits (a pending action) and it holds
    /// nothing; it is made once a node has room.
    Waiting,
    /// Its setup job is making the guest.
    Creating,
    /// The guest runs.
    Running,
    /// Powering on or off (`powerState` changed).
    PoweringOn,
    PoweringOff,
    /// Powered off: it keeps its host's resources and can be powered on.
    Off,
    /// Its migrate job is moving the guest.
    Migrating,
    /// Its destroy job is ending the guest; the record goes when it is done.
    Destroying,
    /// Its setup failed (the setup job says why); it can only be destroyed.
    Failed,
    /// The guest was gone when the service looked for it (after a restart).
    Lost,
}

impl VmPhase {
    /// The wire `state` (upper case, the node-state vocabulary of the spec's samples).
    pub fn state(self) -> &'static str {
        match self {
            VmPhase::Waiting | VmPhase::Creating => "UNKNOWN",
            VmPhase::Running | VmPhase::Migrating | VmPhase::PoweringOff => "BUSY",
            VmPhase::PoweringOn | VmPhase::Destroying => "BUSY",
            VmPhase::Off | VmPhase::Failed | VmPhase::Lost => "DOWN",
        }
    }

    /// The wire `substate`: what it is doing or why it is down.
    pub fn substate(self) -> &'static str {
        match self {
            VmPhase::Waiting => "waiting",
            VmPhase::Creating => "creating",
            VmPhase::Running => "running",
            VmPhase::PoweringOn => "poweringOn",
            VmPhase::PoweringOff => "poweringOff",
            VmPhase::Off => "off",
            VmPhase::Migrating => "migrating",
            VmPhase::Destroying => "destroying",
            VmPhase::Failed => "failed",
            VmPhase::Lost => "lost",
        }
    }

    /// Whether an operation is under way (or waits for room): another one asked for
    /// meanwhile is queued until it is done.
    pub fn busy(self) -> bool {
        matches!(
            self,
            VmPhase::Waiting
                | VmPhase::Creating
                | VmPhase::PoweringOn
                | VmPhase::PoweringOff
                | VmPhase::Migrating
                | VmPhase::Destroying
        )
    }
}

/// A VM as the engine keeps it (its stored form, collection `vms`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vm {
    pub id: String,
    /// Who asked for it: what an ordinary user may see and change is their own.
    pub owner: String,
    /// The host node.
    pub node: String,
    pub processors: u32,
    /// Megabytes.
    pub memory: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<u64>,
    /// The image it boots (`os`), by name.
    pub image: String,
    pub phase: VmPhase,
    /// A state an administrator set (`PUT state`); shown instead of the phase's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_set: Option<String>,
    /// The power asked for last (`powerState`).
    pub power_on: bool,
    pub created: Seconds,
    /// When its guest first ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Seconds>,
    pub last_update: Seconds,
    pub phase_since: Seconds,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_phase: Option<VmPhase>,
    /// Seconds after `created` when it is destroyed (`requestedTimeToLive`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_live: Option<i64>,
    #[serde(default)]
    pub migration_count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_migration: Option<Seconds>,
    /// The node a migration under way moves it to (it holds resources there too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The job it was made for (`vmUsagePolicy` CREATEVM or REQUIREVM): the job holds
    /// the host's resources, runs in it, and its end destroys it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_job: Option<String>,
    /// The setup job that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_job: Option<String>,
    /// The system job working on it now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_job: Option<String>,
    /// An operation asked for while another was under way, or a migration waiting for
    /// room on its target: its system job waits (a pending action) until it can start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedOperation>,
    /// The last system job that failed on it (a pending action with `failureDetails`
    /// while the VM exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The `storage` spec as given, and the extra disks it asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<StorageDisk>,
    #[serde(default)]
    pub sovereign: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub generic_metrics: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generic_events: Vec<GenericEvent>,
    /// The account it is charged to, when named (a service's); else its owner's first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// A service's VM: charged its service's rate too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub for_service: bool,
    /// While it is charged (it holds resources and funds are held for it): the time up
    /// to which its holding was last charged. `None`: not charged (waiting, made for a
    /// job, failed, lost, or powered off for want of funds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charged_through: Option<Seconds>,
}

impl Vm {
    /// A VM being made now, on `node`, with nothing but what it needs said.
    pub fn new(id: String, owner: String, node: String, size: (u32, u64), now: Seconds) -> Vm {
        Vm {
            id,
            owner,
            node,
            processors: size.0,
            memory: size.1,
            disk: None,
            image: String::new(),
            phase: VmPhase::Creating,
            state_set: None,
            power_on: true,
            created: now,
            started: None,
            last_update: now,
            phase_since: now,
            last_phase: None,
            time_to_live: None,
            migration_count: 0,
            last_migration: None,
            target: None,
            for_job: None,
            setup_job: None,
            active_job: None,
            queued: None,
            failed_job: None,
            description: None,
            template: None,
            storage: None,
            disks: Vec::new(),
            sovereign: false,
            triggers: Vec::new(),
            variables: BTreeMap::new(),
            generic_metrics: BTreeMap::new(),
            generic_events: Vec::new(),
            account: None,
            for_service: false,
            charged_through: None,
        }
    }

    pub fn belongs_to(&self, user: &str) -> bool {
        self.owner == user
    }

    /// When its time to live runs out, if it has one.
    pub fn expires(&self) -> Option<Seconds> {
        self.time_to_live
            .filter(|ttl| *ttl > 0)
            .map(|ttl| self.created.saturating_add(ttl))
    }

    pub fn state(&self) -> &str {
        self.state_set
            .as_deref()
            .unwrap_or_else(|| self.phase.state())
    }

    /// Applies the fields of `change` that only change the record (`state`, variables,
    /// triggers, generic metrics and events; power and `os` are the engine's); answers
    /// the wire names of what it changed. The latest generic events are kept (as many
    /// as a job keeps messages).
    pub fn apply(&mut self, change: VmChange, now: Seconds) -> Vec<&'static str> {
        let mut said = Vec::new();
        if let Some(state) = change.state {
            self.state_set = Some(state.to_ascii_uppercase());
            said.push("state");
        }
        if let Some(variables) = change.variables {
            self.variables = variables;
            said.push("variables");
        }
        if let Some(triggers) = change.triggers {
            self.triggers = triggers;
            said.push("triggers");
        }
        if !change.generic_metrics.is_empty() {
            self.generic_metrics.extend(change.generic_metrics);
            said.push("genericMetrics");
        }
        if !change.generic_events.is_empty() {
            for (name, message) in change.generic_events {
                self.generic_events.push(GenericEvent {
                    name,
                    message,
                    created: now,
                });
            }
            let extra = self
                .generic_events
                .len()
                .saturating_sub(crate::limits::MAX_JOB_MESSAGES);
            self.generic_events.drain(..extra);
            said.push("genericEvents");
        }
        self.last_update = now;
        said
    }

    /// Moves to `phase` at `now`, remembering the phase it leaves.
    pub fn enter(&mut self, phase: VmPhase, now: Seconds) {
        if phase != self.phase {
            self.last_phase = Some(self.phase);
            self.phase = phase;
            self.phase_since = now;
        }
        self.last_update = now;
    }
}

/// An operation on a VM that waits for the one under way (or for room), with its
/// system job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum QueuedOperation {
    Destroy {
        job: String,
    },
    /// To `to`, or (`None`) to the first other node with room.
    Migrate {
        job: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<String>,
    },
}

impl QueuedOperation {
    /// Its system job's id.
    pub fn job(&self) -> &str {
        match self {
            QueuedOperation::Destroy { job } | QueuedOperation::Migrate { job, .. } => job,
        }
    }
}

/// The start of the ids of VMs made for jobs, which no request may choose.
pub const JOB_VM_PREFIX: &str = "job-";
/// The prefix of the VMs of services (`svc-<service id>`): no request may name one.
pub const SERVICE_VM_PREFIX: &str = "svc-";

/// The id of the VM made for job `job_id`: `job-` and the job's id, with what cannot be
/// in a VM id (an array sub-job's brackets) made `-`.
pub fn id_for_job(job_id: &str) -> String {
    let base: String = job_id
        .chars()
        .take(MAX_ID - JOB_VM_PREFIX.len())
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{JOB_VM_PREFIX}{base}")
}

/// Whether a job's `vmUsagePolicy` asks to run in an existing VM of its user
/// (`REQUIREVM`): it waits for a running one that fits, instead of nodes.
pub fn requires_vm(policy: Option<&str>) -> bool {
    policy.is_some_and(|p| p.eq_ignore_ascii_case("REQUIREVM"))
}

/// Whether a job's `vmUsagePolicy` asks to run in a VM (`CREATEVM`, `REQUIREVM`).
pub fn wants_vm(policy: Option<&str>) -> bool {
    policy
        .is_some_and(|p| p.eq_ignore_ascii_case("CREATEVM") || p.eq_ignore_ascii_case("REQUIREVM"))
}

/// One extra disk of a VM, from its `storage` spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageDisk {
    /// The storage class named (`data` in `data:10`), or `disk<n>`.
    pub class: String,
    pub size_gb: u64,
}

/// The most extra disks one VM may have.
pub const MAX_STORAGE_DISKS: usize = 8;

/// Reads a `storage` spec: entries separated by `,`, each `[<class>:]<size>` with the
/// size in GB (a `G` or `GB` suffix allowed), the class 1 to 32 letters, digits, `_` or
/// `-`; an `@<mount point>` after an entry is the guest's business and ignored.
pub fn parse_storage(spec: &str) -> Result<Vec<StorageDisk>, String> {
    let mut disks = Vec::new();
    for (n, entry) in spec.split(',').map(str::trim).enumerate() {
        if entry.is_empty() {
            continue;
        }
        let entry = entry.split_once('@').map_or(entry, |(disk, _)| disk).trim();
        let (class, size) = match entry.split_once(':') {
            Some((class, size)) => (class.trim().to_string(), size.trim()),
            None => (format!("disk{n}"), entry),
        };
        if class.is_empty()
            || class.len() > 32
            || !class
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
        {
            return Err(format!(
                "'{class}' is not a storage class (1 to 32 letters, digits, '_' or '-')"
            ));
        }
        let digits = size
            .trim_end_matches(['B', 'b'])
            .trim_end_matches(['G', 'g'])
            .trim();
        let size_gb = digits
            .parse::<u64>()
            .ok()
            .filter(|s| (1..=65_536).contains(s))
            .ok_or_else(|| format!("'{size}' is not a size in GB (1 to 65536) in '{entry}'"))?;
        disks.push(StorageDisk { class, size_gb });
    }
    if disks.len() > MAX_STORAGE_DISKS {
        return Err(format!(
            "{} disks asked for; a VM may have at most {MAX_STORAGE_DISKS}",
            disks.len()
        ));
    }
    Ok(disks)
}

/// The work of a system job on a VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum SystemTask {
    VmCreate {
        vm: String,
    },
    VmMigrate {
        vm: String,
        from: String,
        to: String,
    },
    VmDestroy {
        vm: String,
    },
}

impl SystemTask {
    /// The job template the job is made from (its pending-action type follows it).
    pub fn template(&self) -> &'static str {
        match self {
            SystemTask::VmCreate { .. } => crate::template::VM_SETUP,
            SystemTask::VmMigrate { .. } => crate::template::VM_MIGRATE,
            SystemTask::VmDestroy { .. } => crate::template::VM_DESTROY,
        }
    }

    pub fn vm(&self) -> &str {
        match self {
            SystemTask::VmCreate { vm }
            | SystemTask::VmMigrate { vm, .. }
            | SystemTask::VmDestroy { vm } => vm,
        }
    }
}

/// A VM to create (spec 2.9, create).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VmRequest {
    pub id: Option<String>,
    pub processors: Option<u32>,
    pub memory: Option<u64>,
    pub disk: Option<u64>,
    /// The host; `None` lets the scheduler choose one with room.
    pub node: Option<String>,
    /// The image by name (the default guest image's when `None`, chosen by the caller).
    pub image: String,
    pub sovereign: bool,
    pub storage: Option<String>,
    pub template: Option<String>,
    pub time_to_live: Option<i64>,
    pub triggers: Vec<serde_json::Value>,
    pub variables: BTreeMap<String, String>,
    pub description: Option<String>,
    /// A service's VM, which the service ends: it gets no default time to live.
    pub for_service: bool,
    /// The account to charge (a service's); never from a VM's own body.
    pub account: Option<String>,
}

/// A change to a VM (spec 2.9, modify); `None` leaves a field alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VmChange {
    pub generic_events: Vec<(String, String)>,
    pub generic_metrics: BTreeMap<String, f64>,
    pub os: Option<String>,
    pub power_on: Option<bool>,
    pub state: Option<String>,
    pub triggers: Option<Vec<serde_json::Value>>,
    pub variables: Option<BTreeMap<String, String>>,
}

/// What the API asks of a VM.
#[derive(Debug, Clone, PartialEq)]
pub enum VmCommand {
    Create(Box<VmRequest>),
    Modify(String, Box<VmChange>),
    /// To a node, or wherever the scheduler finds room (`None`, the wire's `ANY`).
    Migrate(String, Option<String>),
    Destroy(String),
}

/// The longest time to live a VM may ask for: ten years.
pub const MAX_TIME_TO_LIVE: i64 = 10 * 366 * 86_400;

/// The defaults of a VM created without sizes.
pub const DEFAULT_PROCESSORS: u32 = 1;
pub const DEFAULT_MEMORY_MB: u64 = 128;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_specs_name_classes_and_sizes() {
        let disks = parse_storage("data:10, scratch:2G@/scratch,5").unwrap();
        let said: Vec<(&str, u64)> = disks
            .iter()
            .map(|d| (d.class.as_str(), d.size_gb))
            .collect();
        assert_eq!(said, [("data", 10), ("scratch", 2), ("disk2", 5)]);
        assert_eq!(parse_storage("").unwrap(), []);
        for bad in [
            "data:0",
            "data:-1",
            "data:x",
            "a b:1",
            "../x:1",
            "1,1,1,1,1,1,1,1,1",
        ] {
            assert!(parse_storage(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids_are_safe_path_components() {
        for good in ["vm-1", "a", "web_01.prod", &"x".repeat(MAX_ID)] {
            assert_eq!(id_problem(good), None, "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "../etc",
            "a b",
            "a\0b",
            "é",
            &"x".repeat(MAX_ID + 1),
        ] {
            assert!(id_problem(bad).is_some(), "{bad:?}");
        }
    }
}
