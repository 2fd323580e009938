//! Guest boot figures of the QEMU provisioner (run by `scripts/bench-guests`):
//!  1. create-to-ready latency of GUESTS guests one after the other (p50, p90, max);
//!  2. how many guests boot at once: 1, 2, 4... up to MAX_AT_ONCE started together, each
//!     round timed, until a round has a guest that does not boot within the deadline.
//!
//! Env: DROVER_GUEST_IMAGE_DIR (required), GUESTS (10), MEM (128, MiB), MAX_AT_ONCE (16),
//! ACCEL (tcg | kvm | auto; tcg), DEADLINE (60, seconds per boot). Prints; asserts nothing.
//! As root, guests run as `drover-guest` (scripts/services/guest-image.sh makes it).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use drover_cloud::provision::{
    Accel, BootMaterial, GuestAccount, Provisioner, QemuProvisioner, VmSpec,
};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn spec(image: &Path, id: String, memory_mib: u64) -> VmSpec {
    VmSpec {
        id,
        processors: 1,
        memory_mib,
        boot: BootMaterial {
            kernel: image.join("vmlinuz"),
            initramfs: image.join("initrd.gz"),
            disk: None,
        },
        extra_disks: Vec::new(),
        ready_line: Some("GUEST-READY".into()),
        node: None,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let image =
        PathBuf::from(std::env::var("DROVER_GUEST_IMAGE_DIR").expect(
            "DROVER_GUEST_IMAGE_DIR names the guest image (scripts/services/guest-image.sh)",
        ));
    let guests: usize = env("GUESTS", 10);
    let memory: u64 = env("MEM", 128);
    let max_at_once: usize = env("MAX_AT_ONCE", 16);
    let deadline = Duration::from_secs(env("DEADLINE", 60));
    let accel = match std::env::var("ACCEL").as_deref() {
        Ok("kvm") => Accel::Kvm,
        Ok("auto") => Accel::Auto,
        _ => Accel::Tcg,
    };
    let run = tempfile::tempdir().unwrap();
    let mut provisioner = QemuProvisioner::new(run.path().join("vms"), accel, deadline)
        .unwrap()
        .with_shutdown_grace(Duration::from_millis(200));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let user = drover_sched::sysuser::SystemUser::lookup("drover-guest")
            .expect("as root, guests run as drover-guest: scripts/services/guest-image.sh");
        let (name, uid, gid, groups) = (user.name, user.uid, user.gid, user.groups);
        provisioner = provisioner.with_guest_account(GuestAccount {
            name,
            uid,
            gid,
            groups,
        });
    }

    let mut latencies = Vec::new();
    for n in 0..guests {
        let started = Instant::now();
        provisioner
            .create(&spec(&image, format!("seq-{n}"), memory))
            .unwrap();
        latencies.push(started.elapsed().as_secs_f64());
        provisioner.destroy(&format!("seq-{n}")).unwrap();
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "create to ready, {guests} guests of {memory} MiB one at a time ({:?}): p50 {:.2} s, p90 {:.2} s, max {:.2} s",
        provisioner.accel().unwrap_or(accel),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.9),
        latencies[latencies.len() - 1]
    );

    let mut at_once = 1;
    let mut booted = 0;
    while at_once <= max_at_once {
        let started = Instant::now();
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..at_once)
                .map(|n| {
                    let provisioner = &provisioner;
                    let image = &image;
                    scope.spawn(move || {
                        let id = format!("par-{at_once}-{n}");
                        let result = provisioner.create(&spec(image, id.clone(), memory));
                        (id, result)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let wall = started.elapsed().as_secs_f64();
        let failed: Vec<String> = results
            .iter()
            .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("{id}: {e}")))
            .collect();
        for (id, result) in &results {
            if result.is_ok() {
                provisioner.destroy(id).unwrap();
            }
        }
        if !failed.is_empty() {
            println!(
                "{at_once} guests at once: {} did not boot within {} s ({})",
                failed.len(),
                deadline.as_secs(),
                failed[0]
            );
            break;
        }
        println!("{at_once} guests at once: all ready in {wall:.2} s");
        booted = at_once;
        at_once *= 2;
    }
    println!(
        "at most {booted} guests of {memory} MiB booted together within {} s (tried up to {max_at_once})",
        deadline.as_secs()
    );
}
