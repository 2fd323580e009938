//! The ledger: accounts and rates from the configuration, allocations (configured, and
//! added through the API), and what it records in the store: guaranteed quotes, usage
//! records (quotes' and jobs' charges), liens (funds held while a job runs).
//!
//! Every balance change happens under one lock, so concurrent job ends never over- or
//! under-charge: an account's balance is always its allocations minus its charges minus
//! its liens, exactly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use drover_query::ListQuery;
use drover_store::{Body, CollectionSpec, DocumentStore, Write};
use serde::{Deserialize, Serialize};

use crate::model::{
    Account, Allocation, Price, Quote, RateOverride, Rates, Seconds, Usage, UsageRecord,
};
use crate::money::Money;
use crate::pricing;

pub const QUOTES: &str = "acct_quotes";
pub const USAGE: &str = "acct_usage";
pub const LIENS: &str = "acct_liens";
pub const ALLOCATIONS: &str = "acct_allocations";

/// `[accounting]` in the configuration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccountingConfig {
    pub enabled: bool,
    /// Accounting administrators: they see every account.
    pub admins: Vec<String>,
    pub accounts: Vec<Account>,
    pub allocations: Vec<Allocation>,
    pub rates: Rates,
    /// A job without a wall time is held funds for this many seconds.
    pub default_lien_seconds: Option<Seconds>,
    /// Let jobs start without enough funds (the balance may go negative); by default a
    /// job waits until its account can pay for its requested time.
    pub allow_overdraft: bool,
    /// VMs are charged for what they hold at least this often (seconds, default 3600):
    /// each charge settles the time since the last and holds funds for the next.
    pub vm_charge_interval_seconds: Option<Seconds>,
    /// What becomes of a running VM whose account cannot pay for its next interval.
    pub vm_when_dry: VmWhenDry,
}

/// `[accounting] vm_when_dry`: a VM whose account runs dry at a periodic charge is
/// powered off (and no longer charged) or runs on into debt. Either way a VM is not
/// created (nor powered on again) without the funds for its first interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VmWhenDry {
    #[default]
    PowerOff,
    Refuse,
}

/// The default of `vm_charge_interval_seconds`.
pub const VM_CHARGE_INTERVAL: Seconds = 3600;

impl AccountingConfig {
    /// How often a VM is charged (at least every second).
    pub fn vm_charge_interval(&self) -> Seconds {
        self.vm_charge_interval_seconds
            .unwrap_or(VM_CHARGE_INTERVAL)
            .max(1)
    }

    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for account in &self.accounts {
            if account.id.is_empty() || !seen.insert(account.id.as_str()) {
                problems.push(format!(
                    "accounting.accounts: id '{}' is empty or repeated",
                    account.id
                ));
            }
        }
        if self.vm_charge_interval_seconds.is_some_and(|s| s < 1) {
            problems.push("accounting.vm_charge_interval_seconds: must be at least 1".into());
        }
        for allocation in &self.allocations {
            if !self.accounts.iter().any(|a| a.id == allocation.account) {
                problems.push(format!(
                    "accounting.allocations: no account '{}'",
                    allocation.account
                ));
            }
        }
        problems
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AccountingError {
    /// The request is wrong (400).
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    /// Not enough funds (400, its own message).
    #[error("{0}")]
    InsufficientFunds(String),
    /// The asker may not do this (403).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// The store failed.
    #[error("{0}")]
    Store(String),
}

/// Funds held for a running job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lien {
    pub job: String,
    pub account: String,
    pub amount: Money,
    pub created: Seconds,
}

/// A lien to hold: for `seconds` of use, at `now`, as `how` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LienTerms {
    pub seconds: Seconds,
    pub now: Seconds,
    pub how: Hold,
}

/// What [`Ledger::hold_for`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Only checks that the funds could be held.
    Check,
    /// Holds them, or says why it may not.
    Record,
    /// Holds them even past the account's balance.
    Anyway,
}

/// A stored allocation (added through the API).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredAllocation {
    pub id: i64,
    #[serde(flatten)]
    pub allocation: Allocation,
    pub created: Seconds,
}

