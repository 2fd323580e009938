//! The queue part of the engine: the waiting jobs in queue order, the jobs holding
//! resources, the waiting preemptors, and the next submission number. Each set holds
//! book positions; [`Queue::index`] keeps them in step with a job's state.
//!
//! The waiting jobs are also kept by [`RankClass`]: jobs of one class have the same
//! priority score at any instant, so a pass ranks only the first of each class and walks
//! the classes merged (a queue of thousands of like jobs costs a pass a handful of ranks,
//! not thousands).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::book::JobBook;
use crate::clock::Seconds;
use crate::dependency;
use crate::job::{Job, JobState, ResourceRequest};
use crate::policy::Policy;
use crate::policy::planner::Remaining;
use crate::policy::priority::{Priority, QueueRank, Usage};

/// foldhash rather than SipHash: classes are looked up once per job a pass walks.
type Fast = foldhash::fast::RandomState;

pub(crate) struct Queue {
    /// Jobs waiting to be placed (Idle, or Blocked on a dependency), by queue order, to
    /// their book position.
    waiting: BTreeMap<QueueKey, usize>,
    /// The key and class of each waiting job: always the inverse of `waiting`.
    keys: HashMap<usize, (QueueKey, Arc<RankClass>), Fast>,
    /// The waiting jobs by class, in rank order within the class: `(seq, index)` to
    /// book position.
    classes: HashMap<Arc<RankClass>, BTreeMap<(u64, i64), usize>, Fast>,
    /// Book positions of jobs holding resources (Starting, Running, Suspended, and
    /// those being stopped until their process is gone).
    running: BTreeSet<usize>,
    /// Waiting jobs flagged PREEMPTOR.
    preemptors: BTreeSet<usize>,
    /// Waiting jobs that run in a running VM of their user (`vmUsagePolicy`
    /// REQUIREVM): never placed on nodes, started by `vm_jobs` once one fits.
    in_user_vms: BTreeSet<usize>,
    next_seq: u64,
}

impl Queue {
    pub(super) fn new() -> Queue {
        Queue {
            waiting: BTreeMap::new(),
            keys: HashMap::default(),
            classes: HashMap::default(),
            running: BTreeSet::new(),
            preemptors: BTreeSet::new(),
            in_user_vms: BTreeSet::new(),
            next_seq: 1,
        }
    }

    /// Empties every set; submission numbers go on from `next_seq`.
    pub(super) fn reset(&mut self, next_seq: u64) {
        self.waiting.clear();
        self.keys.clear();
        self.classes.clear();
        self.running.clear();
        self.preemptors.clear();
        self.in_user_vms.clear();
        self.next_seq = next_seq;
    }

