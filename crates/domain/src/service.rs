//! Services (spec 2.11, 4.10): what a creation asks for, the tree of services it makes
//! (its entries, and the services their templates include), and the stored record of
//! each service with where it is in its life.
//!
//! [`expand`] is the whole of 4.10's rules for a creation: templates instantiated with
//! their included services, `extends` paths, the extendable fields of rule 2 (add-only
//! where it says so), `includedServices` between entries, dependencies between the
//! services of one container, what a `vm`, `pm` or `storage` service needs. It is pure:
//! the caller looks the templates up and names the services.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::service_template::{
    self, Refusal, ServiceTemplate, ServiceType, TemplateKey, TemplateRef,
};

/// Where a service is in its life; the system's `status` and `statusCode` follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ServicePhase {
    /// Waiting for its start date, its container, or the services it depends on.
    Pending,
    /// What it is made of is being made.
    SettingUp,
    Up,
    /// Made, but not running now: its VM is powered off (or a member of the container
    /// is down); `Up` again once it runs.
    Down,
    /// Its setup failed, or what it was made of went away; it stays until deleted.
    Failed,
    /// What it is made of is being removed, in reverse dependency order.
    TearingDown,
    /// Torn down when its duration ended; kept as a record.
    Ended,
}

impl ServicePhase {
    /// The `status` the system gives the phase.
    pub fn status(self) -> &'static str {
        match self {
            ServicePhase::Pending => "Pending",
            ServicePhase::SettingUp => "Setting up",
            ServicePhase::Up => "Up",
            ServicePhase::Down => "Down",
            ServicePhase::Failed => "Failed",
            ServicePhase::TearingDown => "Tearing down",
            ServicePhase::Ended => "Ended",
        }
    }

    /// The `statusCode` the system gives the phase (negative: failed).
    pub fn code(self) -> i64 {
        match self {
            ServicePhase::Pending => 0,
            ServicePhase::SettingUp => 1,
            ServicePhase::Up => 2,
            ServicePhase::TearingDown => 3,
            ServicePhase::Ended => 4,
            ServicePhase::Down => 5,
            ServicePhase::Failed => -1,
        }
    }
}

/// A service as stored: the wire shape of 2.11 (less `id` and `version`, which the store
/// keeps) and the system's own fields (`phase`, `topLevel`, `createdBy`, the times).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    pub name: String,
    pub date_created: String,
    pub last_updated: String,
    #[serde(rename = "type")]
    pub kind: ServiceType,
    pub label: Option<String>,
    pub user: String,
    pub account: Option<String>,
    pub start_date_requested: Option<String>,
    pub start_date_scheduled: Option<String>,
    pub duration_requested: Option<i64>,
    pub status: String,
    pub status_code: i64,
    pub included_services: Vec<String>,
    pub parent: Option<String>,
    pub service_template: Option<TemplateRef>,
    /// `sched` ({vc, dependencies, job}) is the system's; the rest is the client's.
    pub attributes: Map<String, Value>,
    pub phase: ServicePhase,
    /// The name of the top-level service of its tree (its own when it is one).
    pub top_level: String,
    pub created_by: String,
    /// Epoch seconds: when setup may begin, and when the tree is torn down.
    pub starts_at: i64,
    pub ends_at: Option<i64>,
    /// Whether the record goes once torn down (a deletion) or stays `Ended`.
    #[serde(default)]
    pub remove_when_down: bool,
    /// Whether a caller over everybody's services (an administrator) created it: its
    /// pieces are then not held to an ordinary user's limits.
    #[serde(default)]
    pub made_by_administrator: bool,
    /// Made because its container's template includes it: it goes only with its
    /// container, never on its own (spec 4.10 rule 3).
    #[serde(default)]
    pub template_defined: bool,
}

impl Service {
    /// `attributes.sched`, made an object if it was not.
    pub fn sched_mut(&mut self) -> &mut Map<String, Value> {
        object_at(&mut self.attributes, "sched")
    }

    pub fn sched(&self) -> Option<&Map<String, Value>> {
        self.attributes.get("sched").and_then(Value::as_object)
    }

    /// `attributes.sched.job`.
    pub fn job(&self) -> Option<&Map<String, Value>> {
        self.sched()?.get("job")?.as_object()
    }

    pub fn job_mut(&mut self) -> &mut Map<String, Value> {
        object_at(self.sched_mut(), "job")
    }

    /// A string of `attributes.sched.job`.
    pub fn job_text(&self, key: &str) -> Option<&str> {
        self.job()?.get(key)?.as_str()
    }

    /// `attributes.sched.vc.id`.
    pub fn container(&self) -> Option<&str> {
        self.sched()?.get("vc")?.get("id")?.as_str()
    }

