//! Version 1 of the job (spec 2.3, 4.4): addressed by `id`, upper-case states.

use drover_domain::dates::WireDates;
use drover_domain::request::summary;
use drover_sched::JobChanges;
use drover_sched::job::{Hold, Job, JobSpec, JobState, Output};
use drover_sched::listing::{
    Render, effective_partitions, expected_state, queue_status, start_priority,
};
use serde_json::{Value, json};

use super::{date, holds_from, output_path, partition_of, refs};
use crate::error::ApiError;
use crate::input::{Fields, read_object};

/// Offers every member of the job in its version-1 shape, in order, with how to compute
/// its value (see `Documents`).
pub fn each_member(job: &Job, r: &Render, put: &mut impl FnMut(&str, &dyn Fn() -> Value)) {
    identity(job, put);
    execution(job, r, put);
    times(job, r, put);
}

/// Who, in which queue, in which state, on which hosts, with which priorities.
fn identity(job: &Job, put: &mut impl FnMut(&str, &dyn Fn() -> Value)) {
    let spec = &job.spec;
    let status = &job.status;
    // Values several members share are made only when one of them is asked for: a
    // list renders a single member of every job it judges (`JobShape::member`).
    put("id", &|| json!(job.id));
    put("name", &|| json!(spec.custom_name));
    put("account", &|| json!(spec.account));
    put("user", &|| json!(job.user()));
    put("group", &|| json!(spec.group));
    put("qos", &|| json!(spec.qos_requested));
    put("qosRequested", &|| json!(spec.qos_requested));
    put("queue", &|| json!(spec.job_class));
    put("queueStatus", &|| {
        json!(queue_status(status.state).to_uppercase())
    });
    put("state", &|| json!(status.state.upper()));
    put("expectedState", &|| json!(expected_state(job).upper()));
    put("flags", &|| json!(spec.flags));
    put("holds", &|| {
        json!(status.holds.iter().map(|h| h.upper()).collect::<Vec<_>>())
    });
    put("hosts", &|| json!(job.node_ids().collect::<Vec<_>>()));
    put("allocatedNodes", &|| refs(job.node_ids(), "id"));
    let in_vm = || {
        drover_domain::vm::wants_vm(job.spec.extra.vm_usage_policy.as_deref())
            && matches!(
                status.state,
                JobState::Starting | JobState::Running | JobState::Suspended
            )
    };
    put("allocatedVMs", &|| match in_vm() {
        true => json!([{ "id": drover_domain::vm::id_for_job(&job.id) }]),
        false => json!([]),
    });
    put("blockReason", &|| {
        status
            .block
            .as_ref()
            .map(|b| json!({ "message": b.message, "type": b.kind }))
            .unwrap_or(Value::Null)
    });
    put("bypass", &|| json!(0));
    put("startCount", &|| json!(status.counts.start));
    put("startPriority", &|| json!(start_priority(job)));
    put("runPriority", &|| json!(start_priority(job)));
    put("systemPriority", &|| json!(status.system_priority));
    put("userPriority", &|| json!(spec.user_priority));
}

