//! Posted receives, probes and cancels, and delivery of a matched message
//! to its receive.

use super::action::{Event, Out, Status};
use super::ids::{Cookie, MsgId, PeerId, ReqId};
use super::peers::sync_cookie;
use super::{Core, CoreError, Stats};
use crate::matching::{Envelope, PostId, Selector};
use crate::usermem::UserBuf;
use crate::wire::{Header, Kind};

/// A receive waiting in the posted queue.
pub(super) struct PostedRecv {
    pub(super) req: ReqId,
    pub(super) buf: UserBuf,
    /// The peer of a specific source, if known when posted: the receive
    /// fails if that peer is lost while it waits
    /// ([`Core::fail_posted_of`]).
    pub(super) from: Option<PeerId>,
}

/// A message waiting in the unexpected queue.
pub(super) enum Unexpected {
    Eager {
        peer: PeerId,
        data: Payload,
        sync: Option<Cookie>,
    },
    /// A rendezvous request: its header on the heap, so that the entry
    /// of every other message is no larger than it needs.
    Rts { peer: PeerId, hdr: Box<Header> },
    /// A message the provider lost of which the header arrived (see
    /// [`super::rx_error`]): its receive fails.
    Lost {
        peer: PeerId,
        len: u64,
        sync: Option<Cookie>,
    },
}

/// Bytes of an unexpected eager message kept in its queue entry: as many
/// as keep the entry within 64 bytes (it moves by value from the queue to
/// the receive: a larger one costs copies).
const INLINE: usize = 38;

/// An unexpected eager message's bytes: in the queue entry up to
/// [`INLINE`] of them, on the heap beyond. Small messages are the ones that
/// most often arrive before their receive (a window of them), and an
/// allocation and a free cost each of them more than the matching.
pub(super) enum Payload {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Vec<u8>),
}

impl Payload {
    #[inline]
    fn new(data: &[u8]) -> Payload {
        if data.len() <= INLINE {
            let mut bytes = [0; INLINE];
            crate::usermem::copy_into(&mut bytes, data);
            Payload::Inline {
                len: data.len() as u8,
                bytes,
            }
        } else {
            Payload::Heap(data.to_vec())
        }
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            Payload::Inline { len, bytes } => &bytes[..*len as usize],
            Payload::Heap(v) => v,
        }
    }
}

impl Unexpected {
    fn len(&self) -> u64 {
        match self {
            Unexpected::Eager { data, .. } => data.bytes().len() as u64,
            Unexpected::Rts { hdr, .. } => hdr.len,
            Unexpected::Lost { len, .. } => *len,
        }
    }
}

/// What a probe reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProbeInfo {
    pub(crate) src: i32,
    pub(crate) tag: i32,
    pub(crate) len: u64,
}

impl Core {
    /// Posts a receive into `buf`; `from` is the peer of a specific
    /// source (a receive from a lost peer fails unless a message from it
    /// is already here). Returns the posted-queue ticket (for
    /// [`Core::cancel`]) when it did not match at once.
    // Inlined into the engine's post (a call with its frame cost about 30
    // instructions a receive); the unexpected match stays out of line.
    #[inline(always)]
    pub(crate) fn recv(
        &mut self,
        sel: Selector,
        from: Option<PeerId>,
        buf: UserBuf,
        req: ReqId,
        out: &mut Out,
    ) -> Option<PostId> {
        self.flush_bundles(None, out);
        // A source whose peer the core does not know (a bad handle) is
        // not watched.
        let from = from.filter(|p| p.index() < self.peers.len());
        // With nothing unexpected queued (the common case) the receive is
        // queued at once; the match against the unexpected queue, with its
        // large result, is made out of line.
        let id = match self.matcher.try_queue(sel, PostedRecv { req, buf, from }) {
            Ok(id) => id,
            Err(p) => self.post_or_match(sel, p, out)?,
        };
        self.stats.posted_now.up(1);
        // Whether the peer is lost is read after the post, which changes
        // no peer, and only once some peer is.
        if self.any_lost && from.is_some_and(|p| self.peers[p.index()].lost) {
            self.fail_posted(id, &sel, out);
        }
        Some(id)
    }

