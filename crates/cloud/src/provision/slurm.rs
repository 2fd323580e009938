//! Guests in Slurm allocations: with the Slurm resource manager the engine's nodes are
//! other machines, and a VM's guest runs on the node the engine chose, as a Slurm job
//! that holds the VM's processors and memory there.
//!
//! A guest is one Slurm job (named [`SlurmGuestConfig::job_name_prefix`] + the VM's id,
//! as the guest account, pinned to its node with `--nodelist`), whose batch script runs
//! `qemu-system-x86_64` in the VM's directory of [`SlurmGuestConfig::guest_dir`]: a
//! directory at the same path on this machine and on every node (shared storage), the
//! guest account's, holding what QEMU makes and uses: the overlay and extra disks, its
//! sockets (`console-<slot>`, `qmp-<slot>`, `agent-<slot>.sock`) and its standard error
//! (`qemu-<slot>.err`). Unix sockets do not cross machines, so the service reaches them
//! through **relays**: `srun --jobid=<the guest's job> --overlap socat STDIO
//! UNIX-CONNECT:<socket>`, run as the guest account, whose standard input and output
//! are one end of a socket pair; Slurm carries the bytes (authenticated by munge), no
//! port is opened. The console is read through one such relay for the guest's life
//! (into `console.log` of the service's own run directory, as for local guests); the
//! monitor (QMP) and the guest agent through one per conversation.
//!
//! What the service keeps of a VM is in `<run_dir>/<id>` (root's, 0700): `spec.json`,
//! `console.log` and `guest.json` (the Slurm job, node and slot of the running guest,
//! and during a migration its destination's), so a restart finds the guest again
//! ([`Provisioner::adopt`]), keeps the side of a migration that runs it, and ends any
//! other job of the VM's name.
//!
//! A live migration starts the destination as a second job on the target node (the
//! other slot, `-incoming defer`), has it listen on a port of its node's address
//! (`migrate-incoming tcp:<address>:0`, the port QEMU chose read back), tells the
//! source to migrate there, then ends the source's job: its allocation is freed, the
//! destination's holds the VM. The stream is TCP under TLS with a key made for each
//! migration (`tls-creds-psk`): whoever else reaches the port fails the handshake.
//! Slurm not answering fails an operation; it is never taken for a guest gone.
//!
//! Trust: root never reads or writes in the guest directory: disks are made, QEMU's
//! error read and a VM's files removed by commands run as the guest account.
//! Everything Slurm is given is checked: node names and addresses against a strict
//! character set, paths for QEMU's and Slurm's special characters.

use std::fs::DirBuilder;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_domain::ids::is_plain_name as safe_name;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::console::{Consoles, DEFAULT_CONSOLE_LIMIT, Feed, Tap};
use super::qemu::{Accel, Wiring, check_option_path, follow_migration, guest_args, trimmed};
use super::qmp::Qmp;
use super::sandbox::{GuestAccount, Handover, open_boot_file};
use super::{
    BusyGuard, BusySet, GuestCommand, GuestOutput, MigrationTarget, Power, ProvisionError,
    Provisioner, Result, VmHandle, VmSpec, VmStatus, agent, check_vm_id, io, prepare_run_dir,
};

/// How long a QMP read may wait (a relay adds Slurm's step launch to the first).
const QMP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a `quit` (then `scancel`) may take to end a guest's job.
const QUIT_WAIT: Duration = Duration::from_secs(10);
/// A unix socket's path is at most this long (`sun_path`, with its NUL).
const MAX_SOCKET_PATH: usize = 107;
/// The user name of the migrations' pre-shared key (`keys.psk`).
const PSK_USER: &str = "drover";
/// How often a boot or a migration looks again.
const LOOK_EVERY: Duration = Duration::from_millis(200);
/// The batch script of every guest's job, in the run directory: QEMU's command line
/// comes as its positional parameters (never through a shell's parsing).
const BATCH_SCRIPT: &str = "guest-batch.sh";
const BATCH_SCRIPT_TEXT: &str =
    "#!/bin/sh\n# Drover's VM guest: QEMU (\"$@\") in the VM's directory.\nexec \"$@\"\n";

/// The cluster guests run on: its clients, and the names of this service's guests.
#[derive(Debug, Clone)]
pub struct SlurmSite {
    /// Where `sbatch`, `srun`, `squeue`, `scancel` and `sinfo` are.
    pub bin_dir: PathBuf,
    /// The clients' `SLURM_CONF`, if not theirs by default.
    pub slurm_conf: Option<PathBuf>,
    /// Where guests' jobs go (else Slurm's default partition).
    pub partition: Option<String>,
    /// What every guest's job name begins with; the VM's id follows. It makes the jobs
    /// this service's, for the resource manager to leave alone.
    pub job_name_prefix: String,
}

/// Where Slurm is, and where guests keep their files.
#[derive(Debug, Clone)]
pub struct SlurmGuestConfig {
    pub site: SlurmSite,
    /// The service's own files of each VM (made 0700, root's).
    pub run_dir: PathBuf,
    /// The guests' files: the same path on this machine and on every node, the guest
    /// account's (made here when missing).
    pub guest_dir: PathBuf,
    /// `kvm` or `tcg` for every guest (decided beforehand: nodes are not probed).
    pub accel: Accel,
    /// How long a boot may take, waiting for the allocation included.
    pub boot_deadline: Duration,
    /// How long a power off waits for the guest to obey ACPI.
    pub shutdown_grace: Duration,
    /// The longest any Slurm command may take.
    pub command_timeout: Duration,
}

/// Runs guests as Slurm jobs on the engine's nodes (see the module's documentation).
pub struct SlurmGuests {
    config: SlurmGuestConfig,
    /// Who guests (and relays) run as; `None` only when the service is not root.
    account: Option<GuestAccount>,
    busy: BusySet,
    agent_busy: BusySet,
    consoles: Consoles,
}

