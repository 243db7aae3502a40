//! The libfabric driver: executes the protocol core's actions on real
//! endpoints and feeds every outcome back to it. Besides the libfabric
//! wrappers in [`crate::fabric`], this is the only module that calls into
//! libfabric (`sys`).
//!
//! It owns what the provider touches: the endpoints, the receive bounce
//! buffers, one `fi_context2` per operation id, and the registrations the
//! core asked for. The core owns the transmit bounce buffers and names
//! them (and user buffers) by address range; those stay valid until the
//! operation is reported back, which is the core's side of the contract.

mod poll;
mod post;
mod rail;
mod rxmem;
pub(crate) mod shm;

#[cfg(all(test, not(loom)))]
mod inline_tests;

pub(crate) use rail::Caps;

use crate::config::{RndvProtocol, Settings};
use crate::engine::EngineError;
use crate::fabric::{strerror, CqEntry, FiError, InfoList, MemoryRegion};
use crate::proto::ids::{FiAddr, MrId, OpId, RailId, RxSlot};
use crate::proto::{Access, Action, Core, InlineSend, Out, PostError, Posted, RailProfile};
use crate::sys;
use crate::usermem::Region;
use crate::wire::RailKind;
use rail::FabricRail;
use shm::ShmRail;
pub(crate) use shm::{RingWatch, SameHost};
use std::os::raw::c_void;
use std::ptr;

/// The context of every posted operation: libfabric's scratch space first
/// (FI_CONTEXT2), then what the completion refers to. repr(C) so that the
/// context pointer a completion returns leads back to it.
#[repr(C)]
struct OpCtx {
    fi: sys::fi_context2,
    what: Posted,
}

// The context pointer handed to libfabric is the address of the whole
// OpCtx, and the provider uses it as its fi_context2: that must come first.
const _: () = assert!(memoffset::offset_of!(OpCtx, fi) == 0);

impl OpCtx {
    fn boxed(what: Posted) -> Box<OpCtx> {
        Box::new(OpCtx {
            fi: Default::default(),
            what,
        })
    }
}

/// A receive bounce buffer. Its context and memory are boxed: the provider
/// holds their addresses while the buffer is posted. Fields drop in
/// declaration order: the registration is closed before its memory is
/// unmapped.
struct RxBuf {
    ctx: Box<OpCtx>,
    mr: Option<MemoryRegion>,
    mem: rxmem::RxMem,
}

/// The requested key of a receive buffer's registration: unique per
/// rail and slot, and apart from the keys the core asks for (which count
/// up from 1), as providers without FI_MR_PROV_KEY require.
fn rx_key(rail: usize, slot: usize) -> u64 {
    1 << 62 | (rail as u64) << 32 | slot as u64
}

const EAGAIN: isize = -(sys::FI_EAGAIN as isize);

fn posted(ret: isize) -> Result<(), PostError> {
    match ret {
        0 => Ok(()),
        EAGAIN => Err(PostError::Again),
        r => Err(PostError::Hard(r as i32)),
    }
}

/// Operation contexts kept after a burst (see [`Driver::shrink_ctx`]).
const OP_CTX_KEPT: usize = 4096;

/// Receive buffers posted on a network rail that no rank of the job
/// reaches it through (see [`Driver::open`]).
pub(crate) const IDLE_RAIL_RX: usize = 8;

pub(crate) struct Driver {
    rails: Vec<FabricRail>,
    rx: Vec<Vec<RxBuf>>,
    /// Contexts of transmit-side operations, indexed by [`OpId`]; boxed so
    /// they never move while posted.
    #[allow(clippy::vec_box)]
    op_ctx: Vec<Box<OpCtx>>,
    /// Registrations the core asked for, indexed by [`MrId`].
    mrs: Vec<Option<MemoryRegion>>,
    scratch: Vec<CqEntry>,
    /// Our own shared-memory rail, if open; its id follows the libfabric
    /// rails' (`NO_LOCAL` when there is none).
    local: Option<ShmRail>,
    local_id: u8,
    /// An action went to a libfabric rail since `take_posted_off_ring`
    /// last looked (the engine's idle watch must not skip the next poll).
    posted_off_ring: bool,
}

