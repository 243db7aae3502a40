//! The protocol engine: peers, bounce buffers, eager and rendezvous
//! protocols, per-peer ordering, tag matching and progress.
//!
//! Concurrency (see `mtl_rustofi/CONCURRENCY.md`): all mutable state lives in one
//! [`State`] that only the holder of the progress token touches, and every
//! libfabric call on the endpoint is made by that holder (the domain is
//! opened with FI_THREAD_DOMAIN). Threads hand work over as commands pushed
//! on a lock-free inbox and then try to take the token; nobody waits for
//! it. User-visible completions are collected by the holder and delivered
//! after it released the token, so a completion callback may call back
//! into the MTL.

use crate::config::{Fault, RndvProtocol, Settings};
use crate::fabric::{
    AddressVector, CompletionQueue, CqEntry, Domain, Endpoint, Fabric, FiError, Info, InfoList,
    MemoryRegion,
};
use crate::inbox::{Inbox, Token};
use crate::matching::{Envelope, Matcher, PostId, Selector};
use crate::order::Reorder;
use crate::request::{Cmd, Op, ReqPtr, NO_POST};
pub use crate::request::{MessageHandle, ProbeInfo};
use crate::sys;
use crate::wire::{self, Header, Kind, RailKind};
use hashbrown::HashMap;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::os::raw::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Outcome of a request, as reported to the shim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    Ok = 0,
    Truncated = 1,
    Failed = 2,
}

/// A request completion to deliver once the engine lock is released.
#[derive(Debug)]
pub enum Completion {
    Recv {
        req: ReqPtr,
        src: i32,
        tag: i32,
        /// Bytes written into the receive buffer.
        bytes: usize,
        status: Status,
    },
    Send {
        req: ReqPtr,
        status: Status,
    },
    Cancelled {
        req: ReqPtr,
    },
}

/// Counters printed at finalize with `verbose >= 1`.
#[derive(Default)]
pub struct Stats {
    pub sent_msgs: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub recv_msgs: AtomicU64,
    pub recv_bytes: AtomicU64,
    pub eager: AtomicU64,
    pub rndv: AtomicU64,
    pub unexpected: AtomicU64,
    pub errors: AtomicU64,
    /// Peers reached through the network rail and through the shm rail.
    pub net_peers: AtomicU64,
    pub shm_peers: AtomicU64,
    /// Eager messages that shared a packet with an earlier one.
    pub coalesced: AtomicU64,
}

/// Provider capabilities the engine specialises on.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    pub rma: bool,
    pub mr_local: bool,
    pub mr_virt_addr: bool,
    pub mr_prov_key: bool,
    pub mr_endpoint: bool,
    pub max_msg: usize,
}

/// Every operation posted to libfabric carries one of these as its
/// context. It is the first field of its (repr(C)) container, so the
/// context pointer returned in a completion leads back to the container.
#[repr(C)]
struct OpCtx {
    fi: sys::fi_context2,
    kind: OpKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Rx,
    Tx,
    Chunk,
}

/// A posted receive bounce buffer.
#[repr(C)]
struct RxBuf {
    ctx: OpCtx,
    mem: Box<[u8]>,
    mr: Option<MemoryRegion>,
}

/// A transmit bounce buffer: header plus eager payload.
#[repr(C)]
struct TxBuf {
    ctx: OpCtx,
    mem: Box<[u8]>,
    mr: Option<MemoryRegion>,
    /// What to do when this send fails.
    on_error: TxFollowUp,
    /// Destination and length of the pending post (for retries).
    dest: u64,
    len: usize,
    /// Zero-copy eager payload sent straight from the user's buffer after
    /// the header in `mem` (null when the payload was copied into `mem`).
    zc: *const u8,
    zc_len: usize,
    /// The peer this packet goes to, counted in its `inflight` while
    /// posted (NO_PEER: not counted).
    peer: usize,
    /// Sends coalesced into this packet: they complete when it is handed
    /// to the provider, so that a wait on them drives progress (which
    /// posts the packet) rather than returning at once.
    bundled: Vec<ReqPtr>,
}

const NO_PEER: usize = usize::MAX;

/// Writes an eager message (header, then `len` bytes from `buf`) into
/// `mem` at offset `at` and returns the offset after it. Panics rather than
/// write past `mem`.
///
/// # Safety
/// `buf` must be readable for `len` bytes.
unsafe fn put_eager(mem: &mut [u8], at: usize, hdr: &Header, buf: *const u8, len: usize) -> usize {
    let start = at + hdr.encode(&mut mem[at..]);
    let dst = &mut mem[start..start + len];
    if len > 0 {
        // SAFETY: `buf` holds `len` readable bytes (caller's contract) and
        // `dst` is a `len`-byte slice of our own buffer, so they are
        // distinct and in bounds.
        unsafe { ptr::copy_nonoverlapping(buf, dst.as_mut_ptr(), len) };
    }
    start + len
}

#[derive(Clone, Copy, Debug)]
enum TxFollowUp {
    None,
    /// A protocol control packet (CTS, FIN, ack): resent after a failure
    /// (a reliable provider re-establishes a broken connection), this many
    /// more times.
    Resend(u8),
    /// A synchronous eager send waiting for its ack.
    Sync(u64),
    /// A rendezvous send waiting for FIN/CTS.
    RndvSend(u64),
    /// A zero-copy eager send: the request completes with the transmit.
    Complete(ReqPtr),
}

/// One chunk of a rendezvous data transfer (RMA read, tagged send or
/// tagged receive).
#[repr(C)]
struct ChunkOp {
    ctx: OpCtx,
    /// Key of the rendezvous in `rndv_recv` or `rndv_send`.
    id: u64,
    recv_side: bool,
    /// The rail the peer is reached through.
    rail: usize,
    op: ChunkKind,
    local: *mut u8,
    len: usize,
    offset: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkKind {
    Read,
    TSend,
    TRecv,
}

/// An operation waiting for transmit resources.
enum Retry {
    Tx(*mut TxBuf),
    Chunk(*mut ChunkOp),
}

/// Unexpected-queue entry.
enum Unexpected {
    Eager {
        peer: usize,
        data: Vec<u8>,
        sync: Option<u64>,
    },
    Rts {
        peer: usize,
        hdr: Header,
    },
}

impl Unexpected {
    fn len(&self) -> u64 {
        match self {
            Unexpected::Eager { data, .. } => data.len() as u64,
            Unexpected::Rts { hdr, .. } => hdr.len,
        }
    }
}

/// A matched message that arrived before its predecessors (held by the
/// per-peer reorder buffer).
struct Held {
    hdr: Header,
    data: Vec<u8>,
}

struct Peer {
    /// The rail this peer is reached through (shm for same-host peers when
    /// both sides opened it, else the network rail).
    rail: usize,
    /// The peer's address in that rail's address vector.
    addr: u64,
    /// Packets to this peer posted (or queued) and not yet completed.
    inflight: u32,
    /// Eager messages being coalesced into one packet while an earlier
    /// packet to this peer is in flight, and the offset of the last
    /// message's header in it.
    bundle: Option<Box<TxBuf>>,
    bundle_last: usize,
    eager_limit: usize,
    tx_seq: u32,
    order: Reorder<Held>,
}

/// Sender side of a rendezvous.
struct SendRndv {
    req: ReqPtr,
    buf: *const u8,
    len: usize,
    peer: usize,
    mr: Option<MemoryRegion>,
    outstanding: usize,
    failed: bool,
}

/// Receiver side of a rendezvous.
struct RecvRndv {
    req: ReqPtr,
    peer: usize,
    src: i32,
    tag: i32,
    /// Sender's cookie, echoed in CTS/FIN.
    cookie: u64,
    /// Bytes to move (the message, clipped to the receive buffer).
    want: usize,
    truncated: bool,
    read: bool,
    remote_addr: u64,
    key: u64,
    next_off: usize,
    outstanding: usize,
    failed: bool,
    mr: Option<MemoryRegion>,
}

/// Eager payloads at least this large are sent from the user's buffer
/// (fi_sendv of header + payload) where the provider needs no registered
/// memory; smaller ones are copied into a bounce buffer, which lets the
/// request complete at once and costs less than waiting for the transmit.
const ZERO_COPY_MIN: usize = 8192;
/// Resends of a failed control packet.
const CTRL_RESENDS: u8 = 3;
/// Most reads in flight per rendezvous.
const READS_IN_FLIGHT: usize = 8;
/// Tagged-data tags are `rndv id << CHUNK_BITS | chunk index`.
const CHUNK_BITS: u32 = 20;
const RNDV_ID_MASK: u64 = (1 << 28) - 1;

/// Per-rail mutable state (token holder only).
struct RailState {
    // Boxed: the provider holds the address of each posted buffer, so it
    // must not move when the vectors grow.
    #[allow(clippy::vec_box)]
    rx: Vec<Box<RxBuf>>,
    #[allow(clippy::vec_box)]
    tx_free: Vec<Box<TxBuf>>,
    tx_total: usize,
    retry: VecDeque<Retry>,
    /// Transmit-side operations posted and not yet completed.
    inflight: usize,
    /// Peers reached through this rail. A rail without peers has nothing
    /// to deliver and is not polled (polling an idle network provider
    /// costs a system call, which would dominate shared-memory latency).
    peers: usize,
}

impl RailState {
    fn new() -> RailState {
        RailState {
            rx: Vec::new(),
            tx_free: Vec::new(),
            tx_total: 0,
            retry: VecDeque::new(),
            inflight: 0,
            peers: 0,
        }
    }

