//! The simulator's side of peer liveness (`proto/liveness.rs`): the clock
//! the cores' liveness rounds run on, the peer of a receive's source, a
//! node busy outside MPI (it handles none of its events for a while, as a
//! process that does not call into MPI), and the process check of
//! same-host peers.

use super::fabric::{Ev, ReqKind, World};
use crate::matching::{Selector, Source};
use crate::proto::ids::PeerId;
use crate::proto::Out;
use std::time::Duration;

impl World {
    /// The peer of a receive's or probe's specific source on node `n`.
    pub(crate) fn source_peer(&self, n: usize, sel: &Selector) -> Option<PeerId> {
        match sel.src {
            Source::Rank(r) => self.nodes[n]
                .peer_of
                .get(usize::try_from(r).ok()?)
                .copied()
                .flatten(),
            Source::Any => None,
        }
    }

    /// A liveness round of node `n` at the simulated time.
    pub(crate) fn live_tick(&mut self, n: usize) {
        if self.plan.peer_timeout.is_none() || self.is_busy(n) {
            return;
        }
        let mut out = Out::new();
        self.nodes[n]
            .core
            .tick_liveness(Duration::from_nanos(self.now), &mut out);
        self.run_out(n, out);
    }

    /// A repair round of node `n` at the simulated time (a node busy
    /// outside MPI makes none, as a process that does not progress).
    pub(crate) fn repair_tick(&mut self, n: usize) {
        if self.is_busy(n) {
            return;
        }
        let mut out = Out::new();
        self.nodes[n]
            .core
            .tick_repair(Duration::from_nanos(self.now), &mut out);
        self.run_out(n, out);
    }

    /// Whether node `n` is busy outside MPI now.
    pub(crate) fn is_busy(&self, n: usize) -> bool {
        self.plan
            .busy
            .is_some_and(|b| b.node == n && (b.from..b.until).contains(&self.now))
    }

    /// An event of a busy node waits until the node is back; others are
    /// handed back for handling now.
    pub(crate) fn defer_if_busy(&mut self, ev: Ev) -> Option<Ev> {
        let node = match &ev {
            Ev::Step { node, .. }
            | Ev::Tick { node }
            | Ev::Drain { node, .. }
            | Ev::Complete { node, .. }
            | Ev::Canceled { node, .. }
            | Ev::RxError { node, .. }
            | Ev::ReadDo { node, .. }
            | Ev::PeerLost { node, .. }
            | Ev::Release { node, .. } => *node,
            Ev::Deliver { to, .. }
            | Ev::DeliverDamaged { to, .. }
            | Ev::TaggedArrive { to, .. } => *to,
            Ev::Death { .. } => return Some(ev),
        };
        match self.plan.busy {
            Some(b) if self.is_busy(node) => {
                self.busy_deferred += 1;
                self.schedule(b.until - self.now, ev);
                None
            }
            _ => Some(ev),
        }
    }

    /// A survivor still has a receive posted for exactly a dead node's
    /// source, or a send to it incomplete (a synchronous send whose
    /// message arrived before the death waits for an acknowledgement
    /// that will not come), while liveness probing is on: the run is not
    /// over (the probes must fail it).
    pub(crate) fn waits_on_dead(&self) -> bool {
        let Some(d) = self.dead else {
            return false;
        };
        self.plan.peer_timeout.is_some()
            && self.reqs.iter().any(|r| {
                if !self.nodes[r.node].alive || r.done.is_some() {
                    return false;
                }
                match r.kind {
                    ReqKind::Recv { consumer, .. } => {
                        r.post.is_some()
                            && self.plan.consumers[consumer].sel.src == Source::Rank(d as i32)
                    }
                    ReqKind::Send { msg } => !r.refused && self.plan.msgs[msg].spec.to == d,
                }
            })
    }

    /// The process check of a same-host peer: the node of `peer` on node
    /// `n` is dead.
    pub(crate) fn check_alive(&mut self, n: usize, peer: PeerId, out: &mut Out) {
        let Some(d) = self.nodes[n].peer_of.iter().position(|&p| p == Some(peer)) else {
            self.fail(&format!("node {n}: process check of unknown peer {peer:?}"));
        };
        self.alive_checks += 1;
        if !self.nodes[d].alive {
            self.nodes[n]
                .core
                .peer_gone(peer, "simulated process exit", out);
        }
    }
}
