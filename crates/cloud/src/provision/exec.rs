//! Guests made by the site's own tools (libvirt, OpenStack, xCAT wrappers...): one
//! command per operation, named by the operator's configuration, never by a request.
//!
//! A command is an argv (an absolute program path, no shell) run in the run directory
//! with a clean environment: only `PATH=/usr/sbin:/usr/bin:/sbin:/bin` and the VM's
//! fields as `DROVER_VM_*` values (see [`ExecProvisioner`]). The VM's id is checked by
//! [`check_vm_id`] before anything runs and reaches the command only as
//! `DROVER_VM_ID`, never in its argv. Its standard input is `/dev/null`; its standard
//! output (the first [`OUTPUT_LIMIT`] bytes) and error (the last [`OUTPUT_LIMIT`] bytes)
//! are captured, the rest dropped. It runs in a process group of its own, which is
//! killed when its timeout passes, or a second after the command exited if something it
//! left there still holds its output open.
//!
//! Exit status 0 is success. Otherwise the error is the last non-empty lines of its
//! standard error (at most [`MESSAGE_LIMIT`] bytes), else how it ended.
//!
//! What the provisioner keeps of a VM is in `<run_dir>/<id>`: `spec.json`, the
//! [`VmSpec`] it was created from (its fields go to every later command of the VM), and
//! `console.log`, where the standard output of `create` and `migrate` is appended unless
//! the command names a console of its own (`console=<path>`).

use std::ffi::OsString;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{
    BusySet, GuestCommand, GuestOutput, MigrationTarget, Power, ProvisionError, Provisioner,
    Result, VmHandle, VmSpec, VmStatus, check_vm_id, io, prepare_run_dir,
};

/// The only `PATH` a site command sees.
pub const COMMAND_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// How much of a command's standard output (its start) and error (its end) is kept.
pub const OUTPUT_LIMIT: usize = 64 * 1024;
/// The longest failure message taken from a command's standard error.
pub const MESSAGE_LIMIT: usize = 1024;
/// How long output may stay open after the command exited before its group is killed.
const LINGER: Duration = Duration::from_secs(1);

/// One site command: what runs, and how long it may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecCommand {
    /// The program (an absolute path) and its arguments, run without a shell.
    pub argv: Vec<String>,
    /// When it passes, the command's whole process group is killed.
    pub timeout: Duration,
}

impl ExecCommand {
    pub fn new(argv: impl IntoIterator<Item = impl Into<String>>, timeout: Duration) -> Self {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            timeout,
        }
    }
}

/// The site's commands, one per operation.
///
/// What each is told, besides `DROVER_VM_ID` and the fields of the VM's spec when it is
/// known (`DROVER_VM_PROCESSORS`, `DROVER_VM_MEMORY_MIB`, `DROVER_VM_KERNEL`,
/// `DROVER_VM_INITRAMFS`, with a disk `DROVER_VM_DISK` and `DROVER_VM_DISK_FORMAT`, and
/// with extra disks `DROVER_VM_STORAGE`, `<class>:<GB>` each, comma-separated),
/// and what it must print:
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecCommands {
    /// Makes and starts the guest. May print `pid=<n>` and `console=<path>` (a relative
    /// path is taken in the run directory).
    pub create: ExecCommand,
    /// Stops the guest and forgets it.
    pub destroy: ExecCommand,
    /// `DROVER_VM_TARGET` (`same-host`). May print `pid=<n>` and `console=<path>`.
    pub migrate: ExecCommand,
    /// `DROVER_VM_POWER=on`; powering a running guest on must do nothing.
    pub power_on: ExecCommand,
    /// `DROVER_VM_POWER=off`; powering a stopped guest off must do nothing.
    pub power_off: ExecCommand,
    /// Prints `running`, `stopped` or `gone` as its first word.
    pub status: ExecCommand,
    /// Run before `status` when a restarted service adopts a VM, if the site needs it.
    pub adopt: Option<ExecCommand>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Create,
    Destroy,
    Migrate,
    PowerOn,
    PowerOff,
    Status,
    Adopt,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Create => "create",
            Operation::Destroy => "destroy",
            Operation::Migrate => "migrate",
            Operation::PowerOn => "power_on",
            Operation::PowerOff => "power_off",
            Operation::Status => "status",
            Operation::Adopt => "adopt",
        }
    }
}

