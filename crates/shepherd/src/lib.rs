//! The shepherd of one job: a process of the service's own user (root), started by the
//! local resource manager, that starts the job's process as the job's user, waits for it
//! and writes its exit status into the job's spool directory. The status file stays in
//! the shepherd's hands: no process of the job's user ever holds it, so the status a
//! restarted service reads is the one the kernel reported, and the user can neither
//! write to the file nor grow it.
//!
//! The shepherd runs the `drover` binary again (`drover job-shepherd`), with an empty
//! environment: what it needs comes on descriptors the service opened.
//! - fd 3: the status file: `pid <n>` as it starts (the service stops what that names if
//!   it restarts without having recorded the start), the exit status at the end;
//! - fd 4: the [`ProcessSpec`]: who to run as and what to execute, with the job's environment
//!   (kept out of the shepherd's own: it runs as root, and an environment of the user's,
//!   `LD_PRELOAD` for one, must not reach a root process);
//! - for a job in a guest only, fds 5 and 6: a connection to the guest's agent and the
//!   `drover` program (read-only), which the job's process keeps: it is
//!   `/proc/self/fd/6 guest-run`, running the command in the guest over fd 5.
//!
//! The job's process, cloned by the shepherd, switches to the job's user and only then
//! makes the job's [`Setup`] (enters its working directory, opens its input and outputs)
//! and becomes the command: a job can only enter, read and write where its user may. Why
//! it could not start goes to the shepherd on the report pipe, and from there to the
//! status file's second line.
//!
//! Jobs on this machine are run by shepherds of the [`fork_server`]'s pool, each running
//! one job after another: the status file and spec come on a socket instead, and the
//! job's process leads its own session and process group (see `Handshake`); signals
//! reach it directly. What follows is the shepherd of a job in a guest, a process of its
//! own.
//!
//! It leads the job's session and process group. The signals the service sends to the
//! group (SIGTERM, SIGSTOP, SIGCONT, SIGKILL) reach the job directly, so the shepherd
//! ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT to outlive the job and record how it
//! ended (the service sets that before the shepherd runs, so no early signal is lost);
//! SIGUSR1 and SIGUSR2 sent to it (a checkpoint command names `DROVER_JOB_PID`) are passed
//! on to the job (blocked until the job exists). SIGKILL ends both. The job starts with
//! every signal at its default and none blocked, whatever the service had.

pub mod children;
pub mod files_limit;
pub mod fork_server;

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicI32, Ordering};

/// A digest of this source: the service and the `drover-shepherd` program it runs must
/// agree on it (`drover-shepherd --source` prints it).
pub const SOURCE: &str = env!("DROVER_SHEPHERD_SOURCE");
/// The argument that makes the `drover-shepherd` program print [`SOURCE`].
pub const SOURCE_ARGUMENT: &str = "--source";

/// The status file's descriptor in the shepherd.
pub const STATUS_FD: i32 = 3;
/// The spec's descriptor in the shepherd.
pub const SPEC_FD: i32 = 4;
/// In the job's process until it has made its redirections ([`Setup`]): a pipe to the
/// shepherd, which reads there why the job could not start and writes it on the status
/// file's second line.
pub const REPORT_FD: i32 = 3;
/// The most of that report kept.
pub const REPORT_LIMIT: usize = 1024;
/// A job in a guest: the connection to the guest's agent, in the job's process too.
pub const GUEST_AGENT_FD: i32 = 5;
/// A job in a guest: the `drover` program, which the job's process runs as
/// `/proc/self/fd/6 guest-run` (so its user needs no path to it).
pub const GUEST_PROGRAM_FD: i32 = 6;
/// The subcommand of the `drover` binary that runs a job's command in a guest.
pub const GUEST_RUN: &str = "guest-run";
/// The subcommand of the `drover` binary that runs [`run`].
pub const SUBCOMMAND: &str = "job-shepherd";

/// What the shepherd starts: a program, its arguments (`argv[0]` first) and environment,
/// the ids to switch to first (none: stay who the shepherd is), and the setup the job's
/// process makes after the switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSpec {
    pub switch_to: Option<Ids>,
    /// The job runs in a guest: fds 5 and 6 are passed on to it.
    pub guest: bool,
    pub setup: Setup,
    /// The command: run directly when its user may execute it, by `/bin/sh` otherwise
    /// (or when it has no `#!` line).
    pub argv: Vec<String>,
    pub environment: Vec<(String, String)>,
}

/// What the job's process makes, as the job's user, before it becomes the command: what a
/// batch system's job wrapper does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Setup {
    /// The working directory (empty: stay in `/`).
    pub directory: String,
    /// The file on standard input (`None`: `/dev/null`).
    pub stdin: Option<String>,
    pub stdout: Output,
    pub stderr: Output,
}

