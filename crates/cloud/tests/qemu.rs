//! The QEMU provisioner with real guests (no mocks): the default guest image of
//! `scripts/services/guest-image.sh`, found through `DROVER_GUEST_IMAGE_DIR`. Without
//! it the guest tests are skipped with a message, unless `DROVER_REQUIRE_QEMU=1` (as in
//! `scripts/test`), which makes them fail. One guest at a time (a shared lock): they are
//! small (96 MiB, 1 CPU) and emulated (TCG) so that 2 cores cope.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use drover_cloud::provision::agent::OUTPUT_LIMIT;
use drover_cloud::provision::{
    Accel, BootMaterial, Disk, DiskFormat, GuestAccount, GuestCommand, GuestOutput,
    KVM_PROBE_DEADLINE, KvmProbe, MigrationTarget, Power, ProvisionError, Provisioner,
    QemuProvisioner, VmSpec, VmStatus,
};

const BOOT_DEADLINE: Duration = Duration::from_secs(30);

static ONE_GUEST_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_GUEST_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The guest image's directory, or `None` (the test is skipped) when none is given.
fn image_dir() -> Option<PathBuf> {
    match std::env::var("DROVER_GUEST_IMAGE_DIR") {
        Ok(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => {
            assert!(
                std::env::var("DROVER_REQUIRE_QEMU").as_deref() != Ok("1"),
                "DROVER_REQUIRE_QEMU=1 but DROVER_GUEST_IMAGE_DIR is not set"
            );
            eprintln!(
                "skipped: DROVER_GUEST_IMAGE_DIR is not set (scripts/services/guest-image.sh install image builds the image)"
            );
            None
        }
    }
}

/// A provisioner over a fresh run directory, the image, and the lock held.
struct Lab {
    _turn: MutexGuard<'static, ()>,
    run: tempfile::TempDir,
    image: PathBuf,
    provisioner: QemuProvisioner,
}

fn lab() -> Option<Lab> {
    let image = image_dir()?;
    let turn = one_at_a_time();
    let run = tempfile::tempdir().unwrap();
    let provisioner = provisioner(run.path(), Accel::Tcg);
    Some(Lab {
        _turn: turn,
        run,
        image,
        provisioner,
    })
}

fn provisioner(run_dir: &Path, accel: Accel) -> QemuProvisioner {
    let provisioner = QemuProvisioner::new(run_dir.join("vms"), accel, BOOT_DEADLINE)
        .unwrap()
        // The default guest ignores ACPI: do not wait long for it.
        .with_shutdown_grace(Duration::from_millis(500));
    match guest_account() {
        Some(account) => provisioner.with_guest_account(account),
        None => provisioner,
    }
}

/// As root, the account guests run as (`scripts/services/guest-image.sh account`).
fn guest_account() -> Option<GuestAccount> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let user = drover_sched::sysuser::SystemUser::lookup("drover-guest")
        .expect("as root, guests run as drover-guest: scripts/services/guest-image.sh account");
    let (name, uid, gid, groups) = (user.name, user.uid, user.gid, user.groups);
    Some(GuestAccount {
        name,
        uid,
        gid,
        groups,
    })
}

fn spec(image: &Path, id: &str, with_disk: bool) -> VmSpec {
    VmSpec {
        id: id.into(),
        processors: 1,
        memory_mib: 96,
        boot: BootMaterial {
            kernel: image.join("vmlinuz"),
            initramfs: image.join("initrd.gz"),
            disk: with_disk.then(|| Disk {
                path: image.join("disk.qcow2"),
                format: DiskFormat::Qcow2,
            }),
        },
        extra_disks: Vec::new(),
        ready_line: Some("GUEST-READY".into()),
        node: None,
    }
}

fn console(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

fn boots(path: &Path) -> usize {
    console(path).matches("GUEST-READY").count()
}

/// The guest's uptime in its last tick line (it prints one every second).
fn last_tick(path: &Path) -> Option<f64> {
    console(path)
        .lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("GUEST-TICK ")?.parse().ok())
}

fn wait_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

fn process_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    })
}

fn running(provisioner: &QemuProvisioner, id: &str) -> bool {
    matches!(provisioner.status(id).unwrap(), VmStatus::Running { qemu } if qemu == "running")
}

