//! Trace replay in virtual time (`drover replay`): the jobs of a trace go through the
//! real engine and policy code, stepped by this driver on a [`ManualClock`]; a resource
//! manager that runs nothing ends each job after its recorded run time (or its
//! requested time, if shorter: the wall-time limit). Nothing is stored.
//!
//! Traces: [`swf`] reads and writes them (and scales their load); [`workload`] draws
//! them from Lublin and Feitelson's model and [`models`] from Feitelson's 1996 and
//! Downey's 1997, with requested times from [`estimates`]; [`random`] is the seeded
//! generator, so that a seed always gives the same trace.

pub mod estimates;
pub mod models;
pub mod random;
pub mod swf;
pub mod workload;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover_query::{ListQuery, Page};
use drover_store::{CollectionSpec, Document, DocumentStore, StoreError, StoreInfo, Write};

use crate::clock::{ManualClock, Seconds};
use crate::engine::{Engine, EngineParts, SchedConfig};
use crate::events::DiscardEvents;
use crate::job::{JobSpec, ProcessRecord, ResourceRequest};
use crate::node::NodeConfig;
use crate::policy::Policy;
use crate::request::Requester;
use crate::rm::{Exit, JobSignal, Launch, ResourceManager};
use crate::sysuser::SystemUser;
use swf::Trace;

/// What a replay measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub jobs: usize,
    /// Seconds from submission to start, averaged.
    pub mean_wait: f64,
    /// max(1, (wait + run) / max(run, 10)), averaged.
    pub mean_bounded_slowdown: f64,
    pub max_wait: i64,
    /// Processor-seconds used over processor-seconds available from the first
    /// submission to the last end.
    pub utilization: f64,
    /// Seconds from the first submission to the last end.
    pub makespan: i64,
    /// Wall-clock time the replay took.
    pub elapsed: Duration,
    /// Each job's wait, in the trace's order.
    pub waits: Vec<Seconds>,
}

/// The machine of a replay: `nodes` nodes sharing `processors` processors.
pub fn machine(processors: u32, nodes: u32) -> Vec<NodeConfig> {
    let nodes = nodes.clamp(1, processors.max(1));
    (0..nodes)
        .map(|i| {
            let share = processors / nodes + u32::from(i < processors % nodes);
            NodeConfig::new(&format!("sim{i}"), share)
        })
        .collect()
}

/// Replays `trace` on `nodes` under `policy`; `progress` hears how many jobs ended.
pub fn replay(
    trace: &Trace,
    nodes: &[NodeConfig],
    policy: &Policy,
    progress: &mut dyn FnMut(usize),
) -> Result<Outcome, String> {
    let began = Instant::now();
    let first_submit = trace.jobs.first().map_or(0, |j| j.submit);
    let mut sim = Simulation::new(nodes, policy, first_submit)?;
    let total_processors: u64 = nodes.iter().map(|n| u64::from(n.processors)).sum();

    let jobs = &trace.jobs;
    let mut by_id: HashMap<String, usize> = HashMap::with_capacity(jobs.len());
    let mut started: Vec<Option<Seconds>> = vec![None; jobs.len()];
    let mut ended: Vec<Option<Seconds>> = vec![None; jobs.len()];
    let mut ends: BinaryHeap<Reverse<(Seconds, usize)>> = BinaryHeap::new();
    let mut next = 0;
    let mut finished = 0;
    loop {
        let next_submit = jobs.get(next).map(|j| j.submit);
        let next_end = ends.peek().map(|Reverse((t, _))| *t);
        let now = match (next_submit, next_end) {
            (Some(s), Some(e)) => s.min(e),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => break,
        };
        sim.clock.set(now);
        while let Some(&Reverse((t, index))) = ends.peek()
            && t == now
        {
            ends.pop();
            let id = format!("Sim.{}", index + 1);
            sim.engine.exited(
                &id,
                index as i32 + 1,
                Exit {
                    code: Some(0),
                    cpu_seconds: 0.0,
                    start_failure: None,
                },
            );
            ended[index] = Some(now);
            finished += 1;
            progress(finished);
        }
        while next < jobs.len() && jobs[next].submit == now {
            let job = &jobs[next];
            let id = sim
                .submit(job.processors, None, job.requested.max(1))
                .map_err(|e| format!("job {}: {e}", job.number))?;
            // The trace's user, whose history predicts the job's run time; a job of no
            // known user has no history but its own.
            sim.run_as(
                &id,
                match job.user {
                    Some(user) => format!("user {user}"),
                    None => format!("job {}", job.number),
                },
            );
            by_id.insert(id, next);
            next += 1;
        }
        sim.engine.schedule_if_due();
        sim.commit();
        for id in sim.rm.started.lock().unwrap().drain(..) {
            let index = by_id[&id];
            let job = &jobs[index];
            started[index] = Some(now);
            ends.push(Reverse((now + job.run.min(job.requested).max(0), index)));
        }
    }
    if finished < jobs.len() {
        return Err(format!(
            "{} job(s) never started (wider than the machine?)",
            jobs.len() - finished
        ));
    }

    let mut outcome = measure(jobs, &started, &ended, first_submit, total_processors);
    outcome.elapsed = began.elapsed();
    Ok(outcome)
}

