//! The engine's VM host (`sched::vm_host::VmHost`) over the cloud layer: a VM's image
//! becomes boot material resolved inside the images directory, and the configured
//! provisioner (`[cloud] provisioner`) makes, powers, moves and ends the guest.
//!
//! Every operation runs on a thread of its own (a boot takes seconds) and is
//! idempotent, as the engine asks: a create finds a guest already running, a destroy
//! finds nothing to destroy, and both succeed.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// With the Slurm resource manager: the cluster QEMU's guests run on.
pub use drover_cloud::provision::SlurmSite;
use drover_cloud::provision::kvm_probe::{KVM_PROBE_DEADLINE, KvmProbe, probe_kvm};
use drover_cloud::provision::{
    Accel, BootMaterial, Disk, DiskFormat, ExecCommand, ExecCommands, ExecProvisioner, ExtraDisk,
    GuestAccount, MigrationTarget, Power, ProvisionError, Provisioner, QemuProvisioner,
    SlurmGuestConfig, SlurmGuests, VmSpec, VmStatus,
};
use drover_cloud::{Images, boot};
use drover_sched::sysuser::SystemUser;
use drover_sched::vm::Vm;
use drover_sched::vm_host::{Done, NoVmHost, Outcome, VmHost, VmOperation};

use crate::guest_image::{self, GUEST_FILES, on_path};
use crate::settings::{AccelChoice, CloudConfig, DEFAULT_GUEST_USER, ExecConfig, ProvisionerKind};

/// The provisioner `cloud` names, or the one found: QEMU's where it is installed.
fn provisioner_kind(cloud: &CloudConfig) -> ProvisionerKind {
    cloud
        .provisioner
        .unwrap_or(if on_path("qemu-system-x86_64") {
            ProvisionerKind::Qemu
        } else {
            ProvisionerKind::None
        })
}

/// QEMU's KVM probe (`accel = "auto"`), run on a thread of its own from the beginning
/// of the service's start: it takes up to 2 s where KVM hangs, while the store opens
/// (and a standby has its verdict before it takes over).
pub struct AccelProbe(Option<std::thread::JoinHandle<Option<KvmProbe>>>);

impl AccelProbe {
    /// Starts the probe when `cloud` leaves the accelerator to QEMU's provisioner.
    pub fn start(cloud: &CloudConfig) -> AccelProbe {
        if cloud.accel != AccelChoice::Auto || provisioner_kind(cloud) != ProvisionerKind::Qemu {
            return AccelProbe(None);
        }
        let name = cloud.guest_user.clone();
        let probe = move || {
            // As the account guests run as: what it may use is what guests get.
            let account = guest_account(&name).ok()?;
            Some(probe_kvm(account.as_ref(), KVM_PROBE_DEADLINE))
        };
        AccelProbe(
            std::thread::Builder::new()
                .name("kvm probe".into())
                .spawn(probe)
                .ok(),
        )
    }

    /// None: no probe is needed, or it could not run (the provisioner runs its own).
    fn finish(self) -> Option<KvmProbe> {
        self.0?.join().ok().flatten()
    }
}

