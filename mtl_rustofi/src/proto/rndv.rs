//! What both rendezvous protocols share: the sender's RTS (a matchable
//! message that carries no payload), the state of each side, the FIN that
//! ends a transfer, registrations of user buffers, and failure.
//!
//! Sender: `start_rndv_send` registers the buffer where the protocol or the
//! rail needs it, then sends the RTS; it waits for a FIN (read protocol,
//! or any failure of the receiver) or a CTS (send protocol; message
//! protocol, which then waits for a FIN too). Receiver:
//! `start_rndv_recv` on the match registers the receive buffer where the
//! rail needs it and hands over to [`super::rndv_read`],
//! [`super::rndv_send`] or [`super::rndv_msg`] (which registers nothing:
//! its data travels through bounce buffers).

use super::action::{Access, Event, Out, Status};
use super::ids::{Cookie, MrId, PeerId, ReqId, RndvId};
use super::peers::has;
use super::recv::PostedRecv;
use super::rndv_msg::{MsgRecv, MsgSend};
use super::stripe::Lane;
use super::txbuf::MrUse;
use super::txq::{AfterSend, ChunkOwner};
use super::usermr::UserMr;
use super::{Core, CoreError, Stats};
use crate::config::Fault;
use crate::matching::Envelope;
use crate::usermem::UserBuf;
use crate::wire::{self, Header, Kind};

/// Sender side of a rendezvous.
pub(super) struct SendRndv {
    pub(super) req: ReqId,
    pub(super) buf: UserBuf,
    pub(super) peer: PeerId,
    pub(super) mr: Option<MrId>,
    /// Start of the registered range (a cached registration may begin
    /// before the buffer): RMA offsets are taken from it.
    pub(super) mr_base: usize,
    pub(super) state: SendState,
    /// Data chunks handed over and not yet reported.
    pub(super) outstanding: usize,
    pub(super) failed: bool,
    /// The receiver knows the transfer failed (told, or it told us).
    pub(super) abort_sent: bool,
    /// Striped read: the buffer's registration on each stripe rail.
    pub(super) lanes: Vec<Lane>,
    /// Registrations done so far (the primary's first, then the lanes').
    pub(super) reg_done: usize,
    /// Message rendezvous: what is sent so far (set by the CTS).
    pub(super) msg: Option<MsgSend>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum SendState {
    /// The RTS waits for the buffer's registration (its key goes in it).
    Registering(Header),
    /// The RTS is out; waiting for a CTS or a FIN.
    AwaitReply,
    /// CTS received, data chunks going out (message protocol: and then
    /// the receiver's FIN awaited).
    Sending,
}

/// Receiver side of a rendezvous.
pub(super) struct RecvRndv {
    pub(super) req: ReqId,
    pub(super) buf: UserBuf,
    pub(super) peer: PeerId,
    pub(super) env: Envelope,
    /// Sender's cookie, echoed in CTS/FIN.
    pub(super) cookie: Cookie,
    /// Bytes to move (the message, clipped to the receive buffer).
    pub(super) want: usize,
    pub(super) truncated: bool,
    pub(super) read: bool,
    pub(super) remote_addr: u64,
    pub(super) key: u64,
    /// Send protocol: tag of the first data chunk.
    pub(super) tag_base: u64,
    pub(super) next_off: usize,
    pub(super) outstanding: usize,
    pub(super) failed: bool,
    pub(super) mr: Option<MrId>,
    /// Waiting for the registration of the receive buffer.
    pub(super) registering: bool,
    /// Send and message protocols: the CTS went out (a send-protocol
    /// sender no longer waits for a FIN; a message-protocol one waits for
    /// the FIN that says every byte arrived).
    pub(super) cts_sent: bool,
    /// The sender knows the transfer failed (told, or it told us).
    pub(super) abort_sent: bool,
    /// Striped read: the sender's buffer through each stripe rail.
    pub(super) lanes: Vec<Lane>,
    /// Round-robin cursor over the primary rail (0) and the lanes.
    pub(super) lane_next: usize,
    /// Message rendezvous: which data packets arrived.
    pub(super) msg: Option<MsgRecv>,
}

impl Core {
    /// Why a rendezvous send to the peer cannot be made at all (refused at
    /// once, before it could wait in a send queue).
    pub(super) fn rndv_refusal(&self, s: &super::eager::SendArgs) -> Result<(), CoreError> {
        let rail = self.peers[s.peer.index()].rail;
        let prof = &self.rails[rail.index()].profile;
        let read = prof.rndv_read;
        let msg = !read && prof.rndv_msg;
        if msg && self.data_chunk(s.peer) == 0 {
            return Err(CoreError(format!(
                "the eager limit of {} bytes leaves no room for rendezvous data packets: \
                 raise mtl_rustofi_eager_limit",
                self.peers[s.peer.index()].eager_limit
            )));
        }
        if !read && !msg && !prof.tagged {
            return Err(CoreError(format!(
                "provider {} offers neither FI_RMA nor FI_TAGGED: a message of {} bytes \
                 (above the eager limit of {} bytes) cannot be sent",
                prof.provider,
                s.buf.len(),
                self.peers[s.peer.index()].eager_limit
            )));
        }
        Ok(())
    }

