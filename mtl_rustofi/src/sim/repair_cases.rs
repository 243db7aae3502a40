//! Directed cases for the repair of a stalled message rendezvous
//! (`proto/repair.rs`): a grant, a data packet, a request for one or the
//! FIN arrives cut short (refused as malformed, lost whole), and the
//! repair on the engine's clock still brings both messages through, on
//! every profile that uses that rendezvous; a lost grant of nothing is
//! granted again, and a lost failed FIN is answered as failed.

#![cfg(test)]

use super::defects::{
    assert_delivered, directed, directed_into, directed_tweaked, msg, recv_status, send_status,
};
use super::fabric::{Inject, PostInfo, PostKind, World, REPAIR_AFTER};
use super::profiles::profile_set;
use super::workload::Busy;
use crate::proto::{Stats, Status};
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

/// Counts the send posts of `kind` from `node` and gives the `n`th (from
/// 1) the fate `inj`; `hit` counts the posts so treated.
fn nth(
    kind: Kind,
    node: usize,
    n: u32,
    inj: Inject,
) -> (impl FnMut(&PostInfo) -> Inject, Rc<Cell<u32>>) {
    let seen = Rc::new(Cell::new(0u32));
    let hit = Rc::new(Cell::new(0u32));
    let (s, h) = (seen.clone(), hit.clone());
    let hook = move |i: &PostInfo| {
        if i.kind != PostKind::Send || i.node != node || i.packet != Some(kind) {
            return Inject::Clean;
        }
        s.set(s.get() + 1);
        if s.get() != n {
            return Inject::Clean;
        }
        h.set(h.get() + 1);
        inj
    };
    (hook, hit)
}

fn repairs(w: &World, node: usize) -> u64 {
    Stats::get(&w.nodes[node].stats.rndv_repairs)
}

/// A rendezvous message into a receive of zero bytes, then an eager
/// message, on every profile, with `lose` deciding which post (from 1) of
/// which packet kind from which node is lost whole (`None`: none). Checks
/// that the receive ends truncated, the send as sent, and that the eager
/// message arrives; returns each run's world, count of losses, and the
/// data packets node 0 and FINs node 1 posted.
fn grant_of_nothing(lose: Option<(Kind, usize, u32)>) -> Vec<(String, World, u32, [u32; 2])> {
    let mut runs = Vec::new();
    for profile in MSG_PROFILES {
        let p = &profile_set(profile).expect("known").profiles[0];
        let specs = vec![
            msg(0, 1, 0, 4 * p.eager_limit + 7, false),
            msg(0, 1, 1, 10, false),
        ];
        let (kind, node, n) = lose.unwrap_or((Kind::Data, 0, 0));
        let (mut hook, lost) = nth(kind, node, n, Inject::Garbled);
        let posts = Rc::new(Cell::new([0u32; 2]));
        let counted = posts.clone();
        let count = move |i: &PostInfo| {
            let mut c = counted.get();
            match (i.kind, i.node, i.packet) {
                (PostKind::Send, 0, Some(Kind::Data)) => c[0] += 1,
                (PostKind::Send, 1, Some(Kind::Fin)) => c[1] += 1,
                _ => {}
            }
            counted.set(c);
            hook(i)
        };
        let w = directed_into(profile, specs, vec![0, 10], count);
        let ctx = format!("{profile}/grant of nothing");
        assert_eq!(recv_status(&w, 0), Some(Status::Truncated), "{ctx}");
        assert_eq!(send_status(&w, 0), Some(Status::Ok), "{ctx}");
        assert_delivered(&w, 1..2, &ctx);
        runs.push((ctx, w, lost.get(), posts.get()));
    }
    runs
}

/// A receive of zero bytes matches a message rendezvous and its grant of
/// nothing is lost: the receiver grants again and the sender answers with
/// the transfer's one empty piece. (When the receive ended with its
/// grant, the sender waited for ever.)
#[test]
fn sim_repair_lost_grant_of_nothing() {
    for (ctx, w, lost, _) in grant_of_nothing(Some((Kind::Cts, 1, 1))) {
        assert_eq!(lost, 1, "{ctx}: the grant was lost");
        assert!(repairs(&w, 1) > 0, "{ctx}: the receiver made no repair");
    }
}

