//! `Idempotency-Key` on the creating POSTs: a retry is answered the first answer and
//! creates nothing more, also after a restart and when the retries race.

use drover_testkit::{Auth, Reply, TestServer};
use serde_json::{Value, json};

const JOBS: &str = "/rest/jobs?api-version=2";

fn post_keyed(server: &TestServer, auth: Auth, path: &str, key: &str, body: &Value) -> Reply {
    server.call_with(
        "POST",
        path,
        auth,
        &[("Idempotency-Key", key)],
        Some(("application/json", body.to_string().into_bytes())),
    )
}

fn job_count(server: &TestServer) -> u64 {
    server.get(JOBS).json()["totalCount"].as_u64().unwrap()
}

fn held_job() -> Value {
    json!({"commandFile": "/bin/true", "holds": ["User"]})
}

#[test]
fn a_retried_submission_with_the_same_key_makes_one_job_also_after_a_restart() {
    let server = TestServer::builder()
        .config(|c| c.nodes = vec![drover_sched::node::NodeConfig::new("n1", 2)])
        .start();
    let first = post_keyed(&server, Auth::Admin, JOBS, "retry-1", &held_job());
    assert_eq!(first.status, 201, "{}", first.body);
    let again = post_keyed(&server, Auth::Admin, JOBS, "retry-1", &held_job());
    assert_eq!((again.status, again.json()), (201, first.json()));
    assert_eq!(again.header("location"), first.header("location"));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(job_count(&server), 1);

    // Version 1, arrays and reservations alike.
    let v1 = json!({"commandFile": "/bin/true", "holds": ["USER"]});
    let one = post_keyed(&server, Auth::Admin, "/rest/jobs", "v1-key", &v1);
    assert_eq!(one.status, 201, "{}", one.body);
    let two = post_keyed(&server, Auth::Admin, "/rest/jobs", "v1-key", &v1);
    assert_eq!(two.json(), one.json());
    let reservation = json!({"hostListExpression": "n1", "duration": 3600});
    let r1 = post_keyed(
        &server,
        Auth::Admin,
        "/rest/reservations",
        "r-key",
        &reservation,
    );
    let r2 = post_keyed(
        &server,
        Auth::Admin,
        "/rest/reservations",
        "r-key",
        &reservation,
    );
    assert_eq!(
        (r2.status, r2.json()),
        (r1.status, r1.json()),
        "{}",
        r1.body
    );
    let reservations = server.get("/rest/reservations").json()["totalCount"].clone();
    assert_eq!(reservations, 1);
    assert_eq!(job_count(&server), 2);

    let server = server.restart();
    let after = post_keyed(&server, Auth::Admin, JOBS, "retry-1", &held_job());
    assert_eq!((after.status, after.json()), (201, first.json()));
    assert_eq!(job_count(&server), 2, "nothing new after the restart");
    // A new key is a new job.
    let other = post_keyed(&server, Auth::Admin, JOBS, "retry-2", &held_job());
    assert_eq!(other.status, 201, "{}", other.body);
    assert_ne!(other.json(), first.json());
    assert_eq!(job_count(&server), 3);
}

#[test]
fn the_same_key_with_another_body_is_refused() {
    let server = TestServer::start();
    let first = post_keyed(&server, Auth::Admin, JOBS, "k", &held_job());
    assert_eq!(first.status, 201, "{}", first.body);
    let mut changed = held_job();
    changed["commandFile"] = json!("/bin/false");
    let reply = post_keyed(&server, Auth::Admin, JOBS, "k", &changed);
    reply.assert_refused(409, "another request", &"another body");
    // Another path or query with the key is another request too.
    let reply = post_keyed(&server, Auth::Admin, "/rest/jobs", "k", &held_job());
    reply.assert_refused(409, "another request", &"another query");
    assert_eq!(job_count(&server), 1);
}

#[test]
fn bad_keys_are_refused_and_failures_are_not_kept() {
    let server = TestServer::start();
    let long = "k".repeat(256);
    for bad in ["with space", long.as_str(), ""] {
        let reply = post_keyed(&server, Auth::Admin, JOBS, bad, &held_job());
        reply.assert_refused(400, "Idempotency-Key", &bad);
    }
    // A refused submission creates nothing and keeps nothing: the fixed retry runs.
    let bad = json!({"commandFile": ["/bin/true"], "holds": ["User"]});
    let refused = post_keyed(&server, Auth::Admin, JOBS, "fix-me", &bad);
    assert_eq!(refused.status, 400, "{}", refused.body);
    let again = post_keyed(&server, Auth::Admin, JOBS, "fix-me", &bad);
    assert_eq!(again.status, 400, "{}", again.body);
    assert_eq!(again.header("idempotent-replayed"), None);
    assert_eq!(job_count(&server), 0);
}

