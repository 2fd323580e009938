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
    let server = TestServer::start();
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
