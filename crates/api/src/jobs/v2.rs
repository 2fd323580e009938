//! Version 2 of the job (spec 2.4, 4.5): addressed by `name`, capitalised states,
//! nested credentials, dates, priorities and requirements.

use drover_domain::dates::WireDates;
use drover_domain::limits;
use drover_domain::request::summary;
use drover_sched::JobChanges;
use drover_sched::job::{Attribute, Dependency, Job, JobSpec, Output};
use drover_sched::listing::{
    Render, effective_partitions, expected_state, queue_status, requested_memory, start_priority,
};
use serde_json::{Map, Value, json};

use super::v1::{arguments, normalize_flags};
use super::{date, holds_from, output_path, refs};
use crate::error::ApiError;
use crate::input::{Fields, read_object};

/// Offers every member of the job in its version-2 shape, in order, with how to compute
/// its value (see `Documents`).
pub fn each_member(job: &Job, r: &Render, put: &mut impl FnMut(&str, &dyn Fn() -> Value)) {
    identity(job, put);
    credentials_and_times(job, r, put);
    requests(job, r, put);
    resources(job, r, put);
}

/// Names, counts, what runs and where.
fn identity(job: &Job, put: &mut impl FnMut(&str, &dyn Fn() -> Value)) {
    let spec = &job.spec;
    let status = &job.status;
    // Values several members share are made only when one of them is asked for: a
    // list renders a single member of every job it judges (`JobShape::member`).
    put("name", &|| json!(job.id));
    put("customName", &|| json!(spec.custom_name));
    let member = job.array_member();
    put("arrayIndex", &|| json!(member.map(|(_, index)| index)));
    put("arrayMasterName", &|| {
        json!(member.map(|(master, _)| master))
    });
    put("attributes", &|| {
        json!(
            spec.extra
                .attributes
                .iter()
                .map(|a| json!({ "name": a.name, "comparator": a.comparator, "value": a.value }))
                .collect::<Vec<_>>()
        )
    });
    put("blocks", &|| {
        json!(
            status
                .block
                .iter()
                .map(|b| json!({ "category": "Resources", "message": b.message, "type": b.kind }))
                .collect::<Vec<_>>()
        )
    });
    put("bypassCount", &|| json!(0));
    put("cancelCount", &|| json!(status.counts.cancel));
    put("deferCount", &|| json!(0));
    put("migrateCount", &|| json!(0));
    put("preemptCount", &|| json!(status.counts.preempt));
    put("startCount", &|| json!(status.counts.start));
    put("commandFile", &|| json!(spec.command_file));
    put("commandLineArgs", &|| json!(spec.arguments));
    put("completionCode", &|| json!(status.completion_code));
    put("initialWorkingDirectory", &|| json!(spec.working_directory));
    put("description", &|| json!(spec.extra.description));
    put("jobGroup", &|| json!(spec.extra.job_group));
    put("masterNode", &|| {
        job.node_ids()
            .next()
            .map(|n| json!({ "name": n }))
            .unwrap_or(Value::Null)
    });
    put("submitHost", &|| json!(spec.extra.submit_host));
    put("epilogScript", &|| json!(spec.extra.epilog_script));
    put("prologScript", &|| json!(spec.extra.prolog_script));
}

