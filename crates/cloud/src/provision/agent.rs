//! The host's side of the guest agent: a job's command run inside a guest
//! ([`Provisioner::run_in_guest`](super::Provisioner::run_in_guest)).
//!
//! The default guest image (`scripts/services/guest-image.sh`) starts `drover-agent`, a
//! busybox shell script reading the virtio-serial port `org.drover.agent`. QEMU gives that
//! port a unix socket per process slot, `<run_dir>/<id>/agent-<slot>.sock` (inside the
//! VM's 0700 run directory), so after a live migration the guest's agent, which never
//! stopped, is reached through the new slot's socket.
//!
//! The protocol is length-framed, so that no byte of a command's output can be taken for
//! framing:
//!
//! - host to guest: `DROVER-RUN <nonce> <script_len> <env_len> <stdin_len> <secs>\n`, then
//!   the script, the environment (`export NAME='value'` lines, made here) and the standard
//!   input, raw, of exactly those lengths. `<nonce>` is lowercase hex, fresh per request.
//! - guest to host: `DROVER-DONE <nonce> <exit> <timed_out> <out_len> <out_cut> <err_len>
//!   <err_cut>\n`, then `out_len` bytes of standard output and `err_len` bytes of standard
//!   error, then `DROVER-END <nonce>\n`. Each output is at most [`OUTPUT_LIMIT`] bytes;
//!   `*_cut` is `1` when the command printed more (the rest was dropped in the guest).
//!
//! The agent runs the script as `sh -c` in `/`, in a session of its own with the
//! environment applied; `<secs>` after the start it kills that session (SIGKILL) and
//! answers `timed_out` 1. When the command ends, whatever it left in its session is
//! killed too. An answer whose nonce is not the request's is a late one for an earlier
//! request (whose caller gave up): it is read past and dropped.
//!
//! The host waits the timeout plus [`ANSWER_GRACE`] for the answer, so a dead or missing
//! agent (an image without one) costs that long and no more; every read and write on the
//! socket is bounded by that deadline, and nothing longer than the limits above is read.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{GuestCommand, GuestOutput};

/// The most of standard output, and of standard error, that an answer carries.
pub const OUTPUT_LIMIT: usize = 1 << 20;
/// The longest script.
pub const SCRIPT_LIMIT: usize = 1 << 20;
/// The most of environment (names and values, as sent) a command may carry.
pub const ENV_LIMIT: usize = 256 << 10;
/// The most standard input a command may carry (the guest keeps it in its memory).
pub const STDIN_LIMIT: usize = 8 << 20;
/// How long past the command's timeout the host waits for the agent's answer.
pub const ANSWER_GRACE: Duration = Duration::from_secs(3);
/// The longest header or trailer line.
const LINE_LIMIT: u64 = 256;
/// How many late answers (for earlier requests) are read past before giving up.
const LATE_ANSWERS: usize = 4;

/// Why an exchange with the agent failed (the caller names the VM).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AgentError {
    /// The command cannot be sent as it is.
    Invalid(String),
    /// No answer within the deadline.
    Timeout,
    /// The connection or the answer failed.
    Failed(String),
}

/// What the agent answered for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub nonce: String,
    /// The agent killed the command at its timeout.
    pub timed_out: bool,
    pub output: GuestOutput,
}

/// Whether `name` can be a shell variable name: `[A-Za-z_][A-Za-z0-9_]*`.
fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The environment as a script the guest's shell sources: `export NAME='value'` lines,
/// a `'` in a value written as `'\''` (nothing in single quotes is interpreted).
pub(crate) fn env_script(env: &[(String, String)]) -> Result<Vec<u8>, AgentError> {
    let mut script = Vec::new();
    for (name, value) in env {
        if !valid_name(name) {
            return Err(AgentError::Invalid(format!(
                "the environment name {:?} is not a shell variable name ([A-Za-z_][A-Za-z0-9_]*)",
                name.chars().take(64).collect::<String>()
            )));
        }
        if value.contains('\0') {
            return Err(AgentError::Invalid(format!(
                "the value of {name} holds a NUL byte"
            )));
        }
        script.extend_from_slice(b"export ");
        script.extend_from_slice(name.as_bytes());
        script.extend_from_slice(b"='");
        script.extend_from_slice(value.replace('\'', "'\\''").as_bytes());
        script.extend_from_slice(b"'\n");
        if script.len() > ENV_LIMIT {
            return Err(AgentError::Invalid(format!(
                "the environment is longer than {ENV_LIMIT} bytes"
            )));
        }
    }
    Ok(script)
}

