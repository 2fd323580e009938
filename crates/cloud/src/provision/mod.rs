//! Provisioners: what starts, powers, moves, stops and finds again the guest of a VM.
//!
//! A [`Provisioner`] is plain and synchronous: every call blocks (a boot waits for the
//! guest's ready line, a migration for its completion), so async callers run it through
//! `spawn_blocking`. Its state is on disk (a run directory per VM), so a restarted
//! service finds its guests again with [`Provisioner::adopt`].
//!
//! [`QemuProvisioner`] runs each guest as a local `qemu-system-x86_64` process;
//! [`SlurmGuests`] runs it on the node the engine chose, inside a Slurm job;
//! [`ExecProvisioner`] runs the site's own command for each operation (libvirt,
//! OpenStack or xCAT wrappers), as the operator configured them.
//!
//! [`Provisioner::run_in_guest`] runs a job's command inside a running guest through
//! the guest agent of the default image ([`agent`]: its protocol); only the QEMU
//! provisioner can.

use std::collections::HashSet;
use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod agent;
pub mod console;
pub mod exec;
pub mod kvm_probe;
pub mod qemu;
mod qmp;
pub mod sandbox;
pub mod slurm;

pub use console::DEFAULT_CONSOLE_LIMIT;
pub use exec::{ExecCommand, ExecCommands, ExecProvisioner};
pub use kvm_probe::{KVM_PROBE_DEADLINE, KvmProbe};
pub use qemu::{Accel, AccelDecision, QemuProvisioner};
pub use sandbox::GuestAccount;
pub use slurm::{SlurmGuestConfig, SlurmGuests, SlurmSite};

/// What a guest is started from. Paths are resolved already (`crate::boot::resolve`):
/// a provisioner never resolves anything a request names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmSpec {
    /// The VM's id: a path component and a process name, see [`check_vm_id`].
    pub id: String,
    pub processors: u32,
    pub memory_mib: u64,
    pub boot: BootMaterial,
    /// Extra disks (the VM's `storage`): empty qcow2 files made with the guest, attached
    /// after its image's disk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_disks: Vec<ExtraDisk>,
    /// A line the guest prints on its serial console when it is up (`GUEST-READY` for
    /// the default image): a start waits for it. Without one a start returns once the
    /// hypervisor runs the guest.
    pub ready_line: Option<String>,
    /// The node the engine placed it on: where [`SlurmGuests`] runs it (the
    /// provisioners of this machine run every guest here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// An empty disk made for a guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtraDisk {
    /// What it is for (the storage class); only said, never a path.
    pub class: String,
    pub size_gb: u64,
}

/// The image's boot material, as files of this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BootMaterial {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// The image's disk; each guest writes to an overlay of its own, never to it.
    pub disk: Option<Disk>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disk {
    pub path: PathBuf,
    /// Said, never probed: probing the format of a raw file lets its content choose.
    pub format: DiskFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskFormat {
    Qcow2,
    Raw,
}

impl DiskFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            DiskFormat::Qcow2 => "qcow2",
            DiskFormat::Raw => "raw",
        }
    }
}

/// A started guest.
#[derive(Debug, Clone, PartialEq)]
pub struct VmHandle {
    pub id: String,
    pub pid: i32,
    /// The guest's serial console, as a file (appended to by every boot; the QEMU
    /// provisioner keeps its newest part only, see [`console`]).
    pub console: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Power {
    On,
    Off,
}

/// Where a live migration goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationTarget {
    /// A new hypervisor process on this machine.
    SameHost,
    /// The node named (a Slurm node for [`SlurmGuests`]; the provisioners of this
    /// machine's logical nodes take it as [`MigrationTarget::SameHost`]).
    Node(String),
}

/// A command to run inside a guest ([`Provisioner::run_in_guest`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GuestCommand {
    /// Run as `sh -c <script>` in the guest's `/` (no NUL; at most
    /// [`agent::SCRIPT_LIMIT`] bytes).
    pub script: String,
    /// Exported before the script runs, over the agent's own environment (`PATH=/bin`,
    /// `HOME=/`). Names are shell variable names; values hold no NUL.
    pub env: Vec<(String, String)>,
    /// Its standard input (at most [`agent::STDIN_LIMIT`] bytes; empty: end of file at once).
    pub stdin: Vec<u8>,
}

