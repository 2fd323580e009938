//! `/rest/images` (spec 2.2, 4.3): the images machines boot, over the service
//! [`Images`] of `drover-cloud`. Ids are the service's; `<key>` is an id or a name. The
//! detail sections of the spec show the singular `/rest/image/<key>`: it is an alias of
//! the plural path for reading, changing and deleting.
//!
//! A change replaces what it gives (lists and objects as a whole) and is checked as a
//! whole image; a `version` other than the stored one is a conflict (409). `version`
//! cannot be given on create (400): the service sets it. Fields the interface does not
//! have are refused, naming them, so that a misspelt flag is not silently dropped.
//!
//! `boot` (`kernel`, `initramfs`, `disk`, and `readyLine`: what the guest prints once it
//! is up) is Drover's own: paths relative to the images
//! directory (`[cloud] image_dir`) for the provisioner to come.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Response;
use drover_auth::Permission;
use drover_cloud::{CloudError, Images, StoredImage};
use drover_domain::image::{Boot, ImageChange, ImageKey, ImageType};
use serde_json::{Value, json};

use crate::AppState;
use crate::access_resources;
use crate::error::ApiResult;
use crate::input::{Fields, read_object};
use crate::openapi::schema::{boolean, integer, object, string, strings};
use crate::params::ListParams;
use crate::reply::{self, parse_json};
use crate::routes::{Access, Collection, ItemChange, Routes};

const READ: Access = Access::Needs(Permission::read("images"));
const CREATE: Access = Access::Needs(Permission::create("images"));
const UPDATE: Access = Access::Needs(Permission::update("images"));
const DELETE: Access = Access::Needs(Permission::delete("images"));

/// Every field of an image a body may give (`id` is ignored: the path names the image).
const FIELDS: &[&str] = &[
    "id",
    "name",
    "active",
    "hypervisor",
    "osType",
    "type",
    "supportsPhysicalMachine",
    "supportsVirtualMachine",
    "templateName",
    "features",
    "virtualizedImages",
    "extensions",
    "boot",
    "version",
];

/// What creating (`new`: name, hypervisor and osType required) or changing an image
/// reads: the fields of [`schema`], no others.
fn input(new: bool) -> Value {
    let mut input = schema();
    input["properties"]["type"] =
        crate::openapi::schema::one_of(&ImageType::ALL.map(ImageType::as_str));
    input["properties"]["name"] =
        json!({"type": "string", "pattern": drover_domain::image::SIMPLE_NAME_PATTERN});
    input["properties"]["osType"] = json!({"type": "string", "minLength": 1, "maxLength": 255});
    input["properties"]["virtualizedImages"]["items"]["anyOf"] =
        // (Given, that is not null: a null field is one not given.)
        json!([
            {"required": ["id"], "properties": {"id": {"type": "string"}}},
            {"required": ["name"], "properties": {"name": {"type": "string"}}},
        ]);
    input["additionalProperties"] = json!(false);
    if new {
        // An image supports a physical machine, a virtual machine or both.
        input["anyOf"] = json!([
            {"properties": {"supportsPhysicalMachine": {"const": true}}, "required": ["supportsPhysicalMachine"]},
            {"properties": {"supportsVirtualMachine": {"const": true}}, "required": ["supportsVirtualMachine"]},
        ]);
        input["properties"]
            .as_object_mut()
            .expect("an object schema")
            .remove("version");
        crate::openapi::schema::required(input, &["name", "hypervisor", "osType"])
    } else {
        input
    }
}

fn schema() -> Value {
    object(&[
        ("id", string()),
        ("name", string()),
        ("active", boolean()),
        ("hypervisor", boolean()),
        ("osType", string()),
        ("type", string()),
        ("supportsPhysicalMachine", boolean()),
        ("supportsVirtualMachine", boolean()),
        ("templateName", string()),
        ("features", strings()),
        (
            "virtualizedImages",
            json!({"type": "array", "items": object(&[("id", string()), ("name", string())])}),
        ),
        // One object of properties per provisioning manager.
        (
            "extensions",
            json!({"type": "object", "additionalProperties": {"type": "object"}}),
        ),
        (
            "boot",
            object(&[
                ("kernel", string()),
                ("initramfs", string()),
                ("disk", string()),
                ("readyLine", string()),
            ]),
        ),
        ("version", integer()),
    ])
}

