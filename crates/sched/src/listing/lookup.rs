//! What the job book's indexes and order answer alone ([`by_indexes`]), and the
//! candidates they leave to a [`Scan`], with the lookups to check again on each
//! candidate's row ([`Recheck`]): see the [module](super) for the whole.

use drover_query::filter::{Cond, Filter};
use drover_query::sort::Direction;
use drover_query::{ListQuery, Page};
use roaring::RoaringBitmap;
use serde_json::Value;

use super::fields::Narrow;
use super::scan::{Candidates, Scan};
use super::{Listing, Showing, queue_status};
use crate::book::{Attribute, HoldSet, Interned, JobBook, ScanRow};
use crate::job::{Hold, JobState};

/// What an equality on a wire path can be looked up by.
#[derive(Clone, Copy)]
pub(super) enum Key {
    Indexed(Attribute),
    /// `queueStatus`: the states of that status, in the state index.
    QueueStatus,
    /// The job's id (`name` in version 2): its position.
    Id,
    /// `holds`, a list: the jobs that have a hold of that kind.
    Hold,
}

/// The key of an equality on `path`, per representation version.
fn key_at(path: &str, version: u32) -> Option<Key> {
    Some(Key::Indexed(match (version, path) {
        (2, "states.state") | (1, "state") => Attribute::State,
        (2, "credentials.user") | (1, "user") => Attribute::User,
        (2, "credentials.account") | (1, "account") => Attribute::Account,
        (2, "credentials.jobClass") | (1, "queue") => Attribute::Class,
        (2, "credentials.qos" | "credentials.qosRequested") | (1, "qos" | "qosRequested") => {
            Attribute::Qos
        }
        (2, "credentials.group") | (1, "group") => Attribute::Group,
        (2, "customName") | (1, "name") => Attribute::CustomName,
        (_, "queueStatus") => return Some(Key::QueueStatus),
        (2, "name") | (1, "id") => return Some(Key::Id),
        (_, "holds") => return Some(Key::Hold),
        _ => return None,
    }))
}

/// The index keys of a wire value (states and holds are spelt per version; a queue
/// status is several states).
fn index_values(key: Key, text: &str, version: u32) -> Vec<String> {
    let spelt = |state: JobState| {
        if version >= 2 {
            state.as_str().to_string()
        } else {
            state.upper().to_string()
        }
    };
    match key {
        Key::Indexed(Attribute::State) => JobState::ALL
            .into_iter()
            .filter(|&s| spelt(s) == text)
            .map(|s| s.as_str().to_string())
            .collect(),
        Key::QueueStatus => JobState::ALL
            .into_iter()
            .filter(|&s| {
                let status = queue_status(s);
                if version >= 2 {
                    status == text
                } else {
                    status.to_uppercase() == text
                }
            })
            .map(|s| s.as_str().to_string())
            .collect(),
        Key::Hold => Hold::ALL
            .into_iter()
            .filter(|&h| text == if version >= 2 { h.as_str() } else { h.upper() })
            .map(|h| h.as_str().to_string())
            .collect(),
        _ => vec![text.to_string()],
    }
}

/// The kinds of hold named by index keys of [`Key::Hold`].
fn hold_set(values: &[String]) -> HoldSet {
    HoldSet::of(
        Hold::ALL
            .into_iter()
            .filter(|h| values.iter().any(|v| v == h.as_str())),
    )
}

/// Paths whose order is the book's order (submission date).
fn is_submit_date(path: &str, version: u32) -> bool {
    matches!(
        (version, path),
        (2, "dates.submitDate" | "dates.createdDate") | (1, "submitDate")
    )
}

