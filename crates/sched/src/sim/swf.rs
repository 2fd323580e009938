//! Standard Workload Format traces (the Parallel Workloads Archive): one job per line,
//! 18 whitespace-separated fields, `;` header comments, `-1` for unknown.

use super::estimates::EstimateModel;
use super::random::Rng;

/// One job of a trace, as the replay uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// Field 1.
    pub number: u64,
    /// Field 2, seconds.
    pub submit: i64,
    /// Field 4, seconds.
    pub run: i64,
    /// Field 5 (allocated), else field 8 (requested).
    pub processors: u32,
    /// Field 9, else the run time (a perfect estimate).
    pub requested: i64,
    /// Whether `requested` is a user's request (field 9, or drawn from a model of
    /// users' requests), not the run time.
    pub estimated: bool,
    /// Field 12, the user's number, if known: whose history predicts the job's run time.
    pub user: Option<u32>,
}

#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// In submission order.
    pub jobs: Vec<TraceJob>,
    /// The header's `MaxProcs`, else `MaxNodes`.
    pub machine_processors: Option<u32>,
    /// Lines describing no runnable job (unknown run time or processors).
    pub skipped: usize,
    /// Jobs whose requested time was given (field 9); the others request their run time.
    pub estimated: usize,
}

impl Trace {
    /// Every job requests exactly its run time: the replay of a scheduler that knows
    /// the future, a bound rather than what users give.
    pub fn with_perfect_estimates(mut self) -> Trace {
        for job in &mut self.jobs {
            job.requested = job.run;
            job.estimated = false;
        }
        self.estimated = 0;
        self
    }

    /// The same jobs at `factor` times the logged offered load: each submission's
    /// distance from the first one is divided by `factor` (1 leaves the trace as it is).
    pub fn at_load(mut self, factor: f64) -> Trace {
        let Some(first) = self.jobs.first().map(|j| j.submit) else {
            return self;
        };
        if factor > 0.0 && factor.is_finite() && factor != 1.0 {
            for job in &mut self.jobs {
                job.submit = first + ((job.submit - first) as f64 / factor).round() as i64;
            }
        }
        self
    }

    /// Users' requested times drawn from `model` for the jobs whose trace gives none
    /// (seeded by `seed`: the same trace and seed give the same requests).
    pub fn with_modelled_estimates(mut self, model: &EstimateModel, seed: u64) -> Trace {
        let mut rng = Rng::seeded(seed);
        for job in &mut self.jobs {
            if !job.estimated {
                job.requested = model.estimate(&mut rng, job.run);
                job.estimated = true;
            }
        }
        self.estimated = self.jobs.len();
        self
    }
}

