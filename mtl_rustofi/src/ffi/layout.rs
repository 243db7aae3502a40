//! Status codes and the layout of every structure shared with the shim,
//! checked at compile time here and by `_Static_assert`s in the shim.

use super::*;

/// Status codes passed to `recv_complete`/`send_complete`.
pub const STATUS_OK: c_int = 0;
pub const STATUS_TRUNCATED: c_int = 1;
pub const STATUS_FAILED: c_int = 2;
pub const STATUS_UNREACHABLE: c_int = 3;
const _: () = assert!(STATUS_OK == Status::Ok as c_int);
const _: () = assert!(STATUS_TRUNCATED == Status::Truncated as c_int);
const _: () = assert!(STATUS_FAILED == Status::Failed as c_int);
const _: () = assert!(STATUS_UNREACHABLE == Status::Unreachable as c_int);

// ---------------------------------------------------------------------
// Layout of the structs shared with C, field by field.
//
// The `RUSTOFI_LAYOUT_*` numbers are byte offsets and sizes on the LP64
// targets the component is built for (x86_64, aarch64). The const
// assertions below hold Rust's `#[repr(C)]` layout to them; they reach the
// shim through the cbindgen header, where `_Static_assert`s hold the C
// compiler's layout of that header to the same numbers, and also Open MPI's
// own `mca_mtl_request_t` (mirrored by `MtlRequest`) and the
// `ompi_status_public_t` fields the shim copies `RustofiStatus` and the
// receive callback's arguments into. A change on either side fails the
// build instead of corrupting memory.

/// Offsets and size of `MtlRequest`, Open MPI's `mca_mtl_request_t`.
pub const RUSTOFI_LAYOUT_MTL_REQUEST_OMPI_REQ: usize = 0;
pub const RUSTOFI_LAYOUT_MTL_REQUEST_COMPLETION_CALLBACK: usize = 8;
pub const RUSTOFI_LAYOUT_MTL_REQUEST_SIZE: usize = 16;
/// Offsets and size of `RustofiReqHead` (starts with the `mca_mtl_request_t`).
pub const RUSTOFI_LAYOUT_REQ_HEAD_MTL: usize = 0;
pub const RUSTOFI_LAYOUT_REQ_HEAD_CONVERTOR: usize = 16;
pub const RUSTOFI_LAYOUT_REQ_HEAD_BUFFER: usize = 24;
pub const RUSTOFI_LAYOUT_REQ_HEAD_LENGTH: usize = 32;
pub const RUSTOFI_LAYOUT_REQ_HEAD_FREE_AFTER: usize = 40;
pub const RUSTOFI_LAYOUT_REQ_HEAD_SIZE: usize = 48;
/// Offsets and size of `RustofiStatus`.
pub const RUSTOFI_LAYOUT_STATUS_SOURCE: usize = 0;
pub const RUSTOFI_LAYOUT_STATUS_TAG: usize = 4;
pub const RUSTOFI_LAYOUT_STATUS_COUNT: usize = 8;
pub const RUSTOFI_LAYOUT_STATUS_SIZE: usize = 16;
/// Offsets and size of `RustofiCallbacks`.
pub const RUSTOFI_LAYOUT_CALLBACKS_RECV_COMPLETE: usize = 0;
pub const RUSTOFI_LAYOUT_CALLBACKS_SEND_COMPLETE: usize = 8;
pub const RUSTOFI_LAYOUT_CALLBACKS_CANCEL_COMPLETE: usize = 16;
pub const RUSTOFI_LAYOUT_CALLBACKS_SIZE: usize = 24;
/// Offsets and size of `RustofiConfig`.
pub const RUSTOFI_LAYOUT_CONFIG_PROVIDER_INCLUDE: usize = 0;
pub const RUSTOFI_LAYOUT_CONFIG_INCLUDE_SET: usize = 8;
pub const RUSTOFI_LAYOUT_CONFIG_PROVIDER_EXCLUDE: usize = 16;
pub const RUSTOFI_LAYOUT_CONFIG_EXCLUDE_SET: usize = 24;
pub const RUSTOFI_LAYOUT_CONFIG_EAGER_LIMIT: usize = 32;
pub const RUSTOFI_LAYOUT_CONFIG_RNDV_PROTOCOL: usize = 40;
pub const RUSTOFI_LAYOUT_CONFIG_RNDV_CHUNK_SIZE: usize = 48;
pub const RUSTOFI_LAYOUT_CONFIG_RX_BUFFERS: usize = 56;
pub const RUSTOFI_LAYOUT_CONFIG_VERBOSE: usize = 64;
pub const RUSTOFI_LAYOUT_CONFIG_FAULT_INJECT: usize = 72;
pub const RUSTOFI_LAYOUT_CONFIG_SHM: usize = 80;
pub const RUSTOFI_LAYOUT_CONFIG_COALESCE: usize = 88;
pub const RUSTOFI_LAYOUT_CONFIG_NAMED: usize = 96;
pub const RUSTOFI_LAYOUT_CONFIG_MY_NAME: usize = 104;
pub const RUSTOFI_LAYOUT_CONFIG_RANK: usize = 112;
pub const RUSTOFI_LAYOUT_CONFIG_NIC: usize = 120;
pub const RUSTOFI_LAYOUT_CONFIG_MR_CACHE_SIZE: usize = 128;
pub const RUSTOFI_LAYOUT_CONFIG_MEM_HOOKS: usize = 136;
pub const RUSTOFI_LAYOUT_CONFIG_TAGGED: usize = 144;
pub const RUSTOFI_LAYOUT_CONFIG_PRIORITY: usize = 152;
pub const RUSTOFI_LAYOUT_CONFIG_STRIPE: usize = 160;
pub const RUSTOFI_LAYOUT_CONFIG_STRIPE_MIN: usize = 168;
pub const RUSTOFI_LAYOUT_CONFIG_SEND_QUEUE_LIMIT: usize = 176;
pub const RUSTOFI_LAYOUT_CONFIG_SEND_QUEUE_TOTAL: usize = 184;
pub const RUSTOFI_LAYOUT_CONFIG_PEER_TIMEOUT: usize = 192;
pub const RUSTOFI_LAYOUT_CONFIG_MR_CACHE_BYTES: usize = 200;
pub const RUSTOFI_LAYOUT_CONFIG_SIZE: usize = 208;

