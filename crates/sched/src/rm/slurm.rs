//! The Slurm resource manager: the engine still decides what runs where; Slurm runs it.
//!
//! A job is submitted with `sbatch` pinned to the nodes the engine chose (`--nodelist`,
//! `--nodes`, `--ntasks`, `--cpus-per-task`), as its user (`--uid`/`--gid`, the service
//! being root), named `drover-<service identity>-<job id>` (`drover_store::service_identity`: one
//! service's jobs are never another's on a shared cluster) so that a restarted service
//! finds it again. Its
//! [`ProcessRecord`] carries the Slurm job id (`rm_job_id`, and as `pid`, which is what
//! [`RmEvent::Exited`] reports). One watcher thread asks `squeue --jobs=<them>` every
//! [`SlurmConfig::poll`] about the jobs started or adopted here (nothing when there are
//! none; `squeue --json` of 22.05 would list every job whatever it is asked) and reports
//! their ends, with `sacct` only for jobs that left squeue (slurmctld forgets an ended
//! job after `MinJobAge`): one call for all of them, and at a restart one for all the
//! jobs it recovers (`recovering`). Every
//! [`SlurmConfig::node_poll`] it reads the nodes (`sinfo --json`) and reports their
//! states when they change ([`RmEvent::Nodes`]; with [`SlurmConfig::describe_nodes`],
//! what they are too, so nodes Slurm gains or loses while it runs are added here or go
//! down), and lists the waiting and running jobs
//! it does not watch: jobs submitted to Slurm directly ([`RmEvent::Detected`]; the
//! engine adopts each through [`ResourceManager::adopt_detected`]; the start of one
//! adopted while it waited is [`RmEvent::Started`]). A submission holds a lock until
//! its job is watched, and that listing takes it too: a job of ours is never reported.
//!
//! Trust: what Slurm reports is taken as Slurm's (slurmctld authenticates its users);
//! a job's name is the one field its user chooses, and it cannot forge a listing's
//! record (see `text`). A job submitted directly is its Slurm user's, and a restart
//! adopts it only if Slurm still shows it as that user's.
//!
//! Safety: Slurm's programs are run directly (no shell), from a fixed directory, with a
//! clean environment, each bounded by [`SlurmConfig::command_timeout`]. Nothing reaches
//! their arguments unchecked: job ids, node names and Slurm job ids are checked against
//! a strict character set, paths must not hold Slurm's `%` patterns, and the job's
//! command and arguments reach the batch script only as its positional parameters.
//!
//! Limits (for now): without `slurmdbd`, an ended job is known only while slurmctld keeps
//! it (`MinJobAge`): one it forgot before a look saw it ends without a code. Slurm places tasks among the nodes it is
//! given by itself (the engine's per-node task counts are not forced). An output path
//! naming an existing directory is not resolved to its default file name (only a path
//! ending in `/` is).

mod json;
mod text;

pub use json::{Parsed, SlurmJob, SlurmNode, parse_jobs, parse_nodes};
pub use text::{expand_hostlist, parse_accounting, parse_queue};

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::{DetectedJob, Exit, JobSignal, Launch, ResourceManager, RmEvent, RmNode, RmNotify};
use crate::job::{Allocation, ProcessRecord};
use crate::node::{NodeState, ReportedNode};

/// The batch script of every job: becomes the job's command (its positional parameters),
/// as the local resource manager's wrapper does.
const BATCH_SCRIPT: &str = r#"#!/bin/sh
# Drover's batch script: runs "$@" (the job's command and arguments).
if [ ! -r "$1" ] && [ ! -x "$1" ]; then
  echo "the command file $1 cannot be read by the user $(id -un)" >&2; exit 126
fi
if [ -x "$1" ]; then exec "$@"; else exec /bin/sh "$@"; fi
"#;

/// The most job ids one `squeue --jobs` is given.
const QUEUE_CHUNK: usize = 500;

/// The prefix of the Slurm job name of a Drover job: `drover-<service identity>-<job id>`
/// (`drover-<job id>` before services had an identity).
pub const JOB_NAME_PREFIX: &str = "drover-";

/// What follows the prefix and identity in the job names of VM guests.
const GUEST_MARK: &str = "vm-";

/// How many looks in a row a job may be missing from squeue, and not shown ended by
/// sacct, before its end is reported without a code.
const GONE_LOOKS: u32 = 240;

/// How many `sbatch` may run at once.
const SBATCH_AT_ONCE: usize = 8;

/// Where Slurm is and how to use it.
#[derive(Debug, Clone)]
pub struct SlurmConfig {
    /// The name jobs report as their resource manager.
    pub name: String,
    /// The directory of `sbatch`, `squeue`, `scancel`, `scontrol`, `sinfo`, `sacct`.
    pub bin_dir: PathBuf,
    /// `SLURM_CONF` for the clients, when not the default `/etc/slurm/slurm.conf`.
    pub slurm_conf: Option<PathBuf>,
    /// The partition jobs are submitted to (Slurm's default when none).
    pub partition: Option<String>,
    /// A directory of the service's (the batch script lives there).
    pub state_dir: PathBuf,
    /// How often, at most, the watcher asks Slurm about the jobs it watches: ends are
    /// heard that much later. It waits longer when a look takes long (twice the last
    /// look's time), so that slurmctld is never asked more than it can answer.
    pub poll: Duration,
    /// How often the nodes' states are read again, and jobs submitted to Slurm directly
    /// looked for.
    pub node_poll: Duration,
    /// The longest any Slurm command may take.
    pub command_timeout: Duration,
    /// Whether the nodes are Slurm's (none configured here): each refresh then
    /// describes them all, so nodes Slurm gains are added and those it loses are down.
    pub describe_nodes: bool,
    /// What makes this service's job names its own on a cluster other services share
    /// (`drover-<identity>-<job id>`): written once in its store at first start. Empty:
    /// the names of old, `drover-<job id>`.
    pub service_identity: String,
    /// The account VM guests run as (`[cloud] guest_user`): its jobs of a guest's name
    /// are the VM host's.
    pub guest_user: Option<String>,
}

