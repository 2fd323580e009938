//! The local resource manager: jobs are real processes on this machine, each in a
//! process group of its own, run as the job's system user.
//!
//! Each job has a [`shepherd`](super::shepherd): a process of the service's user that
//! starts it, waits for it and writes its exit status into the job's status file (the
//! service's, mode 0700), for a service that restarts meanwhile; the job's process
//! writes its pid there first. A job on this machine leads its own session and process
//! group, and its shepherd is one of a pool the fork server keeps, each running one job
//! after another; a job in a guest has a shepherd of its own, which leads the group.
//! Nothing the service reads there is in a place, or a descriptor, of the job's user.
//! The job's process enters the working directory and opens the output files *after*
//! the switch to the job's user (`shepherd::Setup`: a job can only write where its user
//! may), then becomes the command; no shell stands between, unless the command file is
//! a script its user may only read.

use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod fork_server;

use super::shepherd::fork_server::StartedJob;
use super::shepherd::{self, Ids, Output, ProcessSpec, Setup};
use super::{Exit, JobSignal, Launch, ResourceManager, RmEvent, RmNotify, StartDone};
use crate::job::ProcessRecord;
use crate::sysuser;

/// Starts `program job-shepherd [argument]` with each descriptor of `fds` moved to its
/// number (the shepherd's: the status file as fd 3 and the spec as fd 4; the fork
/// server's: its socket as fd 3), in a session of its own, in `/`, with an empty
/// environment and `/dev/null` on 0, 1 and 2. `posix_spawn` (glibc: `clone` with the
/// parent's memory shared until the exec), not fork: a fork copies the page tables of
/// the whole service, which grow with its jobs, and would make every start slower the
/// more jobs are queued. The shepherd ignores and blocks its signals itself
/// (`shepherd::run`).
fn spawn_shepherd(
    program: &Path,
    arguments: &[String],
    fds: &[(i32, i32)],
) -> std::io::Result<i32> {
    use std::ffi::CString;
    let program = CString::new(program.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::other("the shepherd's path holds a NUL"))?;
    let subcommand = CString::new(shepherd::SUBCOMMAND).expect("no NUL");
    let arguments: Vec<CString> = arguments
        .iter()
        .map(|a| CString::new(a.as_str()).expect("no NUL"))
        .collect();
    let mut argv = vec![program.as_ptr(), subcommand.as_ptr()];
    argv.extend(arguments.iter().map(|a| a.as_ptr()));
    argv.push(std::ptr::null());
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    let null = c"/dev/null";
    let root = c"/";
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(rc))
        }
    };
    // Copies above 10 (close-on-exec here) first, so that moving them to 3 and 4 cannot
    // overwrite one with the other whatever their numbers.
    let high = |fd: i32| {
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        if copy < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(copy) })
        }
    };
    let moves = fds
        .iter()
        .map(|&(from, to)| Ok((high(from)?, to)))
        .collect::<std::io::Result<Vec<_>>>()?;
    // SAFETY: the attribute and action objects are initialised before use and destroyed
    // on every path; every pointer handed over outlives the call.
    unsafe {
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        let mut attributes: libc::posix_spawnattr_t = std::mem::zeroed();
        check(libc::posix_spawn_file_actions_init(&mut actions))?;
        if let Err(e) = check(libc::posix_spawnattr_init(&mut attributes)) {
            libc::posix_spawn_file_actions_destroy(&mut actions);
            return Err(e);
        }
        let outcome = (|| {
            for (fd, flags) in [
                (0, libc::O_RDONLY),
                (1, libc::O_WRONLY),
                (2, libc::O_WRONLY),
            ] {
                check(libc::posix_spawn_file_actions_addopen(
                    &mut actions,
                    fd,
                    null.as_ptr(),
                    flags,
                    0,
                ))?;
            }
            for (from, to) in &moves {
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions,
                    from.as_raw_fd(),
                    *to,
                ))?;
            }
            check(libc::posix_spawn_file_actions_addchdir_np(
                &mut actions,
                root.as_ptr(),
            ))?;
            // Every signal at its default (the service ignores SIGPIPE), none blocked.
            let mut defaults: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut defaults);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            check(libc::posix_spawnattr_setsigdefault(
                &mut attributes,
                &defaults,
            ))?;
            check(libc::posix_spawnattr_setsigmask(&mut attributes, &none))?;
            check(libc::posix_spawnattr_setflags(
                &mut attributes,
                (libc::POSIX_SPAWN_SETSID
                    | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short
                    | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short) as _,
            ))?;
            let mut pid: libc::pid_t = 0;
            check(libc::posix_spawn(
                &mut pid,
                program.as_ptr(),
                &actions,
                &attributes,
                argv.as_ptr() as *const *mut libc::c_char,
                envp.as_ptr() as *const *mut libc::c_char,
            ))?;
            Ok(pid)
        })();
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attributes);
        outcome
    }
}

