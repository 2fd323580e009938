//! Issue #33 item 1: the command-line client (`drover jobs`, `submit`, `job ...`), the
//! real binary against a real server, as a user at a shell or a script would run it.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::{Server, basic, drover, generated_password, portal_config, post, serve};

/// A user's environment: the server and login in variables, a home of its own (so no
/// real client.toml is read).
pub(crate) struct Shell {
    pub(crate) url: String,
    pub(crate) password: String,
    pub(crate) home: tempfile::TempDir,
}

impl Shell {
    pub(crate) fn new(server: &Server) -> Shell {
        Shell {
            url: server.url.clone(),
            password: generated_password(&server.banner),
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// `drover ARGS` with only the home set: settings must come from a file or flags.
    pub(crate) fn bare(&self, args: &[&str]) -> Command {
        let mut command = drover();
        for variable in [
            "DROVER_URL",
            "DROVER_USER",
            "DROVER_PASSWORD",
            "DROVER_TOKEN",
            "DROVER_CA_FILE",
        ] {
            command.env_remove(variable);
        }
        command
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join("config"))
            .env("NO_COLOR", "1")
            .args(args)
            .stdin(Stdio::null());
        command
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = self.bare(args);
        command
            .env("DROVER_URL", &self.url)
            .env("DROVER_USER", "admin")
            .env("DROVER_PASSWORD", &self.password);
        command
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("drover runs")
    }

    /// Runs and expects success; gives standard output.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(output.status.success(), "{args:?}: {}", report(&output));
        String::from_utf8(output.stdout).unwrap()
    }

    /// Writes the default `client.toml` (server `url`, the administrator and their
    /// password), mode 600 in a directory of mode 700; answers its path.
    pub(crate) fn config_file(&self, url: &str) -> PathBuf {
        let file = self.home.path().join("config/drover/client.toml");
        let dir = file.parent().unwrap();
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(&file, settings(url, &self.password)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        file
    }

    fn job(&self, id: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["job", "show", id, "--json"])).unwrap()
    }
}

/// `program`, with the environment that `command` would have: to run drover under
/// another program (`script`, `unshare`).
pub(crate) fn with_environment_of(command: &Command, program: &str) -> Command {
    let mut wrapper = Command::new(program);
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => wrapper.env(name, value),
            None => wrapper.env_remove(name),
        };
    }
    wrapper
}

/// `client.toml`'s text: the server at `url`, the administrator and their password.
pub(crate) fn settings(url: &str, password: &str) -> String {
    format!("url = \"{url}\"\nuser = \"admin\"\npassword = \"{password}\"\n")
}

pub(crate) fn report(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The table row that starts with `id`.
fn row<'a>(table: &'a str, id: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(id))
        .unwrap_or_else(|| panic!("no row {id} in\n{table}"))
}

/// A directory the service's execution user may read and write its output in, and a script
/// there.
fn readable_script(dir: &Path, text: &str) -> String {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let script = dir.join("job.sh");
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script.display().to_string()
}

