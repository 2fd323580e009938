//! The embedded ledger as the scheduler's accountant: a job's and a VM's usage in the
//! ledger's terms.

use std::sync::Arc;

use drover_accounting::ledger::LienTerms;
use drover_accounting::model::Usage;
use drover_accounting::{AccountingError, Hold, Ledger, VmWhenDry};
use drover_domain::service;
use drover_domain::service_template::ServiceType;
use drover_sched::accountant::{Accountant, Renewal, VmHold};
use drover_sched::clock::Seconds;
use drover_sched::job::Job;
use drover_sched::vm::{DEFAULT_MEMORY_MB, Vm};
use drover_store::Write;
use serde_json::{Map, Value};

pub struct LedgerAccountant(pub Arc<Ledger>);

/// What a job uses, for pricing: its processors, memory and generic resources for all its
/// tasks, its nodes, and its credentials.
pub fn usage_of(job: &Job) -> Usage {
    let request = &job.spec.request;
    let tasks = u64::from(request.task_count.max(1));
    Usage {
        user: job.user().to_string(),
        account: job.spec.account.clone(),
        qos: job.spec.qos_requested.clone(),
        class: job.spec.job_class.clone(),
        nodes: (job.status.allocation.len() as u64)
            .max(u64::from(request.node_count.unwrap_or(1)))
            .max(1),
        processors: job.processors(),
        memory: request.memory_per_task.unwrap_or(0) * tasks,
        disk: request.disk_per_task.unwrap_or(0) * tasks,
        swap: request.swap_per_task.unwrap_or(0) * tasks,
        generic_resources: request
            .generic_resources
            .iter()
            .map(|(name, amount)| (name.clone(), (amount * tasks as f64).ceil() as u64))
            .collect(),
        service: None,
    }
}

/// What a VM holds, for pricing: one node's worth of its processors, memory (MB) and disk
/// (its `totalDisk` MB and its storage disks' GB as MB), and, for a service's VM, its
/// service's rate (by its template, as a service quote prices it).
pub fn vm_usage(vm: &Vm) -> Usage {
    let storage_mb: u64 = vm
        .disks
        .iter()
        .map(|d| d.size_gb.saturating_mul(1024))
        .fold(0, u64::saturating_add);
    Usage {
        user: vm.owner.clone(),
        account: vm.account.clone(),
        nodes: 1,
        processors: u64::from(vm.processors),
        memory: vm.memory,
        disk: vm.disk.unwrap_or(0).saturating_add(storage_mb),
        service: vm
            .for_service
            .then(|| service_rate_name(vm.template.as_deref())),
        ..Usage::default()
    }
}

/// The service rate a service's VM is charged and its quote priced at: its template's,
/// else `service`'s.
pub fn service_rate_name(template: Option<&str>) -> String {
    template.unwrap_or("service").to_string()
}

/// The ledger's key of a VM's lien and charges: `vm/<id>` (no job id has a `/`).
pub fn vm_object(vm: &Vm) -> String {
    format!("vm/{}", vm.id)
}

fn hold(how: VmHold) -> Hold {
    match how {
        VmHold::Check => Hold::Check,
        VmHold::Record => Hold::Record,
        VmHold::Anyway => Hold::Anyway,
    }
}

fn reason(error: AccountingError) -> String {
    match error {
        AccountingError::Invalid(reasons) => reasons.join("; "),
        other => other.to_string(),
    }
}

impl Accountant for LedgerAccountant {
    fn start(&self, job: &Job, now: Seconds) -> Result<Vec<Write>, String> {
        // A REQUIREVM job in its user's VM: the VM is charged for what it holds, and the
        // job holds nothing more (its end settles nothing: no lien was taken).
        if !self.0.enabled() || job.status.in_vm.is_some() {
            return Ok(Vec::new());
        }
        self.0
            .hold(&job.id, &usage_of(job), job.spec.duration, now)
            .map_err(reason)
    }

