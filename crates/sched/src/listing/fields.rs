//! The fields lists filter and sort by most, read without rendering the job.
//!
//! Judging a list over a deep queue by rendering every job whole costs tens of
//! microseconds a job. When every path a query names is one of these, the job is read
//! as a small tree holding only those paths, each leaf a typed [`Cell`] borrowed from
//! the book (no JSON value, map or string is made per job), which the evaluator reads
//! through [`RowView`] exactly as it would read the whole rendering's value there (each
//! entry repeats its expression in `v1`/`v2`; the HTTP tests compare lists judged both
//! ways). A path naming a whole object of [`WHOLE_OBJECTS`] reads all its members, and
//! one through an object of strings of [`STRING_MAPS`] reads that object. A top-level
//! member that some path reads beyond the entries (a list of objects such as `messages`,
//! an element such as `partitionAccessList.0`, a member no job has) is rendered alone,
//! once per job, when first read ([`Field::Member`]), and every path through it reads
//! that value (a list most jobs leave empty, such as `messages`, is known empty from the
//! job without rendering it: [`empty_list`]). Most entries read the job book's scan row
//! of the job rather than the job (see [`ScanRow`](crate::book::ScanRow)).

use std::cell::OnceCell;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use drover_domain::dates::Timestamp;
use drover_query::order::{Kind, compare_bytes, compare_members, compare_with_kept, date_seconds};
use drover_query::{DocView, Filter, Path, Sort, SortValue};
use serde_json::Value;

use super::{
    JobShape, Render, effective_partitions, expected_state, queue_status, requested_memory,
    start_priority,
};
use crate::book::{Interned, JobBook};
use crate::job::{Job, JobState};

/// One value of a narrow rendering: text is borrowed from the book or the job, and a
/// date is its instant (its wire text is made only when a comparison needs it).
#[derive(Clone, Copy)]
enum Cell<'b> {
    Null,
    Text(&'b str),
    /// A list of strings (`flags`, `holds`).
    Words(&'b [String]),
    /// An object of strings (`environmentVariables`, `variables`), its members in key
    /// order.
    Map(&'b BTreeMap<String, String>),
    Number(f64),
    Bool(bool),
    Date(i64),
    /// A field of the job's, read each time it is asked for ([`Row::cell`]).
    InJob,
}

/// A field of the job's scan row, written into the cell it is given: returned, a cell
/// (24 bytes) comes back through the stack from the indirect call, and copying it from
/// there stalled a scan on the stores not yet forwarded (about a tenth of a sort's time).
type RowField = for<'b> fn(&'b JobBook, usize, &mut Cell<'b>);

/// [`Field::Row`] of a reader of the scan row.
macro_rules! row {
    (|$book:ident, $position:ident| $read:expr) => {
        Field::Row(|$book, $position, cell| *cell = $read)
    };
    ($read:path) => {
        Field::Row(|book, position, cell| *cell = $read(book, position))
    };
}

/// Where the value at one path of a job's wire shape comes from: the book's scan row of
/// the job (contiguous, so a scan reading only rows never follows a pointer to the job),
/// or the job itself.
#[derive(Clone)]
enum Field {
    Row(RowField),
    Job(for<'b> fn(&'b Job) -> Cell<'b>),
    /// Read from the job at the list's time (durations, usage) or with its settings.
    Rendered(for<'b> fn(&'b Job, &'b Render<'b>) -> Cell<'b>),
    /// A top-level member that some path reads beyond what the entries know (a list of
    /// objects such as `messages`, an element such as `flags.0`): rendered alone
    /// ([`JobShape::member`]), once per job, when first read.
    /// With how to tell, for a list most jobs leave empty, that the job's is empty
    /// without rendering it ([`empty_list`]).
    Member(Box<str>, Option<fn(&Job) -> bool>),
}

/// How to tell from a job that its member `name` is an empty list, for lists of objects
/// most jobs leave empty (in every version): one reads as `[]` without rendering the
/// member, most of the cost of a list that filters on it.
fn empty_list(name: &str) -> Option<fn(&Job) -> bool> {
    match name {
        "messages" => Some(|job| job.status.messages.is_empty()),
        _ => None,
    }
}

/// What an empty list renders as.
static EMPTY_LIST: Value = Value::Array(Vec::new());

/// A string of the row's.
fn text(book: &JobBook, interned: Interned) -> Cell<'_> {
    book.strings().get(interned).map_or(Cell::Null, Cell::Text)
}

/// The job's id, from its row when it fits there.
fn id(book: &JobBook, position: usize) -> Cell<'_> {
    Cell::Text(match &book.row(position).id {
        Some(id) => id.as_str(),
        None => &book.at(position).id,
    })
}

/// A date as a job's document renders it: null when absent or out of range.
fn date(seconds: Option<i64>) -> Cell<'static> {
    match seconds {
        Some(s) if Timestamp::from_second(s).is_ok() => Cell::Date(s),
        _ => Cell::Null,
    }
}

/// When the job may start: its requested earliest start, else its submission.
fn eligible(job: &Job) -> i64 {
    job.spec.earliest_start.unwrap_or(job.status.dates.submit)
}

fn optional(text: &Option<String>) -> Cell<'_> {
    text.as_deref().map_or(Cell::Null, Cell::Text)
}

