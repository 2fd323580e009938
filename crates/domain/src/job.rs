//! The one model of a job. The wire shapes of versions 1 and 2 are conversions done by
//! the api crate; the journal stores this model as JSON (serde).
//!
//! A job is what was asked for ([`JobSpec`], from the submission and later modifications)
//! plus what the scheduler made of it ([`JobStatus`]).

use std::collections::BTreeMap;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// `<schedulerName>.<seq>`: the v1 `id` and the v2 `name`.
    pub id: String,
    /// Submission order; also the number in the id.
    pub seq: u64,
    /// What was asked, shared: the sub-jobs of an array hold one copy between them, and
    /// a change makes the job a copy of its own (`Arc::make_mut`).
    pub spec: Arc<JobSpec>,
    pub status: JobStatus,
    /// Its part in a job array, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<Box<ArrayPart>>,
}

/// A job's part in a job array (spec 2.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ArrayPart {
    /// The master: it never runs itself; its state sums up its sub-jobs, which are
    /// made from it (and stored only once they change).
    Master(ArraySpec),
    /// A sub-job, named `<master>[<index>]`.
    Member { master: String, index: i64 },
}

/// The indices and rules of a job array.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArraySpec {
    /// The array's name (`customName` of the master and its sub-jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub ranges: Vec<IndexRange>,
    pub values: Vec<i64>,
    /// At most this many sub-jobs run at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot_limit: Option<u32>,
    /// When the first sub-job to end ends this way, the others are cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_on_first: Option<ArrayOutcome>,
    /// When any sub-job ends this way, the others are cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_on_any: Option<ArrayOutcome>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexRange {
    pub start: i64,
    pub end: i64,
    pub increment: i64,
}

/// How a sub-job ended, for cancellation policies: success is completion code 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArrayOutcome {
    Failure,
    Success,
}

impl ArraySpec {
    /// The most sub-jobs one array may have.
    pub const MAX_SIZE: usize = 1_000_000;

    /// Every index, ascending, each once (ranges and values together).
    pub fn indices(&self) -> Vec<i64> {
        self.indices_up_to(Self::MAX_SIZE)
    }

    /// The indices, ascending, each once; ranges stop adding once there are more than
    /// `bound`, so that what a request asks costs no more than the bound to find out.
    fn indices_up_to(&self, bound: usize) -> Vec<i64> {
        let mut indices = self.values.clone();
        for range in &self.ranges {
            let mut i = range.start;
            while i <= range.end && indices.len() <= bound {
                indices.push(i);
                i = match i.checked_add(range.increment.max(1)) {
                    Some(next) => next,
                    None => break,
                };
            }
        }
        indices.sort_unstable();
        indices.dedup();
        indices
    }

    /// What is wrong with it, by field, if anything, for arrays of at most `max_size`
    /// sub-jobs.
    pub fn problems(&self, max_size: usize) -> Vec<String> {
        let mut problems = Vec::new();
        if self.ranges.is_empty() && self.values.is_empty() {
            problems.push("indexRanges or indexValues: one of them is required".into());
        }
        for (i, r) in self.ranges.iter().enumerate() {
            if r.start < 0 || r.end < r.start || r.increment < 1 {
                problems.push(format!(
                    "indexRanges[{i}]: needs 0 <= startIndex <= endIndex and increment >= 1 (got {}..{} by {})",
                    r.start, r.end, r.increment
                ));
            }
        }
        if let Some(i) = self.values.iter().position(|&v| v < 0) {
            problems.push(format!("indexValues[{i}]: indices are not negative"));
        }
        if self.slot_limit == Some(0) {
            problems.push("slotLimit: must be at least 1".into());
        }
        let max_size = max_size.min(Self::MAX_SIZE);
        if problems.is_empty() && self.indices_up_to(max_size).len() > max_size {
            problems.push(format!(
                "the array would have more than {max_size} sub-jobs (the limit: \
                 [scheduler.limits] max_array_size)"
            ));
        }
        problems
    }
}