#[test]
fn a_guest_boots_powers_off_and_on_and_is_destroyed() {
    let Some(lab) = lab() else { return };
    let p = &lab.provisioner;
    // A descriptor the service holds without close-on-exec.
    let stray = std::fs::File::create(lab.run.path().join("stray")).unwrap();
    // SAFETY: fcntl on a descriptor this test owns.
    unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&stray), libc::F_SETFD, 0) };
    let started = Instant::now();
    let handle = p.create(&spec(&lab.image, "vm-life", false)).unwrap();
    eprintln!(
        "create to GUEST-READY: {:.2} s",
        started.elapsed().as_secs_f64()
    );
    assert!(console(&handle.console).contains("GUEST-READY"));
    assert!(running(p, "vm-life"));
    assert!(process_alive(handle.pid));
    // Under QEMU's seccomp filter (mode 2), without a way to more privileges, and (as
    // root) as the guest account.
    let status = std::fs::read_to_string(format!("/proc/{}/status", handle.pid)).unwrap();
    assert!(status.lines().any(|l| l == "Seccomp:\t2"), "{status}");
    assert!(status.lines().any(|l| l == "NoNewPrivs:\t1"), "{status}");
    if let Some(account) = guest_account() {
        let uid = format!("Uid:\t{0}\t{0}\t{0}\t{0}", account.uid);
        assert!(status.lines().any(|l| l == uid), "{status}");
    }
    // It holds what it was handed, nothing else of the service's.
    let held: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{}/fd", handle.pid))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .collect();
    assert!(!held.contains(&lab.run.path().join("stray")), "{held:?}");
    drop(stray);
    let dir = lab.run.path().join("vms/vm-life");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(lab.run.path().join("vms"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);

    assert!(matches!(
        p.create(&spec(&lab.image, "vm-life", false)),
        Err(ProvisionError::Exists(_))
    ));

    p.power("vm-life", Power::Off).unwrap();
    assert!(!process_alive(handle.pid));
    assert_eq!(p.status("vm-life").unwrap(), VmStatus::Stopped);
    p.power("vm-life", Power::Off).unwrap();
    assert!(dir.join("spec.json").is_file());

    p.power("vm-life", Power::On).unwrap();
    assert_eq!(boots(&handle.console), 2, "{}", console(&handle.console));
    assert!(running(p, "vm-life"));

    p.destroy("vm-life").unwrap();
    assert_eq!(p.status("vm-life").unwrap(), VmStatus::Gone);
    assert!(!dir.exists());
    assert!(matches!(
        p.destroy("vm-life"),
        Err(ProvisionError::NotFound(_))
    ));
    assert!(matches!(
        p.power("vm-life", Power::On),
        Err(ProvisionError::NotFound(_))
    ));
}

#[test]
fn a_live_migration_keeps_the_guest_running() {
    let Some(lab) = lab() else { return };
    let p = &lab.provisioner;
    let handle = p.create(&spec(&lab.image, "vm-move", true)).unwrap();
    assert!(lab.run.path().join("vms/vm-move/disk.qcow2").is_file());
    assert!(wait_until(Duration::from_secs(10), || last_tick(
        &handle.console
    )
    .is_some()));
    let mut source = handle.pid;
    for round in 1..=2 {
        let before = last_tick(&handle.console).unwrap();
        let started = Instant::now();
        let moved = p
            .migrate_measured("vm-move", &MigrationTarget::SameHost)
            .unwrap();
        eprintln!(
            "migration {round}: {:.2} s wall, QEMU total {:?} ms, downtime {:?} ms",
            started.elapsed().as_secs_f64(),
            moved.total_ms,
            moved.downtime_ms
        );
        assert_ne!(moved.handle.pid, source);
        assert!(!process_alive(source), "the source still runs");
        assert!(process_alive(moved.handle.pid));
        assert!(running(p, "vm-move"));
        // The same guest goes on: no second boot, and its uptime keeps growing.
        assert!(
            wait_until(Duration::from_secs(10), || last_tick(&handle.console)
                .is_some_and(|t| t >= before + 2.0)),
            "no tick after the migration: {}",
            console(&handle.console)
        );
        assert_eq!(boots(&handle.console), 1, "{}", console(&handle.console));
        source = moved.handle.pid;
    }
    p.destroy("vm-move").unwrap();
    assert!(!process_alive(source));
    assert!(!lab.run.path().join("vms/vm-move").exists());
}