/// The file of a job's spool directory (the layout of earlier versions) that received its
/// exit status; a job's spool is now one status file, `<spool>/<job>.status`.
const EXIT_STATUS: &str = "exit_status";

pub struct LocalResourceManager {
    spool: PathBuf,
    events: RmNotify,
    /// The program that runs [`shepherd::run`] (`drover-shepherd`, or `drover
    /// job-shepherd`).
    shepherd: PathBuf,
    /// The `drover` program, which a job in a guest runs (`guest-run`).
    guest_program: PathBuf,
    /// Forks the shepherds of jobs on this machine (those of jobs in guests are started
    /// one by one: they get two more descriptors).
    fork_server: fork_server::ForkServer,
    /// Status files of ended jobs to remove (by the sweeper thread: file system work kept
    /// off the journal's thread, which tells of durable ends): job id and its process.
    sweep: std::sync::mpsc::Sender<(String, ProcessRecord)>,
    /// Held while a job's status file is made, and while one is checked and removed: a
    /// job started again (requeued) never loses its new file to the removal of its last
    /// run's.
    spool_lock: Arc<Mutex<()>>,
    /// Status files of ended jobs, kept for new jobs in `<spool>/recycled`.
    recycled: Arc<Recycled>,
}

/// Status files kept for reuse. A job's file is renamed into place from here rather
/// than made: making a file costs an inode, and a file system that has freed thousands
/// of inodes in the last minute (ext4 without a journal skips those when it allocates)
/// spends a good part of a job's start finding one. A file enters only once the
/// shepherd that held it is gone, so that nothing else can write in it.
struct Recycled {
    directory: PathBuf,
    files: Mutex<(Vec<PathBuf>, u64)>,
}

impl Recycled {
    /// The most files kept.
    const LIMIT: usize = 1024;

