//! The schedule of the rings a rank reads, among eight "ranks" of a
//! made-up job inside one process: rank 0 reads, the others send short
//! messages that arrive unexpected (each counted by the core).

use super::super::{LocalJob, ShmRail};
use super::{sweep_every, COOL_POLLS};
use crate::config::{self, Fault};
use crate::proto::ids::{FiAddr, RailId};
use crate::proto::{Core, CoreConfig, Out, Stats};
use crate::usermem::Region;
use crate::wire::EagerHead;
use std::sync::Arc;

const RANKS: usize = 8;

/// The process name of local rank `r`.
fn name(r: usize) -> u64 {
    100 + r as u64
}

/// The ranks of a job of [`RANKS`]; rank 0 has inserted every other rank,
/// and each of them rank 0. A core for rank 0 that knows them all.
fn job(tag: u32) -> (Vec<ShmRail>, Core) {
    job_inserted(tag, RANKS)
}

/// [`job`] where only ranks below `inserted` and rank 0 have inserted
/// each other.
fn job_inserted(tag: u32, inserted: usize) -> (Vec<ShmRail>, Core) {
    let jobid = tag << 24 | std::process::id() & 0xff_ffff;
    let s = config::validate(&config::test_params()).unwrap();
    let mut rails: Vec<ShmRail> = (0..RANKS)
        .map(|rank| {
            ShmRail::open(
                LocalJob {
                    jobid,
                    rank,
                    size: RANKS,
                },
                &s,
            )
            .unwrap()
        })
        .collect();
    for r in 1..inserted {
        insert_pair(&mut rails, r);
    }
    let cfg = CoreConfig {
        my_name: name(0),
        coalesce: true,
        fault: Fault::None,
        stripe_min: 0,
        send_queue_limit: s.send_queue_limit,
        send_queue_total: s.send_queue_total,
    };
    let mut core = Core::new(
        cfg,
        vec![rails[0].profile.clone()],
        Arc::new(Stats::default()),
    );
    for r in 1..RANKS {
        core.add_peer(name(r), RailId(0), FiAddr(r as u64), 8192);
    }
    (rails, core)
}

/// Rank 0 and rank `r` insert each other.
fn insert_pair(rails: &mut [ShmRail], r: usize) {
    let (n0, nr) = (rails[0].name(), rails[r].name());
    rails[0].insert(&nr, name(r)).unwrap();
    rails[r].insert(&n0, name(0)).unwrap();
}

/// Sends rank 0 a short message, the `seq`-th from this rank.
fn send(from: &mut ShmRail, seq: u32) {
    let head = EagerHead {
        ctx: 1,
        src: 0,
        tag: 5,
        seq,
        sender: 0,
    };
    let pkt = super::short::packet(&head, b"hi");
    let region = Region {
        addr: pkt.as_ptr() as usize,
        len: pkt.len(),
    };
    from.send(FiAddr(0), region, None).unwrap();
}

/// Polls rank 0 until it reads a packet; returns the polls it took (at
/// most `limit`, else fails).
fn polls_to_read(rails: &mut [ShmRail], core: &mut Core, out: &mut Out, limit: u32) -> u32 {
    for k in 1..=limit {
        if rails[0].poll(RailId(0), core, out) > 0 {
            return k;
        }
    }
    panic!("no packet read within {limit} polls");
}

/// Polls rank 0 `n` times, finding nothing.
fn idle(rails: &mut [ShmRail], core: &mut Core, out: &mut Out, n: u32) {
    for _ in 0..n {
        assert_eq!(rails[0].poll(RailId(0), core, out), 0);
    }
}

#[test]
fn polls_per_sweep_grow_with_the_local_ranks_from_one_to_sixteen() {
    let every: Vec<u32> = [1, 2, 3, 4, 5, 8, 16, 32, 64, 192]
        .iter()
        .map(|&n| sweep_every(n))
        .collect();
    assert_eq!(every, [1, 1, 1, 2, 2, 4, 8, 16, 16, 16]);
}

