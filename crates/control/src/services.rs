//! The service controller: brings services up and tears them down (spec 2.11, 4.10),
//! with the engine's own objects. It is level-triggered: each pass reads every stored
//! service and the engine's VMs, jobs and containers, and takes the next step of each
//! service whose phase is not settled. What a step makes is found again by a name that
//! cannot be taken by anyone else (VM `svc-<service id>`, container described `Service
//! <name>`, job with variable `DROVER_SERVICE=<service id>`), so a pass interrupted by a
//! restart never makes a thing twice: the next pass resumes where it was.
//!
//! - Pending → SettingUp once the tree's start date is reached, its container has its
//!   virtual container, and every service it depends on (its container's
//!   `attributes.sched.dependencies`) is Up.
//! - SettingUp: the top-level service and every container get a virtual container (a
//!   nested one joins its parent's); a `vm` service a VM (made by a `genericVM-setup`
//!   system job, with its storage services' disks), Up when its guest runs; a `pm`
//!   service a job holding a node for its user, Up when it runs; a `storage` service is
//!   a disk of its VM service, Up at once; a container is Up when all it holds is.
//! - TearingDown, in reverse dependency order: a service goes only once nothing that
//!   depends on it and nothing it holds remains; jobs are cancelled, VMs destroyed (their
//!   disks with them), containers deleted. The records then go (a deletion), or the tree
//!   is kept `Ended` (its duration ended).
//!
//! The engine checks every step as the service's user asking (`Requester`, not an
//! administrator), so a service can never make what its user could not.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use drover_cloud::{ServiceRecords, StoredService};
use drover_domain::dates::Timestamp;
use drover_domain::request::{ContainerChange, ContainerRequest, JobAction, Requester, SchedError};
use drover_domain::service::{self, Service, ServicePhase};
use drover_domain::service_template::ServiceType;
use drover_domain::virtual_container::Members;
use drover_domain::vm::{SERVICE_VM_PREFIX, VmCommand, VmPhase, VmRequest};
use drover_monitor::EventRecorder;
use drover_monitor::event::{Event, InitiatedBy, ObjectRef, PrimaryObject};
use drover_sched::Scheduler;
use drover_sched::job::JobSpec;
use drover_sched::template::{Given, JobTemplates};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// What an Up service is made of is doing.
enum Condition {
    /// Gone for good: the service fails, saying why.
    Gone(String),
    /// There, but not running now (a VM powered off).
    Down(String),
    /// Running (the detail its status gives).
    Running(Option<String>),
}

/// The job variable naming the service a `pm` service's job holds a node for.
pub const SERVICE_VARIABLE: &str = "DROVER_SERVICE";

/// How often a pass runs when nothing wakes it (guests and jobs move on their own).
const PASS_EVERY: Duration = Duration::from_millis(500);

pub struct ServiceControl {
    pub records: Arc<ServiceRecords>,
    pub scheduler: Scheduler,
    pub events: EventRecorder,
    /// Notified by the interface after each creation, change or deletion.
    pub wake: Arc<Notify>,
    /// The job templates: a `pm` service's job takes their defaults.
    pub job_templates: Arc<JobTemplates>,
}

impl ServiceControl {
    /// Runs passes until the task is aborted.
    pub async fn run(self) {
        loop {
            if let Err(error) = self.pass().await {
                eprintln!("drover: services: {error}");
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(PASS_EVERY) => {}
            }
        }
    }

    /// One pass over every service that is not failed or ended.
    pub async fn pass(&self) -> Result<(), String> {
        let all = self.read_all().await?;
        // Up services are watched too: their VM or job may go at any time (check_up).
        if all
            .iter()
            .all(|s| matches!(s.value.phase, ServicePhase::Failed | ServicePhase::Ended))
        {
            return Ok(());
        }
        let by_name: HashMap<&str, &StoredService> =
            all.iter().map(|s| (s.value.name.as_str(), s)).collect();
        let now = self.scheduler.now();
        for stored in &all {
            let service = &stored.value;
            if service.parent.is_none()
                && service.ends_at.is_some_and(|end| end <= now)
                && !matches!(
                    service.phase,
                    ServicePhase::TearingDown | ServicePhase::Ended
                )
            {
                self.tear_down(&service.name, false, "its duration ended")
                    .await?;
                continue;
            }
            let parent = service
                .parent
                .as_deref()
                .and_then(|p| by_name.get(p))
                .copied();
            let step = match service.phase {
                ServicePhase::Pending => self.maybe_begin(stored, parent, &by_name, now).await,
                ServicePhase::SettingUp => self.set_up(stored, parent, &all).await,
                ServicePhase::Up | ServicePhase::Down => self.check_up(stored, &all).await,
                ServicePhase::TearingDown => self.take_down(stored, &all).await,
                ServicePhase::Failed | ServicePhase::Ended => Ok(()),
            };
            if let Err(error) = step {
                eprintln!("drover: services: {}: {error}", service.name);
            }
        }
        Ok(())
    }

