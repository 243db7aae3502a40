//! Repair of a stalled message rendezvous: a control packet the provider
//! lost whole.
//!
//! The message rendezvous runs over bounce buffers on providers whose
//! reliability is software of their own (`udp;ofi_rxd`), and such a
//! provider was seen to complete a receive with a length its message never
//! had: the packet is refused as malformed (counted as an error), and
//! whatever it carried is gone. A lost data packet whose header survives is
//! asked for at once ([`Core::on_damaged_data`]); a packet lost whole
//! leaves both sides waiting for each other:
//! - the grant (CTS): the sender waits for it, the receiver for data;
//! - a data packet or a request to send one again: the receiver waits for
//!   the piece, the sender (all sent) for the FIN;
//! - the FIN: the sender waits for it, the receiver is done.
//!
//! So each side watches its message rendezvous on the engine's clock
//! ([`Core::tick_repair`]). A receive that got no data for
//! [`REPAIR_AFTER`] grants the transfer again and asks for the first
//! [`super::rndv_msg::WINDOW`] pieces still missing; a send that has sent
//! everything and heard no FIN for as long asks the receiver (a FIN with
//! `FLAG_REPAIR`), which asks for what is missing or, when the transfer is
//! no longer pending (its slot and token do not match), answers with the
//! FIN. Every such packet carries `FLAG_REPAIR`: it may cross packets
//! still in flight (a grant already taken, a piece not yet sent, a piece
//! that arrives after all), and what it duplicates is dropped without an
//! error (the answering FIN carries the token in its length field, which
//! a plain FIN leaves 0). The round comes after the completion queues are
//! read, so what arrived while the process was away from MPI counts as
//! progress before it is judged; a peer that is itself away gets the
//! repairs of a transfer one, two, four and then every eight intervals
//! ([`BACKOFF_STEPS`]), a few small packets each, duplicates it drops.
//! One warning per transfer; `rndv_repairs` counts every round.
//!
//! The answering FIN says how the transfer ended: the receiver keeps the
//! last [`FAILED_KEPT`] of its message rendezvous that failed, so that a
//! failed receive whose failed FIN was lost fails its send too, instead
//! of completing it as sent. Older failures are forgotten and answered
//! as done: that takes as many failures with live peers at one receiver
//! between a failure and its sender's question, which comes an interval
//! after the sender's last packet completed, later if it is away from MPI
//! or its question is lost (then 2, 4, 8 intervals). A grant of
//! nothing has an empty data packet and a FIN of its own
//! (`proto/rndv_msg.rs`), so its loss is repaired like any grant's.

use super::action::Out;
use super::ids::{Cookie, PeerId, RndvId};
use super::peers::has;
use super::rndv::SendState;
use super::{Core, Stats};
use crate::wire::{self, Header, Kind};
use std::collections::VecDeque;
use std::time::Duration;

/// Time without progress before a message rendezvous is repaired: far
/// beyond a round trip, short beside a job's patience.
pub(crate) const REPAIR_AFTER: Duration = Duration::from_secs(1);

/// Failed message rendezvous a receiver remembers (see the module
/// documentation): a few kilobytes.
pub(crate) const FAILED_KEPT: usize = 256;

/// A message rendezvous that failed at its receiver: its sender, slot and
/// token, as a sender's question names them.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FailedTransfer {
    peer: PeerId,
    slot: RndvId,
    token: u64,
}

/// The clock of the repair rounds, and the failures they may be asked
/// about.
pub(super) struct RepairClock {
    after: Duration,
    next_round: Duration,
    /// The last [`FAILED_KEPT`] failed receives, oldest first.
    failed: VecDeque<FailedTransfer>,
}

impl Default for RepairClock {
    fn default() -> Self {
        RepairClock {
            after: REPAIR_AFTER,
            next_round: Duration::ZERO,
            failed: VecDeque::new(),
        }
    }
}