/// The VM host `cloud` asks for (guests' files in `data_dir`/vms), and what was found
/// for it: the provisioner, QEMU's accelerator (decided here, at start, by `probe` or a
/// probe of its own) and the default image. With `slurm`, QEMU's guests run on the
/// cluster's nodes. When no guest can be made, the host fails every operation saying
/// why.
pub fn vm_host(
    cloud: &CloudConfig,
    data_dir: &Path,
    images: Arc<Images>,
    probe: AccelProbe,
    slurm: Option<SlurmSite>,
) -> (Arc<dyn VmHost>, GuestsReport) {
    // Before the provisioner looks up (or makes) the guest account, which the probe did.
    let probed = probe.finish();
    let kind = provisioner_kind(cloud);
    let image_dir = images.image_dir().join(&cloud.default_image);
    let fix = guest_image::fix_command(&image_dir);
    let mut report = GuestsReport {
        provisioner: kind_name(kind),
        default_image: cloud.default_image.clone(),
        default_image_registered: !cloud.default_image.is_empty()
            && images
                .get(&cloud.default_image)
                .is_ok_and(|i| i.value.supports_virtual_machine),
        image_dir,
        fix: (kind != ProvisionerKind::Exec).then(|| fix.clone()),
        ..GuestsReport::default()
    };
    let not_installed = || {
        format!(
            "QEMU is not installed (qemu-system-x86_64, qemu-img); to install it and build \
             the default image, run `{fix}` and start the service again"
        )
    };
    let made = match kind {
        ProvisionerKind::None if cloud.provisioner.is_none() => Err(not_installed()),
        ProvisionerKind::None => {
            report.turned_off = true;
            return (
                Arc::new(NoVmHost(
                    "no provisioner is configured ([cloud] provisioner = \"none\")".into(),
                )),
                report,
            );
        }
        ProvisionerKind::Qemu => qemu(cloud, data_dir)
            .map(|qemu| {
                let qemu = match probed {
                    Some(found) => qemu.with_kvm_probe(found),
                    None => qemu,
                };
                let decision = qemu.decide_accel();
                report.accel = Some(decision.accel.name());
                report.accel_reason = Some(match decision.probe {
                    Some(probe) => probe.describe(),
                    None => format!("[cloud] accel = \"{}\"", decision.accel.name()),
                });
                if !guest_image::qemu_installed() {
                    report.provisioner_problem = Some(not_installed());
                }
                (qemu, decision.accel)
            })
            .and_then(|(qemu, accel)| match &slurm {
                None => Ok(Arc::new(qemu) as Arc<dyn Provisioner>),
                Some(site) => {
                    report.on_slurm = true;
                    slurm_guests(cloud, data_dir, site, accel)
                }
            }),
        ProvisionerKind::Exec => exec(cloud, data_dir),
    };
    let host: Arc<dyn VmHost> = match made {
        Ok(provisioner) => Arc::new(Guests {
            images,
            provisioner,
            default_image: cloud.default_image.clone(),
            on_nodes: slurm.is_some(),
        }),
        Err(why) => {
            let host = Arc::new(NoVmHost(format!("VMs cannot be made: {why}")));
            report.provisioner_problem = Some(why);
            host
        }
    };
    (host, report)
}

fn kind_name(kind: ProvisionerKind) -> &'static str {
    match kind {
        ProvisionerKind::Qemu => "qemu",
        ProvisionerKind::Exec => "exec",
        ProvisionerKind::None => "none",
    }
}

/// What the service found for VMs at start: said at start (`drover serve`) and in the
/// health detail (`GET /rest/diag/health/detail`, `vms`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GuestsReport {
    /// `qemu`, `exec` or `none`.
    pub provisioner: &'static str,
    /// QEMU's accelerator for every guest (`kvm` or `tcg`), decided at start.
    pub accel: Option<&'static str>,
    /// Why that one: the probe's finding, or the configuration.
    pub accel_reason: Option<String>,
    /// The image a VM without one boots (`[cloud] default_image`).
    pub default_image: String,
    /// Whether it was registered at start.
    pub default_image_registered: bool,
    /// Where its files are looked for (`<image_dir>/<default_image>`).
    pub image_dir: std::path::PathBuf,
    /// Why the provisioner makes no guest (and what fixes it); `None` when it can.
    pub provisioner_problem: Option<String>,
    /// `[cloud] provisioner = "none"`: VMs are turned off, nothing to fix.
    pub turned_off: bool,
    /// The command that installs QEMU and builds the default image (not for `exec`).
    pub fix: Option<String>,
    /// QEMU's guests run on the Slurm cluster's nodes.
    pub on_slurm: bool,
}