    fn busy(&self) -> bool {
        self.tx_free.len() < self.tx_total || !self.retry.is_empty()
    }
}

struct State {
    matcher: Matcher<ReqPtr, Unexpected>,
    peers: Vec<Peer>,
    by_name: HashMap<u64, usize>,
    rails: Vec<RailState>,
    sync_wait: HashMap<u64, ReqPtr>,
    rndv_send: HashMap<u64, SendRndv>,
    rndv_recv: HashMap<u64, RecvRndv>,
    next_cookie: u64,
    fault: Fault,
    next_key: u64,
    /// Completions drained by a caller that cannot deliver them itself.
    scratch: Vec<CqEntry>,
    /// Peers that may have an open bundle.
    open_bundles: Vec<usize>,
}

// SAFETY: State holds raw pointers to request objects and registered
// buffers; they are only dereferenced by the progress-token holder, and the
// objects they point to outlive the operations (MPI semantics for user
// buffers and requests, ownership for our own buffers).
unsafe impl Send for State {}

/// Fatal engine errors reported to the shim.
#[derive(Debug)]
pub struct EngineError(pub String);

impl From<FiError> for EngineError {
    fn from(e: FiError) -> Self {
        EngineError(e.to_string())
    }
}

pub struct Engine {
    state: UnsafeCell<State>,
    inbox: Inbox<Cmd>,
    token: Token,
    /// Set if a panic unwound through the token holder: the state may be
    /// inconsistent, so every later call fails.
    poisoned: AtomicBool,
    /// Rail 0 is the network provider; rail 1, if open, the shm provider
    /// for same-host peers. One matcher serves both.
    rails: Vec<Rail>,
    /// The network provider's name and capabilities.
    pub provider: String,
    pub caps: Caps,
    pub settings: Settings,
    pub stats: Stats,
    my_name: u64,
}

/// One libfabric endpoint with what it needs. Fields drop in declaration
/// order: endpoint, completion queue, address vector, domain, fabric.
struct Rail {
    ep: Option<Endpoint>,
    cq: Arc<CompletionQueue>,
    av: Arc<AddressVector>,
    domain: Arc<Domain>,
    _fabric: Arc<Fabric>,
    _info: InfoList,
    kind: RailKind,
    provider: String,
    caps: Caps,
    /// Size of each bounce buffer: header plus the largest eager payload.
    buf_size: usize,
    /// Largest eager payload sent through this rail.
    eager_limit: usize,
    /// Eager payloads of ZERO_COPY_MIN bytes and more go from the user's
    /// buffer (no FI_MR_LOCAL and an iov limit of at least 2).
    zero_copy: bool,
    rndv_read: bool,
    chunk: usize,
    /// Most transmit operations in flight: the provider's tx queue depth.
    /// Some providers (udp;ofi_rxd) accept more without EAGAIN and then
    /// stall, so the engine queues the excess itself.
    tx_depth: usize,
    rx_count: usize,
}

impl Rail {
    fn open(
        list: &InfoList,
        index: usize,
        kind: RailKind,
        settings: &Settings,
        rndv: RndvProtocol,
    ) -> Result<Rail, EngineError> {
        let info: Info<'_> = list
            .iter()
            .nth(index)
            .ok_or_else(|| EngineError("provider index out of range".into()))?;
        let one = InfoList::dup_one(info)?;
        let info = one.first().expect("dup_one returns one entry");
        let provider = info.provider();
        let mr_mode = info.mr_mode();
        let caps = Caps {
            rma: info.caps() & (sys::FI_RMA as u64) != 0,
            mr_local: mr_mode & sys::FI_MR_LOCAL != 0,
            mr_virt_addr: mr_mode & sys::FI_MR_VIRT_ADDR != 0,
            mr_prov_key: mr_mode & sys::FI_MR_PROV_KEY != 0,
            mr_endpoint: mr_mode & sys::FI_MR_ENDPOINT != 0,
            max_msg: info.max_msg_size().max(4096),
        };
        let eager_limit = settings
            .eager_limit
            .unwrap_or_else(|| crate::config::default_eager_limit(&provider));
        let buf_size = wire::BASE_LEN + eager_limit.max(wire::EXT_LEN - wire::BASE_LEN);
        if buf_size > caps.max_msg {
            return Err(EngineError(format!(
                "mtl_rustofi_eager_limit = {eager_limit} exceeds what provider {provider} can \
                 send in one message ({} bytes with the header)",
                caps.max_msg
            )));
        }
        let zero_copy = !caps.mr_local && info.iov_limit() >= 2;
        let rndv_read = match rndv {
            RndvProtocol::Auto => caps.rma,
            RndvProtocol::Read if !caps.rma => {
                return Err(EngineError(format!(
                    "mtl_rustofi_rndv_protocol = read, but provider {provider} has no FI_RMA"
                )))
            }
            RndvProtocol::Read => true,
            RndvProtocol::Send => false,
        };
        let chunk = settings.chunk.min(caps.max_msg);
        let fabric = Fabric::open(info)?;
        let domain = Domain::open(&fabric, info)?;
        let cq_size = (info.rx_size() + info.tx_size()).clamp(1024, 65536);
        let cq = CompletionQueue::open(&domain, cq_size)?;
        let av = AddressVector::open(&domain)?;
        let ep = Endpoint::open(&domain, info, &cq, &av)?;
        let rx_count = settings.rx_buffers.min(info.rx_size().max(8));
        let tx_depth = info.tx_size().clamp(16, 1 << 20);
        Ok(Rail {
            ep: Some(ep),
            cq,
            av,
            domain,
            _fabric: fabric,
            _info: one,
            kind,
            provider,
            caps,
            buf_size,
            eager_limit,
            zero_copy,
            rndv_read,
            chunk,
            tx_depth,
            rx_count,
        })
    }

    fn ep(&self) -> &Endpoint {
        self.ep.as_ref().expect("endpoint open until drop")
    }

    fn cq_raw(&self) -> *mut sys::fid_cq {
        self.cq.raw_handle()
    }
}

fn fi_ok(ret: isize) -> Result<(), isize> {
    if ret == 0 {
        Ok(())
    } else {
        Err(ret)
    }
}

const EAGAIN: isize = -(sys::FI_EAGAIN as isize);

impl Engine {
    /// Opens the network provider at `index` of `list` and, if `shm` names
    /// an entry, the shm provider beside it for same-host peers. A shm rail
    /// that cannot be opened is reported and left out unless `shm_required`.
    pub fn open(
        list: InfoList,
        index: usize,
        shm: Option<usize>,
        shm_required: bool,
        settings: Settings,
        my_name: u64,
    ) -> Result<Engine, EngineError> {
        let net = Rail::open(&list, index, RailKind::Net, &settings, settings.rndv)?;
        let mut rails = vec![net];
        if let Some(i) = shm {
            // The shm rail reads when it can, unless the user asked for the
            // send protocol everywhere.
            let rndv = match settings.rndv {
                RndvProtocol::Send => RndvProtocol::Send,
                _ => RndvProtocol::Auto,
            };
            match Rail::open(&list, i, RailKind::Shm, &settings, rndv) {
                Ok(r) => rails.push(r),
                Err(e) if shm_required => {
                    return Err(EngineError(format!(
                        "mtl_rustofi_shm = on, but the shm provider cannot be opened: {}",
                        e.0
                    )))
                }
                Err(e) => crate::log::error(&format!(
                    "the shm provider cannot be opened ({}); same-host peers use {} \
                     (set mtl_rustofi_shm = off to silence this)",
                    e.0, rails[0].provider
                )),
            }
        }
        let fault = settings.fault;
        let engine = Engine {
            state: UnsafeCell::new(State {
                matcher: Matcher::new(),
                peers: Vec::new(),
                by_name: HashMap::new(),
                rails: rails.iter().map(|_| RailState::new()).collect(),
                sync_wait: HashMap::new(),
                rndv_send: HashMap::new(),
                rndv_recv: HashMap::new(),
                next_cookie: 1,
                fault,
                next_key: 1,
                scratch: vec![CqEntry::default(); 64],
                open_bundles: Vec::new(),
            }),
            inbox: Inbox::new(),
            token: Token::new(),
            poisoned: AtomicBool::new(false),
            provider: rails[0].provider.clone(),
            caps: rails[0].caps,
            rails,
            settings,
            stats: Stats::default(),
            my_name,
        };
        drop(list);
        for r in 0..engine.rails.len() {
            engine.post_rx_buffers(r)?;
        }
        Ok(engine)
    }

    /// The shm provider's name if a shm rail is open.
    pub fn shm_provider(&self) -> Option<&str> {
        self.rails
            .iter()
            .find(|r| r.kind == RailKind::Shm)
            .map(|r| r.provider.as_str())
    }

    fn register(
        &self,
        st: &mut State,
        rail: usize,
        addr: *const u8,
        len: usize,
        access: u64,
    ) -> Result<MemoryRegion, FiError> {
        let rl = &self.rails[rail];
        let key = if rl.caps.mr_prov_key {
            0
        } else {
            st.next_key += 1;
            st.next_key
        };
        let bind = if rl.caps.mr_endpoint {
            Some(rl.ep())
        } else {
            None
        };
        // SAFETY: every caller keeps the memory alive until the region is
        // dropped (bounce buffers own both; rendezvous state drops the MR
        // before completing the request that owns the user buffer).
        unsafe { MemoryRegion::register(&rl.domain, addr, len.max(1), access, key, bind) }
    }