impl RepairClock {
    /// Remembers that the receive in `slot` with `token` from `peer`
    /// failed.
    pub(super) fn note_failed(&mut self, peer: PeerId, slot: RndvId, token: u64) {
        if self.failed.len() == FAILED_KEPT {
            self.failed.pop_front();
        }
        self.failed.push_back(FailedTransfer { peer, slot, token });
    }

    /// Whether that receive failed (as far as the record reaches back).
    fn failed(&self, peer: PeerId, slot: RndvId, token: u64) -> bool {
        let t = FailedTransfer { peer, slot, token };
        self.failed.iter().rev().any(|&f| f == t)
    }
}

/// Repairs of a transfer that stays still after them come one interval,
/// then two, four and eight intervals apart: a peer away from MPI for
/// minutes (computing) gets a few packets per transfer every eight
/// seconds, not every second, and the first repair after any progress
/// comes one interval after it again.
const BACKOFF_STEPS: u32 = 3;

/// A transfer's progress as the repair rounds last saw it.
#[derive(Default)]
pub(super) struct Still {
    /// The progress count at the last look.
    mark: u64,
    /// When it last changed (or the watch last started or fired).
    since: Option<Duration>,
    /// Repairs since it last moved.
    fired: u32,
}

impl Still {
    /// Whether `count` stood still for `after` (doubled for each repair
    /// since it last moved, up to [`BACKOFF_STEPS`] times) up to `now`;
    /// when it did, the wait starts again.
    fn due(&mut self, count: u64, now: Duration, after: Duration) -> bool {
        let since = match self.since {
            Some(s) if count == self.mark => s,
            _ => {
                self.mark = count;
                self.since = Some(now);
                self.fired = 0;
                return false;
            }
        };
        if now.saturating_sub(since) < after * (1 << self.fired.min(BACKOFF_STEPS)) {
            return false;
        }
        self.since = Some(now);
        self.fired += 1;
        true
    }
}

impl Core {
    /// Sets the time without progress before a repair (the simulator runs
    /// on a clock of microseconds).
    #[cfg(test)]
    pub(crate) fn set_repair_after(&mut self, after: Duration) {
        self.repair.after = after;
    }

    /// A repair round, at most four per interval: repairs every message
    /// rendezvous that stood still for the interval.
    pub(crate) fn tick_repair(&mut self, now: Duration, out: &mut Out) {
        if self.rndv_recv.is_empty() && self.rndv_send.is_empty() {
            return;
        }
        let c = &mut self.repair;
        if now < c.next_round {
            return;
        }
        let after = c.after;
        c.next_round = now + after / 4;
        let mut recvs = Vec::new();
        for id in self.rndv_recv.ids() {
            let Some(r) = self.rndv_recv.get_mut(id) else {
                continue;
            };
            let Some(m) = r.msg.as_mut() else {
                continue;
            };
            if r.failed || !r.cts_sent {
                continue;
            }
            let got = m.got as u64;
            if m.still.due(got, now, after) {
                recvs.push(id);
            }
        }
        let mut sends = Vec::new();
        for (&cookie, s) in self.rndv_send.iter_mut() {
            let Some(m) = s.msg.as_mut() else {
                continue;
            };
            // Only a send that waits for the FIN alone: one with packets
            // to send or in flight still moves by itself.
            let waits_fin = s.state == SendState::Sending
                && !s.failed
                && !m.acked
                && s.outstanding == 0
                && m.all_sent();
            if waits_fin && m.still.due(m.moves, now, after) {
                sends.push(cookie);
            }
        }
        for id in recvs {
            self.repair_recv(id, "no data arrived for a while", out);
        }
        for cookie in sends {
            self.ask_fin(cookie, out);
        }
    }

