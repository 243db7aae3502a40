//! The C boundary: every function the shim calls, each behind a panic
//! guard. This is the only module that converts between C and Rust values.
//!
//! Return convention: 0 for success, a negative value for an error (the
//! shim maps it to an Open MPI error code; the message has already been
//! printed). `rustofi_isend` also returns 1 and 2: complete already (and
//! nothing queued). `rustofi_progress` returns the events it handled and
//! is never negative: Open MPI calls it as its progress callback.

mod fi_env;
mod init;
mod layout;
mod ops;
mod site;

pub use init::*;
pub use layout::*;
pub use ops::*;
pub use site::*;

use crate::config::{self, RawParams};
use crate::engine::{Completion, Engine, Finished, MessageHandle, ProbeInfo, Started, Status};
use crate::fabric::{Hints, InfoList};
use crate::log::Topic;
use crate::matching::Selector;
use crate::memrelease::ReleaseRing;
use crate::params;
use crate::proto::ids::PeerId;
use crate::request::{MtlRequest, ReqPtr, Request, RustofiReqHead, REQUEST_EXTRA};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

/// MCA parameter values and process identity, filled by the shim.
#[repr(C)]
pub struct RustofiConfig {
    pub provider_include: *const c_char,
    pub include_set: bool,
    pub provider_exclude: *const c_char,
    pub exclude_set: bool,
    pub eager_limit: i64,
    pub rndv_protocol: *const c_char,
    pub rndv_chunk_size: i64,
    pub rx_buffers: i64,
    pub verbose: i64,
    pub fault_inject: *const c_char,
    /// Same-host peers over the shm provider: auto, on or off.
    pub shm: *const c_char,
    /// Coalesce back-to-back small sends to a peer (1) or not (0).
    pub coalesce: i64,
    /// The user selected this component by name (`--mca mtl rustofi`).
    pub named: bool,
    /// This process's name (jobid << 32 | vpid).
    pub my_name: u64,
    /// This process's rank in MPI_COMM_WORLD, for messages.
    pub rank: i64,
    /// NICs (domains) of the provider to use: comma list, NULL for any.
    pub nic: *const c_char,
    /// Most unused registrations of user buffers to cache (0: none).
    pub mr_cache_size: i64,
    /// Open MPI's memory hooks report munmap and free: the shim passes
    /// every released range to [`rustofi_mem_release`].
    pub mem_hooks: bool,
    /// Ask for and use FI_TAGGED: auto or off.
    pub tagged: *const c_char,
    /// MCA `priority`, range-checked with the others.
    pub priority: i64,
    /// Most NICs a large read rendezvous spreads over (0: all near ones).
    pub stripe: i64,
    /// Smallest read rendezvous that stripes, in bytes.
    pub stripe_min: i64,
    /// Bytes held for one peer's uncompleted sends before sends wait.
    pub send_queue_limit: i64,
    /// The same over all peers.
    pub send_queue_total: i64,
    /// Seconds within which operations waiting on a dead peer fail (0:
    /// never probe peers).
    pub peer_timeout: i64,
    /// Most bytes the cache's unused registrations may cover (-1: the
    /// host's memory divided by its CPUs).
    pub mr_cache_bytes: i64,
}

/// Completion entry points of the shim.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RustofiCallbacks {
    /// A receive finished: source, tag, bytes written, status (0 ok,
    /// 1 truncated, 2 failed).
    pub recv_complete: Option<unsafe extern "C" fn(*mut RustofiReqHead, i32, i32, usize, c_int)>,
    /// A send finished with a status (0 ok, 2 failed).
    pub send_complete: Option<unsafe extern "C" fn(*mut RustofiReqHead, c_int)>,
    /// A receive was cancelled.
    pub cancel_complete: Option<unsafe extern "C" fn(*mut RustofiReqHead)>,
}

