//! A real Drover server for integration tests: [`TestServer::start`] runs
//! [`drover::launch_with`] on `127.0.0.1:0` with a temporary data directory (SQLite, or
//! PostgreSQL in a schema of its own with [`Builder::postgres`]), and the helpers talk
//! HTTP to it with a real client (`ureq`).
//!
//! With `DROVER_TEST_STORE=postgres`, every server uses PostgreSQL.
//!
//! Every server has two users: the administrator [`ADMIN`] and the ordinary user
//! [`USER`] (who holds the built-in `user` role), both with the password [`PASSWORD`]
//! (hashed at minimal argon2 cost so that tests stay quick). Failed-login throttling is
//! off unless a test turns it on.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use base64::Engine;
use drover::Config;
use drover_api::Routes;
use drover_auth::{User, password};
use serde_json::Value;

/// The servers of tests count what plugins' scripts hold as the `drover` binary does
/// (`drover_plugins::script`): every test binary that starts one has this allocator.
#[global_allocator]
static ALLOCATOR: drover_alloc::Metered<std::alloc::System> =
    drover_alloc::Metered(std::alloc::System);

pub const ADMIN: &str = "admin";
pub const USER: &str = "alice";
pub const PASSWORD: &str = "test-password";

/// Whose credentials a request carries.
#[derive(Debug, Clone)]
pub enum Auth {
    None,
    /// The administrator.
    Admin,
    /// The ordinary user.
    User,
    Basic(String, String),
    /// The `Authorization` header value as given.
    Header(String),
}

impl Auth {
    fn header(&self) -> Option<String> {
        let basic = |user: &str, pw: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"))
            )
        };
        match self {
            Auth::None => None,
            Auth::Admin => Some(basic(ADMIN, PASSWORD)),
            Auth::User => Some(basic(USER, PASSWORD)),
            Auth::Basic(user, pw) => Some(basic(user, pw)),
            Auth::Header(value) => Some(value.clone()),
        }
    }
}

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The body as JSON; panics (failing the test) when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?} (status {})", self.body, self.status))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `messages` of an error body, joined; panics when there are none.
    pub fn messages(&self) -> String {
        let json = self.json();
        let messages = json["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("no messages in {json}"));
        assert!(!messages.is_empty(), "empty messages in {json}");
        messages
            .iter()
            .map(|m| m.as_str().expect("messages are strings"))
            .collect::<Vec<_>>()
            .join(" / ")
    }

    /// Asserts that the request was refused with `status` and messages that mention
    /// `words`; `case` names the request in the failure.
    pub fn assert_refused(&self, status: u16, words: &str, case: &dyn std::fmt::Display) {
        assert_eq!(self.status, status, "{case}: {}", self.body);
        assert!(self.messages().contains(words), "{case}: {}", self.body);
    }
}

/// Configures a server before it starts.
pub struct Builder {
    config: Config,
    routes: Routes,
    dir: tempfile::TempDir,
    schema: Option<Schema>,
    /// Stay on SQLite even under `DROVER_TEST_STORE=postgres`.
    sqlite_only: bool,
}

/// A local user with the password [`PASSWORD`] (minimal argon2 cost: tests stay quick).
fn test_user(name: &str, admin: bool) -> User {
    User {
        name: name.into(),
        password_hash: password::hash(PASSWORD, password::Cost::Minimal),
        admin,
    }
}

/// A PostgreSQL schema that is dropped with the server.
struct Schema {
    url: String,
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(store) =
            drover_store::PostgresStore::connect_in_schema(&self.url, Some(&self.name))
        {
            let _ = store.drop_schema();
        }
    }
}

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

/// The PostgreSQL server of the test run, if there is one (see
/// [`drover_store::test_postgres_url`]).
pub use drover_store::test_postgres_url as postgres_url;

