//! The attacks of the outside review (issue #25), each tried as an ordinary user would,
//! over HTTP against a real server, and refused. `drover-bob` and `drover-carol` are
//! ordinary system accounts (made by `scripts/test`, which also puts bob alone in the
//! group `drover-lab`), logged in as local API users of the same names: their jobs run
//! as them. The VMs' attacks (issue #27) boot real guests, as `vms.rs` does.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use drover_accounting::model::{Account, AccountUser, Allocation, Rates};
use drover_accounting::{AccountingConfig, Money};
use drover_sched::node::NodeConfig;
use drover_testkit::{
    Auth, PASSWORD, TestServer, scratch_dir, script, send, submit_as, submitted, uid_of,
    wait_state_v2, wait_until,
};
use serde_json::{Value, json};

pub(crate) use drover_testkit::{BOB, CAROL, system_accounts};
/// A group bob belongs to and carol does not.
const LAB: &str = "drover-lab";

pub(crate) fn as_(name: &str) -> Auth {
    Auth::Basic(name.into(), PASSWORD.into())
}

fn with_accounts() -> drover_testkit::Builder {
    TestServer::builder()
        .user(BOB, false)
        .user(CAROL, false)
        .config(|c| c.nodes = vec![NodeConfig::new("n1", 2), NodeConfig::new("n2", 2)])
}

/// Releases the held job `id` as `auth`, which must be allowed to.
fn release(server: &TestServer, auth: Auth, id: &str) {
    let released = send(
        server,
        "PUT",
        &format!("/rest/jobs/{id}?api-version=2"),
        auth,
        &json!({"holds": []}),
    );
    assert_eq!(released.status, 200, "{}", released.body);
}

fn job_count(server: &TestServer) -> u64 {
    server.get("/rest/jobs?api-version=2").json()["totalCount"]
        .as_u64()
        .unwrap()
}

fn wait_for_file(path: &std::path::Path) -> String {
    for _ in 0..600 {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{} was never written", path.display());
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

// 1. A job's group is one its user belongs to; the job gets the user's own groups.
#[test]
fn a_job_runs_only_in_a_group_its_user_belongs_to() {
    if !system_accounts() {
        return;
    }
    let server = with_accounts().start();
    let work = scratch_dir();
    let before = job_count(&server);
    for group in ["shadow", "root"] {
        let reply = submit_as(
            &server,
            as_(BOB),
            &json!({"commandFile": "/usr/bin/wc", "commandLineArguments": "-l /etc/shadow",
                   "initialWorkingDirectory": work.path(), "credentials": {"group": group}}),
        );
        assert_eq!(reply.status, 403, "{group}: {}", reply.body);
        assert!(
            reply
                .messages()
                .contains(&format!("not a member of group '{group}'")),
            "{}",
            reply.body
        );
        // Version 1 too.
        let v1 = send(
            &server,
            "POST",
            "/rest/jobs",
            as_(BOB),
            &json!({"commandFile": "/usr/bin/wc", "commandLineArguments": "-l /etc/shadow",
                    "initialWorkingDirectory": work.path(), "group": group}),
        );
        assert_eq!(v1.status, 403, "{}", v1.body);
    }
    // Not even an administrator puts a user's job in a group that user is not in.
    let as_carol = send(
        &server,
        "POST",
        "/rest/jobs?api-version=2",
        Auth::Admin,
        &json!({"commandFile": "/bin/true", "initialWorkingDirectory": work.path(),
                "credentials": {"user": CAROL, "group": LAB}}),
    );
    assert_eq!(as_carol.status, 403, "{}", as_carol.body);
    assert_eq!(job_count(&server), before, "nothing was submitted");

    // A group of bob's own: the job runs with it, and with bob's groups only.
    let ids = script(work.path(), "ids.sh", "id -gn; id -G");
    let out = work.path().join("ids.txt");
    let id = submitted(&submit_as(
        &server,
        as_(BOB),
        &json!({"commandFile": ids, "initialWorkingDirectory": work.path(),
               "standardOutputFilePath": out, "credentials": {"group": LAB}}),
    ));
    wait_state_v2(&server, &id, "Completed");
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(LAB), "{text}");
    let groups: Vec<u32> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|g| g.parse().unwrap())
        .collect();
    assert!(!groups.contains(&0), "no root group: {groups:?}");
    let lab = nix_group_id(LAB);
    let shadow = nix_group_id("shadow");
    assert!(
        groups.contains(&lab) && !groups.contains(&shadow),
        "{groups:?}"
    );
}

// 1b. The job's process makes its setup (working directory, command, outputs) as its
// user, with no shell between: what changed while a job of bob's was held is refused at
// its start with the reason, and nothing is written where bob may not write.
#[test]
fn a_jobs_setup_is_made_as_its_user_when_it_starts() {
    if !system_accounts() {
        return;
    }
    let server = with_accounts().start();
    let work = scratch_dir();
    let outputs = work.path().join("outputs");
    std::fs::create_dir(&outputs).unwrap();
    std::fs::set_permissions(&outputs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let command = script(work.path(), "hello.sh", "echo hello; echo oops >&2");
    let submit_held = |body: Value| {
        let mut body = body;
        body["holds"] = json!(["User"]);
        submitted(&submit_as(&server, as_(BOB), &body))
    };
    let release_and_end = |id: &str| {
        release(&server, as_(BOB), id);
        wait_state_v2(&server, id, "Completed")
    };

    // An output directory: the files get their default names there, and are bob's.
    let id = submit_held(json!({"customName": "hello", "commandFile": command,
        "initialWorkingDirectory": work.path(),
        "standardOutputFilePath": outputs, "standardErrorFilePath": outputs}));
    let job = release_and_end(&id);
    assert_eq!(job["completionCode"], 0, "{job}");
    let number = id.trim_start_matches("Drover.");
    let out = outputs.join(format!("hello.o{number}"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hello\n");
    assert_eq!(
        std::fs::read_to_string(outputs.join(format!("hello.e{number}"))).unwrap(),
        "oops\n"
    );
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&out).unwrap()),
        uid_of(BOB)
    );

    // The directory became root's alone while the job was held: nothing is written
    // there, and the job says why it did not start.
    let id = submit_held(json!({"customName": "late", "commandFile": command,
        "initialWorkingDirectory": work.path(), "standardOutputFilePath": outputs}));
    std::fs::set_permissions(&outputs, std::fs::Permissions::from_mode(0o700)).unwrap();
    let job = release_and_end(&id);
    assert_ne!(job["completionCode"], 0, "{job}");
    let said = job["messages"].to_string();
    assert!(
        said.contains("could not be started") && said.contains("outputs"),
        "{job}"
    );
    assert!(said.contains("Permission denied"), "{job}");
    let names: Vec<_> = std::fs::read_dir(&outputs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 2, "only the first job's files: {names:?}");

    // A working directory bob can no longer enter.
    let private = work.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o777)).unwrap();
    let id = submit_held(
        json!({"commandFile": command, "initialWorkingDirectory": private,
        "standardOutputFilePath": "/dev/null", "standardErrorFilePath": "/dev/null"}),
    );
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let job = release_and_end(&id);
    let said = job["messages"].to_string();
    assert!(
        said.contains("cannot enter the working directory") && said.contains("private"),
        "{job}"
    );

    // A command file bob can no longer read, and one bob may read but not execute
    // (run by /bin/sh).
    let secret = script(work.path(), "secret.sh", "echo secret");
    let id = submit_held(
        json!({"commandFile": secret, "initialWorkingDirectory": work.path(),
        "standardOutputFilePath": work.path().join("secret.out")}),
    );
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let job = release_and_end(&id);
    let said = job["messages"].to_string();
    assert!(
        said.contains("cannot be read by the user drover-bob"),
        "{job}"
    );
    assert!(
        !work.path().join("secret.out").exists(),
        "nothing was opened"
    );
    let readable = script(work.path(), "readable.sh", "echo read by sh");
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let read_out = work.path().join("readable.out");
    let id = submitted(&submit_as(
        &server,
        as_(BOB),
        &json!({"commandFile": readable,
        "initialWorkingDirectory": work.path(), "standardOutputFilePath": read_out}),
    ));
    let job = wait_state_v2(&server, &id, "Completed");
    assert_eq!(job["completionCode"], 0, "{job}");
    assert_eq!(std::fs::read_to_string(&read_out).unwrap(), "read by sh\n");
}

