//! The quick look of an empty poll (see `mtl_rustofi/CONCURRENCY.md`).

use super::{Engine, State};
use crate::driver::RingWatch;
use crate::proto::ids::RailId;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// What lets a poll that would find nothing return before it takes the
/// progress token: the token holder says, as it leaves, whether the core
/// only waits for packets on the shared-memory rail (`ring_only`); a poll
/// then returns if no command is queued and no ring holds a packet. Each
/// answer may be stale to a thread without the token (another thread may
/// change either meanwhile), so one poll in `FULL_EVERY` skipped goes the
/// whole way regardless: a stale "idle" delays work by at most that many
/// polls, and the engine clock (liveness, stall reports, repairs) keeps
/// running.
///
/// Under the token `ring_only` is exact: every holder keeps it true to the
/// core's state before it leaves (`note` after a full round, peer setup
/// and the other rare operations; `note_started` after anything else but
/// a small send its ring took or a receive post that was only queued,
/// neither of which can end the state: see `Engine::start`), and a round
/// that finds it set reads only the rings.
pub(super) struct IdleWatch {
    pub(super) rail: RailId,
    pub(super) rings: Arc<RingWatch>,
    pub(super) ring_only: AtomicBool,
    /// Polls returned early since the last full one (a hint: plain load
    /// and store, racing threads may lose counts).
    pub(super) skipped: AtomicU32,
    /// The last poll was refused a skip because `FULL_EVERY` had been
    /// skipped (a hint, as `skipped`).
    pub(super) forced: AtomicBool,
}

const FULL_EVERY: u32 = 64;

impl Engine {
    /// Whether a poll would find nothing, by a look that takes no token
    /// ([`IdleWatch`]): then the caller may return at once. `SCHEDULED`
    /// must be [`Engine::looks_on_schedule`]'s answer.
    #[inline]
    pub(crate) fn nothing_to_poll<const SCHEDULED: bool>(&self) -> bool {
        self.idle
            .as_ref()
            .is_some_and(|w| w.skip::<SCHEDULED>(self.handoff.inbox_is_empty()))
    }

    /// Whether the quick look reads the rings on a schedule (four or more
    /// local ranks, `driver::shm::inbound`).
    #[inline]
    pub(crate) fn looks_on_schedule(&self) -> bool {
        self.scheduled_look
    }
}

impl IdleWatch {
    /// Whether a poll can return now (`SCHEDULED`: as
    /// [`RingWatch::any_ready`]).
    #[inline]
    pub(super) fn skip<const SCHEDULED: bool>(&self, inbox_empty: bool) -> bool {
        if !self.ring_only.load(Ordering::Relaxed) || !inbox_empty {
            return false;
        }
        let n = self.skipped.load(Ordering::Relaxed);
        if n >= FULL_EVERY {
            self.skipped.store(0, Ordering::Relaxed);
            self.forced.store(true, Ordering::Relaxed);
            return false;
        }
        if self.rings.any_ready::<SCHEDULED>() {
            return false;
        }
        self.skipped.store(n + 1, Ordering::Relaxed);
        true
    }

    /// Whether the poll about to run was forced after skipped ones (and
    /// clears that).
    #[inline]
    pub(super) fn take_forced(&self) -> bool {
        let forced = self.forced.load(Ordering::Relaxed);
        if forced {
            self.forced.store(false, Ordering::Relaxed);
        }
        forced
    }

    /// Notes, as the token holder leaves a full progress round (or peer
    /// setup, quiesce, the release of cached registrations), what the next
    /// poll may skip, from every rail's state.
    #[inline]
    pub(super) fn note(&self, st: &mut State) {
        // The rails' own state says what a post left to do.
        st.driver.take_posted_off_ring();
        self.ring_only
            .store(st.core.waits_only_on(self.rail), Ordering::Relaxed);
    }

    /// Notes, as the token holder leaves after starting operations or
    /// after a round that read only the rings (`ring_only` was set), that
    /// the next poll must not be skipped if they left work for a tick (a
    /// queued packet, an open bundle) or posted to a libfabric rail. While
    /// `ring_only` holds no other rail has a peer (it would need polling),
    /// so nothing else can end it. Cheaper than `note`, which looks at
    /// every rail.
    #[inline]
    pub(super) fn note_started(&self, st: &mut State) {
        self.note_ring_round(st, st.core.tick_is_empty());
    }

    /// [`IdleWatch::note_started`] after a round that read only the rings
    /// and applied no command, which found whether the core's tick has
    /// anything left to do (`quiet`) as it finished, so that it is not
    /// asked twice.
    #[inline]
    pub(super) fn note_ring_round(&self, st: &mut State, quiet: bool) {
        if st.driver.take_posted_off_ring() || !quiet {
            self.ring_only.store(false, Ordering::Relaxed);
        }
    }
}
