//! Diagnostics: about, health, directory information.

use drover_testkit::{Auth, Builder, TestServer};

#[test]
fn about_reports_the_build() {
    let server = TestServer::start();
    let about = server.get("/rest/diag/about").json();
    assert_eq!(about["version"], env!("CARGO_PKG_VERSION"));
    let date = about["buildDate"].as_str().unwrap();
    drover_domain::dates::parse_build_date(date).unwrap();
    assert!(about["revision"].as_str().unwrap().len() >= 7, "{about}");
    assert!(about["build"].is_string());
}

#[test]
fn health_summary_needs_no_credentials_and_reports_the_datastore() {
    let server = TestServer::start();
    let health = server
        .get_as(Auth::None, "/rest/diag/health/summary")
        .json();
    assert_eq!(health["datastore"]["connected"], "UP");
    for (part, field) in [
        ("acct", "connected"),
        ("sched", "connected"),
        ("sched", "datastoreConnected"),
    ] {
        let state = health[part][field].as_str().unwrap();
        assert!(
            ["UP", "DOWN", "NOT_CONFIGURED", "NOT_SUPPORTED", "UNKNOWN"].contains(&state),
            "{part}.{field} = {state}"
        );
    }
    // Wrong credentials do not matter here.
    let reply = server.get_as(
        Auth::Basic("x".into(), "y".into()),
        "/rest/diag/health/summary",
    );
    assert_eq!(reply.status, 200);
}

#[test]
fn health_detail_describes_the_sqlite_store() {
    let server = Builder::new().sqlite().start();
    let detail = server.get("/rest/diag/health/detail").json();
    let store = &detail["datastore"];
    assert_eq!(store["connected"], "UP");
    assert!(
        store["databaseName"]
            .as_str()
            .unwrap()
            .ends_with("drover.db"),
        "{detail}"
    );
    assert!(
        store["version"].as_str().unwrap().starts_with('3'),
        "{detail}"
    );
    assert!(store["message"].is_null());
    assert!(detail["sched"]["licensedFeatures"].is_array());
    assert!(detail["acct"].get("connected").is_some());
}

#[test]
fn health_detail_describes_the_postgresql_store() {
    let Some(builder) = Builder::new().postgres() else {
        return; // no PostgreSQL in this run (CI always has one)
    };
    let server = builder.start();
    let detail = server.get("/rest/diag/health/detail").json();
    let store = &detail["datastore"];
    assert_eq!(store["connected"], "UP", "{detail}");
    assert!(
        store["host"].is_string() && store["port"].is_u64(),
        "{detail}"
    );
    assert!(
        store["version"]
            .as_str()
            .unwrap()
            .chars()
            .next()
            .unwrap()
            .is_ascii_digit()
    );
    let summary = server
        .get_as(Auth::None, "/rest/diag/health/summary")
        .json();
    assert_eq!(summary["datastore"]["connected"], "UP");
}

#[test]
fn ldap_shows_the_directory_configuration_but_never_the_password() {
    let server = Builder::new()
        .config(|c| {
            c.ldap = Some(
                toml::from_str(
                    "server = \"ldap.example.org\"\nsecurity_type = \"starttls\"\n\
                     base_dns = [\"dc=example,dc=org\"]\nbind_user = \"cn=admin,dc=example,dc=org\"\n\
                     bind_password = \"very-secret\"",
                )
                .unwrap(),
            )
        })
        .start();
    let reply = server.get("/rest/diag/ldap");
    assert!(!reply.body.contains("very-secret"));
    let ldap = reply.json();
    assert_eq!(ldap["server"], "ldap.example.org");
    assert_eq!(ldap["port"], 389);
    assert_eq!(ldap["securityType"], "STARTTLS");
    assert_eq!(ldap["baseDNs"][0], "dc=example,dc=org");
    assert_eq!(ldap["bindUser"], "cn=admin,dc=example,dc=org");
    assert_eq!(ldap["userNameAttribute"], "uid");

    let unconfigured = TestServer::start().get("/rest/diag/ldap").json();
    assert!(unconfigured["server"].is_null());
}

/// A TCP relay to PostgreSQL that can be cut, to take the datastore away from a running
/// server.
struct Relay {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    streams: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Relay {
    fn to(target: String) -> Relay {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let streams = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stop, kept) = (cut.clone(), streams.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let server = std::net::TcpStream::connect(&target).unwrap();
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server.try_clone().unwrap(), client.try_clone().unwrap()),
                ] {
                    std::thread::spawn(move || std::io::copy(&mut from, &mut to));
                }
                kept.lock().unwrap().extend([client, server]);
            }
        });
        Relay { port, cut, streams }
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for stream in self.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

#[test]
fn health_reports_a_datastore_that_went_away() {
    let Some(url) = drover_testkit::postgres_url() else {
        return; // no PostgreSQL in this run (CI always has one)
    };
    // postgres://user@host:port/db -> the same through the relay.
    let (head, rest) = url.split_once('@').unwrap();
    let (address, tail) = rest.split_once('/').unwrap();
    let relay = Relay::to(address.to_string());
    let relayed = format!("{head}@127.0.0.1:{}/{tail}", relay.port);
    let server = Builder::new()
        .config(|c| c.store = Some(format!("{relayed}?connect_timeout=2")))
        .start();
    let summary = server
        .get_as(Auth::None, "/rest/diag/health/summary")
        .json();
    assert_eq!(summary["datastore"]["connected"], "UP");

    relay.cut();
    let summary = server.get_as(Auth::None, "/rest/diag/health/summary");
    assert_eq!(summary.status, 200);
    assert_eq!(
        summary.json()["datastore"]["connected"],
        "DOWN",
        "{}",
        summary.body
    );
    let detail = server.get("/rest/diag/health/detail").json();
    assert_eq!(detail["datastore"]["connected"], "DOWN");
    assert!(
        detail["datastore"]["message"]
            .as_str()
            .unwrap()
            .contains("connect"),
        "{detail}"
    );
    // Authentication does not depend on the datastore.
    assert_eq!(server.get("/rest/diag/auth").status, 200);
}

#[test]
fn health_detail_says_what_makes_vms_and_what_is_missing() {
    // QEMU's provisioner without the default image (none is built here): VMs cannot be
    // made, and the message names the command that builds it.
    let server = Builder::new()
        .config(|c| c.cloud.provisioner = Some(drover::config::ProvisionerKind::Qemu))
        .start();
    let vms = &server.get("/rest/diag/health/detail").json()["vms"];
    assert_eq!(vms["provisioner"], "qemu", "{vms}");
    assert_eq!(vms["accel"], "tcg");
    assert_eq!(vms["accelReason"], "[cloud] accel = \"tcg\"");
    assert_eq!(vms["defaultImage"], "guest");
    assert_eq!(vms["defaultImageRegistered"], false);
    assert_eq!(vms["connected"], "DOWN");
    let message = vms["message"].as_str().unwrap();
    assert!(
        message.contains("prepare-guests") && message.contains("images/guest"),
        "{message}"
    );

    let off = Builder::new()
        .config(|c| c.cloud.provisioner = Some(drover::config::ProvisionerKind::None))
        .start();
    let vms = &off.get("/rest/diag/health/detail").json()["vms"];
    assert_eq!(vms["connected"], "NOT_CONFIGURED", "{vms}");
    assert_eq!(vms["provisioner"], "none");
    assert!(vms["accel"].is_null() && vms["message"].is_null());
    // Not for everyone: the summary has no such part.
    let summary = off.get_as(Auth::None, "/rest/diag/health/summary").json();
    assert!(summary.get("vms").is_none(), "{summary}");
}
