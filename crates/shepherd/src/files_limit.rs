//! The service's limit of open files, raised, and the one its jobs get.
//!
//! Every connection the service holds is a descriptor; at the usual soft limit of
//! 1,024, a thousand idle connections would starve its accept loop. So the service
//! raises its soft limit to the hard one at start, and remembers the limit it was
//! given: that is what jobs get (a program using `select` cannot handle descriptors
//! past 1,024, and a job's limits are the site's to set, not the service's).

use std::sync::OnceLock;

static GIVEN: OnceLock<u64> = OnceLock::new();

/// Raises this process's soft limit of open files to its hard limit; answers the
/// limits (given, now). Called once, at start, before any thread spawns children.
pub fn raise() -> Option<(u64, u64)> {
    // SAFETY: plain system calls on this process's own limits.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        let given = limit.rlim_cur;
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            ..limit
        };
        if given < limit.rlim_max && libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            return None;
        }
        let _ = GIVEN.set(given);
        Some((given, limit.rlim_max))
    }
}

/// The soft limit the service was given, when it raised its own.
pub fn for_jobs() -> Option<u64> {
    GIVEN.get().copied()
}
