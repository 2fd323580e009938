//! The scan of the candidates the indexes leave ([`scan`]), judged on narrow rows
//! ([`Narrow`]) in runs side by side, the book's lock given up every [`HOLD_AT_MOST`]:
//! see the [module](super) for the whole.

use std::sync::Arc;
use std::time::Instant;

use drover_query::{DocView, ListQuery, Page, Sort, SortValue, Top};
use roaring::RoaringBitmap;
use serde_json::Value;

use super::Showing;
use super::fields::{Narrow, Row};
use super::lookup::{Key, Recheck, in_date_order, positions};
use super::threads::{at_normal_priority, lower_this_thread};
use crate::Scheduler;
use crate::book::{JobBook, ScanRow};
use crate::job::Job;

/// The evaluator's part of a list: which positions to judge, and how the matches are
/// ordered.
pub(super) struct Scan {
    pub(super) candidates: Candidates,
    /// `Some(descending)` when the list is sorted by submission date alone over a book
    /// in submission order: the matches' positions are their order, so the scan keeps
    /// only which positions match (no sort values), and the page is cut as
    /// [`by_indexes`](super::lookup::by_indexes)
    /// cuts a covered one.
    pub(super) date_order: Option<bool>,
    /// The filter's index lookups and the listing's states, checked again on each
    /// candidate's row ([`Recheck`]).
    pub(super) rechecked: Vec<(Key, Vec<String>)>,
    /// The query with only what the lookups leave of its filter.
    pub(super) query: ListQuery,
    /// Whether every path of that filter and of the sort is read from the scan row, not
    /// the job ([`Narrow::reads_jobs`]).
    pub(super) rows_only: bool,
}

/// Candidates few enough that judging their scan rows costs about what an indexed list
/// does (a row is judged in 30-50 ns: a few ms): such a scan takes its turn apart from
/// costly ones, and runs on one thread. In a soak with one client looping on a scan of
/// every job, an indexed list that still had to sort its 100,000 candidates waited for
/// that scan each time and took its latency (p50 104-147 ms at 0.6-1.2M jobs).
const NARROW_SCAN: usize = 65_536;

impl Scan {
    /// Whether the scan is cheap whatever it asks: at most [`NARROW_SCAN`] candidates,
    /// judged on their rows alone. A path read from the job (a rendered member can cost
    /// a microsecond or more, and its length is the user's) makes it costly, however few
    /// the candidates: an ordinary user's candidates are all their own jobs.
    pub(super) fn is_narrow(&self) -> bool {
        self.rows_only && self.candidates.len() <= NARROW_SCAN
    }
}

/// The positions a scan judges, in position order.
pub(super) enum Candidates {
    /// Those the index lookups left.
    Set(RoaringBitmap),
    /// Every job the book held when the list began.
    Below(u32),
}

impl Candidates {
    fn len(&self) -> usize {
        match self {
            Candidates::Set(set) => set.len() as usize,
            Candidates::Below(len) => *len as usize,
        }
    }

    /// `count` positions spread evenly over the `k`-th of `n` runs ([`Candidates::part`]),
    /// in position order, from its first to its last (fewer in a shorter run).
    fn samples(&self, k: usize, n: usize, count: usize) -> Vec<u32> {
        let len = self.len();
        let (from, to) = (len * k / n, len * (k + 1) / n);
        if from >= to {
            return Vec::new();
        }
        let last = to - 1 - from;
        let mut ranks: Vec<usize> = (0..count)
            .map(|i| from + last * i / (count - 1).max(1))
            .collect();
        ranks.dedup();
        ranks
            .into_iter()
            .filter_map(|rank| match self {
                Candidates::Set(set) => set.select(rank as u32),
                Candidates::Below(_) => Some(rank as u32),
            })
            .collect()
    }

