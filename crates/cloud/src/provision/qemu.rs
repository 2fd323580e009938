//! Guests as local `qemu-system-x86_64` processes.
//!
//! Each VM has a directory `<run_dir>/<id>` (the id is checked by [`check_vm_id`] before
//! it names anything) holding everything the provisioner knows of it, so that nothing
//! lives only in memory:
//!
//! - `spec.json`: the [`VmSpec`] it was created from (power on boots it again);
//! - `console.log`: the serial console, appended to by every boot and every migration,
//!   and never larger than its limit (see [`super::console`]);
//! - `disk.qcow2`: the guest's overlay of the image's disk, when the image has one;
//! - `accel`: `kvm` or `tcg`, what the running guest was started with;
//! - `slot` and, per slot `a`/`b`, `qemu-<slot>.pid`, `qmp-<slot>.sock`,
//!   `agent-<slot>.sock`, `console-<slot>.sock`, `qemu-<slot>.err`: the guest's process;
//!   `agent-<slot>.sock` is the host end of the guest agent's virtio-serial port
//!   `org.drover.agent` (see [`super::agent`]), `console-<slot>.sock` its serial port's.
//!   A live migration starts the destination in the other slot and switches `slot` once
//!   the source is gone.
//!
//! Everything there is the service's (the directory is mode 0700) but the disks, which
//! are the guest account's: QEMU runs as that account, never as the service's user, and
//! gets its sockets and files as descriptors (see [`super::sandbox`]).
//!
//! A process is taken for the guest only if its command line names the VM and it runs
//! in the VM's directory (a stale pid file never makes us signal a stranger).
//!
//! The guest is a child of the service in a session of its own: it survives the
//! service's restarts, and [`Provisioner::adopt`] finds it again from the files above
//! (and reads its console again).
//!
//! [`Provisioner::run_in_guest`] talks to the agent through the current slot's socket;
//! the destination of a migration has its own, so the agent (which runs on in the
//! guest) is reached through it afterwards. One command at a time per VM: another is
//! refused with [`ProvisionError::GuestBusy`]. A command does not hold the VM busy for
//! other operations: a power off or a migration meanwhile ends its connection (the call
//! fails; the command finishes in the guest, its answer is dropped).
//!
//! [`Accel::Auto`] uses KVM only when the probe of [`super::kvm_probe`] finds it answers
//! (under nested virtualization a KVM guest can hang without a word): the service asks
//! for the verdict at start ([`QemuProvisioner::decide_accel`]), other callers get it at
//! their first boot; it is kept for the provisioner's life.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::console::{Consoles, DEFAULT_CONSOLE_LIMIT, Feed, Tap};
use super::kvm_probe::{KVM_PROBE_DEADLINE, KvmProbe, probe_kvm};
use super::qmp::Qmp;
use super::sandbox::{GuestAccount, Handover, open_boot_file};
use super::{
    BusyGuard, BusySet, GuestCommand, GuestOutput, MigrationTarget, Power, ProvisionError,
    Provisioner, Result, VmHandle, VmSpec, VmStatus, agent, check_vm_id, io, prepare_run_dir,
};

const QEMU: &str = "qemu-system-x86_64";
const QEMU_IMG: &str = "qemu-img";
/// How long a QMP read may wait.
const QMP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a `quit` (then a SIGKILL) may take to end the process.
const QUIT_WAIT: Duration = Duration::from_secs(5);
/// How long a live migration may take, plus a second for each 16 MiB of the guest's
/// memory (a large guest's memory takes that long to send at a modest rate).
const MIGRATION_DEADLINE: Duration = Duration::from_secs(120);
/// A unix socket's path is at most this long (`sun_path`, with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Which accelerator guests run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// KVM when `/dev/kvm` opens and the probe's guest answers under it in time
    /// ([`super::kvm_probe`]), else TCG.
    Auto,
    Kvm,
    /// Emulation: slow, but it works everywhere.
    Tcg,
}

impl Accel {
    /// `kvm` or `tcg` (`Auto` is not decided: `tcg`), as QEMU's `-accel` names them.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            _ => "tcg",
        }
    }
}

/// The accelerator new guests get, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccelDecision {
    /// [`Accel::Kvm`] or [`Accel::Tcg`].
    pub accel: Accel,
    /// The probe's finding, for [`Accel::Auto`]; `None`: it was given.
    pub probe: Option<KvmProbe>,
}

impl AccelDecision {
    /// KVM when the probe found it answers, else TCG.
    pub fn probed(found: KvmProbe) -> Self {
        AccelDecision {
            accel: if found.trusts_kvm() {
                Accel::Kvm
            } else {
                Accel::Tcg
            },
            probe: Some(found),
        }
    }

