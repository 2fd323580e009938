//! The `drover` command as an operator uses it: the real binary, its output, signals.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    url: String,
    /// What it printed before serving.
    banner: Vec<String>,
    output: BufReader<std::process::ChildStdout>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `drover` with none of the configuration's variables but two: no guest image built
/// and no KVM probe at start (`first_vm` tests those, with [`bare_drover`]).
fn drover() -> Command {
    let mut command = bare_drover();
    command
        .env("DROVER_PREPARE_GUEST_IMAGE", "false")
        .env("DROVER_ACCEL", "tcg");
    command
}

/// `drover` with none of the configuration's variables.
fn bare_drover() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_drover"));
    for (variable, _) in drover::config::ENVIRONMENT {
        command.env_remove(variable);
    }
    command.env_remove("DROVER_CONFIG");
    command
}

/// Starts `drover serve` on port 0 with `args`, reading what it prints until `done`
/// says a line is the last of its banner.
fn spawn(data_dir: &Path, args: &[&str], done: fn(&str) -> bool) -> Server {
    let mut command = drover();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(args);
    start_reading(&mut command, done)
}

/// Starts `command` (a `drover serve`), reading what it prints until `done` says a
/// line is the last of its banner.
fn start_reading(command: &mut Command, done: fn(&str) -> bool) -> Server {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .expect("drover starts");
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut banner = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            output.read_line(&mut line).unwrap() > 0,
            "drover exited: {banner:?}"
        );
        banner.push(line.trim_end().to_string());
        if done(&line) {
            break;
        }
    }
    Server {
        child,
        url: String::new(),
        banner,
        output,
    }
}

/// The first address in the banner line that starts with `prefix`.
fn address_in(banner: &[String], prefix: &str) -> String {
    banner
        .iter()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("http://")))
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .trim_end_matches(';')
        .to_string()
}

/// Starts `drover serve` on port 0 with `args`, reading its banner up to the login hint.
fn serve(data_dir: &Path, args: &[&str]) -> Server {
    let mut server = spawn(data_dir, args, |line| line.contains("curl -u"));
    server.url = address_in(&server.banner, "drover listening on");
    server
}

fn get(url: &str, user: &str, password: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.get(url);
    if !user.is_empty() {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request = request.header("Authorization", format!("Basic {token}"));
    }
    let mut response = request.call().expect("the server answers");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

fn generated_password(banner: &[String]) -> String {
    banner
        .iter()
        .find_map(|l| l.split("with the password: ").nth(1))
        .unwrap_or_else(|| panic!("no generated password in {banner:?}"))
        .trim()
        .to_string()
}

#[test]
fn a_newcomer_starts_it_logs_in_with_the_printed_password_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let first = serve(dir.path(), &[]);
    let password = generated_password(&first.banner);
    assert_eq!(password.len(), 24);
    let about = format!("{}/rest/diag/about", first.url);
    let (status, body) = get(&about, "admin", &password);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"version\""), "{body}");
    assert_eq!(get(&about, "admin", "guess").0, 401);
    assert_eq!(get(&about, "", "").0, 401);
    let users = std::fs::read_to_string(dir.path().join("users.toml")).unwrap();
    assert!(
        users.contains("$argon2id$") && !users.contains(&password),
        "{users}"
    );
    drop(first);

    // Killed and started again: no new password; the first one still works.
    let second = serve(dir.path(), &[]);
    assert!(
        second.banner.iter().all(|l| !l.contains("Generated")),
        "{:?}",
        second.banner
    );
    let about = format!("{}/rest/diag/about", second.url);
    assert_eq!(get(&about, "admin", &password).0, 200);
    let health = format!("{}/rest/diag/health/summary", second.url);
    assert_eq!(get(&health, "", "").0, 200);
}

#[test]
fn sigterm_stops_it_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path(), &[]);
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut server.output, &mut rest).unwrap();
    assert!(rest.contains("stopped"), "{rest}");
    // The store was flushed: the write-ahead log is folded into the database file.
    let wal = dir.path().join("drover.db-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0);
}