impl SlurmConfig {
    /// Debian's paths, a poll every 250 ms (or less often), commands bounded by 30 s.
    pub fn new(state_dir: PathBuf) -> SlurmConfig {
        SlurmConfig {
            name: "slurm".to_string(),
            bin_dir: PathBuf::from("/usr/bin"),
            slurm_conf: None,
            partition: None,
            state_dir,
            poll: Duration::from_millis(250),
            node_poll: Duration::from_secs(5),
            command_timeout: Duration::from_secs(30),
            describe_nodes: false,
            service_identity: String::new(),
            guest_user: None,
        }
    }

    /// The Slurm job name of the Drover job `job_id`.
    pub fn job_name(&self, job_id: &str) -> String {
        if self.service_identity.is_empty() {
            format!("{JOB_NAME_PREFIX}{job_id}")
        } else {
            format!("{JOB_NAME_PREFIX}{}-{job_id}", self.service_identity)
        }
    }

    /// The Drover job a Slurm job of this service runs, by its name; `None` for the jobs
    /// of anyone else, other Drover services included.
    pub fn own_job_of<'n>(&self, name: &'n str) -> Option<&'n str> {
        let rest = name.strip_prefix(JOB_NAME_PREFIX)?;
        if self.service_identity.is_empty() {
            return Some(rest);
        }
        rest.strip_prefix(self.service_identity.as_str())?
            .strip_prefix('-')
    }

    /// What the Slurm job names of this service's VM guests begin with
    /// (`drover-<identity>-vm-`, the VM's id follows): no job id begins with `vm-`.
    pub fn guest_job_name_prefix(&self) -> String {
        self.job_name(GUEST_MARK)
    }

    /// Whether a Slurm job of `user` named `name` is another Drover service's job (or
    /// one named before services had an identity), or one of this service's VM guests
    /// (the VM host's: of a guest's name and the guest account's): never reported,
    /// adopted or cancelled. Anyone else's job of a guest's name is theirs, reported
    /// as any job submitted directly.
    fn left_alone(&self, name: &str, user: Option<&str>) -> bool {
        if !name.starts_with(JOB_NAME_PREFIX) {
            return false;
        }
        match self.own_job_of(name) {
            None => true,
            Some(job) if job.starts_with(GUEST_MARK) => {
                user.is_some() && user == self.guest_user.as_deref()
            }
            Some(_) => false,
        }
    }

    fn program(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// Runs a Slurm client with `args`, its environment only `extra_env` (and `PATH`,
    /// `SLURM_CONF`); its standard output, or why it failed.
    fn run(
        &self,
        program: &str,
        args: &[String],
        extra_env: &[(String, String)],
    ) -> Result<String, String> {
        let mut command = Command::new(self.program(program));
        command
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs(extra_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(conf) = &self.slurm_conf {
            command.env("SLURM_CONF", conf);
        }
        run_bounded(command, self.command_timeout).map_err(|e| format!("{program}: {e}"))
    }

    /// `squeue --json`: every job slurmctld knows (22.05 ignores `--jobs` with
    /// `--json`: the watcher reads [`SlurmConfig::queue`] instead).
    pub fn jobs(&self) -> Result<Parsed<SlurmJob>, String> {
        let out = self.run("squeue", &["--json".into()], &[])?;
        parse_jobs(&out)
    }

    /// `squeue -h -O ...`: the jobs slurmctld holds in `states` (Slurm's `--states`
    /// names, or `all`), only those of `ids` when given (in runs of 500 ids), only those
    /// of `partition` when given. Ids Slurm no longer knows are simply absent.
    pub fn queue(
        &self,
        ids: Option<&[u64]>,
        states: &str,
        partition: Option<&str>,
    ) -> Result<Parsed<SlurmJob>, String> {
        let mut all = Parsed::default();
        let chunks: Vec<Option<&[u64]>> = match ids {
            Some([]) => return Ok(all),
            Some(ids) => ids.chunks(QUEUE_CHUNK).map(Some).collect(),
            None => vec![None],
        };
        for chunk in chunks {
            let nonce = text::nonce();
            let mut args = vec![
                "--noheader".to_string(),
                format!("--states={states}"),
                format!("--Format={}", text::queue_format(&nonce)),
            ];
            if let Some(ids) = chunk {
                let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
                args.push(format!("--jobs={}", ids.join(",")));
            }
            if let Some(partition) = partition {
                if !is_safe_name(partition) {
                    return Err(format!(
                        "the partition {partition:?} cannot be given to Slurm"
                    ));
                }
                args.push(format!("--partition={partition}"));
            }
            let out = match self.run("squeue", &args, &[("TZ".into(), "UTC".into())]) {
                Ok(out) => out,
                // Every id asked for is gone: squeue fails rather than list nothing.
                Err(e) if chunk.is_some() && e.contains("Invalid job id") => continue,
                Err(e) => return Err(e),
            };
            let parsed = text::parse_queue(&out, &nonce);
            all.items.extend(parsed.items);
            all.problems.extend(parsed.problems);
        }
        Ok(all)
    }

    /// How `sacct` recorded the jobs `ids` (in runs of 500 ids): for jobs slurmctld
    /// has forgotten (after `MinJobAge`). Ids it does not know are absent; an error
    /// when it cannot answer (a site without accounting: "accounting storage is
    /// disabled"). One call for all of them.
    pub fn accounted_jobs(&self, ids: &[u64]) -> Result<HashMap<u64, SlurmJob>, String> {
        let mut jobs = HashMap::new();
        for chunk in ids.chunks(QUEUE_CHUNK) {
            let ids: Vec<String> = chunk.iter().map(u64::to_string).collect();
            let out = self.run(
                "sacct",
                &[
                    "--allocations".into(),
                    "--noheader".into(),
                    "--parsable2".into(),
                    format!("--format={}", text::ACCOUNT_FIELDS),
                    format!("--jobs={}", ids.join(",")),
                ],
                &[("TZ".into(), "UTC".into())],
            )?;
            let parsed = text::parse_accounting(&out);
            if !parsed.problems.is_empty() {
                eprintln!("slurm: sacct: skipped {}", parsed.problems.join("; "));
            }
            jobs.extend(parsed.items.into_iter().map(|j| (j.job_id, j)));
        }
        Ok(jobs)
    }
}

/// Slurm's nodes (`sinfo --json`) as the domain's nodes, with their Slurm state.
pub fn slurm_nodes(config: &SlurmConfig) -> Result<Parsed<SlurmNode>, String> {
    let out = config.run("sinfo", &["--json".into()], &[])?;
    parse_nodes(&out)
}

/// Runs a command, reading its output in threads (no pipe fills up), killing it at
/// `timeout`. Output beyond 256 MB is cut (squeue of a very large cluster).
fn run_bounded(mut command: Command, timeout: Duration) -> Result<String, String> {
    const LIMIT: u64 = 256 << 20;
    let mut child = command.spawn().map_err(|e| e.to_string())?;
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buffer = Vec::new();
            if let Some(pipe) = pipe {
                let _ = pipe.take(LIMIT).read_to_end(&mut buffer);
            }
            buffer
        })
    };
    let stdout = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {} s", timeout.as_secs()));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    if status.success() {
        String::from_utf8(stdout).map_err(|_| "output is not UTF-8".to_string())
    } else {
        let stderr = String::from_utf8_lossy(&stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        Err(format!(
            "{status}: {}",
            first.chars().take(300).collect::<String>()
        ))
    }
}

