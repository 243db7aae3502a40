//! Gathers the facts [`crate::nic::choose`] decides on: the chosen
//! provider's domains, their PCI locality and this process's CPUs.
//!
//! Locality comes from sysfs, the same source hwloc reads for Open MPI's
//! topology: a domain's PCI address (libfabric's `nic->bus_attr`, or for a
//! network interface the device its `/sys/class/net` entry points to)
//! leads to `/sys/bus/pci/devices/ADDR/local_cpulist`, the CPUs attached to
//! the device's host bridge; the process's own CPUs are its affinity mask,
//! which Open MPI's binding sets. A domain without a PCI device (a veth, a
//! bridge) has no locality, so all domains count as equally near.

use crate::fabric::{Info, InfoList};
use crate::nic::{self, Nic};
use std::path::Path;

/// One NIC of the chosen provider: its facts and the index of its first
/// entry in the fi_info list (the entry that is opened).
struct NicEntry {
    nic: Nic,
    index: usize,
}

/// The NIC this rank opens and why (for the verbose startup line).
pub(crate) struct NicPick {
    /// Its entry in the fi_info list.
    pub index: usize,
    pub local_rank: usize,
    /// Its distance ([`nic::distance`]), `None` if unknown.
    pub distance: Option<u32>,
    /// The names of all equally near NICs.
    pub near: Vec<String>,
    /// The NICs a striped rendezvous also uses: equally near ones other
    /// than the rank's own, in the near set's order, at most `stripe - 1`;
    /// each as its name and the index of its entry in the fi_info list.
    pub stripes: Vec<(String, usize)>,
}

/// Chooses this rank's NIC among the domains of `provider` in `list`
/// ([`nic::choose`]); `wanted` is `mtl_rustofi_nic`, split; `stripe` is
/// `mtl_rustofi_stripe` (`None`: every near NIC).
pub(crate) fn pick_nic(
    list: &InfoList,
    provider: &str,
    wanted: &[String],
    stripe: Option<usize>,
) -> Result<NicPick, String> {
    let nics = provider_nics(list, provider);
    let facts: Vec<Nic> = nics.iter().map(|e| e.nic.clone()).collect();
    let local_rank = local_rank();
    let c = nic::choose(&facts, wanted, local_rank)?;
    Ok(NicPick {
        index: nics[c.chosen].index,
        local_rank,
        distance: nics[c.chosen].nic.distance,
        near: c.near.iter().map(|&i| facts[i].name.clone()).collect(),
        stripes: nic::stripe_nics(&c, stripe)
            .into_iter()
            .map(|i| (facts[i].name.clone(), nics[i].index))
            .collect(),
    })
}

/// The chosen provider's domains, one per domain name in libfabric's
/// order (tcp lists an interface once per address family: the first entry
/// is kept).
fn provider_nics(list: &InfoList, provider: &str) -> Vec<NicEntry> {
    let my_cpus = my_cpus();
    let mut out: Vec<NicEntry> = Vec::new();
    for (index, info) in list.iter().enumerate() {
        if info.provider() != provider {
            continue;
        }
        let name = info.domain_name();
        if out.iter().any(|e| e.nic.name == name) {
            continue;
        }
        let pci = pci_addr(&info, &name);
        let nic_cpus = pci
            .as_ref()
            .and_then(|a| read_cpulist(&format!("/sys/bus/pci/devices/{a}/local_cpulist")))
            .unwrap_or_default();
        out.push(NicEntry {
            nic: Nic {
                loopback: is_loopback(&name),
                distance: nic::distance(&my_cpus, &nic_cpus),
                physical: pci.is_some(),
                name,
            },
            index,
        });
    }
    out
}

/// Open MPI's local rank of this process (0 when not launched by mpirun).
pub(crate) fn local_rank() -> usize {
    std::env::var("OMPI_COMM_WORLD_LOCAL_RANK")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The PCI address (`DDDD:BB:DD.F`) of a domain: from libfabric when the
/// provider reports it, else from the network interface of that name.
fn pci_addr(info: &Info<'_>, domain: &str) -> Option<String> {
    if let Some((dom, bus, dev, func)) = info.pci_bus() {
        return Some(format!("{dom:04x}:{bus:02x}:{dev:02x}.{func:x}"));
    }
    if domain.is_empty() || domain.contains('/') {
        return None;
    }
    // The interface's device may sit below its PCI function (virtio-net:
    // .../0000:00:03.0/virtio2), so the nearest PCI ancestor counts.
    let dev =
        std::fs::canonicalize(Path::new("/sys/class/net").join(domain).join("device")).ok()?;
    nic::pci_addr_in_path(&dev.to_string_lossy())
}

fn read_cpulist(path: &str) -> Option<Vec<usize>> {
    nic::parse_cpulist(&std::fs::read_to_string(path).ok()?)
}

/// A loopback network interface (IFF_LOOPBACK in its sysfs flags).
fn is_loopback(domain: &str) -> bool {
    const IFF_LOOPBACK: u64 = 0x8;
    if domain == "lo" {
        return true;
    }
    if domain.is_empty() || domain.contains('/') {
        return false;
    }
    std::fs::read_to_string(Path::new("/sys/class/net").join(domain).join("flags"))
        .ok()
        .and_then(|f| u64::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok())
        .is_some_and(|f| f & IFF_LOOPBACK != 0)
}

/// The CPUs this process may run on (empty if unknown).
fn my_cpus() -> Vec<usize> {
    // Linux reports it per process in /proc; this avoids a libc call.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(nic::parse_cpulist)
        })
        .unwrap_or_default()
}
