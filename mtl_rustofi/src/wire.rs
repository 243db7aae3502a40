//! Wire protocol: the header every rustofi packet starts with (on the own
//! shared-memory rail's rings, a small eager message has a shorter one:
//! `driver::shm::short`).
//!
//! All integers are little-endian. Layout of the 48-byte base header:
//!
//! | off | size | field                                          |
//! |-----|------|------------------------------------------------|
//! | 0   | 1    | magic `0xA7` (`MAGIC`)                         |
//! | 1   | 1    | kind (`Kind`)                                  |
//! | 2   | 1    | flags (`FLAG_*`)                               |
//! | 3   | 1    | protocol version (`VERSION`)                   |
//! | 4   | 4    | communicator context id                        |
//! | 8   | 4    | source rank in that communicator               |
//! | 12  | 4    | tag                                            |
//! | 16  | 4    | per-peer sequence number (matchable kinds)     |
//! | 20  | 4    | status (FIN: 0 ok, else an error code)         |
//! | 24  | 8    | sender's process name (jobid << 32 | vpid)     |
//! | 32  | 8    | message length in bytes                        |
//! | 40  | 8    | cookie: the sender's request token             |
//!
//! `Rts`, `Cts` and `Data` carry 16 more bytes: (remote address, RMA key)
//! for a read rendezvous, (data tag, granted length) for a CTS, whose length
//! field holds the chunk size the receiver posted its tagged receives with
//! (message rendezvous: the receiver's token and slot instead of the tag,
//! the bytes per data packet as length), (offset, receiver's token) for a
//! `Data` packet, whose context field holds the receiver's slot. A
//! message rendezvous CTS with `FLAG_RESEND` asks for one data packet
//! again: (receiver's token, its offset). `Eager` and `Data` are followed
//! by exactly `len` payload bytes. A FIN with `FLAG_REPAIR` (and without
//! `FLAG_ABORT`) goes from the sender of a message rendezvous to the
//! receiver: its context field holds the receiver's slot, its length
//! field the receiver's token.
//!
//! A striped read RTS (`FLAG_STRIPE`) goes on with the sender's buffer on
//! each of its stripe endpoints: a count `n` (8 bytes, 1..=`MAX_STRIPES`),
//! then `n` pairs (remote address, RMA key) of 16 bytes, the `i`-th for
//! stripe endpoint `i`; the packet is exactly `EXT_LEN + 8 + 16 n` bytes.
//!
//! One libfabric message may carry several eager messages back to back
//! (the sender coalesces small sends to a peer while an earlier packet to
//! it is still in flight): every header but the last has `FLAG_MORE` set,
//! and each is followed by its payload. [`Header::decode_prefix`] walks
//! such a packet; [`EagerMsg::parse`] reads an eager message of it in
//! place, without building a [`Header`].

mod eager;
mod modex;

pub(crate) use eager::EagerMsg;
use eager::{u32_at, u64_at};
pub(crate) use modex::{same_pid_namespace, PeerInfo, RailAddr, RailKind};

pub(crate) const MAGIC: u8 = 0xA7;
pub(crate) const VERSION: u8 = 9;
pub(crate) const BASE_LEN: usize = 48;
pub(crate) const EXT_LEN: usize = 64;

