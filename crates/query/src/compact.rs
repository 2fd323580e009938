//! A compact, read-only form of a JSON document for fast scanning.
//!
//! A `serde_json::Value` is a tree of heap allocations: finding `states.state` touches
//! a hash table, its entries and a key string in different places, each a likely cache
//! miss. A [`CompactDoc`] is one byte buffer in which a member lookup is a short linear
//! walk over adjacent bytes, and dates are recognised once, when the document is built.
//! The evaluator runs on it through [`DocView`], so its meaning is the same.
//!
//! Encoding (little-endian), one value, a tag byte then:
//! `0` null · `1` false · `2` true · `3` number: f64 · `4` number that is an i32: i32 ·
//! `5` string: u8 length, bytes · `6` long string: u32 length, bytes ·
//! `7` UTC date: i64 seconds, u8 length, bytes · `8` array: u32 payload length,
//! u32 count, values · `9`/`10` object: u32 payload length, u32 count, the [`key_hash`]
//! of every member's key (u32 each), the offset of every member from the end of the
//! table (u16 each for `9`, u32 for `10`), then per member its key length (u8, or 255
//! then u32), key bytes, value.
//!
//! `11` shaped object: u16 [`crate::shape`] id, u16 payload length, then per member
//! the u16 offset of its value from the end of the 5-byte header, then the values ·
//! `12` number that is an i8: i8 · `13` short array: u16 payload length, u16 count,
//! values.
//!
//! Objects are shaped when their key sequence can be interned (almost always: documents
//! of a collection repeat a few key sequences); a lookup is then one comparison against
//! the path segment's inline cache and a jump, and no key is stored in the document.
//! Otherwise (`9`/`10`) the table makes a lookup a scan of a few adjacent hashes and one
//! jump. The short forms keep documents small, since a scan over many documents is bound
//! by memory as much as by work.

use serde_json::Value;

use crate::filter::Filter;
use crate::order::{Kind, date_seconds, number_f64};
use crate::path::Segment;
use crate::scan::Prepared;
use crate::shape::{self, Shape};
use crate::view::DocView;

const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const F64: u8 = 3;
const I32: u8 = 4;
const STR8: u8 = 5;
const STR32: u8 = 6;
const DATE: u8 = 7;
const ARRAY: u8 = 8;
const OBJECT16: u8 = 9;
const OBJECT32: u8 = 10;
const SHAPED: u8 = 11;
const I8: u8 = 12;
const SHORT_ARRAY: u8 = 13;
/// Bytes before the member offsets of a shaped object.
const SHAPED_HEADER: usize = 5;

/// An immutable JSON document in the compact encoding.
#[derive(Clone, PartialEq)]
pub struct CompactDoc {
    bytes: Box<[u8]>,
}

impl CompactDoc {
    pub fn new(value: &Value) -> Self {
        let mut out = Vec::with_capacity(256);
        encode(value, &mut out);
        Self {
            bytes: out.into_boxed_slice(),
        }
    }

    /// The document's top-level value.
    pub fn root(&self) -> Compact<'_> {
        Compact {
            buf: &self.bytes,
            at: 0,
        }
    }

    /// Bytes used by the encoding.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }
}

