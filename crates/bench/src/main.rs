//! Benchmarks of the foundation: the query evaluator and the document stores.
//!
//! ```text
//! drover-bench evaluator [--docs N]
//! drover-bench store --backend sqlite [--path FILE] [--docs N] [--queries Q]
//! drover-bench store --backend postgres --url postgres://... [--docs N] [--queries Q]
//! drover-bench auth [--rounds N]
//! ```
//! (`scripts/bench-http` drives the HTTP load benchmark with wrk and uses `auth` for the
//! cost of the Basic check.)
//! Prints throughput, latency percentiles and the ratio to the issue's target; asserts
//! nothing. `scripts/bench` runs them all.
//!
//! For profiling the evaluator: `DROVER_BENCH_SCANS=N` scans N times (7),
//! `DROVER_BENCH_SCAN=<part of a label>` runs only the scans so labelled, and
//! `DROVER_BENCH_COMPACT_ONLY=1` skips the `serde_json::Value` scans.

use std::time::{Duration, Instant};

use drover_domain::dates::{Timestamp, WireDates, format_utc};
use drover_query::compact::CompactDocs;
use drover_query::{Filter, ListQuery, Paging, Sort};
use drover_store::{CollectionSpec, DocumentStore, PostgresStore, SqliteStore, Write};
use serde_json::{Value, json};

/// The service's allocator (see `drover_alloc`), metered as the service's is, so the
/// store and the evaluator are measured as the service runs them.
#[global_allocator]
static ALLOCATOR: drover_alloc::Metered<drover_alloc::Mimalloc> =
    drover_alloc::Metered(drover_alloc::Mimalloc);

const USERS: u64 = 1000;
const STATES: &[&str] = &[
    "Idle",
    "Running",
    "Completed",
    "Removed",
    "Vacated",
    "Blocked",
    "Hold",
];

/// A small deterministic generator (xorshift64*), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A job document shaped like the version-2 job of the interface (about 700 bytes).
fn job(i: u64, rng: &mut Rng) -> Value {
    let user = rng.below(USERS);
    let submit = 1_767_225_600 + i as i64 * 3 + rng.below(3) as i64; // from 2026-01-01
    let state = STATES[rng.below(STATES.len() as u64) as usize];
    let tasks = 1 + rng.below(64);
    let ts = |s: i64| format_utc(jiff_second(s));
    let qos = ["low", "normal", "high"][rng.below(3) as usize];
    let class = ["batch", "fast", "gpu"][rng.below(3) as usize];
    json!({
        "name": format!("Drover.{i}"),
        "customName": format!("run-{}", rng.below(100_000)),
        "credentials": {"user": format!("user{user}"), "group": format!("grp{}", user % 40),
                        "account": format!("acct{}", user % 100), "qos": qos,
                        "jobClass": class},
        "states": {"state": state, "stateExpected": state, "subState": null},
        "flags": if rng.below(2) == 0 { json!(["RESTARTABLE"]) } else { json!(["SUSPENDABLE", "PREEMPTEE"]) },
        "priorities": {"run": rng.below(1000), "start": rng.below(1000), "system": 0, "user": rng.below(100)},
        "requirements": [{"index": 0, "taskCount": tasks, "tasksPerNode": 1, "nodeCount": 1 + tasks / 16,
                          "features": if rng.below(4) == 0 { json!(["gpu"]) } else { json!([]) },
                          "resourcesPerTask": {"processors": {"dedicated": 1 + rng.below(4)},
                                               "memory": {"dedicated": 1024 * (1 + rng.below(8))}}}],
        "dates": {"submitDate": ts(submit), "startDate": ts(submit + 60),
                  "completedDate": if state == "Completed" { json!(ts(submit + 3600)) } else { Value::Null }},
        "duration": 60 * (1 + rng.below(600)),
        "commandFile": format!("/home/user{user}/jobs/job{}.sh", rng.below(50)),
        "initialWorkingDirectory": format!("/home/user{user}"),
        "variables": {"project": format!("p{}", rng.below(30))},
    })
}

/// The share of the machine that the hypervisor took (steal time in `/proc/stat`) since
/// `start`: on a shared virtual machine it explains most differences between runs.
struct Steal {
    ticks: Option<u64>,
    at: Instant,
}

