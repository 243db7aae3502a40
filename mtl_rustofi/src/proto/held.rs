//! When a copied eager send is complete for MPI: once the provider has
//! taken its packet, not when its bytes were copied.
//!
//! A copied send's bytes are in a bounce buffer, so its user buffer is
//! free at once; but while its packet waits in a rail's queue (credits
//! exhausted, or the provider answered EAGAIN, as rxm does while it
//! connects to a new peer) only MPI progress sends it. A caller whose
//! `MPI_Wait` returned may next wait where nothing drives progress (Open
//! MPI's `MPI_Comm_disconnect` waits in a PMIx fence), and the packet
//! would never leave. So such a send stays incomplete until its packet is
//! handed to the provider, and its wait drives progress until then.
//!
//! A packet records the sends whose bytes it carries ([`Carried`]) and
//! whether their completions have been reported. They are reported as the
//! packet is handed to the driver, in the same output as its action. A
//! driver reports a refused post in the same pass, before the output's
//! events reach MPI (see [`super::Action`]), so a refusal takes the
//! completions back out of the output ([`Core::recall_carried`]); they
//! are reported again when the packet is handed over from the queue, or as
//! failed if it fails for good.
//!
//! Two consequences elsewhere: a packet that fails at the provider after
//! it was handed over is resent carrying no sends (they were reported and
//! stay complete: `Core::op_failed`); and a peer with a queued packet that
//! carries unreported sends and that the provider refused counts as
//! waited on for the liveness probes (`proto::liveness`), so that a dead
//! peer whose posts are refused for ever is given up (where the probes can
//! tell) and the sends fail rather than wait for ever.

use super::action::{Event, Out, Status};
use super::ids::{OpId, ReqId};
use super::txq::Op;
use super::{Core, Stats};

/// The copied eager sends whose bytes a packet carries.
#[derive(Debug, Default)]
pub(super) enum Carried {
    /// None (a control packet, a synchronous or zero-copy send: those
    /// complete by their own rules, see `AfterSend`).
    #[default]
    None,
    /// One send.
    One(ReqId),
    /// A bundle's sends ([`super::coalesce`]).
    Many(Vec<ReqId>),
}

impl Carried {
    fn reqs(&self) -> &[ReqId] {
        match self {
            Carried::None => &[],
            Carried::One(req) => std::slice::from_ref(req),
            Carried::Many(reqs) => reqs,
        }
    }

    /// Reports every carried send with `status`.
    #[inline]
    pub(super) fn report(&self, status: Status, out: &mut Out) {
        for &req in self.reqs() {
            out.events.push(Event::Send { req, status });
        }
    }

    #[inline]
    pub(super) fn is_none(&self) -> bool {
        matches!(self, Carried::None)
    }

    fn len(&self) -> usize {
        self.reqs().len()
    }
}

/// Takes send `req`'s completion back out of `out`, if it is there (a
/// packet of `Action::SendInline`, refused: see `Core::on_inline_refused`).
pub(super) fn take_back(req: ReqId, out: &mut Out) {
    if let Some(i) = out
        .events
        .iter()
        .rposition(|e| matches!(e, Event::Send { req: r, .. } if *r == req))
    {
        out.events.remove(i);
    }
}

/// Whether `e` is the successful completion of one of `reqs`.
fn completes_one_of(e: &Event, reqs: &[ReqId]) -> bool {
    matches!(e, Event::Send { req, status: Status::Ok } if reqs.contains(req))
}

impl Core {
    /// The driver refused operation `id` in this pass: if it is a packet
    /// whose carried sends were reported as it was handed over, their
    /// completions are taken back out of `out` (they have not reached MPI:
    /// see the module comment), to be reported when it goes or fails.
    pub(super) fn recall_carried(&mut self, id: OpId, out: &mut Out) {
        let Some(Op::Packet(p)) = self.ops.get_mut(id) else {
            return;
        };
        if !p.reported || p.carried.is_none() {
            return;
        }
        let reqs = p.carried.reqs();
        let found = out
            .events
            .iter()
            .filter(|e| completes_one_of(e, reqs))
            .count();
        if found != reqs.len() {
            // Delivered already (a driver that reported the refusal in a
            // later pass): they stay complete; taking back some of them
            // would lose those for ever.
            debug_assert!(false, "refusal of {id:?} after its sends were delivered");
            return;
        }
        out.events.retain(|e| !completes_one_of(e, reqs));
        p.reported = false;
        self.count_held(id);
    }

