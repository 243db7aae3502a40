//! Flow control of sends: the bytes the core holds for sends the provider
//! has not completed are bounded per peer (`send_queue_limit`) and per
//! process (`send_queue_total`).
//!
//! A copied eager send completes as soon as the provider takes its packet
//! ([`super::held`]), before the transmit ends, so without a bound a
//! sender whose receiver does not progress keeps copying: every message
//! holds a buffer and an operation until the provider reports its
//! transmit, and a flood grows the process by
//! gigabytes. Here a send that does not fit waits instead, uncopied, in
//! its peer's queue of deferred sends (MPI allows it: `MPI_Send` blocks,
//! `MPI_Isend` stays incomplete); as transmits complete, the queue drains
//! in order. Later sends to the same peer queue behind it whatever their
//! size, so the per-peer sequence numbers, taken when a send leaves the
//! queue, keep MPI's non-overtaking order.
//!
//! What is charged: the capacity of each bounce buffer carrying a user's
//! send (copied, zero-copy header, synchronous, coalesced bundle, RTS)
//! plus [`OP_OVERHEAD`] for its operation, from when the buffer is taken
//! until the packet is reported. Control packets are not charged (they
//! answer the peer and must never wait behind user sends). A send is let
//! through only if the largest buffer it could take fits, so the charge
//! never exceeds the limits, except that a peer with nothing charged
//! always gets one send through (a limit below one buffer cannot stall
//! it).

use super::action::{Event, Out, Status};
use super::eager::SendArgs;
use super::ids::PeerId;
use super::tick_work::TickWork;
use super::Core;
use std::collections::VecDeque;

/// Bookkeeping charged per packet beside its buffer: the operation's slot
/// in the core and the driver's context (both under 128 bytes).
pub(crate) const OP_OVERHEAD: usize = 128;

/// One peer's charge and deferred sends.
#[derive(Default)]
struct PeerFlow {
    held: usize,
    deferred: VecDeque<SendArgs>,
}

/// The limits and what is held against them.
pub(super) struct Flow {
    limit: usize,
    total_limit: usize,
    total: usize,
    /// Highest `total` seen.
    peak: usize,
    /// Indexed by peer; grown on first use.
    peers: Vec<PeerFlow>,
    /// Peers with deferred sends, in the order they started waiting.
    waiting: Vec<PeerId>,
    /// A drain is under way (sends it starts must not start another).
    draining: bool,
}

impl Flow {
    pub(super) fn new(limit: usize, total_limit: usize) -> Flow {
        Flow {
            limit,
            total_limit,
            total: 0,
            peak: 0,
            peers: Vec::new(),
            waiting: Vec::new(),
            draining: false,
        }
    }

    fn peer(&mut self, p: PeerId) -> &mut PeerFlow {
        let i = p.index();
        if self.peers.len() <= i {
            self.peers.resize_with(i + 1, PeerFlow::default);
        }
        &mut self.peers[i]
    }

    fn held(&self, p: PeerId) -> usize {
        self.peers.get(p.index()).map_or(0, |f| f.held)
    }

    /// Peers with deferred sends (liveness watches them).
    pub(super) fn waiting(&self) -> &[PeerId] {
        &self.waiting
    }

    fn has_deferred(&self, p: PeerId) -> bool {
        self.peers
            .get(p.index())
            .is_some_and(|f| !f.deferred.is_empty())
    }

    /// Whether `cost` more bytes may be charged to `p`.
    fn fits(&self, p: PeerId, cost: usize) -> bool {
        let held = self.held(p);
        (held == 0 || held + cost <= self.limit)
            && (self.total == 0 || self.total + cost <= self.total_limit)
    }

    pub(super) fn charge(&mut self, p: PeerId, cost: usize) {
        self.peer(p).held += cost;
        self.total += cost;
        self.peak = self.peak.max(self.total);
    }

