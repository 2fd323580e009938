//! Object shapes: the key sequences of compact objects, stored once per process.
//!
//! Documents of one collection repeat the same keys in the same order millions of times.
//! A compact object whose key sequence is interned here stores only its shape id and
//! its values; a path segment remembers, for the last shape it met, which slot holds its
//! key (an inline cache), so a member lookup is a comparison and a jump.
//!
//! Shapes are never freed. To keep that bounded, at most [`MAX_SHAPES`] are interned;
//! objects of other key sequences (and very large ones) keep the self-describing form.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

const CHUNK: usize = 1024;
const CHUNKS: usize = 64;
/// How many distinct key sequences the process interns.
pub const MAX_SHAPES: usize = CHUNK * CHUNKS;
/// Objects with more members than this are not shaped.
pub const MAX_MEMBERS: usize = 256;
/// Objects whose keys add up to more bytes than this are not shaped.
const MAX_KEY_BYTES: usize = 4096;

/// One key sequence.
#[derive(Debug)]
pub struct Shape {
    keys: Box<[&'static str]>,
}

impl Shape {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn key(&self, slot: usize) -> &'static str {
        self.keys[slot]
    }

    /// The slot of `key`, if the shape has it.
    pub fn slot(&self, key: &str) -> Option<usize> {
        self.keys.iter().position(|k| *k == key)
    }
}

/// Lock-free reads: chunks of write-once cells.
static TABLE: [OnceLock<Box<[OnceLock<Shape>]>>; CHUNKS] = [const { OnceLock::new() }; CHUNKS];

/// Key sequence (each key length-prefixed) to id; taken only when encoding.
static INTERNED: Mutex<Option<HashMap<Box<[u8]>, u32>>> = Mutex::new(None);

fn cell(id: u32) -> &'static OnceLock<Shape> {
    let id = id as usize;
    let chunk = TABLE[id / CHUNK].get_or_init(|| (0..CHUNK).map(|_| OnceLock::new()).collect());
    &chunk[id % CHUNK]
}

/// The shape `id` (an id that [`intern`] answered).
pub fn get(id: u32) -> &'static Shape {
    cell(id).get().expect("shape ids come from intern")
}

/// The id of the shape with these keys; `None` when the object is too large to be
/// shaped or the table is full.
pub fn intern<'k>(keys: impl ExactSizeIterator<Item = &'k str> + Clone) -> Option<u32> {
    if keys.len() > MAX_MEMBERS {
        return None;
    }
    let mut signature = Vec::with_capacity(64);
    for key in keys.clone() {
        signature.extend_from_slice(&(key.len() as u32).to_le_bytes());
        signature.extend_from_slice(key.as_bytes());
    }
    if signature.len() > MAX_KEY_BYTES + 4 * MAX_MEMBERS {
        return None;
    }
    let mut interned = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    let interned = interned.get_or_insert_with(HashMap::new);
    if let Some(id) = interned.get(signature.as_slice()) {
        return Some(*id);
    }
    if interned.len() >= MAX_SHAPES {
        return None;
    }
    let id = interned.len() as u32;
    // Shapes live as long as the process: leak one string holding every key.
    let joined: &'static str = Box::leak(keys.clone().collect::<String>().into_boxed_str());
    let mut at = 0;
    let keys: Box<[&'static str]> = keys
        .map(|k| {
            let key = &joined[at..at + k.len()];
            at += k.len();
            key
        })
        .collect();
    // Set before the id is published, so `get` never sees an empty cell.
    let _ = cell(id).set(Shape { keys });
    interned.insert(signature.into_boxed_slice(), id);
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_keys_in_the_same_order_are_one_shape() {
        let a = intern(["x", "yy"].into_iter()).unwrap();
        assert_eq!(intern(["x", "yy"].into_iter()), Some(a));
        assert_ne!(intern(["yy", "x"].into_iter()), Some(a));
        // Length prefixes keep ["ab", "c"] and ["a", "bc"] apart.
        assert_ne!(
            intern(["ab", "c"].into_iter()),
            intern(["a", "bc"].into_iter())
        );
        let shape = get(a);
        assert_eq!(
            (shape.len(), shape.key(1), shape.slot("yy"), shape.slot("z")),
            (2, "yy", Some(1), None)
        );
        let empty = intern(std::iter::empty()).unwrap();
        assert!(get(empty).is_empty());
    }

    #[test]
    fn huge_objects_are_not_shaped() {
        let keys: Vec<String> = (0..=MAX_MEMBERS).map(|i| format!("k{i}")).collect();
        assert_eq!(intern(keys.iter().map(String::as_str)), None);
    }
}
