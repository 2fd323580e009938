//! The embedded accounting manager over HTTP: accounts, quotes (hand-checked), liens and
//! charges of real jobs, funds added through the administration surface.

use drover_accounting::AccountingConfig;
use drover_accounting::Money;
use drover_accounting::model::{Account, AccountUser, Allocation, Rates};
use drover_sched::node::NodeConfig;
use drover_testkit::{TestServer, scratch_dir, script};
use serde_json::{Value, json};

fn m(text: &str) -> Money {
    Money::parse(text).unwrap()
}

fn account(id: &str, users: &[&str], custom: Value) -> Account {
    Account {
        id: id.into(),
        organization: Some("lab".into()),
        description: Some(format!("the {id} account")),
        active: true,
        users: users
            .iter()
            .map(|u| AccountUser {
                id: u.to_string(),
                active: true,
                admin: false,
            })
            .collect(),
        custom: serde_json::from_value(custom).unwrap(),
    }
}

fn server() -> TestServer {
    TestServer::builder()
        .config(|c| {
            c.nodes = vec![NodeConfig::new("n1", 4)];
            c.accounting = AccountingConfig {
                enabled: true,
                admins: vec!["auditor".into()],
                accounts: vec![
                    account("physics", &["admin", "ann"], json!({"grant": "G-1"})),
                    account("chem", &["bob"], json!({})),
                    account("poor", &["admin"], json!({})),
                ],
                allocations: vec![
                    Allocation {
                        account: "physics".into(),
                        amount: m("5000"),
                        start: None,
                        end: None,
                    },
                    Allocation {
                        account: "chem".into(),
                        amount: m("10"),
                        start: None,
                        end: None,
                    },
                ],
                rates: Rates {
                    processors: Some(m("0.01")),
                    memory: Some(m("0.000001")),
                    node: Some(m("0.1")),
                    ..Rates::default()
                },
                default_lien_seconds: None,
                allow_overdraft: false,
                ..AccountingConfig::default()
            };
        })
        .start()
}

fn quote(server: &TestServer, params: &str, body: Value) -> drover_testkit::Reply {
    server.send_json(
        "POST",
        &format!("/rest/quotes/standard/quote?{params}"),
        &body,
    )
}

#[test]
fn accounts_are_read_for_the_accounting_user() {
    let server = server();
    let summary = server.get("/rest/diag/health/summary").json();
    assert_eq!(summary["acct"]["connected"], "UP");
    // Spec 2.23: the message is the reason a connection is down, null while it is up.
    let detail = server.get("/rest/diag/health/detail").json();
    assert_eq!(detail["acct"]["connected"], "UP");
    assert_eq!(detail["acct"]["message"], Value::Null, "{detail}");
    assert_eq!(detail["datastore"]["message"], Value::Null, "{detail}");
    assert_eq!(detail["sched"]["message"], Value::Null, "{detail}");
    let missing = server.get("/rest/accounts");
    assert_eq!(missing.status, 400);
    assert!(missing.messages().contains("proxy-user"));
    let ann = server.get("/rest/accounts?proxy-user=ann").json();
    assert_eq!(ann["totalCount"], 1, "{ann}");
    let record = &ann["results"][0];
    assert_eq!(record["id"], "physics");
    assert_eq!(record["active"], true);
    assert_eq!(record["organization"], "lab");
    assert_eq!(
        record["users"][1],
        json!({"id": "ann", "active": true, "admin": false})
    );
    for key in [
        "creationTime",
        "modificationTime",
        "deleted",
        "requestId",
        "transactionId",
        "description",
    ] {
        assert!(record.get(key).is_some(), "{key}");
    }
    assert!(
        record.get("grant").is_none(),
        "custom fields only when asked"
    );
    let custom = server
        .get("/rest/accounts/physics?proxy-user=ann&custom-fields=grant")
        .json();
    assert_eq!(custom["grant"], "G-1");
    let all = server
        .get("/rest/accounts?proxy-user=auditor&sort=%7B%22id%22%3A-1%7D")
        .json();
    assert_eq!(all["totalCount"], 3);
    assert_eq!(all["results"][0]["id"], "poor");
    let simple = server
        .get("/rest/accounts?proxy-user=auditor&query=%7B%22id%22%3A%22chem%22%7D")
        .json();
    assert_eq!(simple["totalCount"], 1);
    for nested in [
        "%7B%22users.id%22%3A%22bob%22%7D",
        "%7B%22id%22%3A%7B%22%24ne%22%3A%22x%22%7D%7D",
    ] {
        let reply = server.get(&format!("/rest/accounts?proxy-user=auditor&query={nested}"));
        assert_eq!(reply.status, 400, "{}", reply.body);
        assert!(reply.messages().contains("simple"));
    }
    assert_eq!(server.get("/rest/accounts/chem?proxy-user=ann").status, 404);
    assert_eq!(server.get("/rest/accounts/chem?proxy-user=bob").status, 200);
    // An ordinary user reads only their own accounts.
    let theirs = server.get_as(drover_testkit::Auth::User, "/rest/accounts?proxy-user=ann");
    assert_eq!(theirs.status, 403, "{}", theirs.body);
    let own = server.get_as(
        drover_testkit::Auth::User,
        "/rest/accounts?proxy-user=alice",
    );
    assert_eq!(own.status, 200, "{}", own.body);
}

