//! MPI tag matching engine.
//!
//! A message carries an [`Envelope`] (communicator context id, source rank,
//! tag). A receive carries a [`Selector`]: the context must be equal, the
//! source is either a rank or [`Source::Any`], and the tag is either a value or
//! [`Tag::Any`]. `Tag::Any` only matches tags `>= 0`, so negative tags (used by
//! Open MPI collectives) are only ever matched by an explicit selector.
//!
//! Matching follows the MPI ordering rules:
//!
//! * an arriving message matches the **earliest-posted** still-queued receive
//!   whose selector matches it, otherwise it is appended to the unexpected
//!   queue;
//! * a posted receive matches the **earliest-arrived** still-queued unexpected
//!   message that it matches, otherwise it is appended to the posted queue.
//!
//! [`Matcher`] is a plain single-threaded data structure; callers that share it
//! between threads wrap it in a lock.
//!
//! # Data structures
//!
//! Every posted receive gets a posting sequence number (which its [`PostId`]
//! carries) and every queued unexpected message an arrival sequence number;
//! both come from monotonically increasing `u64` counters. Comparing sequence
//! numbers recovers the global MPI order across separate bins.
//!
//! Posted side:
//!
//! * fully specific receives (rank and tag given) live in bins keyed by
//!   `(ctx, src, tag)`; each bin is a queue in posting order (a lone
//!   receive held inline, as most bins hold none or one, more in a ring:
//!   [`head`]), so the head of a bin is the earliest posted receive for
//!   that exact envelope;
//! * wildcard receives (`Source::Any` and/or `Tag::Any`) live in one
//!   `BTreeMap<seq, entry>` per context, in posting order; knowing which
//!   contexts hold any ([`wild`]) lets an arrival in a context without
//!   them skip the wildcard lists altogether;
//! * a [`PostId`] carries its receive's location (bin key or wildcard
//!   context) besides its sequence number, so [`Matcher::cancel`] finds the
//!   entry without an index and without scanning other bins.
//!
//! Unexpected side:
//!
//! * messages live in bins keyed by `(ctx, src, tag)`, each a `VecDeque` in
//!   arrival order; the head of a bin is the earliest-arrived message with that
//!   envelope, which is the answer for any fully specific selector;
//! * one arrival-ordered index per context ([`arrivals`]: a queue appended
//!   in arrival order, entries leaving from its front or marked taken)
//!   serves wildcard receives and probes, which scan it in order for the first
//!   eligible entry and then pop the head of the corresponding bin;
//! * a post, probe or take looks nothing up while no message is queued.
//!
//! A message removed through either path is removed from both structures.
//! Bins, per-context lists and per-context indices live in [`bins::Bins`]:
//! one that becomes empty stays in place for the next entry with the same key
//! (so a receive posted and matched per message costs no allocation and at
//! most one hash lookup each way, none when the bin is the one reached last),
//! but at most [`bins::PARKED`] empty ones per map are kept,
//! so memory is proportional to the number of queued entries plus a constant
//! and does not grow with the number of distinct envelopes ever seen.
//!
//! Per-entry bookkeeping: a posted specific receive costs one bin slot
//! (`seq` + payload); a posted wildcard receive costs one B-tree entry
//! (`seq`, source, tag, payload); an unexpected message costs one bin slot
//! (`seq` + payload) and one arrival-index entry (`seq`, source, tag).
//!
//! # Complexity
//!
//! Expected costs, with `W` the number of wildcard receives posted in the
//! message's context, `N` the number of unexpected messages queued in the
//! selector's context and `B` the length of one bin:
//!
//! | operation                                   | cost                                  |
//! |---------------------------------------------|---------------------------------------|
//! | arrival, no wildcard posted in the context  | O(1)                                  |
//! | arrival, wildcards posted in the context    | O(1) + scan of wildcards posted before the specific candidate, at most O(W) |
//! | arrival queued as unexpected                | O(1)                                  |
//! | specific post / probe / take                | O(1) (+ O(log N) to unlink a match that is not the context's earliest) |
//! | wildcard post / probe / take                | scan of the context's arrival index up to the first eligible message, at most O(N) |
//! | cancel of a specific receive                | O(1) + O(log B)                       |
//! | cancel of a wildcard receive                | O(log W)                              |
//! | drain of one context / everything           | linear in the number of bins and drained entries |
//! | removal of posted receives by a predicate   | linear in the number of bins and posted receives |
//!
//! A fully specific lookup therefore never depends on the depth of other bins
//! or of other contexts.

