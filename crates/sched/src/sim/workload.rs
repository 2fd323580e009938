//! Synthetic workloads from Lublin and Feitelson's model of rigid parallel jobs ("The
//! workload on parallel supercomputers: modeling the characteristics of rigid jobs",
//! JPDC 63(11), 2003), with the parameters the authors fitted to the whole sample (no
//! batch/interactive split):
//!
//! - **size**: serial with probability 0.244; otherwise log2 of the size is drawn from a
//!   two-stage uniform (on [0.8, Umed] with probability 0.86, else on [Umed, Uhi], where
//!   Uhi = log2 of the machine and Umed = Uhi − 2.5), rounded to a whole power of two
//!   for a further 0.576 of all jobs;
//! - **run time**: e^x for x hyper-gamma, gamma(4.2, 0.94) with probability
//!   p = −0.0054 × size + 0.78 (clamped to [0, 1]), else gamma(312, 0.03): wider jobs run
//!   longer; x above 12 (45 hours) is drawn again;
//! - **arrivals**: log inter-arrival times gamma(10.2303 × 1.0225, 0.4871) (the rush
//!   hours'), spread over the day by a daily cycle: half-hour buckets weighted by a
//!   gamma(8.1737, 3.9631) density over the bucket number (from bucket 11, wrapping),
//!   so that arrivals come faster in the day's busy hours; x above 13 is drawn again.
//!
//! The offered load (work over machine time between the first and last arrival) is set
//! by scaling the inter-arrival times, which keeps the daily cycle. User estimates come
//! from [`super::estimates`]. Everything is deterministic for a seed.

use super::estimates::EstimateModel;
use super::random::Rng;
use super::swf::{Trace, TraceJob};

/// What to generate.
#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    pub jobs: usize,
    pub processors: u32,
    /// Offered load: Σ run × size / (processors × span of arrivals). `None`: the model's
    /// own arrival rate.
    pub load: Option<f64>,
    pub seed: u64,
    /// `None`: requested time = run time (perfect estimates).
    pub estimates: Option<EstimateModel>,
}

/// The model's parameters (the authors' fit to the whole sample).
mod fitted {
    pub const SERIAL_PROBABILITY: f64 = 0.244;
    pub const POWER_OF_TWO_PROBABILITY: f64 = 0.576;
    pub const SIZE_LOG_LOW: f64 = 0.8;
    /// Umed = Uhi − this.
    pub const SIZE_LOG_MEDIUM_BELOW_HIGH: f64 = 2.5;
    pub const SIZE_FIRST_STAGE_PROBABILITY: f64 = 0.86;

    pub const RUN_SHORT: (f64, f64) = (4.2, 0.94);
    pub const RUN_LONG: (f64, f64) = (312.0, 0.03);
    /// p(short) = SLOPE × size + INTERCEPT.
    pub const RUN_SHORT_SLOPE: f64 = -0.0054;
    pub const RUN_SHORT_INTERCEPT: f64 = 0.78;
    /// ln of the longest run time (e^12 s, about 45 hours).
    pub const RUN_LOG_MAX: f64 = 12.0;

    /// ARAR (all hours over rush hours) times the rush hours' shape.
    pub const ARRIVAL_LOG_SHAPE: f64 = 10.2303 * 1.0225;
    pub const ARRIVAL_LOG_SCALE: f64 = 0.4871;
    pub const ARRIVAL_LOG_MAX: f64 = 13.0;
    pub const CYCLE_SHAPE: f64 = 8.1737;
    pub const CYCLE_SCALE: f64 = 3.9631;
    /// The fitted day starts at this bucket.
    pub const CYCLE_FIRST_BUCKET: usize = 11;
}

const BUCKETS: usize = 48;
const BUCKET_SECONDS: f64 = 86_400.0 / BUCKETS as f64;

/// Independent random streams, one per part of the model.
const SIZES: u64 = 1;
const RUNS: u64 = 2;
const ARRIVALS: u64 = 3;
const ESTIMATES: u64 = 4;

/// A trace drawn from the model; jobs numbered from 1 in submission order.
pub fn generate(spec: &WorkloadSpec) -> Trace {
    let processors = spec.processors.max(1);
    let mut sizes = Rng::stream(spec.seed, SIZES);
    let mut runs = Rng::stream(spec.seed, RUNS);
    let jobs: Vec<(u32, i64)> = (0..spec.jobs)
        .map(|_| {
            let size = job_size(&mut sizes, processors);
            (size, run_time(&mut runs, size))
        })
        .collect();

    let cycle = DailyCycle::fitted();
    let mut scale = 1.0;
    if let Some(load) = spec.load.filter(|l| *l > 0.0) {
        // The span is nearly proportional to the scale (the same draws, stretched), so a
        // few corrections reach the asked load.
        let work: f64 = jobs.iter().map(|&(n, r)| f64::from(n) * r as f64).sum();
        let wanted_span = work / (f64::from(processors) * load);
        for _ in 0..8 {
            let arrivals = cycle.arrivals(spec.seed, spec.jobs, scale);
            let span = (arrivals.last().copied().unwrap_or(0) - arrivals[0]).max(1) as f64;
            scale *= wanted_span / span;
        }
    }
    let arrivals = cycle.arrivals(spec.seed, spec.jobs, scale);

    let mut estimates = Rng::stream(spec.seed, ESTIMATES);
    let jobs = jobs
        .into_iter()
        .zip(arrivals)
        .enumerate()
        .map(|(index, ((size, run), submit))| TraceJob {
            number: index as u64 + 1,
            submit,
            run,
            processors: size,
            requested: match &spec.estimates {
                Some(model) => model.estimate(&mut estimates, run),
                None => run,
            },
            estimated: spec.estimates.is_some(),
            user: None,
        })
        .collect();
    Trace {
        jobs,
        machine_processors: Some(processors),
        skipped: 0,
        estimated: if spec.estimates.is_some() {
            spec.jobs
        } else {
            0
        },
    }
}

