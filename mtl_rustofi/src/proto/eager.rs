//! Eager messages: the payload travels in the packet with its header.
//! Small ones are copied into a bounce buffer (the send completes as the
//! provider takes the packet, [`super::held`]);
//! from `ZERO_COPY_MIN` bytes, where the rail allows it, the payload goes
//! from the user's buffer and the send completes with the transmit.
//! Synchronous sends always copy and complete on the receiver's ack.
//! While the peer's send queue is full ([`super::flow`]) a send waits,
//! uncopied and incomplete, until room is made.

use super::action::{Action, Event, InlineHead, Out, PostError, Status};
use super::held::Carried;
use super::ids::{Cookie, FiAddr, PeerId, RailId, ReqId};
use super::peers::Peer;
use super::recv::PostedRecv;
use super::txq::AfterSend;
use super::{rail_bytes, Core, CoreError, Stats};
use crate::config::Fault;
use crate::matching::Envelope;
use crate::usermem::UserBuf;
use crate::wire::{self, EagerHead, Header, Kind};
use std::sync::atomic::AtomicU64;

/// Eager payloads at least this large are sent from the user's buffer
/// where the rail needs no registered memory; smaller ones are copied,
/// which lets the request complete as the provider takes the packet
/// ([`super::held`]) and costs less than waiting for the transmit.
pub(super) const ZERO_COPY_MIN: usize = 8192;

/// An MPI send as the core receives it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendArgs {
    pub(crate) peer: PeerId,
    pub(crate) ctx: u32,
    /// The sender's rank in the communicator.
    pub(crate) src: i32,
    pub(crate) tag: i32,
    pub(crate) buf: UserBuf,
    /// MPI_Ssend semantics.
    pub(crate) sync: bool,
    pub(crate) req: ReqId,
}

/// Writes an eager message (header, then the user's payload) into `mem`
/// at `at`; returns the offset after it.
pub(super) fn put_eager(mem: &mut [u8], at: usize, hdr: &Header, buf: &UserBuf) -> usize {
    let start = at + hdr.encode(&mut mem[at..]);
    buf.read_into(&mut mem[start..]);
    start + buf.len()
}

/// How a send started ([`Core::send_or_defer`]; the tests' `Core::send`).
#[must_use = "an inline packet must be executed and its send completed"]
#[derive(Debug)]
pub(crate) enum Sent {
    /// Queued, sent or deferred through `Out` as usual.
    Out,
    /// A small eager packet for the caller to hand to the driver at once,
    /// after the actions already in `Out` (see [`InlineSend`]).
    Inline(InlineSend),
}

/// A small eager send that the driver copies at post (what
/// [`Action::SendInline`] carries), given straight back to the caller of
/// a send ([`Core::send_at_once`], or [`Core::send_or_defer`] as
/// [`Sent::Inline`]) rather than queued: the engine writes it into the
/// ring on the spot, and the send is complete for MPI once the driver took it
/// (a refused one goes back to [`Core::on_inline_refused`], which copies
/// it into a bounce buffer, and completes as a copied send does).
/// Neither `Copy` nor `Clone`: each one is executed exactly once.
#[must_use = "an inline packet must be executed and its send completed"]
#[derive(Debug)]
pub(crate) struct InlineSend {
    pub(crate) rail: RailId,
    pub(crate) peer: PeerId,
    pub(crate) dest: FiAddr,
    /// Its header, encoded by whoever writes the packet.
    pub(crate) head: EagerHead,
    pub(crate) payload: UserBuf,
    pub(crate) req: ReqId,
}

impl InlineSend {
    /// The inline packet of `s` to `p`, from `sender`: takes the message's
    /// sequence number and counts its bytes, the peer's and its rail's
    /// (`rail_tx`).
    #[inline]
    fn take(s: &SendArgs, p: &mut Peer, rail_tx: &AtomicU64, sender: u64) -> InlineSend {
        let n = (wire::BASE_LEN + s.buf.len()) as u64;
        let head = EagerHead {
            ctx: s.ctx,
            src: s.src,
            tag: s.tag,
            seq: p.tx_seq,
            sender,
        };
        p.tx_seq = p.tx_seq.wrapping_add(1);
        p.tx_bytes = p.tx_bytes.wrapping_add(n);
        Stats::bump(rail_tx, n);
        InlineSend {
            rail: p.rail,
            peer: s.peer,
            dest: p.addr,
            head,
            payload: s.buf,
            req: s.req,
        }
    }

