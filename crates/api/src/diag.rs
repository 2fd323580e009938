//! Diagnostics (spec 4.2, 2.23): version, credential check, health (with, as an
//! extension, what makes VMs), directory settings.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use drover_auth::Permission;
use drover_domain::dates::format_build_date;
use drover_monitor::health;
use drover_store::StoreInfo;
use serde_json::{Value, json};

use crate::openapi::schema::*;
use crate::params::{ApiVersion, CommonParams};
use crate::routes::{Access, Routes};
use crate::{AppState, Health};

/// The product suite `diag/about` names from version 2 on.
pub const SUITE: &str = "Drover";
/// The version of the plugin interface (plugins arrive with a later issue).
pub const PLUGIN_COMMONS_VERSION: &str = "1.0.0";

/// How long the health resources wait for the datastore before calling it down.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

const DIAG: Access = Access::Needs(Permission::read("diag"));

pub(crate) fn register(routes: &mut Routes) {
    routes
        .get("/rest/diag/about", DIAG, about)
        .summary("Version information; api-version=2 adds suite and pluginCommonsVersion")
        .response(
            200,
            "Version record",
            Some(object(&[
                ("version", string()),
                ("build", string()),
                ("buildDate", string()),
                ("revision", string()),
                ("suite", string()),
                ("pluginCommonsVersion", string()),
            ])),
        );
    routes
        .get("/rest/diag/auth", DIAG, auth)
        .summary("Checks credentials: 200 with {} when valid, 401 otherwise")
        .response(200, "The credentials are valid", Some(object(&[])));
    let connection = || object(&[("connected", string())]);
    routes
        .get("/rest/diag/health/summary", Access::Public, health_summary)
        .summary(
            "Health of the datastore, scheduler and accounting connections (no authentication)",
        )
        .response(
            200,
            "UP, DOWN, NOT_CONFIGURED, NOT_SUPPORTED or UNKNOWN per connection",
            Some(object(&[
                ("acct", connection()),
                ("datastore", connection()),
                (
                    "sched",
                    object(&[("connected", string()), ("datastoreConnected", string())]),
                ),
            ])),
        );
    let detailed = |extra: &[(&str, Value)]| {
        let mut fields = vec![
            ("connected", string()),
            ("host", nullable(string())),
            ("port", nullable(integer())),
            ("message", nullable(string())),
            ("version", nullable(string())),
        ];
        fields.extend(extra.iter().cloned());
        object(&fields)
    };
    routes
        .get("/rest/diag/health/detail", DIAG, health_detail)
        .summary("Health of every connection, with hosts, ports, versions and reasons")
        .response(
            200,
            "Health detail",
            Some(object(&[
                ("acct", detailed(&[])),
                (
                    "datastore",
                    detailed(&[
                        ("databaseName", nullable(string())),
                        ("replicaSet", nullable(string())),
                        ("username", nullable(string())),
                    ]),
                ),
                (
                    "sched",
                    detailed(&[
                        ("datastoreConnected", string()),
                        ("licensedFeatures", strings()),
                        ("state", string()),
                        ("datastoreCredentialsSet", boolean()),
                        ("datastoreHost", nullable(string())),
                        ("datastorePort", nullable(integer())),
                    ]),
                ),
                (
                    "vms",
                    detailed(&[
                        ("provisioner", string()),
                        ("accel", nullable(string())),
                        ("accelReason", nullable(string())),
                        ("defaultImage", string()),
                        ("defaultImageRegistered", boolean()),
                    ]),
                ),
            ])),
        );
    routes
        .get("/rest/diag/ldap", DIAG, ldap)
        .summary("The directory (LDAP) configuration; the bind password is never shown")
        .response(
            200,
            "Directory information",
            Some(object(&[
                ("server", nullable(string())),
                ("port", nullable(integer())),
                ("securityType", nullable(string())),
                ("baseDNs", strings()),
                ("bindUser", nullable(string())),
                ("userObjectClass", nullable(string())),
                ("userNameAttribute", nullable(string())),
            ])),
        );
}

async fn about(State(state): State<AppState>, params: CommonParams) -> Json<Value> {
    let build = &state.settings().build;
    let mut about = json!({
        "version": build.version,
        "build": build.build,
        "buildDate": format_build_date(build.build_date),
        "revision": build.revision,
    });
    if params.api_version >= ApiVersion::V2 {
        about["suite"] = json!(SUITE);
        about["pluginCommonsVersion"] = json!(PLUGIN_COMMONS_VERSION);
    }
    Json(about)
}

async fn auth() -> Json<Value> {
    Json(json!({}))
}

/// The datastore's description, or why it cannot be had (down, or too slow to answer).
async fn probe_store(state: &AppState) -> Result<StoreInfo, String> {
    health::probe_store(state.store().clone(), HEALTH_TIMEOUT).await
}

