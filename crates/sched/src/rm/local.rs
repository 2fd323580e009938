//! The local resource manager: jobs are real processes on this machine, each in a
//! process group of its own, run as the job's system user.
//!
//! A small `/bin/sh` wrapper opens the output files *after* the switch to the job's
//! user (so a job can only write where its user may), runs the command, and leaves the
//! exit status for a service that restarts meanwhile. It writes the status through a
//! descriptor the service opened (fd 3) on a file of the job's spool directory, which
//! belongs to the service (mode 0700): nothing the service reads there as root is in
//! a place the job's user can change.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Exit, JobSignal, Launch, ResourceManager, RmEvent, RmNotify};
use crate::job::ProcessRecord;
use crate::sysuser;

/// Runs in the job's process: redirect, run the command (directly when executable,
/// through `sh` otherwise), record the status.
const WRAPPER: &str = r#"
cd "$DROVER_JOB_DIR" || exit 126
if [ -n "$DROVER_JOB_JOIN" ]; then
  exec <"${DROVER_JOB_STDIN:-/dev/null}" >>"$DROVER_JOB_STDOUT" 2>&1 || exit 126
else
  exec <"${DROVER_JOB_STDIN:-/dev/null}" >>"$DROVER_JOB_STDOUT" 2>>"$DROVER_JOB_STDERR" || exit 126
fi
unset DROVER_JOB_JOIN DROVER_JOB_STDIN DROVER_JOB_DIR
if [ -x "$1" ]; then "$@" 3>&-; else /bin/sh "$@" 3>&-; fi
status=$?
echo "$status" >&3 2>/dev/null
exit $status
"#;

/// The file of a job's spool directory that receives its exit status.
const EXIT_STATUS: &str = "exit_status";

pub struct LocalResourceManager {
    spool: PathBuf,
    events: RmNotify,
}

impl LocalResourceManager {
    /// Jobs get spool directories under `spool`; ends are reported on `events`. Only
    /// the service enters it (jobs write their status through a descriptor).
    pub fn new(spool: PathBuf, events: RmNotify) -> std::io::Result<Self> {
        std::fs::create_dir_all(&spool)?;
        std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o700))?;
        Ok(LocalResourceManager { spool, events })
    }

    fn pid_file(&self, job_id: &str) -> PathBuf {
        self.spool
            .join(format!("{}.pid", job_id.replace(['/', '\0'], "_")))
    }

    fn spool_of(&self, job_id: &str) -> PathBuf {
        // Job ids are made by the engine (`<name>.<n>`); keep the path a single component anyway.
        self.spool.join(job_id.replace(['/', '\0'], "_"))
    }

    /// Waits for the child in a thread of its own: `wait4` gives its CPU time too.
    fn watch_child(&self, job_id: String, pid: i32) {
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
                let code = if rc == pid {
                    if libc::WIFEXITED(status) {
                        Some(libc::WEXITSTATUS(status))
                    } else if libc::WIFSIGNALED(status) {
                        Some(128 + libc::WTERMSIG(status))
                    } else {
                        None
                    }
                } else {
                    None
                };
                let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
                let exit = Exit {
                    code,
                    cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
                };
                events(RmEvent::Exited { job_id, pid, exit });
            })
            .expect("cannot start a job watcher thread");
    }

    /// Polls a process that is not our child (re-adopted after a restart).
    fn watch_adopted(&self, job_id: String, process: ProcessRecord) {
        let events = self.events.clone();
        std::thread::Builder::new()
            .name(format!("job-{job_id}"))
            .spawn(move || {
                while is_alive(&process) {
                    std::thread::sleep(Duration::from_millis(200));
                }
                let code = read_exit_status(Path::new(&process.spool));
                let exit = Exit {
                    code,
                    cpu_seconds: 0.0,
                };
                events(RmEvent::Exited {
                    job_id,
                    pid: process.pid,
                    exit,
                });
            })
            .expect("cannot start a job watcher thread");
    }
}

impl ResourceManager for LocalResourceManager {
    fn name(&self) -> &str {
        "local"
    }

