//! Directed cases for striping over several NICs (profile `efa-stripe`:
//! a primary rail and two stripe rails with a smaller chunk): reads spread
//! over the three rails, a read failing on one stripe rail, a peer with
//! fewer NICs, and small messages around a striped one. The reads each
//! rail is asked for are counted on top of the simulator's usual checks
//! (data, order, every operation naming a live registration of its rail).

#![cfg(test)]

use super::fabric::{Inject, PostKind, World};
use super::profiles::profile_set;
use super::rng::Rng;
use super::workload::{Cmd, ConsumerKind, MsgSpec, Plan};
use super::Faults;
use crate::proto::{Event, Stats, Status};
use std::cell::RefCell;
use std::rc::Rc;

/// Primary-rail chunks in a large message: far above every threshold the
/// simulator draws (at most five chunks), so it always stripes.
const CHUNKS: usize = 40;

/// Reads first posted on each rail.
type Reads = Rc<RefCell<[u64; 3]>>;

struct Setup {
    uneven: bool,
    /// (from, to, tag, len, send time) per message.
    msgs: Vec<(usize, usize, i32, usize, u64)>,
    recv_at: u64,
    /// The `n`-th read first posted on rail 2 (from 1) completes in error.
    fail_rail2_read: Option<u64>,
}

fn run(s: Setup) -> (World, [u64; 3]) {
    run_with(profile_set("efa-stripe").expect("known profile"), s)
}

fn run_with(mut rails: super::profiles::Rails, s: Setup) -> (World, [u64; 3]) {
    rails.uneven = s.uneven;
    let specs: Vec<MsgSpec> = s
        .msgs
        .iter()
        .map(|&(from, to, tag, len, _)| MsgSpec {
            from,
            to,
            ctx: 0,
            tag,
            len,
            sync: false,
        })
        .collect();
    let max = specs.iter().map(|m| m.len).max().unwrap_or(0);
    let mut plan = Plan::explicit(2, &rails, specs, &mut Rng::new(1), 1_000);
    for c in &mut plan.consumers {
        c.kind = ConsumerKind::Recv;
        c.buf_len = max;
    }
    for (t, _, cmd) in &mut plan.script {
        *t = match *cmd {
            Cmd::Send(i) => s.msgs[i].4,
            _ => s.recv_at,
        };
    }
    let faults = Faults {
        directed: true,
        ..Faults::default()
    };
    let mut w = World::new(9, rails, faults, plan);
    let reads: Reads = Rc::default();
    let seen = reads.clone();
    let fail = s.fail_rail2_read;
    w.hook = Some(Box::new(move |i| {
        if i.kind != PostKind::Read || i.attempt != 1 {
            return Inject::Clean;
        }
        let mut r = seen.borrow_mut();
        r[i.rail] += 1;
        if i.rail == 2 && Some(r[2]) == fail {
            Inject::CqError
        } else {
            Inject::Clean
        }
    }));
    w.run();
    w.check();
    let r = *reads.borrow();
    (w, r)
}

fn chunk(w: &World) -> usize {
    w.rails.profiles[0].chunk
}

/// Statuses of the receives and sends of a run, in request order.
fn statuses(w: &World) -> (Vec<Status>, Vec<Status>) {
    let (mut recv, mut send) = (Vec::new(), Vec::new());
    for r in &w.reqs {
        match r.done {
            Some((_, Event::Recv { status, .. })) => recv.push(status),
            Some((_, Event::Send { status, .. })) => send.push(status),
            _ => {}
        }
    }
    (recv, send)
}

#[test]
fn sim_stripe_reads_spread_over_every_rail() {
    let len = CHUNKS * 16384;
    let (w, reads) = run(Setup {
        uneven: false,
        msgs: vec![(0, 1, 5, len, 1_000)],
        recv_at: 0,
        fail_rail2_read: None,
    });
    assert_eq!(chunk(&w), 16384);
    // Round-robin: one primary chunk (16 KiB) and one chunk on each stripe
    // rail (8 KiB) per turn, so each rail reads the same number of chunks
    // and the stripes carry half of the bytes.
    assert_eq!(reads, [20, 20, 20]);
    assert_eq!(Stats::get(&w.nodes[0].stats.striped), 1);
    assert_eq!(Stats::get(&w.nodes[1].stats.stripe_bytes), (len / 2) as u64);
    assert_eq!(statuses(&w), (vec![Status::Ok], vec![Status::Ok]));
}

