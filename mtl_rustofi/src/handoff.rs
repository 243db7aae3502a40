//! The thread handoff: how application threads meet at the engine state.
//! See `mtl_rustofi/CONCURRENCY.md` for the whole design.
//!
//! The state lives in a [`Handoff`] that only the holder of the progress
//! token touches. A thread with work takes the token if it is free and
//! applies its work itself ([`Handoff::run_or_combine`]); otherwise it
//! pushes a command on the lock-free inbox and tries the token once more
//! ([`Handoff::combine`]). It never waits for the token: if another thread
//! holds it, that thread applies the command. The holder applies every queued command, releases the token,
//! and looks at the inbox again, so no command is stranded (the argument
//! is in [`crate::inbox`]). A panic while holding the token poisons the
//! handoff: the state may be inconsistent, so every later call fails.
//!
//! The loom models at the end of this file run this code, not a copy.

use crate::inbox::{Batch, Inbox, Linked, Token};
use crate::sync::{AtomicBool, Ordering, UnsafeCell};

/// The handoff has been poisoned by a panic of an earlier holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Poisoned;

pub(crate) struct Handoff<S, N> {
    state: UnsafeCell<S>,
    inbox: Inbox<N>,
    token: Token,
    poisoned: AtomicBool,
}

// SAFETY: the state is only accessed by the holder of the token (one
// thread at a time), and the inbox only moves nodes whose owners keep
// them valid until applied; so sharing the handoff is sound if the state
// may move between threads.
unsafe impl<S: Send, N> Sync for Handoff<S, N> {}
// SAFETY: as above.
unsafe impl<S: Send, N> Send for Handoff<S, N> {}

impl<S, N: Linked> Handoff<S, N> {
    pub(crate) fn new(state: S) -> Self {
        Handoff {
            state: UnsafeCell::new(state),
            inbox: Inbox::new(),
            token: Token::new(),
            poisoned: AtomicBool::new(false),
        }
    }

    pub(crate) fn check(&self) -> Result<(), Poisoned> {
        if self.poisoned.load(Ordering::Acquire) {
            Err(Poisoned)
        } else {
            Ok(())
        }
    }

    /// Queues a command node for the token holder.
    ///
    /// # Safety
    /// `node` must stay valid and untouched until it has been applied (the
    /// `apply` function of whichever `combine` takes it says when).
    pub(crate) unsafe fn push(&self, node: *mut N) -> Result<(), Poisoned> {
        self.check()?;
        // SAFETY: per the function contract.
        unsafe { self.inbox.push(node) };
        Ok(())
    }

    /// If the token is free: takes it, runs `work` with the state and the
    /// queued commands, releases it; again while commands were queued
    /// meanwhile. Returns at once if another thread holds the token (or
    /// the handoff is poisoned).
    pub(crate) fn combine(&self, mut work: impl FnMut(&mut S, Batch<N>)) {
        while let Some(holder) = self.acquire() {
            self.state.with_mut(|s| {
                // SAFETY: we hold the token, which grants exclusive
                // access to the state.
                work(unsafe { &mut *s }, self.inbox.take_all())
            });
            holder.release();
            if self.inbox.is_empty() {
                break;
            }
        }
    }

    /// Takes the token if it is free and the handoff is not poisoned.
    /// Poison is read only under the token: a panicking holder stores it
    /// before its releasing swap, which the taking swap reads (or a later
    /// write of the token's release sequence), so it is seen. A poisoned
    /// handoff is so taken and released at once, which costs only its
    /// callers, who get an error anyway.
    #[inline(always)]
    fn acquire(&self) -> Option<Holder<'_, S, N>> {
        if !self.token.try_acquire() {
            return None;
        }
        if self.poisoned.load(Ordering::Acquire) {
            // A panicking holder released the token before we took it.
            self.token.release();
            return None;
        }
        Some(Holder(self))
    }

    /// If the token is free: takes it and runs `first(state, queued, ctx)`,
    /// where the caller applies the queued commands and then its own
    /// (which so never enters the inbox: the fast path of a thread that
    /// finds the engine idle), releases it, and then runs
    /// `rest(state, queued, ctx)` for whatever was queued meanwhile, as
    /// [`Handoff::combine`] does. Returns false, having run nothing, if
    /// another thread holds the token or the handoff is poisoned; the
    /// caller then queues its command. A thread's commands keep their
    /// order: the ones it queued earlier are applied or still queued, and
    /// queued ones go first. Two closures rather than one told which call
    /// it is: `first` has one call site, so it is inlined into the
    /// caller's fast path. `ctx` is what both need mutably (what
    /// finished, for the caller to deliver).
    #[inline(always)]
    pub(crate) fn run_or_combine<C>(
        &self,
        ctx: &mut C,
        first: impl FnOnce(&mut S, Batch<N>, &mut C),
        mut rest: impl FnMut(&mut S, Batch<N>, &mut C),
    ) -> bool {
        let Some(holder) = self.acquire() else {
            return false;
        };
        self.state.with_mut(|s| {
            // SAFETY: we hold the token, which grants exclusive access to
            // the state.
            first(unsafe { &mut *s }, self.inbox.take_all(), ctx)
        });
        holder.release();
        if !self.inbox.is_empty() {
            self.combine(|s, batch| rest(s, batch, ctx));
        }
        true
    }

    /// Runs `f` as the token holder, spinning until the token is free.
    /// Queued commands are handed to `f` too. Only for rare operations off
    /// the data path (peer setup, finalize).
    pub(crate) fn with_token<R>(
        &self,
        f: impl FnOnce(&mut S, Batch<N>) -> R,
    ) -> Result<R, Poisoned> {
        loop {
            self.check()?;
            if let Some(holder) = self.acquire() {
                let r = self.state.with_mut(|s| {
                    // SAFETY: we hold the token.
                    f(unsafe { &mut *s }, self.inbox.take_all())
                });
                holder.release();
                return Ok(r);
            }
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }

    pub(crate) fn inbox_is_empty(&self) -> bool {
        self.inbox.is_empty()
    }

    /// The state, for its owner once no other thread can reach it.
    pub(crate) fn with_state_mut<R>(&mut self, f: impl FnOnce(&mut S) -> R) -> R {
        self.state.with_mut(|s| {
            // SAFETY: `&mut self` excludes every other access.
            f(unsafe { &mut *s })
        })
    }
}

