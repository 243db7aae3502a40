//! Directed cases for the error-path defects of the engine at be0251a.
//! Each drives the exact path of one defect with a fault hook and checks
//! the correct behaviour on top of the simulator's usual checks. Built
//! with the `be0251a-defects` feature (which puts the old behaviour back
//! into the core) they fail.

#![cfg(test)]

use super::fabric::{Inject, PostInfo, PostKind, ReqKind, World};
use super::profiles::{profile_set, Rails};
use super::rng::Rng;
use super::workload::{Cmd, ConsumerKind, MsgSpec, Plan};
use super::Faults;
use crate::config::Fault;
use crate::proto::{Event, Stats, Status, RESENDS};
use crate::wire::Kind;
use std::cell::Cell;
use std::rc::Rc;

/// A message from `from` to `to` with a tag of its own (its index).
pub(super) fn msg(from: usize, to: usize, tag: i32, len: usize, sync: bool) -> MsgSpec {
    MsgSpec {
        from,
        to,
        ctx: 0,
        tag,
        len,
        sync,
    }
}

/// Plays `specs` (receives posted first, each of the message's size, then
/// the sends in order) with faults injected by `hook` only.
pub(super) fn directed(
    profile: &str,
    specs: Vec<MsgSpec>,
    allow_unmatched: bool,
    hook: impl FnMut(&PostInfo) -> Inject + 'static,
) -> World {
    directed_with(profile, specs, allow_unmatched, Vec::new(), hook)
}

/// [`directed`], with receive buffers of the lengths `buf_lens` (one per
/// message, in order) instead of each message's.
pub(super) fn directed_into(
    profile: &str,
    specs: Vec<MsgSpec>,
    buf_lens: Vec<usize>,
    hook: impl FnMut(&PostInfo) -> Inject + 'static,
) -> World {
    assert_eq!(specs.len(), buf_lens.len(), "one buffer per message");
    directed_plan(
        profile,
        specs,
        Some(buf_lens),
        false,
        Vec::new(),
        |_| {},
        hook,
    )
}

/// [`directed`], with `tweak` applied to the plan before it runs.
pub(super) fn directed_tweaked(
    profile: &str,
    specs: Vec<MsgSpec>,
    tweak: impl FnOnce(&mut Plan),
    hook: impl FnMut(&PostInfo) -> Inject + 'static,
) -> World {
    directed_plan(profile, specs, None, false, Vec::new(), tweak, hook)
}

/// [`directed`], with the core's own fault injection on some nodes.
fn directed_with(
    profile: &str,
    specs: Vec<MsgSpec>,
    allow_unmatched: bool,
    core_faults: Vec<(usize, Fault)>,
    hook: impl FnMut(&PostInfo) -> Inject + 'static,
) -> World {
    directed_plan(
        profile,
        specs,
        None,
        allow_unmatched,
        core_faults,
        |_| {},
        hook,
    )
}

fn directed_plan(
    profile: &str,
    specs: Vec<MsgSpec>,
    buf_lens: Option<Vec<usize>>,
    allow_unmatched: bool,
    core_faults: Vec<(usize, Fault)>,
    tweak: impl FnOnce(&mut Plan),
    hook: impl FnMut(&PostInfo) -> Inject + 'static,
) -> World {
    let rails = profile_set(profile).expect("known profile");
    let mut plan = directed_script(&rails, specs, buf_lens);
    plan.allow_unmatched = allow_unmatched;
    plan.core_faults = core_faults;
    tweak(&mut plan);
    let mut w = World::new(3, rails, directed_faults(), plan);
    w.hook = Some(Box::new(hook));
    w.run();
    w.check();
    w
}