    /// Why, in words.
    pub fn reason(&self) -> String {
        match &self.probe {
            Some(probe) => probe.describe(),
            None => "as configured".into(),
        }
    }
}

/// The result of a live migration.
#[derive(Debug, Clone, PartialEq)]
pub struct Migration {
    pub handle: VmHandle,
    /// QEMU's own measures (`query-migrate`), when it gave them.
    pub total_ms: Option<u64>,
    pub downtime_ms: Option<u64>,
}

pub struct QemuProvisioner {
    run_dir: PathBuf,
    accel: Accel,
    boot_deadline: Duration,
    kvm_probe_deadline: Duration,
    shutdown_grace: Duration,
    /// [`Accel::Auto`]'s verdict once its probe ran.
    decided: Mutex<Option<AccelDecision>>,
    /// The VMs an operation is under way for: a second one is refused, not queued.
    busy: BusySet,
    /// The VMs a command runs in (through the agent): a second one is refused.
    agent_busy: BusySet,
    /// Who guests run as; `None` only when the service is not root.
    account: Option<GuestAccount>,
    /// The readers of the guests' consoles.
    consoles: Consoles,
}

/// The files of one VM.
struct Files {
    dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    A,
    B,
}

impl Slot {
    fn name(self) -> &'static str {
        match self {
            Slot::A => "a",
            Slot::B => "b",
        }
    }
    fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }
}

impl Files {
    fn spec(&self) -> PathBuf {
        self.dir.join("spec.json")
    }
    fn console(&self) -> PathBuf {
        self.dir.join("console.log")
    }
    fn console_socket(&self, slot: Slot) -> PathBuf {
        self.dir.join(format!("console-{}.sock", slot.name()))
    }
    fn overlay(&self) -> PathBuf {
        self.dir.join("disk.qcow2")
    }
    /// The `n`th extra disk (named by number: a storage class is never a path).
    fn extra(&self, n: usize) -> PathBuf {
        self.dir.join(format!("extra-{n}.qcow2"))
    }
    fn accel(&self) -> PathBuf {
        self.dir.join("accel")
    }
    fn pid(&self, slot: Slot) -> PathBuf {
        self.dir.join(format!("qemu-{}.pid", slot.name()))
    }
    fn qmp(&self, slot: Slot) -> PathBuf {
        self.dir.join(format!("qmp-{}.sock", slot.name()))
    }
    fn agent(&self, slot: Slot) -> PathBuf {
        self.dir.join(format!("agent-{}.sock", slot.name()))
    }
    fn err(&self, slot: Slot) -> PathBuf {
        self.dir.join(format!("qemu-{}.err", slot.name()))
    }
    fn slot(&self) -> Slot {
        match std::fs::read_to_string(self.dir.join("slot")).as_deref() {
            Ok("b") => Slot::B,
            _ => Slot::A,
        }
    }
    fn set_slot(&self, slot: Slot) -> Result<()> {
        let tmp = self.dir.join("slot.tmp");
        std::fs::write(&tmp, slot.name())
            .and_then(|()| std::fs::rename(&tmp, self.dir.join("slot")))
            .map_err(io("recording the guest's process slot"))
    }
    /// The guest's process in `slot`, if it runs: the pid file names a live process
    /// whose command line names this VM and that runs in this directory (or, started
    /// by a service before guests ran there, whose command line names the directory).
    fn process(&self, id: &str, slot: Slot) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(self.pid(slot))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        if pid <= 1 || !alive(pid) {
            return None;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let names_vm = args
            .windows(2)
            .any(|w| w[0] == b"-name" && w[1] == id.as_bytes());
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
        let in_dir =
            cwd.is_some_and(|cwd| std::fs::canonicalize(&self.dir).is_ok_and(|d| d == cwd));
        // `<dir>/`, so that VM `a`'s directory is not found in VM `a1`'s paths.
        let mut dir = self.dir.as_os_str().as_encoded_bytes().to_vec();
        dir.push(b'/');
        let names_dir = || {
            args.iter()
                .any(|arg| arg.windows(dir.len()).any(|w| w == dir.as_slice()))
        };
        (names_vm && (in_dir || names_dir())).then_some(pid)
    }
}

/// A process that exists and is not a zombie.
pub(super) fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn wait_exit(pid: i32, within: Duration) -> bool {
    let end = Instant::now() + within;
    while alive(pid) {
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// What QEMU wrote on its standard error in `slot`, as one line, but its notes (that
/// it waits for the console's connection).
fn qemu_said(files: &Files, slot: Slot) -> String {
    let text = std::fs::read(files.err(slot)).unwrap_or_default();
    let said: Vec<&[u8]> = text
        .split(|&b| b == b'\n')
        .filter(|line| !line.windows(8).any(|w| w == b": info: "))
        .collect();
    trimmed(&said.join(&b'\n'))
}

/// A program's output as one line for an error message.
pub(super) fn trimmed(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    if text.is_empty() {
        "it said nothing".into()
    } else {
        text.lines().collect::<Vec<_>>().join(" | ")
    }
}

pub(super) fn spawn_error(program: &'static str) -> impl FnOnce(std::io::Error) -> ProvisionError {
    move |error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            ProvisionError::NotInstalled(program)
        } else {
            ProvisionError::Io {
                what: format!("running {program}"),
                error,
            }
        }
    }
}

