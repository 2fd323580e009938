//! `/rest/service-templates` (spec 2.12, 4.11): the recipes services are made from, over
//! the service [`ServiceTemplates`] of `drover-cloud`. `<key>` is an id (24 hex digits,
//! which no name may look like) or a name.
//!
//! - A read of one template answers the list envelope with one result (4.11).
//! - A creation answers `201 {"id"}`; `modified` and `createdBy` (the caller, or the
//!   honoured `proxy-user`) are the service's. A change replaces each field it gives
//!   (lists and objects as a whole), is checked as a whole template and answers it; a
//!   `version` other than the stored one is a conflict (409).
//! - Every refusal is `{"messages": [summary, reason..., advice...]}`: 400 for a rule
//!   broken, 409 for a name that is not unique, a stale version or a template in use.
//! - Top-level fields are those of 2.12 (and `version`); others are refused by name.
//!   `id`, `modified` and `createdBy` in a body are ignored. `attributes.sched` is
//!   checked (`dependencies`, `job`); the rest of `attributes` is free-form.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Response;
use drover_auth::Permission;
use drover_cloud::{CloudError, ServiceTemplates, StoredTemplate};
use drover_domain::service_template::{
    IncludedChange, ServiceTemplateChange, ServiceType, TemplateKey,
};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiResult;
use crate::input::{Fields, read_object};
use crate::openapi::schema::{envelope, integer, object, string, strings};
use crate::params::ListParams;
use crate::reply::{self, parse_json};
use crate::routes::{Access, ItemChange, Routes, Submission};

const READ: Access = Access::Needs(Permission::read("service-templates"));
const CREATE: Access = Access::Needs(Permission::create("service-templates"));
const UPDATE: Access = Access::Needs(Permission::update("service-templates"));
const DELETE: Access = Access::Needs(Permission::delete("service-templates"));

const PATH: &str = "/rest/service-templates";
const NOT_CREATED: &str = "The service template was not created";

/// Every top-level field a body may give: those of spec 2.12, and `version`.
const FIELDS: &[&str] = &[
    "id",
    "name",
    "label",
    "type",
    "modified",
    "createdBy",
    "tags",
    "includedServices",
    "attributes",
    "version",
];

/// What creating or changing a template reads: the fields of [`schema`] a client sets.
fn input(new: bool) -> Value {
    let mut input = schema();
    let properties = input["properties"]
        .as_object_mut()
        .expect("an object schema");
    for set_by_the_service in ["id", "modified", "createdBy"] {
        properties[set_by_the_service] =
            crate::openapi::schema::read_only(properties[set_by_the_service].clone());
    }
    properties.insert(
        "type".into(),
        crate::openapi::schema::one_of(&["container", "vm", "storage", "pm"]),
    );
    // Part 8's names: 1 to 128 of these, not beginning or ending with a space.
    let c = r"A-Za-z0-9\-.?@~#\[\]<>|=&()*{}`$";
    properties.insert(
        "name".into(),
        json!({"type": "string", "pattern": format!("^[{c}]([{c} ]{{0,126}}[{c}])?$")}),
    );
    if new {
        properties.remove("version");
        crate::openapi::schema::required(input, &["name", "type"])
    } else {
        input
    }
}

fn schema() -> Value {
    let reference = object(&[("id", string()), ("name", string())]);
    object(&[
        ("id", string()),
        ("name", string()),
        // null when none was given.
        ("label", crate::openapi::schema::string_or_null()),
        ("type", string()),
        ("modified", string()),
        ("createdBy", string()),
        ("tags", strings()),
        (
            "includedServices",
            json!({"type": "array", "items": object(&[
                ("localName", string()),
                ("serviceTemplate", reference),
            ])}),
        ),
        (
            "attributes",
            object(&[(
                "sched",
                object(&[
                    (
                        "dependencies",
                        json!({"type": "array", "items": object(&[
                            ("localName", string()),
                            ("dependency", strings()),
                        ])}),
                    ),
                    (
                        "job",
                        object(&[
                            ("features", strings()),
                            ("image", string()),
                            ("requestedHosts", strings()),
                            ("resources", object(&[])),
                            ("template", string()),
                            ("variables", object(&[])),
                        ]),
                    ),
                ]),
            )]),
        ),
        ("version", integer()),
    ])
}

