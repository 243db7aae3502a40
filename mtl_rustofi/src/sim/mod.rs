//! A deterministic simulator of the protocol core ([`crate::proto`]).
//!
//! Several cores are joined by a simulated fabric ([`fabric`]) that
//! executes their actions for real: packets are copied into the receiving
//! node's posted receive buffers, RMA reads copy from the target's
//! registered memory (looked up by key), tagged messages are matched by
//! source and exact tag. Every delivery and completion is an event at a
//! random future time drawn from one seeded generator, so completions come
//! late and out of order, packets overtake each other and, where a fault
//! set asks for it, arrive twice. Provider profiles ([`profiles`]) give the
//! capability bits and queue depths of each provider; fault sets inject
//! completion errors, rejected posts, failed registrations, slow
//! completions, duplicates and the death of a node.
//!
//! A run plays a random MPI workload ([`workload`]) and then checks
//! ([`checks`]) that every request completed exactly once with the right
//! data, status, source, tag and count, that MPI matching order held, and
//! that nothing is left in the cores or the fabric.
//!
//! A failing run panics with the command that replays it.

mod checks;
mod defects;
mod driver;
mod fabric;
mod flood_cases;
mod inject;
mod livecases;
mod liveness;
mod lostpkt_cases;
mod lostrecv_cases;
mod memreuse;
mod mr_release_cases;
mod mrcases;
mod msg_cases;
mod profiles;
mod repair_cases;
mod rng;
mod run;
mod stripecases;
mod tests;
mod txbuf_cases;
mod wild_cases;
mod workload;

use std::panic::{catch_unwind, AssertUnwindSafe};

pub(crate) use fabric::World;
pub(crate) use profiles::{fault_set, profile_set, FAULT_SETS, PROFILES};
pub(crate) use workload::Plan;

/// Per-mille rates of the faults a run injects.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Faults {
    /// Error completions of packet sends, reads, tagged sends, tagged
    /// receives and posted receive buffers.
    pub(crate) err_send: u32,
    pub(crate) err_read: u32,
    pub(crate) err_tsend: u32,
    pub(crate) err_trecv: u32,
    pub(crate) err_rx: u32,
    /// Posts rejected with FI_EAGAIN (operations and receive buffers).
    pub(crate) post_again: u32,
    /// Posts rejected with a hard error (operations and receive buffers).
    pub(crate) post_hard: u32,
    /// Registrations that fail.
    pub(crate) reg_fail: u32,
    /// Packets delivered twice (also: a failed packet that arrived anyway).
    pub(crate) dup: u32,
    /// Data packets of a message rendezvous that the receiving provider
    /// loses: the buffer fails with only the header placed.
    pub(crate) lose_data: u32,
    /// Packets of a message rendezvous (grants and requests, data, FINs)
    /// that arrive cut short and are refused as malformed: lost whole.
    pub(crate) garble: u32,
    /// Completions held back fifty times longer than usual.
    pub(crate) slow: u32,
    /// One node dies in the middle of the run.
    pub(crate) death: bool,
    /// A directed test injects faults through its hook.
    pub(crate) directed: bool,
}

impl Faults {
    /// Whether a request may legitimately fail in this run.
    pub(crate) fn any_failure(&self) -> bool {
        self.err_send + self.err_read + self.err_tsend + self.err_trecv + self.post_hard > 0
            || self.reg_fail > 0
            || self.death
            || self.directed
    }

    /// Whether error counters may move in this run.
    pub(crate) fn any_error(&self) -> bool {
        self.any_failure() || self.err_rx > 0 || self.dup > 0
    }
}

/// One simulated run: which profile, which faults, which seed.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub(crate) seed: u64,
    pub(crate) profile: String,
    pub(crate) fault: String,
}

impl Case {
    pub(crate) fn replay_command(&self) -> String {
        format!(
            "SIM_SEED={} SIM_PROFILE={} SIM_FAULT={} cargo test --release -p mtl_rustofi --lib sim_replay",
            self.seed, self.profile, self.fault
        )
    }
}

/// What a finished run reports (for tests that look closer).
pub(crate) struct Outcome {
    pub(crate) world: World,
}

/// Runs a random case and its checks; panics with the replay command if
/// anything fails.
pub(crate) fn run_case(case: &Case) -> Outcome {
    let res = catch_unwind(AssertUnwindSafe(|| {
        let faults = fault_set(&case.fault).expect("known fault set");
        let rails = profile_set(&case.profile).expect("known profile");
        let mut rng = rng::Rng::new(case.seed);
        let plan = Plan::random(&mut rng, &rails, &faults);
        let mut w = World::new(case.seed, rails, faults, plan);
        w.run();
        w.check();
        Outcome { world: w }
    }));
    match res {
        Ok(o) => o,
        Err(e) => {
            let msg = panic_text(e.as_ref());
            panic!(
                "simulation failed: {msg}\nreplay with: {}",
                case.replay_command()
            );
        }
    }
}

/// Seeds per (profile, fault set) in the regular suite, multiplied by
/// `SIM_SOAK` when set.
pub(crate) fn seeds(base: u64) -> u64 {
    let soak = std::env::var("SIM_SOAK")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1);
    if cfg!(miri) {
        1
    } else {
        base * soak
    }
}

/// Silences the core's error messages on this thread (the simulator
/// provokes thousands of them).
pub(crate) fn quiet() {
    crate::log::QUIET.with(|q| q.set(true));
}

/// The message a panic carried (what `panic!` formatted), or nothing.
pub(crate) fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}
