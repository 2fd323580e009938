//! VM work that waits, as a job waits: a VM no node has room for yet (`Waiting`: its
//! setup job is Idle, a pending action, and the VM holds nothing), and an operation
//! asked for while another is under way, or a migration whose target has no room yet
//! ([`Vm::queued`]: its system job is Idle). Only what no node could ever hold is
//! refused at once.
//!
//! Each scheduling pass starts, before jobs are placed, whatever waiting VM work can
//! start, in the order the VMs were made; a VM takes its resources only when its work
//! starts, around reservations as a job is placed. Where two asked operations conflict
//! the last asked wins: a destroy cancels a migration waiting (and a VM never made),
//! a second migration sends the waiting one elsewhere. A queued operation is stored
//! with its VM, so a restarted service starts it once the operation under way (handed
//! over again) is done.

use super::core::Engine;
use super::node_pool::{VmSize, vm_could_fit, vm_fits};
use super::vm_commands::Lifetime;
use crate::job::{JobMessage, JobState};
use crate::vm::{QueuedOperation, SystemTask, VmPhase};

impl Engine {
    /// Whether any VM work waits (room may come at any pass).
    pub(super) fn vm_work_waits(&self) -> bool {
        self.vms
            .all()
            .iter()
            .any(|v| v.phase == VmPhase::Waiting || (v.queued.is_some() && !v.phase.busy()))
    }

    /// Starts the waiting VM work that can start now.
    pub(super) fn start_waiting_vm_work(&mut self) {
        let ready: Vec<String> = self
            .vms
            .all()
            .iter()
            .filter(|v| v.phase == VmPhase::Waiting || (v.queued.is_some() && !v.phase.busy()))
            .map(|v| v.id.clone())
            .collect();
        for id in ready {
            let Some(position) = self.vms.position(&id) else {
                continue;
            };
            let before = self.vms.get(position).clone();
            if before.phase == VmPhase::Waiting {
                self.start_waiting_vm(position, false);
            } else {
                self.start_queued_operation(position);
            }
            // Still waiting: nothing to write (a pass comes at every tick).
            if *self.vms.get(position) != before {
                self.store_vm(position);
            }
        }
    }

    /// Whether a VM of `size` could ever fit on `node` (or, with none, on a node other
    /// than `except`); if not, why, for a 400.
    pub(super) fn could_ever_hold(
        &self,
        size: VmSize,
        node: Option<&str>,
        except: Option<&str>,
    ) -> Result<(), String> {
        if let Some(node) = node {
            let index = self
                .nodes
                .index_of(node)
                .ok_or_else(|| format!("node: no node '{node}'"))?;
            return vm_could_fit(&self.nodes.all()[index], size)
                .map_err(|why| format!("node: the VM can never fit: {why}"));
        }
        let others = self.nodes.all().iter().filter(|n| Some(n.id()) != except);
        let mut why = None;
        for node in others {
            match vm_could_fit(node, size) {
                Ok(()) => return Ok(()),
                Err(reason) => why = Some(reason),
            }
        }
        Err(format!(
            "no {}node could ever hold a VM of {} processors, {} MB of memory and {} MB of \
             disk{}",
            if except.is_some() { "other " } else { "" },
            size.processors,
            size.memory,
            size.disk,
            why.map_or_else(String::new, |w| format!(" ({w})"))
        ))
    }

    /// The node a VM of `size` can go to now: `node` if it has room, else (none named)
    /// the first other than `except` that has.
    fn room_now(
        &self,
        size: VmSize,
        node: Option<&str>,
        except: Option<&str>,
        lives: &Lifetime,
    ) -> Option<String> {
        match node {
            Some(node) => {
                let host = &self.nodes.all()[self.nodes.index_of(node)?];
                vm_fits(host, size, self.reserved_against(host, lives)).ok()?;
                Some(node.to_string())
            }
            None => self
                .nodes
                .room_for_vm(size, except, |n| self.reserved_against(n, lives))
                .map(|n| n.id().to_string()),
        }
    }

