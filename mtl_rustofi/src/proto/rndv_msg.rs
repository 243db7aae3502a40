//! Rendezvous by message, for rails that use neither RMA nor tagged
//! operations (libfabric's `efa-direct` has FI_MSG and FI_RMA but no
//! FI_TAGGED; a MSG-only provider has nothing else; `tagged = off` or
//! `rndv_protocol = msg` choose it anywhere).
//!
//! After the RTS matches, the receiver grants the transfer with a CTS that
//! names its slot and a token (so that a late packet of an earlier
//! transfer in the same slot is told apart) and the bytes each data packet
//! carries. The sender then sends `Data` packets, header and at most that
//! many bytes, into the receiver's ordinary bounce buffers, keeping up to
//! [`WINDOW`] of them in flight; the receiver copies each into the user
//! buffer at its offset. The receiver is done when every granted byte has
//! arrived, and then sends a FIN; the sender is done when its last packet
//! has completed and the FIN has come. Until then it keeps the buffer, so
//! that a data packet the receiving provider lost can be sent again: a
//! receive buffer that completes with an error but holds the packet's
//! header (`udp;ofi_rxd` reports `FI_ETRUNC` for a message it did not
//! assemble whole) names the piece, and the receiver asks for it with a
//! CTS carrying `FLAG_RESEND`. Failures travel as in the tagged rendezvous
//! (see [`super::abort`]): a FIN with a failed status from the receiver, a
//! FIN with `FLAG_ABORT` from the sender; a data packet that fails for
//! good loses its peer, like any packet. A packet lost whole (refused as
//! malformed) stalls the transfer until [`super::repair`] asks again.
//!
//! A grant of nothing (a receive of zero bytes) is answered with one
//! empty data packet and ends with the FIN like any other, so that a grant
//! lost on the way is repaired: a receive that ended with its grant left
//! no one to send it again.
//!
//! Nothing is registered: the data moves through the bounce buffers, which
//! suits providers whose messages are limited to about an MTU and which
//! want FI_MR_LOCAL. Receive buffers are not reserved per transfer: a packet
//! for which no buffer is posted waits in the provider (FI_RM_ENABLED).

use super::action::Out;
use super::ids::{Cookie, PeerId, RndvId};
use super::repair::{is_repair, Still};
use super::rndv::SendState;
use super::txq::AfterSend;
use super::Core;
use crate::wire::{self, Header, Kind};

/// Data packets of one transfer in flight (or queued) at a time: enough to
/// keep the pipe full, few enough that one large send does not take every
/// bounce buffer and credit from the other peers.
pub(super) const WINDOW: usize = 16;

/// Sender's progress through the granted bytes.
pub(super) struct MsgSend {
    /// Pieces sent once so far (from the first).
    next_piece: usize,
    grant: usize,
    chunk: usize,
    pub(super) slot: u32,
    pub(super) token: u64,
    /// Offsets of packets the receiver asked for again, sent before new
    /// ones, and whether a repair asked (the piece may arrive twice).
    resend: Vec<(usize, bool)>,
    /// The receiver's FIN came: every byte arrived, or the receive
    /// failed (then the send has failed too; but see `proto/repair.rs`
    /// for a failed FIN that was lost).
    pub(super) acked: bool,
    /// Packets sent and reported, for the repair's watch.
    pub(super) moves: u64,
    /// The receiver was asked for the FIN (warned once).
    pub(super) asked_fin: bool,
    pub(super) still: Still,
}

impl MsgSend {
    /// Every granted piece went out and nothing waits to be sent again.
    pub(super) fn all_sent(&self) -> bool {
        self.next_piece >= pieces(self.grant, self.chunk) && self.resend.is_empty()
    }
}

/// Pieces of a grant of `want` bytes in packets of `chunk`: a grant of
/// nothing has one, empty.
fn pieces(want: usize, chunk: usize) -> usize {
    want.div_ceil(chunk).max(1)
}

/// The piece at offset `off` of a grant of `want` bytes in packets of
/// `chunk`, if the offset starts one.
fn piece_at(off: usize, want: usize, chunk: usize) -> Option<usize> {
    (off.is_multiple_of(chunk) && off / chunk < pieces(want, chunk)).then_some(off / chunk)
}