/// Serial, or 2^x for x two-stage uniform (a whole x for power-of-two jobs).
fn job_size(rng: &mut Rng, processors: u32) -> u32 {
    use fitted::*;
    let kind = rng.uniform();
    if kind <= SERIAL_PROBABILITY || processors == 1 {
        return 1;
    }
    let high = f64::from(processors).log2();
    let medium = (high - SIZE_LOG_MEDIUM_BELOW_HIGH).max(SIZE_LOG_LOW);
    let mut log_size = if rng.uniform() <= SIZE_FIRST_STAGE_PROBABILITY {
        rng.between(SIZE_LOG_LOW, medium)
    } else {
        rng.between(medium, high)
    };
    if kind <= SERIAL_PROBABILITY + POWER_OF_TWO_PROBABILITY {
        log_size = log_size.round();
    }
    (log_size.exp2().round() as u32).clamp(1, processors)
}

/// Seconds, at least 1: e^x, x hyper-gamma whose mix depends on the size.
fn run_time(rng: &mut Rng, size: u32) -> i64 {
    use fitted::*;
    let short = (RUN_SHORT_SLOPE * f64::from(size) + RUN_SHORT_INTERCEPT).clamp(0.0, 1.0);
    loop {
        let (shape, scale) = if rng.uniform() <= short {
            RUN_SHORT
        } else {
            RUN_LONG
        };
        let x = rng.gamma(shape, scale);
        if x <= RUN_LOG_MAX {
            return (x.exp() as i64).max(1);
        }
    }
}

/// How arrivals spread over the day: each half-hour bucket's share of the day's
/// arrivals, relative to the mean (1 = an average bucket).
struct DailyCycle {
    weights: [f64; BUCKETS],
}

impl DailyCycle {
    fn fitted() -> DailyCycle {
        use fitted::*;
        // A bucket's share is the gamma density's mass over [i − ½, i + ½]; the density's
        // constant cancels in the normalization, so it is integrated unnormalized.
        let density = |x: f64| ((CYCLE_SHAPE - 1.0) * x.ln() - x / CYCLE_SCALE).exp();
        let mass = |low: f64, high: f64| {
            let steps = 32;
            let h = (high - low) / steps as f64;
            let inner: f64 = (1..steps)
                .map(|k| density(low + k as f64 * h) * if k % 2 == 1 { 4.0 } else { 2.0 })
                .sum();
            (density(low) + inner + density(high)) * h / 3.0
        };
        let mut weights = [0.0; BUCKETS];
        for i in CYCLE_FIRST_BUCKET..CYCLE_FIRST_BUCKET + BUCKETS {
            weights[(i - 1) % BUCKETS] = mass(i as f64 - 0.5, i as f64 + 0.5);
        }
        let mean = weights.iter().sum::<f64>() / BUCKETS as f64;
        weights.iter_mut().for_each(|w| *w /= mean);
        DailyCycle { weights }
    }

    /// Arrival times in seconds from midnight of day 0: each gap is a rush-hour gap
    /// (e^x seconds, times `scale`) spent at the rate of the buckets it crosses (a
    /// bucket of weight w passes w times faster in arrivals, so 1/w slower in gaps).
    fn arrivals(&self, seed: u64, count: usize, scale: f64) -> Vec<i64> {
        use fitted::*;
        let mut rng = Rng::stream(seed, ARRIVALS);
        let mut time = 0.0f64;
        let mut arrivals = Vec::with_capacity(count);
        for _ in 0..count {
            let x = loop {
                let x = rng.gamma(ARRIVAL_LOG_SHAPE, ARRIVAL_LOG_SCALE);
                if x <= ARRIVAL_LOG_MAX {
                    break x;
                }
            };
            // Rush-hour seconds to spend; a second of bucket b costs w[b] of them.
            let mut budget = x.exp() * scale;
            loop {
                let bucket = ((time / BUCKET_SECONDS) as usize) % BUCKETS;
                let weight = self.weights[bucket].max(1e-9);
                let left_in_bucket = BUCKET_SECONDS - time.rem_euclid(BUCKET_SECONDS);
                let cost = left_in_bucket * weight;
                if budget <= cost {
                    time += budget / weight;
                    break;
                }
                budget -= cost;
                time += left_in_bucket;
            }
            arrivals.push(time as i64);
        }
        arrivals
    }
}

