//! The simulated fabric: nodes (a core each), the event queue, and a
//! driver that executes the cores' actions the way a provider would.

use super::profiles::Rails;
use super::rng::Rng;
use super::workload::{Buf, Plan};
use super::Faults;
use crate::config::Fault;
use crate::matching::PostId;
use crate::memrelease::ReleaseRing;
use crate::proto::ids::{FiAddr, MrId, OpId, PeerId, RailId, RxSlot};
use crate::proto::{Access, Action, CacheBound, Core, CoreConfig, Event, Out, ProbeInfo, Stats};
use crate::usermem::Region;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// The kind of a post (or registration) the fault hook is asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PostKind {
    Send,
    Read,
    TaggedSend,
    TaggedRecv,
    PostRecv,
    Register,
}

/// What the hook of a directed test sees of a post.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PostInfo {
    pub(crate) node: usize,
    pub(crate) rail: usize,
    pub(crate) kind: PostKind,
    pub(crate) op: Option<OpId>,
    /// Posts of this operation id so far, this one included.
    pub(crate) attempt: u32,
    /// The chunk ends where its request's buffer ends.
    pub(crate) last_chunk: bool,
    /// Kind of the first message of a packet (`Send`).
    pub(crate) packet: Option<crate::wire::Kind>,
    /// Its tag (a matchable message's; not an inline `Send`'s).
    pub(crate) tag: Option<i32>,
    /// Receive-buffer posts of this node so far, this one included.
    pub(crate) rx_post: u64,
    /// Length of the local memory named (a registration's region), or 0.
    pub(crate) len: usize,
    /// Simulated time of the post (ns): posts of one batch of actions
    /// share it.
    pub(crate) now: u64,
}

/// What the hook asks the provider to do with a post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Inject {
    /// Whatever the run's random faults decide.
    Normal,
    /// Accept it, no random fault.
    Clean,
    Again,
    Hard(i32),
    /// Accept it, then complete it with an error.
    CqError,
    /// Accept and complete it, but let the receiver's buffer fail with
    /// only the packet's header placed (a packet the receiving provider
    /// lost, as `udp;ofi_rxd` does with `FI_ETRUNC`).
    Damaged,
    /// Accept and complete it, but deliver it cut short (a receive
    /// completed with a length the packet never had): lost whole.
    Garbled,
    /// Accept and complete it, but deliver it with its header's `ext0`
    /// (a data packet's offset) one higher: a packet whose contents are
    /// wrong, which fails a message rendezvous's receive.
    Misplaced,
}

/// What became of a post.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Again,
    Hard,
    /// Accepted; completes with an error if true.
    Posted(bool),
}

pub(crate) type Hook = Box<dyn FnMut(&PostInfo) -> Inject>;

#[derive(Debug)]
pub(crate) enum Ev {
    Step {
        node: usize,
        cmd: super::workload::Cmd,
    },
    Tick {
        node: usize,
    },
    Deliver {
        to: usize,
        rail: usize,
        from: usize,
        pkt: Vec<u8>,
    },
    Drain {
        node: usize,
        rail: usize,
    },
    Complete {
        node: usize,
        op: OpId,
        ok: bool,
    },
    /// A cancelled operation reports its cancellation.
    Canceled {
        node: usize,
        op: OpId,
    },
    RxError {
        node: usize,
        rail: usize,
        slot: usize,
    },
    /// A packet that takes a receive buffer and fails it (`Inject::Damaged`).
    DeliverDamaged {
        to: usize,
        rail: usize,
        from: usize,
        pkt: Vec<u8>,
    },
    ReadDo {
        node: usize,
        op: OpId,
        rail: usize,
        from: usize,
        local: Region,
        addr: u64,
        key: u64,
        fail: bool,
    },
    TaggedArrive {
        to: usize,
        rail: usize,
        from: usize,
        tag: u64,
        data: Option<Vec<u8>>,
    },
    Death {
        node: usize,
    },
    PeerLost {
        node: usize,
        dead: usize,
    },
    /// The memory of a finished request goes back to the system (as a
    /// munmap would): the node's memory hooks report it.
    Release {
        node: usize,
        req: usize,
    },
}

