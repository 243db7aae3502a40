//! The queue of a posted bin: a lone entry held inline, more of them in a
//! `VecDeque` (the ring).
//!
//! A bin usually holds no receive or one (a receive posted, then matched
//! by its message): that one is written into the bin's slot and read back
//! out of it, with none of the ring's index arithmetic and no load of its
//! buffer; a deeper bin (a window of receives with one envelope) keeps
//! them in the ring.
//!
//! The queue is either its inline entry alone or the ring alone, never
//! both: an entry goes inline only into an empty queue, and a second one
//! moves it into the ring first. A pop so looks at one place, and a deep
//! bin's pushes and pops pay for the inline place only the test that it
//! is empty.

use std::collections::VecDeque;

/// A FIFO queue that holds a lone entry inline and more of them in a
/// ring, never both; see the module documentation.
pub(super) struct HeadQueue<T> {
    head: Option<T>,
    rest: VecDeque<T>,
}

impl<T> Default for HeadQueue<T> {
    fn default() -> Self {
        HeadQueue {
            head: None,
            rest: VecDeque::new(),
        }
    }
}

impl<T> HeadQueue<T> {
    /// Appends `t`: inline if the queue is empty.
    #[inline(always)]
    pub(super) fn push_back(&mut self, t: T) {
        if self.head.is_none() {
            if self.rest.is_empty() {
                self.head = Some(t);
                return;
            }
        } else {
            self.spill();
        }
        self.rest.push_back(t);
    }

    /// Moves the inline entry into the (empty) ring, ahead of a second one.
    #[cold]
    fn spill(&mut self) {
        debug_assert!(self.rest.is_empty());
        self.rest.extend(self.head.take());
    }

    /// Removes the first entry.
    #[inline(always)]
    pub(super) fn pop_front(&mut self) -> Option<T> {
        if self.head.is_some() {
            return self.head.take();
        }
        self.rest.pop_front()
    }

    #[inline(always)]
    pub(super) fn front(&self) -> Option<&T> {
        match &self.head {
            Some(t) => Some(t),
            None => self.rest.front(),
        }
    }

    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.head.is_none() && self.rest.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }

    /// Slots of the ring's buffer.
    pub(super) fn capacity(&self) -> usize {
        self.rest.capacity()
    }

    /// The entries in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.head.iter().chain(self.rest.iter())
    }

    /// Whether an entry whose `key` is `k` is queued, for entries in
    /// increasing `key` order (binary search in the ring).
    pub(super) fn contains_sorted(&self, k: u64, key: impl Fn(&T) -> u64) -> bool {
        match &self.head {
            Some(t) => key(t) == k,
            None => self.rest.binary_search_by_key(&k, key).is_ok(),
        }
    }

    /// Removes the entry whose `key` is `k`, for entries in increasing
    /// `key` order.
    pub(super) fn remove_sorted(&mut self, k: u64, key: impl Fn(&T) -> u64) -> Option<T> {
        match &self.head {
            Some(t) if key(t) == k => self.head.take(),
            Some(_) => None,
            None => {
                let pos = self.rest.binary_search_by_key(&k, key).ok()?;
                self.rest.remove(pos)
            }
        }
    }
}

impl<T> IntoIterator for HeadQueue<T> {
    type Item = T;
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<T>, std::collections::vec_deque::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.head.into_iter().chain(self.rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sequence of 12 pushes and pops (8 under Miri), the queue
    /// held to a depth of 4, keeps FIFO order against a `VecDeque`, and
    /// removal by key finds every entry.
    #[test]
    fn fifo_against_vecdeque() {
        let steps = if cfg!(miri) { 8 } else { 12 };
        let mut q: HeadQueue<u64> = HeadQueue::default();
        let mut m: VecDeque<u64> = VecDeque::new();
        let mut next = 0u64;
        // Bits of `ops` pick push (1) or pop (0).
        for ops in 0u32..(1 << steps) {
            for i in 0..steps {
                if ops >> i & 1 == 1 && m.len() < 4 {
                    q.push_back(next);
                    m.push_back(next);
                    next += 1;
                } else {
                    assert_eq!(q.pop_front(), m.pop_front());
                }
                assert_eq!(q.front(), m.front());
                assert_eq!(q.len(), m.len());
                assert_eq!(q.is_empty(), m.is_empty());
                assert!(q.iter().eq(m.iter()));
                assert!(q.head.is_none() || q.rest.is_empty());
            }
            if let Some(&k) = m.get(ops as usize % 4) {
                assert!(q.contains_sorted(k, |&t| t));
                assert_eq!(q.remove_sorted(k, |&t| t), Some(k));
                m.retain(|&t| t != k);
                assert!(!q.contains_sorted(k, |&t| t));
                assert!(q.iter().eq(m.iter()));
            }
        }
        let rest: Vec<u64> = q.into_iter().collect();
        assert!(rest.iter().eq(m.iter()));
    }
}
