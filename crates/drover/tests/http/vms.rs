//! VMs (spec 2.9, 4.7) and pending actions (2.13) with real QEMU guests: the default
//! guest image of `scripts/services/guest-image.sh`, found through
//! `DROVER_GUEST_IMAGE_DIR` and copied into the server's images directory, where the
//! first start registers it. Without it the tests are skipped with a message, unless
//! `DROVER_REQUIRE_QEMU=1` (as in `scripts/test`). Guests are emulated (TCG), small
//! (128 MiB) and few; a guard kills any a failing test leaves behind.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use drover_sched::node::NodeConfig;
use drover_testkit::{Auth, PASSWORD, Reply, TestServer, send, wait_until};
use serde_json::{Value, json};

/// The guest image's directory, or `None` (the test is skipped).
fn guest_image() -> Option<PathBuf> {
    drover_testkit::outside_service("DROVER_GUEST_IMAGE_DIR", "DROVER_REQUIRE_QEMU")
        .map(PathBuf::from)
}

/// Kills the guests of a server's data directory when a test ends, however it ends.
pub(crate) struct Guests(PathBuf);

impl Drop for Guests {
    fn drop(&mut self) {
        for pid in qemu_pids(&self.0, None) {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The QEMU processes of VMs under `data_dir` (named `id` if given): each runs in its
/// VM's directory.
pub(crate) fn qemu_pids(data_dir: &Path, id: Option<&str>) -> Vec<i32> {
    let run_dir = data_dir.join("vms");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let named = |name: &str| args.windows(2).any(|w| w[0] == "-name" && w[1] == name);
        let ours =
            std::fs::read_link(entry.path().join("cwd")).is_ok_and(|d| d.starts_with(&run_dir));
        if args.first().is_some_and(|a| a.contains("qemu-system")) && ours && id.is_none_or(named) {
            pids.push(pid);
        }
    }
    pids
}

/// A server with two nodes of 4 processors and 2 GiB, QEMU under TCG, and the guest
/// image in its images directory.
fn server() -> Option<(TestServer, Guests)> {
    start(TestServer::builder().user("bob", false), |_| {})
}

/// `builder`, made a server of guests (see [`server`]), with `more` configuration.
pub(crate) fn start(
    builder: drover_testkit::Builder,
    more: impl FnOnce(&mut drover::config::Config),
) -> Option<(TestServer, Guests)> {
    let image = guest_image()?;
    let server = builder
        .config(|c| {
            let guest = c.data_dir.join("images").join("guest");
            std::fs::create_dir_all(&guest).unwrap();
            for file in ["vmlinuz", "initrd.gz", "disk.qcow2"] {
                if image.join(file).exists() {
                    std::fs::copy(image.join(file), guest.join(file)).unwrap();
                }
            }
            c.nodes = ["node01", "node02"]
                .map(|id| NodeConfig {
                    memory: Some(2048),
                    ..NodeConfig::new(id, 4)
                })
                .to_vec();
            c.cloud.provisioner = Some(drover::config::ProvisionerKind::Qemu);
            c.cloud.accel = drover::config::AccelChoice::Tcg;
            c.cloud.shutdown_grace_seconds = 1;
            more(c);
        })
        .start();
    let guard = Guests(server.data_dir().to_path_buf());
    Some((server, guard))
}

/// A server without a provisioner (no QEMU needed: every VM setup fails), with the image
/// `guest` registered, and the local user `bob`.
pub(crate) fn without_provisioner() -> TestServer {
    let server = TestServer::builder()
        .user("bob", false)
        .config(|c| c.cloud.provisioner = Some(drover::config::ProvisionerKind::None))
        .start();
    let image = json!({"name": "guest", "hypervisor": false, "osType": "linux",
                       "supportsVirtualMachine": true});
    assert_eq!(
        send(&server, "POST", "/rest/images", Auth::Admin, &image).status,
        201
    );
    server
}

pub(crate) fn job_id(reply: &Reply) -> String {
    assert_eq!(reply.status, 202, "{}", reply.body);
    reply.json()["jobId"].as_str().unwrap().to_string()
}

pub(crate) fn wait_substate(server: &TestServer, id: &str, substate: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let reply = server.get(&format!("/rest/vms/{id}"));
        let vm = reply.json();
        if vm["substate"] == substate {
            return vm;
        }
        assert!(
            Instant::now() < deadline,
            "VM {id} never became {substate}: {} {}",
            reply.status,
            reply.body
        );
        assert_ne!(vm["substate"], "failed", "VM {id} failed: {vm}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The guest's uptime in its last `GUEST-TICK` line on the console.
pub(crate) fn last_tick(server: &TestServer, id: &str) -> f64 {
    let console = server.data_dir().join("vms").join(id).join("console.log");
    let text = std::fs::read_to_string(console).unwrap_or_default();
    text.lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("GUEST-TICK "))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0.0)
}

pub(crate) fn available_processors(server: &TestServer, node: &str) -> i64 {
    server.get(&format!("/rest/nodes/{node}")).json()["availableProcessors"]
        .as_i64()
        .unwrap()
}

/// `accel = "auto"` is decided once, at start, by a probe of at most a few seconds; the
/// health detail says which, and why; the first guest boots on it at once.
#[test]
fn the_acceleration_is_decided_at_start_and_shown_in_the_health_detail() {
    let started = Instant::now();
    let Some((server, _guests)) = start(TestServer::builder(), |c| {
        c.cloud.accel = drover::config::AccelChoice::Auto;
    }) else {
        return;
    };
    eprintln!(
        "started with the probe in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let vms = server.get("/rest/diag/health/detail").json()["vms"].clone();
    assert_eq!(vms["connected"], "UP", "{vms}");
    assert!(vms["message"].is_null(), "{vms}");
    assert_eq!(vms["provisioner"], "qemu");
    assert_eq!(vms["defaultImage"], "guest");
    assert_eq!(vms["defaultImageRegistered"], true);
    let accel = vms["accel"].as_str().unwrap().to_string();
    let reason = vms["accelReason"].as_str().unwrap();
    if Path::new("/dev/kvm").exists() {
        assert!(reason.contains("probe"), "{vms}");
        assert_eq!(accel == "kvm", reason.contains("answered"), "{vms}");
    } else {
        assert_eq!(accel, "tcg", "{vms}");
        assert_eq!(reason, "no /dev/kvm that this service may open");
    }
    assert!(["kvm", "tcg"].contains(&accel.as_str()), "{vms}");

    // The first guest runs on what was decided: no probe of its own.
    let body = json!({"id": "first", "totalProcessors": 1, "totalMemory": 128});
    let asked = Instant::now();
    job_id(&send(&server, "POST", "/rest/vms", Auth::User, &body));
    wait_substate(&server, "first", "running");
    eprintln!(
        "the first guest ran on {accel} {:.2} s after it was asked for",
        asked.elapsed().as_secs_f64()
    );
    let used = server.data_dir().join("vms").join("first").join("accel");
    assert_eq!(std::fs::read_to_string(used).unwrap(), accel);
    job_id(&server.send("DELETE", "/rest/vms/first", Auth::User));
    wait_until("the VM is gone", || {
        server.get("/rest/vms/first").status == 404
    });
}

#[test]
fn a_vm_is_a_real_guest_created_powered_migrated_and_destroyed_through_system_jobs() {
    let Some((server, _guests)) = server() else {
        return;
    };
    // The default guest image was registered on the first start.
    let image = server.get("/rest/images/guest");
    assert_eq!(image.status, 200, "{}", image.body);
    assert_eq!(image.json()["boot"]["readyLine"], "GUEST-READY");

    let body = json!({"id": "web", "totalProcessors": 1, "totalMemory": 128,
                      "node": {"id": "node01"}, "variables": {"tier": "front"},
                      "storage": "data:1,scratch:2@/scratch"});
    let setup = job_id(&send(&server, "POST", "/rest/vms", Auth::User, &body));
    // Readable at once, as being made; its setup job is a pending action.
    let vm = server.get_as(Auth::User, "/rest/vms/web").json();
    assert_eq!(vm["node"]["id"], "node01");
    assert_eq!(vm["os"], "guest");
    let actions = server.get_as(Auth::User, "/rest/pending-actions").json();
    if vm["substate"] == "creating" {
        let action = &actions["results"][0];
        assert_eq!(action["id"], setup.as_str(), "{actions}");
        assert_eq!(action["pendingActionType"], "VMCREATE");
        assert_eq!(action["vmId"], "web");
        assert_eq!(action["hosts"], json!(["node01"]));
    }
    let vm = wait_substate(&server, "web", "running");
    assert_eq!(vm["state"], "BUSY");
    assert_eq!(vm["powerState"], "ON");
    assert!(
        vm["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("CREATION_COMPLETED"))
    );
    let job = server
        .get(&format!("/rest/jobs/{setup}?api-version=2"))
        .json();
    assert_eq!(job["states"]["state"], "Completed", "{job}");
    assert_eq!(job["completionCode"], 0);
    assert!(
        job["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("SYSTEMJOB"))
    );
    // A real guest, named after the VM, on the host's resources.
    let pids = qemu_pids(server.data_dir(), Some("web"));
    assert_eq!(pids.len(), 1, "one QEMU process named web");
    // Its storage: two empty qcow2 disks of 1 and 2 GB, attached to the guest (QEMU
    // holds them open).
    let open: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{}/fd", pids[0]))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .collect();
    for (n, gb) in [(0, 1u64), (1, 2)] {
        let disk = server.data_dir().join(format!("vms/web/extra-{n}.qcow2"));
        assert!(open.contains(&disk), "{open:?}");
        let info = std::process::Command::new("qemu-img")
            .args(["info", "-U", "--output=json"])
            .arg(&disk)
            .output()
            .unwrap();
        let info: Value = serde_json::from_slice(&info.stdout).unwrap();
        assert_eq!(info["virtual-size"], gb << 30, "{info}");
    }
    assert_eq!(available_processors(&server, "node01"), 3);
    let node = server.get("/rest/nodes/node01").json();
    assert_eq!(node["virtualMachines"], json!([{"id": "web"}]));
    let hosted = server.get("/rest/nodes/node01/vms").json();
    assert_eq!(hosted["results"][0]["id"], "web");
    assert_eq!(server.get("/rest/nodes/node02/vms").json()["totalCount"], 0);
    // A system job is the service's to run.
    let cancel = server.send("DELETE", &format!("/rest/jobs/{setup}"), Auth::Admin);
    assert_eq!(cancel.status, 400, "{}", cancel.body);

    // Power off really stops the guest; power on boots it again.
    let off = send(
        &server,
        "PUT",
        "/rest/vms/web",
        Auth::User,
        &json!({"powerState": "OFF"}),
    );
    assert_eq!(off.status, 200, "{}", off.body);
    assert!(off.messages().contains("powerState"), "{}", off.body);
    wait_substate(&server, "web", "off");
    wait_until("the guest's process ends", || {
        qemu_pids(server.data_dir(), Some("web")).is_empty()
    });
    assert_eq!(
        available_processors(&server, "node01"),
        3,
        "an off VM keeps its host"
    );
    send(
        &server,
        "PUT",
        "/rest/vms/web",
        Auth::User,
        &json!({"powerState": "ON"}),
    );
    wait_substate(&server, "web", "running");
    assert_eq!(qemu_pids(server.data_dir(), Some("web")).len(), 1);

    // Live migration to node02: the guest keeps running (its uptime goes on); every
    // other field of the body is ignored.
    wait_until("the guest ticks", || last_tick(&server, "web") > 0.0);
    let before = last_tick(&server, "web");
    let moved = send(
        &server,
        "PUT",
        "/rest/vms/web",
        Auth::User,
        &json!({"node": {"id": "node02"}, "powerState": "OFF"}),
    );
    let migrate = job_id(&moved);
    let vm = server.wait_for("/rest/vms/web", "the migration", |vm| {
        vm["node"]["id"] == "node02" && vm["substate"] == "running"
    });
    assert_eq!(vm["migrationCount"], 1);
    assert_eq!(vm["powerState"], "ON");
    assert!(!vm["lastMigrationDate"].is_null());
    let job = server
        .get(&format!("/rest/jobs/{migrate}?api-version=2"))
        .json();
    assert_eq!(job["completionCode"], 0, "{job}");
    wait_until("the migrated guest ticks on", || {
        last_tick(&server, "web") > before
    });
    assert!(
        last_tick(&server, "web") >= before,
        "the guest rebooted: uptime {} after {before}",
        last_tick(&server, "web")
    );
    assert_eq!(available_processors(&server, "node01"), 4);
    assert_eq!(available_processors(&server, "node02"), 3);
    assert_eq!(qemu_pids(server.data_dir(), Some("web")).len(), 1);

    // The VM layer's events: version 1 types, the VM as associated object.
    let events = server
        .get("/rest/events?api-version=3&query=%7B%22eventType%22%3A%22vmmigrate%22%7D")
        .json();
    let event = &events["results"][0];
    assert_eq!(
        event["associatedObjects"],
        json!([{"type": "VM", "id": "web"}]),
        "{events}"
    );

    let events = server
        .get("/rest/events?api-version=3&query=%7B%22eventType%22%3A%22VM%20Provision%22%7D")
        .json();
    let event = &events["results"][0];
    assert_eq!(
        event["message"], "VM web was provisioned on node01",
        "{events}"
    );
    assert_eq!(
        event["associatedObjects"],
        json!([{"type": "VM", "id": "web"}])
    );

    // Destroy: the guest ends and the host's resources come back.
    let destroy = job_id(&server.send("DELETE", "/rest/vms/web", Auth::User));
    wait_until("the VM is gone", || {
        server.get("/rest/vms/web").status == 404
    });
    let job = server
        .get(&format!("/rest/jobs/{destroy}?api-version=2"))
        .json();
    assert_eq!(job["completionCode"], 0, "{job}");
    assert!(qemu_pids(server.data_dir(), Some("web")).is_empty());
    assert_eq!(available_processors(&server, "node02"), 4);
    assert!(!server.data_dir().join("vms").join("web").exists());
}

#[test]
fn vm_requests_are_checked_failures_are_reported_and_time_to_live_ends_a_vm() {
    let Some((server, _guests)) = server() else {
        return;
    };
    let create = |body: Value| send(&server, "POST", "/rest/vms", Auth::User, &body);
    for (body, status, words) in [
        (json!({"colour": "red"}), 400, "colour"),
        (json!({"id": "a/b"}), 400, "id"),
        (json!({"os": "nothing"}), 400, "no image 'nothing'"),
        (json!({"node": {"id": "node09"}}), 400, "no node 'node09'"),
        (
            json!({"totalProcessors": 5}),
            400,
            "no node could ever hold",
        ),
        (
            json!({"totalMemory": 4096, "node": "node01"}),
            400,
            "memory",
        ),
        (
            json!({"requestedTimeToLive": -1}),
            400,
            "requestedTimeToLive",
        ),
    ] {
        create(body.clone()).assert_refused(status, words, &body);
    }
    // An image that cannot boot here: the setup job fails and says why, in the job
    // and in the pending action; nothing stays held.
    let empty = json!({"name": "empty", "hypervisor": false, "osType": "linux",
                       "supportsVirtualMachine": true});
    assert_eq!(
        send(&server, "POST", "/rest/images", Auth::Admin, &empty).status,
        201
    );
    let setup = job_id(&create(json!({"id": "broken", "os": "empty"})));
    let vm = wait_substate(&server, "broken", "failed");
    assert_eq!(vm["state"], "DOWN");
    let job = server
        .get(&format!("/rest/jobs/{setup}?api-version=2"))
        .json();
    assert_eq!(job["completionCode"], 1, "{job}");
    assert!(job.to_string().contains("no boot.kernel"), "{job}");
    let actions = server.get_as(Auth::User, "/rest/pending-actions").json();
    let action = &actions["results"][0];
    assert_eq!(action["id"], setup.as_str(), "{actions}");
    assert_eq!(action["pendingActionState"], "FAILED");
    assert!(
        action["failureDetails"]
            .as_str()
            .unwrap()
            .contains("no boot.kernel")
    );
    assert_eq!(available_processors(&server, "node01"), 4);
    // The image a VM uses cannot be deleted.
    server
        .send("DELETE", "/rest/images/empty", Auth::Admin)
        .assert_refused(409, "broken", &"the image of a VM");
    job_id(&server.send("DELETE", "/rest/vms/broken", Auth::User));
    wait_until("broken is gone", || {
        server.get("/rest/vms/broken").status == 404
    });

    // Another user neither sees nor changes alice's VMs.
    job_id(&create(json!({"id": "short", "requestedTimeToLive": 8})));
    assert_eq!(
        server.get_as(Auth::User, "/rest/vms").json()["totalCount"],
        1
    );
    let bob = || Auth::Basic("bob".into(), PASSWORD.into());
    assert_eq!(server.get_as(bob(), "/rest/vms").json()["totalCount"], 0);
    assert_eq!(server.get_as(bob(), "/rest/vms/short").status, 404);
    assert_eq!(server.send("DELETE", "/rest/vms/short", bob()).status, 404);
    let power = send(
        &server,
        "PUT",
        "/rest/vms/short",
        bob(),
        &json!({"powerState": "OFF"}),
    );
    assert_eq!(power.status, 404, "{}", power.body);
    let actions = server.get_as(bob(), "/rest/pending-actions").json();
    assert_eq!(actions["totalCount"], 0, "{actions}");
    let taken = create(json!({"id": "short"}));
    taken.assert_refused(409, "exists already", &"a taken id");
    send(
        &server,
        "PUT",
        "/rest/vms/short",
        Auth::User,
        &json!({"powerState": "MAYBE"}),
    )
    .assert_refused(400, "powerState", &"a bad power state");
    send(
        &server,
        "PUT",
        "/rest/vms/short",
        Auth::User,
        &json!({"totalMemory": 1}),
    )
    .assert_refused(400, "totalMemory", &"a field modify does not take");
    // Time to live: the scheduler destroys it 8 seconds after its creation.
    let vm = server.get("/rest/vms/short").json();
    assert_eq!(vm["requestedTimeToLive"], 8);
    wait_until("short expires", || {
        server.get("/rest/vms/short").status == 404
    });
    assert!(qemu_pids(server.data_dir(), Some("short")).is_empty());
}

#[test]
fn a_restarted_service_finds_its_running_guests_again() {
    let Some((server, guests)) = server() else {
        return;
    };
    job_id(&send(
        &server,
        "POST",
        "/rest/vms",
        Auth::Admin,
        &json!({"id": "keep"}),
    ));
    wait_substate(&server, "keep", "running");
    let pid = qemu_pids(server.data_dir(), Some("keep"));
    let server = server.restart();
    let vm = server.get("/rest/vms/keep").json();
    assert_eq!(vm["substate"], "running", "{vm}");
    assert_eq!(qemu_pids(server.data_dir(), Some("keep")), pid);
    assert_eq!(available_processors(&server, "node01"), 3);
    job_id(&server.send("DELETE", "/rest/vms/keep", Auth::Admin));
    wait_until("keep is gone", || {
        server.get("/rest/vms/keep").status == 404
    });
    assert!(qemu_pids(server.data_dir(), Some("keep")).is_empty());
    drop(guests);
}

#[test]
fn a_job_asking_for_a_vm_runs_its_command_inside_a_guest_made_for_it() {
    let Some((server, _guests)) = server() else {
        return;
    };
    let work = drover_testkit::scratch_dir();
    // What only the guest has: the kernel command line QEMU gave it.
    let command = drover_testkit::script(
        work.path(),
        "in-guest.sh",
        "echo \"args=$1,$2 job=$DROVER_JOB_ID vm=$DROVER_VM_ID\"\ncat /proc/cmdline\necho to-stderr >&2\nexit 7",
    );
    let reply = send(
        &server,
        "POST",
        "/rest/jobs",
        Auth::User,
        &json!({
            "name": "guest",
            "commandFile": command,
            "commandLineArguments": "one 'two words'",
            "initialWorkingDirectory": work.path(),
            "vmUsagePolicy": "CREATEVM",
            "requirements": [{"requiredProcessorCountMinimum": 2}],
        }),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let id = reply.json()["id"].as_str().unwrap().to_string();
    let vm_id = format!("job-{id}");
    // Its VM is made (a setup system job), owned by the job's user, on the job's node.
    let vm = server.wait_for(&format!("/rest/vms/{vm_id}"), "the job's VM", |vm| {
        vm["id"] == vm_id.as_str()
    });
    assert_eq!(vm["totalProcessors"], 2);
    let job = server.wait_for(&format!("/rest/jobs/{id}"), "the job ends", |job| {
        job["state"] == "COMPLETED"
    });
    assert_eq!(job["completionCode"], 7, "{job}");
    let number = id.trim_start_matches("Drover.");
    let out = std::fs::read_to_string(work.path().join(format!("guest.o{number}"))).unwrap();
    assert!(
        out.contains(&format!("args=one,two words job={id} vm={vm_id}")),
        "{out}"
    );
    assert!(
        out.contains("console=ttyS0"),
        "not the guest's kernel: {out}"
    );
    let err = std::fs::read_to_string(work.path().join(format!("guest.e{number}"))).unwrap();
    assert_eq!(err.trim(), "to-stderr");
    // The job's end destroys its VM; its node's processors were the job's all along.
    wait_until("the job's VM is gone", || {
        server.get(&format!("/rest/vms/{vm_id}")).status == 404
    });
    assert!(qemu_pids(server.data_dir(), Some(&vm_id)).is_empty());
    assert_eq!(available_processors(&server, "node01"), 4);
    assert_eq!(available_processors(&server, "node02"), 4);
}

#[test]
fn without_a_provisioner_a_vm_setup_fails_and_says_why() {
    // No QEMU needed: the setup job must fail, not pretend.
    let server = without_provisioner();
    let setup = job_id(&send(
        &server,
        "POST",
        "/rest/vms",
        Auth::User,
        &json!({"id": "v"}),
    ));
    let vm = wait_substate(&server, "v", "failed");
    assert_eq!(vm["state"], "DOWN");
    let job = server
        .get(&format!("/rest/jobs/{setup}?api-version=2"))
        .json();
    assert_eq!(job["completionCode"], 1, "{job}");
    assert!(
        job.to_string().contains("no provisioner is configured"),
        "{job}"
    );
    let actions = server.get_as(Auth::User, "/rest/pending-actions").json();
    assert!(
        actions["results"][0]["failureDetails"]
            .as_str()
            .unwrap()
            .contains("no provisioner is configured"),
        "{actions}"
    );
}

/// A server whose VMs the site's own commands make (the exec provisioner; no QEMU):
/// scripts keeping a state file per VM in `<site>/state`, the image `guest` registered,
/// and the local user `bob`; `configure` changes the rest.
pub(crate) fn with_site_commands(
    configure: impl FnOnce(&mut drover::Config),
) -> (TestServer, tempfile::TempDir) {
    let site = tempfile::tempdir().unwrap();
    let state = site.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let state = state.display();
    let command = |name: &str, body: &str| -> Vec<String> {
        vec![drover_testkit::script(site.path(), name, body)]
    };
    let create = command(
        "create",
        &format!(
            "echo \"$DROVER_VM_PROCESSORS $DROVER_VM_MEMORY_MIB $DROVER_VM_STORAGE\" >{state}/$DROVER_VM_ID"
        ),
    );
    let destroy = command("destroy", &format!("rm -f {state}/$DROVER_VM_ID"));
    let power = command(
        "power",
        &format!("echo \"power $DROVER_VM_POWER\" >>{state}/$DROVER_VM_ID"),
    );
    let migrate = command("migrate", "true");
    let status = command(
        "status",
        &format!("if [ -e {state}/$DROVER_VM_ID ]; then echo running; else echo gone; fi"),
    );
    let server = TestServer::builder()
        .user("bob", false)
        .config(|c| {
            c.cloud.provisioner = Some(drover::config::ProvisionerKind::Exec);
            c.cloud.exec = Some(drover::config::ExecConfig {
                create,
                destroy,
                migrate,
                power_on: power.clone(),
                power_off: power,
                status,
                adopt: None,
                timeout_seconds: 30,
            });
            configure(c);
        })
        .start();
    let image = json!({"name": "guest", "hypervisor": false, "osType": "linux",
                       "supportsVirtualMachine": true,
                       "boot": {"kernel": "k", "initramfs": "i"}});
    std::fs::create_dir_all(server.data_dir().join("images")).unwrap();
    std::fs::write(server.data_dir().join("images/k"), "kernel").unwrap();
    std::fs::write(server.data_dir().join("images/i"), "initramfs").unwrap();
    assert_eq!(
        send(&server, "POST", "/rest/images", Auth::Admin, &image).status,
        201
    );
    (server, site)
}

#[test]
fn the_exec_provisioner_runs_the_sites_commands_for_each_operation() {
    // No QEMU: the site's own commands (here, scripts keeping a state file per VM).
    let (server, site) = with_site_commands(|_| {});
    let body =
        json!({"id": "site1", "totalProcessors": 2, "totalMemory": 256, "storage": "data:3"});
    job_id(&send(&server, "POST", "/rest/vms", Auth::User, &body));
    wait_substate(&server, "site1", "running");
    let record = site.path().join("state/site1");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap().trim(),
        "2 256 data:3"
    );
    send(
        &server,
        "PUT",
        "/rest/vms/site1",
        Auth::User,
        &json!({"powerState": "OFF"}),
    );
    wait_substate(&server, "site1", "off");
    assert!(
        std::fs::read_to_string(&record)
            .unwrap()
            .contains("power off")
    );
    job_id(&server.send("DELETE", "/rest/vms/site1", Auth::User));
    wait_until("site1 is gone", || {
        server.get("/rest/vms/site1").status == 404
    });
    assert!(!record.exists());
}

#[test]
fn a_job_in_a_vm_outlives_a_restart_of_the_service() {
    let Some((server, _guests)) = server() else {
        return;
    };
    let work = drover_testkit::scratch_dir();
    let command = drover_testkit::script(work.path(), "slow.sh", "sleep 4\necho done");
    let reply = send(
        &server,
        "POST",
        "/rest/jobs",
        Auth::User,
        &json!({"name": "slow", "commandFile": command,
                "initialWorkingDirectory": work.path(), "vmUsagePolicy": "CREATEVM"}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let id = reply.json()["id"].as_str().unwrap().to_string();
    server.wait_for(&format!("/rest/jobs/{id}"), "the job runs", |j| {
        j["state"] == "RUNNING"
    });
    // The job's process (and its connection to the guest) belongs to its shepherd, not
    // to the service: a restart adopts it, and its end still destroys the VM.
    let server = server.restart();
    let job = server.wait_for(&format!("/rest/jobs/{id}"), "the job ends", |j| {
        j["state"] == "COMPLETED"
    });
    assert_eq!(job["completionCode"], 0, "{job}");
    let number = id.trim_start_matches("Drover.");
    let out = std::fs::read_to_string(work.path().join(format!("slow.o{number}"))).unwrap();
    assert_eq!(out.trim(), "done");
    wait_until("the job's VM is gone", || {
        server.get(&format!("/rest/vms/job-{id}")).status == 404
    });
    assert!(qemu_pids(server.data_dir(), Some(&format!("job-{id}"))).is_empty());
}

/// `REQUIREVM` runs a job in a running VM of its user that fits, and waits while there is
/// none (too small, another user's, none at all); the VM, not the job, holds the node,
/// and the job's end leaves the VM running (issue #58 item 8).
#[test]
fn a_requirevm_job_runs_in_a_running_vm_of_its_user_and_waits_for_one() {
    let Some((server, _guests)) = server() else {
        return;
    };
    let work = drover_testkit::scratch_dir();
    let command = drover_testkit::script(
        work.path(),
        "where.sh",
        "echo \"vm=$DROVER_VM_ID\"\ncat /proc/cmdline",
    );
    let submit = |auth: Auth, processors: u32| {
        let reply = send(
            &server,
            "POST",
            "/rest/jobs",
            auth,
            &json!({"name": "where", "commandFile": command,
                    "initialWorkingDirectory": work.path(), "vmUsagePolicy": "REQUIREVM",
                    "requirements": [{"requiredProcessorCountMinimum": processors}]}),
        );
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.json()["id"].as_str().unwrap().to_string()
    };
    let waiting_for_a_vm = |id: &str| {
        server.wait_for(
            &format!("/rest/jobs/{id}?api-version=2"),
            "waiting for a VM",
            |j| j["states"]["state"] == "Idle" && j["blocks"].to_string().contains("running VM"),
        )
    };
    // No VM yet: it waits, and holds no node.
    let first = submit(Auth::User, 1);
    waiting_for_a_vm(&first);
    assert_eq!(available_processors(&server, "node01"), 4);
    job_id(&send(
        &server,
        "POST",
        "/rest/vms",
        Auth::User,
        &json!({"id": "desk", "totalProcessors": 1, "totalMemory": 128}),
    ));
    let job = server.wait_for(&format!("/rest/jobs/{first}"), "the job ends", |j| {
        j["state"] == "COMPLETED"
    });
    assert_eq!(job["completionCode"], 0, "{job}");
    let number = first.trim_start_matches("Drover.");
    let out = std::fs::read_to_string(work.path().join(format!("where.o{number}"))).unwrap();
    assert!(out.contains("vm=desk"), "{out}");
    assert!(
        out.contains("console=ttyS0"),
        "not the guest's kernel: {out}"
    );
    // The VM goes on, and only it holds its node.
    let desk = wait_substate(&server, "desk", "running");
    let node = desk["node"]["id"].as_str().unwrap().to_string();
    assert_eq!(available_processors(&server, &node), 3);
    // Too large for alice's VM, and bob has none: both wait.
    let large = submit(Auth::User, 2);
    let bobs = submit(Auth::Basic("bob".into(), PASSWORD.into()), 1);
    waiting_for_a_vm(&large);
    waiting_for_a_vm(&bobs);
    assert_eq!(available_processors(&server, &node), 3);
    for id in [&large, &bobs] {
        assert_eq!(
            server
                .send("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin)
                .status,
            200
        );
    }
    job_id(&server.send("DELETE", "/rest/vms/desk", Auth::User));
    wait_until("desk is gone", || {
        server.get("/rest/vms/desk").status == 404
    });
}
