//! What the token holder does: apply commands to the core, let the driver
//! execute the resulting actions, and drive progress.

use super::{Clock, Completion, MessageHandle, State, Status, CLOCK_EVERY};
use crate::inbox::Batch;
use crate::matching::Selector;
use crate::proto::ids::PeerId;
use crate::proto::{InlineSend, SendArgs, Sent, Stats};
use crate::request::{Cmd, Op, ReqPtr};
use crate::usermem::UserBuf;
use std::sync::atomic::Ordering;

/// The progress round of a holder that found `ring_only` set (the last
/// token holder left the core waiting for nothing but packets of the own
/// rail) and whose engine clock (`Clock`) is not due: it reads the rings
/// alone, and ticks if they held packets and left the core work for a tick; the
/// tick and every other rail would find nothing. Every holder keeps that
/// flag true to the core's state as it leaves (see [`super::IdleWatch`]),
/// so under the token it is exact, not a hint. Returns the packets read
/// and whether the core's tick has nothing left to do (`quiet`, for
/// [`super::IdleWatch::note_ring_round`]). A round that read nothing
/// touched neither the core nor the driver: it changes nothing the last
/// holder noted.
#[inline(always)]
pub(super) fn ring_round(st: &mut State) -> (usize, bool) {
    let n = st.driver.poll_local(&mut st.core, &mut st.out);
    if n == 0 {
        return (0, true);
    }
    // The driver executed the packets' actions (`poll_local`): only a
    // tick can add more.
    let mut quiet = st.core.tick_is_empty();
    if !quiet {
        tick_and_execute(st);
        quiet = st.core.tick_is_empty();
    }
    (n, quiet)
}

/// Counts a round; whether it is one in `CLOCK_EVERY`, when the clock of
/// liveness, stall reports and repairs is read. A countdown, so that a
/// round not due costs a decrement and a test.
#[inline(always)]
pub(super) fn clock_due(clock: &mut Clock) -> bool {
    clock.left -= 1;
    if clock.left != 0 {
        return false;
    }
    clock.left = CLOCK_EVERY;
    true
}

#[inline(always)]
fn tick_and_execute(st: &mut State) {
    st.core.tick(&mut st.out);
    if !st.out.actions.is_empty() {
        st.driver.execute(&mut st.core, &mut st.out);
    }
}

/// One whole round of progress: a tick, the completion queues of every
/// rail, and a tick again when something completed (credits freed, queued
/// operations can go); `read_clock`: the engine clock (`Clock`) is due
/// (or a poll forced after skipped ones stands in for them). Out of line, also
/// for the profiles, which tell the forced full rounds by its name.
#[inline(never)]
pub(super) fn full_round(st: &mut State, read_clock: bool) -> usize {
    tick_and_execute(st);
    let n = st.driver.poll(&mut st.core, &mut st.out);
    // After the poll: what arrived counts before peers are judged.
    if read_clock {
        let now = st.clock.start.elapsed();
        if st.clock.stall_reports {
            if let Some(report) = st.core.tick_stall(now) {
                crate::log::line(&format!("{} mtl_rustofi: {report}", crate::log::prefix()));
            }
        }
        st.core.tick_liveness(now, &mut st.out);
        st.core.tick_repair(now, &mut st.out);
        if !st.out.actions.is_empty() {
            st.driver.execute(&mut st.core, &mut st.out);
        }
    }
    if n > 0 {
        tick_and_execute(st);
    }
    n
}

#[inline(always)]
pub(super) fn apply_all(st: &mut State, batch: Batch<Cmd>) {
    let mut any = false;
    for cmd in batch {
        apply(st, cmd);
        any = true;
    }
    if any {
        st.driver.execute(&mut st.core, &mut st.out);
    }
}

/// Applies one command (token held).
pub(super) fn apply(st: &mut State, cmd: *mut Cmd) {
    // SAFETY: a command taken from the inbox is valid until we set its
    // `done` flag or complete its request; we copy the op first.
    let op = unsafe { (*cmd).op };
    let core = &mut st.core;
    match op {
        Op::Send { .. } | Op::Recv { .. } | Op::Mrecv { .. } => {
            // Executed with the rest of the batch's actions.
            if let Some(p) = apply_op(st, op) {
                p.queue(&mut st.out);
            }
        }
        Op::Cancel { req } => {
            // SAFETY: the request was started by this engine (the shim
            // cancels only its own requests); token held.
            let id = unsafe { req.post_id() };
            let cancelled = id.is_some_and(|id| core.cancel(id, &mut st.out));
            // SAFETY: the waiting caller reads the result after `done`.
            unsafe {
                (*cmd).cancelled = cancelled;
                (*cmd).done.store(true, Ordering::Release);
            }
        }
        Op::Probe { sel, from, remove } => {
            let out = &mut st.out;
            let found = if remove {
                core.mprobe(&sel, from, out)
                    .map(|f| f.map(|(info, id)| (info, Some(MessageHandle::from_id(id)))))
            } else {
                core.probe(&sel, from, out)
                    .map(|f| f.map(|info| (info, None)))
            };
            // SAFETY: the waiting caller reads the result after `done`.
            unsafe {
                match found {
                    Ok(found) => (*cmd).found = found,
                    Err(e) => (*cmd).failed = Some(e.0),
                }
                (*cmd).done.store(true, Ordering::Release);
            }
        }
    }
}

