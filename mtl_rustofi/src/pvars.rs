//! MPI_T performance variables: the table the shim registers with Open MPI
//! (`mca_base_component_pvar_register`, names `mtl_rustofi_<name>`, bound
//! to no object, unsigned long long, continuous). Adding a variable is one
//! line in [`PVARS`]; the shim loops over the table.
//!
//! The counters live in the core's [`Stats`] (relaxed atomics), so MPI_T
//! reads them from any thread while the job runs; the finalize line
//! (`mtl_rustofi_verbose 1`) prints the same numbers.

use crate::ffi::RustofiPvarClass;
use crate::proto::Stats;
use std::ffi::CStr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// One performance variable.
pub(crate) struct Pvar {
    /// Name after the `mtl_rustofi_` prefix.
    pub(crate) name: &'static CStr,
    pub(crate) desc: &'static CStr,
    pub(crate) class: RustofiPvarClass,
    pub(crate) read: fn(&Stats) -> &AtomicU64,
}

use RustofiPvarClass::{Counter, Highwatermark, Level};

/// Every variable, in registration order.
#[rustfmt::skip]
pub(crate) const PVARS: &[Pvar] = &[
    Pvar { name: c"sent_msgs", desc: c"Messages sent (eager and rendezvous)", class: Counter, read: |s| &s.sent_msgs },
    Pvar { name: c"sent_bytes", desc: c"Payload bytes sent", class: Counter, read: |s| &s.sent_bytes },
    Pvar { name: c"recv_msgs", desc: c"Messages received into a user buffer", class: Counter, read: |s| &s.recv_msgs },
    Pvar { name: c"recv_bytes", desc: c"Payload bytes received into user buffers", class: Counter, read: |s| &s.recv_bytes },
    Pvar { name: c"eager", desc: c"Messages sent by the eager protocol", class: Counter, read: |s| &s.eager },
    Pvar { name: c"rndv", desc: c"Messages sent by the rendezvous protocol", class: Counter, read: |s| &s.rndv },
    Pvar { name: c"unexpected", desc: c"Messages that arrived before their receive was posted", class: Counter, read: |s| &s.unexpected },
    Pvar { name: c"unexpected_now", desc: c"Messages in the unexpected queue now", class: Level, read: |s| &s.unexpected_now.now },
    Pvar { name: c"unexpected_peak", desc: c"Most messages ever in the unexpected queue", class: Highwatermark, read: |s| &s.unexpected_now.peak },
    Pvar { name: c"unexpected_bytes_now", desc: c"Payload bytes of the messages in the unexpected queue now (a rendezvous counts its announced length)", class: Level, read: |s| &s.unexpected_bytes_now.now },
    Pvar { name: c"unexpected_bytes_peak", desc: c"Most payload bytes ever in the unexpected queue", class: Highwatermark, read: |s| &s.unexpected_bytes_now.peak },
    Pvar { name: c"posted_now", desc: c"Receives in the posted queue now", class: Level, read: |s| &s.posted_now.now },
    Pvar { name: c"posted_peak", desc: c"Most receives ever in the posted queue", class: Highwatermark, read: |s| &s.posted_now.peak },
    Pvar { name: c"errors", desc: c"Errors observed (failed operations, rejected packets, peers given up)", class: Counter, read: |s| &s.errors },
    Pvar { name: c"rndv_repairs", desc: c"Repairs of a stalled message rendezvous (a control or data packet lost whole)", class: Counter, read: |s| &s.rndv_repairs },
    Pvar { name: c"rx_lost", desc: c"Packets the provider lost on receive (rendezvous data among them is sent again)", class: Counter, read: |s| &s.rx_lost },
    Pvar { name: c"held_sends", desc: c"Copied eager sends held incomplete because their packet waited in the component's queue (a full queue, a refusal while a connection is set up), counted each time it was queued", class: Counter, read: |s| &s.held_sends },
    Pvar { name: c"reads_declined", desc: c"Read rendezvous this rank answered as message rendezvous because it cannot read the sender's memory (cross-memory attach not permitted here, or not reaching that process)", class: Counter, read: |s| &s.reads_declined },
    Pvar { name: c"coalesced", desc: c"Eager messages that shared a packet with an earlier one", class: Counter, read: |s| &s.coalesced },
    Pvar { name: c"mr_reg", desc: c"Registrations of user buffers made for rendezvous transfers", class: Counter, read: |s| &s.mr_reg },
    Pvar { name: c"mr_hits", desc: c"Rendezvous transfers served a cached registration", class: Counter, read: |s| &s.mr_hits },
    Pvar { name: c"net_tx_bytes", desc: c"Bytes the network provider's rail sent (packets with their headers, rendezvous data)", class: Counter, read: |s| &s.net_tx_bytes },
    Pvar { name: c"net_rx_bytes", desc: c"Bytes the network provider's rail received (packets that arrived, rendezvous data read or received)", class: Counter, read: |s| &s.net_rx_bytes },
    Pvar { name: c"shm_tx_bytes", desc: c"Bytes the shm rail sent (packets with their headers, rendezvous data)", class: Counter, read: |s| &s.shm_tx_bytes },
    Pvar { name: c"shm_rx_bytes", desc: c"Bytes the shm rail received (packets that arrived, rendezvous data read or received)", class: Counter, read: |s| &s.shm_rx_bytes },
    Pvar { name: c"striped", desc: c"Read rendezvous this rank sent striped over several NICs", class: Counter, read: |s| &s.striped },
    Pvar { name: c"stripe_rx_bytes", desc: c"Bytes this rank read through its stripe endpoints (NICs besides its own)", class: Counter, read: |s| &s.stripe_bytes },
    Pvar { name: c"net_peers", desc: c"Peers (this rank included) reached through the network provider", class: Level, read: |s| &s.net_peers },
    Pvar { name: c"shm_peers", desc: c"Peers (this rank included) reached through the shm rail", class: Level, read: |s| &s.shm_peers },
];

/// The counters of the running (or last finalized) engine. A variable read
/// before MPI_Init opened the engine reads 0.
static CURRENT: Mutex<Option<Arc<Stats>>> = Mutex::new(None);

/// Makes `stats` the set MPI_T reads.
pub(crate) fn publish(stats: Arc<Stats>) {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(stats);
}

/// Value of variable `index`, or `None` for an index out of range.
pub(crate) fn read(index: usize) -> Option<u64> {
    let pvar = PVARS.get(index)?;
    let current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    Some(current.as_deref().map_or(0, |s| Stats::get((pvar.read)(s))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_lowercase() {
        let mut names: Vec<&str> = PVARS.iter().map(|p| p.name.to_str().unwrap()).collect();
        assert!(names
            .iter()
            .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
        names.sort_unstable();
        let len = names.len();
        names.dedup();
        assert_eq!(names.len(), len, "duplicate pvar name");
    }

    #[test]
    fn reads_follow_the_published_stats() {
        let s = Arc::new(Stats::default());
        Stats::add(&s.sent_msgs, 3);
        s.posted_now.up(5);
        s.posted_now.down(2);
        publish(s);
        let at = |n: &str| PVARS.iter().position(|p| p.name.to_str() == Ok(n)).unwrap();
        assert_eq!(read(at("sent_msgs")), Some(3));
        assert_eq!(read(at("posted_now")), Some(3));
        assert_eq!(read(at("posted_peak")), Some(5));
        assert_eq!(read(PVARS.len()), None);
    }
}
