//! Work handed to the resource manager ahead of its nodes' freeing, so that it starts
//! each job the moment the job's nodes are free rather than once the engine has heard
//! of the end before and handed it over (`ResourceManager::takes_work_ahead`: Slurm).
//!
//! After each pass, the jobs still waiting that the plan starts next are planned again
//! as if every node had its processors and memory `1 + depth` times over, the jobs
//! running and those already ahead holding what they hold: those that fit are started
//! as any other (the lien on their account is taken, their nodes charged, so that the
//! pass gives that room to nobody else) and handed over pinned to the nodes they got,
//! in priority order. Such a job stays `Starting` (no start date, no wall time counted)
//! until the resource manager reports that it started it ([`RmEvent::Started`]): its
//! start date is the manager's. The engine's plan stays the truth: a job ahead that is
//! cancelled or requeued is withdrawn from the resource manager (`scancel`), and one
//! whose nodes stop taking work is withdrawn and waits again.
//!
//! [`RmEvent::Started`]: crate::rm::RmEvent::Started

use std::collections::HashMap;

use super::core::Engine;
use crate::job::{Job, JobState, ProcessRecord};
use crate::place;
use crate::policy::planner::{Decision, Planner};
use crate::rm::JobSignal;

impl Engine {
    /// Hands the jobs the plan starts next to the resource manager ahead of their
    /// nodes' freeing, as far as it takes them.
    pub(super) fn hand_ahead(&mut self) {
        let depth = self.rm.takes_work_ahead();
        if depth == 0 || self.queue.is_empty() || self.rm.unavailable().is_some() {
            return;
        }
        let now = self.now();
        let times = depth.saturating_add(1);
        let mut nodes = self.nodes.all().clone();
        for node in &mut nodes {
            node.config.processors = node.config.processors.saturating_mul(times);
            node.config.memory = node.config.memory.map(|m| m.saturating_mul(times.into()));
        }
        let set_asides = self.reservations.set_asides(&self.nodes);
        let mut planner = Planner::new(self.config.policy.backfill, now, &nodes, Vec::new())
            .with_reservation_depth(self.config.policy.reservation_depth)
            .with_set_asides(set_asides);
        if planner.exhausted() {
            return;
        }
        let mut order = {
            let book = self.shared.jobs.read().unwrap();
            self.queue
                .walk(&self.config.policy, &self.usage, &book, now)
        };
        let held_by_containers = self.containers.held_jobs();
        let mut array_starts = HashMap::new();
        let mut starts = Vec::new();
        while let Some(position) = order.next(&self.queue, planner.room_left()) {
            if planner.exhausted() {
                break;
            }
            if self.queue.preemptors().contains(&position) {
                continue; // they make room for themselves
            }
            let job = self.job_at(position);
            if !self.may_start(position, &job, now, &held_by_containers, &mut array_starts) {
                continue;
            }
            let access = self.reservations.access_of(&job);
            if let Decision::Start(placed) =
                planner.consider_with(&job.spec.request, job.spec.duration, &access)
            {
                self.slot_free(&job, &mut array_starts, true);
                starts.push((position, place::allocation(&nodes, &placed)));
            }
        }
        drop(planner);
        for (position, allocation) in starts {
            let id = self.job_at(position).id.clone();
            // Refused for lack of funds: the next pass says why.
            if self.begin_start(position, allocation).is_ok() {
                self.launchers.ahead.insert(id);
            }
        }
    }

    /// Before a pass, jobs ahead the plan would now place otherwise go back to the
    /// queue, withdrawn from the resource manager: those whose nodes no longer all take
    /// work (down, drained: it would hold them there for as long), and those that fit
    /// now on other nodes, free while theirs are not (a node back in service, the
    /// queue run dry): the pass places them again.
    pub(super) fn replan_ahead(&mut self) {
        let room_now = self
            .nodes
            .all()
            .iter()
            .any(|n| n.accepts_jobs() && n.free_processors() > 0);
        let ahead: Vec<String> = self.launchers.ahead.iter().cloned().collect();
        for id in ahead {
            let job = self.position(&id).map(|p| (p, self.job_at(p)));
            let Some((position, job)) = job.filter(|(_, j)| j.status.state == JobState::Starting)
            else {
                self.launchers.ahead.remove(&id);
                continue;
            };
            let stranded = job.node_ids().any(|node| {
                self.nodes
                    .index_of(node)
                    .is_none_or(|i| !self.nodes.all()[i].accepts_jobs())
            });
            let elsewhere = || match place::place(&job.spec.request, self.nodes.all()) {
                place::Fit::Now(allocation) => allocation
                    .iter()
                    .all(|a| !job.node_ids().any(|own| own == a.node)),
                _ => false,
            };
            if !(stranded || room_now && job.status.process.is_some() && elsewhere()) {
                continue;
            }
            // Only while it waits there: one Slurm started meanwhile runs on.
            let waiting = match &job.status.process {
                Some(process) => self.rm.withdraw_waiting(process),
                None => Ok(true),
            };
            match waiting.and_then(|waiting| {
                if waiting {
                    self.withdraw_ahead(position, &job, false)?;
                }
                Ok(waiting)
            }) {
                Ok(true) => {
                    self.update(position, |job| job.status.state = JobState::Idle);
                }
                Ok(false) => {}
                Err(e) => eprintln!("drover: cannot withdraw job {id} from its nodes: {e}"),
            }
        }
    }

