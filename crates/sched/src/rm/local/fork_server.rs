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
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

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

/// Most starts asked of a server and not yet answered; a further start waits. The
/// server takes them one at a time; a few waiting keep it busy, and its socket's buffer
/// (which its reports share) far from full.
const MOST_ASKED: usize = 16;

/// What takes the answer to a start: the started job, or why it could not start.
pub(super) type Answer = Box<dyn FnOnce(Result<StartedJob, String>) + Send>;

/// One running fork server.
struct Connection {
    socket: Arc<OwnedFd>,
    asked: Arc<AskedQueue>,
    ended: Arc<AtomicBool>,
}

/// The jobs whose requests are sent and not yet answered, in order (the server answers
/// them in order); the condition is signalled as answers take them off.
#[derive(Default)]
struct AskedQueue {
    jobs: Mutex<VecDeque<Asked>>,
    answered: Condvar,
    /// Set when the reader has ended a stuck server: the next start makes a new one
    /// without waiting for this one's socket to close.
    replace: AtomicBool,
}

struct Asked {
    job_id: String,
    spool: PathBuf,
    /// Taken when the answer comes.
    answer: Option<Answer>,
    since: Instant,
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
    /// spec, and hands `answer` the pid and start time of the job's process, which leads
    /// its group, once the server has said them (on the reader thread). Its end is
    /// reported on the events, after the answer. Returns once the request is sent (the
    /// server has its own copies of the files): starts asked one after another are
    /// answered in that order.
    pub(super) fn start_then(
        &self,
        job_id: &str,
        spool: &Path,
        status_fd: i32,
        spec_fd: i32,
        answer: Answer,
    ) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let mut answer = Some(answer);
        // A server that ended is replaced once; a request it never received made nothing.
        for _ in 0..2 {
            if current.as_ref().is_none_or(|c| {
                c.ended.load(Ordering::Acquire) || c.asked.replace.load(Ordering::Acquire)
            }) {
                match self.connect() {
                    Ok(connection) => *current = Some(connection),
                    Err(e) => {
                        let answer = answer.take().expect("not yet given");
                        return answer(Err(format!(
                            "cannot start the shepherds' fork server: {e}"
                        )));
                    }
                }
            }
            let connection = current.as_ref().expect("made above");
            let queue = &connection.asked;
            let mut asked = queue.jobs.lock().unwrap_or_else(|e| e.into_inner());
            let deadline = Instant::now() + ANSWER_WITHIN;
            while asked.len() >= MOST_ASKED && Instant::now() < deadline {
                asked = queue
                    .answered
                    .wait_timeout(asked, deadline - Instant::now())
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            // The reader marks the server ended with the queue held, and answers what is
            // queued then: a start queued later would have no answer.
            if connection.ended.load(Ordering::Acquire) {
                drop(asked);
                *current = None;
                continue;
            }
            // The request is sent with the queue held: the reader cannot take an answer
            // for it before it is queued, nor (the server gone) answer it "ended" before
            // it is known whether the server received it.
            asked.push_back(Asked {
                job_id: job_id.to_string(),
                spool: spool.to_path_buf(),
                answer: answer.take(),
                since: Instant::now(),
            });
            if fork_server::request(connection.socket.as_raw_fd(), status_fd, spec_fd).is_ok() {
                return;
            }
            answer = asked.pop_back().and_then(|unsent| unsent.answer);
            drop(asked);
            *current = None;
        }
        if let Some(answer) = answer {
            answer(Err(format!(
                "the shepherds' fork server ended twice while starting {job_id}"
            )));
        }
    }

