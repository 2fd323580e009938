//! The page of a list found in one pass, with memory bounded by the page.
//!
//! The reference ([`crate::ListQuery::run`]) keeps every match, sorts them stably and
//! cuts `offset`/`max`. [`Top`] gives the same page while keeping at most about twice
//! `offset + max` candidates: documents are offered in input order, each match keeps its
//! sort values, the order it was offered in and what the caller gave with it (a position,
//! a job), and when the candidates fill up the best `offset + max` are selected and the
//! rest dropped. Ties are broken by the order of offering, which is exactly the stable
//! sort's order, so the page is the reference's page.

use std::cmp::Ordering;

use serde_json::Value;

use crate::sort_value::SortValue;
use crate::view::DocView;
use crate::{ListQuery, Page};

/// Candidates kept before the first selection, whatever the page (a small page then
/// costs no selection at all over a short list).
const SLACK: usize = 1024;

/// A match the page may use: its sort values, when it was offered, and its item.
type Candidate<T> = (Vec<Option<SortValue>>, usize, T);

/// One pass over a list's documents that keeps only what its page can use.
pub struct Top<'q, T = usize> {
    query: &'q ListQuery,
    /// `offset + max`: how many of the best matches the page can need (`None`: all).
    keep: Option<usize>,
    kept: Vec<Candidate<T>>,
    /// How many were offered (the tie-breaker).
    offered: usize,
    /// The sort values and number of the worst candidate kept at the last selection: a
    /// match that does not sort before it can never be on the page, and is dropped
    /// without copying anything.
    bar: Option<(Vec<Option<SortValue>>, usize)>,
    total: usize,
}

impl<'q, T> Top<'q, T> {
    pub fn new(query: &'q ListQuery) -> Top<'q, T> {
        let keep = query
            .paging
            .max
            .map(|max| max.saturating_add(query.paging.offset));
        Top {
            query,
            keep,
            kept: Vec::new(),
            offered: 0,
            bar: None,
            total: 0,
        }
    }

    /// Judges `doc`, the document of `item`; documents must be offered in their input
    /// order (the order ties keep).
    pub fn offer(&mut self, item: T, doc: &Value) {
        self.offer_with(doc, || item);
    }

    /// [`Top::offer`] that makes the item only for a document it keeps (a scan that
    /// would otherwise copy a handle to every document it judges).
    pub fn offer_with(&mut self, doc: &Value, item: impl FnOnce() -> T) {
        let seq = self.offered;
        self.offered += 1;
        self.judge(seq, doc, item);
    }

    /// [`Top::offer_with`] of the `seq`-th document of the list. A sorted list may be
    /// offered in any order: a scan whose sort likely follows the list's order backwards
    /// (a descending sort on something that grows with it) offers it backwards, so that
    /// few matches beat the page's worst and need keeping. An unsorted list keeps the
    /// first matches offered, so it is offered in order. Parts of one list judged side
    /// by side are joined by [`Top::merge`].
    pub fn offer_at<'a, V: DocView<'a>>(&mut self, seq: usize, doc: V, item: impl FnOnce() -> T) {
        self.offered = self.offered.max(seq + 1);
        self.judge(seq, doc, item);
    }

    fn judge<'a, V: DocView<'a>>(&mut self, seq: usize, doc: V, item: impl FnOnce() -> T) {
        if !self.query.filter.matches(doc) {
            return;
        }
        self.total += 1;
        let sort = &self.query.sort;
        if sort.is_empty() {
            // Input order is the answer's order: the first `keep` matches are the page.
            if self.keep.is_none_or(|keep| self.kept.len() < keep) {
                self.kept.push((Vec::new(), seq, item()));
            }
            return;
        }
        if let Some((bar, bar_seq)) = &self.bar
            && self.against(doc, bar).then(seq.cmp(bar_seq)) != Ordering::Less
        {
            return;
        }
        self.kept.push((sort.keys_of(doc), seq, item()));
        if let Some(keep) = self.keep
            && self.kept.len() >= keep.saturating_mul(2).max(SLACK)
        {
            self.select(keep);
        }
    }

    /// Keeps the best `keep` candidates (in no particular order).
    fn select(&mut self, keep: usize) {
        if keep == 0 {
            self.kept.clear();
        } else if keep < self.kept.len() {
            let order = self.order();
            self.kept.select_nth_unstable_by(keep - 1, order);
            self.kept.truncate(keep);
            let (worst, seq, _) = &self.kept[keep - 1];
            self.bar = Some((worst.clone(), *seq));
        }
    }

    /// How `doc` sorts against the sort values `bar`.
    fn against<'a, V: DocView<'a>>(&self, doc: V, bar: &[Option<SortValue>]) -> Ordering {
        let sort = &self.query.sort;
        let values = sort.keys.iter().map(|(path, _)| path.first(doc));
        sort.compare_with_kept(values, bar)
    }

    /// The answer's order over candidates: the sort, then the order of offering.
    fn order(&self) -> impl Fn(&Candidate<T>, &Candidate<T>) -> Ordering + use<'q, T> {
        let query: &'q ListQuery = self.query;
        move |(a, i, _), (b, j, _)| query.sort.compare_keys(a, b).then(i.cmp(j))
    }

    /// Joins the candidates of `other`, a `Top` of the same query over another part of
    /// the list (see [`Top::offer_at`]).
    pub fn merge(mut self, other: Top<'q, T>) -> Top<'q, T> {
        self.total += other.total;
        self.offered = self.offered.max(other.offered);
        self.kept.extend(other.kept);
        // A bar is only ever a shortcut for dropping: the finish orders what is kept.
        self.bar = None;
        if let Some(keep) = self.keep {
            if self.query.sort.is_empty() {
                self.kept.sort_unstable_by_key(|(_, seq, _)| *seq);
                self.kept.truncate(keep);
            } else {
                self.select(keep);
            }
        }
        self
    }

    /// How many matched so far.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The page: how many matched, and the items of the page's documents in order.
    pub fn finish(mut self) -> Page<T> {
        if self.query.sort.is_empty() {
            // In offering order already, unless parts were merged out of order.
            self.kept.sort_unstable_by_key(|(_, seq, _)| *seq);
        } else {
            let order = self.order();
            self.kept.sort_unstable_by(order);
        }
        Page {
            total: self.total,
            items: self
                .query
                .paging
                .cut(self.kept)
                .into_iter()
                .map(|(_, _, item)| item)
                .collect(),
        }
    }
}
