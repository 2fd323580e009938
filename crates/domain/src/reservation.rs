//! Reservations (spec 2.7) and ACL rules (2.1): resources set aside on nodes for a time
//! window, and who may use them. The engine owns them (they shape every scheduling pass);
//! the planner keeps jobs the ACL does not admit off reserved resources during the window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;
use crate::job::Job;

/// One ACL rule; its identity is `kind` + `value`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AclRule {
    /// USER, GROUP, ACCOUNT, QOS, CLASS, DURATION, JOB_ID, RESERVATION_ID... (upper case).
    pub kind: String,
    pub value: String,
    /// POSITIVE, NEUTRAL or NEGATIVE (upper case); `None` reads as NEUTRAL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<String>,
    /// One of [`COMPARATORS`]; `None` is equality (for DURATION: at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparator: Option<String>,
}

pub const RULE_TYPES: [&str; 25] = [
    "USER",
    "GROUP",
    "ACCOUNT",
    "CLASS",
    "QOS",
    "CLUSTER",
    "JOB_ID",
    "RESERVATION_ID",
    "JOB_TEMPLATE",
    "JOB_ATTRIBUTE",
    "DURATION",
    "PROCESSOR_SECONDS",
    "JPRIORITY",
    "MEMORY",
    "NODE",
    "PAR",
    "PROC",
    "QTIME",
    "QUEUE",
    "RACK",
    "SCHED",
    "SYSTEM",
    "TASK",
    "VC",
    "XFACTOR",
];
pub const AFFINITIES: [&str; 3] = ["NEGATIVE", "NEUTRAL", "POSITIVE"];
pub const COMPARATORS: [&str; 9] = [
    "GREATER_THAN",
    "GREATER_THAN_OR_EQUAL",
    "LESS_THAN",
    "LESS_THAN_OR_EQUAL",
    "EQUAL",
    "NOT_EQUAL",
    "LEXIGRAPHIC_SUBSTRING",
    "LEXIGRAPHIC_NOT_EQUAL",
    "LEXIGRAPHIC_EQUAL",
];

impl AclRule {
    /// `<type>:<value>`, the id `DELETE .../acl-rules/<aclId>` names.
    pub fn key(&self) -> String {
        format!("{}:{}", self.kind, self.value)
    }

    /// What is wrong with the rule, if anything.
    pub fn problem(&self) -> Option<String> {
        if !RULE_TYPES.contains(&self.kind.as_str()) {
            return Some(format!(
                "type: '{}' is not an ACL rule type ({})",
                self.kind,
                RULE_TYPES.join(", ")
            ));
        }
        if self.value.is_empty() {
            return Some("value: required".into());
        }
        if let Some(a) = &self.affinity
            && !AFFINITIES.contains(&a.as_str())
        {
            return Some(format!(
                "affinity: '{a}' is not one of {}",
                AFFINITIES.join(", ")
            ));
        }
        if let Some(c) = &self.comparator
            && !COMPARATORS.contains(&c.as_str())
        {
            return Some(format!(
                "comparator: '{c}' is not one of {}",
                COMPARATORS.join(", ")
            ));
        }
        if self.kind == "DURATION" && parse_duration(&self.value).is_none() {
            return Some(format!(
                "value: '{}' is not a duration (seconds or [[DD:]HH:]MM:SS)",
                self.value
            ));
        }
        None
    }

