//! The shared-memory rail: our own transport between ranks of one job on
//! one host, executing the same actions of the protocol core as a
//! libfabric rail.
//!
//! - **Packets** (eager, control, rendezvous data) go into the ring from
//!   this rank to the peer ([`ring`]): one copy in, and the receiver's
//!   core reads them straight from the ring (matching copies the payload
//!   out). A packet's post is complete once copied, like an inject; a full ring
//!   refuses it with `Again`, which the core queues and retries, so the
//!   ring applies back-pressure and never drops or overwrites.
//! - **Receive posts** cost nothing: the rail has one receive "slot",
//!   handed back by the core after each packet.
//! - **Reads** of the read rendezvous are one `process_vm_readv` each
//!   ([`cma`]); the registration key is the sender's pid, the address its
//!   virtual address. Where cross-memory attach is not permitted the rail
//!   uses the message rendezvous (data packets through the ring).
//! - **Addresses** (published in the modex): pid, local rank and count,
//!   job id, host, the address and value of the peer's probe word, and
//!   which object its segment is.
//!
//! Everything runs under the progress token like the libfabric rails.

pub(crate) mod cma;
mod inbound;
pub(crate) mod reads;
pub(crate) mod ring;
pub(crate) mod segment;
mod settle;
pub(crate) mod short;

use crate::config::{RndvProtocol, Settings};
use crate::proto::action::InlineHead;
use crate::proto::ids::{FiAddr, PeerId, RailId, ReqId};
use crate::proto::{Action, Core, InlineSend, Out, PostError, Posted, RailProfile};
use crate::usermem::{copy_bytes, Region, UserBuf};
use crate::wire::{self, EagerHead, RailKind};
use inbound::Inbound;
pub(crate) use inbound::RingWatch;
pub(crate) use reads::{execute_reads, local_read};
use ring::{Producer, Raw};
use segment::Segment;
use settle::settle;
use std::sync::Arc;

/// The provider name the rail reports (profiles, verbose lines).
pub(crate) const PROVIDER: &str = "rustofi-shm";

/// Cells written to a peer's ring (a page of them) after which the rings
/// to and from it are mapped in whole ([`Segment::prime`]).
const PRIME_AFTER: u64 = (4096 / ring::CELL) as u64;

/// This rank's place among the job's ranks on this host (from the
/// launcher: `OMPI_COMM_WORLD_LOCAL_RANK`/`_SIZE`, Open MPI's job id).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LocalJob {
    pub(crate) jobid: u32,
    pub(crate) rank: usize,
    pub(crate) size: usize,
}

/// How same-host peers are to be reached (see `crate::config::ShmMode`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SameHost {
    /// Open our own shared-memory rail for these local ranks.
    pub(crate) local: Option<LocalJob>,
    /// Fail the open if it cannot be opened (else fall back to `shm`).
    pub(crate) local_required: bool,
    /// The shm provider's entry, for a libfabric shm rail (used when our
    /// own rail is not asked for or could not be opened).
    pub(crate) shm: Option<usize>,
    pub(crate) shm_required: bool,
}

impl SameHost {
    /// Opens our own rail if asked for. One that cannot be opened fails
    /// the open if required, else is reported (same-host peers then use
    /// libfabric's shm provider if asked for, else `net`).
    pub(crate) fn open_local(
        &self,
        settings: &Settings,
        net: &str,
    ) -> Result<Option<ShmRail>, crate::engine::EngineError> {
        match self.local.map(|job| ShmRail::open(job, settings)) {
            None => Ok(None),
            Some(Ok(r)) => Ok(Some(r)),
            Some(Err(e)) if self.local_required => Err(crate::engine::EngineError(format!(
                "mtl_rustofi_shm = on, but the shared-memory rail cannot be opened: {e}"
            ))),
            Some(Err(e)) => {
                crate::log::error(&format!(
                    "the shared-memory rail cannot be opened ({e}); same-host peers use {} \
                     (set mtl_rustofi_shm = libfabric or off to silence this)",
                    self.shm.map_or(net, |_| "libfabric's shm")
                ));
                Ok(None)
            }
        }
    }
}

