//! Provider profiles (what the core is told of each rail) and fault sets.

use super::Faults;
use crate::proto::RailProfile;
use crate::wire::{RailKind, BASE_LEN, EXT_LEN};

/// The rails of every simulated node.
#[derive(Clone, Debug)]
pub(crate) struct Rails {
    pub(crate) profiles: Vec<RailProfile>,
    /// Nodes `2k` and `2k + 1` share a host and talk over rail 1 (shm).
    pub(crate) shm_pairs: bool,
    /// The last `stripes` profiles are stripe rails: every node has one
    /// endpoint on each, paired with its peers' of the same index.
    pub(crate) stripes: usize,
    /// Odd nodes have one stripe endpoint fewer (a peer with fewer NICs).
    pub(crate) uneven: bool,
    /// Odd nodes cannot read their host partner's memory (the own rail
    /// of ranks that differ, as containers do): see [`Rails::cannot_read`]
    /// and [`Rails::profiles_of`].
    pub(crate) no_read: bool,
}

impl Rails {
    /// The stripe rails node `a` has endpoints on, as (stripe index, rail).
    pub(crate) fn stripes_of(&self, a: usize) -> impl Iterator<Item = (usize, usize)> {
        let n = self.stripes - (self.uneven && a % 2 == 1) as usize;
        let first = self.profiles.len() - self.stripes;
        (0..n).map(move |i| (i, first + i))
    }

    /// Whether node `a` cannot read node `b`'s memory, so that the core
    /// answers `b`'s read rendezvous as message rendezvous (and a read
    /// posted from `a` to `b` is a defect): with `no_read`, an odd node
    /// and its host partner.
    pub(crate) fn cannot_read(&self, a: usize, b: usize) -> bool {
        self.no_read && a % 2 == 1 && self.shm_pairs && a / 2 == b / 2
    }

    /// The rails node `a` opens. With `no_read`, the odd node of every
    /// other host has no cross-memory attach at all (a seccomp profile of
    /// its own: it sends message rendezvous itself), and that of the
    /// others keeps its reads for other peers (its partner is in another
    /// PID namespace: only that pair is unreadable, and its own
    /// rendezvous still ask for reads). Only the rendezvous choice
    /// differs: the simulator's other uses of `profiles` (buffer sizes,
    /// chunks, what a workload may send) hold for every node.
    pub(crate) fn profiles_of(&self, a: usize) -> Vec<RailProfile> {
        let mut p = self.profiles.clone();
        if self.no_read && self.shm_pairs && a % 4 == 1 {
            p[1].rndv_read = false;
            p[1].rndv_msg = true;
        }
        p
    }

    /// The rail node `a` uses to reach node `b`.
    pub(crate) fn rail_between(&self, a: usize, b: usize) -> usize {
        if self.shm_pairs && a / 2 == b / 2 {
            1
        } else {
            0
        }
    }
}

/// Profile names, for the test matrix and `SIM_PROFILE`.
pub(crate) const PROFILES: &[&str] = &[
    "efa",
    "efa-va",
    "efa-send",
    "tcp-rxm",
    "udp-rxd",
    "shm",
    "sockets",
    "bare",
    "efa-shm",
    "efa-stripe",
    "tiny",
    "tiny-send",
    "efa-direct",
    "efa-direct-msg",
    "msg-only",
    "tiny-msg",
    "efa-local",
    "efa-local-msg",
    "efa-local-mixed",
];

/// Fault set names, for the test matrix and `SIM_FAULT`.
pub(crate) const FAULT_SETS: &[&str] = &[
    "none", "cqerr", "eagain", "posthard", "reg", "slow", "dup", "death", "mixed",
];

#[allow(clippy::too_many_arguments)]
fn rail(
    provider: &str,
    kind: RailKind,
    mr_local: bool,
    mr_virt_addr: bool,
    mr_prov_key: bool,
    eager_limit: usize,
    zero_copy: bool,
    rndv_read: bool,
    tagged: bool,
    chunk: usize,
    tx_depth: usize,
    rx_count: usize,
) -> RailProfile {
    RailProfile {
        kind,
        provider: provider.to_string(),
        mr_local,
        mr_virt_addr,
        mr_prov_key,
        buf_size: eager_limit + BASE_LEN,
        eager_limit,
        zero_copy,
        rndv_read,
        tagged,
        rndv_msg: false,
        // Set per profile below: most providers' inject sizes would take
        // every control packet.
        inject_size: 0,
        inline: false,
        rx_kept: false,
        chunk,
        tx_depth,
        rx_count,
    }
}