/// What the submitter asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSpec {
    /// The submitter's name for the job (v1 `name`, v2 `customName`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_name: Option<String>,
    /// The system user the job runs as, when the submission named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos_requested: Option<String>,
    /// The class (queue).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_class: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// Holds asked for at submission (only `User` is allowed there).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<Hold>,
    #[serde(skip_serializing_if = "is_zero")]
    pub user_priority: i64,
    pub command_file: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub arguments: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "is_false")]
    pub environment_requested: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin_path: Option<String>,
    pub request: ResourceRequest,
    /// Wall-time limit in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earliest_start: Option<Seconds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Seconds>,
    /// Fields the engine records and reports but does not act on (yet).
    #[serde(skip_serializing_if = "Extra::is_empty")]
    pub extra: Extra,
}

/// [`SpecExtra`] boxed, and absent when empty: most jobs name none of it, and a job's
/// size is what a million jobs in memory cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extra(Option<Box<SpecExtra>>);

static NO_EXTRA: std::sync::LazyLock<SpecExtra> = std::sync::LazyLock::new(SpecExtra::default);

impl Extra {
    pub fn is_empty(&self) -> bool {
        self.0.as_deref().is_none_or(|e| *e == SpecExtra::default())
    }

    /// Drops the box when everything in it is empty (after a parser filled it in).
    pub fn shrink(&mut self) {
        if self.is_empty() {
            self.0 = None;
        }
    }
}

impl std::ops::Deref for Extra {
    type Target = SpecExtra;

    fn deref(&self) -> &SpecExtra {
        self.0.as_deref().unwrap_or(&NO_EXTRA)
    }
}

impl std::ops::DerefMut for Extra {
    fn deref_mut(&mut self) -> &mut SpecExtra {
        self.0.get_or_insert_with(Default::default)
    }
}

impl Serialize for Extra {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let extra = SpecExtra::deserialize(deserializer)?;
        Ok(if extra == SpecExtra::default() {
            Extra(None)
        } else {
            Extra(Some(Box::new(extra)))
        })
    }
}

/// Resources asked for: `task_count` tasks of `processors_per_task` processors each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceRequest {
    pub task_count: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks_per_node: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_count: Option<u32>,
    pub processors_per_task: u32,
    /// Megabytes per task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_per_task: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_per_task: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_per_task: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// `features` must all be present (AND, the default) or any one of them (OR).
    #[serde(skip_serializing_if = "is_false")]
    pub features_any: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub features_excluded: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Generic resources per task, by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub generic_resources: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes_requested: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes_excluded: Vec<String>,
}

impl Default for ResourceRequest {
    fn default() -> Self {
        ResourceRequest {
            task_count: 1,
            tasks_per_node: None,
            node_count: None,
            processors_per_task: 1,
            memory_per_task: None,
            disk_per_task: None,
            swap_per_task: None,
            features: Vec::new(),
            features_any: false,
            features_excluded: Vec::new(),
            architecture: None,
            os: None,
            partition: None,
            generic_resources: BTreeMap::new(),
            nodes_requested: Vec::new(),
            nodes_excluded: Vec::new(),
        }
    }
}

impl ResourceRequest {
    pub fn total_processors(&self) -> u64 {
        u64::from(self.task_count) * u64::from(self.processors_per_task)
    }
}

/// Submission fields kept and reported as given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpecExtra {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submit_host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_group: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub email_addresses: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub email_types: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epilog_script: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prolog_script: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rm_extension: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_fail_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm_usage_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_requested: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<Dependency>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<Attribute>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partition_access_list: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub virtual_containers: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub generic_attributes: Vec<String>,
    /// What a system job does (it runs no process of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_task: Option<crate::vm::SystemTask>,
    /// Submitted to the resource manager directly (Slurm's `sbatch` by hand), not here:
    /// the service shows it, counts what it holds and may cancel it, nothing more.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rm_detected: bool,
    /// Reported by a resource-manager plugin (`plugin/<id>`): work another resource
    /// manager runs, a record here that each of the plugin's reports brings up to date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dependency {
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribute {
    pub name: String,
    pub comparator: Option<String>,
    pub value: Option<String>,
}

