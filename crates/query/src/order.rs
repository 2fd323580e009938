//! The one total order over JSON values, and its byte encoding.
//!
//! Values first compare by kind, in this order:
//!
//! | rank | kind | within the kind |
//! |---|---|---|
//! | 1 | missing (the path resolves to nothing) | |
//! | 2 | `null` | |
//! | 3 | number | numerically, as IEEE doubles (`1` equals `1.0`) |
//! | 4 | date: a string that is a UTC wire date | by instant (`… UTC` and `… GMT` of one instant are equal) |
//! | 5 | any other string | by UTF-8 bytes (= by code point) |
//! | 6 | object | as the list of its (key, value) pairs sorted by key, pair by pair; a prefix first |
//! | 7 | array | element by element; a prefix first |
//! | 8 | boolean | `false` before `true` |
//!
//! Objects ignore the order of their keys, because PostgreSQL's `jsonb` does not keep it.
//!
//! [`encode_key`] writes a value as bytes whose lexicographic order (what SQLite's BLOB
//! and PostgreSQL's `bytea` comparisons use) is exactly [`compare`]. The stores index
//! these bytes, which is why SQL can sort and filter on indexed paths without ever
//! disagreeing with the evaluator.

use std::cmp::Ordering;

use drover_domain::dates;
use serde_json::Value;

use crate::sort_value::SortValue;
use crate::view::DocView;

/// The kind of a value in the order above; the discriminant is the key's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Kind {
    Missing = 1,
    Null = 2,
    Number = 3,
    Date = 4,
    String = 5,
    Object = 6,
    Array = 7,
    Bool = 8,
}

impl Kind {
    /// The kind of an optional value (`None` = missing).
    pub fn of<'a, V: DocView<'a>>(value: Option<V>) -> Kind {
        value.map_or(Kind::Missing, |v| v.kind())
    }

    /// The first key byte of this kind; every key of the kind is in `[tag, tag + 1)`.
    pub fn tag(self) -> u8 {
        self as u8
    }
}

/// Seconds since the epoch when `s` is a UTC wire date.
pub fn date_seconds(s: &str) -> Option<i64> {
    if !dates::looks_like_utc_date(s) {
        return None;
    }
    dates::parse_utc(s).map(|t| t.as_second())
}

/// A number as the double it compares as; `-0.0` is `0.0`.
pub fn number_f64(n: &serde_json::Number) -> f64 {
    let f = n.as_f64().unwrap_or(0.0);
    if f == 0.0 { 0.0 } else { f }
}

/// Compares two optional values (`None` = missing) in the total order.
pub fn compare<'a, 'b, A: DocView<'a>, B: DocView<'b>>(a: Option<A>, b: Option<B>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => compare_values(a, b),
        _ => Kind::of(a).cmp(&Kind::of(b)),
    }
}

/// [`compare`] of a document's value with a kept sort value, the quicker way when the
/// document's representation has one ([`DocView::compare_kept`]).
#[inline]
pub fn compare_with_kept<'a, V: DocView<'a>>(a: Option<V>, kept: Option<&SortValue>) -> Ordering {
    match (a, kept) {
        (Some(a), Some(kept)) => a
            .compare_kept(kept)
            .unwrap_or_else(|| compare_values(a, kept)),
        _ => Kind::of(a).cmp(&Kind::of(kept)),
    }
}

/// Compares two values in the total order.
pub fn compare_values<'a, 'b, A: DocView<'a>, B: DocView<'b>>(a: A, b: B) -> Ordering {
    let kind = a.kind();
    let by_kind = kind.cmp(&b.kind());
    if by_kind != Ordering::Equal {
        return by_kind;
    }
    let text = |a: Option<&[u8]>, b: Option<&[u8]>| {
        compare_bytes(a.unwrap_or_default(), b.unwrap_or_default())
    };
    match kind {
        Kind::Missing | Kind::Null => Ordering::Equal,
        Kind::Number => a
            .number()
            .unwrap_or(0.0)
            .total_cmp(&b.number().unwrap_or(0.0)),
        Kind::Date => a.date().cmp(&b.date()),
        Kind::String => text(a.text_bytes(), b.text_bytes()),
        Kind::Bool => a.truth().cmp(&b.truth()),
        Kind::Array => {
            let (mut x, mut y) = (a.elements(), b.elements());
            loop {
                match (x.next(), y.next()) {
                    (Some(p), Some(q)) => {
                        let o = compare_values(p, q);
                        if o != Ordering::Equal {
                            return o;
                        }
                    }
                    (None, None) => return Ordering::Equal,
                    (None, Some(_)) => return Ordering::Less,
                    (Some(_), None) => return Ordering::Greater,
                }
            }
        }
        Kind::Object => {
            // Members already in key order (a narrow rendering's, a kept sort value's)
            // compare as they come, without a sorted copy of each object.
            if a.keys_in_order() && b.keys_in_order() {
                compare_members(a.entries(), b.entries(), compare_values)
            } else {
                compare_members(
                    sorted_entries(a).into_iter(),
                    sorted_entries(b).into_iter(),
                    compare_values,
                )
            }
        }
    }
}