    pub(super) fn start_rndv_send(
        &mut self,
        s: super::eager::SendArgs,
        out: &mut Out,
    ) -> Result<(), CoreError> {
        self.rndv_refusal(&s)?;
        let rail = self.peers[s.peer.index()].rail;
        let prof = &self.rails[rail.index()].profile;
        let (read, mr_local) = (prof.rndv_read, prof.mr_local);
        let msg = !read && prof.rndv_msg;
        self.flush_bundle(s.peer, out);
        let len = s.buf.len();
        Stats::bump(&self.stats.sent_msgs, 1);
        Stats::bump(&self.stats.sent_bytes, len as u64);
        Stats::bump(&self.stats.rndv, 1);
        let cookie = self.new_cookie();
        tracing::debug!(
            peer = s.peer.0,
            len,
            read,
            cookie = cookie.0,
            "rendezvous: RTS"
        );
        let mut hdr = self.matchable_header(s.peer, Kind::Rts, s.ctx, s.src, s.tag, len);
        hdr.cookie = cookie.0;
        if msg {
            hdr.flags |= wire::FLAG_RNDV_MSG;
        } else if !read {
            hdr.flags |= wire::FLAG_RNDV_SEND;
        }
        let mut r = SendRndv {
            req: s.req,
            buf: s.buf,
            peer: s.peer,
            mr: None,
            mr_base: s.buf.region().addr,
            state: SendState::AwaitReply,
            outstanding: 0,
            failed: false,
            abort_sent: false,
            lanes: if read {
                self.send_lanes(s.peer, len)
            } else {
                Vec::new()
            },
            reg_done: 0,
            msg: None,
        };
        if !msg && (read || mr_local) {
            let access = if read {
                Access::RemoteRead
            } else {
                Access::Send
            };
            r.state = SendState::Registering(hdr);
            match self.register_user(rail, s.buf.region(), access, MrUse::RndvSend(cookie), out) {
                UserMr::Pending(mr) => {
                    r.mr = Some(mr);
                    self.rndv_send.insert(cookie, r);
                }
                UserMr::Hit { mr, key, base } => {
                    r.mr = Some(mr);
                    r.mr_base = base;
                    self.rndv_send.insert(cookie, r);
                    self.rndv_send_registered(cookie, mr, Ok(key), out);
                }
            }
            return Ok(());
        }
        self.rndv_send.insert(cookie, r);
        self.send_rts(s.peer, &hdr, cookie, out);
        Ok(())
    }

    fn send_rts(&mut self, peer: PeerId, hdr: &Header, cookie: Cookie, out: &mut Out) {
        let rail = self.peers[peer.index()].rail;
        let mut b = self.take_tx(rail, out);
        let n = hdr.encode(&mut b.mem);
        self.send_packet(peer, b, n, None, AfterSend::Rts(cookie), out);
    }

