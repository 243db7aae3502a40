//! The MPI workload of a run: messages, the receives, probes and cancels
//! that consume them, when each node issues what, and the memory of every
//! request.
//!
//! Every message has a consumer on its receiving node, and consumers are
//! arranged so that every message can always be matched whatever the
//! timing: context 0 takes fully specific receives (plain, matched probe
//! then receive, or a receive raced by a cancel that is replaced if the
//! cancel wins); context 1 takes `MPI_ANY_SOURCE` with a tag; context 2 a
//! source with `MPI_ANY_TAG`; context 3 both wildcards. Within a context
//! the consumers of one node have one selector shape, and as many of each
//! selector as there are messages they can match.

use super::profiles::Rails;
use super::rng::Rng;
use super::Faults;
use crate::matching::{Selector, Source, Tag};
use crate::usermem::UserBuf;

/// Contexts (communicators) of the workload, by selector shape.
pub(crate) const CTX_SPECIFIC: u32 = 0;
pub(crate) const CTX_ANY_SOURCE: u32 = 1;
pub(crate) const CTX_ANY_TAG: u32 = 2;
pub(crate) const CTX_ANY: u32 = 3;

/// A message to send: node `from` to node `to` (ranks are node indices in
/// every context).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MsgSpec {
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) ctx: u32,
    pub(crate) tag: i32,
    pub(crate) len: usize,
    pub(crate) sync: bool,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Msg {
    pub(crate) spec: MsgSpec,
    /// The core must refuse it at once (too large for a rail with neither
    /// RMA nor tagged messages).
    pub(crate) doomed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConsumerKind {
    Recv,
    /// Matched probe (polled until it finds the message), then receive.
    Mprobe,
    /// A receive that a cancel races `after` ns later; replaced by a new
    /// receive with the same selector if the cancel wins.
    CancelRace {
        after: u64,
    },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Consumer {
    pub(crate) node: usize,
    pub(crate) sel: Selector,
    pub(crate) buf_len: usize,
    pub(crate) kind: ConsumerKind,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Cmd {
    Send(usize),
    Consume(usize),
    /// Retry of a matched probe that found nothing (with the number of
    /// retries in a row that found the whole world idle).
    Mprobe(usize, u32),
    Probe(Selector),
    /// Cancel the receive of a request (if still posted), replace it.
    Cancel(usize),
}

/// A node dies at `at`; survivors hear of it `lost_after` ns later.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Death {
    pub(crate) node: usize,
    pub(crate) at: u64,
    pub(crate) lost_after: u64,
    /// Die instead when the node's first rendezvous data moves.
    pub(crate) on_first_chunk: bool,
}

pub(crate) struct Plan {
    pub(crate) nodes: usize,
    pub(crate) msgs: Vec<Msg>,
    pub(crate) consumers: Vec<Consumer>,
    /// (time, node, command), in any order.
    pub(crate) script: Vec<(u64, usize, Cmd)>,
    pub(crate) death: Option<Death>,
    /// Messages may stay unmatched (a peer was given up without dying).
    pub(crate) allow_unmatched: bool,
    /// The core's own fault injection (MCA `fault_inject`), per node.
    pub(crate) core_faults: Vec<(usize, crate::config::Fault)>,
    /// Every core's `send_queue_limit` and `send_queue_total`.
    pub(crate) send_queue: (usize, usize),
    /// A node that takes nothing in until a time ([`Stall`]).
    pub(crate) stall: Option<Stall>,
    /// Liveness probing with this peer timeout (ns) on every node.
    pub(crate) peer_timeout: Option<u64>,
    /// A node that does not progress (busy outside MPI) for a while.
    pub(crate) busy: Option<Busy>,
    /// Sends to a dead node report their failure only this much later
    /// (ns; 0: at once).
    pub(crate) held_to_dead: u64,
    /// Posts to a dead node are refused with EAGAIN for ever (a full ring
    /// whose reader died; rxm reconnecting to an exited process).
    pub(crate) refuse_dead: bool,
}

/// Node `node` handles none of its events from `from` to `until` (ns): a
/// process busy outside MPI, whose transport still takes packets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Busy {
    pub(crate) node: usize,
    pub(crate) from: u64,
    pub(crate) until: u64,
}

/// A node busy outside MPI until `until` ns: packets to it wait in the
/// fabric, and the transmits of packets sent to it do not complete until
/// then (a provider whose peer does not read its socket).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stall {
    pub(crate) node: usize,
    pub(crate) until: u64,
}

