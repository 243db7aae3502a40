//! Per-peer sequence reordering.
//!
//! MPI requires that messages between one pair of processes on one
//! communicator are matched in the order they were sent (non-overtaking). The
//! sender stamps each message with a per-peer `u32` sequence number; a
//! [`Reorder`] on the receiver releases items strictly in sequence order even
//! if the transport delivers them out of order.
//!
//! Sequence numbers use wrapping arithmetic: an item is "ahead" of the
//! expected number when `seq.wrapping_sub(expected) as i32 > 0` and "behind"
//! (a duplicate) when it is negative, so the window of distinguishable
//! outstanding items is 2^31.
//!
//! In-order arrival with nothing held costs one comparison and one push; an
//! out-of-order item costs one hash-map insertion, and each held item released
//! later costs one hash-map removal.

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

/// Reordering buffer for the messages coming from one peer.
pub(crate) struct Reorder<T> {
    expected: u32,
    held: HashMap<u32, T>,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Reorder<T> {
    /// Creates an empty buffer expecting sequence number 0 first.
    pub(crate) fn new() -> Self {
        Reorder {
            expected: 0,
            held: HashMap::new(),
        }
    }

    /// Accept an item carrying sequence number `seq` (u32, wrapping
    /// arithmetic).
    ///
    /// Pushes into `out` every item that is now deliverable in order (this
    /// one plus any held ones that follow consecutively). Items with `seq`
    /// ahead of the expected one are held. An item whose `seq` is behind the
    /// expected one (`(seq.wrapping_sub(expected) as i32) < 0`), or that
    /// repeats an already held sequence number, is a duplicate and is
    /// returned as `Err(item)` without changing any state.
    pub(crate) fn accept(&mut self, seq: u32, item: T, out: &mut Vec<T>) -> Result<(), T> {
        if seq == self.expected {
            out.push(item);
            self.expected = self.expected.wrapping_add(1);
            if !self.held.is_empty() {
                self.release(out);
            }
            return Ok(());
        }
        if (seq.wrapping_sub(self.expected) as i32) < 0 {
            return Err(item);
        }
        match self.held.entry(seq) {
            Entry::Occupied(_) => Err(item),
            Entry::Vacant(slot) => {
                slot.insert(item);
                Ok(())
            }
        }
    }

    /// The fast path for a transport that delivers in order: if `seq` is
    /// the expected number and nothing is held, consumes it and returns
    /// true (the caller delivers the item itself, nothing is allocated);
    /// otherwise returns false and changes nothing, and the caller goes
    /// through [`accept`](Self::accept).
    pub(crate) fn take_in_order(&mut self, seq: u32) -> bool {
        if seq == self.expected && self.held.is_empty() {
            self.expected = self.expected.wrapping_add(1);
            true
        } else {
            false
        }
    }

    /// Moves consecutive held items starting at `expected` into `out`.
    fn release(&mut self, out: &mut Vec<T>) {
        while let Some(item) = self.held.remove(&self.expected) {
            out.push(item);
            self.expected = self.expected.wrapping_add(1);
        }
    }

    /// Number of items held while waiting for an earlier sequence number.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    /// Drops every held item (for a peer that is gone: what they wait for
    /// will never come); returns how many there were.
    pub(crate) fn drop_held(&mut self) -> usize {
        let n = self.held.len();
        self.held.clear();
        n
    }

    /// The next sequence number that will be delivered.
    #[cfg(test)]
    pub(crate) fn expected(&self) -> u32 {
        self.expected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_held_forgets_what_waits_for_a_hole() {
        let mut r = Reorder::new();
        let mut out = Vec::new();
        r.accept(2, 'c', &mut out).unwrap();
        r.accept(1, 'b', &mut out).unwrap();
        assert_eq!(r.drop_held(), 2);
        assert_eq!(r.held(), 0);
        r.accept(0, 'a', &mut out).unwrap();
        assert_eq!(out, vec!['a']);
        assert_eq!(r.expected(), 1);
    }

    fn starting_at<T>(expected: u32) -> Reorder<T> {
        Reorder {
            expected,
            held: HashMap::new(),
        }
    }

    #[test]
    fn take_in_order_only_for_the_expected_number_with_nothing_held() {
        let mut r = Reorder::default();
        let mut out = Vec::new();
        assert!(r.take_in_order(0));
        assert!(!r.take_in_order(0), "a duplicate is not in order");
        assert!(!r.take_in_order(2), "ahead of the expected number");
        r.accept(2, 'c', &mut out).unwrap();
        assert!(!r.take_in_order(1), "something is held: use accept");
        r.accept(1, 'b', &mut out).unwrap();
        assert_eq!(out, vec!['b', 'c']);
        assert!(r.take_in_order(3));
        assert_eq!(r.expected(), 4);
    }

    #[test]
    fn in_order_fast_path() {
        let mut r = Reorder::default();
        let mut out = Vec::new();
        for s in 0..10u32 {
            r.accept(s, s * 10, &mut out).unwrap();
            assert_eq!(r.held(), 0);
        }
        assert_eq!(out, (0..10).map(|s| s * 10).collect::<Vec<_>>());
        assert_eq!(r.expected(), 10);
    }

    #[test]
    fn out_of_order_hold_and_release() {
        let mut r = Reorder::new();
        let mut out = Vec::new();
        r.accept(2, 'c', &mut out).unwrap();
        r.accept(4, 'e', &mut out).unwrap();
        r.accept(1, 'b', &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!((r.held(), r.expected()), (3, 0));
        r.accept(0, 'a', &mut out).unwrap();
        assert_eq!(out, vec!['a', 'b', 'c']);
        assert_eq!((r.held(), r.expected()), (1, 3));
        out.clear();
        r.accept(3, 'd', &mut out).unwrap();
        assert_eq!(out, vec!['d', 'e']);
        assert_eq!((r.held(), r.expected()), (0, 5));
    }

    #[test]
    fn duplicates_are_rejected_without_state_change() {
        let mut r = Reorder::new();
        let mut out = Vec::new();
        r.accept(0, 0, &mut out).unwrap();
        r.accept(1, 1, &mut out).unwrap();
        r.accept(3, 3, &mut out).unwrap();
        assert_eq!(r.accept(0, 100, &mut out), Err(100));
        assert_eq!(r.accept(1, 101, &mut out), Err(101));
        // Duplicate of a held item.
        assert_eq!(r.accept(3, 103, &mut out), Err(103));
        // Far behind (more than 2^31 ahead wraps to behind).
        assert_eq!(
            r.accept(2u32.wrapping_add(1 << 31), 104, &mut out),
            Err(104)
        );
        assert_eq!(out, vec![0, 1]);
        assert_eq!((r.held(), r.expected()), (1, 2));
        r.accept(2, 2, &mut out).unwrap();
        assert_eq!(out, vec![0, 1, 2, 3]);
        assert_eq!((r.held(), r.expected()), (0, 4));
    }

    #[test]
    fn wraparound_across_u32_max() {
        let mut r = starting_at(u32::MAX - 2);
        let mut out = Vec::new();
        r.accept(u32::MAX - 2, 1, &mut out).unwrap();
        // Items past the wrap are ahead, not behind.
        r.accept(1, 5, &mut out).unwrap();
        r.accept(u32::MAX, 3, &mut out).unwrap();
        r.accept(0, 4, &mut out).unwrap();
        assert_eq!(out, vec![1]);
        assert_eq!(r.held(), 3);
        assert_eq!(r.accept(u32::MAX - 3, 0, &mut out), Err(0));
        r.accept(u32::MAX - 1, 2, &mut out).unwrap();
        assert_eq!(out, vec![1, 2, 3, 4, 5]);
        assert_eq!((r.held(), r.expected()), (0, 2));
        assert_eq!(r.accept(u32::MAX, 9, &mut out), Err(9));
        r.accept(2, 6, &mut out).unwrap();
        assert_eq!(r.expected(), 3);
    }

    #[test]
    fn random_permutations_deliver_in_order() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        // Under Miri 50 numbers from each start, half the work: from
        // `u32::MAX - 40` they still wrap (at the 42nd), and the held items
        // still reach every path of the map that 100 reach.
        let n: u32 = if cfg!(miri) { 50 } else { 100 };
        for start in [0u32, u32::MAX - 40, 1 << 31] {
            let mut r = starting_at(start);
            let mut seqs: Vec<u32> = (0..n).map(|i| start.wrapping_add(i)).collect();
            for i in (1..seqs.len()).rev() {
                let j = (next() % (i as u64 + 1)) as usize;
                seqs.swap(i, j);
            }
            let mut out = Vec::new();
            for &s in &seqs {
                r.accept(s, s, &mut out).unwrap();
                assert_eq!(r.accept(s, s, &mut out), Err(s));
            }
            let want: Vec<u32> = (0..n).map(|i| start.wrapping_add(i)).collect();
            assert_eq!(out, want);
            assert_eq!(r.held(), 0);
            assert_eq!(r.expected(), start.wrapping_add(n));
        }
    }
}
