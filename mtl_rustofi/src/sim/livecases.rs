//! Directed cases for peer liveness (`proto/liveness.rs`): node 1 dies
//! and nobody announces it; what node 0 waits on from it (a rendezvous in
//! either role, an eager receive, a matched probe) fails through the
//! liveness probes alone, while a receive from any source still gets a
//! message from the living node 2. And a node busy outside MPI for many
//! probe intervals is never given up. Each runs on the efa, tcp;ofi_rxm,
//! send-rendezvous and shm profiles, under several fault sets.

#![cfg(test)]

use super::defects::{msg, recv_status, send_status};
use super::fabric::World;
use super::profiles::{fault_set, profile_set};
use super::rng::Rng;
use super::workload::{Busy, Cmd, ConsumerKind, Death, MsgSpec, Plan, Stall, CTX_ANY_SOURCE};
use crate::proto::{Stats, Status};

/// Peer timeout of these cases (ns): probes every quarter of it. Four
/// times the slowest simulated completion (a transport that takes longer
/// than half the timeout to take a packet from a live, connected peer is
/// taken for a dead one).
const TIMEOUT: u64 = 400_000;

const PROFILES: [&str; 4] = ["efa", "tcp-rxm", "efa-send", "shm"];
const FAULTS: [&str; 4] = ["none", "eagain", "slow", "dup"];

/// How node 1 is taken out of a case.
#[derive(Clone, Copy)]
enum Fate {
    /// Dies before it sends anything.
    DiesEarly,
    /// Dies as its first rendezvous chunk moves.
    DiesMidRndv,
    /// Busy outside MPI for many probe intervals from the start.
    Busy,
    /// Dies at `HELD_DEATH` ns, after its first messages; sends to it
    /// report their failure only 1000 timeouts later (a provider that
    /// retries a refused connection).
    DiesHeld,
    /// Dies at `HELD_DEATH` ns, after its first messages; posts to it are
    /// refused with EAGAIN from then on (a full ring whose reader died,
    /// rxm reconnecting to an exited process): nothing to it is ever in
    /// flight.
    DiesRefusing,
    /// Takes nothing in for 20 timeouts (its socket buffers full): sends
    /// to it, the probes included, complete only then.
    Stalled,
}

/// When node 1 dies in [`Fate::DiesHeld`] (ns): after its first message
/// arrived, however slowly.
const HELD_DEATH: u64 = TIMEOUT;

/// Plays `specs` on `profile` under `fault`: receives posted at once,
/// sends from 100 ns on in list order, except that sends listed in
/// `late` go at 100 timeouts (after any death is found). `mprobe` makes
/// the consumer of message 0 a matched probe.
fn run(
    profile: &str,
    fault: &str,
    specs: Vec<MsgSpec>,
    late: &[usize],
    mprobe: bool,
    fate: Fate,
) -> World {
    let rails = profile_set(profile).expect("known profile");
    let mut plan = Plan::explicit(3, &rails, specs, &mut Rng::new(7), 1_000);
    let lens: Vec<usize> = plan.msgs.iter().map(|m| m.spec.len).collect();
    for (c, len) in plan.consumers.iter_mut().zip(lens) {
        c.kind = ConsumerKind::Recv;
        c.buf_len = len;
    }
    if mprobe {
        plan.consumers[0].kind = ConsumerKind::Mprobe;
    }
    let mut k = 0;
    for (t, _, cmd) in &mut plan.script {
        *t = match cmd {
            Cmd::Consume(_) => 0,
            Cmd::Send(i) if late.contains(i) => 100 * TIMEOUT,
            _ => {
                k += 1;
                100 + 10 * k
            }
        };
    }
    plan.peer_timeout = Some(TIMEOUT);
    match fate {
        Fate::DiesEarly | Fate::DiesMidRndv | Fate::DiesHeld | Fate::DiesRefusing => {
            if matches!(fate, Fate::DiesHeld) {
                plan.held_to_dead = 1000 * TIMEOUT;
            }
            plan.refuse_dead = matches!(fate, Fate::DiesRefusing);
            plan.death = Some(Death {
                node: 1,
                at: match fate {
                    Fate::DiesEarly => 50,
                    Fate::DiesHeld | Fate::DiesRefusing => HELD_DEATH,
                    _ => 200 * TIMEOUT,
                },
                lost_after: u64::MAX,
                on_first_chunk: matches!(fate, Fate::DiesMidRndv),
            });
            plan.allow_unmatched = true;
        }
        Fate::Busy => {
            plan.busy = Some(Busy {
                node: 1,
                from: 0,
                until: 20 * TIMEOUT,
            })
        }
        Fate::Stalled => {
            plan.stall = Some(Stall {
                node: 1,
                until: 20 * TIMEOUT,
            })
        }
    }
    let mut faults = fault_set(fault).expect("known fault set");
    faults.directed = true;
    let mut w = World::new(11, rails, faults, plan);
    w.run();
    w.check();
    w
}