/// The waits, slowdowns, utilization and makespan of a replay whose jobs started and
/// ended at `started` and `ended` (by index in `jobs`).
fn measure(
    jobs: &[swf::TraceJob],
    started: &[Option<Seconds>],
    ended: &[Option<Seconds>],
    first_submit: Seconds,
    total_processors: u64,
) -> Outcome {
    let mut outcome = Outcome {
        jobs: jobs.len(),
        mean_wait: 0.0,
        mean_bounded_slowdown: 0.0,
        max_wait: 0,
        utilization: 0.0,
        makespan: 0,
        elapsed: Duration::ZERO,
        waits: Vec::with_capacity(jobs.len()),
    };
    let mut used = 0.0;
    let mut last_end = first_submit;
    for (index, job) in jobs.iter().enumerate() {
        let (start, end) = (
            started[index].unwrap_or(job.submit),
            ended[index].unwrap_or(job.submit),
        );
        let wait = start - job.submit;
        let run = end - start;
        outcome.mean_wait += wait as f64;
        outcome.mean_bounded_slowdown += ((wait + run) as f64 / run.max(10) as f64).max(1.0);
        outcome.max_wait = outcome.max_wait.max(wait);
        outcome.waits.push(wait);
        used += run as f64 * f64::from(job.processors);
        last_end = last_end.max(end);
    }
    let count = jobs.len().max(1) as f64;
    outcome.mean_wait /= count;
    outcome.mean_bounded_slowdown /= count;
    outcome.makespan = last_end - first_submit;
    if outcome.makespan > 0 && total_processors > 0 {
        outcome.utilization = used / (outcome.makespan as f64 * total_processors as f64);
    }
    outcome
}

/// A job for [`one_cycle`]: `tasks` one-processor tasks (`per_node` on each node, if
/// given) for `seconds`.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub tasks: u32,
    pub per_node: Option<u32>,
    pub seconds: i64,
}

/// What [`one_cycle`] measured.
#[derive(Debug, Clone)]
pub struct Cycle {
    pub waiting: usize,
    pub running: usize,
    /// Jobs the measured pass started.
    pub started: usize,
    /// The measured pass: queue order, running jobs' profile, planning, starts.
    pub elapsed: Duration,
}

/// Times one scheduling pass of the engine: `running` jobs are started first (by
/// earlier passes, not measured), then `waiting` jobs are submitted and one pass
/// considers them all.
pub fn one_cycle(
    nodes: &[NodeConfig],
    running: &[Shape],
    waiting: &[Shape],
    policy: &Policy,
) -> Result<Cycle, String> {
    let mut sim = Simulation::new(nodes, policy, 1_000_000)?;
    for shape in running {
        sim.submit(shape.tasks, shape.per_node, shape.seconds)?;
    }
    sim.engine.schedule();
    sim.commit();
    let (_, running) = sim.engine.counts();
    sim.clock.advance(60);
    for shape in waiting {
        sim.submit(shape.tasks, shape.per_node, shape.seconds)?;
    }
    let (waiting, _) = sim.engine.counts();
    let began = Instant::now();
    sim.engine.schedule();
    let elapsed = began.elapsed();
    Ok(Cycle {
        waiting,
        running,
        started: waiting - sim.engine.counts().0,
        elapsed,
    })
}

