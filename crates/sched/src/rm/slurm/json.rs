//! Readers of Slurm's JSON (`squeue --json`, `sinfo --json`, `sacct --json`): pure
//! functions from the text to what the resource manager needs.
//!
//! The shapes change between Slurm versions (the OpenAPI plugin's `v0.0.38` of 22.05
//! has `job_state: "RUNNING"` and `exit_code: 768`, a raw wait status; `v0.0.39` and
//! later have `job_state: ["RUNNING"]` and `exit_code: {status, return_code, signal}`,
//! numbers sometimes as `{set, infinite, number}`). Each reader accepts every shape it
//! knows, skips an entry it cannot read, and names it in [`Parsed::problems`] rather than
//! failing the whole listing. The fixtures beside this file are real 22.05 outputs.

use serde_json::Value;

use drover_domain::node::NodeConfig;

/// What a reader made of a document: the entries it could read, and what it could not.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed<T> {
    pub items: Vec<T>,
    /// One line per entry or field that was skipped (its index and why).
    pub problems: Vec<String>,
}

impl<T> Default for Parsed<T> {
    fn default() -> Self {
        Parsed {
            items: Vec::new(),
            problems: Vec::new(),
        }
    }
}

/// A Slurm job as `squeue`/`sacct` report it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmJob {
    pub job_id: u64,
    pub name: String,
    /// Upper case, e.g. `RUNNING`, `COMPLETED`, `CANCELLED` (the first of the states in
    /// versions that give several).
    pub state: String,
    pub state_reason: Option<String>,
    pub user_name: Option<String>,
    /// Slurm's host list (`node[1-2]`), empty while pending.
    pub nodes: String,
    /// As shells report it: the exit status, or 128 + the signal that ended it.
    pub exit_code: Option<i32>,
    pub start_time: Option<i64>,
    pub end_time: Option<i64>,
    /// The processors it holds (all nodes together), when known.
    pub cpus: Option<u32>,
    /// The memory it holds (MB, all nodes together), when known.
    pub memory: Option<u64>,
}

impl SlurmJob {
    /// The job will not run again by itself: its end is final.
    pub fn is_finished(&self) -> bool {
        is_finished_state(&self.state)
    }
}

/// The states a Slurm job ends in (`squeue --states` names).
pub fn is_finished_state(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "OUT_OF_MEMORY"
    )
}

/// A node as Slurm describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmNode {
    /// Its id, processors, memory (MB), features and (first) partition.
    pub config: NodeConfig,
    /// Every partition it is in.
    pub partitions: Vec<String>,
    /// Slurm's state words, upper case (`IDLE`, `MIXED`, `DOWN`, `DRAIN`,
    /// `NOT_RESPONDING`...).
    pub state: Vec<String>,
    /// Down (or not responding): jobs there are lost.
    pub down: bool,
    /// Drained or draining: no new work.
    pub drained: bool,
    /// Why an administrator or Slurm set it so.
    pub reason: Option<String>,
}

