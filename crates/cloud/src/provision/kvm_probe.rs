//! Whether KVM works here, found once and quickly: a guest of 512 bytes.
//!
//! Under nested virtualization `/dev/kvm` may open and QEMU start with `-accel kvm`,
//! yet guests hang without a word (or crawl: every exit to the outer hypervisor costs
//! milliseconds). Waiting for a real guest to tell costs a whole boot deadline; this
//! probe costs at most [`KVM_PROBE_DEADLINE`]: QEMU boots, under KVM, a boot sector
//! (a raw disk of one sector, handed over as a memory file) that writes `OK` to the
//! serial port 0x3f8 and halts. The firmware runs before it, thousands of exits: a
//! healthy KVM says `OK` in a few tenths of a second, one nested this way in seconds
//! (4 to 5.5 s measured where real guests hang) or never.
//!
//! QEMU runs as the guest account when there is one, so that the probe also finds
//! whether that account may use `/dev/kvm` (a member of group `kvm`).

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::sandbox::{GuestAccount, Handover};

/// How long the probe's guest may take to say `OK` under KVM.
pub const KVM_PROBE_DEADLINE: Duration = Duration::from_secs(2);

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvmProbe {
    /// No `/dev/kvm`, or this service cannot open it: no probe ran.
    Absent,
    /// The probe's guest said `OK` after this long.
    Answered(Duration),
    /// It said nothing within this deadline: KVM hangs or crawls here.
    Silent(Duration),
    /// QEMU ended without `OK`: what it said (no access to `/dev/kvm`, no KVM support).
    Failed(String),
}

impl KvmProbe {
    /// Whether guests should run on KVM.
    pub fn trusts_kvm(&self) -> bool {
        matches!(self, KvmProbe::Answered(_))
    }

    /// The finding in words, for the service's output and its diagnostics.
    pub fn describe(&self) -> String {
        match self {
            KvmProbe::Absent => "no /dev/kvm that this service may open".into(),
            KvmProbe::Answered(took) => {
                format!("KVM answered its probe in {:.2} s", took.as_secs_f64())
            }
            KvmProbe::Silent(within) => format!(
                "KVM did not answer its probe within {:.1} s, as under nested virtualization",
                within.as_secs_f64()
            ),
            KvmProbe::Failed(said) => format!("QEMU could not use KVM: {said}"),
        }
    }
}

/// The probe's guest: at 0x7c00, `mov dx, 0x3f8; mov al, 'O'; out dx, al; mov al, 'K';
/// out dx, al; mov al, 10; out dx, al; cli; hlt; jmp -3` (back to `hlt`), then the
/// boot signature.
pub const BOOT_SECTOR: [u8; 512] = boot_sector();

const fn boot_sector() -> [u8; 512] {
    let code: [u8; 16] = [
        0xba, 0xf8, 0x03, 0xb0, b'O', 0xee, 0xb0, b'K', 0xee, 0xb0, b'\n', 0xee, 0xfa, 0xf4, 0xeb,
        0xfd,
    ];
    let mut sector = [0u8; 512];
    let mut i = 0;
    while i < code.len() {
        sector[i] = code[i];
        i += 1;
    }
    sector[510] = 0x55;
    sector[511] = 0xaa;
    sector
}

/// Probes KVM with `qemu-system-x86_64` as `account` (when given), waiting at most
/// `deadline` for the guest's `OK`; [`KvmProbe::Absent`] at once without `/dev/kvm`.
pub fn probe_kvm(account: Option<&GuestAccount>, deadline: Duration) -> KvmProbe {
    if !super::qemu::kvm_opens() {
        return KvmProbe::Absent;
    }
    run_probe("qemu-system-x86_64", "kvm", account, deadline)
}