/// EFA: FI_MR_LOCAL (and ALLOCATED), provider keys, RMA read, small
/// queues, 8 KiB receive buffers.
fn efa(virt: bool) -> RailProfile {
    rail(
        "efa",
        RailKind::Net,
        true,
        virt,
        true,
        8192 - BASE_LEN,
        false,
        true,
        false,
        16384,
        8,
        8,
    )
}

/// A stripe rail of the EFA-like multi-NIC profile: the same rules with a
/// different chunk size, so that chunks of one transfer differ by lane.
fn efa_stripe() -> RailProfile {
    let mut p = efa(false);
    p.provider = "efa-stripe".to_string();
    p.kind = RailKind::Stripe;
    p.chunk = 8192;
    // As the driver opens them: no packet arrives on a stripe rail.
    p.rx_count = 0;
    p
}

fn efa_direct() -> RailProfile {
    rail(
        "efa-direct",
        RailKind::Net,
        true,
        false,
        true,
        8192 - BASE_LEN,
        false,
        true,
        false,
        8192,
        8,
        8,
    )
}

fn shm() -> RailProfile {
    // shm injects up to 4 KiB.
    RailProfile {
        inject_size: 4096,
        ..rail(
            "shm",
            RailKind::Shm,
            false,
            true,
            false,
            4048,
            false,
            true,
            true,
            32768,
            16,
            16,
        )
    }
}

/// The component's own shared-memory rail as the core sees it
/// (`driver/shm`): every packet (header and zero-copy payload alike)
/// copied into the ring at once like an inject, no registration (keys are
/// pids, addresses virtual), reads of large chunks (cross-memory attach),
/// queue depth never the limit (a full ring is `Again`, which the fault
/// sets exercise). The real rail's one receive slot is its read position,
/// which the driver keeps armed (`rx_kept`: the core posts nothing back);
/// here 16 slots take packets in parallel and stay armed after each
/// packet or receive error, as the ring does. Reads go in 64 KiB chunks
/// here (the driver's are 4 MiB) so that multi-chunk transfers stay small
/// enough to check quickly. With `msg`, cross-memory attach is not
/// permitted and large messages go as data packets.
fn local(msg: bool) -> RailProfile {
    local_sized(msg, 8192)
}

/// [`local`] with an eager limit of `eager` bytes; buffers hold a control
/// packet whatever the limit, as the driver's do.
fn local_sized(msg: bool, eager: usize) -> RailProfile {
    let buf_size = BASE_LEN + eager.max(EXT_LEN - BASE_LEN);
    RailProfile {
        buf_size,
        inject_size: buf_size,
        inline: true,
        rx_kept: true,
        rndv_read: !msg,
        rndv_msg: msg,
        ..rail(
            "rustofi-shm",
            RailKind::Local,
            false,
            true,
            true,
            eager,
            true,
            !msg,
            false,
            64 << 10,
            1 << 20,
            16,
        )
    }
}

/// `tx_attr->inject_size` of udp;ofi_rxd (libfabric 1.17), from which the
/// driver derives that rail's eager limit.
const UDP_RXD_INJECT_SIZE: usize = 1256;