    /// The packet's header as it goes on the wire.
    pub(crate) fn encoded_head(&self) -> InlineHead {
        let mut head: InlineHead = [0; wire::BASE_LEN];
        self.head.encode(self.payload.len(), &mut head);
        head
    }

    /// The packet as an action and its send's completion, for a caller
    /// that executes `Out` in one pass (what the core does for sends it
    /// starts by itself).
    pub(crate) fn queue(self, out: &mut Out) {
        out.actions.push(Action::SendInline {
            rail: self.rail,
            peer: self.peer,
            dest: self.dest,
            head: self.encoded_head(),
            payload: self.payload,
            req: self.req,
        });
        out.events.push(Event::Send {
            req: self.req,
            status: Status::Ok,
        });
    }
}

impl Sent {
    /// Queues an inline packet into `out` (see [`InlineSend::queue`]).
    pub(crate) fn into_out(self, out: &mut Out) {
        if let Sent::Inline(p) = self {
            p.queue(out);
        }
    }
}

impl Core {
    /// Starts a send, or queues it while the peer's send queue is full
    /// ([`super::flow`]). An error refuses it at once (nothing was sent and
    /// no event will follow).
    // The engine calls its two halves itself (`engine::apply`), which
    // keeps the common packet out of memory; this whole is for the tests,
    // the simulator and the fuzz targets.
    #[cfg(any(test, feature = "fuzzing"))]
    #[inline(always)]
    pub(crate) fn send(&mut self, s: SendArgs, out: &mut Out) -> Result<Sent, CoreError> {
        match self.send_at_once(&s, out) {
            Some(p) => Ok(Sent::Inline(p)),
            None => self.send_or_defer(s, out),
        }
    }

    /// The first half of a send: flushes the other peers' bundles and
    /// makes the send's inline packet if it goes at once (see
    /// [`Core::inline_at_once`]); at `None` the caller goes on with
    /// [`Core::send_or_defer`]. The engine calls the two halves itself:
    /// inlined, this packet's fields stay in registers, where through one
    /// answer for both, which `send_or_defer` writes in memory, they went
    /// through memory too (about 15 instructions a send).
    #[inline(always)]
    pub(crate) fn send_at_once(&mut self, s: &SendArgs, out: &mut Out) -> Option<InlineSend> {
        self.flush_bundles(Some(s.peer), out);
        self.inline_at_once(s)
    }

    /// The second half of a send, one that does not go inline at once
    /// (after [`Core::send_at_once`] said `None`).
    #[inline(never)]
    pub(crate) fn send_or_defer(&mut self, s: SendArgs, out: &mut Out) -> Result<Sent, CoreError> {
        self.check_peer(s.peer)?;
        if self.send_must_wait(&s) {
            if s.buf.len() > self.peers[s.peer.index()].eager_limit {
                self.rndv_refusal(&s)?;
            }
            self.defer_send(s);
            return Ok(Sent::Out);
        }
        self.send_checked(s, out)
    }

