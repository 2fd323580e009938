//! Pending actions (spec 2.13, 4.6): the system jobs working on VMs while they run
//! (setup, migrate, destroy), those waiting (`PENDING`: for room, or for the operation
//! under way), and the last one that failed on a VM while that VM exists, with
//! `failureDetails`. An ordinary user sees those of their own VMs.
//!
//! The `id` is the system job's id (the `jobId` its request answered). Its type follows
//! the template the job was made from, matched at its end: first the configured
//! mappings (`[cloud.pending_actions] mappings`, the original's
//! `svc.pendingActions.mappings`), then, unless `display_generic` is off, the generic
//! mapping of 2.13; a template no mapping names is its own type.

use axum::Json;
use axum::extract::State;
use drover_auth::Permission;
use drover_domain::dates::WireDates;
use drover_domain::job::{Job, JobState};
use drover_domain::vm::{SystemTask, Vm};
use drover_sched::Scheduler;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiResult;
use crate::openapi::schema::{envelope, object, string, strings};
use crate::params::ListParams;
use crate::reply;
use crate::routes::{Access, Caller, Routes};
use crate::state::CloudSettings;
use crate::wire::{self, Zero};

const READ: Access = Access::Needs(Permission::read("pending-actions"));

/// Spec 2.13's generic mapping: template name (at the end of the id) to type.
const GENERIC: [(&str, &str); 7] = [
    ("genericVM-setup", "VMCREATE"),
    ("genericVM-migrate", "VMMIGRATE"),
    ("genericVM-destroy", "VMDESTROY"),
    ("OSStorage-setup", "VMSTORAGE"),
    ("OSStorage-destroy", "VMSTORAGEDESTROY"),
    ("extraStorage-setup", "STORAGE"),
    ("extraStorage-destroy", "STORAGEDESTROY"),
];

pub(crate) fn register(routes: &mut Routes) {
    let schema = object(&[
        ("id", string()),
        ("pendingActionType", string()),
        ("pendingActionState", string()),
        ("vmId", string()),
        ("hosts", strings()),
        ("failureDetails", string()),
    ]);
    routes
        .get("/rest/pending-actions", READ, list)
        .summary("The system jobs at work on VMs, and each VM's last failed one")
        .list()
        .response(200, "Pending actions", Some(envelope(schema)));
}

/// The pending-action type of a system job made from `template`.
pub fn action_type(template: &str, settings: &CloudSettings) -> String {
    let configured = settings
        .action_types
        .iter()
        .map(|(t, k)| (t.as_str(), k.as_str()));
    let generic = GENERIC.iter().copied().filter(|_| settings.display_generic);
    configured
        .chain(generic)
        .find(|(t, _)| template.ends_with(t))
        .map_or_else(|| template.to_string(), |(_, kind)| kind.to_string())
}

async fn list(
    State(state): State<AppState>,
    params: ListParams,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    let actions = system_jobs_of_visible_vms(state.scheduler(), &caller);
    let cloud = state.settings().cloud.clone();
    Ok(reply::list_rendered(
        &actions,
        &params,
        &state.settings().dates,
        |(vm, job), dates, version| render(vm, job, &cloud, dates, version),
    ))
}

/// The pending actions are the system jobs (under way, or the last that failed) of the
/// VMs the caller may see.
fn system_jobs_of_visible_vms(
    scheduler: &Scheduler,
    caller: &Caller,
) -> Vec<(Vm, std::sync::Arc<Job>)> {
    let mut actions = Vec::new();
    for vm in scheduler.vms().iter() {
        if !crate::vms::visible(vm, caller) {
            continue;
        }
        let queued = vm.queued.as_ref().map(|q| q.job().to_string());
        for id in [&vm.active_job, &queued, &vm.failed_job]
            .into_iter()
            .flatten()
        {
            if let Some(job) = scheduler.job(id) {
                actions.push((vm.clone(), job));
            }
        }
    }
    actions
}

/// The record of spec 2.13.
fn render(vm: &Vm, job: &Job, cloud: &CloudSettings, dates: &WireDates, version: u32) -> Value {
    let task = job.spec.extra.system_task.as_ref();
    let template = task.map_or("", |t| t.template());
    let (source, destination) = match task {
        Some(SystemTask::VmMigrate { from, to, .. }) => (Some(from), Some(to)),
        _ => (None, None),
    };
    let failure = (job.status.completion_code.unwrap_or(0) != 0)
        .then(|| job.status.messages.last().map(|m| m.text.clone()))
        .flatten();
    let state = match job.status.state {
        JobState::Running => "RUNNING",
        JobState::Completed if failure.is_some() => "FAILED",
        JobState::Completed => "COMPLETED",
        _ => "PENDING",
    };
    json!({
        "id": job.id,
        "failureDetails": failure,
        // None yet while a VM waits for a node with room.
        "hosts": if vm.node.is_empty() { json!([]) } else { json!([vm.node]) },
        "maxDurationInSeconds": job.spec.duration,
        "migrationDestination": destination,
        "migrationSource": source,
        "motivation": format!("{template} for VM {}", vm.id),
        "pendingActionState": state,
        "pendingActionType": action_type(template, cloud),
        "requester": job.status.submitter,
        "serviceId": null,
        "startTime": wire::date(dates, version, job.status.dates.start, Zero::Null),
        "substate": vm.phase.substate(),
        "targetOS": vm.image,
        "topLevelServiceId": null,
        "vmId": vm.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_follow_the_configured_then_the_generic_mapping() {
        let mut settings = CloudSettings::default();
        assert_eq!(action_type("genericVM-setup", &settings), "VMCREATE");
        assert_eq!(action_type("genericVM-destroy", &settings), "VMDESTROY");
        assert_eq!(action_type("site-OSStorage-setup", &settings), "VMSTORAGE");
        assert_eq!(action_type("mine", &settings), "mine");
        settings.action_types = vec![("VM-setup".into(), "PROVISION".into())];
        assert_eq!(action_type("genericVM-setup", &settings), "PROVISION");
        settings.display_generic = false;
        assert_eq!(
            action_type("genericVM-migrate", &settings),
            "genericVM-migrate"
        );
    }
}
