//! The threads and turns of scans. A list that scans runs on a thread of its own, beside
//! the service ([`beside_the_service`]), at the lowest CPU priority but for each hold of
//! the job book's lock ([`at_normal_priority`]), once it has one of a bounded number of
//! turns ([`scan_turns`]).

use super::ListError;

/// Lists whose filter or sort the job book's indexes cannot answer scan the book on
/// blocking threads, at most this many at once (half the processors, at least one): the
/// rest of the service keeps processors to answer with, and a scan waits for its turn
/// only as long as its budget lets it. Narrow scans (`Scan::is_narrow`: a few ms over
/// row fields, on one thread) take their turns apart, so that they never queue behind a
/// costly one; they too are bounded (twice the processors: a thread each).
pub(super) fn scan_turns(narrow: bool) -> &'static tokio::sync::Semaphore {
    static COSTLY: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    static NARROW: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let processors = || std::thread::available_parallelism().map_or(2, |n| n.get());
    if narrow {
        NARROW.get_or_init(|| tokio::sync::Semaphore::new(2 * processors()))
    } else {
        COSTLY.get_or_init(|| tokio::sync::Semaphore::new((processors() / 2).max(1)))
    }
}

/// Lowers the calling thread to the idle scheduling class (`SCHED_IDLE`): it runs only
/// when no thread of the normal class wants its core, and a waking request handler, the
/// engine or the journal takes the core from it at once. A long scan takes a thread per
/// core: at nice 10, 4 clients looping on a one-second list at a million jobs held
/// submissions' p99 at 20.1 ms; at nice 19, 17.2-23.6 ms (`scripts/bench-slow-lists`).
/// Where the class is refused, nice 19.
pub(super) fn lower_this_thread() {
    // SAFETY: sched_setscheduler and setpriority on this thread's id change only this
    // thread's scheduling; a failure leaves it as it was, which is harmless.
    unsafe {
        let parameters = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &parameters) != 0 {
            libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
        }
    }
    LOWERED.set(true);
}

thread_local! {
    /// Whether [`lower_this_thread`] lowered this thread.
    static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `work` at the normal priority on a lowered thread (elsewhere, as it is). A scan
/// reads the job book under its lock. Were the idle-class thread preempted while it held
/// the lock, it would not run again until a core fell idle, and the engine, waiting to
/// write, would wait with it, and every submission behind the engine: a priority
/// inversion (the engine waited up to 18 ms for a hold meant to last 200 us). A hold is
/// short, so it costs the others little to let it finish.
pub(super) fn at_normal_priority<R>(work: impl FnOnce() -> R) -> R {
    if !LOWERED.get() {
        return work();
    }
    let parameters = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in lower_this_thread: this thread's own scheduling only.
    let raised = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &parameters) } == 0;
    let answer = work();
    if raised {
        // SAFETY: as above.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &parameters) };
    }
    answer
}

/// Runs a scan on a thread of its own at the lowest CPU priority ([`lower_this_thread`];
/// each hold of the job book's lock excepted, [`at_normal_priority`]), so that on a busy
/// machine the engine, the journal and other requests' handlers get the cores first.
/// The thread ends with the scan: no pooled thread keeps the lower priority.
pub(super) async fn beside_the_service<R: Send + 'static>(
    scan: impl FnOnce() -> R + Send + 'static,
) -> Result<R, ListError> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("drover-list-scan".into())
        .spawn(move || {
            lower_this_thread();
            let _ = answer.send(scan());
        })
        .map_err(|e| ListError::Failed(format!("cannot start a list scan: {e}")))?;
    answered
        .await
        .map_err(|_| ListError::Failed("a list scan ended without an answer".into()))
}

#[cfg(test)]
mod tests {
    fn policy() -> libc::c_int {
        // SAFETY: reads this thread's own scheduling policy.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn a_scan_thread_holds_the_book_at_the_normal_priority_and_is_lowered_again() {
        std::thread::spawn(|| {
            // A thread that was never lowered is left as it is.
            super::at_normal_priority(|| assert_eq!(policy(), libc::SCHED_OTHER));
            super::lower_this_thread();
            if policy() != libc::SCHED_IDLE {
                return; // the idle class was refused here (nice 19 instead)
            }
            // Leaving the idle class needs privilege (the service runs as root).
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            super::at_normal_priority(|| {
                if root {
                    assert_eq!(policy(), libc::SCHED_OTHER, "a hold of the book's lock");
                }
            });
            assert_eq!(policy(), libc::SCHED_IDLE, "after the hold, idle again");
        })
        .join()
        .expect("the scan thread's checks");
    }
}