/// How a command in a guest ended, and what it printed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GuestOutput {
    /// The guest shell's exit status: 0 to 255, 128 + n when signal n ended it.
    pub exit_code: i32,
    /// The first [`agent::OUTPUT_LIMIT`] bytes of its standard output.
    pub stdout: Vec<u8>,
    /// The first [`agent::OUTPUT_LIMIT`] bytes of its standard error.
    pub stderr: Vec<u8>,
    /// It printed more than `stdout` holds (the rest was dropped).
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

/// What became of a VM's guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmStatus {
    /// Its process runs; `qemu` is the hypervisor's own word (`query-status`:
    /// `running`, `paused`, `shutdown`..., or `unresponsive` when it does not answer;
    /// for [`ExecProvisioner`], what the status command printed after `running`).
    Running { qemu: String },
    /// Known (its run directory is there) but not running: it can be powered on.
    Stopped,
    /// Unknown to this provisioner.
    Gone,
}

/// Why an operation failed, in a sentence the operator can act on.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("{0} is not installed (Debian: scripts/services/guest-image.sh install)")]
    NotInstalled(&'static str),
    #[error("'{id}' is not a valid VM id: {why}")]
    InvalidId { id: String, why: &'static str },
    #[error("the VM cannot have {0}")]
    InvalidSpec(String),
    #[error("the {what} {path} cannot be used: {why}")]
    BootFile {
        what: &'static str,
        path: PathBuf,
        why: String,
    },
    #[error("the run directory {path} cannot be used: {why}")]
    RunDir { path: PathBuf, why: String },
    #[error("VM {0} exists already")]
    Exists(String),
    #[error("no VM {0} here")]
    NotFound(String),
    #[error("VM {0} is not running")]
    NotRunning(String),
    #[error("VM {0} is busy with another operation; try again when it is done")]
    Busy(String),
    #[error("qemu-system-x86_64 did not start VM {id}: {why}")]
    Start { id: String, why: String },
    #[error("the guest did not boot within {secs} s: {console}")]
    BootTimeout { secs: u64, console: String },
    #[error("the hypervisor of VM {id} does not answer: {why}")]
    Qmp { id: String, why: String },
    #[error("the migration of VM {id} failed: {why}")]
    Migration { id: String, why: String },
    #[error("Slurm did not answer about VM {id} ({why}); try again")]
    Slurm { id: String, why: String },
    #[error("the site's {operation} command cannot be used: {why}")]
    ExecConfig {
        operation: &'static str,
        why: String,
    },
    #[error("the site's {operation} command for VM {id} failed: {why}")]
    Exec {
        operation: &'static str,
        id: String,
        why: String,
    },
    #[error("{operation} is not supported by the {provisioner} provisioner")]
    NotSupported {
        provisioner: &'static str,
        operation: &'static str,
    },
    #[error("the command cannot be run in a guest: {0}")]
    InvalidGuestCommand(String),
    #[error("VM {0}'s guest is running another command; try again when it is done")]
    GuestBusy(String),
    #[error("the command in VM {id}'s guest did not finish within {secs} s: {detail}")]
    GuestTimeout {
        id: String,
        secs: u64,
        /// Whether the guest killed it, or its agent never answered.
        detail: &'static str,
    },
    #[error("the guest agent of VM {id} failed: {why}")]
    GuestAgent { id: String, why: String },
    #[error("{what}: {error}")]
    Io {
        what: String,
        #[source]
        error: std::io::Error,
    },
}

pub type Result<T, E = ProvisionError> = std::result::Result<T, E>;

/// Starts, powers, moves, stops and finds again guests. Every call blocks.
pub trait Provisioner: Send + Sync {
    /// Starts a new guest; refused when a VM of that id exists.
    fn create(&self, spec: &VmSpec) -> Result<VmHandle>;
    /// Powers a guest on (a new boot from its spec) or off (ACPI, then a hard stop
    /// after a grace). Powering a guest into the state it is in does nothing.
    fn power(&self, id: &str, power: Power) -> Result<()>;
    /// Stops the guest if it runs and forgets the VM (its overlay disk included).
    fn destroy(&self, id: &str) -> Result<()>;
    /// Moves a running guest without stopping it; returns the guest's new handle.
    fn migrate(&self, id: &str, to: &MigrationTarget) -> Result<VmHandle>;
    fn status(&self, id: &str) -> Result<VmStatus>;
    /// Whether the running guest of `id` is found again (after a restart of the service).
    fn adopt(&self, id: &str) -> Result<bool>;
    /// Runs `command` inside the running guest of `id` and returns how it ended. The
    /// command is killed in the guest after `timeout` ([`ProvisionError::GuestTimeout`]),
    /// and the call returns at most a few seconds later ([`agent::ANSWER_GRACE`]) even
    /// when the guest does not answer. One command at a time per VM: another meanwhile is
    /// refused ([`ProvisionError::GuestBusy`]), not queued.
    fn run_in_guest(
        &self,
        id: &str,
        command: &GuestCommand,
        timeout: Duration,
    ) -> Result<GuestOutput>;

    /// A connection to the agent of the running guest of `id`, for a job's process to
    /// run its command over (`agent::run_job`). Refused by provisioners without agents.
    fn connect_agent(&self, id: &str) -> Result<std::os::unix::net::UnixStream>;
}

/// The longest VM id: it names a directory and a process.
pub const MAX_VM_ID: usize = drover_domain::vm::MAX_ID;

/// Refuses an id that is not a safe path component and process name
/// ([`drover_domain::vm::id_problem`]).
pub fn check_vm_id(id: &str) -> Result<()> {
    match drover_domain::vm::id_problem(id) {
        None => Ok(()),
        Some(why) => Err(ProvisionError::InvalidId {
            id: id.chars().take(MAX_VM_ID + 8).collect(),
            why,
        }),
    }
}

/// Makes a provisioner's run directory (mode 0700) if needed. Refused when the path is
/// relative, is not a directory, or belongs to another user (whoever owns it could swap
/// what the service reads); a looser mode is narrowed to 0700.
pub(crate) fn prepare_run_dir(run_dir: &Path) -> Result<()> {
    let refuse = |why: String| ProvisionError::RunDir {
        path: run_dir.into(),
        why,
    };
    if !run_dir.is_absolute() {
        return Err(refuse("it must be an absolute path".into()));
    }
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(run_dir)
        .map_err(|e| refuse(e.to_string()))?;
    let meta = std::fs::symlink_metadata(run_dir).map_err(|e| refuse(e.to_string()))?;
    if !meta.is_dir() {
        return Err(refuse("it is not a directory".into()));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(refuse(format!(
            "it belongs to uid {}, not to this service (uid {me})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(run_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| refuse(e.to_string()))?;
    }
    Ok(())
}

/// Makes a VM's run directory (mode 0700); [`ProvisionError::Exists`] when it is there.
pub(crate) fn make_vm_dir(dir: &Path, id: &str) -> Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(ProvisionError::Exists(id.into()))
        }
        Err(e) => Err(io("creating the VM's run directory")(e)),
    }
}

/// The [`VmSpec`] a VM was made from, from its `spec.json`.
pub(crate) fn read_spec(path: &Path) -> Result<VmSpec> {
    let text = std::fs::read(path).map_err(io("reading the VM's spec.json"))?;
    serde_json::from_slice(&text).map_err(|e| ProvisionError::Io {
        what: "reading the VM's spec.json".into(),
        error: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

/// `None` for a VM this provisioner does not know (an adoption finds nothing).
pub(crate) fn known<T>(found: Result<T>) -> Result<Option<T>> {
    match found {
        Err(ProvisionError::NotFound(_)) => Ok(None),
        other => other.map(Some),
    }
}

/// Refuses a command in a guest with no time to run.
pub(crate) fn check_guest_timeout(timeout: Duration) -> Result<()> {
    if timeout.is_zero() {
        return Err(ProvisionError::InvalidGuestCommand(
            "the timeout is zero".into(),
        ));
    }
    Ok(())
}

pub(crate) fn io(what: &str) -> impl FnOnce(std::io::Error) -> ProvisionError + '_ {
    move |error| ProvisionError::Io {
        what: what.to_string(),
        error,
    }
}

/// The VMs an operation is under way for: a second one is refused, not queued.
#[derive(Default)]
pub(crate) struct BusySet(Mutex<HashSet<String>>);

impl BusySet {
    /// Marks `id` busy while the guard lives; [`ProvisionError::Busy`] when it is already.
    pub(crate) fn mark(&self, id: &str) -> Result<BusyGuard<'_>> {
        if !self.0.lock().unwrap().insert(id.to_string()) {
            return Err(ProvisionError::Busy(id.into()));
        }
        Ok(BusyGuard {
            set: self,
            id: id.to_string(),
        })
    }
}

pub(crate) struct BusyGuard<'a> {
    set: &'a BusySet,
    id: String,
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.set.0.lock().unwrap().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_by_the_domain_rule() {
        assert!(check_vm_id("web_01.prod").is_ok());
        assert!(matches!(
            check_vm_id("../etc"),
            Err(ProvisionError::InvalidId { .. })
        ));
    }
}