    /// Takes a `Starting` job back: cancelled in the resource manager if it was handed
    /// ahead and `cancel` says so (nothing changes when that fails), what it holds given back; its caller
    /// says what it becomes. (One whose hand-over is not answered yet is stopped when
    /// the answer comes: `launcher`.)
    pub(super) fn withdraw_ahead(
        &mut self,
        position: usize,
        job: &Job,
        cancel: bool,
    ) -> Result<(), String> {
        if let Some(process) = job.status.process.as_ref().filter(|_| cancel) {
            self.rm
                .signal(process, JobSignal::Terminate { grace_seconds: 0 })?;
        }
        self.launchers.ahead.remove(&job.id);
        self.launchers.early_starts.remove(&job.id);
        self.launchers.unrecorded.remove(&job.id);
        self.charge_nodes(job, false);
        self.update(position, |job| {
            job.status.allocation.clear();
            job.status.process = None;
            job.status.rm_job_id = None;
        });
        Ok(())
    }

    /// The resource manager took a job ahead: it waits there, `Starting`, for its nodes.
    pub(super) fn taken_ahead(&mut self, position: usize, process: ProcessRecord) {
        let pid = process.pid;
        let job = self.update(position, |job| {
            job.status.rm_job_id = process.rm_job_id.clone();
            job.status.process = Some(process);
            job.clone()
        });
        if let Some((started_pid, start)) = self.launchers.early_starts.remove(&job.id)
            && started_pid == pid
        {
            self.ahead_started(&job.id, pid, start);
        }
    }

    /// The resource manager started a job: if it was ahead, it runs from then (the
    /// manager's date). Answers whether it was one of those.
    pub(super) fn ahead_started(&mut self, job_id: &str, pid: i32, start: Option<i64>) -> bool {
        if !self.launchers.ahead.contains(job_id) {
            return false;
        }
        let Some(position) = self.position(job_id) else {
            return true;
        };
        let job = self.job_at(position);
        if job.status.state != JobState::Starting {
            return true;
        }
        if job.status.process.is_none() && self.in_flight(job_id) {
            // Heard before the hand-over's answer: applied with it.
            self.launchers
                .early_starts
                .insert(job_id.to_string(), (pid, start));
            return true;
        }
        if job.status.process.as_ref().map(|p| p.pid) != Some(pid) {
            return true;
        }
        self.launchers.ahead.remove(job_id);
        let now = self.now();
        let start = start.filter(|s| *s > 0 && *s <= now).unwrap_or(now);
        self.update(position, |job| {
            job.status.state = JobState::Running;
            job.status.dates.start = Some(start);
            job.status.counts.start += 1;
        });
        let nodes = job.node_ids().collect::<Vec<_>>().join(",");
        self.emit(
            "jobstart",
            "job",
            job_id,
            None,
            vec![("nodes".into(), nodes)],
        );
        true
    }

