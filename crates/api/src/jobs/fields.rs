//! The few fields lists filter and sort by most, rendered alone.
//!
//! Judging a list over a deep queue by rendering every job whole costs tens of
//! microseconds a job. When every path a query names is one of these, the job is
//! rendered as a small document holding only those paths, with the very value the whole
//! rendering has there (each entry repeats its expression in `v1`/`v2`; the HTTP tests
//! compare lists judged both ways). Any other path, an object such as `dates`, or an
//! element such as `partitionAccessList.0`, takes the whole rendering. Most entries read
//! the job book's scan row of the job rather than the job (see `drover_sched::ScanRow`).

use drover_query::{Filter, Path, Sort};
use drover_sched::job::Job;
use drover_sched::{Interned, JobBook};
use serde_json::{Map, Value};

use super::v1::start_priority;
use super::{Render, queue_status};

/// Where the value at one path of a job's wire shape comes from: the book's scan row of
/// the job (contiguous, so a scan reading only rows never follows a pointer to the job),
/// or the job itself.
#[derive(Clone, Copy)]
enum Field {
    Row(fn(&JobBook, usize, &Render) -> Value),
    Job(fn(&Job, &Render) -> Value),
}

/// A string of the row's.
fn text(book: &JobBook, interned: Interned) -> Value {
    book.strings()
        .get(interned)
        .map_or(Value::Null, Value::from)
}

/// The job's id, from its row when it fits there.
fn id(book: &JobBook, position: usize) -> Value {
    match &book.row(position).id {
        Some(id) => Value::from(id.as_str()),
        None => Value::from(book.at(position).id.clone()),
    }
}

fn version_1(path: &str) -> Option<Field> {
    use Field::{Job, Row};
    Some(match path {
        "id" => Row(|b, p, _| id(b, p)),
        "name" => Row(|b, p, _| text(b, b.row(p).custom_name)),
        "account" => Row(|b, p, _| text(b, b.row(p).account)),
        "user" => Row(|b, p, _| text(b, b.row(p).user)),
        "group" => Row(|b, p, _| text(b, b.row(p).group)),
        "qos" | "qosRequested" => Row(|b, p, _| text(b, b.row(p).qos)),
        "queue" => Row(|b, p, _| text(b, b.row(p).class)),
        "queueStatus" => Row(|b, p, _| Value::from(queue_status(b.row(p).state).to_uppercase())),
        "state" => Row(|b, p, _| Value::from(b.row(p).state.upper())),
        "startPriority" | "runPriority" => Job(|job, _| Value::from(start_priority(job))),
        "systemPriority" => Row(|b, p, _| Value::from(b.row(p).system_priority)),
        "userPriority" => Row(|b, p, _| Value::from(b.row(p).user_priority)),
        "startCount" => Job(|job, _| Value::from(job.status.counts.start)),
        "completionCode" => Job(|job, _| Value::from(job.status.completion_code)),
        "commandFile" => Row(|b, p, _| text(b, b.row(p).command_file)),
        "durationRequested" => Job(|job, _| Value::from(job.spec.duration)),
        "submitDate" => Row(|b, p, r| r.date(Some(b.row(p).submit))),
        "startDate" => Job(|job, r| r.date(job.status.dates.start)),
        "completionDate" => Job(|job, r| r.date(job.status.dates.completion)),
        _ => return None,
    })
}

fn version_2(path: &str) -> Option<Field> {
    use Field::{Job, Row};
    Some(match path {
        "name" => Row(|b, p, _| id(b, p)),
        "customName" => Row(|b, p, _| text(b, b.row(p).custom_name)),
        "credentials.account" => Row(|b, p, _| text(b, b.row(p).account)),
        "credentials.user" => Row(|b, p, _| text(b, b.row(p).user)),
        "credentials.group" => Row(|b, p, _| text(b, b.row(p).group)),
        "credentials.jobClass" => Row(|b, p, _| text(b, b.row(p).class)),
        "credentials.qos" | "credentials.qosRequested" => Row(|b, p, _| text(b, b.row(p).qos)),
        "states.state" => Row(|b, p, _| Value::from(b.row(p).state.as_str())),
        "queueStatus" => Row(|b, p, _| Value::from(queue_status(b.row(p).state))),
        "isActive" => Row(|b, p, _| Value::from(!b.row(p).state.is_final())),
        "priorities.run" | "priorities.start" => Job(|job, _| Value::from(start_priority(job))),
        "priorities.system" => Row(|b, p, _| Value::from(b.row(p).system_priority)),
        "priorities.user" => Row(|b, p, _| Value::from(b.row(p).user_priority)),
        "startCount" => Job(|job, _| Value::from(job.status.counts.start)),
        "completionCode" => Job(|job, _| Value::from(job.status.completion_code)),
        "commandFile" => Row(|b, p, _| text(b, b.row(p).command_file)),
        "duration" => Job(|job, _| Value::from(job.spec.duration)),
        "dates.submitDate" | "dates.createdDate" => Row(|b, p, r| r.date(Some(b.row(p).submit))),
        "dates.startDate" | "dates.dispatchedDate" => Job(|job, r| r.date(job.status.dates.start)),
        "dates.completedDate" | "dates.terminationDate" => {
            Job(|job, r| r.date(job.status.dates.completion))
        }
        "dates.lastUpdatedDate" => Job(|job, r| r.date(Some(job.status.dates.last_updated))),
        _ => return None,
    })
}