/// A rendezvous-sized message on `profile`.
fn big(profile: &str) -> usize {
    let p = &profile_set(profile).expect("known").profiles[0];
    p.eager_limit + 2 * p.chunk + 100
}

/// Every profile under every fault set of these cases.
fn each(mut f: impl FnMut(&str, &str)) {
    for profile in PROFILES {
        for fault in FAULTS {
            f(profile, fault);
        }
    }
}

/// The ANY_SOURCE message from node 2 (sent late in every death case)
/// arrives intact after node 1 was given up.
fn living_peer_still_served(w: &World, any: usize, what: &str) {
    assert_eq!(
        recv_status(w, any),
        Some(Status::Ok),
        "{what}: ANY_SOURCE receive"
    );
    assert_eq!(send_status(w, any), Some(Status::Ok), "{what}: its send");
}

/// The liveness probes (and on shm the process check) had to find node
/// 1's death.
fn probed(w: &World, what: &str) {
    assert!(w.pings > 0, "{what}: no liveness probe");
    if w.rails.profiles[0].kind == crate::wire::RailKind::Shm {
        assert!(w.alive_checks > 0, "{what}: no process check on shm");
    }
}

/// Whether the profile's rendezvous reads the sender's buffer.
fn reads(profile: &str) -> bool {
    profile_set(profile).expect("known").profiles[0].rndv_read
}

/// The tail shared by the death cases: an ANY_SOURCE message from node
/// 2, sent late.
fn tail(specs: &mut Vec<MsgSpec>) -> (Vec<usize>, usize) {
    let any = specs.len();
    specs.push(MsgSpec {
        ctx: CTX_ANY_SOURCE,
        ..msg(2, 0, 50, 10, false)
    });
    (vec![any], any)
}

/// Node 0 sends a rendezvous to node 1, which dies as it starts to take
/// the data. With the read rendezvous the send fails (no FIN will come);
/// with the send rendezvous its data may have left before the death, so
/// it completes either way.
#[test]
fn sim_liveness_peer_dies_during_rendezvous_send() {
    each(|profile, fault| {
        let mut specs = vec![msg(0, 1, 0, big(profile), false)];
        let (late, any) = tail(&mut specs);
        let w = run(profile, fault, specs, &late, false, Fate::DiesMidRndv);
        let what = format!("{profile}/{fault}");
        if reads(profile) {
            assert_eq!(
                send_status(&w, 0),
                Some(Status::Failed),
                "{what}: rendezvous send"
            );
            probed(&w, &what);
        } else {
            assert!(send_status(&w, 0).is_some(), "{what}: rendezvous send");
        }
        living_peer_still_served(&w, any, &what);
    });
}

