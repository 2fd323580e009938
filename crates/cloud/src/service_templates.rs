//! The stored service templates (spec 2.12, 4.11): documents of the collection
//! [`SERVICE_TEMPLATES`], each under an id the service assigns (24 hex digits), with a
//! unique name and a `version`. [`ServiceTemplates`] is the only code that reads or
//! writes them.
//!
//! As for images, writes are serialized (one lock), so the checks that read other
//! templates (the templates an included service names, a taken name, cycles of
//! inclusion, the templates that include one being deleted) see what the write applies
//! to, and lists run the query over every template in memory with the evaluator that
//! defines list answers. The stored form is the wire shape; an included service keeps
//! both the id and the name of its template, and renaming a template rewrites the
//! includers' copy of its name in the same batch, so queries on either stay true.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use drover_domain::dates::{self, Timestamp};
use drover_domain::service_template::{
    IncludedService, Refusal, ServiceTemplate, ServiceTemplateChange, TemplateKey, TemplateRef,
};
use drover_query::{ListQuery, Page};
use drover_store::{DocumentStore, Write};

use crate::catalog::{Catalog, Stored};
use crate::images::{CloudError, Result};

pub const SERVICE_TEMPLATES: &str = "service_templates";

/// A template with the id and version the store keeps.
pub type StoredTemplate = Stored<ServiceTemplate>;

/// The service of the stored service templates. Blocking.
pub struct ServiceTemplates {
    catalog: Catalog,
}

impl ServiceTemplates {
    /// Ensures the collection; new ids continue after the last stored one.
    pub fn open(store: Arc<dyn DocumentStore>) -> Result<Self> {
        Ok(Self {
            catalog: Catalog::open(store, SERVICE_TEMPLATES, "service template")?,
        })
    }

    /// The templates `query` selects, sorted and paged, and how many match.
    pub fn list(&self, query: &ListQuery) -> Result<Page<StoredTemplate>> {
        self.catalog.list(query)
    }

    /// Every template, oldest first.
    pub fn all(&self) -> Result<Vec<StoredTemplate>> {
        self.catalog.all()
    }

    /// The template whose id, else name, is `key`.
    pub fn get(&self, key: &str) -> Result<StoredTemplate> {
        self.catalog.get(key)
    }

    /// Stores a new template, created by `created_by`, under a new id.
    pub fn create(
        &self,
        change: &ServiceTemplateChange,
        created_by: &str,
    ) -> Result<StoredTemplate> {
        let summary = "The service template was not created";
        let mut ids = self.catalog.lock();
        let all = self.catalog.all::<ServiceTemplate>()?;
        let (included, mut problems) = resolve(&all, change);
        let made =
            ServiceTemplate::create(change, included.unwrap_or_default(), created_by, &now());
        let template = checked(summary, made, &mut problems)?;
        taken_by(summary, &all, &template.name, None)?;
        let id = ids.next_id();
        let insert = self.catalog.put(&id, &template.name, &template, None);
        self.catalog.commit(&[insert], summary, &template.name)?;
        drop(ids);
        self.get(&id)
    }

    /// Applies `change` to the template `key`. A `version` other than the stored one, or
    /// a taken name, is a conflict. A new name reaches the templates that include it.
    pub fn modify(&self, key: &str, change: &ServiceTemplateChange) -> Result<StoredTemplate> {
        let summary = format!("The service template {key} was not changed");
        let _writes = self.catalog.lock();
        let current = self.get(key)?;
        self.catalog
            .check_version(change.version, current.version, &summary)?;
        let all = self.catalog.all::<ServiceTemplate>()?;
        let (included, mut problems) = resolve(&all, change);
        if let Some(included) = &included {
            problems.extend(inclusion_cycle(&all, &current, included));
        }
        let made = current.value.changed(change, included, &now());
        let template = checked(&summary, made, &mut problems)?;
        taken_by(&summary, &all, &template.name, Some(&current.id))?;
        let mut writes = vec![self.catalog.put(
            &current.id,
            &template.name,
            &template,
            Some(current.version),
        )];
        if template.name != current.value.name {
            for mut includer in all.into_iter().filter(|t| t.id != current.id) {
                let mut renamed = false;
                for service in &mut includer.value.included_services {
                    if service.service_template.id == current.id {
                        service.service_template.name = template.name.clone();
                        renamed = true;
                    }
                }
                if renamed {
                    writes.push(self.catalog.put(
                        &includer.id,
                        &includer.value.name,
                        &includer.value,
                        Some(includer.version),
                    ));
                }
            }
        }
        self.catalog.commit(&writes, &summary, &template.name)?;
        self.get(&current.id)
    }