pub(crate) struct Queued {
    pub(crate) t: u64,
    pub(crate) seq: u64,
    pub(crate) ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    // Earliest first out of a max-heap; ties in scheduling order.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.t, o.seq).cmp(&(self.t, self.seq))
    }
}

pub(crate) struct Reg {
    pub(crate) rail: usize,
    pub(crate) region: Region,
    pub(crate) access: Access,
    pub(crate) key: u64,
    pub(crate) failed: bool,
    /// Memory it covers was released since: it must never be used again.
    pub(crate) released: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotState {
    Idle,
    Posted,
    /// Posted, and will complete with an error.
    Failing,
}

pub(crate) struct TRecv {
    pub(crate) op: OpId,
    pub(crate) from: usize,
    pub(crate) tag: u64,
    pub(crate) local: Region,
    pub(crate) fail: bool,
}

pub(crate) struct TMsg {
    pub(crate) from: usize,
    pub(crate) tag: u64,
    pub(crate) data: Option<Vec<u8>>,
}

pub(crate) struct RailSim {
    pub(crate) slots: Vec<SlotState>,
    /// Packets that found no posted buffer (the provider holds them).
    /// Packets waiting for a posted buffer: sender, bytes, and whether
    /// the buffer fails with only the header placed (`Inject::Damaged`).
    pub(crate) pending: VecDeque<(usize, Vec<u8>, bool)>,
    pub(crate) tposted: Vec<TRecv>,
    pub(crate) tunexp: Vec<TMsg>,
    /// (source, tag) of cancelled tagged receives: a message arriving for
    /// one is dropped.
    pub(crate) tcanceled: std::collections::HashSet<(usize, u64)>,
}

impl RailSim {
    /// Drops the unexpected tagged message (from, tag), if held.
    pub(crate) fn drop_unexpected(&mut self, from: usize, tag: u64) -> bool {
        let before = self.tunexp.len();
        self.tunexp.retain(|m| (m.from, m.tag) != (from, tag));
        self.tunexp.len() != before
    }

