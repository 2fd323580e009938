//! What submissions check of the file system (is the working directory a directory, may
//! the user read the command file), remembered for a moment.
//!
//! Every submission looks at two or three paths, and a burst of submissions names the
//! same few; on this project's 2-core virtual machine the three `stat`s took 1.5-4 µs of
//! the engine thread's 13-17 µs per submission. A fact is remembered for [`REMEMBERED_FOR`]:
//! accepting a submission on it is accepting it as a check that long ago would have.
//! Nothing is refused on a remembered fact: [`FileFacts::check`] looks again before it
//! answers no. Where no is no refusal, only the other of two good choices (a job's
//! default directory is the user's home, else `/tmp`), [`FileFacts::get`] lets a
//! remembered no stand: users with no home (`nobody`'s is `/nonexistent`) are
//! the common case, and looking again cost a failed `stat` per submission.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::sysuser::SystemUser;

/// How long a looked-up fact stands.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(1);

/// Most paths remembered; past that, everything is forgotten at once (bursts reuse few).
const MOST_PATHS: usize = 4096;

/// What one `stat` (following links) told of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub is_dir: bool,
    pub is_file: bool,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

/// Facts by path, each with when it was looked up (`None`: nothing there, or no access).
#[derive(Debug, Default)]
pub struct FileFacts {
    remembered: HashMap<PathBuf, (Instant, Option<Facts>), foldhash::fast::FixedState>,
    /// Where paths resolve to (symbolic links followed), when they do.
    resolved: HashMap<PathBuf, (Instant, Option<PathBuf>), foldhash::fast::FixedState>,
}

impl FileFacts {
    /// The facts of `path`, as remembered if they were looked up less than
    /// [`REMEMBERED_FOR`] ago, else as they are now: a "no" may be that old. Only for
    /// choosing between two good answers, never for a refusal (that is [`FileFacts::check`]).
    pub fn get(&mut self, path: &Path) -> Option<Facts> {
        match self.remembered(path) {
            Some(facts) => facts,
            None => self.fresh(path),
        }
    }

    /// What is remembered of `path`, if it was looked up less than [`REMEMBERED_FOR`] ago.
    fn remembered(&self, path: &Path) -> Option<Option<Facts>> {
        match self.remembered.get(path) {
            Some((when, facts)) if when.elapsed() < REMEMBERED_FOR => Some(*facts),
            _ => None,
        }
    }

    /// The facts of `path` as they are now (and remembered).
    fn fresh(&mut self, path: &Path) -> Option<Facts> {
        let facts = std::fs::metadata(path).ok().map(|meta| Facts {
            is_dir: meta.is_dir(),
            is_file: meta.is_file(),
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode(),
        });
        if self.remembered.len() >= MOST_PATHS {
            self.remembered.clear();
        }
        self.remembered
            .insert(path.to_path_buf(), (Instant::now(), facts));
        facts
    }

    /// Whether `user` may reach `path`: every directory above it exists and lets them
    /// in, as written and, where symbolic links lead elsewhere, where they lead. The
    /// service looks as root; without this, its answers about a path would tell a user
    /// what lies in directories they cannot enter. A path that does not resolve is left
    /// to the caller's own check of it, which refuses it the same way.
    pub fn reachable(&mut self, path: &Path, user: &SystemUser) -> bool {
        let remembered = match self.resolved.get(path) {
            Some((when, real)) if when.elapsed() < REMEMBERED_FOR => Some(real.clone()),
            _ => None,
        };
        if let Some(real) = remembered
            && self.ancestors_let_in(path, real.as_deref(), user)
        {
            return true;
        }
        // Nothing refused on a remembered fact: resolved again.
        let real = std::fs::canonicalize(path).ok();
        if self.resolved.len() >= MOST_PATHS {
            self.resolved.clear();
        }
        self.resolved
            .insert(path.to_path_buf(), (Instant::now(), real.clone()));
        self.ancestors_let_in(path, real.as_deref(), user)
    }

    /// Whether every directory above `path`, and above `real` (where it resolves to), lets
    /// `user` in.
    fn ancestors_let_in(&mut self, path: &Path, real: Option<&Path>, user: &SystemUser) -> bool {
        let mut enters =
            |dir: &Path| self.check(dir, |facts| facts.is_some_and(|f| user.may_enter(&f)));
        path.ancestors().skip(1).all(&mut enters)
            && real.is_none_or(|real| real == path || real.ancestors().skip(1).all(&mut enters))
    }

    /// Whether `accept` holds for the facts of `path`: first as remembered, and when
    /// not, as they are now (so a refusal is never stale; one `stat` at most).
    pub fn check(&mut self, path: &Path, accept: impl Fn(Option<Facts>) -> bool) -> bool {
        self.remembered(path).is_some_and(&accept) || accept(self.fresh(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_remembered_and_refusals_look_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("job.sh");
        let mut facts = FileFacts::default();
        let exists = |f: Option<Facts>| f.is_some_and(|f| f.is_file);

        // Missing, then created: `check` looks again rather than refuse on what it saw.
        assert!(facts.get(&file).is_none());
        std::fs::write(&file, "true").unwrap();
        assert!(facts.get(&file).is_none(), "remembered as missing");
        assert!(facts.check(&file, exists));

        // Removed: still remembered as there for a moment, but not when looked at afresh.
        std::fs::remove_file(&file).unwrap();
        assert!(facts.get(&file).is_some_and(|f| f.is_file && !f.is_dir));
        assert!(facts.fresh(&file).is_none());
        assert!(!facts.check(&file, exists));

        let there = facts.get(dir.path()).unwrap();
        assert!(there.is_dir && !there.is_file);
    }

    #[test]
    fn facts_expire() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("job.sh");
        let mut facts = FileFacts::default();
        assert!(facts.get(&file).is_none());
        std::fs::write(&file, "true").unwrap();
        std::thread::sleep(REMEMBERED_FOR + Duration::from_millis(50));
        assert!(facts.get(&file).is_some());
    }
}
