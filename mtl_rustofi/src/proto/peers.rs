//! Peers, incoming packets and per-peer ordering.
//!
//! Matchable messages (eager and RTS) carry a per-peer sequence number; a
//! [`Reorder`] per peer releases them in send order whatever order the
//! provider delivers them in, which keeps MPI's non-overtaking rule.

use super::action::{Action, Event, Out, Status};
use super::coalesce::Bundle;
use super::ids::{Cookie, FiAddr, PeerId, RailId, RxSlot};
use super::{rail_bytes, Core, CoreError, Stats};
use crate::config::Fault;
use crate::matching::Envelope;
use crate::order::Reorder;
use crate::wire::{self, EagerHead, EagerMsg, Header, Kind, RailKind};

/// A matchable message that arrived before its predecessors.
pub(super) struct Held {
    pub(super) hdr: Header,
    pub(super) data: Vec<u8>,
    /// The provider lost the message; only its header arrived.
    pub(super) lost: bool,
}

pub(super) struct Peer {
    /// The rail this peer is reached through.
    pub(super) rail: RailId,
    /// Its address in that rail's address vector.
    pub(super) addr: FiAddr,
    /// Its stripe endpoints, by stripe index: our stripe rail and its
    /// address there ([`super::stripe`]).
    pub(super) stripes: Vec<(RailId, FiAddr)>,
    /// Packets to this peer handed over (or queued) and not yet reported.
    pub(super) inflight: u32,
    /// Packet bytes handed over for it so far (liveness: how much may
    /// wait unread in its transport).
    pub(super) tx_bytes: u64,
    /// Eager messages being coalesced into one packet.
    pub(super) bundle: Option<Bundle>,
    /// Never send an eager packet larger than the peer's buffers.
    pub(super) eager_limit: usize,
    /// One more than the largest payload that may go inline at once
    /// ([`Core::inline_at_once`]), 0 if none may: its rail's `inline` and
    /// `inject_size` and `eager_limit`, which never change once the peer
    /// is added, folded into one compare for every send. A `u32`, so that
    /// it fits the struct's padding: a larger size made every index into
    /// the peers cost an instruction more. At most `u32::MAX` (a payload
    /// of 4 GiB or more takes the general path, which sends it as well).
    pub(super) inline_below: u32,
    pub(super) tx_seq: u32,
    pub(super) order: Reorder<Held>,
    /// Nothing more can be exchanged with it (a packet to it failed for
    /// good, or the runtime said it is gone): sends to it fail at once.
    pub(super) lost: bool,
    /// This rank cannot read the peer's memory, though the peer's rail
    /// may (the own rail where cross-memory attach is not permitted here,
    /// or does not reach that process): a read rendezvous from it is
    /// answered as a message rendezvous ([`Core::set_peer_unreadable`]).
    pub(super) no_read: bool,
}

impl Peer {
    pub(super) fn has_bundle(&self) -> bool {
        self.bundle.is_some()
    }
}

impl Core {
    /// Adds (or finds) a peer by process name. `rail` and `addr` are where
    /// the driver inserted its published address; `max_eager` the largest
    /// eager payload its receive buffers hold.
    pub(crate) fn add_peer(
        &mut self,
        name: u64,
        rail: RailId,
        addr: FiAddr,
        max_eager: usize,
    ) -> PeerId {
        if let Some(&p) = self.by_name.get(&name) {
            return p;
        }
        let id = PeerId(self.peers.len() as u32);
        let r = &mut self.rails[rail.index()];
        r.peers += 1;
        tracing::info!(peer = id.0, name, rail = ?r.profile.kind, "peer added");
        match r.profile.kind {
            RailKind::Net => Stats::add(&self.stats.net_peers, 1),
            RailKind::Shm | RailKind::Local => Stats::add(&self.stats.shm_peers, 1),
            // A stripe rail is never a peer's own rail.
            RailKind::Stripe => {}
        }
        let eager_limit = r.profile.eager_limit.min(max_eager);
        // `BASE_LEN + len <= inject_size && len <= eager_limit`, as a bound.
        let inline_below = match r.profile.inject_size.checked_sub(wire::BASE_LEN) {
            Some(room) if r.profile.inline => {
                u32::try_from(room.min(eager_limit) + 1).unwrap_or(u32::MAX)
            }
            _ => 0,
        };
        self.peers.push(Peer {
            rail,
            addr,
            stripes: Vec::new(),
            inflight: 0,
            tx_bytes: 0,
            bundle: None,
            eager_limit,
            inline_below,
            tx_seq: 0,
            order: Reorder::new(),
            lost: false,
            no_read: false,
        });
        self.by_name.insert(name, id);
        id
    }

