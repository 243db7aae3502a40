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
//! Every posted receive gets a posting sequence number (which is also its
//! [`PostId`]) and every queued unexpected message an arrival sequence number;
//! both come from monotonically increasing `u64` counters. Comparing sequence
//! numbers recovers the global MPI order across separate bins.
//!
//! Posted side:
//!
//! * fully specific receives (rank and tag given) live in bins keyed by
//!   `(ctx, src, tag)`; each bin is a `VecDeque` in posting order, so the head
//!   of a bin is the earliest posted receive for that exact envelope;
//! * wildcard receives (`Source::Any` and/or `Tag::Any`) live in one
//!   `BTreeMap<seq, entry>` per context, in posting order;
//! * an index `PostId -> location` (bin key or wildcard context) lets
//!   [`Matcher::cancel`] find the entry without scanning other bins.
//!
//! Unexpected side:
//!
//! * messages live in bins keyed by `(ctx, src, tag)`, each a `VecDeque` in
//!   arrival order; the head of a bin is the earliest-arrived message with that
//!   envelope, which is the answer for any fully specific selector;
//! * one arrival-ordered index `BTreeMap<arrival_seq, (src, tag)>` per context
//!   serves wildcard receives and probes, which scan it in order for the first
//!   eligible entry and then pop the head of the corresponding bin.
//!
//! A message removed through either path is removed from both structures.
//! Bins, per-context lists and per-context indices are deleted as soon as they
//! become empty, so memory is proportional to the number of queued entries and
//! does not grow with the number of distinct envelopes ever seen.
//!
//! Per-entry bookkeeping: a posted specific receive costs one bin slot
//! (`seq` + payload) and one index entry; a posted wildcard receive costs one
//! B-tree entry (`seq`, source, tag, payload) and one index entry; an
//! unexpected message costs one bin slot (`seq` + payload) and one B-tree
//! entry (`seq`, source, tag).
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
//! | arrival queued as unexpected                | O(1) + O(log N)                       |
//! | specific post / probe / take                | O(1) (+ O(log N) to unlink a match)   |
//! | wildcard post / probe / take                | scan of the context's arrival index up to the first eligible message, at most O(N) |
//! | cancel of a specific receive                | O(1) + O(log B)                       |
//! | cancel of a wildcard receive                | O(log W)                              |
//! | drain of one context / everything           | linear in the number of bins and drained entries |
//!
//! A fully specific lookup therefore never depends on the depth of other bins
//! or of other contexts.

use std::collections::{BTreeMap, VecDeque};

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

/// Open MPI's raw value for `MPI_ANY_SOURCE` and `MPI_ANY_TAG`.
///
/// Selectors use [`Source::Any`] and [`Tag::Any`]; [`Selector::from_mpi`]
/// converts raw values.
pub const ANY: i32 = -1;

/// Envelope of an incoming message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

/// Identifier of a queued posted receive, used for cancellation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PostId(pub u64);

/// Bin key: `(ctx, src, tag)`.
type Key = (u32, i32, i32);

impl Envelope {
    #[inline]
    fn key(&self) -> Key {
        (self.ctx, self.src, self.tag)
    }

