//! Settings libfabric's providers read from the environment when libfabric
//! initialises (before the first `fi_getinfo`), chosen for how the
//! component uses them; a user's own setting always wins.

use crate::config;
use std::ffi::CString;

/// rxm over tcp sized for how the component uses it, unless the user set
/// any of these (read when libfabric initialises, before the first
/// fi_getinfo):
///
/// - `FI_OFI_RXM_BUFFER_SIZE` [`RXM_BUFFER_SIZE`] and
///   `FI_OFI_RXM_EAGER_LIMIT` the component's packet size. rxm allocates
///   its receive and transmit pools 1024 buffers at a time (16 KiB each by
///   default: 35 MB of an idle 53 MB tcp rank), but over tcp it needs them
///   only for its own control messages: tcp asks rxm where each message
///   goes (dynamic receive buffers) and places it straight into the
///   component's posted buffer, and rxm sends from the component's buffer
///   (direct send). Its eager limit decides the protocol: a packet above it
///   takes rxm's rendezvous (a round trip more), so it is the component's
///   packet size (eager limit plus header) and every packet stays eager.
/// - `FI_OFI_RXM_MSG_TX_SIZE` [`RXM_MSG_TX_SIZE`]: the transmit queue of
///   each tcp connection (128 by default). Its entries become resident as
///   a burst uses them, about 100 KB each: a receiver under a flood of
///   small messages (which answers with flow-control credits) grew by
///   13 MB at 128, 3 MB at 16 and 2 MB at 12; 8 slowed that flood's
///   sender by a fifth, 12 changed no bandwidth measurably.
/// - `FI_OFI_RXM_RX_SIZE` and `FI_OFI_RXM_TX_SIZE` [`RXM_QUEUE`] (2048 by
///   default): rxm's receive and transmit queues, whose entries are
///   touched as they are used; the component posts `rx_buffers` (256)
///   receives and keeps its own transmit queue beyond the provider's
///   depth.
/// - `FI_OFI_RXM_USE_SRX` 0 in a job small enough ([`few_connections`]).
///
/// Over verbs rxm does copy through its buffers, and there the eager limit
/// must equal the buffer size; the settings are process-wide (Open MPI's
/// own btl/ofi may open verbs;ofi_rxm in the same process), so nothing is
/// changed on a host with an RDMA device.
pub(super) fn tune_rxm(settings: &config::Settings) {
    const VARS: [&str; 5] = [
        "FI_OFI_RXM_BUFFER_SIZE",
        "FI_OFI_RXM_EAGER_LIMIT",
        "FI_OFI_RXM_MSG_TX_SIZE",
        "FI_OFI_RXM_RX_SIZE",
        "FI_OFI_RXM_TX_SIZE",
    ];
    if VARS.iter().any(|v| std::env::var_os(v).is_some()) {
        return;
    }
    if rdma_device() {
        return;
    }
    let eager = settings
        .eager_limit
        .unwrap_or_else(|| config::default_eager_limit("tcp;ofi_rxm", 0));
    let packet = crate::wire::BASE_LEN + eager.max(crate::wire::EXT_LEN - crate::wire::BASE_LEN);
    set_env("FI_OFI_RXM_BUFFER_SIZE", &RXM_BUFFER_SIZE.to_string());
    set_env(
        "FI_OFI_RXM_EAGER_LIMIT",
        &packet.max(RXM_BUFFER_SIZE).to_string(),
    );
    set_env("FI_OFI_RXM_MSG_TX_SIZE", &RXM_MSG_TX_SIZE.to_string());
    let queue = RXM_QUEUE.max(settings.rx_buffers).to_string();
    set_env("FI_OFI_RXM_RX_SIZE", &queue);
    set_env("FI_OFI_RXM_TX_SIZE", &queue);
    let number = |var| std::env::var(var).ok().and_then(|v| v.trim().parse().ok());
    if let (Some(universe), Some(msg_rx)) =
        (number("FI_UNIVERSE_SIZE"), number("FI_OFI_RXM_MSG_RX_SIZE"))
    {
        if few_connections(universe, msg_rx) {
            set_env("FI_OFI_RXM_USE_SRX", "0");
        }
    }
}