/// The running guest of a VM: its Slurm job, node and slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Placement {
    job: u64,
    node: String,
    slot: String,
    /// A migration's destination, recorded before the guest is sent: a restart keeps
    /// whichever side runs the guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    incoming: Option<Box<Placement>>,
}

/// A connection through `srun`: the stream, and the relay's process (ended and
/// reaped when dropped).
struct Relay {
    stream: UnixStream,
    child: Option<Child>,
}

impl Relay {
    /// The connection and the relay's process, to be kept apart (the relay then lives
    /// until its process is ended by whoever has it).
    fn into_parts(mut self) -> std::io::Result<(UnixStream, Child)> {
        let stream = self.stream.try_clone()?;
        let child = self
            .child
            .take()
            .expect("a relay has its process until taken");
        Ok((stream, child))
    }
}

impl Drop for Relay {
    /// Closes the connection first, so that the remote socat sees its end and leaves
    /// (a killed srun may leave it holding QEMU's one-client socket); kills what
    /// stays after a moment.
    fn drop(&mut self) {
        // Its parts taken (`into_parts`): the connection lives on elsewhere.
        if let Some(child) = &mut self.child {
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
            let end = Instant::now() + Duration::from_secs(2);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A node's address as a migration URI's host: a name or an IPv4 address as it is,
/// an IPv6 address in brackets.
fn uri_host(address: &str) -> Option<String> {
    let ok = !address.is_empty()
        && address.len() <= 255
        && address
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'));
    match ok {
        false => None,
        true if address.contains(':') => Some(format!("[{address}]")),
        true => Some(address.to_string()),
    }
}

fn other_slot(slot: &str) -> &'static str {
    if slot == "a" { "b" } else { "a" }
}

impl SlurmGuests {
    /// Refused when a directory cannot be used (see [`prepare_run_dir`]) or holds
    /// characters QEMU's or Slurm's options cannot carry.
    pub fn new(config: SlurmGuestConfig, account: Option<GuestAccount>) -> Result<Self> {
        // SAFETY: geteuid has no preconditions.
        if account.is_none() && unsafe { libc::geteuid() } == 0 {
            return Err(ProvisionError::RunDir {
                path: config.guest_dir.clone(),
                why: "the service runs as root and has no guest account to run guests as".into(),
            });
        }
        for dir in [&config.run_dir, &config.guest_dir] {
            let text = dir.as_os_str().as_encoded_bytes();
            if text.iter().any(|b| matches!(b, b',' | b'%' | b':' | b'\\')) {
                return Err(ProvisionError::RunDir {
                    path: dir.clone(),
                    why: "its path holds ',', '%', ':' or '\\', which QEMU's, Slurm's or \
                          socat's options cannot carry"
                        .into(),
                });
            }
        }
        prepare_run_dir(&config.run_dir)?;
        let script = config.run_dir.join(BATCH_SCRIPT);
        std::fs::write(&script, BATCH_SCRIPT_TEXT)
            .map_err(io("writing the guests' batch script"))?;
        let guests = SlurmGuests {
            config,
            account,
            busy: BusySet::default(),
            agent_busy: BusySet::default(),
            consoles: Consoles::new(DEFAULT_CONSOLE_LIMIT),
        };
        guests.prepare_guest_dir()?;
        Ok(guests)
    }

    /// Keeps at most `bytes` of each guest's console (1 MiB unless set).
    pub fn with_console_limit(mut self, bytes: u64) -> Self {
        self.consoles = Consoles::new(bytes);
        self
    }

    /// Makes the guest directory (the guest account's, 0700) when it is missing.
    fn prepare_guest_dir(&self) -> Result<()> {
        let dir = &self.config.guest_dir;
        let refuse = |why: String| ProvisionError::RunDir {
            path: dir.clone(),
            why,
        };
        if !dir.is_absolute() {
            return Err(refuse("it must be an absolute path".into()));
        }
        let made = std::fs::symlink_metadata(dir).is_err();
        if made {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| refuse(e.to_string()))?;
        }
        let meta = std::fs::symlink_metadata(dir).map_err(|e| refuse(e.to_string()))?;
        if !meta.is_dir() {
            return Err(refuse("it is not a directory".into()));
        }
        if made && let Some(account) = &self.account {
            // lchown: a link put in its place meanwhile is never followed.
            std::os::unix::fs::lchown(dir, Some(account.uid), Some(account.gid))
                .map_err(|e| refuse(e.to_string()))?;
        }
        let meta = std::fs::symlink_metadata(dir).map_err(|e| refuse(e.to_string()))?;
        // Whoever else could write there could swap a guest's disks or sockets.
        use std::os::unix::fs::MetadataExt;
        if let Some(account) = &self.account
            && meta.uid() != account.uid
        {
            return Err(refuse(format!(
                "it belongs to uid {}, not to the guest account {}",
                meta.uid(),
                account.name
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(refuse("others than its owner may write to it".into()));
        }
        self.as_guest("test", &["-w".as_ref(), dir.as_os_str()])
            .map_err(|_| {
                refuse("the guest account cannot reach it (is a directory above it closed?)".into())
            })
            .map(drop)
    }

    fn service_dir(&self, id: &str) -> Result<PathBuf> {
        check_vm_id(id)?;
        // The longest socket path of the VM must fit a unix socket address.
        if self.guest_dir(id).join("console-a.sock").as_os_str().len() > MAX_SOCKET_PATH {
            return Err(ProvisionError::RunDir {
                path: self.config.guest_dir.clone(),
                why: format!(
                    "the path of VM {id}'s sockets would be longer than {MAX_SOCKET_PATH} \
                     bytes; use a shorter guest directory or id"
                ),
            });
        }
        Ok(self.config.run_dir.join(id))
    }

    fn guest_dir(&self, id: &str) -> PathBuf {
        self.config.guest_dir.join(id)
    }

    fn job_name(&self, id: &str) -> String {
        format!("{}{id}", self.config.site.job_name_prefix)
    }

    /// The directory of a VM that exists, and the VM marked busy while the guard lives.
    fn existing(&self, id: &str) -> Result<(PathBuf, BusyGuard<'_>)> {
        let dir = self.service_dir(id)?;
        let busy = self.busy.mark(id)?;
        if !dir.is_dir() {
            return Err(ProvisionError::NotFound(id.into()));
        }
        Ok((dir, busy))
    }

    fn placement(dir: &Path) -> Option<Placement> {
        let text = std::fs::read(dir.join("guest.json")).ok()?;
        let slot = |p: &Placement| matches!(p.slot.as_str(), "a" | "b");
        serde_json::from_slice::<Placement>(&text)
            .ok()
            .filter(|p| slot(p) && p.incoming.as_deref().is_none_or(slot))
    }

    fn set_placement(dir: &Path, placement: &Placement) -> Result<()> {
        let tmp = dir.join("guest.json.new");
        let text = serde_json::to_vec(placement).expect("a placement serializes");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, dir.join("guest.json")))
            .map_err(io("recording where the guest runs"))
    }

    fn load_spec(dir: &Path) -> Result<VmSpec> {
        super::read_spec(&dir.join("spec.json"))
    }

    /// A Slurm client's command, with a clean environment.
    fn slurm_command(&self, program: &str) -> Command {
        let mut command = Command::new(self.config.site.bin_dir.join(program));
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir("/");
        if let Some(conf) = &self.config.site.slurm_conf {
            command.env("SLURM_CONF", conf);
        }
        command
    }

    /// Runs `command`, which leads a process group of its own, bounded by the command
    /// timeout (then its group is killed): its standard output, or why it failed.
    fn bounded(&self, command: Command, what: &str) -> Result<String, String> {
        self.bounded_with(command, what, &[])
    }

    /// [`Self::bounded`], with `input` (a few bytes: written before the output is read)
    /// as its standard input.
    fn bounded_with(
        &self,
        mut command: Command,
        what: &str,
        input: &[u8],
    ) -> Result<String, String> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| format!("{what}: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            let _ = stdin.write_all(input);
        }
        let captured = super::exec::capture(&mut child, self.config.command_timeout);
        let status = child.wait().map_err(|e| format!("{what}: {e}"))?;
        let (timed_out, stdout, stderr) = captured.map_err(|e| format!("{what}: {e}"))?;
        if timed_out {
            return Err(format!(
                "{what}: no answer within {} s",
                self.config.command_timeout.as_secs()
            ));
        }
        if !status.success() {
            return Err(format!("{what}: {status}: {}", trimmed(&stderr)));
        }
        Ok(String::from_utf8_lossy(&stdout).into_owned())
    }

    fn slurm(&self, program: &str, args: &[String]) -> Result<String, String> {
        let mut command = self.slurm_command(program);
        command.args(args).process_group(0);
        self.bounded(command, program)
    }

    /// Runs `program` as the guest account (never as root), bounded; in a session of
    /// its own, so it leads its process group.
    fn as_guest(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<String, String> {
        self.as_guest_with(program, args, &[])
    }

    /// [`Self::as_guest`] with `input` as the program's standard input (never in its
    /// arguments, which every user of the machine may read).
    fn as_guest_with(
        &self,
        program: &str,
        args: &[&std::ffi::OsStr],
        input: &[u8],
    ) -> Result<String, String> {
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir("/");
        Handover::default().confine(&mut command, self.account.as_ref());
        self.bounded_with(command, program, input)
    }

    /// The Slurm state of `job` (`RUNNING`, `PENDING`...), `None` once Slurm has
    /// forgotten it; `Err` when Slurm does not answer (nothing is known then).
    fn job_state(&self, job: u64) -> Result<Option<String>, String> {
        let args = ["-h", "-j", &job.to_string(), "-o", "%T"].map(String::from);
        match self.slurm("squeue", &args) {
            Ok(out) => Ok(Some(out.trim().to_string()).filter(|s| !s.is_empty())),
            // Forgotten already: squeue refuses an id it does not know.
            Err(e) if e.contains("Invalid job id") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether Slurm says `job` may still run (waiting for its allocation, or
    /// running); `true` when it does not answer (it may).
    fn job_lives(&self, job: u64) -> bool {
        self.job_lives_known(job).unwrap_or(true)
    }

    fn job_lives_known(&self, job: u64) -> Result<bool, String> {
        Ok(matches!(
            self.job_state(job)?.as_deref(),
            Some("RUNNING" | "PENDING" | "CONFIGURING" | "SUSPENDED")
        ))
    }

    /// Whether Slurm says `job` ended (or forgot it): a wait for it stops.
    fn job_ended(&self, job: u64) -> bool {
        matches!(self.job_lives_known(job), Ok(false))
    }

    /// The placement of VM `id`'s guest if its job may still run (`running_only`:
    /// if it runs); refused when Slurm does not answer, which decides nothing.
    fn live_placement(
        &self,
        id: &str,
        dir: &Path,
        running_only: bool,
    ) -> Result<Option<Placement>> {
        let Some(placement) = Self::placement(dir) else {
            return Ok(None);
        };
        let unanswered = |why: String| ProvisionError::Slurm { id: id.into(), why };
        let live = match running_only {
            true => {
                self.job_state(placement.job)
                    .map_err(unanswered)?
                    .as_deref()
                    == Some("RUNNING")
            }
            false => self.job_lives_known(placement.job).map_err(unanswered)?,
        };
        Ok(live.then_some(placement))
    }

    /// The jobs of VM `id`'s name that may still run (the guest account's).
    fn jobs_of(&self, id: &str) -> Result<Vec<u64>> {
        let mut args = [
            "-h",
            "-o",
            "%i",
            "--states=PENDING,RUNNING,CONFIGURING,SUSPENDED",
        ]
        .map(String::from)
        .to_vec();
        args.push(format!("--name={}", self.job_name(id)));
        if let Some(account) = &self.account {
            args.push(format!("--user={}", account.uid));
        }
        self.slurm("squeue", &args)
            .map(|out| out.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .map_err(|why| ProvisionError::Slurm { id: id.into(), why })
    }

    /// Ends `job` (`scancel`) and waits until Slurm no longer runs it.
    fn cancel(&self, job: u64) {
        let _ = self.slurm("scancel", &[job.to_string()]);
        let end = Instant::now() + QUIT_WAIT;
        while self.job_lives(job) && Instant::now() < end {
            std::thread::sleep(LOOK_EVERY);
        }
    }

    /// A connection to the socket `name` of VM `id`'s guest directory, on the node of
    /// `job`, through `srun` as the guest account. With `retry`, socat waits for the
    /// socket to be made (a starting QEMU).
    fn relay(&self, id: &str, job: u64, name: &str, retry: bool) -> Result<Relay, String> {
        let (ours, theirs) = UnixStream::pair().map_err(|e| e.to_string())?;
        let theirs = OwnedFd::from(theirs);
        let out = theirs.try_clone().map_err(|e| e.to_string())?;
        let mut command = self.slurm_command("srun");
        // An absolute path: where a node cannot enter the directory, Slurm runs the
        // step in /tmp, where anyone may have made a socket of that name.
        let socket = self.guest_dir(id).join(name);
        let target = match retry {
            true => format!("UNIX-CONNECT:{},retry=300,interval=0.1", socket.display()),
            false => format!("UNIX-CONNECT:{}", socket.display()),
        };
        command
            .arg(format!("--jobid={job}"))
            .args([
                "--overlap",
                "--nodes=1",
                "--ntasks=1",
                "--quiet",
                "--unbuffered",
            ])
            .arg(format!("--chdir={}", self.guest_dir(id).display()))
            .args(["socat", "STDIO"])
            .arg(target)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::from(out))
            .stderr(Stdio::null());
        Handover::default().confine(&mut command, self.account.as_ref());
        let child = command.spawn().map_err(|e| format!("srun: {e}"))?;
        Ok(Relay {
            stream: ours,
            child: Some(child),
        })
    }

    /// The monitor of VM `id`'s guest in `slot` (job `job`), through a relay.
    fn qmp(&self, id: &str, job: u64, slot: &str) -> Result<(Qmp, Relay), String> {
        let relay = self.relay(id, job, &format!("qmp-{slot}.sock"), false)?;
        let stream = relay.stream.try_clone().map_err(|e| e.to_string())?;
        let qmp = Qmp::over(stream, QMP_TIMEOUT)?;
        Ok((qmp, relay))
    }

    fn query_status(&self, id: &str, job: u64, slot: &str) -> Result<String, String> {
        let (mut qmp, _relay) = self.qmp(id, job, slot)?;
        let status = qmp.execute("query-status", None)?;
        Ok(status
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string())
    }

    /// What QEMU wrote on its standard error in `slot` (read as the guest account).
    fn qemu_said(&self, id: &str, slot: &str) -> String {
        let path = self.guest_dir(id).join(format!("qemu-{slot}.err"));
        self.as_guest("tail", &["-c".as_ref(), "2000".as_ref(), path.as_os_str()])
            .map(|text| {
                let lines: Vec<&str> = text.lines().filter(|l| !l.contains(": info: ")).collect();
                trimmed(lines.join("\n").as_bytes())
            })
            .unwrap_or_else(|e| format!("its error output cannot be read: {e}"))
    }

    /// Checks a boot file: one QEMU's options can carry, that the guest account reads.
    fn check_boot_file(&self, what: &'static str, path: &Path) -> Result<()> {
        check_option_path(what, path)?;
        let (_, meta) = open_boot_file(what, path)?;
        if let Some(account) = &self.account
            && !account.may_read(&meta)
        {
            return Err(ProvisionError::BootFile {
                what,
                path: path.into(),
                why: format!(
                    "the guest account {} cannot read it (on the nodes, QEMU opens it as that \
                     account); make it readable by all, or by a group of the account",
                    account.name
                ),
            });
        }
        Ok(())
    }

    fn check_spec(&self, spec: &VmSpec) -> Result<String> {
        super::qemu::QemuProvisioner::check_limits(spec)?;
        self.check_boot_file("kernel", &spec.boot.kernel)?;
        self.check_boot_file("initramfs", &spec.boot.initramfs)?;
        if let Some(disk) = &spec.boot.disk {
            self.check_boot_file("disk", &disk.path)?;
        }
        match &spec.node {
            Some(node) if safe_name(node) => Ok(node.clone()),
            Some(node) => Err(ProvisionError::InvalidSpec(format!(
                "the node '{}': not a Slurm node name",
                node.chars().take(64).collect::<String>()
            ))),
            None => Err(ProvisionError::InvalidSpec(
                "no node: the engine places a VM before its guest is made".into(),
            )),
        }
    }

    /// Makes the VM's guest directory and disks, as the guest account.
    fn make_disks(&self, spec: &VmSpec) -> Result<()> {
        let dir = self.guest_dir(&spec.id);
        let failed = |why: String| ProvisionError::InvalidSpec(format!("its disks: {why}"));
        // A directory of an earlier VM of this name is not this one's.
        self.as_guest("rm", &["-rf".as_ref(), dir.as_os_str()])
            .map_err(failed)?;
        self.as_guest("mkdir", &["-m".as_ref(), "700".as_ref(), dir.as_os_str()])
            .map_err(failed)?;
        if let Some(disk) = &spec.boot.disk {
            let overlay = dir.join("disk.qcow2");
            let mut args = super::qemu::overlay_args(disk);
            args.push(overlay.as_os_str());
            self.as_guest("qemu-img", &args).map_err(failed)?;
        }
        for (n, extra) in spec.extra_disks.iter().enumerate() {
            let path = dir.join(format!("extra-{n}.qcow2"));
            let size = format!("{}G", extra.size_gb);
            let args = ["create", "-q", "-f", "qcow2"];
            let mut all: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
            all.extend([path.as_os_str(), size.as_ref()]);
            self.as_guest("qemu-img", &all).map_err(failed)?;
        }
        Ok(())
    }

    /// QEMU's arguments for the guest of `spec` in `slot`, its files named by absolute
    /// paths in its directory.
    fn qemu_args(&self, spec: &VmSpec, slot: &str, incoming: bool) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        // Absolute paths only: a job whose directory cannot be entered runs in /tmp.
        let dir = self.guest_dir(&spec.id).display().to_string();
        let wiring = Wiring {
            kernel: path(&spec.boot.kernel),
            initramfs: path(&spec.boot.initramfs),
            console: format!("path={dir}/console-{slot}.sock"),
            qmp: format!("path={dir}/qmp-{slot}.sock"),
            agent: format!("path={dir}/agent-{slot}.sock"),
        };
        let mut args = vec!["qemu-system-x86_64".to_string()];
        args.extend(guest_args(spec, self.config.accel, &wiring));
        if spec.boot.disk.is_some() {
            args.push("-drive".into());
            args.push(format!("file={dir}/disk.qcow2,format=qcow2,if=virtio"));
        }
        for n in 0..spec.extra_disks.len() {
            args.push("-drive".into());
            args.push(format!("file={dir}/extra-{n}.qcow2,format=qcow2,if=virtio"));
        }
        if incoming {
            args.extend(["-incoming".into(), "defer".into()]);
        }
        args
    }

    /// Submits the guest of `spec` in `slot` on `node`: its Slurm job.
    fn submit(&self, spec: &VmSpec, node: &str, slot: &str, incoming: bool) -> Result<u64> {
        let dir = self.guest_dir(&spec.id);
        let mut args = vec![
            "--parsable".to_string(),
            format!("--job-name={}", self.job_name(&spec.id)),
            format!("--nodelist={node}"),
            "--nodes=1".into(),
            "--ntasks=1".into(),
            format!("--cpus-per-task={}", spec.processors),
            format!("--mem={}M", spec.memory_mib),
            format!("--chdir={}", dir.display()),
            format!("--output={}/qemu-{slot}.err", dir.display()),
            "--export=NONE".into(),
            // A guest rerun by Slurm would boot again with no one reading it.
            "--no-requeue".into(),
        ];
        if let Some(account) = &self.account {
            args.push(format!("--uid={}", account.uid));
            args.push(format!("--gid={}", account.gid));
        }
        if let Some(partition) = &self.config.site.partition {
            args.push(format!("--partition={partition}"));
        }
        args.push(self.config.run_dir.join(BATCH_SCRIPT).display().to_string());
        args.extend(self.qemu_args(spec, slot, incoming));
        let out = self
            .slurm("sbatch", &args)
            .map_err(|why| ProvisionError::Start {
                id: spec.id.clone(),
                why,
            })?;
        out.trim()
            .split(';')
            .next()
            .and_then(|j| j.parse().ok())
            .ok_or_else(|| ProvisionError::Start {
                id: spec.id.clone(),
                why: format!("sbatch answered {out:?}"),
            })
    }

    /// Starts the guest of `spec` in `slot` on `node` and returns once its monitor
    /// answers (with `incoming`, it waits for a migration): its job, and its console.
    fn start_guest(
        &self,
        spec: &VmSpec,
        log: &Path,
        node: &str,
        slot: &str,
        incoming: bool,
    ) -> Result<(u64, Arc<Tap>)> {
        let job = self.submit(spec, node, slot, incoming)?;
        let started = self.attach_new_guest(spec, log, job, slot);
        if started.is_err() {
            self.cancel(job);
        }
        started.map(|tap| (job, tap))
    }

    fn attach_new_guest(
        &self,
        spec: &VmSpec,
        log: &Path,
        job: u64,
        slot: &str,
    ) -> Result<Arc<Tap>> {
        let end = Instant::now() + self.config.boot_deadline;
        let failed = |why: String| ProvisionError::Start {
            id: spec.id.clone(),
            why,
        };
        let secs = self.config.boot_deadline.as_secs();
        loop {
            match self.job_state(job).as_ref().map(|s| s.as_deref()) {
                Ok(Some("RUNNING")) => break,
                // Slurm did not answer: it is asked again, until the deadline.
                Ok(Some("PENDING" | "CONFIGURING")) | Err(_) if Instant::now() < end => {}
                Ok(Some("PENDING" | "CONFIGURING")) | Err(_) => {
                    return Err(failed(format!(
                        "Slurm did not allocate its node within {secs} s"
                    )));
                }
                Ok(state) => {
                    return Err(failed(format!(
                        "its Slurm job {job} ended ({}): {}",
                        state.unwrap_or("gone"),
                        self.qemu_said(&spec.id, slot)
                    )));
                }
            }
            std::thread::sleep(LOOK_EVERY);
        }
        // QEMU waits for its console's reader (wait=on) before anything else.
        let console = self
            .relay(&spec.id, job, &format!("console-{slot}.sock"), true)
            .map_err(failed)?;
        let tap = self.read_console(spec, log, job, console)?;
        loop {
            if self.qmp(&spec.id, job, slot).is_ok() {
                return Ok(tap);
            }
            if self.job_ended(job) {
                return Err(failed(format!(
                    "the process ended at once: {}",
                    self.qemu_said(&spec.id, slot)
                )));
            }
            if Instant::now() >= end {
                return Err(failed(format!(
                    "its monitor did not answer within {secs} s"
                )));
            }
            std::thread::sleep(LOOK_EVERY);
        }
    }

    /// Reads the console through `relay` (whose process the reader reaps).
    fn read_console(&self, spec: &VmSpec, log: &Path, job: u64, relay: Relay) -> Result<Arc<Tap>> {
        let (stream, child) = relay
            .into_parts()
            .map_err(io("reading the guest's console"))?;
        let feed = Feed {
            pid: job as i32,
            stream,
            ready_line: spec.ready_line.clone(),
            child: Some(child),
        };
        self.consoles
            .attach(&spec.id, log, feed)
            .map_err(io("reading the guest's console"))
    }

    /// Boots the guest of `spec` on `node` and waits until it is up.
    fn boot(&self, spec: &VmSpec, dir: &Path, node: &str) -> Result<VmHandle> {
        let slot = Self::placement(dir).map_or_else(|| "a".to_string(), |p| p.slot);
        let (job, console) =
            self.start_guest(spec, &dir.join("console.log"), node, &slot, false)?;
        Self::set_placement(
            dir,
            &Placement {
                job,
                node: node.into(),
                slot: slot.clone(),
                incoming: None,
            },
        )?;
        let end = Instant::now() + self.config.boot_deadline;
        loop {
            let up = match &spec.ready_line {
                Some(_) => console.ready(),
                None => self
                    .query_status(&spec.id, job, &slot)
                    .is_ok_and(|s| s == "running"),
            };
            if up {
                return Ok(VmHandle {
                    id: spec.id.clone(),
                    pid: job as i32,
                    console: dir.join("console.log"),
                });
            }
            if self.job_ended(job) {
                return Err(ProvisionError::Start {
                    id: spec.id.clone(),
                    why: format!("the guest stopped while booting: {}", console.tail()),
                });
            }
            if Instant::now() >= end {
                self.cancel(job);
                return Err(ProvisionError::BootTimeout {
                    secs: self.config.boot_deadline.as_secs(),
                    console: console.tail(),
                });
            }
            std::thread::sleep(LOOK_EVERY);
        }
    }

    /// Ends the guest of `placement`: `quit`, then `scancel` if its job stays.
    fn hard_stop(&self, id: &str, placement: &Placement) {
        if let Ok((mut qmp, _relay)) = self.qmp(id, placement.job, &placement.slot) {
            let _ = qmp.execute("quit", None);
        }
        let end = Instant::now() + QUIT_WAIT;
        while self.job_lives(placement.job) && Instant::now() < end {
            std::thread::sleep(LOOK_EVERY);
        }
        if self.job_lives(placement.job) {
            self.cancel(placement.job);
        }
    }

    fn power_off(&self, id: &str, placement: &Placement) {
        if let Ok((mut qmp, relay)) = self.qmp(id, placement.job, &placement.slot)
            && qmp.execute("system_powerdown", None).is_ok()
        {
            drop((qmp, relay));
            let end = Instant::now() + self.config.shutdown_grace;
            while self.job_lives(placement.job) && Instant::now() < end {
                std::thread::sleep(LOOK_EVERY);
            }
            if !self.job_lives(placement.job) {
                return;
            }
        }
        self.hard_stop(id, placement);
    }

    /// The node's address, as a migration URI's host (`sinfo`'s `NodeAddr`).
    fn address_of(&self, node: &str) -> Result<String, String> {
        let args = ["-h", "-N", "-n", node, "-o", "%o"].map(String::from);
        let out = self.slurm("sinfo", &args)?;
        let address = out.lines().next().unwrap_or("").trim();
        uri_host(address).ok_or_else(|| format!("Slurm gives node {node} no usable address"))
    }

    /// The live migration of [`Provisioner::migrate`] to `node`.
    fn migrate_to(&self, id: &str, node: &str) -> Result<VmHandle> {
        let (dir, _busy) = self.existing(id)?;
        let mut spec = Self::load_spec(&dir)?;
        let failed = |why: String| ProvisionError::Migration { id: id.into(), why };
        if !safe_name(node) {
            return Err(failed("the target is not a Slurm node name".into()));
        }
        let source = self
            .live_placement(id, &dir, true)?
            .ok_or_else(|| ProvisionError::NotRunning(id.into()))?;
        let log = dir.join("console.log");
        let handle = |job: u64| VmHandle {
            id: id.into(),
            pid: job as i32,
            console: log.clone(),
        };
        // Asked again after a restart that kept the moved guest: done already.
        if source.node == node {
            return Ok(handle(source.job));
        }
        let host = self.address_of(node).map_err(failed)?;
        let slot = other_slot(&source.slot);
        spec.node = Some(node.into());
        let (job, _tap) = self.start_guest(&spec, &log, node, slot, true)?;
        let destination = Placement {
            job,
            node: node.into(),
            slot: slot.into(),
            incoming: None,
        };
        let recorded = Placement {
            incoming: Some(Box::new(destination.clone())),
            ..source.clone()
        };
        if let Err(e) = Self::set_placement(&dir, &recorded) {
            self.cancel(job);
            return Err(e);
        }
        let moved = self.send_guest(&spec, &source, job, slot, &host);
        // A failure heard after the guest arrived (a relay that broke) is no failure.
        if let Err(why) = moved
            && self.query_status(id, job, slot).as_deref() != Ok("running")
        {
            self.cancel(job);
            Self::set_placement(&dir, &source)?;
            return Err(failed(why));
        }
        // The source is paused now and the destination runs: end the source's job,
        // which frees its allocation. From here the guest is on the target node.
        self.hard_stop(id, &source);
        Self::set_placement(&dir, &destination)?;
        std::fs::write(
            dir.join("spec.json"),
            serde_json::to_vec_pretty(&spec).expect("a spec"),
        )
        .map_err(io("writing the VM's spec.json"))?;
        Ok(handle(job))
    }

    /// After a restart during a migration: keeps the side that runs the guest (the
    /// destination once it runs, else the source, resumed if the migration left it
    /// paused) and ends the other.
    fn settle_migration(&self, id: &str, dir: &Path, recorded: Placement) -> Result<()> {
        let Some(destination) = recorded.incoming.as_deref().cloned() else {
            return Ok(());
        };
        // Slurm away decides nothing: ending a side now could end the only copy.
        let unanswered = |why: String| ProvisionError::Slurm { id: id.into(), why };
        self.job_state(destination.job).map_err(unanswered)?;
        let source = Placement {
            incoming: None,
            ..recorded
        };
        let arrived = self.query_status(id, destination.job, &destination.slot);
        if arrived.as_deref() == Ok("running") {
            self.hard_stop(id, &source);
            return Self::set_placement(dir, &destination);
        }
        self.cancel(destination.job);
        if let Ok((mut qmp, _relay)) = self.qmp(id, source.job, &source.slot)
            && qmp
                .execute("query-status", None)
                .is_ok_and(|s| s["status"] != "running")
        {
            let _ = qmp.execute("cont", None);
        }
        Self::set_placement(dir, &source)
    }

    /// Has the destination (job `job`, `slot`) listen on `host`, and the source send
    /// the guest there.
    fn send_guest(
        &self,
        spec: &VmSpec,
        source: &Placement,
        job: u64,
        slot: &str,
        host: &str,
    ) -> Result<(), String> {
        let id = &spec.id;
        // The stream is TLS with a key made for this migration: whoever else reaches
        // the port first fails the handshake (the migration fails), never feeds a guest.
        let keys = self.new_migration_key(id)?;
        let (mut destination, _relay) = self.qmp(id, job, slot)?;
        use_tls(&mut destination, &keys, "server")?;
        let listen = json!({ "uri": format!("tcp:{host}:0") });
        destination.execute("migrate-incoming", Some(listen))?;
        let listening = destination.execute("query-migrate", None)?;
        let port = listening["socket-address"][0]["port"]
            .as_str()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| format!("the destination says no port: {listening}"))?;
        let (mut qmp, _source_relay) = self.qmp(id, source.job, &source.slot)?;
        use_tls(&mut qmp, &keys, "client")?;
        let uri = json!({ "uri": format!("tcp:{host}:{port}") });
        qmp.execute("migrate", Some(uri))?;
        follow_migration(&mut qmp, spec.memory_mib).map(drop)
    }

    /// Makes a new pre-shared key for a migration of VM `id` (`<its directory>/tls/
    /// keys.psk`, the guest account's, 0600) and returns its directory.
    fn new_migration_key(&self, id: &str) -> Result<PathBuf, String> {
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut random| std::io::Read::read_exact(&mut random, &mut key))
            .map_err(|e| format!("making the migration's key: {e}"))?;
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let dir = self.guest_dir(id).join("tls");
        let script = "umask 077 && mkdir -p \"$1\" && cat > \"$1/keys.psk\"";
        let args: [&std::ffi::OsStr; 4] = [
            "-c".as_ref(),
            script.as_ref(),
            "sh".as_ref(),
            dir.as_os_str(),
        ];
        self.as_guest_with("sh", &args, format!("{PSK_USER}:{hex}\n").as_bytes())?;
        Ok(dir)
    }
}

/// Has the QEMU of `qmp` migrate over TLS with the pre-shared key in `keys`, as
/// `endpoint` (`server`: the destination; `client`: the source).
fn use_tls(qmp: &mut Qmp, keys: &Path, endpoint: &str) -> Result<(), String> {
    let id = format!("migration-{endpoint}");
    // A source whose last migration failed has one already.
    let _ = qmp.execute("object-del", Some(json!({ "id": id })));
    let mut creds = json!({
        "qom-type": "tls-creds-psk",
        "id": id,
        "endpoint": endpoint,
        "dir": keys.display().to_string(),
    });
    // The client names its key; the server finds it by that name.
    if endpoint == "client" {
        creds["username"] = json!(PSK_USER);
    }
    qmp.execute("object-add", Some(creds))?;
    qmp.execute("migrate-set-parameters", Some(json!({ "tls-creds": id })))?;
    Ok(())
}

impl Provisioner for SlurmGuests {
    fn create(&self, spec: &VmSpec) -> Result<VmHandle> {
        let node = self.check_spec(spec)?;
        let dir = self.service_dir(&spec.id)?;
        let _busy = self.busy.mark(&spec.id)?;
        super::make_vm_dir(&dir, &spec.id)?;
        self.consoles.forget(&spec.id);
        let made = (|| {
            let text = serde_json::to_vec_pretty(spec).expect("a spec serializes");
            std::fs::write(dir.join("spec.json"), text)
                .map_err(io("writing the VM's spec.json"))?;
            self.make_disks(spec)?;
            self.boot(spec, &dir, &node)
        })();
        if made.is_err() {
            // A job whose sbatch outlived its answer, or whose start was not recorded.
            for job in self.jobs_of(&spec.id).unwrap_or_default() {
                self.cancel(job);
            }
            let _ = self.as_guest(
                "rm",
                &["-rf".as_ref(), self.guest_dir(&spec.id).as_os_str()],
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    fn power(&self, id: &str, power: Power) -> Result<()> {
        let (dir, _busy) = self.existing(id)?;
        let running = self.live_placement(id, &dir, false)?;
        match (power, running) {
            (Power::On, Some(_)) | (Power::Off, None) => Ok(()),
            (Power::On, None) => {
                let spec = Self::load_spec(&dir)?;
                let node = self.check_spec(&spec)?;
                self.boot(&spec, &dir, &node).map(drop)
            }
            (Power::Off, Some(placement)) => {
                self.power_off(id, &placement);
                Ok(())
            }
        }
    }

    fn destroy(&self, id: &str) -> Result<()> {
        let (dir, _busy) = self.existing(id)?;
        if let Some(placement) = self.live_placement(id, &dir, false)? {
            self.hard_stop(id, &placement);
        }
        // Done only once no job of its name may run: one Slurm did not answer about
        // would hold its node for ever, and nothing would end it.
        for job in self.jobs_of(id)? {
            self.cancel(job);
        }
        if !self.jobs_of(id)?.is_empty() {
            return Err(ProvisionError::Slurm {
                id: id.into(),
                why: "a job of its guest did not end".into(),
            });
        }
        self.consoles.forget(id);
        self.as_guest("rm", &["-rf".as_ref(), self.guest_dir(id).as_os_str()])
            .map_err(|why| ProvisionError::Io {
                what: "removing the guest's files".into(),
                error: std::io::Error::other(why),
            })?;
        std::fs::remove_dir_all(&dir).map_err(io("removing the VM's run directory"))
    }

    fn migrate(&self, id: &str, to: &MigrationTarget) -> Result<VmHandle> {
        match to {
            MigrationTarget::Node(node) => self.migrate_to(id, node),
            MigrationTarget::SameHost => Err(ProvisionError::NotSupported {
                provisioner: "slurm",
                operation: "a migration that names no node",
            }),
        }
    }

    fn status(&self, id: &str) -> Result<VmStatus> {
        let dir = self.service_dir(id)?;
        if !dir.is_dir() {
            return Ok(VmStatus::Gone);
        }
        Ok(match self.live_placement(id, &dir, true)? {
            Some(p) => VmStatus::Running {
                qemu: self
                    .query_status(id, p.job, &p.slot)
                    .unwrap_or_else(|_| "unresponsive".into()),
            },
            _ => VmStatus::Stopped,
        })
    }

    /// Also ends any other job of the VM's name (a migration's destination a restart
    /// interrupted), and reads the console again.
    fn adopt(&self, id: &str) -> Result<bool> {
        let Some((dir, _busy)) = super::known(self.existing(id))? else {
            return Ok(false);
        };
        if let Some(recorded) = Self::placement(&dir) {
            self.settle_migration(id, &dir, recorded)?;
        }
        let placement = Self::placement(&dir);
        for job in self.jobs_of(id)? {
            if placement.as_ref().is_none_or(|p| p.job != job) {
                self.cancel(job);
            }
        }
        let Some(placement) = self.live_placement(id, &dir, true)? else {
            return Ok(false);
        };
        if self
            .query_status(id, placement.job, &placement.slot)
            .is_err()
        {
            return Ok(false);
        }
        if !self.consoles.attached(id, placement.job as i32) {
            let spec = VmSpec {
                ready_line: None,
                ..Self::load_spec(&dir)?
            };
            let console = format!("console-{}.sock", placement.slot);
            match self.relay(id, placement.job, &console, false) {
                Ok(relay) => {
                    self.read_console(&spec, &dir.join("console.log"), placement.job, relay)?;
                }
                Err(e) => eprintln!("drover: the console of VM {id} cannot be read: {e}"),
            }
        }
        Ok(true)
    }

    fn run_in_guest(
        &self,
        id: &str,
        command: &GuestCommand,
        timeout: Duration,
    ) -> Result<GuestOutput> {
        super::check_guest_timeout(timeout)?;
        let _turn = self
            .agent_busy
            .mark(id)
            .map_err(|_| ProvisionError::GuestBusy(id.into()))?;
        let relay = self.agent_relay(id)?;
        let stream = relay.stream.try_clone().map_err(io("the agent's relay"))?;
        super::qemu::agent_answer(id, agent::run_over(stream, command, timeout), timeout)
    }

    fn connect_agent(&self, id: &str) -> Result<UnixStream> {
        let (stream, mut child) = self
            .agent_relay(id)?
            .into_parts()
            .map_err(io("the agent's relay"))?;
        // The relay lives as long as the job's process keeps the connection; its end
        // is reaped here.
        std::thread::spawn(move || child.wait());
        Ok(stream)
    }
}

impl SlurmGuests {
    /// A relay to the agent of VM `id`'s running guest.
    fn agent_relay(&self, id: &str) -> Result<Relay> {
        let dir = self.service_dir(id)?;
        if !dir.is_dir() {
            return Err(ProvisionError::NotFound(id.into()));
        }
        let placement = self
            .live_placement(id, &dir, true)?
            .ok_or_else(|| ProvisionError::NotRunning(id.into()))?;
        let socket = format!("agent-{}.sock", placement.slot);
        self.relay(id, placement.job, &socket, false)
            .map_err(|why| ProvisionError::GuestAgent { id: id.into(), why })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_and_addresses_are_checked_before_slurm_or_qemu_sees_them() {
        assert!(safe_name("node-1.rack_2"));
        for bad in ["", "-n", "a b", "a,b", "a;b", "../x", "a\nb"] {
            assert!(!safe_name(bad), "{bad:?}");
        }
        assert_eq!(uri_host("10.0.0.7").as_deref(), Some("10.0.0.7"));
        assert_eq!(uri_host("fe80::1").as_deref(), Some("[fe80::1]"));
        assert_eq!(uri_host("n1.cluster").as_deref(), Some("n1.cluster"));
        for bad in ["", "a,b", "x y", "h:1,server"] {
            assert_eq!(uri_host(bad), None, "{bad:?}");
        }
        assert_eq!(other_slot("a"), "b");
        assert_eq!(other_slot("b"), "a");
    }
}