/// An output file, appended to (made if missing). When `path` names a directory, the
/// file is `default_name` in it. Output and error naming the same file (and no
/// directory) share one opening, as `>>file 2>&1` does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    pub path: String,
    pub default_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl ProcessSpec {
    /// NUL-separated fields: `guest` or `host`, `switch` (`-` or `uid gid g1,g2,...`), the
    /// setup (directory, input (empty: none), output path and default name, error path
    /// and default name), the number of arguments, the arguments, the number of
    /// variables, `NAME=value` each. Paths, arguments and values cannot hold NUL (a
    /// submission's are checked for it).
    pub fn encode(&self) -> Vec<u8> {
        let mut fields: Vec<String> = Vec::new();
        fields.push(if self.guest { "guest" } else { "host" }.into());
        fields.push(match &self.switch_to {
            None => "-".into(),
            Some(ids) => {
                let groups: Vec<String> = ids.groups.iter().map(u32::to_string).collect();
                format!("{} {} {}", ids.uid, ids.gid, groups.join(","))
            }
        });
        let setup = &self.setup;
        fields.push(setup.directory.clone());
        fields.push(setup.stdin.clone().unwrap_or_default());
        for output in [&setup.stdout, &setup.stderr] {
            fields.push(output.path.clone());
            fields.push(output.default_name.clone());
        }
        fields.push(self.argv.len().to_string());
        fields.extend(self.argv.iter().cloned());
        fields.push(self.environment.len().to_string());
        fields.extend(self.environment.iter().map(|(k, v)| format!("{k}={v}")));
        let mut bytes = Vec::new();
        for field in fields {
            bytes.extend_from_slice(field.as_bytes());
            bytes.push(0);
        }
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Option<ProcessSpec> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut fields = text.split('\0');
        let guest = match fields.next()? {
            "guest" => true,
            "host" => false,
            _ => return None,
        };
        let switch = fields.next()?;
        let switch_to = if switch == "-" {
            None
        } else {
            let mut parts = switch.split(' ');
            let uid = parts.next()?.parse().ok()?;
            let gid = parts.next()?.parse().ok()?;
            let groups = match parts.next()? {
                "" => Vec::new(),
                list => list
                    .split(',')
                    .map(|g| g.parse().ok())
                    .collect::<Option<Vec<u32>>>()?,
            };
            Some(Ids { uid, gid, groups })
        };
        let directory = fields.next()?.to_string();
        let stdin = Some(fields.next()?.to_string()).filter(|s| !s.is_empty());
        let mut output = || {
            Some(Output {
                path: fields.next()?.to_string(),
                default_name: fields.next()?.to_string(),
            })
        };
        let (stdout, stderr) = (output()?, output()?);
        let setup = Setup {
            directory,
            stdin,
            stdout,
            stderr,
        };
        let argc: usize = fields.next()?.parse().ok()?;
        let argv: Vec<String> = (0..argc)
            .map(|_| fields.next().map(String::from))
            .collect::<Option<_>>()?;
        let envc: usize = fields.next()?.parse().ok()?;
        let environment = (0..envc)
            .map(|_| {
                let (k, v) = fields.next()?.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect::<Option<_>>()?;
        (!argv.is_empty()).then_some(ProcessSpec {
            switch_to,
            guest,
            setup,
            argv,
            environment,
        })
    }
}

/// The job's pid, for the signal handler that passes signals on.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn pass_on(signal: libc::c_int) {
    let child = CHILD.load(Ordering::Relaxed);
    if child > 0 {
        unsafe { libc::kill(child, signal) };
    }
}

/// Ignored by the shepherd (set by the service before it runs: see [`prepare`]).
pub const IGNORED: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];
/// Passed on to the job (blocked by the service before the shepherd runs).
pub const PASSED_ON: [libc::c_int; 2] = [libc::SIGUSR1, libc::SIGUSR2];

/// Run by the service in the shepherd's process before it execs the shepherd: a session
/// of its own (no terminal of the service's reaches the job), the signals it ignores
/// ignored and those it passes on blocked, so that none arriving before the shepherd is
/// ready is lost or kills it. Async-signal-safe.
pub fn prepare() -> std::io::Result<()> {
    if unsafe { libc::setsid() } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    settle_signals();
    Ok(())
}

/// Closes every descriptor from `first` on (the service's, inherited without
/// close-on-exec, have no business in a job). Best effort: old kernels lack the call.
fn close_from(first: u32) {
    unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) };
}

/// The signals the shepherd ignores ignored, and those it passes on blocked: done by the
/// shepherd itself when the service spawned it without running [`prepare`] (a signal
/// sent before this runs ends the shepherd before it has started the job).
/// Async-signal-safe.
fn settle_signals() {
    unsafe {
        for signal in IGNORED {
            libc::signal(signal, libc::SIG_IGN);
        }
        let mut blocked: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut blocked);
        for signal in PASSED_ON {
            libc::sigaddset(&mut blocked, signal);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut());
    }
}

/// Every signal whose disposition can be changed.
fn every_signal() -> impl Iterator<Item = libc::c_int> {
    (1..=libc::SIGRTMAX()).filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
}

/// Sets `signals` to their default action. By the system call itself: newer glibc's
/// wrapper takes a lock for SIGABRT. A zeroed kernel `sigaction` is SIG_DFL with no
/// flags, mask or restorer. Async-signal-safe.
fn default_signals(signals: impl Iterator<Item = libc::c_int>) {
    let default = [0u64; 4];
    for signal in signals {
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal as libc::c_long,
                default.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8 as libc::c_long,
            )
        };
    }
}