#[test]
fn client_submits_lists_and_changes_jobs() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path(), &[]);
    let shell = Shell::new(&server);

    // From a script whose #DROVER lines give the options.
    let scripts = tempfile::tempdir().unwrap();
    // (Jobs run as the service's execution user: it must be able to work there.)
    let dir = scripts.path().display().to_string();
    let script = readable_script(
        scripts.path(),
        "#!/bin/sh\n#DROVER --processors 2 --time 1:00:00\n#DROVER -J scripted --hold\nsleep 300\n",
    );
    // From flags, held; the same Idempotency-Key again makes no second job.
    let flagged = [
        "submit",
        "--command",
        "/bin/sleep",
        "--args",
        "300",
        "--name",
        "flagged",
        "-n",
        "1",
        "--time",
        "10m",
        "--hold",
        "--dir",
        &dir,
        "--idempotency-key",
        "cli-1",
    ];
    let id = shell.ok(&flagged).trim().to_string();
    assert!(!id.is_empty());
    assert_eq!(shell.ok(&flagged).trim(), id);

    let scripted = shell.ok(&["submit", &script]).trim().to_string();
    assert_eq!(shell.job(&id)["initialWorkingDirectory"], dir.as_str());
    let job = shell.job(&scripted);
    assert_eq!(job["name"], "scripted");
    assert_eq!(job["commandFile"], script.as_str());
    assert_eq!(job["durationRequested"], 3600);
    assert_eq!(job["requirements"][0]["requiredProcessorCountMinimum"], 2);
    assert_eq!(job["holds"], serde_json::json!(["USER"]));

    // The queue as a table, and as JSON; filters go to the server's query.
    let table = shell.ok(&["jobs"]);
    assert!(table.starts_with("ID "), "{table}");
    let line = row(&table, &id);
    assert!(
        line.contains("admin") && line.contains("flagged") && line.contains("10m00s"),
        "{line}"
    );
    assert!(row(&table, &scripted).contains("1h00m"), "{table}");
    let listed: serde_json::Value = serde_json::from_str(&shell.ok(&["jobs", "--json"])).unwrap();
    assert_eq!(listed["totalCount"], 2, "{listed}");
    let paged: serde_json::Value =
        serde_json::from_str(&shell.ok(&["jobs", "--json", "--offset", "1", "--max", "1"]))
            .unwrap();
    assert_eq!(paged["resultCount"], 1, "{paged}");
    let state = job["state"].as_str().unwrap().to_lowercase();
    assert!(shell.ok(&["jobs", "--state", &state]).contains("scripted"));
    assert!(
        !shell
            .ok(&["jobs", "--state", "completed"])
            .contains("scripted")
    );
    assert!(
        !shell
            .ok(&["jobs", "--user", "somebody-else"])
            .contains("scripted")
    );

    let shown = shell.ok(&["job", "show", &scripted]);
    assert!(
        shown.contains("scripted") && shown.contains(&script) && shown.contains("1h00m"),
        "{shown}"
    );

    // Changes.
    shell.ok(&[
        "job", "modify", &scripted, "--name", "renamed", "--time", "20m",
    ]);
    let job = shell.job(&scripted);
    assert_eq!(
        (job["name"].as_str(), job["durationRequested"].as_i64()),
        (Some("renamed"), Some(1200))
    );
    assert!(shell.ok(&["job", "release", &id]).contains("released"));
    assert_eq!(shell.job(&id)["holds"], serde_json::json!([]));
    shell.ok(&["job", "hold", &id]);
    assert_eq!(shell.job(&id)["holds"], serde_json::json!(["USER"]));
    shell.ok(&["job", "cancel", &id, &scripted]);
    for cancelled in [&id, &scripted] {
        let state = shell.job(cancelled)["state"].clone();
        // Cancelling a running job passes through VACATED to REMOVED.
        assert!(
            ["REMOVED", "VACATED", "COMPLETED"].contains(&state.as_str().unwrap()),
            "{state}"
        );
    }

    // Ended jobs leave the queue, and are still there with --all.
    assert!(!shell.ok(&["jobs"]).contains("renamed"));
    assert!(row(&shell.ok(&["jobs", "--all"]), &scripted).contains("renamed"));

    // A refusal: exit 1 with the server's messages; one refused id does not stop the rest.
    let refused = shell.run(&["job", "hold", "no-such-job", &id]);
    assert_eq!(refused.status.code(), Some(1), "{}", report(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("no-such-job") && stderr.contains("No job"),
        "{stderr}"
    );
    let unsubmittable = shell.run(&["submit", "--command", "/no/such/program"]);
    assert_eq!(
        unsubmittable.status.code(),
        Some(1),
        "{}",
        report(&unsubmittable)
    );
    assert!(String::from_utf8_lossy(&unsubmittable.stderr).contains("/no/such/program"));
}