const NO_LOCAL: u8 = u8::MAX;

impl Driver {
    /// Opens the network provider at `index` of `list` (`net`); as `same`
    /// says, a rail for same-host peers beside it (our own, or libfabric's
    /// shm provider: see [`SameHost`]); and a stripe rail on each of the
    /// entries `stripes` (NICs besides the rank's own; one that cannot be
    /// opened is reported and left out). Without `net` (a job on one host)
    /// our own shared-memory rail is the only one, and libfabric is never
    /// asked for anything.
    pub(crate) fn open(
        net: Option<(&InfoList, usize)>,
        same: SameHost,
        stripes: &[usize],
        settings: &Settings,
    ) -> Result<Driver, EngineError> {
        let Some((list, index)) = net else {
            // A job on one host with no provider named: our own rail alone.
            let job = same.local.ok_or_else(|| {
                EngineError("no rail to open: no network provider and no shared memory".into())
            })?;
            let local = ShmRail::open(job, settings).map_err(|e| {
                EngineError(format!("the shared-memory rail cannot be opened: {e}"))
            })?;
            return Driver::assemble(Vec::new(), Some(local));
        };
        let mut rails = vec![FabricRail::open(
            list,
            index,
            RailKind::Net,
            settings,
            settings.rndv,
        )?];
        let net_name = rails[0].profile.provider.clone();
        let local = same.open_local(settings, &net_name)?;
        let (shm, shm_required) = match local {
            Some(_) => (None, false),
            None => (same.shm, same.shm_required),
        };
        if let Some(i) = shm {
            // The shm rail reads when it can, unless the user asked for the
            // send or msg protocol everywhere.
            let rndv = match settings.rndv {
                RndvProtocol::Send => RndvProtocol::Send,
                RndvProtocol::Msg => RndvProtocol::Msg,
                _ => RndvProtocol::Auto,
            };
            match FabricRail::open(list, i, RailKind::Shm, settings, rndv) {
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
                    e.0, net_name
                )),
            }
        }
        // Stripe rails carry the read rendezvous only; a network rail that
        // does not read (rndv_protocol, or udp's emulated reads) has no use
        // for them.
        let stripes = if rails[0].profile.rndv_read {
            stripes
        } else {
            &[]
        };
        for &i in stripes {
            // Stripe rails read with RMA like the network rail; a NIC
            // without FI_RMA cannot carry stripes.
            match FabricRail::open(list, i, RailKind::Stripe, settings, RndvProtocol::Read) {
                Ok(r) => rails.push(r),
                Err(e) => crate::log::error(&format!(
                    "a stripe endpoint cannot be opened ({}); large transfers use the other \
                     NICs (set mtl_rustofi_stripe = 1 to silence this)",
                    e.0
                )),
            }
        }
        let has_shm = rails.iter().any(|r| r.profile.kind == RailKind::Shm);
        if (has_shm || local.is_some()) && settings.one_host {
            // The shm rail serves every rank of the job; the network rail
            // only needs to stay reachable (for processes that join later),
            // not a full set of posted 64 KiB buffers.
            rails[0].profile.rx_count = rails[0].profile.rx_count.min(IDLE_RAIL_RX);
        }
        Driver::assemble(rails, local)
    }

    /// The driver over opened rails: their receive buffers made (and
    /// registered where the provider needs it).
    fn assemble(rails: Vec<FabricRail>, local: Option<ShmRail>) -> Result<Driver, EngineError> {
        let mut rx = Vec::with_capacity(rails.len());
        for (r, rl) in rails.iter().enumerate() {
            let mut bufs = Vec::with_capacity(rl.profile.rx_count);
            for s in 0..rl.profile.rx_count {
                let mem = rxmem::RxMem::new(rl.profile.buf_size)?;
                let mr = if rl.profile.mr_local {
                    // SAFETY: the buffer is owned by the driver and dropped
                    // after its registration (fields drop in order).
                    Some(unsafe {
                        MemoryRegion::register(
                            &rl.domain,
                            mem.as_ptr(),
                            mem.len(),
                            sys::FI_RECV as u64,
                            rx_key(r, s),
                            rl.caps.mr_endpoint.then(|| rl.ep()),
                        )
                    }?)
                } else {
                    None
                };
                bufs.push(RxBuf {
                    ctx: OpCtx::boxed(Posted::Rx(RailId(r as u8), RxSlot(s as u32))),
                    mem,
                    mr,
                });
            }
            rx.push(bufs);
        }
        let local_id = local.as_ref().map_or(NO_LOCAL, |_| rails.len() as u8);
        Ok(Driver {
            rails,
            rx,
            op_ctx: Vec::new(),
            mrs: Vec::new(),
            scratch: vec![CqEntry::default(); 64],
            local,
            local_id,
            posted_off_ring: false,
        })
    }

    pub(crate) fn profiles(&self) -> Vec<RailProfile> {
        let fabric = self.rails.iter().map(|r| r.profile.clone());
        fabric
            .chain(self.local.iter().map(|l| l.profile.clone()))
            .collect()
    }

    /// Whether an action went to a libfabric rail since the last call.
    #[inline]
    pub(crate) fn take_posted_off_ring(&mut self) -> bool {
        std::mem::take(&mut self.posted_off_ring)
    }

    /// The own shared-memory rail's id and its rings, if it is open.
    pub(crate) fn ring_watch(&self) -> Option<(RailId, std::sync::Arc<shm::RingWatch>)> {
        self.local
            .as_ref()
            .map(|l| (RailId(self.local_id), l.watch()))
    }

    /// Our own shared-memory rail, if open.
    pub(crate) fn local(&self) -> Option<&ShmRail> {
        self.local.as_ref()
    }

    pub(crate) fn local_mut(&mut self) -> Option<&mut ShmRail> {
        self.local.as_mut()
    }

    /// The network rail's capabilities (none without a network rail).
    pub(crate) fn net_caps(&self) -> Caps {
        self.rails.first().map(|r| r.caps).unwrap_or_default()
    }

    pub(crate) fn rail_of_kind(&self, kind: RailKind) -> Option<RailId> {
        if kind == RailKind::Local {
            return self.local.as_ref().map(|_| RailId(self.local_id));
        }
        self.rails
            .iter()
            .position(|r| r.profile.kind == kind)
            .map(|i| RailId(i as u8))
    }

    /// The endpoint addresses of every rail, for the modex.
    pub(crate) fn names(&self) -> Result<Vec<crate::wire::RailAddr>, FiError> {
        let mut v = self
            .rails
            .iter()
            .map(|r| {
                Ok(crate::wire::RailAddr {
                    kind: r.profile.kind,
                    max_eager: (r.profile.buf_size - crate::wire::BASE_LEN) as u32,
                    addr: r.ep().name()?,
                    provider: r.profile.provider.clone(),
                    nic: if r.profile.kind == RailKind::Stripe {
                        r.nic.clone()
                    } else {
                        String::new()
                    },
                })
            })
            .collect::<Result<Vec<_>, FiError>>()?;
        v.extend(self.local.as_ref().map(ShmRail::rail_addr));
        Ok(v)
    }

    /// Our stripe rails, by NIC name.
    pub(crate) fn stripe_rails(&self) -> Vec<(RailId, &str)> {
        self.rails
            .iter()
            .enumerate()
            .filter(|(_, r)| r.profile.kind == RailKind::Stripe)
            .map(|(i, r)| (RailId(i as u8), r.nic.as_str()))
            .collect()
    }

    /// Inserts a peer's published endpoint into a rail's address vector,
    /// if it is an endpoint of the rail's provider: a name means something
    /// only to its own provider (another's may be longer than this one's
    /// addresses, or a valid address of another protocol), so a peer that
    /// runs on another provider is an error, not a peer that never
    /// answers.
    pub(crate) fn insert_peer(
        &self,
        rail: RailId,
        remote: &crate::wire::RailAddr,
    ) -> Result<FiAddr, EngineError> {
        let r = &self.rails[rail.index()];
        if remote.provider != r.profile.provider {
            return Err(EngineError(format!(
                "the peer's {} endpoint is on provider {}, this rank's on {}: every rank \
                 must use the same provider (name one with mtl_rustofi_provider_include, \
                 the same for every rank)",
                match r.profile.kind {
                    RailKind::Shm => "shm",
                    RailKind::Stripe => "stripe",
                    _ => "network",
                },
                remote.provider,
                r.profile.provider
            )));
        }
        Ok(r.av.insert(&remote.addr).map(FiAddr)?)
    }

    /// Executes the first receive posts; a hard failure here fails the
    /// open (nothing has been exchanged yet).
    pub(crate) fn start(&mut self, core: &mut Core, out: &mut Out) -> Result<(), EngineError> {
        core.start(out);
        let actions = std::mem::take(&mut out.actions);
        for a in actions {
            if let Action::PostRecv { rail, slot } = a {
                if rail.0 == self.local_id {
                    continue;
                }
                match self.post_recv(rail, slot) {
                    Ok(()) => {}
                    Err(PostError::Again) => {
                        core.on_post_failed(Posted::Rx(rail, slot), PostError::Again, out)
                    }
                    Err(PostError::Hard(code)) => {
                        return Err(EngineError(format!(
                            "fi_recv on {} failed: {}",
                            self.rails[rail.index()].profile.provider,
                            strerror(-code)
                        )))
                    }
                }
            }
        }
        // Receive posts the provider could not take yet are retried at
        // the first progress call.
        out.actions.clear();
        Ok(())
    }

    /// Writes an inline packet that the core handed back from a send
    /// ([`InlineSend`]) into its peer's ring now, as the last action of the
    /// current output; a refused one (a full ring, a peer gone) goes back
    /// to the core, whose actions for it are executed here too. Returns
    /// whether the ring took it.
    // Inlined into the engine's send, like the core's half: the packet
    // is not copied again on its way to the ring.
    #[inline(always)]
    pub(crate) fn send_inline(&mut self, p: InlineSend, core: &mut Core, out: &mut Out) -> bool {
        debug_assert!(out.actions.is_empty(), "actions queued before it go first");
        let taken = match self.local.as_mut() {
            Some(l) if self.local_id == p.rail.0 => l.send_direct_or_refuse(p, core, out),
            // Only the own ring sends inline (its profile says so).
            _ => {
                core.on_inline_refused(
                    p.rail,
                    p.peer,
                    &p.encoded_head(),
                    p.payload,
                    p.req,
                    PostError::Again,
                    out,
                );
                false
            }
        };
        // A refused packet's actions.
        if !out.actions.is_empty() {
            self.execute(core, out);
        }
        taken
    }

    /// Executes the core's actions in order; every failure to post, and
    /// every registration, is reported back at once (which may queue more
    /// actions, executed in the same pass).
    pub(crate) fn execute(&mut self, core: &mut Core, out: &mut Out) {
        let mut i = 0;
        while let Some(&a) = out.actions.get(i) {
            i += 1;
            if self.local_id != NO_LOCAL && shm::rail_of(&a) == Some(RailId(self.local_id)) {
                if let Some(l) = self.local.as_mut() {
                    if let Some(read) = shm::local_read(&a) {
                        i = shm::execute_reads(l, read, i, core, out);
                        continue;
                    }
                    l.execute(a, core, out);
                    continue;
                }
            }
            self.posted_off_ring = true;
            // The two actions of every message are handled inline; the
            // rest out of line.
            let (what, r) = match a {
                Action::PostRecv { rail, slot } => {
                    (Posted::Rx(rail, slot), self.post_recv(rail, slot))
                }
                Action::Send {
                    op,
                    rail,
                    dest,
                    head,
                    inject: true,
                    ..
                } => match self.inject(rail, dest, head) {
                    // Copied by the provider, and no completion will come.
                    Ok(()) => {
                        core.on_complete(op, out);
                        continue;
                    }
                    Err(e) => (Posted::Op(op), Err(e)),
                },
                Action::Send {
                    op,
                    rail,
                    dest,
                    head,
                    mr,
                    payload,
                    inject: false,
                } => (Posted::Op(op), self.send(op, rail, dest, head, mr, payload)),
                other => match self.execute_other(other, core, out) {
                    Some(failed) => failed,
                    None => continue,
                },
            };
            if let Err(e) = r {
                core.on_post_failed(what, e, out);
            }
        }
        out.actions.clear();
    }

    /// Executes an action other than a receive post or a send; returns the
    /// post outcome for operations, None for registrations (reported to
    /// the core here).
    #[inline(never)]
    fn execute_other(
        &mut self,
        a: Action,
        core: &mut Core,
        out: &mut Out,
    ) -> Option<(Posted, Result<(), PostError>)> {
        Some(match a {
            Action::PostRecv { .. } | Action::Send { .. } => unreachable!("handled inline"),
            // Only the shared-memory rail sends inline (its profile says
            // so): anywhere else the packet goes the ordinary way.
            Action::SendInline {
                rail,
                peer,
                head,
                payload,
                req,
                ..
            } => {
                core.on_inline_refused(rail, peer, &head, payload, req, PostError::Again, out);
                return None;
            }
            Action::Read {
                op,
                rail,
                src,
                local,
                mr,
                remote_addr,
                key,
            } => (
                Posted::Op(op),
                self.read(op, rail, src, local, mr, remote_addr, key),
            ),
            Action::TaggedSend {
                op,
                rail,
                dest,
                local,
                mr,
                tag,
            } => (
                Posted::Op(op),
                self.tagged(op, rail, dest, local, mr, tag, true),
            ),
            Action::TaggedRecv {
                op,
                rail,
                src,
                local,
                mr,
                tag,
            } => (
                Posted::Op(op),
                self.tagged(op, rail, src, local, mr, tag, false),
            ),
            Action::Register {
                mr,
                rail,
                region,
                access,
                requested_key,
            } => {
                let r = self.register(mr, rail, region, access, requested_key);
                core.on_registered(mr, r, out);
                return None;
            }
            Action::Deregister { mr } => {
                if let Some(slot) = self.mrs.get_mut(mr.0 as usize) {
                    *slot = None;
                }
                return None;
            }
            Action::Cancel { op, rail } => {
                let ep = self.rails[rail.index()].ep().raw();
                let ctx = self.ctx(op);
                // SAFETY: the endpoint is open and `ctx` is the context
                // the operation was posted with. An operation that already
                // finished is not found, which is fine: its completion is
                // in the queue.
                unsafe { sys::fi_cancel(ep as *mut sys::fid, ctx) };
                return None;
            }
            Action::CheckAlive { peer, pid } => {
                if !process_exists(pid) {
                    core.peer_gone(peer, &format!("its process {pid} has exited"), out);
                }
                return None;
            }
        })
    }

    /// Closes every endpoint: afterwards the provider references none of
    /// our buffers, so they may be freed.
    pub(crate) fn close(&mut self) {
        for r in &mut self.rails {
            drop(r.ep.take());
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.close();
        // Registrations go before the memory they cover.
        self.mrs.clear();
        for bufs in &mut self.rx {
            for b in bufs.iter_mut() {
                drop(b.mr.take());
            }
        }
    }
}

/// Whether a process of this host still exists (signal 0 checks without
/// sending; EPERM means it exists under another user).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 sends nothing; kill only reads its arguments.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
