//! Settings libfabric's providers read from the environment when libfabric
//! initialises (before the first `fi_getinfo`), chosen for how the
//! component uses them; a user's own setting always wins.

use crate::config;
use std::ffi::CString;

/// rxm's bounce buffers: [`RXM_BUFFER_SIZE`] bytes, and its eager limit
/// raised to the component's largest packet over tcp, unless the user set
/// either. Read when libfabric initialises (before the first fi_getinfo).
///
/// rxm allocates its receive and transmit pools 1024 buffers at a time,
/// each buffer of `FI_OFI_RXM_BUFFER_SIZE` bytes (16 KiB by default): 35 MB
/// of an idle 53 MB tcp rank. Over tcp, rxm does not need them for data:
/// tcp asks rxm where each message goes (dynamic receive buffers) and
/// places it straight into the component's posted buffer, and rxm sends
/// from the component's buffer (direct send). Its eager limit is what
/// decides the protocol: a packet above it takes rxm's rendezvous (a
/// round trip more), so it is set to the component's packet size (its
/// eager limit plus header) and every packet stays eager. An idle tcp
/// rank then holds 22 MB.
///
/// Over verbs rxm does copy through its buffers, and there the eager limit
/// must equal the buffer size, so nothing is changed where rxm may run
/// over verbs: a host with an RDMA device, unless the provider list names
/// tcp alone.
pub(super) fn tune_rxm_buffers(settings: &config::Settings) {
    if std::env::var_os("FI_OFI_RXM_BUFFER_SIZE").is_some()
        || std::env::var_os("FI_OFI_RXM_EAGER_LIMIT").is_some()
    {
        return;
    }
    let tcp_only = !settings.include.is_empty()
        && settings
            .include
            .iter()
            .all(|p| config::name_matches("tcp", p));
    let rdma_device =
        std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    if rdma_device && !tcp_only {
        return;
    }
    let eager = settings
        .eager_limit
        .unwrap_or_else(|| config::default_eager_limit("tcp;ofi_rxm"));
    let packet = crate::wire::BASE_LEN + eager.max(crate::wire::EXT_LEN - crate::wire::BASE_LEN);
    set_env("FI_OFI_RXM_BUFFER_SIZE", &RXM_BUFFER_SIZE.to_string());
    set_env(
        "FI_OFI_RXM_EAGER_LIMIT",
        &packet.max(RXM_BUFFER_SIZE).to_string(),
    );
}

/// Size of rxm's bounce buffers ([`tune_rxm_buffers`]): also rxm's inject
/// limit, so the component's small packets (256-byte buffers) are still
/// injected.
const RXM_BUFFER_SIZE: usize = 1024;

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
