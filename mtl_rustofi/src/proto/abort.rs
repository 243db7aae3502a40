//! Aborting a rendezvous: its chunks still in flight are cancelled (a
//! posted tagged receive or send may otherwise wait for ever for a peer
//! that will not act), chunks not yet handed over are dropped, and the
//! peer is told where it would otherwise wait: the sender of a send
//! rendezvous through a FIN with `FLAG_ABORT`, the receiver through a FIN
//! with a failed status.

use super::action::{Action, Out};
use super::ids::{Cookie, OpId, PeerId, RndvId};
use super::rndv::SendState;
use super::txq::{ChunkOwner, Op};
use super::Core;
use crate::wire::{self, Kind};

impl Core {
    /// Fails a receive-side rendezvous's outstanding work; with `notify`,
    /// tells the sender of a send rendezvous that granted data will not
    /// be received.
    pub(super) fn abort_recv(&mut self, id: RndvId, notify: bool, out: &mut Out) {
        let Some(r) = self.rndv_recv.get_mut(id) else {
            return;
        };
        r.failed = true;
        let tell = notify && !r.read && r.cts_sent && !r.abort_sent;
        r.abort_sent |= !r.read && r.cts_sent;
        let (peer, cookie) = (r.peer, r.cookie);
        if tell && !self.peers[peer.index()].lost {
            self.send_fin(peer, cookie.0, true, out);
        }
        self.cancel_chunks(ChunkOwner::Recv(id), out);
    }

    /// Fails a send-side rendezvous's outstanding work; with `notify`,
    /// tells the receiver (which posted receives for the data) that the
    /// data will not come.
    pub(super) fn abort_send(&mut self, cookie: Cookie, notify: bool, out: &mut Out) {
        let Some(s) = self.rndv_send.get_mut(&cookie) else {
            return;
        };
        s.failed = true;
        let tell = notify && s.state == SendState::Sending && !s.abort_sent;
        s.abort_sent = true;
        let peer = s.peer;
        if tell && !self.peers[peer.index()].lost {
            let mut fin = self.header(Kind::Fin);
            fin.flags |= wire::FLAG_ABORT;
            fin.cookie = cookie.0;
            fin.status = 1;
            self.send_ctrl(peer, &fin, out);
        }
        self.cancel_chunks(ChunkOwner::Send(cookie), out);
    }

    /// The sender of a send rendezvous failed after our CTS (`repair`:
    /// told again, in answer to a repair that may have crossed the end of
    /// the transfer).
    pub(super) fn on_sender_abort(
        &mut self,
        peer: PeerId,
        cookie: Cookie,
        repair: bool,
        out: &mut Out,
    ) {
        let found = self
            .rndv_recv
            .iter()
            .find(|(_, r)| r.peer == peer && r.cookie == cookie && !r.read)
            .map(|(id, _)| id);
        let Some(id) = found else {
            if !repair {
                self.error("dropped a rendezvous abort for no pending receive");
            }
            return;
        };
        self.count_error();
        self.error("the sender reported a failed rendezvous");
        if let Some(r) = self.rndv_recv.get_mut(id) {
            r.abort_sent = true;
        }
        self.abort_recv(id, false, out);
        if self.rndv_recv.get(id).is_some_and(|r| r.outstanding == 0) {
            self.finish_rndv_recv(id, out);
        }
    }

