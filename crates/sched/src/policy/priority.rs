//! The order of the queue. An administrator's system priority comes first; then the
//! weighted sum of the factors of [`Weights`](super::Weights); ties keep submission order.

use std::cmp::Ordering;
use std::collections::HashMap;

use super::Weights;
use crate::clock::Seconds;
use crate::job::Job;

/// Recent usage per user, in processor-seconds that halve every `half_life` seconds:
/// the fair-share factor.
#[derive(Debug, Clone)]
pub struct Usage {
    half_life: f64,
    by_user: HashMap<String, Decayed>,
    total: Decayed,
}

#[derive(Debug, Clone, Copy, Default)]
struct Decayed {
    value: f64,
    at: Seconds,
}

impl Decayed {
    fn at(self, now: Seconds, half_life: f64) -> f64 {
        let elapsed = (now - self.at).max(0) as f64;
        self.value * (-elapsed / half_life).exp2()
    }

    fn add(&mut self, amount: f64, now: Seconds, half_life: f64) {
        self.value = self.at(now, half_life) + amount;
        self.at = now;
    }
}

impl Usage {
    pub fn new(half_life_seconds: i64) -> Usage {
        Usage {
            half_life: half_life_seconds.max(1) as f64,
            by_user: HashMap::new(),
            total: Decayed::default(),
        }
    }

    /// A job of `user` used `processor_seconds`.
    pub fn record(&mut self, user: &str, processor_seconds: f64, now: Seconds) {
        if processor_seconds <= 0.0 {
            return;
        }
        let half_life = self.half_life;
        self.by_user
            .entry(user.to_string())
            .or_default()
            .add(processor_seconds, now, half_life);
        self.total.add(processor_seconds, now, half_life);
    }

    /// The user's part of all recent usage, 0 to 1.
    pub fn share(&self, user: &str, now: Seconds) -> f64 {
        let total = self.total.at(now, self.half_life);
        match self.by_user.get(user) {
            Some(mine) if total > 0.0 => (mine.at(now, self.half_life) / total).min(1.0),
            _ => 0.0,
        }
    }
}

/// Computes priorities at one instant.
pub struct Priority<'a> {
    pub weights: &'a Weights,
    pub usage: &'a Usage,
    pub now: Seconds,
}

/// Where a job stands in the queue: compare with [`QueueRank::queue_cmp`], first is best.
#[derive(Debug, Clone, Copy)]
pub struct QueueRank {
    pub system: i64,
    pub score: f64,
    pub seq: u64,
    /// An array sub-job's index (they share their master's `seq`); -1 otherwise.
    pub index: i64,
}

impl QueueRank {
    pub fn queue_cmp(&self, other: &QueueRank) -> Ordering {
        other
            .system
            .cmp(&self.system)
            .then(other.score.total_cmp(&self.score))
            .then(self.seq.cmp(&other.seq))
            .then(self.index.cmp(&other.index))
    }
}