mod arrivals;
mod bins;
mod bulk;
mod head;
mod wild;

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};

use bins::Bins;
use head::HeadQueue;
use wild::WildIn;

/// Open MPI's raw value for `MPI_ANY_SOURCE` and `MPI_ANY_TAG`.
///
/// Selectors use [`Source::Any`] and [`Tag::Any`]; [`Selector::from_mpi`]
/// converts raw values.
pub const ANY: i32 = -1;

/// Envelope of an incoming message.
#[derive(Clone, Copy, Debug, Eq)]
pub struct Envelope {
    /// Communicator context id.
    pub ctx: u32,
    /// Source rank within the communicator.
    pub src: i32,
    /// Message tag (may be negative for internal collective traffic).
    pub tag: i32,
}

/// Source part of a receive selector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Matches every source rank.
    Any,
    /// Matches exactly this source rank.
    Rank(i32),
}

/// Tag part of a receive selector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    /// Matches every non-negative tag.
    Any,
    /// Matches exactly this tag, negative values included.
    Value(i32),
}

/// Receive selector: which messages a receive or probe accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selector {
    /// Communicator context id (always matched exactly).
    pub ctx: u32,
    /// Source rank or any source.
    pub src: Source,
    /// Tag or any (non-negative) tag.
    pub tag: Tag,
}

/// Identifier of a queued posted receive, used for cancellation: its
/// posting sequence number (never reused) and where it is queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PostId {
    seq: u64,
    at: Loc,
}

/// Bin key: the envelope itself.
type Key = Envelope;

/// Hashed as one 128-bit word, which [`bins::KeyHash`] mixes with a single
/// multiply.
impl Hash for Envelope {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        let ctx_src = (u64::from(self.ctx) << 32) | u64::from(self.src as u32);
        state.write_u128((u128::from(ctx_src) << 64) | u128::from(self.tag as u32));
    }
}

/// The context and the rank compared as one 64-bit word, then the tag: a
/// bin lookup compares its key with two loads and branches, not three.
impl PartialEq for Envelope {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.ctx_src() == other.ctx_src() && self.tag == other.tag
    }
}

impl Envelope {
    /// The context and the rank as one word.
    #[inline(always)]
    fn ctx_src(&self) -> u64 {
        u64::from(self.ctx) | (u64::from(self.src as u32) << 32)
    }

    #[inline]
    fn key(&self) -> Key {
        *self
    }

    #[inline]
    fn from_key(key: Key) -> Self {
        key
    }
}

/// Source/tag part of the matching rule (the context is compared separately).
#[inline]
fn src_tag_match(src: Source, tag: Tag, env_src: i32, env_tag: i32) -> bool {
    let src_ok = match src {
        Source::Any => true,
        Source::Rank(s) => s == env_src,
    };
    let tag_ok = match tag {
        Tag::Any => env_tag >= 0,
        Tag::Value(t) => t == env_tag,
    };
    src_ok && tag_ok
}

impl Selector {
    /// Whether a message with envelope `env` is eligible for this selector.
    #[inline]
    pub fn matches(&self, env: &Envelope) -> bool {
        self.ctx == env.ctx && src_tag_match(self.src, self.tag, env.src, env.tag)
    }

    /// Builds a selector from Open MPI's raw values: `src == -1`
    /// (`MPI_ANY_SOURCE`) becomes [`Source::Any`] and `tag == -1`
    /// (`MPI_ANY_TAG`) becomes [`Tag::Any`].
    pub fn from_mpi(ctx: u32, src: i32, tag: i32) -> Selector {
        Selector {
            ctx,
            src: if src == ANY {
                Source::Any
            } else {
                Source::Rank(src)
            },
            tag: if tag == ANY {
                Tag::Any
            } else {
                Tag::Value(tag)
            },
        }
    }