#[test]
fn a_new_provisioner_adopts_the_running_guests() {
    let Some(lab) = lab() else { return };
    let handle = lab
        .provisioner
        .create(&spec(&lab.image, "vm-kept", false))
        .unwrap();
    drop(lab.provisioner);
    let again = provisioner(lab.run.path(), Accel::Tcg);
    assert!(again.adopt("vm-kept").unwrap());
    assert!(!again.adopt("vm-unknown").unwrap());
    assert!(running(&again, "vm-kept"));

    // A restart between a migration's end and the switch to its destination: the
    // destination alone runs, and adoption makes it the guest.
    let moved = again
        .migrate_measured("vm-kept", &MigrationTarget::SameHost)
        .unwrap();
    let dir = lab.run.path().join("vms/vm-kept");
    let switched = std::fs::read_to_string(dir.join("slot")).unwrap();
    std::fs::write(dir.join("slot"), if switched == "a" { "b" } else { "a" }).unwrap();
    drop(again);
    let again = provisioner(lab.run.path(), Accel::Tcg);
    assert!(again.adopt("vm-kept").unwrap());
    assert_eq!(std::fs::read_to_string(dir.join("slot")).unwrap(), switched);
    assert!(running(&again, "vm-kept"));
    assert!(process_alive(moved.handle.pid));
    assert!(!process_alive(handle.pid));

    again.power("vm-kept", Power::Off).unwrap();
    assert!(!again.adopt("vm-kept").unwrap());
    again.destroy("vm-kept").unwrap();
    assert!(!process_alive(moved.handle.pid));
}

/// The probe's guest, run as the guest account (which reopens its memory file through
/// `/proc/self/fd`), says OK under TCG.
#[test]
fn the_kvm_probes_guest_runs_as_the_guest_account() {
    let Some(_lab) = lab() else { return };
    let found = drover_cloud::provision::kvm_probe::run_probe(
        "qemu-system-x86_64",
        "tcg",
        guest_account().as_ref(),
        Duration::from_secs(20),
    );
    assert!(found.trusts_kvm(), "{found:?}");
}

#[test]
fn auto_acceleration_is_decided_quickly_and_boots_a_guest_on_what_works() {
    let Some(lab) = lab() else { return };
    let p = provisioner(&lab.run.path().join("auto"), Accel::Auto);
    assert_eq!(p.accel(), None);
    // Where KVM hangs (nested virtualization), the probe costs its deadline, no more.
    let started = Instant::now();
    let decision = p.decide_accel();
    let probed = started.elapsed();
    eprintln!(
        "Accel::Auto chose {:?} in {:.2} s: {}",
        decision.accel,
        probed.as_secs_f64(),
        decision.reason()
    );
    assert!(
        probed < KVM_PROBE_DEADLINE + Duration::from_secs(3),
        "{probed:?}"
    );
    assert!(matches!(decision.accel, Accel::Kvm | Accel::Tcg));
    assert!(decision.probe.is_some());
    assert_eq!(p.accel(), Some(decision.accel));
    assert_eq!(p.decide_accel(), decision, "decided once");
    let started = Instant::now();
    p.create(&spec(&lab.image, "vm-auto", false)).unwrap();
    eprintln!("first guest up in {:.2} s", started.elapsed().as_secs_f64());
    assert!(running(&p, "vm-auto"));
    p.destroy("vm-auto").unwrap();
}

/// A probe run beforehand (the service runs it while its store opens) is `Auto`'s
/// verdict; a configured accelerator ignores it.
#[test]
fn a_probe_run_beforehand_is_the_auto_verdict() {
    let run = tempfile::tempdir().unwrap();
    let silent = KvmProbe::Silent(KVM_PROBE_DEADLINE);
    let p = provisioner(&run.path().join("a"), Accel::Auto).with_kvm_probe(silent.clone());
    assert_eq!(p.accel(), Some(Accel::Tcg));
    assert_eq!(p.decide_accel().probe, Some(silent));
    let answered = KvmProbe::Answered(Duration::from_millis(300));
    let p = provisioner(&run.path().join("b"), Accel::Auto).with_kvm_probe(answered.clone());
    assert_eq!(p.accel(), Some(Accel::Kvm));
    assert!(p.decide_accel().reason().contains("0.30 s"));
    let fixed = provisioner(&run.path().join("c"), Accel::Tcg).with_kvm_probe(answered);
    assert_eq!(fixed.decide_accel().accel, Accel::Tcg);
    assert_eq!(fixed.decide_accel().reason(), "as configured");
}