    async fn read_all(&self) -> Result<Vec<StoredService>, String> {
        let records = self.records.clone();
        tokio::task::spawn_blocking(move || records.all())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }

    /// Changes the stored service `id` (a no-op if it went meanwhile).
    async fn update(
        &self,
        id: &str,
        change: impl FnOnce(&mut Service) + Send + 'static,
    ) -> Result<(), String> {
        let records = self.records.clone();
        let id = id.to_string();
        tokio::task::spawn_blocking(move || {
            records.update(&id, |s| {
                change(s);
                Ok(())
            })
        })
        .await
        .map_err(|e| e.to_string())?
        .map(drop)
        .map_err(|e| e.to_string())
    }

    /// Moves the service on to `phase`, unless its phase changed since `stored` was read
    /// (a deletion meanwhile wins over a step decided before it).
    async fn enter(
        &self,
        stored: &StoredService,
        phase: ServicePhase,
        detail: Option<String>,
    ) -> Result<(), String> {
        let read = stored.value.phase;
        self.update(&stored.id, move |s| {
            if s.phase == read {
                s.enter(phase, detail.as_deref());
            }
        })
        .await
    }

    /// Marks the tree under `name` for teardown; `remove`: its records go once down.
    async fn tear_down(&self, name: &str, remove: bool, why: &str) -> Result<(), String> {
        let records = self.records.clone();
        let (name, why) = (name.to_string(), why.to_string());
        tokio::task::spawn_blocking(move || records.tear_down(&name, remove, &why))
            .await
            .map_err(|e| e.to_string())?
            .map(drop)
            .map_err(|e| e.to_string())
    }

    async fn maybe_begin(
        &self,
        stored: &StoredService,
        parent: Option<&StoredService>,
        by_name: &HashMap<&str, &StoredService>,
        now: i64,
    ) -> Result<(), String> {
        let service = &stored.value;
        if service.starts_at > now {
            return Ok(());
        }
        if let Some(parent) = parent {
            if parent.value.container().is_none() {
                return Ok(());
            }
            // One it waits for that was deleted (forced) or failed never comes up.
            if let Some(why) =
                service
                    .waits_for(&parent.value)
                    .into_iter()
                    .find_map(|d| match by_name.get(d) {
                        None => Some(format!("the service {d} it waits for was deleted")),
                        Some(s) if s.value.remove_when_down => {
                            Some(format!("the service {d} it waits for was deleted"))
                        }
                        Some(s) if s.value.phase == ServicePhase::Failed => {
                            Some(format!("the service {d} it waits for failed"))
                        }
                        Some(_) => None,
                    })
            {
                return self.fail(stored, why).await;
            }
            let waiting: Vec<&str> = service
                .waits_for(&parent.value)
                .into_iter()
                .filter(|d| {
                    by_name
                        .get(d)
                        .is_none_or(|s| s.value.phase != ServicePhase::Up)
                })
                .collect();
            if !waiting.is_empty() {
                let detail = format!("waiting for {}", waiting.join(", "));
                if service.status != format!("Pending: {detail}") {
                    self.enter(stored, ServicePhase::Pending, Some(detail))
                        .await?;
                }
                return Ok(());
            }
        }
        self.enter(stored, ServicePhase::SettingUp, None).await
    }

