//! Money: a fixed-point decimal with six places (micro-units) in an `i128`. Sums, rates
//! times durations and comparisons are exact; nothing goes through floating point. On the
//! wire an amount is a JSON number written from its exact decimal text (for up to 15
//! significant digits the number read back is the same decimal). Arithmetic saturates:
//! an amount past what an `i128` of micro-units holds (about 1.7e32) stays at that bound,
//! so a huge rate, count or duration prices as too much, never wraps around to little.

use std::fmt;
use std::ops::{Add, AddAssign, Neg, Sub, SubAssign};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Decimal places kept.
pub const PLACES: u32 = 6;
const SCALE: i128 = 10i128.pow(PLACES);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(i128);

impl Money {
    pub const ZERO: Money = Money(0);

    pub fn from_units(units: i64) -> Money {
        Money(i128::from(units) * SCALE)
    }

    /// Parses `12`, `-0.5`, `3.141592`; more than six decimals is refused (not rounded).
    pub fn parse(text: &str) -> Result<Money, String> {
        let text = text.trim();
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        let valid = |s: &str| s.chars().all(|c| c.is_ascii_digit());
        if whole.is_empty() && fraction.is_empty()
            || !valid(whole)
            || !valid(fraction)
            || whole.len() > 24
        {
            return Err(format!("'{text}' is not a decimal amount"));
        }
        if fraction.len() > PLACES as usize {
            return Err(format!("'{text}' has more than {PLACES} decimal places"));
        }
        let whole: i128 = if whole.is_empty() {
            0
        } else {
            whole
                .parse()
                .map_err(|_| format!("'{text}' is too large"))?
        };
        let mut fraction_value: i128 = if fraction.is_empty() {
            0
        } else {
            fraction.parse().unwrap_or(0)
        };
        for _ in fraction.len()..PLACES as usize {
            fraction_value *= 10;
        }
        let value = whole * SCALE + fraction_value;
        Ok(Money(if negative { -value } else { value }))
    }

    /// From a JSON number or numeric string, exactly as written.
    pub fn from_json(value: &serde_json::Value) -> Result<Money, String> {
        match value {
            serde_json::Value::Number(n) => Money::parse(&n.to_string()),
            serde_json::Value::String(s) => Money::parse(s),
            other => Err(format!("expected a decimal amount, got {other}")),
        }
    }

    /// The amount as a JSON number.
    pub fn to_json(self) -> serde_json::Value {
        let text = self.to_string();
        text.parse::<serde_json::Number>()
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::String(text))
    }

    /// `self` × `factor`, rounded half away from zero to six places.
    pub fn times(self, factor: Money) -> Money {
        let Some(product) = self.0.checked_mul(factor.0) else {
            return Money::saturated((self.0 < 0) != (factor.0 < 0));
        };
        let half = SCALE / 2;
        Money(if product >= 0 {
            product.saturating_add(half) / SCALE
        } else {
            product.saturating_sub(half) / SCALE
        })
    }

    /// `self` × an integer count.
    pub fn times_count(self, count: i64) -> Money {
        Money(self.0.saturating_mul(i128::from(count)))
    }

    /// The bound an amount saturates at, below zero when `negative`.
    fn saturated(negative: bool) -> Money {
        Money(if negative { -i128::MAX } else { i128::MAX })
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }

    pub fn max(self, other: Money) -> Money {
        if self >= other { self } else { other }
    }

    pub fn min(self, other: Money) -> Money {
        if self <= other { self } else { other }
    }
}

impl fmt::Display for Money {
    /// Plain decimal, trailing zeros of the fraction dropped: `12`, `0.5`, `-3.000001`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let value = self.0.unsigned_abs();
        let whole = value / SCALE as u128;
        let fraction = value % SCALE as u128;
        if fraction == 0 {
            write!(f, "{sign}{whole}")
        } else {
            let digits = format!("{fraction:06}");
            write!(f, "{sign}{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

impl Add for Money {
    type Output = Money;
    fn add(self, other: Money) -> Money {
        Money(self.0.saturating_add(other.0))
    }
}

impl Sub for Money {
    type Output = Money;
    fn sub(self, other: Money) -> Money {
        Money(self.0.saturating_sub(other.0))
    }
}

impl AddAssign for Money {
    fn add_assign(&mut self, other: Money) {
        self.0 = self.0.saturating_add(other.0);
    }
}

impl SubAssign for Money {
    fn sub_assign(&mut self, other: Money) {
        self.0 = self.0.saturating_sub(other.0);
    }
}

impl Neg for Money {
    type Output = Money;
    fn neg(self) -> Money {
        Money(self.0.saturating_neg())
    }
}

impl std::iter::Sum for Money {
    fn sum<I: Iterator<Item = Money>>(iter: I) -> Money {
        iter.fold(Money::ZERO, Add::add)
    }
}

/// Stored as its decimal text, so a stored amount is exact in either database.
impl Serialize for Money {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Money::from_json(&value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(text: &str) -> Money {
        Money::parse(text).unwrap()
    }

    #[test]
    fn parses_and_prints_exactly() {
        for (text, shown) in [
            ("12", "12"),
            ("0.5", "0.5"),
            ("-3.000001", "-3.000001"),
            (".25", "0.25"),
            ("+7.10", "7.1"),
            ("123456789012.123456", "123456789012.123456"),
        ] {
            assert_eq!(m(text).to_string(), shown);
        }
        assert!(
            Money::parse("1.0000001")
                .unwrap_err()
                .contains("decimal places")
        );
        assert!(Money::parse("1e3").is_err());
        assert!(Money::parse("").is_err());
        assert!(Money::parse("-").is_err());
    }

    #[test]
    fn arithmetic_is_exact() {
        // 0.1 + 0.2 is 0.3, and a third of a cent per second for a day is exact.
        assert_eq!(m("0.1") + m("0.2"), m("0.3"));
        assert_eq!(m("0.003333").times_count(86_400), m("287.9712"));
        assert_eq!(m("1.5").times(m("2.5")), m("3.75"));
        assert_eq!(
            m("0.000001").times(m("0.5")),
            m("0.000001"),
            "half rounds away from zero"
        );
        let total: Money = (0..1000).map(|_| m("0.001")).sum();
        assert_eq!(total, m("1"));
    }

    #[test]
    fn huge_amounts_saturate_instead_of_wrapping() {
        let huge = m("999999999999999999999999");
        let most = huge.times_count(i64::MAX).times_count(i64::MAX);
        assert!(most > huge, "{most}");
        assert_eq!(most, most + huge, "saturated");
        assert_eq!(huge.times(huge).times(huge), most);
        assert!((-huge).times(huge).times(huge).is_negative());
        assert!((-most - most).is_negative());
    }

    #[test]
    fn json_round_trips() {
        let value = serde_json::json!(12.345678);
        let amount = Money::from_json(&value).unwrap();
        assert_eq!(amount, m("12.345678"));
        assert_eq!(amount.to_json(), value);
        assert_eq!(
            serde_json::to_value(amount).unwrap(),
            serde_json::json!("12.345678")
        );
        let back: Money = serde_json::from_value(serde_json::json!("12.345678")).unwrap();
        assert_eq!(back, amount);
    }
}