pub(crate) fn register(routes: &mut Routes) {
    // Not a `Collection`: one template is answered as a list envelope of one (4.11).
    routes
        .get(PATH, READ, list)
        .summary("Service templates")
        .list()
        .response(200, "Service templates", Some(envelope(schema())));
    routes
        .get("/rest/service-templates/{key}", READ, one)
        .summary("One service template, by id or name, as a list envelope of one")
        .path_param("key", "The template's id or name")
        .response(
            200,
            "The list envelope with the one template",
            Some(envelope(schema())),
        )
        .response(404, "No such service template", None);
    routes
        .post(PATH, CREATE, create)
        .summary("Creates a service template (name and type required)")
        .json_body(input(true))
        .response(
            201,
            "The new template's id",
            Some(object(&[("id", string())])),
        )
        .response(400, "A rule of the template is broken", None)
        .response(409, "The name is not unique", None);
    routes
        .put("/rest/service-templates/{key}", UPDATE, modify)
        .summary("Modifies a service template; the fields given replace the stored ones")
        .path_param("key", "The template's id or name")
        .json_body(input(false))
        .response(200, "The modified template", Some(schema()))
        .response(400, "A rule of the template is broken", None)
        .response(409, "Stale version, or the name is not unique", None);
    routes
        .delete("/rest/service-templates/{key}", DELETE, remove)
        .summary("Deletes a service template no other template includes")
        .path_param("key", "The template's id or name")
        .response(200, "Deleted", Some(object(&[])))
        .response(409, "The template is in use", None);
}

/// The wire shape of a template: what list queries read.
fn render(stored: &StoredTemplate) -> Value {
    stored.document()
}

/// What a body gives; problems are named by field.
fn read_change(f: &mut Fields<'_>) -> ServiceTemplateChange {
    f.only(FIELDS, "not a field of a service template");
    let kind = f.string("type").and_then(|text| {
        let kind = ServiceType::parse(&text);
        if kind.is_none() {
            f.problem(
                "type",
                format!("'{text}' is not one of container, vm, storage, pm"),
            );
        }
        kind
    });
    let included_services = f
        .each("includedServices", |entry| {
            entry.only(
                &["localName", "serviceTemplate"],
                "not a field of an included service (localName, serviceTemplate)",
            );
            let local_name = entry.string("localName");
            if local_name.is_none() && !entry.has("localName") {
                entry.problem("localName", "required: the service's name in the template");
            }
            let template = match entry.raw("serviceTemplate") {
                Some(Value::String(name)) => Some(TemplateKey::Name(name.clone())),
                Some(Value::Object(_)) => entry
                    .object("serviceTemplate", |t| {
                        match (t.string("id"), t.string("name")) {
                            (Some(id), _) => Some(TemplateKey::Id(id)),
                            (None, Some(name)) => Some(TemplateKey::Name(name)),
                            (None, None) => {
                                t.problem("name", "give the template's name or id");
                                None
                            }
                        }
                    })
                    .flatten(),
                None => {
                    entry.problem(
                        "serviceTemplate",
                        "required: a template's name, {name} or {id}",
                    );
                    None
                }
                Some(_) => {
                    entry.problem(
                        "serviceTemplate",
                        "expected a template's name, {name} or {id}",
                    );
                    None
                }
            };
            Some(IncludedChange {
                local_name: local_name?,
                service_template: template?,
            })
        })
        .map(|entries| entries.into_iter().flatten().collect());
    let attributes = match f.raw("attributes") {
        None => None,
        // A null member is one not given, here as in every body (kept, it would answer
        // `"sched": null` where the document says an object).
        Some(Value::Object(attributes)) => Some(without_nulls(attributes)),
        Some(_) => {
            f.problem("attributes", "expected an object");
            None
        }
    };
    ServiceTemplateChange {
        name: f.string("name"),
        label: f.string("label"),
        kind,
        tags: f.strings("tags"),
        included_services,
        attributes,
        version: f.integer("version"),
    }
}

/// What `body` gives; a body that does not fit is refused with the summary, the
/// problems and advice.
fn read_body(body: &Bytes, summary: &str) -> ApiResult<ServiceTemplateChange> {
    let body = parse_json(body)?;
    read_object(&body, summary, read_change).map_err(|mut error| {
        error.messages.push(ADVICE.into());
        error
    })
}