impl GuestsReport {
    /// Why VMs cannot be made, with what fixes it, the default image registered or
    /// not; `None` when they can be, or are turned off.
    pub fn problem(&self, default_image_registered: bool) -> Option<String> {
        if let Some(problem) = &self.provisioner_problem {
            return Some(problem.clone());
        }
        match &self.fix {
            Some(fix) if !self.turned_off && !default_image_registered => Some(format!(
                "the default image '{}' is not registered (its files are not in {}); to \
                 build it, run `{fix}` and start the service again",
                self.default_image,
                self.image_dir.display()
            )),
            _ => None,
        }
    }

    /// What the service says of VMs at start: what it found, and on a second line,
    /// when VMs cannot be made, why and the command that fixes it.
    pub fn summary(&self) -> String {
        if self.turned_off {
            return "VMs: none ([cloud] provisioner = \"none\")".into();
        }
        let mut said = match (self.provisioner, self.accel) {
            (_, Some(accel)) => format!(
                "VMs: QEMU on {} ({}){}",
                accel.to_uppercase(),
                self.accel_reason.as_deref().unwrap_or("decided at start"),
                if self.on_slurm {
                    ", guests on the Slurm nodes"
                } else {
                    ""
                }
            ),
            ("exec", _) => "VMs: the site's commands ([cloud.exec])".into(),
            ("none", _) => "VMs: no provisioner".into(),
            (name, _) => format!("VMs: the {name} provisioner"),
        };
        if !self.default_image.is_empty() {
            said.push_str(&format!(
                ", default image '{}'{}",
                self.default_image,
                if self.default_image_registered {
                    ""
                } else {
                    " (missing)"
                }
            ));
        }
        if let Some(problem) = self.problem(self.default_image_registered) {
            said.push_str(&format!("\nVMs cannot be made: {problem}"));
        }
        said
    }
}

/// QEMU's provisioner, as `cloud` sets it up.
fn qemu(cloud: &CloudConfig, data_dir: &Path) -> Result<QemuProvisioner, String> {
    let accel = match cloud.accel {
        AccelChoice::Auto => Accel::Auto,
        AccelChoice::Kvm => Accel::Kvm,
        AccelChoice::Tcg => Accel::Tcg,
    };
    let deadline = Duration::from_secs(cloud.boot_deadline_seconds.max(1));
    let mut qemu = QemuProvisioner::new(data_dir.join("vms"), accel, deadline)
        .map_err(|e| e.to_string())?
        .with_shutdown_grace(Duration::from_secs(cloud.shutdown_grace_seconds))
        .with_console_limit(cloud.console_limit_kib.saturating_mul(1024));
    if let Some(account) = guest_account(&cloud.guest_user)? {
        qemu = qemu.with_guest_account(account);
    }
    Ok(qemu)
}

/// Where guests on Slurm's nodes keep their files unless `[cloud] guest_dir` says: not
/// in the data directory, which only root may enter.
const DEFAULT_GUEST_DIR: &str = "/var/lib/drover-guests";

/// QEMU's guests on Slurm's nodes, as `cloud` sets them up.
fn slurm_guests(
    cloud: &CloudConfig,
    data_dir: &Path,
    site: &SlurmSite,
    accel: Accel,
) -> Result<Arc<dyn Provisioner>, String> {
    let config = SlurmGuestConfig {
        site: site.clone(),
        run_dir: data_dir.join("vms"),
        guest_dir: cloud
            .guest_dir
            .clone()
            .unwrap_or_else(|| DEFAULT_GUEST_DIR.into()),
        accel,
        boot_deadline: Duration::from_secs(cloud.boot_deadline_seconds.max(1)),
        shutdown_grace: Duration::from_secs(cloud.shutdown_grace_seconds),
        command_timeout: Duration::from_secs(30),
    };
    let guests = SlurmGuests::new(config, guest_account(&cloud.guest_user)?)
        .map_err(|e| e.to_string())?
        .with_console_limit(cloud.console_limit_kib.saturating_mul(1024));
    Ok(Arc::new(guests))
}