pub(crate) fn register(routes: &mut Routes) {
    routes.collection(
        Collection {
            path: "/rest/images",
            item_path: "/rest/images/{key}",
            access: READ,
            schema: crate::openapi::schema::required(schema(), &["id"]),
            list: ("Images", "Images"),
            item: (
                "One image, by id or name",
                "The image's id or name",
                "The image",
                "No such image",
            ),
        },
        list,
        one,
    );
    routes
        .get("/rest/image/{key}", READ, one)
        .summary("One image, by id or name (the singular alias)")
        .path_param("key", "The image's id or name")
        .response(200, "The image", Some(schema()))
        .response(404, "No such image", None);
    routes
        .post("/rest/images", CREATE, create)
        .summary("Creates an image (name, hypervisor, osType and a support flag required)")
        .json_body(input(true))
        .response(201, "The created image", Some(schema()))
        .response(400, "A rule of the image is broken", None)
        .response(409, "The name is taken", None);
    for path in ["/rest/images/{key}", "/rest/image/{key}"] {
        routes
            .put(path, UPDATE, modify)
            .summary("Modifies an image; the fields given replace the stored ones")
            .path_param("key", "The image's id or name")
            .json_body(input(false))
            .response(200, "The modified image", Some(schema()))
            .response(400, "A rule of the image is broken", None)
            .response(409, "Stale version, or the name is taken", None);
        routes
            .delete(path, DELETE, remove)
            .summary("Deletes an image no other image virtualizes")
            .path_param("key", "The image's id or name")
            .response(200, "Deleted", Some(object(&[])))
            .response(409, "The image is in use", None);
    }
}

/// The wire shape of an image (spec 2.2, and `boot`). Its fields are those of
/// [`StoredImage::document`], which list queries read.
fn render(stored: &StoredImage) -> Value {
    let image = &stored.value;
    json!({
        "name": image.name,
        "active": image.active,
        "hypervisor": image.hypervisor,
        "osType": image.os_type,
        "type": image.kind.as_str(),
        "supportsPhysicalMachine": image.supports_physical_machine,
        "supportsVirtualMachine": image.supports_virtual_machine,
        "templateName": image.template_name,
        "features": image.features,
        "virtualizedImages": image
            .virtualized_images
            .iter()
            .map(|id| json!({"id": id}))
            .collect::<Vec<_>>(),
        "extensions": image.extensions,
        "boot": {
            "kernel": image.boot.kernel,
            "initramfs": image.boot.initramfs,
            "disk": image.boot.disk,
            "readyLine": image.boot.ready_line,
        },
        "id": stored.id,
        "version": stored.version,
    })
}

/// What a body gives; problems are named by field.
fn read_change(f: &mut Fields<'_>) -> ImageChange {
    f.only(FIELDS, "not a field of an image");
    // Sent back as read, and not changed by a body (the path names the image): only its
    // type is checked.
    f.string("id");
    let kind = f.string("type").and_then(|text| {
        let kind = ImageType::parse(&text);
        if kind.is_none() {
            f.problem(
                "type",
                format!("'{text}' is not one of stateful, stateless, linkedclone"),
            );
        }
        kind
    });
    let virtualized_images = f
        .each("virtualizedImages", |entry| {
            match (entry.string("id"), entry.string("name")) {
                (Some(id), _) => Some(ImageKey::Id(id)),
                (None, Some(name)) => Some(ImageKey::Name(name)),
                (None, None) => {
                    entry.problem("id", "give the image's id or name");
                    None
                }
            }
        })
        .map(|keys| keys.into_iter().flatten().collect());
    let extensions = match f.raw("extensions") {
        None => None,
        Some(Value::Object(managers)) => Some(managers.clone()),
        Some(_) => {
            f.problem(
                "extensions",
                "expected an object, one key per provisioning manager",
            );
            None
        }
    };
    let boot = f.object("boot", |b| {
        b.only(
            &["kernel", "initramfs", "disk", "readyLine"],
            "not a boot field (kernel, initramfs, disk, readyLine)",
        );
        Boot {
            kernel: b.string("kernel").unwrap_or_default(),
            initramfs: b.string("initramfs").unwrap_or_default(),
            disk: b.string("disk").unwrap_or_default(),
            ready_line: b.string("readyLine").unwrap_or_default(),
        }
    });
    ImageChange {
        name: f.string("name"),
        active: f.boolean("active"),
        hypervisor: f.boolean("hypervisor"),
        os_type: f.string("osType"),
        kind,
        supports_physical_machine: f.boolean("supportsPhysicalMachine"),
        supports_virtual_machine: f.boolean("supportsVirtualMachine"),
        template_name: f.string("templateName"),
        features: f.strings("features"),
        virtualized_images,
        extensions,
        boot,
        version: f.integer("version"),
    }
}

