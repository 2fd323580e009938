//! Issue #53 items 16 and 17: what the command-line client trusts with a password. It
//! speaks HTTPS, believing only servers whose certificates the system's CAs or a CA file
//! of the user's signed; its `client.toml` decides where the password goes (`url`), so
//! one that anybody else could change is refused, and so is a CA file.

use std::fs::Permissions;
use std::io::BufRead as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use drover_testkit::{BOB, CAROL, gid_of, system_accounts, uid_of};

use super::client::{Shell, report, settings, with_environment_of};
use super::{Server, serve};

/// A server (stopped when dropped, before its data directory goes) and a user's shell.
fn started() -> (Shell, Server, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path(), &[]);
    (Shell::new(&server), server, data)
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, Permissions::from_mode(mode)).unwrap();
}

fn chown(path: &Path, user: &str) {
    std::os::unix::fs::chown(path, Some(uid_of(user)), Some(gid_of(user))).unwrap();
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Refused as a usage error (2), the message holding `says`.
fn assert_refused(output: &Output, says: &str) {
    assert_eq!(output.status.code(), Some(2), "{}", report(output));
    assert!(stderr(output).contains(says), "{}", report(output));
}

/// A file (with a password) that its group or others could read or change, or in a
/// directory they could change, is refused with the command that mends it.
#[test]
fn client_refuses_a_configuration_file_others_could_change() {
    let (shell, _server, _data) = started();
    let file = shell.config_file(&shell.url);
    let dir = file.parent().unwrap();
    for mode in [0o622, 0o644, 0o640, 0o604, 0o610] {
        chmod(&file, mode);
        let output = shell.bare(&["jobs"]).output().unwrap();
        assert_refused(&output, &format!("run: chmod 600 {}", file.display()));
    }
    chmod(&file, 0o600);
    for mode in [0o770, 0o730, 0o707] {
        chmod(dir, mode);
        let output = shell.bare(&["jobs"]).output().unwrap();
        assert_refused(&output, &format!("run: chmod go-w {}", dir.display()));
    }
    chmod(dir, 0o700);
    let output = shell.bare(&["jobs"]).output().unwrap();
    assert!(output.status.success(), "{}", report(&output));
    assert!(output.stdout.starts_with(b"ID "), "{}", report(&output));
}

/// The attack of the review, with real accounts: bob's `client.toml` is mode 622, and
/// carol rewrites its `url` in place (she may write it, not read it) to a server of
/// hers. Bob's client refuses the file and sends her nothing. A file or directory of
/// carol's is refused too; bob's own file, 600 in his own 700 directory, works.
#[test]
fn another_user_cannot_send_the_clients_password_elsewhere() {
    if !system_accounts() {
        return;
    }
    let (shell, _server, _data) = started();
    // Bob's home, as homes usually are: everyone may pass through it.
    let homes = tempfile::tempdir().unwrap();
    chmod(homes.path(), 0o755);
    let home = homes.path().join("bob");
    let dir = home.join(".config/drover");
    std::fs::create_dir_all(&dir).unwrap();
    for path in [&home, &home.join(".config"), &dir] {
        chown(path, BOB);
        chmod(path, 0o755);
    }
    let file = dir.join("client.toml");
    // Room after the url for carol's, whatever the length of its port.
    let text = settings(&shell.url, &shell.password).replacen('\n', "      \n", 1);
    std::fs::write(&file, &text).unwrap();
    chown(&file, BOB);
    chmod(&file, 0o622);
    let bobs_jobs = || {
        shell
            .bare(&["jobs"])
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .current_dir(&home)
            .uid(uid_of(BOB))
            .gid(gid_of(BOB))
            .output()
            .expect("the drover binary runs as drover-bob (its directories must let others in)")
    };

    let hers = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    hers.set_nonblocking(true).unwrap();
    let line = format!("url = \"http://{}\"", hers.local_addr().unwrap());
    let first = text.lines().next().unwrap();
    assert!(line.len() <= first.len(), "{line} does not fit in {first}");
    let mut rewrite = Command::new("dd")
        .args([
            format!("of={}", file.display()).as_str(),
            "conv=notrunc",
            "status=none",
        ])
        .uid(uid_of(CAROL))
        .gid(gid_of(CAROL))
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let padded = format!("{line:<width$}", width = first.len());
    std::io::Write::write_all(&mut rewrite.stdin.take().unwrap(), padded.as_bytes()).unwrap();
    assert!(rewrite.wait().unwrap().success(), "carol could not write");
    let rewritten = std::fs::read_to_string(&file).unwrap();
    assert!(rewritten.starts_with(&line), "{rewritten}");
    assert_refused(&bobs_jobs(), &format!("run: chmod 600 {}", file.display()));
    // The client exited without calling her.
    assert_eq!(
        hers.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the client connected to carol's server"
    );

    // Back to bob's own text; a file of carol's is refused, and so is a directory of hers.
    std::fs::write(&file, &text).unwrap();
    chmod(&file, 0o600);
    chown(&file, CAROL);
    assert_refused(&bobs_jobs(), &format!("belongs to uid {}", uid_of(CAROL)));
    chown(&file, BOB);
    chown(&dir, CAROL);
    assert_refused(&bobs_jobs(), &format!("{}, which holds", dir.display()));
    chown(&dir, BOB);
    chmod(&dir, 0o700);
    let output = bobs_jobs();
    assert!(output.status.success(), "{}", report(&output));
    assert!(output.stdout.starts_with(b"ID "), "{}", report(&output));
}

/// Whether what a test needs is `here`; without it the test is skipped, unless `require`
/// is set to 1 (as `scripts/test` does as root).
fn available(here: bool, what: &str, require: &str) -> bool {
    if here {
        return true;
    }
    if std::env::var(require).as_deref() == Ok("1") {
        panic!("{what} is missing ({require}=1)");
    }
    eprintln!("skipped: needs {what}");
    false
}

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether `socat` and `openssl` are here to put TLS in front of a server.
fn tls_tools() -> bool {
    let here = runs("socat", &["-V"]) && runs("openssl", &["version"]);
    available(here, "socat and openssl", "DROVER_REQUIRE_SOCAT")
}

/// `openssl ARGS`, which must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        report(&output)
    );
}