    /// The bin key if the selector is fully specific.
    #[inline]
    fn specific_key(&self) -> Option<Key> {
        match (self.src, self.tag) {
            (Source::Rank(src), Tag::Value(tag)) => Some(Envelope {
                ctx: self.ctx,
                src,
                tag,
            }),
            _ => None,
        }
    }
}

/// A fully specific posted receive inside its bin.
struct Posted<R> {
    seq: u64,
    r: R,
}

/// A wildcard posted receive inside its context's list (keyed by `seq`).
struct WildPosted<R> {
    src: Source,
    tag: Tag,
    r: R,
}

/// Where a queued posted receive lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Loc {
    Specific(Key),
    Wild(u32),
}

/// A queued unexpected message inside its bin.
struct Unexpected<U> {
    seq: u64,
    u: U,
}

type PostedBins<R> = Bins<Key, HeadQueue<Posted<R>>>;
type WildLists<R> = Bins<u32, BTreeMap<u64, WildPosted<R>>>;
type UnexpectedBins<U> = Bins<Key, VecDeque<Unexpected<U>>>;
type ArrivalIndex = Bins<u32, arrivals::Arrivals>;

/// Posted-receive and unexpected-message queues with MPI matching order.
///
/// `R` is the receive's payload (e.g. a request handle), `U` the unexpected
/// message's payload (e.g. buffered data or a rendezvous descriptor).
pub struct Matcher<R, U> {
    next_post: u64,
    next_arrival: u64,
    posted_bins: PostedBins<R>,
    posted_wild: WildLists<R>,
    /// Queued posted receives, wildcards included.
    posted_count: usize,
    /// Queued wildcard receives, all contexts.
    wild_count: usize,
    /// The contexts those are in.
    wild_in: WildIn,
    unexpected_bins: UnexpectedBins<U>,
    unexpected_order: ArrivalIndex,
    unexpected_count: usize,
}

impl<R, U> Default for Matcher<R, U> {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether posted bin `bin` holds receive `seq`. Bins are appended in
/// increasing `seq` order and matched from the front, so a receive matched
/// already is usually rejected by the first comparison.
#[inline]
fn bin_holds<R>(bin: &HeadQueue<Posted<R>>, seq: u64) -> bool {
    bin.front().is_some_and(|head| head.seq <= seq) && bin.contains_sorted(seq, |p| p.seq)
}

/// Sequence number of the earliest wildcard receive in `lists` that was
/// posted before `limit` (if any) and accepts `env`.
#[inline]
fn first_wild<R>(lists: &WildLists<R>, env: &Envelope, limit: Option<u64>) -> Option<u64> {
    let list = lists.get(&env.ctx)?;
    let earlier = match limit {
        Some(limit) => list.range(..limit),
        None => list.range(..),
    };
    earlier
        .filter(|(_, w)| src_tag_match(w.src, w.tag, env.src, env.tag))
        .map(|(&seq, _)| seq)
        .next()
}

impl<R, U> Matcher<R, U> {
    /// Creates an empty matcher.
    pub fn new() -> Self {
        Matcher {
            next_post: 0,
            next_arrival: 0,
            posted_bins: Bins::new(),
            posted_wild: Bins::new(),
            posted_count: 0,
            wild_count: 0,
            wild_in: WildIn::Nowhere,
            unexpected_bins: Bins::new(),
            unexpected_order: Bins::new(),
            unexpected_count: 0,
        }
    }

    /// Post a receive. Ok((r, env, u)) if it matched an unexpected message
    /// (removed from the queue); Err(id) if queued.
    #[inline(always)]
    pub fn post(&mut self, sel: Selector, r: R) -> Result<(R, Envelope, U), PostId> {
        if self.unexpected_count != 0 {
            if let Some((env, u)) = self.take_unexpected(&sel) {
                return Ok((r, env, u));
            }
        }
        Err(self.queue(sel, r))
    }

    /// [`Matcher::post`] while no unexpected message is queued (in any
    /// context), which one load tells: the receive is queued, Ok(id).
    /// Otherwise it is handed back, Err(r), and the caller posts it. A
    /// caller that keeps the two cases apart keeps the common one free of
    /// the matched message's large result.
    #[inline(always)]
    pub fn try_queue(&mut self, sel: Selector, r: R) -> Result<PostId, R> {
        if self.unexpected_count != 0 {
            return Err(r);
        }
        Ok(self.queue(sel, r))
    }

