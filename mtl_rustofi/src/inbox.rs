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
//! The holder's protocol ([`crate::handoff::Handoff::combine`]): take the token, apply
//! every queued command, release, then look at the inbox again and retry if
//! it is not empty. Producers push, then try to take the token. Both the
//! attempt and the release write the token (swaps), so a command can never
//! be stranded, by acquire/release ordering alone (which loom checks): if
//! the pusher's swap finds the token taken, the holder's releasing swap
//! comes later and reads it, so the push happens before the holder's
//! re-check, which sees it; otherwise the pusher takes the token itself.

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

impl<N> Batch<N> {
    /// Whether the batch holds no node (nothing was queued).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.next.is_null()
    }
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

    /// Takes the token if it is free; never waits. A swap, not a
    /// compare-and-swap: a failed attempt writes too (`true` over `true`),
    /// so that the holder's release reads it and everything the caller did
    /// before (its push) happens before the holder's re-check of the inbox.
    /// On x86 both are one locked instruction that owns the cache line.
    pub(crate) fn try_acquire(&self) -> bool {
        !self.busy.swap(true, Ordering::AcqRel)
    }

    /// Releases the token (only its holder may call this). A swap, so that
    /// it reads the latest failed attempt (see `try_acquire`).
    pub(crate) fn release(&self) {
        self.busy.swap(false, Ordering::AcqRel);
    }
}

/// A node carrying a number, for the tests of the inbox and the handoff.
#[cfg(all(test, not(loom)))]
pub(crate) mod test_node {
    use super::*;

    pub(crate) struct Node {
        link: AtomicPtr<Node>,
        pub(crate) val: u64,
    }
    // SAFETY: `link` always returns the same field.
    unsafe impl Linked for Node {
        fn link(&self) -> &AtomicPtr<Node> {
            &self.link
        }
    }

    /// A fresh node as a leaked Box (freed by whoever takes it).
    pub(crate) fn node(val: u64) -> *mut Node {
        Box::into_raw(Box::new(Node {
            link: AtomicPtr::new(ptr::null_mut()),
            val,
        }))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::test_node::{node, Node};
    use super::*;

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
}
