//! The conventions every resource shares: errors, versions, lists, limits, prefix,
//! panics and shutdown.

use std::time::Duration;

use drover_testkit::{Auth, TestServer};
use serde_json::{Value, json};

use crate::support::{CREATE, ECHO, PANIC, SLOW, test_routes};

#[test]
fn unknown_paths_are_404_and_wrong_methods_405_with_json_bodies() {
    let server = TestServer::start();
    for auth in [Auth::Admin, Auth::None] {
        let reply = server.get_as(auth, "/rest/no-such-thing");
        assert_eq!(reply.status, 404);
        assert!(
            reply
                .messages()
                .contains("Unknown path /rest/no-such-thing")
        );
    }
    let reply = server.call("DELETE", "/rest/diag/about", Auth::Admin, None);
    assert_eq!(reply.status, 405);
    assert!(reply.messages().contains("allows GET"), "{}", reply.body);
    assert!(reply.header("allow").unwrap().contains("GET"));
    assert_eq!(server.get("/rest/permissions/no-such").status, 404);
}

#[test]
fn api_version_selects_the_representation_and_refuses_unknown_ones() {
    let server = TestServer::start();
    let v1 = server.get("/rest/diag/about").json();
    assert!(v1.get("suite").is_none(), "{v1}");
    for version in ["2", "3", "latest"] {
        let about = server
            .get(&format!("/rest/diag/about?api-version={version}"))
            .json();
        assert_eq!(about["suite"], "Drover", "{version}");
        assert!(about["pluginCommonsVersion"].is_string());
        assert_eq!(about["version"], v1["version"]);
    }
    for bad in ["0", "4", "two", "", "2.0"] {
        let reply = server.get(&format!("/rest/diag/about?api-version={bad}"));
        assert_eq!(reply.status, 400, "{bad}");
        assert!(reply.messages().contains("api-version"), "{}", reply.body);
    }
    // The public route checks it too.
    let reply = server.get_as(Auth::None, "/rest/diag/health/summary?api-version=9");
    assert_eq!(reply.status, 400);
}

#[test]
fn pretty_indents_any_answer() {
    let server = TestServer::start();
    let plain = server.get("/rest/diag/about");
    assert!(!plain.body.contains('\n'));
    let pretty = server.get("/rest/diag/about?pretty=true");
    assert!(pretty.body.contains("\n  \"version\""), "{}", pretty.body);
    assert_eq!(pretty.json(), plain.json());
    assert_eq!(server.get("/rest/diag/about?pretty=false").body, plain.body);
    let error = server.get("/rest/nope?pretty=true");
    assert_eq!(error.status, 404);
    assert_eq!(server.get("/rest/diag/about?pretty=maybe").status, 400);
    let list = server.get("/rest/permissions?pretty=true&max=1");
    assert!(list.body.contains("\n  \"totalCount\""), "{}", list.body);
}