/// The top-level `errors` of a Slurm JSON answer, as text (empty when none).
pub fn errors(doc: &Value) -> Vec<String> {
    doc.get("errors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .map(|e| {
                    e.get("error")
                        .or_else(|| e.get("description"))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| e.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Reads `squeue --json` (and `sacct --json`, whose jobs differ in a few fields).
pub fn parse_jobs(text: &str) -> Result<Parsed<SlurmJob>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON from Slurm: {e}"))?;
    let Some(jobs) = doc.get("jobs").and_then(Value::as_array) else {
        let errors = errors(&doc);
        return Err(if errors.is_empty() {
            "Slurm's answer has no `jobs` list".to_string()
        } else {
            format!("Slurm answered: {}", errors.join("; "))
        });
    };
    let mut parsed = Parsed::default();
    for (i, job) in jobs.iter().enumerate() {
        match parse_job(job) {
            Ok(job) => parsed.items.push(job),
            Err(why) => parsed.problems.push(format!("jobs[{i}]: {why}")),
        }
    }
    Ok(parsed)
}

fn parse_job(job: &Value) -> Result<SlurmJob, String> {
    let job_id = job
        .get("job_id")
        .and_then(number)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or("no job_id")?;
    // squeue: `job_state`; sacct: `state.current` (a string in 22.05, a list later).
    let state = job
        .get("job_state")
        .or_else(|| job.get("state").and_then(|s| s.get("current")))
        .and_then(first_word)
        .ok_or_else(|| format!("job {job_id}: no state"))?;
    let state_reason = job
        .get("state_reason")
        .or_else(|| job.get("state").and_then(|s| s.get("reason")))
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty() && *r != "None")
        .map(str::to_string);
    let exit_code = job.get("exit_code").and_then(exit_code);
    let time = |squeue: &str, sacct: &str| {
        job.get(squeue)
            .or_else(|| job.get("time").and_then(|t| t.get(sacct)))
            .and_then(number)
            .filter(|t| *t > 0)
    };
    Ok(SlurmJob {
        job_id,
        name: job
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        state,
        state_reason,
        user_name: job
            .get("user_name")
            .or_else(|| job.get("user"))
            .and_then(Value::as_str)
            .map(str::to_string),
        nodes: job
            .get("nodes")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        exit_code,
        start_time: time("start_time", "start"),
        end_time: time("end_time", "end"),
        cpus: job
            .get("cpus")
            .and_then(number)
            .and_then(|n| u32::try_from(n).ok()),
        memory: None,
    })
}

/// An exit code as a shell reports it, from any of Slurm's shapes: a raw wait status
/// (22.05 `squeue`), or `{status, return_code, signal: {id}}` (22.05 `sacct`, 23.02 on).
fn exit_code(value: &Value) -> Option<i32> {
    if let Some(status) = value.as_i64() {
        let status = i32::try_from(status).ok()?;
        let signal = status & 0x7f;
        return Some(if signal != 0 {
            128 + signal
        } else {
            (status >> 8) & 0xff
        });
    }
    let signal = value
        .get("signal")
        .and_then(|s| s.get("id").or_else(|| s.get("signal_id")))
        .and_then(number)
        .filter(|s| *s > 0);
    if let Some(signal) = signal {
        return i32::try_from(128 + signal).ok();
    }
    value
        .get("return_code")
        .and_then(number)
        .and_then(|c| i32::try_from(c).ok())
}

/// Reads `sinfo --json`: one entry per node (a node listed once per partition in some
/// versions is merged).
pub fn parse_nodes(text: &str) -> Result<Parsed<SlurmNode>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON from Slurm: {e}"))?;
    // 22.05: `nodes: [..]`; 23.x sinfo: `sinfo: [{nodes: {nodes: [names]}, ..}]` with the
    // details under `nodes` too when asked for nodes: only the first is read here.
    let Some(nodes) = doc.get("nodes").and_then(Value::as_array) else {
        let errors = errors(&doc);
        return Err(if errors.is_empty() {
            "Slurm's answer has no `nodes` list".to_string()
        } else {
            format!("Slurm answered: {}", errors.join("; "))
        });
    };
    // sinfo --json answers no node and an error (and exits 0) when slurmctld is away.
    let errors = errors(&doc);
    if nodes.is_empty() && !errors.is_empty() {
        return Err(format!("Slurm answered: {}", errors.join("; ")));
    }
    let mut parsed: Parsed<SlurmNode> = Parsed::default();
    for (i, node) in nodes.iter().enumerate() {
        match parse_node(node) {
            Ok(node) => {
                if let Some(seen) = parsed
                    .items
                    .iter_mut()
                    .find(|n| n.config.id == node.config.id)
                {
                    for p in node.partitions {
                        if !seen.partitions.contains(&p) {
                            seen.partitions.push(p);
                        }
                    }
                } else {
                    parsed.items.push(node);
                }
            }
            Err(why) => parsed.problems.push(format!("nodes[{i}]: {why}")),
        }
    }
    Ok(parsed)
}

