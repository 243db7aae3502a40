//! Configuration: validation of the MCA parameters and provider selection.
//! Pure logic, unit-tested without libfabric or MPI.

/// How a rendezvous moves the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RndvProtocol {
    /// RMA read where the provider offers FI_RMA, else send.
    Auto,
    /// Receiver reads the sender's buffer with fi_read.
    Read,
    /// Receiver grants a tag, sender sends the data with fi_tsend.
    Send,
    /// Receiver grants, sender sends data packets into its bounce buffers
    /// (plain FI_MSG; what a rail with neither FI_RMA nor FI_TAGGED uses).
    Msg,
}

/// How same-host peers are reached (MCA `shm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShmMode {
    /// Our own shared-memory rail (`driver/shm`) under every network
    /// provider; if it cannot be opened, libfabric's shm provider where
    /// [`shm_wanted`] would open it, else the network provider.
    Auto,
    /// Our own rail, required: the component declines without it.
    On,
    /// libfabric's shm provider as a second rail (where [`shm_wanted`]
    /// says so), required once asked for.
    Libfabric,
    Off,
}

/// A fault the test suite can inject (MCA `fault_inject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    None,
    /// Corrupt the RMA key of the next read rendezvous: the provider reports
    /// a completion-queue error on the read.
    RmaKey,
    /// Emit one malformed packet ahead of the next eager send.
    BadPacket,
    /// Take every fourth arriving data packet of a message rendezvous as
    /// one the provider lost (a receive error with only the header
    /// placed), so that its resend runs over a real provider.
    LoseData,
    /// Take every fourth arriving grant, request or FIN of a message
    /// rendezvous and every 1000th data packet as lost whole (refused, as
    /// a packet the provider garbled), so that the repair runs over a
    /// real provider.
    LoseWhole,
    /// Open MPI 5: rank 0 of the job drives progress for 3 s before it
    /// registers a communicator that needs the index exchange, so that its
    /// peers' index messages arrive before the communicator and wait for
    /// it (the shim's `rustofi_add_comm`; the engine does nothing with it).
    LateComm,
    /// Open MPI 5: rank 0's first index message is not sent; it is held
    /// until the peer's own index has arrived and then reported failed, so
    /// that the failure finds the two crossed and the index must be sent
    /// again (the shim's `excid_send`; the engine does nothing with it).
    ExcidLost,
}

/// Validated settings.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// NICs (domains) of the provider this rank may use (empty: any; see
    /// [`crate::nic::choose`]).
    pub nic: Vec<String>,
    /// Largest eager payload; `None` picks it per provider
    /// ([`default_eager_limit`]).
    pub eager_limit: Option<usize>,
    pub rndv: RndvProtocol,
    /// Ask for and use FI_TAGGED (MCA `tagged`: `auto` or `off`).
    pub tagged: bool,
    pub chunk: usize,
    pub rx_buffers: usize,
    pub verbose: i32,
    pub fault: Fault,
    pub shm: ShmMode,
    /// Coalesce back-to-back small eager sends to a peer into one packet
    /// while an earlier packet to it is in flight.
    pub coalesce: bool,
    /// Most unused registrations of user buffers kept for reuse (0: none).
    pub mr_cache: usize,
    /// Most bytes those may cover (`None`: chosen from the host's memory,
    /// [`default_mr_cache_bytes`]).
    pub mr_cache_bytes: Option<usize>,
    /// Most NICs a large read rendezvous spreads over, the rank's own
    /// included (`None`: every NIC as near as its own; 1: no striping).
    pub stripe: Option<usize>,
    /// Read rendezvous of at least this many bytes stripe.
    pub stripe_min: usize,
    /// Bytes the core may hold for one peer's sends that the provider has
    /// not completed (bounce buffers and their bookkeeping); sends beyond
    /// it wait ([`crate::proto`]'s flow control).
    pub send_queue_limit: usize,
    /// The same over all peers of the process.
    pub send_queue_total: usize,
    /// Operations waiting on a peer that died fail within this time
    /// (`None`: peers are never probed).
    pub peer_timeout: Option<std::time::Duration>,
    /// The user named this component (`--mca mtl rustofi`) or set its
    /// provider list: software providers may then be used.
    pub explicit: bool,
    /// Every rank of MPI_COMM_WORLD runs on this host (from the launcher's
    /// environment): with the shm rail open, the network rail carries no
    /// traffic among them.
    pub one_host: bool,
    /// Ranks in MPI_COMM_WORLD (from the launcher's environment; 0 when
    /// unknown): sizes libfabric's per-peer tables for the job.
    pub world_size: usize,
}

