//! The boundary between the engine and whatever makes guests: the engine decides which
//! VM goes where and when (it owns the VMs and their system jobs); a [`VmHost`] does the
//! work on a thread of its own and reports the outcome. `drover` implements it over the
//! provisioners of `drover-cloud`; the engine knows nothing of QEMU.

use crate::vm::Vm;

/// What is asked of a VM's guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmOperation {
    Create,
    PowerOn,
    PowerOff,
    /// The VM's record still names `from`; the guest must end up serving `to`.
    Migrate {
        from: String,
        to: String,
    },
    Destroy,
}

impl VmOperation {
    pub fn name(&self) -> &'static str {
        match self {
            VmOperation::Create => "create",
            VmOperation::PowerOn => "power on",
            VmOperation::PowerOff => "power off",
            VmOperation::Migrate { .. } => "migrate",
            VmOperation::Destroy => "destroy",
        }
    }
}

/// How an operation ended: `Err` says why it failed, in a sentence for the user.
pub type Outcome = Result<(), String>;

/// Called once with the outcome of an operation.
pub type Done = Box<dyn FnOnce(Outcome) + Send>;

/// Makes, powers, moves and ends guests.
///
/// Operations are **idempotent**: repeating one that was done (a restarted service
/// does not know whether it was) succeeds without doing it twice.
pub trait VmHost: Send + Sync {
    /// Starts `operation` on `vm` and returns at once; `done` is called from another
    /// thread when it ends.
    fn run(&self, vm: Vm, operation: VmOperation, done: Done);

    /// After a restart: whether the guest of `vm` still runs (it is then adopted).
    fn alive(&self, vm: &Vm) -> bool;

    /// A connection to the agent of the running guest of `vm`, over which a job's
    /// process runs its command in the guest (`drover guest-run`).
    fn connect_agent(&self, vm: &Vm) -> Result<std::os::fd::OwnedFd, String>;
}

/// No way to make guests (none configured or installed): every operation fails and
/// says why.
pub struct NoVmHost(pub String);

impl VmHost for NoVmHost {
    fn run(&self, _vm: Vm, operation: VmOperation, done: Done) {
        // It never made a guest, so there is none to end: a destroy succeeds, so that
        // the VMs whose setup it failed can be deleted.
        match operation {
            VmOperation::Destroy => done(Ok(())),
            _ => done(Err(self.0.clone())),
        }
    }

    fn alive(&self, _vm: &Vm) -> bool {
        false
    }

    fn connect_agent(&self, _vm: &Vm) -> Result<std::os::fd::OwnedFd, String> {
        Err(self.0.clone())
    }
}
