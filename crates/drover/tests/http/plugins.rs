//! Plugins over HTTP (spec 2.14, 4.12, part 3, the decisions page): plugin types uploaded
//! as Rhai scripts or archives, the built-in Native type, plugins and their lifecycle,
//! host functions, events, web services, and hostile scripts that must leave the service
//! answering. The two example types of `examples/plugins/` are the ones tested.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use drover_sched::node::NodeConfig;
use drover_testkit::{Auth, Reply, TestServer};
use serde_json::{Value, json};

const NODE_HEALTH: &str = include_str!("../../../../examples/plugins/node_health.rhai");
const NOTIFIER: &str = include_str!("../../../../examples/plugins/notifier.rhai");

/// A server whose Native URLs may point into `probes`.
fn server(probes: &Path) -> TestServer {
    let probes = probes.to_path_buf();
    TestServer::builder()
        .config(move |c| {
            c.nodes = vec![NodeConfig::new("n1", 2), NodeConfig::new("n2", 2)];
            c.plugins.native_directories = vec![probes];
            // The probes run as the service's own user (root in the test runs).
            c.plugins.native_allow_root = true;
        })
        .start()
}

pub(crate) fn upload(server: &TestServer, content_type: &str, body: &[u8], query: &str) -> Reply {
    server.call(
        "PUT",
        &format!("/rest/plugin-types{query}"),
        Auth::Admin,
        Some((content_type, body.to_vec())),
    )
}

pub(crate) fn uploaded(server: &TestServer, source: &str) {
    let reply = upload(server, "text/plain", source.as_bytes(), "");
    assert_eq!(reply.status, 200, "{}", reply.body);
}

pub(crate) fn send(server: &TestServer, method: &str, path: &str, body: &Value) -> Reply {
    server.send_json(method, path, body)
}

/// Creates a plugin (as the administrator); answers the reply.
pub(crate) fn create_plugin(server: &TestServer, body: &Value) -> Reply {
    let created = send(server, "POST", "/rest/plugins", body);
    assert_eq!(created.status, 201, "{body}: {}", created.body);
    created
}

/// Creates the plugin `id` of `plugin_type` (autoStart) and starts it.
pub(crate) fn start_plugin(server: &TestServer, id: &str, plugin_type: &str) {
    create_plugin(
        server,
        &json!({"id": id, "pluginType": plugin_type, "autoStart": true}),
    );
    let started = send(
        server,
        "PUT",
        &format!("/rest/plugins/{id}"),
        &json!({"state": "STARTED"}),
    );
    assert_eq!(started.status, 200, "{}", started.body);
}

