//! Opening a rail: one libfabric endpoint with its fabric, domain,
//! completion queue and address vector, and the profile of it the
//! protocol core works with.

use crate::config::{RndvProtocol, Settings};
use crate::engine::EngineError;
use crate::fabric::{AddressVector, CompletionQueue, Domain, Endpoint, Fabric, Info, InfoList};
use crate::proto::RailProfile;
use crate::sys;
use crate::wire::{self, RailKind};
use std::sync::Arc;

/// Provider capabilities, as printed at verbose 2.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Caps {
    pub(crate) rma: bool,
    pub(crate) tagged: bool,
    pub(crate) mr_local: bool,
    pub(crate) mr_virt_addr: bool,
    pub(crate) mr_prov_key: bool,
    pub(crate) mr_endpoint: bool,
    pub(crate) max_msg: usize,
    pub(crate) inject_size: usize,
}

/// An open endpoint. Fields drop in declaration order: endpoint, completion
/// queue, address vector, domain, fabric.
pub(super) struct FabricRail {
    pub(super) ep: Option<Endpoint>,
    pub(super) cq: Arc<CompletionQueue>,
    pub(super) av: Arc<AddressVector>,
    pub(super) domain: Arc<Domain>,
    _fabric: Arc<Fabric>,
    _info: InfoList,
    pub(super) caps: Caps,
    pub(super) profile: RailProfile,
    /// The domain (NIC) name.
    pub(super) nic: String,
}

impl FabricRail {
    pub(super) fn open(
        list: &InfoList,
        index: usize,
        kind: RailKind,
        settings: &Settings,
        rndv: RndvProtocol,
    ) -> Result<FabricRail, EngineError> {
        let info: Info<'_> = list
            .iter()
            .nth(index)
            .ok_or_else(|| EngineError("provider index out of range".into()))?;
        let one = InfoList::dup_one(info)?;
        let info = one.first().expect("dup_one returns one entry");
        let provider = info.provider();
        let nic = info.domain_name();
        let mr_mode = info.mr_mode();
        let caps = Caps {
            rma: info.caps() & (sys::FI_RMA as u64) != 0,
            tagged: info.caps() & (sys::FI_TAGGED as u64) != 0,
            mr_local: mr_mode & sys::FI_MR_LOCAL != 0,
            mr_virt_addr: mr_mode & sys::FI_MR_VIRT_ADDR != 0,
            mr_prov_key: mr_mode & sys::FI_MR_PROV_KEY != 0,
            mr_endpoint: mr_mode & sys::FI_MR_ENDPOINT != 0,
            max_msg: info.max_msg_size().max(4096),
            inject_size: info.inject_size(),
        };
        let eager_limit = settings
            .eager_limit
            .unwrap_or_else(|| crate::config::default_eager_limit(&provider, caps.inject_size));
        let buf_size = wire::BASE_LEN + eager_limit.max(wire::EXT_LEN - wire::BASE_LEN);
        if buf_size > caps.max_msg {
            return Err(EngineError(format!(
                "mtl_rustofi_eager_limit = {eager_limit} exceeds what provider {provider} can \
                 send in one message ({} bytes with the header)",
                caps.max_msg
            )));
        }
        // FI_TAGGED is used only if the provider returned it and the user
        // allows it (a provider may return it unasked).
        let tagged = caps.tagged && settings.tagged;
        let (rndv_read, rndv_msg) = choose_rndv(rndv, &caps, tagged, &provider)?;
        let fabric = Fabric::open(info)?;
        let domain = Domain::open(&fabric, info)?;
        let cq_size = (info.rx_size() + info.tx_size()).clamp(1024, 65536);
        let cq = CompletionQueue::open(&domain, cq_size)?;
        // rxm's AV grows past its count; other providers read the count
        // differently (shm refuses more than 256, rxd sizes fixed tables by
        // it), so they keep their defaults.
        let av_count = if crate::config::name_matches("ofi_rxm", &provider) {
            settings.world_size
        } else {
            0
        };
        let av = AddressVector::open(&domain, av_count)?;
        let ep = Endpoint::open(&domain, info, &cq, &av)?;
        let inject_size = if inject_trusted(&provider) {
            caps.inject_size
        } else {
            0
        };
        let profile = RailProfile {
            kind,
            provider,
            mr_local: caps.mr_local,
            mr_virt_addr: caps.mr_virt_addr,
            mr_prov_key: caps.mr_prov_key,
            buf_size,
            eager_limit,
            zero_copy: !caps.mr_local && info.iov_limit() >= 2,
            rndv_read,
            tagged,
            rndv_msg,
            chunk: settings.chunk.min(caps.max_msg),
            // Some providers (udp;ofi_rxd) accept more than their queue
            // depth without EAGAIN and then stall, so the core queues the
            // excess itself.
            inject_size,
            inline: false,
            rx_kept: false,
            tx_depth: info.tx_size().clamp(16, 1 << 20),
            // A stripe rail only carries reads: no packet arrives on it.
            rx_count: if kind == RailKind::Stripe {
                0
            } else {
                settings.rx_buffers.min(info.rx_size().max(8))
            },
        };
        Ok(FabricRail {
            ep: Some(ep),
            cq,
            av,
            domain,
            _fabric: fabric,
            _info: one,
            caps,
            profile,
            nic,
        })
    }