fn parse_node(node: &Value) -> Result<SlurmNode, String> {
    let name = node
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or("no name")?;
    let processors = node
        .get("cpus")
        .and_then(number)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("node {name}: no cpus"))?;
    let memory = node
        .get("real_memory")
        .and_then(number)
        .and_then(|m| u64::try_from(m).ok())
        .filter(|m| *m > 0);
    let features = words(node.get("features").or_else(|| node.get("active_features")));
    let partitions = words(node.get("partitions"));
    let mut state: Vec<String> = Vec::new();
    for word in words(node.get("state"))
        .into_iter()
        .chain(words(node.get("state_flags")))
    {
        let word = word.to_ascii_uppercase();
        if !state.contains(&word) {
            state.push(word);
        }
    }
    let down = state
        .iter()
        .any(|s| matches!(s.as_str(), "DOWN" | "NOT_RESPONDING" | "FAIL" | "FUTURE"));
    let drained = state
        .iter()
        .any(|s| matches!(s.as_str(), "DRAIN" | "DRAINED" | "DRAINING"));
    let mut config = NodeConfig::new(name, processors);
    config.memory = memory;
    config.features = features;
    config.partition = partitions.first().cloned();
    config.architecture = node
        .get("architecture")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .map(str::to_string);
    Ok(SlurmNode {
        config,
        partitions,
        state,
        down,
        drained,
        reason: node
            .get("reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .map(str::to_string),
    })
}

/// A number, plain or as `{set, infinite, number}` (v0.0.39 on).
fn number(value: &Value) -> Option<i64> {
    if let Some(n) = value.as_i64() {
        return Some(n);
    }
    if let Some(n) = value.as_u64() {
        return i64::try_from(n).ok();
    }
    if value.get("set").and_then(Value::as_bool) == Some(false)
        || value.get("infinite").and_then(Value::as_bool) == Some(true)
    {
        return None;
    }
    value.get("number").and_then(number)
}

/// The first word of a string or a list of strings, upper case.
fn first_word(value: &Value) -> Option<String> {
    words(Some(value))
        .into_iter()
        .next()
        .map(|w| w.to_ascii_uppercase())
}

