//! Directed cases for the message rendezvous (`proto/rndv_msg.rs`): data
//! packets rejected at their post, or lost by the receiving provider, are
//! resent or retried and the message still arrives intact, on every
//! profile that uses it; the random matrix covers truncation, deaths in
//! the middle of a transfer and duplicates.

#![cfg(test)]

use super::defects::{assert_delivered, directed, msg, recv_status, send_status};
use super::fabric::{Inject, PostKind};
use super::profiles::profile_set;
use crate::proto::{Stats, Status};
use crate::wire::Kind;
use std::cell::Cell;
use std::rc::Rc;

const MSG_PROFILES: [&str; 3] = ["msg-only", "tiny-msg", "efa-direct-msg"];

/// A message rendezvous of many data packets (with a short last one),
/// then an eager message behind it.
fn big_then_small(profile: &str) -> Vec<super::workload::MsgSpec> {
    let p = &profile_set(profile).expect("known").profiles[0];
    vec![
        msg(0, 1, 0, 40 * p.eager_limit + 7, false),
        msg(0, 1, 1, 10, false),
    ]
}

/// Runs `big_then_small` with `hook` applied to data packets and checks
/// that both messages arrive intact (the simulator checks the bytes).
fn data_fault(what: &str, inject: fn(u32) -> Inject) {
    for profile in MSG_PROFILES {
        let seen = Rc::new(Cell::new(0u32));
        let s = seen.clone();
        let w = directed(profile, big_then_small(profile), false, move |i| {
            if i.kind == PostKind::Send && i.packet == Some(Kind::Data) {
                s.set(s.get() + 1);
                return inject(i.attempt);
            }
            Inject::Clean
        });
        assert!(
            seen.get() > 20,
            "{profile}/{what}: only {} data posts",
            seen.get()
        );
        assert_delivered(&w, 0..2, &format!("{profile}/{what}"));
    }
}

/// Every data packet is refused once with EAGAIN: it waits in the queue
/// and goes out in order with the others.
#[test]
fn sim_msg_rndv_data_packets_retried_after_eagain() {
    data_fault("eagain", |attempt| {
        if attempt == 1 {
            Inject::Again
        } else {
            Inject::Clean
        }
    });
}

/// Every data packet fails once (hard post failure, then an error
/// completion): it is resent, the receiver counts each piece once.
#[test]
fn sim_msg_rndv_data_packets_resent_after_failures() {
    data_fault("hard", |attempt| match attempt {
        1 => Inject::Hard(-5),
        2 => Inject::CqError,
        _ => Inject::Clean,
    });
}

/// Plays `big_then_small` with every third data packet lost by the
/// receiving provider (its buffer fails with only the header placed, as
/// `udp;ofi_rxd` reports `FI_ETRUNC`) and `other` deciding the fate of
/// the rest; checks that both messages arrive intact, that the receiver
/// asked once for each lost packet, and that no loss counted as an error.
fn lost_data(what: &str, other: fn(u32) -> Inject) {
    for profile in MSG_PROFILES {
        let posts = Rc::new(Cell::new(0u32));
        let lost = Rc::new(Cell::new(0u64));
        let asked = Rc::new(Cell::new(0u64));
        let (p, l, a) = (posts.clone(), lost.clone(), asked.clone());
        let w = directed(profile, big_then_small(profile), false, move |i| {
            if i.kind != PostKind::Send {
                return Inject::Clean;
            }
            match i.packet {
                Some(Kind::Data) => {
                    p.set(p.get() + 1);
                    if p.get() % 3 == 1 {
                        l.set(l.get() + 1);
                        return Inject::Damaged;
                    }
                    return other(p.get());
                }
                // The receiver's grant, then its requests for lost data.
                Some(Kind::Cts) if i.node == 1 => a.set(a.get() + 1),
                _ => {}
            }
            Inject::Clean
        });
        let ctx = format!("{profile}/{what}");
        assert!(lost.get() > 10, "{ctx}: only {} packets lost", lost.get());
        assert_eq!(
            asked.get(),
            1 + lost.get(),
            "{ctx}: one grant, one request per loss"
        );
        assert_eq!(Stats::get(&w.nodes[1].stats.rx_lost), lost.get(), "{ctx}");
        for n in 0..2 {
            assert_eq!(Stats::get(&w.nodes[n].stats.errors), 0, "{ctx}: node {n}");
        }
        assert_delivered(&w, 0..2, &ctx);
    }
}

/// Data packets lost at the receiver are asked for again and sent again
/// from the buffer the sender keeps until the receiver's FIN.
#[test]
fn sim_msg_rndv_data_lost_at_the_receiver_is_sent_again() {
    lost_data("lost", |_| Inject::Clean);
}

/// The same, while other data packets (first sends and resends alike)
/// are refused with EAGAIN or fail with an error completion and are
/// retried by the sender itself.
#[test]
fn sim_msg_rndv_data_lost_at_the_receiver_among_send_failures() {
    lost_data("lost+faults", |n| match n % 5 {
        0 => Inject::Again,
        2 => Inject::CqError,
        _ => Inject::Clean,
    });
}

/// A read rendezvous to a node that cannot read its sender's memory and
/// whose eager limit (8 bytes) leaves no room for data packets: the
/// receiver cannot answer with a grant either, so it fails the receive
/// and tells the sender, whose send fails; nothing hangs, and the eager
/// message behind it arrives.
#[test]
fn sim_declined_read_without_room_for_data_fails_both_sides() {
    let profile = "efa-local-mixed-tiny";
    let grants = Rc::new(Cell::new(0u32));
    let g = grants.clone();
    let w = directed(
        profile,
        vec![msg(0, 1, 0, 1000, false), msg(0, 1, 1, 8, false)],
        false,
        move |i| {
            if i.node == 1 && i.packet == Some(Kind::Cts) {
                g.set(g.get() + 1);
            }
            Inject::Clean
        },
    );
    // A grant of packets that hold nothing would only be refused.
    assert_eq!(grants.get(), 0, "no grant sent");
    assert_eq!(recv_status(&w, 0), Some(Status::Failed));
    assert_eq!(send_status(&w, 0), Some(Status::Failed));
    assert_eq!(Stats::get(&w.nodes[1].stats.reads_declined), 1);
    assert_eq!(Stats::get(&w.nodes[1].stats.errors), 1);
    assert_delivered(&w, 1..2, profile);
}
