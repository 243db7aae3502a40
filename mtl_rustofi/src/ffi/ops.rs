//! The MTL operations: peers, sends, receives, probes, cancels, progress,
//! and the memory-release callback of the registration cache.

use super::*;

/// Adds a peer from its modex data; `local` says it runs on this host.
/// Returns its handle (> 0) or 0 on error.
///
/// # Safety
/// `addr` must be readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rustofi_add_peer(
    name: u64,
    addr: *const u8,
    len: usize,
    local: bool,
) -> usize {
    let mut handle = 0usize;
    let r = with_engine("rustofi_add_peer", |e, out| {
        // SAFETY: the contract says `addr` is readable for `len` bytes; the
        // slice does not outlive this call (add_peer copies what it keeps).
        let bytes = unsafe { std::slice::from_raw_parts(addr, len) };
        match e.add_peer(name, bytes, local, out) {
            Ok(h) => {
                handle = h;
                0
            }
            Err(err) => {
                crate::log::error(&format!("cannot add peer 0x{name:x}: {}", err.0));
                ERR
            }
        }
    });
    if r == 0 {
        handle
    } else {
        0
    }
}

/// Drains the completion queue; returns the number of events handled,
/// never a negative value (the shim registers this function itself as
/// Open MPI's progress callback, whose answers `opal_progress` adds up): a
/// call before initialisation, or one that met an internal error, says
/// so and counts as 0.
#[no_mangle]
pub extern "C" fn rustofi_progress() -> c_int {
    let c = component();
    if let Some(c) = c {
        if c.engine.looks_on_schedule() {
            return progress_on_schedule(c);
        }
    }
    match c {
        // An empty poll (the common case of a waiting rank) returns after
        // a few loads, before the unwind guard and the token: nothing on
        // that path can panic. The rest is a call of its own, so that this
        // path saves no registers and sets up no frame for it.
        Some(c) if c.engine.nothing_to_poll::<false>() => 0,
        c => progress_round(c),
    }
}

/// `rustofi_progress` where the quick look keeps the rings' schedule
/// (many local ranks): a call of its own, so that the look for few ranks
/// keeps its small frame.
#[inline(never)]
fn progress_on_schedule(c: &'static Component) -> c_int {
    if c.engine.nothing_to_poll::<true>() {
        0
    } else {
        progress_round(Some(c))
    }
}

/// A poll that takes the token: `rustofi_progress` past its quick look.
#[inline(never)]
fn progress_round(c: Option<&'static Component>) -> c_int {
    const WHAT: &str = "rustofi_progress";
    match c {
        Some(c) => poll_component(c, WHAT, |e, out| e.progress(out) as c_int),
        None => {
            uninitialised(WHAT);
            0
        }
    }
}

/// 1 while operations wait in the component's own queues for the provider
/// to take them (credits exhausted, or the provider answered EAGAIN, as
/// rxm does while it connects to a new peer), else 0. A blocking send
/// returns only once this is 0: a copied send is complete once its own
/// packet has left the queue (`proto::held`), but other packets may still
/// wait there (an acknowledgement, a resend), and a caller that then waits
/// outside MPI progress (the PMIx fence of `MPI_Comm_disconnect`) would
/// leave them queued.
#[no_mangle]
pub extern "C" fn rustofi_tx_queued() -> c_int {
    // Two loads, nothing that can panic: no unwind guard needed on this
    // per-send path. 0 before initialisation.
    component().map_or(0, |c| {
        c.engine
            .stats()
            .tx_queued
            .load(std::sync::atomic::Ordering::Relaxed) as c_int
    })
}

/// 1 once an internal error (a panic, reported when it happened) has left
/// the component unusable, else 0: no completion and no drained queue is
/// coming then, so a caller that waits for one (the blocking send) stops
/// and returns an error instead of waiting for ever. 0 before
/// initialisation.
#[no_mangle]
pub extern "C" fn rustofi_failed() -> c_int {
    // One load, nothing that can panic: no unwind guard needed.
    component().is_some_and(|c| c.engine.failed()) as c_int
}

fn report<E: Into<crate::engine::EngineError>>(r: Result<(), E>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            crate::log::error(&e.into().0);
            ERR
        }
    }
}

