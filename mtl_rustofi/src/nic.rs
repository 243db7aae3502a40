//! NIC choice: which of the chosen provider's domains (NICs) this rank
//! uses. Pure logic over facts gathered by [`crate::topo`], unit-tested
//! without libfabric or MPI.
//!
//! A provider may list several domains: EFA one per NIC (4 on p4d, 32 on
//! p5), tcp one per network interface. Every rank of a host would
//! otherwise open the first one, so one NIC would carry all of the host's
//! traffic (and, on EFA, hold all of its queue pairs). Each rank instead
//! takes the NICs nearest to the CPUs it may run on and, among equally
//! near ones, spreads by its local rank.

use crate::config::name_matches;

/// One domain of the chosen provider, as the topology reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Nic {
    /// The libfabric domain name (EFA: `rdmap16s27-rdm`; tcp: the
    /// interface name).
    pub name: String,
    /// The loopback interface (tcp's `lo` domain): not a NIC when real
    /// ones exist.
    pub loopback: bool,
    /// How far the NIC is from this process's CPUs ([`distance`]), or
    /// `None` when unknown (a virtual interface has no PCI device).
    pub distance: Option<u32>,
    /// It sits on a PCI device (a virtual interface such as a container
    /// bridge, a tunnel or a veth does not).
    pub physical: bool,
}

/// The outcome: the NIC this rank uses and every NIC as near as it (the
/// NICs a transfer could be spread over), as indexes into the candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Choice {
    pub chosen: usize,
    pub near: Vec<usize>,
}

/// Distance of a NIC whose PCI device is attached to `nic_cpus` from a
/// process allowed to run on `my_cpus` (both CPU sets as sorted lists):
/// 0 when every CPU of the process is local to the NIC, 1 when some are,
/// 2 when none are; `None` when either set is unknown (empty). A process
/// that is not bound (all CPUs) gets 0 from every NIC whose locality
/// covers the machine, so such NICs stay equal.
pub(crate) fn distance(my_cpus: &[usize], nic_cpus: &[usize]) -> Option<u32> {
    let local = |c: &usize| nic_cpus.binary_search(c).is_ok();
    if my_cpus.is_empty() || nic_cpus.is_empty() {
        return None;
    }
    Some(if my_cpus.iter().all(local) {
        0
    } else if my_cpus.iter().any(local) {
        1
    } else {
        2
    })
}

