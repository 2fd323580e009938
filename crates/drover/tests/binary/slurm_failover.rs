//! Issue #56, item 4: failover with Slurm jobs running. Two servers on Slurm share a
//! PostgreSQL store; the active one is killed with SIGKILL while its Slurm jobs run and
//! 8 clients submit. The standby takes over, adopts every job the killed server had
//! handed to Slurm (the same Slurm job, not a new one), records every end with its Slurm
//! exit code, and hands nothing twice: each job is exactly one Slurm job (`sacct`).
//!
//! Runs with `DROVER_TEST_SLURM=1` (a cluster keeping accounts, as
//! `scripts/services/slurm.sh` starts it), PostgreSQL, and the account `drover-bob`.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use drover_testkit::slurm_state;
use drover_testkit::wait_for_value as wait;
use serde_json::{Value, json};

use super::{
    answered_201, basic, client_agent, get, hash_password, health, post, roll, serve,
    serve_standby, unsafe_kill,
};

const BOB: &str = "drover-bob";
const BOB_PASSWORD: &str = "bob-secret";
const ADMIN_PASSWORD: &str = "group-secret";
/// Jobs submitted before the kill; the first `LONG` run through it (12 processors).
const JOBS: usize = 100;
const LONG: usize = 12;
const CLIENTS: usize = 8;

/// Whether the test can run here; says why not.
fn ready() -> Option<String> {
    if std::env::var("DROVER_TEST_SLURM").as_deref() != Ok("1") {
        eprintln!("skipped: DROVER_TEST_SLURM is not set");
        return None;
    }
    let url = drover_store::test_postgres_url().or_else(|| {
        eprintln!("no PostgreSQL for the test run; skipped");
        None
    })?;
    let accounts = Command::new("sacct")
        .args(["-n", "-X", "--jobs=1"])
        .output();
    assert!(
        accounts.is_ok_and(|o| o.status.success()),
        "the Slurm cluster keeps no accounts (scripts/services/slurm.sh starts slurmdbd)"
    );
    assert!(
        Command::new("id")
            .arg(BOB)
            .output()
            .is_ok_and(|o| o.status.success()),
        "no system account {BOB}"
    );
    Some(url)
}

/// A job's body: `sleep <seconds>; exit <code>`, named so that its code is known.
fn job(name: &str, seconds: u32, code: u32) -> String {
    json!({
        "customName": name,
        "commandFile": "/bin/sh",
        "commandLineArguments": ["-c", format!("sleep {seconds}; exit {code}")],
        "initialWorkingDirectory": "/tmp",
        "standardOutputFilePath": "/dev/null",
        "standardErrorFilePath": "/dev/null",
    })
    .to_string()
}

fn submit(url: &str, body: &str) -> (u16, String) {
    post(
        &format!("{url}/rest/jobs?api-version=2"),
        &[("Authorization", &basic(BOB, BOB_PASSWORD))],
        "application/json",
        body,
    )
}

/// Every job: id -> (custom name, state, completion code, start count, Slurm job id).
type Jobs = HashMap<String, (String, String, Option<i64>, i64, String)>;

fn jobs(url: &str) -> Option<Jobs> {
    let (status, body) = get(
        &format!(
            "{url}/rest/jobs?fields=id,name,state,completionCode,startCount,sourceRmJobId&max=100000"
        ),
        "admin",
        ADMIN_PASSWORD,
    );
    if status != 200 {
        return None;
    }
    let list: Value = serde_json::from_str(&body).unwrap();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Some(
        list["results"]
            .as_array()?
            .iter()
            .map(|j| {
                (
                    text(&j["id"]),
                    (
                        text(&j["name"]),
                        text(&j["state"]),
                        j["completionCode"].as_i64(),
                        j["startCount"].as_i64().unwrap_or(-1),
                        text(&j["sourceRmJobId"]),
                    ),
                )
            })
            .collect(),
    )
}

/// The code a job's name says it exits with (`...-c<code>`).
fn expected_code(name: &str) -> i64 {
    name.rsplit_once("-c").unwrap().1.parse().unwrap()
}

