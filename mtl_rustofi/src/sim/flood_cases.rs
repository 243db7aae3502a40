//! A flood of eager sends to a receiver busy outside MPI
//! ([`crate::proto`]'s flow control): node 1 takes nothing in for a long
//! time (its packets wait in the fabric, and transmits to it do not
//! complete), while node 0 issues thousands of small eager sends to it,
//! with a few synchronous and rendezvous sends among them. Checked after
//! every event: the bytes each core holds for uncompleted sends stay
//! within `send_queue_limit` (per peer) and `send_queue_total`; when the
//! receiver wakes, sends beyond the limit are still incomplete; at the end
//! every message has arrived, complete and in order (the run's checks).

#![cfg(test)]

use super::fabric::World;
use super::panic_text;
use super::profiles::{fault_set, profile_set};
use super::rng::Rng;
use super::workload::{Cmd, ConsumerKind, MsgSpec, Plan, Stall, CTX_SPECIFIC};
use super::Case;
use crate::proto::OP_OVERHEAD;

/// Messages of the flood.
const FLOOD: usize = if cfg!(miri) { 200 } else { 3_000 };
/// How long the receiver sleeps (simulated ns): a hundred times the span
/// in which the sender issues everything.
const SLEEP: u64 = 20_000_000;
const ISSUE: u64 = 200_000;

impl World {
    /// Checks every core's flow-control charge against its limits and
    /// notes what it saw (called after every event of a run with a stall).
    pub(crate) fn watch_flow(&mut self) {
        let (limit, total) = self.plan.send_queue;
        for (n, node) in self.nodes.iter().enumerate() {
            let f = node.core.flow_state();
            // One send always gets through to a peer holding nothing, so
            // a limit below one buffer allows that buffer.
            let full = self
                .rails
                .profiles
                .iter()
                .map(|p| p.buf_size)
                .max()
                .unwrap_or(0)
                + OP_OVERHEAD;
            if f.max_peer > limit.max(full) || f.total > total.max(full) {
                self.fail(&format!(
                    "node {n}: send queue holds {} bytes for one peer, {} in all \
                     (limits {limit} and {total})",
                    f.max_peer, f.total
                ));
            }
            let s = &mut self.flow_seen;
            s.max_total = s.max_total.max(f.total);
            s.max_peer = s.max_peer.max(f.max_peer);
            s.max_deferred = s.max_deferred.max(f.deferred);
        }
        let stall = self.plan.stall.expect("watched runs have a stall");
        if self.now >= stall.until && self.flow_seen.incomplete_at_wake.is_none() {
            let open = self
                .reqs
                .iter()
                .filter(|r| {
                    matches!(r.kind, super::fabric::ReqKind::Send { .. }) && r.done.is_none()
                })
                .count();
            self.flow_seen.incomplete_at_wake = Some(open);
        }
    }
}

/// The flood's plan: sends issued within `ISSUE` ns, receives posted
/// after the receiver wakes, in send order (one tag: each receive must
/// get the message of its index).
fn flood_plan(profile: &str, seed: u64, send_queue: (usize, usize)) -> Plan {
    let rails = profile_set(profile).expect("known profile");
    let mut rng = Rng::new(seed);
    let eager = rails.profiles[0].eager_limit;
    let specs: Vec<MsgSpec> = (0..FLOOD)
        .map(|i| MsgSpec {
            from: 0,
            to: 1,
            ctx: CTX_SPECIFIC,
            tag: 0,
            len: match i % 500 {
                // a rendezvous and a large eager send now and then
                7 => eager + 1 + rng.usize(0, 3 * eager),
                11 => eager,
                _ => 8 + rng.usize(0, 56),
            },
            sync: i % 250 == 3,
        })
        .collect();
    let mut plan = Plan::explicit(2, &rails, specs, &mut rng, ISSUE);
    let lens: Vec<usize> = plan.msgs.iter().map(|m| m.spec.len).collect();
    for (c, len) in plan.consumers.iter_mut().zip(lens) {
        c.kind = ConsumerKind::Recv;
        c.buf_len = len;
    }
    // Sends in list order over ISSUE ns (some at one instant), receives
    // after the wake-up.
    let mut k = 0u64;
    for (t, _, cmd) in &mut plan.script {
        k += 1;
        *t = match cmd {
            Cmd::Consume(_) => SLEEP + k,
            _ => k * ISSUE / FLOOD as u64 / 2 * 2,
        };
    }
    plan.send_queue = send_queue;
    plan.stall = Some(Stall {
        node: 1,
        until: SLEEP,
    });
    plan
}

/// Runs the flood and its checks; returns the world.
fn flood(profile: &str, fault: &str, seed: u64, send_queue: (usize, usize)) -> World {
    let case = Case {
        seed,
        profile: profile.into(),
        fault: fault.into(),
    };
    let res = std::panic::catch_unwind(|| {
        let rails = profile_set(profile).expect("known profile");
        let faults = fault_set(fault).expect("known fault set");
        let plan = flood_plan(profile, seed, send_queue);
        let mut w = World::new(seed, rails, faults, plan);
        w.run();
        w.check();
        w
    });
    match res {
        Ok(w) => w,
        Err(e) => {
            let msg = panic_text(e.as_ref());
            panic!("flood {profile}/{fault} seed {seed} failed: {msg} ({case:?})");
        }
    }
}

/// The limit of the cases: three full buffers of the profile.
fn small_limits(profile: &str) -> (usize, usize) {
    let p = &profile_set(profile).expect("known").profiles[0];
    let limit = 3 * (p.buf_size + OP_OVERHEAD);
    (limit, limit + limit / 2)
}

/// On the efa, tcp and udp profiles (with coalescing on or off: their
/// copied eager packets take transmits the stalled peer holds up; the shm
/// profile's inject size takes small packets into the provider at once,
/// which bounds them by its own queue).
#[test]
fn sim_flood_send_queue_stays_bounded() {
    let profiles: &[&str] = if cfg!(miri) {
        &["efa"]
    } else {
        &["efa", "tcp-rxm", "udp-rxd"]
    };
    let faults: &[&str] = if cfg!(miri) {
        &["none"]
    } else {
        &["none", "eagain", "cqerr", "slow", "dup", "mixed"]
    };
    for &profile in profiles {
        for &fault in faults {
            for seed in 1..=super::seeds(2) {
                let limits = small_limits(profile);
                let w = flood(profile, fault, seed, limits);
                let s = w.flow_seen;
                let ctx = format!("{profile}/{fault} seed {seed}: {s:?}");
                assert!(s.max_deferred > 0, "no send ever waited: {ctx}");
                let open = s.incomplete_at_wake.expect("the receiver woke up");
                assert!(
                    open > FLOOD / 2,
                    "only {open} of {FLOOD} sends incomplete while the receiver slept: {ctx}"
                );
                assert!(s.max_peer > limits.0 / 2, "the queue never filled: {ctx}");
            }
        }
    }
}

/// The same flood without a binding limit: every copied send completes at
/// once and the core holds far more than the limit above (what the limit
/// prevents).
#[test]
fn sim_flood_without_limit_holds_everything() {
    let w = flood("efa", "none", 1, (1 << 40, 1 << 40));
    let s = w.flow_seen;
    assert_eq!(s.max_deferred, 0, "{s:?}");
    assert!(s.max_total > 20 * small_limits("efa").0, "{s:?}");
}
