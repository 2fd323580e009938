//! The lease of the active server (PostgreSQL): one holder at a time, taken over once the
//! holder's session is gone, and writes of a server whose epoch is no longer the lease's
//! refused (the fence), so that two servers never write side by side.

use drover_store::{CollectionSpec, DocumentStore, PostgresStore};

mod support;

fn schema() -> String {
    support::unique_schema("lease")
}

fn put(store: &PostgresStore, id: &str) -> drover_store::Result<Vec<i64>> {
    support::put_thing(store, id)
}

#[test]
fn one_server_holds_the_lease_and_a_server_that_lost_it_cannot_write() {
    let Some(url) = drover_store::test_postgres_url() else {
        eprintln!("no PostgreSQL for the test run; skipped");
        return;
    };
    let schema = schema();
    let first = PostgresStore::connect_in_schema(&url, Some(&schema)).unwrap();
    let second = PostgresStore::connect_in_schema(&url, Some(&schema)).unwrap();
    for store in [&first, &second] {
        store
            .ensure_collection(&CollectionSpec::new("things"))
            .unwrap();
    }
    let (lease_1, lease_2) = (first.lease().unwrap(), second.lease().unwrap());
    assert_eq!(second.lease().unwrap().holder().unwrap(), None);

    assert_eq!(lease_1.try_acquire("one", "http://one:1").unwrap(), Some(1));
    assert_eq!(lease_2.try_acquire("two", "http://two:2").unwrap(), None);
    let holder = lease_2.holder().unwrap().unwrap();
    assert_eq!((holder.holder.as_str(), holder.epoch), ("one", 1));
    assert!(lease_1.still_held().unwrap());
    put(&first, "a").unwrap();

    // The first server's session ends (killed, or cut off): the second takes over...
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let ended = admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' \
             AND classid = 3342 AND objid = hashtext($1)::oid",
            &[&schema],
        )
        .unwrap();
    assert_eq!(ended, 1);
    let mut taken = None;
    for _ in 0..50 {
        taken = lease_2.try_acquire("two", "http://two:2").unwrap();
        if taken.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(taken, Some(2));
    // ...and the first, still running, can no longer write, and knows it lost the lease.
    let refused = put(&first, "b").unwrap_err();
    assert!(
        refused.to_string().contains("no longer the active one"),
        "{refused}"
    );
    assert!(!lease_1.still_held().unwrap());
    put(&second, "b").unwrap();
    let _ = second.drop_schema();
}