/// What the scheduler made of the job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobStatus {
    pub state: JobState,
    /// Holds in force now.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<Hold>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_reason: Option<String>,
    /// Why the job cannot run, when it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<Block>,
    /// The API user who submitted it (after `proxy-user`).
    pub submitter: String,
    /// The system user that runs (or would run) it.
    pub exec_user: String,
    pub dates: JobDates,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_code: Option<i32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocation: Vec<Allocation>,
    pub counts: JobCounts,
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub cpu_seconds: f64,
    /// Seconds spent running in earlier starts (requeued runs), suspended time excluded.
    #[serde(skip_serializing_if = "is_zero")]
    pub earlier_active_seconds: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub suspended_seconds: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspended_since: Option<Seconds>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<JobMessage>,
    /// The running process, so that a restarted service can find it again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessRecord>,
    /// The id an external resource manager gave its last run (Slurm's job id); kept
    /// once the run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rm_job_id: Option<String>,
    /// The VM of its user a `REQUIREVM` job runs in: the VM holds the resources, so
    /// the job's allocation (the VM's node) takes none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_vm: Option<String>,
    /// The process is being stopped, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ending: Option<EndIntent>,
    #[serde(skip_serializing_if = "is_zero")]
    pub system_priority: i64,
}

/// Why a running job's process is being stopped: decides the state it ends in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndIntent {
    /// Cancelled: it is already Vacated; the exit only completes the record.
    Cancel,
    /// Requeued: back to Idle once the process is gone.
    Requeue,
    /// Over its wall time: Vacated.
    WallTime,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobDates {
    pub submit: Seconds,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<Seconds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion: Option<Seconds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<Seconds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_canceled: Option<Seconds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_preempted: Option<Seconds>,
    pub last_updated: Seconds,
    pub state_updated: Seconds,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobCounts {
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub start: u32,
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub cancel: u32,
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub requeue: u32,
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub preempt: u32,
}

/// Tasks placed on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    pub node: String,
    pub tasks: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobMessage {
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    pub created: Seconds,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    /// A short category, e.g. `NoResources`, `Hold`.
    pub kind: String,
    pub message: String,
}

/// A started process: enough to signal it, and to tell it from a later process that
/// reused its pid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub pid: i32,
    /// Start time of the process in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
    /// The job's spool directory (exit status of a re-adopted process).
    pub spool: String,
    /// The job's id in an external resource manager (Slurm's job id), whose records
    /// have `pid` = that id and `start_ticks` = 0. Absent for local processes (and in
    /// records stored before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rm_job_id: Option<String>,
}

/// The job life cycle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobState {
    #[default]
    Idle,
    Hold,
    Blocked,
    Starting,
    Running,
    Suspended,
    Completed,
    Removed,
    Vacated,
}

impl JobState {
    pub const ALL: [JobState; 9] = [
        JobState::Idle,
        JobState::Hold,
        JobState::Blocked,
        JobState::Starting,
        JobState::Running,
        JobState::Suspended,
        JobState::Completed,
        JobState::Removed,
        JobState::Vacated,
    ];

