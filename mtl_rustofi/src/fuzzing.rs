//! Entry points for the fuzz targets (`mtl_rustofi/fuzz`), built only with
//! the `fuzzing` feature: everything the component decodes from outside
//! the process. Each function takes the fuzzer's bytes, must never panic,
//! and asserts what must hold for any input.
//!
//! - [`header`]: a packet header (`wire::Header::decode_prefix`/`decode`,
//!   and `wire::EagerMsg::parse` and `wire::Header::decode_head` against
//!   them);
//! - [`peer_info`]: a peer's modex record (`wire::PeerInfo::decode`);
//! - [`core_packets`]: a protocol core fed a script of posted receives,
//!   sends, operation reports and packets, both well-formed headers with
//!   fuzzed fields (RTS, CTS and FIN bodies, sequence numbers, coalesced
//!   runs) and raw bytes, through the same `on_packet` the driver calls,
//!   and now and then as a receive the provider lost with only its front
//!   placed (`on_rx_error`); on a rail like the own shared-memory one,
//!   also packets read from a ring as its driver hands them over: the
//!   short eager format (`driver::shm::short`, well-formed with fuzzed
//!   fields, or raw bytes) through `on_ring_eager`, the rest through
//!   `on_ring_packet`.

use crate::config::Fault;
use crate::driver::shm::short;
use crate::matching::{Selector, Source, Tag};
use crate::proto::ids::{FiAddr, OpId, PeerId, RailId, ReqId, RxSlot};
use crate::proto::{Action, Core, CoreConfig, Out, PostError, RailProfile, SendArgs, Stats};
use crate::usermem::UserBuf;
use crate::wire::{self, EagerHead, Header, Kind, PeerInfo, RailKind};
use std::sync::Arc;

/// A packet header: whatever decodes must encode and decode to itself.
pub fn header(data: &[u8]) {
    if let Ok((h, n)) = Header::decode_prefix(data) {
        assert!(n >= h.wire_len() && n <= data.len());
        // Re-encode the header in place: the bytes after it (the payload,
        // and a coalesced run's next message) stay as they were.
        let mut b = data.to_vec();
        let m = h.encode(&mut b);
        assert_eq!(m, h.wire_len());
        let (again, n2) = Header::decode_prefix(&b).expect("an encoded header decodes");
        assert_eq!(again, h);
        assert_eq!(n2, n);
    }
    // A damaged receive's header reads as the whole packet's would (a
    // striped RTS without its stripes).
    let head = Header::decode_head(data);
    if let Ok(mut h) = Header::decode(data) {
        h.stripes = Default::default();
        assert_eq!(head, Ok(h));
    }
    // The receive path reads an eager message in place: exactly what
    // decodes as one, the same header and length.
    match (wire::EagerMsg::parse(data), Header::decode_prefix(data)) {
        (Some((m, n)), full) => assert_eq!(full, Ok((m.header(), n))),
        (None, Ok((h, _))) => assert_ne!(h.kind, Kind::Eager),
        (None, Err(_)) => {}
    }
    // A ring packet shorter than a base header is in the short format: it
    // encodes back to its own bytes, and means the message whose
    // base-format packet parses to the same header and payload.
    match short::decode(data, PEER) {
        Some((h, payload)) => {
            assert!(data.len() < wire::BASE_LEN && data.len() >= short::HEAD);
            assert_eq!(payload, &data[short::HEAD..]);
            let mut b = [0; short::HEAD];
            short::encode(&h, &mut b);
            assert_eq!(&b[..], &data[..short::HEAD]);
            let mut base = [0; wire::BASE_LEN];
            h.encode(payload.len(), &mut base);
            let pkt = [&base[..], payload].concat();
            let (m, n) = wire::EagerMsg::parse(&pkt).expect("a base-format eager message");
            assert_eq!(n, pkt.len());
            assert_eq!(m.header(), h.header(payload.len()));
        }
        None => assert!(data.len() >= wire::BASE_LEN || data.len() < short::HEAD),
    }
}

/// A peer's modex record: whatever decodes must encode to a record that
/// decodes to the same value.
pub fn peer_info(data: &[u8]) {
    if let Ok(p) = PeerInfo::decode(data) {
        let again = PeerInfo::decode(&p.encode()).expect("an encoded record decodes");
        assert_eq!(again, p);
    }
}

/// Reads the fuzzer's bytes as a script; zeros once they run out.
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |v, i| v | (self.u8() as u64) << (8 * i))
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

const ME: u64 = 1;
const PEER: u64 = 2;
const RX_COUNT: usize = 4;
const EAGER: usize = 256;

