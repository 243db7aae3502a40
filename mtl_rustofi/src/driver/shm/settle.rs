//! What a packet to a peer needs before its push while the peer is not
//! settled (`Peer::settled`): the note of a send to this rank itself and
//! the priming of the pair's rings. Out of the path of every packet,
//! which carries only the one test.

use super::inbound::Inbound;
use super::segment::Segment;
use super::{Peer, PRIME_AFTER};

/// What comes before a push to a peer that is not [`Peer::settled`]: a
/// packet to this rank itself is noted for the poll
/// (`Inbound::note_own_fed`), and the pair's rings are primed once a
/// page of cells was written. Out of line, so that the path of every
/// packet carries one test for both.
#[cold]
#[inline(never)]
pub(super) fn settle(p: &mut Peer, inbound: &Inbound, seg: &Segment, me: usize) {
    if p.own {
        // Read only once written (`inbound`).
        inbound.note_own_fed();
    }
    if !p.primed && p.tx.written() >= PRIME_AFTER {
        p.primed = true;
        // The rings between the two both ways (a peer sent this much
        // mostly answers). A failure only leaves the pages to fault in
        // as they are reached.
        let _ = seg.prime(me, p.rank) && seg.prime(p.rank, me);
    }
    p.settled = p.primed && !p.own;
}
