//! Issue #32 item 2: nothing half-made. While the data directory's file system fills up
//! or turns read-only under concurrent submitters, every answer agrees with what is
//! stored: each 201's job exists once, under the id answered; a submission answered 503
//! "not made" is never seen (in a list, by id, after recovery, after a restart); no id is
//! reused. A 503 that says the outcome is unknown (a commit whose sync failed, which the
//! store could not settle in time) promises neither.
//!
//! Both tests mount a file system, so they need root (or CAP_SYS_ADMIN); without it they
//! say so and pass, unless `DROVER_REQUIRE_MOUNTS` is set (scripts/test sets it as root).

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Server, basic, names_and, post, serve};

/// A file system mounted for one test, unmounted (and its loop device detached) when
/// dropped, even when the test fails.
struct Mounted {
    dir: PathBuf,
    loop_device: Option<String>,
}

impl Mounted {
    /// A tmpfs of `size` at `dir`; an error with the reason when this process may not mount.
    fn tmpfs(dir: &Path, size: &str) -> Result<Mounted, String> {
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir))?;
        Ok(Mounted {
            dir: dir.to_path_buf(),
            loop_device: None,
        })
    }

    /// An ext4 file system made in `image` (of `size`), on a loop device, at `dir`, with
    /// `errors=remount-ro` as a site would mount a data disk.
    fn ext4(image: &Path, size: &str, dir: &Path) -> Result<Mounted, String> {
        run(Command::new("truncate").args(["-s", size]).arg(image))?;
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(image))?;
        let device = run(Command::new("losetup").args(["-f", "--show"]).arg(image))?;
        let mounted = Mounted {
            dir: dir.to_path_buf(),
            loop_device: Some(device.clone()),
        };
        run(Command::new("mount")
            .args(["-t", "ext4", "-o", "errors=remount-ro", &device])
            .arg(dir))?;
        Ok(mounted)
    }

    /// Turns the file system read-only under whoever has files open on it, as ext4 does
    /// itself after an I/O error (`abort` is its switch for exactly that). A plain
    /// `remount,ro` is refused while files are open for writing.
    fn abort_to_read_only(&self) {
        run(Command::new("mount")
            .args(["-o", "remount,abort"])
            .arg(&self.dir))
        .expect("ext4 takes the abort option");
    }

    /// Unmounts, checks and repairs the file system (as after a real abort), and mounts
    /// it again writable.
    fn repair_and_remount(&self) {
        let device = self
            .loop_device
            .as_deref()
            .expect("an ext4 on a loop device");
        run(Command::new("umount").arg(&self.dir)).expect("unmounts");
        // e2fsck exits 1 when it corrected something, which is what is expected here.
        let status = Command::new("e2fsck")
            .args(["-f", "-y", device])
            .output()
            .expect("e2fsck runs");
        assert!(
            matches!(status.status.code(), Some(0 | 1)),
            "e2fsck: {}",
            String::from_utf8_lossy(&status.stdout)
        );
        run(Command::new("mount")
            .args(["-t", "ext4", "-o", "errors=remount-ro", device])
            .arg(&self.dir))
        .expect("mounts again");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(&self.dir).status();
        if !unmounted.is_ok_and(|s| s.success()) {
            // Something still holds it open: detach it so that nothing stays mounted.
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        if let Some(device) = &self.loop_device {
            let _ = Command::new("losetup").args(["-d", device]).status();
        }
    }
}

/// A 64 MiB ext4 mounted at `<dir>/disk` (see [`Mounted::ext4`]), and its mount
/// point; `None` (the test skipped, see [`skip`]) where this process may not mount.
fn small_ext4(dir: &Path) -> Option<(Mounted, PathBuf)> {
    let mount_point = dir.join("disk");
    std::fs::create_dir(&mount_point).unwrap();
    match Mounted::ext4(&dir.join("disk.img"), "64M", &mount_point) {
        Ok(mounted) => Some((mounted, mount_point)),
        Err(why) => {
            skip(&format!("cannot mount an ext4 on a loop device: {why}"));
            None
        }
    }
}

/// Says why a test that needs to mount did not run; fails it instead when mounts are
/// required.
fn skip(why: &str) {
    assert!(
        std::env::var_os("DROVER_REQUIRE_MOUNTS").is_none(),
        "DROVER_REQUIRE_MOUNTS is set but {why}"
    );
    eprintln!("skipped (needs root or CAP_SYS_ADMIN): {why}");
}

/// Runs a command, answering its trimmed output, or an error naming what it printed.
fn run(command: &mut Command) -> Result<String, String> {
    let output = command
        .output()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Fills the file system of `path` with a file until it refuses more.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    let _ = file.sync_all();
}

