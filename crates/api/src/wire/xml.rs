//! Version-1 event creation: the XML body of spec 6.1.
//!
//! ```xml
//! <Events>
//!   <Event eventTime="2026-11-22T10:00:00-05:00" eventType="jobstart" eventCategory="start"
//!          sourceComponent="moab" status="success" facility="job">
//!     <InitiatedBy user="alice" proxyUser="bob"/>
//!     <PrimaryObject objectType="job" objectID="Drover.1"><Serialization>..</Serialization></PrimaryObject>
//!     <RelatedObjects><RelatedObject objectType="node" objectID="n1"/></RelatedObjects>
//!     <Details><Detail name="queue">batch</Detail></Details>
//!     <ErrorMessage errorCode="12" originator="rm">text</ErrorMessage>
//!   </Event>
//! </Events>
//! ```
//!
//! The whole body is read before anything is stored: one problem anywhere refuses every
//! event of the request. A document type declaration is refused (no entity expansion).
//! Unknown child elements are ignored, so that a newer client's extra data does not cost
//! it its events.

use drover_domain::dates::Timestamp;
use roxmltree::{Document, Node};
use serde_json::Value;

use drover_monitor::event::{
    ErrorSource, Event, InitiatedBy, ObjectRef, PrimaryObject, severity_of_status,
};

const REQUIRED: &[&str] = &[
    "eventTime",
    "eventType",
    "eventCategory",
    "sourceComponent",
    "status",
    "facility",
];

/// Parses the body; on failure answers every problem found, each naming where it is.
pub fn parse_events(text: &str) -> Result<Vec<Event>, Vec<String>> {
    let document =
        Document::parse(text).map_err(|e| vec![format!("the body is not well-formed XML: {e}")])?;
    let root = document.root_element();
    let elements: Vec<Node> = match root.tag_name().name() {
        "Events" => root.children().filter(Node::is_element).collect(),
        "Event" => vec![root],
        other => {
            return Err(vec![format!(
                "the root element must be <Events> (or a single <Event>), not <{other}>"
            )]);
        }
    };
    let mut problems = Vec::new();
    let mut events = Vec::new();
    let mut position = 0;
    for element in elements {
        if element.tag_name().name() != "Event" {
            problems.push(format!(
                "<Events> may only hold <Event> elements, found <{}>",
                element.tag_name().name()
            ));
            continue;
        }
        position += 1;
        match parse_event(element) {
            Ok(event) => events.push(event),
            Err(found) => {
                problems.extend(found.into_iter().map(|p| format!("event {position}: {p}")))
            }
        }
    }
    if events.is_empty() && problems.is_empty() {
        problems.push("the body holds no <Event>".into());
    }
    if problems.is_empty() {
        Ok(events)
    } else {
        Err(problems)
    }
}

fn parse_event(element: Node) -> Result<Event, Vec<String>> {
    let mut problems = Vec::new();
    for name in REQUIRED {
        match element.attribute(*name) {
            None => problems.push(format!("the attribute {name} is missing")),
            Some(v) if v.trim().is_empty() => {
                problems.push(format!("the attribute {name} is empty"))
            }
            Some(_) => {}
        }
    }
    let attribute = |name: &str| element.attribute(name).unwrap_or("").to_string();
    let date = match element.attribute("eventTime") {
        Some(text) if !text.trim().is_empty() => match parse_iso_time(text) {
            Some(t) => Some(t),
            None => {
                problems.push(format!(
                    "eventTime '{text}' is not an ISO 8601 date and time with an offset, such as 2026-11-22T10:00:00-05:00"
                ));
                None
            }
        },
        _ => None,
    };
    let status = attribute("status").to_ascii_lowercase();
    if !status.is_empty() && status != "success" && status != "failure" {
        problems.push(format!(
            "status must be success or failure, not '{}'",
            attribute("status")
        ));
    }
    let Some(date) = date.filter(|_| problems.is_empty()) else {
        return Err(problems);
    };
    let mut event = Event::new(date, attribute("eventType"), severity_of_status(&status));
    event.event_category = Some(attribute("eventCategory"));
    event.facility = Some(attribute("facility"));
    event.origin = Some(attribute("sourceComponent"));
    event.status = Some(status);
    for child in element.children().filter(Node::is_element) {
        match child.tag_name().name() {
            "InitiatedBy" => {
                event.initiated_by = Some(InitiatedBy {
                    user: child.attribute("user").map(str::to_string),
                    proxy_user: child.attribute("proxyUser").map(str::to_string),
                })
            }
            "PrimaryObject" => {
                event.primary_object = Some(PrimaryObject {
                    kind: child.attribute("objectType").map(str::to_string),
                    id: child.attribute("objectID").map(str::to_string),
                    serialization: child
                        .children()
                        .find(|n| n.has_tag_name("Serialization"))
                        .map(text_of),
                })
            }
            "RelatedObjects" => {
                for related in child.children().filter(|n| n.has_tag_name("RelatedObject")) {
                    match (
                        related.attribute("objectType"),
                        related.attribute("objectID"),
                    ) {
                        (Some(kind), Some(id)) => event.associated_objects.push(ObjectRef {
                            kind: kind.into(),
                            id: id.into(),
                        }),
                        _ => problems.push(
                            "a <RelatedObject> needs both objectType and objectID".to_string(),
                        ),
                    }
                }
            }
            "Details" => {
                for detail in child.children().filter(|n| n.has_tag_name("Detail")) {
                    match detail.attribute("name") {
                        Some(name) => {
                            event
                                .details
                                .insert(name.into(), Value::String(text_of(detail)));
                        }
                        None => problems.push("a <Detail> needs a name attribute".to_string()),
                    }
                }
            }
            "ErrorMessage" | "Error" => {
                let code = child.attribute("errorCode").map(str::to_string);
                event.code = code
                    .as_deref()
                    .and_then(|c| c.trim().parse().ok())
                    .unwrap_or(0);
                let text = child
                    .attribute("message")
                    .map(str::to_string)
                    .unwrap_or_else(|| text_of(child));
                event.message = (!text.is_empty()).then_some(text);
                event.error_message = Some(ErrorSource {
                    error_code: code,
                    originator: child.attribute("originator").map(str::to_string),
                });
            }
            _ => {}
        }
    }
    if problems.is_empty() {
        Ok(event)
    } else {
        Err(problems)
    }
}

