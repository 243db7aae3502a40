//! A posted receive buffer that the provider completed with an error.
//!
//! The rails are reliable, so such an error means a packet is gone: the
//! provider consumed it and did not deliver it whole. `udp;ofi_rxd`
//! reports `FI_ETRUNC` for a message whose segments it did not assemble,
//! with the bytes it did place in the buffer. When those bytes hold the
//! packet's header, the loss is named: a data packet of a message
//! rendezvous is asked for again (see [`super::rndv_msg`]), and anything
//! else is reported with its kind and sender, so that whatever then waits
//! for it is not a mystery. The buffer is posted again either way.

use super::action::Out;
use super::ids::{RailId, RxSlot};
use super::{Core, Stats};
use crate::wire::{Header, Kind};

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
        self.error(&format!(
            "receive failed: {why}; lost a {:?} packet from peer {} (context {}, source {}, \
             tag {}, {} bytes)",
            hdr.kind, peer.0, hdr.ctx, hdr.src, hdr.tag, hdr.len
        ));
        false
    }
}

#[cfg(test)]
mod tests {
    use crate::proto::ids::{RailId, RxSlot};
    use crate::proto::{Action, Out, Stats};
    use crate::wire::{Header, Kind};

    /// A failed receive buffer is posted again whatever it holds; a loss
    /// that cannot be made good counts as an error, and every one counts
    /// as lost.
    #[test]
    fn a_lost_packet_is_counted_and_its_buffer_posted_again() {
        crate::log::QUIET.with(|q| q.set(true));
        let (mut c, _) = crate::proto::test_core::net_core("udp;ofi_rxd", &[2]);
        // An eager message of the peer (name 2) that lost its payload.
        let mut eager = Header::new(Kind::Eager);
        eager.sender = 2;
        eager.len = 5000;
        let mut head = vec![0u8; 100];
        eager.encode(&mut head);
        // Data of a transfer this rank does not have.
        let mut data = Header::new(Kind::Data);
        data.sender = 2;
        data.len = 4000;
        let mut stray = vec![0u8; 80];
        data.encode(&mut stray);
        let cases: [(&str, &[u8]); 5] = [
            ("nothing placed", &[]),
            ("shorter than a header", &head[..20]),
            ("not a header", &[0x55; 64]),
            ("an eager message", &head),
            ("stray data", &stray),
        ];
        for (i, (what, got)) in cases.into_iter().enumerate() {
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
            let n = i as u64 + 1;
            assert_eq!(Stats::get(&c.stats().rx_lost), n, "{what}");
            assert_eq!(Stats::get(&c.stats().errors), n, "{what}");
        }
        // A buffer cancelled at close is neither posted nor counted.
        let mut out = Out::new();
        c.on_rx_error(RailId(0), RxSlot(3), true, "closing", &head, &mut out);
        assert!(out.actions.is_empty());
        assert_eq!(Stats::get(&c.stats().rx_lost), 5);
    }
}
