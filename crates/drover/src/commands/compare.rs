//! `drover replay --compare DIR`: every trace of a folder at each offered load asked for,
//! with users' and with exact requested times, under FCFS, EASY and the configured
//! policy; one Markdown table row per case, with the policy's ratios to EASY and whether
//! it meets the targets where jobs contend (docs/scheduling.md).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use drover_sched::policy::Policy;
use drover_sched::sim::estimates::EstimateModel;
use drover_sched::sim::{self, Outcome, swf};

use super::replay::ReplayOptions;

/// Where jobs contend: EASY's mean bounded slowdown above this.
pub const CONTENDED: f64 = 2.0;
/// The targets where they do: the policy's mean bounded slowdown at most this share of
/// EASY's, its maximum wait at most this multiple of EASY's.
pub const SLOWDOWN_TARGET: f64 = 0.8;
pub const MAX_WAIT_TARGET: f64 = 1.5;
/// The seed of users' requested times drawn for traces that give none.
const ESTIMATE_SEED: u64 = 1;

/// One replayed case: a trace at a load, with one kind of requested times.
struct Case {
    name: String,
    trace: swf::Trace,
    load: f64,
    requests: &'static str,
    processors: u32,
}

/// What the three policies did on a case.
struct Row {
    fcfs: Option<Outcome>,
    easy: Outcome,
    policy: Outcome,
}

impl Row {
    fn slowdown_ratio(&self) -> f64 {
        ratio(
            self.policy.mean_bounded_slowdown,
            self.easy.mean_bounded_slowdown,
        )
    }

    fn max_wait_ratio(&self) -> f64 {
        ratio(self.policy.max_wait as f64, self.easy.max_wait as f64)
    }

    fn contended(&self) -> bool {
        self.easy.mean_bounded_slowdown > CONTENDED
    }

    fn met(&self) -> bool {
        self.slowdown_ratio() <= SLOWDOWN_TARGET && self.max_wait_ratio() <= MAX_WAIT_TARGET
    }
}

/// Runs the comparison over the traces of `dir` and prints the table.
pub fn compare(dir: &Path, options: &ReplayOptions, policy: &Policy) -> Result<(), String> {
    let cases = cases(dir, options)?;
    println!("configured: {}", policy.describe());
    println!(
        "{} case(s) from {}; waits in hours; a case is contended where EASY's mean bounded slowdown is above {CONTENDED}; targets there: bsld / EASY <= {SLOWDOWN_TARGET}, max wait / EASY <= {MAX_WAIT_TARGET}\n",
        cases.len(),
        dir.display()
    );
    let rows = run_all(&cases, options, policy)?;
    print_table(&cases, &rows);
    Ok(())
}

/// The traces of `dir` (sorted by name), each at every load, with users' requested
/// times (field 9; drawn from the model of users' estimates for jobs without one) and
/// with exact ones (the run time).
fn cases(dir: &Path, options: &ReplayOptions) -> Result<Vec<Case>, String> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|x| x == "swf"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(format!("no *.swf trace in {}", dir.display()));
    }
    let loads = if options.loads.is_empty() {
        vec![1.0]
    } else {
        options.loads.clone()
    };
    let mut cases = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let trace = swf::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let processors = options
            .processors
            .or(trace.machine_processors)
            .ok_or_else(|| format!("{}: no MaxProcs: give --processors", path.display()))?;
        let name = path
            .file_stem()
            .map_or(String::new(), |s| s.to_string_lossy().into_owned());
        let requests = match trace.estimated {
            0 => "model",
            n if n == trace.jobs.len() => "users",
            _ => "users+model",
        };
        let users = trace
            .clone()
            .with_modelled_estimates(&EstimateModel::default(), ESTIMATE_SEED);
        let exact = trace.with_perfect_estimates();
        for &load in &loads {
            let mut kinds = vec![(requests, users.clone()), ("exact", exact.clone())];
            if options.perfect_estimates {
                kinds.remove(0);
            }
            for (requests, trace) in kinds {
                cases.push(Case {
                    name: name.clone(),
                    trace: trace.at_load(load),
                    load,
                    requests,
                    processors,
                });
            }
        }
    }
    Ok(cases)
}