/// The sender waits for the receiver's match (MPI_Ssend).
pub(crate) const FLAG_SYNC: u8 = 1;
/// Rendezvous by send (CTS + tagged data) instead of RMA read.
pub(crate) const FLAG_RNDV_SEND: u8 = 2;
/// Another eager message follows this one's payload in the same packet.
pub(crate) const FLAG_MORE: u8 = 4;
/// On a FIN: sent by the sender of a send rendezvous that failed after
/// the receiver's CTS (the cookie is the sender's own); without it a FIN
/// goes from receiver to sender, but for a repair's question
/// (`FLAG_REPAIR` alone).
pub(crate) const FLAG_ABORT: u8 = 8;
/// On a read RTS: the buffer is also readable through the sender's stripe
/// endpoints ([`Stripes`] follow the extension).
pub(crate) const FLAG_STRIPE: u8 = 32;
/// Most stripe endpoints an RTS names.
pub(crate) const MAX_STRIPES: usize = 7;
/// On an RTS or CTS: rendezvous by `Data` packets over plain sends
/// (neither RMA nor tagged operations).
pub(crate) const FLAG_RNDV_MSG: u8 = 16;
/// On a message rendezvous CTS: not a grant but a request to send the
/// data packet at offset `ext1` again (the provider lost it).
pub(crate) const FLAG_RESEND: u8 = 64;
/// Sent by the repair of a stalled message rendezvous (a grant again, a
/// request for a piece that may not have been sent yet, a data packet
/// sent again for one, or, on a FIN from the sender, the question whether
/// the transfer is done): what it duplicates is dropped without an error.
pub(crate) const FLAG_REPAIR: u8 = 128;
/// Offset of the flags byte in a header.
const FLAGS_AT: usize = 2;

/// Sets `FLAG_MORE` in the header at the front of `pkt`.
pub(crate) fn set_more(pkt: &mut [u8]) {
    pkt[FLAGS_AT] |= FLAG_MORE;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Matchable message with its payload inline.
    Eager = 1,
    /// Matchable rendezvous request-to-send.
    Rts = 2,
    /// Receiver → sender: data may be sent with this tag.
    Cts = 3,
    /// Receiver → sender: the RMA read is done; release the buffer.
    Fin = 4,
    /// Receiver → sender: a synchronous eager send was matched.
    SyncAck = 5,
    /// Sender → receiver: a piece of a message rendezvous's data.
    Data = 6,
    /// Liveness probe to a peer something waits on (header only).
    Ping = 7,
    /// The answer to a `Ping` (header only).
    Pong = 8,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Eager,
            2 => Kind::Rts,
            3 => Kind::Cts,
            4 => Kind::Fin,
            5 => Kind::SyncAck,
            6 => Kind::Data,
            7 => Kind::Ping,
            8 => Kind::Pong,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    pub flags: u8,
    pub ctx: u32,
    pub src: i32,
    pub tag: i32,
    pub seq: u32,
    pub status: u32,
    pub sender: u64,
    pub len: u64,
    pub cookie: u64,
    /// RTS: remote address; CTS: data tag (or token); Data: offset.
    pub ext0: u64,
    /// RTS: RMA key; CTS: granted length; Data: the receiver's token.
    pub ext1: u64,
    /// Striped RTS: the buffer on each stripe endpoint.
    pub stripes: Stripes,
}

/// Where a striped rendezvous buffer is read through each stripe endpoint
/// of its sender: (remote address, RMA key), indexed by stripe. Only a
/// striped RTS has one, so the list lives on the heap and every other
/// header stays small (headers are built, decoded and moved per message)
/// and allocates nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stripes {
    /// Empty (no allocation) on every header but a striped RTS.
    at: Vec<(u64, u64)>,
}

impl Stripes {
    /// Appends the next stripe's (address, key); false when full.
    pub(crate) fn push(&mut self, addr: u64, key: u64) -> bool {
        if self.at.len() >= MAX_STRIPES {
            return false;
        }
        self.at.push((addr, key));
        true
    }

    pub(crate) fn as_slice(&self) -> &[(u64, u64)] {
        &self.at
    }

    /// Bytes the stripe list adds to an RTS.
    pub(crate) fn wire_len(&self) -> usize {
        8 + 16 * self.as_slice().len()
    }
}

/// The header of an eager message that is neither synchronous nor
/// coalesced, by its fields: what a small send hands to the driver, which
/// encodes it where the packet goes (into a ring's cell) instead of into a
/// buffer first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EagerHead {
    pub ctx: u32,
    pub src: i32,
    pub tag: i32,
    pub seq: u32,
    pub sender: u64,
}

