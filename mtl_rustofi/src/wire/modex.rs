//! What each rank publishes through the modex: the endpoints it can be
//! reached at ([`PeerInfo`]).

use super::{MAX_STRIPES, VERSION};

/// Which endpoint of a rank an address belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum RailKind {
    /// The network provider's endpoint (every rank has one).
    Net = 0,
    /// The shm provider's endpoint, for peers on the same host.
    Shm = 1,
    /// An endpoint on another NIC than the rank's own, read through by a
    /// striped rendezvous ([`crate::proto`]'s `stripe` module).
    Stripe = 2,
    /// Our own shared-memory rail (`driver/shm`), for ranks of the same
    /// job on the same host; its "name" is the rank's place there.
    Local = 3,
}

/// One endpoint a rank can be reached at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RailAddr {
    pub kind: RailKind,
    /// Largest eager payload this endpoint's receive buffers take.
    pub max_eager: u32,
    /// The libfabric endpoint name.
    pub addr: Vec<u8>,
    /// The libfabric provider of the endpoint (`tcp;ofi_rxm`, `efa`,
    /// ...); empty for our own shared-memory rail. An endpoint name means
    /// something only to its own provider: a peer whose network endpoint
    /// is another provider's is refused when it is added, not inserted.
    pub provider: String,
    /// The NIC (libfabric domain) of a stripe endpoint; empty for the
    /// others. Peers pair stripe endpoints by it.
    pub nic: String,
}

impl RailKind {
    /// Whether endpoints of this kind are libfabric's (and so carry their
    /// provider's name).
    fn is_libfabric(self) -> bool {
        self != RailKind::Local
    }
}

/// Appends `s` (at most 255 bytes) with its length in one byte.
fn push_short_str(v: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(255)];
    v.push(b.len() as u8);
    v.extend_from_slice(b);
}

/// Reads a nonempty string written by [`push_short_str`] at `*at`.
fn short_str(b: &[u8], at: &mut usize) -> Option<String> {
    let m = *b.get(*at)? as usize;
    let s = std::str::from_utf8(b.get(*at + 1..*at + 1 + m)?).ok()?;
    if m == 0 {
        return None;
    }
    *at += 1 + m;
    Some(s.to_string())
}

/// What each rank publishes through the modex: a tag, then for each of its
/// endpoints (network first, then shm if it opened one, then its stripe
/// endpoints) the kind, the largest eager payload and the libfabric name,
/// length-prefixed; a libfabric endpoint then names its provider, and a
/// stripe endpoint its NIC.
///
/// | bytes | field                                  |
/// |------:|----------------------------------------|
/// | 4     | `R O F <VERSION>`                      |
/// | 1     | number of endpoints (1..=10)           |
/// | per endpoint: 1 | kind (0 net, 1 shm, 2 stripe, 3 local) |
/// | 4     | max eager payload, little endian       |
/// | 2     | name length n, little endian           |
/// | n     | libfabric endpoint name                |
/// | not local: 1 | provider name length p (1..=255) |
/// | p     | provider name, UTF-8                   |
/// | stripe only: 1 | NIC name length m (1..=255)  |
/// | m     | NIC (domain) name, UTF-8               |
/// | 4     | process id, little endian (after the endpoints) |
/// | 8     | its PID namespace ([`PeerInfo::pid_ns`]), little endian |
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PeerInfo {
    pub rails: Vec<RailAddr>,
    /// The publishing process's id: a same-host peer's death is seen by
    /// asking the kernel whether it still exists.
    pub pid: u32,
    /// Which PID namespace `pid` is a number of (the inode of
    /// `/proc/self/ns/pid`; 0 where unknown). A same-host peer in another
    /// one (a container with a process table of its own) has a pid that
    /// names another process here, or none: asked about it, the kernel
    /// would report a live peer dead.
    pub pid_ns: u64,
}

const PEER_INFO_TAG: [u8; 4] = [b'R', b'O', b'F', VERSION];
const MAX_RAILS: usize = 2 + MAX_STRIPES + 1;