    /// [`Self::recv`]'s post while unexpected messages are queued: a match
    /// is delivered (None), else the receive is queued.
    #[inline(never)]
    fn post_or_match(&mut self, sel: Selector, p: PostedRecv, out: &mut Out) -> Option<PostId> {
        match self.matcher.post(sel, p) {
            Ok((p, env, u)) => {
                self.unqueue_unexpected(&u);
                self.deliver(p, env, u, out);
                None
            }
            Err(id) => Some(id),
        }
    }

    /// Receives a message taken by [`Core::mprobe`].
    pub(crate) fn mrecv(
        &mut self,
        msg: MsgId,
        buf: UserBuf,
        req: ReqId,
        out: &mut Out,
    ) -> Result<(), CoreError> {
        self.flush_bundles(None, out);
        let (env, u) = self
            .taken
            .remove(msg)
            .ok_or_else(|| CoreError(format!("unknown or already received message {}", msg.0)))?;
        let p = PostedRecv {
            req,
            buf,
            from: None,
        };
        self.deliver(p, env, u, out);
        Ok(())
    }

    /// Cancels a queued receive; true if it was still queued (a
    /// `Cancelled` event is emitted).
    pub(crate) fn cancel(&mut self, id: PostId, out: &mut Out) -> bool {
        self.flush_bundles(None, out);
        match self.matcher.cancel(id) {
            Some(p) => {
                self.stats.posted_now.down(1);
                out.events.push(Event::Cancelled { req: p.req });
                true
            }
            None => false,
        }
    }

    /// MPI_Iprobe on the unexpected queue; `from` as for [`Core::recv`]:
    /// finding nothing from a lost peer is an error.
    pub(crate) fn probe(
        &mut self,
        sel: &Selector,
        from: Option<PeerId>,
        out: &mut Out,
    ) -> Result<Option<ProbeInfo>, CoreError> {
        self.flush_bundles(None, out);
        let found = self.matcher.probe(sel).map(|(env, u)| ProbeInfo {
            src: env.src,
            tag: env.tag,
            len: u.len(),
        });
        self.probed(found, from)
    }

    /// MPI_Improbe: takes the message out of matching.
    pub(crate) fn mprobe(
        &mut self,
        sel: &Selector,
        from: Option<PeerId>,
        out: &mut Out,
    ) -> Result<Option<(ProbeInfo, MsgId)>, CoreError> {
        self.flush_bundles(None, out);
        let Some((env, u)) = self.matcher.take_unexpected(sel) else {
            return self.probed(None, from);
        };
        self.unqueue_unexpected(&u);
        let info = ProbeInfo {
            src: env.src,
            tag: env.tag,
            len: u.len(),
        };
        Ok(Some((info, self.taken.insert((env, u)))))
    }

    /// A probe's outcome: nothing found from a specific peer watches it
    /// (or fails, if it is lost).
    fn probed<T>(
        &mut self,
        found: Option<T>,
        from: Option<PeerId>,
    ) -> Result<Option<T>, CoreError> {
        match (found, from) {
            (None, Some(peer)) if peer.index() < self.peers.len() => {
                self.note_probed(peer).map(|()| None)
            }
            (found, _) => Ok(found),
        }
    }

    /// Accounts for a message leaving the unexpected queue.
    #[inline]
    fn unqueue_unexpected(&self, u: &Unexpected) {
        self.stats.unexpected_now.down(1);
        self.stats.unexpected_bytes_now.down(u.len());
    }

    /// Hands a matched message to a receive.
    #[inline(always)]
    fn deliver(&mut self, p: PostedRecv, env: Envelope, u: Unexpected, out: &mut Out) {
        match u {
            Unexpected::Eager { peer, data, sync } => {
                self.finish_eager(p, env, peer, data.bytes(), sync, out)
            }
            Unexpected::Rts { peer, hdr } => self.start_rndv_recv(p, peer, &hdr, out),
            Unexpected::Lost { peer, sync, .. } => self.fail_lost(p, env, peer, sync, out),
        }
    }

