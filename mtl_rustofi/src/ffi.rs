//! The C boundary: every function the shim calls, each behind a panic
//! guard. This is the only module that converts between C and Rust values.
//!
//! Return convention: 0 for success, a negative value for an error (the
//! shim maps it to an Open MPI error code; the message has already been
//! printed).

use crate::config::{self, RawParams};
use crate::engine::{Completion, Engine, MessageHandle, ProbeInfo, Status};
use crate::fabric::{Hints, InfoList};
use crate::log::Topic;
use crate::matching::Selector;
use crate::memrelease::ReleaseRing;
use crate::params;
use crate::proto::ids::PeerId;
use crate::request::{MtlRequest, ReqPtr, Request, RustofiReqHead, REQUEST_EXTRA};
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

/// MCA parameter values and process identity, filled by the shim.
#[repr(C)]
pub struct RustofiConfig {
    pub provider_include: *const c_char,
    pub include_set: bool,
    pub provider_exclude: *const c_char,
    pub exclude_set: bool,
    pub eager_limit: i64,
    pub rndv_protocol: *const c_char,
    pub rndv_chunk_size: i64,
    pub rx_buffers: i64,
    pub verbose: i64,
    pub fault_inject: *const c_char,
    /// Same-host peers over the shm provider: auto, on or off.
    pub shm: *const c_char,
    /// Coalesce back-to-back small sends to a peer (1) or not (0).
    pub coalesce: i64,
    /// The user selected this component by name (`--mca mtl rustofi`).
    pub named: bool,
    /// This process's name (jobid << 32 | vpid).
    pub my_name: u64,
    /// This process's rank in MPI_COMM_WORLD, for messages.
    pub rank: i64,
    /// NICs (domains) of the provider to use: comma list, NULL for any.
    pub nic: *const c_char,
    /// Most unused registrations of user buffers to cache (0: none).
    pub mr_cache_size: i64,
    /// Open MPI's memory hooks report munmap and free: the shim passes
    /// every released range to [`rustofi_mem_release`].
    pub mem_hooks: bool,
    /// Ask for and use FI_TAGGED: auto or off.
    pub tagged: *const c_char,
    /// MCA `priority`, range-checked with the others.
    pub priority: i64,
    /// Most NICs a large read rendezvous spreads over (0: all near ones).
    pub stripe: i64,
    /// Smallest read rendezvous that stripes, in bytes.
    pub stripe_min: i64,
    /// Bytes held for one peer's uncompleted sends before sends wait.
    pub send_queue_limit: i64,
    /// The same over all peers.
    pub send_queue_total: i64,
    /// Seconds within which operations waiting on a dead peer fail (0:
    /// never probe peers).
    pub peer_timeout: i64,
}

/// Completion entry points of the shim.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RustofiCallbacks {
    /// A receive finished: source, tag, bytes written, status (0 ok,
    /// 1 truncated, 2 failed).
    pub recv_complete: Option<unsafe extern "C" fn(*mut RustofiReqHead, i32, i32, usize, c_int)>,
    /// A send finished with a status (0 ok, 2 failed).
    pub send_complete: Option<unsafe extern "C" fn(*mut RustofiReqHead, c_int)>,
    /// A receive was cancelled.
    pub cancel_complete: Option<unsafe extern "C" fn(*mut RustofiReqHead)>,
}

/// Output entry points of the shim (see `log`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RustofiLogHooks {
    /// Writes one line (without its newline) with `opal_output`.
    pub output: Option<unsafe extern "C" fn(*const c_char)>,
    /// Shows a topic of `help-mtl-rustofi.txt`; the second argument is the
    /// message filling the topic's `%s`.
    pub show_help: Option<unsafe extern "C" fn(*const c_char, *const c_char)>,
}

/// MPI_T class of a performance variable (the shim maps it to Open MPI's
/// `MCA_BASE_PVAR_CLASS_*`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RustofiPvarClass {
    /// Monotonic count of events since MPI_Init.
    Counter = 0,
    /// Current value of a quantity that rises and falls.
    Level = 1,
    /// Highest value a level has reached.
    Highwatermark = 2,
}

/// Envelope reported by a probe.
#[repr(C)]
pub struct RustofiStatus {
    pub source: i32,
    pub tag: i32,
    pub count: u64,
}

struct Component {
    engine: Engine,
    cb: RustofiCallbacks,
    rank: i64,
}

static COMPONENT: AtomicPtr<Component> = AtomicPtr::new(ptr::null_mut());

thread_local! {
    static SCRATCH: RefCell<Vec<Completion>> = const { RefCell::new(Vec::new()) };
}

const ERR: c_int = -1;

/// Runs `f`, turning a panic into an error code and a message.
fn guard(what: &str, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            crate::log::problem(Topic::InternalError, &format!("{what}: {msg}"));
            ERR
        }
    }
}

fn component() -> Option<&'static Component> {
    let p = COMPONENT.load(Ordering::Acquire);
    // SAFETY: the pointer is either null or a leaked Box that stays alive
    // until rustofi_finalize, which MPI guarantees runs after every other
    // call into the MTL has returned.
    unsafe { p.as_ref() }
}

