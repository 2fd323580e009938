//! What the accounting manager keeps: accounts (with their users and custom attributes),
//! allocations (an account's funds for a time window), charge rates and multipliers, and
//! the records it writes: quotes, usage records, liens and charges.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::money::Money;

/// Seconds since the epoch.
pub type Seconds = i64;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountUser {
    pub id: String,
    #[serde(default = "yes")]
    pub active: bool,
    #[serde(default)]
    pub admin: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Account {
    pub id: String,
    #[serde(default)]
    pub organization: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default = "yes")]
    pub active: bool,
    #[serde(default)]
    pub users: Vec<AccountUser>,
    /// Custom attributes, shown when asked for with `custom-fields`.
    #[serde(default)]
    pub custom: BTreeMap<String, serde_json::Value>,
}

impl Account {
    /// Whether `user` is an active member.
    pub fn has_member(&self, user: &str) -> bool {
        self.users.iter().any(|u| u.id == user && u.active)
    }
}

/// Funds of an account for a window (`None`: unbounded on that side).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allocation {
    pub account: String,
    pub amount: Money,
    #[serde(default)]
    pub start: Option<Seconds>,
    #[serde(default)]
    pub end: Option<Seconds>,
}

impl Allocation {
    pub fn covers(&self, at: Seconds) -> bool {
        self.start.is_none_or(|s| s <= at) && self.end.is_none_or(|e| at < e)
    }
}

/// Charge rates, per unit per second: processors (each), memory (per MB), disk and swap
/// (per MB), node (each), generic resources by name, services by type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rates {
    pub processors: Option<Money>,
    pub memory: Option<Money>,
    pub disk: Option<Money>,
    pub swap: Option<Money>,
    pub node: Option<Money>,
    pub generic_resources: BTreeMap<String, Money>,
    pub services: BTreeMap<String, Money>,
    /// Factors applied to the whole charge, by QoS, class and user.
    pub qos: BTreeMap<String, Money>,
    pub class: BTreeMap<String, Money>,
    pub user: BTreeMap<String, Money>,
}

/// A rate given with a quote (`rate=[{type, name, rate}]`): it replaces the standard one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateOverride {
    /// `processors`, `memory`, `disk`, `swap`, `node`, `genericResources`, `service`,
    /// `qos`, `class` or `user` (case-insensitive).
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    pub rate: Money,
}

/// What a job asks for, for pricing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub user: String,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub class: Option<String>,
    pub nodes: u64,
    pub processors: u64,
    /// Megabytes.
    pub memory: u64,
    /// Megabytes.
    #[serde(default)]
    pub disk: u64,
    /// Megabytes.
    #[serde(default)]
    pub swap: u64,
    pub generic_resources: BTreeMap<String, u64>,
    /// A service's type, for service pricing.
    pub service: Option<String>,
}

/// One component of a price (`details` of an itemized quote).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Component {
    pub name: String,
    pub value: u64,
    pub duration: Seconds,
    pub rate: Money,
    pub scaling_factor: Money,
    pub amount: Money,
}

/// A priced piece of work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub amount: Money,
    pub components: Vec<Component>,
}

/// A guaranteed quote: the rates it was priced at are honoured when its job is charged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quote {
    pub id: i64,
    pub usage_record: i64,
    /// The job (or service) it was made for, if the body named one.
    pub object: Option<String>,
    pub account: Option<String>,
    pub user: String,
    pub amount: Money,
    pub rates: Rates,
    pub start: Option<Seconds>,
    pub end: Option<Seconds>,
    pub description: Option<String>,
}

/// A usage record: what a job (or a quote) used and was charged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub id: i64,
    pub object: Option<String>,
    pub account: Option<String>,
    pub user: String,
    pub quote: Option<i64>,
    pub usage: Usage,
    pub duration: Seconds,
    pub charge: Money,
    pub created: Seconds,
    /// A quote's record, or a job's final charge.
    pub kind: String,
}
