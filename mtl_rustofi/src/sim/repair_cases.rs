//! Directed cases for the repair of a stalled message rendezvous
//! (`proto/repair.rs`): a grant, a data packet, a request for one or the
//! FIN arrives cut short (refused as malformed, lost whole), and the
//! repair on the engine's clock still brings both messages through, on
//! every profile that uses that rendezvous.

#![cfg(test)]

use super::defects::{assert_delivered, directed, msg};
use super::fabric::{Inject, PostInfo, PostKind};
use super::profiles::profile_set;
use crate::proto::Stats;
use crate::wire::Kind;
use std::cell::Cell;
use std::rc::Rc;

const MSG_PROFILES: [&str; 3] = ["msg-only", "tiny-msg", "efa-direct-msg"];

/// Node 0 sends node 1 a message rendezvous of many data packets, then an
/// eager message; `pick` sees every send post and the count of earlier
/// posts of the same kind from the same node, and decides its fate.
/// Checks that both messages arrive intact, that `node` repaired, and
/// that each packet lost whole counted one error (the malformed packet)
/// and nothing else did.
fn lost_whole(what: &str, node: usize, pick: fn(&PostInfo, u32) -> Inject) {
    for profile in MSG_PROFILES {
        let p = &profile_set(profile).expect("known").profiles[0];
        let specs = vec![
            msg(0, 1, 0, 40 * p.eager_limit + 7, false),
            msg(0, 1, 1, 10, false),
        ];
        let counts = Rc::new(Cell::new([0u32; 16]));
        let garbled = Rc::new(Cell::new(0u64));
        let (c, g) = (counts.clone(), garbled.clone());
        let w = directed(profile, specs, false, move |i| {
            let Some(kind) = i.packet.filter(|_| i.kind == PostKind::Send) else {
                return Inject::Clean;
            };
            let mut n = c.get();
            let k = i.node * 8 + kind as usize;
            n[k] += 1;
            c.set(n);
            let inj = pick(i, n[k]);
            if inj == Inject::Garbled {
                g.set(g.get() + 1);
            }
            inj
        });
        let ctx = format!("{profile}/{what}");
        assert!(garbled.get() > 0, "{ctx}: nothing lost");
        assert!(
            Stats::get(&w.nodes[node].stats.rndv_repairs) > 0,
            "{ctx}: node {node} made no repair"
        );
        let errors: u64 = (0..2).map(|n| Stats::get(&w.nodes[n].stats.errors)).sum();
        assert_eq!(
            errors,
            garbled.get(),
            "{ctx}: one error per malformed packet"
        );
        assert_delivered(&w, 0..2, &ctx);
    }
}

/// The receiver's grant is lost: it grants again.
#[test]
fn sim_repair_lost_grant() {
    lost_whole("grant", 1, |i, n| match i.packet {
        Some(Kind::Cts) if i.node == 1 && n == 1 => Inject::Garbled,
        _ => Inject::Clean,
    });
}

/// Every seventh data packet is lost whole: the receiver asks for the
/// missing pieces.
#[test]
fn sim_repair_lost_data() {
    lost_whole("data", 1, |i, n| match i.packet {
        Some(Kind::Data) if n % 7 == 3 => Inject::Garbled,
        _ => Inject::Clean,
    });
}

/// The receiver's FIN is lost: the sender, all sent, asks, and the
/// receiver answers with the FIN.
#[test]
fn sim_repair_lost_fin() {
    lost_whole("fin", 0, |i, n| match i.packet {
        Some(Kind::Fin) if i.node == 1 && n == 1 => Inject::Garbled,
        _ => Inject::Clean,
    });
}

/// A data packet is lost with its header readable, and the request for
/// it is lost whole: the repair asks again.
#[test]
fn sim_repair_lost_resend_request() {
    lost_whole("request", 1, |i, n| match i.packet {
        Some(Kind::Data) if n == 5 => Inject::Damaged,
        // The grant is the first CTS, the request the second.
        Some(Kind::Cts) if i.node == 1 && n == 2 => Inject::Garbled,
        _ => Inject::Clean,
    });
}
