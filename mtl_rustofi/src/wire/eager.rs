//! An eager message read in place.
//!
//! Most packets a receiver handles are small eager messages, and all it
//! needs of one is a few fields of its base header and its payload.
//! [`Header::decode_prefix`] builds a whole [`Header`] (extension words and
//! stripe list included) for each; [`EagerMsg`] checks the same things and
//! leaves the fields where they are, in the packet.

use super::{Header, Kind, BASE_LEN, FLAGS_AT, FLAG_MORE, MAGIC, VERSION};

/// A well-formed eager message at the front of a packet: its base header
/// and its payload, borrowed from the packet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EagerMsg<'a> {
    head: &'a [u8; BASE_LEN],
    payload: &'a [u8],
}

impl<'a> EagerMsg<'a> {
    /// The eager message at the front of `pkt` and the bytes it occupies,
    /// exactly when [`Header::decode_prefix`] would decode an `Eager` one
    /// there: magic and version right, exactly `len` payload bytes, and
    /// after them nothing, or with `FLAG_MORE` at least one more header.
    /// `None` for any other packet, well-formed or not; the caller hands
    /// it to [`Header::decode_prefix`], which parses it or says what is
    /// wrong with it.
    #[inline]
    pub(crate) fn parse(pkt: &'a [u8]) -> Option<(EagerMsg<'a>, usize)> {
        let (head, rest) = pkt.split_first_chunk::<BASE_LEN>()?;
        // Magic, kind and version (bytes 0, 1 and 3; byte 2 is the flags)
        // in one comparison.
        if u32_at(head, 0) & ID_MASK != ID_EAGER {
            return None;
        }
        // A length that does not fit in usize cannot fit in the packet.
        let len = usize::try_from(u64_at(head, 32)).ok()?;
        let payload = rest.get(..len)?;
        let after = rest.len() - len;
        // The common message fills its packet and says nothing follows;
        // one that says more follows (`FLAG_MORE`) leaves room for a
        // header after it, and nothing else is followed by anything.
        let more = head[FLAGS_AT] & FLAG_MORE != 0;
        if (after != 0 || more) && !(more && after >= BASE_LEN) {
            return None;
        }
        Some((EagerMsg { head, payload }, BASE_LEN + len))
    }

    pub(crate) fn flags(&self) -> u8 {
        self.head[FLAGS_AT]
    }

    pub(crate) fn ctx(&self) -> u32 {
        u32_at(self.head, 4)
    }

    pub(crate) fn src(&self) -> i32 {
        u32_at(self.head, 8) as i32
    }

    pub(crate) fn tag(&self) -> i32 {
        u32_at(self.head, 12) as i32
    }

    pub(crate) fn seq(&self) -> u32 {
        u32_at(self.head, 16)
    }

    pub(crate) fn sender(&self) -> u64 {
        u64_at(self.head, 24)
    }

    pub(crate) fn cookie(&self) -> u64 {
        u64_at(self.head, 40)
    }

