//! Two engines of a made-up job inside one process, on the own
//! shared-memory rail alone, driven through the entry points the shim
//! calls: the progress rounds that read only the rings must never leave
//! work behind, and must be the rounds an idle pair actually runs.

use super::*;
use crate::config;
use crate::driver::shm::LocalJob;
use crate::matching::{Source, Tag};
use crate::request::Request;
use std::mem::MaybeUninit;

/// Messages in the burst, and their size: far more than a ring holds
/// (8,192 cells of 32 bytes), so most of the burst waits in the sender's
/// core for the receiver to make room.
const MSGS: usize = 200;
const LEN: usize = 4096;

struct Rank {
    engine: Engine,
    /// The other rank's handle.
    peer: usize,
    /// Its own process name.
    name: u64,
}

impl Rank {
    /// Adds the rank as a peer of itself, as Open MPI adds every process
    /// of the job, this one included (its ring to itself then exists).
    /// Returns the handle.
    fn add_self(&self) -> usize {
        let mut out = Finished::new();
        let modex = self.engine.local_name().unwrap();
        let handle = self
            .engine
            .add_peer(self.name, &modex, true, &mut out)
            .unwrap();
        assert!(out.is_empty());
        handle
    }
}

fn pair() -> (Rank, Rank) {
    pair_in_job(0xe2)
}

/// A pair in a job of its own (`job` tells the segments of tests that
/// run at once apart).
fn pair_in_job(job: u32) -> (Rank, Rank) {
    let jobid = job << 24 | std::process::id() & 0xff_ffff;
    let open = |rank: usize| {
        let settings = config::validate(&config::test_params()).unwrap();
        let same = SameHost {
            local: Some(LocalJob {
                jobid,
                rank,
                size: 2,
            }),
            local_required: true,
            shm: None,
            shm_required: false,
        };
        let name = (jobid as u64) << 32 | rank as u64;
        (Engine::open(None, same, &[], settings, name).unwrap(), name)
    };
    let ((a, na), (b, nb)) = (open(0), open(1));
    let mut out = Finished::new();
    let to_b = a
        .add_peer(nb, &b.local_name().unwrap(), true, &mut out)
        .unwrap();
    let to_a = b
        .add_peer(na, &a.local_name().unwrap(), true, &mut out)
        .unwrap();
    assert!(out.is_empty());
    (
        Rank {
            engine: a,
            peer: to_b,
            name: na,
        },
        Rank {
            engine: b,
            peer: to_a,
            name: nb,
        },
    )
}

/// Request memory as the PML hands it over: uninitialised (the vector is
/// never resized, so the requests stay where they are).
fn requests(n: usize) -> Vec<MaybeUninit<Request>> {
    (0..n).map(|_| MaybeUninit::uninit()).collect()
}

fn req(r: &mut MaybeUninit<Request>) -> ReqPtr {
    ReqPtr(r.as_mut_ptr())
}

/// The index of a request in `reqs` from its completion.
fn index_of(reqs: &[MaybeUninit<Request>], done: crate::proto::ids::ReqId) -> usize {
    reqs.iter()
        .position(|r| r.as_ptr() as usize == done.0)
        .expect("a completion for a request of this test")
}

/// Posts receive `i` (from rank 0 in context 1, tag `i`) into `bufs[i]`.
///
/// # Safety
/// The buffers and requests must stay where they are, untouched, until
/// every receive has completed.
unsafe fn post_by_tag<B: AsMut<[u8]>>(
    e: &Engine,
    bufs: &mut [B],
    recvs: &mut [MaybeUninit<Request>],
    out: &mut Finished,
) {
    for (i, (buf, r)) in bufs.iter_mut().zip(recvs.iter_mut()).enumerate() {
        let buf = buf.as_mut();
        let sel = Selector {
            ctx: 1,
            src: Source::Rank(0),
            tag: Tag::Value(i as i32),
        };
        // SAFETY: per the function contract.
        unsafe {
            e.irecv(sel, None, buf.as_mut_ptr(), buf.len(), req(r), out)
                .unwrap();
        }
    }
}