impl ExecCommands {
    fn get(&self, operation: Operation) -> Option<&ExecCommand> {
        match operation {
            Operation::Create => Some(&self.create),
            Operation::Destroy => Some(&self.destroy),
            Operation::Migrate => Some(&self.migrate),
            Operation::PowerOn => Some(&self.power_on),
            Operation::PowerOff => Some(&self.power_off),
            Operation::Status => Some(&self.status),
            Operation::Adopt => self.adopt.as_ref(),
        }
    }
}

const OPERATIONS: [Operation; 7] = [
    Operation::Create,
    Operation::Destroy,
    Operation::Migrate,
    Operation::PowerOn,
    Operation::PowerOff,
    Operation::Status,
    Operation::Adopt,
];

fn check_command(operation: Operation, command: &ExecCommand) -> Result<()> {
    let refuse = |why: &str| {
        Err(ProvisionError::ExecConfig {
            operation: operation.name(),
            why: why.into(),
        })
    };
    let Some(program) = command.argv.first() else {
        return refuse("its argv is empty");
    };
    if !Path::new(program).is_absolute() {
        return refuse("its program must be an absolute path");
    }
    if command.argv.iter().any(|arg| arg.contains('\0')) {
        return refuse("its argv holds a NUL byte");
    }
    if command.timeout.is_zero() {
        return refuse("its timeout must be more than 0 s");
    }
    Ok(())
}

/// Runs the site's commands for every operation (see the module's documentation).
pub struct ExecProvisioner {
    run_dir: PathBuf,
    commands: ExecCommands,
    busy: BusySet,
}

impl ExecProvisioner {
    /// Refused when a command has no program, a relative one, a NUL byte or no time,
    /// and when the run directory cannot be used (as for QEMU: absolute, the service's,
    /// made 0700).
    pub fn new(run_dir: impl Into<PathBuf>, commands: ExecCommands) -> Result<Self> {
        for operation in OPERATIONS {
            if let Some(command) = commands.get(operation) {
                check_command(operation, command)?;
            }
        }
        let run_dir = run_dir.into();
        prepare_run_dir(&run_dir)?;
        Ok(Self {
            run_dir,
            commands,
            busy: BusySet::default(),
        })
    }

    fn vm_dir(&self, id: &str) -> Result<PathBuf> {
        check_vm_id(id)?;
        Ok(self.run_dir.join(id))
    }

    /// The environment of a VM's command: its id and, when known, its spec's fields.
    fn vm_env(id: &str, spec: Option<&VmSpec>) -> Vec<(&'static str, OsString)> {
        let mut env = vec![("DROVER_VM_ID", OsString::from(id))];
        if let Some(spec) = spec {
            env.push(("DROVER_VM_PROCESSORS", spec.processors.to_string().into()));
            env.push(("DROVER_VM_MEMORY_MIB", spec.memory_mib.to_string().into()));
            env.push(("DROVER_VM_KERNEL", spec.boot.kernel.clone().into()));
            env.push(("DROVER_VM_INITRAMFS", spec.boot.initramfs.clone().into()));
            if let Some(disk) = &spec.boot.disk {
                env.push(("DROVER_VM_DISK", disk.path.clone().into()));
                env.push(("DROVER_VM_DISK_FORMAT", disk.format.as_str().into()));
            }
            if !spec.extra_disks.is_empty() {
                let disks: Vec<String> = spec
                    .extra_disks
                    .iter()
                    .map(|d| format!("{}:{}", d.class, d.size_gb))
                    .collect();
                env.push(("DROVER_VM_STORAGE", disks.join(",").into()));
            }
        }
        env
    }