    /// Records that this rank cannot read `peer`'s memory: its read
    /// rendezvous are answered with a grant for data packets, which a
    /// sender waiting for the read's FIN takes as well. Ranks of one host
    /// may differ here (a seccomp profile per container, a PID namespace
    /// per rank), and each side knows only its own reach.
    pub(crate) fn set_peer_unreadable(&mut self, peer: PeerId) {
        self.peers[peer.index()].no_read = true;
    }

    /// The peer of a name, if added.
    pub(crate) fn peer_by_name(&self, name: u64) -> Option<PeerId> {
        self.by_name.get(&name).copied()
    }

    pub(super) fn check_peer(&self, peer: PeerId) -> Result<(), CoreError> {
        match self.peers.get(peer.index()) {
            None => Err(CoreError(format!("send to unknown peer {}", peer.0))),
            Some(p) if p.lost => Err(CoreError(format!(
                "send to peer {} which can no longer be reached",
                peer.0
            ))),
            Some(_) => Ok(()),
        }
    }

    /// The peer can no longer be reached: every request that waits for it
    /// (receives posted for exactly this source included) fails now, or
    /// when its last operation in flight is reported.
    pub(crate) fn peer_lost(&mut self, peer: PeerId, out: &mut Out) {
        let Some(p) = self.peers.get_mut(peer.index()) else {
            return;
        };
        if p.lost {
            return;
        }
        p.lost = true;
        self.any_lost = true;
        // Messages held behind a missing predecessor from this peer can
        // never be delivered.
        p.order.drop_held();
        self.count_error();
        self.error(&format!(
            "peer {} can no longer be reached; its pending transfers fail",
            peer.0
        ));
        self.flow_peer_lost(peer, out);
        if let Some(b) = self.peers[peer.index()].bundle.take() {
            let rail = self.peers[peer.index()].rail;
            for req in b.reqs {
                out.events.push(Event::Send {
                    req,
                    status: Status::Failed,
                });
            }
            self.recycle_tx(rail, b.buf, out);
        }
        let syncs: Vec<_> = self
            .sync_wait
            .iter()
            .filter(|(_, &(_, p))| p == peer)
            .map(|(&c, _)| c)
            .collect();
        for c in syncs {
            if let Some((req, _)) = self.sync_wait.remove(&c) {
                out.events.push(Event::Send {
                    req,
                    status: Status::Failed,
                });
            }
        }
        self.rndv_fail_peer(peer, out);
        self.fail_posted_of(peer, out);
        self.drop_queued_packets_of(peer, out);
        self.note_lost(peer);
    }

    /// A packet arrived in receive buffer `slot` of `rail`; the buffer is
    /// reposted once it has been handled (not on an `rx_kept` rail).
    /// Inlined, with the parsing of the packet, into the driver's loops
    /// over the rings and the completion queues: one call less per packet.
    #[inline(always)]
    pub(crate) fn on_packet(&mut self, rail: RailId, slot: RxSlot, pkt: &[u8], out: &mut Out) {
        // One look at the rail for the counter, the failing slot and the
        // repost.
        let r = &mut self.rails[rail.index()];
        let repost = !r.profile.rx_kept;
        if !r.rx_failing.is_empty() {
            r.rx_failing.remove(&slot);
        }
        Stats::bump(
            rail_bytes(&self.stats, r.profile.kind, false),
            pkt.len() as u64,
        );
        self.handle_packet(pkt, out);
        if repost {
            out.actions.push(Action::PostRecv { rail, slot });
        }
    }

    /// A packet read from a ring of the own shared-memory rail (`rail`):
    /// what [`Self::on_packet`] does, without its look at the rail. That
    /// rail's one receive slot is never reposted (`rx_kept`) and never
    /// fails (its post is a no-op), and its bytes count as `shm_rx_bytes`.
    #[inline(always)]
    pub(crate) fn on_ring_packet(&mut self, rail: RailId, pkt: &[u8], out: &mut Out) {
        debug_assert!({
            let r = &self.rails[rail.index()];
            r.profile.kind == RailKind::Local && r.profile.rx_kept && r.rx_failing.is_empty()
        });
        Stats::bump(&self.stats.shm_rx_bytes, pkt.len() as u64);
        self.handle_packet(pkt, out);
    }