/// Parses a trace; a line that is not 18 numbers is an error naming it.
pub fn parse(text: &str) -> Result<Trace, String> {
    let mut trace = Trace::default();
    let (mut max_procs, mut max_nodes) = (None, None);
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(comment) = line.strip_prefix(';') {
            if let Some((key, value)) = comment.split_once(':') {
                let value = value.trim().parse::<u32>().ok().filter(|&v| v > 0);
                match key.trim() {
                    "MaxProcs" => max_procs = value,
                    "MaxNodes" => max_nodes = value,
                    _ => {}
                }
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let fields: Vec<f64> = line
            .split_whitespace()
            .map(|f| f.parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("line {}: a field is not a number", number + 1))?;
        if fields.len() < 18 {
            return Err(format!(
                "line {}: {} fields, a job line has 18",
                number + 1,
                fields.len()
            ));
        }
        let field = |n: usize| fields[n - 1];
        let processors = if field(5) > 0.0 { field(5) } else { field(8) };
        let run = field(4);
        if run < 0.0 || processors <= 0.0 || field(2) < 0.0 {
            trace.skipped += 1;
            continue;
        }
        // Users' estimates where the trace has them: they are what a scheduler sees.
        let estimated = field(9) > 0.0;
        let requested = if estimated {
            trace.estimated += 1;
            field(9)
        } else {
            run
        };
        trace.jobs.push(TraceJob {
            number: field(1) as u64,
            submit: field(2) as i64,
            run: run as i64,
            processors: processors.min(f64::from(u32::MAX)) as u32,
            requested: requested as i64,
            estimated,
            user: (field(12) >= 0.0).then(|| field(12).min(f64::from(u32::MAX)) as u32),
        });
    }
    trace.jobs.sort_by_key(|j| (j.submit, j.number));
    trace.machine_processors = max_procs.or(max_nodes);
    Ok(trace)
}

/// The trace in the Standard Workload Format (what [`parse`] reads back): fields 1, 2, 4,
/// 5, 8 and 9 filled, status 1 (completed), the rest unknown.
pub fn write(
    trace: &Trace,
    header: &[String],
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    writeln!(out, "; Version: 2.2")?;
    for line in header {
        writeln!(out, "; {line}")?;
    }
    writeln!(out, "; MaxJobs: {}", trace.jobs.len())?;
    writeln!(out, "; MaxRecords: {}", trace.jobs.len())?;
    if let Some(processors) = trace.machine_processors {
        writeln!(out, "; MaxNodes: {processors}")?;
        writeln!(out, "; MaxProcs: {processors}")?;
    }
    for j in &trace.jobs {
        let user = j.user.map_or(-1, i64::from);
        writeln!(
            out,
            "{} {} -1 {} {} -1 -1 {} {} -1 1 {user} -1 -1 -1 -1 -1 -1",
            j.number, j.submit, j.run, j.processors, j.processors, j.requested
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_jobs_header_and_unknowns() {
        let text = "; MaxNodes: 256\n; MaxProcs: 128\n\
            1 10 -1 100 4 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n\
            2 5 -1 50 -1 -1 -1 8 70 -1 1 -1 -1 -1 0 -1 -1 -1\n\
            3 20 -1 -1 4 -1 -1 -1 -1 -1 0 -1 -1 -1 0 -1 -1 -1\n";
        let trace = parse(text).unwrap();
        assert_eq!(trace.machine_processors, Some(128));
        assert_eq!(trace.skipped, 1);
        assert_eq!(trace.estimated, 1);
        assert_eq!(
            trace.jobs,
            [
                TraceJob {
                    number: 2,
                    submit: 5,
                    run: 50,
                    processors: 8,
                    requested: 70,
                    estimated: true,
                    user: None
                },
                TraceJob {
                    number: 1,
                    submit: 10,
                    run: 100,
                    processors: 4,
                    requested: 100,
                    estimated: false,
                    user: None
                }
            ]
        );
        // The perfect-estimates replay: every request is the run time.
        let perfect = trace.clone().with_perfect_estimates();
        assert_eq!(perfect.estimated, 0);
        assert!(perfect.jobs.iter().all(|j| j.requested == j.run));
        assert_eq!(perfect.jobs[0].requested, 50);
        assert!(parse("1 2 3").unwrap_err().contains("line 1"));
        assert!(parse("1 2 x 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18").is_err());
    }

    #[test]
    fn reads_the_quirks_of_production_logs() {
        // Lines as the Parallel Workloads Archive's logs have them: a cancelled job with
        // no processors (LLNL-Atlas), a run time of -1 (HPC2N), a blank line, aligned
        // columns, a header line without a value.
        let text = "; Version: 2.2\n; Computer: test\n;\n; MaxProcs: 240\n\n\
            \x20 1435  3273240  -1   0  -1 -1 -1  -1     -1 -1 5 14 -1 184 -1 1 -1 -1\n\
            \x20   16   347726   5  -1   8 240379 -1 8 345600 -1 -1 5 1 -1 -1 1 -1 -1\n\
            \x20   17   347800   5 600   8 -1 -1 8 3600 -1 1 5 1 -1 -1 1 -1 -1\n\
            \x20   18   347900   5 900   8 -1 -1 8 600 -1 0 5 1 -1 -1 1 -1 -1\n";
        let trace = parse(text).unwrap();
        assert_eq!(trace.machine_processors, Some(240));
        assert_eq!(trace.skipped, 2);
        assert_eq!(trace.jobs.len(), 2);
        assert!(trace.jobs.iter().all(|j| j.estimated));
        // Killed at its limit: the request (600) is shorter than the logged run (900);
        // the replay ends it at the request.
        assert_eq!((trace.jobs[1].run, trace.jobs[1].requested), (900, 600));
    }

    #[test]
    fn a_trace_at_a_higher_load_keeps_its_jobs_and_shrinks_its_gaps() {
        let job = |number, submit| TraceJob {
            number,
            submit,
            run: 100,
            processors: 1,
            requested: 100,
            estimated: false,
            user: None,
        };
        let trace = Trace {
            jobs: vec![job(1, 1000), job(2, 1300), job(3, 1600)],
            ..Trace::default()
        };
        let faster = trace.clone().at_load(1.5);
        let submits: Vec<i64> = faster.jobs.iter().map(|j| j.submit).collect();
        assert_eq!(submits, [1000, 1200, 1400]);
        assert_eq!(trace.clone().at_load(1.0).jobs, trace.jobs);
        // Users' requests drawn where the trace gives none: never shorter than the run,
        // the same for the same seed.
        let model = EstimateModel::default();
        let drawn = trace.clone().with_modelled_estimates(&model, 3);
        assert!(
            drawn
                .jobs
                .iter()
                .all(|j| j.estimated && j.requested >= j.run)
        );
        assert_eq!(drawn.jobs, trace.with_modelled_estimates(&model, 3).jobs);
    }

    #[test]
    fn written_traces_read_back() {
        let trace = Trace {
            jobs: vec![TraceJob {
                number: 1,
                submit: 3,
                run: 40,
                processors: 2,
                requested: 600,
                estimated: true,
                user: Some(7),
            }],
            machine_processors: Some(8),
            skipped: 0,
            estimated: 1,
        };
        let mut text = Vec::new();
        write(&trace, &["Note: test".into()], &mut text).unwrap();
        let back = parse(std::str::from_utf8(&text).unwrap()).unwrap();
        assert_eq!(back.jobs, trace.jobs);
        assert_eq!((back.machine_processors, back.estimated), (Some(8), 1));
    }
}