impl Builder {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut config = Config {
            listen: "127.0.0.1:0".into(),
            data_dir: dir.path().to_path_buf(),
            time_zone: Some("UTC".into()),
            users: vec![test_user(ADMIN, true), test_user(USER, false)],
            ..Config::default()
        };
        // Tests try many wrong logins on purpose; the throttling test turns this on.
        config.access.max_failed_logins = 0;
        config.scheduler.shepherd = Some(drover_binary());
        // A budget no list reaches on a busy machine: a test's answer must not depend
        // on how fast the machine is (the budget's own test forces it low).
        config.list_budget_ms = 3_600_000;
        // No KVM probe at each start (up to 2 s where KVM hangs): a test that wants the
        // service's own decision asks for `auto`.
        config.cloud.accel = drover::config::AccelChoice::Tcg;
        Self {
            config,
            routes: drover_api::interface(),
            dir,
            schema: None,
            sqlite_only: false,
        }
    }

    /// Keeps this server on SQLite whatever `DROVER_TEST_STORE` says.
    pub fn sqlite(mut self) -> Self {
        self.sqlite_only = true;
        self
    }

    /// Adds a local user with the password [`PASSWORD`].
    pub fn user(mut self, name: &str, admin: bool) -> Self {
        self.config.users.push(test_user(name, admin));
        self
    }

    pub fn config(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(&mut self.config);
        self
    }

    /// Adds routes (they pass through the same gate and layers as the interface's).
    pub fn routes(mut self, add: impl FnOnce(&mut Routes)) -> Self {
        add(&mut self.routes);
        self
    }

    /// Stores in PostgreSQL, in a fresh schema; `None` when no server is configured.
    pub fn postgres(mut self) -> Option<Self> {
        let url = postgres_url()?;
        let name = format!(
            "http{}_{}",
            std::process::id(),
            SCHEMAS.fetch_add(1, Ordering::SeqCst)
        );
        let separator = if url.contains('?') { '&' } else { '?' };
        self.config.store = Some(format!("{url}{separator}schema={name}"));
        self.schema = Some(Schema { url, name });
        Some(self)
    }

    pub fn start(self) -> TestServer {
        // DROVER_TEST_STORE=postgres runs every test server on PostgreSQL (scripts/test
        // runs the HTTP suite once more that way).
        let builder = if self.schema.is_none()
            && !self.sqlite_only
            && self.config.store.is_none()
            && std::env::var("DROVER_TEST_STORE").as_deref() == Ok("postgres")
        {
            self.postgres()
                .expect("DROVER_TEST_STORE=postgres needs DROVER_TEST_POSTGRES_URL")
        } else {
            self
        };
        let Builder {
            config,
            routes,
            dir,
            schema,
            ..
        } = builder;
        let prefix = config.normalized_base_url().expect("a valid base_url");
        let running = launch(config.clone(), routes);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        TestServer {
            address: running.address,
            prefix,
            agent,
            stop: std::sync::Mutex::new(Some(running.stop)),
            thread: Some(running.thread),
            config,
            _schema: schema,
            dir,
        }
    }
}

/// A server started on a thread of its own.
struct Running {
    address: String,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: JoinHandle<Result<(), String>>,
}

