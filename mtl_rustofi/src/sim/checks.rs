//! What must hold after every run.
//!
//! Messages with the same envelope (sender, receiver, context, tag) form a
//! stream, and MPI matches a stream in send order whatever the selectors:
//! the k-th consumer (receive or matched probe, in issue order) that got a
//! message of a stream got its k-th message. That assigns every completed
//! receive its message, whose data, length, status and envelope are then
//! checked. Across tags, non-overtaking is checked pairwise: a consumer
//! issued earlier must not get a later message of a sender while an
//! earlier message of that sender, which its selector accepts, goes to a
//! consumer issued later.

use super::fabric::{ReqKind, SlotState, World};
use super::workload::{eager_limit, pattern, CANARY};
use crate::matching::Envelope;
use crate::proto::{Access, Event, Stats, Status};
use std::collections::HashMap;

impl World {
    pub(crate) fn check(&self) {
        self.check_requests();
        self.check_quiet();
    }

    fn alive(&self, n: usize) -> bool {
        self.nodes[n].alive
    }

    fn check_requests(&self) {
        let may_fail = self.faults.any_failure() || self.plan.allow_unmatched;
        // Which request sent each message (refused ones never existed).
        let mut sent_by = vec![None; self.plan.msgs.len()];
        for (i, r) in self.reqs.iter().enumerate() {
            if let ReqKind::Send { msg } = r.kind {
                if !r.refused {
                    sent_by[msg] = Some(i);
                }
                if !self.alive(r.node) || r.refused {
                    continue;
                }
                match r.done {
                    Some((_, Event::Send { status, .. })) => {
                        if status == Status::Truncated || (status == Status::Failed && !may_fail) {
                            self.fail(&format!("send of message {msg} ended {status:?}"));
                        }
                    }
                    _ => self.fail(&format!("send of message {msg} never completed")),
                }
            }
        }
        let mut streams: HashMap<(usize, u32, i32, i32), Vec<usize>> = HashMap::new();
        for (i, m) in self.plan.msgs.iter().enumerate() {
            if sent_by[i].is_some() {
                let s = m.spec;
                streams
                    .entry((s.to, s.ctx, s.from as i32, s.tag))
                    .or_default()
                    .push(i);
            }
        }
        // Consumers that got a message, in issue order.
        let mut cons: Vec<usize> = (0..self.reqs.len())
            .filter(|&i| {
                let r = &self.reqs[i];
                self.alive(r.node)
                    && matches!(r.kind, ReqKind::Recv { .. })
                    && matches!(r.done, Some((_, Event::Recv { status, .. }))
                        if status != Status::Unreachable)
            })
            .collect();
        if let Some(i) = self
            .reqs
            .iter()
            .position(|r| self.alive(r.node) && r.done.is_none() && !r.refused)
        {
            self.fail(&format!("request {i} never completed"));
        }
        // A receive failed as unreachable only for a source given up.
        let dead = self.dead.map(|d| crate::matching::Source::Rank(d as i32));
        for (i, r) in self.reqs.iter().enumerate() {
            if let (
                ReqKind::Recv { consumer, .. },
                Some((
                    _,
                    Event::Recv {
                        status: Status::Unreachable,
                        ..
                    },
                )),
            ) = (r.kind, r.done)
            {
                let src = self.plan.consumers[consumer].sel.src;
                if Some(src) != dead && !self.plan.allow_unmatched {
                    self.fail(&format!("receive {i} from {src:?} failed as unreachable"));
                }
            }
        }
        cons.sort_by_key(|&i| self.reqs[i].issued);
        let mut next: HashMap<(usize, u32, i32, i32), usize> = HashMap::new();
        let mut got = vec![None; self.plan.msgs.len()];
        let mut by_pair: HashMap<(usize, i32, u32), Vec<(usize, usize)>> = HashMap::new();
        for &ri in &cons {
            let r = &self.reqs[ri];
            let ReqKind::Recv { consumer, probed } = r.kind else {
                unreachable!()
            };
            let Some((
                _,
                Event::Recv {
                    src,
                    tag,
                    bytes,
                    status,
                    ..
                },
            )) = r.done
            else {
                unreachable!()
            };
            let con = self.plan.consumers[consumer];
            let env = Envelope {
                ctx: con.sel.ctx,
                src,
                tag,
            };
            if !con.sel.matches(&env) {
                self.fail(&format!("receive {ri} ({:?}) got {env:?}", con.sel));
            }
            let key = (r.node, env.ctx, src, tag);
            let k = next.entry(key).or_insert(0);
            let Some(&mi) = streams.get(&key).and_then(|s| s.get(*k)) else {
                self.fail(&format!(
                    "receive {ri} got {env:?} on node {}, which nobody sent",
                    r.node
                ));
            };
            *k += 1;
            got[mi] = Some(ri);
            by_pair
                .entry((r.node, src, env.ctx))
                .or_default()
                .push((ri, mi));
            let m = self.plan.msgs[mi].spec;
            if let Some(p) = probed {
                if (p.src, p.tag, p.len) != (src, tag, m.len as u64) {
                    self.fail(&format!(
                        "matched probe of receive {ri} said {p:?}, message {mi} is {m:?}"
                    ));
                }
            }
            let data = r.buf.bytes();
            if status == Status::Failed {
                if !may_fail {
                    self.fail(&format!(
                        "receive {ri} of message {mi} failed in a run without faults"
                    ));
                }
                // Only a packet the receiving provider lost fails an
                // eager message.
                if m.len <= eager_limit(&self.rails, m.from, m.to) && self.damaged == 0 {
                    self.fail(&format!("receive {ri} of eager message {mi} failed"));
                }
                continue;
            }
            let want = m.len.min(data.len());
            let want_status = if m.len > data.len() {
                Status::Truncated
            } else {
                Status::Ok
            };
            if bytes != want || status != want_status {
                self.fail(&format!(
                    "receive {ri} of message {mi} ({} bytes into {}): {bytes} bytes, {status:?}",
                    m.len,
                    data.len()
                ));
            }
            if let Some(at) = (0..want).find(|&i| data[i] != pattern(mi, i)) {
                self.fail(&format!(
                    "receive {ri} of message {mi}: wrong byte at offset {at} of {want}"
                ));
            }
            if let Some(at) = (want..data.len()).find(|&i| data[i] != CANARY) {
                self.fail(&format!(
                    "receive {ri} of message {mi}: written past the message at {at}"
                ));
            }
        }
        // Non-overtaking across tags.
        for ((node, src, ctx), list) in &by_pair {
            for (a, &(ra, ma)) in list.iter().enumerate() {
                let ReqKind::Recv { consumer, .. } = self.reqs[ra].kind else {
                    unreachable!()
                };
                let sel = self.plan.consumers[consumer].sel;
                for &(rb, mb) in &list[a + 1..] {
                    let b = self.plan.msgs[mb].spec;
                    let env_b = Envelope {
                        ctx: *ctx,
                        src: *src,
                        tag: b.tag,
                    };
                    if mb < ma && sel.matches(&env_b) {
                        self.fail(&format!(
                            "node {node}: receive {ra} ({sel:?}) got message {ma} from {src} while the earlier \
                             message {mb} it matches went to the later receive {rb}"
                        ));
                    }
                }
            }
        }
        // Probes saw the head of a stream.
        for &(node, at, sel, info) in &self.probes {
            if !self.alive(node) {
                continue;
            }
            let key = (node, sel.ctx, info.src, info.tag);
            let before = cons
                .iter()
                .filter(|&&ri| {
                    let r = &self.reqs[ri];
                    let Some((_, Event::Recv { src, tag, .. })) = r.done else {
                        return false;
                    };
                    let ReqKind::Recv { consumer, .. } = r.kind else {
                        return false;
                    };
                    r.node == node
                        && r.issued < at
                        && (self.plan.consumers[consumer].sel.ctx, src, tag)
                            == (key.1, key.2, key.3)
                })
                .count();
            let Some(&mi) = streams.get(&key).and_then(|s| s.get(before)) else {
                self.fail(&format!(
                    "node {node}: probe {sel:?} saw {info:?}, which nobody sent"
                ));
            };
            if self.plan.msgs[mi].spec.len as u64 != info.len {
                self.fail(&format!(
                    "node {node}: probe {sel:?} saw {info:?}, the stream's next message is {mi}"
                ));
            }
        }
        // Synchronous sends complete after their receive was issued.
        for (mi, m) in self.plan.msgs.iter().enumerate() {
            let (Some(si), Some(ri)) = (sent_by[mi], got[mi]) else {
                if sent_by[mi].is_some() && !self.plan.allow_unmatched {
                    self.fail(&format!("message {mi} ({:?}) was never received", m.spec));
                }
                continue;
            };
            if let Some((
                t,
                Event::Send {
                    status: Status::Ok, ..
                },
            )) = self.reqs[si].done
            {
                if m.spec.sync && t < self.reqs[ri].issued {
                    self.fail(&format!(
                        "synchronous send of message {mi} completed before its receive was posted"
                    ));
                }
            }
        }
        if self.unsatisfied_mprobes > 0 && !self.plan.allow_unmatched {
            self.fail("a matched probe never found its message");
        }
    }