/// A quote to make (`POST /rest/quotes/standard/quote`).
#[derive(Debug, Clone, Default)]
pub struct QuoteRequest {
    pub usage: Usage,
    pub object: Option<String>,
    pub duration: Seconds,
    pub overrides: Vec<RateOverride>,
    pub guarantee: bool,
    pub cost_only: bool,
    pub start: Option<Seconds>,
    pub end: Option<Seconds>,
    pub description: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct QuoteAnswer {
    pub price: Price,
    /// For a guaranteed quote: its id and its usage record.
    pub id: Option<i64>,
    pub usage_record: Option<i64>,
}

/// An account's money now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Balance {
    pub allocated: Money,
    pub charged: Money,
    pub held: Money,
    pub available: Money,
}

#[derive(Default)]
struct State {
    next_id: i64,
    allocations: Vec<StoredAllocation>,
    /// Sum of charges per account.
    charged: HashMap<String, Money>,
    liens: HashMap<String, Lien>,
    /// Guaranteed quotes by the job they were made for and the user they were made for:
    /// one user's quote naming a job neither prices nor blocks another user's.
    quotes: HashMap<(String, String), Quote>,
}

impl State {
    /// The guaranteed quote that prices `job` of `user`: one made for that job and for
    /// that user. A quote someone made naming another user's job binds nothing.
    fn guaranteed_for(&self, job: &str, user: &str) -> Option<&Quote> {
        self.quotes.get(&(job.to_string(), user.to_string()))
    }
}

/// The ledger's state as the store recorded it.
fn read_state(store: &dyn DocumentStore) -> Result<State, String> {
    let mut state = State::default();
    let read = |collection: &str| {
        store
            .list(collection, &ListQuery::default())
            .map(|page| page.items)
            .map_err(|e| format!("cannot read {collection}: {e}"))
    };
    for doc in read(USAGE)? {
        if let Ok(record) = serde_json::from_value::<UsageRecord>(doc.body) {
            state.next_id = state.next_id.max(record.id);
            if record.kind == "charge"
                && let Some(account) = &record.account
            {
                *state.charged.entry(account.clone()).or_default() += record.charge;
            }
        }
    }
    for doc in read(QUOTES)? {
        if let Ok(quote) = serde_json::from_value::<Quote>(doc.body) {
            state.next_id = state.next_id.max(quote.id);
            if let Some(object) = &quote.object {
                state
                    .quotes
                    .insert((object.clone(), quote.user.clone()), quote);
            }
        }
    }
    for doc in read(LIENS)? {
        if let Ok(lien) = serde_json::from_value::<Lien>(doc.body) {
            state.liens.insert(lien.job.clone(), lien);
        }
    }
    for doc in read(ALLOCATIONS)? {
        if let Ok(allocation) = serde_json::from_value::<StoredAllocation>(doc.body) {
            state.next_id = state.next_id.max(allocation.id);
            state.allocations.push(allocation);
        }
    }
    Ok(state)
}

pub struct Ledger {
    config: AccountingConfig,
    store: Arc<dyn DocumentStore>,
    state: Mutex<State>,
}

impl Ledger {
    /// Opens the ledger over `store`, reading what it recorded.
    pub fn open(config: AccountingConfig, store: Arc<dyn DocumentStore>) -> Result<Ledger, String> {
        for collection in [QUOTES, USAGE, LIENS, ALLOCATIONS] {
            store
                .ensure_collection(&CollectionSpec::new(collection))
                .map_err(|e| format!("cannot prepare {collection}: {e}"))?;
        }
        let state = read_state(store.as_ref())?;
        Ok(Ledger {
            config,
            store,
            state: Mutex::new(state),
        })
    }

    /// Goes back to what the store recorded. Liens and charges change here when their
    /// writes are handed to the journal, before it commits: after a failed commit the
    /// engine reloads, and so must the ledger, or balances drift until a restart.
    pub fn reload(&self) -> Result<(), String> {
        let state = read_state(self.store.as_ref())?;
        *self.state.lock().unwrap() = state;
        Ok(())
    }

    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    pub fn config(&self) -> &AccountingConfig {
        &self.config
    }

    pub fn is_admin(&self, user: &str) -> bool {
        self.config.admins.iter().any(|a| a == user)
    }

