//! `drover replay TRACE.swf`: a workload trace through the engine in virtual time, under
//! FCFS, EASY backfilling and the configured policy, side by side.

use std::io::{IsTerminal, Write};

use drover_sched::policy::Policy;
use drover_sched::sim::{self, Outcome, swf};

/// Runs the replay; `policy` is the configured one.
pub fn run(path: &str, processors: Option<u32>, nodes: u32, policy: Policy) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let trace = swf::parse(&text).map_err(|e| format!("{path}: {e}"))?;
    let processors = processors
        .or(trace.machine_processors)
        .ok_or("the trace names no machine size (MaxProcs or MaxNodes): give --processors")?;
    let machine = sim::machine(processors, nodes);
    let widest = trace.jobs.iter().map(|j| j.processors).max().unwrap_or(0);
    if widest > processors {
        return Err(format!(
            "a job of the trace asks for {widest} processors; the machine has {processors}"
        ));
    }
    println!(
        "{path}: {} jobs ({} lines skipped: unknown run time or size), {processors} processors on {} node(s)",
        trace.jobs.len(),
        trace.skipped,
        machine.len()
    );
    let runs = [
        ("FCFS", Policy::fcfs()),
        ("EASY", Policy::easy()),
        ("configured", policy.clone()),
    ];
    let mut outcomes = Vec::new();
    for (name, policy) in &runs {
        let mut bar = Progress::new(name, trace.jobs.len());
        let outcome = sim::replay(&trace, &machine, policy, &mut |done| bar.show(done))?;
        bar.finish();
        outcomes.push((*name, outcome));
    }
    println!(
        "\n{:<11} {:>12} {:>14} {:>12} {:>12} {:>12} {:>9}",
        "policy", "mean wait s", "mean bsld", "max wait s", "utilization", "makespan s", "time ms"
    );
    for (name, o) in &outcomes {
        print_row(name, o);
    }
    let easy = &outcomes[1].1;
    let configured = &outcomes[2].1;
    println!(
        "\nconfigured: {}\nconfigured / EASY: mean wait {:.2}, mean bounded slowdown {:.2}, max wait {:.2}",
        policy.describe(),
        ratio(configured.mean_wait, easy.mean_wait),
        ratio(configured.mean_bounded_slowdown, easy.mean_bounded_slowdown),
        ratio(configured.max_wait as f64, easy.max_wait as f64),
    );
    let total: f64 = outcomes.iter().map(|(_, o)| o.elapsed.as_secs_f64()).sum();
    println!("all three replays: {:.0} ms", total * 1000.0);
    Ok(())
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 1.0 } else { a / b }
}

fn print_row(name: &str, o: &Outcome) {
    println!(
        "{:<11} {:>12.0} {:>14.2} {:>12} {:>12.3} {:>12} {:>9.0}",
        name,
        o.mean_wait,
        o.mean_bounded_slowdown,
        o.max_wait,
        o.utilization,
        o.makespan,
        o.elapsed.as_secs_f64() * 1000.0
    );
}

/// A progress bar on standard error (when it is a terminal: otherwise one line at the end).
struct Progress {
    name: String,
    total: usize,
    shown: usize,
    terminal: bool,
}

impl Progress {
    fn new(name: &str, total: usize) -> Progress {
        Progress {
            name: name.to_string(),
            total: total.max(1),
            shown: usize::MAX,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, done: usize) {
        let percent = done * 100 / self.total;
        if !self.terminal || percent == self.shown {
            return;
        }
        self.shown = percent;
        let filled = percent * 30 / 100;
        eprint!(
            "\r{:<11} [{}{}] {:>3}%",
            self.name,
            "#".repeat(filled),
            ".".repeat(30 - filled),
            percent
        );
        let _ = std::io::stderr().flush();
    }

    fn finish(&mut self) {
        if self.terminal {
            eprintln!();
        } else {
            eprintln!("{:<11} replayed {} jobs", self.name, self.total);
        }
    }
}
