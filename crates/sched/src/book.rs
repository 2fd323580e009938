//! The job book: every job in submission order, found by id, and indexed by the
//! attributes list queries filter on most (state, credentials, custom name), so that a query on
//! them does not look at every job.
//!
//! Jobs are `Arc<Job>`, replaced whole when they change (copy on write), so a reader
//! keeps the version it took under the read lock. Each index holds, per value, the set
//! of book positions as a compressed bitmap: a count or an intersection over a million
//! jobs takes microseconds. Jobs are never removed, so positions never move; an array's
//! sub-jobs follow their master in index order and are found by binary search.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use roaring::RoaringBitmap;

use crate::job::Job;

/// Attributes with an index: a set of book positions per value (a compressed bitmap, so
/// that intersections and counts over a million jobs take microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attribute {
    State,
    /// The job's user: the one it named, else its submitter.
    User,
    Account,
    Class,
    Qos,
    Group,
    /// The name its submitter gave it (portals look jobs up by it).
    CustomName,
}

impl Attribute {
    pub const ALL: [Attribute; 7] = [
        Attribute::State,
        Attribute::User,
        Attribute::Account,
        Attribute::Class,
        Attribute::Qos,
        Attribute::Group,
        Attribute::CustomName,
    ];

    /// The job's value of this attribute (`None` when it has none).
    pub fn of(self, job: &Job) -> Option<&str> {
        match self {
            Attribute::State => Some(job.status.state.as_str()),
            Attribute::User => Some(job.user()),
            Attribute::Account => job.spec.account.as_deref(),
            Attribute::Class => job.spec.job_class.as_deref(),
            Attribute::Qos => job.spec.qos_requested.as_deref(),
            Attribute::Group => job.spec.group.as_deref(),
            Attribute::CustomName => job.spec.custom_name.as_deref(),
        }
    }
}

/// Every job, in submission order, with an index by id and by [`Attribute`]. Jobs are
/// never removed, so a position is a job's identity for the life of the book.
#[derive(Default)]
pub struct JobBook {
    jobs: Vec<Arc<Job>>,
    /// Position by the number at the end of the id (`<name>.<seq>`).
    by_seq: HashMap<u64, u32>,
    /// Array sub-jobs (`<name>.<seq>[<index>]`, right after their master, by index):
    /// the first position and how many, by the master's number.
    members: HashMap<u64, (u32, u32)>,
    index: HashMap<(Attribute, Box<str>), RoaringBitmap>,
    /// Whether submission dates never decrease with position (the wall clock never went
    /// back): then position order is submission-date order.
    submit_order: bool,
    /// How many of the first jobs readers see: those whose insert is durable.
    published: Arc<Published>,
}

/// The length of the book's durable prefix, moved by the journal thread as batches
/// commit. Jobs are appended and batches commit in order, so "durable" is a prefix: a
/// job answered "not made" (its batch failed) lies past it and is never seen, until a
/// reload makes a new book without it. Each book has its own, so a batch of an earlier
/// book that commits late moves nothing.
#[derive(Default, Debug)]
pub struct Published {
    len: AtomicUsize,
    /// A batch failed: nothing past `len` becomes visible in this book any more.
    stopped: AtomicBool,
}

impl Published {
    /// The first `len` jobs are durable (their batch committed).
    pub fn committed(&self, len: usize) {
        if !self.stopped.load(Ordering::Acquire) {
            self.len.fetch_max(len, Ordering::AcqRel);
        }
    }

    /// A batch failed: the jobs it added, and any added after it, stay hidden.
    pub fn failed(&self) {
        self.stopped.store(true, Ordering::Release);
    }
}

impl JobBook {
    pub fn new() -> JobBook {
        JobBook {
            submit_order: true,
            ..Default::default()
        }
    }

    /// The job `id`, durable or not: the engine's view.
    pub fn get(&self, id: &str) -> Option<&Arc<Job>> {
        self.position(id).map(|p| &self.jobs[p])
    }

    /// How many jobs readers see (the durable prefix of the book).
    pub fn published_len(&self) -> usize {
        self.published
            .len
            .load(Ordering::Acquire)
            .min(self.jobs.len())
    }

    /// The jobs readers see, in submission order.
    pub fn published_jobs(&self) -> &[Arc<Job>] {
        &self.jobs[..self.published_len()]
    }

    /// The job `id` if readers see it (its insert is durable).
    pub fn published(&self, id: &str) -> Option<&Arc<Job>> {
        self.published_position(id).map(|p| &self.jobs[p])
    }