/// A grant of nothing that is not lost: one empty piece and the FIN, no
/// repair, no error.
#[test]
fn sim_grant_of_nothing_ends_with_its_fin() {
    for (ctx, w, lost, posts) in grant_of_nothing(None) {
        assert_eq!(lost, 0, "{ctx}");
        assert_eq!(posts, [1, 1], "{ctx}: one empty data packet and one FIN");
        for n in 0..2 {
            assert_eq!(repairs(&w, n), 0, "{ctx}: node {n} repaired");
            assert_eq!(Stats::get(&w.nodes[n].stats.errors), 0, "{ctx}: node {n}");
        }
    }
}

/// A data packet arrives misplaced, which fails the receive, and the
/// receiver's failed FIN is lost: the sender, all sent, asks, and the
/// receiver answers from its record that the transfer failed. The send
/// fails as the receive did. (Answered as done, it completed as sent.)
#[test]
fn sim_repair_lost_failed_fin() {
    for profile in MSG_PROFILES {
        let p = &profile_set(profile).expect("known").profiles[0];
        let specs = vec![
            msg(0, 1, 0, 40 * p.eager_limit + 7, false),
            msg(0, 1, 1, 10, false),
        ];
        let (misplace, misplaced) = nth(Kind::Data, 0, 3, Inject::Misplaced);
        let (lose_fin, lost) = nth(Kind::Fin, 1, 1, Inject::Garbled);
        let (mut misplace, mut lose_fin) = (misplace, lose_fin);
        let w = directed(profile, specs, false, move |i| match i.packet {
            Some(Kind::Data) => misplace(i),
            Some(Kind::Fin) => lose_fin(i),
            _ => Inject::Clean,
        });
        let ctx = format!("{profile}/failed fin");
        assert_eq!((misplaced.get(), lost.get()), (1, 1), "{ctx}: faults");
        assert!(repairs(&w, 0) > 0, "{ctx}: the sender did not ask");
        assert_eq!(recv_status(&w, 0), Some(Status::Failed), "{ctx}");
        assert_eq!(send_status(&w, 0), Some(Status::Failed), "{ctx}");
        assert_delivered(&w, 1..2, &ctx);
    }
}

/// The receiver's FIN is lost and the receiver is then away from MPI for
/// 40 repair intervals: the sender asks again one, two, four and then
/// every eight intervals, not every interval, and the answer that comes
/// when the receiver is back ends the send.
#[test]
fn sim_repair_backs_off_from_an_away_peer() {
    const AWAY: u64 = 40 * REPAIR_AFTER;
    for profile in MSG_PROFILES {
        let p = &profile_set(profile).expect("known").profiles[0];
        let specs = vec![msg(0, 1, 0, 4 * p.eager_limit + 7, false)];
        let (hook, lost) = nth(Kind::Fin, 1, 1, Inject::Garbled);
        // Away from well after the transfer ended (its FIN lost) until
        // 40 intervals later.
        let away = |plan: &mut super::workload::Plan| {
            plan.busy = Some(Busy {
                node: 1,
                from: REPAIR_AFTER / 2,
                until: REPAIR_AFTER / 2 + AWAY,
            })
        };
        let w = directed_tweaked(profile, specs, away, hook);
        let ctx = format!("{profile}/away");
        assert_eq!(lost.get(), 1, "{ctx}: the FIN was lost");
        assert_delivered(&w, 0..1, &ctx);
        // Asks at 1, 3, 7, 15, 23, 31, 39 intervals of the 40 (the last
        // one or two may fall after the answer): 5 to 8, against 40.
        let asks = repairs(&w, 0);
        assert!(
            (5..=8).contains(&asks),
            "{ctx}: {asks} repairs in 40 intervals"
        );
    }
}
