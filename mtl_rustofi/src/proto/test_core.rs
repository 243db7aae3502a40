//! A core over one network rail without striping, coalescing or faults,
//! for the core's own unit tests.

use super::action::Out;
use super::eager::SendArgs;
use super::ids::{FiAddr, PeerId, RailId, ReqId};
use super::{Core, CoreConfig, RailProfile, Stats};
use crate::config::Fault;
use crate::usermem::UserBuf;
use crate::wire::RailKind;
use std::sync::Arc;

/// A core whose one rail is a libfabric network rail of `provider` with a
/// message rendezvous and an 8 KiB eager limit, and a peer for each of
/// `names`, in order (peer `i` has index `i`).
pub(super) fn net_core(provider: &str, names: &[u64]) -> (Core, Vec<PeerId>) {
    let profile = RailProfile {
        kind: RailKind::Net,
        provider: provider.into(),
        mr_local: false,
        mr_virt_addr: true,
        mr_prov_key: false,
        buf_size: 8192 + 64,
        eager_limit: 8192,
        zero_copy: false,
        rndv_read: false,
        tagged: false,
        rndv_msg: true,
        chunk: 1 << 20,
        inject_size: 0,
        inline: false,
        rx_kept: false,
        tx_depth: 64,
        rx_count: 4,
    };
    let cfg = CoreConfig {
        my_name: 1,
        coalesce: false,
        fault: Fault::None,
        stripe_min: 0,
        send_queue_limit: 1 << 22,
        send_queue_total: 1 << 25,
    };
    let mut c = Core::new(cfg, vec![profile], Arc::new(Stats::default()));
    let peers = names
        .iter()
        .map(|&name| c.add_peer(name, RailId(0), FiAddr(0), 8192))
        .collect();
    (c, peers)
}

/// Sends `data` to `peer` as request `req` (its tag too), not
/// synchronous; the output goes to `out`.
pub(super) fn send(c: &mut Core, peer: PeerId, data: &mut [u8], req: usize, out: &mut Out) {
    // SAFETY: every caller keeps `data` alive until the core is dropped.
    let buf = unsafe { UserBuf::new(data.as_mut_ptr(), data.len()) };
    let args = SendArgs {
        peer,
        ctx: 0,
        src: 0,
        tag: req as i32,
        buf,
        sync: false,
        req: ReqId(req),
    };
    c.send(args, out).unwrap().into_out(out);
}
