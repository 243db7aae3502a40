//! The rail between two "ranks" of a made-up job inside one process:
//! back-pressure, a dead reader, bad ring contents (an earlier lap's user
//! bytes among them), short packets out of order, a bad read key and reads
//! made together.

use super::reads::Read;
use super::ring::{Cells, Consumer, CELL, LINE, WORD};
use super::*;
use crate::config::{self, Fault};
use crate::proto::ids::ReqId;
use crate::proto::{CoreConfig, Event, Stats, Status};
use crate::usermem::UserBuf;
use std::sync::Arc;

fn settings() -> Settings {
    config::validate(&config::test_params()).unwrap()
}

/// The process names of the two sides of [`pair`].
pub(super) const PROC_A: u64 = 7;
const PROC_B: u64 = 8;

/// Ranks 0 and 1 of a job of two, each having inserted the other.
pub(super) fn pair(tag: u32) -> (ShmRail, ShmRail) {
    let jobid = tag << 24 | std::process::id() & 0xff_ffff;
    let s = settings();
    let mut a = ShmRail::open(
        LocalJob {
            jobid,
            rank: 0,
            size: 2,
        },
        &s,
    )
    .unwrap();
    let mut b = ShmRail::open(
        LocalJob {
            jobid,
            rank: 1,
            size: 2,
        },
        &s,
    )
    .unwrap();
    let (na, nb) = (a.name(), b.name());
    assert_eq!(a.insert(&nb, PROC_B).unwrap(), FiAddr(1));
    assert_eq!(b.insert(&na, PROC_A).unwrap(), FiAddr(0));
    (a, b)
}

pub(super) fn region(b: &[u8]) -> Region {
    Region {
        addr: b.as_ptr() as usize,
        len: b.len(),
    }
}

/// A core with this rail's profile, knowing process `peer` on it.
pub(super) fn core(rail: &ShmRail, peer: u64) -> Core {
    let s = settings();
    let cfg = CoreConfig {
        my_name: 1,
        coalesce: true,
        fault: Fault::None,
        stripe_min: 0,
        send_queue_limit: s.send_queue_limit,
        send_queue_total: s.send_queue_total,
    };
    let mut c = Core::new(cfg, vec![rail.profile.clone()], Arc::new(Stats::default()));
    c.add_peer(peer, RailId(0), FiAddr(0), 8192);
    c
}