fn launch(config: Config, routes: Routes) -> Running {
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("port 0 is free");
            let failed = started_tx.clone();
            let result = drover::launch_with(
                config,
                routes,
                listener,
                async move {
                    let _ = stop_rx.await;
                },
                move |started| {
                    let _ = started_tx.send(Ok(started.address));
                },
            )
            .await;
            if let Err(e) = &result {
                let _ = failed.send(Err(e.clone()));
            }
            result
        })
    });
    let address = started_rx
        .recv()
        .expect("the server thread reports")
        .unwrap_or_else(|e| panic!("the server did not start: {e}"));
    Running {
        address: address.to_string(),
        stop: stop_tx,
        thread,
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

/// A running server; stopped (gracefully) when dropped.
pub struct TestServer {
    /// `127.0.0.1:<port>`.
    pub address: String,
    /// The deployment prefix (`base_url`), empty by default.
    pub prefix: String,
    agent: ureq::Agent,
    stop: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Option<JoinHandle<Result<(), String>>>,
    config: Config,
    _schema: Option<Schema>,
    dir: tempfile::TempDir,
}

impl TestServer {
    /// A server with the default test configuration.
    pub fn start() -> TestServer {
        Builder::new().start()
    }

    pub fn builder() -> Builder {
        Builder::new()
    }

    pub fn data_dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// `http://127.0.0.1:<port><prefix><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}{path}", self.address, self.prefix)
    }

    /// Sends `method path` (path relative to the prefix, query included) with `auth`
    /// and an optional body `(content type, bytes)`.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        auth: Auth,
        body: Option<(&str, Vec<u8>)>,
    ) -> Reply {
        self.call_with(method, path, auth, &[], body)
    }

    /// [`TestServer::call`] with more headers (`Idempotency-Key`...).
    pub fn call_with(
        &self,
        method: &str,
        path: &str,
        auth: Auth,
        headers: &[(&str, &str)],
        body: Option<(&str, Vec<u8>)>,
    ) -> Reply {
        let send = || {
            let mut request = ureq::http::Request::builder()
                .method(method)
                .uri(self.url(path));
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            if let Some(value) = auth.header() {
                request = request.header("Authorization", value);
            }
            if method != "GET" {
                // A request that is not safe to send twice gets a connection of its own:
                // a pooled one may be closed by the server just as it is reused (after
                // an answer that left a body unread), and such a request is not retried.
                request = request.header("Connection", "close");
            }
            match &body {
                Some((content_type, bytes)) => {
                    let request = request
                        .header("Content-Type", *content_type)
                        .body(bytes.clone())
                        .expect("a valid request");
                    self.agent.run(request)
                }
                None => self.agent.run(request.body(()).expect("a valid request")),
            }
        };
        // A pooled keep-alive connection can be closed by the server just as it is
        // reused; a GET is safe to send again (other methods are not retried).
        let result = match send() {
            Err(ureq::Error::Io(e)) if method == "GET" => {
                eprintln!(
                    "testkit: {method} {path} failed on a reused connection ({e}); sent again"
                );
                send()
            }
            other => other,
        };
        let mut response = result.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect();
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .read_to_string()
            .unwrap_or_else(|e| panic!("{method} {path}: reading the body: {e}"));
        Reply {
            status,
            headers,
            body,
        }
    }

    /// `method path` with `auth` and no body (an action: `PUT /rest/jobs/<id>/hold`).
    pub fn send(&self, method: &str, path: &str, auth: Auth) -> Reply {
        self.call(method, path, auth, None)
    }

    /// `GET path` as the administrator.
    pub fn get(&self, path: &str) -> Reply {
        self.call("GET", path, Auth::Admin, None)
    }

    /// `GET path` with `auth`.
    pub fn get_as(&self, auth: Auth, path: &str) -> Reply {
        self.call("GET", path, auth, None)
    }

    /// A JSON body sent with `method` as the administrator.
    pub fn send_json(&self, method: &str, path: &str, body: &Value) -> Reply {
        self.send_json_as(Auth::Admin, method, path, body)
    }

    /// A JSON body sent with `method` as `auth`.
    pub fn send_json_as(&self, auth: Auth, method: &str, path: &str, body: &Value) -> Reply {
        self.call(
            method,
            path,
            auth,
            Some(("application/json", body.to_string().into_bytes())),
        )
    }

    /// Polls `GET path` (as the administrator) until `done` holds for its JSON body,
    /// for at most 30 seconds; panics with `what` and the last body otherwise.
    pub fn wait_for(&self, path: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let reply = self.get(path);
            let body = reply.json();
            if reply.status == 200 && done(&body) {
                return body;
            }
            if std::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what} at {path}: {} {}",
                    reply.status, reply.body
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// `method path` with `auth` and a body (`(content type, bytes)`) sent from the
    /// loopback address `source` (any of 127.0.0.0/8), as if from another machine:
    /// what the service keys by source address (the login throttle, connection caps)
    /// sees another peer.
    pub fn call_from(
        &self,
        source: std::net::Ipv4Addr,
        method: &str,
        path: &str,
        auth: Auth,
        body: Option<(&str, &[u8])>,
    ) -> Reply {
        let mut stream = connect_from(source, &self.address);
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let mut head = format!(
            "{method} {}{path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.prefix, self.address
        );
        if let Some(value) = auth.header() {
            head.push_str(&format!("Authorization: {value}\r\n"));
        }
        let (content_type, bytes) = body.unwrap_or(("application/json", b""));
        if body.is_some() {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", bytes.len()));
        stream
            .write_all(head.as_bytes())
            .expect("the request is sent");
        stream.write_all(bytes).expect("the body is sent");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("the answer is read");
        parse_answer(&String::from_utf8_lossy(&answer))
    }

    /// Writes `request` as is on a new connection and returns everything the server
    /// answers until it closes (for requests a well-behaved client would not send).
    pub fn raw(&self, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(&self.address).expect("the server accepts");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let _ = stream.write_all(request);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// Stops the server gracefully (requests in flight finish) and reports how it ended.
    pub fn stop(mut self) -> Result<(), String> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<(), String> {
        self.signal_shutdown();
        self.join()
    }

    /// Waits for the server thread to end.
    fn join(&mut self) -> Result<(), String> {
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err("the server thread panicked".into())),
            None => Ok(()),
        }
    }

    /// Stops the server gracefully and starts it again on the same data directory and
    /// store (on a new port), with the interface's routes.
    pub fn restart(mut self) -> TestServer {
        self.shut_down().expect("the server stops cleanly");
        let running = launch(self.config.clone(), drover_api::interface());
        self.address = running.address;
        self.stop = std::sync::Mutex::new(Some(running.stop));
        self.thread = Some(running.thread);
        self
    }

    /// Stops the server gracefully and starts it again with its configuration changed by
    /// `change` (a setting an upgrade or an operator turns on).
    pub fn restart_reconfigured(mut self, change: impl FnOnce(&mut Config)) -> TestServer {
        change(&mut self.config);
        self.restart()
    }

    /// Stops the server gracefully, runs `between` on its store while it is down (what
    /// a crash may have left there), and starts it again as [`TestServer::restart`] does.
    pub fn restart_with(
        mut self,
        between: impl FnOnce(std::sync::Arc<dyn drover_store::DocumentStore>),
    ) -> TestServer {
        self.shut_down().expect("the server stops cleanly");
        let store = drover_store::open(&self.config.store_location()).expect("the store opens");
        between(store.into());
        let running = launch(self.config.clone(), drover_api::interface());
        self.address = running.address;
        self.stop = std::sync::Mutex::new(Some(running.stop));
        self.thread = Some(running.thread);
        self
    }

    /// Stops the server gracefully, waits `pause` (its jobs running on, or ending,
    /// meanwhile), and starts it again as [`TestServer::restart`] does.
    pub fn restart_after(self, pause: std::time::Duration) -> TestServer {
        self.restart_once(|| std::thread::sleep(pause))
    }

    /// Stops the server gracefully, runs `down` (which returns once what the test
    /// waits for happened while it is down), and starts it again as
    /// [`TestServer::restart`] does.
    pub fn restart_once(mut self, down: impl FnOnce()) -> TestServer {
        self.shut_down().expect("the server stops cleanly");
        down();
        let running = launch(self.config.clone(), drover_api::interface());
        self.address = running.address;
        self.stop = std::sync::Mutex::new(Some(running.stop));
        self.thread = Some(running.thread);
        self
    }

    /// Stops the server without cancelling its jobs first (as dropping it does): for a
    /// server that shows jobs that are not its test's (another server's, on Slurm).
    pub fn stop_leaving_jobs(mut self) {
        self.shut_down().expect("the server stops cleanly");
    }

    /// Sends the shutdown signal without waiting (for tests of graceful shutdown).
    pub fn signal_shutdown(&self) {
        if let Some(stop) = self.stop.lock().unwrap().take() {
            let _ = stop.send(());
        }
    }
}

