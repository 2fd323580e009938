//! Answering a job list request without rendering every job.
//!
//! The query language means what the evaluator says over the rendered documents
//! (`ListQuery::run`); this module gets the same answer faster:
//! - equality (`$eq`, `$in` of strings) on the state and credential fields is looked up
//!   in the job book's indexes instead of scanned;
//! - when nothing else is asked, counting needs no rendering at all;
//! - no sort, or a sort on the submission date, is the book's own order (ties keep
//!   submission order, as the stable sort of the reference does), so only the page is
//!   rendered;
//! - anything else renders the candidates the indexes leave and lets the evaluator
//!   decide (correct, and as slow as it must be).

use std::sync::Arc;

use drover_query::filter::{Cond, Filter};
use drover_query::sort::Direction;
use drover_query::{ListQuery, Page};
use drover_sched::job::{Job, JobState};
use drover_sched::{Attribute, JobBook};
use roaring::RoaringBitmap;
use serde_json::Value;

use super::{Listing, Render};

/// The wire path of an indexed attribute, per representation version.
fn attribute_at(path: &str, version: u32) -> Option<Attribute> {
    Some(match (version, path) {
        (2, "states.state") | (1, "state") => Attribute::State,
        (2, "credentials.user") | (1, "user") => Attribute::User,
        (2, "credentials.account") | (1, "account") => Attribute::Account,
        (2, "credentials.jobClass") | (1, "queue") => Attribute::Class,
        (2, "credentials.qos" | "credentials.qosRequested") | (1, "qos" | "qosRequested") => {
            Attribute::Qos
        }
        (2, "credentials.group") | (1, "group") => Attribute::Group,
        _ => return None,
    })
}

/// The index key of a wire value: states are spelt per version.
fn index_value(attribute: Attribute, text: &str, version: u32) -> Option<String> {
    match attribute {
        Attribute::State => JobState::ALL
            .into_iter()
            .find(|s| {
                if version >= 2 {
                    s.as_str() == text
                } else {
                    s.upper() == text
                }
            })
            .map(|s| s.as_str().to_string()),
        _ => Some(text.to_string()),
    }
}

/// Paths whose order is the book's order (submission date).
fn is_submit_date(path: &str, version: u32) -> bool {
    matches!(
        (version, path),
        (2, "dates.submitDate" | "dates.createdDate") | (1, "submitDate")
    )
}

/// The index lookups a filter's top-level conditions allow, and whether they are the
/// whole filter (otherwise the evaluator must judge what they leave).
fn split(filter: &Filter, version: u32) -> (Vec<(Attribute, Vec<String>)>, bool) {
    let members: Vec<&Filter> = match filter {
        Filter::And(members) => members.iter().collect(),
        other => vec![other],
    };
    let mut lookups = Vec::new();
    let mut covered = true;
    for member in members {
        let looked_up = match member {
            Filter::Field(path, cond) => {
                attribute_at(path.as_str(), version).and_then(|attribute| {
                    let literals = match cond {
                        Cond::Eq(literal) => vec![literal],
                        Cond::In(literals) => literals.iter().collect(),
                        _ => return None,
                    };
                    // Strings only, and not dates (those compare as instants).
                    let texts: Option<Vec<&str>> = literals
                        .iter()
                        .map(|l| l.value.as_str().filter(|_| l.date.is_none()))
                        .collect();
                    let values = texts?
                        .into_iter()
                        .filter_map(|t| index_value(attribute, t, version))
                        .collect();
                    Some((attribute, values))
                })
            }
            _ => None,
        };
        match looked_up {
            Some(lookup) => lookups.push(lookup),
            None => covered = false,
        }
    }
    (lookups, covered)
}

/// The positions that pass the lookups and the listing; `None` means every job.
fn candidates(
    book: &JobBook,
    lookups: &[(Attribute, Vec<String>)],
    listing: Listing,
) -> Option<RoaringBitmap> {
    let union = |attribute: Attribute, values: &mut dyn Iterator<Item = &str>| -> RoaringBitmap {
        values
            .filter_map(|v| book.with(attribute, v))
            .fold(RoaringBitmap::new(), |all, set| all | set)
    };
    let mut sets: Vec<RoaringBitmap> = lookups
        .iter()
        .map(|(attribute, values)| union(*attribute, &mut values.iter().map(String::as_str)))
        .collect();
    let states = |last: bool| {
        JobState::ALL
            .into_iter()
            .filter(move |s| s.is_final() == last)
            .map(|s| s.as_str())
    };
    match listing {
        Listing::All => {}
        Listing::Active => sets.push(union(Attribute::State, &mut states(false))),
        Listing::Complete => sets.push(union(Attribute::State, &mut states(true))),
    }
    sets.sort_by_key(|s| s.len());
    let mut sets = sets.into_iter();
    let first = sets.next()?;
    Some(sets.fold(first, |all, set| all & set))
}

