//! `GET /rest/events/stream` over HTTP: live events through the list's filter, resuming
//! with `Last-Event-ID`, what an ordinary user may see, the limits, and shutdown.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use base64::Engine;
use drover_testkit::{ADMIN, Auth, PASSWORD, TestServer, USER};
use serde_json::{Value, json};

/// An open event stream, read as a browser's `EventSource` would (a raw connection:
/// the body is chunked and never ends).
struct Stream {
    reader: BufReader<TcpStream>,
    /// Decoded body text not yet parsed into messages.
    text: String,
    /// The comment lines seen (heartbeats).
    comments: Vec<String>,
}

/// What opening a stream answered: the stream, or a refusal's status and body.
enum Opened {
    Streaming(Stream),
    Refused(u16, Value),
}

fn open(server: &TestServer, user: &str, query: &str, last_id: Option<&str>) -> Opened {
    let mut socket = TcpStream::connect(&server.address).expect("the server accepts");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let login = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{PASSWORD}"));
    let mut request = format!(
        "GET /rest/events/stream{query} HTTP/1.1\r\nHost: test\r\nAuthorization: Basic {login}\r\n\
         Accept: text/event-stream\r\nConnection: close\r\n"
    );
    if let Some(id) = last_id {
        request.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    request.push_str("\r\n");
    socket.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(socket);
    let head = read_until_blank(&mut reader);
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    if status != 200 {
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().unwrap())
            })
            .expect("a refusal has a length");
        let mut body = vec![0; length];
        read_exact_patiently(&mut reader, &mut body);
        return Opened::Refused(status, serde_json::from_slice(&body).unwrap());
    }
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{head}"
    );
    Opened::Streaming(Stream {
        reader,
        text: String::new(),
        comments: Vec::new(),
    })
}

fn streaming(server: &TestServer, user: &str, query: &str, last_id: Option<&str>) -> Stream {
    match open(server, user, query, last_id) {
        Opened::Streaming(stream) => stream,
        Opened::Refused(status, body) => panic!("refused {status}: {body}"),
    }
}

fn read_until_blank(reader: &mut BufReader<TcpStream>) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => panic!("closed during the head: {head}"),
            Ok(_) if line == "\r\n" => return head,
            Ok(_) => head.push_str(&line),
            Err(_) if Instant::now() < deadline => head.push_str(&line),
            Err(e) => panic!("no head: {e}"),
        }
    }
}

fn read_exact_patiently(reader: &mut BufReader<TcpStream>, buffer: &mut [u8]) {
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while got < buffer.len() {
        match reader.read(&mut buffer[got..]) {
            Ok(0) => panic!("closed early"),
            Ok(n) => got += n,
            Err(_) if Instant::now() < deadline => {}
            Err(e) => panic!("{e}"),
        }
    }
}

impl Stream {
    /// Reads one chunk of the body into `text`; false when the stream ended or
    /// nothing came before the socket's short timeout.
    fn read_chunk(&mut self) -> Option<bool> {
        let mut size_line = String::new();
        match self.reader.read_line(&mut size_line) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(_) if size_line.is_empty() => return Some(false),
            Err(e) => panic!("a chunk size cut short: {e}"),
        }
        let size = usize::from_str_radix(size_line.trim(), 16).expect("a chunk size");
        if size == 0 {
            return None;
        }
        let mut chunk = vec![0; size + 2];
        read_exact_patiently(&mut self.reader, &mut chunk);
        self.text
            .push_str(std::str::from_utf8(&chunk[..size]).unwrap());
        Some(true)
    }

    /// The next event (id and JSON data) within `wait`, skipping comment lines; `None`
    /// when none came or the stream ended.
    fn next_within(&mut self, wait: Duration) -> Option<(String, Value)> {
        let deadline = Instant::now() + wait;
        loop {
            while let Some(end) = self.text.find("\n\n") {
                let message: String = self.text.drain(..end + 2).collect();
                let (mut id, mut data) = (None, String::new());
                for line in message.lines() {
                    if let Some(comment) = line.strip_prefix(':') {
                        self.comments.push(comment.trim().to_string());
                    } else if let Some(value) = line.strip_prefix("id:") {
                        id = Some(value.trim().to_string());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim_start());
                    }
                }
                if let Some(id) = id {
                    return Some((id, serde_json::from_str(&data).unwrap()));
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            self.read_chunk()?;
        }
    }

    fn next(&mut self) -> (String, Value) {
        self.next_within(Duration::from_secs(10))
            .expect("an event within 10 s")
    }

    /// Whether the server ended the stream within `wait`.
    fn ends_within(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if self.read_chunk().is_none() {
                return true;
            }
        }
        false
    }
}

