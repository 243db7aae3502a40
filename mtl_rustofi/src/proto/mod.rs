//! The protocol core: MPI matching, peers and per-peer ordering, the
//! protocols (eager, coalescing, rendezvous by read and by send, their
//! control packets), the transmit queue with its credits and retry policy,
//! and request state. It performs no I/O.
//!
//! Inputs are calls: commands from the MTL API ([`Core::send_at_once`],
//! [`Core::recv`], ...), packets received on a rail ([`Core::on_packet`]),
//! the outcome of every operation it asked for ([`Core::on_complete`],
//! [`Core::on_error`], [`Core::on_post_failed`], [`Core::on_registered`])
//! and a clock tick ([`Core::tick`]). Outputs go into an [`Out`]: actions
//! for a driver to execute in order, and finished MPI requests.
//!
//! One file per concern, in the manner of UCX's `ucp/tag` and `ucp/rndv`:
//! - [`ids`]: typed ids and the slab they index;
//! - [`action`]: actions, events and the driver's reports;
//! - [`txbuf`]: transmit bounce buffers, their pools and registration;
//! - [`txq`]: operations, credits, retries and the failure policy;
//! - [`peers`]: peers, incoming packets and per-peer ordering;
//! - [`recv`]: posted receives, probes, cancels and delivery of a match;
//! - [`eager`]: eager and synchronous eager messages;
//! - [`coalesce`]: several small eager messages in one packet;
//! - [`held`]: a copied send completes once the provider takes its packet;
//! - [`rndv`]: what both rendezvous protocols share (RTS, FIN, state);
//! - [`abort`]: a failed rendezvous cancels its chunks and tells the peer;
//! - [`liveness`]: probes towards waited-on peers, and failing what waits
//!   on a peer given up;
//! - [`rndv_read`]: the receiver reads the sender's buffer (FI_RMA);
//! - [`rndv_send`]: the receiver grants tags, the sender sends (FI_TAGGED);
//! - [`stripe`]: a read rendezvous spread over several NICs;
//! - [`rndv_msg`]: the receiver grants, the sender sends data packets into
//!   its bounce buffers (FI_MSG only);
//! - [`stall`]: a report of what waits when nothing has moved for a while;
//! - [`mrcache`]: registrations of user buffers kept for reuse;
//! - [`usermr`]: how rendezvous registrations go through that cache.

mod abort;
pub(crate) mod action;
mod coalesce;
mod eager;
mod flow;
mod held;
pub(crate) mod ids;
mod liveness;
#[cfg(test)]
mod lost_recv_tests;
mod mrcache;
mod peers;
mod recv;
mod repair;
mod rndv;
mod rndv_msg;
mod rndv_read;
mod rndv_send;
mod rx_error;
mod stall;
mod stripe;
#[cfg(test)]
mod test_core;
mod tick_work;
mod txbuf;
#[cfg(test)]
mod txbuf_tests;
mod txq;
mod usermr;

pub(crate) use action::{Access, Action, Event, Out, PostError, Posted, Status};
pub(crate) use eager::{InlineSend, SendArgs, Sent};
#[cfg(test)]
pub(crate) use flow::OP_OVERHEAD;
pub(crate) use mrcache::CacheBound;
pub(crate) use recv::ProbeInfo;
#[cfg(test)]
pub(crate) use txbuf::SMALL_BUF;
#[cfg(test)]
pub(crate) use txq::{REBUFFERS, RESENDS};

use crate::config::Fault;
use crate::matching::{Envelope, Matcher};
use crate::wire::{Header, RailKind};
use hashbrown::HashMap;
use ids::{Cookie, MrId, MsgId, OpId, PeerId, RailId, ReqId, RndvId, Slab};
use peers::Peer;
use recv::{PostedRecv, Unexpected};
use rndv::{RecvRndv, SendRndv};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tick_work::TickWork;
use txbuf::{MrUse, TxBuf};
use txq::Op;

