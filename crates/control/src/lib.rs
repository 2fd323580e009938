//! The application services of Drover: what runs beside the scheduler and the interface
//! and orchestrates them, knowing nothing of HTTP.
//!
//! - [`services`]: the services controller, which brings each stored service up and
//!   down through the engine (containers, VMs, jobs) as its user;
//!   [`service_creation`]: the rules a creation of services meets before it is stored.
//! - [`plugin_host`]: what plugins' scripts and Native programs may do (the host
//!   functions, with their user's rights), and the loops that poll plugins and hand them
//!   events.
//! - [`vm_host`]: the engine's `VmHost` (the provisioner that makes guests: QEMU, a
//!   site's commands or none); [`guest_run`]: a job's process that runs in a guest;
//!   [`guest_image`]: QEMU and the default guest image installed on a fresh machine.
//! - [`accounting`]: the ledger as the engine's accountant (liens and charges).
//! - [`settings`]: the configuration sections these read.

pub mod accounting;
pub mod data_dir;
pub mod guest_image;
pub mod guest_run;
pub mod plugin_host;
pub mod service_creation;
pub mod services;
pub mod settings;
pub mod vm_host;

/// The strings of a JSON list (`["a", "b"]`), other items and a missing list passed
/// over: how plugins' reports and services' job sections name features and hosts.
pub(crate) fn strings_of(value: Option<&serde_json::Value>) -> Vec<String> {
    value
        .and_then(serde_json::Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}
