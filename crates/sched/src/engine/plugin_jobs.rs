//! Jobs a resource-manager plugin reports (the Native type's `getJobs`): work another
//! resource manager runs, shown as jobs of the book as Slurm's outside jobs are.
//!
//! They are records: what they hold is their nodes' external load (the same report's
//! processors), so they are never queued, planned, placed, changed or cancelled here
//! (their manager does that), and no lien or charge is made for them. Each report decides
//! their state: a job it names for the first time is added (`RM_DETECTED`, its user the
//! report's `UNAME` when that is a plain name, else the plugin's user), a known one
//! follows the state reported, and one it no longer names has ended (`Completed`, its
//! message saying so). A report names at most [`MAX_REPORTED_JOBS`] live jobs. After a
//! restart they are left as they were until the next report.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::core::Engine;
use crate::job::{Job, JobDates, JobMessage, JobSpec, JobState, JobStatus, ResourceRequest};
use crate::request::{ReportedJob, Requester};

/// The most live jobs one plugin's reports keep in the book: each is memory for ever.
pub const MAX_REPORTED_JOBS: usize = 10_000;
/// The longest id (there) a reported job keeps as its name.
const MAX_REPORTED_ID: usize = 256;

impl Engine {
    /// Brings the records of `reporter`'s jobs in line with its report; answers the ids
    /// of the jobs it added and how many ended.
    pub(crate) fn reported_jobs(
        &mut self,
        reporter: &str,
        jobs: Vec<ReportedJob>,
        by: &Requester,
    ) -> (Vec<String>, usize) {
        let mut known = self.live_reported(reporter);
        let mut live: usize = known.values().map(Vec::len).sum();
        let mut added = Vec::new();
        let mut ended = 0;
        // A job named twice in one report is one job.
        let mut seen = HashSet::new();
        for report in jobs {
            if !seen.insert(report.id.clone()) {
                continue;
            }
            match known.remove(&report.id) {
                Some(positions) => {
                    // Records of one id beyond the first (none should be) end below.
                    let (&first, extra) = positions.split_first().expect("never empty");
                    if !extra.is_empty() {
                        known.insert(report.id.clone(), extra.to_vec());
                    }
                    if self.follow_report(first, &report, by) {
                        ended += 1;
                    }
                }
                None if report.state.is_final() || report.id.len() > MAX_REPORTED_ID => {}
                None if live >= MAX_REPORTED_JOBS => {}
                None => {
                    live += 1;
                    added.push(self.add_reported(reporter, report, by));
                }
            }
        }
        for position in known.into_values().flatten() {
            let gone = ReportedJob {
                id: String::new(),
                user: None,
                state: JobState::Completed,
                placement: Vec::new(),
                completion_code: None,
            };
            self.follow_report(position, &gone, by);
            self.update(position, |job| {
                job.status.messages.push(JobMessage {
                    text: format!("{reporter} no longer reports this job"),
                    author: None,
                    created: job.status.dates.last_updated,
                });
            });
            ended += 1;
        }
        (added, ended)
    }

    /// The live jobs `reporter` reported, by their id there (oldest record first).
    fn live_reported(&self, reporter: &str) -> HashMap<String, Vec<usize>> {
        let book = self.shared.jobs.read().unwrap();
        let mut live: HashMap<String, Vec<usize>> = HashMap::new();
        for p in book.live_positions(None).iter().map(|p| p as usize) {
            let job = book.at(p);
            if job.spec.extra.reported_by.as_deref() == Some(reporter)
                && let Some(id) = &job.status.rm_job_id
            {
                live.entry(id.clone()).or_default().push(p);
            }
        }
        live
    }

    /// An administrator removes the record of a reported job (one its plugin no longer
    /// reports, say): it ends here; its manager is not told.
    pub(super) fn forget_reported(&mut self, position: usize, by: &Requester) -> String {
        let job = self.job_at(position);
        let reporter = job.spec.extra.reported_by.clone().unwrap_or_default();
        let gone = ReportedJob {
            id: String::new(),
            user: None,
            state: JobState::Removed,
            placement: Vec::new(),
            completion_code: None,
        };
        self.follow_report(position, &gone, by);
        let text = format!(
            "{} removed this record; {reporter} still runs the job if it reports it again",
            by.user
        );
        self.update(position, |job| {
            job.status.messages.push(JobMessage {
                text: text.clone(),
                author: None,
                created: job.status.dates.last_updated,
            });
        });
        format!("Job {} was removed", job.id)
    }

    /// Moves the job at `position` to the state reported; answers whether it ended.
    fn follow_report(&mut self, position: usize, report: &ReportedJob, by: &Requester) -> bool {
        let job = self.job_at(position);
        let from = job.status.state;
        if from == report.state {
            return false;
        }
        let now = self.now();
        let code = report.completion_code;
        self.update(position, |job| {
            job.status.state = report.state;
            if report.state.is_running() && job.status.dates.start.is_none() {
                job.status.dates.start = Some(now);
            }
            if report.state.is_final() {
                job.status.dates.completion = Some(now);
                job.status.completion_code = code;
            }
        });
        let event = match report.state {
            state if state.is_final() => "jobend",
            JobState::Suspended => "jobsuspend",
            JobState::Running if from == JobState::Suspended => "jobresume",
            JobState::Running => "jobstart",
            _ => "jobmodify",
        };
        let id = self.job_at(position).id.clone();
        self.emit(
            event,
            "job",
            &id,
            Some(by),
            vec![reported_detail(job.spec.extra.reported_by.as_deref())],
        );
        report.state.is_final()
    }

    /// Adds a record of a job `reporter` reports for the first time; answers its id.
    fn add_reported(&mut self, reporter: &str, report: ReportedJob, by: &Requester) -> String {
        let now = self.now();
        let seq = self.queue.take_seq();
        let id = format!("{}.{seq}", self.config.name);
        let user = report
            .user
            .filter(|u| plain_name(u))
            .unwrap_or_else(|| by.user.clone());
        let processors: u32 = report.placement.iter().map(|a| a.tasks).sum();
        let mut spec = JobSpec {
            custom_name: Some(report.id.clone()),
            user: Some(user.clone()),
            flags: vec!["RM_DETECTED".into()],
            request: ResourceRequest {
                task_count: processors.max(1),
                processors_per_task: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        spec.extra.rm_detected = true;
        spec.extra.reported_by = Some(reporter.to_string());
        let running = report.state.is_running();
        let job = Job {
            id: id.clone(),
            seq,
            spec: Arc::new(spec),
            status: JobStatus {
                state: report.state,
                submitter: user.clone(),
                exec_user: user,
                dates: JobDates {
                    submit: now,
                    start: running.then_some(now),
                    last_updated: now,
                    state_updated: now,
                    ..Default::default()
                },
                allocation: report.placement,
                rm_job_id: Some(report.id),
                ..Default::default()
            },
            array: None,
        };
        let nodes: Vec<String> = job.node_ids().map(str::to_string).collect();
        self.add_job(job);
        self.emit(
            if running { "jobstart" } else { "jobsubmit" },
            "job",
            &id,
            Some(by),
            vec![
                ("nodes".into(), nodes.join(",")),
                reported_detail(Some(reporter)),
            ],
        );
        id
    }
}

fn reported_detail(reporter: Option<&str>) -> (String, String) {
    (
        "reportedBy".into(),
        reporter.unwrap_or_default().to_string(),
    )
}

/// A user name as a report may give one: letters, digits, `.`, `_`, `-`, not first `-`.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}