    /// The spec a VM was created from, if this provisioner created it.
    fn known_spec(dir: &Path) -> Option<VmSpec> {
        let text = std::fs::read(dir.join("spec.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Runs the command of `operation` for VM `id`; its standard output on success.
    fn run(
        &self,
        operation: Operation,
        id: &str,
        env: &[(&'static str, OsString)],
    ) -> Result<Vec<u8>> {
        let Some(command) = self.commands.get(operation) else {
            return Ok(Vec::new());
        };
        let failed = |why: String| ProvisionError::Exec {
            operation: operation.name(),
            id: id.into(),
            why,
        };
        let outcome = run_command(command, &self.run_dir, env).map_err(|e| {
            failed(format!(
                "{} could not be run: {e}",
                command.argv.first().map_or("", String::as_str)
            ))
        })?;
        if outcome.timed_out {
            let said = failure_message(&outcome.stderr);
            return Err(failed(match said {
                Some(said) => format!("killed after {} s; it said: {said}", secs(command)),
                None => format!("killed after {} s", secs(command)),
            }));
        }
        if outcome.status.success() {
            return Ok(outcome.stdout);
        }
        Err(failed(failure_message(&outcome.stderr).unwrap_or_else(
            || match (outcome.status.code(), outcome.status.signal()) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => "ended without a status".into(),
            },
        )))
    }

    /// The handle of a guest a `create` or `migrate` command started: `pid=<n>` and
    /// `console=<path>` from its output, else pid 0 and its output appended to
    /// `<run_dir>/<id>/console.log`.
    fn handle(&self, id: &str, dir: &Path, stdout: &[u8]) -> Result<VmHandle> {
        let text = String::from_utf8_lossy(stdout);
        let value = |key: &str| {
            text.split_whitespace()
                .find_map(|word| word.strip_prefix(key))
                .map(str::to_string)
        };
        let pid = value("pid=").and_then(|p| p.parse().ok()).unwrap_or(0);
        let console = match value("console=") {
            Some(path) => self.run_dir.join(path),
            None => {
                let console = dir.join("console.log");
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(&console)
                    .and_then(|mut file| file.write_all(stdout))
                    .map_err(io("appending the command's output to the VM's console"))?;
                console
            }
        };
        Ok(VmHandle {
            id: id.into(),
            pid,
            console,
        })
    }
}

fn secs(command: &ExecCommand) -> u64 {
    command.timeout.as_secs_f64().ceil() as u64
}

impl Provisioner for ExecProvisioner {
    fn create(&self, spec: &VmSpec) -> Result<VmHandle> {
        let dir = self.vm_dir(&spec.id)?;
        let _busy = self.busy.mark(&spec.id)?;
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                return Err(ProvisionError::Exists(spec.id.clone()));
            }
            Err(e) => return Err(io("creating the VM's run directory")(e)),
        }
        let made = (|| {
            let text = serde_json::to_vec_pretty(spec).expect("a spec serializes");
            std::fs::write(dir.join("spec.json"), text)
                .map_err(io("writing the VM's spec.json"))?;
            let stdout = self.run(
                Operation::Create,
                &spec.id,
                &Self::vm_env(&spec.id, Some(spec)),
            )?;
            self.handle(&spec.id, &dir, &stdout)
        })();
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    fn power(&self, id: &str, power: Power) -> Result<()> {
        let dir = self.vm_dir(id)?;
        let _busy = self.busy.mark(id)?;
        let mut env = Self::vm_env(id, Self::known_spec(&dir).as_ref());
        let (operation, word) = match power {
            Power::On => (Operation::PowerOn, "on"),
            Power::Off => (Operation::PowerOff, "off"),
        };
        env.push(("DROVER_VM_POWER", word.into()));
        self.run(operation, id, &env).map(|_| ())
    }

    /// The site's tool is the authority: its command runs for any valid id, and what
    /// this provisioner kept of the VM is removed once it succeeded.
    fn destroy(&self, id: &str) -> Result<()> {
        let dir = self.vm_dir(id)?;
        let _busy = self.busy.mark(id)?;
        let env = Self::vm_env(id, Self::known_spec(&dir).as_ref());
        self.run(Operation::Destroy, id, &env)?;
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                Err(io("removing the VM's run directory")(e))
            }
            _ => Ok(()),
        }
    }

    fn migrate(&self, id: &str, to: &MigrationTarget) -> Result<VmHandle> {
        let dir = self.vm_dir(id)?;
        let _busy = self.busy.mark(id)?;
        let mut env = Self::vm_env(id, Self::known_spec(&dir).as_ref());
        let target = match to {
            MigrationTarget::SameHost => "same-host".into(),
            MigrationTarget::Node(node) => node.into(),
        };
        env.push(("DROVER_VM_TARGET", target));
        let stdout = self.run(Operation::Migrate, id, &env)?;
        DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .or_else(|e| match e.kind() {
                ErrorKind::AlreadyExists => Ok(()),
                _ => Err(e),
            })
            .map_err(io("creating the VM's run directory"))?;
        self.handle(id, &dir, &stdout)
    }

    /// The first word the status command prints: `running` (the rest of its first line,
    /// if any, is the hypervisor's word), `stopped` or `gone`; anything else is an error.
    fn status(&self, id: &str) -> Result<VmStatus> {
        let dir = self.vm_dir(id)?;
        let env = Self::vm_env(id, Self::known_spec(&dir).as_ref());
        let stdout = self.run(Operation::Status, id, &env)?;
        let text = String::from_utf8_lossy(&stdout);
        let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("running") => {
                let rest = words.collect::<Vec<_>>().join(" ");
                Ok(VmStatus::Running {
                    qemu: if rest.is_empty() {
                        "running".into()
                    } else {
                        bounded_tail(&rest, 64)
                    },
                })
            }
            Some("stopped") => Ok(VmStatus::Stopped),
            Some("gone") => Ok(VmStatus::Gone),
            other => Err(ProvisionError::Exec {
                operation: Operation::Status.name(),
                id: id.into(),
                why: match other {
                    Some(word) => format!(
                        "it printed '{}', not running, stopped or gone",
                        word.chars().take(64).collect::<String>()
                    ),
                    None => "it printed nothing, not running, stopped or gone".into(),
                },
            }),
        }
    }