/// A comma-separated string or a list of strings, as words.
fn words(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::String(s)) => s
            .split(',')
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect(),
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_str)
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from `squeue --json` on Slurm 22.05.8 (Debian bookworm): job 1 exited 3,
    /// 2 was cancelled while running, 3 is pending and held, 4 killed itself with
    /// SIGKILL, 5 is suspended.
    const SQUEUE_22_05: &str = include_str!("squeue-22.05.json");
    /// Captured from `sinfo --json` on 22.05.8: node1 has features big,fast; node2 is
    /// down; node3 is drained.
    const SINFO_22_05: &str = include_str!("sinfo-22.05.json");

    fn job(parsed: &Parsed<SlurmJob>, id: u64) -> &SlurmJob {
        parsed.items.iter().find(|j| j.job_id == id).unwrap()
    }

    #[test]
    fn squeue_22_05() {
        let parsed = parse_jobs(SQUEUE_22_05).unwrap();
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert_eq!(parsed.items.len(), 5);
        let failed = job(&parsed, 1);
        assert_eq!(failed.name, "drover-fix1");
        assert_eq!(failed.state, "FAILED");
        assert_eq!(failed.exit_code, Some(3));
        assert_eq!(failed.nodes, "node2");
        assert_eq!(failed.user_name.as_deref(), Some("drover-bob"));
        assert!(failed.is_finished());
        let cancelled = job(&parsed, 2);
        assert_eq!(cancelled.state, "CANCELLED");
        assert_eq!(cancelled.exit_code, Some(128 + 15));
        let held = job(&parsed, 3);
        assert_eq!(held.state, "PENDING");
        assert_eq!(held.state_reason.as_deref(), Some("JobHeldAdmin"));
        assert_eq!(held.nodes, "");
        assert!(!held.is_finished());
        assert_eq!(job(&parsed, 4).exit_code, Some(128 + 9));
        assert_eq!(job(&parsed, 5).state, "SUSPENDED");
        assert!(!job(&parsed, 5).is_finished());
    }

    #[test]
    fn sinfo_22_05() {
        let parsed = parse_nodes(SINFO_22_05).unwrap();
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        let ids: Vec<&str> = parsed.items.iter().map(|n| n.config.id.as_str()).collect();
        assert_eq!(ids, ["node1", "node2", "node3"]);
        let node1 = &parsed.items[0];
        assert_eq!(node1.config.processors, 4);
        assert_eq!(node1.config.memory, Some(2000));
        assert_eq!(node1.config.features, ["big", "fast"]);
        assert_eq!(node1.config.partition.as_deref(), Some("debug"));
        assert!(!node1.down && !node1.drained);
        let node2 = &parsed.items[1];
        assert!(node2.down && !node2.drained);
        assert_eq!(node2.reason.as_deref(), Some("fixture down"));
        let node3 = &parsed.items[2];
        assert!(node3.drained && !node3.down);
        assert_eq!(node3.state, ["IDLE", "DRAIN"]);
    }

    /// Not captured (no such Slurm here): the shapes of v0.0.39 and later as the
    /// OpenAPI descriptions give them.
    #[test]
    fn later_shapes() {
        let text = r#"{"jobs":[
            {"job_id":7,"name":"drover-a.1","job_state":["COMPLETED"],"user_name":"bob",
             "nodes":"node1","exit_code":{"status":["EXITED"],
             "return_code":{"set":true,"infinite":false,"number":2}},
             "start_time":{"set":true,"infinite":false,"number":100},
             "end_time":{"set":true,"infinite":false,"number":160}},
            {"job_id":8,"name":"drover-a.2","job_state":["CANCELLED"],
             "exit_code":{"status":["SIGNALED"],"return_code":{"set":true,"number":0},
             "signal":{"id":{"set":true,"number":15},"name":"TERM"}}},
            {"name":"no id"}]}"#;
        let parsed = parse_jobs(text).unwrap();
        assert_eq!(parsed.items[0].exit_code, Some(2));
        assert_eq!(parsed.items[0].end_time, Some(160));
        assert_eq!(parsed.items[1].exit_code, Some(143));
        assert_eq!(parsed.problems, ["jobs[2]: no job_id"]);
        let nodes = r#"{"nodes":[{"name":"n1","cpus":8,"real_memory":4000,
            "state":["IDLE","DRAIN"],"features":["a","b"],"partitions":["p"]},
            {"name":"n2"}]}"#;
        let parsed = parse_nodes(nodes).unwrap();
        assert!(parsed.items[0].drained);
        assert_eq!(parsed.items[0].config.features, ["a", "b"]);
        assert_eq!(parsed.problems, ["nodes[1]: node n2: no cpus"]);
    }

    /// `sacct --json` of 22.05 (shape from its OpenAPI description: accounting is off
    /// in the test cluster, so not captured).
    #[test]
    fn sacct_shape() {
        let text = r#"{"jobs":[{"job_id":9,"name":"drover-x","user":"bob",
            "state":{"current":"COMPLETED","reason":"None"},
            "exit_code":{"status":"COMPLETED","return_code":0},
            "time":{"start":10,"end":20}}]}"#;
        let parsed = parse_jobs(text).unwrap();
        let job = &parsed.items[0];
        assert_eq!(job.state, "COMPLETED");
        assert_eq!(job.exit_code, Some(0));
        assert_eq!(job.end_time, Some(20));
        assert_eq!(job.user_name.as_deref(), Some("bob"));
    }

    #[test]
    fn not_slurm() {
        assert!(parse_jobs("nope").is_err());
        assert!(
            parse_jobs(r#"{"errors":[{"error":"down"}]}"#)
                .unwrap_err()
                .contains("down")
        );
        assert!(parse_nodes("{}").is_err());
        // sinfo --json of 22.05 while slurmctld is away (exit status 0).
        let away = r#"{"errors":[{"error":"Unspecified error","errno":-1}],"nodes":[]}"#;
        assert!(parse_nodes(away).is_err());
    }
}