    /// Whether `job` satisfies this rule. Types the scheduler does not know how to judge
    /// (CLUSTER, NODE...) never match.
    pub fn admits(&self, job: &Job) -> bool {
        let text = |actual: Option<&str>| actual.is_some_and(|a| self.compare_text(a));
        match self.kind.as_str() {
            "USER" => text(Some(job.user())),
            "GROUP" => text(job.spec.group.as_deref()),
            "ACCOUNT" => text(job.spec.account.as_deref()),
            "QOS" => text(job.spec.qos_requested.as_deref()),
            "CLASS" | "QUEUE" => text(job.spec.job_class.as_deref()),
            "JOB_ID" => text(Some(&job.id)),
            "RESERVATION_ID" => text(job.spec.extra.reservation_requested.as_deref()),
            "DURATION" => match (job.spec.duration, parse_duration(&self.value)) {
                (Some(duration), Some(limit)) => {
                    compare_numbers(self.comparator.as_deref(), duration, limit, true)
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// Whether this rule admits what `user` owns outside jobs (their VMs): only a USER
    /// rule can say, as nothing else of a job's is there to judge.
    pub fn admits_user(&self, user: &str) -> bool {
        self.kind == "USER" && self.compare_text(user)
    }

    fn compare_text(&self, actual: &str) -> bool {
        match self.comparator.as_deref() {
            Some("LEXIGRAPHIC_SUBSTRING") => actual.contains(&self.value),
            Some("LEXIGRAPHIC_NOT_EQUAL" | "NOT_EQUAL") => actual != self.value,
            Some(
                c @ ("GREATER_THAN" | "GREATER_THAN_OR_EQUAL" | "LESS_THAN" | "LESS_THAN_OR_EQUAL"),
            ) => match (actual.parse::<i64>(), self.value.parse::<i64>()) {
                (Ok(a), Ok(v)) => compare_numbers(Some(c), a, v, false),
                _ => false,
            },
            _ => actual == self.value,
        }
    }

    pub fn affinity(&self) -> &str {
        self.affinity.as_deref().unwrap_or("NEUTRAL")
    }
}

fn compare_numbers(
    comparator: Option<&str>,
    actual: i64,
    limit: i64,
    at_most_by_default: bool,
) -> bool {
    match comparator {
        Some("GREATER_THAN") => actual > limit,
        Some("GREATER_THAN_OR_EQUAL") => actual >= limit,
        Some("LESS_THAN") => actual < limit,
        Some("LESS_THAN_OR_EQUAL") => actual <= limit,
        Some("NOT_EQUAL" | "LEXIGRAPHIC_NOT_EQUAL") => actual != limit,
        Some("EQUAL" | "LEXIGRAPHIC_EQUAL") => actual == limit,
        _ if at_most_by_default => actual <= limit,
        _ => actual == limit,
    }
}

/// Seconds from `3600`, `MM:SS`, `HH:MM:SS` or `DD:HH:MM:SS`.
pub fn parse_duration(text: &str) -> Option<i64> {
    let parts: Vec<&str> = text.trim().split(':').collect();
    if parts.len() > 4 || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    let numbers: Vec<i64> = parts
        .iter()
        .map(|p| p.parse::<i64>().ok().filter(|n| *n >= 0))
        .collect::<Option<_>>()?;
    let weights = [86_400, 3_600, 60, 1];
    let offset = 4 - numbers.len();
    numbers.iter().enumerate().try_fold(0i64, |total, (i, n)| {
        total.checked_add(n.checked_mul(weights[offset + i])?)
    })
}

/// A standing reservation (`[[standing_reservations]]`): the same window every day (or
/// on the days named), on named nodes, with a fixed ACL. Read-only through the API.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandingReservation {
    pub id: String,
    pub hosts: Vec<String>,
    /// `HH:MM`, UTC.
    pub start: String,
    /// Seconds.
    pub duration: i64,
    /// `Mon`..`Sun`; empty means every day.
    #[serde(default)]
    pub days: Vec<String>,
    #[serde(default)]
    pub acl: Vec<StandingRule>,
    #[serde(default)]
    pub flags: Vec<String>,
}

/// An ACL rule in the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandingRule {
    #[serde(rename = "type")]
    pub kind: String,
    pub value: String,
    #[serde(default)]
    pub affinity: Option<String>,
    #[serde(default)]
    pub comparator: Option<String>,
}

const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

impl StandingReservation {
    /// What is wrong with it, if anything.
    pub fn problem(&self) -> Option<String> {
        let at = format!("standing reservation '{}'", self.id);
        if self.id.is_empty()
            || !self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Some(format!("{at}: id must be letters, digits, - _ ."));
        }
        if self.hosts.is_empty() {
            return Some(format!("{at}: hosts is empty"));
        }
        if self.minute_of_day().is_none() {
            return Some(format!("{at}: start '{}' is not HH:MM", self.start));
        }
        if self.duration <= 0 || self.duration > 7 * 86_400 {
            return Some(format!("{at}: duration must be 1 second to 7 days"));
        }
        if let Some(day) = self.days.iter().find(|d| !DAYS.contains(&d.as_str())) {
            return Some(format!(
                "{at}: day '{day}' is not one of {}",
                DAYS.join(", ")
            ));
        }
        self.rules()
            .iter()
            .find_map(|r| r.problem())
            .map(|p| format!("{at}: acl: {p}"))
    }

    fn minute_of_day(&self) -> Option<i64> {
        let (h, m) = self.start.split_once(':')?;
        let (h, m) = (h.parse::<i64>().ok()?, m.parse::<i64>().ok()?);
        ((0..24).contains(&h) && (0..60).contains(&m)).then_some(h * 60 + m)
    }

    pub fn rules(&self) -> Vec<AclRule> {
        self.acl
            .iter()
            .map(|r| AclRule {
                kind: r.kind.to_ascii_uppercase(),
                value: r.value.clone(),
                affinity: r.affinity.as_ref().map(|a| a.to_ascii_uppercase()),
                comparator: r.comparator.as_ref().map(|c| c.to_ascii_uppercase()),
            })
            .collect()
    }

    /// The window in force at `now`, or the next one: `(start, end)`.
    pub fn window(&self, now: Seconds) -> Option<(Seconds, Seconds)> {
        let minute = self.minute_of_day()?;
        let today = now.div_euclid(86_400);
        // From yesterday (a window may run past midnight) to a week ahead.
        for day in today - 1..=today + 7 {
            let weekday = DAYS[(day + 4).rem_euclid(7) as usize]; // 1970-01-01 was a Thursday
            if !self.days.is_empty() && !self.days.iter().any(|d| d == weekday) {
                continue;
            }
            let start = day * 86_400 + minute * 60;
            if start + self.duration > now {
                return Some((start, start + self.duration));
            }
        }
        None
    }
}

/// Adds `rules` to `acl`, a rule with the same type and value replacing the old one
/// (reservations and virtual containers alike).
pub fn put_rules(acl: &mut Vec<AclRule>, rules: Vec<AclRule>) {
    for rule in rules {
        match acl.iter_mut().find(|r| r.key() == rule.key()) {
            Some(old) => *old = rule,
            None => acl.push(rule),
        }
    }
}

/// `{name, type}` of an owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Owner {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
}

