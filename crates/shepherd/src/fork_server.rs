//! The fork server: one long-lived process of the service's user, started once, that
//! keeps a pool of shepherds, each running one job at a time and then waiting for the
//! next. A job so costs neither the start of a program (its exec and dynamic loading,
//! about 0.9 ms of CPU on a small machine) nor the fork and exit of a shepherd of its
//! own (about a fifth of the CPU of a short job).
//!
//! It talks to the service on fd 3, one end of a `SOCK_SEQPACKET` socket pair whose
//! other end only the service holds:
//! - a request is one byte with two descriptors attached (the job's status file and its
//!   spec). The server hands them to an idle shepherd over that shepherd's link (forking
//!   a new one when none is idle). The shepherd reads the spec and clones the job's
//!   process, which first leads a session of its own, writes `pid <n>` in the status
//!   file and says its pid on the link (`crate::Handshake`). The server answers
//!   [`Report::Started`] with that pid and its start time, and only once that answer is
//!   sent tells the job's process to go on: a job whose pid the service never got runs
//!   nothing. The signals the service sends the job's group reach the job alone;
//! - the shepherd waits for its job, writes how it ended in the status file, closes the
//!   file, says so on the socket all shepherds share with the server, which passes it
//!   on ([`Report::Ended`]: wait status and CPU time), and only then reaps the job. So
//!   once a job's pid is gone, its end is in its status file, and the server has its end
//!   before it starts a later job given the same pid. The shepherd is then idle (or
//!   ends, when the job left it a child of its own);
//! - a shepherd that dies with its job running reports the job lost
//!   ([`Report::Lost`]): the service watches it as after a restart;
//! - a job's process that blocks before its exec (on an output path that is a FIFO)
//!   holds up its own shepherd only: the next jobs go to others;
//! - the server ends when the service's end closes (the service ended): idle shepherds
//!   end with it, busy ones see their jobs to the end, write their exit statuses as
//!   always, and then end, so that a restarted service finds every end.
//!
//! A shepherd's memory holds what is left of the specs of the jobs it ran. A job's
//! process shares that memory until its exec only where the kernel keeps its user out
//! (`fs.suid_dumpable` 0); elsewhere it gets a copy, and so each such job has a shepherd
//! that has run nothing before.

use std::io;

/// The fork server's end of the socket.
pub const SOCKET_FD: i32 = 3;
/// The argument after `job-shepherd` that makes the program the fork server.
pub const ARGUMENT: &str = "fork-server";
/// The fork server's optional next argument: the soft limit of open files its jobs get
/// (else the one it was given).
const JOB_FILES_LIMIT: &str = "--job-files-limit=";

/// The argument that gives jobs `limit` open files.
pub fn job_files_limit(limit: u64) -> String {
    format!("{JOB_FILES_LIMIT}{limit}")
}

/// The limit [`job_files_limit`] put in this process's arguments.
fn job_files_limit_given() -> Option<u64> {
    std::env::args()
        .nth(3)?
        .strip_prefix(JOB_FILES_LIMIT)?
        .parse()
        .ok()
}

/// A job's process the fork server started: its pid and its start time (clock ticks
/// since boot, field 22 of `/proc/<pid>/stat`, read before its shepherd could reap it; 0
/// if unknown), which tell it from a later process given the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartedJob {
    pub pid: i32,
    pub start_ticks: u64,
}

/// A message from the fork server to the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The answer to the latest request: the job's process, or the `errno` of the
    /// failure to start it.
    Started(Result<StartedJob, i32>),
    /// A job ended: its pid, its wait status, and the CPU time it used, in microseconds.
    Ended {
        pid: i32,
        wait_status: i32,
        cpu_micros: u64,
    },
    /// The shepherd of the job `pid` ended (was killed) before it: nothing will report
    /// the job's end, which only watching the process tells (and its exit status is
    /// lost).
    Lost { pid: i32 },
}

/// The size of every report on the wire.
pub const REPORT_SIZE: usize = 17;