/// The site's commands' provisioner (`[cloud.exec]`).
fn exec(cloud: &CloudConfig, data_dir: &Path) -> Result<Arc<dyn Provisioner>, String> {
    let exec = cloud
        .exec
        .as_ref()
        .ok_or("[cloud] provisioner = \"exec\" needs a [cloud.exec] section with its commands")?;
    Ok(Arc::new(
        ExecProvisioner::new(data_dir.join("vms"), commands(exec)).map_err(|e| e.to_string())?,
    ))
}

/// The account guests run as (`[cloud] guest_user`) when the service runs as root;
/// `None` otherwise (they run as the service's own user, which is not root).
fn guest_account(name: &str) -> Result<Option<GuestAccount>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    if name == DEFAULT_GUEST_USER && SystemUser::lookup(name).is_none() {
        make_guest_account(name)?;
    }
    let user = SystemUser::lookup(name).ok_or_else(|| {
        format!(
            "the guest account '{name}' ([cloud] guest_user) does not exist: create it \
             (scripts/services/guest-image.sh account), or name another"
        )
    })?;
    if user.uid == 0 || user.groups.contains(&0) || user.gid == 0 {
        return Err(format!(
            "the guest account '{name}' ([cloud] guest_user) is root or in root's group: \
             guests never run as root"
        ));
    }
    Ok(Some(GuestAccount {
        name: user.name,
        uid: user.uid,
        gid: user.gid,
        groups: user.groups,
    }))
}

/// Makes the default guest account, as `scripts/services/guest-image.sh account` does: a
/// system account with no home and no login shell, in group `kvm` where there is one
/// (so that guests may use KVM). Only the default name is ever made: a configured one
/// is the site's to make.
fn make_guest_account(name: &str) -> Result<(), String> {
    let run = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {program}: {e}"))
            .and_then(|out| {
                out.status.success().then_some(()).ok_or_else(|| {
                    format!(
                        "{program} failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )
                })
            })
    };
    run(
        "useradd",
        &[
            "--system",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
    )
    .map_err(|why| format!("cannot make the guest account '{name}': {why}"))?;
    eprintln!("drover: made the system account '{name}' that guests run as");
    if run("getent", &["group", "kvm"]).is_ok() {
        run("usermod", &["-a", "-G", "kvm", name])?;
    }
    Ok(())
}

fn commands(exec: &ExecConfig) -> ExecCommands {
    let timeout = Duration::from_secs(exec.timeout_seconds);
    let command = |argv: &Vec<String>| ExecCommand::new(argv.clone(), timeout);
    ExecCommands {
        create: command(&exec.create),
        destroy: command(&exec.destroy),
        migrate: command(&exec.migrate),
        power_on: command(&exec.power_on),
        power_off: command(&exec.power_off),
        status: command(&exec.status),
        adopt: exec.adopt.as_ref().map(command),
    }
}

/// Registers the default guest image (`[cloud] default_image`) when its files are in
/// the images directory and no image has that name yet; says what it did.
pub fn register_default_image(images: &Images, name: &str) -> Result<Option<String>, String> {
    if name.is_empty() || images.get(name).is_ok() {
        return Ok(None);
    }
    let dir = images.image_dir().join(name);
    let [kernel, initramfs, disk] = GUEST_FILES.map(|f| format!("{name}/{f}"));
    if !(dir.join(GUEST_FILES[0]).is_file() && dir.join(GUEST_FILES[1]).is_file()) {
        return Ok(None);
    }
    let change = drover_domain::image::ImageChange {
        name: Some(name.into()),
        hypervisor: Some(false),
        os_type: Some("linux".into()),
        supports_virtual_machine: Some(true),
        boot: Some(drover_domain::image::Boot {
            kernel,
            initramfs,
            disk: if dir.join(GUEST_FILES[2]).is_file() {
                disk
            } else {
                String::new()
            },
            ready_line: "GUEST-READY".into(),
        }),
        ..Default::default()
    };
    images
        .create(&change)
        .map(|stored| {
            Some(format!(
                "registered the default guest image '{name}' ({})",
                stored.id
            ))
        })
        .map_err(|e| format!("cannot register the default guest image '{name}': {e}"))
}

/// Images and a provisioner: what makes guests here.
struct Guests {
    images: Arc<Images>,
    provisioner: Arc<dyn Provisioner>,
    /// What a VM without an image boots (one made for a job).
    default_image: String,
    /// Nodes are machines (Slurm's): a migration goes to the target node, not to a new
    /// process here.
    on_nodes: bool,
}

impl VmHost for Guests {
    fn run(&self, vm: Vm, operation: VmOperation, done: Done) {
        let work = Guests {
            images: self.images.clone(),
            provisioner: self.provisioner.clone(),
            default_image: self.default_image.clone(),
            on_nodes: self.on_nodes,
        };
        let (done_here, name) = (Arc::new(std::sync::Mutex::new(Some(done))), vm.id.clone());
        let done_there = done_here.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("vm {name}"))
            .spawn(move || {
                let outcome = work.operate(&vm, &operation);
                if let Some(done) = done_there.lock().unwrap().take() {
                    done(outcome);
                }
            });
        if let Err(e) = spawned
            && let Some(done) = done_here.lock().unwrap().take()
        {
            done(Err(format!("cannot start a thread for the operation: {e}")));
        }
    }

    fn alive(&self, vm: &Vm) -> bool {
        match self.provisioner.adopt(&vm.id) {
            Ok(found) => found,
            // Unknown, not gone: a guest on a Slurm node is kept as it was rather than
            // declared lost (its console is read again once a start finds it).
            Err(e @ ProvisionError::Slurm { .. }) => {
                eprintln!("drover: VM {} is kept as running: {e}", vm.id);
                true
            }
            Err(_) => false,
        }
    }

    fn connect_agent(&self, vm: &Vm) -> Result<std::os::fd::OwnedFd, String> {
        self.provisioner
            .connect_agent(&vm.id)
            .map(std::os::fd::OwnedFd::from)
            .map_err(|e| e.to_string())
    }
}

