//! Jobs that run in an existing VM of their user (`vmUsagePolicy` REQUIREVM).
//!
//! Such a job is never placed on nodes: it waits (`Queue::in_user_vms`, oldest first)
//! until a VM fits it: one its user owns that runs, was not made for a job (a
//! `CREATEVM` job's VM is that job's), has no other job in it, and has the job's
//! processors and memory. It then starts as any job does (`begin_start`: its lien, its
//! start durable before its process), its allocation the VM's node, `in_vm` the VM, and
//! holds nothing of the node itself: the VM holds what it uses. Its process is `drover
//! guest-run` in that VM (`launch_in_vm`); its end leaves the VM running. While none
//! fits it shows why, and waits; dependencies, earliest start dates and container holds
//! are honoured as for any job.

use std::collections::{HashMap, HashSet};

use super::core::Engine;
use crate::job::{Allocation, Block, Job};
use crate::vm::{Vm, VmPhase};

impl Engine {
    /// Starts each waiting REQUIREVM job for which a VM of its user fits, oldest first.
    pub(super) fn start_jobs_in_user_vms(&mut self) {
        let now = self.now();
        let taken: HashSet<String> = {
            let book = self.shared.jobs.read().unwrap();
            self.queue
                .running()
                .iter()
                .filter_map(|&p| book.at(p).status.in_vm.clone())
                .collect()
        };
        let held_by_containers = self.containers.held_jobs();
        // The VMs a job may take, by owner: a pass costs the jobs and the VMs, not both
        // multiplied.
        let mut free: HashMap<String, Vec<Vm>> = HashMap::new();
        for vm in self.vms.all().iter() {
            if vm.phase == VmPhase::Running && vm.for_job.is_none() && !taken.contains(&vm.id) {
                free.entry(vm.owner.clone()).or_default().push(vm.clone());
            }
        }
        let waiting: Vec<usize> = self.queue.in_user_vms().iter().copied().collect();
        for position in waiting {
            let job = self.job_at(position);
            if job.spec.earliest_start.is_some_and(|t| t > now)
                || held_by_containers.contains(&job.id)
                || (!job.spec.extra.dependencies.is_empty()
                    && !self.dependencies_met(position, &job))
            {
                continue;
            }
            let theirs = free.get_mut(job.user());
            let Some(vm) = theirs.and_then(|vms| {
                let at = vms.iter().position(|vm| fits(vm, &job))?;
                Some(vms.remove(at))
            }) else {
                self.show_waiting_for_vm(position, &job);
                continue;
            };
            let allocation = vec![Allocation {
                node: vm.node.clone(),
                tasks: job.spec.request.task_count,
            }];
            self.update(position, |job| job.status.in_vm = Some(vm.id.clone()));
            if let Err(reason) = self.begin_start(position, allocation) {
                self.update(position, |job| job.status.in_vm = None);
                self.block_for_funds(position, reason);
                free.entry(vm.owner.clone()).or_default().push(vm);
            }
        }
    }

    fn show_waiting_for_vm(&mut self, position: usize, job: &Job) {
        let request = &job.spec.request;
        let memory = request
            .memory_per_task
            .map(|m| format!(" and {} MB", m * u64::from(request.task_count)))
            .unwrap_or_default();
        let block = Block {
            kind: "NoResources".into(),
            message: format!(
                "waiting for a running VM of {} with {} processors{memory} and no other job",
                job.user(),
                request.total_processors()
            ),
        };
        if job.status.block.as_ref() != Some(&block) {
            self.update(position, |job| job.status.block = Some(block));
        }
    }
}

/// Whether `job` may run in `vm`: its user's, running, not made for a job, as large.
fn fits(vm: &Vm, job: &Job) -> bool {
    let request = &job.spec.request;
    let memory = request
        .memory_per_task
        .map_or(0, |m| m.saturating_mul(u64::from(request.task_count)));
    vm.owner == job.user()
        && vm.phase == VmPhase::Running
        && vm.for_job.is_none()
        && u64::from(vm.processors) >= request.total_processors()
        && vm.memory >= memory
}