fn number(n: impl Into<f64>) -> Cell<'static> {
    Cell::Number(n.into())
}

/// An integer as JSON compares it (a double).
fn integer(n: i64) -> Cell<'static> {
    Cell::Number(n as f64)
}

/// Version 1's queue status: version 2's in upper case.
fn queue_status_upper(state: JobState) -> &'static str {
    match queue_status(state) {
        "eligible" => "ELIGIBLE",
        "blocked" => "BLOCKED",
        "active" => "ACTIVE",
        _ => "COMPLETED",
    }
}

/// Version 1's paths: its own spellings of the state and queue status, its `id` and
/// `name`, else the version 2 path the same value is at.
fn version_1(path: &str) -> Option<Field> {
    let same_as = match path {
        "id" => return Some(row!(id)),
        "name" => "customName",
        "queueStatus" => return Some(row!(|b, p| Cell::Text(queue_status_upper(b.row(p).state)))),
        "state" => return Some(row!(|b, p| Cell::Text(b.row(p).state.upper()))),
        "account" | "user" | "group" | "qos" | "qosRequested" => {
            return version_2(&format!("credentials.{path}"));
        }
        "queue" => "credentials.jobClass",
        "startPriority" => "priorities.start",
        "runPriority" => "priorities.run",
        "systemPriority" => "priorities.system",
        "userPriority" => "priorities.user",
        "startCount"
        | "completionCode"
        | "commandFile"
        | "initialWorkingDirectory"
        | "submitHost" => path,
        "commandLineArguments" => "commandLineArgs",
        "durationRequested" => "duration",
        "submitDate" => "dates.submitDate",
        "startDate" => "dates.startDate",
        "completionDate" => "dates.completedDate",
        "earliestStartDate" => "dates.earliestStartDate",
        "earliestStartDateRequested" => "dates.earliestRequestedStartDate",
        "latestCompletedDateRequested" => "dates.deadlineDate",
        _ => return None,
    };
    version_2(same_as)
}

