//! Rebuilding the engine's state from the store: at start, and after a failed journal
//! write (the store is the truth; memory may have run ahead of it).
//!
//! A job recorded as running is adopted when its process still lives; one whose process
//! ended meanwhile ends with the exit status its shepherd recorded; otherwise (nothing
//! recorded) it is requeued when RESTARTABLE, else ends `Vacated`. A start that was recorded but never finished goes back to
//! the queue, and any process it left is killed. Array sub-jobs that were never stored
//! are made again from their master.

use std::collections::HashMap;
use std::sync::Arc;

use drover_query::ListQuery;
use drover_store::{Body, Write};

use super::core::{Engine, JOBS, NODES};
use crate::job::{EndIntent, Job, JobMessage, JobState};
use crate::node::NodeOverrides;
use crate::policy::Runs;
use crate::policy::priority::Usage;

impl Engine {
    /// Loads every job and node override; running jobs are adopted again if their
    /// process lives, else requeued (RESTARTABLE) or ended as Vacated.
    pub(crate) fn load(&mut self) -> Result<(), String> {
        // What this step changed joins its writes first, read from the book it changed
        // (the positions name other jobs in the book read again).
        self.write_unwritten_jobs();
        let mut jobs: Vec<Job> = self.load_all(JOBS, "job")?;
        jobs.sort_by_key(|j| j.seq);
        let jobs = with_array_members(jobs);
        let overrides: HashMap<String, NodeOverrides> = self
            .store
            .list(NODES, &ListQuery::default())
            .map_err(|e| format!("cannot read the nodes: {e}"))?
            .items
            .into_iter()
            .filter_map(|d| serde_json::from_value(d.body).ok().map(|o| (d.id, o)))
            .collect();

        // Start from a clean slate, but never give a job number twice: the numbers of a
        // failed batch's jobs stay taken, in this run and the next (recorded once the store
        // takes writes again; until then the engine stays degraded).
        let stored_next = jobs
            .last()
            .map_or(1, |j| j.seq + 1)
            .max(self.remembered_number(JOBS)? + 1);
        let taken_next = self.queue.next_seq();
        if taken_next > stored_next {
            self.store
                .write(&[number_taken(JOBS, taken_next - 1)])
                .map_err(|e| format!("cannot record the job numbers taken: {e}"))?;
        }
        self.queue.reset(stored_next.max(taken_next));
        self.arrays.clear();
        self.restore_reported_nodes()?;
        self.nodes.reset(&overrides);
        self.credentials.clear();
        self.credentials
            .remember_configured(&self.config.credentials);
        // The jobs move into the book; what follows reads them from there (shared, not
        // copied: a copy of every job doubled what a restart holds).
        let jobs: Vec<Arc<Job>> = {
            let mut book = self.shared.jobs.write().unwrap();
            *book = crate::book::JobBook::new();
            for job in jobs {
                book.push(job);
            }
            book.publish_all();
            (0..book.len()).map(|p| book.at(p).clone()).collect()
        };

        (self.usage, self.runs) = history_of(&jobs, self.config.policy.fairshare_half_life);
        let running: Vec<&crate::job::ProcessRecord> = jobs
            .iter()
            .filter(|j| j.spec.extra.system_task.is_none())
            .filter_map(|j| j.status.process.as_ref())
            .collect();
        self.rm.recovering(&running);
        let now = self.now();
        for (position, job) in jobs.iter().enumerate() {
            self.credentials
                .remember_job(&job.spec, &job.status.submitter);
            self.recover(position, job, now);
        }
        self.load_reservations()?;
        self.load_containers()?;
        self.load_vms()?;
        let masters: Vec<usize> = (0..jobs.len())
            .filter(|&p| jobs[p].array_spec().is_some())
            .collect();
        for master in masters {
            self.track_array(master);
        }
        self.needs_schedule = true;
        Ok(())
    }

    /// Brings a loaded job's state in line with a fresh start.
    fn recover(&mut self, position: usize, job: &Job, now: i64) {
        if job.spec.extra.system_task.is_some() {
            return; // its VM's recovery hands its work over again (`load_vms`)
        }
        if job.spec.extra.reported_by.is_some() {
            return; // a record of another manager's work: its plugin's next report decides
        }
        match job.status.state {
            // Submitted to the resource manager directly, waiting there.
            JobState::Idle if job.spec.extra.rm_detected => {
                self.recover_running(position, job, now)
            }
            JobState::Idle => self.requeue_index(position, job),
            // Node configuration may have changed: judge blocked jobs again.
            JobState::Blocked => self.update(position, |job| {
                job.status.state = JobState::Idle;
                job.status.block = None;
            }),
            JobState::Starting => {
                // Its start was recorded but its process may never have been made,
                // or was made and not recorded: stop any such orphan.
                self.rm.abandon(&job.id);
                self.update(position, |job| {
                    job.status.state = JobState::Idle;
                    job.status.allocation.clear();
                    job.status.in_vm = None;
                });
            }
            JobState::Running | JobState::Suspended => self.recover_running(position, job, now),
            JobState::Vacated if job.status.ending.is_some() => {
                self.recover_running(position, job, now)
            }
            _ => {}
        }
    }

