//! The queue part of the engine: the waiting jobs in queue order, the jobs holding
//! resources, the waiting preemptors, and the next submission number. Each set holds
//! book positions; [`Queue::index`] keeps them in step with a job's state.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::book::JobBook;
use crate::clock::Seconds;
use crate::dependency;
use crate::job::{Job, JobState};
use crate::policy::Policy;
use crate::policy::priority::{Priority, QueueRank, Usage};

pub(crate) struct Queue {
    /// Jobs waiting to be placed (Idle, or Blocked on a dependency), by queue order, to
    /// their book position.
    waiting: BTreeMap<QueueKey, usize>,
    /// The key of each waiting job: always the inverse of `waiting`.
    keys: HashMap<usize, QueueKey>,
    /// Book positions of jobs holding resources (Starting, Running, Suspended, and
    /// those being stopped until their process is gone).
    running: BTreeSet<usize>,
    /// Waiting jobs flagged PREEMPTOR.
    preemptors: BTreeSet<usize>,
    next_seq: u64,
}

impl Queue {
    pub(super) fn new() -> Queue {
        Queue {
            waiting: BTreeMap::new(),
            keys: HashMap::new(),
            running: BTreeSet::new(),
            preemptors: BTreeSet::new(),
            next_seq: 1,
        }
    }

    /// Empties every set; submission numbers go on from `next_seq`.
    pub(super) fn reset(&mut self, next_seq: u64) {
        self.waiting.clear();
        self.keys.clear();
        self.running.clear();
        self.preemptors.clear();
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
        // A job submitted to the resource manager directly waits there, not here.
        let waiting = (job.status.state == JobState::Idle && !job.spec.extra.rm_detected)
            || (job.status.state == JobState::Blocked
                && job
                    .status
                    .block
                    .as_ref()
                    .is_some_and(|b| b.kind == dependency::WAITING));
        let key = QueueKey::of(job);
        let mut joined = false;
        match (self.keys.get(&position).copied(), waiting) {
            (Some(old), true) if old == key => {}
            (Some(old), _) => {
                self.waiting.remove(&old);
                self.keys.remove(&position);
                if waiting {
                    self.waiting.insert(key, position);
                    self.keys.insert(position, key);
                }
            }
            (None, true) => {
                self.waiting.insert(key, position);
                self.keys.insert(position, key);
                joined = true;
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
        joined
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
        let ranked: Vec<_> = self
            .waiting
            .values()
            .map(|&position| Ranked(priority.rank(book.at(position)), position))
            .collect();
        let first = policy
            .reserve_oldest
            .then(|| self.waiting.values().next().copied())
            .flatten();
        QueueWalk::Ranked {
            first,
            given: None,
            heap: std::collections::BinaryHeap::from(ranked),
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
    pub(super) fn next(&mut self, queue: &Queue) -> Option<usize> {
        match self {
            QueueWalk::Listed { after } => {
                let (&key, &position) = match after {
                    Some(last) => queue
                        .waiting
                        .range((std::ops::Bound::Excluded(*last), std::ops::Bound::Unbounded))
                        .next()?,
                    None => queue.waiting.iter().next()?,
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
