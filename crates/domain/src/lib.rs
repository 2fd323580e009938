//! Plain domain types shared by every Drover crate: the models of jobs, nodes,
//! reservations, virtual containers, images, VMs and service templates, what callers may ask of them and the rules that
//! refuse a request (spec part 8), dates in the wire format, and time-ordered ids.
//!
//! No I/O (beyond `SystemClock` reading the time), no threads, no HTTP, no SQL: only
//! values and the rules about them. The
//! scheduler (`drover-sched`) owns these values at run time and re-exports the modules.

pub mod clock;
pub mod dates;
pub mod dependency;
pub mod ids;
pub mod image;
pub mod job;
pub mod limits;
pub mod node;
pub mod request;
pub mod reservation;
pub mod service;
pub mod service_template;
pub mod template;
pub mod validate;
pub mod virtual_container;
pub mod vm;
