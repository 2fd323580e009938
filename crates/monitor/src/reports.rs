//! Reports in the store: each report is one document holding its datapoints; samples
//! are documents of their own, kept while their period is open (or always, with
//! `keepSamples`). Changes to reports are serialised by one lock, so a sample's fold
//! and its report's write cannot interleave with another's.

use std::sync::{Arc, Mutex};

use drover_domain::dates::{self, Timestamp, WireDates};
use drover_query::{Filter, ListQuery, Page, Paging};
use drover_store::{CollectionSpec, Document, DocumentStore, StoreError, Write};
use serde_json::{Map, Value, json};

use crate::report::{Folded, History, REPORTS, Report, SAMPLES};
use drover_domain::ids::IdSequence;

/// Why a report operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("no report '{0}'")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Store(String),
}

impl From<StoreError> for ReportError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(m) => ReportError::Conflict(m),
            StoreError::Invalid(m) => ReportError::Invalid(m),
            other => ReportError::Store(other.to_string()),
        }
    }
}

/// One sample to add: when it was taken (seconds) and its data.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at: i64,
    pub data: Map<String, Value>,
}

/// What adding samples did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Added {
    /// The report's id.
    pub report: String,
    pub folded: usize,
    pub dropped: usize,
}

pub struct Reports {
    store: Arc<dyn DocumentStore>,
    /// Serialises changes; also hands out report and sample ids.
    ids: Mutex<IdSequence>,
}

impl Reports {
    pub fn open(store: Arc<dyn DocumentStore>) -> Result<Self, StoreError> {
        store.ensure_collection(&CollectionSpec::new(REPORTS).index(&["name"]))?;
        store.ensure_collection(
            &CollectionSpec::new(SAMPLES)
                .index(&["report", "timestamp"])
                .index(&["report", "periodEnd"])
                // Retention removes the oldest kept samples of every report.
                .index(&["timestamp"]),
        )?;
        Ok(Self {
            store,
            ids: Mutex::new(IdSequence::starting_after(None, Timestamp::now())),
        })
    }

    /// Stores a new report (its `id` is assigned) with its historical datapoints.
    pub fn create(&self, mut report: Report, history: Vec<History>) -> Result<Report, ReportError> {
        let mut ids = self.ids.lock().unwrap();
        if self.store.get_by_name(REPORTS, &report.name)?.is_some() {
            return Err(ReportError::Conflict(format!(
                "a report named '{}' exists already",
                report.name
            )));
        }
        report.id = ids.next_id();
        report.add_history(history).map_err(ReportError::Invalid)?;
        self.store
            .insert(REPORTS, &report.id, Some(&report.name), to_body(&report))?;
        Ok(report)
    }

    /// The report with this id or name.
    pub fn find(&self, key: &str) -> Result<Report, ReportError> {
        self.find_document(key).map(|(report, _)| report)
    }

    fn find_document(&self, key: &str) -> Result<(Report, i64), ReportError> {
        let document = match self.store.get(REPORTS, key)? {
            Some(d) => d,
            None => self
                .store
                .get_by_name(REPORTS, key)?
                .ok_or_else(|| ReportError::NotFound(key.to_string()))?,
        };
        let version = document.version;
        let report = serde_json::from_value(document.body)
            .map_err(|e| ReportError::Store(format!("report '{key}' cannot be read: {e}")))?;
        Ok((report, version))
    }

    /// The reports matching `query` (filter, sort and paging run in the store).
    pub fn list(&self, query: &ListQuery) -> Result<Page<Report>, ReportError> {
        let page = self.store.list(REPORTS, query)?;
        Ok(Page {
            total: page.total,
            items: page
                .items
                .into_iter()
                .filter_map(|d| serde_json::from_value(d.body).ok())
                .collect(),
        })
    }