    /// A job that had a process when the service stopped.
    fn recover_running(&mut self, position: usize, job: &Job, now: i64) {
        let adopted = |engine: &Self, process| {
            if job.spec.extra.rm_detected {
                let waiting = job.status.state == JobState::Idle;
                engine
                    .rm
                    .adopt_detected(&job.id, job.user(), process, waiting)
            } else {
                engine.rm.adopt(&job.id, process)
            }
        };
        if let Some(process) = &job.status.process
            && adopted(self, process)
        {
            self.charge_nodes(job, true);
            if job.status.state != JobState::Idle {
                self.queue.keep_running(position);
            }
            if job.status.ending.is_some() {
                // It was being stopped; the SIGKILL after the grace period went with the
                // old service, so start again.
                let _ = self.terminate(process);
            }
            return;
        }
        // It ended while the service was down, and its shepherd recorded how: it ends
        // as if the service had seen it (Completed with its code, charged) — unless it
        // was being requeued, which goes on below.
        if let Some(process) = &job.status.process
            && job.status.ending != Some(EndIntent::Requeue)
            && let Some(exit) = self.rm.recorded_exit(process)
        {
            // `exited` gives back what the job holds: hold it first (nodes were reset).
            self.nodes.charge(job, true);
            self.exited(&job.id, process.pid, exit);
            return;
        }
        // Its run is over: charge it (up to now, the end being unknown).
        let seconds = (job.active_seconds(now) - job.status.earlier_active_seconds).max(0);
        let charged = self.accountant.end(job, seconds, now);
        self.journal.write_all(charged);
        // A job being requeued goes back to the queue as asked; one being cancelled is
        // already final; one over its wall time ends; others requeue if they may.
        let ending = job.status.ending;
        let requeue = match ending {
            Some(EndIntent::Requeue) => true,
            Some(EndIntent::Cancel) | Some(EndIntent::WallTime) => false,
            None => job.has_flag("RESTARTABLE"),
        };
        self.update(position, |job| {
            let status = &mut job.status;
            status.process = None;
            status.allocation.clear();
            status.ending = None;
            status.suspended_since = None;
            if ending == Some(EndIntent::Cancel) {
                return; // already final; the process is gone
            }
            if requeue {
                status.state = if status.holds.is_empty() {
                    JobState::Idle
                } else {
                    JobState::Hold
                };
                status.dates.start = None;
                status.counts.requeue += 1;
                status.messages.push(JobMessage {
                    text:
                        "The service restarted and the job's process was gone; the job was requeued"
                            .into(),
                    author: None,
                    created: now,
                });
            } else {
                status.state = JobState::Vacated;
                status.dates.completion = Some(now);
                status.messages.push(JobMessage {
                    text: "The service restarted and the job's process was gone; the job was ended"
                        .into(),
                    author: None,
                    created: now,
                });
            }
        });
    }
}

impl Engine {
    /// Every document of `collection` read as `T`; one that cannot be read (written by a
    /// newer or broken version) is reported and skipped rather than stopping the start.
    pub(crate) fn load_all<T: serde::de::DeserializeOwned>(
        &self,
        collection: &str,
        what: &str,
    ) -> Result<Vec<T>, String> {
        // One document at a time, straight from its text: a store of millions of jobs
        // held as parsed JSON all at once took more memory than the machine had.
        let mut loaded = Vec::new();
        self.store
            .visit_all(
                collection,
                &mut |id, body| match serde_json::from_str::<T>(body) {
                    Ok(item) => loaded.push(item),
                    Err(e) => eprintln!("drover: skipping unreadable {what} {id}: {e}"),
                },
            )
            .map_err(|e| format!("cannot read the {what}s: {e}"))?;
        Ok(loaded)
    }
}

/// Fair-share usage and users' last run times as the ended runs of `jobs` leave them,
/// oldest end first (a run counts for predictions if it ended by itself or at its limit).
fn history_of(jobs: &[Arc<Job>], half_life: crate::clock::Seconds) -> (Usage, Runs) {
    let mut usage = Usage::new(half_life);
    let mut runs = Runs::new();
    let mut finished: Vec<&Job> = jobs
        .iter()
        .map(|job| &**job)
        .filter(|j| j.status.dates.start.is_some() && j.status.dates.completion.is_some())
        .collect();
    finished.sort_by_key(|j| j.status.dates.completion);
    for job in finished {
        let end = job.status.dates.completion.unwrap_or_default();
        let used = job.processors() as f64 * job.active_seconds(end) as f64;
        usage.record(&job.status.exec_user, used, end);
        if matches!(job.status.state, JobState::Completed | JobState::Vacated) {
            let run = job.active_seconds(end) - job.status.earlier_active_seconds;
            runs.record(&job.status.exec_user, run);
        }
    }
    (usage, runs)
}

