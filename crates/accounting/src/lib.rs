//! The embedded accounting manager (issue #8), without HTTP.
//!
//! - [`money`]: exact decimal amounts.
//! - [`model`]: accounts, allocations, rates, quotes, usage records.
//! - [`pricing`]: what work costs at given rates, component by component.
//! - [`ledger`]: balances, quotes, liens and charges, recorded in the store.
//! - [`quotes`]: quotes as callers ask for them: who may price what, at which rates.

pub mod ledger;
pub mod model;
pub mod money;
pub mod pricing;
pub mod quotes;

pub use ledger::{AccountingConfig, AccountingError, Hold, Ledger, QuoteRequest, VmWhenDry};
pub use money::Money;
pub use quotes::{Asker, QuoteEnd, QuoteOrder};