#[test]
fn ring_only_rounds_leave_no_work_behind_and_run_when_idle() {
    let (a, b) = pair();
    let payloads: Vec<Vec<u8>> = (0..MSGS)
        .map(|i| (0..LEN).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    let mut sends = requests(MSGS);
    let mut recvs = requests(MSGS);
    let mut bufs = vec![vec![0u8; LEN]; MSGS];
    let mut sent = [false; MSGS];
    let mut got = vec![None; MSGS];
    let mut out = Finished::new();

    // The burst, with the receiver not polling: the ring fills and the
    // rest waits in the sender's core, which a ring-only round would not
    // send; so the sender must not be idle.
    for (i, p) in payloads.iter().enumerate() {
        // SAFETY: the payload and the request outlive the test's engines'
        // use of them (every send completes below, before they drop).
        let started = unsafe {
            a.engine
                .isend(
                    a.peer,
                    1,
                    0,
                    i as i32,
                    p.as_ptr(),
                    LEN,
                    false,
                    req(&mut sends[i]),
                    &mut out,
                )
                .unwrap()
        };
        // Complete at once, or later through exactly one completion.
        sent[i] = started == Started::Complete;
    }
    assert!(
        sent[0],
        "the first send found the ring empty, yet was not complete at once"
    );
    assert!(
        !a.engine.nothing_to_poll::<false>(),
        "packets wait in the sender's core for room, yet its polls would be skipped"
    );
    a.engine.progress(&mut out);
    assert!(
        !a.engine.nothing_to_poll::<false>(),
        "a progress round left the sender idle with packets still waiting"
    );

    // The receiver posts every receive, then both poll until all is in.
    // SAFETY: the buffers and requests are neither moved nor read until
    // the loop below has seen every receive complete.
    unsafe { post_by_tag(&b.engine, &mut bufs, &mut recvs, &mut out) };
    let mut rounds = 0u64;
    let mut a_out = Finished::new();
    while got.iter().any(Option::is_none) || sent.iter().any(|s| !s) {
        rounds += 1;
        assert!(
            rounds < 1_000_000,
            "stuck: {} of {MSGS} received, {} of {MSGS} sends complete",
            got.iter().filter(|g| g.is_some()).count(),
            sent.iter().filter(|s| **s).count()
        );
        // The way the shim polls: skipped when there is nothing to do.
        if !a.engine.nothing_to_poll::<false>() {
            a.engine.progress(&mut a_out);
        }
        a_out.deliver(|c| match c {
            Completion::Send { req, status } => {
                assert_eq!(status, Status::Ok);
                let i = index_of(&sends, req);
                assert!(!sent[i], "send {i} completed twice");
                sent[i] = true;
            }
            other => panic!("the sender got {other:?}"),
        });
        if !b.engine.nothing_to_poll::<false>() {
            b.engine.progress(&mut out);
        }
        out.deliver(|c| match c {
            Completion::Send { req, status } => {
                assert_eq!(status, Status::Ok);
                let i = index_of(&sends, req);
                assert!(!sent[i], "send {i} completed twice");
                sent[i] = true;
            }
            Completion::Recv {
                req,
                tag,
                bytes,
                status,
                ..
            } => {
                let i = index_of(&recvs, req);
                assert_eq!((tag, bytes, status), (i as i32, LEN, Status::Ok));
                assert!(got[i].is_none(), "receive {i} completed twice");
                got[i] = Some(rounds);
            }
            other => panic!("unexpected {other:?}"),
        });
    }
    for (i, (buf, p)) in bufs.iter().zip(&payloads).enumerate() {
        assert_eq!(buf, p, "payload of message {i}");
    }
    // Receives posted in order from one sender complete in order.
    assert!(got.windows(2).all(|w| w[0] <= w[1]));

    // Drained: a full round of each notes that they wait for nothing but
    // the rings, and from then on their polls are skipped (the rounds a
    // busy pair runs are the ones that read only the rings).
    for r in [&a, &b] {
        r.engine.progress(&mut out);
        assert!(out.is_empty());
        assert!(
            r.engine.nothing_to_poll::<false>(),
            "an idle rank still polls the whole way"
        );
    }
}

/// A send complete at once says whether anything waits in the sender's
/// queues (`Engine::tx_flushed`), and the shim's blocking send returns
/// without waiting only when nothing does: true while the ring takes the
/// sends, false from the first send the full ring refused (its copy
/// waits in the core, and neither it nor the sends behind it is complete
/// until a rail takes its packet: `proto::held`), true again once the
/// receiver has made room.
/// A send queued while another thread held the token goes before the
/// send of the thread that takes the token next: that thread applies the
/// queued send first (its packet becomes an action) and then writes its
/// own packet, after that action (the out-of-line way of
/// `execute_then_send`, not the common one with nothing queued). The
/// receiver gets both in order, and the queued send completes once,
/// through the list of the call that applied it.
#[test]
fn a_queued_send_goes_before_the_next_direct_one() {
    const SMALL: usize = 8;
    let (a, b) = pair_in_job(0xe4);
    let payloads = [[0x11u8; SMALL], [0x22u8; SMALL]];
    let mut sends = requests(2);
    let (first, second) = sends.split_at_mut(1);
    let mut out = Finished::new();
    let send = |i: usize, r: &mut MaybeUninit<Request>, out: &mut Finished| {
        // SAFETY: the payloads and the requests outlive the engines' use
        // of them (both sends complete before the test ends, checked
        // below).
        unsafe {
            a.engine
                .isend(
                    a.peer,
                    1,
                    0,
                    i as i32,
                    payloads[i].as_ptr(),
                    SMALL,
                    false,
                    req(r),
                    out,
                )
                .unwrap()
        }
    };
    // Another thread holds the token while this one sends: the send is
    // queued, not started.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let shared = Shared(&a.engine);
    std::thread::scope(|scope| {
        let holder = scope.spawn(move || {
            let e = shared.engine();
            e.handoff
                .with_token(|_, batch| {
                    assert!(batch.is_empty(), "nothing was queued yet");
                    held_tx.send(()).unwrap();
                    hold_rx.recv().unwrap();
                })
                .unwrap();
        });
        held_rx.recv().unwrap();
        assert_eq!(send(0, &mut first[0], &mut out), Started::Pending);
        hold_tx.send(()).unwrap();
        holder.join().unwrap();
    });
    assert!(
        !a.engine.handoff.inbox_is_empty(),
        "the first send was not queued"
    );
    // The next send takes the token and applies the queued one first.
    assert_eq!(send(1, &mut second[0], &mut out), Started::Complete);
    let mut completed = Vec::new();
    out.deliver(|c| match c {
        Completion::Send { req, status } => {
            assert_eq!(status, Status::Ok);
            completed.push(index_of(first, req));
        }
        other => panic!("the sender got {other:?}"),
    });
    assert_eq!(
        completed,
        [0],
        "the queued send completes once, through the list"
    );

    // Both receives posted for any tag: the order of arrival decides which
    // lands where.
    let mut bufs = [[0u8; SMALL]; 2];
    let mut recvs = requests(2);
    let mut got = Vec::new();
    for (buf, r) in bufs.iter_mut().zip(recvs.iter_mut()) {
        let sel = Selector {
            ctx: 1,
            src: Source::Rank(0),
            tag: Tag::Any,
        };
        // SAFETY: the buffers and requests stay where they are until both
        // receives have completed below.
        unsafe {
            b.engine
                .irecv(sel, None, buf.as_mut_ptr(), SMALL, req(r), &mut out)
                .unwrap()
        };
    }
    let mut rounds = 0;
    while got.len() < 2 {
        rounds += 1;
        assert!(rounds < 1_000_000, "stuck with {} of 2 received", got.len());
        b.engine.progress(&mut out);
        out.deliver(|c| match c {
            Completion::Recv {
                req,
                tag,
                bytes,
                status,
                ..
            } => {
                assert_eq!((bytes, status), (SMALL, Status::Ok));
                got.push((index_of(&recvs, req), tag));
            }
            other => panic!("the receiver got {other:?}"),
        });
    }
    assert_eq!(
        got,
        [(0, 0), (1, 1)],
        "the queued send arrived after the direct one"
    );
    assert_eq!(bufs, payloads);
}

/// An engine handed to another thread of the test.
struct Shared<'a>(&'a Engine);