fn version_2(path: &str) -> Option<Field> {
    use Field::{Job, Rendered};
    Some(match path {
        "name" => row!(id),
        "customName" => row!(|b, p| text(b, b.row(p).custom_name)),
        "credentials.account" => row!(|b, p| text(b, b.row(p).account)),
        "credentials.user" => row!(|b, p| text(b, b.row(p).user)),
        "credentials.group" => row!(|b, p| text(b, b.row(p).group)),
        "credentials.jobClass" => row!(|b, p| text(b, b.row(p).class)),
        "credentials.qos" | "credentials.qosRequested" => row!(|b, p| text(b, b.row(p).qos)),
        "states.state" => row!(|b, p| Cell::Text(b.row(p).state.as_str())),
        "queueStatus" => row!(|b, p| Cell::Text(queue_status(b.row(p).state))),
        "isActive" => row!(|b, p| Cell::Bool(!b.row(p).state.is_final())),
        "priorities.run" | "priorities.start" => Job(|job| integer(start_priority(job))),
        "priorities.system" => row!(|b, p| integer(b.row(p).system_priority)),
        "priorities.user" => row!(|b, p| integer(b.row(p).user_priority)),
        "startCount" => Job(|job| number(job.status.counts.start)),
        "completionCode" => Job(|job| job.status.completion_code.map_or(Cell::Null, number)),
        "commandFile" => row!(|b, p| text(b, b.row(p).command_file)),
        "commandLineArgs" => Job(|job| Cell::Text(&job.spec.arguments)),
        "initialWorkingDirectory" => Job(|job| optional(&job.spec.working_directory)),
        "submitHost" => Job(|job| optional(&job.spec.extra.submit_host)),
        "description" => Job(|job| optional(&job.spec.extra.description)),
        "jobGroup" => Job(|job| optional(&job.spec.extra.job_group)),
        "arrayIndex" => Job(|job| job.array_member().map_or(Cell::Null, |(_, i)| integer(i))),
        "arrayMasterName" => Job(|job| {
            job.array_member()
                .map_or(Cell::Null, |(m, _)| Cell::Text(m))
        }),
        "cancelCount" => Job(|job| number(job.status.counts.cancel)),
        "preemptCount" => Job(|job| number(job.status.counts.preempt)),
        "duration" => Job(|job| job.spec.duration.map_or(Cell::Null, integer)),
        "flags" => row!(|b, p| Cell::Words(b.strings().list(b.row(p).flags))),
        // `requirements` is a list of one requirement (see [`ONE_ELEMENT_LISTS`]).
        "requirements.taskCount" => row!(|b, p| number(b.row(p).task_count)),
        "requirements.tasksPerNode" => {
            Job(|job| job.spec.request.tasks_per_node.map_or(Cell::Null, number))
        }
        "requirements.nodeCount" => Job(|job| {
            let nodes = job.node_ids().count().max(1) as u32;
            number(job.spec.request.node_count.unwrap_or(nodes))
        }),
        "requirements.architecture" => Job(|job| optional(&job.spec.request.architecture)),
        "requirements.image" => Job(|job| optional(&job.spec.request.os)),
        "requirements.reservation" => Job(|job| optional(&job.spec.extra.reservation_requested)),
        "requirements.index" => Job(|_| integer(0)),
        "dates.submitDate" | "dates.createdDate" => row!(|b, p| date(Some(b.row(p).submit))),
        "dates.startDate" | "dates.dispatchedDate" => Job(|job| date(job.status.dates.start)),
        "dates.completedDate" | "dates.terminationDate" => row!(|b, p| date(b.row(p).completion())),
        "dates.lastUpdatedDate" => Job(|job| date(Some(job.status.dates.last_updated))),
        "dates.deadlineDate" => Job(|job| date(job.spec.deadline)),
        "dates.earliestRequestedStartDate" => Job(|job| date(job.spec.earliest_start)),
        "dates.earliestStartDate" | "dates.eligibleDate" => Job(|job| date(Some(eligible(job)))),
        "dates.lastCanceledDate" => Job(|job| date(job.status.dates.last_canceled)),
        "dates.lastChargedDate" => Job(|_| Cell::Null),
        "dates.lastPreemptedDate" => Job(|job| date(job.status.dates.last_preempted)),
        "holdReason" => Job(|job| optional(&job.status.hold_reason)),
        "holds" => row!(|b, p| Cell::Words(b.strings().list(b.row(p).holds))),
        "environmentVariables" => Job(|job| Cell::Map(&job.spec.environment)),
        "variables" => Job(|job| Cell::Map(&job.spec.variables)),
        "environmentRequested" => Job(|job| Cell::Bool(job.spec.environment_requested)),
        "holdDate" => Job(|job| {
            date(
                job.status
                    .dates
                    .hold
                    .filter(|_| !job.status.holds.is_empty()),
            )
        }),
        "bypassCount" | "deferCount" | "migrateCount" | "minimumPreemptTime" => Job(|_| integer(0)),
        "memorySecondsUtilized" => Job(|_| number(0.0)),
        "cpuTime" | "processorSecondsUtilized" => Job(|job| number(job.status.cpu_seconds)),
        "epilogScript" => Job(|job| optional(&job.spec.extra.epilog_script)),
        "prologScript" => Job(|job| optional(&job.spec.extra.prolog_script)),
        "resourceFailPolicy" => Job(|job| optional(&job.spec.extra.resource_fail_policy)),
        "resourceManagerExtension" => Job(|job| optional(&job.spec.extra.rm_extension)),
        "vmUsagePolicy" => Job(|job| optional(&job.spec.extra.vm_usage_policy)),
        "standardErrorFilePath" => Job(|job| optional(&job.spec.stderr_path)),
        "standardOutputFilePath" => Job(|job| optional(&job.spec.stdout_path)),
        "emailNotifyAddresses" => Job(|job| Cell::Words(&job.spec.extra.email_addresses)),
        "emailNotifyTypes" => Job(|job| Cell::Words(&job.spec.extra.email_types)),
        "partitionAccessList" => Job(|job| Cell::Words(effective_partitions(job))),
        "partitionAccessListRequested" => {
            Job(|job| Cell::Words(&job.spec.extra.partition_access_list))
        }
        "nodesRequestedPolicy" => Job(|job| {
            if job.spec.request.nodes_requested.is_empty() {
                Cell::Null
            } else {
                Cell::Text("SUBSET")
            }
        }),
        "systemJobAction" | "systemJobType" | "targetedJobAction" | "targetedJobName"
        | "states.subState" => Job(|_| Cell::Null),
        "states.stateExpected" => Job(|job| Cell::Text(expected_state(job).as_str())),
        "states.stateLastUpdatedDate" => Job(|job| date(Some(job.status.dates.state_updated))),
        "schedName" => Rendered(|_, render| Cell::Text(render.sched_name)),
        "durationActive" => Rendered(|job, render| integer(job.active_seconds(render.now))),
        "durationQueued" => Rendered(|job, render| integer(job.queued_seconds(render.now))),
        "durationSuspended" => Rendered(|job, render| integer(job.suspended_seconds(render.now))),
        "durationRemaining" => Rendered(|job, render| {
            let active = job.active_seconds(render.now);
            job.spec
                .duration
                .map_or(Cell::Null, |d| integer((d - active).max(0)))
        }),
        "memorySecondsDedicated" => Rendered(|job, render| {
            number(requested_memory(job) * job.active_seconds(render.now) as f64)
        }),
        "processorSecondsDedicated" => Rendered(|job, render| {
            number(job.processors() as f64 * job.active_seconds(render.now) as f64)
        }),
        "processorSecondsLimit" => Job(|job| {
            number(
                job.spec
                    .duration
                    .map_or(0.0, |d| job.processors() as f64 * d as f64),
            )
        }),
        _ => return None,
    })
}

/// Members that version 2 renders as a list of exactly one object: a path may name its
/// members through the list (`requirements.taskCount`) or its only element
/// (`requirements.0.taskCount`), and both read that element.
const ONE_ELEMENT_LISTS: [&str; 1] = ["requirements"];

/// Members of version 2 that are objects of strings with any keys: a path through one
/// (`environmentVariables.HOME`) reads the object's cell.
const STRING_MAPS: [&str; 2] = ["environmentVariables", "variables"];