impl Steal {
    fn start() -> Self {
        Self {
            ticks: steal_ticks(),
            at: Instant::now(),
        }
    }

    /// " (hypervisor steal N%)", or nothing where `/proc/stat` says nothing.
    fn note(&self) -> String {
        let (Some(before), Some(now)) = (self.ticks, steal_ticks()) else {
            return String::new();
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        // /proc/stat counts in USER_HZ, 100 per second on Linux.
        let share = (now - before) as f64 / 100.0 / (cores * self.at.elapsed().as_secs_f64());
        format!(" (hypervisor steal {:.0}%)", share * 100.0)
    }
}

fn steal_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines().next()?.split_whitespace().nth(8)?.parse().ok()
}

fn jiff_second(s: i64) -> Timestamp {
    Timestamp::from_second(s).expect("valid second")
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn evaluator(docs: u64) {
    let mut rng = Rng(0x5eed);
    let started = Instant::now();
    let all: Vec<Value> = (0..docs).map(|i| job(i, &mut rng)).collect();
    eprintln!(
        "generated {docs} documents in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let filter = Filter::parse_str(
        r#"{"states.state": {"$in": ["Idle", "Running", "Blocked"]},
            "requirements.taskCount": {"$gte": 16},
            "credentials.qos": {"$ne": "low"}}"#,
        &WireDates::utc(),
    )
    .unwrap();
    let scan = |label: &str, count: &dyn Fn() -> usize| {
        if std::env::var("DROVER_BENCH_SCAN").is_ok_and(|only| !label.contains(&only)) {
            return;
        }
        let mut times = Vec::new();
        let mut matched = 0;
        let steal = Steal::start();
        let scans: usize = std::env::var("DROVER_BENCH_SCANS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(7);
        for _ in 0..scans {
            let t = Instant::now();
            matched = count();
            times.push(t.elapsed());
        }
        times.sort();
        let median = times[times.len() / 2];
        println!(
            "evaluator on {label}: {docs} docs, 3-clause filter ($in, $gte through an array, $ne), {matched} matches: \
             median {:.1} ms per full scan, best {:.1} ms ({:.1} M docs/s, one core); target < 150 ms: ratio {:.2}{}",
            ms(median),
            ms(times[0]),
            docs as f64 / median.as_secs_f64() / 1e6,
            ms(median) / 150.0,
            steal.note()
        );
    };
    let t = Instant::now();
    let mut compact = CompactDocs::default();
    all.iter().for_each(|d| compact.push(d));
    eprintln!(
        "built {docs} compact documents ({} bytes on average) in {:.1} s",
        compact.size() / docs.max(1) as usize,
        t.elapsed().as_secs_f64()
    );
    scan("compact documents, prepared filter", &|| {
        compact.matching(&filter).count()
    });
    scan("compact documents, reference evaluator", &|| {
        (0..compact.len())
            .filter(|&i| filter.matches(compact.root(i)))
            .count()
    });
    if std::env::var("DROVER_BENCH_COMPACT_ONLY").is_ok() {
        return;
    }
    scan("serde_json::Value", &|| {
        all.iter().filter(|d| filter.matches(*d)).count()
    });
    let sort = Sort::parse_str(r#"{"dates.submitDate": -1}"#).unwrap();
    let query = ListQuery {
        filter,
        sort,
        paging: Paging {
            offset: 0,
            max: Some(50),
        },
    };
    let t = Instant::now();
    let page = query.run(&all);
    println!(
        "evaluator: same filter + sort by dates.submitDate + max=50 over {docs} docs: {:.1} ms ({} matches)",
        ms(t.elapsed()),
        page.total
    );
}

/// Inserts documents `ids` in batches; prints and answers the throughput.
fn insert(
    store: &dyn DocumentStore,
    rng: &mut Rng,
    ids: std::ops::Range<u64>,
    batch_size: u64,
    label: &str,
    stored_before: u64,
) -> f64 {
    let count = ids.end - ids.start;
    let mut elapsed = Duration::ZERO;
    let mut batch_times = Vec::new();
    let mut next = ids.start;
    let steal = Steal::start();
    while next < ids.end {
        let batch: Vec<Write> = (next..(next + batch_size).min(ids.end))
            .map(|n| Write::Insert {
                collection: "jobs".into(),
                id: format!("Drover.{n}"),
                name: None,
                body: job(n, rng).into(),
            })
            .collect();
        next += batch.len() as u64;
        let t = Instant::now();
        store.write(&batch).unwrap();
        let e = t.elapsed();
        elapsed += e;
        batch_times.push(e);
    }
    batch_times.sort();
    let rate = count as f64 / elapsed.as_secs_f64();
    println!(
        "{label} insert: {count} docs (after {}) in batches of {batch_size}, one transaction each: \
         {rate:.0} docs/s (batch commit p50 {:.1} ms, p99 {:.1} ms){}",
        if ids.start == 0 {
            "0".to_string()
        } else {
            stored_before.to_string()
        },
        ms(percentile(&batch_times, 0.5)),
        ms(percentile(&batch_times, 0.99)),
        steal.note()
    );
    rate
}

fn store(args: &[String]) {
    let docs: u64 = arg(args, "--docs").map_or(1_000_000, |d| d.parse().unwrap());
    let queries: usize = arg(args, "--queries").map_or(1000, |q| q.parse().unwrap());
    let backend = arg(args, "--backend").unwrap_or_else(|| "sqlite".into());
    let (store, label): (Box<dyn DocumentStore>, String) = match backend.as_str() {
        "sqlite" => {
            let path = arg(args, "--path").unwrap_or_else(|| "/tmp/drover-bench.db".into());
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
            (
                Box::new(SqliteStore::open(std::path::Path::new(&path)).unwrap()),
                "sqlite (WAL, synchronous=FULL)".into(),
            )
        }
        "postgres" => {
            let url = arg(args, "--url").expect("--url postgres://...");
            let store = PostgresStore::connect_in_schema(&url, Some("bench")).unwrap();
            store.drop_schema().unwrap();
            let store = PostgresStore::connect_in_schema(&url, Some("bench")).unwrap();
            (Box::new(store), "postgresql".into())
        }
        other => panic!("unknown backend {other}"),
    };
    let spec = CollectionSpec::new("jobs")
        .index(&["credentials.user", "dates.submitDate"])
        .index(&["states.state"]);
    store.ensure_collection(&spec).unwrap();

    let mut rng = Rng(0x5eed);
    let batch_size: u64 = arg(args, "--batch").map_or(1000, |b| b.parse().unwrap());
    let rate = insert(&*store, &mut rng, 0..docs, batch_size, &label, docs);
    println!(
        "  ratio to the target of 50,000 docs/s: {:.2}",
        rate / 50_000.0
    );
    // Group commit makes batches larger under load: the same, 10,000 documents a batch.
    let more = (docs / 10).max(10_000);
    insert(&*store, &mut rng, docs..docs + more, 10_000, &label, docs);

    let t = Instant::now();
    store.maintain().unwrap();
    eprintln!(
        "maintain (ANALYZE; VACUUM on PostgreSQL) took {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let dates = WireDates::utc();
    let sort = Sort::parse_str(r#"{"dates.submitDate": -1}"#).unwrap();
    let mut latencies = Vec::with_capacity(queries);
    let mut returned = 0;
    for _ in 0..queries {
        let user = rng.below(USERS);
        let query = ListQuery {
            filter: Filter::parse_str(&format!(r#"{{"credentials.user": "user{user}"}}"#), &dates)
                .unwrap(),
            sort: sort.clone(),
            paging: Paging {
                offset: 0,
                max: Some(50),
            },
        };
        let t = Instant::now();
        let page = store.list("jobs", &query).unwrap();
        latencies.push(t.elapsed());
        returned += page.items.len();
    }
    latencies.sort();
    println!(
        "{label} list: {queries} queries {{credentials.user: <one of {USERS}>}} sort dates.submitDate -1 max=50 \
         ({} docs/page avg): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms; target p99 < 10 ms: ratio {:.2}",
        returned / queries.max(1),
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.9)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies[latencies.len() - 1]),
        ms(percentile(&latencies, 0.99)) / 10.0
    );

    // For comparison: a filter on an unindexed path, decided by the evaluator on a scan.
    let query = ListQuery {
        filter: Filter::parse_str(
            r#"{"variables.project": "p7", "states.state": "Idle"}"#,
            &dates,
        )
        .unwrap(),
        sort: Sort::default(),
        paging: Paging {
            offset: 0,
            max: Some(50),
        },
    };
    let t = Instant::now();
    let page = store.list("jobs", &query).unwrap();
    println!(
        "{label} list: partly unindexed filter (variables.project + states.state), max=50: {:.0} ms, {} matches",
        ms(t.elapsed()),
        page.total
    );
}

/// The per-request cost of Basic authentication once a login is remembered: decoding
/// the header and checking the login cache (what every authenticated request pays).
fn auth(rounds: u32) {
    use drover_auth::{Authenticator, User, basic_credentials, password};
    let user = User {
        name: "bench".into(),
        password_hash: password::hash("bench-password", password::Cost::Standard),
        admin: true,
    };
    let auth = Authenticator::new([user], Duration::from_secs(3600)).unwrap();
    let header = "Basic YmVuY2g6YmVuY2gtcGFzc3dvcmQ="; // bench:bench-password
    let started = Instant::now();
    assert!(auth.verify("bench", "bench-password").is_some());
    let argon2 = started.elapsed();
    let started = Instant::now();
    for _ in 0..rounds {
        let (user, password) = basic_credentials(std::hint::black_box(header)).unwrap();
        assert!(auth.remembered(&user, &password).is_some());
    }
    let per_check = started.elapsed().as_nanos() as f64 / rounds as f64;
    println!(
        "auth: remembered Basic login check {per_check:.0} ns/request ({rounds} rounds); \
         first login (argon2id, default cost) {:.1} ms",
        argon2.as_secs_f64() * 1e3
    );
}

/// A machine of `nodes` nodes of 32 processors, about 97% busy with running jobs of
/// 1 to 128 processors and 10 minutes to a day (their ends make the profile the
/// backfill plans against).
fn busy_machine(
    nodes: u32,
) -> (
    Vec<drover_sched::node::NodeConfig>,
    Vec<drover_sched::sim::Shape>,
) {
    let machine = (0..nodes)
        .map(|i| drover_sched::node::NodeConfig::new(&format!("n{i:05}"), 32))
        .collect();
    let capacity = u64::from(nodes) * 32;
    let mut rng = Rng(0x5EED);
    let mut running = Vec::new();
    let mut busy = 0u64;
    while busy < capacity * 97 / 100 {
        let tasks = 1u32 << rng.below(8);
        running.push(drover_sched::sim::Shape {
            tasks,
            per_node: None,
            seconds: 600 + rng.below(86_400) as i64,
        });
        busy += u64::from(tasks);
    }
    (machine, running)
}

/// Idle jobs of 1 to 256 processors for a minute to two days; with `whole_nodes`, 1 to
/// 8 whole nodes instead (which rarely fit the scattered free processors, so the pass
/// goes through the whole queue instead of stopping once the machine is full).
fn idle_jobs(n: usize, whole_nodes: bool) -> Vec<drover_sched::sim::Shape> {
    let mut rng = Rng(0xC0FFEE);
    (0..n)
        .map(|_| {
            let seconds = 60 + rng.below(172_800) as i64;
            if whole_nodes {
                drover_sched::sim::Shape {
                    tasks: 32 * (1 + rng.below(8) as u32),
                    per_node: Some(32),
                    seconds,
                }
            } else {
                drover_sched::sim::Shape {
                    tasks: 1 + rng.below(256) as u32,
                    per_node: None,
                    seconds,
                }
            }
        })
        .collect()
}

/// Times one scheduling pass with backfill over 10k/50k/100k idle jobs.
fn schedule(nodes: u32, waiting: &[usize]) {
    use drover_sched::policy::{Backfill, Policy};
    use drover_sched::sim::one_cycle;
    let (machine, running) = busy_machine(nodes);
    println!(
        "schedule: one pass; {nodes} nodes x 32 processors, {} running jobs holding ~97%",
        running.len()
    );
    let mut rows: Vec<(String, Policy, usize, bool, u32)> = Vec::new();
    for whole in [false, true] {
        for &n in waiting {
            let what = if whole { "whole nodes" } else { "processors" };
            rows.push((
                format!("default, {what}"),
                Policy::default(),
                n,
                whole,
                nodes,
            ));
            rows.push((
                format!("EASY FCFS order, {what}"),
                Policy::easy(),
                n,
                whole,
                nodes,
            ));
        }
    }
    let conservative = Policy {
        backfill: Backfill::Conservative,
        ..Policy::default()
    };
    let most = waiting.iter().copied().max().unwrap_or(0);
    rows.push((
        "conservative (64), processors".into(),
        conservative.clone(),
        most,
        false,
        nodes,
    ));
    rows.push((
        "conservative (64), whole nodes".into(),
        conservative,
        most,
        true,
        nodes,
    ));
    let mut baseline: Option<f64> = None;
    for (name, policy, n, whole, nodes_here) in rows {
        let (machine_here, running_here) = if nodes_here == nodes {
            (machine.clone(), running.clone())
        } else {
            busy_machine(nodes_here)
        };
        let jobs = idle_jobs(n, whole);
        let cycle = one_cycle(&machine_here, &running_here, &jobs, &policy).unwrap();
        let ms = cycle.elapsed.as_secs_f64() * 1e3;
        let first = *baseline.get_or_insert(ms);
        println!(
            "  {name:<28} {:>6} nodes {:>7} waiting: {ms:>8.1} ms (x{:>5.2} of the first row), {} started",
            nodes_here,
            cycle.waiting,
            ms / first,
            cycle.started,
        );
        if n == 100_000 && name.starts_with("default") {
            println!(
                "    target: under 500 ms for 100,000 idle jobs on 10,000 nodes: {}",
                if ms < 500.0 { "met" } else { "NOT met" }
            );
        }
    }
}

mod throughput;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("evaluator") => {
            evaluator(arg(&args, "--docs").map_or(1_000_000, |d| d.parse().unwrap()))
        }
        Some("store") => store(&args),
        Some("auth") => auth(arg(&args, "--rounds").map_or(1_000_000, |d| d.parse().unwrap())),
        Some("schedule") => schedule(
            arg(&args, "--nodes").map_or(10_000, |d| d.parse().unwrap()),
            &arg(&args, "--jobs")
                .unwrap_or_else(|| "10000,50000,100000".into())
                .split(',')
                .map(|n| n.parse().unwrap())
                .collect::<Vec<_>>(),
        ),
        Some("throughput") => {
            let number = |name: &str, default: usize| {
                arg(&args, name).map_or(default, |d| d.parse().unwrap())
            };
            let options = throughput::Options {
                url: arg(&args, "--url").expect("--url"),
                authorization: arg(&args, "--authorization").expect("--authorization"),
                jobs: number("--jobs", 10_000),
                held: number("--held", 0),
                clients: number("--clients", 16),
                command: arg(&args, "--command").unwrap_or_else(|| "/bin/true".into()),
                directory: arg(&args, "--directory").unwrap_or_else(|| "/tmp".into()),
            };
            let figures = throughput::run(&options);
            if let Some(rate) = figures.held_per_second {
                println!("  {} held submissions: {rate:.0}/s", options.held);
            }
            let [p50, p90, p99] = figures.latency_ms;
            println!(
                "  {} runnable submissions: {:.0}/s (latency p50 {p50:.1} ms, p90 {p90:.1} ms, p99 {p99:.1} ms)",
                options.jobs, figures.submitted_per_second
            );
            println!(
                "  end to end (first submission to last completion): {:.0} jobs/s (target 1,000: ratio {:.2})",
                figures.completed_per_second,
                figures.completed_per_second / 1000.0
            );
        }
        _ => {
            eprintln!(
                "usage: drover-bench evaluator [--docs N] | store --backend sqlite|postgres [--url URL] [--path FILE] [--docs N] [--queries Q] | auth [--rounds N] | schedule [--nodes N] [--jobs N,N,..] | throughput --url URL --authorization HEADER [--jobs N] [--held N] [--clients N] [--command PATH] [--directory DIR]"
            );
            std::process::exit(2);
        }
    }
}