/// Providers that only emulate a fabric in software. mtl/ofi excludes them
/// by default; so do we, unless the user asked for this component.
pub(crate) const SOFTWARE_PROVIDERS: &[&str] = &["shm", "sockets", "tcp", "udp", "rstream", "net"];

/// Raw parameter values as Open MPI hands them over.
#[derive(Clone, Debug, Default)]
pub(crate) struct RawParams<'a> {
    pub include: Option<&'a str>,
    /// The include parameter was set by the user (even to an empty string).
    pub include_set: bool,
    pub exclude: Option<&'a str>,
    pub exclude_set: bool,
    pub nic: Option<&'a str>,
    pub eager_limit: i64,
    pub rndv_protocol: Option<&'a str>,
    pub tagged: Option<&'a str>,
    pub chunk: i64,
    pub rx_buffers: i64,
    pub verbose: i64,
    pub fault_inject: Option<&'a str>,
    pub shm: Option<&'a str>,
    pub coalesce: i64,
    pub mr_cache_size: i64,
    pub mr_cache_bytes: i64,
    pub stripe: i64,
    pub stripe_min: i64,
    pub send_queue_limit: i64,
    pub send_queue_total: i64,
    pub priority: i64,
    pub peer_timeout: i64,
    pub named: bool,
    /// The text of numeric and enumerated values as the user wrote them,
    /// where known (from the environment): numbers are read exactly rather
    /// than as Open MPI's lenient conversion gave them
    /// ([`crate::params::parse`]), and an enumerated value set but empty
    /// (which Open MPI reads as 0) is refused.
    pub texts: Vec<(&'static str, String)>,
}

/// `mtl_rustofi_eager_limit = -1`: pick the limit per provider.
pub(crate) const EAGER_AUTO: i64 = -1;

/// Eager limit for a provider when the user left it at auto; `inject_size`
/// is the provider's (`tx_attr->inject_size`):
/// - tcp;ofi_rxm: 64 KiB (the tcp btl's eager limit too). Over tcp a
///   rendezvous costs two more trips through the kernel, more than copying
///   64 KiB; rxm's eager limit is raised to match (`ffi/fi_env.rs`), so
///   tcp places every packet straight into a posted buffer.
/// - shm: 4 KiB less our header: shm's inject size. Larger messages go by
///   rendezvous, which shm serves with a single-copy read (CMA).
/// - ofi_rxd (udp): the largest power of two that leaves a packet, header
///   included, within rxd's inject size, so every packet travels as one
///   datagram (1 KiB on udp's 1,472-byte datagrams). rxd splits a larger
///   message into segments, and a segmented message that arrives while no
///   receive is posted goes through rxd's unexpected-message path, which
///   in libfabric 1.17 has completed receives with another message's
///   segments (wrong bytes, and truncations): see docs/testing.md. The
///   message rendezvous's data packets follow the eager limit
///   (`Core::data_chunk`), so they fit one datagram too.
/// - everything else (efa, sockets, verbs): 8 KiB, within every provider's
///   single-packet size.
pub(crate) fn default_eager_limit(provider: &str, inject_size: usize) -> usize {
    if name_matches("ofi_rxm", provider) && name_matches("tcp", provider) {
        65536
    } else if name_matches("shm", provider) {
        4096 - crate::wire::BASE_LEN
    } else if name_matches("ofi_rxd", provider) {
        one_datagram_limit(inject_size)
    } else {
        8192
    }
}

/// The largest power of two, at most 8 KiB, whose packet (payload and our
/// header) fits `inject_size` bytes; 0 when not even one byte does (then
/// every message goes by rendezvous).
fn one_datagram_limit(inject_size: usize) -> usize {
    let room = inject_size.saturating_sub(crate::wire::BASE_LEN);
    if room == 0 {
        0
    } else {
        (1usize << room.ilog2()).min(8192)
    }
}

pub(crate) fn split_list(s: Option<&str>) -> Vec<String> {
    s.unwrap_or("")
        .split(',')
        .map(|x| x.trim().to_ascii_lowercase())
        .filter(|x| !x.is_empty())
        .collect()
}

