//! Starting processes off the engine thread. Handing a job to the resource manager
//! forks, execs and writes files: milliseconds the engine would otherwise spend not
//! answering. A launcher thread does it and tells the engine how it went (`Inbox::Started`);
//! meanwhile the job stays `Starting`, holding its nodes.
//!
//! Every hand-over carries a number: an answer whose number is not the job's latest
//! (the job was cancelled or requeued meanwhile, perhaps started again) is stale, and
//! the process it made, if any, is stopped. A process that ended before the engine
//! heard it had started (a `/bin/true`) is held back until it has.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::Inbox;
use super::core::Engine;
use crate::job::JobState;
use crate::job::ProcessRecord;
use crate::rm::{Exit, JobSignal, Launch, ResourceManager};

// As many launcher threads as the resource manager takes starts at once
// (`ResourceManager::concurrent_starts`): the local one has one, so that jobs reach it in
// the order the engine started them (a pass starts them in priority order, an array in
// index order). It hands a start over and goes on to the next without waiting for its
// answer (`start_then`): waiting, the launcher was the limit of short jobs (busy 97% of
// a run of `/bin/true` jobs, at about a millisecond a start). Slurm's `sbatch` takes
// about 100 ms, and its jobs are pinned to their nodes, so their order does not matter
// there.

/// A launch handed to the launchers.
struct Order {
    job_id: String,
    number: u64,
    launch: Launch,
}

/// The launchers, and the launches handed to them and not yet answered.
pub(crate) struct Launchers {
    orders: Option<Sender<Order>>,
    next_number: u64,
    /// Job ids to the number of their latest launch not yet answered.
    in_flight: HashMap<String, u64>,
    /// Ends heard before the start they end was: job id to `(pid, exit)`.
    early_ends: HashMap<String, (i32, Exit)>,
}

impl Launchers {
    /// Launchers starting processes with `rm`, answering on `inbox`; `None`: launches
    /// run on the engine thread (the simulator, which steps the engine itself).
    pub(super) fn new(rm: Option<(Arc<dyn ResourceManager>, Sender<Inbox>)>) -> Launchers {
        let orders = rm.map(|(rm, inbox)| {
            let (orders, taken) = std::sync::mpsc::channel::<Order>();
            let taken = Arc::new(Mutex::new(taken));
            for n in 0..rm.concurrent_starts().max(1) {
                let (rm, inbox, taken) = (rm.clone(), inbox.clone(), taken.clone());
                std::thread::Builder::new()
                    .name(format!("launcher-{n}"))
                    .spawn(move || serve_orders(&*rm, &inbox, &taken))
                    .expect("cannot start a launcher thread");
            }
            orders
        });
        Launchers {
            orders,
            next_number: 0,
            in_flight: HashMap::new(),
            early_ends: HashMap::new(),
        }
    }
}

fn serve_orders(rm: &dyn ResourceManager, inbox: &Sender<Inbox>, orders: &Mutex<Receiver<Order>>) {
    loop {
        let order = match orders.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(order) => order,
            Err(_) => return,
        };
        let (inbox, job_id, number) = (inbox.clone(), order.job_id, order.number);
        rm.start_then(
            order.launch,
            Box::new(move |outcome| {
                let _ = inbox.send(Inbox::Started {
                    job_id,
                    number,
                    outcome,
                });
            }),
        );
    }
}

impl Engine {
    /// Hands `launch` of the job at `position` to a launcher, or starts it here when
    /// there are none.
    pub(super) fn hand_to_launcher(&mut self, position: usize, launch: Result<Launch, String>) {
        let job = self.job_at(position);
        let (launch, orders) = match (launch, &self.launchers.orders) {
            (Ok(launch), Some(orders)) => (launch, orders.clone()),
            (launch, _) => {
                return self.start_process(position, launch.and_then(|l| self.rm.start(l)));
            }
        };
        self.launchers.next_number += 1;
        let number = self.launchers.next_number;
        self.launchers.in_flight.insert(job.id.clone(), number);
        let order = Order {
            job_id: job.id.clone(),
            number,
            launch,
        };
        if let Err(failed) = orders.send(order) {
            self.launchers.in_flight.remove(&job.id);
            let launch = failed.0.launch;
            self.start_process(position, self.rm.start(launch));
        }
    }

    /// A launcher's answer.
    pub(super) fn started(
        &mut self,
        job_id: &str,
        number: u64,
        outcome: Result<ProcessRecord, String>,
    ) {
        let current = self.launchers.in_flight.get(job_id) == Some(&number);
        let position = self.position(job_id);
        let starting = position.is_some_and(|p| self.job_at(p).status.state == JobState::Starting);
        if !(current && starting) {
            // Cancelled or requeued while it started: its process must not run on.
            if current {
                self.launchers.in_flight.remove(job_id);
            }
            self.launchers.early_ends.remove(job_id);
            if let Ok(process) = outcome {
                let _ = self
                    .rm
                    .signal(&process, JobSignal::Terminate { grace_seconds: 0 });
            }
            return;
        }
        self.launchers.in_flight.remove(job_id);
        let position = position.expect("checked above");
        let pid = outcome.as_ref().ok().map(|p| p.pid);
        self.start_process(position, outcome);
        if let Some((ended_pid, exit)) = self.launchers.early_ends.remove(job_id)
            && Some(ended_pid) == pid
        {
            self.exited(job_id, ended_pid, exit);
        }
    }

    /// Keeps an end heard for a job whose start is not heard yet; answers whether it did.
    pub(super) fn hold_early_end(&mut self, job_id: &str, pid: i32, exit: &Exit) -> bool {
        if !self.launchers.in_flight.contains_key(job_id) {
            return false;
        }
        self.launchers
            .early_ends
            .insert(job_id.to_string(), (pid, exit.clone()));
        true
    }
}