    fn post_rx_buffers(&self, rail: usize) -> Result<(), EngineError> {
        // SAFETY: called from `open` before the engine is shared.
        let st = unsafe { &mut *self.state.get() };
        let rl = &self.rails[rail];
        for _ in 0..rl.rx_count {
            let mut rx = Box::new(RxBuf {
                ctx: OpCtx {
                    fi: Default::default(),
                    kind: OpKind::Rx,
                },
                mem: vec![0u8; rl.buf_size].into_boxed_slice(),
                mr: None,
            });
            if rl.caps.mr_local {
                rx.mr = Some(self.register(
                    st,
                    rail,
                    rx.mem.as_ptr(),
                    rx.mem.len(),
                    sys::FI_RECV as u64,
                )?);
            }
            self.repost_rx(rail, &mut rx).map_err(|r| {
                EngineError(format!(
                    "fi_recv on {} failed: {}",
                    rl.provider,
                    crate::fabric::strerror(-r as i32)
                ))
            })?;
            st.rails[rail].rx.push(rx);
        }
        Ok(())
    }

    fn repost_rx(&self, rail: usize, rx: &mut RxBuf) -> Result<(), isize> {
        let rl = &self.rails[rail];
        let desc = rx.mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
        loop {
            // SAFETY: the buffer and its context live in a Box owned by the
            // engine until after the endpoint is closed (Engine::drop).
            let r = unsafe {
                sys::fi_recv(
                    rl.ep().raw(),
                    rx.mem.as_mut_ptr() as *mut c_void,
                    rx.mem.len(),
                    desc,
                    u64::MAX,
                    &mut rx.ctx as *mut OpCtx as *mut c_void,
                )
            };
            if r != EAGAIN {
                return fi_ok(r);
            }
            // Receive queue full: drive the provider until it takes it.
            // SAFETY: a zero-length read just progresses the provider.
            unsafe { sys::fi_cq_read(rl.cq_raw(), ptr::null_mut(), 0) };
        }
    }

    /// What this rank publishes through the modex.
    pub fn local_name(&self) -> Result<Vec<u8>, EngineError> {
        let mut rails = Vec::with_capacity(self.rails.len());
        for r in &self.rails {
            rails.push(wire::RailAddr {
                kind: r.kind,
                max_eager: (r.buf_size - wire::BASE_LEN) as u32,
                addr: r.ep().name()?,
            });
        }
        Ok(wire::PeerInfo { rails }.encode())
    }

    fn check_poison(&self) -> Result<(), EngineError> {
        if self.poisoned.load(Ordering::Acquire) {
            Err(EngineError(
                "the engine is unusable after an earlier internal error".into(),
            ))
        } else {
            Ok(())
        }
    }

    /// Applies queued commands (and, with `poll_cq`, drains the completion
    /// queue) if the progress token is free; returns at once otherwise. The
    /// holder re-checks the inbox after releasing the token so that no
    /// command pushed meanwhile is left behind. Returns the number of CQ
    /// events handled.
    fn combine(&self, out: &mut Vec<Completion>, poll_cq: bool) -> usize {
        let mut events = 0;
        while !self.poisoned.load(Ordering::Acquire) && self.token.try_acquire() {
            {
                let _holder = Holder(self);
                // SAFETY: we hold the progress token, which grants exclusive
                // access to the state.
                let st = unsafe { &mut *self.state.get() };
                if poll_cq {
                    events += self.progress_locked(st, out);
                }
                self.apply_inbox(st, out);
            }
            if self.inbox.is_empty() {
                break;
            }
        }
        events
    }