/// A peer's published address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Addr {
    pid: u32,
    rank: u16,
    size: u16,
    jobid: u32,
    /// [`segment::host_id`]: which segment of the job the rank is in.
    host: u32,
    /// The address of its probe word ([`cma::probe_word`]) and the value
    /// the word holds there.
    probe: u64,
    probe_value: u64,
    /// Which PID namespace `pid` is of ([`cma::own_pid_ns`]).
    pid_ns: u64,
    /// [`Segment::id`]: ranks that mapped different objects of the job's
    /// name do not take each other for peers, whose rings the other would
    /// never read.
    seg: segment::SegmentId,
}

const ADDR_LEN: usize = 56;

impl Addr {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(ADDR_LEN);
        v.extend_from_slice(&self.pid.to_le_bytes());
        v.extend_from_slice(&self.rank.to_le_bytes());
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.jobid.to_le_bytes());
        v.extend_from_slice(&self.host.to_le_bytes());
        v.extend_from_slice(&self.probe.to_le_bytes());
        v.extend_from_slice(&self.probe_value.to_le_bytes());
        v.extend_from_slice(&self.pid_ns.to_le_bytes());
        v.extend_from_slice(&self.seg.dev.to_le_bytes());
        v.extend_from_slice(&self.seg.ino.to_le_bytes());
        v
    }

    fn decode(b: &[u8]) -> Option<Addr> {
        if b.len() != ADDR_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u16_at = |i: usize| u16::from_le_bytes(b[i..i + 2].try_into().unwrap());
        Some(Addr {
            pid: u32_at(0),
            rank: u16_at(4),
            size: u16_at(6),
            jobid: u32_at(8),
            host: u32_at(12),
            probe: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            probe_value: u64::from_le_bytes(b[24..32].try_into().unwrap()),
            pid_ns: u64::from_le_bytes(b[32..40].try_into().unwrap()),
            seg: segment::SegmentId {
                dev: u64::from_le_bytes(b[40..48].try_into().unwrap()),
                ino: u64::from_le_bytes(b[48..56].try_into().unwrap()),
            },
        })
    }
}

/// A peer this rail reaches.
struct Peer {
    pid: u32,
    /// `pid` names the peer's process in this PID namespace (the peer
    /// published the same namespace, or either does not know its own):
    /// only then is the kernel asked whether it still exists.
    pid_here: bool,
    /// Its probe word was read at `pid` and held the value it published:
    /// cross-memory attach reaches it. Reads from a peer not checked so
    /// are refused, whatever a rendezvous asks.
    readable: bool,
    tx: Producer<Raw>,
    /// Full-ring refusals since the peer's liveness was last checked.
    full: u32,
    /// Its local rank, for messages.
    rank: usize,
    /// A read from it was refused and said why ([`ShmRail::read`]).
    read_refusal_said: bool,
    /// Why every later packet to it fails at once (an errno): its process
    /// was found gone (`EPIPE`), or its ring's memory overwritten
    /// (`EPROTO`).
    closed: Option<i32>,
    /// The rings to and from it are mapped in (see [`Segment::prime`]):
    /// done once [`PRIME_AFTER`] cells have been written to it, not when
    /// it is inserted, so that only the pairs that talk a lot take a
    /// whole ring's memory (256 KiB a pair); one that exchanges a few
    /// messages touches a page or two, as before.
    primed: bool,
    /// It is this rank itself: a packet to it is noted for the poll
    /// (`Inbound::note_own_fed`).
    own: bool,
    /// Nothing is left to do before a push: primed, and not this rank
    /// itself. One test on the path of every packet for both.
    settled: bool,
}

impl Peer {
    /// What became of a packet pushed into its ring.
    #[inline]
    fn pushed(&mut self, r: Result<(), ring::Refused>) -> Result<(), PostError> {
        if let Err(e) = r {
            return Err(self.refused(e));
        }
        self.full = 0;
        Ok(())
    }

