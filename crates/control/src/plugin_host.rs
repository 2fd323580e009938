//! What plugins reach of the service: the host functions of their scripts, the node
//! changes of the Native type, and the loops that poll plugins and hand them events.
//!
//! Every host function is checked against the permissions the plugin's user holds now
//! (its roles are read at each call) and done as that user (`Requester`), so a plugin can
//! do nothing its user could not do through the interface. Scripts run on blocking
//! threads; the engine's async calls are awaited there with the runtime's handle.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover_auth::roles::{Authority, Scope};
use drover_auth::{Identity, Permission};
use drover_domain::dates::Timestamp;
use drover_domain::node::ReportedNode;
use drover_domain::request::{
    ExternalUse, JobAction, JobChanges, NodeChanges, NodeReportItem, ReportedJob, Requester,
};
use drover_monitor::event::{Event, ObjectRef};
use drover_monitor::{EventRecorder, Reports};
use drover_plugins::native::{JobReport, Locations, NodeReport};
use drover_plugins::registry::{HostFactory, MAX_DATA_BYTES, Plugin, Plugins};
use drover_plugins::script::Host;
use drover_sched::Scheduler;
use drover_sched::job::{Allocation, JobSpec, JobState};
use drover_sched::node::NodeState;
use drover_sched::template::{Given, JobTemplates};
use serde_json::{Map, Value, json};
use tokio::runtime::Handle;

use crate::settings::PluginsConfig;

/// How plugins are named as the origin of events, and as who acts for their user.
const PLUGIN_ORIGIN: &str = "plugin/";

/// The most host functions that act (submit, change, record, run a URL) one call of a
/// script may make, and the most lines it may log: a script looping over them would
/// otherwise flood the store, the scheduler or the log for its whole wall time.
const MAX_ACTIONS_PER_CALL: usize = 100;
const MAX_LOG_LINES_PER_CALL: usize = 100;

/// The most jobs `jobs()` answers (the latest not yet ended).
const MAX_LISTED_JOBS: usize = 1000;

/// Who users are now, and what the roles in force let them do: the service's access
/// control, as plugins' hosts ask it (the interface implements it).
pub trait People: Send + Sync {
    /// `user` as they are now (an administrator demoted since, or a user who left a
    /// group, no longer lends those rights); the reason when they cannot be found.
    fn identity_now<'a>(
        &'a self,
        user: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Identity, String>> + Send + 'a>>;
    /// The roles and principals in force.
    fn authority(&self) -> Arc<Authority>;
}

/// Builds the hosts of plugins: what they reach of the service.
pub struct PluginHosts {
    pub scheduler: Scheduler,
    pub events: EventRecorder,
    pub reports: Arc<Reports>,
    pub people: Arc<dyn People>,
    pub runtime: Handle,
    pub config: PluginsConfig,
    /// The job templates: a job a plugin submits takes their defaults.
    pub job_templates: Arc<JobTemplates>,
}

impl PluginHosts {
    fn host_of(
        &self,
        plugin: &Plugin,
        data: Arc<Mutex<Map<String, Value>>>,
    ) -> Result<PluginHost, String> {
        // Who the creator is now, not as they were at creation.
        let identity = self
            .runtime
            .block_on(self.people.identity_now(&plugin.created_by.user))?;
        Ok(PluginHost {
            plugin: plugin.id.clone(),
            config: plugin.config.clone(),
            locations: self.locations(),
            identity,
            scheduler: self.scheduler.clone(),
            events: self.events.clone(),
            reports: self.reports.clone(),
            people: self.people.clone(),
            runtime: self.runtime.clone(),
            job_templates: self.job_templates.clone(),
            data,
            actions: AtomicUsize::new(0),
            logged: AtomicUsize::new(0),
        })
    }
}

/// Who a plugin's reports are by: `plugin/<id>`, which no resource manager's name
/// (a plain word of the configuration) can be, so that a plugin named `slurm` never
/// speaks for Slurm's nodes.
fn reporter(plugin: &Plugin) -> String {
    format!("{PLUGIN_ORIGIN}{}", plugin.id)
}

