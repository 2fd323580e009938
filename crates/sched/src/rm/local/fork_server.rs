//! The service's side of the fork server (`shepherd::fork_server`): one process,
//! started on the first job and again whenever it has ended, that keeps a pool of
//! shepherds and starts each job in one of them (no program is started and no process
//! forked for a job but the job's own). A reader thread takes its reports, answers the
//! start waiting for its job's pid, and reports each job's end (wait status and CPU
//! time) as a job watcher thread did, without a thread per job.
//!
//! Should it end (killed), the jobs it started live on, and their shepherds with them;
//! the reader hands each job to a poller, as a restarted service does, and the next
//! start makes a new server.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::super::shepherd::fork_server::{self, Report, StartedJob};
use super::super::{RmEvent, RmNotify};
use crate::job::ProcessRecord;

pub(super) struct ForkServer {
    program: PathBuf,
    events: RmNotify,
    current: Mutex<Option<Connection>>,
}

/// How long a start waits for the fork server's answer: a fork and a few system calls
/// take well under a millisecond, so a server that has not answered in this time is
/// stuck (stopped, traced) and is replaced.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// One running fork server.
struct Connection {
    socket: Arc<OwnedFd>,
    server: i32,
    /// The jobs whose requests are sent and not yet answered, in order (the server
    /// answers them in order).
    asked: Arc<Mutex<VecDeque<Asked>>>,
    /// The answers, from the reader thread; closed when the server has ended.
    answers: Receiver<Result<StartedJob, i32>>,
    ended: Arc<AtomicBool>,
}

struct Asked {
    job_id: String,
    spool: PathBuf,
}

impl ForkServer {
    /// Jobs started by `program job-shepherd fork-server`, their ends reported on
    /// `events`. Nothing starts until the first job.
    pub(super) fn new(program: PathBuf, events: RmNotify) -> ForkServer {
        ForkServer {
            program,
            events,
            current: Mutex::new(None),
        }
    }

    /// Starts `job_id` in a shepherd of the pool, with its status file (at `spool`) and
    /// plan: the pid and start time of the job's process, which leads its group. Its end
    /// is reported on the events.
    pub(super) fn start(
        &self,
        job_id: &str,
        spool: &Path,
        status_fd: i32,
        plan_fd: i32,
    ) -> Result<StartedJob, String> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        // A server that ended is replaced once; a request it never received made nothing.
        for _ in 0..2 {
            if current
                .as_ref()
                .is_none_or(|c| c.ended.load(Ordering::Acquire))
            {
                *current = Some(
                    self.connect()
                        .map_err(|e| format!("cannot start the shepherds' fork server: {e}"))?,
                );
            }
            let connection = current.as_ref().expect("made above");
            let asked = Asked {
                job_id: job_id.to_string(),
                spool: spool.to_path_buf(),
            };
            connection.asked.lock().unwrap().push_back(asked);
            if fork_server::request(connection.socket.as_raw_fd(), status_fd, plan_fd).is_err() {
                connection.asked.lock().unwrap().pop_back();
                *current = None;
                continue;
            }
            // A job's process goes on only once this answer was sent: when none comes,
            // nothing runs (the server is ended, and with it the job's handshake).
            return match connection.answers.recv_timeout(ANSWER_WITHIN) {
                Ok(Ok(job)) => Ok(job),
                Ok(Err(errno)) => Err(format!(
                    "cannot start the shepherd of {job_id}: {}",
                    io::Error::from_raw_os_error(errno)
                )),
                Err(e) => {
                    if matches!(e, std::sync::mpsc::RecvTimeoutError::Timeout) {
                        unsafe { libc::kill(connection.server, libc::SIGKILL) };
                    }
                    *current = None;
                    Err(format!(
                        "the shepherds' fork server ended while starting {job_id}"
                    ))
                }
            };
        }
        Err(format!(
            "the shepherds' fork server ended twice while starting {job_id}"
        ))
    }

    /// Starts a fork server and its reader thread.
    fn connect(&self) -> io::Result<Connection> {
        let ends = fork_server::seqpacket_pair()?;
        // SAFETY: both descriptors were just made and are owned by nothing else.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        let pid = super::spawn_shepherd(
            &self.program,
            Some(fork_server::ARGUMENT),
            &[(theirs.as_raw_fd(), fork_server::SOCKET_FD)],
        )?;
        drop(theirs);
        let socket = Arc::new(ours);
        let asked = Arc::new(Mutex::new(VecDeque::new()));
        let ended = Arc::new(AtomicBool::new(false));
        let (answer, answers) = std::sync::mpsc::channel();
        let reader = Reader {
            socket: socket.clone(),
            server: pid,
            asked: asked.clone(),
            answer,
            ended: ended.clone(),
            events: self.events.clone(),
        };
        std::thread::Builder::new()
            .name("fork-server".into())
            .spawn(move || reader.run())?;
        Ok(Connection {
            socket,
            server: pid,
            asked,
            answers,
            ended,
        })
    }
}