impl Owner {
    /// Whether this owner is the user `user` (not a group or account of that name).
    pub fn is_user(&self, user: &str) -> bool {
        self.kind == "USER" && self.name == user
    }
}

/// Whether `user` is the `creator` of an object or its USER `owner`: who may see and act
/// on a reservation or a virtual container.
pub fn belongs_to(creator: &str, owner: Option<&Owner>, user: &str) -> bool {
    creator == user || owner.is_some_and(|o| o.is_user(user))
}

/// Processors of one node set aside.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Held {
    pub node: String,
    pub processors: u32,
}

/// A reservation, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    pub id: String,
    pub created: Seconds,
    pub start: Seconds,
    pub end: Seconds,
    /// The API user who created it: with the owner, who sees and changes it.
    pub creator: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acl: Vec<AclRule>,
    /// What is set aside.
    pub held: Vec<Held>,
    /// Tasks asked for (`requirements.taskCount`), or the processors held.
    pub task_count: u32,
    /// A standing reservation (configured): read-only through the API.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub standing: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, String>,
    /// Creation fields kept and shown as given (accounting*, comments, excludeJobs,
    /// hostListExpression, idPrefix, partitionId, profile, requirements, reservationGroup,
    /// resources, subType, trigger, label).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub given: serde_json::Map<String, serde_json::Value>,
    /// Processor-seconds of jobs that ran in it and ended.
    #[serde(default)]
    pub used_processor_seconds: f64,
}