/// A Native node line as the engine takes it: its description (CPROC, CMEMORY, CDISK,
/// ARCH, FEATURE) and what a `PUT` would set (state, os, partition, messages, metrics).
fn report_item(plugin: &str, report: NodeReport) -> NodeReportItem {
    NodeReportItem {
        node: ReportedNode {
            id: report.id,
            processors: report.processors,
            memory: report.memory,
            disk: report.disk,
            architecture: report.architecture,
            features: (!report.features.is_empty()).then_some(report.features),
            // A plugin's partition is a change, as a PUT would make it.
            partition: None,
            reporter: plugin.to_string(),
        },
        changes: NodeChanges {
            state: report.state.as_deref().and_then(NodeState::parse),
            os: report.os,
            partition: report.partition,
            messages: report.messages,
            generic_events: report.generic_events,
            generic_metrics: report.generic_metrics,
            ..NodeChanges::default()
        },
    }
}

/// The processors outside work holds on each node: every active job (Running, Starting,
/// Suspended) holds `DPROCS` processors (1 if not given) for each entry of its
/// `TASKLIST` (one node id per task, comma-separated: `n1,n1,n2`).
fn external_processors(jobs: &[JobReport]) -> BTreeMap<String, u32> {
    let mut held = BTreeMap::new();
    for job in jobs {
        let active = matches!(
            job.state.as_deref(),
            Some("Running" | "Starting" | "Suspended")
        );
        let Some(tasks) = job.fields.get("TASKLIST").filter(|_| active) else {
            continue;
        };
        let per_task = job
            .fields
            .get("DPROCS")
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(1);
        for node in tasks.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let total: &mut u32 = held.entry(node.to_string()).or_default();
            *total = total.saturating_add(per_task);
        }
    }
    held
}

/// A Native job line as the book shows it: its state in the job vocabulary (one in an
/// unknown state is left out), the processors it holds on each node (as
/// [`external_processors`] counts them; left out if a node is not known here), its exit
/// code (`EXITCODE`) once ended.
fn reported_job(job: &JobReport, scheduler: &Scheduler) -> Option<ReportedJob> {
    let state = match job.state.as_deref()? {
        "Idle" | "Hold" | "Deferred" | "Blocked" | "Staging" => JobState::Idle,
        "Starting" | "Running" | "Canceling" => JobState::Running,
        "Suspended" => JobState::Suspended,
        "Completed" => JobState::Completed,
        "Removed" => JobState::Removed,
        "Vacated" => JobState::Vacated,
        _ => return None,
    };
    let held = if state.is_running() {
        external_processors(std::slice::from_ref(job))
    } else {
        BTreeMap::new()
    };
    let nodes = scheduler.nodes();
    if held
        .keys()
        .any(|id| !nodes.iter().any(|n| &n.config.id == id))
    {
        return None;
    }
    Some(ReportedJob {
        id: job.id.clone(),
        user: job.user.clone(),
        state,
        placement: held
            .into_iter()
            .map(|(node, tasks)| Allocation { node, tasks })
            .collect(),
        completion_code: job.fields.get("EXITCODE").and_then(|c| c.parse().ok()),
    })
}

impl HostFactory for PluginHosts {
    fn host(&self, plugin: &Plugin, data: Arc<Mutex<Map<String, Value>>>) -> Arc<dyn Host> {
        match self.host_of(plugin, data) {
            Ok(host) => Arc::new(host),
            Err(why) => Arc::new(NoHost(why)),
        }
    }

    fn apply_nodes(&self, plugin: &Plugin, reports: Vec<NodeReport>) -> Result<String, String> {
        let host = self.host_of(plugin, Arc::default())?;
        let by = host.allowed(Permission::update("nodes"))?;
        let scheduler = &host.scheduler;
        let items = reports
            .into_iter()
            .map(|report| report_item(&reporter(plugin), report))
            .collect();
        let outcome = self
            .runtime
            .block_on(scheduler.report_nodes(items, by))
            .map_err(|e| e.to_string())?;
        let mut said = format!(
            "{} nodes updated, {} unchanged",
            outcome.updated, outcome.unchanged
        );
        if !outcome.added.is_empty() {
            said.push_str(&format!("; added: {}", outcome.added.join(", ")));
        }
        if !outcome.refused.is_empty() {
            said.push_str(&format!("; refused: {}", outcome.refused.join("; ")));
        }
        if !outcome.down.is_empty() {
            said.push_str(&format!(
                "; no longer reported, down: {}",
                outcome.down.join(", ")
            ));
        }
        Ok(said)
    }

