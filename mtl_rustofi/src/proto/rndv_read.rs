//! Rendezvous by RMA read: the RTS carries the sender's registered buffer
//! (address and key); the receiver reads it in chunks, a few at a time,
//! and sends a FIN when the last read has landed (or one failed).

use super::action::Out;
use super::ids::RndvId;
use super::txq::{Chunk, ChunkKind, ChunkOwner, Op};
use super::Core;

/// Most reads in flight per rendezvous.
pub(super) const READS_IN_FLIGHT: usize = 8;

impl Core {
    /// Issues reads up to the in-flight limit and finishes the rendezvous
    /// when everything has landed (or a read failed and the rest drained).
    pub(super) fn pump_reads(&mut self, id: RndvId, out: &mut Out) {
        loop {
            let Some(r) = self.rndv_recv.get_mut(id) else {
                return;
            };
            if r.failed || r.next_off >= r.want || r.outstanding >= READS_IN_FLIGHT {
                break;
            }
            let peer = r.peer;
            let rail = self.peers[peer.index()].rail;
            let chunk = self.rails[rail.index()].profile.chunk;
            let n = (r.want - r.next_off).min(chunk);
            let c = Chunk {
                rail,
                peer,
                owner: ChunkOwner::Recv(id),
                kind: ChunkKind::Read,
                local: r.buf.region().slice(r.next_off, n),
                mr: r.mr,
                remote: r.remote_addr.wrapping_add(r.next_off as u64),
                key: r.key,
            };
            r.next_off += n;
            r.outstanding += 1;
            self.submit_op(Op::Chunk(c), out);
        }
        let r = self.rndv_recv.get(id).expect("checked in the loop");
        if r.outstanding == 0 && (r.next_off >= r.want || r.failed) {
            self.finish_rndv_recv(id, out);
        }
    }
}
