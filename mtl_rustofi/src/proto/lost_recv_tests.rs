//! Receives posted for exactly one source whose peer is lost: those
//! posted before fail when it is given up, those posted after fail at
//! once, and receives for other peers or any source are untouched; a
//! posted receive makes its peer one the liveness probes watch.

use super::ids::{PeerId, ReqId};
use super::{Action, Core, Event, Out, Stats, Status};
use crate::matching::{PostId, Selector, ANY};
use crate::usermem::UserBuf;
use std::time::Duration;

/// A core with three peers; peer `i` is rank `i` in the selectors below.
fn core() -> (Core, [PeerId; 3]) {
    let (c, peers) = super::test_core::net_core("tcp;ofi_rxm", &[10, 11, 12]);
    let peers: [PeerId; 3] = peers.try_into().unwrap();
    assert_eq!(peers.map(|p| p.index()), [0, 1, 2]);
    (c, peers)
}

/// Posts request `req` for `(src, tag)` (raw MPI values, -1 a wildcard)
/// from `from`; the ticket and what the core reported at once.
fn post(
    c: &mut Core,
    src: i32,
    tag: i32,
    from: Option<PeerId>,
    req: usize,
) -> (Option<PostId>, Vec<Event>) {
    // Nothing is ever written: no message matches these receives.
    let buf = UserBuf::empty();
    let mut out = Out::new();
    let id = c.recv(
        Selector::from_mpi(0, src, tag),
        from,
        buf,
        ReqId(req),
        &mut out,
    );
    (id, out.events)
}

fn unreachable(req: usize, src: i32, tag: i32) -> Event {
    Event::Recv {
        req: ReqId(req),
        src,
        tag,
        bytes: 0,
        status: Status::Unreachable,
    }
}

fn posted_now(c: &Core) -> u64 {
    Stats::get(&c.stats().posted_now.now)
}

#[test]
fn receives_for_a_lost_peer_fail_and_no_others() {
    crate::log::QUIET.with(|q| q.set(true));
    let (mut c, [_, p1, p2]) = core();
    let (a, _) = post(&mut c, 1, 5, Some(p1), 1);
    let (b, _) = post(&mut c, 2, 5, Some(p2), 2);
    let (any_tag, _) = post(&mut c, 1, ANY, Some(p1), 3);
    let (any_src, _) = post(&mut c, ANY, 5, None, 4);
    let (a2, _) = post(&mut c, 1, 5, Some(p1), 5);
    let (other_tag, _) = post(&mut c, 1, 6, Some(p1), 6);
    assert!([a, b, any_tag, any_src, a2, other_tag]
        .iter()
        .all(Option::is_some));
    assert_eq!(posted_now(&c), 6);

    let mut out = Out::new();
    c.peer_gone(p1, "test", &mut out);
    // In posting order, each with its selector's source and tag.
    assert_eq!(
        out.events,
        [
            unreachable(1, 1, 5),
            unreachable(3, 1, ANY),
            unreachable(5, 1, 5),
            unreachable(6, 1, 6)
        ]
    );
    assert_eq!((c.leftovers().posted, posted_now(&c)), (2, 2));

    // Cancelling a failed receive finds nothing and reports nothing.
    for id in [a, any_tag, a2, other_tag] {
        let mut out = Out::new();
        assert!(!c.cancel(id.unwrap(), &mut out));
        assert!(out.events.is_empty());
    }
    assert_eq!(posted_now(&c), 2);

    // Posted after the loss: fails at once (its ticket cancels nothing).
    let (late, events) = post(&mut c, 1, 7, Some(p1), 7);
    assert_eq!(events, [unreachable(7, 1, 7)]);
    let (late_any_tag, events) = post(&mut c, 1, ANY, Some(p1), 8);
    assert_eq!(events, [unreachable(8, 1, ANY)]);
    for id in [late, late_any_tag] {
        assert!(!c.cancel(id.unwrap(), &mut Out::new()));
    }
    assert_eq!((c.leftovers().posted, posted_now(&c)), (2, 2));

    // The living peer's receive and the any-source one still wait; a
    // second loss report fails nothing more.
    let (late_any_src, events) = post(&mut c, ANY, 9, None, 9);
    assert!(events.is_empty());
    let mut out = Out::new();
    c.peer_gone(p1, "test again", &mut out);
    assert!(out.events.is_empty());
    for (id, req) in [(b, 2), (any_src, 4), (late_any_src, 9)] {
        let mut out = Out::new();
        assert!(c.cancel(id.unwrap(), &mut out));
        assert_eq!(out.events, [Event::Cancelled { req: ReqId(req) }]);
    }
    assert_eq!((c.leftovers().posted, posted_now(&c)), (0, 0));
}

#[test]
fn a_receive_posted_for_a_peer_has_it_watched() {
    crate::log::QUIET.with(|q| q.set(true));
    let (mut c, [p0, p1, p2]) = core();
    c.set_peer_timeout(Some(Duration::from_secs(4)));
    for (p, pid) in [(p0, 100), (p1, 101), (p2, 102)] {
        c.set_peer_pid(p, pid);
    }
    let (_, _) = post(&mut c, 1, 5, Some(p1), 1);
    let (_, _) = post(&mut c, ANY, ANY, None, 2);
    let (gone, _) = post(&mut c, 2, 5, Some(p2), 3);
    assert!(c.cancel(gone.unwrap(), &mut Out::new()));
    // The first round starts the clocks; a probe interval (1 s) later the
    // peers that something waits on are checked.
    let checked = |c: &mut Core, secs| {
        let mut out = Out::new();
        c.tick_liveness(Duration::from_secs(secs), &mut out);
        out.actions
            .iter()
            .filter_map(|a| match a {
                Action::CheckAlive { peer, .. } => Some(*peer),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(checked(&mut c, 1), []);
    assert_eq!(checked(&mut c, 2), [p1]);
    // Nothing waits on a peer whose receives are gone.
    let mut out = Out::new();
    c.peer_gone(p1, "test", &mut out);
    assert_eq!(out.events, [unreachable(1, 1, 5)]);
    let (_, _) = post(&mut c, 0, ANY, Some(p0), 4);
    assert_eq!(checked(&mut c, 3), [p0]);
}
