//! Placement: which nodes a job's tasks go to. First fit over the nodes in their
//! configured order, each node offering some room: what is free now ([`place`]), or
//! what the backfill planner (`policy::planner`) finds free over a stretch of time.

use crate::job::{Allocation, ResourceRequest};
use crate::node::Node;

/// What placement found for one job.
#[derive(Debug, Clone, PartialEq)]
pub enum Fit {
    /// Enough resources are free now, on these nodes.
    Now(Vec<Allocation>),
    /// The job fits the configured nodes, but not in what is free now.
    Later(String),
    /// No set of configured nodes could ever hold the job; the reason says why.
    Never(String),
}

/// How many tasks of `request` a node can hold, from `processors` and `memory`.
fn tasks_within(request: &ResourceRequest, processors: u32, memory: Option<u64>) -> u32 {
    let by_processors = processors / request.processors_per_task.max(1);
    let by_memory = match (request.memory_per_task, memory) {
        (Some(per_task), Some(memory)) if per_task > 0 => {
            (memory / per_task).min(u32::MAX as u64) as u32
        }
        _ => u32::MAX,
    };
    by_processors.min(by_memory)
}

/// Tasks per node the request insists on: `tasks_per_node`, or spread over `node_count`.
fn tasks_per_node(request: &ResourceRequest) -> Option<u32> {
    request.tasks_per_node.filter(|&n| n > 0).or_else(|| {
        request
            .node_count
            .filter(|&n| n > 1)
            .map(|n| request.task_count.div_ceil(n).max(1))
    })
}

/// Whether a node's fixed properties suit the request (not its load or state).
pub fn suits(request: &ResourceRequest, node: &Node) -> bool {
    let id = node.id();
    if !request.nodes_requested.is_empty() && !request.nodes_requested.iter().any(|n| n == id) {
        return false;
    }
    if request.nodes_excluded.iter().any(|n| n == id) {
        return false;
    }
    let has = |f: &String| node.config.features.iter().any(|nf| nf == f);
    let features_ok = if request.features.is_empty() {
        true
    } else if request.features_any {
        request.features.iter().any(has)
    } else {
        request.features.iter().all(has)
    };
    features_ok
        && !request.features_excluded.iter().any(has)
        && request
            .architecture
            .as_ref()
            .is_none_or(|a| node.config.architecture.as_ref() == Some(a))
        && request
            .os
            .as_ref()
            .is_none_or(|os| node.os() == Some(os.as_str()))
        && request
            .partition
            .as_ref()
            .is_none_or(|p| node.partition() == p)
        && request.generic_resources.iter().all(|(name, amount)| {
            node.config
                .generic_resources
                .get(name)
                .copied()
                .unwrap_or(0.0)
                >= *amount
        })
}

/// Free room on one node: processors and memory (`None`: memory not limited).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Room {
    pub processors: u32,
    pub memory: Option<u64>,
}

/// Why `request` could never fit `nodes`, with every suitable node empty; `None` if it could.
pub fn never(request: &ResourceRequest, nodes: &[Node]) -> Option<String> {
    let per_node = tasks_per_node(request);
    let wanted = request.task_count.max(1);
    let mut possible = 0u64;
    for node in nodes.iter().filter(|n| suits(request, n)) {
        let fit = tasks_within(request, node.config.processors, node.config.memory);
        possible += u64::from(match per_node {
            Some(n) if fit >= n.min(wanted) => n,
            Some(_) => 0,
            None => fit,
        });
        if possible >= u64::from(wanted) {
            return None;
        }
    }
    Some(never_reason(request, nodes, possible))
}

/// First fit of `request` over the nodes at `candidates` (indices into `nodes`, in the
/// order to try), each offering `room(index)`: the tasks placed per node index, or `None`
/// when the candidates cannot hold them all. Node state is the caller's business.
pub fn first_fit(
    request: &ResourceRequest,
    nodes: &[Node],
    candidates: impl IntoIterator<Item = usize>,
    mut room: impl FnMut(usize) -> Room,
) -> Option<Vec<(usize, u32)>> {
    let per_node = tasks_per_node(request);
    let mut remaining = request.task_count.max(1);
    let mut placed = Vec::new();
    for index in candidates {
        let node = &nodes[index];
        let free = room(index);
        if free.processors < request.processors_per_task.max(1) || !suits(request, node) {
            continue;
        }
        let fit = tasks_within(request, free.processors, free.memory);
        let take = match per_node {
            Some(n) if fit >= n.min(remaining) => n.min(remaining),
            Some(_) => 0,
            None => fit.min(remaining),
        };
        if take > 0 {
            placed.push((index, take));
            remaining -= take;
            if remaining == 0 {
                return Some(placed);
            }
        }
    }
    None
}

/// Turns node indices into the allocation a job records.
pub fn allocation(nodes: &[Node], placed: &[(usize, u32)]) -> Vec<Allocation> {
    placed
        .iter()
        .map(|&(index, tasks)| Allocation {
            node: nodes[index].id().to_string(),
            tasks,
        })
        .collect()
}