#[test]
fn keys_are_per_caller_and_bounded() {
    let server = TestServer::builder()
        .user("bob", false)
        .config(|c| c.idempotency.max_keys_per_user = 3)
        .start();
    let mine = post_keyed(&server, Auth::Admin, JOBS, "shared", &held_job());
    assert_eq!(mine.status, 201, "{}", mine.body);
    // Another user's same key neither sees my answer nor is blocked, whatever the body.
    let bob = Auth::Basic("bob".into(), drover_testkit::PASSWORD.into());
    let mut theirs = held_job();
    theirs["commandFile"] = json!("/bin/false");
    let reply = post_keyed(&server, bob.clone(), JOBS, "shared", &theirs);
    assert_ne!(reply.json(), mine.json());
    assert_ne!(reply.status, 409, "{}", reply.body);
    // A flood of keys: each user holds a bounded number.
    for key in ["a", "b"] {
        let reply = post_keyed(&server, Auth::Admin, JOBS, key, &held_job());
        assert_eq!(reply.status, 201, "{}", reply.body);
    }
    let reply = post_keyed(&server, Auth::Admin, JOBS, "d", &held_job());
    reply.assert_refused(429, "Idempotency-Key", &"a fourth key");
    // An answered key is still answered, and requests without a key still run.
    let replay = post_keyed(&server, Auth::Admin, JOBS, "shared", &held_job());
    assert_eq!(replay.json(), mine.json());
    let plain = drover_testkit::submit_as(&server, Auth::Admin, &held_job());
    assert_eq!(plain.status, 201, "{}", plain.body);
}

#[test]
fn concurrent_retries_with_one_key_make_one_job() {
    let server = TestServer::start();
    let replies: Vec<Reply> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| post_keyed(&server, Auth::Admin, JOBS, "race", &held_job())))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let created: Vec<&Reply> = replies.iter().filter(|r| r.status == 201).collect();
    assert!(!created.is_empty(), "{replies:?}");
    for reply in &replies {
        assert!(
            reply.status == 201 || reply.status == 409,
            "{}: {}",
            reply.status,
            reply.body
        );
        if reply.status == 201 {
            assert_eq!(reply.json(), created[0].json());
        } else {
            assert!(reply.messages().contains("under way"), "{}", reply.body);
        }
    }
    assert_eq!(job_count(&server), 1);
}

/// What a crash leaves between the job's commit and the keeping of its answer is the
/// key's receipt (written with the job): a retry is answered from it. A crash before the
/// commit leaves the claim without one: nothing was made, and the retry runs.
#[test]
fn a_submission_cut_short_by_a_crash_is_settled_by_what_the_store_holds() {
    use drover_auth::request_keys::{
        Claim, REQUEST_KEYS, RequestKeySettings, RequestKeys, fingerprint,
    };
    let server = TestServer::builder()
        .config(|c| c.nodes = vec![drover_sched::node::NodeConfig::new("n1", 2)])
        .start();
    let first = post_keyed(&server, Auth::Admin, JOBS, "crash-after", &held_job());
    assert_eq!(first.status, 201, "{}", first.body);
    let reservation = json!({"hostListExpression": "n1", "duration": 3600});
    let reserved = post_keyed(
        &server,
        Auth::Admin,
        "/rest/reservations",
        "r",
        &reservation,
    );
    assert_eq!(reserved.status, 201, "{}", reserved.body);
    let server = server.restart_with(|store| {
        // (Opening them makes the collection known to this store handle.)
        let earlier = RequestKeys::open(
            store.clone(),
            RequestKeySettings {
                window: std::time::Duration::from_secs(60),
                max_per_caller: 10,
            },
        )
        .unwrap();
        // After the commit: the receipt is there, the answer is not, and the claim is
        // an earlier run's.
        for document in store
            .list(REQUEST_KEYS, &drover_query::ListQuery::default())
            .unwrap()
            .items
        {
            let mut body = document.body;
            let made = [first.json()["name"].clone(), reserved.json()["id"].clone()];
            assert!(made.contains(&body["created"]), "{body}");
            body["state"] = json!("pending");
            body.as_object_mut().unwrap().remove("answer");
            body["boot"] = json!("an earlier run");
            store.put(REQUEST_KEYS, &document.id, None, body).unwrap();
        }
        // Before the commit: claimed by an earlier run, no receipt.
        let sent = fingerprint("POST", JOBS, held_job().to_string().as_bytes());
        let claim = earlier.claim("5:adminadmin", "admin", "crash-before", &sent, true);
        assert!(matches!(claim.unwrap(), Claim::Claimed { .. }));
    });
    let after = post_keyed(&server, Auth::Admin, JOBS, "crash-after", &held_job());
    assert_eq!((after.status, after.json()), (201, first.json()));
    assert_eq!(after.header("location"), first.header("location"));
    assert_eq!(job_count(&server), 1);
    let again = post_keyed(
        &server,
        Auth::Admin,
        "/rest/reservations",
        "r",
        &reservation,
    );
    assert_eq!((again.status, again.json()), (201, reserved.json()));
    assert_eq!(again.header("location"), reserved.header("location"));
    let reservations = server.get("/rest/reservations").json()["totalCount"].clone();
    assert_eq!(reservations, 1);
    let before = post_keyed(&server, Auth::Admin, JOBS, "crash-before", &held_job());
    assert_eq!(before.status, 201, "{}", before.body);
    assert_eq!(job_count(&server), 2);
    let again = post_keyed(&server, Auth::Admin, JOBS, "crash-before", &held_job());
    assert_eq!(again.json(), before.json());
    assert_eq!(job_count(&server), 2);
}