    /// Deletes the template `key`, unless another template includes it or what
    /// `users_elsewhere` names is not empty. `users_elsewhere` names the
    /// services made from the template (a phrase), if any.
    pub fn remove(
        &self,
        key: &str,
        users_elsewhere: impl FnOnce(&StoredTemplate) -> Option<String>,
    ) -> Result<()> {
        let summary = format!("The service template {key} was not deleted");
        let _writes = self.catalog.lock();
        let current = self.get(key)?;
        if let Some(users) = users_elsewhere(&current) {
            return Err(CloudError::Conflict {
                summary,
                reason: format!("the template is in use by {users}"),
                advice: Some("delete those services first".into()),
            });
        }
        let includers: Vec<String> = self
            .catalog
            .all::<ServiceTemplate>()?
            .into_iter()
            .filter(|other| other.value.includes().any(|id| id == current.id))
            .map(|other| format!("'{}'", other.value.name))
            .collect();
        if !includers.is_empty() {
            return Err(CloudError::Conflict {
                summary,
                reason: format!(
                    "the template is included by the service templates {}",
                    includers.join(", ")
                ),
                advice: Some("remove it from their includedServices, or delete them, first".into()),
            });
        }
        self.catalog.store.write(&[Write::Delete {
            collection: SERVICE_TEMPLATES.into(),
            id: current.id,
            expected_version: Some(current.version),
        }])?;
        Ok(())
    }
}

fn now() -> String {
    dates::format_utc(Timestamp::now())
}

/// The included services `change` gives, resolved against `all` (`None`: not given),
/// and the refusal naming every template they name that does not exist.
fn resolve(
    all: &[StoredTemplate],
    change: &ServiceTemplateChange,
) -> (Option<Vec<IncludedService>>, Vec<Refusal>) {
    let Some(given) = &change.included_services else {
        return (None, Vec::new());
    };
    let mut included = Vec::new();
    let mut missing = Vec::new();
    for service in given {
        let found = all.iter().find(|t| match &service.service_template {
            TemplateKey::Id(id) => &t.id == id,
            TemplateKey::Name(name) => &t.value.name == name,
        });
        match found {
            Some(t) => included.push(IncludedService {
                local_name: service.local_name.clone(),
                service_template: TemplateRef {
                    id: t.id.clone(),
                    name: t.value.name.clone(),
                },
            }),
            None => missing.push(service.service_template.to_string()),
        }
    }
    let problems = if missing.is_empty() {
        Vec::new()
    } else {
        vec![Refusal::new(
            "includedServices",
            format!(
                "the template depends on service templates that do not exist: {}",
                missing.join(", ")
            ),
            "create those templates first, or name existing ones (a name, {name} or {id})",
        )]
    };
    (Some(included), problems)
}

/// The refusal of `included` when it would make `current` include itself, directly or
/// through the templates it includes.
fn inclusion_cycle(
    all: &[StoredTemplate],
    current: &StoredTemplate,
    included: &[IncludedService],
) -> Option<Refusal> {
    let by_id: HashMap<&str, &StoredTemplate> = all.iter().map(|t| (t.id.as_str(), t)).collect();
    // Depth-first from each included template, with the path of names that led there.
    let mut seen = BTreeSet::new();
    let mut stack: Vec<(&str, Vec<&str>)> = included
        .iter()
        .map(|s| (s.service_template.id.as_str(), vec![]))
        .collect();
    while let Some((id, mut path)) = stack.pop() {
        if id == current.id {
            let mut names = vec![current.value.name.as_str()];
            names.append(&mut path);
            names.push(current.value.name.as_str());
            return Some(Refusal::new(
                "includedServices",
                format!("the template would include itself: {}", names.join(" -> ")),
                "a template cannot contain itself: include other templates",
            ));
        }
        if !seen.insert(id) {
            continue;
        }
        if let Some(template) = by_id.get(id) {
            path.push(template.value.name.as_str());
            for next in template.value.includes() {
                stack.push((next, path.clone()));
            }
        }
    }
    None
}

/// The template `made`, unless it or the references to other templates (`problems`)
/// have problems: then all of them in one refusal.
fn checked(
    summary: &str,
    made: std::result::Result<ServiceTemplate, Vec<Refusal>>,
    problems: &mut Vec<Refusal>,
) -> Result<ServiceTemplate> {
    match made {
        Ok(template) if problems.is_empty() => Ok(template),
        Ok(_) => Err(invalid(summary, problems)),
        Err(more) => {
            problems.extend(more);
            Err(invalid(summary, problems))
        }
    }
}