    /// The accounts `user` may see: those they belong to, or all for an administrator.
    pub fn accounts_for(&self, user: &str) -> Vec<&Account> {
        let admin = self.is_admin(user);
        self.config
            .accounts
            .iter()
            .filter(|a| admin || a.users.iter().any(|u| u.id == user))
            .collect()
    }

    pub fn account(&self, id: &str) -> Option<&Account> {
        self.config.accounts.iter().find(|a| a.id == id)
    }

    /// The account a job of `user` is charged to: the one named, else the first the user
    /// is an active member of.
    pub fn account_for(&self, user: &str, named: Option<&str>) -> Option<String> {
        match named {
            Some(account) => Some(account.to_string()),
            None => self
                .config
                .accounts
                .iter()
                .find(|a| a.has_member(user))
                .map(|a| a.id.clone()),
        }
    }

    pub fn balance(&self, account: &str, at: Seconds) -> Balance {
        let state = self.state.lock().unwrap();
        self.balance_locked(&state, account, at)
    }

    fn balance_locked(&self, state: &State, account: &str, at: Seconds) -> Balance {
        let allocated: Money = self
            .config
            .allocations
            .iter()
            .chain(state.allocations.iter().map(|a| &a.allocation))
            .filter(|a| a.account == account && a.covers(at))
            .map(|a| a.amount)
            .sum();
        let charged = state.charged.get(account).copied().unwrap_or_default();
        let held: Money = state
            .liens
            .values()
            .filter(|l| l.account == account)
            .map(|l| l.amount)
            .sum();
        Balance {
            allocated,
            charged,
            held,
            available: allocated - charged - held,
        }
    }

    /// Checks that `user` may charge `account` (it exists, is active, and the user is an
    /// active member or an administrator).
    fn check_account(&self, user: &str, account: Option<&str>) -> Result<String, AccountingError> {
        let Some(id) = account else {
            return Err(AccountingError::Invalid(vec![format!(
                "account: '{user}' names no account and belongs to none"
            )]));
        };
        let account = self
            .account(id)
            .ok_or_else(|| AccountingError::Invalid(vec![format!("account: no account '{id}'")]))?;
        if !account.active {
            return Err(AccountingError::Invalid(vec![format!(
                "account: '{id}' is not active"
            )]));
        }
        if !account.has_member(user) && !self.is_admin(user) {
            return Err(AccountingError::Invalid(vec![format!(
                "account: '{user}' is not an active member of '{id}'"
            )]));
        }
        Ok(id.to_string())
    }

    /// Prices work; with `guarantee`, records the quote and a usage record.
    pub fn quote(
        &self,
        request: QuoteRequest,
        now: Seconds,
    ) -> Result<QuoteAnswer, AccountingError> {
        let rates = pricing::effective_rates(&self.config.rates, &request.overrides)
            .map_err(AccountingError::Invalid)?;
        let price = pricing::price(&rates, &request.usage, request.duration);
        let user = request.usage.user.clone();
        let account = self.account_for(&user, request.usage.account.as_deref());
        let mut state = self.state.lock().unwrap();
        if !request.cost_only {
            let id = self.check_account(&user, account.as_deref())?;
            let at = request.start.unwrap_or(now).max(now);
            let available = self.balance_locked(&state, &id, at).available;
            if available < price.amount {
                return Err(AccountingError::InsufficientFunds(format!(
                    "Insufficient funds: the quote is {} and account '{id}' has {available} available",
                    price.amount
                )));
            }
        }
        if !request.guarantee {
            return Ok(QuoteAnswer {
                price,
                id: None,
                usage_record: None,
            });
        }
        let quote_id = state.next_id + 1;
        let record_id = state.next_id + 2;
        let quote = Quote {
            id: quote_id,
            usage_record: record_id,
            object: request.object.clone(),
            account: account.clone(),
            user: user.clone(),
            amount: price.amount,
            rates,
            start: request.start,
            end: request.end,
            description: request.description.clone(),
        };
        let record = UsageRecord {
            id: record_id,
            object: request.object.clone(),
            account,
            user,
            quote: Some(quote_id),
            usage: request.usage.clone(),
            duration: request.duration,
            charge: Money::ZERO,
            created: now,
            kind: "quote".into(),
        };
        self.store
            .write(&[
                put(QUOTES, &quote_id.to_string(), &quote),
                put(USAGE, &record_id.to_string(), &record),
            ])
            .map_err(|e| AccountingError::Store(e.to_string()))?;
        state.next_id = record_id;
        if let Some(object) = &request.object {
            state
                .quotes
                .insert((object.clone(), quote.user.clone()), quote);
        }
        Ok(QuoteAnswer {
            price,
            id: Some(quote_id),
            usage_record: Some(record_id),
        })
    }