/// Replays every case, on as many threads as there are cores.
fn run_all(cases: &[Case], options: &ReplayOptions, policy: &Policy) -> Result<Vec<Row>, String> {
    let next = AtomicUsize::new(0);
    let rows: Mutex<Vec<Option<Result<Row, String>>>> =
        Mutex::new((0..cases.len()).map(|_| None).collect());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(cases.len()) {
            scope.spawn(|| {
                while let Some(case) = cases.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let row = run_case(case, options, policy);
                    eprintln!(
                        "replayed {} at {}x, {} requests",
                        case.name, case.load, case.requests
                    );
                    let index = case_index(cases, case);
                    rows.lock().unwrap()[index] = Some(row);
                }
            });
        }
    });
    rows.into_inner()
        .unwrap()
        .into_iter()
        .map(|row| row.unwrap_or_else(|| Err("a case was not replayed".into())))
        .collect()
}

fn case_index(cases: &[Case], case: &Case) -> usize {
    cases
        .iter()
        .position(|c| std::ptr::eq(c, case))
        .unwrap_or_default()
}

fn run_case(case: &Case, options: &ReplayOptions, policy: &Policy) -> Result<Row, String> {
    let machine = sim::machine(case.processors, options.nodes);
    let widest = case
        .trace
        .jobs
        .iter()
        .map(|j| j.processors)
        .max()
        .unwrap_or(0);
    if widest > case.processors {
        return Err(format!(
            "{}: a job asks for {widest} processors; the machine has {}",
            case.name, case.processors
        ));
    }
    let replay = |policy: &Policy| sim::replay(&case.trace, &machine, policy, &mut |_| {});
    Ok(Row {
        fcfs: if options.without_fcfs {
            None
        } else {
            Some(replay(&Policy::fcfs())?)
        },
        easy: replay(&Policy::easy())?,
        policy: replay(policy)?,
    })
}

fn print_table(cases: &[Case], rows: &[Row]) {
    println!(
        "| trace | load | requests | jobs | FCFS wait / bsld / max wait / util | EASY wait / bsld / max wait / util | policy wait / bsld / max wait / util | bsld / EASY | max wait / EASY | contended | met | policy replay s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut contended, mut met) = (0, 0);
    let (mut worst_slowdown, mut worst_wait) = (0.0f64, 0.0f64);
    let mut slowest = (0.0f64, 0usize);
    for (case, row) in cases.iter().zip(rows) {
        let verdict = if row.contended() {
            contended += 1;
            met += usize::from(row.met());
            worst_slowdown = worst_slowdown.max(row.slowdown_ratio());
            worst_wait = worst_wait.max(row.max_wait_ratio());
            if row.met() { "yes" } else { "**no**" }
        } else {
            "-"
        };
        let seconds = row.policy.elapsed.as_secs_f64();
        if seconds > slowest.0 {
            slowest = (seconds, row.policy.jobs);
        }
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {:.2} |",
            case.name,
            case.load,
            case.requests,
            row.policy.jobs,
            row.fcfs.as_ref().map_or("-".into(), cells),
            cells(&row.easy),
            cells(&row.policy),
            row.slowdown_ratio(),
            row.max_wait_ratio(),
            if row.contended() { "yes" } else { "no" },
            verdict,
            seconds
        );
    }
    println!(
        "\ncontended cases: {contended}, targets met in {met}; worst bsld / EASY {worst_slowdown:.2}, worst max wait / EASY {worst_wait:.2}; slowest policy replay {:.2} s ({} jobs)",
        slowest.0, slowest.1
    );
}

/// Mean wait (h), mean bounded slowdown, max wait (h), utilization.
fn cells(o: &Outcome) -> String {
    format!(
        "{:.2} / {:.2} / {:.1} / {:.2}",
        o.mean_wait / 3600.0,
        o.mean_bounded_slowdown,
        o.max_wait as f64 / 3600.0,
        o.utilization
    )
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        if a == 0.0 { 1.0 } else { f64::INFINITY }
    } else {
        a / b
    }
}