/// A name Slurm gets as an argument (Drover job ids, node names, partitions).
pub use drover_domain::ids::is_plain_name as is_safe_name;

/// A Slurm job id as it was recorded (digits only).
pub fn parse_slurm_id(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 19 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `sbatch --parsable` answers `<id>` or `<id>;<cluster>`.
fn parse_submitted(out: &str) -> Option<u64> {
    let line = out.lines().find(|l| !l.trim().is_empty())?.trim();
    parse_slurm_id(line.split(';').next()?)
}

/// A path for `sbatch --output` and the like: absolute, and free of what Slurm would
/// read as a pattern (`%j`...) or that cannot be an argument.
fn slurm_path(path: &Path, default_name: &str) -> Result<String, String> {
    let mut text = path
        .to_str()
        .ok_or_else(|| format!("the path {} is not UTF-8", path.display()))?
        .to_string();
    if text.ends_with('/') {
        text.push_str(default_name);
    }
    if !text.starts_with('/') || text.contains(['%', '\\', '\n', '\0']) {
        return Err(format!(
            "the path {text} cannot be given to Slurm (relative, or holds %, \\ or a line break)"
        ));
    }
    Ok(text)
}

/// Slurm's `--time`: days-hours:minutes:seconds (Slurm rounds up to the minute).
fn wall_time(seconds: u64) -> String {
    let seconds = seconds.max(1);
    format!(
        "{}-{:02}:{:02}:{:02}",
        seconds / 86400,
        seconds % 86400 / 3600,
        seconds % 3600 / 60,
        seconds % 60
    )
}

/// Environment variables, in order.
type Environment = Vec<(String, String)>;

/// The `sbatch` arguments for a launch (after the checks), and the environment to run
/// it with (which `--export=ALL`, Slurm's default, hands to the job).
fn sbatch_command(
    config: &SlurmConfig,
    script: &Path,
    launch: &Launch,
) -> Result<(Vec<String>, Environment), String> {
    if !is_safe_name(&launch.job_id) {
        return Err(format!(
            "the job id {:?} cannot be given to Slurm",
            launch.job_id
        ));
    }
    let nodes: Vec<&str> = launch.placement.iter().map(|a| a.node.as_str()).collect();
    if let Some(bad) = nodes.iter().find(|n| !is_safe_name(n)) {
        return Err(format!("the node name {bad:?} cannot be given to Slurm"));
    }
    let tasks: u32 = launch.placement.iter().map(|a| a.tasks).sum::<u32>().max(1);
    let mut args = vec![
        "--parsable".to_string(),
        format!("--job-name={}", config.job_name(&launch.job_id)),
        format!("--uid={}", launch.user.uid),
        format!("--gid={}", launch.gid.unwrap_or(launch.user.gid)),
        format!("--ntasks={tasks}"),
        format!("--cpus-per-task={}", launch.processors_per_task.max(1)),
        // The engine decides on requeues, not Slurm (after a node failure, say).
        "--no-requeue".to_string(),
        "--open-mode=append".to_string(),
        format!("--chdir={}", slurm_path(&launch.working_directory, "")?),
    ];
    if !nodes.is_empty() {
        args.push(format!("--nodes={}", nodes.len()));
        args.push(format!("--nodelist={}", nodes.join(",")));
    }
    if let Some(partition) = &config.partition {
        if !is_safe_name(partition) {
            return Err(format!(
                "the partition {partition:?} cannot be given to Slurm"
            ));
        }
        args.push(format!("--partition={partition}"));
    }
    if let Some(mb) = launch.memory_per_task {
        let per_cpu = mb.div_ceil(u64::from(launch.processors_per_task.max(1)));
        args.push(format!("--mem-per-cpu={}", per_cpu.max(1)));
    }
    if let Some(seconds) = launch.wall_seconds {
        args.push(format!("--time={}", wall_time(seconds)));
    }
    let stdout = slurm_path(&launch.stdout, &launch.output_names.0)?;
    let stderr = slurm_path(&launch.stderr, &launch.output_names.1)?;
    args.push(format!("--output={stdout}"));
    // Without --error, Slurm writes both to --output (a joined output).
    if stderr != stdout {
        args.push(format!("--error={stderr}"));
    }
    if let Some(stdin) = &launch.stdin {
        args.push(format!("--input={}", slurm_path(stdin, "")?));
    }
    args.push(
        script
            .to_str()
            .ok_or("the batch script's path is not UTF-8")?
            .to_string(),
    );
    let command = launch
        .command_file
        .to_str()
        .ok_or("the command file's path is not UTF-8")?;
    args.push(command.to_string());
    args.extend(launch.arguments.iter().cloned());
    // sbatch reads SBATCH_* and SLURM_* variables as options: the job's own never reach it.
    let environment = launch
        .environment
        .iter()
        .filter(|(k, v)| {
            !k.is_empty()
                && !k.contains(['=', '\0'])
                && !v.contains('\0')
                && !k.starts_with("SBATCH_")
                && !k.starts_with("SLURM_")
        })
        .cloned()
        .collect();
    Ok((args, environment))
}

/// A job the watcher follows.
#[derive(Debug, Clone)]
struct Watched {
    job_id: String,
    /// When to `scancel` it (the end of a termination's grace period).
    kill_at: Option<Instant>,
    /// Successful listings in a row that did not show it.
    missing: u32,
    /// Not yet seen running (one submitted directly and adopted while it waited, or one
    /// of ours just handed over): its start is reported when a look sees it.
    pending: bool,
    /// A job submitted directly: whether it was last seen suspended (a change is
    /// reported). None for ours (the engine suspends them itself).
    suspended: Option<bool>,
}

impl Watched {
    /// Its start, the first time a look finds it started (or ended) after it waited.
    fn start_seen(&mut self, slurm_id: u64, job: &SlurmJob) -> Option<RmEvent> {
        if !self.pending {
            return None;
        }
        let ran = detected_job(job).filter(|d| !d.placement.is_empty())?;
        self.pending = false;
        Some(RmEvent::Started {
            job_id: self.job_id.clone(),
            pid: pid_of(slurm_id),
            placement: ran.placement,
            memory_per_processor: ran.memory_per_processor,
            start: job.start_time,
        })
    }
}

struct Shared {
    config: SlurmConfig,
    events: RmNotify,
    watched: Mutex<HashMap<u64, Watched>>,
    stop: AtomicBool,
    /// The last listing of every job and when it was read: the many `adopt`s of a
    /// restart share one.
    cache: Mutex<Option<(Instant, Arc<Parsed<SlurmJob>>)>>,
    /// Read-held while a job is submitted and until it is watched (several at once),
    /// write-held while jobs submitted directly are looked for: a job of ours is never
    /// taken for one of those.
    submitting: RwLock<()>,
    /// The nodes' states last reported (reported again only when they change).
    nodes: Mutex<Option<Vec<RmNode>>>,
    /// Why slurmctld is taken to be away: its last answer was a failure to reach it.
    away: Mutex<Option<String>>,
    /// What `sacct` said at a restart of the jobs that were running and that slurmctld
    /// no longer lists (read for all at once, taken by `recorded_exit`).
    accounted: Mutex<HashMap<u64, SlurmJob>>,
}

/// Whether a client's failure says that slurmctld could not be reached (rather than
/// that it refused something).
fn unreachable(error: &str) -> bool {
    [
        "Unable to contact",
        "no answer within",
        "Socket timed out",
        "Connection refused",
        // sinfo --json of 22.05 while slurmctld is away (see `json`).
        "Slurm answered: Unspecified error",
    ]
    .iter()
    .any(|words| error.contains(words))
}

impl Shared {
    /// Notes how the last exchange with slurmctld went.
    fn heard(&self, outcome: Result<(), &str>) {
        let mut away = self.away.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(()) => {
                if away.take().is_some() {
                    eprintln!("slurm: slurmctld answers again");
                }
            }
            Err(e) if unreachable(e) => {
                if away.is_none() {
                    eprintln!("slurm: slurmctld does not answer; no job starts until it does: {e}");
                }
                *away = Some(e.to_string());
            }
            Err(_) => {}
        }
    }

    fn listing(&self, fresh_within: Duration) -> Result<Arc<Parsed<SlurmJob>>, String> {
        // Known to be away (each try takes squeue about 9 s): the watcher notices when
        // slurmctld answers again.
        if let Some(why) = self.away.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(why);
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, jobs)) = cache.as_ref()
            && at.elapsed() < fresh_within
        {
            return Ok(jobs.clone());
        }
        let jobs = Arc::new(self.config.queue(None, "all", None)?);
        if !jobs.problems.is_empty() {
            eprintln!("slurm: squeue: skipped {}", jobs.problems.join("; "));
        }
        *cache = Some((Instant::now(), jobs.clone()));
        Ok(jobs)
    }

    /// How `sacct` recorded one job: read at the restart ([`Shared::accounted`]'s
    /// cache), else asked now.
    fn accounted(&self, slurm_id: u64) -> Option<SlurmJob> {
        let cached = self
            .accounted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&slurm_id);
        cached.or_else(|| {
            self.config
                .accounted_jobs(&[slurm_id])
                .ok()?
                .remove(&slurm_id)
        })
    }

    fn watched(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Watched>> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One look at the watched jobs (`squeue --jobs=<them>`): reports those that ended.
    fn poll(&self) {
        let mut ids: Vec<u64> = self.watched().keys().copied().collect();
        if ids.is_empty() {
            return;
        }
        ids.sort_unstable();
        // squeue of 22.05 loads every job from slurmctld and filters them itself: past
        // one run of ids, one listing of all costs less than several filtered ones.
        let filter = (ids.len() <= QUEUE_CHUNK).then_some(ids.as_slice());
        let jobs = match self.config.queue(filter, "all", None) {
            Ok(jobs) => jobs,
            // slurmctld away (restarting?): try again next time; nothing is lost.
            Err(e) => {
                eprintln!("slurm: cannot list jobs: {e}");
                self.heard(Err(&e));
                return;
            }
        };
        self.heard(Ok(()));
        if !jobs.problems.is_empty() {
            eprintln!("slurm: squeue: skipped {}", jobs.problems.join("; "));
        }
        let by_id: HashMap<u64, &SlurmJob> = jobs.items.iter().map(|j| (j.job_id, j)).collect();
        let mut ended = Vec::new();
        let mut kill = Vec::new();
        let mut started = Vec::new();
        {
            let mut watched = self.watched();
            let now = Instant::now();
            for (&slurm_id, entry) in watched.iter_mut() {
                match by_id.get(&slurm_id) {
                    Some(job) if job.is_finished() => {
                        // Ended before a look saw it run: its start still counts.
                        started.extend(entry.start_seen(slurm_id, job));
                        ended.push((slurm_id, Some((*job).clone())))
                    }
                    Some(job) => {
                        entry.missing = 0;
                        if job.state != "PENDING" {
                            started.extend(entry.start_seen(slurm_id, job));
                        }
                        let suspended = match job.state.as_str() {
                            "SUSPENDED" => Some(true),
                            "RUNNING" => Some(false),
                            _ => None,
                        };
                        if let (Some(was), Some(is)) = (entry.suspended, suspended)
                            && was != is
                            && !entry.pending
                        {
                            entry.suspended = Some(is);
                            started.push(RmEvent::Suspended {
                                job_id: entry.job_id.clone(),
                                pid: pid_of(slurm_id),
                                suspended: is,
                            });
                        }
                        if entry.kill_at.is_some_and(|at| at <= now) {
                            entry.kill_at = None;
                            kill.push(slurm_id);
                        }
                    }
                    None => {
                        // Gone from slurmctld (purged after MinJobAge, or its state lost):
                        // a few listings in a row before believing it.
                        entry.missing += 1;
                        if entry.missing >= 3 {
                            ended.push((slurm_id, None));
                        }
                    }
                }
            }
        }
        for slurm_id in kill {
            if let Err(e) = self.config.run("scancel", &[slurm_id.to_string()], &[]) {
                eprintln!("slurm: scancel {slurm_id}: {e}");
            }
        }
        for event in started {
            (self.events)(event);
        }
        let (listed, gone): (Vec<_>, Vec<_>) = ended.into_iter().partition(|(_, j)| j.is_some());
        let gone: Vec<u64> = gone.into_iter().map(|(id, _)| id).collect();
        let ended = listed
            .into_iter()
            .chain(self.accounted_ends(&gone))
            .collect::<Vec<_>>();
        for (slurm_id, job) in ended {
            let Some(entry) = self.watched().remove(&slurm_id) else {
                continue;
            };
            (self.events)(RmEvent::Exited {
                job_id: entry.job_id,
                pid: pid_of(slurm_id),
                exit: exit_of(job.as_ref()),
            });
        }
    }

    /// The ends of jobs that left squeue (slurmctld forgot them after `MinJobAge`, or
    /// lost them), as `sacct` recorded them: one call for all. A job accounting does not
    /// show ended yet (slurmctld sends it to slurmdbd a while later) stays watched, for
    /// at most [`GONE_LOOKS`] looks; without accounting its end comes without a code.
    fn accounted_ends(&self, gone: &[u64]) -> Vec<(u64, Option<SlurmJob>)> {
        if gone.is_empty() {
            return Vec::new();
        }
        let accounted = self.config.accounted_jobs(gone);
        let disabled = match &accounted {
            Err(e) if e.contains("disabled") => true,
            Err(e) => {
                eprintln!("slurm: cannot read ended jobs from sacct: {e}");
                false
            }
            Ok(_) => false,
        };
        let accounted = accounted.unwrap_or_default();
        let watched = self.watched();
        gone.iter()
            .filter_map(|&slurm_id| match accounted.get(&slurm_id) {
                Some(job) if job.is_finished() => Some((slurm_id, Some(job.clone()))),
                _ if disabled => Some((slurm_id, None)),
                _ => {
                    let looks = watched.get(&slurm_id).map_or(0, |w| w.missing);
                    (looks >= GONE_LOOKS).then(|| {
                        eprintln!(
                            "slurm: job {slurm_id} is gone from squeue and sacct shows no end: ended without a code"
                        );
                        (slurm_id, None)
                    })
                }
            })
            .collect()
    }

    /// Reads the nodes' states (`sinfo --json`) and reports them if they changed.
    fn refresh_nodes(&self) {
        self.nodes_read(slurm_nodes(&self.config));
    }

    /// Reports what a reading of the nodes found, if it changed.
    fn nodes_read(&self, nodes: Result<Parsed<SlurmNode>, String>) {
        let nodes = match nodes {
            Ok(nodes) => nodes,
            Err(e) => {
                eprintln!("slurm: cannot read the nodes: {e}");
                self.heard(Err(&e));
                return;
            }
        };
        self.heard(Ok(()));
        let states: Vec<RmNode> = nodes
            .items
            .iter()
            .map(|node| {
                rm_node(
                    node,
                    self.config.describe_nodes.then_some(&self.config.name),
                )
            })
            .collect();
        let mut last = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_ref() != Some(&states) {
            *last = Some(states.clone());
            (self.events)(RmEvent::Nodes(states));
        }
    }

    /// Looks for jobs not started (or adopted) here, and reports them.
    fn detect(&self) {
        // Not while slurmctld is away: squeue would hold the lock (and sbatch) for long.
        if self
            .away
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            return;
        }
        let _submitting = self.submitting.write().unwrap_or_else(|e| e.into_inner());
        let jobs = match self.config.queue(
            None,
            "PENDING,RUNNING,SUSPENDED",
            self.config.partition.as_deref(),
        ) {
            Ok(jobs) => jobs,
            Err(e) => {
                eprintln!("slurm: cannot look for jobs submitted directly: {e}");
                return;
            }
        };
        let detected: Vec<DetectedJob> = {
            let watched = self.watched();
            jobs.items
                .iter()
                .filter(|j| !watched.contains_key(&j.job_id))
                .filter(|j| !self.config.left_alone(&j.name, j.user_name.as_deref()))
                .filter_map(|j| {
                    let own_job = self.config.own_job_of(&j.name).map(String::from);
                    detected_job(j).map(|d| DetectedJob { own_job, ..d })
                })
                .collect()
        };
        if !detected.is_empty() {
            (self.events)(RmEvent::Detected(detected));
        }
    }
}