impl std::fmt::Debug for CompactDoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompactDoc({} bytes)", self.bytes.len())
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn encode(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.push(NULL),
        Value::Bool(false) => out.push(FALSE),
        Value::Bool(true) => out.push(TRUE),
        Value::Number(n) => {
            let f = number_f64(n);
            // `number_f64` has already made -0.0 into 0.0.
            let (small, tiny) = (f as i32, f as i8);
            let integral = f64::from(small) == f;
            if integral && f64::from(tiny) == f {
                out.push(I8);
                out.push(tiny as u8);
            } else if integral {
                out.push(I32);
                out.extend_from_slice(&small.to_le_bytes());
            } else {
                out.push(F64);
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
        Value::String(s) => match date_seconds(s) {
            // A wire date is always 23 bytes long.
            Some(seconds) => {
                out.push(DATE);
                out.extend_from_slice(&seconds.to_le_bytes());
                out.push(s.len() as u8);
                out.extend_from_slice(s.as_bytes());
            }
            None if s.len() < 256 => {
                out.push(STR8);
                out.push(s.len() as u8);
                out.extend_from_slice(s.as_bytes());
            }
            None => {
                out.push(STR32);
                put_u32(out, s.len());
                out.extend_from_slice(s.as_bytes());
            }
        },
        Value::Array(items) => {
            let mut payload = Vec::new();
            items.iter().for_each(|item| encode(item, &mut payload));
            match (u16::try_from(payload.len()), u16::try_from(items.len())) {
                (Ok(length), Ok(count)) => {
                    out.push(SHORT_ARRAY);
                    out.extend_from_slice(&length.to_le_bytes());
                    out.extend_from_slice(&count.to_le_bytes());
                }
                _ => {
                    out.push(ARRAY);
                    put_u32(out, payload.len());
                    put_u32(out, items.len());
                }
            }
            out.extend_from_slice(&payload);
        }
        Value::Object(map) => {
            if encode_shaped(map, out) {
                return;
            }
            let mut members = Vec::new();
            let mut offsets = Vec::with_capacity(map.len());
            for (k, v) in map {
                offsets.push(members.len());
                if k.len() < 255 {
                    members.push(k.len() as u8);
                } else {
                    members.push(255);
                    put_u32(&mut members, k.len());
                }
                members.extend_from_slice(k.as_bytes());
                encode(v, &mut members);
            }
            let narrow = members.len() <= usize::from(u16::MAX);
            let width = if narrow { 2 } else { 4 };
            out.push(if narrow { OBJECT16 } else { OBJECT32 });
            put_u32(out, map.len() * (4 + width) + members.len());
            put_u32(out, map.len());
            for k in map.keys() {
                out.extend_from_slice(&key_hash(k).to_le_bytes());
            }
            for offset in offsets {
                if narrow {
                    out.extend_from_slice(&(offset as u16).to_le_bytes());
                } else {
                    put_u32(out, offset);
                }
            }
            out.extend_from_slice(&members);
        }
    }
}

/// Writes `map` as a shaped object, if its keys have (or get) a shape and its values fit
/// u16 offsets; answers whether it did.
fn encode_shaped(map: &serde_json::Map<String, Value>, out: &mut Vec<u8>) -> bool {
    let Some(id) = shape::intern(map.keys().map(String::as_str)) else {
        return false;
    };
    // Shape ids fit u16: there are at most 65,536 shapes.
    let Ok(id) = u16::try_from(id) else {
        return false;
    };
    let table = 2 * map.len();
    let mut values = Vec::new();
    let mut offsets = Vec::with_capacity(map.len());
    for value in map.values() {
        offsets.push(table + values.len());
        encode(value, &mut values);
    }
    if table + values.len() > usize::from(u16::MAX) {
        return false;
    }
    out.push(SHAPED);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&((table + values.len()) as u16).to_le_bytes());
    for offset in offsets {
        out.extend_from_slice(&(offset as u16).to_le_bytes());
    }
    out.extend_from_slice(&values);
    true
}

/// How many documents ahead [`CompactDocs::matching`] loads, and how much of each.
const PREFETCH_DOCUMENTS: usize = 8;
const PREFETCH_LINES: usize = 8;

/// Many compact documents in one buffer, one after another: a scan reads memory in
/// order, which the processor streams, instead of chasing one allocation per document.
#[derive(Default)]
pub struct CompactDocs {
    bytes: Vec<u8>,
    /// Where each document starts in `bytes`; its end is the next one's start.
    starts: Vec<usize>,
}

impl CompactDocs {
    pub fn push(&mut self, value: &Value) {
        self.starts.push(self.bytes.len());
        encode(value, &mut self.bytes);
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Bytes used by the encodings.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// Document `i`'s top-level value.
    pub fn root(&self, i: usize) -> Compact<'_> {
        let end = self.starts.get(i + 1).copied().unwrap_or(self.bytes.len());
        Compact {
            buf: &self.bytes[self.starts[i]..end],
            at: 0,
        }
    }

