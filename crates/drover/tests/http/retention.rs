//! Retention over HTTP (issue #59): history past its age is exported, then removed from
//! the store, in batches, while submissions go on; audit events keep their own age.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use drover_testkit::TestServer;
use serde_json::{Value, json};

/// The job ids of the `jobsubmit` events exported under `archive`, with how often each
/// was exported.
fn exported_submissions(archive: &std::path::Path) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    let Ok(days) = std::fs::read_dir(archive) else {
        return seen;
    };
    for day in days {
        let text = std::fs::read_to_string(day.unwrap().path()).unwrap();
        for line in text.lines() {
            let line: Value = serde_json::from_str(line).expect("one JSON object a line");
            let document = &line["document"];
            assert_eq!(line["id"], document["id"], "{line}");
            if document["eventType"] == "jobsubmit" {
                let job = document["arguments"][0].as_str().unwrap().to_string();
                *seen.entry(job).or_default() += 1;
            }
        }
    }
    seen
}

#[test]
fn events_past_their_age_are_exported_then_removed_while_jobs_are_submitted() {
    let server = TestServer::builder()
        .config(|c| {
            // Every event of a second gone by is due; passes every second, 25 at a time.
            c.retention.events_seconds = Some(0);
            c.retention.every_seconds = 1;
            c.retention.batch = 25;
        })
        .start();
    let mut jobs = Vec::new();
    for _ in 0..150 {
        jobs.push(drover_testkit::submit_v2(
            &server,
            json!({"commandFile": "/bin/true"}),
        ));
    }
    let archive = server.data_dir().join("archive/events");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let exported = exported_submissions(&archive);
        if jobs.iter().all(|j| exported.contains_key(j)) {
            for job in &jobs {
                assert_eq!(exported[job], 1, "{job} exported more than once");
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every submission was exported: {} of {}",
            exported.len(),
            jobs.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Gone from the store, while the audit events (kept for ever here) stay.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stored = server.get("/rest/events?api-version=3").json();
        let results = stored["results"].as_array().unwrap();
        let of_jobs = results
            .iter()
            .filter(|e| {
                jobs.iter()
                    .any(|j| e.to_string().contains(&format!("\"{j}\"")))
            })
            .count();
        if of_jobs == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{of_jobs} events of the jobs stay"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&archive).unwrap());
    assert_eq!(mode & 0o077, 0, "the archive is the service's own");
}