    /// Queues receive `r`, which no queued unexpected message matches.
    #[inline(always)]
    fn queue(&mut self, sel: Selector, r: R) -> PostId {
        let seq = self.next_post;
        self.next_post += 1;
        self.posted_count += 1;
        // Both arms build the ticket here from plain values (not one in
        // `post_wild`), so that it stays in registers to the caller.
        let at = match sel.specific_key() {
            Some(key) => {
                self.posted_bins
                    .get_or_insert(key)
                    .push_back(Posted { seq, r });
                Loc::Specific(key)
            }
            None => {
                self.post_wild(sel, seq, r);
                Loc::Wild(sel.ctx)
            }
        };
        PostId { seq, at }
    }

    /// Queues wildcard receive `seq`.
    #[inline(never)]
    fn post_wild(&mut self, sel: Selector, seq: u64, r: R) {
        let list = self.posted_wild.get_or_insert(sel.ctx);
        list.insert(
            seq,
            WildPosted {
                src: sel.src,
                tag: sel.tag,
                r,
            },
        );
        if list.len() == 1 {
            self.wild_list_filled(sel.ctx);
        }
        self.wild_count += 1;
    }

    /// A message arrived. Some((r, u)) if it matched a posted receive
    /// (removed); None if it was queued as unexpected.
    pub fn arrive(&mut self, env: Envelope, u: U) -> Option<(R, U)> {
        match self.take_posted(&env) {
            Some(r) => Some((r, u)),
            None => {
                self.push_unexpected(env, u);
                None
            }
        }
    }

    /// Removes and returns the earliest-posted receive eligible for `env`,
    /// or None (and queues nothing). Lets a caller defer building the
    /// unexpected-queue entry (e.g. copying a payload out of a bounce
    /// buffer) to the case where no receive matches; it must then call
    /// `arrive`. Inlined: it runs for every message that arrives.
    #[inline(always)]
    pub fn take_posted(&mut self, env: &Envelope) -> Option<R> {
        if self.wild_in.may_hold(env.ctx) {
            return self.take_posted_wild(env);
        }
        self.pop_specific_posted(env.key())
    }

    /// [`Matcher::take_posted`] while no wildcard receive is posted in
    /// the message's context, which a comparison or two tell; `None` while
    /// some may be, and the caller asks [`Matcher::take_posted`]. A caller that keeps the two
    /// cases apart keeps the common one's receive out of the wildcard
    /// path's way (a result that joins an out-of-line call's goes through
    /// memory).
    #[inline(always)]
    pub fn take_posted_unless_wild(&mut self, env: &Envelope) -> Option<Option<R>> {
        if self.wild_in.may_hold(env.ctx) {
            return None;
        }
        Some(self.pop_specific_posted(env.key()))
    }

    /// [`Matcher::take_posted`] while wildcard receives may be posted in
    /// the message's context.
    #[inline(never)]
    fn take_posted_wild(&mut self, env: &Envelope) -> Option<R> {
        // Through `get_mut`, which remembers the bucket for the pop below.
        let specific_seq = self
            .posted_bins
            .get_mut(&env.key())
            .and_then(|b| b.c.front())
            .map(|p| p.seq);
        // Only wildcards posted before the specific candidate can win.
        match first_wild(&self.posted_wild, env, specific_seq) {
            Some(seq) => Some(self.remove_wild_posted(env.ctx, seq)),
            None => self.pop_specific_posted(env.key()),
        }
    }

    /// Removes the head of posted bin `key`, if there is one. With
    /// nothing posted (a message that arrives before its receive) no bin
    /// is looked up.
    #[inline(always)]
    fn pop_specific_posted(&mut self, key: Key) -> Option<R> {
        if self.posted_count == 0 {
            return None;
        }
        let bin = self.posted_bins.get_mut(&key)?;
        let head = bin.c.pop_front()?;
        if bin.newly_empty() {
            self.posted_bins.park(key);
        }
        self.posted_count -= 1;
        Some(head.r)
    }

