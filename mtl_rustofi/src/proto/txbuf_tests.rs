//! Unit tests of a packet moved off a bounce buffer whose registration
//! failed (FI_MR_LOCAL rails): it waits for a pooled buffer while
//! something in flight may bring one back, and no longer than
//! [`BUFFER_WAIT`] passes, since what is in flight may never complete.

use super::action::{Action, Event, Out, PostError, Posted, Status};
use super::ids::{OpId, PeerId};
use super::test_core::send;
use super::txbuf::MrUse;
use super::txq::{Op, BUFFER_WAIT, REBUFFERS, RESENDS};
use super::Core;

/// A core over an FI_MR_LOCAL network rail with peers A and B.
fn core() -> (Core, PeerId, PeerId) {
    crate::log::QUIET.with(|q| q.set(true));
    let (mut c, peers) = super::test_core::net_core("verbs;ofi_rxm", &[2, 3]);
    c.rails[0].profile.mr_local = true;
    (c, peers[0], peers[1])
}

/// Plays the driver over `out`'s actions: registrations succeed if
/// `reg_ok`, a send naming a failed registration fails its post (an
/// injected one names none), and the other sends are taken (returned,
/// with the registrations asked for).
fn drive(c: &mut Core, out: &mut Out, reg_ok: bool) -> (Vec<OpId>, usize) {
    let mut taken = Vec::new();
    let mut registrations = 0;
    for a in std::mem::take(&mut out.actions) {
        match a {
            Action::Register { mr, .. } => {
                registrations += 1;
                c.on_registered(mr, if reg_ok { Ok(1) } else { Err(-12) }, out);
            }
            Action::Send { op, mr, inject, .. } => {
                if !inject && mr.is_some_and(|m| c.mrs.get(m) == Some(&MrUse::Failed)) {
                    c.on_post_failed(Posted::Op(op), PostError::Hard(-22), out);
                } else {
                    taken.push(op);
                }
            }
            _ => {}
        }
    }
    (taken, registrations)
}

/// Whether `out` reports send `req` complete.
fn completed(out: &Out, req: usize) -> bool {
    out.events
        .iter()
        .any(|e| matches!(e, Event::Send { req: r, status: Status::Ok } if r.0 == req))
}

/// A small packet to A stays in flight for good (rxm reports nothing for
/// a send to a process that exited), so no full-size buffer comes back:
/// the large packet to B whose registration failed, and the send queued
/// behind it, wait [`BUFFER_WAIT`] passes, then a new buffer is
/// registered and both go. B is not taken for unreachable meanwhile.
#[test]
fn a_waiting_packet_gets_a_new_buffer_after_the_bound() {
    let (mut c, a, b) = core();
    let (mut d1, mut d2, mut d3) = ([1u8; 100], [2u8; 1000], [3u8; 50]);
    let mut out = Out::new();
    send(&mut c, a, &mut d1, 1, &mut out);
    assert_eq!(drive(&mut c, &mut out, true).0.len(), 1, "A's packet goes");
    send(&mut c, b, &mut d2, 2, &mut out);
    assert!(
        drive(&mut c, &mut out, false).0.is_empty(),
        "registration failed"
    );
    send(&mut c, b, &mut d3, 3, &mut out);
    assert!(drive(&mut c, &mut out, true).0.is_empty(), "queued behind");
    for pass in 0..BUFFER_WAIT {
        c.tick(&mut out);
        let (taken, regs) = drive(&mut c, &mut out, true);
        assert_eq!((taken.len(), regs), (0, 0), "pass {pass}: it waits");
    }
    assert!(
        !c.waited_peers()[b.index()],
        "a failed registration is no evidence against B"
    );
    let report = c.stall_report(std::time::Duration::from_secs(10));
    assert!(
        report.contains(
            "2 queued (1 waiting for a registered bounce buffer: registrations have failed), 0 rx"
        ),
        "the stall report names the wait: {report}"
    );
    c.tick(&mut out);
    let (taken, regs) = drive(&mut c, &mut out, true);
    let report = c.stall_report(std::time::Duration::from_secs(10));
    assert!(!report.contains("bounce buffer"), "no wait left: {report}");
    // One registration: the 50-byte packet's buffer was registered as it
    // was made.
    assert_eq!(
        (taken.len(), regs),
        (2, 1),
        "a new buffer registered, both go"
    );
    assert!(completed(&out, 2) && completed(&out, 3));
}

