//! Where threads meet: a lock-free multi-producer inbox of commands and the
//! progress token. See `mtl_rustofi/CONCURRENCY.md` for the whole design.
//!
//! - [`Inbox`] is an intrusive Treiber stack: `push` is a CAS loop (lock
//!   free), `take_all` swaps the head out in one atomic step (wait free) and
//!   returns the batch in push order.
//! - [`Token`] is a try-only flag: whoever sets it owns the engine state
//!   until it releases it. Nobody ever waits for it; a thread that fails to
//!   take it leaves its command in the inbox for the holder.
//!
//! The holder's protocol (`combine` in the engine): take the token, apply
//! every queued command, release, then look at the inbox again and retry if
//! it is not empty. Producers push, then try to take the token. With
//! sequentially consistent ordering on the push, the release and the
//! re-check, a command can never be stranded: either the holder's re-check
//! sees the push, or the pusher's attempt sees the released token.

use crate::sync::{AtomicBool, AtomicPtr, Ordering};
use std::ptr;

/// A node that can be linked into an [`Inbox`].
///
/// # Safety
/// `link` must always return the same field of the node.
pub(crate) unsafe trait Linked: Sized {
    fn link(&self) -> &AtomicPtr<Self>;
}

pub(crate) struct Inbox<N> {
    head: AtomicPtr<N>,
}

// SAFETY: the inbox only moves raw node pointers between threads; the
// nodes' owners guarantee they stay valid while queued (see `push`).
unsafe impl<N> Send for Inbox<N> {}
// SAFETY: `&Inbox` only reaches `head` through atomic operations; the
// nodes behind it are governed by `push`'s contract, as for Send.
unsafe impl<N> Sync for Inbox<N> {}