    /// The version-2 spelling (`Idle`); version 1 is its upper case.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Idle => "Idle",
            JobState::Hold => "Hold",
            JobState::Blocked => "Blocked",
            JobState::Starting => "Starting",
            JobState::Running => "Running",
            JobState::Suspended => "Suspended",
            JobState::Completed => "Completed",
            JobState::Removed => "Removed",
            JobState::Vacated => "Vacated",
        }
    }

    pub fn upper(self) -> &'static str {
        match self {
            JobState::Idle => "IDLE",
            JobState::Hold => "HOLD",
            JobState::Blocked => "BLOCKED",
            JobState::Starting => "STARTING",
            JobState::Running => "RUNNING",
            JobState::Suspended => "SUSPENDED",
            JobState::Completed => "COMPLETED",
            JobState::Removed => "REMOVED",
            JobState::Vacated => "VACATED",
        }
    }

    /// A final state: the job will never run again.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Removed | JobState::Vacated
        )
    }

    /// Holding resources: a process exists (or is being started).
    pub fn is_running(self) -> bool {
        matches!(
            self,
            JobState::Starting | JobState::Running | JobState::Suspended
        )
    }

    /// Waiting in the queue (not started, not final).
    pub fn is_queued(self) -> bool {
        matches!(self, JobState::Idle | JobState::Hold | JobState::Blocked)
    }
}

/// Hold types. Users may place and release only `User` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Hold {
    User,
    System,
    Batch,
    Defer,
}

impl Hold {
    pub const ALL: [Hold; 4] = [Hold::User, Hold::System, Hold::Batch, Hold::Defer];

    /// The version-2 spelling (`User`); version 1 is upper case.
    pub fn as_str(self) -> &'static str {
        match self {
            Hold::User => "User",
            Hold::System => "System",
            Hold::Batch => "Batch",
            Hold::Defer => "Defer",
        }
    }

    pub fn upper(self) -> &'static str {
        match self {
            Hold::User => "USER",
            Hold::System => "SYSTEM",
            Hold::Batch => "BATCH",
            Hold::Defer => "DEFER",
        }
    }

    /// Either spelling, any case.
    pub fn parse(text: &str) -> Option<Hold> {
        Hold::ALL
            .into_iter()
            .find(|h| h.as_str().eq_ignore_ascii_case(text.trim()))
    }
}

/// Job flags the engine knows (decisions.md); others are refused.
pub const KNOWN_FLAGS: &[&str] = &[
    "ARRAYMASTER",
    "ARRAYJOB",
    "GLOBALQUEUE",
    "RESTARTABLE",
    "SUSPENDABLE",
    "PREEMPTABLE",
    "PREEMPTEE",
    "PREEMPTOR",
    "CANCELONFIRSTFAILURE",
    "CANCELONFIRSTSUCCESS",
    "CANCELONANYFAILURE",
    "CANCELONANYSUCCESS",
    "SYSTEMJOB",
    "VMTRACKING",
];

/// The two output streams of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Stdout,
    Stderr,
}

impl Job {
    /// The job's user as reported (and indexed): the user it named, else its submitter.
    pub fn user(&self) -> &str {
        self.spec.user.as_deref().unwrap_or(&self.status.submitter)
    }

    /// Where a stream goes: the path asked for, relative to the working directory, or
    /// [`Job::default_output_name`] there.
    pub fn output_path(&self, output: Output) -> std::path::PathBuf {
        let directory = std::path::Path::new(self.spec.working_directory.as_deref().unwrap_or("/"));
        let given = match output {
            Output::Stdout => &self.spec.stdout_path,
            Output::Stderr => &self.spec.stderr_path,
        };
        match given {
            Some(path) => directory.join(path),
            None => directory.join(self.default_output_name(output)),
        }
    }

    /// The file name a stream gets when no path is given, or a directory: `<name>.o<n>`
    /// / `<name>.e<n>` (`job` when the name is no plain file name).
    pub fn default_output_name(&self, output: Output) -> String {
        let letter = match output {
            Output::Stdout => 'o',
            Output::Stderr => 'e',
        };
        let base = self.spec.custom_name.as_deref().filter(|n| {
            !n.is_empty()
                && n.len() <= 100
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        });
        // Sub-jobs of an array share the number: the index keeps their files apart.
        let number = match self.array_member() {
            Some((_, index)) => format!("{}-{index}", self.seq),
            None => self.seq.to_string(),
        };
        format!("{}.{letter}{number}", base.unwrap_or("job"))
    }