    pub(super) fn ep(&self) -> &Endpoint {
        self.ep.as_ref().expect("endpoint open until drop")
    }
}

/// Whether a provider's RMA read serves the read rendezvous when the user
/// leaves the choice to us. `ofi_rxd` (under `udp`) emulates RMA in
/// software over datagrams, and its reads stall under load: with many
/// reads and sends in flight both ways, a transfer stops being
/// acknowledged and everything behind it waits for ever (the threaded
/// stress test stalls in about half its runs with reads and never with
/// the send or message rendezvous; stock mtl/ofi crashes inside the
/// provider on the same test). Its sends are also the faster path there.
fn rma_read_trusted(provider: &str) -> bool {
    !crate::config::name_matches("ofi_rxd", provider)
}

/// Whether small packets go by the provider's `fi_inject`. `ofi_rxd`
/// (under `udp`) stops delivering under many injected packets: in the
/// threaded stress test with its 1 KiB eager limit, where nearly every
/// packet fits its inject size, both ranks ended with hundreds of sends
/// in flight and their peer's packets held out of order for good, in
/// every run; the same runs with `fi_send` pass. Its sends are acked
/// datagrams either way, so inject saves little there. Matched as the
/// eager limit's choice matches rxd (`config::default_eager_limit`), so
/// the two never disagree on which rail is rxd's.
fn inject_trusted(provider: &str) -> bool {
    !crate::config::name_matches("ofi_rxd", provider)
}

/// The rendezvous a rail uses: (by read, by message packets); neither
/// means the tagged send rendezvous.
fn choose_rndv(
    rndv: RndvProtocol,
    caps: &Caps,
    tagged: bool,
    provider: &str,
) -> Result<(bool, bool), EngineError> {
    Ok(match rndv {
        RndvProtocol::Auto => {
            let read = caps.rma && rma_read_trusted(provider);
            (read, !read && !tagged)
        }
        RndvProtocol::Read if !caps.rma => {
            return Err(EngineError(format!(
                "mtl_rustofi_rndv_protocol = read, but provider {provider} has no FI_RMA"
            )))
        }
        RndvProtocol::Read => (true, false),
        RndvProtocol::Send if !tagged => {
            return Err(EngineError(format!(
                "mtl_rustofi_rndv_protocol = send, but provider {provider} has no FI_TAGGED"
            )))
        }
        RndvProtocol::Send => (false, false),
        RndvProtocol::Msg => (false, true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(rma: bool, tagged: bool) -> Caps {
        Caps {
            rma,
            tagged,
            mr_local: false,
            mr_virt_addr: false,
            mr_prov_key: false,
            mr_endpoint: false,
            max_msg: 1 << 30,
            inject_size: 0,
        }
    }

    #[test]
    fn inject_is_left_unused_on_rxd_alone() {
        assert!(!inject_trusted("udp;ofi_rxd"));
        for p in ["tcp;ofi_rxm", "shm", "sockets", "efa", "verbs;ofi_rxm"] {
            assert!(inject_trusted(p), "{p}");
        }
    }

    #[test]
    fn auto_reads_where_rma_is_trusted() {
        let c = caps(true, true);
        let pick = |p| choose_rndv(RndvProtocol::Auto, &c, true, p).unwrap();
        assert_eq!(pick("tcp;ofi_rxm"), (true, false));
        assert_eq!(pick("efa"), (true, false));
        // udp;ofi_rxd: its emulated reads stall; tagged sends instead.
        assert_eq!(pick("udp;ofi_rxd"), (false, false));
        // ... or message packets where FI_TAGGED is off.
        let off = choose_rndv(RndvProtocol::Auto, &c, false, "udp;ofi_rxd").unwrap();
        assert_eq!(off, (false, true));
    }

    #[test]
    fn explicit_choices_are_honoured_or_refused() {
        let c = caps(true, true);
        let rxd = "udp;ofi_rxd";
        assert_eq!(
            choose_rndv(RndvProtocol::Read, &c, true, rxd).unwrap(),
            (true, false)
        );
        assert_eq!(
            choose_rndv(RndvProtocol::Msg, &c, true, rxd).unwrap(),
            (false, true)
        );
        let no_rma = caps(false, true);
        let e = choose_rndv(RndvProtocol::Read, &no_rma, true, "x").unwrap_err();
        assert!(e.0.contains("no FI_RMA"), "{}", e.0);
        let e = choose_rndv(RndvProtocol::Send, &c, false, "x").unwrap_err();
        assert!(e.0.contains("no FI_TAGGED"), "{}", e.0);
    }
}