/// `qemu-img`'s arguments for an overlay of `disk`, but the overlay's path.
pub(super) fn overlay_args(disk: &super::Disk) -> Vec<&std::ffi::OsStr> {
    let mut args: Vec<&std::ffi::OsStr> = ["create", "-q", "-f", "qcow2", "-F"]
        .iter()
        .map(|a| a.as_ref())
        .collect();
    args.extend([
        disk.format.as_str().as_ref(),
        "-b".as_ref(),
        disk.path.as_os_str(),
    ]);
    args
}

/// Refuses a path QEMU's options cannot carry as given (a comma separates options).
pub(super) fn check_option_path(what: &'static str, path: &Path) -> Result<()> {
    if path.as_os_str().as_encoded_bytes().contains(&b',') {
        return Err(ProvisionError::BootFile {
            what,
            path: path.into(),
            why: "its path contains a comma, which QEMU options cannot carry; rename it".into(),
        });
    }
    Ok(())
}

fn check_boot_file(what: &'static str, path: &Path) -> Result<()> {
    check_option_path(what, path)?;
    open_boot_file(what, path).map(drop)
}

/// How a guest's parts are reached: its boot files as QEMU opens them, and the options
/// of its console, monitor and agent sockets (`fd=N`, handed over bound; or `path=P`,
/// which QEMU binds itself).
pub(super) struct Wiring {
    pub(super) kernel: String,
    pub(super) initramfs: String,
    pub(super) console: String,
    pub(super) qmp: String,
    pub(super) agent: String,
}

/// The arguments of every guest's QEMU but its disks.
pub(super) fn guest_args(spec: &VmSpec, accel: Accel, wiring: &Wiring) -> Vec<String> {
    let mut args: Vec<String> = vec!["-name".into(), spec.id.clone()];
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
    push(&["-accel", accel.name()]);
    push(&["-m", &spec.memory_mib.to_string()]);
    push(&["-smp", &spec.processors.to_string()]);
    push(&["-nodefaults", "-display", "none", "-no-reboot"]);
    // seccomp: no obsolete system calls, no set*id, no fork or exec, no scheduler or
    // CPU-affinity changes.
    push(&[
        "-sandbox",
        "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
    ]);
    push(&["-kernel", &wiring.kernel, "-initrd", &wiring.initramfs]);
    // no_timer_check: an emulated guest starved of CPU (many booting at once under TCG)
    // fails the kernel's IO-APIC timer check and panics.
    push(&["-append", "console=ttyS0 quiet panic=-1 no_timer_check"]);
    // wait=on: the guest does not run before the service reads its console.
    let console = format!("socket,id=console,{},server=on,wait=on", wiring.console);
    push(&["-chardev", &console, "-serial", "chardev:console"]);
    let qmp = format!("socket,id=qmp,{},server=on,wait=off", wiring.qmp);
    push(&["-chardev", &qmp, "-mon", "chardev=qmp,mode=control"]);
    // The guest agent's port; its socket is per slot, the port the same in both (a
    // migration needs the same devices on both sides).
    let agent = format!("socket,id=agent,{},server=on,wait=off", wiring.agent);
    push(&["-device", "virtio-serial", "-chardev", &agent]);
    push(&[
        "-device",
        "virtserialport,chardev=agent,name=org.drover.agent",
    ]);
    args
}

impl QemuProvisioner {
    /// A provisioner keeping its guests' files under `run_dir`, created (mode 0700) if
    /// needed; refused when it belongs to another user or its path cannot be a QEMU
    /// option. `boot_deadline` bounds a boot.
    pub fn new(run_dir: impl Into<PathBuf>, accel: Accel, boot_deadline: Duration) -> Result<Self> {
        let run_dir: PathBuf = run_dir.into();
        let refuse = |why: String| ProvisionError::RunDir {
            path: run_dir.clone(),
            why,
        };
        if run_dir.as_os_str().as_encoded_bytes().contains(&b',') {
            return Err(refuse(
                "its path contains a comma, which QEMU options cannot carry".into(),
            ));
        }
        prepare_run_dir(&run_dir)?;
        Ok(Self {
            run_dir,
            accel,
            boot_deadline,
            kvm_probe_deadline: KVM_PROBE_DEADLINE,
            shutdown_grace: Duration::from_secs(10),
            decided: Mutex::new(None),
            busy: BusySet::default(),
            agent_busy: BusySet::default(),
            account: None,
            consoles: Consoles::new(DEFAULT_CONSOLE_LIMIT),
        })
    }

