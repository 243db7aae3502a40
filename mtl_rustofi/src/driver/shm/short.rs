//! The short eager packet: how the shared-memory rail carries a small
//! eager message that is neither synchronous nor coalesced, in 16 bytes of
//! header instead of the 48 of the base header ([`wire`]).
//!
//! On a ring the base header's other fields say nothing the receiver does
//! not know already: the ring names the sender, the ring's header word the
//! packet's length; status and cookie are those of every plain eager
//! message (0). So a short packet holds, little-endian,
//!
//! | off | size | field                              |
//! |-----|------|------------------------------------|
//! | 0   | 4    | communicator context id            |
//! | 4   | 4    | source rank in that communicator   |
//! | 8   | 4    | tag                                |
//! | 12  | 4    | per-peer sequence number           |
//!
//! and then its payload, to the end of the packet. Every packet in base
//! format is at least [`wire::BASE_LEN`] bytes long, so a ring packet
//! shorter than that is a short one: its length tells the format, and a
//! payload of up to [`MAX_PAYLOAD`] bytes goes this way. One of up to
//! [`ONE_CELL`] bytes fits one 32-byte cell with the ring's header word:
//! half a cache line, where the base format took a whole one. A packet
//! shorter than [`HEAD`] is malformed, and handed to the core as it is,
//! which refuses it as it refuses any packet shorter than a header.

use super::ring;
use crate::proto::ids::RailId;
use crate::proto::{Core, Out};
use crate::wire::{self, EagerHead};

/// Bytes of a short packet's header.
pub(crate) const HEAD: usize = 16;
/// The largest payload of a short packet: its length stays below a base
/// header's.
pub(crate) const MAX_PAYLOAD: usize = wire::BASE_LEN - 1 - HEAD;
/// The largest payload of a short packet that fits one cell.
pub(crate) const ONE_CELL: usize = ring::CELL - ring::WORD - HEAD;

/// Whether a ring packet of `len` bytes is a short one (or too short to
/// be anything: then the core refuses it).
#[inline(always)]
fn is_short(len: usize) -> bool {
    len < wire::BASE_LEN
}

/// Writes the short header of `h` into `b`.
#[inline(always)]
pub(crate) fn encode(h: &EagerHead, b: &mut [u8; HEAD]) {
    b[0..4].copy_from_slice(&h.ctx.to_le_bytes());
    b[4..8].copy_from_slice(&h.src.to_le_bytes());
    b[8..12].copy_from_slice(&h.tag.to_le_bytes());
    b[12..16].copy_from_slice(&h.seq.to_le_bytes());
}

/// The message in a ring packet from `sender` (a process name) if the
/// packet is a short one: its header's fields and its payload. `None` for
/// a packet in base format, and for one shorter than a short header
/// (which the core then refuses as shorter than any header).
#[inline(always)]
pub(crate) fn decode(pkt: &[u8], sender: u64) -> Option<(EagerHead, &[u8])> {
    if !is_short(pkt.len()) {
        return None;
    }
    let (h, payload) = pkt.split_first_chunk::<HEAD>()?;
    let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    Some((
        EagerHead {
            ctx: word(0),
            src: word(4) as i32,
            tag: word(8) as i32,
            seq: word(12),
            sender,
        },
        payload,
    ))
}

/// Hands a packet read from a ring of `rail` to the core as its format
/// says: a short one through [`Core::on_ring_eager`], with the ring's peer
/// `sender` as its sender; any other through [`Core::on_ring_packet`].
#[inline(always)]
pub(crate) fn deliver(core: &mut Core, rail: RailId, pkt: &[u8], sender: u64, out: &mut Out) {
    match decode(pkt, sender) {
        Some((head, payload)) => core.on_ring_eager(rail, &head, payload, out),
        None => core.on_ring_packet(rail, pkt, out),
    }
}

/// The short packet of message `h` with `payload` (tests, the simulator
/// and the fuzz targets build what the driver writes into a ring).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn packet(h: &EagerHead, payload: &[u8]) -> Vec<u8> {
    let mut b = [0; HEAD];
    encode(h, &mut b);
    [&b[..], payload].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: EagerHead = EagerHead {
        ctx: 0x0102_0304,
        src: -5,
        tag: i32::MIN,
        seq: 0xfedc_ba98,
        sender: 0x1234_5678_9abc_def0,
    };

    #[test]
    fn a_short_packet_carries_the_fields_and_payload_of_its_message() {
        for n in [0, 1, ONE_CELL, ONE_CELL + 1, MAX_PAYLOAD] {
            let body: Vec<u8> = (0..n).map(|i| i as u8 ^ 0x5a).collect();
            let pkt = packet(&H, &body);
            assert!(is_short(pkt.len()), "{n}");
            let (h, payload) = decode(&pkt, H.sender).unwrap();
            assert_eq!(h, H);
            assert_eq!(payload, &pkt[HEAD..]);
            // The same message in base format decodes to the same header.
            let mut base = [0; wire::BASE_LEN];
            H.encode(n, &mut base);
            assert_eq!(EagerHead::decode(&base), h);
            assert_eq!(h.header(n).len, n as u64);
        }
        assert!(!is_short(wire::BASE_LEN));
    }

    #[test]
    fn sizes_fit_the_ring() {
        assert_eq!(ONE_CELL, 8, "an 8-byte message in half a cache line");
        assert_eq!(ring::cells(HEAD + ONE_CELL), 1);
        assert_eq!(ring::cells(HEAD + ONE_CELL + 1), 2);
        assert_eq!(MAX_PAYLOAD, 31);
    }

    #[test]
    fn a_packet_shorter_than_the_header_is_no_message() {
        for n in 0..HEAD {
            assert!(decode(&vec![7; n], 1).is_none(), "{n}");
        }
    }
}
