//! The Slurm resource manager against a real Slurm (`scripts/services/slurm.sh start`),
//! as root, jobs run as `drover-bob` (Slurm knows the user: the nodes are this host). Runs only with `DROVER_TEST_SLURM=1`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_sched::job::{Allocation, ProcessRecord};
use drover_sched::rm::slurm::{self, SlurmConfig, SlurmResourceManager};
use drover_sched::rm::{JobSignal, Launch, ResourceManager, RmEvent, RmNotify};
use drover_sched::sysuser::SystemUser;

const USER: &str = "drover-bob";

fn enabled() -> bool {
    if std::env::var("DROVER_TEST_SLURM").as_deref() == Ok("1") {
        return true;
    }
    println!("skipped: set DROVER_TEST_SLURM=1 with Slurm up (scripts/services/slurm.sh start)");
    false
}

fn notify() -> (RmNotify, Receiver<RmEvent>) {
    let (sender, receiver) = channel();
    let sender = Mutex::new(sender);
    let notify: RmNotify = Arc::new(move |event| {
        let _ = sender.lock().unwrap().send(event);
    });
    (notify, receiver)
}

fn launch(job_id: &str, dir: &Path, node: &str, command: &str, args: &[&str]) -> Launch {
    let user = SystemUser::lookup(USER).expect("the user drover-bob");
    Launch {
        job_id: job_id.into(),
        command_file: command.into(),
        arguments: args.iter().map(|a| a.to_string()).collect(),
        working_directory: dir.into(),
        environment: vec![
            ("HOME".into(), user.home.clone()),
            ("USER".into(), user.name.clone()),
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("DROVER_JOB_ID".into(), job_id.into()),
        ],
        stdout: dir.join(format!("{job_id}.out")),
        stderr: dir.join(format!("{job_id}.err")),
        stdin: None,
        user,
        gid: None,
        guest: None,
        output_names: (format!("{job_id}.o"), format!("{job_id}.e")),
        placement: vec![Allocation {
            node: node.into(),
            tasks: 1,
        }],
        processors_per_task: 1,
        memory_per_task: None,
        wall_seconds: Some(600),
    }
}

fn ended(events: &Receiver<RmEvent>, job_id: &str, pid: i32) -> drover_sched::rm::Exit {
    loop {
        match events.recv_timeout(Duration::from_secs(60)) {
            Ok(RmEvent::Exited {
                job_id: id,
                pid: p,
                exit,
            }) if id == job_id => {
                assert_eq!(p, pid);
                return exit;
            }
            Ok(_) => continue,
            Err(e) => panic!("no end of {job_id}: {e}"),
        }
    }
}

/// A directory the job's user writes its output into.
fn job_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("drover-slurm-test")
        .tempdir_in("/tmp")
        .unwrap();
    let user = SystemUser::lookup(USER).unwrap();
    std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().to_path_buf();
    (dir, path)
}

fn config(state: &Path) -> SlurmConfig {
    let mut config = SlurmConfig::new(state.to_path_buf());
    config.command_timeout = Duration::from_secs(20);
    config
}

/// The tests take turns: one drains a node the other uses.
static SLURM: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    SLURM.lock().unwrap_or_else(|e| e.into_inner())
}

/// What each test starts from: its turn, a state folder, a job folder the job user
/// owns (and its path), and a tag that makes its job names its own.
type Setup = (
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    tempfile::TempDir,
    PathBuf,
    u32,
);

/// `None` where no Slurm cluster is configured for the tests.
fn setup() -> Option<Setup> {
    if !enabled() {
        return None;
    }
    let turn = turn();
    let (dir, path) = job_dir();
    Some((
        turn,
        tempfile::tempdir().unwrap(),
        dir,
        path,
        std::process::id(),
    ))
}