impl Report {
    /// A kind byte (`S` started, `F` failed, `E` ended, `L` lost), then the pid or
    /// `errno`, the wait status and the CPU time (a start: its start time),
    /// little-endian.
    pub fn encode(&self) -> [u8; REPORT_SIZE] {
        let (kind, pid, status, micros) = match *self {
            Report::Started(Ok(job)) => (b'S', job.pid, 0, job.start_ticks),
            Report::Started(Err(errno)) => (b'F', errno, 0, 0),
            Report::Ended {
                pid,
                wait_status,
                cpu_micros,
            } => (b'E', pid, wait_status, cpu_micros),
            Report::Lost { pid } => (b'L', pid, 0, 0),
        };
        let mut bytes = [0; REPORT_SIZE];
        bytes[0] = kind;
        bytes[1..5].copy_from_slice(&pid.to_le_bytes());
        bytes[5..9].copy_from_slice(&status.to_le_bytes());
        bytes[9..17].copy_from_slice(&micros.to_le_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Option<Report> {
        if bytes.len() != REPORT_SIZE {
            return None;
        }
        let int = |at: usize| i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let micros = u64::from_le_bytes(bytes[9..17].try_into().unwrap());
        match bytes[0] {
            b'S' => Some(Report::Started(Ok(StartedJob {
                pid: int(1),
                start_ticks: micros,
            }))),
            b'F' => Some(Report::Started(Err(int(1)))),
            b'E' => Some(Report::Ended {
                pid: int(1),
                wait_status: int(5),
                cpu_micros: micros,
            }),
            b'L' => Some(Report::Lost { pid: int(1) }),
            _ => None,
        }
    }
}

/// The two ends of a new `SOCK_SEQPACKET` socket pair (close-on-exec): messages keep
/// their bounds, and descriptors go with them.
pub fn seqpacket_pair() -> io::Result<[i32; 2]> {
    let mut ends = [0; 2];
    // SAFETY: `ends` has room for the two descriptors.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            ends.as_mut_ptr(),
        )
    };
    match made {
        0 => Ok(ends),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Asks the fork server on `socket` for the start of one job: its status file and spec
/// go with the request (the server has its own copies once this returns).
pub fn request(socket: i32, status_fd: i32, spec_fd: i32) -> io::Result<()> {
    send_with_fds(socket, b"L", &[status_fd, spec_fd]).map(drop)
}

/// The most descriptors [`send_with_fds`] sends in one message.
pub const MAX_FDS_SENT: usize = 8;

/// Sends `payload` with the descriptors `fds` attached (at most [`MAX_FDS_SENT`]) in one
/// message; answers how many bytes of `payload` went (on a stream socket the rest goes
/// without descriptors). The other end has its own copies of the descriptors after.
pub fn send_with_fds(socket: i32, payload: &[u8], fds: &[i32]) -> io::Result<usize> {
    if fds.len() > MAX_FDS_SENT || payload.is_empty() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    // Room for one control message of MAX_FDS_SENT descriptors, aligned as cmsghdr wants.
    let mut control = [0u64; 8];
    let bytes = std::mem::size_of_val(fds) as u32;
    let space = unsafe { libc::CMSG_SPACE(bytes) } as usize;
    assert!(space <= std::mem::size_of_val(&control));
    // SAFETY: the message header points at buffers that outlive the call; the control
    // message is written inside `control`, whose size `space` fits.
    unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        message.msg_controllen = space as _;
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(bytes) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(header) as *mut i32, fds.len());
        loop {
            let sent = libc::sendmsg(socket, &message, libc::MSG_NOSIGNAL);
            if sent >= 0 {
                return Ok(sent as usize);
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// The next request on `socket`: its two descriptors, moved to 10 and above
/// (close-on-exec); `None` when the other end has closed, `Err` with its first byte when
/// the message is not a request of two descriptors.
fn receive(socket: i32) -> Option<Result<[i32; 2], u8>> {
    let mut payload = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: as in `send_with_fds`; descriptors are read from the control message only
    // when the kernel wrote one of the expected kind.
    unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        message.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = loop {
            let n = libc::recvmsg(socket, &mut message, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break n;
            }
        };
        if n <= 0 {
            return None;
        }
        let mut received = Vec::new();
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(header) as *const i32;
                for i in 0..bytes / std::mem::size_of::<i32>() {
                    received.push(std::ptr::read_unaligned(data.add(i)));
                }
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
        let moved: Vec<i32> = received.iter().map(|&fd| high(fd)).collect();
        match moved[..] {
            [status, spec] if status >= 0 && spec >= 0 && payload[0] == b'L' => {
                Some(Ok([status, spec]))
            }
            _ => {
                for fd in moved.into_iter().filter(|fd| *fd >= 0) {
                    libc::close(fd);
                }
                Some(Err(payload[0]))
            }
        }
    }
}

/// Sends `bytes` as one message on `socket`; whether it was sent whole (a peer gone is
/// seen where it is read from).
fn send(socket: i32, bytes: &[u8]) -> bool {
    loop {
        let sent = unsafe {
            libc::send(
                socket,
                bytes.as_ptr() as *const libc::c_void,
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if sent >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return sent == bytes.len() as isize;
        }
    }
}

/// Receives one message of at most `N` bytes on `socket`: its length, 0 when the peer
/// has closed or on an error.
fn receive_bytes<const N: usize>(socket: i32, into: &mut [u8; N]) -> usize {
    loop {
        let n = unsafe { libc::recv(socket, into.as_mut_ptr() as *mut libc::c_void, N, 0) };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return n.max(0) as usize;
        }
    }
}

/// How long the server waits for a shepherd's answer to a request, in milliseconds:
/// below the service's own wait for the server's answer.
const ANSWER_WITHIN_MS: i32 = 5_000;

/// Whether `socket` has something to read (or has closed) within `ms` milliseconds.
fn readable_within(socket: i32, ms: i32) -> bool {
    let mut polled = [libc::pollfd {
        fd: socket,
        events: libc::POLLIN,
        revents: 0,
    }];
    loop {
        match unsafe { libc::poll(polled.as_mut_ptr(), 1, ms) } {
            n if n > 0 => return true,
            0 => return false,
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return false,
        }
    }
}

/// Sends `report` to the service; whether it was sent whole.
fn report(report: Report) -> bool {
    send(SOCKET_FD, &report.encode())
}

/// In a shepherd, its link to the server (and, until its handshake, its job's process's).
const LINK_FD: i32 = 3;
/// In a shepherd, the socket on which it tells the server its job ended.
const ENDS_FD: i32 = 4;
/// The most idle shepherds kept: more end (the pool grows back with the jobs).
const IDLE_LIMIT: usize = 64;

/// What a shepherd says on the shared socket when its job ended: `E`, its own pid, the
/// job's pid and wait status, and the job's CPU time in microseconds, little-endian,
/// then whether the shepherd ends now rather than waiting for another job.
struct JobEnded {
    shepherd: i32,
    job: i32,
    wait_status: i32,
    cpu_micros: u64,
    retiring: bool,
}

impl JobEnded {
    const SIZE: usize = 22;

    fn encode(&self) -> [u8; Self::SIZE] {
        let mut bytes = [0; Self::SIZE];
        bytes[0] = b'E';
        bytes[1..5].copy_from_slice(&self.shepherd.to_le_bytes());
        bytes[5..9].copy_from_slice(&self.job.to_le_bytes());
        bytes[9..13].copy_from_slice(&self.wait_status.to_le_bytes());
        bytes[13..21].copy_from_slice(&self.cpu_micros.to_le_bytes());
        bytes[21] = self.retiring as u8;
        bytes
    }

    fn decode(bytes: &[u8]) -> Option<JobEnded> {
        if bytes.len() != Self::SIZE || bytes[0] != b'E' {
            return None;
        }
        let int = |at: usize| i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        Some(JobEnded {
            shepherd: int(1),
            job: int(5),
            wait_status: int(9),
            cpu_micros: u64::from_le_bytes(bytes[13..21].try_into().unwrap()),
            retiring: bytes[21] != 0,
        })
    }
}

/// A shepherd of the pool: its pid and the server's end of its link.
struct Member {
    pid: i32,
    link: i32,
}

/// The server's shepherds.
struct Pool {
    idle: Vec<Member>,
    /// Busy shepherds by pid, with the pid of their job.
    busy: std::collections::HashMap<i32, (Member, i32)>,
    /// The socket on which shepherds say their jobs ended: the server reads one end and
    /// gives each shepherd the other.
    ends: [i32; 2],
    /// The server's SIGCHLD signalfd.
    children: i32,
    /// Whether the latest start found that jobs get fresh shepherds only (see
    /// [`memory_may_be_copied`]): then no shepherd is kept idle.
    fresh_only: bool,
    /// The limit of open files the server was started with, which its shepherds (and so
    /// the jobs) keep: the server raises its own.
    files_limit: Option<libc::rlimit>,
}

impl Pool {
    /// Starts the job whose status file and spec are `fds` in a shepherd: its pid, once
    /// its process is waiting for the go, and the shepherd that holds it.
    fn start(&mut self, fds: [i32; 2]) -> Result<(Member, i32), i32> {
        // A job whose process would get a copy of its shepherd's memory gets a shepherd
        // that has run nothing before (nothing of another job's spec is in the copy).
        self.fresh_only = memory_may_be_copied();
        loop {
            let reused = if self.fresh_only {
                None
            } else {
                self.idle.pop()
            };
            let member = match reused {
                Some(member) => member,
                None => self.fork_shepherd()?,
            };
            if send_with_fds(member.link, b"L", &fds).is_err() {
                // It ended while idle (its reaping is on the signalfd).
                unsafe { libc::close(member.link) };
                continue;
            }
            let mut answer = [0u8; 8];
            // The job's process says its pid at once (it cannot block before); a
            // shepherd that says nothing in this time is stuck, and is ended.
            let n = match readable_within(member.link, ANSWER_WITHIN_MS) {
                true => receive_bytes(member.link, &mut answer),
                false => {
                    unsafe { libc::kill(member.pid, libc::SIGKILL) };
                    0
                }
            };
            let number = i32::from_le_bytes(answer[1..5].try_into().unwrap());
            return match (n, answer[0]) {
                (5, b'S') => Ok((member, number)),
                (5, b'F') => {
                    self.idle.push(member);
                    Err(number)
                }
                _ => {
                    unsafe { libc::close(member.link) };
                    Err(libc::ECHILD)
                }
            };
        }
    }

    /// Forks a new shepherd: it runs [`shepherd`] on its end of a new link.
    fn fork_shepherd(&mut self) -> Result<Member, i32> {
        let errno = || {
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        };
        let ends = seqpacket_pair().map_err(|_| errno())?;
        let (ours, theirs) = (high(ends[0]), high(ends[1]));
        if ours < 0 || theirs < 0 {
            unsafe {
                libc::close(ours);
                libc::close(theirs);
            }
            return Err(libc::EMFILE);
        }
        // SAFETY: this process has one thread, so the child may allocate.
        let pid = unsafe { libc::fork() };
        if pid != 0 {
            unsafe { libc::close(theirs) };
            if pid < 0 {
                let failed = errno();
                unsafe { libc::close(ours) };
                return Err(failed);
            }
            return Ok(Member { pid, link: ours });
        }
        // The shepherd keeps its link and the ends socket (as fds 3 and 4: over the
        // service's socket, which it must not hold) and nothing else of the server's:
        // not the signalfd, not the other shepherds' links.
        unsafe {
            if libc::dup2(theirs, LINK_FD) < 0 || libc::dup2(self.ends[1], ENDS_FD) < 0 {
                libc::_exit(125);
            }
            crate::close_from(ENDS_FD as u32 + 1);
            if let Some(limit) = &self.files_limit {
                libc::setrlimit(libc::RLIMIT_NOFILE, limit);
            }
            libc::_exit(shepherd())
        }
    }

    /// A shepherd said its job ended: passed on to the service, and the shepherd is idle
    /// (unless it ends, too many are, or jobs get fresh shepherds only).
    fn ended(&mut self, ended: JobEnded) {
        if let Some((member, _)) = self.busy.remove(&ended.shepherd) {
            if !ended.retiring && self.idle.len() < IDLE_LIMIT && !self.fresh_only {
                self.idle.push(member);
            } else {
                // Its link closed, it ends (and is reaped on the signalfd).
                unsafe { libc::close(member.link) };
            }
        }
        report(Report::Ended {
            pid: ended.job,
            wait_status: ended.wait_status,
            cpu_micros: ended.cpu_micros,
        });
    }

    /// Takes every end the shepherds have said so far.
    fn take_ends(&mut self) {
        let mut said = [0u8; JobEnded::SIZE];
        loop {
            // SAFETY: `said` is writable for its whole length.
            let n = unsafe {
                libc::recv(
                    self.ends[0],
                    said.as_mut_ptr() as *mut libc::c_void,
                    said.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                return;
            }
            if let Some(ended) = JobEnded::decode(&said[..n as usize]) {
                self.ended(ended);
            }
        }
    }

    /// Reaps every shepherd that has ended (after taking the ends they said). One that
    /// ended with its job's end unsaid (it was killed) reports the job lost.
    fn reap(&mut self) {
        self.take_ends();
        let mut drained = [0u8; 128 * 4];
        while unsafe {
            libc::read(
                self.children,
                drained.as_mut_ptr() as *mut libc::c_void,
                drained.len(),
            )
        } > 0
        {}
        loop {
            let mut status: libc::c_int = 0;
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
            if pid <= 0 {
                return;
            }
            if let Some((member, job)) = self.busy.remove(&pid) {
                unsafe { libc::close(member.link) };
                report(Report::Lost { pid: job });
            } else if let Some(at) = self.idle.iter().position(|m| m.pid == pid) {
                unsafe { libc::close(self.idle.swap_remove(at).link) };
            }
        }
    }
}

/// Whether a job's process may be given a copy of its shepherd's memory rather than
/// share it (see `crate::may_share_memory`): the service runs as root and
/// `fs.suid_dumpable` is not 0.
fn memory_may_be_copied() -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    root && crate::read_proc_line("/proc/sys/fs/suid_dumpable")
        .is_none_or(|value| value.trim() != "0")
}

/// The fork server's `main`. One thread: SIGCHLD is blocked and read from a signalfd, so
/// that requests, ends and deaths are taken in one `poll` loop and a fork never races a
/// handler.
pub fn serve() -> i32 {
    // A descriptor per shepherd: as many as jobs run at once, past the usual soft limit.
    // Jobs get the limit the service was given (its argument), else this one's.
    let files_limit = unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        (libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0).then(|| {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                ..limit
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &raised);
            match job_files_limit_given() {
                Some(given) => libc::rlimit {
                    rlim_cur: given.min(limit.rlim_max),
                    ..limit
                },
                None => limit,
            }
        })
    };
    // SAFETY: plain system calls on this process's own signal state and descriptors.
    let children = unsafe {
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
        let fd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return 125;
        }
        fd
    };
    let Ok(ends) = seqpacket_pair() else {
        return 125;
    };
    let mut pool = Pool {
        idle: Vec::new(),
        busy: std::collections::HashMap::new(),
        ends: [high(ends[0]), high(ends[1])],
        children,
        fresh_only: false,
        files_limit,
    };
    loop {
        let mut polled = [SOCKET_FD, pool.ends[0], children].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        if unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) } < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return 125;
        }
        // Ends before deaths: a shepherd that ended after saying its job ended is
        // reaped as one whose job's end was passed on.
        if polled[1].revents != 0 {
            pool.take_ends();
        }
        if polled[2].revents != 0 {
            pool.reap();
        }
        if polled[0].revents != 0 {
            // The service matches answers to its starts by their order: an answer it
            // did not get would give the next start this one's answer, so the server
            // ends instead (the service answers its starts "ended").
            match receive(SOCKET_FD) {
                None => return 0,
                Some(Err(_)) => {
                    if !report(Report::Started(Err(libc::EINVAL))) {
                        return 1;
                    }
                }
                Some(Ok(fds)) => {
                    let started = pool.start(fds);
                    unsafe {
                        libc::close(fds[0]);
                        libc::close(fds[1]);
                    }
                    match started {
                        Err(errno) => {
                            if !report(Report::Started(Err(errno))) {
                                return 1;
                            }
                        }
                        Ok((member, job)) => {
                            // An earlier job that had this pid: its end (or loss) is
                            // reported first (its shepherd said it before freeing the
                            // pid, or died before it).
                            pool.reap();
                            // The job's process is not reaped before it has its go: its
                            // /proc entry is there.
                            let start_ticks = start_ticks(job).unwrap_or(0);
                            let answered = report(Report::Started(Ok(StartedJob {
                                pid: job,
                                start_ticks,
                            })));
                            let go = if answered { b"g" } else { b"n" };
                            if !send(member.link, go) {
                                // It would wait for its go for ever, as root.
                                unsafe { libc::kill(job, libc::SIGKILL) };
                            }
                            pool.busy.insert(member.pid, (member, job));
                            if !answered {
                                return 1;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`):
/// with the pid, what tells a process from a later one given the same pid.
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = crate::read_proc_line(&format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// A descriptor moved to 10 or above (close-on-exec), so that moves to 3 and 4 cannot
/// overwrite it.
fn high(fd: i32) -> i32 {
    let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
    unsafe { libc::close(fd) };
    moved
}

/// A shepherd of the pool: runs the jobs it is handed on its link one after another,
/// until the link closes (the server ended). Its exit code.
fn shepherd() -> i32 {
    // Every signal at its default (what the server and its runtime set, and what the
    // service had ignored), but those `settle_signals` ignores: a job's process then
    // has only those to set back (`job_process`).
    crate::default_signals(crate::every_signal());
    crate::settle_signals();
    // SIGCHLD, blocked in the server for its signalfd, at its default again.
    unsafe {
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_UNBLOCK, &chld, std::ptr::null_mut());
    }
    let mut served = false;
    // SAFETY: getpid has no preconditions; this process's pid does not change.
    let me = unsafe { libc::getpid() };
    loop {
        let fds = match receive(LINK_FD) {
            None => return 0,
            // A request whose descriptors did not come (no room for them).
            Some(Err(b'L')) => {
                send(LINK_FD, &failure(libc::EMFILE));
                continue;
            }
            // The go for a job's process that ended before it read it (killed as it
            // started): nothing to answer.
            Some(Err(_)) => continue,
            Some(Ok(fds)) => fds,
        };
        let ran = run_one(fds, &mut served, me);
        // The spec, read; the status file was closed by `run_one` once a job ran.
        unsafe { libc::close(fds[1]) };
        if let Err(errno) = ran {
            unsafe { libc::close(fds[0]) };
            send(LINK_FD, &failure(errno));
        }
    }
}

/// What a shepherd says on its link when it cannot start the job it was handed.
fn failure(errno: i32) -> [u8; 5] {
    let mut said = [b'F', 0, 0, 0, 0];
    said[1..].copy_from_slice(&errno.to_le_bytes());
    said
}

/// Runs the job whose status file and spec are `fds` to its end and closes the status
/// file; `me` is this shepherd's pid. `served`: the shepherd has read a spec before
/// (its memory holds what is left of it); set once this one is read. `Err` with an
/// `errno` when the job could not be started (its process never existed; the status
/// file is left open).
///
/// The end is written and the status file closed, then said to the server, and only
/// then is the job reaped: once its pid is gone, its end is recorded, and the server
/// has its end before a later job can be given the same pid.
fn run_one([status, spec]: [i32; 2], served: &mut bool, me: i32) -> Result<(), i32> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let mut spec_bytes = Vec::new();
    // SAFETY: `spec` is this process's own copy, read once; the caller closes it.
    let mut spec_file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(spec) });
    let read = spec_file.read_to_end(&mut spec_bytes);
    let served_before = std::mem::replace(served, true);
    read.map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let spec = crate::ProcessSpec::decode(&spec_bytes).ok_or(libc::EINVAL)?;
    // A job in a guest has a shepherd of its own, started with the guest's descriptors.
    if spec.guest {
        return Err(libc::EINVAL);
    }
    let share_memory = crate::shares_memory(&spec);
    if !share_memory && served_before {
        return Err(libc::EPERM);
    }
    let command = crate::Command::of(&spec).ok_or(libc::EINVAL)?;
    let mut report = [0; 2];
    // SAFETY: `report` has room for the two descriptors.
    if unsafe { libc::pipe2(report.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    let [report_read, report_write] = report;
    let handshake = crate::Handshake {
        link: LINK_FD,
        status,
        close: [status, report_read, ENDS_FD],
    };
    let job = crate::JobProcess::of(&spec, &command, report_write, Some(handshake));
    let child = match &job {
        Some(job) => crate::spawn_the_job(job, share_memory),
        None => -1,
    };
    let errno = io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO);
    // SAFETY: the write end is this process's own; the child has its copy.
    unsafe { libc::close(report_write) };
    if child < 0 {
        unsafe { libc::close(report_read) };
        return Err(if job.is_none() { libc::EINVAL } else { errno });
    }
    let ended = wait_without_reaping(child);
    let reason = crate::read_report(report_read);
    let (wait_status, cpu_micros) = ended.unwrap_or((0, 0));
    let code = match ended {
        Some(_) => crate::code_of(wait_status).unwrap_or(125),
        None => 125,
    };
    crate::write_end(status, code, &reason);
    unsafe { libc::close(status) };
    // A process the job made a child of this shepherd (`clone` with CLONE_PARENT) would
    // stay its child: a shepherd with other children ends after this job (they go to
    // init), instead of waiting idle with them.
    let retiring = has_other_children(me, child);
    let said = JobEnded {
        shepherd: me,
        job: child,
        wait_status,
        cpu_micros,
        retiring,
    };
    send(ENDS_FD, &said.encode());
    loop {
        let rc = unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        if rc == child || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    if retiring {
        unsafe { libc::_exit(0) };
    }
    Ok(())
}

/// Waits until `child` has ended, leaving it a zombie: its wait status and the CPU time
/// it and the children it waited for used, in microseconds (`waitid` with WNOWAIT and
/// the kernel's rusage argument, which the C library's wrapper lacks). `None` if the
/// wait failed.
fn wait_without_reaping(child: i32) -> Option<(i32, u64)> {
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both out-arguments are writable and outlive the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_waitid,
                libc::P_PID as libc::c_long,
                child as libc::c_long,
                &mut info as *mut libc::siginfo_t,
                (libc::WEXITED | libc::WNOWAIT) as libc::c_long,
                &mut usage as *mut libc::rusage,
            )
        };
        if rc == 0 {
            break;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
        }
    }
    // SAFETY: a siginfo that waitid filled for a child's end.
    let (code, status) = unsafe { (info.si_code, info.si_status()) };
    let wait_status = match code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_KILLED => status & 0x7f,
        libc::CLD_DUMPED => (status & 0x7f) | 0x80,
        _ => return None,
    };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Some((wait_status, micros(usage.ru_utime) + micros(usage.ru_stime)))
}

/// Whether this (single-threaded) process, `me`, has a child other than `job`, or
/// cannot tell.
fn has_other_children(me: i32, job: i32) -> bool {
    match crate::read_proc_line(&format!("/proc/{me}/task/{me}/children")) {
        Some(children) => children.split_whitespace().any(|c| c != job.to_string()),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_read_back_as_written() {
        for report in [
            Report::Started(Ok(StartedJob {
                pid: 4242,
                start_ticks: 1 << 40,
            })),
            Report::Started(Err(libc::EAGAIN)),
            Report::Ended {
                pid: 7,
                wait_status: 0x0100,
                cpu_micros: u64::MAX - 1,
            },
            Report::Lost { pid: 99 },
        ] {
            assert_eq!(Report::decode(&report.encode()), Some(report));
        }
        assert_eq!(Report::decode(b"short"), None);
        let ended = JobEnded {
            shepherd: 12,
            job: 34,
            wait_status: 0x0900,
            cpu_micros: u64::MAX,
            retiring: true,
        };
        let read = JobEnded::decode(&ended.encode()).unwrap();
        assert_eq!(
            (read.shepherd, read.job, read.wait_status),
            (12, 34, 0x0900)
        );
        assert_eq!((read.cpu_micros, read.retiring), (u64::MAX, true));
        assert!(JobEnded::decode(&ended.encode()[..21]).is_none());
        assert_eq!(Report::decode(&[b'X'; REPORT_SIZE]), None);
    }
}
