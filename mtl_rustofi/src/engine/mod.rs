//! The engine the shim talks to: the protocol core and the libfabric
//! driver behind the thread handoff.
//!
//! A send or receive that finds the progress token free is applied to the
//! core at once; otherwise it becomes a command ([`Cmd`]) in its request,
//! pushed on the handoff's inbox, and whichever thread holds the token
//! applies it (see [`crate::handoff`] and `mtl_rustofi/CONCURRENCY.md`).
//! Probes and cancels always go as commands and wait for their answer. The
//! driver executes the actions that result, and the finished requests are
//! handed back to the caller, which delivers them after the token is
//! released, so a completion callback may call back into the MTL.

use crate::config::Settings;
use crate::driver::{Caps, Driver, SameHost};
use crate::fabric::{FiError, InfoList};
use crate::handoff::{Handoff, Poisoned};
use crate::inbox::Batch;
use crate::matching::Selector;
use crate::memrelease::ReleaseRing;
use crate::proto::ids::PeerId;
use crate::proto::{CacheBound, Core, CoreConfig, InlineSend, Out, SendArgs, Stats};
pub(crate) use crate::proto::{Event as Completion, ProbeInfo, Status};
pub(crate) use crate::request::MessageHandle;
use crate::request::{Cmd, Op, ReqPtr};
use crate::usermem::UserBuf;
use crate::wire::{self, RailKind};
pub(crate) use finished::Finished;

mod apply;
mod finished;
mod idle;
mod peers;
#[cfg(all(test, not(loom)))]
mod tests;

