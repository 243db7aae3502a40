//! Directed cases for the matcher's per-context wildcard test
//! (`matching/wild.rs`): wildcard receives stay posted in other contexts
//! while the messages of a specific context arrive (as the shim's receive
//! of extended communicator ids does for the whole run on Open MPI 5), and
//! every message still reaches its own receive, eager and rendezvous, on
//! the EFA profiles, with and without faults. The random matrix mixes the
//! same contexts with random timing.

#![cfg(test)]

use super::defects::{directed, recv_status, send_status};
use super::fabric::{Inject, PostKind};
use super::profiles::profile_set;
use super::workload::{MsgSpec, CTX_ANY, CTX_ANY_SOURCE, CTX_SPECIFIC};
use crate::proto::Status;
use crate::wire::Kind;
use std::cell::Cell;
use std::rc::Rc;

fn spec(ctx: u32, tag: i32, len: usize) -> MsgSpec {
    MsgSpec {
        from: 0,
        to: 1,
        ctx,
        tag,
        len,
        sync: false,
    }
}

/// Messages of the specific context, eager and one rendezvous, sent while
/// the receives of `side` contexts (wildcards, posted first like every
/// receive of a directed run) wait for the messages sent last.
fn plan(profile: &str, side: &[u32]) -> Vec<MsgSpec> {
    let p = &profile_set(profile).expect("known").profiles[0];
    let mut specs: Vec<MsgSpec> = (0..6)
        .map(|t| spec(CTX_SPECIFIC, t, 8 + t as usize))
        .collect();
    specs.push(spec(CTX_SPECIFIC, 6, 3 * p.eager_limit + 5));
    specs.push(spec(CTX_SPECIFIC, 7, 1));
    for (i, &ctx) in side.iter().enumerate() {
        specs.push(spec(ctx, 100 + i as i32, 16));
    }
    specs
}

fn run(side: &[u32], faults: bool) {
    for profile in ["efa", "efa-local"] {
        let specs = plan(profile, side);
        let n = specs.len();
        let refused = Rc::new(Cell::new(0u32));
        let r = refused.clone();
        // With faults, every first post of a matchable packet is refused
        // once (EAGAIN): it waits in the queue and goes out in order.
        let w = directed(profile, specs, false, move |i| match (i.kind, i.packet) {
            (PostKind::Send, Some(Kind::Eager | Kind::Rts)) if faults && i.attempt == 1 => {
                r.set(r.get() + 1);
                Inject::Again
            }
            _ => Inject::Clean,
        });
        if faults {
            assert!(refused.get() > 0, "{profile}: no post was refused");
        }
        for m in 0..n {
            let what = format!("{profile}, side contexts {side:?}, faults {faults}: message {m}");
            assert_eq!(recv_status(&w, m), Some(Status::Ok), "{what}: receive");
            assert_eq!(send_status(&w, m), Some(Status::Ok), "{what}: send");
        }
    }
}

/// One context holds a wildcard: the specific context's arrivals skip the
/// wildcard path, and the side context's message still finds its receive.
#[test]
fn sim_wildcard_in_one_other_context() {
    run(&[CTX_ANY], false);
    run(&[CTX_ANY], true);
}

/// With wildcards in two contexts the matcher no longer knows which one
/// holds them, and every arrival looks at its own context's list: the
/// ordered path, which must find nothing for the specific context.
#[test]
fn sim_wildcards_in_two_other_contexts_take_the_ordered_path() {
    run(&[CTX_ANY_SOURCE, CTX_ANY], false);
    run(&[CTX_ANY_SOURCE, CTX_ANY], true);
}
