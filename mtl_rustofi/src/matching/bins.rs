//! Keyed containers of the matcher and the hash they are looked up with.
//!
//! [`Bins`] maps a key (a `(ctx, src, tag)` envelope or a context id) to a
//! container (a bin, a wildcard list, an arrival index). A container that
//! becomes empty is *parked*: it stays in the map, so that the next entry
//! for the same key (the usual case: one receive posted and matched per
//! message, over and over) finds it with one lookup, neither removing nor
//! reinserting the map entry nor allocating; and the slot of the last key
//! looked up is tried before the hash, so that a receive posted and then
//! matched in the same bin costs one key comparison each time. At most
//! [`PARKED`] empty containers are kept per map; parking one more evicts
//! the oldest parked key, whose container is removed from the map if it is
//! still empty, its slot (and, for up to [`SPARE`] of them, its container's
//! memory) kept for the next new key. Memory therefore stays proportional
//! to the number of queued entries plus a constant, whatever the number of
//! distinct keys ever seen; like the hash map's table, the slot array keeps
//! the size of the largest number of containers that existed at once.
//!
//! The hash ([`KeyHash`]) mixes a key with one folded multiply (the 128-bit
//! product's halves xored), so the low bits, which pick the bucket, depend
//! on every input bit: one multiply for an envelope (hashed as one 128-bit
//! word) or a context id, no seed to load. It is not resistant to chosen
//! keys; the keys are the job's own contexts, ranks and tags.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};

use hashbrown::HashMap;

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

/// A container with its key, in the slot array of [`Bins`].
pub(super) struct Slot<K, C> {
    key: K,
    pub(super) c: C,
    /// Whether the slot is in the parked list.
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

/// No slot: the initial value of `Bins::last`.
const NONE: usize = usize::MAX;

/// Containers by key; see the module documentation.
///
/// Containers live in a slot array, which the hash map indexes by key. The
/// slot last reached through a `&mut` lookup is remembered, so that a
/// lookup of the same key again (the next receive of a ping-pong in the same
/// bin, the match of the receive just posted) compares the key there and
/// skips the hash.
pub(super) struct Bins<K, C> {
    index: HashMap<K, usize, KeyHash>,
    /// Live slots (in `index`) and free ones (in `free`, their containers
    /// empty). The array never shrinks, like the hash map: its length is the
    /// largest number of containers that existed at once.
    slots: Vec<Slot<K, C>>,
    free: Vec<usize>,
    /// A live slot, or `NONE`.
    last: usize,
    /// Slots whose container may be empty, oldest first; each at most once,
    /// each live with `parked` set.
    parked: VecDeque<usize>,
}

impl<K: Copy + Eq + Hash, C: Container> Bins<K, C> {
    pub(super) fn new() -> Self {
        Bins {
            index: HashMap::with_hasher(KeyHash),
            slots: Vec::new(),
            free: Vec::new(),
            last: NONE,
            parked: VecDeque::new(),
        }
    }

    /// The live slot of `key`, trying the last one first.
    #[inline(always)]
    fn find(&self, key: &K) -> Option<usize> {
        if let Some(s) = self.slots.get(self.last) {
            if s.key == *key {
                return Some(self.last);
            }
        }
        self.index.get(key).copied()
    }

    #[inline(always)]
    pub(super) fn get(&self, key: &K) -> Option<&C> {
        self.find(key).map(|n| &self.slots[n].c)
    }

    #[inline(always)]
    pub(super) fn get_mut(&mut self, key: &K) -> Option<&mut Slot<K, C>> {
        let last_hit = self.slots.get(self.last).is_some_and(|s| s.key == *key);
        if !last_hit {
            self.last = *self.index.get(key)?;
        }
        self.slots.get_mut(self.last)
    }

    /// The container of `key`, created (in a free slot if there is one) if
    /// there is none.
    #[inline]
    pub(super) fn get_or_insert(&mut self, key: K) -> &mut C {
        let n = match self.find(&key) {
            Some(n) => n,
            None => self.insert(key),
        };
        self.last = n;
        &mut self.slots[n].c
    }

    #[cold]
    fn insert(&mut self, key: K) -> usize {
        let n = match self.free.pop() {
            Some(n) => {
                self.slots[n].key = key;
                n
            }
            None => {
                self.slots.push(Slot {
                    key,
                    c: C::default(),
                    parked: false,
                });
                self.slots.len() - 1
            }
        };
        self.index.insert(key, n);
        n
    }