fn nix_group_id(name: &str) -> u32 {
    let out = std::process::Command::new("getent")
        .args(["group", name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split(':')
        .nth(2)
        .unwrap()
        .parse()
        .unwrap()
}

// 1d. A job that makes a process of its own a child of its shepherd (`clone` with
// CLONE_PARENT), a root process that runs one job after another, leaves it no zombie:
// that shepherd ends with the job (what it leaves goes to init, which reaps it), and the
// next jobs run in others.
#[test]
fn a_process_a_job_makes_its_shepherds_child_is_reaped() {
    if !system_accounts() {
        return;
    }
    let server = with_accounts().sqlite().start();
    let work = scratch_dir();
    let pid_file = work.path().join("sibling.pid");
    // clone(CLONE_PARENT | SIGCHLD) on x86-64 (syscall 56): the new process's parent is
    // the job's, its shepherd. It lives a second after the job ended, then exits.
    let program = format!(
        "import ctypes, os, time\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         pid = libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0)\n\
         if pid == 0:\n    time.sleep(1.5)\n    os._exit(0)\n\
         open('{}', 'w').write('%d\\n' % pid)\n",
        pid_file.display()
    );
    let job = script(
        work.path(),
        "sibling.sh",
        &format!("exec python3 -c \"$(cat <<'EOF'\n{program}EOF\n)\""),
    );
    let id = submitted(&submit_as(
        &server,
        as_(BOB),
        &json!({"commandFile": job, "initialWorkingDirectory": work.path()}),
    ));
    let done = wait_state_v2(&server, &id, "Completed");
    assert_eq!(done["completionCode"], 0, "{done}");
    let sibling: u32 = wait_for_file(&pid_file).trim().parse().unwrap();
    // Reaped once it has ended: gone, not a zombie of a waiting shepherd.
    wait_until("the job's sibling to be reaped", || {
        !std::path::Path::new(&format!("/proc/{sibling}")).exists()
    });
    // The next jobs still run.
    short_jobs_of_bob_and_carol_run(&server);
}

/// A short job of bob's and one of carol's start, run and end with code 0.
fn short_jobs_of_bob_and_carol_run(server: &TestServer) {
    for user in [BOB, CAROL] {
        let other = submitted(&submit_as(
            server,
            as_(user),
            &json!({"commandFile": "/bin/true", "initialWorkingDirectory": "/tmp",
                   "standardOutputFilePath": "/dev/null",
                   "standardErrorFilePath": "/dev/null"}),
        ));
        let done = wait_state_v2(server, &other, "Completed");
        assert_eq!(done["completionCode"], 0, "{done}");
    }
}

/// The parent of a process, `None` when it is gone.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

// 1c. Until its exec, the job's process shares the memory of its shepherd, a root
// process (it is cloned with it, not forked). Stopped there after the switch to bob (its
// output is a FIFO no one reads yet), it cannot be read or written through
// `/proc/<pid>/mem` by bob, whose own processes can: the kernel keeps him out. Nor does
// it hold up anyone else's job: its shepherd waits for it, others start the next jobs.
#[test]
fn a_job_before_its_exec_keeps_its_user_out_of_the_shepherds_memory() {
    if !system_accounts() {
        return;
    }
    let server = with_accounts().sqlite().start();
    let spool = server.data_dir().join("spool");
    let work = scratch_dir();
    let fifo = work.path().join("out.fifo");
    let made = std::process::Command::new("mkfifo")
        .args(["-m", "666"])
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let id = submitted(&submit_as(
        &server,
        as_(BOB),
        &json!({"commandFile": "/bin/true", "initialWorkingDirectory": work.path(),
               "standardOutputFilePath": fifo, "standardErrorFilePath": "/dev/null"}),
    ));
    // The job's process writes its pid first.
    let status = wait_for_file(&spool.join(format!("{id}.status")));
    let job: u32 = status
        .strip_prefix("pid ")
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("{status}"));
    let shepherd = parent_of(job).expect("the job's shepherd");
    let bobs_uid = String::from_utf8(
        std::process::Command::new("id")
            .args(["-u", BOB])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    // The job's process, waiting to open the FIFO as bob.
    // A process's real uid, while it lives.
    let uid_of = |pid: &str| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
        Some(uids.split_whitespace().next()?.to_string())
    };
    wait_until("the job's process to wait on its output as bob", || {
        uid_of(&job.to_string()).as_deref() == Some(bobs_uid.trim())
    });
    // Cloned with the shepherd's memory where fs.suid_dumpable is 0 (as here): what bob
    // tries below is against root's own memory, not a copy.
    if std::fs::read_to_string("/proc/sys/fs/suid_dumpable")
        .unwrap()
        .trim()
        == "0"
    {
        // kcmp(2): 0 when the two processes have one address space.
        const KCMP_VM: libc::c_long = 1;
        let same = unsafe {
            libc::syscall(
                libc::SYS_kcmp,
                job as libc::c_long,
                shepherd as libc::c_long,
                KCMP_VM,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        };
        assert_eq!(same, 0, "one memory: {}", std::io::Error::last_os_error());
    }
    // `Ok` or why the open failed.
    let bob_opens = |path: &str| {
        let tried = std::process::Command::new("runuser")
            .args(["-u", BOB, "--", "sh", "-c", &format!("exec 3<>{path}")])
            .output()
            .unwrap();
        match tried.status.success() {
            true => Ok(()),
            false => Err(String::from_utf8_lossy(&tried.stderr).into_owned()),
        }
    };
    assert_eq!(
        bob_opens("/proc/self/mem"),
        Ok(()),
        "bob opens the memory of a process of his own"
    );
    let refused = bob_opens(&format!("/proc/{job}/mem")).unwrap_err();
    assert!(
        refused.contains("Permission denied"),
        "bob cannot open the memory his job's process shares with the shepherd: {refused}"
    );
    assert_eq!(
        uid_of(&job.to_string()).as_deref(),
        Some(bobs_uid.trim()),
        "still bob's, still waiting"
    );
    // Meanwhile other jobs (bob's own, carol's) start, run and end.
    short_jobs_of_bob_and_carol_run(&server);
    assert_eq!(
        parent_of(job),
        Some(shepherd),
        "still waiting on its output"
    );
    // Read, the FIFO lets the job go on; it ends as it would have.
    let mut output = String::new();
    std::fs::File::open(&fifo)
        .unwrap()
        .read_to_string(&mut output)
        .unwrap();
    let done = wait_state_v2(&server, &id, "Completed");
    assert_eq!(done["completionCode"], 0, "{done}");

    // Nor can his job take that memory as its input or output, which would outlive the
    // exec: the job is refused, or does not start and says why.
    let marker = work.path().join("ran");
    let command = script(
        work.path(),
        "mark.sh",
        &format!("echo ran >{}", marker.display()),
    );
    // (Version 1 has the input's field; both take the outputs.)
    for (version, stream) in [
        (2, "standardOutputFilePath"),
        (2, "standardErrorFilePath"),
        (1, "standardInputFilePath"),
    ] {
        let path = "/proc/self/mem";
        let mut body = json!({"commandFile": command, "initialWorkingDirectory": work.path()});
        body[stream] = json!(path);
        let reply = send(
            &server,
            "POST",
            &format!("/rest/jobs?api-version={version}"),
            as_(BOB),
            &body,
        );
        // Refused at submission where the service can tell (as bob may not write
        // there), else refused by the kernel at the start.
        if reply.status == 400 {
            assert!(reply.body.contains(stream), "{stream}: {}", reply.body);
            continue;
        }
        let id = match version {
            1 => reply.json()["id"].as_str().unwrap().to_string(),
            _ => submitted(&reply),
        };
        let done = wait_state_v2(&server, &id, "Completed");
        assert_ne!(done["completionCode"], 0, "{stream}: {done}");
        let said = done["messages"].to_string();
        assert!(
            said.contains("cannot open /proc/self/mem for") && said.contains("Permission denied"),
            "{stream}: {done}"
        );
        assert!(!marker.exists(), "{stream}: the command ran");
    }
}

// 2. Charge rates are the accounting administrators'; a guaranteed quote binds only a
//    job of its own user.
#[test]
fn quotes_set_no_rates_and_bind_no_job_of_another_user() {
    if !system_accounts() {
        return;
    }
    let member = |id: &str| AccountUser {
        id: id.into(),
        active: true,
        admin: false,
    };
    let server = with_accounts()
        .config(|c| {
            c.accounting = AccountingConfig {
                enabled: true,
                admins: vec!["auditor".into()],
                accounts: vec![Account {
                    id: "lab".into(),
                    organization: None,
                    description: None,
                    active: true,
                    users: vec![member(BOB), member(CAROL)],
                    custom: Default::default(),
                }],
                allocations: vec![Allocation {
                    account: "lab".into(),
                    amount: Money::parse("1000").unwrap(),
                    start: None,
                    end: None,
                }],
                rates: Rates {
                    processors: Some(Money::parse("0.01").unwrap()),
                    ..Rates::default()
                },
                default_lien_seconds: None,
                allow_overdraft: false,
                ..AccountingConfig::default()
            };
        })
        .start();
    let quote = |who: &str, params: &str, body: Value| {
        send(
            &server,
            "POST",
            &format!(
                "/rest/quotes/standard/quote?object-type=job&proxy-user={who}&charge-duration=60&{params}"
            ),
            as_(who),
            &body,
        )
    };
    let free = "%5B%7B%22type%22%3A%22processors%22%2C%22rate%22%3A0%7D%5D";
    let work = scratch_dir();
    let sleeper = script(work.path(), "sleeper.sh", "sleep 1");
    let carols = submitted(&submit_as(
        &server,
        as_(CAROL),
        &json!({"commandFile": sleeper, "initialWorkingDirectory": work.path(), "holds": ["User"],
               "duration": 60, "credentials": {"account": "lab"}}),
    ));

    // The review's attack: a free rate guaranteed for carol's job, in carol's name.
    let attack = quote(
        BOB,
        &format!("guarantee=true&rate={free}"),
        json!({"id": carols, "user": CAROL, "account": "lab"}),
    );
    assert_eq!(attack.status, 403, "{}", attack.body);
    assert!(attack.messages().contains("accounting administrators"));
    // Without the rate, still not in carol's name.
    let in_her_name = quote(
        BOB,
        "guarantee=true",
        json!({"id": carols, "user": CAROL, "account": "lab"}),
    );
    assert_eq!(in_her_name.status, 403, "{}", in_her_name.body);
    assert!(in_her_name.messages().contains("accounting user"));
    // In his own name bob may guarantee a price "for" her job: it binds nothing of hers.
    let own = quote(
        BOB,
        "guarantee=true",
        json!({"id": carols, "account": "lab"}),
    );
    assert_eq!(own.status, 200, "{}", own.body);
    // Nor does it keep her from guaranteeing a price for her own job.
    let hers = quote(
        CAROL,
        "guarantee=true",
        json!({"id": carols, "account": "lab"}),
    );
    assert_eq!(hers.status, 200, "{}", hers.body);
    let her_quote = hers.json()["id"].as_i64().unwrap();

    release(&server, as_(CAROL), &carols);
    wait_state_v2(&server, &carols, "Completed");
    let charge = server.wait_for(
        "/rest/accounting/usage-records?query=%7B%22kind%22%3A%22charge%22%7D",
        "carol's job is charged",
        |list| list["totalCount"] == 1,
    )["results"][0]
        .clone();
    assert_eq!(charge["object"], carols.as_str());
    assert_eq!(
        charge["quote"], her_quote,
        "her own quote prices her job, bob's does not"
    );
    let seconds = charge["duration"].as_i64().unwrap();
    assert_eq!(
        Money::from_json(&charge["charge"]).unwrap(),
        Money::parse("0.01").unwrap().times_count(seconds),
        "the standard rate"
    );
}

// 3. What the service reads as root after a restart lies where the job's user cannot
//    write, and no process of theirs holds it: the attack of the review (a symlink in
//    place of the exit status) fails, and so does writing a status of one's own.
#[test]
fn a_job_cannot_replace_the_status_the_service_reads_after_a_restart() {
    if !system_accounts() {
        return;
    }
    let server = with_accounts().sqlite().start();
    let spool = server.data_dir().join("spool");
    let work = scratch_dir();
    let go = work.path().join("go");
    let attack = work.path().join("attack.txt");
    let job = script(
        work.path(),
        "job.sh",
        &format!(
            "target=\"$SPOOL/$DROVER_JOB_ID.status\"
if ln -sf /etc/shadow \"$target\" 2>/dev/null || echo 0 2>/dev/null >\"$target\" \\
   || {{ echo 0 >&3; }} 2>/dev/null || ls -l /proc/$PPID/fd/ 2>/dev/null | grep -q status; then
  echo reached >{attack}
else
  echo denied >{attack}
fi
# Bounded, so that a test that fails before it writes `go` leaves no job behind.
n=0
while [ ! -e {go} ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n + 1)); done
exit 7",
            attack = attack.display(),
            go = go.display()
        ),
    );
    let id = submitted(&submit_as(
        &server,
        as_(BOB),
        &json!({"commandFile": job, "initialWorkingDirectory": work.path(),
               "environmentVariables": {"SPOOL": spool}}),
    ));
    assert_eq!(wait_for_file(&attack), "denied\n");
    // The job starts with no signal ignored or blocked (none of the service's or its
    // shepherd's: SIGPIPE ignored would break pipelines), in a session of its own.
    let signals = work.path().join("signals.txt");
    let probe = script(
        work.path(),
        "probe.sh",
        &format!(
            "grep -E '^Sig(Ign|Blk)' /proc/self/status >{out}; ps -o sid= -p $$ >>{out}",
            out = signals.display()
        ),
    );
    let probed = submitted(&submit_as(
        &server,
        as_(BOB),
        &json!({"commandFile": probe, "initialWorkingDirectory": work.path()}),
    ));
    wait_state_v2(&server, &probed, "Completed");
    let text = std::fs::read_to_string(&signals).unwrap();
    let mut lines = text.lines();
    let mask = |line: Option<&str>, name: &str| {
        let hex = line.and_then(|l| l.strip_prefix(name)).unwrap().trim();
        // Signals 32 and 33 are the C library's own, which its signal() does not touch.
        u64::from_str_radix(hex, 16).unwrap() & !0x1_8000_0000
    };
    assert_eq!(mask(lines.next(), "SigBlk:"), 0, "{text}");
    assert_eq!(mask(lines.next(), "SigIgn:"), 0, "{text}");
    let session: u32 = lines.next().unwrap().trim().parse().unwrap();
    assert_ne!(session, std::process::id(), "not the service's session");
    assert_eq!(mode(&spool), 0o700);
    let status = spool.join(format!("{id}.status"));
    assert_eq!(mode(&status), 0o600);
    assert!(
        std::fs::read_to_string(&status)
            .unwrap()
            .starts_with("pid ")
    );
    // Adopted by the next start, which learns its status from the spool.
    let server = server.restart();
    std::fs::write(&go, "").unwrap();
    let done = wait_state_v2(&server, &id, "Completed");
    assert_eq!(done["completionCode"], 7, "{done}");
    // Once their ends are recorded, the spools of ended jobs go: they do not pile up.
    for ended in [&id, &probed] {
        wait_until("the ended job's spool to go", || {
            !spool.join(format!("{ended}.status")).exists()
        });
    }
}

// 4. One request cannot fill the queue: arrays and queued jobs are limited per user.
#[test]
fn arrays_and_queued_jobs_are_limited_per_user() {
    if !system_accounts() {
        return;
    }
    let server = with_accounts()
        .config(|c| {
            c.scheduler.enable_job_arrays = true;
            c.scheduler.limits.max_queued_jobs_per_user = 5;
        })
        .start();
    let work = scratch_dir();
    let array = |who: Auth, ranges: Value| {
        send(
            &server,
            "POST",
            "/rest/job-arrays?api-version=2",
            who,
            &json!({"jobPrototype": {"commandFile": "/bin/true", "initialWorkingDirectory": work.path(),
                                     "holds": ["User"]},
                    "indexRanges": ranges}),
        )
    };
    // The review's request: a million sub-jobs in 300 bytes.
    let before = job_count(&server);
    let started = Instant::now();
    let million = array(
        as_(BOB),
        json!([{"startIndex": 0, "endIndex": 999_999, "increment": 1}]),
    );
    assert_eq!(million.status, 400, "{}", million.body);
    assert!(
        million.messages().contains("max_array_size"),
        "{}",
        million.body
    );
    // Many huge ranges cost no more to refuse.
    let ranges: Vec<Value> = (0..64)
        .map(|_| json!({"startIndex": 0, "endIndex": i64::MAX, "increment": 1}))
        .collect();
    let huge = array(as_(BOB), Value::Array(ranges));
    assert_eq!(huge.status, 400, "{}", huge.body);
    eprintln!("two oversized arrays refused in {:?}", started.elapsed());
    // Within the array limit but over the queued-jobs limit.
    let wide = array(
        as_(BOB),
        json!([{"startIndex": 0, "endIndex": 5, "increment": 1}]),
    );
    assert_eq!(wide.status, 400, "{}", wide.body);
    assert!(wide.messages().contains("max_queued_jobs_per_user"));
    assert_eq!(job_count(&server), before, "nothing was created");

    let held = || {
        submit_as(
            &server,
            as_(BOB),
            &json!({"commandFile": "/bin/true", "initialWorkingDirectory": work.path(), "holds": ["User"]}),
        )
    };
    for _ in 0..5 {
        submitted(&held());
    }
    let sixth = held();
    assert_eq!(sixth.status, 400, "{}", sixth.body);
    assert!(
        sixth.messages().contains("has 5 jobs waiting to start"),
        "{}",
        sixth.body
    );
    // Others are not held back by bob's queue, nor administrators by the limits.
    submitted(&submit_as(
        &server,
        as_(CAROL),
        &json!({"commandFile": "/bin/true", "initialWorkingDirectory": work.path(), "holds": ["User"]}),
    ));
    let admins = array(
        Auth::Admin,
        json!([{"startIndex": 0, "endIndex": 1001, "increment": 1}]),
    );
    assert_eq!(admins.status, 201, "{}", admins.body);
    // Cancelling the master cancels its sub-jobs (quicker than one by one at the end).
    let master = admins.json()["name"].as_str().unwrap().to_string();
    let cancel = server.call("DELETE", &format!("/rest/jobs/{master}"), Auth::Admin, None);
    assert_eq!(cancel.status, 200, "{}", cancel.body);
}

// 4. What one job of an ordinary user carries is bounded too, and grows only so far.
#[test]
fn a_job_carries_and_gathers_a_bounded_amount() {
    if !system_accounts() {
        return;
    }
    let server = with_accounts().start();
    let work = scratch_dir();
    let big = "x".repeat(100 * 1024);
    let heavy = submit_as(
        &server,
        as_(BOB),
        &json!({"commandFile": "/bin/true", "initialWorkingDirectory": work.path(),
               "environmentVariables": {"BIG": big}}),
    );
    assert_eq!(heavy.status, 413, "{}", heavy.body);
    assert!(heavy.messages().contains("max_submission_bytes"));
    let id = submitted(&submit_as(
        &server,
        as_(BOB),
        &json!({"commandFile": "/bin/true", "initialWorkingDirectory": work.path(), "holds": ["User"]}),
    ));
    let modify = |body: Value| {
        send(
            &server,
            "PUT",
            &format!("/rest/jobs/{id}?api-version=2"),
            as_(BOB),
            &body,
        )
    };
    // Variables gathered over many changes stay within the bound.
    let chunk = "v".repeat(30 * 1024);
    assert_eq!(modify(json!({"variables": {"A": chunk}})).status, 200);
    assert_eq!(modify(json!({"variables": {"B": chunk}})).status, 200);
    let third = modify(json!({"variables": {"C": chunk}}));
    assert_eq!(third.status, 400, "{}", third.body);
    assert!(third.messages().contains("max_submission_bytes"));
    // Taking variables away is always allowed.
    assert_eq!(modify(json!({"variables": {"A": null}})).status, 200);
    // Messages: each of at most 1 KiB, and a job keeps its latest 50.
    let long = modify(json!({"messages": [{"message": "m".repeat(1025)}]}));
    assert_eq!(long.status, 400, "{}", long.body);
    for i in 0..60 {
        let reply = modify(json!({"messages": [{"message": format!("note {i}")}]}));
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let job = server.get(&format!("/rest/jobs/{id}?api-version=2")).json();
    let messages = job["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 50, "{job}");
    assert!(messages.last().unwrap().to_string().contains("note 59"));

    // Reservations and containers: their bodies, and what changes gather on them.
    let body = json!({"description": "x".repeat(100 * 1024)});
    let big = send(&server, "POST", "/rest/vcs", as_(BOB), &body);
    assert_eq!(big.status, 413, "{}", big.body);
    let container = send(&server, "POST", "/rest/vcs", as_(BOB), &json!({}));
    assert_eq!(container.status, 201, "{}", container.body);
    let container = container.json()["id"].as_str().unwrap().to_string();
    let gather = |name: &str| {
        send(
            &server,
            "PUT",
            &format!("/rest/vcs/{container}?change-mode=set"),
            as_(BOB),
            &json!({"variables": {name: chunk}}),
        )
    };
    assert_eq!(gather("A").status, 200);
    let add = |name: &str| {
        send(
            &server,
            "PUT",
            &format!("/rest/vcs/{container}?change-mode=set"),
            as_(BOB),
            &json!({"description": "d".repeat(40 * 1024), "variables": {name: chunk}}),
        )
    };
    let over = add("B");
    assert_eq!(over.status, 400, "{}", over.body);
    assert!(over.messages().contains("max_submission_bytes"));
    let record = server.get(&format!("/rest/vcs/{container}")).json();
    assert!(
        record["description"].is_null(),
        "nothing of it was kept: {record}"
    );
}

// 5. Failed logins sent at once are counted before their passwords are checked.
#[test]
fn parallel_bad_logins_cannot_outrun_the_throttle() {
    let server = TestServer::builder()
        .config(|c| c.access.max_failed_logins = 5)
        .start();
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..60)
            .map(|i| {
                let server = &server;
                s.spawn(move || {
                    server
                        .get_as(
                            Auth::Basic("alice".into(), format!("guess-{i}")),
                            "/rest/diag/about",
                        )
                        .status
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let checked = statuses.iter().filter(|&&s| s == 401).count();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!(checked + refused, 60, "{statuses:?}");
    assert!(
        checked <= 5,
        "at most 5 passwords were checked: {statuses:?}"
    );

    // Guesses whose clients hang up while they wait for their turn are counted all the
    // same. (Dora's hash has the standard cost, so that the guesses are still waiting.)
    let server = TestServer::builder()
        .config(|c| {
            c.access.max_failed_logins = 3;
            c.users.push(drover_auth::User {
                name: "dora".into(),
                password_hash: drover_auth::password::hash(
                    PASSWORD,
                    drover_auth::password::Cost::Standard,
                ),
                admin: false,
            });
        })
        .start();
    let streams: Vec<TcpStream> = (0..8)
        .map(|i| {
            let mut stream = TcpStream::connect(&server.address).unwrap();
            let head = format!(
                "GET /rest/diag/about HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {}\r\n\r\n",
                basic("dora", &format!("guess-{i}"))
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(30));
    drop(streams);
    let mut blocked = 0;
    for _ in 0..100 {
        blocked = server.get_as(Auth::User, "/rest/diag/about").status;
        if blocked == 429 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(blocked, 429, "the hung-up guesses were counted");

    // Good logins sent at once from one address (a pooled client starting) all pass:
    // they take turns, and all but the first find the login verified.
    let server = TestServer::builder()
        .config(|c| c.access.max_failed_logins = 2)
        .start();
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..30)
            .map(|_| s.spawn(|| server.get_as(Auth::User, "/rest/diag/about").status))
            .collect();
        for thread in threads {
            assert_eq!(thread.join().unwrap(), 200);
        }
    });
}

// 6. Virtual containers hold only what is the caller's own; the creator is never a name
//    from the body.
#[test]
fn containers_take_only_the_callers_own_members() {
    if !system_accounts() {
        return;
    }
    let server = with_accounts()
        .config(|c| c.scheduler.limits.user_container_max_count = 2)
        .start();
    let work = scratch_dir();
    let create = |who: &str, body: Value| {
        let reply = send(&server, "POST", "/rest/vcs", as_(who), &body);
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.json()["id"].as_str().unwrap().to_string()
    };
    let carols_job = submitted(&submit_as(
        &server,
        as_(CAROL),
        &json!({"commandFile": "/bin/true", "initialWorkingDirectory": work.path(), "holds": ["User"]}),
    ));
    let carols = create(CAROL, json!({}));
    // Nor may he name her its owner, when he creates it or later.
    let hers = send(
        &server,
        "POST",
        "/rest/vcs",
        as_(BOB),
        &json!({"owner": {"name": CAROL}}),
    );
    assert_eq!(hers.status, 403, "{}", hers.body);
    let bobs = create(BOB, json!({"description": "bob's"}));
    let record = server.get(&format!("/rest/vcs/{bobs}")).json();
    assert_eq!(record["creator"], BOB, "the creator is who asked: {record}");
    let give = send(
        &server,
        "PUT",
        &format!("/rest/vcs/{bobs}?change-mode=set"),
        as_(BOB),
        &json!({"owner": {"name": CAROL}}),
    );
    assert_eq!(give.status, 403, "{}", give.body);

    let add = |body: Value| {
        send(
            &server,
            "PUT",
            &format!("/rest/vcs/{bobs}?change-mode=add"),
            as_(BOB),
            &body,
        )
    };
    let her_job = add(json!({"jobs": [{"id": carols_job}]}));
    assert_eq!(her_job.status, 400, "{}", her_job.body);
    assert!(
        her_job
            .messages()
            .contains(&format!("no job '{carols_job}'"))
    );
    let her_container = add(json!({"virtualContainers": [{"id": carols}]}));
    assert_eq!(her_container.status, 400, "{}", her_container.body);
    let a_node = add(json!({"nodes": [{"id": "n1"}]}));
    assert_eq!(a_node.status, 400, "{}", a_node.body);
    assert!(a_node.messages().contains("only administrators"));
    // So HOLDJOBS on his container cannot hold her job.
    let flags = send(
        &server,
        "PUT",
        &format!("/rest/vcs/{bobs}?change-mode=set"),
        as_(BOB),
        &json!({"flags": ["HOLDJOBS"]}),
    );
    assert_eq!(flags.status, 200, "{}", flags.body);
    assert_eq!(
        server.get(&format!("/rest/vcs/{bobs}")).json()["jobs"],
        json!([])
    );
    // Nor does he submit into her container.
    let into_hers = submit_as(
        &server,
        as_(BOB),
        &json!({"commandFile": "/bin/true", "initialWorkingDirectory": work.path(),
               "virtualContainers": [{"name": carols}]}),
    );
    assert_eq!(into_hers.status, 400, "{}", into_hers.body);
    assert!(into_hers.messages().contains("does not exist"));
    assert_eq!(
        server.get(&format!("/rest/vcs/{carols}")).json()["jobs"],
        json!([])
    );
    // Containers are few per ordinary user.
    create(BOB, json!({}));
    let third = send(&server, "POST", "/rest/vcs", as_(BOB), &json!({}));
    assert_eq!(third.status, 400, "{}", third.body);
    assert!(third.messages().contains("user_container_max_count"));
}

// 7. The data directory and its files are the service's alone.
#[test]
fn the_data_directory_is_private_and_tightened_at_start() {
    if !system_accounts() {
        return;
    }
    let top = tempfile::tempdir().unwrap();
    let data = top.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = data.join("events.log");
    std::fs::write(&log, "").unwrap();
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();
    let server = with_accounts()
        .sqlite()
        .config(|c| c.data_dir = data.clone())
        .start();
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&log), 0o600);
    let work = scratch_dir();
    // A job's secret goes to the store; another user's job cannot read it there.
    let secret = submitted(&submit_as(
        &server,
        as_(CAROL),
        &json!({"commandFile": "/bin/true", "initialWorkingDirectory": work.path(), "holds": ["User"],
               "environmentVariables": {"TOKEN": "s3cret"}}),
    ));
    assert!(!secret.is_empty());
    for file in ["drover.db", "drover.db-wal"] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    let out = work.path().join("peek.txt");
    let peek = script(
        work.path(),
        "peek.sh",
        &format!(
            "cat {dir}/drover.db-wal {dir}/drover.db {dir}/events.log >/dev/null 2>&1 && echo read || echo denied",
            dir = data.display()
        ),
    );
    let id = submitted(&submit_as(
        &server,
        as_(BOB),
        &json!({"commandFile": peek, "initialWorkingDirectory": work.path(), "standardOutputFilePath": out}),
    ));
    wait_state_v2(&server, &id, "Completed");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "denied\n");
}

// 8. Reservations by ordinary users: administrators only by default, else bounded.
#[test]
fn ordinary_users_reserve_only_within_the_limits() {
    if !system_accounts() {
        return;
    }
    let reserve = |server: &TestServer, who: Auth, body: Value| {
        send(server, "POST", "/rest/reservations", who, &body)
    };
    let year = json!({"hostListExpression": "n1,n2", "duration": 365 * 86_400,
                      "flags": ["DEDICATEDRESOURCE"]});
    let server = with_accounts().start();
    let refused = reserve(&server, as_(BOB), year.clone());
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.messages().contains("only administrators"));
    assert_eq!(server.get("/rest/reservations").json()["totalCount"], 0);
    drop(server);

    let server = with_accounts()
        .config(|c| {
            c.scheduler.limits.user_reservation_max_seconds = 3600;
            c.scheduler.limits.user_reservation_max_processors = Some(2);
        })
        .start();
    let long = reserve(&server, as_(BOB), year.clone());
    assert_eq!(long.status, 400, "{}", long.body);
    assert!(long.messages().contains("user_reservation_max_seconds"));
    let wide = reserve(
        &server,
        as_(BOB),
        json!({"hostListExpression": "n1,n2", "duration": 600}),
    );
    assert_eq!(wide.status, 400, "{}", wide.body);
    assert!(wide.messages().contains("user_reservation_max_processors"));
    let theirs = reserve(
        &server,
        as_(BOB),
        json!({"hostListExpression": "n1", "duration": 600, "owner": {"name": CAROL}}),
    );
    assert_eq!(theirs.status, 403, "{}", theirs.body);
    for _ in 0..4 {
        let fits = reserve(&server, as_(BOB), json!({"taskCount": 1, "duration": 600}));
        assert_eq!(fits.status, 201, "{}", fits.body);
    }
    let fifth = reserve(&server, as_(BOB), json!({"taskCount": 1, "duration": 600}));
    assert_eq!(fifth.status, 400, "{}", fifth.body);
    assert!(fifth.messages().contains("user_reservation_max_count"));
    // Administrators are not limited.
    let admins = reserve(
        &server,
        Auth::Admin,
        json!({"hostListExpression": "n2", "duration": 365 * 86_400}),
    );
    assert_eq!(admins.status, 201, "{}", admins.body);
}

/// The whole answer on a new connection to `server` after writing `head`, and how long
/// it took to come (the server closes the connection after it).
fn raw_answer(server: &TestServer, head: &[u8]) -> (String, Duration) {
    let mut stream = TcpStream::connect(&server.address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = Instant::now();
    stream.write_all(head).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

// 9. Requests cost little before their login is good, and slow or oversized ones end.
#[test]
fn large_bodies_wait_for_a_good_login_and_slow_requests_are_cut_off() {
    let server = TestServer::builder()
        .config(|c| {
            c.header_timeout_seconds = 1;
            c.body_timeout_seconds = 1;
        })
        .start();
    // A large body announced with a wrong password: answered before any of it is sent.
    let head = format!(
        "POST /rest/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {}\r\n\
         Content-Type: application/json\r\nContent-Length: 5000000\r\n\r\n",
        basic("alice", "wrong")
    );
    let (answer, took) = raw_answer(&server, head.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("\"messages\""), "{answer}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // A head sent too slowly: the connection is closed.
    let (answer, took) = raw_answer(&server, b"GET /rest/diag/about HTTP/1.1\r\nHo");
    assert!(!answer.contains("200 OK"), "{answer}");
    assert!(took < Duration::from_secs(10), "closed after {took:?}");
    // A body sent too slowly: 408 in JSON.
    let head = format!(
        "POST /rest/test/none HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"a\":",
        basic("admin", PASSWORD)
    );
    let (answer, took) = raw_answer(&server, head.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive in time"), "{answer}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // Too long a target, too many headers: JSON answers.
    let long = server.get(&format!("/rest/jobs?query={}", "x".repeat(20_000)));
    assert_eq!(long.status, 414, "{}", long.body);
    assert!(long.messages().contains("too long"), "{}", long.body);
    let mut head = "GET /rest/diag/about HTTP/1.1\r\nHost: x\r\n".to_string();
    for i in 0..150 {
        head.push_str(&format!("X-Filler-{i}: {i}\r\n"));
    }
    head.push_str("\r\n");
    let (answer, _) = raw_answer(&server, head.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert!(answer.contains("\"messages\""), "{answer}");
}

// 9. Another user's job is answered as missing; a path a user cannot reach is answered
//    like one that does not exist.
#[test]
fn answers_tell_nothing_of_what_a_user_may_not_see() {
    if !system_accounts() {
        return;
    }
    let server = with_accounts().start();
    let work = scratch_dir();
    let carols = submitted(&submit_as(
        &server,
        as_(CAROL),
        &json!({"commandFile": "/bin/true", "initialWorkingDirectory": work.path(), "holds": ["User"]}),
    ));
    for (method, path, body) in [
        ("PUT", format!("/rest/jobs/{carols}/hold"), json!({})),
        (
            "PUT",
            format!("/rest/jobs/{carols}?api-version=2"),
            json!({"customName": "x"}),
        ),
        ("DELETE", format!("/rest/jobs/{carols}"), json!({})),
        ("GET", format!("/rest/jobs/{carols}"), json!({})),
    ] {
        let theirs = send(&server, method, &path, as_(BOB), &body);
        let missing = send(
            &server,
            method,
            &path.replace(&carols, "Drover.999"),
            as_(BOB),
            &body,
        );
        assert_eq!(theirs.status, 404, "{method} {path}: {}", theirs.body);
        assert_eq!(missing.status, 404, "{method} {path}: {}", missing.body);
    }

    // A root-only directory with a world-readable script in it.
    let hidden = tempfile::tempdir().unwrap();
    std::fs::set_permissions(hidden.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let inside = hidden.path().join("inside");
    std::fs::create_dir(&inside).unwrap();
    std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o755)).unwrap();
    let there = script(hidden.path(), "there.sh", "true");
    let answer = |body: Value| {
        let reply = submit_as(&server, as_(BOB), &body);
        assert_eq!(reply.status, 400, "{}", reply.body);
        reply.messages()
    };
    let existing = answer(json!({"commandFile": "/bin/true", "initialWorkingDirectory": inside}));
    let absent = answer(
        json!({"commandFile": "/bin/true", "initialWorkingDirectory": hidden.path().join("absent")}),
    );
    assert_eq!(
        existing.replace("inside", "?"),
        absent.replace("absent", "?"),
        "the same answer for a directory there and one not there"
    );
    let existing = answer(json!({"commandFile": there, "initialWorkingDirectory": work.path()}));
    let absent = answer(json!({"commandFile": hidden.path().join("gone.sh"),
                               "initialWorkingDirectory": work.path()}));
    assert_eq!(
        existing.replace("there.sh", "?"),
        absent.replace("gone.sh", "?")
    );
    // Nor through a symbolic link a user may make anywhere.
    let link_there = work.path().join("link-there");
    let link_gone = work.path().join("link-gone");
    std::os::unix::fs::symlink(hidden.path().join("there.sh"), &link_there).unwrap();
    std::os::unix::fs::symlink(hidden.path().join("gone.sh"), &link_gone).unwrap();
    let existing =
        answer(json!({"commandFile": link_there, "initialWorkingDirectory": work.path()}));
    let absent = answer(json!({"commandFile": link_gone, "initialWorkingDirectory": work.path()}));
    assert_eq!(
        existing.replace("link-there", "?"),
        absent.replace("link-gone", "?")
    );
    let dir_there = work.path().join("dir-there");
    let dir_gone = work.path().join("dir-gone");
    std::os::unix::fs::symlink(&inside, &dir_there).unwrap();
    std::os::unix::fs::symlink(hidden.path().join("absent"), &dir_gone).unwrap();
    let existing =
        answer(json!({"commandFile": "/bin/true", "initialWorkingDirectory": dir_there}));
    let absent = answer(json!({"commandFile": "/bin/true", "initialWorkingDirectory": dir_gone}));
    assert_eq!(
        existing.replace("dir-there", "?"),
        absent.replace("dir-gone", "?")
    );
}

/// VMs as ordinary users: carol's VM is invisible and untouchable to bob; bob's job in a
/// VM runs as bob (its outputs are his, and the command file is read as him: swapped
/// for a link to `/etc/shadow` after submission, it is refused, and nothing of it
/// reaches the guest or the outputs); bob may hold only so many VMs.
#[test]
fn vms_are_their_owners_and_a_job_in_a_vm_reads_only_what_its_user_may() {
    if !system_accounts() {
        return;
    }
    let builder = TestServer::builder().user(BOB, false).user(CAROL, false);
    let Some((server, _guests)) = crate::vms::start(builder, |c| {
        c.scheduler.limits.user_vm_max_count = 1;
    }) else {
        return;
    };
    let created = send(
        &server,
        "POST",
        "/rest/vms",
        as_(CAROL),
        &json!({"id": "carols"}),
    );
    assert_eq!(created.status, 202, "{}", created.body);
    let setup = created.json()["jobId"].as_str().unwrap().to_string();
    for (method, path, body) in [
        ("GET", "/rest/vms/carols", Value::Null),
        ("PUT", "/rest/vms/carols", json!({"powerState": "OFF"})),
        ("PUT", "/rest/vms/carols", json!({"node": {"id": "ANY"}})),
        ("DELETE", "/rest/vms/carols", Value::Null),
    ] {
        let reply = send(&server, method, path, as_(BOB), &body);
        assert_eq!(reply.status, 404, "{method} {path} as bob: {}", reply.body);
    }
    for path in [
        "/rest/vms",
        "/rest/nodes/node01/vms",
        "/rest/pending-actions",
    ] {
        let listed = server.get_as(as_(BOB), path).json();
        assert!(!listed.to_string().contains("carols"), "{path}: {listed}");
    }
    // carol's setup job is a job of hers: bob cannot act on it either.
    let cancel = server.send("DELETE", &format!("/rest/jobs/{setup}"), as_(BOB));
    assert_eq!(cancel.status, 404, "{}", cancel.body);
    // The VM limit of an ordinary user.
    let mine = send(
        &server,
        "POST",
        "/rest/vms",
        as_(CAROL),
        &json!({"id": "second"}),
    );
    mine.assert_refused(400, "user_vm_max_count", &"carol's second VM");

    let work = scratch_dir();
    let command = script(work.path(), "job.sh", "echo from-the-guest");
    std::os::unix::fs::chown(&command, Some(uid_of(BOB)), None).unwrap();
    let out = work.path().join("job.out");
    let err = work.path().join("job.err");
    let reply = send(
        &server,
        "POST",
        "/rest/jobs?api-version=2",
        as_(BOB),
        &json!({"commandFile": command, "initialWorkingDirectory": work.path(),
                "vmUsagePolicy": "CREATEVM", "holds": ["User"],
                "standardOutputFilePath": out, "standardErrorFilePath": err}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let id = reply.json()["name"].as_str().unwrap().to_string();
    // While held, the command file becomes a link to what only root may read.
    std::fs::remove_file(&command).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", &command).unwrap();
    release(&server, as_(BOB), &id);
    let job = server.wait_for(
        &format!("/rest/jobs/{id}?api-version=2"),
        "the job ends",
        |j| j["states"]["state"] == "Completed",
    );
    assert_eq!(job["completionCode"], 125, "{job}");
    let said = std::fs::read_to_string(&err).unwrap();
    assert!(said.contains("cannot read the command file"), "{said}");
    let printed = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(!printed.contains("root:"), "{printed}");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&err).unwrap().uid(), uid_of(BOB));
    wait_until("bob's job VM is gone", || {
        server.get(&format!("/rest/vms/job-{id}")).status == 404
    });
}

/// Bearer tokens (#33): an ordinary user's token is no more than their password; another
/// user's token can be neither used as theirs nor revoked by them; guessing tokens is
/// counted as failed logins are.
#[test]
fn tokens_give_their_user_nothing_more_and_cannot_be_guessed_or_revoked_by_another() {
    use crate::oauth::{bearer, clients, post_form, token_for};
    if !system_accounts() {
        return;
    }
    let server = with_accounts().config(clients).start();
    let bobs = token_for(&server, BOB);
    let carols = token_for(&server, CAROL);
    let carols_job = submitted(&submit_as(
        &server,
        bearer(&carols),
        &json!({"commandFile": "/bin/true", "holds": ["User"]}),
    ));
    // Bob's token is bob: carol's job is not his, security is not his, nor is proxying.
    let path = format!("/rest/jobs/{carols_job}?api-version=2");
    assert_eq!(server.get_as(bearer(&bobs), &path).status, 404);
    assert_eq!(server.get_as(as_(CAROL), &path).status, 200);
    assert_eq!(server.get_as(bearer(&bobs), "/rest/roles").status, 403);
    let proxied = server.get_as(bearer(&bobs), &format!("{path}&proxy-user={CAROL}"));
    assert_eq!(proxied.status, 404, "{}", proxied.body);
    // Nor may bob take carol's token away: not as a client, not as an administrator.
    let reply = post_form(&server, "/oauth/revoke", as_(BOB), &[("token", &carols)]);
    assert_eq!(reply.status, 401, "{}", reply.body);
    let reply = server.send(
        "DELETE",
        &format!("/rest/oauth/tokens/{CAROL}"),
        bearer(&bobs),
    );
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert_eq!(server.get_as(bearer(&carols), &path).status, 200);
    // A token is not a password.
    let reply = server.get_as(Auth::Basic(CAROL.into(), carols.clone()), &path);
    assert_eq!(reply.status, 401, "{}", reply.body);
    // Guessing tokens gains nothing (256 random bits) and blocks nothing: wrong tokens
    // are refused, and bob's own token and carol's password from the same address pass
    // (issue #53: a portal sending expired tokens must not lock its users out).
    let server = with_accounts()
        .config(|c| {
            clients(c);
            c.access.max_failed_logins = 3;
            c.access.failed_login_window_seconds = 60;
        })
        .start();
    let bobs = token_for(&server, BOB);
    for guess in ["x", &"A".repeat(43), &format!("{}x", &bobs[..42]), "y", "z"] {
        let reply = server.get_as(bearer(guess), "/rest/diag/auth");
        assert_eq!(reply.status, 401, "{guess}: {}", reply.body);
    }
    assert_eq!(server.get_as(bearer(&bobs), "/rest/diag/auth").status, 200);
    assert_eq!(server.get_as(as_(CAROL), "/rest/diag/auth").status, 200);
}
