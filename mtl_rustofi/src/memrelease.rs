//! Address ranges returned to the system, on their way from a memory-release
//! hook to the registration cache.
//!
//! The hook runs inside `munmap`/`free` in whatever thread released the
//! memory, possibly while another thread holds the progress token and is
//! inside the core. So pushing must neither allocate nor take a lock: this
//! is a fixed-size ring (a bounded multi-producer queue with one sequence
//! number per slot) that the token holder drains before every cache lookup.
//! When the ring is full, pushing sets an overflow flag instead, and the
//! drain then invalidates everything: a lost range could otherwise leave a
//! registration of memory that no longer exists in the cache.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Slots of the ring.
pub(crate) const RING_SLOTS: usize = 256;

struct Slot {
    /// `pos` when free for the producer at `pos`, `pos + 1` when it holds
    /// that producer's range.
    seq: AtomicUsize,
    addr: AtomicU64,
    len: AtomicU64,
}

/// What the consumer learns in one drain.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Every range was delivered (possibly none).
    Ranges,
    /// Ranges were lost: the consumer must treat all memory as released.
    Overflow,
}

pub(crate) struct ReleaseRing {
    slots: [Slot; RING_SLOTS],
    tail: AtomicUsize,
    /// Only the token holder moves it.
    head: AtomicUsize,
    overflow: AtomicBool,
    /// Cheap test for the common case of nothing released.
    pending: AtomicBool,
}

impl ReleaseRing {
    pub(crate) const fn new() -> ReleaseRing {
        let mut slots = [const {
            Slot {
                seq: AtomicUsize::new(0),
                addr: AtomicU64::new(0),
                len: AtomicU64::new(0),
            }
        }; RING_SLOTS];
        let mut i = 0;
        while i < RING_SLOTS {
            slots[i].seq = AtomicUsize::new(i);
            i += 1;
        }
        ReleaseRing {
            slots,
            tail: AtomicUsize::new(0),
            head: AtomicUsize::new(0),
            overflow: AtomicBool::new(false),
            pending: AtomicBool::new(false),
        }
    }

    /// Notes that `[addr, addr + len)` went back to the system. Any thread;
    /// never blocks, never allocates.
    pub(crate) fn push(&self, addr: usize, len: usize) {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos % RING_SLOTS];
            let seq = slot.seq.load(Ordering::Acquire);
            if seq == pos {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.addr.store(addr as u64, Ordering::Relaxed);
                        slot.len.store(len as u64, Ordering::Relaxed);
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        break;
                    }
                    Err(now) => pos = now,
                }
            } else if (seq as isize).wrapping_sub(pos as isize) < 0 {
                // Full: the consumer has not freed this slot yet.
                self.overflow.store(true, Ordering::Release);
                break;
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
        self.pending.store(true, Ordering::Release);
    }

    /// Hands every queued range to `f` (token holder only).
    pub(crate) fn drain(&self, mut f: impl FnMut(usize, usize)) -> Drained {
        if !self.pending.load(Ordering::Acquire) {
            return Drained::Ranges;
        }
        // Cleared first: a push racing with this drain sets it again.
        self.pending.store(false, Ordering::SeqCst);
        let mut head = self.head.load(Ordering::Relaxed);
        let mut waits = 0u32;
        loop {
            let slot = &self.slots[head % RING_SLOTS];
            if slot.seq.load(Ordering::Acquire) != head.wrapping_add(1) {
                // Not published yet. If a producer has reserved it (the
                // tail is past it), it publishes within a few instructions,
                // and releases queued behind it must not be left for the
                // next drain: a thread whose munmap returned may already
                // look up a new buffer at the same address.
                if self.tail.load(Ordering::Acquire) == head {
                    break;
                }
                waits += 1;
                if waits < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            let addr = slot.addr.load(Ordering::Relaxed) as usize;
            let len = slot.len.load(Ordering::Relaxed) as usize;
            slot.seq
                .store(head.wrapping_add(RING_SLOTS), Ordering::Release);
            head = head.wrapping_add(1);
            f(addr, len);
        }
        self.head.store(head, Ordering::Relaxed);
        if self.overflow.swap(false, Ordering::AcqRel) {
            Drained::Overflow
        } else {
            Drained::Ranges
        }
    }
}

impl Default for ReleaseRing {
    fn default() -> ReleaseRing {
        ReleaseRing::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_come_out_in_order() {
        let r = ReleaseRing::new();
        for round in 0..3 {
            for i in 0..10 {
                r.push(round * 100 + i, i + 1);
            }
            let mut got = Vec::new();
            assert_eq!(r.drain(|a, l| got.push((a, l))), Drained::Ranges);
            let want: Vec<_> = (0..10).map(|i| (round * 100 + i, i + 1)).collect();
            assert_eq!(got, want);
        }
        assert_eq!(r.drain(|_, _| panic!("nothing queued")), Drained::Ranges);
    }

    #[test]
    fn a_full_ring_reports_overflow_once() {
        let r = ReleaseRing::new();
        for i in 0..RING_SLOTS + 5 {
            r.push(i, 1);
        }
        let mut n = 0;
        assert_eq!(r.drain(|_, _| n += 1), Drained::Overflow);
        assert_eq!(n, RING_SLOTS);
        r.push(7, 1);
        let mut got = Vec::new();
        assert_eq!(r.drain(|a, l| got.push((a, l))), Drained::Ranges);
        assert_eq!(got, vec![(7, 1)]);
    }

    #[test]
    fn concurrent_pushes_are_all_seen_or_flag_overflow() {
        let r = std::sync::Arc::new(ReleaseRing::new());
        let per = if cfg!(miri) { 20 } else { 5_000 };
        let threads: Vec<_> = (0..3)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        r.push(t * 1_000_000 + i, 1);
                    }
                })
            })
            .collect();
        let mut seen = 0usize;
        let mut overflowed = false;
        let mut last = [None::<usize>; 3];
        let mut consume = |seen: &mut usize, overflowed: &mut bool| {
            let d = r.drain(|a, _| {
                let (t, i) = (a / 1_000_000, a % 1_000_000);
                // Per producer, ranges arrive in the order pushed.
                assert!(last[t].is_none_or(|p| p < i));
                last[t] = Some(i);
                *seen += 1;
            });
            *overflowed |= d == Drained::Overflow;
        };
        while !threads.iter().all(|t| t.is_finished()) {
            consume(&mut seen, &mut overflowed);
        }
        for t in threads {
            t.join().unwrap();
        }
        consume(&mut seen, &mut overflowed);
        assert!(seen <= 3 * per);
        assert!(
            overflowed || seen == 3 * per,
            "lost {} ranges without overflow",
            3 * per - seen
        );
    }
}
