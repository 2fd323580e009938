//! Retention: stored events, audit events and reports' kept samples older than their
//! configured age are exported, then removed, in bounded batches.
//!
//! Nothing is removed unless its age is configured (`[retention]`; kept for ever by
//! default). Each batch is one indexed range read (oldest first) and one transaction of
//! deletes, each delete on the version read, so a batch never holds the store for long
//! and never removes what changed meanwhile. Before a batch is removed its documents are
//! appended, as they are stored (one JSON object a line), to
//! `<archive>/<collection>/<day>.jsonl` (the day of the document's own date, UTC), and
//! the file is synced: history is archived before it leaves the store. A crash between
//! the two exports a batch twice; nothing is lost.
//!
//! Audit events are the events of facility `security` (logins, refusals); they have
//! their own age, usually longer.

use std::collections::BTreeMap;
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use drover_domain::dates::{self, Timestamp, WireDates};
use drover_query::{Filter, ListQuery, Paging, Sort};
use drover_store::{Document, DocumentStore, Write};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::event::COLLECTION as EVENTS;
use crate::report::SAMPLES;

/// The facility of audit events.
pub const AUDIT_FACILITY: &str = "security";

/// `[retention]`: how long each kind is kept, and where removed history goes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Seconds a stored event (other than an audit event) is kept; none: for ever.
    pub events_seconds: Option<u64>,
    /// Seconds an audit event (facility `security`) is kept; none: for ever.
    pub audit_seconds: Option<u64>,
    /// Seconds a report's kept sample is kept; none: for ever.
    pub samples_seconds: Option<u64>,
    /// Where removed documents are exported; `archive` in the data directory by default.
    pub archive_dir: Option<PathBuf>,
    /// Documents removed in one transaction.
    pub batch: usize,
    /// Seconds between passes.
    pub every_seconds: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            events_seconds: None,
            audit_seconds: None,
            samples_seconds: None,
            archive_dir: None,
            batch: 1000,
            every_seconds: 600,
        }
    }
}

impl RetentionConfig {
    /// Whether anything is ever removed.
    pub fn removes_anything(&self) -> bool {
        self.events_seconds.is_some()
            || self.audit_seconds.is_some()
            || self.samples_seconds.is_some()
    }
}

/// What one pass removed, by kind.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Removed {
    pub events: usize,
    pub audit: usize,
    pub samples: usize,
}

/// A kind of document retention removes.
struct Kind {
    collection: &'static str,
    /// The path of its date (a UTC wire date), indexed newest first or in order.
    date: &'static str,
    /// Which documents of the collection it is: audit events or the others.
    audit: Option<bool>,
    age: u64,
}

pub struct Retention {
    store: Arc<dyn DocumentStore>,
    config: RetentionConfig,
    archive: PathBuf,
}

impl Retention {
    /// `archive`: the directory exports go to (the configured one, or the default).
    pub fn new(store: Arc<dyn DocumentStore>, config: RetentionConfig, archive: PathBuf) -> Self {
        Self {
            store,
            config,
            archive,
        }
    }

    /// One pass: every kind with an age, in batches until none is due. Blocking.
    pub fn pass(&self, now: Timestamp) -> Result<Removed, String> {
        let mut removed = Removed::default();
        let kinds = [
            (self.config.events_seconds, EVENTS, "eventDate", Some(false)),
            (self.config.audit_seconds, EVENTS, "eventDate", Some(true)),
            (self.config.samples_seconds, SAMPLES, "timestamp", None),
        ];
        for (index, (age, collection, date, audit)) in kinds.into_iter().enumerate() {
            let Some(age) = age else { continue };
            let kind = Kind {
                collection,
                date,
                audit,
                age,
            };
            let count = self.remove_due(&kind, now)?;
            match index {
                0 => removed.events = count,
                1 => removed.audit = count,
                _ => removed.samples = count,
            }
        }
        Ok(removed)
    }