    /// The files an earlier run kept are kept again.
    fn open(spool: &Path) -> std::io::Result<Recycled> {
        let directory = spool.join("recycled");
        std::fs::create_dir_all(&directory)?;
        let mut files = Vec::new();
        let mut next = 0;
        for entry in std::fs::read_dir(&directory)? {
            let entry = entry?;
            let number = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok());
            match number {
                Some(n) if entry.file_type()?.is_file() && files.len() < Self::LIMIT => {
                    next = next.max(n + 1);
                    files.push(entry.path());
                }
                _ => {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        Ok(Recycled {
            directory,
            files: Mutex::new((files, next)),
        })
    }

    /// Keeps the status file `file`, whose shepherd `pid` has ended, or removes it.
    /// It is emptied here, with an opening of its own: ext4 writes out at the last close
    /// a file that was truncated to nothing and written again (`auto_da_alloc`), which
    /// would be the shepherd's close were the file emptied when a job gets it.
    fn keep(&self, file: &Path, pid: i32) {
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        let emptied = gone
            && std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(file)
                .and_then(|f| f.set_len(0))
                .is_ok();
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if emptied && files.0.len() < Self::LIMIT {
            let kept = self.directory.join(files.1.to_string());
            if std::fs::rename(file, &kept).is_ok() {
                files.0.push(kept);
                files.1 += 1;
                return;
            }
        }
        drop(files);
        let _ = std::fs::remove_file(file);
    }

    /// A status file at `path`, empty, written by the service's user only: a kept one
    /// renamed there, or a new one.
    fn make(&self, path: &Path) -> std::io::Result<std::fs::File> {
        let kept = self.files.lock().unwrap_or_else(|e| e.into_inner()).0.pop();
        // The rename replaces the file of an earlier run of the job (requeued), whose
        // end is recorded.
        if let Some(kept) = kept
            && std::fs::rename(&kept, path).is_ok()
            && let Ok(file) = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
        {
            // Kept files are empty; one an interrupted run left otherwise is emptied.
            if file.metadata().is_ok_and(|m| m.len() == 0) || file.set_len(0).is_ok() {
                return Ok(file);
            }
        }
        let _ = std::fs::remove_file(path);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    }
}

impl LocalResourceManager {
    /// Jobs get status files under `spool`, which only the service enters, and
    /// are started by `shepherd` (the `drover` binary); ends are reported on `events`.
    pub fn new(
        spool: PathBuf,
        events: RmNotify,
        shepherd: PathBuf,
        guest_program: PathBuf,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(&spool)?;
        std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o700))?;
        let (sweep, sweeps) = std::sync::mpsc::channel::<(String, ProcessRecord)>();
        let spool_lock = Arc::new(Mutex::new(()));
        let recycled = Arc::new(Recycled::open(&spool)?);
        let (root, lock, kept) = (spool.clone(), spool_lock.clone(), recycled.clone());
        std::thread::Builder::new()
            .name("spool-sweeper".into())
            .spawn(move || {
                for (job_id, process) in sweeps {
                    let file = status_file(&root, &job_id);
                    if Path::new(&process.spool) != file {
                        // A run started by an earlier version: its directory and pid file.
                        let _ = std::fs::remove_dir_all(legacy_spool_of(&root, &job_id));
                        let _ = std::fs::remove_file(legacy_pid_file(&root, &job_id));
                        continue;
                    }
                    let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
                    // Only the run that ended: a later run's shepherd writes its own pid.
                    if read_status(&file).is_some_and(|s| s.pid == Some(process.pid)) {
                        kept.keep(&file, process.pid);
                    }
                }
            })?;
        Ok(LocalResourceManager {
            spool,
            fork_server: fork_server::ForkServer::new(shepherd.clone(), events.clone()),
            events,
            shepherd,
            guest_program,
            sweep,
            spool_lock,
            recycled,
        })
    }

    /// Waits for the child in a thread of its own: `wait4` gives its CPU time too.
    fn watch_child(&self, job_id: String, pid: i32, spool: PathBuf) {
        let events = self.events.clone();
        std::thread::Builder::new()
            .name(format!("job-{job_id}"))
            .spawn(move || {
                let mut status: libc::c_int = 0;
                let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
                let rc = loop {
                    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
                    if rc == -1
                        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
                    {
                        continue;
                    }
                    break rc;
                };
                let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
                let cpu_seconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
                let exit = exit_of((rc == pid).then_some(status), cpu_seconds, &spool);
                events(RmEvent::Exited { job_id, pid, exit });
            })
            .expect("cannot start a job watcher thread");
    }