/// Runs an engine operation, then delivers the completions it produced
/// once the progress token has been released (a callback may start new
/// operations).
fn with_engine(what: &str, f: impl FnOnce(&Engine, &mut Vec<Completion>) -> c_int) -> c_int {
    guard(what, || {
        let Some(c) = component() else {
            crate::log::error(&format!("{what} called before initialisation"));
            return ERR;
        };
        let mut out = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        let r = f(&c.engine, &mut out);
        deliver(c, &mut out);
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            if s.capacity() < out.capacity() {
                *s = out;
            }
        });
        r
    })
}

fn deliver(c: &Component, out: &mut Vec<Completion>) {
    for comp in out.drain(..) {
        // SAFETY: each request pointer came from the shim for an operation
        // that is now complete; the callbacks are the shim's functions.
        unsafe {
            match comp {
                Completion::Recv {
                    req,
                    src,
                    tag,
                    bytes,
                    status,
                } => {
                    if let Some(f) = c.cb.recv_complete {
                        f(
                            req.0 as *mut RustofiReqHead,
                            src,
                            tag,
                            bytes,
                            status as c_int,
                        )
                    }
                }
                Completion::Send { req, status } => {
                    if let Some(f) = c.cb.send_complete {
                        f(req.0 as *mut RustofiReqHead, status as c_int)
                    }
                }
                Completion::Cancelled { req } => {
                    if let Some(f) = c.cb.cancel_complete {
                        f(req.0 as *mut RustofiReqHead)
                    }
                }
            }
        }
    }
}

fn opt_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        None
    } else {
        // SAFETY: the shim passes NUL-terminated MCA strings that outlive
        // the init call.
        unsafe { CStr::from_ptr(p) }.to_str().ok()
    }
}

/// The range rule of numeric parameter `name` (without the `mtl_rustofi_`
/// prefix), for its help text; NULL if `name` is not in the table. The
/// string lives as long as the process.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rustofi_param_rule(name: *const c_char) -> *const c_char {
    static RULES: std::sync::OnceLock<Vec<CString>> = std::sync::OnceLock::new();
    let rules = RULES.get_or_init(|| {
        params::NUMERIC
            .iter()
            .map(|p| CString::new(params::rule(p)).unwrap_or_default())
            .collect()
    });
    if name.is_null() {
        return ptr::null();
    }
    // SAFETY: the caller passes a NUL-terminated string, read during the call.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    match params::NUMERIC
        .iter()
        .position(|p| p.name.as_bytes() == name)
    {
        Some(i) => rules[i].as_ptr(),
        None => ptr::null(),
    }
}

/// Bytes the PML reserves after `mca_mtl_request_t` for each request.
#[no_mangle]
pub extern "C" fn rustofi_request_extra() -> usize {
    REQUEST_EXTRA
}