    /// The positions of the documents that match `filter`, in order.
    ///
    /// Even in order, a scan waits on memory: the evaluator reads a few scattered bytes
    /// of each document, too little for the processor to see a stream. This loads
    /// documents a few ahead of the one being evaluated, so that several loads are in
    /// flight at once (about 1.25 times faster over a million documents; `scripts/bench`).
    /// The filter runs [`Prepared`].
    pub fn matching<'d>(&'d self, filter: &'d Filter) -> impl Iterator<Item = usize> + 'd {
        let prepared = Prepared::new(filter);
        (0..self.len()).filter(move |&i| {
            if let Some(&ahead) = self.starts.get(i + PREFETCH_DOCUMENTS) {
                prefetch(&self.bytes[ahead..], PREFETCH_LINES);
            }
            prepared.matches(self.root(i))
        })
    }
}

fn prefetch(bytes: &[u8], lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let start = bytes.as_ptr().cast::<i8>();
        for line in 0..bytes.len().div_ceil(64).min(lines) {
            // SAFETY: a prefetch is only a hint: it never faults and changes no memory.
            unsafe { _mm_prefetch(start.wrapping_add(64 * line), _MM_HINT_T0) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, lines);
}

/// The 32-bit FNV-1a hash of a member key, as stored in object tables.
pub fn key_hash(key: &str) -> u32 {
    key.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// A value inside a [`CompactDoc`].
#[derive(Clone, Copy)]
pub struct Compact<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Compact<'a> {
    #[inline(always)]
    fn tag(self) -> u8 {
        self.buf[self.at]
    }

    #[inline(always)]
    fn u16_at(self, at: usize) -> u16 {
        u16::from_le_bytes([self.buf[at], self.buf[at + 1]])
    }

    fn u32_at(self, at: usize) -> usize {
        u32::from_le_bytes(self.buf[at..at + 4].try_into().unwrap()) as usize
    }

    pub(crate) fn is_object(self) -> bool {
        matches!(self.tag(), OBJECT16 | OBJECT32 | SHAPED)
    }

    /// The shape of a shaped object.
    fn shape(self) -> Option<&'static Shape> {
        (self.tag() == SHAPED).then(|| shape::get(u32::from(self.u16_at(self.at + 1))))
    }

    /// The value in `slot` of a shaped object.
    #[inline(always)]
    fn shaped_member(self, slot: usize) -> Self {
        let o = self.at + SHAPED_HEADER + 2 * slot;
        let offset = usize::from(u16::from_le_bytes([self.buf[o], self.buf[o + 1]]));
        Compact {
            buf: self.buf,
            at: self.at + SHAPED_HEADER + offset,
        }
    }

    /// Bytes taken by the value at `at`.
    fn size_at(self, at: usize) -> usize {
        match self.buf[at] {
            F64 => 9,
            I32 => 5,
            I8 => 2,
            STR8 => 2 + usize::from(self.buf[at + 1]),
            STR32 => 5 + self.u32_at(at + 1),
            DATE => 10 + usize::from(self.buf[at + 9]),
            ARRAY | OBJECT16 | OBJECT32 => 9 + self.u32_at(at + 1),
            SHAPED => SHAPED_HEADER + usize::from(self.u16_at(at + 3)),
            SHORT_ARRAY => 5 + usize::from(self.u16_at(at + 1)),
            _ => 1,
        }
    }

    fn count(self) -> usize {
        match self.tag() {
            ARRAY | OBJECT16 | OBJECT32 => self.u32_at(self.at + 5),
            SHORT_ARRAY => usize::from(self.u16_at(self.at + 3)),
            SHAPED => self.shape().map_or(0, Shape::len),
            _ => 0,
        }
    }

    /// Where member `i` of this object (of `count` members) starts: its key length.
    fn member_at(self, i: usize, count: usize) -> usize {
        let offsets = self.at + 9 + 4 * count;
        if self.tag() == OBJECT16 {
            let members = offsets + 2 * count;
            let o = offsets + 2 * i;
            members + usize::from(u16::from_le_bytes([self.buf[o], self.buf[o + 1]]))
        } else {
            offsets + 4 * count + self.u32_at(offsets + 4 * i)
        }
    }

    /// The key of the member at `member_at` and where its value starts.
    fn key_at(self, member_at: usize) -> (&'a [u8], usize) {
        let (len, start) = match self.buf[member_at] {
            255 => (self.u32_at(member_at + 1), member_at + 5),
            short => (usize::from(short), member_at + 1),
        };
        (&self.buf[start..start + len], start + len)
    }

    /// The member `key` (whose [`key_hash`] is `hash`), for objects.
    pub fn get_hashed(self, key: &str, hash: u32) -> Option<Self> {
        if let Some(shape) = self.shape() {
            return shape.slot(key).map(|slot| self.shaped_member(slot));
        }
        if !self.is_object() {
            return None;
        }
        let count = self.u32_at(self.at + 5);
        let hashes = &self.buf[self.at + 9..self.at + 9 + 4 * count];
        let mut i = 0;
        while i < count {
            let h = &hashes[4 * i..4 * i + 4];
            if u32::from_le_bytes([h[0], h[1], h[2], h[3]]) == hash {
                let (found, value_at) = self.key_at(self.member_at(i, count));
                if same_bytes(found, key.as_bytes()) {
                    return Some(Compact {
                        buf: self.buf,
                        at: value_at,
                    });
                }
            }
            i += 1;
        }
        None
    }

    #[inline(always)]
    fn text_range(self) -> Option<(usize, usize)> {
        let at = self.at;
        match self.tag() {
            STR8 => Some((at + 2, usize::from(self.buf[at + 1]))),
            STR32 => Some((at + 5, self.u32_at(at + 1))),
            DATE => Some((at + 10, usize::from(self.buf[at + 9]))),
            _ => None,
        }
    }
}