/// The `query` parameter, encoded.
fn query(filter: Value) -> String {
    let encoded: String = form_urlencoded::byte_serialize(filter.to_string().as_bytes()).collect();
    format!("?api-version=3&query={encoded}")
}

/// Creates a version-3 event as `auth`; its id.
fn post(server: &TestServer, auth: Auth, event_type: &str, message: &str) -> String {
    let reply = server.call(
        "POST",
        "/rest/events?api-version=3",
        auth,
        Some((
            "application/json",
            json!({"eventType": event_type, "message": message})
                .to_string()
                .into_bytes(),
        )),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.json()["id"].as_str().unwrap().to_string()
}

#[test]
fn a_stream_carries_new_events_live_through_the_lists_filter() {
    let server = TestServer::builder()
        .config(|c| c.events.stream_heartbeat_seconds = 1)
        .start();
    let mut stream = streaming(&server, ADMIN, &query(json!({"eventType": "wanted"})), None);
    post(&server, Auth::Admin, "unwanted", "no");
    let id = post(&server, Auth::Admin, "wanted", "yes");
    let (got, event) = stream.next();
    assert_eq!(got, id);
    assert_eq!(event["id"], id.as_str());
    assert_eq!(event["eventType"], "wanted");
    assert_eq!(event["message"], "yes");
    // Idle, it sends comment lines that keep proxies from closing it.
    assert_eq!(stream.next_within(Duration::from_millis(2500)), None);
    assert!(
        stream.comments.iter().any(|c| c == "heartbeat"),
        "{:?}",
        stream.comments
    );

    // Version 1: its shape, its field names in the query.
    let v1_query: String =
        form_urlencoded::byte_serialize(json!({"sourceComponent": "probe"}).to_string().as_bytes())
            .collect();
    let mut v1 = streaming(&server, ADMIN, &format!("?query={v1_query}"), None);
    let reply = server.send_json(
        "POST",
        "/rest/events?api-version=3",
        &json!({"eventType": "wanted", "origin": "probe"}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let (_, event) = v1.next();
    assert_eq!(event["sourceComponent"], "probe");
    assert!(event.get("eventTime").is_some(), "{event}");

    // A job's own events come live too, once durable.
    let work = drover_testkit::scratch_dir();
    let quick = drover_testkit::script(work.path(), "quick.sh", "exit 0");
    let mut jobs = streaming(
        &server,
        ADMIN,
        &query(json!({"eventType": "jobsubmit"})),
        None,
    );
    let job = drover_testkit::submit_v2(
        &server,
        json!({"commandFile": quick, "initialWorkingDirectory": work.path()}),
    );
    let (_, event) = jobs.next();
    assert_eq!(event["arguments"], json!([job]));
}

#[test]
fn a_stream_resumes_after_last_event_id_without_loss_or_duplicates() {
    let server = TestServer::start();
    let filter = query(json!({"eventType": "resumed"}));
    let mut first = streaming(&server, ADMIN, &filter, None);
    let a = post(&server, Auth::Admin, "resumed", "a");
    assert_eq!(first.next().0, a);
    drop(first);
    // Missed while disconnected, one of another type among them.
    let b = post(&server, Auth::Admin, "resumed", "b");
    post(&server, Auth::Admin, "other", "x");
    let c = post(&server, Auth::Admin, "resumed", "c");
    let mut again = streaming(&server, ADMIN, &filter, Some(&a));
    assert_eq!(again.next().0, b);
    assert_eq!(again.next().0, c);
    let d = post(&server, Auth::Admin, "resumed", "d");
    assert_eq!(again.next().0, d);
    assert_eq!(
        again.next_within(Duration::from_millis(700)),
        None,
        "a duplicate"
    );
    // Resuming from the last one sends nothing again; a malformed id is refused.
    let mut caught_up = streaming(&server, ADMIN, &filter, Some(&d));
    assert_eq!(caught_up.next_within(Duration::from_millis(700)), None);
    match open(&server, ADMIN, &filter, Some("not an id")) {
        Opened::Refused(status, body) => {
            assert_eq!(status, 400);
            assert!(
                body["messages"][0]
                    .as_str()
                    .unwrap()
                    .contains("Last-Event-ID"),
                "{body}"
            );
        }
        Opened::Streaming(_) => panic!("a malformed Last-Event-ID was taken"),
    }
    match open(&server, ADMIN, &filter, Some("\u{e9}\u{e9}\u{e9}")) {
        Opened::Refused(status, body) => assert_eq!(status, 400, "{body}"),
        Opened::Streaming(_) => panic!("a Last-Event-ID of other bytes was taken"),
    }
    match open(&server, ADMIN, "?query=%7Bnope", None) {
        Opened::Refused(status, body) => assert_eq!(status, 400, "{body}"),
        Opened::Streaming(_) => panic!("a malformed query was taken"),
    }
}

#[test]
fn an_ordinary_users_stream_carries_only_what_the_list_shows_them() {
    let server = TestServer::builder().user("bob", false).start();
    // The built-in user role reads no events at all.
    match open(&server, USER, "", None) {
        Opened::Refused(status, body) => assert_eq!(status, 403, "{body}"),
        Opened::Streaming(_) => panic!("an ordinary user streamed events"),
    }
    // A role that reads and creates events, over their own only, for alice and bob.
    let role = server.send_json(
        "POST",
        "/rest/roles",
        &json!({"name": "own-events", "permissions": [
            {"resource": "events", "action": "read", "scope": "OWN"},
            {"resource": "events", "action": "create", "scope": "OWN"}]}),
    );
    assert_eq!(role.status, 201, "{}", role.body);
    let principal = server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "own-readers", "attachedRoles": ["own-events"],
                "users": [{"name": USER, "type": "PAM"}, {"name": "bob", "type": "PAM"}]}),
    );
    assert_eq!(principal.status, 201, "{}", principal.body);
    let bob = || Auth::Basic("bob".into(), PASSWORD.into());
    let secret = post(&server, bob(), "private", "bob's");
    let filter = query(json!({"eventType": "private"}));
    // Replay from the very beginning, then live: only alice's own.
    let mut alice = streaming(&server, USER, &filter, Some("000000000000000000000000"));
    post(&server, Auth::Admin, "private", "the administrator's");
    post(&server, bob(), "private", "bob's again");
    let mine = post(&server, Auth::User, "private", "alice's");
    let (got, event) = alice.next();
    assert_eq!(got, mine, "{event}");
    assert_eq!(alice.next_within(Duration::from_millis(700)), None);
    // As the list and a read by id show her.
    let list = server.get_as(Auth::User, &format!("/rest/events{filter}"));
    assert_eq!(list.status, 200, "{}", list.body);
    let ids: Vec<String> = list.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, vec![mine.clone()]);
    let hidden = server.get_as(Auth::User, &format!("/rest/events/{secret}?api-version=3"));
    assert_eq!(hidden.status, 404, "{}", hidden.body);
    // The administrator sees everybody's.
    let mut admin = streaming(&server, ADMIN, &filter, Some("000000000000000000000000"));
    assert_eq!(admin.next().0, secret);
}