    /// Queues a message as unexpected, for a caller whose
    /// [`Matcher::take_posted`] (or [`Matcher::take_posted_unless_wild`])
    /// has just found no receive for it, with nothing posted since:
    /// [`Matcher::arrive`] without its second search of the posted
    /// queues.
    #[inline]
    pub fn queue_unmatched(&mut self, env: Envelope, u: U) {
        debug_assert!(
            self.posted_bins
                .get(&env.key())
                .is_none_or(|b| b.is_empty())
                && first_wild(&self.posted_wild, &env, None).is_none(),
            "queue_unmatched: a posted receive matches {env:?}"
        );
        self.push_unexpected(env, u);
    }

    fn push_unexpected(&mut self, env: Envelope, u: U) {
        let key = env.key();
        let seq = self.next_arrival;
        self.next_arrival += 1;
        self.unexpected_bins
            .get_or_insert(key)
            .push_back(Unexpected { seq, u });
        self.unexpected_order
            .get_or_insert(env.ctx)
            .push(seq, env.src, env.tag);
        self.unexpected_count += 1;
    }

    /// Earliest-arrived queued unexpected message eligible for `sel`, without
    /// removing it.
    pub fn probe(&self, sel: &Selector) -> Option<(Envelope, &U)> {
        let (seq, key) = self.find_unexpected(sel)?;
        let head = self.unexpected_bins.get(&key)?.front()?;
        debug_assert_eq!(head.seq, seq);
        Some((Envelope::from_key(key), &head.u))
    }

    /// Removes and returns the earliest-arrived queued unexpected message
    /// eligible for `sel` (matched probe).
    #[inline(always)]
    pub fn take_unexpected(&mut self, sel: &Selector) -> Option<(Envelope, U)> {
        if self.unexpected_count == 0 {
            return None;
        }
        // A specific selector's answer is the head of its bin: one lookup.
        let key = match sel.specific_key() {
            Some(key) => key,
            None => {
                let (seq, key) = self.find_unexpected(sel)?;
                // The earliest eligible message is the earliest of its bin.
                debug_assert_eq!(
                    self.unexpected_bins
                        .get(&key)
                        .and_then(|b| b.front())
                        .map(|e| e.seq),
                    Some(seq)
                );
                key
            }
        };
        let u = self.pop_unexpected(key)?;
        Some((Envelope::from_key(key), u))
    }

    /// Removes a still-queued posted receive. `None` if `id` is already
    /// matched, cancelled or drained.
    pub fn cancel(&mut self, id: PostId) -> Option<R> {
        if self.posted_count == 0 {
            return None;
        }
        let r = match id.at {
            Loc::Specific(key) => {
                let bin = self.posted_bins.get_mut(&key)?;
                if !bin_holds(&bin.c, id.seq) {
                    return None;
                }
                let posted = bin.c.remove_sorted(id.seq, |p| p.seq)?;
                if bin.newly_empty() {
                    self.posted_bins.park(key);
                }
                posted.r
            }
            Loc::Wild(ctx) => self.unlink_wild(ctx, id.seq)?,
        };
        self.posted_count -= 1;
        Some(r)
    }

    /// Whether a posted receive is still queued (not matched, cancelled
    /// or drained).
    #[inline]
    pub fn is_posted(&self, id: PostId) -> bool {
        if self.posted_count == 0 {
            return false;
        }
        match id.at {
            Loc::Specific(key) => self
                .posted_bins
                .get(&key)
                .is_some_and(|bin| bin_holds(bin, id.seq)),
            Loc::Wild(ctx) => self
                .posted_wild
                .get(&ctx)
                .is_some_and(|list| list.contains_key(&id.seq)),
        }
    }

    /// Number of queued posted receives.
    pub fn posted_len(&self) -> usize {
        self.posted_count
    }

    /// Number of queued unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected_count
    }

    /// Arrival sequence number and bin key of the earliest-arrived queued
    /// unexpected message eligible for `sel`.
    #[inline(never)]
    fn find_unexpected(&self, sel: &Selector) -> Option<(u64, Key)> {
        if self.unexpected_count == 0 {
            return None;
        }
        match sel.specific_key() {
            Some(key) => self
                .unexpected_bins
                .get(&key)
                .and_then(VecDeque::front)
                .map(|e| (e.seq, key)),
            None => self
                .unexpected_order
                .get(&sel.ctx)?
                .first(|src, tag| src_tag_match(sel.src, sel.tag, src, tag))
                .map(|(seq, src, tag)| {
                    let ctx = sel.ctx;
                    (seq, Envelope { ctx, src, tag })
                }),
        }
    }

