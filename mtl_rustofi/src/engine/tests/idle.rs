//! The idle note through posts, matches and sends to self: what the
//! quick look of a poll may skip stays true, and nothing waits for a
//! forced poll.

use super::*;

/// Through receive posts that only queue (which skip the idle note,
/// `Engine::start`), posts that match an unexpected message (eager, or a
/// rendezvous whose read then starts) and the polls between, what the
/// idle note says stays true and no action is left behind; an idle
/// receiver's polls can still be skipped after a post that only queued;
/// and everything completes within a few polls, far fewer than the 64
/// skipped ones after which a poll goes the whole way regardless (a post
/// that wrongly left work behind a "ring only" note would wait for that).
#[test]
fn the_idle_note_stays_true_through_posts_that_queue_and_posts_that_match() {
    const SMALL: usize = 8;
    const LARGE: usize = 256 << 10; // a rendezvous on the own rail
    let (a, b) = pair_in_job(0xe5);
    let small: Vec<u8> = (0..SMALL as u8).collect();
    let large: Vec<u8> = (0..LARGE).map(|i| (i * 7 % 251) as u8).collect();
    let mut sends = requests(3);
    let mut recvs = requests(3);
    let mut bufs = [vec![0u8; SMALL], vec![0u8; SMALL], vec![0u8; LARGE]];
    let (mut a_out, mut out) = (Finished::new(), Finished::new());
    let (mut sent, mut got) = ([false; 3], [false; 3]);
    b.engine.progress(&mut out);
    assert!(idle_note_holds(&b.engine));
    assert!(
        b.engine.nothing_to_poll::<false>(),
        "an idle receiver's polls are not skipped"
    );
    let sel = |tag: i32| Selector {
        ctx: 1,
        src: Source::Rank(0),
        tag: Tag::Value(tag),
    };
    // SAFETY: the buffers, payloads and requests stay where they are,
    // untouched, until every send and receive has completed (the loop
    // below waits for all six).
    unsafe {
        let mut send = |i: usize, p: &[u8]| {
            let started = a
                .engine
                .isend(
                    a.peer,
                    1,
                    0,
                    i as i32,
                    p.as_ptr(),
                    p.len(),
                    false,
                    req(&mut sends[i]),
                    &mut a_out,
                )
                .unwrap();
            sent[i] = started == Started::Complete;
        };
        // Tag 0: posted before its message, so only queued.
        let (buf, r) = (&mut bufs[0], &mut recvs[0]);
        b.engine
            .irecv(sel(0), None, buf.as_mut_ptr(), SMALL, req(r), &mut out)
            .unwrap();
        assert!(idle_note_holds(&b.engine));
        assert!(
            b.engine.nothing_to_poll::<false>(),
            "a receive only queued made an idle receiver poll"
        );
        // Tags 1 (eager) and 2 (rendezvous) arrive before their receives.
        send(1, &small);
        send(2, &large);
        while b.engine.stats().unexpected_now.now.load(Ordering::Relaxed) < 2 {
            b.engine.progress(&mut out);
            assert!(idle_note_holds(&b.engine));
        }
        for i in [1usize, 2] {
            let (buf, r) = (&mut bufs[i], &mut recvs[i]);
            b.engine
                .irecv(
                    sel(i as i32),
                    None,
                    buf.as_mut_ptr(),
                    buf.len(),
                    req(r),
                    &mut out,
                )
                .unwrap();
            assert!(idle_note_holds(&b.engine), "after the post of tag {i}");
        }
        send(0, &small);
    }
    let mut rounds = 0;
    while got.iter().chain(&sent).any(|d| !d) {
        rounds += 1;
        assert!(
            rounds < 16,
            "not done in 15 rounds: received {got:?}, sent {sent:?}"
        );
        // Both poll as the shim does: skipped when there is nothing to do.
        for (e, list) in [(&a.engine, &mut a_out), (&b.engine, &mut out)] {
            if !e.nothing_to_poll::<false>() {
                e.progress(list);
            }
            assert!(idle_note_holds(e));
            list.deliver(|c| match c {
                Completion::Recv { req, status, .. } => {
                    assert_eq!(status, Status::Ok);
                    got[index_of(&recvs, req)] = true;
                }
                Completion::Send { req, status } => {
                    assert_eq!(status, Status::Ok);
                    sent[index_of(&sends, req)] = true;
                }
                other => panic!("unexpected {other:?}"),
            });
        }
    }
    assert_eq!((&bufs[0][..], &bufs[1][..]), (&small[..], &small[..]));
    assert!(bufs[2] == large, "the rendezvous's bytes differ");
}

/// A small send to self, which its ring takes and which leaves the idle
/// note as it was (`Engine::start`), is seen by the very next quick look
/// (the flag the send set stands for the ring to itself, which no look
/// reads) and read by that poll's round.
#[test]
fn a_send_to_self_is_found_by_the_next_poll() {
    let (a, _b) = pair_in_job(0xe8);
    let me = a.add_self();
    let mut out = Finished::new();
    a.engine.progress(&mut out);
    assert!(idle_note_holds(&a.engine));
    assert!(a.engine.nothing_to_poll::<false>(), "idle before the send");
    let payload: [u8; 8] = *b"to self!";
    let mut buf = [0u8; 8];
    let (mut sends, mut recvs) = (requests(1), requests(1));
    let sel = Selector {
        ctx: 1,
        src: Source::Rank(0),
        tag: Tag::Value(9),
    };
    // SAFETY: the buffers and requests stay where they are, untouched,
    // until both operations have completed (asserted below).
    unsafe {
        let from = Some(PeerId::from_handle(me));
        a.engine
            .irecv(sel, from, buf.as_mut_ptr(), 8, req(&mut recvs[0]), &mut out)
            .unwrap();
        assert!(
            a.engine.nothing_to_poll::<false>(),
            "a receive only queued leaves the look idle"
        );
        let started = a
            .engine
            .isend(
                me,
                1,
                0,
                9,
                payload.as_ptr(),
                8,
                false,
                req(&mut sends[0]),
                &mut out,
            )
            .unwrap();
        assert_eq!(started, Started::Complete, "the ring to itself took it");
    }
    assert!(out.is_empty(), "nothing read yet");
    assert!(idle_note_holds(&a.engine));
    assert!(
        !a.engine.nothing_to_poll::<false>(),
        "the look sees the send to self"
    );
    assert_eq!(a.engine.progress(&mut out), 1, "the next round reads it");
    let mut done = Vec::new();
    out.deliver(|c| done.push(c));
    assert!(
        matches!(
            done[..],
            [Completion::Recv {
                src: 0,
                tag: 9,
                bytes: 8,
                status: Status::Ok,
                ..
            }]
        ),
        "the receive completed"
    );
    assert_eq!(buf, payload);
    assert!(a.engine.nothing_to_poll::<false>(), "idle again");
}
