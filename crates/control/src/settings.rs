//! The configuration sections the application services read (`[plugins]`, `[cloud]`),
//! as the service's configuration file gives them (`drover::config` holds the rest).

use std::path::PathBuf;

use serde::Deserialize;

/// `[plugins]`: where the built-in `Native` type's URLs may point and as whom they run.
/// Only this file names them: a plugin's configuration (from a request) is refused
/// outside these directories.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginsConfig {
    /// Absolute directories `file://` and `exec://` URLs may name; none: Native plugins
    /// read nothing.
    pub native_directories: Vec<PathBuf>,
    /// The system user Native URLs are read and run as; none: the service's own user.
    pub native_user: Option<String>,
    /// Whether `native_user = "root"` is allowed, and whether, without `native_user`,
    /// a service running as root runs `exec://` programs (as root).
    pub native_allow_root: bool,
}

/// The account guests run as unless `[cloud] guest_user` names another; made at start
/// (as a system account without a login) when the service runs as root and it is missing.
pub const DEFAULT_GUEST_USER: &str = "drover-guest";

/// `[cloud]`: where images' boot material lives, and what makes the guests of VMs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CloudConfig {
    /// The images directory: an image's `boot` paths are resolved only inside it;
    /// `images` in the data directory by default.
    pub image_dir: Option<PathBuf>,
    /// `qemu`, `exec` or `none`; by default `qemu` when `qemu-system-x86_64` is
    /// installed, else `none` (every VM setup then fails and says why).
    pub provisioner: Option<ProvisionerKind>,
    /// The image a VM created without `os` boots.
    pub default_image: String,
    /// `auto` (KVM when a probe's guest answers under it at start, else TCG), `kvm`, `tcg`.
    pub accel: AccelChoice,
    /// Whether `drover serve`, as root, installs QEMU and builds the default image
    /// (`<image_dir>/<default_image>/`) before it listens when either is missing.
    #[serde(deserialize_with = "flag")]
    pub prepare_guest_image: bool,
    /// How long a guest may take to print its image's ready line.
    pub boot_deadline_seconds: u64,
    /// How long a power off waits for the guest to obey ACPI before a hard stop.
    pub shutdown_grace_seconds: u64,
    /// The system account guests (their QEMU processes) run as when the service runs
    /// as root: never root, and no one's jobs run as it.
    pub guest_user: String,
    /// How much of each guest's serial console is kept (`console.log`, its newest
    /// part), in KiB; at least 4.
    pub console_limit_kib: u64,
    /// With the Slurm resource manager, where guests keep their files (disks, sockets):
    /// a directory at the same path on this machine and on every node (shared
    /// storage), the guest account's and no one else's (made so when missing);
    /// `/var/lib/drover-guests` by default.
    pub guest_dir: Option<PathBuf>,
    /// The site's commands (`provisioner = "exec"`).
    pub exec: Option<ExecConfig>,
    /// How system jobs are shown as pending actions.
    pub pending_actions: PendingActionsConfig,
}

/// `[cloud.pending_actions]`: the original's `svc.pendingActions.*`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PendingActionsConfig {
    /// Whether the generic type mapping of spec 2.13 applies (`displayGeneric`).
    pub display_generic: bool,
    /// Template name to pending-action type, checked before the generic mapping.
    pub mappings: std::collections::BTreeMap<String, String>,
}

impl Default for PendingActionsConfig {
    fn default() -> Self {
        Self {
            display_generic: true,
            mappings: Default::default(),
        }
    }
}

impl Default for CloudConfig {
    fn default() -> Self {
        Self {
            image_dir: None,
            provisioner: None,
            default_image: "guest".into(),
            accel: AccelChoice::Auto,
            prepare_guest_image: true,
            boot_deadline_seconds: 60,
            shutdown_grace_seconds: 10,
            guest_user: DEFAULT_GUEST_USER.into(),
            console_limit_kib: 1024,
            guest_dir: None,
            exec: None,
            pending_actions: PendingActionsConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProvisionerKind {
    Qemu,
    Exec,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    Auto,
    Kvm,
    Tcg,
}

/// `[cloud.exec]`: one command per operation, each an argv (an absolute program, no
/// shell), and how long each may run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    pub create: Vec<String>,
    pub destroy: Vec<String>,
    pub migrate: Vec<String>,
    pub power_on: Vec<String>,
    pub power_off: Vec<String>,
    pub status: Vec<String>,
    #[serde(default)]
    pub adopt: Option<Vec<String>>,
    #[serde(default = "ExecConfig::default_timeout")]
    pub timeout_seconds: u64,
}

impl ExecConfig {
    fn default_timeout() -> u64 {
        300
    }
}

/// A switch: `true` or `false`, also as a string in any case (`"TRUE"`, as the
/// original's `ENABLEPROXY`; the environment's overrides are strings).
pub fn flag<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Flag {
        Bool(bool),
        Text(String),
    }
    match Flag::deserialize(deserializer)? {
        Flag::Bool(b) => Ok(b),
        Flag::Text(t) if t.eq_ignore_ascii_case("true") => Ok(true),
        Flag::Text(t) if t.eq_ignore_ascii_case("false") => Ok(false),
        Flag::Text(t) => Err(serde::de::Error::custom(format!(
            "expected TRUE or FALSE, not '{t}'"
        ))),
    }
}