/// What [`crate::scan`]'s prepared tests read of a value: the text of a string (dates
/// included), a number, or an array's elements.
pub(crate) enum Leaf<'a> {
    Text(&'a [u8]),
    Number(f64),
    Array(Elements<'a>),
    Other,
}

/// One step of a path from a value: the member a segment names, the elements of an
/// array (which the path goes on through), or nothing.
pub(crate) enum Step<'a> {
    Member(Compact<'a>),
    Elements(Elements<'a>),
    Nothing,
}

impl<'a> Compact<'a> {
    /// Where `segment` leads from this value (its array index, if any, aside).
    #[inline(always)]
    pub(crate) fn step(self, segment: &Segment) -> Step<'a> {
        match self.tag() {
            SHAPED => {
                let header = &self.buf[self.at..self.at + SHAPED_HEADER];
                let id = u32::from(u16::from_le_bytes([header[1], header[2]]));
                match segment.slot_in(id) {
                    Some(slot) => Step::Member(self.shaped_member(slot)),
                    None => Step::Nothing,
                }
            }
            OBJECT16 | OBJECT32 => self
                .get_hashed(&segment.name, segment.hash)
                .map_or(Step::Nothing, Step::Member),
            ARRAY | SHORT_ARRAY => Step::Elements(self.elements()),
            _ => Step::Nothing,
        }
    }

    #[inline(always)]
    pub(crate) fn leaf(self) -> Leaf<'a> {
        match self.tag() {
            STR8 | STR32 | DATE => self.text_bytes().map_or(Leaf::Other, Leaf::Text),
            F64 | I32 | I8 => self.number().map_or(Leaf::Other, Leaf::Number),
            ARRAY | SHORT_ARRAY => Leaf::Array(self.elements()),
            _ => Leaf::Other,
        }
    }
}

/// Byte equality without a library call (member keys and most values are short):
/// word by word, the last word overlapping the one before.
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap());
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap());
    match n {
        0..4 => a.iter().zip(b).all(|(x, y)| x == y),
        4..8 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        _ => {
            let mut at = 0;
            while at + 8 < n {
                if word(a, at) != word(b, at) {
                    return false;
                }
                at += 8;
            }
            word(a, n - 8) == word(b, n - 8)
        }
    }
}

/// Elements of an array.
pub struct Elements<'a> {
    buf: &'a [u8],
    at: usize,
    remaining: usize,
}

impl<'a> Iterator for Elements<'a> {
    type Item = Compact<'a>;

    fn next(&mut self) -> Option<Compact<'a>> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let item = Compact {
            buf: self.buf,
            at: self.at,
        };
        self.at += item.size_at(self.at);
        Some(item)
    }
}