/// Applies a send or a receive that came through the inbox (token held).
/// A small eager send that the driver copies at post comes back as its
/// packet ([`InlineSend`]), for the caller to execute after the actions
/// already queued.
#[inline(always)]
#[must_use = "an inline packet must be executed and its send completed"]
pub(super) fn apply_op(st: &mut State, op: Op) -> Option<InlineSend> {
    match op {
        Op::Send { args, req } => {
            // SAFETY: a queued command's request is live until it completes.
            return unsafe { apply_send(st, args, req) };
        }
        Op::Recv {
            sel,
            from,
            buf,
            req,
        } => {
            // SAFETY: as for a send.
            let _ = unsafe { apply_recv(st, sel, from, buf, req) };
        }
        Op::Mrecv { msg, buf, req } => {
            // SAFETY: as for a send.
            unsafe { apply_mrecv(st, msg, buf, req) }
        }
        Op::Cancel { .. } | Op::Probe { .. } => {
            unreachable!("cancels and probes wait for their command")
        }
    }
    None
}

/// Applies a send (token held), whether it came through the inbox or
/// straight from its caller; a small eager one comes back as its packet,
/// as in [`apply_op`]. A send the core refuses completes as failed.
///
/// # Safety
/// `req` is the live request `args.req` names, and stays so until the
/// send completes.
#[inline(always)]
#[must_use = "an inline packet must be executed and its send completed"]
pub(super) unsafe fn apply_send(st: &mut State, args: SendArgs, req: ReqPtr) -> Option<InlineSend> {
    let (core, out) = (&mut st.core, &mut st.out);
    // SAFETY: the request is live (the contract) and the token is held;
    // MPI_Cancel may ask about any request.
    unsafe { req.set_post_id(None) };
    // `Core::send` in its two halves, so that the common packet is not
    // merged with `send_or_defer`'s answer in memory.
    if let Some(p) = core.send_at_once(&args, out) {
        return Some(p);
    }
    match core.send_or_defer(args, out) {
        Ok(Sent::Inline(p)) => return Some(p),
        Ok(Sent::Out) => {}
        Err(e) => {
            crate::log::error(&e.0);
            Stats::add(&core.stats().errors, 1);
            out.events.push(Completion::Send {
                req: args.req,
                status: Status::Failed,
            });
        }
    }
    None
}

/// An inline packet that actions queued before it must precede (commands
/// applied from the inbox, a bundle flushed by the send): those first,
/// then the packet, as [`Engine::start`]'s common path sends it. Out of
/// line, so that the common path, with nothing queued, keeps the packet's
/// fields in registers rather than on the stack across this call.
///
/// [`Engine::start`]: super::Engine
/// Returns whether the driver took the packet (see `Driver::send_inline`).
#[cold]
#[inline(never)]
pub(super) fn execute_then_send(st: &mut State, p: InlineSend) -> bool {
    st.driver.execute(&mut st.core, &mut st.out);
    // Taken or not, the idle note follows (the actions before it).
    st.driver.send_inline(p, &mut st.core, &mut st.out)
}

/// Posts a receive (token held), from the inbox or straight from its
/// caller. Returns whether it was queued and nothing else happened
/// (then the idle note need not be made: see `Engine::start`).
///
/// # Safety
/// `req` is live and stays so until the receive completes.
#[inline(always)]
pub(super) unsafe fn apply_recv(
    st: &mut State,
    sel: Selector,
    from: Option<PeerId>,
    buf: UserBuf,
    req: ReqPtr,
) -> bool {
    let id = st.core.recv(sel, from, buf, req.id(), &mut st.out);
    // SAFETY: the request is live (the contract) and the token is held.
    // Written either way: a request applied directly was never
    // initialised, and a stale ticket must not reach cancel.
    unsafe { req.set_post_id(id) };
    // A ticket means queued (no unexpected match); a receive from a lost
    // peer is failed at once (an event), a flushed bundle is an action.
    id.is_some() && st.out.events.is_empty() && st.out.actions.is_empty()
}

/// Receives a message taken by a matched probe (token held).
///
/// # Safety
/// As for [`apply_recv`].
#[inline(always)]
pub(super) unsafe fn apply_mrecv(st: &mut State, msg: MessageHandle, buf: UserBuf, req: ReqPtr) {
    let (core, out) = (&mut st.core, &mut st.out);
    // SAFETY: as for a send.
    unsafe { req.set_post_id(None) };
    let r = match msg.id() {
        Some(id) => core.mrecv(id, buf, req.id(), out),
        None => Err(crate::proto::CoreError("a null message handle".into())),
    };
    if let Err(e) = r {
        crate::log::error(&e.0);
        Stats::add(&core.stats().errors, 1);
        out.events.push(Completion::Recv {
            req: req.id(),
            src: -1,
            tag: -1,
            bytes: 0,
            status: Status::Failed,
        });
    }
}
