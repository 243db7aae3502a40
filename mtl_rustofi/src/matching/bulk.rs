//! Operations of [`Matcher`] that take receives and messages out in bulk
//! or walk every queued one: drains (communicator teardown, finalize) and
//! the removal of posted receives by a predicate (a lost peer's). Each
//! walks every bin and list of the contexts concerned, which the
//! per-message operations never do.

use super::{Envelope, Matcher, Selector, Source, Tag};

impl<R, U> Matcher<R, U> {
    /// Every queued posted receive, in no particular order.
    pub fn posted(&self) -> impl Iterator<Item = &R> {
        let specific = self
            .posted_bins
            .iter()
            .flat_map(|(_, b)| b.iter().map(|p| &p.r));
        let wild = self
            .posted_wild
            .iter()
            .flat_map(|(_, l)| l.values().map(|w| &w.r));
        specific.chain(wild)
    }

    /// Removes every queued posted receive whose payload satisfies `pred`
    /// and returns them with their selectors, in posting order (for the
    /// receives of a peer that was lost: a rare event, so a walk of every
    /// bin instead of an index kept up on every post).
    pub fn remove_posted_where(&mut self, mut pred: impl FnMut(&R) -> bool) -> Vec<(Selector, R)> {
        if self.posted_count == 0 {
            return Vec::new();
        }
        let mut gone: Vec<(u64, Selector, R)> = Vec::new();
        self.posted_bins.for_each_mut(|key, bin| {
            // One turn round the bin: what stays goes back to the end in
            // the same order, so the bin stays sorted by `seq`.
            for _ in 0..bin.len() {
                let Some(p) = bin.pop_front() else { break };
                if pred(&p.r) {
                    let sel = Selector {
                        ctx: key.ctx,
                        src: Source::Rank(key.src),
                        tag: Tag::Value(key.tag),
                    };
                    gone.push((p.seq, sel, p.r));
                } else {
                    bin.push_back(p);
                }
            }
        });
        let specific = gone.len();
        self.posted_wild.for_each_mut(|&ctx, list| {
            for (seq, w) in list.extract_if(.., |_, w| pred(&w.r)) {
                let sel = Selector {
                    ctx,
                    src: w.src,
                    tag: w.tag,
                };
                gone.push((seq, sel, w.r));
            }
        });
        self.wild_count -= gone.len() - specific;
        self.wild_in = self.wild_contexts();
        self.posted_count -= gone.len();
        gone.sort_unstable_by_key(|g| g.0);
        gone.into_iter().map(|(_, sel, r)| (sel, r)).collect()
    }

    /// Remove and return every posted receive and unexpected message of a
    /// context (for communicator teardown / finalize).
    ///
    /// Receives are returned in posting order, messages in arrival order.
    pub fn drain_ctx(&mut self, ctx: u32) -> (Vec<R>, Vec<(Envelope, U)>) {
        self.drain_where(|c| c == ctx)
    }

    /// Remove and return every posted receive and unexpected message of every
    /// context.
    ///
    /// Receives are returned in posting order, messages in arrival order.
    /// Sequence counters are not reset, so earlier [`PostId`]s stay invalid.
    pub fn drain_all(&mut self) -> (Vec<R>, Vec<(Envelope, U)>) {
        self.drain_where(|_| true)
    }

    /// Drains the contexts that satisfy `pred`.
    fn drain_where(&mut self, pred: impl Fn(u32) -> bool) -> (Vec<R>, Vec<(Envelope, U)>) {
        let mut posted: Vec<(u64, R)> = Vec::new();
        self.posted_bins.drain_where(
            |k| pred(k.ctx),
            |_, bin| posted.extend(bin.into_iter().map(|p| (p.seq, p.r))),
        );
        let specific = posted.len();
        self.posted_wild.drain_where(
            |&c| pred(c),
            |_, list| posted.extend(list.into_iter().map(|(seq, w)| (seq, w.r))),
        );
        self.wild_count -= posted.len() - specific;
        self.wild_in = self.wild_contexts();
        self.posted_count -= posted.len();

        let mut unexpected: Vec<(u64, Envelope, U)> = Vec::new();
        self.unexpected_bins.drain_where(
            |k| pred(k.ctx),
            |key, bin| {
                let env = Envelope::from_key(key);
                unexpected.extend(bin.into_iter().map(|e| (e.seq, env, e.u)));
            },
        );
        self.unexpected_order.drain_where(|&c| pred(c), |_, _| {});
        self.unexpected_count -= unexpected.len();

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
}
