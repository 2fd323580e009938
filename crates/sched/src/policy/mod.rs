//! Scheduling policy: in which order waiting jobs are considered ([`priority`]) and
//! which of them may start now without delaying the ones ahead ([`planner`]: FCFS, EASY or
//! conservative backfill). Pure code over the engine's state: the engine and the
//! simulator (`drover replay`) run the same functions.

pub mod planner;
pub mod predict;
pub mod priority;

use std::collections::BTreeMap;

use serde::Deserialize;

pub use planner::{Decision, Planner};
pub use predict::Runs;
pub use priority::{Priority, Usage};

/// How jobs behind a job that cannot start yet are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backfill {
    /// Strict order: nothing starts ahead of a job that waits.
    Fcfs,
    /// The first job that cannot start gets a reservation (the earliest time it fits);
    /// later jobs start now only if they do not delay it.
    Easy,
    /// Every job that cannot start gets a reservation; later jobs delay none of them.
    Conservative,
}

impl Backfill {
    pub fn as_str(self) -> &'static str {
        match self {
            Backfill::Fcfs => "fcfs",
            Backfill::Easy => "easy",
            Backfill::Conservative => "conservative",
        }
    }
}

/// Weights of the priority factors (see [`priority`]). A job's priority is the weighted
/// sum; an administrator's system priority always comes first.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Weights {
    /// Per point of the submitter's own priority (-1024..1023).
    pub user_priority: f64,
    /// Per minute waited in the queue. 0 by default: minutes are an absolute scale, and
    /// weights in them fit one workload's times and not another's; the expansion factor
    /// ages jobs relative to their own length, and `reserve_oldest` keeps any job from
    /// starving.
    pub queue_minutes: f64,
    /// Per unit of expansion factor, (wait + requested time) / requested time: short
    /// jobs rise quickly, so they do not wait many times their length.
    pub expansion: f64,
    /// Per doubling of the processors asked, subtracted: narrow jobs fit the holes
    /// backfilling leaves, and unlike a requested time, a width is never misestimated.
    pub narrow_request: f64,
    /// Per doubling of the requested time, subtracted: short requests go first.
    pub short_request: f64,
    /// Per percent of the recent usage (decayed processor-seconds) the job's user
    /// consumed, subtracted: heavy users yield to light ones.
    pub fairshare: f64,
    /// Added for jobs of these QoS names.
    pub qos: BTreeMap<String, f64>,
}

impl Weights {
    /// Whether the order never changes while jobs wait: only the submitter's priority
    /// counts, so the queue's own order is the priority order.
    pub fn is_static(&self) -> bool {
        self.user_priority > 0.0
            && self.queue_minutes == 0.0
            && self.expansion == 0.0
            && self.narrow_request == 0.0
            && self.short_request == 0.0
            && self.fairshare == 0.0
            && self.qos.is_empty()
    }

    /// Submission order, the submitter's priority aside: the baseline FCFS and EASY use.
    pub fn submission_order() -> Weights {
        Weights {
            user_priority: 1.0,
            queue_minutes: 0.0,
            expansion: 0.0,
            narrow_request: 0.0,
            short_request: 0.0,
            fairshare: 0.0,
            qos: BTreeMap::new(),
        }
    }
}

/// The default orders by the expansion factor alone (largest first: "LXF"), with the
/// oldest job holding EASY's reservation (`Policy::reserve_oldest`). It has no ratio to
/// tune: it was chosen over size-, width- and area-aware orders by its worst case on
/// production logs and several workload models at loads up to 1.5 times the logged
/// ones (`scripts/tune-policy`, docs/scheduling.md), where the others, tuned on one
/// model, were worse than EASY on logs they had not seen.
impl Default for Weights {
    fn default() -> Self {
        Weights {
            user_priority: 1.0,
            queue_minutes: 0.0,
            expansion: 1000.0,
            narrow_request: 0.0,
            short_request: 0.0,
            fairshare: 0.0,
            qos: BTreeMap::new(),
        }
    }
}

/// What happens to PREEMPTEE jobs making room for a PREEMPTOR job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preemption {
    /// Requeued when RESTARTABLE, cancelled otherwise.
    Requeue,
    Cancel,
    /// No preemption.
    Off,
}