    fn apply_jobs(&self, plugin: &Plugin, reports: Vec<JobReport>) -> Result<String, String> {
        let host = self.host_of(plugin, Arc::default())?;
        let by = host.allowed(Permission::update("nodes"))?;
        let scheduler = &host.scheduler;
        // This service's own jobs are not outside work, whatever the report says.
        let outside: Vec<JobReport> = reports
            .into_iter()
            .filter(|job| scheduler.job(&job.id).is_none())
            .collect();
        let count = outside.len();
        let report = ExternalUse {
            reporter: reporter(plugin),
            processors: external_processors(&outside),
            jobs: outside
                .iter()
                .filter_map(|job| reported_job(job, scheduler))
                .collect(),
        };
        let outcome = self
            .runtime
            .block_on(scheduler.report_external_use(report, by))
            .map_err(|e| e.to_string())?;
        let mut said = format!("{count} jobs of other work read");
        if !outcome.added.is_empty() {
            said.push_str(&format!("; shown as jobs: {}", outcome.added.join(", ")));
        }
        if outcome.ended > 0 {
            said.push_str(&format!("; {} ended", outcome.ended));
        }
        if !outcome.unknown.is_empty() {
            said.push_str(&format!(
                "; their nodes not known here: {}",
                outcome.unknown.join(", ")
            ));
        }
        Ok(said)
    }

    fn may_read_events(&self, plugin: &Plugin) -> bool {
        self.host_of(plugin, Arc::default())
            .is_ok_and(|host| host.allowed(Permission::read("events")).is_ok())
    }

    fn locations(&self) -> Locations {
        let mut locations = Locations::new(self.config.native_directories.clone());
        locations.run_as = self.config.native_user.clone();
        locations.allow_root = self.config.native_allow_root;
        locations
    }
}

/// A host before the server has started: every call is refused.
struct NoHost(String);

impl Host for NoHost {
    fn call(&self, _: &str, _: Vec<Value>, _: Instant) -> Result<Value, String> {
        Err(self.0.clone())
    }

    fn log(&self, _: &str, _: &str) {}
}

struct PluginHost {
    plugin: String,
    config: Map<String, Value>,
    locations: Locations,
    identity: Identity,
    scheduler: Scheduler,
    events: EventRecorder,
    reports: Arc<Reports>,
    people: Arc<dyn People>,
    runtime: Handle,
    job_templates: Arc<JobTemplates>,
    data: Arc<Mutex<Map<String, Value>>>,
    /// What this call of the script has done so far (a host serves one call).
    actions: AtomicUsize,
    logged: AtomicUsize,
}

