//! What the core holds when nothing has moved for a while: a report for
//! the user (and whoever debugs a hang) instead of silence.
//!
//! The core notes when a message other than a liveness probe arrives and
//! when an operation other than a probe completes (`moved`); the engine's
//! clock asks, every round, whether a report is due. When the core has had
//! work outstanding and nothing moved for [`STALL_AFTER`], one report goes
//! out, and one more each time the stall doubles in length. Probes do not
//! count: two stalled ranks keep probing each other. Nothing is failed
//! here: a peer busy outside MPI is not a stall of ours, and peers that are
//! really gone are the business of [`super::liveness`].

use super::txq::Op;
use super::Core;
use std::fmt::Write;
use std::time::Duration;

/// Time without any completion or arrival, while work is outstanding,
/// before the first report.
pub(crate) const STALL_AFTER: Duration = Duration::from_secs(10);

/// Said after a report when a stalled rail runs on libfabric's sockets
/// provider: the one stall of a provider's own that this report cannot
/// show, and what a site does about it (README, Known limits).
const SOCKETS_HINT: &str = " (the sockets provider can stop for good when a TCP receive \
    window closes in the middle of a message header: raise net.ipv4.tcp_rmem's default \
    to 1 MiB, or use the tcp provider)";

/// A gap between clock rounds longer than this means the process was away
/// from MPI (computing); what it waits for could not move meanwhile.
const AWAY: Duration = Duration::from_secs(2);

/// The stall watch's state.
#[derive(Default)]
pub(super) struct StallWatch {
    /// A message or completion other than a probe since the last round.
    pub(super) moved: bool,
    /// When something last moved (or the core last had nothing to do).
    last_moved: Duration,
    /// The last clock round.
    last_round: Duration,
    /// When the next report is due, once stalled (zero: none made yet).
    next_report: Duration,
}

impl Core {
    /// One clock round of the stall watch; the report when one is due.
    pub(crate) fn tick_stall(&mut self, now: Duration) -> Option<String> {
        let away = now.saturating_sub(self.stall.last_round) > AWAY;
        self.stall.last_round = now;
        let moved = std::mem::take(&mut self.stall.moved);
        if moved || away || !self.busy_for_stall() {
            let w = &mut self.stall;
            w.last_moved = now;
            w.next_report = Duration::ZERO;
            return None;
        }
        let w = &mut self.stall;
        let still = now.saturating_sub(w.last_moved);
        if still < STALL_AFTER || (!w.next_report.is_zero() && now < w.next_report) {
            return None;
        }
        w.next_report = now + still;
        Some(self.stall_report(still))
    }

    /// Work that waits on the network: operations, rendezvous, synchronous
    /// sends, queued sends. (Posted receives alone are not: waiting for a
    /// message nobody has sent is normal.)
    fn busy_for_stall(&self) -> bool {
        self.busy() || !self.sync_wait.is_empty()
    }

    /// Queued packets of rail `r` that wait for a bounce buffer to come
    /// back, their own having failed to register (`Core::buffer_for`).
    fn awaiting_buffers(&self, r: &super::Rail) -> usize {
        if !r.awaiting_buffer {
            return 0;
        }
        r.retry
            .iter()
            .filter(
                |&&id| matches!(self.ops.get(id), Some(Op::Packet(p)) if p.awaits_buffer.is_some()),
            )
            .count()
    }