    /// Runs guests as `account` (required when the service runs as root: a guest is
    /// never started as root).
    pub fn with_guest_account(mut self, account: GuestAccount) -> Self {
        self.account = Some(account);
        self
    }

    /// Keeps at most `bytes` of each guest's console (1 MiB unless set; at least 4 KiB).
    pub fn with_console_limit(mut self, bytes: u64) -> Self {
        self.consoles = Consoles::new(bytes);
        self
    }

    /// How long a power off waits for the guest to obey ACPI before it is stopped hard
    /// (10 s unless set).
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// How long [`Accel::Auto`]'s probe waits for its guest under KVM before it decides
    /// on TCG ([`KVM_PROBE_DEADLINE`] unless set).
    pub fn with_kvm_probe_deadline(mut self, deadline: Duration) -> Self {
        self.kvm_probe_deadline = deadline;
        self
    }

    /// Takes `found`, a KVM probe run beforehand ([`super::kvm_probe::probe_kvm`], as
    /// this provisioner's guest account), as [`Accel::Auto`]'s verdict.
    pub fn with_kvm_probe(self, found: KvmProbe) -> Self {
        if self.accel == Accel::Auto {
            *self.decided.lock().unwrap() = Some(AccelDecision::probed(found));
        }
        self
    }

    /// The accelerator new guests get, as far as it is decided (`None`: `Auto` before
    /// its probe).
    pub fn accel(&self) -> Option<Accel> {
        match self.accel {
            Accel::Auto => self.decided.lock().unwrap().as_ref().map(|d| d.accel),
            fixed => Some(fixed),
        }
    }

    /// Decides the accelerator now, if it is not yet: for [`Accel::Auto`], runs the
    /// KVM probe (as the guest account; at most the probe's deadline). The service
    /// calls it at start, so that no guest waits for it.
    pub fn decide_accel(&self) -> AccelDecision {
        if self.accel != Accel::Auto {
            return AccelDecision {
                accel: self.accel,
                probe: None,
            };
        }
        let mut decided = self.decided.lock().unwrap();
        decided
            .get_or_insert_with(|| {
                AccelDecision::probed(probe_kvm(self.account.as_ref(), self.kvm_probe_deadline))
            })
            .clone()
    }

    /// The live migration of [`Provisioner::migrate`], with QEMU's measures.
    pub fn migrate_measured(&self, id: &str, to: &MigrationTarget) -> Result<Migration> {
        // Logical nodes share this machine: any target is a new process here.
        let (MigrationTarget::SameHost | MigrationTarget::Node(_)) = to;
        let (files, _busy) = self.existing(id)?;
        let spec = self.load_spec(&files)?;
        let source = files.slot();
        let Some(source_pid) = files.process(id, source) else {
            return Err(ProvisionError::NotRunning(id.into()));
        };
        let accel = match std::fs::read_to_string(files.accel()).as_deref() {
            Ok("kvm") => Accel::Kvm,
            _ => Accel::Tcg,
        };
        let target = source.other();
        // The migration's channel: no path that QEMU's account would need to reach.
        let (channel, incoming) =
            UnixStream::pair().map_err(io("making the migration's channel"))?;
        self.launch(&spec, &files, target, accel, Some(incoming.into()))?;
        let Some(target_pid) = files.process(id, target) else {
            return Err(ProvisionError::Migration {
                id: id.into(),
                why: format!(
                    "the destination process ended at once: {}",
                    qemu_said(&files, target)
                ),
            });
        };
        let state = send_guest(&files, source, channel, spec.memory_mib).map_err(|why| {
            self.hard_stop(&files, target, target_pid);
            ProvisionError::Migration { id: id.into(), why }
        })?;
        // The source is paused now and the destination runs: end the source, then the
        // destination is the guest.
        self.hard_stop(&files, source, source_pid);
        files.set_slot(target)?;
        let qemu = self.query_status(&files, id, target)?;
        if qemu != "running" {
            return Err(ProvisionError::Migration {
                id: id.into(),
                why: format!("the destination is {qemu}, not running"),
            });
        }
        let ms = |key: &str| state.get(key).and_then(Value::as_u64);
        Ok(Migration {
            handle: VmHandle {
                id: id.into(),
                pid: target_pid,
                console: files.console(),
            },
            total_ms: ms("total-time"),
            downtime_ms: ms("downtime"),
        })
    }