    fn start(&self, launch: Launch) -> Result<ProcessRecord, String> {
        let spool = self.spool_of(&launch.job_id);
        let _ = std::fs::remove_dir_all(&spool);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&spool)
            .map_err(|e| format!("cannot create the spool directory: {e}"))?;
        let status_file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(spool.join(EXIT_STATUS))
            .map_err(|e| format!("cannot create the exit status file: {e}"))?;
        let status_fd = status_file.as_raw_fd();
        let root = sysuser::running_as_root();
        if root {
            // The job's user can write through the descriptor (its wrapper runs as them):
            // whatever they write is theirs, on their quota.
            std::os::unix::fs::fchown(&status_file, Some(launch.user.uid), Some(launch.user.gid))
                .map_err(|e| {
                format!(
                    "cannot hand the exit status file to {}: {e}",
                    launch.user.name
                )
            })?;
        }
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(WRAPPER)
            .arg("drover-job")
            .arg(&launch.command_file)
            .args(&launch.arguments)
            .env_clear()
            .envs(launch.environment.iter().map(|(k, v)| (k, v)))
            .env("DROVER_JOB_STDOUT", &launch.stdout)
            .env("DROVER_JOB_STDERR", &launch.stderr)
            .env("DROVER_JOB_DIR", &launch.working_directory)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        if launch.stdout == launch.stderr {
            command.env("DROVER_JOB_JOIN", "1");
        }
        if let Some(stdin) = &launch.stdin {
            command.env("DROVER_JOB_STDIN", stdin);
        }
        // The status file becomes the wrapper's fd 3 (dup2 clears close-on-exec; a file
        // that already is fd 3 has it cleared by hand).
        // SAFETY: only async-signal-safe system calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                let moved = if status_fd == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0)
                } else {
                    libc::dup2(status_fd, 3)
                };
                if moved == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        if root {
            // Groups (the user's own, from the name service), group, then user; std's
            // `uid`/`gid` cannot set supplementary groups.
            let groups: Vec<libc::gid_t> = launch.user.groups.clone();
            let gid = launch.gid.unwrap_or(launch.user.gid);
            let uid = launch.user.uid;
            // SAFETY: only async-signal-safe system calls between fork and exec, on
            // memory allocated before the fork.
            unsafe {
                command.pre_exec(move || {
                    if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", launch.command_file.display()))?;
        // The child has its own copy.
        drop(status_file);
        let pid = child.id() as i32;
        // The watcher thread reaps it; the Child handle is not needed.
        drop(child);
        let record = ProcessRecord {
            pid,
            start_ticks: start_ticks(pid).unwrap_or(0),
            spool: spool.to_string_lossy().into_owned(),
        };
        // In the service's own directory, not the job's (which its user owns): a restart
        // kills what this names, so a job must not be able to rewrite it.
        std::fs::write(self.pid_file(&launch.job_id), pid.to_string()).ok();
        self.watch_child(launch.job_id, pid);
        Ok(record)
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
        self.watch_adopted(job_id.to_string(), process.clone());
        true
    }

    fn abandon(&self, job_id: &str) {
        let Ok(text) = std::fs::read_to_string(self.pid_file(job_id)) else {
            return;
        };
        if let Ok(pid) = text.trim().parse::<i32>()
            && pid > 1
            && group_alive(pid)
        {
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
}

/// The status the wrapper left in a job's spool directory. The directory is the
/// service's (no one else can put a file there), but the job's user could still write
/// through the wrapper's descriptor, and a spool made by an older version belonged to
/// the job's user: the file is opened without following a symlink or waiting on a FIFO,
/// and read only when it is a small regular file, owned by the directory's owner unless
/// that is the service.
fn read_exit_status(spool: &Path) -> Option<i32> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    const MAX_LEN: u64 = 32;
    let owner = std::fs::symlink_metadata(spool).ok()?.uid();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(spool.join(EXIT_STATUS))
        .ok()?;
    let facts = file.metadata().ok()?;
    let service = unsafe { libc::geteuid() };
    if !facts.is_file() || (owner != service && facts.uid() != owner) || facts.len() > MAX_LEN {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_LEN).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// The start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The recorded process still exists (same pid, same start time) and is not a zombie.
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
    state != "Z" && state != "X" && (process.start_ticks == 0 || ticks == Some(process.start_ticks))
}

/// Whether any process of the group led by `pgid` is left.
fn group_alive(pgid: i32) -> bool {
    unsafe { libc::kill(-pgid, 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_status_is_read_only_from_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let status = dir.path().join("exit_status");
        std::fs::write(&status, "3\n").unwrap();
        assert_eq!(read_exit_status(dir.path()), Some(3));

        // A symlink to a file the job's user may not read is not followed.
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "42").unwrap();
        std::fs::remove_file(&status).unwrap();
        std::os::unix::fs::symlink(&secret, &status).unwrap();
        assert_eq!(read_exit_status(dir.path()), None);

        // A FIFO does not block the watcher.
        std::fs::remove_file(&status).unwrap();
        let path = std::ffi::CString::new(status.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        assert_eq!(read_exit_status(dir.path()), None);

        // A huge (sparse) file is not read.
        std::fs::remove_file(&status).unwrap();
        let file = std::fs::File::create(&status).unwrap();
        file.set_len(1 << 40).unwrap();
        assert_eq!(read_exit_status(dir.path()), None);
    }
}
