//! Logical nodes: the configured description of each (or one node describing this
//! machine), what an administrator changed, and what the jobs use.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;

/// A node as configured (`[[nodes]]`). Sizes are in megabytes; absent means unknown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    pub id: String,
    pub processors: u32,
    #[serde(default)]
    pub memory: Option<u64>,
    #[serde(default)]
    pub disk: Option<u64>,
    #[serde(default)]
    pub swap: Option<u64>,
    #[serde(default)]
    pub features: Vec<String>,
    #[serde(default)]
    pub partition: Option<String>,
    #[serde(default)]
    pub architecture: Option<String>,
    #[serde(default)]
    pub os: Option<String>,
    #[serde(default)]
    pub generic_resources: BTreeMap<String, f64>,
    #[serde(default)]
    pub rack: Option<i64>,
    #[serde(default)]
    pub slot: Option<i64>,
}

impl NodeConfig {
    /// A node of `processors` processors and nothing else known.
    pub fn new(id: &str, processors: u32) -> NodeConfig {
        NodeConfig {
            id: id.to_string(),
            processors,
            memory: None,
            disk: None,
            swap: None,
            features: Vec::new(),
            partition: None,
            architecture: None,
            os: None,
            generic_resources: BTreeMap::new(),
            rack: None,
            slot: None,
        }
    }
}

/// What a resource-manager plugin (the Native type's `getNodes`) reported of a node's
/// description, kept in the `reported_nodes` collection. It is laid over the configured
/// node of that id, or describes a node the configuration does not have.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReportedNode {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processors: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Who reported it (a plugin id, or the resource manager's name).
    pub reporter: String,
}

impl ReportedNode {
    /// Whether the report says anything of the node's description.
    pub fn describes(&self) -> bool {
        self.processors.is_some()
            || self.memory.is_some()
            || self.disk.is_some()
            || self.architecture.is_some()
            || self.features.is_some()
            || self.partition.is_some()
    }

    /// Lays the report over `config`; answers whether anything changed.
    pub fn apply_to(&self, config: &mut NodeConfig) -> bool {
        let before = config.clone();
        if let Some(processors) = self.processors {
            config.processors = processors;
        }
        if self.memory.is_some() {
            config.memory = self.memory;
        }
        if self.disk.is_some() {
            config.disk = self.disk;
        }
        if self.architecture.is_some() {
            config.architecture = self.architecture.clone();
        }
        if let Some(features) = &self.features {
            config.features = features.clone();
        }
        if self.partition.is_some() {
            config.partition = self.partition.clone();
        }
        *config != before
    }

    /// A node the configuration does not have, described by this report alone.
    pub fn new_config(&self) -> Result<NodeConfig, String> {
        let processors = self
            .processors
            .ok_or("a node that is not configured needs CPROC (its processors) to be added")?;
        let mut config = NodeConfig::new(&self.id, processors);
        self.apply_to(&mut config);
        Ok(config)
    }
}

/// Node states (decisions.md). Parsing is case-insensitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    Idle,
    Busy,
    Running,
    Down,
    Drained,
    Draining,
    Flush,
    Reserved,
    Unknown,
}

impl NodeState {
    pub const ALL: [NodeState; 9] = [
        NodeState::Idle,
        NodeState::Busy,
        NodeState::Running,
        NodeState::Down,
        NodeState::Drained,
        NodeState::Draining,
        NodeState::Flush,
        NodeState::Reserved,
        NodeState::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Idle => "Idle",
            NodeState::Busy => "Busy",
            NodeState::Running => "Running",
            NodeState::Down => "Down",
            NodeState::Drained => "Drained",
            NodeState::Draining => "Draining",
            NodeState::Flush => "Flush",
            NodeState::Reserved => "Reserved",
            NodeState::Unknown => "Unknown",
        }
    }

    pub fn parse(text: &str) -> Option<NodeState> {
        NodeState::ALL
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// The states that follow the node's load rather than override it.
    pub fn follows_load(self) -> bool {
        matches!(self, NodeState::Idle | NodeState::Running)
    }
}

