//! `drover serve` as a user starts it: the real binary, on 127.0.0.1:0, over HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

struct Server {
    child: Child,
    address: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(data_dir: &std::path::Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("drover starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    Server { child, address }
}

/// A minimal HTTP/1.1 GET: (status, body).
fn get(server: &Server, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(&server.address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

#[test]
fn health_summary_reports_the_embedded_store_and_unknown_paths_are_404() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let (status, body) = get(&server, "/rest/diag/health/summary");
    assert_eq!(status, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["datastore"]["connected"], "UP");
    assert!(dir.path().join("drover.db").exists());

    let (status, body) = get(&server, "/rest/no-such-thing");
    assert_eq!(status, 404);
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(error["messages"][0].is_string());
}

#[test]
fn restarts_on_the_same_data_directory_after_being_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = start(dir.path());
    first.child.kill().unwrap(); // SIGKILL
    first.child.wait().unwrap();
    let second = start(dir.path());
    assert_eq!(get(&second, "/rest/diag/health/summary").0, 200);
}