impl Priority<'_> {
    /// The weighted sum of the job's factors.
    pub fn score(&self, job: &Job) -> f64 {
        let w = self.weights;
        let waited = (self.now - job.status.dates.submit).max(0) as f64;
        let mut score = w.user_priority * job.spec.user_priority as f64;
        if w.queue_minutes != 0.0 {
            score += w.queue_minutes * waited / 60.0;
        }
        if w.expansion != 0.0 {
            // Without a requested time the factor stays 1: nothing says the job is short.
            let expansion = match job.spec.duration {
                Some(requested) if requested > 0 => (waited + requested as f64) / requested as f64,
                _ => 1.0,
            };
            score += w.expansion * expansion;
        }
        if w.narrow_request != 0.0 {
            let request = &job.spec.request;
            let processors = f64::from(request.task_count.max(1))
                * f64::from(request.processors_per_task.max(1));
            score -= w.narrow_request * processors.log2();
        }
        if w.short_request != 0.0 {
            // Without a requested time the job may run for ever: the longest there is.
            let requested = job
                .spec
                .duration
                .filter(|&d| d > 0)
                .map_or(64.0, |d| (d as f64).log2());
            score -= w.short_request * requested;
        }
        if w.fairshare != 0.0 {
            score -= w.fairshare * 100.0 * self.usage.share(&job.status.exec_user, self.now);
        }
        if let Some(qos) = &job.spec.qos_requested
            && let Some(weight) = w.qos.get(qos)
        {
            score += weight;
        }
        score
    }

    pub fn rank(&self, job: &Job) -> QueueRank {
        QueueRank {
            system: job.status.system_priority,
            score: self.score(job),
            seq: job.seq,
            index: job.array_member().map_or(-1, |(_, index)| index),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::job::{JobSpec, JobStatus};

    fn at<'a>(weights: &'a Weights, usage: &'a Usage, now: Seconds) -> Priority<'a> {
        Priority {
            weights,
            usage,
            now,
        }
    }

    pub(crate) fn job(seq: u64, submit: Seconds, duration: Option<i64>, user: &str) -> Job {
        let mut status = JobStatus {
            exec_user: user.into(),
            ..Default::default()
        };
        status.dates.submit = submit;
        Job {
            id: format!("D.{seq}"),
            seq,
            spec: JobSpec {
                duration,
                ..Default::default()
            }
            .into(),
            status,
            array: None,
        }
    }

    /// A job of user `a` asking for `tasks` one-processor tasks for `duration` seconds.
    fn sized(seq: u64, submit: Seconds, duration: i64, tasks: u32) -> Job {
        let mut job = job(seq, submit, Some(duration), "a");
        std::sync::Arc::make_mut(&mut job.spec).request.task_count = tasks;
        job
    }

    #[test]
    fn short_jobs_rise_faster_and_waiting_always_counts() {
        let weights = Weights::default();
        let usage = Usage::new(3600);
        let p = at(&weights, &usage, 1000);
        let short = job(2, 900, Some(100), "a"); // waited its own length: factor 2
        let long = job(1, 900, Some(10_000), "a"); // factor 1.01
        assert!(p.rank(&short).queue_cmp(&p.rank(&long)).is_lt());
        // Equal factors: submission order.
        let twin = job(3, 900, Some(100), "a");
        assert!(p.rank(&short).queue_cmp(&p.rank(&twin)).is_lt());
        // The long job, once it has waited long enough, passes a fresh short job.
        let later = at(&weights, &usage, 900 + 200_000);
        let fresh = job(4, 900 + 200_000, Some(100), "a");
        assert!(later.rank(&long).queue_cmp(&later.rank(&fresh)).is_lt());
    }

    #[test]
    fn narrow_jobs_go_first_and_waiting_still_counts() {
        let weights = Weights {
            narrow_request: 3000.0,
            ..Weights::default()
        };
        let usage = Usage::new(3600);
        let p = at(&weights, &usage, 1000);
        // Fresh jobs: one processor before four (two doublings), whatever their lengths.
        let serial = sized(2, 1000, 10_000, 1);
        let wide = sized(1, 1000, 100, 4);
        assert!(p.rank(&serial).queue_cmp(&p.rank(&wide)).is_lt());
        assert!((p.score(&wide) - (1000.0 - 2.0 * 3000.0)).abs() < 1e-9);
        // The wide job, once it has waited 6 times its length (expansion factor 7),
        // passes the fresh serial one.
        let later = at(&weights, &usage, 1000 + 601);
        let fresh = sized(3, 1000 + 601, 10_000, 1);
        assert!(later.rank(&wide).queue_cmp(&later.rank(&fresh)).is_lt());
        // Scaling every time by 60 keeps the order: no factor counts absolute time.
        let slow = at(&weights, &usage, 1000 + 601 * 60);
        let (wide60, fresh60) = (
            sized(1, 1000, 6000, 4),
            sized(3, 1000 + 601 * 60, 600_000, 1),
        );
        assert!(slow.rank(&wide60).queue_cmp(&slow.rank(&fresh60)).is_lt());
    }

    #[test]
    fn by_default_only_the_expansion_factor_counts() {
        let weights = Weights::default();
        let usage = Usage::new(3600);
        let p = at(&weights, &usage, 1000);
        // Same wait relative to length: width makes no difference, submission decides.
        let wide = sized(1, 900, 100, 64);
        let narrow = sized(2, 900, 100, 1);
        assert!(p.rank(&wide).queue_cmp(&p.rank(&narrow)).is_lt());
        // A wide job that waited its length (factor 2) goes before a fresh narrow one.
        let fresh = sized(3, 1000, 100, 1);
        assert!(p.rank(&wide).queue_cmp(&p.rank(&fresh)).is_lt());
        assert!((p.score(&wide) - 2000.0).abs() < 1e-9);
    }

    #[test]
    fn short_requests_go_first_with_their_weight() {
        let weights = Weights {
            short_request: 500.0,
            expansion: 0.0,
            ..Weights::default()
        };
        let usage = Usage::new(3600);
        let p = at(&weights, &usage, 1000);
        let short = job(2, 1000, Some(60), "a");
        let long = job(1, 0, Some(3840), "a");
        let unknown = job(3, 0, None, "a");
        assert!(p.rank(&short).queue_cmp(&p.rank(&long)).is_lt());
        assert!(p.rank(&long).queue_cmp(&p.rank(&unknown)).is_lt());
        // 3840 s is 6 doublings of 60 s.
        assert!((p.score(&short) - p.score(&long) - 3000.0).abs() < 1e-9);
    }

    #[test]
    fn system_priority_comes_first() {
        let weights = Weights::default();
        let usage = Usage::new(3600);
        let p = at(&weights, &usage, 1_000_000);
        let old = job(1, 0, Some(10), "a");
        let mut pushed = job(2, 999_999, None, "a");
        pushed.status.system_priority = 1;
        assert!(p.rank(&pushed).queue_cmp(&p.rank(&old)).is_lt());
    }

    #[test]
    fn fairshare_favours_light_users_and_forgets() {
        let weights = Weights {
            fairshare: 10.0,
            ..Weights::submission_order()
        };
        let mut usage = Usage::new(3600);
        usage.record("heavy", 9000.0, 0);
        usage.record("light", 1000.0, 0);
        assert!((usage.share("heavy", 0) - 0.9).abs() < 1e-9);
        assert_eq!(usage.share("nobody", 0), 0.0);
        let p = at(&weights, &usage, 0);
        let heavy = job(1, 0, None, "heavy");
        let light = job(2, 0, None, "light");
        assert!(p.rank(&light).queue_cmp(&p.rank(&heavy)).is_lt());
        assert!((p.score(&heavy) + 900.0).abs() < 1e-6);
        // An hour (one half-life) later the old usage counts half: 4500 and 500; new
        // usage of the light user counts in full.
        usage.record("light", 4500.0, 3600);
        assert!((usage.share("light", 3600) - 5000.0 / 9500.0).abs() < 1e-9);
    }
}