/// A node's state as the engine hears it, and what it is when `described_as` names
/// the reporter (the nodes are Slurm's).
fn rm_node(node: &SlurmNode, described_as: Option<&String>) -> RmNode {
    let config = &node.config;
    let description = described_as.map(|reporter| ReportedNode {
        id: config.id.clone(),
        processors: Some(config.processors),
        memory: config.memory,
        disk: None,
        architecture: config.architecture.clone(),
        features: Some(config.features.clone()),
        partition: config.partition.clone(),
        reporter: reporter.clone(),
    });
    RmNode {
        description,
        id: node.config.id.clone(),
        state: if node.down {
            Some(NodeState::Down)
        } else if node.drained {
            Some(NodeState::Drained)
        } else {
            None
        },
        reason: node.reason.clone(),
    }
}

/// A job of Slurm's as the engine hears of it: its processors spread over its nodes
/// (Slurm's text listing gives only the total). None when it names no user, or runs
/// and its nodes cannot be read.
fn detected_job(job: &SlurmJob) -> Option<DetectedJob> {
    let user = job.user_name.clone().filter(|u| is_safe_name(u))?;
    let pending = job.state == "PENDING";
    let nodes = if pending {
        Vec::new()
    } else {
        expand_hostlist(&job.nodes).ok()?
    };
    if nodes.is_empty() && !pending {
        return None;
    }
    let count = u32::try_from(nodes.len()).ok()?.max(1);
    let cpus = job.cpus.unwrap_or(count).max(count);
    let placement = nodes
        .into_iter()
        .enumerate()
        .map(|(i, node)| Allocation {
            node,
            tasks: cpus / count + u32::from((i as u32) < cpus % count),
        })
        .collect();
    Some(DetectedJob {
        process: ProcessRecord {
            pid: pid_of(job.job_id),
            start_ticks: 0,
            spool: String::new(),
            rm_job_id: Some(job.job_id.to_string()),
        },
        name: job.name.clone(),
        own_job: None,
        user,
        pending,
        suspended: job.state == "SUSPENDED",
        placement,
        memory_per_processor: job.memory.map(|m| m.div_ceil(u64::from(cpus.max(1)))),
        // A waiting job's start time is Slurm's guess.
        start: job.start_time.filter(|_| !pending),
    })
}

