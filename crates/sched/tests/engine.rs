//! The engine on its own: a SQLite store, a clock the test moves, a resource manager the
//! test drives (a stand-in for processes), and the events it emits.

// A test tells one story from setup to the last check; it may be long (issue #54).
#![allow(clippy::too_many_lines)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_sched::clock::ManualClock;
use drover_sched::engine::VmAnswer;
use drover_sched::events::RecordedEvents;
use drover_sched::job::{JobSpec, JobState, ProcessRecord};
use drover_sched::node::NodeConfig;
use drover_sched::policy::Policy;
use drover_sched::rm::{Exit, JobSignal, Launch, ResourceManager, RmEvent, RmNotify};
use drover_sched::vm::{Vm, VmChange, VmCommand, VmPhase, VmRequest};
use drover_sched::vm_host::{VmHost, VmOperation};
use drover_sched::{EngineParts, JobAction, JobChanges, Requester, SchedConfig, Scheduler};

/// Processes that exist only in this test: started, signalled and ended on request.
#[derive(Default)]
struct FakeRm {
    notify: Mutex<Option<RmNotify>>,
    started: Mutex<Vec<(String, i32)>>,
    signals: Mutex<Vec<(i32, JobSignal)>>,
    alive: Mutex<HashSet<i32>>,
    next_pid: Mutex<i32>,
}

impl FakeRm {
    fn exit(&self, job_id: &str, code: i32) {
        let pid = self.pid_of(job_id);
        self.alive.lock().unwrap().remove(&pid);
        let notify = self.notify.lock().unwrap().clone().unwrap();
        notify(RmEvent::Exited {
            job_id: job_id.into(),
            pid,
            exit: Exit {
                code: Some(code),
                cpu_seconds: 1.5,
                start_failure: None,
            },
        });
    }

    fn pid_of(&self, job_id: &str) -> i32 {
        let started = self.started.lock().unwrap();
        started
            .iter()
            .rev()
            .find(|(j, _)| j == job_id)
            .map(|(_, p)| *p)
            .expect("started")
    }

    fn started_ids(&self) -> Vec<String> {
        self.started
            .lock()
            .unwrap()
            .iter()
            .map(|(j, _)| j.clone())
            .collect()
    }
}

impl ResourceManager for FakeRm {
    fn name(&self) -> &str {
        "fake"
    }

    fn start(&self, launch: Launch) -> Result<ProcessRecord, String> {
        let mut next = self.next_pid.lock().unwrap();
        *next += 1;
        let pid = 10_000 + *next;
        self.started.lock().unwrap().push((launch.job_id, pid));
        self.alive.lock().unwrap().insert(pid);
        Ok(ProcessRecord {
            pid,
            start_ticks: 1,
            spool: String::new(),
            rm_job_id: None,
        })
    }

    fn signal(&self, process: &ProcessRecord, signal: JobSignal) -> Result<(), String> {
        self.signals.lock().unwrap().push((process.pid, signal));
        Ok(())
    }

    fn adopt(&self, _job_id: &str, process: &ProcessRecord) -> bool {
        self.alive.lock().unwrap().contains(&process.pid)
    }

    fn abandon(&self, _job_id: &str) {}
}

struct Harness {
    scheduler: Scheduler,
    rm: Arc<FakeRm>,
    clock: Arc<ManualClock>,
    events: Arc<RecordedEvents>,
    vm_host: Arc<FakeVmHost>,
}

/// A VM host that does every operation at once, failing those asked to fail, and knows
/// which guests are alive.
#[derive(Default)]
struct FakeVmHost {
    done: Mutex<Vec<(String, VmOperation)>>,
    fail: Mutex<Option<String>>,
    alive: Mutex<std::collections::HashSet<String>>,
}

impl VmHost for FakeVmHost {
    fn run(&self, vm: Vm, operation: VmOperation, done: drover_sched::vm_host::Done) {
        self.done
            .lock()
            .unwrap()
            .push((vm.id.clone(), operation.clone()));
        let outcome = match self.fail.lock().unwrap().clone() {
            Some(reason) => Err(reason),
            None => Ok(()),
        };
        if outcome.is_ok() {
            let mut alive = self.alive.lock().unwrap();
            match operation {
                VmOperation::Destroy | VmOperation::PowerOff => alive.remove(&vm.id),
                _ => alive.insert(vm.id.clone()),
            };
        }
        done(outcome);
    }

    fn alive(&self, vm: &Vm) -> bool {
        self.alive.lock().unwrap().contains(&vm.id)
    }

    fn connect_agent(&self, vm: &Vm) -> Result<std::os::fd::OwnedFd, String> {
        Err(format!("no agent for {} in this test", vm.id))
    }
}

/// A SQLite store whose reads and writes fail while `failing` is set (a database that
/// went away), and which, with `fail_every` = n > 0, fails every n-th write after taking
/// a millisecond over it (a disk that fills: the batch is rolled back).
struct FlakyStore {
    inner: drover_store::SqliteStore,
    failing: std::sync::atomic::AtomicBool,
    fail_every: std::sync::atomic::AtomicUsize,
    writes: std::sync::atomic::AtomicUsize,
}

impl FlakyStore {
    fn new(inner: drover_store::SqliteStore) -> FlakyStore {
        FlakyStore {
            inner,
            failing: false.into(),
            fail_every: 0.into(),
            writes: 0.into(),
        }
    }

    fn check_write(&self) -> drover_store::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        self.check()?;
        let every = self.fail_every.load(SeqCst);
        if every == 0 {
            return Ok(());
        }
        // Slow enough that readers poll while a batch is under way.
        std::thread::sleep(Duration::from_millis(1));
        if self.writes.fetch_add(1, SeqCst) % every == every - 1 {
            return Err(drover_store::StoreError::Backend(
                "database or disk is full".into(),
            ));
        }
        Ok(())
    }

    fn check(&self) -> drover_store::Result<()> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            Err(drover_store::StoreError::Backend(
                "the database went away".into(),
            ))
        } else {
            Ok(())
        }
    }
}