/// What the core needs to know of a rail's provider.
#[derive(Clone, Debug)]
pub(crate) struct RailProfile {
    pub(crate) kind: RailKind,
    pub(crate) provider: String,
    /// FI_MR_LOCAL: every buffer given to the provider must be registered.
    pub(crate) mr_local: bool,
    /// FI_MR_VIRT_ADDR: RMA addresses are virtual addresses (else offsets
    /// into the region).
    pub(crate) mr_virt_addr: bool,
    /// FI_MR_PROV_KEY: the provider picks registration keys.
    pub(crate) mr_prov_key: bool,
    /// Size of each bounce buffer: header plus the largest eager payload.
    pub(crate) buf_size: usize,
    pub(crate) eager_limit: usize,
    /// Eager payloads of `ZERO_COPY_MIN` bytes and more go from the user's
    /// buffer (no FI_MR_LOCAL and an iov limit of at least 2).
    pub(crate) zero_copy: bool,
    /// Rendezvous by RMA read (else by tagged send).
    pub(crate) rndv_read: bool,
    /// FI_TAGGED is available (the send rendezvous needs it).
    pub(crate) tagged: bool,
    /// Rendezvous by data packets over plain sends (chosen where neither
    /// the read nor the tagged rendezvous is used, or forced); takes
    /// precedence over the tagged rendezvous.
    pub(crate) rndv_msg: bool,
    pub(crate) chunk: usize,
    /// Largest packet the provider takes with `fi_inject` (0: none).
    /// Packets copied into a bounce buffer and no larger go that way: the
    /// provider copies them at once and reports no completion.
    pub(crate) inject_size: usize,
    /// The driver copies a packet's header and payload at post as cheaply
    /// as the core copies into a bounce buffer, and reports nothing (the
    /// component's own shared-memory ring): eager sends no larger than
    /// `inject_size` go as [`Action::SendInline`], or as the
    /// [`eager::InlineSend`] that a send returns to the engine.
    pub(crate) inline: bool,
    /// The driver keeps its receive slots armed by itself (the own ring,
    /// whose one slot is the ring's read position): after a packet or a
    /// receive error the core posts nothing back, which saves an action
    /// per received packet. The first post at start still arms them.
    pub(crate) rx_kept: bool,
    /// Most transmit operations in flight (the provider's tx queue depth).
    pub(crate) tx_depth: usize,
    /// Receive bounce buffers the driver holds for this rail.
    pub(crate) rx_count: usize,
}

/// Counters printed at finalize with `verbose >= 1`. Relaxed atomics, so
/// any thread may read them while the token holder updates them.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) sent_msgs: AtomicU64,
    pub(crate) sent_bytes: AtomicU64,
    pub(crate) recv_msgs: AtomicU64,
    pub(crate) recv_bytes: AtomicU64,
    pub(crate) eager: AtomicU64,
    pub(crate) rndv: AtomicU64,
    pub(crate) unexpected: AtomicU64,
    /// Error events, each counted once where it is observed: an operation
    /// that failed for good (resent or moved packets count only if the
    /// last try fails too), a bounce buffer that could not be registered,
    /// a receive buffer that could not be posted, a rejected packet, a
    /// failure the peer reported, a peer given up.
    pub(crate) errors: AtomicU64,
    /// Receive buffers the provider completed with an error: packets it
    /// lost. Those that name a message rendezvous's data are sent again
    /// and are not errors; the others count in `errors` too.
    pub(crate) rx_lost: AtomicU64,
    /// Repairs of a stalled message rendezvous (`proto/repair.rs`): a
    /// packet lost whole was asked for, or the FIN.
    pub(crate) rndv_repairs: AtomicU64,
    pub(crate) net_peers: AtomicU64,
    pub(crate) shm_peers: AtomicU64,
    /// Eager messages that shared a packet with an earlier one.
    pub(crate) coalesced: AtomicU64,
    /// Bytes each kind of rail moved: packets (headers included) and
    /// rendezvous data, sent (`tx`) and received (`rx`: packets that
    /// arrived, reads and tagged receives that completed).
    pub(crate) net_tx_bytes: AtomicU64,
    pub(crate) net_rx_bytes: AtomicU64,
    pub(crate) shm_tx_bytes: AtomicU64,
    pub(crate) shm_rx_bytes: AtomicU64,
    /// Messages in the unexpected queue, and their payload bytes (a
    /// rendezvous counts its whole announced length).
    pub(crate) unexpected_now: Level,
    pub(crate) unexpected_bytes_now: Level,
    /// Receives in the posted queue.
    pub(crate) posted_now: Level,
    /// Registrations of user buffers made for rendezvous transfers.
    pub(crate) mr_reg: AtomicU64,
    /// Rendezvous transfers served a cached registration.
    pub(crate) mr_hits: AtomicU64,
    /// Read rendezvous sent striped over several NICs.
    pub(crate) striped: AtomicU64,
    /// Bytes read through stripe rails (not the primary one), counted
    /// as the reads complete; the network rail's counts leave them out.
    pub(crate) stripe_bytes: AtomicU64,
    /// Operations wait in a rail's queue for the provider (a blocking send
    /// waits until they have gone: see `rustofi_tx_queued`). Receive posts
    /// waiting to be retried do not count: one that keeps failing must not
    /// hold up every blocking send.
    pub(crate) tx_queued: std::sync::atomic::AtomicBool,
    /// Copied eager sends held incomplete because their packet waited in a
    /// rail's queue ([`held`]): counted each time such a packet is queued
    /// (at once, or refused by the provider).
    pub(crate) held_sends: AtomicU64,
    /// Read rendezvous answered as message rendezvous: this rank cannot
    /// read the sender's memory ([`Core::set_peer_unreadable`]).
    pub(crate) reads_declined: AtomicU64,
}

