//! Two more workload models besides Lublin and Feitelson's ([`super::workload`]), so that
//! a policy is not checked only against the one model it was first tuned on. Each keeps
//! the shape its paper describes; the constants are stated here, and where we could not
//! check the paper's own value against its code we say so in docs/scheduling.md.
//!
//! - **Feitelson 1996** ("Packing schemes for gang scheduling", JSSPP 1996): sizes from a
//!   harmonic distribution (probability of n processors ∝ n^-1.5) with powers of two
//!   favoured; run times hyperexponential, the long branch the more likely the wider the
//!   job (size and run time correlate); a job is often run again, the number of runs
//!   Zipf-like (∝ k^-2.5), each run submitted when the previous one ends; Poisson
//!   arrivals of new jobs.
//! - **Downey 1997** ("A parallel workload model and its implications for processor
//!   allocation", HPDC 1997): total work (the time on one processor) uniform-log, average
//!   parallelism uniform-log between 1 and the machine; a rigid job asks for its average
//!   parallelism rounded to a power of two and runs work / size: wide jobs run shorter,
//!   unlike the other two models; Poisson arrivals.
//!
//! Arrivals are scaled so that the offered load is the one asked for.

use super::estimates::EstimateModel;
use super::random::Rng;
use super::swf::{Trace, TraceJob};
use super::workload::{self, WorkloadSpec};

/// The workload models `drover generate-trace` draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    Lublin2003,
    Feitelson1996,
    Downey1997,
}

impl Model {
    pub const ALL: [Model; 3] = [Model::Lublin2003, Model::Feitelson1996, Model::Downey1997];

    pub fn name(self) -> &'static str {
        match self {
            Model::Lublin2003 => "lublin2003",
            Model::Feitelson1996 => "feitelson1996",
            Model::Downey1997 => "downey1997",
        }
    }

    pub fn parse(name: &str) -> Option<Model> {
        Model::ALL.into_iter().find(|m| m.name() == name)
    }

    /// A trace of the model (the spec's load, or 0.8 for the two Poisson models).
    pub fn generate(self, spec: &WorkloadSpec) -> Trace {
        let processors = spec.processors.max(1);
        let jobs = match self {
            Model::Lublin2003 => return workload::generate(spec),
            Model::Feitelson1996 => feitelson_jobs(spec.seed, spec.jobs, processors),
            Model::Downey1997 => downey_jobs(spec.seed, spec.jobs, processors),
        };
        poisson_trace(jobs, spec, processors)
    }
}

/// A job before its arrival: size, run time, and whether it is a rerun (submitted when
/// the run before it ends) rather than a new arrival.
struct Drawn {
    size: u32,
    run: i64,
    rerun: bool,
}

const SIZES: u64 = 11;
const RUNS: u64 = 12;
const ARRIVALS: u64 = 13;
const ESTIMATES: u64 = 14;

fn feitelson_jobs(seed: u64, count: usize, processors: u32) -> Vec<Drawn> {
    // Harmonic of order 1.5, powers of two weighted 3 times.
    let weights: Vec<f64> = (1..=processors)
        .map(|n| f64::from(n).powf(-1.5) * if n.is_power_of_two() { 3.0 } else { 1.0 })
        .collect();
    let total: f64 = weights.iter().sum();
    let mut sizes = Rng::stream(seed, SIZES);
    let mut runs = Rng::stream(seed, RUNS);
    let mut jobs = Vec::with_capacity(count);
    while jobs.len() < count {
        let mut pick = sizes.uniform() * total;
        let mut size = processors;
        for (i, w) in weights.iter().enumerate() {
            if pick < *w {
                size = i as u32 + 1;
                break;
            }
            pick -= w;
        }
        // Hyperexponential: means of 2 minutes and 1.5 hours, the long one more likely
        // for wider jobs.
        let long = 0.2 + 0.6 * f64::from(size) / f64::from(processors);
        let mean = if runs.uniform() < long { 5400.0 } else { 120.0 };
        let run = ((-runs.uniform().ln() * mean) as i64).clamp(1, 36 * 3600);
        // Runs of the same job: Zipf-like, P(k) ∝ k^-2.5, at most 30.
        let u = sizes.uniform();
        let mut repeats = 1;
        let norm: f64 = (1..=30).map(|k| f64::from(k).powf(-2.5)).sum();
        let mut acc = 0.0;
        for k in 1..=30 {
            acc += f64::from(k).powf(-2.5) / norm;
            if u < acc {
                repeats = k;
                break;
            }
        }
        for k in 0..repeats {
            jobs.push(Drawn {
                size,
                run,
                rerun: k > 0,
            });
        }
    }
    jobs.truncate(count);
    jobs
}

