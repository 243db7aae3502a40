//! The engine's direct inline send ([`Driver::send_inline`]) between two
//! "ranks" of a made-up job inside one process: a ring that fills up turns
//! the rest into ordinary queued packets, and every message still arrives
//! once, in order.

use super::shm::{LocalJob, ShmRail};
use super::*;
use crate::config::{self, Fault};
use crate::matching::{Selector, Source, Tag};
use crate::proto::ids::{PeerId, ReqId};
use crate::proto::{CoreConfig, Event, SendArgs, Sent, Stats, Status};
use crate::usermem::UserBuf;
use std::sync::Arc;

/// One side: its driver (the own ring only) and its core, which knows the
/// other side as peer 0.
struct Side {
    driver: Driver,
    core: Core,
    out: Out,
}

fn side(jobid: u32, rank: usize, my_name: u64) -> (ShmRail, Core) {
    let s = config::validate(&config::test_params()).unwrap();
    let rail = ShmRail::open(
        LocalJob {
            jobid,
            rank,
            size: 2,
        },
        &s,
    )
    .unwrap();
    let cfg = CoreConfig {
        my_name,
        coalesce: true,
        fault: Fault::None,
        stripe_min: 0,
        send_queue_limit: s.send_queue_limit,
        send_queue_total: s.send_queue_total,
    };
    let core = Core::new(cfg, vec![rail.profile.clone()], Arc::new(Stats::default()));
    (rail, core)
}

/// The two sides of a job whose id `tag` tells apart from those of the
/// other tests running at the same time (each job has its own segment).
fn pair(tag: u32) -> (Side, Side) {
    let jobid = tag << 24 | std::process::id() & 0xff_ffff;
    let (mut ra, mut ca) = side(jobid, 0, 10);
    let (mut rb, mut cb) = side(jobid, 1, 11);
    let (na, nb) = (ra.name(), rb.name());
    let to_b = ra.insert(&nb, 11).unwrap();
    let to_a = rb.insert(&na, 10).unwrap();
    ca.add_peer(11, RailId(0), to_b, 8192);
    cb.add_peer(10, RailId(0), to_a, 8192);
    let mk = |rail, core| {
        let mut s = Side {
            driver: Driver::assemble(Vec::new(), Some(rail)).unwrap(),
            core,
            out: Out::new(),
        };
        s.driver.start(&mut s.core, &mut s.out).unwrap();
        s
    };
    (mk(ra, ca), mk(rb, cb))
}

/// Sends `payload` with tag `tag` from `a` the way the engine does: an
/// inline packet goes to the driver after the actions queued before it.
/// Returns the sends (by tag) that completed meanwhile.
fn send(a: &mut Side, payload: &mut [u8], tag: i32) -> Vec<usize> {
    // SAFETY: the payload lives to the end of the test, and the test
    // changes it only once its send has completed (copied into the ring
    // or a bounce buffer), after which the core no longer reads it.
    let buf = unsafe { UserBuf::new(payload.as_mut_ptr(), payload.len()) };
    let args = SendArgs {
        peer: PeerId(0),
        ctx: 1,
        src: 0,
        tag,
        buf,
        sync: false,
        req: ReqId(tag as usize),
    };
    let sent = a.core.send(args, &mut a.out).unwrap();
    a.driver.execute(&mut a.core, &mut a.out);
    let mut done = Vec::new();
    // Complete once the ring took it; a refused one completes through
    // the events when a rail takes its copy.
    if let Sent::Inline(p) = sent {
        if a.driver.send_inline(p, &mut a.core, &mut a.out) {
            done.push(tag as usize);
        }
    }
    done.extend(sends_done(a));
    done
}