/// Output entry points of the shim (see `log`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RustofiLogHooks {
    /// Writes one line (without its newline) with `opal_output`.
    pub output: Option<unsafe extern "C" fn(*const c_char)>,
    /// Shows a topic of `help-mtl-rustofi.txt`; the second argument is the
    /// message filling the topic's `%s`.
    pub show_help: Option<unsafe extern "C" fn(*const c_char, *const c_char)>,
}

/// MPI_T class of a performance variable (the shim maps it to Open MPI's
/// `MCA_BASE_PVAR_CLASS_*`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RustofiPvarClass {
    /// Monotonic count of events since MPI_Init.
    Counter = 0,
    /// Current value of a quantity that rises and falls.
    Level = 1,
    /// Highest value a level has reached.
    Highwatermark = 2,
}

/// Envelope reported by a probe.
#[repr(C)]
pub struct RustofiStatus {
    pub source: i32,
    pub tag: i32,
    pub count: u64,
}

struct Component {
    engine: Engine,
    cb: Callbacks,
    rank: i64,
}

/// The shim's completion entry points, each one present: one the shim
/// leaves NULL becomes a function that does nothing (such a completion
/// is dropped), so that handing one over tests nothing but its kind.
#[derive(Clone, Copy)]
struct Callbacks {
    recv_complete: unsafe extern "C" fn(*mut RustofiReqHead, i32, i32, usize, c_int),
    send_complete: unsafe extern "C" fn(*mut RustofiReqHead, c_int),
    cancel_complete: unsafe extern "C" fn(*mut RustofiReqHead),
}

impl From<RustofiCallbacks> for Callbacks {
    fn from(cb: RustofiCallbacks) -> Callbacks {
        unsafe extern "C" fn no_recv(_: *mut RustofiReqHead, _: i32, _: i32, _: usize, _: c_int) {}
        unsafe extern "C" fn no_send(_: *mut RustofiReqHead, _: c_int) {}
        unsafe extern "C" fn no_cancel(_: *mut RustofiReqHead) {}
        Callbacks {
            recv_complete: cb.recv_complete.unwrap_or(no_recv),
            send_complete: cb.send_complete.unwrap_or(no_send),
            cancel_complete: cb.cancel_complete.unwrap_or(no_cancel),
        }
    }
}

static COMPONENT: AtomicPtr<Component> = AtomicPtr::new(ptr::null_mut());

const ERR: c_int = -1;

/// Runs `f`, turning a panic into an error code and a message.
#[inline(always)]
fn guard(what: &'static str, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => panicked(what, p),
    }
}

/// Reports a panic caught by [`guard`]. Out of line: the entry points
/// carry only the unwind edge to it, and `what` reaches it as a constant
/// rather than through the closure the unwind guard runs.
#[cold]
#[inline(never)]
fn panicked(what: &str, p: Box<dyn std::any::Any + Send>) -> c_int {
    let msg = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    crate::log::problem(Topic::InternalError, &format!("{what}: {msg}"));
    ERR
}

fn component() -> Option<&'static Component> {
    let p = COMPONENT.load(Ordering::Acquire);
    // SAFETY: the pointer is either null or a leaked Box that stays alive
    // until rustofi_finalize, which MPI guarantees runs after every other
    // call into the MTL has returned.
    unsafe { p.as_ref() }
}

/// Runs an engine operation, then delivers the completions it produced
/// once the progress token has been released (a callback may start new
/// operations). Looking for the component cannot panic, so it comes
/// before the unwind guard.
#[inline(always)]
fn with_engine(what: &'static str, f: impl FnOnce(&Engine, &mut Finished) -> c_int) -> c_int {
    match component() {
        Some(c) => with_component(c, what, f),
        None => uninitialised(what),
    }
}

/// [`with_engine`] before initialisation (or after finalize).
#[cold]
#[inline(never)]
fn uninitialised(what: &'static str) -> c_int {
    guard(what, || {
        crate::log::error(&format!("{what} called before initialisation"));
        ERR
    })
}