// SAFETY: the shim shares one engine between the application's threads
// the same way (the component is reached through a global pointer): the
// progress token hands its state to one thread at a time, and the rest of
// the engine is atomics and state fixed at start.
unsafe impl Send for Shared<'_> {}

impl<'a> Shared<'a> {
    /// The engine, on the thread the whole wrapper was moved to (a
    /// closure that named only the field would capture the field alone).
    fn engine(self) -> &'a Engine {
        self.0
    }
}

#[test]
fn a_send_complete_at_once_says_whether_anything_waits() {
    const SMALL: usize = 8;
    const SENDS: usize = 10_000; // more than a ring of 8,192 cells holds
    let (a, b) = pair_in_job(0xe3);
    let payload = [0x5au8; SMALL];
    let mut sends = requests(SENDS + 1);
    let mut out = Finished::new();
    // Per send: complete at once, and whether nothing waited after it.
    let mut at_once = Vec::with_capacity(SENDS);
    for (i, r) in sends.iter_mut().take(SENDS).enumerate() {
        // SAFETY: the payload and the requests outlive the engines' use of
        // them (every send completes before the test ends, checked below).
        let started = unsafe {
            a.engine
                .isend(
                    a.peer,
                    1,
                    0,
                    i as i32,
                    payload.as_ptr(),
                    SMALL,
                    false,
                    req(r),
                    &mut out,
                )
                .unwrap()
        };
        at_once.push((started == Started::Complete, a.engine.tx_flushed()));
    }
    // Sends that did not complete at once but were copied meanwhile
    // complete through the list.
    let mut completed_later = 0;
    out.deliver(|c| match c {
        Completion::Send { status, .. } => {
            assert_eq!(status, Status::Ok);
            completed_later += 1;
        }
        other => panic!("the sender got {other:?}"),
    });
    let first_waiting = at_once
        .iter()
        .position(|&(_, flushed)| !flushed)
        .expect("the ring never filled, so no send waited");
    assert!(
        first_waiting > 1000,
        "the ring refused send {first_waiting}"
    );
    assert!(
        at_once[..first_waiting].iter().all(|&(done, _)| done),
        "a send the ring took was not complete at once"
    );
    // A refused send is copied, and complete only once a rail takes the
    // copy (`proto::held`); those behind it wait behind it. The receiver
    // has taken nothing yet, so none of them completed meanwhile either.
    assert!(
        at_once[first_waiting..].iter().all(|&(done, _)| !done),
        "a send the ring refused, or one behind it, was complete at once"
    );
    assert_eq!(
        completed_later, 0,
        "a send completed while its packet waited for room"
    );
    assert!(
        at_once[first_waiting..]
            .iter()
            .all(|&(_, flushed)| !flushed),
        "a send behind a waiting copy said nothing waits"
    );
    let mut pending = at_once.iter().filter(|&&(done, _)| !done).count() - completed_later;

    // The receiver takes every message; the sender's queue empties.
    let mut bufs = vec![[0u8; SMALL]; SENDS];
    let mut recvs = requests(SENDS);
    // SAFETY: the buffers and requests are neither moved nor read until
    // the loop below has seen every receive complete.
    unsafe { post_by_tag(&b.engine, &mut bufs, &mut recvs, &mut out) };
    let mut got = 0;
    let mut rounds = 0u64;
    let mut a_out = Finished::new();
    while got < SENDS || pending > 0 || !a.engine.tx_flushed() {
        rounds += 1;
        assert!(
            rounds < 1_000_000,
            "stuck: {got} of {SENDS} received, {pending} sends pending"
        );
        a.engine.progress(&mut a_out);
        a_out.deliver(|c| match c {
            Completion::Send { status, .. } => {
                assert_eq!(status, Status::Ok);
                pending -= 1;
            }
            other => panic!("the sender got {other:?}"),
        });
        b.engine.progress(&mut out);
        out.deliver(|c| match c {
            Completion::Recv {
                tag, bytes, status, ..
            } => {
                assert_eq!((tag, bytes, status), (got as i32, SMALL, Status::Ok));
                got += 1;
            }
            other => panic!("unexpected {other:?}"),
        });
    }
    assert!(bufs.iter().all(|b| *b == payload));
    // SAFETY: as above; the receiver never takes this one.
    let started = unsafe {
        a.engine
            .isend(
                a.peer,
                1,
                0,
                -1,
                payload.as_ptr(),
                SMALL,
                false,
                req(&mut sends[SENDS]),
                &mut out,
            )
            .unwrap()
    };
    assert_eq!(started, Started::Complete);
    assert!(
        a.engine.tx_flushed(),
        "a drained sender still says a send waits"
    );
}