/// Objects of version 2 whose every member has an entry (each listed: the HTTP tests
/// compare a whole object judged narrow with its rendering): a path that names the
/// whole object reads them all.
const WHOLE_OBJECTS: [(&str, &[&str]); 4] = [
    (
        "credentials",
        &[
            "account",
            "group",
            "jobClass",
            "qos",
            "qosRequested",
            "user",
        ],
    ),
    (
        "dates",
        &[
            "completedDate",
            "createdDate",
            "deadlineDate",
            "dispatchedDate",
            "earliestRequestedStartDate",
            "earliestStartDate",
            "eligibleDate",
            "lastCanceledDate",
            "lastChargedDate",
            "lastPreemptedDate",
            "lastUpdatedDate",
            "startDate",
            "submitDate",
            "terminationDate",
        ],
    ),
    ("priorities", &["run", "start", "system", "user"]),
    (
        "states",
        &["state", "stateExpected", "stateLastUpdatedDate", "subState"],
    ),
];

/// One value a path reads through the entries: the one-element list it is in (if any),
/// its path below that, and where it comes from.
struct Leaf {
    list: Option<&'static str>,
    path: String,
    field: Field,
}

/// The values `path` reads, if the entries know them all: a whole object of
/// [`WHOLE_OBJECTS`] is all its members, a path through an object of [`STRING_MAPS`]
/// is that object, one through a list of [`ONE_ELEMENT_LISTS`] is inside its element.
fn leaves(path: &str, version: u32) -> Option<Vec<Leaf>> {
    let plain = |path: &str, field: Option<Field>| {
        Some(vec![Leaf {
            list: None,
            path: path.to_string(),
            field: field?,
        }])
    };
    if version < 2 {
        return plain(path, version_1(path));
    }
    if let Some((name, members)) = WHOLE_OBJECTS.iter().find(|(name, _)| *name == path) {
        return members
            .iter()
            .map(|member| {
                let path = format!("{name}.{member}");
                let field = version_2(&path)?;
                Some(Leaf {
                    list: None,
                    path,
                    field,
                })
            })
            .collect();
    }
    let Some((first, rest)) = path.split_once('.') else {
        return plain(path, version_2(path));
    };
    if STRING_MAPS.contains(&first) {
        return plain(first, version_2(first));
    }
    match ONE_ELEMENT_LISTS.iter().find(|list| **list == first) {
        Some(list) => {
            let below = rest.strip_prefix("0.").unwrap_or(rest);
            Some(vec![Leaf {
                list: Some(list),
                path: below.to_string(),
                field: version_2(&format!("{list}.{below}"))?,
            }])
        }
        None => plain(path, version_2(path)),
    }
}

/// A node of the narrow document: an object of named members, a list of one element,
/// or the value of a field.
enum Node {
    Object(Vec<(Box<str>, usize)>),
    ListOfOne(usize),
    Leaf(usize),
}

/// A rendering of only the paths a query names: a small tree of objects whose leaves are
/// [`Cell`]s, read by the evaluator through [`RowView`] without making a JSON value, a
/// map or a string per job (but for a member no entry knows, rendered alone).
pub(super) struct Narrow {
    fields: Vec<Field>,
    /// The document's nodes; the first is its root object.
    nodes: Vec<Node>,
    /// The node each path of the query leads to, by the path's address: the evaluator
    /// reads the query's own paths, so a row answers them without walking
    /// ([`DocView::known`]); a path not found here (another copy, or one that leads
    /// into a cell or a rendered member) is walked.
    known: Vec<(usize, usize)>,
    /// How many paths the query reads.
    paths: usize,
    /// The fields read from the scan row, each with its number: what filling a row reads.
    from_row: Vec<(usize, RowField)>,
    /// The numbers of the rendered members' fields.
    rendered: Vec<usize>,
}

impl Narrow {
    /// The narrow rendering of what `filter` and `sort` read: each path through the
    /// entries when they know it, and a top-level member some path reads beyond them
    /// rendered whole (with every path through it).
    pub(super) fn of(filter: &Filter, sort: &Sort, version: u32) -> Narrow {
        let mut paths: Vec<&Path> = sort.keys.iter().map(|(path, _)| path).collect();
        paths_of(filter, &mut paths);
        let placed: Vec<(&str, Option<Vec<Leaf>>)> = paths
            .iter()
            .map(|path| {
                let top = path.as_str().split('.').next().unwrap_or_default();
                (top, leaves(path.as_str(), version))
            })
            .collect();
        let rendered: Vec<&str> = placed
            .iter()
            .filter(|(_, leaves)| leaves.is_none())
            .map(|(top, _)| *top)
            .collect();
        let mut narrow = Narrow {
            fields: Vec::new(),
            nodes: vec![Node::Object(Vec::new())],
            known: Vec::new(),
            paths: 0,
            from_row: Vec::new(),
            rendered: Vec::new(),
        };
        for (top, leaves) in placed {
            match leaves {
                Some(leaves) if !rendered.contains(&top) => {
                    for leaf in leaves {
                        let at = match leaf.list {
                            Some(list) => narrow.list_element(list),
                            None => 0,
                        };
                        narrow.add(at, &leaf.path, leaf.field);
                    }
                }
                _ => narrow.add(0, top, Field::Member(top.into(), empty_list(top))),
            }
        }
        // Objects compare member by member in key order: kept in it, they need no
        // sorted copy per comparison.
        for node in &mut narrow.nodes {
            if let Node::Object(members) = node {
                members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            }
        }
        for (i, field) in narrow.fields.iter().enumerate() {
            match field {
                Field::Row(read) => narrow.from_row.push((i, *read)),
                Field::Member(..) => narrow.rendered.push(i),
                Field::Job(_) | Field::Rendered(_) => {}
            }
        }
        narrow.paths = paths.len();
        narrow.known = paths
            .iter()
            .filter_map(|path| Some((address(path), narrow.lead(path)?)))
            .collect();
        // Found by binary search: a query of thousands of clauses costs each job
        // thousands of lookups, each of a few comparisons.
        narrow.known.sort_unstable();
        narrow
    }

