//! Events (v1 XML, v3 JSON, events.log) and reports over HTTP.

use drover_testkit::{Auth, TestServer};
use serde_json::{Value, json};

/// Two events as a client of the original service posts them.
const TWO_EVENTS: &str = include_str!("two-events.xml");

fn post_xml(server: &TestServer, xml: &str) -> drover_testkit::Reply {
    server.call(
        "POST",
        "/rest/events",
        Auth::Admin,
        Some(("application/xml", xml.as_bytes().to_vec())),
    )
}

fn count(server: &TestServer, path: &str) -> u64 {
    // Not the audit events of the test's own logins (recorded as they happen).
    let path = if path == "/rest/events" {
        query(path, json!({"origin": {"$ne": "drover/api"}}))
    } else {
        path.to_string()
    };
    let reply = server.get(&path);
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["totalCount"].as_u64().unwrap()
}

/// Posts `event` in version 3.
fn post_v3(server: &TestServer, event: Value) -> drover_testkit::Reply {
    server.send_json("POST", "/rest/events?api-version=3", &event)
}

/// The answer to `path` with the `query` parameter `q`.
fn read_query(server: &TestServer, path: &str, q: Value) -> Value {
    server.get(&query(path, q)).json()
}

fn query(path: &str, q: Value) -> String {
    let encoded: String = form_urlencoded::byte_serialize(q.to_string().as_bytes()).collect();
    format!(
        "{path}{}query={encoded}",
        if path.contains('?') { "&" } else { "?" }
    )
}

#[test]
fn version_1_xml_events_read_back_in_both_shapes() {
    let server = TestServer::start();
    let reply = post_xml(&server, TWO_EVENTS);
    assert_eq!(reply.status, 201, "{}", reply.body);
    let ids: Vec<String> = serde_json::from_value(reply.json()["ids"].clone()).unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(
        reply.header("location").unwrap(),
        format!("/rest/events/{}", ids[0])
    );

    let v1 = server.get(&format!("/rest/events/{}", ids[0])).json();
    assert_eq!(v1["eventType"], "jobstart");
    assert_eq!(v1["sourceComponent"], "moab");
    assert_eq!(v1["status"], "success");
    assert_eq!(v1["facility"], "job");
    assert_eq!(v1["details"]["queue"], "batch");
    assert_eq!(
        v1["initiatedBy"],
        json!({"user": "alice", "proxyUser": "bob"})
    );
    assert_eq!(v1["primaryObject"]["serialization"], "<job/>");
    assert_eq!(v1["relatedObjects"], json!([{"type": "node", "id": "n1"}]));
    let v3 = server
        .get(&format!("/rest/events/{}?api-version=3", ids[0]))
        .json();
    assert_eq!(v3["eventDate"], "2026-11-22 15:00:00 UTC");
    assert_eq!(v3["origin"], "moab");
    assert_eq!(
        v3["associatedObjects"],
        json!([{"type": "node", "id": "n1"}])
    );
    assert_eq!(v3["severity"], "INFO");
    for old in [
        "eventTime",
        "sourceComponent",
        "errorMessage",
        "relatedObjects",
    ] {
        assert!(v3.get(old).is_none(), "{old} in {v3}");
    }
    let failure = server
        .get(&format!("/rest/events/{}?api-version=3", ids[1]))
        .json();
    assert_eq!(failure["severity"], "ERROR");
    assert_eq!(failure["code"], 12);
    assert_eq!(failure["message"], "node lost");

    // The same filter in each version's names; v1 dates compare as instants.
    let v1_rm = read_query(
        &server,
        "/rest/events",
        json!({"sourceComponent": "rm", "errorMessage.message": "node lost"}),
    );
    assert_eq!(v1_rm["totalCount"], 1, "{v1_rm}");
    assert_eq!(v1_rm["results"][0]["id"], ids[1].as_str());
    let v3_rm = read_query(
        &server,
        "/rest/events?api-version=3",
        json!({"origin": "rm"}),
    );
    assert_eq!(v3_rm["results"][0]["id"], ids[1].as_str());
    let newest = read_query(
        &server,
        "/rest/events?sort=%7B%22eventTime%22%3A-1%7D&max=1",
        json!({"eventTime": {"$gte": "2026-11-22 15:00:00 UTC"}, "facility": {"$in": ["job", "rm"]}}),
    );
    assert_eq!(newest["totalCount"], 2, "{newest}");
    assert_eq!(newest["results"][0]["id"], ids[1].as_str());
}