/// The default send queue limits (those of the MCA parameters).
pub(crate) const SEND_QUEUE: (usize, usize) = (4 << 20, 32 << 20);

/// Byte `i` of message `id`: the first eight bytes hold the id, the rest a
/// pattern that differs between messages.
pub(crate) fn pattern(id: usize, i: usize) -> u8 {
    if i < 8 {
        ((id as u64 ^ 0x5EED_0000_0000_0000) >> (8 * i)) as u8
    } else {
        (i as u8).wrapping_mul(31) ^ (i >> 8) as u8 ^ (id as u8).wrapping_mul(7)
    }
}

/// What receive buffers hold before anything is written.
pub(crate) const CANARY: u8 = 0xC5;
/// What a send buffer is overwritten with once its request completed.
pub(crate) const POISON: u8 = 0xEE;

/// Memory of one request, handed to the core as a [`UserBuf`]: a heap
/// allocation only touched through its raw pointer until the request's
/// event, then read back (receives) or poisoned (sends).
pub(crate) struct Buf {
    ptr: *mut u8,
    len: usize,
    /// Its own allocation (else the front of an earlier request's, reused
    /// as an application reuses a send buffer).
    owned: bool,
}

impl Buf {
    pub(crate) fn new(data: Vec<u8>) -> Buf {
        let len = data.len();
        let ptr = Box::into_raw(data.into_boxed_slice()) as *mut u8;
        Buf {
            ptr,
            len,
            owned: true,
        }
    }

    /// `data` written over the front of this buffer, as the memory of a
    /// new request. The caller makes sure this buffer's own request has
    /// finished and no other request uses the memory meanwhile.
    pub(crate) fn reuse(&self, data: &[u8]) -> Buf {
        assert!(data.len() <= self.len);
        // SAFETY: `ptr` is valid for `len >= data.len()` bytes (the
        // allocation lives until the world is dropped), and no request
        // uses the memory (the caller's promise).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr, data.len()) };
        Buf {
            ptr: self.ptr,
            len: data.len(),
            owned: false,
        }
    }

    pub(crate) fn user(&self) -> UserBuf {
        // SAFETY: the allocation lives until `self` is dropped, which the
        // world does only after every core is gone; the simulator writes it
        // only after the request's event (or when it plays a provider
        // writing a region the core handed over for the request).
        unsafe { UserBuf::new(self.ptr, self.len) }
    }