    /// One step of setting `stored` up.
    async fn set_up(
        &self,
        stored: &StoredService,
        parent: Option<&StoredService>,
        all: &[StoredService],
    ) -> Result<(), String> {
        let service = &stored.value;
        let holds_container = service.parent.is_none() || service.kind == ServiceType::Container;
        if holds_container && service.container().is_none() {
            return self.make_container(stored, parent).await;
        }
        // The container a thing it makes joins: its own, else its parent's.
        let container = service
            .container()
            .or_else(|| parent.and_then(|p| p.value.container()))
            .map(String::from);
        match service.kind {
            ServiceType::Container => {
                let children: Vec<&StoredService> = all
                    .iter()
                    .filter(|s| s.value.parent.as_deref() == Some(service.name.as_str()))
                    .collect();
                if let Some(failed) = children
                    .iter()
                    .find(|c| c.value.phase == ServicePhase::Failed)
                {
                    let detail = format!("the service {} failed", failed.value.name);
                    return self.fail(stored, detail).await;
                }
                if children.iter().all(|c| c.value.phase == ServicePhase::Up) {
                    return self.up(stored, None).await;
                }
                Ok(())
            }
            ServiceType::Storage => {
                let size = service.resource(service::DISK).unwrap_or(0.0);
                let vm = service.job_text("vmService").unwrap_or("?").to_string();
                self.up(stored, Some(format!("a {size} GB disk of the VM of {vm}")))
                    .await
            }
            ServiceType::Vm => self.set_up_vm(stored, all, container).await,
            ServiceType::Pm => self.set_up_pm(stored, container).await,
        }
    }

    /// The virtual container the service made: the one recorded, else the one described
    /// as its own (made just before a restart, not yet recorded). Either is its user's:
    /// the id of a container deleted meanwhile may have been given to another's.
    fn container_of(&self, service: &Service) -> Option<String> {
        let description = format!("Service {}", service.name);
        let containers = self.scheduler.containers();
        let recorded = service.container();
        containers
            .iter()
            .find(|c| Some(c.id.as_str()) == recorded && c.belongs_to(&service.user))
            .or_else(|| {
                containers.iter().find(|c| {
                    c.description.as_deref() == Some(description.as_str())
                        && c.owner.as_ref().is_some_and(|o| o.name == service.user)
                })
            })
            .map(|c| c.id.clone())
    }

    async fn make_container(
        &self,
        stored: &StoredService,
        parent: Option<&StoredService>,
    ) -> Result<(), String> {
        let service = &stored.value;
        let description = format!("Service {}", service.name);
        let by = requester(service);
        let id = match self.container_of(service) {
            Some(id) => id,
            None => {
                let request = ContainerRequest {
                    description: Some(description),
                    owner: None,
                    creator: service.user.clone(),
                };
                match self.scheduler.create_container(request, by.clone()).await {
                    Ok(id) => id,
                    Err(error) => {
                        return self.refused(stored, "its virtual container", error).await;
                    }
                }
            }
        };
        if let Some(outer) = parent.and_then(|p| p.value.container()) {
            let members = Members {
                virtual_containers: vec![id.clone()],
                ..Members::default()
            };
            self.join(outer, members, &by).await;
        }
        self.update(&stored.id, move |s| {
            s.sched_mut().insert("vc".into(), json!({"id": id}));
        })
        .await
    }

    /// Adds `members` to the container `id`, unless they are there already.
    async fn join(&self, id: &str, members: Members, by: &Requester) {
        let containers = self.scheduler.containers();
        let present = containers.iter().find(|c| c.id == id).is_some_and(|c| {
            members
                .virtual_containers
                .iter()
                .all(|m| c.members.virtual_containers.contains(m))
                && members
                    .virtual_machines
                    .iter()
                    .all(|m| c.members.virtual_machines.contains(m))
                && members.jobs.iter().all(|m| c.members.jobs.contains(m))
        });
        if !present {
            let change = ContainerChange::Add(members);
            if let Err(error) = self
                .scheduler
                .change_container(id, change, by.clone())
                .await
            {
                eprintln!("drover: services: cannot add to virtual container {id}: {error}");
            }
        }
    }

