//! Failed-login throttling: after too many failures from one source or for one user name
//! within a window, further logins are refused unchecked until the window has passed.
//! A login already verified and remembered still passes (it proves the password, and
//! keeps a busy client working while someone else guesses at its name).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most this many sources and names are tracked; beyond it expired ones are dropped,
/// and if none has expired the record starts over.
const MAX_TRACKED: usize = 100_000;

struct Failures {
    count: u32,
    since: Instant,
}

pub struct LoginThrottle {
    max_failures: u32,
    window: Duration,
    failures: Mutex<HashMap<String, Failures>>,
}

impl LoginThrottle {
    /// `max_failures` 0 turns throttling off.
    pub fn new(max_failures: u32, window: Duration) -> Self {
        Self {
            max_failures,
            window,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn keys(source: Option<&str>, user: &str) -> Vec<String> {
        let mut keys = vec![format!("user:{user}")];
        if let Some(source) = source {
            keys.push(format!("source:{source}"));
        }
        keys
    }

    /// How long until `source` and `user` may try again; `None`: now.
    pub fn wait(&self, source: Option<&str>, user: &str) -> Option<Duration> {
        if self.max_failures == 0 {
            return None;
        }
        let now = Instant::now();
        let failures = self.failures.lock().unwrap();
        Self::keys(source, user)
            .iter()
            .filter_map(|key| failures.get(key))
            .filter(|f| f.count >= self.max_failures)
            .filter_map(|f| (f.since + self.window).checked_duration_since(now))
            .filter(|left| !left.is_zero())
            .max()
    }

    /// Counts a failed login of `user` from `source`; `true` when this failure starts a
    /// block (of the name, the source or both).
    pub fn failed(&self, source: Option<&str>, user: &str) -> bool {
        if self.max_failures == 0 {
            return false;
        }
        let now = Instant::now();
        let mut failures = self.failures.lock().unwrap();
        if failures.len() >= MAX_TRACKED {
            failures.retain(|_, f| f.since + self.window > now);
            if failures.len() >= MAX_TRACKED {
                failures.clear();
            }
        }
        let mut blocked = false;
        for key in Self::keys(source, user) {
            let entry = failures.entry(key).or_insert(Failures {
                count: 0,
                since: now,
            });
            if entry.since + self.window <= now {
                *entry = Failures {
                    count: 0,
                    since: now,
                };
            }
            entry.count += 1;
            blocked |= entry.count == self.max_failures;
        }
        blocked
    }

    /// A good login of `user` forgives that name's failures (not the source's).
    pub fn succeeded(&self, user: &str) {
        self.failures
            .lock()
            .unwrap()
            .remove(&format!("user:{user}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_failures_block_the_source_and_the_name() {
        let throttle = LoginThrottle::new(3, Duration::from_secs(60));
        for _ in 0..2 {
            assert!(!throttle.failed(Some("10.0.0.1"), "alice"));
        }
        assert_eq!(throttle.wait(Some("10.0.0.1"), "alice"), None);
        assert!(
            throttle.failed(Some("10.0.0.1"), "alice"),
            "the block starts"
        );
        assert!(throttle.wait(Some("10.0.0.1"), "alice").is_some());
        // The same name from elsewhere, and the same source for another name.
        assert!(throttle.wait(Some("10.0.0.2"), "alice").is_some());
        assert!(throttle.wait(Some("10.0.0.1"), "bob").is_some());
        assert_eq!(throttle.wait(Some("10.0.0.2"), "bob"), None);
        throttle.succeeded("alice");
        assert_eq!(throttle.wait(Some("10.0.0.2"), "alice"), None);
    }

    #[test]
    fn failures_expire_with_the_window_and_zero_turns_it_off() {
        let throttle = LoginThrottle::new(1, Duration::ZERO);
        throttle.failed(None, "a");
        assert_eq!(throttle.wait(None, "a"), None);
        let off = LoginThrottle::new(0, Duration::from_secs(60));
        off.failed(None, "a");
        assert_eq!(off.wait(None, "a"), None);
    }
}