impl EagerHead {
    /// Writes the header of a message of `len` payload bytes: the
    /// [`Header::encode_base`] of the same eager header.
    #[inline]
    pub(crate) fn encode(&self, len: usize, b: &mut [u8; BASE_LEN]) {
        put_base(
            b,
            Kind::Eager,
            0,
            [self.ctx, self.src as u32, self.tag as u32, self.seq, 0],
            [self.sender, len as u64, 0],
        );
    }

    /// The fields of a header [`EagerHead::encode`] wrote.
    #[inline]
    pub(crate) fn decode(b: &[u8; BASE_LEN]) -> EagerHead {
        EagerHead {
            ctx: u32_at(b, 4),
            src: u32_at(b, 8) as i32,
            tag: u32_at(b, 12) as i32,
            seq: u32_at(b, 16),
            sender: u64_at(b, 24),
        }
    }

    /// The whole header of the message with `len` payload bytes, as
    /// [`Header::decode_prefix`] returns it for the encoded one.
    pub(crate) fn header(&self, len: usize) -> Header {
        let mut b = [0; BASE_LEN];
        self.encode(len, &mut b);
        Header::base(Kind::Eager, &b)
    }
}

/// Writes a base header: `words` are ctx, src, tag, seq and status,
/// `longs` sender, len and cookie (the table at the top of this file).
#[inline(always)]
fn put_base(b: &mut [u8; BASE_LEN], kind: Kind, flags: u8, words: [u32; 5], longs: [u64; 3]) {
    b[0] = MAGIC;
    b[1] = kind as u8;
    b[2] = flags;
    b[3] = VERSION;
    for (i, w) in words.iter().enumerate() {
        b[4 + 4 * i..8 + 4 * i].copy_from_slice(&w.to_le_bytes());
    }
    for (i, l) in longs.iter().enumerate() {
        b[24 + 8 * i..32 + 8 * i].copy_from_slice(&l.to_le_bytes());
    }
}

/// Why a packet was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    Short(usize),
    BadMagic(u8),
    BadVersion(u8),
    BadKind(u8),
    LengthMismatch {
        kind: Kind,
        got: usize,
        want: u64,
    },
    /// A striped RTS names no stripe or more than `MAX_STRIPES`.
    BadStripes(u64),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Short(n) => write!(f, "packet of {n} bytes is shorter than a header"),
            DecodeError::BadMagic(m) => write!(f, "bad magic byte 0x{m:02x}"),
            DecodeError::BadVersion(v) => write!(f, "unsupported protocol version {v}"),
            DecodeError::BadKind(k) => write!(f, "unknown packet kind {k}"),
            DecodeError::LengthMismatch { kind, got, want } => {
                write!(f, "{kind:?} packet of {got} bytes, header implies {want}")
            }
            DecodeError::BadStripes(n) => {
                write!(f, "striped RTS names {n} stripes (1 to {MAX_STRIPES})")
            }
        }
    }
}

impl Header {
    pub(crate) fn new(kind: Kind) -> Header {
        Header {
            kind,
            flags: 0,
            ctx: 0,
            src: 0,
            tag: 0,
            seq: 0,
            status: 0,
            sender: 0,
            len: 0,
            cookie: 0,
            ext0: 0,
            ext1: 0,
            stripes: Stripes::default(),
        }
    }

    /// Writes the first `BASE_LEN` bytes of the header (all of it for an
    /// eager message), with no length logic ([`Header::encode`]'s common
    /// case; a small send made inline encodes its `EagerHead` instead).
    #[inline]
    pub(crate) fn encode_base(&self, b: &mut [u8; BASE_LEN]) {
        put_base(
            b,
            self.kind,
            self.flags,
            [
                self.ctx,
                self.src as u32,
                self.tag as u32,
                self.seq,
                self.status,
            ],
            [self.sender, self.len, self.cookie],
        );
    }

    /// Bytes this header occupies on the wire.
    pub(crate) fn wire_len(&self) -> usize {
        match self.kind {
            Kind::Rts if self.flags & FLAG_STRIPE != 0 => EXT_LEN + self.stripes.wire_len(),
            Kind::Rts | Kind::Cts | Kind::Data => EXT_LEN,
            _ => BASE_LEN,
        }
    }

