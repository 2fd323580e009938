//! What the resource manager reports besides ends: its nodes' states, and jobs
//! submitted to it directly (Slurm's `sbatch` by hand).
//!
//! A node the resource manager calls down or drained takes no new work here (its
//! state shows it) until the resource manager makes it usable again; an
//! administrator's state set here still wins. A job submitted directly becomes a job
//! of the book with the next job number (so no id is ever given twice), its user the
//! resource manager's (checked to be a safe name), `RM_DETECTED` among its flags and
//! `rm_detected` in its spec: it is never queued, planned, changed or requeued here
//! (Idle while it waits there, out of the queue); it holds its nodes' processors while
//! it runs (from [`RmEvent::Started`](crate::rm::RmEvent) when it waited), follows its
//! suspensions there (`RmEvent::Suspended`); its user or an administrator may cancel it
//! (through the resource manager, waiting or running); its end is read back like any
//! other.

use std::collections::HashSet;
use std::sync::Arc;

use super::core::Engine;
use crate::job::{Job, JobDates, JobSpec, JobState, JobStatus, ResourceRequest};
use crate::node::{NodeState, ReportedNode};
use crate::rm::{DetectedJob, RmNode};

/// The longest name kept of a job submitted directly.
const MAX_DETECTED_NAME: usize = 256;

impl Engine {
    /// The resource manager's view of the nodes: a change is shown, and judged by the
    /// next pass. Reports that describe their nodes are of all the resource manager's
    /// nodes: a node described that is not here is added (and kept with the reported
    /// nodes, so it is here after a restart even while the resource manager does not
    /// answer), and a node described before that is missing now is down.
    pub(crate) fn rm_nodes(&mut self, reported: Vec<RmNode>) {
        let mut named = HashSet::new();
        let mut reporter = None;
        for report in reported {
            let index = match report.description {
                Some(description) => {
                    reporter = Some(description.reporter.clone());
                    match self.rm_described_node(description) {
                        Some(index) => index,
                        None => continue,
                    }
                }
                None => match self.nodes.index_of(&report.id) {
                    Some(index) => index,
                    None => continue,
                },
            };
            named.insert(index);
            self.set_rm_state(index, report.state, report.reason);
        }
        let Some(reporter) = reporter else {
            return;
        };
        let gone: Vec<usize> = (0..self.nodes.all().len())
            .filter(|index| !named.contains(index))
            .filter(|&index| {
                self.nodes
                    .reported(index)
                    .is_some_and(|r| r.reporter == reporter)
            })
            .collect();
        for index in gone {
            self.set_rm_state(
                index,
                Some(NodeState::Down),
                Some(format!("{reporter} no longer reports this node")),
            );
        }
    }

    /// Adds or describes again a node the resource manager describes; answers its
    /// index (None when it may not be added).
    fn rm_described_node(&mut self, description: ReportedNode) -> Option<usize> {
        let index = match self.nodes.index_of(&description.id) {
            Some(index) => index,
            None => match self.add_reported_node(&description) {
                Ok(index) => index,
                Err(why) => {
                    eprintln!(
                        "drover: node {} of {}: {why}",
                        description.id, description.reporter
                    );
                    return None;
                }
            },
        };
        if self.describe_node(index, description) {
            self.needs_schedule = true;
        }
        Some(index)
    }

    pub(super) fn set_rm_state(
        &mut self,
        index: usize,
        state: Option<NodeState>,
        reason: Option<String>,
    ) {
        let node = &self.nodes.all()[index];
        if node.rm_state == state && node.rm_reason == reason {
            return;
        }
        let node = self.nodes.node_mut(index);
        node.rm_state = state;
        node.rm_reason = reason.clone();
        let shown = node.state();
        let id = node.config.id.clone();
        self.needs_schedule = true;
        let mut details = vec![
            ("fields".to_string(), "rmState".to_string()),
            ("state".to_string(), shown.as_str().to_string()),
        ];
        if let Some(reason) = reason {
            details.push(("reason".into(), reason));
        }
        self.emit("nodemodify", "node", &id, None, details);
    }

    /// Jobs the resource manager runs that were not started here: each one not yet
    /// known becomes a job of the book.
    pub(crate) fn rm_detected(&mut self, detected: Vec<DetectedJob>) {
        if self.degraded.is_some() {
            return; // told again later, once changes can be recorded
        }
        // Those running here (ours and those submitted directly), and those submitted
        // directly that wait (a scan of the book: only when there is news).
        let known: HashSet<String> = {
            let book = self.shared.jobs.read().unwrap();
            let running = self.queue.running().iter().map(|&p| book.at(p));
            let waiting = book
                .all()
                .iter()
                .filter(|j| j.spec.extra.rm_detected && !j.status.state.is_final());
            running
                .chain(waiting)
                .filter_map(|j| j.status.process.as_ref()?.rm_job_id.clone())
                .collect()
        };
        for job in detected {
            let Some(rm_job_id) = job.process.rm_job_id.clone() else {
                continue;
            };
            if known.contains(&rm_job_id) {
                continue;
            }
            // One of ours whose start was not recorded (being abandoned).
            if let Some(id) = job.own_job.as_deref()
                && self.position(id).is_some()
            {
                continue;
            }
            self.add_detected(job);
        }
    }