    /// The array this job is the master of.
    pub fn array_spec(&self) -> Option<&ArraySpec> {
        match self.array.as_deref() {
            Some(ArrayPart::Master(spec)) => Some(spec),
            _ => None,
        }
    }

    /// The master's id and this sub-job's index, for a sub-job.
    pub fn array_member(&self) -> Option<(&str, i64)> {
        match self.array.as_deref() {
            Some(ArrayPart::Member { master, index }) => Some((master, *index)),
            _ => None,
        }
    }

    /// Sub-job `index` of this master, as submitted (nothing has happened to it yet).
    pub fn array_member_at(&self, index: i64) -> Job {
        self.array_member_with(index, &self.array_member_spec())
    }

    /// What every sub-job of this master asks: the master's submission, flagged as a
    /// sub-job's. Made once per array and shared by its sub-jobs, so that a sub-job
    /// costs a small record whatever the submission carries.
    pub fn array_member_spec(&self) -> Arc<JobSpec> {
        let mut spec = JobSpec::clone(&self.spec);
        spec.flags
            .retain(|f| f != "ARRAYMASTER" && !f.starts_with("CANCELON"));
        spec.flags.push("ARRAYJOB".into());
        Arc::new(spec)
    }

    /// Sub-job `index` of this master, asking `spec` ([`Job::array_member_spec`]).
    pub fn array_member_with(&self, index: i64, spec: &Arc<JobSpec>) -> Job {
        let spec = spec.clone();
        let submit = self.status.dates.submit;
        Job {
            id: format!("{}[{index}]", self.id),
            seq: self.seq,
            status: JobStatus {
                state: if spec.holds.is_empty() {
                    JobState::Idle
                } else {
                    JobState::Hold
                },
                holds: spec.holds.clone(),
                hold_reason: (!spec.holds.is_empty()).then(|| "requested at submission".into()),
                submitter: self.status.submitter.clone(),
                exec_user: self.status.exec_user.clone(),
                dates: JobDates {
                    submit,
                    hold: (!spec.holds.is_empty()).then_some(submit),
                    last_updated: submit,
                    state_updated: submit,
                    ..Default::default()
                },
                ..Default::default()
            },
            spec,
            array: Some(Box::new(ArrayPart::Member {
                master: self.id.clone(),
                index,
            })),
        }
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.spec.flags.iter().any(|f| f == flag)
    }

    /// Seconds the job has run, suspended time excluded, at `now`.
    pub fn active_seconds(&self, now: Seconds) -> i64 {
        let current = match (self.status.dates.start, self.status.state.is_running()) {
            (Some(start), true) => {
                let suspended_now = self.status.suspended_since.map_or(0, |s| now - s);
                (now - start - suspended_now - self.status.suspended_seconds).max(0)
            }
            (Some(start), false) => {
                let end = self.status.dates.completion.unwrap_or(now);
                (end - start - self.status.suspended_seconds).max(0)
            }
            (None, _) => 0,
        };
        self.status.earlier_active_seconds + current
    }

    /// Seconds from submission to the (last) start, or to now while queued.
    pub fn queued_seconds(&self, now: Seconds) -> i64 {
        let until = match self.status.dates.start {
            Some(start) => start,
            None => self.status.dates.completion.unwrap_or(now),
        };
        (until - self.status.dates.submit).max(0)
    }

    /// Suspended seconds, including the current suspension.
    pub fn suspended_seconds(&self, now: Seconds) -> i64 {
        self.status.suspended_seconds + self.status.suspended_since.map_or(0, |s| now - s)
    }

    /// Processors dedicated to the job.
    pub fn processors(&self) -> u64 {
        self.spec.request.total_processors()
    }

