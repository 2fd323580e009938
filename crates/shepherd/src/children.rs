//! What the service's other parts ask of a child they started in a process group of its
//! own (a site's command, a plugin's program): whether it has exited, without reaping it
//! (its pid stays its own until it is waited for), and stopping its whole group.

/// Whether the child `pid` has exited (not reaped: it can still be waited for). A child
/// that cannot be asked about (already reaped) counts as exited, so that a loop waiting
/// for it ends.
pub fn has_exited(pid: u32) -> bool {
    // SAFETY: a zeroed siginfo_t is a valid value for waitid to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: `info` is a valid, writable siginfo_t; WNOWAIT leaves the child waitable.
    let rc = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) };
    // SAFETY: waitid filled `info` (si_pid stays 0 while the child has not exited).
    rc != 0 || unsafe { info.si_pid() } != 0
}

/// Kills the process group the child `pid` leads (it was started with a group of its
/// own, and is not reaped yet, so the group names no one else's processes).
pub fn kill_group(pid: u32) {
    if let Ok(group) = libc::pid_t::try_from(pid) {
        // SAFETY: kill has no memory preconditions; see above for whom it reaches.
        unsafe { libc::killpg(group, libc::SIGKILL) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_seen_exited_without_being_reaped_and_its_group_killed() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap();
        assert!(!has_exited(child.id()));
        kill_group(child.id());
        while !has_exited(child.id()) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Not reaped by the look: its status is still there to take.
        assert!(child.wait().is_ok());
    }
}
