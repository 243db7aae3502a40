//! The MTL request as laid out in memory the PML allocates.
//!
//! Open MPI's pml/cm reserves `mtl_request_size` bytes after its
//! `mca_mtl_request_t`; the whole object is a [`Request`]: the C-visible
//! head (shared with the shim through the cbindgen header) followed by
//! state only Rust touches. The state is plain data with no destructor, so
//! the PML may recycle the memory without running Rust code.

use crate::inbox::Linked;
use crate::matching::{PostId, Selector};
use crate::proto::ids::{MsgId, PeerId, ReqId};
use crate::proto::{ProbeInfo, SendArgs};
use crate::sync::{AtomicBool, AtomicPtr, Ordering};
use crate::usermem::UserBuf;
use std::os::raw::c_void;

/// Mirror of Open MPI's `mca_mtl_request_t` (checked field by field in
/// ffi/layout.rs and by static assertions in the shim).
#[repr(C)]
pub struct MtlRequest {
    pub ompi_req: *mut c_void,
    pub completion_callback: Option<unsafe extern "C" fn(*mut MtlRequest)>,
}

/// The part of a request the C shim reads and writes.
#[repr(C)]
pub struct RustofiReqHead {
    pub mtl: MtlRequest,
    /// Open MPI convertor of the user buffer (receives: for unpacking).
    pub convertor: *mut c_void,
    /// The operation's contiguous bytes, which `rustofi_isend`,
    /// `rustofi_irecv` and `rustofi_imrecv` read from here: the user's
    /// buffer, or a bounce buffer the shim packed (send) or unpacks
    /// (receive); NULL when `length` is 0.
    pub buffer: *mut c_void,
    /// Bytes of `buffer`.
    pub length: usize,
    /// `buffer` was allocated by the shim and must be freed (after unpack).
    pub free_after: bool,
}

/// Rust-only state of a request; valid between the start of an operation
/// and its completion.
#[repr(C)]
pub(crate) struct ReqState {
    /// Ticket of the receive in the matcher's posted queue, if it was
    /// queued (a stale ticket is harmless: the matcher never reuses one).
    pub(crate) post_id: Option<PostId>,
    /// The command that starts this request, queued in the engine's inbox
    /// (not written when the operation is applied directly).
    pub(crate) cmd: Cmd,
}

/// An unexpected message taken by a matched probe, as the shim holds it:
/// the core's message id plus one (never null).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MessageHandle(pub(crate) *mut c_void);

impl MessageHandle {
    pub(crate) fn from_id(id: MsgId) -> MessageHandle {
        MessageHandle((id.0 as usize + 1) as *mut c_void)
    }

    /// The message id, or None for a handle this engine never made.
    pub(crate) fn id(self) -> Option<MsgId> {
        (self.0 as usize)
            .checked_sub(1)
            .and_then(|i| u32::try_from(i).ok())
            .map(MsgId)
    }
}

/// Work handed to the engine. Applied by whichever thread holds the
/// progress token.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    /// The send as the core takes it, and its request (`args.req` names
    /// it).
    Send {
        args: SendArgs,
        req: ReqPtr,
    },
    /// `from`: the peer of a specific source.
    Recv {
        sel: Selector,
        from: Option<PeerId>,
        buf: UserBuf,
        req: ReqPtr,
    },
    Mrecv {
        msg: MessageHandle,
        buf: UserBuf,
        req: ReqPtr,
    },
    Cancel {
        req: ReqPtr,
    },
    /// `remove`: a matched probe (MPI_Improbe).
    Probe {
        sel: Selector,
        from: Option<PeerId>,
        remove: bool,
    },
}

/// A command node of the engine's inbox. Send and receive commands live in
/// their request; cancel and probe commands on the caller's stack (the
/// caller waits for `done`).
pub(crate) struct Cmd {
    link: AtomicPtr<Cmd>,
    pub(crate) op: Op,
    /// Result of a probe, written before `done` is set.
    pub(crate) found: Option<(ProbeInfo, Option<MessageHandle>)>,
    /// Cancel result, written before `done` is set.
    pub(crate) cancelled: bool,
    /// Why a probe failed (its source is lost), written before `done`.
    pub(crate) failed: Option<String>,
    pub(crate) done: AtomicBool,
}

// SAFETY: `link` always returns the same field.
unsafe impl Linked for Cmd {
    fn link(&self) -> &AtomicPtr<Cmd> {
        &self.link
    }
}

impl Cmd {
    pub(crate) fn new(op: Op) -> Cmd {
        Cmd {
            link: AtomicPtr::new(std::ptr::null_mut()),
            op,
            found: None,
            cancelled: false,
            failed: None,
            done: AtomicBool::new(false),
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

#[repr(C)]
pub(crate) struct Request {
    pub(crate) head: RustofiReqHead,
    pub(crate) st: ReqState,
}

// The PML's request pointer, the shim's `RustofiReqHead *` and `ReqPtr`
// all point at the same byte: the head comes first (the head's own fields
// are checked against C in ffi/layout.rs).
const _: () = assert!(memoffset::offset_of!(Request, head) == 0);

/// Bytes the PML must reserve after its `mca_mtl_request_t`.
pub(crate) const REQUEST_EXTRA: usize =
    std::mem::size_of::<Request>() - std::mem::size_of::<MtlRequest>();

/// A request pointer that may cross threads. The PML keeps the request
/// alive until we complete it; after `init` and the push of its command,
/// only the progress-token holder touches `st`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReqPtr(pub(crate) *mut Request);

// SAFETY: the PML keeps the pointee alive until the operation completes,
// and after the command is pushed its Rust state is only touched by the
// holder of the progress token, one thread at a time (CONCURRENCY.md).
unsafe impl Send for ReqPtr {}

impl ReqPtr {
    /// The core's opaque name of this request.
    pub(crate) fn id(self) -> ReqId {
        ReqId(self.0 as usize)
    }

    /// Initialises the Rust state of a request at the start of an operation.
    ///
    /// # Safety
    /// `self.0` must point at a live request of at least
    /// `size_of::<Request>()` bytes.
    pub(crate) unsafe fn init(self, op: Op) -> *mut Cmd {
        // SAFETY: per the function contract; `st` has no destructor, so
        // writing over uninitialised or stale memory is fine.
        unsafe {
            let st = std::ptr::addr_of_mut!((*self.0).st);
            st.write(ReqState {
                post_id: None,
                cmd: Cmd::new(op),
            });
            std::ptr::addr_of_mut!((*st).cmd)
        }
    }

    /// # Safety
    /// The request must have been started (its command queued with `init`
    /// or applied directly, which writes `set_post_id`) and the caller
    /// must hold the progress token.
    pub(crate) unsafe fn post_id(self) -> Option<PostId> {
        // SAFETY: the request is live and initialised (the function's
        // contract), and only the token holder touches its state.
        unsafe { (*self.0).st.post_id }
    }

    /// # Safety
    /// The request must be live (initialised or not: the field is written
    /// with a raw place, never read) and the caller must hold the progress
    /// token.
    pub(crate) unsafe fn set_post_id(self, id: Option<PostId>) {
        // SAFETY: per the function contract; `post_id` is plain data.
        unsafe { std::ptr::addr_of_mut!((*self.0).st.post_id).write(id) }
    }
}
