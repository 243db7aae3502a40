//! Directed cases for the registration cache: a hit, eviction at the
//! bound of registrations and at the bound of bytes, invalidation of a registration in use, and a release ring that
//! overflowed. Node 0 sends rendezvous messages to node 1 from buffers
//! chosen per message; the counts of registrations made and served from
//! the cache are checked on top of the simulator's usual checks (every
//! operation names a live registration, none is left at the end).

#![cfg(test)]

use super::fabric::{Inject, PostKind, World};
use super::profiles::profile_set;
use super::rng::Rng;
use super::workload::{Cmd, ConsumerKind, MsgSpec, Plan};
use super::Faults;
use crate::memrelease::{ReleaseRing, RING_SLOTS};
use crate::proto::{CacheBound, Stats};
use crate::wire::Kind;
use std::sync::Arc;

/// Read rendezvous with FI_MR_LOCAL, send rendezvous with FI_MR_LOCAL,
/// read rendezvous without it (only the sender registers).
const PROFILES: [&str; 3] = ["efa", "efa-send", "tcp-rxm"];

/// Apart enough for each rendezvous to finish before the next starts.
const APART: u64 = 200_000;

/// What node 0 does to its release ring when it posts its first RTS.
#[derive(Clone, Copy)]
enum OnFirstRts {
    Nothing,
    /// All memory released (one huge range).
    ReleaseAll,
    /// More ranges than the ring holds, none touching a buffer.
    Overflow,
}

/// Node 0 sends one rendezvous per entry of `at` (time), message `i`
/// reusing the buffer of message `reuse[i]` where given; node 0 keeps
/// unused registrations within the bound `bound` makes of the messages'
/// length. Returns node 0's (mr_reg, mr_hits, registrations cached when
/// the run went quiet).
fn run(
    profile: &str,
    at: &[u64],
    reuse: &[Option<usize>],
    bound: impl Fn(usize) -> CacheBound,
    on_rts: OnFirstRts,
) -> (u64, u64, usize) {
    let rails = profile_set(profile).expect("known profile");
    let len = rails.profiles[0].eager_limit + 1000;
    let specs: Vec<MsgSpec> = (0..at.len())
        .map(|i| MsgSpec {
            from: 0,
            to: 1,
            ctx: 0,
            tag: i as i32,
            len,
            sync: false,
        })
        .collect();
    let mut plan = Plan::explicit(2, &rails, specs, &mut Rng::new(1), 1_000);
    for c in &mut plan.consumers {
        c.kind = ConsumerKind::Recv;
        c.buf_len = len;
    }
    for (t, _, cmd) in &mut plan.script {
        *t = match *cmd {
            Cmd::Send(i) => 1_000 + at[i],
            _ => 0,
        };
    }
    let faults = Faults {
        directed: true,
        ..Faults::default()
    };
    let mut w = World::new(5, rails, faults, plan);
    w.mem.release = 0;
    w.mem.reuse = 0;
    for (i, r) in reuse.iter().enumerate() {
        if let Some(j) = r {
            w.mem.reuse_of.insert(i, *j);
        }
    }
    let ring = Arc::new(ReleaseRing::new());
    w.nodes[0].core.enable_mr_cache(bound(len), ring.clone());
    w.nodes[0].ring = Some(ring.clone());
    let mut fired = false;
    w.hook = Some(Box::new(move |i| {
        if i.node == 0 && i.kind == PostKind::Send && i.packet == Some(Kind::Rts) && !fired {
            fired = true;
            match on_rts {
                OnFirstRts::Nothing => {}
                OnFirstRts::ReleaseAll => ring.push(1, usize::MAX / 2),
                OnFirstRts::Overflow => (0..=RING_SLOTS).for_each(|_| ring.push(8, 1)),
            }
        }
        Inject::Clean
    }));
    w.run();
    w.check();
    let s = &w.nodes[0].stats;
    (
        Stats::get(&s.mr_reg),
        Stats::get(&s.mr_hits),
        w.cached_at_end[0],
    )
}

/// A bound of `n` registrations, bytes unbounded.
fn entries(n: usize) -> impl Fn(usize) -> CacheBound {
    move |_| CacheBound::entries(n)
}

#[test]
fn sim_mrcache_hit() {
    for p in PROFILES {
        let at = [0, APART, 2 * APART, 3 * APART];
        let reuse = [None, Some(0), Some(1), Some(2)];
        assert_eq!(
            run(p, &at, &reuse, entries(4), OnFirstRts::Nothing),
            (1, 3, 1),
            "{p}"
        );
    }
}

#[test]
fn sim_mrcache_eviction_at_the_bound() {
    for p in PROFILES {
        // Buffers A B A B.
        let at = [0, APART, 2 * APART, 3 * APART];
        let reuse = [None, None, Some(0), Some(1)];
        assert_eq!(
            run(p, &at, &reuse, entries(2), OnFirstRts::Nothing),
            (2, 2, 2),
            "{p}: bound 2"
        );
        // With one unused registration kept, B's evicts A's and back.
        assert_eq!(
            run(p, &at, &reuse, entries(1), OnFirstRts::Nothing),
            (4, 0, 1),
            "{p}: bound 1"
        );
        assert_eq!(
            run(p, &at, &reuse, entries(0), OnFirstRts::Nothing),
            (4, 0, 0),
            "{p}: bound 0"
        );
    }
}

/// The bytes bound evicts as the count does: with room for one buffer's
/// registration (a message's length and a half; a registration covers the
/// buffer, as `Region` of the user's bytes), B's evicts A's and back; with
/// room for none, nothing stays, as with a bound of 0 registrations.
#[test]
fn sim_mrcache_eviction_at_the_bytes_bound() {
    for p in PROFILES {
        let at = [0, APART, 2 * APART, 3 * APART];
        let reuse = [None, None, Some(0), Some(1)];
        let bytes = |num: usize, den: usize| {
            move |len: usize| CacheBound {
                entries: 8,
                bytes: len * num / den,
            }
        };
        assert_eq!(
            run(p, &at, &reuse, bytes(2, 1), OnFirstRts::Nothing),
            (2, 2, 2),
            "{p}: room for both"
        );
        assert_eq!(
            run(p, &at, &reuse, bytes(3, 2), OnFirstRts::Nothing),
            (4, 0, 1),
            "{p}: room for one"
        );
        assert_eq!(
            run(p, &at, &reuse, bytes(1, 2), OnFirstRts::Nothing),
            (4, 0, 0),
            "{p}: room for none"
        );
    }
}

/// Message 0 (buffer A) is in flight when its memory is reported released;
/// message 1 (buffer B) starts before it ends, so its lookup applies the
/// notice to A's registration in use. A's registration must still serve
/// its transfer (the checks fail on a read or send naming a released
/// registration), then go when it ends; message 2 reuses A and registers
/// anew, so B's and the new one stay cached.
fn invalidated_in_use(on_rts: OnFirstRts) {
    for p in PROFILES {
        let at = [0, 10, APART];
        let reuse = [None, None, Some(0)];
        assert_eq!(
            run(p, &at, &reuse, entries(4), OnFirstRts::Nothing),
            (2, 1, 2),
            "{p}: baseline"
        );
        assert_eq!(run(p, &at, &reuse, entries(4), on_rts), (3, 0, 2), "{p}");
    }
}

#[test]
fn sim_mrcache_invalidation_while_in_use() {
    invalidated_in_use(OnFirstRts::ReleaseAll);
}

#[test]
fn sim_mrcache_release_ring_overflow() {
    invalidated_in_use(OnFirstRts::Overflow);
}
