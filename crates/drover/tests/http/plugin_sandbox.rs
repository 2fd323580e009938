//! Plugins' sandbox (spec 2.14, 4.12, part 3, the decisions page): attacks on the sandbox,
//! the rights plugins act with, their bounds and their lifecycle, kept as regression tests.

use std::path::Path;

use drover_sched::node::NodeConfig;
use drover_testkit::{Auth, PASSWORD, Reply, TestServer};
use serde_json::{Value, json};

use crate::plugins::{plugin, send, upload, uploaded};

fn server() -> TestServer {
    TestServer::builder()
        .config(|c| c.nodes = vec![NodeConfig::new("n1", 2)])
        .start()
}

fn created(server: &TestServer, body: &Value) {
    let reply = send(server, "POST", "/rest/plugins", body);
    assert_eq!(reply.status, 201, "{}", reply.body);
}

/// Uploads the type `source` (whose id is `ty`), creates a plugin of it (its id `ty` in
/// lower case) and calls its web service `service` with `request`.
fn call_new_service(
    server: &TestServer,
    source: &str,
    ty: &str,
    service: &str,
    request: &Value,
) -> Reply {
    uploaded(server, source);
    let id = ty.to_lowercase();
    created(
        server,
        &json!({"id": id, "pluginType": ty, "pollInterval": 86400}),
    );
    let path = format!("/rest/plugins/{id}/services/{service}");
    send(server, "POST", &path, request)
}

