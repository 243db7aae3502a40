//! The event loop of a run: workload commands, deliveries, completions,
//! ticks, the death of a node, and the quiesce at the end.

use super::fabric::{slot, Ev, Req, ReqKind, SlotState, World};
use super::workload::{pattern, Buf, Cmd, ConsumerKind, CANARY, POISON};
use crate::driver::shm::short;
use crate::proto::ids::{RailId, ReqId};
use crate::proto::{Event, Out, SendArgs, Sent, Status};
use crate::usermem::Region;
use crate::wire::RailKind;

impl World {
    /// Plays the plan until every node is quiet.
    pub(crate) fn run(&mut self) {
        for n in 0..self.nodes.len() {
            let mut out = Out::new();
            self.nodes[n].core.start(&mut out);
            self.run_out(n, out);
            let d = self.rng.range(0, super::fabric::TICK);
            self.schedule(d, Ev::Tick { node: n });
        }
        let script = std::mem::take(&mut self.plan.script);
        for &(t, node, cmd) in &script {
            self.schedule(t, Ev::Step { node, cmd });
        }
        if let Some(d) = self.plan.death {
            self.schedule(d.at, Ev::Death { node: d.node });
        }
        self.settle();
        // Chunks sent for tagged receives that could not be posted stay
        // with the provider; a real one keeps them until the endpoint
        // closes.
        let deferred = std::mem::take(&mut self.deferred_trecvs);
        self.orphans.extend(deferred);
        for (n, r, from, tag) in std::mem::take(&mut self.orphans) {
            self.nodes[n].rails[r].drop_unexpected(from, tag);
        }
        if self.dead.is_some() || self.plan.allow_unmatched {
            self.cancel_leftover_receives();
            self.settle();
        }
        self.release_caches();
    }

    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&n| self.nodes[n].alive)
    }

    /// Whether every live core is idle with all its buffers posted.
    fn quiet(&self) -> bool {
        self.live().all(|n| {
            let c = &self.nodes[n].core;
            let l = c.leftovers();
            !c.busy() && l.rx_unposted == 0 && l.retry == 0
        }) && !self.waits_on_dead()
    }

    /// Every core's tick-work byte agrees with what it stands for.
    fn check_tick_work(&self) {
        for (n, node) in self.nodes.iter().enumerate() {
            if !node.core.tick_work_exact() {
                self.fail(&format!(
                    "node {n}: the tick-work byte disagrees with its sources"
                ));
            }
        }
    }

    /// Runs events until nothing but ticks is left and the cores are idle.
    fn settle(&mut self) {
        let mut idle_rounds = 0;
        loop {
            if self.busy_events == 0 {
                if self.quiet() {
                    return;
                }
                idle_rounds += 1;
                if idle_rounds > 2_000 {
                    self.fail("hang: the cores are busy but nothing is in flight");
                }
                self.now += super::fabric::TICK;
                for n in self.live().collect::<Vec<_>>() {
                    if self.is_busy(n) {
                        continue;
                    }
                    let mut out = Out::new();
                    self.nodes[n].core.tick(&mut out);
                    self.run_out(n, out);
                    self.live_tick(n);
                    self.repair_tick(n);
                }
                self.check_tick_work();
                continue;
            }
            idle_rounds = 0;
            let q = self.pop();
            self.steps += 1;
            if self.steps > super::fabric::MAX_STEPS {
                self.fail("hang: too many events");
            }
            if let Some(q) = self.defer_if_busy(q) {
                self.handle(q);
            }
            self.check_tick_work();
            if self.plan.stall.is_some() {
                self.watch_flow();
            }
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Tick { node } => {
                if self.nodes[node].alive {
                    let mut out = Out::new();
                    self.nodes[node].core.tick(&mut out);
                    self.run_out(node, out);
                    self.live_tick(node);
                    self.repair_tick(node);
                    let d = super::fabric::TICK + self.rng.below(500);
                    self.schedule(d, Ev::Tick { node });
                }
            }
            Ev::Step { node, cmd } => {
                if let Cmd::Mprobe(..) = cmd {
                    self.mprobe_polls -= 1;
                }
                if self.nodes[node].alive {
                    self.step(node, cmd);
                }
            }
            Ev::Deliver {
                to,
                rail,
                from,
                pkt,
            } => self.arrive(to, rail, from, pkt, false),
            Ev::DeliverDamaged {
                to,
                rail,
                from,
                pkt,
            } => self.arrive(to, rail, from, pkt, true),
            Ev::Drain { node, rail } => {
                if self.nodes[node].alive {
                    self.drain(node, rail);
                }
            }
            Ev::Complete { node, op, ok } => {
                if !self.nodes[node].alive {
                    return;
                }
                let is_packet = self.reported(node, op);
                let mut out = Out::new();
                if ok || !is_packet {
                    self.forget(node, op);
                }
                if ok {
                    self.nodes[node].core.on_complete(op, &mut out);
                } else {
                    self.nodes[node]
                        .core
                        .on_error(op, "simulated error completion", &mut out);
                }
                self.run_out(node, out);
            }
            Ev::Canceled { node, op } => {
                if !self.nodes[node].alive {
                    return;
                }
                self.reported(node, op);
                self.forget(node, op);
                let mut out = Out::new();
                self.nodes[node].core.on_canceled(op, &mut out);
                self.run_out(node, out);
            }
            Ev::RxError {
                node,
                rail,
                slot: s,
            } => {
                if !self.nodes[node].alive {
                    return;
                }
                self.nodes[node].rails[rail].slots[s] = self.slot_after_use(rail);
                let mut out = Out::new();
                self.nodes[node].core.on_rx_error(
                    RailId(rail as u8),
                    slot(s),
                    false,
                    "simulated receive error",
                    &[],
                    &mut out,
                );
                self.run_out(node, out);
                // A slot the driver keeps armed takes what waited meanwhile
                // (elsewhere the core's repost does, when it is executed).
                if self.rails.profiles[rail].rx_kept
                    && !self.nodes[node].rails[rail].pending.is_empty()
                {
                    self.schedule(1, Ev::Drain { node, rail });
                }
            }
            Ev::ReadDo {
                node,
                op,
                rail,
                from,
                local,
                addr,
                key,
                fail,
            } => {
                if !self.nodes[node].alive {
                    return;
                }
                let ok =
                    !fail && self.nodes[from].alive && self.do_read(from, rail, local, addr, key);
                self.reported(node, op);
                self.forget(node, op);
                let mut out = Out::new();
                if ok {
                    self.nodes[node].core.on_complete(op, &mut out);
                } else {
                    self.nodes[node]
                        .core
                        .on_error(op, "simulated read error", &mut out);
                }
                self.run_out(node, out);
            }
            Ev::TaggedArrive {
                to,
                rail,
                from,
                tag,
                data,
            } => {
                if self.nodes[to].alive && self.nodes[from].alive {
                    self.tagged_arrive(to, rail, from, tag, data);
                }
            }
            Ev::Release { node, req } => self.release(node, req),
            Ev::Death { node } => self.die(node),
            Ev::PeerLost { node, dead } => {
                if self.nodes[node].alive {
                    let peer = self.nodes[node].peer_of[dead].expect("a peer");
                    let mut out = Out::new();
                    self.nodes[node].core.peer_lost(peer, &mut out);
                    self.run_out(node, out);
                }
            }
        }
    }

    /// What a receive buffer becomes once its packet (or error) was
    /// handed to the core: idle until the core posts it again, or, on a
    /// rail whose driver keeps its slots armed, posted still.
    fn slot_after_use(&self, rail: usize) -> SlotState {
        if self.rails.profiles[rail].rx_kept {
            SlotState::Posted
        } else {
            SlotState::Idle
        }
    }

    /// A packet reaches node `to`: it takes a posted buffer, now or when
    /// the node next takes packets in.
    fn arrive(&mut self, to: usize, rail: usize, from: usize, pkt: Vec<u8>, damaged: bool) {
        if !self.nodes[to].alive || !self.nodes[from].alive {
            return;
        }
        self.nodes[to].rails[rail]
            .pending
            .push_back((from, pkt, damaged));
        let stalled = self.stalled_for(to);
        if stalled > 0 {
            self.schedule(stalled, Ev::Drain { node: to, rail });
        } else {
            self.drain(to, rail);
        }
    }

    /// Delivers held packets into posted receive buffers.
    fn drain(&mut self, n: usize, rail: usize) {
        let after = self.slot_after_use(rail);
        loop {
            let rs = &mut self.nodes[n].rails[rail];
            if rs.pending.is_empty() {
                return;
            }
            let Some(s) = rs.slots.iter().position(|&st| st == SlotState::Posted) else {
                return;
            };
            let (from, pkt, damaged) = rs.pending.pop_front().expect("not empty");
            rs.slots[s] = after;
            let mut out = Out::new();
            // A short packet of the own shared-memory rail (see
            // `SendInline`): decoded as the driver decodes it, its sender
            // the ring's peer (node `from`, named `from + 1`).
            let local = self.rails.profiles[rail].kind == RailKind::Local;
            let short = (local && !damaged)
                .then(|| short::decode(&pkt, from as u64 + 1))
                .flatten();
            let core = &mut self.nodes[n].core;
            if damaged {
                // The header and a little of the payload were placed.
                let got = &pkt[..pkt.len().min(crate::wire::EXT_LEN + 8)];
                core.on_rx_error(
                    RailId(rail as u8),
                    slot(s),
                    false,
                    "simulated truncation",
                    got,
                    &mut out,
                );
            } else if let Some((head, payload)) = short {
                core.on_ring_eager(RailId(rail as u8), &head, payload, &mut out);
            } else {
                core.on_packet(RailId(rail as u8), slot(s), &pkt, &mut out);
            }
            self.run_out(n, out);
        }
    }

    /// RMA read of `local.len` bytes of node `from`'s registered memory.
    /// False (an error completion) on a wrong key or out-of-bounds access.
    fn do_read(&mut self, from: usize, rail: usize, local: Region, addr: u64, key: u64) -> bool {
        let virt = self.rails.profiles[rail].mr_virt_addr;
        let target = &self.nodes[from];
        let Some(reg) = target
            .mrs
            .values()
            .find(|g| g.rail == rail && g.key == key && !g.failed)
        else {
            return false;
        };
        if reg.released {
            self.fail(&format!(
                "node {from}: a read with key {key} reaches a registration of memory released since"
            ));
        }
        if reg.access != crate::proto::Access::RemoteRead {
            return false;
        }
        let start = if virt {
            addr as usize
        } else {
            reg.region.addr.wrapping_add(addr as usize)
        };
        let src = Region {
            addr: start,
            len: local.len,
        };
        if !reg.region.contains(src) {
            return false;
        }
        if !target.is_user_mem(src) {
            self.fail(&format!(
                "node {from}: registered {src:?} is no request's memory"
            ));
        }
        let data = super::fabric::read_region(src);
        super::fabric::write_region(local, &data);
        true
    }

    /// Books the report of an operation; true if it is a packet send.
    fn reported(&mut self, n: usize, op: crate::proto::ids::OpId) -> bool {
        let node = &mut self.nodes[n];
        let Some(p) = node.posted.remove(&op) else {
            self.fail(&format!(
                "node {n}: report of {op:?}, which is not in flight"
            ));
        };
        if p.credit {
            node.outstanding[p.rail] -= 1;
        }
        if let Some((head, payload, h)) = p.check {
            let mut now = super::fabric::read_region(head);
            if let Some(pl) = payload {
                now.extend(super::fabric::read_region(pl));
            }
            if super::fabric::hash(&now) != h {
                self.fail(&format!(
                    "node {n}: memory of packet {op:?} changed while it was in flight"
                ));
            }
            return true;
        }
        false
    }

    /// The death of a node: nothing more to or from it; survivors' tagged
    /// receives from it stay posted, as with a real provider, until their
    /// core, told of the loss later, cancels them.
    fn die(&mut self, d: usize) {
        if !self.nodes[d].alive {
            return;
        }
        self.dead = Some(d);
        self.nodes[d].alive = false;
        let lost_after = self.plan.death.map_or(10_000, |x| x.lost_after);
        for n in self.live().collect::<Vec<_>>() {
            for rail in 0..self.nodes[n].rails.len() {
                self.nodes[n].rails[rail].tunexp.retain(|m| m.from != d);
                self.nodes[n].rails[rail]
                    .pending
                    .retain(|(f, _, _)| *f != d);
            }
            // u64::MAX: the runtime never tells (liveness probes must).
            if lost_after != u64::MAX {
                self.schedule(lost_after, Ev::PeerLost { node: n, dead: d });
            }
        }
    }

    /// Runs one workload command of node `n`.
    fn step(&mut self, n: usize, cmd: Cmd) {
        match cmd {
            Cmd::Send(i) => {
                let m = self.plan.msgs[i];
                let s = m.spec;
                let data: Vec<u8> = (0..s.len).map(|k| pattern(i, k)).collect();
                let req = self.new_req(n, ReqKind::Send { msg: i }, data);
                let args = SendArgs {
                    peer: self.nodes[n].peer_of[s.to].expect("a peer"),
                    ctx: s.ctx,
                    src: n as i32,
                    tag: s.tag,
                    buf: self.reqs[req].buf.user(),
                    sync: s.sync,
                    req: ReqId(req),
                };
                let mut out = Out::new();
                // As the engine does: an inline packet goes after every
                // action of the send's output (and what they led to), its
                // completion with it.
                let (res, inline) = match self.nodes[n].core.send(args, &mut out) {
                    Ok(Sent::Inline(p)) => (Ok(()), Some(p)),
                    Ok(Sent::Out) => (Ok(()), None),
                    Err(e) => (Err(e), None),
                };
                match res {
                    Ok(()) if m.doomed => self.fail(&format!(
                        "node {n}: a send of {} bytes was accepted on a rail without a rendezvous protocol",
                        s.len
                    )),
                    Err(e) if !m.doomed && !self.plan.allow_unmatched => {
                        self.fail(&format!("node {n}: send {i} refused: {e:?}"))
                    }
                    Err(_) => self.reqs[req].refused = true,
                    Ok(()) => {}
                }
                self.run_out(n, out);
                if let Some(p) = inline {
                    let mut last = Out::new();
                    p.queue(&mut last);
                    self.run_out(n, last);
                }
            }
            Cmd::Consume(c) => match self.plan.consumers[c].kind {
                ConsumerKind::Mprobe => self.try_mprobe(n, c, 0),
                ConsumerKind::Recv => {
                    self.post_recv(n, c);
                }
                ConsumerKind::CancelRace { after } => {
                    let req = self.post_recv(n, c);
                    self.schedule(
                        after,
                        Ev::Step {
                            node: n,
                            cmd: Cmd::Cancel(req),
                        },
                    );
                }
            },
            Cmd::Mprobe(c, stalls) => self.try_mprobe(n, c, stalls),
            Cmd::Probe(sel) => {
                let mut out = Out::new();
                let from = self.source_peer(n, &sel);
                let r = self.nodes[n].core.probe(&sel, from, &mut out);
                self.clock += 1;
                match r {
                    Ok(Some(info)) => self.probes.push((n, self.clock, sel, info)),
                    Ok(None) => {}
                    Err(_) => self.probe_failed(n, &sel),
                }
                self.run_out(n, out);
            }
            Cmd::Cancel(req) => {
                let (post, consumer) = match self.reqs[req].kind {
                    ReqKind::Recv { consumer, .. } => (self.reqs[req].post, consumer),
                    ReqKind::Send { .. } => unreachable!("only receives are cancelled"),
                };
                let Some(pid) = post else { return };
                let mut out = Out::new();
                let cancelled = self.nodes[n].core.cancel(pid, &mut out);
                let done_before = self.reqs[req].done.is_some();
                self.run_out(n, out);
                if !cancelled {
                    self.cancel_lost += 1;
                }
                if cancelled {
                    self.cancel_won += 1;
                    if done_before
                        || !matches!(self.reqs[req].done, Some((_, Event::Cancelled { .. })))
                    {
                        self.fail(&format!(
                            "node {n}: cancel succeeded without a Cancelled event"
                        ));
                    }
                    self.post_recv(n, consumer);
                }
            }
        }
    }

    fn new_req(&mut self, n: usize, kind: ReqKind, data: Vec<u8>) -> usize {
        let (buf, root) = match kind {
            ReqKind::Send { msg } => self.send_buf(n, msg, data),
            ReqKind::Recv { .. } => (Buf::new(data), None),
        };
        let len = self.nodes[n].user_mem.entry(buf.addr()).or_insert(0);
        *len = (*len).max(buf.len());
        self.clock += 1;
        let id = self.reqs.len();
        if let Some(r) = root {
            self.reqs[r].lent_to = Some(id);
        }
        self.reqs.push(Req {
            node: n,
            kind,
            buf,
            issued: self.clock,
            done: None,
            refused: false,
            post: None,
            root: root.unwrap_or(id),
            lent_to: None,
        });
        id
    }

    fn post_recv(&mut self, n: usize, c: usize) -> usize {
        let con = self.plan.consumers[c];
        let req = self.new_req(
            n,
            ReqKind::Recv {
                consumer: c,
                probed: None,
            },
            vec![CANARY; con.buf_len],
        );
        let mut out = Out::new();
        let ub = self.reqs[req].buf.user();
        let from = self.source_peer(n, &con.sel);
        self.reqs[req].post = self.nodes[n]
            .core
            .recv(con.sel, from, ub, ReqId(req), &mut out);
        self.run_out(n, out);
        req
    }

    fn try_mprobe(&mut self, n: usize, c: usize, stalls: u32) {
        let con = self.plan.consumers[c];
        let mut out = Out::new();
        let from = self.source_peer(n, &con.sel);
        let got = self.nodes[n].core.mprobe(&con.sel, from, &mut out);
        self.run_out(n, out);
        let got = match got {
            Ok(got) => got,
            Err(_) => {
                self.probe_failed(n, &con.sel);
                return;
            }
        };
        match got {
            Some((info, msg)) => {
                let req = self.new_req(
                    n,
                    ReqKind::Recv {
                        consumer: c,
                        probed: Some(info),
                    },
                    vec![CANARY; con.buf_len],
                );
                let ub = self.reqs[req].buf.user();
                let mut out = Out::new();
                if let Err(e) = self.nodes[n].core.mrecv(msg, ub, ReqId(req), &mut out) {
                    self.fail(&format!(
                        "node {n}: mrecv of a matched message refused: {e:?}"
                    ));
                }
                self.run_out(n, out);
            }
            None => {
                // Nothing else can happen any more: the message will not come.
                let stuck = self.busy_events == self.mprobe_polls && self.quiet();
                let stalls = if stuck { stalls + 1 } else { 0 };
                if stalls > 20 {
                    self.unsatisfied_mprobes += 1;
                    return;
                }
                self.mprobe_polls += 1;
                let d = self.rng.range(200, 3_000);
                self.schedule(
                    d,
                    Ev::Step {
                        node: n,
                        cmd: Cmd::Mprobe(c, stalls),
                    },
                );
            }
        }
    }

    /// Records MPI completions of node `n` (after the actions of the same
    /// batch were executed).
    pub(crate) fn record(&mut self, n: usize, events: Vec<Event>) {
        for e in events {
            if let Event::Recv { status, .. } | Event::Send { status, .. } = e {
                if matches!(status, Status::Failed | Status::Unreachable) {
                    self.first_failure.get_or_insert(self.now);
                }
            }
            let req = match e {
                Event::Recv { req, .. } | Event::Send { req, .. } | Event::Cancelled { req } => req,
            };
            let Some(r) = self.reqs.get(req.0) else {
                self.fail(&format!("node {n}: event for unknown request: {e:?}"));
            };
            if r.node != n {
                self.fail(&format!(
                    "node {n}: event for a request of node {}: {e:?}",
                    r.node
                ));
            }
            if let Some((_, first)) = r.done {
                self.fail(&format!(
                    "node {n}: request completed twice: {first:?} then {e:?}"
                ));
            }
            if r.refused {
                self.fail(&format!("node {n}: event for a refused send: {e:?}"));
            }
            // A copied send is complete once a rail has taken its packet,
            // never while the packet waits in the queue (`proto::held`).
            if matches!(
                e,
                Event::Send {
                    status: Status::Ok,
                    ..
                }
            ) && self.nodes[n].core.queued_carrying(req)
            {
                self.fail(&format!(
                    "node {n}: send completed while its packet waits in the queue: {e:?}"
                ));
            }
            let kind_ok = matches!(
                (r.kind, e),
                (ReqKind::Send { .. }, Event::Send { .. })
                    | (
                        ReqKind::Recv { .. },
                        Event::Recv { .. } | Event::Cancelled { .. }
                    )
            );
            if !kind_ok {
                self.fail(&format!(
                    "node {n}: event of the wrong kind for {:?}: {e:?}",
                    r.kind
                ));
            }
            let region = Region {
                addr: r.buf.addr(),
                len: r.buf.len(),
            };
            // A rendezvous with a peer given up long ago answers its
            // request without waiting for its transfers' reports (the
            // peer is dead: they move nothing).
            if region.len > 0 && !self.nodes[n].core.answered_early(req) {
                // A registration the cache keeps between transfers may
                // outlive the request; one a transfer still uses may not.
                let node = &self.nodes[n];
                if let Some((_, g)) = node.mrs.iter().find(|(&mr, g)| {
                    g.region.addr < region.addr + region.len
                        && region.addr < g.region.addr + g.region.len
                        && node.core.mr_in_transfer(mr)
                }) {
                    self.fail(&format!(
                        "node {n}: request completed while its memory is still registered ({:?}): {e:?}",
                        g.region
                    ));
                }
            }
            self.clock += 1;
            let r = &mut self.reqs[req.0];
            r.done = Some((self.clock, e));
            if let ReqKind::Send { .. } = r.kind {
                r.buf.fill(POISON);
            }
            self.maybe_release(n, req.0);
        }
    }

    /// End of a run with a lost peer: receives that can never match are
    /// cancelled (each must still be cancellable).
    /// A probe failed: only right if its source is given up (dead, or
    /// lost one-sidedly in a run that allows it).
    fn probe_failed(&mut self, n: usize, sel: &crate::matching::Selector) {
        let dead = self.dead.map(|d| crate::matching::Source::Rank(d as i32));
        if Some(sel.src) != dead && !self.plan.allow_unmatched {
            self.fail(&format!(
                "node {n}: probe {sel:?} failed, its source is alive"
            ));
        }
        self.probes_failed += 1;
    }

    fn cancel_leftover_receives(&mut self) {
        for req in 0..self.reqs.len() {
            let r = &self.reqs[req];
            if r.done.is_some() || r.refused || !self.nodes[r.node].alive {
                continue;
            }
            let n = r.node;
            let Some(pid) = r.post else {
                self.fail(&format!("node {n}: request {req} never completed"));
            };
            let mut out = Out::new();
            if !self.nodes[n].core.cancel(pid, &mut out) {
                self.fail(&format!(
                    "node {n}: receive {req} matched but never completed"
                ));
            }
            self.cancelled_at_end += 1;
            self.run_out(n, out);
        }
    }
}
