//! Service templates (spec 2.12, 4.11, part 8): the recipes services are made from (a
//! container of other services, a VM, a physical machine or storage), and the rules a
//! template must satisfy. The serde form is the stored one and is the wire shape (less
//! `id` and `version`, which the store keeps), so a list query reads it as it reads the
//! answers.
//!
//! Plain values and rules only: which other templates exist (the `serviceTemplate` of
//! each included service, unique names, cycles of inclusion, who uses a template) is the
//! cloud service's to check.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::validate;

/// What a service made from a template is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceType {
    /// Holds other services (`includedServices`), started in the order of its
    /// dependencies.
    Container,
    Vm,
    Storage,
    /// A physical machine.
    Pm,
}

impl ServiceType {
    pub const ALL: [ServiceType; 4] = [
        ServiceType::Container,
        ServiceType::Vm,
        ServiceType::Storage,
        ServiceType::Pm,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::Container => "container",
            ServiceType::Vm => "vm",
            ServiceType::Storage => "storage",
            ServiceType::Pm => "pm",
        }
    }

    /// Case-insensitive.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(text))
    }
}

/// Another template, as an included service names it once resolved: both its id (what
/// stays true) and its name (what a list query asks for; kept current on a rename).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRef {
    pub id: String,
    pub name: String,
}

/// A service of a container template: its name inside the template and its template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IncludedService {
    pub local_name: String,
    pub service_template: TemplateRef,
}

/// A service template as stored (without its id and version, which the store keeps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceTemplate {
    pub name: String,
    pub label: Option<String>,
    #[serde(rename = "type")]
    pub kind: ServiceType,
    /// The wire date (UTC) of the creation or the last change.
    pub modified: String,
    /// The user who created it.
    pub created_by: String,
    pub tags: Vec<String>,
    pub included_services: Vec<IncludedService>,
    /// `sched` (checked: `dependencies`, `job`) and free-form parts (a portal's object...).
    pub attributes: Map<String, Value>,
}

/// How a request names another template: `"name"`, `{name}` or `{id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateKey {
    Id(String),
    Name(String),
}

impl fmt::Display for TemplateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateKey::Id(id) => write!(f, "id '{id}'"),
            TemplateKey::Name(name) => write!(f, "name '{name}'"),
        }
    }
}

/// An included service as a request gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncludedChange {
    pub local_name: String,
    pub service_template: TemplateKey,
}

/// What a creation or a change gives (`None`: not given). A change replaces each list
/// and object it gives as a whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceTemplateChange {
    pub name: Option<String>,
    pub label: Option<String>,
    pub kind: Option<ServiceType>,
    pub tags: Option<Vec<String>>,
    /// As named; the cloud service resolves them.
    pub included_services: Option<Vec<IncludedChange>>,
    pub attributes: Option<Map<String, Value>>,
    /// The version the client read (only on a change).
    pub version: Option<i64>,
}

/// A rule a template or a request breaks: the field, why, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub reason: String,
    pub advice: String,
}