fn ids(reply: &Value) -> Vec<&str> {
    reply["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect()
}

#[test]
fn list_parameters_filter_sort_page_and_project() {
    let server = TestServer::builder().routes(test_routes).start();
    let all = server.get("/rest/permissions").json();
    let total = all["totalCount"].as_u64().unwrap();
    assert!(total >= 4, "{all}");
    assert_eq!(all["resultCount"], total);
    assert!(ids(&all).contains(&"diag:read") && ids(&all).contains(&"tests:create"));

    let query = |q: &str| server.get(&format!("/rest/permissions?{q}"));
    let reads = query("query=%7B%22action%22%3A%22read%22%2C%22resource%22%3A%7B%22%24in%22%3A%5B%22tests%22%2C%22permissions%22%2C%22diag%22%5D%7D%7D&sort=%7B%22id%22%3A-1%7D").json();
    assert_eq!(ids(&reads), ["tests:read", "permissions:read", "diag:read"]);
    let page = query("sort=%7B%22id%22%3A1%7D&max=2&offset=1").json();
    assert_eq!(page["totalCount"], total);
    assert_eq!(page["resultCount"], 2);
    assert_eq!(ids(&page), ids(&all)[1..3].to_vec());
    let past = query("offset=100").json();
    assert_eq!(
        (past["totalCount"].as_u64(), past["resultCount"].as_u64()),
        (Some(total), Some(0))
    );
    assert_eq!(query("max=0").json()["resultCount"], 0);

    let or = query("query=%7B%22%24or%22%3A%5B%7B%22resource%22%3A%22diag%22%7D%2C%7B%22resource%22%3A%22tests%22%2C%22action%22%3A%22create%22%7D%5D%7D").json();
    assert_eq!(ids(&or), ["diag:read", "tests:create"]);
    let fields = query("fields=id,action&max=1&query=%7B%22resource%22%3A%22diag%22%7D").json();
    assert_eq!(
        fields["results"][0],
        json!({"id": "diag:read", "action": "read"})
    );
    let excluded = query(
        "exclude-fields=description,name,resource&max=1&query=%7B%22resource%22%3A%22diag%22%7D",
    )
    .json();
    assert_eq!(
        excluded["results"][0],
        json!({"id": "diag:read", "action": "read"})
    );

    for (bad, named) in [
        (
            "query=%7B%22id%22%3A%7B%22%24foo%22%3A1%7D%7D",
            "unknown operator $foo at id",
        ),
        ("query=%7Bnot-json", "query"),
        ("sort=%7B%22id%22%3A0%7D", "sort"),
        ("max=-1", "max"),
        ("offset=x", "offset"),
        ("fields=a..b", "fields"),
    ] {
        let reply = query(bad);
        reply.assert_refused(400, named, &bad);
    }

    let one = server.get("/rest/permissions/diag:read").json();
    assert_eq!(
        (one["resource"].as_str(), one["action"].as_str()),
        (Some("diag"), Some("read"))
    );
}

#[test]
fn bodies_are_json_within_the_limit() {
    let server = TestServer::builder()
        .routes(test_routes)
        .config(|c| c.max_body_bytes = 1000)
        .start();
    let echo = server.send_json("POST", ECHO, &json!({"a": [1, 2]}));
    assert_eq!((echo.status, echo.json()), (200, json!({"a": [1, 2]})));

    let malformed = server.call(
        "POST",
        ECHO,
        Auth::Admin,
        Some(("application/json", b"{\"a\": ".to_vec())),
    );
    assert_eq!(malformed.status, 400);
    assert!(
        malformed.messages().contains("Malformed JSON"),
        "{}",
        malformed.body
    );
    let empty = server.call("POST", ECHO, Auth::Admin, None);
    assert_eq!(empty.status, 400);
    assert!(
        empty.messages().contains("Missing request body"),
        "{}",
        empty.body
    );

    let xml = server.call(
        "POST",
        ECHO,
        Auth::Admin,
        Some(("application/xml", b"<a/>".to_vec())),
    );
    assert_eq!(xml.status, 415, "{}", xml.body);
    assert!(xml.messages().contains("application/xml"));
    // curl -d sends the form type; its body is read as JSON.
    let curl = server.call(
        "POST",
        ECHO,
        Auth::Admin,
        Some(("application/x-www-form-urlencoded", b"{\"b\":1}".to_vec())),
    );
    assert_eq!(curl.json(), json!({"b": 1}));

    let big = json!({"a": "x".repeat(2000)});
    let too_large = server.send_json("POST", ECHO, &big);
    assert_eq!(too_large.status, 413, "{}", too_large.body);
    assert!(too_large.messages().contains("1000 bytes"));
    // Declared too large: refused before authentication or routing read anything.
    let raw = server.raw(
        b"POST /rest/anything HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\nConnection: close\r\n\r\n",
    );
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    assert!(raw.contains("\"messages\""), "{raw}");
    // Chunked, so no length is declared: the limit still holds while reading.
    let mut chunked = b"POST /rest/test/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Basic YWRtaW46dGVzdC1wYXNzd29yZA==\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
    for _ in 0..3 {
        chunked.extend_from_slice(b"258\r\n");
        chunked.extend_from_slice(&[b' '; 600]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let raw = server.raw(&chunked);
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
}

#[test]
fn creations_answer_201_with_location_under_the_prefix() {
    let server = TestServer::builder()
        .routes(test_routes)
        .config(|c| c.base_url = "/mws".into())
        .start();
    let reply = server.call("POST", CREATE, Auth::Admin, None);
    assert_eq!(reply.status, 201);
    assert_eq!(reply.header("location"), Some("/mws/rest/test/things/t1"));
}

#[test]
fn a_prefix_deployment_serves_everything_under_the_prefix_only() {
    let server = TestServer::builder()
        .config(|c| c.base_url = "/mws/".into())
        .start();
    assert_eq!(server.prefix, "/mws");
    assert_eq!(server.get("/rest/diag/about").status, 200);
    assert_eq!(
        server
            .get_as(Auth::None, "/rest/diag/health/summary")
            .status,
        200
    );
    let document = server.get_as(Auth::None, "/rest/openapi.json").json();
    assert_eq!(document["servers"][0]["url"], "/mws");
    let outside =
        server.raw(b"GET /rest/diag/about HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(outside.starts_with("HTTP/1.1 404"), "{outside}");
    assert!(
        outside.contains("Unknown path /rest/diag/about"),
        "{outside}"
    );
    assert_eq!(server.get("/rest/unknown").status, 404);
}

#[test]
fn a_panicking_handler_answers_500_and_the_server_goes_on() {
    let server = TestServer::builder().routes(test_routes).start();
    for _ in 0..3 {
        let reply = server.get(PANIC);
        assert_eq!(reply.status, 500);
        let messages = reply.messages();
        assert!(messages.contains("Internal error"), "{messages}");
        assert!(
            !messages.contains("a bug in a handler"),
            "details stay in the log"
        );
    }
    assert_eq!(server.get("/rest/diag/about").status, 200);
}

#[test]
fn shutdown_finishes_requests_in_flight() {
    let server = TestServer::builder().routes(test_routes).start();
    let address = server.address.clone();
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| server.get(SLOW));
        std::thread::sleep(Duration::from_millis(200));
        server.signal_shutdown(); // while the slow request is being handled
        let reply = slow.join().unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(reply.json()["finished"], true);
    });
    server.stop().unwrap();
    assert!(
        std::net::TcpStream::connect(address).is_err(),
        "still listening"
    );
}

/// Found by Schemathesis: a `max` beyond SQL's signed 64-bit LIMIT answered 503
/// ("datatype mismatch") where the store paged in SQL.
#[test]
fn a_max_beyond_64_bit_signed_is_all_there_is() {
    let server = TestServer::start();
    let report = json!({"name": "r", "datapointDuration": 60, "reportSize": 10});
    let created = server.send_json("POST", "/rest/reports", &report);
    assert_eq!(created.status, 201, "{}", created.body);
    for path in ["/rest/reports", "/rest/events", "/rest/jobs"] {
        let reply = server.get(&format!(
            "{path}?query=%7B%7D&sort=%7B%7D&max=18446744073709551614&offset=0"
        ));
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    }
}