/// What runs, with which environment, where its files go, and what it asked for.
fn execution(job: &Job, r: &Render, put: &mut impl FnMut(&str, &dyn Fn() -> Value)) {
    let spec = &job.spec;
    let status = &job.status;
    let request = &spec.request;
    put("commandFile", &|| json!(spec.command_file));
    put("commandLineArguments", &|| json!(spec.arguments));
    put("completionCode", &|| json!(status.completion_code));
    put("initialWorkingDirectory", &|| json!(spec.working_directory));
    put("environmentVariables", &|| json!(spec.environment));
    put("variables", &|| json!(spec.variables));
    put("genericAttributes", &|| {
        json!(spec.extra.generic_attributes)
    });
    put("emailNotifyTypes", &|| json!(spec.extra.email_types));
    put("emailNotifyUsers", &|| json!(spec.extra.email_addresses));
    put("effectivePartitionAccessList", &|| {
        json!(effective_partitions(job))
    });
    put("partitionAccessList", &|| {
        json!(spec.extra.partition_access_list)
    });
    put("masterHost", &|| json!(job.node_ids().next()));
    put("memoryRequested", &|| {
        let memory = request
            .memory_per_task
            .map(|m| m * u64::from(request.task_count));
        json!(memory.map_or(-1, |m| m as i64))
    });
    put("os", &|| json!(request.os));
    put("rmName", &|| {
        json!(job.spec.extra.reported_by.as_deref().unwrap_or(r.rm_name))
    });
    put("rmExtension", &|| json!(spec.extra.rm_extension));
    put("rmStandardErrorFilePath", &|| {
        json!(output_path(job, Output::Stderr))
    });
    put("rmStandardInputFilePath", &|| json!(spec.stdin_path));
    put("rmStandardOutputFilePath", &|| {
        json!(output_path(job, Output::Stdout))
    });
    put("standardErrorFilePath", &|| json!(spec.stderr_path));
    put("standardOutputFilePath", &|| json!(spec.stdout_path));
    // The resource manager's own id of the job (Slurm's job id), else ours.
    put("sourceRmJobId", &|| json!(rm_job_id(job)));
    put("destinationRmJobId", &|| json!(rm_job_id(job)));
    put("reservationRequested", &|| {
        json!(spec.extra.reservation_requested)
    });
    put("submitHost", &|| json!(spec.extra.submit_host));
    put("vmUsagePolicy", &|| json!(spec.extra.vm_usage_policy));
    put("virtualContainers", &|| {
        refs(&spec.extra.virtual_containers, "id")
    });
}

/// Durations, dates, messages and the requirement.
fn times(job: &Job, r: &Render, put: &mut impl FnMut(&str, &dyn Fn() -> Value)) {
    let spec = &job.spec;
    let status = &job.status;
    let date = |t: Option<i64>| date(r, t);
    put("activeDuration", &|| json!(job.active_seconds(r.now)));
    put("effectiveQueueDuration", &|| {
        json!(job.queued_seconds(r.now))
    });
    put("durationRequested", &|| json!(spec.duration));
    put("suspendDuration", &|| json!(job.suspended_seconds(r.now)));
    put("dedicatedProcessorSeconds", &|| {
        json!(job.processors() as f64 * job.active_seconds(r.now) as f64)
    });
    put("completionDate", &|| date(status.dates.completion));
    put("earliestStartDate", &|| {
        date(Some(spec.earliest_start.unwrap_or(status.dates.submit)))
    });
    put("earliestStartDateRequested", &|| date(spec.earliest_start));
    put("latestCompletedDateRequested", &|| date(spec.deadline));
    put("reservationStartDate", &|| Value::Null);
    put("startDate", &|| date(status.dates.start));
    put("submitDate", &|| date(Some(status.dates.submit)));
    put("messages", &|| json!(messages(job, r)));
    put("requirements", &|| json!([requirement(job)]));
}

/// The messages, indexed.
fn messages(job: &Job, r: &Render) -> Vec<Value> {
    let date = |t: Option<i64>| date(r, t);
    job.status
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            json!({
                "creationTime": date(Some(m.created)),
                "expireTime": null,
                "index": i,
                "message": m.text,
                "messageCount": 1,
                "author": m.author,
                "priority": 0,
            })
        })
        .collect()
}

/// The one requirement a job has.
fn requirement(job: &Job) -> Value {
    let spec = &job.spec;
    let status = &job.status;
    let request = &spec.request;
    let hosts: Vec<&str> = job.node_ids().collect();
    json!({
        "allocatedNodes": refs(job.node_ids(), "id"),
        "allocatedPartition": if status.allocation.is_empty() { Value::Null } else { json!(partition_of(job)) },
        "genericResources": request.generic_resources,
        "nodeAccessPolicy": null,
        "preferredNodeFeatures": [],
        "requiredArchitecture": request.architecture,
        "requiredClass": spec.job_class,
        "requiredDiskPerTask": request.disk_per_task.map_or(-1, |d| d as i64),
        "requiredMemoryPerTask": request.memory_per_task.map_or(-1, |m| m as i64),
        "requiredNetwork": null,
        "requiredNodeCountMinimum": request.node_count.map_or(hosts.len().max(1) as i64, i64::from),
        "requiredNodeDisk": -1,
        "requiredNodeFeatures": request.features,
        "requiredNodeMemory": -1,
        "requiredNodeProcessors": -1,
        "requiredNodeSwap": -1,
        "requiredPartition": request.partition,
        "requiredProcessorCountMinimum": job.processors(),
        "requiredProcessorsPerTask": request.processors_per_task,
        "requiredSwapPerTask": request.swap_per_task.map_or(-1, |s| s as i64),
        "tasksPerNode": request.tasks_per_node,
    })
}