impl Refusal {
    pub fn new(
        field: impl Into<String>,
        reason: impl Into<String>,
        advice: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
            advice: advice.into(),
        }
    }

    /// The messages of a refusal of these problems: `summary`, each reason, then each
    /// distinct piece of advice (spec 7.1: what was not done, why, what to do).
    pub fn messages(summary: &str, refusals: &[Refusal]) -> Vec<String> {
        let mut messages = vec![summary.to_string()];
        messages.extend(refusals.iter().map(Refusal::to_string));
        for refusal in refusals {
            if !messages[1 + refusals.len()..].contains(&refusal.advice) {
                messages.push(refusal.advice.clone());
            }
        }
        messages
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// The longest name or local name, and the longest label, tag or `sched.job` string.
pub const MAX_NAME: usize = 128;
pub const MAX_TEXT: usize = 1024;

/// The characters of part 8 a template name may hold besides ASCII letters, digits and
/// spaces.
pub const NAME_PUNCTUATION: &str = "-.?@~#[]<>|=&()*{}`$";

/// Why `name` cannot name a service template (spec part 8, 4.11 (d)), with advice; the
/// same rule holds for the local name of an included service (`what`).
pub(crate) fn name_refusal(field: &str, name: &str, what: &str) -> Option<Refusal> {
    let advice = format!(
        "use only letters, digits, spaces and {NAME_PUNCTUATION}, 1 to {MAX_NAME} of them, \
         not beginning or ending with a space"
    );
    if name.contains(':') {
        return Some(Refusal::new(
            field,
            format!("the {what} '{name}' contains a colon"),
            "remove the colons: they separate the local names of an `extends` path \
             (service::local:local)",
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || c == ' ' || NAME_PUNCTUATION.contains(c)))
    {
        return Some(Refusal::new(
            field,
            format!("the {what} '{name}' contains {c:?}, which it may not"),
            advice,
        ));
    }
    let wrong = if name.is_empty() {
        "is empty"
    } else if name.len() > MAX_NAME {
        "is too long"
    } else if name.starts_with(' ') || name.ends_with(' ') {
        "begins or ends with a space"
    } else {
        return None;
    };
    Some(Refusal::new(
        field,
        format!("the {what} '{name}' {wrong}"),
        advice,
    ))
}

/// Whether `text` has the form of a service template id (24 hex digits, either case).
pub fn looks_like_id(text: &str) -> bool {
    text.len() == 24 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Why `name` cannot name a service template: part 8's characters, no colon, and not
/// the form of an id, so that `/rest/service-templates/<id|name>` is never ambiguous.
pub fn name_problem(name: &str) -> Option<Refusal> {
    name_refusal("name", name, "name").or_else(|| {
        looks_like_id(name).then(|| {
            Refusal::new(
                "name",
                format!("the name '{name}' has the form of a service template id (24 hex digits)"),
                "choose a name that is not 24 hexadecimal digits",
            )
        })
    })
}

const FIX: &str = "correct the field named and send the template again";
const CONTAINERS_ONLY: &str = "only a container template includes services and orders them by \
                               dependencies: make the template a container, or remove them";
const SCHED_KEYS: &[&str] = &["dependencies", "job"];
const JOB_KEYS: &[&str] = &[
    "features",
    "image",
    "requestedHosts",
    "resources",
    "template",
    "variables",
];

impl ServiceTemplate {
    /// The template a creation makes, or every problem of it (the references to other
    /// templates excepted: the caller resolves `included`).
    pub fn create(
        change: &ServiceTemplateChange,
        included: Vec<IncludedService>,
        created_by: &str,
        now: &str,
    ) -> Result<ServiceTemplate, Vec<Refusal>> {
        let mut problems = Vec::new();
        if change.version.is_some() {
            problems.push(Refusal::new(
                "version",
                "is set by the service",
                "leave version out of a creation",
            ));
        }
        for (field, missing) in [
            ("name", change.name.is_none()),
            ("type", change.kind.is_none()),
        ] {
            if missing {
                problems.push(Refusal::new(
                    field,
                    "required",
                    format!(
                        "give the template's {field} (type: one of container, vm, storage, pm)"
                    ),
                ));
            }
        }
        let mut template = ServiceTemplate {
            name: String::new(),
            label: None,
            kind: change.kind.unwrap_or(ServiceType::Container),
            modified: now.into(),
            created_by: created_by.into(),
            tags: Vec::new(),
            included_services: Vec::new(),
            attributes: Map::new(),
        };
        template.apply(change, Some(included), now);
        match template.check() {
            Ok(()) if problems.is_empty() => Ok(template),
            checked => {
                // The rules the given fields break too, but not those of the missing.
                for p in checked.err().unwrap_or_default() {
                    if !problems.iter().any(|q| q.field == p.field) {
                        problems.push(p);
                    }
                }
                Err(problems)
            }
        }
    }

    /// This template with `change` applied (`included`: the resolved included services,
    /// when the change gives them), or every problem of the result.
    pub fn changed(
        &self,
        change: &ServiceTemplateChange,
        included: Option<Vec<IncludedService>>,
        now: &str,
    ) -> Result<ServiceTemplate, Vec<Refusal>> {
        let mut template = self.clone();
        template.apply(change, included, now);
        template.check()?;
        Ok(template)
    }

    fn apply(
        &mut self,
        change: &ServiceTemplateChange,
        included: Option<Vec<IncludedService>>,
        now: &str,
    ) {
        let c = change.clone();
        if let Some(v) = c.name {
            self.name = v;
        }
        if let Some(v) = c.label {
            self.label = Some(v);
        }
        if let Some(v) = c.kind {
            self.kind = v;
        }
        if let Some(v) = c.tags {
            self.tags = v;
        }
        if let Some(v) = included {
            self.included_services = v;
        }
        if let Some(mut v) = c.attributes {
            normalize_dependencies(&mut v);
            self.attributes = v;
        }
        self.modified = now.into();
    }

    /// The ids of the templates this one includes.
    pub fn includes(&self) -> impl Iterator<Item = &str> {
        self.included_services
            .iter()
            .map(|s| s.service_template.id.as_str())
    }

    /// Every rule of spec 2.12, 4.11 and part 8 this template breaks (references to
    /// other templates excepted).
    pub fn check(&self) -> Result<(), Vec<Refusal>> {
        let mut problems = Vec::new();
        if let Some(p) = name_problem(&self.name) {
            problems.push(p);
        }
        if let Some(label) = &self.label
            && label.len() > MAX_TEXT
        {
            problems.push(Refusal::new(
                "label",
                format!("is longer than {MAX_TEXT} bytes"),
                "shorten it",
            ));
        }
        for (i, tag) in self.tags.iter().enumerate() {
            if tag.is_empty() || tag.len() > MAX_TEXT {
                problems.push(Refusal::new(
                    format!("tags[{i}]"),
                    format!("must be 1 to {MAX_TEXT} bytes"),
                    FIX,
                ));
            }
        }
        let container = self.kind == ServiceType::Container;
        if !container && !self.included_services.is_empty() {
            problems.push(Refusal::new(
                "includedServices",
                format!("a {} template cannot include services", self.kind.as_str()),
                CONTAINERS_ONLY,
            ));
        }
        let mut seen = BTreeSet::new();
        let mut repeated = BTreeSet::new();
        for (i, service) in self.included_services.iter().enumerate() {
            let field = format!("includedServices[{i}].localName");
            if let Some(p) = name_refusal(&field, &service.local_name, "local name") {
                problems.push(p);
            }
            if !seen.insert(service.local_name.as_str()) {
                repeated.insert(service.local_name.as_str());
            }
        }
        if !repeated.is_empty() {
            problems.push(Refusal::new(
                "includedServices",
                format!(
                    "the local names {} are given to more than one included service",
                    quoted(repeated.iter())
                ),
                "give each included service a local name of its own within the template",
            ));
        }
        self.check_sched(&seen, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// `attributes.sched`: its shape, the dependencies (containers only, between
    /// included services, without cycles) and what a `vm` or `pm` template needs.
    fn check_sched(&self, local_names: &BTreeSet<&str>, problems: &mut Vec<Refusal>) {
        let needs_job = matches!(self.kind, ServiceType::Vm | ServiceType::Pm);
        let sched = match self.attributes.get("sched") {
            None | Some(Value::Null) => None,
            Some(Value::Object(sched)) => Some(sched),
            Some(_) => {
                problems.push(Refusal::new(
                    "attributes.sched",
                    "must be an object (dependencies, job)",
                    FIX,
                ));
                return;
            }
        };
        let empty = Map::new();
        let sched = sched.unwrap_or(&empty);
        for key in sched.keys().filter(|k| !SCHED_KEYS.contains(&k.as_str())) {
            problems.push(Refusal::new(
                format!("attributes.sched.{key}"),
                "not a field of a template's sched (dependencies, job)",
                "remove it: the rest of sched is the service's own",
            ));
        }
        match sched.get("dependencies") {
            None | Some(Value::Null) => {}
            Some(Value::Array(entries)) if entries.is_empty() => {}
            Some(Value::Array(_)) if self.kind != ServiceType::Container => {
                problems.push(Refusal::new(
                    "attributes.sched.dependencies",
                    format!("a {} template cannot have dependencies", self.kind.as_str()),
                    CONTAINERS_ONLY,
                ));
            }
            Some(Value::Array(entries)) => check_dependencies(entries, local_names, problems),
            Some(_) => problems.push(Refusal::new(
                "attributes.sched.dependencies",
                "must be a list of {localName, dependency: [localName...]}",
                FIX,
            )),
        }
        let job = match sched.get("job") {
            None | Some(Value::Null) => None,
            Some(Value::Object(job)) => Some(job),
            Some(_) => {
                problems.push(Refusal::new(
                    "attributes.sched.job",
                    "must be an object",
                    FIX,
                ));
                return;
            }
        };
        if let Some(job) = job {
            check_job(job, problems);
        }
        if needs_job {
            for key in ["image", "template"] {
                let given = job
                    .and_then(|j| j.get(key))
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.trim().is_empty());
                if !given {
                    problems.push(Refusal::new(
                        format!("attributes.sched.job.{key}"),
                        format!("required for a {} template", self.kind.as_str()),
                        "give the image the machine boots (attributes.sched.job.image) and \
                         the job template that sets it up (attributes.sched.job.template)",
                    ));
                }
            }
        }
    }
}

/// Renames `service` to `localName` in dependency entries (the name services use, 2.11),
/// and makes a single `dependency` a list of one, so that the stored form has one
/// spelling.
fn normalize_dependencies(attributes: &mut Map<String, Value>) {
    let Some(Value::Array(entries)) = attributes
        .get_mut("sched")
        .and_then(|s| s.as_object_mut())
        .and_then(|s| s.get_mut("dependencies"))
    else {
        return;
    };
    for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
        if !entry.contains_key("localName")
            && let Some(service) = entry.remove("service")
        {
            entry.insert("localName".into(), service);
        }
        if let Some(one @ Value::String(_)) = entry.get_mut("dependency") {
            *one = Value::Array(vec![one.take()]);
        }
    }
}

fn check_dependencies(
    entries: &[Value],
    local_names: &BTreeSet<&str>,
    problems: &mut Vec<Refusal>,
) {
    let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut missing = BTreeSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let field = format!("attributes.sched.dependencies[{i}]");
        let Some(entry) = entry.as_object() else {
            problems.push(Refusal::new(
                field,
                "must be an object {localName, dependency: [localName...]}",
                FIX,
            ));
            continue;
        };
        for key in entry
            .keys()
            .filter(|k| !["localName", "dependency"].contains(&k.as_str()))
        {
            problems.push(Refusal::new(
                format!("{field}.{key}"),
                "not a field of a dependency (localName, dependency)",
                FIX,
            ));
        }
        let Some(service) = entry.get("localName").and_then(Value::as_str) else {
            problems.push(Refusal::new(
                format!("{field}.localName"),
                "required: the local name of the included service that waits",
                FIX,
            ));
            continue;
        };
        let names: Vec<&str> = match entry.get("dependency") {
            Some(Value::Array(names)) if names.iter().all(Value::is_string) => {
                names.iter().filter_map(Value::as_str).collect()
            }
            Some(Value::String(name)) => vec![name.as_str()],
            _ => {
                problems.push(Refusal::new(
                    format!("{field}.dependency"),
                    "required: a list of the local names the service waits for",
                    FIX,
                ));
                continue;
            }
        };
        for name in std::iter::once(service).chain(names.iter().copied()) {
            if !local_names.contains(name) {
                missing.insert(name);
            }
        }
        edges.entry(service).or_default().extend(names);
    }
    if !missing.is_empty() {
        problems.push(Refusal::new(
            "attributes.sched.dependencies",
            format!(
                "the dependencies name services the template does not include: {}",
                quoted(missing.iter())
            ),
            "name only the localName of an entry of includedServices, or include the \
             templates they stand for",
        ));
        return;
    }
    if let Some(cycle) = find_cycle(&edges) {
        problems.push(Refusal::new(
            "attributes.sched.dependencies",
            format!("the dependencies form a cycle: {}", cycle.join(" -> ")),
            "remove one of the dependencies of the cycle: otherwise none of its services \
             can start",
        ));
    }
}

/// A cycle of `edges` (each node to the nodes it waits for), as the path that closes it.
pub(crate) fn find_cycle<'a>(edges: &BTreeMap<&'a str, Vec<&'a str>>) -> Option<Vec<&'a str>> {
    // Iterative depth-first search: 0 unvisited, 1 on the path, 2 done.
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    for &start in edges.keys() {
        if state.get(start).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut path: Vec<(&str, usize)> = vec![(start, 0)];
        state.insert(start, 1);
        while let Some((node, next)) = path.last_mut() {
            let targets = edges.get(*node).map(Vec::as_slice).unwrap_or(&[]);
            if let Some(&target) = targets.get(*next) {
                *next += 1;
                match state.get(target).copied().unwrap_or(0) {
                    0 => {
                        state.insert(target, 1);
                        path.push((target, 0));
                    }
                    1 => {
                        let from = path.iter().position(|(n, _)| *n == target).unwrap_or(0);
                        let mut cycle: Vec<&str> = path[from..].iter().map(|(n, _)| *n).collect();
                        cycle.push(target);
                        return Some(cycle);
                    }
                    _ => {}
                }
            } else {
                state.insert(node, 2);
                path.pop();
            }
        }
    }
    None
}

pub(crate) fn check_job(job: &Map<String, Value>, problems: &mut Vec<Refusal>) {
    let field = |key: &str| format!("attributes.sched.job.{key}");
    for key in job.keys().filter(|k| !JOB_KEYS.contains(&k.as_str())) {
        problems.push(Refusal::new(
            field(key),
            format!("not a field of a template's job ({})", JOB_KEYS.join(", ")),
            "remove it",
        ));
    }
    for key in ["image", "template"] {
        match job.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.len() <= MAX_TEXT => {}
            Some(_) => problems.push(Refusal::new(
                field(key),
                format!("must be a string of at most {MAX_TEXT} bytes"),
                FIX,
            )),
        }
    }
    for key in ["features", "requestedHosts"] {
        match job.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => {}
            Some(_) => problems.push(Refusal::new(field(key), "must be a list of strings", FIX)),
        }
    }
    match job.get("resources") {
        None | Some(Value::Null | Value::Object(_)) => {}
        Some(_) => problems.push(Refusal::new(
            field("resources"),
            "must be an object (procs, mem, disk, generic resources)",
            FIX,
        )),
    }
    match job.get("variables") {
        None | Some(Value::Null) => {}
        Some(Value::Object(variables)) => {
            for (name, value) in variables {
                let value = match value {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => {
                        problems.push(Refusal::new(
                            format!("{}.{name}", field("variables")),
                            "must be a string",
                            FIX,
                        ));
                        continue;
                    }
                };
                if let Err(why) = validate::variable_name(name)
                    .and_then(|_| validate::variable_value(name, &value))
                {
                    let why = why.strip_prefix("variables: ").unwrap_or(&why).to_string();
                    problems.push(Refusal::new(field("variables"), why, FIX));
                }
            }
        }
        Some(_) => problems.push(Refusal::new(
            field("variables"),
            "must be an object of name: value",
            FIX,
        )),
    }
}