    /// The sender's buffer is registered (or could not be).
    pub(super) fn rndv_send_registered(
        &mut self,
        cookie: Cookie,
        mr: MrId,
        result: Result<u64, i32>,
        out: &mut Out,
    ) {
        let Some(s) = self.rndv_send.get_mut(&cookie) else {
            self.release_user(mr, out);
            return;
        };
        let SendState::Registering(hdr) = &s.state else {
            return;
        };
        let mut hdr = hdr.clone();
        let peer = s.peer;
        let len = s.buf.len();
        let rail = self.peers[peer.index()].rail;
        match result {
            Ok(key) => {
                let addr = s.buf.region().addr;
                // The registration answered: the primary's first, then
                // each lane's in order.
                let (on, base) = match s.reg_done.checked_sub(1) {
                    None => (rail, s.mr_base),
                    Some(i) => (s.lanes[i].rail, s.lanes[i].remote as usize),
                };
                let at = if self.rails[on.index()].profile.mr_virt_addr {
                    addr as u64
                } else {
                    (addr - base) as u64
                };
                if s.reg_done == 0 {
                    if !has(&hdr, wire::FLAG_RNDV_SEND | wire::FLAG_RNDV_MSG) {
                        hdr.ext0 = at;
                        hdr.ext1 = key;
                    }
                } else {
                    hdr.stripes.push(at, key);
                }
                s.reg_done += 1;
                s.state = SendState::Registering(hdr);
                self.rndv_send_next_reg(cookie, out);
            }
            Err(code) => {
                self.count_error();
                self.error(&format!(
                    "cannot register a send buffer of {len} bytes: {}",
                    crate::fabric::strerror(-code)
                ));
                // The RTS holds a sequence number the receiver waits for:
                // it still goes out, marked failed, and the receive it
                // matches fails too.
                hdr.status = 1;
                let mut b = self.take_tx(rail, out);
                let n = hdr.encode(&mut b.mem);
                self.send_packet(peer, b, n, None, AfterSend::Nothing, out);
                self.finish_rndv_send(cookie, true, out);
            }
        }
    }

    /// Registers the sender's buffer on its next lane, or sends the RTS
    /// once every registration is done.
    fn rndv_send_next_reg(&mut self, cookie: Cookie, out: &mut Out) {
        let Some(s) = self.rndv_send.get_mut(&cookie) else {
            return;
        };
        let SendState::Registering(hdr) = &s.state else {
            return;
        };
        let mut hdr = hdr.clone();
        let (i, region) = (s.reg_done - 1, s.buf.region());
        if let Some(lane) = s.lanes.get(i) {
            let rail = lane.rail;
            let what = MrUse::RndvSend(cookie);
            let got = self.register_user(rail, region, Access::RemoteRead, what, out);
            let s = self.rndv_send.get_mut(&cookie).expect("present");
            match got {
                UserMr::Pending(mr) => {
                    s.lanes[i].mr = Some(mr);
                    s.lanes[i].remote = region.addr as u64;
                }
                UserMr::Hit { mr, key, base } => {
                    s.lanes[i].mr = Some(mr);
                    s.lanes[i].remote = base as u64;
                    self.rndv_send_registered(cookie, mr, Ok(key), out);
                }
            }
            return;
        }
        if !s.lanes.is_empty() {
            hdr.flags |= wire::FLAG_STRIPE;
            Stats::add(&self.stats.striped, 1);
        }
        s.state = SendState::AwaitReply;
        let peer = s.peer;
        self.send_rts(peer, &hdr, cookie, out);
    }

    /// The FIN of a rendezvous: the receiver is done with the sender's
    /// buffer (`status` 0: it succeeded); with `FLAG_ABORT`, the sender's
    /// abort; with `FLAG_REPAIR` alone, the sender's question whether a
    /// message rendezvous is done (`proto/repair.rs`).
    pub(super) fn on_fin(&mut self, peer: PeerId, hdr: &Header, out: &mut Out) {
        if has(hdr, wire::FLAG_ABORT) {
            self.on_sender_abort(peer, Cookie(hdr.cookie), has(hdr, wire::FLAG_REPAIR), out);
            return;
        }
        if has(hdr, wire::FLAG_REPAIR) {
            self.on_fin_asked(peer, hdr, out);
            return;
        }
        let cookie = Cookie(hdr.cookie);
        let failed = hdr.status != 0;
        match self
            .rndv_send
            .get(&cookie)
            .map(|s| (s.peer, s.state.clone(), s.outstanding, s.msg.is_some()))
        {
            Some((p, SendState::AwaitReply, 0, _)) if p == peer => {
                if failed {
                    self.count_error();
                    self.error("the receiver reported a failed rendezvous");
                }
                self.finish_rndv_send(cookie, failed, out);
            }
            Some((p, SendState::Sending, _, msg)) if p == peer && failed => {
                self.count_error();
                self.error("the receiver reported a failed rendezvous; its data is not sent");
                self.abort_send(cookie, false, out);
                if msg {
                    // Ends here if its packets have all completed.
                    self.msg_acked(cookie, out);
                }
            }
            Some((p, SendState::Sending, _, true)) if p == peer => self.msg_acked(cookie, out),
            // A receiver's answer to a repair's question (the length holds
            // the token) that crossed the FIN or another answer.
            _ if hdr.len != 0 => {}
            _ => self.error("dropped a rendezvous FIN for no pending send"),
        }
    }