    /// Starts the shepherd of a job in a guest by fork and exec: it gets four
    /// descriptors (status, spec, the agent's connection, the `drover` program).
    fn fork_shepherd(
        &self,
        job_id: &str,
        status_fd: i32,
        spec_fd: i32,
        (agent, program): (i32, i32),
    ) -> Result<i32, String> {
        let mut command = Command::new(&self.shepherd);
        command
            .arg(shepherd::SUBCOMMAND)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // The status file, the spec, the agent's connection and the program become the
        // shepherd's fds 3 to 6: all copied above 10 first (close-on-exec), then moved
        // (dup2 clears close-on-exec), so that none can overwrite another whatever their
        // numbers.
        let moves = [
            (status_fd, shepherd::STATUS_FD),
            (spec_fd, shepherd::SPEC_FD),
            (agent, shepherd::GUEST_AGENT_FD),
            (program, shepherd::GUEST_PROGRAM_FD),
        ];
        // SAFETY: only async-signal-safe system calls between fork and exec (`high` is
        // filled in place, no allocation).
        let mut high = [0; 4];
        unsafe {
            command.pre_exec(move || {
                for (slot, (from, _)) in high.iter_mut().zip(&moves) {
                    *slot = libc::fcntl(*from, libc::F_DUPFD_CLOEXEC, 10);
                    if *slot < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                for (copy, (_, to)) in high.iter().zip(&moves) {
                    if libc::dup2(*copy, *to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                shepherd::prepare()
            });
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start the shepherd of {job_id}: {e}"))?;
        // The watcher thread reaps it; the Child handle is not needed.
        Ok(child.id() as i32)
    }
}

/// How a job (or the shepherd of a job in a guest) that ended with `wait_status`
/// (`None`: unknown) ended. A command that never started exits non-zero: only then is
/// the status file read for the reason (not on every job's end).
fn exit_of(wait_status: Option<i32>, cpu_seconds: f64, spool: &Path) -> Exit {
    let code = wait_status.and_then(shepherd::code_of);
    Exit {
        code,
        cpu_seconds,
        start_failure: code
            .filter(|c| *c != 0)
            .and_then(|_| read_status(spool))
            .and_then(|status| status.reason),
    }
}

/// Polls a process that is not our child (re-adopted after a restart, or left by a fork
/// server or a shepherd that ended) and reports its end as its status file tells it:
/// once the process is gone, or its end is written there (a zombie no one reaps, where
/// the service is the init of its container, ends too).
fn watch_adopted(events: RmNotify, job_id: String, process: ProcessRecord) {
    std::thread::Builder::new()
        .name(format!("job-{job_id}"))
        .spawn(move || {
            let ended = || read_status(Path::new(&process.spool)).is_some_and(|s| s.code.is_some());
            while is_alive(&process) && !ended() {
                std::thread::sleep(Duration::from_millis(200));
            }
            let status = read_status(Path::new(&process.spool));
            let exit = Exit {
                code: status.as_ref().and_then(|s| s.code),
                cpu_seconds: 0.0,
                start_failure: status.and_then(|s| s.reason),
            };
            events(RmEvent::Exited {
                job_id,
                pid: process.pid,
                exit,
            });
        })
        .expect("cannot start a job watcher thread");
}

impl ResourceManager for LocalResourceManager {
    fn name(&self) -> &str {
        "local"
    }

    fn start(&self, launch: Launch) -> Result<ProcessRecord, String> {
        let (done, outcome) = std::sync::mpsc::channel();
        self.start_then(
            launch,
            Box::new(move |started| {
                let _ = done.send(started);
            }),
        );
        // The fork server's reader answers every start, if only "ended" (it ends a
        // server that does not answer in time).
        outcome
            .recv()
            .unwrap_or_else(|_| Err("the start was never answered".into()))
    }

    fn start_then(&self, launch: Launch, done: StartDone) {
        // One file per job (a directory and a pid file per job cost a start three inodes).
        let spool = status_file(&self.spool, &launch.job_id);
        let status_file = {
            let _spool_held = self.spool_lock.lock().unwrap_or_else(|e| e.into_inner());
            self.recycled.make(&spool)
        };
        let made = status_file
            .map_err(|e| format!("cannot create the exit status file: {e}"))
            .and_then(|status_file| {
                let spec = spec_file(&process_spec_of(&launch))
                    .map_err(|e| format!("cannot hand the job to its shepherd: {e}"))?;
                Ok((status_file, spec))
            });
        let (status_file, spec) = match made {
            Ok(files) => files,
            Err(e) => return done(Err(e)),
        };
        let (status_fd, spec_fd) = (status_file.as_raw_fd(), spec.as_raw_fd());
        let Some(agent) = &launch.guest else {
            // The fork server reads the job's start time before it lets it go on. The
            // job's process writes its pid first in its status file: a restart that finds
            // the start unrecorded stops what that names (`abandon`). The fork server
            // reports the ends of the jobs it started.
            let record_spool = spool.to_string_lossy().into_owned();
            let answer = Box::new(move |started: Result<StartedJob, String>| {
                done(started.map(|job| ProcessRecord {
                    pid: job.pid,
                    start_ticks: job.start_ticks,
                    spool: record_spool,
                    rm_job_id: None,
                }))
            });
            // The server has its own copies of the files once the request is sent.
            return self
                .fork_server
                .start_then(&launch.job_id, &spool, status_fd, spec_fd, answer);
        };
        // A job in a guest: the agent's connection and this program, which its process
        // runs (`guest-run`), become fds 5 and 6 of the shepherd and of the job. A
        // shepherd this service forked is its child, not reaped before it is read here.
        let started = std::fs::File::open(&self.guest_program)
            .map_err(|e| format!("cannot open {}: {e}", self.guest_program.display()))
            .and_then(|program| {
                let guest_fds = (agent.as_raw_fd(), program.as_raw_fd());
                self.fork_shepherd(&launch.job_id, status_fd, spec_fd, guest_fds)
            });
        // The shepherd has its own copies.
        drop((status_file, spec));
        done(started.map(|pid| {
            let record = ProcessRecord {
                pid,
                start_ticks: shepherd::fork_server::start_ticks(pid).unwrap_or(0),
                spool: spool.to_string_lossy().into_owned(),
                rm_job_id: None,
            };
            // Its status file names the shepherd first, for `abandon` as above; watched
            // (and so reaped) only once its start time is read.
            self.watch_child(launch.job_id.clone(), pid, spool.clone());
            record
        }))
    }

    fn signal(&self, process: &ProcessRecord, signal: JobSignal) -> Result<(), String> {
        if !is_alive(process) {
            return Ok(());
        }
        let group = -process.pid;
        let send = |sig| {
            // ESRCH: the group ended meanwhile, which is what a signal wants anyway.
            if unsafe { libc::kill(group, sig) } == 0
                || std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            {
                Ok(())
            } else {
                Err(format!(
                    "cannot signal process group {}: {}",
                    process.pid,
                    std::io::Error::last_os_error()
                ))
            }
        };
        match signal {
            JobSignal::Suspend => send(libc::SIGSTOP),
            JobSignal::Resume => send(libc::SIGCONT),
            JobSignal::Terminate { grace_seconds } => {
                send(libc::SIGTERM)?;
                // A stopped process must run to act on SIGTERM.
                send(libc::SIGCONT)?;
                let process = process.clone();
                std::thread::spawn(move || {
                    let deadline = std::time::Instant::now() + Duration::from_secs(grace_seconds);
                    while std::time::Instant::now() < deadline {
                        if !group_alive(process.pid) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    unsafe { libc::kill(-process.pid, libc::SIGKILL) };
                });
                Ok(())
            }
        }
    }

    fn adopt(&self, job_id: &str, process: &ProcessRecord) -> bool {
        if !is_alive(process) {
            return false;
        }
        watch_adopted(self.events.clone(), job_id.to_string(), process.clone());
        true
    }

    fn recorded_exit(&self, process: &ProcessRecord) -> Option<Exit> {
        let status = read_status(Path::new(&process.spool))?;
        Some(Exit {
            code: Some(status.code?),
            cpu_seconds: 0.0,
            start_failure: status.reason,
        })
    }

    fn forget(&self, job_id: &str, process: &ProcessRecord) {
        let _ = self.sweep.send((job_id.to_string(), process.clone()));
    }

    fn abandon(&self, job_id: &str) {
        let recorded = read_status(&status_file(&self.spool, job_id)).and_then(|s| s.pid);
        let legacy = || {
            let text = std::fs::read_to_string(legacy_pid_file(&self.spool, job_id)).ok()?;
            text.trim().parse::<i32>().ok()
        };
        if let Some(pid) = recorded.or_else(legacy)
            && pid > 1
            && group_alive(pid)
        {
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
}

/// A job's status file: its shepherd's pid, then its exit status and why it could not
/// start.
fn status_file(spool: &Path, job_id: &str) -> PathBuf {
    // Job ids are made by the engine (`<name>.<n>`); keep the path a single component anyway.
    spool.join(format!("{}.status", job_id.replace(['/', '\0'], "_")))
}

/// The pid file an earlier version kept beside the job's spool directory.
fn legacy_pid_file(spool: &Path, job_id: &str) -> PathBuf {
    spool.join(format!("{}.pid", job_id.replace(['/', '\0'], "_")))
}

/// The spool directory an earlier version made for each job.
fn legacy_spool_of(spool: &Path, job_id: &str) -> PathBuf {
    spool.join(job_id.replace(['/', '\0'], "_"))
}

/// What the shepherd of `launch` runs: the command as the job's user (when the service
/// can switch users), after the job's setup, with the job's environment.
fn process_spec_of(launch: &Launch) -> ProcessSpec {
    let mut argv = Vec::new();
    if launch.guest.is_some() {
        argv.push(format!("/proc/self/fd/{}", shepherd::GUEST_PROGRAM_FD));
        argv.push(shepherd::GUEST_RUN.into());
    }
    let path = |p: &Path| p.to_string_lossy().into_owned();
    argv.push(path(&launch.command_file));
    argv.extend(launch.arguments.iter().cloned());
    let setup = Setup {
        directory: path(&launch.working_directory),
        stdin: launch.stdin.as_deref().map(path),
        stdout: Output {
            path: path(&launch.stdout),
            default_name: launch.output_names.0.clone(),
        },
        stderr: Output {
            path: path(&launch.stderr),
            default_name: launch.output_names.1.clone(),
        },
    };
    let switch_to = sysuser::running_as_root().then(|| Ids {
        uid: launch.user.uid,
        gid: launch.gid.unwrap_or(launch.user.gid),
        groups: launch.user.groups.clone(),
    });
    ProcessSpec {
        switch_to,
        guest: launch.guest.is_some(),
        setup,
        argv,
        environment: launch.environment.clone(),
    }
}

/// The spec in a memory file, read from the start (nothing of the job's environment
/// touches a disk).
fn spec_file(spec: &ProcessSpec) -> std::io::Result<std::fs::File> {
    use std::io::{Seek, Write};
    let name = c"drover-job-spec";
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made, owned by nothing else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(&spec.encode())?;
    file.rewind()?;
    Ok(file)
}

/// What a shepherd wrote in its status file: its pid (`pid <n>`, first, as it starts),
/// then the job's exit status and why its command could not start.
#[derive(Debug, PartialEq, Eq)]
struct Status {
    pid: Option<i32>,
    code: Option<i32>,
    reason: Option<String>,
}

/// The status the shepherd left in `spool`: a job's status file, or the spool directory
/// of an earlier version holding `exit_status`. The file is the service's (only it
/// enters the spool), but a directory made by an older version belonged to the job's
/// user: the file is opened without following a symlink or waiting on a FIFO, and read
/// only when it is a small regular file, owned by the service or by the directory's
/// owner.
fn read_status(spool: &Path) -> Option<Status> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    const MAX_LEN: u64 = 64 + shepherd::REPORT_LIMIT as u64;
    let service = unsafe { libc::geteuid() };
    let facts = std::fs::symlink_metadata(spool).ok()?;
    let (path, owner) = if facts.is_dir() {
        (spool.join(EXIT_STATUS), facts.uid())
    } else {
        (spool.to_path_buf(), service)
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let facts = file.metadata().ok()?;
    if !facts.is_file() || (owner != service && facts.uid() != owner) || facts.len() > MAX_LEN {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_LEN).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.lines().peekable();
    let pid = lines
        .next_if(|l| l.starts_with("pid "))
        .and_then(|l| l["pid ".len()..].trim().parse().ok());
    let code = lines.next().and_then(|l| l.trim().parse().ok());
    let reason = lines.next().map(str::trim).filter(|r| !r.is_empty());
    Some(Status {
        pid,
        code,
        reason: code.and(reason).map(str::to_string),
    })
}

/// The recorded process still exists (same pid, same start time), a zombie included: a
/// job's shepherd writes its end in the status file before it reaps it, so its end is
/// recorded only once its pid is gone. (A shepherd recorded by an earlier version wrote
/// it before it ended.)
pub fn is_alive(process: &ProcessRecord) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", process.pid)) else {
        return false;
    };
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    let mut fields = stat[close + 2..].split_whitespace();
    let state = fields.next().unwrap_or("Z");
    let ticks: Option<u64> = fields.nth(18).and_then(|t| t.parse().ok());
    state != "X" && (process.start_ticks == 0 || ticks == Some(process.start_ticks))
}

/// Whether any process of the group led by `pgid` is left.
fn group_alive(pgid: i32) -> bool {
    unsafe { libc::kill(-pgid, 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_file_is_reused_empty_only_once_its_shepherd_is_gone() {
        let spool = tempfile::tempdir().unwrap();
        let recycled = Recycled::open(spool.path()).unwrap();
        let ended = spool.path().join("Drover.1.status");
        std::fs::write(&ended, "pid 1\n0\n").unwrap();
        // A pid no process has (above the kernel's largest) and this process's own.
        recycled.keep(&ended, i32::MAX);
        let running = spool.path().join("Drover.2.status");
        std::fs::write(&running, "pid 2\n").unwrap();
        recycled.keep(&running, std::process::id() as i32);
        assert!(!ended.exists() && !running.exists());
        assert_eq!(recycled.files.lock().unwrap().0.len(), 1);

        // Kept again by the next run, and handed out empty.
        let again = Recycled::open(spool.path()).unwrap();
        let next = spool.path().join("Drover.3.status");
        let mut file = again.make(&next).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 0);
        assert!(again.files.lock().unwrap().0.is_empty());
        use std::io::Write;
        writeln!(file, "pid 3").unwrap();
        // None left: a new file.
        let fresh = spool.path().join("Drover.4.status");
        again.make(&fresh).unwrap();
        assert_eq!(std::fs::read_to_string(&next).unwrap(), "pid 3\n");
        assert!(fresh.exists());
    }

    #[test]
    fn a_start_failure_is_the_status_files_second_line() {
        let dir = tempfile::tempdir().unwrap();
        let status = dir.path().join("exit_status");
        std::fs::write(
            &status,
            "2\nsh: can't create /x/out: nonexistent directory\n",
        )
        .unwrap();
        let read = read_status(dir.path()).unwrap();
        assert_eq!(read.code, Some(2));
        assert_eq!(
            read.reason.as_deref(),
            Some("sh: can't create /x/out: nonexistent directory")
        );
        std::fs::write(&status, "0\n").unwrap();
        let read = read_status(dir.path()).unwrap();
        assert_eq!((read.code, read.reason), (Some(0), None));
        // A status file of this version: the shepherd's pid first, no end yet, then one.
        let file = dir.path().join("D.1.status");
        std::fs::write(&file, "pid 42\n").unwrap();
        let expected = Status {
            pid: Some(42),
            code: None,
            reason: None,
        };
        assert_eq!(read_status(&file), Some(expected));
        std::fs::write(
            &file,
            "pid 42\n126\ncannot enter the working directory /x\n",
        )
        .unwrap();
        let read = read_status(&file).unwrap();
        assert_eq!((read.pid, read.code), (Some(42), Some(126)));
        assert_eq!(
            read.reason.as_deref(),
            Some("cannot enter the working directory /x")
        );
    }

    #[test]
    fn an_exit_status_is_read_only_from_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let status = dir.path().join("exit_status");
        std::fs::write(&status, "3\n").unwrap();
        assert_eq!(read_status(dir.path()).and_then(|s| s.code), Some(3));

        // A symlink to a file the job's user may not read is not followed.
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "42").unwrap();
        std::fs::remove_file(&status).unwrap();
        std::os::unix::fs::symlink(&secret, &status).unwrap();
        assert_eq!(read_status(dir.path()).and_then(|s| s.code), None);

        // A FIFO does not block the watcher.
        std::fs::remove_file(&status).unwrap();
        let path = std::ffi::CString::new(status.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        assert_eq!(read_status(dir.path()).and_then(|s| s.code), None);

        // A huge (sparse) file is not read.
        std::fs::remove_file(&status).unwrap();
        let file = std::fs::File::create(&status).unwrap();
        file.set_len(1 << 40).unwrap();
        assert_eq!(read_status(dir.path()).and_then(|s| s.code), None);
    }
}