    pub(crate) fn addr(&self) -> usize {
        self.ptr as usize
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The contents (after the request's event, or for checks).
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` bytes (it came from a boxed
        // slice of that length) and no one writes it while this borrow of
        // `self` lives (the simulator is single-threaded).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn fill(&self, b: u8) {
        // SAFETY: as for `bytes`; called after the request's event, when
        // the core no longer uses the buffer.
        unsafe { std::ptr::write_bytes(self.ptr, b, self.len) };
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: `ptr` and `len` came from `Box::into_raw` of a boxed
        // slice of that length, freed only here.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

/// The eager limit between two nodes (both ends use the same profile).
pub(crate) fn eager_limit(rails: &Rails, a: usize, b: usize) -> usize {
    rails.profiles[rails.rail_between(a, b)].eager_limit
}

fn doomed(rails: &Rails, s: &MsgSpec) -> bool {
    let p = &rails.profiles[rails.rail_between(s.from, s.to)];
    s.len > p.eager_limit && !p.rndv_read && !p.tagged && !p.rndv_msg
}

/// A message size: empty, small, around the eager limit, or several
/// rendezvous chunks.
fn size(rng: &mut Rng, eager: usize, chunk: usize) -> usize {
    let big = if cfg!(miri) { 2 } else { 10 };
    match rng.below(20) {
        0..=1 => 0,
        2..=8 => rng.usize(1, 64),
        9..=11 => rng.usize(65, eager.max(66)),
        12..=14 => rng.usize(eager.saturating_sub(2), eager + 2),
        15..=18 => rng.usize(eager + 1, eager + 2 * chunk),
        _ => rng.usize(eager + 1, eager + big * chunk),
    }
}

impl Plan {
    /// A random workload for the rails and faults of a run.
    pub(crate) fn random(rng: &mut Rng, rails: &Rails, faults: &Faults) -> Plan {
        let nodes = if rails.shm_pairs {
            rng.usize(3, 4)
        } else {
            rng.usize(2, 4)
        };
        let per_pair = if cfg!(miri) { 3 } else { 10 };
        let span: u64 = rng.range(5_000, 60_000);
        let mut specs = Vec::new();
        for from in 0..nodes {
            for to in 0..nodes {
                if from == to {
                    continue;
                }
                let p = &rails.profiles[rails.rail_between(from, to)];
                for _ in 0..rng.usize(0, per_pair) {
                    let ctx = rng.below(4) as u32;
                    specs.push(MsgSpec {
                        from,
                        to,
                        ctx,
                        tag: rng.below(3) as i32,
                        len: size(rng, p.eager_limit, p.chunk),
                        sync: rng.chance(120),
                    });
                }
            }
        }
        // Shuffle so that destinations interleave in each sender's order.
        for i in (1..specs.len()).rev() {
            specs.swap(i, rng.usize(0, i));
        }
        let mut plan = Plan::explicit(nodes, rails, specs, rng, span);
        if faults.death && (nodes > 2 || rng.chance(500)) {
            plan.death = Some(Death {
                node: rng.usize(0, nodes - 1),
                at: rng.range(span / 4, span),
                lost_after: rng.range(1_000, 40_000),
                on_first_chunk: rng.chance(400),
            });
            plan.allow_unmatched = true;
        }
        // Probes at random times with random selectors.
        for _ in 0..rng.usize(0, 2 * nodes) {
            let node = rng.usize(0, nodes - 1);
            let ctx = rng.below(4) as u32;
            let src = if rng.chance(500) {
                Source::Any
            } else {
                Source::Rank(rng.below(nodes as u64) as i32)
            };
            let tag = if rng.chance(500) {
                Tag::Any
            } else {
                Tag::Value(rng.below(3) as i32)
            };
            plan.script.push((
                rng.range(0, span),
                node,
                Cmd::Probe(Selector { ctx, src, tag }),
            ));
        }
        // Half the runs with send queues of a few buffers, so that sends
        // wait for room among every other event of the matrix.
        if rng.chance(500) {
            let full = rails.profiles[0].buf_size + 128;
            let limit = rng.usize(4096, 4 * full);
            plan.send_queue = (limit, limit * rng.usize(1, 3));
        }
        // Liveness probes find a dead peer on their own: in half of the
        // deaths no one is told of it (the runtime keeps quiet), and in
        // runs without failures they must never give a live peer up. The
        // timeout is at least four times the slowest completion (a send
        // a live peer's transport takes longer than half the timeout to
        // accept passes for a dead peer's). (Drawn last, so that the rest
        // of a seed's plan is unchanged.)
        if (faults.death || !faults.any_failure()) && rng.chance(500) {
            plan.peer_timeout = Some(rng.range(400_000, 800_000));
            if let Some(d) = &mut plan.death {
                if rng.chance(500) {
                    d.lost_after = u64::MAX;
                }
            }
        }
        plan
    }

    /// A workload sending `specs` (each sender in list order) with a
    /// consumer per message, at random times within `span` ns.
    pub(crate) fn explicit(
        nodes: usize,
        rails: &Rails,
        specs: Vec<MsgSpec>,
        rng: &mut Rng,
        span: u64,
    ) -> Plan {
        let msgs: Vec<Msg> = specs
            .iter()
            .map(|s| Msg {
                spec: *s,
                doomed: doomed(rails, s),
            })
            .collect();
        let mut consumers = Vec::new();
        for m in &msgs {
            if m.doomed {
                continue;
            }
            let s = m.spec;
            // The largest message this consumer might get (wildcards).
            let max_len = msgs
                .iter()
                .filter(|o| !o.doomed && o.spec.to == s.to && o.spec.ctx == s.ctx)
                .map(|o| o.spec.len)
                .max()
                .unwrap_or(0);
            let (sel, fit) = match s.ctx {
                CTX_SPECIFIC => (Selector::from_mpi(s.ctx, s.from as i32, s.tag), s.len),
                CTX_ANY_SOURCE => (
                    Selector {
                        ctx: s.ctx,
                        src: Source::Any,
                        tag: Tag::Value(s.tag),
                    },
                    max_len,
                ),
                CTX_ANY_TAG => (
                    Selector {
                        ctx: s.ctx,
                        src: Source::Rank(s.from as i32),
                        tag: Tag::Any,
                    },
                    max_len,
                ),
                _ => (
                    Selector {
                        ctx: s.ctx,
                        src: Source::Any,
                        tag: Tag::Any,
                    },
                    max_len,
                ),
            };
            let buf_len = match rng.below(10) {
                0 => rng.usize(0, fit), // may truncate
                1 => fit + rng.usize(0, 100),
                _ => fit,
            };
            let kind = match (s.ctx, rng.below(10)) {
                (CTX_SPECIFIC, 0..=1) => ConsumerKind::CancelRace {
                    after: rng.range(0, 6_000),
                },
                (CTX_SPECIFIC | CTX_ANY_TAG | CTX_ANY, 2..=3) => ConsumerKind::Mprobe,
                _ => ConsumerKind::Recv,
            };
            consumers.push(Consumer {
                node: s.to,
                sel,
                buf_len,
                kind,
            });
        }
        // Times: sorted per node so that each node issues its sends (and
        // its consumers) in list order; sometimes in bursts at one instant
        // (which is what makes coalescing happen).
        let mut script = Vec::new();
        for node in 0..nodes {
            let sends: Vec<usize> = (0..msgs.len())
                .filter(|&i| msgs[i].spec.from == node)
                .collect();
            let cons: Vec<usize> = (0..consumers.len())
                .filter(|&i| consumers[i].node == node)
                .collect();
            for (list, is_send) in [(sends, true), (cons, false)] {
                let burst = rng.chance(300);
                let mut times: Vec<u64> = list
                    .iter()
                    .map(|_| {
                        if burst {
                            rng.range(0, 3) * span / 4
                        } else {
                            rng.range(0, span)
                        }
                    })
                    .collect();
                times.sort_unstable();
                for (t, i) in times.into_iter().zip(list) {
                    let cmd = if is_send {
                        Cmd::Send(i)
                    } else {
                        Cmd::Consume(i)
                    };
                    script.push((t, node, cmd));
                }
            }
        }
        Plan {
            nodes,
            msgs,
            consumers,
            script,
            death: None,
            allow_unmatched: false,
            core_faults: Vec::new(),
            peer_timeout: None,
            busy: None,
            held_to_dead: 0,
            refuse_dead: false,
            send_queue: SEND_QUEUE,
            stall: None,
        }
    }
}
