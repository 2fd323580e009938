//! The job book: every job in submission order, found by id, and indexed by the
//! attributes list queries filter on most (state, credentials, custom name), so that a query on
//! them does not look at every job.
//!
//! Jobs are `Arc<Job>`, replaced whole when they change (copy on write), so a reader
//! keeps the version it took under the read lock. Each index holds, per value, the set
//! of book positions as a compressed bitmap: a count or an intersection over a million
//! jobs takes microseconds. Jobs are never removed, so positions never move; an array's
//! sub-jobs follow their master in index order and are found by binary search. Beside
//! each job is its [`ScanRow`], the fields lists filter and sort by most, in contiguous
//! chunks, so that a list that must judge every job reads rows, not jobs.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use roaring::RoaringBitmap;

use crate::job::{Hold, Job, JobState};
use crate::sharded::{ChunkedVec, ShardedMap};

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

/// A string of the book's [`Strings`], or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interned(u32);

impl Interned {
    pub const NONE: Interned = Interned(u32::MAX);
}

/// The distinct strings the book's rows name (custom names, credentials, command
/// files), and the distinct lists of them (flags, the names of holds), each kept once;
/// like jobs, never removed.
#[derive(Default)]
pub struct Strings {
    texts: ChunkedVec<Arc<str>>,
    numbers: ShardedMap<Arc<str>, u32>,
    lists: ChunkedVec<Arc<[String]>>,
    list_numbers: ShardedMap<Arc<[String]>, u32>,
    /// The list of names each list of holds is interned as (found without making the
    /// names: a job's row is made again at each of its changes).
    hold_lists: HashMap<Box<[Hold]>, Interned>,
}

impl Strings {
    /// The names of `holds` (version 2's spelling), as a list; none when empty.
    fn intern_holds(&mut self, holds: &[Hold]) -> Interned {
        if holds.is_empty() {
            return Interned::NONE;
        }
        if let Some(&interned) = self.hold_lists.get(holds) {
            return interned;
        }
        let names: Vec<String> = holds.iter().map(|h| h.as_str().to_string()).collect();
        let interned = self.intern_list(&names);
        self.hold_lists.insert(holds.into(), interned);
        interned
    }

    fn intern_list(&mut self, words: &[String]) -> Interned {
        if let Some(&n) = self.list_numbers.get(words) {
            return Interned(n);
        }
        let n = self.lists.len() as u32;
        let list: Arc<[String]> = Arc::from(words);
        self.lists.push(list.clone());
        self.list_numbers.insert(list, n);
        Interned(n)
    }

    /// A list [`Strings::intern_list`] kept (empty for [`Interned::NONE`]).
    pub fn list(&self, interned: Interned) -> &[String] {
        self.lists.get(interned.0 as usize).map_or(&[], |l| &**l)
    }

    fn intern(&mut self, text: Option<&str>) -> Interned {
        let Some(text) = text else {
            return Interned::NONE;
        };
        if let Some(&n) = self.numbers.get(text) {
            return Interned(n);
        }
        let n = self.texts.len() as u32;
        let text: Arc<str> = Arc::from(text);
        self.texts.push(text.clone());
        self.numbers.insert(text, n);
        Interned(n)
    }

    pub fn get(&self, interned: Interned) -> Option<&str> {
        self.texts.get(interned.0 as usize).map(|t| &**t)
    }

    /// The number `text` was interned as, if it was.
    pub fn find(&self, text: &str) -> Option<Interned> {
        self.numbers.get(text).map(|&n| Interned(n))
    }
}

/// A set of kinds of hold, one bit each: what a job's row says of its holds, which
/// the book also indexes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HoldSet(u8);

// A kind of hold is its bit in a set and its place in the index: there are at most 8,
// and `Hold::ALL` lists them in declaration order.
const _: () = {
    assert!(Hold::ALL.len() <= 8);
    let mut i = 0;
    while i < Hold::ALL.len() {
        assert!(Hold::ALL[i] as usize == i);
        i += 1;
    }
};

impl HoldSet {
    pub fn of(holds: impl IntoIterator<Item = Hold>) -> HoldSet {
        HoldSet(holds.into_iter().fold(0, |set, hold| set | 1 << hold as u8))
    }

    /// Whether the two sets share a kind.
    pub fn meets(self, other: HoldSet) -> bool {
        self.0 & other.0 != 0
    }

    /// The kinds in the set, in [`Hold::ALL`]'s order.
    pub fn kinds(self) -> impl Iterator<Item = Hold> {
        Hold::ALL
            .into_iter()
            .filter(move |&hold| self.meets(HoldSet::of([hold])))
    }
}

/// A job id short enough to be kept inside its row (a scheduler name and a number
/// are); a longer one is read from the job.
#[derive(Debug, Clone, Copy)]
pub struct InlineId {
    len: u8,
    bytes: [u8; 23],
}

