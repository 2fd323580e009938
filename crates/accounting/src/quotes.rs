//! Quotes as callers ask for them (spec 2.18, 4.14): who may price what, at which rates
//! and over which window. The ledger prices each thing ([`Ledger::quote`]).
//!
//! - A quote is for an accounting user (the caller's `proxy-user`): it prices that
//!   user's work only. Accounting administrators (`[accounting] admins`) and callers
//!   whose permission covers everyone may price others' work, and at other rates.
//! - A guaranteed quote holds its price; a cost-only one only prices: not both.
//! - Without an end, a quote ends when its charge and its grace do.

use crate::ledger::{AccountingError, Ledger, QuoteAnswer, QuoteRequest};
use crate::model::{RateOverride, Seconds, Usage};

/// Who asks for a quote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asker {
    /// The accounting user the quote is for.
    pub user: String,
    /// Who asks (the caller, after any proxying).
    pub caller: String,
    /// Whether the caller's permission covers everyone.
    pub over_all: bool,
}

/// When a quote ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuoteEnd {
    /// Not said: when the charge and its grace end, from the start.
    WithTheCharge,
    /// Never.
    Unbounded,
    At(Seconds),
}

/// A quote asked for: the things priced, and the terms they are priced on.
#[derive(Debug, Clone, PartialEq)]
pub struct QuoteOrder {
    /// What each thing priced uses, and its name (a job's id, a service's name).
    pub items: Vec<(Usage, Option<String>)>,
    /// The seconds charged, and the seconds of grace after them.
    pub duration: Seconds,
    pub grace: Seconds,
    /// From when (none: from now).
    pub start: Option<Seconds>,
    pub end: QuoteEnd,
    /// Charge rates overriding the configured ones, when asked for.
    pub overrides: Option<Vec<RateOverride>>,
    pub guarantee: bool,
    pub cost_only: bool,
    pub description: Option<String>,
}

impl Ledger {
    /// Whether `asker` may price others' work, and at other rates: an accounting
    /// administrator, or a caller whose permission covers everyone.
    pub fn administers(&self, asker: &Asker) -> bool {
        asker.over_all || self.is_admin(&asker.caller)
    }

    /// Prices each thing of `order` for `asker`, in order (a guaranteed quote is recorded
    /// as it is made). Blocking: a guaranteed quote writes to the store.
    pub fn quote_for(
        &self,
        asker: &Asker,
        order: QuoteOrder,
        now: Seconds,
    ) -> Result<Vec<QuoteAnswer>, AccountingError> {
        if order.guarantee && order.cost_only {
            return Err(AccountingError::Invalid(vec![
                "guarantee and cost-only cannot be given together".into(),
            ]));
        }
        let administers = self.administers(asker);
        if order.overrides.is_some() && !administers {
            return Err(AccountingError::Forbidden(
                "rate: only accounting administrators may override charge rates".into(),
            ));
        }
        // What is priced (and, guaranteed, later charged) is the accounting user's own work.
        if let Some((usage, _)) = order
            .items
            .iter()
            .find(|(usage, _)| usage.user != asker.user && !administers)
        {
            return Err(AccountingError::Forbidden(format!(
                "user: '{}' is not the accounting user '{}'; only accounting administrators \
                 may quote for others",
                usage.user, asker.user
            )));
        }
        let end = match order.end {
            QuoteEnd::WithTheCharge => {
                Some(order.start.unwrap_or(now) + order.duration + order.grace)
            }
            QuoteEnd::Unbounded => None,
            QuoteEnd::At(end) => Some(end),
        };
        let overrides = order.overrides.unwrap_or_default();
        order
            .items
            .into_iter()
            .map(|(usage, object)| {
                let request = QuoteRequest {
                    usage,
                    object,
                    duration: order.duration,
                    overrides: overrides.clone(),
                    guarantee: order.guarantee,
                    cost_only: order.cost_only,
                    start: order.start,
                    end,
                    description: order.description.clone(),
                };
                self.quote(request, now)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(dir: &std::path::Path) -> Ledger {
        crate::ledger::tests::ledger(dir, "1000")
    }

    fn asker(caller: &str) -> Asker {
        Asker {
            user: "ann".into(),
            caller: caller.into(),
            over_all: false,
        }
    }

    fn order(users: &[&str]) -> QuoteOrder {
        let items = users
            .iter()
            .map(|user| {
                let usage = Usage {
                    user: user.to_string(),
                    account: Some("physics".into()),
                    processors: 2,
                    ..Usage::default()
                };
                (usage, None)
            })
            .collect();
        QuoteOrder {
            items,
            duration: 100,
            grace: 0,
            start: None,
            end: QuoteEnd::WithTheCharge,
            overrides: None,
            guarantee: false,
            cost_only: false,
            description: None,
        }
    }

    #[test]
    fn a_user_prices_their_own_work_at_the_standard_rates() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger(dir.path());
        let priced = ledger.quote_for(&asker("ann"), order(&["ann", "ann"]), 0);
        let amounts: Vec<String> = priced
            .unwrap()
            .iter()
            .map(|a| a.price.amount.to_string())
            .collect();
        assert_eq!(amounts, ["2", "2"], "2 processors × 0.01 × 100 each");

        let others = ledger.quote_for(&asker("ann"), order(&["ann", "bob"]), 0);
        assert!(
            matches!(others, Err(AccountingError::Forbidden(ref why)) if why.contains("'bob'")),
            "{others:?}"
        );
        let rates = QuoteOrder {
            overrides: Some(Vec::new()),
            ..order(&["ann"])
        };
        let refused = ledger.quote_for(&asker("ann"), rates.clone(), 0);
        assert!(matches!(refused, Err(AccountingError::Forbidden(_))));
        let both = QuoteOrder {
            guarantee: true,
            cost_only: true,
            ..order(&["ann"])
        };
        let refused = ledger.quote_for(&asker("ann"), both, 0);
        assert!(matches!(refused, Err(AccountingError::Invalid(_))));

        // An accounting administrator, or a caller over everyone, may do both.
        assert!(ledger.quote_for(&asker("boss"), rates.clone(), 0).is_ok());
        let over_all = Asker {
            over_all: true,
            ..asker("carol")
        };
        let bobs = QuoteOrder {
            cost_only: true, // bob is no member of physics
            ..order(&["bob"])
        };
        assert!(ledger.quote_for(&over_all, bobs, 0).is_ok());
    }
}