#[test]
fn jobs_run_end_are_suspended_cancelled_and_adopted() {
    let Some((_turn, state, dir, path, tag)) = setup() else {
        return;
    };

    let nodes = slurm::slurm_nodes(&config(state.path())).expect("sinfo --json");
    assert!(nodes.problems.is_empty(), "{:?}", nodes.problems);
    let names: Vec<&str> = nodes.items.iter().map(|n| n.config.id.as_str()).collect();
    assert!(
        names.contains(&"node2") && names.contains(&"node3"),
        "{names:?}"
    );
    assert!(nodes.items.iter().all(|n| n.config.processors > 0));

    let (events, received) = notify();
    let rm = SlurmResourceManager::new(config(state.path()), events).unwrap();

    // A job that ends by itself, with 0, on the node chosen.
    let quick = format!("quick.{tag}");
    let record = rm
        .start(launch(&quick, &path, "node2", "/bin/true", &[]))
        .expect("sbatch");
    let slurm_id = slurm::slurm_id_of(&record).expect("a Slurm job id");
    assert_eq!(record.rm_job_id, Some(slurm_id.to_string()));
    let exit = ended(&received, &quick, record.pid);
    assert_eq!(exit.code, Some(0), "{exit:?}");
    let seen = rm.config().jobs().unwrap();
    let job = seen.items.iter().find(|j| j.job_id == slurm_id).unwrap();
    assert_eq!(job.nodes, "node2");
    assert_eq!(job.user_name.as_deref(), Some(USER));
    assert_eq!(job.name, format!("drover-{quick}"));
    // ...which a restarted service reads back.
    assert_eq!(rm.recorded_exit(&record).map(|e| e.code), Some(Some(0)));

    // Output comes back, written as the user, arguments as they were.
    let echo = format!("echo.{tag}");
    let record = rm
        .start(launch(
            &echo,
            &path,
            "node1",
            "/bin/echo",
            &["a  b", "$USER"],
        ))
        .unwrap();
    assert_eq!(ended(&received, &echo, record.pid).code, Some(0));
    let out = path.join(format!("{echo}.out"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "a  b $USER\n");
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&out).unwrap());
    assert_eq!(owner, SystemUser::lookup(USER).unwrap().uid);

    // A long job, adopted by a new manager (a restart), then cancelled.
    let long = format!("long.{tag}");
    let record: ProcessRecord = rm
        .start(launch(&long, &path, "node3", "/bin/sleep", &["30"]))
        .unwrap();
    let slurm_id = slurm::slurm_id_of(&record).unwrap();
    wait_until(|| {
        rm.config()
            .jobs()
            .unwrap()
            .items
            .iter()
            .any(|j| j.job_id == slurm_id && j.state == "RUNNING" && j.nodes == "node3")
    });
    drop(rm);
    let (events, received) = notify();
    let rm = SlurmResourceManager::new(config(state.path()), events).unwrap();
    assert!(rm.adopt(&long, &record), "adopted after a restart");
    assert!(!rm.adopt("another.1", &record), "not another job's");
    let slurm_state = |rm: &SlurmResourceManager| {
        let jobs = rm.config().jobs().unwrap();
        let job = jobs.items.iter().find(|j| j.job_id == slurm_id).unwrap();
        job.state.clone()
    };
    rm.signal(&record, JobSignal::Suspend).unwrap();
    assert_eq!(slurm_state(&rm), "SUSPENDED");
    rm.signal(&record, JobSignal::Resume).unwrap();
    assert_eq!(slurm_state(&rm), "RUNNING");
    rm.signal(&record, JobSignal::Terminate { grace_seconds: 2 })
        .unwrap();
    let exit = ended(&received, &long, record.pid);
    assert!(exit.code.is_some_and(|c| c != 0), "{exit:?}");

    // A start that was never recorded is cancelled by `abandon`.
    let orphan = format!("orphan.{tag}");
    let record = rm
        .start(launch(&orphan, &path, "node1", "/bin/sleep", &["30"]))
        .unwrap();
    let slurm_id = slurm::slurm_id_of(&record).unwrap();
    let (quiet, _ignored) = notify();
    let fresh = SlurmResourceManager::new(config(state.path()), quiet).unwrap();
    fresh.abandon(&orphan);
    wait_until(|| {
        fresh
            .config()
            .jobs()
            .unwrap()
            .items
            .iter()
            .any(|j| j.job_id == slurm_id && j.state == "CANCELLED")
    });
    drop(dir);
}