    /// The number the next submission will take.
    #[inline]
    pub(super) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The number of the next submission, taken.
    #[inline]
    pub(super) fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Keeps the sets in step with the state of the job at `position`; says whether it
    /// has just started waiting (a scheduling pass is then due).
    pub(super) fn index(&mut self, position: usize, job: &Job) -> bool {
        if job.array_spec().is_some() {
            return false; // a master never runs: its sub-jobs do
        }
        if job.spec.extra.system_task.is_some() {
            // A VM's system job is the engine's VM work, started by it (`vm_commands`),
            // never placed as a job: one waiting for its VM is not in the queue.
            return false;
        }
        // A job submitted to the resource manager directly waits there, not here.
        let waiting = (job.status.state == JobState::Idle && !job.spec.extra.rm_detected)
            || (job.status.state == JobState::Blocked
                && job
                    .status
                    .block
                    .as_ref()
                    .is_some_and(|b| b.kind == dependency::WAITING));
        // One that runs in a VM of its user waits for the VM, not for nodes.
        let mut joined = false;
        let waiting =
            if waiting && crate::vm::requires_vm(job.spec.extra.vm_usage_policy.as_deref()) {
                joined = self.in_user_vms.insert(position);
                false
            } else {
                self.in_user_vms.remove(&position);
                waiting
            };
        let key = QueueKey::of(job);
        let class = waiting.then(|| RankClass::of(job));
        match (self.keys.get(&position), class) {
            (Some((old_key, old_class)), Some(class))
                if *old_key == key && **old_class == class => {}
            (Some(_), class) => {
                self.leave(position);
                if let Some(class) = class {
                    self.join(position, key, class);
                }
            }
            (None, Some(class)) => {
                self.join(position, key, class);
                joined = true;
            }
            (None, None) => {}
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
        joined
    }

    fn join(&mut self, position: usize, key: QueueKey, class: RankClass) {
        self.waiting.insert(key, position);
        let class = match self.classes.get_key_value(&class) {
            Some((shared, _)) => shared.clone(),
            None => Arc::new(class),
        };
        self.classes
            .entry(class.clone())
            .or_default()
            .insert((key.seq, key.index), position);
        self.keys.insert(position, (key, class));
    }

    fn leave(&mut self, position: usize) {
        let Some((key, class)) = self.keys.remove(&position) else {
            return;
        };
        self.waiting.remove(&key);
        if let Some(members) = self.classes.get_mut(&class) {
            members.remove(&(key.seq, key.index));
            if members.is_empty() {
                self.classes.remove(&class);
            }
        }
    }

    /// The job at `position` keeps its resources until its process is gone, whatever
    /// its state says.
    #[inline]
    pub(super) fn keep_running(&mut self, position: usize) {
        self.running.insert(position);
    }

    #[inline]
    pub(super) fn running(&self) -> &BTreeSet<usize> {
        &self.running
    }

    #[inline]
    pub(super) fn preemptors(&self) -> &BTreeSet<usize> {
        &self.preemptors
    }

    #[inline]
    /// The waiting jobs that run in a VM of their user, oldest first.
    pub(super) fn in_user_vms(&self) -> &BTreeSet<usize> {
        &self.in_user_vms
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// How many jobs wait.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// The waiting jobs, best first, produced lazily: a pass usually stops long before
    /// the end of a long queue. With `reserve_oldest`, the job first in submission order
    /// comes first whatever its priority, so it is the one EASY protects.
    pub(super) fn walk(
        &self,
        policy: &Policy,
        usage: &Usage,
        book: &JobBook,
        now: Seconds,
    ) -> QueueWalk {
        if policy.weights.is_static() {
            // The queue's own order (system, then user priority, then submission) is
            // the priority order.
            return QueueWalk::Listed { after: None };
        }
        let priority = Priority {
            weights: &policy.weights,
            usage,
            now,
        };
        // The first of each class, ranked; the others follow it (`QueueWalk::next`).
        let heads: Vec<_> = self
            .classes
            .iter()
            .filter_map(|(class, members)| {
                let (&member, &position) = members.iter().next()?;
                Some(ClassHead {
                    rank: priority.rank(book.at(position)),
                    class: class.clone(),
                    member,
                    position,
                })
            })
            .collect();
        let first = policy
            .reserve_oldest
            .then(|| self.waiting.values().next().copied())
            .flatten()
            .filter(|&position| policy.oldest_is_due(book.at(position), now));
        QueueWalk::Ranked {
            first,
            given: None,
            heap: std::collections::BinaryHeap::from(heads),
            cleared_at: None,
        }
    }
}

/// Everything a waiting job's rank depends on but its submission number, array index and
/// the instant (what [`Priority::rank`] reads): jobs of one class have the same score at
/// any instant, and so rank by `(seq, index)` among themselves. Keep in step with
/// `Priority::score`; the test `a_pass_walks_the_classes_in_rank_order` compares the two.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RankClass {
    system_priority: i64,
    user_priority: i64,
    submit: Seconds,
    duration: Option<i64>,
    task_count: u32,
    processors_per_task: u32,
    user: String,
    qos: Option<String>,
    /// The processors asked for, when nothing else of the request decides where it
    /// fits (no features, partition, nodes, memory...) and the job depends on no other
    /// (whose end a pass must notice): such a job cannot start where
    /// fewer processors are free, and can always start on an empty machine at least as
    /// large.
    plain_width: Option<u64>,
}

impl RankClass {
    fn of(job: &Job) -> RankClass {
        let request = &job.spec.request;
        let plain = ResourceRequest {
            task_count: request.task_count,
            processors_per_task: request.processors_per_task,
            ..ResourceRequest::default()
        };
        RankClass {
            system_priority: job.status.system_priority,
            user_priority: job.spec.user_priority,
            submit: job.status.dates.submit,
            duration: job.spec.duration,
            task_count: job.spec.request.task_count,
            processors_per_task: job.spec.request.processors_per_task,
            user: job.status.exec_user.clone(),
            qos: job.spec.qos_requested.clone(),
            plain_width: (*request == plain && job.spec.extra.dependencies.is_empty())
                .then(|| request.total_processors()),
        }
    }