/// Whether pids published from PID namespaces `a` and `b` (0: unknown)
/// name the same processes, as far as can be told.
pub(crate) fn same_pid_namespace(a: u64, b: u64) -> bool {
    a == 0 || b == 0 || a == b
}

impl PeerInfo {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v =
            Vec::with_capacity(5 + self.rails.iter().map(|r| 7 + r.addr.len()).sum::<usize>());
        v.extend_from_slice(&PEER_INFO_TAG);
        v.push(self.rails.len() as u8);
        for r in &self.rails {
            v.push(r.kind as u8);
            v.extend_from_slice(&r.max_eager.to_le_bytes());
            v.extend_from_slice(&(r.addr.len() as u16).to_le_bytes());
            v.extend_from_slice(&r.addr);
            if r.kind.is_libfabric() {
                push_short_str(&mut v, &r.provider);
            }
            if r.kind == RailKind::Stripe {
                push_short_str(&mut v, &r.nic);
            }
        }
        v.extend_from_slice(&self.pid.to_le_bytes());
        v.extend_from_slice(&self.pid_ns.to_le_bytes());
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Result<PeerInfo, String> {
        let bad = |why: &str| {
            format!(
                "modex entry of {} bytes is not a rustofi v{VERSION} address: {why}",
                b.len()
            )
        };
        if b.len() < 5 || b[..4] != PEER_INFO_TAG {
            return Err(bad("wrong tag or version"));
        }
        let count = b[4] as usize;
        if count == 0 || count > MAX_RAILS {
            return Err(bad("bad endpoint count"));
        }
        let mut rails = Vec::with_capacity(count);
        let mut at = 5;
        for _ in 0..count {
            let head = b.get(at..at + 7).ok_or_else(|| bad("truncated"))?;
            let kind = match head[0] {
                0 => RailKind::Net,
                1 => RailKind::Shm,
                2 => RailKind::Stripe,
                3 => RailKind::Local,
                k => return Err(bad(&format!("unknown endpoint kind {k}"))),
            };
            let max_eager = u32::from_le_bytes(head[1..5].try_into().expect("4 bytes"));
            let n = u16::from_le_bytes(head[5..7].try_into().expect("2 bytes")) as usize;
            at += 7;
            let addr = b.get(at..at + n).ok_or_else(|| bad("truncated name"))?;
            if n == 0 {
                return Err(bad("empty endpoint name"));
            }
            at += n;
            let mut provider = String::new();
            if kind.is_libfabric() {
                provider = short_str(b, &mut at).ok_or_else(|| bad("bad provider name"))?;
            }
            let mut nic = String::new();
            if kind == RailKind::Stripe {
                nic = short_str(b, &mut at).ok_or_else(|| bad("bad NIC name"))?;
            }
            rails.push(RailAddr {
                kind,
                max_eager,
                addr: addr.to_vec(),
                provider,
                nic,
            });
        }
        let pid = b
            .get(at..at + 4)
            .ok_or_else(|| bad("truncated process id"))?;
        let pid = u32::from_le_bytes(pid.try_into().expect("4 bytes"));
        at += 4;
        let pid_ns = b
            .get(at..at + 8)
            .ok_or_else(|| bad("truncated PID namespace"))?;
        let pid_ns = u64::from_le_bytes(pid_ns.try_into().expect("8 bytes"));
        at += 8;
        if at != b.len() {
            return Err(bad("trailing bytes"));
        }
        // The network endpoint comes first; a rank of a job on one host
        // may have none, and then publishes only its own shm rail.
        let local_only = rails.len() == 1 && rails[0].kind == RailKind::Local;
        if rails.first().map(|r| r.kind) != Some(RailKind::Net) && !local_only {
            return Err(bad("the first endpoint is not the network endpoint"));
        }
        Ok(PeerInfo { rails, pid, pid_ns })
    }

    /// Whether this peer's process id names the same process here, as far
    /// as can be told: both PID namespaces the same, or either unknown.
    pub(crate) fn pid_is_ours(&self, own_pid_ns: u64) -> bool {
        self.pid != 0 && same_pid_namespace(self.pid_ns, own_pid_ns)
    }