/// Parses a Linux CPU list (`0-3,8,10-11`, as in sysfs `local_cpulist`)
/// into a sorted list; `None` if the text is not a CPU list.
pub(crate) fn parse_cpulist(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let c: usize = part.trim().parse().ok()?;
                (c, c)
            }
        };
        if hi < lo || hi - lo > 1 << 16 {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// The innermost PCI address (`DDDD:BB:DD.F`) among the components of a
/// sysfs device path, if any (a device without one, such as a veth, has
/// no PCI locality).
pub(crate) fn pci_addr_in_path(path: &str) -> Option<String> {
    let is_pci = |c: &str| {
        let b = c.as_bytes();
        b.len() == 12
            && b[4] == b':'
            && b[7] == b':'
            && b[10] == b'.'
            && c.chars()
                .enumerate()
                .all(|(i, ch)| matches!(i, 4 | 7 | 10) || ch.is_ascii_hexdigit())
    };
    path.rsplit('/').find(|c| is_pci(c)).map(str::to_string)
}

/// Picks this rank's NIC among `nics` (the chosen provider's domains, in
/// libfabric's order). `wanted` is `mtl_rustofi_nic` split into items
/// (empty: any); `local_rank` is Open MPI's local rank of the process.
///
/// - Named NICs: each item must name a domain (matched as provider names
///   are, case-insensitively); the pool is the named NICs, in the order
///   named. A loopback domain may be named.
/// - Otherwise the pool is every NIC but loopback (loopback alone if it is
///   all there is), in name order; where some of them sit on a PCI device,
///   only those (a container bridge such as `docker0` carries the same
///   address on every host and must never be chosen by default).
/// - Within the pool, the nearest NICs by [`distance`] form the near set
///   when every distance is known; if any is unknown, all are equally
///   near. The rank takes the near set's entry at `local_rank` modulo its
///   size.
pub(crate) fn choose(nics: &[Nic], wanted: &[String], local_rank: usize) -> Result<Choice, String> {
    if nics.is_empty() {
        return Err("the provider lists no domain (NIC)".into());
    }
    let pool: Vec<usize> = if wanted.is_empty() {
        let mut real: Vec<usize> = (0..nics.len()).filter(|&i| !nics[i].loopback).collect();
        if real.is_empty() {
            real = (0..nics.len()).collect();
        }
        if real.iter().any(|&i| nics[i].physical) {
            real.retain(|&i| nics[i].physical);
        }
        // By name: libfabric lists interfaces in the kernel's order, which
        // may differ between hosts; names give every host the same order.
        real.sort_by(|&a, &b| nics[a].name.cmp(&nics[b].name));
        real
    } else {
        let mut pool = Vec::new();
        for item in wanted {
            let hits: Vec<usize> = (0..nics.len())
                .filter(|&i| name_matches(item, &nics[i].name))
                .collect();
            if hits.is_empty() {
                return Err(format!(
                    "mtl_rustofi_nic names '{item}', which is not a NIC of this provider here \
                     (NICs: {})",
                    names(nics)
                ));
            }
            for i in hits {
                if !pool.contains(&i) {
                    pool.push(i);
                }
            }
        }
        pool
    };
    let near: Vec<usize> = match pool
        .iter()
        .map(|&i| nics[i].distance)
        .collect::<Option<Vec<u32>>>()
    {
        Some(d) => {
            let best = d.iter().copied().min().unwrap_or(0);
            pool.iter()
                .zip(d)
                .filter(|(_, d)| *d == best)
                .map(|(&i, _)| i)
                .collect()
        }
        None => pool,
    };
    Ok(Choice {
        chosen: near[local_rank % near.len()],
        near,
    })
}

/// The NICs a striped rendezvous uses besides the chosen one: the rest of
/// the near set in its order, at most `stripe - 1` of them (`None`: all)
/// and never more than a striped RTS can name.
pub(crate) fn stripe_nics(c: &Choice, stripe: Option<usize>) -> Vec<usize> {
    let most = stripe
        .unwrap_or(usize::MAX)
        .saturating_sub(1)
        .min(crate::wire::MAX_STRIPES);
    c.near
        .iter()
        .copied()
        .filter(|&i| i != c.chosen)
        .take(most)
        .collect()
}

/// The NICs' names in name order, comma-separated, for messages.
pub(crate) fn names(nics: &[Nic]) -> String {
    let mut v: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
    v.sort_unstable();
    v.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(name: &str, distance: Option<u32>) -> Nic {
        Nic {
            name: name.into(),
            loopback: name == "lo",
            distance,
            physical: distance.is_some(),
        }
    }

    /// A virtual interface (no PCI device) beside a real NIC is not chosen
    /// by default, whatever its name's order; named, it may be.
    #[test]
    fn virtual_interfaces_are_left_out_beside_real_nics() {
        let mut docker = nic("docker0", None);
        docker.physical = false;
        let mut eth = nic("eth0", None);
        eth.physical = true;
        let nics = vec![docker, eth, nic("lo", None)];
        for r in 0..4 {
            let c = choose(&nics, &[], r).expect("a choice");
            assert_eq!(nics[c.chosen].name, "eth0", "local rank {r}");
            assert_eq!(c.near.len(), 1);
        }
        let c = choose(&nics, &list("docker0"), 0).expect("named");
        assert_eq!(nics[c.chosen].name, "docker0");
        // Only virtual interfaces (veths in namespaces): all of them.
        let veths = vec![nic("eth0", None), nic("eth1", None)];
        let picks: Vec<_> = (0..2)
            .map(|r| veths[choose(&veths, &[], r).unwrap().chosen].name.clone())
            .collect();
        assert_eq!(picks, ["eth0", "eth1"]);
    }

    fn list(s: &str) -> Vec<String> {
        crate::config::split_list(Some(s))
    }

    #[test]
    fn cpulists_parse() {
        assert_eq!(parse_cpulist("0-3,8\n"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        assert_eq!(parse_cpulist("2,0-1"), Some(vec![0, 1, 2]));
        assert_eq!(parse_cpulist(""), Some(vec![]));
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(parse_cpulist("3-1"), None);
    }

    #[test]
    fn pci_addresses_from_sysfs_paths() {
        assert_eq!(
            pci_addr_in_path("/sys/devices/pci0000:00/0000:00:03.0/virtio2").as_deref(),
            Some("0000:00:03.0")
        );
        assert_eq!(
            pci_addr_in_path("/sys/devices/pci0000:10/0000:10:01.0/0000:16:00.1").as_deref(),
            Some("0000:16:00.1")
        );
        assert_eq!(pci_addr_in_path("/sys/devices/virtual/net/veth0"), None);
        assert_eq!(pci_addr_in_path(""), None);
    }

    #[test]
    fn distances() {
        assert_eq!(distance(&[0, 1], &[0, 1, 2, 3]), Some(0));
        assert_eq!(distance(&[3, 4], &[0, 1, 2, 3]), Some(1));
        assert_eq!(distance(&[4, 5], &[0, 1, 2, 3]), Some(2));
        assert_eq!(distance(&[4, 5], &[]), None);
        // Not bound: every CPU. A NIC local to all of them is as near as
        // another such NIC.
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(distance(&all, &all), Some(0));
    }

    #[test]
    fn unknown_locality_spreads_by_local_rank_and_skips_loopback() {
        // tcp in a namespace host: veths have no PCI device.
        let nics = [nic("eth1", None), nic("lo", None), nic("eth0", None)];
        for r in 0..6 {
            let c = choose(&nics, &[], r).unwrap();
            assert_eq!(c.near, vec![2, 0], "name order");
            assert_eq!(c.chosen, [2, 0][r % 2], "local rank {r}");
        }
    }

    #[test]
    fn loopback_alone_is_used() {
        let nics = [nic("lo", None)];
        assert_eq!(choose(&nics, &[], 3).unwrap().chosen, 0);
    }

    #[test]
    fn stripes_are_the_other_near_nics_up_to_the_limit() {
        let nics = [
            nic("rdmap0", Some(2)),
            nic("rdmap1", Some(0)),
            nic("rdmap2", Some(0)),
            nic("rdmap3", Some(0)),
        ];
        let c = choose(&nics, &[], 1).unwrap();
        assert_eq!(c.chosen, 2);
        assert_eq!(stripe_nics(&c, None), vec![1, 3]);
        assert_eq!(stripe_nics(&c, Some(2)), vec![1]);
        assert_eq!(stripe_nics(&c, Some(1)), Vec::<usize>::new());
        // A lone NIC has nothing to stripe over.
        let one = choose(&nics[..1], &[], 0).unwrap();
        assert!(stripe_nics(&one, None).is_empty());
        // Never more than an RTS can name.
        let many: Vec<Nic> = (0..12).map(|i| nic(&format!("n{i:02}"), None)).collect();
        let c = choose(&many, &[], 0).unwrap();
        assert_eq!(stripe_nics(&c, None).len(), crate::wire::MAX_STRIPES);
    }

    #[test]
    fn nearest_nics_win_then_local_rank() {
        // Two sockets with two NICs each (p4d-like), process bound to
        // socket 1: only NICs 2 and 3 are candidates.
        let nics = [
            nic("rdmap0", Some(2)),
            nic("rdmap1", Some(2)),
            nic("rdmap2", Some(0)),
            nic("rdmap3", Some(0)),
        ];
        assert_eq!(choose(&nics, &[], 0).unwrap().chosen, 2);
        assert_eq!(choose(&nics, &[], 1).unwrap().chosen, 3);
        assert_eq!(choose(&nics, &[], 2).unwrap().chosen, 2);
        assert_eq!(choose(&nics, &[], 0).unwrap().near, vec![2, 3]);
        // One unknown distance (a PCI device whose locality is not
        // reported): all equally near.
        let mut b = nic("b", None);
        b.physical = true;
        let mixed = [nic("a", Some(0)), b];
        assert_eq!(choose(&mixed, &[], 1).unwrap().chosen, 1);
    }

    #[test]
    fn named_nics_in_named_order() {
        let nics = [nic("eth0", None), nic("eth1", None), nic("lo", None)];
        let c = choose(&nics, &list("ETH1"), 0).unwrap();
        assert_eq!((c.chosen, c.near.clone()), (1, vec![1]));
        assert_eq!(choose(&nics, &list("ETH1"), 5).unwrap().chosen, 1);
        let c = choose(&nics, &list("eth1, eth0"), 0).unwrap();
        assert_eq!(c.near, vec![1, 0]);
        assert_eq!(choose(&nics, &list("eth1,eth0"), 1).unwrap().chosen, 0);
        // Loopback may be named explicitly.
        assert_eq!(choose(&nics, &list("lo"), 1).unwrap().chosen, 2);
        // Named NICs still respect locality when it is known.
        let known = [nic("a", Some(1)), nic("b", Some(0))];
        assert_eq!(choose(&known, &list("a,b"), 0).unwrap().chosen, 1);
    }

    #[test]
    fn unknown_name_is_one_clear_error() {
        let nics = [nic("lo", None), nic("eth0", None)];
        let e = choose(&nics, &list("eth0,mlx5_0"), 0).unwrap_err();
        assert!(
            e.contains("mtl_rustofi_nic") && e.contains("mlx5_0") && e.contains("eth0, lo"),
            "{e}"
        );
        assert!(choose(&[], &[], 0).is_err());
    }
}
