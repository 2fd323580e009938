//! VMs and services are charged (issue #58): for what a VM holds, for as long as it holds
//! it, as it goes (every `vm_charge_interval_seconds`) and at its end, through the same
//! ledger and rates as jobs; refused without funds, powered off when its account runs
//! dry; a service's VM charged to the service's account at what its quote said. The
//! site's own commands stand in for QEMU (`vms::with_site_commands`) but in the last
//! test, which runs a real guest.

use drover_accounting::model::{Account, AccountUser, Allocation, Rates};
use drover_accounting::{AccountingConfig, Money, VmWhenDry};
use drover_sched::node::NodeConfig;
use drover_testkit::{Auth, TestServer, login_as, send, wait_for_value, wait_until};
use serde_json::{Value, json};

use crate::accounting::{balance, charges};
use crate::vms::{job_id, wait_substate, with_site_commands};

fn m(text: &str) -> Money {
    Money::parse(text).unwrap()
}

fn money(value: &Value) -> Money {
    Money::from_json(value).unwrap_or_else(|e| panic!("{value}: {e}"))
}

/// Seconds between a VM's charges here.
const INTERVAL: i64 = 2;

/// Accounting where alice's first account is `lab` (with `lab_funds`), she also belongs
/// to `grant` (1000), and bob to `bobs` (1000); a processor costs 0.01 a second, a MB of
/// memory or disk 0.000001, a node 0.1, and the `genericVM` service rate 0.5.
fn accounting(lab_funds: &str, when_dry: VmWhenDry) -> AccountingConfig {
    let account = |id: &str, user: &str| Account {
        id: id.into(),
        organization: None,
        description: None,
        active: true,
        users: vec![AccountUser {
            id: user.into(),
            active: true,
            admin: false,
        }],
        custom: Default::default(),
    };
    let funds = |id: &str, amount: &str| Allocation {
        account: id.into(),
        amount: m(amount),
        start: None,
        end: None,
    };
    AccountingConfig {
        enabled: true,
        accounts: vec![
            account("lab", "alice"),
            account("grant", "alice"),
            account("bobs", "bob"),
        ],
        allocations: vec![
            funds("lab", lab_funds),
            funds("grant", "1000"),
            funds("bobs", "1000"),
        ],
        rates: Rates {
            processors: Some(m("0.01")),
            memory: Some(m("0.000001")),
            node: Some(m("0.1")),
            disk: Some(m("0.000001")),
            services: [("genericVM".to_string(), m("0.5"))].into(),
            ..Rates::default()
        },
        vm_charge_interval_seconds: Some(INTERVAL),
        vm_when_dry: when_dry,
        ..AccountingConfig::default()
    }
}

fn server(lab_funds: &str, when_dry: VmWhenDry) -> (TestServer, tempfile::TempDir) {
    with_site_commands(|c| {
        c.nodes = vec![NodeConfig::new("n1", 8)];
        c.accounting = accounting(lab_funds, when_dry);
    })
}

/// `lab` holds `amount` for its VM (a periodic charge and the next interval's lien are
/// one change: no reader sees nothing held between them).
fn holds(server: &TestServer, amount: Money) {
    assert_eq!(money(&balance(server, "lab")["held"]), amount);
}

/// The charges recorded for VM `id`, oldest first.
fn charges_of(server: &TestServer, id: &str) -> Vec<Value> {
    let mut records: Vec<Value> = charges(server)
        .into_iter()
        .filter(|r| r["object"] == format!("vm/{id}"))
        .collect();
    records.sort_by_key(|r| r["id"].as_i64());
    records
}

fn create_vm(server: &TestServer, auth: Auth, body: &Value) -> drover_testkit::Reply {
    send(server, "POST", "/rest/vms", auth, body)
}

/// Destroys VM `id` and waits until it is gone and its last charge is recorded.
fn destroy(server: &TestServer, auth: Auth, id: &str) {
    job_id(&server.send("DELETE", &format!("/rest/vms/{id}"), auth));
    wait_until("the VM is gone", || {
        server.get(&format!("/rest/vms/{id}")).status == 404
    });
    recorded(server);
}

/// Waits until every charge the balances show is in the usage records: a balance moves
/// as the charge is made, its record once the step that made it is durable.
fn recorded(server: &TestServer) {
    wait_until("the charges are recorded", || {
        let records = charges(server);
        ["lab", "grant", "bobs"].iter().all(|account| {
            let of_account: Money = records
                .iter()
                .filter(|r| r["account"] == *account)
                .map(|r| money(&r["charge"]))
                .sum();
            of_account == money(&balance(server, account)["charged"])
        })
    });
}

