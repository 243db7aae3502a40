//! The engine the shim talks to: the protocol core and the libfabric
//! driver behind the thread handoff.
//!
//! Every MTL call becomes a command ([`Cmd`]) pushed on the handoff's
//! inbox; whichever thread holds the progress token applies it to the core
//! (see [`crate::handoff`] and `mtl_rustofi/CONCURRENCY.md`), the driver
//! executes the actions that result, and the finished requests are handed
//! back to the caller, which delivers them after the token is released, so
//! a completion callback may call back into the MTL.

use crate::config::Settings;
use crate::driver::{Caps, Driver, RingWatch, SameHost};
use crate::fabric::{FiError, InfoList};
use crate::handoff::{Handoff, Poisoned};
use crate::inbox::Batch;
use crate::matching::Selector;
use crate::memrelease::ReleaseRing;
use crate::proto::ids::{PeerId, RailId};
use crate::proto::SendArgs;
use crate::proto::{Core, CoreConfig, Out, Stats};
pub(crate) use crate::proto::{Event as Completion, ProbeInfo, Status};
pub(crate) use crate::request::MessageHandle;
use crate::request::{Cmd, Op, ReqPtr};
use crate::usermem::UserBuf;
use crate::wire::{self, RailKind};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Fatal engine errors reported to the shim.
#[derive(Debug)]
pub(crate) struct EngineError(pub(crate) String);

impl From<FiError> for EngineError {
    fn from(e: FiError) -> Self {
        EngineError(e.to_string())
    }
}

impl From<Poisoned> for EngineError {
    fn from(_: Poisoned) -> Self {
        EngineError("the engine is unusable after an earlier internal error".into())
    }
}

/// What the token holder owns. The driver is declared (and so dropped)
/// first: its registrations are released before the core frees the
/// memory they cover.
struct State {
    driver: Driver,
    core: Core,
    out: Out,
    clock: Clock,
}

/// The liveness clock: read once every `CLOCK_EVERY` progress rounds (a
/// waiting caller drives millions a second), when probing is on.
struct Clock {
    start: Instant,
    rounds: u32,
    on: bool,
    /// Report a stall ([`Core::tick_stall`]): verbose 1 and up.
    stall_reports: bool,
}

const CLOCK_EVERY: u32 = 64;

/// What lets a poll that would find nothing return before it takes the
/// progress token: the token holder says, as it leaves, whether the core
/// only waits for packets on the shared-memory rail (`ring_only`); a poll
/// then returns if no command is queued and no ring holds a packet. Each
/// answer may be stale (another thread may change either meanwhile), so
/// one poll in `FULL_EVERY` goes the whole way regardless: a stale "idle"
/// delays work by at most that many polls, and the liveness clock keeps
/// running.
struct IdleWatch {
    rail: RailId,
    rings: Arc<RingWatch>,
    ring_only: AtomicBool,
    /// Polls returned early since the last full one (a hint: plain load
    /// and store, racing threads may lose counts).
    skipped: AtomicU32,
}

const FULL_EVERY: u32 = 64;

impl IdleWatch {
    /// Whether a poll can return now.
    #[inline]
    fn skip(&self, inbox_empty: bool) -> bool {
        if !self.ring_only.load(Ordering::Relaxed) || !inbox_empty {
            return false;
        }
        let n = self.skipped.load(Ordering::Relaxed);
        if n >= FULL_EVERY {
            self.skipped.store(0, Ordering::Relaxed);
            return false;
        }
        if self.rings.any_ready() {
            return false;
        }
        self.skipped.store(n + 1, Ordering::Relaxed);
        true
    }

    /// Notes, as the token holder leaves a progress round, what the next
    /// poll may skip.
    #[inline]
    fn note(&self, st: &mut State) {
        // The rails' own state says what a post left to do.
        st.driver.take_posted_off_ring();
        self.ring_only
            .store(st.core.waits_only_on(self.rail), Ordering::Relaxed);
    }