impl PluginHost {
    /// Waits for `work` (a message to the engine or the recorder) until `deadline`, the
    /// script call's: what was sent is done either way, but the script waits no longer
    /// than its time (it holds its plugin's lock meanwhile).
    fn until<T, E: ToString>(
        &self,
        deadline: Instant,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, String> {
        let deadline = tokio::time::Instant::from_std(deadline);
        match self
            .runtime
            .block_on(async { tokio::time::timeout_at(deadline, work).await })
        {
            Ok(done) => done.map_err(|e| e.to_string()),
            Err(_) => Err("not answered within the call's time".into()),
        }
    }

    /// The plugin's user as the engine sees them, if they hold `permission` now.
    fn allowed(&self, permission: Permission) -> Result<Requester, String> {
        let scope = if self.identity.admin {
            Some(Scope::All)
        } else {
            self.people.authority().scope_of(&self.identity, permission)
        };
        match scope {
            Some(scope) => Ok(Requester {
                user: self.identity.name.clone(),
                // What it does is recorded as done by the plugin for its user, and the
                // events of it are not handed back to plugins (`event_loop`).
                proxy_user: Some(format!("{PLUGIN_ORIGIN}{}", self.plugin)),
                over_all: scope == Scope::All,
                may_name_owners: scope == Scope::All,
            }),
            None => Err(format!(
                "{} (the plugin's user) may not {} {}",
                self.identity.name,
                permission.action.as_str(),
                permission.resource
            )),
        }
    }

    fn nodes(&self, only: Option<&str>) -> Result<Value, String> {
        self.allowed(Permission::read("nodes"))?;
        let nodes: Vec<Value> = self
            .scheduler
            .nodes()
            .iter()
            .filter(|n| only.is_none_or(|id| n.id() == id))
            .map(|n| {
                json!({"id": n.id(), "state": format!("{:?}", n.state()),
                       "processors": n.config.processors,
                       "availableProcessors": n.config.processors.saturating_sub(n.used_processors),
                       "memory": n.config.memory, "features": n.config.features,
                       "genericMetrics": n.overrides.generic_metrics})
            })
            .collect();
        match only {
            Some(id) => nodes
                .into_iter()
                .next()
                .ok_or_else(|| format!("no node '{id}'")),
            None => Ok(Value::Array(nodes)),
        }
    }

    fn jobs(&self, only: Option<&str>) -> Result<Value, String> {
        let by = self.allowed(Permission::read("jobs"))?;
        let visible = |job: &drover_sched::job::Job| by.over_all || job.user() == by.user;
        let render = |job: &drover_sched::job::Job| {
            json!({"id": job.id, "name": job.spec.custom_name, "user": job.user(),
                   "account": job.spec.account, "state": format!("{:?}", job.status.state),
                   "nodes": job.status.allocation.iter().map(|a| a.node.clone()).collect::<Vec<_>>(),
                   "completionCode": job.status.completion_code})
        };
        if let Some(id) = only {
            return match self.scheduler.job(id) {
                Some(job) if visible(&job) => Ok(render(&job)),
                _ => Err(format!("no job '{id}'")),
            };
        }
        // From the state index: the cost is the live jobs', not every job ever run.
        let user = (!by.over_all).then_some(by.user.as_str());
        let listed: Vec<Value> = self.scheduler.with_jobs(|book| {
            book.live_positions(user)
                .iter()
                .rev()
                .map(|position| book.at(position as usize))
                .filter(|j| !j.status.state.is_final() && visible(j))
                .take(MAX_LISTED_JOBS)
                .map(|j| render(j))
                .collect()
        });
        Ok(Value::Array(listed))
    }

    fn set_node(&self, id: &str, change: &Value, deadline: Instant) -> Result<Value, String> {
        let by = self.allowed(Permission::update("nodes"))?;
        let state = match change.get("state").and_then(Value::as_str) {
            Some(text) => Some(
                NodeState::parse(text)
                    .ok_or_else(|| format!("state '{text}' is not a node state"))?,
            ),
            None => None,
        };
        let mut messages: Vec<String> = crate::strings_of(change.get("messages"));
        messages.extend(
            change
                .get("message")
                .and_then(Value::as_str)
                .map(String::from),
        );
        let generic_metrics: BTreeMap<String, f64> = change
            .get("metrics")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                    .collect()
            })
            .unwrap_or_default();
        let changes = NodeChanges {
            state,
            messages,
            generic_metrics,
            ..NodeChanges::default()
        };
        let said = self.until(deadline, self.scheduler.modify_node(id, changes, by))?;
        Ok(json!(said))
    }

    fn submit_job(&self, request: &Value, deadline: Instant) -> Result<Value, String> {
        let by = self.allowed(Permission::create("jobs"))?;
        let text = |key: &str| request.get(key).and_then(Value::as_str).map(String::from);
        let command = text("command").ok_or("submit_job needs #{command}")?;
        let mut spec = JobSpec {
            custom_name: text("name"),
            user: Some(text("user").unwrap_or_else(|| by.user.clone())),
            account: text("account"),
            command_file: command,
            arguments: text("arguments").unwrap_or_default(),
            working_directory: text("directory"),
            duration: request.get("duration").and_then(Value::as_i64),
            ..JobSpec::default()
        };
        spec.request.task_count = 1;
        spec.request.processors_per_task = request
            .get("processors")
            .and_then(Value::as_u64)
            .map_or(1, |n| {
                n.clamp(1, drover_domain::limits::MAX_VM_PROCESSORS.into()) as u32
            });
        spec.variables
            .insert("DROVER_PLUGIN".into(), self.plugin.clone());
        // What the script gave wins; the templates fill the rest, as for a submission.
        let given = Given {
            command_file: true,
            arguments: text("arguments").is_some(),
            account: spec.account.is_some(),
            duration: spec.duration.is_some(),
            resources: request
                .get("processors")
                .and_then(Value::as_u64)
                .map(|_| "processors".to_string())
                .into_iter()
                .collect(),
            ..Given::default()
        };
        self.job_templates
            .apply(&mut spec, given)
            .map_err(|unknown| unknown[0].to_string())?;
        self.until(deadline, self.scheduler.submit(spec, by))
            .map(Value::String)
    }

    fn modify_job(&self, id: &str, change: &Value, deadline: Instant) -> Result<Value, String> {
        let by = self.allowed(Permission::update("jobs"))?;
        let changes = JobChanges {
            custom_name: change.get("name").and_then(Value::as_str).map(String::from),
            account: change
                .get("account")
                .and_then(Value::as_str)
                .map(String::from),
            ..JobChanges::default()
        };
        let said = self.until(deadline, self.scheduler.modify(id, changes, by))?;
        Ok(json!(said))
    }

    fn cancel_job(&self, id: &str, deadline: Instant) -> Result<Value, String> {
        let by = self.allowed(Permission::delete("jobs"))?;
        let cancel = self.scheduler.act(id, JobAction::Cancel, by);
        self.until(deadline, cancel).map(Value::String)
    }

    fn create_event(&self, request: &Value, deadline: Instant) -> Result<Value, String> {
        self.allowed(Permission::create("events"))?;
        let text = |key: &str| request.get(key).and_then(Value::as_str).map(String::from);
        let kind = text("type").ok_or("create_event needs #{type}")?;
        let severity = text("severity")
            .unwrap_or_else(|| "INFO".into())
            .to_ascii_uppercase();
        if !["INFO", "WARN", "ERROR", "FATAL"].contains(&severity.as_str()) {
            return Err(format!(
                "severity '{severity}' is not INFO, WARN, ERROR or FATAL"
            ));
        }
        let mut event = Event::new(Timestamp::now(), kind, &severity);
        event.origin = Some(format!("{PLUGIN_ORIGIN}{}", self.plugin));
        event.message = text("message");
        event.arguments = crate::strings_of(request.get("arguments"));
        event.associated_objects = request
            .get("associatedObjects")
            .and_then(Value::as_array)
            .map(|objects| {
                objects
                    .iter()
                    .filter_map(|o| {
                        Some(ObjectRef {
                            kind: o.get("type")?.as_str()?.into(),
                            id: o.get("id")?.as_str()?.into(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let recorded = self.until(deadline, self.events.record(vec![event]))?;
        Ok(json!(recorded.first().map(|e| e.id.clone())))
    }

    fn post_sample(&self, report: &str, data: &Value) -> Result<Value, String> {
        self.allowed(Permission::update("reports"))?;
        let Some(data) = data.as_object() else {
            return Err("post_sample needs a map of numbers".into());
        };
        let sample = drover_monitor::reports::Sample {
            at: Timestamp::now().as_second(),
            data: data.clone(),
        };
        self.reports
            .add_samples(report, &[sample], Timestamp::now().as_second())
            .map(|_| Value::Null)
            .map_err(|e| e.to_string())
    }
}

impl Host for PluginHost {
    fn call(&self, name: &str, args: Vec<Value>, deadline: Instant) -> Result<Value, String> {
        let text = |i: usize| {
            args.get(i)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("argument {} must be a string", i + 1))
        };
        let null = Value::Null;
        let arg = |i: usize| args.get(i).unwrap_or(&null);
        if matches!(
            name,
            "set_node"
                | "submit_job"
                | "modify_job"
                | "cancel_job"
                | "create_event"
                | "post_sample"
                | "read_url"
        ) && self.actions.fetch_add(1, Ordering::Relaxed) >= MAX_ACTIONS_PER_CALL
        {
            return Err(format!(
                "a call may act at most {MAX_ACTIONS_PER_CALL} times (submit, change, record, read a URL)"
            ));
        }
        match name {
            "nodes" => self.nodes(None),
            "node" => self.nodes(Some(text(0)?)),
            "jobs" => self.jobs(None),
            "job" => self.jobs(Some(text(0)?)),
            "vms" => {
                let by = self.allowed(Permission::read("vms"))?;
                let vms: Vec<Value> = self.scheduler
                    .vms()
                    .iter()
                    .filter(|v| by.over_all || v.owner == by.user)
                    .map(|v| json!({"id": v.id, "owner": v.owner, "node": v.node, "state": v.phase.state(),
                                    "substate": v.phase.substate(), "os": v.image}))
                    .collect();
                Ok(Value::Array(vms))
            }
            "reservations" => {
                let by = self.allowed(Permission::read("reservations"))?;
                // Those its user may see, as GET /rest/reservations answers them.
                let ids: Vec<Value> = self
                    .scheduler
                    .reservations()
                    .iter()
                    .filter(|r| by.over_all || r.belongs_to(&by.user))
                    .map(|r| json!({"id": r.id}))
                    .collect();
                Ok(Value::Array(ids))
            }
            "set_node" => self.set_node(text(0)?, arg(1), deadline),
            "submit_job" => self.submit_job(arg(0), deadline),
            "modify_job" => self.modify_job(text(0)?, arg(1), deadline),
            "cancel_job" => self.cancel_job(text(0)?, deadline),
            "create_event" => self.create_event(arg(0), deadline),
            "post_sample" => self.post_sample(text(0)?, arg(1)),
            "data_get" => Ok(self
                .data
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(text(0)?)
                .cloned()
                .unwrap_or(Value::Null)),
            "data_set" => {
                let key = text(0)?.to_string();
                let mut data = self.data.lock().unwrap_or_else(|e| e.into_inner());
                let before = data.insert(key.clone(), arg(1).clone());
                // Bounded as it grows, not only when the call ends: a script looping
                // over new keys would otherwise hold gigabytes until then.
                let size = serde_json::to_vec(&*data).map_or(usize::MAX, |b| b.len());
                if size > MAX_DATA_BYTES {
                    match before {
                        Some(value) => data.insert(key, value),
                        None => data.remove(&key),
                    };
                    return Err(format!(
                        "the plugin's data would take {size} bytes, more than {MAX_DATA_BYTES}"
                    ));
                }
                Ok(Value::Null)
            }
            "config" => Ok(Value::Object(self.config.clone())),
            // Only inside the directories the operator configured for Native URLs, as
            // the user configured there, and killed when the call's time is up.
            "read_url" => {
                drover_plugins::native::read_url(text(0)?, &self.locations.until(deadline))
                    .map(Value::String)
                    .map_err(|e| e.to_string())
            }
            other => Err(format!("no host function '{other}'")),
        }
    }

    fn log(&self, level: &str, message: &str) {
        let logged = self.logged.fetch_add(1, Ordering::Relaxed);
        if logged == MAX_LOG_LINES_PER_CALL {
            eprintln!(
                "drover: plugin {}: more than {MAX_LOG_LINES_PER_CALL} lines in one call; the rest are dropped",
                self.plugin
            );
        }
        if logged >= MAX_LOG_LINES_PER_CALL {
            return;
        }
        // One line each: a newline in a message would forge lines of the service's log.
        let line = |text: &str, most: usize| -> String {
            text.chars()
                .take(most)
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect()
        };
        let (level, message) = (line(level, 16), line(message, 1024));
        eprintln!("drover: plugin {} [{level}]: {message}", self.plugin);
    }
}

/// Polls every STARTED plugin when it is due, each on a blocking thread, never two polls
/// of one plugin at once; runs until aborted.
pub async fn poll_loop(plugins: Arc<Plugins>) {
    let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = Timestamp::now().as_second();
        for id in plugins.due(now) {
            if !in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id.clone())
            {
                continue;
            }
            let (plugins, in_flight) = (plugins.clone(), in_flight.clone());
            tokio::task::spawn_blocking(move || {
                let _ = plugins.poll(&id);
                in_flight
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
            });
        }
    }
}

/// Hands every stored event (but those plugins made, or that what plugins did caused) to
/// the plugins that take events: a plugin submitting a job for each job submitted would
/// otherwise be handed its own submissions, without end.
pub async fn event_loop(events: EventRecorder, plugins: Arc<Plugins>) {
    let mut events = events.follow();
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let by_plugin = |name: Option<&str>| name.is_some_and(|o| o.starts_with(PLUGIN_ORIGIN));
        if by_plugin(event.origin.as_deref())
            || by_plugin(
                event
                    .initiated_by
                    .as_ref()
                    .and_then(|i| i.proxy_user.as_deref()),
            )
        {
            continue;
        }
        let plugins = plugins.clone();
        // Most servers run no plugin: an event then costs neither its conversion nor a
        // trip to a blocking thread (three per short job).
        if !plugins.may_have_started() {
            continue;
        }
        let value = serde_json::to_value(&*event).unwrap_or_default();
        let _ = tokio::task::spawn_blocking(move || plugins.deliver(&value)).await;
    }
}