impl<N: Linked> Default for Inbox<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<N: Linked> Inbox<N> {
    pub(crate) fn new() -> Self {
        Inbox {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Queues a node.
    ///
    /// # Safety
    /// `node` must be valid, not already queued, and stay valid (and not be
    /// written by anyone else) until the consumer has taken it from the
    /// batch returned by `take_all`.
    pub(crate) unsafe fn push(&self, node: *mut N) {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: per the contract the node is ours until published.
            unsafe { (*node).link().store(head, Ordering::Relaxed) };
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Takes every queued node, oldest first.
    pub(crate) fn take_all(&self) -> Batch<N> {
        // An empty inbox (the common case when polling) costs a load, not
        // a locked swap; a push racing with it is seen by the holder's
        // re-check after releasing the token, as with an empty swap.
        if self.head.load(Ordering::SeqCst).is_null() {
            return Batch {
                next: ptr::null_mut(),
            };
        }
        let mut cur = self.head.swap(ptr::null_mut(), Ordering::SeqCst);
        // The stack holds the newest node first: reverse it.
        let mut fifo: *mut N = ptr::null_mut();
        while !cur.is_null() {
            // SAFETY: nodes in a taken batch are owned by the consumer
            // (push's contract keeps them valid).
            let next = unsafe { (*cur).link().load(Ordering::Relaxed) };
            // SAFETY: `cur` is still a valid node owned by the consumer;
            // no producer links to it any more (it left the stack).
            unsafe { (*cur).link().store(fifo, Ordering::Relaxed) };
            fifo = cur;
            cur = next;
        }
        Batch { next: fifo }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst).is_null()
    }
}

/// Nodes taken from an inbox, in push order. Each node's link is read
/// before the node is handed out, so the consumer may complete (and so
/// release) a node as soon as it gets it.
pub(crate) struct Batch<N> {
    next: *mut N,
}

impl<N: Linked> Iterator for Batch<N> {
    type Item = *mut N;
    fn next(&mut self) -> Option<*mut N> {
        if self.next.is_null() {
            return None;
        }
        let n = self.next;
        // SAFETY: the node belongs to this batch and is still valid; its
        // link is read before it is handed out.
        self.next = unsafe { (*n).link().load(Ordering::Relaxed) };
        Some(n)
    }
}

/// The progress token.
pub(crate) struct Token {
    busy: AtomicBool,
}

impl Default for Token {
    fn default() -> Self {
        Self::new()
    }
}

impl Token {
    pub(crate) fn new() -> Self {
        Token {
            busy: AtomicBool::new(false),
        }
    }

    /// Takes the token if it is free; never waits.
    pub(crate) fn try_acquire(&self) -> bool {
        self.busy
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// Releases the token (only its holder may call this).
    pub(crate) fn release(&self) {
        self.busy.store(false, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct Node {
        link: AtomicPtr<Node>,
        val: u64,
    }
    // SAFETY: `link` always returns the same field.
    unsafe impl Linked for Node {
        fn link(&self) -> &AtomicPtr<Node> {
            &self.link
        }
    }

    fn node(val: u64) -> *mut Node {
        Box::into_raw(Box::new(Node {
            link: AtomicPtr::new(ptr::null_mut()),
            val,
        }))
    }

    fn drain(inbox: &Inbox<Node>) -> Vec<u64> {
        inbox
            .take_all()
            // SAFETY: every node was a leaked Box pushed once.
            .map(|n| unsafe { Box::from_raw(n) }.val)
            .collect()
    }

    #[test]
    fn batch_is_fifo() {
        let inbox = Inbox::new();
        for v in 0..5 {
            // SAFETY: fresh node, owned by the inbox until drained.
            unsafe { inbox.push(node(v)) };
        }
        assert_eq!(drain(&inbox), vec![0, 1, 2, 3, 4]);
        assert!(inbox.is_empty());
        assert_eq!(drain(&inbox), Vec::<u64>::new());
    }

    #[test]
    fn threads_lose_nothing_and_keep_their_order() {
        const THREADS: u64 = 4;
        const PER: u64 = if cfg!(miri) { 50 } else { 20_000 };
        let inbox = Arc::new(Inbox::new());
        let token = Arc::new(Token::new());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (inbox, token, seen) = (inbox.clone(), token.clone(), seen.clone());
                std::thread::spawn(move || {
                    for i in 0..PER {
                        // SAFETY: fresh node.
                        unsafe { inbox.push(node(t << 32 | i)) };
                        // combine: apply whatever is queued if we get the token
                        while token.try_acquire() {
                            let got = drain(&inbox);
                            seen.lock().unwrap().extend(got);
                            token.release();
                            if inbox.is_empty() {
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen.len() as u64,
            THREADS * PER,
            "every command applied once"
        );
        let mut last = vec![None; THREADS as usize];
        for v in seen.iter() {
            let (t, i) = ((v >> 32) as usize, v & 0xffff_ffff);
            assert!(last[t].is_none_or(|l| l < i), "per-thread order kept");
            last[t] = Some(i);
        }
    }
}

#[cfg(loom)]
mod loom_tests {
    //! Model checks (run with `RUSTFLAGS="--cfg loom" cargo test --lib inbox`).
    use super::*;
    use crate::matching::{Envelope, Matcher, Selector, Source, Tag};
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

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
    fn node(cmd: Cmd) -> *mut Node {
        Box::into_raw(Box::new(Node {
            link: AtomicPtr::new(ptr::null_mut()),
            cmd,
        }))
    }

    struct Shared<S> {
        inbox: Inbox<Node>,
        token: Token,
        state: UnsafeCell<S>,
    }
    // SAFETY: `state` is only touched by the token holder.
    unsafe impl<S> Sync for Shared<S> {}
    // SAFETY: the models move `Shared` between threads only inside an
    // Arc, and `state` is only touched by the token holder, as for Sync.
    unsafe impl<S> Send for Shared<S> {}

    /// Push, then combine: the engine's protocol.
    fn submit<S>(sh: &Shared<S>, cmd: Cmd, apply: &impl Fn(&mut S, Cmd)) {
        // SAFETY: fresh node.
        unsafe { sh.inbox.push(node(cmd)) };
        while sh.token.try_acquire() {
            for n in sh.inbox.take_all() {
                // SAFETY: the node is ours now (leaked Box, pushed once).
                let n = unsafe { Box::from_raw(n) };
                // SAFETY: we hold the token.
                sh.state.with_mut(|s| apply(unsafe { &mut *s }, n.cmd));
            }
            sh.token.release();
            if sh.inbox.is_empty() {
                break;
            }
        }
    }

    #[test]
    fn no_command_is_stranded_or_applied_twice() {
        loom::model(|| {
            let sh = Arc::new(Shared {
                inbox: Inbox::new(),
                token: Token::new(),
                state: UnsafeCell::new(Vec::<Cmd>::new()),
            });
            let apply = |s: &mut Vec<Cmd>, c| s.push(c);
            let hs: Vec<_> = (0..2)
                .map(|t| {
                    let sh = sh.clone();
                    loom::thread::spawn(move || {
                        submit(&sh, Cmd::Item(t, 0), &apply);
                        submit(&sh, Cmd::Item(t, 1), &apply);
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            // After every submitter returned, everything has been applied.
            assert!(sh.inbox.is_empty());
            sh.state.with(|s| {
                // SAFETY: all threads joined.
                let s = unsafe { &*s };
                assert_eq!(s.len(), 4);
                for t in 0..2 {
                    let mine: Vec<_> = s
                        .iter()
                        .filter(|c| matches!(c, Cmd::Item(x, _) if *x == t))
                        .collect();
                    assert_eq!(mine, vec![&Cmd::Item(t, 0), &Cmd::Item(t, 1)]);
                }
            });
        });
    }

    #[test]
    fn receive_posted_while_a_message_arrives_matches_exactly_once() {
        loom::model(|| {
            type M = (Matcher<u32, u32>, Vec<(u32, u32)>);
            let sh = Arc::new(Shared {
                inbox: Inbox::new(),
                token: Token::new(),
                state: UnsafeCell::new((Matcher::new(), Vec::new())),
            });
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
                let sh = sh.clone();
                loom::thread::spawn(move || submit(&sh, Cmd::Post(100), &apply))
            };
            // this thread plays the progress engine delivering an arrival
            submit(&sh, Cmd::Arrive(200), &apply);
            poster.join().unwrap();
            sh.state.with(|s| {
                // SAFETY: all threads joined.
                let (m, matched) = unsafe { &*s };
                assert_eq!(matched, &vec![(100, 200)], "matched exactly once");
                assert_eq!(m.posted_len() + m.unexpected_len(), 0);
            });
        });
    }
}
