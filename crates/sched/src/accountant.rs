//! What the engine asks of an accounting manager: to hold a job's funds before it starts
//! (or say why it may not), and to charge a run when it ends. The answers are store
//! writes that join the journal batch of the start or the end, so the money moves exactly
//! when the job does. VMs are charged the same way for what they hold, for as long as
//! they hold it, at each interval (`engine::vm_charges`). `drover` plugs the embedded
//! ledger in; [`NoAccounting`] charges nothing.

use drover_store::Write;

use crate::clock::Seconds;
use crate::job::Job;
use crate::vm::Vm;

/// A VM's periodic charge ([`Accountant::vm_renew`]): `charged` seconds to charge, then
/// funds for `seconds` more to hold (`how`), at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewal {
    pub charged: i64,
    pub seconds: i64,
    pub now: Seconds,
    pub how: VmHold,
}

/// What [`Accountant::vm_hold`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmHold {
    /// Only checks that the funds could be held (before a VM is made).
    Check,
    /// Holds them, or says why it may not.
    Record,
    /// Holds them even past the account's balance (a VM that runs on into debt).
    Anyway,
}

pub trait Accountant: Send + Sync {
    /// The job is about to start: the writes that hold its funds, or why it may not.
    fn start(&self, job: &Job, now: Seconds) -> Result<Vec<Write>, String>;

    /// A run of the job ended (or never began) after `seconds` of activity: the writes
    /// that charge it and release what was held.
    fn end(&self, job: &Job, seconds: i64, now: Seconds) -> Vec<Write>;

    /// How often VMs are charged, in seconds; `None`: VMs are not charged.
    fn vm_charge_interval(&self) -> Option<Seconds> {
        None
    }

    /// Whether a running VM whose account cannot pay for its next interval is powered
    /// off (else it runs on into debt).
    fn vm_powers_off_when_dry(&self) -> bool {
        false
    }

    /// The VM holds its resources for (up to) `seconds` more: the writes that hold its
    /// funds, or why they cannot be held.
    fn vm_hold(
        &self,
        _vm: &Vm,
        _seconds: i64,
        _now: Seconds,
        _how: VmHold,
    ) -> Result<Vec<Write>, String> {
        Ok(Vec::new())
    }

    /// The VM held its resources `seconds` since it was last charged: the writes that
    /// charge them and release what was held.
    fn vm_settle(&self, _vm: &Vm, _seconds: i64, _now: Seconds) -> Vec<Write> {
        Vec::new()
    }

    /// A VM's periodic charge: `charged` seconds are charged and its lien released, then
    /// funds for `seconds` more held, as one change no reader sees half done. Answers
    /// the writes, and whether the new funds could be held.
    fn vm_renew(&self, vm: &Vm, renewal: Renewal) -> (Vec<Write>, Result<(), String>) {
        let mut writes = self.vm_settle(vm, renewal.charged, renewal.now);
        let held = self
            .vm_hold(vm, renewal.seconds, renewal.now, renewal.how)
            .map(|held| writes.extend(held));
        (writes, held)
    }

    /// Goes back to what the store recorded, after a failed commit: what `start` and
    /// `end` changed in memory for writes that were not made is undone.
    fn reload(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Accounting disabled.
pub struct NoAccounting;

impl Accountant for NoAccounting {
    fn start(&self, _job: &Job, _now: Seconds) -> Result<Vec<Write>, String> {
        Ok(Vec::new())
    }

    fn end(&self, _job: &Job, _seconds: i64, _now: Seconds) -> Vec<Write> {
        Vec::new()
    }
}