/// A version-1 submission body.
pub fn submission(body: &Value, dates: &WireDates) -> Result<JobSpec, ApiError> {
    read_object(body, summary::JOB_NOT_SUBMITTED, |f| {
        let mut spec = JobSpec {
            custom_name: f.string("name"),
            user: f.string("user"),
            group: f.string("group"),
            account: f.string("account"),
            qos_requested: f.string("qosRequested").or_else(|| f.string("qos")),
            job_class: f.string("queue"),
            flags: f
                .strings("flags")
                .map(|v| normalize_flags(&v))
                .unwrap_or_default(),
            holds: holds_from(f, "holds"),
            user_priority: f
                .integer_in(
                    "userPriority",
                    -drover_domain::limits::USER_PRIORITY_BOUND,
                    drover_domain::limits::USER_PRIORITY_BOUND,
                )
                .unwrap_or(0),
            command_file: f.string("commandFile").unwrap_or_default(),
            arguments: arguments(f, "commandLineArguments"),
            working_directory: f.string("initialWorkingDirectory"),
            environment: f.string_map("environmentVariables").unwrap_or_default(),
            variables: f.string_map("variables").unwrap_or_default(),
            stdout_path: f.string("standardOutputFilePath"),
            stderr_path: f.string("standardErrorFilePath"),
            stdin_path: f
                .string("standardInputFilePath")
                .or_else(|| f.string("rmStandardInputFilePath")),
            duration: f.integer_in(
                "durationRequested",
                0,
                drover_domain::limits::MAX_JOB_DURATION,
            ),
            earliest_start: f.date("earliestStartDateRequested", dates),
            deadline: f.date("latestCompletedDateRequested", dates),
            ..Default::default()
        };
        let extra = &mut spec.extra;
        extra.email_types = f.strings("emailNotifyTypes").unwrap_or_default();
        extra.email_addresses = f.strings("emailNotifyUsers").unwrap_or_default();
        extra.partition_access_list = f.strings("partitionAccessList").unwrap_or_default();
        extra.reservation_requested = f.string("reservationRequested");
        extra.submit_host = f.string("submitHost");
        extra.vm_usage_policy = f.string("vmUsagePolicy");
        extra.rm_extension = f.string("rmExtension");
        extra.generic_attributes = f.strings("genericAttributes").unwrap_or_default();
        extra.virtual_containers = f.references("virtualContainers", "id").unwrap_or_default();
        f.object("requirements", |r| read_requirements(r, &mut spec));
        spec
    })
}