/// The index lookups a filter's top-level conditions allow, and the rest of the filter:
/// what the evaluator must still judge (an empty `And` when the lookups are all of it).
fn split(filter: &Filter, version: u32) -> (Vec<(Key, Vec<String>)>, Filter) {
    let members: Vec<&Filter> = match filter {
        Filter::And(members) => members.iter().collect(),
        other => vec![other],
    };
    let mut lookups = Vec::new();
    let mut rest = Vec::new();
    for member in members {
        let looked_up = match member {
            Filter::Field(path, cond) => {
                key_at(path.as_str(), version).and_then(|key| {
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
                        .flat_map(|t| index_values(key, t, version))
                        .collect();
                    Some((key, values))
                })
            }
            _ => None,
        };
        match looked_up {
            Some(lookup) => lookups.push(lookup),
            None => rest.push(member.clone()),
        }
    }
    (lookups, Filter::And(rest))
}

/// An index lookup checked again on a job's scan row during a scan: the candidates were
/// taken under an earlier hold of the book's lock, and a job may have changed since (its
/// state above all). Reading the row costs nanoseconds, where judging the lookup's
/// condition again on the job's narrow rendering cost a third of a scan over every held
/// job.
pub(super) enum Recheck {
    States(Vec<JobState>),
    Interned(Attribute, Vec<Interned>),
    Holds(HoldSet),
}

impl Recheck {
    /// The checks of `lookups` (a job's id never changes: a lookup by id needs none).
    pub(super) fn of(book: &JobBook, lookups: &[(Key, Vec<String>)]) -> Vec<Recheck> {
        lookups
            .iter()
            .filter_map(|(key, values)| match key {
                Key::Indexed(Attribute::State) | Key::QueueStatus => Some(Recheck::States(
                    JobState::ALL
                        .into_iter()
                        .filter(|s| values.iter().any(|v| v == s.as_str()))
                        .collect(),
                )),
                // A value never interned is no row's (strings are never removed from a
                // book; a reload makes a new book, so these are made per hold).
                Key::Indexed(attribute) => Some(Recheck::Interned(
                    *attribute,
                    values
                        .iter()
                        .filter_map(|v| book.strings().find(v))
                        .collect(),
                )),
                Key::Hold => Some(Recheck::Holds(hold_set(values))),
                Key::Id => None,
            })
            .collect()
    }

    pub(super) fn passes(&self, row: &ScanRow) -> bool {
        match self {
            Recheck::States(states) => states.contains(&row.state),
            Recheck::Interned(attribute, values) => values.contains(&row.interned(*attribute)),
            Recheck::Holds(holds) => row.hold_set.meets(*holds),
        }
    }
}

/// The states a listing keeps (`None`: all).
fn listing_states(listing: Listing) -> Option<Vec<&'static str>> {
    let last = match listing {
        Listing::All => return None,
        Listing::Active => false,
        Listing::Complete => true,
    };
    let states = JobState::ALL.into_iter().filter(|s| s.is_final() == last);
    Some(states.map(JobState::as_str).collect())
}

/// The positions that pass the lookups and the listing; `None` means every job readers
/// see (the book's durable prefix).
fn candidates(
    book: &JobBook,
    lookups: &[(Key, Vec<String>)],
    listing: Listing,
) -> Option<RoaringBitmap> {
    let union = |attribute: Attribute, values: &mut dyn Iterator<Item = &str>| -> RoaringBitmap {
        values
            .filter_map(|v| book.with(attribute, v))
            .fold(RoaringBitmap::new(), |all, set| all | set)
    };
    let mut sets: Vec<RoaringBitmap> = lookups
        .iter()
        .map(|(key, values)| match key {
            Key::Indexed(attribute) => union(*attribute, &mut values.iter().map(String::as_str)),
            Key::QueueStatus => union(Attribute::State, &mut values.iter().map(String::as_str)),
            Key::Id => values
                .iter()
                .filter_map(|id| book.published_position(id))
                .map(|p| p as u32)
                .collect(),
            Key::Hold => hold_set(values)
                .kinds()
                .fold(RoaringBitmap::new(), |all, h| all | book.with_hold(h)),
        })
        .collect();
    if let Some(states) = listing_states(listing) {
        sets.push(union(Attribute::State, &mut states.into_iter()));
    }
    sets.sort_by_key(|s| s.len());
    let mut sets = sets.into_iter();
    let first = sets.next()?;
    let mut found = sets.fold(first, |all, set| all & set);
    // The indexes know jobs not durable yet: readers never see them.
    found.remove_range(book.published_len() as u32..);
    Some(found)
}

