//! A hash map kept in shards, so that it never grows all at once.
//!
//! A `HashMap` that outgrows its table moves every entry to a new one in a single
//! insert. The job book's maps gain an entry per job (a position by number, a custom
//! name's index entry, an interned text), and the book grows under its write lock, on
//! the engine's thread: at 917,503 jobs of distinct custom names one push took 440 ms,
//! and every request that reads the book or waits for the engine waited with it. In
//! [`SHARDS`] maps, each a 256th of the entries, one push moves at most one shard.

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
}
