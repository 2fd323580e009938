//! What one ordinary user may ask of the scheduler (`[scheduler.limits]`): bounds on
//! what a request may cost everyone else. Callers whose permission covers everyone
//! (administrators, `Requester::admin`) are not limited.

use serde::Deserialize;

use crate::job::ArraySpec;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// The most sub-jobs one job array may have (Slurm's `MaxArraySize` is 1001).
    pub max_array_size: usize,
    /// The most jobs (array sub-jobs included) one user may have waiting to start.
    pub max_queued_jobs_per_user: usize,
    /// The longest reservation an ordinary user may make, in seconds; 0 (the default):
    /// only administrators create reservations.
    pub user_reservation_max_seconds: i64,
    /// The most processors one reservation of an ordinary user may hold; none: no bound
    /// beyond the duration.
    pub user_reservation_max_processors: Option<u32>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_array_size: 1001,
            max_queued_jobs_per_user: 10_000,
            user_reservation_max_seconds: 0,
            user_reservation_max_processors: None,
        }
    }
}

impl Limits {
    /// What is wrong with the configured limits.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.max_array_size == 0 || self.max_array_size > ArraySpec::MAX_SIZE {
            problems.push(format!(
                "max_array_size: must be between 1 and {}",
                ArraySpec::MAX_SIZE
            ));
        }
        if self.max_queued_jobs_per_user == 0 {
            problems.push("max_queued_jobs_per_user: must be at least 1".into());
        }
        if self.user_reservation_max_seconds < 0 {
            problems.push("user_reservation_max_seconds: must not be negative".into());
        }
        problems
    }
}