/// Receiver's record of the data packets that arrived.
pub(super) struct MsgRecv {
    pub(super) chunk: usize,
    pub(super) got: usize,
    /// One bit per data packet (a duplicate must not count twice).
    seen: Vec<u64>,
    pub(super) still: Still,
    /// A repair asked for pieces: one may arrive twice.
    pub(super) repaired: bool,
    /// Pieces a repair asked for that have not come yet.
    pub(super) asked: usize,
}

impl MsgRecv {
    /// Whether piece `piece` arrived; with `mark`, notes that it has.
    fn seen(&mut self, piece: usize, mark: bool) -> bool {
        let bit = 1u64 << (piece % 64);
        let was = self.seen[piece / 64] & bit != 0;
        if mark {
            self.seen[piece / 64] |= bit;
        }
        was
    }

    /// Offsets of the first `max` pieces of `want` bytes not yet arrived.
    pub(super) fn missing(&self, want: usize, max: usize) -> Vec<usize> {
        (0..pieces(want, self.chunk))
            .filter(|&p| self.seen[p / 64] & (1u64 << (p % 64)) == 0)
            .take(max)
            .map(|p| p * self.chunk)
            .collect()
    }
}

impl Core {
    /// Payload bytes per data packet between this rank and `peer`. The
    /// peer's eager limit is the smaller of both ranks' limits, so both
    /// sides compute the same number, and a data packet (whose header is
    /// `EXT_LEN - BASE_LEN` bytes longer than an eager one) fits both
    /// ranks' bounce buffers. 0: the buffers leave no room for data.
    pub(super) fn data_chunk(&self, peer: PeerId) -> usize {
        let p = &self.peers[peer.index()];
        let chunk = self.rails[p.rail.index()].profile.chunk;
        (p.eager_limit + wire::BASE_LEN)
            .saturating_sub(wire::EXT_LEN)
            .min(chunk)
    }

    /// The receiver grants the whole (clipped) message.
    pub(super) fn grant_msg(&mut self, id: RndvId, out: &mut Out) {
        let Some(r) = self.rndv_recv.get(id) else {
            return;
        };
        let (peer, want, token, cookie) = (r.peer, r.want, r.tag_base, r.cookie);
        let chunk = self.data_chunk(peer).max(1);
        let r = self.rndv_recv.get_mut(id).expect("present");
        r.msg = Some(MsgRecv {
            chunk,
            got: 0,
            seen: vec![0; pieces(want, chunk).div_ceil(64)],
            still: Still::default(),
            repaired: false,
            asked: 0,
        });
        r.cts_sent = true;
        let mut cts = self.header(Kind::Cts);
        cts.flags |= wire::FLAG_RNDV_MSG;
        cts.ctx = id.0;
        cts.ext0 = token;
        self.send_grant(peer, cts, cookie, want, chunk, out);
    }

    /// The receiver granted the data: start sending packets. A repair's
    /// grant is taken if the first was lost, and otherwise dropped.
    pub(super) fn on_cts_msg(&mut self, peer: PeerId, hdr: &Header, out: &mut Out) {
        let cookie = Cookie(hdr.cookie);
        let ours = self.data_chunk(peer);
        let repair = is_repair(hdr);
        let Some(s) = self.rndv_send.get_mut(&cookie) else {
            if repair {
                self.repair_gone_send(peer, cookie, out);
            } else {
                self.error("dropped a rendezvous grant for no pending send");
            }
            return;
        };
        if repair && s.failed && s.peer == peer {
            self.repair_gone_send(peer, cookie, out);
            return;
        }
        if s.state != SendState::AwaitReply || s.peer != peer {
            if !repair {
                self.error("dropped a duplicate rendezvous grant");
            }
            return;
        }
        s.state = SendState::Sending;
        let chunk = hdr.len as usize;
        if chunk == 0 || chunk > ours {
            self.count_error();
            self.error(&format!(
                "the receiver asked for data packets of {chunk} bytes; at most {ours} fit"
            ));
            self.abort_send(cookie, true, out);
            self.finish_rndv_send(cookie, true, out);
            return;
        }
        let grant = (hdr.ext1 as usize).min(s.buf.len());
        s.msg = Some(MsgSend {
            next_piece: 0,
            grant,
            chunk,
            slot: hdr.ctx,
            token: hdr.ext0,
            resend: Vec::new(),
            acked: false,
            moves: 0,
            asked_fin: false,
            still: Still::default(),
        });
        self.pump_data(cookie, out);
    }