/// Credentials, dates, dependencies, durations and usage.
fn credentials_and_times(job: &Job, r: &Render, put: &mut impl FnMut(&str, &dyn Fn() -> Value)) {
    let spec = &job.spec;
    let status = &job.status;
    let date = |t: Option<i64>| date(r, t);
    let active = || job.active_seconds(r.now);
    let processors = || job.processors() as f64;
    put("credentials", &|| {
        json!({
            "account": spec.account,
            "group": spec.group,
            "jobClass": spec.job_class,
            "qos": spec.qos_requested,
            "qosRequested": spec.qos_requested,
            "user": job.user(),
        })
    });
    put("dates", &|| {
        json!({
            "completedDate": date(status.dates.completion),
            "createdDate": date(Some(status.dates.submit)),
            "deadlineDate": date(spec.deadline),
            "dispatchedDate": date(status.dates.start),
            "earliestRequestedStartDate": date(spec.earliest_start),
            "earliestStartDate": date(Some(spec.earliest_start.unwrap_or(status.dates.submit))),
            "eligibleDate": date(Some(spec.earliest_start.unwrap_or(status.dates.submit))),
            "lastCanceledDate": date(status.dates.last_canceled),
            "lastChargedDate": null,
            "lastPreemptedDate": date(status.dates.last_preempted),
            "lastUpdatedDate": date(Some(status.dates.last_updated)),
            "startDate": date(status.dates.start),
            "submitDate": date(Some(status.dates.submit)),
            "terminationDate": date(status.dates.completion),
        })
    });
    put("dependencies", &|| {
        json!(
            spec.extra
                .dependencies
                .iter()
                .map(|d| json!({ "type": d.kind, "name": d.name }))
                .collect::<Vec<_>>()
        )
    });
    put("duration", &|| json!(spec.duration));
    put("durationActive", &|| json!(active()));
    put("durationQueued", &|| json!(job.queued_seconds(r.now)));
    put("durationRemaining", &|| {
        json!(spec.duration.map(|d| (d - active()).max(0)))
    });
    put("durationSuspended", &|| json!(job.suspended_seconds(r.now)));
    put("cpuTime", &|| json!(status.cpu_seconds));
    put("memorySecondsDedicated", &|| {
        json!(requested_memory(job) * active() as f64)
    });
    put("memorySecondsUtilized", &|| json!(0.0));
    put("processorSecondsDedicated", &|| {
        json!(processors() * active() as f64)
    });
    put("processorSecondsLimit", &|| {
        json!(spec.duration.map_or(0.0, |d| processors() * d as f64))
    });
    put("processorSecondsUtilized", &|| json!(status.cpu_seconds));
    put("minimumPreemptTime", &|| json!(0));
}

/// Notification, environment, holds, messages, nodes, partitions, priorities and the requirement.
fn requests(job: &Job, r: &Render, put: &mut impl FnMut(&str, &dyn Fn() -> Value)) {
    let spec = &job.spec;
    let status = &job.status;
    let request = &spec.request;
    let date = |t: Option<i64>| date(r, t);
    put("emailNotifyAddresses", &|| {
        json!(spec.extra.email_addresses)
    });
    put("emailNotifyTypes", &|| json!(spec.extra.email_types));
    put("environmentRequested", &|| {
        json!(spec.environment_requested)
    });
    put("environmentVariables", &|| json!(spec.environment));
    put("flags", &|| json!(spec.flags));
    put("holds", &|| {
        json!(status.holds.iter().map(|h| h.as_str()).collect::<Vec<_>>())
    });
    put("holdDate", &|| {
        date(status.dates.hold.filter(|_| !status.holds.is_empty()))
    });
    put("holdReason", &|| json!(status.hold_reason));
    put("isActive", &|| json!(!status.state.is_final()));
    put("queueStatus", &|| json!(queue_status(status.state)));
    put("messages", &|| {
        json!(status.messages.iter().map(|m| json!({ "message": m.text, "author": m.author, "createdDate": date(Some(m.created)) })).collect::<Vec<_>>())
    });
    put("nodesExcluded", &|| refs(&request.nodes_excluded, "name"));
    put("nodesRequested", &|| refs(&request.nodes_requested, "name"));
    put("nodesRequestedPolicy", &|| {
        json!(if request.nodes_requested.is_empty() {
            None
        } else {
            Some("SUBSET")
        })
    });
    put("partitionAccessList", &|| json!(effective_partitions(job)));
    put("partitionAccessListRequested", &|| {
        json!(spec.extra.partition_access_list)
    });
    put(
        "priorities",
        &|| json!({ "run": start_priority(job), "start": start_priority(job), "system": status.system_priority, "user": spec.user_priority }),
    );
    put("rejectPolicies", &|| json!([]));
    put("triggers", &|| {
        json!(spec.extra.trigger.iter().collect::<Vec<_>>())
    });
    put("virtualMachines", &|| json!([]));
    put("requirements", &|| json!([requirement(job)]));
}