/// [`with_engine`] for a caller that has the component already.
#[inline(always)]
fn with_component(
    c: &Component,
    what: &'static str,
    f: impl FnOnce(&Engine, &mut Finished) -> c_int,
) -> c_int {
    guard(what, || run(c, f))
}

#[inline(always)]
fn run(c: &Component, f: impl FnOnce(&Engine, &mut Finished) -> c_int) -> c_int {
    let mut out = Finished::new();
    let r = f(&c.engine, &mut out);
    // A receive posted before its message, a small send (complete on
    // return, see `rustofi_isend`): most posts finish nothing here.
    if !out.is_empty() {
        deliver(c, &mut out);
    }
    r
}

/// [`with_component`] for a poll, which most often finishes one request:
/// that one is handed over here, without the loop and the frame of
/// `deliver`. (Posts, which most often finish none, keep `deliver` out of
/// line: its code would cost their paths registers.) A panic is reported
/// and counts as no event: a poll's answer is never negative.
#[inline(always)]
fn poll_component(
    c: &Component,
    what: &'static str,
    f: impl FnOnce(&Engine, &mut Finished) -> c_int,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut out = Finished::new();
        let r = f(&c.engine, &mut out);
        // The one completion first: a poll that got here most often
        // finished one request.
        if let Some(one) = out.take_only_one() {
            // SAFETY: the request came from the shim for an operation that
            // is now complete, and `take_only_one` took it from the list.
            unsafe { hand_over(c, one) };
        } else if !out.is_empty() {
            deliver(c, &mut out);
        }
        r
    }));
    r.unwrap_or_else(|p| {
        panicked(what, p);
        0
    })
}

/// Hands every finished request in `out` to the shim's callbacks, in the
/// order they finished; empties `out`.
#[inline(never)]
fn deliver(c: &Component, out: &mut Finished) {
    // SAFETY: each request came from the shim for an operation that is now
    // complete, and `Finished::deliver` hands each one out once.
    out.deliver(|comp| unsafe { hand_over(c, comp) });
}

/// Hands one finished request to the shim's callback for it.
///
/// # Safety
/// The request the completion names came from the shim for an operation
/// that is now complete, and is handed over once.
#[inline(always)]
unsafe fn hand_over(c: &Component, comp: Completion) {
    // SAFETY: per the function contract; the callbacks are the shim's
    // functions.
    unsafe {
        match comp {
            Completion::Recv {
                req,
                src,
                tag,
                bytes,
                status,
            } => (c.cb.recv_complete)(
                req.0 as *mut RustofiReqHead,
                src,
                tag,
                bytes,
                status as c_int,
            ),
            Completion::Send { req, status } => {
                (c.cb.send_complete)(req.0 as *mut RustofiReqHead, status as c_int)
            }
            Completion::Cancelled { req } => (c.cb.cancel_complete)(req.0 as *mut RustofiReqHead),
        }
    }
}

fn opt_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        None
    } else {
        // SAFETY: the shim passes NUL-terminated MCA strings that outlive
        // the init call.
        unsafe { CStr::from_ptr(p) }.to_str().ok()
    }
}

/// Memory-release notices for the registration cache (one per process,
/// like the hooks that feed it).
static RELEASES: std::sync::OnceLock<std::sync::Arc<ReleaseRing>> = std::sync::OnceLock::new();

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static SENDS: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn count_send(_: *mut RustofiReqHead, _: c_int) {
        SENDS.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn a_callback_the_shim_left_null_does_nothing_and_a_given_one_is_called() {
        let cb = Callbacks::from(RustofiCallbacks {
            recv_complete: None,
            send_complete: Some(count_send),
            cancel_complete: None,
        });
        // SAFETY: the no-op functions and `count_send` read nothing
        // through the request pointer.
        unsafe {
            (cb.recv_complete)(ptr::null_mut(), 0, 0, 0, 0);
            (cb.cancel_complete)(ptr::null_mut());
            (cb.send_complete)(ptr::null_mut(), 0);
        }
        assert_eq!(SENDS.load(Ordering::Relaxed), 1);
    }
}