    /// Removes the documents of `kind` older than its age, oldest first, a batch at a
    /// time; answers how many.
    fn remove_due(&self, kind: &Kind, now: Timestamp) -> Result<usize, String> {
        let seconds = i64::try_from(kind.age).unwrap_or(i64::MAX);
        let cutoff = Timestamp::from_second(now.as_second().saturating_sub(seconds))
            .unwrap_or(Timestamp::MIN);
        let filter = Filter::parse(
            &json!({ kind.date: { "$lt": dates::format_utc(cutoff) } }),
            &WireDates::utc(),
        )
        .map_err(|e| e.message)?;
        let sort = Sort::parse_str(&format!(r#"{{"{}": 1}}"#, kind.date)).map_err(|e| e.message)?;
        let batch = self.config.batch.max(1);
        // Documents of the collection that are due but of the other kind stay: later
        // pages start past them.
        let mut kept = 0;
        let mut removed = 0;
        loop {
            let query = ListQuery {
                filter: filter.clone(),
                sort: sort.clone(),
                paging: Paging {
                    offset: kept,
                    max: Some(batch),
                },
            };
            let page = self
                .store
                .list(kind.collection, &query)
                .map_err(|e| e.to_string())?;
            let read = page.items.len();
            let (due, other): (Vec<Document>, Vec<Document>) = page
                .items
                .into_iter()
                .partition(|d| kind.audit.is_none_or(|audit| is_audit(&d.body) == audit));
            kept += other.len();
            if !due.is_empty() {
                self.export(kind, &due)?;
                let deletes: Vec<Write> = due
                    .iter()
                    .map(|d| Write::Delete {
                        collection: kind.collection.to_string(),
                        id: d.id.clone(),
                        expected_version: Some(d.version),
                    })
                    .collect();
                self.store.write(&deletes).map_err(|e| e.to_string())?;
                removed += due.len();
            }
            if read < batch {
                return Ok(removed);
            }
            // Writers (the journal, the events thread) get the store between batches.
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Appends `documents` to their days' files and syncs them.
    fn export(&self, kind: &Kind, documents: &[Document]) -> Result<(), String> {
        let dir = self.archive.join(kind.collection);
        private_dir(&self.archive)?;
        private_dir(&dir)?;
        let mut by_day: BTreeMap<String, Vec<&Document>> = BTreeMap::new();
        for document in documents {
            let day = document
                .body
                .get(kind.date)
                .and_then(Value::as_str)
                .and_then(|d| d.get(..10))
                .filter(|d| d.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
                .unwrap_or("undated");
            by_day.entry(day.to_string()).or_default().push(document);
        }
        for (day, documents) in by_day {
            let path = dir.join(format!("{day}.jsonl"));
            let mut lines = Vec::new();
            for document in documents {
                let line = json!({"id": document.id, "document": document.body});
                lines.extend_from_slice(line.to_string().as_bytes());
                lines.push(b'\n');
            }
            let mut file = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|e| format!("cannot export to {}: {e}", path.display()))?;
            file.write_all(&lines)
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("cannot export to {}: {e}", path.display()))?;
        }
        Ok(())
    }
}

fn is_audit(body: &Value) -> bool {
    body.get("facility").and_then(Value::as_str) == Some(AUDIT_FACILITY)
}

/// Makes `dir` (mode 0700) if it is not there, and refuses one another user owns or
/// may write to: the service writes history there as itself.
fn private_dir(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} must be a directory of the service's own user that no one else may write to",
            dir.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use drover_store::SqliteStore;

    use super::*;

    fn event(id: &str, date: &str, facility: Option<&str>) -> Value {
        json!({"id": id, "eventDate": date, "eventType": "x", "severity": "INFO",
               "code": 0, "facility": facility})
    }

    /// A store in a new directory, with the events collection.
    fn events_store() -> (tempfile::TempDir, Arc<dyn DocumentStore>) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn DocumentStore> =
            Arc::new(SqliteStore::open(&dir.path().join("d.db")).unwrap());
        store
            .ensure_collection(&crate::recorder::collection_spec())
            .unwrap();
        (dir, store)
    }

    /// Due documents of each kind are exported to their day's file and removed, in
    /// batches; the others and the newer ones stay.
    #[test]
    fn due_history_is_exported_then_removed_in_batches() {
        let (dir, store) = events_store();
        for i in 0..7 {
            let audit = (i % 3 == 0).then_some(AUDIT_FACILITY);
            let day = if i < 5 { "2026-01-0" } else { "2026-03-0" };
            let date = format!("{day}{} 10:00:00 UTC", 1 + i % 2);
            store
                .insert(
                    EVENTS,
                    &format!("e{i}"),
                    None,
                    event(&format!("e{i}"), &date, audit),
                )
                .unwrap();
        }
        let config = RetentionConfig {
            events_seconds: Some(0),
            batch: 2,
            ..RetentionConfig::default()
        };
        let archive = dir.path().join("archive");
        let retention = Retention::new(store.clone(), config, archive.clone());
        let now = dates::parse_utc("2026-02-01 00:00:00 UTC").unwrap();
        let removed = retention.pass(now).unwrap();
        // e0..e4 are older than now; e0 and e3 are audit events, kept for ever.
        assert_eq!(
            removed,
            Removed {
                events: 3,
                audit: 0,
                samples: 0
            }
        );
        let left: Vec<String> = store
            .list(EVENTS, &ListQuery::default())
            .unwrap()
            .items
            .into_iter()
            .map(|d| d.id)
            .collect();
        assert_eq!(left, ["e0", "e3", "e5", "e6"]);
        let first = std::fs::read_to_string(archive.join("events/2026-01-01.jsonl")).unwrap();
        let second = std::fs::read_to_string(archive.join("events/2026-01-02.jsonl")).unwrap();
        let ids = |text: &str| -> Vec<String> {
            text.lines()
                .map(|l| {
                    serde_json::from_str::<Value>(l).unwrap()["id"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        assert_eq!(ids(&first), ["e2", "e4"]);
        assert_eq!(ids(&second), ["e1"]);
        let mode = std::fs::metadata(archive.join("events")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Nothing more is due.
        assert_eq!(retention.pass(now).unwrap(), Removed::default());
    }

    /// An archive directory another user could write to is refused, and nothing is
    /// removed.
    #[test]
    fn an_archive_others_may_write_to_is_refused() {
        let (dir, store) = events_store();
        store
            .insert(
                EVENTS,
                "e0",
                None,
                event("e0", "2026-01-01 00:00:00 UTC", None),
            )
            .unwrap();
        let archive = dir.path().join("open");
        std::fs::create_dir(&archive).unwrap();
        std::fs::set_permissions(
            &archive,
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let config = RetentionConfig {
            events_seconds: Some(0),
            ..RetentionConfig::default()
        };
        let retention = Retention::new(store.clone(), config, archive);
        let error = retention.pass(Timestamp::now()).unwrap_err();
        assert!(error.contains("no one else may write"), "{error}");
        assert_eq!(store.list(EVENTS, &ListQuery::default()).unwrap().total, 1);
    }
}
