//! Job templates (spec 2.6): named sets of defaults for submissions.
//!
//! The known template ids of the spec exist out of the box; the configuration may
//! change them or add others. A job naming templates (`templates: [{name}]`) takes from
//! them, in order, what it does not say itself, and then from `DEFAULT`
//! ([`JobTemplates::apply`]): what the submitter said wins, whoever submits (a version-2
//! submission, a plugin, a service).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::job::{Dependency, JobSpec, ResourceRequest};
use crate::limits::{MAX_JOB_DURATION, MAX_TASK_COUNT, USER_PRIORITY_BOUND};

/// The template every submission starts from.
pub const DEFAULT_TEMPLATE: &str = "DEFAULT";
/// The templates of the system jobs that make, move and end a VM.
pub const VM_SETUP: &str = "genericVM-setup";
pub const VM_MIGRATE: &str = "genericVM-migrate";
pub const VM_DESTROY: &str = "genericVM-destroy";
/// The template of the job a `pm` service holds its node with.
pub const PM_SETUP: &str = "genericPM-setup";

/// Known template ids (spec 2.6) and what each is for.
const BUILT_IN: &[(&str, &str)] = &[
    (DEFAULT_TEMPLATE, "Defaults applied to every job"),
    ("genericVM", "A virtual machine"),
    (VM_SETUP, "Sets up a virtual machine"),
    (VM_DESTROY, "Destroys a virtual machine"),
    (VM_MIGRATE, "Migrates a virtual machine"),
    ("genericPM", "A physical machine"),
    (PM_SETUP, "Sets up a physical machine"),
    ("genericPM-destroy", "Releases a physical machine"),
    ("OSStorage", "Operating-system storage"),
    ("OSStorage-setup", "Creates operating-system storage"),
    ("OSStorage-destroy", "Removes operating-system storage"),
    ("extraStorage", "Extra storage"),
    ("extraStorage-setup", "Creates extra storage"),
    ("extraStorage-destroy", "Removes extra storage"),
];

/// `jobDependencies` entry of a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateDependency {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
}

/// `jobTemplateRequirements` entry: resource defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct TemplateRequirements {
    pub architecture: Option<String>,
    pub disk_requirement: Option<u64>,
    pub generic_resources: BTreeMap<String, f64>,
    pub node_access_policy: Option<String>,
    pub operating_system: Option<String>,
    pub required_disk_per_task: Option<u64>,
    pub required_features: Vec<String>,
    pub required_memory_per_task: Option<u64>,
    pub required_processors_per_task: Option<u32>,
    pub required_swap_per_task: Option<u64>,
    pub task_count: Option<u32>,
}

/// A job template, in the field names of spec 2.6 (also in the configuration file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct JobTemplate {
    pub id: String,
    pub description: Option<String>,
    pub account: Option<String>,
    pub queue: Option<String>,
    pub qos: Option<String>,
    pub command_file: Option<String>,
    /// Command-line arguments, one string.
    pub args: Option<String>,
    pub duration_requested: Option<i64>,
    pub priority: Option<i64>,
    pub generic_system_job: bool,
    pub inherit_resources: bool,
    pub select: bool,
    pub job_flags: Vec<String>,
    pub job_template_flags: Vec<String>,
    pub job_dependencies: Vec<TemplateDependency>,
    pub job_template_requirements: Vec<TemplateRequirements>,
    pub trigger: Option<String>,
    pub vm_usage_policy: Option<String>,
    pub version: i64,
}

impl JobTemplate {
    /// What is wrong with this template: a value no submission could give (it would
    /// reach every job that takes it).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut outside = |field: &str, value: i64, min: i64, max: i64| {
            if !(min..=max).contains(&value) {
                problems.push(format!(
                    "{field}: must be between {min} and {max}, not {value}"
                ));
            }
        };
        if let Some(duration) = self.duration_requested {
            outside("durationRequested", duration, 0, MAX_JOB_DURATION);
        }
        if let Some(priority) = self.priority {
            outside(
                "priority",
                priority,
                -USER_PRIORITY_BOUND,
                USER_PRIORITY_BOUND,
            );
        }
        if let Some(r) = self.job_template_requirements.first() {
            if let Some(tasks) = r.task_count {
                outside("taskCount", i64::from(tasks), 1, MAX_TASK_COUNT);
            }
            if let Some(processors) = r.required_processors_per_task {
                outside(
                    "requiredProcessorsPerTask",
                    i64::from(processors),
                    1,
                    i64::from(u32::MAX),
                );
            }
        }
        // The stores cannot keep U+0000 (nor can a submission give it).
        if serde_json::to_value(self).is_ok_and(|value| holds_nul(&value)) {
            problems.push("a text holds the character U+0000".into());
        }
        problems
    }
}

