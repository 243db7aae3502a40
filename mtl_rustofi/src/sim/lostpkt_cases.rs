//! Directed cases for a matchable message that the receiving provider
//! lost with only its header placed (`proto/rx_error.rs`): the receive it
//! matches fails, a sender that waits is released, and the messages
//! behind it in the peer's order still arrive.

#![cfg(test)]

use super::defects::{assert_delivered, directed, msg, recv_status, send_status};
use super::fabric::{Inject, PostKind};
use super::profiles::profile_set;
use super::workload::MsgSpec;
use crate::proto::{Stats, Status};
use crate::wire::Kind;
use std::cell::Cell;
use std::rc::Rc;

/// Read, message and send rendezvous; an ordered provider and unordered
/// ones (where the lost message may be held behind an earlier one).
const PROFILES: [&str; 4] = ["efa", "udp-rxd", "msg-only", "tcp-rxm"];

/// Five messages from node 0 to node 1; the third is `len` bytes,
/// synchronous if `sync`, and its packet is lost at the receiver. The
/// second and fourth are synchronous, which no packet carries behind
/// another message, so the third travels alone even where the sender
/// coalesces (the loss of messages coalesced behind a lost one is not
/// made good: see `proto/rx_error.rs`).
fn lose_third(what: &str, len_of: fn(usize) -> usize, sync: bool) -> Vec<(String, super::World)> {
    let mut worlds = Vec::new();
    for profile in PROFILES {
        let eager = profile_set(profile).expect("known").profiles[0].eager_limit;
        let specs: Vec<MsgSpec> = (0..5)
            .map(|i| {
                let len = if i == 2 { len_of(eager) } else { 100 };
                msg(0, 1, i, len, i == 1 || i == 3 || (sync && i == 2))
            })
            .collect();
        let sent = Rc::new(Cell::new(0u32));
        let s = sent.clone();
        let w = directed(profile, specs, false, move |i| {
            let matchable = matches!(i.packet, Some(Kind::Eager | Kind::Rts));
            if i.kind == PostKind::Send && i.node == 0 && matchable {
                s.set(s.get() + 1);
                if i.tag == Some(2) {
                    return Inject::Damaged;
                }
            }
            Inject::Clean
        });
        assert!(sent.get() >= 3, "{profile}/{what}: {} packets", sent.get());
        assert_eq!(
            Stats::get(&w.nodes[1].stats.rx_lost),
            1,
            "{profile}/{what}: one loss"
        );
        assert_delivered(&w, [0, 1, 3, 4], &format!("{profile}/{what}"));
        assert_eq!(
            recv_status(&w, 2),
            Some(Status::Failed),
            "{profile}/{what}: the lost one"
        );
        worlds.push((profile.to_string(), w));
    }
    worlds
}

/// A lost eager message: its receive fails, its sender had completed.
#[test]
fn sim_lost_eager_message_fails_its_receive_and_no_other() {
    for (p, w) in lose_third("eager", |eager| eager / 2, false) {
        assert_eq!(send_status(&w, 2), Some(Status::Ok), "{p}");
    }
}

/// A lost synchronous eager message: its sender completes once the
/// receive matched it (and failed).
#[test]
fn sim_lost_synchronous_message_releases_its_sender_at_the_match() {
    for (p, w) in lose_third("sync", |eager| eager / 2, true) {
        assert_eq!(send_status(&w, 2), Some(Status::Ok), "{p}");
    }
}

/// A lost rendezvous request: the receive fails, and the sender, told
/// with a failed FIN, fails its send instead of waiting for a grant.
#[test]
fn sim_lost_rendezvous_request_fails_both_ends() {
    for (p, w) in lose_third("rts", |eager| 3 * eager + 5, false) {
        assert_eq!(send_status(&w, 2), Some(Status::Failed), "{p}");
    }
}