#[test]
fn bad_ids_are_refused_before_they_name_anything() {
    let run = tempfile::tempdir().unwrap();
    let p = provisioner(run.path(), Accel::Tcg);
    let image = run.path();
    for bad in ["../escape", "a/b", ".hidden", "", "x y", "vm,accel=kvm"] {
        assert!(
            matches!(
                p.create(&spec(image, bad, false)),
                Err(ProvisionError::InvalidId { .. })
            ),
            "{bad:?}"
        );
        assert!(matches!(
            p.status(bad),
            Err(ProvisionError::InvalidId { .. })
        ));
        assert!(matches!(
            p.power(bad, Power::On),
            Err(ProvisionError::InvalidId { .. })
        ));
        assert!(matches!(
            p.destroy(bad),
            Err(ProvisionError::InvalidId { .. })
        ));
        assert!(matches!(
            p.adopt(bad),
            Err(ProvisionError::InvalidId { .. })
        ));
    }
    assert_eq!(
        std::fs::read_dir(run.path().join("vms")).unwrap().count(),
        0
    );
}

#[test]
fn a_missing_kernel_is_a_clear_error() {
    let run = tempfile::tempdir().unwrap();
    let p = provisioner(run.path(), Accel::Tcg);
    let error = p
        .create(&spec(&run.path().join("nowhere"), "vm-nokernel", false))
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.starts_with("the kernel ") && message.contains("nowhere/vmlinuz"),
        "{message}"
    );
    assert_eq!(p.status("vm-nokernel").unwrap(), VmStatus::Gone);

    let mut none = spec(&run.path().join("nowhere"), "vm-none", false);
    none.processors = 0;
    assert_eq!(
        p.create(&none).unwrap_err().to_string(),
        "the VM cannot have 0 processors: from 1 to 256 are possible"
    );
}

fn script(text: &str) -> GuestCommand {
    GuestCommand {
        script: text.into(),
        ..GuestCommand::default()
    }
}

const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