    /// The `k`-th of `n` runs of about equal length: each candidate's rank among all
    /// (the list's order, that ties keep) and its position, in rank order or backwards.
    fn part(
        &self,
        k: usize,
        n: usize,
        backwards: bool,
    ) -> Box<dyn Iterator<Item = (usize, u32)> + '_> {
        let len = self.len();
        let (from, to) = (len * k / n, len * (k + 1) / n);
        match (self, backwards) {
            (Candidates::Set(set), false) => {
                Box::new((from..).zip(set.iter().skip(from).take(to - from)))
            }
            (Candidates::Set(set), true) => Box::new(
                (from..to)
                    .rev()
                    .zip(set.iter().rev().skip(len - to).take(to - from)),
            ),
            (Candidates::Below(_), false) => Box::new((from..to).map(|p| (p, p as u32))),
            (Candidates::Below(_), true) => Box::new((from..to).rev().map(|p| (p, p as u32))),
        }
    }
}

/// Jobs taken from the candidates at a time, judged under read locks of the book held
/// for at most [`HOLD_AT_MOST`] each.
const CHUNK: usize = 1024;

/// Jobs judged between two looks at the clock.
const DEADLINE_EVERY: usize = 256;

/// The longest a scan holds the book's read lock at once. A scan runs at the lowest CPU
/// priority: any other thread may preempt it while it holds the lock, and the engine
/// then waits for the lock until the scan gets a core again. The shorter the hold, the
/// rarer that is.
const HOLD_AT_MOST: std::time::Duration = std::time::Duration::from_micros(200);

/// Jobs judged under the lock between two looks at how long it has been held.
const HOLD_CHECK_EVERY: usize = 64;

/// Below this many candidates a scan is not worth a second thread (one costs tens of
/// microseconds; judging this many jobs, about a millisecond).
const PARALLEL_FROM: usize = 2048;

/// A scan that ran past its deadline.
pub(super) struct OverBudget {
    pub judged: usize,
}

/// What one part of a scan found.
enum Found<'q> {
    /// The page's best candidates so far.
    Top(Top<'q, Arc<Job>>),
    /// The matching positions (a list in submission-date order).
    Positions(RoaringBitmap),
}

/// The evaluator's answer over the candidates [`by_indexes`](super::lookup::by_indexes)
/// left, each judged by what the index lookups leave of the filter on its rendering by
/// `filter` (only the paths of that rest and of the sort: see [`Narrow`]). The
/// candidates are cut in as many runs as there are processors, up to 4 (for a long list
/// that is not narrow: [`Scan::is_narrow`]), judged side by side on threads of the
/// lowest CPU priority; each takes the book's read lock a chunk at a time and
/// keeps only the page's best candidates ([`Top`]); past `deadline` the scan stops.
pub(super) fn scan(
    scheduler: &Scheduler,
    scan: &Scan,
    filter: Showing<'_>,
    shown: Showing<'_>,
    deadline: Instant,
) -> Result<Page<Value>, OverBudget> {
    let query = &scan.query;
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get());
    let parts = if scan.candidates.len() >= PARALLEL_FROM && !scan.is_narrow() {
        processors.min(4)
    } else {
        1
    };
    let judge = |k: usize| judge_part(scheduler, scan, k, parts, query, filter, deadline);
    let found: Vec<Result<Found<'_>, OverBudget>> = if parts == 1 {
        vec![judge(0)]
    } else {
        std::thread::scope(|threads| {
            let others: Vec<_> = (1..parts)
                .map(|k| {
                    threads.spawn(move || {
                        lower_this_thread();
                        judge(k)
                    })
                })
                .collect();
            let mut found = vec![judge(0)];
            found.extend(others.into_iter().map(|t| t.join().expect("a scan part")));
            found
        })
    };
    let mut judged = 0;
    let mut parts_found = Vec::with_capacity(found.len());
    let mut over = false;
    for part in found {
        match part {
            Ok(found) => parts_found.push(found),
            Err(stopped) => {
                over = true;
                judged += stopped.judged;
            }
        }
    }
    if over {
        return Err(OverBudget { judged });
    }
    let mut parts_found = parts_found.into_iter();
    match parts_found.next().expect("at least one part") {
        Found::Top(first) => {
            let top = parts_found.fold(first, |all, part| match part {
                Found::Top(part) => all.merge(part),
                Found::Positions(_) => unreachable!("all parts find alike"),
            });
            let found = top.finish();
            Ok(Page {
                total: found.total,
                items: found.items.iter().map(|job| shown.job(job)).collect(),
            })
        }
        Found::Positions(first) => {
            let matches = parts_found.fold(first, |all, part| match part {
                Found::Positions(part) => all | part,
                Found::Top(_) => unreachable!("all parts find alike"),
            });
            let descending = scan.date_order.expect("positions only in date order");
            let paging = &query.paging;
            let wanted = paging
                .offset
                .saturating_add(paging.max.unwrap_or(usize::MAX));
            let matches = Some(matches);
            let items = read_book(scheduler, |book| {
                let ordered = in_date_order(
                    book,
                    positions(book, &matches, descending),
                    descending,
                    wanted,
                );
                ordered
                    .into_iter()
                    .skip(paging.offset)
                    .take(paging.max.unwrap_or(usize::MAX))
                    .map(|p| shown.job(book.at(p as usize)))
                    .collect()
            });
            let total = matches.map_or(0, |m| m.len() as usize);
            Ok(Page { total, items })
        }
    }
}