    /// Messages node `n` holds out of order from the dead node while it
    /// has not given it up.
    pub(crate) fn held_from_dead_unannounced(&self, n: usize) -> usize {
        let Some(d) = self.dead else {
            return 0;
        };
        match self.nodes[n].peer_of[d] {
            Some(p) if !self.nodes[n].core.peer_is_lost(p) => self.nodes[n].core.held_from(p),
            _ => 0,
        }
    }

    /// Nothing left at quiesce.
    fn check_quiet(&self) {
        for (n, node) in self.nodes.iter().enumerate() {
            if !node.alive {
                continue;
            }
            let l = node.core.leftovers();
            let strict = [
                ("ops", l.ops),
                ("registrations", l.registrations),
                ("rndv_send", l.rndv_send),
                ("rndv_recv", l.rndv_recv),
                ("sync_wait", l.sync_wait),
                ("retry", l.retry),
                ("rx_unposted", l.rx_unposted),
                ("taken", l.taken),
                ("posted", l.posted),
                ("tx_buffers_out", l.tx_buffers_out),
            ];
            for (what, v) in strict {
                if v != 0 {
                    self.fail(&format!("node {n}: {what} = {v} at quiesce"));
                }
            }
            // A peer given up by one side only (the other side never hears
            // of it) leaves that other side holding what follows the hole.
            let one_sided = self.plan.allow_unmatched && self.dead.is_none();
            // What the dead node sent after a packet that died with it is
            // held until this node gives it up, and that needs someone to
            // say so: the runtime (which may keep quiet) or a liveness probe
            // (sent only while something waits on the peer, which a held
            // packet is not). The run may end before either; a peer given
            // up must hold nothing (`Core::peer_lost` drops it).
            let held = l.held_out_of_order - self.held_from_dead_unannounced(n);
            if !one_sided && (l.unexpected != 0 || held != 0) {
                self.fail(&format!("node {n}: messages left at quiesce: {l:?}"));
            }
            if node.core.busy() {
                self.fail(&format!("node {n}: core busy at quiesce"));
            }
            for (r, rs) in node.rails.iter().enumerate() {
                if let Some(s) = rs.slots.iter().position(|&s| s != SlotState::Posted) {
                    self.fail(&format!(
                        "node {n}: receive buffer {s} of rail {r} not posted at quiesce"
                    ));
                }
                if !rs.pending.is_empty() || rs.tagged_left() != 0 {
                    self.fail(&format!(
                        "node {n}: rail {r}: packets or tagged messages left in the fabric"
                    ));
                }
            }
            if !node.posted.is_empty() {
                self.fail(&format!(
                    "node {n}: {} operations still in flight",
                    node.posted.len()
                ));
            }
            if let Some(g) = node
                .mrs
                .values()
                .find(|g| g.access != Access::Send || g.released || node.is_user_mem(g.region))
            {
                self.fail(&format!(
                    "node {n}: registration of {:?} ({:?}) left at quiesce",
                    g.region, g.access
                ));
            }
            // The MPI_T levels follow the queues they describe.
            let st = &node.stats;
            let levels = [
                ("posted_now", Stats::get(&st.posted_now.now), l.posted),
                (
                    "unexpected_now",
                    Stats::get(&st.unexpected_now.now),
                    l.unexpected,
                ),
            ];
            for (what, level, queue) in levels {
                if level != queue as u64 {
                    self.fail(&format!("node {n}: {what} = {level}, queue holds {queue}"));
                }
            }
            if l.unexpected == 0 && Stats::get(&st.unexpected_bytes_now.now) != 0 {
                self.fail(&format!(
                    "node {n}: unexpected bytes left with an empty queue"
                ));
            }
            let errors = Stats::get(&node.stats.errors);
            if !self.faults.any_error() && !self.plan.allow_unmatched && errors != 0 {
                self.fail(&format!(
                    "node {n}: {errors} errors counted in a run without faults"
                ));
            }
        }
    }
}