/// Sends (by tag) reported complete since the last look; none may fail.
fn sends_done(a: &mut Side) -> Vec<usize> {
    let mut done = Vec::new();
    for e in a.out.events.drain(..) {
        match e {
            Event::Send { req, status } => {
                assert_eq!(status, Status::Ok);
                done.push(req.0);
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    done
}

/// A completed send's buffer is the caller's again: scribble over it, so
/// that a packet read from it after completion would arrive wrong.
fn reuse(payloads: &mut [Vec<u8>], done: Vec<usize>, sent: &mut usize) {
    for tag in done {
        payloads[tag].fill(0xee);
        *sent += 1;
    }
}

#[test]
fn inline_sends_into_a_full_ring_are_queued_and_all_arrive_in_order() {
    let (mut a, mut b) = pair(0xb1);
    // 4,000 bytes and a 48-byte header take 127 cells: the 8,192-cell
    // ring of a job of two holds 64 of them.
    const N: i32 = 100;
    let mut payloads: Vec<Vec<u8>> = (0..N).map(|i| vec![i as u8; 4000]).collect();
    let mut sent = 0;
    for i in 0..N as usize {
        let done = send(&mut a, &mut payloads[i], i as i32);
        reuse(&mut payloads, done, &mut sent);
    }
    // The first 64 went inline; the ring then refused one, which was
    // queued, and flow control holds the rest until room is made. Only
    // those the ring took are complete: the refused one waits for a rail
    // to take its copy.
    assert_eq!(sent, 64, "sends done at once");
    assert!(
        a.core.busy(),
        "the ring filled and the rest wait in the queue"
    );
    let mut got = Vec::new();
    let mut bufs: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; 4000]).collect();
    for (i, buf) in bufs.iter_mut().enumerate() {
        // SAFETY: each buffer outlives the core's use of it (the receive
        // completes within this test, and `bufs` lives to its end).
        let ub = unsafe { UserBuf::new(buf.as_mut_ptr(), buf.len()) };
        let sel = Selector {
            ctx: 1,
            src: Source::Rank(0),
            tag: Tag::Any,
        };
        let _ = b.core.recv(sel, None, ub, ReqId(1000 + i), &mut b.out);
    }
    for _ in 0..1000 {
        b.driver.poll(&mut b.core, &mut b.out);
        for e in b.out.events.drain(..) {
            if let Event::Recv { tag, status, .. } = e {
                assert_eq!(status, Status::Ok);
                got.push(tag);
            }
        }
        // The sender's progress retries what the ring refused.
        a.core.tick(&mut a.out);
        a.driver.execute(&mut a.core, &mut a.out);
        a.driver.poll(&mut a.core, &mut a.out);
        let done = sends_done(&mut a);
        reuse(&mut payloads, done, &mut sent);
        if got.len() == N as usize && sent == N as usize {
            break;
        }
    }
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "each once, in order");
    assert_eq!(sent, N as usize, "every send completed");
    for (i, buf) in bufs.iter().enumerate() {
        assert!(buf.iter().all(|&x| x == i as u8), "message {i} intact");
    }
    assert!(!a.core.busy(), "nothing left queued");
    assert_eq!(Stats::get(&b.core.stats().errors), 0);
}

#[test]
fn short_inline_sends_of_every_length_fill_the_ring_and_arrive_intact() {
    let (mut a, mut b) = pair(0xb2);
    // Payloads of 0 to 9 bytes, in the ring's short format: up to 8 a
    // packet takes one cell, written in place; 9 takes two. 9,000 of them
    // overfill the 8,192-cell ring.
    const N: usize = 9000;
    let body = |i: usize| -> Vec<u8> { (0..i % 10).map(|k| (i * 7 + k) as u8).collect() };
    let mut payloads: Vec<Vec<u8>> = (0..N).map(body).collect();
    let mut sent = 0;
    for i in 0..N {
        for tag in send(&mut a, &mut payloads[i], i as i32) {
            // The buffer is the caller's again: a late read would see this.
            payloads[tag].fill(0xee);
            sent += 1;
        }
    }
    assert!(sent < N, "the ring filled: {sent} sends done at once");
    let mut bufs: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; 16]).collect();
    for (i, buf) in bufs.iter_mut().enumerate() {
        // SAFETY: each buffer outlives the core's use of it (the receive
        // completes within this test, and `bufs` lives to its end).
        let ub = unsafe { UserBuf::new(buf.as_mut_ptr(), buf.len()) };
        let sel = Selector {
            ctx: 1,
            src: Source::Rank(0),
            tag: Tag::Any,
        };
        let _ = b.core.recv(sel, None, ub, ReqId(10_000 + i), &mut b.out);
    }
    let mut got = Vec::new();
    for _ in 0..1000 {
        b.driver.poll(&mut b.core, &mut b.out);
        for e in b.out.events.drain(..) {
            if let Event::Recv {
                tag, status, bytes, ..
            } = e
            {
                assert_eq!(status, Status::Ok);
                got.push((tag, bytes));
            }
        }
        a.core.tick(&mut a.out);
        a.driver.execute(&mut a.core, &mut a.out);
        a.driver.poll(&mut a.core, &mut a.out);
        sent += sends_done(&mut a).len();
        if got.len() == N && sent == N {
            break;
        }
    }
    let want: Vec<(i32, usize)> = (0..N).map(|i| (i as i32, i % 10)).collect();
    assert_eq!(got, want, "each once, in order, of its length");
    assert_eq!(sent, N, "every send completed");
    for (i, buf) in bufs.iter().enumerate() {
        assert_eq!(&buf[..i % 10], &body(i)[..], "message {i} intact");
    }
    assert!(!a.core.busy(), "nothing left queued");
    assert_eq!(Stats::get(&b.core.stats().errors), 0);
}