    /// Notes, as the token holder leaves after starting operations, that
    /// the next poll must not be skipped if they left work for a tick (a
    /// queued packet, an open bundle) or posted to a libfabric rail.
    /// Cheaper than `note`, which looks at every rail.
    #[inline]
    fn note_started(&self, st: &mut State) {
        if st.driver.take_posted_off_ring() || !st.core.tick_is_empty() {
            self.ring_only.store(false, Ordering::Relaxed);
        }
    }
}

pub(crate) struct Engine {
    handoff: Handoff<State, Cmd>,
    /// The quick look of an empty poll, where the own shared-memory rail
    /// is open.
    idle: Option<IdleWatch>,
    /// The network provider's name and capabilities.
    pub(crate) provider: String,
    /// The network provider's domain (NIC) this rank uses.
    pub(crate) nic: String,
    /// The NICs of its stripe endpoints (empty: no striping).
    pub(crate) stripe_nics: Vec<String>,
    pub(crate) caps: Caps,
    pub(crate) settings: Settings,
    stats: Arc<Stats>,
    shm_provider: Option<String>,
    rndv: &'static str,
    /// What this rank publishes through the modex.
    modex: Vec<u8>,
    /// The shared-memory file behind the shm rail's endpoint, if any.
    shm_segment: Option<String>,
}

impl Engine {
    /// Opens the network provider at `index` of `list` (`net`), as `same`
    /// says a rail for same-host peers beside it, and a stripe endpoint on
    /// each entry of `stripes` (other NICs of the provider). Without `net`
    /// our own shared-memory rail is the only rail.
    pub(crate) fn open(
        net: Option<(InfoList, usize)>,
        same: SameHost,
        stripes: &[usize],
        settings: Settings,
        my_name: u64,
    ) -> Result<Engine, EngineError> {
        let mut driver =
            Driver::open(net.as_ref().map(|(l, i)| (l, *i)), same, stripes, &settings)?;
        let stripe_nics: Vec<String> = driver
            .stripe_rails()
            .into_iter()
            .map(|(_, nic)| nic.to_string())
            .collect();
        let nic = net
            .as_ref()
            .and_then(|(l, i)| l.iter().nth(*i).map(|i| i.domain_name()))
            .unwrap_or_else(|| "none".to_string());
        drop(net);
        let profiles = driver.profiles();
        let stats = Arc::new(Stats::default());
        let cfg = CoreConfig {
            my_name,
            coalesce: settings.coalesce,
            fault: settings.fault,
            // Without stripe endpoints there is nothing to stripe over.
            stripe_min: if stripe_nics.is_empty() {
                0
            } else {
                settings.stripe_min
            },
            send_queue_limit: settings.send_queue_limit,
            send_queue_total: settings.send_queue_total,
        };
        let mut core = Core::new(cfg, profiles.clone(), stats.clone());
        core.set_peer_timeout(settings.peer_timeout);
        let mut out = Out::new();
        driver.start(&mut core, &mut out)?;
        let names = driver.names()?;
        let shm_segment = names
            .iter()
            .find(|r| r.kind == RailKind::Shm)
            .and_then(|r| crate::shmfile::segment_path(&r.addr))
            .or_else(|| driver.local().map(|l| l.path().to_string()));
        let modex = wire::PeerInfo {
            rails: names,
            pid: std::process::id(),
        }
        .encode();
        let net = profiles.iter().find(|p| p.kind == RailKind::Net);
        let idle = driver.ring_watch().map(|(rail, rings)| IdleWatch {
            rail,
            rings,
            ring_only: AtomicBool::new(false),
            skipped: AtomicU32::new(0),
        });
        Ok(Engine {
            idle,
            provider: net.map_or_else(|| "none".to_string(), |n| n.provider.clone()),
            nic,
            stripe_nics,
            caps: driver.net_caps(),
            rndv: match net {
                Some(n) if n.rndv_read => "read",
                Some(n) if n.rndv_msg => "msg",
                Some(n) if n.tagged => "send",
                _ => "none",
            },
            shm_provider: profiles
                .iter()
                .find(|p| matches!(p.kind, RailKind::Shm | RailKind::Local))
                .map(|p| p.provider.clone()),
            handoff: Handoff::new(State {
                driver,
                core,
                out,
                clock: Clock {
                    start: Instant::now(),
                    rounds: 0,
                    on: settings.peer_timeout.is_some() || settings.verbose > 0,
                    stall_reports: settings.verbose > 0,
                },
            }),
            settings,
            stats,
            modex,
            shm_segment,
        })
    }