const ADVICE: &str = "send a JSON object of the fields of a service template (name, label, \
                      type, tags, includedServices, attributes, version) with the fields named \
                      corrected";

/// Runs `work` on the templates off the async runtime.
async fn blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&ServiceTemplates) -> Result<T, CloudError> + Send + 'static,
) -> ApiResult<T> {
    crate::state::blocking_on(state.service_templates().clone(), work).await
}

async fn list(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    let query = params.query.clone();
    let page = blocking(&state, move |templates| templates.list(&query)).await?;
    let items = page.items.iter().map(render).collect();
    Ok(reply::listed(page.total, items, &params))
}

/// One template, answered as a list envelope with one result (spec 4.11).
async fn one(
    State(state): State<AppState>,
    Path(key): Path<String>,
    params: ListParams,
) -> ApiResult<Json<Value>> {
    let template = blocking(&state, move |templates| templates.get(&key)).await?;
    Ok(reply::listed(1, vec![render(&template)], &params))
}

async fn create(Submission(state, _params, caller, body): Submission) -> ApiResult<Response> {
    let change = read_body(&body, NOT_CREATED)?;
    let created_by = caller
        .effective_user
        .clone()
        .or_else(|| caller.identity.as_ref().map(|i| i.name.clone()))
        .unwrap_or_default();
    let created = blocking(&state, move |templates| {
        templates.create(&change, &created_by)
    })
    .await?;
    let location = format!("{PATH}/{}", created.id);
    Ok(reply::created(
        state.settings(),
        &location,
        json!({"id": created.id}),
    ))
}

async fn modify(ItemChange(state, _, _, key, body): ItemChange) -> ApiResult<Json<Value>> {
    let summary = format!("The service template {key} was not changed");
    let change = read_body(&body, &summary)?;
    let changed = blocking(&state, move |templates| templates.modify(&key, &change)).await?;
    Ok(Json(render(&changed)))
}

async fn remove(State(state): State<AppState>, Path(key): Path<String>) -> ApiResult<Json<Value>> {
    let records = state.service_records().clone();
    blocking(&state, move |templates| {
        // A store that cannot be read keeps the template: it may be in use.
        templates.remove(&key, |template| match records.made_from(template) {
            Ok(users) => users,
            Err(e) => Some(format!("services (they could not be read: {e})")),
        })
    })
    .await?;
    Ok(reply::deleted())
}

/// `object` without its null members, at every depth of objects.
fn without_nulls(object: &serde_json::Map<String, Value>) -> serde_json::Map<String, Value> {
    object
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| {
            let v = match v {
                Value::Object(inner) => Value::Object(without_nulls(inner)),
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_name_what_does_not_fit() {
        let body = json!({"name": "x", "type": "box", "owner": "me", "tags": {"a": 1},
                          "includedServices": [{"serviceTemplate": "a"}, {"localName": "b"},
                                               {"localName": "c", "serviceTemplate": 3},
                                               {"localName": "d", "serviceTemplate": {}},
                                               {"localName": "e", "serviceTemplate": "a",
                                                "extra": 1}],
                          "attributes": [], "version": "v"});
        let error = read_object(&body, "no", read_change).unwrap_err();
        let text = error.messages.join("\n");
        for field in [
            "owner",
            "type",
            "tags",
            "includedServices[0].localName",
            "includedServices[1].serviceTemplate",
            "includedServices[2].serviceTemplate",
            "includedServices[3].serviceTemplate.name",
            "includedServices[4].extra",
            "attributes",
            "version",
        ] {
            assert!(text.contains(&format!("{field}: ")), "{field} in {text}");
        }
    }

    #[test]
    fn included_services_name_templates_three_ways() {
        let body = json!({"includedServices": [
            {"localName": "a", "serviceTemplate": "web"},
            {"localName": "b", "serviceTemplate": {"name": "db"}},
            {"localName": "c", "serviceTemplate": {"id": "0123"}}],
            "id": "ignored", "modified": "x", "createdBy": "y"});
        let change = read_object(&body, "no", read_change).unwrap();
        let keys: Vec<TemplateKey> = change
            .included_services
            .unwrap()
            .into_iter()
            .map(|s| s.service_template)
            .collect();
        assert_eq!(
            keys,
            [
                TemplateKey::Name("web".into()),
                TemplateKey::Name("db".into()),
                TemplateKey::Id("0123".into())
            ]
        );
    }
}
