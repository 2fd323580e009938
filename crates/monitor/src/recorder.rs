//! The event recorder: a thread that gives events their ids, stores them with group
//! commit and writes their log lines.
//!
//! Callers hand it events and wait for the answer. The thread takes every request that
//! is waiting, inserts all their events in one store transaction, then appends their
//! lines to `events.log`, and only then answers: an answered event is durable, and a
//! burst of events shares one fsync. The scheduler's events take another way, as its
//! [`EventSink`]: they are written in the journal batch of the change they report, and
//! handed to this thread for their log lines once that batch is durable.
//!
//! The events collection indexes what the newest-first listings need (`eventDate`, and
//! severity, type or origin before it). Each index costs every scheduler event about 9k
//! instructions, so the severity and origin indexes leave out the scheduler's own
//! (`INFO`, `scheduler`: those are listed through the `eventDate` index, where they are
//! nearly all the newest), and there is none on `id`: ids grow with time, so the largest
//! at start is the last created's (`DocumentStore::last_created`).

use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};

use drover_domain::dates::Timestamp;
use drover_domain::ids::IdSequence;
use drover_metrics::{Counter, Histogram, LATENCY_SECONDS};
use drover_sched::events::{EventSink, JournaledEvents, SchedEvent};
use drover_store::{Body, CollectionSpec, DocumentStore, StoreError, Write};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use crate::event::{COLLECTION, Event, InitiatedBy, ObjectRef, PrimaryObject, Tenant};
use crate::log::{EventLog, LogSettings};

/// How long the recorder's transactions take to commit (for `GET /metrics`).
pub static COMMIT_SECONDS: Histogram = Histogram::new(LATENCY_SECONDS);
/// Groups of event lines that could not be written to `events.log` (the events are
/// stored all the same).
pub static LOG_WRITE_ERRORS: Counter = Counter::new();

/// Most events written in one transaction.
const MAX_EVENTS_PER_COMMIT: usize = 8192;

/// The events collection and the queries it answers without scanning: the newest
/// events, of one severity, type or origin or of all. (An event is read by id through the
/// document's id; no index on the `id` path: ids grow with time, so the largest is the
/// last created, and every index costs each scheduler event about 9k instructions.)
/// The scheduler's events, nearly all of them, are `INFO` from `scheduler`: the severity
/// and origin indexes leave those out, and queries for them read the newest events.
pub fn collection_spec() -> CollectionSpec {
    CollectionSpec::new(COLLECTION)
        .index_newest_first(&["eventDate"])
        .index_newest_first_except(&["severity", "eventDate"], Value::from(SCHEDULER_SEVERITY))
        .index_newest_first(&["eventType", "eventDate"])
        .index_newest_first_except(&["origin", "eventDate"], Value::from(SCHEDULER_ORIGIN))
        // An event stream resumes after the last id it sent, in id order: a range of
        // this index, not a scan of every event.
        .index(&["id"])
        // Retention takes audit events (facility `security`) and the others apart.
        .index(&["facility", "eventDate"])
}

/// What the scheduler's events say of themselves.
const SCHEDULER_SEVERITY: &str = "INFO";
const SCHEDULER_ORIGIN: &str = "scheduler";

/// Why events could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("the event recorder is not running")]
    Stopped,
    #[error("{0}")]
    Store(String),
}

enum Message {
    /// Store these events, log them, answer.
    Record {
        events: Vec<Event>,
        answer: oneshot::Sender<Result<Vec<Event>, RecordError>>,
    },
    /// These events are stored already (with the scheduler's changes): log them.
    Log(Vec<Event>),
}

/// The handle callers hold; cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    inbox: Sender<Message>,
    ids: Arc<Mutex<IdSequence>>,
    /// Every event once stored, for those who follow them as they happen (plugins). A
    /// follower that falls more than [`FOLLOWER_BACKLOG`] behind misses the oldest.
    followers: broadcast::Sender<Arc<Event>>,
}

/// How many stored events a follower may have yet to read.
pub const FOLLOWER_BACKLOG: usize = 4096;

impl EventRecorder {
    /// Prepares the collection and starts the recorder thread (it stops when every
    /// handle is dropped, after writing what was sent).
    pub fn start(
        store: Arc<dyn DocumentStore>,
        log: LogSettings,
    ) -> Result<(Self, std::thread::JoinHandle<()>), String> {
        store
            .ensure_collection(&collection_spec())
            .map_err(|e| e.to_string())?;
        let newest = newest_id(store.as_ref()).map_err(|e| e.to_string())?;
        let ids = Arc::new(Mutex::new(IdSequence::starting_after(
            newest.as_deref(),
            Timestamp::now(),
        )));
        let log = EventLog::open(log.clone())
            .map_err(|e| format!("cannot open the event log {}: {e}", log.path.display()))?;
        let (inbox, messages) = std::sync::mpsc::channel();
        let thread_ids = ids.clone();
        let (followers, _) = broadcast::channel(FOLLOWER_BACKLOG);
        let thread_followers = followers.clone();
        let thread = std::thread::Builder::new()
            .name("events".into())
            .spawn(move || run(store, messages, thread_ids, log, thread_followers))
            .map_err(|e| e.to_string())?;
        Ok((
            Self {
                inbox,
                ids,
                followers,
            },
            thread,
        ))
    }

