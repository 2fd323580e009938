//! The fork server: one long-lived shepherd process that the service starts once and
//! that forks the shepherd of each job, instead of the service starting the shepherd's
//! program anew for every job. Starting a program costs its exec and dynamic loading,
//! about 0.9 ms of CPU on a small machine; a fork of this small, single-threaded process
//! costs a tenth of that. The forked shepherd then runs [`crate::run`] exactly as a
//! started one does: same descriptors, same session of its own, same signals.
//!
//! It talks to the service on fd 3, one end of a `SOCK_SEQPACKET` socket pair whose
//! other end only the service holds:
//! - a request is one byte with two descriptors attached (the job's status file and its
//!   plan); the server forks the shepherd, waits until it leads its own session (so that
//!   a signal the service sends its group at once reaches it), and answers
//!   [`Report::Started`] with its pid and start time; only once that answer is sent does
//!   the shepherd go on to start the job (a shepherd whose pid the service never got
//!   starts nothing);
//! - the server is the shepherds' parent: it reaps each one and tells the service how it
//!   ended ([`Report::Ended`]: wait status and CPU time, its job's included);
//! - it ends when the service's end closes (the service ended): the shepherds it forked
//!   go on, write their job's exit status in the status file as always, and are reaped
//!   by init, so that a restarted service finds every end.

use std::io;

use crate::{PLAN_FD, STATUS_FD};

/// The fork server's end of the socket.
pub const SOCKET_FD: i32 = 3;
/// The argument after `job-shepherd` that makes the program the fork server.
pub const ARGUMENT: &str = "fork-server";

/// A shepherd the fork server made: its pid and its start time (clock ticks since boot,
/// field 22 of `/proc/<pid>/stat`, read before the server could reap it; 0 if unknown),
/// which tell it from a later process given the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shepherd {
    pub pid: i32,
    pub start_ticks: u64,
}

/// A message from the fork server to the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The answer to the latest request: the shepherd, or the `errno` of the failure to
    /// make it.
    Started(Result<Shepherd, i32>),
    /// A shepherd ended: its pid, its wait status, and the CPU time it and its job used,
    /// in microseconds.
    Ended {
        pid: i32,
        wait_status: i32,
        cpu_micros: u64,
    },
}

/// The size of every report on the wire.
pub const REPORT_SIZE: usize = 17;

impl Report {
    /// A kind byte (`S` started, `F` failed, `E` ended), then the pid or `errno`, the
    /// wait status and the CPU time (a start: its start time), little-endian.
    pub fn encode(&self) -> [u8; REPORT_SIZE] {
        let (kind, pid, status, micros) = match *self {
            Report::Started(Ok(shepherd)) => (b'S', shepherd.pid, 0, shepherd.start_ticks),
            Report::Started(Err(errno)) => (b'F', errno, 0, 0),
            Report::Ended {
                pid,
                wait_status,
                cpu_micros,
            } => (b'E', pid, wait_status, cpu_micros),
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
            b'S' => Some(Report::Started(Ok(Shepherd {
                pid: int(1),
                start_ticks: micros,
            }))),
            b'F' => Some(Report::Started(Err(int(1)))),
            b'E' => Some(Report::Ended {
                pid: int(1),
                wait_status: int(5),
                cpu_micros: micros,
            }),
            _ => None,
        }
    }
}

/// Asks the fork server on `socket` for the shepherd of one job: its status file and
/// plan go with the request (the server has its own copies once this returns).
pub fn request(socket: i32, status_fd: i32, plan_fd: i32) -> io::Result<()> {
    let fds = [status_fd, plan_fd];
    let payload = [b'L'];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    // Room for one control message of two descriptors, aligned as cmsghdr wants.
    let mut control = [0u64; 8];
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(&fds) as u32) } as usize;
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
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(&fds) as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(header) as *mut i32, 2);
        loop {
            if libc::sendmsg(socket, &message, libc::MSG_NOSIGNAL) >= 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// The next request on the socket: its two descriptors, moved to 10 and above
/// (close-on-exec); `None` when the service's end has closed or the request is not one.
fn receive() -> Option<Result<[i32; 2], ()>> {
    let mut payload = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: as in `request`; descriptors are read from the control message only when
    // the kernel wrote one of the expected kind.
    unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        message.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = loop {
            let n = libc::recvmsg(SOCKET_FD, &mut message, libc::MSG_CMSG_CLOEXEC);
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
        let moved: Vec<i32> = received
            .iter()
            .map(|&fd| {
                let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10);
                libc::close(fd);
                high
            })
            .collect();
        match moved[..] {
            [status, plan] if status >= 0 && plan >= 0 && payload[0] == b'L' => {
                Some(Ok([status, plan]))
            }
            _ => {
                for fd in moved.into_iter().filter(|fd| *fd >= 0) {
                    libc::close(fd);
                }
                Some(Err(()))
            }
        }
    }
}