    /// The node `path` leads to from the root, as the evaluator walks it, when it leads
    /// to one (not into a cell's value): through objects by name, and through a
    /// one-element list by index 0 or, as for any list of objects, by applying the
    /// segment to its element.
    fn lead(&self, path: &Path) -> Option<usize> {
        let mut node = 0;
        for segment in path.segments() {
            node = match &self.nodes[node] {
                Node::Object(_) => self.member(node, &segment.name)?,
                Node::ListOfOne(element) if segment.index == Some(0) => *element,
                Node::ListOfOne(element) => self.member(*element, &segment.name)?,
                Node::Leaf(_) => return None,
            };
        }
        Some(node)
    }

    /// The node a path of the query leads to ([`Narrow::lead`]), found by its address.
    #[inline]
    fn known(&self, path: &Path) -> Option<usize> {
        let at = address(path);
        let found = self.known.binary_search_by_key(&at, |&(path, _)| path);
        found.ok().map(|i| self.known[i].1)
    }

    /// How many paths the query reads (a clause of an `$or` each).
    pub(super) fn paths(&self) -> usize {
        self.paths
    }

    /// The element of the one-element list `name` of the root, made when first named.
    fn list_element(&mut self, name: &str) -> usize {
        match self.member(0, name) {
            Some(list) => match self.nodes[list] {
                Node::ListOfOne(element) => element,
                _ => unreachable!("a one-element list is only ever made as one"),
            },
            None => {
                self.nodes.push(Node::Object(Vec::new()));
                let element = self.nodes.len() - 1;
                self.push_member(0, name, Node::ListOfOne(element));
                element
            }
        }
    }

    /// Adds the leaf at the dotted `path` below the object `at` (once; entries never
    /// name a prefix of another).
    fn add(&mut self, mut at: usize, path: &str, field: Field) {
        let (last, parents) = path
            .rsplit_once('.')
            .map_or((path, None), |(parents, last)| (last, Some(parents)));
        for name in parents.into_iter().flat_map(|p| p.split('.')) {
            at = match self.member(at, name) {
                Some(child) => child,
                None => self.push_member(at, name, Node::Object(Vec::new())),
            };
        }
        if self.member(at, last).is_none() {
            self.fields.push(field);
            self.push_member(at, last, Node::Leaf(self.fields.len() - 1));
        }
    }

    fn member(&self, object: usize, name: &str) -> Option<usize> {
        match &self.nodes[object] {
            Node::Object(members) => members.iter().find(|(n, _)| &**n == name).map(|m| m.1),
            Node::ListOfOne(_) | Node::Leaf(_) => {
                unreachable!("entries never name a prefix of another")
            }
        }
    }

    fn push_member(&mut self, object: usize, name: &str, node: Node) -> usize {
        self.nodes.push(node);
        let child = self.nodes.len() - 1;
        if let Node::Object(members) = &mut self.nodes[object] {
            members.push((name.into(), child));
        }
        child
    }

    /// Whether some field is read from the job rather than its scan row.
    pub(super) fn reads_jobs(&self) -> bool {
        self.fields.iter().any(|f| !matches!(f, Field::Row(_)))
    }

    /// A row to [`Row::fill`] with one job after another (one serves a whole chunk),
    /// reading the job's fields with `render` and its rendered members in `shape`.
    pub(super) fn row<'b>(&'b self, render: &'b Render<'b>, shape: &'b dyn JobShape) -> Row<'b> {
        Row {
            narrow: self,
            at: None,
            cells: self
                .fields
                .iter()
                .map(|field| match field {
                    Field::Job(_) | Field::Rendered(_) => Cell::InJob,
                    Field::Row(_) | Field::Member(..) => Cell::Null,
                })
                .collect(),
            date_texts: vec![OnceCell::new(); self.fields.len()],
            texts_made: std::cell::Cell::new(false),
            rendered: std::cell::Cell::new(false),
            read_job: std::cell::Cell::new(false),
            job_reads: std::cell::Cell::new(0),
            members: vec![OnceCell::new(); self.fields.len()],
            render,
            shape,
        }
    }
}

/// One job's narrow rendering.
pub(super) struct Row<'b> {
    narrow: &'b Narrow,
    /// The job's book and position, once filled.
    at: Option<(&'b JobBook, usize)>,
    /// The value of each field read from the scan row (read by the evaluator several
    /// times per job: its kind, then its value). A field of the job is read each time
    /// it is asked for instead ([`Row::cell`]), as a comparison often ends before it:
    /// two `dates` objects mostly differ at their second member, a row's, and most of
    /// the rest are in the job's spec, a cache miss of its own.
    cells: Vec<Cell<'b>>,
    /// The wire text of each date cell, made the first time a comparison asks for it.
    date_texts: Vec<OnceCell<String>>,
    /// Whether some date's text was made since the last fill (rarely: dates in UTC
    /// compare by their instant), so that filling forgets texts only then.
    texts_made: std::cell::Cell<bool>,
    /// Whether a member was rendered since [`Row::rendered_any`] was last asked.
    rendered: std::cell::Cell<bool>,
    /// Whether a field was read from the job since the last fill.
    read_job: std::cell::Cell<bool>,
    /// How many of the jobs filled since [`Row::take_job_reads`] had a field read.
    job_reads: std::cell::Cell<u32>,
    /// The value of each rendered member ([`Field::Member`]; `None` when the rendering
    /// has no such member), made the first time it is read.
    members: Vec<OnceCell<Option<Value>>>,
    render: &'b Render<'b>,
    shape: &'b dyn JobShape,
}