/// Compares two objects' members, each in key order: key by key, then value by value
/// (by `values`), the shorter first when one is the other's beginning.
pub fn compare_members<'a, 'b, A, B>(
    mut x: impl Iterator<Item = (&'a str, A)>,
    mut y: impl Iterator<Item = (&'b str, B)>,
    values: impl Fn(A, B) -> Ordering,
) -> Ordering {
    loop {
        match (x.next(), y.next()) {
            (Some((kx, vx)), Some((ky, vy))) => {
                let o = compare_bytes(kx.as_bytes(), ky.as_bytes()).then_with(|| values(vx, vy));
                if o != Ordering::Equal {
                    return o;
                }
            }
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
        }
    }
}

/// Compares byte strings as `Ord` does, but never hands `memcmp` an empty one: glibc's
/// AVX-512 `memcmp` (Debian 12's) reads even zero bytes with a masked load at the
/// slice's address, an empty slice's address is a dangling one on an unmapped page, and
/// the load then costs a fault-suppression assist of hundreds of cycles. A list sorted
/// by a member most jobs leave empty spent 44% of its scan there.
#[inline]
pub fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    if a.is_empty() || b.is_empty() {
        a.len().cmp(&b.len())
    } else {
        a.cmp(b)
    }
}

/// The members of an object sorted by key bytes (objects compare regardless of key order).
fn sorted_entries<'a, V: DocView<'a>>(object: V) -> Vec<(&'a str, V)> {
    let mut entries: Vec<_> = object.entries().collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    entries
}

/// Writes the order-preserving key of an optional value (`None` = missing).
pub fn encode_key(value: Option<&Value>, out: &mut Vec<u8>) {
    match value {
        None => out.push(Kind::Missing.tag()),
        Some(v) => encode_value(v, out),
    }
}

/// The order-preserving key of an optional value, as a new vector.
pub fn key(value: Option<&Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_key(value, &mut out);
    out
}

/// The key of every date at `seconds` (spellings of one instant share it).
pub fn date_prefix(seconds: i64) -> Vec<u8> {
    let mut out = vec![Kind::Date.tag()];
    out.extend_from_slice(&((seconds as u64) ^ (1 << 63)).to_be_bytes());
    out
}

const END: u8 = 0x00;
const FIELD: u8 = 0x01;

fn encode_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.push(Kind::Null.tag()),
        Value::Number(n) => {
            out.push(Kind::Number.tag());
            let bits = number_f64(n).to_bits();
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits | (1 << 63)
            };
            out.extend_from_slice(&ordered.to_be_bytes());
        }
        Value::String(s) => match date_seconds(s) {
            // Fixed length, so self-delimiting inside arrays and objects too.
            Some(seconds) => out.extend_from_slice(&date_prefix(seconds)),
            None => {
                out.push(Kind::String.tag());
                encode_str(s, out);
            }
        },
        Value::Object(_) => {
            out.push(Kind::Object.tag());
            for (k, v) in sorted_entries(value) {
                out.push(FIELD);
                encode_str(k, out);
                encode_value(v, out);
            }
            out.push(END);
        }
        Value::Array(items) => {
            out.push(Kind::Array.tag());
            for item in items {
                encode_value(item, out);
            }
            out.push(END);
        }
        Value::Bool(b) => {
            out.push(Kind::Bool.tag());
            out.push(u8::from(*b));
        }
    }
}