    /// The position of `id` if readers see it.
    pub fn published_position(&self, id: &str) -> Option<usize> {
        self.position(id).filter(|&p| p < self.published_len())
    }

    /// Where the journal reports how much of this book is durable.
    pub(crate) fn publication(&self) -> &Arc<Published> {
        &self.published
    }

    /// Every job of the book is durable (just loaded from the store).
    pub(crate) fn publish_all(&self) {
        self.published.committed(self.jobs.len());
    }

    pub fn at(&self, position: usize) -> &Arc<Job> {
        &self.jobs[position]
    }

    pub fn all(&self) -> &[Arc<Job>] {
        &self.jobs
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Positions of the jobs whose `attribute` is `value`, in submission order (durable
    /// or not: readers bound them by [`JobBook::published_len`]).
    pub fn with(&self, attribute: Attribute, value: &str) -> Option<&RoaringBitmap> {
        self.index.get(&(attribute, Box::from(value)))
    }

    /// Whether position order is also the order of submission dates.
    pub fn in_submit_order(&self) -> bool {
        self.submit_order
    }

    pub fn position(&self, id: &str) -> Option<usize> {
        if let Some(member) = id.strip_suffix(']') {
            return self.member_position(id, member);
        }
        let seq = id.rsplit_once('.')?.1.parse::<u64>().ok()?;
        let position = *self.by_seq.get(&seq)? as usize;
        (self.jobs[position].id == id).then_some(position)
    }

    /// A sub-job's position: a binary search by index among its array's sub-jobs.
    fn member_position(&self, id: &str, member: &str) -> Option<usize> {
        let (master, index) = member.rsplit_once('[')?;
        let index = index.parse::<i64>().ok()?;
        let seq = master.rsplit_once('.')?.1.parse::<u64>().ok()?;
        let &(first, count) = self.members.get(&seq)?;
        let (mut low, mut high) = (first as usize, (first + count) as usize);
        while low < high {
            let middle = low + (high - low) / 2;
            let at = self.jobs[middle]
                .array_member()
                .map_or(i64::MIN, |(_, i)| i);
            match at.cmp(&index) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => {
                    low = middle;
                    break;
                }
            }
        }
        let position = low;
        if position >= (first + count) as usize {
            return None;
        }
        (self.jobs[position].id == id).then_some(position)
    }

    pub(crate) fn push(&mut self, job: Job) -> usize {
        let position = self.jobs.len();
        if let Some(last) = self.jobs.last()
            && job.status.dates.submit < last.status.dates.submit
        {
            self.submit_order = false;
        }
        if job.array_member().is_some() {
            self.members
                .entry(job.seq)
                .or_insert((position as u32, 0))
                .1 += 1;
        } else {
            self.by_seq.insert(job.seq, position as u32);
        }
        self.add_to_index(position, &job);
        self.jobs.push(Arc::new(job));
        position
    }

    /// Changes the job at `position`; readers holding the old version keep it.
    pub(crate) fn change<R>(&mut self, position: usize, change: impl FnOnce(&mut Job) -> R) -> R {
        let before: Vec<Option<Box<str>>> = Attribute::ALL
            .iter()
            .map(|a| a.of(&self.jobs[position]).map(Box::from))
            .collect();
        let job = Arc::make_mut(&mut self.jobs[position]);
        let result = change(job);
        let job = self.jobs[position].clone();
        for (attribute, old) in Attribute::ALL.into_iter().zip(before) {
            let new = attribute.of(&job);
            if old.as_deref() != new {
                if let Some(old) = old {
                    self.remove_from(attribute, old, position);
                }
                if let Some(new) = new {
                    self.index
                        .entry((attribute, Box::from(new)))
                        .or_default()
                        .insert(position as u32);
                }
            }
        }
        result
    }

    fn add_to_index(&mut self, position: usize, job: &Job) {
        for attribute in Attribute::ALL {
            if let Some(value) = attribute.of(job) {
                self.index
                    .entry((attribute, Box::from(value)))
                    .or_default()
                    .insert(position as u32);
            }
        }
    }

    fn remove_from(&mut self, attribute: Attribute, value: Box<str>, position: usize) {
        let key = (attribute, value);
        if let Some(set) = self.index.get_mut(&key) {
            set.remove(position as u32);
            if set.is_empty() {
                self.index.remove(&key);
            }
        }
    }
}
