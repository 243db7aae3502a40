//! Directed cases for receives posted for exactly one source whose node
//! dies (`Core::fail_posted_of`, `proto/liveness.rs`): node 1 dies before
//! sending anything, and node 0 has receives for it posted before the
//! loss (a specific tag, any tag, one whose cancel comes after the loss)
//! and after it, besides receives for node 2 and for any source. Node 0
//! learns of the loss from its liveness probes (the receives alone make
//! node 1 watched) or from the runtime. Each runs on the efa, tcp;ofi_rxm,
//! send-rendezvous and shm profiles, under several fault sets.

#![cfg(test)]

use super::defects::{msg, send_status};
use super::fabric::{Req, ReqKind, World};
use super::profiles::{fault_set, profile_set};
use super::rng::Rng;
use super::workload::{Cmd, ConsumerKind, Death, MsgSpec, Plan, CTX_ANY_SOURCE, CTX_ANY_TAG};
use crate::matching::ANY;
use crate::proto::{Event, Status};

/// Peer timeout of the probed cases (ns), as in `livecases`.
const TIMEOUT: u64 = 400_000;
/// When the receives and sends marked late are issued: long after node
/// 0 gave node 1 up, however it learnt of the loss.
const LATE: u64 = 100 * TIMEOUT;

const PROFILES: [&str; 4] = ["efa", "tcp-rxm", "efa-send", "shm"];
const FAULTS: [&str; 4] = ["none", "eagain", "slow", "dup"];

/// The messages, all to node 0; consumer `i` is message `i`'s.
const BEFORE: usize = 0;
const BEFORE_ANY_TAG: usize = 1;
const CANCELLED: usize = 2;
const AFTER: usize = 3;
const AFTER_ANY_TAG: usize = 4;
const LIVING: usize = 5;
const LIVING_ANY_SOURCE: usize = 6;
const LIVING_AFTER: usize = 7;

/// How node 0 learns that node 1 is gone.
#[derive(Clone, Copy, Debug)]
enum Told {
    /// Its liveness probes find it (nothing but the receives waits on
    /// node 1).
    Probes,
    /// The runtime reports it, a few timeouts after the death; no probes.
    Runtime,
}

fn run(profile: &str, fault: &str, told: Told) -> World {
    let rails = profile_set(profile).expect("known profile");
    let specs: Vec<MsgSpec> = vec![
        msg(1, 0, 0, 10, false),
        MsgSpec {
            ctx: CTX_ANY_TAG,
            ..msg(1, 0, 1, 10, false)
        },
        msg(1, 0, 2, 10, false),
        msg(1, 0, 3, 10, false),
        MsgSpec {
            ctx: CTX_ANY_TAG,
            ..msg(1, 0, 4, 10, false)
        },
        msg(2, 0, 5, 10, false),
        MsgSpec {
            ctx: CTX_ANY_SOURCE,
            ..msg(2, 0, 6, 10, false)
        },
        msg(2, 0, 7, 10, false),
    ];
    let mut plan = Plan::explicit(3, &rails, specs, &mut Rng::new(7), 1_000);
    for (i, c) in plan.consumers.iter_mut().enumerate() {
        c.buf_len = 10;
        c.kind = match i {
            // Cancelled after the loss, before the late posts.
            CANCELLED => ConsumerKind::CancelRace {
                after: LATE - 10 * TIMEOUT,
            },
            _ => ConsumerKind::Recv,
        };
    }
    for (t, _, cmd) in &mut plan.script {
        *t = match *cmd {
            Cmd::Consume(AFTER | AFTER_ANY_TAG | LIVING_AFTER) => LATE,
            Cmd::Consume(_) => 0,
            Cmd::Send(LIVING_AFTER) => LATE + 1_000,
            Cmd::Send(_) => LATE,
            _ => unreachable!("only receives and sends are scripted"),
        };
    }
    let lost_after = match told {
        Told::Probes => {
            plan.peer_timeout = Some(TIMEOUT);
            u64::MAX
        }
        Told::Runtime => 3 * TIMEOUT,
    };
    plan.death = Some(Death {
        node: 1,
        at: 50,
        lost_after,
        on_first_chunk: false,
    });
    plan.allow_unmatched = true;
    let mut faults = fault_set(fault).expect("known fault set");
    faults.directed = true;
    let mut w = World::new(11, rails, faults, plan);
    w.run();
    w.check();
    w
}