/// Every charge of `records` is its per-second price times its seconds; answers their sum
/// and their seconds.
fn exact(records: &[Value], per_second: Money) -> (Money, i64) {
    let mut total = (Money::ZERO, 0);
    for record in records {
        let seconds = record["duration"].as_i64().unwrap();
        assert_eq!(
            money(&record["charge"]),
            per_second.times_count(seconds),
            "{record}"
        );
        total = (total.0 + money(&record["charge"]), total.1 + seconds);
    }
    total
}

#[test]
fn a_vm_is_charged_as_it_goes_and_at_its_end_for_the_seconds_it_held() {
    let (server, _site) = server("1000", VmWhenDry::PowerOff);
    // 2 processors, 256 MB and a node: 0.02 + 0.000256 + 0.1 a second.
    let per_second = m("0.120256");
    // Ten years to live: what is held is one interval's price, not ten years'.
    let body = json!({"id": "paid", "totalProcessors": 2, "totalMemory": 256,
                      "requestedTimeToLive": 10 * 366 * 86_400});
    job_id(&create_vm(&server, Auth::User, &body));
    let held = per_second.times_count(INTERVAL);
    holds(&server, held);
    wait_substate(&server, "paid", "running");
    // It pays as it goes: charged at an interval while it lives, funds held for the next.
    let first = wait_for_value("the VM is charged while it lives", 60, || {
        charges_of(&server, "paid").first().cloned()
    });
    assert_eq!(first["account"], "lab", "{first}");
    assert!(first["duration"].as_i64().unwrap() >= INTERVAL, "{first}");
    holds(&server, held);
    assert_eq!(server.get("/rest/vms/paid").json()["substate"], "running");

    // Destroyed, it is charged the rest, and nothing stays held.
    destroy(&server, Auth::User, "paid");
    let records = charges_of(&server, "paid");
    assert!(records.len() >= 2, "{records:?}");
    contiguous(&records);
    let (charged, seconds) = exact(&records, per_second);
    assert!(seconds >= INTERVAL, "{records:?}");
    let after = balance(&server, "lab");
    assert_eq!(money(&after["held"]), Money::ZERO, "{after}");
    assert_eq!(money(&after["charged"]), charged, "{after}");
    assert_eq!(money(&after["available"]), m("1000") - charged, "{after}");
    // The other accounts were not touched.
    assert_eq!(money(&balance(&server, "grant")["available"]), m("1000"));
}

#[test]
fn a_vm_is_refused_without_funds_and_powered_off_when_its_account_runs_dry() {
    // Enough for one interval of a small VM (0.110128 a second), not for two.
    let (server, _site) = server("0.3", VmWhenDry::PowerOff);
    let per_second = m("0.110128");
    job_id(&create_vm(&server, Auth::User, &json!({"id": "thrifty"})));
    wait_substate(&server, "thrifty", "running");
    // A second is refused: the first holds what the account has.
    let second = json!({"id": "second"});
    create_vm(&server, Auth::User, &second).assert_refused(400, "insufficient funds", &second);

    // At its first charge the account cannot pay for the next interval: powered off,
    // no longer charged, an event says why.
    wait_substate(&server, "thrifty", "off");
    let events = server
        .get("/rest/events?query=%7B%22eventType%22%3A%22vmdry%22%7D")
        .json();
    let event = &events["results"][0];
    assert!(
        event.to_string().contains("powered off") && event.to_string().contains("thrifty"),
        "{events}"
    );
    assert_eq!(money(&balance(&server, "lab")["held"]), Money::ZERO);
    let on = json!({"powerState": "ON"});
    send(&server, "PUT", "/rest/vms/thrifty", Auth::User, &on).assert_refused(
        400,
        "insufficient funds",
        &on,
    );

    // Destroyed and made again, it is not made: destroying dodges nothing.
    destroy(&server, Auth::User, "thrifty");
    let again = json!({"id": "thrifty"});
    create_vm(&server, Auth::User, &again).assert_refused(400, "insufficient funds", &again);
    let (charged, _) = exact(&charges_of(&server, "thrifty"), per_second);
    let after = balance(&server, "lab");
    assert_eq!(money(&after["charged"]), charged, "{after}");
    assert_eq!(money(&after["held"]), Money::ZERO, "{after}");
    assert!(charged >= per_second.times_count(INTERVAL), "{after}");

    // With funds added it can be made again.
    add_funds(&server);
    job_id(&create_vm(&server, Auth::User, &again));
    wait_substate(&server, "thrifty", "running");
    destroy(&server, Auth::User, "thrifty");
}

