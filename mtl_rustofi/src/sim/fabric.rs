//! The simulated fabric: nodes (a core each), the event queue, and a
//! driver that executes the cores' actions the way a provider would.

use super::profiles::Rails;
use super::rng::Rng;
use super::workload::{Buf, Plan};
use super::Faults;
use crate::config::Fault;
use crate::matching::PostId;
use crate::proto::ids::{FiAddr, MrId, OpId, PeerId, RailId, RxSlot};
use crate::proto::{
    Access, Action, Core, CoreConfig, Event, Out, PostError, Posted, ProbeInfo, Stats, RESENDS,
};
use crate::usermem::Region;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

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
    pub(crate) kind: PostKind,
    pub(crate) op: Option<OpId>,
    /// Posts of this operation id so far, this one included.
    pub(crate) attempt: u32,
    /// The chunk ends where its request's buffer ends.
    pub(crate) last_chunk: bool,
    /// Kind of the first message of a packet (`Send`).
    pub(crate) packet: Option<crate::wire::Kind>,
    /// Receive-buffer posts of this node so far, this one included.
    pub(crate) rx_post: u64,
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
}

/// What became of a post.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
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
    RxError {
        node: usize,
        rail: usize,
        slot: usize,
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
}

struct Queued {
    t: u64,
    seq: u64,
    ev: Ev,
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
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotState {
    Idle,
    Posted,
    /// Posted, and will complete with an error.
    Failing,
}

struct TRecv {
    op: OpId,
    from: usize,
    tag: u64,
    local: Region,
    fail: bool,
}

struct TMsg {
    from: usize,
    tag: u64,
    data: Option<Vec<u8>>,
}

pub(crate) struct RailSim {
    pub(crate) slots: Vec<SlotState>,
    /// Packets that found no posted buffer (the provider holds them).
    pub(crate) pending: VecDeque<(usize, Vec<u8>)>,
    tposted: Vec<TRecv>,
    tunexp: Vec<TMsg>,
}

impl RailSim {
    /// Removes the tagged receives posted for (and messages from) a dead
    /// node; returns the receives' operations.
    pub(crate) fn take_tagged_from(&mut self, d: usize) -> Vec<OpId> {
        self.tunexp.retain(|m| m.from != d);
        let (gone, keep): (Vec<TRecv>, Vec<TRecv>) = std::mem::take(&mut self.tposted)
            .into_iter()
            .partition(|t| t.from == d);
        self.tposted = keep;
        gone.into_iter().map(|t| t.op).collect()
    }

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
    attempts: HashMap<OpId, u32>,
    /// Failures of each packet since it last completed (a provider that
    /// recovers fails a packet at most RESENDS times in a row).
    fails: HashMap<OpId, u32>,
    rx_posts: u64,
    /// Request buffers (address → length): where user memory is.
    pub(crate) user_mem: BTreeMap<usize, usize>,
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
}

pub(crate) struct World {
    pub(crate) seed: u64,
    pub(crate) rng: Rng,
    pub(crate) rails: Rails,
    pub(crate) faults: Faults,
    pub(crate) plan: Plan,
    pub(crate) nodes: Vec<Node>,
    queue: BinaryHeap<Queued>,
    pub(crate) now: u64,
    seq: u64,
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
    pub(crate) hook: Option<Hook>,
    pub(crate) dead: Option<usize>,
    /// Events handled (bounded: a run that does not settle is a hang).
    pub(crate) steps: u64,
    /// Fault-free start: error counters of each node when the run began.
    pub(crate) cancelled_at_end: usize,
    /// Cancels that won (the receive was still posted) and lost.
    pub(crate) cancel_won: usize,
    pub(crate) cancel_lost: usize,
    /// Packets delivered twice.
    pub(crate) dups: usize,
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
pub(crate) const MAX_STEPS: u64 = 5_000_000;

impl World {
    pub(crate) fn new(seed: u64, rails: Rails, faults: Faults, plan: Plan) -> World {
        super::quiet();
        let mut rng = Rng::new(seed ^ 0xFAB1_C000);
        let n = plan.nodes;
        let mut nodes = Vec::new();
        for i in 0..n {
            let stats = Arc::new(Stats::default());
            let cfg = CoreConfig {
                my_name: i as u64 + 1,
                coalesce: rng.chance(700),
                fault: Fault::None,
            };
            let mut core = Core::new(cfg, rails.profiles.clone(), stats.clone());
            let mut peer_of = vec![None; n];
            for (j, p) in peer_of.iter_mut().enumerate() {
                if j != i {
                    let r = rails.rail_between(i, j);
                    let max_eager = rails.profiles[r].eager_limit;
                    *p = Some(core.add_peer(
                        j as u64 + 1,
                        RailId(r as u8),
                        FiAddr(j as u64),
                        max_eager,
                    ));
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
            hook: None,
            dead: None,
            steps: 0,
            cancelled_at_end: 0,
            cancel_won: 0,
            cancel_lost: 0,
            dups: 0,
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
    fn latency(&mut self) -> u64 {
        let base = self.rng.range(100, 3_000);
        if self.rng.chance(self.faults.slow) {
            base * 50
        } else {
            base
        }
    }

    /// Time until a completion is reported.
    fn completion_delay(&mut self) -> u64 {
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
        let Out {
            actions,
            mut events,
        } = out;
        let mut q: VecDeque<Action> = actions.into();
        while let Some(a) = q.pop_front() {
            let mut o = Out::new();
            self.exec(n, a, &mut o);
            q.extend(o.actions);
            events.extend(o.events);
        }
        self.record(n, events);
    }

    /// Asks the directed test's hook, if any, about a post.
    fn ask(
        &mut self,
        n: usize,
        kind: PostKind,
        op: Option<OpId>,
        local: Option<Region>,
        packet: Option<crate::wire::Kind>,
    ) -> Inject {
        let attempt = match op {
            Some(op) => {
                let a = self.nodes[n].attempts.entry(op).or_insert(0);
                *a += 1;
                *a
            }
            None => 0,
        };
        if kind == PostKind::PostRecv {
            self.nodes[n].rx_posts += 1;
        }
        let Some(hook) = self.hook.as_mut() else {
            return Inject::Normal;
        };
        let last_chunk = local.is_some_and(|l| {
            self.nodes[n]
                .user_mem
                .range(..=l.addr)
                .next_back()
                .is_some_and(|(&a, &len)| a + len == l.addr + l.len)
        });
        hook(&PostInfo {
            node: n,
            kind,
            op,
            attempt,
            last_chunk,
            packet,
            rx_post: self.nodes[n].rx_posts,
        })
    }

    /// Decides the fate of a post and reports a rejection to the core.
    fn post_fate(
        &mut self,
        n: usize,
        what: Posted,
        inj: Inject,
        err_rate: u32,
        hard_ok: bool,
        out: &mut Out,
    ) -> Fate {
        let inj = match inj {
            Inject::Normal => {
                if self.rng.chance(self.faults.post_again) {
                    Inject::Again
                } else if hard_ok && self.rng.chance(self.faults.post_hard) {
                    Inject::Hard(-5)
                } else if self.rng.chance(err_rate) {
                    Inject::CqError
                } else {
                    Inject::Clean
                }
            }
            i => i,
        };
        match inj {
            Inject::Again => {
                self.nodes[n]
                    .core
                    .on_post_failed(what, PostError::Again, out);
                Fate::Again
            }
            Inject::Hard(code) => {
                if let Posted::Op(op) = what {
                    *self.nodes[n].fails.entry(op).or_insert(0) += 1;
                }
                self.nodes[n]
                    .core
                    .on_post_failed(what, PostError::Hard(code), out);
                Fate::Hard
            }
            Inject::CqError => Fate::Posted(true),
            Inject::Normal | Inject::Clean => Fate::Posted(false),
        }
    }

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

    pub(crate) fn completion_delay_pub(&mut self) -> u64 {
        self.completion_delay()
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
    fn exec(&mut self, n: usize, a: Action, out: &mut Out) {
        match a {
            Action::PostRecv { rail, slot } => {
                let (r, s) = (rail.index(), slot.0 as usize);
                let inj = self.ask(n, PostKind::PostRecv, None, None, None);
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
            } => {
                let r = rail.index();
                let to = dest.0 as usize;
                let reg_ok = self.check_mr(n, r, mr, head, Access::Send, "Send");
                if payload.is_some() && self.rails.profiles[r].mr_local {
                    self.fail(&format!(
                        "node {n}: zero-copy payload on an FI_MR_LOCAL rail"
                    ));
                }
                let kind = crate::wire::Header::decode_prefix(&read_region(
                    head.slice(0, crate::wire::EXT_LEN),
                ))
                .ok()
                .map(|(h, _)| h.kind)
                .or_else(|| {
                    crate::wire::Header::decode(&read_region(head))
                        .ok()
                        .map(|h| h.kind)
                });
                let inj = self.ask(n, PostKind::Send, Some(op), None, kind);
                let fails = self.nodes[n].fails.get(&op).copied().unwrap_or(0);
                // A recovering provider: random failures stop before the
                // core would give the peer up.
                let transient = fails < RESENDS as u32;
                let inj = if !reg_ok { Inject::Hard(-22) } else { inj };
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
                self.note_posted(n, op, r, Some((head, payload, h)));
                if !self.nodes[to].alive {
                    fail = true;
                }
                if fail {
                    *self.nodes[n].fails.entry(op).or_insert(0) += 1;
                }
                if !fail || self.rng.chance(self.faults.dup * 5) {
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
                self.maybe_die_on_chunk(n, src.0 as usize);
                let inj = self.ask(n, PostKind::Read, Some(op), Some(local), None);
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
                let inj = self.ask(n, PostKind::TaggedSend, Some(op), Some(local), None);
                let fate = self.post_fate(n, Posted::Op(op), inj, self.faults.err_tsend, true, out);
                // The simulated provider fails a tagged transfer on both
                // sides: the receive of a chunk whose send failed (or was
                // never posted) completes with an error too.
                let fail = match fate {
                    Fate::Again => return,
                    Fate::Hard => {
                        self.forget_op(n, op);
                        let d = self.latency();
                        self.schedule(
                            d,
                            Ev::TaggedArrive {
                                to,
                                rail: r,
                                from: n,
                                tag,
                                data: None,
                            },
                        );
                        return;
                    }
                    Fate::Posted(f) => f || !self.nodes[to].alive,
                };
                let data = read_region(local);
                self.note_posted(n, op, r, None);
                let d = self.latency();
                self.schedule(
                    d,
                    Ev::TaggedArrive {
                        to,
                        rail: r,
                        from: n,
                        tag,
                        data: (!fail).then_some(data),
                    },
                );
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
                let inj = self.ask(n, PostKind::TaggedRecv, Some(op), Some(local), None);
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
                    Fate::Again => return,
                };
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
                let inj = self.ask(n, PostKind::Register, None, Some(region), None);
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
                    },
                );
                let res = if fail { Err(-12) } else { Ok(key) };
                self.nodes[n].core.on_registered(mr, res, out);
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

    /// Death "in the middle of a rendezvous": at the first chunk involving
    /// the doomed node.
    fn maybe_die_on_chunk(&mut self, a: usize, b: usize) {
        if let Some(d) = self.plan.death {
            if d.on_first_chunk && self.dead.is_none() && (a == d.node || b == d.node) {
                self.dead = Some(d.node);
                self.schedule(0, Ev::Death { node: d.node });
            }
        }
    }
}

pub(crate) fn slot(s: usize) -> RxSlot {
    RxSlot(s as u32)
}