use apply::{
    apply, apply_all, apply_mrecv, apply_recv, apply_send, clock_due, execute_then_send,
    full_round, ring_round,
};
use idle::IdleWatch;
use peers::add_peer;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a send or receive left [`Engine::start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Started {
    /// Its completion will come through a [`Finished`] list.
    Pending,
    /// Complete already (a small send written into its rail on the spot;
    /// one the rail refused is `Pending`): no completion follows, the
    /// caller completes the request. Returned
    /// rather than listed because this is the commonest send, and a list
    /// entry costs its push, its copy and its dispatch.
    Complete,
}

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

/// The clock of liveness, stall reports and the message rendezvous's
/// repair: read once every `CLOCK_EVERY` progress rounds (a waiting caller
/// drives millions a second).
struct Clock {
    start: Instant,
    /// Rounds until the next one that reads the clock.
    left: u32,
    /// Report a stall ([`Core::tick_stall`]): verbose 1 and up.
    stall_reports: bool,
}

const CLOCK_EVERY: u32 = 64;

pub(crate) struct Engine {
    handoff: Handoff<State, Cmd>,
    /// The quick look of an empty poll, where the own shared-memory rail
    /// is open.
    idle: Option<IdleWatch>,
    /// The quick look keeps the rings' schedule (`RingWatch::scheduled`).
    scheduled_look: bool,
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
    /// The network rail's eager limit (none without a network rail).
    net_eager_limit: Option<usize>,
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
            pid_ns: crate::driver::shm::cma::own_pid_ns(),
        }
        .encode();
        let net = profiles.iter().find(|p| p.kind == RailKind::Net);
        let idle = driver.ring_watch().map(|(rail, rings)| IdleWatch {
            rail,
            rings,
            ring_only: AtomicBool::new(false),
            skipped: AtomicU32::new(0),
            forced: AtomicBool::new(false),
        });
        let scheduled_look = idle.as_ref().is_some_and(|w| w.rings.scheduled());
        Ok(Engine {
            idle,
            scheduled_look,
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
            net_eager_limit: net.map(|n| n.eager_limit),
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
                    left: CLOCK_EVERY,
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
    pub(crate) fn enable_mr_cache(&mut self, bound: CacheBound, ring: Arc<ReleaseRing>) {
        self.handoff
            .with_state_mut(|st| st.core.enable_mr_cache(bound, ring));
    }

    /// The network rail's eager limit, in bytes.
    pub(crate) fn net_eager_limit(&self) -> Option<usize> {
        self.net_eager_limit
    }

    /// The network rail's rendezvous protocol, by name.
    pub(crate) fn rndv_name(&self) -> &'static str {
        self.rndv
    }

    /// Applies queued commands (and, with `POLL`, drives the providers) if
    /// the progress token is free; returns at once otherwise. Returns the
    /// number of completions read from the providers. `POLL` is a constant
    /// so that a poll's copy carries no test of it. (The poll of
    /// `rustofi_progress` is [`Engine::progress`], a copy of this one's
    /// with a closure of its own: called here too, its round would go out
    /// of line, 20 Ir more per arrival.)
    fn combine<const POLL: bool>(&self, out: &mut Finished) -> usize {
        let mut events = 0;
        self.handoff.combine(|st, batch| {
            if POLL {
                events += self.poll_round(st, batch, out);
            } else {
                self.apply_queued(st, batch, out);
            }
        });
        events
    }

    /// A progress round as the token holder, then the commands queued
    /// before it; collects what finished and notes what the next poll may
    /// skip. Returns the completions read.
    #[inline(always)]
    fn poll_round(&self, st: &mut State, batch: Batch<Cmd>, out: &mut Finished) -> usize {
        // Every round counts towards the engine clock.
        let due = clock_due(&mut st.clock);
        let Some(w) = &self.idle else {
            return self.full_poll(st, batch, out, due);
        };
        // A poll forced after skipped ones stands in for all of them: it
        // reads the engine clock and goes the whole way. Taken under the
        // token, so that the round that clears it is the one that does so.
        let forced = w.take_forced();
        // What the last holder noted as it left: every holder keeps the
        // flag true to the core's state (see `IdleWatch`), and the token
        // orders its store before this load.
        if due || forced || !w.ring_only.load(Ordering::Relaxed) {
            return self.full_poll(st, batch, out, due || forced);
        }
        if !batch.is_empty() {
            // Commands other threads queued: applied after the round, and
            // noted as any started operations are.
            let n = ring_round(st).0;
            apply_all(st, batch);
            out.take_from(&mut st.out.events);
            w.note_started(st);
            return n;
        }
        let (n, quiet) = ring_round(st);
        if n > 0 {
            out.take_from(&mut st.out.events);
            w.note_ring_round(st, quiet);
        }
        n
    }

    /// [`Engine::poll_round`] when it reads every rail (`read_clock`: and
    /// the engine clock, [`Clock`]).
    #[inline(always)]
    fn full_poll(
        &self,
        st: &mut State,
        batch: Batch<Cmd>,
        out: &mut Finished,
        read_clock: bool,
    ) -> usize {
        let n = full_round(st, read_clock);
        apply_all(st, batch);
        out.take_from(&mut st.out.events);
        if let Some(w) = &self.idle {
            w.note(st);
        }
        n
    }

    /// Queues a command and applies it (and anything queued before it) if
    /// the token is free.
    ///
    /// # Safety
    /// `cmd` must stay valid and untouched until it has been applied.
    unsafe fn submit(&self, cmd: *mut Cmd, out: &mut Finished) -> Result<(), Poisoned> {
        // SAFETY: per the function contract.
        unsafe { self.handoff.push(cmd)? };
        self.combine::<false>(out);
        Ok(())
    }

    /// Submits a command from the caller's stack and waits (driving
    /// progress) until it has been applied. Probes and cancels drive the
    /// providers first, so that they see every message that has arrived
    /// (an application may spin on MPI_Iprobe without any other progress).
    fn submit_and_wait(&self, cmd: &mut Cmd, out: &mut Finished) -> Result<(), EngineError> {
        self.combine::<true>(out);
        // SAFETY: `cmd` outlives this call, which returns only once the
        // command was applied (or the engine is poisoned, after which no
        // one takes commands from the inbox any more).
        unsafe { self.submit(cmd, out)? };
        while !cmd.is_done() {
            self.handoff.check()?;
            self.combine::<true>(out);
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
        out: &mut Finished,
    ) -> Result<usize, EngineError> {
        let r = self.handoff.with_token(|st, batch| {
            apply_all(st, batch);
            let r = add_peer(st, name, modex, local);
            out.take_from(&mut st.out.events);
            // The new peer may be one of another rail, which the next
            // poll must look at: noted before the token goes.
            if let Some(w) = &self.idle {
                w.note(st);
            }
            r
        })?;
        if !self.handoff.inbox_is_empty() {
            self.combine::<false>(out);
        }
        r
    }

    /// Starts a send. `sync` requests MPI_Ssend semantics. A small send
    /// written into its rail on the spot is [`Started::Complete`]: no
    /// completion for it comes through `out`, its caller completes it.
    /// Any other send's completion comes through `out`, in this call or a
    /// later one. Its one error is a poisoned engine, which the caller
    /// turns into an [`EngineError`]: so the result is one byte, returned
    /// in a register rather than through memory.
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
        out: &mut Finished,
    ) -> Result<Started, Poisoned> {
        // SAFETY: per the function contract (a send buffer is only read).
        let buf = unsafe { UserBuf::new(buf as *mut u8, len) };
        let args = SendArgs {
            peer: PeerId::from_handle(peer),
            ctx,
            src,
            tag,
            buf,
            sync,
            req: req.id(),
        };
        // SAFETY: per the function contract, for both paths.
        unsafe {
            self.start(
                req,
                |st, _| apply_send(st, args, req),
                || Op::Send { args, req },
                out,
            )
        }
    }

    /// Posts a receive; may complete at once from the unexpected queue.
    /// Fails only as [`Engine::isend`] does.
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
        out: &mut Finished,
    ) -> Result<(), Poisoned> {
        // SAFETY: per the function contract.
        let buf = unsafe { UserBuf::new(buf, cap) };
        // SAFETY: per the function contract, for both paths.
        let started = unsafe {
            self.start(
                req,
                |st, only_queued| {
                    *only_queued = apply_recv(st, sel, from, buf, req);
                    None
                },
                || Op::Recv {
                    sel,
                    from,
                    buf,
                    req,
                },
                out,
            )
        };
        started.map(|_| ())
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
        out: &mut Finished,
    ) -> Result<(), Poisoned> {
        // SAFETY: per the function contract.
        let buf = unsafe { UserBuf::new(buf, cap) };
        // SAFETY: per the function contract.
        unsafe {
            self.start(
                req,
                |st, _| {
                    apply_mrecv(st, msg, buf, req);
                    None
                },
                || Op::Mrecv { msg, buf, req },
                out,
            )
        }
        .map(|_| ())
    }

    /// Starts an operation: applied at once by `direct` if the progress
    /// token is free (after the commands queued before it), else queued as
    /// the command `queued` makes, in the request, for the token holder.
    /// The command is made only then: the direct path builds no [`Op`]
    /// and matches on none.
    ///
    /// `direct` says through its second argument that it only queued a
    /// receive: then, if no queued command was applied before it, the idle
    /// note is not made again.
    ///
    /// # Safety
    /// `req` valid until completion; `direct` applies the operation whose
    /// command `queued` makes.
    #[inline(always)]
    unsafe fn start(
        &self,
        req: ReqPtr,
        direct: impl FnOnce(&mut State, &mut bool) -> Option<InlineSend>,
        queued: impl FnOnce() -> Op,
        out: &mut Finished,
    ) -> Result<Started, Poisoned> {
        let mut started = Started::Pending;
        let ran = self.handoff.run_or_combine(
            out,
            |st, batch, out| {
                // Whether this hold can have ended the state the idle note
                // records (the core's tick empty, nothing posted to a
                // libfabric rail): if not, the note the last holder left
                // is still true, and it is not made again. A small send
                // the ring took, with no command queued before it, cannot:
                // if the note says "ring only", the tick was empty when
                // the token was taken (no bundle to flush, nothing
                // queued), the send went into the ring and left nothing;
                // if not, the note could only clear it again. Nor can a
                // receive that was only queued, with no command queued
                // before it: if the note says "ring
                // only", no bundle was open to flush, and a queued
                // receive leaves the tick empty and posts nothing. Any
                // other post is noted: one that matches an unexpected
                // rendezvous may leave the read waiting for a credit,
                // with no action to show for it.
                let mut unchanged = true;
                for cmd in batch {
                    apply(st, cmd);
                    unchanged = false;
                }
                // Set by a receive that was only queued.
                let mut only_queued = false;
                match direct(st, &mut only_queued) {
                    // After what was queued before it, as if it were the
                    // last action; complete for MPI once the driver has it.
                    // A packet the driver refused is copied by the core
                    // and completes as a copied send does, when a rail
                    // takes it (`proto::held`): through `out`, maybe in
                    // this call. With nothing queued before it (the
                    // common case) the packet goes straight on, its fields
                    // in registers: no call comes between. A packet the
                    // ring took changed nothing else; a refused one is
                    // queued.
                    Some(p) if st.out.actions.is_empty() => {
                        let taken = st.driver.send_inline(p, &mut st.core, &mut st.out);
                        unchanged &= taken;
                        if taken {
                            started = Started::Complete;
                        }
                    }
                    Some(p) => {
                        if execute_then_send(st, p) {
                            started = Started::Complete;
                        }
                        unchanged = false;
                    }
                    None if only_queued => {}
                    None => {
                        unchanged = false;
                        if !st.out.actions.is_empty() {
                            st.driver.execute(&mut st.core, &mut st.out);
                        }
                    }
                }
                out.take_from(&mut st.out.events);
                // The flag first: true in the common case, which then
                // reads nothing more (the other order read `self.idle`
                // and merged the two tests, about 5 instructions).
                if !unchanged {
                    if let Some(w) = &self.idle {
                        w.note_started(st);
                    }
                }
            },
            // What other threads queued meanwhile.
            |st, batch, out| self.apply_queued(st, batch, out),
        );
        if ran {
            return Ok(started);
        }
        // SAFETY: per the function contract; the command lives in the
        // request, which stays valid until the operation completes.
        unsafe {
            let cmd = req.init(queued());
            self.submit(cmd, out)?;
        }
        Ok(Started::Pending)
    }

    /// Applies queued commands as the token holder, executes what follows
    /// and collects what finished.
    fn apply_queued(&self, st: &mut State, batch: Batch<Cmd>, out: &mut Finished) {
        apply_all(st, batch);
        out.take_from(&mut st.out.events);
        if let Some(w) = &self.idle {
            w.note_started(st);
        }
    }

    /// Iprobe: drives progress, then looks at the unexpected queue.
    pub(crate) fn iprobe(
        &self,
        sel: Selector,
        from: Option<PeerId>,
        out: &mut Finished,
    ) -> Result<Option<ProbeInfo>, EngineError> {
        let found = self.probe(sel, from, false, out)?;
        Ok(found.map(|(info, _)| info))
    }

    /// Improbe: like iprobe, but removes the message and returns a handle
    /// for `imrecv`.
    pub(crate) fn improbe(
        &self,
        sel: Selector,
        from: Option<PeerId>,
        out: &mut Finished,
    ) -> Result<Option<(ProbeInfo, MessageHandle)>, EngineError> {
        let found = self.probe(sel, from, true, out)?;
        Ok(found.and_then(|(info, h)| h.map(|h| (info, h))))
    }

    /// Runs a probe command (`remove`: a matched probe) and waits for it.
    fn probe(
        &self,
        sel: Selector,
        from: Option<PeerId>,
        remove: bool,
        out: &mut Finished,
    ) -> Result<Option<(ProbeInfo, Option<MessageHandle>)>, EngineError> {
        let mut cmd = Cmd::new(Op::Probe { sel, from, remove });
        self.submit_and_wait(&mut cmd, out)?;
        match cmd.failed.take() {
            Some(why) => Err(EngineError(why)),
            None => Ok(cmd.found),
        }
    }

    /// Cancels a queued receive. Returns true if it was cancelled (and a
    /// `Cancelled` completion was queued).
    pub(crate) fn cancel(&self, req: ReqPtr, out: &mut Finished) -> Result<bool, EngineError> {
        let mut cmd = Cmd::new(Op::Cancel { req });
        self.submit_and_wait(&mut cmd, out)?;
        Ok(cmd.cancelled)
    }

    /// Drives the providers once. Returns the number of completions.
    /// Inlined into the poll's round (`ffi::ops::progress_round`): one
    /// frame fewer on every arrival.
    #[inline(always)]
    pub(crate) fn progress(&self, out: &mut Finished) -> usize {
        let mut events = 0;
        self.handoff
            .combine(|st, batch| events += self.poll_round(st, batch, out));
        events
    }

    /// Whether nothing waits in the component's queues for a rail to take
    /// it (`rustofi_tx_queued`'s answer, negated). One load, no token:
    /// right after a send, what that send left.
    #[inline]
    pub(crate) fn tx_flushed(&self) -> bool {
        !self.stats.tx_queued.load(Ordering::Relaxed)
    }

    /// Whether a panic while the progress token was held has left the
    /// engine unusable: nothing queued is applied from then on, so a
    /// caller waiting for a completion or an empty queue must stop.
    pub(crate) fn failed(&self) -> bool {
        self.handoff.check().is_err()
    }

    /// Waits (driving progress) until every transfer has finished, or the
    /// timeout passes (then says what is still pending).
    pub(crate) fn quiesce(&self, timeout: Duration, out: &mut Finished) -> bool {
        let start = Instant::now();
        loop {
            let busy = self.handoff.with_token(|st, batch| {
                apply_all(st, batch);
                let due = clock_due(&mut st.clock);
                full_round(st, due);
                out.take_from(&mut st.out.events);
                if let Some(w) = &self.idle {
                    w.note(st);
                }
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
            if let Some(w) = &self.idle {
                w.note(st);
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
             shm_rx_bytes={} stripe_nics={} striped={} stripe_rx_bytes={} rx_lost={} \
             rndv_repairs={} reads_declined={}",
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
            g(&s.rx_lost),
            g(&s.rndv_repairs),
            g(&s.reads_declined),
        )
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The endpoints go first: closing one cancels every posted receive
        // and transmit, after which no buffer is referenced by the
        // provider and the core's memory may go.
        self.handoff.with_state_mut(|st| st.driver.close());
    }
}