/// The entry points as the shim calls them, each behind a call of its
/// own that `bench/engine-ir` counts (callgrind's `--toggle-collect`):
/// whatever the compiler inlines into them is counted, whichever build.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn counted_isend(
    e: &Engine,
    peer: usize,
    tag: i32,
    src: i32,
    buf: &[u8],
    req: ReqPtr,
    out: &mut Finished,
) -> Started {
    // SAFETY: forwarded from the caller.
    unsafe { e.isend(peer, 1, src, tag, buf.as_ptr(), buf.len(), false, req, out) }.unwrap()
}

/// See [`counted_isend`].
#[inline(never)]
unsafe fn counted_irecv(
    e: &Engine,
    sel: Selector,
    from: PeerId,
    buf: &mut [u8],
    req: ReqPtr,
    out: &mut Finished,
) {
    // SAFETY: forwarded from the caller.
    unsafe { e.irecv(sel, Some(from), buf.as_mut_ptr(), buf.len(), req, out) }.unwrap()
}

/// A poll as the shim makes it: the quick look, then the round. See
/// [`counted_isend`].
#[inline(never)]
fn counted_poll(e: &Engine, out: &mut Finished) {
    if !e.nothing_to_poll::<false>() {
        e.progress(out);
    }
}

/// Whether what the last holder noted for the quick look is true: "ring
/// only" may be said only while a round could do nothing but read rings
/// (`Core::waits_only_on`). A stale "not ring only" costs a full round;
/// a stale "ring only" would skip work. Also whether the core's actions
/// were all executed: a hold must not leave one for a later round.
fn idle_note_holds(e: &Engine) -> bool {
    let w = e.idle.as_ref().expect("an own rail, so an idle watch");
    e.handoff
        .with_token(|st, batch| {
            assert!(batch.is_empty(), "nothing was queued");
            assert!(st.out.actions.is_empty(), "an action left unexecuted");
            !w.ring_only.load(Ordering::Relaxed) || st.core.waits_only_on(w.rail)
        })
        .unwrap()
}