    /// One line: what waits, per rail and in the core's tables.
    pub(crate) fn stall_report(&self, still: Duration) -> String {
        let l = self.leftovers();
        let mut s = format!(
            "nothing arrived or completed for {} s with work outstanding: \
             {} operations, {} send rendezvous, {} receive rendezvous, {} synchronous sends \
             awaiting acks, {} sends waiting for room ({} B held), {} posted receives, \
             {} unexpected, {} held out of order;",
            still.as_secs(),
            l.ops,
            l.rndv_send,
            l.rndv_recv,
            l.sync_wait,
            self.flow.waiting_len(),
            self.flow.held_total(),
            l.posted,
            l.unexpected,
            l.held_out_of_order,
        );
        for (i, r) in self.rails.iter().enumerate() {
            let waiting = match self.awaiting_buffers(r) {
                0 => String::new(),
                n => format!(
                    " ({n} waiting for a registered bounce buffer: registrations have failed)"
                ),
            };
            let _ = write!(
                s,
                " rail {i} ({}, {:?}): {}/{} in flight, {} queued{waiting}, {} rx unposted;",
                r.profile.provider,
                r.profile.kind,
                r.inflight,
                r.profile.tx_depth,
                r.retry.len(),
                r.rx_retry.len(),
            );
        }
        s.pop();
        if self
            .rails
            .iter()
            .any(|r| r.profile.provider.split(';').next() == Some("sockets"))
        {
            s.push_str(SOCKETS_HINT);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ids::{PeerId, ReqId};
    use crate::proto::{Out, SendArgs};
    use crate::usermem::UserBuf;

    fn core() -> (Core, PeerId) {
        let (c, peers) = crate::proto::test_core::net_core("udp;ofi_rxd", &[2]);
        (c, peers[0])
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    /// Clock rounds every second up to `to` (exclusive), nothing moving.
    fn rounds(c: &mut Core, from: u64, to: u64) -> Option<String> {
        let mut last = None;
        for t in from..to {
            last = c.tick_stall(S(t));
            assert_eq!(last, None, "no report before {to} s (at {t} s)");
        }
        last
    }

    /// Sends `data` to `peer` (request 1); the core's output.
    fn send_one(c: &mut Core, peer: PeerId, data: &mut [u8], sync: bool) -> Out {
        let mut out = Out::new();
        // SAFETY: every caller keeps `data` alive until the core is
        // dropped (the send is never completed by a provider here).
        let buf = unsafe { UserBuf::new(data.as_mut_ptr(), data.len()) };
        let args = SendArgs {
            peer,
            ctx: 0,
            src: 0,
            tag: 3,
            buf,
            sync,
            req: ReqId(1),
        };
        c.send(args, &mut out).unwrap().into_out(&mut out);
        out
    }

    #[test]
    fn an_idle_core_never_reports() {
        let (mut c, _) = core();
        rounds(&mut c, 0, 100);
    }

    #[test]
    fn a_send_the_provider_never_completes_is_reported_then_backs_off() {
        let (mut c, peer) = core();
        let mut data = [5u8; 100];
        send_one(&mut c, peer, &mut data, true);
        c.stall.moved = true;
        assert_eq!(c.tick_stall(S(0)), None, "the send just went out");
        rounds(&mut c, 1, 10);
        let r = c.tick_stall(S(10)).expect("a report at 10 s");
        assert!(r.contains("for 10 s"), "{r}");
        assert!(r.contains("1 operations"), "{r}");
        assert!(r.contains("1 synchronous sends"), "{r}");
        assert!(
            r.contains("rail 0 (udp;ofi_rxd, Net): 1/64 in flight"),
            "{r}"
        );
        // The next report when the stall has doubled, then quadrupled.
        rounds(&mut c, 11, 20);
        assert!(c.tick_stall(S(20)).unwrap().contains("for 20 s"));
        rounds(&mut c, 21, 40);
        assert!(c.tick_stall(S(40)).is_some());
        // Movement ends the stall; the clock starts again.
        c.stall.moved = true;
        assert_eq!(c.tick_stall(S(41)), None);
        rounds(&mut c, 42, 51);
        assert!(c.tick_stall(S(51)).unwrap().contains("for 10 s"));
        // Time away from MPI (no clock rounds) is not a stall of ours.
        assert_eq!(c.tick_stall(S(200)), None);
        rounds(&mut c, 201, 210);
        assert!(c.tick_stall(S(210)).unwrap().contains("for 10 s"));
        drop(c);
    }

    /// A stall on the sockets provider says what is known to stop that
    /// provider and what to do; one on another provider does not.
    #[test]
    fn a_stall_on_sockets_names_the_providers_own_stall() {
        for (provider, hint) in [("sockets", true), ("udp;ofi_rxd", false)] {
            let (mut c, peers) = crate::proto::test_core::net_core(provider, &[2]);
            let mut data = [5u8; 100];
            send_one(&mut c, peers[0], &mut data, true);
            c.stall.moved = true;
            assert_eq!(c.tick_stall(S(0)), None);
            rounds(&mut c, 1, 10);
            let r = c.tick_stall(S(10)).expect("a report at 10 s");
            assert!(r.contains(&format!("rail 0 ({provider}, Net)")), "{r}");
            assert_eq!(r.contains("net.ipv4.tcp_rmem"), hint, "{r}");
            drop(c);
        }
    }

    /// A packet the provider refused (EAGAIN, as rxm does while a broken
    /// connection stays down) waits in the queue; when its peer is given
    /// up it is failed and the queue empties, so a blocking send waiting
    /// for the queue (`rustofi_tx_queued`) returns.
    #[test]
    fn a_lost_peers_refused_packet_leaves_the_queue() {
        use crate::proto::{Action, PostError, Posted};
        crate::log::QUIET.with(|q| q.set(true));
        use std::sync::atomic::Ordering::Relaxed;
        let (mut c, peer) = core();
        let mut data = [5u8; 100];
        let mut out = send_one(&mut c, peer, &mut data, false);
        let op = out
            .actions
            .iter()
            .find_map(|a| match a {
                Action::Send { op, .. } => Some(*op),
                _ => None,
            })
            .expect("the packet went to the driver");
        out.actions.clear();
        c.on_post_failed(Posted::Op(op), PostError::Again, &mut out);
        assert!(c.stats().tx_queued.load(Relaxed), "refused: queued");
        assert_eq!(c.leftovers().retry, 1);
        c.peer_gone(peer, "test", &mut out);
        assert!(
            !c.stats().tx_queued.load(Relaxed),
            "nothing queued any more"
        );
        let left = c.leftovers();
        assert_eq!(
            (left.retry, left.ops, left.tx_buffers_out),
            (0, 0, 0),
            "{left:?}"
        );
        drop(c);
    }
}