    /// The receiver's FIN to the sender of the rendezvous `cookie`: done
    /// with its buffer, the transfer `failed` or not.
    pub(super) fn send_fin(&mut self, peer: PeerId, cookie: u64, failed: bool, out: &mut Out) {
        let mut fin = self.header(Kind::Fin);
        fin.cookie = cookie;
        fin.status = failed as u32;
        self.send_ctrl(peer, &fin, out);
    }

    pub(super) fn finish_rndv_send(&mut self, cookie: Cookie, failed: bool, out: &mut Out) {
        let Some(s) = self.rndv_send.remove(&cookie) else {
            return;
        };
        for mr in s.mr.into_iter().chain(s.lanes.iter().filter_map(|l| l.mr)) {
            self.release_user(mr, out);
        }
        if !self.answered_send(cookie) {
            out.events.push(Event::Send {
                req: s.req,
                status: if failed { Status::Failed } else { Status::Ok },
            });
        }
    }

    /// The RTS of a rendezvous could not be sent.
    pub(super) fn rndv_send_failed(&mut self, cookie: Cookie, out: &mut Out) {
        if let Some(s) = self.rndv_send.get_mut(&cookie) {
            s.failed = true;
            if s.outstanding == 0 {
                self.finish_rndv_send(cookie, true, out);
            }
        }
    }

    /// A receive matched an RTS.
    pub(super) fn start_rndv_recv(
        &mut self,
        p: PostedRecv,
        peer: PeerId,
        hdr: &Header,
        out: &mut Out,
    ) {
        let env = Envelope {
            ctx: hdr.ctx,
            src: hdr.src,
            tag: hdr.tag,
        };
        if hdr.status != 0 || self.peers[peer.index()].lost {
            // The sender failed this message (and has finished its side).
            self.recv_done(p.req, env, 0, Status::Failed, out);
            return;
        }
        let want = hdr.len.min(p.buf.len() as u64) as usize;
        let asked_msg = has(hdr, wire::FLAG_RNDV_MSG);
        let asked_read = !asked_msg && !has(hdr, wire::FLAG_RNDV_SEND);
        // A read this rank cannot make is answered with a grant for data
        // packets: the sender, waiting for the read's FIN, takes a grant
        // too (`on_cts_msg`) and sends from its buffer.
        let declined = asked_read && self.peers[peer.index()].no_read;
        if declined {
            Stats::bump(&self.stats.reads_declined, 1);
            if self.data_chunk(peer) == 0 {
                // As a sender whose own rendezvous is by message is told
                // (`rndv_refusal`), rather than the sender refusing a grant
                // of packets that hold nothing.
                self.count_error();
                self.error(&format!(
                    "a rendezvous asked this rank to read the sender's memory, which it cannot, \
                     and the eager limit of {} bytes leaves no room for data packets instead: \
                     raise mtl_rustofi_eager_limit",
                    self.peers[peer.index()].eager_limit
                ));
                self.send_fin(peer, hdr.cookie, true, out);
                self.recv_done(p.req, env, 0, Status::Failed, out);
                return;
            }
        }
        let msg = asked_msg || declined;
        let read = asked_read && !declined;
        let rail = self.peers[peer.index()].rail;
        if !read && !msg && !self.rails[rail.index()].profile.tagged {
            // The sender asked for tagged data, which this rank does not
            // use (mtl_rustofi_tagged = off, or no FI_TAGGED).
            self.count_error();
            self.error("a rendezvous by tagged send arrived, but FI_TAGGED is not in use here");
            self.send_fin(peer, hdr.cookie, true, out);
            self.recv_done(p.req, env, 0, Status::Failed, out);
            return;
        }
        tracing::debug!(
            peer = peer.0,
            len = hdr.len,
            want,
            read,
            msg,
            "rendezvous: matched RTS"
        );
        let mut key = hdr.ext1;
        if read && self.fault == Fault::RmaKey {
            self.fault = Fault::None;
            key ^= 0x5a5a_5a5a_5a5a;
        }
        let tag_base = if read {
            0
        } else if msg {
            // A token that tells this transfer's data from a late packet
            // of an earlier one that held the same slot.
            self.next_tag_base += 1;
            self.next_tag_base
        } else {
            let t = self.next_tag_base & super::rndv_send::TAG_ID_MASK;
            self.next_tag_base += 1;
            t << super::rndv_send::CHUNK_BITS
        };
        let lanes = if read && want > 0 {
            self.recv_lanes(peer, hdr)
        } else {
            Vec::new()
        };
        let id = self.rndv_recv.insert(RecvRndv {
            req: p.req,
            buf: p.buf,
            peer,
            env,
            cookie: Cookie(hdr.cookie),
            want,
            truncated: hdr.len > p.buf.len() as u64,
            read,
            remote_addr: hdr.ext0,
            key,
            tag_base,
            next_off: 0,
            outstanding: 0,
            failed: false,
            mr: None,
            registering: false,
            cts_sent: false,
            abort_sent: false,
            lanes,
            lane_next: 0,
            msg: None,
        });
        if msg {
            self.grant_msg(id, out);
            return;
        }
        if want > 0 && self.rails[rail.index()].profile.mr_local {
            let access = if read { Access::Read } else { Access::Recv };
            let region = p.buf.region().slice(0, want);
            let got = self.register_user(rail, region, access, MrUse::RndvRecv(id), out);
            let r = self.rndv_recv.get_mut(id).expect("just inserted");
            r.registering = true;
            match got {
                UserMr::Pending(mr) => r.mr = Some(mr),
                UserMr::Hit { mr, key, .. } => {
                    r.mr = Some(mr);
                    self.rndv_recv_registered(id, mr, Ok(key), out);
                }
            }
            return;
        }
        self.rndv_recv_lanes(id, out);
    }