/// The reservation, resource managers, outputs, states, templates and containers.
fn resources(job: &Job, r: &Render, put: &mut impl FnMut(&str, &dyn Fn() -> Value)) {
    let spec = &job.spec;
    let status = &job.status;
    let date = |t: Option<i64>| date(r, t);
    put("reservationRequested", &|| {
        spec.extra
            .reservation_requested
            .as_ref()
            .map(|n| json!({ "name": n }))
            .unwrap_or(Value::Null)
    });
    put("resourceFailPolicy", &|| {
        json!(spec.extra.resource_fail_policy)
    });
    put("resourceManagerExtension", &|| {
        json!(spec.extra.rm_extension)
    });
    put("resourceManagers", &|| {
        json!([{ "isDestination": true, "isSource": true,
                 "jobName": super::v1::rm_job_id(job),
                 "name": spec.extra.reported_by.as_deref().unwrap_or(r.rm_name) }])
    });
    put("schedName", &|| json!(r.sched_name));
    put("rmStandardErrorFilePath", &|| {
        json!(output_path(job, Output::Stderr))
    });
    put("rmStandardOutputFilePath", &|| {
        json!(output_path(job, Output::Stdout))
    });
    put("standardErrorFilePath", &|| json!(spec.stderr_path));
    put("standardOutputFilePath", &|| json!(spec.stdout_path));
    put("states", &|| {
        json!({
            "state": status.state.as_str(),
            "stateExpected": expected_state(job).as_str(),
            "stateLastUpdatedDate": date(Some(status.dates.state_updated)),
            "subState": null,
        })
    });
    put("systemJobAction", &|| Value::Null);
    put("systemJobType", &|| Value::Null);
    put("targetedJobAction", &|| Value::Null);
    put("targetedJobName", &|| Value::Null);
    put("templates", &|| refs(&spec.extra.templates, "name"));
    put("variables", &|| json!(spec.variables));
    put("virtualContainers", &|| {
        refs(&spec.extra.virtual_containers, "name")
    });
    put("vmUsagePolicy", &|| json!(spec.extra.vm_usage_policy));
}

/// The one requirement a job has.
fn requirement(job: &Job) -> Value {
    let spec = &job.spec;
    let request = &spec.request;
    let amount = |value: Option<u64>| json!({ "dedicated": value.map_or(-1, |v| v as i64), "utilized": null });
    let mut per_task = Map::new();
    per_task.insert(
        "processors".into(),
        json!({ "dedicated": request.processors_per_task, "utilized": null }),
    );
    per_task.insert("memory".into(), amount(request.memory_per_task));
    per_task.insert("disk".into(), amount(request.disk_per_task));
    per_task.insert("swap".into(), amount(request.swap_per_task));
    for (name, value) in &request.generic_resources {
        per_task.insert(name.clone(), json!({ "dedicated": value }));
    }
    let nodes: Vec<Value> = job.node_ids().map(|n| json!({ "name": n })).collect();
    json!({
        "architecture": request.architecture,
        "attributes": [],
        "features": request.features,
        "index": 0,
        "featuresRequested": request.features,
        "featuresRequestedMode": if request.features_any { "OR" } else { "AND" },
        "featuresExcluded": request.features_excluded,
        "featuresExcludedMode": "AND",
        "metrics": {},
        "nodeAccessPolicy": null,
        "nodeAllocationPolicy": null,
        "nodeCount": request.node_count.map_or(nodes.len().max(1) as u32, |n| n),
        "nodes": nodes,
        "nodeSet": null,
        "image": request.os,
        "reservation": spec.extra.reservation_requested,
        "resourcesPerTask": per_task,
        "taskCount": request.task_count,
        "tasksPerNode": request.tasks_per_node,
    })
}

