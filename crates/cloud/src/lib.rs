//! The cloud layer beside the scheduler (docs/internals.md: "The cloud layer, services,
//! plugins, Slurm and high availability"). [`Images`] owns the stored collection
//! `images` (spec 2.2), and [`boot::resolve`] is the one way an image's boot paths become
//! files, always inside the images directory (`[cloud] image_dir`). [`provision`] starts,
//! powers, migrates and stops guests (QEMU, or the site's own commands) and runs commands
//! inside QEMU guests through their agent. [`ServiceTemplates`] owns the stored
//! collection `service_templates` (spec 2.12, 4.11), and [`ServiceRecords`] the collection
//! `services` (2.11, 4.10).
//!
//! Every call blocks (on the store, on a guest); async callers use `spawn_blocking`.

pub mod boot;
pub mod catalog;
pub mod images;
pub mod provision;
pub mod service_templates;
pub mod services;

pub use images::{CloudError, IMAGES, Images, StoredImage};
pub use service_templates::{SERVICE_TEMPLATES, ServiceTemplates, StoredTemplate};
pub use services::{NewServices, SERVICES, ServiceRecords, StoredService};