#[test]
fn streams_are_limited_per_user_and_in_all_and_end_at_shutdown() {
    let server = TestServer::builder()
        .config(|c| {
            c.events.max_streams_per_user = 2;
            c.events.max_streams = 3;
        })
        .start();
    let one = streaming(&server, ADMIN, "", None);
    let _two = streaming(&server, ADMIN, "", None);
    match open(&server, ADMIN, "", None) {
        Opened::Refused(status, body) => {
            assert_eq!(status, 429);
            assert!(
                body["messages"][0].as_str().unwrap().contains("Too many"),
                "{body}"
            );
        }
        Opened::Streaming(_) => panic!("a third stream of one user was opened"),
    }
    let operator_role = server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "ops", "attachedRoles": [{"name": "operator"}],
                "users": [{"name": USER, "type": "PAM"}]}),
    );
    assert_eq!(operator_role.status, 201, "{}", operator_role.body);
    let _three = streaming(&server, USER, "", None);
    match open(&server, USER, "", None) {
        Opened::Refused(status, body) => assert_eq!(status, 503, "{body}"),
        Opened::Streaming(_) => panic!("a stream past the service's limit was opened"),
    }
    // A closed stream frees its place.
    drop(one);
    let reopened = std::cell::RefCell::new(None);
    drover_testkit::wait_until("a closed stream is let go", || {
        match open(&server, USER, "", None) {
            Opened::Streaming(stream) => {
                reopened.replace(Some(stream));
                true
            }
            Opened::Refused(..) => false,
        }
    });
    // Shutdown ends the streams still open, and the server stops.
    let mut open_stream = reopened.into_inner().unwrap();
    let stopped = std::thread::spawn(move || server.stop());
    assert!(
        open_stream.ends_within(Duration::from_secs(10)),
        "the stream outlived shutdown"
    );
    stopped.join().unwrap().unwrap();
}
