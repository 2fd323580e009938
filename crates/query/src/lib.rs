//! The list-query language of the interface (spec part 1, rule 3).
//!
//! A list request carries `query` (a Mongo-style filter), `sort`, `max`/`offset` and
//! `fields`/`exclude-fields`. This crate parses each into a typed value and defines what
//! it means over `serde_json::Value` documents: [`ListQuery::run`] is the reference
//! semantics that every store backend must reproduce exactly.
//!
//! The order of values ([`order`]) is defined once, as a byte encoding whose byte order
//! *is* the value order; the evaluator compares values with the same rules, and the
//! stores index those bytes, so SQL and the evaluator cannot disagree about order.

pub mod compact;
mod error;
pub mod filter;
pub mod order;
pub mod paging;
pub mod path;
pub mod projection;
pub mod scan;
pub mod shape;
pub mod sort;
pub mod sort_value;
#[cfg(feature = "testing")]
pub mod testing;
pub mod top;
pub mod view;

pub use compact::CompactDoc;
pub use error::QueryError;
pub use filter::{Cond, Filter, Literal};
pub use paging::Paging;
pub use path::Path;
pub use projection::Projection;
pub use sort::{Direction, Sort};
pub use sort_value::SortValue;
pub use top::Top;
pub use view::DocView;

use serde_json::Value;

/// Filter, sort and paging of one list request (projection is applied by the caller,
/// after the documents have been turned into their wire representation).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListQuery {
    pub filter: Filter,
    pub sort: Sort,
    pub paging: Paging,
}

/// What a list operation answers: how many documents matched, and the page asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub total: usize,
    pub items: Vec<T>,
}

impl ListQuery {
    /// The reference semantics: keep the documents that match, order them (ties keep
    /// their input order), then cut the page.
    pub fn run<'a, I>(&self, documents: I) -> Page<&'a Value>
    where
        I: IntoIterator<Item = &'a Value>,
    {
        let mut matched: Vec<&Value> = documents
            .into_iter()
            .filter(|doc| self.filter.matches(*doc))
            .collect();
        self.sort.sort(&mut matched, |doc| doc);
        let total = matched.len();
        Page {
            total,
            items: self.paging.cut(matched),
        }
    }

    /// [`ListQuery::run_positions`] over `count` documents made one at a time by
    /// `document` and dropped once judged: what is kept is the sort values and position
    /// of at most about twice `offset + max` matches ([`Top`]), so the memory a list
    /// takes follows its page, not the documents (a list over every job of a deep queue).
    pub fn run_streamed(
        &self,
        count: usize,
        mut document: impl FnMut(usize) -> Value,
    ) -> Page<usize> {
        let mut top = Top::new(self);
        for i in 0..count {
            top.offer(i, &document(i));
        }
        top.finish()
    }

    /// [`ListQuery::run`] over `documents`, answering the positions of the page's
    /// documents (for callers that render something else than what they filter).
    pub fn run_positions(&self, documents: &[Value]) -> Page<usize> {
        let mut matched: Vec<(usize, &Value)> = documents
            .iter()
            .enumerate()
            .filter(|(_, doc)| self.filter.matches(*doc))
            .collect();
        self.sort.sort(&mut matched, |(_, doc)| doc);
        Page {
            total: matched.len(),
            items: self
                .paging
                .cut(matched)
                .into_iter()
                .map(|(i, _)| i)
                .collect(),
        }
    }
}
