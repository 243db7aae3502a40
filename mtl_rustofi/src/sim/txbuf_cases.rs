//! Directed cases for bounce buffers whose registration fails (FI_MR_LOCAL
//! rails). A packet whose buffer could not be registered moves to another
//! buffer without using up its resends, so failed registrations alone do
//! not give a live peer up (the peer would never hear of it, and its own
//! sends to this node would wait for ever); registrations that never
//! succeed still end in failed sends and a peer given up, not a hang.

#![cfg(test)]

use super::defects::{assert_delivered, directed, errors, msg, send_status};
use super::fabric::{Inject, PostInfo, PostKind, World};
use super::profiles::profile_set;
use super::workload::MsgSpec;
use crate::proto::ids::OpId;
use crate::proto::{Status, REBUFFERS, RESENDS};
use std::cell::Cell;
use std::rc::Rc;

/// Read rendezvous, send rendezvous, and message rendezvous (no FI_TAGGED,
/// its data in bounce buffers too); all register bounce buffers.
const PROFILES: [&str; 3] = ["efa", "efa-send", "efa-direct-msg"];

/// Node 0 sends a copied eager, a synchronous eager, a rendezvous (its
/// user buffer larger than any bounce buffer) and another eager message.
/// The eager messages are too long to go inline (an inline packet names
/// no registration).
fn specs(profile: &str) -> (Vec<MsgSpec>, usize) {
    let p = &profile_set(profile).expect("known profile").profiles[0];
    let eager = p.inject_size.max(100).min(p.eager_limit);
    let specs = vec![
        msg(0, 1, 0, eager, false),
        msg(0, 1, 1, eager, true),
        msg(0, 1, 2, p.buf_size + 2 * p.chunk + 100, false),
        msg(0, 1, 3, eager, false),
    ];
    (specs, p.buf_size)
}

/// A registration of one of node 0's bounce buffers (every user buffer of
/// these cases is larger than a bounce buffer).
fn bounce_registration(i: &PostInfo, buf_size: usize) -> bool {
    i.node == 0 && i.kind == PostKind::Register && i.len <= buf_size
}

/// Counts in `tried` the posts of node 0's first packet (`first`, its
/// operation id once seen). The id is reused once the packet is done with,
/// its posts counted from 1 again, so only the next post in turn counts.
fn count_first_packet(i: &PostInfo, first: &mut Option<OpId>, tried: &Cell<u32>) {
    if i.node == 0 && i.kind == PostKind::Send {
        *first = first.or(i.op);
        if *first == i.op && i.attempt == tried.get() + 1 {
            tried.set(i.attempt);
        }
    }
}

/// Asserts that all `n` messages arrived, node 1 is still node 0's peer,
/// and node 0 counted one error per failed registration (`failed`) and no
/// other.
fn assert_all_arrived_peer_kept(w: &World, n: usize, failed: u32, profile: &str) {
    assert_delivered(w, 0..n, profile);
    let peer = w.nodes[0].peer_of[1].expect("a peer");
    assert!(
        !w.nodes[0].core.peer_is_lost(peer),
        "{profile}: node 1 given up over failed registrations"
    );
    assert_eq!(errors(w, 0), u64::from(failed), "{profile}: errors");
}

/// Node 0's bounce-buffer registrations fail until its first packet has
/// failed more times than a packet has resends: the packet moves from
/// buffer to buffer, every message arrives, and node 1 stays node 0's
/// peer. Each failed registration is one error and nothing else is.
#[test]
fn sim_failed_bounce_registrations_use_no_resends() {
    let fails = u32::from(RESENDS) + 2;
    assert!(fails <= u32::from(REBUFFERS), "the case needs the moves");
    for profile in PROFILES {
        let (specs, buf_size) = specs(profile);
        let n = specs.len();
        let fired = Rc::new(Cell::new(0u32));
        let tried = Rc::new(Cell::new(0u32));
        let (f, t) = (fired.clone(), tried.clone());
        let mut first = None;
        let w = directed(profile, specs, false, move |i| {
            count_first_packet(i, &mut first, &t);
            // The registration a post of the first packet will name: its
            // first `fails` posts meet a failed one.
            if bounce_registration(i, buf_size) && t.get() < fails {
                f.set(f.get() + 1);
                return Inject::CqError;
            }
            Inject::Clean
        });
        assert_eq!(tried.get(), fails + 1, "{profile}: first packet's posts");
        assert_all_arrived_peer_kept(&w, n, fired.get(), profile);
    }
}

/// Every bounce-buffer registration of node 0 fails: the first packet
/// tries another buffer for each move and each resend, then fails for
/// good; node 1 is given up and every send fails with it, so nothing on
/// node 0 hangs.
#[test]
fn sim_bounce_registrations_that_never_succeed_fail_the_sends() {
    for profile in PROFILES {
        let (specs, buf_size) = specs(profile);
        let n = specs.len();
        let tried = Rc::new(Cell::new(0u32));
        let t = tried.clone();
        let mut first = None;
        let w = directed(profile, specs, true, move |i| {
            count_first_packet(i, &mut first, &t);
            if bounce_registration(i, buf_size) {
                return Inject::CqError;
            }
            Inject::Clean
        });
        let tries = 1 + u32::from(REBUFFERS) + u32::from(RESENDS);
        assert_eq!(tried.get(), tries, "{profile}: first packet's posts");
        let peer = w.nodes[0].peer_of[1].expect("a peer");
        assert!(w.nodes[0].core.peer_is_lost(peer), "{profile}: peer kept");
        // No packet was ever taken by the provider, so no send completed:
        // a copied eager send completes only as its packet is handed over.
        for m in 0..n {
            assert_eq!(
                send_status(&w, m),
                Some(Status::Failed),
                "{profile}: send {m}"
            );
        }
        assert!(errors(&w, 0) >= u64::from(tries), "{profile}: errors");
    }
}

/// Node 0's first bounce buffer is registered and every later
/// registration fails (memory that can no longer be locked), while a
/// burst of packets is in flight: a packet whose buffer failed waits for
/// a pooled buffer to come back instead of using up its moves on new ones,
/// so every message arrives and node 1 stays node 0's peer.
#[test]
fn sim_packets_wait_for_pooled_buffers_when_registration_fails() {
    for profile in PROFILES {
        let p = &profile_set(profile).expect("known profile").profiles[0];
        let (eager, buf_size) = (p.inject_size.max(100).min(p.eager_limit), p.buf_size);
        let specs: Vec<MsgSpec> = (0..12).map(|t| msg(0, 1, t, eager, t % 4 == 1)).collect();
        let n = specs.len();
        let fired = Rc::new(Cell::new(0u32));
        let f = fired.clone();
        let mut registered = 0;
        let w = directed(profile, specs, false, move |i| {
            if bounce_registration(i, buf_size) {
                registered += 1;
                if registered > 1 {
                    f.set(f.get() + 1);
                    return Inject::CqError;
                }
            }
            Inject::Clean
        });
        assert!(
            fired.get() > 0,
            "{profile}: {} registrations failed",
            fired.get()
        );
        assert_all_arrived_peer_kept(&w, n, fired.get(), profile);
    }
}