/// How an ended Slurm job ended, as the engine hears it.
fn exit_of(job: Option<&SlurmJob>) -> Exit {
    let start_failure = job.and_then(|j| match j.state.as_str() {
        "BOOT_FAIL" | "NODE_FAIL" => Some(format!(
            "Slurm: {}{}",
            j.state,
            j.state_reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        )),
        _ => None,
    });
    Exit {
        code: job.and_then(|j| j.exit_code),
        cpu_seconds: 0.0,
        start_failure,
    }
}

/// The `pid` of a Slurm job's record (what [`RmEvent::Exited`] names it by).
fn pid_of(slurm_id: u64) -> i32 {
    i32::try_from(slurm_id).unwrap_or(i32::MAX)
}

/// The Slurm job id of a record this resource manager made.
pub fn slurm_id_of(process: &ProcessRecord) -> Option<u64> {
    match process.rm_job_id.as_deref() {
        Some(id) => parse_slurm_id(id),
        None => u64::try_from(process.pid).ok().filter(|id| *id > 0),
    }
}

pub struct SlurmResourceManager {
    shared: Arc<Shared>,
    script: PathBuf,
}

impl SlurmResourceManager {
    /// Writes the batch script into `config.state_dir` and starts the watcher thread;
    /// ends are reported on `events`.
    pub fn new(config: SlurmConfig, events: RmNotify) -> std::io::Result<Self> {
        let nodes = slurm_nodes(&config);
        Self::with_nodes_read(config, events, nodes)
    }

