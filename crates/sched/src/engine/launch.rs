//! What a job's process is started with: its user and group, directory, environment and
//! arguments.

use std::path::PathBuf;

use super::core::Engine;
use crate::job::{Job, Output};
use crate::rm::Launch;
use crate::sysuser::{self, SystemUser};

impl Engine {
    /// The launch description of a job about to start.
    pub(crate) fn launch_of(&mut self, job: &Job) -> Result<Launch, String> {
        // A simulated engine (`drover replay`) starts no process: its jobs' users are
        // the trace's, with no account.
        let user = if sysuser::running_as_root() && self.journal.journaled() {
            self.account(&job.status.exec_user)
                .ok_or_else(|| format!("the user '{}' no longer exists", job.status.exec_user))?
        } else {
            self.accounts.service_user().clone()
        };
        let gid = match &job.spec.group {
            Some(group) if sysuser::running_as_root() => {
                let gid = sysuser::group_id(group)
                    .ok_or_else(|| format!("the group '{group}' no longer exists"))?;
                // Memberships change while a job waits: judge again what it will run with.
                if !user.groups.contains(&gid) {
                    return Err(format!(
                        "the user '{}' is no longer a member of the group '{group}'",
                        user.name
                    ));
                }
                Some(gid)
            }
            _ => None,
        };
        let directory = PathBuf::from(job.spec.working_directory.as_deref().unwrap_or("/"));
        let nodes: Vec<&str> = job.node_ids().collect();
        let mut environment = vec![
            ("HOME".to_string(), user.home.clone()),
            ("USER".into(), user.name.clone()),
            ("LOGNAME".into(), user.name.clone()),
            (
                "SHELL".into(),
                if user.shell.is_empty() {
                    "/bin/sh".into()
                } else {
                    user.shell.clone()
                },
            ),
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ];
        environment.extend(
            job.spec
                .environment
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        let tasks = job.spec.request.task_count.to_string();
        let processors = job.processors().to_string();
        for (name, value) in [
            ("DROVER_JOB_ID", job.id.clone()),
            (
                "DROVER_JOB_NAME",
                job.spec.custom_name.clone().unwrap_or_default(),
            ),
            ("DROVER_NODELIST", nodes.join(",")),
            ("DROVER_TASK_COUNT", tasks),
            ("DROVER_PROCESSORS", processors.clone()),
            ("DROVER_SUBMIT_USER", job.status.submitter.clone()),
            ("MOAB_JOBID", job.id.clone()),
            (
                "MOAB_JOBNAME",
                job.spec.custom_name.clone().unwrap_or_default(),
            ),
            ("MOAB_NODELIST", nodes.join(",")),
            ("MOAB_PROCCOUNT", processors),
            ("MOAB_USER", user.name.clone()),
        ] {
            environment.retain(|(k, _)| k != name);
            environment.push((name.to_string(), value));
        }
        Ok(Launch {
            job_id: job.id.clone(),
            command_file: directory.join(&job.spec.command_file),
            arguments: split_arguments(&job.spec.arguments),
            working_directory: directory.clone(),
            environment,
            stdout: job.output_path(Output::Stdout),
            stderr: job.output_path(Output::Stderr),
            stdin: job.spec.stdin_path.as_ref().map(|p| directory.join(p)),
            user: SystemUser::clone(&user),
            gid,
            guest: None,
            output_names: (
                job.default_output_name(Output::Stdout),
                job.default_output_name(Output::Stderr),
            ),
            placement: job.status.allocation.clone(),
            processors_per_task: job.spec.request.processors_per_task,
            memory_per_task: job.spec.request.memory_per_task,
            wall_seconds: job.spec.duration.and_then(|d| u64::try_from(d).ok()),
        })
    }
}

/// Splits a command line into arguments: white space separates, single and double
/// quotes group, a backslash escapes the next character (outside single quotes).
pub fn split_arguments(line: &str) -> Vec<String> {
    let mut arguments = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    current.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => current.extend(chars.next()),
                        _ => current.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                current.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    arguments.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                current.push(c);
            }
        }
    }
    if in_word {
        arguments.push(current);
    }
    arguments
}

#[cfg(test)]
mod tests {
    use super::split_arguments;

    #[test]
    fn arguments_split_like_a_shell() {
        assert_eq!(split_arguments(""), Vec::<String>::new());
        assert_eq!(split_arguments("  a b\tc "), ["a", "b", "c"]);
        assert_eq!(
            split_arguments(r#"'x y' "p \"q\"" r\ s ''"#),
            ["x y", "p \"q\"", "r s", ""]
        );
    }
}