impl Guests {
    fn operate(&self, vm: &Vm, operation: &VmOperation) -> Outcome {
        let provisioner = &*self.provisioner;
        let said = |e: ProvisionError| e.to_string();
        match operation {
            VmOperation::Create => {
                match provisioner.status(&vm.id) {
                    Ok(VmStatus::Running { .. }) => return Ok(()), // made before a restart
                    // A create that did not finish left its files: start afresh.
                    Ok(VmStatus::Stopped) => provisioner.destroy(&vm.id).map_err(said)?,
                    _ => {}
                }
                let spec = self.spec_of(vm)?;
                provisioner.create(&spec).map(drop).map_err(said)
            }
            VmOperation::PowerOn => provisioner.power(&vm.id, Power::On).map_err(said),
            VmOperation::PowerOff => provisioner.power(&vm.id, Power::Off).map_err(said),
            // Logical nodes share this machine: the guest moves to a new hypervisor
            // process here, live, and its VM record moves to the target node. Slurm's
            // nodes are machines: it moves there.
            VmOperation::Migrate { to, .. } => {
                let target = match self.on_nodes {
                    true => MigrationTarget::Node(to.clone()),
                    false => MigrationTarget::SameHost,
                };
                provisioner.migrate(&vm.id, &target).map(drop).map_err(said)
            }
            VmOperation::Destroy => match provisioner.destroy(&vm.id) {
                Ok(()) | Err(ProvisionError::NotFound(_)) => Ok(()),
                Err(e) => Err(said(e)),
            },
        }
    }