    async fn set_up_vm(
        &self,
        stored: &StoredService,
        all: &[StoredService],
        container: Option<String>,
    ) -> Result<(), String> {
        let service = &stored.value;
        let vm_id = format!("{SERVICE_VM_PREFIX}{}", stored.id);
        let by = requester(service);
        let vms = self.scheduler.vms();
        match vms.iter().find(|v| v.id == vm_id) {
            Some(vm) if vm.owner != service.user => {
                let detail = format!("a VM {vm_id} exists and is not {}'s", service.user);
                self.fail(stored, detail).await
            }
            Some(vm) => match vm.phase {
                VmPhase::Running => {
                    if let Some(container) = &container {
                        let members = Members {
                            virtual_machines: vec![vm_id.clone()],
                            ..Members::default()
                        };
                        self.join(container, members, &by).await;
                    }
                    let detail = format!("VM {vm_id} runs on {}", vm.node);
                    self.up(stored, Some(detail)).await
                }
                VmPhase::Failed | VmPhase::Lost => {
                    let why = self
                        .vm_failure(vm)
                        .unwrap_or_else(|| "its guest is gone".into());
                    self.fail(stored, format!("VM {vm_id}: {why}")).await
                }
                _ => Ok(()),
            },
            None if service.job_text("vm").is_some() => {
                let detail = format!("its VM {vm_id} went away while it was being set up");
                self.fail(stored, detail).await
            }
            None => {
                let mut request = vm_request(stored, &vm_id, all);
                if request.node.is_none() {
                    match self.node_with_features(service, request.processors.unwrap_or(1)) {
                        Ok(node) => request.node = node,
                        Err(why) => return self.fail(stored, why).await,
                    }
                }
                match self
                    .scheduler
                    .vm(VmCommand::Create(Box::new(request)), by)
                    .await
                {
                    Ok(answer) => {
                        let job = match answer {
                            drover_sched::engine::VmAnswer::Job(job) => Some(job),
                            drover_sched::engine::VmAnswer::Said(_) => None,
                        };
                        self.update(&stored.id, move |s| {
                            let record = s.job_mut();
                            record.insert("vm".into(), vm_id.into());
                            if let Some(job) = job {
                                record.insert("id".into(), job.into());
                            }
                        })
                        .await
                    }
                    Err(error) => self.refused(stored, "its VM", error).await,
                }
            }
        }
    }