/// Node 1 sends a rendezvous to node 0 and dies as the data starts to
/// move: node 0's receive fails (a read fails by itself; tagged receives
/// waiting for the send rendezvous's data need the probes).
#[test]
fn sim_liveness_peer_dies_during_rendezvous_receive() {
    each(|profile, fault| {
        let mut specs = vec![msg(1, 0, 0, big(profile), false)];
        let (late, any) = tail(&mut specs);
        let w = run(profile, fault, specs, &late, false, Fate::DiesMidRndv);
        let what = format!("{profile}/{fault}");
        assert_eq!(
            recv_status(&w, 0),
            Some(Status::Failed),
            "{what}: rendezvous receive"
        );
        if !reads(profile) {
            probed(&w, &what);
        }
        living_peer_still_served(&w, any, &what);
    });
}

/// Node 0 waits for an eager message from node 1, which dies before
/// sending it: the receive fails as unreachable.
#[test]
fn sim_liveness_peer_dies_before_eager_message() {
    each(|profile, fault| {
        let mut specs = vec![msg(1, 0, 0, 10, false)];
        let (late, any) = tail(&mut specs);
        let w = run(profile, fault, specs, &late, false, Fate::DiesEarly);
        let what = format!("{profile}/{fault}");
        assert_eq!(
            recv_status(&w, 0),
            Some(Status::Unreachable),
            "{what}: eager receive"
        );
        probed(&w, &what);
        living_peer_still_served(&w, any, &what);
    });
}

/// Node 0 polls a matched probe for a message from node 1, which dies
/// first: the probe fails.
#[test]
fn sim_liveness_peer_dies_under_probe() {
    each(|profile, fault| {
        let mut specs = vec![msg(1, 0, 0, 10, false)];
        let (late, any) = tail(&mut specs);
        let w = run(profile, fault, specs, &late, true, Fate::DiesEarly);
        let what = format!("{profile}/{fault}");
        assert_eq!(w.probes_failed, 1, "{what}: the probe did not fail");
        assert_eq!(
            w.unsatisfied_mprobes, 0,
            "{what}: the probe gave up by itself"
        );
        probed(&w, &what);
        living_peer_still_served(&w, any, &what);
    });
}

/// Node 1 does not progress for 20 timeouts while node 0 waits for its
/// eager message and for the end of a rendezvous to it: node 0 probes it
/// (the probes are sent, nobody answers) but never gives it up.
#[test]
fn sim_liveness_busy_peer_is_not_failed() {
    each(|profile, fault| {
        let specs = vec![msg(1, 0, 0, 10, false), msg(0, 1, 1, big(profile), false)];
        let w = run(profile, fault, specs, &[], false, Fate::Busy);
        let what = format!("{profile}/{fault}");
        assert_eq!(
            recv_status(&w, 0),
            Some(Status::Ok),
            "{what}: eager receive"
        );
        assert_eq!(
            send_status(&w, 1),
            Some(Status::Ok),
            "{what}: rendezvous send"
        );
        assert_eq!(
            recv_status(&w, 1),
            Some(Status::Ok),
            "{what}: rendezvous receive"
        );
        assert!(w.busy_deferred > 0, "{what}: node 1 was never busy");
        assert!(w.pings > 0, "{what}: node 0 never probed");
        let peer = w.nodes[0].peer_of[1].expect("a peer");
        assert!(
            !w.nodes[0].core.peer_is_lost(peer),
            "{what}: node 1 given up"
        );
    });
}