/// The token, held. Its holder gives it back with [`Holder::release`];
/// dropped otherwise, which happens only when the holder's work unwinds,
/// it poisons the handoff and then releases the token (so the next holder
/// sees the poison). The normal path so never asks whether it is
/// panicking.
struct Holder<'a, S, N>(&'a Handoff<S, N>);

impl<S, N> Holder<'_, S, N> {
    #[inline(always)]
    fn release(self) {
        let h = std::mem::ManuallyDrop::new(self);
        h.0.token.release();
    }
}

impl<S, N> Drop for Holder<'_, S, N> {
    #[cold]
    fn drop(&mut self) {
        self.0.poisoned.store(true, Ordering::Release);
        self.0.token.release();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::inbox::test_node::{node, Node};
    use std::sync::Arc;

    fn apply(seen: &mut Vec<u64>, batch: Batch<Node>) {
        // SAFETY: every node is a leaked Box pushed once.
        seen.extend(batch.map(|n| unsafe { Box::from_raw(n) }.val));
    }

    #[test]
    fn threads_lose_nothing_and_keep_their_order() {
        const THREADS: u64 = 4;
        const PER: u64 = if cfg!(miri) { 50 } else { 20_000 };
        let h = Arc::new(Handoff::new(Vec::new()));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let h = h.clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        // SAFETY: fresh node, freed by `apply`.
                        unsafe { h.push(node(t << 32 | i)).unwrap() };
                        h.combine(apply);
                    }
                })
            })
            .collect();
        for j in handles {
            j.join().unwrap();
        }
        let seen = Arc::try_unwrap(h)
            .ok()
            .expect("threads joined")
            .with_state_mut(std::mem::take);
        assert_eq!(seen.len() as u64, THREADS * PER, "every command once");
        let mut last = vec![None; THREADS as usize];
        for v in &seen {
            let (t, i) = ((v >> 32) as usize, v & 0xffff_ffff);
            assert!(last[t].is_none_or(|l| l < i), "per-thread order kept");
            last[t] = Some(i);
        }
    }

    #[test]
    fn a_panicking_holder_poisons() {
        let h: Handoff<Vec<u64>, Node> = Handoff::new(Vec::new());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            h.combine(|_, _| panic!("boom"));
        }));
        assert!(r.is_err());
        assert_eq!(h.check(), Err(Poisoned));
        // SAFETY: never applied (poisoned); freed below.
        let n = node(1);
        // SAFETY: as above.
        assert_eq!(unsafe { h.push(n) }, Err(Poisoned));
        // SAFETY: the push was refused, so the node is still ours.
        drop(unsafe { Box::from_raw(n) });
        assert!(h.with_token(|_, _| ()).is_err());
    }
}

#[cfg(loom)]
mod loom_tests {
    //! Model checks of the handoff (run with `RUSTFLAGS="--cfg loom"
    //! cargo test --lib handoff::loom`).
    use super::*;
    use crate::matching::{Envelope, Matcher, Selector, Source, Tag};
    use crate::sync::AtomicPtr;
    use loom::sync::Arc;
    use std::ptr;

    struct Node {
        link: AtomicPtr<Node>,
        cmd: Cmd,
    }
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Cmd {
        Item(u32, u32),
        Post(u32),
        Arrive(u32),
    }
    // SAFETY: `link` always returns the same field.
    unsafe impl Linked for Node {
        fn link(&self) -> &AtomicPtr<Node> {
            &self.link
        }
    }