    /// Records that the container of `key` is empty (after
    /// [`Slot::newly_empty`] returned true); evicts the oldest parked key if
    /// there are [`PARKED`] already.
    #[cold]
    pub(super) fn park(&mut self, key: K) {
        let Some(n) = self.find(&key) else {
            debug_assert!(false, "parking a key without a container");
            return;
        };
        if self.parked.len() == PARKED {
            if let Some(old) = self.parked.pop_front() {
                self.evict(old);
            }
        }
        self.parked.push_back(n);
    }

    /// Unparks slot `n`: its container leaves the map if empty.
    fn evict(&mut self, n: usize) {
        let s = &mut self.slots[n];
        s.parked = false;
        if s.c.is_empty() {
            let key = s.key;
            self.index.remove(&key);
            self.release(n);
        }
    }

    /// Puts live slot `n`, already out of `index`, on the free list; its
    /// container is kept for reuse if small and there are few spares.
    fn release(&mut self, n: usize) {
        let s = &mut self.slots[n];
        debug_assert!(s.c.is_empty());
        s.parked = false;
        if self.free.len() >= SPARE || !s.c.worth_keeping() {
            s.c = C::default();
        }
        self.free.push(n);
        if self.last == n {
            self.last = NONE;
        }
    }

    /// Removes the containers whose key satisfies `pred` and passes each to
    /// `f`, in no particular order.
    pub(super) fn drain_where(
        &mut self,
        mut pred: impl FnMut(&K) -> bool,
        mut f: impl FnMut(K, C),
    ) {
        let gone: Vec<(K, usize)> = self.index.extract_if(|k, _| pred(k)).collect();
        for (key, n) in gone {
            f(key, std::mem::take(&mut self.slots[n].c));
            self.release(n);
        }
        let slots = &self.slots;
        self.parked.retain(|&n| slots[n].parked);
    }

    /// Every live container with its key, empty (parked) ones included.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, &C)> {
        self.index.iter().map(|(k, &n)| (k, &self.slots[n].c))
    }

    /// Number of non-empty containers.
    #[cfg(test)]
    pub(super) fn occupied(&self) -> usize {
        self.iter().filter(|(_, c)| !c.is_empty()).count()
    }

    /// Number of live containers, empty ones included.
    #[cfg(test)]
    pub(super) fn allocated(&self) -> usize {
        self.index.len()
    }

    /// Number of free slots.
    #[cfg(test)]
    pub(super) fn spare_len(&self) -> usize {
        self.free.len()
    }

    /// Checks the slot and parking invariants; panics on violation.
    #[cfg(test)]
    pub(super) fn check(&self) {
        let mut live = vec![false; self.slots.len()];
        for (k, &n) in &self.index {
            assert!(self.slots[n].key == *k, "slot holds another key");
            assert!(!live[n], "slot indexed twice");
            live[n] = true;
        }
        for &n in &self.free {
            assert!(!live[n], "free slot indexed");
            assert!(self.slots[n].c.is_empty() && !self.slots[n].parked);
        }
        assert_eq!(self.index.len() + self.free.len(), self.slots.len());
        assert!(self.last == NONE || live[self.last], "last slot not live");
        assert!(self.parked.len() <= PARKED);
        for (i, &n) in self.parked.iter().enumerate() {
            assert!(
                !self.parked.iter().skip(i + 1).any(|&o| o == n),
                "parked twice"
            );
            assert!(live[n] && self.slots[n].parked, "parked slot not marked");
        }
        let marked = self.slots.iter().filter(|s| s.parked).count();
        assert_eq!(marked, self.parked.len());
        for (_, &n) in &self.index {
            let s = &self.slots[n];
            assert!(!s.c.is_empty() || s.parked, "empty container not parked");
        }
        assert!(self.index.len() <= self.occupied() + PARKED);
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
        // Tags that differ only in high bits still land in distinct buckets
        // of a 1024-bucket table.
        for stride in [1i32, 2, 64, 1024, 1 << 16, 1 << 20] {
            let mut seen: Vec<u64> = (0..1024)
                .map(|i| {
                    let key = (3u128 << 96) | (1u128 << 64) | u128::from((i * stride) as u32);
                    hash(key) & 1023
                })
                .collect();
            seen.sort_unstable();
            seen.dedup();
            assert!(seen.len() > 500, "stride {stride}: {} buckets", seen.len());
        }
    }

    #[test]
    fn parked_containers_are_bounded_and_reused() {
        let mut b: Bins<u32, VecDeque<u8>> = Bins::new();
        for round in 0..3 {
            for k in 0..100u32 {
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
}