fn wait_until(mut condition: impl FnMut() -> bool) {
    for _ in 0..300 {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("condition not met within 60 s");
}

fn command(program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Resumes node2 when dropped.
struct Resume;

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = std::process::Command::new("scontrol")
            .args(["update", "nodename=node2", "state=resume"])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The next event that `pick` accepts (60 s at most).
fn next_event<T>(events: &Receiver<RmEvent>, mut pick: impl FnMut(&RmEvent) -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let event = events.recv_timeout(left).expect("the event within 60 s");
        if let Some(found) = pick(&event) {
            return found;
        }
    }
}

#[test]
fn node_states_and_jobs_submitted_directly_are_reported() {
    let Some((_turn, state, dir, path, tag)) = setup() else {
        return;
    };
    let mut config = config(state.path());
    config.node_poll = Duration::from_secs(1);
    let (events, received) = notify();
    let rm = SlurmResourceManager::new(config, events).unwrap();

    // A job of ours is never reported as submitted directly; one by hand is, as its
    // user's, on its node.
    let ours = format!("ours.{tag}");
    let record = rm
        .start(launch(&ours, &path, "node1", "/bin/sleep", &["60"]))
        .unwrap();
    let our_id = slurm::slurm_id_of(&record).unwrap().to_string();
    let by_hand = command(
        "runuser",
        &[
            "-u",
            USER,
            "--",
            "sbatch",
            "--parsable",
            "--chdir=/tmp",
            "--output=/dev/null",
            "--nodelist=node3",
            "--job-name=by hand | odd\nname",
            "--wrap=sleep 60",
        ],
    );
    let detected = next_event(&received, |event| match event {
        RmEvent::Detected(jobs) => {
            assert!(
                jobs.iter()
                    .all(|j| j.process.rm_job_id.as_deref() != Some(our_id.as_str())),
                "ours reported: {jobs:?}"
            );
            jobs.iter()
                .find(|j| j.process.rm_job_id.as_deref() == Some(by_hand.as_str()))
                .cloned()
        }
        _ => None,
    });
    assert_eq!(detected.user, USER);
    assert_eq!(detected.name, "by hand | odd\nname");
    assert_eq!(detected.placement.len(), 1);
    assert_eq!(detected.placement[0].node, "node3");
    assert_eq!(detected.placement[0].tasks, 1);
    assert!(!detected.suspended);
    assert!(detected.start.is_some());

    // Adopted only as its own user's; then watched, and its end reported.
    assert!(!rm.adopt_detected("direct.1", "root", &detected.process, false));
    assert!(rm.adopt_detected("direct.1", USER, &detected.process, false));
    command("scancel", &[&by_hand]);
    let exit = ended(&received, "direct.1", detected.process.pid);
    assert!(exit.code.is_some_and(|c| c != 0), "{exit:?}");

    // Drained in Slurm: reported Drained, with the reason; resumed: usable.
    let _resume = Resume;
    command(
        "scontrol",
        &[
            "update",
            "nodename=node2",
            "state=drain",
            "reason=drover rm test",
        ],
    );
    let node2 = |event: &RmEvent| match event {
        RmEvent::Nodes(nodes) => nodes.iter().find(|n| n.id == "node2").cloned(),
        _ => None,
    };
    let drained = next_event(&received, |e| node2(e).filter(|n| n.state.is_some()));
    assert_eq!(drained.state, Some(drover_sched::node::NodeState::Drained));
    assert_eq!(drained.reason.as_deref(), Some("drover rm test"));
    command("scontrol", &["update", "nodename=node2", "state=resume"]);
    next_event(&received, |e| node2(e).filter(|n| n.state.is_none()));

    rm.signal(&record, JobSignal::Terminate { grace_seconds: 0 })
        .unwrap();
    ended(&received, &ours, record.pid);
    drop(dir);
}
