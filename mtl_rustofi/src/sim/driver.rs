//! The simulated provider: executes the actions of a core (posts,
//! sends, reads, tagged transfers, registrations) the way a provider
//! would, with the run's faults, and reports their outcome later.

use super::fabric::{hash, read_region, write_region};
use super::fabric::{Ev, Fate, Inject, PostKind, PostedOp, Reg, SlotState, TMsg, TRecv, World};
use crate::driver::shm::short;
use crate::proto::ids::{MrId, OpId};
use crate::proto::{Access, Action, Out, PostError, Posted, RESENDS};
use crate::usermem::Region;

/// Bytes of a garbled packet that arrive (`Inject::Garbled`): fewer than
/// a header, as `udp;ofi_rxd` was seen to complete a receive.
const GARBLED_LEN: usize = 16;

impl World {
    /// A chunk's id is free again once reported (a packet's is reused by
    /// its resends).
    pub(crate) fn forget(&mut self, n: usize, op: OpId) {
        self.forget_op(n, op);
    }

    pub(crate) fn pop(&mut self) -> Ev {
        let q = self.queue.pop().expect("events are queued");
        if !matches!(q.ev, Ev::Tick { .. }) {
            self.busy_events -= 1;
        }
        self.now = q.t;
        q.ev
    }

    /// A tagged message reaches node `n`.
    pub(crate) fn tagged_arrive(
        &mut self,
        n: usize,
        rail: usize,
        from: usize,
        tag: u64,
        data: Option<Vec<u8>>,
    ) {
        let rs = &mut self.nodes[n].rails[rail];
        match rs
            .tposted
            .iter()
            .position(|t| t.from == from && t.tag == tag)
        {
            Some(i) => {
                let t = rs.tposted.remove(i);
                self.tagged_match(n, t, data);
            }
            None if rs.tcanceled.remove(&(from, tag)) => {
                // Its receive was cancelled: the provider drops it.
            }
            None => {
                if rs.tunexp.iter().any(|m| m.from == from && m.tag == tag) {
                    self.fail(&format!(
                        "node {n}: two tagged messages from {from} with tag {tag:#x}"
                    ));
                }
                rs.tunexp.push(TMsg { from, tag, data });
            }
        }
    }

    fn forget_op(&mut self, n: usize, op: OpId) {
        self.nodes[n].attempts.remove(&op);
        self.nodes[n].fails.remove(&op);
    }

    fn note_posted(
        &mut self,
        n: usize,
        op: OpId,
        rail: usize,
        check: Option<(Region, Option<Region>, u64)>,
    ) {
        self.note_posted_as(n, op, rail, check, true);
    }

    fn note_posted_as(
        &mut self,
        n: usize,
        op: OpId,
        rail: usize,
        check: Option<(Region, Option<Region>, u64)>,
        credit: bool,
    ) {
        let node = &mut self.nodes[n];
        if node
            .posted
            .insert(
                op,
                PostedOp {
                    rail,
                    credit,
                    check,
                },
            )
            .is_some()
        {
            self.fail(&format!(
                "node {n}: operation {op:?} posted while in flight"
            ));
        }
        if !credit {
            return;
        }
        node.outstanding[rail] += 1;
        let depth = self.rails.profiles[rail].tx_depth;
        if self.nodes[n].outstanding[rail] > depth {
            self.fail(&format!(
                "node {n}: more than tx_depth {depth} operations in flight"
            ));
        }
    }

    /// With FI_MR_LOCAL, the operation must name a registration of the
    /// rail covering its local memory.
    fn check_mr(
        &self,
        n: usize,
        rail: usize,
        mr: Option<MrId>,
        local: Region,
        access: Access,
        what: &str,
    ) -> bool {
        if !self.rails.profiles[rail].mr_local {
            return true;
        }
        let Some(mr) = mr else {
            self.fail(&format!(
                "node {n}: {what} without a registration on an FI_MR_LOCAL rail"
            ));
        };
        let Some(reg) = self.nodes[n].mrs.get(&mr) else {
            self.fail(&format!(
                "node {n}: {what} names {mr:?}, which is not registered"
            ));
        };
        if reg.released {
            self.fail(&format!(
                "node {n}: {what} of {local:?} names {mr:?}, a registration of memory released since"
            ));
        }
        if reg.failed {
            return false;
        }
        if reg.rail != rail || !reg.region.contains(local) || reg.access != access {
            self.fail(&format!(
                "node {n}: {what} of {local:?} names {mr:?} ({:?} of {:?} on rail {}), which does not cover it",
                reg.access, reg.region, reg.rail
            ));
        }
        true
    }

