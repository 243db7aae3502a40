//! The simulator's tests: the random matrix (every profile under every
//! fault set, many seeds each), the replay of one seed, and directed cases
//! for the defects of the engine at be0251a.

#![cfg(test)]

use super::*;

/// Seeds per (profile, fault set) in one regular run.
const BASE_SEEDS: u64 = 40;

/// Runs every fault set over `SEEDS` seeds of one profile.
fn matrix(profile: &str) {
    let n = seeds(BASE_SEEDS);
    let first = std::env::var("SIM_SEED_BASE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    for fault in FAULT_SETS {
        if cfg!(miri) && !matches!(*fault, "none" | "mixed" | "death") {
            continue;
        }
        for seed in first..first + n {
            run_case(&Case {
                seed,
                profile: profile.to_string(),
                fault: fault.to_string(),
            });
        }
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
fn sim_efa_with_shm() {
    matrix("efa-shm");
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