    /// A packet the ring refused. Out of line, so that the send that
    /// gets through carries none of it.
    #[cold]
    #[inline(never)]
    fn refused(&mut self, e: ring::Refused) -> PostError {
        match e {
            ring::Refused::Full => {
                // A full ring is normal back-pressure, but a reader that
                // died never empties it: look (a system call) now and then.
                self.full += 1;
                if self.full.is_multiple_of(4096) && self.pid_here && cma::gone(self.pid) {
                    return self.close(libc::EPIPE);
                }
                PostError::Again
            }
            ring::Refused::Closed => self.ring_lost(format!(
                "local rank {} found a malformed packet in the ring from this rank and reads it \
                 no more (its own message says where)",
                self.rank
            )),
            ring::Refused::BadTail => self.ring_lost(format!(
                "the ring to local rank {} says {} cells were read of the {} written: no reader \
                 publishes that, so the shared-memory segment was overwritten",
                self.rank,
                self.tx.published_tail(),
                self.tx.written()
            )),
        }
    }

    /// Fails this packet and every later one with `errno`.
    fn close(&mut self, errno: i32) -> PostError {
        self.closed = Some(errno);
        PostError::Hard(-errno)
    }

    /// The ring cannot carry packets any more: says why (`what`, ended by
    /// the consequence), and closes the peer (`EPROTO`), so that the sends
    /// waiting for room fail instead of waiting for ever.
    fn ring_lost(&mut self, what: String) -> PostError {
        crate::log::error(&format!(
            "{what}; every later send to local rank {} fails",
            self.rank
        ));
        self.close(libc::EPROTO)
    }
}

pub(crate) struct ShmRail {
    pub(crate) profile: RailProfile,
    job: LocalJob,
    me: Addr,
    /// Cross-memory attach works from this process (`cma::probe`): peers
    /// are checked for it as they are inserted.
    cma_ok: bool,
    /// `mtl_rustofi_rndv_protocol read`: a peer this rank cannot read is
    /// an error, not a reason to move its large messages through the rings.
    read_forced: bool,
    /// `mtl_rustofi_verbose`: a peer whose reads are declined is said at 2.
    verbose: i32,
    /// Peers by local rank, once inserted.
    peers: Vec<Option<Peer>>,
    /// Rings from inserted peers, and which of them a poll reads.
    inbound: Inbound,
    /// A send came since a poll last read a packet: the next send is part
    /// of a run (a window of sends), which prefetches the cells it writes
    /// into next (see [`Producer::prefetch_ahead`]). The first send after
    /// a read does not: it is likely a reply, whose peer soon waits on
    /// those cells.
    in_run: bool,
    // Last: the rings above point into it.
    seg: Arc<Segment>,
}