impl drover_store::DocumentStore for FlakyStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn ensure_collection(&self, spec: &drover_store::CollectionSpec) -> drover_store::Result<()> {
        self.inner.ensure_collection(spec)
    }
    fn write(&self, batch: &[drover_store::Write]) -> drover_store::Result<Vec<i64>> {
        self.check_write()?;
        self.inner.write(batch)
    }
    fn find(
        &self,
        c: &str,
        which: drover_store::Find<'_>,
    ) -> drover_store::Result<Option<drover_store::Document>> {
        self.inner.find(c, which)
    }
    fn list(
        &self,
        c: &str,
        q: &drover_query::ListQuery,
    ) -> drover_store::Result<drover_query::Page<drover_store::Document>> {
        self.check()?;
        self.inner.list(c, q)
    }
    fn ping(&self) -> drover_store::Result<()> {
        self.inner.ping()
    }
    fn maintain(&self) -> drover_store::Result<()> {
        self.inner.maintain()
    }
    fn describe(&self) -> drover_store::Result<drover_store::StoreInfo> {
        self.inner.describe()
    }
    fn flush(&self) -> drover_store::Result<()> {
        self.inner.flush()
    }
}

fn start(
    dir: &std::path::Path,
    rm: Arc<FakeRm>,
    clock: Arc<ManualClock>,
    processors: u32,
) -> Harness {
    let store: Arc<dyn drover_store::DocumentStore> =
        Arc::new(drover_store::SqliteStore::open(&dir.join("engine.db")).unwrap());
    start_on(store, rm, clock, processors)
}

fn start_on(
    store: Arc<dyn drover_store::DocumentStore>,
    rm: Arc<FakeRm>,
    clock: Arc<ManualClock>,
    processors: u32,
) -> Harness {
    start_with(store, rm, clock, processors, Policy::default())
}

fn start_with(
    store: Arc<dyn drover_store::DocumentStore>,
    rm: Arc<FakeRm>,
    clock: Arc<ManualClock>,
    processors: u32,
    policy: Policy,
) -> Harness {
    let nodes = vec![NodeConfig::new("n1", processors)];
    start_full(store, rm, clock, nodes, policy, Arc::default())
}

fn start_full(
    store: Arc<dyn drover_store::DocumentStore>,
    rm: Arc<FakeRm>,
    clock: Arc<ManualClock>,
    nodes: Vec<NodeConfig>,
    policy: Policy,
    vm_host: Arc<FakeVmHost>,
) -> Harness {
    let events = Arc::new(RecordedEvents::default());
    let config = SchedConfig {
        nodes,
        tick: Duration::from_millis(20),
        policy,
        ..SchedConfig::default()
    };
    let maker = rm.clone();
    let parts = EngineParts {
        store,
        resource_manager: Box::new(move |notify| {
            *maker.notify.lock().unwrap() = Some(notify);
            Ok(maker as Arc<dyn ResourceManager>)
        }),
        clock: clock.clone(),
        events: events.clone(),
        accountant: Arc::new(CountingAccountant),
        vm_host: vm_host.clone(),
    };
    Harness {
        scheduler: Scheduler::start(config, parts).unwrap(),
        rm,
        clock,
        events,
        vm_host,
    }
}

/// How many times engines asked their accountant to go back to what is stored.
static ACCOUNTANT_RELOADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// No accounting, but it counts the reloads a failed commit must bring.
struct CountingAccountant;

impl drover_sched::accountant::Accountant for CountingAccountant {
    fn start(
        &self,
        _: &drover_sched::job::Job,
        _: i64,
    ) -> Result<Vec<drover_store::Write>, String> {
        Ok(Vec::new())
    }

    fn end(&self, _: &drover_sched::job::Job, _: i64, _: i64) -> Vec<drover_store::Write> {
        Vec::new()
    }