    pub(super) fn release(&mut self, p: PeerId, cost: usize) {
        let f = self.peer(p);
        debug_assert!(f.held >= cost, "flow charge below zero");
        f.held -= cost;
        self.total -= cost;
    }

    pub(super) fn any_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Sends waiting, uncopied, over all peers.
    pub(super) fn waiting_len(&self) -> usize {
        self.peers.iter().map(|f| f.deferred.len()).sum()
    }

    /// Bytes charged over all peers.
    pub(super) fn held_total(&self) -> usize {
        self.total
    }
}

/// What the core's flow control holds now (see [`Core::flow_state`]).
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FlowState {
    /// Bytes charged over all peers, and the most ever.
    pub(crate) total: usize,
    pub(crate) peak: usize,
    /// The largest charge of any one peer now.
    pub(crate) max_peer: usize,
    /// Sends waiting, uncopied, over all peers.
    pub(crate) deferred: usize,
}

impl Core {
    /// The charge of a bounce buffer of `capacity` bytes.
    pub(super) fn buf_cost(capacity: usize) -> usize {
        capacity + OP_OVERHEAD
    }

    /// The charge of the largest buffer a send to `peer` may take.
    fn full_cost(&self, peer: PeerId) -> usize {
        let rail = self.peers[peer.index()].rail;
        Self::buf_cost(self.rails[rail.index()].profile.buf_size)
    }

    /// Whether a send to `s.peer` must wait: others wait before it, or the
    /// largest buffer it could take does not fit.
    #[inline(always)]
    pub(super) fn send_must_wait(&self, s: &SendArgs) -> bool {
        let (held, deferred) = self
            .flow
            .peers
            .get(s.peer.index())
            .map_or((0, false), |f| (f.held, !f.deferred.is_empty()));
        // While nothing is charged, to the peer or at all, any send fits
        // (see `Flow::fits`): no cost to look up.
        deferred || ((held != 0 || self.flow.total != 0) && !self.largest_send_fits(s.peer))
    }

    /// Whether the largest buffer a send to `peer` may take fits.
    #[inline(never)]
    fn largest_send_fits(&self, peer: PeerId) -> bool {
        self.flow.fits(peer, self.full_cost(peer))
    }

    /// Puts a send in its peer's queue; it starts when room is made.
    pub(super) fn defer_send(&mut self, s: SendArgs) {
        tracing::trace!(peer = s.peer.0, "send waits for the send queue to drain");
        let f = self.flow.peer(s.peer);
        let first = f.deferred.is_empty();
        f.deferred.push_back(s);
        if first {
            self.flow.waiting.push(s.peer);
            self.work.set(TickWork::DEFERRED, true);
        }
    }

    /// Starts deferred sends, oldest first per peer, while they fit. A
    /// deferred send to a peer that can no longer be reached fails.
    pub(super) fn drain_deferred(&mut self, out: &mut Out) {
        if self.flow.waiting.is_empty() || self.flow.draining {
            return;
        }
        self.flow.draining = true;
        let waiting = std::mem::take(&mut self.flow.waiting);
        self.work.set(TickWork::DEFERRED, false);
        for &peer in &waiting {
            loop {
                let f = &mut self.flow.peers[peer.index()];
                let Some(&s) = f.deferred.front() else {
                    // A flood's queue gives its memory back once drained.
                    if f.deferred.capacity() > 64 {
                        f.deferred = VecDeque::new();
                    }
                    break;
                };
                if self.check_peer(peer).is_err() {
                    self.fail_deferred(peer, out);
                    break;
                }
                if !self.flow.fits(peer, self.full_cost(peer)) {
                    break;
                }
                self.flow.peers[peer.index()].deferred.pop_front();
                if self.send_now(s, out).is_err() {
                    out.events.push(Event::Send {
                        req: s.req,
                        status: Status::Failed,
                    });
                }
            }
        }
        let mut waiting = waiting;
        waiting.retain(|p| self.flow.has_deferred(*p));
        // Sends deferred while draining (none: the drain takes them in
        // order) would have been listed anew; keep each peer once.
        let deferred_meanwhile = std::mem::take(&mut self.flow.waiting);
        self.work.set(TickWork::DEFERRED, false);
        for p in deferred_meanwhile {
            if !waiting.contains(&p) {
                waiting.push(p);
            }
        }
        self.work.set(TickWork::DEFERRED, !waiting.is_empty());
        self.flow.waiting = waiting;
        self.flow.draining = false;
    }