    pub(crate) fn tagged_left(&self) -> usize {
        self.tposted.len() + self.tunexp.len()
    }
}

pub(crate) struct PostedOp {
    pub(crate) rail: usize,
    /// Counts against the transmit queue depth (not a tagged receive).
    pub(crate) credit: bool,
    /// A packet's memory and its hash, to check it was left alone.
    pub(crate) check: Option<(Region, Option<Region>, u64)>,
}

pub(crate) struct Node {
    pub(crate) core: Core,
    pub(crate) stats: Arc<Stats>,
    pub(crate) alive: bool,
    pub(crate) rails: Vec<RailSim>,
    pub(crate) mrs: HashMap<MrId, Reg>,
    pub(crate) peer_of: Vec<Option<PeerId>>,
    pub(crate) posted: HashMap<OpId, PostedOp>,
    pub(crate) outstanding: Vec<usize>,
    pub(crate) attempts: HashMap<OpId, u32>,
    /// Failures of each packet since it last completed (a provider that
    /// recovers fails a packet at most RESENDS times in a row).
    pub(crate) fails: HashMap<OpId, u32>,
    pub(crate) rx_posts: u64,
    /// Request buffers (address → length): where user memory is.
    pub(crate) user_mem: BTreeMap<usize, usize>,
    /// Memory-release notices for the core's registration cache (`None`:
    /// the cache is off, as without memory hooks).
    pub(crate) ring: Option<Arc<ReleaseRing>>,
}

impl Node {
    pub(crate) fn is_user_mem(&self, r: Region) -> bool {
        r.len == 0
            || self
                .user_mem
                .range(..=r.addr)
                .next_back()
                .is_some_and(|(&a, &l)| Region { addr: a, len: l }.contains(r))
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum ReqKind {
    Send {
        msg: usize,
    },
    Recv {
        consumer: usize,
        probed: Option<ProbeInfo>,
    },
}

pub(crate) struct Req {
    pub(crate) node: usize,
    pub(crate) kind: ReqKind,
    pub(crate) buf: Buf,
    /// Logical time the request was issued (or its probe matched).
    pub(crate) issued: u64,
    pub(crate) done: Option<(u64, Event)>,
    pub(crate) refused: bool,
    pub(crate) post: Option<PostId>,
    /// The request whose allocation this one's memory is (itself, or an
    /// earlier send whose buffer it reuses).
    pub(crate) root: usize,
    /// For a root: the latest request reusing its memory.
    pub(crate) lent_to: Option<usize>,
}

pub(crate) struct World {
    pub(crate) seed: u64,
    pub(crate) rng: Rng,
    pub(crate) rails: Rails,
    pub(crate) faults: Faults,
    pub(crate) plan: Plan,
    pub(crate) nodes: Vec<Node>,
    pub(crate) queue: BinaryHeap<Queued>,
    pub(crate) now: u64,
    pub(crate) seq: u64,
    /// Logical clock: issues and completions, in order.
    pub(crate) clock: u64,
    /// Queued events other than ticks.
    pub(crate) busy_events: usize,
    pub(crate) reqs: Vec<Req>,
    pub(crate) probes: Vec<(usize, u64, crate::matching::Selector, ProbeInfo)>,
    pub(crate) unsatisfied_mprobes: usize,
    /// Matched-probe retries queued.
    pub(crate) mprobe_polls: usize,
    /// Tagged receives whose post failed for good, by (node, rail, source,
    /// tag): the chunk their peer sends for them stays in the provider's
    /// unexpected queue (the core cannot take back the CTS).
    pub(crate) orphans: Vec<(usize, usize, usize, u64)>,
    /// Posted tagged receives taken back by a Cancel action.
    pub(crate) chunks_cancelled: usize,
    /// Cancels naming an operation that was not in flight (the core must
    /// cancel only what it handed over and has not had reported).
    pub(crate) stray_cancels: usize,
    /// Tagged receives refused with EAGAIN and not posted since, by
    /// (node, rail, source, tag).
    pub(crate) deferred_trecvs: std::collections::HashSet<(usize, usize, usize, u64)>,
    pub(crate) hook: Option<Hook>,
    pub(crate) dead: Option<usize>,
    /// The node died as its first rendezvous chunk was posted.
    pub(crate) died_mid_rndv: bool,
    /// Events handled (bounded: a run that does not settle is a hang).
    pub(crate) steps: u64,
    /// Fault-free start: error counters of each node when the run began.
    pub(crate) cancelled_at_end: usize,
    /// Cancels that won (the receive was still posted) and lost.
    pub(crate) cancel_won: usize,
    pub(crate) cancel_lost: usize,
    /// Packets delivered twice.
    pub(crate) dups: usize,
    /// Packets delivered damaged (`Inject::Damaged`, `lose_data`).
    pub(crate) damaged: usize,
    /// Packets delivered cut short (`Inject::Garbled`, `garble`).
    pub(crate) garbled: usize,
    /// Packets sent with (simulated) fi_inject: no completion generated.
    pub(crate) injected: usize,
    /// Packets sent inline (`Action::SendInline`), and those the provider
    /// refused (sent again as ordinary packets).
    pub(crate) inlined: usize,
    pub(crate) inline_refused: usize,
    /// Decides buffer reuse, memory release and the cache settings (its own
    /// stream, so that seeds keep the rest of their runs).
    pub(crate) mrng: Rng,
    /// Memory releases reported to nodes.
    pub(crate) releases: usize,
    /// How sends reuse buffers and memory is released.
    pub(crate) mem: super::memreuse::MemPlan,
    /// Registrations each node's cache held when the run went quiet.
    pub(crate) cached_at_end: Vec<usize>,
    /// Probes that failed (their source given up).
    pub(crate) probes_failed: usize,
    /// Process checks of same-host peers.
    pub(crate) alive_checks: usize,
    /// Events of a busy node put off until it is back.
    pub(crate) busy_deferred: usize,
    /// Liveness probes sent.
    pub(crate) pings: usize,
    /// When the first request failed (ns).
    pub(crate) first_failure: Option<u64>,
    /// What the flow-control watch saw (runs with a stalled node).
    pub(crate) flow_seen: FlowSeen,
    /// Registrations released (a `Deregister` queued) while their own
    /// `Register` was still queued in the same batch of actions.
    pub(crate) released_unreported: usize,
    /// Registrations asked for while such a released one's `Register` was
    /// still queued: (node, the released id, the new id).
    pub(crate) asked_while_released: Vec<(usize, MrId, MrId)>,
}

/// What the flow-control watch saw over a run with a stalled node
/// ([`super::flood_cases`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FlowSeen {
    pub(crate) max_total: usize,
    pub(crate) max_peer: usize,
    pub(crate) max_deferred: usize,
    /// Sends not yet complete when the stalled node woke up.
    pub(crate) incomplete_at_wake: Option<usize>,
}

/// FNV-1a, to notice memory that changed under a posted operation.
pub(crate) fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The bytes of a region the core handed over.
pub(crate) fn read_region(r: Region) -> Vec<u8> {
    let mut v = vec![0u8; r.len];
    if r.len > 0 {
        // SAFETY: the core keeps memory named by an action's region valid
        // until the operation is reported, which has not happened yet.
        unsafe { std::ptr::copy_nonoverlapping(r.addr as *const u8, v.as_mut_ptr(), r.len) };
    }
    v
}

/// Writes `data` into a region the core handed over for it.
pub(crate) fn write_region(r: Region, data: &[u8]) {
    assert_eq!(r.len, data.len());
    if r.len > 0 {
        // SAFETY: the region was checked to lie in a request buffer of the
        // node (user memory, allocated until the world is dropped), which
        // the core handed over for this operation, not yet reported.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), r.addr as *mut u8, r.len) };
    }
}

pub(crate) const TICK: u64 = 2_000;
/// Time without progress before a message rendezvous is repaired (ns):
/// many round trips of simulated latency.
pub(crate) const REPAIR_AFTER: u64 = 300_000;
pub(crate) const MAX_STEPS: u64 = 5_000_000;

impl World {
    pub(crate) fn new(seed: u64, rails: Rails, faults: Faults, plan: Plan) -> World {
        super::quiet();
        let mut rng = Rng::new(seed ^ 0xFAB1_C000);
        let mut mrng = Rng::new(seed ^ 0x3E3_CAC4E);
        let mut srng = Rng::new(seed ^ 0x57_121E);
        let n = plan.nodes;
        let mut nodes = Vec::new();
        for i in 0..n {
            let stats = Arc::new(Stats::default());
            let cfg = CoreConfig {
                my_name: i as u64 + 1,
                coalesce: rng.chance(700),
                fault: plan
                    .core_faults
                    .iter()
                    .find(|f| f.0 == i)
                    .map_or(Fault::None, |f| f.1),
                // Thresholds from one byte above the eager limit to a few
                // chunks (of at most 1 MiB: a rail may take a whole
                // transfer in one chunk), so that some transfers stripe
                // and some do not.
                stripe_min: if rails.stripes > 0 {
                    let p = &rails.profiles[0];
                    let c = p.chunk.min(1 << 20);
                    [p.eager_limit + 1, 2 * c, 5 * c][srng.usize(0, 2)]
                } else {
                    0
                },
                send_queue_limit: plan.send_queue.0,
                send_queue_total: plan.send_queue.1,
            };
            let mut core = Core::new(cfg, rails.profiles_of(i), stats.clone());
            core.set_peer_timeout(plan.peer_timeout.map(Duration::from_nanos));
            core.set_repair_after(Duration::from_nanos(REPAIR_AFTER));
            // Most nodes cache registrations, with small bounds so that
            // eviction happens.
            let ring = mrng.chance(800).then(|| Arc::new(ReleaseRing::new()));
            if let Some(r) = &ring {
                core.enable_mr_cache(CacheBound::entries(mrng.usize(0, 4)), r.clone());
            }
            let mut peer_of = vec![None; n];
            for (j, p) in peer_of.iter_mut().enumerate() {
                if j != i {
                    let r = rails.rail_between(i, j);
                    let max_eager = rails.profiles[r].eager_limit;
                    let id =
                        core.add_peer(j as u64 + 1, RailId(r as u8), FiAddr(j as u64), max_eager);
                    if rails.profiles[r].kind == crate::wire::RailKind::Shm {
                        core.set_peer_pid(id, 1000 + j as u32);
                    }
                    if rails.cannot_read(i, j) {
                        core.set_peer_unreadable(id);
                    }
                    // Stripe endpoint i of both sides, as far as both have one.
                    for ((k, rail), _) in rails.stripes_of(i).zip(rails.stripes_of(j)) {
                        core.add_stripe(id, k, RailId(rail as u8), FiAddr(j as u64));
                    }
                    *p = Some(id);
                }
            }
            nodes.push(Node {
                core,
                stats,
                alive: true,
                rails: rails
                    .profiles
                    .iter()
                    .map(|p| RailSim {
                        slots: vec![SlotState::Idle; p.rx_count],
                        pending: VecDeque::new(),
                        tposted: Vec::new(),
                        tunexp: Vec::new(),
                        tcanceled: Default::default(),
                    })
                    .collect(),
                mrs: HashMap::new(),
                peer_of,
                posted: HashMap::new(),
                outstanding: vec![0; rails.profiles.len()],
                attempts: HashMap::new(),
                fails: HashMap::new(),
                rx_posts: 0,
                user_mem: BTreeMap::new(),
                ring,
            });
        }
        World {
            seed,
            rng,
            rails,
            faults,
            plan,
            nodes,
            queue: BinaryHeap::new(),
            now: 0,
            seq: 0,
            clock: 0,
            busy_events: 0,
            reqs: Vec::new(),
            probes: Vec::new(),
            unsatisfied_mprobes: 0,
            mprobe_polls: 0,
            orphans: Vec::new(),
            chunks_cancelled: 0,
            stray_cancels: 0,
            deferred_trecvs: Default::default(),
            hook: None,
            dead: None,
            died_mid_rndv: false,
            steps: 0,
            cancelled_at_end: 0,
            cancel_won: 0,
            cancel_lost: 0,
            dups: 0,
            damaged: 0,
            garbled: 0,
            injected: 0,
            inlined: 0,
            inline_refused: 0,
            mrng,
            releases: 0,
            mem: Default::default(),
            cached_at_end: Vec::new(),
            probes_failed: 0,
            alive_checks: 0,
            busy_deferred: 0,
            pings: 0,
            first_failure: None,
            flow_seen: FlowSeen::default(),
            released_unreported: 0,
            asked_while_released: Vec::new(),
        }
    }

