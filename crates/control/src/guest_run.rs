//! `drover guest-run <command> [arguments...]`: the process of a job that runs in a VM
//! (`vmUsagePolicy` CREATEVM or REQUIREVM). It runs as the job's user, like any job's
//! process, with the job's output files as its standard output and error and its input
//! file as its standard input, all opened by the job's user. What it adds is fd 5, a
//! connection to the guest's agent that the service opened (`rm::shepherd`): over it,
//! it sends the command file's text (read here, as the user), the arguments, the job's
//! environment and its input, and writes what the guest answers to its own outputs,
//! ending with the guest's exit status.
//!
//! The guest keeps the first MiB of each output (the agent's limit; a note on standard
//! error says when more was cut) and kills the command at `DROVER_GUEST_TIMEOUT`
//! seconds (the job's wall time). Exit status 124 means the guest killed it then; 125
//! that there was no answer (the agent or the connection failed, said on standard
//! error).

use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use drover_cloud::provision::GuestCommand;
use drover_cloud::provision::agent::{self, STDIN_LIMIT};
use drover_sched::rm::shepherd::GUEST_AGENT_FD;

/// Variables of the service's own that do not go to the guest.
const NOT_SENT: &[&str] = &["DROVER_GUEST_TIMEOUT", "PWD", "SHLVL", "_", "OLDPWD"];

/// The subcommand's `main`: `arguments` are the command file and its arguments.
pub fn run(arguments: &[String]) -> i32 {
    match exchange(arguments) {
        Ok(code) => code,
        Err(why) => {
            eprintln!("drover guest-run: {why}");
            125
        }
    }
}

fn exchange(arguments: &[String]) -> Result<i32, String> {
    let (command_file, args) = arguments
        .split_first()
        .ok_or("usage: drover guest-run <command file> [arguments...]")?;
    let mut script = std::fs::read_to_string(command_file)
        .map_err(|e| format!("cannot read the command file {command_file}: {e}"))?;
    if !args.is_empty() {
        // The guest runs the script as `sh -c`: the arguments become its `$1`...
        let quoted: Vec<String> = args.iter().map(|a| quote(a)).collect();
        script = format!("set -- {}\n{script}", quoted.join(" "));
    }
    let mut stdin = Vec::new();
    std::io::stdin()
        .take(STDIN_LIMIT as u64 + 1)
        .read_to_end(&mut stdin)
        .map_err(|e| format!("cannot read the job's input: {e}"))?;
    if stdin.len() > STDIN_LIMIT {
        return Err(format!(
            "the job's input is larger than {STDIN_LIMIT} bytes, the most a guest takes"
        ));
    }
    let timeout = std::env::var("DROVER_GUEST_TIMEOUT")
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(7 * 86_400);
    let env: Vec<(String, String)> = std::env::vars()
        .filter(|(name, _)| !NOT_SENT.contains(&name.as_str()) && shell_name(name))
        .collect();
    let command = GuestCommand { script, env, stdin };
    // SAFETY: the shepherd gave this process fd 5, a connected socket, for this use only.
    let stream = unsafe { UnixStream::from_raw_fd(GUEST_AGENT_FD) };
    let (output, timed_out) =
        agent::run_job(stream, &command, Duration::from_secs(timeout.max(1)))?;
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let _ = out.write_all(&output.stdout);
    let _ = err.write_all(&output.stderr);
    if output.stdout_truncated || output.stderr_truncated {
        let _ = writeln!(
            err,
            "drover guest-run: the guest kept the first {} bytes of each output; the rest was cut",
            agent::OUTPUT_LIMIT
        );
    }
    let _ = out.flush();
    if timed_out {
        let _ = writeln!(
            err,
            "drover guest-run: the guest stopped the command at {timeout} s"
        );
        return Ok(124);
    }
    Ok(output.exit_code)
}

/// `value` in single quotes, for `sh`.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

fn shell_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_for_the_guest_shell() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert!(shell_name("DROVER_JOB_ID") && !shell_name("1A") && !shell_name("A-B"));
    }
}