#[test]
fn configured_users_hashed_by_the_cli_and_added_users_log_in() {
    let dir = tempfile::tempdir().unwrap();
    let hashed = hash_password("root-secret");
    assert!(hashed.starts_with("$argon2id$"), "{hashed}");

    let config = dir.path().join("drover.toml");
    std::fs::write(
        &config,
        format!("base_url = \"/mws\"\n\n[[users]]\nname = \"root\"\npassword_hash = \"{hashed}\"\nadmin = true\n"),
    )
    .unwrap();
    let mut add = drover()
        .args(["user", "add", "bob", "--data-dir"])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    add.stdin
        .take()
        .unwrap()
        .write_all(b"bob-secret\n")
        .unwrap();
    assert!(add.wait().unwrap().success());

    let server = serve(dir.path(), &["--config", config.to_str().unwrap()]);
    assert!(server.url.ends_with("/mws"), "{}", server.url);
    assert!(
        server.banner.iter().all(|l| !l.contains("Generated")),
        "{:?}",
        server.banner
    );
    let about = format!("{}/rest/diag/about", server.url);
    assert_eq!(get(&about, "root", "root-secret").0, 200);
    assert_eq!(get(&about, "bob", "bob-secret").0, 200);
    assert_eq!(get(&about, "bob", "root-secret").0, 401);
}

#[test]
fn a_bad_configuration_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("drover.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\nbase_url = \"no-slash\"\n",
    )
    .unwrap();
    let output = drover()
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("base_url"), "{error}");

    let output = drover()
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .env("DROVER_LISTEN", "not-an-address")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("listen"));

    // A portal client's secret must be an argon2 hash, never the secret itself.
    std::fs::write(
        &config,
        "[[oauth.clients]]\nid = \"portal\"\nsecret_hash = \"plain-secret\"\n",
    )
    .unwrap();
    let output = drover()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("secret_hash"), "{error}");

    let output = drover().arg("frobnicate").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("frobnicate") && said.contains("Usage"),
        "{said}"
    );
}

/// Basic credentials header value.
fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {token}")
}

/// A pseudo-random number below `n` (the clock's nanoseconds; good enough to vary the
/// moment of a kill).
fn roll(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    u64::from(nanos) % n
}