    pub(crate) fn schedule(&mut self, delay: u64, ev: Ev) {
        if !matches!(ev, Ev::Tick { .. }) {
            self.busy_events += 1;
        }
        self.seq += 1;
        self.queue.push(Queued {
            t: self.now + delay,
            seq: self.seq,
            ev,
        });
    }

    /// Network latency of a packet (wide, so packets overtake each other).
    pub(crate) fn latency(&mut self) -> u64 {
        let base = self.rng.range(100, 3_000);
        if self.rng.chance(self.faults.slow) {
            base * 50
        } else {
            base
        }
    }

    /// How long node `n` still takes nothing in (0: it is awake).
    pub(crate) fn stalled_for(&self, n: usize) -> u64 {
        match self.plan.stall {
            Some(s) if s.node == n => s.until.saturating_sub(self.now),
            _ => 0,
        }
    }

    /// Time until a completion is reported.
    pub(crate) fn completion_delay(&mut self) -> u64 {
        let base = self.rng.range(20, 2_000);
        if self.rng.chance(self.faults.slow) {
            base * 50
        } else {
            base
        }
    }

    pub(crate) fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {}: t={} ns: {what}\nqueued: {:?}\nin flight (sim): {:?}\nleftovers: {:?}",
            self.seed,
            self.now,
            self.queue
                .iter()
                .filter(|q| !matches!(q.ev, Ev::Tick { .. }))
                .take(8)
                .map(|q| &q.ev)
                .collect::<Vec<_>>(),
            self.nodes
                .iter()
                .map(|n| (n.alive, n.outstanding.clone()))
                .collect::<Vec<_>>(),
            self.nodes
                .iter()
                .map(|n| n.core.leftovers())
                .collect::<Vec<_>>()
        )
    }