    /// Makes the waiting VM at `position` if a node has room for it now: it takes its
    /// resources there and its setup job starts. `asked_now`: in the step that asked
    /// for it (it is then shown as never having waited). Its time to live counts from
    /// here.
    pub(super) fn start_waiting_vm(&mut self, position: usize, asked_now: bool) {
        let vm = self.vms.get(position).clone();
        let lives = Lifetime {
            owner: &vm.owner,
            time_to_live: vm.time_to_live,
        };
        let named = (!vm.node.is_empty()).then_some(vm.node.as_str());
        let Some(node) = self.room_now(VmSize::of(&vm), named, None, &lives) else {
            return;
        };
        // Its funds are held as it takes its resources; without them it waits on, its
        // setup job saying why (as a job waiting for funds does).
        if let Err(reason) = self.start_charging_vm(position, crate::accountant::VmHold::Record) {
            if let Some(setup) = vm.setup_job.as_deref().and_then(|j| self.position(j)) {
                self.block_for_funds(setup, reason);
            }
            return;
        }
        let now = self.now();
        {
            let vm = self.vms.get_mut(position);
            vm.node = node;
            vm.created = now;
            if asked_now {
                vm.phase = VmPhase::Creating;
            } else {
                vm.enter(VmPhase::Creating, now);
            }
        }
        let vm = self.vms.get(position).clone();
        self.hold_vm_on(&vm.node, &vm, true);
        if let Some(job) = &vm.setup_job {
            self.begin_system_job(position, job, SystemTask::VmCreate { vm: vm.id.clone() });
        }
    }

    /// Starts the operation queued on the VM at `position` (which has none under way)
    /// if it can start: a destroy at once; a migration of a running VM once its target
    /// has room. A migration that can no longer be done fails and says why.
    pub(super) fn start_queued_operation(&mut self, position: usize) {
        let vm = self.vms.get(position).clone();
        if vm.phase.busy() {
            return;
        }
        match vm.queued.clone() {
            None => {}
            Some(QueuedOperation::Destroy { job }) => {
                let now = self.now();
                let destroyed = self.vms.get_mut(position);
                destroyed.queued = None;
                destroyed.enter(VmPhase::Destroying, now);
                self.begin_system_job(position, &job, SystemTask::VmDestroy { vm: vm.id });
            }
            Some(QueuedOperation::Migrate { job, to }) => {
                let cannot = if vm.phase != VmPhase::Running {
                    Some(format!(
                        "only a running VM can be migrated; this one is {}",
                        vm.phase.substate()
                    ))
                } else if to.as_deref() == Some(vm.node.as_str()) {
                    Some(format!("the VM already runs on {}", vm.node))
                } else {
                    None
                };
                if let Some(reason) = cannot {
                    let failed = self.vms.get_mut(position);
                    failed.queued = None;
                    failed.failed_job = Some(job.clone());
                    let reason = format!("{} failed: {reason}", crate::template::VM_MIGRATE);
                    return self.end_queued_job(&job, JobState::Completed, &reason);
                }
                let lives = Lifetime {
                    owner: &vm.owner,
                    time_to_live: vm.expires().map(|at| (at - self.now()).max(0)),
                };
                let size = VmSize::of(&vm);
                let Some(target) = self.room_now(size, to.as_deref(), Some(&vm.node), &lives)
                else {
                    return; // it waits for room there
                };
                // Held on both nodes until the guest has moved.
                self.hold_vm_on(&target, &vm, true);
                let now = self.now();
                let moving = self.vms.get_mut(position);
                moving.queued = None;
                moving.target = Some(target.clone());
                moving.enter(VmPhase::Migrating, now);
                let task = SystemTask::VmMigrate {
                    vm: vm.id.clone(),
                    from: vm.node.clone(),
                    to: target,
                };
                self.begin_system_job(position, &job, task);
            }
        }
    }

    /// A system job waiting for its VM that will not run: Removed (cancelled by a later
    /// request), or Completed with 1 (it could not be done), `reason` its message.
    pub(super) fn end_queued_job(&mut self, id: &str, state: JobState, reason: &str) {
        let Some(position) = self.position(id) else {
            return;
        };
        let now = self.now();
        self.update(position, |job| {
            let status = &mut job.status;
            status.state = state;
            status.completion_code = Some(1);
            status.dates.completion = Some(now);
            status.messages.push(JobMessage {
                text: reason.to_string(),
                author: None,
                created: now,
            });
        });
        let (kind, detail) = match state {
            JobState::Removed => ("jobcancel", "reason"),
            _ => ("jobend", "failure"),
        };
        self.emit(
            kind,
            "job",
            id,
            None,
            vec![(detail.into(), reason.to_string())],
        );
    }

    /// Cancels system job `id`, which waits for its VM: a later request won over it.
    pub(super) fn cancel_system_job(&mut self, id: &str, reason: &str) {
        self.end_queued_job(id, JobState::Removed, reason);
    }
}
