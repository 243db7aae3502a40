//! Transmit bounce buffers: the per-rail pools (full-size and small
//! buffers), their registration on FI_MR_LOCAL rails, and what a
//! registration the driver reports is for. The transmit queue
//! ([`super::txq`]) takes a buffer per packet and returns it when the
//! packet is reported.

use super::action::{Access, Action, Out};
use super::held::Carried;
use super::ids::{Cookie, MrId, OpId, RailId, RndvId};
use super::tick_work::TickWork;
use super::txq::{Op, BUFFER_WAIT, REBUFFERS};
use super::Core;
use crate::usermem::Region;

/// A transmit bounce buffer and its registration (FI_MR_LOCAL rails).
pub(super) struct TxBuf {
    pub(super) mem: Box<[u8]>,
    pub(super) mr: Option<MrId>,
}

impl TxBuf {
    pub(super) fn region(&self, len: usize) -> Region {
        Region {
            addr: self.mem.as_ptr() as usize,
            len,
        }
    }
}

/// What a registration is for; consulted when the driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MrUse {
    /// A pool bounce buffer (lives as long as the buffer).
    TxBuf,
    /// A pool bounce buffer whose registration failed: sends from it fail.
    Failed,
    /// The user buffer of a rendezvous send.
    RndvSend(Cookie),
    /// The user buffer of a rendezvous receive.
    RndvRecv(RndvId),
    /// Released before the driver reported it: its id is not given out
    /// again until that report comes (and is dropped). Otherwise a new
    /// registration could take the id while the old `Register` action is
    /// still queued before it, and receive the old one's result (and key).
    Dropped,
}

/// Size of the small bounce buffers: a header and a small payload. A packet
/// that fits takes one of these instead of a buffer of the rail's full
/// size (64 KiB over tcp), so that many small sends queued at once hold
/// little memory.
pub(crate) const SMALL_BUF: usize = 256;

impl Core {
    /// A free bounce buffer of the rail, made (and registered where the
    /// rail needs it) if the pool is empty.
    #[inline]
    pub(super) fn take_tx(&mut self, rail: RailId, out: &mut Out) -> TxBuf {
        let size = self.rails[rail.index()].profile.buf_size;
        self.take_sized(rail, size, out)
    }

    /// A bounce buffer for a packet of `need` bytes: a small one where it
    /// fits, else one of the rail's full size.
    #[inline]
    pub(super) fn take_tx_for(&mut self, rail: RailId, need: usize, out: &mut Out) -> TxBuf {
        let full = self.rails[rail.index()].profile.buf_size;
        let size = if need <= SMALL_BUF && SMALL_BUF < full {
            SMALL_BUF
        } else {
            full
        };
        self.take_sized(rail, size, out)
    }

    #[inline]
    fn take_sized(&mut self, rail: RailId, size: usize, out: &mut Out) -> TxBuf {
        let r = &mut self.rails[rail.index()];
        let pool = if size == r.profile.buf_size {
            &mut r.tx_free
        } else {
            &mut r.tx_small
        };
        if let Some(b) = pool.pop() {
            return b;
        }
        r.tx_total += 1;
        let mem = vec![0u8; size].into_boxed_slice();
        let mut b = TxBuf { mem, mr: None };
        if r.profile.mr_local {
            let region = b.region(b.mem.len());
            b.mr = Some(self.register(rail, region, Access::Send, MrUse::TxBuf, out));
        }
        b
    }

    /// Returns a bounce buffer to its pool. Bursts beyond the provider's
    /// queue depth grow the pool (each queued eager send holds its copy);
    /// the excess is freed again as the burst drains, and each free list's
    /// own array is shrunk once it empties after a burst.
    #[inline]
    pub(super) fn recycle_tx(&mut self, rail: RailId, b: TxBuf, out: &mut Out) {
        let unusable = self.tx_unusable(&b);
        let r = &mut self.rails[rail.index()];
        let keep = r.profile.tx_depth.max(256);
        let pool = if b.mem.len() == r.profile.buf_size {
            &mut r.tx_free
        } else {
            &mut r.tx_small
        };
        if !unusable && pool.len() < keep {
            pool.push(b);
            return;
        }
        r.tx_total -= 1;
        if let Some(mr) = b.mr {
            self.deregister(mr, out);
            // The driver releases the registration before the next input,
            // when the memory is freed.
            self.retired.push(b.mem);
            self.work.set(TickWork::RETIRED, true);
        }
    }

