//! Peer liveness: a peer whose process has died, or that the provider
//! reports unreachable, is given up ([`Core::peer_lost`]) so that nothing
//! waits for it for ever.
//!
//! Evidence comes from the transport, never from silence alone: a peer
//! busy outside MPI for minutes does not progress and so answers nothing,
//! yet must not be failed. Only towards peers that something waits on (a
//! rendezvous in either role, a synchronous send, a send deferred by flow
//! control, a copied send whose packet the provider refused and that
//! waits in the queue, a receive or probe posted for that source) and that
//! have been silent for a probe
//! interval, the core sends a `Ping`:
//! - the `Ping` is a plain packet that is never injected, so a provider
//!   that knows the peer's process is gone (a reset connection on
//!   `tcp;ofi_rxm`, a retransmit limit on `udp;ofi_rxd`) reports its send
//!   as failed, and the packet failure policy gives the peer up;
//! - on a provider whose sends complete without the peer's software (its
//!   kernel or device acknowledges: tcp;ofi_rxm, efa, shm; not
//!   udp;ofi_rxd, whose acknowledgements come from the peer's progress), a
//!   `Ping` still not sent after half the timeout to a peer heard from
//!   before (so connected: accepting a new connection may take the peer's
//!   own progress), silent for as long, and sent less than `BACKLOG`
//!   bytes since it last answered a `Ping` (more may fill its socket
//!   buffers while it is busy, and the `Ping` waits behind them), failed
//!   at the transport (a connected
//!   peer's kernel otherwise takes it in microseconds, busy or not):
//!   tcp;ofi_rxm keeps such a send queued while its reconnection attempts
//!   to an exited process are refused, and reports nothing;
//! - for a same-host peer (its process id came with its address) the
//!   driver asks the kernel whether the process still exists
//!   ([`Action::CheckAlive`]) and reports [`Core::peer_gone`] if not.
//!
//! The peer's progress answers with a `Pong`; anything heard from a peer
//! makes it recent, which only saves probes. Time comes in as a value
//! ([`Core::tick_liveness`]), so the simulator runs this on its own clock.

use super::action::{Action, Event, Out, Status};
use super::ids::{Cookie, OpId, PeerId, ReqId, RndvId};
use super::tick_work::TickWork;
use super::txq::Op;
use super::Core;
use crate::matching::{PostId, Selector, Source, Tag};
use crate::wire::Kind;
use hashbrown::HashSet;
use std::collections::VecDeque;
use std::time::Duration;

/// Bytes sent to a peer since it was last shown to have read (it answered
/// a `Ping` sent after them) beyond which an unsent `Ping` proves nothing:
/// they may fill its socket buffers (a busy peer does not read them), and
/// the `Ping` waits behind them. Well below the smallest buffers of a TCP
/// connection (16 KiB sending plus 128 KiB receiving).
const BACKLOG: u64 = 64 * 1024;

/// Rounds after a peer is given up before its rendezvous stop waiting for
/// the provider's reports: at least four whole intervals, one timeout.
const ABANDON_ROUNDS: u64 = 5;

/// What the core tracks of one peer's liveness.
#[derive(Default)]
struct PeerLive {
    /// A message arrived since the last round.
    heard: bool,
    /// Something arrived from it at some time: a connection to it exists
    /// (a new one may need the peer's own progress to be accepted).
    ever_heard: bool,
    /// When something was last heard from it (or when it was first seen).
    last_heard: Duration,
    /// A `Ping` is handed over and not yet reported.
    ping_out: bool,
    /// When that `Ping` was handed over.
    ping_at: Duration,
    /// The peer's `tx_bytes` when the last `Ping` was sent.
    ping_tx: u64,
    /// Bytes the peer has been shown to have read (those before a `Ping`
    /// it answered): more sent since may wait in its socket buffers.
    tx_read: u64,
    /// A probe for this source ran since the last round.
    probed: bool,
    /// Its process id, for a peer on this host.
    pid: Option<u32>,
}

/// Liveness state of the core.
#[derive(Default)]
pub(super) struct Liveness {
    /// Probe interval; `None`: never probe (`peer_timeout` 0).
    every: Option<Duration>,
    /// The peer timeout (a `Ping` not sent after half of it failed).
    timeout: Duration,
    next_round: Duration,
    /// Rounds so far.
    round: u64,
    peers: Vec<PeerLive>,
    /// Peers given up, with the round they were given up in: their
    /// rendezvous still waiting for the provider's reports are answered
    /// a whole timeout later (see [`Core::abandon_rndv_of`]).
    lost: Vec<(PeerId, u64)>,
    /// Rendezvous whose MPI request was answered already.
    answered_recv: HashSet<RndvId>,
    answered_send: HashSet<Cookie>,
}

