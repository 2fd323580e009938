//! One scheduling pass: jobs are considered in priority order and each either starts
//! now, gets a reservation, waits, or can never run.
//!
//! The planner keeps, per node, what is free now and a list of future changes: the
//! releases of running jobs at their expected ends (start + requested time; a job with
//! no requested time never releases), and the holds of reservations. A job may start now
//! only where, over its whole requested time, that profile leaves room, so it delays no
//! reservation: that is backfilling. How many reservations are made decides the policy:
//! none and strict order (FCFS), the first job that cannot start (EASY), or every one
//! (conservative).
//!
//! Resources only shrink during a pass, so a request that could not start now cannot
//! later in the same pass: requests of the same shape, as long or longer, are refused
//! at once. With total free
//! processors checked first, a pass over 100,000 jobs costs little more than sorting them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// foldhash rather than SipHash: the memo below is probed once per job considered, and
/// its keys come from the engine, not from an attacker.
type Fast = foldhash::fast::FixedState;

use super::Backfill;
use crate::clock::Seconds;
use crate::job::ResourceRequest;
use crate::node::Node;
use crate::place::{self, Room};

/// What the pass decided for one job.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Start now: tasks per node index.
    Start(Vec<(usize, u32)>),
    /// Cannot start now; resources are reserved for it from this time.
    Reserved(Seconds),
    /// Cannot start now.
    Wait,
    /// No set of nodes could ever hold it; the reason says why.
    Never(String),
}

/// What is left in a pass that makes no more reservations: jobs of plain requests
/// wider than `free` (and no wider than `capacity`, the nodes that take jobs) cannot
/// start, and the queue passes them over without looking at them.
#[derive(Debug, Clone, Copy)]
pub struct Remaining {
    pub free: u64,
    pub capacity: u64,
}

/// Resources a running job holds on one node until `end` (`None`: unknown).
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub node: usize,
    pub processors: u32,
    pub memory: u64,
    pub end: Option<Seconds>,
}

/// A change of a node's free resources at a time (a release is positive).
#[derive(Debug, Clone, Copy)]
struct Change {
    time: Seconds,
    processors: i64,
    memory: i64,
    /// 0, or 1 + the index of the set-aside (reservation) it belongs to: jobs that
    /// reservation admits do not see it.
    set_aside: usize,
}

/// Resources an advance reservation sets aside: processors per node index, from `start`
/// until `end`.
#[derive(Debug, Clone)]
pub struct SetAside {
    pub nodes: Vec<(usize, u32)>,
    pub start: Seconds,
    pub end: Seconds,
}

/// What one job may use of the set-asides (by index in the planner's list).
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Set-asides whose ACL admits the job: their resources are open to it.
    pub admitted: Vec<usize>,
    /// The job asked to run in this one: only on its nodes, only while it is active.
    pub within: Option<usize>,
    /// Nodes of these are tried first (POSITIVE affinity) or last (NEGATIVE).
    pub prefer: Vec<usize>,
    pub avoid: Vec<usize>,
}

impl Access {
    fn is_plain(&self) -> bool {
        self.admitted.is_empty() && self.within.is_none()
    }

    fn sees(&self, change: &Change) -> bool {
        change.set_aside == 0 || !self.admitted.contains(&(change.set_aside - 1))
    }
}

/// Free memory of a node whose memory is not known.
const UNLIMITED: i64 = i64::MAX / 4;

/// The fields that decide where a plain request fits; requests naming features,
/// partitions, nodes or generic resources are not memoized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    tasks: u32,
    tasks_per_node: Option<u32>,
    node_count: Option<u32>,
    processors_per_task: u32,
    memory_per_task: Option<u64>,
}

impl Shape {
    fn of(request: &ResourceRequest) -> Option<Shape> {
        let plain = request.features.is_empty()
            && request.features_excluded.is_empty()
            && request.architecture.is_none()
            && request.os.is_none()
            && request.partition.is_none()
            && request.generic_resources.is_empty()
            && request.nodes_requested.is_empty()
            && request.nodes_excluded.is_empty();
        plain.then_some(Shape {
            tasks: request.task_count,
            tasks_per_node: request.tasks_per_node,
            node_count: request.node_count,
            processors_per_task: request.processors_per_task,
            memory_per_task: request.memory_per_task,
        })
    }
}

