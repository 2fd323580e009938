//! The stored services (spec 2.11, 4.10): documents of the collection [`SERVICES`], one
//! per service of every tree a creation made, each under an id the service assigns, with
//! a unique name `<name>.<n>`. [`ServiceRecords`] is the only code that reads or writes
//! them; the service controller (`drover_control::services`) moves them through their
//! phases, the interface creates, changes and marks them for teardown.
//!
//! The `<n>` of names comes from a counter stored beside them and written in the same
//! batch as the services it numbers, so that a name once given is never given again,
//! even after the service went and the server restarted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover_domain::dates::{self, Timestamp};
use drover_domain::service::{ExpandedService, Service, ServicePhase};
use drover_domain::service_template::ServiceTemplate;
use drover_query::{ListQuery, Page};
use drover_store::{CollectionSpec, DocumentStore, Write};
use serde_json::{Map, Value, json};

use crate::catalog::{Catalog, Stored};
use crate::images::{CloudError, Result};

pub const SERVICES: &str = "services";
/// One document, [`COUNTER_ID`]: `{"next": n}`, the `<n>` of the next name.
const NAMES: &str = "service_names";
const COUNTER_ID: &str = "counter";

/// A service with the id and version the store keeps.
pub type StoredService = Stored<Service>;

/// Who asks for a creation and when the tree runs.
#[derive(Debug, Clone)]
pub struct NewServices {
    pub user: String,
    pub account: Option<String>,
    pub created_by: String,
    pub start_requested: Option<String>,
    /// Epoch seconds: when setup may begin (never before the creation).
    pub starts_at: i64,
    pub duration: Option<i64>,
    /// The most services the user may have, these included (`None`: no limit, an
    /// administrator's creation); checked as they are written.
    pub limit: Option<usize>,
}

/// How long the services read last stand for the store's, when nothing here wrote
/// them meanwhile: a write by another server sharing the store (a former lease holder)
/// is seen within this time, and a write on stale versions is refused and read again.
const READ_LIFE: Duration = Duration::from_secs(10);

/// The service of the stored services. Blocking.
pub struct ServiceRecords {
    catalog: Catalog,
    /// Counts the writes made here: what was read before one is not kept.
    writes: AtomicU64,
    /// Every service as last read (the controller asks twice a second, the interface
    /// on each list): a read of the store only after a write, or after [`READ_LIFE`].
    last_read: Mutex<Option<LastRead>>,
}

struct LastRead {
    writes: u64,
    at: Instant,
    services: Vec<StoredService>,
}

impl ServiceRecords {
    pub fn open(store: Arc<dyn DocumentStore>) -> Result<Self> {
        store.ensure_collection(&CollectionSpec::new(NAMES))?;
        Ok(Self {
            catalog: Catalog::open(store, SERVICES, "service")?,
            writes: AtomicU64::new(0),
            last_read: Mutex::new(None),
        })
    }

    /// Writes `writes` (refused as the catalog refuses) and forgets what was read.
    fn commit(&self, writes: &[Write], summary: &str, name: &str) -> Result<()> {
        let written = self.catalog.commit(writes, summary, name);
        self.writes.fetch_add(1, Ordering::AcqRel);
        written
    }

    pub fn list(&self, query: &ListQuery) -> Result<Page<StoredService>> {
        self.catalog.list(query)
    }

    /// Every service, oldest first.
    pub fn all(&self) -> Result<Vec<StoredService>> {
        let writes = self.writes.load(Ordering::Acquire);
        let mut last = self.last_read.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(read) = last.as_ref()
            && read.writes == writes
            && read.at.elapsed() < READ_LIFE
        {
            return Ok(read.services.clone());
        }
        let services: Vec<StoredService> = self.catalog.all()?;
        // Kept only if no write here came between: a read that began before a commit
        // may not show it.
        if self.writes.load(Ordering::Acquire) == writes {
            *last = Some(LastRead {
                writes,
                at: Instant::now(),
                services: services.clone(),
            });
        }
        Ok(services)
    }

    /// The service whose id, else name, is `key`.
    pub fn get(&self, key: &str) -> Result<StoredService> {
        self.catalog.get(key)
    }

