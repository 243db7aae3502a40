//! Rendezvous by send: the receiver posts a tagged receive for every
//! chunk of the message, then grants the data with a CTS carrying the tag
//! of the first chunk; the sender sends each chunk with its tag. The
//! receiver is done when its receives complete, the sender when its sends
//! do; no FIN (unless the receiver fails before its CTS).

use super::action::Out;
use super::ids::{Cookie, PeerId, RndvId};
use super::rndv::SendState;
use super::txq::{Chunk, ChunkKind, ChunkOwner, Op};
use super::Core;
use crate::wire::{Header, Kind};

/// Data tags are `tag base | chunk index`; the base is a per-receiver
/// counter shifted past the index bits.
pub(super) const CHUNK_BITS: u32 = 20;
pub(super) const TAG_ID_MASK: u64 = (1 << 28) - 1;

impl Core {
    /// Posts a tagged receive for every chunk, then sends the CTS.
    pub(super) fn grant(&mut self, id: RndvId, out: &mut Out) {
        let Some(r) = self.rndv_recv.get_mut(id) else {
            return;
        };
        let peer = r.peer;
        let rail = self.peers[peer.index()].rail;
        let chunk = self.rails[rail.index()].profile.chunk;
        let (want, base, buf, mr) = (r.want, r.tag_base, r.buf, r.mr);
        let mut off = 0;
        let mut idx = 0u64;
        while off < want {
            let n = (want - off).min(chunk);
            let c = Chunk {
                rail,
                peer,
                owner: ChunkOwner::Recv(id),
                kind: ChunkKind::TaggedRecv,
                local: buf.region().slice(off, n),
                mr,
                remote: base | idx,
                key: 0,
            };
            self.submit_op(Op::Chunk(c), out);
            off += n;
            idx += 1;
        }
        let r = self.rndv_recv.get_mut(id).expect("present");
        r.outstanding = idx as usize;
        r.next_off = want;
        r.cts_sent = true;
        let cookie = r.cookie;
        let mut cts = self.header(Kind::Cts);
        cts.cookie = cookie.0;
        cts.ext0 = base;
        cts.ext1 = want as u64;
        self.send_ctrl(peer, &cts, out);
        if want == 0 {
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
        let base = hdr.ext0;
        let rail = self.peers[peer.index()].rail;
        let chunk = self.rails[rail.index()].profile.chunk;
        let (buf, mr) = (s.buf, s.mr);
        let mut off = 0;
        let mut idx = 0u64;
        while off < grant {
            let n = (grant - off).min(chunk);
            let c = Chunk {
                rail,
                peer,
                owner: ChunkOwner::Send(cookie),
                kind: ChunkKind::TaggedSend,
                local: buf.region().slice(off, n),
                mr,
                remote: base | idx,
                key: 0,
            };
            self.submit_op(Op::Chunk(c), out);
            off += n;
            idx += 1;
        }
        let s = self.rndv_send.get_mut(&cookie).expect("present");
        s.outstanding = idx as usize;
        if idx == 0 {
            self.finish_rndv_send(cookie, false, out);
        }
    }
}