fn run(p: &QemuProvisioner, id: &str, command: &GuestCommand) -> GuestOutput {
    p.run_in_guest(id, command, COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{:?}: {e}", command.script))
}

#[test]
fn a_command_runs_in_the_guest_with_its_outputs_input_and_exit_code() {
    let Some(lab) = lab() else { return };
    let p = &lab.provisioner;
    let handle = p.create(&spec(&lab.image, "vm-agent", false)).unwrap();
    assert!(
        console(&handle.console).contains("GUEST-AGENT /dev/vport"),
        "{}",
        console(&handle.console)
    );

    let started = Instant::now();
    let out = run(p, "vm-agent", &script("echo hello; echo err >&2; exit 3"));
    eprintln!("first command: {:.3} s", started.elapsed().as_secs_f64());
    assert_eq!(out.exit_code, 3);
    assert_eq!(out.stdout, b"hello\n");
    assert_eq!(out.stderr, b"err\n");
    assert!(!out.stdout_truncated && !out.stderr_truncated);

    // Round trips of a trivial command.
    let mut times = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        assert_eq!(run(p, "vm-agent", &script("true")), GuestOutput::default());
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    eprintln!(
        "round trip of `true`: median {:.1} ms, min {:.1} ms, max {:.1} ms",
        times[5], times[0], times[9]
    );

    // Standard input and environment, with bytes of every value.
    let all_bytes: Vec<u8> = (0..=255u8).cycle().take(256 * 1024 + 7).collect();
    let command = GuestCommand {
        script: "cat; printf '%s|' \"$GREETING\" \"$QUOTED\" >&2".into(),
        env: vec![
            ("GREETING".into(), "hi there".into()),
            ("QUOTED".into(), "it's $(not run) `either`".into()),
        ],
        stdin: all_bytes.clone(),
    };
    let started = Instant::now();
    let out = run(p, "vm-agent", &command);
    eprintln!(
        "cat of {} KiB of input: {:.3} s",
        all_bytes.len() / 1024,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.stdout, all_bytes);
    assert_eq!(out.stderr, b"hi there|it's $(not run) `either`|");

    // Output of arbitrary bytes, framing look-alikes included, made in the guest.
    let octal: String = (0..=255u8).map(|b| format!("\\{b:03o}")).collect();
    let out = run(
        p,
        "vm-agent",
        &script(&format!(
            "printf '{octal}'; printf 'DROVER-END x\\nDROVER-DONE 0 0 0 0 0 0 0\\n'; printf '\\377\\000' >&2"
        )),
    );
    let mut expected: Vec<u8> = (0..=255u8).collect();
    expected.extend_from_slice(b"DROVER-END x\nDROVER-DONE 0 0 0 0 0 0 0\n");
    assert_eq!(out.stdout, expected);
    assert_eq!(out.stderr, b"\xff\0");

    // Output past the limit is cut, and said to be.
    let out = run(
        p,
        "vm-agent",
        &script("head -c 3000000 /dev/zero; echo small >&2"),
    );
    assert_eq!(out.stdout.len(), OUTPUT_LIMIT);
    assert!(out.stdout_truncated);
    assert_eq!(out.stderr, b"small\n");
    assert!(!out.stderr_truncated);

    // A command killed by a signal: 128 + the signal.
    assert_eq!(run(p, "vm-agent", &script("kill -TERM $$")).exit_code, 143);

    // The guest still ticks on its console.
    let before = last_tick(&handle.console).unwrap_or(0.0);
    assert!(wait_until(Duration::from_secs(10), || last_tick(
        &handle.console
    )
    .is_some_and(|t| t > before)));
    p.destroy("vm-agent").unwrap();
}

#[test]
fn a_command_past_its_timeout_is_killed_and_the_next_one_runs() {
    let Some(lab) = lab() else { return };
    let p = &lab.provisioner;
    p.create(&spec(&lab.image, "vm-slow", false)).unwrap();

    let started = Instant::now();
    let error = p
        .run_in_guest(
            "vm-slow",
            &script("sleep 100 & sleep 100; echo never"),
            Duration::from_secs(2),
        )
        .unwrap_err();
    let took = started.elapsed();
    eprintln!("timeout of 2 s answered after {:.2} s", took.as_secs_f64());
    assert!(
        matches!(&error, ProvisionError::GuestTimeout { secs: 2, detail, .. } if detail.contains("killed")),
        "{error}"
    );
    // Not the commands' 100 s: the timeout ended it (the bound is far from what a busy
    // machine takes, so that only a timeout not kept can fail it).
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(60),
        "{took:?}"
    );

    // Killed with all it started: nothing sleeps on in the guest.
    let out = run(
        p,
        "vm-slow",
        &script("ps -o args | grep '^sleep 100' || true"),
    );
    assert_eq!(out.stdout, b"", "{}", String::from_utf8_lossy(&out.stdout));

    // One command at a time: a second one meanwhile is refused, not queued.
    std::thread::scope(|scope| {
        let first = scope.spawn(|| run(p, "vm-slow", &script("sleep 3; echo first")));
        std::thread::sleep(Duration::from_millis(500));
        let second = p.run_in_guest("vm-slow", &script("true"), COMMAND_TIMEOUT);
        assert!(
            matches!(second, Err(ProvisionError::GuestBusy(_))),
            "{second:?}"
        );
        assert_eq!(first.join().unwrap().stdout, b"first\n");
    });

    // Refusals before anything is sent.
    for bad in [
        script("echo \0"),
        GuestCommand {
            env: vec![("NOT A NAME".into(), "x".into())],
            ..script("true")
        },
    ] {
        assert!(matches!(
            p.run_in_guest("vm-slow", &bad, COMMAND_TIMEOUT),
            Err(ProvisionError::InvalidGuestCommand(_))
        ));
    }
    assert!(matches!(
        p.run_in_guest("vm-slow", &script("true"), Duration::ZERO),
        Err(ProvisionError::InvalidGuestCommand(_))
    ));
    assert!(matches!(
        p.run_in_guest("vm-none", &script("true"), COMMAND_TIMEOUT),
        Err(ProvisionError::NotFound(_))
    ));
    assert!(matches!(
        p.run_in_guest("../x", &script("true"), COMMAND_TIMEOUT),
        Err(ProvisionError::InvalidId { .. })
    ));
    // A dead agent: the call ends at the timeout and the grace, with a clear error.
    let kill_agent = "for d in /proc/[0-9]*; do [ \"$(cat $d/comm)\" = drover-agent ] && kill -KILL ${d#/proc/}; done; echo killed";
    // The killing command gets time to walk /proc in a slow (emulated, loaded) guest: with
    // 1 s the guest's own timeout could end it first ("the guest killed it").
    for (command, timeout) in [(kill_agent, 4), ("true", 1)] {
        let started = Instant::now();
        let error = p
            .run_in_guest("vm-slow", &script(command), Duration::from_secs(timeout))
            .unwrap_err();
        let took = started.elapsed();
        eprintln!(
            "with a dead agent: {error} after {:.2} s",
            took.as_secs_f64()
        );
        assert!(
            matches!(&error, ProvisionError::GuestTimeout { detail, .. } if detail.contains("did not answer")),
            "{error}"
        );
        assert!(took < Duration::from_secs(timeout + 5), "{took:?}");
    }

    p.power("vm-slow", Power::Off).unwrap();
    assert!(matches!(
        p.run_in_guest("vm-slow", &script("true"), COMMAND_TIMEOUT),
        Err(ProvisionError::NotRunning(_))
    ));
    // Powered on again: a new boot, a new agent.
    p.power("vm-slow", Power::On).unwrap();
    assert_eq!(run(p, "vm-slow", &script("echo back")).stdout, b"back\n");
    p.destroy("vm-slow").unwrap();
}