/// Entries libfabric 1.17 allocates (and touches) at a time in rxm's
/// receive buffer pool and in tcp's pools of transfer entries.
const POOL_CHUNK: usize = 1024;

/// Whether rxm does better without tcp's shared receive context with
/// `universe` processes to connect to (`FI_UNIVERSE_SIZE`, which
/// [`tune_universe`] sets to the job's size) and `msg_rx` receive buffers
/// per receive context. With it, tcp keeps the receives rxm posts in a pool of
/// its own, [`POOL_CHUNK`] transfer entries of 448 bytes (459 KB, all
/// touched when rxm posts its first receive), beside the pool its
/// completion queue takes transmit entries from. Without it, rxm posts
/// `msg_rx` receives on each connection, taken from the completion queue's
/// pool and from rxm's buffer pool, whose first chunks exist anyway (both
/// are in use as soon as anything is sent); as long as every connection a
/// rank can have fits those chunks, beside the transmit entries
/// (`RXM_MSG_TX_SIZE` per connection), the shared context is 459 KB that
/// buys nothing: with the 256 receives of the default, up to 4 ranks (3
/// connections per rank; a rank alone has none and posts nothing). The receiver of the `bench/flood` job (2 ranks)
/// peaked 0.43 MB lower without it. More ranks than that, or processes
/// that join later, only cost pool chunks, not correctness. The universe
/// rather than the job decides because it also sizes rxm's completion
/// queue under tcp, which without the shared context holds `msg_rx` entries
/// per possible peer rather than `msg_rx` in all: at libfabric's default
/// universe (1024, when the launcher gave no job size) that queue alone
/// made the flooded receiver 14 MB larger.
fn few_connections(universe: usize, msg_rx: usize) -> bool {
    universe > 0 && (universe - 1) * (msg_rx + RXM_MSG_TX_SIZE) <= POOL_CHUNK
}

/// libfabric's universe size (`FI_UNIVERSE_SIZE`, 1024 by default) set to
/// the job's, unless the user set it. In libfabric 1.17 it sizes two
/// things: the default address vector (over rxm the component sizes its
/// own, see `fabric::AddressVector::open`) and rxm's completion queue under tcp's
/// connections, which holds `FI_OFI_RXM_MSG_RX_SIZE` plus
/// `FI_OFI_RXM_MSG_TX_SIZE` entries per possible peer: 256 + 12 * 1024,
/// rounded up to 16,384 entries of 48 bytes. tcp writes its completions
/// round the ring, so a flood of small messages makes all 768 KiB of it
/// resident (the receiver of `bench/flood` peaked 0.9 MB lower with it at
/// the job's size). The ring stays a hint: a completion queue of libfabric's
/// utility code that is full keeps further entries on an overflow list, so
/// processes that join later (MPI_Comm_spawn) are not refused. Over verbs
/// the completion queue is the device's, and an overflow is an error, so
/// nothing is changed on a host with an RDMA device; nor when the launcher
/// did not say how many ranks the job has.
pub(super) fn tune_universe(settings: &config::Settings) {
    if settings.world_size == 0 || std::env::var_os("FI_UNIVERSE_SIZE").is_some() || rdma_device() {
        return;
    }
    set_env("FI_UNIVERSE_SIZE", &settings.world_size.to_string());
}

