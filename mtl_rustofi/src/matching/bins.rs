//! Keyed containers of the matcher and the hash they are looked up with.
//!
//! [`Bins`] maps a key (a `(ctx, src, tag)` envelope or a context id) to a
//! container (a bin, a wildcard list, an arrival index). A container that
//! becomes empty is *parked*: it stays in the table, so that the next entry
//! for the same key (the usual case: one receive posted and matched per
//! message, over and over) finds it with one lookup, neither removing nor
//! reinserting the table entry nor allocating; and the bucket of the last
//! key looked up is tried before the hash, so that a receive posted and then
//! matched in the same bin costs one key comparison each time. At most
//! [`PARKED`] empty containers are kept per table; parking one more evicts
//! the oldest parked key, whose container is removed from the table if it
//! is still empty and kept in a spare list (bounded by [`SPARE`]) for the
//! next new key. Memory therefore stays proportional to the number of
//! queued entries plus a constant, whatever the number of distinct keys
//! ever seen.
//!
//! The hash ([`KeyHash`]) mixes a key with one folded multiply (the 128-bit
//! product's halves xored), so the low bits, which pick the bucket, depend
//! on every input bit: one multiply for an envelope (hashed as one 128-bit
//! word) or a context id, no seed to load. It is not resistant to chosen
//! keys; the keys are the job's own contexts, ranks and tags.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};

use hashbrown::HashTable;

use super::head::HeadQueue;

/// Most empty containers kept in place per map.
pub(super) const PARKED: usize = 8;
/// Most evicted empty containers kept for reuse per map.
const SPARE: usize = 64;
/// Evicted bins larger than this many slots are freed, not kept.
const SPARE_BIN_MAX_CAP: usize = 32;

/// Folded-multiply hash for the matcher's small integer keys.
#[derive(Clone, Copy, Default)]
pub(super) struct KeyHash;

/// Hasher state of [`KeyHash`].
pub(super) struct KeyHasher(u64);

const K1: u64 = 0x9e37_79b9_7f4a_7c15;
const K2: u64 = 0xd6e8_feb8_6659_fd93;
/// Bit 31 set: see [`KeyHasher::write_u128`].
const K3: u64 = 0xe703_7ed1_a0b4_28db;

/// The 128-bit product of `a` and `b`, high and low halves xored: every
/// output bit depends on every input bit.
#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let m = u128::from(a) * u128::from(b);
    (m as u64) ^ ((m >> 64) as u64)
}