    /// The node a VM with the service's `job.features` goes to: one that has them all
    /// (one with `processors` free, if any); `None` when no feature is asked for.
    fn node_with_features(
        &self,
        service: &Service,
        processors: u32,
    ) -> Result<Option<String>, String> {
        let wanted: Vec<&str> = service
            .job()
            .and_then(|j| j.get("features"))
            .and_then(Value::as_array)
            .map(|f| f.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if wanted.is_empty() {
            return Ok(None);
        }
        let nodes = self.scheduler.nodes();
        let fitting: Vec<_> = nodes
            .iter()
            .filter(|n| {
                wanted
                    .iter()
                    .all(|f| n.config.features.iter().any(|h| h == f))
            })
            .collect();
        let roomy = fitting
            .iter()
            .find(|n| n.config.processors.saturating_sub(n.used_processors) >= processors);
        match roomy.or(fitting.first()) {
            Some(node) => Ok(Some(node.id().to_string())),
            None => Err(format!("no node has the features {}", wanted.join(", "))),
        }
    }

    /// Why a VM's setup failed: the last message of its failed setup job.
    fn vm_failure(&self, vm: &drover_sched::vm::Vm) -> Option<String> {
        let job = self.scheduler.job(vm.failed_job.as_deref()?)?;
        job.status.messages.last().map(|m| m.text.clone())
    }

    async fn set_up_pm(
        &self,
        stored: &StoredService,
        container: Option<String>,
    ) -> Result<(), String> {
        let service = &stored.value;
        let by = requester(service);
        let job = match service.job_text("id") {
            Some(id) => self.scheduler.job(id),
            None => self.scheduler.with_jobs(|book| {
                book.published_jobs()
                    .iter()
                    .rev()
                    .find(|j| {
                        j.spec.variables.get(SERVICE_VARIABLE) == Some(&stored.id)
                            && j.spec.user.as_deref() == Some(service.user.as_str())
                    })
                    .cloned()
            }),
        };
        let Some(job) = job else {
            let (mut spec, given) = pm_job(stored, container, self.scheduler.now());
            // What the service says of its job wins; the templates fill the rest.
            if let Err(unknown) = self.job_templates.apply(&mut spec, given) {
                let error = SchedError::Invalid(unknown.iter().map(|u| u.to_string()).collect());
                return self.refused(stored, "its job", error).await;
            }
            return match self.scheduler.submit(spec, by).await {
                Ok(id) => {
                    self.update(&stored.id, move |s| {
                        s.job_mut().insert("id".into(), id.into());
                    })
                    .await
                }
                Err(error) => self.refused(stored, "its job", error).await,
            };
        };
        let id = job.id.clone();
        if service.job_text("id").is_none() {
            let recorded = id.clone();
            self.update(&stored.id, move |s| {
                s.job_mut().insert("id".into(), recorded.into());
            })
            .await?;
        }
        let state = job.status.state;
        if state.is_running() {
            let nodes: Vec<&str> = job
                .status
                .allocation
                .iter()
                .map(|a| a.node.as_str())
                .collect();
            let detail = format!("job {id} holds {}", nodes.join(", "));
            return self.up(stored, Some(detail)).await;
        }
        if state.is_final() {
            return self
                .fail(stored, format!("its job {id} ended ({state:?})"))
                .await;
        }
        Ok(())
    }

    /// An Up service follows what it is made of: it fails when its VM or job went away,
    /// is Down while its VM is powered off (a container while a member is down), and Up
    /// again once it runs.
    async fn check_up(&self, stored: &StoredService, all: &[StoredService]) -> Result<(), String> {
        let service = &stored.value;
        match self.condition(stored, all) {
            Condition::Gone(why) => self.fail(stored, why).await,
            Condition::Down(why) => {
                if service.status == format!("{}: {why}", ServicePhase::Down.status()) {
                    return Ok(());
                }
                self.enter(stored, ServicePhase::Down, Some(why)).await
            }
            Condition::Running(detail) => {
                if service.phase == ServicePhase::Up {
                    return Ok(());
                }
                self.up(stored, detail).await
            }
        }
    }

    fn condition(&self, stored: &StoredService, all: &[StoredService]) -> Condition {
        let service = &stored.value;
        match service.kind {
            ServiceType::Vm => {
                let vm_id = format!("{SERVICE_VM_PREFIX}{}", stored.id);
                match self.scheduler.vms().iter().find(|v| v.id == vm_id) {
                    None => Condition::Gone(format!("its VM {vm_id} is gone")),
                    Some(vm) => match vm.phase {
                        VmPhase::Lost | VmPhase::Failed => {
                            Condition::Gone(format!("its VM {vm_id} is {:?}", vm.phase))
                        }
                        VmPhase::Off | VmPhase::PoweringOff | VmPhase::PoweringOn => {
                            Condition::Down(format!("its VM {vm_id} is powered off"))
                        }
                        _ => Condition::Running(Some(format!("VM {vm_id} runs on {}", vm.node))),
                    },
                }
            }
            ServiceType::Pm => {
                let ended = service.job_text("id").filter(|id| {
                    self.scheduler
                        .job(id)
                        .is_none_or(|j| j.status.state.is_final())
                });
                match ended {
                    Some(id) => Condition::Gone(format!("its job {id} ended")),
                    None => Condition::Running(None),
                }
            }
            ServiceType::Container => all
                .iter()
                .find(|c| {
                    c.value.parent.as_deref() == Some(service.name.as_str())
                        && c.value.phase == ServicePhase::Down
                })
                .map_or(Condition::Running(None), |down| {
                    Condition::Down(format!("the service {} is down", down.value.name))
                }),
            ServiceType::Storage => Condition::Running(None),
        }
    }

    /// One step of tearing `stored` down; the last removes its record (or keeps it
    /// `Ended`).
    async fn take_down(&self, stored: &StoredService, all: &[StoredService]) -> Result<(), String> {
        let service = &stored.value;
        // What it holds goes first, and what depends on it and goes too (a forced
        // deletion leaves the others be).
        let holds = all.iter().any(|s| {
            s.value.parent.as_deref() == Some(service.name.as_str())
                && s.value.phase != ServicePhase::Ended
        });
        let parent = service
            .parent
            .as_deref()
            .and_then(|p| all.iter().find(|s| s.value.name == p));
        let needed = parent.is_some_and(|parent| {
            all.iter().any(|sibling| {
                sibling.value.parent == service.parent
                    && sibling.value.phase == ServicePhase::TearingDown
                    && sibling
                        .value
                        .waits_for(&parent.value)
                        .contains(&service.name.as_str())
            })
        });
        if holds || needed {
            return Ok(());
        }
        let by = requester(service);
        match service.kind {
            ServiceType::Vm => {
                let vm_id = format!("{SERVICE_VM_PREFIX}{}", stored.id);
                if let Some(vm) = self
                    .scheduler
                    .vms()
                    .iter()
                    .find(|v| v.id == vm_id && v.owner == service.user)
                {
                    if vm.phase != VmPhase::Destroying {
                        let destroy = VmCommand::Destroy(vm_id.clone());
                        if let Err(error) = self.scheduler.vm(destroy, by.clone()).await {
                            eprintln!("drover: services: cannot destroy VM {vm_id}: {error}");
                        }
                    }
                    return Ok(());
                }
            }
            ServiceType::Pm => {
                if let Some(id) = service.job_text("id")
                    && let Some(job) = self.scheduler.job(id)
                    && !job.status.state.is_final()
                {
                    if let Err(error) = self.scheduler.act(id, JobAction::Cancel, by.clone()).await
                    {
                        eprintln!("drover: services: cannot cancel job {id}: {error}");
                    }
                    return Ok(());
                }
            }
            ServiceType::Storage | ServiceType::Container => {}
        }
        if let Some(vc) = self.container_of(service)
            && let Err(error) = self
                .scheduler
                .change_container(&vc, ContainerChange::Delete, by)
                .await
        {
            eprintln!("drover: services: cannot delete virtual container {vc}: {error}");
            return Ok(());
        }
        self.record(
            stored,
            "servicedestroy",
            "Service Destroy",
            "INFO",
            format!("Service {} was torn down", service.name),
        )
        .await;
        if service.remove_when_down {
            let records = self.records.clone();
            let id = stored.id.clone();
            tokio::task::spawn_blocking(move || records.remove(&id))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())
        } else {
            self.update(&stored.id, |s| {
                s.enter(ServicePhase::Ended, None);
                if let Some(sched) = s.attributes.get_mut("sched").and_then(Value::as_object_mut) {
                    sched.remove("vc");
                }
            })
            .await
        }
    }