/// A conflict when `name` is the name of a template other than `itself`.
fn taken_by(summary: &str, all: &[StoredTemplate], name: &str, itself: Option<&str>) -> Result<()> {
    match all
        .iter()
        .find(|t| t.value.name == name && Some(t.id.as_str()) != itself)
    {
        None => Ok(()),
        Some(other) => Err(CloudError::Conflict {
            summary: summary.into(),
            reason: format!(
                "the name '{name}' is not unique: the service template {} has it",
                other.id
            ),
            advice: Some("choose another name, or change that template".into()),
        }),
    }
}

fn invalid(summary: &str, problems: &[Refusal]) -> CloudError {
    let mut messages = Refusal::messages(summary, problems);
    let summary = messages.remove(0);
    CloudError::Invalid {
        summary,
        reasons: messages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_domain::service_template::{IncludedChange, ServiceType};
    use drover_store::SqliteStore;

    fn open() -> (tempfile::TempDir, ServiceTemplates) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("d.db")).unwrap());
        (dir, ServiceTemplates::open(store).unwrap())
    }

    fn storage(name: &str) -> ServiceTemplateChange {
        ServiceTemplateChange {
            name: Some(name.into()),
            kind: Some(ServiceType::Storage),
            ..ServiceTemplateChange::default()
        }
    }

    fn container(name: &str, includes: &[(&str, &str)]) -> ServiceTemplateChange {
        ServiceTemplateChange {
            name: Some(name.into()),
            kind: Some(ServiceType::Container),
            included_services: Some(
                includes
                    .iter()
                    .map(|(local, template)| IncludedChange {
                        local_name: local.to_string(),
                        service_template: TemplateKey::Name(template.to_string()),
                    })
                    .collect(),
            ),
            ..ServiceTemplateChange::default()
        }
    }

    #[test]
    fn inclusion_renames_cycles_and_deletion() {
        let (_dir, templates) = open();
        let disk = templates.create(&storage("disk"), "admin").unwrap();
        assert_eq!(disk.id.len(), 24);
        assert_eq!(disk.value.created_by, "admin");
        assert!(matches!(
            templates.create(&storage("disk"), "admin"),
            Err(CloudError::Conflict { reason, .. }) if reason.contains("not unique")
        ));
        let outer = templates
            .create(&container("outer", &[("d", "disk")]), "admin")
            .unwrap();
        assert_eq!(
            outer.value.included_services[0].service_template,
            TemplateRef {
                id: disk.id.clone(),
                name: "disk".into()
            }
        );
        let missing = templates
            .create(&container("x", &[("a", "nope"), ("b", "none")]), "admin")
            .unwrap_err();
        assert!(
            matches!(&missing, CloudError::Invalid { reasons, .. }
                if reasons[0].contains("name 'nope', name 'none'")),
            "{missing:?}"
        );

        // A rename reaches the includer.
        let renamed = templates
            .modify(
                "disk",
                &ServiceTemplateChange {
                    name: Some("volume".into()),
                    ..ServiceTemplateChange::default()
                },
            )
            .unwrap();
        assert_eq!(renamed.version, 2);
        let outer = templates.get(&outer.id).unwrap();
        assert_eq!(
            outer.value.included_services[0].service_template.name,
            "volume"
        );

        // Cycles of inclusion are refused.
        let top = templates
            .create(&container("top", &[("o", "outer")]), "admin")
            .unwrap();
        let cycle = templates
            .modify("outer", &container("outer", &[("t", "top")]))
            .unwrap_err();
        assert!(
            matches!(&cycle, CloudError::Invalid { reasons, .. }
                if reasons[0].contains("outer -> top -> outer")),
            "{cycle:?}"
        );
        let own = templates
            .modify("outer", &container("outer", &[("me", "outer")]))
            .unwrap_err();
        assert!(matches!(own, CloudError::Invalid { .. }), "{own:?}");

        // In use: not deleted, naming by what.
        assert!(matches!(
            templates.remove("volume", |_| None),
            Err(CloudError::Conflict { reason, .. }) if reason.contains("'outer'")
        ));
        assert!(matches!(
            templates.remove("top", |_| Some("the service s.1".into())),
            Err(CloudError::Conflict { reason, .. }) if reason.contains("s.1")
        ));
        templates.remove(&top.id, |_| None).unwrap();
        templates.remove("outer", |_| None).unwrap();
        templates.remove("volume", |_| None).unwrap();
        assert!(matches!(
            templates.get("volume"),
            Err(CloudError::NotFound(_))
        ));
    }

    #[test]
    fn a_stale_version_is_a_conflict() {
        let (_dir, templates) = open();
        templates.create(&storage("s"), "admin").unwrap();
        let stale = ServiceTemplateChange {
            version: Some(4),
            ..ServiceTemplateChange::default()
        };
        assert!(matches!(
            templates.modify("s", &stale),
            Err(CloudError::Conflict { .. })
        ));
    }
}