/// Validates the parameters, selects a provider and opens it. Returns 0 on
/// success and 1 if the component declines (the reason is printed when it
/// comes from the user's settings, or with `verbose`).
///
/// # Safety
/// `cfg` and `cb` must point to valid structures.
#[no_mangle]
pub unsafe extern "C" fn rustofi_init(
    cfg: *const RustofiConfig,
    cb: *const RustofiCallbacks,
) -> c_int {
    guard("rustofi_init", || {
        // SAFETY: the contract says both point to valid structures; they
        // are read here during the call only (the callbacks are copied).
        let (cfg, cb) = unsafe { (&*cfg, *cb) };
        crate::log::set_rank(cfg.rank);
        let raw = RawParams {
            include: opt_str(cfg.provider_include),
            include_set: cfg.include_set,
            exclude: opt_str(cfg.provider_exclude),
            exclude_set: cfg.exclude_set,
            nic: opt_str(cfg.nic),
            eager_limit: cfg.eager_limit,
            rndv_protocol: opt_str(cfg.rndv_protocol),
            tagged: opt_str(cfg.tagged),
            chunk: cfg.rndv_chunk_size,
            rx_buffers: cfg.rx_buffers,
            verbose: cfg.verbose,
            fault_inject: opt_str(cfg.fault_inject),
            shm: opt_str(cfg.shm),
            coalesce: cfg.coalesce,
            mr_cache_size: cfg.mr_cache_size,
            stripe: cfg.stripe,
            stripe_min: cfg.stripe_min,
            send_queue_limit: cfg.send_queue_limit,
            send_queue_total: cfg.send_queue_total,
            priority: cfg.priority,
            peer_timeout: cfg.peer_timeout,
            named: cfg.named,
            // Open MPI converts leniently ("abc" is 0, digits beyond 64 bits
            // wrap); where the user's text is at hand it is read exactly.
            // Values from parameter files are checked as converted.
            texts: params::NUMERIC
                .iter()
                .filter_map(|p| {
                    let text = std::env::var(format!("OMPI_MCA_mtl_rustofi_{}", p.name)).ok()?;
                    Some((p.name, text))
                })
                .collect(),
        };
        if let Err(e) = config::validate_lists(&raw) {
            crate::log::problem(Topic::ProviderLists, &e);
            return 1;
        }
        let settings = match config::validate(&raw) {
            Ok(s) => s,
            Err(e) => {
                crate::log::problem(Topic::BadValue, &e);
                return 1;
            }
        };
        crate::trace::install(settings.verbose);
        let _init = tracing::info_span!("init", rank = cfg.rank).entered();
        // rxm's bounce buffers stay at their default size (16 KiB): eager
        // packets above it travel as rxm segments (SAR) on the same
        // connection. Enlarging them to a whole 64 KiB packet multiplied
        // every rxm pool (0.36 GB per rank instead of 0.11 GB) and doubled
        // MPI_Init over tcp; a user's FI_OFI_RXM_BUFFER_SIZE still applies.
        let mut settings = settings;
        settings.one_host = env_count("OMPI_COMM_WORLD_SIZE")
            .is_some_and(|n| env_count("OMPI_COMM_WORLD_LOCAL_SIZE") == Some(n));
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
        if std::env::var_os("FI_OFI_RXM_MSG_RX_SIZE").is_none() {
            set_env("FI_OFI_RXM_MSG_RX_SIZE", &msg_rx.max(16).to_string());
        }
        // With a shared receive context rxm also allocates its pools when
        // the endpoint opens (17 MB more); per-connection receive buffers
        // cost nothing on a rail no peer connects to.
        if shm_relieves_net && std::env::var_os("FI_OFI_RXM_USE_SRX").is_none() {
            set_env("FI_OFI_RXM_USE_SRX", "0");
        }
        let mut query = Err(crate::fabric::FiError::new("fi_getinfo", -61));
        let mut asked = None;
        for h in Hints::preference(settings.tagged, settings.rndv) {
            query = InfoList::query(h);
            if query.is_ok() {
                asked = Some(h);
                break;
            }
        }
        let list = match query {
            Ok(l) => l,
            Err(e) => {
                if settings.explicit || settings.verbose > 0 {
                    crate::log::problem(
                        Topic::NoProvider,
                        &format!("no libfabric provider offers reliable datagram endpoints ({e})"),
                    );
                }
                return 1;
            }
        };
        let names: Vec<String> = list.iter().map(|i| i.provider()).collect();
        if tracing::enabled!(tracing::Level::INFO) {
            let mut distinct = names.clone();
            distinct.dedup();
            tracing::info!(candidates = ?distinct, "libfabric providers offered");
        }
        let index = match config::select_provider(&names, &settings) {
            Ok(i) => i,
            Err(e) => {
                // Only a user's explicit choice warrants a message; a default
                // run on a machine without a fabric declines quietly.
                if settings.explicit || !settings.include.is_empty() || settings.verbose > 0 {
                    crate::log::problem(Topic::UnknownProvider, &e);
                }
                return 1;
            }
        };
        tracing::info!(provider = %names[index], "provider selected");
        let verbose = settings.verbose;
        // Every rank on this host: no peer is reached over a NIC.
        let stripe = if settings.one_host {
            Some(1)
        } else {
            settings.stripe
        };
        let pick = match crate::topo::pick_nic(&list, &names[index], &settings.nic, stripe) {
            Ok(p) => p,
            Err(e) => {
                crate::log::error(&format!("{}: {e}; the component is disabled", names[index]));
                return 1;
            }
        };
        let index = pick.index;
        let shm_mode = settings.shm;
        let shm = if config::shm_wanted(shm_mode, &names[index]) {
            let i = config::shm_index(&names);
            if i.is_none() {
                let msg = format!(
                    "mtl_rustofi_shm: libfabric offers no shm provider here; same-host \
                     peers use {}",
                    names[index]
                );
                if shm_mode == config::ShmMode::Libfabric {
                    crate::log::problem(Topic::NoShm, &msg);
                    return 1;
                }
                if verbose > 0 {
                    crate::log::info(&msg);
                }
            }
            i
        } else {
            None
        };
        // Our own shared-memory rail: the ranks of this job on this host.
        let local_size = env_count("OMPI_COMM_WORLD_LOCAL_SIZE").unwrap_or(1) as usize;
        let local =
            config::local_wanted(shm_mode, local_size).then_some(crate::driver::shm::LocalJob {
                jobid: (cfg.my_name >> 32) as u32,
                rank: pick.local_rank,
                size: local_size,
            });
        let same = crate::driver::SameHost {
            local,
            local_required: shm_mode == config::ShmMode::On,
            shm,
            shm_required: shm_mode == config::ShmMode::Libfabric,
        };
        let stripe_entries: Vec<usize> = pick.stripes.iter().map(|s| s.1).collect();
        let opened = Engine::open(list, index, same, &stripe_entries, settings, cfg.my_name);
        let mut engine = match opened {
            Ok(e) => e,
            Err(e) => {
                crate::log::problem(
                    Topic::OpenFailed,
                    &format!("cannot open provider {}: {}", names[index], e.0),
                );
                return 1;
            }
        };
        if verbose > 1 {
            crate::log::info(&format!(
                "rustofi: opened rank={} provider={} nic={} local_rank={} near_nics={} \
                 stripe_nics={} nic_distance={} shm={} rma={} rndv={} caps={:?}",
                cfg.rank,
                engine.provider,
                engine.nic,
                pick.local_rank,
                pick.near.join(","),
                if engine.stripe_nics.is_empty() {
                    "none".to_string()
                } else {
                    engine.stripe_nics.join(",")
                },
                pick.distance
                    .map_or("unknown".to_string(), |d| d.to_string()),
                engine.shm_provider().unwrap_or("off"),
                engine.caps.rma,
                engine.rndv_name(),
                engine.caps
            ));
            crate::log::info(&format!(
                "rustofi: fi_getinfo rank={} api={} (libfabric {}, headers {}) asked caps={} tagged={}",
                cfg.rank,
                crate::fabric::version_text(crate::fabric::api_version()),
                crate::fabric::version_text(crate::fabric::runtime_version()),
                crate::fabric::version_text(crate::fabric::API_HEADERS),
                asked.map(|h| h.caps_text()).unwrap_or_default(),
                if engine.settings.tagged {
                    "auto"
                } else {
                    "off"
                }
            ));
        }
        let cache = engine.settings.mr_cache;
        if cache > 0 && cfg.mem_hooks {
            engine.enable_mr_cache(cache, RELEASES.get_or_init(Default::default).clone());
        }
        if verbose > 1 {
            crate::log::info(&if cache == 0 {
                "rustofi: registration cache off (mtl_rustofi_mr_cache_size 0)".to_string()
            } else if cfg.mem_hooks {
                format!("rustofi: registration cache on, {cache} unused registrations kept")
            } else {
                "rustofi: registration cache off: Open MPI's memory hooks do not report \
                 munmap and free here, so a freed buffer could not be told apart; every \
                 rendezvous registers its buffer"
                    .to_string()
            });
        }
        crate::pvars::publish(engine.stats().clone());
        let comp = Box::new(Component {
            engine,
            cb,
            rank: cfg.rank,
        });
        let old = COMPONENT.swap(Box::into_raw(comp), Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: a previous instance that was never finalised.
            drop(unsafe { Box::from_raw(old) });
        }
        0
    })
}