    /// The services (of its container) this one waits for: `parent`'s dependencies.
    pub fn waits_for<'a>(&self, parent: &'a Service) -> Vec<&'a str> {
        parent
            .dependencies()
            .filter(|(service, _)| *service == self.name)
            .flat_map(|(_, on)| on)
            .collect()
    }

    /// `attributes.sched.dependencies` as (service, the services it waits for).
    pub fn dependencies(&self) -> impl Iterator<Item = (&str, Vec<&str>)> {
        self.sched()
            .and_then(|s| s.get("dependencies"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let service = entry.get("service")?.as_str()?;
                let on = entry
                    .get("dependency")?
                    .as_array()?
                    .iter()
                    .filter_map(Value::as_str)
                    .collect();
                Some((service, on))
            })
    }

    /// A number of `attributes.sched.job.resources`, under any of `keys` (any case).
    pub fn resource(&self, keys: &[&str]) -> Option<f64> {
        let resources = self.job()?.get("resources")?.as_object()?;
        resources
            .iter()
            .find(|(k, _)| keys.iter().any(|key| k.eq_ignore_ascii_case(key)))
            .and_then(|(_, v)| v.as_f64())
    }

    /// Whether the system has finished with it (nothing of it is left to make or remove).
    pub fn settled(&self) -> bool {
        matches!(
            self.phase,
            ServicePhase::Up | ServicePhase::Failed | ServicePhase::Ended
        )
    }

    /// Enters `phase`, with the system's status (and `detail`, when given).
    pub fn enter(&mut self, phase: ServicePhase, detail: Option<&str>) {
        self.phase = phase;
        self.status = match detail {
            Some(detail) => format!("{}: {detail}", phase.status()),
            None => phase.status().to_string(),
        };
        self.status_code = phase.code();
    }
}

fn object_at<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    if !map.get(key).is_some_and(Value::is_object) {
        map.insert(key.into(), Value::Object(Map::new()));
    }
    map.get_mut(key)
        .and_then(Value::as_object_mut)
        .expect("an object was just put there")
}

/// The resource keys of `attributes.sched.job.resources` the system reads.
pub const PROCESSORS: &[&str] = &["procs", "processors"];
pub const MEMORY: &[&str] = &["mem", "memory"];
pub const DISK: &[&str] = &["disk"];

/// The most processors, MB of memory and MB of disk a service may ask for: what a VM
/// request may (`totalProcessors`, `totalMemory`, `totalDisk`).
pub const MAX_PROCESSORS: u64 = crate::limits::MAX_VM_PROCESSORS as u64;
pub const MAX_MEMORY_MB: u64 = 1 << 30;
pub const MAX_DISK_MB: u64 = 1 << 40;

/// The most services one creation may make, and the deepest nesting.
pub const MAX_SERVICES: usize = 64;
pub const MAX_DEPTH: usize = 8;

/// An entry of a creation's `data` (4.10).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceEntry {
    pub name: String,
    pub template: Option<TemplateKey>,
    pub kind: Option<ServiceType>,
    pub extends: Option<String>,
    pub label: Option<String>,
    pub included_services: Vec<String>,
    pub attributes: Map<String, Value>,
}

/// A service the creation makes, before it is named.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpandedService {
    /// Its name before the `.<n>` suffix: the entry's name, or its local name in the
    /// template that includes it.
    pub base: String,
    pub kind: ServiceType,
    pub template: Option<TemplateRef>,
    pub label: Option<String>,
    /// Without `sched.dependencies` (see `dependencies`).
    pub attributes: Map<String, Value>,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// A container's: each child (index) and the children it waits for.
    pub dependencies: Vec<(usize, Vec<usize>)>,
    /// A storage service's: the VM service (index) that carries its disk.
    pub storage_of: Option<usize>,
    /// Included by its container's template (not by an entry of the request).
    pub template_defined: bool,
}

impl ExpandedService {
    /// A service of `kind` an entry makes by its type alone, at the top until included.
    pub fn of_type(base: &str, kind: ServiceType) -> Self {
        Self {
            base: base.into(),
            kind,
            template: None,
            label: None,
            attributes: Map::new(),
            parent: None,
            children: Vec::new(),
            dependencies: Vec::new(),
            storage_of: None,
            template_defined: false,
        }
    }
}

/// Looks a template up by id or name.
pub type TemplateLookup<'a> = &'a dyn Fn(&TemplateKey) -> Option<(TemplateRef, ServiceTemplate)>;

/// The services a creation makes, the top-level one first, or every rule it breaks.
pub fn expand(
    entries: &[ServiceEntry],
    templates: TemplateLookup<'_>,
) -> Result<Vec<ExpandedService>, Vec<Refusal>> {
    let mut expansion = Expansion {
        templates,
        out: Vec::new(),
        locals: BTreeMap::new(),
        problems: Vec::new(),
    };
    expansion.run(entries);
    if expansion.problems.is_empty() {
        Ok(expansion.out)
    } else {
        Err(expansion.problems)
    }
}

