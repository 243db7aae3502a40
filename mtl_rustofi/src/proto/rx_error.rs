//! A posted receive buffer that the provider completed with an error.
//!
//! The rails are reliable, so such an error means a packet is gone: the
//! provider consumed it and did not deliver it whole. `udp;ofi_rxd`
//! reports `FI_ETRUNC` for a message whose segments it did not assemble,
//! with the bytes it did place in the buffer. When those bytes hold the
//! packet's header, the loss is named: a data packet of a message
//! rendezvous is asked for again (see [`super::rndv_msg`]); an eager
//! message or a rendezvous request takes its place in the sender's order
//! and fails the receive it matches (its sender, which completed or is
//! told, cannot send it again), and if other messages were coalesced
//! behind it, which nothing names, the peer is given up; anything else is
//! reported with its kind and sender, so that whatever then waits for it
//! is not a mystery. The buffer is posted again either way.

use super::action::{Out, Status};
use super::ids::{Cookie, PeerId, RailId, RxSlot};
use super::peers::sync_cookie;
use super::recv::Unexpected;
use super::{Core, PostedRecv, Stats};
use crate::matching::Envelope;
use crate::wire::{self, Header, Kind};

impl Core {
    /// A posted receive buffer completed with an error: `got` holds the
    /// bytes the provider says it placed (empty if none), `canceled` that
    /// the endpoint is closing (the buffer is not posted again).
    pub(crate) fn on_rx_error(
        &mut self,
        rail: RailId,
        slot: RxSlot,
        canceled: bool,
        why: &str,
        got: &[u8],
        out: &mut Out,
    ) {
        if canceled {
            return;
        }
        self.packet_lost(got, why, out);
        self.repost_rx(rail, slot, out);
    }

    /// Under `Fault::LoseData`: whether this arriving data packet is taken
    /// as lost (every fourth).
    pub(super) fn lose_injected(&mut self) -> bool {
        self.fault_seen += 1;
        self.fault_seen.is_multiple_of(4)
    }

    /// A packet the provider lost, of which `got` arrived.
    pub(super) fn packet_lost(&mut self, got: &[u8], why: &str, out: &mut Out) {
        Stats::add(&self.stats.rx_lost, 1);
        let recovered = match Header::decode_head(got) {
            Ok(hdr) => self.on_damaged(hdr, why, out),
            Err(_) => {
                self.error(&format!("receive failed: {why}"));
                false
            }
        };
        if !recovered {
            self.count_error();
        }
    }

    /// A packet of which only `hdr` could be read; true if it is sent
    /// again.
    fn on_damaged(&mut self, hdr: Header, why: &str, out: &mut Out) -> bool {
        let Some(peer) = self.sender_peer(hdr.sender) else {
            self.error(&format!(
                "receive failed: {why}; lost a {:?} packet from unknown process 0x{:x}",
                hdr.kind, hdr.sender
            ));
            return false;
        };
        if hdr.kind == Kind::Data {
            if self.on_damaged_data(peer, &hdr, out) {
                tracing::info!(
                    peer = peer.0,
                    offset = hdr.ext0,
                    "a receive failed ({why}); its rendezvous data is asked for again"
                );
            } else {
                // Whole, it would have been dropped as well (`on_data`):
                // nothing waits for it.
                self.error(&format!(
                    "receive failed: {why}; dropped a lost rendezvous data packet for no \
                     pending receive"
                ));
            }
            return true;
        }
        let what = format!(
            "receive failed: {why}; lost a {:?} packet from peer {} (context {}, source {}, \
             tag {}, {} bytes)",
            hdr.kind, peer.0, hdr.ctx, hdr.src, hdr.tag, hdr.len
        );
        if !matches!(hdr.kind, Kind::Eager | Kind::Rts) {
            self.error(&what);
            return false;
        }
        // A header from the peer arrived: it is alive, and a receive may
        // complete.
        self.heard_from(peer);
        self.stall.moved = true;
        let more = hdr.flags & wire::FLAG_MORE != 0;
        // In its place in the peer's order, so the messages behind it
        // are not held for ever.
        let fresh = if self.peers[peer.index()].order.take_in_order(hdr.seq) {
            self.on_lost_matchable(peer, &hdr, out);
            true
        } else {
            self.hold(peer, hdr, &[], true, out)
        };
        if !fresh {
            // A duplicate, dropped and counted by `hold`: nothing lost.
            return true;
        }
        self.error(&format!("{what}: the receive it matches fails"));
        if more {
            // The messages coalesced behind it are gone too, and nothing
            // says how many: every later message of the peer would wait
            // for them in its order, silently. Giving the peer up fails
            // what waits on it instead.
            self.peer_gone(
                peer,
                "messages coalesced behind a lost one were lost with it, and their number \
                 is unknown; the peer is given up",
                out,
            );
        }
        false
    }

    /// A matchable message the provider lost, in its order: its sender is
    /// released at once if it waits (a rendezvous gets a failed FIN), and
    /// the receive it matches, now or when posted, fails.
    pub(super) fn on_lost_matchable(&mut self, peer: PeerId, hdr: &Header, out: &mut Out) {
        // (An RTS with a failed status comes from a sender that has
        // given up already and waits for nothing.)
        if hdr.kind == Kind::Rts && hdr.status == 0 && !self.peers[peer.index()].lost {
            self.send_fin(peer, hdr.cookie, true, out);
        }
        let sync = (hdr.kind == Kind::Eager)
            .then(|| sync_cookie(hdr.flags, hdr.cookie))
            .flatten();
        let env = Envelope {
            ctx: hdr.ctx,
            src: hdr.src,
            tag: hdr.tag,
        };
        match self.matcher.take_posted(&env) {
            Some(p) => {
                self.stats.posted_now.down(1);
                self.fail_lost(p, env, peer, sync, out);
            }
            None => self.queue_unexpected(
                env,
                Unexpected::Lost {
                    peer,
                    len: hdr.len,
                    sync,
                },
            ),
        }
    }

