//! The wire shapes of a stored event: version 3 (spec 6.2) and version 1 (6.1).

use drover_domain::dates::{self, WireDates};
use drover_monitor::Event;
use serde_json::{Value, json};

/// The version-3 shape (spec 6.2); `version` is the stored document's version.
pub fn v3(event: &Event, version: i64) -> Value {
    json!({
        "id": event.id,
        "arguments": event.arguments,
        "associatedObjects": event.associated_objects,
        "tenant": event.tenant,
        "code": event.code,
        "eventDate": event.event_date,
        "eventType": event.event_type,
        "message": event.message,
        "origin": event.origin,
        "severity": event.severity,
        "version": version,
    })
}

/// The version-1 shape (spec 6.1), dates in the deployment's zone.
pub fn v1(event: &Event, dates: &WireDates) -> Value {
    let event_time = dates::parse_utc(&event.event_date)
        .map(|t| dates.format(t, 1))
        .unwrap_or_else(|| event.event_date.clone());
    let error_message = match &event.error_message {
        Some(error) => json!({
            "errorCode": error.error_code,
            "message": event.message,
            "originator": error.originator,
        }),
        None => Value::Null,
    };
    json!({
        "id": event.id,
        "eventTime": event_time,
        "eventType": event.event_type,
        "eventCategory": event.event_category,
        "facility": event.facility,
        "sourceComponent": event.origin,
        "status": event.status,
        "details": event.details,
        "errorMessage": error_message,
        "initiatedBy": event.initiated_by,
        "primaryObject": event.primary_object,
        "relatedObjects": event.associated_objects,
    })
}

#[cfg(test)]
mod tests {
    use drover_domain::dates::Timestamp;
    use drover_monitor::event::{ObjectRef, V1_RENAMES};

    use super::*;

    fn at(s: &str) -> Timestamp {
        dates::parse_utc(s).unwrap()
    }

    #[test]
    fn a_version_3_event_reads_in_version_1_with_the_old_names() {
        let mut event = Event::new(at("2026-11-22 10:00:00 UTC"), "VM Provision", "ERROR");
        event.id = "1".into();
        event.origin = Some("plugin".into());
        event.message = Some("disk full".into());
        event.code = 42;
        event.associated_objects = vec![ObjectRef {
            kind: "VM".into(),
            id: "vm1".into(),
        }];
        event.derive_v1_fields();
        let v1 = v1(&event, &WireDates::utc());
        assert_eq!(v1["eventTime"], "2026-11-22 10:00:00 UTC");
        assert_eq!(v1["sourceComponent"], "plugin");
        assert_eq!(v1["status"], "failure");
        assert_eq!(v1["errorMessage"]["message"], "disk full");
        assert_eq!(v1["errorMessage"]["errorCode"], "42");
        assert_eq!(v1["relatedObjects"][0]["id"], "vm1");
        let v3 = v3(&event, 1);
        // No version-1 name shows in version 3.
        for (old, _) in V1_RENAMES {
            let old = old.split('.').next().unwrap_or(old);
            assert!(v3.get(old).is_none(), "{old} in {v3}");
        }
        assert_eq!(v3["eventDate"], "2026-11-22 10:00:00 UTC");
    }
}