    /// Registers the receive buffer on the next lane that needs it, or
    /// goes on with the transfer once none does.
    fn rndv_recv_lanes(&mut self, id: RndvId, out: &mut Out) {
        let Some(i) = self.next_recv_lane_to_register(id) else {
            self.rndv_recv_proceed(id, out);
            return;
        };
        let r = self.rndv_recv.get(id).expect("has a lane");
        let (rail, region) = (r.lanes[i].rail, r.buf.region().slice(0, r.want));
        let got = self.register_user(rail, region, Access::Read, MrUse::RndvRecv(id), out);
        let r = self.rndv_recv.get_mut(id).expect("present");
        r.registering = true;
        match got {
            UserMr::Pending(mr) => r.lanes[i].mr = Some(mr),
            UserMr::Hit { mr, key, .. } => {
                r.lanes[i].mr = Some(mr);
                self.rndv_recv_registered(id, mr, Ok(key), out);
            }
        }
    }

    fn rndv_recv_proceed(&mut self, id: RndvId, out: &mut Out) {
        let read = self.rndv_recv.get(id).is_some_and(|r| r.read);
        if read {
            self.pump_reads(id, out);
        } else {
            self.grant(id, out);
        }
    }

    pub(super) fn rndv_recv_registered(
        &mut self,
        id: RndvId,
        mr: MrId,
        result: Result<u64, i32>,
        out: &mut Out,
    ) {
        let Some(r) = self.rndv_recv.get_mut(id) else {
            self.release_user(mr, out);
            return;
        };
        r.registering = false;
        if let Err(code) = result {
            r.failed = true;
            let len = r.want;
            self.count_error();
            self.error(&format!(
                "cannot register a receive buffer of {len} bytes: {}",
                crate::fabric::strerror(-code)
            ));
            self.finish_rndv_recv(id, out);
            return;
        }
        self.rndv_recv_lanes(id, out);
    }