/// Reads the job book under its lock, at the normal priority on a scan's lowered thread
/// ([`at_normal_priority`]).
fn read_book<R>(scheduler: &Scheduler, read: impl FnOnce(&JobBook) -> R) -> R {
    at_normal_priority(|| scheduler.with_jobs(read))
}

/// Judges the `k`-th of `parts` runs of the candidates.
fn judge_part<'q>(
    scheduler: &Scheduler,
    scan: &Scan,
    k: usize,
    parts: usize,
    query: &'q ListQuery,
    filter: Showing<'_>,
    deadline: Instant,
) -> Result<Found<'q>, OverBudget> {
    // A list in date order needs no sort values: the filter's paths are rendered alone.
    let no_sort = Sort::default();
    let sort = if scan.date_order.is_some() {
        &no_sort
    } else {
        &query.sort
    };
    let narrow = Narrow::of(&query.filter, sort, filter.render.version);
    let backwards = !sort.is_empty()
        && read_book(scheduler, |book| {
            let mut row = narrow.row(filter.render, filter.shape);
            let keys: Vec<_> = scan
                .candidates
                .samples(k, parts, ORDER_SAMPLES)
                .into_iter()
                .map(|position| {
                    row.fill(book, position as usize);
                    sort.keys_of(row.view())
                })
                .collect();
            runs_backwards(sort, &keys)
        });
    let mut positions = scan.candidates.part(k, parts, backwards).peekable();
    let mut found = match scan.date_order {
        Some(_) => Found::Positions(RoaringBitmap::new()),
        None => Found::Top(Top::new(query)),
    };
    let reads_jobs = narrow.reads_jobs();
    // Loading jobs ahead pays only while jobs are read: a sort on a whole object may
    // name fields of the job yet mostly decide on its row's.
    let mut load_jobs = reads_jobs;
    let mut window = JobReads::default();
    // A job costs about as much as the query has paths: a query of many clauses reads
    // the clock more often, so that a hold stays short whatever the query.
    let check_every = (HOLD_CHECK_EVERY * 4 / narrow.paths().max(4)).max(1);
    let mut chunk = Vec::with_capacity(CHUNK);
    // `chunk[next..]` is yet to be judged.
    let mut next = 0;
    let mut judged = 0;
    let over = |judged: usize| judged.is_multiple_of(DEADLINE_EVERY) && Instant::now() > deadline;
    loop {
        if next == chunk.len() {
            chunk.clear();
            chunk.extend(positions.by_ref().take(CHUNK));
            next = 0;
            if chunk.is_empty() {
                break;
            }
        }
        // A row borrows from the book, so it is judged under the book's lock, held for
        // at most HOLD_AT_MOST at a time.
        let stopped = read_book(scheduler, |book| {
            let held = Instant::now();
            let rechecks = Recheck::of(book, &scan.rechecked);
            let mut row = narrow.row(filter.render, filter.shape);
            let first = next;
            for i in first..chunk.len() {
                if over(judged) {
                    return true;
                }
                // Never before the first job: each hold judges at least one. Rendering a
                // member costs microseconds (more for a long list of messages): after a
                // job that rendered one, the clock is read at once.
                let due = (i - first).is_multiple_of(check_every) || row.rendered_any();
                if i > first && due && held.elapsed() > HOLD_AT_MOST {
                    next = i;
                    window.reads += row.take_job_reads();
                    return false;
                }
                judged += 1;
                if window.judged(&row) {
                    load_jobs = reads_jobs && window.reads_often();
                    window = JobReads::default();
                }
                if load_jobs {
                    load_ahead(book, &chunk, i);
                }
                load_row_ahead(book, &chunk, i);
                let (rank, position) = chunk[i];
                if !rechecks.is_empty() {
                    let scan_row = book.row(position as usize);
                    if !rechecks.iter().all(|check| check.passes(scan_row)) {
                        continue;
                    }
                }
                row.fill(book, position as usize);
                let job = book.at(position as usize);
                offer(&mut found, query, rank, position, row.view(), job);
            }
            next = chunk.len();
            window.reads += row.take_job_reads();
            false
        });
        if stopped {
            return Err(OverBudget { judged });
        }
    }
    Ok(found)
}