    fn files(&self, id: &str) -> Result<Files> {
        check_vm_id(id)?;
        let dir = self.run_dir.join(id);
        // The longest socket path of the VM must fit a unix socket address.
        if dir.join("console-a.sock").as_os_str().len() > MAX_SOCKET_PATH {
            return Err(ProvisionError::RunDir {
                path: self.run_dir.clone(),
                why: format!(
                    "the path of VM {id}'s sockets would be longer than {MAX_SOCKET_PATH} bytes; use a shorter run directory or id"
                ),
            });
        }
        Ok(Files { dir })
    }

    /// The files of a VM that exists, and the VM marked busy while the guard lives.
    fn existing(&self, id: &str) -> Result<(Files, BusyGuard<'_>)> {
        let files = self.files(id)?;
        let busy = self.busy.mark(id)?;
        if !files.dir.is_dir() {
            return Err(ProvisionError::NotFound(id.into()));
        }
        Ok((files, busy))
    }

    fn load_spec(&self, files: &Files) -> Result<VmSpec> {
        super::read_spec(&files.spec())
    }

    fn check_spec(spec: &VmSpec) -> Result<()> {
        Self::check_limits(spec)?;
        check_boot_file("kernel", &spec.boot.kernel)?;
        check_boot_file("initramfs", &spec.boot.initramfs)?;
        if let Some(disk) = &spec.boot.disk {
            check_boot_file("disk", &disk.path)?;
        }
        Ok(())
    }

    /// The id, processors and memory of `spec`, within what a guest may have.
    pub(super) fn check_limits(spec: &VmSpec) -> Result<()> {
        check_vm_id(&spec.id)?;
        if !(1..=256).contains(&spec.processors) {
            return Err(ProvisionError::InvalidSpec(format!(
                "{} processors: from 1 to 256 are possible",
                spec.processors
            )));
        }
        if !(16..=1 << 20).contains(&spec.memory_mib) {
            return Err(ProvisionError::InvalidSpec(format!(
                "{} MiB of memory: from 16 MiB to 1 TiB are possible",
                spec.memory_mib
            )));
        }
        Ok(())
    }

    /// QEMU's command for the guest of `spec` in `slot`, with what it needs handed over
    /// (see [`super::sandbox`]): sockets bound here, files opened here.
    fn command(
        &self,
        spec: &VmSpec,
        files: &Files,
        slot: Slot,
        accel: Accel,
        handover: &mut Handover,
    ) -> Result<Command> {
        let account = self.account.as_ref();
        let kernel = handover.image_file("kernel", &spec.boot.kernel, account)?;
        let initramfs = handover.image_file("initramfs", &spec.boot.initramfs, account)?;
        let mut socket = |path: PathBuf| {
            handover
                .listen(&path)
                .map_err(io("binding the guest's sockets"))
        };
        let (qmp, agent) = (socket(files.qmp(slot))?, socket(files.agent(slot))?);
        let console = socket(files.console_socket(slot))?;
        let wiring = Wiring {
            kernel,
            initramfs,
            console: format!("fd={console}"),
            qmp: format!("fd={qmp}"),
            agent: format!("fd={agent}"),
        };
        let mut command = Command::new(QEMU);
        command.args(guest_args(spec, accel, &wiring));
        if let Some(disk) = &spec.boot.disk {
            let base = handover.image_file("disk", &disk.path, account)?;
            let overlay = handover.own_disk(&files.overlay(), account)?;
            command.arg("-drive").arg(format!(
                "file={overlay},format=qcow2,if=virtio,backing.file.filename={base},backing.driver={}",
                disk.format.as_str()
            ));
        }
        for n in 0..spec.extra_disks.len() {
            let extra = handover.own_disk(&files.extra(n), account)?;
            command
                .arg("-drive")
                .arg(format!("file={extra},format=qcow2,if=virtio"));
        }
        Ok(command)
    }