/// The largest job a quote may describe is priced or refused with a reason: counts at
/// their bounds multiply past 64 bits, which must not fail the server.
#[test]
fn a_quote_for_the_largest_job_is_answered() {
    let server = server();
    let huge = json!({"account": "physics", "user": "ann", "requirements":
        {"requiredProcessorsPerTask": 1 << 20, "requiredNodeCountMinimum": 1 << 20,
         "requiredMemoryPerTask": i64::MAX / 4}});
    for params in [
        "object-type=job&proxy-user=ann&charge-duration=3600",
        "object-type=job&proxy-user=ann&charge-duration=3600&itemize=true&cost-only=true",
    ] {
        let reply = quote(&server, params, huge.clone());
        assert!(
            reply.status == 200 || (400..500).contains(&reply.status),
            "{params}: {} {}",
            reply.status,
            reply.body
        );
    }
    assert_eq!(server.get("/rest/diag/health/summary").status, 200);
}

#[test]
fn quotes_are_priced_by_component_and_refused_with_reasons() {
    let server = server();
    let job = json!({"account": "physics", "user": "ann", "requirements":
        {"requiredProcessorsPerTask": 2, "requiredNodeCountMinimum": 3, "requiredMemoryPerTask": 1000}});
    // One hour: processors 6 × 0.01 × 3600 = 216; memory 3000 MB × 0.000001 × 3600 = 10.8;
    // nodes 3 × 0.1 × 3600 = 1080. Total 1306.8.
    let plain = quote(
        &server,
        "object-type=job&proxy-user=ann&charge-duration=3600",
        job.clone(),
    );
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert_eq!(plain.json()["amount"], json!(1306.8));
    assert_eq!(plain.json()["instance"], "job");
    assert!(plain.json().get("details").is_none());
    let itemized = quote(
        &server,
        "object-type=job&proxy-user=ann&charge-duration=3600&itemize=true",
        job.clone(),
    )
    .json();
    let details = itemized["details"].as_array().unwrap();
    let amounts: Vec<(String, Value)> = details
        .iter()
        .map(|d| (d["name"].as_str().unwrap().to_string(), d["amount"].clone()))
        .collect();
    assert_eq!(
        amounts,
        [
            ("processors".to_string(), json!(216)),
            ("memory".to_string(), json!(10.8)),
            ("node".to_string(), json!(1080))
        ]
    );
    assert_eq!(details[0]["value"], 6);
    assert_eq!(details[0]["rate"], json!(0.01));
    assert_eq!(details[0]["duration"], 3600);
    assert_eq!(details[0]["scalingFactor"], 1);
    // A rate given with the quote replaces the standard one: nodes free.
    let rate = "%5B%7B%22type%22%3A%22node%22%2C%22rate%22%3A0%7D%5D";
    let cheaper = quote(
        &server,
        &format!("object-type=job&proxy-user=ann&charge-duration=3600&rate={rate}"),
        job.clone(),
    );
    assert_eq!(cheaper.json()["amount"], json!(226.8));

    // chem has 10: a one-hour quote of 1 processor + 1 node is 396, refused without cost-only.
    let small = json!({"account": "chem", "user": "bob"});
    let broke = quote(
        &server,
        "object-type=job&proxy-user=bob&charge-duration=3600",
        small.clone(),
    );
    assert_eq!(broke.status, 400);
    assert!(
        broke.messages().contains("Insufficient funds"),
        "{}",
        broke.body
    );
    let cost = quote(
        &server,
        "object-type=job&proxy-user=bob&charge-duration=3600&cost-only=1",
        small,
    );
    assert_eq!(cost.status, 200, "{}", cost.body);
    assert_eq!(cost.json()["amount"], json!(396));

    for (params, expected) in [
        ("proxy-user=ann&charge-duration=60", "object-type"),
        (
            "object-type=vm&proxy-user=ann&charge-duration=60",
            "object-type",
        ),
        ("object-type=job&charge-duration=60", "proxy-user"),
        ("object-type=job&proxy-user=ann", "charge-duration"),
        (
            "object-type=job&proxy-user=ann&charge-duration=soon",
            "charge-duration",
        ),
        (
            "object-type=job&proxy-user=ann&charge-duration=60&guarantee=true&cost-only=true",
            "cannot be given together",
        ),
        (
            "object-type=job&proxy-user=ann&charge-duration=60&start-time=tomorrow",
            "start-time",
        ),
        (
            "object-type=job&proxy-user=ann&charge-duration=60&rate=%5B%7B%22type%22%3A%22planet%22%2C%22rate%22%3A1%7D%5D",
            "planet",
        ),
    ] {
        let reply = quote(&server, params, job.clone());
        reply.assert_refused(400, expected, &params);
    }
    let stranger = quote(
        &server,
        "object-type=job&proxy-user=eve&charge-duration=60",
        json!({"account": "physics", "user": "eve"}),
    );
    assert_eq!(stranger.status, 400);
    assert!(
        stranger.messages().contains("not an active member"),
        "{}",
        stranger.body
    );

    // Services: each priced, and the total.
    let services = json!([
        {"name": "web", "user": "ann", "account": "physics",
         "attributes": {"sched": {"job": {"resources": {"processors": 2}, "template": "vm"}}}},
        {"name": "db", "user": "ann", "account": "physics",
         "attributes": {"sched": {"job": {"resources": {"PROCS": 1, "MEM": 1000}}}}}
    ]);
    let priced = quote(
        &server,
        "object-type=service&proxy-user=ann&charge-duration=100",
        services,
    )
    .json();
    // web: 2 × 0.01 × 100 + 1 node × 0.1 × 100 = 12; db: 1 + 0.1 + 10 = 11.1.
    assert_eq!(priced["services"][0]["instance"], "web");
    assert_eq!(priced["services"][0]["amount"], json!(12));
    assert_eq!(priced["services"][1]["amount"], json!(11.1));
    assert_eq!(priced["amount"], json!(23.1));

    // A creation body is priced as what it would make will be charged: each VM of the
    // tree, with the resources its template gives and the VM's defaults for the rest
    // (128 MB of memory), containers nothing.
    for template in [
        json!({"name": "web vm", "type": "vm", "attributes": {"sched": {"job": {
            "image": "guest", "template": "vm", "resources": {"processors": 2}}}}}),
        json!({"name": "pair", "type": "container", "includedServices": [
            {"localName": "a", "serviceTemplate": "web vm"},
            {"localName": "b", "serviceTemplate": "web vm"}]}),
    ] {
        let made = server.send_json("POST", "/rest/service-templates", &template);
        assert_eq!(made.status, 201, "{}", made.body);
    }
    let creation = json!({"user": "ann", "account": "physics",
                          "data": [{"name": "site", "serviceTemplate": "pair"}]});
    let priced = quote(
        &server,
        "object-type=service&proxy-user=ann&charge-duration=100",
        creation,
    )
    .json();
    assert_eq!(priced["services"].as_array().unwrap().len(), 2, "{priced}");
    assert_eq!(priced["services"][0]["instance"], "a");
    // Each: 2 × 0.01 × 100 + 0.1 × 100 + 128 × 0.000001 × 100 = 12.0128.
    assert_eq!(priced["services"][0]["amount"], json!(12.0128), "{priced}");
    assert_eq!(priced["amount"], json!(24.0256), "{priced}");
    let unknown = json!({"data": [{"name": "x", "serviceTemplate": "no such"}]});
    let refused = quote(
        &server,
        "object-type=service&proxy-user=ann&charge-duration=100",
        unknown.clone(),
    );
    refused.assert_refused(400, "no service template", &unknown);
}