#[test]
fn quiet_rings_turn_cold_and_a_cold_rings_packet_is_read_within_a_sweep() {
    let (mut rails, mut core) = job(0xc1);
    let mut out = Out::new();
    let every = sweep_every(RANKS);
    assert_eq!(
        rails[0].inbound.hot_ranks(),
        (1..RANKS).collect::<Vec<_>>(),
        "every ring starts hot"
    );
    // Rank 2 keeps talking; the others say nothing.
    let mut seq2 = 0;
    for _ in 0..COOL_POLLS * 2 + every {
        send(&mut rails[2], seq2);
        seq2 += 1;
        assert_eq!(rails[0].poll(RailId(0), &mut core, &mut out), 1);
    }
    assert_eq!(rails[0].inbound.hot_ranks(), [2], "only the talking ring");
    // A packet from a cold ring: read within a sweep's polls, from any
    // point of the schedule, and its ring is hot from then on.
    for (k, from) in (3..RANKS).enumerate() {
        idle(&mut rails, &mut core, &mut out, k as u32 % every);
        send(&mut rails[from], 0);
        polls_to_read(&mut rails, &mut core, &mut out, every);
        send(&mut rails[from], 1);
        assert_eq!(
            polls_to_read(&mut rails, &mut core, &mut out, 1),
            1,
            "a hot ring is read on every poll"
        );
    }
    let mut hot = rails[0].inbound.hot_ranks();
    hot.sort_unstable();
    assert_eq!(hot, [2, 3, 4, 5, 6, 7]);
    assert_bitmap_is_hot_set(&rails[0]);
    assert_eq!(Stats::get(&core.stats().errors), 0);
    assert_eq!(
        Stats::get(&core.stats().unexpected),
        seq2 as u64 + 2 * (RANKS as u64 - 3),
        "every message arrived, none twice"
    );
}

#[test]
fn a_look_without_the_token_finds_a_cold_rings_packet_and_the_next_poll_reads_it() {
    let (mut rails, mut core) = job(0xc2);
    let mut out = Out::new();
    let every = sweep_every(RANKS);
    idle(&mut rails, &mut core, &mut out, COOL_POLLS + every);
    assert!(rails[0].inbound.hot_ranks().is_empty(), "all cold");
    // Polls and looks out of step: the next poll is not a sweep's turn.
    while rails[0].inbound.polls & (every - 1) != 1 {
        idle(&mut rails, &mut core, &mut out, 1);
    }
    let watch = rails[0].watch();
    send(&mut rails[5], 0);
    let looks = (1..=every).find(|_| watch.any_ready::<true>());
    assert!(looks.is_some(), "seen within {every} looks");
    assert_eq!(
        rails[0].poll(RailId(0), &mut core, &mut out),
        1,
        "the look asked this poll to read every ring"
    );
    assert_eq!(rails[0].inbound.hot_ranks(), [5]);
    assert!(!watch.any_ready::<true>(), "nothing left");
}

#[test]
fn with_few_local_ranks_every_poll_reads_every_ring() {
    use super::super::tests::{core, pair, region, short_packet, PROC_A};
    let (mut a, mut b) = pair(0xc3);
    let mut core = core(&b, PROC_A);
    let mut out = Out::new();
    assert_eq!(sweep_every(2), 1);
    // However long the quiet, the first poll after a send reads it.
    for seq in 0..4 {
        for _ in 0..COOL_POLLS * 4 {
            assert_eq!(b.poll(RailId(0), &mut core, &mut out), 0);
        }
        let pkt = short_packet(seq, seq as i32, b"x");
        a.send(FiAddr(1), region(&pkt), None).unwrap();
        assert!(
            !b.watch().scheduled() && b.watch().any_ready::<false>(),
            "the first look sees it"
        );
        assert_eq!(b.poll(RailId(0), &mut core, &mut out), 1);
    }
    assert_eq!(Stats::get(&core.stats().unexpected), 4);
}

#[test]
fn rings_cool_while_a_rank_only_looks_and_is_polled_one_time_in_64() {
    // An idle rank: its polls are quick looks, and one in 64 takes the
    // token and polls the rail (`engine::idle`).
    let (mut rails, mut core) = job(0xc4);
    let mut out = Out::new();
    let watch = rails[0].watch();
    let mut looks = 0;
    while !rails[0].inbound.hot_ranks().is_empty() {
        for _ in 0..63 {
            assert!(!watch.any_ready::<true>());
        }
        idle(&mut rails, &mut core, &mut out, 1);
        looks += 64;
        assert!(looks <= 4 * COOL_POLLS, "still hot after {looks} looks");
    }
    // And a cold ring's packet is then seen by a look within a sweep.
    send(&mut rails[1], 0);
    let every = sweep_every(RANKS);
    assert!((1..=every).any(|_| watch.any_ready::<true>()));
    assert_eq!(rails[0].poll(RailId(0), &mut core, &mut out), 1);
}

/// The watch's bitmap names exactly the hot rings.
fn assert_bitmap_is_hot_set(rail: &ShmRail) {
    let hot = rail.inbound.hot_ranks();
    let watch = rail.watch();
    for r in 0..RANKS {
        assert_eq!(watch.is_hot(r), hot.contains(&r), "rank {r}'s bit");
    }
}

/// Polls rank 0 idly until its next poll is a sweep that also cools.
fn until_next_poll_cools(rails: &mut [ShmRail], core: &mut Core, out: &mut Out) {
    let mask = sweep_every(RANKS) - 1;
    loop {
        let i = &rails[0].inbound;
        let next = i.polls.wrapping_add(1);
        let since = i.clock().wrapping_add(1).wrapping_sub(i.cooled_at);
        if next & mask == 0 && since >= COOL_POLLS {
            return;
        }
        idle(rails, core, out, 1);
    }
}