pub(crate) fn plugin(server: &TestServer, id: &str) -> Value {
    let reply = server.get(&format!("/rest/plugins/{id}"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

/// A probe program in `dir` printing `output`.
fn probe(dir: &Path, name: &str, output: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("exec://{}", path.display())
}

#[test]
fn plugin_types_are_uploaded_as_scripts_or_archives_and_refused_with_reasons() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    // The built-in type is there from the start.
    let types = server.get("/rest/plugin-types").json();
    assert_eq!(types["results"][0]["id"], "Native", "{types}");

    let reply = upload(&server, "text/plain", NODE_HEALTH.as_bytes(), "");
    assert_eq!(reply.status, 200, "{}", reply.body);
    let listed = reply.json();
    let ids: Vec<&str> = listed["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(ids, ["Native", "NodeHealth"]);
    let one = server.get("/rest/plugin-types/NodeHealth").json();
    assert_eq!(one["author"], "Drover examples");
    assert_eq!(one["instances"], json!([]));
    assert_eq!(one["config"]["url"]["required"], true);
    // Idempotent: the same upload again changes nothing but its date.
    assert_eq!(
        upload(&server, "application/x-groovy", NODE_HEALTH.as_bytes(), "").status,
        200
    );

    // An archive of several types at once.
    let archive = drover_plugins::archive::stored_zip(&[
        ("META-INF/MANIFEST.MF", b"Manifest-Version: 1.0\n"),
        ("notifier.rhai", NOTIFIER.as_bytes()),
        ("other.rhai", b"fn describe() { #{ id: \"Other\" } }"),
    ]);
    let reply = upload(
        &server,
        "application/x-jar",
        &archive,
        "?jar-filename=site.jar",
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["totalCount"], 4);

    let groovy = "package site\nimport com.x.AbstractPlugin\nclass Probe extends AbstractPlugin {\n  def poll() {}\n}\n";
    for (content_type, body, query, words) in [
        ("text/plain", groovy.as_bytes(), "", "Groovy"),
        (
            "text/plain",
            b"fn describe() {\n  #{ id: \"X\" \n}\nfn poll( {" as &[u8],
            "",
            "line",
        ),
        ("text/plain", b"fn poll() { 1 }", "", "describe"),
        (
            "text/plain",
            b"fn describe() { #{ id: \"Native\" } }",
            "",
            "built-in",
        ),
        (
            "text/plain",
            b"fn describe() { #{ id: \"9lives\" } }",
            "",
            "letter",
        ),
        (
            "application/json",
            br#"{"id": "X"}"#,
            "",
            "not a plugin type",
        ),
        ("application/octet-stream", b"\x00\x01", "", "not JSON"),
        ("application/x-jar", &archive, "", "jar-filename"),
        (
            "application/x-jar",
            b"not a zip",
            "?jar-filename=x.jar",
            "zip",
        ),
    ] {
        let reply = upload(&server, content_type, body, query);
        reply.assert_refused(400, words, &format!("{content_type} {query}"));
    }
    // Only administrators upload or read them.
    let user = server.call(
        "PUT",
        "/rest/plugin-types",
        Auth::User,
        Some(("text/plain", NOTIFIER.as_bytes().to_vec())),
    );
    assert_eq!(user.status, 403, "{}", user.body);
    assert_eq!(server.get_as(Auth::User, "/rest/plugins").status, 403);
}

#[test]
fn a_plugin_is_created_configured_started_polled_stopped_and_deleted() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    uploaded(&server, NODE_HEALTH);
    let url = probe(
        probes.path(),
        "health.sh",
        "n1 temp=51.5 watts=300\nn2 temp=40 down=\"fan\"",
    );
    for (body, status, words) in [
        (json!({"pluginType": "NodeHealth"}), 400, "id"),
        (json!({"id": "h"}), 400, "pluginType"),
        (
            json!({"id": "1h", "pluginType": "NodeHealth", "config": {"url": url}}),
            400,
            "letter",
        ),
        (
            json!({"id": "all", "pluginType": "NodeHealth", "config": {"url": url}}),
            400,
            "reserved",
        ),
        (
            json!({"id": "h", "pluginType": "Nothing"}),
            400,
            "no plugin type",
        ),
        (
            json!({"id": "h", "pluginType": "NodeHealth"}),
            400,
            "config.url",
        ),
        (
            json!({"id": "h", "pluginType": "NodeHealth", "config": {"url": "http://x"}}),
            400,
            "file:// or exec://",
        ),
        (
            json!({"id": "h", "pluginType": "NodeHealth", "config": {"url": url}, "pollInterval": 0}),
            400,
            "pollInterval",
        ),
        (
            json!({"id": "h", "pluginType": "NodeHealth", "config": {"url": url}, "colour": 1}),
            400,
            "colour",
        ),
    ] {
        let reply = send(&server, "POST", "/rest/plugins", &body);
        if status == 400 && words == "file:// or exec://" {
            // Created, but its start failed: it is ERRORED with the reason.
            assert_eq!(reply.status, 201, "{}", reply.body);
            let made = plugin(&server, "h");
            assert_eq!(made["state"], "ERRORED", "{made}");
            assert!(
                made["errorMessage"].as_str().unwrap().contains(words),
                "{made}"
            );
            assert_eq!(
                server
                    .call("DELETE", "/rest/plugins/h", Auth::Admin, None)
                    .status,
                200
            );
            continue;
        }
        reply.assert_refused(status, words, &body);
    }
    let created = create_plugin(
        &server,
        &json!({"id": "health", "pluginType": "NodeHealth", "pollInterval": 3600, "config": {"url": url}}),
    );
    assert_eq!(created.json(), json!({"id": "health"}));
    send(
        &server,
        "POST",
        "/rest/plugins",
        &json!({"id": "health", "pluginType": "NodeHealth", "config": {"url": url}}),
    )
    .assert_refused(409, "exists", &"again");
    let health = plugin(&server, "health");
    assert_eq!(health["state"], "STARTED", "{health}");
    assert_eq!(health["autoStart"], true);
    assert_eq!(health["config"]["prefix"], "", "the default is kept");
    assert!(health["nextPollDate"].is_string(), "{health}");
    assert_eq!(
        server.get("/rest/plugin-types/NodeHealth").json()["instances"],
        json!([{"id": "health"}])
    );

    // A poll now: the probe's metrics reach the nodes.
    let polled = server.call("POST", "/rest/plugins/health/poll", Auth::Admin, None);
    assert_eq!(polled.status, 200, "{}", polled.body);
    assert!(polled.messages().contains("2 nodes"), "{}", polled.body);
    let n1 = server.get("/rest/nodes/n1").json();
    assert_eq!(n1["genericMetrics"]["temp"], 51.5, "{n1}");
    assert_eq!(n1["genericMetrics"]["watts"], 300.0);
    let n2 = server.get("/rest/nodes/n2").json();
    assert!(
        n2.to_string().contains("probe: \\\"fan\\\"") || n2.to_string().contains("probe: \"fan\""),
        "{n2}"
    );
    assert!(plugin(&server, "health")["lastPollDate"].is_string());

    // Changes: stop, start (the messages say so), an invalid configuration refused.
    let stopped = send(
        &server,
        "PUT",
        "/rest/plugins/health",
        &json!({"state": "STOPPED"}),
    );
    assert_eq!(stopped.status, 200, "{}", stopped.body);
    assert!(stopped.messages().contains("stopped"), "{}", stopped.body);
    assert_eq!(plugin(&server, "health")["state"], "STOPPED");
    let started = send(
        &server,
        "PUT",
        "/rest/plugins/health",
        &json!({"state": "STARTED", "pollInterval": 60}),
    );
    assert_eq!(started.status, 200, "{}", started.body);
    let said = started.json()["messages"].to_string();
    assert!(
        said.contains("updated") && said.contains("started"),
        "{said}"
    );
    assert_eq!(plugin(&server, "health")["pollInterval"], 60);
    send(
        &server,
        "PUT",
        "/rest/plugins/health",
        &json!({"config": {"url": "ftp://x"}}),
    )
    .assert_refused(400, "file:// or exec://", &"a bad url");
    assert_eq!(plugin(&server, "health")["config"]["url"], url.as_str());
    send(
        &server,
        "PUT",
        "/rest/plugins/health",
        &json!({"state": "ASLEEP"}),
    )
    .assert_refused(400, "state", &"state");
    let paused = send(
        &server,
        "PUT",
        "/rest/plugins/health",
        &json!({"state": "PAUSED"}),
    );
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(plugin(&server, "health")["state"], "PAUSED");

    let deleted = server.call("DELETE", "/rest/plugins/health", Auth::Admin, None);
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(deleted.json(), json!({}));
    assert!(
        deleted
            .header("X-SVC-Message")
            .is_some_and(|m| m.contains("health")),
        "{:?}",
        deleted.header("X-SVC-Message")
    );
    let again = server.call("DELETE", "/rest/plugins/health", Auth::Admin, None);
    again.assert_refused(404, "health", &"gone");
    assert!(
        again.json()["messages"].as_array().unwrap().len() >= 2,
        "{}",
        again.body
    );
}

#[test]
fn the_native_type_reads_node_reports_only_inside_the_configured_directories() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    let report = probes.path().join("nodes.txt");
    std::fs::write(
        &report,
        "# site nodes\nn1 STATE=Drained CPROC=2 GMETRIC[temp]=70 OS=linux\nn9 STATE=Idle\n",
    )
    .unwrap();
    let url = format!("file://{}", report.display());
    create_plugin(
        &server,
        &json!({"id": "native", "pluginType": "Native", "pollInterval": 3600, "config": {"getNodes": url, "site": "kept"}}),
    );
    let polled = server.call("POST", "/rest/plugins/native/poll", Auth::Admin, None);
    assert_eq!(polled.status, 200, "{}", polled.body);
    assert!(
        polled.messages().contains("n9"),
        "n9 is not a node here: {}",
        polled.body
    );
    let n1 = server.get("/rest/nodes/n1").json();
    assert_eq!(n1["genericMetrics"]["temp"], 70.0, "{n1}");
    assert_eq!(plugin(&server, "native")["config"]["site"], "kept");
    // Outside the directories, or another scheme: refused before it is kept.
    for bad in [
        "file:///etc/shadow",
        "exec:///bin/sh",
        "http://example.com/nodes",
        "file://relative",
    ] {
        let reply = send(
            &server,
            "PUT",
            "/rest/plugins/native",
            &json!({"config": {"getNodes": bad}}),
        );
        reply.assert_refused(400, "getNodes", &bad);
    }
    let link = probes.path().join("escape.txt");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let reply = send(
        &server,
        "PUT",
        "/rest/plugins/native",
        &json!({"config": {"getNodes": format!("file://{}", link.display())}}),
    );
    reply.assert_refused(400, "getNodes", &"a symlink out");
}

#[test]
fn scripts_get_events_and_answer_web_services() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    uploaded(&server, NOTIFIER);
    create_plugin(
        &server,
        &json!({"id": "notes", "pluginType": "Notifier",
        "config": {"kinds": "jobsubmit,custom"}}),
    );
    // A web service, by its hyphenated name: it records an event as the plugin.
    let posted = send(
        &server,
        "POST",
        "/rest/plugins/notes/services/notify-event",
        &json!({"type": "custom", "message": "hello", "severity": "WARN"}),
    );
    assert_eq!(posted.status, 200, "{}", posted.body);
    assert_eq!(posted.json()["by"], "admin");
    let events = server.get("/rest/events?api-version=3").json();
    let mine = events["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["eventType"] == "custom")
        .cloned();
    assert_eq!(
        mine.as_ref().map(|e| e["origin"].clone()),
        Some(json!("plugin/notes")),
        "{events}"
    );
    // Service events reach it (its own do not come back).
    drover_testkit::submit_v2(&server, json!({"commandFile": "/bin/true"}));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let recent = server.get("/rest/plugins/notes/services/recent").json();
        if recent
            .as_array()
            .is_some_and(|r| r.iter().any(|e| e["type"] == "jobsubmit"))
        {
            assert!(
                !recent.to_string().contains("\"custom\""),
                "its own event came back: {recent}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no jobsubmit event reached the plugin: {recent}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    send(
        &server,
        "POST",
        "/rest/plugins/notes/services/nothing",
        &json!({}),
    )
    .assert_refused(404, "nothing", &"unknown");
    send(
        &server,
        "POST",
        "/rest/plugins/notes/services/configure",
        &json!({}),
    )
    .assert_refused(404, "configure", &"not a service");
    send(
        &server,
        "POST",
        "/rest/plugins/notes/services/notifyEvent",
        &json!({"message": "no type"}),
    )
    .assert_refused(400, "type", &"no type");
    // Types and plugins survive a restart, and autoStart plugins start again.
    let server = server.restart();
    assert_eq!(plugin(&server, "notes")["state"], "STARTED");
    assert_eq!(server.get("/rest/plugin-types/Notifier").status, 200);
}

/// A job a plugin submits takes the site's job templates as a submission does: what the
/// script gives wins, `DEFAULT` fills the rest.
#[test]
fn a_job_a_plugin_submits_takes_the_default_template() {
    let server = TestServer::builder()
        .config(|c| {
            c.nodes = vec![NodeConfig::new("n1", 2)];
            c.job_templates = vec![crate::jobs::a_default_template()];
        })
        .start();
    uploaded(
        &server,
        r#"
        fn describe() { #{ id: "Maker", services: ["make"] } }
        fn make(request) { submit_job(request.body) }
    "#,
    );
    create_plugin(
        &server,
        &json!({"id": "maker", "pluginType": "Maker", "pollInterval": 86400}),
    );
    let made = send(
        &server,
        "POST",
        "/rest/plugins/maker/services/make",
        &json!({"command": "/bin/true", "user": crate::jobs::job_user(), "duration": 60}),
    );
    assert_eq!(made.status, 200, "{}", made.body);
    let id = made.json().as_str().unwrap().to_string();
    let job = server.get(&format!("/rest/jobs/{id}?api-version=2")).json();
    assert_eq!(job["credentials"]["account"], "general", "DEFAULT's: {job}");
    assert_eq!(job["flags"], json!(["RESTARTABLE"]), "{job}");
    assert_eq!(job["duration"], 60, "the script's wins: {job}");
}

#[test]
fn hostile_scripts_are_stopped_and_the_service_keeps_answering() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    uploaded(
        &server,
        r#"
        fn describe() { #{ id: "Hostile", services: ["spin", "grow", "deep"] } }
        fn poll() { loop { } }
        fn spin(request) { let x = 0; while true { x += 1; } }
        fn grow(request) { let a = []; loop { a.push("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" + a.len()); } }
        fn deep(request) { deep(request) }
    "#,
    );
    create_plugin(
        &server,
        &json!({"id": "bad", "pluginType": "Hostile", "pollInterval": 3600}),
    );
    for service in ["spin", "grow", "deep"] {
        let started = Instant::now();
        let reply = send(
            &server,
            "POST",
            &format!("/rest/plugins/bad/services/{service}"),
            &json!({}),
        );
        reply.assert_refused(400, "failed", &service);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{service} took {:?}",
            started.elapsed()
        );
        assert_eq!(server.get("/rest/diag/about").status, 200);
    }
    let polled = server.call("POST", "/rest/plugins/bad/poll", Auth::Admin, None);
    polled.assert_refused(400, "ERRORED", &"an endless poll");
    let bad = plugin(&server, "bad");
    assert_eq!(bad["state"], "ERRORED");
    assert!(
        bad["errorMessage"].as_str().unwrap().contains("stopped"),
        "{bad}"
    );
    // While one runs away, others are answered.
    assert_eq!(
        send(
            &server,
            "PUT",
            "/rest/plugins/bad",
            &json!({"state": "STARTED"})
        )
        .status,
        200
    );
    std::thread::scope(|scope| {
        scope.spawn(|| {
            send(
                &server,
                "POST",
                "/rest/plugins/bad/services/spin",
                &json!({}),
            )
        });
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        assert_eq!(server.get("/rest/diag/about").status, 200);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    });
}

#[test]
fn started_plugins_are_polled_on_their_interval_and_paused_ones_are_not() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    uploaded(
        &server,
        r#"
        fn describe() { #{ id: "Ticker", services: ["count"] } }
        fn poll() { let n = data_get("polls") ?? 0; data_set("polls", n + 1); }
        fn on_event(event) { let n = data_get("events") ?? 0; data_set("events", n + 1); }
        fn count(request) { #{ polls: data_get("polls") ?? 0, events: data_get("events") ?? 0 } }
    "#,
    );
    create_plugin(
        &server,
        &json!({"id": "tick", "pluginType": "Ticker", "pollInterval": 1}),
    );
    let count = |key: &str| {
        server.get("/rest/plugins/tick/services/count").json()[key]
            .as_i64()
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while count("polls") < 2 {
        assert!(
            Instant::now() < deadline,
            "never polled twice: {}",
            plugin(&server, "tick")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Paused: neither polls nor events; its web services still answer.
    assert_eq!(
        send(
            &server,
            "PUT",
            "/rest/plugins/tick",
            &json!({"state": "PAUSED"})
        )
        .status,
        200
    );
    std::thread::sleep(Duration::from_millis(1500));
    let (polls, events) = (count("polls"), count("events"));
    drover_testkit::submit_v2(&server, json!({"commandFile": "/bin/true"}));
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        (count("polls"), count("events")),
        (polls, events),
        "a paused plugin ran"
    );
    assert_eq!(plugin(&server, "tick")["state"], "PAUSED");
    // Started again, it gets the events that come.
    assert_eq!(
        send(
            &server,
            "PUT",
            "/rest/plugins/tick",
            &json!({"state": "STARTED"})
        )
        .status,
        200
    );
    drover_testkit::submit_v2(&server, json!({"commandFile": "/bin/true"}));
    let deadline = Instant::now() + Duration::from_secs(20);
    while count("events") <= events {
        assert!(Instant::now() < deadline, "no event reached the plugin");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn native_action_urls_run_for_job_events_with_the_job_id() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    let log = probes.path().join("started.log");
    let action = probes.path().join("started.sh");
    std::fs::write(
        &action,
        format!("#!/bin/sh\necho \"$1\" >> {}\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(&action, std::fs::Permissions::from_mode(0o755)).unwrap();
    create_plugin(
        &server,
        &json!({"id": "actions", "pluginType": "Native",
        "pollInterval": 3600, "config": {"jobStart": format!("exec://{}", action.display())}}),
    );
    send(
        &server,
        "PUT",
        "/rest/plugins/actions",
        &json!({"config": {"jobCancel": "exec:///bin/rm"}}),
    )
    .assert_refused(400, "jobCancel", &"an action outside the directories");
    let job = drover_testkit::submit_v2(&server, json!({"commandFile": "/bin/true"}));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let written = std::fs::read_to_string(&log).unwrap_or_default();
        if written.lines().any(|l| l == job) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobStart never ran for {job}: {written:?} {}",
            plugin(&server, "actions")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_native_type_adds_the_nodes_it_reports_and_jobs_run_on_them_across_a_restart() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    // The cluster query describes a node of the configuration and one it lacks; the node
    // query adds state, messages and metrics (the same line format).
    let cluster = probes.path().join("cluster.txt");
    std::fs::write(
        &cluster,
        "n2 CPROC=6 CMEMORY=2048\nrack7 CPROC=4 CMEMORY=8192 FEATURE=gpu:fast ARCH=x86_64\n",
    )
    .unwrap();
    let nodes = probe(
        probes.path(),
        "nodes.sh",
        "rack7 STATE=Idle GMETRIC[temp]=41.5 MESSAGE=\"fans replaced\"\n\
         bad/id CPROC=2\nnoproc STATE=Idle\nhuge CPROC=99999999\n",
    );
    create_plugin(
        &server,
        &json!({"id": "cluster", "pluginType": "Native", "pollInterval": 3600,
                "config": {"getCluster": format!("file://{}", cluster.display()), "getNodes": nodes}}),
    );
    let polled = server.call("POST", "/rest/plugins/cluster/poll", Auth::Admin, None);
    assert_eq!(polled.status, 200, "{}", polled.body);
    let said = polled.messages();
    assert!(said.contains("added: rack7"), "{said}");
    assert!(said.contains("bad/id: not added"), "{said}");
    assert!(said.contains("huge: CPROC: at most"), "{said}");
    assert!(
        said.contains("noproc: a node that is not configured needs CPROC"),
        "{said}"
    );
    let rack7 = server.get("/rest/nodes/rack7").json();
    assert_eq!(rack7["totalProcessors"], 4, "{rack7}");
    assert_eq!(rack7["totalMemory"], 8192, "{rack7}");
    assert_eq!(rack7["features"], json!(["gpu", "fast"]), "{rack7}");
    assert_eq!(rack7["genericMetrics"]["temp"], 41.5, "{rack7}");
    assert_eq!(server.get("/rest/nodes/n2").json()["totalProcessors"], 6);
    assert!(server.get("/rest/nodes/noproc").status == 404);

    // The same report again changes nothing and adds no message twice.
    for _ in 0..2 {
        let again = server.call("POST", "/rest/plugins/cluster/poll", Auth::Admin, None);
        assert!(
            again.messages().contains("0 nodes updated"),
            "{}",
            again.body
        );
    }
    let messages = server.get("/rest/nodes/rack7").json()["messages"].clone();
    assert_eq!(messages.as_array().map(Vec::len), Some(1), "{messages}");

    // The scheduler places work on the added node.
    let job = drover_testkit::submit_v2(
        &server,
        json!({"commandFile": "/bin/true", "requirements": [{"features": ["gpu"]}]}),
    );
    let ended = drover_testkit::wait_state_v2(&server, &job, "Completed");
    assert_eq!(
        ended["requirements"][0]["nodes"],
        json!([{"name": "rack7"}]),
        "{ended}"
    );

    // A restart keeps the node (nothing has polled yet) and what was reported of n2.
    let server = server.restart();
    let rack7 = server.get("/rest/nodes/rack7");
    assert_eq!(rack7.status, 200, "{}", rack7.body);
    assert_eq!(rack7.json()["features"], json!(["gpu", "fast"]));
    assert_eq!(server.get("/rest/nodes/n2").json()["totalProcessors"], 6);
}

#[test]
fn a_type_uploaded_without_reload_reaches_a_started_plugin_only_when_it_is_configured_again() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    let version = |v: &str| {
        format!(
            "fn describe() {{ #{{ id: \"Versioned\", services: [\"which\"] }} }}\n\
             fn which(request) {{ #{{ version: \"{v}\" }} }}\n"
        )
    };
    uploaded(&server, &version("one"));
    start_plugin(&server, "versioned", "Versioned");
    let which = || server.get("/rest/plugins/versioned/services/which").json()["version"].clone();
    assert_eq!(which(), "one");

    let reply = upload(
        &server,
        "text/plain",
        version("two").as_bytes(),
        "?reload-plugins=false",
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        which(),
        "one",
        "a running plugin keeps the script it was started with"
    );
    let restarted = send(
        &server,
        "PUT",
        "/rest/plugins/versioned",
        &json!({"state": "STARTED"}),
    );
    assert_eq!(restarted.status, 200, "{}", restarted.body);
    assert_eq!(which(), "two");

    // With the default, the change reaches it at once.
    uploaded(&server, &version("three"));
    assert_eq!(which(), "three");
}

/// Attack: a user who may own plugins (but not change nodes) makes a Native plugin whose
/// report would add a node and drain a real one. The poll is refused; nothing changes.
#[test]
fn an_ordinary_users_native_plugin_neither_adds_nor_changes_nodes() {
    let probes = tempfile::tempdir().unwrap();
    let dir = probes.path().to_path_buf();
    let server = TestServer::builder()
        .user("olga", false)
        .config(move |c| {
            c.nodes = vec![NodeConfig::new("n1", 2)];
            c.plugins.native_directories = vec![dir];
            c.plugins.native_allow_root = true;
        })
        .start();
    let role = send(
        &server,
        "POST",
        "/rest/roles",
        &json!({"name": "plugin-owners", "permissions": [
            {"id": "plugins:*", "scope": "OWN"}, {"id": "plugin-types:read", "scope": "ALL"}]}),
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
    let report = probes.path().join("nodes.txt");
    std::fs::write(&report, "mine CPROC=64\nn1 STATE=Drained CPROC=1\n").unwrap();
    let olga = Auth::Basic("olga".into(), drover_testkit::PASSWORD.into());
    let as_olga = |method: &str, path: &str, body: Option<Value>| {
        server.call(
            method,
            path,
            olga.clone(),
            body.map(|b| ("application/json", b.to_string().into_bytes())),
        )
    };
    let created = as_olga(
        "POST",
        "/rest/plugins",
        Some(
            json!({"id": "olgas", "pluginType": "Native", "pollInterval": 3600,
                    "config": {"getNodes": format!("file://{}", report.display())}}),
        ),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let polled = as_olga("POST", "/rest/plugins/olgas/poll", None);
    polled.assert_refused(400, "may not", &"a poll adding nodes as an ordinary user");
    assert_eq!(server.get("/rest/nodes/mine").status, 404);
    let n1 = server.get("/rest/nodes/n1").json();
    assert_eq!(n1["totalProcessors"], 2, "{n1}");
    assert_ne!(n1["state"], "Drained", "{n1}");
}

/// getJobs: work another resource manager runs on the nodes holds their processors, so
/// the scheduler does not place jobs over it; once the report drops it, they run.
#[test]
fn the_native_type_keeps_jobs_off_processors_that_outside_work_holds() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    let jobs = probes.path().join("jobs.txt");
    // A finished job holds nothing; a job id of this service is not outside work.
    std::fs::write(
        &jobs,
        "ext.1 STATE=Running UNAME=alice TASKLIST=n1,n1\n\
         ext.2 STATE=Running TASKLIST=n2 DPROCS=2\n\
         ext.3 STATE=Completed TASKLIST=n2\n\
         ext.4 STATE=Running TASKLIST=elsewhere\n",
    )
    .unwrap();
    create_plugin(
        &server,
        &json!({"id": "outside", "pluginType": "Native", "pollInterval": 3600,
                "config": {"getJobs": format!("file://{}", jobs.display())}}),
    );
    let polled = server.call("POST", "/rest/plugins/outside/poll", Auth::Admin, None);
    assert_eq!(polled.status, 200, "{}", polled.body);
    assert!(
        polled.messages().contains("not known here: elsewhere"),
        "{}",
        polled.body
    );
    for node in ["n1", "n2"] {
        let n = server.get(&format!("/rest/nodes/{node}")).json();
        assert_eq!(n["externalLoad"], 2, "{n}");
        assert_eq!(n["availableProcessors"], 0, "{n}");
        assert_eq!(n["state"], "Busy", "{n}");
    }
    let job = drover_testkit::submit_v2(&server, json!({"commandFile": "/bin/true"}));
    std::thread::sleep(Duration::from_millis(500));
    let waiting = server
        .get(&format!("/rest/jobs/{job}?api-version=2"))
        .json();
    assert_ne!(waiting["states"]["state"], "Completed", "{waiting}");

    // The outside work ended: the report no longer names n1 or n2.
    std::fs::write(&jobs, format!("{job} STATE=Running TASKLIST=n1,n1\n")).unwrap();
    let polled = server.call("POST", "/rest/plugins/outside/poll", Auth::Admin, None);
    assert_eq!(polled.status, 200, "{}", polled.body);
    drover_testkit::wait_state_v2(&server, &job, "Completed");
    assert_eq!(server.get("/rest/nodes/n1").json()["externalLoad"], 0);
}

/// A Native plugin's node report is of all its nodes, as a resource manager's is: a node
/// it added and no longer names is down (and says why) until it names it again. Its
/// reports speak as `plugin/<id>`, so a plugin named like a resource manager (`slurm`)
/// never speaks for that manager's nodes (issue #58).
#[test]
fn a_node_a_native_plugin_no_longer_reports_is_down_until_it_is_reported_again() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    let report = probes.path().join("nodes.txt");
    std::fs::write(&report, "rack1 CPROC=2\nrack2 CPROC=2 STATE=Idle\n").unwrap();
    create_plugin(
        &server,
        &json!({"id": "slurm", "pluginType": "Native", "pollInterval": 3600,
                "config": {"getNodes": format!("file://{}", report.display())}}),
    );
    let poll = || {
        let polled = server.call("POST", "/rest/plugins/slurm/poll", Auth::Admin, None);
        assert_eq!(polled.status, 200, "{}", polled.body);
        polled.messages()
    };
    assert!(poll().contains("added: rack1, rack2"));
    assert_eq!(server.get("/rest/nodes/rack2").json()["state"], "Idle");

    std::fs::write(&report, "rack1 CPROC=2\n").unwrap();
    let said = poll();
    assert!(said.contains("down: rack2"), "{said}");
    let rack2 = server.get("/rest/nodes/rack2").json();
    assert_eq!(rack2["state"], "Down", "{rack2}");
    assert!(
        rack2
            .to_string()
            .contains("plugin/slurm no longer reports this node"),
        "{rack2}"
    );
    assert_eq!(server.get("/rest/nodes/rack1").json()["state"], "Idle");
    // No job is placed on it meanwhile.
    let job = drover_testkit::submit_v2(
        &server,
        json!({"commandFile": "/bin/true", "nodesRequested": [{"name": "rack2"}]}),
    );
    std::thread::sleep(Duration::from_millis(500));
    let waiting = server
        .get(&format!("/rest/jobs/{job}?api-version=2"))
        .json();
    assert_ne!(waiting["states"]["state"], "Completed", "{waiting}");
    assert!(!poll().contains("down"), "told once");

    std::fs::write(&report, "rack1 CPROC=2\nrack2 CPROC=2\n").unwrap();
    poll();
    drover_testkit::wait_state_v2(&server, &job, "Completed");
    let rack2 = server.get("/rest/nodes/rack2").json();
    assert_ne!(rack2["state"], "Down", "{rack2}");
}

/// `jobs()` answers the jobs that have not ended, newest first, read from the book's
/// state index (its cost is the live work's, not the history's, issue #59): an ended
/// job is not among them, a waiting one is.
#[test]
fn a_plugins_jobs_are_the_live_ones() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    uploaded(
        &server,
        "fn describe() { #{ id: \"Lister\", services: [\"live\"] } }\n\
         fn live(request) { let ids = []; for j in jobs() { ids.push(j.id); } #{ ids: ids } }\n",
    );
    start_plugin(&server, "lister", "Lister");
    let ended = drover_testkit::submit_v2(&server, json!({"commandFile": "/bin/true"}));
    drover_testkit::wait_state_v2(&server, &ended, "Completed");
    let waiting = |feature: &str| {
        drover_testkit::submit_v2(
            &server,
            json!({"commandFile": "/bin/true", "requirements": [{"features": [feature]}]}),
        )
    };
    let (first, second) = (waiting("nowhere"), waiting("nowhere-either"));
    let live = server.get("/rest/plugins/lister/services/live");
    assert_eq!(live.status, 200, "{}", live.body);
    assert_eq!(live.json()["ids"], json!([second, first]), "{}", live.body);
}

/// getJobs: the outside jobs a Native plugin reports are shown as jobs of that manager
/// (as Slurm's outside jobs are): their state follows the reports, one no longer
/// reported has ended, and nothing here changes or cancels them; a restart keeps them as
/// they were until the next report (issue #58).
#[test]
fn the_jobs_a_native_plugin_reports_are_shown_as_its_jobs() {
    let probes = tempfile::tempdir().unwrap();
    let server = server(probes.path());
    let jobs = probes.path().join("jobs.txt");
    std::fs::write(
        &jobs,
        "ext.1 STATE=Running UNAME=alice TASKLIST=n1\n\
         ext.2 STATE=Idle UNAME=bob\n\
         ext.3 STATE=Running UNAME=../../root TASKLIST=nowhere\n",
    )
    .unwrap();
    create_plugin(
        &server,
        &json!({"id": "outside", "pluginType": "Native", "pollInterval": 3600,
                "config": {"getJobs": format!("file://{}", jobs.display())}}),
    );
    let poll = |server: &TestServer| {
        let polled = server.call("POST", "/rest/plugins/outside/poll", Auth::Admin, None);
        assert_eq!(polled.status, 200, "{}", polled.body);
        polled.messages()
    };
    assert!(poll(&server).contains("shown as jobs"));
    let named = |server: &TestServer, name: &str| -> Vec<Value> {
        let listed = server.get("/rest/jobs?api-version=2").json();
        listed["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["customName"] == name)
            .cloned()
            .collect()
    };
    let ext1 = named(&server, "ext.1");
    assert_eq!(ext1.len(), 1, "{ext1:?}");
    let ext1 = &ext1[0];
    assert_eq!(ext1["states"]["state"], "Running", "{ext1}");
    assert_eq!(ext1["credentials"]["user"], "alice", "{ext1}");
    assert_eq!(
        ext1["resourceManagers"][0]["name"], "plugin/outside",
        "{ext1}"
    );
    assert_eq!(
        ext1["requirements"][0]["nodes"],
        json!([{"name": "n1"}]),
        "{ext1}"
    );
    assert_eq!(named(&server, "ext.2")[0]["states"]["state"], "Idle");
    assert!(
        named(&server, "ext.3").is_empty(),
        "its node is not known here"
    );
    let id = ext1["name"].as_str().unwrap().to_string();

    // Its user may not cancel or change it here: its own manager runs it.
    let cancel = server.call("DELETE", &format!("/rest/jobs/{id}"), Auth::User, None);
    cancel.assert_refused(400, "plugin/outside", &"cancelling a reported job");
    let change = server.send_json_as(
        Auth::User,
        "PUT",
        &format!("/rest/jobs/{id}?api-version=2"),
        &json!({"customName": "mine"}),
    );
    assert!(
        change.status >= 400 && change.status < 500,
        "{}",
        change.body
    );
    let server = server.restart();
    assert_eq!(named(&server, "ext.1")[0]["states"]["state"], "Running");

    std::fs::write(&jobs, "ext.2 STATE=Completed UNAME=bob EXITCODE=3\n").unwrap();
    assert!(poll(&server).contains("2 ended"));
    let ext1 = &named(&server, "ext.1")[0];
    assert_eq!(ext1["states"]["state"], "Completed", "{ext1}");
    assert!(
        ext1["messages"].to_string().contains("no longer reports"),
        "{ext1}"
    );
    let ext2 = &named(&server, "ext.2")[0];
    assert_eq!(ext2["states"]["state"], "Completed", "{ext2}");
    assert_eq!(ext2["completionCode"], 3, "{ext2}");
    // Reported again, an ended job is not shown twice.
    poll(&server);
    assert_eq!(named(&server, "ext.2").len(), 1);
}

/// Attacks on reported jobs (the review of #58): a report naming one id many times makes
/// one record, not one more each poll; records of reported work never count against
/// their user's queue limit (a plugin could otherwise stop a user submitting); and an
/// administrator may remove a stale record, which its user may not.
#[test]
fn a_report_repeating_an_id_makes_one_job_and_blocks_no_user() {
    let probes = tempfile::tempdir().unwrap();
    let dir = probes.path().to_path_buf();
    let server = TestServer::builder()
        .config(move |c| {
            c.nodes = vec![NodeConfig::new("n1", 2)];
            c.plugins.native_directories = vec![dir];
            c.plugins.native_allow_root = true;
            c.scheduler.limits.max_queued_jobs_per_user = 2;
        })
        .start();
    let jobs = probes.path().join("jobs.txt");
    std::fs::write(&jobs, "x STATE=Idle UNAME=alice\n".repeat(50)).unwrap();
    create_plugin(
        &server,
        &json!({"id": "outside", "pluginType": "Native", "pollInterval": 3600,
                "config": {"getJobs": format!("file://{}", jobs.display())}}),
    );
    for _ in 0..3 {
        let polled = server.call("POST", "/rest/plugins/outside/poll", Auth::Admin, None);
        assert_eq!(polled.status, 200, "{}", polled.body);
    }
    let listed = server.get("/rest/jobs?api-version=2").json();
    let records: Vec<&Value> = listed["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["customName"] == "x")
        .collect();
    assert_eq!(records.len(), 1, "{listed}");
    let record = records[0]["name"].as_str().unwrap().to_string();
    for _ in 0..2 {
        let held = drover_testkit::submit_as(
            &server,
            Auth::User,
            &json!({"commandFile": "/bin/true", "holds": ["User"]}),
        );
        assert_eq!(held.status, 201, "{}", held.body);
    }
    let refused = server.call("DELETE", &format!("/rest/jobs/{record}"), Auth::User, None);
    refused.assert_refused(400, "plugin/outside", &"its user removing the record");
    let removed = server.call("DELETE", &format!("/rest/jobs/{record}"), Auth::Admin, None);
    assert_eq!(removed.status, 200, "{}", removed.body);
    let gone = server
        .get(&format!("/rest/jobs/{record}?api-version=2"))
        .json();
    assert_eq!(gone["states"]["state"], "Removed", "{gone}");
}