/// rxd's window of unacknowledged packets per peer
/// (`FI_OFI_RXD_MAX_UNACKED`, 128 by default) lowered to
/// [`RXD_MAX_UNACKED`] under a libfabric older than 2.4, unless the user
/// set it.
///
/// Before 2.3.1 and 2.4 the udp provider under rxd writes a receive
/// completion into its completion queue without checking for room
/// (fixed upstream in "prov/udp: fix CQ overflow case", 37eb3f551;
/// `fi_version` has no patch level, so 2.3.1 is narrowed too, which costs
/// only throughput). rxd reads that queue one entry at a time, and every
/// entry it handles can send more datagrams (an acknowledgement opens the
/// window), each of which leaves a transmit completion there: with a wide
/// window and a backlog in the socket the queue fills, and the next
/// datagram received takes the slot of the oldest entry, which is lost,
/// and is read twice. rxd then handles a packet twice (a duplicate, or a
/// buffer already reused: another packet's bytes or length), and a lost
/// transmit completion leaves its packet in use for good, shrinking the
/// peer's window until sends to it stop. A narrower window makes the
/// queue fill less often; it is not a bound. At np 2 the threaded stress
/// test on udp with `tagged off` stalled in 4 of 8 runs at 128 and in
/// none of 23 at 32, at the same speed. rxd over another datagram
/// provider (verbs) is narrowed too. Read when libfabric initialises
/// (before the first fi_getinfo of the process; another component that
/// starts libfabric first makes it moot).
pub(super) fn tune_rxd() {
    if std::env::var_os("FI_OFI_RXD_MAX_UNACKED").is_some()
        || !udp_overwrites_completions(crate::fabric::runtime_version())
    {
        return;
    }
    set_env("FI_OFI_RXD_MAX_UNACKED", &RXD_MAX_UNACKED.to_string());
}

/// Whether the udp provider of libfabric `version` overwrites completions
/// when its completion queue is full ([`tune_rxd`]).
fn udp_overwrites_completions(version: u32) -> bool {
    version < crate::fabric::fi_version(2, 4)
}

/// rxd's window per peer where udp overwrites completions ([`tune_rxd`]).
const RXD_MAX_UNACKED: usize = 32;

/// Whether the host has an RDMA device, over which rxm may run on verbs.
fn rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// Size of rxm's bounce buffers ([`tune_rxm`]): room for its control
/// messages, of which the largest, a rendezvous request with four iovs,
/// carries 104 bytes beside rxm's packet header (rxm refuses less). The
/// component never makes rxm use its rendezvous (the eager limit covers
/// every packet), so the buffers carry only injected packets: the size is
/// also rxm's inject size, and a packet above it is sent (with a
/// completion) instead. With coalescing on (the default) the component
/// injects only its own control packets, of 48 to 64 bytes (an RTS naming
/// stripe endpoints grows by 16 bytes per endpoint).
/// rxm allocates its receive and transmit pools 1024 entries at a time and
/// touches every entry: at 128 rather than 256 the two are 262 KB smaller.
const RXM_BUFFER_SIZE: usize = 128;

/// Transmit queue of each tcp connection under rxm ([`tune_rxm`]).
const RXM_MSG_TX_SIZE: usize = 12;

/// rxm's receive and transmit queue depth ([`tune_rxm`]); at least the
/// component's receive buffers.
const RXM_QUEUE: usize = 256;

/// rxm's receive buffers under tcp's connections, unless the user set them
/// ([`rxm_receive_vars`]).
pub(super) fn tune_rxm_receive(settings: &config::Settings) {
    let user_set = |var: &str| std::env::var_os(var).is_some();
    for (var, value) in rxm_receive_vars(settings, rdma_device(), user_set) {
        set_env(var, &value);
    }
}