#[test]
fn a_bad_xml_body_stores_none_of_its_events() {
    let server = TestServer::start();
    let before = count(&server, "/rest/events");
    let cases = [
        ("not well-formed", TWO_EVENTS.replace("</Events>", "")),
        (
            "missing attribute",
            TWO_EVENTS.replace(r#"facility="rm""#, ""),
        ),
        (
            "bad date",
            TWO_EVENTS.replace("2026-11-22T16:00:00Z", "22/11/2026"),
        ),
        (
            "bad status",
            TWO_EVENTS.replace(r#"status="failure""#, r#"status="maybe""#),
        ),
        ("wrong root", "<Things><Event/></Things>".to_string()),
        ("empty", "<Events/>".to_string()),
        (
            "entity",
            format!(r#"<!DOCTYPE x [<!ENTITY e "e">]>{TWO_EVENTS}"#),
        ),
    ];
    for (what, body) in cases {
        let reply = post_xml(&server, &body);
        assert_eq!(reply.status, 400, "{what}: {}", reply.body);
        assert!(
            reply.json()["messages"].as_array().unwrap().len() >= 2,
            "{what}: {}",
            reply.body
        );
    }
    let json_without_version = server.send_json("POST", "/rest/events", &json!({"eventType": "x"}));
    assert_eq!(json_without_version.status, 400);
    assert!(json_without_version.messages().contains("api-version=3"));
    assert_eq!(count(&server, "/rest/events"), before);
}

#[test]
fn version_3_events_are_created_from_json_and_refused_with_reasons() {
    let server = TestServer::start();
    let reply = post_v3(
        &server,
        json!({
            "eventType": "VM Provision", "severity": "warn", "code": 42,
            "eventDate": "2026-11-22 10:00:00 UTC", "origin": "plugin-a",
            "message": "slow", "arguments": ["a", "b"],
            "associatedObjects": [{"type": "VM", "id": "vm1"}]
        }),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let created = reply.json();
    assert_eq!(created["severity"], "WARN");
    assert_eq!(created["version"], 1);
    assert_eq!(created["tenant"], Value::Null);
    let id = created["id"].as_str().unwrap();
    let read = server
        .get(&format!("/rest/events/{id}?api-version=3"))
        .json();
    assert_eq!(read, created);
    let v1 = server.get(&format!("/rest/events/{id}")).json();
    assert_eq!(v1["sourceComponent"], "plugin-a");
    assert_eq!(v1["errorMessage"]["message"], "slow");
    assert_eq!(v1["relatedObjects"][0]["id"], "vm1");
    assert_eq!(v1["errorMessage"]["errorCode"], "42");
    assert!(v1.get("eventDate").is_none());
    // Version-1 queries see what version-1 reads show.
    let found = read_query(
        &server,
        "/rest/events",
        json!({"status": "success", "errorMessage.errorCode": "42"}),
    );
    assert_eq!(found["totalCount"], 1, "{found}");

    let before = count(&server, "/rest/events");
    for (body, field) in [
        (json!({"severity": "INFO"}), "eventType"),
        (json!({"eventType": "x", "severity": "LOUD"}), "severity"),
        (json!({"eventType": "x", "code": -1}), "code"),
        (
            json!({"eventType": "x", "eventDate": "yesterday"}),
            "eventDate",
        ),
        (
            json!({"eventType": "x", "associatedObjects": [{"type": "VM"}]}),
            "associatedObjects[0].id",
        ),
        (json!(["not", "an", "object"]), "JSON object"),
    ] {
        let reply = server.send_json("POST", "/rest/events?api-version=3", &body);
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert!(reply.messages().contains(field), "{field}: {}", reply.body);
    }
    assert_eq!(count(&server, "/rest/events"), before);
    assert_eq!(
        server.get("/rest/events/000000000000000000000000").status,
        404
    );
}

/// Splits a log line into its timestamp and `key="value"` pairs (arguments as one
/// pair whose value is the list of unescaped strings, joined by `|`).
fn parse_line(line: &str) -> (String, Vec<(String, String)>) {
    let (timestamp, mut rest) = line.split_once(' ').unwrap();
    let mut pairs = Vec::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=').unwrap();
        let (value, remainder) = if let Some(list) = after.strip_prefix('[') {
            let mut values = Vec::new();
            let mut tail = list;
            while let Some(quoted) = tail.strip_prefix('"') {
                let (value, after_value) = unescape(quoted);
                values.push(value);
                tail = after_value.strip_prefix(',').unwrap_or(after_value);
            }
            (values.join("|"), tail.strip_prefix(']').unwrap())
        } else {
            unescape(after.strip_prefix('"').unwrap())
        };
        pairs.push((key.to_string(), value));
        rest = remainder.trim_start();
    }
    (timestamp.to_string(), pairs)
}

/// Reads an escaped value up to its closing quote; answers it and what follows.
fn unescape(text: &str) -> (String, &str) {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (out, &text[i + 1..]),
            '\\' => out.push(match chars.next().unwrap().1 {
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                other => other,
            }),
            c => out.push(c),
        }
    }
    panic!("unterminated value in {text}");
}

#[test]
fn every_event_is_a_line_of_events_log_that_parses_back() {
    let server = TestServer::start();
    let message = "quote \" backslash \\ newline \n return \r tab \t end";
    let reply = post_v3(
        &server,
        json!({
            "eventType": "Service Create", "severity": "ERROR", "code": 3054,
            "origin": "o=\"x\"", "message": message, "arguments": ["one", "t\"wo"],
            "associatedObjects": [{"type": "Service", "id": "s1"}, {"type": "VM", "id": "v 2"}]
        }),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(post_xml(&server, TWO_EVENTS).status, 201);
    let log = std::fs::read_to_string(server.data_dir().join("events.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let line = lines
        .iter()
        .find(|l| l.contains("Service Create"))
        .expect("the event's line");
    let (timestamp, pairs) = parse_line(line);
    assert!(
        timestamp.parse::<jiff::Timestamp>().is_ok() && timestamp.contains('T'),
        "{timestamp}"
    );
    let get = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{key} missing in {line}"))
    };
    assert_eq!(get("severity"), "ERROR");
    assert_eq!(get("code"), "0x00000bee");
    assert_eq!(get("type"), "Service Create");
    assert_eq!(get("origin"), "o=\"x\"");
    assert_eq!(get("associatedObject.0.type"), "Service");
    assert_eq!(get("associatedObject.1.id"), "v 2");
    assert_eq!(get("arguments"), "one|t\"wo");
    assert_eq!(get("message"), message);
    // The XML events are lines too, one each.
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("type=\"jobstart\""))
            .count(),
        1
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("type=\"rmfailure\""))
            .count(),
        1
    );
}