    fn reload(&self) -> Result<(), String> {
        ACCOUNTANT_RELOADS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

fn admin() -> Requester {
    Requester {
        user: "admin".into(),
        proxy_user: None,
        over_all: true,
        may_name_owners: true,
    }
}

fn spec(held: bool, user_priority: i64) -> JobSpec {
    JobSpec {
        command_file: "/usr/bin/true".into(),
        working_directory: Some("/tmp".into()),
        holds: if held {
            vec![drover_sched::job::Hold::User]
        } else {
            vec![]
        },
        user_priority,
        ..Default::default()
    }
}

fn wait_until(what: &str, check: impl Fn() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting until {what}");
}

fn state(h: &Harness, id: &str) -> JobState {
    h.scheduler.job(id).unwrap().status.state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_order_events_and_the_job_life_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let h = start(
        dir.path(),
        Arc::default(),
        Arc::new(ManualClock::new(1_000_000)),
        1,
    );
    let first = h.scheduler.submit(spec(false, 0), admin()).await.unwrap();
    wait_until("the first job runs", || {
        state(&h, &first) == JobState::Running
    });
    // Two waiting jobs; the higher user priority goes first, then the system priority
    // beats both.
    let low = h.scheduler.submit(spec(true, 1), admin()).await.unwrap();
    let high = h.scheduler.submit(spec(true, 10), admin()).await.unwrap();
    let urgent = h.scheduler.submit(spec(true, -5), admin()).await.unwrap();
    h.scheduler
        .modify(
            &urgent,
            JobChanges {
                system_priority: Some(1),
                ..Default::default()
            },
            admin(),
        )
        .await
        .unwrap();
    for id in [&low, &high, &urgent] {
        h.scheduler
            .act(id, JobAction::Unhold(vec![]), admin())
            .await
            .unwrap();
        assert_eq!(state(&h, id), JobState::Idle);
    }
    h.clock.advance(30);
    h.rm.exit(&first, 0);
    wait_until("the urgent job runs", || {
        state(&h, &urgent) == JobState::Running
    });
    h.rm.exit(&urgent, 2);
    wait_until("the high job runs", || {
        state(&h, &high) == JobState::Running
    });
    h.rm.exit(&high, 0);
    wait_until("the low job runs", || state(&h, &low) == JobState::Running);
    assert_eq!(
        h.rm.started_ids(),
        [first.clone(), urgent.clone(), high.clone(), low.clone()]
    );

    let done = h.scheduler.job(&first).unwrap();
    assert_eq!(done.status.state, JobState::Completed);
    assert_eq!(done.status.completion_code, Some(0));
    assert_eq!(done.status.cpu_seconds, 1.5);
    assert_eq!(done.active_seconds(h.clock.now()), 30);
    assert_eq!(
        h.scheduler.job(&urgent).unwrap().status.completion_code,
        Some(2)
    );
    assert_eq!(
        h.events.types_for(&first),
        ["jobsubmit", "jobstart", "jobend"],
        "events of the first job"
    );
    assert_eq!(
        h.events.types_for(&urgent),
        ["jobsubmit", "jobmodify", "jobrelease", "jobstart", "jobend"]
    );
}

use drover_sched::clock::Clock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_time_is_enforced_on_the_engine_clock() {
    let dir = tempfile::tempdir().unwrap();
    let h = start(
        dir.path(),
        Arc::default(),
        Arc::new(ManualClock::new(1_000_000)),
        2,
    );
    let mut limited = spec(false, 0);
    limited.duration = Some(60);
    let id = h.scheduler.submit(limited, admin()).await.unwrap();
    wait_until("it runs", || state(&h, &id) == JobState::Running);
    h.clock.advance(59);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        h.rm.signals.lock().unwrap().is_empty(),
        "not yet over its limit"
    );
    h.clock.advance(2);
    wait_until("it is told to stop", || {
        !h.rm.signals.lock().unwrap().is_empty()
    });
    let pid = h.rm.pid_of(&id);
    assert!(
        matches!(h.rm.signals.lock().unwrap()[0], (p, JobSignal::Terminate { .. }) if p == pid)
    );
    h.rm.exit(&id, 143);
    wait_until("it is vacated", || state(&h, &id) == JobState::Vacated);
    let job = h.scheduler.job(&id).unwrap();
    assert!(
        job.status.messages[0]
            .text
            .contains("wall time of 60 seconds")
    );
    assert_eq!(job.status.completion_code, Some(143));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_adopts_live_processes_requeues_restartable_jobs_and_vacates_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let rm = Arc::new(FakeRm::default());
    let clock = Arc::new(ManualClock::new(1_000_000));
    let h = start(dir.path(), rm.clone(), clock.clone(), 4);
    let adopted = h.scheduler.submit(spec(false, 0), admin()).await.unwrap();
    let mut restartable = spec(false, 0);
    restartable.flags = vec!["RESTARTABLE".into()];
    let requeued = h.scheduler.submit(restartable, admin()).await.unwrap();
    let vacated = h.scheduler.submit(spec(false, 0), admin()).await.unwrap();
    let held = h.scheduler.submit(spec(true, 0), admin()).await.unwrap();
    for id in [&adopted, &requeued, &vacated] {
        wait_until("it runs", || state(&h, id) == JobState::Running);
    }
    h.scheduler.shutdown().await;
    // While the service is down, two of the processes end.
    for id in [&requeued, &vacated] {
        let pid = rm.pid_of(id);
        rm.alive.lock().unwrap().remove(&pid);
    }
    let h = start(dir.path(), rm.clone(), clock, 4);
    assert_eq!(state(&h, &adopted), JobState::Running);
    assert_eq!(state(&h, &vacated), JobState::Vacated);
    assert_eq!(state(&h, &held), JobState::Hold);
    wait_until("the restartable job starts again", || {
        rm.started_ids().iter().filter(|j| **j == requeued).count() == 2
    });
    let job = h.scheduler.job(&requeued).unwrap();
    assert_eq!(job.status.counts.requeue, 1);
    assert!(job.status.messages[0].text.contains("requeued"));
    // The adopted process still reports its end to the new engine.
    rm.exit(&adopted, 0);
    wait_until("the adopted job completes", || {
        state(&h, &adopted) == JobState::Completed
    });
    let next = h.scheduler.submit(spec(true, 0), admin()).await.unwrap();
    assert_eq!(next, "Drover.5", "ids continue after a restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_journal_write_answers_503_and_the_engine_goes_back_to_what_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FlakyStore::new(
        drover_store::SqliteStore::open(&dir.path().join("engine.db")).unwrap(),
    ));
    let h = start_on(
        store.clone(),
        Arc::default(),
        Arc::new(ManualClock::new(1_000_000)),
        1,
    );
    let kept = h.scheduler.submit(spec(true, 0), admin()).await.unwrap();
    let reloads = ACCOUNTANT_RELOADS.load(std::sync::atomic::Ordering::SeqCst);
    store
        .failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let refused = h.scheduler.submit(spec(true, 0), admin()).await;
    assert!(
        matches!(refused, Err(drover_sched::SchedError::Unavailable(_))),
        "{refused:?}"
    );
    wait_until("the engine says it cannot record", || {
        h.scheduler.degraded().is_some()
    });
    // What the client was told was not made is not seen, even before the reload.
    assert!(h.scheduler.job("Drover.2").is_none());
    assert_eq!(h.scheduler.jobs().len(), 1);
    let again = h.scheduler.submit(spec(true, 0), admin()).await;
    assert!(
        matches!(again, Err(drover_sched::SchedError::Unavailable(_))),
        "{again:?}"
    );
    store
        .failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    wait_until("the engine has reloaded", || {
        h.scheduler.degraded().is_none()
    });
    // What was refused is gone; what was answered stays; the refused job's name, which
    // may have been seen, is not given again.
    assert!(h.scheduler.job(&kept).is_some());
    assert!(h.scheduler.job("Drover.2").is_none());
    // The accountant went back to what is stored too (liens and charges of writes that
    // were not made are undone).
    assert!(ACCOUNTANT_RELOADS.load(std::sync::atomic::Ordering::SeqCst) > reloads);
    let next = h.scheduler.submit(spec(true, 0), admin()).await.unwrap();
    assert_eq!(next, "Drover.3");
    assert_eq!(h.scheduler.jobs().len(), 2);
}

