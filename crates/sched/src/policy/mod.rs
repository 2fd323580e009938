//! Scheduling policy: in which order waiting jobs are considered ([`priority`]) and
//! which of them may start now without delaying the ones ahead ([`planner`]: FCFS, EASY or
//! conservative backfill). Pure code over the engine's state: the engine and the
//! simulator (`drover replay`) run the same functions.

pub mod planner;
pub mod priority;

use std::collections::BTreeMap;

use serde::Deserialize;

pub use planner::{Decision, Planner};
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
    /// Conservative backfill: how many waiting jobs (best first) get a reservation in
    /// each pass; each one makes the next search longer.
    pub reservation_depth: usize,
    /// Half-life of recorded usage for fair share, in seconds.
    pub fairshare_half_life: i64,
    pub preemption: Preemption,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            backfill: Backfill::Easy,
            weights: Weights::default(),
            reserve_oldest: true,
            reservation_depth: 64,
            fairshare_half_life: 7 * 24 * 3600,
            preemption: Preemption::Requeue,
        }
    }
}

impl Policy {
    /// Plain first come, first served.
    pub fn fcfs() -> Policy {
        Policy {
            backfill: Backfill::Fcfs,
            weights: Weights::submission_order(),
            ..Policy::default()
        }
    }

    /// EASY backfilling over submission order: the usual baseline.
    pub fn easy() -> Policy {
        Policy {
            backfill: Backfill::Easy,
            weights: Weights::submission_order(),
            ..Policy::default()
        }
    }

    /// A one-line description, for reports.
    pub fn describe(&self) -> String {
        let w = &self.weights;
        format!(
            "{} backfill{}; priority = {} x user priority + {} x minutes waited + {} x expansion factor{}{}{}{}",
            self.backfill.as_str(),
            if self.reserve_oldest {
                " (oldest job first)"
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
