//! End-to-end job throughput over HTTP (issue #31, item 1): optionally fills the queue
//! with held jobs, then submits `jobs` runnable jobs from `clients` concurrent clients
//! and waits until every one has completed. Prints the held submission rate, the
//! runnable submission rate with latency percentiles, and jobs completed per second from
//! the first submission to the last completion.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Options {
    pub url: String,
    pub authorization: String,
    pub jobs: usize,
    pub held: usize,
    pub clients: usize,
    pub command: String,
    /// The jobs' working directory (their output files go there).
    pub directory: String,
}

pub struct Figures {
    pub held_per_second: Option<f64>,
    pub submitted_per_second: f64,
    pub latency_ms: [f64; 3],
    pub completed_per_second: f64,
}

/// An HTTP client whose reads and writes time out after a minute. Not a timeout on the
/// whole call: with one, ureq resolves the host on a thread of its own, a thread started
/// and ended per request (two fifths of the clients' CPU in a profile, taken from the
/// jobs the benchmark measures).
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_per_read(Some(Duration::from_secs(60)))
        .timeout_per_write(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// Submits `count` jobs from the clients; answers each submission's latency.
fn submit_all(options: &Options, count: usize, held: bool, tag: &str) -> Vec<Duration> {
    let next = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(count)));
    let threads: Vec<_> = (0..options.clients)
        .map(|_| {
            let (next, latencies) = (next.clone(), latencies.clone());
            let url = format!("{}/rest/jobs?api-version=2", options.url);
            let authorization = options.authorization.clone();
            let body = if held {
                format!(
                    r#"{{"commandFile":"{}","initialWorkingDirectory":"{}","customName":"{tag}","holds":["User"]}}"#,
                    options.command, options.directory
                )
            } else {
                format!(
                    r#"{{"commandFile":"{}","initialWorkingDirectory":"{}","customName":"{tag}"}}"#,
                    options.command, options.directory
                )
            };
            std::thread::spawn(move || {
                let agent = agent();
                let mut mine = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < count {
                    let start = Instant::now();
                    let mut response = agent
                        .post(&url)
                        .header("Authorization", &authorization)
                        .header("Content-Type", "application/json")
                        .send(body.as_bytes())
                        .expect("the server answers");
                    assert_eq!(
                        response.status().as_u16(),
                        201,
                        "a submission was refused"
                    );
                    // Read to its end, so that the connection goes back to the agent's
                    // pool: a body left unread closes it, and every submission would
                    // then pay a new connection on both sides, as no real client does.
                    response
                        .body_mut()
                        .read_to_vec()
                        .expect("the answer's body");
                    mine.push(start.elapsed());
                }
                latencies.lock().unwrap().extend(mine);
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    Arc::try_unwrap(latencies).unwrap().into_inner().unwrap()
}

/// How many jobs have completed (a query the state index answers: the poll must not
/// cost the server what it measures).
fn completed(agent: &ureq::Agent, options: &Options) -> usize {
    let query = r#"{"states.state":"Completed"}"#;
    let url = format!(
        "{}/rest/jobs?api-version=2&max=1&fields=name&query={}",
        options.url,
        percent_encode(query)
    );
    let mut response = agent
        .get(&url)
        .header("Authorization", &options.authorization)
        .call()
        .expect("the server answers");
    let body: serde_json::Value =
        serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
    body["totalCount"].as_u64().unwrap_or(0) as usize
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at].as_secs_f64() * 1e3
}

pub fn run(options: &Options) -> Figures {
    let held_per_second = (options.held > 0).then(|| {
        let start = Instant::now();
        submit_all(options, options.held, true, "held");
        options.held as f64 / start.elapsed().as_secs_f64()
    });
    let tag = format!("run{}", std::process::id());
    let agent = agent();
    let before = completed(&agent, options);
    let start = Instant::now();
    let mut latencies = submit_all(options, options.jobs, false, &tag);
    let submitted = start.elapsed();
    latencies.sort();
    let deadline = Instant::now() + Duration::from_secs(600);
    while completed(&agent, options) < before + options.jobs {
        assert!(Instant::now() < deadline, "jobs never completed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let finished = start.elapsed();
    Figures {
        held_per_second,
        submitted_per_second: options.jobs as f64 / submitted.as_secs_f64(),
        latency_ms: [
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.9),
            percentile(&latencies, 0.99),
        ],
        completed_per_second: options.jobs as f64 / finished.as_secs_f64(),
    }
}