/// The offered load of a trace: Σ run × processors over the machine's processor-seconds
/// between the first and the last submission.
pub fn offered_load(trace: &Trace, processors: u32) -> f64 {
    let (Some(first), Some(last)) = (trace.jobs.first(), trace.jobs.last()) else {
        return 0.0;
    };
    let work: f64 = trace
        .jobs
        .iter()
        .map(|j| j.run as f64 * f64::from(j.processors))
        .sum();
    work / (f64::from(processors) * (last.submit - first.submit).max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seed: u64, load: Option<f64>) -> WorkloadSpec {
        WorkloadSpec {
            jobs: 20_000,
            processors: 256,
            load,
            seed,
            estimates: None,
        }
    }

    #[test]
    fn a_seed_makes_one_trace() {
        let a = generate(&spec(5, Some(0.8)));
        assert_eq!(a.jobs, generate(&spec(5, Some(0.8))).jobs);
        assert_ne!(a.jobs, generate(&spec(6, Some(0.8))).jobs);
        assert!(a.jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
        assert_eq!(a.machine_processors, Some(256));
    }

    #[test]
    fn sizes_follow_the_model() {
        let trace = generate(&spec(11, None));
        let n = trace.jobs.len() as f64;
        let serial = trace.jobs.iter().filter(|j| j.processors == 1).count() as f64 / n;
        // Power-of-two parallel jobs: the 0.576 rounded ones plus the unrounded ones that
        // happen to land on a power of two.
        let power_of_two = trace
            .jobs
            .iter()
            .filter(|j| j.processors > 1 && j.processors.is_power_of_two())
            .count() as f64
            / n;
        assert!(
            (serial - fitted::SERIAL_PROBABILITY).abs() < 0.015,
            "{serial}"
        );
        assert!(
            (fitted::POWER_OF_TWO_PROBABILITY - 0.015..0.65).contains(&power_of_two),
            "{power_of_two}"
        );
        assert!(trace.jobs.iter().all(|j| (1..=256).contains(&j.processors)));
        // Most parallel jobs are in the first stage, below 2^Umed ≈ 45.
        let small = trace
            .jobs
            .iter()
            .filter(|j| j.processors > 1 && j.processors <= 46)
            .count() as f64
            / (n * (1.0 - serial));
        assert!(
            (small - fitted::SIZE_FIRST_STAGE_PROBABILITY).abs() < 0.03,
            "{small}"
        );
    }

    #[test]
    fn run_times_are_bounded_and_grow_with_size() {
        let trace = generate(&spec(12, None));
        let max = fitted::RUN_LOG_MAX.exp() as i64;
        assert!(trace.jobs.iter().all(|j| (1..=max).contains(&j.run)));
        let mean_log_run = |keep: &dyn Fn(u32) -> bool| {
            let runs: Vec<f64> = trace
                .jobs
                .iter()
                .filter(|j| keep(j.processors))
                .map(|j| (j.run as f64).ln())
                .collect();
            runs.iter().sum::<f64>() / runs.len() as f64
        };
        assert!(mean_log_run(&|n| n >= 64) > mean_log_run(&|n| n == 1) + 1.0);
    }

    #[test]
    fn the_load_asked_for_is_the_load_offered() {
        for load in [0.6, 0.9, 1.1] {
            let trace = generate(&spec(13, Some(load)));
            let offered = offered_load(&trace, 256);
            assert!((offered / load - 1.0).abs() < 0.01, "{load}: {offered}");
            // The mean gap is what that load needs.
            let work: f64 = trace
                .jobs
                .iter()
                .map(|j| j.run as f64 * f64::from(j.processors))
                .sum();
            let gaps = (trace.jobs.last().unwrap().submit - trace.jobs[0].submit) as f64
                / (trace.jobs.len() - 1) as f64;
            let wanted = work / (256.0 * load) / (trace.jobs.len() - 1) as f64;
            assert!((gaps / wanted - 1.0).abs() < 0.01, "{gaps} {wanted}");
        }
    }

    #[test]
    fn arrivals_follow_the_daily_cycle() {
        let cycle = DailyCycle::fitted();
        assert!((cycle.weights.iter().sum::<f64>() / BUCKETS as f64 - 1.0).abs() < 1e-9);
        let arrivals = cycle.arrivals(3, 50_000, 1.0);
        let mut per_bucket = [0usize; BUCKETS];
        for t in &arrivals {
            per_bucket[((t / BUCKET_SECONDS as i64) % BUCKETS as i64) as usize] += 1;
        }
        let busiest = (0..BUCKETS).max_by_key(|&b| per_bucket[b]).unwrap();
        let quietest = (0..BUCKETS).min_by_key(|&b| per_bucket[b]).unwrap();
        // The buckets the model weighs most get the most arrivals.
        assert!(cycle.weights[busiest] > 1.0 && cycle.weights[quietest] < 1.0);
        assert!(per_bucket[busiest] > 3 * per_bucket[quietest]);
    }
}
