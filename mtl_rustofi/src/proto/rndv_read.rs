//! Rendezvous by RMA read: the RTS carries the sender's registered buffer
//! (address and key); the receiver reads it in chunks, a few at a time,
//! and sends a FIN when the last read has landed (or one failed).

use super::action::Out;
use super::ids::RndvId;
use super::txq::{Chunk, ChunkKind, ChunkOwner, Op};
use super::Core;

/// Most reads in flight per rendezvous.
pub(super) const READS_IN_FLIGHT: usize = 8;

/// A striped read is cut into at least this many pieces per lane, so
/// that every lane gets a share even where a rail's chunk size (the
/// provider's `max_msg_size`, `mtl_rustofi_rndv_chunk_size`) would take
/// the whole transfer in one read...
const PIECES_PER_LANE: usize = 4;
/// ...but no piece is smaller than this, where a read's fixed cost
/// starts to show.
const MIN_PIECE: usize = 64 * 1024;

impl Core {
    /// Issues reads up to the in-flight limit and finishes the rendezvous
    /// when everything has landed (or a read failed and the rest drained).
    pub(super) fn pump_reads(&mut self, id: RndvId, out: &mut Out) {
        loop {
            let Some(r) = self.rndv_recv.get_mut(id) else {
                return;
            };
            let lanes = 1 + r.lanes.len();
            if r.failed || r.next_off >= r.want || r.outstanding >= READS_IN_FLIGHT * lanes {
                break;
            }
            let peer = r.peer;
            // Round-robin over the primary rail (lane 0) and the stripes.
            let k = r.lane_next % lanes;
            r.lane_next += 1;
            let (rail, mr, remote, key) = match k.checked_sub(1) {
                None => (self.peers[peer.index()].rail, r.mr, r.remote_addr, r.key),
                Some(i) => {
                    let l = r.lanes[i];
                    (l.rail, l.mr, l.remote, l.key)
                }
            };
            let mut chunk = self.rails[rail.index()].profile.chunk;
            if lanes > 1 {
                chunk = chunk.min((r.want / (lanes * PIECES_PER_LANE)).max(MIN_PIECE));
            }
            let n = (r.want - r.next_off).min(chunk);
            let c = Chunk {
                rail,
                peer,
                owner: ChunkOwner::Recv(id),
                kind: ChunkKind::Read,
                local: r.buf.region().slice(r.next_off, n),
                mr,
                remote: remote.wrapping_add(r.next_off as u64),
                key,
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