fn profile(s: &mut Script<'_>) -> RailProfile {
    let bits = s.u8();
    let ring_like = bits & 128 != 0 && bits & 1 == 0;
    RailProfile {
        // A rail that sends inline and keeps its one receive slot is read
        // like the own shared-memory rail's rings.
        kind: if ring_like {
            RailKind::Local
        } else {
            RailKind::Net
        },
        provider: "fuzz".into(),
        mr_local: bits & 1 != 0,
        mr_virt_addr: bits & 2 != 0,
        mr_prov_key: bits & 4 != 0,
        buf_size: wire::BASE_LEN + EAGER,
        eager_limit: EAGER,
        zero_copy: bits & 8 != 0,
        rndv_read: bits & 16 != 0,
        tagged: bits & 32 != 0,
        rndv_msg: bits & 64 != 0,
        inject_size: if bits & 128 != 0 { 128 } else { 0 },
        // Inline sends need an inject size; the script takes or refuses
        // each one.
        inline: ring_like,
        // Like the own ring, which is the rail that sends inline.
        rx_kept: ring_like,
        chunk: 512,
        tx_depth: 4,
        rx_count: RX_COUNT,
    }
}

/// Memory the script's requests point into. Every buffer stays allocated
/// until the core is gone, so a request the core still holds never names
/// freed memory.
#[derive(Default)]
struct Buffers(Vec<Box<[u8]>>);

impl Buffers {
    fn user(&mut self, len: usize) -> UserBuf {
        let mut b = vec![0xa5u8; len].into_boxed_slice();
        // SAFETY: the allocation is owned by `self`, which outlives the core
        // (it is declared before it in `core_packets` and dropped after it),
        // and nothing else reads or writes it.
        let u = unsafe { UserBuf::new(b.as_mut_ptr(), b.len()) };
        self.0.push(b);
        u
    }
}

/// A header with fuzzed fields from a known sender, so that the packet
/// passes validation and reaches the protocol.
fn packet(s: &mut Script<'_>, pkt: &mut Vec<u8>, cookies: u64) {
    let kind = match s.u8() % 5 {
        0 => Kind::Eager,
        1 => Kind::Rts,
        2 => Kind::Cts,
        3 => Kind::Fin,
        _ => Kind::SyncAck,
    };
    let mut h = Header::new(kind);
    h.flags = s.u8();
    h.ctx = (s.u8() % 3) as u32;
    h.src = (s.u8() % 3) as i32;
    h.tag = (s.u8() % 4) as i32 - 1;
    h.seq = s.u8() as u32;
    h.status = (s.u8() % 3) as u32;
    h.sender = if s.u8() == 0xff { s.u64() } else { PEER };
    // Cookies of our own rendezvous and syncs are small numbers: aim there.
    h.cookie = s.u64() % (cookies + 2);
    h.ext0 = s.u64();
    h.ext1 = s.u64();
    if kind == Kind::Rts && h.flags & wire::FLAG_STRIPE != 0 {
        // A striped RTS names at least one stripe (else it is rejected
        // before it reaches the protocol); no script bytes are drawn, so
        // the corpus keeps its meaning.
        h.stripes.push(h.ext0.rotate_left(7), h.ext1 ^ 1);
    }
    let payload = if kind == Kind::Eager {
        (s.u16() as usize) % (EAGER + 1)
    } else {
        0
    };
    h.len = match kind {
        Kind::Eager => payload as u64,
        _ => s.u16() as u64 * 64,
    };
    let at = pkt.len();
    pkt.resize(at + h.wire_len(), 0);
    let n = h.encode(&mut pkt[at..]);
    pkt.truncate(at + n);
    let body: Vec<u8> = s.bytes(payload).to_vec();
    pkt.extend_from_slice(&body);
    pkt.resize(at + n + payload, 0);
}