/// Checks the two provider lists together: include set but empty, or both
/// set. A separate step so that these get their own help topic.
pub(crate) fn validate_lists(p: &RawParams<'_>) -> Result<(), String> {
    let include = split_list(p.include);
    let exclude = split_list(p.exclude);
    if p.include_set && include.is_empty() {
        return Err(
            "mtl_rustofi_provider_include is set but empty: name at least one provider \
             (e.g. tcp, udp, shm, sockets, efa)"
                .into(),
        );
    }
    if !include.is_empty() && p.exclude_set && !exclude.is_empty() {
        return Err(
            "mtl_rustofi_provider_include and mtl_rustofi_provider_exclude are both set: \
             use only one of them"
                .into(),
        );
    }
    Ok(())
}

/// Checks every parameter; the error text names the offending parameter.
pub(crate) fn validate(p: &RawParams<'_>) -> Result<Settings, String> {
    validate_lists(p)?;
    let include = split_list(p.include);
    let exclude = split_list(p.exclude);
    // Every numeric value against its rule in params::NUMERIC.
    let num = |name: &str, value: i64| {
        let spec = crate::params::spec(name)
            .ok_or_else(|| format!("mtl_rustofi_{name} has no entry in the parameter table"))?;
        let text = p.texts.iter().find(|(n, _)| *n == name);
        crate::params::check(spec, value, text.map(|(_, t)| t.as_str()))
    };
    num("priority", p.priority)?;
    let eager_limit = num("eager_limit", p.eager_limit)?;
    let chunk = num("rndv_chunk_size", p.chunk)?;
    let rx_buffers = num("rx_buffers", p.rx_buffers)?;
    let verbose = num("verbose", p.verbose)?;
    let coalesce = num("coalesce", p.coalesce)?;
    let mr_cache_size = num("mr_cache_size", p.mr_cache_size)?;
    let mr_cache_bytes = num("mr_cache_bytes", p.mr_cache_bytes)?;
    let stripe = num("stripe", p.stripe)?;
    let stripe_min = num("stripe_min", p.stripe_min)?;
    let send_queue_limit = num("send_queue_limit", p.send_queue_limit)?;
    let send_queue_total = num("send_queue_total", p.send_queue_total)?;
    let peer_timeout = num("peer_timeout", p.peer_timeout)?;
    // Open MPI reads an empty text as the value 0 before the shim's
    // enumerator sees it (for `shm` that is `off`, not the default), so
    // an enumerated parameter set but empty is refused here, where its
    // text is at hand (from the environment, as `mpirun --mca` passes it).
    for (name, _) in crate::params::ENUMERATED {
        if let Some((_, t)) = p.texts.iter().find(|(n, _)| n == name) {
            if t.trim().is_empty() {
                return Err(crate::params::not_a_value(name, t));
            }
        }
    }
    let rndv = match p.rndv_protocol.unwrap_or("auto").trim() {
        "" | "auto" => RndvProtocol::Auto,
        "read" => RndvProtocol::Read,
        "send" => RndvProtocol::Send,
        "msg" => RndvProtocol::Msg,
        other => return Err(crate::params::not_a_value("rndv_protocol", other)),
    };
    let tagged = match p
        .tagged
        .unwrap_or("auto")
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "" | "auto" => true,
        "off" => false,
        other => return Err(crate::params::not_a_value("tagged", other)),
    };
    if !tagged && rndv == RndvProtocol::Send {
        return Err("mtl_rustofi_rndv_protocol = send needs FI_TAGGED, which \
                    mtl_rustofi_tagged = off forbids: use auto, read or msg"
            .into());
    }
    let fault = match p.fault_inject.unwrap_or("").trim() {
        "" | "none" => Fault::None,
        "rma_key" => Fault::RmaKey,
        "bad_packet" => Fault::BadPacket,
        "lose_data" => Fault::LoseData,
        "lose_whole" => Fault::LoseWhole,
        "late_comm" => Fault::LateComm,
        "excid_lost" => Fault::ExcidLost,
        other => return Err(crate::params::not_a_value("fault_inject", other)),
    };
    let shm = match p.shm.unwrap_or("auto").trim().to_ascii_lowercase().as_str() {
        "" | "auto" => ShmMode::Auto,
        "on" | "1" | "true" | "yes" => ShmMode::On,
        "libfabric" => ShmMode::Libfabric,
        "off" | "0" | "false" | "no" => ShmMode::Off,
        other => return Err(crate::params::not_a_value("shm", other)),
    };
    Ok(Settings {
        include,
        exclude,
        nic: split_list(p.nic),
        eager_limit: (eager_limit != EAGER_AUTO).then_some(eager_limit as usize),
        rndv,
        tagged,
        chunk: chunk as usize,
        rx_buffers: rx_buffers as usize,
        verbose: verbose as i32,
        fault,
        shm,
        coalesce: coalesce == 1,
        mr_cache: mr_cache_size as usize,
        mr_cache_bytes: (mr_cache_bytes >= 0).then_some(mr_cache_bytes as usize),
        stripe: (stripe != 0).then_some(stripe as usize),
        stripe_min: stripe_min as usize,
        send_queue_limit: send_queue_limit as usize,
        send_queue_total: send_queue_total as usize,
        peer_timeout: (peer_timeout > 0)
            .then(|| std::time::Duration::from_secs(peer_timeout as u64)),
        explicit: p.named || p.include_set,
        one_host: false,
        world_size: 0,
    })
}