/// A rendering of only the paths a query names, when each has an entry here.
pub(super) struct Narrow {
    fields: Vec<(Vec<String>, Field)>,
    /// The field of each leaf of [`Narrow::document`], in the order a walk of the
    /// document meets them: [`Narrow::fill`] walks, rather than looks each path up.
    leaf_fields: Vec<usize>,
}

impl Narrow {
    /// The narrow rendering of what `filter` and `sort` read, if every path they name
    /// has an entry for `version`.
    pub(super) fn of(filter: &Filter, sort: &Sort, version: u32) -> Option<Narrow> {
        let mut paths: Vec<&Path> = sort.keys.iter().map(|(path, _)| path).collect();
        paths_of(filter, &mut paths);
        let mut fields = Vec::new();
        for path in paths {
            let text = path.as_str();
            let field = if version >= 2 {
                version_2(text)
            } else {
                version_1(text)
            }?;
            let segments: Vec<String> = text.split('.').map(str::to_string).collect();
            if !fields.iter().any(|(s, _)| *s == segments) {
                fields.push((segments, field));
            }
        }
        let mut narrow = Narrow {
            fields,
            leaf_fields: Vec::new(),
        };
        let mut leaves = Vec::new();
        leaf_paths(&narrow.document(), &mut Vec::new(), &mut leaves);
        narrow.leaf_fields = leaves
            .iter()
            .map(|path| {
                narrow
                    .fields
                    .iter()
                    .position(|(segments, _)| segments == path)
                    .expect("every leaf is a field's")
            })
            .collect();
        Some(narrow)
    }

    /// An empty document with the shape of the named paths, for [`Narrow::fill`].
    pub(super) fn document(&self) -> Value {
        let mut out = Map::new();
        for (segments, _) in &self.fields {
            let (last, parents) = segments.split_last().expect("a path has a segment");
            let mut at = &mut out;
            for parent in parents {
                at = match at
                    .entry(parent.clone())
                    .or_insert_with(|| Value::Object(Map::new()))
                {
                    Value::Object(map) => map,
                    _ => unreachable!("entries never name a prefix of another"),
                };
            }
            at.insert(last.clone(), Value::Null);
        }
        Value::Object(out)
    }

    /// Puts the job's values into `document` (made by [`Narrow::document`]): one
    /// document serves a whole scan, so a job costs its values, not a tree of maps.
    pub(super) fn fill(&self, document: &mut Value, book: &JobBook, position: usize, r: &Render) {
        let mut leaf = 0;
        for_each_leaf(document, &mut |slot| {
            *slot = match self.fields[self.leaf_fields[leaf]].1 {
                Field::Row(field) => field(book, position, r),
                Field::Job(field) => field(book.at(position), r),
            };
            leaf += 1;
        });
    }
}

/// The paths of the leaves (non-objects) of `value`, in document order.
fn leaf_paths(value: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        Value::Object(map) => {
            for (key, member) in map {
                prefix.push(key.clone());
                leaf_paths(member, prefix, out);
                prefix.pop();
            }
        }
        _ => out.push(prefix.clone()),
    }
}

/// Calls `visit` on each leaf of `value` in document order (a field's value is never
/// an object, so the leaves stay the same from one job to the next).
fn for_each_leaf(value: &mut Value, visit: &mut impl FnMut(&mut Value)) {
    match value {
        Value::Object(map) => map
            .values_mut()
            .for_each(|member| for_each_leaf(member, visit)),
        leaf => visit(leaf),
    }
}

/// The top-level members the paths of `filter` and `sort` start with: what a job must
/// be rendered with to be judged when [`Narrow`] does not know every path.
pub(super) fn members_named(filter: &Filter, sort: &Sort) -> Vec<String> {
    let mut paths: Vec<&Path> = sort.keys.iter().map(|(path, _)| path).collect();
    paths_of(filter, &mut paths);
    let mut members: Vec<String> = Vec::new();
    for path in paths {
        let first = path.as_str().split('.').next().unwrap_or_default();
        if !members.iter().any(|m| m == first) {
            members.push(first.to_string());
        }
    }
    members
}

fn paths_of<'f>(filter: &'f Filter, out: &mut Vec<&'f Path>) {
    match filter {
        Filter::And(members) | Filter::Or(members) => {
            members.iter().for_each(|m| paths_of(m, out));
        }
        Filter::Field(path, _) => out.push(path),
    }
}
