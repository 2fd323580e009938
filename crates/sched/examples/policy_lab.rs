//! Policy experiments: replays traces at several loads, exact and users' requested
//! times, under EASY (cached) and a policy given as key=value arguments.
//!
//!   cargo run --release -p drover-sched --example policy_lab -- expansion=1000 \
//!       narrow=0 short=0 minutes=0 oldest=true predict=true traces=a.swf,b.swf loads=1,1.2
//!
//! Unset weights are the defaults'; `predict` is `predict_runtimes`.
use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use drover_sched::policy::{Policy, Weights};
use drover_sched::sim::estimates::EstimateModel;
use drover_sched::sim::{self, swf};

type Args = HashMap<String, String>;

fn main() {
    let args: Args = std::env::args()
        .skip(1)
        .filter_map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let policy = policy(&args);
    let (cases, traces) = cases(&args);
    run(&policy, &cases, &traces);
}

fn policy(args: &Args) -> Policy {
    let num = |k: &str, d: f64| args.get(k).map_or(d, |v| v.parse().unwrap());
    let (defaults, w) = (Policy::default(), Weights::default());
    let flag = |k: &str, d: bool| args.get(k).map_or(d, |v| v == "true");
    Policy {
        weights: Weights {
            user_priority: 1.0,
            queue_minutes: num("minutes", w.queue_minutes),
            expansion: num("expansion", w.expansion),
            narrow_request: num("narrow", w.narrow_request),
            short_request: num("short", w.short_request),
            ..Weights::default()
        },
        reserve_oldest: flag("oldest", defaults.reserve_oldest),
        oldest_after_expansion: num("after", defaults.oldest_after_expansion),
        predict_runtimes: flag("predict", defaults.predict_runtimes),
        ..defaults
    }
}

type Case = (String, f64, String);

fn cases(args: &Args) -> (Vec<Case>, HashMap<String, swf::Trace>) {
    let traces: Vec<String> = args["traces"].split(',').map(String::from).collect();
    let loads: Vec<f64> = args
        .get("loads")
        .map_or("1,1.2,1.3,1.5", |s| s.as_str())
        .split(',')
        .map(|l| l.parse().unwrap())
        .collect();
    let estimates: Vec<String> = args
        .get("est")
        .map_or("exact,users", |s| s.as_str())
        .split(',')
        .map(String::from)
        .collect();
    let mut cases = Vec::new();
    for t in &traces {
        for &l in &loads {
            for e in &estimates {
                cases.push((t.clone(), l, e.clone()));
            }
        }
    }
    let texts: HashMap<String, swf::Trace> = traces
        .iter()
        .map(|t| {
            (
                t.clone(),
                swf::parse(&std::fs::read_to_string(t).unwrap()).unwrap(),
            )
        })
        .collect();
    (cases, texts)
}

fn run(policy: &Policy, cases: &[Case], texts: &HashMap<String, swf::Trace>) {
    let cache_path = "/tmp/policy-lab-easy.tsv";
    let cache: Mutex<HashMap<String, (f64, i64)>> = Mutex::new(
        std::fs::read_to_string(cache_path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                Some((f[0].to_string(), (f[1].parse().ok()?, f[2].parse().ok()?)))
            })
            .collect(),
    );
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some((t, l, e)) = cases.get(i) else { break };
                    let mut trace = texts[t].clone().at_load(*l);
                    if e == "exact" {
                        trace = trace.with_perfect_estimates();
                    } else {
                        trace = trace.with_modelled_estimates(&EstimateModel::default(), 7);
                    }
                    let p = trace.machine_processors.unwrap();
                    let machine = sim::machine(p, 1);
                    let key = format!("{t}|{l}|{e}");
                    let cached = cache.lock().unwrap().get(&key).copied();
                    let easy = cached.unwrap_or_else(|| {
                        let o = sim::replay(&trace, &machine, &Policy::easy(), &mut |_| {})
                            .unwrap();
                        let v = (o.mean_bounded_slowdown, o.max_wait);
                        cache.lock().unwrap().insert(key.clone(), v);
                        let mut f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(cache_path)
                            .unwrap();
                        writeln!(f, "{key}\t{}\t{}", v.0, v.1).unwrap();
                        v
                    });
                    let o = sim::replay(&trace, &machine, policy, &mut |_| {}).unwrap();
                    results.lock().unwrap().push((
                        i,
                        format!(
                            "{:<40} {:>4} {:<6} easy {:>8.2} {:>9} pol {:>8.2} {:>9} bsld {:.3} wait {:.3} {:.1}s",
                            t.rsplit('/').next().unwrap(),
                            l,
                            e,
                            easy.0,
                            easy.1,
                            o.mean_bounded_slowdown,
                            o.max_wait,
                            o.mean_bounded_slowdown / easy.0,
                            o.max_wait as f64 / easy.1.max(1) as f64,
                            o.elapsed.as_secs_f64()
                        ),
                        easy.0,
                        o.mean_bounded_slowdown / easy.0,
                        o.max_wait as f64 / easy.1.max(1) as f64,
                    ));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    let (mut worst_b, mut worst_w) = (0.0f64, 0.0f64);
    for (_, line, easy_bsld, b, w) in &results {
        let contended = *easy_bsld > 2.0;
        println!("{}{line}", if contended { "* " } else { "  " });
        if contended {
            worst_b = worst_b.max(*b);
            worst_w = worst_w.max(*w);
        }
    }
    println!("{}", policy.describe());
    println!("WORST contended: bsld {worst_b:.3} wait {worst_w:.3}");
}