/// `'a', 'b'`.
pub(crate) fn quoted<'a>(names: impl Iterator<Item = &'a &'a str>) -> String {
    names
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-11-25 10:00:00 UTC";

    fn vm() -> ServiceTemplateChange {
        ServiceTemplateChange {
            name: Some("web server".into()),
            kind: Some(ServiceType::Vm),
            attributes: json!({"sched": {"job": {"image": "centos", "template": "vm"}}})
                .as_object()
                .cloned(),
            ..ServiceTemplateChange::default()
        }
    }

    fn included(names: &[&str]) -> Vec<IncludedService> {
        names
            .iter()
            .map(|n| IncludedService {
                local_name: n.to_string(),
                service_template: TemplateRef {
                    id: "0".repeat(24),
                    name: "web server".into(),
                },
            })
            .collect()
    }

    fn container(dependencies: Value) -> ServiceTemplateChange {
        ServiceTemplateChange {
            name: Some("stack".into()),
            kind: Some(ServiceType::Container),
            attributes: json!({"sched": {"dependencies": dependencies},
                               "portal": {"name": "Stack", "form": [1]}})
            .as_object()
            .cloned(),
            ..ServiceTemplateChange::default()
        }
    }

    fn fields(problems: Vec<Refusal>) -> Vec<String> {
        problems.into_iter().map(|p| p.field).collect()
    }

    fn reasons(problems: Vec<Refusal>) -> String {
        problems
            .iter()
            .map(Refusal::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_stored_form_is_the_wire_shape() {
        let template = ServiceTemplate::create(&vm(), vec![], "admin", NOW).unwrap();
        let stored = serde_json::to_value(&template).unwrap();
        assert_eq!(
            stored,
            json!({"name": "web server", "label": null, "type": "vm", "modified": NOW,
                   "createdBy": "admin", "tags": [], "includedServices": [],
                   "attributes": {"sched": {"job": {"image": "centos", "template": "vm"}}}})
        );
        let back: ServiceTemplate = serde_json::from_value(stored).unwrap();
        assert_eq!(back, template);
    }

    #[test]
    fn names_follow_part_8() {
        for good in [
            "web server",
            "a-b.c?d@e~f#[g]<h>|i=j&(k)*{l}`m$",
            "X1",
            "abc",
        ] {
            assert_eq!(name_problem(good), None, "{good}");
        }
        for (bad, words) in [
            ("a:b", "colon"),
            ("a_b", "'_'"),
            ("a/b", "'/'"),
            ("é", "'é'"),
            ("", "is empty"),
            (" a", "begins or ends with a space"),
            ("0123456789abcdef01234567", "form of a service template id"),
            ("0123456789ABCDEF01234567", "form of a service template id"),
        ] {
            let refusal = name_problem(bad).unwrap_or_else(|| panic!("{bad}"));
            assert!(refusal.reason.contains(words), "{bad}: {refusal:?}");
            assert!(!refusal.advice.is_empty());
        }
        assert!(name_problem(&"n".repeat(MAX_NAME + 1)).is_some());
        // 24 characters that are not hex digits are a name.
        assert_eq!(name_problem("abcdefghijklmnopqrstuvwx"), None);
    }

    #[test]
    fn creation_needs_a_name_and_a_type_and_refuses_a_version() {
        let problems = ServiceTemplate::create(
            &ServiceTemplateChange {
                version: Some(1),
                ..ServiceTemplateChange::default()
            },
            vec![],
            "admin",
            NOW,
        )
        .unwrap_err();
        assert_eq!(fields(problems), ["version", "name", "type"]);
    }

    #[test]
    fn vm_and_pm_templates_need_an_image_and_a_job_template() {
        for kind in [ServiceType::Vm, ServiceType::Pm] {
            let change = ServiceTemplateChange {
                kind: Some(kind),
                attributes: Some(Map::new()),
                ..vm()
            };
            let problems = ServiceTemplate::create(&change, vec![], "a", NOW).unwrap_err();
            assert_eq!(
                fields(problems),
                [
                    "attributes.sched.job.image",
                    "attributes.sched.job.template"
                ]
            );
        }
        let storage = ServiceTemplateChange {
            kind: Some(ServiceType::Storage),
            attributes: None,
            ..vm()
        };
        assert!(ServiceTemplate::create(&storage, vec![], "a", NOW).is_ok());
    }

    #[test]
    fn only_containers_include_services_and_have_dependencies() {
        let problems = ServiceTemplate::create(&vm(), included(&["a"]), "a", NOW).unwrap_err();
        assert_eq!(fields(problems), ["includedServices"]);
        let mut attributes = vm().attributes.unwrap();
        attributes["sched"]["dependencies"] = json!([{"localName": "a", "dependency": ["b"]}]);
        let change = ServiceTemplateChange {
            attributes: Some(attributes),
            ..vm()
        };
        let problems = ServiceTemplate::create(&change, vec![], "a", NOW).unwrap_err();
        assert_eq!(fields(problems), ["attributes.sched.dependencies"]);
    }

    #[test]
    fn dependencies_name_included_services_without_cycles() {
        let ok = container(json!([{"localName": "web", "dependency": ["db"]},
                                  {"service": "db", "dependency": []},
                                  {"localName": "db", "dependency": "web2"}]));
        let template =
            ServiceTemplate::create(&ok, included(&["web", "db", "web2"]), "a", NOW).unwrap();
        // `service` is stored as `localName`; the free-form parts are kept.
        assert_eq!(
            template.attributes["sched"]["dependencies"][1],
            json!({"localName": "db", "dependency": []})
        );
        assert_eq!(
            template.attributes["sched"]["dependencies"][2]["dependency"],
            json!(["web2"])
        );
        assert_eq!(template.attributes["portal"]["form"], json!([1]));

        let missing = container(json!([{"localName": "web", "dependency": ["db", "cache"]},
                                       {"localName": "queue", "dependency": ["db"]}]));
        let problems =
            ServiceTemplate::create(&missing, included(&["web", "db"]), "a", NOW).unwrap_err();
        let text = reasons(problems);
        assert!(text.contains("'cache', 'queue'"), "{text}");

        let cycle = container(json!([{"localName": "a", "dependency": ["b"]},
                                     {"localName": "b", "dependency": ["c"]},
                                     {"localName": "c", "dependency": ["a"]}]));
        let problems =
            ServiceTemplate::create(&cycle, included(&["a", "b", "c"]), "a", NOW).unwrap_err();
        assert!(reasons(problems).contains("a -> b -> c -> a"));
        let own = container(json!([{"localName": "a", "dependency": ["a"]}]));
        let problems = ServiceTemplate::create(&own, included(&["a"]), "a", NOW).unwrap_err();
        assert!(reasons(problems).contains("cycle: a -> a"));

        for (bad, field) in [
            (json!([{"dependency": ["a"]}]), "[0].localName"),
            (json!([{"localName": "a"}]), "[0].dependency"),
            (
                json!([{"localName": "a", "dependency": [1]}]),
                "[0].dependency",
            ),
            (
                json!([{"localName": "a", "dependency": [], "x": 1}]),
                "[0].x",
            ),
            (json!([3]), "[0]"),
            (json!({"a": 1}), "dependencies"),
        ] {
            let problems =
                ServiceTemplate::create(&container(bad.clone()), included(&["a"]), "a", NOW)
                    .unwrap_err();
            assert!(
                fields(problems.clone()).iter().any(|f| f.ends_with(field)),
                "{bad}: {problems:?}"
            );
        }
    }

    #[test]
    fn local_names_are_unique_names() {
        let change = container(json!([]));
        let problems =
            ServiceTemplate::create(&change, included(&["a", "b", "a", "a:b"]), "a", NOW)
                .unwrap_err();
        assert_eq!(
            fields(problems.clone()),
            ["includedServices[3].localName", "includedServices"]
        );
        assert!(reasons(problems).contains("'a' are given to more than one"));
    }

    #[test]
    fn the_job_and_sched_have_known_fields_of_known_types() {
        let job = |job: Value| ServiceTemplateChange {
            attributes: json!({"sched": {"job": job}}).as_object().cloned(),
            ..vm()
        };
        let base = json!({"image": "i", "template": "t"});
        let with = |k: &str, v: Value| {
            let mut j = base.clone();
            j[k] = v;
            job(j)
        };
        let ok = with("variables", json!({"A": "1", "B": 2}));
        assert!(ServiceTemplate::create(&ok, vec![], "a", NOW).is_ok());
        for (change, field) in [
            (with("id", json!("1")), "attributes.sched.job.id"),
            (
                with("features", json!("gpu")),
                "attributes.sched.job.features",
            ),
            (
                with("requestedHosts", json!([1])),
                "attributes.sched.job.requestedHosts",
            ),
            (
                with("resources", json!(4)),
                "attributes.sched.job.resources",
            ),
            (
                with("variables", json!({"A B": "1"})),
                "attributes.sched.job.variables",
            ),
            (
                with("variables", json!({"A": "x;y"})),
                "attributes.sched.job.variables",
            ),
            (
                with("variables", json!({"A": [1]})),
                "attributes.sched.job.variables.A",
            ),
            (with("image", json!(3)), "attributes.sched.job.image"),
            (job(json!("x")), "attributes.sched.job"),
        ] {
            let problems = ServiceTemplate::create(&change, vec![], "a", NOW).unwrap_err();
            assert!(
                fields(problems.clone()).contains(&field.to_string()),
                "{field}: {problems:?}"
            );
        }
        let vc = ServiceTemplateChange {
            attributes: json!({"sched": {"vc": {"id": "x"}, "job": base}})
                .as_object()
                .cloned(),
            ..vm()
        };
        let problems = ServiceTemplate::create(&vc, vec![], "a", NOW).unwrap_err();
        assert_eq!(fields(problems), ["attributes.sched.vc"]);
    }

    #[test]
    fn a_change_is_checked_as_a_whole_and_stamps_the_date() {
        let template =
            ServiceTemplate::create(&container(json!([])), included(&["a"]), "admin", NOW).unwrap();
        let later = "2026-11-26 10:00:00 UTC";
        let to_vm = ServiceTemplateChange {
            kind: Some(ServiceType::Vm),
            attributes: vm().attributes,
            ..ServiceTemplateChange::default()
        };
        assert_eq!(
            fields(template.changed(&to_vm, None, later).unwrap_err()),
            ["includedServices"]
        );
        let changed = template.changed(&to_vm, Some(vec![]), later).unwrap();
        assert_eq!(changed.modified, later);
        assert_eq!(changed.created_by, "admin");
        assert_eq!(changed.name, "stack");
    }

    #[test]
    fn refusals_answer_summary_reasons_and_advice() {
        let problems = vec![
            Refusal::new("a", "bad", "fix it"),
            Refusal::new("b", "worse", "fix it"),
        ];
        assert_eq!(
            Refusal::messages("Not done", &problems),
            ["Not done", "a: bad", "b: worse", "fix it"]
        );
    }
}