/// A positive count from the environment (set by Open MPI's launcher).
fn env_count(var: &str) -> Option<u64> {
    std::env::var(var)
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|&n| n > 0)
}

/// Sets an environment variable for libfabric's providers.
fn set_env(var: &str, value: &str) {
    let (Ok(k), Ok(v)) = (CString::new(var), CString::new(value)) else {
        return;
    };
    // SAFETY: both strings are NUL-terminated and outlive the call (setenv
    // copies them). setenv is not synchronised with concurrent getenv
    // calls; this runs once during MPI_Init, from the thread initialising
    // MPI, as Open MPI's own components do with opal_setenv.
    unsafe { libc::setenv(k.as_ptr(), v.as_ptr(), 0) };
}

/// Copies the local endpoint name into `buf` (capacity `*len`); sets `*len`.
///
/// # Safety
/// `buf` must be writable for `*len` bytes; `len` must be valid.
#[no_mangle]
pub unsafe extern "C" fn rustofi_endpoint_name(buf: *mut u8, len: *mut usize) -> c_int {
    with_engine("rustofi_endpoint_name", |e, _| match e.local_name() {
        Ok(name) => {
            // SAFETY: the contract says `len` is a valid pointer.
            let cap = unsafe { *len };
            if name.len() > cap {
                crate::log::error("endpoint name larger than the shim's buffer");
                return ERR;
            }
            // SAFETY: `buf` is writable for `cap` bytes (the contract) and
            // `name.len() <= cap` was checked above; `len` is valid. A Vec
            // of ours cannot overlap the caller's buffer.
            unsafe {
                ptr::copy_nonoverlapping(name.as_ptr(), buf, name.len());
                *len = name.len();
            }
            0
        }
        Err(err) => {
            crate::log::error(&err.0);
            ERR
        }
    })
}

/// The path of the shared-memory file behind the shm rail as a
/// NUL-terminated string in `buf` of `len` bytes. Returns 0 with the path,
/// 1 when no shm rail is open (or its address names no file), negative on
/// error.
///
/// # Safety
/// `buf` must be writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rustofi_shm_segment(buf: *mut c_char, len: usize) -> c_int {
    with_engine("rustofi_shm_segment", |e, _| {
        let Some(path) = e.shm_segment() else {
            return 1;
        };
        if path.len() >= len {
            crate::log::error("shm segment path larger than the shim's buffer");
            return ERR;
        }
        // SAFETY: `buf` is writable for `len` bytes (the contract) and the
        // path plus its NUL fits, checked above; a String of ours cannot
        // overlap the caller's buffer.
        unsafe {
            ptr::copy_nonoverlapping(path.as_ptr(), buf as *mut u8, path.len());
            *buf.add(path.len()) = 0;
        }
        0
    })
}

/// Provider name as a NUL-terminated string in `buf` of `len` bytes.
///
/// # Safety
/// `buf` must be writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rustofi_provider_name(buf: *mut c_char, len: usize) -> c_int {
    with_engine("rustofi_provider_name", |e, _| {
        let n = e.provider.len().min(len.saturating_sub(1));
        // SAFETY: n + 1 <= len.
        unsafe {
            ptr::copy_nonoverlapping(e.provider.as_ptr() as *const c_char, buf, n);
            *buf.add(n) = 0;
        }
        0
    })
}

/// Adds a peer from its modex data; `local` says it runs on this host.
/// Returns its handle (> 0) or 0 on error.
///
/// # Safety
/// `addr` must be readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rustofi_add_peer(
    name: u64,
    addr: *const u8,
    len: usize,
    local: bool,
) -> usize {
    let mut handle = 0usize;
    let r = with_engine("rustofi_add_peer", |e, out| {
        // SAFETY: the contract says `addr` is readable for `len` bytes; the
        // slice does not outlive this call (add_peer copies what it keeps).
        let bytes = unsafe { std::slice::from_raw_parts(addr, len) };
        match e.add_peer(name, bytes, local, out) {
            Ok(h) => {
                handle = h;
                0
            }
            Err(err) => {
                crate::log::error(&format!("cannot add peer 0x{name:x}: {}", err.0));
                ERR
            }
        }
    });
    if r == 0 {
        handle
    } else {
        0
    }
}