    pub fn node_ids(&self) -> impl Iterator<Item = &str> {
        self.status.allocation.iter().map(|a| a.node.as_str())
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ranges: &[(i64, i64, i64)], values: &[i64]) -> ArraySpec {
        ArraySpec {
            ranges: ranges
                .iter()
                .map(|&(start, end, increment)| IndexRange {
                    start,
                    end,
                    increment,
                })
                .collect(),
            values: values.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn array_indices_are_the_sorted_union_of_ranges_and_values() {
        assert_eq!(spec(&[(1, 9, 4)], &[20, 5, 1]).indices(), [1, 5, 9, 20]);
        assert_eq!(spec(&[(3, 3, 1), (0, 2, 1)], &[]).indices(), [0, 1, 2, 3]);
        assert!(
            spec(&[(0, 99_999, 1)], &[])
                .problems(ArraySpec::MAX_SIZE)
                .is_empty()
        );
        assert_eq!(spec(&[(0, 99_999, 1)], &[]).indices().len(), 100_000);
    }

    #[test]
    fn array_problems_name_the_field() {
        let problems = |s: ArraySpec| s.problems(ArraySpec::MAX_SIZE).join("; ");
        assert!(problems(spec(&[], &[])).contains("indexRanges or indexValues"));
        assert!(problems(spec(&[(5, 1, 1)], &[])).contains("indexRanges[0]"));
        assert!(problems(spec(&[(0, 5, 0)], &[])).contains("increment"));
        assert!(problems(spec(&[], &[1, -2])).contains("indexValues[1]"));
        assert!(problems(spec(&[(0, i64::MAX, 1)], &[])).contains("more than 1000000"));
        // A lower limit; many huge ranges cost no more than the limit to refuse.
        let huge = spec(&[(0, i64::MAX, 1); 64], &[]);
        assert!(
            huge.problems(1001)
                .join("; ")
                .contains("more than 1001 sub-jobs")
        );
        assert!(spec(&[(0, 1000, 1)], &[]).problems(1001).is_empty());
        let mut limited = spec(&[], &[1]);
        limited.slot_limit = Some(0);
        assert!(problems(limited).contains("slotLimit"));
    }

    #[test]
    fn a_sub_job_is_its_master_as_submitted() {
        let mut master = Job {
            id: "D.4".into(),
            seq: 4,
            spec: JobSpec {
                custom_name: Some("sweep".into()),
                flags: vec![
                    "ARRAYMASTER".into(),
                    "CANCELONANYFAILURE".into(),
                    "RESTARTABLE".into(),
                ],
                holds: vec![Hold::User],
                ..Default::default()
            }
            .into(),
            status: JobStatus {
                state: JobState::Running,
                submitter: "ann".into(),
                ..Default::default()
            },
            array: Some(Box::new(ArrayPart::Master(spec(&[], &[7])))),
        };
        master.status.dates.submit = 100;
        let member = master.array_member_at(7);
        assert_eq!(member.id, "D.4[7]");
        assert_eq!(member.array_member(), Some(("D.4", 7)));
        assert_eq!(member.spec.flags, ["RESTARTABLE", "ARRAYJOB"]);
        assert_eq!(
            member.status.state,
            JobState::Hold,
            "not the master's summary"
        );
        assert_eq!(member.status.dates.submit, 100);
        assert!(member.output_path(Output::Stdout).ends_with("sweep.o4-7"));
        // The sub-jobs of one array hold one copy of what was asked.
        let shared = master.array_member_spec();
        let (a, b) = (
            master.array_member_with(1, &shared),
            master.array_member_with(2, &shared),
        );
        assert!(Arc::ptr_eq(&a.spec, &b.spec));
        assert_eq!(a.spec, member.spec);
        eprintln!(
            "a job record is {} bytes, what it asks {} more, shared by an array's sub-jobs",
            std::mem::size_of::<Job>(),
            std::mem::size_of::<JobSpec>()
        );
    }
}