    /// The events stored from now on, in the order they were stored.
    pub fn follow(&self) -> broadcast::Receiver<Arc<Event>> {
        self.followers.subscribe()
    }

    /// Records `events` (ids assigned, tenants inherited) and answers them as stored.
    pub async fn record(&self, events: Vec<Event>) -> Result<Vec<Event>, RecordError> {
        let (answer, answered) = oneshot::channel();
        self.inbox
            .send(Message::Record { events, answer })
            .map_err(|_| RecordError::Stopped)?;
        answered.await.map_err(|_| RecordError::Stopped)?
    }
}

impl EventSink for EventRecorder {
    fn journal(&self, events: Vec<SchedEvent>) -> JournaledEvents {
        let mut stored: Vec<Event> = events.iter().map(from_scheduler).collect();
        {
            let mut ids = self.ids.lock().unwrap();
            for event in &mut stored {
                event.id = ids.next_id();
            }
        }
        let writes = stored.iter_mut().map(insert).collect();
        let inbox = self.inbox.clone();
        JournaledEvents {
            writes,
            committed: Some(Box::new(move || {
                let _ = inbox.send(Message::Log(stored));
            })),
        }
    }
}

/// The store write of an event about to be recorded (its version-1 fields filled in).
fn insert(event: &mut Event) -> Write {
    event.derive_v1_fields();
    Write::Insert {
        collection: COLLECTION.into(),
        id: event.id.clone(),
        name: None,
        body: Body::serialize(event).expect("an event serializes"),
    }
}

/// A scheduler event in the stored form: the version-1 vocabulary (`jobsubmit`,
/// facility `job`), its object as primary and associated object.
pub fn from_scheduler(event: &SchedEvent) -> Event {
    let at = Timestamp::from_second(event.time).unwrap_or_else(|_| Timestamp::now());
    let mut stored = Event::new(at, event.event_type, SCHEDULER_SEVERITY);
    stored.origin = Some(SCHEDULER_ORIGIN.into());
    stored.facility = Some(event.facility.into());
    stored.event_category = Some(event.facility.into());
    stored.status = Some("success".into());
    stored.arguments = vec![event.object_id.clone()];
    // A VM is named as version 3 names it, so that its tenant reaches the event.
    let kind = match event.facility {
        "vm" => "VM",
        other => other,
    };
    stored.associated_objects = vec![ObjectRef {
        kind: kind.into(),
        id: event.object_id.clone(),
    }];
    stored.primary_object = Some(PrimaryObject {
        kind: Some(kind.into()),
        id: Some(event.object_id.clone()),
        serialization: None,
    });
    if event.user.is_some() || event.proxy_user.is_some() {
        stored.initiated_by = Some(InitiatedBy {
            user: event.user.clone(),
            proxy_user: event.proxy_user.clone(),
        });
    }
    for (key, value) in &event.details {
        if key == "message" {
            stored.message = Some(value.clone());
            continue;
        }
        stored
            .details
            .insert(key.clone(), Value::String(value.clone()));
    }
    stored
}

/// The largest id stored: the last event created's (ids sort in creation order).
fn newest_id(store: &dyn DocumentStore) -> Result<Option<String>, StoreError> {
    Ok(store.last_created(COLLECTION)?.map(|d| d.id))
}