/// What administrators changed on a node; journaled in the `nodes` collection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeOverrides {
    /// A state set by an administrator (Down, Drained, Busy...); `None` follows the load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<NodeState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_off: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<NodeMessage>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub generic_events: Vec<GenericEvent>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub generic_metrics: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, String>,
    pub version: u64,
    pub last_update: Seconds,
    pub state_updated: Seconds,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeMessage {
    pub text: String,
    pub created: Seconds,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenericEvent {
    pub name: String,
    pub message: String,
    pub created: Seconds,
}

/// A node as the engine sees it now.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub index: usize,
    pub config: NodeConfig,
    pub overrides: NodeOverrides,
    pub used_processors: u32,
    pub used_memory: u64,
    /// Megabytes of disk the VMs here took (jobs' disk is not counted).
    pub used_disk: u64,
    /// Jobs running here, in start order.
    pub jobs: Vec<String>,
    /// VMs holding processors and memory here (jobs cannot use them).
    pub vms: Vec<String>,
    /// Processors that work outside this service uses, as a resource-manager plugin
    /// reported it (the Native type's `getJobs`); `None` when nothing reported any.
    pub external_processors: Option<u32>,
    /// What the resource manager says of it (Slurm: `Down` or `Drained`), when it
    /// takes no work there; not stored: read again from the resource manager.
    pub rm_state: Option<NodeState>,
    /// Why, as the resource manager says.
    pub rm_reason: Option<String>,
}

impl Node {
    pub fn new(index: usize, config: NodeConfig) -> Node {
        Node {
            index,
            config,
            overrides: NodeOverrides::default(),
            used_processors: 0,
            used_memory: 0,
            used_disk: 0,
            jobs: Vec::new(),
            vms: Vec::new(),
            external_processors: None,
            rm_state: None,
            rm_reason: None,
        }
    }

    pub fn id(&self) -> &str {
        &self.config.id
    }

    pub fn powered_on(&self) -> bool {
        self.overrides.power_off != Some(true)
    }

    /// The state reported: an administrator's state wins (a drained node with jobs
    /// still running is Draining), then the resource manager's; otherwise the load
    /// decides.
    pub fn state(&self) -> NodeState {
        let drained = |state| match state {
            NodeState::Drained | NodeState::Draining if !self.jobs.is_empty() => {
                Some(NodeState::Draining)
            }
            NodeState::Draining => Some(NodeState::Drained),
            state if !state.follows_load() => Some(state),
            _ => None,
        };
        let overridden = self.overrides.state.and_then(drained);
        match overridden.or_else(|| self.rm_state.and_then(drained)) {
            Some(state) => state,
            None if !self.powered_on() => NodeState::Down,
            _ if self.jobs.is_empty() && self.vms.is_empty() && self.external() == 0 => {
                NodeState::Idle
            }
            _ if self.used_processors + self.external() >= self.config.processors => {
                NodeState::Busy
            }
            _ => NodeState::Running,
        }
    }

    /// Whether new jobs may be placed here at all.
    pub fn accepts_jobs(&self) -> bool {
        self.powered_on()
            && self.overrides.state.is_none_or(|s| s.follows_load())
            && self.rm_state.is_none_or(|s| s.follows_load())
    }

    pub fn free_processors(&self) -> u32 {
        self.config
            .processors
            .saturating_sub(self.used_processors.saturating_add(self.external()))
    }

    /// Processors work outside this service uses here (0 when unknown).
    pub fn external(&self) -> u32 {
        self.external_processors.unwrap_or(0)
    }

    /// Free memory in megabytes, if the node's memory is known.
    pub fn free_memory(&self) -> Option<u64> {
        self.config
            .memory
            .map(|m| m.saturating_sub(self.used_memory))
    }

    /// Free disk in megabytes, if the node's disk is known.
    pub fn free_disk(&self) -> Option<u64> {
        self.config.disk.map(|d| d.saturating_sub(self.used_disk))
    }

    pub fn partition(&self) -> &str {
        self.overrides
            .partition
            .as_deref()
            .or(self.config.partition.as_deref())
            .unwrap_or(DEFAULT_PARTITION)
    }

    pub fn os(&self) -> Option<&str> {
        self.overrides.os.as_deref().or(self.config.os.as_deref())
    }
}

/// The partition of nodes configured without one.
pub const DEFAULT_PARTITION: &str = "default";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_managers_state_after_the_administrators() {
        let mut node = Node::new(0, NodeConfig::new("n1", 4));
        assert_eq!(node.state(), NodeState::Idle);
        node.rm_state = Some(NodeState::Drained);
        assert_eq!(node.state(), NodeState::Drained);
        assert!(!node.accepts_jobs());
        node.jobs.push("j.1".into());
        assert_eq!(node.state(), NodeState::Draining);
        node.rm_state = Some(NodeState::Down);
        assert_eq!(node.state(), NodeState::Down);
        // An administrator's state wins.
        node.overrides.state = Some(NodeState::Reserved);
        assert_eq!(node.state(), NodeState::Reserved);
        node.overrides.state = None;
        node.rm_state = None;
        node.used_processors = 1;
        assert_eq!(node.state(), NodeState::Running);
        assert!(node.accepts_jobs());
    }
}