    /// After a restart, a job whose start was recorded and not its running: one handed
    /// ahead (its process recorded) is adopted and still waits for its start, or waits
    /// in the queue again if that process ended without running (withdrawn there); one
    /// whose hand-over was not answered takes the process it made, if the resource
    /// manager holds one as the job's (now, or after its `unrecorded_grace`), else
    /// whatever it left is stopped and it waits again.
    pub(super) fn recover_starting(&mut self, position: usize, job: &Job, now: i64) {
        // Withdrawn there (a re-plan, a cancel) and the crash lost its record: it never
        // ran, and waits again.
        if job
            .status
            .process
            .as_ref()
            .is_some_and(|p| self.rm.never_ran(p))
        {
            self.update(position, |job| {
                job.status.state = JobState::Idle;
                job.status.allocation.clear();
                job.status.process = None;
                job.status.rm_job_id = None;
                job.status.in_vm = None;
            });
            return;
        }
        if job.status.process.is_some() {
            self.recover_running(position, job, now);
            if self.job_at(position).status.state == JobState::Starting {
                self.launchers.ahead.insert(job.id.clone());
            }
            return;
        }
        // It holds its nodes while it may still be handed over.
        self.charge_nodes(job, true);
        self.queue.keep_running(position);
        if self.take_unrecorded(position, job) {
            return;
        }
        let grace = self.rm.unrecorded_grace();
        if grace.is_zero() {
            return self.abandon_unrecorded(position, job);
        }
        // A hand-over the stopped service made may still be under way there (Slurm
        // makes a job it received after its `sbatch` died): it is looked for again
        // once that is over, and only then made again.
        eprintln!(
            "drover: the start of {} was recorded without its process; looked for again in {} s",
            job.id,
            grace.as_secs()
        );
        self.launchers
            .unrecorded
            .insert(job.id.clone(), std::time::Instant::now() + grace);
    }

    /// Takes the process the resource manager holds as the job's, if any (watched as
    /// one handed ahead: its start is reported).
    fn take_unrecorded(&mut self, position: usize, job: &Job) -> bool {
        let Some(process) = self.rm.adopt_unrecorded(&job.id, job.user()) else {
            return false;
        };
        self.update(position, |job| {
            job.status.rm_job_id = process.rm_job_id.clone();
            job.status.process = Some(process);
        });
        self.launchers.ahead.insert(job.id.clone());
        true
    }

    /// Stops whatever the job's unrecorded start left, and puts it back in the queue.
    fn abandon_unrecorded(&mut self, position: usize, job: &Job) {
        self.rm.abandon(&job.id);
        self.nodes.charge(job, false);
        self.update(position, |job| {
            job.status.state = JobState::Idle;
            job.status.allocation.clear();
            job.status.in_vm = None;
        });
    }

    /// The starts recorded without their process whose wait is over: each takes the
    /// process of its name the resource manager now holds, or is made again.
    pub(super) fn resolve_unrecorded(&mut self) {
        let now = std::time::Instant::now();
        let due: Vec<String> = self
            .launchers
            .unrecorded
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        // Slurm does not answer: what it holds cannot be known yet; looked for once it does.
        if self.rm.unavailable().is_some() {
            let later = now + self.rm.unrecorded_grace();
            for id in due {
                self.launchers.unrecorded.insert(id, later);
            }
            return;
        }
        for id in due {
            self.launchers.unrecorded.remove(&id);
            let Some(position) = self.position(&id) else {
                continue;
            };
            let job = self.job_at(position);
            // Cancelled or requeued meanwhile (its nodes went back then).
            if job.status.state != JobState::Starting || job.status.process.is_some() {
                continue;
            }
            if !self.take_unrecorded(position, &job) {
                self.abandon_unrecorded(position, &job);
            }
        }
    }

    /// A job of this service's name that the resource manager holds and that is not
    /// the one recorded for it (`RmEvent::Detected` with `own_job`): a start of a
    /// service that stopped before recording it, or one withdrawn here whose
    /// cancellation was lost with it. The plan is the truth: it is taken as the job's
    /// only while the job still waits for the process of a start recorded without one;
    /// otherwise (the job has another, is being handed over, waits in the queue, is
    /// held or over) it is cancelled, so that nothing runs twice. One another user
    /// named so is not this service's: left alone.
    pub(super) fn own_job_found(&mut self, position: usize, found: &crate::rm::DetectedJob) {
        let job = self.job_at(position);
        if found.user != job.user() {
            return;
        }
        if job.status.rm_job_id.is_some() && job.status.rm_job_id == found.process.rm_job_id {
            return;
        }
        if self.launchers.unrecorded.remove(&job.id).is_some()
            && job.status.state == JobState::Starting
            && job.status.process.is_none()
        {
            if self.rm.watch_found(&job.id, &found.process) {
                self.update(position, |job| {
                    job.status.rm_job_id = found.process.rm_job_id.clone();
                    job.status.process = Some(found.process.clone());
                });
                self.launchers.ahead.insert(job.id.clone());
            } else {
                self.abandon_unrecorded(position, &job);
            }
            return;
        }
        let slurm_id = found.process.rm_job_id.as_deref().unwrap_or("?");
        eprintln!(
            "drover: cancelling {slurm_id}, a job of {}'s name that is not its own",
            job.id
        );
        if let Err(e) = self
            .rm
            .signal(&found.process, JobSignal::Terminate { grace_seconds: 0 })
        {
            eprintln!("drover: cannot cancel {slurm_id}: {e}");
        }
    }
}
