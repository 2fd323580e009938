//! The embedded ledger as the scheduler's accountant: a job's usage in the ledger's terms.

use std::sync::Arc;

use drover_accounting::model::Usage;
use drover_accounting::{AccountingError, Ledger};
use drover_sched::accountant::Accountant;
use drover_sched::clock::Seconds;
use drover_sched::job::Job;
use drover_store::Write;

pub struct LedgerAccountant(pub Arc<Ledger>);

/// What a job uses, for pricing: its processors, memory and generic resources for all its
/// tasks, its nodes, and its credentials.
pub fn usage_of(job: &Job) -> Usage {
    let request = &job.spec.request;
    let tasks = u64::from(request.task_count.max(1));
    Usage {
        user: job.user().to_string(),
        account: job.spec.account.clone(),
        qos: job.spec.qos_requested.clone(),
        class: job.spec.job_class.clone(),
        nodes: (job.status.allocation.len() as u64)
            .max(u64::from(request.node_count.unwrap_or(1)))
            .max(1),
        processors: job.processors(),
        memory: request.memory_per_task.unwrap_or(0) * tasks,
        disk: request.disk_per_task.unwrap_or(0) * tasks,
        swap: request.swap_per_task.unwrap_or(0) * tasks,
        generic_resources: request
            .generic_resources
            .iter()
            .map(|(name, amount)| (name.clone(), (amount * tasks as f64).ceil() as u64))
            .collect(),
        service: None,
    }
}

impl Accountant for LedgerAccountant {
    fn start(&self, job: &Job, now: Seconds) -> Result<Vec<Write>, String> {
        if !self.0.enabled() {
            return Ok(Vec::new());
        }
        self.0
            .hold(&job.id, &usage_of(job), job.spec.duration, now)
            .map_err(|e| match e {
                AccountingError::Invalid(reasons) => reasons.join("; "),
                other => other.to_string(),
            })
    }

    fn end(&self, job: &Job, seconds: i64, now: Seconds) -> Vec<Write> {
        if !self.0.enabled() {
            return Vec::new();
        }
        self.0.settle(&job.id, &usage_of(job), seconds, now)
    }

    fn reload(&self) -> Result<(), String> {
        if !self.0.enabled() {
            return Ok(());
        }
        self.0.reload()
    }
}