impl InlineId {
    fn of(id: &str) -> Option<InlineId> {
        let mut bytes = [0; 23];
        bytes.get_mut(..id.len())?.copy_from_slice(id.as_bytes());
        Some(InlineId {
            len: id.len() as u8,
            bytes,
        })
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: the first `len` bytes are a copy of a whole `&str` (`InlineId::of`),
        // and the bytes never change after; a list scan reads millions of these, so
        // the UTF-8 check is not repeated.
        unsafe { std::str::from_utf8_unchecked(&self.bytes[..self.len as usize]) }
    }
}

/// What list queries read most of a job, kept beside it in chunks of contiguous rows: a
/// scan over a deep book that reads only these never follows a pointer to a job, its
/// spec or its strings (each a cache miss), which is most of what a scan costs.
#[derive(Debug, Clone, Copy)]
pub struct ScanRow {
    /// `None` when the id does not fit (read it from the job).
    pub id: Option<InlineId>,
    pub state: JobState,
    pub custom_name: Interned,
    pub user: Interned,
    pub account: Interned,
    pub group: Interned,
    pub class: Interned,
    pub qos: Interned,
    pub command_file: Interned,
    /// The flags, a list of [`Strings`].
    pub flags: Interned,
    /// The names of the holds, a list of [`Strings`].
    pub holds: Interned,
    /// The kinds of the holds.
    pub hold_set: HoldSet,
    pub task_count: u32,
    pub user_priority: i64,
    pub system_priority: i64,
    pub submit: i64,
    /// When the job completed ([`ScanRow::completion`]), or [`NOT_COMPLETED`].
    completion: i64,
}

/// What a row's completion date is while the job has none (an `Option` would make
/// every row 8 bytes longer, and a scan reads them all).
const NOT_COMPLETED: i64 = i64::MIN;

impl ScanRow {
    /// When the job completed, if it has.
    pub fn completion(&self) -> Option<i64> {
        Some(self.completion).filter(|&date| date != NOT_COMPLETED)
    }

    /// The row's string of an attribute other than the state (which is its own field).
    pub fn interned(&self, attribute: Attribute) -> Interned {
        match attribute {
            Attribute::User => self.user,
            Attribute::Account => self.account,
            Attribute::Class => self.class,
            Attribute::Qos => self.qos,
            Attribute::Group => self.group,
            Attribute::CustomName => self.custom_name,
            Attribute::State => Interned::NONE,
        }
    }

    fn of(job: &Job, strings: &mut Strings) -> ScanRow {
        ScanRow {
            id: InlineId::of(&job.id),
            state: job.status.state,
            custom_name: strings.intern(job.spec.custom_name.as_deref()),
            user: strings.intern(Some(job.user())),
            account: strings.intern(job.spec.account.as_deref()),
            group: strings.intern(job.spec.group.as_deref()),
            class: strings.intern(job.spec.job_class.as_deref()),
            qos: strings.intern(job.spec.qos_requested.as_deref()),
            command_file: strings.intern(Some(&job.spec.command_file)),
            flags: strings.intern_list(&job.spec.flags),
            holds: strings.intern_holds(&job.status.holds),
            hold_set: HoldSet::of(job.status.holds.iter().copied()),
            task_count: job.spec.request.task_count,
            user_priority: job.spec.user_priority,
            system_priority: job.status.system_priority,
            submit: job.status.dates.submit,
            completion: job.status.dates.completion.unwrap_or(NOT_COMPLETED),
        }
    }
}

/// Every job, in submission order, with an index by id and by [`Attribute`]. Jobs are
/// never removed, so a position is a job's identity for the life of the book.
#[derive(Default)]
pub struct JobBook {
    jobs: Vec<Arc<Job>>,
    /// The [`ScanRow`] of each job, at its position; made again whenever it changes.
    rows: ChunkedVec<ScanRow>,
    strings: Strings,
    /// Position by the number at the end of the id (`<name>.<seq>`).
    by_seq: ShardedMap<u64, u32>,
    /// Array sub-jobs (`<name>.<seq>[<index>]`, right after their master, by index):
    /// the first position and how many, by the master's number.
    members: ShardedMap<u64, (u32, u32)>,
    /// Maps that gain an entry per job are sharded: see [`ShardedMap`].
    index: ShardedMap<(Attribute, Box<str>), RoaringBitmap>,
    /// Positions by kind of hold (a job may have several), in [`Hold::ALL`]'s order.
    held: [RoaringBitmap; Hold::ALL.len()],
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

    /// The scan row of the job at `position` (always the same version as [`JobBook::at`]).
    pub fn row(&self, position: usize) -> &ScanRow {
        &self.rows[position]
    }

