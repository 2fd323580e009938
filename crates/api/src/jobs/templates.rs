//! Job templates (spec 2.6, 4.6): `GET /rest/job-templates[/<id>]`, and the defaults a
//! version-2 submission takes from the templates it names.
//!
//! Defaults are merged into the request body before it is read, so a template says what
//! the submitter could have said, in the same words, and the submission is validated
//! once, whole. What the body says wins; then the named templates in their order; then
//! `DEFAULT`.

use axum::Json;
use axum::extract::{Path, State};
use drover_auth::Permission;
use drover_domain::request::summary;
use drover_sched::template::{DEFAULT_TEMPLATE, JobTemplate, JobTemplates};
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::openapi::schema::*;
use crate::params::ListParams;
use crate::reply::list_in_memory;
use crate::routes::{Access, Collection, Routes};

const READ: Access = Access::Needs(Permission::read("job-templates"));

pub(crate) fn register(routes: &mut Routes) {
    let template = || {
        object(&[
            ("id", string()),
            ("description", string_or_null()),
            ("account", string_or_null()),
            ("queue", string_or_null()),
            ("qos", string_or_null()),
            ("jobFlags", strings()),
        ])
    };
    routes.collection(
        Collection {
            path: "/rest/job-templates",
            item_path: "/rest/job-templates/{id}",
            access: READ,
            schema: crate::openapi::schema::required(template(), &["id"]),
            list: (
                "The job templates (the known ids of spec 2.6 and configured ones)",
                "Job templates",
            ),
            item: (
                "One job template",
                "The template's id",
                "The template",
                "No such template",
            ),
        },
        list,
        one,
    );
}

fn render(template: &JobTemplate) -> Value {
    serde_json::to_value(template).expect("a template serializes")
}

async fn list(State(state): State<AppState>, params: ListParams) -> Json<Value> {
    let all: Vec<Value> = state
        .settings()
        .job_templates
        .all()
        .iter()
        .map(render)
        .collect();
    list_in_memory(&all, &params)
}

async fn one(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    state
        .settings()
        .job_templates
        .get(&id)
        .map(|t| Json(render(t)))
        .ok_or_else(|| ApiError::not_found(format!("No job template '{id}'")))
}

/// Fills `body` (a version-2 submission) from the templates it names and `DEFAULT`.
pub fn apply(body: &mut Value, templates: &JobTemplates) -> Result<(), ApiError> {
    let Some(object) = body.as_object_mut() else {
        return Ok(()); // reading the body reports it
    };
    let mut chosen = Vec::new();
    let mut problems = Vec::new();
    if let Some(Value::Array(named)) = object.get("templates") {
        for (i, entry) in named.iter().enumerate() {
            let name = match entry {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) => o.get("name").and_then(Value::as_str),
                _ => None,
            };
            match name.map(|n| (n, templates.get(n))) {
                Some((_, Some(template))) => chosen.push(template),
                Some((n, None)) => problems.push(format!(
                    "templates[{i}]: no job template '{n}' (GET /rest/job-templates lists them)"
                )),
                None => {} // reading the body reports it
            }
        }
    }
    if !problems.is_empty() {
        let mut messages = vec![summary::JOB_NOT_SUBMITTED.to_string()];
        messages.extend(problems);
        return Err(ApiError::new(crate::Kind::BadRequest, messages));
    }
    chosen.extend(templates.get(DEFAULT_TEMPLATE));
    for template in chosen {
        fill(object, template);
    }
    Ok(())
}

/// Sets `key` in `object` to `value` unless it has a non-null value already.
fn default_to(object: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value
        && object.get(key).is_none_or(Value::is_null)
    {
        object.insert(key.to_string(), value);
    }
}

/// The object at `key`, made if missing (a one-element list counts as its element).
fn section<'a>(
    object: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    let slot = object.entry(key).or_insert_with(|| json!({}));
    if slot.is_null() {
        *slot = json!({});
    }
    match slot {
        Value::Object(o) => Some(o),
        Value::Array(items) if items.len() == 1 => items[0].as_object_mut(),
        _ => None, // malformed: reading the body reports it
    }
}