/// A level and its high-water mark. Only the progress-token holder changes
/// it (the core runs under the token), so plain loads and stores suffice:
/// no locked instruction on the matching path. Readers on other threads
/// (MPI_T) see a recent value.
#[derive(Default)]
pub(crate) struct Level {
    pub(crate) now: AtomicU64,
    pub(crate) peak: AtomicU64,
}

impl Level {
    #[inline]
    pub(crate) fn up(&self, n: u64) {
        let now = self.now.load(Relaxed) + n;
        self.now.store(now, Relaxed);
        if now > self.peak.load(Relaxed) {
            self.peak.store(now, Relaxed);
        }
    }

    #[inline]
    pub(crate) fn down(&self, n: u64) {
        let now = self.now.load(Relaxed);
        debug_assert!(now >= n, "level below zero");
        self.now.store(now.saturating_sub(n), Relaxed);
    }
}

impl Stats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Adds to a counter that only the progress-token holder changes: a
    /// plain load and store, no locked instruction on the data path.
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
    }

    pub(crate) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Relaxed)
    }
}

/// Settings of the core that are not per rail.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CoreConfig {
    /// This process's name (jobid << 32 | vpid), stamped on every packet.
    pub(crate) my_name: u64,
    pub(crate) coalesce: bool,
    pub(crate) fault: Fault,
    /// Read rendezvous of at least this many bytes stripe over the peer's
    /// stripe endpoints (0: never).
    pub(crate) stripe_min: usize,
    /// Bytes held for one peer's uncompleted sends before sends wait, and
    /// for all peers together ([`flow`]).
    pub(crate) send_queue_limit: usize,
    pub(crate) send_queue_total: usize,
}

/// A rail: its profile and its transmit-side state.
struct Rail {
    profile: RailProfile,
    /// Free bounce buffers of the rail's full size.
    tx_free: Vec<TxBuf>,
    /// Free small bounce buffers ([`txbuf::SMALL_BUF`]).
    tx_small: Vec<TxBuf>,
    /// Bounce buffers in existence (free, queued, posted or bundled).
    tx_total: usize,
    /// Operations waiting for a credit or for the provider to take them.
    retry: VecDeque<OpId>,
    /// A packet in `retry` may wait for a bounce buffer to come back to
    /// the pool (`Core::buffer_for`); a hint, cleared once `retry` empties,
    /// so that the queue's usual pass looks at no packet for it.
    awaiting_buffer: bool,
    /// Receive buffers waiting to be reposted.
    rx_retry: VecDeque<ids::RxSlot>,
    /// Receive buffers whose last post failed hard (reported once; cleared
    /// when a packet arrives in them, which proves them posted).
    rx_failing: hashbrown::HashSet<ids::RxSlot>,
    /// Transmit-side operations handed to the driver and not yet reported.
    inflight: usize,
    /// Peers reached through this rail. A rail without peers has nothing
    /// to deliver and is not polled (polling an idle network provider
    /// costs a system call, which would dominate shared-memory latency).
    peers: usize,
}