/// Payload lengths around the one-cell and short-copy edges
/// (0, 1..4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 56, 57 ...; 31 is the largest
/// payload of the ring's short format) sent the engine's direct way
/// into receives posted for exactly their source and tag (the eager path
/// without wildcards), some exact, some larger, some truncated, over enough
/// laps of the ring that one-cell packets land on its last cell and
/// two-cell ones meet its end.
#[test]
fn edge_lengths_arrive_whole_into_specific_receives() {
    let (mut a, mut b) = pair(0xb3);
    const LENS: [usize; 22] = [
        0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 24, 31, 32, 33, 55, 56, 57, 64, 100,
    ];
    const N: usize = 4600;
    let len_of = |i: usize| LENS[(i * 7 + i / LENS.len()) % LENS.len()];
    // Receive capacity: exact, larger, or one byte short.
    let cap_of = |i: usize| match i % 3 {
        0 => len_of(i),
        1 => len_of(i) + 5,
        _ => len_of(i).saturating_sub(1),
    };
    let body =
        |i: usize| -> Vec<u8> { (0..len_of(i)).map(|k| (i * 31 + k * 3 + 1) as u8).collect() };
    let mut bufs: Vec<Vec<u8>> = (0..N).map(|i| vec![0xcdu8; cap_of(i) + 8]).collect();
    let mut got = 0;
    let mut sent = 0;
    let mut payloads: Vec<Vec<u8>> = (0..N).map(body).collect();
    for i in 0..N {
        // SAFETY: `bufs` outlives the receive, and is only read after it.
        let ub = unsafe { UserBuf::new(bufs[i].as_mut_ptr(), cap_of(i)) };
        let sel = Selector {
            ctx: 1,
            src: Source::Rank(0),
            tag: Tag::Value(i as i32),
        };
        assert!(b
            .core
            .recv(sel, Some(PeerId(0)), ub, ReqId(100_000 + i), &mut b.out)
            .is_some());
        for tag in send(&mut a, &mut payloads[i], i as i32) {
            payloads[tag].fill(0xee);
            sent += 1;
        }
        // Let the ring fill now and then.
        if i % 4000 == 3999 || i + 1 == N {
            if i == 3999 {
                assert!(sent < i + 1, "the ring filled: {sent} of {}", i + 1);
            }
            for _ in 0..200 {
                b.driver.poll(&mut b.core, &mut b.out);
                for e in b.out.events.drain(..) {
                    if let Event::Recv {
                        req,
                        tag,
                        bytes,
                        status,
                        ..
                    } = e
                    {
                        let j = req.0 - 100_000;
                        assert_eq!(tag as usize, j);
                        assert_eq!(j, got, "in order");
                        let want = if cap_of(j) < len_of(j) {
                            Status::Truncated
                        } else {
                            Status::Ok
                        };
                        assert_eq!(status, want, "message {j} len {}", len_of(j));
                        assert_eq!(bytes, cap_of(j).min(len_of(j)), "message {j}");
                        let n = bytes;
                        assert_eq!(
                            &bufs[j][..n],
                            &body(j)[..n],
                            "message {j} intact (len {})",
                            len_of(j)
                        );
                        assert!(
                            bufs[j][n..].iter().all(|&x| x == 0xcd),
                            "message {j}: nothing past its bytes"
                        );
                        got += 1;
                    }
                }
                a.core.tick(&mut a.out);
                a.driver.execute(&mut a.core, &mut a.out);
                a.driver.poll(&mut a.core, &mut a.out);
                sent += sends_done(&mut a).len();
                if got == i + 1 && sent == i + 1 {
                    break;
                }
            }
        }
    }
    assert_eq!((got, sent), (N, N));
    assert!(!a.core.busy());
    assert_eq!(Stats::get(&b.core.stats().errors), 0);
}
