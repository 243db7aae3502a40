//! What the protocol core asks of its driver, and what it reports to the
//! MPI layer.

use super::ids::{FiAddr, MrId, OpId, PeerId, RailId, ReqId, RxSlot};
use crate::usermem::{Region, UserBuf};
use crate::wire::BASE_LEN;

/// The encoded header of an eager packet sent inline.
pub(crate) type InlineHead = [u8; BASE_LEN];

/// Outcome of a request, as reported to the MPI layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum Status {
    Ok = 0,
    Truncated = 1,
    Failed = 2,
    /// A receive for exactly one source that is given up: no message
    /// matched it.
    Unreachable = 3,
}

/// An MPI request finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Recv {
        req: ReqId,
        src: i32,
        tag: i32,
        /// Bytes written into the receive buffer.
        bytes: usize,
        status: Status,
    },
    Send {
        req: ReqId,
        status: Status,
    },
    Cancelled {
        req: ReqId,
    },
}

/// Access rights asked of a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Local source of sends (FI_SEND).
    Send,
    /// Local target of receives (FI_RECV).
    Recv,
    /// Local target of RMA reads (FI_READ).
    Read,
    /// Remote peers may read it (FI_REMOTE_READ).
    RemoteRead,
}

/// Work for the driver. Every operation carrying an [`OpId`] or
/// [`RxSlot`] is reported back exactly once: as a completion, an error
/// completion, or a failed post (`Core::on_post_failed`). Memory named by a
/// [`Region`] stays valid until then. A failed post is reported in the
/// same pass as its action, into the same [`Out`], before that output's
/// events reach the MPI layer: the core takes back the completions of the
/// sends a refused packet carries (`proto::held`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Post (or repost) a receive bounce buffer of the rail.
    PostRecv { rail: RailId, slot: RxSlot },
    /// Send one packet: `head` (our bounce buffer, registered as `mr` when
    /// the rail needs local registration) followed, for a zero-copy eager
    /// send, by `payload` straight from the user's buffer. With `inject`
    /// (no payload, at most the rail's `inject_size` bytes) the driver may
    /// use `fi_inject`, which generates no completion: it then reports the
    /// operation complete as soon as the post succeeds.
    Send {
        op: OpId,
        rail: RailId,
        dest: FiAddr,
        head: Region,
        mr: Option<MrId>,
        payload: Option<Region>,
        inject: bool,
    },
    /// Send one small eager packet, `head` followed by the user's
    /// `payload`, on a rail whose profile says `inline`: the driver copies
    /// both before it returns and reports nothing when it succeeds (no
    /// bounce buffer, no operation). If the driver cannot take it, it
    /// hands it back with `Core::on_inline_refused` before it executes the
    /// next action; the payload is still valid then, because the send's
    /// completion (already in `Out::events`, taken back then) reaches the
    /// MPI layer only after the driver has executed every action of the
    /// same output. A
    /// send the engine applies for its caller comes back from
    /// the core's send as the same packet (`InlineSend`), which the engine
    /// hands to the driver at once; this action is for the others (sends
    /// queued through the inbox or started by the core itself).
    SendInline {
        rail: RailId,
        peer: PeerId,
        dest: FiAddr,
        head: InlineHead,
        payload: UserBuf,
        /// The send it completes.
        req: ReqId,
    },
    /// RMA read of `local.len` bytes from the peer's `remote_addr` (key
    /// `key`) into `local`.
    Read {
        op: OpId,
        rail: RailId,
        src: FiAddr,
        local: Region,
        mr: Option<MrId>,
        remote_addr: u64,
        key: u64,
    },
    /// Tagged send of rendezvous data.
    TaggedSend {
        op: OpId,
        rail: RailId,
        dest: FiAddr,
        local: Region,
        mr: Option<MrId>,
        tag: u64,
    },
    /// Tagged receive of rendezvous data from one peer, exact tag.
    TaggedRecv {
        op: OpId,
        rail: RailId,
        src: FiAddr,
        local: Region,
        mr: Option<MrId>,
        tag: u64,
    },
    /// Register memory; the driver answers with `Core::on_registered`
    /// before it executes the next action.
    Register {
        mr: MrId,
        rail: RailId,
        region: Region,
        access: Access,
        requested_key: u64,
    },
    /// Release a registration (the memory may be freed after this).
    Deregister { mr: MrId },
    /// Cancel a posted operation (`fi_cancel`). Its one report still
    /// comes: as a cancellation (`Core::on_canceled`) or, if it finished
    /// first, as its completion or error.
    Cancel { op: OpId, rail: RailId },
    /// Ask the kernel whether a same-host peer's process `pid` still
    /// exists; if not, report `Core::peer_gone`. Nothing else is reported.
    CheckAlive { peer: PeerId, pid: u32 },
}

/// Why a post was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PostError {
    /// The provider's queue is full (FI_EAGAIN): try again later.
    Again,
    /// Any other error (a negative libfabric code).
    Hard(i32),
}

/// What a driver reports for an operation it posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Posted {
    Op(OpId),
    Rx(RailId, RxSlot),
}

/// Output of one call into the core: actions for the driver (executed in
/// order) and finished MPI requests.
#[derive(Default)]
pub(crate) struct Out {
    pub(crate) actions: Vec<Action>,
    pub(crate) events: Vec<Event>,
}

impl Out {
    pub(crate) fn new() -> Out {
        Out::default()
    }
}
