//! The scheduler: the engine that owns the jobs and nodes, its journal, placement, and
//! the resource managers that run jobs. Knows nothing of HTTP.
//!
//! The models and their rules live in `drover-domain` and are re-exported here:
//! [`job`], [`node`], [`reservation`], [`container`], [`vm`], [`request`] (what callers ask and how
//! it is refused), [`validate`] (submission rules, spec part 8), [`limits`], [`template`],
//! [`dependency`], [`clock`].
//!
//! - [`book`]: every job, by id and indexed by state and credentials.
//! - [`listing`]: job lists, answered from the book's indexes or by a bounded scan.
//! - [`engine`]: the engine thread and [`Scheduler`], the handle handlers hold.
//! - the journal: group commit of the engine's changes to the store ([`drover_store::journal`]).
//! - [`place`]: first-fit placement; [`policy`]: queue order and backfill.
//! - [`rm`]: the resource-manager trait and the local implementation.
//! - [`sim`]: trace replay in virtual time through the engine (`drover replay`), and
//!   workloads drawn from Lublin and Feitelson's model (`drover generate-trace`).
//! - [`events`], [`sysuser`]: the event sink, system accounts.
//! - [`vm_host`]: what makes the guests of VMs (the engine owns the VMs themselves).

pub use drover_domain::{
    clock, dependency, job, limits, node, request, reservation, template, validate,
    virtual_container, vm,
};

pub mod accountant;
pub mod book;
pub mod engine;
pub mod events;
pub mod fsfacts;
pub mod listing;
pub mod place;
pub mod policy;
pub mod rm;
mod sharded;
pub mod sim;
pub mod sysuser;
pub mod vm_host;

pub use book::{Attribute, HoldSet, Interned, JobBook, ScanRow};
pub use engine::{
    ConfiguredCredentials, CredentialKind, EngineParts, Receipt, SchedConfig, Scheduler,
};
pub use request::{JobAction, JobChanges, NodeChanges, Requester, SchedError};
