//! A COMMIT whose answer never comes back (PostgreSQL): the connection is cut by a proxy
//! between the store and the database, after the COMMIT reached the server or before.
//! The store must answer what happened: made when the database committed, "not made"
//! when it did not, and in doubt (never "not made") while it cannot ask.

use std::io::{Read, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_store::{CollectionSpec, DocumentStore, Find, PostgresStore, StoreError};

/// What the proxy does to the next COMMIT, and to new connections.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Pass,
    /// Forward the COMMIT, let the server commit, then cut the connection: the answer
    /// is lost.
    CutAfterCommit,
    /// Cut the connection instead of forwarding the COMMIT: the server aborts.
    CutBeforeCommit,
}

struct Proxy {
    port: u16,
    mode: Arc<Mutex<Mode>>,
    /// New connections are closed at once while this is set.
    refusing: Arc<Mutex<bool>>,
}

impl Proxy {
    fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let refusing = Arc::new(Mutex::new(false));
        let (m, r) = (mode.clone(), refusing.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if *r.lock().unwrap() {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let mode = m.clone();
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || pump_to_server(client, server, mode));
                std::thread::spawn(move || pump(s2, c2));
            }
        });
        Proxy {
            port,
            mode,
            refusing,
        }
    }

    fn arm(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn refuse(&self, refusing: bool) {
        *self.refusing.lock().unwrap() = refusing;
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0; 16384];
    while let Ok(n) = from.read(&mut buffer) {
        if n == 0 || to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// Client to server, acting on the first COMMIT (a simple query) while armed.
fn pump_to_server(mut client: TcpStream, mut server: TcpStream, mode: Arc<Mutex<Mode>>) {
    let mut buffer = [0; 16384];
    while let Ok(n) = client.read(&mut buffer) {
        if n == 0 {
            break;
        }
        let chunk = &buffer[..n];
        let is_commit = chunk.windows(7).any(|w| w == b"COMMIT\0");
        let armed = {
            let mut mode = mode.lock().unwrap();
            let armed = *mode;
            if is_commit && armed != Mode::Pass {
                *mode = Mode::Pass;
            }
            armed
        };
        if is_commit && armed == Mode::CutBeforeCommit {
            break;
        }
        if is_commit && armed == Mode::CutAfterCommit {
            // The client is cut off first, so that the server's answer cannot reach it;
            // then the server gets the COMMIT and commits.
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.write_all(chunk);
            std::thread::sleep(Duration::from_millis(300));
            break;
        }
        if server.write_all(chunk).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}

/// The database URL with its host and port replaced by the proxy's, and the upstream
/// address; `None` when the URL does not name a TCP host and port.
fn through_proxy(url: &str) -> Option<(String, impl Fn(u16) -> String)> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, path) = rest.split_once('/')?;
    let (user, address) = authority.rsplit_once('@').unwrap_or(("", authority));
    address.rsplit_once(':')?.1.parse::<u16>().ok()?;
    let (scheme, user, path) = (scheme.to_string(), user.to_string(), path.to_string());
    let at = if user.is_empty() { "" } else { "@" };
    Some((address.to_string(), move |port: u16| {
        format!("{scheme}://{user}{at}127.0.0.1:{port}/{path}")
    }))
}

mod support;

fn schema() -> String {
    support::unique_schema("lost")
}

fn put(store: &PostgresStore, id: &str) -> drover_store::Result<Vec<i64>> {
    support::put_thing(store, id)
}

fn stored(store: &PostgresStore, id: &str) -> bool {
    store.find("things", Find::Id(id)).unwrap().is_some()
}

#[test]
fn a_commit_whose_answer_is_lost_is_answered_by_what_the_database_did() {
    let Some(url) = drover_store::test_postgres_url() else {
        eprintln!("no PostgreSQL for the test run; skipped");
        return;
    };
    let Some((upstream, proxied)) = through_proxy(&url) else {
        eprintln!("{url} names no TCP host and port for a proxy; skipped");
        return;
    };
    let proxy = Proxy::start(upstream);
    let schema = schema();
    let store = PostgresStore::connect_in_schema(&proxied(proxy.port), Some(&schema)).unwrap();
    store
        .ensure_collection(&CollectionSpec::new("things"))
        .unwrap();
    put(&store, "before").unwrap();

    // The server committed; its answer was lost: the write was made, and says so.
    proxy.arm(Mode::CutAfterCommit);
    put(&store, "committed").expect("a commit the database made is answered made");
    assert!(stored(&store, "committed"));

    // The COMMIT never reached the server: the transaction aborted, "not made".
    proxy.arm(Mode::CutBeforeCommit);
    match put(&store, "aborted") {
        Err(StoreError::Backend(_)) => {}
        other => panic!("expected an ordinary failure, got {other:?}"),
    }
    assert!(!stored(&store, "aborted"));

    // The database cannot be asked: in doubt, never "not made", until it can be.
    proxy.arm(Mode::CutBeforeCommit);
    proxy.refuse(true);
    match put(&store, "unknown") {
        Err(StoreError::InDoubt(_)) => {}
        other => panic!("expected an answer in doubt, got {other:?}"),
    }
    assert!(store.settle().is_err(), "nothing can be asked yet");
    proxy.refuse(false);
    store
        .settle()
        .expect("the database says the transaction aborted");
    assert!(!stored(&store, "unknown"));
    put(&store, "after").unwrap();
    assert!(stored(&store, "before") && stored(&store, "after"));

    // Two writes in doubt, the first committed after all, the second not: settling must
    // not take the second's abort for both.
    for (mode, id) in [
        (Mode::CutAfterCommit, "late"),
        (Mode::CutBeforeCommit, "never"),
    ] {
        // A read leaves a connection in the pool for the write; then only the lookups
        // of its outcome are refused.
        stored(&store, "before");
        proxy.refuse(true);
        proxy.arm(mode);
        match put(&store, id) {
            Err(StoreError::InDoubt(_)) => {}
            other => panic!("expected an answer in doubt for {id}, got {other:?}"),
        }
        proxy.refuse(false);
    }
    assert!(
        store.settle().is_err(),
        "a write that committed is not settled as not made"
    );
    assert!(stored(&store, "late") && !stored(&store, "never"));

    let _ = store.drop_schema();
}