/// Adds 100 to `lab` (the administrators' surface).
fn add_funds(server: &TestServer) {
    let funds = json!({"account": "lab", "amount": 100});
    let added = server.send_json("POST", "/rest/accounting/allocations", &funds);
    assert_eq!(added.status, 201, "{}", added.body);
}

#[test]
fn with_vm_when_dry_refuse_a_dry_vm_runs_on_into_debt() {
    let (server, _site) = server("0.3", VmWhenDry::Refuse);
    job_id(&create_vm(&server, Auth::User, &json!({"id": "debtor"})));
    wait_substate(&server, "debtor", "running");
    wait_for_value("the account is overdrawn", 60, || {
        let balance = balance(&server, "lab");
        money(&balance["available"])
            .is_negative()
            .then_some(balance)
    });
    assert_eq!(server.get("/rest/vms/debtor").json()["substate"], "running");
    let second = json!({"id": "second"});
    create_vm(&server, Auth::User, &second).assert_refused(400, "insufficient funds", &second);
    destroy(&server, Auth::User, "debtor");
}

/// Attacks of an ordinary user: a VM's account is its owner's (no VM body may name one),
/// and a service's must be one its user belongs to.
#[test]
fn a_vm_cannot_be_charged_to_another_users_account() {
    let (server, _site) = server("1000", VmWhenDry::PowerOff);
    let named = json!({"id": "theirs", "account": "bobs"});
    create_vm(&server, Auth::User, &named).assert_refused(400, "account", &named);
    let service = json!({"account": "bobs", "data": [{"name": "desk", "type": "vm",
        "attributes": {"sched": {"job": {"image": "guest", "template": "genericVM"}}}}]});
    send(&server, "POST", "/rest/services", Auth::User, &service).assert_refused(
        400,
        "not a member",
        &service,
    );
    // Bob's own VM is charged to his own account, nothing to alice's.
    job_id(&create_vm(
        &server,
        login_as("bob"),
        &json!({"id": "bobs-vm"}),
    ));
    wait_substate(&server, "bobs-vm", "running");
    destroy(&server, login_as("bob"), "bobs-vm");
    let records = charges_of(&server, "bobs-vm");
    assert!(!records.is_empty());
    assert!(
        records.iter().all(|r| r["account"] == "bobs"),
        "{records:?}"
    );
    assert_eq!(money(&balance(&server, "lab")["charged"]), Money::ZERO);
    assert_eq!(money(&balance(&server, "grant")["charged"]), Money::ZERO);
    // The administrator belongs to no account: their VMs, like their jobs, are not
    // accounted, and charge no one's.
    job_id(&create_vm(&server, Auth::Admin, &json!({"id": "admins"})));
    wait_substate(&server, "admins", "running");
    destroy(&server, Auth::Admin, "admins");
    assert!(charges_of(&server, "admins").is_empty());
    for account in ["lab", "grant"] {
        assert_eq!(money(&balance(&server, account)["charged"]), Money::ZERO);
    }
}

/// Quotes `creation` (a service's, on the account `grant`) for 100 seconds, checks it is
/// `per_second`'s price, makes the service and waits until its (one) VM runs and has
/// been charged; then deletes it and checks its VM was charged that price exactly, to
/// `grant`, and nothing to `lab`.
fn charged_as_quoted(server: &TestServer, creation: &Value, per_second: Money) {
    let quoted = send(
        server,
        "POST",
        "/rest/quotes/standard/quote?object-type=service&proxy-user=alice&charge-duration=100",
        Auth::User,
        creation,
    );
    assert_eq!(quoted.status, 200, "{}", quoted.body);
    let amount = money(&quoted.json()["amount"]);
    assert_eq!(amount, per_second.times_count(100), "{}", quoted.body);
    let made = send(server, "POST", "/rest/services", Auth::User, creation);
    assert_eq!(made.status, 201, "{}", made.body);
    let name = made.json()["name"].as_str().unwrap().to_string();
    let vm = wait_for_value("the service's VM runs", 60, || {
        let vms = server.get("/rest/vms").json();
        let vm = &vms["results"][0];
        (vm["substate"] == "running").then(|| vm["id"].as_str().unwrap().to_string())
    });
    wait_for_value("the service's VM is charged", 60, || {
        charges_of(server, &vm).first().cloned()
    });
    let deleted = server.call(
        "DELETE",
        &format!("/rest/services/{name}"),
        Auth::User,
        None,
    );
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    wait_until("the service's VM is gone", || {
        server.get(&format!("/rest/vms/{vm}")).status == 404
    });
    recorded(server);
    settled(server, &vm, "grant", per_second);
    assert_eq!(money(&balance(server, "lab")["charged"]), Money::ZERO);
}

