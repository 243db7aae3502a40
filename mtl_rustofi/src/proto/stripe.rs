//! Striping a read rendezvous over several NICs.
//!
//! Besides the rail of its own NIC (the primary rail, which carries every
//! eager, control and RTS packet, so matching and ordering are those of a
//! single rail), a process may have stripe rails: one endpoint per other
//! equally near NIC. A peer's stripe endpoint `i` is inserted into our
//! stripe rail `i` ([`Core::add_stripe`]); a peer with fewer NICs has
//! fewer stripes.
//!
//! A read rendezvous of at least `CoreConfig::stripe_min` bytes to a peer
//! with stripes registers the sender's buffer on the primary rail and on
//! each stripe rail, one after the other, and names every registration in
//! the RTS ([`crate::wire::Stripes`]). The receiver pairs them with its
//! own stripes of that peer (registering its buffer on each rail that
//! needs local registration) and spreads its reads round-robin over the
//! lanes both sides have. A failed read on any lane fails the transfer
//! through the usual abort. Only the read rendezvous stripes: the send
//! rendezvous matches tagged chunks on one endpoint pair.

use super::ids::{FiAddr, MrId, PeerId, RailId, RndvId};
use super::Core;
use crate::wire::{Header, Kind, MAX_STRIPES};

/// One lane of a striped transfer other than the primary rail.
#[derive(Clone, Copy, Debug)]
pub(super) struct Lane {
    pub(super) rail: RailId,
    pub(super) mr: Option<MrId>,
    /// Sender: the registration's key and the start of its range (RMA
    /// offsets count from it). Receiver: the sender's address and key.
    pub(super) key: u64,
    pub(super) remote: u64,
}

impl Core {
    /// Adds the peer's stripe endpoint `index` (0-based, in its published
    /// order), inserted into our stripe rail `rail` at `addr`. Stripes are
    /// added in order; a gap ends the peer's usable stripes.
    pub(crate) fn add_stripe(&mut self, peer: PeerId, index: usize, rail: RailId, addr: FiAddr) {
        let Some(p) = self.peers.get_mut(peer.index()) else {
            return;
        };
        if p.stripes.len() != index || index >= MAX_STRIPES {
            return;
        }
        p.stripes.push((rail, addr));
        // The rail must be polled: reads complete on it, and a provider
        // with manual progress serves the peer's reads only when polled.
        self.rails[rail.index()].peers += 1;
    }

    /// The peer's address on `rail` (its primary rail or one of its
    /// stripes).
    pub(super) fn peer_addr(&self, peer: PeerId, rail: RailId) -> FiAddr {
        let p = &self.peers[peer.index()];
        if p.rail == rail {
            return p.addr;
        }
        p.stripes
            .iter()
            .find(|s| s.0 == rail)
            .map_or(p.addr, |s| s.1)
    }

    /// The stripe lanes a read rendezvous of `len` bytes to `peer` uses
    /// (none below the threshold, or when the striped RTS would not fit
    /// our or the peer's packet buffers).
    pub(super) fn send_lanes(&self, peer: PeerId, len: usize) -> Vec<Lane> {
        let p = &self.peers[peer.index()];
        if self.cfg.stripe_min == 0 || len < self.cfg.stripe_min || p.stripes.is_empty() {
            return Vec::new();
        }
        let room = self.rails[p.rail.index()]
            .profile
            .buf_size
            .min(p.eager_limit + crate::wire::BASE_LEN);
        let fit = (room.saturating_sub(crate::wire::EXT_LEN + 8)) / 16;
        p.stripes
            .iter()
            .take(fit)
            .map(|&(rail, _)| Lane {
                rail,
                mr: None,
                key: 0,
                remote: 0,
            })
            .collect()
    }

    /// The receiver's lanes for a striped RTS: the sender's stripes paired
    /// with ours of that peer.
    pub(super) fn recv_lanes(&self, peer: PeerId, hdr: &Header) -> Vec<Lane> {
        if hdr.kind != Kind::Rts || !super::peers::has(hdr, crate::wire::FLAG_STRIPE) {
            return Vec::new();
        }
        self.peers[peer.index()]
            .stripes
            .iter()
            .zip(hdr.stripes.as_slice())
            .map(|(&(rail, _), &(remote, key))| Lane {
                rail,
                mr: None,
                key,
                remote,
            })
            .collect()
    }

    /// The lane of a receive-side rendezvous next to register its buffer
    /// (a rail that needs local registration and has none yet).
    pub(super) fn next_recv_lane_to_register(&self, id: RndvId) -> Option<usize> {
        let r = self.rndv_recv.get(id)?;
        r.lanes
            .iter()
            .position(|l| l.mr.is_none() && self.rails[l.rail.index()].profile.mr_local)
    }
}