    /// Writes the header into the front of `buf` and returns its length.
    /// Panics if `buf` is shorter than `wire_len()`.
    pub(crate) fn encode(&self, buf: &mut [u8]) -> usize {
        let n = self.wire_len();
        let b = &mut buf[..n];
        self.encode_base((&mut b[..BASE_LEN]).try_into().expect("48 bytes"));
        if n >= EXT_LEN {
            b[48..56].copy_from_slice(&self.ext0.to_le_bytes());
            b[56..64].copy_from_slice(&self.ext1.to_le_bytes());
        }
        if n > EXT_LEN {
            let list = self.stripes.as_slice();
            b[64..72].copy_from_slice(&(list.len() as u64).to_le_bytes());
            for (i, (addr, key)) in list.iter().enumerate() {
                let at = 72 + 16 * i;
                b[at..at + 8].copy_from_slice(&addr.to_le_bytes());
                b[at + 8..at + 16].copy_from_slice(&key.to_le_bytes());
            }
        }
        n
    }

    /// Parses the message at the front of `pkt` and returns it with the
    /// number of bytes it occupies. Without `FLAG_MORE` the message must
    /// fill `pkt` exactly (as for [`decode`](Self::decode)); with it, only
    /// an `Eager` message may be followed by more bytes, which must hold at
    /// least one more header.
    pub(crate) fn decode_prefix(pkt: &[u8]) -> Result<(Header, usize), DecodeError> {
        if pkt.len() >= BASE_LEN && pkt[FLAGS_AT] & FLAG_MORE != 0 && pkt[1] == Kind::Eager as u8 {
            let len = u64::from_le_bytes(pkt[32..40].try_into().expect("8 bytes"));
            let end = (BASE_LEN as u64)
                .checked_add(len)
                .filter(|&e| {
                    e.checked_add(BASE_LEN as u64)
                        .is_some_and(|f| f <= pkt.len() as u64)
                })
                .ok_or(DecodeError::LengthMismatch {
                    kind: Kind::Eager,
                    got: pkt.len(),
                    want: (BASE_LEN as u64)
                        .saturating_add(len)
                        .saturating_add(BASE_LEN as u64),
                })? as usize;
            return Ok((Header::decode(&pkt[..end])?, end));
        }
        Ok((Header::decode(pkt)?, pkt.len()))
    }

    /// The header of `kind` whose base part is `head`, without extension.
    #[inline]
    fn base(kind: Kind, head: &[u8; BASE_LEN]) -> Header {
        Header {
            kind,
            flags: head[FLAGS_AT],
            ctx: u32_at(head, 4),
            src: u32_at(head, 8) as i32,
            tag: u32_at(head, 12) as i32,
            seq: u32_at(head, 16),
            status: u32_at(head, 20),
            sender: u64_at(head, 24),
            len: u64_at(head, 32),
            cookie: u64_at(head, 40),
            ext0: 0,
            ext1: 0,
            stripes: Stripes::default(),
        }
    }

    /// The kind and base header at the front of `pkt`, once its length,
    /// magic, version and kind are checked.
    #[inline]
    fn check_base(pkt: &[u8]) -> Result<(Kind, &[u8; BASE_LEN]), DecodeError> {
        let Some(head) = pkt.first_chunk::<BASE_LEN>() else {
            return Err(DecodeError::Short(pkt.len()));
        };
        if head[0] != MAGIC {
            return Err(DecodeError::BadMagic(head[0]));
        }
        if head[3] != VERSION {
            return Err(DecodeError::BadVersion(head[3]));
        }
        let kind = Kind::from_u8(head[1]).ok_or(DecodeError::BadKind(head[1]))?;
        Ok((kind, head))
    }