impl ShmRail {
    /// Attaches the job's segment and sets up the rail's profile.
    pub(crate) fn open(job: LocalJob, settings: &Settings) -> Result<ShmRail, String> {
        if job.size == 0 || job.rank >= job.size || job.size > u16::MAX as usize {
            return Err(format!(
                "local rank {} of {} is not a place on this host",
                job.rank, job.size
            ));
        }
        let cma_off = cma::probe().err();
        let (probe, probe_value) = cma::probe_word();
        let host = segment::host_id();
        let seg = Arc::new(Segment::attach(job.jobid, host, job.size)?);
        // Before this rank's address is published, so before any rank
        // writes to it.
        seg.empty_rings_to(job.rank);
        let max = ring::max_packet(segment::MIN_RING_CELLS) - wire::EXT_LEN;
        let eager_limit = settings.eager_limit.unwrap_or(DEFAULT_EAGER).min(max);
        let buf_size = wire::BASE_LEN + eager_limit.max(wire::EXT_LEN - wire::BASE_LEN);
        let read_ok = cma_off.is_none();
        let (rndv_read, rndv_msg) = match settings.rndv {
            RndvProtocol::Read if !read_ok => {
                return Err(format!(
                    "mtl_rustofi_rndv_protocol = read, but cross-memory attach is not \
                     permitted: {}",
                    cma_off.unwrap_or_default()
                ))
            }
            RndvProtocol::Auto | RndvProtocol::Read => (read_ok, !read_ok),
            // No tagged operations here: the send rendezvous falls back to
            // data packets.
            RndvProtocol::Send | RndvProtocol::Msg => (false, true),
        };
        if settings.verbose > 1 {
            crate::log::info(&format!(
                "rustofi: shared-memory rail local_rank={} of {} segment={} ring_cells={}{} \
                 eager_limit={} cma={} rndv={}",
                job.rank,
                job.size,
                seg.path(),
                seg.cells(),
                if seg.cells() < segment::ring_cells(job.size) {
                    format!(
                        " (fewer than {}: no room for more in /dev/shm)",
                        segment::ring_cells(job.size)
                    )
                } else {
                    String::new()
                },
                eager_limit,
                match &cma_off {
                    None => "on".to_string(),
                    Some(why) => format!("off ({why})"),
                },
                if rndv_read { "read" } else { "msg" },
            ));
        }
        let profile = RailProfile {
            kind: RailKind::Local,
            provider: PROVIDER.into(),
            mr_local: false,
            mr_virt_addr: true,
            mr_prov_key: true,
            buf_size,
            eager_limit,
            zero_copy: true,
            rndv_read,
            tagged: false,
            rndv_msg,
            // One system call reads a whole chunk; larger chunks cost
            // nothing more.
            chunk: settings.chunk.max(CMA_CHUNK),
            // Every packet is copied into the ring at once.
            inject_size: buf_size,
            inline: true,
            // The one slot is the rings' read position: never consumed.
            rx_kept: true,
            tx_depth: 1 << 20,
            rx_count: 1,
        };
        Ok(ShmRail {
            profile,
            job,
            me: Addr {
                // SAFETY: getpid has no preconditions.
                pid: unsafe { libc::getpid() } as u32,
                rank: job.rank as u16,
                size: job.size as u16,
                jobid: job.jobid,
                host,
                probe,
                probe_value,
                pid_ns: cma::own_pid_ns(),
                seg: seg.id(),
            },
            cma_ok: read_ok,
            read_forced: settings.rndv == RndvProtocol::Read,
            verbose: settings.verbose,
            peers: (0..job.size).map(|_| None).collect(),
            inbound: Inbound::new(job.size, job.rank, seg.clone()),
            in_run: false,
            seg,
        })
    }

    /// Whether this rank can read the memory of the peer at `addr`
    /// (cross-memory attach works here and reaches that process: a peer
    /// is `readable` only where it does). The core answers the read
    /// rendezvous of a peer it cannot read as message rendezvous
    /// (`Core::set_peer_unreadable`).
    pub(crate) fn reads_from(&self, addr: FiAddr) -> bool {
        self.peers
            .get(addr.0 as usize)
            .and_then(Option::as_ref)
            .is_some_and(|p| p.readable)
    }

    /// The address to publish.
    pub(crate) fn name(&self) -> Vec<u8> {
        self.me.encode()
    }

    /// The modex entry of this rail.
    pub(crate) fn rail_addr(&self) -> wire::RailAddr {
        wire::RailAddr {
            kind: RailKind::Local,
            max_eager: (self.profile.buf_size - wire::BASE_LEN) as u32,
            addr: self.name(),
            provider: String::new(),
            nic: String::new(),
        }
    }

    /// The rings, for threads without the progress token.
    pub(crate) fn watch(&self) -> Arc<RingWatch> {
        self.inbound.watch().clone()
    }

    /// The path the segment had, for the runtime's cleanup.
    pub(crate) fn path(&self) -> &str {
        self.seg.path()
    }

    /// Whether a peer's published address is reachable here (the same
    /// job's segment on this host, the same layout, the same object).
    pub(crate) fn reaches(&self, name: &[u8]) -> bool {
        Addr::decode(name).is_some_and(|a| {
            self.same_job(&a) && a.seg == self.me.seg && (a.rank as usize) < self.job.size
        })
    }

    /// Whether `a` is a rank of this job on this host, with the same
    /// layout.
    fn same_job(&self, a: &Addr) -> bool {
        a.jobid == self.me.jobid && a.host == self.me.host && a.size == self.me.size
    }

    /// Whether a peer's published address is one of this job's ranks on
    /// this host that mapped another object of the segment's name (a
    /// `/dev/shm` of its own): its rings are not this rank's.
    pub(crate) fn in_other_segment(&self, name: &[u8]) -> bool {
        Addr::decode(name).is_some_and(|a| self.same_job(&a) && a.seg != self.me.seg)
    }