/// The protocol state of one process.
pub(crate) struct Core {
    cfg: CoreConfig,
    rails: Vec<Rail>,
    peers: Vec<Peer>,
    /// Some peer is lost (peers are never found again): until one is, a
    /// receive need not look up whether its source's peer is.
    any_lost: bool,
    by_name: HashMap<u64, PeerId>,
    /// The sender of the last message handled and its peer: a run of
    /// packets from one peer (a ring read in a batch, a ping-pong) skips
    /// the hash lookup. Names never change their peer, so it never goes
    /// stale.
    last_sender: Option<(u64, PeerId)>,
    matcher: Matcher<PostedRecv, Unexpected>,
    ops: Slab<OpId, Op>,
    mrs: Slab<MrId, MrUse>,
    /// Registrations asked for whose result the driver has not reported
    /// yet (its `Register` action is still queued in this pass).
    mr_unreported: hashbrown::HashSet<MrId>,
    rndv_recv: Slab<RndvId, RecvRndv>,
    rndv_send: HashMap<Cookie, SendRndv>,
    /// Synchronous eager sends waiting for the receiver's ack.
    sync_wait: HashMap<Cookie, (ReqId, PeerId)>,
    /// Unexpected messages taken by a matched probe.
    taken: Slab<MsgId, (Envelope, Unexpected)>,
    next_cookie: u64,
    /// Source of the tag bases of send-rendezvous data (monotonic, so a
    /// late chunk of an old rendezvous never matches a new one).
    next_tag_base: u64,
    next_key: u64,
    fault: Fault,
    /// Data packets that arrived under `Fault::LoseData` or
    /// `Fault::LoseWhole`, and control packets of a message rendezvous
    /// under the latter.
    fault_seen: u32,
    fault_ctrl_seen: u32,
    /// Peers that may have an open coalescing bundle.
    open_bundles: Vec<PeerId>,
    /// Bytes held for uncompleted sends, and sends waiting for room.
    flow: flow::Flow,
    /// Which sources of a tick's work are non-empty, kept by their
    /// writers (see the module `tick_work`): whether some operation or receive buffer
    /// waits in a rail's retry queue is its `QUEUED` bit alone.
    work: TickWork,
    /// Bounce buffers whose registration was released in the last batch of
    /// actions; freed at the next tick, after the driver executed it.
    retired: Vec<Box<[u8]>>,
    /// Registration cache and the memory-release notices that keep it
    /// valid (`None`: every rendezvous registers its buffer anew).
    mr_cache: Option<usermr::Cached>,
    stats: Arc<Stats>,
    /// While the rendezvous of a lost peer are aborted: their chunks by
    /// owner (`abort::index_chunks_of`).
    chunk_index: Option<(PeerId, ChunkIndex)>,
    /// Liveness probes and what waits on each peer.
    live: liveness::Liveness,
    /// When something last moved, for the stall report.
    stall: stall::StallWatch,
    /// The clock of the message rendezvous's repair rounds.
    repair: repair::RepairClock,
}

/// Chunks by rendezvous: operation id and rail index.
type ChunkIndex = HashMap<txq::ChunkOwner, Vec<(OpId, usize)>>;

/// Why a command was refused at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CoreError(pub(crate) String);

