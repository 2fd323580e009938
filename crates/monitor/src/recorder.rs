//! The event recorder: a thread that gives events their ids, stores them with group
//! commit and writes their log lines.
//!
//! Callers hand it events and (for requests) wait for the answer. The thread takes
//! every request that is waiting, inserts all their events in one store transaction,
//! then appends their lines to `events.log`, and only then answers: an answered event
//! is durable, and a burst of events shares one fsync. Events the scheduler emits come
//! through [`EventSink`] and are not waited for.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};

use drover_domain::dates::Timestamp;
use drover_query::{Direction, ListQuery, Paging, Path, Sort};
use drover_sched::events::{EventSink, SchedEvent};
use drover_store::{CollectionSpec, DocumentStore, StoreError, Write};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::event::{COLLECTION, Event, IdSequence, InitiatedBy, ObjectRef, PrimaryObject, Tenant};
use crate::log::{EventLog, LogSettings};

/// Most events written in one transaction.
const MAX_EVENTS_PER_COMMIT: usize = 8192;

/// The events collection and the queries it answers without scanning: by id, and the
/// newest events, of one severity, type or origin or of all.
pub fn collection_spec() -> CollectionSpec {
    CollectionSpec::new(COLLECTION)
        .index(&["id"])
        .index_newest_first(&["eventDate"])
        .index_newest_first(&["severity", "eventDate"])
        .index_newest_first(&["eventType", "eventDate"])
        .index_newest_first(&["origin", "eventDate"])
}

/// Why events could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("the event recorder is not running")]
    Stopped,
    #[error("{0}")]
    Store(String),
}

struct Request {
    events: Vec<Event>,
    answer: Option<oneshot::Sender<Result<Vec<Event>, RecordError>>>,
}

/// The handle callers hold; cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    inbox: Sender<Request>,
}

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
        let ids = IdSequence::starting_after(newest.as_deref(), Timestamp::now());
        let log = EventLog::open(log.clone())
            .map_err(|e| format!("cannot open the event log {}: {e}", log.path.display()))?;
        let (inbox, requests) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("events".into())
            .spawn(move || run(store, requests, ids, log))
            .map_err(|e| e.to_string())?;
        Ok((Self { inbox }, thread))
    }

    /// Records `events` (ids assigned, tenants inherited) and answers them as stored.
    pub async fn record(&self, events: Vec<Event>) -> Result<Vec<Event>, RecordError> {
        let (answer, answered) = oneshot::channel();
        self.inbox
            .send(Request {
                events,
                answer: Some(answer),
            })
            .map_err(|_| RecordError::Stopped)?;
        answered.await.map_err(|_| RecordError::Stopped)?
    }

    /// Records `event` without waiting.
    pub fn record_later(&self, event: Event) {
        let _ = self.inbox.send(Request {
            events: vec![event],
            answer: None,
        });
    }
}

impl EventSink for EventRecorder {
    fn emit(&self, event: SchedEvent) {
        self.record_later(from_scheduler(&event));
    }
}

/// A scheduler event in the stored form: the version-1 vocabulary (`jobsubmit`,
/// facility `job`), its object as primary and associated object.
pub fn from_scheduler(event: &SchedEvent) -> Event {
    let at = Timestamp::from_second(event.time).unwrap_or_else(|_| Timestamp::now());
    let mut stored = Event::new(at, event.event_type, "INFO");
    stored.origin = Some("scheduler".into());
    stored.facility = Some(event.facility.into());
    stored.event_category = Some(event.facility.into());
    stored.status = Some("success".into());
    stored.arguments = vec![event.object_id.clone()];
    stored.associated_objects = vec![ObjectRef {
        kind: event.facility.into(),
        id: event.object_id.clone(),
    }];
    stored.primary_object = Some(PrimaryObject {
        kind: Some(event.facility.into()),
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
        stored
            .details
            .insert(key.clone(), Value::String(value.clone()));
    }
    stored
}

/// The largest id stored (ids sort in creation order).
fn newest_id(store: &dyn DocumentStore) -> Result<Option<String>, StoreError> {
    let query = ListQuery {
        sort: Sort {
            keys: vec![(
                Path::parse("id", "sort").expect("a valid path"),
                Direction::Descending,
            )],
        },
        paging: Paging {
            offset: 0,
            max: Some(1),
        },
        ..ListQuery::default()
    };
    Ok(store
        .list(COLLECTION, &query)?
        .items
        .into_iter()
        .next()
        .map(|d| d.id))
}

fn run(
    store: Arc<dyn DocumentStore>,
    requests: Receiver<Request>,
    mut ids: IdSequence,
    mut log: EventLog,
) {
    while let Ok(first) = requests.recv() {
        let mut group = vec![first];
        let mut count = group[0].events.len();
        while count < MAX_EVENTS_PER_COMMIT {
            match requests.try_recv() {
                Ok(request) => {
                    count += request.events.len();
                    group.push(request);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let mut writes = Vec::with_capacity(count);
        for request in &mut group {
            for event in &mut request.events {
                event.id = ids.next_id();
                event.tenant = event
                    .tenant
                    .take()
                    .or_else(|| inherited_tenant(store.as_ref(), &event.associated_objects));
                writes.push(Write::Insert {
                    collection: COLLECTION.into(),
                    id: event.id.clone(),
                    name: None,
                    body: event.to_document(),
                });
            }
        }
        let result = store
            .write(&writes)
            .map(|_| ())
            .map_err(|e| RecordError::Store(e.to_string()));
        if result.is_ok() {
            let now = Timestamp::now();
            let logged = group
                .iter()
                .flat_map(|r| &r.events)
                .try_for_each(|event| log.append(event, now))
                .and_then(|_| log.flush());
            if let Err(e) = logged {
                // The events are stored; a full disk must not refuse them.
                eprintln!("drover: cannot write the event log: {e}");
            }
        }
        for request in group {
            if let Some(answer) = request.answer {
                let _ = answer.send(result.clone().map(|_| request.events));
            } else if let Err(e) = &result {
                eprintln!("drover: a scheduler event was not stored: {e}");
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
}