/// First fit of `request` on what `nodes` have free now.
pub fn place(request: &ResourceRequest, nodes: &[Node]) -> Fit {
    if let Some(reason) = never(request, nodes) {
        return Fit::Never(reason);
    }
    let accepting = (0..nodes.len()).filter(|&i| nodes[i].accepts_jobs());
    let free_now = |index: usize| Room {
        processors: nodes[index].free_processors(),
        memory: nodes[index].free_memory(),
    };
    match first_fit(request, nodes, accepting, free_now) {
        Some(placed) => Fit::Now(allocation(nodes, &placed)),
        None => Fit::Later(format!(
            "waiting for resources: needs {} processor(s) for {} task(s)",
            request.total_processors(),
            request.task_count.max(1)
        )),
    }
}

fn never_reason(request: &ResourceRequest, nodes: &[Node], possible: u64) -> String {
    let suitable = nodes.iter().filter(|n| suits(request, n)).count();
    if suitable == 0 {
        let mut wants = Vec::new();
        if !request.features.is_empty() {
            wants.push(format!("features {}", request.features.join(",")));
        }
        if let Some(p) = &request.partition {
            wants.push(format!("partition {p}"));
        }
        if let Some(a) = &request.architecture {
            wants.push(format!("architecture {a}"));
        }
        if let Some(os) = &request.os {
            wants.push(format!("os {os}"));
        }
        if !request.nodes_requested.is_empty() {
            wants.push(format!("nodes {}", request.nodes_requested.join(",")));
        }
        if !request.generic_resources.is_empty() {
            wants.push("the generic resources requested".into());
        }
        return format!(
            "no node has {}",
            if wants.is_empty() {
                "what the job requests".into()
            } else {
                wants.join(" and ")
            }
        );
    }
    let largest = nodes
        .iter()
        .filter(|n| suits(request, n))
        .map(|n| n.config.processors)
        .max()
        .unwrap_or(0);
    format!(
        "the job needs {} task(s) of {} processor(s){}; the {} suitable node(s) (largest {} processors) can hold at most {}",
        request.task_count,
        request.processors_per_task,
        request
            .memory_per_task
            .map(|m| format!(" and {m} MB"))
            .unwrap_or_default(),
        suitable,
        largest,
        possible
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{NodeConfig, NodeState};

    fn node(id: &str, processors: u32, memory: u64, features: &[&str]) -> Node {
        Node::new(
            0,
            NodeConfig {
                memory: Some(memory),
                features: features.iter().map(|f| f.to_string()).collect(),
                ..NodeConfig::new(id, processors)
            },
        )
    }

    fn request(tasks: u32, per_node: Option<u32>) -> ResourceRequest {
        ResourceRequest {
            task_count: tasks,
            tasks_per_node: per_node,
            ..Default::default()
        }
    }

    #[test]
    fn first_fit_fills_nodes_in_order() {
        let nodes = vec![node("a", 2, 1000, &[]), node("b", 4, 1000, &[])];
        assert_eq!(
            place(&request(5, None), &nodes),
            Fit::Now(vec![
                Allocation {
                    node: "a".into(),
                    tasks: 2
                },
                Allocation {
                    node: "b".into(),
                    tasks: 3
                }
            ])
        );
    }

    #[test]
    fn tasks_per_node_is_exact() {
        // nodes=3:ppn=2 on three nodes of 4.
        let nodes = vec![
            node("a", 4, 1000, &[]),
            node("b", 4, 1000, &[]),
            node("c", 4, 1000, &[]),
        ];
        let Fit::Now(allocation) = place(&request(6, Some(2)), &nodes) else {
            panic!()
        };
        assert_eq!(
            allocation.iter().map(|a| a.tasks).collect::<Vec<_>>(),
            [2, 2, 2]
        );
        assert!(matches!(place(&request(6, Some(5)), &nodes), Fit::Never(_)));
    }

    #[test]
    fn memory_features_and_state_constrain() {
        let mut nodes = vec![node("a", 8, 1000, &["gpu"]), node("b", 8, 4000, &[])];
        let mut big = request(1, None);
        big.memory_per_task = Some(3000);
        assert_eq!(
            place(&big, &nodes),
            Fit::Now(vec![Allocation {
                node: "b".into(),
                tasks: 1
            }])
        );
        let mut gpu = request(1, None);
        gpu.features = vec!["gpu".into()];
        big.features = vec!["gpu".into()];
        assert!(matches!(place(&big, &nodes), Fit::Never(m) if m.contains("3000 MB")));
        nodes[0].overrides.state = Some(NodeState::Drained);
        assert!(matches!(place(&gpu, &nodes), Fit::Later(_)));
        let mut nowhere = request(1, None);
        nowhere.features = vec!["fpga".into()];
        assert!(matches!(place(&nowhere, &nodes), Fit::Never(m) if m.contains("fpga")));
    }

    #[test]
    fn busy_nodes_mean_later() {
        let mut nodes = vec![node("a", 2, 1000, &[])];
        nodes[0].used_processors = 2;
        assert!(matches!(place(&request(1, None), &nodes), Fit::Later(_)));
        assert!(matches!(place(&request(3, None), &nodes), Fit::Never(_)));
    }
}