/// Rails whose chunk size would take a whole transfer in one read (tcp's
/// `max_msg_size` is unlimited and the default chunk is 64 MiB) still
/// spread it: the read is cut into pieces for every lane.
#[test]
fn sim_stripe_spreads_where_one_chunk_would_take_it_all() {
    let len = 4 << 20;
    let mut rails = profile_set("efa-stripe").expect("known profile");
    for p in &mut rails.profiles {
        p.chunk = 1 << 26;
    }
    let (w, reads) = run_with(
        rails,
        Setup {
            uneven: false,
            msgs: vec![(0, 1, 5, len, 1_000)],
            recv_at: 0,
            fail_rail2_read: None,
        },
    );
    // 4 MiB over 3 lanes, 4 pieces per lane: 12 reads of 1/12 each (the
    // last takes the remainder), round-robin.
    assert_eq!(reads.iter().sum::<u64>(), 13);
    assert!(reads.iter().all(|&n| n >= 4), "reads per rail: {reads:?}");
    let striped = Stats::get(&w.nodes[1].stats.stripe_bytes);
    assert!(
        striped >= (len / 2) as u64,
        "{striped} of {len} bytes read through the stripes"
    );
    assert_eq!(statuses(&w), (vec![Status::Ok], vec![Status::Ok]));
}

#[test]
fn sim_stripe_read_failing_on_one_rail_fails_the_transfer() {
    let len = CHUNKS * 16384;
    let (w, reads) = run(Setup {
        uneven: false,
        // The second transfer starts long after the first failed: the
        // rails still carry it.
        msgs: vec![(0, 1, 5, len, 1_000), (0, 1, 6, len, 5_000_000)],
        recv_at: 0,
        fail_rail2_read: Some(3),
    });
    assert!(reads[2] >= 3, "{reads:?}");
    let (recv, send) = statuses(&w);
    assert_eq!(recv, vec![Status::Failed, Status::Ok]);
    assert_eq!(send, vec![Status::Failed, Status::Ok]);
}

#[test]
fn sim_stripe_peer_with_fewer_nics() {
    // Node 1 has one stripe endpoint, node 0 two: both directions stripe
    // over the one stripe rail both have, never over the other.
    let len = CHUNKS * 16384;
    let (w, reads) = run(Setup {
        uneven: true,
        msgs: vec![(0, 1, 5, len, 1_000), (1, 0, 5, len, 1_000)],
        recv_at: 0,
        fail_rail2_read: None,
    });
    assert_eq!(reads[2], 0, "{reads:?}");
    assert!(reads[0] > 0 && reads[1] > 0, "{reads:?}");
    assert_eq!(Stats::get(&w.nodes[0].stats.striped), 1);
    assert_eq!(Stats::get(&w.nodes[1].stats.striped), 1);
    let (recv, send) = statuses(&w);
    assert_eq!((recv.len(), send.len()), (2, 2));
    assert!(recv.iter().chain(&send).all(|s| *s == Status::Ok));
}

#[test]
fn sim_stripe_small_messages_keep_their_order_around_a_striped_one() {
    // Same envelope: the checks require the receives to get the messages
    // in send order, whether posted before (expected) or after (held as
    // unexpected) the sends.
    let len = CHUNKS * 16384;
    for recv_at in [0, 2_000_000] {
        let (w, reads) = run(Setup {
            uneven: false,
            msgs: vec![
                (0, 1, 5, 100, 1_000),
                (0, 1, 5, len, 1_001),
                (0, 1, 5, 200, 1_002),
                (0, 1, 5, 7_000, 1_003),
                (0, 1, 5, len + 5, 1_004),
                (0, 1, 5, 0, 1_005),
            ],
            recv_at,
            fail_rail2_read: None,
        });
        assert!(reads.iter().all(|&r| r > 0), "{reads:?}");
        assert_eq!(Stats::get(&w.nodes[0].stats.striped), 2);
        let (recv, send) = statuses(&w);
        assert_eq!(recv.len(), 6);
        assert!(recv.iter().chain(&send).all(|s| *s == Status::Ok));
    }
}