/// A job of `tasks` one-processor tasks asking for `seconds` of wall time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_failing_mid_batch_never_shows_a_refused_job_nor_gives_a_name_twice() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("engine.db");
    let store = Arc::new(FlakyStore::new(
        drover_store::SqliteStore::open(&path).unwrap(),
    ));
    store.fail_every.store(7, SeqCst);
    let h = start_on(
        store.clone(),
        Arc::default(),
        Arc::new(ManualClock::new(1_000_000)),
        1,
    );
    // A reader that looks all the time, by list and by id, and remembers every job it saw.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(HashSet::<String>::new()));
    let reader = {
        let (scheduler, stop, seen) = (h.scheduler.clone(), stop.clone(), seen.clone());
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                let listed = scheduler.jobs();
                let mut seen = seen.lock().unwrap();
                for job in &listed {
                    seen.insert(job.id.clone());
                }
                // The next numbers, by id: those a submission holds now, not yet durable.
                let next = listed.len() + 8;
                for seq in listed.len()..next {
                    let id = format!("Drover.{seq}");
                    if scheduler.job(&id).is_some() {
                        seen.insert(id);
                    }
                }
            }
        })
    };
    let mut submitters = Vec::new();
    for _ in 0..4 {
        let scheduler = h.scheduler.clone();
        submitters.push(tokio::spawn(async move {
            let (mut made, mut refused) = (Vec::new(), 0);
            for _ in 0..60 {
                match scheduler.submit(spec(true, 0), admin()).await {
                    Ok(id) => made.push(id),
                    Err(drover_sched::SchedError::Unavailable(_)) => refused += 1,
                    Err(other) => panic!("not a 503: {other:?}"),
                }
            }
            (made, refused)
        }));
    }
    let (mut made, mut refused) = (Vec::new(), 0);
    for submitter in submitters {
        let (m, r) = submitter.await.unwrap();
        made.extend(m);
        refused += r;
    }
    store.fail_every.store(0, SeqCst);
    wait_until("the engine has reloaded", || {
        h.scheduler.degraded().is_none()
    });
    stop.store(true, SeqCst);
    reader.join().unwrap();
    assert!(
        refused > 0 && !made.is_empty(),
        "{refused} refused, {} made",
        made.len()
    );

    let accepted: HashSet<String> = made.iter().cloned().collect();
    assert_eq!(accepted.len(), made.len(), "a name was given twice");
    let phantoms: Vec<_> = seen
        .lock()
        .unwrap()
        .difference(&accepted)
        .cloned()
        .collect();
    assert!(phantoms.is_empty(), "seen but answered 503: {phantoms:?}");
    let check = |scheduler: &Scheduler| {
        let listed: Vec<String> = scheduler.jobs().iter().map(|j| j.id.clone()).collect();
        let listed_set: HashSet<String> = listed.iter().cloned().collect();
        assert_eq!(listed.len(), listed_set.len(), "a job listed twice");
        assert_eq!(
            listed_set, accepted,
            "what is listed is exactly what was answered 201"
        );
    };
    // A batch handed over before the engine heard of an earlier failure commits (its
    // jobs answered 201) while that book's publication is stopped: they are shown by the
    // reload the failure leads to, which may still be on its way when `degraded` reads
    // None. So wait for it (a job lost for good fails the wait), then check.
    wait_until("the answered jobs are listed", || {
        let listed: HashSet<String> = h.scheduler.jobs().iter().map(|j| j.id.clone()).collect();
        listed == accepted
    });
    check(&h.scheduler);
    // New names go on past every number taken, refused ones included.
    let last_taken = made
        .iter()
        .map(|id| id.rsplit_once('.').unwrap().1.parse::<u64>().unwrap())
        .max()
        .unwrap();
    let next = h.scheduler.submit(spec(true, 0), admin()).await.unwrap();
    assert!(!accepted.contains(&next));
    assert!(number(&next) > last_taken);
    // One more refused, right before the restart: the number it took (next + 1) is
    // remembered by the reload, although no job holds it.
    store.fail_every.store(1, SeqCst);
    let refused = h.scheduler.submit(spec(true, 0), admin()).await;
    assert!(refused.is_err(), "{refused:?}");
    wait_until("the engine says it cannot record", || {
        h.scheduler.degraded().is_some()
    });
    store.fail_every.store(0, SeqCst);
    wait_until("the engine has reloaded", || {
        h.scheduler.degraded().is_none()
    });
    h.scheduler.shutdown().await;

    // After a restart, the store holds what was answered 201 and nothing else.
    let again = start(
        dir.path(),
        Arc::default(),
        Arc::new(ManualClock::new(1_000_000)),
        1,
    );
    let mut expected = accepted.clone();
    expected.insert(next.clone());
    let listed: HashSet<String> = again
        .scheduler
        .jobs()
        .iter()
        .map(|j| j.id.clone())
        .collect();
    assert_eq!(listed, expected);
    // Numbers go on past those refused submissions took, even after the restart.
    let after_restart = again
        .scheduler
        .submit(spec(true, 0), admin())
        .await
        .unwrap();
    assert_eq!(
        number(&after_restart),
        number(&next) + 2,
        "{after_restart} after {next}"
    );
}