impl KeyHasher {
    #[inline]
    fn add(&mut self, x: u64) {
        self.0 = fold_mul(self.0 ^ x, K1);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }

    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.add(u64::from(x));
    }

    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }

    /// One multiply for both halves (how an envelope is hashed). A product
    /// is zero if a factor is: the low half (the tag) never cancels `K2`,
    /// whose high half is non-zero, and the high half (context and rank)
    /// cancels `K3` only for a negative rank (bit 31 of the half), which no
    /// bin key holds.
    #[inline]
    fn write_u128(&mut self, x: u128) {
        self.0 = fold_mul((x >> 64) as u64 ^ self.0 ^ K3, x as u64 ^ K2);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

impl BuildHasher for KeyHash {
    type Hasher = KeyHasher;

    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// What [`Bins`] needs of a container.
pub(super) trait Container: Default {
    fn is_empty(&self) -> bool;
    /// Whether an empty container is small enough to keep for reuse.
    fn worth_keeping(&self) -> bool;
}

impl<T> Container for VecDeque<T> {
    #[inline]
    fn is_empty(&self) -> bool {
        VecDeque::is_empty(self)
    }

    fn worth_keeping(&self) -> bool {
        self.capacity() <= SPARE_BIN_MAX_CAP
    }
}

impl<T> Container for HeadQueue<T> {
    #[inline]
    fn is_empty(&self) -> bool {
        HeadQueue::is_empty(self)
    }

    fn worth_keeping(&self) -> bool {
        self.capacity() <= SPARE_BIN_MAX_CAP
    }
}

impl<K, V> Container for BTreeMap<K, V> {
    #[inline]
    fn is_empty(&self) -> bool {
        BTreeMap::is_empty(self)
    }

    /// An emptied B-tree is down to its root leaf.
    fn worth_keeping(&self) -> bool {
        true
    }
}

/// A container with its key, in the hash table of [`Bins`].
pub(super) struct Slot<K, C> {
    key: K,
    pub(super) c: C,
    /// Whether the key is in the parked list.
    parked: bool,
}

impl<K, C: Container> Slot<K, C> {
    /// To call after removing from the container: true if it is now empty
    /// and not parked yet, in which case the caller must pass its key to
    /// [`Bins::park`] (the slot counts as parked from here).
    #[inline]
    pub(super) fn newly_empty(&mut self) -> bool {
        if self.parked || !self.c.is_empty() {
            return false;
        }
        self.parked = true;
        true
    }
}

/// Containers by key; see the module documentation.
///
/// The bucket of the slot last reached through a `&mut` lookup is
/// remembered, so that a lookup of the same key again (the match of the
/// receive just posted, the next receive of a ping-pong in the same bin)
/// compares the key there and skips the hash. The bucket number may go
/// stale (the slot removed, the table grown); the key comparison then fails
/// and the lookup hashes.
pub(super) struct Bins<K, C> {
    table: HashTable<Slot<K, C>>,
    last: usize,
    /// Keys whose container may be empty, oldest first; each at most once,
    /// each present in `table` with `parked` set.
    parked: VecDeque<K>,
    spare: Vec<C>,
}

#[inline(always)]
fn hash<K: Hash>(key: &K) -> u64 {
    KeyHash.hash_one(key)
}

/// The bucket number and slot of `key` in `table`, inserted with a
/// container from `spare` (or a new one) if it is not there. Out of line:
/// [`Bins::get_or_insert`] comes here only when the remembered bucket
/// holds another key.
#[inline(never)]
fn find_or_insert<'t, K: Copy + Eq + Hash, C: Container>(
    table: &'t mut HashTable<Slot<K, C>>,
    spare: &mut Vec<C>,
    key: K,
) -> (usize, &'t mut Slot<K, C>) {
    let n = match table.find_bucket_index(hash(&key), |s| s.key == key) {
        Some(n) => n,
        None => insert(table, spare, key),
    };
    let slot = table
        .get_bucket_mut(n)
        .expect("the bucket just found or inserted");
    (n, slot)
}

/// Inserts `key` with a container from `spare` (or a new one); returns
/// its bucket number.
#[cold]
fn insert<K: Copy + Hash, C: Container>(
    table: &mut HashTable<Slot<K, C>>,
    spare: &mut Vec<C>,
    key: K,
) -> usize {
    let slot = Slot {
        key,
        c: spare.pop().unwrap_or_default(),
        parked: false,
    };
    table
        .insert_unique(hash(&key), slot, |s| hash(&s.key))
        .bucket_index()
}

impl<K: Copy + Eq + Hash, C: Container> Bins<K, C> {
    pub(super) fn new() -> Self {
        Bins {
            table: HashTable::new(),
            last: 0,
            parked: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    #[inline(always)]
    pub(super) fn get(&self, key: &K) -> Option<&C> {
        let s = match self.table.get_bucket(self.last) {
            Some(s) if s.key == *key => s,
            _ => self.table.find(hash(key), |s| s.key == *key)?,
        };
        Some(&s.c)
    }

    #[inline(always)]
    pub(super) fn get_mut(&mut self, key: &K) -> Option<&mut Slot<K, C>> {
        // The remembered bucket is checked (in bounds, occupied) once, by
        // the entry that then hands out the slot: no unsafe access, as the
        // matcher stays out of the crate's fenced unsafe code.
        let table = match self.table.get_bucket_entry(self.last) {
            Ok(e) if e.get().key == *key => return Some(e.into_mut()),
            Ok(e) => e.into_table(),
            Err(absent) => absent.into_table(),
        };
        self.last = table.find_bucket_index(hash(key), |s| s.key == *key)?;
        table.get_bucket_mut(self.last)
    }

    /// The container of `key`, created (from the spare list if it can) if
    /// there is none.
    #[inline(always)]
    pub(super) fn get_or_insert(&mut self, key: K) -> &mut C {
        // The remembered bucket is checked once, as in `get_mut`.
        let table = match self.table.get_bucket_entry(self.last) {
            Ok(e) if e.get().key == key => return &mut e.into_mut().c,
            Ok(e) => e.into_table(),
            Err(absent) => absent.into_table(),
        };
        let (last, slot) = find_or_insert(table, &mut self.spare, key);
        self.last = last;
        &mut slot.c
    }

    /// Records that the container of `key` is empty (after
    /// [`Slot::newly_empty`] returned true); evicts the oldest parked key if
    /// there are [`PARKED`] already.
    #[cold]
    pub(super) fn park(&mut self, key: K) {
        if self.parked.len() == PARKED {
            if let Some(old) = self.parked.pop_front() {
                self.evict(old);
            }
        }
        self.parked.push_back(key);
    }

    /// Unparks `key`: its container leaves the table if empty.
    fn evict(&mut self, key: K) {
        let Ok(mut e) = self.table.find_entry(hash(&key), |s| s.key == key) else {
            debug_assert!(false, "parked key without a container");
            return;
        };
        if e.get().c.is_empty() {
            let c = e.remove().0.c;
            if self.spare.len() < SPARE && c.worth_keeping() {
                self.spare.push(c);
            }
        } else {
            e.get_mut().parked = false;
        }
    }

    /// Removes the containers whose key satisfies `pred` and passes each to
    /// `f`, in no particular order.
    pub(super) fn drain_where(
        &mut self,
        mut pred: impl FnMut(&K) -> bool,
        mut f: impl FnMut(K, C),
    ) {
        for s in self.table.extract_if(|s| pred(&s.key)) {
            f(s.key, s.c);
        }
        let table = &self.table;
        self.parked
            .retain(|k| table.find(hash(k), |s| s.key == *k).is_some());
    }

    /// Every container with its key, empty (parked) ones included.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, &C)> {
        self.table.iter().map(|s| (&s.key, &s.c))
    }

    /// Passes every container with its key to `f`, which may take entries
    /// out of it, then parks those it left empty (as [`Slot::newly_empty`]
    /// and [`Bins::park`] would one at a time; the table cannot be changed
    /// while it is walked).
    pub(super) fn for_each_mut(&mut self, mut f: impl FnMut(&K, &mut C)) {
        let mut emptied = Vec::new();
        for s in self.table.iter_mut() {
            f(&s.key, &mut s.c);
            if s.newly_empty() {
                emptied.push(s.key);
            }
        }
        for key in emptied {
            self.park(key);
        }
    }

    /// Number of non-empty containers.
    #[cfg(test)]
    pub(super) fn occupied(&self) -> usize {
        self.iter().filter(|(_, c)| !c.is_empty()).count()
    }

    /// Number of containers in the table, empty ones included.
    #[cfg(test)]
    pub(super) fn allocated(&self) -> usize {
        self.table.len()
    }

    /// Number of spare containers.
    #[cfg(test)]
    pub(super) fn spare_len(&self) -> usize {
        self.spare.len()
    }

    /// Checks the parking invariants; panics on violation.
    #[cfg(test)]
    pub(super) fn check(&self) {
        assert!(self.parked.len() <= PARKED);
        for (i, k) in self.parked.iter().enumerate() {
            assert!(
                !self.parked.iter().skip(i + 1).any(|o| o == k),
                "key parked twice"
            );
            let s = self.table.find(hash(k), |s| s.key == *k);
            assert!(s.is_some_and(|s| s.parked), "parked key not marked");
        }
        let marked = self.table.iter().filter(|s| s.parked).count();
        assert_eq!(marked, self.parked.len());
        for s in &self.table {
            assert!(!s.c.is_empty() || s.parked, "empty container not parked");
        }
        assert!(self.table.len() <= self.occupied() + PARKED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash<T: Hash>(t: T) -> u64 {
        KeyHash.hash_one(t)
    }

    #[test]
    fn low_bits_spread_for_strided_tags() {
        // Tags that differ only in high bits still land in distinct buckets:
        // `n` tags in an `n`-bucket table fill more than 500 in 1024 of
        // them. Under Miri a 256-bucket table, a quarter of the hashing and
        // sorting, every stride still tried (the fewest filled there is 149
        // against the bound of 125).
        let n: i32 = if cfg!(miri) { 256 } else { 1024 };
        for stride in [1i32, 2, 64, 1024, 1 << 16, 1 << 20] {
            let mut seen: Vec<u64> = (0..n)
                .map(|i| {
                    let key = (3u128 << 96) | (1u128 << 64) | u128::from((i * stride) as u32);
                    hash(key) & (n as u64 - 1)
                })
                .collect();
            seen.sort_unstable();
            seen.dedup();
            assert!(
                seen.len() > n as usize * 500 / 1024,
                "stride {stride}: {} buckets",
                seen.len()
            );
        }
    }

    #[test]
    fn parked_containers_are_bounded_and_reused() {
        let mut b: Bins<u32, VecDeque<u8>> = Bins::new();
        // Under Miri, 17 keys a round: more than twice `PARKED`, so that, as
        // with 100, each round parks and evicts, and every key the round
        // before left parked has been evicted before it comes back, its
        // container taken from the spare list.
        let keys = if cfg!(miri) {
            2 * PARKED as u32 + 1
        } else {
            100
        };
        for round in 0..3 {
            for k in 0..keys {
                b.get_or_insert(k).push_back(1);
                let s = b.get_mut(&k).unwrap();
                s.c.pop_front();
                if s.newly_empty() {
                    b.park(k);
                }
                b.check();
            }
            assert_eq!(b.occupied(), 0, "round {round}");
            assert_eq!(b.allocated(), PARKED);
        }
        assert!(b.spare_len() >= 1);
        b.drain_where(|k| k % 2 == 0, |_, c| assert!(c.is_empty()));
        b.check();
        b.drain_where(|_| true, |_, _| {});
        assert_eq!(b.allocated(), 0);
        b.check();
    }

    #[test]
    fn containers_emptied_in_a_walk_are_parked_within_the_bound() {
        let mut b: Bins<u32, VecDeque<u32>> = Bins::new();
        for k in 0..40u32 {
            b.get_or_insert(k).extend([k, k + 100]);
        }
        // Emptying 20 containers parks them all, evicting all but
        // `PARKED`; the others lose one entry and stay.
        b.for_each_mut(|&k, c| {
            if k % 2 == 0 {
                c.clear();
            } else {
                c.pop_front();
            }
        });
        b.check();
        assert_eq!(b.occupied(), 20);
        assert_eq!(b.allocated(), 20 + PARKED);
        for k in (1..40u32).step_by(2) {
            assert_eq!(b.get(&k).map(|c| c.len()), Some(1));
        }
        // A walk that empties nothing parks nothing more.
        b.for_each_mut(|_, _| {});
        b.check();
        assert_eq!(b.allocated(), 20 + PARKED);
    }
}