    /// [`SlurmResourceManager::new`] with the nodes just read (`sinfo --json`) by its
    /// caller: not read twice at a start, which takes a while when slurmctld is away.
    pub fn with_nodes_read(
        config: SlurmConfig,
        events: RmNotify,
        nodes: Result<Parsed<SlurmNode>, String>,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(&config.state_dir)?;
        let script = config.state_dir.join("drover-batch.sh");
        // Written anew each time (atomically): its content is the code's, not the disk's.
        let temporary = config.state_dir.join("drover-batch.sh.new");
        {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(BATCH_SCRIPT.as_bytes())?;
            file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        }
        std::fs::rename(&temporary, &script)?;
        let shared = Arc::new(Shared {
            config,
            events,
            watched: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
            cache: Mutex::new(None),
            submitting: RwLock::new(()),
            nodes: Mutex::new(None),
            away: Mutex::new(None),
            accounted: Mutex::new(HashMap::new()),
        });
        // The nodes' states before the engine's first pass (its inbox holds them until
        // it runs): a node drained in Slurm gets no job even in the first seconds.
        shared.nodes_read(nodes);
        let watcher = shared.clone();
        std::thread::Builder::new()
            .name("slurm-watcher".into())
            .spawn(move || {
                // The nodes were read at start: the first refresh comes a period later.
                let mut nodes_read = Instant::now();
                let mut look = Duration::ZERO;
                while !watcher.stop.load(Ordering::Relaxed) {
                    std::thread::sleep(watcher.config.poll.max(look * 2));
                    if watcher.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let started = Instant::now();
                    watcher.poll();
                    look = started.elapsed();
                    if nodes_read.elapsed() >= watcher.config.node_poll {
                        nodes_read = Instant::now();
                        watcher.refresh_nodes();
                        watcher.detect();
                    }
                }
            })?;
        Ok(SlurmResourceManager { shared, script })
    }

    pub fn config(&self) -> &SlurmConfig {
        &self.shared.config
    }

    fn watch(&self, slurm_id: u64, job_id: &str) {
        self.watch_as(slurm_id, job_id, false, None);
    }

    fn watch_as(&self, slurm_id: u64, job_id: &str, pending: bool, suspended: Option<bool>) {
        self.shared.watched().insert(
            slurm_id,
            Watched {
                job_id: job_id.to_string(),
                kill_at: None,
                missing: 0,
                pending,
                suspended,
            },
        );
    }

    fn scontrol(&self, verb: &str, slurm_id: u64) -> Result<(), String> {
        self.shared
            .config
            .run("scontrol", &[verb.to_string(), slurm_id.to_string()], &[])
            .map(drop)
    }
}