    async fn up(&self, stored: &StoredService, detail: Option<String>) -> Result<(), String> {
        self.enter(stored, ServicePhase::Up, detail).await
    }

    async fn fail(&self, stored: &StoredService, detail: String) -> Result<(), String> {
        let message = format!("Service {} failed: {detail}", stored.value.name);
        self.record(
            stored,
            "servicefailure",
            "Service Failure",
            "ERROR",
            message,
        )
        .await;
        self.enter(stored, ServicePhase::Failed, Some(detail)).await
    }

    /// The engine refused a step: a journal outage is retried, anything else fails the
    /// service with the engine's reason.
    async fn refused(
        &self,
        stored: &StoredService,
        what: &str,
        error: SchedError,
    ) -> Result<(), String> {
        if let SchedError::Unavailable(reason) = &error {
            return Err(format!("cannot make {what} now: {reason}"));
        }
        self.fail(stored, format!("{what} was not made: {error}"))
            .await
    }

    /// Records an event about the service, in both vocabularies (version 1 `v1`,
    /// version 3 `v3`), as the engine does for VMs.
    async fn record(
        &self,
        stored: &StoredService,
        v1: &str,
        v3: &str,
        severity: &str,
        message: String,
    ) {
        let events = [v1, v3]
            .into_iter()
            .map(|kind| service_event(stored, kind, severity, &message))
            .collect();
        if let Err(error) = self.events.record(events).await {
            eprintln!("drover: services: cannot record an event: {error}");
        }
    }
}

/// The service's user, as the engine checks what a step makes: held to an ordinary
/// user's limits unless an administrator created the service.
fn requester(service: &Service) -> Requester {
    Requester {
        user: service.user.clone(),
        proxy_user: None,
        over_all: service.made_by_administrator,
        may_name_owners: service.made_by_administrator,
    }
}

