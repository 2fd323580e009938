//! VMs are charged as jobs are, through the same accountant: for what they hold (their
//! processors, memory and disk, and a service's rate), for as long as they hold it.
//!
//! Money moves with the VM: funds for its first interval are held (a lien) in the step
//! where it takes its resources; at each interval (`[accounting]
//! vm_charge_interval_seconds`) a tick charges the seconds since the last charge and
//! holds the next interval's funds, both in one step; the step that gives its resources
//! back (destroyed, its setup failed, its guest lost) charges the rest and releases the
//! lien. A lien covers one interval (or less, up to its time to live), so a VM that
//! lives long pays as it goes and a long time to live holds no more than an interval.
//!
//! A VM is not made (400), nor waits for room, nor is powered on again, without the
//! funds for its first interval. One whose account runs dry at a periodic charge is
//! powered off and no longer charged (`vm_when_dry = "power-off"`, the default), or runs
//! on into debt (`"refuse"`: only new VMs are refused). A job's own VM is not charged:
//! its job is, for the same resources.

use super::core::Engine;
use crate::accountant::{Renewal, VmHold};
use crate::clock::Seconds;
use crate::vm::{Vm, VmPhase};
use crate::vm_host::VmOperation;

/// Whether the VM is charged for itself (a job's VM is its job's charge).
fn charged_itself(vm: &Vm) -> bool {
    vm.for_job.is_none()
}

/// The seconds a lien taken `now` covers: an interval, or less when the VM's time to
/// live runs out sooner (at least one).
fn lien_seconds(vm: &Vm, interval: Seconds, now: Seconds) -> Seconds {
    vm.expires()
        .map_or(interval, |at| at.saturating_sub(now).clamp(1, interval))
}

impl Engine {
    /// Whether the account of a VM about to be made (`vm`, holding nothing yet) could
    /// pay for its first interval; if not, why (the creation is refused saying so).
    pub(super) fn vm_could_be_funded(&self, vm: &Vm) -> Result<(), String> {
        let Some(interval) = self.accountant.vm_charge_interval() else {
            return Ok(());
        };
        if !charged_itself(vm) {
            return Ok(());
        }
        let seconds = vm.time_to_live.map_or(interval, |t| t.clamp(1, interval));
        self.accountant
            .vm_hold(vm, seconds, self.now(), VmHold::Check)
            .map(drop)
    }

    /// The VM at `position` takes its resources now: funds for its first interval are
    /// held in this step (`how`), and it is charged from now. Refused (nothing changed)
    /// when they cannot be held.
    pub(super) fn start_charging_vm(&mut self, position: usize, how: VmHold) -> Result<(), String> {
        let Some(interval) = self.accountant.vm_charge_interval() else {
            return Ok(());
        };
        let vm = self.vms.get(position).clone();
        if !charged_itself(&vm) || vm.charged_through.is_some() {
            return Ok(());
        }
        let now = self.now();
        let held = self
            .accountant
            .vm_hold(&vm, lien_seconds(&vm, interval, now), now, how)?;
        self.journal.write_all(held);
        self.vms.get_mut(position).charged_through = Some(now);
        Ok(())
    }

    /// The VM at `position` gives its resources back (or is no longer charged): the
    /// seconds since its last charge are charged and its lien released, in this step.
    pub(super) fn stop_charging_vm(&mut self, position: usize) {
        let vm = self.vms.get(position).clone();
        let Some(through) = vm.charged_through else {
            return;
        };
        let now = self.now();
        let charged = self
            .accountant
            .vm_settle(&vm, now.saturating_sub(through).max(0), now);
        self.journal.write_all(charged);
        self.vms.get_mut(position).charged_through = None;
    }

    /// Charges the VMs whose interval has passed since their last charge, and holds the
    /// funds of their next; a VM whose account cannot pay is powered off (or runs on,
    /// as `vm_when_dry` says).
    pub(super) fn charge_vms(&mut self, now: Seconds) {
        let Some(interval) = self.accountant.vm_charge_interval() else {
            return;
        };
        let due: Vec<String> = self
            .vms
            .all()
            .iter()
            .filter(|v| {
                v.charged_through
                    .is_some_and(|t| t.saturating_add(interval) <= now)
            })
            .map(|v| v.id.clone())
            .collect();
        for id in due {
            if let Some(position) = self.vms.position(&id) {
                self.charge_vm(position, interval, now);
                self.store_vm(position);
            }
        }
    }

    /// One periodic charge of the VM at `position`: the seconds since the last, and the
    /// next interval's lien, in one change.
    fn charge_vm(&mut self, position: usize, interval: Seconds, now: Seconds) {
        let vm = self.vms.get(position).clone();
        let Some(through) = vm.charged_through else {
            return;
        };
        // Only a VM at rest is powered off; one at work runs on, charged, and is
        // judged again at its next charge.
        let at_rest = matches!(vm.phase, VmPhase::Running | VmPhase::Off) && vm.queued.is_none();
        let how = if at_rest && self.accountant.vm_powers_off_when_dry() {
            VmHold::Record
        } else {
            VmHold::Anyway
        };
        let seconds = lien_seconds(&vm, interval, now);
        let charged = now.saturating_sub(through).max(0);
        let renewal = Renewal {
            charged,
            seconds,
            now,
            how,
        };
        let (writes, held) = self.accountant.vm_renew(&vm, renewal);
        self.journal.write_all(writes);
        match held {
            Ok(()) => self.vms.get_mut(position).charged_through = Some(now),
            Err(reason) => {
                self.vms.get_mut(position).charged_through = None;
                self.vm_ran_dry(position, &reason);
            }
        }
    }

    /// The account of the VM at `position` cannot pay for its next interval: it is no
    /// longer charged, and a running one is powered off, with an event saying why.
    fn vm_ran_dry(&mut self, position: usize, reason: &str) {
        let now = self.now();
        let vm = self.vms.get(position).clone();
        let powered_off = vm.phase == VmPhase::Running && vm.queued.is_none();
        if powered_off {
            let off = self.vms.get_mut(position);
            off.power_on = false;
            off.enter(VmPhase::PoweringOff, now);
            self.dispatch_when_committed(position, None, VmOperation::PowerOff);
        }
        let message = format!(
            "VM {}: {reason}; it is no longer charged{}, and can be powered on again once \
             its account has funds",
            vm.id,
            if powered_off {
                " and is powered off"
            } else {
                ""
            }
        );
        self.emit(
            "vmdry",
            "vm",
            &vm.id,
            None,
            vec![
                ("reason".into(), reason.to_string()),
                ("message".into(), message),
            ],
        );
    }

    /// A VM powered off for want of funds is to be powered on: funds for an interval
    /// are held first, or the power-on is refused saying why.
    pub(super) fn fund_power_on(&mut self, position: usize) -> Result<(), String> {
        self.start_charging_vm(position, VmHold::Record)
    }

    /// A VM holding resources that runs but is not charged (one made before VMs were
    /// charged, found after a restart; one whose power off for want of funds failed) is
    /// charged from now, into debt if need be.
    pub(super) fn resume_charging_vm(&mut self, position: usize) {
        let vm = self.vms.get(position);
        if vm.phase == VmPhase::Running
            && vm.charged_through.is_none()
            && self.start_charging_vm(position, VmHold::Anyway).is_ok()
            && self.vms.get(position).charged_through.is_some()
        {
            self.store_vm(position);
        }
    }
}