/// The plan of a directed case on `rails`: `specs` sent one by one, 10 ns apart from
/// 110 ns on, into receives (of `buf_lens`, else each message's length)
/// posted at time 0.
pub(super) fn directed_script(
    rails: &Rails,
    specs: Vec<MsgSpec>,
    buf_lens: Option<Vec<usize>>,
) -> Plan {
    let nodes = specs.iter().map(|s| s.from.max(s.to)).max().unwrap_or(1) + 1;
    let mut plan = Plan::explicit(nodes, rails, specs, &mut Rng::new(1), 1_000);
    let lens: Vec<usize> =
        buf_lens.unwrap_or_else(|| plan.msgs.iter().map(|m| m.spec.len).collect());
    for (c, len) in plan.consumers.iter_mut().zip(lens) {
        c.kind = ConsumerKind::Recv;
        c.buf_len = len;
    }
    let mut k = 0;
    for (t, _, cmd) in &mut plan.script {
        *t = match cmd {
            Cmd::Consume(_) => 0,
            _ => {
                k += 1;
                100 + 10 * k
            }
        };
    }
    plan
}

/// A directed case's faults: none but what its hook injects.
pub(super) fn directed_faults() -> Faults {
    Faults {
        directed: true,
        ..Faults::default()
    }
}

/// Status of the send of message `i`.
pub(super) fn send_status(w: &World, i: usize) -> Option<Status> {
    w.reqs.iter().find_map(|r| match (r.kind, r.done) {
        (ReqKind::Send { msg }, Some((_, Event::Send { status, .. }))) if msg == i => Some(status),
        _ => None,
    })
}

/// Asserts that each of messages `msgs` was sent and received whole.
pub(super) fn assert_delivered(w: &World, msgs: impl IntoIterator<Item = usize>, ctx: &str) {
    for m in msgs {
        assert_eq!(recv_status(w, m), Some(Status::Ok), "{ctx}: receive {m}");
        assert_eq!(send_status(w, m), Some(Status::Ok), "{ctx}: send {m}");
    }
}

/// Status of the receive that got message `i` (tags are unique).
pub(super) fn recv_status(w: &World, i: usize) -> Option<Status> {
    let m = w.plan.msgs[i].spec;
    w.reqs.iter().find_map(|r| match r.done {
        Some((_, Event::Recv { tag, status, .. })) if r.node == m.to && tag == m.tag => {
            Some(status)
        }
        _ => None,
    })
}

pub(super) fn errors(w: &World, node: usize) -> u64 {
    Stats::get(&w.nodes[node].stats.errors)
}

fn is_chunk(i: &PostInfo) -> bool {
    matches!(i.kind, PostKind::Read | PostKind::TaggedSend)
}