    /// Cancels every chunk of a rendezvous: posted ones through the
    /// driver (each is still reported once), queued ones at once. The
    /// queued ones are all taken out before any is accounted for, and the
    /// accounting does not abort again: reporting them one by one through
    /// `chunk_done` re-entered the abort for each (recursion as deep as the
    /// queue, quadratic work) and left this loop holding ids that the
    /// inner calls had already freed, so a Cancel could name an operation
    /// that had reused the id.
    fn cancel_chunks(&mut self, owner: ChunkOwner, out: &mut Out) {
        let owner_peer = match owner {
            ChunkOwner::Send(c) => self.rndv_send.get(&c).map(|s| s.peer),
            ChunkOwner::Recv(id) => self.rndv_recv.get(id).map(|r| r.peer),
        };
        let mine: Vec<(OpId, usize)> = match self.chunk_index.as_mut() {
            // Aborting every rendezvous of a lost peer: one scan made the
            // lists (see `index_chunks_of`).
            Some((peer, index)) if owner_peer == Some(*peer) => {
                index.remove(&owner).unwrap_or_default()
            }
            _ => self
                .ops
                .iter()
                .filter_map(|(id, op)| match op {
                    Op::Chunk(c) if c.owner == owner => Some((id, c.rail.index())),
                    _ => None,
                })
                .collect(),
        };
        let mut dropped = 0;
        for (id, rail) in mine {
            let queue = &mut self.rails[rail].retry;
            if let Some(pos) = queue.iter().position(|&q| q == id) {
                queue.remove(pos);
                self.ops.remove(id);
                dropped += 1;
            } else {
                out.actions.push(Action::Cancel {
                    op: id,
                    rail: super::ids::RailId(rail as u8),
                });
            }
        }
        if dropped > 0 {
            self.chunks_dropped(owner, dropped, out);
        }
    }

    /// Lists the chunks of every rendezvous with `peer` by owner, in one
    /// scan of the operations, for the aborts that follow: scanning once
    /// per rendezvous made giving up a peer with many rendezvous and many
    /// queued chunks quadratic (found by fuzzing the core). The lists are
    /// dropped with [`Core::drop_chunk_index`].
    pub(super) fn index_chunks_of(&mut self, peer: PeerId) {
        let mut index = super::ChunkIndex::default();
        for (id, op) in self.ops.iter() {
            if let Op::Chunk(c) = op {
                if c.peer == peer {
                    index.entry(c.owner).or_default().push((id, c.rail.index()));
                }
            }
        }
        self.chunk_index = Some((peer, index));
    }

    pub(super) fn drop_chunk_index(&mut self) {
        self.chunk_index = None;
    }

    /// Drops a chunk the provider refused for now (EAGAIN) if its
    /// rendezvous has failed meanwhile; true if it did. The abort runs
    /// while the actions of the same pass are still being executed: its
    /// Cancel, queued behind this chunk's post, found nothing posted, and
    /// a chunk queued again would be posted later with nothing left to
    /// cancel it (a tagged receive would wait for ever for data its
    /// sender, told of the abort, never sends).
    pub(super) fn drop_refused_chunk(&mut self, id: OpId, out: &mut Out) -> bool {
        let Some(Op::Chunk(c)) = self.ops.get(id) else {
            return false;
        };
        let owner = c.owner;
        let failed = match owner {
            ChunkOwner::Recv(r) => self.rndv_recv.get(r).is_none_or(|r| r.failed),
            ChunkOwner::Send(c) => self.rndv_send.get(&c).is_none_or(|s| s.failed),
        };
        if !failed {
            return false;
        }
        self.ops.remove(id);
        self.chunks_dropped(owner, 1, out);
        true
    }

    /// Accounts for `n` chunks of an aborted rendezvous that were dropped
    /// before reaching the driver, finishing it if nothing else is out.
    fn chunks_dropped(&mut self, owner: ChunkOwner, n: usize, out: &mut Out) {
        match owner {
            ChunkOwner::Send(cookie) => {
                let Some(s) = self.rndv_send.get_mut(&cookie) else {
                    return;
                };
                s.outstanding -= n;
                s.failed = true;
                if s.outstanding == 0 {
                    self.finish_rndv_send(cookie, true, out);
                }
            }
            ChunkOwner::Recv(id) => {
                let Some(r) = self.rndv_recv.get_mut(id) else {
                    return;
                };
                r.outstanding -= n;
                r.failed = true;
                if r.read {
                    self.pump_reads(id, out);
                } else if r.outstanding == 0 {
                    self.finish_rndv_recv(id, out);
                }
            }
        }
    }
}
