//! Preemption: a PREEMPTOR job that cannot start stops PREEMPTEE jobs until it fits.
//! Stopped jobs are requeued (RESTARTABLE ones, when the policy says requeue) or
//! cancelled; their resources come back when their processes end, and the preemptor
//! starts in the pass after that.

use std::collections::HashMap;

use super::core::Engine;
use crate::job::{EndIntent, Job, JobMessage, JobState};
use crate::place::{self, Room};
use crate::policy::Preemption;

impl Engine {
    /// Makes room for the waiting preemptor at `position`, if stopping preemptees can.
    pub(crate) fn preempt_for(&mut self, position: usize) {
        let mode = self.config.policy.preemption;
        if mode == Preemption::Off {
            return;
        }
        let preemptor = self.job_at(position);
        // Resources of preemptees already being stopped count as free: they are coming.
        let mut coming: HashMap<usize, (u32, u64)> = HashMap::new();
        let mut candidates: Vec<std::sync::Arc<Job>> = Vec::new();
        for &running in self.queue.running() {
            let job = self.job_at(running);
            // A job in its user's VM frees nothing of the node: its VM holds it.
            if !job.has_flag("PREEMPTEE") || job.id == preemptor.id || job.status.in_vm.is_some() {
                continue;
            }
            if job.status.ending.is_some() {
                self.add_held(&mut coming, &job);
            } else if job.status.state == JobState::Running {
                candidates.push(job);
            }
        }
        // The most recently started lose the least work.
        candidates.sort_by_key(|j| std::cmp::Reverse((j.status.dates.start, j.seq)));
        let mut chosen = Vec::new();
        let mut candidates = candidates.into_iter();
        loop {
            if self.fits_with(&preemptor, &coming) {
                break;
            }
            let Some(victim) = candidates.next() else {
                return; // even stopping every preemptee would not make room
            };
            self.add_held(&mut coming, &victim);
            chosen.push(victim);
        }
        for victim in chosen {
            self.stop_preempted(&victim, &preemptor.id, mode);
        }
    }

    fn add_held(&self, coming: &mut HashMap<usize, (u32, u64)>, job: &Job) {
        let request = &job.spec.request;
        for allocation in &job.status.allocation {
            if let Some(node) = self.nodes.index_of(&allocation.node) {
                let entry = coming.entry(node).or_default();
                entry.0 += allocation.tasks * request.processors_per_task;
                entry.1 += u64::from(allocation.tasks) * request.memory_per_task.unwrap_or(0);
            }
        }
    }

    fn fits_with(&self, job: &Job, coming: &HashMap<usize, (u32, u64)>) -> bool {
        let nodes = self.nodes.all();
        let accepting = (0..nodes.len()).filter(|&i| nodes[i].accepts_jobs());
        place::first_fit(&job.spec.request, nodes, accepting, |i| {
            let (processors, memory) = coming.get(&i).copied().unwrap_or_default();
            Room {
                processors: nodes[i].free_processors() + processors,
                memory: nodes[i].free_memory().map(|m| m + memory),
            }
        })
        .is_some()
    }

    fn stop_preempted(&mut self, victim: &Job, preemptor: &str, mode: Preemption) {
        let Some(position) = self.position(&victim.id) else {
            return;
        };
        if let Some(process) = &victim.status.process
            && let Err(e) = self.terminate(process)
        {
            eprintln!("drover: cannot preempt job {}: {e}", victim.id);
            return;
        }
        let now = self.now();
        let requeue = mode == Preemption::Requeue && victim.has_flag("RESTARTABLE");
        self.update(position, |job| {
            let status = &mut job.status;
            status.counts.preempt += 1;
            status.dates.last_preempted = Some(now);
            if requeue {
                status.ending = Some(EndIntent::Requeue);
                status.counts.requeue += 1;
            } else {
                // As a cancellation: Vacated now, the exit completes the record.
                status.ending = Some(EndIntent::Cancel);
                status.state = JobState::Vacated;
                status.dates.completion = Some(now);
                status.dates.last_canceled = Some(now);
                status.counts.cancel += 1;
            }
            status.messages.push(JobMessage {
                text: format!(
                    "Preempted for job {preemptor}: {}",
                    if requeue { "requeued" } else { "cancelled" }
                ),
                author: None,
                created: now,
            });
        });
        // Its resources stay taken until the process is gone.
        self.queue.keep_running(position);
        self.emit(
            if requeue { "jobrequeue" } else { "jobcancel" },
            "job",
            &victim.id,
            None,
            vec![("preemptedBy".into(), preemptor.to_string())],
        );
    }
}