impl Liveness {
    fn peer(&mut self, peer: PeerId) -> &mut PeerLive {
        let i = peer.index();
        if self.peers.len() <= i {
            self.peers.resize_with(i + 1, PeerLive::default);
        }
        &mut self.peers[i]
    }
}

/// The probe interval for a peer timeout: a quarter of it, so that a dead
/// peer's probe has failed (and been resent and failed again) well within
/// the timeout.
pub(crate) fn probe_interval(timeout: Duration) -> Duration {
    timeout / 4
}

impl Core {
    /// Turns liveness probing on (`Some(peer_timeout)`) or off.
    pub(crate) fn set_peer_timeout(&mut self, timeout: Option<Duration>) {
        self.live.every = timeout.filter(|t| !t.is_zero()).map(probe_interval);
        self.live.timeout = timeout.unwrap_or_default();
    }

    /// Records a same-host peer's process id.
    pub(crate) fn set_peer_pid(&mut self, peer: PeerId, pid: u32) {
        self.live.peer(peer).pid = Some(pid);
    }

    /// Something arrived from `peer`.
    #[inline]
    pub(super) fn heard_from(&mut self, peer: PeerId) {
        if let Some(l) = self.live.peers.get_mut(peer.index()) {
            l.heard = true;
        }
    }

    /// The driver found a peer's process gone (or its address unusable).
    pub(crate) fn peer_gone(&mut self, peer: PeerId, why: &str, out: &mut Out) {
        if self.peers.get(peer.index()).is_some_and(|p| !p.lost) {
            self.error(&format!("peer {}: {why}", peer.0));
        }
        self.peer_lost(peer, out);
    }

    /// A probe for exactly `peer` found nothing: an error if the peer is
    /// lost (nothing more will come from it), else the peer is watched.
    pub(super) fn note_probed(&mut self, peer: PeerId) -> Result<(), super::CoreError> {
        if self.peers[peer.index()].lost {
            return Err(super::CoreError(format!(
                "probe for peer {} which can no longer be reached",
                peer.0
            )));
        }
        self.live.peer(peer).probed = true;
        Ok(())
    }

    /// Fails every receive posted for exactly this (lost) peer. The posted
    /// entries name their peer, so nothing is recorded per post for this:
    /// losing a peer is rare, and walks the posted queue.
    pub(super) fn fail_posted_of(&mut self, peer: PeerId, out: &mut Out) {
        let gone = self.matcher.remove_posted_where(|p| p.from == Some(peer));
        self.stats.posted_now.down(gone.len() as u64);
        for (sel, p) in gone {
            unreachable_recv(p.req, &sel, out);
        }
    }

    /// Fails a receive posted for a peer that is lost already.
    #[cold]
    pub(super) fn fail_posted(&mut self, id: PostId, sel: &Selector, out: &mut Out) {
        if let Some(p) = self.matcher.cancel(id) {
            self.stats.posted_now.down(1);
            unreachable_recv(p.req, sel, out);
        }
    }

    /// A peer was given up (see [`Core::abandon_rndv_of`]).
    pub(super) fn note_lost(&mut self, peer: PeerId) {
        if self.live.every.is_some() {
            let round = self.live.round;
            self.live.lost.push((peer, round));
        }
    }

    /// Whether a receive rendezvous's request was answered already (and
    /// forgets it: the rendezvous is ending).
    pub(super) fn answered_recv(&mut self, id: RndvId) -> bool {
        self.live.answered_recv.remove(&id)
    }

    /// Likewise for a send rendezvous.
    pub(super) fn answered_send(&mut self, cookie: Cookie) -> bool {
        self.live.answered_send.remove(&cookie)
    }

    /// Rendezvous with a peer given up a whole timeout ago (the probe
    /// interval is a quarter of it) that still wait for the provider to
    /// report their cancelled transfers: their requests fail now. Some providers never report such a transfer (shm in
    /// libfabric 1.17 reports a read from an exited process as an error
    /// without its context), and a request must not wait for ever. The
    /// rendezvous itself stays, with its registrations, until the reports
    /// come, so its ids are not reused under a late report; a transfer from
    /// a process that has exited moves no data any more.
    fn abandon_rndv_of(&mut self, peer: PeerId, out: &mut Out) {
        let mut n = 0;
        for (id, r) in self.rndv_recv.iter() {
            if r.peer == peer && self.live.answered_recv.insert(id) {
                n += 1;
                out.events.push(Event::Recv {
                    req: r.req,
                    src: r.env.src,
                    tag: r.env.tag,
                    bytes: 0,
                    status: Status::Failed,
                });
            }
        }
        for (&c, s) in self.rndv_send.iter() {
            if s.peer == peer && self.live.answered_send.insert(c) {
                n += 1;
                out.events.push(Event::Send {
                    req: s.req,
                    status: Status::Failed,
                });
            }
        }
        if n > 0 {
            self.error(&format!(
                "peer {}: {n} rendezvous failed without the provider's report of their \
                 cancelled transfers",
                peer.0
            ));
        }
    }

