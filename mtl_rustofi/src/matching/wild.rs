//! Which contexts hold queued wildcard receives, so that an arrival in a
//! context without any skips the wildcard lists.
//!
//! A wildcard receive can only match a message of its own context (MPI
//! matches within one communicator), so an arrival needs the ordered scan
//! of [`Matcher::take_posted`]'s wildcard path only if its own context has
//! wildcards queued. A count over all contexts would send every arrival
//! that way while any context has one: on Open MPI 5 the shim keeps an
//! `MPI_ANY_SOURCE` receive posted for good on a context of its own (the
//! exchange of extended communicator ids), and every message of the
//! application would pay for it. Knowing the one context that has
//! wildcards, the common case, is a comparison; with several the answer is
//! "maybe" and the arrival looks at its context's list.

use super::Matcher;

/// The contexts that hold queued wildcard receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WildIn {
    /// None does.
    Nowhere,
    /// Only this one.
    One(u32),
    /// More than one.
    Several,
}

impl WildIn {
    /// Whether context `ctx` may hold wildcard receives: false only when
    /// it surely holds none.
    #[inline(always)]
    pub(super) fn may_hold(self, ctx: u32) -> bool {
        match self {
            WildIn::Nowhere => false,
            WildIn::One(c) => c == ctx,
            WildIn::Several => true,
        }
    }
}

impl<R, U> Matcher<R, U> {
    /// Notes that the wildcard list of `ctx` went from empty to holding
    /// one receive.
    pub(super) fn wild_list_filled(&mut self, ctx: u32) {
        self.wild_in = match self.wild_in {
            WildIn::Nowhere => WildIn::One(ctx),
            WildIn::One(c) if c == ctx => WildIn::One(c),
            _ => WildIn::Several,
        };
    }

    /// Notes that the wildcard list of `ctx` became empty.
    pub(super) fn wild_list_emptied(&mut self, ctx: u32) {
        self.wild_in = match self.wild_in {
            WildIn::One(c) => {
                debug_assert_eq!(c, ctx, "the one context with wildcards");
                WildIn::Nowhere
            }
            // Which one is left, if only one is, takes a look at every
            // list: only when a context's last wildcard goes while
            // another context has some.
            WildIn::Several => self.wild_contexts(),
            WildIn::Nowhere => {
                debug_assert!(false, "a wildcard list emptied while none was held");
                WildIn::Nowhere
            }
        };
    }

    /// [`WildIn`] from the lists themselves (after a bulk removal, and
    /// for the invariant checks).
    pub(super) fn wild_contexts(&self) -> WildIn {
        let mut held = self
            .posted_wild
            .iter()
            .filter(|(_, list)| !list.is_empty())
            .map(|(&ctx, _)| ctx);
        match (held.next(), held.next()) {
            (None, _) => WildIn::Nowhere,
            (Some(c), None) => WildIn::One(c),
            (Some(_), Some(_)) => WildIn::Several,
        }
    }
}