#[test]
fn a_command_runs_in_the_guest_after_a_live_migration() {
    let Some(lab) = lab() else { return };
    let p = &lab.provisioner;
    let handle = p.create(&spec(&lab.image, "vm-agent-move", true)).unwrap();
    run(p, "vm-agent-move", &script("echo before > /tmp/mark"));
    for round in 1..=2 {
        let moved = p
            .migrate_measured("vm-agent-move", &MigrationTarget::SameHost)
            .unwrap();
        assert_ne!(moved.handle.pid, handle.pid);
        let started = Instant::now();
        let out = run(
            p,
            "vm-agent-move",
            &script(&format!("cat /tmp/mark; echo after {round}")),
        );
        eprintln!(
            "first command after migration {round}: {:.3} s",
            started.elapsed().as_secs_f64()
        );
        // The same guest: what it kept in memory is there.
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("before\nafter {round}\n")
        );
    }
    assert_eq!(boots(&handle.console), 1, "{}", console(&handle.console));
    p.destroy("vm-agent-move").unwrap();
}

#[test]
fn a_guest_flooding_its_console_keeps_it_within_the_limit() {
    let Some(lab) = lab() else { return };
    let limit = 64 << 10;
    let p = provisioner(lab.run.path(), Accel::Tcg).with_console_limit(limit);
    let handle = p.create(&spec(&lab.image, "vm-flood", false)).unwrap();
    // More than 30 times the limit, written as fast as the guest can.
    let flood = "head -c 2000000 /dev/zero | tr '\\0' x > /dev/ttyS0; echo flooded";
    let started = Instant::now();
    let out = p
        .run_in_guest("vm-flood", &script(flood), Duration::from_secs(600))
        .unwrap();
    let took = started.elapsed().as_secs_f64();
    eprintln!(
        "2 MB through the console in {took:.1} s: {:.0} KB/s",
        2000.0 / took
    );
    assert_eq!(out.stdout, b"flooded\n");
    let len = std::fs::metadata(&handle.console).unwrap().len();
    assert!(len <= limit, "{len}");
    assert!(console(&handle.console).contains("xxxxxxxx"));
    // The guest and the reading of its console go on.
    let before = last_tick(&handle.console).unwrap_or(0.0);
    assert!(wait_until(Duration::from_secs(30), || last_tick(
        &handle.console
    )
    .is_some_and(|t| t > before)));
    assert_eq!(
        run(&p, "vm-flood", &script("echo still")).stdout,
        b"still\n"
    );
    p.destroy("vm-flood").unwrap();
}
