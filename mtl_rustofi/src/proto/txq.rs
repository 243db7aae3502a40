//! The transmit queue: the operations handed to the driver, credits (the
//! provider's queue depth), retries, and what a failure means. Packets take
//! their bounce buffers from [`super::txbuf`].
//!
//! Every operation lives in the `ops` slab from the moment it is created
//! until its one report (completion, error completion or rejected post) has
//! been handled; that handling is the only place an operation is removed,
//! so a report can never find a freed operation, and an operation can
//! never be left behind.

use super::action::{Action, Event, Out, PostError, Posted, Status};
use super::held::Carried;
use super::ids::{Cookie, MrId, OpId, PeerId, RailId, ReqId, RndvId, RxSlot};
use super::tick_work::TickWork;
use super::txbuf::TxBuf;
use super::Core;
use crate::usermem::{Region, UserBuf};
use std::sync::atomic::Ordering::Relaxed;

/// Resends of a packet that failed (a reliable provider re-establishes a
/// broken connection) before its peer is given up.
pub(crate) const RESENDS: u8 = 3;

/// Moves of a packet to another bounce buffer after its buffer's
/// registration failed, before such failures start to use up its resends.
/// A failed registration (the memory could not be pinned) says nothing
/// about the peer, so it must not give the peer up as a failed send does;
/// the bound keeps a registration that always fails from retrying for ever.
pub(crate) const REBUFFERS: u8 = 8;

/// Passes of its rail's queue (`Core::run_retries`, a tick; a progress
/// round may make more than one) that a packet moved off a buffer whose
/// registration failed waits at the queue's head for a pooled buffer
/// before one is registered for it anyway. The wait is bounded because
/// what is in flight may never bring back a buffer that holds it: chunks
/// hold none, small packets hold small ones, and a send to a process that
/// exited may never complete; meanwhile the packet holds up its rail's
/// queue.
pub(crate) const BUFFER_WAIT: u16 = 1000;

/// What the outcome of a packet means beyond freeing its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AfterSend {
    Nothing,
    /// A zero-copy eager send: the request completes with the transmit.
    Complete(ReqId),
    /// A synchronous eager send (completes on the receiver's ack; a lost
    /// packet fails it).
    Sync(Cookie),
    /// The RTS of a rendezvous send.
    Rts(Cookie),
    /// A data packet of a message rendezvous.
    Data(Cookie),
    /// A liveness probe (never injected: its failure is the evidence).
    Ping,
}