    /// A `Ping` arrived: answer it.
    pub(super) fn on_ping(&mut self, peer: PeerId, out: &mut Out) {
        if !self.peers[peer.index()].lost {
            let pong = self.header(Kind::Pong);
            self.send_ctrl(peer, &pong, out);
        }
    }

    /// A `Pong` arrived: the peer has read everything sent before the
    /// `Ping` it answers.
    pub(super) fn on_pong(&mut self, peer: PeerId) {
        let l = self.live.peer(peer);
        l.tx_read = l.ping_tx;
    }

    /// A `Ping` to `peer` was sent (its failure gives the peer up through
    /// the packet failure policy instead).
    pub(super) fn ping_done(&mut self, peer: PeerId) {
        self.live.peer(peer).ping_out = false;
    }

    /// A liveness round, at most once per probe interval: every peer that
    /// something waits on and that has been silent for an interval gets a
    /// `Ping` (one at a time) and, on this host, a process check.
    pub(crate) fn tick_liveness(&mut self, now: Duration, out: &mut Out) {
        let Some(every) = self.live.every else {
            return;
        };
        if now < self.live.next_round {
            return;
        }
        // The first round, or the first after this process was away from
        // MPI (busy outside it) for longer than two intervals: what it
        // saw of its peers is stale (their messages and its probes'
        // completions wait unread), so every clock starts again.
        let first = self.live.next_round.is_zero() || now > self.live.next_round + every;
        self.live.next_round = now + every;
        self.live.round += 1;
        let round = self.live.round;
        let due: Vec<PeerId> = self
            .live
            .lost
            .iter()
            .filter(|&&(_, at)| round >= at + ABANDON_ROUNDS)
            .map(|&(p, _)| p)
            .collect();
        if !due.is_empty() {
            self.live
                .lost
                .retain(|&(_, at)| round < at + ABANDON_ROUNDS);
            for peer in due {
                self.abandon_rndv_of(peer, out);
            }
        }
        let n = self.peers.len();
        if self.live.peers.len() < n {
            let start = self.live.peers.len();
            self.live.peers.resize_with(n, PeerLive::default);
            for l in &mut self.live.peers[start..] {
                l.last_heard = now;
            }
        }
        if first {
            for l in &mut self.live.peers {
                l.last_heard = now;
                l.ping_at = now;
            }
        }
        let waited = self.waited_peers();
        let timeout = self.live.timeout;
        for (i, &waited) in waited.iter().enumerate() {
            let peer = PeerId(i as u32);
            // Sends complete without the peer's software, and none to
            // another peer waits in our own queue (the Ping may wait
            // behind them; the provider refusing this peer's own, as
            // tcp;ofi_rxm does while it reconnects, is evidence).
            let acked = completes_without_peer(&self.rails[self.peers[i].rail.index()].profile)
                && !self.others_queued(peer);
            let l = &mut self.live.peers[i];
            if std::mem::take(&mut l.heard) {
                l.last_heard = now;
                l.ever_heard = true;
            }
            let probed = std::mem::take(&mut l.probed);
            if !(waited || probed) || self.peers[i].lost || now.saturating_sub(l.last_heard) < every
            {
                continue;
            }
            if let Some(pid) = l.pid {
                out.actions.push(Action::CheckAlive { peer, pid });
            }
            if !l.ping_out {
                l.ping_out = true;
                l.ping_at = now;
                l.ping_tx = self.peers[i].tx_bytes;
                tracing::debug!(peer = peer.0, "liveness probe");
                let ping = self.header(Kind::Ping);
                self.send_ping(peer, &ping, out);
            } else if acked
                && l.ever_heard
                && self.peers[i].tx_bytes.wrapping_sub(l.tx_read) < BACKLOG
                && now.saturating_sub(l.ping_at) >= timeout / 2
                && now.saturating_sub(l.last_heard) >= timeout / 2
            {
                self.peer_gone(
                    peer,
                    "a liveness probe could not be delivered within the peer timeout",
                    out,
                );
            }
        }
    }

    /// Whether request `req` of a rendezvous was answered before the
    /// provider reported its transfers (see [`Core::abandon_rndv_of`]).
    #[cfg(test)]
    pub(crate) fn answered_early(&self, req: super::ids::ReqId) -> bool {
        self.rndv_recv
            .iter()
            .any(|(id, r)| r.req == req && self.live.answered_recv.contains(&id))
            || self
                .rndv_send
                .iter()
                .any(|(c, s)| s.req == req && self.live.answered_send.contains(c))
    }