struct Expansion<'a> {
    templates: TemplateLookup<'a>,
    out: Vec<ExpandedService>,
    /// A container's children by the name its dependencies and `extends` paths use.
    locals: BTreeMap<usize, BTreeMap<String, usize>>,
    problems: Vec<Refusal>,
}

const FIX: &str = "correct the entry named and send the request again";

impl Expansion<'_> {
    fn refuse(&mut self, field: String, reason: String, advice: &str) {
        self.problems.push(Refusal::new(field, reason, advice));
    }

    fn run(&mut self, entries: &[ServiceEntry]) {
        if entries.is_empty() {
            self.refuse(
                "data".into(),
                "no service entry is given".into(),
                "give at least one entry {name, serviceTemplate or type}",
            );
            return;
        }
        let roots = self.make_roots(entries);
        if !self.problems.is_empty() {
            return;
        }
        let targets = self.reach_extensions(entries, &roots);
        let target_of = |i: usize, entry: &ServiceEntry| {
            targets[i].or_else(|| roots.get(entry.name.as_str()).copied())
        };
        // includedServices between entries, then the dependencies they give.
        for (i, entry) in entries.iter().enumerate() {
            if let Some(target) = target_of(i, entry) {
                self.include(i, target, &entry.included_services, &roots);
            }
        }
        if !self.problems.is_empty() {
            return;
        }
        for (i, entry) in entries.iter().enumerate() {
            if let (Some(target), Some(dependencies)) =
                (target_of(i, entry), given_dependencies(entry))
            {
                self.depend(
                    &format!("data[{i}].attributes.sched.dependencies"),
                    target,
                    dependencies,
                );
            }
        }
        if let Some(top) = self.the_one_top(&roots) {
            self.finish(top);
        }
    }

    /// Every entry that is not an extension becomes a service (and what its template
    /// includes): the services by entry name.
    fn make_roots<'e>(&mut self, entries: &'e [ServiceEntry]) -> BTreeMap<&'e str, usize> {
        let mut roots: BTreeMap<&str, usize> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for (i, entry) in entries.iter().enumerate() {
            let field = format!("data[{i}]");
            if let Some(p) = service_template::name_refusal(
                &format!("{field}.name"),
                &entry.name,
                "service name",
            ) {
                self.problems.push(p);
                continue;
            }
            if !seen.insert(entry.name.as_str()) {
                self.refuse(
                    format!("{field}.name"),
                    format!("'{}' names more than one entry", entry.name),
                    "give each entry a name of its own",
                );
                continue;
            }
            if entry.extends.is_some() {
                if entry.template.is_some() || entry.kind.is_some() {
                    self.refuse(
                        field,
                        "an entry that extends a service gives neither serviceTemplate nor \
                         type"
                            .into(),
                        "remove them: the extended service keeps its template",
                    );
                }
                continue;
            }
            if let Some(root) = self.make_root(&field, entry) {
                roots.insert(&entry.name, root);
                self.extend(&field, root, entry, entry.template.is_none());
            }
        }
        roots
    }

    /// The service an entry that is not an extension makes: from its template, or of
    /// its type.
    fn make_root(&mut self, field: &str, entry: &ServiceEntry) -> Option<usize> {
        match (&entry.template, entry.kind) {
            (Some(key), None) => self.instantiate(field, &entry.name, key, None, 0),
            (None, Some(kind)) => Some(self.push(ExpandedService::of_type(&entry.name, kind))),
            _ => {
                self.refuse(
                    field.to_string(),
                    "an entry gives either serviceTemplate or type (or extends)".into(),
                    FIX,
                );
                None
            }
        }
    }

    /// Extensions reach the service at their path: each entry's target, if it extends.
    fn reach_extensions(
        &mut self,
        entries: &[ServiceEntry],
        roots: &BTreeMap<&str, usize>,
    ) -> Vec<Option<usize>> {
        let mut targets = vec![None; entries.len()];
        for (i, entry) in entries.iter().enumerate() {
            if let Some(path) = &entry.extends {
                let field = format!("data[{i}].extends");
                if let Some(target) = self.walk(&field, path, roots) {
                    targets[i] = Some(target);
                    self.extend(&format!("data[{i}]"), target, entry, false);
                }
            }
        }
        targets
    }

    /// The one service no other entry includes; `None` (refused) when there is not one.
    fn the_one_top(&mut self, roots: &BTreeMap<&str, usize>) -> Option<usize> {
        let tops: Vec<&str> = roots
            .iter()
            .filter(|(_, index)| self.out[**index].parent.is_none())
            .map(|(&name, _)| name)
            .collect();
        if tops.len() == 1 {
            return Some(roots[tops[0]]);
        }
        self.refuse(
            "data".into(),
            format!(
                "a creation makes one top-level service; these entries are not included by \
                 another: {}",
                if tops.is_empty() {
                    "none".into()
                } else {
                    tops.join(", ")
                }
            ),
            "include every other entry in a container entry (includedServices), so that one \
             entry holds the rest",
        );
        None
    }

    fn push(&mut self, service: ExpandedService) -> usize {
        self.out.push(service);
        self.out.len() - 1
    }

    /// The service (and what it includes) made from the template `key`.
    fn instantiate(
        &mut self,
        field: &str,
        base: &str,
        key: &TemplateKey,
        parent: Option<usize>,
        depth: usize,
    ) -> Option<usize> {
        if depth > MAX_DEPTH || self.out.len() >= MAX_SERVICES {
            self.refuse(
                field.into(),
                format!(
                    "the services nest deeper than {MAX_DEPTH} or number more than \
                     {MAX_SERVICES}"
                ),
                "make smaller services",
            );
            return None;
        }
        let Some((reference, template)) = (self.templates)(key) else {
            self.refuse(
                format!("{field}.serviceTemplate"),
                format!("no service template with {key}"),
                "name a template GET /rest/service-templates lists",
            );
            return None;
        };
        let mut attributes = template.attributes.clone();
        let template_dependencies = object_at(&mut attributes, "sched").remove("dependencies");
        let index = self.push(ExpandedService {
            base: base.into(),
            kind: template.kind,
            template: Some(reference),
            label: template.label.clone(),
            attributes,
            parent,
            children: Vec::new(),
            dependencies: Vec::new(),
            storage_of: None,
            template_defined: parent.is_some(),
        });
        for included in &template.included_services {
            let key = TemplateKey::Id(included.service_template.id.clone());
            let child =
                self.instantiate(field, &included.local_name, &key, Some(index), depth + 1)?;
            self.out[index].children.push(child);
            self.locals
                .entry(index)
                .or_default()
                .insert(included.local_name.clone(), child);
        }
        if let Some(Value::Array(entries)) = template_dependencies {
            let as_given: Vec<(String, Vec<String>)> = entries
                .iter()
                .filter_map(|e| {
                    let service = e.get("localName")?.as_str()?.to_string();
                    let on = e.get("dependency")?.as_array()?;
                    Some((
                        service,
                        on.iter()
                            .filter_map(|n| n.as_str().map(String::from))
                            .collect(),
                    ))
                })
                .collect();
            self.depend(&format!("{field}.serviceTemplate"), index, as_given);
        }
        Some(index)
    }

    /// The service at `path` (`<top>::<local>[:<local>]+`, rule 1).
    fn walk(&mut self, field: &str, path: &str, roots: &BTreeMap<&str, usize>) -> Option<usize> {
        let advice = "write <top-level entry name>::<localName>[:<localName>]..., each local \
                      name that of a service of the container before it";
        let Some((top, locals)) = path.split_once("::") else {
            self.refuse(field.into(), format!("'{path}' has no '::'"), advice);
            return None;
        };
        let Some(&root) = roots.get(top) else {
            self.refuse(
                field.into(),
                format!("'{path}': no entry of this request is named '{top}'"),
                advice,
            );
            return None;
        };
        let mut at = root;
        for local in locals.split(':') {
            match self.locals.get(&at).and_then(|l| l.get(local)) {
                Some(&child) => at = child,
                None => {
                    self.refuse(
                        field.into(),
                        format!(
                            "'{path}': the service '{}' includes no service '{local}'",
                            self.out[at].base
                        ),
                        advice,
                    );
                    return None;
                }
            }
        }
        Some(at)
    }

    /// Applies an entry's fields to the service `at`. A fresh service (made from a
    /// `type`) takes any job field; one made from a template only the extendable fields
    /// of rule 2.
    fn extend(&mut self, field: &str, at: usize, entry: &ServiceEntry, fresh: bool) {
        if let Some(label) = &entry.label {
            self.out[at].label = Some(label.clone());
        }
        let container = self.out[at].kind == ServiceType::Container;
        if !entry.included_services.is_empty() && !container {
            self.refuse(
                format!("{field}.includedServices"),
                format!(
                    "a {} service cannot include services",
                    self.out[at].kind.as_str()
                ),
                "only a container includes services",
            );
        }
        for (key, value) in &entry.attributes {
            match key.as_str() {
                "sched" => self.extend_sched(field, at, value, fresh),
                "sharedData" => {
                    self.out[at].attributes.insert(key.clone(), value.clone());
                }
                _ if fresh => {
                    self.out[at].attributes.insert(key.clone(), value.clone());
                }
                _ => self.refuse(
                    format!("{field}.attributes.{key}"),
                    "not a field a service made from a template may give".into(),
                    "give only label, includedServices, attributes.sharedData and the \
                     extendable parts of attributes.sched (4.10 rule 2)",
                ),
            }
        }
    }

    fn extend_sched(&mut self, field: &str, at: usize, sched: &Value, fresh: bool) {
        let field = format!("{field}.attributes.sched");
        let Some(sched) = sched.as_object() else {
            self.refuse(field, "must be an object (dependencies, job)".into(), FIX);
            return;
        };
        for (key, value) in sched {
            match key.as_str() {
                // Resolved once every entry is placed (`depend`).
                "dependencies" => {
                    if !dependencies_shape(value) {
                        self.refuse(
                            format!("{field}.dependencies"),
                            "must be a list of {service, dependency: [names]}".into(),
                            FIX,
                        );
                    } else if self.out[at].kind != ServiceType::Container && !value.is_null() {
                        self.refuse(
                            format!("{field}.dependencies"),
                            format!(
                                "a {} service has no dependencies",
                                self.out[at].kind.as_str()
                            ),
                            "give dependencies on the container that holds the services",
                        );
                    }
                }
                "job" => self.extend_job(&format!("{field}.job"), at, value, fresh),
                _ => self.refuse(
                    format!("{field}.{key}"),
                    "is the system's (vc, job id): it cannot be given".into(),
                    "give only dependencies and job",
                ),
            }
        }
    }

    fn extend_job(&mut self, field: &str, at: usize, job: &Value, fresh: bool) {
        let Some(given) = job.as_object() else {
            self.refuse(field.into(), "must be an object".into(), FIX);
            return;
        };
        let mut problems = Vec::new();
        service_template::check_job(given, &mut problems);
        for p in &mut problems {
            p.field = p.field.replacen("attributes.sched.job", field, 1);
        }
        self.problems.extend(problems);
        let job = object_at(object_at(&mut self.out[at].attributes, "sched"), "job");
        for (key, value) in given {
            match key.as_str() {
                "features" | "requestedHosts" => {
                    let list = job.entry(key.clone()).or_insert(Value::Array(Vec::new()));
                    if let (Some(list), Some(more)) = (list.as_array_mut(), value.as_array()) {
                        for item in more {
                            if !list.contains(item) {
                                list.push(item.clone());
                            }
                        }
                    }
                }
                "resources" | "variables" => {
                    let map = object_at(job, key);
                    if let Some(more) = value.as_object() {
                        map.extend(more.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                }
                "image" => {
                    job.insert(key.clone(), value.clone());
                }
                "template" if fresh => {
                    job.insert(key.clone(), value.clone());
                }
                _ => self.problems.push(Refusal::new(
                    format!("{field}.{key}"),
                    "cannot be changed on a service made from a template",
                    "give only features, requestedHosts, resources, variables and image \
                     (4.10 rule 2)",
                )),
            }
        }
    }

    /// Makes the entries named in `names` (of `entries` of the request) services of the
    /// container `at`.
    fn include(&mut self, i: usize, at: usize, names: &[String], roots: &BTreeMap<&str, usize>) {
        for name in names {
            let field = format!("data[{i}].includedServices");
            let Some(&child) = roots.get(name.as_str()) else {
                self.refuse(
                    field,
                    format!("no entry of this request is named '{name}'"),
                    "name another entry (not an extension) of the same request",
                );
                continue;
            };
            if self.out[child].parent.is_some() || child == at || self.is_above(child, at) {
                self.refuse(
                    field,
                    format!("'{name}' is already included, or would include itself"),
                    "include each entry once, in a container that is not inside it",
                );
                continue;
            }
            if self.locals.get(&at).is_some_and(|l| l.contains_key(name)) {
                self.refuse(
                    field,
                    format!("the container already has a service called '{name}'"),
                    "rename the entry",
                );
                continue;
            }
            self.out[child].parent = Some(at);
            self.out[at].children.push(child);
            self.locals
                .entry(at)
                .or_default()
                .insert(name.clone(), child);
        }
    }

    /// Whether `above` contains `below`, at any depth.
    fn is_above(&self, above: usize, below: usize) -> bool {
        let mut at = self.out[below].parent;
        while let Some(p) = at {
            if p == above {
                return true;
            }
            at = self.out[p].parent;
        }
        false
    }

    /// Adds dependencies, by the names of the container's services, to the container `at`.
    fn depend(&mut self, field: &str, at: usize, given: Vec<(String, Vec<String>)>) {
        let locals = self.locals.get(&at).cloned().unwrap_or_default();
        let mut missing = BTreeSet::new();
        for (service, on) in given {
            let Some(&waits) = locals.get(&service) else {
                missing.insert(service);
                continue;
            };
            let mut targets = Vec::new();
            for name in on {
                match locals.get(&name) {
                    Some(&t) => targets.push(t),
                    None => {
                        missing.insert(name);
                    }
                }
            }
            let deps = &mut self.out[at].dependencies;
            match deps.iter_mut().find(|(s, _)| *s == waits) {
                Some((_, existing)) => {
                    for t in targets {
                        if !existing.contains(&t) {
                            existing.push(t);
                        }
                    }
                }
                None => deps.push((waits, targets)),
            }
        }
        if !missing.is_empty() {
            let names: Vec<&str> = missing.iter().map(String::as_str).collect();
            self.refuse(
                field.into(),
                format!(
                    "the container '{}' holds no services {}",
                    self.out[at].base,
                    service_template::quoted(names.iter())
                ),
                "name services of the container: the local names of its template, or the \
                 names of the entries it includes",
            );
        }
    }

    /// The checks on the finished tree: nesting, cycles, what each kind needs.
    fn finish(&mut self, top: usize) {
        if self.out.len() > MAX_SERVICES {
            self.refuse(
                "data".into(),
                format!(
                    "the request makes {} services, more than {MAX_SERVICES}",
                    self.out.len()
                ),
                "make smaller services",
            );
        }
        // However it was made (templates, entries including each other), the tree nests
        // no deeper than a template may.
        let deepest = (0..self.out.len())
            .map(|index| {
                let mut depth = 0;
                let mut at = self.out[index].parent;
                while let Some(parent) = at.filter(|_| depth <= self.out.len()) {
                    depth += 1;
                    at = self.out[parent].parent;
                }
                depth
            })
            .max()
            .unwrap_or(0);
        if deepest > MAX_DEPTH {
            self.refuse(
                "data".into(),
                format!("the services nest {deepest} deep, deeper than {MAX_DEPTH}"),
                "make flatter services",
            );
        }
        // Entries not reached from the top have a parent, so every service is in the tree.
        for index in 0..self.out.len() {
            let service = &self.out[index];
            let edges: BTreeMap<String, Vec<String>> = service
                .dependencies
                .iter()
                .map(|(s, on)| (s.to_string(), on.iter().map(|o| o.to_string()).collect()))
                .collect();
            let edges: BTreeMap<&str, Vec<&str>> = edges
                .iter()
                .map(|(k, v)| (k.as_str(), v.iter().map(String::as_str).collect()))
                .collect();
            if let Some(cycle) = service_template::find_cycle(&edges) {
                let names: Vec<&str> = cycle
                    .iter()
                    .filter_map(|i| i.parse::<usize>().ok())
                    .map(|i| self.out[i].base.as_str())
                    .collect();
                let reason = format!(
                    "the dependencies of '{}' form a cycle: {}",
                    service.base,
                    names.join(" -> ")
                );
                self.refuse(
                    "attributes.sched.dependencies".into(),
                    reason,
                    "remove one dependency of the cycle: otherwise none of its services can \
                     start",
                );
            }
            self.check_kind(index, top);
        }
        if !self.problems.is_empty() {
            return;
        }
        // The top-level service comes first.
        if top != 0 {
            self.reorder(top);
        }
    }

    /// What a service of each kind needs.
    fn check_kind(&mut self, index: usize, top: usize) {
        let service = &self.out[index];
        let (base, kind) = (service.base.clone(), service.kind);
        let job = service
            .attributes
            .get("sched")
            .and_then(|s| s.get("job"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let resources = job.get("resources").and_then(Value::as_object).cloned();
        for (key, value) in resources.into_iter().flatten() {
            if !value.as_f64().is_some_and(|n| n.is_finite() && n >= 0.0) {
                self.refuse(
                    format!("{base}: attributes.sched.job.resources.{key}"),
                    "must be a number, zero or more".into(),
                    FIX,
                );
                continue;
            }
            // No more than a VM request may ask for (`POST /rest/vms`).
            let most = [
                (PROCESSORS, MAX_PROCESSORS),
                (MEMORY, MAX_MEMORY_MB),
                (DISK, MAX_DISK_MB),
            ]
            .into_iter()
            .find(|(keys, _)| keys.iter().any(|k| key.eq_ignore_ascii_case(k)))
            .map(|(_, most)| most);
            if let Some(most) = most
                && value.as_f64().is_some_and(|n| n > most as f64)
            {
                self.refuse(
                    format!("{base}: attributes.sched.job.resources.{key}"),
                    format!("must be at most {most}"),
                    FIX,
                );
            }
        }
        match kind {
            ServiceType::Vm | ServiceType::Pm => {
                for key in ["image", "template"] {
                    let given = job.get(key).and_then(Value::as_str);
                    if given.is_none_or(|s| s.trim().is_empty()) {
                        self.refuse(
                            format!("{base}: attributes.sched.job.{key}"),
                            format!("required for a {} service", kind.as_str()),
                            "give the image the machine boots and the job template that sets \
                             it up",
                        );
                    }
                }
            }
            ServiceType::Storage => self.place_storage(index, top),
            ServiceType::Container => {}
        }
    }

    /// A storage service is a disk of a VM service of its container: the one that
    /// depends on it, else the container's only VM service.
    fn place_storage(&mut self, index: usize, top: usize) {
        let base = self.out[index].base.clone();
        let advice = "put the storage service in a container with the VM service that uses \
                      it, and make that VM service depend on it";
        let size = self.out[index]
            .attributes
            .get("sched")
            .and_then(|s| s.get("job"))
            .and_then(|j| j.get("resources"))
            .and_then(Value::as_object)
            .and_then(|r| r.iter().find(|(k, _)| k.eq_ignore_ascii_case("disk")))
            .and_then(|(_, v)| v.as_f64());
        if !size.is_some_and(|gb| (1.0..=1_000_000.0).contains(&gb)) {
            self.refuse(
                format!("{base}: attributes.sched.job.resources.disk"),
                "a storage service needs its size, in GB (1 or more)".into(),
                FIX,
            );
        }
        let Some(parent) = self.out[index].parent.filter(|_| index != top) else {
            self.refuse(
                base,
                "a storage service outside a container has no VM".into(),
                advice,
            );
            return;
        };
        let vms: Vec<usize> = self.out[parent]
            .children
            .iter()
            .copied()
            .filter(|&c| self.out[c].kind == ServiceType::Vm)
            .collect();
        let dependents: Vec<usize> = self.out[parent]
            .dependencies
            .iter()
            .filter(|(s, on)| vms.contains(s) && on.contains(&index))
            .map(|(s, _)| *s)
            .collect();
        let vm = match (dependents.as_slice(), vms.as_slice()) {
            ([one], _) => *one,
            ([], [only]) => *only,
            _ => {
                self.refuse(
                    base,
                    "no single VM service of its container uses it".into(),
                    advice,
                );
                return;
            }
        };
        let carried = self.out.iter().filter(|s| s.storage_of == Some(vm)).count();
        if carried >= crate::vm::MAX_STORAGE_DISKS {
            self.refuse(
                base,
                format!(
                    "its VM already carries {} disks, the most",
                    crate::vm::MAX_STORAGE_DISKS
                ),
                "use fewer storage services per VM",
            );
            return;
        }
        self.out[index].storage_of = Some(vm);
    }

    /// Moves `top` to the front, renumbering every reference.
    fn reorder(&mut self, top: usize) {
        let n = self.out.len();
        let new_of = |i: usize| -> usize {
            if i == top {
                0
            } else if i < top {
                i + 1
            } else {
                i
            }
        };
        let mut reordered: Vec<Option<ExpandedService>> = vec![None; n];
        for (i, mut s) in std::mem::take(&mut self.out).into_iter().enumerate() {
            s.parent = s.parent.map(new_of);
            s.children = s.children.into_iter().map(new_of).collect();
            s.dependencies = s
                .dependencies
                .into_iter()
                .map(|(w, on)| (new_of(w), on.into_iter().map(new_of).collect()))
                .collect();
            s.storage_of = s.storage_of.map(new_of);
            reordered[new_of(i)] = Some(s);
        }
        self.out = reordered.into_iter().flatten().collect();
    }
}

/// An entry's `attributes.sched.dependencies`, as (service, the services it waits for);
/// a single `dependency` string is a list of one.
fn given_dependencies(entry: &ServiceEntry) -> Option<Vec<(String, Vec<String>)>> {
    let entries = entry
        .attributes
        .get("sched")?
        .get("dependencies")?
        .as_array()?;
    Some(
        entries
            .iter()
            .filter_map(|e| {
                let service = e.get("service").or_else(|| e.get("localName"))?.as_str()?;
                let on = match e.get("dependency")? {
                    Value::String(one) => vec![one.clone()],
                    Value::Array(names) => names
                        .iter()
                        .filter_map(|n| n.as_str().map(String::from))
                        .collect(),
                    _ => return None,
                };
                Some((service.to_string(), on))
            })
            .collect(),
    )
}

/// Whether `value` is null or a list of `{service (or localName), dependency: name or
/// [names]}`.
fn dependencies_shape(value: &Value) -> bool {
    let entry = |e: &Value| {
        let Some(e) = e.as_object() else { return false };
        let named = e
            .get("service")
            .or_else(|| e.get("localName"))
            .is_some_and(Value::is_string);
        let on = match e.get("dependency") {
            Some(Value::String(_)) => true,
            Some(Value::Array(names)) => names.iter().all(Value::is_string),
            _ => false,
        };
        named
            && on
            && e.keys()
                .all(|k| ["service", "localName", "dependency"].contains(&k.as_str()))
    };
    match value {
        Value::Null => true,
        Value::Array(entries) => entries.iter().all(entry),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(name: &str, body: Value) -> (TemplateRef, ServiceTemplate) {
        let mut body = body;
        body["name"] = json!(name);
        for (key, empty) in [
            ("label", Value::Null),
            ("tags", json!([])),
            ("includedServices", json!([])),
            ("attributes", json!({})),
        ] {
            if body.get(key).is_none() {
                body[key] = empty;
            }
        }
        body["modified"] = json!("2026-11-26 10:00:00 UTC");
        body["createdBy"] = json!("admin");
        let reference = TemplateRef {
            id: format!("id-{name}"),
            name: name.into(),
        };
        (reference, serde_json::from_value(body).unwrap())
    }

    fn catalogue() -> Vec<(TemplateRef, ServiceTemplate)> {
        let included = |local: &str, name: &str| json!({"localName": local, "serviceTemplate": {"id": format!("id-{name}"), "name": name}});
        vec![
            template(
                "vm",
                json!({"type": "vm", "attributes": {"sched": {"job": {
                "image": "guest", "template": "genericVM", "features": ["a"],
                "resources": {"procs": 1}}}}}),
            ),
            template(
                "disk",
                json!({"type": "storage", "attributes": {"sched": {"job": {
                "resources": {"disk": 2}}}}}),
            ),
            template(
                "tier",
                json!({"type": "container",
                "includedServices": [included("db", "vm"), included("data", "disk"), included("web", "vm")],
                "attributes": {"sched": {"dependencies": [
                    {"localName": "db", "dependency": ["data"]},
                    {"localName": "web", "dependency": ["db"]}]}}}),
            ),
        ]
    }

    fn run(entries: Value) -> Result<Vec<ExpandedService>, Vec<Refusal>> {
        let all = catalogue();
        let lookup = |key: &TemplateKey| {
            all.iter()
                .find(|(r, _)| match key {
                    TemplateKey::Id(id) => &r.id == id,
                    TemplateKey::Name(name) => &r.name == name,
                })
                .cloned()
        };
        let entries: Vec<ServiceEntry> = entries
            .as_array()
            .unwrap()
            .iter()
            .map(|e| ServiceEntry {
                name: e["name"].as_str().unwrap().into(),
                template: e["serviceTemplate"]
                    .as_str()
                    .map(|n| TemplateKey::Name(n.into())),
                kind: e["type"].as_str().and_then(ServiceType::parse),
                extends: e["extends"].as_str().map(String::from),
                label: None,
                included_services: e["includedServices"]
                    .as_array()
                    .map(|l| {
                        l.iter()
                            .filter_map(|n| n.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default(),
                attributes: e["attributes"].as_object().cloned().unwrap_or_default(),
            })
            .collect();
        expand(&entries, &lookup)
    }

    #[test]
    fn a_template_becomes_its_tree_with_dependencies_and_the_disk_on_its_vm() {
        let expanded = run(json!([{"name": "site", "serviceTemplate": "tier"}])).unwrap();
        let bases: Vec<&str> = expanded.iter().map(|p| p.base.as_str()).collect();
        assert_eq!(bases, ["site", "db", "data", "web"]);
        assert_eq!(expanded[0].children, [1, 2, 3]);
        assert_eq!(expanded[0].dependencies, [(1, vec![2]), (3, vec![1])]);
        // The disk is db's: db depends on it.
        assert_eq!(expanded[2].storage_of, Some(1));
        assert!(
            expanded[0].attributes["sched"]
                .get("dependencies")
                .is_none()
        );
    }

    #[test]
    fn extensions_add_to_lists_and_maps_and_never_take_away() {
        let expanded = run(json!([
            {"name": "site", "serviceTemplate": "tier"},
            {"name": "more", "extends": "site::web", "attributes": {"sched": {"job": {
                "features": ["b", "a"], "resources": {"mem": 512}, "image": "other"}}}}
        ]))
        .unwrap();
        let web = &expanded[3].attributes["sched"]["job"];
        assert_eq!(web["features"], json!(["a", "b"]));
        assert_eq!(web["resources"], json!({"procs": 1, "mem": 512}));
        assert_eq!(web["image"], "other");
        // db, made from the same template, is untouched.
        assert_eq!(expanded[1].attributes["sched"]["job"]["image"], "guest");
    }

    #[test]
    fn the_top_level_entry_comes_first_whatever_the_order_of_entries() {
        let expanded = run(json!([
            {"name": "inner", "serviceTemplate": "vm"},
            {"name": "outer", "type": "container", "includedServices": ["inner"]}
        ]))
        .unwrap();
        assert_eq!(expanded[0].base, "outer");
        assert_eq!(expanded[0].children, [1]);
        assert_eq!(expanded[1].parent, Some(0));
    }

    #[test]
    fn every_broken_rule_is_named() {
        let problems = run(json!([
            {"name": "site", "serviceTemplate": "tier"},
            {"name": "bad", "extends": "site::web", "attributes": {"sched": {"job": {
                "template": "x"}}, "free": 1}}
        ]))
        .unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert!(
            fields.contains(&"data[1].attributes.sched.job.template"),
            "{fields:?}"
        );
        assert!(fields.contains(&"data[1].attributes.free"), "{fields:?}");
    }
}