pub struct Planner<'a> {
    backfill: Backfill,
    now: Seconds,
    nodes: &'a [Node],
    /// Free now, per node (nothing on nodes that take no jobs).
    free_processors: Vec<i64>,
    free_memory: Vec<i64>,
    /// Future changes per node, in time order.
    changes: Vec<Vec<Change>>,
    /// Processors free now on all nodes.
    total_free: u64,
    /// Per time: processors released and taken on all nodes.
    timeline: BTreeMap<Seconds, (i64, i64)>,
    /// Nodes with free processors now, in configured order.
    open: BTreeSet<usize>,
    accepting: Vec<usize>,
    /// Processors of the nodes that take jobs.
    capacity: u64,
    reservations: usize,
    /// Conservative backfill: at most this many reservations per pass.
    depth: usize,
    /// FCFS: a job waits, so nothing behind it starts.
    blocked: bool,
    /// Per shape, the shortest requested time refused a start in this pass.
    shortest_refused: HashMap<Shape, i64, Fast>,
    never: HashMap<Shape, Option<String>, Fast>,
    set_asides: Vec<SetAside>,
}

impl<'a> Planner<'a> {
    /// A pass at `now` over `nodes` (their free resources as they are now) and what
    /// running jobs hold.
    pub fn new(
        backfill: Backfill,
        now: Seconds,
        nodes: &'a [Node],
        held: impl IntoIterator<Item = Held>,
    ) -> Planner<'a> {
        let mut free_processors = Vec::with_capacity(nodes.len());
        let mut free_memory = Vec::with_capacity(nodes.len());
        let mut open = BTreeSet::new();
        let mut accepting = Vec::new();
        let mut total_free = 0u64;
        let mut capacity = 0u64;
        for (index, node) in nodes.iter().enumerate() {
            let (processors, memory) = if node.accepts_jobs() {
                accepting.push(index);
                capacity += u64::from(node.config.processors);
                (
                    i64::from(node.free_processors()),
                    node.free_memory()
                        .map_or(UNLIMITED, |m| m.min(UNLIMITED as u64) as i64),
                )
            } else {
                (0, 0)
            };
            if processors > 0 {
                open.insert(index);
                total_free += processors as u64;
            }
            free_processors.push(processors);
            free_memory.push(memory);
        }
        let mut planner = Planner {
            backfill,
            now,
            nodes,
            free_processors,
            free_memory,
            changes: vec![Vec::new(); nodes.len()],
            total_free,
            timeline: BTreeMap::new(),
            open,
            accepting,
            capacity,
            reservations: 0,
            depth: usize::MAX,
            blocked: false,
            shortest_refused: HashMap::default(),
            never: HashMap::default(),
            set_asides: Vec::new(),
        };
        for h in held {
            if let Some(end) = h.end
                && h.node < nodes.len()
            {
                // A job past its expected end is being stopped: it frees its resources
                // soon, not already.
                let end = end.max(now + 1);
                planner.add_change(h.node, end, i64::from(h.processors), h.memory as i64, 0);
            }
        }
        planner
    }

    /// Conservative backfill: reserve for at most `depth` jobs (each reservation makes
    /// the following searches longer); the jobs after them are backfilled like EASY's.
    pub fn with_reservation_depth(mut self, depth: usize) -> Self {
        self.depth = depth.max(1);
        self
    }

    /// Advance reservations: their resources are held for every job their ACL does not
    /// admit ([`Access`]), from their start (or now) until their end.
    pub fn with_set_asides(mut self, set_asides: Vec<SetAside>) -> Self {
        for (index, set_aside) in set_asides.iter().enumerate() {
            if set_aside.end <= self.now {
                continue;
            }
            let start = set_aside.start.max(self.now);
            for &(node, processors) in &set_aside.nodes {
                if node < self.nodes.len() {
                    let p = i64::from(processors);
                    self.add_change(node, start, -p, 0, index + 1);
                    self.add_change(node, set_aside.end, p, 0, index + 1);
                }
            }
        }
        self.set_asides = set_asides;
        self
    }

    /// Whether no job can start any more in this pass.
    pub fn exhausted(&self) -> bool {
        self.blocked || self.total_free == 0
    }

    /// Reservations made so far.
    pub fn reservations(&self) -> usize {
        self.reservations
    }

    /// Once the pass makes no more reservations (EASY's one is made, or conservative
    /// backfill's depth reached): the processors free now and those of the nodes that
    /// take jobs. A job asking for more than are free can then only wait.
    pub fn room_left(&self) -> Option<Remaining> {
        let done = match self.backfill {
            Backfill::Fcfs => self.blocked,
            Backfill::Easy => self.reservations >= 1,
            Backfill::Conservative => self.reservations >= self.depth,
        };
        done.then_some(Remaining {
            free: self.total_free,
            capacity: self.capacity,
        })
    }

    /// Decides for the next job in priority order, asking `request` for `requested`
    /// seconds (`None`: unknown, it may run for ever).
    pub fn consider(&mut self, request: &ResourceRequest, requested: Option<i64>) -> Decision {
        self.consider_with(request, requested, &Access::default())
    }

    /// [`consider`](Self::consider) for a job with `access` to advance reservations.
    pub fn consider_with(
        &mut self,
        request: &ResourceRequest,
        requested: Option<i64>,
        access: &Access,
    ) -> Decision {
        if self.blocked {
            return Decision::Wait;
        }
        let shape = Shape::of(request);
        if let Some(reason) = self.never_reason(request, shape) {
            return Decision::Never(reason);
        }
        let requested = requested.filter(|&d| d > 0);
        let end = requested.map(|d| self.now.saturating_add(d));
        // Refusals are remembered per shape only for jobs no reservation admits (the
        // room differs for the others).
        let shape = shape.filter(|_| access.is_plain());
        // Cheapest first: enough processors free at all, then not refused before (a
        // shape refused for some time is refused for any longer time: the room over a
        // longer stretch is never larger).
        let length = requested.unwrap_or(i64::MAX);
        let within_now = access.within.is_none_or(|k| {
            self.set_asides
                .get(k)
                .is_some_and(|r| r.start <= self.now && self.now < r.end)
        });
        if within_now
            && request.total_processors() <= self.total_free
            && shape.is_none_or(|s| self.shortest_refused.get(&s).is_none_or(|&r| length < r))
        {
            let now = self.now;
            let open: Vec<usize> = self.open.iter().copied().collect();
            let candidates = self.candidates(open, access);
            if let Some(placed) = place::first_fit(request, self.nodes, candidates, |i| {
                self.room(i, now, end, access)
            }) {
                self.hold(request, &placed, now, end);
                return Decision::Start(placed);
            }
            if let Some(shape) = shape {
                let refused = self.shortest_refused.entry(shape).or_insert(length);
                *refused = (*refused).min(length);
            }
        }
        let may_reserve = access.within.is_none()
            && match self.backfill {
                Backfill::Fcfs => false,
                Backfill::Easy => self.reservations == 0,
                Backfill::Conservative => self.reservations < self.depth,
            };
        if may_reserve && let Some(start) = self.reserve(request, requested, access) {
            return Decision::Reserved(start);
        }
        if self.backfill == Backfill::Fcfs {
            self.blocked = true;
        }
        Decision::Wait
    }

    /// The nodes to try, in order: only those of the reservation the job asked for;
    /// else those it prefers first and those it avoids last.
    fn candidates(&self, nodes: Vec<usize>, access: &Access) -> Vec<usize> {
        let in_any = |k: &[usize], node: usize| {
            k.iter().any(|&k| {
                self.set_asides
                    .get(k)
                    .is_some_and(|r| r.nodes.iter().any(|&(n, _)| n == node))
            })
        };
        if let Some(k) = access.within {
            return nodes.into_iter().filter(|&n| in_any(&[k], n)).collect();
        }
        if access.prefer.is_empty() && access.avoid.is_empty() {
            return nodes;
        }
        let rank = |node: usize| {
            if in_any(&access.prefer, node) {
                0
            } else if in_any(&access.avoid, node) {
                2
            } else {
                1
            }
        };
        let mut ordered = nodes;
        ordered.sort_by_key(|&n| rank(n)); // stable: configured order within a rank
        ordered
    }

    fn never_reason(&mut self, request: &ResourceRequest, shape: Option<Shape>) -> Option<String> {
        match shape {
            Some(shape) => self
                .never
                .entry(shape)
                .or_insert_with(|| place::never(request, self.nodes))
                .clone(),
            None => place::never(request, self.nodes),
        }
    }

    /// The least room node `index` has from `from` until `to` (`None`: for ever).
    fn room(&self, index: usize, from: Seconds, to: Option<Seconds>, access: &Access) -> Room {
        let mut processors = self.free_processors[index];
        let mut memory = self.free_memory[index];
        let changes = &self.changes[index];
        let mut k = 0;
        while k < changes.len() && changes[k].time <= from {
            if access.sees(&changes[k]) {
                processors += changes[k].processors;
                memory += changes[k].memory;
            }
            k += 1;
        }
        let (mut least_processors, mut least_memory) = (processors, memory);
        while k < changes.len() && to.is_none_or(|to| changes[k].time < to) {
            if !access.sees(&changes[k]) {
                k += 1;
                continue;
            }
            processors += changes[k].processors;
            memory += changes[k].memory;
            least_processors = least_processors.min(processors);
            least_memory = least_memory.min(memory);
            k += 1;
        }
        Room {
            processors: least_processors.clamp(0, i64::from(u32::MAX)) as u32,
            memory: self.nodes[index]
                .config
                .memory
                .map(|_| least_memory.max(0) as u64),
        }
    }

    fn add_change(
        &mut self,
        node: usize,
        time: Seconds,
        processors: i64,
        memory: i64,
        set_aside: usize,
    ) {
        let changes = &mut self.changes[node];
        // At one instant releases come before holds: the net change is what counts.
        let at = if processors > 0 {
            changes.partition_point(|c| c.time < time)
        } else {
            changes.partition_point(|c| c.time <= time)
        };
        changes.insert(
            at,
            Change {
                time,
                processors,
                memory,
                set_aside,
            },
        );
        let entry = self.timeline.entry(time).or_default();
        if processors > 0 {
            entry.0 += processors;
        } else {
            entry.1 += processors;
        }
    }

    /// Holds what `placed` takes from `start` until `end`.
    fn hold(
        &mut self,
        request: &ResourceRequest,
        placed: &[(usize, u32)],
        start: Seconds,
        end: Option<Seconds>,
    ) {
        let memory_per_task = request.memory_per_task.unwrap_or(0) as i64;
        for &(node, tasks) in placed {
            let processors = i64::from(tasks) * i64::from(request.processors_per_task);
            let memory = i64::from(tasks) * memory_per_task;
            if start == self.now {
                self.free_processors[node] -= processors;
                self.free_memory[node] -= memory;
                self.total_free = self.total_free.saturating_sub(processors as u64);
                if self.free_processors[node] <= 0 {
                    self.open.remove(&node);
                }
            } else {
                self.add_change(node, start, -processors, -memory, 0);
            }
            if let Some(end) = end {
                self.add_change(node, end, processors, memory, 0);
            }
        }
    }

    /// Reserves the earliest time the job fits for its whole requested time, trying
    /// each time something is released.
    fn reserve(
        &mut self,
        request: &ResourceRequest,
        requested: Option<i64>,
        access: &Access,
    ) -> Option<Seconds> {
        let need = request.total_processors() as i64;
        let mut free = self.total_free as i64;
        let mut found = None;
        for (&time, &(released, taken)) in self.timeline.range(self.now + 1..) {
            free += released + taken;
            if released == 0 || free < need {
                continue;
            }
            let end = requested.map(|d| time.saturating_add(d));
            let accepting = self.candidates(self.accepting.clone(), access);
            if let Some(placed) = place::first_fit(request, self.nodes, accepting, |i| {
                self.room(i, time, end, access)
            }) {
                found = Some((time, end, placed));
                break;
            }
        }
        let (start, end, placed) = found?;
        self.hold(request, &placed, start, end);
        self.reservations += 1;
        Some(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeConfig;

    fn nodes(sizes: &[u32]) -> Vec<Node> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &p)| Node::new(i, NodeConfig::new(&format!("n{i}"), p)))
            .collect()
    }

    fn tasks(n: u32) -> ResourceRequest {
        ResourceRequest {
            task_count: n,
            ..Default::default()
        }
    }

    /// One node of 10 processors, 6 of them busy until t=100.
    fn busy_machine() -> Vec<Node> {
        let mut n = nodes(&[10]);
        n[0].used_processors = 6;
        n
    }

    fn held_until(end: Seconds) -> Held {
        Held {
            node: 0,
            processors: 6,
            memory: 0,
            end: Some(end),
        }
    }

    #[test]
    fn easy_backfills_a_short_job_but_not_a_long_one() {
        let nodes = busy_machine();
        let mut p = Planner::new(Backfill::Easy, 0, &nodes, [held_until(100)]);
        // The top job needs 8: it reserves t=100.
        assert_eq!(p.consider(&tasks(8), Some(50)), Decision::Reserved(100));
        // A long 4-processor job would still be running at 100, where only 2 are spare.
        assert_eq!(p.consider(&tasks(4), Some(500)), Decision::Wait);
        // A short one ends by 100: it starts in the hole.
        assert_eq!(
            p.consider(&tasks(4), Some(100)),
            Decision::Start(vec![(0, 4)])
        );
        // A long job that fits in what the reservation leaves spare (2) starts too.
        let mut q = Planner::new(Backfill::Easy, 0, &nodes, [held_until(100)]);
        q.consider(&tasks(8), Some(50));
        assert_eq!(q.consider(&tasks(2), None), Decision::Start(vec![(0, 2)]));
        // A job without a requested time is taken to run for ever.
        assert_eq!(q.consider(&tasks(1), None), Decision::Wait);
    }

    #[test]
    fn fcfs_stops_at_the_first_job_that_waits() {
        let nodes = busy_machine();
        let mut p = Planner::new(Backfill::Fcfs, 0, &nodes, [held_until(100)]);
        assert_eq!(p.consider(&tasks(8), Some(50)), Decision::Wait);
        assert_eq!(p.consider(&tasks(1), Some(1)), Decision::Wait);
        assert!(p.exhausted());
    }

    #[test]
    fn conservative_protects_every_reservation() {
        let nodes = busy_machine();
        let mut easy = Planner::new(Backfill::Easy, 0, &nodes, [held_until(100)]);
        let mut cons = Planner::new(Backfill::Conservative, 0, &nodes, [held_until(100)]);
        for p in [&mut easy, &mut cons] {
            // First: 8 processors from 100 to 150.
            assert_eq!(p.consider(&tasks(8), Some(50)), Decision::Reserved(100));
        }
        // Second: all 10 for 10 seconds; conservative reserves it at 150.
        assert_eq!(cons.consider(&tasks(10), Some(10)), Decision::Reserved(150));
        assert_eq!(easy.consider(&tasks(10), Some(10)), Decision::Wait);
        // 4 processors for 120 s would hold 4 past t=100, where the first reservation
        // leaves 2 spare: neither starts it. 2 processors for 160 s fit that spare, so
        // EASY starts them, but they would delay the second reservation (all 10 at 150):
        // conservative backfill does not.
        assert_eq!(easy.consider(&tasks(4), Some(120)), Decision::Wait);
        assert_eq!(
            easy.consider(&tasks(2), Some(160)),
            Decision::Start(vec![(0, 2)])
        );
        assert!(matches!(
            cons.consider(&tasks(2), Some(160)),
            Decision::Reserved(_)
        ));
    }

    #[test]
    fn never_fitting_and_multi_node_placement() {
        let nodes = nodes(&[4, 4]);
        let mut p = Planner::new(Backfill::Easy, 0, &nodes, []);
        assert!(matches!(
            p.consider(&tasks(9), Some(10)),
            Decision::Never(_)
        ));
        assert_eq!(
            p.consider(&tasks(6), Some(10)),
            Decision::Start(vec![(0, 4), (1, 2)])
        );
        // Two left on n1. A job of 8 reserves both nodes from t=10: a 2-task job of
        // 20 s would delay it, one of 10 s does not.
        assert_eq!(p.consider(&tasks(8), Some(5)), Decision::Reserved(10));
        assert_eq!(p.consider(&tasks(2), Some(20)), Decision::Wait);
        assert_eq!(
            p.consider(&tasks(2), Some(10)),
            Decision::Start(vec![(1, 2)])
        );
        assert!(p.exhausted());
    }

    #[test]
    fn a_drained_node_is_not_planned_on() {
        let mut nodes = nodes(&[4, 4]);
        nodes[0].overrides.state = Some(crate::node::NodeState::Drained);
        let mut p = Planner::new(Backfill::Easy, 0, &nodes, []);
        assert_eq!(
            p.consider(&tasks(4), Some(5)),
            Decision::Start(vec![(1, 4)])
        );
        // Nothing will ever be released on n0: no reservation is possible.
        assert_eq!(p.consider(&tasks(8), Some(5)), Decision::Wait);
        assert_eq!(p.reservations(), 0);
    }

    #[test]
    fn set_asides_keep_other_jobs_off_and_let_admitted_ones_in() {
        let nodes = nodes(&[4, 4]);
        // n0 set aside from `start` to `end`, planned at `now`.
        let planner = |now, start, end| {
            Planner::new(Backfill::Easy, now, &nodes, []).with_set_asides(vec![SetAside {
                nodes: vec![(0, 4)],
                start,
                end,
            }])
        };
        let admitted = Access {
            admitted: vec![0],
            ..Access::default()
        };
        let mut p = planner(0, 0, 100);
        assert_eq!(
            p.consider(&tasks(4), Some(50)),
            Decision::Start(vec![(1, 4)])
        );
        // n0 is set aside: it waits for n1.
        assert_eq!(p.consider(&tasks(2), Some(50)), Decision::Reserved(50));
        assert_eq!(
            p.consider_with(&tasks(4), Some(500), &admitted),
            Decision::Start(vec![(0, 4)])
        );

        // A reservation starting at 100: a job ending by then may use n0 now; one that
        // would still run, or runs for ever, may not.
        let mut p = planner(0, 100, 200);
        assert_eq!(
            p.consider(&tasks(8), Some(100)),
            Decision::Start(vec![(0, 4), (1, 4)])
        );
        let mut p = planner(0, 100, 200);
        assert_eq!(p.consider(&tasks(8), Some(101)), Decision::Reserved(200));
        let mut p = planner(0, 100, 200);
        assert_eq!(
            p.consider(&tasks(6), None),
            Decision::Reserved(200),
            "for ever"
        );

        // Asking to run in it: only on its nodes, only while it is active.
        let within = Access {
            admitted: vec![0],
            within: Some(0),
            ..Access::default()
        };
        let mut early = planner(0, 100, 200);
        assert_eq!(
            early.consider_with(&tasks(1), Some(10), &within),
            Decision::Wait
        );
        let mut now = planner(150, 100, 200);
        assert_eq!(
            now.consider_with(&tasks(1), Some(10), &within),
            Decision::Start(vec![(0, 1)])
        );
        assert_eq!(
            now.consider_with(&tasks(4), Some(10), &within),
            Decision::Wait,
            "3 left in it"
        );

        // Affinity: a preferred reservation's nodes are tried first, an avoided one's last.
        let prefer = Access {
            admitted: vec![0],
            prefer: vec![0],
            ..Access::default()
        };
        let avoid = Access {
            admitted: vec![0],
            avoid: vec![0],
            ..Access::default()
        };
        let nodes3 = self::nodes(&[4, 4, 4]);
        let aside = || SetAside {
            nodes: vec![(1, 4)],
            start: 0,
            end: 100,
        };
        let mut p = Planner::new(Backfill::Easy, 0, &nodes3, []).with_set_asides(vec![aside()]);
        assert_eq!(
            p.consider_with(&tasks(1), Some(10), &prefer),
            Decision::Start(vec![(1, 1)])
        );
        assert_eq!(
            p.consider_with(&tasks(1), Some(10), &avoid),
            Decision::Start(vec![(0, 1)])
        );
        assert_eq!(
            p.consider_with(&tasks(7), Some(10), &avoid),
            Decision::Start(vec![(0, 3), (2, 4)])
        );
    }
}