    /// The strings rows name.
    pub fn strings(&self) -> &Strings {
        &self.strings
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

    /// The positions of the published jobs that have not ended (of `user` only, when
    /// given), from the state index: what costs the live work, not the history.
    pub fn live_positions(&self, user: Option<&str>) -> RoaringBitmap {
        let mut live = RoaringBitmap::new();
        for state in JobState::ALL.into_iter().filter(|s| !s.is_final()) {
            if let Some(set) = self.with(Attribute::State, state.as_str()) {
                live |= set;
            }
        }
        if let Some(user) = user {
            match self.with(Attribute::User, user) {
                Some(theirs) => live &= theirs,
                None => return RoaringBitmap::new(),
            }
        }
        live.remove_range(self.published_len() as u32..);
        live
    }

    /// The positions of the jobs that have a hold of this kind.
    pub fn with_hold(&self, hold: Hold) -> &RoaringBitmap {
        &self.held[hold as usize]
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
        let row = ScanRow::of(&job, &mut self.strings);
        self.index_holds(position, HoldSet::default(), row.hold_set);
        self.rows.push(row);
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
        let row = ScanRow::of(&job, &mut self.strings);
        self.index_holds(position, self.rows[position].hold_set, row.hold_set);
        self.rows[position] = row;
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

    /// Moves `position` from the hold index's sets of `before` to those of `after`.
    fn index_holds(&mut self, position: usize, before: HoldSet, after: HoldSet) {
        if before != after {
            for hold in before.kinds() {
                self.held[hold as usize].remove(position as u32);
            }
            for hold in after.kinds() {
                self.held[hold as usize].insert(position as u32);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobSpec;

    fn job(seq: u64, id: String, custom_name: Option<&str>) -> Job {
        Job {
            id,
            seq,
            spec: Arc::new(JobSpec {
                custom_name: custom_name.map(str::to_string),
                command_file: "/bin/true".into(),
                user_priority: 3,
                ..Default::default()
            }),
            status: Default::default(),
            array: None,
        }
    }

    /// A row says what its job says, after a change too, and an id too long for the
    /// row is read from the job.
    #[test]
    fn a_row_follows_its_job() {
        let mut book = JobBook::new();
        let short = book.push(job(1, "Drover.1".into(), Some("a")));
        let long_id = "a-scheduler-named-at-length.2".to_string();
        let long = book.push(job(2, long_id.clone(), None));
        let text = |book: &JobBook, i| book.strings().get(i).map(str::to_string);

        let row = *book.row(short);
        assert_eq!(
            row.id.map(|id| id.as_str().to_string()),
            Some("Drover.1".into())
        );
        assert_eq!(text(&book, row.custom_name), Some("a".into()));
        assert_eq!(text(&book, row.command_file), Some("/bin/true".into()));
        assert_eq!((row.user_priority, row.state), (3, JobState::default()));
        assert!(book.row(long).id.is_none());
        assert_eq!(book.row(long).custom_name, Interned::NONE);
        assert_eq!(
            InlineId::of(&"x".repeat(23)).map(|id| id.as_str().len()),
            Some(23)
        );

        book.change(short, |job| {
            Arc::make_mut(&mut job.spec).custom_name = Some("b".into());
            job.status.state = JobState::Completed;
        });
        let row = *book.row(short);
        assert_eq!(text(&book, row.custom_name), Some("b".into()));
        assert_eq!(row.state, JobState::Completed);
        // The same string is kept once.
        let again = book.push(job(3, "Drover.3".into(), Some("b")));
        assert_eq!(book.row(again).custom_name, row.custom_name);
    }

    /// A row's holds are the names of its job's, in its order, and its completion date
    /// is the job's, after each change; the hold index follows.
    #[test]
    fn a_row_names_its_holds_and_knows_its_completion() {
        let mut book = JobBook::new();
        let a = book.push(job(1, "Drover.1".into(), None));
        let b = book.push(job(2, "Drover.2".into(), None));
        let holds = |book: &JobBook, at| book.strings().list(book.row(at).holds).to_vec();
        assert!(holds(&book, a).is_empty());
        assert_eq!(book.row(a).completion(), None);

        book.change(a, |job| job.status.holds = vec![Hold::System, Hold::User]);
        book.change(b, |job| job.status.holds = vec![Hold::User, Hold::System]);
        assert_eq!(holds(&book, a), ["System", "User"]);
        assert_eq!(holds(&book, b), ["User", "System"]);
        book.change(b, |job| job.status.holds = vec![Hold::System, Hold::User]);
        assert_eq!(book.row(b).holds, book.row(a).holds);
        let with = |book: &JobBook, hold| book.with_hold(hold).iter().collect::<Vec<u32>>();
        assert_eq!(with(&book, Hold::System), [0, 1]);
        assert!(with(&book, Hold::Batch).is_empty());
        assert!(
            book.row(a)
                .hold_set
                .meets(HoldSet::of([Hold::Batch, Hold::User]))
        );
        assert!(
            !book
                .row(a)
                .hold_set
                .meets(HoldSet::of([Hold::Batch, Hold::Defer]))
        );

        book.change(a, |job| {
            job.status.holds.clear();
            job.status.dates.completion = Some(1_700_000_000);
        });
        assert!(holds(&book, a).is_empty());
        assert_eq!(book.row(a).completion(), Some(1_700_000_000));
        assert_eq!(
            (with(&book, Hold::System), with(&book, Hold::User)),
            (vec![1], vec![1])
        );
    }
}