    /// A job is about to start: holds the funds its requested time would cost. Answers
    /// the writes that record the lien (for the job's journal batch), or why it may not
    /// start.
    pub fn hold(
        &self,
        job: &str,
        usage: &Usage,
        requested: Option<Seconds>,
        now: Seconds,
    ) -> Result<Vec<Write>, AccountingError> {
        let seconds = requested
            .filter(|&s| s > 0)
            .or(self.config.default_lien_seconds)
            .unwrap_or(3600);
        self.hold_for(job, usage, seconds, now, Hold::Record)
    }

    /// Holds (or, with [`Hold::Check`], only checks that it could hold) what `usage`
    /// costs for `seconds` under the key `object` (a job's id, or `vm/<id>`). With
    /// [`Hold::Anyway`] the funds are held even when the account cannot cover them
    /// (its balance goes negative); the account must still be one the user may charge.
    pub fn hold_for(
        &self,
        object: &str,
        usage: &Usage,
        seconds: Seconds,
        now: Seconds,
        how: Hold,
    ) -> Result<Vec<Write>, AccountingError> {
        let terms = LienTerms { seconds, now, how };
        self.hold_locked(&mut self.state.lock().unwrap(), object, usage, terms)
    }

    /// A VM's periodic charge, under one lock so that no reader sees the moment between:
    /// charges `charged` seconds of `usage` and releases the lien of `object` (as
    /// [`Ledger::settle`]), then holds `seconds` more (as [`Ledger::hold_for`]). Answers
    /// the writes, and whether the new lien could be held.
    pub fn renew(
        &self,
        object: &str,
        usage: &Usage,
        charged: Seconds,
        next: LienTerms,
    ) -> (Vec<Write>, Result<(), AccountingError>) {
        let mut state = self.state.lock().unwrap();
        let mut writes = self.settle_locked(&mut state, object, usage, charged, next.now);
        let held = self
            .hold_locked(&mut state, object, usage, next)
            .map(|held| writes.extend(held));
        (writes, held)
    }

    fn hold_locked(
        &self,
        state: &mut State,
        object: &str,
        usage: &Usage,
        terms: LienTerms,
    ) -> Result<Vec<Write>, AccountingError> {
        let LienTerms { seconds, now, how } = terms;
        let Some(account) = self.account_for(&usage.user, usage.account.as_deref()) else {
            return Ok(Vec::new()); // nothing to charge to: not accounted
        };
        let rates = state
            .guaranteed_for(object, &usage.user)
            .map(|q| q.rates.clone())
            .unwrap_or_else(|| self.config.rates.clone());
        let amount = pricing::price(&rates, usage, seconds).amount;
        let id = self.check_account(&usage.user, Some(&account))?;
        let available = self.balance_locked(state, &id, now).available;
        if available < amount && !self.config.allow_overdraft && how != Hold::Anyway {
            return Err(AccountingError::InsufficientFunds(format!(
                "insufficient funds: {amount} needed to start, account '{id}' has {available} available"
            )));
        }
        if how == Hold::Check {
            return Ok(Vec::new());
        }
        let lien = Lien {
            job: object.to_string(),
            account: id,
            amount,
            created: now,
        };
        let write = put(LIENS, object, &lien);
        state.liens.insert(object.to_string(), lien);
        Ok(vec![write])
    }

    /// A job's run ended after `seconds`: charges what it used (at its guaranteed quote's
    /// rates, if it has one) and releases its lien. Answers the writes that record it.
    pub fn settle(&self, job: &str, usage: &Usage, seconds: Seconds, now: Seconds) -> Vec<Write> {
        let mut state = self.state.lock().unwrap();
        self.settle_locked(&mut state, job, usage, seconds, now)
    }