/// The character data of an element (its text and CDATA children), trimmed.
fn text_of(node: Node) -> String {
    node.children()
        .filter(Node::is_text)
        .filter_map(|n| n.text())
        .collect::<String>()
        .trim()
        .to_string()
}

/// An ISO 8601 date and time with an offset (`Z` or `±hh:mm`), seconds and fractions
/// optional in the fraction only.
pub fn parse_iso_time(text: &str) -> Option<Timestamp> {
    text.trim().parse::<Timestamp>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"<Events>
      <Event eventTime="2026-11-22T10:00:00-05:00" eventType="jobstart" eventCategory="start"
             sourceComponent="moab" status="success" facility="job">
        <InitiatedBy user="alice" proxyUser="bob"/>
        <PrimaryObject objectType="job" objectID="Drover.1"><Serialization><![CDATA[<job/>]]></Serialization></PrimaryObject>
        <RelatedObjects><RelatedObject objectType="node" objectID="n1"/></RelatedObjects>
        <Details><Detail name="queue">batch</Detail></Details>
      </Event>
      <Event eventTime="2026-11-22T15:00:01Z" eventType="rmfailure" eventCategory="failure"
             sourceComponent="rm" status="failure" facility="rm">
        <ErrorMessage errorCode="12" originator="slurm">node lost</ErrorMessage>
      </Event>
    </Events>"#;

    #[test]
    fn reads_every_part_of_several_events() {
        let events = parse_events(TWO).unwrap();
        assert_eq!(events.len(), 2);
        let first = &events[0];
        assert_eq!(first.event_date, "2026-11-22 15:00:00 UTC");
        assert_eq!(
            first.initiated_by.as_ref().unwrap().proxy_user.as_deref(),
            Some("bob")
        );
        let primary = first.primary_object.as_ref().unwrap();
        assert_eq!(primary.serialization.as_deref(), Some("<job/>"));
        assert_eq!(first.associated_objects[0].id, "n1");
        assert_eq!(first.details["queue"], "batch");
        assert_eq!(first.severity, "INFO");
        let second = &events[1];
        assert_eq!(second.severity, "ERROR");
        assert_eq!(second.code, 12);
        assert_eq!(second.message.as_deref(), Some("node lost"));
    }

    #[test]
    fn one_bad_event_refuses_the_whole_body() {
        let bad = TWO.replace("2026-11-22T15:00:01Z", "yesterday");
        let problems = parse_events(&bad).unwrap_err();
        assert!(
            problems[0].contains("event 2") && problems[0].contains("eventTime"),
            "{problems:?}"
        );
        let missing = TWO.replace(r#"facility="rm""#, "");
        assert!(parse_events(&missing).unwrap_err()[0].contains("facility is missing"));
        assert!(parse_events("<Events><Event").is_err());
        assert!(parse_events("<Events/>").unwrap_err()[0].contains("no <Event>"));
        let dtd = r#"<!DOCTYPE e [<!ENTITY a "aaaa">]><Events>&a;</Events>"#;
        assert!(parse_events(dtd).is_err());
    }
}