    /// A receive matched a lost message: it fails; a synchronous sender,
    /// whose message was matched, gets its ack.
    pub(super) fn fail_lost(
        &mut self,
        p: PostedRecv,
        env: Envelope,
        peer: PeerId,
        sync: Option<Cookie>,
        out: &mut Out,
    ) {
        self.ack_sync(peer, sync, out);
        self.recv_done(p.req, env, 0, Status::Failed, out);
    }
}

#[cfg(test)]
mod tests {
    use crate::matching::Selector;
    use crate::proto::ids::{RailId, ReqId, RxSlot};
    use crate::proto::{Action, Event, Out, Stats, Status};
    use crate::usermem::UserBuf;
    use crate::wire::{Header, Kind};

    /// A failed receive buffer is posted again whatever it holds; a loss
    /// that cannot be made good counts as an error, and every one counts
    /// as lost. A lost eager message waits as unexpected, and the receive
    /// that matches it fails.
    #[test]
    fn a_lost_packet_is_counted_and_its_buffer_posted_again() {
        crate::log::QUIET.with(|q| q.set(true));
        let (mut c, _) = crate::proto::test_core::net_core("udp;ofi_rxd", &[2]);
        // An eager message of the peer (name 2), tag 7, that lost its
        // payload.
        let mut eager = Header::new(Kind::Eager);
        eager.sender = 2;
        eager.tag = 7;
        eager.len = 5000;
        let mut head = vec![0u8; 100];
        eager.encode(&mut head);
        // Data of a transfer this rank does not have.
        let mut data = Header::new(Kind::Data);
        data.sender = 2;
        data.len = 4000;
        let mut stray = vec![0u8; 80];
        data.encode(&mut stray);
        // (what, bytes placed, counted as an error)
        let cases: [(&str, &[u8], bool); 5] = [
            ("nothing placed", &[], true),
            ("shorter than a header", &head[..20], true),
            ("not a header", &[0x55; 64], true),
            ("an eager message", &head, true),
            // Whole, it would be dropped too: nothing is lost.
            ("stray data", &stray, false),
        ];
        let mut errors = 0;
        for (i, (what, got, error)) in cases.into_iter().enumerate() {
            let mut out = Out::new();
            c.on_rx_error(RailId(0), RxSlot(3), false, "test", got, &mut out);
            assert!(
                matches!(
                    out.actions.as_slice(),
                    [Action::PostRecv {
                        rail: RailId(0),
                        slot: RxSlot(3)
                    }]
                ),
                "{what}: {:?}",
                out.actions
            );
            errors += error as u64;
            assert_eq!(Stats::get(&c.stats().rx_lost), i as u64 + 1, "{what}");
            assert_eq!(Stats::get(&c.stats().errors), errors, "{what}");
        }
        assert_eq!(Stats::get(&c.stats().unexpected_now.now), 1);
        let mut out = Out::new();
        let posted = c.recv(
            Selector::from_mpi(0, 0, 7),
            None,
            UserBuf::empty(),
            ReqId(9),
            &mut out,
        );
        assert!(posted.is_none(), "matched the lost message at once");
        assert!(
            matches!(
                out.events.as_slice(),
                [Event::Recv {
                    req: ReqId(9),
                    tag: 7,
                    bytes: 0,
                    status: Status::Failed,
                    ..
                }]
            ),
            "{:?}",
            out.events
        );
        // A buffer cancelled at close is neither posted nor counted.
        let mut out = Out::new();
        c.on_rx_error(RailId(0), RxSlot(3), true, "closing", &head, &mut out);
        assert!(out.actions.is_empty());
        assert_eq!(Stats::get(&c.stats().rx_lost), 5);
    }

    /// A lost eager message delivered twice counts one error for the loss
    /// and one for the duplicate; one with messages coalesced behind it
    /// gives its peer up, since they can never be matched in order.
    #[test]
    fn a_lost_duplicate_and_a_lost_coalesced_run() {
        crate::log::QUIET.with(|q| q.set(true));
        let (mut c, peers) = crate::proto::test_core::net_core("udp;ofi_rxd", &[2, 3]);
        let lost = |c: &mut crate::proto::Core, sender: u64, flags: u8| {
            let mut h = Header::new(Kind::Eager);
            h.sender = sender;
            h.flags = flags;
            h.len = 3000;
            let mut b = vec![0u8; 64];
            h.encode(&mut b);
            let mut out = Out::new();
            c.on_rx_error(RailId(0), RxSlot(1), false, "test", &b, &mut out);
        };
        lost(&mut c, 2, 0);
        lost(&mut c, 2, 0);
        assert_eq!(Stats::get(&c.stats().errors), 2);
        assert_eq!(Stats::get(&c.stats().unexpected_now.now), 1, "queued once");
        assert!(!c.peers[peers[0].index()].lost);
        lost(&mut c, 3, crate::wire::FLAG_MORE);
        assert!(c.peers[peers[1].index()].lost, "the peer is given up");
        assert!(!c.peers[peers[0].index()].lost, "no other");
    }
}
