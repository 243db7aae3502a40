//! What a tick would find to do, in one byte: a bit per source of work,
//! set or cleared by every write of that source, so that the test every
//! poll makes ([`super::Core::tick_is_empty`]) is one load and one compare
//! rather than a load and a test per source.
//!
//! The sources and their writers (each updates its bit right after it
//! writes):
//! - [`TickWork::QUEUED`]: some operation or receive buffer may wait in a
//!   rail's retry queue; this bit is that flag itself, set whenever one
//!   is queued (`requeue`/`requeue_rx`) and set to what is left by
//!   `run_retries` and `drop_queued_packets_of`; an aborted operation's
//!   removal (`abort`) leaves it set for the next tick to clear;
//! - [`TickWork::BUNDLES`]: `open_bundles` is not empty (`coalesce`);
//! - [`TickWork::RETIRED`]: `retired` is not empty (`txbuf`, and
//!   `Core::tick_work` when it frees them);
//! - [`TickWork::DEFERRED`]: the flow control's `waiting` is not empty
//!   (`defer_send`, `drain_deferred`, `flow_peer_lost`).
//!
//! `Core::tick_work_exact` checks the byte against the sources themselves:
//! the simulator after every event, the fuzzer after every step, and
//! `tick_is_empty` in builds with debug assertions.

/// The bits of the sources of a tick's work that are non-empty.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(super) struct TickWork(u8);

impl TickWork {
    /// Operations or receive buffers wait in a rail's retry queue.
    pub(super) const QUEUED: u8 = 1;
    /// Some peer may have an open coalescing bundle.
    pub(super) const BUNDLES: u8 = 2;
    /// Bounce buffers wait to be freed.
    pub(super) const RETIRED: u8 = 4;
    /// Sends wait for room in the flow control.
    pub(super) const DEFERRED: u8 = 8;

    /// Sets `bit` if `on`, else clears it.
    #[inline(always)]
    pub(super) fn set(&mut self, bit: u8, on: bool) {
        self.0 = (self.0 & !bit) | (bit * on as u8);
    }

    /// Whether `bit` is set.
    #[inline(always)]
    pub(super) fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// Whether no bit is set.
    #[inline(always)]
    pub(super) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The byte the collections' own state gives (the queued bit, a flag
    /// of its own, clear).
    pub(super) fn of(bundles: bool, retired: bool, deferred: bool) -> TickWork {
        let mut w = TickWork::default();
        w.set(Self::BUNDLES, bundles);
        w.set(Self::RETIRED, retired);
        w.set(Self::DEFERRED, deferred);
        w
    }
}

#[cfg(test)]
mod tests {
    use super::TickWork;

    #[test]
    fn bits_are_set_and_cleared_alone() {
        let bits = [
            TickWork::QUEUED,
            TickWork::BUNDLES,
            TickWork::RETIRED,
            TickWork::DEFERRED,
        ];
        let mut w = TickWork::default();
        assert!(w.is_empty());
        for (i, &b) in bits.iter().enumerate() {
            w.set(b, true);
            w.set(b, true);
            assert!(w.has(b));
            for &other in &bits[i + 1..] {
                assert!(!w.has(other));
            }
        }
        for (i, &b) in bits.iter().enumerate() {
            assert!(!w.is_empty());
            w.set(b, false);
            assert!(!w.has(b));
            for &other in &bits[i + 1..] {
                assert!(w.has(other));
            }
        }
        assert!(w.is_empty());
        assert_eq!(TickWork::of(false, false, false), TickWork::default());
        assert!(TickWork::of(false, true, false).has(TickWork::RETIRED));
        assert!(!TickWork::of(true, false, true).has(TickWork::RETIRED));
    }
}