#[test]
fn size_rolling_rotates_the_event_log_and_keeps_what_is_configured() {
    let server = TestServer::builder()
        .config(|c| {
            c.events.max_bytes = 700;
            c.events.keep = 2;
        })
        .start();
    for n in 0..40 {
        let reply = post_v3(
            &server,
            json!({"eventType": "tick", "message": format!("event number {n}")}),
        );
        assert_eq!(reply.status, 201);
    }
    let dir = server.data_dir();
    for name in ["events.log", "events.log.1", "events.log.2"] {
        let size = std::fs::metadata(dir.join(name)).unwrap().len();
        assert!(size > 0 && size <= 700, "{name}: {size} bytes");
    }
    assert!(!dir.join("events.log.3").exists());
    // The newest event is in the current file, and every event is still stored.
    let current = std::fs::read_to_string(dir.join("events.log")).unwrap();
    assert!(current.contains("event number 39"));
    assert_eq!(
        count(
            &server,
            &query("/rest/events?api-version=3", json!({"eventType": "tick"}))
        ),
        40
    );
}

#[test]
fn the_scheduler_records_its_events_and_they_survive_a_restart() {
    let server = TestServer::start();
    let reply = server.send_json(
        "POST",
        "/rest/jobs?api-version=2",
        &json!({"commandFile": "/bin/true", "holds": ["User"]}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let job = reply.json()["name"].as_str().unwrap().to_string();
    let submitted = query(
        "/rest/events",
        json!({"eventType": "jobsubmit", "primaryObject.id": job}),
    );
    let found = server.wait_for(&submitted, "the jobsubmit event", |page| {
        page["totalCount"] == 1
    });
    assert_eq!(found["results"][0]["facility"], "job");
    assert_eq!(found["results"][0]["initiatedBy"]["user"], "admin");
    let id = found["results"][0]["id"].as_str().unwrap().to_string();
    // Its log line follows the commit of the job (and of the event with it).
    let log = server.data_dir().join("events.log");
    for _ in 0..100 {
        if std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("type=\"jobsubmit\"")
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(
        lines.contains(&format!("type=\"jobsubmit\" origin=\"scheduler\" associatedObject.0.type=\"job\" associatedObject.0.id=\"{job}\"")),
        "{lines}"
    );
    let created = post_v3(&server, json!({"eventType": "before restart"})).json();
    let server = server.restart();
    assert_eq!(server.get(&format!("/rest/events/{id}")).status, 200);
    let again = server
        .get(&format!(
            "/rest/events/{}?api-version=3",
            created["id"].as_str().unwrap()
        ))
        .json();
    assert_eq!(again["eventType"], "before restart");
    // Ids keep increasing after a restart.
    let after = post_v3(&server, json!({"eventType": "after restart"})).json();
    assert!(after["id"].as_str().unwrap() > created["id"].as_str().unwrap());
}

/// The `data` of each datapoint of a list.
fn data_of(points: &Value) -> Vec<Value> {
    let results = points["results"].as_array().unwrap();
    results.iter().map(|p| p["data"].clone()).collect()
}

fn create_report(server: &TestServer, body: Value) -> Value {
    let reply = server.send_json("POST", "/rest/reports", &body);
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.json()
}

fn add_sample(server: &TestServer, report: &str, at: &str, data: Value) {
    let reply = server.send_json(
        "POST",
        &format!("/rest/reports/{report}/samples"),
        &json!({"timestamp": at, "data": data}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
}

#[test]
fn reports_consolidate_samples_into_hand_computed_averages() {
    let server = TestServer::start();
    let created = create_report(
        &server,
        json!({"name": "load", "datapointDuration": 60, "reportSize": 3, "minimumSampleSize": 2}),
    );
    assert_eq!(created["name"], "load");
    assert!(created["messages"].is_array());
    let id = created["id"].as_str().unwrap().to_string();

    // Period 10:00: cpu 1, 3 (mem only on one sample); 10:01: a single sample (null);
    // then a late sample for 10:00 after 10:01 was opened.
    add_sample(
        &server,
        "load",
        "2026-01-22 10:00:05 UTC",
        json!({"cpu": 1, "mem": 100}),
    );
    add_sample(
        &server,
        "load",
        "2026-01-22 10:01:30 UTC",
        json!({"cpu": 7}),
    );
    add_sample(
        &server,
        &id,
        "2026-01-22 10:00:50 UTC",
        json!({"cpu": 3, "note": "text"}),
    );
    let report = server.get("/rest/reports/load?api-version=2").json();
    let points = report["datapoints"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{report}");
    assert_eq!(points[0]["startDate"], "2026-01-22 10:00:00 UTC");
    assert_eq!(points[0]["endDate"], "2026-01-22 10:01:00 UTC");
    assert_eq!(points[0]["firstSampleDate"], "2026-01-22 10:00:05 UTC");
    assert_eq!(points[0]["lastSampleDate"], "2026-01-22 10:00:50 UTC");
    assert_eq!(points[0]["data"], json!({"cpu": 2.0, "mem": 100.0}));
    assert_eq!(points[1]["data"], Value::Null);

    // A list of samples in one request; two newer periods push the oldest out.
    let reply = server.send_json(
        "POST",
        "/rest/reports/load/samples",
        &json!([
            {"timestamp": "2026-01-22 10:01:40 UTC", "data": {"cpu": 9}},
            {"timestamp": "2026-01-22 10:02:00 UTC", "data": {"cpu": 4}},
            {"timestamp": "2026-01-22 10:02:59 UTC", "data": {"cpu": 5}},
            {"timestamp": "2026-01-22 10:03:10 UTC", "data": {"cpu": 1}},
            {"timestamp": "2026-01-22 10:03:20 UTC", "data": {"cpu": 2}}
        ]),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let points = server
        .get("/rest/reports/load/datapoints?api-version=2")
        .json();
    assert_eq!(points["totalCount"], 3);
    let data = data_of(&points);
    assert_eq!(
        data,
        vec![
            json!({"cpu": 8.0}),
            json!({"cpu": 4.5}),
            json!({"cpu": 1.5})
        ]
    );
    // Too old for a full report: dropped, and said so.
    let reply = server.send_json(
        "POST",
        "/rest/reports/load/samples",
        &json!({"timestamp": "2026-01-22 09:00:00 UTC", "data": {"cpu": 100}}),
    );
    assert_eq!(reply.status, 201);
    assert!(reply.messages().contains("dropped"), "{}", reply.body);
    // Datapoints take a query and a sort.
    let high = read_query(
        &server,
        "/rest/reports/load/datapoints?api-version=2&sort=%7B%22data.cpu%22%3A-1%7D",
        json!({"data.cpu": {"$gt": 2}}),
    );
    assert_eq!(high["totalCount"], 2);
    assert_eq!(high["results"][0]["data"]["cpu"], 8.0);
    // Past periods are consolidated: their samples are gone.
    assert_eq!(count(&server, "/rest/reports/load/samples"), 0);

    // The list shows reports without datapoints.
    let list = server.get("/rest/reports").json();
    assert_eq!(list["totalCount"], 1);
    assert!(list["results"][0].get("datapoints").is_none());
    assert_eq!(list["results"][0]["reportSize"], 3);
}

#[test]
fn samples_stay_readable_while_their_period_is_open_or_when_kept() {
    let server = TestServer::start();
    create_report(
        &server,
        json!({"name": "open", "datapointDuration": 3600, "reportSize": 5}),
    );
    create_report(
        &server,
        json!({"name": "kept", "datapointDuration": 60, "reportSize": 5, "keepSamples": true}),
    );
    // No timestamp: now, in the open hour.
    let reply = server.send_json(
        "POST",
        "/rest/reports/open/samples",
        &json!({"data": {"x": 1}}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let samples = server.get("/rest/reports/open/samples").json();
    assert_eq!(samples["totalCount"], 1);
    assert_eq!(samples["results"][0]["data"], json!({"x": 1}));
    let datapoints = server.get("/rest/reports/open/datapoints").json();
    assert_eq!(datapoints["results"][0]["data"], json!({"x": 1.0}));

    add_sample(
        &server,
        "kept",
        "2026-01-01 00:00:00 UTC",
        json!({"x": 1, "nested": {"y": 2}}),
    );
    add_sample(&server, "kept", "2026-01-01 00:05:00 UTC", json!({"x": 3}));
    let kept = server
        .get("/rest/reports/kept/samples?api-version=2&sort=%7B%22timestamp%22%3A-1%7D")
        .json();
    assert_eq!(kept["totalCount"], 2);
    assert_eq!(kept["results"][0]["timestamp"], "2026-01-01 00:05:00 UTC");
    assert_eq!(kept["results"][1]["data"]["nested"]["y"], 2);
    let early = read_query(
        &server,
        "/rest/reports/kept/samples",
        json!({"timestamp": {"$lt": "2026-01-01 00:01:00 UTC"}}),
    );
    assert_eq!(early["totalCount"], 1);
}

#[test]
fn report_refusals_history_deletion_and_metric_types() {
    let server = TestServer::start();
    for (body, field) in [
        (json!({"datapointDuration": 60, "reportSize": 3}), "name"),
        (json!({"name": "r"}), "datapointDuration"),
        (
            json!({"name": "r", "datapointDuration": 0, "reportSize": 3}),
            "datapointDuration",
        ),
        (
            json!({"name": "r", "datapointDuration": 60, "reportSize": "many"}),
            "reportSize",
        ),
        (
            json!({"name": "r", "datapointDuration": 60, "reportSize": 3, "consolidationFunction": "max"}),
            "consolidationFunction",
        ),
        (
            json!({"name": "r", "datapointDuration": 60, "reportSize": 3, "datapoints": [{"data": {"x": 1}}]}),
            "startDate",
        ),
    ] {
        let reply = server.send_json("POST", "/rest/reports", &body);
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert!(reply.messages().contains(field), "{field}: {}", reply.body);
    }
    assert_eq!(server.get("/rest/reports").json()["totalCount"], 0);

    let created = create_report(
        &server,
        json!({
            "name": "history", "datapointDuration": 60, "reportSize": 2,
            "datapoints": [
                {"startDate": "2026-01-22 09:00:00 UTC", "data": {"x": 1}},
                {"startDate": "2026-01-22 09:01:00 UTC", "endDate": "2026-01-22 09:02:00 UTC", "data": null},
                {"startDate": "2026-01-22 09:02:00 UTC", "data": {"x": 4}}
            ]
        }),
    );
    let dup = server.send_json(
        "POST",
        "/rest/reports",
        &json!({"name": "history", "datapointDuration": 60, "reportSize": 2}),
    );
    assert_eq!(dup.status, 409, "{}", dup.body);
    let points = server.get("/rest/reports/history/datapoints").json();
    let data = data_of(&points);
    assert_eq!(data, vec![Value::Null, json!({"x": 4.0})]);
    let bad_sample = server.send_json("POST", "/rest/reports/history/samples", &json!({"data": 5}));
    assert_eq!(bad_sample.status, 400);
    assert_eq!(
        server
            .send_json(
                "POST",
                "/rest/reports/nothing/samples",
                &json!({"data": {}})
            )
            .status,
        404
    );

    let id = created["id"].as_str().unwrap();
    let deleted = server.call("DELETE", &format!("/rest/reports/{id}"), Auth::Admin, None);
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert!(deleted.json()["messages"].is_array());
    assert_eq!(server.get("/rest/reports/history").status, 404);

    let types = server.get("/rest/metric-types").json();
    assert_eq!(types["totalCount"], 9);
    let ids: Vec<&str> = types["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "vmcount", "watts", "pwatts", "temp", "cpu", "mem", "io", "ccores", "threads"
        ]
    );
}

#[test]
fn scheduler_events_can_be_switched_off() {
    let server = TestServer::builder()
        .config(|c| c.events.scheduler = false)
        .start();
    let reply = server.send_json(
        "POST",
        "/rest/jobs?api-version=2",
        &json!({"commandFile": "/bin/true", "holds": ["User"]}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    // An event created afterwards through the API is there; no scheduler event is.
    let created = post_v3(&server, json!({"eventType": "marker"}));
    assert_eq!(created.status, 201);
    assert_eq!(count(&server, "/rest/events"), 1);
}

#[test]
fn events_of_the_common_severity_and_origin_are_listed_like_the_rest() {
    // The scheduler's events (INFO, origin "scheduler") are left out of the store's
    // severity and origin indexes: listing by those fields must still find them.
    let server = TestServer::start();
    for _ in 0..3 {
        let reply = server.send_json(
            "POST",
            "/rest/jobs?api-version=2",
            &json!({"commandFile": "/bin/true", "holds": ["User"]}),
        );
        assert_eq!(reply.status, 201, "{}", reply.body);
    }
    for (severity, origin) in [
        ("ERROR", "tester"),
        ("INFO", "tester"),
        ("WARN", "scheduler"),
    ] {
        let reply = post_v3(
            &server,
            json!({"eventType": "probe", "severity": severity, "origin": origin}),
        );
        assert_eq!(reply.status, 201, "{}", reply.body);
    }
    let newest = "/rest/events?api-version=3&sort=%7B%22eventDate%22%3A-1%7D";
    let submitted = query(newest, json!({"eventType": "jobsubmit"}));
    server.wait_for(&submitted, "three jobsubmit events", |page| {
        page["totalCount"] == 3
    });
    let everything = server.get(newest).json();
    let all = everything["results"].as_array().unwrap();
    let ids_where = |keep: &dyn Fn(&Value) -> bool| -> Vec<Value> {
        all.iter()
            .filter(|e| keep(e))
            .map(|e| e["id"].clone())
            .collect()
    };
    let cases: [(Value, Vec<Value>); 6] = [
        (
            json!({"severity": "INFO"}),
            ids_where(&|e| e["severity"] == "INFO"),
        ),
        (
            json!({"severity": "ERROR"}),
            ids_where(&|e| e["severity"] == "ERROR"),
        ),
        (
            json!({"severity": {"$ne": "INFO"}}),
            ids_where(&|e| e["severity"] != "INFO"),
        ),
        (
            json!({"origin": "scheduler"}),
            ids_where(&|e| e["origin"] == "scheduler"),
        ),
        (
            json!({"origin": {"$in": ["tester", "scheduler"]}, "severity": "INFO"}),
            ids_where(&|e| {
                (e["origin"] == "tester" || e["origin"] == "scheduler") && e["severity"] == "INFO"
            }),
        ),
        (
            json!({"origin": "scheduler", "severity": {"$ne": "INFO"}}),
            ids_where(&|e| e["origin"] == "scheduler" && e["severity"] != "INFO"),
        ),
    ];
    for (filter, expected) in cases {
        assert!(!expected.is_empty(), "{filter}");
        let page = server.get(&query(newest, filter.clone())).json();
        assert_eq!(page["totalCount"], expected.len(), "{filter}: {page}");
        let got: Vec<Value> = page["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].clone())
            .collect();
        assert_eq!(got, expected, "{filter}");
        // The count holds when the page is cut short too.
        let first = server
            .get(&format!("{}&max=1", query(newest, filter.clone())))
            .json();
        assert_eq!(first["totalCount"], expected.len(), "{filter}: {first}");
        assert_eq!(first["results"][0]["id"], expected[0], "{filter}");
    }
}

/// An ordinary user posted a version-1 event naming carol as its initiator, from the
/// service's own origin: it was stored as carol's and shown to her as the service's
/// (issue #53, item 10).
#[test]
fn an_event_posted_by_a_user_is_theirs_and_never_the_services() {
    let server = TestServer::builder()
        .user("bob", false)
        .user("carol", false)
        .start();
    let permissions = json!([
        {"resource": "events", "action": "create", "scope": "OWN"},
        {"resource": "events", "action": "read", "scope": "OWN"}
    ]);
    let role = server.send_json(
        "POST",
        "/rest/roles",
        &json!({"name": "reporters", "permissions": permissions}),
    );
    assert_eq!(role.status, 201, "{}", role.body);
    let principal = server.send_json(
        "POST",
        "/rest/principals",
        &json!({"name": "reporters", "attachedRoles": ["reporters"],
                "users": [{"name": "bob", "type": "PAM"}, {"name": "carol", "type": "PAM"}]}),
    );
    assert_eq!(principal.status, 201, "{}", principal.body);
    let bob = || Auth::Basic("bob".into(), drover_testkit::PASSWORD.into());
    let forged = |origin: &str, facility: &str| {
        format!(
            r#"<Events><Event eventTime="2026-11-22T10:00:00Z" eventType="userlogin"
               eventCategory="login" sourceComponent="{origin}" status="success"
               facility="{facility}">
               <InitiatedBy user="carol"/></Event></Events>"#
        )
    };
    let post = |xml: String| {
        server.call(
            "POST",
            "/rest/events",
            bob(),
            Some(("application/xml", xml.into_bytes())),
        )
    };
    for (origin, facility) in [
        ("drover/api", "job"),
        ("Drover", "job"),
        ("scheduler", "job"),
        ("plugin/x", "job"),
        ("scheduler\u{200b}", "job"),
        (" drover /api", "job"),
        ("portal", "security"),
        ("portal", "Security\u{200b}"),
    ] {
        post(forged(origin, facility)).assert_refused(400, "service's own", &origin);
    }
    let v3 = server.call(
        "POST",
        "/rest/events?api-version=3",
        bob(),
        Some((
            "application/json",
            json!({"eventType": "x", "severity": "INFO", "origin": "drover/services"})
                .to_string()
                .into_bytes(),
        )),
    );
    v3.assert_refused(400, "service's own", &"a version-3 event");
    // From an origin of bob's own, the event is bob's whatever it says.
    let posted = post(forged("portal", "job"));
    assert_eq!(posted.status, 201, "{}", posted.body);
    let id = posted.json()["ids"][0].as_str().unwrap().to_string();
    let read = server.get(&format!("/rest/events/{id}")).json();
    assert_eq!(read["initiatedBy"]["user"], "bob", "{read}");
    let carols = server.get_as(
        Auth::Basic("carol".into(), drover_testkit::PASSWORD.into()),
        &format!("/rest/events/{id}"),
    );
    assert_eq!(carols.status, 404, "not carol's: {}", carols.body);
}
