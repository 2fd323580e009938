//! Time-ordered ids for stored documents (events, reports, roles, principals).

use crate::dates::Timestamp;

/// Ids of 24 lower-case hex digits that sort in creation order, like the object ids
/// of the original's document store. The counter starts above both the clock
/// (microseconds since the epoch, times 1,024) and the largest id already stored, so ids
/// stay unique and ordered across restarts even when the clock steps back.
#[derive(Debug)]
pub struct IdSequence {
    next: u128,
}

impl IdSequence {
    pub fn starting_after(largest_stored: Option<&str>, now: Timestamp) -> Self {
        let from_clock = (now.as_microsecond().max(0) as u128) << 10;
        let from_store = largest_stored
            .and_then(|id| u128::from_str_radix(id, 16).ok())
            .map_or(0, |n| n + 1);
        Self {
            next: from_clock.max(from_store),
        }
    }

    pub fn next_id(&mut self) -> String {
        let id = format!("{:024x}", self.next);
        self.next += 1;
        id
    }
}

/// A name another program gets as an argument (Slurm's job ids, node names, partitions):
/// letters, digits, `.`, `_`, `-`, not first `-` (never taken for an option), at most
/// 200 bytes.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dates;

    fn at(s: &str) -> Timestamp {
        dates::parse_utc(s).unwrap()
    }

    #[test]
    fn ids_sort_in_creation_order_across_restarts() {
        let now = at("2026-11-22 10:00:00 UTC");
        let mut ids = IdSequence::starting_after(None, now);
        let a = ids.next_id();
        let b = ids.next_id();
        assert_eq!(a.len(), 24);
        assert!(a < b);
        // A restart with the clock set back still continues after the stored ids.
        let mut again = IdSequence::starting_after(Some(&b), at("2020-01-01 00:00:00 UTC"));
        assert!(again.next_id() > b);
    }
}