impl Drop for Connection {
    /// Ends the reader (the server ends with its end of the socket) when the resource
    /// manager goes, as in a service started again within one process (tests).
    fn drop(&mut self) {
        unsafe { libc::shutdown(self.socket.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

/// The reader thread of one fork server.
struct Reader {
    socket: Arc<OwnedFd>,
    server: i32,
    asked: Arc<Mutex<VecDeque<Asked>>>,
    answer: Sender<Result<StartedJob, i32>>,
    ended: Arc<AtomicBool>,
    events: RmNotify,
}

impl Reader {
    fn run(self) {
        // The jobs this server started and that have not ended: pid to job, spool and
        // start time.
        let mut running: HashMap<i32, (Asked, u64)> = HashMap::new();
        let mut bytes = [0u8; 64];
        loop {
            // SAFETY: `bytes` is writable for its whole length.
            let n = unsafe {
                libc::recv(
                    self.socket.as_raw_fd(),
                    bytes.as_mut_ptr() as *mut libc::c_void,
                    bytes.len(),
                    0,
                )
            };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                break;
            }
            match Report::decode(&bytes[..n as usize]) {
                Some(Report::Started(outcome)) => {
                    let asked = self.asked.lock().unwrap().pop_front();
                    if let (Ok(job), Some(asked)) = (outcome, asked) {
                        running.insert(job.pid, (asked, job.start_ticks));
                    }
                    let _ = self.answer.send(outcome);
                }
                Some(Report::Ended {
                    pid,
                    wait_status,
                    cpu_micros,
                }) => {
                    if let Some((Asked { job_id, spool }, _)) = running.remove(&pid) {
                        let cpu_seconds = cpu_micros as f64 / 1e6;
                        let exit = super::exit_of(Some(wait_status), cpu_seconds, &spool);
                        (self.events)(RmEvent::Exited { job_id, pid, exit });
                    }
                }
                Some(Report::Lost { pid }) => {
                    // Its shepherd was killed: the job is watched as after a restart.
                    if let Some((asked, start_ticks)) = running.remove(&pid) {
                        watch(&self.events, pid, asked, start_ticks);
                    }
                }
                None => {}
            }
        }
        self.ended.store(true, Ordering::Release);
        // A start waiting for its answer gets none.
        drop(self.answer);
        // The server is this process's child.
        unsafe { libc::waitpid(self.server, std::ptr::null_mut(), 0) };
        // Its jobs live on without it: watched as a restart watches them.
        for (pid, (asked, start_ticks)) in running {
            watch(&self.events, pid, asked, start_ticks);
        }
    }
}

/// Watches the job `asked` (process `pid`, started at `start_ticks`), which no shepherd
/// will report, as a restart watches its jobs.
fn watch(events: &RmNotify, pid: i32, Asked { job_id, spool }: Asked, start_ticks: u64) {
    let record = ProcessRecord {
        pid,
        start_ticks,
        spool: spool.to_string_lossy().into_owned(),
        rm_job_id: None,
    };
    super::watch_adopted(events.clone(), job_id, record);
}