    /// The send's inline packet, made, if it would pass
    /// [`Core::check_peer`] and flow control and [`Core::send_checked`]
    /// would make it one with nothing to do before it (no malformed packet
    /// to emit, no bundle to fill or flush, no packet in flight to coalesce
    /// behind): the commonest send to a same-host peer, decided with one
    /// look at the peer and its rail. `None` (and nothing done) otherwise.
    #[inline(always)]
    fn inline_at_once(&mut self, s: &SendArgs) -> Option<InlineSend> {
        // The peer is looked up before flow control, which indexes by it:
        // a handle of no peer goes the slow way, to `check_peer`'s error.
        if s.sync
            || self.fault == Fault::BadPacket
            || s.peer.index() >= self.peers.len()
            || self.send_must_wait(s)
        {
            return None;
        }
        let len = s.buf.len();
        let p = &mut self.peers[s.peer.index()];
        let r = &self.rails[p.rail.index()];
        // `inline_below`: the rail's `inline`, `BASE_LEN + len <=
        // inject_size` and `len <= p.eager_limit` in one.
        debug_assert!(
            len >= u32::MAX as usize
                || (len < p.inline_below as usize)
                    == (r.profile.inline
                        && wire::BASE_LEN + len <= r.profile.inject_size
                        && len <= p.eager_limit)
        );
        if !(len < p.inline_below as usize
            && !p.lost
            && p.inflight == 0
            && p.bundle.is_none()
            && r.retry.is_empty())
        {
            return None;
        }
        let sent = InlineSend::take(
            s,
            p,
            rail_bytes(&self.stats, r.profile.kind, true),
            self.cfg.my_name,
        );
        self.stall.moved = true;
        Self::count_eager(&self.stats, len);
        Some(sent)
    }

    /// Counts an eager message of `len` bytes sent.
    #[inline]
    fn count_eager(stats: &Stats, len: usize) {
        Stats::bump(&stats.sent_msgs, 1);
        Stats::bump(&stats.sent_bytes, len as u64);
        Stats::bump(&stats.eager, 1);
    }

    /// Starts a send that flow control let through.
    pub(super) fn send_now(&mut self, s: SendArgs, out: &mut Out) -> Result<(), CoreError> {
        self.check_peer(s.peer)?;
        self.send_checked(s, out).map(|sent| sent.into_out(out))
    }

    /// [`Core::send_now`] for a peer known to be reachable.
    fn send_checked(&mut self, s: SendArgs, out: &mut Out) -> Result<Sent, CoreError> {
        let len = s.buf.len();
        let p = &self.peers[s.peer.index()];
        let rail = p.rail;
        if len > p.eager_limit {
            return self.start_rndv_send(s, out).map(|()| Sent::Out);
        }
        Self::count_eager(&self.stats, len);
        if self.fault == Fault::BadPacket {
            self.fault = Fault::None;
            let mut b = self.take_tx(rail, out);
            let n = self.header(Kind::Eager).encode(&mut b.mem);
            b.mem[0] = 0x00; // not our magic
            self.send_packet(s.peer, b, n, None, AfterSend::Nothing, out);
        }
        let zero_copy =
            !s.sync && len >= ZERO_COPY_MIN && self.rails[rail.index()].profile.zero_copy;
        if !s.sync && !zero_copy && self.cfg.coalesce {
            if self.coalesce(&s, out) {
                return Ok(Sent::Out);
            }
        } else {
            self.flush_bundle(s.peer, out);
        }
        let r = &self.rails[rail.index()];
        if r.profile.inline
            && !s.sync
            && wire::BASE_LEN + len <= r.profile.inject_size
            && r.retry.is_empty()
        {
            return Ok(Sent::Inline(self.send_inline(s)));
        }
        let mut hdr = self.matchable_header(s.peer, Kind::Eager, s.ctx, s.src, s.tag, len);
        let need = hdr.wire_len() + if zero_copy { 0 } else { len };
        let mut b = self.take_tx_for(rail, need, out);
        let held = Self::buf_cost(b.mem.len());
        self.flow.charge(s.peer, held);
        let then = if s.sync {
            let cookie = self.new_cookie();
            hdr.flags |= wire::FLAG_SYNC;
            hdr.cookie = cookie.0;
            self.sync_wait.insert(cookie, (s.req, s.peer));
            AfterSend::Sync(cookie)
        } else if zero_copy {
            AfterSend::Complete(s.req)
        } else {
            AfterSend::Nothing
        };
        if zero_copy {
            let n = hdr.encode(&mut b.mem);
            self.send_held_packet(s.peer, b, n, Some(s.buf), then, held, Carried::None, out);
        } else {
            let n = put_eager(&mut b.mem, 0, &hdr, &s.buf);
            // A copied send completes as the provider takes its packet.
            let carried = if s.sync {
                Carried::None
            } else {
                Carried::One(s.req)
            };
            self.send_held_packet(s.peer, b, n, None, then, held, carried, out);
        }
        Ok(Sent::Out)
    }