/// Node 1 talks to node 0, then dies; node 0 waits for a second message
/// from it. Sends to the dead node stay unreported for 1000 timeouts (as
/// tcp;ofi_rxm keeps a send while reconnection is refused): where sends
/// complete without the peer's software (efa, tcp;ofi_rxm) the probe
/// still unsent after half a timeout gives the peer up within about a
/// timeout; on udp;ofi_rxd, whose sends wait for the peer's progress, only
/// the provider's own report does.
#[test]
fn sim_liveness_unsent_probe_gives_a_connected_peer_up() {
    for profile in ["efa", "tcp-rxm", "udp-rxd"] {
        for fault in FAULTS {
            let specs = vec![msg(1, 0, 0, 10, false), msg(1, 0, 1, 10, false)];
            let w = run(profile, fault, specs, &[1], false, Fate::DiesHeld);
            let what = format!("{profile}/{fault}");
            assert_eq!(
                recv_status(&w, 0),
                Some(Status::Ok),
                "{what}: first message"
            );
            assert_eq!(
                recv_status(&w, 1),
                Some(Status::Unreachable),
                "{what}: second"
            );
            let at = w.first_failure.expect("a failure") - HELD_DEATH;
            if profile == "udp-rxd" {
                assert!(
                    at >= 1000 * TIMEOUT,
                    "{what}: failed after {at} ns, before rxd said so"
                );
            } else {
                assert!(at <= 2 * TIMEOUT, "{what}: failed {at} ns after the death");
            }
        }
    }
}

/// Node 1 sends node 0 a message; then node 0 sends node 1, which takes
/// nothing in (as a busy process whose socket buffers are full), 128 KiB
/// of small messages, then waits for a
/// message from it that comes only after the stall. The probes to node 1
/// stay unsent behind that backlog for many timeouts; more than 64 KiB
/// sent since node 1 was last heard from keeps that from counting as a
/// transport failure, so node 1 is never given up.
#[test]
fn sim_liveness_backlog_to_a_stalled_peer_is_not_a_failure() {
    for profile in ["efa", "tcp-rxm"] {
        for fault in FAULTS {
            // Node 1 is heard from first (so connected).
            let mut specs = vec![msg(1, 0, 499, 10, false)];
            specs.extend((0..128).map(|i| msg(0, 1, i, 1024, false)));
            let last = specs.len();
            specs.push(msg(1, 0, 500, 10, false));
            let w = run(profile, fault, specs, &[last], false, Fate::Stalled);
            let what = format!("{profile}/{fault}");
            assert_eq!(
                recv_status(&w, last),
                Some(Status::Ok),
                "{what}: message from node 1"
            );
            assert!(w.pings > 0, "{what}: node 0 never probed");
            let peer = w.nodes[0].peer_of[1].expect("a peer");
            assert!(
                !w.nodes[0].core.peer_is_lost(peer),
                "{what}: node 1 given up"
            );
        }
    }
}

/// Node 1 talks to node 0, then dies; later node 0 sends it three small
/// messages and waits for nothing else from it. Every post to the dead
/// node is refused (EAGAIN), so the copied sends wait in the queue,
/// incomplete (`proto::held`), with nothing in flight: their peer counts
/// as waited on, the probe that cannot leave (or, on shm, the process
/// check) gives it up, and the sends fail instead of waiting for ever.
#[test]
fn sim_liveness_sends_held_for_a_dead_peer_fail() {
    for profile in ["efa", "tcp-rxm", "shm", "efa-local"] {
        for fault in FAULTS {
            let mut specs = vec![msg(1, 0, 0, 10, false)];
            specs.extend((1..4).map(|i| msg(0, 1, i, 100, false)));
            let w = run(profile, fault, specs, &[1, 2, 3], false, Fate::DiesRefusing);
            let what = format!("{profile}/{fault}");
            assert_eq!(
                recv_status(&w, 0),
                Some(Status::Ok),
                "{what}: first message"
            );
            for i in 1..4 {
                assert_eq!(
                    send_status(&w, i),
                    Some(Status::Failed),
                    "{what}: send {i} to the dead node"
                );
            }
            let held = Stats::get(&w.nodes[0].stats.held_sends);
            assert!(held > 0, "{what}: no send of node 0 was held");
            let peer = w.nodes[0].peer_of[1].expect("a peer");
            assert!(w.nodes[0].core.peer_is_lost(peer), "{what}: node 1 kept");
        }
    }
}