/// The `drover` binary that shepherds the jobs of servers started in a test binary
/// (which cannot run `job-shepherd` itself): cargo builds it beside the test binaries
/// of the `drover` package (`target/<profile>/drover`, the tests in `.../deps/`).
pub fn drover_binary() -> std::path::PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let profile = test
        .parent()
        .and_then(std::path::Path::parent)
        .expect("a test binary in target/<profile>/deps");
    let binary = profile.join("drover");
    assert!(
        binary.exists(),
        "{} is missing: build the drover binary (cargo test -p drover builds it)",
        binary.display()
    );
    binary
}

/// A connection to `address` from the local address `source` (port chosen by the
/// system).
pub fn connect_from(source: std::net::Ipv4Addr, address: &str) -> TcpStream {
    use std::os::fd::FromRawFd;
    let peer: std::net::SocketAddrV4 = address.parse().expect("an IPv4 address and port");
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket, bound and connected with addresses that live across the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "a socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        let local = sockaddr(source, 0);
        let bound = libc::bind(fd, (&raw const local).cast(), size);
        assert_eq!(
            bound,
            0,
            "bind {source}: {}",
            std::io::Error::last_os_error()
        );
        let remote = sockaddr(*peer.ip(), peer.port());
        let connected = libc::connect(fd, (&raw const remote).cast(), size);
        assert_eq!(
            connected,
            0,
            "connect from {source}: {}",
            std::io::Error::last_os_error()
        );
        stream
    }
}

/// A whole HTTP/1.1 answer read to its close: status, headers and body (a body of
/// known length; the service sends no chunked JSON).
fn parse_answer(answer: &str) -> Reply {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}

/// `body` as JSON with `method path`, as `auth`.
pub fn send(server: &TestServer, method: &str, path: &str, auth: Auth, body: &Value) -> Reply {
    server.send_json_as(auth, method, path, body)
}

/// A login of `name` (a local or system account the test made) with [`PASSWORD`].
pub fn login_as(name: &str) -> Auth {
    Auth::Basic(name.into(), PASSWORD.into())
}

/// The login of the system account [`BOB`].
pub fn bob() -> Auth {
    login_as(BOB)
}

/// The login of the system account [`CAROL`].
pub fn carol() -> Auth {
    login_as(CAROL)
}

/// Submits a version-2 job as `auth`; the answer as it came.
pub fn submit_as(server: &TestServer, auth: Auth, body: &Value) -> Reply {
    server.call(
        "POST",
        "/rest/jobs?api-version=2",
        auth,
        Some(("application/json", body.to_string().into_bytes())),
    )
}

