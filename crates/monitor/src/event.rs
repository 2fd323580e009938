//! The one stored form of an event (its two wire shapes are `drover_api::wire::events`).
//!
//! Events arrive in two vocabularies: version 1 (XML, spec 6.1: `eventTime`,
//! `sourceComponent`, `errorMessage.message`, `relatedObjects`, plus `eventCategory`,
//! `facility`, `status`, `details`, `initiatedBy`, `primaryObject`) and version 3 (JSON,
//! spec 6.2). The store keeps one document per event under the version-3 names, with the
//! version-1-only fields beside them, so that a list query runs in the store whatever
//! version asked: [`V1_RENAMES`] translates a version-1 query's paths first.
//!
//! Each version fills in what the other needs: a version-1 event gets a `severity`
//! (`ERROR` when its status is `failure`, else `INFO`) and a `code` (its error code when
//! that is a number, else 0); a version-3 event shows a `status` derived from its
//! severity when read as version 1.

use drover_domain::dates::{self, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The store collection of events.
pub const COLLECTION: &str = "events";

/// Version-1 field paths and the stored paths they name (spec 6.2's renames).
pub const V1_RENAMES: &[(&str, &str)] = &[
    ("eventTime", "eventDate"),
    ("sourceComponent", "origin"),
    ("errorMessage.message", "message"),
    ("relatedObjects", "associatedObjects"),
];

/// Severities an event may have (spec 6.2 shows `INFO`, `WARN`, `ERROR`).
pub const SEVERITIES: &[&str] = &["DEBUG", "INFO", "WARN", "ERROR", "FATAL"];

/// An object an event is about: `{type, id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
}

/// The tenant of an event, inherited from its associated objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    pub id: String,
    pub name: String,
}

/// Version 1's `initiatedBy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitiatedBy {
    pub user: Option<String>,
    pub proxy_user: Option<String>,
}

/// Version 1's `primaryObject`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrimaryObject {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub id: Option<String>,
    pub serialization: Option<String>,
}

/// Version 1's `errorMessage`, less its `message` (stored as the event's `message`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorSource {
    pub error_code: Option<String>,
    pub originator: Option<String>,
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub id: String,
    /// UTC wire date (`yyyy-MM-dd HH:mm:ss UTC`).
    pub event_date: String,
    pub event_type: String,
    pub severity: String,
    pub code: i64,
    pub origin: Option<String>,
    pub message: Option<String>,
    #[serde(default)]
    pub arguments: Vec<String>,
    #[serde(default)]
    pub associated_objects: Vec<ObjectRef>,
    pub tenant: Option<Tenant>,
    // Version-1 fields.
    pub event_category: Option<String>,
    pub facility: Option<String>,
    /// `success` or `failure`; `None` for events created through version 3.
    pub status: Option<String>,
    #[serde(default)]
    pub details: Map<String, Value>,
    pub error_message: Option<ErrorSource>,
    pub initiated_by: Option<InitiatedBy>,
    pub primary_object: Option<PrimaryObject>,
}

impl Event {
    /// A new event at `date` with only the required fields (the id is assigned when it
    /// is recorded).
    pub fn new(date: Timestamp, event_type: impl Into<String>, severity: &str) -> Self {
        Self {
            id: String::new(),
            event_date: dates::format_utc(date),
            event_type: event_type.into(),
            severity: severity.to_string(),
            code: 0,
            origin: None,
            message: None,
            arguments: Vec::new(),
            associated_objects: Vec::new(),
            tenant: None,
            event_category: None,
            facility: None,
            status: None,
            details: Map::new(),
            error_message: None,
            initiated_by: None,
            primary_object: None,
        }
    }

    /// Fills the version-1 fields a version-3 event lacks (`status` from the severity,
    /// `errorMessage` from code and origin), so that version-1 queries see what version-1
    /// reads show. The recorder calls it on every event it stores.
    pub fn derive_v1_fields(&mut self) {
        if self.status.is_none() {
            let failed = matches!(self.severity.as_str(), "ERROR" | "FATAL");
            self.status = Some(if failed { "failure" } else { "success" }.into());
        }
        if self.error_message.is_none() && (self.message.is_some() || self.code != 0) {
            self.error_message = Some(ErrorSource {
                error_code: (self.code != 0).then(|| self.code.to_string()),
                originator: self.origin.clone(),
            });
        }
    }

    /// Reads a stored document back (`None` for a body this version cannot read).
    pub fn from_document(body: Value) -> Option<Self> {
        serde_json::from_value(body).ok()
    }
}

/// The severity of a version-1 status.
pub fn severity_of_status(status: &str) -> &'static str {
    if status == "failure" { "ERROR" } else { "INFO" }
}
