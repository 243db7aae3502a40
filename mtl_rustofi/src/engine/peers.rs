//! Adding a peer: which rail reaches it (the own shared-memory rail, the
//! shm provider's or the network's), and its stripe endpoints.

use super::{EngineError, State};
use crate::proto::ids::{PeerId, RailId};
use crate::wire::{self, RailKind};

pub(super) fn add_peer(
    st: &mut State,
    name: u64,
    modex: &[u8],
    local: bool,
) -> Result<usize, EngineError> {
    if let Some(p) = st.core.peer_by_name(name) {
        return Ok(p.handle());
    }
    let info = wire::PeerInfo::decode(modex).map_err(EngineError)?;
    // Both sides apply the same rule to the same facts (locality is
    // symmetric, each publishes a shm address only if it opened a shm
    // rail), so a pair always talks over the same rail both ways.
    // Whether the peer is a rank of this job on this host with the own
    // rail, but in another segment (a /dev/shm of its own).
    let mut elsewhere = false;
    if local {
        if let Some(rail) = st.driver.rail_of_kind(RailKind::Local) {
            if let Some(remote) = info.rail(RailKind::Local) {
                let l = st.driver.local_mut().expect("the local rail is open");
                if let Some(addr) = l.insert_if_reachable(&remote.addr, name) {
                    let addr = addr?;
                    let readable = l.reads_from(addr);
                    let p = st
                        .core
                        .add_peer(name, rail, addr, remote.max_eager as usize);
                    if !readable {
                        st.core.set_peer_unreadable(p);
                    }
                    if info.pid_is_ours(crate::driver::shm::cma::own_pid_ns()) {
                        st.core.set_peer_pid(p, info.pid);
                    }
                    return Ok(p.handle());
                }
                elsewhere = l.in_other_segment(&remote.addr);
            }
        }
    }
    let shm = st.driver.rail_of_kind(RailKind::Shm);
    let (rail, remote) = match (local, shm, info.rail(RailKind::Shm)) {
        (true, Some(r), Some(a)) => (r, a),
        _ => match (
            st.driver.rail_of_kind(RailKind::Net),
            info.rail(RailKind::Net),
        ) {
            (Some(r), Some(a)) => (r, a),
            (None, _) if elsewhere => return Err(EngineError(OTHER_SEGMENT.into())),
            (None, _) => return Err(EngineError(NO_NET_RAIL.into())),
            (Some(_), None) => {
                return Err(EngineError(
                    "the peer opened no network rail (its job runs on one host \
                     with no provider named): name one with mtl_rustofi_provider_include \
                     in both jobs"
                        .into(),
                ))
            }
        },
    };
    let addr = st.driver.insert_peer(rail, remote)?;
    let p = st
        .core
        .add_peer(name, rail, addr, remote.max_eager as usize);
    if local && info.pid_is_ours(crate::driver::shm::cma::own_pid_ns()) {
        st.core.set_peer_pid(p, info.pid);
    }
    if st.driver.rail_of_kind(RailKind::Net) == Some(rail) {
        add_stripes(st, p, &info)?;
    }
    Ok(p.handle())
}

/// Why a same-host peer in another shared-memory segment cannot be
/// reached.
const OTHER_SEGMENT: &str = "a rank on this host (by Open MPI's account: the same host \
     name) is in another shared-memory segment of this job, which this process cannot \
     see (its /dev/shm is another: a container of its own, without the host's IPC \
     namespace; or part of the job opened a leftover of an earlier job with the same id, \
     which a new start does not meet), and this process opened no network rail to reach \
     it otherwise: share /dev/shm between the ranks (docker run --ipc=host) or name a \
     provider with mtl_rustofi_provider_include (e.g. tcp)";

/// Why a peer beyond this job's host cannot be reached.
const NO_NET_RAIL: &str = "this process opened no network rail (every rank of its job \
     runs on one host, served by the shared-memory rail, and no provider was named), so \
     it cannot reach a process of another job or host: name a provider with \
     mtl_rustofi_provider_include (e.g. tcp) to open one";

/// Pairs a network peer's stripe endpoints with ours: the NICs both
/// ranks have stripe endpoints on (neither side's own NIC), in name order,
/// so that both sides list the same pairs in the same order (a striped
/// RTS names the sender's buffer on each pair's endpoint by position).
fn add_stripes(st: &mut State, peer: PeerId, info: &wire::PeerInfo) -> Result<(), EngineError> {
    let mut pairs: Vec<(RailId, String, &wire::RailAddr)> = st
        .driver
        .stripe_rails()
        .into_iter()
        .filter_map(|(rail, nic)| {
            info.rails
                .iter()
                .find(|r| r.kind == RailKind::Stripe && r.nic == nic)
                .map(|r| (rail, nic.to_string(), r))
        })
        .collect();
    pairs.sort_by(|a, b| a.1.cmp(&b.1));
    tracing::debug!(
        peer = peer.0,
        pairs = pairs.len(),
        "stripe endpoints paired"
    );
    for (index, (rail, _, remote)) in pairs.into_iter().enumerate() {
        let addr = st.driver.insert_peer(rail, remote)?;
        st.core.add_stripe(peer, index, rail, addr);
    }
    Ok(())
}
