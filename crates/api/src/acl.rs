//! Reading what reservations and virtual containers share on the wire: ACL rules
//! (spec 2.1, 4.1: the `aclRules` body and the `<type>:<value>` rule id) and owners.

use drover_sched::reservation::{AclRule, Owner};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::input::{Fields, read_object};
use crate::reply::parse_json;

/// `aclRules`: type, value, affinity and comparator (upper case), each checked.
pub(crate) fn rules(f: &mut Fields<'_>) -> Vec<AclRule> {
    f.each("aclRules", |r| {
        let kind = r.string("type");
        let value = r.string("value");
        if kind.is_none() {
            r.problem("type", "required");
        }
        if value.is_none() {
            r.problem("value", "required");
        }
        let rule = AclRule {
            kind: kind.unwrap_or_default().to_ascii_uppercase(),
            value: value.unwrap_or_default(),
            affinity: r.string("affinity").map(|a| a.to_ascii_uppercase()),
            comparator: r.string("comparator").map(|c| c.to_ascii_uppercase()),
        };
        if let Some(problem) = rule
            .problem()
            .filter(|_| !rule.kind.is_empty() && !rule.value.is_empty())
        {
            // The rule names its field first: "comparator: ...".
            let (key, text) = problem
                .split_once(": ")
                .unwrap_or(("type", problem.as_str()));
            r.problem(key, text);
        }
        rule
    })
    .unwrap_or_default()
}

/// The body of `PUT .../acl-rules`: one or more rules.
pub(crate) fn rules_body(body: &[u8], summary: &str) -> ApiResult<Vec<AclRule>> {
    let body: Value = parse_json(body)?;
    read_object(&body, summary, |f| {
        let rules = rules(f);
        if rules.is_empty() {
            f.problem("aclRules", "one or more rules are required");
        }
        rules
    })
}

/// The `<type>:<value>` of `DELETE .../acl-rules/<aclId>`, the type in upper case.
pub(crate) fn rule_key(rule: &str, summary: &str) -> ApiResult<String> {
    match rule.split_once(':') {
        Some((kind, value)) => Ok(format!("{}:{value}", kind.to_ascii_uppercase())),
        None => Err(ApiError::bad_request(
            summary,
            format!("'{rule}' is not <type>:<value>"),
        )),
    }
}

/// `owner`: `{name, type}`, the name required, the type `USER` by default.
pub(crate) fn owner(f: &mut Fields<'_>) -> Option<Owner> {
    f.object("owner", |o| {
        let name = o.string("name");
        if name.is_none() {
            o.problem("name", "required");
        }
        Owner {
            name: name.unwrap_or_default(),
            kind: o
                .string("type")
                .unwrap_or_else(|| "USER".into())
                .to_ascii_uppercase(),
        }
    })
}