/// Submits version-2 jobs from `threads` clients until the server stops answering;
/// answers the custom names of the submissions that were answered with success.
fn submit_until_killed(
    url: &str,
    password: &str,
    round: usize,
    threads: usize,
    command: &str,
) -> Vec<String> {
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let url = format!("{url}/rest/jobs?api-version=2");
            let auth = basic("admin", password);
            let command = command.to_string();
            std::thread::spawn(move || {
                let agent = client_agent();
                let mut answered = Vec::new();
                for k in 0.. {
                    let name = format!("r{round}-t{thread}-{k}");
                    // Most are held (they stay); every twentieth runs a short process.
                    let body = if k % 20 == 0 {
                        format!(r#"{{"customName":"{name}","commandFile":"{command}","initialWorkingDirectory":"/tmp"}}"#)
                    } else {
                        format!(r#"{{"customName":"{name}","commandFile":"{command}","initialWorkingDirectory":"/tmp","holds":["User"]}}"#)
                    };
                    if !answered_201(&agent, &url, &auth, &body) {
                        break;
                    }
                    answered.push(name);
                }
                answered
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// Every job in its version-2 shape, as `(customName, state)`.
/// A client's agent: statuses as answers, 10 s at most a request.
fn client_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// Posts a job: whether it was answered 201 with the job; false once the server no
/// longer answers; any other answer is a failure.
fn answered_201(agent: &ureq::Agent, url: &str, auth: &str, body: &str) -> bool {
    let sent = agent
        .post(url)
        .header("Authorization", auth)
        .header("Content-Type", "application/json")
        .send(body.as_bytes());
    match sent {
        Ok(mut response) if response.status().as_u16() == 201 => response
            .body_mut()
            .read_to_string()
            .is_ok_and(|text| text.contains("\"name\"")),
        Ok(response) => panic!("submission refused: {}", response.status()),
        Err(_) => false,
    }
}

fn all_jobs(url: &str, password: &str) -> Vec<(String, String)> {
    names_and(url, password, "states.state").expect("the job list answers")
}

/// Every job in its version-2 shape, as `(customName, <field>)` (`field` a dotted path),
/// or `None` when the list does not answer 200.
fn names_and(url: &str, password: &str, field: &str) -> Option<Vec<(String, String)>> {
    let (status, body) = get(
        &format!("{url}/rest/jobs?api-version=2&fields=customName,{field}"),
        "admin",
        password,
    );
    if status != 200 {
        return None;
    }
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    let pointer = format!("/{}", field.replace('.', "/"));
    let jobs = list["results"].as_array().unwrap().iter();
    let text = |value: Option<&serde_json::Value>| {
        value
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    Some(
        jobs.map(|j| (text(j.get("customName")), text(j.pointer(&pointer))))
            .collect(),
    )
}

/// The crash test of issue #4: clients submit concurrently while the server is killed
/// with SIGKILL at a random moment, several times. After each restart every answered
/// submission is there exactly once, and no job is left in a state it cannot leave.
fn crash_rounds(store_args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let command = work.path().join("short.sh");
    std::fs::write(&command, "#!/bin/sh\nsleep 0.1\n").unwrap();
    // Room for many short jobs at once.
    let config = dir.path().join("drover.toml");
    std::fs::write(&config, "[[nodes]]\nid = \"n1\"\nprocessors = 64\n").unwrap();
    let config = config.to_string_lossy().into_owned();
    let mut store_args: Vec<&str> = store_args.to_vec();
    store_args.extend(["--config", &config]);
    let store_args = store_args.as_slice();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&command, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let command = command.to_string_lossy().into_owned();
    let first = serve(dir.path(), store_args);
    let password = generated_password(&first.banner);
    let mut server = first;
    let mut answered_total = 0;
    let mut answered: Vec<String> = Vec::new();
    // `DROVER_CRASH_ROUNDS` (scripts/crash-rounds runs 20) rounds, 4 by default.
    let rounds: usize = std::env::var("DROVER_CRASH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(4);
    for round in 0..rounds {
        let url = server.url.clone();
        let killer = {
            let pid = server.child.id() as i32;
            let delay = 300 + roll(700);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(delay));
                unsafe_kill(pid);
            })
        };
        let this_round = submit_until_killed(&url, &password, round, 8, &command);
        killer.join().unwrap();
        let _ = server.child.wait();
        answered_total += this_round.len();
        answered.extend(this_round);

        server = serve(dir.path(), store_args);
        let jobs = all_jobs(&server.url, &password);
        let mut counts = std::collections::HashMap::new();
        for (name, state) in &jobs {
            *counts.entry(name.clone()).or_insert(0) += 1;
            assert_ne!(
                state, "Starting",
                "{name} is stuck starting after a restart"
            );
        }
        for name in &answered {
            assert_eq!(
                counts.get(name),
                Some(&1),
                "answered submission {name} after round {round}"
            );
        }
        assert!(
            counts.values().all(|&n| n == 1),
            "a submission is there twice"
        );
    }
    assert!(
        answered_total > 100,
        "too few submissions to mean anything: {answered_total}"
    );
    // Every job that was not held ends (the short processes finish, are re-adopted or
    // were ended by the restarts); held ones stay held.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let jobs = all_jobs(&server.url, &password);
        let open: Vec<_> = jobs
            .iter()
            .filter(|(_, state)| {
                !["Hold", "Completed", "Vacated", "Removed"].contains(&state.as_str())
            })
            .collect();
        if open.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "jobs never ended: {open:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "crash test: {answered_total} answered submissions over {rounds} kills, all present once"
    );
}

fn unsafe_kill(pid: i32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

#[test]
fn submissions_survive_sigkill_at_random_moments_sqlite() {
    crash_rounds(&[]);
}

#[test]
fn submissions_survive_sigkill_at_random_moments_postgres() {
    let Some(url) = drover_store::test_postgres_url() else {
        eprintln!("no PostgreSQL for the test run; skipped");
        return;
    };
    let schema = format!("crash{}_{}", std::process::id(), roll(1_000_000));
    let separator = if url.contains('?') { '&' } else { '?' };
    let store = format!("{url}{separator}schema={schema}");
    crash_rounds(&["--store", &store]);
}

#[test]
fn replay_prints_the_three_policies_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("small.swf");
    // 4 processors: a 3-wide job of 100 s, a 4-wide job, a 1-wide job of 50 s that
    // EASY backfills and FCFS makes wait; a line of unknown run time is skipped.
    std::fs::write(
        &trace,
        "; MaxProcs: 4\n\
         1 0 -1 100 3 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n\
         2 1 -1 100 4 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n\
         3 2 -1 50 1 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n\
         4 3 -1 -1 1 -1 -1 -1 -1 -1 0 -1 -1 -1 0 -1 -1 -1\n",
    )
    .unwrap();
    let output = drover().arg("replay").arg(&trace).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("3 jobs (1 lines skipped"), "{text}");
    let row = |name: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row in {text}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    // policy, mean wait, mean bsld, max wait, utilization, makespan, time.
    assert_eq!(row("FCFS")[1..4], ["99", "2.65", "198"]);
    assert_eq!(row("EASY")[1..4], ["33", "1.33", "99"]);
    assert_eq!(row("EASY")[5], "200");
    assert!(text.contains("configured / EASY"), "{text}");

    let refused = drover()
        .args(["replay", "/nonexistent.swf"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("cannot read /nonexistent.swf"));
    std::fs::write(
        &trace,
        "; MaxProcs: 2\n1 0 -1 10 3 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n",
    )
    .unwrap();
    let too_wide = drover().arg("replay").arg(&trace).output().unwrap();
    assert!(String::from_utf8_lossy(&too_wide.stderr).contains("asks for 3 processors"));
}

#[test]
fn generated_traces_repeat_by_seed_and_replay_with_their_requested_times() {
    let dir = tempfile::tempdir().unwrap();
    let generate = |seed: &str| {
        let output = drover()
            .args(["generate-trace", "--jobs", "300", "--processors", "64"])
            .args(["--load", "0.9", "--seed", seed])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let trace = generate("7");
    assert_eq!(trace, generate("7"));
    assert_ne!(trace, generate("8"));
    assert!(trace.contains("; MaxProcs: 64"), "{trace}");
    let path = dir.path().join("generated.swf");
    std::fs::write(&path, &trace).unwrap();
    let replay = |extra: &[&str]| {
        let output = drover()
            .arg("replay")
            .arg(&path)
            .args(["--without-fcfs"])
            .args(extra)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let estimated = replay(&[]);
    assert!(
        estimated.contains("requested times from the trace for 300 jobs"),
        "{estimated}"
    );
    assert!(
        !estimated.lines().any(|l| l.starts_with("FCFS")),
        "{estimated}"
    );
    let perfect = replay(&["--perfect-estimates"]);
    assert!(perfect.contains("perfect estimates"), "{perfect}");
}

/// Hashes `secret` with the command operators use for configured users.
fn hash_password(secret: &str) -> String {
    let mut hash = drover()
        .arg("hash-password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    hash.stdin
        .take()
        .unwrap()
        .write_all(format!("{secret}\n").as_bytes())
        .unwrap();
    let output = hash.wait_with_output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// Starts `drover serve` as a standby of a group whose active server runs: answers it
/// with the address it serves on.
fn serve_standby(data_dir: &Path, args: &[&str]) -> Server {
    let mut server = spawn(data_dir, args, |line| line.contains("standby"));
    server.url = address_in(&server.banner, "drover: standby");
    server
}

fn health(url: &str) -> serde_json::Value {
    let (status, body) = get(&format!("{url}/rest/diag/health/summary"), "", "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Issue #30's failover test: two servers share one PostgreSQL store; the standby
/// forwards to the active one; clients submit to the active one while it is killed with
/// SIGKILL; the standby is active within 10 s and every answered submission is there once.
#[test]
fn a_standby_takes_over_within_seconds_when_the_active_server_is_killed() {
    let Some(url) = drover_store::test_postgres_url() else {
        eprintln!("no PostgreSQL for the test run; skipped");
        return;
    };
    let schema = format!("ha{}_{}", std::process::id(), roll(1_000_000));
    let separator = if url.contains('?') { '&' } else { '?' };
    let store = format!("{url}{separator}schema={schema}");
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let work = tempfile::tempdir().unwrap();
    let command = work.path().join("short.sh");
    std::fs::write(&command, "#!/bin/sh\nsleep 0.1\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&command, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let command = command.to_string_lossy().into_owned();
    let config = work.path().join("drover.toml");
    std::fs::write(
        &config,
        format!(
            "[[users]]\nname = \"admin\"\npassword_hash = \"{}\"\nadmin = true\n\n\
             [[nodes]]\nid = \"n1\"\nprocessors = 64\n\n[high_availability]\nenabled = true\n",
            hash_password("group-secret")
        ),
    )
    .unwrap();
    let config = config.to_string_lossy().into_owned();
    let args = ["--store", store.as_str(), "--config", config.as_str()];
    let password = "group-secret";

    let active = serve(dir_a.path(), &args);
    let first = health(&active.url);
    assert_eq!(first["ha"]["role"], "ACTIVE", "{first}");
    let standby = serve_standby(dir_b.path(), &args);
    let seen = health(&standby.url);
    assert_eq!(seen["ha"]["role"], "STANDBY", "{seen}");
    assert_eq!(seen["ha"]["active"], first["ha"]["server"], "{seen}");
    // The standby forwards: a read, and a submission made through it.
    let (status, body) = get(
        &format!("{}/rest/diag/about", standby.url),
        "admin",
        password,
    );
    assert_eq!(status, 200, "{body}");
    let through = submit_until_killed_once(&standby.url, password, &command);
    assert!(
        all_jobs(&active.url, password)
            .iter()
            .any(|(name, _)| *name == through),
        "the job submitted through the standby is not on the active server"
    );

    let pid = active.child.id() as i32;
    let delay = 300 + roll(700);
    let killed_at = std::sync::Arc::new(std::sync::Mutex::new(None));
    let killer = {
        let killed_at = killed_at.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(delay));
            unsafe_kill(pid);
            *killed_at.lock().unwrap() = Some(Instant::now());
        })
    };
    let answered = submit_until_killed(&active.url, password, 0, 8, &command);
    killer.join().unwrap();
    let killed_at = killed_at.lock().unwrap().unwrap();
    let took_over = loop {
        let now = health(&standby.url);
        if now["ha"]["role"] == "ACTIVE" {
            break killed_at.elapsed();
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "the standby never took over: {now}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        took_over < Duration::from_secs(10),
        "the standby took {took_over:?} to become active"
    );
    let jobs = all_jobs(&standby.url, password);
    let mut counts = std::collections::HashMap::new();
    for (name, _) in &jobs {
        *counts.entry(name.clone()).or_insert(0) += 1;
    }
    for name in answered.iter().chain([&through]) {
        assert_eq!(counts.get(name), Some(&1), "answered submission {name}");
    }
    assert!(
        counts.values().all(|&n| n == 1),
        "a submission is there twice"
    );
    assert!(
        answered.len() > 20,
        "too few submissions: {}",
        answered.len()
    );
    // The killed server, started again, is a standby of the new active one.
    drop(active);
    let again = serve_standby(dir_a.path(), &args);
    let seen = health(&again.url);
    assert_eq!(seen["ha"]["role"], "STANDBY", "{seen}");
    assert_eq!(
        seen["ha"]["active"],
        health(&standby.url)["ha"]["server"],
        "{seen}"
    );
    eprintln!(
        "failover: {} answered submissions, all present once; the standby was active {took_over:?} after the kill",
        answered.len()
    );
}

/// Submits one held version-2 job; answers its custom name.
fn submit_until_killed_once(url: &str, password: &str, command: &str) -> String {
    let name = "through-the-standby".to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let body = format!(
        r#"{{"customName":"{name}","commandFile":"{command}","initialWorkingDirectory":"/tmp","holds":["User"]}}"#
    );
    let mut response = agent
        .post(&format!("{url}/rest/jobs?api-version=2"))
        .header("Authorization", &basic("admin", password))
        .header("Content-Type", "application/json")
        .send(body.as_bytes())
        .expect("the standby answers");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    assert_eq!(status, 201, "{text}");
    name
}

/// A `drover-shepherd` beside the binary that was built from other sources (a stale one:
/// `cargo run -p drover` rebuilds only `drover`) is not used: the service says so and
/// starts jobs with itself.
#[test]
fn a_stale_shepherd_program_beside_the_binary_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("drover");
    std::fs::copy(env!("CARGO_BIN_EXE_drover"), &program).unwrap();
    let stale = dir.path().join("drover-shepherd");
    std::fs::write(&stale, "#!/bin/sh\necho from-another-build\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut child = Command::new(&program)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Without the warning the server runs on: stop it after a while, so that the read
    // ends and the assertion fails instead of waiting for ever.
    let pid = child.id() as i32;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopper = {
        let done = done.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(15);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if Instant::now() > deadline {
                    unsafe_kill(pid);
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let mut said = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while said.read_line(&mut line).unwrap() > 0 && !line.contains("shepherd") {
        line.clear();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    stopper.join().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.contains("built from another version of the shepherd"),
        "{line}"
    );
}

/// `POST url` with `headers` and a body; the status and the body answered.
fn post(url: &str, headers: &[(&str, &str)], content_type: &str, body: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.post(url).header("Content-Type", content_type);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = request.send(body.as_bytes()).expect("the server answers");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

/// A configuration file in `dir` with one OAuth portal client, `portal` / `portal-secret`.
fn portal_config(dir: &Path) -> std::path::PathBuf {
    let config = dir.join("drover.toml");
    std::fs::write(
        &config,
        format!(
            "[[oauth.clients]]\nid = \"portal\"\nsecret_hash = \"{}\"\n",
            hash_password("portal-secret")
        ),
    )
    .unwrap();
    config
}

/// Issue #33: an answered `Idempotency-Key` and an issued bearer token are in the store
/// before the answer, so a server killed with SIGKILL and started again answers a retry
/// what it answered before (one job) and takes the token.
#[test]
fn keyed_submissions_and_tokens_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let config = portal_config(dir.path());
    let data = dir.path().join("data");
    let config = config.to_str().unwrap();
    let first = serve(&data, &["--config", config]);
    let password = generated_password(&first.banner);
    let admin = basic("admin", &password);
    let job = r#"{"commandFile":"/bin/true","initialWorkingDirectory":"/tmp","holds":["User"]}"#;
    let submit = |url: &str| {
        post(
            &format!("{url}/rest/jobs?api-version=2"),
            &[("Authorization", &admin), ("Idempotency-Key", "kill-me")],
            "application/json",
            job,
        )
    };
    let answered = submit(&first.url);
    assert_eq!(answered.0, 201, "{}", answered.1);
    let form = format!("grant_type=password&username=admin&password={password}");
    let (status, token) = post(
        &format!("{}/oauth/token", first.url),
        &[("Authorization", &basic("portal", "portal-secret"))],
        "application/x-www-form-urlencoded",
        &form,
    );
    assert_eq!(status, 200, "{token}");
    let token: serde_json::Value = serde_json::from_str(&token).unwrap();
    let token = token["access_token"].as_str().unwrap().to_string();
    drop(first);

    let second = serve(&data, &["--config", config]);
    assert_eq!(submit(&second.url), answered);
    assert_eq!(all_jobs(&second.url, &password).len(), 1);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let reply = agent
        .get(format!("{}/rest/diag/about", second.url))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .unwrap();
    assert_eq!(reply.status().as_u16(), 200);
}

#[path = "binary/client.rs"]
mod client;
#[path = "binary/client_trust.rs"]
mod client_trust;
#[path = "binary/first_vm.rs"]
mod first_vm;
#[path = "binary/nothing_half_made.rs"]
mod nothing_half_made;

/// Issue #32, item 3: jobs that end around a SIGKILL of the service, while it is down,
/// and as it starts again, all end `Completed` with their own exit codes: each job's end
/// is in its status file before its process is gone (its shepherd writes it, then reaps
/// the job), and a restarted service reads it there or watches the job to its end.
#[test]
fn exit_codes_survive_a_sigkill_while_short_jobs_end() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = dir.path().join("drover.toml");
    std::fs::write(&config, "[[nodes]]\nid = \"n1\"\nprocessors = 64\n").unwrap();
    let config = config.to_string_lossy().into_owned();
    let args = ["--config", config.as_str()];
    let server = serve(dir.path(), &args);
    let password = generated_password(&server.banner);
    let auth = basic("admin", &password);
    // 60 jobs, each with its own code, ending spread over 1.5 s.
    let jobs = 60;
    for k in 0..jobs {
        let body = serde_json::json!({
            "customName": format!("ends-{k}"),
            "commandFile": "/bin/sh",
            "commandLineArguments":
                ["-c", format!("sleep {}.{:03}; exit {}", k * 25 / 1000, k * 25 % 1000, k + 1)],
            "initialWorkingDirectory": "/tmp",
            "standardOutputFilePath": "/dev/null",
            "standardErrorFilePath": "/dev/null",
        });
        let (status, answer) = post(
            &format!("{}/rest/jobs?api-version=2", server.url),
            &[("Authorization", &auth)],
            "application/json",
            &body.to_string(),
        );
        assert_eq!(status, 201, "{answer}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while all_jobs(&server.url, &password)
        .iter()
        .any(|(_, state)| state != "Running" && state != "Completed")
    {
        assert!(Instant::now() < deadline, "the jobs never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut server = server;
    std::thread::sleep(Duration::from_millis(300));
    unsafe_kill(server.child.id() as i32);
    let _ = server.child.wait();
    std::thread::sleep(Duration::from_millis(600));
    let server = serve(dir.path(), &args);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let states = all_jobs(&server.url, &password);
        if states.iter().all(|(_, state)| state != "Running") {
            break;
        }
        assert!(Instant::now() < deadline, "jobs never ended: {states:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let states = all_jobs(&server.url, &password);
    assert_eq!(states.len(), jobs);
    for (name, state) in &states {
        assert_eq!(state, "Completed", "{name}");
    }
    let (status, body) = get(
        &format!(
            "{}/rest/jobs?api-version=2&fields=customName,completionCode",
            server.url
        ),
        "admin",
        &password,
    );
    assert_eq!(status, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    for job in list["results"].as_array().unwrap() {
        let name = job["customName"].as_str().unwrap();
        let k: i64 = name.trim_start_matches("ends-").parse().unwrap();
        assert_eq!(job["completionCode"], k + 1, "{job}");
    }
}

#[path = "binary/slurm_failover.rs"]
mod slurm_failover;
