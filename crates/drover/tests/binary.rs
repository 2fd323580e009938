//! The `drover` command as an operator uses it: the real binary, its output, signals.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    url: String,
    /// What it printed before serving.
    banner: Vec<String>,
    output: BufReader<std::process::ChildStdout>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn drover() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_drover"));
    for (variable, _) in drover::config::ENVIRONMENT {
        command.env_remove(variable);
    }
    command.env_remove("DROVER_CONFIG");
    command
}

/// Starts `drover serve` on port 0 with `args`, reading its banner up to the login hint.
fn serve(data_dir: &Path, args: &[&str]) -> Server {
    let mut child = drover()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("drover starts");
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut banner = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            output.read_line(&mut line).unwrap() > 0,
            "drover exited: {banner:?}"
        );
        banner.push(line.trim_end().to_string());
        if line.contains("curl -u") {
            break;
        }
    }
    let url = banner[0]
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_string();
    Server {
        child,
        url,
        banner,
        output,
    }
}

fn get(url: &str, user: &str, password: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.get(url);
    if !user.is_empty() {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request = request.header("Authorization", format!("Basic {token}"));
    }
    let mut response = request.call().expect("the server answers");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

fn generated_password(banner: &[String]) -> String {
    banner
        .iter()
        .find_map(|l| l.split("with the password: ").nth(1))
        .unwrap_or_else(|| panic!("no generated password in {banner:?}"))
        .trim()
        .to_string()
}

#[test]
fn a_newcomer_starts_it_logs_in_with_the_printed_password_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let first = serve(dir.path(), &[]);
    let password = generated_password(&first.banner);
    assert_eq!(password.len(), 24);
    let about = format!("{}/rest/diag/about", first.url);
    let (status, body) = get(&about, "admin", &password);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"version\""), "{body}");
    assert_eq!(get(&about, "admin", "guess").0, 401);
    assert_eq!(get(&about, "", "").0, 401);
    let users = std::fs::read_to_string(dir.path().join("users.toml")).unwrap();
    assert!(
        users.contains("$argon2id$") && !users.contains(&password),
        "{users}"
    );
    drop(first);

    // Killed and started again: no new password; the first one still works.
    let second = serve(dir.path(), &[]);
    assert!(
        second.banner.iter().all(|l| !l.contains("Generated")),
        "{:?}",
        second.banner
    );
    let about = format!("{}/rest/diag/about", second.url);
    assert_eq!(get(&about, "admin", &password).0, 200);
    let health = format!("{}/rest/diag/health/summary", second.url);
    assert_eq!(get(&health, "", "").0, 200);
}

#[test]
fn sigterm_stops_it_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path(), &[]);
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut server.output, &mut rest).unwrap();
    assert!(rest.contains("stopped"), "{rest}");
    // The store was flushed: the write-ahead log is folded into the database file.
    let wal = dir.path().join("drover.db-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0);
}

#[test]
fn configured_users_hashed_by_the_cli_and_added_users_log_in() {
    let dir = tempfile::tempdir().unwrap();
    let mut hash = drover()
        .arg("hash-password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    hash.stdin
        .take()
        .unwrap()
        .write_all(b"root-secret\n")
        .unwrap();
    let output = hash.wait_with_output().unwrap();
    assert!(output.status.success());
    let hashed = String::from_utf8(output.stdout).unwrap().trim().to_string();
    assert!(hashed.starts_with("$argon2id$"), "{hashed}");

    let config = dir.path().join("drover.toml");
    std::fs::write(
        &config,
        format!("base_url = \"/mws\"\n\n[[users]]\nname = \"root\"\npassword_hash = \"{hashed}\"\nadmin = true\n"),
    )
    .unwrap();
    let mut add = drover()
        .args(["user", "add", "bob", "--data-dir"])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    add.stdin
        .take()
        .unwrap()
        .write_all(b"bob-secret\n")
        .unwrap();
    assert!(add.wait().unwrap().success());

    let server = serve(dir.path(), &["--config", config.to_str().unwrap()]);
    assert!(server.url.ends_with("/mws"), "{}", server.url);
    assert!(
        server.banner.iter().all(|l| !l.contains("Generated")),
        "{:?}",
        server.banner
    );
    let about = format!("{}/rest/diag/about", server.url);
    assert_eq!(get(&about, "root", "root-secret").0, 200);
    assert_eq!(get(&about, "bob", "bob-secret").0, 200);
    assert_eq!(get(&about, "bob", "root-secret").0, 401);
}

#[test]
fn a_bad_configuration_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("drover.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\nbase_url = \"no-slash\"\n",
    )
    .unwrap();
    let output = drover()
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("base_url"), "{error}");

    let output = drover()
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .env("DROVER_LISTEN", "not-an-address")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("listen"));

    let output = drover().arg("frobnicate").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("usage"));
}