fn downey_jobs(seed: u64, count: usize, processors: u32) -> Vec<Drawn> {
    let mut sizes = Rng::stream(seed, SIZES);
    let mut runs = Rng::stream(seed, RUNS);
    let high = f64::from(processors).ln();
    (0..count)
        .map(|_| {
            let parallelism = sizes.between(0.0, high).exp();
            let size = (parallelism.log2().round().exp2() as u32).clamp(1, processors);
            // Work uniform-log from 1 minute to 4 weeks of one processor.
            let work = runs.between(60f64.ln(), (28.0 * 86_400f64).ln()).exp();
            let run = ((work / f64::from(size)) as i64).clamp(1, 36 * 3600);
            Drawn {
                size,
                run,
                rerun: false,
            }
        })
        .collect()
}

/// Poisson arrivals at the rate that gives the spec's offered load; reruns arrive when
/// the run before them would end.
fn poisson_trace(jobs: Vec<Drawn>, spec: &WorkloadSpec, processors: u32) -> Trace {
    let load = spec.load.filter(|l| *l > 0.0).unwrap_or(0.8);
    let work: f64 = jobs.iter().map(|j| j.run as f64 * f64::from(j.size)).sum();
    let arrivals = jobs.iter().filter(|j| !j.rerun).count().max(1);
    let mean_gap = work / (f64::from(processors) * load) / arrivals as f64;
    let mut rng = Rng::stream(spec.seed, ARRIVALS);
    let mut estimates = Rng::stream(spec.seed, ESTIMATES);
    let (mut time, mut previous_end) = (0.0f64, 0i64);
    let mut out: Vec<TraceJob> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let submit = if job.rerun {
            previous_end
        } else {
            time += -rng.uniform().ln() * mean_gap;
            time as i64
        };
        previous_end = submit + job.run;
        out.push(TraceJob {
            number: 0,
            submit,
            run: job.run,
            processors: job.size,
            requested: match &spec.estimates {
                Some(model) => EstimateModel::estimate(model, &mut estimates, job.run),
                None => job.run,
            },
            estimated: spec.estimates.is_some(),
            user: None,
        });
    }
    out.sort_by_key(|j| j.submit);
    for (i, job) in out.iter_mut().enumerate() {
        job.number = i as u64 + 1;
    }
    Trace {
        estimated: if spec.estimates.is_some() {
            out.len()
        } else {
            0
        },
        jobs: out,
        machine_processors: Some(processors),
        skipped: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seed: u64) -> WorkloadSpec {
        WorkloadSpec {
            jobs: 20_000,
            processors: 128,
            load: Some(0.7),
            seed,
            estimates: None,
        }
    }

    #[test]
    fn each_model_draws_its_load_and_its_own_shape() {
        for model in Model::ALL {
            let trace = model.generate(&spec(3));
            assert_eq!(trace.jobs.len(), 20_000, "{model:?}");
            assert_eq!(trace.jobs, model.generate(&spec(3)).jobs);
            assert!(trace.jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
            assert!(trace.jobs.iter().all(|j| (1..=128).contains(&j.processors)));
            let load = workload::offered_load(&trace, 128);
            assert!((load - 0.7).abs() < 0.1, "{model:?}: {load}");
            assert_eq!(Model::parse(model.name()), Some(model));
        }
        // Feitelson: small jobs dominate and powers of two are favoured.
        let f = Model::Feitelson1996.generate(&spec(4));
        let count = |n: u32| f.jobs.iter().filter(|j| j.processors == n).count();
        assert!(count(1) > count(2) && count(2) > count(3) && count(4) > count(3));
        // Downey: wide jobs run shorter.
        let d = Model::Downey1997.generate(&spec(5));
        let mean_run = |keep: &dyn Fn(u32) -> bool| {
            let runs: Vec<f64> = d
                .jobs
                .iter()
                .filter(|j| keep(j.processors))
                .map(|j| j.run as f64)
                .collect();
            runs.iter().sum::<f64>() / runs.len() as f64
        };
        assert!(mean_run(&|n| n >= 64) < mean_run(&|n| n == 1));
    }
}
