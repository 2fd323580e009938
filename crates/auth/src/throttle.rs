//! Failed-login throttling that a stranger cannot turn against the user they guess at.
//!
//! Failures are counted per *(name, source)*, per *source* and per *name*, where a
//! source is an IPv4 address or an IPv6 /64 (one host's or one site's addresses). Each
//! count that reaches its limit within the window blocks, for the window, then twice
//! it, four times... (at most [`MAX_BACKOFF`] windows) while failures go on:
//! - the pair blocks that name from that source: guessing from one address;
//! - the source blocks every name from it: one address trying many names;
//! - the name (at [`NAME_WIDE_FACTOR`] times the limit) blocks that name from every
//!   source: many addresses guessing one name.
//!
//! A source from which the name has logged in before is *known*: the source's and the
//! name's blocks do not apply to it, so that nobody else's failures (from another
//! address, or from a shared one) keep a user out of an address they use. Only its own
//! failures (the pair) block it.
//!
//! The table is bounded: when full, expired counts go first, then the counts that block
//! nothing, oldest first; a block is dropped only when everything tracked is a block.
//! Spraying from many sources therefore cannot flush a block out of it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// At most this many counts are tracked (about 100 bytes each).
const MAX_TRACKED: usize = 100_000;
/// At most this many (name, source) pairs are remembered as known.
pub const MAX_KNOWN: usize = 100_000;
/// A name is blocked for unknown sources after this many times the limit, from anywhere.
pub const NAME_WIDE_FACTOR: u32 = 10;
/// The longest block, in windows.
pub const MAX_BACKOFF: u32 = 16;

#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Pair(String, String),
    Source(String),
    Name(String),
}

struct Count {
    failures: u32,
    /// When the current window of failures began.
    since: Instant,
    /// Blocks so far without a quiet window between them (the backoff's exponent).
    strikes: u32,
    blocked_until: Option<Instant>,
    last: Instant,
    /// Failures not audited one by one (a source's: one audit event per window).
    unreported: u32,
}

impl Count {
    fn new(now: Instant) -> Self {
        Count {
            failures: 0,
            since: now,
            strikes: 0,
            blocked_until: None,
            last: now,
            unreported: 0,
        }
    }

    fn blocks(&self, now: Instant) -> Option<Duration> {
        self.blocked_until
            .and_then(|until| until.checked_duration_since(now))
            .filter(|left| !left.is_zero())
    }
}

#[derive(Default)]
struct Tables {
    counts: HashMap<Key, Count>,
    /// (name, source) pairs that logged in, with when they last did.
    known: HashMap<(String, String), Instant>,
}

pub struct LoginThrottle {
    max_failures: u32,
    window: Duration,
    /// Read on every login (remembered ones included), written on failures and on a
    /// source's first login: readers do not wait for each other.
    tables: RwLock<Tables>,
}

/// What a failure changed, for the audit.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Failure {
    /// A block started (of the pair, the source or the name), lasting this long.
    pub blocked: Option<Duration>,
    /// Audit this failure: it is its source's first in a window (or it has no source),
    /// and its source had this many more in its last window that were not audited.
    pub report: Option<u32>,
}

/// A name as throttled: a directory matches names whatever their case and surrounding
/// spaces, so `LENA` and ` lena` are guesses at lena.
pub fn fold(name: &str) -> String {
    name.trim().to_lowercase()
}

/// The source as throttled: an IPv4 address, or the /64 of an IPv6 one (a host or a
/// site has a /64 to itself, so its addresses are one source). Anything that is not an
/// address is taken as it is.
pub fn source_group(source: &str) -> String {
    match source.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
        Ok(IpAddr::V4(v4)) => v4.to_string(),
        Err(_) => source.to_string(),
    }
}

impl LoginThrottle {
    /// `max_failures` 0 turns throttling off.
    pub fn new(max_failures: u32, window: Duration) -> Self {
        Self {
            max_failures,
            window,
            tables: RwLock::new(Tables::default()),
        }
    }

