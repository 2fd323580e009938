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

use std::ffi::CString;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use drover_domain::dates::{self, Timestamp, WireDates};
use drover_query::{Filter, ListQuery, Page, Paging, Sort};
use drover_store::{Document, DocumentStore, Write};
use serde::Deserialize;
use serde_json::json;

use crate::event::COLLECTION as EVENTS;
use crate::report::SAMPLES;

/// The facility of audit events.
pub const AUDIT_FACILITY: &str = "security";
/// The most batches a window of dates holds before it is halved.
const WINDOW_BATCHES: usize = 8;

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
        let file_day: String = dates::format_utc(now).chars().take(10).collect();
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
            let count = self.remove_due(&kind, now, &file_day)?;
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
    ///
    /// Every query is exact in SQL (the kind is a condition on the indexed `facility`),
    /// and each reads a window of dates holding at most [`WINDOW_BATCHES`] batches: a
    /// window holding more is halved first. So a batch costs its window, never every
    /// due document (a list counts what matches).
    fn remove_due(&self, kind: &Kind, now: Timestamp, file_day: &str) -> Result<usize, String> {
        let seconds = i64::try_from(kind.age).unwrap_or(i64::MAX);
        let cutoff = now.as_second().saturating_sub(seconds);
        let batch = self.config.batch.max(1);
        // Where the windows start: the oldest due document (one query a pass).
        let Some(oldest) = self
            .page(kind, (i64::MIN, cutoff), 1)?
            .items
            .first()
            .and_then(|d| {
                let date = d.body.get(kind.date)?.as_str()?;
                Some(dates::parse_utc(date)?.as_second())
            })
        else {
            return Ok(0);
        };
        let mut removed = 0;
        // Windows of [from, to) seconds, the oldest on top.
        let mut windows = vec![(oldest, cutoff)];
        while let Some((from, to)) = windows.pop() {
            loop {
                let page = self.page(kind, (from, to), batch)?;
                if page.total > WINDOW_BATCHES * batch && to - from > 1 {
                    let middle = from + (to - from) / 2;
                    windows.push((middle, to));
                    windows.push((from, middle));
                    break;
                }
                if page.items.is_empty() {
                    break;
                }
                let done = page.items.len() >= page.total;
                self.export(kind, &page.items, file_day)?;
                let deletes: Vec<Write> = page
                    .items
                    .iter()
                    .map(|d| Write::Delete {
                        collection: kind.collection.to_string(),
                        id: d.id.clone(),
                        expected_version: Some(d.version),
                    })
                    .collect();
                self.store.write(&deletes).map_err(|e| e.to_string())?;
                removed += page.items.len();
                // Writers (the journal, the events thread) get the store between batches.
                std::thread::sleep(Duration::from_millis(5));
                if done {
                    break;
                }
            }
        }
        Ok(removed)
    }

    /// The first `max` documents of `kind` dated in `[from, to)` seconds, oldest first
    /// (`i64::MIN`: no lower bound), with how many there are.
    fn page(
        &self,
        kind: &Kind,
        (from, to): (i64, i64),
        max: usize,
    ) -> Result<Page<Document>, String> {
        let date = |second: i64| {
            Timestamp::from_second(second)
                .map(dates::format_utc)
                .map_err(|e| e.to_string())
        };
        let mut range = json!({ "$lt": date(to)? });
        if from != i64::MIN {
            range["$gte"] = date(from)?.into();
        }
        let mut filter = json!({ kind.date: range });
        match kind.audit {
            Some(true) => filter["facility"] = AUDIT_FACILITY.into(),
            Some(false) => filter["facility"] = json!({ "$ne": AUDIT_FACILITY }),
            None => {}
        }
        let query = ListQuery {
            filter: Filter::parse(&filter, &WireDates::utc()).map_err(|e| e.message)?,
            sort: Sort::parse_str(&format!(r#"{{"{}": 1}}"#, kind.date)).map_err(|e| e.message)?,
            paging: Paging {
                offset: 0,
                max: Some(max),
            },
        };
        self.store
            .list(kind.collection, &query)
            .map_err(|e| e.to_string())
    }

    /// Appends `documents` to the pass's file of their collection (one a day: the day of
    /// the pass, whatever dates the documents give) and syncs it. The directories are
    /// opened without following links and checked on what was opened, the file created
    /// in the directory opened.
    fn export(&self, kind: &Kind, documents: &[Document], day: &str) -> Result<(), String> {
        let archive = private_dir(None, &self.archive)?;
        let dir = private_dir(Some(&archive), Path::new(kind.collection))?;
        let mut lines = Vec::new();
        for document in documents {
            let line = json!({"id": document.id, "document": document.body});
            lines.extend_from_slice(line.to_string().as_bytes());
            lines.push(b'\n');
        }
        let name = format!("{day}.jsonl");
        let mut file = open_in(&dir, &name)
            .map_err(|e| format!("cannot export to {}/{name}: {e}", kind.collection))?;
        file.write_all(&lines)
            .and_then(|()| file.sync_all())
            .map_err(|e| format!("cannot export to {}/{name}: {e}", kind.collection))
    }
}

/// Opens the directory `name` (inside `parent` when given), making it (mode 0700) if it
/// is not there, without following a link, and refuses one another user owns or may
/// write to: the service writes history there as itself.
fn private_dir(parent: Option<&File>, name: &Path) -> Result<File, String> {
    let shown = name.display();
    let c_name = CString::new(name.as_os_str().as_bytes())
        .map_err(|_| format!("{shown}: a name with a NUL byte"))?;
    let at = parent.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: a valid NUL-terminated path and a directory fd (or AT_FDCWD).
    let made = unsafe { libc::mkdirat(at, c_name.as_ptr(), 0o700) };
    if made != 0 {
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(format!("cannot make {shown}: {error}"));
        }
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: as above; the fd returned is owned by the File made of it.
    let fd = unsafe { libc::openat(at, c_name.as_ptr(), flags) };
    if fd < 0 {
        return Err(format!(
            "cannot open {shown} (it must be a directory, not a link): {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    let dir = unsafe { File::from_raw_fd(fd) };
    let meta = dir.metadata().map_err(|e| format!("{shown}: {e}"))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{shown} must be a directory of the service's own user that no one else may write to"
        ));
    }
    Ok(dir)
}

/// Opens `name` in `dir` to append (made with mode 0600), not following a link.
fn open_in(dir: &File, name: &str) -> std::io::Result<File> {
    let c_name = CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let flags =
        libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a directory fd and a valid NUL-terminated name; the fd returned is owned by
    // the File made of it.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c_name.as_ptr(),
            flags,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use drover_store::SqliteStore;
    use serde_json::Value;

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
        // One file for the pass's day, the oldest first.
        let exported = std::fs::read_to_string(archive.join("events/2026-02-01.jsonl")).unwrap();
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
        assert_eq!(ids(&exported), ["e2", "e4", "e1"]);
        let mode = std::fs::metadata(archive.join("events")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Nothing more is due.
        assert_eq!(retention.pass(now).unwrap(), Removed::default());
    }

    /// More due documents than a window may hold: windows are halved until each holds a
    /// few batches, and every document is exported once and removed.
    #[test]
    fn many_due_documents_are_taken_window_by_window() {
        let (dir, store) = events_store();
        for i in 0..100 {
            let date = format!("2026-01-01 00:{:02}:{:02} UTC", i / 60, i % 60);
            let id = format!("e{i:03}");
            store
                .insert(EVENTS, &id, None, event(&id, &date, None))
                .unwrap();
        }
        let config = RetentionConfig {
            events_seconds: Some(0),
            batch: 3,
            ..RetentionConfig::default()
        };
        let archive = dir.path().join("archive");
        let retention = Retention::new(store.clone(), config, archive.clone());
        let now = dates::parse_utc("2026-01-02 00:00:00 UTC").unwrap();
        assert_eq!(retention.pass(now).unwrap().events, 100);
        assert_eq!(store.list(EVENTS, &ListQuery::default()).unwrap().total, 0);
        let text = std::fs::read_to_string(archive.join("events/2026-01-02.jsonl")).unwrap();
        let ids: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let expected: Vec<String> = (0..100).map(|i| format!("e{i:03}")).collect();
        assert_eq!(ids, expected, "each once, oldest first");
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