#[test]
fn client_exit_codes_and_configuration_file() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path(), &[]);
    let shell = Shell::new(&server);

    // Authentication: 4, with the server's messages.
    let output = shell
        .command(&["jobs"])
        .env("DROVER_PASSWORD", "wrong")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", report(&output));
    // No password and no terminal to ask on: 4, saying where one may come from.
    let output = shell
        .command(&["jobs"])
        .env_remove("DROVER_PASSWORD")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", report(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("DROVER_PASSWORD"));
    // Nobody listening: 3.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = shell
        .command(&["jobs"])
        .env("DROVER_URL", format!("http://127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", report(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot reach"));
    // Usage: 2.
    assert_eq!(
        shell.run(&["jobs", "--no-such-flag"]).status.code(),
        Some(2)
    );
    assert_eq!(shell.run(&["submit"]).status.code(), Some(2));
    assert_eq!(
        shell
            .run(&["submit", "--time", "soon", "-c", "/bin/true"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        shell.bare(&["jobs"]).output().unwrap().status.code(),
        Some(2)
    );
    // Help is no failure.
    for command in [
        &["jobs", "--help"][..],
        &["submit", "--help"],
        &["job", "cancel", "--help"],
    ] {
        let output = shell.run(command);
        assert!(
            output.status.success() && !output.stdout.is_empty(),
            "{}",
            report(&output)
        );
    }

    // The configuration file: refused while others can read its password, used once not.
    let file = shell.config_file(&shell.url);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let output = shell.bare(&["jobs"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", report(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("chmod 600"));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let output = shell.bare(&["jobs"]).output().unwrap();
    assert!(output.status.success(), "{}", report(&output));
    // Piped output has no colour, NO_COLOR or not.
    let plain = shell
        .bare(&["jobs"])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert!(
        plain.status.success() && !plain.stdout.contains(&0x1b),
        "{}",
        report(&plain)
    );
    // Flags win over the file.
    let output = shell
        .bare(&["jobs", "--login", "admin", "--url", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", report(&output));

    let completions = shell.bare(&["completions", "bash"]).output().unwrap();
    assert!(String::from_utf8_lossy(&completions.stdout).contains("_drover"));
}

#[test]
fn client_lists_nodes_reservations_events_vms_services() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path(), &[]);
    let shell = Shell::new(&server);

    let nodes = shell.ok(&["nodes"]);
    assert!(
        nodes.starts_with("ID ") && nodes.lines().count() >= 2,
        "{nodes}"
    );
    let reservation = shell.ok(&["reservations", "create", "-n", "1", "--duration", "1h"]);
    let reservation = reservation.trim();
    assert!(row(&shell.ok(&["reservations"]), reservation).contains("1h00m"));
    shell.ok(&["reservations", "delete", reservation]);
    assert!(!shell.ok(&["reservations"]).contains(reservation));
    assert!(shell.ok(&["vms"]).starts_with("ID "));
    assert!(shell.ok(&["services"]).starts_with("ID "));

    // Following the live stream: a job submitted meanwhile shows up.
    let mut follower = shell
        .command(&["events", "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(follower.stdout.take().unwrap()).lines();
    let (seen, wait_for_it) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Some(line) = lines
            .map_while(Result::ok)
            .find(|l| l.contains("jobsubmit"))
        {
            let _ = seen.send(line);
        }
    });
    // The stream is open once the server has it: submit until the follower shows one
    // (for at most 30 s, so that a silent stream fails the test rather than hangs it).
    let mut shown = None;
    for _ in 0..100 {
        shell.ok(&["submit", "-c", "/bin/true", "--hold"]);
        if let Ok(line) = wait_for_it.recv_timeout(std::time::Duration::from_millis(300)) {
            shown = Some(line);
            break;
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    assert!(shown.is_some(), "no submission shown by events --follow");
    let events = shell.ok(&["events", "--max", "5"]);
    assert!(
        events.starts_with("DATE ") && events.contains("jobsubmit"),
        "{events}"
    );
}

#[test]
fn client_logs_in_with_a_bearer_token() {
    let dir = tempfile::tempdir().unwrap();
    let config = portal_config(dir.path());
    let server = serve(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let shell = Shell::new(&server);
    let (status, answer) = post(
        &format!("{}/oauth/token", shell.url),
        &[("Authorization", &basic("portal", "portal-secret"))],
        "application/x-www-form-urlencoded",
        &format!(
            "grant_type=password&username=admin&password={}",
            shell.password
        ),
    );
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let token = answer["access_token"].as_str().unwrap();

    let with_token = |token: &str| {
        shell
            .bare(&["submit", "-c", "/bin/true", "--hold", "--name", "by-token"])
            .env("DROVER_URL", &shell.url)
            .env("DROVER_TOKEN", token)
            .output()
            .unwrap()
    };
    let output = with_token(token);
    assert!(output.status.success(), "{}", report(&output));
    assert!(shell.ok(&["jobs"]).contains("by-token"));
    let output = with_token("not-a-token");
    assert_eq!(output.status.code(), Some(4), "{}", report(&output));
}

/// Without a password from the environment or a file, the client asks on the terminal,
/// and what is typed is not echoed. (The terminal is a pseudo-terminal that util-linux's
/// `script` opens; the test is skipped where there is none.)
#[test]
fn client_asks_for_the_password_on_a_terminal_without_echo() {
    use std::io::{Read, Write};
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to open a terminal");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path(), &[]);
    let shell = Shell::new(&server);
    // `script` runs the command line in a pseudo-terminal; the environment is the bare
    // shell's, with the server and user but no password.
    let mut settings = shell.bare(&[]);
    settings
        .env("DROVER_URL", &shell.url)
        .env("DROVER_USER", "admin");
    let mut script = with_environment_of(&settings, "script");
    script.args([
        "-qec",
        &format!("{} jobs", env!("CARGO_BIN_EXE_drover")),
        "/dev/null",
    ]);
    let mut terminal = script
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("script starts");
    let mut screen = Vec::new();
    let mut output = terminal.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&screen).contains("Password for admin: ") {
        assert_eq!(
            output.read(&mut byte).unwrap(),
            1,
            "{}",
            String::from_utf8_lossy(&screen)
        );
        screen.push(byte[0]);
    }
    let mut input = terminal.stdin.take().unwrap();
    writeln!(input, "{}", shell.password).unwrap();
    output.read_to_end(&mut screen).unwrap();
    let status = terminal.wait().unwrap();
    let screen = String::from_utf8_lossy(&screen);
    assert!(status.success(), "{screen}");
    assert!(
        screen.contains("ID ") && screen.contains("STATE"),
        "{screen}"
    );
    assert!(
        !screen.contains(&shell.password),
        "the password was echoed: {screen}"
    );
}

impl Shell {
    /// The job `id` once it has ended (its JSON), polling `drover job show`.
    fn ended(&self, id: &str) -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let job = self.job(id);
            if job["completionCode"].is_number() {
                return job;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{id} did not end: {job}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// A newcomer's first job, as the generated administrator (no system account: its jobs
/// run as `nobody` when the service is root), in a folder `nobody` may enter but not
/// write: it
/// fails, and `drover job show` says why. A program given where a script may be runs
/// as the command.
#[test]
fn a_first_jobs_failure_is_shown_and_a_program_runs_as_the_command() {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path(), &[]);
    let shell = Shell::new(&server);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        assert!(
            server
                .banner
                .iter()
                .any(|l| l.contains("its jobs run as 'nobody'")),
            "{:?}",
            server.banner
        );
        let closed = tempfile::tempdir().unwrap();
        std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = closed.path().display().to_string();
        let id = shell.ok(&["submit", "--command", "/bin/echo", "--dir", &dir]);
        let job = shell.ended(id.trim());
        assert_ne!(job["completionCode"], 0, "{job}");
        let shown = shell.ok(&["job", "show", id.trim()]);
        assert!(
            shown
                .lines()
                .any(|l| l.starts_with("Message") && l.contains("cannot open")),
            "{shown}"
        );
    }

    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let dir = open.path().display().to_string();
    let id = shell.ok(&["submit", "--dir", &dir, "/bin/hostname"]);
    let job = shell.ended(id.trim());
    assert_eq!(job["commandFile"], "/bin/hostname", "{job}");
    assert_eq!(job["completionCode"], 0, "{job}");
    let number = id.trim().rsplit('.').next().unwrap();
    let output = std::fs::read_to_string(open.path().join(format!("job.o{number}"))).unwrap();
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(output.trim(), hostname.trim());
}