/// The default bytes bound of the registration cache for a host of `mem`
/// bytes and `cpus` CPUs: a process's share of the memory if every CPU runs
/// one (as libfabric sizes its own cache), so that the ranks of a full node
/// together never keep more than the host's memory pinned for reuse.
pub(crate) fn default_mr_cache_bytes(mem: usize, cpus: usize) -> usize {
    mem / cpus.max(1)
}

/// Providers that already move same-host traffic through shared memory
/// themselves (EFA hands local peers to its embedded shm provider).
pub(crate) const ROUTES_LOCAL_ITSELF: &[&str] = &["efa"];

/// Whether to open the shm provider as a second rail for same-host peers,
/// given the network provider's name. `libfabric` says yes; `auto` (for
/// when our own rail cannot be opened) says yes for providers that would
/// otherwise loop same-host traffic through the network stack (tcp, udp,
/// sockets, verbs, ...), no for efa (it routes local peers through shm
/// internally, so a second rail would only duplicate that); and no when
/// the network provider is shm itself.
pub(crate) fn shm_wanted(mode: ShmMode, provider: &str) -> bool {
    if name_matches("shm", provider) {
        return false;
    }
    match mode {
        ShmMode::Off | ShmMode::On => false,
        ShmMode::Libfabric => true,
        ShmMode::Auto => !ROUTES_LOCAL_ITSELF
            .iter()
            .any(|p| name_matches(p, provider)),
    }
}

/// Whether to open our own shared-memory rail (`auto` and `on`, under
/// every network provider, efa included) for `local_size` ranks of the job
/// on this host (a rank alone on its host still sends to itself through
/// it).
pub(crate) fn local_wanted(mode: ShmMode, local_size: usize) -> bool {
    matches!(mode, ShmMode::Auto | ShmMode::On) && local_size >= 1
}

/// The entry of the shm provider among `candidates`, if it is offered.
pub(crate) fn shm_index(candidates: &[String]) -> Option<usize> {
    candidates
        .iter()
        .position(|c| c.eq_ignore_ascii_case("shm"))
}

/// Whether a user-supplied provider name designates `prov` (a libfabric
/// `prov_name` such as `tcp;ofi_rxm`): it matches the whole name or any of
/// its `;`-separated layers, case-insensitively.
pub(crate) fn name_matches(item: &str, prov: &str) -> bool {
    let prov = prov.to_ascii_lowercase();
    prov == item || prov.split(';').any(|layer| layer == item)
}

fn rank(prov: &str) -> usize {
    let p = prov.to_ascii_lowercase();
    if name_matches("efa", &p) {
        0
    } else if !SOFTWARE_PROVIDERS.iter().any(|s| name_matches(s, &p)) {
        1
    } else if name_matches("tcp", &p) {
        2
    } else if name_matches("udp", &p) {
        3
    } else if name_matches("sockets", &p) {
        4
    } else {
        5
    }
}