    /// What the guest of `vm` boots: its image's material, inside the images directory.
    fn spec_of(&self, vm: &Vm) -> Result<VmSpec, String> {
        let name = match vm.image.as_str() {
            "" => &self.default_image,
            name => name,
        };
        let stored = self
            .images
            .get(name)
            .map_err(|e| format!("the image '{name}' cannot be used: {e}"))?;
        let image = &stored.value;
        if !image.supports_virtual_machine {
            return Err(format!("the image '{}' does not support VMs", image.name));
        }
        let dir = self.images.image_dir();
        let file = |what: &str, path: &str| -> Result<std::path::PathBuf, String> {
            if path.is_empty() {
                return Err(format!(
                    "the image '{}' has no boot.{what}: it cannot boot a VM here",
                    image.name
                ));
            }
            boot::resolve(dir, path).map_err(|e| format!("the image '{}': {e}", image.name))
        };
        let disk = match image.boot.disk.as_str() {
            "" => None,
            path => Some(Disk {
                path: file("disk", path)?,
                format: disk_format(Path::new(path)),
            }),
        };
        Ok(VmSpec {
            id: vm.id.clone(),
            processors: vm.processors,
            memory_mib: vm.memory,
            boot: BootMaterial {
                kernel: file("kernel", &image.boot.kernel)?,
                initramfs: file("initramfs", &image.boot.initramfs)?,
                disk,
            },
            extra_disks: vm
                .disks
                .iter()
                .map(|d| ExtraDisk {
                    class: d.class.clone(),
                    size_gb: d.size_gb,
                })
                .collect(),
            ready_line: Some(image.boot.ready_line.clone()).filter(|l| !l.is_empty()),
            node: Some(vm.node.clone()).filter(|n| !n.is_empty()),
        })
    }
}

/// A disk's format, by its name: said, never probed from its content.
fn disk_format(path: &Path) -> DiskFormat {
    match path.extension().and_then(|e| e.to_str()) {
        Some("qcow2") => DiskFormat::Qcow2,
        _ => DiskFormat::Raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> GuestsReport {
        GuestsReport {
            provisioner: "qemu",
            accel: Some("tcg"),
            accel_reason: Some("KVM did not answer its probe within 2.0 s".into()),
            default_image: "guest".into(),
            default_image_registered: true,
            image_dir: "/srv/data/images/guest".into(),
            fix: Some("sudo drover prepare-guests /srv/data/images/guest".into()),
            ..GuestsReport::default()
        }
    }

    #[test]
    fn the_start_says_what_makes_guests_and_what_fixes_them() {
        let ready = report();
        assert_eq!(
            ready.summary(),
            "VMs: QEMU on TCG (KVM did not answer its probe within 2.0 s), default image 'guest'"
        );
        assert_eq!(ready.problem(true), None);

        let no_image = GuestsReport {
            default_image_registered: false,
            ..report()
        };
        let said = no_image.summary();
        let (first, second) = said.split_once('\n').unwrap();
        assert!(first.ends_with("default image 'guest' (missing)"), "{said}");
        assert!(
            second.starts_with("VMs cannot be made: the default image 'guest'")
                && second.contains("/srv/data/images/guest")
                && second.contains("run `sudo drover prepare-guests /srv/data/images/guest`"),
            "{said}"
        );
        // Registered since (through the interface): the problem is gone.
        assert_eq!(no_image.problem(true), None);

        let no_qemu = GuestsReport {
            provisioner: "none",
            accel: None,
            accel_reason: None,
            provisioner_problem: Some("QEMU is not installed".into()),
            ..report()
        };
        assert!(
            no_qemu
                .summary()
                .starts_with("VMs: no provisioner, default image")
        );
        assert_eq!(
            no_qemu.problem(true).as_deref(),
            Some("QEMU is not installed")
        );

        let off = GuestsReport {
            provisioner: "none",
            turned_off: true,
            default_image_registered: false,
            ..report()
        };
        assert_eq!(off.summary(), "VMs: none ([cloud] provisioner = \"none\")");
        assert_eq!(off.problem(false), None);
    }
}
