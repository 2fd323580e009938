//! The default guest image on a fresh machine: QEMU installed and the image built from
//! the distribution's packages (a prebuilt image is never downloaded), by the recipe of
//! `scripts/services/guest-image.sh`. The recipe is embedded here, so that an installed
//! binary needs no checkout, and stays one: the script is the only source of both.
//!
//! `drover serve` (as root, `[cloud] prepare_guest_image`) prepares what is missing
//! before it listens; `drover prepare-guests` does it on demand, for a service that
//! does not run as root.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::settings::{CloudConfig, ProvisionerKind};

/// The service scripts' shared functions (`log`, `apt_install`, `run_steps`).
const STEPS: &str = include_str!("../../../scripts/services/steps.sh");
/// The recipe: its `packages` and `image` steps.
const RECIPE: &str = include_str!("../../../scripts/services/guest-image.sh");

/// The files the recipe builds, in `<image_dir>/<default_image>/`; the first two make
/// the image bootable.
pub const GUEST_FILES: [&str; 3] = ["vmlinuz", "initrd.gz", "disk.qcow2"];

/// What QEMU's guests of the default image lack here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missing {
    /// `qemu-system-x86_64` or `qemu-img` is not installed.
    pub qemu: bool,
    /// The default image's kernel or initramfs is not in its directory.
    pub image: bool,
}

impl Missing {
    /// What preparing does about it, in words.
    pub fn doing(&self) -> &'static str {
        if self.qemu {
            "installing QEMU and building the default guest image"
        } else {
            "building the default guest image"
        }
    }
}

/// The directory of the default image's files (`<image_dir>/<default_image>`), unless
/// there is no default image.
pub fn default_image_dir(cloud: &CloudConfig, image_dir: &Path) -> Option<PathBuf> {
    (!cloud.default_image.is_empty()).then(|| image_dir.join(&cloud.default_image))
}

/// Whether the QEMU program is installed (both `qemu-system-x86_64` and `qemu-img`).
pub fn qemu_installed() -> bool {
    on_path("qemu-system-x86_64") && on_path("qemu-img")
}

/// What is missing for guests of the default image, if anything; `None` also when
/// the provisioner is not QEMU's (`exec`, `none`) or there is no default image.
pub fn missing(cloud: &CloudConfig, image_dir: &Path) -> Option<Missing> {
    if !matches!(cloud.provisioner, None | Some(ProvisionerKind::Qemu)) {
        return None;
    }
    let dir = default_image_dir(cloud, image_dir)?;
    let missing = Missing {
        qemu: !qemu_installed(),
        image: !GUEST_FILES[..2].iter().all(|f| dir.join(f).is_file()),
    };
    (missing.qemu || missing.image).then_some(missing)
}

/// Installs QEMU and the packages the image is made of where they are missing
/// (`apt-get`, as root), then builds the image into `dir` unless it is there already
/// from the same recipe; how long it took. The directories it makes are mode 0700,
/// and with `inherit_owner` they take the owner of the directory they are made in (a
/// service that is not root reads the image `sudo drover prepare-guests` built).
pub fn prepare(dir: &Path, inherit_owner: bool) -> Result<Duration, String> {
    let started = Instant::now();
    make_dirs(dir, inherit_owner)?;
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!("{STEPS}\n{RECIPE}"))
        .args(["guest-image.sh", "packages", "image"])
        .env("GUEST_IMAGE_DIR", dir)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("PATH", with_system_dirs(std::env::var_os("PATH")))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let last: Vec<&str> = said.lines().rev().take(5).collect();
        let last: Vec<&str> = last.into_iter().rev().collect();
        return Err(format!(
            "the guest image's recipe failed ({}): {}",
            output.status,
            last.join(" | ")
        ));
    }
    if let Some(file) = GUEST_FILES.iter().find(|f| !dir.join(f).is_file()) {
        return Err(format!("the recipe made no {}", dir.join(file).display()));
    }
    Ok(started.elapsed())
}