    /// Makes a small eager message that the driver copies at post
    /// ([`InlineSend`]): no bounce buffer, no operation, nothing reported
    /// back; the send is complete once the driver has it. Only while
    /// nothing waits in the rail's queue, so that it rarely overtakes a
    /// queued packet (one refused earlier in the same batch of actions may
    /// still go after it; the receiver's order check holds it until the
    /// gap is filled).
    #[inline]
    fn send_inline(&mut self, s: SendArgs) -> InlineSend {
        let p = &mut self.peers[s.peer.index()];
        let rail_tx = rail_bytes(&self.stats, self.rails[p.rail.index()].profile.kind, true);
        let sent = InlineSend::take(&s, p, rail_tx, self.cfg.my_name);
        self.stall.moved = true;
        sent
    }

    /// The driver could not take an inline packet of send `req` (`_why`:
    /// its queue is full, or an error): the packet goes into a bounce
    /// buffer and on as an ordinary one, which is queued, resent or failed
    /// by the usual rules, and the send completes as the provider takes it
    /// ([`super::held`]). Its completion, if `out` holds it (a packet of
    /// [`Action::SendInline`]), is taken back first; the engine's own
    /// inline send completes only once the driver took the packet. The
    /// payload is still valid (see [`Action::SendInline`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_inline_refused(
        &mut self,
        rail: RailId,
        peer: PeerId,
        head: &InlineHead,
        payload: UserBuf,
        req: ReqId,
        _why: PostError,
        out: &mut Out,
    ) {
        let n = wire::BASE_LEN + payload.len();
        // Counted again as the ordinary packet goes: the peer's bytes when
        // it is posted, the rail's when it completes.
        let p = &mut self.peers[peer.index()];
        p.tx_bytes = p.tx_bytes.wrapping_sub(n as u64);
        self.uncount_rail_tx(rail, n);
        super::held::take_back(req, out);
        let mut b = self.take_tx_for(rail, n, out);
        b.mem[..wire::BASE_LEN].copy_from_slice(head);
        payload.read_into(&mut b.mem[wire::BASE_LEN..]);
        let held = Self::buf_cost(b.mem.len());
        self.flow.charge(peer, held);
        let carried = Carried::One(req);
        self.send_held_packet(peer, b, n, None, AfterSend::Nothing, held, carried, out);
    }

    /// Copies a matched eager message into its receive and acknowledges a
    /// synchronous one.
    #[inline]
    pub(super) fn finish_eager(
        &mut self,
        p: PostedRecv,
        env: Envelope,
        peer: PeerId,
        data: &[u8],
        sync: Option<Cookie>,
        out: &mut Out,
    ) {
        let n = p.buf.write(data);
        self.ack_sync(peer, sync, out);
        let status = if data.len() > p.buf.len() {
            Status::Truncated
        } else {
            Status::Ok
        };
        self.recv_done(p.req, env, n, status, out);
    }

    /// A synchronous send (`sync`: its cookie) was matched: its sender is
    /// told, unless it is lost.
    #[inline]
    pub(super) fn ack_sync(&mut self, peer: PeerId, sync: Option<Cookie>, out: &mut Out) {
        if let Some(cookie) = sync {
            if !self.peers[peer.index()].lost {
                let mut ack = self.header(Kind::SyncAck);
                ack.cookie = cookie.0;
                self.send_ctrl(peer, &ack, out);
            }
        }
    }

    /// The receiver matched a synchronous send.
    pub(super) fn on_sync_ack(&mut self, hdr: &Header, out: &mut Out) {
        match self.sync_wait.remove(&Cookie(hdr.cookie)) {
            Some((req, _)) => out.events.push(Event::Send {
                req,
                status: Status::Ok,
            }),
            None => self.error("dropped a synchronous-send ack for no pending send"),
        }
    }
}