impl Drop for SlurmResourceManager {
    fn drop(&mut self) {
        // The watcher stops at its next wake-up: a re-created manager watches alone.
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

impl ResourceManager for SlurmResourceManager {
    fn name(&self) -> &str {
        &self.shared.config.name
    }

    /// A job's command would run on the node, beside its VM rather than in it.
    fn runs_jobs_in_guests(&self) -> bool {
        false
    }

    fn start(&self, launch: Launch) -> Result<ProcessRecord, String> {
        // Refused at submission already (`runs_jobs_in_guests`).
        if launch.guest.is_some() {
            return Err(
                "a job in a VM (vmUsagePolicy) is not run by the Slurm resource manager".into(),
            );
        }
        let (args, environment) = sbatch_command(&self.shared.config, &self.script, &launch)?;
        let submitting = self
            .shared
            .submitting
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let out = self
            .shared
            .config
            .run("sbatch", &args, &environment)
            .inspect_err(|e| self.shared.heard(Err(e)))?;
        let slurm_id = parse_submitted(&out)
            .ok_or_else(|| format!("sbatch answered no job id: {:?}", out.trim()))?;
        // Watched as waiting: Slurm's start of it is reported (its start date).
        self.watch_as(slurm_id, &launch.job_id, true, None);
        drop(submitting);
        Ok(ProcessRecord {
            pid: pid_of(slurm_id),
            start_ticks: 0,
            spool: String::new(),
            rm_job_id: Some(slurm_id.to_string()),
        })
    }

    fn signal(&self, process: &ProcessRecord, signal: JobSignal) -> Result<(), String> {
        let slurm_id = slurm_id_of(process).ok_or("the process record names no Slurm job")?;
        match signal {
            JobSignal::Suspend => self.scontrol("suspend", slurm_id),
            JobSignal::Resume => self.scontrol("resume", slurm_id),
            JobSignal::Terminate { grace_seconds: 0 } => self
                .shared
                .config
                .run("scancel", &[slurm_id.to_string()], &[])
                .map(drop),
            JobSignal::Terminate { grace_seconds } => {
                // SIGTERM to every step and the batch shell now; the watcher cancels it
                // (Slurm's SIGKILL) when the grace period is over. Only if it runs:
                // `scancel --signal` waits for a pending job to start (for ever); one
                // still pending is cancelled at once. (One that starts between the two
                // is cancelled at the end of the grace period.)
                self.shared.config.run(
                    "scancel",
                    &[
                        "--state=RUNNING".into(),
                        "--full".into(),
                        "--signal=TERM".into(),
                        slurm_id.to_string(),
                    ],
                    &[],
                )?;
                // (It may have ended meanwhile: Slurm then answers an error.)
                if let Err(e) = self.shared.config.run(
                    "scancel",
                    &["--state=PENDING".into(), slurm_id.to_string()],
                    &[],
                ) {
                    eprintln!("slurm: scancel --state=PENDING {slurm_id}: {e}");
                }
                if let Some(entry) = self.shared.watched().get_mut(&slurm_id) {
                    entry.kill_at = Some(Instant::now() + Duration::from_secs(grace_seconds));
                }
                Ok(())
            }
        }
    }

    fn adopt(&self, job_id: &str, process: &ProcessRecord) -> bool {
        let Some(slurm_id) = slurm_id_of(process) else {
            return false;
        };
        match self.shared.listing(Duration::from_secs(1)) {
            Ok(jobs) => match jobs.items.iter().find(|j| j.job_id == slurm_id) {
                // Its Slurm id was recorded for this job; a name of old (before the
                // service had an identity) is still this job's after an upgrade.
                Some(job)
                    if (job.name == self.shared.config.job_name(job_id)
                        || job.name == format!("{JOB_NAME_PREFIX}{job_id}"))
                        && !job.is_finished() =>
                {
                    self.watch(slurm_id, job_id);
                    true
                }
                // Ended (then `recorded_exit` tells how), unknown, or another's job.
                _ => false,
            },
            // Slurm does not answer: the job may well run on; watch it until it does.
            Err(e) => {
                eprintln!("slurm: adopting {job_id} without an answer from Slurm: {e}");
                self.watch(slurm_id, job_id);
                true
            }
        }
    }

    /// sbatch is a process of its own that waits on slurmctld (about 100 ms): several
    /// at once. The jobs are pinned to their nodes, so their order does not matter.
    fn concurrent_starts(&self) -> usize {
        SBATCH_AT_ONCE
    }

    fn describes_nodes(&self) -> bool {
        self.shared.config.describe_nodes
    }

    fn unavailable(&self) -> Option<String> {
        self.shared
            .away
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|why| format!("slurmctld does not answer: {why}"))
    }

    fn adopt_detected(
        &self,
        job_id: &str,
        user: &str,
        process: &ProcessRecord,
        waiting: bool,
    ) -> bool {
        let Some(slurm_id) = slurm_id_of(process) else {
            return false;
        };
        match self.shared.listing(Duration::from_secs(1)) {
            Ok(jobs) => match jobs.items.iter().find(|j| j.job_id == slurm_id) {
                // Still there, still that user's (Slurm's ids may start again at 1).
                Some(job) if job.user_name.as_deref() == Some(user) && !job.is_finished() => {
                    // Waiting as the engine last saw it (it may run by now: its start
                    // is then reported at the next look).
                    let suspended = job.state == "SUSPENDED";
                    self.watch_as(slurm_id, job_id, waiting, Some(suspended));
                    true
                }
                _ => false,
            },
            Err(e) => {
                eprintln!("slurm: adopting {job_id} without an answer from Slurm: {e}");
                self.watch_as(slurm_id, job_id, waiting, None);
                true
            }
        }
    }

    fn abandon(&self, job_id: &str) {
        // Only this service's name: another service's job of the same id is not ours.
        let name = self.shared.config.job_name(job_id);
        let jobs = match self.shared.listing(Duration::from_secs(1)) {
            Ok(jobs) => jobs,
            Err(e) => {
                eprintln!("slurm: cannot look for an orphan of {job_id}: {e}");
                return;
            }
        };
        for job in jobs
            .items
            .iter()
            .filter(|j| j.name == name && !j.is_finished())
        {
            if let Err(e) = self
                .shared
                .config
                .run("scancel", &[job.job_id.to_string()], &[])
            {
                eprintln!("slurm: scancel {} (orphan of {job_id}): {e}", job.job_id);
            }
        }
    }

    /// One `squeue` and one `sacct` for all the jobs of a restart: those slurmctld no
    /// longer lists are read from accounting at once.
    fn recovering(&self, processes: &[&ProcessRecord]) {
        let ids: Vec<u64> = processes.iter().filter_map(|p| slurm_id_of(p)).collect();
        if ids.is_empty() {
            return;
        }
        let Ok(jobs) = self.shared.listing(Duration::from_secs(1)) else {
            return; // slurmctld away: every job is adopted until it answers
        };
        let listed: std::collections::HashSet<u64> = jobs.items.iter().map(|j| j.job_id).collect();
        let gone: Vec<u64> = ids.into_iter().filter(|id| !listed.contains(id)).collect();
        if gone.is_empty() {
            return;
        }
        match self.shared.config.accounted_jobs(&gone) {
            Ok(accounted) => {
                *self
                    .shared
                    .accounted
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = accounted
            }
            Err(e) => eprintln!(
                "slurm: cannot read the ends of {} jobs from sacct: {e}",
                gone.len()
            ),
        }
    }

    fn recorded_exit(&self, process: &ProcessRecord) -> Option<Exit> {
        let slurm_id = slurm_id_of(process)?;
        let job = match self.shared.listing(Duration::from_secs(1)) {
            Ok(jobs) => jobs.items.iter().find(|j| j.job_id == slurm_id).cloned(),
            Err(_) => None,
        };
        let job = match job {
            Some(job) => job,
            None => self.shared.accounted(slurm_id)?,
        };
        job.is_finished().then(|| exit_of(Some(&job)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_carry_the_service_identity_and_others_are_not_ours() {
        let mut config = SlurmConfig::new("/tmp/x".into());
        assert_eq!(config.job_name("Drover.7"), "drover-Drover.7");
        config.service_identity = "0a1b2c3d".into();
        assert_eq!(config.job_name("Drover.7"), "drover-0a1b2c3d-Drover.7");
        assert_eq!(
            config.own_job_of("drover-0a1b2c3d-Drover.7"),
            Some("Drover.7")
        );
        for other in [
            "drover-ffffffff-Drover.7",
            "drover-Drover.7",
            "by-hand",
            "drover-0a1b2c3dX",
        ] {
            assert_eq!(config.own_job_of(other), None, "{other}");
        }
        let bob = Some("bob");
        assert!(config.left_alone("drover-ffffffff-Drover.7", bob));
        assert!(config.left_alone("drover-Drover.7", bob));
        assert!(!config.left_alone("by-hand", bob));
        assert!(!config.left_alone("drover-0a1b2c3d-Drover.7", bob));
        // A VM guest of this service is the VM host's, not a job to adopt; a user's
        // job of that name is theirs.
        config.guest_user = Some("drover-guest".into());
        let guest = format!("{}web", config.guest_job_name_prefix());
        assert_eq!(guest, "drover-0a1b2c3d-vm-web");
        assert!(config.left_alone(&guest, Some("drover-guest")));
        assert!(!config.left_alone(&guest, bob));
        assert!(!config.left_alone(&guest, None));
    }
    use crate::job::Allocation;
    use crate::sysuser::SystemUser;

    fn launch() -> Launch {
        Launch {
            job_id: "job.7".into(),
            command_file: "/bin/echo".into(),
            arguments: vec!["a b".into(), "$(rm -rf /)".into()],
            working_directory: "/tmp".into(),
            environment: vec![
                ("HOME".into(), "/home/bob".into()),
                ("SBATCH_PARTITION".into(), "x".into()),
                ("BAD=NAME".into(), "x".into()),
            ],
            stdout: "/tmp/out/".into(),
            stderr: "/tmp/err".into(),
            stdin: None,
            user: SystemUser {
                name: "bob".into(),
                uid: 1001,
                gid: 1002,
                home: "/home/bob".into(),
                shell: "/bin/sh".into(),
                groups: vec![1002],
            },
            gid: None,
            guest: None,
            output_names: ("job.o7".into(), "job.e7".into()),
            placement: vec![
                Allocation {
                    node: "node1".into(),
                    tasks: 2,
                },
                Allocation {
                    node: "node3".into(),
                    tasks: 1,
                },
            ],
            processors_per_task: 2,
            memory_per_task: Some(300),
            wall_seconds: Some(3661),
        }
    }

    #[test]
    fn sbatch_arguments() {
        let config = SlurmConfig::new("/var/lib/drover/slurm".into());
        let (args, env) = sbatch_command(&config, Path::new("/s/batch.sh"), &launch()).unwrap();
        for expected in [
            "--job-name=drover-job.7",
            "--uid=1001",
            "--gid=1002",
            "--ntasks=3",
            "--cpus-per-task=2",
            "--nodes=2",
            "--nodelist=node1,node3",
            "--mem-per-cpu=150",
            "--time=0-01:01:01",
            "--output=/tmp/out/job.o7",
            "--error=/tmp/err",
            "--chdir=/tmp",
        ] {
            assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
        }
        // The command and its arguments come last, as they are, after the script.
        let tail = &args[args.len() - 4..];
        assert_eq!(tail, ["/s/batch.sh", "/bin/echo", "a b", "$(rm -rf /)"]);
        assert_eq!(env, [("HOME".to_string(), "/home/bob".to_string())]);
    }

    #[test]
    fn unsafe_text_is_refused() {
        let config = SlurmConfig::new("/x".into());
        let mut bad = launch();
        bad.placement[0].node = "node1,node2".into();
        assert!(sbatch_command(&config, Path::new("/s"), &bad).is_err());
        let mut bad = launch();
        bad.job_id = "--uid=0".into();
        assert!(sbatch_command(&config, Path::new("/s"), &bad).is_err());
        let mut bad = launch();
        bad.stdout = "/tmp/out-%j".into();
        assert!(sbatch_command(&config, Path::new("/s"), &bad).is_err());
        assert!(!is_safe_name("a b") && !is_safe_name("") && !is_safe_name("-x"));
        assert!(is_safe_name("node-01.rack_2"));
        assert_eq!(parse_slurm_id("123"), Some(123));
        assert_eq!(parse_slurm_id("12;3"), None);
        assert_eq!(parse_submitted("42;cluster\n"), Some(42));
        assert_eq!(parse_submitted("42\n"), Some(42));
        assert_eq!(parse_submitted("sbatch: error"), None);
    }

    #[test]
    fn records_name_their_slurm_job() {
        let mut record = ProcessRecord {
            pid: 42,
            start_ticks: 0,
            spool: String::new(),
            rm_job_id: Some("42".into()),
        };
        assert_eq!(slurm_id_of(&record), Some(42));
        record.rm_job_id = Some("4;2".into());
        assert_eq!(slurm_id_of(&record), None);
        assert_eq!(wall_time(59), "0-00:00:59");
        assert_eq!(wall_time(90061), "1-01:01:01");
    }

    #[test]
    fn bounded_commands() {
        let mut sleep = Command::new("/bin/sleep");
        sleep.arg("5").stdout(Stdio::piped()).stderr(Stdio::piped());
        let started = Instant::now();
        assert!(run_bounded(sleep, Duration::from_millis(200)).is_err());
        assert!(started.elapsed() < Duration::from_secs(2));
        let mut echo = Command::new("/bin/echo");
        echo.arg("hi").stdout(Stdio::piped()).stderr(Stdio::piped());
        assert_eq!(run_bounded(echo, Duration::from_secs(5)).unwrap(), "hi\n");
    }
}
