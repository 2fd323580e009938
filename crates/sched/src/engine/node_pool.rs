//! The node part of the engine: the nodes with what jobs use of them, found by id.

use std::collections::HashMap;

use crate::job::Job;
use crate::node::{Node, NodeOverrides};

pub(crate) struct NodePool {
    nodes: Vec<Node>,
    /// Node ids to their index in `nodes`.
    index: HashMap<String, usize, foldhash::fast::FixedState>,
    /// Changed since readers last saw the nodes.
    changed: bool,
}

impl NodePool {
    pub(super) fn new(nodes: Vec<Node>) -> NodePool {
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id().to_string(), i))
            .collect();
        NodePool {
            nodes,
            index,
            changed: false,
        }
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
            node.jobs.clear();
            node.overrides = overrides.get(node.id()).cloned().unwrap_or_default();
        }
        self.changed = true;
    }

    /// Node resources taken (`take`) or given back by a job.
    pub(super) fn charge(&mut self, job: &Job, take: bool) {
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
