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

use drover_cloud::provision::{
    Accel, BootMaterial, Disk, DiskFormat, ExecCommand, ExecCommands, ExecProvisioner, ExtraDisk,
    GuestAccount, MigrationTarget, Power, ProvisionError, Provisioner, QemuProvisioner, VmSpec,
    VmStatus,
};
use drover_cloud::{Images, boot};
use drover_sched::sysuser::SystemUser;
use drover_sched::vm::Vm;
use drover_sched::vm_host::{Done, NoVmHost, Outcome, VmHost, VmOperation};

use crate::settings::{AccelChoice, CloudConfig, DEFAULT_GUEST_USER, ExecConfig, ProvisionerKind};

/// The VM host `cloud` asks for (guests' files in `data_dir`/vms); when it cannot be
/// made, one that fails every operation saying why (and the reason is printed at start).
pub fn vm_host(cloud: &CloudConfig, data_dir: &Path, images: Arc<Images>) -> Arc<dyn VmHost> {
    match provisioner(cloud, data_dir) {
        Ok(Some(provisioner)) => Arc::new(Guests {
            images,
            provisioner,
            default_image: cloud.default_image.clone(),
        }),
        Ok(None) => Arc::new(NoVmHost(
            "no provisioner is configured ([cloud] provisioner = \"none\", or qemu-system-x86_64 \
             is not installed: scripts/services/guest-image.sh install)"
                .into(),
        )),
        Err(why) => {
            eprintln!("drover: VMs cannot be made: {why}");
            Arc::new(NoVmHost(format!("the provisioner cannot be used: {why}")))
        }
    }
}

fn provisioner(
    cloud: &CloudConfig,
    data_dir: &Path,
) -> Result<Option<Arc<dyn Provisioner>>, String> {
    let kind = cloud
        .provisioner
        .unwrap_or(if on_path("qemu-system-x86_64") {
            ProvisionerKind::Qemu
        } else {
            ProvisionerKind::None
        });
    let run_dir = data_dir.join("vms");
    Ok(Some(match kind {
        ProvisionerKind::None => return Ok(None),
        ProvisionerKind::Qemu => {
            let accel = match cloud.accel {
                AccelChoice::Auto => Accel::Auto,
                AccelChoice::Kvm => Accel::Kvm,
                AccelChoice::Tcg => Accel::Tcg,
            };
            let deadline = Duration::from_secs(cloud.boot_deadline_seconds.max(1));
            let mut qemu = QemuProvisioner::new(run_dir, accel, deadline)
                .map_err(|e| e.to_string())?
                .with_shutdown_grace(Duration::from_secs(cloud.shutdown_grace_seconds))
                .with_console_limit(cloud.console_limit_kib.saturating_mul(1024));
            if let Some(account) = guest_account(&cloud.guest_user)? {
                qemu = qemu.with_guest_account(account);
            }
            Arc::new(qemu)
        }
        ProvisionerKind::Exec => {
            let exec = cloud.exec.as_ref().ok_or(
                "[cloud] provisioner = \"exec\" needs a [cloud.exec] section with its commands",
            )?;
            Arc::new(ExecProvisioner::new(run_dir, commands(exec)).map_err(|e| e.to_string())?)
        }
    }))
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

/// Whether `program` is an executable file in a directory of `PATH`.
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The files of the default guest image, as `scripts/services/guest-image.sh` builds
/// them, in `<image_dir>/<default_image>/`.
const GUEST_FILES: [&str; 3] = ["vmlinuz", "initrd.gz", "disk.qcow2"];

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
}

impl VmHost for Guests {
    fn run(&self, vm: Vm, operation: VmOperation, done: Done) {
        let work = Guests {
            images: self.images.clone(),
            provisioner: self.provisioner.clone(),
            default_image: self.default_image.clone(),
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
        self.provisioner.adopt(&vm.id).unwrap_or(false)
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
            // process here, live, and its VM record moves to the target node.
            VmOperation::Migrate { .. } => provisioner
                .migrate(&vm.id, &MigrationTarget::SameHost)
                .map(drop)
                .map_err(said),
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