/// Runs `work` on the images off the async runtime.
async fn blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&Images) -> Result<T, CloudError> + Send + 'static,
) -> ApiResult<T> {
    crate::state::blocking_on(state.images().clone(), work).await
}

async fn list(State(state): State<AppState>, params: ListParams) -> ApiResult<Json<Value>> {
    let query = params.query.clone();
    let page = blocking(&state, move |images| images.list(&query)).await?;
    let items = page.items.iter().map(render).collect();
    Ok(reply::listed(page.total, items, &params))
}

async fn one(State(state): State<AppState>, Path(key): Path<String>) -> ApiResult<Json<Value>> {
    let image = blocking(&state, move |images| images.get(&key)).await?;
    Ok(Json(render(&image)))
}

async fn create(State(state): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let body = parse_json(&body)?;
    let change = read_object(&body, "The image was not created", read_change)?;
    let created = blocking(&state, move |images| images.create(&change)).await?;
    Ok(access_resources::created(
        &state,
        "/rest/images",
        render(&created),
    ))
}

async fn modify(ItemChange(state, _, _, key, body): ItemChange) -> ApiResult<Json<Value>> {
    let body = parse_json(&body)?;
    let summary = format!("The image {key} was not changed");
    let change = read_object(&body, &summary, read_change)?;
    let changed = blocking(&state, move |images| images.modify(&key, &change)).await?;
    Ok(Json(render(&changed)))
}

async fn remove(State(state): State<AppState>, Path(key): Path<String>) -> ApiResult<Json<Value>> {
    let vms = state.scheduler().vms();
    blocking(&state, move |images| {
        images.remove(&key, |image| {
            let booted: Vec<&str> = vms
                .iter()
                .filter(|vm| vm.image == image.value.name || vm.image == image.id)
                .map(|vm| vm.id.as_str())
                .collect();
            (!booted.is_empty()).then(|| format!("the VMs {} boot it", booted.join(", ")))
        })
    })
    .await?;
    Ok(reply::deleted())
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_domain::image::Image;

    #[test]
    fn the_wire_shape_is_what_list_queries_read() {
        let change = ImageChange {
            name: Some("hv".into()),
            hypervisor: Some(true),
            os_type: Some("linux".into()),
            supports_virtual_machine: Some(true),
            kind: Some(ImageType::LinkedClone),
            template_name: Some("gold".into()),
            features: Some(vec!["gpu".into()]),
            extensions: json!({"mine": {"a": 1}}).as_object().cloned(),
            boot: Some(Boot {
                kernel: "k".into(),
                ..Boot::default()
            }),
            ..ImageChange::default()
        };
        let stored = StoredImage {
            id: "0123".into(),
            version: 3,
            value: Image::create(&change, vec!["0001".into()]).unwrap(),
        };
        assert_eq!(render(&stored), stored.document());
    }

    #[test]
    fn bodies_name_what_does_not_fit() {
        let body = json!({"name": "x", "type": "cloned", "supportVM": true,
                          "virtualizedImages": [{"title": "a"}], "extensions": [],
                          "boot": {"kernel": "k", "initrd": "i"}});
        let error = read_object(&body, "no", read_change).unwrap_err();
        let text = error.messages.join("\n");
        for field in [
            "supportVM",
            "type",
            "virtualizedImages[0].id",
            "extensions",
            "boot.initrd",
        ] {
            assert!(text.contains(&format!("{field}: ")), "{field} in {text}");
        }
    }
}