    /// The receiver asks for the data packet at offset `ext1` again. A
    /// repair's request may cross the FIN, the grant it repeats, or the
    /// piece's first sending: then there is nothing to do.
    pub(super) fn on_resend_request(&mut self, peer: PeerId, hdr: &Header, out: &mut Out) {
        let cookie = Cookie(hdr.cookie);
        let off = hdr.ext1 as usize;
        let repair = is_repair(hdr);
        let Some(s) = self.rndv_send.get_mut(&cookie).filter(|s| s.peer == peer) else {
            if repair {
                self.repair_gone_send(peer, cookie, out);
            } else {
                self.error("dropped a request to resend rendezvous data for no pending send");
            }
            return;
        };
        if s.failed {
            if repair {
                self.repair_gone_send(peer, cookie, out);
            }
            // The receiver is told, or tells us, that the transfer failed.
            return;
        }
        let Some(m) = s.msg.as_mut().filter(|m| m.token == hdr.ext0) else {
            if !repair {
                self.error("dropped a request to resend rendezvous data of another transfer");
            }
            return;
        };
        if m.acked {
            // Overtaken by the FIN (or a duplicate): every byte arrived.
            return;
        }
        let piece = piece_at(off, m.grant, m.chunk);
        let sent = piece.is_some_and(|p| p < m.next_piece);
        if repair && piece.is_some() && !sent {
            // Not sent yet: it goes out in its turn.
            return;
        }
        if !sent {
            let chunk = m.chunk;
            self.count_error();
            self.error(&format!(
                "dropped a request to resend rendezvous data at offset {off}, which was \
                 never sent in packets of {chunk}"
            ));
            return;
        }
        match m.resend.iter_mut().find(|(o, _)| *o == off) {
            Some(queued) => queued.1 |= repair,
            None => m.resend.push((off, repair)),
        }
        self.pump_data(cookie, out);
    }

    /// The receiver's FIN of a message rendezvous: every byte arrived.
    pub(super) fn msg_acked(&mut self, cookie: Cookie, out: &mut Out) {
        if let Some(m) = self.rndv_send.get_mut(&cookie).and_then(|s| s.msg.as_mut()) {
            m.acked = true;
            m.resend.clear();
        }
        self.pump_data(cookie, out);
    }

    /// Sends data packets while the window allows (pieces asked for again
    /// first); finishes the send when nothing is left in flight and either
    /// the receiver's FIN came or the send failed.
    fn pump_data(&mut self, cookie: Cookie, out: &mut Out) {
        loop {
            let Some(s) = self.rndv_send.get_mut(&cookie) else {
                return;
            };
            let Some(m) = s.msg.as_mut() else {
                return;
            };
            if s.failed || m.all_sent() || s.outstanding >= WINDOW {
                break;
            }
            let (off, again) = match m.resend.pop() {
                Some(r) => r,
                None => {
                    let off = m.next_piece * m.chunk;
                    m.next_piece += 1;
                    (off, false)
                }
            };
            let n = (m.grant - off).min(m.chunk);
            m.moves += 1;
            s.outstanding += 1;
            let (peer, piece, slot, token) = (s.peer, s.buf.sub(off, n), m.slot, m.token);
            let mut hdr = self.header(Kind::Data);
            hdr.ctx = slot;
            hdr.cookie = cookie.0;
            hdr.len = n as u64;
            hdr.ext0 = off as u64;
            hdr.ext1 = token;
            if again {
                hdr.flags |= wire::FLAG_REPAIR;
            }
            let rail = self.peers[peer.index()].rail;
            let mut b = self.take_tx(rail, out);
            let at = hdr.encode(&mut b.mem);
            piece.read_into(&mut b.mem[at..]);
            self.send_packet(peer, b, at + n, None, AfterSend::Data(cookie), out);
        }
        let Some(s) = self.rndv_send.get(&cookie) else {
            return;
        };
        let all_arrived = s.msg.as_ref().is_some_and(|m| m.acked);
        if s.outstanding == 0 && (s.failed || all_arrived) {
            let failed = s.failed;
            self.finish_rndv_send(cookie, failed, out);
        }
    }