    /// Runs `f` as the token holder, spinning until the token is free (and
    /// helping with queued work meanwhile). Only for rare operations off
    /// the send, receive and progress paths: peer setup and finalize.
    fn with_token<R>(
        &self,
        out: &mut Vec<Completion>,
        f: impl FnOnce(&mut State, &mut Vec<Completion>) -> R,
    ) -> Result<R, EngineError> {
        loop {
            self.check_poison()?;
            if self.token.try_acquire() {
                let r = {
                    let _holder = Holder(self);
                    // SAFETY: we hold the progress token.
                    let st = unsafe { &mut *self.state.get() };
                    self.apply_inbox(st, out);
                    f(st, out)
                };
                if !self.inbox.is_empty() {
                    self.combine(out, false);
                }
                return Ok(r);
            }
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }

    /// Queues a command and applies it (and anything queued before it) if
    /// the token is free.
    ///
    /// # Safety
    /// `cmd` must stay valid and untouched until it has been applied.
    unsafe fn submit(&self, cmd: *mut Cmd, out: &mut Vec<Completion>) -> Result<(), EngineError> {
        self.check_poison()?;
        // SAFETY: per the function contract.
        unsafe { self.inbox.push(cmd) };
        self.combine(out, false);
        Ok(())
    }

    /// Submits a command from the caller's stack and waits (driving
    /// progress) until it has been applied.
    /// Probes and cancels drain the completion queue first, so that they see
    /// every message that has arrived (an application may spin on
    /// MPI_Iprobe without any other progress).
    fn submit_and_wait(&self, cmd: &mut Cmd, out: &mut Vec<Completion>) -> Result<(), EngineError> {
        self.combine(out, true);
        // SAFETY: `cmd` outlives this call, which returns only once the
        // command was applied (or the engine is poisoned, after which no
        // one takes commands from the inbox any more).
        unsafe { self.submit(cmd, out)? };
        while !cmd.is_done() {
            self.check_poison()?;
            self.combine(out, true);
            std::hint::spin_loop();
        }
        Ok(())
    }

    fn apply_inbox(&self, st: &mut State, out: &mut Vec<Completion>) {
        for cmd in self.inbox.take_all() {
            self.apply(st, cmd, out);
        }
    }

    /// Applies one command (token held).
    fn apply(&self, st: &mut State, cmd: *mut Cmd, out: &mut Vec<Completion>) {
        // SAFETY: a command taken from the inbox is valid until we set its
        // `done` flag or complete its request; we copy the op first.
        let op = unsafe { (*cmd).op };
        let keep = match op {
            Op::Send { peer, .. } => peer.wrapping_sub(1),
            _ => NO_PEER,
        };
        self.flush_bundles(st, keep, out);
        match op {
            Op::Send {
                peer,
                ctx,
                src,
                tag,
                sync,
                req,
            } => {
                if let Err(e) = self.start_send(st, peer, ctx, src, tag, sync, req, out) {
                    self.error(&e.0);
                    self.stats.errors.fetch_add(1, Relaxed);
                    out.push(Completion::Send {
                        req,
                        status: Status::Failed,
                    });
                }
            }
            Op::Recv { sel, req } => match st.matcher.post(sel, req) {
                Ok((req, env, u)) => self.deliver_or_fail(st, req, env, u, out),
                Err(PostId(id)) => {
                    // SAFETY: initialised by irecv; token held.
                    unsafe { req.st().post_id = id };
                }
            },
            Op::Mrecv { msg, req } => {
                // SAFETY: the handle is a leaked Box of (Envelope,
                // Unexpected) made by a matched probe; MPI lets it be
                // received once.
                let boxed = unsafe { Box::from_raw(msg.0 as *mut (Envelope, Unexpected)) };
                let (env, u) = *boxed;
                self.deliver_or_fail(st, req, env, u, out);
            }
            Op::Cancel { req } => {
                // SAFETY: the request was started by this engine (the shim
                // cancels only its own requests); token held.
                let id = unsafe { req.st().post_id };
                let mut cancelled = false;
                if id != NO_POST {
                    if let Some(r) = st.matcher.cancel(PostId(id)) {
                        // SAFETY: as above.
                        unsafe { r.st().post_id = NO_POST };
                        out.push(Completion::Cancelled { req: r });
                        cancelled = true;
                    }
                }
                // SAFETY: the waiting caller reads the result after `done`.
                unsafe {
                    (*cmd).cancelled = cancelled;
                    (*cmd).done.store(true, Ordering::Release);
                }
            }
            Op::Probe { sel, remove } => {
                let found = if remove {
                    st.matcher.take_unexpected(&sel).map(|(env, u)| {
                        let info = ProbeInfo {
                            src: env.src,
                            tag: env.tag,
                            len: u.len(),
                        };
                        let h = MessageHandle(Box::into_raw(Box::new((env, u))) as *mut c_void);
                        (info, Some(h))
                    })
                } else {
                    st.matcher.probe(&sel).map(|(env, u)| {
                        (
                            ProbeInfo {
                                src: env.src,
                                tag: env.tag,
                                len: u.len(),
                            },
                            None,
                        )
                    })
                };
                // SAFETY: the waiting caller reads the result after `done`.
                unsafe {
                    (*cmd).found = found;
                    (*cmd).done.store(true, Ordering::Release);
                }
            }
        }
    }

    fn deliver_or_fail(
        &self,
        st: &mut State,
        req: ReqPtr,
        env: Envelope,
        u: Unexpected,
        out: &mut Vec<Completion>,
    ) {
        if let Err(e) = self.deliver(st, req, env, u, out) {
            self.error(&e.0);
            self.stats.errors.fetch_add(1, Relaxed);
            out.push(Completion::Recv {
                req,
                src: env.src,
                tag: env.tag,
                bytes: 0,
                status: Status::Failed,
            });
        }
    }

    /// Adds (or finds) a peer by process name and published endpoints;
    /// `local` says it runs on this host (Open MPI's locality from the
    /// modex). Returns its handle (index + 1).
    pub fn add_peer(
        &self,
        name: u64,
        modex: &[u8],
        local: bool,
        out: &mut Vec<Completion>,
    ) -> Result<usize, EngineError> {
        self.with_token(out, |st, _| self.add_peer_locked(st, name, modex, local))?
    }

    fn add_peer_locked(
        &self,
        st: &mut State,
        name: u64,
        modex: &[u8],
        local: bool,
    ) -> Result<usize, EngineError> {
        if let Some(&i) = st.by_name.get(&name) {
            return Ok(i + 1);
        }
        let info = wire::PeerInfo::decode(modex).map_err(EngineError)?;
        // Both sides apply the same rule to the same facts (locality is
        // symmetric, each publishes a shm address only if it opened a shm
        // rail), so a pair always talks over the same rail both ways.
        let shm = self.rails.iter().position(|r| r.kind == RailKind::Shm);
        let (rail, remote) = match (local, shm, info.rail(RailKind::Shm)) {
            (true, Some(r), Some(a)) => (r, a),
            _ => (
                0,
                info.rail(RailKind::Net)
                    .expect("decode checks the net entry"),
            ),
        };
        let fi_addr = self.rails[rail].av.insert(&remote.addr)?;
        let i = st.peers.len();
        st.rails[rail].peers += 1;
        match self.rails[rail].kind {
            RailKind::Net => &self.stats.net_peers,
            RailKind::Shm => &self.stats.shm_peers,
        }
        .fetch_add(1, Relaxed);
        st.peers.push(Peer {
            rail,
            // Never send an eager packet larger than the peer's buffers.
            eager_limit: self.rails[rail].eager_limit.min(remote.max_eager as usize),
            addr: fi_addr,
            inflight: 0,
            bundle: None,
            bundle_last: 0,
            tx_seq: 0,
            order: Reorder::new(),
        });
        st.by_name.insert(name, i);
        Ok(i + 1)
    }

    // ------------------------------------------------------------------
    // Sends

    fn take_tx(&self, st: &mut State, rail: usize) -> Result<Box<TxBuf>, EngineError> {
        if let Some(b) = st.rails[rail].tx_free.pop() {
            return Ok(b);
        }
        let rl = &self.rails[rail];
        let mut b = Box::new(TxBuf {
            ctx: OpCtx {
                fi: Default::default(),
                kind: OpKind::Tx,
            },
            mem: vec![0u8; rl.buf_size].into_boxed_slice(),
            mr: None,
            on_error: TxFollowUp::None,
            dest: 0,
            len: 0,
            zc: ptr::null(),
            zc_len: 0,
            peer: NO_PEER,
            bundled: Vec::new(),
        });
        if rl.caps.mr_local {
            b.mr =
                Some(self.register(st, rail, b.mem.as_ptr(), b.mem.len(), sys::FI_SEND as u64)?);
        }
        st.rails[rail].tx_total += 1;
        Ok(b)
    }

    /// Returns a transmit buffer to the pool. Bursts beyond the provider's
    /// queue depth grow the pool (each queued eager send holds its copy);
    /// the excess is freed again as the burst drains.
    fn recycle_tx(&self, st: &mut State, rail: usize, mut b: Box<TxBuf>) {
        if b.peer != NO_PEER {
            let p = &mut st.peers[b.peer];
            p.inflight = p.inflight.saturating_sub(1);
        }
        b.peer = NO_PEER;
        b.zc = ptr::null();
        b.zc_len = 0;
        b.bundled.clear();
        let rs = &mut st.rails[rail];
        if rs.tx_free.len() >= self.rails[rail].tx_depth.max(256) {
            rs.tx_total -= 1;
            drop(b);
        } else {
            rs.tx_free.push(b);
        }
    }

    /// Posts a filled transmit buffer; on EAGAIN it is queued for retry.
    fn post_tx(&self, st: &mut State, rail: usize, b: Box<TxBuf>) -> Result<(), EngineError> {
        if b.peer != NO_PEER {
            st.peers[b.peer].inflight += 1;
        }
        let raw = Box::into_raw(b);
        let rs = &mut st.rails[rail];
        if !rs.retry.is_empty() || rs.inflight >= self.rails[rail].tx_depth {
            rs.retry.push_back(Retry::Tx(raw));
            return Ok(());
        }
        match self.try_post_tx(rail, raw) {
            Ok(()) => {
                rs.inflight += 1;
                Ok(())
            }
            Err(EAGAIN) => {
                rs.retry.push_back(Retry::Tx(raw));
                Ok(())
            }
            Err(r) => {
                // SAFETY: the provider rejected the buffer, so we own it again.
                let b = unsafe { Box::from_raw(raw) };
                let why = crate::fabric::strerror(-r as i32);
                let Some(b) = self.try_resend(st, rail, b, &why) else {
                    self.stats.errors.fetch_add(1, Relaxed);
                    return Ok(());
                };
                self.recycle_tx(st, rail, b);
                Err(EngineError(format!("fi_send failed: {why}")))
            }
        }
    }

    fn try_post_tx(&self, rail: usize, raw: *mut TxBuf) -> Result<(), isize> {
        // SAFETY: `raw` is a TxBuf we own (leaked Box) until its completion.
        let b = unsafe { &mut *raw };
        let desc = b.mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
        let ep = self.rails[rail].ep().raw();
        let ctx = &mut b.ctx as *mut OpCtx as *mut c_void;
        if !b.zc.is_null() {
            let iov = [
                libc::iovec {
                    iov_base: b.mem.as_ptr() as *mut c_void,
                    iov_len: b.len,
                },
                libc::iovec {
                    iov_base: b.zc as *mut c_void,
                    iov_len: b.zc_len,
                },
            ];
            // Zero-copy is only chosen on rails without FI_MR_LOCAL, so no
            // descriptors are needed.
            let mut desc = [ptr::null_mut(); 2];
            // SAFETY: the header lives in the Box and the payload in the
            // user's send buffer, which MPI keeps untouched until the
            // request completes, which happens on this send's completion;
            // the provider copies the iov array itself.
            return fi_ok(unsafe {
                sys::fi_sendv(
                    ep,
                    iov.as_ptr() as *const sys::iovec,
                    desc.as_mut_ptr(),
                    2,
                    b.dest,
                    ctx,
                )
            });
        }
        // SAFETY: buffer and context stay alive until the completion hands
        // the Box back to us.
        fi_ok(unsafe {
            sys::fi_send(
                ep,
                b.mem.as_ptr() as *const c_void,
                b.len,
                desc,
                b.dest,
                ctx,
            )
        })
    }

    fn send_ctrl(&self, st: &mut State, peer: usize, hdr: &Header) -> Result<(), EngineError> {
        let rail = st.peers[peer].rail;
        let mut b = self.take_tx(st, rail)?;
        let n = hdr.encode(&mut b.mem);
        b.len = n;
        b.dest = st.peers[peer].addr;
        b.peer = peer;
        b.on_error = TxFollowUp::Resend(CTRL_RESENDS);
        self.post_tx(st, rail, b)
    }

    /// Appends an eager message to the peer's open bundle, or starts one
    /// if an earlier packet to the peer is still in flight. Returns false
    /// (and does nothing) when the message must be sent on its own.
    #[allow(clippy::too_many_arguments)]
    fn coalesce(
        &self,
        st: &mut State,
        peer: usize,
        hdr: &Header,
        buf: *const u8,
        len: usize,
        req: ReqPtr,
        out: &mut Vec<Completion>,
    ) -> Result<bool, EngineError> {
        let need = wire::BASE_LEN + len;
        // The packet must fit the receiver's bounce buffer.
        let cap = wire::BASE_LEN + st.peers[peer].eager_limit;
        let p = &mut st.peers[peer];
        if let Some(b) = p.bundle.as_mut() {
            if b.len + need <= cap.min(b.mem.len()) {
                wire::set_more(&mut b.mem[p.bundle_last..]);
                let at = b.len;
                // SAFETY: the user buffer holds `len` readable bytes (MPI
                // send semantics).
                b.len = unsafe { put_eager(&mut b.mem, at, hdr, buf, len) };
                b.bundled.push(req);
                p.bundle_last = at;
                self.stats.coalesced.fetch_add(1, Relaxed);
                return Ok(true);
            }
            self.flush_bundle(st, peer, out)?;
        }
        if st.peers[peer].inflight == 0 {
            return Ok(false);
        }
        let rail = st.peers[peer].rail;
        let mut b = self.take_tx(st, rail)?;
        // SAFETY: as above.
        b.len = unsafe { put_eager(&mut b.mem, 0, hdr, buf, len) };
        b.dest = st.peers[peer].addr;
        b.peer = peer;
        // Its messages have used their sequence numbers: a failed post is
        // retried, never silently dropped.
        b.on_error = TxFollowUp::Resend(CTRL_RESENDS);
        b.bundled.push(req);
        let p = &mut st.peers[peer];
        p.bundle = Some(b);
        p.bundle_last = 0;
        // Other peers' bundles were flushed when this send was applied, so
        // the list holds at most this peer (listed once).
        if !st.open_bundles.contains(&peer) {
            st.open_bundles.push(peer);
        }
        Ok(true)
    }

    /// Posts the peer's open bundle, if any, and completes the sends in it
    /// (their data is in the bundle).
    fn flush_bundle(
        &self,
        st: &mut State,
        peer: usize,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        let Some(mut b) = st.peers[peer].bundle.take() else {
            return Ok(());
        };
        out.extend(b.bundled.drain(..).map(|req| Completion::Send {
            req,
            status: Status::Ok,
        }));
        let rail = st.peers[peer].rail;
        self.post_tx(st, rail, b)
    }

    /// Posts every open bundle except `keep`'s. A bundle is held only
    /// while its sender keeps issuing eager sends to that peer: any other
    /// operation, and every progress call, sends it.
    fn flush_bundles(&self, st: &mut State, keep: usize, out: &mut Vec<Completion>) {
        if st.open_bundles.is_empty() {
            return;
        }
        let mut peers = std::mem::take(&mut st.open_bundles);
        for &p in &peers {
            if p == keep {
                continue;
            }
            if let Err(e) = self.flush_bundle(st, p, out) {
                self.stats.errors.fetch_add(1, Relaxed);
                self.error(&format!("could not send coalesced messages: {}", e.0));
            }
        }
        peers.retain(|&p| p == keep && st.peers[p].bundle.is_some());
        st.open_bundles = peers;
    }

    /// Starts a send. `sync` requests MPI_Ssend semantics.
    ///
    /// # Safety
    /// `buf` must be readable for `len` bytes and `req` must point at a
    /// request of our layout, both until the send completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn isend(
        &self,
        peer: usize,
        ctx: u32,
        src: i32,
        tag: i32,
        buf: *const u8,
        len: usize,
        sync: bool,
        req: ReqPtr,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        let op = Op::Send {
            peer,
            ctx,
            src,
            tag,
            sync,
            req,
        };
        // SAFETY: per the function contract.
        unsafe { self.start(req, buf as *mut u8, len, op, out) }
    }