    /// Stores the services of `planned` (the top-level one first) as one tree, named
    /// `<base>.<n>`; answers the stored top-level service.
    pub fn create(&self, planned: &[ExpandedService], new: &NewServices) -> Result<StoredService> {
        let summary = "The service was not created";
        let mut ids = self.catalog.lock();
        // Counted under the lock the services are written with: creations at once do
        // not each see the count before the others.
        if let Some(limit) = new.limit {
            let have = self.count_of(&new.user)?;
            if have + planned.len() > limit {
                return Err(CloudError::Invalid {
                    summary: summary.into(),
                    reasons: vec![
                        format!(
                            "{} has {have} services; these {} would pass the {limit} an \
                             ordinary user may have ([scheduler.limits] \
                             user_service_max_count)",
                            new.user,
                            planned.len()
                        ),
                        "delete services you no longer need".into(),
                    ],
                });
            }
        }
        let counter = self.catalog.store.get(NAMES, COUNTER_ID)?;
        let first = counter
            .as_ref()
            .and_then(|d| d.body.get("next"))
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let names: Vec<String> = planned
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}.{}", p.base, first + i as i64))
            .collect();
        let now_seconds = Timestamp::now().as_second();
        let now = dates::format_utc(Timestamp::now());
        let starts_at = new.starts_at.max(now_seconds);
        let scheduled = Timestamp::from_second(starts_at)
            .map(dates::format_utc)
            .unwrap_or_else(|_| now.clone());
        let mut writes = Vec::new();
        let mut top = String::new();
        for (i, p) in planned.iter().enumerate() {
            let mut attributes = p.attributes.clone();
            if !p.dependencies.is_empty() {
                let dependencies: Vec<Value> = p
                    .dependencies
                    .iter()
                    .map(|(service, on)| {
                        json!({"service": names[*service],
                               "dependency": on.iter().map(|o| &names[*o]).collect::<Vec<_>>()})
                    })
                    .collect();
                sched_of(&mut attributes).insert("dependencies".into(), dependencies.into());
            }
            if let Some(vm) = p.storage_of {
                let job = sched_of(&mut attributes)
                    .entry("job")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(job) = job.as_object_mut() {
                    job.insert("vmService".into(), names[vm].clone().into());
                }
            }
            let mut service = Service {
                name: names[i].clone(),
                date_created: now.clone(),
                last_updated: now.clone(),
                kind: p.kind,
                label: p.label.clone(),
                user: new.user.clone(),
                account: new.account.clone(),
                start_date_requested: new.start_requested.clone(),
                start_date_scheduled: Some(scheduled.clone()),
                duration_requested: new.duration,
                status: String::new(),
                status_code: 0,
                included_services: p.children.iter().map(|c| names[*c].clone()).collect(),
                parent: p.parent.map(|parent| names[parent].clone()),
                service_template: p.template.clone(),
                attributes,
                phase: ServicePhase::Pending,
                top_level: names[0].clone(),
                created_by: new.created_by.clone(),
                starts_at,
                ends_at: new.duration.map(|d| starts_at.saturating_add(d)),
                remove_when_down: false,
                made_by_administrator: new.limit.is_none(),
                template_defined: p.template_defined,
            };
            service.enter(ServicePhase::Pending, None);
            let id = ids.next_id();
            if i == 0 {
                top = id.clone();
            }
            writes.push(self.catalog.put(&id, &service.name, &service, None));
        }
        let next = json!({"next": first + planned.len() as i64});
        writes.push(match counter {
            None => Write::Insert {
                collection: NAMES.into(),
                id: COUNTER_ID.into(),
                name: None,
                body: next.into(),
            },
            Some(counter) => Write::Update {
                collection: NAMES.into(),
                id: COUNTER_ID.into(),
                name: None,
                body: next.into(),
                expected_version: Some(counter.version),
            },
        });
        self.commit(&writes, summary, &names[0])?;
        drop(ids);
        self.get(&top)
    }

    /// Applies `change` to the service `key` and stores it (its `lastUpdated` now);
    /// answers it as stored. `change` refuses by answering an error.
    pub fn update(
        &self,
        key: &str,
        change: impl FnOnce(&mut Service) -> Result<()>,
    ) -> Result<StoredService> {
        let summary = format!("The service {key} was not changed");
        let _writes = self.catalog.lock();
        let mut current: StoredService = self.get(key)?;
        change(&mut current.value)?;
        current.value.last_updated = dates::format_utc(Timestamp::now());
        let write = self.catalog.put(
            &current.id,
            &current.value.name,
            &current.value,
            Some(current.version),
        );
        self.commit(&[write], &summary, &current.value.name)?;
        self.get(&current.id)
    }

    /// Deletes the service `id` (once torn down), and takes its name out of its
    /// container's `includedServices`.
    pub fn remove(&self, id: &str) -> Result<()> {
        let _writes = self.catalog.lock();
        let Some(current) = self.catalog.find::<Service>(id)? else {
            return Ok(());
        };
        let mut writes = vec![Write::Delete {
            collection: SERVICES.into(),
            id: current.id.clone(),
            expected_version: Some(current.version),
        }];
        if let Some(parent) = &current.value.parent
            && let Some(mut parent) = self.catalog.find::<Service>(parent)?
        {
            parent
                .value
                .included_services
                .retain(|n| n != &current.value.name);
            writes.push(self.catalog.put(
                &parent.id,
                &parent.value.name,
                &parent.value,
                Some(parent.version),
            ));
        }
        self.commit(&writes, "The service was not removed", &current.value.name)
    }

    /// Marks the service `key` and every service under it for teardown (`remove`: their
    /// records go once torn down); answers their names.
    pub fn tear_down(&self, key: &str, remove: bool, why: &str) -> Result<Vec<String>> {
        let _writes = self.catalog.lock();
        let all = self.all()?;
        let root = self.get(key)?;
        let mut names = vec![root.value.name.clone()];
        let mut writes = Vec::new();
        let mut marked = Vec::new();
        let now = dates::format_utc(Timestamp::now());
        while let Some(name) = names.pop() {
            let Some(stored) = all.iter().find(|s| s.value.name == name) else {
                continue;
            };
            names.extend(stored.value.included_services.iter().cloned());
            let mut service = stored.value.clone();
            if service.phase != ServicePhase::TearingDown {
                service.enter(ServicePhase::TearingDown, Some(why));
            }
            service.remove_when_down |= remove;
            service.last_updated = now.clone();
            writes.push(self.catalog.put(
                &stored.id,
                &service.name,
                &service,
                Some(stored.version),
            ));
            marked.push(service.name);
        }
        // A deleted service is gone from the interface at once, its container's
        // `includedServices` too; its teardown goes on out of sight.
        if remove
            && let Some(parent) = &root.value.parent
            && let Some(parent) = all.iter().find(|s| &s.value.name == parent)
            && parent.value.included_services.contains(&root.value.name)
        {
            let mut changed = parent.value.clone();
            changed.included_services.retain(|n| n != &root.value.name);
            changed.last_updated = now.clone();
            writes.push(self.catalog.put(
                &parent.id,
                &changed.name,
                &changed,
                Some(parent.version),
            ));
        }
        self.commit(
            &writes,
            &format!("The service {key} was not torn down"),
            &root.value.name,
        )?;
        Ok(marked)
    }

    /// The services that wait for `service` (in its container's dependencies) and are not
    /// going themselves.
    pub fn dependents(&self, service: &Service) -> Result<Vec<String>> {
        let all = self.all()?;
        let Some(parent) = all
            .iter()
            .find(|s| Some(&s.value.name) == service.parent.as_ref())
        else {
            return Ok(Vec::new());
        };
        Ok(all
            .iter()
            .filter(|s| s.value.parent == service.parent)
            .filter(|s| {
                !matches!(
                    s.value.phase,
                    ServicePhase::TearingDown | ServicePhase::Ended
                )
            })
            .filter(|s| {
                s.value
                    .waits_for(&parent.value)
                    .contains(&service.name.as_str())
            })
            .map(|s| s.value.name.clone())
            .collect())
    }

    /// How many services `user` has.
    pub fn count_of(&self, user: &str) -> Result<usize> {
        Ok(self.all()?.iter().filter(|s| s.value.user == user).count())
    }

    /// The services made from `template` (by id), as a phrase, if any.
    pub fn made_from(&self, template: &Stored<ServiceTemplate>) -> Result<Option<String>> {
        let names: Vec<String> = self
            .all()?
            .into_iter()
            .filter(|s| {
                s.value
                    .service_template
                    .as_ref()
                    .is_some_and(|t| t.id == template.id)
            })
            .map(|s| format!("'{}'", s.value.name))
            .collect();
        Ok((!names.is_empty()).then(|| format!("the services {}", names.join(", "))))
    }
}