    /// Parses and validates a received packet of `pkt.len()` bytes. For an
    /// `Eager` packet the payload is `pkt[BASE_LEN..]` and its length must
    /// equal the header's `len`.
    pub(crate) fn decode(pkt: &[u8]) -> Result<Header, DecodeError> {
        let (kind, head) = Header::check_base(pkt)?;
        let u64_at = |o: usize| u64::from_le_bytes(pkt[o..o + 8].try_into().unwrap());
        let mut h = Header::base(kind, head);
        let striped = kind == Kind::Rts && h.flags & FLAG_STRIPE != 0;
        let want = match kind {
            Kind::Eager => (BASE_LEN as u64).checked_add(h.len),
            Kind::Rts if striped => {
                // The count is read only once the packet is known to hold it.
                let n = pkt
                    .get(64..72)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap()));
                match n {
                    Some(n) if (1..=MAX_STRIPES as u64).contains(&n) => {
                        Some(EXT_LEN as u64 + 8 + 16 * n)
                    }
                    Some(n) => return Err(DecodeError::BadStripes(n)),
                    None => Some(EXT_LEN as u64 + 8),
                }
            }
            Kind::Data => (EXT_LEN as u64).checked_add(h.len),
            Kind::Rts | Kind::Cts => Some(EXT_LEN as u64),
            Kind::Fin | Kind::SyncAck | Kind::Ping | Kind::Pong => Some(BASE_LEN as u64),
        };
        if want != Some(pkt.len() as u64) {
            return Err(DecodeError::LengthMismatch {
                kind,
                got: pkt.len(),
                want: want.unwrap_or(u64::MAX),
            });
        }
        if h.wire_len() >= EXT_LEN {
            h.ext0 = u64_at(48);
            h.ext1 = u64_at(56);
        }
        if striped {
            for i in 0..u64_at(64) as usize {
                h.stripes.push(u64_at(72 + 16 * i), u64_at(80 + 16 * i));
            }
        }
        Ok(h)
    }

    /// The header at the front of a packet of which only the first bytes
    /// arrived (a receive the provider completed with an error): checked
    /// as [`Self::decode`] checks it, except that the packet may end
    /// anywhere after the header. A striped RTS keeps no stripes.
    pub(crate) fn decode_head(pkt: &[u8]) -> Result<Header, DecodeError> {
        let (kind, head) = Header::check_base(pkt)?;
        let mut h = Header::base(kind, head);
        if h.wire_len() >= EXT_LEN {
            let Some(ext) = pkt.get(BASE_LEN..EXT_LEN) else {
                return Err(DecodeError::Short(pkt.len()));
            };
            h.ext0 = u64::from_le_bytes(ext[..8].try_into().expect("8 bytes"));
            h.ext1 = u64::from_le_bytes(ext[8..].try_into().expect("8 bytes"));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eager_head_encodes_as_its_header() {
        let e = EagerHead {
            ctx: 0x0102_0304,
            src: -2,
            tag: i32::MIN + 5,
            seq: 0xfffe_fdfc,
            sender: 0x1122_3344_5566_7788,
        };
        let mut h = Header::new(Kind::Eager);
        (h.ctx, h.src, h.tag, h.seq, h.sender, h.len) = (e.ctx, e.src, e.tag, e.seq, e.sender, 9);
        let (mut want, mut got) = ([0; BASE_LEN], [0xff; BASE_LEN]);
        h.encode_base(&mut want);
        e.encode(9, &mut got);
        assert_eq!(got, want);
        let mut pkt = got.to_vec();
        pkt.extend_from_slice(&[0; 9]);
        assert_eq!(Header::decode(&pkt), Ok(h));
    }

    fn sample(kind: Kind) -> Header {
        Header {
            kind,
            flags: FLAG_SYNC,
            ctx: 0xdead_beef,
            src: 7,
            tag: -17,
            seq: u32::MAX,
            status: 3,
            sender: 0x1234_5678_9abc_def0,
            len: 5,
            cookie: 42,
            ext0: 0,
            ext1: 0,
            stripes: Stripes::default(),
        }
    }

    #[test]
    fn coalesced_packet_walks_and_rejects_overruns() {
        let mut a = sample(Kind::Eager);
        a.flags = 0;
        let mut b = a.clone();
        b.seq = 9;
        b.len = 3;
        let mut pkt = vec![0u8; 2 * BASE_LEN + 5 + 3];
        a.encode(&mut pkt);
        pkt[BASE_LEN..BASE_LEN + 5].copy_from_slice(b"hello");
        set_more(&mut pkt);
        b.encode(&mut pkt[BASE_LEN + 5..]);
        pkt[2 * BASE_LEN + 5..].copy_from_slice(b"abc");
        let (h1, n1) = Header::decode_prefix(&pkt).unwrap();
        assert_eq!(n1, BASE_LEN + 5);
        assert_eq!(h1.flags & FLAG_MORE, FLAG_MORE);
        let (h2, n2) = Header::decode_prefix(&pkt[n1..]).unwrap();
        assert_eq!((h2, n1 + n2), (b, pkt.len()));
        // A message that is not last cannot end the packet or overrun it.
        for cut in [BASE_LEN + 5, BASE_LEN + 5 + BASE_LEN - 1, BASE_LEN + 2] {
            assert!(Header::decode_prefix(&pkt[..cut]).is_err(), "cut at {cut}");
        }
        // Without FLAG_MORE trailing bytes are an error, as before.
        let mut single = pkt.clone();
        single[2] &= !FLAG_MORE;
        assert!(Header::decode_prefix(&single).is_err());
        // A huge length with FLAG_MORE does not overflow.
        let mut huge = pkt.clone();
        for len in [
            u64::MAX,
            u64::MAX - BASE_LEN as u64,
            u64::MAX - 2 * BASE_LEN as u64 + 1,
        ] {
            huge[32..40].copy_from_slice(&len.to_le_bytes());
            assert!(Header::decode_prefix(&huge).is_err(), "len {len}");
        }
    }

    #[test]
    fn eager_roundtrip_with_payload() {
        let h = sample(Kind::Eager);
        let mut buf = vec![0u8; BASE_LEN + 5];
        assert_eq!(h.encode(&mut buf), BASE_LEN);
        buf[BASE_LEN..].copy_from_slice(b"hello");
        assert_eq!(Header::decode(&buf), Ok(h));
    }

    #[test]
    fn rts_and_cts_carry_extension() {
        for kind in [Kind::Rts, Kind::Cts] {
            let mut h = sample(kind);
            h.len = 1 << 40;
            h.ext0 = 0xffff_0000_1111_2222;
            h.ext1 = 99;
            let mut buf = vec![0u8; EXT_LEN];
            assert_eq!(h.encode(&mut buf), EXT_LEN);
            assert_eq!(Header::decode(&buf), Ok(h));
        }
    }

    #[test]
    fn striped_rts_roundtrip_and_length_checks() {
        let mut h = sample(Kind::Rts);
        h.flags = FLAG_STRIPE;
        h.ext0 = 0x1000;
        h.ext1 = 7;
        assert!(h.stripes.push(0x2000, 8));
        assert!(h.stripes.push(0x3000, 9));
        let n = EXT_LEN + 8 + 32;
        assert_eq!(h.wire_len(), n);
        let mut buf = vec![0u8; n];
        assert_eq!(h.encode(&mut buf), n);
        let d = Header::decode(&buf).unwrap();
        assert_eq!(d, h);
        assert_eq!(d.stripes.as_slice(), &[(0x2000, 8), (0x3000, 9)]);
        // Every truncation and any trailing byte is rejected.
        for cut in 0..n {
            assert!(Header::decode(&buf[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = buf.clone();
        longer.push(0);
        assert!(Header::decode(&longer).is_err());
        // A count of none or more than MAX_STRIPES is rejected by name.
        for bad in [0u64, MAX_STRIPES as u64 + 1, u64::MAX] {
            let mut b = buf.clone();
            b[64..72].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(Header::decode(&b), Err(DecodeError::BadStripes(bad)));
        }
        // The list holds at most MAX_STRIPES.
        let mut full = Stripes::default();
        for i in 0..MAX_STRIPES as u64 {
            assert!(full.push(i, i));
        }
        assert!(!full.push(0, 0));
    }

    #[test]
    fn data_packet_carries_offset_token_and_payload() {
        let mut h = sample(Kind::Data);
        h.flags = 0;
        h.ext0 = 1 << 33;
        h.ext1 = 77;
        let mut pkt = vec![0u8; EXT_LEN + 5];
        assert_eq!(h.encode(&mut pkt), EXT_LEN);
        assert_eq!(Header::decode(&pkt), Ok(h.clone()));
        assert_eq!(Header::decode_prefix(&pkt), Ok((h.clone(), EXT_LEN + 5)));
        // The payload must be exactly `len` bytes.
        for n in [EXT_LEN + 4, EXT_LEN + 6] {
            let mut p = vec![0u8; n];
            h.encode(&mut p);
            assert!(matches!(
                Header::decode(&p),
                Err(DecodeError::LengthMismatch {
                    kind: Kind::Data,
                    ..
                })
            ));
        }
    }

    #[test]
    fn control_kinds_roundtrip() {
        for kind in [Kind::Fin, Kind::SyncAck] {
            let h = sample(kind);
            let mut buf = vec![0u8; BASE_LEN];
            h.encode(&mut buf);
            assert_eq!(Header::decode(&buf), Ok(h));
        }
    }

    #[test]
    fn rejects_malformed_packets() {
        let h = sample(Kind::Eager);
        let mut buf = vec![0u8; BASE_LEN + 5];
        h.encode(&mut buf);
        assert_eq!(Header::decode(&buf[..10]), Err(DecodeError::Short(10)));
        // payload shorter / longer than the header says
        assert!(matches!(
            Header::decode(&buf[..BASE_LEN + 4]),
            Err(DecodeError::LengthMismatch { .. })
        ));
        let mut longer = buf.clone();
        longer.push(0);
        assert!(matches!(
            Header::decode(&longer),
            Err(DecodeError::LengthMismatch { .. })
        ));
        let mut bad = buf.clone();
        bad[0] = 0;
        assert_eq!(Header::decode(&bad), Err(DecodeError::BadMagic(0)));
        let mut bad = buf.clone();
        bad[1] = 77;
        assert_eq!(Header::decode(&bad), Err(DecodeError::BadKind(77)));
        let mut bad = buf.clone();
        bad[3] = VERSION + 1;
        assert_eq!(
            Header::decode(&bad),
            Err(DecodeError::BadVersion(VERSION + 1))
        );
        // a length that overflows when added to the header size
        let mut huge = sample(Kind::Eager);
        huge.len = u64::MAX;
        let mut b = vec![0u8; BASE_LEN];
        huge.encode(&mut b);
        assert!(Header::decode(&b).is_err());
    }

    #[test]
    fn decode_never_panics_on_arbitrary_bytes() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        // Under Miri 60 packets: the first 15 already reach every branch of
        // `decode` and `decode_prefix` that 300 did.
        for _ in 0..if cfg!(miri) { 60 } else { 20_000 } {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 80) as usize;
            let mut pkt: Vec<u8> = (0..len).map(|i| (x >> (i % 56)) as u8).collect();
            if len > 3 && x & 1 == 0 {
                pkt[0] = MAGIC;
                pkt[3] = VERSION;
            }
            let _ = Header::decode(&pkt);
            // Walk it as a coalesced packet, as the engine does: every
            // step consumes bytes and stays inside the packet.
            if len > 3 && x & 2 == 0 {
                pkt[1] = Kind::Eager as u8;
                pkt[2] |= FLAG_MORE;
            }
            let mut off = 0;
            while off < pkt.len() {
                match Header::decode_prefix(&pkt[off..]) {
                    Ok((_, n)) => {
                        assert!(n > 0 && off + n <= pkt.len());
                        off += n;
                    }
                    Err(_) => break,
                }
            }
        }
    }
}