    /// Grants the receive `id` again and asks for the first pieces still
    /// missing.
    pub(super) fn repair_recv(&mut self, id: RndvId, why: &str, out: &mut Out) {
        let Some(r) = self.rndv_recv.get_mut(id) else {
            return;
        };
        let (peer, want) = (r.peer, r.want);
        let Some(m) = r.msg.as_mut() else {
            return;
        };
        let first = !std::mem::replace(&mut m.repaired, true);
        let got = m.got;
        Stats::add(&self.stats.rndv_repairs, 1);
        if first {
            crate::log::warn(&format!(
                "message rendezvous from peer {} ({got} of {want} bytes arrived): {why}; \
                 granted again, missing packets asked for",
                peer.0,
            ));
        }
        self.send_msg_cts(id, wire::FLAG_REPAIR, want, out);
        self.ask_missing(id, out);
    }

    /// Asks for the first [`super::rndv_msg::WINDOW`] pieces of the receive
    /// `id` still missing; when they have all come, the next ones are
    /// asked for at once (`MsgRecv::asked`), so that many lost pieces take
    /// a round trip per window, not an interval.
    pub(super) fn ask_missing(&mut self, id: RndvId, out: &mut Out) {
        let Some(r) = self.rndv_recv.get_mut(id) else {
            return;
        };
        let want = r.want;
        let Some(m) = r.msg.as_mut() else {
            return;
        };
        let missing = m.missing(want, super::rndv_msg::WINDOW);
        m.asked = missing.len();
        for off in missing {
            self.send_msg_cts(id, wire::FLAG_RESEND | wire::FLAG_REPAIR, off, out);
        }
    }

    /// The sender asks whether the transfer `cookie` is done.
    fn ask_fin(&mut self, cookie: Cookie, out: &mut Out) {
        let Some(s) = self.rndv_send.get_mut(&cookie) else {
            return;
        };
        let peer = s.peer;
        let Some(m) = s.msg.as_mut() else {
            return;
        };
        let first = !std::mem::replace(&mut m.asked_fin, true);
        let (slot, token) = (m.slot, m.token);
        Stats::add(&self.stats.rndv_repairs, 1);
        if first {
            crate::log::warn(&format!(
                "message rendezvous to peer {}: all data sent, no FIN for a while; asking the \
                 receiver",
                peer.0
            ));
        }
        let mut ask = self.header(Kind::Fin);
        ask.flags |= wire::FLAG_REPAIR;
        // A FIN has no extension: the token goes in the length field.
        ask.ctx = slot;
        ask.cookie = cookie.0;
        ask.len = token;
        self.send_ctrl(peer, &ask, out);
    }

    /// A repair asked the sender for a transfer that failed here or is
    /// gone (it failed, or it succeeded and the repair was sent before
    /// the FIN and overtook it, when the receive is gone and the abort
    /// is dropped there): the abort again, in case the first was lost.
    pub(super) fn repair_gone_send(&mut self, peer: PeerId, cookie: Cookie, out: &mut Out) {
        if self.peers[peer.index()].lost {
            return;
        }
        let mut fin = self.header(Kind::Fin);
        fin.flags |= wire::FLAG_ABORT | wire::FLAG_REPAIR;
        fin.cookie = cookie.0;
        fin.status = 1;
        self.send_ctrl(peer, &fin, out);
    }

    /// The sender asks whether its transfer is done: the receiver asks
    /// for what is missing, or answers with the FIN when the transfer is
    /// no longer pending here (failed, if it is a failure on record).
    pub(super) fn on_fin_asked(&mut self, peer: PeerId, hdr: &Header, out: &mut Out) {
        let id = RndvId(hdr.ctx);
        let pending = self
            .rndv_recv
            .get(id)
            .filter(|r| r.peer == peer && r.tag_base == hdr.len && r.msg.is_some())
            .map(|r| r.failed);
        match pending {
            Some(false) => self.repair_recv(id, "the sender sent all and heard no FIN", out),
            // Its FIN goes out when the failure is settled.
            Some(true) => {}
            None if !self.peers[peer.index()].lost => {
                // Marked as the answer (a plain FIN's length is 0): a
                // duplicate, after the FIN itself or an earlier answer,
                // is dropped without an error.
                let failed = self.repair.failed(peer, id, hdr.len);
                let mut fin = self.header(Kind::Fin);
                fin.cookie = hdr.cookie;
                fin.len = hdr.len;
                fin.status = failed as u32;
                self.send_ctrl(peer, &fin, out);
            }
            None => {}
        }
    }
}