    /// Whether a failed post of packet `p` was for want of its buffer's
    /// registration: the registration failed and the post named it (an
    /// injected packet names none, so its failures are the provider's).
    pub(super) fn failed_for_registration(&self, p: &super::txq::Packet) -> bool {
        self.tx_unusable(&p.buf) && !self.goes_by_inject(p)
    }

    /// Whether the buffer's registration failed: every send from it fails,
    /// so it must leave the pool.
    pub(super) fn tx_unusable(&self, b: &TxBuf) -> bool {
        b.mr.is_some_and(|m| self.mrs.get(m) == Some(&MrUse::Failed))
    }

    /// Before a packet is resent or moved: if its buffer's registration
    /// failed, the packet moves to another buffer, from the pool (whose
    /// registrations all succeeded) or newly made (else every resend
    /// would fail the same way and the peer would be given up over one
    /// failed registration).
    pub(super) fn rebuffer(&mut self, id: OpId, out: &mut Out) {
        let (rail, len) = match self.ops.get(id) {
            Some(Op::Packet(p)) if self.tx_unusable(&p.buf) => (p.rail, p.len),
            _ => return,
        };
        let fresh = self.take_tx_for(rail, len, out);
        self.swap_buffer(id, fresh, out);
    }

    /// Copies packet `id` into `fresh`, which holds it, and lets its old
    /// buffer go.
    fn swap_buffer(&mut self, id: OpId, mut fresh: TxBuf, out: &mut Out) {
        let Some(Op::Packet(p)) = self.ops.get_mut(id) else {
            unreachable!("a packet being moved is live")
        };
        let rail = p.rail;
        fresh.mem[..p.len].copy_from_slice(&p.buf.mem[..p.len]);
        let old = std::mem::replace(&mut p.buf, fresh);
        self.recycle_tx(rail, old, out);
    }

    /// A packet whose post failed because its bounce buffer's registration
    /// had failed: it moves to another buffer and waits in the rail's
    /// queue without using up a resend, at most [`REBUFFERS`] times. False
    /// (the failure is a failed send) for any other operation, once the
    /// moves are used up, or if its peer is given up.
    ///
    /// The buffer it moves to is a pooled one (registered) if the pool has
    /// one. Else, while anything is in flight on the rail, it waits for a
    /// buffer to come back ([`Core::buffer_for`]): a registration that has
    /// just failed (memory that cannot be locked) would likely fail again,
    /// and waiting turns it into back-pressure. Only with nothing in flight,
    /// or after [`BUFFER_WAIT`] passes, is a buffer made and registered
    /// again.
    pub(super) fn unregistered_packet_moves(&mut self, id: OpId, why: &str, out: &mut Out) -> bool {
        let moves = match self.ops.get(id) {
            Some(Op::Packet(p)) => {
                p.rebuffers_left > 0
                    && !self.peers[p.peer.index()].lost
                    && self.failed_for_registration(p)
            }
            _ => false,
        };
        if !moves {
            return false;
        }
        let Some(Op::Packet(p)) = self.ops.get_mut(id) else {
            unreachable!("checked above")
        };
        p.rebuffers_left -= 1;
        let (rail, left) = (p.rail, p.rebuffers_left);
        // As for a resend: sends reported complete when the packet was
        // first handed over stay complete.
        if p.reported {
            p.carried = Carried::None;
        }
        self.error(&format!(
            "packet not sent ({why}): its bounce buffer is not registered; \
             moving it to another (move {} of {REBUFFERS})",
            REBUFFERS - left
        ));
        if !self.rebuffer_pooled(id, out) {
            if self.rails[rail.index()].inflight > 0 {
                if let Some(Op::Packet(p)) = self.ops.get_mut(id) {
                    p.awaits_buffer = Some(0);
                }
                self.rails[rail.index()].awaiting_buffer = true;
            } else {
                self.rebuffer(id, out);
            }
        }
        self.requeue(rail, id);
        true
    }