/// The same packet takes a full-size buffer as soon as one comes back to
/// the pool, with no new registration.
#[test]
fn a_waiting_packet_takes_a_buffer_that_comes_back() {
    let (mut c, a, b) = core();
    let (mut d1, mut d2) = ([1u8; 1000], [2u8; 1000]);
    let mut out = Out::new();
    send(&mut c, a, &mut d1, 1, &mut out);
    let (first, _) = drive(&mut c, &mut out, true);
    send(&mut c, b, &mut d2, 2, &mut out);
    assert!(drive(&mut c, &mut out, false).0.is_empty());
    for _ in 0..3 {
        c.tick(&mut out);
        assert_eq!(drive(&mut c, &mut out, true), (vec![], 0), "it waits");
    }
    c.on_complete(first[0], &mut out);
    c.tick(&mut out);
    let (taken, regs) = drive(&mut c, &mut out, true);
    assert_eq!((taken.len(), regs), (1, 0), "A's buffer, no registration");
    assert!(completed(&out, 2));
    assert_eq!(c.leftovers().retry, 0);
}

/// An injected packet names no registration (`fi_inject` takes no
/// descriptor), so its buffer's failed registration does not stop it, and
/// a refusal of it is the provider's: a resend used, not a move, and
/// evidence against its peer.
#[test]
fn an_injected_packets_failures_are_the_providers() {
    let (mut c, _, b) = core();
    c.rails[0].profile.inject_size = 256;
    let mut d = [1u8; 100];
    let mut out = Out::new();
    send(&mut c, b, &mut d, 1, &mut out);
    let (taken, regs) = drive(&mut c, &mut out, false);
    assert_eq!((taken.len(), regs), (1, 1), "injected, registration failed");
    let op = taken[0];
    c.on_post_failed(Posted::Op(op), PostError::Hard(-5), &mut out);
    let Some(Op::Packet(p)) = c.ops.get(op) else {
        panic!("the packet is resent")
    };
    assert_eq!(
        (p.resends_left, p.rebuffers_left, p.awaits_buffer),
        (RESENDS - 1, REBUFFERS, None)
    );
    assert!(
        c.waited_peers()[b.index()],
        "the provider's refusal is evidence"
    );
}

/// A registration released while its `Register` action is still queued
/// (a hard failure later in the same pass loses the peer whose transfer
/// asked for it) keeps its id until the driver reports it: a registration
/// asked for meanwhile gets another id, the stale report goes to no one,
/// and the driver sees `Register`, `Deregister`, then the new `Register`.
/// With the id given out again at once, the new registration took the old
/// one's report (here a failure, which marked the new bounce buffer
/// failed; for a rendezvous, the old key).
#[test]
fn a_registration_released_before_its_report_keeps_its_id_until_then() {
    use super::action::Access;
    use super::ids::RailId;
    use crate::usermem::Region;
    let (mut c, _, _) = core();
    let rail = RailId(0);
    let region = |addr| Region { addr, len: 4096 };
    let mut out = Out::new();
    let old = c.register(rail, region(0x10000), Access::Send, MrUse::TxBuf, &mut out);
    c.deregister(old, &mut out);
    let new = c.register(rail, region(0x20000), Access::Send, MrUse::TxBuf, &mut out);
    assert_ne!(
        new, old,
        "an unreported registration's id was given out again"
    );
    let order: Vec<String> = out
        .actions
        .iter()
        .map(|a| match a {
            Action::Register { mr, .. } => format!("reg {}", mr.0),
            Action::Deregister { mr } => format!("dereg {}", mr.0),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        order,
        [
            format!("reg {}", old.0),
            format!("dereg {}", old.0),
            format!("reg {}", new.0)
        ]
    );
    // The driver runs them in order: the old registration failed.
    for a in std::mem::take(&mut out.actions) {
        if let Action::Register { mr, .. } = a {
            let r = if mr == old { Err(-12) } else { Ok(7) };
            c.on_registered(mr, r, &mut out);
        }
    }
    assert_eq!(c.mrs.get(old), None, "the stale report freed the old id");
    assert_eq!(
        c.mrs.get(new),
        Some(&MrUse::TxBuf),
        "the new registration took the old one's failure"
    );
    assert!(
        out.actions.is_empty(),
        "nothing more to do: {:?}",
        out.actions
    );
    // Once reported, a released id is free at once.
    c.deregister(new, &mut out);
    let again = c.register(rail, region(0x30000), Access::Send, MrUse::TxBuf, &mut out);
    assert!(
        again == new || again == old,
        "a reported, released id is reused"
    );
}