/// What a set of runs exercised, to check that the matrix covers what it
/// claims.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Coverage {
    pub(crate) runs: u64,
    pub(crate) sends: u64,
    pub(crate) refused: u64,
    pub(crate) rndv: u64,
    pub(crate) empty: u64,
    pub(crate) sync: u64,
    pub(crate) recv_ok: u64,
    pub(crate) truncated: u64,
    pub(crate) recv_failed: u64,
    /// Receives for a given-up source that no message matched.
    pub(crate) recv_unreachable: u64,
    pub(crate) probes_failed: u64,
    pub(crate) pings: u64,
    /// Deaths that no one announced (only liveness probes could find them).
    pub(crate) unannounced: u64,
    pub(crate) send_failed: u64,
    pub(crate) mrecv: u64,
    pub(crate) probes: u64,
    pub(crate) cancel_won: u64,
    pub(crate) cancel_lost: u64,
    pub(crate) cancelled_at_end: u64,
    pub(crate) coalesced: u64,
    pub(crate) unexpected: u64,
    /// Sum of the unexpected-queue high-water marks (MPI_T).
    pub(crate) unexpected_peak: u64,
    pub(crate) errors: u64,
    pub(crate) deaths: u64,
    pub(crate) deaths_mid_rndv: u64,
    pub(crate) dups: u64,
    pub(crate) injected: u64,
    pub(crate) inlined: u64,
    pub(crate) inline_refused: u64,
    /// Copied sends whose completion waited for a rail to take their
    /// refused packet.
    pub(crate) held_sends: u64,
    /// Read rendezvous a node answered as message rendezvous (it cannot
    /// read the sender).
    pub(crate) reads_declined: u64,
    /// Of those, the ones declined by a node whose own rendezvous are
    /// reads (only the pair is unreadable: `Rails::profiles_of`).
    pub(crate) reads_declined_by_readers: u64,
    /// Tagged receives the core cancelled (an aborted send rendezvous).
    pub(crate) chunks_cancelled: u64,
    /// Rendezvous served a cached registration.
    pub(crate) mr_hits: u64,
    /// Memory releases reported to a node.
    pub(crate) releases: u64,
    /// Read rendezvous striped, and bytes read through stripe rails.
    pub(crate) striped: u64,
    pub(crate) stripe_bytes: u64,
    /// Data packets delivered damaged, and losses the cores counted.
    pub(crate) damaged: u64,
    /// Packets delivered cut short, and the cores' repairs.
    pub(crate) garbled: u64,
    pub(crate) repairs: u64,
    pub(crate) rx_lost: u64,
}