    #[allow(clippy::too_many_arguments)]
    fn start_send(
        &self,
        st: &mut State,
        peer_handle: usize,
        ctx: u32,
        my_rank: i32,
        tag: i32,
        sync: bool,
        req: ReqPtr,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        let peer = peer_handle
            .checked_sub(1)
            .filter(|&p| p < st.peers.len())
            .ok_or_else(|| EngineError(format!("send to unknown peer handle {peer_handle}")))?;
        // SAFETY: initialised by isend; token held.
        let (buf, len) = unsafe {
            let rs = req.st();
            (rs.buf as *const u8, rs.cap)
        };
        let seq = st.peers[peer].tx_seq;
        let rail = st.peers[peer].rail;
        let mut hdr = Header::new(Kind::Eager);
        hdr.ctx = ctx;
        hdr.src = my_rank;
        hdr.tag = tag;
        hdr.seq = seq;
        hdr.sender = self.my_name;
        hdr.len = len as u64;
        self.stats.sent_msgs.fetch_add(1, Relaxed);
        self.stats.sent_bytes.fetch_add(len as u64, Relaxed);
        if len <= st.peers[peer].eager_limit {
            if st.fault == Fault::BadPacket {
                st.fault = Fault::None;
                let mut b = self.take_tx(st, rail)?;
                let n = hdr.encode(&mut b.mem);
                b.mem[0] = 0x00; // not our magic
                b.len = n;
                b.dest = st.peers[peer].addr;
                b.on_error = TxFollowUp::None;
                self.post_tx(st, rail, b)?;
            }
            // Synchronous sends complete on the receiver's ack, which may
            // overtake the local transmit completion: they always copy.
            let zero_copy = !sync && len >= ZERO_COPY_MIN && self.rails[rail].zero_copy;
            if !sync && !zero_copy && self.settings.coalesce {
                if self.coalesce(st, peer, &hdr, buf, len, req, out)? {
                    // The request completes when its packet is posted.
                    st.peers[peer].tx_seq = seq.wrapping_add(1);
                    self.stats.eager.fetch_add(1, Relaxed);
                    return Ok(());
                }
            } else {
                self.flush_bundle(st, peer, out)?;
            }
            let mut b = self.take_tx(st, rail)?;
            if sync {
                hdr.flags |= wire::FLAG_SYNC;
                hdr.cookie = st.next_cookie;
                st.next_cookie += 1;
                b.on_error = TxFollowUp::Sync(hdr.cookie);
            } else if zero_copy {
                b.on_error = TxFollowUp::Complete(req);
            } else {
                b.on_error = TxFollowUp::None;
            }
            if zero_copy {
                b.zc = buf;
                b.zc_len = len;
                b.len = hdr.encode(&mut b.mem);
            } else {
                // SAFETY: the user buffer holds `len` readable bytes (MPI
                // send semantics).
                b.len = unsafe { put_eager(&mut b.mem, 0, &hdr, buf, len) };
            }
            b.dest = st.peers[peer].addr;
            b.peer = peer;
            self.post_tx(st, rail, b)?;
            st.peers[peer].tx_seq = seq.wrapping_add(1);
            self.stats.eager.fetch_add(1, Relaxed);
            if sync {
                st.sync_wait.insert(hdr.cookie, req);
            } else if !zero_copy {
                out.push(Completion::Send {
                    req,
                    status: Status::Ok,
                });
            }
            return Ok(());
        }
        // Rendezvous.
        self.flush_bundle(st, peer, out)?;
        let cookie = st.next_cookie;
        st.next_cookie += 1;
        hdr.kind = Kind::Rts;
        hdr.cookie = cookie;
        let mut mr = None;
        if self.rails[rail].rndv_read {
            let m = self.register(st, rail, buf, len, sys::FI_REMOTE_READ as u64)?;
            hdr.ext0 = if self.rails[rail].caps.mr_virt_addr {
                buf as u64
            } else {
                0
            };
            hdr.ext1 = m.key();
            mr = Some(m);
        } else {
            hdr.flags |= wire::FLAG_RNDV_SEND;
        }
        st.rndv_send.insert(
            cookie,
            SendRndv {
                req,
                buf,
                len,
                peer,
                mr,
                outstanding: 0,
                failed: false,
            },
        );
        let mut b = self.take_tx(st, rail)?;
        b.len = hdr.encode(&mut b.mem);
        b.dest = st.peers[peer].addr;
        b.peer = peer;
        b.on_error = TxFollowUp::RndvSend(cookie);
        if let Err(e) = self.post_tx(st, rail, b) {
            st.rndv_send.remove(&cookie);
            return Err(e);
        }
        st.peers[peer].tx_seq = seq.wrapping_add(1);
        self.stats.rndv.fetch_add(1, Relaxed);
        Ok(())
    }

    // ------------------------------------------------------------------
    // Receives

    /// Posts a receive; may complete at once from the unexpected queue.
    ///
    /// # Safety
    /// `buf` must be writable for `cap` bytes and `req` must point at a
    /// request of our layout, both until the receive completes.
    pub unsafe fn irecv(
        &self,
        sel: Selector,
        buf: *mut u8,
        cap: usize,
        req: ReqPtr,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        // SAFETY: per the function contract.
        unsafe { self.start(req, buf, cap, Op::Recv { sel, req }, out) }
    }

    /// Initialises a request's state and submits its command.
    ///
    /// # Safety
    /// As for `isend`/`irecv`: buffer and request valid until completion.
    unsafe fn start(
        &self,
        req: ReqPtr,
        buf: *mut u8,
        cap: usize,
        op: Op,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        // SAFETY: per the function contract; the command lives in the
        // request, which stays valid until the operation completes.
        unsafe {
            let cmd = req.init(buf, cap, op);
            self.submit(cmd, out)
        }
    }

    /// Iprobe: drains the completion queue, then looks at the unexpected
    /// queue.
    pub fn iprobe(
        &self,
        sel: Selector,
        out: &mut Vec<Completion>,
    ) -> Result<Option<ProbeInfo>, EngineError> {
        let mut cmd = Cmd::new(Op::Probe { sel, remove: false });
        self.submit_and_wait(&mut cmd, out)?;
        Ok(cmd.found.map(|(info, _)| info))
    }

    /// Improbe: like iprobe, but removes the message and returns an opaque
    /// handle for `imrecv`.
    pub fn improbe(
        &self,
        sel: Selector,
        out: &mut Vec<Completion>,
    ) -> Result<Option<(ProbeInfo, MessageHandle)>, EngineError> {
        let mut cmd = Cmd::new(Op::Probe { sel, remove: true });
        self.submit_and_wait(&mut cmd, out)?;
        Ok(cmd.found.and_then(|(info, h)| h.map(|h| (info, h))))
    }

    /// Receives a message taken by `improbe`.
    ///
    /// # Safety
    /// `msg` must come from `improbe` of this engine and be used once; the
    /// rest as for `irecv`.
    pub unsafe fn imrecv(
        &self,
        msg: MessageHandle,
        buf: *mut u8,
        cap: usize,
        req: ReqPtr,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        // SAFETY: per the function contract.
        unsafe { self.start(req, buf, cap, Op::Mrecv { msg, req }, out) }
    }

    /// Cancels a queued receive. Returns true if it was cancelled (and a
    /// `Cancelled` completion was queued).
    pub fn cancel(&self, req: ReqPtr, out: &mut Vec<Completion>) -> Result<bool, EngineError> {
        let mut cmd = Cmd::new(Op::Cancel { req });
        self.submit_and_wait(&mut cmd, out)?;
        Ok(cmd.cancelled)
    }