    /// Executes one action of node `n`.
    pub(crate) fn exec(&mut self, n: usize, a: Action, out: &mut Out) {
        match a {
            Action::PostRecv { rail, slot } => {
                let (r, s) = (rail.index(), slot.0 as usize);
                let inj = self.ask(n, r, PostKind::PostRecv, None, None, None);
                let Fate::Posted(fail) = self.post_fate(
                    n,
                    Posted::Rx(rail, slot),
                    inj,
                    self.faults.err_rx,
                    true,
                    out,
                ) else {
                    return;
                };
                let st = &mut self.nodes[n].rails[r].slots[s];
                if *st != SlotState::Idle {
                    self.fail(&format!(
                        "node {n}: receive buffer {s} of rail {r} posted twice"
                    ));
                }
                if fail {
                    *st = SlotState::Failing;
                    let d = self.completion_delay();
                    self.schedule(
                        d,
                        Ev::RxError {
                            node: n,
                            rail: r,
                            slot: s,
                        },
                    );
                } else {
                    *st = SlotState::Posted;
                    if !self.nodes[n].rails[r].pending.is_empty() {
                        self.schedule(1, Ev::Drain { node: n, rail: r });
                    }
                }
            }
            Action::Send {
                op,
                rail,
                dest,
                head,
                mr,
                payload,
                inject,
            } => {
                let r = rail.index();
                let to = dest.0 as usize;
                if self.plan.refuse_dead && !self.nodes[to].alive {
                    self.nodes[n]
                        .core
                        .on_post_failed(Posted::Op(op), PostError::Again, out);
                    return;
                }
                // An injected packet's registration is checked but does not
                // matter: `fi_inject` takes no descriptor.
                let reg_ok = self.check_mr(n, r, mr, head, Access::Send, "Send") || inject;
                if payload.is_some() && self.rails.profiles[r].mr_local {
                    self.fail(&format!(
                        "node {n}: zero-copy payload on an FI_MR_LOCAL rail"
                    ));
                }
                // The first message's header (its payload may be apart).
                let first = crate::wire::Header::decode_head(&read_region(head))
                    .ok()
                    .map(|h| (h.kind, h.tag));
                let kind = first.map(|(k, _)| k);
                if kind == Some(crate::wire::Kind::Data) {
                    // A message rendezvous's data packet is its chunk.
                    self.maybe_die_on_chunk(n, to);
                }
                if kind == Some(crate::wire::Kind::Ping) {
                    self.pings += 1;
                }
                let inj = self.ask(
                    n,
                    r,
                    PostKind::Send,
                    Some(op),
                    None,
                    first.map(|(k, t)| (k, Some(t))),
                );
                let fails = self.nodes[n].fails.get(&op).copied().unwrap_or(0);
                // A recovering provider: random failures stop before the
                // core would give the peer up.
                let transient = fails < RESENDS as u32;
                // A buffer whose registration failed fails its post, as the
                // real driver's does. The core moves the packet to another
                // buffer without using up a resend (REBUFFERS times), so
                // random registration failures give a peer up only after
                // REBUFFERS + RESENDS + 1 of them in a row on one packet.
                let inj = if !reg_ok { Inject::Hard(-22) } else { inj };
                let damaged = inj == Inject::Damaged
                    || (inj == Inject::Normal
                        && kind == Some(crate::wire::Kind::Data)
                        && self.rng.chance(self.faults.lose_data));
                let rate = if transient { self.faults.err_send } else { 0 };
                let Fate::Posted(mut fail) =
                    self.post_fate(n, Posted::Op(op), inj, rate, transient, out)
                else {
                    return;
                };
                let mut pkt = read_region(head);
                if let Some(p) = payload {
                    pkt.extend(read_region(p));
                }
                let cap = self.rails.profiles[r].buf_size;
                if pkt.len() > cap {
                    self.fail(&format!(
                        "node {n}: packet of {} bytes for buffers of {cap}",
                        pkt.len()
                    ));
                }
                let h = hash(&pkt);
                let prof = &self.rails.profiles[r];
                let repairable = prof.rndv_msg
                    && prof.kind != crate::wire::RailKind::Local
                    && matches!(
                        kind,
                        Some(
                            crate::wire::Kind::Data
                                | crate::wire::Kind::Cts
                                | crate::wire::Kind::Fin
                        )
                    );
                if inj == Inject::Garbled
                    || (inj == Inject::Normal
                        && !damaged
                        && repairable
                        && self.rng.chance(self.faults.garble))
                {
                    self.garbled += 1;
                    // Delivered with a length it never had: the receiver
                    // refuses it as malformed, and what it carried is lost.
                    pkt.truncate(GARBLED_LEN);
                }
                if inj == Inject::Misplaced {
                    let (mut hdr, _) = crate::wire::Header::decode_prefix(&pkt)
                        .unwrap_or_else(|_| self.fail("a misplaced packet has no header"));
                    hdr.ext0 += 1;
                    let at = hdr.wire_len();
                    assert_eq!(
                        hdr.encode(&mut pkt[..at]),
                        at,
                        "the header keeps its length"
                    );
                }
                if inject {
                    let limit = self.rails.profiles[r].inject_size;
                    if payload.is_some() || pkt.len() > limit {
                        self.fail(&format!(
                            "node {n}: inject of {} bytes (inject size {limit})",
                            pkt.len()
                        ));
                    }
                    // fi_inject: the provider has copied the packet, and
                    // no completion follows. A reliable endpoint delivers
                    // it unless the peer is gone (an error after an inject
                    // is never reported to the sender).
                    if damaged && self.nodes[to].alive {
                        self.deliver_damaged(n, to, r, pkt);
                    } else if self.nodes[to].alive {
                        self.inject_deliver(n, to, r, pkt);
                    }
                    self.forget_op(n, op);
                    self.injected += 1;
                    self.nodes[n].core.on_complete(op, out);
                    return;
                }
                self.note_posted(n, op, r, Some((head, payload, h)));
                if !self.nodes[to].alive {
                    fail = true;
                }
                if fail {
                    *self.nodes[n].fails.entry(op).or_insert(0) += 1;
                }
                if damaged && !fail {
                    self.deliver_damaged(n, to, r, pkt);
                } else if !fail || self.rng.chance(self.faults.dup * 5) {
                    let d = self.latency();
                    if self.rng.chance(self.faults.dup) {
                        self.dups += 1;
                        let d2 = self.latency();
                        self.schedule(
                            d2,
                            Ev::Deliver {
                                to,
                                rail: r,
                                from: n,
                                pkt: pkt.clone(),
                            },
                        );
                    }
                    self.schedule(
                        d,
                        Ev::Deliver {
                            to,
                            rail: r,
                            from: n,
                            pkt,
                        },
                    );
                }
                // A peer that takes nothing in holds up the transmit.
                let mut d = self.completion_delay() + self.stalled_for(to);
                if !self.nodes[to].alive {
                    // A provider that retries a refused connection keeps
                    // the send (tcp;ofi_rxm) until its endpoint closes.
                    d += self.plan.held_to_dead;
                }
                self.schedule(
                    d,
                    Ev::Complete {
                        node: n,
                        op,
                        ok: !fail,
                    },
                );
            }
            Action::SendInline {
                rail,
                peer,
                dest,
                head,
                payload,
                req,
            } => {
                let r = rail.index();
                let to = dest.0 as usize;
                let profile = &self.rails.profiles[r];
                let (inline, limit) = (profile.inline, profile.inject_size);
                let body = read_region(payload.region());
                // The own shared-memory rail writes a small message in its
                // rings' short format, as the driver does.
                let pkt = if profile.kind == crate::wire::RailKind::Local
                    && body.len() <= short::MAX_PAYLOAD
                {
                    short::packet(&crate::wire::EagerHead::decode(&head), &body)
                } else {
                    [&head[..], &body].concat()
                };
                if !inline || pkt.len() > limit {
                    self.fail(&format!(
                        "node {n}: inline packet of {} bytes on a rail with inline {inline}, \
                         inject size {limit}",
                        pkt.len()
                    ));
                }
                let inj = self.ask(
                    n,
                    r,
                    PostKind::Send,
                    None,
                    None,
                    Some((crate::wire::Kind::Eager, None)),
                );
                // No error completion can follow an inline packet.
                let refused = match self.draw(inj, 0, true) {
                    _ if self.plan.refuse_dead && !self.nodes[to].alive => Some(PostError::Again),
                    Inject::Again => Some(PostError::Again),
                    Inject::Hard(code) => Some(PostError::Hard(code)),
                    _ => None,
                };
                if let Some(why) = refused {
                    self.inline_refused += 1;
                    self.nodes[n]
                        .core
                        .on_inline_refused(rail, peer, &head, payload, req, why, out);
                    return;
                }
                // Copied like an inject: no completion follows, and an
                // error after the post is never reported to the sender.
                if self.nodes[to].alive {
                    self.inject_deliver(n, to, r, pkt);
                }
                self.inlined += 1;
            }
            Action::Read {
                op,
                rail,
                src,
                local,
                mr,
                remote_addr,
                key,
            } => {
                let r = rail.index();
                self.check_mr(n, r, mr, local, Access::Read, "Read");
                if !self.nodes[n].is_user_mem(local) {
                    self.fail(&format!(
                        "node {n}: Read into {local:?}, which is no request's memory"
                    ));
                }
                if self.rails.cannot_read(n, src.0 as usize) {
                    self.fail(&format!(
                        "node {n}: Read from node {}, whose memory it cannot read (its read \
                         rendezvous must be answered with a message grant)",
                        src.0
                    ));
                }
                self.maybe_die_on_chunk(n, src.0 as usize);
                let inj = self.ask(n, r, PostKind::Read, Some(op), Some(local), None);
                let fail =
                    match self.post_fate(n, Posted::Op(op), inj, self.faults.err_read, true, out) {
                        Fate::Posted(f) => f,
                        Fate::Hard => return self.forget_op(n, op),
                        Fate::Again => return,
                    };
                self.note_posted(n, op, r, None);
                let d = self.latency();
                self.schedule(
                    d,
                    Ev::ReadDo {
                        node: n,
                        op,
                        rail: r,
                        from: src.0 as usize,
                        local,
                        addr: remote_addr,
                        key,
                        fail,
                    },
                );
            }
            Action::TaggedSend {
                op,
                rail,
                dest,
                local,
                mr,
                tag,
            } => {
                let r = rail.index();
                let to = dest.0 as usize;
                self.check_mr(n, r, mr, local, Access::Send, "TaggedSend");
                if !self.nodes[n].is_user_mem(local) {
                    self.fail(&format!(
                        "node {n}: TaggedSend from {local:?}, which is no request's memory"
                    ));
                }
                self.maybe_die_on_chunk(n, to);
                let inj = self.ask(n, r, PostKind::TaggedSend, Some(op), Some(local), None);
                let fate = self.post_fate(n, Posted::Op(op), inj, self.faults.err_tsend, true, out);
                // Like a real provider, a tagged send that is rejected or
                // fails delivers nothing: the receive posted for it stays
                // posted until the receiver's core, told by the sender's
                // abort, cancels it.
                let fail = match fate {
                    Fate::Again => return,
                    Fate::Hard => {
                        self.forget_op(n, op);
                        return;
                    }
                    Fate::Posted(f) => f || !self.nodes[to].alive,
                };
                let data = read_region(local);
                self.note_posted(n, op, r, None);
                if !fail {
                    let d = self.latency();
                    self.schedule(
                        d,
                        Ev::TaggedArrive {
                            to,
                            rail: r,
                            from: n,
                            tag,
                            data: Some(data),
                        },
                    );
                }
                let d = self.completion_delay();
                self.schedule(
                    d,
                    Ev::Complete {
                        node: n,
                        op,
                        ok: !fail,
                    },
                );
            }
            Action::TaggedRecv {
                op,
                rail,
                src,
                local,
                mr,
                tag,
            } => {
                let r = rail.index();
                let from = src.0 as usize;
                self.check_mr(n, r, mr, local, Access::Recv, "TaggedRecv");
                if !self.nodes[n].is_user_mem(local) {
                    self.fail(&format!(
                        "node {n}: TaggedRecv into {local:?}, which is no request's memory"
                    ));
                }
                let inj = self.ask(n, r, PostKind::TaggedRecv, Some(op), Some(local), None);
                let fail = match self.post_fate(
                    n,
                    Posted::Op(op),
                    inj,
                    self.faults.err_trecv,
                    true,
                    out,
                ) {
                    Fate::Posted(f) => f,
                    Fate::Hard => {
                        self.orphans.push((n, r, from, tag));
                        return self.forget_op(n, op);
                    }
                    Fate::Again => {
                        // Retried later, unless the core aborts the
                        // rendezvous first: then its chunk is an orphan.
                        self.deferred_trecvs.insert((n, r, from, tag));
                        return;
                    }
                };
                self.deferred_trecvs.remove(&(n, r, from, tag));
                self.note_posted_as(n, op, r, None, false);
                if !self.nodes[from].alive {
                    let d = self.completion_delay();
                    self.schedule(
                        d,
                        Ev::Complete {
                            node: n,
                            op,
                            ok: false,
                        },
                    );
                    return;
                }
                let t = TRecv {
                    op,
                    from,
                    tag,
                    local,
                    fail,
                };
                let rs = &mut self.nodes[n].rails[r];
                match rs
                    .tunexp
                    .iter()
                    .position(|m| m.from == from && m.tag == tag)
                {
                    Some(i) => {
                        let m = rs.tunexp.remove(i);
                        self.tagged_match(n, t, m.data);
                    }
                    None => rs.tposted.push(t),
                }
            }
            Action::Register {
                mr,
                rail,
                region,
                access,
                requested_key,
            } => {
                let r = rail.index();
                if self.nodes[n].mrs.contains_key(&mr) {
                    self.fail(&format!(
                        "node {n}: {mr:?} registered while still registered"
                    ));
                }
                let inj = self.ask(n, r, PostKind::Register, None, Some(region), None);
                let fail = match inj {
                    Inject::Normal => self.rng.chance(self.faults.reg_fail),
                    Inject::Clean => false,
                    _ => true,
                };
                let key = if self.rails.profiles[r].mr_prov_key {
                    loop {
                        let k = self.rng.next();
                        if !self.nodes[n]
                            .mrs
                            .values()
                            .any(|g| g.rail == r && g.key == k)
                        {
                            break k;
                        }
                    }
                } else {
                    if requested_key == 0
                        || self.nodes[n]
                            .mrs
                            .values()
                            .any(|g| g.rail == r && !g.failed && g.key == requested_key)
                    {
                        self.fail(&format!(
                            "node {n}: requested key {requested_key} is in use or zero"
                        ));
                    }
                    requested_key
                };
                self.nodes[n].mrs.insert(
                    mr,
                    Reg {
                        rail: r,
                        region,
                        access,
                        key,
                        failed: fail,
                        released: false,
                    },
                );
                let res = if fail { Err(-12) } else { Ok(key) };
                self.nodes[n].core.on_registered(mr, res, out);
            }
            Action::CheckAlive { peer, .. } => self.check_alive(n, peer, out),
            Action::Cancel { op, rail } => {
                // Like a provider: a tagged receive still waiting for its
                // message is taken back and reports its cancellation; any
                // other operation has finished or is under way, and its
                // report comes as scheduled.
                if !self.nodes[n].posted.contains_key(&op) {
                    self.stray_cancels += 1;
                }
                let rs = &mut self.nodes[n].rails[rail.index()];
                if let Some(i) = rs.tposted.iter().position(|t| t.op == op) {
                    let t = rs.tposted.remove(i);
                    rs.tcanceled.insert((t.from, t.tag));
                    self.chunks_cancelled += 1;
                    let d = self.completion_delay();
                    self.schedule(d, Ev::Canceled { node: n, op });
                }
            }
            Action::Deregister { mr } => {
                if self.nodes[n].mrs.remove(&mr).is_none() {
                    self.fail(&format!(
                        "node {n}: release of {mr:?}, which is not registered"
                    ));
                }
            }
        }
    }