    pub fn delete(&self, key: &str) -> Result<Report, ReportError> {
        let _ids = self.ids.lock().unwrap();
        let (report, version) = self.find_document(key)?;
        let mut writes = vec![Write::Delete {
            collection: REPORTS.into(),
            id: report.id.clone(),
            expected_version: Some(version),
        }];
        writes.extend(self.sample_deletes(&report.id, None)?);
        self.store.write(&writes)?;
        Ok(report)
    }

    /// Folds `samples` into the report's datapoints and keeps those that stay readable;
    /// samples whose period has ended by `now` are discarded unless the report keeps them.
    pub fn add_samples(
        &self,
        key: &str,
        samples: &[Sample],
        now: i64,
    ) -> Result<Added, ReportError> {
        let mut ids = self.ids.lock().unwrap();
        let (mut report, version) = self.find_document(key)?;
        let mut added = Added {
            report: report.id.clone(),
            ..Added::default()
        };
        let mut writes = Vec::new();
        for sample in samples {
            match report.fold(sample.at, &sample.data) {
                Folded::Into(_) => added.folded += 1,
                Folded::TooOld => added.dropped += 1,
            }
            let period_end = report.period_of(sample.at) + report.datapoint_duration;
            if report.keep_samples || period_end > now {
                let at = Timestamp::from_second(sample.at)
                    .map_err(|e| ReportError::Invalid(e.to_string()))?;
                writes.push(Write::Insert {
                    collection: SAMPLES.into(),
                    id: ids.next_id(),
                    name: None,
                    body: json!({
                        "report": report.id,
                        "timestamp": dates::format_utc(at),
                        "periodEnd": period_end,
                        "data": sample.data,
                    })
                    .into(),
                });
            }
        }
        if !report.keep_samples {
            writes.extend(self.sample_deletes(&report.id, Some(now))?);
        }
        writes.insert(
            0,
            Write::Update {
                collection: REPORTS.into(),
                id: report.id.clone(),
                name: Some(report.name.clone()),
                body: to_body(&report).into(),
                expected_version: Some(version),
            },
        );
        self.store.write(&writes)?;
        Ok(added)
    }

    /// The report's readable samples matching `query` (dates in the query compare as
    /// instants), as stored: `timestamp` (UTC) and `data`.
    pub fn samples(
        &self,
        key: &str,
        query: &ListQuery,
        now: i64,
    ) -> Result<Page<Document>, ReportError> {
        let report = {
            let _ids = self.ids.lock().unwrap();
            let (report, _) = self.find_document(key)?;
            if !report.keep_samples {
                let stale = self.sample_deletes(&report.id, Some(now))?;
                if !stale.is_empty() {
                    self.store.write(&stale)?;
                }
            }
            report
        };
        let mut scoped = query.clone();
        scoped.filter = Filter::And(vec![of_report(&report.id), query.filter.clone()]);
        Ok(self.store.list(SAMPLES, &scoped)?)
    }

    /// Deletions of the report's stored samples; with `ended_by`, only of those whose
    /// period had ended by then.
    fn sample_deletes(
        &self,
        report: &str,
        ended_by: Option<i64>,
    ) -> Result<Vec<Write>, ReportError> {
        let mut filter = vec![of_report(report)];
        if let Some(now) = ended_by {
            filter.push(
                Filter::parse(&json!({"periodEnd": {"$lte": now}}), &WireDates::utc())
                    .expect("a valid filter"),
            );
        }
        let query = ListQuery {
            filter: Filter::And(filter),
            paging: Paging::default(),
            ..ListQuery::default()
        };
        Ok(self
            .store
            .list(SAMPLES, &query)?
            .items
            .into_iter()
            .map(|d| Write::Delete {
                collection: SAMPLES.into(),
                id: d.id,
                expected_version: None,
            })
            .collect())
    }
}

fn of_report(id: &str) -> Filter {
    Filter::parse(&json!({ "report": id }), &WireDates::utc()).expect("a valid filter")
}

fn to_body(report: &Report) -> Value {
    serde_json::to_value(report).expect("a report serializes")
}