    /// Starts QEMU in `slot` as the guest account and returns once its monitor answers
    /// (its devices are made, and the guest runs or waits for its migration on
    /// `incoming`): its pid, and what its console says.
    fn launch(
        &self,
        spec: &VmSpec,
        files: &Files,
        slot: Slot,
        accel: Accel,
        incoming: Option<OwnedFd>,
    ) -> Result<(i32, Arc<Tap>)> {
        // SAFETY: geteuid has no preconditions.
        if self.account.is_none() && unsafe { libc::geteuid() } == 0 {
            return Err(ProvisionError::Start {
                id: spec.id.clone(),
                why: "the service runs as root and has no guest account to run guests as".into(),
            });
        }
        let _ = std::fs::remove_file(files.pid(slot));
        let err = File::create(files.err(slot)).map_err(io("creating QEMU's error log"))?;
        let mut handover = Handover::default();
        let mut command = self.command(spec, files, slot, accel, &mut handover)?;
        // Waiting in the socket's queue: QEMU takes it before the guest runs (wait=on).
        let console = UnixStream::connect(files.console_socket(slot))
            .map_err(io("connecting to the guest's console"))?;
        if let Some(channel) = incoming {
            let fd = handover.keep(channel);
            command.arg("-incoming").arg(format!("fd:{fd}"));
        }
        handover.confine(&mut command, self.account.as_ref());
        let child = command
            .current_dir(&files.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(spawn_error(QEMU))?;
        drop(handover);
        let pid = child.id() as i32;
        let started = (|| {
            std::fs::write(files.pid(slot), pid.to_string())
                .map_err(io("recording the guest's pid"))?;
            let feed = Feed {
                pid,
                stream: console,
                ready_line: spec.ready_line.clone(),
                child: Some(child),
            };
            let tap = (self.consoles)
                .attach(&spec.id, &files.console(), feed)
                .map_err(io("reading the guest's console"))?;
            self.wait_monitor(spec, files, slot, pid)?;
            Ok(tap)
        })();
        match started {
            Ok(tap) => Ok((pid, tap)),
            Err(e) => {
                if files.process(&spec.id, slot).is_some() {
                    self.hard_stop(files, slot, pid);
                }
                Err(e)
            }
        }
    }

    /// Waits until the monitor of QEMU `pid` in `slot` answers, at most the boot deadline.
    fn wait_monitor(&self, spec: &VmSpec, files: &Files, slot: Slot, pid: i32) -> Result<()> {
        let end = Instant::now() + self.boot_deadline;
        loop {
            if Qmp::connect(&files.qmp(slot), QMP_TIMEOUT).is_ok() {
                return Ok(());
            }
            let why = if !alive(pid) {
                format!("the process ended at once: {}", qemu_said(files, slot))
            } else if Instant::now() >= end {
                format!(
                    "its monitor did not answer within {} s",
                    self.boot_deadline.as_secs()
                )
            } else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            return Err(ProvisionError::Start {
                id: spec.id.clone(),
                why,
            });
        }
    }

    /// Boots the guest of `spec` in the VM's current slot and waits until it is up.
    fn boot(&self, spec: &VmSpec, files: &Files) -> Result<VmHandle> {
        let slot = files.slot();
        let accel = self.decide_accel().accel;
        let deadline = self.boot_deadline;
        std::fs::write(files.accel(), accel.name()).map_err(io("recording the accelerator"))?;
        let (pid, console) = self.launch(spec, files, slot, accel, None)?;
        let started = Instant::now();
        loop {
            let up = match &spec.ready_line {
                Some(_) => console.ready(),
                None => self
                    .query_status(files, &spec.id, slot)
                    .is_ok_and(|s| s == "running"),
            };
            if up {
                return Ok(VmHandle {
                    id: spec.id.clone(),
                    pid,
                    console: files.console(),
                });
            }
            if !alive(pid) {
                return Err(ProvisionError::Start {
                    id: spec.id.clone(),
                    why: format!("the guest stopped while booting: {}", console.tail()),
                });
            }
            if started.elapsed() >= deadline {
                self.hard_stop(files, slot, pid);
                return Err(ProvisionError::BootTimeout {
                    secs: deadline.as_secs(),
                    console: console.tail(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn query_status(&self, files: &Files, id: &str, slot: Slot) -> Result<String> {
        let qmp_error = |why: String| ProvisionError::Qmp { id: id.into(), why };
        let mut qmp = Qmp::connect(&files.qmp(slot), QMP_TIMEOUT).map_err(qmp_error)?;
        let status = qmp.execute("query-status", None).map_err(qmp_error)?;
        Ok(status
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string())
    }

    /// Reads the console of the adopted process `pid` unless it is read already. A
    /// guest started by a service without console sockets has none to read.
    fn read_console(&self, id: &str, files: &Files, slot: Slot, pid: i32) {
        if self.consoles.attached(id, pid) {
            return;
        }
        if let Ok(stream) = UnixStream::connect(files.console_socket(slot)) {
            let feed = Feed {
                pid,
                stream,
                ready_line: None,
                child: None,
            };
            if let Err(e) = self.consoles.attach(id, &files.console(), feed) {
                eprintln!("drover: the console of VM {id} cannot be read: {e}");
            }
        }
    }

    /// Ends the process: `quit` over QMP, then SIGKILL if it stays.
    fn hard_stop(&self, files: &Files, slot: Slot, pid: i32) {
        if let Ok(mut qmp) = Qmp::connect(&files.qmp(slot), QMP_TIMEOUT) {
            // The connection may close before the answer: the process is leaving.
            let _ = qmp.execute("quit", None);
        }
        if !wait_exit(pid, QUIT_WAIT) {
            // SAFETY: kill has no memory preconditions; `pid` was checked to be this
            // VM's QEMU (Files::process) just before.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            wait_exit(pid, QUIT_WAIT);
        }
        let _ = std::fs::remove_file(files.pid(slot));
    }

    /// Asks the guest to power down (ACPI), waits the grace, then stops it hard.
    fn power_off(&self, files: &Files, slot: Slot, pid: i32) {
        if let Ok(mut qmp) = Qmp::connect(&files.qmp(slot), QMP_TIMEOUT)
            && qmp.execute("system_powerdown", None).is_ok()
        {
            drop(qmp);
            if wait_exit(pid, self.shutdown_grace) {
                let _ = std::fs::remove_file(files.pid(slot));
                return;
            }
        }
        self.hard_stop(files, slot, pid);
    }
}

/// Migrates the guest of `slot` over `channel` (QEMU gets it over QMP); QEMU's last
/// `query-migrate` once it completed.
fn send_guest(
    files: &Files,
    slot: Slot,
    channel: UnixStream,
    memory_mib: u64,
) -> Result<Value, String> {
    let mut qmp = Qmp::connect(&files.qmp(slot), QMP_TIMEOUT)?;
    let name = json!({ "fdname": "migration" });
    qmp.execute_with_fd("getfd", name, channel.as_fd())?;
    drop(channel);
    qmp.execute("migrate", Some(json!({ "uri": "fd:migration" })))?;
    follow_migration(&mut qmp, memory_mib)
}

/// Waits until the migration the source of `qmp` (a guest of `memory_mib`) was told to
/// make completes (QEMU's last `query-migrate`), fails or outlasts
/// [`MIGRATION_DEADLINE`] (then cancelled).
pub(super) fn follow_migration(qmp: &mut Qmp, memory_mib: u64) -> Result<Value, String> {
    let allowed = MIGRATION_DEADLINE + Duration::from_secs(memory_mib / 16);
    let end = Instant::now() + allowed;
    loop {
        let state = qmp.execute("query-migrate", None)?;
        match state.get("status").and_then(Value::as_str) {
            Some("completed") => return Ok(state),
            Some("failed") | Some("cancelled") => {
                return Err(state
                    .get("error-desc")
                    .and_then(Value::as_str)
                    .unwrap_or("QEMU gave no reason")
                    .to_string());
            }
            _ if Instant::now() >= end => {
                let _ = qmp.execute("migrate_cancel", None);
                return Err(format!(
                    "it did not complete within {} s",
                    allowed.as_secs()
                ));
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

pub(super) fn kvm_opens() -> bool {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

impl Provisioner for QemuProvisioner {
    fn create(&self, spec: &VmSpec) -> Result<VmHandle> {
        Self::check_spec(spec)?;
        let files = self.files(&spec.id)?;
        let _busy = self.busy.mark(&spec.id)?;
        super::make_vm_dir(&files.dir, &spec.id)?;
        // A console of an earlier VM of this name is not this one's.
        self.consoles.forget(&spec.id);
        let made = (|| {
            let text = serde_json::to_vec_pretty(spec).expect("a spec serializes");
            std::fs::write(files.spec(), text).map_err(io("writing the VM's spec.json"))?;
            if let Some(disk) = &spec.boot.disk {
                let output = Command::new(QEMU_IMG)
                    .args(overlay_args(disk))
                    .arg(files.overlay())
                    .stdin(Stdio::null())
                    .output()
                    .map_err(spawn_error(QEMU_IMG))?;
                if !output.status.success() {
                    return Err(ProvisionError::BootFile {
                        what: "disk",
                        path: disk.path.clone(),
                        why: format!(
                            "qemu-img could not make an overlay of it: {}",
                            trimmed(&output.stderr)
                        ),
                    });
                }
            }
            for (n, disk) in spec.extra_disks.iter().enumerate() {
                let output = Command::new(QEMU_IMG)
                    .args(["create", "-q", "-f", "qcow2"])
                    .arg(files.extra(n))
                    .arg(format!("{}G", disk.size_gb))
                    .stdin(Stdio::null())
                    .output()
                    .map_err(spawn_error(QEMU_IMG))?;
                if !output.status.success() {
                    return Err(ProvisionError::InvalidSpec(format!(
                        "the {} disk of {} GB: qemu-img: {}",
                        disk.class,
                        disk.size_gb,
                        trimmed(&output.stderr)
                    )));
                }
            }
            self.boot(spec, &files)
        })();
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&files.dir);
        }
        made
    }

    fn power(&self, id: &str, power: Power) -> Result<()> {
        let (files, _busy) = self.existing(id)?;
        let slot = files.slot();
        let running = files.process(id, slot);
        match (power, running) {
            (Power::On, Some(_)) | (Power::Off, None) => Ok(()),
            (Power::On, None) => {
                let spec = self.load_spec(&files)?;
                Self::check_spec(&spec)?;
                self.boot(&spec, &files).map(|_| ())
            }
            (Power::Off, Some(pid)) => {
                self.power_off(&files, slot, pid);
                Ok(())
            }
        }
    }

    fn destroy(&self, id: &str) -> Result<()> {
        let (files, _busy) = self.existing(id)?;
        for slot in [Slot::A, Slot::B] {
            if let Some(pid) = files.process(id, slot) {
                self.hard_stop(&files, slot, pid);
            }
        }
        self.consoles.forget(id);
        std::fs::remove_dir_all(&files.dir).map_err(io("removing the VM's run directory"))
    }

    fn migrate(&self, id: &str, to: &MigrationTarget) -> Result<VmHandle> {
        self.migrate_measured(id, to).map(|m| m.handle)
    }

    fn status(&self, id: &str) -> Result<VmStatus> {
        let files = self.files(id)?;
        if !files.dir.is_dir() {
            return Ok(VmStatus::Gone);
        }
        let slot = files.slot();
        Ok(match files.process(id, slot) {
            Some(_) => VmStatus::Running {
                qemu: self
                    .query_status(&files, id, slot)
                    .unwrap_or_else(|_| "unresponsive".into()),
            },
            None => VmStatus::Stopped,
        })
    }

    /// Also settles a migration a restart interrupted: when only the destination runs,
    /// it becomes the guest; when both do, the unfinished destination is stopped.
    fn adopt(&self, id: &str) -> Result<bool> {
        let Some((files, _busy)) = super::known(self.existing(id))? else {
            return Ok(false);
        };
        let slot = files.slot();
        let current = files.process(id, slot);
        let other = files.process(id, slot.other());
        match (current, other) {
            (Some(_), Some(pid)) => self.hard_stop(&files, slot.other(), pid),
            (None, Some(_)) => {
                if self.query_status(&files, id, slot.other())? == "running" {
                    files.set_slot(slot.other())?;
                } else {
                    return Ok(false);
                }
            }
            _ => {}
        }
        let slot = files.slot();
        let Some(pid) = files.process(id, slot) else {
            return Ok(false);
        };
        if self.query_status(&files, id, slot).is_err() {
            return Ok(false);
        }
        self.read_console(id, &files, slot, pid);
        Ok(true)
    }

    fn connect_agent(&self, id: &str) -> Result<std::os::unix::net::UnixStream> {
        let files = self.files(id)?;
        let slot = files.slot();
        if files.process(id, slot).is_none() {
            return Err(ProvisionError::NotRunning(id.into()));
        }
        agent::connect(&files.agent(slot)).map_err(|e| ProvisionError::GuestAgent {
            id: id.into(),
            why: match e {
                agent::AgentError::Failed(why) | agent::AgentError::Invalid(why) => why,
                agent::AgentError::Timeout => "it did not answer".into(),
            },
        })
    }

    fn run_in_guest(
        &self,
        id: &str,
        command: &GuestCommand,
        timeout: Duration,
    ) -> Result<GuestOutput> {
        let files = self.files(id)?;
        super::check_guest_timeout(timeout)?;
        let _turn = self
            .agent_busy
            .mark(id)
            .map_err(|_| ProvisionError::GuestBusy(id.into()))?;
        if !files.dir.is_dir() {
            return Err(ProvisionError::NotFound(id.into()));
        }
        let slot = files.slot();
        if files.process(id, slot).is_none()
            || self.query_status(&files, id, slot).ok().as_deref() != Some("running")
        {
            return Err(ProvisionError::NotRunning(id.into()));
        }
        agent_answer(
            id,
            agent::run(&files.agent(slot), command, timeout),
            timeout,
        )
    }
}

/// What a command in VM `id`'s guest came to, as the provisioners answer it.
pub(super) fn agent_answer(
    id: &str,
    answer: std::result::Result<agent::Answer, agent::AgentError>,
    timeout: Duration,
) -> Result<GuestOutput> {
    match answer {
        Ok(answer) if answer.timed_out => Err(ProvisionError::GuestTimeout {
            id: id.into(),
            secs: agent::guest_secs(timeout),
            detail: "the guest killed it and all it started",
        }),
        Ok(answer) => Ok(answer.output),
        Err(agent::AgentError::Invalid(why)) => Err(ProvisionError::InvalidGuestCommand(why)),
        Err(agent::AgentError::Timeout) => Err(ProvisionError::GuestTimeout {
            id: id.into(),
            secs: agent::guest_secs(timeout),
            detail: "the guest agent did not answer (its console says GUEST-AGENT when it starts)",
        }),
        Err(agent::AgentError::Failed(why)) => {
            Err(ProvisionError::GuestAgent { id: id.into(), why })
        }
    }
}