/// Drains the completion queue; returns the number of events handled.
#[no_mangle]
pub extern "C" fn rustofi_progress() -> c_int {
    with_engine("rustofi_progress", |e, out| e.progress(out) as c_int)
}

fn report(r: Result<(), crate::engine::EngineError>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            crate::log::error(&e.0);
            ERR
        }
    }
}

/// Starts a send of `len` contiguous bytes.
///
/// # Safety
/// `buf` must stay readable for `len` bytes and `req` must point at a
/// request of `sizeof(mca_mtl_request_t) + rustofi_request_extra()` bytes,
/// both until the send completes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn rustofi_isend(
    peer: usize,
    ctx: u32,
    my_rank: i32,
    tag: i32,
    buf: *const c_void,
    len: usize,
    sync: bool,
    req: *mut RustofiReqHead,
) -> c_int {
    with_engine("rustofi_isend", |e, out| {
        // SAFETY: forwarded from this function's contract.
        report(unsafe {
            e.isend(
                peer,
                ctx,
                my_rank,
                tag,
                buf as *const u8,
                len,
                sync,
                ReqPtr(req as *mut Request),
                out,
            )
        })
    })
}

/// Posts a receive into `len` contiguous bytes at `buf`. `peer` is the
/// handle of a specific source (0 for any source): a receive from a peer
/// that is given up fails instead of waiting.
///
/// # Safety
/// As for `rustofi_isend`, with `buf` writable.
#[no_mangle]
pub unsafe extern "C" fn rustofi_irecv(
    ctx: u32,
    src: i32,
    peer: usize,
    tag: i32,
    buf: *mut c_void,
    len: usize,
    req: *mut RustofiReqHead,
) -> c_int {
    with_engine("rustofi_irecv", |e, out| {
        // SAFETY: forwarded from this function's contract.
        report(unsafe {
            e.irecv(
                Selector::from_mpi(ctx, src, tag),
                source_peer(peer),
                buf as *mut u8,
                len,
                ReqPtr(req as *mut Request),
                out,
            )
        })
    })
}

/// The peer of a receive's or probe's source handle (0: any source).
fn source_peer(handle: usize) -> Option<PeerId> {
    (handle != 0).then(|| PeerId::from_handle(handle))
}

fn fill_status(st: *mut RustofiStatus, p: &ProbeInfo) {
    if !st.is_null() {
        // SAFETY: the shim passes a valid status pointer or NULL.
        unsafe {
            *st = RustofiStatus {
                source: p.src,
                tag: p.tag,
                count: p.len,
            }
        };
    }
}

/// Non-blocking probe. Sets `*flag` to 1 and fills `status` if a message
/// matches.
///
/// # Safety
/// `flag` must be valid; `status` valid or NULL.
#[no_mangle]
pub unsafe extern "C" fn rustofi_iprobe(
    ctx: u32,
    src: i32,
    peer: usize,
    tag: i32,
    flag: *mut c_int,
    status: *mut RustofiStatus,
) -> c_int {
    with_engine("rustofi_iprobe", |e, out| {
        match e.iprobe(Selector::from_mpi(ctx, src, tag), source_peer(peer), out) {
            Ok(found) => {
                // SAFETY: the contract says `flag` is a valid pointer.
                unsafe { *flag = found.is_some() as c_int };
                if let Some(p) = found {
                    fill_status(status, &p);
                }
                0
            }
            Err(err) => {
                crate::log::error(&err.0);
                ERR
            }
        }
    })
}

/// Matched probe: removes a matching message and returns it in `*msg`.
///
/// # Safety
/// `flag` and `msg` must be valid; `status` valid or NULL.
#[no_mangle]
pub unsafe extern "C" fn rustofi_improbe(
    ctx: u32,
    src: i32,
    peer: usize,
    tag: i32,
    flag: *mut c_int,
    status: *mut RustofiStatus,
    msg: *mut *mut c_void,
) -> c_int {
    with_engine("rustofi_improbe", |e, out| {
        match e.improbe(Selector::from_mpi(ctx, src, tag), source_peer(peer), out) {
            Ok(found) => {
                // SAFETY: the contract says `flag` and `msg` are valid.
                unsafe {
                    *flag = found.is_some() as c_int;
                    *msg = ptr::null_mut();
                }
                if let Some((p, h)) = found {
                    fill_status(status, &p);
                    // SAFETY: `msg` is valid, as above.
                    unsafe { *msg = h.0 };
                }
                0
            }
            Err(err) => {
                crate::log::error(&err.0);
                ERR
            }
        }
    })
}

/// Receives a message returned by `rustofi_improbe`.
///
/// # Safety
/// `msg` must come from `rustofi_improbe` and be used once; the rest as
/// for `rustofi_irecv`.
#[no_mangle]
pub unsafe extern "C" fn rustofi_imrecv(
    msg: *mut c_void,
    buf: *mut c_void,
    len: usize,
    req: *mut RustofiReqHead,
) -> c_int {
    with_engine("rustofi_imrecv", |e, out| {
        // SAFETY: forwarded from this function's contract: `msg` came from
        // rustofi_improbe and is used once; `buf` and `req` as for irecv.
        report(unsafe {
            e.imrecv(
                MessageHandle(msg),
                buf as *mut u8,
                len,
                ReqPtr(req as *mut Request),
                out,
            )
        })
    })
}