    fn settle_locked(
        &self,
        state: &mut State,
        job: &str,
        usage: &Usage,
        seconds: Seconds,
        now: Seconds,
    ) -> Vec<Write> {
        let Some(lien) = state.liens.remove(job) else {
            return Vec::new(); // never held: not accounted
        };
        let quote = state.guaranteed_for(job, &usage.user).cloned();
        let rates = quote
            .as_ref()
            .map(|q| q.rates.clone())
            .unwrap_or_else(|| self.config.rates.clone());
        let charge = pricing::price(&rates, usage, seconds).amount;
        state.next_id += 1;
        let record = UsageRecord {
            id: state.next_id,
            object: Some(job.to_string()),
            account: Some(lien.account.clone()),
            user: usage.user.clone(),
            quote: quote.map(|q| q.id),
            usage: usage.clone(),
            duration: seconds,
            charge,
            created: now,
            kind: "charge".into(),
        };
        *state.charged.entry(lien.account.clone()).or_default() += charge;
        vec![
            Write::Delete {
                collection: LIENS.into(),
                id: job.to_string(),
                expected_version: None,
            },
            put(USAGE, &record.id.to_string(), &record),
        ]
    }

    /// Adds funds to an account (the admin surface).
    pub fn allocate(&self, allocation: Allocation, now: Seconds) -> Result<i64, AccountingError> {
        if self.account(&allocation.account).is_none() {
            return Err(AccountingError::Invalid(vec![format!(
                "account: no account '{}'",
                allocation.account
            )]));
        }
        let mut state = self.state.lock().unwrap();
        let id = state.next_id + 1;
        let stored = StoredAllocation {
            id,
            allocation,
            created: now,
        };
        self.store
            .write(&[put(ALLOCATIONS, &id.to_string(), &stored)])
            .map_err(|e| AccountingError::Store(e.to_string()))?;
        state.next_id = id;
        state.allocations.push(stored);
        Ok(id)
    }

    /// Allocations: configured (id 0) and added.
    pub fn allocations(&self) -> Vec<StoredAllocation> {
        let state = self.state.lock().unwrap();
        self.config
            .allocations
            .iter()
            .map(|a| StoredAllocation {
                id: 0,
                allocation: a.clone(),
                created: 0,
            })
            .chain(state.allocations.iter().cloned())
            .collect()
    }

    /// Every usage record, oldest first.
    pub fn usage_records(&self) -> Result<Vec<UsageRecord>, AccountingError> {
        let page = self
            .store
            .list(USAGE, &ListQuery::default())
            .map_err(|e| AccountingError::Store(e.to_string()))?;
        let mut records: Vec<UsageRecord> = page
            .items
            .into_iter()
            .filter_map(|d| serde_json::from_value(d.body).ok())
            .collect();
        records.sort_by_key(|r| r.id);
        Ok(records)
    }
}