    /// A data packet of the send `cookie` was reported.
    pub(super) fn data_sent(&mut self, cookie: Cookie, failed: bool, out: &mut Out) {
        let Some(s) = self.rndv_send.get_mut(&cookie) else {
            return;
        };
        s.outstanding -= 1;
        s.failed |= failed;
        if let Some(m) = s.msg.as_mut() {
            m.moves += 1;
        }
        self.pump_data(cookie, out);
    }

    /// The pending receive a data packet from `peer` names (its slot and
    /// the receiver's token), unless it failed meanwhile.
    fn data_target(&mut self, peer: PeerId, hdr: &Header) -> Option<&mut super::rndv::RecvRndv> {
        self.rndv_recv
            .get_mut(RndvId(hdr.ctx))
            .filter(|r| r.peer == peer && r.tag_base == hdr.ext1 && !r.failed)
    }

    /// A data packet arrived: copy it into place.
    pub(super) fn on_data(&mut self, peer: PeerId, hdr: &Header, payload: &[u8], out: &mut Out) {
        let id = RndvId(hdr.ctx);
        let Some(r) = self.data_target(peer, hdr) else {
            // A duplicate of the last packet, a piece sent again that
            // arrived after all, or data of a transfer that failed
            // meanwhile.
            if !is_repair(hdr) {
                self.error("dropped a rendezvous data packet for no pending receive");
            }
            return;
        };
        let Some(m) = r.msg.as_mut() else {
            self.error("dropped a rendezvous data packet for a transfer of another kind");
            return;
        };
        let off = hdr.ext0 as usize;
        let piece =
            piece_at(off, r.want, m.chunk).filter(|_| payload.len() == (r.want - off).min(m.chunk));
        let Some(piece) = piece else {
            let why = format!(
                "rendezvous data of {} bytes at offset {off} does not fit a grant of {} \
                 bytes in packets of {}; the receive fails",
                payload.len(),
                r.want,
                m.chunk
            );
            self.count_error();
            self.error(&why);
            self.abort_recv(id, true, out);
            self.finish_rndv_recv(id, out);
            return;
        };
        if m.seen(piece, true) {
            if !m.repaired {
                self.error("dropped a duplicate rendezvous data packet");
            }
            return;
        }
        m.got += payload.len();
        r.buf.sub(off, payload.len()).write(payload);
        if m.got == r.want {
            self.finish_rndv_recv(id, out);
        } else if is_repair(hdr) && m.asked > 0 {
            m.asked -= 1;
            if m.asked == 0 {
                self.ask_missing(id, out);
            }
        }
    }

    /// A data packet from `peer` whose receive failed in the provider
    /// with only `hdr` readable: unless the piece arrived meanwhile, the
    /// sender is asked for it again. False if it is no piece of a pending
    /// transfer (whole, [`Self::on_data`] would drop it too).
    pub(super) fn on_damaged_data(&mut self, peer: PeerId, hdr: &Header, out: &mut Out) -> bool {
        let id = RndvId(hdr.ctx);
        let Some(r) = self.data_target(peer, hdr) else {
            return false;
        };
        let want = r.want;
        let Some(m) = r.msg.as_mut() else {
            return false;
        };
        let off = hdr.ext0 as usize;
        let Some(piece) = piece_at(off, want, m.chunk) else {
            return false;
        };
        if m.seen(piece, false) {
            return true;
        }
        self.send_msg_cts(id, wire::FLAG_RESEND, off, out);
        true
    }

    /// Sends the sender of the receive `id` a CTS of the message
    /// rendezvous with `flags`: with `FLAG_RESEND` a request for the
    /// piece at offset `at`, else a grant of `at` bytes.
    pub(super) fn send_msg_cts(&mut self, id: RndvId, flags: u8, at: usize, out: &mut Out) {
        let Some(r) = self.rndv_recv.get(id) else {
            return;
        };
        let Some(m) = r.msg.as_ref() else {
            return;
        };
        let mut cts = self.header(Kind::Cts);
        cts.flags |= wire::FLAG_RNDV_MSG | flags;
        cts.ctx = id.0;
        cts.cookie = r.cookie.0;
        cts.ext0 = r.tag_base;
        cts.ext1 = at as u64;
        cts.len = m.chunk as u64;
        let peer = r.peer;
        self.send_ctrl(peer, &cts, out);
    }
}
