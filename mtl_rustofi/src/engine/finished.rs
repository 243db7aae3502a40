//! Finished requests on their way from the token holder to its caller,
//! who delivers them to Open MPI once the token is released (a completion
//! callback may call back into the MTL).
//!
//! The finished requests live in the caller's stack frame, as many as one
//! poll reads from one peer's ring (a window of small messages arrives as a
//! burst):
//! no allocation, and no thread-local vector (in a shared library, each
//! thread-local access is a call into the dynamic linker). The slots are
//! left uninitialised, so a large frame costs nothing to set up. Any
//! beyond them go to a heap vector.

use super::Completion;
use std::mem::MaybeUninit;

/// How many finished requests a call holds without allocating: one ring's
/// budget of a poll (`driver::shm::POLL_BUDGET`; a poll that reads several
/// peers' rings may go beyond), 2 KiB of stack.
const INLINE: usize = 64;

pub(crate) struct Finished {
    /// How many finished requests it holds: the first `INLINE` in
    /// `first`, any beyond them in `more`.
    n: usize,
    /// Written below `n` (all of them once `n >= INLINE`); left unwritten
    /// above it, so that making an empty list (every entry call does)
    /// stores nothing but `n`.
    first: [MaybeUninit<Completion>; INLINE],
    /// Initialised while `n > INLINE` (and only then): a list that never
    /// overflows its inline slots, as nearly every one, neither makes nor
    /// drops a vector.
    more: MaybeUninit<Vec<Completion>>,
}

impl Finished {
    #[inline]
    pub(crate) fn new() -> Finished {
        Finished {
            n: 0,
            first: [const { MaybeUninit::uninit() }; INLINE],
            more: MaybeUninit::uninit(),
        }
    }

    /// Moves the core's finished requests here (the core keeps its
    /// vector's capacity).
    #[inline(always)]
    pub(crate) fn take_from(&mut self, events: &mut Vec<Completion>) {
        // Copied out and cleared rather than drained: completions are
        // plain data, and a drain's guard costs more than the copy.
        match events[..] {
            // Most posts finish nothing.
            [] => return,
            // Most polls finish one request, into a list still empty: its
            // slot is then a constant place and its count a constant (any
            // other goes to `take_many`, which places it the same way).
            [e] if self.n == 0 => {
                self.first[0].write(e);
                self.n = 1;
            }
            _ => self.take_many(events),
        }
        events.clear();
    }

    /// [`Finished::take_from`] of a burst (a window of small messages
    /// arrives as one): one block copy into the inline slots, the rest
    /// beyond them.
    #[inline(never)]
    fn take_many(&mut self, events: &[Completion]) {
        let n = self.n;
        let from = n.min(INLINE);
        let k = events.len().min(INLINE - from);
        for (slot, &e) in self.first[from..from + k].iter_mut().zip(&events[..k]) {
            slot.write(e);
        }
        let rest = &events[k..];
        if !rest.is_empty() {
            if n > INLINE {
                // SAFETY: `more` is initialised while `n > INLINE`.
                unsafe { self.more.assume_init_mut() }.extend_from_slice(rest);
            } else {
                // Not initialised yet (`n <= INLINE`): nothing to leak.
                self.more.write(rest.to_vec());
            }
        }
        // Raised only now, once `more` holds what `n` says (a failed
        // allocation leaves the list as it was).
        self.n = n + events.len();
    }

    /// Whether nothing finished.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Takes the one finished request, if exactly one finished (it is in
    /// the inline slots; `self` is then empty); else takes nothing.
    #[inline(always)]
    pub(crate) fn take_only_one(&mut self) -> Option<Completion> {
        if self.n == 1 {
            self.n = 0;
            // SAFETY: `take_from` wrote every slot below `n` before raising it,
            // and `n` is lowered here so that this one is handed out once.
            Some(unsafe { self.first[0].assume_init() })
        } else {
            None
        }
    }