/// The request's bytes: its header line, the script, the environment, the input.
pub(crate) fn encode_request(
    nonce: &str,
    command: &GuestCommand,
    secs: u64,
) -> Result<Vec<u8>, AgentError> {
    if command.script.trim().is_empty() {
        return Err(AgentError::Invalid("the script is empty".into()));
    }
    if command.script.len() > SCRIPT_LIMIT {
        return Err(AgentError::Invalid(format!(
            "the script is longer than {SCRIPT_LIMIT} bytes"
        )));
    }
    if command.script.contains('\0') {
        return Err(AgentError::Invalid("the script holds a NUL byte".into()));
    }
    if command.stdin.len() > STDIN_LIMIT {
        return Err(AgentError::Invalid(format!(
            "the standard input is longer than {STDIN_LIMIT} bytes"
        )));
    }
    let env = env_script(&command.env)?;
    let mut request = format!(
        "DROVER-RUN {nonce} {} {} {} {secs}\n",
        command.script.len(),
        env.len(),
        command.stdin.len()
    )
    .into_bytes();
    request.extend_from_slice(command.script.as_bytes());
    request.extend_from_slice(&env);
    request.extend_from_slice(&command.stdin);
    Ok(request)
}

fn read_error(error: std::io::Error) -> AgentError {
    match error.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => AgentError::Timeout,
        std::io::ErrorKind::UnexpectedEof => {
            AgentError::Failed("the agent's connection closed in the middle of an answer".into())
        }
        _ => AgentError::Failed(format!("reading the agent's answer: {error}")),
    }
}

/// One line (without its `\n`), at most [`LINE_LIMIT`] bytes.
fn read_line(reader: &mut impl BufRead) -> Result<String, AgentError> {
    let mut line = Vec::new();
    let read = reader
        .take(LINE_LIMIT + 1)
        .read_until(b'\n', &mut line)
        .map_err(read_error)?;
    if read == 0 {
        return Err(AgentError::Failed(
            "the agent's connection closed without an answer".into(),
        ));
    }
    if line.last() != Some(&b'\n') {
        return Err(if line.len() as u64 > LINE_LIMIT {
            AgentError::Failed("the agent answered a line too long for a header".into())
        } else {
            AgentError::Failed("the agent's connection closed in the middle of an answer".into())
        });
    }
    line.pop();
    String::from_utf8(line).map_err(|_| AgentError::Failed("the agent's header is not text".into()))
}

fn read_exact(reader: &mut impl BufRead, len: usize) -> Result<Vec<u8>, AgentError> {
    let mut bytes = vec![0; len];
    reader.read_exact(&mut bytes).map_err(read_error)?;
    Ok(bytes)
}

/// Reads one answer: header, both outputs, trailer. Lengths beyond [`OUTPUT_LIMIT`] and
/// anything malformed are refused before more is read.
pub(crate) fn read_answer(reader: &mut impl BufRead) -> Result<Answer, AgentError> {
    let header = read_line(reader)?;
    let garbled = || {
        AgentError::Failed(format!(
            "the agent's answer is garbled: {:?}",
            header.chars().take(80).collect::<String>()
        ))
    };
    let fields: Vec<&str> = header.split(' ').collect();
    let [
        "DROVER-DONE",
        nonce,
        exit,
        timed_out,
        out_len,
        out_cut,
        err_len,
        err_cut,
    ] = fields.as_slice()
    else {
        return Err(garbled());
    };
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(garbled());
    }
    let flag = |text: &str| match text {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(garbled()),
    };
    let length = |text: &str| match text.parse::<usize>() {
        Ok(n) if n <= OUTPUT_LIMIT && text.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(garbled()),
    };
    let exit_code: i32 = match exit.parse() {
        Ok(code) if (0..=255).contains(&code) => code,
        _ => return Err(garbled()),
    };
    let timed_out = flag(timed_out)?;
    let (out_len, out_cut) = (length(out_len)?, flag(out_cut)?);
    let (err_len, err_cut) = (length(err_len)?, flag(err_cut)?);
    let stdout = read_exact(reader, out_len)?;
    let stderr = read_exact(reader, err_len)?;
    let trailer = read_line(reader)?;
    if trailer.strip_prefix("DROVER-END ") != Some(nonce) {
        return Err(AgentError::Failed(format!(
            "the agent's answer does not end as framed: {:?}",
            trailer.chars().take(80).collect::<String>()
        )));
    }
    Ok(Answer {
        nonce: nonce.to_string(),
        timed_out,
        output: GuestOutput {
            exit_code,
            stdout,
            stderr,
            stdout_truncated: out_cut,
            stderr_truncated: err_cut,
        },
    })
}