/// How many of a run's candidates, evenly spread, tell which way it is judged.
const ORDER_SAMPLES: usize = 17;

/// Whether a run of candidates is best judged backwards, by the sort values of
/// candidates spread evenly over it (`samples`, in position order): when at least three
/// in four steps from one sample to the next go to a value that sorts before. Sort keys
/// tend to follow the book's order one way or the other (ids, dates and numbered names
/// grow with it, the time queued shrinks): judged from the end the page wants first,
/// few later matches beat the page's worst and need keeping. Otherwise forwards: ties
/// keep the book's order, so judged forwards each loses to the page's worst at once,
/// where backwards each would beat it (a key a fifth of the jobs leave empty made a
/// scan 15% slower backwards), and keys in no order gain nothing either way. More than
/// two samples, because one step may go against the rest (names numbered past a power
/// of ten sort before their predecessors); three in four, because keys in no order step
/// back half the time (all but 2% of such runs stay forwards).
fn runs_backwards(sort: &Sort, samples: &[Vec<Option<SortValue>>]) -> bool {
    let steps = samples.windows(2).map(|w| sort.compare_keys(&w[0], &w[1]));
    let (back, all) = steps.fold((0, 0), |(back, all), o| {
        (
            back + usize::from(o == std::cmp::Ordering::Greater),
            all + 1,
        )
    });
    all > 0 && back * 4 >= all * 3
}

/// How often the jobs of a stretch of a scan were read (not only their rows).
#[derive(Default)]
struct JobReads {
    judged: u32,
    reads: u32,
}

/// Jobs judged between two decisions whether to load jobs ahead.
const JOB_READS_WINDOW: u32 = 256;

impl JobReads {
    /// Counts one more job judged; whether the window is full.
    fn judged(&mut self, row: &Row) -> bool {
        self.judged += 1;
        if self.judged < JOB_READS_WINDOW {
            return false;
        }
        self.reads += row.take_job_reads();
        true
    }

    /// Whether jobs were read often enough that loading them ahead pays (a load ahead
    /// costs a little for each job; a read without one, a stall).
    fn reads_often(&self) -> bool {
        self.reads * 8 >= self.judged
    }
}

/// Jobs ahead of the one being judged whose memory a scan that reads jobs asks for:
/// the job itself this far ahead, its spec half as far (by then the job is loaded).
const LOAD_AHEAD: usize = 16;

/// Asks the processor to load what judging the jobs a little ahead in `chunk` will read.
/// Jobs lie wherever the allocator put them, each a cache miss or two (the job, then
/// its spec) that would otherwise stall the scan one after another; loaded ahead, they
/// overlap.
fn load_ahead(book: &JobBook, chunk: &[(usize, u32)], i: usize) {
    if let Some(&(_, position)) = chunk.get(i + LOAD_AHEAD) {
        // Addresses inside the job, worked out without reading it: where its status
        // begins, and its spec's pointer (a job is several cache lines).
        let job: &Job = book.at(position as usize);
        prefetch(&job.status);
        prefetch(&job.spec);
    }
    if let Some(&(_, position)) = chunk.get(i + LOAD_AHEAD / 2) {
        prefetch(Arc::as_ptr(&book.at(position as usize).spec));
    }
}