/// The number `n` of an id `<prefix>.<n>` (0 when there is none).
/// The collection of the last numbers given to containers, reservations and VMs, one
/// document per collection (`{"last": n}`), written with each creation: a number is
/// never given twice, even once the object is gone and the service restarted. Jobs'
/// only after a failed batch (see `load`).
pub(crate) const ID_NUMBERS: &str = "id_numbers";

impl Engine {
    /// Records, with this step's writes, that `number` was given in `collection`.
    pub(super) fn remember_number(&mut self, collection: &str, id: &str) {
        self.journal.write(number_taken(collection, id_number(id)));
    }

    /// The last number recorded as given in `collection` (0 if none).
    pub(super) fn remembered_number(&self, collection: &str) -> Result<u64, String> {
        let document = self
            .store
            .get(ID_NUMBERS, collection)
            .map_err(|e| format!("cannot read the numbers given: {e}"))?;
        Ok(document
            .and_then(|d| d.body.get("last").and_then(serde_json::Value::as_u64))
            .unwrap_or(0))
    }
}

/// The write recording that numbers up to `last` were given in `collection`. Jobs are
/// never deleted, so their last stored number is the last given, except for numbers taken
/// by a batch that failed: those are recorded by the reload after it.
fn number_taken(collection: &str, last: u64) -> Write {
    Write::Put {
        collection: ID_NUMBERS.into(),
        id: collection.into(),
        name: None,
        body: Body::from(serde_json::json!({ "last": last })),
    }
}

pub(crate) fn id_number(id: &str) -> u64 {
    id.rsplit_once('.')
        .and_then(|(_, n)| n.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Puts every array's sub-jobs right after their master, in index order: those stored
/// (something happened to them) as stored, the others made again from the master.
fn with_array_members(jobs: Vec<Job>) -> Vec<Job> {
    let mut stored: HashMap<String, Job> = HashMap::new();
    let mut others = Vec::with_capacity(jobs.len());
    for job in jobs {
        if job.array_member().is_some() {
            stored.insert(job.id.clone(), job);
        } else {
            others.push(job);
        }
    }
    let mut all = Vec::with_capacity(others.len() + stored.len());
    for job in others {
        let Some(spec) = job.array_spec() else {
            all.push(job);
            continue;
        };
        let indices = spec.indices();
        let master = job.clone();
        all.push(job);
        let shared = master.array_member_spec();
        for index in indices {
            let id = format!("{}[{index}]", master.id);
            let member = match stored.remove(&id) {
                // A stored sub-job asks what its master's others do: one copy of it.
                Some(mut member) if member.spec == shared => {
                    member.spec = shared.clone();
                    Some(member)
                }
                other => other,
            };
            let member = member.unwrap_or_else(|| {
                let mut member = master.array_member_with(index, &shared);
                if master.status.state.is_final() {
                    // A sub-job that never ran under a master that has ended was
                    // cancelled with it.
                    member.status.state = JobState::Removed;
                    member.status.dates.completion = master.status.dates.completion;
                }
                member
            });
            all.push(member);
        }
    }
    for id in stored.keys() {
        eprintln!("drover: skipping sub-job {id}: its array master is not stored");
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job of `user` asking for an hour, started at `start`, in `state` at `end`.
    fn ended(seq: u64, user: &str, start: i64, end: i64, state: JobState) -> Arc<Job> {
        let mut job = crate::policy::priority::tests::job(seq, 0, Some(3600), user);
        job.status.state = state;
        job.status.dates.start = Some(start);
        job.status.dates.completion = Some(end);
        Arc::new(job)
    }

    #[test]
    fn a_restart_predicts_from_the_last_runs_that_ended_by_themselves_or_at_their_limit() {
        let jobs = [
            ended(1, "ann", 0, 1000, JobState::Completed),
            // Ended last, but cancelled: its run tells nothing of ann's jobs.
            ended(2, "ann", 0, 5000, JobState::Removed),
            ended(3, "ann", 2000, 2100, JobState::Completed),
            ended(4, "ann", 1000, 1300, JobState::Vacated),
        ];
        let (_, runs) = history_of(&jobs, 3600);
        // The last two by end: 100 s (ended at 2100) and 300 s (at 1300).
        assert_eq!(runs.predict("ann", Some(3600)), Some(200));
        assert_eq!(runs.predict("bob", Some(3600)), Some(3600));
    }
}