/// A version-2 submission body (spec 4.5).
pub fn submission(body: &Value, dates: &WireDates) -> Result<JobSpec, ApiError> {
    read_object(body, summary::JOB_NOT_SUBMITTED, |f| {
        let mut spec = JobSpec {
            custom_name: f.string("customName"),
            flags: f
                .strings("flags")
                .map(|v| normalize_flags(&v))
                .unwrap_or_default(),
            holds: holds_from(f, "holds"),
            command_file: f.string("commandFile").unwrap_or_default(),
            arguments: arguments(f, "commandLineArguments"),
            working_directory: f.string("initialWorkingDirectory"),
            environment: f.string_map("environmentVariables").unwrap_or_default(),
            environment_requested: f.boolean("environmentRequested").unwrap_or(false),
            variables: f.string_map("variables").unwrap_or_default(),
            stdout_path: f.string("standardOutputFilePath"),
            stderr_path: f.string("standardErrorFilePath"),
            duration: f.integer_in("duration", 0, drover_domain::limits::MAX_JOB_DURATION),
            ..Default::default()
        };
        if let Some((user, group, account, qos, class)) = f.object("credentials", |c| {
            (
                c.string("user"),
                c.string("group"),
                c.string("account"),
                c.string("qosRequested").or_else(|| c.string("qos")),
                c.string("jobClass"),
            )
        }) {
            (
                spec.user,
                spec.group,
                spec.account,
                spec.qos_requested,
                spec.job_class,
            ) = (user, group, account, qos, class);
        }
        if let Some((start, deadline)) = f.object("dates", |d| {
            (
                d.date("earliestRequestedStartDate", dates),
                d.date("deadlineDate", dates),
            )
        }) {
            (spec.earliest_start, spec.deadline) = (start, deadline);
        }
        if let Some(Some(user)) = f.object("priorities", |p| {
            p.integer_in(
                "user",
                -limits::USER_PRIORITY_BOUND,
                limits::USER_PRIORITY_BOUND,
            )
        }) {
            spec.user_priority = user;
        }
        let extra = &mut spec.extra;
        extra.attributes = f
            .each("attributes", |a| Attribute {
                name: a.string("name").unwrap_or_default(),
                comparator: a.string("comparator"),
                value: a.string("value"),
            })
            .unwrap_or_default();
        extra.dependencies = f
            .each("dependencies", |d| Dependency {
                kind: d.string("type").unwrap_or_else(|| "set".into()),
                name: d.string("name").unwrap_or_default(),
            })
            .unwrap_or_default();
        extra.email_addresses = f.strings("emailNotifyAddresses").unwrap_or_default();
        extra.email_types = f.strings("emailNotifyTypes").unwrap_or_default();
        extra.epilog_script = f.string("epilogScript");
        extra.prolog_script = f.string("prologScript");
        extra.job_group = f.string("jobGroup");
        extra.description = f.string("description");
        extra.partition_access_list = f
            .strings("partitionAccessListRequested")
            .unwrap_or_default();
        extra.reservation_requested = match f.raw("reservationRequested") {
            Some(Value::String(_)) => f.string("reservationRequested"),
            _ => f
                .object("reservationRequested", |r| r.string("name"))
                .flatten(),
        };
        extra.resource_fail_policy = f.string("resourceFailPolicy");
        extra.rm_extension = f.string("resourceManagerExtension");
        extra.submit_host = f.string("submitHost");
        extra.templates = f.references("templates", "name").unwrap_or_default();
        extra.virtual_containers = f
            .references("virtualContainers", "name")
            .unwrap_or_default();
        extra.vm_usage_policy = f.string("vmUsagePolicy");
        spec.request.nodes_excluded = f.references("nodesExcluded", "name").unwrap_or_default();
        spec.request.nodes_requested = f.references("nodesRequested", "name").unwrap_or_default();
        if let Some(partitions) = spec.extra.partition_access_list.first()
            && spec.extra.partition_access_list.len() == 1
        {
            spec.request.partition = Some(partitions.clone());
        }
        f.object("requirements", |r| read_requirements(r, &mut spec));
        spec
    })
}