    /// The engine's submit path: push, then combine.
    fn submit<S>(h: &Handoff<S, Node>, cmd: Cmd, apply: impl Fn(&mut S, Cmd)) {
        let n = Box::into_raw(Box::new(Node {
            link: AtomicPtr::new(ptr::null_mut()),
            cmd,
        }));
        // SAFETY: fresh node, freed when applied.
        unsafe { h.push(n).unwrap() };
        h.combine(|s, batch| {
            for n in batch {
                // SAFETY: the node is ours now (leaked Box, pushed once).
                let n = unsafe { Box::from_raw(n) };
                apply(s, n.cmd);
            }
        });
    }

    #[test]
    fn no_command_is_stranded_or_applied_twice() {
        loom::model(|| {
            let h = Arc::new(Handoff::new(Vec::<Cmd>::new()));
            let hs: Vec<_> = (0..2)
                .map(|t| {
                    let h = h.clone();
                    loom::thread::spawn(move || {
                        submit(&h, Cmd::Item(t, 0), |s, c| s.push(c));
                        submit(&h, Cmd::Item(t, 1), |s, c| s.push(c));
                    })
                })
                .collect();
            for j in hs {
                j.join().unwrap();
            }
            // After every submitter returned, everything has been applied.
            all_applied_in_thread_order(&h);
        });
    }

    /// Nothing is left queued, and both threads' two items were applied,
    /// each thread's in its order.
    fn all_applied_in_thread_order(h: &Handoff<Vec<Cmd>, Node>) {
        if !h.inbox_is_empty() {
            let s = h.with_token(|s, b| (s.clone(), b.count())).unwrap();
            panic!("stranded: applied {:?}, queued {}", s.0, s.1);
        }
        let s = h.with_token(|s, _| s.clone()).unwrap();
        assert_eq!(s.len(), 4);
        for t in 0..2 {
            let mine: Vec<_> = s
                .iter()
                .filter(|c| matches!(c, Cmd::Item(x, _) if *x == t))
                .collect();
            assert_eq!(mine, vec![&Cmd::Item(t, 0), &Cmd::Item(t, 1)]);
        }
    }

    /// The engine's start path: apply directly if the token is free,
    /// else push and combine.
    fn start<S>(h: &Handoff<S, Node>, cmd: Cmd, apply: impl Fn(&mut S, Cmd)) {
        let apply_batch = |s: &mut S, batch: Batch<Node>| {
            for n in batch {
                // SAFETY: the node is ours now (leaked Box, pushed once).
                let n = unsafe { Box::from_raw(n) };
                apply(s, n.cmd);
            }
        };
        let ran = h.run_or_combine(
            &mut (),
            |s, batch, _| {
                apply_batch(s, batch);
                apply(s, cmd);
            },
            |s, batch, _| apply_batch(s, batch),
        );
        if !ran {
            submit(h, cmd, &apply);
        }
    }

    #[test]
    fn direct_and_queued_commands_are_all_applied_in_thread_order() {
        loom::model(|| {
            let h = Arc::new(Handoff::new(Vec::<Cmd>::new()));
            let direct = {
                let h = h.clone();
                loom::thread::spawn(move || {
                    start(&h, Cmd::Item(0, 0), |s, c| s.push(c));
                    start(&h, Cmd::Item(0, 1), |s, c| s.push(c));
                })
            };
            submit(&h, Cmd::Item(1, 0), |s, c| s.push(c));
            start(&h, Cmd::Item(1, 1), |s, c| s.push(c));
            direct.join().unwrap();
            all_applied_in_thread_order(&h);
        });
    }

    #[test]
    fn receive_posted_while_a_message_arrives_matches_exactly_once() {
        loom::model(|| {
            type M = (Matcher<u32, u32>, Vec<(u32, u32)>);
            let h = Arc::new(Handoff::new((Matcher::new(), Vec::new())));
            let env = Envelope {
                ctx: 1,
                src: 0,
                tag: 7,
            };
            let apply = move |(m, matched): &mut M, c| match c {
                Cmd::Post(r) => {
                    let sel = Selector {
                        ctx: 1,
                        src: Source::Any,
                        tag: Tag::Value(7),
                    };
                    if let Ok((r, _, u)) = m.post(sel, r) {
                        matched.push((r, u));
                    }
                }
                Cmd::Arrive(u) => {
                    if let Some((r, u)) = m.arrive(env, u) {
                        matched.push((r, u));
                    }
                }
                Cmd::Item(..) => unreachable!(),
            };
            let poster = {
                let h = h.clone();
                loom::thread::spawn(move || submit(&h, Cmd::Post(100), apply))
            };
            // This thread plays the progress engine delivering an arrival.
            submit(&h, Cmd::Arrive(200), apply);
            poster.join().unwrap();
            let (matched, left) = h
                .with_token(|(m, matched): &mut M, _| {
                    (matched.clone(), m.posted_len() + m.unexpected_len())
                })
                .unwrap();
            assert_eq!(matched, vec![(100, 200)], "matched exactly once");
            assert_eq!(left, 0);
        });
    }
}