    fn end(&self, job: &Job, seconds: i64, now: Seconds) -> Vec<Write> {
        if !self.0.enabled() {
            return Vec::new();
        }
        self.0.settle(&job.id, &usage_of(job), seconds, now)
    }

    fn vm_charge_interval(&self) -> Option<Seconds> {
        self.0
            .enabled()
            .then(|| self.0.config().vm_charge_interval())
    }

    fn vm_powers_off_when_dry(&self) -> bool {
        self.0.config().vm_when_dry == VmWhenDry::PowerOff
    }

    fn vm_hold(
        &self,
        vm: &Vm,
        seconds: i64,
        now: Seconds,
        how: VmHold,
    ) -> Result<Vec<Write>, String> {
        if !self.0.enabled() {
            return Ok(Vec::new());
        }
        self.0
            .hold_for(&vm_object(vm), &vm_usage(vm), seconds, now, hold(how))
            .map_err(reason)
    }

    fn vm_renew(&self, vm: &Vm, renewal: Renewal) -> (Vec<Write>, Result<(), String>) {
        if !self.0.enabled() {
            return (Vec::new(), Ok(()));
        }
        let Renewal {
            charged,
            seconds,
            now,
            how,
        } = renewal;
        let next = LienTerms {
            seconds,
            now,
            how: hold(how),
        };
        let (writes, held) = self.0.renew(&vm_object(vm), &vm_usage(vm), charged, next);
        (writes, held.map_err(reason))
    }

    fn vm_settle(&self, vm: &Vm, seconds: i64, now: Seconds) -> Vec<Write> {
        if !self.0.enabled() {
            return Vec::new();
        }
        self.0.settle(&vm_object(vm), &vm_usage(vm), seconds, now)
    }

    fn reload(&self) -> Result<(), String> {
        if !self.0.enabled() {
            return Ok(());
        }
        self.0.reload()
    }
}

/// What a service of `kind` made from `attributes` (its `sched.job`) will be charged for,
/// per second, as [`vm_usage`] and [`usage_of`] will charge what it makes: a `vm`
/// service its VM (1 processor and 128 MB unless its resources say; its service rate), a
/// `storage` service its disk on its VM (GB as MB), a `pm` service its job (1 processor
/// unless said). A container costs nothing of its own (`None`).
pub fn made_service_usage(
    kind: ServiceType,
    user: &str,
    account: Option<String>,
    attributes: &Map<String, Value>,
) -> Option<Usage> {
    let job = attributes
        .get("sched")
        .and_then(|s| s.get("job"))
        .and_then(Value::as_object);
    let resource = |keys: &[&str]| {
        job.and_then(|j| j.get("resources"))
            .and_then(Value::as_object)
            .and_then(|r| {
                r.iter()
                    .find(|(k, _)| keys.iter().any(|key| k.eq_ignore_ascii_case(key)))
            })
            .and_then(|(_, v)| v.as_f64())
            .map(|n| n.ceil().max(0.0) as u64)
    };
    let base = Usage {
        user: user.to_string(),
        account,
        ..Usage::default()
    };
    let processors = resource(service::PROCESSORS).unwrap_or(1).max(1);
    match kind {
        ServiceType::Container => None,
        ServiceType::Vm => Some(Usage {
            nodes: 1,
            processors,
            memory: resource(service::MEMORY).unwrap_or(DEFAULT_MEMORY_MB),
            disk: resource(service::DISK).unwrap_or(0),
            service: Some(service_rate_name(
                job.and_then(|j| j.get("template")).and_then(Value::as_str),
            )),
            ..base
        }),
        ServiceType::Storage => Some(Usage {
            disk: resource(service::DISK).unwrap_or(0).saturating_mul(1024),
            ..base
        }),
        ServiceType::Pm => Some(Usage {
            nodes: 1,
            processors,
            memory: resource(service::MEMORY).unwrap_or(0),
            ..base
        }),
    }
}