    /// The payload: exactly the header's `len` bytes.
    pub(crate) fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The whole header, as [`Header::decode_prefix`] returns it (for a
    /// message that must wait for its predecessors).
    pub(crate) fn header(&self) -> Header {
        Header::base(Kind::Eager, self.head)
    }
}

/// The bytes of a header's first word that identify an eager message:
/// magic, kind and version, not the flags (byte [`FLAGS_AT`]).
const ID_MASK: u32 = u32::from_le_bytes([0xff, 0xff, 0, 0xff]);
const ID_EAGER: u32 = u32::from_le_bytes([MAGIC, Kind::Eager as u8, 0, VERSION]);
const _: () = assert!(FLAGS_AT == 2);

/// The little-endian `u32` at `at` of a base header.
#[inline]
pub(super) fn u32_at(head: &[u8; BASE_LEN], at: usize) -> u32 {
    let mut b = [0; 4];
    b.copy_from_slice(&head[at..at + 4]);
    u32::from_le_bytes(b)
}

/// The little-endian `u64` at `at` of a base header.
#[inline]
pub(super) fn u64_at(head: &[u8; BASE_LEN], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&head[at..at + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::super::{set_more, EXT_LEN, FLAG_SYNC};
    use super::*;

    fn eager(seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = Header::new(Kind::Eager);
        h.flags = flags;
        h.ctx = 0x0102_0304;
        h.src = -5;
        h.tag = i32::MIN;
        h.seq = seq;
        h.status = 9;
        h.sender = 0xfedc_ba98_7654_3210;
        h.len = payload.len() as u64;
        h.cookie = 0x1111_2222_3333_4444;
        let mut b = vec![0u8; BASE_LEN];
        h.encode(&mut b);
        b.extend_from_slice(payload);
        b
    }

    /// Checks `parse` against `decode_prefix` on `pkt`: it takes exactly
    /// what decodes as an eager message, with the same header and length.
    /// Returns the length it took.
    fn check(pkt: &[u8]) -> Option<usize> {
        let full = Header::decode_prefix(pkt);
        match EagerMsg::parse(pkt) {
            Some((m, n)) => {
                assert_eq!(full, Ok((m.header(), n)), "{pkt:?}");
                Some(n)
            }
            None => {
                if let Ok((h, _)) = &full {
                    assert_ne!(h.kind, Kind::Eager, "{pkt:?}");
                }
                None
            }
        }
    }

    #[test]
    fn reads_the_fields_in_place() {
        let pkt = eager(7, FLAG_SYNC, b"payload!");
        let (m, n) = EagerMsg::parse(&pkt).unwrap();
        assert_eq!(n, pkt.len());
        let h = Header::decode(&pkt).unwrap();
        assert_eq!(
            (m.flags(), m.ctx(), m.src(), m.tag(), m.seq()),
            (h.flags, h.ctx, h.src, h.tag, h.seq)
        );
        assert_eq!((m.sender(), m.cookie()), (h.sender, h.cookie));
        assert_eq!(m.payload(), b"payload!");
        assert_eq!(m.header(), h);
    }

    #[test]
    fn walks_a_coalesced_packet_as_decode_prefix_does() {
        let mut pkt = eager(1, 0, b"abcde");
        set_more(&mut pkt);
        let first = pkt.len();
        pkt.extend(eager(2, 0, b""));
        set_more(&mut pkt[first..]);
        pkt.extend(eager(3, FLAG_SYNC, b"xyz"));
        let mut off = 0;
        let mut seqs = Vec::new();
        while off < pkt.len() {
            let (m, n) = EagerMsg::parse(&pkt[off..]).unwrap();
            assert_eq!(Header::decode_prefix(&pkt[off..]), Ok((m.header(), n)));
            seqs.push((m.seq(), m.payload().to_vec()));
            off += n;
        }
        assert_eq!(off, pkt.len());
        assert_eq!(
            seqs,
            [(1, b"abcde".to_vec()), (2, vec![]), (3, b"xyz".to_vec())]
        );
        // Every cut of it: what the fast path takes decodes the same, and
        // what it declines (all of it eager) does not decode at all.
        for cut in 0..pkt.len() {
            if check(&pkt[..cut]).is_none() {
                assert!(Header::decode_prefix(&pkt[..cut]).is_err(), "cut at {cut}");
            }
        }
    }

    #[test]
    fn declines_other_kinds_and_malformed_packets() {
        let pkt = eager(0, 0, b"12345678");
        let mut other = pkt.clone();
        other[1] = Kind::Rts as u8;
        other.resize(EXT_LEN, 0);
        assert!(EagerMsg::parse(&other).is_none());
        assert!(
            Header::decode_prefix(&other).is_ok(),
            "an RTS is the full path's"
        );
        for (at, v) in [(0, 0u8), (3, VERSION + 1), (1, 0), (1, 99)] {
            let mut bad = pkt.clone();
            bad[at] = v;
            assert!(EagerMsg::parse(&bad).is_none(), "byte {at} = {v}");
        }
        let mut long = pkt.clone();
        long.push(0);
        assert!(EagerMsg::parse(&long).is_none());
        for len in [u64::MAX, u64::MAX - BASE_LEN as u64 + 1, 9, 7] {
            let mut bad = pkt.clone();
            bad[32..40].copy_from_slice(&len.to_le_bytes());
            assert!(EagerMsg::parse(&bad).is_none(), "len {len}");
            set_more(&mut bad);
            assert!(EagerMsg::parse(&bad).is_none(), "len {len} with more");
        }
    }

    /// Differential: on arbitrary bytes (most of them eager-looking), the
    /// fast path accepts exactly what `decode_prefix` decodes as `Eager`,
    /// with the same header and length.
    #[test]
    fn agrees_with_decode_prefix_on_arbitrary_bytes() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        // Taken alone, taken with more after it, declined.
        let mut seen = [0u32; 3];
        // Under Miri 120 packets: the first 95 reach every branch of
        // `parse` and `decode_prefix` that 300 did (the 95th is the first
        // taken alone).
        for _ in 0..if cfg!(miri) { 120 } else { 50_000 } {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 150) as usize;
            let mut pkt: Vec<u8> = (0..len).map(|i| (x >> (i % 53)) as u8).collect();
            if len >= BASE_LEN && x & 3 != 0 {
                pkt[0] = MAGIC;
                pkt[1] = Kind::Eager as u8;
                pkt[3] = VERSION;
                // Mostly lengths near the packet's, with or without more.
                let want = (x >> 8) % (len as u64 - BASE_LEN as u64 + 2);
                pkt[32..40].copy_from_slice(&want.to_le_bytes());
                if x & 4 != 0 {
                    pkt[2] |= FLAG_MORE;
                } else {
                    pkt[2] &= !FLAG_MORE;
                }
            }
            match check(&pkt) {
                Some(n) => seen[usize::from(n < pkt.len())] += 1,
                None => seen[2] += 1,
            }
        }
        if !cfg!(miri) {
            assert!(
                seen.iter().all(|&n| n >= 100),
                "too few of a case: {seen:?}"
            );
        }
    }
}