fn sched_of(attributes: &mut Map<String, Value>) -> &mut Map<String, Value> {
    if !attributes.get("sched").is_some_and(Value::is_object) {
        attributes.insert("sched".into(), Value::Object(Map::new()));
    }
    attributes
        .get_mut("sched")
        .and_then(Value::as_object_mut)
        .expect("sched was just made an object")
}

#[cfg(test)]
mod tests {
    use drover_domain::service_template::ServiceType;
    use drover_store::SqliteStore;

    use super::*;

    fn new_services() -> NewServices {
        NewServices {
            user: "bob".into(),
            account: None,
            created_by: "bob".into(),
            start_requested: None,
            starts_at: 0,
            duration: None,
            limit: None,
        }
    }

    fn one(base: &str) -> ExpandedService {
        ExpandedService::of_type(base, ServiceType::Container)
    }

    /// The services read last are answered again only until a write here: every read
    /// after a write shows it.
    #[test]
    fn a_read_after_a_write_shows_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("d.db")).unwrap());
        let records = ServiceRecords::open(store).unwrap();
        assert!(records.all().unwrap().is_empty());
        let made = records.create(&[one("a")], &new_services()).unwrap();
        assert_eq!(records.all().unwrap().len(), 1);
        assert_eq!(records.all().unwrap(), records.all().unwrap());
        records
            .update(&made.id, |s| {
                s.status = "changed".into();
                Ok(())
            })
            .unwrap();
        assert_eq!(records.all().unwrap()[0].value.status, "changed");
        records.tear_down(&made.id, true, "deleted").unwrap();
        assert!(records.all().unwrap()[0].value.remove_when_down);
        records.remove(&made.id).unwrap();
        assert!(records.all().unwrap().is_empty());
    }
}