fn fill(body: &mut Map<String, Value>, t: &JobTemplate) {
    default_to(body, "commandFile", t.command_file.clone().map(Value::from));
    default_to(
        body,
        "commandLineArguments",
        t.args.clone().map(Value::from),
    );
    default_to(body, "duration", t.duration_requested.map(Value::from));
    default_to(
        body,
        "vmUsagePolicy",
        t.vm_usage_policy.clone().map(Value::from),
    );
    if (t.account.is_some() || t.queue.is_some() || t.qos.is_some())
        && let Some(credentials) = section(body, "credentials")
    {
        default_to(credentials, "account", t.account.clone().map(Value::from));
        default_to(credentials, "jobClass", t.queue.clone().map(Value::from));
        if !credentials.contains_key("qos") {
            default_to(credentials, "qosRequested", t.qos.clone().map(Value::from));
        }
    }
    if let Some(priority) = t.priority
        && let Some(priorities) = section(body, "priorities")
    {
        default_to(priorities, "user", Some(Value::from(priority)));
    }
    if !t.job_flags.is_empty() {
        let mut flags: Vec<Value> = match body.get("flags") {
            Some(Value::Array(given)) => given.clone(),
            Some(Value::String(one)) => vec![Value::from(one.clone())],
            _ => Vec::new(),
        };
        for flag in &t.job_flags {
            let present = flags
                .iter()
                .any(|f| f.as_str().is_some_and(|f| f.eq_ignore_ascii_case(flag)));
            if !present {
                flags.push(Value::from(flag.clone()));
            }
        }
        body.insert("flags".into(), Value::Array(flags));
    }
    if !t.job_dependencies.is_empty() {
        let dependencies = t
            .job_dependencies
            .iter()
            .map(|d| json!({"name": d.name, "type": d.kind}))
            .collect();
        default_to(body, "dependencies", Some(Value::Array(dependencies)));
    }
    let Some(r) = t.job_template_requirements.first() else {
        return;
    };
    let Some(requirements) = section(body, "requirements") else {
        return;
    };
    default_to(requirements, "taskCount", r.task_count.map(Value::from));
    default_to(
        requirements,
        "architecture",
        r.architecture.clone().map(Value::from),
    );
    default_to(
        requirements,
        "image",
        r.operating_system.clone().map(Value::from),
    );
    if !r.required_features.is_empty() && !requirements.contains_key("features") {
        default_to(
            requirements,
            "featuresRequested",
            Some(json!(r.required_features)),
        );
    }
    let per_task = [
        ("processors", r.required_processors_per_task.map(u64::from)),
        ("memory", r.required_memory_per_task),
        ("disk", r.required_disk_per_task),
        ("swap", r.required_swap_per_task),
    ];
    let generic = r
        .generic_resources
        .iter()
        .map(|(k, v)| (k.as_str(), Some(*v)));
    let wanted: Vec<(&str, Option<f64>)> = per_task
        .iter()
        .map(|(k, v)| (*k, v.map(|n| n as f64)))
        .chain(generic)
        .filter(|(_, v)| v.is_some())
        .collect();
    if wanted.is_empty() {
        return;
    }
    if let Some(resources) = section(requirements, "resourcesPerTask") {
        for (name, amount) in wanted {
            default_to(resources, name, amount.map(|n| json!({ "dedicated": n })));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_sched::template::TemplateRequirements;

    fn templates() -> JobTemplates {
        JobTemplates::with(&[
            JobTemplate {
                id: "DEFAULT".into(),
                account: Some("general".into()),
                duration_requested: Some(3600),
                ..JobTemplate::default()
            },
            JobTemplate {
                id: "gpu".into(),
                queue: Some("gpu".into()),
                job_flags: vec!["RESTARTABLE".into()],
                job_template_requirements: vec![TemplateRequirements {
                    required_processors_per_task: Some(4),
                    generic_resources: [("gpu".to_string(), 1.0)].into(),
                    ..TemplateRequirements::default()
                }],
                ..JobTemplate::default()
            },
        ])
        .unwrap()
    }

    #[test]
    fn the_body_wins_then_named_templates_then_default() {
        let mut body = json!({
            "commandFile": "/bin/true",
            "templates": [{"name": "gpu"}],
            "flags": ["SUSPENDABLE"],
            "credentials": {"account": "mine"},
            "requirements": [{"resourcesPerTask": {"memory": {"dedicated": 512}}}]
        });
        apply(&mut body, &templates()).unwrap();
        assert_eq!(
            body["credentials"],
            json!({"account": "mine", "jobClass": "gpu"})
        );
        assert_eq!(body["duration"], 3600);
        assert_eq!(body["flags"], json!(["SUSPENDABLE", "RESTARTABLE"]));
        assert_eq!(
            body["requirements"][0]["resourcesPerTask"],
            json!({"memory": {"dedicated": 512}, "processors": {"dedicated": 4.0}, "gpu": {"dedicated": 1.0}})
        );
        let mut unknown = json!({"commandFile": "/bin/true", "templates": ["nope"]});
        let e = apply(&mut unknown, &templates()).unwrap_err();
        assert!(format!("{e:?}").contains("no job template 'nope'"));
    }
}