impl<'b> Row<'b> {
    /// Reads the values of the job at `position` from its scan row (the job's fields,
    /// and a rendered member, when asked for).
    pub(super) fn fill(&mut self, book: &'b JobBook, position: usize) {
        self.at = Some((book, position));
        if self.read_job.replace(false) {
            self.job_reads.set(self.job_reads.get() + 1);
        }
        for &(i, read) in &self.narrow.from_row {
            read(book, position, &mut self.cells[i]);
        }
        for &i in &self.narrow.rendered {
            self.members[i].take();
        }
        if self.texts_made.replace(false) {
            self.date_texts
                .iter_mut()
                .for_each(|text| drop(text.take()));
        }
    }

    /// The value of field `i` (a rendered member's is read by [`Row::member`]).
    #[inline]
    fn cell(&self, i: usize) -> Cell<'b> {
        match self.cells[i] {
            Cell::InJob => self.read(i),
            cell => cell,
        }
    }

    /// The value of field `i`, one of the job's.
    #[inline(never)]
    fn read(&self, i: usize) -> Cell<'b> {
        self.read_job.set(true);
        match (&self.narrow.fields[i], self.at) {
            (Field::Job(field), Some((book, position))) => field(book.at(position)),
            (Field::Rendered(field), Some((book, position))) => {
                field(book.at(position), self.render)
            }
            _ => Cell::Null,
        }
    }

    /// The document, as the evaluator reads it.
    pub(super) fn view(&self) -> RowView<'_> {
        RowView::Node(self, 0)
    }

    /// The value of the rendered member that is field `i`.
    fn member(&self, i: usize) -> Option<&Value> {
        let (book, position) = self.at?;
        let Field::Member(name, empty) = &self.narrow.fields[i] else {
            return None;
        };
        self.read_job.set(true);
        if empty.is_some_and(|empty| empty(book.at(position))) {
            return Some(&EMPTY_LIST);
        }
        self.members[i]
            .get_or_init(|| {
                self.rendered.set(true);
                self.shape.member(book.at(position), name, self.render)
            })
            .as_ref()
    }

    /// How many of the jobs filled since this was last asked had a field read from the
    /// job (rather than its scan row), the one filled now included.
    pub(super) fn take_job_reads(&self) -> u32 {
        self.job_reads.replace(0) + u32::from(self.read_job.replace(false))
    }

    /// Whether a member was rendered (microseconds, not nanoseconds) since this was
    /// last asked.
    pub(super) fn rendered_any(&self) -> bool {
        self.rendered.replace(false)
    }
}

/// A node of a [`Row`], one string of a list cell, or a value inside a rendered member,
/// read through [`DocView`] exactly as the whole rendering's `serde_json::Value` would
/// be at the same path.
#[derive(Clone, Copy)]
pub(super) enum RowView<'v> {
    Node(&'v Row<'v>, usize),
    Word(&'v str),
    Json(&'v Value),
}

/// Instants from 1970 to the end of year 9999: written in UTC, each is a date of the
/// value order at that very instant (four-digit years).
const FOUR_DIGIT_YEARS: std::ops::RangeInclusive<i64> = 0..=253_402_300_799;

/// What a view of a row's node or word shows, worked out from its node.
enum Shown<'v> {
    Object(&'v [(Box<str>, usize)]),
    ListOfOne(usize),
    /// A cell: which one (for a date's text), and its value.
    Cell(usize, Cell<'v>),
}

impl<'v> RowView<'v> {
    /// What a node or word shows (a rendered member's value shows itself: callers read
    /// [`RowView::Json`] first).
    #[inline]
    fn shown(self) -> Shown<'v> {
        match self {
            RowView::Node(row, node) => match &row.narrow.nodes[node] {
                Node::Object(members) => Shown::Object(members),
                Node::ListOfOne(element) => Shown::ListOfOne(*element),
                Node::Leaf(i) => Shown::Cell(*i, row.cell(*i)),
            },
            // A word's cell number is never used: only dates ask for theirs.
            RowView::Word(word) => Shown::Cell(usize::MAX, Cell::Text(word)),
            RowView::Json(_) => Shown::Cell(usize::MAX, Cell::Null),
        }
    }

    /// The member at `node` of an object of `row`: a rendered member is its value, and
    /// nothing when the rendering has no such member.
    #[inline]
    fn member_of(row: &'v Row<'v>, node: usize) -> Option<RowView<'v>> {
        match row.narrow.nodes[node] {
            Node::Leaf(i) if matches!(row.narrow.fields[i], Field::Member(..)) => {
                row.member(i).map(RowView::Json)
            }
            _ => Some(RowView::Node(row, node)),
        }
    }

    #[inline]
    fn row(self) -> Option<&'v Row<'v>> {
        match self {
            RowView::Node(row, _) => Some(row),
            RowView::Word(_) | RowView::Json(_) => None,
        }
    }

    /// Whether the date's wire text is known to be a date of the value order at that
    /// instant without writing it (a local zone's may be a plain string).
    #[inline]
    fn date_in_utc(row: &Row<'_>, seconds: i64) -> bool {
        row.render.dates.writes_utc(row.render.version) && FOUR_DIGIT_YEARS.contains(&seconds)
    }

    #[inline]
    fn date_text(row: &'v Row<'v>, i: usize, seconds: i64) -> &'v str {
        row.date_texts[i].get_or_init(|| {
            row.texts_made.set(true);
            let instant = Timestamp::from_second(seconds).expect("cells hold valid dates");
            row.render.dates.format(instant, row.render.version)
        })
    }
}