    /// A tagged receive meets its message (`None`: the send failed).
    fn tagged_match(&mut self, n: usize, t: TRecv, data: Option<Vec<u8>>) {
        let ok = match data {
            Some(d) if !t.fail => {
                if d.len() != t.local.len {
                    self.fail(&format!(
                        "node {n}: tagged chunk of {} bytes for a receive of {}",
                        d.len(),
                        t.local.len
                    ));
                }
                write_region(t.local, &d);
                true
            }
            _ => false,
        };
        let d = self.completion_delay();
        self.schedule(
            d,
            Ev::Complete {
                node: n,
                op: t.op,
                ok,
            },
        );
    }

    /// Delivers a packet damaged: it takes a buffer and fails it.
    fn deliver_damaged(&mut self, from: usize, to: usize, rail: usize, pkt: Vec<u8>) {
        self.damaged += 1;
        let d = self.latency();
        self.schedule(
            d,
            Ev::DeliverDamaged {
                to,
                rail,
                from,
                pkt,
            },
        );
    }

    /// Delivers an injected packet (perhaps twice, under `dup`).
    fn inject_deliver(&mut self, from: usize, to: usize, rail: usize, pkt: Vec<u8>) {
        if self.rng.chance(self.faults.dup) {
            self.dups += 1;
            let d = self.latency();
            let pkt = pkt.clone();
            self.schedule(
                d,
                Ev::Deliver {
                    to,
                    rail,
                    from,
                    pkt,
                },
            );
        }
        let d = self.latency();
        self.schedule(
            d,
            Ev::Deliver {
                to,
                rail,
                from,
                pkt,
            },
        );
    }

    /// Death "in the middle of a rendezvous": at the first chunk involving
    /// the doomed node.
    fn maybe_die_on_chunk(&mut self, a: usize, b: usize) {
        if let Some(d) = self.plan.death {
            if d.on_first_chunk && self.dead.is_none() && (a == d.node || b == d.node) {
                self.dead = Some(d.node);
                self.died_mid_rndv = true;
                self.schedule(0, Ev::Death { node: d.node });
            }
        }
    }
}