    /// An eager message read from a ring of the own shared-memory rail in
    /// the ring's short format, which the driver has decoded (`head`, its
    /// sender the ring's peer): what [`Self::on_ring_packet`] does for the
    /// same message in base format. Its bytes count as that packet's.
    #[inline(always)]
    pub(crate) fn on_ring_eager(
        &mut self,
        rail: RailId,
        head: &EagerHead,
        payload: &[u8],
        out: &mut Out,
    ) {
        debug_assert!(self.rails[rail.index()].profile.kind == RailKind::Local);
        Stats::bump(
            &self.stats.shm_rx_bytes,
            (wire::BASE_LEN + payload.len()) as u64,
        );
        self.stall.moved = true;
        let env = Envelope {
            ctx: head.ctx,
            src: head.src,
            tag: head.tag,
        };
        let header = || head.header(payload.len());
        self.take_eager(head.sender, head.seq, env, None, payload, header, out);
    }

    /// Parses one packet (one message, or several coalesced eager
    /// messages) and acts on each message. Inlined into
    /// [`Self::on_packet`] and [`Self::on_ring_packet`].
    #[inline(always)]
    fn handle_packet(&mut self, pkt: &[u8], out: &mut Out) {
        // The common packet, one well-formed eager message (or a coalesced
        // run that starts with one), has its first message read in place
        // before the loop below. An eager message is movement for the
        // stall watch.
        if let Some((msg, n)) = EagerMsg::parse(pkt) {
            self.stall.moved = true;
            self.handle_eager(msg, out);
            if n < pkt.len() {
                self.handle_messages(pkt, n, out);
            }
            return;
        }
        if pkt.is_empty() {
            self.count_error();
            self.error("dropped an empty packet");
            return;
        }
        // Probes travel alone; anything else is movement for the stall
        // watch.
        if !matches!(pkt.get(1).copied(), Some(k) if k == Kind::Ping as u8 || k == Kind::Pong as u8)
        {
            self.stall.moved = true;
        }
        self.handle_messages(pkt, 0, out);
    }

    /// Acts on the messages of `pkt` from offset `off` on.
    #[inline(never)]
    fn handle_messages(&mut self, pkt: &[u8], mut off: usize, out: &mut Out) {
        while off < pkt.len() {
            let rest = &pkt[off..];
            // The common message, a well-formed eager one, is read in
            // place; anything else goes through the full decoder, which
            // also says what is wrong with a malformed message.
            if let Some((msg, n)) = EagerMsg::parse(rest) {
                self.handle_eager(msg, out);
                off += n;
                continue;
            }
            match Header::decode_prefix(rest) {
                Ok((hdr, n)) => {
                    self.handle_message(hdr, &rest[..n], out);
                    off += n;
                }
                Err(e) => {
                    self.count_error();
                    self.error(&format!(
                        "dropped a malformed packet ({} bytes at offset {off} of {}): {e}",
                        pkt.len() - off,
                        pkt.len()
                    ));
                    return;
                }
            }
        }
    }

    /// The peer that sent a message, by its sender's name.
    #[inline]
    pub(super) fn sender_peer(&mut self, name: u64) -> Option<PeerId> {
        match self.last_sender {
            Some((n, p)) if n == name => Some(p),
            _ => {
                let p = *self.by_name.get(&name)?;
                self.last_sender = Some((name, p));
                Some(p)
            }
        }
    }

    /// Acts on one eager message: what [`Self::handle_message`] does for
    /// it, reading its fields in place. Inlined into the packet's fast
    /// path.
    #[inline(always)]
    fn handle_eager(&mut self, msg: EagerMsg<'_>, out: &mut Out) {
        let env = Envelope {
            ctx: msg.ctx(),
            src: msg.src(),
            tag: msg.tag(),
        };
        let sync = sync_cookie(msg.flags(), msg.cookie());
        let header = || msg.header();
        self.take_eager(
            msg.sender(),
            msg.seq(),
            env,
            sync,
            msg.payload(),
            header,
            out,
        );
    }

