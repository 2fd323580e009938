//! Job templates (spec 2.6): named sets of defaults for submissions.
//!
//! The known template ids of the spec exist out of the box; the configuration may
//! change them or add others. A submission naming templates (`templates: [{name}]`)
//! takes from them, in order, what it does not say itself; the `DEFAULT` template
//! applies to every submission first.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
}