fn holds_nul(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(fields) => fields
            .iter()
            .any(|(key, value)| key.contains('\0') || holds_nul(value)),
        _ => false,
    }
}

/// Which of a job's fields that templates fill its submitter gave: those keep what was
/// given. A field left out takes the value of the first template that has one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Given {
    pub command_file: bool,
    pub arguments: bool,
    pub duration: bool,
    pub vm_usage_policy: bool,
    pub account: bool,
    pub job_class: bool,
    pub qos: bool,
    pub user_priority: bool,
    pub dependencies: bool,
    pub task_count: bool,
    pub architecture: bool,
    pub os: bool,
    pub features: bool,
    /// The resources per task given, by name: `processors`, `memory`, `disk`, `swap`,
    /// or a generic resource's.
    pub resources: BTreeSet<String>,
}

/// A template a job names that does not exist: its place in the job's list, and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTemplate {
    pub index: usize,
    pub name: String,
}

impl std::fmt::Display for UnknownTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "templates[{}]: no job template '{}'",
            self.index, self.name
        )
    }
}

/// The templates of a deployment: the built-in ones, changed or extended by configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct JobTemplates {
    templates: Vec<JobTemplate>,
}

impl JobTemplates {
    /// The built-in templates, each replaced by a configured one of the same id; other
    /// configured templates follow. Refuses a configured template without a usable id.
    pub fn with(configured: &[JobTemplate]) -> Result<Self, String> {
        let mut templates: Vec<JobTemplate> = BUILT_IN
            .iter()
            .map(|(id, description)| JobTemplate {
                id: id.to_string(),
                description: Some(description.to_string()),
                generic_system_job: id.contains('-'),
                select: !id.contains('-') && *id != DEFAULT_TEMPLATE,
                job_template_flags: if !id.contains('-') && *id != DEFAULT_TEMPLATE {
                    vec!["SELECT".into()]
                } else {
                    Vec::new()
                },
                version: 1,
                ..JobTemplate::default()
            })
            .collect();
        for template in configured {
            if template.id.is_empty()
                || !template
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(format!(
                    "job_templates: '{}' is not a usable template id (letters, digits, - _ .)",
                    template.id
                ));
            }
            if let Some(problem) = template.problems().first() {
                return Err(format!("job_templates: '{}': {problem}", template.id));
            }
            let mut template = template.clone();
            template.version = template.version.max(1);
            match templates.iter_mut().find(|t| t.id == template.id) {
                Some(existing) => *existing = template,
                None => templates.push(template),
            }
        }
        Ok(Self { templates })
    }

    pub fn all(&self) -> &[JobTemplate] {
        &self.templates
    }

    pub fn get(&self, id: &str) -> Option<&JobTemplate> {
        self.templates.iter().find(|t| t.id == id)
    }

    /// Fills what `spec` leaves out (`given` says what its submitter gave) from the
    /// templates it names, in their order, then from `DEFAULT`. Refused, changing
    /// nothing, when it names templates that do not exist.
    pub fn apply(&self, spec: &mut JobSpec, mut given: Given) -> Result<(), Vec<UnknownTemplate>> {
        let mut chosen = Vec::new();
        let mut unknown = Vec::new();
        for (index, name) in spec.extra.templates.iter().enumerate() {
            match self.get(name) {
                Some(template) => chosen.push(template),
                None => unknown.push(UnknownTemplate {
                    index,
                    name: name.clone(),
                }),
            }
        }
        if !unknown.is_empty() {
            return Err(unknown);
        }
        chosen.extend(self.get(DEFAULT_TEMPLATE));
        for template in chosen {
            fill(spec, &mut given, template);
        }
        Ok(())
    }
}

/// Sets `slot` to `value` unless it was given (by the submitter or an earlier template).
fn default_to<T>(given: &mut bool, slot: &mut T, value: Option<T>) {
    if let Some(value) = value
        && !*given
    {
        *slot = value;
        *given = true;
    }
}

