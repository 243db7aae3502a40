//! Directed case for a registration released while its `Register` action
//! is still queued: in one batch of node 0's actions, a packet's last
//! resend fails hard and gives its peer up, which ends a rendezvous to
//! that peer whose buffer's `Register` waits further down the batch; the
//! report of a registration run before it then asks for another one. The
//! released id must stay taken until its own report: given out again, the
//! new registration would receive the old one's report (a failure marks a
//! new bounce buffer failed; a success hands a rendezvous the old key,
//! whose registration is closed right after). The fabric follows every
//! batch (`World::note_registrations`): an id asked for again while its
//! `Register` is queued fails the run, and this case checks that the
//! ordering was produced.
//!
//! The batch is a progress tick of node 0 (4 nodes, EFA rules:
//! FI_MR_LOCAL, provider keys). Node 0 sends a small eager message C to
//! node 3 and P to node 1, then rendezvous S2 to node 2 and S1 to node 1.
//! Every post of C and P fails hard (one tick each; the last of each is
//! refused with EAGAIN, which uses no resend, until the other is ready).
//! The total send queue limit lets the rendezvous through only once C is
//! given up (node 3 lost), which makes room without a completion, so they
//! start at the next tick, the one that posts P for the last time. That
//! tick's batch: P's last post (it fails: node 1 is given up, S1 fails
//! and releases its registration), S2's registration (its report asks for
//! what S2 needs next: a bounce buffer for its RTS, or on `efa-stripe`
//! its buffer's registration on the first stripe rail), then S1's
//! registration, made to fail or to succeed. Node 2's messages (S2, and
//! one it sends to node 0) must arrive whole, the sends to the nodes
//! given up fail, and nothing hangs.

#![cfg(test)]

use super::defects::{
    assert_delivered, directed_faults, directed_script, errors, msg, recv_status, send_status,
};
use super::fabric::{Inject, PostKind, World};
use super::profiles::profile_set;
use super::workload::{MsgSpec, SEND_QUEUE};
use crate::proto::{Status, OP_OVERHEAD, RESENDS, SMALL_BUF};
use crate::wire::Kind;
use std::cell::Cell;
use std::rc::Rc;

/// The world's seed: node 0 caches no registrations with it (a cache
/// would keep S1's released registration instead of closing it).
const SEED: u64 = 9;

/// The messages, by index.
const C: usize = 0;
const P: usize = 1;
const S2: usize = 2;
const S1: usize = 3;
const BACK: usize = 4;

/// What the hook saw.
#[derive(Default)]
struct Seen {
    /// Hard failures of C's and P's posts so far.
    c_fails: Cell<u32>,
    p_fails: Cell<u32>,
    /// When C's and P's last posts were made (ns).
    c_last: Cell<Option<u64>>,
    p_last: Cell<Option<u64>>,
    /// When S1's registration was run (ns).
    s1_reg: Cell<Option<u64>>,
}