const PRIVILEGED: &str = r#"
    fn describe() { #{ id: "Privileged", services: ["shout"] } }
    fn shout(request) { create_event(#{ type: "shout", message: "as my creator" }) }
"#;

/// A server whose data lives in `dir`, with the local user `boss` (an administrator or
/// not).
fn server_in(dir: &Path, boss_admin: bool) -> TestServer {
    let dir = dir.to_path_buf();
    TestServer::builder()
        .user("boss", boss_admin)
        .config(move |c| {
            c.data_dir = dir;
            c.nodes = vec![NodeConfig::new("n1", 2)];
        })
        .sqlite()
        .start()
}

/// A plugin acts with the rights its creator holds now: an administrator who is no
/// longer one does not leave plugins behind that still act as an administrator.
#[test]
fn a_plugin_loses_the_administrator_rights_its_creator_lost() {
    let data = tempfile::tempdir().unwrap();
    let server = server_in(data.path(), true);
    uploaded(&server, PRIVILEGED);
    let boss = Auth::Basic("boss".into(), PASSWORD.into());
    let reply = server.call(
        "POST",
        "/rest/plugins",
        boss,
        Some((
            "application/json",
            json!({"id": "loud", "pluginType": "Privileged"})
                .to_string()
                .into_bytes(),
        )),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let shouted = send(
        &server,
        "POST",
        "/rest/plugins/loud/services/shout",
        &json!({}),
    );
    assert_eq!(shouted.status, 200, "{}", shouted.body);
    server.stop().unwrap();

    // boss is an ordinary user now (operators may not create events... nor may users).
    let server = server_in(data.path(), false);
    let shouted = send(
        &server,
        "POST",
        "/rest/plugins/loud/services/shout",
        &json!({}),
    );
    shouted.assert_refused(400, "may not", &"a demoted creator's plugin");
}

/// `data_set` is bounded while the script runs, not only once it has ended: a script
/// cannot make the service hold gigabytes before its call ends.
#[test]
fn data_set_is_refused_once_the_plugin_data_is_full() {
    let server = server();
    let reply = call_new_service(
        &server,
        r#"
        fn describe() { #{ id: "Hoarder", services: ["fill"] } }
        fn fill(request) {
            let s = "x";
            while s.len() < 32768 { s += s; }
            for i in 0..200 {
                try { data_set("k" + i, s); } catch (e) { return #{ refusedAt: i, why: `${e}` }; }
            }
            #{ refusedAt: () }
        }
    "#,
        "Hoarder",
        "fill",
        &json!({}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let at = reply.json()["refusedAt"].as_i64();
    // 256 KiB of data hold 7 strings of 32 KiB and their keys.
    assert!(at.is_some_and(|i| i <= 8), "{}", reply.body);
    assert!(reply.body.contains("bytes"), "{}", reply.body);
}

/// Calls into one plugin never overlap, and each sees what the one before it kept: two
/// polls at once both count.
#[test]
fn concurrent_polls_do_not_lose_the_data_each_keeps() {
    let server = server();
    uploaded(
        &server,
        r#"
        fn describe() { #{ id: "Counter", services: ["count"] } }
        fn poll() {
            let n = data_get("n");
            if n == () { n = 0 }
            let i = 0;
            while i < 20000 { i += 1; }
            data_set("n", n + 1);
            n + 1
        }
        fn count(request) { data_get("n") }
    "#,
    );
    created(
        &server,
        &json!({"id": "counter", "pluginType": "Counter", "pollInterval": 86400}),
    );
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..3 {
                    let reply =
                        server.call("POST", "/rest/plugins/counter/poll", Auth::Admin, None);
                    assert_eq!(reply.status, 200, "{}", reply.body);
                }
            });
        }
    });
    let count = send(
        &server,
        "GET",
        "/rest/plugins/counter/services/count",
        &json!(null),
    );
    assert_eq!(count.status, 200, "{}", count.body);
    assert_eq!(count.json(), json!(12), "polls were lost");
}

/// A type uploaded again with a configuration its plugins' configurations no longer
/// satisfy: reloaded plugins are ERRORED with the reason, not left STARTED unchecked;
/// and the new defaults reach configure().
#[test]
fn a_reload_checks_plugin_configurations_against_the_new_type() {
    let server = server();
    uploaded(
        &server,
        r#"fn describe() { #{ id: "Shifting", config: #{ a: #{ type: "string" } } } }"#,
    );
    created(&server, &json!({"id": "shifty", "pluginType": "Shifting"}));
    assert_eq!(plugin(&server, "shifty")["state"], "STARTED");
    uploaded(
        &server,
        r#"fn describe() { #{ id: "Shifting", config: #{ b: #{ type: "string", required: true } } } }"#,
    );
    let shifty = plugin(&server, "shifty");
    assert_eq!(shifty["state"], "ERRORED", "{shifty}");
    assert!(
        shifty["errorMessage"]
            .as_str()
            .unwrap_or("")
            .contains("config.b"),
        "{shifty}"
    );
    // With the required key given it starts again.
    let reply = send(
        &server,
        "PUT",
        "/rest/plugins/shifty",
        &json!({"state": "STARTED", "config": {"b": "x"}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(plugin(&server, "shifty")["state"], "STARTED");
}

/// Bad requests are answered 4xx with messages, never 500.
#[test]
fn bad_requests_are_refused_with_reasons() {
    let server = server();
    // Two scripts of one archive naming one type.
    let archive = drover_plugins::archive::stored_zip(&[
        ("a.rhai", b"fn describe() { #{ id: \"Twin\" } }"),
        ("b.rhai", b"fn describe() { #{ id: \"Twin\" } }"),
    ]);
    let reply = upload(
        &server,
        "application/x-jar",
        &archive,
        "?jar-filename=twins.jar",
    );
    reply.assert_refused(400, "Twin", &"two scripts of one type");
    assert_eq!(server.get("/rest/plugin-types/Twin").status, 404);
    uploaded(
        &server,
        r#"fn describe() { #{ id: "Plain", services: ["echo"] } }
           fn echo(request) { request }"#,
    );
    created(&server, &json!({"id": "plain", "pluginType": "Plain"}));
    for (method, path, body, status) in [
        (
            "POST",
            "/rest/plugins",
            json!({"id": "all", "pluginType": "Plain"}),
            400,
        ),
        (
            "POST",
            "/rest/plugins",
            json!({"id": "x", "pluginType": "Nope"}),
            400,
        ),
        (
            "POST",
            "/rest/plugins",
            json!({"id": "plain", "pluginType": "Plain"}),
            409,
        ),
        (
            "POST",
            "/rest/plugins",
            json!({"id": "y", "pluginType": "Plain", "pollInterval": 0}),
            400,
        ),
        (
            "POST",
            "/rest/plugins",
            json!({"id": "y", "pluginType": "Plain", "config": [1]}),
            400,
        ),
        ("POST", "/rest/plugins", json!([]), 400),
        (
            "PUT",
            "/rest/plugins/plain",
            json!({"state": "ERRORED"}),
            400,
        ),
        (
            "PUT",
            "/rest/plugins/plain",
            json!({"state": "RUNNING"}),
            400,
        ),
        (
            "PUT",
            "/rest/plugins/plain",
            json!({"pollInterval": -1}),
            400,
        ),
        (
            "PUT",
            "/rest/plugins/nope",
            json!({"state": "STARTED"}),
            404,
        ),
        ("POST", "/rest/plugins/nope/poll", json!(null), 404),
        ("DELETE", "/rest/plugins/nope", json!(null), 404),
        ("POST", "/rest/plugins/nope/services/echo", json!({}), 404),
        ("POST", "/rest/plugins/plain/services/-", json!({}), 404),
        (
            "POST",
            "/rest/plugins/plain/services/describe",
            json!({}),
            404,
        ),
    ] {
        let reply = send(&server, method, path, &body);
        assert_eq!(
            reply.status, status,
            "{method} {path} {body}: {}",
            reply.body
        );
        assert!(
            reply.json()["messages"].is_array(),
            "{method} {path}: {}",
            reply.body
        );
    }
    let reply = server.call(
        "POST",
        "/rest/plugins/plain/services/echo",
        Auth::Admin,
        Some(("application/json", b"{not json".to_vec())),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
}

/// A zip bomb (#53): 256 entries declaring 1 byte each, all pointing at one stored
/// block of 4 MiB, are refused as overlapping before any is copied (they made the
/// server copy the block for each entry: 1.2 GB); a stored entry giving more than its
/// bound, whatever it declares, is refused too, and the service goes on answering.
#[test]
fn zip_bombs_are_refused_with_the_reason() {
    let server = server();
    let block = vec![b' '; 4 << 20];
    for (count, words) in [(256, "overlap"), (1, "gives more than 262144 bytes")] {
        let archive = drover_plugins::archive::overlapping_zip(&block, count, 1);
        let reply = upload(
            &server,
            "application/x-jar",
            &archive,
            "?jar-filename=b.jar",
        );
        reply.assert_refused(400, words, &format!("{count} entries"));
        reply.assert_refused(400, "The archive b.jar was not read", &"its summary");
    }
    assert_eq!(server.get("/rest/plugin-types").json()["totalCount"], 1);
    assert_eq!(server.get("/rest/diag/about").status, 200);
}

/// Fills a map with keys of 64 KiB, 10,000 of them (650 MB).
const KEY_HOARDER: &str = r#"
    fn describe() { #{ id: "Keys", services: ["hoard"] } }
    fn hoard(request) {
        let key = "k";
        key.pad(65000, "k");
        let map = #{};
        for i in 0..10000 { map[key + i] = i; }
        map.len()
    }
"#;

/// A script filling a map with keys of 64 KiB (#53: 660 MB before its 2 s were up, the
/// engine's size limits counting values but not keys) is stopped once its call holds
/// 16 MiB, with the reason, and the service goes on answering.
#[test]
fn what_a_script_holds_is_bounded_map_keys_included() {
    let server = server();
    let reply = call_new_service(&server, KEY_HOARDER, "Keys", "hoard", &json!({}));
    reply.assert_refused(400, "held more than 16777216 bytes", &"64 KiB keys");
    assert_eq!(server.get("/rest/diag/about").status, 200);
}

/// Reads the URL it is given.
const SLEEPER: &str = r#"
    fn describe() { #{ id: "Sleeper", services: ["wait"] } }
    fn wait(request) { read_url(request.body.url) }
"#;

/// A host function stops at the end of its script call's time (#53: the engine checks
/// its 2 s only between operations, so read_url of a slow program ran for the program's
/// 30 s timeout, holding the plugin's lock, and failed with that timeout): the program
/// is killed with what it started, and the call ends with the deadline's error.
#[test]
fn a_slow_host_function_ends_with_its_calls_time() {
    let probes = tempfile::tempdir().unwrap();
    let pid = probes.path().join("pid");
    let program = drover_testkit::script(
        probes.path(),
        "slow.sh",
        &format!("sleep 600 &\necho $! > {}\nwait", pid.display()),
    );
    let dir = probes.path().to_path_buf();
    let server = TestServer::builder()
        .config(move |c| {
            c.plugins.native_directories = vec![dir];
            // The program runs as the service's own user (root in the test runs).
            c.plugins.native_allow_root = true;
        })
        .start();
    let url = json!({"url": format!("exec://{program}")});
    let reply = call_new_service(&server, SLEEPER, "Sleeper", "wait", &url);
    reply.assert_refused(
        400,
        "ran past its 2000 ms and was stopped",
        &"a slow read_url",
    );
    let pid = std::fs::read_to_string(&pid).unwrap();
    drover_testkit::wait_until("the program's sleep is killed", || {
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    });
}

/// A plugin that submits a job for each job submitted is not handed the events of the
/// jobs it submitted itself: one submission is not an endless chain of jobs.
#[test]
fn a_plugin_is_not_handed_the_events_of_its_own_jobs() {
    if !crate::security::system_accounts() {
        return;
    }
    let server = server();
    uploaded(
        &server,
        r#"
        fn describe() { #{ id: "Echo", services: ["count"] } }
        fn on_event(event) {
            if event.eventType != "jobsubmit" { return; }
            let n = data_get("n");
            if n == () { n = 0 }
            data_set("n", n + 1);
            submit_job(#{ command: "/bin/true", user: "drover-bob", duration: 1 });
        }
        fn count(request) { data_get("n") }
    "#,
    );
    created(
        &server,
        &json!({"id": "echo", "pluginType": "Echo", "pollInterval": 86400}),
    );
    drover_testkit::submit_v2(
        &server,
        json!({"commandFile": "/bin/true", "user": crate::security::BOB}),
    );
    std::thread::sleep(std::time::Duration::from_secs(3));
    let count = send(
        &server,
        "GET",
        "/rest/plugins/echo/services/count",
        &json!(null),
    );
    assert_eq!(
        count.status,
        200,
        "{} {}",
        count.body,
        plugin(&server, "echo")
    );
    assert_eq!(count.json(), json!(1), "the plugin reacted to its own jobs");
}

/// One call of a script acts a bounded number of times: a loop over create_event (or
/// submit_job, set_node...) does not flood the events for its whole wall time.
#[test]
fn one_call_of_a_script_acts_a_bounded_number_of_times() {
    let server = server();
    let reply = call_new_service(
        &server,
        r#"
        fn describe() { #{ id: "Flood", services: ["flood"] } }
        fn flood(request) {
            let done = 0;
            for i in 0..5000 {
                log("info", "line " + i);
                try { create_event(#{ type: "flood" }); done += 1; } catch (e) { return #{ done: done, why: `${e}` }; }
            }
            #{ done: done }
        }
    "#,
        "Flood",
        "flood",
        &json!({}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["done"], 100, "{}", reply.body);
    assert!(reply.body.contains("at most"), "{}", reply.body);
}

/// A service running as root with no `native_user` does not run Native programs as
/// root unless the operator allowed root (`native_allow_root`), as for `native_user =
/// "root"`.
#[test]
fn native_programs_do_not_run_as_root_by_default() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let probes = tempfile::tempdir().unwrap();
    let probe = probes.path().join("whoami");
    std::fs::write(&probe, "#!/bin/sh\necho n1 STATE=Idle\n").unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = probes.path().to_path_buf();
    let server = TestServer::builder()
        .config(move |c| {
            c.nodes = vec![NodeConfig::new("n1", 2)];
            c.plugins.native_directories = vec![dir];
        })
        .start();
    created(
        &server,
        &json!({"id": "rooted", "pluginType": "Native", "pollInterval": 86400,
                "config": {"getNodes": format!("exec://{}", probe.display())}}),
    );
    let polled = server.call("POST", "/rest/plugins/rooted/poll", Auth::Admin, None);
    polled.assert_refused(400, "root", &"a program run as root by default");
}

/// A restart keeps a PAUSED plugin PAUSED (configured again); it does not start it.
#[test]
fn a_restart_keeps_paused_plugins_paused() {
    let server = server();
    uploaded(
        &server,
        r#"fn describe() { #{ id: "Quiet" } }
           fn on_event(event) { }"#,
    );
    created(&server, &json!({"id": "quiet", "pluginType": "Quiet"}));
    let reply = send(
        &server,
        "PUT",
        "/rest/plugins/quiet",
        &json!({"state": "PAUSED"}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(plugin(&server, "quiet")["state"], "PAUSED");
    let server = server.restart();
    assert_eq!(plugin(&server, "quiet")["state"], "PAUSED");
}

/// Many requests at once to a plugin that answers slowly are not all left waiting for
/// it (each holding one of the service's blocking threads): those past a few are
/// refused at once.
#[test]
fn requests_piling_up_on_a_slow_plugin_are_refused() {
    let server = server();
    uploaded(
        &server,
        r#"fn describe() { #{ id: "Slow", services: ["spin"] } }
           fn spin(request) { loop { } }"#,
    );
    created(
        &server,
        &json!({"id": "slow", "pluginType": "Slow", "pollInterval": 86400}),
    );
    let replies: Vec<(u16, std::time::Duration)> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..20)
            .map(|_| {
                scope.spawn(|| {
                    let started = std::time::Instant::now();
                    let reply = send(
                        &server,
                        "POST",
                        "/rest/plugins/slow/services/spin",
                        &json!({}),
                    );
                    (reply.status, started.elapsed())
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let refused: Vec<_> = replies
        .iter()
        .filter(|(status, _)| *status == 409)
        .collect();
    assert!(refused.len() >= 8, "{replies:?}");
    assert!(
        refused
            .iter()
            .all(|(_, took)| *took < std::time::Duration::from_secs(2)),
        "{replies:?}"
    );
    assert_eq!(server.get("/rest/diag/about").status, 200);
}

/// A role granting plugins over one's own objects (scope OWN) reaches only one's own
/// plugins: not an administrator's, whose configuration would then drive what it does
/// with the administrator's rights.
#[test]
fn plugins_over_ones_own_objects_reach_only_ones_own_plugins() {
    let server = server_with_plugin_owner();
    uploaded(
        &server,
        r#"fn describe() { #{ id: "Relay", config: #{ say: #{ type: "string" } }, services: ["say"] } }
           fn say(request) { config().say }"#,
    );
    created(&server, &json!({"id": "admins", "pluginType": "Relay"}));
    let olga = Auth::Basic("olga".into(), PASSWORD.into());
    let as_olga = |method: &str, path: &str, body: Option<Value>| {
        server.call(
            method,
            path,
            olga.clone(),
            body.map(|b| ("application/json", b.to_string().into_bytes())),
        )
    };
    let mine = as_olga(
        "POST",
        "/rest/plugins",
        Some(json!({"id": "olgas", "pluginType": "Relay", "config": {"say": "hi"}})),
    );
    assert_eq!(mine.status, 201, "{}", mine.body);
    let listed = as_olga("GET", "/rest/plugins", None).json();
    assert_eq!(listed["totalCount"], 1, "{listed}");
    assert_eq!(as_olga("GET", "/rest/plugins/olgas", None).status, 200);
    for (method, path, body) in [
        ("GET", "/rest/plugins/admins", None),
        (
            "PUT",
            "/rest/plugins/admins",
            Some(json!({"config": {"say": "mine now"}})),
        ),
        ("POST", "/rest/plugins/admins/poll", None),
        ("POST", "/rest/plugins/admins/services/say", Some(json!({}))),
        ("DELETE", "/rest/plugins/admins", None),
    ] {
        let reply = as_olga(method, path, body);
        reply.assert_refused(404, "admins", &format!("{method} {path}"));
    }
    assert_eq!(plugin(&server, "admins")["config"], json!({}));
    let said = as_olga("POST", "/rest/plugins/olgas/services/say", Some(json!({})));
    assert_eq!(said.status, 200, "{}", said.body);
}

/// A server where `olga` holds plugins over her own objects (scope OWN), and reads
/// plugin types, but nothing else of plugins or events.
fn server_with_plugin_owner() -> TestServer {
    let server = TestServer::builder()
        .user("olga", false)
        .config(|c| c.nodes = vec![NodeConfig::new("n1", 2)])
        .start();
    let role = send(
        &server,
        "POST",
        "/rest/roles",
        &json!({"name": "plugin-owners", "permissions": [
            {"id": "plugins:*", "scope": "OWN"},
            {"id": "plugin-types:read", "scope": "ALL"},
            {"id": "plugin-services:use", "scope": "OWN"}]}),
    );
    assert_eq!(role.status, 201, "{}", role.body);
    let principal = send(
        &server,
        "POST",
        "/rest/principals",
        &json!({"name": "owners", "attachedRoles": [{"name": "plugin-owners"}],
                "users": [{"name": "olga", "type": "PAM"}]}),
    );
    assert_eq!(principal.status, 201, "{}", principal.body);
    server
}

const NOTIFIER: &str = include_str!("../../../../examples/plugins/notifier.rhai");

/// Events go to plugins whose user may read events: a user without that permission does
/// not read everybody's events through a plugin of theirs.
#[test]
fn plugins_get_only_the_events_their_user_may_read() {
    let server = server_with_plugin_owner();
    uploaded(&server, NOTIFIER);
    let config = json!({"kinds": "secret"});
    created(
        &server,
        &json!({"id": "admins", "pluginType": "Notifier", "config": config}),
    );
    let olga = Auth::Basic("olga".into(), PASSWORD.into());
    let call = |method: &str, path: &str, body: Option<Value>| {
        server.call(
            method,
            path,
            olga.clone(),
            body.map(|b| ("application/json", b.to_string().into_bytes())),
        )
    };
    let mine = call(
        "POST",
        "/rest/plugins",
        Some(json!({"id": "olgas", "pluginType": "Notifier", "config": config})),
    );
    assert_eq!(mine.status, 201, "{}", mine.body);
    let posted = send(
        &server,
        "POST",
        "/rest/events?api-version=3",
        &json!({"eventType": "secret", "message": "for administrators"}),
    );
    assert!(posted.status < 300, "{}", posted.body);
    // The administrator's plugin gets it...
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let recent = send(
            &server,
            "GET",
            "/rest/plugins/admins/services/recent",
            &json!(null),
        );
        if recent.body.contains("secret") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", recent.body);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // ... and olga's, handed events before or after it, does not.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let recent = call("GET", "/rest/plugins/olgas/services/recent", None);
    assert_eq!(recent.status, 200, "{}", recent.body);
    assert!(!recent.body.contains("secret"), "{}", recent.body);
}

/// A plugin ERRORED by a failing on_event says it has no next poll, as any other
/// ERRORED plugin does.
#[test]
fn a_plugin_errored_by_an_event_has_no_next_poll() {
    let server = server();
    uploaded(
        &server,
        r#"fn describe() { #{ id: "Touchy" } }
           fn on_event(event) { if event.eventType == "poke" { throw "poked"; } }"#,
    );
    created(&server, &json!({"id": "touchy", "pluginType": "Touchy"}));
    assert!(plugin(&server, "touchy")["nextPollDate"].is_string());
    let posted = send(
        &server,
        "POST",
        "/rest/events?api-version=3",
        &json!({"eventType": "poke"}),
    );
    assert!(posted.status < 300, "{}", posted.body);
    let touchy = server.wait_for("/rest/plugins/touchy", "ERRORED", |p| {
        p["state"] == "ERRORED"
    });
    assert!(
        touchy["errorMessage"]
            .as_str()
            .unwrap_or("")
            .contains("poked"),
        "{touchy}"
    );
    assert_eq!(touchy["nextPollDate"], Value::Null, "{touchy}");
}

/// reservations() answers the reservations the plugin's user may see, not everybody's.
#[test]
fn reservations_answers_only_those_the_plugins_user_may_see() {
    let server = server_with_plugin_owner();
    let reserved = send(
        &server,
        "POST",
        "/rest/reservations",
        &json!({"duration": 600}),
    );
    assert_eq!(reserved.status, 201, "{}", reserved.body);
    let id = reserved.json()["id"].as_str().unwrap().to_string();
    uploaded(
        &server,
        r#"fn describe() { #{ id: "Spy", services: ["look"] } }
           fn look(request) { reservations() }"#,
    );
    let olga = Auth::Basic("olga".into(), PASSWORD.into());
    let call = |method: &str, path: &str, body: Value| {
        server.call(
            method,
            path,
            olga.clone(),
            Some(("application/json", body.to_string().into_bytes())),
        )
    };
    let mine = call(
        "POST",
        "/rest/plugins",
        json!({"id": "spy", "pluginType": "Spy"}),
    );
    assert_eq!(mine.status, 201, "{}", mine.body);
    let seen = call("POST", "/rest/plugins/spy/services/look", json!({}));
    assert!(seen.status == 200 || seen.status == 400, "{}", seen.body);
    assert!(!seen.body.contains(&id), "{}", seen.body);
}
