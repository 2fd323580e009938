//! What reservations and virtual containers share: ACL rules (spec 2.1, 4.1: the
//! `aclRules` body and the `<type>:<value>` rule id) and owners on the wire, and the
//! routes that delete one or change its rules ([`Governed`]).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
pub(crate) use drover_sched::reservation::AclRule;
use drover_sched::reservation::Owner;
use drover_sched::{Requester, SchedError, Scheduler};
use serde_json::Value;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::input::{Fields, read_object};
use crate::openapi::schema::{object, strings};
use crate::reply::{self, parse_json};
use crate::routes::{Access, Caller, Routes};

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
        // An empty name names nobody (the document's minLength 1).
        let name = o.string("name").filter(|n| !n.is_empty());
        if name.is_none() {
            o.problem("name", "required, not empty");
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

/// What the deletion route and the ACL-rule routes of a resource say about it.
pub(crate) struct Docs {
    /// `"reservation"`, `"virtual container"`: in the messages of refusals.
    pub noun: &'static str,
    /// The description of the `{id}` path parameter.
    pub id: &'static str,
    /// The deletion's summary and what its 200 means.
    pub delete: (&'static str, &'static str),
    /// The summary of `PUT .../acl-rules`.
    pub put_rules: &'static str,
}

/// A resource that has owners and ACL rules, changed through the scheduler.
pub(crate) trait Governed: 'static {
    /// The scheduler's change of one.
    type Change: Send;
    /// The paths of one, of its rules, and of one rule.
    const PATHS: [&'static str; 3];
    /// The permissions to change one, and to delete one.
    const ACCESS: [Access; 2];
    const DOCS: Docs;
    const PUT_RULES: fn(Vec<AclRule>) -> Self::Change;
    const DELETE_RULE: fn(String) -> Self::Change;
    /// Releases a reservation, deletes a container.
    const DELETE: Self::Change;

    /// The scheduler applies `change` to the item `id` for `by`.
    fn apply(
        scheduler: &Scheduler,
        id: &str,
        change: Self::Change,
        by: Requester,
    ) -> impl Future<Output = Answer> + Send;
}

/// The scheduler's answer to a change: its messages.
pub(crate) type Answer = Result<Vec<String>, SchedError>;

/// Applies `change` to the item `id` as `caller`; the answer is the messages.
pub(crate) async fn change<G: Governed>(
    state: &AppState,
    caller: &Caller,
    id: &str,
    change: G::Change,
) -> ApiResult<Json<Value>> {
    let messages = G::apply(state.scheduler(), id, change, caller.requester()).await?;
    Ok(reply::messages(messages))
}

/// Registers `DELETE <item>`, `PUT <item>/acl-rules` and `DELETE <item>/acl-rules/{rule}`.
pub(crate) fn register<G: Governed>(routes: &mut Routes) {
    let docs = G::DOCS;
    let [item, rules, rule] = G::PATHS;
    let [update, delete] = G::ACCESS;
    routes
        .delete(item, delete, remove::<G>)
        .summary(docs.delete.0)
        .path_param("id", docs.id)
        .response(200, docs.delete.1, Some(object(&[])));
    routes
        .put(rules, update, put_rules::<G>)
        .summary(docs.put_rules)
        .path_param("id", docs.id)
        .json_body(rules_schema())
        .response(200, "Written", Some(object(&[("messages", strings())])));
    routes
        .delete(rule, update, delete_rule::<G>)
        .summary("Removes the ACL rule <type>:<value>")
        .path_param("id", docs.id)
        .param(crate::routes::ParamDoc {
            name: "rule",
            location: crate::routes::ParamIn::Path,
            required: true,
            description: "<type>:<value>",
            schema: serde_json::json!({"type": "string", "pattern": "^[A-Za-z]+:.+$"}),
        })
        .response(200, "Removed", Some(object(&[("messages", strings())])));
}

/// `{aclRules: [{type, value, affinity, comparator}]}`, one rule or more.
fn rules_schema() -> Value {
    use crate::openapi::schema::{array, object, one_of, required, text};
    use drover_domain::reservation::{AFFINITIES, COMPARATORS, RULE_TYPES};
    let rule = required(
        object(&[
            ("type", one_of(&RULE_TYPES)),
            ("value", text()),
            ("affinity", one_of(&AFFINITIES)),
            ("comparator", one_of(&COMPARATORS)),
        ]),
        &["type", "value"],
    );
    let mut rules = array(rule);
    rules["minItems"] = serde_json::json!(1);
    required(object(&[("aclRules", rules)]), &["aclRules"])
}

fn unchanged<G: Governed>(id: &str) -> String {
    format!("The ACL rules of {} {id} were not changed", G::DOCS.noun)
}

async fn remove<G: Governed>(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let _messages = change::<G>(&state, &caller, &id, G::DELETE).await?;
    Ok(reply::deleted())
}

async fn put_rules<G: Governed>(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let rules = rules_body(&body, &unchanged::<G>(&id))?;
    change::<G>(&state, &caller, &id, G::PUT_RULES(rules)).await
}

async fn delete_rule<G: Governed>(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, rule)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let key = rule_key(&rule, &unchanged::<G>(&id))?;
    change::<G>(&state, &caller, &id, G::DELETE_RULE(key)).await
}
