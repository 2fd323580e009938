//! `max` and `offset`: which slice of the matching, sorted documents is returned.

use crate::QueryError;

/// A parsed `max`/`offset` pair; the default returns everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Paging {
    pub offset: usize,
    pub max: Option<usize>,
}

impl Paging {
    /// Parses the texts of the `max` and `offset` parameters (non-negative integers).
    pub fn parse(max: Option<&str>, offset: Option<&str>) -> Result<Paging, QueryError> {
        let number = |name: &str, text: &str| {
            text.trim().parse::<usize>().map_err(|_| {
                QueryError::new(format!(
                    "{name} must be a non-negative integer, got '{text}'"
                ))
            })
        };
        Ok(Paging {
            max: max.map(|t| number("max", t)).transpose()?,
            offset: offset
                .map(|t| number("offset", t))
                .transpose()?
                .unwrap_or(0),
        })
    }

    /// Keeps the page of `items`.
    pub fn cut<T>(&self, items: Vec<T>) -> Vec<T> {
        let take = self.max.unwrap_or(usize::MAX);
        items.into_iter().skip(self.offset).take(take).collect()
    }
}