    /// Hands a matched message to a receive request.
    fn deliver(
        &self,
        st: &mut State,
        req: ReqPtr,
        env: Envelope,
        u: Unexpected,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        match u {
            Unexpected::Eager { peer, data, sync } => {
                self.finish_eager(st, req, env, peer, &data, sync, out);
                Ok(())
            }
            Unexpected::Rts { peer, hdr } => self.start_rndv_recv(st, req, peer, &hdr, out),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_eager(
        &self,
        st: &mut State,
        req: ReqPtr,
        env: Envelope,
        peer: usize,
        data: &[u8],
        sync: Option<u64>,
        out: &mut Vec<Completion>,
    ) {
        // SAFETY: a matched request was initialised by irecv/imrecv; token held.
        let rs = unsafe { req.buffer() };
        let n = data.len().min(rs.cap);
        if n > 0 {
            // SAFETY: the receive buffer has `cap` writable bytes and we
            // copy at most that many.
            unsafe { ptr::copy_nonoverlapping(data.as_ptr(), rs.buf, n) };
        }
        if let Some(cookie) = sync {
            let mut ack = Header::new(Kind::SyncAck);
            ack.cookie = cookie;
            ack.sender = self.my_name;
            if let Err(e) = self.send_ctrl(st, peer, &ack) {
                self.error(&format!(
                    "could not acknowledge a synchronous send: {}",
                    e.0
                ));
            }
        }
        self.stats.recv_msgs.fetch_add(1, Relaxed);
        self.stats.recv_bytes.fetch_add(n as u64, Relaxed);
        out.push(Completion::Recv {
            req,
            src: env.src,
            tag: env.tag,
            bytes: n,
            status: if data.len() > rs.cap {
                Status::Truncated
            } else {
                Status::Ok
            },
        });
    }

    fn start_rndv_recv(
        &self,
        st: &mut State,
        req: ReqPtr,
        peer: usize,
        hdr: &Header,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        // SAFETY: a matched request was initialised by irecv/imrecv; token held.
        let rs = unsafe { req.buffer() };
        let want = (hdr.len.min(rs.cap as u64)) as usize;
        let read = hdr.flags & wire::FLAG_RNDV_SEND == 0;
        let rail = st.peers[peer].rail;
        let rl = &self.rails[rail];
        let id = st.next_cookie & RNDV_ID_MASK;
        st.next_cookie += 1;
        let mut key = hdr.ext1;
        if read && st.fault == Fault::RmaKey {
            st.fault = Fault::None;
            key ^= 0x5a5a_5a5a_5a5a;
        }
        let mut r = RecvRndv {
            req,
            peer,
            src: hdr.src,
            tag: hdr.tag,
            cookie: hdr.cookie,
            want,
            truncated: hdr.len > rs.cap as u64,
            read,
            remote_addr: hdr.ext0,
            key,
            next_off: 0,
            outstanding: 0,
            failed: false,
            mr: None,
        };
        if want > 0 && rl.caps.mr_local {
            let access = if read { sys::FI_READ } else { sys::FI_RECV } as u64;
            match self.register(st, rail, rs.buf, want, access) {
                Ok(m) => r.mr = Some(m),
                Err(e) => {
                    self.error(&format!("cannot register a receive buffer: {e}"));
                    r.failed = true;
                }
            }
        }
        if !read && !r.failed {
            // Post every tagged receive, then grant the data.
            let mut ops = Vec::new();
            let mut off = 0;
            while off < want {
                let n = (want - off).min(rl.chunk);
                ops.push(ChunkOp {
                    ctx: OpCtx {
                        fi: Default::default(),
                        kind: OpKind::Chunk,
                    },
                    id,
                    recv_side: true,
                    rail,
                    op: ChunkKind::TRecv,
                    // SAFETY: off < want <= cap.
                    local: unsafe { rs.buf.add(off) },
                    len: n,
                    offset: ((id << CHUNK_BITS) | ops.len() as u64) as usize,
                });
                off += n;
            }
            r.outstanding = ops.len();
            r.next_off = want;
            st.rndv_recv.insert(id, r);
            for op in ops {
                self.queue_chunk(st, op);
            }
            let mut cts = Header::new(Kind::Cts);
            cts.cookie = hdr.cookie;
            cts.sender = self.my_name;
            cts.ext0 = id << CHUNK_BITS;
            cts.ext1 = want as u64;
            cts.len = hdr.len;
            if let Err(e) = self.send_ctrl(st, peer, &cts) {
                self.error(&format!("could not send a rendezvous grant: {}", e.0));
            }
            if want == 0 {
                self.finish_rndv_recv(st, id, out);
            }
            return Ok(());
        }
        st.rndv_recv.insert(id, r);
        self.pump_reads(st, id, out);
        Ok(())
    }

    /// Issues reads of a read rendezvous up to the in-flight limit and
    /// finishes it when everything has landed.
    fn pump_reads(&self, st: &mut State, id: u64, out: &mut Vec<Completion>) {
        let Some(r) = st.rndv_recv.get_mut(&id) else {
            return;
        };
        let mut ops = Vec::new();
        if r.read && !r.failed {
            // SAFETY: the request is matched and initialised; token held.
            let base = unsafe { r.req.st().buf };
            let rail = st.peers[r.peer].rail;
            let chunk = self.rails[rail].chunk;
            while r.next_off < r.want && r.outstanding < READS_IN_FLIGHT {
                let n = (r.want - r.next_off).min(chunk);
                ops.push(ChunkOp {
                    ctx: OpCtx {
                        fi: Default::default(),
                        kind: OpKind::Chunk,
                    },
                    id,
                    recv_side: true,
                    rail,
                    op: ChunkKind::Read,
                    // SAFETY: next_off < want <= cap.
                    local: unsafe { base.add(r.next_off) },
                    len: n,
                    offset: r.next_off,
                });
                r.next_off += n;
                r.outstanding += 1;
            }
        }
        let done = r.outstanding == 0 && (r.next_off >= r.want || r.failed);
        for op in ops {
            self.queue_chunk(st, op);
        }
        if done {
            self.finish_rndv_recv(st, id, out);
        }
    }

    fn finish_rndv_recv(&self, st: &mut State, id: u64, out: &mut Vec<Completion>) {
        let Some(r) = st.rndv_recv.remove(&id) else {
            return;
        };
        drop(r.mr);
        if r.read {
            let mut fin = Header::new(Kind::Fin);
            fin.cookie = r.cookie;
            fin.sender = self.my_name;
            fin.status = r.failed as u32;
            if let Err(e) = self.send_ctrl(st, r.peer, &fin) {
                self.error(&format!("could not send a rendezvous FIN: {}", e.0));
            }
        }
        let status = if r.failed {
            self.stats.errors.fetch_add(1, Relaxed);
            Status::Failed
        } else if r.truncated {
            Status::Truncated
        } else {
            Status::Ok
        };
        self.stats.recv_msgs.fetch_add(1, Relaxed);
        self.stats.recv_bytes.fetch_add(r.want as u64, Relaxed);
        out.push(Completion::Recv {
            req: r.req,
            src: r.src,
            tag: r.tag,
            bytes: if r.failed { 0 } else { r.want },
            status,
        });
    }

    fn queue_chunk(&self, st: &mut State, op: ChunkOp) {
        let rail = op.rail;
        let raw = Box::into_raw(Box::new(op));
        let rs = &mut st.rails[rail];
        if !rs.retry.is_empty() || rs.inflight >= self.rails[rail].tx_depth {
            rs.retry.push_back(Retry::Chunk(raw));
            return;
        }
        match self.try_post_chunk(st, raw) {
            Ok(()) => st.rails[rail].inflight += 1,
            Err(EAGAIN) => st.rails[rail].retry.push_back(Retry::Chunk(raw)),
            Err(r) => self.chunk_failed(st, raw, &crate::fabric::strerror(-r as i32)),
        }
    }

    fn try_post_chunk(&self, st: &mut State, raw: *mut ChunkOp) -> Result<(), isize> {
        // SAFETY: `raw` is a leaked Box we own until its completion.
        let c = unsafe { &mut *raw };
        let ctx = &mut c.ctx as *mut OpCtx as *mut c_void;
        let ep = self.rails[c.rail].ep().raw();
        let ret = if c.recv_side {
            let r = st.rndv_recv.get(&c.id).expect("live rendezvous");
            let desc = r.mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
            let addr = st.peers[r.peer].addr;
            match c.op {
                // SAFETY: the destination lies inside the matched receive
                // buffer, which stays valid until the request completes.
                ChunkKind::Read => unsafe {
                    sys::fi_read(
                        ep,
                        c.local as *mut c_void,
                        c.len,
                        desc,
                        addr,
                        r.remote_addr.wrapping_add(c.offset as u64),
                        r.key,
                        ctx,
                    )
                },
                // SAFETY: as above.
                ChunkKind::TRecv => unsafe {
                    sys::fi_trecv(
                        ep,
                        c.local as *mut c_void,
                        c.len,
                        desc,
                        addr,
                        c.offset as u64,
                        0,
                        ctx,
                    )
                },
                ChunkKind::TSend => unreachable!("send chunks belong to the send side"),
            }
        } else {
            let s = st.rndv_send.get(&c.id).expect("live rendezvous");
            let desc = s.mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
            let addr = st.peers[s.peer].addr;
            // SAFETY: the source lies inside the user's send buffer, valid
            // until the send request completes.
            unsafe {
                sys::fi_tsend(
                    ep,
                    c.local as *const c_void,
                    c.len,
                    desc,
                    addr,
                    c.offset as u64,
                    ctx,
                )
            }
        };
        fi_ok(ret)
    }

    fn chunk_failed(&self, st: &mut State, raw: *mut ChunkOp, why: &str) {
        // SAFETY: the op is ours again (rejected or completed with error).
        let c = unsafe { Box::from_raw(raw) };
        self.error(&format!(
            "rendezvous {:?} of {} bytes failed: {why}",
            c.op, c.len
        ));
        if c.recv_side {
            if let Some(r) = st.rndv_recv.get_mut(&c.id) {
                r.failed = true;
                r.outstanding -= 1;
            }
        } else if let Some(s) = st.rndv_send.get_mut(&c.id) {
            s.failed = true;
            s.outstanding -= 1;
        }
    }

    // ------------------------------------------------------------------
    // Progress

    /// Drains the completion queue once. Returns the number of events.
    pub fn progress(&self, out: &mut Vec<Completion>) -> usize {
        self.combine(out, true)
    }

    fn progress_locked(&self, st: &mut State, out: &mut Vec<Completion>) -> usize {
        self.flush_bundles(st, NO_PEER, out);
        let mut total = 0;
        for rail in 0..self.rails.len() {
            let rs = &st.rails[rail];
            if rs.peers == 0 && rs.inflight == 0 && rs.retry.is_empty() {
                continue;
            }
            total += self.progress_rail(st, rail, out);
        }
        total
    }

    fn progress_rail(&self, st: &mut State, rail: usize, out: &mut Vec<Completion>) -> usize {
        let mut total = 0;
        let cq = &self.rails[rail].cq;
        self.run_retries(st, rail, out);
        loop {
            let mut entries = std::mem::take(&mut st.scratch);
            let n = match cq.read(&mut entries) {
                Ok(n) => n,
                Err(r) if r == -(sys::FI_EAVAIL as i64) => {
                    st.scratch = entries;
                    self.handle_cq_error(st, rail, out);
                    total += 1;
                    continue;
                }
                Err(r) => {
                    st.scratch = entries;
                    self.error(&format!(
                        "fi_cq_read on {} failed: {}",
                        self.rails[rail].provider,
                        crate::fabric::strerror(-r as i32)
                    ));
                    return total;
                }
            };
            for e in &entries[..n] {
                self.handle_completion(st, rail, e, out);
            }
            st.scratch = entries;
            total += n;
            if n < st.scratch.len() {
                break;
            }
        }
        if total > 0 {
            self.run_retries(st, rail, out);
        }
        total
    }

    fn run_retries(&self, st: &mut State, rail: usize, out: &mut Vec<Completion>) {
        while st.rails[rail].inflight < self.rails[rail].tx_depth {
            let Some(item) = st.rails[rail].retry.pop_front() else {
                return;
            };
            let r = match item {
                Retry::Tx(raw) => self.try_post_tx(rail, raw),
                Retry::Chunk(raw) => self.try_post_chunk(st, raw),
            };
            match r {
                Ok(()) => st.rails[rail].inflight += 1,
                Err(EAGAIN) => {
                    st.rails[rail].retry.push_front(item);
                    return;
                }
                Err(code) => {
                    let why = crate::fabric::strerror(-code as i32);
                    match item {
                        Retry::Tx(raw) => self.tx_failed(st, rail, raw, &why, out),
                        Retry::Chunk(raw) => {
                            self.chunk_failed(st, raw, &why);
                            self.after_chunk(st, raw_id(raw), out);
                        }
                    }
                }
            }
        }
    }

    fn handle_completion(
        &self,
        st: &mut State,
        rail: usize,
        e: &CqEntry,
        out: &mut Vec<Completion>,
    ) {
        if e.op_context.is_null() {
            return;
        }
        // SAFETY: every operation we post carries an OpCtx as the first
        // field of its container; the provider returns it unchanged.
        let kind = unsafe { (*(e.op_context as *const OpCtx)).kind };
        match kind {
            OpKind::Rx => {
                let rx = e.op_context as *mut RxBuf;
                // SAFETY: rx buffers live in `st.rx` for the engine's life;
                // this one is ours until we repost it.
                let rxb = unsafe { &mut *rx };
                let len = e.len.min(rxb.mem.len());
                let pkt: &[u8] = &rxb.mem[..len];
                // SAFETY: `pkt` borrows the buffer, which is not reposted
                // until handle_packet returns.
                let pkt: &[u8] = unsafe { std::slice::from_raw_parts(pkt.as_ptr(), pkt.len()) };
                self.handle_packet(st, pkt, out);
                if let Err(r) = self.repost_rx(rail, rxb) {
                    self.error(&format!(
                        "could not repost a receive buffer: {}",
                        crate::fabric::strerror(-r as i32)
                    ));
                }
            }
            OpKind::Tx => {
                // SAFETY: a posted TxBuf is a leaked Box; its completion
                // returns ownership.
                let b = unsafe { Box::from_raw(e.op_context as *mut TxBuf) };
                if let TxFollowUp::Complete(req) = b.on_error {
                    out.push(Completion::Send {
                        req,
                        status: Status::Ok,
                    });
                }
                self.recycle_tx(st, rail, b);
                let rs = &mut st.rails[rail];
                rs.inflight = rs.inflight.saturating_sub(1);
            }
            OpKind::Chunk => {
                let raw = e.op_context as *mut ChunkOp;
                // SAFETY: a posted chunk is a leaked Box; completion returns it.
                let c = unsafe { Box::from_raw(raw) };
                let rs = &mut st.rails[rail];
                rs.inflight = rs.inflight.saturating_sub(1);
                if c.recv_side {
                    if let Some(r) = st.rndv_recv.get_mut(&c.id) {
                        r.outstanding -= 1;
                    }
                } else if let Some(s) = st.rndv_send.get_mut(&c.id) {
                    s.outstanding -= 1;
                }
                self.after_chunk_side(st, c.id, c.recv_side, out);
            }
        }
    }

    fn after_chunk(&self, st: &mut State, id_side: (u64, bool), out: &mut Vec<Completion>) {
        self.after_chunk_side(st, id_side.0, id_side.1, out);
    }

    fn after_chunk_side(
        &self,
        st: &mut State,
        id: u64,
        recv_side: bool,
        out: &mut Vec<Completion>,
    ) {
        if recv_side {
            let Some(r) = st.rndv_recv.get(&id) else {
                return;
            };
            if r.read {
                self.pump_reads(st, id, out);
            } else if r.outstanding == 0 {
                self.finish_rndv_recv(st, id, out);
            }
        } else {
            let Some(s) = st.rndv_send.get(&id) else {
                return;
            };
            if s.outstanding == 0 {
                self.finish_rndv_send(st, id, s.failed, out);
            }
        }
    }

    fn finish_rndv_send(
        &self,
        st: &mut State,
        cookie: u64,
        failed: bool,
        out: &mut Vec<Completion>,
    ) {
        if let Some(s) = st.rndv_send.remove(&cookie) {
            drop(s.mr);
            if failed {
                self.stats.errors.fetch_add(1, Relaxed);
            }
            out.push(Completion::Send {
                req: s.req,
                status: if failed { Status::Failed } else { Status::Ok },
            });
        }
    }

    fn handle_cq_error(&self, st: &mut State, rail: usize, out: &mut Vec<Completion>) {
        let Some(err) = self.rails[rail].cq.read_error() else {
            return;
        };
        if err.context.is_null() {
            self.error(&format!(
                "completion error without a context: {}",
                err.message
            ));
            return;
        }
        // SAFETY: as in handle_completion.
        let kind = unsafe { (*(err.context as *const OpCtx)).kind };
        match kind {
            OpKind::Rx => {
                let canceled = err.err == sys::FI_ECANCELED as i32;
                if !canceled {
                    self.stats.errors.fetch_add(1, Relaxed);
                    self.error(&format!("receive failed: {}", err.message));
                    // SAFETY: as in handle_completion.
                    let rxb = unsafe { &mut *(err.context as *mut RxBuf) };
                    let _ = self.repost_rx(rail, rxb);
                }
            }
            OpKind::Tx => {
                let rs = &mut st.rails[rail];
                rs.inflight = rs.inflight.saturating_sub(1);
                let raw = err.context as *mut TxBuf;
                self.tx_failed(st, rail, raw, &err.message, out);
            }
            OpKind::Chunk => {
                let rs = &mut st.rails[rail];
                rs.inflight = rs.inflight.saturating_sub(1);
                let raw = err.context as *mut ChunkOp;
                let id = raw_id(raw);
                self.stats.errors.fetch_add(1, Relaxed);
                self.chunk_failed(st, raw, &err.message);
                self.after_chunk(st, id, out);
            }
        }
    }

    /// Queues a failed packet for another try if it has attempts left
    /// (control packets, and coalesced packets whose messages already hold
    /// their sequence numbers); otherwise hands it back.
    fn try_resend(
        &self,
        st: &mut State,
        rail: usize,
        mut b: Box<TxBuf>,
        why: &str,
    ) -> Option<Box<TxBuf>> {
        match b.on_error {
            TxFollowUp::Resend(n) if n > 0 => {
                b.on_error = TxFollowUp::Resend(n - 1);
                self.error(&format!(
                    "packet send failed: {why}; resending ({n} attempts left)"
                ));
                st.rails[rail].retry.push_back(Retry::Tx(Box::into_raw(b)));
                None
            }
            _ => Some(b),
        }
    }

    fn tx_failed(
        &self,
        st: &mut State,
        rail: usize,
        raw: *mut TxBuf,
        why: &str,
        out: &mut Vec<Completion>,
    ) {
        // SAFETY: the buffer is ours again after an error completion or a
        // rejected post.
        let b = unsafe { Box::from_raw(raw) };
        self.stats.errors.fetch_add(1, Relaxed);
        let Some(b) = self.try_resend(st, rail, b, why) else {
            return;
        };
        self.error(&format!("send of {} bytes failed: {why}", b.len));
        match b.on_error {
            TxFollowUp::None | TxFollowUp::Resend(_) => {}
            TxFollowUp::Sync(cookie) => {
                if let Some(req) = st.sync_wait.remove(&cookie) {
                    out.push(Completion::Send {
                        req,
                        status: Status::Failed,
                    });
                }
            }
            TxFollowUp::RndvSend(cookie) => self.finish_rndv_send(st, cookie, true, out),
            TxFollowUp::Complete(req) => out.push(Completion::Send {
                req,
                status: Status::Failed,
            }),
        }
        self.recycle_tx(st, rail, b);
    }

    /// Parses one received packet and acts on it.
    /// Parses one received packet (one message, or several coalesced
    /// eager messages) and acts on each message.
    fn handle_packet(&self, st: &mut State, pkt: &[u8], out: &mut Vec<Completion>) {
        let mut off = 0;
        while off < pkt.len() {
            match Header::decode_prefix(&pkt[off..]) {
                Ok((hdr, n)) => {
                    self.handle_message(st, hdr, &pkt[off..off + n], out);
                    off += n;
                }
                Err(e) => {
                    self.stats.errors.fetch_add(1, Relaxed);
                    self.error(&format!(
                        "dropped a malformed packet ({} bytes at offset {off} of {}): {e}",
                        pkt.len() - off,
                        pkt.len()
                    ));
                    return;
                }
            }
        }
        if pkt.is_empty() {
            self.stats.errors.fetch_add(1, Relaxed);
            self.error("dropped an empty packet");
        }
    }

    /// Acts on one message; `pkt` holds exactly its header and payload.
    fn handle_message(&self, st: &mut State, hdr: Header, pkt: &[u8], out: &mut Vec<Completion>) {
        let Some(&peer) = st.by_name.get(&hdr.sender) else {
            self.stats.errors.fetch_add(1, Relaxed);
            self.error(&format!(
                "dropped a {:?} packet from unknown process 0x{:x}",
                hdr.kind, hdr.sender
            ));
            return;
        };
        match hdr.kind {
            Kind::Eager | Kind::Rts => {
                let payload = &pkt[hdr.wire_len()..];
                let p = &mut st.peers[peer];
                if p.order.take_in_order(hdr.seq) {
                    // In order: match straight out of the bounce buffer.
                    self.on_matchable(st, peer, &hdr, payload, out);
                } else {
                    let mut ready = Vec::new();
                    let held = Held {
                        hdr,
                        data: payload.to_vec(),
                    };
                    if p.order.accept(hdr.seq, held, &mut ready).is_err() {
                        self.stats.errors.fetch_add(1, Relaxed);
                        self.error(&format!("dropped a duplicate packet (seq {})", hdr.seq));
                        return;
                    }
                    for h in ready {
                        self.on_matchable(st, peer, &h.hdr, &h.data, out);
                    }
                }
            }
            Kind::SyncAck => match st.sync_wait.remove(&hdr.cookie) {
                Some(req) => out.push(Completion::Send {
                    req,
                    status: Status::Ok,
                }),
                None => self.error("dropped a synchronous-send ack for no pending send"),
            },
            Kind::Fin => {
                if st.rndv_send.contains_key(&hdr.cookie) {
                    self.finish_rndv_send(st, hdr.cookie, hdr.status != 0, out);
                } else {
                    self.error("dropped a rendezvous FIN for no pending send");
                }
            }
            Kind::Cts => self.on_cts(st, &hdr, out),
        }
    }

    fn on_matchable(
        &self,
        st: &mut State,
        peer: usize,
        hdr: &Header,
        payload: &[u8],
        out: &mut Vec<Completion>,
    ) {
        let env = Envelope {
            ctx: hdr.ctx,
            src: hdr.src,
            tag: hdr.tag,
        };
        let sync = (hdr.flags & wire::FLAG_SYNC != 0).then_some(hdr.cookie);
        if let Some(req) = st.matcher.take_posted(&env) {
            // SAFETY: matched requests were initialised by irecv; token held.
            unsafe { req.st().post_id = NO_POST };
            let r = match hdr.kind {
                Kind::Eager => {
                    self.finish_eager(st, req, env, peer, payload, sync, out);
                    Ok(())
                }
                _ => self.start_rndv_recv(st, req, peer, hdr, out),
            };
            if let Err(e) = r {
                self.error(&e.0);
            }
            return;
        }
        self.stats.unexpected.fetch_add(1, Relaxed);
        let u = match hdr.kind {
            Kind::Eager => Unexpected::Eager {
                peer,
                data: payload.to_vec(),
                sync,
            },
            _ => Unexpected::Rts { peer, hdr: *hdr },
        };
        let queued = st.matcher.arrive(env, u);
        debug_assert!(queued.is_none());
    }

    fn on_cts(&self, st: &mut State, hdr: &Header, out: &mut Vec<Completion>) {
        let cookie = hdr.cookie;
        let Some(s) = st.rndv_send.get_mut(&cookie) else {
            self.error("dropped a rendezvous grant for no pending send");
            return;
        };
        let grant = (hdr.ext1 as usize).min(s.len);
        let base_tag = hdr.ext0;
        let buf = s.buf;
        let rail = st.peers[s.peer].rail;
        let chunk = self.rails[rail].chunk;
        if grant > 0 && self.rails[rail].caps.mr_local && s.mr.is_none() {
            let (b, l) = (s.buf, s.len);
            match self.register(st, rail, b, l, sys::FI_SEND as u64) {
                Ok(m) => st.rndv_send.get_mut(&cookie).expect("present").mr = Some(m),
                Err(e) => {
                    self.error(&format!("cannot register a send buffer: {e}"));
                    self.finish_rndv_send(st, cookie, true, out);
                    return;
                }
            }
        }
        let mut off = 0;
        let mut idx = 0u64;
        let mut ops = Vec::new();
        while off < grant {
            let n = (grant - off).min(chunk);
            ops.push(ChunkOp {
                ctx: OpCtx {
                    fi: Default::default(),
                    kind: OpKind::Chunk,
                },
                id: cookie,
                recv_side: false,
                rail,
                op: ChunkKind::TSend,
                // SAFETY: off < grant <= len of the user buffer.
                local: unsafe { buf.add(off) as *mut u8 },
                len: n,
                offset: (base_tag | idx) as usize,
            });
            off += n;
            idx += 1;
        }
        st.rndv_send.get_mut(&cookie).expect("present").outstanding = ops.len();
        if ops.is_empty() {
            self.finish_rndv_send(st, cookie, false, out);
            return;
        }
        for op in ops {
            self.queue_chunk(st, op);
        }
    }

    fn error(&self, msg: &str) {
        crate::log::error(msg);
    }

    /// Waits (driving progress) until every buffered send has left, or the
    /// timeout passes. Returns the completions collected meanwhile.
    pub fn quiesce(&self, timeout: Duration, out: &mut Vec<Completion>) -> bool {
        let start = Instant::now();
        loop {
            let busy = self.with_token(out, |st, out| {
                self.progress_locked(st, out);
                st.rails.iter().any(RailState::busy)
                    || !st.rndv_send.is_empty()
                    || !st.rndv_recv.is_empty()
            });
            let Ok(busy) = busy else {
                return false;
            };
            if !busy {
                return true;
            }
            if start.elapsed() > timeout {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// One line of counters.
    pub fn stats_line(&self, rank: i64) -> String {
        let s = &self.stats;
        format!(
            "rustofi: rank={rank} provider={} shm={} net_peers={} shm_peers={} sent_msgs={} \
             sent_bytes={} recv_msgs={} recv_bytes={} eager={} rndv={} unexpected={} errors={} \
             coalesced={}",
            self.provider,
            self.shm_provider().unwrap_or("off"),
            s.net_peers.load(Relaxed),
            s.shm_peers.load(Relaxed),
            s.sent_msgs.load(Relaxed),
            s.sent_bytes.load(Relaxed),
            s.recv_msgs.load(Relaxed),
            s.recv_bytes.load(Relaxed),
            s.eager.load(Relaxed),
            s.rndv.load(Relaxed),
            s.unexpected.load(Relaxed),
            s.errors.load(Relaxed),
            s.coalesced.load(Relaxed),
        )
    }

    pub fn rndv_uses_read(&self) -> bool {
        self.rails[0].rndv_read
    }
}

/// Releases the progress token when the holder's scope ends, even by
/// unwinding (which poisons the engine).
struct Holder<'a>(&'a Engine);

impl Drop for Holder<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.poisoned.store(true, Ordering::Release);
        }
        self.0.token.release();
    }
}

// SAFETY: the state behind the UnsafeCell is only accessed by the holder of
// the progress token (or through `&mut self`), so sharing the engine
// between threads is sound.
unsafe impl Sync for Engine {}

fn raw_id(raw: *mut ChunkOp) -> (u64, bool) {
    // SAFETY: called before the op is freed.
    unsafe { ((*raw).id, (*raw).recv_side) }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The endpoints go first: closing one cancels every posted receive
        // and transmit, after which no buffer is referenced by the provider.
        for r in &mut self.rails {
            drop(r.ep.take());
        }
        let st = self.state.get_mut();
        // Reclaim buffers still owned by the provider at close time.
        for rs in &mut st.rails {
            for item in rs.retry.drain(..) {
                match item {
                    // SAFETY: queued ops were never accepted by the provider.
                    Retry::Tx(raw) => drop(unsafe { Box::from_raw(raw) }),
                    // SAFETY: as above.
                    Retry::Chunk(raw) => drop(unsafe { Box::from_raw(raw) }),
                }
            }
            rs.rx.clear();
            rs.tx_free.clear();
        }
        st.rndv_send.clear();
        st.rndv_recv.clear();
        let _ = st.matcher.drain_all();
        for p in &st.peers {
            self.rails[p.rail].av.remove(p.addr);
        }
    }
}