/// The candidates in position order (`reverse`: descending).
fn positions<'c>(
    book: &JobBook,
    candidates: &'c Option<RoaringBitmap>,
    reverse: bool,
) -> Box<dyn Iterator<Item = u32> + 'c> {
    match (candidates, reverse) {
        (Some(set), false) => Box::new(set.iter()),
        (Some(set), true) => Box::new(set.iter().rev()),
        (None, false) => Box::new(0..book.len() as u32),
        (None, true) => Box::new((0..book.len() as u32).rev()),
    }
}

/// What the job book alone answers: the page, or the jobs the evaluator must judge
/// (rendered after the book's read lock is released, so a slow query never holds up
/// the engine).
pub(super) enum Outcome {
    Page(Page<Value>),
    Evaluate(Vec<Arc<Job>>),
}

/// Runs `query` over the jobs of `listing` (only `owner`'s, when given) as far as the
/// book's indexes and order go.
pub(super) fn plan(
    book: &JobBook,
    listing: Listing,
    owner: Option<&str>,
    query: &ListQuery,
    version: u32,
    shown: &Render,
    hidden: &std::collections::HashSet<String>,
) -> Outcome {
    let (mut lookups, covered) = split(&query.filter, version);
    if let Some(owner) = owner {
        lookups.push((Attribute::User, vec![owner.to_string()]));
    }
    let candidates = candidates(book, &lookups, listing);
    let by_position = match query.sort.keys.as_slice() {
        [] => Some(false),
        [(path, direction)] if is_submit_date(path.as_str(), version) && book.in_submit_order() => {
            Some(*direction == Direction::Descending)
        }
        _ => None,
    };
    let page = &query.paging;
    match (covered, by_position) {
        // Jobs readers must not see (a failed write) exist only during a store failure:
        // the evaluator's path then, which can leave them out.
        (true, Some(descending)) if hidden.is_empty() => {
            let total = candidates
                .as_ref()
                .map_or(book.len(), |set| set.len() as usize);
            let wanted = page.offset.saturating_add(page.max.unwrap_or(usize::MAX));
            let ordered = in_date_order(
                book,
                positions(book, &candidates, descending),
                descending,
                wanted,
            );
            let items = ordered
                .into_iter()
                .skip(page.offset)
                .take(page.max.unwrap_or(usize::MAX))
                .map(|p| shown.job(book.at(p as usize)))
                .collect();
            Outcome::Page(Page { total, items })
        }
        _ => Outcome::Evaluate(
            positions(book, &candidates, false)
                .map(|p| book.at(p as usize))
                .filter(|job| hidden.is_empty() || !hidden.contains(&job.id))
                .cloned()
                .collect(),
        ),
    }
}

/// The evaluator's answer over `jobs` (the candidates [`plan`] left): every one is
/// rendered with `filter_render` and judged by the whole filter.
pub(super) fn evaluate(
    jobs: &[Arc<Job>],
    query: &ListQuery,
    filter_render: &Render,
    shown: &Render,
) -> Page<Value> {
    let found = query.run_streamed(jobs.len(), |i| filter_render.job(&jobs[i]));
    Page {
        total: found.total,
        items: found
            .items
            .into_iter()
            .map(|i| shown.job(&jobs[i]))
            .collect(),
    }
}

/// The first `wanted` positions in submission-date order. Ascending, that is position
/// order. Descending, jobs of the same second keep ascending position order (the
/// stable sort of the reference), so runs of one second are reversed back.
fn in_date_order(
    book: &JobBook,
    positions: impl Iterator<Item = u32>,
    descending: bool,
    wanted: usize,
) -> Vec<u32> {
    if !descending {
        return positions.take(wanted).collect();
    }
    let second = |p: u32| book.at(p as usize).status.dates.submit;
    let mut out = Vec::new();
    let mut run: Vec<u32> = Vec::new();
    for p in positions {
        if run.last().is_some_and(|&last| second(last) != second(p)) {
            out.extend(run.drain(..).rev());
            if out.len() >= wanted {
                return out;
            }
        }
        run.push(p);
    }
    out.extend(run.drain(..).rev());
    out
}