/// The profiles a case runs on: all of them, or the first under Miri.
fn some<'a>(list: &'a [&'a str]) -> &'a [&'a str] {
    if cfg!(miri) {
        &list[..1]
    } else {
        list
    }
}

/// Profiles with the read rendezvous (efa, tcp;ofi_rxm) and the send
/// rendezvous (efa-send).
const RNDV_PROFILES: [&str; 3] = ["efa", "tcp-rxm", "efa-send"];

/// A rendezvous of three chunks, then an eager message.
fn rndv_then_eager(profile: &str) -> Vec<MsgSpec> {
    let p = &profile_set(profile).expect("known").profiles[0];
    vec![
        msg(0, 1, 0, p.eager_limit + 2 * p.chunk + 100, false),
        msg(0, 1, 1, 100, false),
    ]
}

/// Defect 1: a chunk whose post was rejected with EAGAIN, queued, and
/// whose retried post then fails hard. The old engine freed the chunk and
/// then read it to update its rendezvous; here the operation is a slab
/// entry removed only after its one report was acted on, so the failure
/// must reach the rendezvous: it completes exactly once, failed, and
/// nothing is left.
#[test]
fn sim_defect_1_chunk_retry_failure_no_use_after_free() {
    for &profile in some(&RNDV_PROFILES) {
        let fired = Rc::new(Cell::new(0u32));
        let f = fired.clone();
        let mut target = None;
        let w = directed(profile, rndv_then_eager(profile), false, move |i| {
            if !is_chunk(i) || f.get() == 3 {
                return Inject::Clean;
            }
            target = target.or(i.op);
            if target != i.op {
                return Inject::Clean;
            }
            match i.attempt {
                1 => {
                    f.set(1);
                    Inject::Again
                }
                _ => {
                    f.set(3);
                    Inject::Hard(-5)
                }
            }
        });
        assert_eq!(fired.get(), 3, "{profile}: the retried post was not made");
        assert_eq!(recv_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(send_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(recv_status(&w, 1), Some(Status::Ok), "{profile}");
        for n in &w.nodes {
            assert_eq!(n.core.leftovers().ops, 0, "{profile}: operations left");
        }
    }
}

/// Defect 2: the last chunk of a rendezvous fails hard at once. The
/// request still completes (failed), and the peer learns of it (read:
/// the FIN; send: its chunk's receive fails), so its request completes.
#[test]
fn sim_defect_2_last_chunk_hard_failure_completes_and_sends_fin() {
    for &profile in some(&RNDV_PROFILES) {
        let fired = Rc::new(Cell::new(false));
        let f = fired.clone();
        let w = directed(profile, rndv_then_eager(profile), false, move |i| {
            if is_chunk(i) && i.last_chunk && !f.get() {
                f.set(true);
                return Inject::Hard(-5);
            }
            Inject::Clean
        });
        assert!(fired.get(), "{profile}: no last chunk was posted");
        assert_eq!(recv_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(send_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(recv_status(&w, 1), Some(Status::Ok), "{profile}");
    }
}

/// The packets of defect 3: a copied eager, a synchronous eager and an
/// RTS, each first in a stream of messages from node 0 to node 1.
fn defect3_cases(profile: &str) -> Vec<(&'static str, Kind, Vec<MsgSpec>)> {
    let p = &profile_set(profile).expect("known").profiles[0];
    let rest = |first: MsgSpec| {
        vec![
            first,
            msg(0, 1, 1, 10, false),
            msg(0, 1, 2, p.eager_limit + 10, false),
            msg(0, 1, 3, 0, true),
            msg(0, 1, 4, 300, false),
        ]
    };
    vec![
        ("copied eager", Kind::Eager, rest(msg(0, 1, 0, 100, false))),
        (
            "synchronous eager",
            Kind::Eager,
            rest(msg(0, 1, 0, 100, true)),
        ),
        (
            "RTS",
            Kind::Rts,
            rest(msg(0, 1, 0, p.eager_limit + 1, false)),
        ),
    ]
}

/// Defect 3: a copied eager, synchronous eager or RTS packet that fails
/// holds a sequence number its receiver waits for. Failing once, it is
/// resent and everything arrives in order; failing for good, the peer is
/// given up: its requests fail and nothing hangs.
#[test]
fn sim_defect_3_failed_matchable_packet_does_not_stall_the_peer() {
    for &profile in some(&["efa", "udp-rxd"]) {
        for (what, kind, specs) in defect3_cases(profile) {
            for fails in [1, RESENDS as u32 + 1] {
                let fired = Rc::new(Cell::new(0u32));
                let f = fired.clone();
                let mut target = None;
                let w = directed(profile, specs.clone(), fails > 1, move |i| {
                    if i.node != 0 || i.kind != PostKind::Send || i.packet != Some(kind) {
                        return Inject::Clean;
                    }
                    target = target.or(i.op);
                    if target == i.op && f.get() < fails {
                        f.set(f.get() + 1);
                        return Inject::CqError;
                    }
                    Inject::Clean
                });
                let case = format!("{profile}: {what} failing {fails} time(s)");
                assert_eq!(fired.get(), fails, "{case}: not failed as planned");
                // A packet resent with success is no error; one that fails
                // for good is (and so is the peer given up).
                if fails == 1 {
                    assert_eq!(errors(&w, 0), 0, "{case}");
                } else {
                    assert!(errors(&w, 0) >= 1, "{case}");
                }
                if fails == 1 {
                    for i in 0..specs.len() {
                        assert_eq!(send_status(&w, i), Some(Status::Ok), "{case}: send {i}");
                        assert_eq!(recv_status(&w, i), Some(Status::Ok), "{case}: receive {i}");
                    }
                } else {
                    // A copied eager send completed when it was copied; the
                    // others fail with the packet.
                    let first = if what == "copied eager" {
                        Status::Ok
                    } else {
                        Status::Failed
                    };
                    assert_eq!(send_status(&w, 0), Some(first), "{case}");
                    assert_ne!(recv_status(&w, 0), Some(Status::Ok), "{case}");
                }
            }
        }
    }
}

/// Defect 4: a failed rendezvous read is one error on the receiver (and
/// one on the sender, which hears of it in the FIN); a failed tagged
/// receive of the send rendezvous is one error on the receiver only.
#[test]
fn sim_defect_4_failed_rendezvous_counts_one_error() {
    let cases = [
        ("efa", PostKind::Read, 1),
        ("tcp-rxm", PostKind::Read, 1),
        ("efa-send", PostKind::TaggedRecv, 0),
    ];
    for &(profile, kind, sender_errors) in if cfg!(miri) { &cases[..1] } else { &cases } {
        let fired = Rc::new(Cell::new(false));
        let f = fired.clone();
        let w = directed(profile, rndv_then_eager(profile), false, move |i| {
            if i.kind == kind && !f.get() {
                f.set(true);
                return Inject::CqError;
            }
            Inject::Clean
        });
        assert!(fired.get(), "{profile}: no chunk failed");
        assert_eq!(recv_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(
            errors(&w, 1),
            1,
            "{profile}: errors counted on the receiver"
        );
        assert_eq!(
            errors(&w, 0),
            sender_errors,
            "{profile}: errors counted on the sender"
        );
    }
}

/// Defect 5: reposting a receive buffer fails (hard error, then EAGAIN):
/// the buffer is retried at the next progress and never lost, so every
/// buffer is posted at quiesce (checked for every run).
#[test]
fn sim_defect_5_failed_rx_repost_is_retried() {
    for &profile in some(&["efa", "shm", "udp-rxd"]) {
        let rx = profile_set(profile).expect("known").profiles[0].rx_count as u64;
        let fired = Rc::new(Cell::new(0u32));
        let f = fired.clone();
        let specs: Vec<MsgSpec> = (0..24)
            .map(|i| msg(i % 2, 1 - i % 2, i as i32, 50 * i, false))
            .collect();
        let w = directed(profile, specs, false, move |i| {
            if i.kind != PostKind::PostRecv || i.rx_post <= rx {
                return Inject::Clean;
            }
            match i.rx_post - rx {
                1 | 3 | 6 => {
                    f.set(f.get() + 1);
                    Inject::Hard(-5)
                }
                2 | 4 => {
                    f.set(f.get() + 1);
                    Inject::Again
                }
                _ => Inject::Clean,
            }
        });
        assert_eq!(fired.get(), 10, "{profile}: reposts not failed as planned");
        for (n, node) in w.nodes.iter().enumerate() {
            assert_eq!(node.core.leftovers().rx_unposted, 0, "{profile}: node {n}");
            // Counted once per buffer until it is posted again: three hard
            // failures are one to three errors, depending on whether they
            // hit one buffer's retries or different buffers.
            let e = errors(&w, n);
            assert!(
                (1..=3).contains(&e),
                "{profile}: node {n}: {e} errors for three hard failures"
            );
        }
    }
}

/// The core's own fault injection (MCA `fault_inject`): a corrupted RMA
/// key makes the provider fail the read (wrong key), so the rendezvous
/// fails on both sides and the next message still arrives; a malformed
/// packet is dropped with one error and the messages around it arrive.
#[test]
fn sim_core_fault_injection_rma_key_and_bad_packet() {
    for &profile in some(&["efa", "efa-va", "tcp-rxm"]) {
        let w = directed_with(
            profile,
            rndv_then_eager(profile),
            false,
            vec![(1, Fault::RmaKey)],
            |_| Inject::Clean,
        );
        assert_eq!(recv_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(send_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(recv_status(&w, 1), Some(Status::Ok), "{profile}");
        // Every chunk's read is in flight with the bad key (fewer chunks
        // than reads allowed in flight): one error per failed operation.
        let p = &profile_set(profile).expect("known").profiles[0];
        let chunks = w.plan.msgs[0].spec.len.div_ceil(p.chunk) as u64;
        assert!(chunks <= 8);
        assert_eq!(errors(&w, 1), chunks, "{profile}: the failed reads");
    }
    let specs = vec![
        msg(0, 1, 0, 10, false),
        msg(0, 1, 1, 20, false),
        msg(0, 1, 2, 0, true),
    ];
    let w = directed_with("efa", specs, false, vec![(0, Fault::BadPacket)], |_| {
        Inject::Clean
    });
    for i in 0..3 {
        assert_eq!(recv_status(&w, i), Some(Status::Ok), "message {i}");
        assert_eq!(send_status(&w, i), Some(Status::Ok), "message {i}");
    }
    assert_eq!(errors(&w, 1), 1, "the malformed packet");
    assert_eq!(errors(&w, 0), 0);
}

/// A rendezvous of many chunks on a rail with one operation in flight,
/// whose first chunk fails: the abort finds nearly all of them still in
/// the transmit queue (found by fuzzing the core: dropping them one at a
/// time re-entered the abort for each, as deep as the queue, and left the
/// outer pass with freed operation ids). Both requests fail once, the next
/// message arrives intact, and nothing is left.
#[test]
fn sim_abort_with_a_deep_chunk_queue() {
    for &profile in some(&["tiny", "tiny-send"]) {
        let p = &profile_set(profile).expect("known").profiles[0];
        let chunks = if cfg!(miri) { 8 } else { 300 };
        let specs = vec![
            msg(0, 1, 0, p.eager_limit + chunks * p.chunk, false),
            msg(0, 1, 1, 100, false),
        ];
        let fired = Rc::new(Cell::new(false));
        let f = fired.clone();
        let w = directed(profile, specs, false, move |i| {
            if is_chunk(i) && !f.get() {
                f.set(true);
                return Inject::CqError;
            }
            Inject::Clean
        });
        assert!(fired.get(), "{profile}: no chunk was posted");
        assert_eq!(recv_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(send_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(recv_status(&w, 1), Some(Status::Ok), "{profile}");
        assert_eq!(
            w.stray_cancels, 0,
            "{profile}: cancels of operations not in flight"
        );
        for n in &w.nodes {
            assert_eq!(n.core.leftovers().ops, 0, "{profile}: operations left");
        }
    }
}

/// Send rendezvous of two chunks: the receiver's first tagged receive
/// fails hard and the second is refused with EAGAIN in the same pass,
/// after the abort's Cancel for it was queued (that Cancel then finds
/// nothing posted); the CTS is refused once too, so the abort's FIN
/// reaches the sender first and it sends no data. The refused receive
/// must be dropped, not posted again to wait for ever for data that never
/// comes (no other chunk's report is left to cancel it again).
#[test]
fn sim_abort_drops_a_chunk_refused_in_the_same_pass() {
    for &profile in some(&["efa-send", "tiny-send", "udp-rxd"]) {
        let p = &profile_set(profile).expect("known").profiles[0];
        let len = p.chunk + p.chunk / 2;
        assert!(len > p.eager_limit, "{profile}: not a rendezvous");
        let specs = vec![msg(0, 1, 0, len, false), msg(0, 1, 1, 100, false)];
        let recvs = Rc::new(Cell::new(0u32));
        let reposts = Rc::new(Cell::new(0u32));
        let (r, again) = (recvs.clone(), reposts.clone());
        let w = directed(profile, specs, false, move |i| match i.kind {
            PostKind::TaggedRecv if i.attempt > 1 => {
                again.set(again.get() + 1);
                Inject::Clean
            }
            PostKind::TaggedRecv => {
                r.set(r.get() + 1);
                match r.get() {
                    1 => Inject::Hard(-5),
                    2 => Inject::Again,
                    _ => Inject::Clean,
                }
            }
            PostKind::Send if i.packet == Some(Kind::Cts) && i.attempt == 1 => Inject::Again,
            _ => Inject::Clean,
        });
        assert_eq!(recvs.get(), 2, "{profile}: tagged receives posted");
        assert_eq!(
            reposts.get(),
            0,
            "{profile}: the refused receive was posted again"
        );
        assert_eq!(recv_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(send_status(&w, 0), Some(Status::Failed), "{profile}");
        assert_eq!(recv_status(&w, 1), Some(Status::Ok), "{profile}");
        for n in &w.nodes {
            assert_eq!(n.core.leftovers().ops, 0, "{profile}: operations left");
        }
    }
}