/// A simulated engine and what drives it.
struct Simulation {
    engine: Engine,
    /// What the engine sends itself (launches once a start is "durable").
    messages: std::sync::mpsc::Receiver<crate::engine::Inbox>,
    rm: Arc<SimulatedRm>,
    clock: Arc<ManualClock>,
    requester: Requester,
}

impl Simulation {
    fn new(nodes: &[NodeConfig], policy: &Policy, start: Seconds) -> Result<Simulation, String> {
        let clock = Arc::new(ManualClock::new(start));
        let rm = Arc::new(SimulatedRm::default());
        let config = SchedConfig {
            name: "Sim".into(),
            nodes: nodes.to_vec(),
            allow_root_jobs: true,
            policy: policy.clone(),
            ..SchedConfig::default()
        };
        let maker = rm.clone();
        let parts = EngineParts {
            store: Arc::new(NoStore),
            resource_manager: Box::new(move |_| Ok(maker as Arc<dyn ResourceManager>)),
            clock: clock.clone(),
            events: Arc::new(DiscardEvents),
            accountant: Arc::new(crate::accountant::NoAccounting),
            vm_host: Arc::new(crate::vm_host::NoVmHost(
                "the simulator makes no VMs".into(),
            )),
        };
        let (engine, messages) = Engine::simulated(config, parts)?;
        Ok(Simulation {
            engine,
            messages,
            rm,
            clock,
            requester: Requester {
                user: SystemUser::current().map_or("root".into(), |u| u.name),
                proxy_user: None,
                over_all: true,
                may_name_owners: true,
            },
        })
    }

    /// Submits a job of `tasks` one-processor tasks asking for `seconds`.
    fn submit(
        &mut self,
        tasks: u32,
        per_node: Option<u32>,
        seconds: i64,
    ) -> Result<String, String> {
        let spec = JobSpec {
            command_file: "/bin/true".into(),
            working_directory: Some("/".into()),
            request: ResourceRequest {
                task_count: tasks,
                tasks_per_node: per_node,
                ..Default::default()
            },
            duration: Some(seconds),
            ..Default::default()
        };
        self.engine
            .submit(spec, &self.requester)
            .map_err(|e| e.to_string())
    }

    /// The job `id` runs as `user` (a name of the trace's, not an account: the engine
    /// never starts its process).
    fn run_as(&mut self, id: &str, user: String) {
        if let Some(position) = self.engine.position(id) {
            self.engine
                .update(position, |job| job.status.exec_user = user);
        }
    }

    /// Ends an engine step: its writes "commit" at once, and the launches that follow are
    /// delivered.
    fn commit(&mut self) {
        self.engine.flush_journal();
        while let Ok(message) = self.messages.try_recv() {
            self.engine.handle(message);
        }
        self.engine.flush_journal();
    }
}

/// Starts nothing: records which jobs the engine started, for the driver.
#[derive(Default)]
struct SimulatedRm {
    started: Mutex<Vec<String>>,
}

impl ResourceManager for SimulatedRm {
    fn name(&self) -> &str {
        "simulator"
    }

    fn start(&self, launch: Launch) -> Result<ProcessRecord, String> {
        // The pid is the job's number, so that the driver can report its end.
        let pid = launch
            .job_id
            .rsplit('.')
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or("not a simulated job")?;
        self.started.lock().unwrap().push(launch.job_id);
        Ok(ProcessRecord {
            pid,
            start_ticks: 0,
            spool: String::new(),
            rm_job_id: None,
        })
    }

    fn signal(&self, _process: &ProcessRecord, _signal: JobSignal) -> Result<(), String> {
        Ok(())
    }

    fn adopt(&self, _job_id: &str, _process: &ProcessRecord) -> bool {
        false
    }

    fn abandon(&self, _job_id: &str) {}
}

/// The store of a simulated engine: it never writes, and holds nothing.
struct NoStore;