    /// Counts failures for the audit's once-a-window reports, and never blocks.
    pub fn counting_only(window: Duration) -> Self {
        Self::new(u32::MAX, window)
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    fn keys(source: Option<&str>, name: &str) -> Vec<Key> {
        let name = &fold(name);
        let mut keys = vec![Key::Name(name.to_string())];
        if let Some(source) = source {
            let group = source_group(source);
            keys.push(Key::Pair(name.to_string(), group.clone()));
            keys.push(Key::Source(group));
        }
        keys
    }

    fn limit(&self, key: &Key) -> u32 {
        match key {
            Key::Name(_) => self.max_failures.saturating_mul(NAME_WIDE_FACTOR),
            _ => self.max_failures,
        }
    }

    /// Whether `name` has logged in from `source` (so that only its own failures there
    /// block it).
    pub fn is_known(&self, source: Option<&str>, name: &str) -> bool {
        let tables = self.tables.read().unwrap();
        Self::known_in(&tables, source, name)
    }

    fn known_in(tables: &Tables, source: Option<&str>, name: &str) -> bool {
        !tables.known.is_empty()
            && source.is_some_and(|s| tables.known.contains_key(&(fold(name), source_group(s))))
    }

    /// Takes `pairs` (name, source) as known: those the store kept (`known_sources`).
    pub fn preload_known(&self, pairs: impl IntoIterator<Item = (String, String)>) {
        let now = Instant::now();
        let mut tables = self.tables.write().unwrap();
        for (name, source) in pairs.into_iter().take(MAX_KNOWN) {
            tables
                .known
                .insert((fold(&name), source_group(&source)), now);
        }
    }

    /// How long until `name` may try again from `source`; `None`: now.
    pub fn wait(&self, source: Option<&str>, name: &str) -> Option<Duration> {
        if self.max_failures == 0 {
            return None;
        }
        let now = Instant::now();
        let tables = self.tables.read().unwrap();
        // Every request with a password asks: nothing to look up while nothing failed.
        if tables.counts.is_empty() {
            return None;
        }
        let known = Self::known_in(&tables, source, name);
        Self::keys(source, name)
            .iter()
            .filter(|key| !known || matches!(key, Key::Pair(..)))
            .filter_map(|key| tables.counts.get(key))
            .filter_map(|count| count.blocks(now))
            .max()
    }

    /// Counts a failed login of `name` from `source`.
    pub fn failed(&self, source: Option<&str>, name: &str) -> Failure {
        if self.max_failures == 0 {
            return Failure::default();
        }
        let now = Instant::now();
        let mut tables = self.tables.write().unwrap();
        let mut failure = Failure {
            blocked: None,
            report: source.is_none().then_some(0),
        };
        for key in Self::keys(source, name) {
            if !tables.counts.contains_key(&key) && tables.counts.len() >= MAX_TRACKED {
                self.make_room(&mut tables.counts, now);
            }
            let limit = self.limit(&key);
            let is_source = matches!(key, Key::Source(_));
            let mut fresh = false;
            let count = tables.counts.entry(key).or_insert_with(|| {
                fresh = true;
                Count::new(now)
            });
            let new_window = fresh || now >= count.since + self.window;
            if let Some(block) = self.count_one(count, limit, now) {
                failure.blocked = failure.blocked.max(Some(block));
            }
            if is_source && new_window {
                failure.report = Some(std::mem::take(&mut count.unreported));
            } else if is_source {
                count.unreported += 1;
            }
        }
        failure
    }

    /// Adds one failure to `count`; the length of the block it starts, if it does.
    fn count_one(&self, count: &mut Count, limit: u32, now: Instant) -> Option<Duration> {
        let quiet_since_block = count
            .blocked_until
            .is_none_or(|until| now >= until + self.window);
        if now >= count.since + self.window {
            count.failures = 0;
            count.since = now;
            if quiet_since_block {
                count.strikes = 0;
            }
        }
        count.failures += 1;
        count.last = now;
        if count.failures < limit || count.blocks(now).is_some() {
            return None;
        }
        let block = self.window * 2u32.saturating_pow(count.strikes).min(MAX_BACKOFF);
        count.strikes += 1;
        count.failures = 0;
        count.since = now;
        count.blocked_until = Some(now + block);
        Some(block)
    }

    /// Drops counts to get under the bound: expired ones, then those that block
    /// nothing (oldest first), then (only if all block) the oldest blocks.
    fn make_room(&self, counts: &mut HashMap<Key, Count>, now: Instant) {
        let window = self.window;
        counts.retain(|_, c| c.blocks(now).is_some() || now < c.last + window * MAX_BACKOFF);
        let target = MAX_TRACKED - MAX_TRACKED / 10;
        if counts.len() < target {
            return;
        }
        let mut order: Vec<(bool, Instant, Key)> = counts
            .iter()
            .map(|(k, c)| (c.blocks(now).is_some(), c.last, k.clone()))
            .collect();
        order.sort_by_key(|(blocking, last, _)| (*blocking, *last));
        for (_, _, key) in order.into_iter().take(counts.len() - target) {
            counts.remove(&key);
        }
    }

    /// A good login of `name` from `source`: its pair's failures are forgiven, and the
    /// source is known for the name from now on. Answers the pair (folded name, source
    /// as throttled) when it was not known before, for the store to keep.
    pub fn succeeded(&self, source: Option<&str>, name: &str) -> Option<(String, String)> {
        let source = source?;
        let group = source_group(source);
        let name = fold(name);
        let pair = (name, group);
        {
            // The common case, a known source with nothing to forgive, under a read lock.
            let tables = self.tables.read().unwrap();
            if tables.counts.is_empty() && tables.known.contains_key(&pair) {
                return None;
            }
        }
        let (name, group) = pair;
        let mut tables = self.tables.write().unwrap();
        if !tables.counts.is_empty() {
            tables
                .counts
                .remove(&Key::Pair(name.clone(), group.clone()));
        }
        let pair = (name, group);
        if tables.known.contains_key(&pair) {
            return None;
        }
        if tables.known.len() >= MAX_KNOWN {
            let oldest = tables.known.iter().min_by_key(|(_, at)| **at);
            if let Some(oldest) = oldest.map(|(k, _)| k.clone()) {
                tables.known.remove(&oldest);
            }
        }
        tables.known.insert(pair.clone(), Instant::now());
        Some(pair)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn fail(throttle: &LoginThrottle, source: &str, name: &str, times: u32) -> Failure {
        let mut last = Failure::default();
        for _ in 0..times {
            last = throttle.failed(Some(source), name);
        }
        last
    }

    #[test]
    fn guessing_from_one_address_blocks_that_address_not_the_name_elsewhere() {
        let throttle = LoginThrottle::new(3, MINUTE);
        assert_eq!(fail(&throttle, "10.0.0.1", "admin", 2).blocked, None);
        assert_eq!(throttle.wait(Some("10.0.0.1"), "admin"), None);
        assert_eq!(
            fail(&throttle, "10.0.0.1", "admin", 1).blocked,
            Some(MINUTE)
        );
        assert!(throttle.wait(Some("10.0.0.1"), "admin").is_some());
        assert!(
            throttle.wait(Some("10.0.0.1"), "bob").is_some(),
            "the source"
        );
        assert_eq!(throttle.wait(Some("10.0.0.2"), "admin"), None, "elsewhere");
    }

    #[test]
    fn a_known_source_keeps_its_way_in_through_others_blocks() {
        let throttle = LoginThrottle::new(3, MINUTE);
        throttle.succeeded(Some("10.0.0.9"), "admin");
        // Many addresses guess at admin until the name is blocked everywhere...
        for i in 0..(3 * NAME_WIDE_FACTOR) {
            throttle.failed(Some(&format!("10.1.{}.{}", i / 200, i % 200)), "admin");
        }
        assert!(
            throttle.wait(Some("10.0.0.8"), "admin").is_some(),
            "an unknown source"
        );
        // ...and someone behind the same address as admin guesses other names.
        fail(&throttle, "10.0.0.9", "carol", 3);
        assert!(throttle.wait(Some("10.0.0.9"), "carol").is_some());
        assert_eq!(throttle.wait(Some("10.0.0.9"), "admin"), None, "known");
        // Its own failures still count.
        fail(&throttle, "10.0.0.9", "admin", 3);
        assert!(throttle.wait(Some("10.0.0.9"), "admin").is_some());
    }

    #[test]
    fn blocks_double_while_failures_go_on() {
        let throttle = LoginThrottle::new(1, MINUTE);
        let now = Instant::now();
        let mut count = Count::new(now);
        let second = Duration::from_secs(1);
        assert_eq!(throttle.count_one(&mut count, 1, now), Some(MINUTE));
        let later = now + MINUTE + second;
        assert_eq!(throttle.count_one(&mut count, 1, later), Some(2 * MINUTE));
        let much_later = later + 2 * MINUTE + second;
        assert_eq!(
            throttle.count_one(&mut count, 1, much_later),
            Some(4 * MINUTE)
        );
        // A quiet window after the block ends forgives the strikes.
        let quiet = much_later + 4 * MINUTE + MINUTE + second;
        assert_eq!(throttle.count_one(&mut count, 1, quiet), Some(MINUTE));
    }

    #[test]
    fn a_source_is_audited_once_a_window() {
        let throttle = LoginThrottle::new(100, MINUTE);
        assert_eq!(throttle.failed(Some("10.0.0.1"), "a").report, Some(0));
        for name in ["a", "b", "c"] {
            assert_eq!(throttle.failed(Some("10.0.0.1"), name).report, None);
        }
        assert_eq!(throttle.failed(Some("10.0.0.2"), "a").report, Some(0));
        assert_eq!(throttle.failed(None, "a").report, Some(0));
    }

    #[test]
    fn ipv6_sources_are_grouped_by_their_64() {
        assert_eq!(source_group("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(source_group("2001:db8:1:2:bbbb::7"), "2001:db8:1:2::/64");
        assert_eq!(source_group("::ffff:10.0.0.1"), "10.0.0.1");
        assert_eq!(source_group("10.0.0.1"), "10.0.0.1");
        let throttle = LoginThrottle::new(2, MINUTE);
        throttle.failed(Some("2001:db8:1:2::1"), "admin");
        throttle.failed(Some("2001:db8:1:2::2"), "admin");
        assert!(throttle.wait(Some("2001:db8:1:2::3"), "admin").is_some());
    }

    #[test]
    fn spraying_cannot_flush_a_block() {
        let throttle = LoginThrottle::new(2, MINUTE);
        fail(&throttle, "10.0.0.1", "admin", 2);
        assert!(throttle.wait(Some("10.0.0.1"), "admin").is_some());
        for i in 0..(MAX_TRACKED as u32 / 2 + 10) {
            let source = format!("172.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
            throttle.failed(Some(&source), &format!("client{}", i % 7));
        }
        assert!(throttle.tables.read().unwrap().counts.len() <= MAX_TRACKED);
        assert!(throttle.wait(Some("10.0.0.1"), "admin").is_some());
    }

    #[test]
    fn a_name_in_another_case_or_with_spaces_is_the_same_name() {
        let lena = LoginThrottle::keys(Some("10.0.0.1"), "lena");
        for name in ["LENA", " Lena "] {
            assert!(
                LoginThrottle::keys(Some("10.0.0.1"), name) == lena,
                "{name}"
            );
        }
    }

    #[test]
    fn known_pairs_are_said_once_and_can_be_preloaded() {
        let throttle = LoginThrottle::new(3, MINUTE);
        assert_eq!(
            throttle.succeeded(Some("10.0.0.9"), "Admin"),
            Some(("admin".into(), "10.0.0.9".into()))
        );
        assert_eq!(throttle.succeeded(Some("10.0.0.9"), "admin"), None);
        let restarted = LoginThrottle::new(3, MINUTE);
        restarted.preload_known([("admin".to_string(), "10.0.0.9".to_string())]);
        assert!(restarted.is_known(Some("10.0.0.9"), "admin"));
        assert!(!restarted.is_known(Some("10.0.0.8"), "admin"));
    }

    #[test]
    fn zero_turns_it_off() {
        let off = LoginThrottle::new(0, MINUTE);
        off.failed(Some("10.0.0.1"), "a");
        assert_eq!(off.wait(Some("10.0.0.1"), "a"), None);
    }
}
