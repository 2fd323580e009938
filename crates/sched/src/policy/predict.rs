//! Run-time predictions from each user's history (Tsafrir, Etsion and Feitelson 2007,
//! "Backfilling using system-generated predictions rather than user runtime estimates":
//! EASY++). Users' requested times are mostly far too long and round, so a plan made
//! with them expects every job to run much longer than it will, and keeps short work
//! out of holes it would fit. A user's next job, though, tends to run about as long as
//! their last ones.
//!
//! With `predict_runtimes`, a waiting job is planned by [`Runs::predict`]: the mean run
//! time of its user's last two ended jobs, capped at its requested time (its request
//! where the user has none). A job predicted to end before the reservation it must not
//! delay starts in the hole, where its request would keep it waiting. What stays with
//! the request:
//! - **running jobs** are planned to end at their request, as without predictions, so a
//!   reservation is never promised earlier than the requests allow: planning them by
//!   their predictions too (the paper's EASY++, extended stepwise once outlived) was
//!   worse in the worst case on the tuning logs (1.25 of EASY's mean bounded slowdown
//!   and 3.5 times its maximum wait, against 0.87 and 3.1): a reservation promised
//!   early slips as soon as a prediction is outlived (docs/scheduling.md);
//! - **the order** of the queue (the expansion factor reads the request);
//! - **the limit**: a job is killed at its requested time, never at a prediction.
//!
//! The price is the bound on waiting: a job started on a prediction that runs to a long
//! request holds its processors past the reservation, and a wide job waits for it.
//!
//! What is kept is two numbers per user, fed from jobs' ends (`Engine::exited`, and the
//! ended jobs of the book when the engine loads); a prediction is read from the history
//! as it stands at each pass.

use std::collections::HashMap;

use crate::clock::Seconds;

/// The last two run times of each user's ended jobs.
#[derive(Debug, Clone, Default)]
pub struct Runs {
    by_user: HashMap<String, Last>,
}

/// A user's last run times, most recent first (`count` of them, at most 2).
#[derive(Debug, Clone, Copy, Default)]
struct Last {
    runs: [Seconds; 2],
    count: u8,
}

impl Runs {
    pub fn new() -> Runs {
        Runs::default()
    }

    /// A job of `user` ended after running `seconds`.
    pub fn record(&mut self, user: &str, seconds: Seconds) {
        let seconds = seconds.max(0);
        match self.by_user.get_mut(user) {
            Some(last) => {
                last.runs = [seconds, last.runs[0]];
                last.count = (last.count + 1).min(2);
            }
            None => {
                self.by_user.insert(
                    user.to_string(),
                    Last {
                        runs: [seconds, 0],
                        count: 1,
                    },
                );
            }
        }
    }

    /// How long a job of `user` asking for `requested` seconds is expected to run: the
    /// mean of the user's last two run times (or the one there is), at least 1 second
    /// and at most the request; the request where the user has ended no job yet.
    /// `None` (runs for ever) where nothing was requested: a prediction is no limit.
    pub fn predict(&self, user: &str, requested: Option<i64>) -> Option<i64> {
        let requested = requested.filter(|&d| d > 0)?;
        let Some(last) = self.by_user.get(user).filter(|l| l.count > 0) else {
            return Some(requested);
        };
        let count = i64::from(last.count);
        let sum: i64 = last.runs[..usize::from(last.count)].iter().sum();
        // Rounded up: a prediction of 0 would plan a job as taking nothing.
        let mean = (sum + count - 1) / count;
        Some(mean.clamp(1, requested))
    }

    /// Users with a history.
    pub fn users(&self) -> usize {
        self.by_user.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prediction_is_the_mean_of_the_users_last_two_runs_capped_at_the_request() {
        let mut runs = Runs::new();
        // No history: the request; nothing requested: nothing predicted.
        assert_eq!(runs.predict("ann", Some(3600)), Some(3600));
        assert_eq!(runs.predict("ann", None), None);
        runs.record("ann", 100);
        assert_eq!(
            runs.predict("ann", Some(3600)),
            Some(100),
            "one run: itself"
        );
        runs.record("ann", 301);
        assert_eq!(
            runs.predict("ann", Some(3600)),
            Some(201),
            "mean, rounded up"
        );
        // Only the last two count.
        runs.record("ann", 900);
        assert_eq!(runs.predict("ann", Some(3600)), Some(601));
        // Never past the request, never 0.
        assert_eq!(runs.predict("ann", Some(500)), Some(500));
        runs.record("ann", 0);
        runs.record("ann", 0);
        assert_eq!(runs.predict("ann", Some(500)), Some(1));
        // Another user's history is theirs.
        assert_eq!(runs.predict("bob", Some(3600)), Some(3600));
        assert_eq!(runs.users(), 1);
    }
}