/// Fills from `t` what is not given yet.
fn fill(spec: &mut JobSpec, given: &mut Given, t: &JobTemplate) {
    default_to(
        &mut given.command_file,
        &mut spec.command_file,
        t.command_file.clone(),
    );
    default_to(&mut given.arguments, &mut spec.arguments, t.args.clone());
    default_to(
        &mut given.duration,
        &mut spec.duration,
        t.duration_requested.map(Some),
    );
    default_to(
        &mut given.account,
        &mut spec.account,
        t.account.clone().map(Some),
    );
    default_to(
        &mut given.job_class,
        &mut spec.job_class,
        t.queue.clone().map(Some),
    );
    default_to(
        &mut given.qos,
        &mut spec.qos_requested,
        t.qos.clone().map(Some),
    );
    default_to(
        &mut given.user_priority,
        &mut spec.user_priority,
        t.priority,
    );
    for flag in &t.job_flags {
        // Flags are kept as a submission's are read: trimmed, in capitals.
        let flag = flag.trim().to_ascii_uppercase();
        if !flag.is_empty() && !spec.flags.contains(&flag) {
            spec.flags.push(flag);
        }
    }
    // (`extra` is boxed only when something is set in it.)
    if t.vm_usage_policy.is_some() && !given.vm_usage_policy {
        default_to(
            &mut given.vm_usage_policy,
            &mut spec.extra.vm_usage_policy,
            t.vm_usage_policy.clone().map(Some),
        );
    }
    if !t.job_dependencies.is_empty() && !given.dependencies {
        let dependencies = t
            .job_dependencies
            .iter()
            .map(|d| Dependency {
                kind: d.kind.clone(),
                name: d.name.clone(),
            })
            .collect();
        default_to(
            &mut given.dependencies,
            &mut spec.extra.dependencies,
            Some(dependencies),
        );
    }
    if let Some(r) = t.job_template_requirements.first() {
        fill_request(&mut spec.request, given, r);
    }
}

/// Fills from a template's first requirement what is not given yet.
fn fill_request(request: &mut ResourceRequest, given: &mut Given, r: &TemplateRequirements) {
    default_to(&mut given.task_count, &mut request.task_count, r.task_count);
    default_to(
        &mut given.architecture,
        &mut request.architecture,
        r.architecture.clone().map(Some),
    );
    default_to(
        &mut given.os,
        &mut request.os,
        r.operating_system.clone().map(Some),
    );
    if !r.required_features.is_empty() {
        default_to(
            &mut given.features,
            &mut request.features,
            Some(r.required_features.clone()),
        );
    }
    let per_task = [
        ("processors", r.required_processors_per_task.map(f64::from)),
        ("memory", r.required_memory_per_task.map(|n| n as f64)),
        ("disk", r.required_disk_per_task.map(|n| n as f64)),
        ("swap", r.required_swap_per_task.map(|n| n as f64)),
    ];
    let generic = r
        .generic_resources
        .iter()
        .map(|(name, amount)| (name.as_str(), Some(*amount)));
    for (name, amount) in per_task.into_iter().chain(generic) {
        if let Some(amount) = amount
            && given.resources.insert(name.to_string())
        {
            set_resource(request, name, amount);
        }
    }
}

/// Sets the resource per task `name` to `amount`, as a submission giving it is read: a
/// whole number of processors (at least one); memory, disk and swap when positive; a
/// generic resource when it is a number.
fn set_resource(request: &mut ResourceRequest, name: &str, amount: f64) {
    let positive = (amount > 0.0).then_some(amount as u64);
    match name {
        "processors" => {
            if amount >= 1.0 && amount.fract() == 0.0 {
                request.processors_per_task = amount as u32;
            }
        }
        "memory" => request.memory_per_task = positive,
        "disk" => request.disk_per_task = positive,
        "swap" => request.swap_per_task = positive,
        _ => {
            if amount.is_finite() {
                request.generic_resources.insert(name.to_string(), amount);
            }
        }
    }
}