/// A protocol core driven by a script of commands, reports and packets.
pub fn core_packets(data: &[u8]) {
    crate::log::QUIET.with(|q| q.set(true));
    let mut s = Script(data);
    let mut bufs = Buffers::default();
    let stats = Arc::new(Stats::default());
    let cfg = CoreConfig {
        my_name: ME,
        coalesce: s.u8() & 1 != 0,
        fault: Fault::None,
        // Every read rendezvous to the peer stripes over its one stripe.
        stripe_min: 1,
        // Small enough that scripts of a few sends make sends wait.
        send_queue_limit: 1 << 17,
        send_queue_total: 1 << 18,
    };
    let prof = profile(&mut s);
    let ring = prof.kind == RailKind::Local;
    let mut core = Core::new(cfg, vec![prof.clone(), prof], stats);
    let mut out = Out::new();
    core.start(&mut out);
    let rail = RailId(0);
    core.add_peer(ME, rail, FiAddr(0), EAGER);
    let peer: PeerId = core.add_peer(PEER, rail, FiAddr(1), EAGER);
    core.add_stripe(peer, 0, RailId(1), FiAddr(1));
    // Operations handed to the "provider", reported later in script order.
    let mut pending: Vec<OpId> = Vec::new();
    let mut next_req = 0usize;
    let mut slot = 0usize;
    let mut key = 1u64;
    let mut steps = 0;
    while !s.done() && steps < 512 {
        steps += 1;
        match s.u8() % 8 {
            0 => {
                let sel = Selector {
                    ctx: (s.u8() % 3) as u32,
                    src: match s.u8() % 3 {
                        0 => Source::Any,
                        r => Source::Rank(r as i32 - 1),
                    },
                    tag: match s.u8() % 4 {
                        0 => Tag::Any,
                        t => Tag::Value(t as i32 - 1),
                    },
                };
                let buf = bufs.user(s.u16() as usize % 4096);
                next_req += 1;
                let _ = core.recv(sel, None, buf, ReqId(next_req), &mut out);
            }
            1 => {
                let len = s.u16() as usize % 4096;
                let args = SendArgs {
                    peer,
                    ctx: (s.u8() % 3) as u32,
                    src: 0,
                    tag: (s.u8() % 3) as i32,
                    buf: bufs.user(len),
                    sync: s.u8() & 1 != 0,
                    req: ReqId({
                        next_req += 1;
                        next_req
                    }),
                };
                if let Ok(sent) = core.send(args, &mut out) {
                    sent.into_out(&mut out);
                }
            }
            2 | 3 => {
                let mut pkt = Vec::new();
                let run = 1 + s.u8() % 3;
                for i in 0..run {
                    let at = pkt.len();
                    packet(&mut s, &mut pkt, next_req as u64);
                    if i + 1 < run {
                        wire::set_more(&mut pkt[at..]);
                    }
                }
                // Now and then one byte flipped after the header was made.
                if s.u8() == 0 && !pkt.is_empty() {
                    let i = s.u16() as usize % pkt.len();
                    pkt[i] ^= s.u8() | 1;
                }
                let at = RxSlot((slot % RX_COUNT) as u32);
                if s.u8() % 8 == 0 {
                    // Lost by the provider with only its front placed.
                    let placed = s.u16() as usize % (pkt.len() + 1);
                    core.on_rx_error(rail, at, false, "fuzzed loss", &pkt[..placed], &mut out);
                } else {
                    core.on_packet(rail, at, &pkt, &mut out);
                }
                slot += 1;
            }
            4 if ring => {
                // A packet read from a ring, handed over as the driver
                // hands it (`short::deliver`).
                let pkt = if s.u8() & 1 == 0 {
                    let head = EagerHead {
                        ctx: (s.u8() % 3) as u32,
                        src: (s.u8() % 3) as i32,
                        tag: (s.u8() % 4) as i32 - 1,
                        seq: s.u8() as u32,
                        sender: PEER,
                    };
                    let n = s.u8() as usize % (short::MAX_PAYLOAD + 1);
                    short::packet(&head, s.bytes(n))
                } else {
                    let len = s.u8() as usize;
                    s.bytes(len).to_vec()
                };
                // The ring names its peer; now and then a name the core
                // does not know.
                let sender = if s.u8() == 0xff { s.u64() } else { PEER };
                short::deliver(&mut core, rail, &pkt, sender, &mut out);
            }
            4 => {
                let len = s.u8() as usize;
                let raw = s.bytes(len).to_vec();
                core.on_packet(rail, RxSlot((slot % RX_COUNT) as u32), &raw, &mut out);
                slot += 1;
            }
            5 => {
                if !pending.is_empty() {
                    let op = pending.remove(s.u8() as usize % pending.len());
                    match s.u8() % 4 {
                        0 => core.on_error(op, "fuzzed error", &mut out),
                        1 => core.on_canceled(op, &mut out),
                        _ => core.on_complete(op, &mut out),
                    }
                }
            }
            6 => core.tick(&mut out),
            _ => {
                if s.u8() == 0 {
                    core.peer_lost(peer, &mut out);
                }
            }
        }
        // The driver's side: take every operation, answer registrations.
        let mut i = 0;
        while let Some(&a) = out.actions.get(i) {
            i += 1;
            match a {
                Action::Send { op, .. }
                | Action::Read { op, .. }
                | Action::TaggedSend { op, .. }
                | Action::TaggedRecv { op, .. } => pending.push(op),
                Action::Register { mr, .. } => {
                    key += 1;
                    core.on_registered(mr, Ok(key), &mut out);
                }
                Action::SendInline {
                    rail,
                    peer,
                    head,
                    payload,
                    req,
                    ..
                } => {
                    if s.u8() & 3 == 0 {
                        core.on_inline_refused(
                            rail,
                            peer,
                            &head,
                            payload,
                            req,
                            PostError::Again,
                            &mut out,
                        );
                    }
                }
                Action::PostRecv { .. }
                | Action::Deregister { .. }
                | Action::Cancel { .. }
                | Action::CheckAlive { .. } => {}
            }
        }
        out.actions.clear();
        out.events.clear();
        assert!(
            core.tick_work_exact(),
            "tick work bits disagree with their sources"
        );
    }
    drop(core);
    drop(bufs);
    crate::log::QUIET.with(|q| q.set(false));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so that the runs repeat.
    fn scripts(seed: u64, count: usize, max_len: usize) -> impl Iterator<Item = Vec<u8>> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..count).map(move |_| {
            let len = (next() as usize) % max_len;
            (0..len).map(|_| next() as u8).collect()
        })
    }

    /// The fuzz targets over seeded random inputs (the fuzzer itself runs
    /// in scripts/test and for long runs by hand; see docs/testing.md).
    #[test]
    fn fuzz_entry_points_on_random_input() {
        let n = if cfg!(miri) { 20 } else { 3000 };
        for s in scripts(7, n, 96) {
            header(&s);
            peer_info(&s);
        }
        for s in scripts(11, n, 1024) {
            core_packets(&s);
        }
    }

    /// The committed seed corpus (fuzz/seeds), findings included, through
    /// every entry point.
    #[test]
    fn fuzz_seed_corpus() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
        let mut n = 0;
        for (dir, f) in [
            ("header", header as fn(&[u8])),
            ("peer_info", peer_info),
            ("core_packets", core_packets),
        ] {
            for e in std::fs::read_dir(root.join(dir)).expect("seed directory") {
                let data = std::fs::read(e.expect("seed").path()).expect("seed file");
                header(&data);
                peer_info(&data);
                core_packets(&data);
                f(&data);
                n += 1;
            }
        }
        assert!(n >= 8, "seed corpus missing ({n} files)");
    }

    /// The modex seeds are records of this wire version, so that the
    /// fuzzer starts from ones that decode.
    #[test]
    fn peer_info_seeds_decode() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/peer_info");
        for e in std::fs::read_dir(dir).expect("seed directory") {
            let path = e.expect("seed").path();
            let data = std::fs::read(&path).expect("seed file");
            if let Err(why) = PeerInfo::decode(&data) {
                panic!("{}: {why}", path.display());
            }
        }
    }

    /// An eager header with FLAG_MORE followed by more bytes than one
    /// message (the fuzzer's first finding, in the target's own check: the
    /// re-encoded header must be decoded with the bytes that follow it).
    #[test]
    fn fuzz_finding_more_flag_with_trailing_bytes() {
        let mut pkt = vec![0u8; wire::BASE_LEN + 3 + wire::BASE_LEN];
        let mut h = Header::new(Kind::Eager);
        h.len = 3;
        h.sender = PEER;
        let n = h.encode(&mut pkt);
        wire::set_more(&mut pkt);
        let mut next = Header::new(Kind::Eager);
        next.sender = PEER;
        next.encode(&mut pkt[n + 3..]);
        header(&pkt);
        let (got, used) = Header::decode_prefix(&pkt).expect("decodes");
        assert_eq!(used, n + 3);
        assert_eq!(got.len, 3);
    }

    /// Well-formed records and headers survive the round trip the targets
    /// assert.
    #[test]
    fn fuzz_round_trips_hold_for_valid_input() {
        let mut h = Header::new(Kind::Rts);
        h.sender = 9;
        h.len = 1 << 20;
        h.ext0 = 0x1000;
        h.ext1 = 77;
        let mut b = vec![0u8; wire::EXT_LEN];
        let n = h.encode(&mut b);
        header(&b[..n]);
        assert_eq!(Header::decode(&b[..n]), Ok(h));
        let p = PeerInfo {
            rails: vec![wire::RailAddr {
                kind: RailKind::Net,
                max_eager: 8192,
                addr: vec![1, 2, 3],
                provider: "tcp;ofi_rxm".into(),
                nic: String::new(),
            }],
            pid: 1,
            pid_ns: 2,
        };
        peer_info(&p.encode());
    }
}