#[test]
fn a_full_ring_pushes_back_and_loses_nothing() {
    let (mut a, mut b) = pair(0xa1);
    let pkt: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    let mut sent = 0usize;
    loop {
        match a.send(FiAddr(1), region(&pkt), None) {
            Ok(()) => sent += 1,
            Err(PostError::Again) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    // 1000 bytes take 32 cells: 256 packets fill the 8,192 cells of a
    // pair's ring.
    assert_eq!(sent, 256);
    let rx = b.inbound.consumer(0);
    let mut got = 0;
    while rx.pop(|p| assert_eq!(p, &pkt[..])).unwrap() {
        got += 1;
    }
    assert_eq!(got, sent, "every packet that was taken arrives");
    a.send(FiAddr(1), region(&pkt), None).unwrap();
}

#[test]
fn a_dead_reader_fails_the_send_instead_of_blocking_it_forever() {
    let (mut a, _b) = pair(0xa2);
    // A process that has exited stands for the reader.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    a.peers[1].as_mut().unwrap().pid = dead;
    let pkt = [7u8; 1000];
    let mut again = 0u32;
    let err = loop {
        match a.send(FiAddr(1), region(&pkt), None) {
            Ok(()) => {}
            Err(PostError::Again) => again += 1,
            Err(e) => break e,
        }
        assert!(again < 100_000, "never noticed the reader is gone");
    };
    assert_eq!(err, PostError::Hard(-libc::EPIPE));
    assert!(again >= 1, "back-pressure first");
    // Once found gone, the reader fails every later packet at once
    // (an inline one refused for it is sent again as an ordinary one).
    assert_eq!(
        a.send(FiAddr(1), region(&pkt), None),
        Err(PostError::Hard(-libc::EPIPE))
    );
}

#[test]
fn a_pid_of_another_pid_namespace_is_neither_asked_about_nor_read_from() {
    let jobid = 0xa8 << 24 | std::process::id() & 0xff_ffff;
    // The message rendezvous: a peer that cross-memory attach does not
    // reach is served (with the read rendezvous it is refused, below).
    let mut s = settings();
    s.rndv = config::RndvProtocol::Msg;
    let open = |rank| {
        ShmRail::open(
            LocalJob {
                jobid,
                rank,
                size: 2,
            },
            &s,
        )
        .unwrap()
    };
    let (mut a, b) = (open(0), open(1));
    // Rank 1 as published from a PID namespace of its own: its pid names
    // no process here (one that has exited stands for it).
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let elsewhere = child.id();
    child.wait().unwrap();
    let mut addr = Addr::decode(&b.name()).unwrap();
    addr.pid = elsewhere;
    addr.pid_ns ^= 1;
    // With reads asked for by name, a peer this rank cannot read is an
    // error; otherwise it is served, and its reads are declined.
    a.read_forced = true;
    let e = a.insert(&addr.encode(), PROC_B).unwrap_err();
    assert!(
        e.contains("cross-memory attach to local rank 1 fails"),
        "{e}"
    );
    a.read_forced = false;
    a.insert(&addr.encode(), PROC_B).unwrap();
    let p = a.peers[1].as_ref().unwrap();
    assert!(!p.pid_here);
    assert!(!p.readable, "the probe word is not found at that pid");
    assert!(!a.reads_from(FiAddr(1)), "its read rendezvous are declined");
    assert_eq!(a.reader_pid(FiAddr(1), elsewhere as u64), None);
    // A full ring is back-pressure for as long as it lasts: the busy
    // reader is not taken for dead on the word of this process table.
    let pkt = [7u8; 1000];
    let mut again = 0u32;
    while again < 3 * 4096 {
        match a.send(FiAddr(1), region(&pkt), None) {
            Ok(()) => {}
            Err(PostError::Again) => again += 1,
            Err(e) => panic!("a busy peer of another namespace failed: {e:?}"),
        }
    }
    // The same peer published from this namespace is checked, and read.
    let (mut c, d) = pair(0xaa);
    let q = c.peers[1].as_ref().unwrap();
    assert!(q.pid_here && q.readable);
    assert!(c.reads_from(FiAddr(1)));
    let pid = Addr::decode(&d.name()).unwrap().pid;
    assert_eq!(c.reader_pid(FiAddr(1), pid as u64), Some(pid));
    c.peers[1].as_mut().unwrap().readable = false;
    assert_eq!(c.reader_pid(FiAddr(1), pid as u64), None);
}

#[test]
fn an_impossible_length_in_the_ring_is_refused_with_a_message() {
    let (mut a, mut b) = pair(0xa3);
    let mut c = core(&b, PROC_A);
    let mut out = Out::new();
    // A header word at the reader's position claiming 1 GiB.
    a.seg
        .ring(0, 1)
        .word(0)
        .store(1 << 30, std::sync::atomic::Ordering::Release);
    assert_eq!(b.poll(RailId(0), &mut c, &mut out), 1);
    assert_eq!(Stats::get(&c.stats().errors), 1, "refused and counted");
    // Nothing more is read from that ring, whatever follows, and it no
    // longer looks ready to the polls that take no token.
    let pkt = [1u8; 100];
    a.send(FiAddr(1), region(&pkt), None).unwrap();
    assert_eq!(b.poll(RailId(0), &mut c, &mut out), 0);
    assert!(
        !b.watch().any_ready::<false>(),
        "the refused ring looks ready"
    );
    // The writer's sends end once it looks for room, instead of waiting
    // for a reader that will never make any; and every later one fails.
    let err = loop {
        match a.send(FiAddr(1), region(&pkt), None) {
            Ok(()) => {}
            Err(e) => break e,
        }
    };
    assert_eq!(err, PostError::Hard(-libc::EPROTO));
    assert_eq!(
        a.send(FiAddr(1), region(&[2u8; 8]), None),
        Err(PostError::Hard(-libc::EPROTO))
    );
}

#[test]
fn a_read_position_no_reader_publishes_fails_the_send_and_overwrites_nothing() {
    let (mut a, mut b) = pair(0xab);
    let mut c = core(&b, PROC_A);
    let mut out = Out::new();
    // Fill the ring, then make its read position claim more was read
    // than was ever written.
    let mut sent = 0;
    let err = loop {
        match a.send(FiAddr(1), region(&short_packet(sent, 5, &[3u8; 8])), None) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
    };
    let pkt = short_packet(sent, 5, &[3u8; 8]);
    assert_eq!(err, PostError::Again, "full first");
    a.seg
        .ring(0, 1)
        .tail()
        .store(u64::MAX / 2, std::sync::atomic::Ordering::Release);
    assert_eq!(
        a.send(FiAddr(1), region(&pkt), None),
        Err(PostError::Hard(-libc::EPROTO)),
        "refused, not written over unread packets"
    );
    assert_eq!(
        a.send(FiAddr(1), region(&pkt), None),
        Err(PostError::Hard(-libc::EPROTO)),
        "and every later send too"
    );
    // Every packet written is still there to read (as unexpected
    // messages: the core has no receive posted).
    let mut read = 0;
    loop {
        let n = b.poll(RailId(0), &mut c, &mut out);
        if n == 0 {
            break;
        }
        read += n;
    }
    assert_eq!(read, sent as usize);
    assert_eq!(
        Stats::get(&c.stats().errors),
        0,
        "all well formed and in order"
    );
}

/// A short packet (the ring's format for small eager messages) of
/// message `seq` with tag `tag` and `payload`, as `send` takes it.
pub(super) fn short_packet(seq: u32, tag: i32, payload: &[u8]) -> Vec<u8> {
    let head = crate::wire::EagerHead {
        ctx: 1,
        src: 0,
        tag,
        seq,
        sender: PROC_A,
    };
    short::packet(&head, payload)
}

/// Receives posted on `c` for tags `0..n` from rank 0, into `bufs`.
fn post(c: &mut Core, bufs: &mut [[u8; 8]], out: &mut Out) {
    for (i, b) in bufs.iter_mut().enumerate() {
        // SAFETY: the buffers outlive the core's use of them (the receives
        // complete within the test that owns them).
        let ub = unsafe { UserBuf::new(b.as_mut_ptr(), b.len()) };
        let sel = crate::matching::Selector::from_mpi(1, 0, i as i32);
        assert!(c.recv(sel, None, ub, ReqId(i), out).is_some());
    }
}

/// The receives (tag, bytes) completed in `out`, in order; none failed.
fn received(out: &mut Out) -> Vec<(i32, usize)> {
    out.events
        .drain(..)
        .map(|e| match e {
            Event::Recv {
                tag, bytes, status, ..
            } => {
                assert_eq!(status, Status::Ok);
                (tag, bytes)
            }
            other => panic!("unexpected event {other:?}"),
        })
        .collect()
}

#[test]
fn a_packet_too_short_for_any_format_is_refused_and_the_ring_read_on() {
    let (mut a, mut b) = pair(0xac);
    let mut c = core(&b, PROC_A);
    let mut out = Out::new();
    let mut bufs = [[0u8; 8]; 1];
    post(&mut c, &mut bufs, &mut out);
    a.send(FiAddr(1), region(&[5u8; short::HEAD - 1]), None)
        .unwrap();
    a.send(FiAddr(1), region(&short_packet(0, 0, b"abc")), None)
        .unwrap();
    assert_eq!(b.poll(RailId(0), &mut c, &mut out), 2);
    assert_eq!(Stats::get(&c.stats().errors), 1, "refused and counted");
    assert_eq!(received(&mut out), [(0, 3)], "the next packet is read");
    assert_eq!(&bufs[0][..3], b"abc");
}

#[test]
fn short_messages_out_of_order_wait_for_their_predecessors() {
    let (mut a, mut b) = pair(0xa9);
    let mut c = core(&b, PROC_A);
    let mut out = Out::new();
    let mut bufs = [[0u8; 8]; 3];
    post(&mut c, &mut bufs, &mut out);
    for (seq, tag) in [(2, 2), (1, 1)] {
        let payload = [tag as u8; 8];
        a.send(FiAddr(1), region(&short_packet(seq, tag, &payload)), None)
            .unwrap();
    }
    assert_eq!(b.poll(RailId(0), &mut c, &mut out), 2);
    assert!(received(&mut out).is_empty(), "held until message 0 comes");
    a.send(FiAddr(1), region(&short_packet(0, 0, &[0; 5])), None)
        .unwrap();
    assert_eq!(b.poll(RailId(0), &mut c, &mut out), 1);
    assert_eq!(received(&mut out), [(0, 5), (1, 8), (2, 8)]);
    assert_eq!(bufs[1], [1; 8]);
    assert_eq!(bufs[2], [2; 8]);
    assert_eq!(Stats::get(&c.stats().errors), 0);
}

/// The next packet of `c`, if one is there.
fn pop<C: ring::Cells>(c: &mut ring::Consumer<C>) -> Option<Vec<u8>> {
    let mut got = None;
    c.pop(|b| got = Some(b.to_vec())).unwrap();
    got
}

/// User bytes at the start of a packet's second cell that equal the
/// header word the consumer will expect at that cell a lap later are
/// never taken for a packet: the consumer zeroes the words of a
/// packet's cells once done with it. (On the component's own memory,
/// where a packet's bytes run over the words of its later cells, which
/// the test ring on the heap keeps apart.)
#[test]
fn user_bytes_of_an_earlier_lap_never_pass_for_a_header() {
    #[repr(C, align(64))]
    struct Lines([u8; LINE + 4 * CELL]);
    let mut mem = Box::new(Lines([0; LINE + 4 * CELL]));
    let base = mem.0.as_mut_ptr();
    // SAFETY: a tail line and four cells of zeroed, line-aligned
    // memory that outlives both ends, reached only through them.
    let raw = || unsafe { Raw::new(base, base.add(LINE), 4) };
    let (mut p, mut c) = (Producer::new(raw()), Consumer::new(raw()));
    // The header word of a packet of 10 bytes at position 5: cell 1 in
    // the second lap.
    let forged = (5u64 << 32 | 10).to_le_bytes();
    let mut a = vec![0xabu8; 2 * CELL - WORD - 6];
    a[CELL - WORD..CELL].copy_from_slice(&forged);
    p.push(&[&a]).unwrap();
    assert_eq!(pop(&mut c), Some(a));
    for v in [2u8, 3, 4] {
        p.push(&[&[v; 3]]).unwrap();
        assert_eq!(pop(&mut c), Some(vec![v; 3]));
    }
    // The consumer is at position 5, cell 1, and nothing is there.
    assert_eq!(c.pop(|_| panic!("an earlier lap's bytes")), Ok(false));
    p.push(&[&[5; 10]]).unwrap();
    assert_eq!(pop(&mut c), Some(vec![5; 10]));
}

#[test]
fn a_read_key_that_is_not_the_peers_pid_reads_nothing() {
    let (mut a, b) = pair(0xa4);
    let src = [9u8; 64];
    let mut dst = [0u8; 64];
    let local = Region {
        addr: dst.as_mut_ptr() as usize,
        len: dst.len(),
    };
    let key = b.key();
    assert_eq!(
        a.read(FiAddr(1), local, src.as_ptr() as u64, key + 1),
        Err(PostError::Hard(-libc::EINVAL))
    );
    assert_eq!(dst, [0u8; 64]);
    // With the right key (the peer is this very process) it reads.
    a.read(FiAddr(1), local, src.as_ptr() as u64, key).unwrap();
    assert_eq!(dst, src);
}

#[test]
fn a_read_this_rank_cannot_make_fails_and_says_why_once() {
    // A rank where cross-memory attach is not permitted (its rail moves
    // large messages by data packets) but whose peer's rail reads: the
    // peer's read rendezvous reach it all the same.
    let (mut a, b) = pair(0xae);
    a.cma_ok = false;
    a.peers[1].as_mut().unwrap().readable = false;
    let src = [9u8; 64];
    let mut dst = [0u8; 64];
    let local = Region {
        addr: dst.as_mut_ptr() as usize,
        len: dst.len(),
    };
    for _ in 0..3 {
        assert_eq!(
            a.read(FiAddr(1), local, src.as_ptr() as u64, b.key()),
            Err(PostError::Hard(-libc::EINVAL))
        );
    }
    assert_eq!(dst, [0u8; 64], "nothing read");
    assert!(
        a.peers[1].as_ref().unwrap().read_refusal_said,
        "the reason was given (once: the flag stops the rest)"
    );
}

#[test]
fn reads_made_together_report_each_outcome_in_order() {
    let (mut a, b) = pair(0xa6);
    let key = b.key();
    let src: Vec<Vec<u8>> = (0..6u8)
        .map(|i| vec![i + 1; 3000 * (i as usize + 1)])
        .collect();
    let mut dst: Vec<Vec<u8>> = src.iter().map(|s| vec![0u8; s.len()]).collect();
    let mut reads: Vec<Read> = dst
        .iter_mut()
        .zip(&src)
        .map(|(d, s)| Read {
            src: FiAddr(1),
            local: Region {
                addr: d.as_mut_ptr() as usize,
                len: d.len(),
            },
            remote_addr: s.as_ptr() as u64,
            key,
        })
        .collect();
    // The second has a key that is not its peer's pid, the last an address
    // its peer does not map: each fails alone, with its own error. The four
    // after the bad key go in one system call, which stops at the last.
    reads[1].key = key + 1;
    reads[5].remote_addr = 8;
    let mut got = Vec::new();
    a.read_batch(&reads, |i, r| got.push((i, r)));
    let want: Vec<(usize, Result<(), PostError>)> = (0..6)
        .map(|i| match i {
            1 => (i, Err(PostError::Hard(-libc::EINVAL))),
            5 => (i, Err(PostError::Hard(-libc::EFAULT))),
            _ => (i, Ok(())),
        })
        .collect();
    assert_eq!(got, want);
    for i in [0, 2, 3, 4] {
        assert_eq!(dst[i], src[i], "read {i}");
    }
    assert!(dst[1].iter().chain(&dst[5]).all(|&b| b == 0));
}

#[test]
fn only_a_pair_that_talks_a_lot_takes_whole_rings() {
    let (mut a, _b) = pair(0xa7);
    let pkt = [5u8; 40];
    // A few packets touch the first page of the ring alone.
    for _ in 0..8 {
        a.send(FiAddr(1), region(&pkt), None).unwrap();
    }
    assert!(a.seg.resident_pages(0, 1).0 <= 1);
    assert_eq!(a.seg.resident_pages(1, 0).0, 0);
    // A page of cells later, both rings are mapped in whole (where the
    // kernel has MADV_POPULATE_WRITE, as every test machine does).
    for _ in 8..=PRIME_AFTER {
        a.send(FiAddr(1), region(&pkt), None).unwrap();
    }
    for (from, to) in [(0, 1), (1, 0)] {
        let (resident, whole) = a.seg.resident_pages(from, to);
        assert!(whole >= 31);
        assert_eq!(resident, whole, "ring {from} -> {to}");
    }
}

#[test]
fn an_address_of_another_job_or_host_is_not_served() {
    let (mut a, b) = pair(0xa5);
    let (_c, d) = pair(0xad);
    assert!(!a.reaches(&d.name()));
    assert!(a.insert(&d.name(), PROC_B).is_err());
    // The same job's rank on another host that shares /dev/shm (a
    // container or network namespace) is in another segment.
    let mut elsewhere = Addr::decode(&b.name()).unwrap();
    elsewhere.host ^= 1;
    assert!(a.reaches(&b.name()));
    assert!(!a.reaches(&elsewhere.encode()));
    // A rank of this job and host that mapped another object of the
    // segment's name (removed and made again between two ranks' opens,
    // or in a /dev/shm of its own) writes rings this one never reads: not
    // a peer either, whether the inode or the device differs.
    let same = Addr::decode(&b.name()).unwrap();
    assert_eq!(same.seg, Addr::decode(&a.name()).unwrap().seg);
    for (dev, ino) in [(0, 1), (1, 0)] {
        let mut split = same;
        split.seg.dev ^= dev;
        split.seg.ino ^= ino;
        assert!(!a.reaches(&split.encode()));
        assert!(a.insert(&split.encode(), PROC_B).is_err());
        assert!(a.in_other_segment(&split.encode()));
    }
    // Another job's rank, or one of another host, is not "in another
    // segment of this job" (its own message says so).
    assert!(!a.in_other_segment(&d.name()));
    assert!(!a.in_other_segment(&elsewhere.encode()));
    assert!(!a.in_other_segment(&b.name()));
}

/// A rank that opens the rail on a leftover object of its job's name (an
/// earlier job with the same id, which died before every rank attached)
/// empties the rings it will read before its address goes out: the
/// earlier job's packets to it are gone.
#[test]
fn a_rank_opening_on_a_leftover_empties_its_rings() {
    let jobid = 0xb4 << 24 | std::process::id() & 0xff_ffff;
    let old = Segment::attach(jobid, segment::host_id(), 2).unwrap();
    let mut p = ring::Producer::new(old.ring(0, 1));
    p.push(&[b"a packet of the earlier job"]).unwrap();
    assert_ne!(
        old.ring(0, 1)
            .word(0)
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    let b = ShmRail::open(
        LocalJob {
            jobid,
            rank: 1,
            size: 2,
        },
        &settings(),
    )
    .unwrap();
    assert_eq!(b.seg.id(), old.id(), "opened on the leftover");
    assert_eq!(
        old.ring(0, 1)
            .word(0)
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert!(!Consumer::new(old.ring(0, 1)).pop(|_| {}).unwrap());
}
