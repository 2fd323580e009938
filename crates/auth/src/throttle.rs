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

    /// Counts an attempt of `user` from `source` *before* its password is checked, so
    /// that logins sent at once cannot outrun the count: `Err(wait)` when the source or
    /// the name is blocked (the attempt is refused unchecked), else `Ok(starts_block)`:
    /// whether this attempt, if it fails, starts a block. A good login then calls
    /// [`LoginThrottle::succeeded`], which takes the attempt back.
    pub fn attempt(&self, source: Option<&str>, user: &str) -> Result<bool, Duration> {
        if self.max_failures == 0 {
            return Ok(false);
        }
        let now = Instant::now();
        let mut failures = self.failures.lock().unwrap();
        let keys = Self::keys(source, user);
        let wait = keys
            .iter()
            .filter_map(|key| failures.get(key))
            .filter(|f| f.count >= self.max_failures)
            .filter_map(|f| (f.since + self.window).checked_duration_since(now))
            .filter(|left| !left.is_zero())
            .max();
        if let Some(wait) = wait {
            return Err(wait);
        }
        if failures.len() >= MAX_TRACKED {
            failures.retain(|_, f| f.since + self.window > now);
            if failures.len() >= MAX_TRACKED {
                failures.clear();
            }
        }
        let mut starts_block = false;
        for key in keys {
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
            starts_block |= entry.count == self.max_failures;
        }
        Ok(starts_block)
    }

    /// A good login of `user` from `source`: forgives that name's failures, and takes
    /// back the source's count of this attempt (not its earlier failures).
    pub fn succeeded(&self, source: Option<&str>, user: &str) {
        let mut failures = self.failures.lock().unwrap();
        failures.remove(&format!("user:{user}"));
        if let Some(source) = source
            && let Some(entry) = failures.get_mut(&format!("source:{source}"))
        {
            entry.count = entry.count.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_attempts_block_the_source_and_the_name() {
        let throttle = LoginThrottle::new(3, Duration::from_secs(60));
        for _ in 0..2 {
            assert_eq!(throttle.attempt(Some("10.0.0.1"), "alice"), Ok(false));
        }
        assert_eq!(
            throttle.attempt(Some("10.0.0.1"), "alice"),
            Ok(true),
            "this attempt starts the block if it fails"
        );
        assert!(throttle.attempt(Some("10.0.0.1"), "alice").is_err());
        // The same name from elsewhere, and the same source for another name.
        assert!(throttle.attempt(Some("10.0.0.2"), "alice").is_err());
        assert!(throttle.attempt(Some("10.0.0.1"), "bob").is_err());
        assert_eq!(throttle.attempt(Some("10.0.0.2"), "bob"), Ok(false));
        throttle.succeeded(Some("10.0.0.2"), "bob");
        throttle.succeeded(Some("10.0.0.2"), "alice");
        assert_eq!(throttle.attempt(Some("10.0.0.3"), "alice"), Ok(false));
    }

    #[test]
    fn attempts_are_counted_before_they_are_checked() {
        // Many attempts at once: only max_failures of them get to be checked.
        let throttle = LoginThrottle::new(10, Duration::from_secs(60));
        let admitted = (0..300)
            .filter(|_| throttle.attempt(Some("10.0.0.9"), "carol").is_ok())
            .count();
        assert_eq!(admitted, 10);
    }

    #[test]
    fn a_good_login_takes_its_attempt_back() {
        let throttle = LoginThrottle::new(2, Duration::from_secs(60));
        for _ in 0..5 {
            assert!(throttle.attempt(Some("10.0.0.1"), "alice").is_ok());
            throttle.succeeded(Some("10.0.0.1"), "alice");
        }
        assert!(throttle.attempt(Some("10.0.0.1"), "alice").is_ok());
    }

    #[test]
    fn attempts_expire_with_the_window_and_zero_turns_it_off() {
        let throttle = LoginThrottle::new(1, Duration::ZERO);
        let _ = throttle.attempt(None, "a");
        assert_eq!(throttle.attempt(None, "a"), Ok(true));
        let off = LoginThrottle::new(0, Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(off.attempt(None, "a"), Ok(false));
        }
    }
}