/// The operation's bytes, as the shim wrote them into the request head.
///
/// # Safety
/// `req` must point at a valid request head.
unsafe fn head_bytes(req: *mut RustofiReqHead) -> (*mut c_void, usize) {
    // SAFETY: per the function contract; both are plain fields.
    unsafe { ((*req).buffer, (*req).length) }
}

/// What `rustofi_isend` returns for a send that is complete already.
pub const RUSTOFI_SEND_COMPLETE: c_int = 1;

/// What `rustofi_isend` returns for a send that is complete already while
/// nothing waits in the component's queues (`rustofi_tx_queued` would
/// answer 0): a blocking send may return at once.
pub const RUSTOFI_SEND_FLUSHED: c_int = 2;

/// Starts a send of the contiguous bytes the request's head names
/// (`buffer`, `length`: the user's buffer or the shim's packed copy).
/// `sync` requests MPI_Ssend semantics. Returns 0 when started (its
/// completion comes through the send callback), 1 when complete already
/// (`RUSTOFI_SEND_COMPLETE`: a small send copied into its rail; no
/// callback follows, the caller completes the request), 2 when complete
/// already and nothing waits in the component's queues
/// (`RUSTOFI_SEND_FLUSHED`: as 1, and the answer `rustofi_tx_queued`
/// would give at once is 0, so that a blocking send need not ask), or a
/// negative value on error. The buffer travels in the request so that the call's
/// six arguments all go in registers.
///
/// # Safety
/// `req` must point at a request of `sizeof(mca_mtl_request_t) +
/// rustofi_request_extra()` bytes whose head's `buffer` is readable for
/// `length` bytes (`buffer` may be NULL when `length` is 0), both until
/// the send completes.
#[no_mangle]
pub unsafe extern "C" fn rustofi_isend(
    peer: usize,
    ctx: u32,
    my_rank: i32,
    tag: i32,
    sync: bool,
    req: *mut RustofiReqHead,
) -> c_int {
    with_engine("rustofi_isend", |e, out| {
        // SAFETY: the contract says `req` points at a valid request head.
        let (buf, len) = unsafe { head_bytes(req) };
        // SAFETY: forwarded from this function's contract.
        let r = unsafe {
            e.isend(
                peer,
                ctx,
                my_rank,
                tag,
                buf as *const u8,
                len,
                sync,
                ReqPtr(req as *mut Request),
                out,
            )
        };
        match r {
            // The load `rustofi_tx_queued` makes, made here: the usual
            // blocking send then returns without another call.
            Ok(Started::Complete) if e.tx_flushed() => RUSTOFI_SEND_FLUSHED,
            Ok(Started::Complete) => RUSTOFI_SEND_COMPLETE,
            Ok(Started::Pending) => 0,
            Err(e) => report(Err(e)),
        }
    })
}

/// Posts a receive into the contiguous bytes the request's head names
/// (`buffer`, `length`: where the shim has put the user's buffer or its
/// bounce buffer). `peer` is the handle of a specific source (0 for any
/// source): a receive from a peer that is given up fails instead of
/// waiting. Returns 0 when posted, -1 (Open MPI's `OMPI_ERROR`) on error:
/// the shim returns this value as it is, by a tail call, where it has
/// nothing to release on failure; so the call has five arguments, all in
/// registers.
///
/// # Safety
/// `req` must point at a request of `sizeof(mca_mtl_request_t) +
/// rustofi_request_extra()` bytes whose head's `buffer` is writable for
/// `length` bytes (`buffer` may be NULL when `length` is 0), both until
/// the receive completes.
#[no_mangle]
pub unsafe extern "C" fn rustofi_irecv(
    ctx: u32,
    src: i32,
    peer: usize,
    tag: i32,
    req: *mut RustofiReqHead,
) -> c_int {
    with_engine("rustofi_irecv", |e, out| {
        // SAFETY: the contract says `req` points at a valid request head.
        let (buf, len) = unsafe { head_bytes(req) };
        // SAFETY: forwarded from this function's contract.
        report(unsafe {
            e.irecv(
                Selector::from_mpi(ctx, src, tag),
                source_peer(peer),
                buf as *mut u8,
                len,
                ReqPtr(req as *mut Request),
                out,
            )
        })
    })
}

/// The peer of a receive's or probe's source handle (0: any source).
fn source_peer(handle: usize) -> Option<PeerId> {
    (handle != 0).then(|| PeerId::from_handle(handle))
}