/// The VM a `vm` service is: its template's job, with the disks of its storage services.
fn vm_request(stored: &StoredService, vm_id: &str, all: &[StoredService]) -> VmRequest {
    let service = &stored.value;
    let storage: Vec<String> = all
        .iter()
        .filter(|s| {
            s.value.kind == ServiceType::Storage
                && s.value.job_text("vmService") == Some(service.name.as_str())
        })
        .filter_map(|s| s.value.resource(service::DISK))
        .map(|gb| format!("{}", gb.ceil() as u64))
        .collect();
    let variables = service
        .job()
        .and_then(|j| j.get("variables"))
        .and_then(Value::as_object)
        .map(|vars| {
            vars.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str()
                            .map(String::from)
                            .unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    VmRequest {
        id: Some(vm_id.to_string()),
        processors: service
            .resource(service::PROCESSORS)
            .map(|n| n.ceil().max(1.0) as u32),
        memory: service.resource(service::MEMORY).map(|n| n.ceil() as u64),
        disk: service.resource(service::DISK).map(|n| n.ceil() as u64),
        node: first_host(service),
        image: service.job_text("image").unwrap_or_default().to_string(),
        sovereign: false,
        storage: (!storage.is_empty()).then(|| storage.join(",")),
        template: service.job_text("template").map(String::from),
        time_to_live: None,
        triggers: Vec::new(),
        variables,
        description: Some(format!("Service {}", service.name)),
        for_service: true,
        account: service.account.clone(),
    }
}

fn first_host(service: &Service) -> Option<String> {
    service
        .job()?
        .get("requestedHosts")?
        .as_array()?
        .first()?
        .as_str()
        .map(String::from)
}

/// The job of a `pm` service: it holds a node for the service's user (its processors,
/// memory, features and requested host) until the service goes; and what of it the
/// service gives (its templates, `genericPM-setup` then `DEFAULT`, fill the rest).
fn pm_job(stored: &StoredService, container: Option<String>, now: i64) -> (JobSpec, Given) {
    let service = &stored.value;
    let mut spec = JobSpec {
        custom_name: Some(service.name.clone()),
        user: Some(service.user.clone()),
        account: service.account.clone(),
        command_file: "/bin/sleep".into(),
        arguments: "infinity".into(),
        working_directory: Some("/".into()),
        stdout_path: Some("/dev/null".into()),
        stderr_path: Some("/dev/null".into()),
        duration: service.ends_at.map(|end| (end - now).max(1)),
        ..JobSpec::default()
    };
    spec.request.task_count = 1;
    spec.request.processors_per_task = service
        .resource(service::PROCESSORS)
        .map_or(1, |n| n.ceil().max(1.0) as u32);
    spec.request.memory_per_task = service.resource(service::MEMORY).map(|n| n.ceil() as u64);
    let job = service.job();
    let strings = |key: &str| crate::strings_of(job.and_then(|j| j.get(key)));
    spec.request.features = strings("features");
    spec.request.nodes_requested = strings("requestedHosts").into_iter().take(1).collect();
    spec.variables
        .insert(SERVICE_VARIABLE.into(), stored.id.clone());
    if let Some(image) = service.job_text("image") {
        spec.variables
            .insert("DROVER_PM_IMAGE".into(), image.into());
    }
    let extra = &mut *spec.extra;
    extra.templates = vec![drover_domain::template::PM_SETUP.into()];
    extra.virtual_containers = container.into_iter().collect();
    extra.description = Some(format!("Holds a node for the service {}", service.name));
    let resources = [
        (service::PROCESSORS, "processors"),
        (service::MEMORY, "memory"),
    ];
    let given = Given {
        command_file: true,
        arguments: true,
        // It lasts as long as the service: to its end, or without a limit.
        duration: true,
        account: spec.account.is_some(),
        // One task holds the node.
        task_count: true,
        features: !spec.request.features.is_empty(),
        resources: resources
            .into_iter()
            .filter(|(resource, _)| service.resource(resource).is_some())
            .map(|(_, name)| name.to_string())
            .collect(),
        ..Given::default()
    };
    (spec, given)
}

/// An event about a service (object type `Service`, named by id).
pub fn service_event(
    stored: &StoredService,
    event_type: &str,
    severity: &str,
    message: &str,
) -> Event {
    let mut event = Event::new(Timestamp::now(), event_type, severity);
    event.origin = Some("drover/services".into());
    event.facility = Some("service".into());
    event.event_category = Some("service".into());
    event.message = Some(message.to_string());
    event.arguments = vec![stored.value.name.clone()];
    event.associated_objects = vec![ObjectRef {
        kind: "Service".into(),
        id: stored.id.clone(),
    }];
    event.primary_object = Some(PrimaryObject {
        kind: Some("Service".into()),
        id: Some(stored.id.clone()),
        serialization: None,
    });
    event.initiated_by = Some(InitiatedBy {
        user: Some(stored.value.user.clone()),
        proxy_user: None,
    });
    event
}