/// Boots [`BOOT_SECTOR`] with `program` (QEMU's command line) on `accel`.
pub fn run_probe(
    program: &str,
    accel: &str,
    account: Option<&GuestAccount>,
    deadline: Duration,
) -> KvmProbe {
    let disk = match sector_file() {
        Ok(disk) => disk,
        Err(e) => return KvmProbe::Failed(format!("cannot make the probe's disk: {e}")),
    };
    let mut handover = Handover::default();
    let disk = handover.keep(disk);
    let mut command = Command::new(program);
    command
        .args(["-accel", accel, "-m", "16", "-nodefaults", "-no-reboot"])
        .args(["-display", "none", "-serial", "stdio", "-monitor", "none"])
        .args([
            "-sandbox",
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        ])
        .arg("-drive")
        .arg(format!("file=/proc/self/fd/{disk},format=raw,if=ide"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    handover.confine(&mut command, account);
    let started = Instant::now();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return KvmProbe::Failed(format!("cannot run {program}: {e}")),
    };
    drop(handover);
    let (lines, said) = mpsc::channel();
    let mut stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        let mut buffer = [0u8; 256];
        while let Ok(n @ 1..) = stdout.read(&mut buffer) {
            if lines.send(buffer[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let heard = listen(&said, started, deadline);
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    verdict(heard, started.elapsed(), deadline, &stderr)
}

/// What the guest's serial port gave before `deadline`.
enum Heard {
    Ok,
    /// QEMU closed its output (it ended) without `OK`.
    Ended,
    Nothing,
}

fn listen(said: &mpsc::Receiver<Vec<u8>>, started: Instant, deadline: Duration) -> Heard {
    let mut output = Vec::new();
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        match said.recv_timeout(left) {
            Ok(bytes) => {
                output.extend_from_slice(&bytes);
                if output.windows(2).any(|w| w == b"OK") {
                    return Heard::Ok;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return Heard::Ended,
            Err(mpsc::RecvTimeoutError::Timeout) => return Heard::Nothing,
        }
    }
}

/// The probe's finding from what was heard, how long it took, and QEMU's errors (but
/// its warnings and the notice of the kill that ended it).
fn verdict(heard: Heard, took: Duration, deadline: Duration, stderr: &str) -> KvmProbe {
    match heard {
        Heard::Ok => KvmProbe::Answered(took),
        Heard::Nothing => KvmProbe::Silent(deadline),
        Heard::Ended => {
            let said: Vec<&str> = stderr
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.contains("warning:"))
                .collect();
            KvmProbe::Failed(if said.is_empty() {
                "it ended without a word".into()
            } else {
                said.join(" | ")
            })
        }
    }
}

/// The boot sector as an anonymous memory file: nothing on disk, and QEMU (as the
/// guest account) reopens it through `/proc/self/fd`.
fn sector_file() -> std::io::Result<OwnedFd> {
    // SAFETY: the name is a NUL-terminated literal; the result is checked.
    let fd = unsafe { libc::memfd_create(c"drover-kvm-probe".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    std::io::Write::write_all(&mut &file, &BOOT_SECTOR)?;
    Ok(file.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const SOON: Duration = Duration::from_millis(1500);

    #[test]
    fn the_boot_sector_is_one_bootable_sector() {
        assert_eq!(&BOOT_SECTOR[510..], &[0x55, 0xaa]);
        let text = String::from_utf8_lossy(&BOOT_SECTOR[..16]).into_owned();
        assert!(text.contains('O') && text.contains('K'), "{text}");
    }

    #[test]
    fn the_verdict_follows_what_was_heard() {
        let took = Duration::from_millis(300);
        assert_eq!(verdict(Heard::Ok, took, SOON, ""), KvmProbe::Answered(took));
        assert!(verdict(Heard::Ok, took, SOON, "").trusts_kvm());
        assert_eq!(
            verdict(Heard::Nothing, SOON, SOON, ""),
            KvmProbe::Silent(SOON)
        );
        let failed = verdict(
            Heard::Ended,
            took,
            SOON,
            "qemu-system-x86_64: warning: host doesn't support requested feature\n\
             Could not access KVM kernel module: Permission denied\n\
             qemu-system-x86_64: failed to initialize kvm: Permission denied\n",
        );
        assert_eq!(
            failed,
            KvmProbe::Failed(
                "Could not access KVM kernel module: Permission denied | \
                 qemu-system-x86_64: failed to initialize kvm: Permission denied"
                    .into()
            )
        );
        assert!(!failed.trusts_kvm() && !KvmProbe::Absent.trusts_kvm());
        assert!(KvmProbe::Silent(SOON).describe().contains("within 1.5 s"));
    }

    /// A stand-in for QEMU: a shell script with `body`.
    fn fake(dir: &std::path::Path, body: &str) -> String {
        let path = dir.join("fake-qemu");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    #[test]
    fn a_guest_that_says_ok_is_trusted_and_one_that_hangs_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let answers = fake(dir.path(), "sleep 0.1; printf 'OK\\n'; exec sleep 60");
        // A deadline no busy machine reaches: what is tested is the verdict on an OK.
        let found = run_probe(&answers, "kvm", None, Duration::from_secs(60));
        assert!(found.trusts_kvm(), "{found:?}");

        // At its deadline the probe gives up and stops the guest: it does not wait the
        // guest's minute (a bound far from any machine's speed).
        let hangs = fake(dir.path(), "exec sleep 60");
        let started = Instant::now();
        assert_eq!(run_probe(&hangs, "kvm", None, SOON), KvmProbe::Silent(SOON));
        assert!(started.elapsed() < Duration::from_secs(30));

        let refuses = fake(
            dir.path(),
            "echo 'failed to initialize kvm: No such device' >&2",
        );
        let found = run_probe(&refuses, "kvm", None, SOON);
        assert_eq!(
            found,
            KvmProbe::Failed("failed to initialize kvm: No such device".into())
        );
        let missing = run_probe("/nonexistent/qemu", "kvm", None, SOON);
        assert!(matches!(missing, KvmProbe::Failed(_)), "{missing:?}");
    }

    /// With QEMU installed, the boot sector really says OK (under TCG, which works
    /// everywhere).
    #[test]
    fn the_boot_sector_says_ok_under_qemu() {
        if Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipped: qemu-system-x86_64 is not installed");
            return;
        }
        let found = run_probe("qemu-system-x86_64", "tcg", None, Duration::from_secs(20));
        assert!(found.trusts_kvm(), "{found:?}");
    }
}