fn fill_status(st: *mut RustofiStatus, p: &ProbeInfo) {
    if !st.is_null() {
        // SAFETY: the shim passes a valid status pointer or NULL.
        unsafe {
            *st = RustofiStatus {
                source: p.src,
                tag: p.tag,
                count: p.len,
            }
        };
    }
}

/// Non-blocking probe. Sets `*flag` to 1 and fills `status` if a message
/// matches.
///
/// # Safety
/// `flag` must be valid; `status` valid or NULL.
#[no_mangle]
pub unsafe extern "C" fn rustofi_iprobe(
    ctx: u32,
    src: i32,
    peer: usize,
    tag: i32,
    flag: *mut c_int,
    status: *mut RustofiStatus,
) -> c_int {
    with_engine("rustofi_iprobe", |e, out| {
        match e.iprobe(Selector::from_mpi(ctx, src, tag), source_peer(peer), out) {
            Ok(found) => {
                // SAFETY: the contract says `flag` is a valid pointer.
                unsafe { *flag = found.is_some() as c_int };
                if let Some(p) = found {
                    fill_status(status, &p);
                }
                0
            }
            Err(err) => {
                crate::log::error(&err.0);
                ERR
            }
        }
    })
}

/// Matched probe: removes a matching message and returns it in `*msg`.
///
/// # Safety
/// `flag` and `msg` must be valid; `status` valid or NULL.
#[no_mangle]
pub unsafe extern "C" fn rustofi_improbe(
    ctx: u32,
    src: i32,
    peer: usize,
    tag: i32,
    flag: *mut c_int,
    status: *mut RustofiStatus,
    msg: *mut *mut c_void,
) -> c_int {
    with_engine("rustofi_improbe", |e, out| {
        match e.improbe(Selector::from_mpi(ctx, src, tag), source_peer(peer), out) {
            Ok(found) => {
                // SAFETY: the contract says `flag` and `msg` are valid.
                unsafe {
                    *flag = found.is_some() as c_int;
                    *msg = ptr::null_mut();
                }
                if let Some((p, h)) = found {
                    fill_status(status, &p);
                    // SAFETY: `msg` is valid, as above.
                    unsafe { *msg = h.0 };
                }
                0
            }
            Err(err) => {
                crate::log::error(&err.0);
                ERR
            }
        }
    })
}

/// Receives a message returned by `rustofi_improbe` into the bytes the
/// request's head names, as `rustofi_irecv` does.
///
/// # Safety
/// `msg` must come from `rustofi_improbe` and be used once; `req` as for
/// `rustofi_irecv`.
#[no_mangle]
pub unsafe extern "C" fn rustofi_imrecv(msg: *mut c_void, req: *mut RustofiReqHead) -> c_int {
    with_engine("rustofi_imrecv", |e, out| {
        // SAFETY: the contract says `req` points at a valid request head.
        let (buf, len) = unsafe { head_bytes(req) };
        // SAFETY: forwarded from this function's contract: `msg` came from
        // rustofi_improbe and is used once; `buf` and `req` as for irecv.
        report(unsafe {
            e.imrecv(
                MessageHandle(msg),
                buf as *mut u8,
                len,
                ReqPtr(req as *mut Request),
                out,
            )
        })
    })
}

/// Cancels a posted receive. Returns 1 if cancelled (the cancel callback
/// has run), 0 if it had already matched.
///
/// # Safety
/// `req` must be a receive request started by `rustofi_irecv`.
#[no_mangle]
pub unsafe extern "C" fn rustofi_cancel(req: *mut RustofiReqHead) -> c_int {
    with_engine("rustofi_cancel", |e, out| {
        match e.cancel(ReqPtr(req as *mut Request), out) {
            Ok(c) => c as c_int,
            Err(err) => {
                crate::log::error(&err.0);
                ERR
            }
        }
    })
}

/// Open MPI's memory hooks report that `[addr, addr + len)` goes back to
/// the system. Runs inside munmap/free in any thread, possibly while
/// another thread is inside the engine: it only pushes on a lock-free ring
/// (no allocation, no lock).
#[no_mangle]
pub extern "C" fn rustofi_mem_release(addr: *mut c_void, len: usize) {
    // Nothing here can panic (the ring indexes modulo its size); the
    // guard is there so that nothing ever unwinds into munmap.
    let _ = catch_unwind(|| {
        if let Some(r) = RELEASES.get() {
            r.push(addr as usize, len);
        }
    });
}