    /// Fails every deferred send to `peer`.
    fn fail_deferred(&mut self, peer: PeerId, out: &mut Out) {
        let f = self.flow.peer(peer);
        out.events.extend(f.deferred.drain(..).map(|s| Event::Send {
            req: s.req,
            status: Status::Failed,
        }));
    }

    /// The peer can no longer be reached: its deferred sends fail and its
    /// open bundle (dropped by the caller) is no longer charged.
    pub(super) fn flow_peer_lost(&mut self, peer: PeerId, out: &mut Out) {
        if let Some(b) = self.peers[peer.index()].bundle.as_mut() {
            let held = std::mem::take(&mut b.held);
            self.flow.release(peer, held);
        }
        self.fail_deferred(peer, out);
        self.flow.waiting.retain(|&p| p != peer);
        self.work
            .set(TickWork::DEFERRED, !self.flow.waiting.is_empty());
    }

    /// What flow control holds now.
    #[cfg(test)]
    pub(crate) fn flow_state(&self) -> FlowState {
        FlowState {
            total: self.flow.total,
            peak: self.flow.peak,
            max_peer: self.flow.peers.iter().map(|f| f.held).max().unwrap_or(0),
            deferred: self.flow.peers.iter().map(|f| f.deferred.len()).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::eager::SendArgs;
    use crate::proto::ids::ReqId;
    use crate::proto::Out;
    use crate::usermem::UserBuf;

    /// A send to a handle of no peer is refused with an error, also while
    /// flow control holds a charge (its look at the peer's room must not
    /// come before the look at the peer).
    #[test]
    fn a_send_to_no_peer_is_refused_while_something_is_charged() {
        let (mut c, peers) = crate::proto::test_core::net_core("tcp;ofi_rxm", &[10]);
        let mut data = [7u8; 16];
        // SAFETY: `data` outlives every send of this test.
        let buf = unsafe { UserBuf::new(data.as_mut_ptr(), data.len()) };
        let args = |peer, req| SendArgs {
            peer,
            ctx: 0,
            src: 0,
            tag: 1,
            buf,
            sync: false,
            req: ReqId(req),
        };
        let mut out = Out::new();
        // A bounce-buffered send to the real peer holds a charge.
        let _ = c.send(args(peers[0], 1), &mut out).unwrap();
        assert!(c.flow_state().total > 0);
        for bad in [PeerId::from_handle(0), PeerId::from_handle(5)] {
            match c.send(args(bad, 2), &mut Out::new()) {
                Err(e) => assert!(e.0.contains("unknown peer"), "{}", e.0),
                Ok(_) => panic!("a send to {bad:?} was accepted"),
            }
        }
    }

    #[test]
    fn limits_hold_per_peer_and_in_all() {
        let (a, b) = (PeerId(0), PeerId(1));
        let mut f = Flow::new(1000, 1500);
        // A peer holding nothing gets one send through whatever its size.
        assert!(f.fits(a, 5000));
        f.charge(a, 600);
        assert!(f.fits(a, 400) && !f.fits(a, 401));
        f.charge(b, 800);
        // b's own room is 200, and all together may hold 100 more.
        assert!(f.fits(b, 100) && !f.fits(b, 101));
        f.release(a, 600);
        assert!(f.fits(a, 700) && !f.fits(b, 201));
        assert_eq!((f.total, f.peak), (800, 1400));
        f.release(b, 800);
        assert!(f.fits(b, 5000));
    }
}