/// Sends `report`; whether it was sent whole (a service gone is seen on the next poll).
fn report(report: Report) -> bool {
    let bytes = report.encode();
    let sent = unsafe {
        libc::send(
            SOCKET_FD,
            bytes.as_ptr() as *const libc::c_void,
            bytes.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    sent == bytes.len() as isize
}

/// The fork server's `main`. One thread: SIGCHLD is blocked and read from a signalfd, so
/// that requests and ends are taken in one `poll` loop and a fork never races a handler.
pub fn serve() -> i32 {
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
    loop {
        let mut polled = [
            libc::pollfd {
                fd: SOCKET_FD,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: children,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if unsafe { libc::poll(polled.as_mut_ptr(), 2, -1) } < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return 125;
        }
        if polled[1].revents != 0 {
            reap(children);
        }
        if polled[0].revents != 0 {
            match receive() {
                None => return 0,
                Some(Err(())) => {
                    report(Report::Started(Err(libc::EINVAL)));
                }
                Some(Ok(fds)) => {
                    let forked = fork_shepherd(fds, children);
                    unsafe {
                        libc::close(fds[0]);
                        libc::close(fds[1]);
                    }
                    match forked {
                        Err(errno) => {
                            report(Report::Started(Err(errno)));
                        }
                        Ok((pid, handshake)) => answer_start(pid, handshake),
                    }
                }
            }
        }
    }
}

/// Reaps every shepherd that has ended and reports it.
fn reap(children: i32) {
    let mut drained = [0u8; 128 * 4];
    while unsafe {
        libc::read(
            children,
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
        let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        report(Report::Ended {
            pid,
            wait_status: status,
            cpu_micros: micros(usage.ru_utime) + micros(usage.ru_stime),
        });
    }
}

/// Waits until the shepherd `pid` leads its own session (it writes a byte on the
/// handshake), answers the service, and only then lets it go on. A shepherd that ended
/// first is answered as a failure; one whose answer could not be sent (the service is
/// gone) gets no go and starts nothing.
fn answer_start(pid: i32, handshake: i32) {
    let mut byte = [0u8; 1];
    let ready = loop {
        let n = unsafe { libc::read(handshake, byte.as_mut_ptr() as *mut libc::c_void, 1) };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break n == 1;
        }
    };
    if !ready {
        report(Report::Started(Err(libc::ECHILD)));
    } else {
        // The shepherd is not reaped before this answer is sent: its /proc entry is there.
        let start_ticks = start_ticks(pid).unwrap_or(0);
        if report(Report::Started(Ok(Shepherd { pid, start_ticks }))) {
            unsafe { libc::write(handshake, b"g".as_ptr() as *const libc::c_void, 1) };
        }
    }
    unsafe { libc::close(handshake) };
}

/// The start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`):
/// with the pid, what tells a process from a later one given the same pid.
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// A descriptor moved to 10 or above (close-on-exec), so that the child's moves to 3 and
/// 4 cannot overwrite it.
fn high(fd: i32) -> i32 {
    let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
    unsafe { libc::close(fd) };
    moved
}

/// Forks the shepherd of the job whose status file and plan are `fds`: its pid and this
/// process's end of the handshake (see [`answer_start`]).
fn fork_shepherd(fds: [i32; 2], children: i32) -> Result<(i32, i32), i32> {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    let mut ends = [0; 2];
    // SAFETY: `ends` has room for the two descriptors.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            ends.as_mut_ptr(),
        )
    } != 0
    {
        return Err(errno());
    }
    let (ours, theirs) = (high(ends[0]), high(ends[1]));
    if ours < 0 || theirs < 0 {
        unsafe {
            libc::close(ours);
            libc::close(theirs);
        }
        return Err(libc::EMFILE);
    }
    // SAFETY: this process has one thread, so the child may allocate; it only rearranges
    // descriptors and signals, then runs the shepherd and exits.
    let pid = unsafe { libc::fork() };
    if pid != 0 {
        unsafe { libc::close(theirs) };
        if pid < 0 {
            let failed = errno();
            unsafe { libc::close(ours) };
            return Err(failed);
        }
        return Ok((pid, ours));
    }
    unsafe {
        libc::close(ours);
        // The signalfd first: it may be fd 4. The status file and the plan become fds 3
        // and 4 (over the socket, which the shepherd must not hold); their copies above
        // 10 close with `run`'s sweep.
        libc::close(children);
        if libc::dup2(fds[0], STATUS_FD) < 0 || libc::dup2(fds[1], PLAN_FD) < 0 {
            libc::_exit(125);
        }
        // Its own session and its signals settled first (SIGCHLD, blocked for the
        // server's signalfd, is unblocked only then, and the signals passed on to the job
        // stay blocked until it exists), then the handshake.
        if crate::prepare().is_err() {
            libc::_exit(125);
        }
        let mut passed_on: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut passed_on);
        for signal in crate::PASSED_ON {
            libc::sigaddset(&mut passed_on, signal);
        }
        libc::sigprocmask(libc::SIG_SETMASK, &passed_on, std::ptr::null_mut());
        let mut go = [0u8; 1];
        if libc::write(theirs, b"r".as_ptr() as *const libc::c_void, 1) != 1 {
            libc::_exit(125);
        }
        let n = loop {
            let n = libc::read(theirs, go.as_mut_ptr() as *mut libc::c_void, 1);
            if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break n;
            }
        };
        if n != 1 || go[0] != b'g' {
            libc::_exit(125);
        }
        libc::close(theirs);
    }
    std::process::exit(crate::run())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_read_back_as_written() {
        for report in [
            Report::Started(Ok(Shepherd {
                pid: 4242,
                start_ticks: 1 << 40,
            })),
            Report::Started(Err(libc::EAGAIN)),
            Report::Ended {
                pid: 7,
                wait_status: 0x0100,
                cpu_micros: u64::MAX - 1,
            },
        ] {
            assert_eq!(Report::decode(&report.encode()), Some(report));
        }
        assert_eq!(Report::decode(b"short"), None);
        assert_eq!(Report::decode(&[b'X'; REPORT_SIZE]), None);
    }
}