fn read_requirements(r: &mut Fields<'_>, spec: &mut JobSpec) {
    let request = &mut spec.request;
    request.task_count = r
        .integer_in("taskCount", 1, limits::MAX_TASK_COUNT)
        .unwrap_or(1) as u32;
    // At most the task count: a node runs at most all the job's tasks.
    let most_per_node = i64::from(request.task_count.max(1)).min(limits::MAX_REQUEST_COUNT);
    request.tasks_per_node = r
        .integer_in("tasksPerNode", 1, most_per_node)
        .map(|n| n as u32);
    request.node_count = r
        .integer_in("nodeCount", 1, limits::MAX_REQUEST_COUNT)
        .map(|n| n as u32);
    request.architecture = r.string("architecture");
    request.features = r
        .strings("featuresRequested")
        .or_else(|| r.strings("features"))
        .unwrap_or_default();
    request.features_any = mode_is_or(r, "featuresRequestedMode");
    request.features_excluded = r.strings("featuresExcluded").unwrap_or_default();
    if mode_is_or(r, "featuresExcludedMode") {
        // "exclude nodes having any of these" is what AND/OR both mean for exclusion here.
    }
    request.os = r.string("image");
    if let Some(reservation) = r.string("reservation") {
        spec.extra.reservation_requested.get_or_insert(reservation);
    }
    let resources = r.object("resourcesPerTask", |p| {
        let mut dedicated = |key: &str| p.object(key, |x| x.number("dedicated")).flatten();
        let processors = dedicated("processors");
        let memory = dedicated("memory");
        let disk = dedicated("disk");
        let swap = dedicated("swap");
        let generic: Vec<(String, f64)> = p
            .keys()
            .filter(|k| !["processors", "memory", "disk", "swap"].contains(&k.as_str()))
            .cloned()
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|k| {
                p.object(&k, |x| x.number("dedicated"))
                    .flatten()
                    .map(|n| (k, n))
            })
            .collect();
        (processors, memory, disk, swap, generic)
    });
    if let Some((processors, memory, disk, swap, generic)) = resources {
        let positive = |n: Option<f64>| n.filter(|n| *n > 0.0).map(|n| n as u64);
        if let Some(p) = processors {
            if p < 1.0 || p.fract() != 0.0 {
                r.problem(
                    "resourcesPerTask.processors.dedicated",
                    format!("must be a whole number of at least 1, not {p}"),
                );
            } else {
                request.processors_per_task = p as u32;
            }
        }
        request.memory_per_task = positive(memory);
        request.disk_per_task = positive(disk);
        request.swap_per_task = positive(swap);
        request.generic_resources = generic.into_iter().collect();
    }
}

fn mode_is_or(r: &mut Fields<'_>, key: &str) -> bool {
    match r.string(key) {
        None => false,
        Some(m) if m.eq_ignore_ascii_case("and") => false,
        Some(m) if m.eq_ignore_ascii_case("or") => true,
        Some(m) => {
            r.problem(key, format!("must be AND or OR, not '{m}'"));
            false
        }
    }
}

/// A version-2 modify body (spec 4.5).
pub fn changes(body: &Value, dates: &WireDates) -> Result<JobChanges, ApiError> {
    read_object(body, summary::JOB_NOT_MODIFIED, |f| {
        let mut changes = JobChanges {
            custom_name: f.string("customName"),
            flags: f.strings("flags").map(|v| normalize_flags(&v)),
            holds: f.has("holds").then(|| holds_from(f, "holds")),
            messages: f.messages("messages"),
            duration: f.integer_in("duration", 0, drover_domain::limits::MAX_JOB_DURATION),
            partition_access_list: f.strings("partitionAccessListRequested"),
            reservation: match f.raw("reservationRequested") {
                Some(Value::String(_)) => f.string("reservationRequested"),
                _ => f
                    .object("reservationRequested", |r| r.string("name"))
                    .flatten(),
            },
            variables: f.variable_changes("variables"),
            ..Default::default()
        };
        if let Some((account, class, qos)) = f.object("credentials", |c| {
            (
                c.string("account"),
                c.string("jobClass"),
                c.string("qosRequested"),
            )
        }) {
            (changes.account, changes.job_class, changes.qos_requested) = (account, class, qos);
        }
        if let Some((start, deadline)) = f.object("dates", |d| {
            (
                d.date("earliestRequestedStartDate", dates),
                d.date("deadlineDate", dates),
            )
        }) {
            (changes.earliest_start, changes.deadline) = (start, deadline);
        }
        if let Some((user, system)) = f.object("priorities", |p| {
            (
                p.integer_in(
                    "user",
                    -limits::USER_PRIORITY_BOUND,
                    limits::USER_PRIORITY_BOUND,
                ),
                p.integer("system"),
            )
        }) {
            (changes.user_priority, changes.system_priority) = (user, system);
        }
        if let Some(list) = &changes.partition_access_list
            && list.len() == 1
        {
            changes.partition = list.first().cloned();
        }
        changes
    })
}
