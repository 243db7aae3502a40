//! Rendezvous by send: the receiver posts a tagged receive for every
//! chunk of the message, then grants the data with a CTS carrying the tag
//! of the first chunk; the sender sends each chunk with its tag. The
//! receiver is done when its receives complete, the sender when its sends
//! do; no FIN (unless the receiver fails before its CTS).

use super::action::Out;
use super::ids::{Cookie, MrId, PeerId, RndvId};
use super::rndv::SendState;
use super::txq::{Chunk, ChunkKind, ChunkOwner, Op};
use super::Core;
use crate::usermem::Region;
use crate::wire::{Header, Kind};

/// Data tags are `tag base | chunk index`; the base is a per-receiver
/// counter shifted past the index bits.
pub(super) const CHUNK_BITS: u32 = 20;
pub(super) const TAG_ID_MASK: u64 = (1 << 28) - 1;

/// The data of a send rendezvous on one side: where it lies and the tag
/// of its first chunk.
struct Data {
    peer: PeerId,
    /// Bytes per chunk: the receiver's, which the CTS carries.
    chunk: usize,
    owner: ChunkOwner,
    kind: ChunkKind,
    buf: Region,
    mr: Option<MrId>,
    base: u64,
}

impl Core {
    /// Hands over one tagged operation per chunk of `d.buf`, tagged
    /// `base | index`; returns how many.
    fn submit_tagged(&mut self, d: Data, out: &mut Out) -> usize {
        let rail = self.peers[d.peer.index()].rail;
        let chunk = d.chunk.max(1);
        let mut off = 0;
        let mut idx = 0u64;
        while off < d.buf.len {
            let n = (d.buf.len - off).min(chunk);
            let c = Chunk {
                rail,
                peer: d.peer,
                owner: d.owner,
                kind: d.kind,
                local: d.buf.slice(off, n),
                mr: d.mr,
                remote: d.base | idx,
                key: 0,
            };
            self.submit_op(Op::Chunk(c), out);
            off += n;
            idx += 1;
        }
        idx as usize
    }

    /// Posts a tagged receive for every chunk, then sends the CTS.
    pub(super) fn grant(&mut self, id: RndvId, out: &mut Out) {
        let Some(r) = self.rndv_recv.get_mut(id) else {
            return;
        };
        let peer = r.peer;
        let (want, base) = (r.want, r.tag_base);
        let rail = self.peers[peer.index()].rail;
        let chunk = self.rails[rail.index()].profile.chunk;
        let data = Data {
            peer,
            chunk,
            owner: ChunkOwner::Recv(id),
            kind: ChunkKind::TaggedRecv,
            buf: r.buf.region().slice(0, want),
            mr: r.mr,
            base,
        };
        let chunks = self.submit_tagged(data, out);
        let r = self.rndv_recv.get_mut(id).expect("present");
        r.outstanding = chunks;
        r.next_off = want;
        r.cts_sent = true;
        let cookie = r.cookie;
        let mut cts = self.header(Kind::Cts);
        cts.ext0 = base;
        self.send_grant(peer, cts, cookie, want, chunk, out);
        if want == 0 {
            // Nothing to wait for (the message protocol's grant of nothing
            // waits for its empty piece instead: `proto/rndv_msg.rs`).
            self.finish_rndv_recv(id, out);
        }
    }

    /// The receiver granted the data: send it in tagged chunks.
    pub(super) fn on_cts(&mut self, peer: PeerId, hdr: &Header, out: &mut Out) {
        let cookie = Cookie(hdr.cookie);
        let Some(s) = self.rndv_send.get_mut(&cookie) else {
            self.error("dropped a rendezvous grant for no pending send");
            return;
        };
        if s.state != SendState::AwaitReply || s.peer != peer {
            self.error("dropped a duplicate rendezvous grant");
            return;
        }
        s.state = SendState::Sending;
        let grant = (hdr.ext1 as usize).min(s.buf.len());
        let rail = self.peers[peer.index()].rail;
        // The receiver's chunk size, so that each send meets its receive;
        // a CTS without one (0) means ours.
        let chunk = match hdr.len as usize {
            0 => self.rails[rail.index()].profile.chunk,
            n => n,
        };
        let data = Data {
            peer,
            chunk,
            owner: ChunkOwner::Send(cookie),
            kind: ChunkKind::TaggedSend,
            buf: s.buf.region().slice(0, grant),
            mr: s.mr,
            base: hdr.ext0,
        };
        let chunks = self.submit_tagged(data, out);
        let s = self.rndv_send.get_mut(&cookie).expect("present");
        s.outstanding = chunks;
        if chunks == 0 {
            self.finish_rndv_send(cookie, false, out);
        }
    }
}