    /// Whether no job of the class can start in a pass where `room` says how many
    /// processors are still free and how many the machine has: one that can never fit
    /// is not skipped (the pass must say so).
    fn cannot_start(&self, room: Option<Remaining>) -> bool {
        match (room, self.plain_width) {
            (Some(room), Some(width)) => width > room.free && width <= room.capacity,
            _ => false,
        }
    }
}

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
        heap: std::collections::BinaryHeap<ClassHead>,
        /// The free processors the heap was last cleared of classes that cannot start
        /// with: clearing them at once costs one pass over the heap, popping them one
        /// by one a logarithm each.
        cleared_at: Option<u64>,
    },
}

/// The best waiting job of a class not yet given in a pass, with its rank, ordered so
/// that the best is the heap's top.
pub(crate) struct ClassHead {
    rank: QueueRank,
    class: Arc<RankClass>,
    /// Its `(seq, index)` in the class.
    member: (u64, i64),
    position: usize,
}

impl PartialEq for ClassHead {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for ClassHead {}

impl PartialOrd for ClassHead {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ClassHead {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // QueueRank puts the best first; the heap pops the greatest.
        other.rank.queue_cmp(&self.rank)
    }
}

impl QueueWalk {
    /// The next job to consider; with `room`, jobs that cannot start in it are passed.
    pub(super) fn next(&mut self, queue: &Queue, room: Option<Remaining>) -> Option<usize> {
        match self {
            QueueWalk::Listed { after } => loop {
                let (&key, &position) = match after {
                    Some(last) => queue
                        .waiting
                        .range((std::ops::Bound::Excluded(*last), std::ops::Bound::Unbounded))
                        .next()?,
                    None => queue.waiting.iter().next()?,
                };
                *after = Some(key);
                let passed = room.is_some()
                    && queue
                        .keys
                        .get(&position)
                        .is_some_and(|(_, class)| class.cannot_start(room));
                if !passed {
                    return Some(position);
                }
            },
            QueueWalk::Ranked {
                first,
                given,
                heap,
                cleared_at,
            } => {
                if let Some(position) = first.take() {
                    *given = Some(position);
                    return Some(position);
                }
                if let Some(left) = room
                    && *cleared_at != Some(left.free)
                {
                    heap.retain(|h| !h.class.cannot_start(room) || Some(h.position) == *given);
                    *cleared_at = Some(left.free);
                }
                loop {
                    let head = heap.pop()?;
                    if head.class.cannot_start(room) && Some(head.position) != *given {
                        // Neither it nor any other of its class can start: the class
                        // leaves this pass.
                        continue;
                    }
                    // The next of its class (read live: the pass may have blocked some)
                    // takes its place, with the same score.
                    let next = queue.classes.get(&head.class).and_then(|members| {
                        members
                            .range((
                                std::ops::Bound::Excluded(head.member),
                                std::ops::Bound::Unbounded,
                            ))
                            .next()
                    });
                    let position = head.position;
                    if let Some((&member, &next_position)) = next {
                        heap.push(ClassHead {
                            rank: QueueRank {
                                seq: member.0,
                                index: member.1,
                                ..head.rank
                            },
                            member,
                            position: next_position,
                            ..head
                        });
                    }
                    if Some(position) != *given {
                        return Some(position);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{ArrayPart, JobSpec, JobStatus};
    use crate::policy::Weights;

    /// Jobs of a few users, lengths, widths, priorities and submission instants, some of
    /// them array sub-jobs sharing their master's number.
    fn jobs() -> Vec<Job> {
        let mut jobs = Vec::new();
        for seq in 1..=400u64 {
            // A field's choice among `n`, mixed from the job's number and the field's
            // salt, so that the fields vary independently.
            let pick = |salt: u64, n: u64| {
                let mixed = (seq ^ (salt << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                (mixed >> 33) % n
            };
            let mut spec = JobSpec {
                duration: [None, Some(60), Some(3600)][pick(1, 3) as usize],
                user_priority: [0, 0, 5, -3][pick(2, 4) as usize],
                qos_requested: (pick(3, 5) == 0).then(|| "high".to_string()),
                ..Default::default()
            };
            spec.request.task_count = 1 + pick(4, 3) as u32;
            let mut status = JobStatus {
                exec_user: ["ann", "bob", "cy"][pick(5, 3) as usize].into(),
                system_priority: if pick(6, 11) == 0 { 10 } else { 0 },
                ..Default::default()
            };
            status.dates.submit = 1000 + (seq as i64 / 25) * 7;
            let members = if pick(7, 13) == 0 { 3 } else { 1 };
            for index in 0..members {
                jobs.push(Job {
                    id: format!("D.{seq}.{index}"),
                    seq,
                    spec: spec.clone().into(),
                    status: status.clone(),
                    array: (members > 1).then(|| {
                        Box::new(ArrayPart::Member {
                            master: format!("D.{seq}"),
                            index,
                        })
                    }),
                });
            }
        }
        jobs
    }

    #[test]
    fn a_pass_walks_the_classes_in_rank_order() {
        let mut book = JobBook::new();
        let mut queue = Queue::new();
        for job in jobs() {
            let position = book.push(job.clone());
            queue.index(position, &job);
        }
        let mut usage = Usage::new(3600);
        usage.record("ann", 5000.0, 1000);
        usage.record("bob", 300.0, 1200);
        let weights = Weights {
            queue_minutes: 0.5,
            fairshare: 2.0,
            qos: [("high".to_string(), 7.0)].into(),
            ..Weights::default()
        };
        for (weights, reserve_oldest) in [(Weights::default(), false), (weights, true)] {
            let policy = Policy {
                weights,
                reserve_oldest,
                ..Policy::default()
            };
            let now = 2000;
            let priority = Priority {
                weights: &policy.weights,
                usage: &usage,
                now,
            };
            let mut expected: Vec<usize> = (0..book.len()).collect();
            expected.sort_by(|&a, &b| {
                priority
                    .rank(book.at(a))
                    .queue_cmp(&priority.rank(book.at(b)))
            });
            if reserve_oldest {
                // First in the queue's own order (system priority, then submission).
                let first = *queue.waiting.values().next().unwrap();
                expected.retain(|&p| p != first);
                expected.insert(0, first);
            }
            let mut walk = queue.walk(&policy, &usage, &book, now);
            let walked: Vec<usize> = std::iter::from_fn(|| walk.next(&queue, None)).collect();
            assert_eq!(walked, expected);
        }
        // A job that stops waiting leaves its class; the rest keep their order.
        let mut gone = book.at(5).as_ref().clone();
        gone.status.state = JobState::Running;
        queue.index(5, &gone);
        let policy = Policy::default();
        let mut walk = queue.walk(&policy, &usage, &book, 2000);
        let walked: Vec<usize> = std::iter::from_fn(|| walk.next(&queue, None)).collect();
        assert_eq!(walked.len(), book.len() - 1);
        assert!(!walked.contains(&5));
    }

    #[test]
    fn a_pass_without_reservations_left_passes_jobs_wider_than_what_is_free() {
        let mut book = JobBook::new();
        let mut queue = Queue::new();
        for job in jobs() {
            let position = book.push(job.clone());
            queue.index(position, &job);
        }
        let usage = Usage::new(3600);
        let wide = |p: usize| book.at(p).spec.request.task_count > 1;
        for (weights, reserve_oldest) in [
            (Weights::default(), true),
            (Weights::submission_order(), false),
        ] {
            let policy = Policy {
                weights,
                reserve_oldest,
                ..Policy::default()
            };
            let mut all = queue.walk(&policy, &usage, &book, 2000);
            let all: Vec<usize> = std::iter::from_fn(|| all.next(&queue, None)).collect();
            // The oldest job, given first, is never passed (no reservation is made
            // before it is considered).
            let first = reserve_oldest.then_some(all[0]);
            // One processor free of ten: the same order, less the wider jobs.
            let room = Some(Remaining {
                free: 1,
                capacity: 10,
            });
            let mut narrow = queue.walk(&policy, &usage, &book, 2000);
            let narrow: Vec<usize> = std::iter::from_fn(|| narrow.next(&queue, room)).collect();
            let expected: Vec<usize> = all
                .iter()
                .copied()
                .filter(|&p| !wide(p) || Some(p) == first)
                .collect();
            assert_eq!(narrow, expected);
            assert!(narrow.len() < all.len());
            // Jobs wider than the machine are never passed over: a pass must find that
            // they can never start.
            let tiny = Some(Remaining {
                free: 0,
                capacity: 1,
            });
            let mut walk = queue.walk(&policy, &usage, &book, 2000);
            let kept: Vec<usize> = std::iter::from_fn(|| walk.next(&queue, tiny)).collect();
            let expected: Vec<usize> = all
                .iter()
                .copied()
                .filter(|&p| wide(p) || Some(p) == first)
                .collect();
            assert_eq!(kept, expected);
        }
    }
}