impl DocumentStore for NoStore {
    fn backend(&self) -> &'static str {
        "none"
    }
    fn ensure_collection(&self, _spec: &CollectionSpec) -> drover_store::Result<()> {
        Ok(())
    }
    fn write(&self, batch: &[Write]) -> drover_store::Result<Vec<i64>> {
        Ok(vec![1; batch.len()])
    }
    fn find(
        &self,
        _c: &str,
        _which: drover_store::Find<'_>,
    ) -> drover_store::Result<Option<Document>> {
        Ok(None)
    }
    fn list(&self, _c: &str, _q: &ListQuery) -> drover_store::Result<Page<Document>> {
        Ok(Page {
            total: 0,
            items: Vec::new(),
        })
    }
    fn ping(&self) -> drover_store::Result<()> {
        Ok(())
    }
    fn maintain(&self) -> drover_store::Result<()> {
        Ok(())
    }
    fn describe(&self) -> drover_store::Result<StoreInfo> {
        Err(StoreError::Backend("the simulator keeps nothing".into()))
    }
    fn flush(&self) -> drover_store::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swf::TraceJob;

    fn job(number: u64, submit: i64, run: i64, processors: u32) -> TraceJob {
        TraceJob {
            number,
            submit,
            run,
            processors,
            requested: run,
            estimated: false,
            user: None,
        }
    }

    #[test]
    fn backfilling_shortens_waits_on_a_small_trace() {
        // 4 processors: a 3-wide job runs 100 s; a 4-wide job must wait for it; a
        // 1-wide job of 50 s fits the hole under EASY, and waits behind under FCFS.
        let trace = Trace {
            jobs: vec![job(1, 0, 100, 3), job(2, 1, 100, 4), job(3, 2, 50, 1)],
            machine_processors: Some(4),
            skipped: 0,
            estimated: 0,
        };
        let nodes = machine(4, 1);
        let fcfs = replay(&trace, &nodes, &Policy::fcfs(), &mut |_| {}).unwrap();
        let easy = replay(&trace, &nodes, &Policy::easy(), &mut |_| {}).unwrap();
        // FCFS: waits 0, 99, 198; EASY: 0, 99, 0.
        assert_eq!(fcfs.mean_wait, 99.0);
        assert_eq!(easy.mean_wait, 33.0);
        assert_eq!(fcfs.max_wait, 198);
        assert_eq!(easy.makespan, 200);
        assert_eq!(fcfs.makespan, 250);
        let used = (300 + 400 + 50) as f64;
        assert!((easy.utilization - used / (200.0 * 4.0)).abs() < 1e-9);
        // Bounded slowdown of job 2 under EASY: (99 + 100) / 100.
        let expected = (1.0 + 1.99 + 1.0) / 3.0;
        assert!((easy.mean_bounded_slowdown - expected).abs() < 1e-9);
    }

    #[test]
    fn requested_times_decide_backfilling_unless_estimates_are_perfect() {
        // As above, but the 1-wide job asks for 150 s (SWF field 9) and runs 50: asked
        // for, it would delay the 4-wide job, so EASY does not backfill it.
        let text = "; MaxProcs: 4\n\
            1 0 -1 100 3 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n\
            2 1 -1 100 4 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n\
            3 2 -1 50 1 -1 -1 1 150 -1 1 -1 -1 -1 0 -1 -1 -1\n";
        let trace = swf::parse(text).unwrap();
        assert_eq!(trace.estimated, 1);
        let nodes = machine(4, 1);
        let estimated = replay(&trace, &nodes, &Policy::easy(), &mut |_| {}).unwrap();
        // Waits 0, 99, 198: the short job starts after the wide one.
        assert_eq!(estimated.max_wait, 198);
        let perfect = trace.with_perfect_estimates();
        let perfect = replay(&perfect, &nodes, &Policy::easy(), &mut |_| {}).unwrap();
        assert_eq!((perfect.max_wait, perfect.mean_wait), (99, 33.0));
    }

    /// 4 processors: a 3-wide job runs 100 s; a 4-wide job comes next; then a narrow
    /// job of 30 s every 10 s for 10 minutes, each of them ahead of the wide one in any
    /// order that favours narrow or young jobs.
    fn a_stream_past_a_wide_job() -> Trace {
        let mut jobs = vec![job(1, 0, 100, 3), job(2, 1, 100, 4)];
        jobs.extend((0..60).map(|k| job(3 + k, 2 + 10 * k as i64, 30, 1)));
        Trace {
            jobs,
            machine_processors: Some(4),
            ..Trace::default()
        }
    }

    #[test]
    fn the_oldest_job_keeps_easys_reservation_whatever_the_order() {
        let trace = a_stream_past_a_wide_job();
        let nodes = machine(4, 1);
        // Default: the wide job is the oldest waiting once the first starts, so it holds
        // the reservation at t=100 and nothing that would delay it starts: it waits 99 s,
        // exactly as under EASY.
        let default = replay(&trace, &nodes, &Policy::default(), &mut |_| {}).unwrap();
        let easy = replay(&trace, &nodes, &Policy::easy(), &mut |_| {}).unwrap();
        assert_eq!(default.waits[1], 99);
        assert_eq!(easy.waits[1], 99);
        // The bound holds for any weights the site sets: narrow first, too.
        let narrow_first = Policy {
            weights: crate::policy::Weights {
                narrow_request: 3000.0,
                expansion: 0.0,
                ..crate::policy::Weights::default()
            },
            ..Policy::default()
        };
        let kept = replay(&trace, &nodes, &narrow_first, &mut |_| {}).unwrap();
        assert_eq!(kept.waits[1], 99);
        // Without it, the narrow jobs pass the wide one as long as they keep coming.
        let starving = Policy {
            reserve_oldest: false,
            ..narrow_first
        };
        let starved = replay(&trace, &nodes, &starving, &mut |_| {}).unwrap();
        assert!(starved.waits[1] > 500, "{}", starved.waits[1]);
    }

    /// 4 processors: user 1's first job asks for 1000 s and runs 10; user 2 then runs a
    /// 3-wide job of 100 s and waits with a 4-wide one; then user 1 asks for 1000 s
    /// again and runs `run`.
    fn a_user_with_a_short_history(run: i64) -> Trace {
        let of = |user, number, submit, run, requested, processors| TraceJob {
            user: Some(user),
            requested,
            ..job(number, submit, run, processors)
        };
        Trace {
            jobs: vec![
                of(1, 1, 0, 10, 1000, 1),
                of(2, 2, 20, 100, 100, 3),
                of(2, 3, 21, 50, 50, 4),
                of(1, 4, 22, run, 1000, 1),
            ],
            machine_processors: Some(4),
            ..Trace::default()
        }
    }

    #[test]
    fn a_users_history_backfills_their_job_which_still_runs_to_its_end() {
        let nodes = machine(4, 1);
        let predicting = Policy {
            predict_runtimes: true,
            ..Policy::default()
        };
        // Asking for 1000 s, the last job would delay the 4-wide one (reserved at 120):
        // without predictions it waits for it (until 170).
        let trace = a_user_with_a_short_history(30);
        let plain = replay(&trace, &nodes, &Policy::default(), &mut |_| {}).unwrap();
        assert_eq!(plain.waits, [0, 0, 99, 148]);
        // Its user's last job ran 10 s: predicted to end by 32, it starts at once, and
        // the 4-wide job starts at 120 as promised.
        let predicted = replay(&trace, &nodes, &predicting, &mut |_| {}).unwrap();
        assert_eq!(predicted.waits, [0, 0, 99, 0]);
        // Outliving its prediction, it is not killed: it runs its 150 s to 172 (the
        // last end is 172 + 50), and the 4-wide job waits for it: the price of a wrong
        // prediction.
        let outlived = a_user_with_a_short_history(150);
        let late = replay(&outlived, &nodes, &predicting, &mut |_| {}).unwrap();
        assert_eq!(late.waits, [0, 0, 151, 0]);
        assert_eq!(late.makespan, 222);
    }

    #[test]
    fn machine_spreads_processors_over_nodes() {
        let nodes = machine(10, 3);
        assert_eq!(
            nodes.iter().map(|n| n.processors).collect::<Vec<_>>(),
            [4, 3, 3]
        );
    }
}