    #[inline]
    fn from_key((ctx, src, tag): Key) -> Self {
        Envelope { ctx, src, tag }
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
            (Source::Rank(s), Tag::Value(t)) => Some((self.ctx, s, t)),
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
#[derive(Clone, Copy)]
enum Loc {
    Specific(Key),
    Wild(u32),
}

/// A queued unexpected message inside its bin.
struct Unexpected<U> {
    seq: u64,
    u: U,
}

type PostedBins<R> = HashMap<Key, VecDeque<Posted<R>>>;
type WildLists<R> = HashMap<u32, BTreeMap<u64, WildPosted<R>>>;
type UnexpectedBins<U> = HashMap<Key, VecDeque<Unexpected<U>>>;
type ArrivalIndex = HashMap<u32, BTreeMap<u64, (i32, i32)>>;

/// Posted-receive and unexpected-message queues with MPI matching order.
///
/// `R` is the receive's payload (e.g. a request handle), `U` the unexpected
/// message's payload (e.g. buffered data or a rendezvous descriptor).
pub struct Matcher<R, U> {
    next_post: u64,
    next_arrival: u64,
    posted_bins: PostedBins<R>,
    posted_wild: WildLists<R>,
    posted_index: HashMap<PostId, Loc>,
    unexpected_bins: UnexpectedBins<U>,
    unexpected_order: ArrivalIndex,
    unexpected_count: usize,
    /// Emptied bins kept for reuse (bounded by [`SPARE_BINS`]), so that a
    /// receive posted into an empty bin, or a message arriving into one,
    /// allocates nothing.
    spare_posted: Vec<VecDeque<Posted<R>>>,
    spare_unexpected: Vec<VecDeque<Unexpected<U>>>,
}

/// Most emptied bins of each kind kept for reuse.
const SPARE_BINS: usize = 64;
/// Emptied bins larger than this many slots are freed, not kept.
const SPARE_BIN_MAX_CAP: usize = 32;

fn recycle<T>(spare: &mut Vec<VecDeque<T>>, bin: VecDeque<T>) {
    debug_assert!(bin.is_empty());
    if spare.len() < SPARE_BINS && bin.capacity() <= SPARE_BIN_MAX_CAP {
        spare.push(bin);
    }
}

impl<R, U> Default for Matcher<R, U> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, U> Matcher<R, U> {
    /// Creates an empty matcher.
    pub fn new() -> Self {
        Matcher {
            next_post: 0,
            next_arrival: 0,
            posted_bins: HashMap::new(),
            posted_wild: HashMap::new(),
            posted_index: HashMap::new(),
            unexpected_bins: HashMap::new(),
            unexpected_order: HashMap::new(),
            unexpected_count: 0,
            spare_posted: Vec::new(),
            spare_unexpected: Vec::new(),
        }
    }

    /// Post a receive. Ok((r, env, u)) if it matched an unexpected message
    /// (removed from the queue); Err(id) if queued.
    pub fn post(&mut self, sel: Selector, r: R) -> Result<(R, Envelope, U), PostId> {
        if let Some((seq, key)) = self.find_unexpected(&sel) {
            let u = self.remove_unexpected(seq, key);
            return Ok((r, Envelope::from_key(key), u));
        }
        let seq = self.next_post;
        self.next_post += 1;
        let id = PostId(seq);
        match sel.specific_key() {
            Some(key) => {
                let spare = &mut self.spare_posted;
                self.posted_bins
                    .entry(key)
                    .or_insert_with(|| spare.pop().unwrap_or_default())
                    .push_back(Posted { seq, r });
                self.posted_index.insert(id, Loc::Specific(key));
            }
            None => {
                self.posted_wild.entry(sel.ctx).or_default().insert(
                    seq,
                    WildPosted {
                        src: sel.src,
                        tag: sel.tag,
                        r,
                    },
                );
                self.posted_index.insert(id, Loc::Wild(sel.ctx));
            }
        }
        Err(id)
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
    /// `arrive`.
    pub fn take_posted(&mut self, env: &Envelope) -> Option<R> {
        let key = env.key();
        // Wildcard lists are removed when they empty, so none posted in
        // any context means the head of the envelope's bin, if any, wins:
        // one lookup.
        if self.posted_wild.is_empty() {
            return self.pop_specific_posted_if_any(key);
        }
        let specific_seq = self
            .posted_bins
            .get(&key)
            .and_then(VecDeque::front)
            .map(|p| p.seq);
        // Only wildcards posted before the specific candidate can win.
        let wild_seq = self.posted_wild.get(&env.ctx).and_then(|list| {
            let earlier = match specific_seq {
                Some(limit) => list.range(..limit),
                None => list.range(..),
            };
            earlier
                .filter(|(_, w)| src_tag_match(w.src, w.tag, env.src, env.tag))
                .map(|(&seq, _)| seq)
                .next()
        });

        if let Some(seq) = wild_seq {
            return Some(self.remove_wild_posted(env.ctx, seq));
        }
        if specific_seq.is_some() {
            return Some(self.pop_specific_posted(key));
        }
        None
    }

    fn push_unexpected(&mut self, env: Envelope, u: U) {
        let key = env.key();
        let seq = self.next_arrival;
        self.next_arrival += 1;
        let spare = &mut self.spare_unexpected;
        self.unexpected_bins
            .entry(key)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push_back(Unexpected { seq, u });
        self.unexpected_order
            .entry(env.ctx)
            .or_default()
            .insert(seq, (env.src, env.tag));
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
    pub fn take_unexpected(&mut self, sel: &Selector) -> Option<(Envelope, U)> {
        let (seq, key) = self.find_unexpected(sel)?;
        let u = self.remove_unexpected(seq, key);
        Some((Envelope::from_key(key), u))
    }

    /// Removes a still-queued posted receive. `None` if `id` is unknown,
    /// already matched, cancelled or drained.
    pub fn cancel(&mut self, id: PostId) -> Option<R> {
        match self.posted_index.remove(&id)? {
            Loc::Specific(key) => {
                let Entry::Occupied(mut bin) = self.posted_bins.entry(key) else {
                    debug_assert!(false, "posted index points at a missing bin");
                    return None;
                };
                // Bins are appended in increasing `seq` order.
                let pos = bin.get().binary_search_by_key(&id.0, |p| p.seq).ok()?;
                let posted = bin.get_mut().remove(pos)?;
                if bin.get().is_empty() {
                    recycle(&mut self.spare_posted, bin.remove());
                }
                Some(posted.r)
            }
            Loc::Wild(ctx) => {
                let Entry::Occupied(mut list) = self.posted_wild.entry(ctx) else {
                    debug_assert!(false, "posted index points at a missing list");
                    return None;
                };
                let w = list.get_mut().remove(&id.0)?;
                if list.get().is_empty() {
                    list.remove();
                }
                Some(w.r)
            }
        }
    }

    /// Whether a posted receive is still queued (not matched, cancelled
    /// or drained).
    pub fn is_posted(&self, id: PostId) -> bool {
        self.posted_index.contains_key(&id)
    }

    /// Number of queued posted receives.
    pub fn posted_len(&self) -> usize {
        self.posted_index.len()
    }

    /// Number of queued unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected_count
    }

    /// Remove and return every posted receive and unexpected message of a
    /// context (for communicator teardown / finalize).
    ///
    /// Receives are returned in posting order, messages in arrival order.
    pub fn drain_ctx(&mut self, ctx: u32) -> (Vec<R>, Vec<(Envelope, U)>) {
        let mut posted: Vec<(u64, R)> = Vec::new();
        for (_, bin) in self.posted_bins.extract_if(|k, _| k.0 == ctx) {
            posted.extend(bin.into_iter().map(|p| (p.seq, p.r)));
        }
        if let Some(list) = self.posted_wild.remove(&ctx) {
            posted.extend(list.into_iter().map(|(seq, w)| (seq, w.r)));
        }
        for (seq, _) in &posted {
            self.posted_index.remove(&PostId(*seq));
        }

        let mut unexpected: Vec<(u64, Envelope, U)> = Vec::new();
        for (key, bin) in self.unexpected_bins.extract_if(|k, _| k.0 == ctx) {
            let env = Envelope::from_key(key);
            unexpected.extend(bin.into_iter().map(|e| (e.seq, env, e.u)));
        }
        self.unexpected_order.remove(&ctx);
        self.unexpected_count -= unexpected.len();

        Self::finish_drain(posted, unexpected)
    }

    /// Remove and return every posted receive and unexpected message of every
    /// context.
    ///
    /// Receives are returned in posting order, messages in arrival order.
    /// Sequence counters are not reset, so earlier [`PostId`]s stay invalid.
    pub fn drain_all(&mut self) -> (Vec<R>, Vec<(Envelope, U)>) {
        let mut posted: Vec<(u64, R)> = Vec::with_capacity(self.posted_index.len());
        for (_, bin) in self.posted_bins.drain() {
            posted.extend(bin.into_iter().map(|p| (p.seq, p.r)));
        }
        for (_, list) in self.posted_wild.drain() {
            posted.extend(list.into_iter().map(|(seq, w)| (seq, w.r)));
        }
        self.posted_index.clear();

        let mut unexpected: Vec<(u64, Envelope, U)> = Vec::with_capacity(self.unexpected_count);
        for (key, bin) in self.unexpected_bins.drain() {
            let env = Envelope::from_key(key);
            unexpected.extend(bin.into_iter().map(|e| (e.seq, env, e.u)));
        }
        self.unexpected_order.clear();
        self.unexpected_count = 0;

        Self::finish_drain(posted, unexpected)
    }

    /// Sorts drained entries by sequence number and strips the numbers.
    fn finish_drain(
        mut posted: Vec<(u64, R)>,
        mut unexpected: Vec<(u64, Envelope, U)>,
    ) -> (Vec<R>, Vec<(Envelope, U)>) {
        posted.sort_unstable_by_key(|e| e.0);
        unexpected.sort_unstable_by_key(|e| e.0);
        (
            posted.into_iter().map(|(_, r)| r).collect(),
            unexpected.into_iter().map(|(_, env, u)| (env, u)).collect(),
        )
    }

    /// Arrival sequence number and bin key of the earliest-arrived queued
    /// unexpected message eligible for `sel`.
    fn find_unexpected(&self, sel: &Selector) -> Option<(u64, Key)> {
        // A receive posted with nothing queued (the usual case) looks
        // nothing up.
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
                .iter()
                .find(|&(_, &(src, tag))| src_tag_match(sel.src, sel.tag, src, tag))
                .map(|(&seq, &(src, tag))| (seq, (sel.ctx, src, tag))),
        }
    }

    /// Removes the head of unexpected bin `key` (whose arrival number is
    /// `seq`) from the bin and from the context's arrival index.
    fn remove_unexpected(&mut self, seq: u64, key: Key) -> U {
        let Entry::Occupied(mut bin) = self.unexpected_bins.entry(key) else {
            unreachable!("unexpected message without a bin");
        };
        let head = bin
            .get_mut()
            .pop_front()
            .expect("unexpected bins are never empty");
        debug_assert_eq!(head.seq, seq);
        if bin.get().is_empty() {
            recycle(&mut self.spare_unexpected, bin.remove());
        }
        if let Entry::Occupied(mut order) = self.unexpected_order.entry(key.0) {
            let removed = order.get_mut().remove(&head.seq);
            debug_assert!(removed.is_some());
            if order.get().is_empty() {
                order.remove();
            }
        } else {
            debug_assert!(false, "unexpected message missing from arrival index");
        }
        self.unexpected_count -= 1;
        head.u
    }

    /// Removes the head of posted bin `key`.
    /// Removes the head of posted bin `key`, if there is such a bin.
    fn pop_specific_posted_if_any(&mut self, key: Key) -> Option<R> {
        let Entry::Occupied(mut bin) = self.posted_bins.entry(key) else {
            return None;
        };
        let head = bin
            .get_mut()
            .pop_front()
            .expect("posted bins are never empty");
        if bin.get().is_empty() {
            recycle(&mut self.spare_posted, bin.remove());
        }
        self.posted_index.remove(&PostId(head.seq));
        Some(head.r)
    }

    fn pop_specific_posted(&mut self, key: Key) -> R {
        self.pop_specific_posted_if_any(key)
            .expect("posted receive without a bin")
    }

    /// Removes wildcard receive `seq` from context `ctx`.
    fn remove_wild_posted(&mut self, ctx: u32, seq: u64) -> R {
        let Entry::Occupied(mut list) = self.posted_wild.entry(ctx) else {
            unreachable!("wildcard receive without a list");
        };
        let w = list
            .get_mut()
            .remove(&seq)
            .expect("wildcard receive present in its list");
        if list.get().is_empty() {
            list.remove();
        }
        self.posted_index.remove(&PostId(seq));
        w.r
    }

    /// Numbers of posted bins, wildcard lists, unexpected bins and arrival
    /// indices currently allocated.
    #[cfg(test)]
    fn container_counts(&self) -> (usize, usize, usize, usize) {
        (
            self.posted_bins.len(),
            self.posted_wild.len(),
            self.unexpected_bins.len(),
            self.unexpected_order.len(),
        )
    }

    /// Checks every cross-structure invariant; panics on violation.
    #[cfg(test)]
    fn check_invariants(&self) {
        let mut posted = 0;
        for (key, bin) in &self.posted_bins {
            assert!(!bin.is_empty(), "empty posted bin");
            assert!(bin
                .iter()
                .zip(bin.iter().skip(1))
                .all(|(a, b)| a.seq < b.seq));
            for p in bin {
                assert!(matches!(
                    self.posted_index.get(&PostId(p.seq)),
                    Some(Loc::Specific(k)) if k == key
                ));
                posted += 1;
            }
        }
        for (ctx, list) in &self.posted_wild {
            assert!(!list.is_empty(), "empty wildcard list");
            for (seq, w) in list {
                assert!(!matches!((w.src, w.tag), (Source::Rank(_), Tag::Value(_))));
                assert!(matches!(
                    self.posted_index.get(&PostId(*seq)),
                    Some(Loc::Wild(c)) if c == ctx
                ));
                posted += 1;
            }
        }
        assert_eq!(posted, self.posted_index.len());

        let mut unexpected = 0;
        for (key, bin) in &self.unexpected_bins {
            assert!(!bin.is_empty(), "empty unexpected bin");
            assert!(bin
                .iter()
                .zip(bin.iter().skip(1))
                .all(|(a, b)| a.seq < b.seq));
            let order = &self.unexpected_order[&key.0];
            for e in bin {
                assert_eq!(order.get(&e.seq), Some(&(key.1, key.2)));
                unexpected += 1;
            }
        }
        let indexed: usize = self
            .unexpected_order
            .values()
            .map(|o| {
                assert!(!o.is_empty(), "empty arrival index");
                o.len()
            })
            .sum();
        assert_eq!(unexpected, indexed);
        assert_eq!(unexpected, self.unexpected_count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emptied_bins_are_reused_not_reallocated() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        let env = Envelope {
            ctx: 1,
            src: 2,
            tag: 3,
        };
        for i in 0..100u32 {
            assert!(m.post(Selector::from_mpi(1, 2, 3), i).is_err());
            assert_eq!(m.take_posted(&env), Some(i));
            assert!(m.arrive(env, i).is_none());
            assert!(m.post(Selector::from_mpi(1, 2, 3), i).is_ok());
        }
        assert_eq!(m.container_counts(), (0, 0, 0, 0));
        assert_eq!((m.spare_posted.len(), m.spare_unexpected.len()), (1, 1));
    }

    fn env(ctx: u32, src: i32, tag: i32) -> Envelope {
        Envelope { ctx, src, tag }
    }

    fn spec(ctx: u32, src: i32, tag: i32) -> Selector {
        Selector {
            ctx,
            src: Source::Rank(src),
            tag: Tag::Value(tag),
        }
    }

    fn sel(ctx: u32, src: Source, tag: Tag) -> Selector {
        Selector { ctx, src, tag }
    }

    type M = Matcher<u64, u64>;

    #[test]
    fn from_mpi_maps_wildcards() {
        assert_eq!(
            Selector::from_mpi(3, ANY, ANY),
            sel(3, Source::Any, Tag::Any)
        );
        assert_eq!(Selector::from_mpi(3, 2, 7), spec(3, 2, 7));
        assert_eq!(
            Selector::from_mpi(0, 1, -12),
            sel(0, Source::Rank(1), Tag::Value(-12))
        );
        assert_eq!(
            Selector::from_mpi(0, ANY, 5),
            sel(0, Source::Any, Tag::Value(5))
        );
    }

    #[test]
    fn same_envelope_order_preserved() {
        let mut m = M::new();
        for u in 0..5 {
            assert_eq!(m.arrive(env(0, 1, 4), u), None);
        }
        for u in 0..5 {
            assert_eq!(
                m.post(spec(0, 1, 4), 100 + u),
                Ok((100 + u, env(0, 1, 4), u))
            );
        }
        for r in 0..5 {
            assert!(m.post(spec(0, 1, 4), r).is_err());
        }
        for r in 0..5 {
            assert_eq!(m.arrive(env(0, 1, 4), 50 + r), Some((r, 50 + r)));
        }
        assert_eq!((m.posted_len(), m.unexpected_len()), (0, 0));
        m.check_invariants();
    }

    #[test]
    fn any_source_and_any_tag() {
        let mut m = M::new();
        // Posted side.
        m.post(sel(0, Source::Any, Tag::Value(5)), 1).unwrap_err();
        m.post(sel(0, Source::Rank(2), Tag::Any), 2).unwrap_err();
        m.post(sel(0, Source::Any, Tag::Any), 3).unwrap_err();
        assert_eq!(m.arrive(env(0, 7, 5), 10), Some((1, 10)));
        assert_eq!(m.arrive(env(0, 2, 9), 11), Some((2, 11)));
        assert_eq!(m.arrive(env(0, 4, 0), 12), Some((3, 12)));
        assert_eq!(m.posted_len(), 0);
        // Unexpected side.
        assert_eq!(m.arrive(env(0, 3, 8), 20), None);
        assert_eq!(m.arrive(env(0, 6, 5), 21), None);
        assert_eq!(
            m.post(sel(0, Source::Any, Tag::Value(5)), 4),
            Ok((4, env(0, 6, 5), 21))
        );
        assert_eq!(
            m.post(sel(0, Source::Rank(3), Tag::Any), 5),
            Ok((5, env(0, 3, 8), 20))
        );
        m.check_invariants();
    }

    #[test]
    fn any_tag_never_matches_negative_tags() {
        let mut m = M::new();
        assert_eq!(m.arrive(env(0, 1, -5), 1), None);
        assert_eq!(m.probe(&sel(0, Source::Any, Tag::Any)), None);
        assert_eq!(m.probe(&sel(0, Source::Rank(1), Tag::Any)), None);
        let id = m.post(sel(0, Source::Rank(1), Tag::Any), 10).unwrap_err();
        // The negative-tag message stays unexpected even with a wildcard posted.
        assert_eq!(m.arrive(env(0, 1, -3), 2), None);
        assert_eq!(m.unexpected_len(), 2);
        // Explicit negative tags match, with any source too.
        assert_eq!(m.post(spec(0, 1, -5), 11), Ok((11, env(0, 1, -5), 1)));
        assert_eq!(
            m.post(sel(0, Source::Any, Tag::Value(-3)), 12),
            Ok((12, env(0, 1, -3), 2))
        );
        assert_eq!(m.arrive(env(0, 1, 0), 3), Some((10, 3)));
        assert_eq!(m.cancel(id), None);
        m.check_invariants();
    }

    #[test]
    fn earliest_posted_wins_across_specific_and_wildcard() {
        let mut m = M::new();
        m.post(spec(0, 0, 1), 1).unwrap_err();
        m.post(sel(0, Source::Rank(0), Tag::Any), 2).unwrap_err();
        m.post(spec(0, 0, 2), 3).unwrap_err();
        // Tag 2: the wildcard was posted before the tag-2 receive.
        assert_eq!(m.arrive(env(0, 0, 2), 10), Some((2, 10)));
        // Tag 1: the tag-1 receive is the only eligible one left.
        assert_eq!(m.arrive(env(0, 0, 1), 11), Some((1, 11)));
        assert_eq!(m.arrive(env(0, 0, 2), 12), Some((3, 12)));
        assert_eq!(m.posted_len(), 0);
        m.check_invariants();
    }

    #[test]
    fn wildcard_between_specific_receives() {
        let mut m = M::new();
        m.post(spec(0, 3, 5), 1).unwrap_err();
        m.post(sel(0, Source::Any, Tag::Value(5)), 2).unwrap_err();
        m.post(spec(0, 3, 5), 3).unwrap_err();
        assert_eq!(m.arrive(env(0, 3, 5), 10), Some((1, 10)));
        assert_eq!(m.arrive(env(0, 3, 5), 11), Some((2, 11)));
        assert_eq!(m.arrive(env(0, 3, 5), 12), Some((3, 12)));
        // Specific posted first beats a later wildcard.
        m.post(spec(0, 3, 5), 4).unwrap_err();
        m.post(sel(0, Source::Any, Tag::Any), 5).unwrap_err();
        assert_eq!(m.arrive(env(0, 3, 5), 13), Some((4, 13)));
        assert_eq!(m.arrive(env(0, 3, 5), 14), Some((5, 14)));
        m.check_invariants();
    }

    #[test]
    fn unexpected_matched_by_tag_in_reverse_order() {
        let mut m = M::new();
        for t in 0..4 {
            assert_eq!(m.arrive(env(0, 2, t), 100 + t as u64), None);
        }
        for t in (0..4).rev() {
            assert_eq!(
                m.post(spec(0, 2, t), t as u64),
                Ok((t as u64, env(0, 2, t), 100 + t as u64))
            );
            m.check_invariants();
        }
        assert_eq!(m.unexpected_len(), 0);
        assert_eq!(m.container_counts(), (0, 0, 0, 0));
    }

    #[test]
    fn wildcard_post_takes_earliest_arrival_across_bins() {
        let mut m = M::new();
        m.arrive(env(0, 1, 3), 1);
        m.arrive(env(0, 0, -2), 2);
        m.arrive(env(0, 0, 4), 3);
        m.arrive(env(0, 1, 3), 4);
        m.arrive(env(0, 2, 4), 5);
        let any = sel(0, Source::Any, Tag::Any);
        assert_eq!(m.post(any, 0), Ok((0, env(0, 1, 3), 1)));
        assert_eq!(m.post(any, 0), Ok((0, env(0, 0, 4), 3)));
        assert_eq!(
            m.post(sel(0, Source::Any, Tag::Value(4)), 0),
            Ok((0, env(0, 2, 4), 5))
        );
        assert_eq!(m.post(any, 0), Ok((0, env(0, 1, 3), 4)));
        assert!(m.post(any, 0).is_err());
        assert_eq!(m.unexpected_len(), 1);
        m.check_invariants();
    }

    #[test]
    fn probe_does_not_remove_take_does() {
        let mut m = M::new();
        m.arrive(env(1, 0, 9), 7);
        m.arrive(env(1, 0, 9), 8);
        let s = sel(1, Source::Any, Tag::Any);
        assert_eq!(m.probe(&s), Some((env(1, 0, 9), &7)));
        assert_eq!(m.probe(&spec(1, 0, 9)), Some((env(1, 0, 9), &7)));
        assert_eq!(m.probe(&spec(1, 0, 8)), None);
        assert_eq!(m.unexpected_len(), 2);
        assert_eq!(m.take_unexpected(&s), Some((env(1, 0, 9), 7)));
        assert_eq!(m.take_unexpected(&spec(1, 0, 9)), Some((env(1, 0, 9), 8)));
        assert_eq!(m.take_unexpected(&s), None);
        assert_eq!(m.unexpected_len(), 0);
        assert_eq!(m.container_counts(), (0, 0, 0, 0));
    }

    #[test]
    fn cancel_removes_posted_receive() {
        let mut m = M::new();
        let a = m.post(spec(0, 1, 1), 1).unwrap_err();
        let b = m.post(spec(0, 1, 1), 2).unwrap_err();
        let w = m.post(sel(0, Source::Any, Tag::Any), 3).unwrap_err();
        assert_eq!(m.cancel(a), Some(1));
        assert_eq!(m.cancel(w), Some(3));
        assert_eq!(m.cancel(a), None);
        assert_eq!(m.posted_len(), 1);
        assert_eq!(m.arrive(env(0, 1, 1), 10), Some((2, 10)));
        // No receive left: the next message is unexpected.
        assert_eq!(m.arrive(env(0, 1, 1), 11), None);
        assert_eq!(m.arrive(env(0, 5, 0), 12), None);
        assert_eq!(m.cancel(b), None);
        assert_eq!(m.cancel(PostId(12345)), None);
        assert_eq!(m.container_counts(), (0, 0, 2, 1));
        m.check_invariants();
    }

    #[test]
    fn cancel_of_matched_id_returns_none() {
        let mut m = M::new();
        let a = m.post(spec(0, 0, 0), 1).unwrap_err();
        let w = m.post(sel(0, Source::Any, Tag::Value(3)), 2).unwrap_err();
        assert_eq!(m.arrive(env(0, 0, 0), 10), Some((1, 10)));
        assert_eq!(m.arrive(env(0, 4, 3), 11), Some((2, 11)));
        assert_eq!(m.cancel(a), None);
        assert_eq!(m.cancel(w), None);
        m.check_invariants();
    }

    #[test]
    fn contexts_are_isolated() {
        let mut m = M::new();
        m.post(spec(1, 0, 0), 1).unwrap_err();
        m.post(sel(1, Source::Any, Tag::Any), 2).unwrap_err();
        assert_eq!(m.arrive(env(2, 0, 0), 10), None);
        assert_eq!(m.probe(&sel(1, Source::Any, Tag::Any)), None);
        assert!(m.post(sel(3, Source::Any, Tag::Any), 3).is_err());
        assert_eq!(
            m.post(sel(2, Source::Any, Tag::Any), 4),
            Ok((4, env(2, 0, 0), 10))
        );
        assert_eq!(m.arrive(env(1, 0, 0), 11), Some((1, 11)));
        assert_eq!(m.arrive(env(1, 0, 0), 12), Some((2, 12)));
        assert_eq!(m.posted_len(), 1);
        m.check_invariants();
    }

    #[test]
    fn drain_ctx_and_drain_all() {
        let mut m = M::new();
        let a = m.post(spec(0, 0, 0), 1).unwrap_err();
        m.post(sel(0, Source::Any, Tag::Any), 2).unwrap_err();
        m.post(spec(0, 1, 0), 3).unwrap_err();
        m.post(spec(1, 1, 0), 4).unwrap_err();
        m.arrive(env(0, 3, -1), 20);
        m.arrive(env(0, 2, -7), 21);
        m.arrive(env(0, 3, -1), 22);
        m.arrive(env(1, 3, 3), 23);
        let (posted, unexpected) = m.drain_ctx(0);
        assert_eq!(posted, vec![1, 2, 3]);
        assert_eq!(
            unexpected,
            vec![
                (env(0, 3, -1), 20),
                (env(0, 2, -7), 21),
                (env(0, 3, -1), 22)
            ]
        );
        assert_eq!(m.cancel(a), None);
        assert_eq!((m.posted_len(), m.unexpected_len()), (1, 1));
        assert_eq!(m.container_counts(), (1, 0, 1, 1));
        m.check_invariants();
        assert_eq!(m.drain_ctx(0), (vec![], vec![]));

        let (posted, unexpected) = m.drain_all();
        assert_eq!(posted, vec![4]);
        assert_eq!(unexpected, vec![(env(1, 3, 3), 23)]);
        assert_eq!((m.posted_len(), m.unexpected_len()), (0, 0));
        assert_eq!(m.container_counts(), (0, 0, 0, 0));
        m.check_invariants();
    }

    #[test]
    fn empty_bins_are_removed() {
        let mut m = M::new();
        for t in 0..100 {
            m.arrive(env(0, 0, t), t as u64);
            m.post(spec(0, 0, t), 0).unwrap();
            m.post(spec(0, 1, t), 0).unwrap_err();
            m.arrive(env(0, 1, t), 0).unwrap();
            m.post(sel(0, Source::Any, Tag::Value(t)), 0).unwrap_err();
            m.arrive(env(0, 5, t), 0).unwrap();
            let id = m.post(spec(2, 0, t), 0).unwrap_err();
            m.cancel(id).unwrap();
            let id = m.post(sel(2, Source::Any, Tag::Any), 0).unwrap_err();
            m.cancel(id).unwrap();
            m.arrive(env(3, 0, t), 0);
            m.take_unexpected(&sel(3, Source::Rank(0), Tag::Any))
                .unwrap();
        }
        assert_eq!(m.container_counts(), (0, 0, 0, 0));
        assert_eq!((m.posted_len(), m.unexpected_len()), (0, 0));
        m.check_invariants();
    }

    /// xorshift64 generator for the randomized tests.
    struct Rng(u64);

    impl Rng {
        fn new(seed: u64) -> Self {
            Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }

        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn range(&mut self, lo: i32, hi: i32) -> i32 {
            lo + self.below((hi - lo) as u64) as i32
        }
    }

    /// Reference model: both queues as plain vectors in MPI order, matched by
    /// linear scan.
    #[derive(Default)]
    struct Model {
        posted: Vec<(PostId, Selector, u64)>,
        unexpected: Vec<(Envelope, u64)>,
    }

    /// The matching rule written out independently of `Selector::matches`.
    fn model_matches(sel: &Selector, env: &Envelope) -> bool {
        let src_ok = sel.src == Source::Any || sel.src == Source::Rank(env.src);
        let tag_ok = (sel.tag == Tag::Any && env.tag >= 0) || sel.tag == Tag::Value(env.tag);
        sel.ctx == env.ctx && src_ok && tag_ok
    }

    impl Model {
        fn find(&self, sel: &Selector) -> Option<usize> {
            self.unexpected
                .iter()
                .position(|(e, _)| model_matches(sel, e))
        }

        fn post(&mut self, sel: Selector, r: u64) -> Option<(u64, Envelope, u64)> {
            let i = self.find(&sel)?;
            let (e, u) = self.unexpected.remove(i);
            Some((r, e, u))
        }

        fn arrive(&mut self, env: Envelope, u: u64) -> Option<(u64, u64)> {
            match self
                .posted
                .iter()
                .position(|(_, s, _)| model_matches(s, &env))
            {
                Some(i) => Some((self.posted.remove(i).2, u)),
                None => {
                    self.unexpected.push((env, u));
                    None
                }
            }
        }

        fn probe(&self, sel: &Selector) -> Option<(Envelope, u64)> {
            self.find(sel).map(|i| self.unexpected[i])
        }

        fn take(&mut self, sel: &Selector) -> Option<(Envelope, u64)> {
            self.find(sel).map(|i| self.unexpected.remove(i))
        }

        fn cancel(&mut self, id: PostId) -> Option<u64> {
            let i = self.posted.iter().position(|(p, _, _)| *p == id)?;
            Some(self.posted.remove(i).2)
        }

        fn drain_ctx(&mut self, ctx: u32) -> (Vec<u64>, Vec<(Envelope, u64)>) {
            let (gone, kept): (Vec<_>, Vec<_>) =
                self.posted.drain(..).partition(|(_, s, _)| s.ctx == ctx);
            self.posted = kept;
            let (gone_u, kept_u): (Vec<_>, Vec<_>) =
                self.unexpected.drain(..).partition(|(e, _)| e.ctx == ctx);
            self.unexpected = kept_u;
            (gone.into_iter().map(|(_, _, r)| r).collect(), gone_u)
        }
    }

    fn random_selector(rng: &mut Rng) -> Selector {
        let ctx = rng.below(2) as u32;
        let src = if rng.below(4) == 0 {
            Source::Any
        } else {
            Source::Rank(rng.range(0, 3))
        };
        let tag = if rng.below(4) == 0 {
            Tag::Any
        } else {
            Tag::Value(rng.range(-2, 3))
        };
        Selector { ctx, src, tag }
    }

    fn random_envelope(rng: &mut Rng) -> Envelope {
        Envelope {
            ctx: rng.below(2) as u32,
            src: rng.range(0, 3),
            tag: rng.range(-2, 3),
        }
    }

    #[test]
    fn differential_against_reference_model() {
        // Miri interprets every step: a reduced run there, the full one natively.
        let (seeds, steps) = if cfg!(miri) {
            (3u64, 150)
        } else {
            (200u64, 2000)
        };
        for seed in 0..seeds {
            let mut rng = Rng::new(seed + 1);
            let mut m = M::new();
            let mut model = Model::default();
            let mut ids: Vec<PostId> = Vec::new();
            let mut token = 0u64;
            for step in 0..steps {
                token += 1;
                let op = rng.below(100);
                let ctxt = format!("seed {seed} step {step} op {op}");
                match op {
                    0..=29 => {
                        let s = random_selector(&mut rng);
                        match (m.post(s, token), model.post(s, token)) {
                            (Ok(got), Some(want)) => assert_eq!(got, want, "{ctxt}"),
                            (Err(id), None) => {
                                model.posted.push((id, s, token));
                                ids.push(id);
                            }
                            (got, want) => panic!("{ctxt}: post {got:?} vs {want:?}"),
                        }
                    }
                    30..=64 => {
                        let e = random_envelope(&mut rng);
                        assert_eq!(m.arrive(e, token), model.arrive(e, token), "{ctxt}");
                    }
                    65..=74 => {
                        let s = random_selector(&mut rng);
                        let got = m.probe(&s).map(|(e, &u)| (e, u));
                        assert_eq!(got, model.probe(&s), "{ctxt}");
                    }
                    75..=82 => {
                        let s = random_selector(&mut rng);
                        assert_eq!(m.take_unexpected(&s), model.take(&s), "{ctxt}");
                    }
                    83..=98 => {
                        let id = if ids.is_empty() || rng.below(10) == 0 {
                            PostId(rng.below(1 << 20))
                        } else {
                            ids[rng.below(ids.len() as u64) as usize]
                        };
                        assert_eq!(m.cancel(id), model.cancel(id), "{ctxt}");
                    }
                    _ => {
                        let ctx = rng.below(3) as u32;
                        assert_eq!(m.drain_ctx(ctx), model.drain_ctx(ctx), "{ctxt}");
                    }
                }
                assert_eq!(m.posted_len(), model.posted.len(), "{ctxt}");
                assert_eq!(m.unexpected_len(), model.unexpected.len(), "{ctxt}");
                m.check_invariants();
            }
            let (posted, unexpected) = m.drain_all();
            let want_posted: Vec<u64> = model.posted.iter().map(|p| p.2).collect();
            assert_eq!(posted, want_posted, "seed {seed}");
            assert_eq!(unexpected, model.unexpected, "seed {seed}");
            assert_eq!(m.container_counts(), (0, 0, 0, 0));
        }
    }
}