/// Asks the processor to load the scan row of the job [`LOAD_AHEAD`] jobs ahead in
/// `chunk`. Rows are contiguous, but the candidates of a lookup skip many, and a row
/// spans two or three cache lines.
fn load_row_ahead(book: &JobBook, chunk: &[(usize, u32)], i: usize) {
    if let Some(&(_, position)) = chunk.get(i + LOAD_AHEAD) {
        let row = (book.row(position as usize) as *const ScanRow).cast::<u8>();
        let size = std::mem::size_of::<ScanRow>();
        for offset in (0..size).step_by(64).chain([size - 1]) {
            prefetch(row.wrapping_add(offset));
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn prefetch<T>(at: *const T) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: a prefetch is a hint: it never faults, whatever the address, and reads
    // nothing into the program.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast()) }
}

#[cfg(not(target_arch = "x86_64"))]
fn prefetch<T>(_at: *const T) {}

/// Judges the job at `position`, of the given rank in the list, by its `document`.
fn offer<'a, V: DocView<'a>>(
    found: &mut Found<'_>,
    query: &ListQuery,
    rank: usize,
    position: u32,
    document: V,
    job: &Arc<Job>,
) {
    match found {
        Found::Top(top) => top.offer_at(rank, document, || job.clone()),
        Found::Positions(matches) => {
            if query.filter.matches(document) {
                matches.insert(position);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn samples(values: &[Value]) -> Vec<Vec<Option<SortValue>>> {
        values
            .iter()
            .map(|v| vec![Some(SortValue::of(v))])
            .collect()
    }

    #[test]
    fn a_scan_is_narrow_by_the_candidates_it_judges() {
        let scan = |candidates, rows_only| Scan {
            candidates,
            date_order: None,
            rechecked: Vec::new(),
            query: ListQuery::default(),
            rows_only,
        };
        assert!(scan(Candidates::Below(NARROW_SCAN as u32), true).is_narrow());
        assert!(!scan(Candidates::Below(NARROW_SCAN as u32 + 1), true).is_narrow());
        let few: RoaringBitmap = (0..1_000_000).step_by(100).collect();
        assert!(scan(Candidates::Set(few.clone()), true).is_narrow());
        let many: RoaringBitmap = (0..1_000_000).step_by(2).collect();
        assert!(!scan(Candidates::Set(many), true).is_narrow());
        // Reading the job makes even ten candidates costly.
        assert!(!scan(Candidates::Below(10), false).is_narrow());
        assert!(!scan(Candidates::Set(few), false).is_narrow());
    }

    #[test]
    fn a_run_is_judged_from_the_end_its_page_wants_first() {
        let newest_first = Sort::parse_str(r#"{"name":-1}"#).unwrap();
        let oldest_first = Sort::parse_str(r#"{"name":1}"#).unwrap();
        // Numbered names grow along the book but for the steps past a power of ten.
        let names = samples(&[1, 2, 5, 9, 10, 40, 99, 100, 700].map(|n| json!(format!("x.{n}"))));
        assert!(runs_backwards(&newest_first, &names));
        assert!(!runs_backwards(&oldest_first, &names));
        // The time queued shrinks along the book: the longest waiting are first.
        let queued = samples(&[900, 700, 650, 400, 90].map(|n| json!(n)));
        assert!(!runs_backwards(&newest_first, &queued));
        assert!(runs_backwards(&oldest_first, &queued));
        // Ties keep the book's order, so a key that ties stays forwards either way.
        let empty = samples(&[Value::Null, Value::Null, Value::Null]);
        assert!(!runs_backwards(&newest_first, &empty));
        assert!(!runs_backwards(&oldest_first, &empty));
        // Keys in no order, or a single sample, gain nothing backwards.
        let scattered = samples(&[3, 9, 1, 8, 2, 7, 0, 5, 4].map(|n| json!(n)));
        assert!(!runs_backwards(&newest_first, &scattered));
        assert!(!runs_backwards(&oldest_first, &scattered));
        assert!(!runs_backwards(&newest_first, &samples(&[json!(1)])));
    }
}