/// The rails of a named profile.
pub(crate) fn profile_set(name: &str) -> Option<Rails> {
    let one = |p| Rails {
        profiles: vec![p],
        shm_pairs: false,
        stripes: 0,
        uneven: false,
        no_read: false,
    };
    Some(match name {
        "efa" => one(efa(false)),
        "efa-va" => one(efa(true)),
        // EFA-like registration rules with the send rendezvous (tagged
        // receives and sends from registered user buffers).
        "efa-send" => one(rail(
            "efa-send",
            RailKind::Net,
            true,
            false,
            true,
            4096 - BASE_LEN,
            false,
            false,
            true,
            8192,
            4,
            8,
        )),
        "tcp-rxm" => one(RailProfile {
            inject_size: 64,
            ..rail(
                "tcp;ofi_rxm",
                RailKind::Net,
                false,
                true,
                false,
                65536,
                true,
                true,
                true,
                32768,
                32,
                16,
            )
        }),
        // The eager limit the driver chooses for rxd (every packet within
        // one datagram of its 1,256-byte inject size: 1 KiB); no inject.
        "udp-rxd" => one(rail(
            "udp;ofi_rxd",
            RailKind::Net,
            false,
            true,
            false,
            crate::config::default_eager_limit("udp;ofi_rxd", UDP_RXD_INJECT_SIZE),
            false,
            false,
            true,
            8192,
            16,
            16,
        )),
        "shm" => one(shm()),
        "sockets" => one(rail(
            "sockets",
            RailKind::Net,
            false,
            true,
            false,
            16384,
            true,
            true,
            true,
            16384,
            32,
            16,
        )),
        // Neither FI_RMA nor FI_TAGGED, and no message rendezvous (the
        // driver would choose it; left out here so the core's refusal of a
        // send it cannot carry stays covered): only eager messages go.
        "bare" => one(rail(
            "bare",
            RailKind::Net,
            false,
            false,
            false,
            2048,
            false,
            false,
            false,
            8192,
            16,
            16,
        )),
        // Queues as small as they go: one operation in flight, two
        // receive buffers, small chunks.
        "tiny" => one(rail(
            "tiny",
            RailKind::Net,
            true,
            false,
            true,
            1024,
            false,
            true,
            false,
            2048,
            1,
            2,
        )),
        "tiny-send" => one(rail(
            "tiny-send",
            RailKind::Net,
            true,
            false,
            true,
            1024,
            false,
            false,
            true,
            2048,
            1,
            2,
        )),
        // libfabric's efa-direct: FI_MSG and FI_RMA, no FI_TAGGED, messages
        // of at most about 8 KiB (so reads are split as finely), FI_MR_LOCAL
        // and provider keys. The rendezvous reads.
        "efa-direct" => one(efa_direct()),
        // The same with the message rendezvous forced (rndv_protocol = msg).
        "efa-direct-msg" => one(RailProfile {
            rndv_read: false,
            rndv_msg: true,
            ..efa_direct()
        }),
        // FI_MSG alone (no RMA, no tagged): the message rendezvous.
        "msg-only" => one(RailProfile {
            rndv_msg: true,
            inject_size: 256,
            ..rail(
                "msg-only",
                RailKind::Net,
                false,
                false,
                false,
                4096,
                false,
                false,
                false,
                8192,
                16,
                16,
            )
        }),
        // The message rendezvous with queues as small as they go.
        "tiny-msg" => one(RailProfile {
            rndv_msg: true,
            inject_size: 64,
            ..rail(
                "tiny-msg",
                RailKind::Net,
                true,
                false,
                true,
                1024,
                false,
                false,
                false,
                2048,
                1,
                2,
            )
        }),
        // EFA between hosts, shm between the two nodes of a host.
        "efa-shm" => Rails {
            profiles: vec![efa(false), shm()],
            shm_pairs: true,
            stripes: 0,
            uneven: false,
            no_read: false,
        },
        // EFA with the own shared-memory rail for same-host pairs (what
        // `mtl_rustofi_shm auto` opens under efa).
        "efa-local" | "efa-local-msg" => Rails {
            profiles: vec![efa(false), local(name == "efa-local-msg")],
            shm_pairs: true,
            stripes: 0,
            uneven: false,
            no_read: false,
        },
        // The own rail where odd nodes cannot read their host partner
        // (`Rails::cannot_read`, `Rails::profiles_of`): every read
        // rendezvous to them is answered as a message rendezvous.
        "efa-local-mixed" => Rails {
            profiles: vec![efa(false), local(false)],
            shm_pairs: true,
            stripes: 0,
            uneven: false,
            no_read: true,
        },
        // Directed cases only: `efa-local-mixed` with an eager limit of 8
        // bytes on the own rail, which leaves no room for data packets.
        "efa-local-mixed-tiny" => Rails {
            profiles: vec![efa(false), local_sized(false, 8)],
            shm_pairs: true,
            stripes: 0,
            uneven: false,
            no_read: true,
        },
        // Three EFA-like NICs per node: the primary and two stripe rails
        // (read rendezvous above a per-node threshold stripe over them).
        "efa-stripe" => Rails {
            profiles: vec![efa(false), efa_stripe(), efa_stripe()],
            shm_pairs: false,
            stripes: 2,
            uneven: false,
            no_read: false,
        },
        _ => return None,
    })
}

/// The fault rates of a named set.
pub(crate) fn fault_set(name: &str) -> Option<Faults> {
    let none = Faults::default();
    Some(match name {
        "none" => none,
        "cqerr" => Faults {
            err_send: 20,
            err_read: 30,
            err_tsend: 30,
            err_trecv: 30,
            err_rx: 20,
            lose_data: 40,
            garble: 20,
            ..none
        },
        "eagain" => Faults {
            post_again: 150,
            ..none
        },
        "posthard" => Faults {
            post_hard: 25,
            ..none
        },
        "reg" => Faults {
            reg_fail: 60,
            ..none
        },
        "slow" => Faults { slow: 80, ..none },
        "dup" => Faults { dup: 100, ..none },
        "death" => Faults {
            death: true,
            ..none
        },
        "mixed" => Faults {
            err_send: 10,
            err_read: 10,
            err_tsend: 10,
            err_trecv: 10,
            err_rx: 10,
            post_again: 50,
            post_hard: 10,
            reg_fail: 20,
            dup: 30,
            lose_data: 20,
            garble: 10,
            slow: 30,
            death: false,
            directed: false,
        },
        _ => return None,
    })
}