    /// Whether a peer was given up.
    #[cfg(test)]
    pub(crate) fn peer_is_lost(&self, peer: PeerId) -> bool {
        self.peers[peer.index()].lost
    }

    /// Messages from `peer` held behind a missing predecessor.
    #[cfg(test)]
    pub(crate) fn held_from(&self, peer: PeerId) -> usize {
        self.peers[peer.index()].order.held()
    }

    /// Whether operations to peers other than `peer` wait in the retry
    /// queue of `peer`'s rail.
    fn others_queued(&self, peer: PeerId) -> bool {
        let rail = &self.rails[self.peers[peer.index()].rail.index()];
        rail.retry.iter().any(|&id| {
            self.ops.get(id).is_some_and(|op| match op {
                super::txq::Op::Packet(p) => p.peer != peer,
                super::txq::Op::Chunk(c) => c.peer != peer,
            })
        })
    }

    /// Which peers something waits on (index = peer).
    pub(super) fn waited_peers(&mut self) -> Vec<bool> {
        let mut w = vec![false; self.peers.len()];
        for s in self.rndv_send.values() {
            w[s.peer.index()] = true;
        }
        for (_, r) in self.rndv_recv.iter() {
            w[r.peer.index()] = true;
        }
        for &(_, p) in self.sync_wait.values() {
            w[p.index()] = true;
        }
        for &p in self.flow.waiting() {
            w[p.index()] = true;
        }
        // Copied sends whose packet the provider refused and which waits
        // in a queue (`held`): complete only once it goes, which a dead
        // peer's refusals never let it. A packet that only waits for a
        // credit (held by transfers to other peers) says nothing of its
        // peer and does not count.
        if self.queued() {
            for r in &self.rails {
                for &id in &r.retry {
                    if let Some(Op::Packet(p)) = self.ops.get(id) {
                        if p.refused && !p.reported && !p.carried.is_none() {
                            w[p.peer.index()] = true;
                        }
                    }
                }
            }
        }
        // A walk of the posted queue, once a round, instead of a count
        // per peer kept up on every post and match.
        for p in self.matcher.posted() {
            if let Some(x) = p.from.and_then(|peer| w.get_mut(peer.index())) {
                *x = true;
            }
        }
        w
    }
}

/// Whether the rail's sends complete without the peer's software (the
/// peer's kernel or device acknowledges them), so that one not completed
/// within the peer timeout failed at the transport. Not so for
/// udp;ofi_rxd: its acknowledgements come from the peer's progress, which
/// a peer busy outside MPI does not make.
fn completes_without_peer(p: &super::RailProfile) -> bool {
    !p.provider.contains("rxd")
}

/// Reports a receive failed for its lost peer, with the source rank and
/// tag of its selector.
fn unreachable_recv(req: ReqId, sel: &Selector, out: &mut Out) {
    let src = match sel.src {
        Source::Rank(r) => r,
        Source::Any => crate::matching::ANY,
    };
    let tag = match sel.tag {
        Tag::Value(t) => t,
        _ => crate::matching::ANY,
    };
    out.events.push(Event::Recv {
        req,
        src,
        tag,
        bytes: 0,
        status: Status::Unreachable,
    });
}

impl Core {
    /// Fails the packets to a lost peer that still wait in a rail's queue:
    /// a provider may refuse them (EAGAIN) for as long as the connection
    /// stays broken, and a blocking send waits until the queues are empty
    /// (`rustofi_tx_queued`). Rendezvous chunks are left to the rendezvous
    /// abort, which drops queued ones itself.
    pub(super) fn drop_queued_packets_of(&mut self, peer: PeerId, out: &mut Out) {
        for r in 0..self.rails.len() {
            let ops = &self.ops;
            let (theirs, keep): (VecDeque<OpId>, VecDeque<OpId>) =
                std::mem::take(&mut self.rails[r].retry)
                    .into_iter()
                    .partition(|&id| matches!(ops.get(id), Some(Op::Packet(p)) if p.peer == peer));
            self.rails[r].retry = keep;
            for id in theirs {
                // A queued packet holds no credit; `op_failed` returns the
                // one an operation in flight holds.
                self.rails[r].inflight += 1;
                self.op_failed(id, "its peer can no longer be reached", out);
            }
        }
        let left = self.rails.iter().any(|r| !r.retry.is_empty());
        let queued = left || self.rails.iter().any(|r| !r.rx_retry.is_empty());
        self.work.set(TickWork::QUEUED, queued);
        self.stats
            .tx_queued
            .store(left, std::sync::atomic::Ordering::Relaxed);
    }
}