    /// Starts a fork server and its reader thread.
    fn connect(&self) -> io::Result<Connection> {
        let ends = fork_server::seqpacket_pair()?;
        // SAFETY: both descriptors were just made and are owned by nothing else.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        // Jobs get the descriptor limit the service was given, not the one it raised.
        let mut arguments = vec![fork_server::ARGUMENT.to_string()];
        arguments.extend(
            super::super::shepherd::files_limit::for_jobs().map(fork_server::job_files_limit),
        );
        let pid = super::spawn_shepherd(
            &self.program,
            &arguments,
            &[(theirs.as_raw_fd(), fork_server::SOCKET_FD)],
        )?;
        drop(theirs);
        let socket = Arc::new(ours);
        let asked = Arc::new(AskedQueue::default());
        let ended = Arc::new(AtomicBool::new(false));
        let reader = Reader {
            socket: socket.clone(),
            server: pid,
            asked: asked.clone(),
            ended: ended.clone(),
            events: self.events.clone(),
        };
        std::thread::Builder::new()
            .name("fork-server".into())
            .spawn(move || reader.run())?;
        Ok(Connection {
            socket,
            asked,
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
    asked: Arc<AskedQueue>,
    ended: Arc<AtomicBool>,
    events: RmNotify,
}

impl Reader {
    fn run(self) {
        // Whatever ends this loop, a panic included, the starts not answered are.
        let unanswered = AnswerTheRestOnDrop {
            asked: self.asked.clone(),
            ended: self.ended.clone(),
        };
        // The jobs this server started and that have not ended: pid to job, spool and
        // start time.
        let mut running: HashMap<i32, (Asked, u64)> = HashMap::new();
        let mut bytes = [0u8; 64];
        let mut killed = false;
        loop {
            // SAFETY: `bytes` is writable for its whole length.
            let n = unsafe {
                libc::recv(
                    self.socket.as_raw_fd(),
                    bytes.as_mut_ptr() as *mut libc::c_void,
                    bytes.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                // Nothing to read (or interrupted): waits, and reads again.
                match io::Error::last_os_error().kind() {
                    // A server that ended with requests unread leaves this error, once,
                    // ahead of the reports it sent: they are read still (a start it
                    // answered runs), up to the close.
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionReset => continue,
                    // Killed: waits for the close.
                    io::ErrorKind::WouldBlock if killed => self.wait_readable(),
                    io::ErrorKind::WouldBlock => {
                        if !self.readable_in_time() {
                            // Stuck (stopped, traced): ended, and with it the handshakes
                            // of the jobs it has not answered for, which so run nothing.
                            // Its socket closes.
                            unsafe { libc::kill(self.server, libc::SIGKILL) };
                            killed = true;
                            // Starts go to a new server from now on; this one's queue is
                            // answered when its socket closes.
                            self.asked.replace.store(true, Ordering::Release);
                        }
                    }
                    _ => break,
                }
                continue;
            }
            if n == 0 {
                break;
            }
            match Report::decode(&bytes[..n as usize]) {
                Some(Report::Started(outcome)) => {
                    let asked = {
                        let mut jobs = self.asked.jobs.lock().unwrap_or_else(|e| e.into_inner());
                        let answered = jobs.pop_front();
                        // The server takes starts one at a time: the next one's wait is
                        // timed from now, not from when it was queued behind this one.
                        if let Some(next) = jobs.front_mut() {
                            next.since = Instant::now();
                        }
                        answered
                    };
                    self.asked.answered.notify_all();
                    let Some(mut asked) = asked else { continue };
                    let answer = asked.answer.take();
                    let outcome = outcome.map_err(|errno| {
                        format!(
                            "cannot start the shepherd of {}: {}",
                            asked.job_id,
                            io::Error::from_raw_os_error(errno)
                        )
                    });
                    if let Ok(job) = outcome {
                        running.insert(job.pid, (asked, job.start_ticks));
                    }
                    if let Some(answer) = answer {
                        answer(outcome);
                    }
                }
                Some(Report::Ended {
                    pid,
                    wait_status,
                    cpu_micros,
                }) => {
                    if let Some((Asked { job_id, spool, .. }, _)) = running.remove(&pid) {
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
        drop(unanswered);
        // The server is this process's child.
        unsafe { libc::waitpid(self.server, std::ptr::null_mut(), 0) };
        // Its jobs live on without it: watched as a restart watches them.
        for (pid, (asked, start_ticks)) in running {
            watch(&self.events, pid, asked, start_ticks);
        }
    }

    /// Waits until the socket has something to read or has closed.
    fn wait_readable(&self) {
        let mut polled = [libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one pollfd, writable.
        unsafe { libc::poll(polled.as_mut_ptr(), 1, -1) };
    }

    /// Waits until the socket has something to read or has closed: false if the oldest
    /// start asked has waited [`ANSWER_WITHIN`] for its answer meanwhile.
    fn readable_in_time(&self) -> bool {
        loop {
            let asked = self.asked.jobs.lock().unwrap_or_else(|e| e.into_inner());
            let oldest = asked.front().map(|a| a.since);
            drop(asked);
            // At most a second, rounded up: a start asked while this waits is timed
            // from its own ask, on the next round.
            let timeout_ms = match oldest {
                None => 1000,
                Some(since) => match (since + ANSWER_WITHIN).checked_duration_since(Instant::now())
                {
                    None => return false,
                    Some(left) => (left.as_millis() as i32 + 1).min(1000),
                },
            };
            let mut polled = [libc::pollfd {
                fd: self.socket.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            // SAFETY: one pollfd, writable.
            if unsafe { libc::poll(polled.as_mut_ptr(), 1, timeout_ms) } != 0 {
                // Readable, closed, or interrupted (the read then says which).
                return true;
            }
        }
    }
}

/// Marks a server's connection ended and answers the starts it did not ("ended"),
/// when the reader stops, however it stops.
struct AnswerTheRestOnDrop {
    asked: Arc<AskedQueue>,
    ended: Arc<AtomicBool>,
}

impl Drop for AnswerTheRestOnDrop {
    fn drop(&mut self) {
        // Marked with the queue held: no start is queued on this server from now on.
        let unanswered = {
            let mut asked = self.asked.jobs.lock().unwrap_or_else(|e| e.into_inner());
            self.ended.store(true, Ordering::Release);
            std::mem::take(&mut *asked)
        };
        self.asked.answered.notify_all();
        for mut asked in unanswered {
            if let Some(answer) = asked.answer.take() {
                answer(Err(format!(
                    "the shepherds' fork server ended while starting {}",
                    asked.job_id
                )));
            }
        }
    }
}

/// Watches the job `asked` (process `pid`, started at `start_ticks`), which no shepherd
/// will report, as a restart watches its jobs.
fn watch(events: &RmNotify, pid: i32, Asked { job_id, spool, .. }: Asked, start_ticks: u64) {
    let record = ProcessRecord {
        pid,
        start_ticks,
        spool: spool.to_string_lossy().into_owned(),
        rm_job_id: None,
    };
    super::watch_adopted(events.clone(), job_id, record);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The service's end and the server's end of a new socket pair.
    fn socket_pair() -> (OwnedFd, OwnedFd) {
        let ends = fork_server::seqpacket_pair().unwrap();
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) }
    }

    /// Sends `bytes` as one message on `socket`.
    fn send(socket: &OwnedFd, bytes: &[u8]) {
        let sent = unsafe { libc::send(socket.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), 0) };
        assert_eq!(sent, bytes.len() as isize);
    }

    /// A reader of the service's end `ours`, for a "server" that is a child process
    /// doing nothing (the reader reaps it at its end).
    fn reader(ours: OwnedFd, asked: &Arc<AskedQueue>, ended: &Arc<AtomicBool>) -> Reader {
        #[allow(clippy::zombie_processes)]
        let server = std::process::Command::new("true").spawn().unwrap();
        Reader {
            socket: Arc::new(ours),
            server: server.id() as i32,
            asked: asked.clone(),
            ended: ended.clone(),
            events: Arc::new(|_| {}),
        }
    }

    /// Queues a start whose outcome (started or not) goes to `answers`, tagged `job`.
    fn ask(asked: &AskedQueue, job: &str, answers: &std::sync::mpsc::Sender<(String, bool)>) {
        let (job, answers) = (job.to_string(), answers.clone());
        asked.jobs.lock().unwrap().push_back(Asked {
            job_id: job.clone(),
            spool: PathBuf::from("/nonexistent"),
            answer: Some(Box::new(move |outcome| {
                let _ = answers.send((job, outcome.is_ok()));
            })),
            since: Instant::now(),
        });
    }

    /// A server that ends with a request unread leaves the service's socket an error
    /// (ECONNRESET) ahead of the answers it sent: the answer it gave is still taken (its
    /// job runs), and only the start it did not answer is answered "ended".
    #[test]
    fn an_answer_sent_before_the_server_ended_is_not_lost() {
        let (ours, server_end) = socket_pair();
        let asked = Arc::new(AskedQueue::default());
        let (answers, answered) = std::sync::mpsc::channel();
        ask(&asked, "first", &answers);
        ask(&asked, "second", &answers);
        // The second request, which the server never reads; its answer to the first (a
        // process gone by now); then its end.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        let started = Report::Started(Ok(StartedJob {
            pid: gone.id() as i32,
            start_ticks: 1,
        }));
        send(&ours, b"L");
        send(&server_end, &started.encode());
        drop(server_end);
        reader(ours, &asked, &Arc::new(AtomicBool::new(false))).run();
        drop(answers);
        let outcomes: Vec<(String, bool)> = answered.iter().collect();
        assert_eq!(
            outcomes,
            [("first".to_string(), true), ("second".to_string(), false)]
        );
    }

    /// A reader that stops by a panic still answers the starts it had not ("ended"),
    /// and marks its server ended, so the next start makes a new one.
    #[test]
    fn a_reader_that_panics_answers_the_starts_it_had_not() {
        let (ours, server_end) = socket_pair();
        let asked = Arc::new(AskedQueue::default());
        asked.jobs.lock().unwrap().push_back(Asked {
            job_id: "first".into(),
            spool: PathBuf::from("/nonexistent"),
            answer: Some(Box::new(|_| panic!("an answer that fails"))),
            since: Instant::now(),
        });
        let (answers, answered) = std::sync::mpsc::channel();
        ask(&asked, "second", &answers);
        drop(answers);
        send(&server_end, &Report::Started(Err(libc::EAGAIN)).encode());
        let ended = Arc::new(AtomicBool::new(false));
        let reader = reader(ours, &asked, &ended);
        assert!(std::thread::spawn(move || reader.run()).join().is_err());
        assert_eq!(
            answered.iter().collect::<Vec<_>>(),
            [("second".to_string(), false)]
        );
        assert!(ended.load(Ordering::Acquire));
        drop(server_end);
    }
}