    /// Starts serving a same-host peer, process `proc_name`, if its
    /// published address is one of this job's on this host (`None` if
    /// not).
    pub(crate) fn insert_if_reachable(
        &mut self,
        name: &[u8],
        proc_name: u64,
    ) -> Option<Result<FiAddr, crate::engine::EngineError>> {
        self.reaches(name).then(|| {
            self.insert(name, proc_name)
                .map_err(crate::engine::EngineError)
        })
    }

    /// Starts serving a peer, process `proc_name` at address `name`: its
    /// ring to us is polled from now on.
    pub(crate) fn insert(&mut self, name: &[u8], proc_name: u64) -> Result<FiAddr, String> {
        let a = Addr::decode(name)
            .filter(|_| self.reaches(name))
            .ok_or("a same-host peer published an address of another job or layout")?;
        let r = a.rank as usize;
        if self.peers[r].is_some() {
            return Ok(FiAddr(r as u64));
        }
        // Checked wherever the call works at all, not only where this rank
        // reads: a peer's rendezvous may ask for a read whatever this
        // rank's own setting. A peer that cannot be read has its read
        // rendezvous answered as message rendezvous (`reads_from`), unless
        // reads were asked for by name.
        let readable = match self
            .cma_ok
            .then(|| cma::check_peer(a.pid, a.probe, a.probe_value))
        {
            Some(Ok(())) => true,
            Some(Err(e)) if self.read_forced => {
                return Err(format!(
                    "cross-memory attach to local rank {r} fails ({e}), and \
                     mtl_rustofi_rndv_protocol is read: set it to auto (large messages \
                     of that rank then come through the rings) or msg"
                ))
            }
            Some(Err(e)) => {
                if self.verbose > 1 {
                    crate::log::info(&format!(
                        "rustofi: local rank {}: cross-memory attach to local rank {r} fails \
                         ({e}); its large messages come through the rings",
                        self.job.rank
                    ));
                }
                false
            }
            None => false,
        };
        let pid_here = wire::same_pid_namespace(a.pid_ns, self.me.pid_ns);
        self.peers[r] = Some(Peer {
            pid: a.pid,
            pid_here,
            readable,
            tx: Producer::new(self.seg.ring(self.job.rank, r)),
            full: 0,
            rank: r,
            read_refusal_said: false,
            closed: None,
            primed: false,
            own: r == self.job.rank,
            settled: false,
        });
        self.inbound
            .insert(r, proc_name, self.seg.ring(r, self.job.rank));
        Ok(FiAddr(r as u64))
    }

    /// Copies a packet (header, and the payload for a zero-copy send)
    /// into the peer's ring.
    #[inline]
    pub(crate) fn send(
        &mut self,
        dest: FiAddr,
        head: Region,
        payload: Option<Region>,
    ) -> Result<(), PostError> {
        // SAFETY: the core keeps the header's bounce buffer and the
        // payload's user buffer valid and unchanged until the operation is
        // reported, which is after this call.
        let h = unsafe { std::slice::from_raw_parts(head.addr as *const u8, head.len) };
        match payload {
            None => self.push(dest, &[h]),
            Some(pl) => {
                // SAFETY: as above.
                let b = unsafe { std::slice::from_raw_parts(pl.addr as *const u8, pl.len) };
                self.push(dest, &[h, b])
            }
        }
    }

    /// Writes one packet made of `parts` into the peer's ring.
    #[inline]
    fn push(&mut self, dest: FiAddr, parts: &[&[u8]]) -> Result<(), PostError> {
        let p = self.sending_to(dest)?;
        let r = p.tx.push(parts);
        p.pushed(r)
    }

    /// The peer a packet to `dest` goes to, if it can take one; maps its
    /// rings in once it has been sent a page of cells.
    #[inline(always)]
    fn sending_to(&mut self, dest: FiAddr) -> Result<&mut Peer, PostError> {
        let Some(p) = self.peers.get_mut(dest.0 as usize).and_then(Option::as_mut) else {
            return Err(PostError::Hard(-libc::EINVAL));
        };
        if let Some(errno) = p.closed {
            return Err(PostError::Hard(-errno));
        }
        if !p.settled {
            settle(p, &self.inbound, &self.seg, self.job.rank);
        }
        Ok(p)
    }