    /// Whether queued operation `id` may be handed over: a packet waiting
    /// for a buffer takes one from the pool or, once nothing is in flight
    /// on the rail to bring one back or it has waited [`BUFFER_WAIT`]
    /// passes, a new one; false while it must wait.
    #[cold]
    pub(super) fn buffer_for(&mut self, rail: RailId, id: OpId, out: &mut Out) -> bool {
        let waited = match self.ops.get(id) {
            Some(Op::Packet(p)) => match p.awaits_buffer {
                Some(w) => w,
                None => return true,
            },
            _ => return true,
        };
        if !self.rebuffer_pooled(id, out) {
            if self.rails[rail.index()].inflight > 0 && waited < BUFFER_WAIT {
                if let Some(Op::Packet(p)) = self.ops.get_mut(id) {
                    p.awaits_buffer = Some(waited + 1);
                }
                return false;
            }
            self.rebuffer(id, out);
        }
        if let Some(Op::Packet(p)) = self.ops.get_mut(id) {
            p.awaits_buffer = None;
        }
        true
    }

    /// Moves packet `id` to a free buffer of the pool that holds it (its
    /// registration succeeded); false if the pool has none.
    fn rebuffer_pooled(&mut self, id: OpId, out: &mut Out) -> bool {
        let Some(Op::Packet(p)) = self.ops.get(id) else {
            return false;
        };
        let (rail, len) = (p.rail, p.len);
        let r = &mut self.rails[rail.index()];
        let small = len <= SMALL_BUF && SMALL_BUF < r.profile.buf_size;
        let Some(fresh) = small
            .then(|| r.tx_small.pop())
            .flatten()
            .or_else(|| r.tx_free.pop())
        else {
            return false;
        };
        self.swap_buffer(id, fresh, out);
        true
    }

    /// Asks for a registration and notes what it is for.
    pub(super) fn register(
        &mut self,
        rail: RailId,
        region: Region,
        access: Access,
        what: MrUse,
        out: &mut Out,
    ) -> MrId {
        let requested_key = if self.rails[rail.index()].profile.mr_prov_key {
            0
        } else {
            self.next_key += 1;
            self.next_key
        };
        let mr = self.mrs.insert(what);
        self.mr_unreported.insert(mr);
        out.actions.push(Action::Register {
            mr,
            rail,
            region,
            access,
            requested_key,
        });
        mr
    }

    pub(super) fn deregister(&mut self, mr: MrId, out: &mut Out) {
        if self.mr_unreported.contains(&mr) {
            // Its `Register` is still queued (the `Deregister` follows it):
            // the id stays taken until the report (`MrUse::Dropped`).
            if let Some(u) = self.mrs.get_mut(mr) {
                if *u != MrUse::Dropped {
                    *u = MrUse::Dropped;
                    out.actions.push(Action::Deregister { mr });
                }
            }
            return;
        }
        if self.mrs.remove(mr).is_some() {
            out.actions.push(Action::Deregister { mr });
        }
    }

    /// The driver's answer to a `Register` action: the key on success.
    pub(crate) fn on_registered(&mut self, mr: MrId, result: Result<u64, i32>, out: &mut Out) {
        self.mr_unreported.remove(&mr);
        let Some(&what) = self.mrs.get(mr) else {
            return;
        };
        match (what, result) {
            // Released meanwhile: the result is no one's, and the id is
            // free again (its `Deregister` is queued after this report).
            (MrUse::Dropped, _) => {
                self.mrs.remove(mr);
            }
            (MrUse::TxBuf, Ok(_)) | (MrUse::Failed, _) => {}
            (MrUse::TxBuf, Err(code)) => {
                self.count_error();
                self.error(&format!(
                    "cannot register a bounce buffer: {}",
                    crate::fabric::strerror(-code)
                ));
                // Sends from this buffer fail (and are handled as failed
                // posts); the id stays so that its release is reported.
                if let Some(u) = self.mrs.get_mut(mr) {
                    *u = MrUse::Failed;
                }
            }
            (MrUse::RndvSend(cookie), r) => {
                self.user_registered(mr, r);
                self.rndv_send_registered(cookie, mr, r, out)
            }
            (MrUse::RndvRecv(id), r) => {
                self.user_registered(mr, r);
                self.rndv_recv_registered(id, mr, r, out)
            }
        }
    }
}