impl Core {
    /// Under `Fault::LoseWhole`: whether this arriving packet of a message
    /// rendezvous is taken as lost whole: every fourth grant, request or
    /// FIN, every 1000th data packet.
    #[cold]
    pub(super) fn lose_whole_injected(&mut self, hdr: &Header) -> bool {
        let (count, every) = match hdr.kind {
            Kind::Data => (&mut self.fault_seen, 1000),
            Kind::Cts if has(hdr, wire::FLAG_RNDV_MSG) => (&mut self.fault_ctrl_seen, 4),
            Kind::Fin
                if !has(hdr, wire::FLAG_ABORT)
                    && (has(hdr, wire::FLAG_REPAIR)
                        || self
                            .rndv_send
                            .get(&Cookie(hdr.cookie))
                            .is_some_and(|s| s.msg.is_some())) =>
            {
                (&mut self.fault_ctrl_seen, 4)
            }
            _ => return false,
        };
        *count += 1;
        count.is_multiple_of(every)
    }
}

/// Whether a packet was sent by a repair (see the module documentation).
pub(super) fn is_repair(hdr: &Header) -> bool {
    has(hdr, wire::FLAG_REPAIR)
}

#[cfg(test)]
mod tests {
    use super::{RepairClock, Still, FAILED_KEPT};
    use crate::proto::ids::{PeerId, RndvId};
    use std::time::Duration;

    const S: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_watch_fires_at_one_two_four_then_eight_intervals_of_standing_still() {
        let mut w = Still::default();
        assert!(!w.due(5, ms(0), S), "the first look only starts it");
        assert!(!w.due(5, ms(900), S));
        assert!(w.due(5, ms(1000), S), "still for the interval");
        assert!(!w.due(5, ms(1500), S), "the wait starts again");
        assert!(!w.due(5, ms(2999), S), "and is twice as long");
        assert!(w.due(5, ms(3000), S));
        assert!(!w.due(5, ms(6999), S));
        assert!(w.due(5, ms(7000), S), "four intervals");
        assert!(w.due(5, ms(15000), S), "eight");
        assert!(!w.due(5, ms(22999), S));
        assert!(w.due(5, ms(23000), S), "and no longer than eight");
    }

    #[test]
    fn progress_puts_a_watch_off_and_its_wait_back_to_one_interval() {
        let mut w = Still::default();
        assert!(!w.due(1, ms(0), S));
        assert!(!w.due(2, ms(999), S), "it moved");
        assert!(!w.due(2, ms(1500), S), "still only since 999 ms");
        assert!(w.due(2, ms(1999), S));
        // Rounds far apart (a process that polls seldom) still fire.
        assert!(w.due(2, ms(9000), S));
        assert!(!w.due(3, ms(20000), S), "it moved");
        assert!(w.due(3, ms(21000), S), "one interval after it moved");
    }

    #[test]
    fn the_failure_record_keeps_the_last_ones() {
        let mut c = RepairClock::default();
        let (a, b) = (PeerId(1), PeerId(2));
        for i in 0..=FAILED_KEPT as u32 {
            c.note_failed(a, RndvId(i), 7);
        }
        assert!(!c.failed(a, RndvId(0), 7), "the oldest is forgotten");
        assert!(c.failed(a, RndvId(1), 7));
        assert!(c.failed(a, RndvId(FAILED_KEPT as u32), 7));
        assert!(!c.failed(a, RndvId(1), 8), "another token");
        assert!(!c.failed(b, RndvId(1), 7), "another peer");
    }
}
