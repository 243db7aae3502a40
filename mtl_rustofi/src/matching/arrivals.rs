//! One context's queued unexpected messages in arrival order: what a
//! wildcard receive or probe scans for the earliest message it accepts.
//!
//! Messages arrive with increasing sequence numbers, so the index is a
//! queue appended at the back, sorted by construction: an arrival costs a
//! push, where a B-tree paid a search from its root and now and then a
//! node. Most messages leave in arrival order (a specific receive takes
//! the head of its bin, and bins fill in arrival order), and one that
//! leaves at the front is popped. One that leaves from the middle is found
//! by binary search and marked taken; taken entries at the front are
//! popped as they come there, and once they outnumber the live ones (plus
//! [`SLACK`]) the queue is compacted, so its length stays within twice the
//! queued messages plus a constant, and the work per removal is constant
//! on average.

use std::collections::VecDeque;

use super::bins::Container;

/// Taken entries tolerated beyond the live count before a compaction.
const SLACK: usize = 32;

#[derive(Clone, Copy, Debug)]
struct Arrival {
    seq: u64,
    src: i32,
    tag: i32,
    taken: bool,
}

/// See the module documentation.
#[derive(Default)]
pub(super) struct Arrivals {
    q: VecDeque<Arrival>,
    /// Entries not taken.
    live: usize,
}

impl Arrivals {
    /// Appends message `seq`, which must be newer than every entry.
    #[inline]
    pub(super) fn push(&mut self, seq: u64, src: i32, tag: i32) {
        debug_assert!(self.q.back().is_none_or(|a| a.seq < seq));
        self.q.push_back(Arrival {
            seq,
            src,
            tag,
            taken: false,
        });
        self.live += 1;
    }

    /// Removes message `seq`; false if it is not in the index. The
    /// common removal, of the oldest message while no entry is marked
    /// taken, is a pop and two comparisons.
    #[inline(always)]
    pub(super) fn remove(&mut self, seq: u64) -> bool {
        if self.q.front().is_some_and(|a| a.seq == seq) {
            self.q.pop_front();
            self.live -= 1;
            self.tidy();
            return true;
        }
        self.remove_behind(seq)
    }

    /// [`Self::remove`] of a message behind the front: marked taken.
    #[inline(never)]
    fn remove_behind(&mut self, seq: u64) -> bool {
        let Ok(i) = self.q.binary_search_by_key(&seq, |a| a.seq) else {
            return false;
        };
        let a = &mut self.q[i];
        if a.taken {
            return false;
        }
        a.taken = true;
        self.live -= 1;
        self.tidy();
        true
    }

    /// Pops taken entries off the front; empties the queue once nothing
    /// in it is live; compacts it once taken entries outnumber live ones
    /// by more than [`SLACK`]. Inlined: with no entry taken (equal
    /// counts, the common case) there is nothing to do, and with one
    /// taken in the middle only the front is looked at.
    #[inline(always)]
    fn tidy(&mut self) {
        if self.q.len() == self.live {
            return;
        }
        if self.live == 0 {
            self.q.clear();
            return;
        }
        while self.q.front().is_some_and(|a| a.taken) {
            self.q.pop_front();
        }
        if self.q.len() - self.live > self.live + SLACK {
            self.compact();
        }
    }

    #[cold]
    fn compact(&mut self) {
        self.q.retain(|a| !a.taken);
    }

    /// The earliest live message whose source and tag `accept` takes.
    #[inline]
    pub(super) fn first(
        &self,
        mut accept: impl FnMut(i32, i32) -> bool,
    ) -> Option<(u64, i32, i32)> {
        self.q
            .iter()
            .find(|a| !a.taken && accept(a.src, a.tag))
            .map(|a| (a.seq, a.src, a.tag))
    }

    /// Source and tag of live message `seq`.
    #[cfg(test)]
    pub(super) fn get(&self, seq: u64) -> Option<(i32, i32)> {
        let i = self.q.binary_search_by_key(&seq, |a| a.seq).ok()?;
        let a = &self.q[i];
        (!a.taken).then_some((a.src, a.tag))
    }

    /// Live messages.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// Entries held, taken ones included.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.q.len()
    }
}

impl Container for Arrivals {
    #[inline]
    fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn worth_keeping(&self) -> bool {
        self.q.worth_keeping()
    }
}

#[cfg(test)]
mod tests {
    use super::{Arrivals, SLACK};

    fn filled(n: u64) -> Arrivals {
        let mut a = Arrivals::default();
        for seq in 0..n {
            a.push(seq, seq as i32 % 3, seq as i32);
        }
        a
    }

    #[test]
    fn removal_in_order_pops_and_out_of_order_marks() {
        let mut a = filled(5);
        assert!(a.remove(0));
        assert!(a.remove(2));
        assert!(!a.remove(2), "taken already");
        assert!(!a.remove(9), "never there");
        assert_eq!(a.len(), 3);
        assert_eq!(a.held(), 4, "2 is marked, 0 popped");
        assert_eq!(a.get(2), None);
        assert_eq!(a.get(3), Some((0, 3)));
        assert!(a.remove(1));
        assert_eq!(a.held(), 2, "1 popped, and 2 behind it");
        assert_eq!(a.first(|_, _| true), Some((3, 0, 3)));
        assert_eq!(a.first(|src, _| src == 1), Some((4, 1, 4)));
        assert!(a.remove(3) && a.remove(4));
        assert!(super::Container::is_empty(&a));
        assert_eq!(a.held(), 0);
    }

    #[test]
    fn a_message_that_stays_keeps_the_index_bounded() {
        // Message 0 stays queued while many others come and go behind it.
        let mut a = filled(1);
        for seq in 1..10_000u64 {
            a.push(seq, 1, 1);
            assert!(a.remove(seq));
            assert!(a.held() <= 2 * a.len() + SLACK + 1, "{} held", a.held());
        }
        assert_eq!(a.len(), 1);
        assert_eq!(a.first(|_, _| true), Some((0, 0, 0)));
    }

    #[test]
    fn removals_at_the_front_compact_what_was_taken_behind() {
        // 40 entries taken from behind, then the front taken in order: the
        // taken ones come to outnumber the live ones and are compacted by
        // a removal at the front.
        let mut a = filled(100);
        for seq in 60..100 {
            assert!(a.remove(seq));
        }
        assert_eq!((a.len(), a.held()), (60, 100));
        for seq in 0..60 {
            assert!(a.remove(seq));
            assert!(a.held() <= 2 * a.len() + SLACK + 1, "{} held", a.held());
            if a.len() < 40 - SLACK {
                assert_eq!(a.held(), a.len(), "compacted at {seq}");
            }
        }
        assert_eq!(a.held(), 0);
        assert!(!a.remove(99), "taken already");
    }

    #[test]
    fn first_skips_taken_entries() {
        let mut a = filled(6);
        assert!(a.remove(1) && a.remove(2));
        assert_eq!(a.first(|_, tag| tag >= 1), Some((3, 0, 3)));
        assert_eq!(a.first(|src, _| src == 2), Some((5, 2, 5)));
    }
}
