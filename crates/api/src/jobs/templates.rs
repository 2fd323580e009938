//! Job templates (spec 2.6, 4.6): `GET /rest/job-templates[/<id>]`, and the defaults a
//! version-2 submission takes from the templates it names.
//!
//! The submission is read, then takes the defaults of its templates
//! (`drover_domain::template`): what the body gives wins; then the named templates in
//! their order; then `DEFAULT`. Reading the body tells which fields it gave.

use axum::Json;
use axum::extract::{Path, State};
use drover_auth::Permission;
use drover_domain::request::summary;
use drover_sched::job::JobSpec;
use drover_sched::template::{Given, JobTemplate, JobTemplates};
use serde_json::{Map, Value};

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

/// Fills `spec`, read from the version-2 submission `body`, from the templates it names
/// and `DEFAULT` (`JobTemplates::apply`): what `body` gives is kept.
pub fn apply(spec: &mut JobSpec, body: &Value, templates: &JobTemplates) -> Result<(), ApiError> {
    templates.apply(spec, given(body)).map_err(|unknown| {
        let mut messages = vec![summary::JOB_NOT_SUBMITTED.to_string()];
        messages.extend(
            unknown
                .iter()
                .map(|u| format!("{u} (GET /rest/job-templates lists them)")),
        );
        ApiError::new(crate::Kind::BadRequest, messages)
    })
}

/// What a version-2 submission gives of the fields templates fill: each field present
/// and not `null` (`credentials.qos` and `requirements.features` even `null`, as they
/// stand for the fields templates fill).
fn given(body: &Value) -> Given {
    let none = Map::new();
    let body = body.as_object().unwrap_or(&none);
    let said = |object: Option<&Map<String, Value>>, key: &str| {
        object.is_some_and(|o| o.get(key).is_some_and(|v| !v.is_null()))
    };
    let credentials = section(body, "credentials");
    let requirements = section(body, "requirements");
    let resources = requirements.and_then(|r| section(r, "resourcesPerTask"));
    Given {
        command_file: said(Some(body), "commandFile"),
        arguments: said(Some(body), "commandLineArguments"),
        duration: said(Some(body), "duration"),
        vm_usage_policy: said(Some(body), "vmUsagePolicy"),
        account: said(credentials, "account"),
        job_class: said(credentials, "jobClass"),
        qos: said(credentials, "qosRequested")
            || credentials.is_some_and(|c| c.contains_key("qos")),
        user_priority: said(section(body, "priorities"), "user"),
        dependencies: said(Some(body), "dependencies"),
        task_count: said(requirements, "taskCount"),
        architecture: said(requirements, "architecture"),
        os: said(requirements, "image"),
        features: said(requirements, "featuresRequested")
            || requirements.is_some_and(|r| r.contains_key("features")),
        resources: resources
            .into_iter()
            .flatten()
            .filter(|(_, amount)| !amount.is_null())
            .map(|(name, _)| name.clone())
            .collect(),
    }
}

/// The object at `key` (a one-element list counts as its element, as reading takes it);
/// none when missing, or malformed (reading the body refuses that).
fn section<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Map<String, Value>> {
    match object.get(key)? {
        Value::Object(o) => Some(o),
        Value::Array(items) if items.len() == 1 => items[0].as_object(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_domain::dates::WireDates;
    use drover_sched::template::TemplateRequirements;
    use serde_json::json;

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
        let read = |body: Value| {
            let mut spec = super::super::v2::submission(&body, &WireDates::utc()).unwrap();
            apply(&mut spec, &body, &templates()).map(|()| spec)
        };
        let spec = read(json!({
            "commandFile": "/bin/true",
            "templates": [{"name": "gpu"}],
            "flags": ["SUSPENDABLE"],
            "credentials": {"account": "mine"},
            "requirements": [{"resourcesPerTask": {"memory": {"dedicated": 512}}}]
        }))
        .unwrap();
        assert_eq!(spec.account.as_deref(), Some("mine"));
        assert_eq!(spec.job_class.as_deref(), Some("gpu"));
        assert_eq!(spec.duration, Some(3600));
        assert_eq!(spec.flags, ["SUSPENDABLE", "RESTARTABLE"]);
        let request = &spec.request;
        assert_eq!(request.memory_per_task, Some(512));
        assert_eq!(request.processors_per_task, 4);
        assert_eq!(request.generic_resources, [("gpu".to_string(), 1.0)].into());
        // Given as `null` is not given; `qos`, even `null`, stands for `qosRequested`.
        let spec = read(json!({
            "commandFile": "/bin/true",
            "duration": null,
            "credentials": {"account": null, "qos": null}
        }))
        .unwrap();
        assert_eq!(spec.account.as_deref(), Some("general"));
        assert_eq!(spec.duration, Some(3600));
        let e = read(json!({"commandFile": "/bin/true", "templates": ["nope"]})).unwrap_err();
        assert!(format!("{e:?}").contains("no job template 'nope'"));
    }
}