fn run(
    store: Arc<dyn DocumentStore>,
    messages: Receiver<Message>,
    ids: Arc<Mutex<IdSequence>>,
    mut log: EventLog,
    followers: broadcast::Sender<Arc<Event>>,
) {
    while let Ok(first) = messages.recv() {
        let mut group = vec![first];
        let mut count = 0;
        while count < MAX_EVENTS_PER_COMMIT {
            match messages.try_recv() {
                Ok(message) => {
                    count += match &message {
                        Message::Record { events, .. } | Message::Log(events) => events.len(),
                    };
                    group.push(message);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let mut writes = Vec::new();
        for message in &mut group {
            if let Message::Record { events, .. } = message {
                // The lock is shared with the engine thread: hold it for the ids only.
                {
                    let mut ids = ids.lock().unwrap();
                    for event in events.iter_mut() {
                        event.id = ids.next_id();
                    }
                }
                for event in events {
                    event.tenant = event
                        .tenant
                        .take()
                        .or_else(|| inherited_tenant(store.as_ref(), &event.associated_objects));
                    writes.push(insert(event));
                }
            }
        }
        let result = if writes.is_empty() {
            Ok(())
        } else {
            let began = std::time::Instant::now();
            let written = store
                .write(&writes)
                .map(|_| ())
                .map_err(|e| RecordError::Store(e.to_string()));
            COMMIT_SECONDS.observe_duration(began.elapsed());
            written
        };
        let now = Timestamp::now();
        let mut logged = Ok(());
        for message in &group {
            let events = match message {
                Message::Record { events, .. } if result.is_ok() => events,
                Message::Log(events) => events,
                Message::Record { .. } => continue,
            };
            for event in events {
                if logged.is_ok() {
                    logged = log.append(event, now);
                }
                if followers.receiver_count() > 0 {
                    let _ = followers.send(Arc::new(event.clone()));
                }
            }
        }
        if let Err(e) = logged.and_then(|_| log.flush()) {
            // The events are stored; a full disk must not refuse them.
            LOG_WRITE_ERRORS.add(1);
            eprintln!("drover: cannot write the event log: {e}");
        }
        for message in group {
            if let Message::Record { events, answer } = message {
                let _ = answer.send(result.clone().map(|_| events));
            }
        }
    }
}

/// The tenant of the first associated object that has one: VMs and services keep a
/// `tenant` in their stored documents (collections `vms` and `services`).
fn inherited_tenant(store: &dyn DocumentStore, objects: &[ObjectRef]) -> Option<Tenant> {
    objects.iter().find_map(|object| {
        let collection = match object.kind.to_ascii_lowercase().as_str() {
            "vm" => "vms",
            "service" => "services",
            _ => return None,
        };
        let document = store.get(collection, &object.id).ok()??;
        serde_json::from_value(document.body.get("tenant")?.clone()).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Rolling;
    use drover_store::SqliteStore;
    use serde_json::json;

    #[tokio::test]
    async fn ids_are_assigned_tenants_inherited_and_lines_logged() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn DocumentStore> =
            Arc::new(SqliteStore::open(&dir.path().join("db")).unwrap());
        store
            .ensure_collection(&CollectionSpec::new("vms"))
            .unwrap();
        store
            .insert(
                "vms",
                "vm1",
                None,
                json!({"tenant": {"id": "t1", "name": "physics"}}),
            )
            .unwrap();
        let log = LogSettings {
            path: dir.path().join("events.log"),
            rolling: Rolling::Never,
            keep: 0,
            additive: false,
        };
        let (recorder, thread) = EventRecorder::start(store.clone(), log).unwrap();
        let mut event = Event::new(Timestamp::now(), "VM Provision", "INFO");
        event.associated_objects = vec![
            ObjectRef {
                kind: "Service".into(),
                id: "none".into(),
            },
            ObjectRef {
                kind: "VM".into(),
                id: "vm1".into(),
            },
        ];
        let plain = Event::new(Timestamp::now(), "other", "INFO");
        let recorded = recorder.record(vec![event, plain]).await.unwrap();
        assert!(recorded[0].id < recorded[1].id);
        assert_eq!(recorded[0].tenant.as_ref().unwrap().name, "physics");
        assert_eq!(recorded[1].tenant, None);
        let stored = store.get(COLLECTION, &recorded[0].id).unwrap().unwrap();
        assert_eq!(stored.body["tenant"]["id"], "t1");
        drop(recorder);
        thread.join().unwrap();
        let lines = std::fs::read_to_string(dir.path().join("events.log")).unwrap();
        assert_eq!(lines.lines().count(), 2);
    }

    #[tokio::test]
    async fn ids_continue_after_the_last_stored_one_whatever_the_clock() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn DocumentStore> =
            Arc::new(SqliteStore::open(&dir.path().join("db")).unwrap());
        let log = LogSettings {
            path: dir.path().join("events.log"),
            rolling: Rolling::Never,
            keep: 0,
            additive: false,
        };
        let (recorder, thread) = EventRecorder::start(store.clone(), log.clone()).unwrap();
        // As if written before the clock was set back by centuries.
        let mut future = Event::new(Timestamp::now(), "from the future", "INFO");
        future.id = "7fffffffffffffffffffff00".into();
        let future = Body::serialize(&future).unwrap();
        store
            .write(&[Write::Insert {
                collection: COLLECTION.into(),
                id: "7fffffffffffffffffffff00".into(),
                name: None,
                body: future,
            }])
            .unwrap();
        drop(recorder);
        thread.join().unwrap();
        let (recorder, thread) = EventRecorder::start(store.clone(), log).unwrap();
        let recorded = recorder
            .record(vec![Event::new(Timestamp::now(), "next", "INFO")])
            .await
            .unwrap();
        assert_eq!(recorded[0].id, "7fffffffffffffffffffff01");
        drop(recorder);
        thread.join().unwrap();
    }
}