/// What [`tune_rxm_receive`] sets: none of it on a host with an RDMA
/// device (`rdma`), nor what the user set (`user_set`).
fn rxm_receive_vars(
    settings: &config::Settings,
    rdma: bool,
    user_set: impl Fn(&str) -> bool,
) -> Vec<(&'static str, String)> {
    // Over verbs rxm copies every message through these bounce buffers
    // (posted to the device's shared receive queue), and the settings are
    // process-wide: Open MPI's own btl/ofi may open verbs;ofi_rxm in the
    // same process. So, as in `tune_rxm`, nothing changes on such a host.
    if rdma {
        return Vec::new();
    }
    // rxm posts FI_OFI_RXM_MSG_RX_SIZE bounce buffers into tcp's shared
    // receive context when its endpoint opens: 4096 by default, 64 MiB
    // of touched memory per rank, most of a rank's footprint. The
    // component posts its own receive buffers above rxm, so rxm keeps
    // as many as the component does, and only a handful on a rail that
    // the shm rail relieves of every peer. Read when libfabric
    // initialises (before the first fi_getinfo); a user's setting wins.
    let shm_relieves_net = settings.one_host && settings.shm != config::ShmMode::Off;
    let msg_rx = if shm_relieves_net {
        crate::driver::IDLE_RAIL_RX
    } else {
        settings.rx_buffers
    };
    let mut vars = Vec::new();
    if !user_set("FI_OFI_RXM_MSG_RX_SIZE") {
        vars.push(("FI_OFI_RXM_MSG_RX_SIZE", msg_rx.max(16).to_string()));
    }
    // With a shared receive context rxm also allocates its pools when
    // the endpoint opens (17 MB more); per-connection receive buffers
    // cost nothing on a rail no peer connects to.
    if shm_relieves_net && !user_set("FI_OFI_RXM_USE_SRX") {
        vars.push(("FI_OFI_RXM_USE_SRX", "0".to_string()));
    }
    vars
}

/// Sets an environment variable for libfabric's providers.
pub(super) fn set_env(var: &str, value: &str) {
    let (Ok(k), Ok(v)) = (CString::new(var), CString::new(value)) else {
        return;
    };
    // SAFETY: both strings are NUL-terminated and outlive the call (setenv
    // copies them). setenv is not synchronised with concurrent getenv
    // calls; this runs once during MPI_Init, from the thread initialising
    // MPI, as Open MPI's own components do with opal_setenv.
    unsafe { libc::setenv(k.as_ptr(), v.as_ptr(), 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxd_window_narrowed_only_where_udp_overwrites_completions() {
        use crate::fabric::fi_version;
        assert!(udp_overwrites_completions(fi_version(1, 17)));
        assert!(udp_overwrites_completions(fi_version(2, 3)));
        assert!(!udp_overwrites_completions(fi_version(2, 4)));
        assert!(!udp_overwrites_completions(fi_version(2, 5)));
    }

    #[test]
    fn rxm_receive_buffers_are_left_alone_on_rdma_hosts_and_where_the_user_set_them() {
        let mut settings = config::validate(&config::test_params()).unwrap();
        settings.rx_buffers = 256;
        settings.one_host = false;
        let none = |_: &str| false;
        let names = |v: &[(&str, String)]| v.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>();
        // Several hosts: as many as the component posts.
        assert_eq!(
            rxm_receive_vars(&settings, false, none),
            [("FI_OFI_RXM_MSG_RX_SIZE", "256".to_string())]
        );
        // One host, the shm rail carrying every peer: a handful, no SRX.
        settings.one_host = true;
        settings.shm = config::ShmMode::Auto;
        let v = rxm_receive_vars(&settings, false, none);
        assert_eq!(
            v,
            [
                ("FI_OFI_RXM_MSG_RX_SIZE", "16".to_string()),
                ("FI_OFI_RXM_USE_SRX", "0".to_string())
            ]
        );
        // An RDMA device: rxm may run on verbs in this process, nothing set.
        assert!(rxm_receive_vars(&settings, true, none).is_empty());
        // A user's own setting wins, each on its own.
        let v = rxm_receive_vars(&settings, false, |n| n == "FI_OFI_RXM_MSG_RX_SIZE");
        assert_eq!(names(&v), ["FI_OFI_RXM_USE_SRX"]);
    }

    #[test]
    fn shared_receive_context_off_only_while_connections_fit_the_pools() {
        assert!(!few_connections(0, 256));
        assert!(!few_connections(1024, 256), "libfabric's default universe");
        assert!(few_connections(1, 256));
        assert!(few_connections(2, 256));
        assert!(few_connections(4, 256));
        assert!(!few_connections(5, 256));
        assert!(few_connections(16, 16));
        assert!(!few_connections(64, 16));
    }
}
