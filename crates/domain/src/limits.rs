//! What one ordinary user may ask of the scheduler (`[scheduler.limits]`): bounds on
//! what a request may cost everyone else. Callers whose permission covers everyone
//! (administrators, `Requester::over_all`) are not limited.

use serde::Deserialize;

use std::collections::BTreeMap;

use crate::job::ArraySpec;
use crate::reservation::AclRule;

/// A job's user priority lies within plus or minus this (Moab's range).
pub const USER_PRIORITY_BOUND: i64 = 1_000_000;
/// The most nodes, tasks per node or processors per task one request may name: past it
/// no machine has them, and the counts multiply within `u64`.
pub const MAX_REQUEST_COUNT: i64 = 1 << 20;
/// The most tasks one job may ask for.
pub const MAX_TASK_COUNT: i64 = 1 << 24;
/// The longest wall time a job may ask for, in seconds: past any date, and still within
/// `i64` when added to one.
pub const MAX_JOB_DURATION: i64 = i64::MAX / 2;
/// The most memory per task, in MB, the job a quote prices may name.
pub const MAX_QUOTED_MEMORY_PER_TASK: i64 = i64::MAX / 4;
/// The most processors one VM may have (and one task of a job a plugin submits).
pub const MAX_VM_PROCESSORS: u32 = 4096;

/// The longest message an ordinary user may add to a job, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// The most messages a change keeps on a job; the oldest go first.
pub const MAX_JOB_MESSAGES: usize = 50;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// The most sub-jobs one job array may have (Slurm's `MaxArraySize` is 1001).
    pub max_array_size: usize,
    /// The most jobs (array sub-jobs included) one user may have waiting to start.
    pub max_queued_jobs_per_user: usize,
    /// The largest job submission (or change) of an ordinary user, in bytes of its
    /// body, and the most its variables may add up to: with the queued-jobs limit, this
    /// bounds the memory one user's queue takes.
    pub max_submission_bytes: usize,
    /// The longest reservation an ordinary user may make, in seconds; 0 (the default):
    /// only administrators create reservations.
    pub user_reservation_max_seconds: i64,
    /// The most processors one reservation of an ordinary user may hold; none: no bound
    /// beyond the duration.
    pub user_reservation_max_processors: Option<u32>,
    /// The most reservations (current or to come) one ordinary user may have created.
    pub user_reservation_max_count: usize,
    /// The most virtual containers one ordinary user may have created.
    pub user_container_max_count: usize,
    /// The most VMs one ordinary user may have at once (each holds a host's processors
    /// and memory until it is destroyed).
    pub user_vm_max_count: usize,
    /// The most GB of extra disks (`storage`) one VM of an ordinary user may have.
    pub user_vm_max_storage_gb: u64,
    /// The most processors, and MB of memory, one ordinary user's VMs may hold in all.
    pub user_vm_max_processors: u32,
    pub user_vm_max_memory_mb: u64,
    /// The time to live of an ordinary user's VM that asks for none, in seconds; 0:
    /// none (it lives until destroyed).
    pub user_vm_default_time_to_live_seconds: i64,
    /// The most services (nested ones included) one ordinary user may have at once.
    pub user_service_max_count: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_array_size: 1001,
            max_queued_jobs_per_user: 10_000,
            max_submission_bytes: 64 * 1024,
            user_reservation_max_seconds: 0,
            user_reservation_max_processors: None,
            user_reservation_max_count: 4,
            user_container_max_count: 100,
            user_vm_max_count: 8,
            user_vm_max_storage_gb: 64,
            user_vm_max_processors: 16,
            user_vm_max_memory_mb: 32 * 1024,
            user_vm_default_time_to_live_seconds: 7 * 86_400,
            user_service_max_count: 64,
        }
    }
}

impl Limits {
    /// What is wrong with the configured limits.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.max_array_size == 0 || self.max_array_size > ArraySpec::MAX_SIZE {
            problems.push(format!(
                "max_array_size: must be between 1 and {}",
                ArraySpec::MAX_SIZE
            ));
        }
        if self.max_queued_jobs_per_user == 0 {
            problems.push("max_queued_jobs_per_user: must be at least 1".into());
        }
        if self.max_submission_bytes < 1024 {
            problems.push("max_submission_bytes: must be at least 1024".into());
        }
        if self.user_reservation_max_seconds < 0 {
            problems.push("user_reservation_max_seconds: must not be negative".into());
        }
        let ttl = self.user_vm_default_time_to_live_seconds;
        if !(0..=crate::vm::MAX_TIME_TO_LIVE).contains(&ttl) {
            problems.push(format!(
                "user_vm_default_time_to_live_seconds: must be from 0 to {}",
                crate::vm::MAX_TIME_TO_LIVE
            ));
        }
        problems
    }
}

/// The bytes of text a reservation or container holds of its users' (variables, ACL
/// rules, description): after an ordinary user's change, at most `max_submission_bytes`,
/// so that repeated changes cannot grow it without end.
pub fn carried_bytes(
    variables: &BTreeMap<String, String>,
    acl: &[AclRule],
    description: Option<&str>,
) -> usize {
    let variables: usize = variables.iter().map(|(k, v)| k.len() + v.len()).sum();
    let rules: usize = acl
        .iter()
        .map(|r| {
            r.kind.len()
                + r.value.len()
                + r.affinity.as_ref().map_or(0, String::len)
                + r.comparator.as_ref().map_or(0, String::len)
        })
        .sum();
    variables + rules + description.map_or(0, str::len)
}