    /// The shared-memory file behind the shm rail, for runtime cleanup.
    pub(crate) fn shm_segment(&self) -> Option<&str> {
        self.shm_segment.as_deref()
    }

    /// The shm provider's name if a shm rail is open.
    pub(crate) fn shm_provider(&self) -> Option<&str> {
        self.shm_provider.as_deref()
    }

    /// What this rank publishes through the modex.
    pub(crate) fn local_name(&self) -> Result<Vec<u8>, EngineError> {
        Ok(self.modex.clone())
    }

    /// Turns the registration cache on (only when memory returned to the
    /// system is pushed on `ring`).
    pub(crate) fn enable_mr_cache(&mut self, limit: usize, ring: Arc<ReleaseRing>) {
        self.handoff
            .with_state_mut(|st| st.core.enable_mr_cache(limit, ring));
    }

    /// The network rail's rendezvous protocol, by name.
    pub(crate) fn rndv_name(&self) -> &'static str {
        self.rndv
    }

    /// Applies queued commands (and, with `poll`, drives the providers) if
    /// the progress token is free; returns at once otherwise. Returns the
    /// number of completions read from the providers.
    fn combine(&self, out: &mut Vec<Completion>, poll: bool) -> usize {
        let mut events = 0;
        self.handoff.combine(|st, batch| {
            if poll {
                events += progress(st);
            }
            apply_all(st, batch);
            take_events(out, &mut st.out.events);
            if let Some(w) = &self.idle {
                if poll {
                    w.note(st);
                } else {
                    w.note_started(st);
                }
            }
        });
        events
    }

    /// Queues a command and applies it (and anything queued before it) if
    /// the token is free.
    ///
    /// # Safety
    /// `cmd` must stay valid and untouched until it has been applied.
    unsafe fn submit(&self, cmd: *mut Cmd, out: &mut Vec<Completion>) -> Result<(), EngineError> {
        // SAFETY: per the function contract.
        unsafe { self.handoff.push(cmd)? };
        self.combine(out, false);
        Ok(())
    }

    /// Submits a command from the caller's stack and waits (driving
    /// progress) until it has been applied. Probes and cancels drive the
    /// providers first, so that they see every message that has arrived
    /// (an application may spin on MPI_Iprobe without any other progress).
    fn submit_and_wait(&self, cmd: &mut Cmd, out: &mut Vec<Completion>) -> Result<(), EngineError> {
        self.combine(out, true);
        // SAFETY: `cmd` outlives this call, which returns only once the
        // command was applied (or the engine is poisoned, after which no
        // one takes commands from the inbox any more).
        unsafe { self.submit(cmd, out)? };
        while !cmd.is_done() {
            self.handoff.check()?;
            self.combine(out, true);
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// Adds (or finds) a peer by process name and published endpoints;
    /// `local` says it runs on this host (Open MPI's locality from the
    /// modex). Returns its handle (index + 1).
    pub(crate) fn add_peer(
        &self,
        name: u64,
        modex: &[u8],
        local: bool,
        out: &mut Vec<Completion>,
    ) -> Result<usize, EngineError> {
        let r = self.handoff.with_token(|st, batch| {
            apply_all(st, batch);
            let r = add_peer(st, name, modex, local);
            out.append(&mut st.out.events);
            r
        })?;
        if !self.handoff.inbox_is_empty() {
            self.combine(out, false);
        }
        r
    }

    /// Starts a send. `sync` requests MPI_Ssend semantics.
    ///
    /// # Safety
    /// `buf` must be readable for `len` bytes and `req` must point at a
    /// request of our layout, both until the send completes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn isend(
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
        // SAFETY: per the function contract (a send buffer is only read).
        let buf = unsafe { UserBuf::new(buf as *mut u8, len) };
        let op = Op::Send {
            peer: PeerId::from_handle(peer),
            ctx,
            src,
            tag,
            sync,
            buf,
            req,
        };
        // SAFETY: per the function contract.
        unsafe { self.start(req, op, out) }
    }

    /// Posts a receive; may complete at once from the unexpected queue.
    ///
    /// # Safety
    /// `buf` must be writable for `cap` bytes and `req` must point at a
    /// request of our layout, both until the receive completes.
    pub(crate) unsafe fn irecv(
        &self,
        sel: Selector,
        from: Option<PeerId>,
        buf: *mut u8,
        cap: usize,
        req: ReqPtr,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        // SAFETY: per the function contract.
        let buf = unsafe { UserBuf::new(buf, cap) };
        // SAFETY: per the function contract.
        unsafe {
            self.start(
                req,
                Op::Recv {
                    sel,
                    from,
                    buf,
                    req,
                },
                out,
            )
        }
    }

    /// Receives a message taken by `improbe`.
    ///
    /// # Safety
    /// `msg` must come from `improbe` of this engine and be used once; the
    /// rest as for `irecv`.
    pub(crate) unsafe fn imrecv(
        &self,
        msg: MessageHandle,
        buf: *mut u8,
        cap: usize,
        req: ReqPtr,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        // SAFETY: per the function contract.
        let buf = unsafe { UserBuf::new(buf, cap) };
        // SAFETY: per the function contract.
        unsafe { self.start(req, Op::Mrecv { msg, buf, req }, out) }
    }

    /// Starts an operation: applied at once if the progress token is free
    /// (after the commands queued before it), else queued as a command in
    /// the request for the token holder.
    ///
    /// # Safety
    /// `req` valid until completion.
    unsafe fn start(
        &self,
        req: ReqPtr,
        op: Op,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        let ran = self.handoff.run_or_combine(|st, batch, first| {
            for cmd in batch {
                apply(st, cmd);
            }
            if first {
                apply_op(st, op);
            }
            if !st.out.actions.is_empty() {
                st.driver.execute(&mut st.core, &mut st.out);
            }
            take_events(out, &mut st.out.events);
            if let Some(w) = &self.idle {
                w.note_started(st);
            }
        });
        if ran {
            return Ok(());
        }
        // SAFETY: per the function contract; the command lives in the
        // request, which stays valid until the operation completes.
        unsafe {
            let cmd = req.init(op);
            self.submit(cmd, out)
        }
    }

    /// Iprobe: drives progress, then looks at the unexpected queue.
    pub(crate) fn iprobe(
        &self,
        sel: Selector,
        from: Option<PeerId>,
        out: &mut Vec<Completion>,
    ) -> Result<Option<ProbeInfo>, EngineError> {
        let mut cmd = Cmd::new(Op::Probe {
            sel,
            from,
            remove: false,
        });
        self.submit_and_wait(&mut cmd, out)?;
        if let Some(why) = cmd.failed {
            return Err(EngineError(why));
        }
        Ok(cmd.found.map(|(info, _)| info))
    }

    /// Improbe: like iprobe, but removes the message and returns a handle
    /// for `imrecv`.
    pub(crate) fn improbe(
        &self,
        sel: Selector,
        from: Option<PeerId>,
        out: &mut Vec<Completion>,
    ) -> Result<Option<(ProbeInfo, MessageHandle)>, EngineError> {
        let mut cmd = Cmd::new(Op::Probe {
            sel,
            from,
            remove: true,
        });
        self.submit_and_wait(&mut cmd, out)?;
        if let Some(why) = cmd.failed {
            return Err(EngineError(why));
        }
        Ok(cmd.found.and_then(|(info, h)| h.map(|h| (info, h))))
    }

    /// Cancels a queued receive. Returns true if it was cancelled (and a
    /// `Cancelled` completion was queued).
    pub(crate) fn cancel(
        &self,
        req: ReqPtr,
        out: &mut Vec<Completion>,
    ) -> Result<bool, EngineError> {
        let mut cmd = Cmd::new(Op::Cancel { req });
        self.submit_and_wait(&mut cmd, out)?;
        Ok(cmd.cancelled)
    }

    /// Drives the providers once. Returns the number of completions.
    pub(crate) fn progress(&self, out: &mut Vec<Completion>) -> usize {
        self.combine(out, true)
    }

    /// Whether a poll would find nothing, by a look that takes no token
    /// ([`IdleWatch`]): then the caller may return at once.
    #[inline]
    pub(crate) fn nothing_to_poll(&self) -> bool {
        self.idle
            .as_ref()
            .is_some_and(|w| w.skip(self.handoff.inbox_is_empty()))
    }

    /// Waits (driving progress) until every transfer has finished, or the
    /// timeout passes (then says what is still pending).
    pub(crate) fn quiesce(&self, timeout: Duration, out: &mut Vec<Completion>) -> bool {
        let start = Instant::now();
        loop {
            let busy = self.handoff.with_token(|st, batch| {
                apply_all(st, batch);
                progress(st);
                out.append(&mut st.out.events);
                st.core.busy()
            });
            let Ok(busy) = busy else {
                return false;
            };
            if !busy {
                self.release_mr_cache();
                return true;
            }
            if start.elapsed() > timeout {
                if let Ok(left) = self.handoff.with_token(|st, _| st.core.leftovers()) {
                    crate::log::error(&format!("transfers still pending: {left:?}"));
                }
                self.release_mr_cache();
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// The counters (MPI_T reads them while the job runs).
    pub(crate) fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Releases the cached registrations not in use, before the rails
    /// close (those of transfers still pending go when the driver closes).
    fn release_mr_cache(&self) {
        let _ = self.handoff.with_token(|st, _| {
            st.core.release_mr_cache(&mut st.out);
            if !st.out.actions.is_empty() {
                st.driver.execute(&mut st.core, &mut st.out);
            }
        });
    }

    /// One line of counters.
    pub(crate) fn stats_line(&self, rank: i64) -> String {
        let s = &self.stats;
        let g = Stats::get;
        format!(
            "rustofi: rank={rank} provider={} nic={} shm={} net_peers={} shm_peers={} sent_msgs={} \
             sent_bytes={} recv_msgs={} recv_bytes={} eager={} rndv={} unexpected={} errors={} \
             coalesced={} mr_reg={} mr_hits={} net_tx_bytes={} net_rx_bytes={} shm_tx_bytes={} \
             shm_rx_bytes={} stripe_nics={} striped={} stripe_rx_bytes={}",
            self.provider,
            self.nic,
            self.shm_provider().unwrap_or("off"),
            g(&s.net_peers),
            g(&s.shm_peers),
            g(&s.sent_msgs),
            g(&s.sent_bytes),
            g(&s.recv_msgs),
            g(&s.recv_bytes),
            g(&s.eager),
            g(&s.rndv),
            g(&s.unexpected),
            g(&s.errors),
            g(&s.coalesced),
            g(&s.mr_reg),
            g(&s.mr_hits),
            g(&s.net_tx_bytes),
            g(&s.net_rx_bytes),
            g(&s.shm_tx_bytes),
            g(&s.shm_rx_bytes),
            if self.stripe_nics.is_empty() {
                "none".to_string()
            } else {
                self.stripe_nics.join(",")
            },
            g(&s.striped),
            g(&s.stripe_bytes),
        )
    }
}

/// Moves finished requests to the caller (a swap when the caller has
/// none yet, the common case).
#[inline]
fn take_events(out: &mut Vec<Completion>, events: &mut Vec<Completion>) {
    if events.is_empty() {
        return;
    }
    if out.is_empty() {
        std::mem::swap(out, events);
    } else {
        out.append(events);
    }
}

/// One round of progress: a tick, the completion queues, and a tick again
/// when something completed (credits freed, queued operations can go).
fn progress(st: &mut State) -> usize {
    st.core.tick(&mut st.out);
    if !st.out.actions.is_empty() {
        st.driver.execute(&mut st.core, &mut st.out);
    }
    let n = st.driver.poll(&mut st.core, &mut st.out);
    // After the poll: what arrived counts before peers are judged.
    if st.clock.on {
        st.clock.rounds = st.clock.rounds.wrapping_add(1);
        if st.clock.rounds.is_multiple_of(CLOCK_EVERY) {
            let now = st.clock.start.elapsed();
            if st.clock.stall_reports {
                if let Some(report) = st.core.tick_stall(now) {
                    crate::log::line(&format!("{} mtl_rustofi: {report}", crate::log::prefix()));
                }
            }
            st.core.tick_liveness(now, &mut st.out);
            if !st.out.actions.is_empty() {
                st.driver.execute(&mut st.core, &mut st.out);
            }
        }
    }
    if n > 0 {
        st.core.tick(&mut st.out);
        if !st.out.actions.is_empty() {
            st.driver.execute(&mut st.core, &mut st.out);
        }
    }
    n
}

#[inline(always)]
fn apply_all(st: &mut State, batch: Batch<Cmd>) {
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
fn apply(st: &mut State, cmd: *mut Cmd) {
    // SAFETY: a command taken from the inbox is valid until we set its
    // `done` flag or complete its request; we copy the op first.
    let op = unsafe { (*cmd).op };
    let core = &mut st.core;
    match op {
        Op::Send { .. } | Op::Recv { .. } | Op::Mrecv { .. } => apply_op(st, op),
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

/// Applies a send or a receive (token held), whether it came through the
/// inbox or straight from its caller.
#[inline(always)]
fn apply_op(st: &mut State, op: Op) {
    let (core, out) = (&mut st.core, &mut st.out);
    match op {
        Op::Send {
            peer,
            ctx,
            src,
            tag,
            sync,
            buf,
            req,
        } => {
            // SAFETY: the request is live (isend's contract) and the
            // token is held; MPI_Cancel may ask about any request.
            unsafe { req.set_post_id(None) };
            let args = SendArgs {
                peer,
                ctx,
                src,
                tag,
                buf,
                sync,
                req: req.id(),
            };
            if let Err(e) = core.send(args, out) {
                crate::log::error(&e.0);
                Stats::add(&core.stats().errors, 1);
                out.events.push(Completion::Send {
                    req: req.id(),
                    status: Status::Failed,
                });
            }
        }
        Op::Recv {
            sel,
            from,
            buf,
            req,
        } => {
            let id = core.recv(sel, from, buf, req.id(), out);
            // SAFETY: the request is live (irecv's contract) and the token
            // is held. Written either way: a request applied directly was
            // never initialised, and a stale ticket must not reach cancel.
            unsafe { req.set_post_id(id) };
        }
        Op::Mrecv { msg, buf, req } => {
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
        Op::Cancel { .. } | Op::Probe { .. } => {
            unreachable!("cancels and probes wait for their command")
        }
    }
}

fn add_peer(st: &mut State, name: u64, modex: &[u8], local: bool) -> Result<usize, EngineError> {
    if let Some(p) = st.core.peer_by_name(name) {
        return Ok(p.handle());
    }
    let info = wire::PeerInfo::decode(modex).map_err(EngineError)?;
    // Both sides apply the same rule to the same facts (locality is
    // symmetric, each publishes a shm address only if it opened a shm
    // rail), so a pair always talks over the same rail both ways.
    if local {
        if let Some(rail) = st.driver.rail_of_kind(RailKind::Local) {
            if let Some(remote) = info.rail(RailKind::Local) {
                let l = st.driver.local_mut().expect("the local rail is open");
                if let Some(addr) = l.insert_if_reachable(&remote.addr) {
                    let p = st
                        .core
                        .add_peer(name, rail, addr?, remote.max_eager as usize);
                    if info.pid != 0 {
                        st.core.set_peer_pid(p, info.pid);
                    }
                    return Ok(p.handle());
                }
            }
        }
    }
    let shm = st.driver.rail_of_kind(RailKind::Shm);
    let (rail, remote) = match (local, shm, info.rail(RailKind::Shm)) {
        (true, Some(r), Some(a)) => (r, a),
        _ => match (
            st.driver.rail_of_kind(RailKind::Net),
            info.rail(RailKind::Net),
        ) {
            (Some(r), Some(a)) => (r, a),
            (None, _) => return Err(EngineError(NO_NET_RAIL.into())),
            (Some(_), None) => {
                return Err(EngineError(
                    "the peer opened no network rail (its job runs on one host \
                     with no provider named): name one with mtl_rustofi_provider_include \
                     in both jobs"
                        .into(),
                ))
            }
        },
    };
    let addr = st.driver.insert_peer(rail, &remote.addr)?;
    let p = st
        .core
        .add_peer(name, rail, addr, remote.max_eager as usize);
    if local && info.pid != 0 {
        st.core.set_peer_pid(p, info.pid);
    }
    if st.driver.rail_of_kind(RailKind::Net) == Some(rail) {
        add_stripes(st, p, &info)?;
    }
    Ok(p.handle())
}

/// Why a peer beyond this job's host cannot be reached.
const NO_NET_RAIL: &str = "this process opened no network rail (every rank of its job \
     runs on one host, served by the shared-memory rail, and no provider was named), so \
     it cannot reach a process of another job or host: name a provider with \
     mtl_rustofi_provider_include (e.g. tcp) to open one";

/// Pairs a network peer's stripe endpoints with ours: the NICs both
/// ranks have stripe endpoints on (neither side's own NIC), in name order,
/// so that both sides list the same pairs in the same order (a striped
/// RTS names the sender's buffer on each pair's endpoint by position).
fn add_stripes(st: &mut State, peer: PeerId, info: &wire::PeerInfo) -> Result<(), EngineError> {
    let mut pairs: Vec<(RailId, String, &[u8])> = st
        .driver
        .stripe_rails()
        .into_iter()
        .filter_map(|(rail, nic)| {
            info.rails
                .iter()
                .find(|r| r.kind == RailKind::Stripe && r.nic == nic)
                .map(|r| (rail, nic.to_string(), r.addr.as_slice()))
        })
        .collect();
    pairs.sort_by(|a, b| a.1.cmp(&b.1));
    tracing::debug!(
        peer = peer.0,
        pairs = pairs.len(),
        "stripe endpoints paired"
    );
    for (index, (rail, _, remote)) in pairs.into_iter().enumerate() {
        let addr = st.driver.insert_peer(rail, remote)?;
        st.core.add_stripe(peer, index, rail, addr);
    }
    Ok(())
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The endpoints go first: closing one cancels every posted receive
        // and transmit, after which no buffer is referenced by the
        // provider and the core's memory may go.
        self.handoff.with_state_mut(|st| st.driver.close());
    }
}