/// The candidates in position order (`reverse`: descending).
pub(super) fn positions<'c>(
    book: &JobBook,
    candidates: &'c Option<RoaringBitmap>,
    reverse: bool,
) -> Box<dyn Iterator<Item = u32> + 'c> {
    match (candidates, reverse) {
        (Some(set), false) => Box::new(set.iter()),
        (Some(set), true) => Box::new(set.iter().rev()),
        (None, false) => Box::new(0..book.published_len() as u32),
        (None, true) => Box::new((0..book.published_len() as u32).rev()),
    }
}

/// What the job book alone answers: the page, or the positions the evaluator must judge.
pub(super) enum Outcome {
    Page(Page<Value>),
    Scan(Box<Scan>),
}

/// Runs `query` over the jobs of `listing` (only `owner`'s, when given) as far as the
/// book's indexes and order go.
pub(super) fn by_indexes(
    book: &JobBook,
    listing: Listing,
    owner: Option<&str>,
    query: &ListQuery,
    version: u32,
    shown: Showing<'_>,
) -> Outcome {
    let (mut lookups, rest) = split(&query.filter, version);
    let covered = matches!(&rest, Filter::And(members) if members.is_empty());
    let scan_query = ListQuery {
        filter: rest,
        ..query.clone()
    };
    // What can change of a job the indexes chose: its state (the listing's too) and a
    // modified credential or name. A job's user never changes.
    let mut rechecked = lookups.clone();
    if let Some(states) = listing_states(listing) {
        let states = states.into_iter().map(String::from).collect();
        rechecked.push((Key::Indexed(Attribute::State), states));
    }
    if let Some(owner) = owner {
        lookups.push((Key::Indexed(Attribute::User), vec![owner.to_string()]));
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
        (true, Some(descending)) => {
            let total = candidates
                .as_ref()
                .map_or(book.published_len(), |set| set.len() as usize);
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
        _ => Outcome::Scan(Box::new(Scan {
            candidates: match candidates {
                Some(set) => Candidates::Set(set),
                None => Candidates::Below(book.published_len() as u32),
            },
            date_order: by_position.filter(|_| !query.sort.is_empty()),
            rechecked,
            rows_only: !Narrow::of(&scan_query.filter, &scan_query.sort, version).reads_jobs(),
            query: scan_query,
        })),
    }
}

/// The first `wanted` positions in submission-date order. Ascending, that is position
/// order. Descending, jobs of the same second keep ascending position order (the
/// stable sort of the reference), so runs of one second are reversed back.
pub(super) fn in_date_order(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_lookups_leave_the_rest_of_the_filter_to_judge() {
        let filter = |text: &str| Filter::parse_str(text, &drover_domain::dates::WireDates::utc());
        let (lookups, rest) = split(
            &filter(r#"{"states.state":"Hold","priorities.user":{"$lt":2},"credentials.qos":{"$in":["a","b"]}}"#)
                .unwrap(),
            2,
        );
        assert_eq!(lookups.len(), 2);
        let priority = filter(r#"{"priorities.user":{"$lt":2}}"#).unwrap();
        assert_eq!(rest, Filter::And(vec![priority]));
        let (lookups, rest) = split(&filter(r#"{"state":"HOLD"}"#).unwrap(), 1);
        assert_eq!(lookups.len(), 1);
        assert_eq!(rest, Filter::default());
        // An `$or` is judged whole.
        let either = filter(r#"{"$or":[{"customName":"c"},{"customName":"d"}]}"#).unwrap();
        let (lookups, rest) = split(&either, 2);
        assert!(lookups.is_empty());
        assert_eq!(rest, Filter::And(vec![either]));
    }
}