impl Reservation {
    /// Whether `user` created it or is its USER owner: what an ordinary user may see
    /// and act on.
    pub fn belongs_to(&self, user: &str) -> bool {
        belongs_to(&self.creator, self.owner.as_ref(), user)
    }

    pub fn is_active(&self, now: Seconds) -> bool {
        self.start <= now && now < self.end
    }

    pub fn processors(&self) -> u32 {
        self.held.iter().map(|h| h.processors).sum()
    }

    /// Whether `job` may use the reserved resources: one of the ACL rules matches it
    /// (the owner administers the reservation; the ACL alone decides who uses it). A job
    /// that asked for this reservation needs that too.
    pub fn admits(&self, job: &Job) -> bool {
        self.acl.iter().any(|rule| rule.admits(job))
    }

    /// Whether `user`'s VMs may use the reserved resources (a USER rule admits them).
    pub fn admits_user(&self, user: &str) -> bool {
        self.acl.iter().any(|rule| rule.admits_user(user))
    }

    /// The strongest affinity of the rules admitting `job` (POSITIVE over NEUTRAL over
    /// NEGATIVE): whether it prefers or avoids these resources.
    pub fn affinity_for(&self, job: &Job) -> Option<&str> {
        let mut best: Option<&str> = None;
        for rule in self.acl.iter().filter(|r| r.admits(job)) {
            let rank = |a: &str| AFFINITIES.iter().position(|x| *x == a);
            if best.is_none_or(|b| rank(rule.affinity()) > rank(b)) {
                best = Some(rule.affinity());
            }
        }
        best
    }

    /// Adds `rules`, a rule with the same type and value replacing the old one.
    pub fn put_rules(&mut self, rules: Vec<AclRule>) {
        put_rules(&mut self.acl, rules);
    }