/// Cancels a posted receive. Returns 1 if cancelled (the cancel callback
/// has run), 0 if it had already matched.
///
/// # Safety
/// `req` must be a receive request started by `rustofi_irecv`.
#[no_mangle]
pub unsafe extern "C" fn rustofi_cancel(req: *mut RustofiReqHead) -> c_int {
    with_engine("rustofi_cancel", |e, out| {
        match e.cancel(ReqPtr(req as *mut Request), out) {
            Ok(c) => c as c_int,
            Err(err) => {
                crate::log::error(&err.0);
                ERR
            }
        }
    })
}

/// Memory-release notices for the registration cache (one per process,
/// like the hooks that feed it).
static RELEASES: std::sync::OnceLock<std::sync::Arc<ReleaseRing>> = std::sync::OnceLock::new();

/// Open MPI's memory hooks report that `[addr, addr + len)` goes back to
/// the system. Runs inside munmap/free in any thread, possibly while
/// another thread is inside the engine: it only pushes on a lock-free ring
/// (no allocation, no lock).
#[no_mangle]
pub extern "C" fn rustofi_mem_release(addr: *mut c_void, len: usize) {
    // Nothing here can panic (the ring indexes modulo its size); the
    // guard is there so that nothing ever unwinds into munmap.
    let _ = catch_unwind(|| {
        if let Some(r) = RELEASES.get() {
            r.push(addr as usize, len);
        }
    });
}

/// Flushes outstanding sends, prints counters when `verbose >= 1`, and
/// closes every libfabric resource.
#[no_mangle]
pub extern "C" fn rustofi_finalize() -> c_int {
    guard("rustofi_finalize", || {
        let p = COMPONENT.load(Ordering::Acquire);
        if p.is_null() {
            return 0;
        }
        // SAFETY: non-null pointers in COMPONENT are leaked Boxes.
        let c = unsafe { &*p };
        let mut out = Vec::new();
        let drained = c.engine.quiesce(Duration::from_secs(10), &mut out);
        deliver(c, &mut out);
        if !drained {
            crate::log::error("finalize: some transfers did not complete within 10 s");
        }
        if c.engine.settings.verbose >= 1 {
            crate::log::info(&c.engine.stats_line(c.rank));
        }
        COMPONENT.store(ptr::null_mut(), Ordering::Release);
        // SAFETY: the pointer was a leaked Box and is no longer reachable.
        drop(unsafe { Box::from_raw(p) });
        0
    })
}

/// Routes the library's messages through the shim: called when the
/// component registers, before anything can print.
///
/// # Safety
/// `hooks` must point to a valid structure (it is copied).
#[no_mangle]
pub unsafe extern "C" fn rustofi_set_log_hooks(hooks: *const RustofiLogHooks) -> c_int {
    guard("rustofi_set_log_hooks", || {
        // SAFETY: the contract says `hooks` points to a valid structure;
        // it is copied.
        crate::log::set_hooks(unsafe { *hooks });
        0
    })
}

/// Number of MPI_T performance variables (see `pvars`).
#[no_mangle]
pub extern "C" fn rustofi_pvar_count() -> usize {
    crate::pvars::PVARS.len()
}

/// Name (after `mtl_rustofi_`), description and class of performance
/// variable `index`; the strings are static. -1 if `index` is out of range.
///
/// # Safety
/// `name`, `desc` and `class` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn rustofi_pvar_info(
    index: usize,
    name: *mut *const c_char,
    desc: *mut *const c_char,
    class: *mut RustofiPvarClass,
) -> c_int {
    guard("rustofi_pvar_info", || {
        let Some(p) = crate::pvars::PVARS.get(index) else {
            return ERR;
        };
        // SAFETY: the contract says the three pointers are valid for
        // writes; the strings written are 'static.
        unsafe {
            *name = p.name.as_ptr();
            *desc = p.desc.as_ptr();
            *class = p.class;
        }
        0
    })
}

/// Current value of performance variable `index` (0 before the engine is
/// open; after finalize, the final value). -1 if `index` is out of range.
///
/// # Safety
/// `value` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn rustofi_pvar_read(index: usize, value: *mut u64) -> c_int {
    guard("rustofi_pvar_read", || match crate::pvars::read(index) {
        Some(v) => {
            // SAFETY: the contract says `value` is valid for writes.
            unsafe { *value = v };
            0
        }
        None => ERR,
    })
}

/// Status codes passed to `recv_complete`/`send_complete`.
pub const STATUS_OK: c_int = 0;
pub const STATUS_TRUNCATED: c_int = 1;
pub const STATUS_FAILED: c_int = 2;
pub const STATUS_UNREACHABLE: c_int = 3;
const _: () = assert!(STATUS_OK == Status::Ok as c_int);
const _: () = assert!(STATUS_TRUNCATED == Status::Truncated as c_int);
const _: () = assert!(STATUS_FAILED == Status::Failed as c_int);
const _: () = assert!(STATUS_UNREACHABLE == Status::Unreachable as c_int);

// ---------------------------------------------------------------------
// Layout of the structs shared with C, field by field.
//
// The `RUSTOFI_LAYOUT_*` numbers are byte offsets and sizes on the LP64
// targets the component is built for (x86_64, aarch64). The const
// assertions below hold Rust's `#[repr(C)]` layout to them; they reach the
// shim through the cbindgen header, where `_Static_assert`s hold the C
// compiler's layout of that header to the same numbers, and also Open MPI's
// own `mca_mtl_request_t` (mirrored by `MtlRequest`) and the
// `ompi_status_public_t` fields the shim copies `RustofiStatus` and the
// receive callback's arguments into. A change on either side fails the
// build instead of corrupting memory.