fn read_requirements(r: &mut Fields<'_>, spec: &mut JobSpec) {
    let request = &mut spec.request;
    let per_task = r
        .integer_in(
            "requiredProcessorsPerTask",
            1,
            drover_domain::limits::MAX_REQUEST_COUNT,
        )
        .unwrap_or(1) as u32;
    let processors = r.integer_in("requiredProcessorCountMinimum", 1, 1 << 30);
    let per_node = r
        .integer_in("tasksPerNode", 1, drover_domain::limits::MAX_REQUEST_COUNT)
        .map(|n| n as u32);
    let nodes = r
        .integer_in(
            "requiredNodeCountMinimum",
            1,
            drover_domain::limits::MAX_REQUEST_COUNT,
        )
        .map(|n| n as u32);
    request.processors_per_task = per_task;
    request.tasks_per_node = per_node;
    request.node_count = nodes;
    request.task_count = match (processors, nodes, per_node) {
        (Some(p), _, _) => ((p as u32) / per_task).max(1),
        (None, Some(n), Some(t)) => n * t,
        (None, Some(n), None) => n,
        (None, None, _) => 1,
    };
    request.memory_per_task = r
        .integer_in("requiredMemoryPerTask", 0, i64::MAX / 2)
        .map(|m| m as u64)
        .filter(|m| *m > 0);
    request.disk_per_task = r
        .integer_in("requiredDiskPerTask", 0, i64::MAX / 2)
        .map(|m| m as u64)
        .filter(|m| *m > 0);
    request.swap_per_task = r
        .integer_in("requiredSwapPerTask", 0, i64::MAX / 2)
        .map(|m| m as u64)
        .filter(|m| *m > 0);
    request.features = r.strings("requiredNodeFeatures").unwrap_or_default();
    request.architecture = r.string("requiredArchitecture");
    request.partition = r.string("requiredPartition");
    request.generic_resources = r.number_map("genericResources").unwrap_or_default();
    if let Some(class) = r.string("requiredClass") {
        spec.job_class.get_or_insert(class);
    }
}

/// `commandLineArguments`: a string, or a list of words.
pub(super) fn arguments(f: &mut Fields<'_>, key: &str) -> String {
    match f.raw(key) {
        Some(Value::Array(_)) => f
            .strings(key)
            .unwrap_or_default()
            .iter()
            .map(|a| quote(a))
            .collect::<Vec<_>>()
            .join(" "),
        _ => f.string(key).unwrap_or_default(),
    }
}

/// A word quoted so that splitting the command line gives it back.
fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

pub(super) fn normalize_flags(flags: &[String]) -> Vec<String> {
    let mut out: Vec<String> = flags
        .iter()
        .map(|f| f.trim().to_ascii_uppercase())
        .filter(|f| !f.is_empty())
        .collect();
    out.dedup();
    out
}

/// A version-1 modify body (spec 4.4).
pub fn changes(body: &Value, dates: &WireDates) -> Result<JobChanges, ApiError> {
    read_object(body, summary::JOB_NOT_MODIFIED, |f| JobChanges {
        custom_name: f.string("name"),
        account: f.string("account"),
        qos_requested: f.string("qosRequested"),
        job_class: f.string("queue"),
        earliest_start: f.date("earliestStartDateRequested", dates),
        flags: f.strings("flags").map(|v| normalize_flags(&v)),
        holds: f.has("holds").then(|| holds_from(f, "holds")),
        messages: f.messages("messages"),
        duration: f.integer_in(
            "durationRequested",
            0,
            drover_domain::limits::MAX_JOB_DURATION,
        ),
        partition: f
            .object("requirements", |r| r.string("requiredPartition"))
            .flatten(),
        reservation: f.string("reservationRequested"),
        trigger: f.string("trigger"),
        user_priority: f.integer_in(
            "userPriority",
            -drover_domain::limits::USER_PRIORITY_BOUND,
            drover_domain::limits::USER_PRIORITY_BOUND,
        ),
        variables: f.variable_changes("variables"),
        ..Default::default()
    })
}

/// Holds named in an action body, either spelling; `ALL` means every hold.
pub fn hold_names(holds: &[String]) -> Result<Vec<Hold>, ApiError> {
    let mut out = Vec::new();
    for name in holds {
        if name.eq_ignore_ascii_case("all") {
            return Ok(Vec::new());
        }
        match Hold::parse(name) {
            Some(h) => out.push(h),
            None => {
                return Err(ApiError::bad_request(
                    "Unknown hold type",
                    format!(
                        "holds: '{name}' is not a hold type; use User, System, Batch, Defer or All"
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// The id the resource manager knows the job by: Slurm's job id for a job it ran (or
/// runs), else the job's own id (the local manager's jobs are ours).
pub(super) fn rm_job_id(job: &drover_sched::job::Job) -> &str {
    job.status.rm_job_id.as_deref().unwrap_or(&job.id)
}