    /// Copies an inline packet that the core handed back from a send
    /// ([`InlineSend`]) into the peer's ring, its header encoded in place;
    /// or hands it back to the core, which sends it as an ordinary packet
    /// (queued behind whatever the ring refused before). Returns whether
    /// the ring took it.
    #[inline(always)]
    pub(crate) fn send_direct_or_refuse(
        &mut self,
        p: InlineSend,
        core: &mut Core,
        out: &mut Out,
    ) -> bool {
        match self.send_inline(p.dest, &p.head, p.payload) {
            Ok(()) => true,
            Err(e) => {
                core.on_inline_refused(p.rail, p.peer, &p.encoded_head(), p.payload, p.req, e, out);
                false
            }
        }
    }

    /// Copies an inline packet into the peer's ring, or hands it back to
    /// the core, which sends it as an ordinary packet (queued behind
    /// whatever the ring refused before).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn send_inline_or_refuse(
        &mut self,
        rail: RailId,
        peer: PeerId,
        dest: FiAddr,
        head: &InlineHead,
        payload: UserBuf,
        req: ReqId,
        core: &mut Core,
        out: &mut Out,
    ) {
        if let Err(e) = self.send_inline(dest, &EagerHead::decode(head), payload) {
            core.on_inline_refused(rail, peer, head, payload, req, e, out);
        }
    }

    /// Copies an inline packet (an eager message with header `head`, then
    /// the user's payload) into the peer's ring. A small message goes in
    /// the ring's short format ([`short`]); one of up to
    /// [`short::ONE_CELL`] bytes fits one cell, written there directly,
    /// header and payload without a call to `memcpy`.
    #[inline(always)]
    fn send_inline(
        &mut self,
        dest: FiAddr,
        head: &EagerHead,
        payload: UserBuf,
    ) -> Result<(), PostError> {
        let r = payload.region();
        let in_run = self.in_run;
        let p = self.sending_to(dest)?;
        let (pushed, len) = if r.len <= short::ONE_CELL {
            let len = short::HEAD + r.len;
            let pushed = p.tx.push_cell(len, |cell| {
                let (h, body) = cell.split_at_mut(short::HEAD);
                short::encode(head, h.try_into().expect("a short header's bytes"));
                // SAFETY: a `UserBuf` is readable for its length while its
                // request lives, which it does until this returns (see
                // below); `body` is the rest of the cell, `ONE_CELL >=
                // r.len` bytes of the ring, not of the user's memory.
                unsafe { copy_bytes(r.addr as *const u8, body.as_mut_ptr(), r.len) };
            });
            (pushed, len)
        } else {
            // SAFETY: a `UserBuf` is readable for its length while its
            // request lives, which it does until this returns: the send's
            // completion reaches MPI only after the driver has executed the
            // action (see `Action::SendInline`) or, on the engine's direct
            // path, after `Driver::send_inline` has returned. The slice is
            // dropped first.
            let body = unsafe { std::slice::from_raw_parts(r.addr as *const u8, r.len) };
            if r.len <= short::MAX_PAYLOAD {
                let mut h = [0; short::HEAD];
                short::encode(head, &mut h);
                (p.tx.push(&[&h, body]), short::HEAD + r.len)
            } else {
                let mut h = [0; wire::BASE_LEN];
                head.encode(r.len, &mut h);
                (p.tx.push(&[&h, body]), wire::BASE_LEN + r.len)
            }
        };
        if in_run && pushed.is_ok() {
            p.tx.prefetch_ahead(ring::cells(len));
        }
        let posted = p.pushed(pushed);
        self.in_run = true;
        posted
    }

    /// The key a peer reads a registered buffer of ours with: our pid.
    pub(crate) fn key(&self) -> u64 {
        self.me.pid as u64
    }

    /// Hands the packets waiting in the peers' rings to the core (up to
    /// a budget per peer; with many local ranks, from the rings this poll
    /// reads: [`inbound`]). Returns the number of packets. A ring is read
    /// from the moment its peer is inserted (the ring from this rank
    /// itself: once it was written to), which the core then adds
    /// (`engine::peers::add_peer`): there is no ring of a peer the core
    /// does not want polled, and without peers there is nothing to read.
    /// Inlined always, so that the one frame between the caller and the
    /// arrival is the rings' read ([`Inbound::poll`]): this one around it
    /// cost 13 instructions per arrival.
    #[inline(always)]
    pub(crate) fn poll(&mut self, rail: RailId, core: &mut Core, out: &mut Out) -> usize {
        let total = self.inbound.poll(rail, core, out);
        if total > 0 {
            self.in_run = false;
        }
        total
    }
}