    /// An eager message from process `sender`, in either format: matched
    /// at once if it is next in its peer's order, else held until its
    /// predecessors have come (`header` builds the whole header then).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn take_eager(
        &mut self,
        sender: u64,
        seq: u32,
        env: Envelope,
        sync: Option<Cookie>,
        payload: &[u8],
        header: impl FnOnce() -> Header,
        out: &mut Out,
    ) {
        let Some(peer) = self.sender_peer(sender) else {
            self.unknown_sender(Kind::Eager, sender);
            return;
        };
        self.heard_from(peer);
        if self.peers[peer.index()].order.take_in_order(seq) {
            // In order: match straight out of the bounce buffer.
            self.on_eager(peer, env, sync, payload, out);
            return;
        }
        let _ = self.hold(peer, header(), payload, false, out);
    }

    /// Acts on one message; `msg` holds exactly its header and payload.
    fn handle_message(&mut self, hdr: Header, msg: &[u8], out: &mut Out) {
        let Some(peer) = self.sender_peer(hdr.sender) else {
            self.unknown_sender(hdr.kind, hdr.sender);
            return;
        };
        self.heard_from(peer);
        match hdr.kind {
            Kind::Eager | Kind::Rts => {
                let payload = &msg[hdr.wire_len()..];
                let p = &mut self.peers[peer.index()];
                if p.order.take_in_order(hdr.seq) {
                    // In order: match straight out of the bounce buffer.
                    self.on_matchable(peer, &hdr, payload, out);
                    return;
                }
                let _ = self.hold(peer, hdr, payload, false, out);
            }
            Kind::SyncAck => self.on_sync_ack(&hdr, out),
            Kind::Fin | Kind::Cts | Kind::Data
                if self.fault == Fault::LoseWhole && self.lose_whole_injected(&hdr) =>
            {
                self.count_error();
                self.error(&format!(
                    "dropped a {:?} packet of {} bytes (fault_inject lose_whole)",
                    hdr.kind,
                    msg.len()
                ));
            }
            Kind::Fin => self.on_fin(peer, &hdr, out),
            Kind::Cts if has(&hdr, wire::FLAG_RESEND) => self.on_resend_request(peer, &hdr, out),
            Kind::Cts if has(&hdr, wire::FLAG_RNDV_MSG) => self.on_cts_msg(peer, &hdr, out),
            Kind::Cts => self.on_cts(peer, &hdr, out),
            Kind::Data if self.fault == Fault::LoseData && self.lose_injected() => {
                self.packet_lost(
                    &msg[..hdr.wire_len()],
                    "injected loss (fault_inject lose_data)",
                    out,
                );
            }
            Kind::Data => self.on_data(peer, &hdr, &msg[hdr.wire_len()..], out),
            Kind::Ping => self.on_ping(peer, out),
            Kind::Pong => self.on_pong(peer),
        }
    }

    /// A matchable message from `peer` that is not the next in order:
    /// held until its predecessors are here (then it and every held one
    /// that follows are matched), or dropped as a duplicate (false). Out
    /// of line: a transport that keeps order never comes here.
    #[cold]
    pub(super) fn hold(
        &mut self,
        peer: PeerId,
        hdr: Header,
        payload: &[u8],
        lost: bool,
        out: &mut Out,
    ) -> bool {
        let mut ready = Vec::new();
        let seq = hdr.seq;
        let held = Held {
            hdr,
            data: payload.to_vec(),
            lost,
        };
        if self.peers[peer.index()]
            .order
            .accept(seq, held, &mut ready)
            .is_err()
        {
            self.count_error();
            self.error(&format!("dropped a duplicate packet (seq {seq})"));
            return false;
        }
        for h in ready {
            if h.lost {
                self.on_lost_matchable(peer, &h.hdr, out);
            } else {
                self.on_matchable(peer, &h.hdr, &h.data, out);
            }
        }
        true
    }

    /// A message from a process that is not a peer is dropped.
    #[cold]
    fn unknown_sender(&self, kind: Kind, name: u64) {
        self.count_error();
        self.error(&format!(
            "dropped a {kind:?} packet from unknown process 0x{name:x}"
        ));
    }

    /// The next header of a matchable message to `peer`, with its sequence
    /// number taken.
    pub(super) fn matchable_header(
        &mut self,
        peer: PeerId,
        kind: Kind,
        ctx: u32,
        src: i32,
        tag: i32,
        len: usize,
    ) -> Header {
        let mut hdr = self.header(kind);
        let p = &mut self.peers[peer.index()];
        hdr.seq = p.tx_seq;
        p.tx_seq = p.tx_seq.wrapping_add(1);
        hdr.ctx = ctx;
        hdr.src = src;
        hdr.tag = tag;
        hdr.len = len as u64;
        hdr
    }
}

/// Whether a header carries a flag.
pub(super) fn has(hdr: &Header, flag: u8) -> bool {
    hdr.flags & flag != 0
}

/// The flag set of a synchronous send.
const SYNC: u8 = wire::FLAG_SYNC;

/// The cookie to acknowledge a matchable message's match with, if its
/// flags make it a synchronous send.
#[inline]
pub(super) fn sync_cookie(flags: u8, cookie: u64) -> Option<Cookie> {
    (flags & SYNC != 0).then_some(Cookie(cookie))
}