/// Members of an object, in document order.
pub struct Entries<'a> {
    object: Compact<'a>,
    next: usize,
    count: usize,
}

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a str, Compact<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next == self.count {
            return None;
        }
        if let Some(shape) = self.object.shape() {
            let slot = self.next;
            self.next += 1;
            return Some((shape.key(slot), self.object.shaped_member(slot)));
        }
        let (key, value_at) = self
            .object
            .key_at(self.object.member_at(self.next, self.count));
        self.next += 1;
        // Written from a &str by `encode`, so always UTF-8.
        let key = std::str::from_utf8(key).unwrap_or_default();
        Some((
            key,
            Compact {
                buf: self.object.buf,
                at: value_at,
            },
        ))
    }
}

impl<'a> DocView<'a> for Compact<'a> {
    type Elements = Elements<'a>;
    type Entries = Entries<'a>;

    #[inline(always)]
    fn kind(self) -> Kind {
        match self.tag() {
            NULL => Kind::Null,
            FALSE | TRUE => Kind::Bool,
            F64 | I32 | I8 => Kind::Number,
            STR8 | STR32 => Kind::String,
            DATE => Kind::Date,
            ARRAY | SHORT_ARRAY => Kind::Array,
            _ => Kind::Object,
        }
    }

    #[inline(always)]
    fn number(self) -> Option<f64> {
        let at = self.at + 1;
        match self.tag() {
            F64 => Some(f64::from_le_bytes(self.buf[at..at + 8].try_into().unwrap())),
            I32 => Some(f64::from(i32::from_le_bytes(
                self.buf[at..at + 4].try_into().unwrap(),
            ))),
            I8 => Some(f64::from(self.buf[at] as i8)),
            _ => None,
        }
    }

    fn text(self) -> Option<&'a str> {
        // Written from a &str by `encode`, so always UTF-8.
        self.text_bytes()
            .map(|b| std::str::from_utf8(b).unwrap_or_default())
    }

    #[inline(always)]
    fn text_bytes(self) -> Option<&'a [u8]> {
        self.text_range()
            .map(|(start, len)| &self.buf[start..start + len])
    }

    #[inline(always)]
    fn date(self) -> Option<i64> {
        (self.tag() == DATE)
            .then(|| i64::from_le_bytes(self.buf[self.at + 1..self.at + 9].try_into().unwrap()))
    }

    fn get(self, key: &str) -> Option<Self> {
        self.get_hashed(key, key_hash(key))
    }

    #[inline(always)]
    fn get_segment(self, segment: &Segment) -> Option<Self> {
        if self.tag() == SHAPED {
            let id = u32::from(self.u16_at(self.at + 1));
            return segment.slot_in(id).map(|slot| self.shaped_member(slot));
        }
        self.get_hashed(&segment.name, segment.hash)
    }

    fn element(self, index: usize) -> Option<Self> {
        if index >= self.count() {
            return None;
        }
        self.elements().nth(index)
    }

    fn elements(self) -> Elements<'a> {
        let (header, remaining) = match self.tag() {
            ARRAY => (9, self.count()),
            SHORT_ARRAY => (5, self.count()),
            _ => (0, 0),
        };
        Elements {
            buf: self.buf,
            at: self.at + header,
            remaining,
        }
    }

    fn entries(self) -> Entries<'a> {
        let count = if self.is_object() { self.count() } else { 0 };
        Entries {
            object: self,
            next: 0,
            count,
        }
    }

    fn truth(self) -> bool {
        self.tag() == TRUE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_sees_every_position_at_every_length() {
        for n in 0..40 {
            let a: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
            assert!(same_bytes(&a, &a.clone()), "length {n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_bytes(&a, &b), "length {n}, difference at {at}");
            }
            assert!(!same_bytes(&a, &a[..n.saturating_sub(1)]) || n == 0);
        }
    }

    #[test]
    fn large_objects_and_long_strings_use_the_wide_forms() {
        let long = "x".repeat(70_000);
        let mut object = serde_json::Map::new();
        for i in 0..300 {
            object.insert(format!("key{i}"), Value::from(i));
        }
        object.insert("k".repeat(300), Value::from(long.clone()));
        let doc = CompactDoc::new(&Value::Object(object));
        let root = doc.root();
        assert_eq!(root.get("key299").and_then(|v| v.number()), Some(299.0));
        assert_eq!(
            root.get(&"k".repeat(300)).and_then(|v| v.text()),
            Some(long.as_str())
        );
        assert_eq!(root.entries().count(), 301);
        assert!(root.get("key300").is_none());
    }
}