/// Round trips of `PINGPONG_LEN` bytes between two engines of this
/// process, each through `irecv`, `isend` and the polls the shim would
/// make, and nothing else: what `bench/engine-ir` runs under callgrind
/// (`RUSTOFI_PINGPONG` round trips) to price the engine's hot path alone,
/// without Open MPI, the shim or a second process's timing. With
/// `RUSTOFI_WINDOW` = W (default 1) each direction is a window of W
/// messages, as in OSU's bandwidth and message-rate tests: W receives
/// posted, W sends, then polls until all W are in. Every message is
/// checked, so the count it prices is of work that was done right.
#[test]
#[ignore = "a workload for bench/engine-ir, not a check of its own"]
fn pingpong_for_engine_ir() {
    const PINGPONG_LEN: usize = 8;
    let env = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let iters = env("RUSTOFI_PINGPONG", 1000);
    let window = env("RUSTOFI_WINDOW", 1).max(1);
    let (a, b) = pair();
    // As in a job: each process is its own peer too.
    a.add_self();
    b.add_self();
    let mut recv_reqs = requests(window);
    let mut send_reqs = requests(window);
    let mut out = Finished::new();
    let mut bufs = vec![[0u8; PINGPONG_LEN]; window];
    for i in 0..iters {
        for (dir, (from, to)) in [(&a, &b), (&b, &a)].into_iter().enumerate() {
            // One tag per direction, as the OSU tests send.
            let tag = dir as i32;
            let payloads: Vec<[u8; PINGPONG_LEN]> = (0..window)
                .map(|w| [(i * 7 + w * 3 + dir) as u8; PINGPONG_LEN])
                .collect();
            let sel = Selector {
                ctx: 1,
                src: Source::Rank(dir as i32),
                tag: Tag::Value(tag),
            };
            // SAFETY: the buffers and requests outlive every operation on
            // them: each window waits for all its receives below, and a
            // send of this size completes on return (asserted).
            unsafe {
                for (buf, r) in bufs.iter_mut().zip(recv_reqs.iter_mut()) {
                    let from = PeerId::from_handle(to.peer);
                    counted_irecv(&to.engine, sel, from, buf, req(r), &mut out);
                }
                for (p, r) in payloads.iter().zip(send_reqs.iter_mut()) {
                    let started = counted_isend(
                        &from.engine,
                        from.peer,
                        tag,
                        dir as i32,
                        p,
                        req(r),
                        &mut out,
                    );
                    assert_eq!(started, Started::Complete);
                }
            }
            let mut done = 0;
            while done < window {
                counted_poll(&to.engine, &mut out);
                out.deliver(|c| match c {
                    Completion::Recv {
                        req: r,
                        tag: t,
                        bytes,
                        status,
                        ..
                    } => {
                        assert_eq!((t, bytes, status), (tag, PINGPONG_LEN, Status::Ok));
                        // Receives of one sender and tag complete in order.
                        assert_eq!(r.0, recv_reqs[done].as_ptr() as usize);
                        done += 1;
                    }
                    other => panic!("unexpected {other:?}"),
                });
            }
            assert_eq!(bufs, payloads, "window {i}");
        }
    }
}

#[test]
fn a_panic_under_the_token_leaves_the_engine_failed_and_its_sends_refused() {
    let (a, b) = pair_in_job(0xe6);
    assert!(!a.engine.failed() && !b.engine.failed());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = a
            .engine
            .handoff
            .with_token(|_, _| panic!("a bug under the token"));
    }));
    assert!(r.is_err(), "the holder panicked");
    // What the shim's waits ask (rustofi_failed): only the broken engine.
    assert!(a.engine.failed());
    assert!(!b.engine.failed());
    // Its operations are refused from now on, not queued for a holder
    // that will never come.
    let mut reqs = requests(1);
    let mut out = Finished::new();
    // SAFETY: the buffer and the request outlive the call, which refuses
    // the send before it could keep either.
    let sent = unsafe {
        a.engine.isend(
            a.peer,
            1,
            0,
            5,
            [1u8; 8].as_ptr(),
            8,
            false,
            req(&mut reqs[0]),
            &mut out,
        )
    };
    assert!(sent.is_err(), "a send on a broken engine was taken");
    assert!(out.is_empty());
}

mod idle;
