//! The node part of the engine: the nodes with what jobs use of them, found by id.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::job::Job;
use crate::node::{Node, NodeConfig, NodeOverrides, ReportedNode};
use crate::vm::Vm;

pub(crate) struct NodePool {
    nodes: Vec<Node>,
    /// Node ids to their index in `nodes`.
    index: HashMap<String, usize, foldhash::fast::FixedState>,
    /// Changed since readers last saw the nodes.
    changed: bool,
    /// How many nodes the configuration has (the first ones); reports added the others.
    configured: usize,
    /// What reports said of nodes' descriptions, by index.
    reported: HashMap<usize, ReportedNode>,
    /// The nodes each reporter of outside work last named.
    external_by: HashMap<String, HashSet<usize>>,
}

impl NodePool {
    pub(super) fn new(nodes: Vec<Node>) -> NodePool {
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id().to_string(), i))
            .collect();
        NodePool {
            configured: nodes.len(),
            nodes,
            index,
            changed: false,
            reported: HashMap::new(),
            external_by: HashMap::new(),
        }
    }

    /// Keeps `named` as the nodes `reporter` reports outside work on; answers those it
    /// named before and not now.
    pub(super) fn externally_used_by(
        &mut self,
        reporter: &str,
        named: HashSet<usize>,
    ) -> Vec<usize> {
        let before = self
            .external_by
            .insert(reporter.to_string(), named)
            .unwrap_or_default();
        let now = &self.external_by[reporter];
        before.into_iter().filter(|i| !now.contains(i)).collect()
    }

    /// How many nodes reports added.
    pub(super) fn added_count(&self) -> usize {
        self.nodes.len() - self.configured
    }

    /// Adds a node; answers its index.
    pub(super) fn add(&mut self, config: NodeConfig) -> usize {
        let index = self.nodes.len();
        self.index.insert(config.id.clone(), index);
        self.nodes.push(Node::new(index, config));
        self.changed = true;
        index
    }

    /// What reports said of the description of the node at `index`.
    pub(super) fn reported(&self, index: usize) -> Option<&ReportedNode> {
        self.reported.get(&index)
    }

    /// Keeps `report` of the node at `index` and lays it over its description.
    pub(super) fn set_reported(&mut self, index: usize, report: ReportedNode) {
        report.apply_to(&mut self.node_mut(index).config);
        self.reported.insert(index, report);
    }

    #[inline]
    pub(super) fn all(&self) -> &Vec<Node> {
        &self.nodes
    }

    #[inline]
    pub(super) fn index_of(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// The node at `index`, to change (readers will see it).
    #[inline]
    pub(super) fn node_mut(&mut self, index: usize) -> &mut Node {
        self.changed = true;
        &mut self.nodes[index]
    }

    /// The nodes as they were at the last change, once.
    pub(super) fn take_changed(&mut self) -> Option<Vec<Node>> {
        std::mem::take(&mut self.changed).then(|| self.nodes.clone())
    }

    /// Lends the nodes out (to the planner of a pass), leaving none until
    /// [`NodePool::give_back`].
    #[inline]
    pub(super) fn lend(&mut self) -> Vec<Node> {
        std::mem::take(&mut self.nodes)
    }

    #[inline]
    pub(super) fn give_back(&mut self, nodes: Vec<Node>) {
        self.nodes = nodes;
    }

    /// Nothing used, and the stored overrides in force.
    pub(super) fn reset(&mut self, overrides: &HashMap<String, NodeOverrides>) {
        for node in &mut self.nodes {
            node.used_processors = 0;
            node.used_memory = 0;
            node.used_disk = 0;
            node.jobs.clear();
            node.vms.clear();
            node.overrides = overrides.get(node.id()).cloned().unwrap_or_default();
        }
        self.changed = true;
    }

    /// Node resources taken (`take`) or given back by a job.
    pub(super) fn charge(&mut self, job: &Job, take: bool) {
        if job.status.in_vm.is_some() {
            return; // its VM holds what it uses
        }
        let per_task_memory = job.spec.request.memory_per_task.unwrap_or(0);
        for allocation in &job.status.allocation {
            let Some(&index) = self.index.get(&allocation.node) else {
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
        self.changed = true;
    }
}

impl NodePool {
    /// Processors and memory a VM takes on `node` (`take`) or gives back. An unknown
    /// node is left alone.
    pub(super) fn hold_vm(&mut self, node: &str, vm: &Vm, take: bool) {
        let Some(&index) = self.index.get(node) else {
            return;
        };
        let node = &mut self.nodes[index];
        if take {
            node.used_processors += vm.processors;
            node.used_memory += vm.memory;
            node.used_disk += vm.disk.unwrap_or(0);
            node.vms.push(vm.id.clone());
        } else if let Some(at) = node.vms.iter().position(|v| *v == vm.id) {
            node.vms.remove(at);
            node.used_processors = node.used_processors.saturating_sub(vm.processors);
            node.used_memory = node.used_memory.saturating_sub(vm.memory);
            node.used_disk = node.used_disk.saturating_sub(vm.disk.unwrap_or(0));
        }
        self.changed = true;
    }

    /// The first node where a VM of `size` fits now (powered on, taking work, with that
    /// much free), other than `except`.
    pub(super) fn room_for_vm(
        &self,
        size: VmSize,
        except: Option<&str>,
        reserved: impl Fn(&Node) -> u32,
    ) -> Option<&Node> {
        self.nodes
            .iter()
            .filter(|n| Some(n.id()) != except)
            .find(|n| vm_fits(n, size, reserved(n)).is_ok())
    }
}

/// What a VM takes from its node: processors, and megabytes of memory and of disk.
#[derive(Debug, Clone, Copy)]
pub(super) struct VmSize {
    pub processors: u32,
    pub memory: u64,
    pub disk: u64,
}

impl VmSize {
    pub(super) fn of(vm: &Vm) -> VmSize {
        VmSize {
            processors: vm.processors,
            memory: vm.memory,
            disk: vm.disk.unwrap_or(0),
        }
    }
}

/// Whether a VM of `size` fits on `node` now, `reserved` of its processors being set
/// aside for others by reservations while the VM would live; if not, why.
pub(super) fn vm_fits(node: &Node, size: VmSize, reserved: u32) -> Result<(), String> {
    let VmSize {
        processors,
        memory,
        disk,
    } = size;
    if !node.accepts_jobs() {
        return Err(format!(
            "node {} takes no new work ({})",
            node.id(),
            node.state().as_str()
        ));
    }
    let free = node.free_processors();
    if free.saturating_sub(reserved) < processors {
        let set_aside = match reserved {
            0 => String::new(),
            n => format!(
                " and reservations the VM's owner is not admitted to hold {n} while it lives"
            ),
        };
        return Err(format!(
            "node {} has {free} free processors{set_aside}, the VM asks for {processors}",
            node.id(),
        ));
    }
    if let Some(free) = node.free_memory()
        && free < memory
    {
        return Err(format!(
            "node {} has {free} MB of free memory, the VM asks for {memory} MB",
            node.id()
        ));
    }
    if let Some(free) = node.free_disk()
        && free < disk
    {
        return Err(format!(
            "node {} has {free} MB of free disk, the VM asks for {disk} MB",
            node.id()
        ));
    }
    Ok(())
}

/// Whether a VM of `size` could ever fit on `node`, were all of it free (whatever it
/// runs, its state or its reservations now); if not, why.
pub(super) fn vm_could_fit(node: &Node, size: VmSize) -> Result<(), String> {
    let config = &node.config;
    if config.processors < size.processors {
        return Err(format!(
            "node {} has {} processors, the VM asks for {}",
            node.id(),
            config.processors,
            size.processors
        ));
    }
    if let Some(memory) = config.memory.filter(|m| *m < size.memory) {
        return Err(format!(
            "node {} has {memory} MB of memory, the VM asks for {} MB",
            node.id(),
            size.memory
        ));
    }
    if let Some(disk) = config.disk.filter(|d| *d < size.disk) {
        return Err(format!(
            "node {} has {disk} MB of disk, the VM asks for {} MB",
            node.id(),
            size.disk
        ));
    }
    Ok(())
}

/// One node describing this machine (when no `[[nodes]]` are configured): its host
/// name, processors, memory and swap, read from `/proc`.
pub(super) fn this_machine() -> NodeConfig {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    let processors = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let megabytes = |key: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map(|kb| kb / 1024)
    };
    NodeConfig {
        id: hostname,
        processors,
        memory: megabytes("MemTotal:"),
        disk: None,
        swap: megabytes("SwapTotal:"),
        features: Vec::new(),
        partition: None,
        architecture: Some(std::env::consts::ARCH.to_string()),
        os: Some(std::env::consts::OS.to_string()),
        generic_resources: BTreeMap::new(),
        rack: None,
        slot: None,
    }
}