/// A private CA in `dir` (`ca.pem`) and a certificate it signed for 127.0.0.1
/// (`server.crt`, `server.key`).
fn private_ca(dir: &Path) {
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = [
        "-subj",
        "/CN=Drover test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ];
    openssl(
        dir,
        &[&["req", "-x509", "-days", "2"][..], &key, &ca].concat(),
    );
    let server = [
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-addext",
        "basicConstraints=critical,CA:FALSE",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-keyout",
        "server.key",
        "-out",
        "server.crt",
    ];
    openssl(
        dir,
        &[&["req", "-x509", "-days", "2"][..], &key, &server].concat(),
    );
}

/// socat as a TLS terminator on 127.0.0.1 in front of a plain HTTP server, with the
/// certificate `private_ca` made in `dir`.
struct TlsProxy {
    child: Child,
    url: String,
}

impl TlsProxy {
    fn start(dir: &Path, backend: &str) -> TlsProxy {
        let rest = backend.strip_prefix("http://").unwrap();
        let (address, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        // A free port, taken again by socat; another program may take it meanwhile, so
        // try a few.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new("socat")
                .arg("-d")
                .arg("-d")
                .arg(format!(
                    "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert=server.crt,\
                     key=server.key,verify=0"
                ))
                .arg(format!("TCP:{address}"))
                .current_dir(dir)
                .process_group(0)
                .stderr(Stdio::piped())
                .spawn()
                .expect("socat starts");
            let said = std::io::BufReader::new(child.stderr.take().unwrap());
            let mut lines = said.lines().map_while(Result::ok);
            if lines.any(|line| line.contains("listening on")) {
                // Read on, so that socat never waits on a full pipe.
                std::thread::spawn(move || lines.for_each(drop));
                let url = format!("https://127.0.0.1:{port}{path}");
                return TlsProxy { child, url };
            }
            let _ = child.wait();
        }
        panic!("socat did not listen");
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        // socat and the children it forked for connections.
        // SAFETY: a signal to the process group socat leads (it was started in its own).
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// Issue #53 item 16: the client reaches a server over HTTPS. A certificate that no
/// trusted CA signed, or one for another name, is refused with a clear message (exit 3,
/// no panic); with the private CA's file (`--ca-file`, or `ca_file` in `client.toml`,
/// relative to it) the jobs are listed. A CA file that others could change, or that holds
/// no certificate, is refused.
#[test]
fn client_reaches_a_server_over_https_through_a_private_ca() {
    if !tls_tools() {
        return;
    }
    let (shell, server, _data) = started();
    let pki = tempfile::tempdir().unwrap();
    private_ca(pki.path());
    let proxy = TlsProxy::start(pki.path(), &server.url);
    let jobs = |extra: &[&str]| {
        let args = [&["jobs"][..], extra].concat();
        shell
            .command(&args)
            .env("DROVER_URL", &proxy.url)
            .output()
            .unwrap()
    };

    let untrusted = jobs(&[]);
    assert_eq!(untrusted.status.code(), Some(3), "{}", report(&untrusted));
    let said = stderr(&untrusted);
    assert!(
        said.contains("certificate verify failed") && said.contains("--ca-file"),
        "{said}"
    );
    assert!(!said.contains("panicked"), "{said}");

    let ca = pki.path().join("ca.pem");
    let output = jobs(&["--ca-file", ca.to_str().unwrap()]);
    assert!(output.status.success(), "{}", report(&output));
    assert!(output.stdout.starts_with(b"ID "), "{}", report(&output));
    // The certificate is for 127.0.0.1, not for another name of the same server.
    let elsewhere = proxy.url.replace("127.0.0.1", "localhost");
    let output = jobs(&["--ca-file", ca.to_str().unwrap(), "--url", &elsewhere]);
    assert_eq!(output.status.code(), Some(3), "{}", report(&output));
    assert!(
        stderr(&output).contains("hostname mismatch"),
        "{}",
        report(&output)
    );

    let file = shell.config_file(&proxy.url);
    let site_ca = file.with_file_name("site-ca.pem");
    std::fs::copy(&ca, &site_ca).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{text}ca_file = \"site-ca.pem\"\n")).unwrap();
    let output = shell.bare(&["jobs"]).output().unwrap();
    assert!(output.status.success(), "{}", report(&output));
    assert!(output.stdout.starts_with(b"ID "), "{}", report(&output));

    chmod(&site_ca, 0o664);
    let output = shell.bare(&["jobs"]).output().unwrap();
    assert_refused(&output, &format!("run: chmod go-w {}", site_ca.display()));
    chmod(&site_ca, 0o644);
    std::fs::write(&site_ca, "not a certificate\n").unwrap();
    let output = shell.bare(&["jobs"]).output().unwrap();
    assert_refused(&output, "holds no PEM certificate");
}

/// Plain HTTP to a host beyond the loopback: the client warns, once and before anything
/// is sent, that the password would cross the network in clear text. Run in a network
/// namespace of its own (`unshare --net`, as root), where 192.0.2.1 (TEST-NET-1) has no
/// route: the connection fails at once and no packet leaves the machine. Over the
/// loopback there is no warning.
#[test]
fn client_warns_before_sending_a_password_over_plain_http() {
    let isolated = runs("unshare", &["--net", "true"]);
    if !available(isolated, "unshare --net (root)", "DROVER_REQUIRE_NETNS") {
        return;
    }
    let (shell, _server, _data) = started();
    let drover = shell.command(&["jobs", "--url", "http://192.0.2.1:1"]);
    let output = with_environment_of(&drover, "unshare")
        .args(["--net", "--"])
        .arg(drover.get_program())
        .args(drover.get_args())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", report(&output));
    let said = stderr(&output);
    let warning = "drover: warning: sending your password to 192.0.2.1 over plain HTTP";
    assert_eq!(said.matches(warning).count(), 1, "{said}");
    assert!(
        said.find(warning) < said.find("cannot reach"),
        "the warning comes after the attempt: {said}"
    );

    let output = shell.run(&["jobs"]);
    assert!(output.status.success(), "{}", report(&output));
    assert!(
        !stderr(&output).contains("plain HTTP"),
        "{}",
        report(&output)
    );
}