/// Picks the index of the provider to use among `candidates` (libfabric
/// provider names in fi_getinfo order).
pub(crate) fn select_provider(candidates: &[String], s: &Settings) -> Result<usize, String> {
    let available = || {
        // libfabric lists a provider once per domain (tcp;ofi_rxm for
        // every interface): name each once, in libfabric's order.
        let mut names: Vec<&str> = Vec::new();
        for c in candidates {
            if !names.contains(&c.as_str()) {
                names.push(c);
            }
        }
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    if !s.include.is_empty() {
        // The first include item libfabric offers wins (a list is a
        // fallback order: `efa,tcp` takes tcp where there is no EFA);
        // within it, libfabric's order.
        for item in &s.include {
            if let Some(i) = candidates.iter().position(|c| name_matches(item, c)) {
                return Ok(i);
            }
        }
        let named = s
            .include
            .iter()
            .map(|i| format!("'{i}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let verdict = if s.include.len() == 1 {
            "which is not"
        } else {
            "none of which is"
        };
        return Err(format!(
            "mtl_rustofi_provider_include names {named}, {verdict} a usable libfabric \
             provider here (usable: {})",
            available()
        ));
    }
    let default_exclude: Vec<String> = if s.explicit || !s.exclude.is_empty() {
        Vec::new()
    } else {
        SOFTWARE_PROVIDERS.iter().map(|x| x.to_string()).collect()
    };
    let excluded = |c: &str| {
        s.exclude
            .iter()
            .chain(default_exclude.iter())
            .any(|e| name_matches(e, c))
    };
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| !excluded(c))
        .min_by_key(|(i, c)| (rank(c), *i))
        .map(|(i, _)| i)
        .ok_or_else(|| {
            if s.explicit || !s.exclude.is_empty() {
                format!(
                    "no libfabric provider is left after mtl_rustofi_provider_exclude (usable: {})",
                    available()
                )
            } else {
                format!(
                    "no hardware libfabric provider found (usable: {}); name the component \
                     (--mca mtl rustofi) or set mtl_rustofi_provider_include to use a software one",
                    available()
                )
            }
        })
}

/// Every parameter at its default, as Open MPI would hand them over (for
/// tests elsewhere in the crate that need valid settings).
#[cfg(test)]
pub(crate) fn test_params() -> RawParams<'static> {
    RawParams {
        eager_limit: EAGER_AUTO,
        coalesce: 1,
        mr_cache_size: 64,
        mr_cache_bytes: -1,
        stripe_min: 1 << 20,
        send_queue_limit: 4 << 20,
        send_queue_total: 32 << 20,
        priority: 25,
        peer_timeout: 30,
        chunk: 1 << 26,
        rx_buffers: 256,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::MAX_EAGER;

    fn raw() -> RawParams<'static> {
        test_params()
    }

    fn cands() -> Vec<String> {
        ["tcp;ofi_rxm", "udp;ofi_rxd", "shm", "sockets"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn tagged_and_msg_protocol() {
        let mut p = raw();
        assert!(validate(&p).unwrap().tagged);
        p.tagged = Some(" OFF");
        assert!(!validate(&p).unwrap().tagged);
        p.rndv_protocol = Some("msg");
        assert_eq!(validate(&p).unwrap().rndv, RndvProtocol::Msg);
        p.rndv_protocol = Some("send");
        let e = validate(&p).unwrap_err();
        assert!(
            e.contains("mtl_rustofi_tagged = off") && e.contains("send"),
            "{e}"
        );
        p.tagged = Some("maybe");
        assert!(validate(&p)
            .unwrap_err()
            .contains("mtl_rustofi_tagged = 'maybe'"));
    }

    #[test]
    fn eager_limit_auto_and_per_provider_defaults() {
        let mut p = raw();
        assert_eq!(validate(&p).unwrap().eager_limit, None);
        p.eager_limit = 0;
        assert_eq!(validate(&p).unwrap().eager_limit, Some(0));
        p.eager_limit = -2;
        assert!(validate(&p).unwrap_err().contains("-1"));
        assert_eq!(default_eager_limit("tcp;ofi_rxm", 0), 65536);
        assert_eq!(
            default_eager_limit("shm", 4096),
            4096 - crate::wire::BASE_LEN
        );
        assert_eq!(default_eager_limit("efa", 0), 8192);
        // udp;ofi_rxd on udp's 1,472-byte datagrams reports an inject size
        // of 1,256 (libfabric 1.17): a 1 KiB payload and our header fit.
        assert_eq!(default_eager_limit("udp;ofi_rxd", 1256), 1024);
        assert_eq!(default_eager_limit("udp;ofi_rxd", 1024 + 48), 1024);
        assert_eq!(default_eager_limit("udp;ofi_rxd", 1024 + 47), 512);
        assert_eq!(default_eager_limit("udp;ofi_rxd", 65536), 8192);
        assert_eq!(default_eager_limit("udp;ofi_rxd", 49), 1);
        assert_eq!(default_eager_limit("udp;ofi_rxd", 48), 0);
        assert_eq!(default_eager_limit("udp;ofi_rxd", 0), 0);
    }

    /// Open MPI turns an empty text into the value 0 before the shim's
    /// enumerator sees it (`shm` = off): where the text is at hand, an
    /// enumerated parameter set but empty is refused, naming its values,
    /// while the converted value alone (a parameter file) still counts.
    #[test]
    fn an_enumerated_parameter_set_but_empty_is_refused() {
        for (name, values) in crate::params::ENUMERATED {
            for empty in ["", "  "] {
                let mut p = raw();
                p.shm = Some("off");
                p.texts = vec![(name, empty.into())];
                let e = validate(&p).unwrap_err();
                assert!(
                    e.contains(&format!("mtl_rustofi_{name} is set but empty")),
                    "{e}"
                );
                assert!(e.contains(values), "{e}");
            }
        }
        let mut p = raw();
        p.shm = Some("off");
        p.texts = vec![("shm", "off".into())];
        assert_eq!(validate(&p).unwrap().shm, ShmMode::Off);
        p.texts = vec![];
        assert_eq!(validate(&p).unwrap().shm, ShmMode::Off);
    }

    /// The values the error messages list are the values `validate`
    /// takes: every listed value of every enumerated parameter is accepted.
    #[test]
    fn every_listed_value_of_an_enumerated_parameter_is_accepted() {
        for (name, values) in crate::params::ENUMERATED {
            let listed: Vec<&str> = values
                .split([',', ' '])
                .filter(|w| !w.is_empty() && *w != "or")
                .collect();
            assert!(listed.len() >= 2, "{name}: {values}");
            for v in listed {
                let mut p = raw();
                match *name {
                    "rndv_protocol" => p.rndv_protocol = Some(v),
                    "tagged" => p.tagged = Some(v),
                    "fault_inject" => p.fault_inject = Some(v),
                    "shm" => p.shm = Some(v),
                    other => panic!("mtl_rustofi_{other} has no field in RawParams here"),
                }
                let r = validate(&p);
                assert!(r.is_ok(), "mtl_rustofi_{name} = {v}: {r:?}");
            }
        }
    }

    #[test]
    fn shm_mode_parses_and_defaults_per_provider() {
        let mut p = raw();
        assert_eq!(validate(&p).unwrap().shm, ShmMode::Auto);
        p.shm = Some(" OFF ");
        assert_eq!(validate(&p).unwrap().shm, ShmMode::Off);
        p.shm = Some("on");
        assert_eq!(validate(&p).unwrap().shm, ShmMode::On);
        p.shm = Some("LibFabric");
        assert_eq!(validate(&p).unwrap().shm, ShmMode::Libfabric);
        p.shm = Some("sometimes");
        let e = validate(&p).unwrap_err();
        assert!(
            e.contains("mtl_rustofi_shm") && e.contains("sometimes"),
            "{e}"
        );
        assert!(shm_wanted(ShmMode::Auto, "tcp;ofi_rxm"));
        assert!(shm_wanted(ShmMode::Auto, "udp;ofi_rxd"));
        assert!(shm_wanted(ShmMode::Auto, "sockets"));
        assert!(!shm_wanted(ShmMode::Auto, "efa"));
        assert!(shm_wanted(ShmMode::Libfabric, "efa"));
        assert!(
            !shm_wanted(ShmMode::On, "tcp;ofi_rxm"),
            "on is our own rail"
        );
        assert!(!shm_wanted(ShmMode::Off, "tcp;ofi_rxm"));
        assert!(
            !shm_wanted(ShmMode::Libfabric, "shm"),
            "shm needs no second shm rail"
        );
        // Our own rail under every provider, efa included, when there is
        // another local rank.
        assert!(local_wanted(ShmMode::Auto, 2));
        assert!(local_wanted(ShmMode::On, 4));
        assert!(
            local_wanted(ShmMode::Auto, 1),
            "a rank alone sends to itself"
        );
        assert!(!local_wanted(ShmMode::Auto, 0));
        assert!(!local_wanted(ShmMode::Libfabric, 4));
        assert!(!local_wanted(ShmMode::Off, 4));
    }

    #[test]
    fn include_selects_by_layer_name() {
        let mut p = raw();
        p.include = Some("udp");
        p.include_set = true;
        let s = validate(&p).unwrap();
        assert!(s.explicit);
        assert_eq!(select_provider(&cands(), &s), Ok(1));
        p.include = Some("SHM, tcp");
        let s = validate(&p).unwrap();
        assert_eq!(select_provider(&cands(), &s), Ok(2));
        p.include = Some("ofi_rxm");
        let s = validate(&p).unwrap();
        assert_eq!(select_provider(&cands(), &s), Ok(0));
    }

    #[test]
    fn include_is_a_fallback_order() {
        let mut p = raw();
        p.include_set = true;
        // The first offered item wins, whatever comes before it.
        p.include = Some("efa,udp,tcp");
        let s = validate(&p).unwrap();
        assert_eq!(
            select_provider(&cands(), &s),
            Ok(1),
            "efa is not offered: udp"
        );
        let mut c = cands();
        c.push("efa".into());
        assert_eq!(select_provider(&c, &s), Ok(4), "efa where it is offered");
        // None offered: one message naming them all.
        p.include = Some("efa,psm3");
        let s = validate(&p).unwrap();
        let e = select_provider(&cands(), &s).unwrap_err();
        assert!(e.contains("'efa', 'psm3', none of which"), "{e}");
        assert!(e.contains("usable: tcp;ofi_rxm"), "{e}");
    }

    #[test]
    fn unknown_provider_is_a_clear_error() {
        let mut p = raw();
        p.include = Some("nosuchprov");
        p.include_set = true;
        let s = validate(&p).unwrap();
        let e = select_provider(&cands(), &s).unwrap_err();
        assert!(e.contains("mtl_rustofi_provider_include"), "{e}");
        assert!(e.contains("nosuchprov"), "{e}");
        assert!(e.contains("tcp;ofi_rxm"), "{e}");
    }

    #[test]
    fn empty_include_and_both_lists_are_rejected() {
        let mut p = raw();
        p.include = Some("");
        p.include_set = true;
        assert!(validate(&p)
            .unwrap_err()
            .contains("mtl_rustofi_provider_include"));
        let mut p = raw();
        p.include = Some("tcp");
        p.include_set = true;
        p.exclude = Some("udp");
        p.exclude_set = true;
        let e = validate(&p).unwrap_err();
        assert!(
            e.contains("mtl_rustofi_provider_include")
                && e.contains("mtl_rustofi_provider_exclude")
        );
    }

    #[test]
    fn numeric_values_are_range_checked() {
        for (f, name) in [
            (
                Box::new(|p: &mut RawParams| p.eager_limit = -5) as Box<dyn Fn(&mut RawParams)>,
                "eager_limit",
            ),
            (
                Box::new(|p: &mut RawParams| p.eager_limit = MAX_EAGER + 1),
                "eager_limit",
            ),
            (
                Box::new(|p: &mut RawParams| p.chunk = 100),
                "rndv_chunk_size",
            ),
            (Box::new(|p: &mut RawParams| p.rx_buffers = 0), "rx_buffers"),
            (Box::new(|p: &mut RawParams| p.verbose = -1), "verbose"),
            (
                Box::new(|p: &mut RawParams| p.send_queue_limit = 4095),
                "send_queue_limit",
            ),
            (
                Box::new(|p: &mut RawParams| p.send_queue_total = 0),
                "send_queue_total",
            ),
            (
                Box::new(|p: &mut RawParams| p.mr_cache_bytes = -2),
                "mr_cache_bytes",
            ),
            (
                Box::new(|p: &mut RawParams| p.rndv_protocol = Some("fast")),
                "rndv_protocol",
            ),
            (
                Box::new(|p: &mut RawParams| p.fault_inject = Some("x")),
                "fault_inject",
            ),
        ] {
            let mut p = raw();
            f(&mut p);
            let e = validate(&p).unwrap_err();
            assert!(e.contains(&format!("mtl_rustofi_{name}")), "{e}");
        }
    }

    #[test]
    fn the_cache_bytes_bound_is_chosen_from_the_host_unless_given() {
        assert_eq!(validate(&raw()).unwrap().mr_cache_bytes, None);
        let mut p = raw();
        p.mr_cache_bytes = 0;
        assert_eq!(validate(&p).unwrap().mr_cache_bytes, Some(0));
        p.mr_cache_bytes = 1 << 30;
        assert_eq!(validate(&p).unwrap().mr_cache_bytes, Some(1 << 30));
        // A rank's share of a host whose CPUs each run one.
        assert_eq!(default_mr_cache_bytes(64 << 30, 32), 2 << 30);
        assert_eq!(default_mr_cache_bytes(64 << 30, 0), 64 << 30);
    }

    #[test]
    fn every_fault_has_its_name() {
        for (name, fault) in [
            ("none", Fault::None),
            ("rma_key", Fault::RmaKey),
            ("bad_packet", Fault::BadPacket),
            ("lose_data", Fault::LoseData),
            ("lose_whole", Fault::LoseWhole),
            ("late_comm", Fault::LateComm),
            ("excid_lost", Fault::ExcidLost),
        ] {
            let mut p = raw();
            p.fault_inject = Some(name);
            assert_eq!(validate(&p).unwrap().fault, fault, "{name}");
        }
        let mut p = raw();
        p.fault_inject = Some("late");
        assert!(validate(&p).unwrap_err().contains("late_comm"));
    }

    #[test]
    fn numeric_text_wins_over_the_converted_value() {
        let mut p = raw();
        p.texts = vec![("rx_buffers", "99999999999".into())];
        let e = validate(&p).unwrap_err();
        assert!(e.contains("mtl_rustofi_rx_buffers = 99999999999"), "{e}");
        assert!(e.contains("8 to 65536"), "{e}");
        p.texts = vec![("eager_limit", "abc".into())];
        assert!(validate(&p)
            .unwrap_err()
            .contains("mtl_rustofi_eager_limit"));
        p.texts = vec![("eager_limit", "16k".into())];
        assert_eq!(validate(&p).unwrap().eager_limit, Some(16384));
        p.texts = vec![("send_queue_limit", "2m".into())];
        assert_eq!(validate(&p).unwrap().send_queue_limit, 2 << 20);
        p.texts = vec![("send_queue_total", "-1".into())];
        let e = validate(&p).unwrap_err();
        assert!(
            e.contains("mtl_rustofi_send_queue_total = -1 is out of range: it must be 4096 to"),
            "{e}"
        );
    }

    #[test]
    fn usable_list_names_each_provider_once() {
        let mut p = raw();
        p.include = Some("nosuchprov");
        p.include_set = true;
        let s = validate(&p).unwrap();
        let c: Vec<String> = [
            "tcp;ofi_rxm",
            "net;ofi_rxm",
            "tcp;ofi_rxm",
            "net;ofi_rxm",
            "shm",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let e = select_provider(&c, &s).unwrap_err();
        assert!(e.contains("(usable: tcp;ofi_rxm, net;ofi_rxm, shm)"), "{e}");
    }

    #[test]
    fn software_providers_only_when_named() {
        let s = validate(&raw()).unwrap();
        assert!(!s.explicit);
        let e = select_provider(&cands(), &s).unwrap_err();
        assert!(e.contains("no hardware"), "{e}");
        let mut p = raw();
        p.named = true;
        let s = validate(&p).unwrap();
        assert_eq!(select_provider(&cands(), &s), Ok(0), "tcp preferred");
    }

    #[test]
    fn efa_preferred_and_competes_by_default() {
        let mut c = cands();
        c.push("efa".into());
        let s = validate(&raw()).unwrap();
        assert_eq!(select_provider(&c, &s), Ok(4));
        let mut p = raw();
        p.named = true;
        let s = validate(&p).unwrap();
        assert_eq!(select_provider(&c, &s), Ok(4));
    }

    #[test]
    fn exclude_filters() {
        let mut p = raw();
        p.named = true;
        p.exclude = Some("tcp,udp");
        p.exclude_set = true;
        let s = validate(&p).unwrap();
        assert_eq!(select_provider(&cands(), &s), Ok(3), "sockets next");
        p.exclude = Some("tcp,udp,sockets,shm");
        let s = validate(&p).unwrap();
        assert!(select_provider(&cands(), &s)
            .unwrap_err()
            .contains("mtl_rustofi_provider_exclude"));
    }
}
