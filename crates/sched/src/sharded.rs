//! Collections kept in parts, so that they never grow all at once.
//!
//! A `HashMap` that outgrows its table moves every entry to a new one in a single
//! insert, and a `Vec` that outgrows its buffer copies every element. The job book gains
//! an entry per job in several (a position by number, a custom name's index entry, an
//! interned text, a scan row), and the book grows under its write lock, on the engine's
//! thread: at 917,503 jobs of distinct custom names one push took 440 ms, and every
//! request that reads the book or waits for the engine waited with it. In [`SHARDS`]
//! maps, each a 256th of the entries, one push moves at most one shard; a
//! [`ChunkedVec`] moves nothing. (The book's job handles, 8 bytes a job, are still one
//! vector, which readers take as a slice: its doubling at a million jobs copies 8 MB,
//! 3-23 ms with mimalloc on a busy 2-core machine, where the rows' 104 MB took 250 ms.)

use std::borrow::Borrow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, Hash};

/// Enough that a shard of a few million entries grows in milliseconds; an empty shard
/// holds no table.
const SHARDS: usize = 256;

pub(crate) struct ShardedMap<K, V> {
    shards: Box<[HashMap<K, V>]>,
    /// Picks a key's shard; each shard hashes with its own random keys as usual, so a
    /// run of keys that lands in one shard only makes that shard an ordinary map.
    pick: foldhash::fast::FixedState,
}

impl<K, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        ShardedMap {
            shards: (0..SHARDS).map(|_| HashMap::new()).collect(),
            pick: foldhash::fast::FixedState::default(),
        }
    }
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    /// The shard of `key`. A key and its borrowed form hash alike (`Borrow`'s contract),
    /// so a lookup by either finds the same shard.
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        (self.pick.hash_one(key) >> 56) as usize % SHARDS
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[self.shard(key)].get(key)
    }

    pub(crate) fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(key);
        self.shards[shard].get_mut(key)
    }

    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let shard = self.shard(&key);
        self.shards[shard].insert(key, value)
    }

    pub(crate) fn entry(&mut self, key: K) -> Entry<'_, K, V> {
        let shard = self.shard(&key);
        self.shards[shard].entry(key)
    }

    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(key);
        self.shards[shard].remove(key)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(HashMap::len).sum()
    }
}

/// A vector in chunks of [`CHUNK`] elements, each allocated whole when the first of
/// its elements is pushed. The book's scan rows are about 100 bytes a job: as one `Vec`,
/// the push of the 1,048,577th job copied 104 MB into fresh pages, a stall of 250-280 ms
/// of every submission (found by `scripts/bench-slow-lists`).
pub(crate) struct ChunkedVec<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

const CHUNK_BITS: u32 = 14;
/// Elements per chunk: about 1.7 MB of rows, touched a page at a time as they fill.
const CHUNK: usize = 1 << CHUNK_BITS;

impl<T> Default for ChunkedVec<T> {
    fn default() -> Self {
        ChunkedVec {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> ChunkedVec<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        (index < self.len).then(|| &self[index])
    }

    pub(crate) fn push(&mut self, value: T) {
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        self.chunks[self.len >> CHUNK_BITS].push(value);
        self.len += 1;
    }
}

impl<T> std::ops::Index<usize> for ChunkedVec<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        &self.chunks[index >> CHUNK_BITS][index & (CHUNK - 1)]
    }
}

impl<T> std::ops::IndexMut<usize> for ChunkedVec<T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.chunks[index >> CHUNK_BITS][index & (CHUNK - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sharded_map_finds_what_it_keeps_by_key_and_by_borrowed_key() {
        let mut map: ShardedMap<Box<str>, u32> = ShardedMap::default();
        for n in 0..10_000u32 {
            assert_eq!(map.insert(format!("name-{n}").into(), n), None);
        }
        assert_eq!(map.insert("name-7".into(), 70), Some(7));
        *map.entry("name-8".into()).or_insert(0) += 1;
        *map.entry("new".into()).or_insert(0) += 1;
        assert_eq!(map.len(), 10_001);
        for n in (0..10_000u32).filter(|n| ![7, 8].contains(n)) {
            assert_eq!(map.get(format!("name-{n}").as_str()), Some(&n));
        }
        assert_eq!(map.get("name-7"), Some(&70));
        assert_eq!(map.get("name-8"), Some(&9));
        assert_eq!(map.get("new"), Some(&1));
        *map.get_mut("new").unwrap() = 5;
        assert_eq!(map.remove("new"), Some(5));
        assert_eq!(map.get("new"), None);
        assert_eq!(map.get("name-10000"), None);
        // The entries spread over the shards.
        assert!(map.shards.iter().filter(|s| !s.is_empty()).count() > SHARDS / 2);
    }

    #[test]
    fn a_chunked_vector_keeps_its_elements_in_place_as_it_grows() {
        let mut rows: ChunkedVec<u64> = ChunkedVec::default();
        rows.push(0);
        let first: *const u64 = &rows[0];
        for n in 1..(3 * CHUNK as u64 + 5) {
            rows.push(n);
        }
        assert_eq!(rows.len(), 3 * CHUNK + 5);
        assert_eq!(rows.get(3 * CHUNK + 4), Some(&(3 * CHUNK as u64 + 4)));
        assert_eq!(rows.get(3 * CHUNK + 5), None);
        assert_eq!(rows.get(u32::MAX as usize), None);
        assert!(std::ptr::eq(first, &rows[0]), "the first element moved");
        rows[CHUNK] += 1_000_000;
        for n in 0..rows.len() {
            let bonus = if n == CHUNK { 1_000_000 } else { 0 };
            assert_eq!(rows[n], n as u64 + bonus);
        }
        assert_eq!(rows.chunks.len(), 4);
    }
}