/// Reads answers until the one for `nonce`; late answers for earlier requests are dropped.
pub(crate) fn answer_for(reader: &mut impl BufRead, nonce: &str) -> Result<Answer, AgentError> {
    for _ in 0..=LATE_ANSWERS {
        let answer = read_answer(reader)?;
        if answer.nonce == nonce {
            return Ok(answer);
        }
    }
    Err(AgentError::Failed(format!(
        "the agent answered {} earlier requests and not this one",
        LATE_ANSWERS + 1
    )))
}

/// A socket whose every read and write waits at most until a deadline.
pub(crate) struct Deadlined {
    pub(crate) stream: UnixStream,
    pub(crate) deadline: Instant,
}

impl Deadlined {
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.stream.set_write_timeout(Some(left))?;
        self.stream.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// A fresh nonce: 16 hex digits from the kernel's random source.
fn nonce() -> Result<String, AgentError> {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| AgentError::Failed(format!("reading /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The whole seconds the agent gives the command: the timeout rounded up, at least 1.
pub(crate) fn guest_secs(timeout: Duration) -> u64 {
    let secs = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    secs.max(1)
}

/// Runs `command` through the agent socket `socket`; the command may run `timeout`, the
/// whole exchange at most `timeout` + [`ANSWER_GRACE`].
pub(crate) fn run(
    socket: &Path,
    command: &GuestCommand,
    timeout: Duration,
) -> Result<Answer, AgentError> {
    let stream = connect(socket)?;
    run_over(stream, command, timeout)
}

/// A connection to the agent socket `socket`.
pub(crate) fn connect(socket: &Path) -> Result<UnixStream, AgentError> {
    UnixStream::connect(socket).map_err(|e| {
        AgentError::Failed(if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "it has no agent socket {} (started before guests had one? power it off and on)",
                socket.display()
            )
        } else {
            format!("connecting to {}: {e}", socket.display())
        })
    })
}

/// Runs `command` over a connection to an agent (see [`run`]).
pub(crate) fn run_over(
    stream: UnixStream,
    command: &GuestCommand,
    timeout: Duration,
) -> Result<Answer, AgentError> {
    let started = Instant::now();
    let nonce = nonce()?;
    let secs = guest_secs(timeout);
    let request = encode_request(&nonce, command, secs)?;
    let mut channel = Deadlined {
        stream,
        deadline: started + Duration::from_secs(secs) + ANSWER_GRACE,
    };
    channel.write_all(&request).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => AgentError::Timeout,
        _ => AgentError::Failed(format!("sending the command: {e}")),
    })?;
    answer_for(&mut BufReader::new(channel), &nonce)
}