    /// Hands the finished requests to `f` in the order they finished;
    /// empties `self`. (A send complete on return, `Started::Complete`,
    /// is not among them: its caller completes it after these.)
    #[inline]
    pub(crate) fn deliver(&mut self, mut f: impl FnMut(Completion)) {
        let n = std::mem::take(&mut self.n);
        for c in &self.first[..n.min(INLINE)] {
            // SAFETY: `take_from` wrote every slot below `n` (all of them
            // if `n >= INLINE`) before raising it, and nothing else lowers
            // `n` but this `take`.
            f(unsafe { c.assume_init() });
        }
        if n > INLINE {
            // SAFETY: `more` is initialised while `n > INLINE`; `n` is 0 now,
            // so that it is taken out once (and not dropped again).
            let more = unsafe { self.more.assume_init_read() };
            more.into_iter().for_each(f);
        }
    }
}

impl Drop for Finished {
    /// Frees `more` if it is initialised. Inlined where a list ends: after
    /// a test that found it empty, or the single completion taken out,
    /// the compiler knows `n` and drops nothing.
    #[inline]
    fn drop(&mut self) {
        if self.n > INLINE {
            // SAFETY: `more` is initialised while `n > INLINE`, and this is
            // the last use of `self`.
            unsafe { self.more.assume_init_drop() };
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::proto::ids::ReqId;
    use crate::proto::Status;

    #[test]
    fn keeps_order_beyond_the_inline_slots() {
        let mut f = Finished::new();
        let beyond = INLINE + 16;
        let mut core: Vec<Completion> = (0..beyond)
            .map(|i| Completion::Send {
                req: ReqId(i),
                status: Status::Ok,
            })
            .collect();
        f.take_from(&mut core);
        assert!(core.is_empty() && core.capacity() >= beyond);
        core.push(Completion::Cancelled { req: ReqId(beyond) });
        f.take_from(&mut core);
        let mut got = Vec::new();
        f.deliver(|c| {
            got.push(match c {
                Completion::Send { req, .. } | Completion::Cancelled { req } => req.0,
                Completion::Recv { req, .. } => req.0,
            })
        });
        assert_eq!(got, (0..=beyond).collect::<Vec<_>>());
        assert!(f.is_empty());
        f.deliver(|_| panic!("delivered twice"));
    }

    fn sends(from: usize, to: usize) -> Vec<Completion> {
        (from..to)
            .map(|i| Completion::Send {
                req: ReqId(i),
                status: Status::Ok,
            })
            .collect()
    }

    fn reqs(f: &mut Finished) -> Vec<usize> {
        let mut got = Vec::new();
        f.deliver(|c| match c {
            Completion::Send { req, .. } | Completion::Cancelled { req } => got.push(req.0),
            Completion::Recv { req, .. } => got.push(req.0),
        });
        got
    }

    #[test]
    fn overflows_when_the_inline_slots_are_exactly_full_and_drops_what_it_holds() {
        let mut f = Finished::new();
        // One at a time up to the last inline slot, then a burst that
        // fills it exactly, then one more each way: the vector is made
        // only by the first beyond the slots, then extended.
        for i in 0..INLINE - 2 {
            f.take_from(&mut sends(i, i + 1));
        }
        f.take_from(&mut sends(INLINE - 2, INLINE));
        f.take_from(&mut sends(INLINE, INLINE + 1));
        f.take_from(&mut sends(INLINE + 1, INLINE + 3));
        f.take_from(&mut sends(INLINE + 3, INLINE + 4));
        assert_eq!(reqs(&mut f), (0..INLINE + 4).collect::<Vec<_>>());
        // Used again after a delivery, and dropped while it holds a
        // vector: freed once, never delivered.
        f.take_from(&mut sends(0, INLINE + 5));
        assert!(!f.is_empty());
        drop(f);
        let mut f = Finished::new();
        f.take_from(&mut sends(7, 8));
        assert_eq!(f.take_only_one().map(|_| ()), Some(()));
        assert!(f.is_empty() && reqs(&mut f).is_empty());
    }
}