impl Core {
    /// A core over `rails` (index = [`RailId`]). Call [`Core::start`] to
    /// get the first receive posts.
    pub(crate) fn new(cfg: CoreConfig, rails: Vec<RailProfile>, stats: Arc<Stats>) -> Core {
        Core {
            fault: cfg.fault,
            fault_seen: 0,
            fault_ctrl_seen: 0,
            cfg,
            rails: rails
                .into_iter()
                .map(|profile| Rail {
                    profile,
                    tx_free: Vec::new(),
                    tx_small: Vec::new(),
                    tx_total: 0,
                    retry: VecDeque::new(),
                    awaiting_buffer: false,
                    rx_retry: VecDeque::new(),
                    rx_failing: hashbrown::HashSet::new(),
                    inflight: 0,
                    peers: 0,
                })
                .collect(),
            peers: Vec::new(),
            any_lost: false,
            by_name: HashMap::new(),
            last_sender: None,
            matcher: Matcher::new(),
            ops: Slab::new(),
            mrs: Slab::new(),
            mr_unreported: hashbrown::HashSet::new(),
            rndv_recv: Slab::new(),
            rndv_send: HashMap::new(),
            sync_wait: HashMap::new(),
            taken: Slab::new(),
            next_cookie: 1,
            next_tag_base: 1,
            next_key: 1,
            open_bundles: Vec::new(),
            flow: flow::Flow::new(cfg.send_queue_limit, cfg.send_queue_total),
            work: TickWork::default(),
            retired: Vec::new(),
            mr_cache: None,
            stats,
            chunk_index: None,
            live: liveness::Liveness::default(),
            stall: stall::StallWatch::default(),
            repair: repair::RepairClock::default(),
        }
    }

    /// Posts every receive bounce buffer of every rail.
    pub(crate) fn start(&mut self, out: &mut Out) {
        for (r, rail) in self.rails.iter().enumerate() {
            for s in 0..rail.profile.rx_count {
                out.actions.push(Action::PostRecv {
                    rail: RailId(r as u8),
                    slot: ids::RxSlot(s as u32),
                });
            }
        }
    }

    pub(crate) fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Whether the driver should poll the rail's completion queue.
    pub(crate) fn rail_needs_poll(&self, rail: RailId) -> bool {
        let r = &self.rails[rail.index()];
        r.peers > 0 || r.inflight > 0 || !r.retry.is_empty() || !r.rx_retry.is_empty()
    }

    /// Whether a tick would do nothing: one byte, kept by the writers of
    /// what a tick looks at.
    #[inline]
    pub(crate) fn tick_is_empty(&self) -> bool {
        debug_assert!(self.tick_work_exact(), "tick work bits");
        self.work.is_empty()
    }

    /// Whether the tick-work byte agrees with its sources: the bundles,
    /// retired buffers and deferred sends exactly; the queued bit set
    /// whenever a rail's retry queue holds something (it may stay set
    /// with the queues empty until the next tick clears it, as an
    /// aborted operation's removal leaves it). Checked by the simulator
    /// after every event, by the fuzzer after every step, and by
    /// `tick_is_empty` in builds with debug assertions.
    pub(crate) fn tick_work_exact(&self) -> bool {
        let mut others = self.work;
        others.set(TickWork::QUEUED, false);
        let want = TickWork::of(
            !self.open_bundles.is_empty(),
            !self.retired.is_empty(),
            self.flow.any_waiting(),
        );
        let queued_now = self
            .rails
            .iter()
            .any(|r| !r.retry.is_empty() || !r.rx_retry.is_empty());
        others == want && (self.queued() || !queued_now)
    }

    /// Some operation or receive buffer waits in a rail's retry queue.
    #[inline]
    fn queued(&self) -> bool {
        self.work.has(TickWork::QUEUED)
    }

    /// Whether a progress round could do nothing but read packets from
    /// `rail`: a tick would return at once, and no other rail has peers,
    /// operations or queued posts (so none needs polling).
    pub(crate) fn waits_only_on(&self, rail: RailId) -> bool {
        self.tick_is_empty()
            && (0..self.rails.len())
                .all(|i| i == rail.index() || !self.rail_needs_poll(RailId(i as u8)))
    }

    /// A progress opportunity: sends open bundles and retries queued
    /// operations and receive posts.
    #[inline(always)]
    pub(crate) fn tick(&mut self, out: &mut Out) {
        // The check inline, the work out of line: most ticks find nothing.
        if !self.tick_is_empty() {
            self.tick_work(out);
        }
    }

    #[inline(never)]
    fn tick_work(&mut self, out: &mut Out) {
        // Bounce buffers retired in an earlier batch of actions: the driver
        // has released their registrations since (ticks come between
        // batches).
        self.retired.clear();
        self.work.set(TickWork::RETIRED, false);
        self.flush_bundles(None, out);
        self.run_retries(out);
        self.drain_deferred(out);
    }

