//! The scheduler: the one model of jobs and nodes, the engine that owns them, its
//! journal, placement, and the resource managers that run jobs. Knows nothing of HTTP.
//!
//! - [`job`], [`node`]: the models; [`request`]: what callers ask and how it is refused.
//! - [`book`]: every job, by id and indexed by state and credentials.
//! - [`engine`]: the engine thread and [`Scheduler`], the handle handlers hold.
//! - the journal: group commit of the engine's changes to the store ([`drover_store::journal`]).
//! - [`place`]: first-fit placement; [`policy`]: queue order and backfill;
//!   [`validate`]: submission rules (spec part 8).
//! - [`rm`]: the resource-manager trait and the local implementation.
//! - [`sim`]: trace replay in virtual time through the engine (`drover replay`).
//! - [`clock`], [`events`], [`sysuser`]: time, the event sink, system accounts.
//! - [`limits`]: what one ordinary user may ask (array size, queued jobs, reservations).
//! - [`template`]: job templates (spec 2.6), built in and configured; [`dependency`]:
//!   when a job's dependencies let it start.

pub mod accountant;
pub mod book;
pub mod clock;
pub mod container;
pub mod dependency;
pub mod engine;
pub mod events;
pub mod fsfacts;
pub mod job;
pub mod limits;
pub mod node;
pub mod place;
pub mod policy;
pub mod request;
pub mod reservation;
pub mod rm;
pub mod sim;
pub mod sysuser;
pub mod template;
pub mod validate;

pub use book::{Attribute, JobBook};
pub use engine::{ConfiguredCredentials, CredentialKind, EngineParts, SchedConfig, Scheduler};
pub use request::{JobAction, JobChanges, NodeChanges, Requester, SchedError};