    /// A matchable message, in order: to its posted receive or to the
    /// unexpected queue.
    pub(super) fn on_matchable(
        &mut self,
        peer: PeerId,
        hdr: &Header,
        payload: &[u8],
        out: &mut Out,
    ) {
        let env = Envelope {
            ctx: hdr.ctx,
            src: hdr.src,
            tag: hdr.tag,
        };
        if hdr.kind == Kind::Eager {
            let sync = sync_cookie(hdr.flags, hdr.cookie);
            self.on_eager(peer, env, sync, payload, out);
            return;
        }
        if let Some(p) = self.matcher.take_posted(&env) {
            self.stats.posted_now.down(1);
            self.start_rndv_recv(p, peer, hdr, out);
            return;
        }
        self.queue_unexpected(
            env,
            Unexpected::Rts {
                peer,
                hdr: Box::new(hdr.clone()),
            },
        );
    }

    /// An eager message, in order: to its posted receive or to the
    /// unexpected queue; `sync` is the cookie to acknowledge the match of
    /// a synchronous send with. Inlined into the packet handler, whose
    /// main work it is: a call, with its arguments through the stack,
    /// cost about 12 instructions a message.
    #[inline(always)]
    pub(super) fn on_eager(
        &mut self,
        peer: PeerId,
        env: Envelope,
        sync: Option<Cookie>,
        payload: &[u8],
        out: &mut Out,
    ) {
        // While wildcard receives are posted the match is made out of line
        // (`on_eager_wild`): a receive found there, joined with this one,
        // would go through two stack copies on this path too.
        match self.matcher.take_posted_unless_wild(&env) {
            Some(Some(p)) => {
                self.stats.posted_now.down(1);
                self.finish_eager(p, env, peer, payload, sync, out);
            }
            Some(None) => self.queue_unexpected_eager(peer, env, sync, payload),
            None => self.on_eager_wild(peer, env, sync, payload, out),
        }
    }

    /// [`Self::on_eager`] while wildcard receives are posted.
    #[inline(never)]
    fn on_eager_wild(
        &mut self,
        peer: PeerId,
        env: Envelope,
        sync: Option<Cookie>,
        payload: &[u8],
        out: &mut Out,
    ) {
        match self.matcher.take_posted(&env) {
            Some(p) => {
                self.stats.posted_now.down(1);
                self.finish_eager(p, env, peer, payload, sync, out);
            }
            None => self.queue_unexpected_eager(peer, env, sync, payload),
        }
    }

    /// An eager message no posted receive wanted: its payload copied
    /// into the unexpected queue.
    #[inline(always)]
    fn queue_unexpected_eager(
        &mut self,
        peer: PeerId,
        env: Envelope,
        sync: Option<Cookie>,
        payload: &[u8],
    ) {
        self.queue_unexpected(
            env,
            Unexpected::Eager {
                peer,
                data: Payload::new(payload),
                sync,
            },
        );
    }

    /// A matchable message no posted receive wanted waits in the
    /// unexpected queue. Every caller has just asked the matcher for a
    /// posted receive and found none, so the matcher does not ask again.
    pub(super) fn queue_unexpected(&mut self, env: Envelope, u: Unexpected) {
        Stats::bump(&self.stats.unexpected, 1);
        self.stats.unexpected_now.up(1);
        self.stats.unexpected_bytes_now.up(u.len());
        self.matcher.queue_unmatched(env, u);
    }

    /// Reports a finished receive.
    #[inline]
    pub(super) fn recv_done(
        &mut self,
        req: ReqId,
        env: Envelope,
        bytes: usize,
        status: Status,
        out: &mut Out,
    ) {
        if status != Status::Failed {
            Stats::bump(&self.stats.recv_msgs, 1);
            Stats::bump(&self.stats.recv_bytes, bytes as u64);
        }
        out.events.push(Event::Recv {
            req,
            src: env.src,
            tag: env.tag,
            bytes,
            status,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{Payload, Unexpected, INLINE};

    #[test]
    fn an_entry_fits_64_bytes() {
        assert!(std::mem::size_of::<Unexpected>() <= 64);
    }

    #[test]
    fn payload_keeps_its_bytes_inline_or_on_the_heap() {
        for len in [0, 1, 8, INLINE, INLINE + 1, 4096] {
            let data: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
            let p = Payload::new(&data);
            assert_eq!(p.bytes(), &data[..], "{len} bytes");
            assert_eq!(matches!(p, Payload::Inline { .. }), len <= INLINE, "{len}");
        }
    }
}