/// The elements of a list in a [`Row`], made as they are read (a path through a list
/// asks for them for every job).
pub(super) enum Elements<'v> {
    One(Option<RowView<'v>>),
    Words(std::slice::Iter<'v, String>),
    Json(std::slice::Iter<'v, Value>),
}

impl<'v> Iterator for Elements<'v> {
    type Item = RowView<'v>;

    fn next(&mut self) -> Option<RowView<'v>> {
        match self {
            Elements::One(element) => element.take(),
            Elements::Words(words) => words.next().map(|w| RowView::Word(w)),
            Elements::Json(values) => values.next().map(RowView::Json),
        }
    }
}

/// The members of an object in a [`Row`], in key order (a rendered member's, in its own
/// order).
pub(super) enum Entries<'v> {
    Members(&'v Row<'v>, std::slice::Iter<'v, (Box<str>, usize)>),
    Map(std::collections::btree_map::Iter<'v, String, String>),
    Json(serde_json::map::Iter<'v>),
}

impl<'v> Iterator for Entries<'v> {
    type Item = (&'v str, RowView<'v>);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Entries::Members(row, members) => members.find_map(|(name, node)| {
                RowView::member_of(row, *node).map(|member| (&**name, member))
            }),
            Entries::Map(map) => map.next().map(|(k, v)| (k.as_str(), RowView::Word(v))),
            Entries::Json(map) => map.next().map(|(k, v)| (k.as_str(), RowView::Json(v))),
        }
    }
}

impl<'v> DocView<'v> for RowView<'v> {
    type Elements = Elements<'v>;
    type Entries = Entries<'v>;

    #[inline]
    fn kind(self) -> Kind {
        if let RowView::Json(value) = self {
            return value.kind();
        }
        match self.shown() {
            Shown::Object(_) | Shown::Cell(_, Cell::Map(_)) => Kind::Object,
            Shown::ListOfOne(_) | Shown::Cell(_, Cell::Words(_)) => Kind::Array,
            Shown::Cell(_, Cell::Null) => Kind::Null,
            Shown::Cell(_, Cell::Number(_)) => Kind::Number,
            Shown::Cell(_, Cell::Bool(_)) => Kind::Bool,
            Shown::Cell(..) if self.date().is_some() => Kind::Date,
            Shown::Cell(..) => Kind::String,
        }
    }

    #[inline]
    fn number(self) -> Option<f64> {
        if let RowView::Json(value) = self {
            return value.number();
        }
        match self.shown() {
            Shown::Cell(_, Cell::Number(n)) => Some(if n == 0.0 { 0.0 } else { n }),
            _ => None,
        }
    }

    #[inline]
    fn text(self) -> Option<&'v str> {
        if let RowView::Json(value) = self {
            return value.text();
        }
        match self.shown() {
            Shown::Cell(_, Cell::Text(text)) => Some(text),
            Shown::Cell(i, Cell::Date(seconds)) => Some(Self::date_text(self.row()?, i, seconds)),
            _ => None,
        }
    }

    #[inline]
    fn date(self) -> Option<i64> {
        if let RowView::Json(value) = self {
            return value.date();
        }
        match self.shown() {
            Shown::Cell(_, Cell::Text(text)) => date_seconds(text),
            Shown::Cell(i, Cell::Date(seconds)) => {
                let row = self.row()?;
                if Self::date_in_utc(row, seconds) {
                    Some(seconds)
                } else {
                    date_seconds(Self::date_text(row, i, seconds))
                }
            }
            _ => None,
        }
    }

    #[inline]
    fn get(self, key: &str) -> Option<Self> {
        if let RowView::Json(value) = self {
            return value.get(key).map(RowView::Json);
        }
        match (self.shown(), self) {
            (Shown::Object(members), RowView::Node(row, _)) => members
                .iter()
                .find(|(name, _)| &**name == key)
                .and_then(|&(_, node)| RowView::member_of(row, node)),
            (Shown::Cell(_, Cell::Map(map)), _) => map.get(key).map(|v| RowView::Word(v)),
            _ => None,
        }
    }

    #[inline]
    fn element(self, index: usize) -> Option<Self> {
        if let RowView::Json(value) = self {
            return value.element(index).map(RowView::Json);
        }
        match (self.shown(), self) {
            (Shown::ListOfOne(element), RowView::Node(row, _)) if index == 0 => {
                Some(RowView::Node(row, element))
            }
            (Shown::Cell(_, Cell::Words(words)), _) => words.get(index).map(|w| RowView::Word(w)),
            _ => None,
        }
    }

    #[inline]
    fn elements(self) -> Self::Elements {
        if let RowView::Json(value) = self {
            return Elements::Json(value.elements());
        }
        match (self.shown(), self) {
            (Shown::ListOfOne(element), RowView::Node(row, _)) => {
                Elements::One(Some(RowView::Node(row, element)))
            }
            (Shown::Cell(_, Cell::Words(words)), _) => Elements::Words(words.iter()),
            _ => Elements::One(None),
        }
    }

    #[inline]
    fn entries(self) -> Self::Entries {
        static NO_MEMBERS: std::sync::OnceLock<serde_json::Map<String, Value>> =
            std::sync::OnceLock::new();
        if let RowView::Json(value) = self {
            return Entries::Json(
                value
                    .as_object()
                    .unwrap_or_else(|| NO_MEMBERS.get_or_init(serde_json::Map::new))
                    .iter(),
            );
        }
        match (self.shown(), self) {
            (Shown::Object(members), RowView::Node(row, _)) => {
                Entries::Members(row, members.iter())
            }
            (Shown::Cell(_, Cell::Map(map)), _) => Entries::Map(map.iter()),
            _ => Entries::Map(std::collections::btree_map::Iter::default()),
        }
    }

    #[inline]
    fn keys_in_order(self) -> bool {
        match self {
            RowView::Json(value) => value.keys_in_order(),
            // A narrow object's members are sorted once (`Narrow::of`), and an object of
            // strings is a BTreeMap.
            RowView::Node(..) | RowView::Word(_) => true,
        }
    }

    #[inline]
    fn known(self, path: &Path) -> Option<Option<Self>> {
        let RowView::Node(row, 0) = self else {
            return None;
        };
        let node = row.narrow.known(path)?;
        Some(RowView::member_of(row, node))
    }

    #[inline]
    fn truth(self) -> bool {
        if let RowView::Json(value) = self {
            return value.truth();
        }
        matches!(self.shown(), Shown::Cell(_, Cell::Bool(true)))
    }

    /// An object of the row against a kept object, member by member as
    /// `compare_values` walks them (both in key order, a member the rendering lacks
    /// skipped), and a cell against a kept value by its kind and value read once: the
    /// generic walk reads a cell's kind, then its value, each through [`RowView::shown`].
    /// Anything else (a rendered member, a list, an object of strings, a date in a local
    /// zone) is walked.
    #[inline]
    fn compare_kept(self, kept: &SortValue) -> Option<Ordering> {
        let RowView::Node(row, node) = self else {
            return None;
        };
        match &row.narrow.nodes[node] {
            Node::Object(members) => {
                let SortValue::Object(kept_members) = kept else {
                    return Some(Kind::Object.cmp(&kept.kind()));
                };
                let mine = members.iter().filter_map(|(name, node)| {
                    RowView::member_of(row, *node).map(|member| (&**name, member))
                });
                let theirs = kept_members
                    .iter()
                    .map(|(name, kept)| (name.as_str(), kept));
                Some(compare_members(mine, theirs, |member, kept| {
                    compare_with_kept(Some(member), Some(kept))
                }))
            }
            Node::Leaf(i) if !matches!(row.narrow.fields[*i], Field::Member(..)) => {
                // A text that is a UTC wire date is that date.
                let cell = match row.cell(*i) {
                    Cell::Date(seconds) if !Self::date_in_utc(row, seconds) => return None,
                    Cell::Text(text) => date_seconds(text).map_or(Cell::Text(text), Cell::Date),
                    cell => cell,
                };
                let kind = match cell {
                    Cell::Null => Kind::Null,
                    Cell::Number(_) => Kind::Number,
                    Cell::Bool(_) => Kind::Bool,
                    Cell::Date(_) => Kind::Date,
                    Cell::Text(_) => Kind::String,
                    Cell::Words(_) | Cell::Map(_) | Cell::InJob => return None,
                };
                let by_kind = kind.cmp(&kept.kind());
                if by_kind != Ordering::Equal {
                    return Some(by_kind);
                }
                Some(match (cell, kept) {
                    // `-0.0` is `0.0`, as `number` says (a kept number is so already).
                    (Cell::Number(n), SortValue::Number(m)) => {
                        (if n == 0.0 { 0.0 } else { n }).total_cmp(m)
                    }
                    (Cell::Date(seconds), SortValue::Date(instant, _)) => seconds.cmp(instant),
                    (Cell::Text(text), SortValue::Text(kept)) => {
                        compare_bytes(text.as_bytes(), kept.as_bytes())
                    }
                    (Cell::Bool(b), SortValue::Bool(c)) => b.cmp(c),
                    _ => Ordering::Equal,
                })
            }
            Node::Leaf(_) | Node::ListOfOne(_) => None,
        }
    }
}

/// Where a path lives: only ever compared, never read through.
fn address(path: &Path) -> usize {
    std::ptr::from_ref(path) as usize
}

fn paths_of<'f>(filter: &'f Filter, out: &mut Vec<&'f Path>) {
    match filter {
        Filter::And(members) | Filter::Or(members) => {
            members.iter().for_each(|m| paths_of(m, out));
        }
        Filter::Field(path, _) => out.push(path),
    }
}