/// Every job of the list as `(customName, id)`.
fn names_and_ids(url: &str, password: &str) -> Option<Vec<(String, String)>> {
    names_and(url, password, "name")
}

fn agent(timeout: Option<Duration>) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(timeout)
        .build()
        .into()
}

/// Four submitters of held jobs, a list reader and a prober asking by id for the numbers
/// just past the highest answered, against one server: every answer and every
/// `(customName, id)` any read showed.
struct SubmissionWatch {
    stop: Arc<AtomicBool>,
    answers: Arc<Mutex<HashMap<String, Answer>>>,
    seen: Arc<Mutex<HashSet<(String, String)>>>,
    threads: Vec<JoinHandle<()>>,
}

/// What a submission was answered.
#[derive(Clone, PartialEq)]
enum Answer {
    /// 201, with the id, received at that instant.
    Made(String, Instant),
    /// 503: the change was not made.
    Refused,
    /// 503: whether the change was made is unknown.
    Unknown,
}

/// What a watch recorded, once stopped.
struct Outcome {
    /// customName -> id, for every 201.
    made: HashMap<String, String>,
    /// customName -> when its 201 was received.
    made_at: HashMap<String, Instant>,
    /// The customNames answered 503 "not made".
    refused: HashSet<String>,
    /// The customNames answered 503 "outcome unknown": may be stored, or not.
    unknown: HashSet<String>,
    seen: Vec<(String, String)>,
}