/// Offsets and size of `MtlRequest`, Open MPI's `mca_mtl_request_t`.
pub const RUSTOFI_LAYOUT_MTL_REQUEST_OMPI_REQ: usize = 0;
pub const RUSTOFI_LAYOUT_MTL_REQUEST_COMPLETION_CALLBACK: usize = 8;
pub const RUSTOFI_LAYOUT_MTL_REQUEST_SIZE: usize = 16;
/// Offsets and size of `RustofiReqHead` (starts with the `mca_mtl_request_t`).
pub const RUSTOFI_LAYOUT_REQ_HEAD_MTL: usize = 0;
pub const RUSTOFI_LAYOUT_REQ_HEAD_CONVERTOR: usize = 16;
pub const RUSTOFI_LAYOUT_REQ_HEAD_BUFFER: usize = 24;
pub const RUSTOFI_LAYOUT_REQ_HEAD_LENGTH: usize = 32;
pub const RUSTOFI_LAYOUT_REQ_HEAD_FREE_AFTER: usize = 40;
pub const RUSTOFI_LAYOUT_REQ_HEAD_SIZE: usize = 48;
/// Offsets and size of `RustofiStatus`.
pub const RUSTOFI_LAYOUT_STATUS_SOURCE: usize = 0;
pub const RUSTOFI_LAYOUT_STATUS_TAG: usize = 4;
pub const RUSTOFI_LAYOUT_STATUS_COUNT: usize = 8;
pub const RUSTOFI_LAYOUT_STATUS_SIZE: usize = 16;
/// Offsets and size of `RustofiCallbacks`.
pub const RUSTOFI_LAYOUT_CALLBACKS_RECV_COMPLETE: usize = 0;
pub const RUSTOFI_LAYOUT_CALLBACKS_SEND_COMPLETE: usize = 8;
pub const RUSTOFI_LAYOUT_CALLBACKS_CANCEL_COMPLETE: usize = 16;
pub const RUSTOFI_LAYOUT_CALLBACKS_SIZE: usize = 24;
/// Offsets and size of `RustofiConfig`.
pub const RUSTOFI_LAYOUT_CONFIG_PROVIDER_INCLUDE: usize = 0;
pub const RUSTOFI_LAYOUT_CONFIG_INCLUDE_SET: usize = 8;
pub const RUSTOFI_LAYOUT_CONFIG_PROVIDER_EXCLUDE: usize = 16;
pub const RUSTOFI_LAYOUT_CONFIG_EXCLUDE_SET: usize = 24;
pub const RUSTOFI_LAYOUT_CONFIG_EAGER_LIMIT: usize = 32;
pub const RUSTOFI_LAYOUT_CONFIG_RNDV_PROTOCOL: usize = 40;
pub const RUSTOFI_LAYOUT_CONFIG_RNDV_CHUNK_SIZE: usize = 48;
pub const RUSTOFI_LAYOUT_CONFIG_RX_BUFFERS: usize = 56;
pub const RUSTOFI_LAYOUT_CONFIG_VERBOSE: usize = 64;
pub const RUSTOFI_LAYOUT_CONFIG_FAULT_INJECT: usize = 72;
pub const RUSTOFI_LAYOUT_CONFIG_SHM: usize = 80;
pub const RUSTOFI_LAYOUT_CONFIG_COALESCE: usize = 88;
pub const RUSTOFI_LAYOUT_CONFIG_NAMED: usize = 96;
pub const RUSTOFI_LAYOUT_CONFIG_MY_NAME: usize = 104;
pub const RUSTOFI_LAYOUT_CONFIG_RANK: usize = 112;
pub const RUSTOFI_LAYOUT_CONFIG_NIC: usize = 120;
pub const RUSTOFI_LAYOUT_CONFIG_MR_CACHE_SIZE: usize = 128;
pub const RUSTOFI_LAYOUT_CONFIG_MEM_HOOKS: usize = 136;
pub const RUSTOFI_LAYOUT_CONFIG_TAGGED: usize = 144;
pub const RUSTOFI_LAYOUT_CONFIG_PRIORITY: usize = 152;
pub const RUSTOFI_LAYOUT_CONFIG_STRIPE: usize = 160;
pub const RUSTOFI_LAYOUT_CONFIG_STRIPE_MIN: usize = 168;
pub const RUSTOFI_LAYOUT_CONFIG_SEND_QUEUE_LIMIT: usize = 176;
pub const RUSTOFI_LAYOUT_CONFIG_SEND_QUEUE_TOTAL: usize = 184;
pub const RUSTOFI_LAYOUT_CONFIG_PEER_TIMEOUT: usize = 192;
pub const RUSTOFI_LAYOUT_CONFIG_SIZE: usize = 200;

/// Asserts at compile time that `$ty` has size `$size` and each listed
/// field has the given offset and size (every field must be listed: the
/// field sizes must add up to the struct's size less its padding, which
/// `$pad` states).
macro_rules! assert_layout {
    ($ty:ty, size $size:expr, pad $pad:expr; $($field:ident: $fty:ty = $off:expr),+ $(,)?) => {
        const _: () = assert!(std::mem::size_of::<$ty>() == $size);
        const _: () = assert!(0 $(+ std::mem::size_of::<$fty>())+ + $pad == $size);
        $(
            const _: () = assert!(memoffset::offset_of!($ty, $field) == $off);
            const _: () = {
                // The field's declared type is `$fty` (a type mismatch fails
                // to compile).
                let _: fn(&$ty) -> &$fty = |v| &v.$field;
            };
        )+
    };
}

