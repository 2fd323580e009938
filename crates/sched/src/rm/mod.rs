//! Resource managers: what starts, signals and watches a job's processes. The engine
//! talks to one through [`ResourceManager`]; `local` (this machine) is the embedded
//! default; the simulator (`sim`) implements it too, and `slurm` runs jobs as Slurm jobs.

pub mod local;
pub use drover_shepherd as shepherd;
pub mod slurm;

use std::path::PathBuf;

use crate::job::ProcessRecord;
use crate::sysuser::SystemUser;

/// Everything needed to start one job.
#[derive(Debug, Clone)]
pub struct Launch {
    pub job_id: String,
    pub command_file: PathBuf,
    pub arguments: Vec<String>,
    pub working_directory: PathBuf,
    pub environment: Vec<(String, String)>,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    pub stdin: Option<PathBuf>,
    pub user: SystemUser,
    /// The group to run in, when it differs from the user's primary group.
    pub gid: Option<u32>,
    /// A connection to the agent of the guest the job runs in (`vmUsagePolicy`): the
    /// job's process is then `drover guest-run`, which sends the command there.
    pub guest: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// The default file names of its output and error (`<name>.o<n>`, `<name>.e<n>`),
    /// for an output path that names a directory.
    pub output_names: (String, String),
    /// The nodes the engine chose and the tasks on each (the local manager runs
    /// everything here; Slurm pins the job to them).
    pub placement: Vec<crate::job::Allocation>,
    pub processors_per_task: u32,
    /// Megabytes per task, when asked for.
    pub memory_per_task: Option<u64>,
    /// The wall-time limit (the engine enforces it too).
    pub wall_seconds: Option<u64>,
}

/// Signals the engine sends to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobSignal {
    Suspend,
    Resume,
    /// SIGTERM now, SIGKILL after the grace period if it is still there.
    Terminate {
        grace_seconds: u64,
    },
}

/// How a job's process ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Exit {
    /// The exit status, or 128 + the signal that ended it (as shells report it);
    /// `None` when it could not be learnt (a re-adopted process that left no status).
    pub code: Option<i32>,
    pub cpu_seconds: f64,
    /// Why the job's command never started, when its process said (a working directory
    /// it could not enter, an output file it could not open...).
    pub start_failure: Option<String>,
}

/// What a resource manager tells the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum RmEvent {
    Exited {
        job_id: String,
        pid: i32,
        exit: Exit,
    },
    /// The state of every node the resource manager knows (sent when it changes).
    Nodes(Vec<RmNode>),
    /// Jobs waiting or running under the resource manager that were not started
    /// through it (and not adopted since): submitted to it directly.
    Detected(Vec<DetectedJob>),
    /// A job submitted directly was suspended (`true`) or resumed in the resource
    /// manager.
    Suspended {
        job_id: String,
        pid: i32,
        suspended: bool,
    },
    /// A job submitted directly that was waiting when adopted now runs; or one
    /// started here that the manager took and has now started (its start date).
    Started {
        job_id: String,
        pid: i32,
        placement: Vec<crate::job::Allocation>,
        memory_per_processor: Option<u64>,
        start: Option<i64>,
    },
}

/// A node as the resource manager sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RmNode {
    pub id: String,
    /// `Down` or `Drained` when it takes no work there; `None` when it is usable.
    pub state: Option<crate::node::NodeState>,
    /// Why, as the resource manager says.
    pub reason: Option<String>,
    /// What it is (processors, memory, features, partition) when the resource manager
    /// is where the nodes come from: such a report is of all its nodes, so a node it
    /// describes that is not here is added, and one it no longer names is down.
    pub description: Option<crate::node::ReportedNode>,
}