impl Coverage {
    pub(crate) fn add(&mut self, w: &World) {
        self.runs += 1;
        for r in &w.reqs {
            match (r.kind, r.done) {
                (ReqKind::Send { msg }, _) => {
                    let m = w.plan.msgs[msg].spec;
                    self.sends += 1;
                    self.refused += r.refused as u64;
                    self.rndv += (m.len > eager_limit(&w.rails, m.from, m.to)) as u64;
                    self.empty += (m.len == 0) as u64;
                    self.sync += m.sync as u64;
                    if let Some((
                        _,
                        Event::Send {
                            status: Status::Failed,
                            ..
                        },
                    )) = r.done
                    {
                        self.send_failed += 1;
                    }
                }
                (ReqKind::Recv { probed, .. }, Some((_, Event::Recv { status, .. }))) => {
                    self.mrecv += probed.is_some() as u64;
                    match status {
                        Status::Ok => self.recv_ok += 1,
                        Status::Truncated => self.truncated += 1,
                        Status::Failed => self.recv_failed += 1,
                        Status::Unreachable => self.recv_unreachable += 1,
                    }
                }
                _ => {}
            }
        }
        self.reads_declined_by_readers += w
            .nodes
            .iter()
            .enumerate()
            .filter(|&(i, _)| w.rails.profiles_of(i).iter().all(|p| !p.rndv_msg))
            .map(|(_, n)| Stats::get(&n.stats.reads_declined))
            .sum::<u64>();
        self.probes += w.probes.len() as u64;
        self.probes_failed += w.probes_failed as u64;
        self.pings += w.pings as u64;
        self.unannounced +=
            (w.dead.is_some() && w.plan.death.is_some_and(|d| d.lost_after == u64::MAX)) as u64;
        self.cancel_won += w.cancel_won as u64;
        self.cancel_lost += w.cancel_lost as u64;
        self.cancelled_at_end += w.cancelled_at_end as u64;
        self.deaths += w.dead.is_some() as u64;
        self.deaths_mid_rndv += w.died_mid_rndv as u64;
        self.dups += w.dups as u64;
        self.damaged += w.damaged as u64;
        self.garbled += w.garbled as u64;
        self.injected += w.injected as u64;
        self.inlined += w.inlined as u64;
        self.inline_refused += w.inline_refused as u64;
        self.chunks_cancelled += w.chunks_cancelled as u64;
        self.releases += w.releases as u64;
        for n in &w.nodes {
            self.mr_hits += Stats::get(&n.stats.mr_hits);
            self.striped += Stats::get(&n.stats.striped);
            self.stripe_bytes += Stats::get(&n.stats.stripe_bytes);
            self.coalesced += Stats::get(&n.stats.coalesced);
            self.held_sends += Stats::get(&n.stats.held_sends);
            self.reads_declined += Stats::get(&n.stats.reads_declined);
            self.unexpected += Stats::get(&n.stats.unexpected);
            self.unexpected_peak += Stats::get(&n.stats.unexpected_now.peak);
            self.errors += Stats::get(&n.stats.errors);
            self.rx_lost += Stats::get(&n.stats.rx_lost);
            self.repairs += Stats::get(&n.stats.rndv_repairs);
        }
    }
}
