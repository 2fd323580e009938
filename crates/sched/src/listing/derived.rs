//! Values a job's wire shape shows that no field of the job holds: worked out from its
//! state, priorities and request. Both the narrow fields of a list and the HTTP layer's
//! rendering of a whole job read them here, so that the two always agree.

use crate::job::{Job, JobState};

/// `queueStatus`: where the job is in the queue (lower case; version 1 upper-cases it).
pub fn queue_status(state: JobState) -> &'static str {
    match state {
        JobState::Idle => "eligible",
        JobState::Hold | JobState::Blocked => "blocked",
        JobState::Starting | JobState::Running | JobState::Suspended => "active",
        JobState::Completed | JobState::Removed | JobState::Vacated => "completed",
    }
}

/// Where the job is headed: running jobs are expected to complete, queued ones to run.
pub fn expected_state(job: &Job) -> JobState {
    match job.status.state {
        JobState::Idle | JobState::Starting => JobState::Running,
        JobState::Running | JobState::Suspended => JobState::Completed,
        other => other,
    }
}

/// The priority the job starts (and runs) with: its system priority, then its user's.
pub fn start_priority(job: &Job) -> i64 {
    job.status
        .system_priority
        .saturating_mul(1000)
        .saturating_add(job.spec.user_priority)
}

/// The partitions a job may run in: the one it asked for, else its access list, else
/// all (`ALL`).
pub fn effective_partitions(job: &Job) -> &[String] {
    static ALL: std::sync::LazyLock<[String; 1]> = std::sync::LazyLock::new(|| ["ALL".into()]);
    match &job.spec.request.partition {
        Some(partition) => std::slice::from_ref(partition),
        None if job.spec.extra.partition_access_list.is_empty() => &*ALL,
        None => &job.spec.extra.partition_access_list,
    }
}

/// The memory all the job's tasks asked for (0 when it asked for none), as the usage
/// figures multiply it.
pub fn requested_memory(job: &Job) -> f64 {
    let request = &job.spec.request;
    request
        .memory_per_task
        .map_or(0.0, |m| m as f64 * f64::from(request.task_count))
}
