//! The default guest image on a fresh machine: QEMU installed and the image built from
//! the distribution's packages (a prebuilt image is never downloaded), by the recipe of
//! `scripts/services/guest-image.sh`. The recipe is embedded here, so that an installed
//! binary needs no checkout, and stays one: the script is the only source of both.
//!
//! `drover serve` (as root, `[cloud] prepare_guest_image`) prepares what is missing
//! before it listens; `drover prepare-guests` does it on demand, for a service that
//! does not run as root.

use std::os::unix::fs::MetadataExt;
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
/// from the same recipe; how long it took.
///
/// Root never writes where another user can change things: the image is built (and
/// `dir` made, mode 0700) by the owner of the nearest directory of `dir` that exists,
/// so that a service not run as root reads what `sudo drover prepare-guests` built, and
/// a symbolic link planted in a directory that user owns leads nowhere they could not
/// write themselves.
pub fn prepare(dir: &Path) -> Result<Duration, String> {
    let started = Instant::now();
    run_recipe("packages", dir, None)?;
    let existing = dir
        .ancestors()
        .find(|d| d.exists())
        .unwrap_or(Path::new("/"));
    let owner = std::fs::metadata(existing)
        .map_err(|e| format!("cannot read {}: {e}", existing.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let builder = (owner.uid() != me).then(|| (owner.uid(), owner.gid()));
    run_recipe("image", dir, builder)?;
    if let Some(file) = GUEST_FILES.iter().find(|f| !dir.join(f).is_file()) {
        return Err(format!("the recipe made no {}", dir.join(file).display()));
    }
    Ok(started.elapsed())
}

/// Runs one step of the embedded recipe for `dir`, as `user` (uid, gid) when given.
fn run_recipe(step: &str, dir: &Path, user: Option<(u32, u32)>) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new("bash");
    command
        .arg("-c")
        // Directories the recipe makes are the builder's alone.
        .arg(format!("umask 077\n{STEPS}\n{RECIPE}"))
        .args(["guest-image.sh", step])
        .env("GUEST_IMAGE_DIR", dir)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("PATH", with_system_dirs(std::env::var_os("PATH")))
        .current_dir("/")
        .stdin(Stdio::null());
    if let Some((uid, gid)) = user {
        // (As root, std drops the supplementary groups before it switches.)
        command.uid(uid).gid(gid);
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let last: Vec<&str> = said.lines().rev().take(5).collect();
    let last: Vec<&str> = last.into_iter().rev().collect();
    Err(format!(
        "the guest image's recipe ({step}) failed ({}): {}",
        output.status,
        last.join(" | ")
    ))
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

    /// An ordinary user who owns the directory `prepare-guests` is pointed at plants a
    /// link where the recipe writes: root does not write through it; the image is built
    /// as that user, and is theirs.
    #[test]
    fn root_builds_in_another_users_directory_as_that_user() {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root || !std::path::Path::new("/bin/busybox").exists() || !qemu_installed() {
            eprintln!("skipped: needs root, busybox-static and QEMU (scripts/test installs them)");
            return;
        }
        let nobody = (65534, 65534);
        let theirs = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(theirs.path(), Some(nobody.0), Some(nobody.1)).unwrap();
        let dir = theirs.path().join("guest");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(nobody.0), Some(nobody.1)).unwrap();
        let victim_dir = tempfile::tempdir().unwrap();
        let victim = victim_dir.path().join("only-root-writes-here");
        std::fs::write(&victim, "unchanged").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("stamp")).unwrap();
        let outcome = prepare(&dir);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "unchanged");
        assert!(
            outcome.is_err(),
            "the link was written through: {outcome:?}"
        );
        // Without the trap, the same user gets a working image of their own.
        std::fs::remove_file(dir.join("stamp")).unwrap();
        prepare(&dir).unwrap();
        for file in GUEST_FILES {
            let meta = std::fs::metadata(dir.join(file)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), nobody, "{file}");
        }
        let made = theirs.path().join("new/guest");
        prepare(&made).unwrap();
        let meta = std::fs::metadata(theirs.path().join("new")).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (nobody.0, 0o700));
    }

    #[test]
    fn the_path_keeps_the_callers_dirs_first() {
        let path = with_system_dirs(Some("/opt/bin".into()));
        assert!(path.to_string_lossy().starts_with("/opt/bin:"));
        assert!(path.to_string_lossy().contains("/usr/sbin"));
    }
}