    /// Counts the sends packet `id` carries as held (it was queued).
    #[cold]
    pub(super) fn count_held(&self, id: OpId) {
        if let Some(Op::Packet(p)) = self.ops.get(id) {
            Stats::bump(&self.stats.held_sends, p.carried.len() as u64);
        }
    }

    /// Operation `id` is being handed to the driver from its rail's queue:
    /// the sends its packet carries are complete once it is taken.
    #[inline]
    pub(super) fn report_carried(&mut self, id: OpId, out: &mut Out) {
        if let Some(Op::Packet(p)) = self.ops.get_mut(id) {
            if !p.reported {
                p.reported = true;
                p.carried.report(Status::Ok, out);
            }
        }
    }

    /// Whether a packet waiting in a rail's queue carries send `req` (the
    /// simulator checks that no such send has been reported complete).
    #[cfg(test)]
    pub(crate) fn queued_carrying(&self, req: ReqId) -> bool {
        self.rails.iter().any(|r| {
            r.retry.iter().any(|&id| {
                matches!(self.ops.get(id), Some(Op::Packet(p)) if p.carried.reqs().contains(&req))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::action::{Action, PostError, Posted};
    use crate::proto::ids::PeerId;

    fn core() -> (Core, PeerId) {
        let (c, peers) = crate::proto::test_core::net_core("tcp;ofi_rxm", &[2]);
        (c, peers[0])
    }

    use crate::proto::test_core::send;

    /// The packets handed to the driver, in order.
    fn sent_ops(out: &Out) -> Vec<OpId> {
        out.actions
            .iter()
            .filter_map(|a| match a {
                Action::Send { op, .. } => Some(*op),
                _ => None,
            })
            .collect()
    }

    /// The sends `out` reports, with their status.
    fn sends(out: &Out) -> Vec<(usize, Status)> {
        out.events
            .iter()
            .filter_map(|e| match e {
                Event::Send { req, status } => Some((req.0, *status)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_refused_copied_send_completes_when_its_packet_goes() {
        let (mut c, peer) = core();
        let (mut d1, mut d2) = ([1u8; 100], [2u8; 100]);
        let mut out = Out::new();
        send(&mut c, peer, &mut d1, 1, &mut out);
        assert_eq!(sends(&out), [(1, Status::Ok)], "handed over: complete");
        let op = sent_ops(&out)[0];
        // Refused in the same pass: its completion is taken back.
        c.on_post_failed(Posted::Op(op), PostError::Again, &mut out);
        assert_eq!(sends(&out), [], "queued: not complete");
        assert_eq!(Stats::get(&c.stats().held_sends), 1);
        out.actions.clear();
        // A send behind it waits in the queue too, reported by no one.
        send(&mut c, peer, &mut d2, 2, &mut out);
        assert_eq!((sent_ops(&out), sends(&out)), (vec![], vec![]));
        assert_eq!(c.leftovers().retry, 2);
        // Progress hands both over: both complete, in order.
        c.tick(&mut out);
        let ops = sent_ops(&out);
        assert_eq!(ops.len(), 2);
        assert_eq!(sends(&out), [(1, Status::Ok), (2, Status::Ok)]);
        // Refused again in the same pass: taken back again, and reported
        // once they go.
        for &op in &ops {
            c.on_post_failed(Posted::Op(op), PostError::Again, &mut out);
        }
        assert_eq!(sends(&out), []);
        // Each time a packet carrying a send was queued: 1 refused, 2
        // queued at once, both refused again.
        assert_eq!(Stats::get(&c.stats().held_sends), 4);
        let mut out = Out::new();
        c.tick(&mut out);
        assert_eq!(sends(&out), [(1, Status::Ok), (2, Status::Ok)]);
        // The provider's completions report nothing more.
        let mut last = Out::new();
        for op in sent_ops(&out) {
            c.on_complete(op, &mut last);
        }
        assert_eq!(sends(&last), []);
        assert!(!c.busy());
    }

    #[test]
    fn a_bundles_sends_wait_with_its_refused_packet() {
        let (mut c, peer) = core();
        c.cfg.coalesce = true;
        let mut data = [[7u8; 64]; 3];
        let mut out = Out::new();
        let [d1, d2, d3] = &mut data;
        // The first goes alone; the next two share a bundle behind it.
        send(&mut c, peer, d1, 1, &mut out);
        send(&mut c, peer, d2, 2, &mut out);
        send(&mut c, peer, d3, 3, &mut out);
        assert_eq!(sends(&out), [(1, Status::Ok)]);
        assert_eq!(Stats::get(&c.stats().coalesced), 1);
        let mut flush = Out::new();
        c.tick(&mut flush);
        assert_eq!(sends(&flush), [(2, Status::Ok), (3, Status::Ok)]);
        let bundle = sent_ops(&flush)[0];
        c.on_post_failed(Posted::Op(bundle), PostError::Again, &mut flush);
        assert_eq!(
            sends(&flush),
            [],
            "the bundle waits: none of its sends is complete"
        );
        let mut later = Out::new();
        c.tick(&mut later);
        assert_eq!(sends(&later), [(2, Status::Ok), (3, Status::Ok)]);
    }

    #[test]
    fn a_waiting_copied_send_fails_when_its_peer_is_given_up() {
        crate::log::QUIET.with(|q| q.set(true));
        let (mut c, peer) = core();
        let mut d = [3u8; 100];
        let mut out = Out::new();
        send(&mut c, peer, &mut d, 1, &mut out);
        let op = sent_ops(&out)[0];
        c.on_post_failed(Posted::Op(op), PostError::Again, &mut out);
        let mut gone = Out::new();
        c.peer_gone(peer, "test", &mut gone);
        assert_eq!(sends(&gone), [(1, Status::Failed)]);
        assert_eq!(c.leftovers().retry, 0);
    }

    /// A packet that failed at the provider after it was handed over is
    /// resent; its sends were reported then and stay complete, so the
    /// resend carries none: a refusal of it takes back nothing, not even
    /// the completion of a new send whose request has the same address.
    #[test]
    fn a_resend_after_an_error_completion_carries_no_sends() {
        crate::log::QUIET.with(|q| q.set(true));
        let (mut c, peer) = core();
        let (mut d1, mut d2) = ([1u8; 100], [2u8; 100]);
        let mut out = Out::new();
        send(&mut c, peer, &mut d1, 1, &mut out);
        assert_eq!(sends(&out), [(1, Status::Ok)]);
        let op = sent_ops(&out)[0];
        let mut later = Out::new();
        c.on_error(op, "test", &mut later);
        assert_eq!(sends(&later), [], "resent, not failed");
        let mut again = Out::new();
        c.tick(&mut again);
        let resend = sent_ops(&again)[0];
        assert_eq!(sends(&again), [], "reported once already");
        // Request 1 is reused for a new send, complete in this output.
        send(&mut c, peer, &mut d2, 1, &mut again);
        assert_eq!(sends(&again), [(1, Status::Ok)]);
        c.on_post_failed(Posted::Op(resend), PostError::Again, &mut again);
        assert_eq!(
            sends(&again),
            [(1, Status::Ok)],
            "the new send's completion stays"
        );
        assert_eq!(Stats::get(&c.stats().held_sends), 0);
    }

    /// A held send makes its peer waited on (probed, and given up if
    /// dead) only once the provider has refused its packet: one that
    /// waits only for a credit, held by transfers to another peer, says
    /// nothing of its own peer.
    #[test]
    fn only_a_refused_packet_makes_its_peer_waited_on() {
        let (mut c, peers) = crate::proto::test_core::net_core("tcp;ofi_rxm", &[2, 3]);
        let (busy, quiet) = (peers[0], peers[1]);
        let mut data = vec![[4u8; 64]; 66];
        let mut out = Out::new();
        let (to_busy, rest) = data.split_at_mut(64);
        for (i, d) in to_busy.iter_mut().enumerate() {
            send(&mut c, busy, d, 100 + i, &mut out);
        }
        assert_eq!(sent_ops(&out).len(), 64, "every credit in use");
        send(&mut c, quiet, &mut rest[0], 1, &mut out);
        assert_eq!(c.leftovers().retry, 1, "queued for a credit");
        assert!(
            !c.waited_peers()[quiet.index()],
            "a credit wait is no evidence"
        );
        // A credit frees; the packet goes and the provider refuses it.
        let first = sent_ops(&out)[0];
        let mut next = Out::new();
        c.on_complete(first, &mut next);
        c.tick(&mut next);
        let op = sent_ops(&next)[0];
        c.on_post_failed(Posted::Op(op), PostError::Again, &mut next);
        assert!(
            c.waited_peers()[quiet.index()],
            "refused: its peer is waited on"
        );
    }
}
