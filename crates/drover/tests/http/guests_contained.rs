//! The findings of the security review #53 on guests, kept as regression tests against
//! a real server booting real guests (as `vms.rs` does): a guest filling the data disk
//! through its console (8), and guests running as root (12).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use drover_testkit::{Auth, Reply, TestServer, scratch_dir, script};
use serde_json::{Value, json};

use crate::vms::qemu_pids;

fn send(server: &TestServer, method: &str, path: &str, body: &Value) -> Reply {
    let bytes = body.to_string().into_bytes();
    server.call(method, path, Auth::User, Some(("application/json", bytes)))
}

/// Waits until `check` holds; the bound is only against a test that would hang (a
/// loaded machine may take long), not a measure.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(600);
    while !check() {
        assert!(Instant::now() < end, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Submits a job whose command runs in a VM of its own (`CREATEVM`); its id.
fn submit_in_vm(server: &TestServer, work: &Path, name: &str, body: &str) -> String {
    let command = script(work, &format!("{name}.sh"), body);
    let fields = json!({"name": name, "commandFile": command,
                        "initialWorkingDirectory": work, "vmUsagePolicy": "CREATEVM"});
    let reply = send(server, "POST", "/rest/jobs", &fields);
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.json()["id"].as_str().unwrap().to_string()
}

fn job_state(server: &TestServer, id: &str) -> Value {
    server.get(&format!("/rest/jobs/{id}")).json()["state"].clone()
}

/// The largest number alone on a line of the console (what `seq` printed so far).
fn counted(console: &Path) -> u64 {
    let text = String::from_utf8_lossy(&std::fs::read(console).unwrap_or_default()).into_owned();
    text.lines()
        .filter_map(|line| line.trim().parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

const LIMIT_KIB: u64 = 64;

/// (8) A job in a VM writing the guest's serial console without end grew
/// `<data>/vms/job-<id>/console.log` at the guest's pace for the job's whole wall time.
/// Now the console keeps its newest part: while the guest writes more than nine times
/// the limit (`seq` up to 100000: 588,895 bytes), the file is never larger than the
/// limit and shows the newest lines; the job runs on and is cancelled as any other (its
/// VM destroyed); and a job that floods the console, then prints, ends normally.
#[test]
fn a_guest_writing_its_console_without_end_keeps_it_within_the_limit() {
    let Some((server, _guests)) = crate::vms::start(TestServer::builder(), |c| {
        c.cloud.console_limit_kib = LIMIT_KIB;
    }) else {
        return;
    };
    let work = scratch_dir();
    let id = submit_in_vm(
        &server,
        work.path(),
        "flood",
        "busybox seq 1 2000000000 > /dev/ttyS0",
    );
    let dir = server.data_dir().join(format!("vms/job-{id}"));
    let console = dir.join("console.log");
    server.wait_for(&format!("/rest/jobs/{id}"), "the job runs", |j| {
        j["state"] == "RUNNING"
    });
    let started = Instant::now();
    eventually("the guest has printed 100000 lines", || {
        for file in [&console, &dir.join("console.log.new")] {
            if let Ok(meta) = std::fs::metadata(file) {
                assert!(
                    meta.len() <= LIMIT_KIB << 10,
                    "{file:?}: {} bytes",
                    meta.len()
                );
            }
        }
        counted(&console) >= 100_000
    });
    eprintln!(
        "100000 lines of seq through a {LIMIT_KIB} KiB console in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(job_state(&server, &id), "RUNNING");
    let cancel = server.send("DELETE", &format!("/rest/jobs/{id}"), Auth::User);
    assert!(cancel.status < 300, "{}", cancel.body);
    eventually("the flooding job's VM is gone", || {
        server.get(&format!("/rest/vms/job-{id}")).status == 404
    });
    assert!(qemu_pids(server.data_dir(), Some(&format!("job-{id}"))).is_empty());
    assert_ne!(job_state(&server, &id), "RUNNING");

    let id = submit_in_vm(
        &server,
        work.path(),
        "then",
        "busybox seq 1 100000 > /dev/ttyS0\necho survived",
    );
    eventually("the second job ends", || {
        job_state(&server, &id) == "COMPLETED"
    });
    let job = server.get(&format!("/rest/jobs/{id}")).json();
    assert_eq!(job["completionCode"], 0, "{job}");
    let number = id.trim_start_matches("Drover.");
    let out = std::fs::read_to_string(work.path().join(format!("then.o{number}"))).unwrap();
    assert_eq!(out.trim(), "survived");
}

/// The fields of `/proc/<pid>/status` named `name`, split on whitespace.
fn status(pid: i32, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {text}"));
    line.split_whitespace().map(String::from).collect()
}

/// The QEMU process of VM `id`, checked: it runs as the guest account (every uid and
/// gid of it; as root the account `drover-guest`), with no capability, under QEMU's
/// seccomp filter with `no_new_privs`; its disks are the account's (mode 0600), all else
/// of the VM the service's, in the service's directory of mode 0700.
fn confined(server: &TestServer, id: &str) -> i32 {
    let pids = qemu_pids(server.data_dir(), Some(id));
    assert_eq!(pids.len(), 1, "{pids:?}");
    let pid = pids[0];
    let guest = drover_testkit::uid_of("drover-guest");
    assert_ne!(guest, 0);
    assert_eq!(status(pid, "Uid"), vec![guest.to_string(); 4]);
    assert!(status(pid, "Gid").iter().all(|gid| gid != "0"));
    assert!(!status(pid, "Groups").contains(&"0".to_string()));
    assert_eq!(status(pid, "CapEff"), ["0000000000000000"]);
    assert_eq!(status(pid, "Seccomp"), ["2"]);
    assert_eq!(status(pid, "NoNewPrivs"), ["1"]);
    let run = server.data_dir().join("vms");
    let vm = run.join(id);
    for dir in [&run, &vm] {
        let meta = std::fs::metadata(dir).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700), "{dir:?}");
    }
    for entry in std::fs::read_dir(&vm).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".qcow2") {
            assert_eq!((meta.uid(), meta.mode() & 0o777), (guest, 0o600), "{name}");
        } else {
            assert_eq!(meta.uid(), 0, "{name}");
        }
    }
    let console = std::fs::metadata(vm.join("console.log")).unwrap();
    assert_eq!(console.permissions().mode() & 0o777, 0o600);
    pid
}

/// (12) Every guest's QEMU ran as the service's user, root, under a seccomp filter that
/// let it change its ids: a guest escaping its emulator was root on the host. Now it
/// runs as the guest account, without privileges and under the whole filter, after its
/// creation, a live migration and a power cycle alike; the VM works throughout.
#[test]
fn a_guest_runs_as_the_guest_account_under_the_whole_seccomp_filter() {
    if !crate::security::system_accounts() {
        return;
    }
    let Some((server, _guests)) = crate::vms::start(TestServer::builder(), |_| {}) else {
        return;
    };
    let body = json!({"id": "boxed", "node": {"id": "node01"}, "storage": "data:1"});
    assert_eq!(send(&server, "POST", "/rest/vms", &body).status, 202);
    let running = |node: &'static str| {
        move |vm: &Value| vm["substate"] == "running" && vm["node"]["id"] == node
    };
    server.wait_for("/rest/vms/boxed", "the VM runs", running("node01"));
    let first = confined(&server, "boxed");

    let moved = send(
        &server,
        "PUT",
        "/rest/vms/boxed",
        &json!({"node": {"id": "node02"}}),
    );
    assert_eq!(moved.status, 202, "{}", moved.body);
    server.wait_for("/rest/vms/boxed", "the migration", running("node02"));
    let second = confined(&server, "boxed");
    assert_ne!(first, second, "a migration starts a new process");

    for power in ["OFF", "ON"] {
        let reply = send(
            &server,
            "PUT",
            "/rest/vms/boxed",
            &json!({"powerState": power}),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        let substate = if power == "ON" { "running" } else { "off" };
        server.wait_for("/rest/vms/boxed", "the power change", |vm| {
            vm["substate"] == substate
        });
    }
    assert_ne!(confined(&server, "boxed"), second);

    let destroy = server.send("DELETE", "/rest/vms/boxed", Auth::User);
    assert_eq!(destroy.status, 202, "{}", destroy.body);
    eventually("the VM is gone", || {
        server.get("/rest/vms/boxed").status == 404
    });
    assert!(qemu_pids(server.data_dir(), Some("boxed")).is_empty());
}
