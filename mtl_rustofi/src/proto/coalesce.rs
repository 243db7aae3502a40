//! Coalescing: while a packet to a peer is in flight, back-to-back small
//! eager sends to it are written into one open packet (a bundle), each
//! header but the last flagged `FLAG_MORE`. The bundle is sent by any
//! other call into the core and by every progress tick, so it is held
//! only while its sender keeps issuing eager sends to that peer. Its sends
//! complete when the provider takes it ([`super::held`]): a wait on them
//! drives the progress that sends it.

use super::action::Out;
use super::eager::{put_eager, SendArgs};
use super::held::Carried;
use super::ids::{PeerId, ReqId};
use super::tick_work::TickWork;
use super::txbuf::TxBuf;
use super::txq::AfterSend;
use super::{Core, Stats};
use crate::wire::{self, Kind};

pub(super) struct Bundle {
    pub(super) buf: TxBuf,
    pub(super) len: usize,
    /// Offset of the last message's header.
    pub(super) last: usize,
    pub(super) reqs: Vec<ReqId>,
    /// Bytes charged to the peer's flow control for the buffer.
    pub(super) held: usize,
}

impl Core {
    /// Adds an eager send to the peer's bundle, or opens one if a packet to
    /// the peer is in flight. False (and nothing done) when the message
    /// must go on its own.
    pub(super) fn coalesce(&mut self, s: &SendArgs, out: &mut Out) -> bool {
        let len = s.buf.len();
        let need = wire::BASE_LEN + len;
        let p = &self.peers[s.peer.index()];
        // The packet must fit the receiver's bounce buffer.
        let cap = wire::BASE_LEN + p.eager_limit;
        if let Some(b) = &p.bundle {
            if b.len + need <= cap.min(b.buf.mem.len()) {
                let hdr = self.matchable_header(s.peer, Kind::Eager, s.ctx, s.src, s.tag, len);
                let b = self.peers[s.peer.index()]
                    .bundle
                    .as_mut()
                    .expect("checked above");
                wire::set_more(&mut b.buf.mem[b.last..]);
                let at = b.len;
                b.len = put_eager(&mut b.buf.mem, at, &hdr, &s.buf);
                b.last = at;
                b.reqs.push(s.req);
                Stats::bump(&self.stats.coalesced, 1);
                return true;
            }
            self.flush_bundle(s.peer, out);
        }
        let p = &self.peers[s.peer.index()];
        if p.inflight == 0 {
            return false;
        }
        let rail = p.rail;
        let mut buf = self.take_tx(rail, out);
        let held = Self::buf_cost(buf.mem.len());
        self.flow.charge(s.peer, held);
        let hdr = self.matchable_header(s.peer, Kind::Eager, s.ctx, s.src, s.tag, len);
        let n = put_eager(&mut buf.mem, 0, &hdr, &s.buf);
        self.peers[s.peer.index()].bundle = Some(Bundle {
            buf,
            len: n,
            last: 0,
            reqs: vec![s.req],
            held,
        });
        // Other peers' bundles were flushed when this send started, so the
        // list holds at most this peer (listed once).
        if !self.open_bundles.contains(&s.peer) {
            self.open_bundles.push(s.peer);
            self.work.set(TickWork::BUNDLES, true);
        }
        true
    }

    /// Sends the peer's open bundle, if any; its sends complete as the
    /// provider takes it ([`super::held`]).
    pub(super) fn flush_bundle(&mut self, peer: PeerId, out: &mut Out) {
        let Some(b) = self.peers[peer.index()].bundle.take() else {
            return;
        };
        let carried = Carried::Many(b.reqs);
        self.send_held_packet(
            peer,
            b.buf,
            b.len,
            None,
            AfterSend::Nothing,
            b.held,
            carried,
            out,
        );
    }

    /// Sends every open bundle except `keep`'s.
    #[inline]
    pub(super) fn flush_bundles(&mut self, keep: Option<PeerId>, out: &mut Out) {
        if !self.open_bundles.is_empty() {
            self.flush_open_bundles(keep, out);
        }
    }

    #[inline(never)]
    fn flush_open_bundles(&mut self, keep: Option<PeerId>, out: &mut Out) {
        let mut peers = std::mem::take(&mut self.open_bundles);
        self.work.set(TickWork::BUNDLES, false);
        for &p in &peers {
            if Some(p) != keep {
                self.flush_bundle(p, out);
            }
        }
        peers.retain(|&p| Some(p) == keep && self.peers[p.index()].bundle.is_some());
        self.work.set(TickWork::BUNDLES, !peers.is_empty());
        self.open_bundles = peers;
    }
}