/// Plays the case on `profile`, S1's registration failing if `old_fails`.
fn run(profile: &str, old_fails: bool) -> (World, Rc<Seen>) {
    let rails = profile_set(profile).expect("known profile");
    let p = &rails.profiles[0];
    let (eager, chunk) = (100, p.chunk);
    // S2 is long enough to stripe whatever the node's threshold.
    let (s1_len, s2_len) = (3 * chunk + 100, 6 * chunk + 200);
    assert!(s1_len > p.eager_limit && s1_len != s2_len);
    let specs: Vec<MsgSpec> = vec![
        msg(0, 3, C as i32, eager, false),
        msg(0, 1, P as i32, eager, false),
        msg(0, 2, S2 as i32, s2_len, false),
        msg(0, 1, S1 as i32, s1_len, false),
        msg(2, 0, BACK as i32, eager, false),
    ];
    let mut plan = directed_script(&rails, specs, None);
    // Node 0's sends to nodes 1 and 3 fail: their messages stay unmatched.
    plan.allow_unmatched = true;
    // Room for one small packet's charge and a send of full size, not
    // for two small ones and that send: the rendezvous wait while C and
    // P are both charged. The eager packets take a small bounce buffer
    // each (`SMALL_BUF`), so that no buffer of full size is free when
    // S2's RTS takes one.
    let small = SMALL_BUF + OP_OVERHEAD;
    let full = p.buf_size + OP_OVERHEAD;
    plan.send_queue = (SEND_QUEUE.0, full + small + small / 2);
    let mut w = World::new(SEED, rails, directed_faults(), plan);
    assert!(
        w.nodes[0].ring.is_none(),
        "seed {SEED}: node 0 caches registrations"
    );
    let seen = Rc::new(Seen::default());
    let s = seen.clone();
    let last = u32::from(RESENDS) + 1;
    w.hook = Some(Box::new(move |i| {
        if i.node != 0 {
            return Inject::Clean;
        }
        match i.kind {
            PostKind::Send if i.packet == Some(Kind::Eager) && i.tag == Some(C as i32) => {
                // C's last post waits (EAGAIN uses no resend) until P has
                // used its resends too.
                if s.c_fails.get() + 1 == last {
                    if s.p_fails.get() + 1 < last {
                        return Inject::Again;
                    }
                    s.c_last.set(Some(i.now));
                }
                s.c_fails.set(s.c_fails.get() + 1);
                Inject::Hard(-5)
            }
            PostKind::Send if i.packet == Some(Kind::Eager) && i.tag == Some(P as i32) => {
                // P's last post waits for a tick after C's: the first
                // whose batch starts the rendezvous.
                if s.p_fails.get() + 1 == last {
                    if s.c_last.get().is_none_or(|t| t >= i.now) {
                        return Inject::Again;
                    }
                    s.p_last.set(Some(i.now));
                }
                s.p_fails.set(s.p_fails.get() + 1);
                Inject::Hard(-5)
            }
            PostKind::Register if i.rail == 0 && i.len == s1_len => {
                s.s1_reg.set(Some(i.now));
                if old_fails {
                    Inject::CqError
                } else {
                    Inject::Clean
                }
            }
            _ => Inject::Clean,
        }
    }));
    w.run();
    w.check();
    (w, seen)
}

/// S1's registration is released while its `Register` is still queued
/// behind P's last post, and S2's report asks for a registration before
/// S1's runs: that one gets an id of its own, S1's report (a failure or
/// a success) goes to no one, node 2's messages arrive whole, the sends
/// to the nodes given up fail, and node 0 counts one error per packet
/// failed for good and per peer given up, none for S1's report. With the
/// id given out again the fabric fails the run; without that check, on
/// `efa-stripe` S2 fails (its first stripe registration takes S1's
/// report: S1's failure, or the key of S1's registration, closed right
/// after), and on `efa` a failed S1 registration counts as the RTS
/// buffer's.
#[test]
fn sim_registration_released_before_its_report_keeps_its_id() {
    for profile in ["efa", "efa-stripe"] {
        for old_fails in [true, false] {
            let case = format!(
                "{profile}, S1's registration {}",
                if old_fails { "failing" } else { "succeeding" }
            );
            let (w, seen) = run(profile, old_fails);
            let last = u32::from(RESENDS) + 1;
            assert_eq!(seen.c_fails.get(), last, "{case}: C's posts");
            assert_eq!(seen.p_fails.get(), last, "{case}: P's posts");
            let p_last = seen.p_last.get().expect("P's last post");
            assert!(
                seen.c_last.get().is_some_and(|t| t < p_last),
                "{case}: C given up before P's last post"
            );
            assert_eq!(
                seen.s1_reg.get(),
                Some(p_last),
                "{case}: S1's registration ran in the batch of P's last post"
            );
            // The path: S1's registration released before its report, and
            // another asked for meanwhile, with an id of its own.
            assert_eq!(
                w.released_unreported, 1,
                "{case}: registrations released before their report"
            );
            assert!(
                !w.asked_while_released.is_empty(),
                "{case}: no registration asked for while S1's was pending"
            );
            for &(n, old, new) in &w.asked_while_released {
                assert_eq!(n, 0, "{case}");
                assert_ne!(old, new, "{case}: the released id was given out again");
            }
            for (node, m) in [(3, C), (1, P)] {
                let peer = w.nodes[0].peer_of[node].expect("a peer");
                assert!(
                    w.nodes[0].core.peer_is_lost(peer),
                    "{case}: node {node} kept after message {m} failed"
                );
            }
            let peer = w.nodes[0].peer_of[2].expect("a peer");
            assert!(!w.nodes[0].core.peer_is_lost(peer), "{case}: node 2 lost");
            assert_delivered(&w, [S2, BACK], &case);
            for m in [C, P, S1] {
                assert_eq!(send_status(&w, m), Some(Status::Failed), "{case}: send {m}");
                assert_eq!(recv_status(&w, m), None, "{case}: receive {m}");
            }
            // C and P failed for good, nodes 3 and 1 given up.
            assert_eq!(errors(&w, 0), 4, "{case}: errors of node 0");
        }
    }
}