impl Default for JobTemplates {
    fn default() -> Self {
        Self::with(&[]).expect("the built-in templates are valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_known_ids_exist_and_configuration_changes_or_adds() {
        let builtin = JobTemplates::default();
        assert_eq!(builtin.all().len(), 14);
        assert!(builtin.get("genericVM-migrate").unwrap().generic_system_job);
        let configured = JobTemplates::with(&[
            JobTemplate {
                id: "DEFAULT".into(),
                account: Some("general".into()),
                ..JobTemplate::default()
            },
            JobTemplate {
                id: "gpu".into(),
                queue: Some("gpu".into()),
                ..JobTemplate::default()
            },
        ])
        .unwrap();
        assert_eq!(configured.all().len(), 15);
        assert_eq!(
            configured.get("DEFAULT").unwrap().account.as_deref(),
            Some("general")
        );
        assert_eq!(configured.get("gpu").unwrap().version, 1);
        assert!(JobTemplates::with(&[JobTemplate::default()]).is_err());
    }

    #[test]
    fn what_is_given_wins_then_the_named_templates_in_order_then_default() {
        let templates = JobTemplates::with(&[
            JobTemplate {
                id: "DEFAULT".into(),
                account: Some("general".into()),
                queue: Some("batch".into()),
                duration_requested: Some(3600),
                ..JobTemplate::default()
            },
            JobTemplate {
                id: "gpu".into(),
                queue: Some("gpu".into()),
                job_flags: vec!["restartable".into(), "SUSPENDABLE".into()],
                job_template_requirements: vec![TemplateRequirements {
                    required_processors_per_task: Some(4),
                    required_memory_per_task: Some(1024),
                    generic_resources: [("gpu".to_string(), 1.0)].into(),
                    ..TemplateRequirements::default()
                }],
                ..JobTemplate::default()
            },
        ])
        .unwrap();
        let mut spec = JobSpec {
            command_file: "/bin/true".into(),
            account: Some("mine".into()),
            flags: vec!["SUSPENDABLE".into()],
            ..JobSpec::default()
        };
        spec.request.memory_per_task = Some(512);
        spec.extra.templates = vec!["gpu".into()];
        let given = Given {
            command_file: true,
            account: true,
            resources: ["memory".to_string()].into(),
            ..Given::default()
        };
        templates.apply(&mut spec, given).unwrap();
        assert_eq!(spec.account.as_deref(), Some("mine"), "given");
        assert_eq!(
            spec.job_class.as_deref(),
            Some("gpu"),
            "named before DEFAULT"
        );
        assert_eq!(spec.duration, Some(3600), "DEFAULT");
        assert_eq!(spec.flags, ["SUSPENDABLE", "RESTARTABLE"]);
        assert_eq!(spec.request.memory_per_task, Some(512));
        assert_eq!(spec.request.processors_per_task, 4);
        assert_eq!(spec.request.generic_resources["gpu"], 1.0);

        // A job that names no template takes DEFAULT's (a plugin's, a service's).
        let mut plain = JobSpec::default();
        templates.apply(&mut plain, Given::default()).unwrap();
        assert_eq!(plain.account.as_deref(), Some("general"));
        assert!(plain.extra.is_empty(), "nothing set in extra: not boxed");

        let mut unknown = JobSpec::default();
        unknown.extra.templates = vec!["gpu".into(), "nope".into()];
        let refused = templates.apply(&mut unknown, Given::default()).unwrap_err();
        assert_eq!(
            refused,
            [UnknownTemplate {
                index: 1,
                name: "nope".into()
            }]
        );
        assert_eq!(unknown.account, None, "nothing filled");
    }

    #[test]
    fn a_template_with_a_value_no_submission_could_give_is_refused() {
        let refused = |template: JobTemplate| JobTemplates::with(&[template]).unwrap_err();
        let said = refused(JobTemplate {
            id: "long".into(),
            duration_requested: Some(-1),
            ..JobTemplate::default()
        });
        assert!(
            said.contains("'long': durationRequested: must be between 0"),
            "{said}"
        );
        let said = refused(JobTemplate {
            id: "none".into(),
            job_template_requirements: vec![TemplateRequirements {
                required_processors_per_task: Some(0),
                ..TemplateRequirements::default()
            }],
            ..JobTemplate::default()
        });
        assert!(said.contains("requiredProcessorsPerTask"), "{said}");
        let said = refused(JobTemplate {
            id: "nul".into(),
            description: Some("a\0b".into()),
            ..JobTemplate::default()
        });
        assert!(said.contains("U+0000"), "{said}");
    }
}
