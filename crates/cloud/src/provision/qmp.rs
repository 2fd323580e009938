//! A small client of QEMU's machine protocol (QMP) over its unix socket: the greeting,
//! `qmp_capabilities`, then one command at a time, each answered by one JSON line
//! (`return` or `error`); asynchronous events in between are skipped.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use drover_shepherd::fork_server::send_with_fds;

use super::agent::Deadlined;
use serde_json::{Value, json};

pub struct Qmp {
    /// Every command's answer (and the events before it) must come within `timeout`
    /// of the command: a peer that trickles bytes holds no one past it.
    reader: BufReader<Deadlined>,
    writer: UnixStream,
    timeout: Duration,
}

impl Qmp {
    /// Connects and leaves the capabilities negotiation; every read waits at most
    /// `timeout`.
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Self, String> {
        let stream =
            UnixStream::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
        Self::over(stream, timeout)
    }

    /// [`Qmp::connect`] over a connection made otherwise (a relay to another machine).
    pub fn over(stream: UnixStream, timeout: Duration) -> Result<Self, String> {
        stream
            .set_write_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        let deadline = Instant::now() + timeout;
        let mut qmp = Self {
            reader: BufReader::new(Deadlined { stream, deadline }),
            writer,
            timeout,
        };
        let greeting = qmp.read_message()?;
        if greeting.get("QMP").is_none() {
            return Err(format!("not a QMP greeting: {greeting}"));
        }
        qmp.execute("qmp_capabilities", None)?;
        Ok(qmp)
    }

    /// Runs a command; its `return` value, or the error QEMU describes.
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value, String> {
        self.execute_passing(command, arguments, None)
    }

    /// Runs a command with a descriptor attached to it (`getfd` names it for QEMU,
    /// which keeps its own copy).
    pub fn execute_with_fd(
        &mut self,
        command: &str,
        arguments: Value,
        fd: BorrowedFd<'_>,
    ) -> Result<Value, String> {
        self.execute_passing(command, Some(arguments), Some(fd))
    }

    fn execute_passing(
        &mut self,
        command: &str,
        arguments: Option<Value>,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Value, String> {
        self.reader.get_mut().deadline = Instant::now() + self.timeout;
        let mut message = json!({ "execute": command });
        if let Some(arguments) = arguments {
            message["arguments"] = arguments;
        }
        let mut line = message.to_string();
        line.push('\n');
        let sent = match fd {
            Some(fd) => send_with_fds(self.writer.as_raw_fd(), line.as_bytes(), &[fd.as_raw_fd()]),
            None => Ok(0),
        };
        sent.and_then(|sent| self.writer.write_all(&line.as_bytes()[sent..]))
            .map_err(|e| format!("{command}: {e}"))?;
        loop {
            let reply = self.read_message().map_err(|e| format!("{command}: {e}"))?;
            if reply.get("event").is_some() {
                continue;
            }
            if let Some(value) = reply.get("return") {
                return Ok(value.clone());
            }
            if let Some(error) = reply.get("error") {
                let desc = error.get("desc").and_then(Value::as_str).unwrap_or("");
                return Err(format!("{command}: {desc}"));
            }
            return Err(format!("{command}: unexpected reply {reply}"));
        }
    }

    fn read_message(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        // A line is a few hundred bytes; bound it anyway.
        let read = (&mut self.reader)
            .take(1 << 20)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("the connection closed".into());
        }
        serde_json::from_str(&line).map_err(|e| format!("unreadable reply: {e}"))
    }
}