#[test]
fn a_vm_service_is_charged_to_its_account_at_what_its_quote_said() {
    let (server, _site) = server("1000", VmWhenDry::PowerOff);
    let creation = json!({"account": "grant", "data": [{"name": "desk", "type": "vm",
        "attributes": {"sched": {"job": {"image": "guest", "template": "genericVM",
                                         "resources": {"procs": 2, "mem": 256}}}}}]});
    // 0.02 + 0.000256 + 0.1 + the service's 0.5 a second.
    charged_as_quoted(&server, &creation, m("0.620256"));
}

#[test]
fn a_vm_service_with_a_data_disk_is_charged_its_disk_as_quoted() {
    let (server, _site) = server("1000", VmWhenDry::PowerOff);
    for template in [
        json!({"name": "small vm", "type": "vm", "attributes": {"sched": {"job": {
            "image": "guest", "template": "genericVM", "resources": {"procs": 1, "mem": 128}}}}}),
        json!({"name": "data disk", "type": "storage",
               "attributes": {"sched": {"job": {"resources": {"disk": 2}}}}}),
        json!({"name": "tier", "type": "container",
               "includedServices": [{"localName": "db", "serviceTemplate": "small vm"},
                                    {"localName": "data", "serviceTemplate": "data disk"}],
               "attributes": {"sched": {"dependencies": [
                   {"localName": "db", "dependency": ["data"]}]}}}),
    ] {
        let made = server.send_json("POST", "/rest/service-templates", &template);
        assert_eq!(made.status, 201, "{}", made.body);
    }
    let creation = json!({"account": "grant", "data": [{"name": "t", "serviceTemplate": "tier"}]});
    // The VM: 0.1 + 0.01 + 0.000128 + 0.5; its disk: 2 GB, 2048 MB × 0.000001.
    charged_as_quoted(&server, &creation, m("0.612176"));
}

/// A real guest (QEMU) is charged while it runs and at its end.
#[test]
fn a_real_guest_is_charged_while_it_runs_and_when_destroyed() {
    let builder = TestServer::builder().user("bob", false);
    let Some((server, _guests)) = crate::vms::start(builder, |c| {
        c.accounting = accounting("1000", VmWhenDry::PowerOff);
    }) else {
        return;
    };
    let per_second = m("0.110128");
    job_id(&create_vm(&server, Auth::User, &json!({"id": "real"})));
    wait_substate(&server, "real", "running");
    wait_for_value("the guest is charged while it runs", 120, || {
        charges_of(&server, "real").first().cloned()
    });
    destroy(&server, Auth::User, "real");
    assert!(crate::vms::qemu_pids(server.data_dir(), Some("real")).is_empty());
    let records = settled(&server, "real", "lab", per_second);
    assert!(records.len() >= 2, "{records:?}");
}

/// When a usage record was made, in epoch seconds.
fn created(record: &Value) -> i64 {
    let text = record["createdTime"].as_str().unwrap();
    let civil: jiff::civil::DateTime = text
        .trim_end_matches(" UTC")
        .replace(' ', "T")
        .parse()
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .unwrap()
        .timestamp()
        .as_second()
}

/// Each charge after the first covers exactly the seconds since the one before: no
/// second the VM held goes uncharged, none is charged twice.
fn contiguous(records: &[Value]) {
    for pair in records.windows(2) {
        assert_eq!(
            created(&pair[1]) - created(&pair[0]),
            pair[1]["duration"].as_i64().unwrap(),
            "{records:?}"
        );
    }
}

/// VM `id`, gone, was charged to `account` exactly and without a gap, and nothing of it
/// stays held there: answers its charges.
fn settled(server: &TestServer, id: &str, account: &str, per_second: Money) -> Vec<Value> {
    let records = charges_of(server, id);
    assert!(
        records.iter().all(|r| r["account"] == account),
        "{records:?}"
    );
    contiguous(&records);
    let (charged, _) = exact(&records, per_second);
    let balance = balance(server, account);
    assert_eq!(money(&balance["charged"]), charged, "{balance}");
    assert_eq!(money(&balance["held"]), Money::ZERO, "{balance}");
    records
}