/// The requests of consumer `c` in issue order.
fn reqs_of(w: &World, c: usize) -> Vec<&Req> {
    w.reqs
        .iter()
        .filter(|r| matches!(r.kind, ReqKind::Recv { consumer, .. } if consumer == c))
        .collect()
}

/// The one request of consumer `c`: its issue and completion (logical
/// clock) and its event.
fn only(w: &World, c: usize, what: &str) -> (u64, u64, Event) {
    let reqs = reqs_of(w, c);
    assert_eq!(reqs.len(), 1, "{what}: requests of consumer {c}");
    let (done, e) = reqs[0]
        .done
        .unwrap_or_else(|| panic!("{what}: {c} never completed"));
    (reqs[0].issued, done, e)
}

/// Source, tag, bytes and status of a receive's event.
fn recv_fields(e: Event) -> Option<(i32, i32, usize, Status)> {
    match e {
        Event::Recv {
            src,
            tag,
            bytes,
            status,
            ..
        } => Some((src, tag, bytes, status)),
        _ => None,
    }
}

fn case(profile: &str, fault: &str, told: Told) {
    let w = run(profile, fault, told);
    let what = format!("{profile}/{fault}/{told:?}");
    // Posted before the loss: failed at it, before the late posts, with
    // the source and tag of the selector.
    let late = only(&w, AFTER, &what).0;
    for (c, tag) in [(BEFORE, 0), (BEFORE_ANY_TAG, ANY), (CANCELLED, 2)] {
        let (_, done, e) = only(&w, c, &what);
        assert_eq!(
            recv_fields(e),
            Some((1, tag, 0, Status::Unreachable)),
            "{what}: receive {c}"
        );
        assert!(
            done < late,
            "{what}: receive {c} failed only after the late posts"
        );
    }
    // Its cancel came after: it found nothing, and the request completed
    // once (the simulator checks that), with the failure.
    assert_eq!((w.cancel_won, w.cancel_lost), (0, 1), "{what}: cancels");
    // Posted after the loss: failed at once (the next completion of the
    // logical clock is its own).
    for (c, tag) in [(AFTER, 3), (AFTER_ANY_TAG, ANY)] {
        let (issued, done, e) = only(&w, c, &what);
        assert_eq!(
            recv_fields(e),
            Some((1, tag, 0, Status::Unreachable)),
            "{what}: receive {c}"
        );
        assert_eq!(done, issued + 1, "{what}: receive {c} did not fail at once");
    }
    // Node 2's receives, before and after, and the any-source one get
    // their messages.
    for c in [LIVING, LIVING_ANY_SOURCE, LIVING_AFTER] {
        let (_, _, e) = only(&w, c, &what);
        assert_eq!(
            recv_fields(e),
            Some((2, c as i32, 10, Status::Ok)),
            "{what}: receive {c}"
        );
        assert_eq!(send_status(&w, c), Some(Status::Ok), "{what}: send {c}");
    }
    // No receive was left for the end of the run to cancel.
    assert_eq!(w.cancelled_at_end, 0, "{what}: receives left posted");
    if let Told::Probes = told {
        assert!(w.pings > 0, "{what}: no liveness probe");
    }
}

#[test]
fn sim_lost_peer_receives_found_by_probes() {
    for profile in PROFILES {
        for fault in FAULTS {
            case(profile, fault, Told::Probes);
        }
    }
}

#[test]
fn sim_lost_peer_receives_told_by_runtime() {
    for profile in PROFILES {
        for fault in FAULTS {
            case(profile, fault, Told::Runtime);
        }
    }
}