/// What a job's process inside a guest ended with, run over a connection the service
/// handed it (`drover guest-run`): the outputs, the exit code, and whether the guest
/// killed the command at its timeout. `Err` says why there is no answer.
pub fn run_job(
    stream: UnixStream,
    command: &GuestCommand,
    timeout: Duration,
) -> Result<(GuestOutput, bool), String> {
    match run_over(stream, command, timeout) {
        Ok(answer) => Ok((answer.output, answer.timed_out)),
        Err(AgentError::Invalid(why)) => Err(format!("the command cannot be sent: {why}")),
        Err(AgentError::Timeout) => Err("the guest agent did not answer in time".into()),
        Err(AgentError::Failed(why)) => Err(format!("the guest agent failed: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(nonce: &str, code: i32, out: &[u8], err: &[u8]) -> Vec<u8> {
        let mut bytes = format!(
            "DROVER-DONE {nonce} {code} 0 {} 0 {} 0\n",
            out.len(),
            err.len()
        )
        .into_bytes();
        bytes.extend_from_slice(out);
        bytes.extend_from_slice(err);
        bytes.extend_from_slice(format!("DROVER-END {nonce}\n").as_bytes());
        bytes
    }

    fn command(script: &str) -> GuestCommand {
        GuestCommand {
            script: script.into(),
            env: vec![],
            stdin: vec![],
        }
    }

    #[test]
    fn an_answer_is_read_by_its_lengths_whatever_the_output_holds() {
        let out: Vec<u8> = b"\0\xff\nDROVER-END 0a\nDROVER-DONE 0a 0 0 0 0 0 0\n"
            .iter()
            .copied()
            .chain(0..=255)
            .collect();
        let err = b"line\r\nno newline at the end";
        let bytes = answer("0a", 3, &out, err);
        let got = read_answer(&mut &bytes[..]).unwrap();
        assert_eq!(got.nonce, "0a");
        assert_eq!(got.output.exit_code, 3);
        assert!(!got.timed_out);
        assert_eq!(got.output.stdout, out);
        assert_eq!(got.output.stderr, err);
        assert!(!got.output.stdout_truncated && !got.output.stderr_truncated);
    }

    #[test]
    fn flags_say_what_was_cut_and_killed() {
        let bytes = b"DROVER-DONE 1f 137 1 2 1 0 0\nabDROVER-END 1f\n";
        let got = read_answer(&mut &bytes[..]).unwrap();
        assert!(got.timed_out);
        assert_eq!(got.output.exit_code, 137);
        assert!(got.output.stdout_truncated);
        assert!(!got.output.stderr_truncated);
        assert_eq!(got.output.stdout, b"ab");
    }

    #[test]
    fn late_answers_for_earlier_requests_are_dropped() {
        let mut bytes = answer("01", 137, b"old", b"");
        bytes.extend(answer("02", 0, b"new", b"e"));
        let got = answer_for(&mut &bytes[..], "02").unwrap();
        assert_eq!(got.output.stdout, b"new");
        assert_eq!(got.output.stderr, b"e");

        let mut many = Vec::new();
        for _ in 0..=LATE_ANSWERS {
            many.extend(answer("01", 0, b"", b""));
        }
        many.extend(answer("02", 0, b"", b""));
        assert!(matches!(
            answer_for(&mut &many[..], "02"),
            Err(AgentError::Failed(_))
        ));
    }

    #[test]
    fn malformed_answers_are_refused() {
        let too_long = format!("DROVER-DONE 0a 0 0 {} 0 0 0\n", OUTPUT_LIMIT + 1);
        let long_line = format!("DROVER-DONE {}\n", "a".repeat(300));
        let cases: Vec<&[u8]> = vec![
            b"",
            b"hello\n",
            b"DROVER-DONE 0a 0 0 0 0 0\n",
            b"DROVER-DONE 0a 0 0 0 0 0 0 0\n",
            b"DROVER-DONE xyz 0 0 0 0 0 0\nDROVER-END xyz\n",
            b"DROVER-DONE 0a 256 0 0 0 0 0\nDROVER-END 0a\n",
            b"DROVER-DONE 0a -1 0 0 0 0 0\nDROVER-END 0a\n",
            b"DROVER-DONE 0a 0 2 0 0 0 0\nDROVER-END 0a\n",
            b"DROVER-DONE 0a 0 0 +1 0 0 0\nxDROVER-END 0a\n",
            b"DROVER-DONE 0a 0 0 5 0 0 0\nabc",
            b"DROVER-DONE 0a 0 0 1 0 0 0\nabDROVER-END 0a\n",
            b"DROVER-DONE 0a 0 0 0 0 0 0\nDROVER-END 0b\n",
            b"DROVER-DONE 0a 0 0 0 0 0 0\nDROVER-END 0a",
            b"DROVER-DONE 0a 0 0 0 0 0 0",
            too_long.as_bytes(),
            long_line.as_bytes(),
        ];
        for case in cases {
            let got = read_answer(&mut &case[..]);
            assert!(
                matches!(got, Err(AgentError::Failed(_))),
                "{:?}: {got:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn a_request_is_its_header_and_its_parts_raw() {
        let request = encode_request(
            "00ff",
            &GuestCommand {
                script: "cat".into(),
                env: vec![("A".into(), "1".into())],
                stdin: b"\0\n".to_vec(),
            },
            7,
        )
        .unwrap();
        assert_eq!(
            request,
            b"DROVER-RUN 00ff 3 13 2 7\ncatexport A='1'\n\0\n".to_vec()
        );
        for bad in [
            command(""),
            command("  \n"),
            command("echo \0"),
            command(&"x".repeat(SCRIPT_LIMIT + 1)),
            GuestCommand {
                stdin: vec![0; STDIN_LIMIT + 1],
                ..command("cat")
            },
            GuestCommand {
                env: vec![("A=B".into(), "x".into())],
                ..command("env")
            },
            GuestCommand {
                env: vec![("1A".into(), "x".into())],
                ..command("env")
            },
            GuestCommand {
                env: vec![("".into(), "x".into())],
                ..command("env")
            },
            GuestCommand {
                env: vec![("A".into(), "x\0y".into())],
                ..command("env")
            },
            GuestCommand {
                env: vec![("A".into(), "x".repeat(ENV_LIMIT))],
                ..command("env")
            },
        ] {
            assert!(
                matches!(encode_request("01", &bad, 1), Err(AgentError::Invalid(_))),
                "{:?}",
                bad.env
            );
        }
    }

    /// The environment script, sourced by a real shell, gives back every value as it was.
    #[test]
    fn environment_values_reach_the_shell_unchanged() {
        let values = [
            "plain",
            "",
            "it's",
            "'",
            "''\\'",
            "$(touch /tmp/drover-agent-env-injection) `id` $HOME ${X:-y}",
            "line\nbreak\n",
            "tab\there; exit 9 & |",
            "é ünïcode",
        ];
        let env: Vec<(String, String)> = values
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("V_{i}"), v.to_string()))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("env");
        std::fs::write(&file, env_script(&env).unwrap()).unwrap();
        for (name, value) in &env {
            let output = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(". \"$1\"; printf %s \"${name}\""))
                .arg("sh")
                .arg(&file)
                .output()
                .unwrap();
            assert!(output.status.success(), "{output:?}");
            assert_eq!(String::from_utf8(output.stdout).unwrap(), *value);
        }
        assert!(!Path::new("/tmp/drover-agent-env-injection").exists());
    }

    #[test]
    fn the_guest_gets_whole_seconds() {
        assert_eq!(guest_secs(Duration::from_secs(3)), 3);
        assert_eq!(guest_secs(Duration::from_millis(2500)), 3);
        assert_eq!(guest_secs(Duration::from_millis(10)), 1);
        assert_eq!(guest_secs(Duration::ZERO), 1);
    }

    /// A socket that never answers: the exchange ends at the deadline, not later.
    #[test]
    fn a_silent_agent_costs_the_timeout_and_the_grace_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            // Read the request, answer nothing until the client leaves.
            let mut sink = Vec::new();
            let _ = conn.read_to_end(&mut sink);
            sink
        });
        let started = Instant::now();
        let got = run(&path, &command("echo hi"), Duration::from_millis(100));
        let took = started.elapsed();
        assert_eq!(got, Err(AgentError::Timeout));
        assert!(
            took >= Duration::from_secs(1) + ANSWER_GRACE - Duration::from_millis(50)
                && took < Duration::from_secs(1) + ANSWER_GRACE + Duration::from_secs(2),
            "{took:?}"
        );
        let request = server.join().unwrap();
        assert!(request.starts_with(b"DROVER-RUN "), "{request:?}");
        assert!(request.ends_with(b" 0 0 1\necho hi"), "{request:?}");

        // No socket at all: a clear error at once.
        let missing = run(
            &dir.path().join("none.sock"),
            &command("true"),
            Duration::from_secs(1),
        );
        assert!(
            matches!(&missing, Err(AgentError::Failed(why)) if why.contains("no agent socket")),
            "{missing:?}"
        );
    }
}