fn number(id: &str) -> u64 {
    id.rsplit_once('.').unwrap().1.parse().unwrap()
}

fn timed(tasks: u32, seconds: i64) -> JobSpec {
    let mut job = spec(false, 0);
    job.request.task_count = tasks;
    job.duration = Some(seconds);
    job
}

/// On 4 processors, 3 busy until t+100: the top job (all 4) waits for t+100; a job of
/// 1 processor that ends by then starts in the hole, one that would still run at t+100
/// does not (it would delay the top job).
async fn hole_of_one_processor(policy: Policy) -> (tempfile::TempDir, Harness, [String; 4]) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn drover_store::DocumentStore> =
        Arc::new(drover_store::SqliteStore::open(&dir.path().join("engine.db")).unwrap());
    let h = start_with(
        store,
        Arc::default(),
        Arc::new(ManualClock::new(1_000_000)),
        4,
        policy,
    );
    let first = h.scheduler.submit(timed(3, 100), admin()).await.unwrap();
    wait_until("the first job runs", || {
        state(&h, &first) == JobState::Running
    });
    let top = h.scheduler.submit(timed(4, 100), admin()).await.unwrap();
    let long = h.scheduler.submit(timed(1, 500), admin()).await.unwrap();
    let short = h.scheduler.submit(timed(1, 100), admin()).await.unwrap();
    (dir, h, [first, top, long, short])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn easy_backfill_starts_a_short_job_in_a_hole_without_delaying_the_top_job() {
    let (_dir, h, [first, top, long, short]) = hole_of_one_processor(Policy::easy()).await;
    wait_until("the short job is backfilled", || {
        state(&h, &short) == JobState::Running
    });
    std::thread::sleep(Duration::from_millis(100)); // several passes
    assert_eq!(state(&h, &top), JobState::Idle);
    assert_eq!(state(&h, &long), JobState::Idle, "would delay the top job");
    // At t+100 the first and the short job end: the top job starts on time.
    h.clock.advance(100);
    h.rm.exit(&short, 0);
    h.rm.exit(&first, 0);
    wait_until("the top job runs", || state(&h, &top) == JobState::Running);
    assert_eq!(state(&h, &long), JobState::Idle);
    let started = h.scheduler.job(&top).unwrap().status.dates.start.unwrap();
    assert_eq!(started, 1_000_100, "not delayed by the backfilled job");
    h.rm.exit(&top, 0);
    wait_until("the long job runs", || {
        state(&h, &long) == JobState::Running
    });
    assert_eq!(h.rm.started_ids(), [first, short, top, long]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_policy_backfills_and_fcfs_does_not() {
    let (_dir, h, [_, top, long, short]) = hole_of_one_processor(Policy::default()).await;
    wait_until("the short job is backfilled", || {
        state(&h, &short) == JobState::Running
    });
    assert_eq!(state(&h, &top), JobState::Idle);
    assert_eq!(state(&h, &long), JobState::Idle);

    let (_dir, h, [_, top, long, short]) = hole_of_one_processor(Policy::fcfs()).await;
    std::thread::sleep(Duration::from_millis(200));
    for id in [&top, &long, &short] {
        assert_eq!(state(&h, id), JobState::Idle, "nothing passes the top job");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemptor_stops_preemptees_newest_first_requeueing_the_restartable() {
    let dir = tempfile::tempdir().unwrap();
    let h = start(
        dir.path(),
        Arc::default(),
        Arc::new(ManualClock::new(1_000_000)),
        3,
    );
    let flagged = |flags: &[&str]| {
        let mut job = timed(1, 1000);
        job.flags = flags.iter().map(|f| f.to_string()).collect();
        job
    };
    let older = h
        .scheduler
        .submit(flagged(&["PREEMPTEE", "RESTARTABLE"]), admin())
        .await
        .unwrap();
    wait_until("the older preemptee runs", || {
        state(&h, &older) == JobState::Running
    });
    h.clock.advance(10);
    let newer = h
        .scheduler
        .submit(flagged(&["PREEMPTEE"]), admin())
        .await
        .unwrap();
    let plain = h.scheduler.submit(flagged(&[]), admin()).await.unwrap();
    wait_until("all three run", || {
        state(&h, &newer) == JobState::Running && state(&h, &plain) == JobState::Running
    });
    // Not a preemptor: waits.
    let waiting = h.scheduler.submit(flagged(&[]), admin()).await.unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(h.rm.signals.lock().unwrap().is_empty());

    let mut urgent = timed(2, 100);
    urgent.flags = vec!["PREEMPTOR".into()];
    let urgent = h.scheduler.submit(urgent, admin()).await.unwrap();
    wait_until("both preemptees are told to stop", || {
        h.rm.signals.lock().unwrap().len() == 2
    });
    let signalled: Vec<i32> = h.rm.signals.lock().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(signalled, [h.rm.pid_of(&newer), h.rm.pid_of(&older)]);
    assert_eq!(state(&h, &plain), JobState::Running, "not a preemptee");
    assert_eq!(
        state(&h, &urgent),
        JobState::Idle,
        "waits for the processes to end"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        h.rm.signals.lock().unwrap().len(),
        2,
        "no more preemption while they stop"
    );

    h.rm.exit(&newer, 143);
    h.rm.exit(&older, 143);
    wait_until("the preemptor runs", || {
        state(&h, &urgent) == JobState::Running
    });
    let newer = h.scheduler.job(&newer).unwrap();
    assert_eq!(
        newer.status.state,
        JobState::Vacated,
        "not restartable: cancelled"
    );
    assert_eq!(newer.status.counts.preempt, 1);
    assert!(
        newer.status.messages[0]
            .text
            .contains(&format!("Preempted for job {urgent}"))
    );
    let older_job = h.scheduler.job(&older).unwrap();
    assert_eq!(older_job.status.state, JobState::Idle, "requeued");
    assert_eq!(older_job.status.counts.requeue, 1);
    assert!(older_job.status.dates.last_preempted.is_some());
    assert_eq!(state(&h, &waiting), JobState::Idle);
    assert!(h.events.0.lock().unwrap().iter().any(|e| {
        e.object_id == older
            && e.event_type == "jobrequeue"
            && e.details
                .iter()
                .any(|(k, v)| k == "preemptedBy" && *v == urgent)
    }));
}

fn array(values: &[i64], slot_limit: Option<u32>) -> drover_sched::job::ArraySpec {
    drover_sched::job::ArraySpec {
        name: Some("sweep".into()),
        values: values.to_vec(),
        slot_limit,
        ..Default::default()
    }
}

fn running_count(h: &Harness, ids: &[String]) -> usize {
    ids.iter()
        .filter(|id| state(h, id) == JobState::Running)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_respects_its_slot_limit_sums_up_in_its_master_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let rm = Arc::new(FakeRm::default());
    let clock = Arc::new(ManualClock::new(1_000_000));
    let h = start(dir.path(), rm.clone(), clock.clone(), 8);
    let master = h
        .scheduler
        .submit_array(timed(1, 100), array(&[3, 1, 2, 5, 4], Some(2)), admin())
        .await
        .unwrap();
    let members: Vec<String> = [1, 2, 3, 4, 5]
        .iter()
        .map(|i| format!("{master}[{i}]"))
        .collect();
    wait_until("two sub-jobs run", || running_count(&h, &members) == 2);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(running_count(&h, &members), 2, "the slot limit holds");
    assert_eq!(h.rm.started_ids(), members[..2], "in index order");
    let m = h.scheduler.job(&master).unwrap();
    assert_eq!(m.status.state, JobState::Running);
    assert!(m.has_flag("ARRAYMASTER"));
    let first = h.scheduler.job(&members[0]).unwrap();
    assert!(first.has_flag("ARRAYJOB"));
    assert_eq!(first.array_member(), Some((master.as_str(), 1)));
    assert_eq!(first.spec.custom_name.as_deref(), Some("sweep"));
    h.rm.exit(&members[0], 0);
    wait_until("a third starts", || {
        state(&h, &members[2]) == JobState::Running
    });
    assert_eq!(running_count(&h, &members), 2);

    // Restart: sub-jobs never stored come back from the master, the rest as stored.
    h.scheduler.shutdown().await;
    let h = start(dir.path(), rm.clone(), clock, 8);
    assert_eq!(state(&h, &members[0]), JobState::Completed);
    assert_eq!(state(&h, &members[1]), JobState::Running);
    assert_eq!(state(&h, &members[2]), JobState::Running);
    assert_eq!(state(&h, &members[3]), JobState::Idle);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        running_count(&h, &members),
        2,
        "the limit holds after the restart"
    );
    for id in &members[1..3] {
        rm.exit(id, 0);
    }
    wait_until("the last two run", || running_count(&h, &members[3..]) == 2);
    for id in &members[3..] {
        rm.exit(id, 0);
    }
    wait_until("the master completes", || {
        state(&h, &master) == JobState::Completed
    });
    assert_eq!(
        h.scheduler.submit(timed(1, 1), admin()).await.unwrap(),
        "Drover.2",
        "sub-jobs take no job numbers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_policies_and_cancelling_the_master_end_the_rest() {
    use drover_sched::job::ArrayOutcome;
    let dir = tempfile::tempdir().unwrap();
    let h = start(
        dir.path(),
        Arc::default(),
        Arc::new(ManualClock::new(1_000_000)),
        2,
    );
    let ids = |master: &str| -> Vec<String> { (0..4).map(|i| format!("{master}[{i}]")).collect() };

    // anyJob FAILURE: one failure cancels the others, running and queued.
    let mut any = array(&[0, 1, 2, 3], None);
    any.cancel_on_any = Some(ArrayOutcome::Failure);
    let master = h
        .scheduler
        .submit_array(timed(1, 100), any, admin())
        .await
        .unwrap();
    let members = ids(&master);
    wait_until("two run", || running_count(&h, &members) == 2);
    h.rm.exit(&members[0], 1);
    wait_until("the others are cancelled", || {
        state(&h, &members[1]) == JobState::Vacated
            && state(&h, &members[2]) == JobState::Removed
            && state(&h, &members[3]) == JobState::Removed
    });
    assert!(
        h.scheduler.job(&members[2]).unwrap().status.messages[0]
            .text
            .contains("any sub-job")
    );
    h.rm.exit(&members[1], 143);
    wait_until("the master ends", || {
        state(&h, &master) == JobState::Completed
    });

    // firstJob SUCCESS: the first to end succeeded, so the rest is cancelled; a later
    // success would not matter.
    let mut first = array(&[0, 1, 2, 3], None);
    first.cancel_on_first = Some(ArrayOutcome::Success);
    let master = h
        .scheduler
        .submit_array(timed(1, 100), first, admin())
        .await
        .unwrap();
    let members = ids(&master);
    wait_until("two run", || running_count(&h, &members) == 2);
    h.rm.exit(&members[1], 0);
    wait_until("the rest is cancelled", || {
        state(&h, &members[0]) == JobState::Vacated && state(&h, &members[3]) == JobState::Removed
    });
    h.rm.exit(&members[0], 143);

    // firstJob FAILURE with a success first: nothing is cancelled.
    let mut lenient = array(&[0, 1], None);
    lenient.cancel_on_first = Some(ArrayOutcome::Failure);
    let master = h
        .scheduler
        .submit_array(timed(1, 100), lenient, admin())
        .await
        .unwrap();
    let members: Vec<String> = (0..2).map(|i| format!("{master}[{i}]")).collect();
    wait_until("both run", || running_count(&h, &members) == 2);
    h.rm.exit(&members[0], 0);
    h.rm.exit(&members[1], 1);
    wait_until("both end", || state(&h, &members[1]) == JobState::Completed);
    assert_eq!(state(&h, &master), JobState::Completed);

    // Cancelling the master cancels every sub-job; other actions on it are refused.
    let master = h
        .scheduler
        .submit_array(timed(1, 100), array(&[0, 1, 2, 3], None), admin())
        .await
        .unwrap();
    let members = ids(&master);
    wait_until("two run", || running_count(&h, &members) == 2);
    let refused = h
        .scheduler
        .act(&master, JobAction::Hold(vec![]), admin())
        .await;
    assert!(
        matches!(refused, Err(drover_sched::SchedError::Refused(_))),
        "{refused:?}"
    );
    h.scheduler
        .act(&master, JobAction::Cancel, admin())
        .await
        .unwrap();
    for (i, id) in members.iter().enumerate() {
        let expected = if i < 2 {
            JobState::Vacated
        } else {
            JobState::Removed
        };
        assert_eq!(state(&h, id), expected, "{id}");
    }
    h.rm.exit(&members[0], 143);
    h.rm.exit(&members[1], 143);
    wait_until("the master shows the end", || {
        state(&h, &master) == JobState::Vacated
    });
}

fn vm_harness(dir: &std::path::Path, vm_host: Arc<FakeVmHost>) -> Harness {
    let store: Arc<dyn drover_store::DocumentStore> =
        Arc::new(drover_store::SqliteStore::open(&dir.join("engine.db")).unwrap());
    let node = |id: &str| NodeConfig {
        memory: Some(1024),
        disk: Some(10_000),
        ..NodeConfig::new(id, 4)
    };
    start_full(
        store,
        Arc::default(),
        Arc::new(ManualClock::new(1_000_000)),
        vec![node("n1"), node("n2")],
        Policy::default(),
        vm_host,
    )
}

fn vm_of(h: &Harness, id: &str) -> Option<Vm> {
    h.scheduler.vms().iter().find(|v| v.id == id).cloned()
}

fn user(name: &str) -> Requester {
    Requester {
        user: name.into(),
        proxy_user: None,
        over_all: false,
        may_name_owners: false,
    }
}

async fn job_of(answer: Result<VmAnswer, drover_sched::SchedError>) -> String {
    match answer.unwrap() {
        VmAnswer::Job(job) => job,
        other => panic!("expected a job, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_holds_its_hosts_resources_from_create_to_destroy_through_system_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let h = vm_harness(dir.path(), Arc::default());
    let create = |id: &str, processors| {
        VmCommand::Create(Box::new(VmRequest {
            id: Some(id.into()),
            processors: Some(processors),
            memory: Some(256),
            image: "guest".into(),
            ..Default::default()
        }))
    };
    let setup = job_of(h.scheduler.vm(create("web", 3), user("bob")).await).await;
    wait_until("the VM runs", || {
        vm_of(&h, "web").is_some_and(|v| v.phase == VmPhase::Running)
    });
    let job = h.scheduler.job(&setup).unwrap();
    assert_eq!(job.status.state, JobState::Completed);
    assert_eq!(job.status.completion_code, Some(0));
    assert!(job.spec.flags.contains(&"SYSTEMJOB".to_string()));
    let n1 = h.scheduler.nodes()[0].clone();
    assert_eq!((n1.used_processors, n1.used_memory), (3, 256));
    assert_eq!(n1.vms, ["web"]);
    // A second VM that does not fit on n1 goes to n2; a third fits nowhere now, and
    // waits holding nothing (destroyed, its setup is cancelled); one no node could ever
    // hold is refused.
    job_of(h.scheduler.vm(create("db", 2), user("bob")).await).await;
    assert_eq!(vm_of(&h, "db").unwrap().node, "n2");
    let waits = job_of(h.scheduler.vm(create("big", 3), user("bob")).await).await;
    let big = vm_of(&h, "big").unwrap();
    assert_eq!((big.phase, big.node.as_str()), (VmPhase::Waiting, ""));
    assert_eq!(
        h.scheduler.job(&waits).unwrap().status.state,
        JobState::Idle
    );
    assert_eq!(h.scheduler.nodes()[1].used_processors, 2);
    job_of(
        h.scheduler
            .vm(VmCommand::Destroy("big".into()), user("bob"))
            .await,
    )
    .await;
    assert!(vm_of(&h, "big").is_none());
    assert_eq!(
        h.scheduler.job(&waits).unwrap().status.state,
        JobState::Removed
    );
    let refused = h.scheduler.vm(create("huge", 5), user("bob")).await;
    assert!(
        matches!(refused, Err(drover_sched::SchedError::Invalid(_))),
        "{refused:?}"
    );
    // Disk is taken from the node too: n2 has 2 processors left, and all its disk.
    let disky = |id: &str, disk| {
        VmCommand::Create(Box::new(VmRequest {
            id: Some(id.into()),
            disk: Some(disk),
            node: Some("n2".into()),
            image: "guest".into(),
            ..Default::default()
        }))
    };
    let refused = h.scheduler.vm(disky("huge", 10_001), admin()).await;
    assert!(format!("{refused:?}").contains("disk"), "{refused:?}");
    job_of(h.scheduler.vm(disky("disky", 9_000), admin()).await).await;
    assert_eq!(h.scheduler.nodes()[1].free_disk(), Some(1_000));
    // The id is taken; another user cannot see or destroy bob's VM.
    let taken = h.scheduler.vm(create("web", 1), user("carol")).await;
    assert!(
        matches!(taken, Err(drover_sched::SchedError::Conflict(_))),
        "{taken:?}"
    );
    let foreign = h
        .scheduler
        .vm(VmCommand::Destroy("web".into()), user("carol"))
        .await;
    assert!(
        matches!(foreign, Err(drover_sched::SchedError::NotFound(_))),
        "{foreign:?}"
    );
    // The system job cannot be cancelled as a job.
    let cancel = h.scheduler.act(&setup, JobAction::Cancel, admin()).await;
    assert!(cancel.is_err());
    // Power off and on keeps the resources held.
    let said = h
        .scheduler
        .vm(
            VmCommand::Modify(
                "web".into(),
                Box::new(VmChange {
                    power_on: Some(false),
                    ..Default::default()
                }),
            ),
            user("bob"),
        )
        .await
        .unwrap();
    assert!(matches!(said, VmAnswer::Said(_)));
    wait_until("the VM is off", || {
        vm_of(&h, "web").unwrap().phase == VmPhase::Off
    });
    assert_eq!(h.scheduler.nodes()[0].used_processors, 3);
    // Migrating an Off VM is refused; destroy gives everything back.
    let migrate = h
        .scheduler
        .vm(VmCommand::Migrate("web".into(), None), user("bob"))
        .await;
    assert!(matches!(
        migrate,
        Err(drover_sched::SchedError::Conflict(_))
    ));
    let destroy = job_of(
        h.scheduler
            .vm(VmCommand::Destroy("web".into()), user("bob"))
            .await,
    )
    .await;
    wait_until("the VM is gone", || vm_of(&h, "web").is_none());
    assert_eq!(
        h.scheduler.job(&destroy).unwrap().status.completion_code,
        Some(0)
    );
    let n1 = h.scheduler.nodes()[0].clone();
    assert_eq!(
        (n1.used_processors, n1.used_memory, n1.vms.len()),
        (0, 0, 0)
    );
    let ops: Vec<_> = h.vm_host.done.lock().unwrap().clone();
    assert!(ops.contains(&("web".to_string(), VmOperation::PowerOff)));
    assert!(ops.contains(&("web".to_string(), VmOperation::Destroy)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_moves_the_hold_a_failure_says_why_and_time_to_live_destroys() {
    let dir = tempfile::tempdir().unwrap();
    let h = vm_harness(dir.path(), Arc::default());
    let create = VmCommand::Create(Box::new(VmRequest {
        id: Some("m".into()),
        processors: Some(2),
        node: Some("n1".into()),
        time_to_live: Some(600),
        image: "guest".into(),
        ..Default::default()
    }));
    job_of(h.scheduler.vm(create, admin()).await).await;
    wait_until("m runs", || {
        vm_of(&h, "m").unwrap().phase == VmPhase::Running
    });
    let moved = job_of(
        h.scheduler
            .vm(VmCommand::Migrate("m".into(), None), admin())
            .await,
    )
    .await;
    wait_until("m moved", || vm_of(&h, "m").unwrap().node == "n2");
    let vm = vm_of(&h, "m").unwrap();
    assert_eq!((vm.phase, vm.migration_count), (VmPhase::Running, 1));
    assert_eq!(
        h.scheduler.job(&moved).unwrap().status.state,
        JobState::Completed
    );
    let nodes = h.scheduler.nodes();
    assert_eq!((nodes[0].used_processors, nodes[1].used_processors), (0, 2));
    // A failing host: the setup job ends with 1 and says why; nothing stays held.
    *h.vm_host.fail.lock().unwrap() = Some("qemu is not installed".into());
    let create = VmCommand::Create(Box::new(VmRequest {
        id: Some("f".into()),
        image: "guest".into(),
        ..Default::default()
    }));
    let setup = job_of(h.scheduler.vm(create, admin()).await).await;
    wait_until("f failed", || {
        vm_of(&h, "f").unwrap().phase == VmPhase::Failed
    });
    let job = h.scheduler.job(&setup).unwrap();
    assert_eq!(job.status.completion_code, Some(1));
    assert!(
        job.status.messages[0]
            .text
            .contains("qemu is not installed")
    );
    assert_eq!(
        vm_of(&h, "f").unwrap().failed_job.as_deref(),
        Some(setup.as_str())
    );
    let nodes = h.scheduler.nodes();
    assert_eq!(nodes[0].used_processors + nodes[1].used_processors, 2);
    *h.vm_host.fail.lock().unwrap() = None;
    // Time to live: ten minutes after creation, m is destroyed by the scheduler.
    h.clock.advance(601);
    wait_until("m expired", || vm_of(&h, "m").is_none());
    assert!(h.events.types_for("m").contains(&"vmexpire"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_live_guests_and_marks_gone_ones_lost() {
    let dir = tempfile::tempdir().unwrap();
    let host: Arc<FakeVmHost> = Arc::default();
    let h = vm_harness(dir.path(), host.clone());
    for id in ["alive", "dead"] {
        let create = VmCommand::Create(Box::new(VmRequest {
            id: Some(id.into()),
            image: "guest".into(),
            ..Default::default()
        }));
        job_of(h.scheduler.vm(create, admin()).await).await;
        wait_until("it runs", || {
            vm_of(&h, id).is_some_and(|v| v.phase == VmPhase::Running)
        });
    }
    h.scheduler.shutdown().await;
    drop(h);
    host.alive.lock().unwrap().remove("dead");
    let h = vm_harness(dir.path(), host.clone());
    assert_eq!(vm_of(&h, "alive").unwrap().phase, VmPhase::Running);
    assert_eq!(vm_of(&h, "dead").unwrap().phase, VmPhase::Lost);
    assert_eq!(h.scheduler.nodes()[0].used_processors, 1);
    // New ids go on after the stored ones.
    let create = VmCommand::Create(Box::new(VmRequest {
        image: "guest".into(),
        ..Default::default()
    }));
    job_of(h.scheduler.vm(create, admin()).await).await;
    assert!(h.scheduler.vms().iter().any(|v| v.id == "vm.1"));
}