    /// Removes the head of unexpected bin `key`, if there is one, from the
    /// bin and from the context's arrival index.
    #[inline(always)]
    fn pop_unexpected(&mut self, key: Key) -> Option<U> {
        let bin = self.unexpected_bins.get_mut(&key)?;
        let head = bin.c.pop_front()?;
        if bin.newly_empty() {
            self.unexpected_bins.park(key);
        }
        if let Some(order) = self.unexpected_order.get_mut(&key.ctx) {
            let removed = order.c.remove(head.seq);
            debug_assert!(removed);
            if order.newly_empty() {
                self.unexpected_order.park(key.ctx);
            }
        } else {
            debug_assert!(false, "unexpected message missing from arrival index");
        }
        self.unexpected_count -= 1;
        Some(head.u)
    }

    /// Removes wildcard receive `seq` from context `ctx`.
    fn remove_wild_posted(&mut self, ctx: u32, seq: u64) -> R {
        let r = self
            .unlink_wild(ctx, seq)
            .expect("wildcard receive present in its list");
        self.posted_count -= 1;
        r
    }

    /// Takes wildcard receive `seq` out of the list of context `ctx`, if it
    /// is there, parking an emptied list and noting that `ctx` holds no
    /// wildcard any more; `posted_count` is the caller's.
    fn unlink_wild(&mut self, ctx: u32, seq: u64) -> Option<R> {
        let list = self.posted_wild.get_mut(&ctx)?;
        let w = list.c.remove(&seq)?;
        // Emptied, whether or not it was parked before.
        let emptied = list.c.is_empty();
        if list.newly_empty() {
            self.posted_wild.park(ctx);
        }
        if emptied {
            self.wild_list_emptied(ctx);
        }
        self.wild_count -= 1;
        Some(w.r)
    }

    /// Numbers of non-empty posted bins, wildcard lists, unexpected bins and
    /// arrival indices (empty ones may be kept, up to `bins::PARKED` each).
    #[cfg(test)]
    fn container_counts(&self) -> (usize, usize, usize, usize) {
        (
            self.posted_bins.occupied(),
            self.posted_wild.occupied(),
            self.unexpected_bins.occupied(),
            self.unexpected_order.occupied(),
        )
    }

    /// Checks every cross-structure invariant; panics on violation.
    #[cfg(test)]
    fn check_invariants(&self) {
        self.posted_bins.check();
        self.posted_wild.check();
        self.unexpected_bins.check();
        self.unexpected_order.check();

        let mut specific = 0;
        for (_, bin) in self.posted_bins.iter() {
            assert!(bin
                .iter()
                .zip(bin.iter().skip(1))
                .all(|(a, b)| a.seq < b.seq));
            specific += bin.len();
        }
        let mut wild = 0;
        for (_, list) in self.posted_wild.iter() {
            for w in list.values() {
                assert!(!matches!((w.src, w.tag), (Source::Rank(_), Tag::Value(_))));
            }
            wild += list.len();
        }
        assert_eq!(wild, self.wild_count);
        assert_eq!(self.wild_in, self.wild_contexts());
        assert_eq!(specific + wild, self.posted_count);

        let mut unexpected = 0;
        for (key, bin) in self.unexpected_bins.iter() {
            assert!(bin
                .iter()
                .zip(bin.iter().skip(1))
                .all(|(a, b)| a.seq < b.seq));
            for e in bin {
                let order = self
                    .unexpected_order
                    .get(&key.ctx)
                    .expect("queued message without an arrival index");
                assert_eq!(order.get(e.seq), Some((key.src, key.tag)));
                unexpected += 1;
            }
        }
        let indexed: usize = self.unexpected_order.iter().map(|(_, o)| o.len()).sum();
        assert_eq!(unexpected, indexed);
        assert_eq!(unexpected, self.unexpected_count);
    }
}

#[cfg(test)]
mod tests;