/// The name of the job a version-2 submission created (it must have: 201).
pub fn submitted(reply: &Reply) -> String {
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.json()["name"].as_str().unwrap().to_string()
}

/// Submits a version-1 job as the administrator; its id.
pub fn submit_v1(server: &TestServer, body: Value) -> String {
    let reply = server.send_json("POST", "/rest/jobs", &body);
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.json()["id"].as_str().unwrap().to_string()
}

/// Submits a version-2 job as the administrator; its name.
pub fn submit_v2(server: &TestServer, body: Value) -> String {
    submitted(&submit_as(server, Auth::Admin, &body))
}

/// Waits (30 s at most) until the job's version-2 state is `state`; the job then.
pub fn wait_state_v2(server: &TestServer, id: &str, state: &str) -> Value {
    server.wait_for(
        &format!("/rest/jobs/{id}?api-version=2"),
        &format!("state {state}"),
        |job| job["states"]["state"] == state,
    )
}

/// Polls `check` every 50 ms for at most 30 s; panics with `what` if it never holds.
pub fn wait_until(what: &str, check: impl Fn() -> bool) {
    for _ in 0..600 {
        if check() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("timed out waiting until {what}");
}

/// Ordinary system accounts for the attacks that need a second user: `scripts/test`
/// makes them (and puts bob alone in the group `drover-lab`).
pub const BOB: &str = "drover-bob";
pub const CAROL: &str = "drover-carol";

/// Whether the test accounts exist and jobs can run as them (the service runs as root).
/// Without them the attacks that need a second system account cannot be tried: that
/// fails the run where `DROVER_REQUIRE_SYSTEM_USERS=1` (as in `scripts/test`).
pub fn system_accounts() -> bool {
    let exists = |name: &str| {
        std::process::Command::new("id")
            .arg(name)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    if root && exists(BOB) && exists(CAROL) {
        return true;
    }
    if std::env::var("DROVER_REQUIRE_SYSTEM_USERS").as_deref() == Ok("1") {
        panic!("the test accounts {BOB} and {CAROL} are missing, or the tests do not run as root");
    }
    eprintln!("skipped: needs root and the system accounts {BOB} and {CAROL} (scripts/test)");
    false
}

/// The value of the environment variable `name` that points a test at an outside
/// service (a directory, a guest image), or `None`: the test is skipped, unless
/// `required` is set to `1` (as `scripts/test` sets it where it starts the service).
pub fn outside_service(name: &str, required: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(
                std::env::var(required).as_deref() != Ok("1"),
                "{required}=1 but {name} is not set"
            );
            eprintln!("skipped: {name} is not set");
            None
        }
    }
}

/// `text` with every byte but ASCII letters and digits percent-encoded: safe as one
/// path segment, a query value or a form value.
pub fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The uid of the system account `name`.
pub fn uid_of(name: &str) -> u32 {
    id_number("-u", name)
}

/// The primary group id of the system account `name`.
pub fn gid_of(name: &str) -> u32 {
    id_number("-g", name)
}

fn id_number(flag: &str, name: &str) -> u32 {
    let out = std::process::Command::new("id")
        .args([flag, name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A temporary directory every user may write in (jobs run as other system users).
pub fn scratch_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
        .expect("the directory can be opened to all");
    dir
}

/// Writes an executable script (mode 0755) and answers its path.
pub fn script(dir: &std::path::Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("the script is written");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("the script is made executable");
    path.to_string_lossy().into_owned()
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Jobs outlive a server that stops (the next start adopts them); a test's jobs
        // must not outlive the test.
        if self.thread.is_some() && !std::thread::panicking() {
            let active = self.get("/rest/jobs/active?fields=id");
            if active.status == 200 {
                for job in active.json()["results"].as_array().into_iter().flatten() {
                    if let Some(id) = job["id"].as_str() {
                        self.call("DELETE", &format!("/rest/jobs/{id}"), Auth::Admin, None);
                    }
                }
            }
        }
        let _ = self.shut_down();
    }
}

/// Polls `check` every 200 ms for at most `seconds`; panics with `what` if it never
/// gives a value.
pub fn wait_for_value<T>(what: &str, seconds: u64, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Slurm's state of one of its jobs (`squeue`; empty once slurmctld forgot it).
pub fn slurm_state(slurm_id: &str) -> String {
    let out = std::process::Command::new("squeue")
        .args([
            "-h",
            "--states=all",
            "-o",
            "%T",
            &format!("--jobs={slurm_id}"),
        ])
        .output()
        .expect("squeue runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