impl SubmissionWatch {
    fn start(url: &str, password: &str) -> SubmissionWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(HashMap::new()));
        let seen = Arc::new(Mutex::new(HashSet::new()));
        // The highest job number answered yet, and the ids' prefix (`<name>.`).
        let highest = Arc::new(AtomicU64::new(0));
        let prefix = Arc::new(Mutex::new(String::new()));
        let mut threads = Vec::new();

        let (list_url, list_password, list_stop, list_seen) = (
            url.to_string(),
            password.to_string(),
            stop.clone(),
            seen.clone(),
        );
        threads.push(std::thread::spawn(move || {
            while !list_stop.load(SeqCst) {
                if let Some(listed) = names_and_ids(&list_url, &list_password) {
                    list_seen.lock().unwrap().extend(listed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }));

        // A job not yet durable, or refused, must answer 404 by id.
        let (probe_url, auth, probe_stop, probe_seen) = (
            url.to_string(),
            basic("admin", password),
            stop.clone(),
            seen.clone(),
        );
        let (probe_highest, probe_prefix) = (highest.clone(), prefix.clone());
        threads.push(std::thread::spawn(move || {
            let agent = agent(None);
            while !probe_stop.load(SeqCst) {
                let prefix = probe_prefix.lock().unwrap().clone();
                if prefix.is_empty() {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                let from = probe_highest.load(SeqCst) + 1;
                for n in from..from + 4 {
                    let id = format!("{prefix}{n}");
                    let mut response = agent
                        .get(format!("{probe_url}/rest/jobs/{id}?api-version=2"))
                        .header("Authorization", &auth)
                        .call()
                        .expect("the server answers");
                    if response.status().as_u16() == 200 {
                        let text = response.body_mut().read_to_string().unwrap();
                        let job: serde_json::Value = serde_json::from_str(&text).unwrap();
                        let job = job.get("results").and_then(|r| r.get(0)).unwrap_or(&job);
                        let name = job["customName"].as_str().unwrap_or_default();
                        probe_seen.lock().unwrap().insert((name.to_string(), id));
                    }
                }
            }
        }));

        for thread in 0..4 {
            let submit_url = format!("{url}/rest/jobs?api-version=2");
            let (auth, stop, answers) = (basic("admin", password), stop.clone(), answers.clone());
            let (highest, prefix) = (highest.clone(), prefix.clone());
            threads.push(std::thread::spawn(move || {
                let agent = agent(Some(Duration::from_secs(20)));
                for k in 0.. {
                    if stop.load(SeqCst) {
                        break;
                    }
                    let name = format!("t{thread}-{k}");
                    let body = format!(
                        r#"{{"customName":"{name}","commandFile":"/bin/true","initialWorkingDirectory":"/tmp","holds":["User"]}}"#
                    );
                    let mut response = agent
                        .post(&submit_url)
                        .header("Authorization", &auth)
                        .header("Content-Type", "application/json")
                        .send(body.as_bytes())
                        .expect("the server answers");
                    let status = response.status().as_u16();
                    let text = response.body_mut().read_to_string().unwrap();
                    let answer = match status {
                        201 => {
                            let made: serde_json::Value = serde_json::from_str(&text).unwrap();
                            let id = made["name"].as_str().unwrap().to_string();
                            let (name, number) = id.rsplit_once('.').unwrap();
                            *prefix.lock().unwrap() = format!("{name}.");
                            highest.fetch_max(number.parse().unwrap(), SeqCst);
                            Answer::Made(id, Instant::now())
                        }
                        503 if text.contains("outcome of the change is unknown") => {
                            Answer::Unknown
                        }
                        503 => {
                            assert!(text.contains("\"messages\""), "{text}");
                            Answer::Refused
                        }
                        other => panic!("a submission answered {other}: {text}"),
                    };
                    answers.lock().unwrap().insert(name, answer);
                    if status == 503 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }));
        }
        SubmissionWatch {
            stop,
            answers,
            seen,
            threads,
        }
    }

    fn refused(&self) -> usize {
        let answers = self.answers.lock().unwrap();
        answers.values().filter(|a| **a == Answer::Refused).count()
    }

    /// Waits (30 s at most) for 20 more refusals, and fails unless there was at least one.
    /// In about 1 run in 3 the first commits after the abort fail in doubt (their sync
    /// failed), and their answers are held for the journal's 10 s `HOLD_IN_DOUBT`
    /// before any is told anything (with a 3 s hold those runs took 3 s longer, not 10):
    /// a 10 s wait raced that hold, and lost once in CI.
    fn wait_for_refusals(&self, what: &str) {
        let before = self.refused();
        let until = Instant::now() + Duration::from_secs(30);
        while self.refused() < before + 20 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            self.refused() > before,
            "no submission was refused while {what}"
        );
    }

    fn finish(self) -> Outcome {
        self.stop.store(true, SeqCst);
        for thread in self.threads {
            thread.join().unwrap();
        }
        let answers = self.answers.lock().unwrap();
        let made: HashMap<String, String> = answers
            .iter()
            .filter_map(|(name, answer)| match answer {
                Answer::Made(id, _) => Some((name.clone(), id.clone())),
                _ => None,
            })
            .collect();
        let named = |which: Answer| -> HashSet<String> {
            answers
                .iter()
                .filter(|(_, answer)| **answer == which)
                .map(|(name, _)| name.clone())
                .collect()
        };
        let (refused, unknown) = (named(Answer::Refused), named(Answer::Unknown));
        eprintln!(
            "{} submissions answered 201, {} answered 503 not made, {} 503 outcome unknown",
            made.len(),
            refused.len(),
            unknown.len()
        );
        let ids: HashSet<&String> = made.values().collect();
        assert_eq!(
            ids.len(),
            made.len(),
            "an id was answered for two submissions"
        );
        let made_at = answers
            .iter()
            .filter_map(|(name, answer)| match answer {
                Answer::Made(_, at) => Some((name.clone(), *at)),
                _ => None,
            })
            .collect();
        let outcome = Outcome {
            made,
            made_at,
            refused,
            unknown,
            seen: self.seen.lock().unwrap().iter().cloned().collect(),
        };
        outcome.check(&outcome.seen, "while submitting");
        outcome
    }
}

impl Outcome {
    /// No job answered 503 is in `listed`, and no id names two jobs.
    fn check(&self, listed: &[(String, String)], when: &str) {
        let mut by_id = HashMap::new();
        for (name, id) in listed {
            assert!(
                !self.refused.contains(name),
                "{when}: {name} was answered 503 but is listed as {id}"
            );
            if let Some(other) = by_id.insert(id.clone(), name.clone()) {
                panic!("{when}: the id {id} names {other} and {name}");
            }
        }
    }

    /// `listed` is exactly the jobs answered 201, under their ids (and any of those whose
    /// outcome was unknown).
    fn expect_exactly_made(&self, listed: &[(String, String)], when: &str) {
        self.check(listed, when);
        let listed: HashMap<String, String> = listed
            .iter()
            .filter(|(name, _)| !self.unknown.contains(name))
            .cloned()
            .collect();
        assert_eq!(
            listed, self.made,
            "{when}: the list is not what was answered 201"
        );
    }

    /// As [`Outcome::expect_exactly_made`], except that a job answered 201 at or after
    /// `from` may be missing (never under another id). ext4's abort can lose the last
    /// transaction it had committed: a file's appends fsynced while `mount -o
    /// remount,abort` ran were missing after e2fsck in 2 of 16 tries (a Python loop of
    /// append and fsync), never one fsynced before it began.
    fn expect_made_unless_answered_from(
        &self,
        listed: &[(String, String)],
        from: Instant,
        when: &str,
    ) {
        self.check(listed, when);
        let listed: HashMap<String, String> = listed.iter().cloned().collect();
        let mut racing = 0;
        for (name, id) in &self.made {
            match listed.get(name) {
                Some(listed_id) => {
                    assert_eq!(listed_id, id, "{when}: {name} is listed under another id")
                }
                None if self.made_at[name] >= from => racing += 1,
                None => panic!(
                    "{when}: {name} was answered 201 as {id} before the abort but is not listed"
                ),
            }
        }
        for (name, id) in &listed {
            assert!(
                self.made.contains_key(name) || self.unknown.contains(name),
                "{when}: {name} is listed as {id} but was not answered 201"
            );
        }
        eprintln!("{when}: {racing} jobs answered 201 while the abort ran are missing");
    }

    /// The list of `server` once it has as many jobs as were made (20 s at most).
    fn wait_for_list(&self, server: &Server, password: &str) -> Vec<(String, String)> {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            match names_and_ids(&server.url, password) {
                Some(listed) if listed.len() == self.made.len() || Instant::now() > until => {
                    return listed;
                }
                _ if Instant::now() > until => return Vec::new(),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// A new submission to `server` gets a number above every number listed, and every
    /// number answered before (before `lost_from`, if given: see
    /// [`Outcome::expect_made_unless_answered_from`]).
    fn expect_new_number_above_all(
        &self,
        server: &Server,
        password: &str,
        lost_from: Option<Instant>,
    ) {
        let listed = names_and_ids(&server.url, password).unwrap();
        let (status, body) = post(
            &format!("{}/rest/jobs?api-version=2", server.url),
            &[("Authorization", &basic("admin", password))],
            "application/json",
            r#"{"commandFile":"/bin/true","initialWorkingDirectory":"/tmp","holds":["User"]}"#,
        );
        assert_eq!(status, 201, "{body}");
        let number = |id: &str| id.rsplit_once('.').unwrap().1.parse::<u64>().unwrap();
        let new: serde_json::Value = serde_json::from_str(&body).unwrap();
        let new = number(new["name"].as_str().unwrap());
        let answered = self
            .made
            .iter()
            .filter(|(name, _)| lost_from.is_none_or(|from| self.made_at[*name] < from))
            .map(|(_, id)| id);
        let highest = (answered.chain(listed.iter().map(|(_, id)| id)))
            .map(|id| number(id))
            .max()
            .unwrap();
        assert!(new > highest, "number {new}, {highest} answered before");
    }
}

/// The password `serve` printed for the generated admin.
fn password_of(server: &Server) -> String {
    super::generated_password(&server.banner)
}

/// The data directory's file system fills up and is freed, twice: the service refuses
/// with 503 while full, recovers by itself, and lists exactly what it answered 201, then
/// and after a restart.
#[test]
fn a_full_data_directory_shows_nothing_answered_503_and_reuses_no_id() {
    let dir = tempfile::tempdir().unwrap();
    let mount_point = dir.path().join("small");
    std::fs::create_dir(&mount_point).unwrap();
    // Room for the data once the filler is gone: at 24m the store of ~1,100 jobs, with a
    // WAL grown while checkpoints failed, left too little, and the last submission after
    // the restart was (rightly) refused as the disk being full, 1 run in 12.
    let mounted = match Mounted::tmpfs(&mount_point, "64m") {
        Ok(mounted) => mounted,
        Err(why) => return skip(&format!("cannot mount a tmpfs: {why}")),
    };
    let data = mount_point.join("data");
    let filler = mount_point.join("filler");
    let mut server = serve(&data, &[]);
    let password = password_of(&server);

    let watch = SubmissionWatch::start(&server.url, &password);
    std::thread::sleep(Duration::from_millis(500));
    fill(&filler);
    watch.wait_for_refusals("the disk was full");
    std::fs::remove_file(&filler).unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    // Full again, and freed again: the service goes through it more than once.
    fill(&filler);
    watch.wait_for_refusals("the disk was full again");
    std::fs::remove_file(&filler).unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let outcome = watch.finish();

    // The service recovers by itself: lists answer, and list exactly what was made.
    let recovered = outcome.wait_for_list(&server, &password);
    outcome.expect_exactly_made(&recovered, "after recovering");
    drop(server);

    server = serve(&data, &[]);
    let after_restart = names_and_ids(&server.url, &password).unwrap();
    outcome.expect_exactly_made(&after_restart, "after a restart");
    outcome.expect_new_number_above_all(&server, &password, None);
    drop(server);
    drop(mounted);
}

/// The data directory's file system turns read-only under load (ext4 after an I/O
/// error): the service keeps running and refuses changes with 503, shows none of them,
/// and once the disk is repaired and the service restarted it lists exactly what it
/// answered 201 and reuses no number.
///
/// It found a real fault (CI, 2026-11-27: "t1-40 was answered 503 but is listed as
/// Drover.154"): when the file system turns read-only during a commit, SQLite's fsync
/// fails, but the commit's frames may already be on disk, and WAL recovery took them
/// after the repair. Such a commit is now in doubt: its answers wait until a later
/// commit overwrites the frames ("not made"), or say after 10 s that the outcome is
/// unknown.
///
/// The file system itself may lose the last changes it had made durable while the abort
/// ran (see [`Outcome::expect_made_unless_answered_from`]): those 201s may be missing.
#[test]
fn a_read_only_data_directory_shows_nothing_answered_503_and_reuses_no_id() {
    let dir = tempfile::tempdir().unwrap();
    let Some((mounted, mount_point)) = small_ext4(dir.path()) else {
        return;
    };
    let data = mount_point.join("data");
    let mut server = serve(&data, &[]);
    let password = password_of(&server);

    let watch = SubmissionWatch::start(&server.url, &password);
    std::thread::sleep(Duration::from_millis(500));
    let abort_began = Instant::now();
    mounted.abort_to_read_only();
    watch.wait_for_refusals("the file system was read-only");
    std::thread::sleep(Duration::from_millis(1000));
    let outcome = watch.finish();
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server exited on a read-only file system"
    );
    // Still read-only: whatever a list shows now is no refused job.
    if let Some(listed) = names_and_ids(&server.url, &password) {
        outcome.check(&listed, "while read-only");
    }
    drop(server);

    mounted.repair_and_remount();
    server = serve(&data, &[]);
    let after_restart = names_and_ids(&server.url, &password).unwrap();
    outcome.expect_made_unless_answered_from(
        &after_restart,
        abort_began,
        "after the repair and a restart",
    );
    outcome.expect_new_number_above_all(&server, &password, Some(abort_began));
    drop(server);
    drop(mounted);
}

/// Issue #59 item 4: a commit that fails leaves balances as they were. A held job of an
/// account with funds is released while the data directory's file system is read-only:
/// its start, and the lien on its account, cannot be made durable, so the release is
/// refused, the job does not run, and the account holds nothing, not the lien the
/// engine took in memory before the commit failed.
#[test]
fn a_failed_commit_leaves_balances_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let Some((mounted, mount_point)) = small_ext4(dir.path()) else {
        return;
    };
    let config = dir.path().join("drover.toml");
    std::fs::write(
        &config,
        "[accounting]\nenabled = true\n\
         [[accounting.accounts]]\nid = \"physics\"\nusers = [{ id = \"admin\" }]\n\
         [[accounting.allocations]]\naccount = \"physics\"\namount = \"1000\"\n\
         [accounting.rates]\nprocessors = \"0.01\"\n",
    )
    .unwrap();
    let server = serve(
        &mount_point.join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let auth = super::basic("admin", &password_of(&server));
    let agent = agent(Some(Duration::from_secs(60)));
    let call = |method: &str, path: &str, body: Option<&str>| {
        let url = format!("{}{path}", server.url);
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .body(body.unwrap_or("").to_string())
            .unwrap();
        let mut response = agent.run(request).expect("the server answers");
        let status = response.status().as_u16();
        (
            status,
            response.body_mut().read_to_string().unwrap_or_default(),
        )
    };
    let job = r#"{"commandFile": "/usr/bin/true", "duration": 600, "holds": ["User"],
                  "credentials": {"account": "physics"}}"#;
    let (status, body) = call("POST", "/rest/jobs?api-version=2", Some(job));
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["name"]
        .as_str()
        .unwrap()
        .to_string();
    let balance = || call("GET", "/rest/accounting/accounts/physics/balance", None);
    let before = balance();
    assert_eq!(before.0, 200, "{}", before.1);

    mounted.abort_to_read_only();
    let (status, body) = call("PUT", &format!("/rest/jobs/{id}/unhold"), None);
    assert_eq!(status, 503, "the release cannot be durable: {body}");
    // The reload after the failure gives the lien back; waited for, not slept on.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut after = balance();
    while after != before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        after = balance();
    }
    assert_eq!(
        after, before,
        "the lien of a start that was never durable is held"
    );
    let (_, shown) = call("GET", &format!("/rest/jobs/{id}?api-version=2"), None);
    assert!(!shown.contains("\"Running\""), "{shown}");
    drop(server);
    drop(mounted);
}