    fn add_detected(&mut self, detected: DetectedJob) {
        let now = self.now();
        let id = format!("{}.{}", self.config.name, self.queue.next_seq());
        if !self
            .rm
            .adopt_detected(&id, &detected.user, &detected.process, detected.pending)
        {
            return; // ended, or no longer that user's
        }
        let seq = self.queue.take_seq();
        debug_assert_eq!(id, format!("{}.{seq}", self.config.name));
        let processors: u32 = detected.placement.iter().map(|a| a.tasks).sum();
        let name: String = detected.name.chars().take(MAX_DETECTED_NAME).collect();
        let mut spec = JobSpec {
            custom_name: Some(name),
            user: Some(detected.user.clone()),
            flags: vec!["RM_DETECTED".into()],
            request: ResourceRequest {
                task_count: processors.max(1),
                processors_per_task: 1,
                memory_per_task: detected.memory_per_processor,
                ..Default::default()
            },
            ..Default::default()
        };
        spec.extra.rm_detected = true;
        let start = detected
            .start
            .filter(|s| *s > 0 && *s <= now)
            .unwrap_or(now);
        let state = if detected.pending {
            JobState::Idle
        } else if detected.suspended {
            JobState::Suspended
        } else {
            JobState::Running
        };
        let job = Job {
            id: id.clone(),
            seq,
            spec: Arc::new(spec),
            status: JobStatus {
                state,
                submitter: detected.user.clone(),
                exec_user: detected.user.clone(),
                dates: JobDates {
                    submit: start,
                    start: (!detected.pending).then_some(start),
                    last_updated: now,
                    state_updated: now,
                    ..Default::default()
                },
                allocation: detected.placement,
                rm_job_id: detected.process.rm_job_id.clone(),
                process: Some(detected.process),
                suspended_since: detected.suspended.then_some(now),
                ..Default::default()
            },
            array: None,
        };
        self.nodes.charge(&job, true);
        let nodes: Vec<String> = job.node_ids().map(str::to_string).collect();
        let rm_job_id = job.status.rm_job_id.clone().unwrap_or_default();
        let position = self.add_job(job.clone());
        self.requeue_index(position, &job);
        self.emit(
            if detected.pending {
                "jobsubmit"
            } else {
                "jobstart"
            },
            "job",
            &id,
            None,
            vec![
                ("nodes".into(), nodes.join(",")),
                ("rmJobId".into(), rm_job_id),
                ("rmDetected".into(), "true".into()),
            ],
        );
    }
}

impl Engine {
    /// A job submitted directly that waited when it was adopted now runs in the
    /// resource manager: it holds its nodes from now on.
    pub(crate) fn rm_started(
        &mut self,
        job_id: &str,
        pid: i32,
        placement: Vec<crate::job::Allocation>,
        memory_per_processor: Option<u64>,
        start: Option<i64>,
    ) {
        let Some(position) = self.position(job_id) else {
            return;
        };
        let job = self.job_at(position);
        let same_process = job.status.process.as_ref().map(|p| p.pid) == Some(pid);
        let now = self.now();
        let start = start.filter(|s| *s > 0 && *s <= now);
        if !job.spec.extra.rm_detected {
            // One started here, which the resource manager ran once it could (Slurm
            // may start a job a moment after taking it): its start is the manager's.
            if same_process
                && job.status.state == JobState::Running
                && let Some(start) = start
                && job.status.dates.start != Some(start)
            {
                self.update(position, |job| job.status.dates.start = Some(start));
            }
            return;
        }
        if !(job.status.state == JobState::Idle && same_process) {
            return;
        }
        let start = start.unwrap_or(now);
        let nodes: Vec<String> = placement.iter().map(|a| a.node.clone()).collect();
        let processors: u32 = placement.iter().map(|a| a.tasks).sum();
        self.update(position, |job| {
            let spec = Arc::make_mut(&mut job.spec);
            spec.request.task_count = processors.max(1);
            spec.request.memory_per_task = memory_per_processor;
            job.status.state = JobState::Running;
            job.status.allocation = placement;
            job.status.dates.start = Some(start);
        });
        let job = self.job_at(position);
        self.nodes.charge(&job, true);
        self.emit(
            "jobstart",
            "job",
            job_id,
            None,
            vec![
                ("nodes".into(), nodes.join(",")),
                ("rmDetected".into(), "true".into()),
            ],
        );
    }
}

impl Engine {
    /// A job submitted directly was suspended or resumed in the resource manager.
    pub(crate) fn rm_suspended(&mut self, job_id: &str, pid: i32, suspended: bool) {
        let Some(position) = self.position(job_id) else {
            return;
        };
        let job = self.job_at(position);
        let (from, to) = if suspended {
            (JobState::Running, JobState::Suspended)
        } else {
            (JobState::Suspended, JobState::Running)
        };
        let ours = job.spec.extra.rm_detected
            && job.status.state == from
            && job.status.ending.is_none()
            && job.status.process.as_ref().map(|p| p.pid) == Some(pid);
        if !ours {
            return;
        }
        let now = self.now();
        self.update(position, |job| {
            job.status.state = to;
            if suspended {
                job.status.suspended_since = Some(now);
            } else if let Some(since) = job.status.suspended_since.take() {
                job.status.suspended_seconds += now - since;
            }
        });
        let event = if suspended { "jobsuspend" } else { "jobresume" };
        self.emit(
            event,
            "job",
            job_id,
            None,
            vec![("rmDetected".into(), "true".into())],
        );
    }
}