fn put<T: Serialize>(collection: &str, id: &str, value: &T) -> Write {
    Write::Put {
        collection: collection.into(),
        id: id.into(),
        name: None,
        body: Body::serialize(value).expect("accounting records serialize"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::AccountUser;

    fn m(text: &str) -> Money {
        Money::parse(text).unwrap()
    }

    fn config(funds: &str) -> AccountingConfig {
        AccountingConfig {
            enabled: true,
            admins: vec!["boss".into()],
            accounts: vec![Account {
                id: "physics".into(),
                organization: None,
                description: None,
                active: true,
                users: vec![AccountUser {
                    id: "ann".into(),
                    active: true,
                    admin: false,
                }],
                custom: Default::default(),
            }],
            allocations: vec![Allocation {
                account: "physics".into(),
                amount: m(funds),
                start: None,
                end: None,
            }],
            rates: Rates {
                processors: Some(m("0.01")),
                ..Rates::default()
            },
            default_lien_seconds: None,
            allow_overdraft: false,
            ..AccountingConfig::default()
        }
    }

    /// A ledger in `dir`: the account `physics` of user ann with `funds`, its
    /// administrator boss, processors at 0.01 a second.
    pub(crate) fn ledger(dir: &std::path::Path, funds: &str) -> Ledger {
        let store = Arc::new(drover_store::SqliteStore::open(&dir.join("a.db")).unwrap());
        Ledger::open(config(funds), store).unwrap()
    }

    fn usage(processors: u64) -> Usage {
        Usage {
            user: "ann".into(),
            account: Some("physics".into()),
            processors,
            ..Usage::default()
        }
    }

    /// A lien and a charge whose writes were never committed are undone by a reload:
    /// the balance is what the store recorded.
    #[test]
    fn a_reload_forgets_what_was_not_committed() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger(dir.path(), "100");
        let before = ledger.balance("physics", 0);
        let held = ledger.hold("j1", &usage(1), Some(100), 0).unwrap();
        assert!(!held.is_empty());
        assert_ne!(ledger.balance("physics", 0), before);
        ledger.reload().unwrap();
        assert_eq!(ledger.balance("physics", 0), before);
        // Held and committed, then settled without committing: the lien is back, the
        // charge gone.
        ledger
            .store
            .write(&ledger.hold("j2", &usage(1), Some(100), 0).unwrap())
            .unwrap();
        let with_lien = ledger.balance("physics", 0);
        let charged = ledger.settle("j2", &usage(1), 50, 50);
        assert!(!charged.is_empty());
        assert_ne!(ledger.balance("physics", 50), with_lien);
        ledger.reload().unwrap();
        assert_eq!(ledger.balance("physics", 50), with_lien);
    }

    #[test]
    fn quotes_check_funds_unless_cost_only_and_guarantees_are_honoured() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger(dir.path(), "100");
        // 4 processors × 0.01 × 3600 = 144 > 100.
        let request = QuoteRequest {
            usage: usage(4),
            duration: 3600,
            ..QuoteRequest::default()
        };
        let refused = ledger.quote(request.clone(), 0).unwrap_err();
        assert!(matches!(refused, AccountingError::InsufficientFunds(ref m) if m.contains("144")));
        let cost = ledger
            .quote(
                QuoteRequest {
                    cost_only: true,
                    ..request.clone()
                },
                0,
            )
            .unwrap();
        assert_eq!(cost.price.amount, m("144"));
        // A cheaper guaranteed rate, then the job is charged at it.
        let guaranteed = ledger
            .quote(
                QuoteRequest {
                    guarantee: true,
                    object: Some("D.7".into()),
                    overrides: vec![RateOverride {
                        kind: "processors".into(),
                        name: None,
                        rate: m("0.001"),
                    }],
                    ..request
                },
                0,
            )
            .unwrap();
        assert_eq!(guaranteed.price.amount, m("14.4"));
        assert!(guaranteed.id.is_some() && guaranteed.usage_record.is_some());
        let held = ledger.hold("D.7", &usage(4), Some(3600), 10).unwrap();
        ledger.store.write(&held).unwrap();
        assert_eq!(ledger.balance("physics", 10).held, m("14.4"));
        let charged = ledger.settle("D.7", &usage(4), 1800, 20);
        ledger.store.write(&charged).unwrap();
        let balance = ledger.balance("physics", 20);
        assert_eq!(
            balance.charged,
            m("7.2"),
            "half an hour at the guaranteed rate"
        );
        assert_eq!(balance.held, Money::ZERO);
        assert_eq!(balance.available, m("92.8"));
        // Reopened from the store: the same balance, the quote still known.
        drop(ledger);
        let again = self::ledger(dir.path(), "100");
        assert_eq!(again.balance("physics", 20).available, m("92.8"));
        let records = again.usage_records().unwrap();
        assert_eq!(records.iter().filter(|r| r.kind == "charge").count(), 1);
    }

    #[test]
    fn a_start_without_funds_is_refused_until_funds_are_added() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger(dir.path(), "1");
        let refused = ledger.hold("D.1", &usage(1), Some(3600), 0).unwrap_err();
        assert!(matches!(refused, AccountingError::InsufficientFunds(_)));
        ledger
            .allocate(
                Allocation {
                    account: "physics".into(),
                    amount: m("100"),
                    start: None,
                    end: None,
                },
                0,
            )
            .unwrap();
        assert!(ledger.hold("D.1", &usage(1), Some(3600), 0).is_ok());
        let outsider = Usage {
            user: "eve".into(),
            ..usage(1)
        };
        assert!(matches!(
            ledger.hold("D.2", &outsider, Some(10), 0),
            Err(AccountingError::Invalid(_))
        ));
    }

    #[test]
    fn a_check_holds_nothing_and_a_hold_anyway_goes_past_the_balance() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger(dir.path(), "1");
        // 1 processor for 3600 s is 36, more than the account has.
        let refused = ledger.hold_for("vm/a", &usage(1), 3600, 0, Hold::Check);
        assert!(matches!(
            refused,
            Err(AccountingError::InsufficientFunds(_))
        ));
        assert!(
            ledger
                .hold_for("vm/a", &usage(1), 60, 0, Hold::Check)
                .unwrap()
                .is_empty()
        );
        assert_eq!(ledger.balance("physics", 0).held, Money::ZERO);
        let held = ledger
            .hold_for("vm/a", &usage(1), 3600, 0, Hold::Anyway)
            .unwrap();
        assert_eq!(held.len(), 1);
        assert_eq!(ledger.balance("physics", 0).available, m("-35"));
        // Past the balance, never past membership.
        let outsider = Usage {
            user: "eve".into(),
            ..usage(1)
        };
        assert!(matches!(
            ledger.hold_for("vm/b", &outsider, 1, 0, Hold::Anyway),
            Err(AccountingError::Invalid(_))
        ));
    }

    fn terms(seconds: Seconds, now: Seconds) -> LienTerms {
        LienTerms {
            seconds,
            now,
            how: Hold::Record,
        }
    }

    #[test]
    fn a_renewal_charges_and_holds_again_in_one_change() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger(dir.path(), "100");
        ledger
            .store
            .write(
                &ledger
                    .hold_for("vm/a", &usage(1), 60, 0, Hold::Record)
                    .unwrap(),
            )
            .unwrap();
        let (writes, held) = ledger.renew("vm/a", &usage(1), 70, terms(60, 70));
        assert!(held.is_ok());
        ledger.store.write(&writes).unwrap();
        let balance = ledger.balance("physics", 70);
        assert_eq!((balance.charged, balance.held), (m("0.7"), m("0.6")));
        // Reopened: the new lien is what the store kept.
        let store = ledger.store.clone();
        drop(ledger);
        let again = Ledger::open(config("100"), store).unwrap();
        assert_eq!(again.balance("physics", 70).held, m("0.6"));
        // Too little left for the next: charged all the same, nothing held.
        let (writes, held) = again.renew("vm/a", &usage(1), 10_000, terms(10_000, 80));
        assert!(matches!(held, Err(AccountingError::InsufficientFunds(_))));
        again.store.write(&writes).unwrap();
        let balance = again.balance("physics", 80);
        assert_eq!((balance.charged, balance.held), (m("100.7"), Money::ZERO));
    }

    #[test]
    fn with_overdraft_allowed_a_job_starts_and_the_balance_goes_negative() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(drover_store::SqliteStore::open(&dir.path().join("a.db")).unwrap());
        let ledger = Ledger::open(
            AccountingConfig {
                allow_overdraft: true,
                ..config("1")
            },
            store,
        )
        .unwrap();
        assert!(ledger.hold("D.1", &usage(1), Some(3600), 0).is_ok());
        assert_eq!(ledger.balance("physics", 0).available, m("-35"));
    }

    #[test]
    fn concurrent_ends_charge_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Arc::new(ledger(dir.path(), "1000000"));
        let jobs = 64;
        for j in 0..jobs {
            let held = ledger
                .hold(&format!("D.{j}"), &usage(3), Some(100), 0)
                .unwrap();
            ledger.store.write(&held).unwrap();
        }
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let ledger = ledger.clone();
                std::thread::spawn(move || {
                    for j in (t..jobs).step_by(8) {
                        let writes = ledger.settle(&format!("D.{j}"), &usage(3), 7 + j as i64, 50);
                        ledger.store.write(&writes).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let charges: Money = ledger
            .usage_records()
            .unwrap()
            .iter()
            .filter(|r| r.kind == "charge")
            .map(|r| r.charge)
            .sum();
        // 3 × 0.01 × Σ (7 + j) for j < 64.
        let expected = m("0.03").times_count((0..64).map(|j| 7 + j).sum());
        assert_eq!(charges, expected);
        let balance = ledger.balance("physics", 50);
        assert_eq!(balance.held, Money::ZERO);
        assert_eq!(balance.available, m("1000000") - expected);
    }
}