    /// Whether transfers are still under way (finalize waits for them).
    pub(crate) fn busy(&self) -> bool {
        !self.ops.is_empty()
            || !self.rndv_send.is_empty()
            || !self.rndv_recv.is_empty()
            || self.rails.iter().any(|r| !r.retry.is_empty())
            || self.peers.iter().any(|p| p.has_bundle())
            || self.flow.any_waiting()
    }

    /// What is left in the core's tables; all zero when it is quiet.
    pub(crate) fn leftovers(&self) -> Leftovers {
        let pool_mrs = self
            .mrs
            .iter()
            .filter(|(_, u)| matches!(u, MrUse::TxBuf | MrUse::Failed))
            .count();
        Leftovers {
            ops: self.ops.len(),
            registrations: self.mrs.len() - pool_mrs,
            rndv_send: self.rndv_send.len(),
            rndv_recv: self.rndv_recv.len(),
            sync_wait: self.sync_wait.len(),
            retry: self.rails.iter().map(|r| r.retry.len()).sum(),
            rx_unposted: self.rails.iter().map(|r| r.rx_retry.len()).sum(),
            taken: self.taken.len(),
            held_out_of_order: self.peers.iter().map(|p| p.order.held()).sum(),
            posted: self.matcher.posted_len(),
            unexpected: self.matcher.unexpected_len(),
            tx_buffers_out: self
                .rails
                .iter()
                .map(|r| r.tx_total - r.tx_free.len() - r.tx_small.len())
                .sum(),
        }
    }

    fn error(&self, msg: &str) {
        crate::log::error(msg);
    }

    /// The counter of bytes `rail` moved (see [`Stats::net_tx_bytes`]).
    #[inline]
    fn rail_bytes(&self, rail: RailId, tx: bool) -> &AtomicU64 {
        rail_bytes(&self.stats, self.rails[rail.index()].profile.kind, tx)
    }

    /// Counts bytes a rail moved.
    #[inline]
    fn count_rail_bytes(&self, rail: RailId, tx: bool, n: usize) {
        Stats::bump(self.rail_bytes(rail, tx), n as u64);
    }

    /// Takes back bytes counted as sent on `rail` (an inline packet the
    /// driver refused is counted again when it is sent).
    fn uncount_rail_tx(&self, rail: RailId, n: usize) {
        Stats::bump(self.rail_bytes(rail, true), (n as u64).wrapping_neg());
    }

    fn count_error(&self) {
        Stats::add(&self.stats.errors, 1);
    }

    fn new_cookie(&mut self) -> Cookie {
        let c = Cookie(self.next_cookie);
        self.next_cookie += 1;
        c
    }

    fn header(&self, kind: crate::wire::Kind) -> Header {
        let mut h = Header::new(kind);
        h.sender = self.cfg.my_name;
        h
    }
}

/// The counter of bytes a rail of `kind` moved (see
/// [`Stats::net_tx_bytes`]).
#[inline]
fn rail_bytes(s: &Stats, kind: RailKind, tx: bool) -> &AtomicU64 {
    match (kind, tx) {
        (RailKind::Shm | RailKind::Local, true) => &s.shm_tx_bytes,
        (RailKind::Shm | RailKind::Local, false) => &s.shm_rx_bytes,
        // A stripe rail only reads (the sender's NIC serves them
        // without its core knowing).
        (RailKind::Stripe, _) => &s.stripe_bytes,
        (_, true) => &s.net_tx_bytes,
        (_, false) => &s.net_rx_bytes,
    }
}

/// Counts of what the core still holds (see [`Core::leftovers`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Leftovers {
    pub(crate) ops: usize,
    /// Registrations of user buffers (pool buffers' own are not counted).
    pub(crate) registrations: usize,
    pub(crate) rndv_send: usize,
    pub(crate) rndv_recv: usize,
    pub(crate) sync_wait: usize,
    pub(crate) retry: usize,
    pub(crate) rx_unposted: usize,
    pub(crate) taken: usize,
    pub(crate) held_out_of_order: usize,
    pub(crate) posted: usize,
    pub(crate) unexpected: usize,
    pub(crate) tx_buffers_out: usize,
}