    /// Whether it holds resources on `node` during any of `start..end`.
    pub fn overlaps(&self, node: &str, start: Seconds, end: Seconds) -> bool {
        self.start < end && start < self.end && self.held.iter().any(|h| h.node == node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobSpec, JobStatus};

    fn job(user: &str, duration: Option<i64>) -> Job {
        Job {
            id: "D.1".into(),
            seq: 1,
            spec: JobSpec {
                duration,
                account: Some("physics".into()),
                ..Default::default()
            }
            .into(),
            status: JobStatus {
                submitter: user.into(),
                ..Default::default()
            },
            array: None,
        }
    }

    fn rule(kind: &str, value: &str, comparator: Option<&str>) -> AclRule {
        AclRule {
            kind: kind.into(),
            value: value.into(),
            affinity: None,
            comparator: comparator.map(String::from),
        }
    }

    #[test]
    fn rules_match_by_type_and_comparator() {
        let ann = job("ann", Some(3600));
        assert!(rule("USER", "ann", None).admits(&ann));
        assert!(!rule("USER", "bob", None).admits(&ann));
        assert!(rule("USER", "bob", Some("LEXIGRAPHIC_NOT_EQUAL")).admits(&ann));
        assert!(rule("ACCOUNT", "phys", Some("LEXIGRAPHIC_SUBSTRING")).admits(&ann));
        assert!(
            !rule("GROUP", "staff", None).admits(&ann),
            "the job names no group"
        );
        assert!(
            rule("DURATION", "1:00:00", None).admits(&ann),
            "at most by default"
        );
        assert!(rule("DURATION", "3600", Some("LESS_THAN_OR_EQUAL")).admits(&ann));
        assert!(!rule("DURATION", "3599", Some("LESS_THAN_OR_EQUAL")).admits(&ann));
        assert!(rule("DURATION", "30:00", Some("GREATER_THAN")).admits(&ann));
        assert!(!rule("DURATION", "60", None).admits(&job("ann", None)));
        assert!(rule("JOB_ID", "D.1", None).admits(&ann));
        assert!(
            !rule("NODE", "n1", None).admits(&ann),
            "not judged: no match"
        );
    }

    #[test]
    fn standing_windows_repeat_on_their_days() {
        let standing = StandingReservation {
            id: "maint".into(),
            hosts: vec!["n1".into()],
            start: "02:00".into(),
            duration: 7200,
            days: vec!["Sun".into()],
            acl: vec![],
            flags: vec![],
        };
        assert!(standing.problem().is_none());
        // 2026-11-22 was a Sunday: 00:00 UTC is 1795305600.
        let sunday = 1_795_305_600;
        assert_eq!(
            standing.window(sunday),
            Some((sunday + 7200, sunday + 14_400))
        );
        assert_eq!(
            standing.window(sunday + 3 * 3600),
            Some((sunday + 7200, sunday + 14_400))
        );
        let next = sunday + 7 * 86_400;
        assert_eq!(
            standing.window(sunday + 5 * 3600),
            Some((next + 7200, next + 14_400))
        );
        let daily = StandingReservation {
            days: vec![],
            ..standing.clone()
        };
        let monday = sunday + 86_400;
        assert_eq!(
            daily.window(sunday + 5 * 3600),
            Some((monday + 7200, monday + 14_400))
        );
        let bad = StandingReservation {
            start: "25:00".into(),
            ..standing
        };
        assert!(bad.problem().unwrap().contains("HH:MM"));
    }

    #[test]
    fn rule_problems_and_durations() {
        assert_eq!(parse_duration("90"), Some(90));
        assert_eq!(parse_duration("1:30"), Some(90));
        assert_eq!(parse_duration("1:00:00:00"), Some(86_400));
        assert_eq!(parse_duration("x"), None);
        assert_eq!(parse_duration("1::2"), None);
        assert!(
            rule("USERS", "ann", None)
                .problem()
                .unwrap()
                .contains("type")
        );
        assert!(rule("USER", "", None).problem().unwrap().contains("value"));
        assert!(
            rule("DURATION", "soon", None)
                .problem()
                .unwrap()
                .contains("duration")
        );
        assert!(
            rule("USER", "ann", Some("ABOUT"))
                .problem()
                .unwrap()
                .contains("comparator")
        );
        assert!(rule("USER", "ann", None).problem().is_none());
    }

    #[test]
    fn rules_are_replaced_by_type_and_value_and_only_the_acl_admits() {
        let mut r = Reservation {
            id: "r.1".into(),
            created: 0,
            start: 100,
            end: 200,
            creator: "admin".into(),
            owner: Some(Owner {
                name: "ann".into(),
                kind: "USER".into(),
            }),
            flags: vec![],
            acl: vec![rule("USER", "bob", None)],
            held: vec![Held {
                node: "n1".into(),
                processors: 4,
            }],
            task_count: 4,
            standing: false,
            variables: BTreeMap::new(),
            given: Default::default(),
            used_processor_seconds: 0.0,
        };
        let mut positive = rule("USER", "bob", None);
        positive.affinity = Some("POSITIVE".into());
        r.put_rules(vec![positive, rule("GROUP", "staff", None)]);
        assert_eq!(r.acl.len(), 2);
        assert_eq!(r.affinity_for(&job("bob", None)), Some("POSITIVE"));
        assert!(!r.admits(&job("ann", None)), "owning it is not using it");
        assert!(r.admits(&job("bob", None)));
        assert!(
            r.overlaps("n1", 150, 300) && !r.overlaps("n1", 200, 300) && !r.overlaps("n2", 0, 999)
        );
        assert!(r.is_active(100) && !r.is_active(200));
    }
}