/// 8 clients submitting short jobs until the server stops answering (20 each at most);
/// the names answered.
/// Their codes are below 128: `sacct` of 22.05 prints a code of 128 or more modulo 128
/// (its database holds it whole).
fn clients(url: &str) -> Vec<std::thread::JoinHandle<Vec<String>>> {
    (0..CLIENTS)
        .map(|client| {
            let url = url.to_string();
            std::thread::spawn(move || {
                let agent = client_agent();
                let mut answered = Vec::new();
                // One every 100 ms, as users would (not thousands: each is a Slurm job).
                for k in 0..20 {
                    std::thread::sleep(Duration::from_millis(100));
                    let name = format!("client{client}-{k}-c{}", 101 + (client * 17 + k) % 27);
                    let body = job(&name, 1, expected_code(&name) as u32);
                    let url = format!("{url}/rest/jobs?api-version=2");
                    if !answered_201(&agent, &url, &basic(BOB, BOB_PASSWORD), &body) {
                        break;
                    }
                    answered.push(name);
                }
                answered
            })
        })
        .collect()
}

/// What sacct recorded of the jobs named `drover-<identity>-*` since `since`: job name ->
/// (Slurm job id, state, exit code) of each.
fn accounted(since: &str, prefix: &str) -> HashMap<String, Vec<(String, String, String)>> {
    let out = Command::new("sacct")
        .args([
            "-a",
            "-X",
            "-n",
            "-P",
            "--format=JobIDRaw,JobName,State,ExitCode",
        ])
        .arg(format!("--starttime={since}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut named: HashMap<String, Vec<(String, String, String)>> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let fields: Vec<&str> = line.split('|').collect();
        if let [id, name, state, exit] = fields[..]
            && let Some(job) = name.strip_prefix(prefix)
        {
            named.entry(job.to_string()).or_default().push((
                id.to_string(),
                state.to_string(),
                exit.to_string(),
            ));
        }
    }
    named
}

#[test]
fn a_standby_adopts_every_slurm_job_when_the_active_server_is_killed() {
    let Some(url) = ready() else { return };
    let since = String::from_utf8(
        Command::new("date")
            .arg("+%Y-%m-%dT%H:%M:%S")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let schema = format!("slurmha{}_{}", std::process::id(), roll(1_000_000));
    let separator = if url.contains('?') { '&' } else { '?' };
    let store = format!("{url}{separator}schema={schema}");
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config = dir_a.path().join("drover.toml");
    std::fs::write(
        &config,
        format!(
            "[[users]]\nname = \"admin\"\npassword_hash = \"{}\"\nadmin = true\n\n\
             [[users]]\nname = \"{BOB}\"\npassword_hash = \"{}\"\n\n\
             [resource_manager]\nkind = \"slurm\"\nslurm_node_poll_seconds = 1\n\n\
             [high_availability]\nenabled = true\n",
            hash_password(ADMIN_PASSWORD),
            hash_password(BOB_PASSWORD),
        ),
    )
    .unwrap();
    let config = config.to_string_lossy().into_owned();
    let args = ["--store", store.as_str(), "--config", config.as_str()];
    let active = serve(&dir_a.path().join("data"), &args);
    let standby = serve_standby(dir_b.path(), &args);
    assert_eq!(health(&standby.url)["ha"]["role"], "STANDBY");

    // 100 jobs, each with its own code: the first 12 run through the kill, the others
    // wait here (12 processors) and run after it.
    for k in 0..JOBS {
        let seconds = if k < LONG { 25 } else { 2 + (k % 3) as u32 };
        let (status, body) = submit(
            &active.url,
            &job(&format!("job{k}-c{}", k + 1), seconds, k as u32 + 1),
        );
        assert_eq!(status, 201, "{body}");
    }
    // Running in Slurm (Drover's RUNNING begins when sbatch answers).
    let before = wait("the first jobs run in Slurm", 120, || {
        let jobs = jobs(&active.url)?;
        let handed: Vec<String> = jobs
            .values()
            .filter(|j| j.1 == "RUNNING")
            .map(|j| j.4.clone())
            .collect();
        let running = handed
            .iter()
            .filter(|id| slurm_state(id) == "RUNNING")
            .count();
        (running >= LONG).then_some(jobs)
    });
    // Handed to Slurm: running here, with a Slurm job id.
    let handed: HashMap<String, String> = before
        .iter()
        .filter(|(_, j)| j.1 == "RUNNING" && j.4.parse::<u64>().is_ok())
        .map(|(id, j)| (id.clone(), j.4.clone()))
        .collect();
    assert!(handed.len() >= LONG, "{before:?}");

    // 8 clients submit; the active server is killed meanwhile.
    let submitting = clients(&active.url);
    std::thread::sleep(Duration::from_millis(300 + roll(700)));
    let mut active = active;
    unsafe_kill(active.child.id() as i32);
    let _ = active.child.wait();
    let killed_at = Instant::now();
    let answered: Vec<String> = submitting
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let running_at_kill = handed
        .values()
        .filter(|id| slurm_state(id) == "RUNNING")
        .count();
    wait("the standby takes over", 60, || {
        (health(&standby.url)["ha"]["role"] == "ACTIVE").then_some(())
    });
    let took_over = killed_at.elapsed();
    eprintln!("slurm failover: standby active {took_over:?} after the kill");

    // Every job handed to Slurm before the kill is the same Slurm job after it.
    let after = jobs(&standby.url).expect("the job list answers");
    for (id, slurm_id) in &handed {
        assert_eq!(&after[id].4, slurm_id, "{id} was adopted: {:?}", after[id]);
    }
    // Every job ends, with the code it exits with.
    let ended = wait("every job ends", 600, || {
        let jobs = jobs(&standby.url)?;
        jobs.values().all(|j| j.1 == "COMPLETED").then_some(jobs)
    });
    eprintln!(
        "slurm failover: every job ended {:?} after the kill",
        killed_at.elapsed()
    );
    let names: std::collections::HashSet<&String> = ended.values().map(|j| &j.0).collect();
    assert_eq!(
        ended.len(),
        JOBS + answered.len(),
        "{} answered",
        answered.len()
    );
    for name in &answered {
        assert!(names.contains(name), "answered submission {name} is there");
    }
    for (id, (name, _, code, starts, _)) in &ended {
        assert_eq!(*code, Some(expected_code(name)), "{id} ({name})");
        assert_eq!(*starts, 1, "{id} ({name}) started once");
    }
    each_one_slurm_job(&since, &ended);
    eprintln!(
        "slurm failover: {} jobs handed to Slurm before the kill ({running_at_kill} running in Slurm at it), \
         {} submissions answered by 8 clients, standby active {took_over:?} after the kill, {} jobs ended once each",
        handed.len(),
        answered.len(),
        ended.len()
    );
}

/// Each job is exactly one Slurm job (`sacct`: one job of its name since `since`), the
/// one it shows, which ended with its code.
fn each_one_slurm_job(since: &str, ended: &Jobs) {
    let some = &ended.values().next().unwrap().4;
    let prefix = wait("sacct names the jobs", 60, || {
        let named = accounted(since, "drover-");
        named
            .iter()
            .find(|(_, runs)| runs.iter().any(|r| &r.0 == some))
            .map(|(job, _)| {
                let id = ended.iter().find(|(_, j)| &j.4 == some).unwrap().0;
                format!("drover-{}", job.strip_suffix(id.as_str()).unwrap())
            })
    });
    let named = wait("sacct records every end", 60, || {
        let named = accounted(since, &prefix);
        (named.len() == ended.len()
            && named
                .values()
                .flatten()
                .all(|r| r.1 != "RUNNING" && r.1 != "PENDING"))
        .then_some(named)
    });
    for (id, (name, _, code, _, slurm_id)) in ended {
        let runs = &named[id];
        assert_eq!(runs.len(), 1, "{id} ({name}) is one Slurm job: {runs:?}");
        assert_eq!(&runs[0].0, slurm_id, "{id}");
        assert_eq!(runs[0].2, format!("{}:0", code.unwrap()), "{id} ({name})");
    }
}