    /// Executes a batch of actions of node `n` in order (reports append
    /// theirs), then records the MPI completions.
    pub(crate) fn run_out(&mut self, n: usize, out: Out) {
        let Out { actions, events } = out;
        let mut q: VecDeque<Action> = actions.into();
        // The reports go into the output the actions came from, as the
        // engine's driver does: a refused packet takes back the
        // completions of the sends it carries (`proto::held`).
        let mut o = Out {
            actions: Vec::new(),
            events,
        };
        let mut unreported = Vec::new();
        self.note_registrations(n, q.iter(), &mut unreported);
        while let Some(a) = q.pop_front() {
            if let Action::Register { mr, .. } = a {
                unreported.retain(|u| u.mr != mr);
            }
            self.exec(n, a, &mut o);
            self.note_registrations(n, o.actions.iter(), &mut unreported);
            q.extend(o.actions.drain(..));
        }
        self.record(n, o.events);
    }

    /// Follows the registrations of a batch of actions of node `n` as
    /// they are queued: `unreported` holds those whose `Register` is still
    /// queued (the driver reports each as it runs it), and whether each
    /// was released meanwhile. An id asked for again while its `Register`
    /// is queued is a defect: that `Register` runs first, and its report
    /// would go to the new registration.
    fn note_registrations<'a>(
        &mut self,
        n: usize,
        actions: impl Iterator<Item = &'a Action>,
        unreported: &mut Vec<Unreported>,
    ) {
        for a in actions {
            match *a {
                Action::Register { mr, .. } => {
                    if unreported.iter().any(|u| u.mr == mr) {
                        self.fail(&format!(
                            "node {n}: {mr:?} asked for again while its earlier Register is \
                             still queued (that report would go to the new registration)"
                        ));
                    }
                    for u in unreported.iter().filter(|u| u.released) {
                        self.asked_while_released.push((n, u.mr, mr));
                    }
                    unreported.push(Unreported {
                        mr,
                        released: false,
                    });
                }
                Action::Deregister { mr } => {
                    if let Some(u) = unreported.iter_mut().find(|u| u.mr == mr && !u.released) {
                        u.released = true;
                        self.released_unreported += 1;
                    }
                }
                _ => {}
            }
        }
    }
}

/// A registration whose `Register` is still queued in the batch of
/// actions under way ([`World::note_registrations`]).
struct Unreported {
    mr: MrId,
    /// A `Deregister` for it was queued meanwhile.
    released: bool,
}

pub(crate) fn slot(s: usize) -> RxSlot {
    RxSlot(s as u32)
}