    /// A data chunk of a rendezvous was reported.
    pub(super) fn chunk_done(&mut self, owner: ChunkOwner, failed: bool, out: &mut Out) {
        match owner {
            ChunkOwner::Recv(id) => {
                let Some(r) = self.rndv_recv.get_mut(id) else {
                    return;
                };
                r.outstanding -= 1;
                r.failed |= failed;
                if failed && !r.read {
                    // The sender's matching sends may never complete
                    // without these receives: tell it, and let the other
                    // receives go.
                    self.abort_recv(id, true, out);
                }
                let Some(r) = self.rndv_recv.get(id) else {
                    return;
                };
                if r.read {
                    self.pump_reads(id, out);
                } else if r.outstanding == 0 {
                    self.finish_rndv_recv(id, out);
                }
            }
            ChunkOwner::Send(cookie) => {
                let Some(s) = self.rndv_send.get_mut(&cookie) else {
                    return;
                };
                s.outstanding -= 1;
                s.failed |= failed;
                if failed {
                    self.abort_send(cookie, true, out);
                }
                let Some(s) = self.rndv_send.get(&cookie) else {
                    return;
                };
                if s.outstanding == 0 {
                    let failed = s.failed;
                    self.finish_rndv_send(cookie, failed, out);
                }
            }
        }
    }

    /// Sends the CTS that grants `want` bytes in pieces of `chunk` (the
    /// send and message protocols; `cts` carries what is particular to
    /// each).
    pub(super) fn send_grant(
        &mut self,
        peer: PeerId,
        mut cts: Header,
        cookie: Cookie,
        want: usize,
        chunk: usize,
        out: &mut Out,
    ) {
        cts.cookie = cookie.0;
        cts.ext1 = want as u64;
        cts.len = chunk as u64;
        self.send_ctrl(peer, &cts, out);
    }

    /// Ends a receive-side rendezvous: releases the buffer, tells the
    /// sender where it still waits, and completes the receive.
    pub(super) fn finish_rndv_recv(&mut self, id: RndvId, out: &mut Out) {
        let Some(r) = self.rndv_recv.remove(id) else {
            return;
        };
        // be0251a defect 4: a failed rendezvous counted its error again.
        if cfg!(feature = "be0251a-defects") && r.failed {
            self.count_error();
        }
        for mr in r.mr.into_iter().chain(r.lanes.iter().filter_map(|l| l.mr)) {
            self.release_user(mr, out);
        }
        // The sender waits for a FIN: before our CTS, after a read, and
        // after a message rendezvous of anything that it was not told
        // about already.
        let awaits_fin = r.read || !r.cts_sent || (r.msg.is_some() && !r.abort_sent);
        // A lost peer is told nothing and asks nothing.
        let live = !self.peers[r.peer.index()].lost;
        if awaits_fin && live {
            self.send_fin(r.peer, r.cookie.0, r.failed, out);
        }
        if r.failed && r.msg.is_some() && r.cts_sent && live {
            // Its sender may ask after the failed FIN (`proto/repair.rs`); a
            // lost peer's failure must not push others out.
            self.repair.note_failed(r.peer, id, r.tag_base);
        }
        let status = if r.failed {
            Status::Failed
        } else if r.truncated {
            Status::Truncated
        } else {
            Status::Ok
        };
        let bytes = if r.failed { 0 } else { r.want };
        if !self.answered_recv(id) {
            self.recv_done(r.req, r.env, bytes, status, out);
        }
    }

    /// Fails every rendezvous with a lost peer (now, or when its last
    /// chunk is reported).
    pub(super) fn rndv_fail_peer(&mut self, peer: PeerId, out: &mut Out) {
        self.index_chunks_of(peer);
        let sends: Vec<Cookie> = self
            .rndv_send
            .iter()
            .filter(|(_, s)| s.peer == peer)
            .map(|(&c, _)| c)
            .collect();
        for c in sends {
            // Its chunks to the lost peer may never complete: cancel them.
            self.abort_send(c, false, out);
            self.rndv_send_failed(c, out);
        }
        for id in self.rndv_recv.ids() {
            if self.rndv_recv.get(id).is_none_or(|r| r.peer != peer) {
                continue;
            }
            self.abort_recv(id, false, out);
            let Some(r) = self.rndv_recv.get(id) else {
                continue;
            };
            if r.outstanding == 0 && !r.registering {
                self.finish_rndv_recv(id, out);
            }
        }
        self.drop_chunk_index();
    }
}