/// A job the resource manager runs that was submitted to it directly.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectedJob {
    /// Its record (with its id there, `rm_job_id`: Slurm's job id).
    pub process: ProcessRecord,
    /// Its name there.
    pub name: String,
    /// The job of this service it runs, when its name says so (one whose start was not
    /// recorded, being abandoned): not an outside job.
    pub own_job: Option<String>,
    /// The system user it runs as (as the resource manager reports it).
    pub user: String,
    /// Waiting for its nodes (then it holds none).
    pub pending: bool,
    pub suspended: bool,
    /// The nodes it holds and the processors it holds on each.
    pub placement: Vec<crate::job::Allocation>,
    /// The memory it holds per processor (MB), when known.
    pub memory_per_processor: Option<u64>,
    /// When it started (seconds since the epoch), when known.
    pub start: Option<i64>,
}

/// Where a resource manager reports events (the engine's inbox).
pub type RmNotify = std::sync::Arc<dyn Fn(RmEvent) + Send + Sync>;

/// What takes the outcome of [`ResourceManager::start_then`].
pub type StartDone = Box<dyn FnOnce(Result<ProcessRecord, String>) + Send>;

pub trait ResourceManager: Send + Sync {
    /// The name jobs report as their resource manager.
    fn name(&self) -> &str;

    /// Whether it runs a job's command in a guest (`Launch::guest`, `vmUsagePolicy`).
    fn runs_jobs_in_guests(&self) -> bool {
        true
    }

    /// Starts the job; its end is reported later as [`RmEvent::Exited`].
    fn start(&self, launch: Launch) -> Result<ProcessRecord, String>;

    /// Starts the job as [`start`](Self::start) does, and hands the outcome to `done`
    /// (called once): at once, or later on another thread when the start is made
    /// elsewhere. Starts so handed over one after another are made in that order, and
    /// the next need not wait for the answer to the last.
    fn start_then(&self, launch: Launch, done: StartDone) {
        done(self.start(launch))
    }

    /// Signals the job's processes.
    fn signal(&self, process: &ProcessRecord, signal: JobSignal) -> Result<(), String>;

    /// After a restart: whether the recorded process still runs; if so, its end will be
    /// reported like that of a process started here.
    fn adopt(&self, job_id: &str, process: &ProcessRecord) -> bool;

    /// How many starts it may be given at once (each from a thread of its own). One
    /// keeps them in the engine's order.
    fn concurrent_starts(&self) -> usize {
        1
    }

    /// Whether the nodes are the resource manager's to tell ([`RmNode::description`]):
    /// with none configured, the engine then starts with none of its own (not this
    /// machine) and waits for the resource manager's.
    fn describes_nodes(&self) -> bool {
        false
    }

    /// Why no job can be started now (the resource manager does not answer), if so: the
    /// engine then starts none, and they wait in the queue rather than fail.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// Watches a job submitted to the resource manager directly (told of by
    /// [`RmEvent::Detected`], or recorded as such before a restart), now the engine's
    /// `job_id`, whose user is `user`: whether it still waits or runs as that user. Its
    /// start (when the engine has it `waiting`, even if it already runs) and its end
    /// are then reported.
    fn adopt_detected(
        &self,
        _job_id: &str,
        _user: &str,
        _process: &ProcessRecord,
        _waiting: bool,
    ) -> bool {
        false
    }

    /// After a restart: stops whatever a start that was never recorded left running.
    fn abandon(&self, job_id: &str);

    /// The end of the job's `process` is recorded durably: what was kept for a service
    /// that restarts before it is (the local shepherd's spool) may go.
    fn forget(&self, _job_id: &str, _process: &ProcessRecord) {}

    /// After a restart: how a recorded process that is gone ended, when that was
    /// recorded where the service finds it (the local shepherd's status file).
    fn recorded_exit(&self, _process: &ProcessRecord) -> Option<Exit> {
        None
    }

    /// After a restart, before any [`ResourceManager::adopt`] or
    /// [`ResourceManager::recorded_exit`]: the processes of every job recorded as
    /// running, so that what is asked about each can be read for all at once.
    fn recovering(&self, _processes: &[&ProcessRecord]) {}
}
