//! Connections a stranger opens and never uses (issue #53, item 5): 1,100 of them took
//! every descriptor at the default limit of 1,024, and the accept loop starved until the
//! 30 s head timeout freed some. Now connections are bounded per source and in all, a
//! silent one is closed sooner than one that is sending, and the open-file limit is
//! raised at start (jobs keep the one the service was given).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

use drover_testkit::{Auth, TestServer, connect_from, scratch_dir, submit_v2, wait_state_v2};
use serde_json::json;

const HEALTH: &str = "/rest/diag/health/summary";

/// Whether the server has closed `stream` (read returns the end, or a reset); waits up
/// to 30 s.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Err(e) => e.kind() == ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

fn health_from(server: &TestServer, source: Ipv4Addr) -> u16 {
    server
        .call_from(source, "GET", HEALTH, Auth::None, None)
        .status
}

#[test]
fn idle_connections_from_one_source_cannot_starve_the_others() {
    let server = TestServer::builder()
        .config(|c| {
            c.max_connections_per_source = 20;
            c.idle_connection_seconds = 2;
        })
        .start();
    let attacker = Ipv4Addr::new(127, 0, 0, 88);
    let mut idle: Vec<TcpStream> = (0..300)
        .map(|_| connect_from(attacker, &server.address))
        .collect();
    // Others are served at once, while the attacker's connections are open.
    assert_eq!(health_from(&server, Ipv4Addr::new(127, 0, 0, 1)), 200);
    // Every one of the attacker's is closed by the server: those past the bound at once,
    // the 20 within it when they have sent nothing for 2 s.
    for (i, stream) in idle.iter_mut().enumerate() {
        assert!(closed_by_server(stream), "connection {i} is still open");
    }
    // And the attacker is served again once its connections are gone.
    assert_eq!(health_from(&server, attacker), 200);
}

#[test]
fn a_silent_connection_is_closed_sooner_than_one_that_is_sending() {
    let server = TestServer::builder()
        .config(|c| c.idle_connection_seconds = 1)
        .start();
    let source = Ipv4Addr::new(127, 0, 0, 89);
    let mut silent = connect_from(source, &server.address);
    let mut sending = connect_from(source, &server.address);
    sending
        .write_all(format!("GET {HEALTH} HTTP/1.1\r\n").as_bytes())
        .unwrap();
    assert!(closed_by_server(&mut silent), "the silent one is closed");
    // The other has its head timeout (30 s) to finish, and is answered.
    sending
        .write_all(b"Host: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    sending.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn a_full_server_makes_room_for_a_newcomer_at_the_expense_of_the_heaviest_source() {
    let server = TestServer::builder()
        .config(|c| {
            c.max_connections = 40;
            c.max_connections_per_source = 30;
        })
        .start();
    // Two sources fill the server with connections that sent a byte (past the idle
    // timeout's reach, within the head's).
    let mut held: Vec<TcpStream> = [(90, 30), (91, 10)]
        .iter()
        .flat_map(|&(last, count)| (0..count).map(move |_| Ipv4Addr::new(127, 0, 0, last)))
        .map(|source| {
            let mut stream = connect_from(source, &server.address);
            stream.write_all(b"G").unwrap();
            stream
        })
        .collect();
    // A newcomer is served, and the oldest connection of the heaviest source went.
    assert_eq!(health_from(&server, Ipv4Addr::new(127, 0, 0, 92)), 200);
    assert!(
        closed_by_server(&mut held[0]),
        "the heaviest source's oldest"
    );
}

/// A client that asks and never takes the answers: its connection is closed once no
/// answer has moved for the write timeout (`body_timeout_seconds`).
#[test]
fn a_client_that_takes_no_answer_loses_its_connection() {
    let server = TestServer::builder()
        .config(|c| c.body_timeout_seconds = 1)
        .start();
    let mut stream = connect_from(Ipv4Addr::new(127, 0, 0, 93), &server.address);
    shrink_receive_buffer(&stream);
    let request = "GET /dashboard/app.js HTTP/1.1\r\nHost: x\r\n\r\n".repeat(400);
    stream.write_all(request.as_bytes()).unwrap();
    drover_testkit::wait_until("the server closes the connection", || peer_closed(&stream));
}

/// Whether the peer has closed the connection (TCP state CLOSE_WAIT, or CLOSE after a
/// reset), told without reading what is waiting to be read.
fn peer_closed(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a getsockopt of the stream's own socket into a struct of the right size.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut size = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let got = libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut size,
        );
        got == 0 && matches!(info.tcpi_state, 7 | 8)
    }
}

/// A small receive buffer, so that answers not read stall the server's writes soon.
fn shrink_receive_buffer(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let bytes: libc::c_int = 4096;
    // SAFETY: a setsockopt of the stream's own socket with an int.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw const bytes).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[test]
fn the_service_raises_its_open_file_limit_and_jobs_keep_the_one_it_was_given() {
    let server = TestServer::start();
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let open_files = |limits: &str| -> (String, String) {
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .expect("a limit of open files")
            .to_string();
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields[3].to_string(), fields[4].to_string())
    };
    let (soft, hard) = open_files(&limits);
    assert_eq!(soft, hard, "the service's soft limit is its hard one");
    let given = drover_shepherd::files_limit::for_jobs().expect("raised at start");
    let work = scratch_dir();
    let out = work.path().join("limits");
    let job = submit_v2(
        &server,
        json!({"commandFile": "/bin/sh",
               "commandLineArguments": format!("-c 'cat /proc/self/limits > {}'", out.display()),
               "initialWorkingDirectory": work.path()}),
    );
    wait_state_v2(&server, &job, "Completed");
    let jobs = std::fs::read_to_string(&out).unwrap();
    assert_eq!(open_files(&jobs).0, given.to_string(), "{jobs}");
}