/// A packet: header(s) and, for copied eager sends, payload in `buf`.
pub(super) struct Packet {
    pub(super) rail: RailId,
    pub(super) peer: PeerId,
    pub(super) buf: TxBuf,
    pub(super) len: usize,
    /// Zero-copy payload sent from the user's buffer after `buf`.
    pub(super) payload: Option<UserBuf>,
    pub(super) then: AfterSend,
    pub(super) resends_left: u8,
    /// Moves left to another buffer after a failed registration
    /// ([`REBUFFERS`]).
    pub(super) rebuffers_left: u8,
    /// Its buffer's registration failed and it waits in the rail's queue
    /// for a buffer to come back to the pool (`Core::buffer_for`): the
    /// passes of the queue it has waited so far.
    pub(super) awaits_buffer: Option<u16>,
    /// Bytes charged to the peer's flow control ([`super::flow`]) until
    /// the packet is reported.
    pub(super) held: usize,
    /// The copied eager sends whose bytes it carries, and whether their
    /// completions have been reported: as it is handed to the driver, not
    /// while it waits in the rail's queue ([`super::held`]).
    pub(super) carried: Carried,
    pub(super) reported: bool,
    /// The provider refused it at least once: evidence against its peer
    /// when it carries held sends (`Core::waited_peers`), which a packet
    /// that only waits for a credit is not.
    pub(super) refused: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ChunkKind {
    Read,
    TaggedSend,
    TaggedRecv,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum ChunkOwner {
    Recv(RndvId),
    Send(Cookie),
}

/// One piece of rendezvous data.
pub(super) struct Chunk {
    pub(super) rail: RailId,
    pub(super) peer: PeerId,
    pub(super) owner: ChunkOwner,
    pub(super) kind: ChunkKind,
    pub(super) local: Region,
    pub(super) mr: Option<MrId>,
    /// Read: the remote address; tagged: the tag.
    pub(super) remote: u64,
    /// Read: the RMA key.
    pub(super) key: u64,
}

pub(super) enum Op {
    Packet(Packet),
    Chunk(Chunk),
}

impl Op {
    fn rail(&self) -> RailId {
        match self {
            Op::Packet(p) => p.rail,
            Op::Chunk(c) => c.rail,
        }
    }

    /// Whether the operation takes a transmit credit. A tagged receive
    /// waits in the provider's receive queue for the peer's data; were it
    /// to hold a credit, the receives of a rendezvous (one per chunk)
    /// could take every credit and leave the CTS that makes the peer send
    /// that data queued behind them for ever.
    fn takes_credit(&self) -> bool {
        !matches!(self, Op::Chunk(c) if c.kind == ChunkKind::TaggedRecv)
    }
}

/// Operation slots kept after a burst; a table grown beyond is freed when
/// the last operation is reported.
const OPS_KEPT: usize = 4096;

impl Core {
    /// One more than the highest operation id in use: contexts of ids from
    /// here on name no operation and may be freed.
    pub(crate) fn op_ids_bound(&self) -> usize {
        self.ops.bound()
    }

    /// Queues a new operation for the driver: it is handed over at once
    /// when a credit is free and nothing waits before it.
    pub(super) fn submit_op(&mut self, op: Op, out: &mut Out) -> OpId {
        let rail = op.rail();
        let credit = op.takes_credit();
        let id = self.ops.insert(op);
        if !credit {
            // Takes no credit, waits for no one (see `takes_credit`).
            self.emit(id, out);
        } else if self.take_credit(rail, id) {
            self.emit(id, out);
        }
        id
    }

    fn emit(&mut self, id: OpId, out: &mut Out) {
        self.report_carried(id, out);
        let op = self.ops.get(id).expect("emitted operations are live");
        let a = match op {
            Op::Packet(p) => self.send_action(id, p),
            Op::Chunk(c) => {
                let addr = self.peer_addr(c.peer, c.rail);
                match c.kind {
                    ChunkKind::Read => Action::Read {
                        op: id,
                        rail: c.rail,
                        src: addr,
                        local: c.local,
                        mr: c.mr,
                        remote_addr: c.remote,
                        key: c.key,
                    },
                    ChunkKind::TaggedSend => Action::TaggedSend {
                        op: id,
                        rail: c.rail,
                        dest: addr,
                        local: c.local,
                        mr: c.mr,
                        tag: c.remote,
                    },
                    ChunkKind::TaggedRecv => Action::TaggedRecv {
                        op: id,
                        rail: c.rail,
                        src: addr,
                        local: c.local,
                        mr: c.mr,
                        tag: c.remote,
                    },
                }
            }
        };
        out.actions.push(a);
    }

    /// Hands queued operations and receive posts to the driver while
    /// credits last.
    pub(super) fn run_retries(&mut self, out: &mut Out) {
        if !self.queued() {
            return;
        }
        let mut left = false;
        for rail in 0..self.rails.len() {
            let r = &mut self.rails[rail];
            while let Some(slot) = r.rx_retry.pop_front() {
                out.actions.push(Action::PostRecv {
                    rail: RailId(rail as u8),
                    slot,
                });
            }
            loop {
                let r = &mut self.rails[rail];
                if r.inflight >= r.profile.tx_depth {
                    break;
                }
                let Some(id) = r.retry.pop_front() else {
                    break;
                };
                if r.awaiting_buffer && !self.buffer_for(RailId(rail as u8), id, out) {
                    self.rails[rail].retry.push_front(id);
                    break;
                }
                let credit = self.ops.get(id).is_some_and(Op::takes_credit);
                self.rails[rail].inflight += credit as usize;
                self.emit(id, out);
            }
            let r = &mut self.rails[rail];
            r.awaiting_buffer &= !r.retry.is_empty();
            left |= !r.retry.is_empty();
        }
        self.work.set(TickWork::QUEUED, left);
        self.stats.tx_queued.store(left, Relaxed);
    }

    /// The driver could not post an operation or a receive buffer.
    pub(crate) fn on_post_failed(&mut self, what: Posted, err: PostError, out: &mut Out) {
        if let Posted::Op(id) = what {
            // Queued again or failed: its sends are not complete yet.
            self.recall_carried(id, out);
            // A post rejected for want of its buffer's registration says
            // nothing about the peer: no evidence against it
            // (`Core::waited_peers`). Any other refusal is.
            let unregistered = matches!(err, PostError::Hard(_))
                && matches!(self.ops.get(id), Some(Op::Packet(p)) if self.failed_for_registration(p));
            if let Some(Op::Packet(p)) = self.ops.get_mut(id) {
                p.refused |= !unregistered;
            }
        }
        match (what, err) {
            (Posted::Rx(rail, slot), PostError::Again) => {
                // be0251a defect 5: the result of reposting was ignored.
                if cfg!(feature = "be0251a-defects") {
                    return;
                }
                self.requeue_rx(rail, slot);
            }
            (Posted::Rx(rail, slot), PostError::Hard(code)) => {
                // Counted and reported once per buffer until it is posted
                // again (it is retried at every tick).
                let r = &mut self.rails[rail.index()];
                if r.rx_failing.insert(slot) {
                    self.count_error();
                    self.error(&format!(
                        "could not post a receive buffer on {}: {}; retrying at every progress call",
                        self.rails[rail.index()].profile.provider,
                        crate::fabric::strerror(-code)
                    ));
                }
                // be0251a defect 5: the result of reposting was ignored.
                if cfg!(feature = "be0251a-defects") {
                    return;
                }
                self.requeue_rx(rail, slot);
            }
            (Posted::Op(id), PostError::Again) => {
                let Some(op) = self.ops.get(id) else { return };
                if matches!(op, Op::Packet(p) if self.peers[p.peer.index()].lost) {
                    // A provider may refuse packets to a lost peer for as
                    // long as its connection stays broken: fail them
                    // instead of queueing them for ever.
                    self.op_failed(id, "its peer can no longer be reached", out);
                    return;
                }
                let rail = op.rail();
                self.rails[rail.index()].inflight -= op.takes_credit() as usize;
                if self.drop_refused_chunk(id, out) {
                    return;
                }
                self.requeue(rail, id);
            }
            (Posted::Op(id), PostError::Hard(code)) => {
                // be0251a defects 1 and 2: a chunk whose post failed was
                // freed before its rendezvous was updated (1: a retried
                // post, then a use after free) or its rendezvous was never
                // updated (2: an immediate failure): the rendezvous never
                // learns of it.
                #[cfg(feature = "be0251a-defects")]
                if let Some(Op::Chunk(c)) = self.ops.get(id) {
                    let credit = self.ops.get(id).is_some_and(Op::takes_credit);
                    self.rails[c.rail.index()].inflight -= credit as usize;
                    self.ops.remove(id);
                    self.count_error();
                    return;
                }
                let why = crate::fabric::strerror(-code);
                self.op_failed(id, &why, out);
            }
        }
    }

    /// An operation completed successfully.
    #[inline]
    pub(crate) fn on_complete(&mut self, id: OpId, out: &mut Out) {
        let Some(op) = self.ops.remove(id) else {
            self.error("completion for an unknown operation");
            return;
        };
        // A burst's table goes once the burst is over (the driver's
        // contexts follow it, see `op_ids_bound`).
        self.ops.shrink_if_empty(OPS_KEPT);
        self.rails[op.rail().index()].inflight -= op.takes_credit() as usize;
        match &op {
            Op::Packet(p) => {
                let n = p.len + p.payload.map_or(0, |u| u.len());
                self.count_rail_bytes(p.rail, true, n);
            }
            Op::Chunk(c) => {
                let tx = c.kind == ChunkKind::TaggedSend;
                self.count_rail_bytes(c.rail, tx, c.local.len);
            }
        }
        match op {
            Op::Packet(p) => {
                let then = p.then;
                if then == AfterSend::Ping {
                    self.ping_done(p.peer);
                } else if p.buf.mem[1] != crate::wire::Kind::Pong as u8 {
                    self.stall.moved = true;
                }
                if let AfterSend::Complete(req) = then {
                    out.events.push(Event::Send {
                        req,
                        status: Status::Ok,
                    });
                }
                self.packet_done(p, out);
                if self.flow.any_waiting() {
                    self.drain_deferred(out);
                }
                if let AfterSend::Data(cookie) = then {
                    self.data_sent(cookie, false, out);
                }
            }
            Op::Chunk(c) => {
                self.stall.moved = true;
                self.chunk_done(c.owner, false, out)
            }
        }
    }

    /// A cancelled operation reported its cancellation (not an error: the
    /// failure that led to it was counted where it was seen).
    pub(crate) fn on_canceled(&mut self, id: OpId, out: &mut Out) {
        let Some(op) = self.ops.remove(id) else {
            return;
        };
        self.rails[op.rail().index()].inflight -= op.takes_credit() as usize;
        match op {
            Op::Chunk(c) => self.chunk_done(c.owner, true, out),
            Op::Packet(p) => {
                // Packets are never cancelled; treat it as lost for good.
                let peer = p.peer;
                if !p.reported {
                    p.carried.report(Status::Failed, out);
                }
                self.packet_done(p, out);
                self.peer_lost(peer, out);
            }
        }
    }

    /// An operation completed with an error.
    pub(crate) fn on_error(&mut self, id: OpId, why: &str, out: &mut Out) {
        self.op_failed(id, why, out);
    }

    /// A posted operation failed (error completion or rejected post): the
    /// single place where a failure is counted and acted on.
    pub(super) fn op_failed(&mut self, id: OpId, why: &str, out: &mut Out) {
        let Some(op) = self.ops.get_mut(id) else {
            self.error(&format!("error for an unknown operation: {why}"));
            return;
        };
        let rail = op.rail();
        let credit = op.takes_credit() as usize;
        // Its credit comes back whatever follows (a move, a resend or the
        // end), before a move looks at what the rail still has in flight.
        self.rails[rail.index()].inflight -= credit;
        if self.unregistered_packet_moves(id, why, out) {
            return;
        }
        let Some(op) = self.ops.get_mut(id) else {
            unreachable!("checked above")
        };
        let resend = match op {
            Op::Packet(p) if p.resends_left > 0 => {
                p.resends_left -= 1;
                Some((p.resends_left, p.peer))
            }
            _ => None,
        };
        // be0251a defect 3: only control and coalesced packets were resent;
        // a failed copied eager, synchronous eager or RTS packet was
        // dropped, and its peer kept, with a hole in its sequence.
        let old_drop = cfg!(feature = "be0251a-defects")
            && matches!(self.ops.get(id), Some(Op::Packet(p))
                if p.then != AfterSend::Nothing
                    || (p.buf.mem[1] == crate::wire::Kind::Eager as u8
                        && p.buf.mem[2] & crate::wire::FLAG_MORE == 0));
        let resend = resend.filter(|_| !old_drop);
        if let Some((left, peer)) = resend {
            // A packet about to be resent is not counted as an error yet:
            // only one that fails for good is.
            if !self.peers[peer.index()].lost {
                tracing::debug!(
                    peer = peer.0,
                    attempts_left = left + 1,
                    "resending a packet"
                );
                self.error(&format!(
                    "packet send failed: {why}; resending ({} attempts left)",
                    left + 1
                ));
                // Sends reported complete as it was first handed over (it
                // failed after that, at the provider) stay complete: the
                // resend carries none, as their requests may be reused.
                if let Some(Op::Packet(p)) = self.ops.get_mut(id) {
                    if p.reported {
                        p.carried = Carried::None;
                    }
                }
                self.rebuffer(id, out);
                self.requeue(rail, id);
                return;
            }
        }
        self.count_error();
        match self.ops.remove(id).expect("checked above") {
            Op::Packet(p) => {
                let peer = p.peer;
                self.error(&format!("send of {} bytes failed for good: {why}", p.len));
                match p.then {
                    AfterSend::Nothing | AfterSend::Ping => {}
                    AfterSend::Complete(req) => out.events.push(Event::Send {
                        req,
                        status: Status::Failed,
                    }),
                    AfterSend::Sync(cookie) => {
                        if let Some((req, _)) = self.sync_wait.remove(&cookie) {
                            out.events.push(Event::Send {
                                req,
                                status: Status::Failed,
                            });
                        }
                    }
                    AfterSend::Rts(cookie) => self.rndv_send_failed(cookie, out),
                    AfterSend::Data(cookie) => self.data_sent(cookie, true, out),
                }
                if !p.reported {
                    p.carried.report(Status::Failed, out);
                }
                self.packet_done(p, out);
                // The packet may have held a sequence number the peer waits
                // for, or a control message a rendezvous waits for: nothing
                // more can be exchanged with that peer in order.
                if !old_drop {
                    self.peer_lost(peer, out);
                }
            }
            Op::Chunk(c) => {
                self.error(&format!(
                    "rendezvous {:?} of {} bytes failed: {why}",
                    c.kind, c.local.len
                ));
                self.chunk_done(c.owner, true, out);
            }
        }
    }

    #[inline]
    fn packet_done(&mut self, p: Packet, out: &mut Out) {
        if p.held > 0 {
            self.flow.release(p.peer, p.held);
        }
        let peer = &mut self.peers[p.peer.index()];
        peer.inflight = peer.inflight.saturating_sub(1);
        self.recycle_tx(p.rail, p.buf, out);
    }

    /// Sends a packet already written into `buf` (`len` bytes) to `peer`.
    #[inline(always)]
    pub(super) fn send_packet(
        &mut self,
        peer: PeerId,
        buf: TxBuf,
        len: usize,
        payload: Option<UserBuf>,
        then: AfterSend,
        out: &mut Out,
    ) {
        self.send_held_packet(peer, buf, len, payload, then, 0, Carried::None, out);
    }

    /// [`Core::send_packet`] of a packet whose `held` bytes are charged to
    /// the peer's flow control, released when it is reported, and which
    /// carries the bytes of the copied sends `carried`: reported complete
    /// now if it is handed to the driver now, else once it leaves the
    /// rail's queue ([`super::held`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn send_held_packet(
        &mut self,
        peer: PeerId,
        buf: TxBuf,
        len: usize,
        payload: Option<UserBuf>,
        then: AfterSend,
        held: usize,
        carried: Carried,
        out: &mut Out,
    ) {
        let p = &mut self.peers[peer.index()];
        p.inflight += 1;
        p.tx_bytes = p
            .tx_bytes
            .wrapping_add((len + payload.map_or(0, |u| u.len())) as u64);
        let rail = p.rail;
        // `take_credit`, split so that the sends are reported before the
        // packet moves into the slab.
        let r = &self.rails[rail.index()];
        let goes = r.retry.is_empty() && r.inflight < r.profile.tx_depth;
        if goes {
            carried.report(Status::Ok, out);
        }
        let id = self.ops.insert(Op::Packet(Packet {
            rail,
            peer,
            buf,
            len,
            payload,
            then,
            resends_left: RESENDS,
            rebuffers_left: REBUFFERS,
            awaits_buffer: None,
            held,
            carried,
            reported: goes,
            refused: false,
        }));
        // Packets always take a credit, so the generic `submit_op` and
        // `emit` (a match over every kind) are skipped on this, the
        // hottest, path.
        if goes {
            self.rails[rail.index()].inflight += 1;
            let Some(Op::Packet(p)) = self.ops.get(id) else {
                unreachable!("just inserted")
            };
            out.actions.push(self.send_action(id, p));
        } else {
            self.count_held(id);
            self.requeue(rail, id);
        }
    }

    /// The action that sends a packet. The buffer's address is taken from
    /// the operation where it lives: a pointer taken before the Box moved
    /// into the slab would be invalid (Stacked Borrows; Miri reports it).
    ///
    /// A packet wholly in its bounce buffer and within the provider's
    /// inject size is marked for `fi_inject`: the buffer may be reused as
    /// soon as the post returns, and there is no completion to reap. The
    /// price: an error after the post is not reported for it (a reliable
    /// endpoint then loses the connection, and the peer is given up through
    /// the runtime), so such a packet is not resent. Copied eager packets
    /// are not injected while coalescing is on: the transmit of such a
    /// packet is the window in which following sends to the peer share one
    /// packet, and an injected packet has none.
    #[inline(always)]
    fn send_action(&self, id: OpId, p: &Packet) -> Action {
        let inject = self.goes_by_inject(p);
        Action::Send {
            op: id,
            rail: p.rail,
            dest: self.peers[p.peer.index()].addr,
            head: p.buf.region(p.len),
            mr: p.buf.mr,
            payload: p.payload.map(|u| u.region()),
            inject,
        }
    }

    /// Whether the packet is posted with `fi_inject`: no completion, and no
    /// descriptor even on FI_MR_LOCAL rails (so its buffer's registration
    /// does not matter).
    #[inline]
    pub(super) fn goes_by_inject(&self, p: &Packet) -> bool {
        let coalescable = self.cfg.coalesce
            && p.then == AfterSend::Nothing
            && p.buf.mem[1] == crate::wire::Kind::Eager as u8;
        p.payload.is_none()
            && !coalescable
            && p.then != AfterSend::Ping
            && p.len <= self.rails[p.rail.index()].profile.inject_size
    }

    /// Puts an operation at the end of its rail's queue (handed over again
    /// by `run_retries`).
    pub(super) fn requeue(&mut self, rail: RailId, id: OpId) {
        tracing::trace!(
            rail = rail.0,
            op = id.0,
            "operation queued (credits or provider busy)"
        );
        self.rails[rail.index()].retry.push_back(id);
        self.work.set(TickWork::QUEUED, true);
        self.stats.tx_queued.store(true, Relaxed);
    }

    /// Puts a receive buffer in its rail's queue of buffers to repost.
    fn requeue_rx(&mut self, rail: RailId, slot: RxSlot) {
        self.rails[rail.index()].rx_retry.push_back(slot);
        self.work.set(TickWork::QUEUED, true);
    }

    /// Takes a transmit credit for a new operation; false if it must wait
    /// in the rail's queue (credits exhausted, or others wait before it).
    #[inline]
    fn take_credit(&mut self, rail: RailId, id: OpId) -> bool {
        let r = &mut self.rails[rail.index()];
        if !r.retry.is_empty() || r.inflight >= r.profile.tx_depth {
            self.requeue(rail, id);
            false
        } else {
            r.inflight += 1;
            true
        }
    }

    /// Sends a control packet (header only).
    pub(super) fn send_ctrl(&mut self, peer: PeerId, hdr: &crate::wire::Header, out: &mut Out) {
        let rail = self.peers[peer.index()].rail;
        let mut b = self.take_tx_for(rail, hdr.wire_len(), out);
        let n = hdr.encode(&mut b.mem);
        self.send_packet(peer, b, n, None, AfterSend::Nothing, out);
    }

    /// A receive buffer's packet was handled: post it again (not on an
    /// `rx_kept` rail, whose driver keeps it armed).
    #[inline]
    pub(super) fn repost_rx(&mut self, rail: RailId, slot: RxSlot, out: &mut Out) {
        if self.rails[rail.index()].profile.rx_kept {
            return;
        }
        out.actions.push(Action::PostRecv { rail, slot });
    }

    /// Sends a liveness probe (see [`super::liveness`]).
    pub(super) fn send_ping(&mut self, peer: PeerId, hdr: &crate::wire::Header, out: &mut Out) {
        let rail = self.peers[peer.index()].rail;
        let mut b = self.take_tx(rail, out);
        let n = hdr.encode(&mut b.mem);
        self.send_packet(peer, b, n, None, AfterSend::Ping, out);
    }
}
