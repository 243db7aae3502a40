//! The simulator's tests: the random matrix (every profile under every
//! fault set, many seeds each), the replay of one seed, and directed cases
//! for the defects of the engine at be0251a.

#![cfg(test)]

use super::checks::Coverage;
use super::*;

/// Seeds per (profile, fault set) in one regular run.
const BASE_SEEDS: u64 = 100;

/// Runs every fault set over many seeds of one profile, and checks that
/// the runs exercised what they are meant to.
fn matrix(profile: &str) {
    let n = seeds(BASE_SEEDS);
    let first = std::env::var("SIM_SEED_BASE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let rails = profile_set(profile).expect("known profile");
    for fault in FAULT_SETS {
        if cfg!(miri) && !matches!(*fault, "mixed" | "death") {
            continue;
        }
        let mut cov = Coverage::default();
        for seed in first..first + n {
            let o = run_case(&Case {
                seed,
                profile: profile.to_string(),
                fault: fault.to_string(),
            });
            cov.add(&o.world);
        }
        if !cfg!(miri) {
            check_coverage(profile, fault, &rails, &cov);
        }
    }
}

fn check_coverage(profile: &str, fault: &str, rails: &profiles::Rails, c: &Coverage) {
    let want = |what: &str, v: u64| {
        assert!(
            v > 0,
            "{profile}/{fault}: no {what} in {} runs: {c:?}",
            c.runs
        )
    };
    let can_rndv = rails
        .profiles
        .iter()
        .any(|p| p.rndv_read || p.tagged || p.rndv_msg);
    want("receives", c.recv_ok);
    want("truncated receives", c.truncated);
    want("empty messages", c.empty);
    want("synchronous sends", c.sync);
    want("matched probes", c.mrecv);
    want("probes", c.probes);
    want("cancels that won", c.cancel_won);
    want("cancels that lost", c.cancel_lost);
    want("unexpected messages", c.unexpected);
    want("unexpected-queue high-water marks", c.unexpected_peak);
    want("coalesced sends", c.coalesced);
    if can_rndv {
        want("rendezvous", c.rndv);
    } else {
        want("refused sends", c.refused);
    }
    let faults = fault_set(fault).expect("known fault set");
    // Registrations happen on FI_MR_LOCAL rails and for RMA reads.
    let registers = rails.profiles.iter().any(|p| p.mr_local || p.rndv_read);
    // The message rendezvous registers no user buffer (its data goes
    // through bounce buffers), so it has nothing to cache.
    let user_regs = rails
        .profiles
        .iter()
        .any(|p| p.rndv_read || (p.mr_local && !p.rndv_msg));
    if user_regs {
        want("registration cache hits", c.mr_hits);
    }
    want("memory releases", c.releases);
    if faults.any_error() && (fault != "reg" || registers) {
        want("errors", c.errors);
    }
    // A failed packet is resent and fails a transfer only if every resend
    // fails too; a failed rendezvous chunk (read, tagged) fails at once. So
    // error completions fail transfers where chunks exist; without them
    // (message rendezvous) only deaths do, reliably.
    let chunks = rails
        .profiles
        .iter()
        .any(|p| p.rndv_read || (p.tagged && !p.rndv_msg));
    let failing = if chunks {
        matches!(fault, "cqerr" | "posthard" | "death" | "mixed")
    } else {
        fault == "death"
    };
    if can_rndv && failing {
        want("failed receives", c.recv_failed);
        want("failed sends", c.send_failed);
    }
    // The send rendezvous withdraws the tagged receives of a transfer
    // whose sender failed or died.
    let send_rndv = rails
        .profiles
        .iter()
        .any(|p| !p.rndv_read && !p.rndv_msg && p.tagged);
    if send_rndv && matches!(fault, "cqerr" | "death" | "mixed") {
        want("cancelled tagged receives", c.chunks_cancelled);
    }
    if fault == "death" {
        want("deaths", c.deaths);
        if can_rndv {
            want("deaths in the middle of a rendezvous", c.deaths_mid_rndv);
        }
        want("receives cancelled at the end", c.cancelled_at_end);
        want("deaths found by liveness probes alone", c.unannounced);
        want(
            "receives failed as their source is gone",
            c.recv_unreachable,
        );
    }
    // With tiny queues a death is found by ordinary packets to the dead
    // node failing before any probe is due.
    if fault == "death" && !profile.starts_with("tiny") {
        want("liveness probes", c.pings);
    }
    if rails
        .profiles
        .iter()
        .any(|p| p.inject_size > 0 && !p.inline)
    {
        want("injected packets", c.injected);
    }
    if rails.profiles.iter().any(|p| p.inline) {
        want("inline packets", c.inlined);
        if matches!(fault, "eagain" | "mixed") {
            want("inline packets refused and sent again", c.inline_refused);
        }
    }
    if matches!(fault, "eagain" | "mixed") {
        want(
            "copied sends held until a rail took their packet",
            c.held_sends,
        );
    }
    if fault == "dup" {
        want("duplicated packets", c.dups);
    }
    if rails.no_read {
        want(
            "read rendezvous answered as message rendezvous",
            c.reads_declined,
        );
        want(
            "read rendezvous declined by a node that reads others",
            c.reads_declined_by_readers,
        );
    } else {
        assert_eq!(c.reads_declined, 0, "{profile}/{fault}: a read declined");
    }
    // The own shared-memory rail's rings lose nothing.
    let msg_on_net = rails
        .profiles
        .iter()
        .any(|p| p.rndv_msg && p.kind != crate::wire::RailKind::Local);
    if faults.garble > 0 && msg_on_net {
        want("message rendezvous packets lost whole", c.garbled);
        want("repairs of a stalled message rendezvous", c.repairs);
    }
    if faults.lose_data > 0 && msg_on_net {
        want("data packets lost at the receiver", c.damaged);
        assert!(
            c.rx_lost >= c.damaged,
            "{profile}/{fault}: {} damaged packets, {} counted lost",
            c.damaged,
            c.rx_lost
        );
    }
    if rails.stripes > 0 {
        want("striped rendezvous", c.striped);
        want("bytes read through stripe rails", c.stripe_bytes);
    }
}

#[test]
fn sim_efa() {
    matrix("efa");
}

#[test]
fn sim_efa_virt_addr() {
    matrix("efa-va");
}

#[test]
fn sim_efa_send_rendezvous() {
    matrix("efa-send");
}

#[test]
fn sim_tcp_rxm() {
    matrix("tcp-rxm");
}

#[test]
fn sim_udp_rxd() {
    matrix("udp-rxd");
}

#[test]
fn sim_shm() {
    matrix("shm");
}

#[test]
fn sim_sockets() {
    matrix("sockets");
}

#[test]
fn sim_no_rma_no_tagged() {
    matrix("bare");
}

#[test]
fn sim_efa_direct() {
    matrix("efa-direct");
}

#[test]
fn sim_efa_direct_msg_rendezvous() {
    matrix("efa-direct-msg");
}

#[test]
fn sim_msg_only() {
    matrix("msg-only");
}

#[test]
fn sim_tiny_queues_msg_rendezvous() {
    matrix("tiny-msg");
}

#[test]
fn sim_efa_with_shm() {
    matrix("efa-shm");
}

#[test]
fn sim_efa_with_own_shm() {
    matrix("efa-local");
}

#[test]
fn sim_efa_with_own_shm_without_cma() {
    matrix("efa-local-msg");
}

#[test]
fn sim_efa_with_own_shm_unreadable_peers() {
    matrix("efa-local-mixed");
}

#[test]
fn sim_efa_striped() {
    matrix("efa-stripe");
}

#[test]
fn sim_tiny_queues() {
    matrix("tiny");
}

#[test]
fn sim_tiny_queues_send_rendezvous() {
    matrix("tiny-send");
}

/// Replays one case: `SIM_SEED`, `SIM_PROFILE`, `SIM_FAULT` (defaults:
/// seed 1, efa, mixed).
#[test]
fn sim_replay() {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let case = Case {
        seed: env("SIM_SEED", "1").parse().expect("SIM_SEED is a number"),
        profile: env("SIM_PROFILE", "efa"),
        fault: env("SIM_FAULT", "mixed"),
    };
    assert!(
        PROFILES.contains(&case.profile.as_str()),
        "unknown SIM_PROFILE"
    );
    assert!(
        FAULT_SETS.contains(&case.fault.as_str()),
        "unknown SIM_FAULT"
    );
    run_case(&case);
}

/// Deaths the runtime never announces, where a survivor still holds what
/// the dead node sent after a packet that died with it when the run ends:
/// nothing it waits on makes it probe the dead peer, so it has not given
/// it up, and the quiesce check must not count those messages.
#[test]
fn sim_death_unannounced_leaves_held_messages() {
    for (seed, profile) in [
        (647, "efa-local"),
        (2280, "efa-local-msg"),
        (1837, "bare"),
        (2237, "sockets"),
    ] {
        let case = Case {
            seed,
            profile: profile.to_string(),
            fault: "death".to_string(),
        };
        let w = run_case(&case).world;
        let d = w.dead.expect("a node died");
        let held = (0..w.nodes.len())
            .filter(|&n| n != d)
            .map(|n| w.held_from_dead_unannounced(n))
            .sum::<usize>();
        assert!(held > 0, "seed {seed}: nothing held from the dead node");
    }
}
