//! Wire shapes: values that several resources render alike ([`date`]), and the shapes
//! of events: [`events`] (JSON, versions 1 and 3) and [`xml`] (version-1 creation).

pub mod events;
pub mod xml;

use drover_domain::dates::{Timestamp, WireDates};
use serde_json::{Value, json};

/// What a time at or before the epoch renders as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zero {
    /// A date like any other (reservations, jobs, reports, containers).
    Date,
    /// `null`: the time was never set (nodes keep 0 for "never").
    Null,
}

/// A date in the shape of `version` (`null` when absent or out of range).
pub fn date(dates: &WireDates, version: u32, seconds: Option<i64>, zero: Zero) -> Value {
    let seconds = seconds.filter(|s| *s > 0 || zero == Zero::Date);
    match seconds.map(Timestamp::from_second) {
        Some(Ok(t)) => json!(dates.format(t, version)),
        _ => Value::Null,
    }
}