/// The `main` of `<program> job-shepherd [fork-server]`: one job's shepherd, or the
/// [`fork_server`] that forks them.
pub fn main() -> i32 {
    if std::env::args().nth(2).as_deref() == Some(fork_server::ARGUMENT) {
        return fork_server::serve();
    }
    run()
}

/// The shepherd's `main`: its exit code is the job's (128 + the signal that ended it).
pub fn run() -> i32 {
    settle_signals();
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    {
        // SAFETY: fd 3 is the status file the service opened for this process; it stays
        // open (written again at the end).
        let mut status =
            std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(STATUS_FD) });
        let _ = writeln!(status, "pid {}", std::process::id());
    }
    close_from(GUEST_PROGRAM_FD as u32 + 1);
    let mut spec_bytes = Vec::new();
    // SAFETY: the service opened fd 4 for this process alone; it is read once and closed.
    let mut spec_file = unsafe { std::fs::File::from_raw_fd(SPEC_FD) };
    if spec_file.read_to_end(&mut spec_bytes).is_err() {
        return 125;
    }
    drop(spec_file);
    let Some(spec) = ProcessSpec::decode(&spec_bytes) else {
        return 125;
    };
    if !spec.guest {
        close_from(SPEC_FD as u32 + 1);
    }
    let Some(command) = Command::of(&spec) else {
        return 125;
    };
    unsafe {
        for signal in PASSED_ON {
            libc::signal(signal, pass_on as *const () as libc::sighandler_t);
        }
    }
    // The report pipe: its read end stays here (non-blocking: read once the job ended).
    let mut report = [0; 2];
    // SAFETY: `report` has room for the two descriptors.
    if unsafe { libc::pipe2(report.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return 125;
    }
    let [report_read, report_write] = report;
    let Some(job) = JobProcess::of(&spec, &command, report_write, None) else {
        return 125;
    };
    let child = spawn_the_job(&job, shares_memory(&spec));
    if child < 0 {
        return 125;
    }
    CHILD.store(child, Ordering::Relaxed);
    unsafe {
        let mut passed_on: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut passed_on);
        for signal in PASSED_ON {
            libc::sigaddset(&mut passed_on, signal);
        }
        libc::sigprocmask(libc::SIG_UNBLOCK, &passed_on, std::ptr::null_mut());
    }
    // SAFETY: the write end is this process's own; the child has its copy.
    unsafe { libc::close(report_write) };
    let code = wait_for(child);
    let reason = read_report(report_read);
    write_end(STATUS_FD, code, &reason);
    code
}

/// Why the job could not start, as its process wrote it on the report pipe (read once
/// the process ended; the read end, non-blocking, is closed here).
fn read_report(report_read: i32) -> String {
    // SAFETY: the read end is the caller's own, read once here.
    let mut report_file = unsafe { std::fs::File::from_raw_fd(report_read) };
    let mut reason = Vec::new();
    let _ = (&mut report_file)
        .take(REPORT_LIMIT as u64)
        .read_to_end(&mut reason);
    let reason = String::from_utf8_lossy(&reason);
    reason.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Writes the job's end in its status file `status` (which stays open): its exit code,
/// then why it could not start, if it said.
fn write_end(status: i32, code: i32, reason: &str) {
    // SAFETY: the status file is the caller's, and stays open (not dropped here).
    let mut file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(status) });
    // Made whole first: one write, where a formatted write makes one per piece.
    let end = match reason.is_empty() {
        true => format!("{code}\n"),
        false => format!("{code}\n{reason}\n"),
    };
    let _ = file.write_all(end.as_bytes());
}