    /// The address of the given kind, if published.
    pub(crate) fn rail(&self, kind: RailKind) -> Option<&RailAddr> {
        self.rails.iter().find(|r| r.kind == kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_info_roundtrip_and_rejects() {
        let p = PeerInfo {
            rails: vec![
                RailAddr {
                    kind: RailKind::Net,
                    max_eager: 8192,
                    addr: vec![1, 2, 3, 4, 5],
                    provider: "tcp;ofi_rxm".into(),
                    nic: String::new(),
                },
                RailAddr {
                    kind: RailKind::Shm,
                    max_eager: 4096,
                    addr: b"fi_shm://1234".to_vec(),
                    provider: "shm".into(),
                    nic: String::new(),
                },
                RailAddr {
                    kind: RailKind::Stripe,
                    max_eager: 0,
                    addr: vec![9, 8, 7],
                    provider: "tcp;ofi_rxm".into(),
                    nic: "eth1".into(),
                },
            ],
            pid: 4321,
            pid_ns: 0xefff_ffff,
        };
        let enc = p.encode();
        assert_eq!(PeerInfo::decode(&enc), Ok(p.clone()));
        assert_eq!(
            PeerInfo::decode(&enc)
                .unwrap()
                .rail(RailKind::Shm)
                .unwrap()
                .max_eager,
            4096
        );
        // Every truncation is rejected, none panics.
        for n in 0..enc.len() {
            assert!(PeerInfo::decode(&enc[..n]).is_err(), "prefix of {n} bytes");
        }
        let mut long = enc.clone();
        long.push(0);
        assert!(PeerInfo::decode(&long).unwrap_err().contains("trailing"));
        let mut bad = enc.clone();
        bad[3] = VERSION + 1;
        assert!(PeerInfo::decode(&bad).is_err());
        let mut bad = enc.clone();
        bad[5] = 7; // unknown kind
        assert!(PeerInfo::decode(&bad).unwrap_err().contains("kind"));
        // A stripe endpoint must name its NIC.
        let mut nameless = p.clone();
        nameless.rails[2].nic.clear();
        assert!(PeerInfo::decode(&nameless.encode())
            .unwrap_err()
            .contains("NIC name"));
        // A libfabric endpoint must name its provider.
        for i in 0..3 {
            let mut unnamed = p.clone();
            unnamed.rails[i].provider.clear();
            assert!(
                PeerInfo::decode(&unnamed.encode())
                    .unwrap_err()
                    .contains("provider name"),
                "endpoint {i}"
            );
        }
        let shm_only = PeerInfo {
            rails: vec![p.rails[1].clone()],
            pid: 1,
            pid_ns: 0,
        };
        assert!(PeerInfo::decode(&shm_only.encode()).is_err());
        // A rank without a network rail publishes its own shm rail alone.
        let local = RailAddr {
            kind: RailKind::Local,
            max_eager: 4000,
            addr: vec![1; 16],
            provider: String::new(),
            nic: String::new(),
        };
        let local_only = PeerInfo {
            rails: vec![local.clone()],
            pid: 2,
            pid_ns: 7,
        };
        assert_eq!(PeerInfo::decode(&local_only.encode()), Ok(local_only));
        // ... but not beside another endpoint that is not the network's.
        let two = PeerInfo {
            rails: vec![local, p.rails[1].clone()],
            pid: 2,
            pid_ns: 7,
        };
        assert!(PeerInfo::decode(&two.encode()).is_err());
    }

    #[test]
    fn a_pid_of_another_pid_namespace_is_not_taken_for_a_process_here() {
        let mut p = PeerInfo {
            rails: Vec::new(),
            pid: 4321,
            pid_ns: 0xf000_0001,
        };
        assert!(p.pid_is_ours(0xf000_0001));
        assert!(!p.pid_is_ours(0xf000_0002));
        // Either side unknown: taken as the same (as before namespaces
        // were published).
        assert!(p.pid_is_ours(0));
        p.pid_ns = 0;
        assert!(p.pid_is_ours(0xf000_0002));
        // No pid at all: nothing to ask the kernel about.
        p.pid = 0;
        assert!(!p.pid_is_ours(0));
    }
}