/// The embedded accounting manager is up when enabled (it shares the datastore).
/// The accounting manager's state, and the reason when it is not up (spec 2.23:
/// `message` is null while a connection is up).
fn accounting_health(state: &AppState) -> (Health, Option<&'static str>) {
    match state.accounting() {
        Some(ledger) if ledger.enabled() => (Health::Up, None),
        _ => (
            Health::NotConfigured,
            Some("accounting is not enabled ([accounting] enabled = true)"),
        ),
    }
}

/// The scheduler is embedded, so always connected; its link to the datastore is its
/// journal, down while the engine cannot write it.
fn scheduler_health(state: &AppState) -> (Health, Health, Option<String>) {
    match state.scheduler().degraded() {
        None => (Health::Up, Health::Up, None),
        Some(reason) => (Health::Up, Health::Down, Some(reason)),
    }
}

async fn health_summary(State(state): State<AppState>) -> Json<Value> {
    let datastore = match probe_store(&state).await {
        Ok(_) => Health::Up,
        Err(_) => Health::Down,
    };
    let (sched, journal, _) = scheduler_health(&state);
    let (acct, _) = accounting_health(&state);
    let mut answer = json!({
        "acct": {"connected": acct.as_str()},
        "datastore": {"connected": datastore.as_str()},
        "sched": {"connected": sched.as_str(), "datastoreConnected": journal.as_str()},
    });
    with_role(&state, &mut answer);
    Json(answer)
}

/// With several servers sharing the store: `ha` says this one is the active one (a
/// standby answers the summary itself with `role` `STANDBY`).
fn with_role(state: &AppState, answer: &mut Value) {
    if let Some(server) = &state.settings().active_server {
        answer["ha"] = json!({"role": "ACTIVE", "server": server, "active": server});
    }
}

async fn health_detail(State(state): State<AppState>) -> Json<Value> {
    let probe = probe_store(&state).await;
    let info = probe.as_ref().ok();
    let datastore = match &probe {
        Ok(info) => json!({
            "connected": Health::Up.as_str(),
            "host": info.host,
            "port": info.port,
            "message": null,
            "version": info.version,
            "databaseName": info.database,
            "replicaSet": null,
            "username": info.username,
        }),
        Err(reason) => json!({
            "connected": Health::Down.as_str(),
            "host": null,
            "port": null,
            "message": reason,
            "version": null,
            "databaseName": null,
            "replicaSet": null,
            "username": null,
        }),
    };
    let (sched, journal, reason) = scheduler_health(&state);
    let (acct, about) = accounting_health(&state);
    let vms = vms_health(&state).await;
    let mut answer = json!({
        "acct": {
            "connected": acct.as_str(),
            "host": null,
            "port": null,
            "message": about,
            "version": null,
        },
        "datastore": datastore,
        "sched": {
            "connected": sched.as_str(),
            "datastoreConnected": journal.as_str(),
            "host": null,
            "port": null,
            "message": reason,
            "version": state.settings().build.version,
            "licensedFeatures": [],
            "state": "RUNNING",
            "datastoreCredentialsSet": info.is_some_and(|i| i.username.is_some()),
            "datastoreHost": info.and_then(|i| i.host.clone()),
            "datastorePort": info.and_then(|i| i.port),
        },
        "vms": vms,
    });
    with_role(&state, &mut answer);
    Json(answer)
}

/// What makes guests (not a connection: a Drover extension, in the same shape): the
/// provisioner, QEMU's accelerator as decided at start and why, and the default image,
/// registered or not (now); `connected` is `UP` when VMs can be made, `NOT_CONFIGURED`
/// with `[cloud] provisioner = "none"`, else `DOWN` with why and what fixes it.
async fn vms_health(state: &AppState) -> Value {
    let guests = &state.settings().cloud.guests;
    let name = guests.default_image.clone();
    let registered = !name.is_empty()
        && crate::state::blocking_on(state.images().clone(), move |images| {
            Ok::<_, drover_cloud::CloudError>(
                images
                    .get(&name)
                    .is_ok_and(|image| image.value.supports_virtual_machine),
            )
        })
        .await
        .unwrap_or(false);
    let problem = guests.problem(registered);
    let connected = match &problem {
        _ if guests.turned_off => Health::NotConfigured,
        Some(_) => Health::Down,
        None => Health::Up,
    };
    json!({
        "connected": connected.as_str(),
        "host": null,
        "port": null,
        "message": problem,
        "version": null,
        "provisioner": guests.provisioner,
        "accel": guests.accel,
        "accelReason": guests.accel_reason,
        "defaultImage": guests.default_image,
        "defaultImageRegistered": registered,
    })
}

async fn ldap(State(state): State<AppState>) -> Json<Value> {
    Json(match &state.settings().directory {
        Some(d) => json!({
            "server": d.server,
            "port": d.port(),
            "securityType": d.security_type.as_str(),
            "baseDNs": d.base_dns,
            "bindUser": d.bind_user,
            "userObjectClass": d.user_object_class,
            "userNameAttribute": d.user_name_attribute,
        }),
        None => json!({
            "server": null,
            "port": null,
            "securityType": null,
            "baseDNs": [],
            "bindUser": null,
            "userObjectClass": null,
            "userNameAttribute": null,
        }),
    })
}
