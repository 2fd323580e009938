//! Issue #53 items 16 and 17: what the command-line client trusts with a password. Its
//! `client.toml` decides where the password goes (`url`), so one that anybody else could
//! change is refused.

use std::fs::Permissions;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use drover_testkit::{BOB, CAROL, gid_of, system_accounts, uid_of};

use super::client::{Shell, report, settings};
use super::serve;

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
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path(), &[]);
    let shell = Shell::new(&server);
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
    let data = tempfile::tempdir().unwrap();
    let server = serve(data.path(), &[]);
    let shell = Shell::new(&server);
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