/// The text of a file of /proc that holds one line at most (a process's `stat`, its
/// `children`, a setting), read with as few system calls as the kernel allows: a line
/// read short of the buffer is the whole file (not so in a file of many lines, which the
/// kernel may hand out line by line). The standard library's read of a whole file asks
/// the file's size first and reads in growing pieces: nine calls for a process's `stat`
/// where three do. `None` if it cannot be read or is not UTF-8.
pub(crate) fn read_proc_line(path: &str) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut text = Vec::with_capacity(1024);
    let mut piece = [0u8; 1024];
    loop {
        match file.read(&mut piece) {
            Ok(0) => break,
            Ok(n) => {
                text.extend_from_slice(&piece[..n]);
                if n < piece.len() && text.ends_with(b"\n") {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    String::from_utf8(text).ok()
}

/// The exit code of a process that ended with `wait_status`: its exit status, or 128 +
/// the signal that ended it.
pub fn code_of(wait_status: i32) -> Option<i32> {
    if libc::WIFEXITED(wait_status) {
        Some(libc::WEXITSTATUS(wait_status))
    } else if libc::WIFSIGNALED(wait_status) {
        Some(128 + libc::WTERMSIG(wait_status))
    } else {
        None
    }
}

/// What the job's process needs, all made before it is cloned. From the clone to its exec
/// it allocates nothing, takes no lock and writes no memory but its own stack: it may
/// be ended at any instruction (by the service's cancel, and by its user once it is
/// theirs), and its memory is the shepherd's (see [`spawn_the_job`]).
struct JobProcess<'a> {
    spec: &'a ProcessSpec,
    report_write: i32,
    /// The working directory to enter (`None`: stay in `/`).
    directory: Option<CString>,
    stdin: CString,
    stdout: OutputPaths,
    stderr: OutputPaths,
    /// Output and error name the same path: one opening, as `>>file 2>&1` (unless the
    /// path is a directory, where each has its own file).
    joined: bool,
    /// `execve`'s arguments, and the same after `/bin/sh`; each ends with a null.
    argv: Vec<*const libc::c_char>,
    shell_argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// Who the job runs as, for a message (`USER` in its environment).
    user: &'a [u8],
    /// Started by a pooled shepherd (see [`fork_server`]): what the process does first.
    handshake: Option<Handshake>,
}

/// What the job's process of a pooled shepherd does before anything of the job: it leads
/// a session of its own (the shepherd, which runs one job after another, leads none),
/// writes `pid <n>` in the status file, says `S` and its pid on the shepherd's link to
/// the fork server, and goes on only when the server answers `g` (once the service has
/// its pid). Both descriptors close before the job's user is switched to.
#[derive(Debug, Clone, Copy)]
struct Handshake {
    link: i32,
    status: i32,
    /// Closed by the process by name once the handshake is done (the shepherd's status
    /// file, the report pipe's read end, the ends socket): not left to `close_range`,
    /// which older kernels lack.
    close: [i32; 3],
}

/// An output's path, and its file under the default name should the path be a directory.
struct OutputPaths {
    path: CString,
    in_directory: CString,
}

/// The shell that runs a command file its user may read but not execute.
const SHELL: &std::ffi::CStr = c"/bin/sh";

impl<'a> JobProcess<'a> {
    /// `None` when the spec has no command.
    fn of(
        spec: &'a ProcessSpec,
        command: &'a Command,
        report_write: i32,
        handshake: Option<Handshake>,
    ) -> Option<Self> {
        if command.argv.is_empty() {
            return None;
        }
        let c_string = |text: &str| CString::new(text).ok();
        let output = |output: &Output| {
            Some(OutputPaths {
                path: c_string(&output.path)?,
                in_directory: c_string(&format!("{}/{}", output.path, output.default_name))?,
            })
        };
        let pointers = |strings: &'a [CString]| -> Vec<*const libc::c_char> {
            strings
                .iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        let argv = pointers(&command.argv);
        let shell_argv = std::iter::once(SHELL.as_ptr())
            .chain(argv.iter().copied())
            .collect();
        let setup = &spec.setup;
        Some(JobProcess {
            spec,
            report_write,
            directory: match setup.directory.is_empty() {
                true => None,
                false => Some(c_string(&setup.directory)?),
            },
            stdin: c_string(setup.stdin.as_deref().unwrap_or("/dev/null"))?,
            stdout: output(&setup.stdout)?,
            stderr: output(&setup.stderr)?,
            joined: setup.stdout.path == setup.stderr.path,
            argv,
            shell_argv,
            envp: pointers(&command.envp),
            user: command
                .envp
                .iter()
                .find_map(|e| e.as_bytes().strip_prefix(b"USER="))
                .unwrap_or(b"of the job"),
            handshake,
        })
    }
}

/// The job's process's stack: ample for [`become_the_job`] (a few KiB), with a guard
/// page below it.
const JOB_STACK: usize = 256 * 1024;

/// Starts the job's process and returns its pid (negative on failure). It is cloned
/// with this process's memory (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does), on a
/// stack of its own, and this process waits until it has exec'd or exited. So no copy of
/// the shepherd's address space is made, only to be thrown away by the exec: a fork
/// was about a tenth of the CPU of a short job.
///
/// Between its switch to the job's user and its exec, that process shares the memory of
/// the shepherd, which runs as root. It only reads it (see [`JobProcess`]), and the
/// kernel makes the memory non-dumpable at the switch when `fs.suid_dumpable` is 0 (the
/// default), so the user can neither trace the process nor read or write its memory.
/// Where the site has set it otherwise, the memory is copied, as by a fork
/// ([`may_share_memory`]).
fn spawn_the_job(job: &JobProcess, share_memory: bool) -> i32 {
    let Some(top) = job_stack_top() else {
        return -1;
    };
    let shared = match share_memory {
        true => libc::CLONE_VM,
        false => 0,
    };
    // SAFETY: `top` is the top of a stack this thread alone uses, and only here: the
    // child runs on it until it has exec'd or exited, and `clone` returns only then
    // (CLONE_VFORK), so the next job's process finds it free.
    unsafe {
        libc::clone(
            job_process,
            top,
            shared | libc::CLONE_VFORK | libc::SIGCHLD,
            job as *const JobProcess as *mut libc::c_void,
        )
    }
}

thread_local! {
    /// The top of this thread's stack for its jobs' processes, mapped at its first job
    /// and kept: a mapping made and removed per job cost three system calls and the
    /// faults of fresh pages each time.
    static JOB_STACK_TOP: std::cell::Cell<*mut libc::c_void> =
        const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// The top of this thread's stack for its jobs' processes (see [`JOB_STACK_TOP`]):
/// [`JOB_STACK`] bytes above a guard page. `None` if it could not be mapped.
fn job_stack_top() -> Option<*mut libc::c_void> {
    let kept = JOB_STACK_TOP.get();
    if !kept.is_null() {
        return Some(kept);
    }
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        size if size > 0 => size as usize,
        _ => 4096,
    };
    // SAFETY: a fresh private mapping, never unmapped once its guard page is set.
    unsafe {
        let base = libc::mmap(
            std::ptr::null_mut(),
            JOB_STACK + page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if base == libc::MAP_FAILED {
            return None;
        }
        if libc::mprotect(base, page, libc::PROT_NONE) != 0 {
            libc::munmap(base, JOB_STACK + page);
            return None;
        }
        let top = (base as *mut u8).add(JOB_STACK + page) as *mut libc::c_void;
        JOB_STACK_TOP.set(top);
        Some(top)
    }
}

/// Whether the process of the job of `spec` may share the shepherd's memory (see
/// [`may_share_memory`]).
fn shares_memory(spec: &ProcessSpec) -> bool {
    let suid_dumpable = match spec.switch_to {
        Some(_) => read_proc_line("/proc/sys/fs/suid_dumpable"),
        None => None,
    };
    may_share_memory(spec.switch_to.is_some(), suid_dumpable.as_deref())
}

/// Whether the job's process may share the shepherd's memory until its exec: always when
/// it stays who the shepherd is; after a switch of user only when `fs.suid_dumpable`
/// (its text, `None` if unreadable) is 0, so that the kernel keeps its new user from
/// tracing it.
fn may_share_memory(switches_user: bool, suid_dumpable: Option<&str>) -> bool {
    !switches_user || suid_dumpable.map(str::trim) == Some("0")
}

// The ids are switched by the system calls themselves (glibc's wrappers act on every
// thread they know of in this memory), which take 32-bit ids on 64-bit Linux only.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("the shepherd switches ids with the system calls of 64-bit Linux");

/// The job's process, until it execs (see [`JobProcess`] for what it may not do). It
/// never returns.
extern "C" fn job_process(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `JobProcess` that `spawn_the_job` holds until this process
    // has exec'd or exited.
    let job = unsafe { &*(arg as *const JobProcess) };
    let spec = job.spec;
    if let Some(handshake) = job.handshake {
        if !shake_hands(handshake) {
            unsafe { libc::_exit(125) };
        }
        for fd in handshake.close {
            unsafe { libc::close(fd) };
        }
    }
    unsafe {
        // Every signal at its default and none blocked (Rust's runtime ignores SIGPIPE,
        // and an ignored signal stays ignored across exec). A pooled shepherd set every
        // signal to its default as it began (`fork_server`), and since then only ignores
        // `IGNORED`: those are enough, and save some sixty system calls a job.
        if job.handshake.is_some() {
            default_signals(IGNORED.into_iter());
        } else {
            default_signals(every_signal());
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // The job keeps only the report pipe (as fd 3, in place of the status file, and
        // blocking) and what the spec gives it (a guest's fds 5 and 6).
        if libc::dup2(job.report_write, REPORT_FD) < 0 {
            libc::_exit(125);
        }
        libc::fcntl(REPORT_FD, libc::F_SETFL, 0);
        libc::close(SPEC_FD);
        close_from(if spec.guest {
            GUEST_PROGRAM_FD as u32 + 1
        } else {
            REPORT_FD as u32 + 1
        });
        if let Some(ids) = &spec.switch_to
            && (libc::syscall(
                libc::SYS_setgroups,
                ids.groups.len() as libc::c_long,
                ids.groups.as_ptr(),
            ) != 0
                || libc::syscall(libc::SYS_setgid, ids.gid as libc::c_long) != 0
                || libc::syscall(libc::SYS_setuid, ids.uid as libc::c_long) != 0)
        {
            libc::_exit(126);
        }
    }
    // As the job's user from here on.
    become_the_job(job)
}

/// The job's process's side of a [`Handshake`]: whether it may go on. Async-signal-safe
/// and allocation-free, as all of [`job_process`].
fn shake_hands(handshake: Handshake) -> bool {
    // SAFETY: plain system calls on this process's own descriptors and stack.
    unsafe {
        if libc::setsid() < 0 {
            return false;
        }
        let pid = libc::getpid();
        Message::new()
            .text(b"pid ")
            .number(pid as u64)
            .text(b"\n")
            .write_to(handshake.status);
        let mut said = [b'S', 0, 0, 0, 0];
        said[1..].copy_from_slice(&pid.to_le_bytes());
        let sent = libc::send(
            handshake.link,
            said.as_ptr() as *const libc::c_void,
            said.len(),
            libc::MSG_NOSIGNAL,
        );
        if sent != said.len() as isize {
            return false;
        }
        let mut go = [0u8; 1];
        loop {
            let n = libc::read(handshake.link, go.as_mut_ptr() as *mut libc::c_void, 1);
            if n >= 0 || *libc::__errno_location() != libc::EINTR {
                return n == 1 && go[0] == b'g';
            }
        }
    }
}

/// How `child` ended: its exit status, or 128 + the signal that ended it. Its pid is
/// forgotten before it is reaped, so that no signal is passed on to a process that
/// takes the pid over.
fn wait_for(child: i32) -> i32 {
    loop {
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                child as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 125;
        }
    }
    CHILD.store(0, Ordering::Relaxed);
    loop {
        let mut status: libc::c_int = 0;
        let rc = unsafe { libc::waitpid(child, &mut status, 0) };
        if rc == child {
            if let Some(code) = code_of(status) {
                return code;
            }
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 125;
        }
    }
}

/// The command in the form `execve` takes, made before the clone.
struct Command {
    argv: Vec<CString>,
    envp: Vec<CString>,
}

impl Command {
    fn of(spec: &ProcessSpec) -> Option<Command> {
        let c_strings = |items: &mut dyn Iterator<Item = String>| {
            items.map(CString::new).collect::<Result<Vec<_>, _>>().ok()
        };
        Some(Command {
            argv: c_strings(&mut spec.argv.iter().cloned())?,
            envp: c_strings(&mut spec.environment.iter().map(|(k, v)| format!("{k}={v}")))?,
        })
    }
}

/// In the job's process, as the job's user: makes the setup and becomes the command,
/// with system calls on what [`JobProcess`] prepared. Until the outputs are in place,
/// why the job cannot start is written on the report pipe (fd 3), and the process ends
/// with 126.
fn become_the_job(job: &JobProcess) -> ! {
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let cannot = |message: &Message| -> ! {
        message.write_to(REPORT_FD);
        unsafe { libc::_exit(126) }
    };
    if let Some(directory) = &job.directory
        && unsafe { libc::chdir(directory.as_ptr()) } != 0
    {
        cannot(
            Message::new()
                .text(b"cannot enter the working directory ")
                .text(directory.as_bytes())
                .text(b": ")
                .reason(errno()),
        );
    }
    // SAFETY: `argv` has the command first and ends with a null (`JobProcess::of`).
    let program = unsafe { std::ffi::CStr::from_ptr(job.argv[0]) };
    let may = |mode| unsafe { libc::access(program.as_ptr(), mode) } == 0;
    let executable = may(libc::X_OK);
    if !executable && !may(libc::R_OK) {
        cannot(
            Message::new()
                .text(b"the command file ")
                .text(program.to_bytes())
                .text(b" cannot be read by the user ")
                .text(job.user),
        );
    }
    let stdin = unsafe { libc::open(job.stdin.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if stdin < 0 {
        cannot(
            Message::new()
                .text(b"cannot open ")
                .text(job.stdin.as_bytes())
                .text(b" for input: ")
                .reason(errno()),
        );
    }
    let append = |path: &CString| unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NOCTTY | libc::O_CLOEXEC,
            0o666,
        )
    };
    let cannot_open = |path: &CString, errno: i32| -> ! {
        cannot(
            Message::new()
                .text(b"cannot open ")
                .text(path.as_bytes())
                .text(b" for output: ")
                .reason(errno),
        )
    };
    // An output path naming a directory gets the file under its default name there
    // (the open says so, EISDIR: no look before it).
    let open_output = |output: &OutputPaths| -> (i32, bool) {
        let fd = append(&output.path);
        if fd >= 0 {
            return (fd, false);
        }
        match errno() {
            libc::EISDIR => {
                let fd = append(&output.in_directory);
                match (fd, errno()) {
                    (fd, _) if fd >= 0 => (fd, true),
                    // A path ending in `/` that names nothing (which the open also
                    // answers EISDIR): said of the path given, as before.
                    (_, libc::ENOENT) if output.path.as_bytes().ends_with(b"/") => {
                        cannot_open(&output.path, libc::EISDIR)
                    }
                    (_, e) => cannot_open(&output.in_directory, e),
                }
            }
            e => cannot_open(&output.path, e),
        }
    };
    let (out, out_in_directory) = open_output(&job.stdout);
    let err = match job.joined && !out_in_directory {
        true => out,
        false => open_output(&job.stderr).0,
    };
    // SAFETY: descriptors this process owns; the originals close on exec.
    unsafe {
        if libc::dup2(stdin, 0) < 0 || libc::dup2(out, 1) < 0 || libc::dup2(err, 2) < 0 {
            cannot(Message::new().text(b"cannot redirect: ").reason(errno()));
        }
        libc::close(REPORT_FD);
    }
    // From here on, what goes wrong goes to the job's error file, as a shell's would.
    let failed = |program: &std::ffi::CStr| -> ! {
        let e = errno();
        Message::new()
            .text(b"drover: cannot run ")
            .text(program.to_bytes())
            .text(b": ")
            .reason(e)
            .text(b"\n")
            .write_to(2);
        unsafe { libc::_exit(if e == libc::ENOENT { 127 } else { 126 }) }
    };
    if executable {
        // SAFETY: both arrays end with a null, and their strings outlive the call.
        unsafe { libc::execve(program.as_ptr(), job.argv.as_ptr(), job.envp.as_ptr()) };
        // A script without a `#!` line is run by the shell, as a shell would.
        if errno() != libc::ENOEXEC {
            failed(program);
        }
    }
    unsafe { libc::execve(SHELL.as_ptr(), job.shell_argv.as_ptr(), job.envp.as_ptr()) };
    failed(SHELL)
}

/// A message made on the stack (the job's process may not allocate), in pieces; what
/// goes past its size is cut (the shepherd keeps [`REPORT_LIMIT`] bytes anyway).
struct Message {
    bytes: [u8; REPORT_LIMIT],
    len: usize,
}

impl Message {
    fn new() -> Message {
        Message {
            bytes: [0; REPORT_LIMIT],
            len: 0,
        }
    }

    fn text(&mut self, piece: &[u8]) -> &mut Message {
        let room = self.bytes.len() - self.len;
        let taken = piece.len().min(room);
        self.bytes[self.len..self.len + taken].copy_from_slice(&piece[..taken]);
        self.len += taken;
        self
    }

    /// The C library's text for `errno` (as Rust's `io::Error` shows it, without the
    /// number), or `error <n>` for one not listed.
    fn reason(&mut self, errno: i32) -> &mut Message {
        match errno_text(errno) {
            Some(text) => self.text(text.as_bytes()),
            None => self.text(b"error ").number(errno.unsigned_abs() as u64),
        }
    }

    /// `number` in decimal.
    fn number(&mut self, number: u64) -> &mut Message {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = number;
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        self.text(&digits[at..])
    }

    /// Writes the message whole (a pipe or the job's error file); errors are ignored,
    /// there being no one left to tell.
    fn write_to(&self, fd: i32) {
        let mut done = 0;
        while done < self.len {
            let rest = &self.bytes[done..self.len];
            let n = unsafe { libc::write(fd, rest.as_ptr() as *const libc::c_void, rest.len()) };
            if n <= 0 {
                return;
            }
            done += n as usize;
        }
    }
}

/// glibc's texts for the errors that opening, entering and executing files give.
fn errno_text(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "Operation not permitted",
        libc::ENOENT => "No such file or directory",
        libc::EINTR => "Interrupted system call",
        libc::EIO => "Input/output error",
        libc::ENXIO => "No such device or address",
        libc::E2BIG => "Argument list too long",
        libc::ENOEXEC => "Exec format error",
        libc::EAGAIN => "Resource temporarily unavailable",
        libc::ENOMEM => "Cannot allocate memory",
        libc::EACCES => "Permission denied",
        libc::EFAULT => "Bad address",
        libc::EBUSY => "Device or resource busy",
        libc::EEXIST => "File exists",
        libc::ENODEV => "No such device",
        libc::ENOTDIR => "Not a directory",
        libc::EISDIR => "Is a directory",
        libc::EINVAL => "Invalid argument",
        libc::ENFILE => "Too many open files in system",
        libc::EMFILE => "Too many open files",
        libc::ETXTBSY => "Text file busy",
        libc::EFBIG => "File too large",
        libc::ENOSPC => "No space left on device",
        libc::EROFS => "Read-only file system",
        libc::ENAMETOOLONG => "File name too long",
        libc::ELOOP => "Too many levels of symbolic links",
        libc::EOVERFLOW => "Value too large for defined data type",
        libc::ESTALE => "Stale file handle",
        libc::EDQUOT => "Disk quota exceeded",
        libc::EBADF => "Bad file descriptor",
        libc::ENOTCONN => "Transport endpoint is not connected",
        libc::ETIMEDOUT => "Connection timed out",
        libc::EOPNOTSUPP => "Operation not supported",
        libc::ELIBBAD => "Accessing a corrupted shared library",
        libc::EUCLEAN => "Structure needs cleaning",
        libc::EKEYEXPIRED => "Key has expired",
        libc::ENOKEY => "Required key not available",
        libc::EHOSTDOWN => "Host is down",
        libc::ECONNREFUSED => "Connection refused",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proc_line_reads_whole_as_the_standard_library_reads_it() {
        for path in [
            "/proc/self/stat",
            "/proc/sys/fs/suid_dumpable",
            "/proc/self/comm",
        ] {
            let line = read_proc_line(path).expect("readable");
            assert!(line.ends_with('\n'), "{path}: {line:?}");
            // Read whole: as many fields, and those that do not move between two reads
            // (a process's pid and name; its state may) agree.
            let whole = std::fs::read_to_string(path).unwrap();
            fn first(text: &str) -> Vec<&str> {
                text.split_whitespace().take(2).collect()
            }
            assert_eq!(first(&line), first(&whole), "{path}");
            let count = |text: &str| text.split_whitespace().count();
            assert_eq!(count(&line), count(&whole), "{path}");
        }
        assert_eq!(read_proc_line("/proc/self/no-such-file"), None);
        // A file without a closing newline (the thread's children: "pid pid ") is read to
        // its end.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let thread = unsafe { libc::gettid() };
        let children = read_proc_line(&format!("/proc/self/task/{thread}/children"));
        let _ = child.kill();
        let _ = child.wait();
        let children = children.expect("readable");
        assert!(
            children
                .split_whitespace()
                .any(|pid| pid == child.id().to_string()),
            "{children:?}"
        );
    }

    #[test]
    fn the_job_process_gets_its_paths_and_null_ended_arrays_made_before_the_clone() {
        let spec = ProcessSpec {
            switch_to: None,
            guest: false,
            setup: Setup {
                directory: "/work".into(),
                stdin: None,
                stdout: Output {
                    path: "/logs".into(),
                    default_name: "job.o1".into(),
                },
                stderr: Output {
                    path: "/logs".into(),
                    default_name: "job.e1".into(),
                },
            },
            argv: vec!["/bin/job".into(), "-v".into()],
            environment: vec![("USER".into(), "bob".into()), ("X".into(), "1".into())],
        };
        let command = Command::of(&spec).unwrap();
        let job = JobProcess::of(&spec, &command, 7, None).unwrap();
        let texts = |pointers: &[*const libc::c_char]| -> Vec<String> {
            assert!(pointers.last().unwrap().is_null(), "ends with a null");
            pointers[..pointers.len() - 1]
                .iter()
                .map(|&p| {
                    unsafe { std::ffi::CStr::from_ptr(p) }
                        .to_str()
                        .unwrap()
                        .into()
                })
                .collect()
        };
        assert_eq!(texts(&job.argv), ["/bin/job", "-v"]);
        assert_eq!(texts(&job.shell_argv), ["/bin/sh", "/bin/job", "-v"]);
        assert_eq!(texts(&job.envp), ["USER=bob", "X=1"]);
        assert_eq!(job.user, b"bob");
        assert_eq!(job.directory.as_deref(), Some(c"/work"));
        assert_eq!(job.stdin.as_c_str(), c"/dev/null");
        assert_eq!(job.stdout.in_directory.as_c_str(), c"/logs/job.o1");
        assert_eq!(job.stderr.in_directory.as_c_str(), c"/logs/job.e1");
        assert!(
            job.joined,
            "one path: one opening, unless it is a directory"
        );
        let no_command = ProcessSpec {
            argv: vec![],
            ..spec.clone()
        };
        let no_command_either = Command::of(&no_command).unwrap();
        assert!(JobProcess::of(&no_command, &no_command_either, 7, None).is_none());
    }

    #[test]
    fn a_message_is_made_on_the_stack_and_cut_at_its_size() {
        let mut message = Message::new();
        message
            .text(b"cannot open /x for output: ")
            .reason(libc::EACCES);
        assert_eq!(
            &message.bytes[..message.len],
            b"cannot open /x for output: Permission denied"
        );
        let mut unknown = Message::new();
        unknown.reason(4095);
        assert_eq!(&unknown.bytes[..unknown.len], b"error 4095");
        let mut pid = Message::new();
        pid.text(b"pid ").number(0).text(b" ").number(u64::MAX);
        assert_eq!(&pid.bytes[..pid.len], b"pid 0 18446744073709551615");
        let mut long = Message::new();
        long.text(&[b'a'; 700]).text(&[b'b'; 700]);
        assert_eq!(long.len, REPORT_LIMIT);
        assert_eq!(long.bytes[REPORT_LIMIT - 1], b'b');
    }

    #[test]
    fn errno_texts_are_the_c_librarys() {
        let listed = (1..200).filter_map(|errno| Some((errno, errno_text(errno)?)));
        for (errno, text) in listed {
            let rust = std::io::Error::from_raw_os_error(errno).to_string();
            assert_eq!(rust, format!("{text} (os error {errno})"));
        }
    }

    #[test]
    fn the_job_shares_root_memory_only_where_the_kernel_keeps_its_user_out() {
        assert!(may_share_memory(false, None));
        assert!(may_share_memory(true, Some("0\n")));
        assert!(!may_share_memory(true, Some("1\n")));
        assert!(!may_share_memory(true, Some("2\n")));
        assert!(!may_share_memory(true, None));
    }

    #[test]
    fn a_plan_reads_back_as_written() {
        let spec = ProcessSpec {
            guest: true,
            setup: Setup {
                directory: "/home/a b".into(),
                stdin: Some("/in".into()),
                stdout: Output {
                    path: "/out dir".into(),
                    default_name: "job.o1".into(),
                },
                stderr: Output {
                    path: "".into(),
                    default_name: "job.e1".into(),
                },
            },
            switch_to: Some(Ids {
                uid: 1001,
                gid: 1002,
                groups: vec![1002, 1001],
            }),
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo 'a b'\n".into(),
                "".into(),
            ],
            environment: vec![("A".into(), "x=y".into()), ("EMPTY".into(), String::new())],
        };
        assert_eq!(ProcessSpec::decode(&spec.encode()), Some(spec));
        let plain = ProcessSpec {
            guest: false,
            setup: Setup::default(),
            switch_to: None,
            argv: vec!["/bin/true".into()],
            environment: Vec::new(),
        };
        assert_eq!(ProcessSpec::decode(&plain.encode()), Some(plain));
        assert_eq!(ProcessSpec::decode(b"host\0- 2\0only-one\0"), None);
        assert_eq!(ProcessSpec::decode(b"host\0x y z\0"), None);
        assert_eq!(ProcessSpec::decode(b"- 1\0/bin/true\0\x30\0"), None);
    }
}