/// The policy (`[scheduler.policy]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    pub backfill: Backfill,
    pub weights: Weights,
    /// The job first in submission order is considered first, whatever its priority:
    /// under EASY it is the one that gets the reservation, so however the priorities
    /// move, the oldest job is never passed by work that would delay it.
    pub reserve_oldest: bool,
    /// With `reserve_oldest`: the oldest job goes first only once its expansion factor,
    /// (wait + requested time) / requested time, has reached this (1: at once).
    pub oldest_after_expansion: f64,
    /// Conservative backfill: how many waiting jobs (best first) get a reservation in
    /// each pass; each one makes the next search longer.
    pub reservation_depth: usize,
    /// Half-life of recorded usage for fair share, in seconds.
    pub fairshare_half_life: i64,
    pub preemption: Preemption,
    /// Backfill waiting jobs by run times predicted from each user's last two ended
    /// jobs ([`predict`]) instead of their requested times; running jobs are still
    /// planned, and killed, at their requested times.
    pub predict_runtimes: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            backfill: Backfill::Easy,
            weights: Weights::default(),
            reserve_oldest: true,
            oldest_after_expansion: 1.0,
            reservation_depth: 64,
            fairshare_half_life: 7 * 24 * 3600,
            preemption: Preemption::Requeue,
            predict_runtimes: false,
        }
    }
}

impl Policy {
    /// Whether the oldest waiting `job` goes first now (see `oldest_after_expansion`).
    pub fn oldest_is_due(&self, job: &crate::job::Job, now: crate::clock::Seconds) -> bool {
        if self.oldest_after_expansion <= 1.0 {
            return true;
        }
        let Some(requested) = job.spec.duration.filter(|&d| d > 0) else {
            return true;
        };
        let waited = (now - job.status.dates.submit).max(0) as f64;
        (waited + requested as f64) / requested as f64 >= self.oldest_after_expansion
    }

    /// How long the waiting `job` is planned to run: its prediction from `runs` with
    /// `predict_runtimes`, else its requested time (`None`: for ever).
    pub fn planned_length(&self, runs: &Runs, job: &crate::job::Job) -> Option<i64> {
        if self.predict_runtimes {
            runs.predict(&job.status.exec_user, job.spec.duration)
        } else {
            job.spec.duration
        }
    }

    /// Plain first come, first served.
    pub fn fcfs() -> Policy {
        Policy {
            backfill: Backfill::Fcfs,
            weights: Weights::submission_order(),
            predict_runtimes: false,
            ..Policy::default()
        }
    }

    /// EASY backfilling over submission order, with users' requested times: the usual
    /// baseline.
    pub fn easy() -> Policy {
        Policy {
            backfill: Backfill::Easy,
            weights: Weights::submission_order(),
            predict_runtimes: false,
            ..Policy::default()
        }
    }

    /// A one-line description, for reports.
    pub fn describe(&self) -> String {
        let w = &self.weights;
        format!(
            "{} backfill{}{}; priority = {} x user priority + {} x minutes waited + {} x expansion factor{}{}{}{}",
            self.backfill.as_str(),
            match (self.reserve_oldest, self.oldest_after_expansion > 1.0) {
                (true, false) => " (oldest job first)".to_string(),
                (true, true) => format!(
                    " (oldest job first once its expansion factor reaches {})",
                    self.oldest_after_expansion
                ),
                (false, _) => String::new(),
            },
            if self.predict_runtimes {
                ", backfilled by run times predicted from users' last two jobs"
            } else {
                ""
            },
            w.user_priority,
            w.queue_minutes,
            w.expansion,
            if w.narrow_request != 0.0 {
                format!(" - {} x log2(processors)", w.narrow_request)
            } else {
                String::new()
            },
            if w.short_request != 0.0 {
                format!(" - {} x log2(requested seconds)", w.short_request)
            } else {
                String::new()
            },
            if w.fairshare != 0.0 {
                format!(" - {} x percent of recent usage", w.fairshare)
            } else {
                String::new()
            },
            if w.qos.is_empty() {
                String::new()
            } else {
                " + QoS weights".into()
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Job;

    fn waiting(submit: i64, duration: Option<i64>) -> Job {
        super::priority::tests::job(1, submit, duration, "")
    }

    #[test]
    fn the_oldest_job_goes_first_at_once_or_once_it_waited_enough() {
        let job = waiting(1000, Some(600));
        // By default at once.
        assert!(Policy::default().oldest_is_due(&job, 1000));
        // With a threshold of 3: after waiting twice its requested time.
        let patient = Policy {
            oldest_after_expansion: 3.0,
            ..Policy::default()
        };
        assert!(!patient.oldest_is_due(&job, 1000 + 1199));
        assert!(patient.oldest_is_due(&job, 1000 + 1200));
        // A job without a requested time has no expansion factor: at once.
        assert!(patient.oldest_is_due(&waiting(1000, None), 1000));
    }

    #[test]
    fn the_default_is_the_expansion_factor_with_the_oldest_job_reserved() {
        let policy = Policy::default();
        assert_eq!(policy.backfill, Backfill::Easy);
        assert!(policy.reserve_oldest);
        assert_eq!(policy.oldest_after_expansion, 1.0);
        let w = &policy.weights;
        assert!(w.expansion > 0.0);
        assert_eq!(
            (
                w.queue_minutes,
                w.narrow_request,
                w.short_request,
                w.fairshare
            ),
            (0.0, 0.0, 0.0, 0.0)
        );
        assert!(!w.is_static());
    }
}
