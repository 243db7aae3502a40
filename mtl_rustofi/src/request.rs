//! The MTL request as laid out in memory the PML allocates.
//!
//! Open MPI's pml/cm reserves `mtl_request_size` bytes after its
//! `mca_mtl_request_t`; the whole object is a [`Request`]: the C-visible
//! head (shared with the shim through the cbindgen header) followed by
//! state only Rust touches. The state is plain data with no destructor, so
//! the PML may recycle the memory without running Rust code.

use std::os::raw::c_void;

/// Mirror of Open MPI's `mca_mtl_request_t` (checked by a static assertion
/// in the shim).
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
    /// Packed/unpacked bounce buffer owned by the shim, or NULL.
    pub buffer: *mut c_void,
    /// Bytes of `buffer`.
    pub length: usize,
    /// `buffer` was allocated by the shim and must be freed (after unpack).
    pub free_after: bool,
}

/// Rust-only state of a request; valid between the start of an operation
/// and its completion.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct ReqState {
    /// Ticket of a queued receive in the matcher, or `NO_POST`.
    pub post_id: u64,
    /// Receive buffer (or send source) and its size in bytes.
    pub buf: *mut u8,
    pub cap: usize,
}

pub const NO_POST: u64 = u64::MAX;

#[repr(C)]
pub struct Request {
    pub head: RustofiReqHead,
    pub st: ReqState,
}

/// Bytes the PML must reserve after its `mca_mtl_request_t`.
pub const REQUEST_EXTRA: usize = std::mem::size_of::<Request>() - std::mem::size_of::<MtlRequest>();

/// A request pointer that may cross threads. The PML keeps the request
/// alive until we complete it; all access to `st` happens under the
/// engine's lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqPtr(pub *mut Request);

// SAFETY: see the type's documentation: the pointee outlives the operation
// and its Rust state is only touched under the engine lock.
unsafe impl Send for ReqPtr {}

impl ReqPtr {
    /// Initialises the Rust state of a request at the start of an operation.
    ///
    /// # Safety
    /// `self.0` must point at a live request of at least
    /// `size_of::<Request>()` bytes.
    pub unsafe fn init(self, buf: *mut u8, cap: usize) {
        // SAFETY: per the function contract; `st` is plain data, so writing
        // over uninitialised memory is fine.
        unsafe {
            std::ptr::addr_of_mut!((*self.0).st).write(ReqState {
                post_id: NO_POST,
                buf,
                cap,
            })
        }
    }

    /// # Safety
    /// The request must have been initialised with `init` and the caller
    /// must hold the engine lock.
    pub unsafe fn st(self) -> &'static mut ReqState {
        // SAFETY: per the function contract.
        unsafe { &mut (*self.0).st }
    }
}