/// Bytes of `s` with 0x00 escaped as 0x00 0xFF, then the terminator 0x00 0x01, so that a
/// string sorts before every longer string it is a prefix of.
fn encode_str(s: &str, out: &mut Vec<u8>) {
    for &b in s.as_bytes() {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-5i64..5).prop_map(|n| json!(n)),
            (-5.0f64..5.0).prop_map(|f| json!((f * 4.0).round() / 4.0)),
            prop::sample::select(vec![
                "",
                "a",
                "ab",
                "b",
                "a\u{0}",
                "é",
                "2026-01-01 00:00:00 UTC",
                "2026-01-01 00:00:00 GMT",
                "2025-06-30 12:00:00 UTC"
            ])
            .prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::vec((prop::sample::select(vec!["a", "b", "c"]), inner), 0..3)
                    .prop_map(|kv| {
                        Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                    }),
            ]
        })
    }

    proptest! {
        #[test]
        fn bytes_compare_as_ord_does(
            a in proptest::collection::vec(0u8..4, 0..4),
            b in proptest::collection::vec(0u8..4, 0..4),
        ) {
            prop_assert_eq!(compare_bytes(&a, &b), a.cmp(&b));
        }

        #[test]
        fn key_bytes_order_is_the_value_order(a in arb_value(), b in arb_value()) {
            prop_assert_eq!(key(Some(&a)).cmp(&key(Some(&b))), compare_values(&a, &b));
        }

        #[test]
        fn order_is_antisymmetric(a in arb_value(), b in arb_value()) {
            prop_assert_eq!(compare_values(&a, &b), compare_values(&b, &a).reverse());
        }

        /// Objects whose members come in key order compare without being sorted: the
        /// same answer as with their members in any other order.
        #[test]
        fn members_in_key_order_compare_as_any_order(a in arb_value(), b in arb_value()) {
            let reversed = |v: &Value| match v {
                Value::Object(m) => {
                    Value::Object(m.iter().rev().map(|(k, v)| (k.clone(), v.clone())).collect())
                }
                other => other.clone(),
            };
            let sorted = |v: &Value| match v {
                Value::Object(m) => {
                    let mut members: Vec<_> = m.iter().collect();
                    members.sort_by(|x, y| x.0.as_bytes().cmp(y.0.as_bytes()));
                    Value::Object(members.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                }
                other => other.clone(),
            };
            let expected = compare_values(&a, &b);
            prop_assert_eq!(compare_values(&sorted(&a), &sorted(&b)), expected);
            prop_assert_eq!(compare_values(&reversed(&a), &sorted(&b)), expected);
            prop_assert_eq!(compare_values(&sorted(&a), &reversed(&b)), expected);
        }
    }

    #[test]
    fn kinds_in_documented_order() {
        let ascending = [
            None,
            Some(json!(null)),
            Some(json!(-1e300)),
            Some(json!(2)),
            Some(json!("1999-01-01 00:00:00 UTC")),
            Some(json!("2030-01-01 00:00:00 UTC")),
            Some(json!("")),
            Some(json!("zzz")),
            Some(json!({})),
            Some(json!({"a": 1})),
            Some(json!([])),
            Some(json!([1])),
            Some(json!(false)),
            Some(json!(true)),
        ];
        for pair in ascending.windows(2) {
            assert_eq!(
                compare(pair[0].as_ref(), pair[1].as_ref()),
                Ordering::Less,
                "{pair:?}"
            );
            assert!(key(pair[0].as_ref()) < key(pair[1].as_ref()), "{pair:?}");
        }
    }

    #[test]
    fn equal_values_with_different_spelling() {
        assert_eq!(compare_values(&json!(1), &json!(1.0)), Ordering::Equal);
        assert_eq!(compare_values(&json!(-0.0), &json!(0)), Ordering::Equal);
        assert_eq!(key(Some(&json!(1))), key(Some(&json!(1.0))));
        let x: Value = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
        let y: Value = serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap();
        assert_eq!(compare_values(&x, &y), Ordering::Equal);
        assert_eq!(key(Some(&x)), key(Some(&y)));
    }

    #[test]
    fn dates_order_by_instant() {
        let a = json!("2026-01-01 10:00:00 UTC");
        let b = json!("2026-01-01 09:59:59 GMT");
        assert_eq!(compare_values(&b, &a), Ordering::Less);
        assert_eq!(
            date_prefix(date_seconds("2026-01-01 10:00:00 UTC").unwrap()),
            key(Some(&a))
        );
        let gmt = json!("2026-01-01 10:00:00 GMT");
        assert_eq!(compare_values(&a, &gmt), Ordering::Equal);
        assert_eq!(key(Some(&a)), key(Some(&gmt)));
    }
}