/// The rail an action is for (registrations released carry none: ours
/// were never made).
#[inline]
pub(crate) fn rail_of(a: &Action) -> Option<RailId> {
    match *a {
        Action::PostRecv { rail, .. }
        | Action::Send { rail, .. }
        | Action::SendInline { rail, .. }
        | Action::Read { rail, .. }
        | Action::TaggedSend { rail, .. }
        | Action::TaggedRecv { rail, .. }
        | Action::Register { rail, .. }
        | Action::Cancel { rail, .. } => Some(rail),
        Action::Deregister { .. } | Action::CheckAlive { .. } => None,
    }
}

impl ShmRail {
    /// Executes one action of this rail. Every operation is done when the
    /// call returns (copied into a ring, or read), so it is reported
    /// complete at once; a refusal goes back to the core like a failed
    /// post (`Again` for a full ring: the core queues it and retries).
    #[inline]
    pub(crate) fn execute(&mut self, a: Action, core: &mut Core, out: &mut Out) {
        let (op, r) = match a {
            // The rail's one receive slot is its read position, armed once
            // at start (`rx_kept`: the core posts nothing after packets).
            Action::PostRecv { .. } => return,
            Action::Send {
                op,
                dest,
                head,
                payload,
                ..
            } => (op, self.send(dest, head, payload)),
            // The driver hands reads to `reads::execute_reads`, which makes
            // those that come together at once; one alone is the same.
            Action::Read { .. } => {
                if let Some(r) = reads::local_read(&a) {
                    self.read_batch(&[r.read], |_, res| reads::report(core, out, r.op, res));
                }
                return;
            }
            Action::SendInline {
                rail,
                peer,
                dest,
                head,
                payload,
                req,
            } => {
                self.send_inline_or_refuse(rail, peer, dest, &head, payload, req, core, out);
                return;
            }
            // Nothing to register: a peer reads by our pid and address.
            Action::Register { mr, .. } => {
                core.on_registered(mr, Ok(self.key()), out);
                return;
            }
            // Nothing is ever pending here (and process checks are no
            // rail's: `rail_of` sends them to the driver).
            Action::Cancel { .. } | Action::Deregister { .. } | Action::CheckAlive { .. } => return,
            // The profile says no FI_TAGGED, so the core never asks.
            Action::TaggedSend { op, .. } | Action::TaggedRecv { op, .. } => {
                (op, Err(PostError::Hard(-libc::ENOSYS)))
            }
        };
        match r {
            Ok(()) => core.on_complete(op, out),
            Err(e) => core.on_post_failed(Posted::Op(op), e, out),
        }
    }
}

/// Default largest eager payload: larger messages go by rendezvous, whose
/// single copy beats two copies through the ring from about here on.
pub(crate) const DEFAULT_EAGER: usize = 8192;

/// Least chunk of a cross-memory read.
const CMA_CHUNK: usize = 4 << 20;

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, not(loom)))]
mod addr_tests {
    use super::*;

    #[test]
    fn addresses_round_trip_and_foreign_ones_are_refused() {
        let a = Addr {
            pid: 4242,
            rank: 3,
            size: 4,
            jobid: 0x1234_5678,
            host: 0x9abc_def0,
            probe: 0xdead_beef_0000,
            probe_value: 0x5255_5354_4f46_4931,
            pid_ns: 0xf000_0001,
            seg: segment::SegmentId {
                dev: 0x0123_4567_89ab_cdef,
                ino: 0xfedc_ba98_7654_3210,
            },
        };
        assert_eq!(Addr::decode(&a.encode()), Some(a));
        assert_eq!(Addr::decode(&a.encode()[..ADDR_LEN - 1]), None);
    }
}