#[test]
fn a_cold_ring_is_not_read_between_sweeps() {
    let (mut rails, mut core) = job(0xc5);
    let mut out = Out::new();
    let every = sweep_every(RANKS);
    idle(&mut rails, &mut core, &mut out, 2 * COOL_POLLS + every);
    assert!(rails[0].inbound.hot_ranks().is_empty());
    assert_bitmap_is_hot_set(&rails[0]);
    // Right after a sweep, a packet in a cold ring waits for the next.
    while rails[0].inbound.polls & (every - 1) != 0 {
        idle(&mut rails, &mut core, &mut out, 1);
    }
    send(&mut rails[6], 0);
    for _ in 1..every {
        assert_eq!(
            rails[0].poll(RailId(0), &mut core, &mut out),
            0,
            "a poll between sweeps leaves the cold ring alone"
        );
    }
    assert_eq!(
        rails[0].poll(RailId(0), &mut core, &mut out),
        1,
        "the sweep"
    );
    assert_eq!(rails[0].inbound.hot_ranks(), [6]);
    assert_bitmap_is_hot_set(&rails[0]);
}

#[test]
fn a_ring_that_turns_hot_in_a_cooling_sweep_stays_hot() {
    let (mut rails, mut core) = job(0xc6);
    let mut out = Out::new();
    idle(&mut rails, &mut core, &mut out, 2 * COOL_POLLS + 16);
    assert!(rails[0].inbound.hot_ranks().is_empty());
    until_next_poll_cools(&mut rails, &mut core, &mut out);
    send(&mut rails[3], 0);
    assert_eq!(rails[0].poll(RailId(0), &mut core, &mut out), 1);
    assert_eq!(
        rails[0].inbound.hot_ranks(),
        [3],
        "turned hot after the cooling, not cooled with the others"
    );
    // It stays hot through the next cooling if it keeps delivering.
    for seq in 1..=COOL_POLLS + 16 {
        send(&mut rails[3], seq);
        assert_eq!(rails[0].poll(RailId(0), &mut core, &mut out), 1);
    }
    assert_eq!(rails[0].inbound.hot_ranks(), [3]);
}

#[test]
fn a_peer_inserted_while_the_others_are_cold_starts_hot() {
    let (mut rails, mut core) = job_inserted(0xc7, RANKS - 1);
    let mut out = Out::new();
    idle(&mut rails, &mut core, &mut out, 2 * COOL_POLLS + 16);
    assert!(rails[0].inbound.hot_ranks().is_empty());
    let last = RANKS - 1;
    insert_pair(&mut rails, last);
    assert_eq!(rails[0].inbound.hot_ranks(), [last]);
    assert_bitmap_is_hot_set(&rails[0]);
    send(&mut rails[last], 0);
    assert_eq!(
        rails[0].poll(RailId(0), &mut core, &mut out),
        1,
        "read on the first poll"
    );
}

/// The ring from a rank to itself is kept out of the schedule and read
/// only once written: a send to self shows to the quick look at once (on
/// either kind of look) and is read by the next poll; a burst beyond one
/// poll's budget stays shown until the last of it is read.
#[test]
fn the_ring_to_self_is_read_once_written_and_until_empty() {
    let (mut rails, mut core) = job(0xc8);
    let mut out = Out::new();
    let me = rails[0].name();
    rails[0].insert(&me, name(0)).unwrap();
    core.add_peer(name(0), RailId(0), FiAddr(0), 8192);
    let watch = rails[0].watch();
    let shown = || (watch.any_ready::<false>(), watch.any_ready::<true>());
    assert_eq!(shown(), (false, false), "nothing sent yet");
    assert!(!rails[0].inbound.hot_ranks().contains(&0), "not scheduled");
    send(&mut rails[0], 0);
    assert_eq!(shown(), (true, true), "a send to self shows at once");
    assert_eq!(rails[0].poll(RailId(0), &mut core, &mut out), 1);
    assert_eq!(shown(), (false, false), "read");
    idle(&mut rails, &mut core, &mut out, 3);
    let burst = super::POLL_BUDGET + 3;
    for seq in 1..=burst as u32 {
        send(&mut rails[0], seq);
    }
    assert_eq!(
        rails[0].poll(RailId(0), &mut core, &mut out),
        super::POLL_BUDGET
    );
    assert_eq!(shown(), (true, true), "the rest still shows");
    assert_eq!(rails[0].poll(RailId(0), &mut core, &mut out), 3);
    assert_eq!(shown(), (false, false));
    assert_eq!(
        core.stats()
            .unexpected
            .load(std::sync::atomic::Ordering::Relaxed) as usize,
        burst + 1,
        "every packet to self reached the core"
    );
}
