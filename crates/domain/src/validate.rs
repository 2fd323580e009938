//! The submission rules of spec part 8 and the sanity rules every job must pass.
//! Messages name the field (version-2 names; the version-1 names are the same for
//! these fields) and say what is wrong.

use crate::job::{Hold, JobSpec, KNOWN_FLAGS};
use crate::limits;
use crate::request::SchedError;
use crate::request::summary::JOB_NOT_SUBMITTED;

/// Characters a variable name must not contain (besides white space).
const NAME_FORBIDDEN: &[char] = &['=', ';', ':', '+', '?', '^', '\\'];
/// Characters a variable value must not contain.
const VALUE_FORBIDDEN: &[char] = &[';', ':', '+', '^'];

pub fn variable_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("variables: a variable name is empty".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| NAME_FORBIDDEN.contains(c) || c.is_whitespace())
    {
        return Err(format!(
            "variables: the name '{name}' contains {}, which variable names must not contain \
             (= ; : + ? ^ \\ or white space)",
            describe(c)
        ));
    }
    Ok(())
}

pub fn variable_value(name: &str, value: &str) -> Result<(), String> {
    if let Some(c) = value.chars().find(|c| VALUE_FORBIDDEN.contains(c)) {
        return Err(format!(
            "variables: the value of '{name}' contains {}, which variable values must not contain (; : + ^)",
            describe(c)
        ));
    }
    Ok(())
}

fn describe(c: char) -> String {
    if c.is_whitespace() {
        "white space".into()
    } else {
        format!("'{c}'")
    }
}

pub fn flags(flags: &[String]) -> Result<(), String> {
    for flag in flags {
        if !KNOWN_FLAGS.contains(&flag.as_str()) {
            return Err(format!(
                "flags: '{flag}' is not a job flag; known flags are {}",
                KNOWN_FLAGS.join(", ")
            ));
        }
    }
    Ok(())
}

/// Checks a submission. `container_exists` answers whether a virtual container exists.
pub fn submission(
    spec: &JobSpec,
    container_exists: impl Fn(&str) -> bool,
) -> Result<(), SchedError> {
    let mut problems = Vec::new();
    if spec.command_file.trim().is_empty() {
        problems
            .push("commandFile: required, the path of the script or program to run".to_string());
    }
    if spec.command_file.contains('\0') {
        problems.push("commandFile: must not contain NUL characters".into());
    }
    for (name, value) in &spec.variables {
        if let Err(p) = variable_name(name).and_then(|_| variable_value(name, value)) {
            problems.push(p);
        }
    }
    for name in spec.environment.keys() {
        if name.is_empty() || name.contains(['=', '\0']) {
            problems.push(format!(
                "environmentVariables: '{name}' is not a valid environment variable name"
            ));
        }
    }
    if spec.environment.values().any(|v| v.contains('\0')) {
        problems.push("environmentVariables: values must not contain NUL characters".into());
    }
    if let Some(hold) = spec.holds.iter().find(|h| **h != Hold::User) {
        problems.push(format!(
            "holds: only a User hold may be requested at submission, not {}",
            hold.as_str()
        ));
    }
    match spec.extra.virtual_containers.as_slice() {
        [] => {}
        [one] if container_exists(one) => {}
        [one] => problems.push(format!(
            "virtualContainers: the virtual container '{one}' does not exist; a job may only name an existing one"
        )),
        many => problems.push(format!(
            "virtualContainers: a job may name at most one virtual container, not {}",
            many.len()
        )),
    }
    if let Err(p) = flags(&spec.flags) {
        problems.push(p);
    }
    let request = &spec.request;
    if !(1..=limits::MAX_TASK_COUNT).contains(&i64::from(request.task_count)) {
        problems.push(format!(
            "a job must ask for between 1 and {} tasks, not {}",
            limits::MAX_TASK_COUNT,
            request.task_count
        ));
    }
    if request.processors_per_task == 0 {
        problems.push("a task must ask for at least 1 processor".into());
    }
    if let Some(per_node) = request.tasks_per_node
        && (per_node == 0 || per_node > request.task_count.max(1))
    {
        problems.push(format!(
            "the tasks per node must be between 1 and the task count ({}), not {per_node}",
            request.task_count
        ));
    }
    if spec.duration.is_some_and(|d| d < 0) {
        problems.push("the requested duration must not be negative".into());
    }
    for path in [
        &spec.stdout_path,
        &spec.stderr_path,
        &spec.stdin_path,
        &spec.working_directory,
    ]
    .into_iter()
    .flatten()
    {
        if path.contains('\0') || path.is_empty() {
            problems.push(format!("'{path}' is not a usable path"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        let mut messages = vec![JOB_NOT_SUBMITTED.to_string()];
        messages.extend(problems);
        Err(SchedError::Invalid(messages))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobSpec {
        JobSpec {
            command_file: "/bin/true".into(),
            ..Default::default()
        }
    }

    fn refusal(spec: &JobSpec) -> String {
        match submission(spec, |_| false) {
            Err(SchedError::Invalid(m)) => m.join(" | "),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn variable_rules_of_part_8() {
        for bad in [
            "a=b", "a;b", "a:b", "a+b", "a?b", "a^b", "a\\b", "a b", "a\tb", "",
        ] {
            let mut s = spec();
            s.variables.insert(bad.into(), "v".into());
            assert!(refusal(&s).contains("variables"), "{bad:?}");
        }
        for bad in ["x;y", "x:y", "x+y", "x^y"] {
            let mut s = spec();
            s.variables.insert("name".into(), bad.into());
            assert!(refusal(&s).contains("value of 'name'"), "{bad:?}");
        }
        let mut fine = spec();
        fine.variables
            .insert("name.with-dots_1".into(), "a=b?c d\\e".into());
        assert!(submission(&fine, |_| false).is_ok());
    }

    #[test]
    fn holds_containers_flags_and_command() {
        let mut s = spec();
        s.holds = vec![Hold::System];
        assert!(refusal(&s).contains("only a User hold"));
        s.holds = vec![Hold::User];
        assert!(submission(&s, |_| false).is_ok());
        s.extra.virtual_containers = vec!["vc1".into()];
        assert!(refusal(&s).contains("does not exist"));
        assert!(submission(&s, |name| name == "vc1").is_ok());
        s.extra.virtual_containers = vec!["vc1".into(), "vc2".into()];
        assert!(refusal(&s).contains("at most one"));
        let mut s = spec();
        s.flags = vec!["FAST".into()];
        assert!(refusal(&s).contains("'FAST' is not a job flag"));
        s.command_file = " ".into();
        assert!(refusal(&s).contains("commandFile"));
    }
}