/// Asserts at compile time that `$ty` has size `$size` and each listed
/// field has the given offset and size (every field must be listed: the
/// field sizes must add up to the struct's size less its padding, which
/// `$pad` states).
macro_rules! assert_layout {
    ($ty:ty, size $size:expr, pad $pad:expr; $($field:ident: $fty:ty = $off:expr),+ $(,)?) => {
        const _: () = assert!(std::mem::size_of::<$ty>() == $size);
        const _: () = assert!(0 $(+ std::mem::size_of::<$fty>())+ + $pad == $size);
        $(
            const _: () = assert!(memoffset::offset_of!($ty, $field) == $off);
            const _: () = {
                // The field's declared type is `$fty` (a type mismatch fails
                // to compile).
                let _: fn(&$ty) -> &$fty = |v| &v.$field;
            };
        )+
    };
}

type RecvCb = Option<unsafe extern "C" fn(*mut RustofiReqHead, i32, i32, usize, c_int)>;
type SendCb = Option<unsafe extern "C" fn(*mut RustofiReqHead, c_int)>;
type CancelCb = Option<unsafe extern "C" fn(*mut RustofiReqHead)>;

assert_layout!(MtlRequest, size RUSTOFI_LAYOUT_MTL_REQUEST_SIZE, pad 0;
    ompi_req: *mut c_void = RUSTOFI_LAYOUT_MTL_REQUEST_OMPI_REQ,
    completion_callback: Option<unsafe extern "C" fn(*mut MtlRequest)> =
        RUSTOFI_LAYOUT_MTL_REQUEST_COMPLETION_CALLBACK,
);
assert_layout!(RustofiReqHead, size RUSTOFI_LAYOUT_REQ_HEAD_SIZE, pad 7;
    mtl: MtlRequest = RUSTOFI_LAYOUT_REQ_HEAD_MTL,
    convertor: *mut c_void = RUSTOFI_LAYOUT_REQ_HEAD_CONVERTOR,
    buffer: *mut c_void = RUSTOFI_LAYOUT_REQ_HEAD_BUFFER,
    length: usize = RUSTOFI_LAYOUT_REQ_HEAD_LENGTH,
    free_after: bool = RUSTOFI_LAYOUT_REQ_HEAD_FREE_AFTER,
);
assert_layout!(RustofiStatus, size RUSTOFI_LAYOUT_STATUS_SIZE, pad 0;
    source: i32 = RUSTOFI_LAYOUT_STATUS_SOURCE,
    tag: i32 = RUSTOFI_LAYOUT_STATUS_TAG,
    count: u64 = RUSTOFI_LAYOUT_STATUS_COUNT,
);
assert_layout!(RustofiCallbacks, size RUSTOFI_LAYOUT_CALLBACKS_SIZE, pad 0;
    recv_complete: RecvCb = RUSTOFI_LAYOUT_CALLBACKS_RECV_COMPLETE,
    send_complete: SendCb = RUSTOFI_LAYOUT_CALLBACKS_SEND_COMPLETE,
    cancel_complete: CancelCb = RUSTOFI_LAYOUT_CALLBACKS_CANCEL_COMPLETE,
);
assert_layout!(RustofiConfig, size RUSTOFI_LAYOUT_CONFIG_SIZE, pad 28;
    provider_include: *const c_char = RUSTOFI_LAYOUT_CONFIG_PROVIDER_INCLUDE,
    include_set: bool = RUSTOFI_LAYOUT_CONFIG_INCLUDE_SET,
    provider_exclude: *const c_char = RUSTOFI_LAYOUT_CONFIG_PROVIDER_EXCLUDE,
    exclude_set: bool = RUSTOFI_LAYOUT_CONFIG_EXCLUDE_SET,
    eager_limit: i64 = RUSTOFI_LAYOUT_CONFIG_EAGER_LIMIT,
    rndv_protocol: *const c_char = RUSTOFI_LAYOUT_CONFIG_RNDV_PROTOCOL,
    rndv_chunk_size: i64 = RUSTOFI_LAYOUT_CONFIG_RNDV_CHUNK_SIZE,
    rx_buffers: i64 = RUSTOFI_LAYOUT_CONFIG_RX_BUFFERS,
    verbose: i64 = RUSTOFI_LAYOUT_CONFIG_VERBOSE,
    fault_inject: *const c_char = RUSTOFI_LAYOUT_CONFIG_FAULT_INJECT,
    shm: *const c_char = RUSTOFI_LAYOUT_CONFIG_SHM,
    coalesce: i64 = RUSTOFI_LAYOUT_CONFIG_COALESCE,
    named: bool = RUSTOFI_LAYOUT_CONFIG_NAMED,
    my_name: u64 = RUSTOFI_LAYOUT_CONFIG_MY_NAME,
    rank: i64 = RUSTOFI_LAYOUT_CONFIG_RANK,
    nic: *const c_char = RUSTOFI_LAYOUT_CONFIG_NIC,
    mr_cache_size: i64 = RUSTOFI_LAYOUT_CONFIG_MR_CACHE_SIZE,
    mem_hooks: bool = RUSTOFI_LAYOUT_CONFIG_MEM_HOOKS,
    tagged: *const c_char = RUSTOFI_LAYOUT_CONFIG_TAGGED,
    priority: i64 = RUSTOFI_LAYOUT_CONFIG_PRIORITY,
    stripe: i64 = RUSTOFI_LAYOUT_CONFIG_STRIPE,
    stripe_min: i64 = RUSTOFI_LAYOUT_CONFIG_STRIPE_MIN,
    send_queue_limit: i64 = RUSTOFI_LAYOUT_CONFIG_SEND_QUEUE_LIMIT,
    send_queue_total: i64 = RUSTOFI_LAYOUT_CONFIG_SEND_QUEUE_TOTAL,
    peer_timeout: i64 = RUSTOFI_LAYOUT_CONFIG_PEER_TIMEOUT,
    mr_cache_bytes: i64 = RUSTOFI_LAYOUT_CONFIG_MR_CACHE_BYTES,
);
