//! Job dependencies: version 2 `dependencies: [{type, name}]`.
//!
//! A job with dependencies waits (state `Blocked`, block `Dependency`, still in the
//! queue) until all of them are met; one that can no longer be met blocks it for good
//! (block `DependencyFailed`, out of the queue) with the reason. Kinds, case-insensitive,
//! with the names templates use:
//! - `afterstart` (`after`, `JOBSTART`): the named job has started;
//! - `afterok` (`JOBSUCCESSFULCOMPLETE`): it completed with exit code 0;
//! - `afternotok` (`JOBFAILCOMPLETE`): it ended any other way (failed, cancelled);
//! - `afterany` (`JOBCOMPLETE`): it ended, whichever way;
//! - `set`: the variable `name` is set on the waiting job itself (by a modify), so that
//!   a workflow manager can release it.

use crate::job::{Job, JobState};

/// Block kinds of dependencies.
pub const WAITING: &str = "Dependency";
pub const FAILED: &str = "DependencyFailed";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DependencyKind {
    AfterStart,
    AfterOk,
    AfterNotOk,
    AfterAny,
    Set,
}

/// What the dependencies of a job say now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Waiting(String),
    Never(String),
}

impl DependencyKind {
    pub const ACCEPTED: &'static str = "afterstart, afterok, afternotok, afterany, set";

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.to_ascii_lowercase().as_str() {
            "after" | "afterstart" | "jobstart" => DependencyKind::AfterStart,
            "afterok" | "jobsuccessfulcomplete" => DependencyKind::AfterOk,
            "afternotok" | "jobfailcomplete" => DependencyKind::AfterNotOk,
            "afterany" | "jobcomplete" => DependencyKind::AfterAny,
            "set" => DependencyKind::Set,
            _ => return None,
        })
    }

    /// Whether `name` must be an existing job.
    pub fn names_a_job(self) -> bool {
        self != DependencyKind::Set
    }
}

/// Whether `dependent`'s dependency of `kind` on `name` (the job `dependency`, when it
/// names one) is met.
pub fn judge(
    kind: DependencyKind,
    name: &str,
    dependency: Option<&Job>,
    dependent: &Job,
) -> Verdict {
    if kind == DependencyKind::Set {
        return if dependent.spec.variables.contains_key(name) {
            Verdict::Met
        } else {
            Verdict::Waiting(format!("waits for the variable {name} to be set"))
        };
    }
    let Some(dependency) = dependency else {
        return Verdict::Never(format!("depends on {name}, which does not exist"));
    };
    let state = dependency.status.state;
    let started = dependency.status.counts.start > 0 || dependency.status.dates.start.is_some();
    let succeeded = state == JobState::Completed && dependency.status.completion_code == Some(0);
    let ended = state.is_final();
    let how = || match dependency.status.completion_code {
        Some(code) => format!("{} with exit code {code}", state.as_str()),
        None => state.as_str().to_string(),
    };
    match kind {
        DependencyKind::AfterStart if started => Verdict::Met,
        DependencyKind::AfterStart if ended => {
            Verdict::Never(format!("{name} ended ({}) without starting", how()))
        }
        DependencyKind::AfterStart => Verdict::Waiting(format!("waits for {name} to start")),
        DependencyKind::AfterOk if succeeded => Verdict::Met,
        DependencyKind::AfterOk if ended => {
            Verdict::Never(format!("needs {name} to succeed, but it ended {}", how()))
        }
        DependencyKind::AfterOk => Verdict::Waiting(format!("waits for {name} to succeed")),
        DependencyKind::AfterNotOk if succeeded => {
            Verdict::Never(format!("needs {name} to fail, but it succeeded"))
        }
        DependencyKind::AfterNotOk if ended => Verdict::Met,
        DependencyKind::AfterNotOk => Verdict::Waiting(format!("waits for {name} to fail")),
        DependencyKind::AfterAny if ended => Verdict::Met,
        DependencyKind::AfterAny => Verdict::Waiting(format!("waits for {name} to end")),
        DependencyKind::Set => unreachable!("handled above"),
    }
}

/// The verdict over all of `dependent`'s dependencies: never if one can never be met,
/// else waiting if one is not met yet. `find` looks a job up by id.
pub fn judge_all<'a>(dependent: &Job, find: impl Fn(&str) -> Option<&'a Job>) -> Verdict {
    let mut waiting = None;
    for dependency in &dependent.spec.extra.dependencies {
        let Some(kind) = DependencyKind::parse(&dependency.kind) else {
            return Verdict::Never(format!("unknown dependency type '{}'", dependency.kind));
        };
        let found = if kind.names_a_job() {
            find(&dependency.name)
        } else {
            None
        };
        match judge(kind, &dependency.name, found, dependent) {
            Verdict::Met => {}
            Verdict::Never(reason) => return Verdict::Never(reason),
            Verdict::Waiting(reason) => {
                waiting.get_or_insert(reason);
            }
        }
    }
    waiting.map_or(Verdict::Met, Verdict::Waiting)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_read_in_both_vocabularies() {
        assert_eq!(
            DependencyKind::parse("AfterOK"),
            Some(DependencyKind::AfterOk)
        );
        assert_eq!(
            DependencyKind::parse("JOBSUCCESSFULCOMPLETE"),
            Some(DependencyKind::AfterOk)
        );
        assert_eq!(
            DependencyKind::parse("after"),
            Some(DependencyKind::AfterStart)
        );
        assert_eq!(
            DependencyKind::parse("jobfailcomplete"),
            Some(DependencyKind::AfterNotOk)
        );
        assert_eq!(
            DependencyKind::parse("JOBCOMPLETE"),
            Some(DependencyKind::AfterAny)
        );
        assert_eq!(DependencyKind::parse("before"), None);
        assert!(!DependencyKind::Set.names_a_job());
    }
}