#[test]
fn a_vm_is_charged_without_a_gap_across_a_restart_of_the_service() {
    let (server, _site) = server("1000", VmWhenDry::PowerOff);
    let per_second = m("0.110128");
    job_id(&create_vm(&server, Auth::User, &json!({"id": "steady"})));
    wait_substate(&server, "steady", "running");
    wait_for_value("a first charge", 60, || {
        charges_of(&server, "steady").first().cloned()
    });
    let server = server.restart();
    // What was held is held still, and the charges go on from where they were.
    holds(&server, per_second.times_count(INTERVAL));
    let before = charges_of(&server, "steady").len();
    wait_for_value("a charge after the restart", 60, || {
        (charges_of(&server, "steady").len() > before).then_some(())
    });
    destroy(&server, Auth::User, "steady");
    settled(&server, "steady", "lab", per_second);
}

#[test]
fn a_vm_waiting_for_room_waits_on_for_funds_and_says_so() {
    // One processor: a second VM waits for the first's room.
    let (server, _site) = with_site_commands(|c| {
        c.nodes = vec![NodeConfig::new("n1", 1)];
        c.accounting = accounting("0.5", VmWhenDry::PowerOff);
    });
    job_id(&create_vm(&server, Auth::User, &json!({"id": "first"})));
    wait_substate(&server, "first", "running");
    // Funded when asked for (0.5 covers both first intervals), it waits for room.
    let setup = job_id(&create_vm(&server, Auth::User, &json!({"id": "later"})));
    wait_substate(&server, "later", "waiting");
    // The first runs the account dry, then goes: there is room, but no money.
    wait_substate(&server, "first", "off");
    destroy(&server, Auth::User, "first");
    let job = server.wait_for(
        &format!("/rest/jobs/{setup}?api-version=2"),
        "the setup job says it waits for funds",
        |job| job.to_string().contains("insufficient funds"),
    );
    assert_eq!(
        server.get("/rest/vms/later").json()["substate"],
        "waiting",
        "{job}"
    );
    assert_eq!(money(&balance(&server, "lab")["held"]), Money::ZERO);
    // Funds added, it is made.
    add_funds(&server);
    wait_substate(&server, "later", "running");
    let job = server
        .get(&format!("/rest/jobs/{setup}?api-version=2"))
        .json();
    assert!(!job.to_string().contains("insufficient funds"), "{job}");
    destroy(&server, Auth::User, "later");
}

#[test]
fn a_vm_made_before_accounting_is_charged_from_the_restart_that_turns_it_on() {
    let (server, _site) = with_site_commands(|c| c.nodes = vec![NodeConfig::new("n1", 8)]);
    job_id(&create_vm(&server, Auth::User, &json!({"id": "older"})));
    wait_substate(&server, "older", "running");
    let server = server.restart_reconfigured(|c| {
        c.accounting = accounting("1000", VmWhenDry::PowerOff);
    });
    let per_second = m("0.110128");
    holds(&server, per_second.times_count(INTERVAL));
    wait_for_value("the VM is charged", 60, || {
        charges_of(&server, "older").first().cloned()
    });
    destroy(&server, Auth::User, "older");
    settled(&server, "older", "lab", per_second);
}

#[test]
fn a_vm_off_for_want_of_funds_is_charged_again_once_powered_on() {
    let (server, _site) = server("0.3", VmWhenDry::PowerOff);
    let per_second = m("0.110128");
    job_id(&create_vm(&server, Auth::User, &json!({"id": "revived"})));
    wait_substate(&server, "revived", "running");
    wait_substate(&server, "revived", "off");
    add_funds(&server);
    let on = json!({"powerState": "ON"});
    let reply = send(&server, "PUT", "/rest/vms/revived", Auth::User, &on);
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait_substate(&server, "revived", "running");
    holds(&server, per_second.times_count(INTERVAL));
    destroy(&server, Auth::User, "revived");
    // Charged while it ran, not while it was off for want of funds.
    let (charged, _) = exact(&charges_of(&server, "revived"), per_second);
    let lab = balance(&server, "lab");
    assert_eq!(money(&lab["charged"]), charged, "{lab}");
    assert_eq!(money(&lab["held"]), Money::ZERO, "{lab}");
}