type RecvCb = Option<unsafe extern "C" fn(*mut RustofiReqHead, i32, i32, usize, c_int)>;
type SendCb = Option<unsafe extern "C" fn(*mut RustofiReqHead, c_int)>;
type CancelCb = Option<unsafe extern "C" fn(*mut RustofiReqHead)>;

assert_layout!(MtlRequest, size RUSTOFI_LAYOUT_MTL_REQUEST_SIZE, pad 0;
    ompi_req: *mut c_void = RUSTOFI_LAYOUT_MTL_REQUEST_OMPI_REQ,
    completion_callback: Option<unsafe extern "C" fn(*mut MtlRequest)> =
        RUSTOFI_LAYOUT_MTL_REQUEST_COMPLETION_CALLBACK,
);
assert_layout!(RustofiReqHead, size RUSTOFI_LAYOUT_REQ_HEAD_SIZE, pad 7;
    mtl: MtlRequest = RUSTOFI_LAYOUT_REQ_HEAD_MTL,
    convertor: *mut c_void = RUSTOFI_LAYOUT_REQ_HEAD_CONVERTOR,
    buffer: *mut c_void = RUSTOFI_LAYOUT_REQ_HEAD_BUFFER,
    length: usize = RUSTOFI_LAYOUT_REQ_HEAD_LENGTH,
    free_after: bool = RUSTOFI_LAYOUT_REQ_HEAD_FREE_AFTER,
);
assert_layout!(RustofiStatus, size RUSTOFI_LAYOUT_STATUS_SIZE, pad 0;
    source: i32 = RUSTOFI_LAYOUT_STATUS_SOURCE,
    tag: i32 = RUSTOFI_LAYOUT_STATUS_TAG,
    count: u64 = RUSTOFI_LAYOUT_STATUS_COUNT,
);
assert_layout!(RustofiCallbacks, size RUSTOFI_LAYOUT_CALLBACKS_SIZE, pad 0;
    recv_complete: RecvCb = RUSTOFI_LAYOUT_CALLBACKS_RECV_COMPLETE,
    send_complete: SendCb = RUSTOFI_LAYOUT_CALLBACKS_SEND_COMPLETE,
    cancel_complete: CancelCb = RUSTOFI_LAYOUT_CALLBACKS_CANCEL_COMPLETE,
);
assert_layout!(RustofiConfig, size RUSTOFI_LAYOUT_CONFIG_SIZE, pad 28;
    provider_include: *const c_char = RUSTOFI_LAYOUT_CONFIG_PROVIDER_INCLUDE,
    include_set: bool = RUSTOFI_LAYOUT_CONFIG_INCLUDE_SET,
    provider_exclude: *const c_char = RUSTOFI_LAYOUT_CONFIG_PROVIDER_EXCLUDE,
    exclude_set: bool = RUSTOFI_LAYOUT_CONFIG_EXCLUDE_SET,
    eager_limit: i64 = RUSTOFI_LAYOUT_CONFIG_EAGER_LIMIT,
    rndv_protocol: *const c_char = RUSTOFI_LAYOUT_CONFIG_RNDV_PROTOCOL,
    rndv_chunk_size: i64 = RUSTOFI_LAYOUT_CONFIG_RNDV_CHUNK_SIZE,
    rx_buffers: i64 = RUSTOFI_LAYOUT_CONFIG_RX_BUFFERS,
    verbose: i64 = RUSTOFI_LAYOUT_CONFIG_VERBOSE,
    fault_inject: *const c_char = RUSTOFI_LAYOUT_CONFIG_FAULT_INJECT,
    shm: *const c_char = RUSTOFI_LAYOUT_CONFIG_SHM,
    coalesce: i64 = RUSTOFI_LAYOUT_CONFIG_COALESCE,
    named: bool = RUSTOFI_LAYOUT_CONFIG_NAMED,
    my_name: u64 = RUSTOFI_LAYOUT_CONFIG_MY_NAME,
    rank: i64 = RUSTOFI_LAYOUT_CONFIG_RANK,
    nic: *const c_char = RUSTOFI_LAYOUT_CONFIG_NIC,
    mr_cache_size: i64 = RUSTOFI_LAYOUT_CONFIG_MR_CACHE_SIZE,
    mem_hooks: bool = RUSTOFI_LAYOUT_CONFIG_MEM_HOOKS,
    tagged: *const c_char = RUSTOFI_LAYOUT_CONFIG_TAGGED,
    priority: i64 = RUSTOFI_LAYOUT_CONFIG_PRIORITY,
    stripe: i64 = RUSTOFI_LAYOUT_CONFIG_STRIPE,
    stripe_min: i64 = RUSTOFI_LAYOUT_CONFIG_STRIPE_MIN,
    send_queue_limit: i64 = RUSTOFI_LAYOUT_CONFIG_SEND_QUEUE_LIMIT,
    send_queue_total: i64 = RUSTOFI_LAYOUT_CONFIG_SEND_QUEUE_TOTAL,
    peer_timeout: i64 = RUSTOFI_LAYOUT_CONFIG_PEER_TIMEOUT,
);