/// Makes `dir` and the directories above it that are missing (mode 0700), giving each
/// the owner of the one it is made in when `inherit_owner`.
fn make_dirs(dir: &Path, inherit_owner: bool) -> Result<(), String> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if !inherit_owner {
        return Ok(());
    }
    for made in missing.iter().rev() {
        let parent = made.parent().unwrap_or(Path::new("/"));
        let owner = std::fs::metadata(parent)
            .map_err(|e| format!("cannot read {}: {e}", parent.display()))?;
        std::os::unix::fs::chown(made, Some(owner.uid()), Some(owner.gid()))
            .map_err(|e| format!("cannot give {} to uid {}: {e}", made.display(), owner.uid()))?;
    }
    Ok(())
}

/// `PATH` with the system's directories (apt's helpers and `useradd` are in `sbin`).
fn with_system_dirs(path: Option<std::ffi::OsString>) -> std::ffi::OsString {
    let mut dirs: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for dir in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        if !dirs.iter().any(|d| d == Path::new(dir)) {
            dirs.push(dir.into());
        }
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// The one command that prepares the default guest image in `dir`: this program's
/// `prepare-guests`, as root.
pub fn fix_command(dir: &Path) -> String {
    let program = std::env::current_exe()
        .ok()
        .filter(|p| p.file_name().is_some_and(|n| n == "drover"))
        .map_or_else(|| "drover".into(), |p| p.display().to_string());
    // SAFETY: geteuid has no preconditions.
    let sudo = if unsafe { libc::geteuid() } == 0 {
        ""
    } else {
        "sudo "
    };
    format!("{sudo}{program} prepare-guests {}", dir.display())
}

/// Whether `program` is an executable file in a directory of `PATH`.
pub(crate) fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_recipe_is_the_scripts_and_runs_without_them() {
        assert!(RECIPE.contains("do_packages()") && RECIPE.contains("do_image()"));
        assert!(
            RECIPE.contains("declare -F run_steps"),
            "steps.sh read only when absent"
        );
        assert!(STEPS.contains("run_steps()"));
        // Its usage, from the embedded text alone (no file beside it).
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("{STEPS}\n{RECIPE}"))
            .args(["guest-image.sh", "nonsense"])
            .current_dir("/")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("packages") && said.contains("image"),
            "{said}"
        );
    }

    #[test]
    fn only_qemus_default_image_is_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        let mut cloud = CloudConfig::default();
        let found = missing(&cloud, dir.path()).expect("no image yet");
        assert!(found.image);
        let guest = dir.path().join("guest");
        std::fs::create_dir(&guest).unwrap();
        for file in GUEST_FILES {
            std::fs::write(guest.join(file), "x").unwrap();
        }
        assert_eq!(
            missing(&cloud, dir.path()).map(|m| m.image),
            (!qemu_installed()).then_some(false)
        );
        cloud.provisioner = Some(ProvisionerKind::Exec);
        std::fs::remove_dir_all(&guest).unwrap();
        assert_eq!(missing(&cloud, dir.path()), None);
        cloud.provisioner = None;
        cloud.default_image.clear();
        assert_eq!(missing(&cloud, dir.path()), None);
    }

    #[test]
    fn made_directories_are_private_and_may_take_their_parents_owner() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
        }
        let target = dir.path().join("data/images/guest");
        make_dirs(&target, true).unwrap();
        for made in ["data", "data/images", "data/images/guest"] {
            let meta = std::fs::metadata(dir.path().join(made)).unwrap();
            assert_eq!(meta.mode() & 0o777, 0o700, "{made}");
            assert_eq!(
                meta.uid(),
                std::fs::metadata(dir.path()).unwrap().uid(),
                "{made}"
            );
        }
        let path = with_system_dirs(Some("/opt/bin".into()));
        assert!(path.to_string_lossy().starts_with("/opt/bin:"));
        assert!(path.to_string_lossy().contains("/usr/sbin"));
    }
}