    /// Runs the adopt command (when the site has one), then answers whether the status
    /// command says the guest runs.
    fn adopt(&self, id: &str) -> Result<bool> {
        let dir = self.vm_dir(id)?;
        let _busy = self.busy.mark(id)?;
        let env = Self::vm_env(id, Self::known_spec(&dir).as_ref());
        self.run(Operation::Adopt, id, &env)?;
        Ok(matches!(self.status(id)?, VmStatus::Running { .. }))
    }

    /// The site's tools have no way into their guests here.
    fn run_in_guest(
        &self,
        id: &str,
        _command: &GuestCommand,
        _timeout: Duration,
    ) -> Result<GuestOutput> {
        check_vm_id(id)?;
        Err(ProvisionError::NotSupported {
            provisioner: "exec",
            operation: "running a command in a guest",
        })
    }

    fn connect_agent(&self, id: &str) -> Result<std::os::unix::net::UnixStream> {
        check_vm_id(id)?;
        Err(ProvisionError::NotSupported {
            provisioner: "exec",
            operation: "running a job in a guest",
        })
    }
}

/// How a command ended, and what it printed (bounded).
struct Outcome {
    status: ExitStatus,
    timed_out: bool,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// A bounded capture: the first or the last [`OUTPUT_LIMIT`] bytes of a stream.
struct Capture {
    bytes: Vec<u8>,
    keep_end: bool,
}

impl Capture {
    fn push(&mut self, chunk: &[u8]) {
        if self.keep_end {
            self.bytes.extend_from_slice(chunk);
            // Drained in steps, so that keeping the end costs no more than a copy per
            // OUTPUT_LIMIT bytes read.
            if self.bytes.len() > 2 * OUTPUT_LIMIT {
                self.bytes.drain(..self.bytes.len() - OUTPUT_LIMIT);
            }
        } else {
            let room = OUTPUT_LIMIT.saturating_sub(self.bytes.len());
            self.bytes
                .extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
    }

    fn into_bytes(mut self) -> Vec<u8> {
        if self.bytes.len() > OUTPUT_LIMIT {
            self.bytes.drain(..self.bytes.len() - OUTPUT_LIMIT);
        }
        self.bytes
    }
}

/// Whether the child has exited, without reaping it: while it is a zombie its pid (its
/// process group's id) cannot be taken by another process, so killing the group stays
/// safe.
fn run_command(
    command: &ExecCommand,
    run_dir: &Path,
    env: &[(&'static str, OsString)],
) -> std::io::Result<Outcome> {
    let mut child = Command::new(&command.argv[0])
        .args(&command.argv[1..])
        .env_clear()
        .env("PATH", COMMAND_PATH)
        .envs(env.iter().map(|(key, value)| (*key, value)))
        .current_dir(run_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let captured = capture(&mut child, command.timeout);
    let timed_out = captured.as_ref().map_or(true, |(timed_out, ..)| *timed_out);
    let status = child.wait()?;
    let (_, stdout, stderr) = captured?;
    Ok(Outcome {
        status,
        timed_out,
        stdout,
        stderr,
    })
}

/// Reads the child's output until it exited and closed it, or its time is up; kills its
/// group when something is left. The child is left to reap.
pub(super) fn capture(
    child: &mut Child,
    timeout: Duration,
) -> std::io::Result<(bool, Vec<u8>, Vec<u8>)> {
    let pgid = child.id();
    let started = Instant::now();
    let deadline = started + timeout;
    let mut streams: Vec<(File, Capture)> = Vec::with_capacity(2);
    if let Some(out) = child.stdout.take() {
        let capture = Capture {
            bytes: Vec::new(),
            keep_end: false,
        };
        streams.push((File::from(OwnedFd::from(out)), capture));
    }
    if let Some(err) = child.stderr.take() {
        let capture = Capture {
            bytes: Vec::new(),
            keep_end: true,
        };
        streams.push((File::from(OwnedFd::from(err)), capture));
    }
    let mut open = [true, true];
    let mut exited_at: Option<Instant> = None;
    let mut chunk = [0u8; 8192];
    let outcome = loop {
        if exited_at.is_none() && drover_shepherd::children::has_exited(pgid) {
            exited_at = Some(Instant::now());
        }
        let now = Instant::now();
        let all_closed = open.iter().take(streams.len()).all(|o| !o);
        match exited_at {
            Some(_) if all_closed => break Ok(false),
            Some(at) if now >= (at + LINGER).min(deadline) => {
                drover_shepherd::children::kill_group(pgid);
                break Ok(false);
            }
            None if now >= deadline => {
                drover_shepherd::children::kill_group(pgid);
                break Ok(true);
            }
            _ => {}
        }
        let mut fds: Vec<libc::pollfd> = streams
            .iter()
            .zip(open)
            .map(|((stream, _), is_open)| libc::pollfd {
                fd: if is_open { stream.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let wait = deadline
            .saturating_duration_since(now)
            .min(Duration::from_millis(20));
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds (negative fds are skipped).
        let ready = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                wait.as_millis() as i32,
            )
        };
        if ready < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() == ErrorKind::Interrupted {
                continue;
            }
            drover_shepherd::children::kill_group(pgid);
            break Err(error);
        }
        for (i, ((stream, capture), fd)) in streams.iter_mut().zip(&fds).enumerate() {
            if fd.fd < 0 || fd.revents == 0 {
                continue;
            }
            // Readable (or closed): one read cannot block.
            match stream.read(&mut chunk) {
                Ok(0) => open[i] = false,
                Ok(n) => capture.push(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => open[i] = false,
            }
        }
    };
    let mut captures = streams.into_iter().map(|(_, capture)| capture.into_bytes());
    let stdout = captures.next().unwrap_or_default();
    let stderr = captures.next().unwrap_or_default();
    outcome.map(|timed_out| (timed_out, stdout, stderr))
}

/// The last non-empty lines of a command's standard error, joined, at most
/// [`MESSAGE_LIMIT`] bytes.
fn failure_message(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let mut kept: Vec<&str> = Vec::new();
    let mut len = 0;
    for line in text.lines().rev().map(str::trim).filter(|l| !l.is_empty()) {
        if len + line.len() + 3 > MESSAGE_LIMIT {
            if kept.is_empty() {
                return Some(bounded_tail(line, MESSAGE_LIMIT));
            }
            break;
        }
        len += line.len() + 3;
        kept.push(line);
    }
    if kept.is_empty() {
        return None;
    }
    kept.reverse();
    Some(kept.join(" | "))
}

/// The end of `text`, at most `limit` bytes, cut at a character boundary.
fn bounded_tail(text: &str, limit: usize) -> String {
    let mut start = text.len().saturating_sub(limit);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::provision::qemu::alive;
    use crate::provision::{BootMaterial, Disk, DiskFormat};

    /// A site command: a shell script in `dir` that records its environment in
    /// `<run>/<name>.env`, then runs `body`.
    fn script(dir: &Path, name: &str, body: &str) -> ExecCommand {
        let path = dir.join(format!("{name}.sh"));
        std::fs::write(&path, format!("#!/bin/sh\nenv > \"{name}.env\"\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        ExecCommand::new([path.to_str().unwrap()], Duration::from_secs(10))
    }

    struct Site {
        _tmp: tempfile::TempDir,
        bin: PathBuf,
        run: PathBuf,
    }

    impl Site {
        fn new() -> Self {
            let tmp = tempfile::tempdir().unwrap();
            let bin = tmp.path().join("bin");
            std::fs::create_dir(&bin).unwrap();
            let run = tmp.path().join("run");
            Site {
                _tmp: tmp,
                bin,
                run,
            }
        }

        /// Every operation a script that succeeds; `status` says `status_word`.
        fn commands(&self, status_word: &str) -> ExecCommands {
            ExecCommands {
                create: script(&self.bin, "create", "echo booting; echo pid=4242"),
                destroy: script(&self.bin, "destroy", ""),
                migrate: script(
                    &self.bin,
                    "migrate",
                    "echo moved; echo console=/var/log/x.log",
                ),
                power_on: script(&self.bin, "power_on", ""),
                power_off: script(&self.bin, "power_off", ""),
                status: script(&self.bin, "status", &format!("echo '{status_word}'")),
                adopt: Some(script(&self.bin, "adopt", "")),
            }
        }

        fn provisioner(&self, commands: ExecCommands) -> ExecProvisioner {
            ExecProvisioner::new(&self.run, commands).unwrap()
        }

        /// The environment the command of `name` saw, one `KEY=value` a line.
        fn env(&self, name: &str) -> Vec<String> {
            let text = std::fs::read_to_string(self.run.join(format!("{name}.env")))
                .unwrap_or_else(|e| panic!("{name} did not run: {e}"));
            text.lines().map(str::to_string).collect()
        }
    }

    fn spec(id: &str) -> VmSpec {
        VmSpec {
            id: id.into(),
            processors: 2,
            memory_mib: 256,
            boot: BootMaterial {
                kernel: "/images/k/vmlinuz".into(),
                initramfs: "/images/k/initrd.img".into(),
                disk: Some(Disk {
                    path: "/images/k/disk.raw".into(),
                    format: DiskFormat::Raw,
                }),
            },
            extra_disks: Vec::new(),
            ready_line: None,
            node: None,
        }
    }

    fn has(env: &[String], line: &str) {
        assert!(env.iter().any(|l| l == line), "{line} not in {env:?}");
    }

    /// Only PATH, PWD and the shell's own bookkeeping, besides the VM's fields.
    fn clean(env: &[String]) {
        for line in env {
            let key = line.split('=').next().unwrap();
            assert!(
                key.starts_with("DROVER_VM_")
                    || ["PATH", "PWD", "SHLVL", "_", "OLDPWD"].contains(&key),
                "unexpected {line} in {env:?}"
            );
        }
    }

    /// The process whose pid a script wrote to `<run>/child.pid` ends within 5 s.
    fn the_child_ends(site: &Site) {
        let child: i32 = std::fs::read_to_string(site.run.join("child.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        while alive(child) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(child), "the command's child {child} still runs");
    }

    #[test]
    fn every_operation_runs_its_command_with_the_vms_fields() {
        let site = Site::new();
        let p = site.provisioner(site.commands("running paused"));

        let handle = p.create(&spec("vm-1")).unwrap();
        assert_eq!(handle.id, "vm-1");
        assert_eq!(handle.pid, 4242);
        assert_eq!(handle.console, site.run.join("vm-1/console.log"));
        let console = std::fs::read_to_string(&handle.console).unwrap();
        assert_eq!(console, "booting\npid=4242\n");
        let env = site.env("create");
        clean(&env);
        for line in [
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
            "DROVER_VM_ID=vm-1",
            "DROVER_VM_PROCESSORS=2",
            "DROVER_VM_MEMORY_MIB=256",
            "DROVER_VM_KERNEL=/images/k/vmlinuz",
            "DROVER_VM_INITRAMFS=/images/k/initrd.img",
            "DROVER_VM_DISK=/images/k/disk.raw",
            "DROVER_VM_DISK_FORMAT=raw",
        ] {
            has(&env, line);
        }
        has(&env, &format!("PWD={}", site.run.display()));
        assert!(matches!(
            p.create(&spec("vm-1")),
            Err(ProvisionError::Exists(id)) if id == "vm-1"
        ));

        p.power("vm-1", Power::Off).unwrap();
        let env = site.env("power_off");
        clean(&env);
        has(&env, "DROVER_VM_POWER=off");
        has(&env, "DROVER_VM_ID=vm-1");
        // The spec's fields reach every later command of the VM.
        has(&env, "DROVER_VM_MEMORY_MIB=256");
        p.power("vm-1", Power::On).unwrap();
        has(&site.env("power_on"), "DROVER_VM_POWER=on");

        let moved = p.migrate("vm-1", &MigrationTarget::SameHost).unwrap();
        assert_eq!(moved.pid, 0);
        assert_eq!(moved.console, PathBuf::from("/var/log/x.log"));
        let env = site.env("migrate");
        clean(&env);
        has(&env, "DROVER_VM_TARGET=same-host");
        has(&env, "DROVER_VM_KERNEL=/images/k/vmlinuz");

        assert_eq!(
            p.status("vm-1").unwrap(),
            VmStatus::Running {
                qemu: "paused".into()
            }
        );
        has(&site.env("status"), "DROVER_VM_ID=vm-1");
        assert!(p.adopt("vm-1").unwrap());
        let env = site.env("adopt");
        clean(&env);
        has(&env, "DROVER_VM_ID=vm-1");

        p.destroy("vm-1").unwrap();
        has(&site.env("destroy"), "DROVER_VM_DISK_FORMAT=raw");
        assert!(!site.run.join("vm-1").exists());
    }

    #[test]
    fn status_reads_the_first_word() {
        let site = Site::new();
        for (word, expected) in [
            (
                "running",
                Some(VmStatus::Running {
                    qemu: "running".into(),
                }),
            ),
            ("stopped now", Some(VmStatus::Stopped)),
            ("gone", Some(VmStatus::Gone)),
            ("weird state", None),
            ("", None),
        ] {
            let mut commands = site.commands(word);
            commands.adopt = None;
            let p = site.provisioner(commands);
            let known = expected.is_some();
            match (p.status("vm-2"), expected) {
                (Ok(status), Some(expected)) => assert_eq!(status, expected),
                (Err(ProvisionError::Exec { operation, why, .. }), None) => {
                    assert_eq!(operation, "status");
                    let first = word.split_whitespace().next().unwrap_or("nothing");
                    assert!(why.contains(first), "{why}");
                }
                (got, want) => panic!("{word:?}: {got:?}, wanted {want:?}"),
            }
            // Adoption asks the status command: a word it does not know is an error.
            match p.adopt("vm-2") {
                Ok(runs) => assert_eq!(runs, word == "running", "{word}"),
                Err(error) => assert!(!known, "{word}: {error}"),
            }
        }
    }

    #[test]
    fn a_failing_command_says_why() {
        let site = Site::new();
        let mut commands = site.commands("running");
        commands.create = script(
            &site.bin,
            "create",
            "echo working; echo 'first' >&2; echo >&2; echo 'no such network: lab0' >&2; exit 3",
        );
        commands.power_on = script(&site.bin, "power_on", "exit 7");
        commands.power_off = script(&site.bin, "power_off", "kill -TERM $$");
        let p = site.provisioner(commands);
        let error = p.create(&spec("vm-3")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the site's create command for VM vm-3 failed: first | no such network: lab0"
        );
        // A failed create leaves nothing behind.
        assert!(!site.run.join("vm-3").exists());
        let error = p.power("vm-3", Power::On).unwrap_err().to_string();
        assert!(
            error.ends_with("power_on command for VM vm-3 failed: exited with status 7"),
            "{error}"
        );
        let error = p.power("vm-3", Power::Off).unwrap_err().to_string();
        assert!(error.ends_with("killed by signal 15"), "{error}");
    }

    #[test]
    fn a_hanging_command_and_its_children_are_killed_at_the_timeout() {
        let site = Site::new();
        let mut commands = site.commands("running");
        let mut hang = script(
            &site.bin,
            "destroy",
            "sleep 1000 & echo $! > child.pid; echo 'stuck on the lock' >&2; sleep 1000",
        );
        hang.timeout = Duration::from_millis(500);
        commands.destroy = hang;
        let p = site.provisioner(commands);
        let started = Instant::now();
        let error = p.destroy("vm-4").unwrap_err().to_string();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(
            error.ends_with("failed: killed after 1 s; it said: stuck on the lock"),
            "{error}"
        );
        the_child_ends(&site);
    }

    #[test]
    fn a_child_left_holding_the_output_is_killed_soon_after_the_command_exits() {
        let site = Site::new();
        let mut commands = site.commands("running");
        commands.power_on = script(&site.bin, "power_on", "sleep 1000 & echo $! > child.pid");
        let p = site.provisioner(commands);
        let started = Instant::now();
        p.power("vm-5", Power::On).unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        the_child_ends(&site);
    }

    #[test]
    fn output_is_bounded() {
        let site = Site::new();
        let mut commands = site.commands("running");
        commands.destroy = script(&site.bin, "destroy", "yes | head -c 10000000 >&2; exit 1");
        commands.status = script(&site.bin, "status", "yes | head -c 10000000");
        commands.create = script(
            &site.bin,
            "create",
            "yes | head -c 10000000; head -c 5000 /dev/zero | tr '\\0' x >&2; exit 1",
        );
        let p = site.provisioner(commands);
        let error = p.destroy("vm-6").unwrap_err().to_string();
        assert!(error.len() < MESSAGE_LIMIT + 100, "{} bytes", error.len());
        assert!(error.ends_with("y | y | y"), "{error}");
        let error = p.status("vm-6").unwrap_err().to_string();
        assert!(
            error.ends_with("it printed 'y', not running, stopped or gone"),
            "{error}"
        );
        // One line longer than the bound: its end.
        let error = p.create(&spec("vm-6")).unwrap_err().to_string();
        assert!(error.ends_with(&"x".repeat(MESSAGE_LIMIT)), "{error}");
        assert!(error.len() < MESSAGE_LIMIT + 100, "{} bytes", error.len());

        let mut capture = Capture {
            bytes: Vec::new(),
            keep_end: true,
        };
        for i in 0..1000u32 {
            capture.push(&[i as u8; 1000]);
            assert!(capture.bytes.len() <= 2 * OUTPUT_LIMIT + 1000);
        }
        let bytes = capture.into_bytes();
        assert_eq!(bytes.len(), OUTPUT_LIMIT);
        assert_eq!(*bytes.last().unwrap(), 999u32 as u8);
    }

    #[test]
    fn commands_are_checked_at_construction() {
        let site = Site::new();
        let mut relative = site.commands("running");
        relative.status = ExecCommand::new(["bin/status.sh"], Duration::from_secs(1));
        let mut empty = site.commands("running");
        empty.adopt = Some(ExecCommand::new(
            Vec::<String>::new(),
            Duration::from_secs(1),
        ));
        let mut nul = site.commands("running");
        nul.create.argv.push("a\0b".into());
        let mut no_time = site.commands("running");
        no_time.migrate.timeout = Duration::ZERO;
        for (commands, operation, why) in [
            (relative, "status", "absolute"),
            (empty, "adopt", "empty"),
            (nul, "create", "NUL"),
            (no_time, "migrate", "timeout"),
        ] {
            match ExecProvisioner::new(&site.run, commands) {
                Err(ProvisionError::ExecConfig {
                    operation: op,
                    why: w,
                }) => {
                    assert_eq!(op, operation);
                    assert!(w.contains(why), "{w}");
                }
                other => panic!("{operation}: {:?}", other.err()),
            }
        }
        assert!(matches!(
            ExecProvisioner::new("relative/run", site.commands("running")),
            Err(ProvisionError::RunDir { .. })
        ));
    }

    #[test]
    fn commands_in_guests_are_not_supported() {
        let site = Site::new();
        let p = site.provisioner(site.commands("running"));
        let command = GuestCommand {
            script: "true".into(),
            ..GuestCommand::default()
        };
        let error = p
            .run_in_guest("vm-1", &command, Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(error, ProvisionError::NotSupported { .. }));
        assert_eq!(
            error.to_string(),
            "running a command in a guest is not supported by the exec provisioner"
        );
        assert!(matches!(
            p.run_in_guest("../x", &command, Duration::from_secs(1)),
            Err(ProvisionError::InvalidId { .. })
        ));
    }

    #[test]
    fn a_bad_vm_id_runs_nothing() {
        let site = Site::new();
        let p = site.provisioner(site.commands("running"));
        for id in ["../etc", "a b", "", ".hidden", "$(touch x)"] {
            let invalid = |r: Result<()>| {
                assert!(
                    matches!(r, Err(ProvisionError::InvalidId { .. })),
                    "{id:?}: {r:?}"
                )
            };
            invalid(p.create(&spec(id)).map(|_| ()));
            invalid(p.power(id, Power::On));
            invalid(p.power(id, Power::Off));
            invalid(p.destroy(id));
            invalid(p.migrate(id, &MigrationTarget::SameHost).map(|_| ()));
            invalid(p.status(id).map(|_| ()));
            invalid(p.adopt(id).map(|_| ()));
        }
        let ran: Vec<_> = std::fs::read_dir(&site.run).unwrap().collect();
        assert!(ran.is_empty(), "{ran:?}");
    }
}