/// An account's balance (the administrators' surface).
pub(crate) fn balance(server: &TestServer, account: &str) -> Value {
    server
        .get(&format!("/rest/accounting/accounts/{account}/balance"))
        .json()
}

/// Every charge recorded.
pub(crate) fn charges(server: &TestServer) -> Vec<Value> {
    server
        .get("/rest/accounting/usage-records?query=%7B%22kind%22%3A%22charge%22%7D")
        .json()["results"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_guaranteed_quote_is_honoured_and_jobs_are_charged_exactly() {
    let server = server();
    let dir = scratch_dir();
    let quick = script(dir.path(), "quick.sh", "sleep 1");
    // A guaranteed rate for the next job, a tenth of the standard processor rate.
    let rate = "%5B%7B%22type%22%3A%22processors%22%2C%22rate%22%3A0.001%7D%5D";
    let guaranteed = quote(
        &server,
        &format!("object-type=job&proxy-user=admin&charge-duration=60&guarantee=true&rate={rate}"),
        json!({"id": "Drover.1", "account": "physics", "user": "admin"}),
    );
    assert_eq!(guaranteed.status, 200, "{}", guaranteed.body);
    let quote_id = guaranteed.json()["id"].as_i64().unwrap();
    assert!(guaranteed.json()["usageRecord"].as_i64().is_some());
    let submit = |account: &str| {
        let reply = server.send_json(
            "POST",
            "/rest/jobs?api-version=2",
            &json!({"commandFile": quick, "duration": 60, "credentials": {"account": account}}),
        );
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.json()["name"].as_str().unwrap().to_string()
    };
    let first = submit("physics");
    assert_eq!(first, "Drover.1");
    // Many jobs of one account ending about together.
    let rest: Vec<String> = (0..11).map(|_| submit("physics")).collect();
    for id in std::iter::once(&first).chain(&rest) {
        server.wait_for(
            &format!("/rest/jobs/{id}?api-version=2"),
            "it completes",
            |j| j["states"]["state"] == "Completed",
        );
    }
    let mut records = Vec::new();
    for _ in 0..100 {
        records = charges(&server);
        if records.len() == 12 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(records.len(), 12, "{records:?}");
    let guaranteed_charge = records.iter().find(|r| r["object"] == "Drover.1").unwrap();
    assert_eq!(guaranteed_charge["quote"], quote_id);
    let seconds = guaranteed_charge["duration"].as_i64().unwrap();
    // 1 processor at 0.001 and 1 node at 0.1 (no node rate was overridden).
    let expected = m("0.001").times_count(seconds) + m("0.1").times_count(seconds);
    assert_eq!(
        Money::from_json(&guaranteed_charge["charge"]).unwrap(),
        expected
    );
    let total: Money = records
        .iter()
        .map(|r| Money::from_json(&r["charge"]).unwrap())
        .sum();
    let b = balance(&server, "physics");
    assert_eq!(Money::from_json(&b["held"]).unwrap(), Money::ZERO, "{b}");
    assert_eq!(Money::from_json(&b["charged"]).unwrap(), total);
    assert_eq!(
        Money::from_json(&b["available"]).unwrap(),
        m("5000") - total
    );
}

#[test]
fn a_job_waits_for_funds_and_starts_when_they_are_added() {
    let server = server();
    let reply = server.send_json(
        "POST",
        "/rest/jobs?api-version=2",
        &json!({"commandFile": "/bin/true", "duration": 600, "credentials": {"account": "poor"}}),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let job = reply.json()["name"].as_str().unwrap().to_string();
    let blocked = server.wait_for(
        &format!("/rest/jobs/{job}?api-version=2"),
        "it is blocked",
        |j| j["blocks"].as_array().is_some_and(|b| !b.is_empty()),
    );
    assert_eq!(blocked["states"]["state"], "Idle");
    assert_eq!(
        blocked["blocks"][0]["type"], "InsufficientFunds",
        "{blocked}"
    );
    assert!(
        blocked["blocks"][0]["message"]
            .as_str()
            .unwrap()
            .contains("insufficient funds")
    );
    for bad in [
        json!({"account": "poor"}),
        json!({"account": "nope", "amount": 5}),
        json!({"account": "poor", "amount": "1.0000001"}),
    ] {
        assert_eq!(
            server
                .send_json("POST", "/rest/accounting/allocations", &bad)
                .status,
            400,
            "{bad}"
        );
    }
    let added = server.send_json(
        "POST",
        "/rest/accounting/allocations",
        &json!({"account": "poor", "amount": 1000}),
    );
    assert_eq!(added.status, 201, "{}", added.body);
    server.wait_for(
        &format!("/rest/jobs/{job}?api-version=2"),
        "it completes",
        |j| j["states"]["state"] == "Completed",
    );
    let listed = server
        .get("/rest/accounting/allocations?query=%7B%22account%22%3A%22poor%22%7D")
        .json();
    assert_eq!(listed["totalCount"], 1);
    assert_eq!(listed["results"][0]["amount"], json!(1000));
}

#[test]
fn without_accounting_its_routes_answer_404_saying_so() {
    let server = TestServer::start();
    for path in [
        "/rest/accounts?proxy-user=ann",
        "/rest/accounting/usage-records",
    ] {
        server
            .get(path)
            .assert_refused(404, "Accounting is not enabled", &path);
    }
    let detail = server.get("/rest/diag/health/detail").json();
    assert_eq!(detail["acct"]["connected"], "NOT_CONFIGURED");
    assert!(detail["acct"]["message"].is_string(), "{detail}");
}
