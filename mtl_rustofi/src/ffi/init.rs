//! Start and end: parameter rules for the shim, `rustofi_init` (parameter
//! validation, provider and NIC choice, opening the engine), what the shim
//! publishes and registers, and `rustofi_finalize`.

use super::*;
use crate::proto::CacheBound;

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
            mr_cache_bytes: cfg.mr_cache_bytes,
            stripe: cfg.stripe,
            stripe_min: cfg.stripe_min,
            send_queue_limit: cfg.send_queue_limit,
            send_queue_total: cfg.send_queue_total,
            priority: cfg.priority,
            peer_timeout: cfg.peer_timeout,
            named: cfg.named,
            // Open MPI converts leniently ("abc" is 0, digits beyond 64 bits
            // wrap, an empty text is 0); where the user's text is at hand
            // it is read exactly. Values from parameter files are checked
            // as converted.
            texts: params::NUMERIC
                .iter()
                .map(|p| p.name)
                .chain(params::ENUMERATED.iter().map(|(name, _)| *name))
                .filter_map(|name| {
                    let text = std::env::var(format!("OMPI_MCA_mtl_rustofi_{name}")).ok()?;
                    Some((name, text))
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
        let mut settings = settings;
        settings.one_host = env_count("OMPI_COMM_WORLD_SIZE")
            .is_some_and(|n| env_count("OMPI_COMM_WORLD_LOCAL_SIZE") == Some(n));
        settings.world_size = env_count("OMPI_COMM_WORLD_SIZE").unwrap_or(0) as usize;
        fi_env::tune_universe(&settings);
        fi_env::tune_rxm_receive(&settings);
        fi_env::tune_rxm(&settings);
        fi_env::tune_rxd();
        let local_size = env_count("OMPI_COMM_WORLD_LOCAL_SIZE").unwrap_or(1) as usize;
        let local_job = crate::driver::shm::LocalJob {
            jobid: (cfg.my_name >> 32) as u32,
            rank: crate::topo::local_rank(),
            size: local_size,
        };
        if shm_only(&settings) {
            let same = crate::driver::SameHost {
                local: Some(local_job),
                local_required: true,
                shm: None,
                shm_required: false,
            };
            // (`local_required` has no say here: with no network rail the
            // driver opens this rail or fails.)
            match Engine::open(None, same, &[], settings.clone(), cfg.my_name) {
                Ok(engine) => {
                    if settings.verbose > 1 {
                        crate::log::info(&format!(
                            "rustofi: opened rank={} provider=none shm={}: every rank of the \
                             job is on this host and no provider was named, so libfabric is \
                             not initialised",
                            cfg.rank,
                            engine.shm_provider().unwrap_or("off"),
                        ));
                    }
                    return install(engine, cfg, cb);
                }
                Err(e) => {
                    // Every rank must make the same choice (a rank that
                    // opened a network rail could not reach one that did
                    // not), so a rank that cannot open the rail declines.
                    crate::log::problem(
                        Topic::OpenFailed,
                        &format!(
                            "{}; every rank of this job is on this host and no provider was \
                             named, so that rail is the only one (name a provider with \
                             mtl_rustofi_provider_include to use it instead)",
                            e.0
                        ),
                    );
                    return 1;
                }
            }
        }
        let (query, asked) = query_providers(&settings);
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
                if settings.explicit
                    || !settings.include.is_empty()
                    || !settings.exclude.is_empty()
                    || settings.verbose > 0
                {
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
                if shm_mode == config::ShmMode::Libfabric {
                    crate::log::problem(
                        Topic::NoShm,
                        "mtl_rustofi_shm = libfabric: libfabric offers no shm provider here",
                    );
                    return 1;
                }
                if verbose > 0 {
                    crate::log::info(&format!(
                        "mtl_rustofi_shm: libfabric offers no shm provider here; same-host \
                         peers use {}",
                        names[index]
                    ));
                }
            }
            i
        } else {
            None
        };
        // Our own shared-memory rail: the ranks of this job on this host.
        let local = config::local_wanted(shm_mode, local_size).then_some(local_job);
        let same = crate::driver::SameHost {
            local,
            local_required: shm_mode == config::ShmMode::On,
            shm,
            shm_required: shm_mode == config::ShmMode::Libfabric,
        };
        let stripe_entries: Vec<usize> = pick.stripes.iter().map(|s| s.1).collect();
        let opened = Engine::open(
            Some((list, index)),
            same,
            &stripe_entries,
            settings,
            cfg.my_name,
        );
        let engine = match opened {
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
                 stripe_nics={} nic_distance={} shm={} rma={} rndv={} eager_limit={} caps={:?}",
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
                engine
                    .net_eager_limit()
                    .map_or("none".to_string(), |l| l.to_string()),
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
        install(engine, cfg, cb)
    })
}

/// The host's physical memory in bytes and its online CPUs (at least 1
/// each, should the system not say).
fn host_memory_and_cpus() -> (usize, usize) {
    // SAFETY: sysconf has no preconditions; it answers -1 for a name the
    // system does not know, which the max below turns into 1.
    let (pages, page, cpus) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
            libc::sysconf(libc::_SC_NPROCESSORS_ONLN),
        )
    };
    let (pages, page, cpus) = (
        pages.max(1) as usize,
        page.max(1) as usize,
        cpus.max(1) as usize,
    );
    (pages.saturating_mul(page), cpus)
}

/// Makes the opened engine the component's: registration cache, MPI_T
/// variables, and the instance the MTL calls reach.
fn install(mut engine: Engine, cfg: &RustofiConfig, cb: RustofiCallbacks) -> c_int {
    let verbose = engine.settings.verbose;
    let bound = CacheBound {
        entries: engine.settings.mr_cache,
        bytes: engine.settings.mr_cache_bytes.unwrap_or_else(|| {
            let (mem, cpus) = host_memory_and_cpus();
            crate::config::default_mr_cache_bytes(mem, cpus)
        }),
    };
    if bound.entries > 0 && cfg.mem_hooks {
        engine.enable_mr_cache(bound, RELEASES.get_or_init(Default::default).clone());
    }
    if verbose > 1 {
        crate::log::info(&if bound.entries == 0 {
            "rustofi: registration cache off (mtl_rustofi_mr_cache_size 0)".to_string()
        } else if cfg.mem_hooks {
            format!(
                "rustofi: registration cache on, up to {} unused registrations of up to {} \
                 bytes together kept",
                bound.entries, bound.bytes
            )
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
        cb: cb.into(),
        rank: cfg.rank,
    });
    let old = COMPONENT.swap(Box::into_raw(comp), Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: a previous instance that was never finalised.
        drop(unsafe { Box::from_raw(old) });
    }
    0
}

/// The providers to choose among and the hints that listed them: the
/// first set of hints (most capable first) that some provider satisfies;
/// with an include list, the first set that lists the list's first name
/// libfabric offers in any set. fi_getinfo lists only the providers that
/// satisfy the hints asked, so a named one that lacks what an earlier set
/// asks for (FI_RMA, manual progress) is seen only in a later set, and
/// must still win over a later name an earlier set lists.
fn query_providers(
    settings: &config::Settings,
) -> (Result<InfoList, crate::fabric::FiError>, Option<Hints>) {
    let sets = Hints::preference(settings.tagged, settings.rndv);
    let mut last_err = crate::fabric::FiError::new("fi_getinfo", -(crate::sys::FI_ENODATA as i64));
    if settings.include.is_empty() {
        for h in sets {
            match InfoList::query(h) {
                Ok(l) => return (Ok(l), Some(h)),
                Err(e) => last_err = e,
            }
        }
        return (Err(last_err), None);
    }
    let offers =
        |l: &InfoList, item: &str| l.iter().any(|i| config::name_matches(item, &i.provider()));
    let mut lists = Vec::new();
    for h in sets {
        match InfoList::query(h) {
            Ok(l) => {
                // The list's first name wins wherever it is first offered:
                // the sets after that one cannot change the pick.
                let first_named = offers(&l, &settings.include[0]);
                lists.push((h, l));
                if first_named {
                    break;
                }
            }
            Err(e) => last_err = e,
        }
    }
    let pick = settings
        .include
        .iter()
        .find_map(|item| lists.iter().position(|(_, l)| offers(l, item)))
        // None offered: the first list that worked says what is usable,
        // for the message.
        .or((!lists.is_empty()).then_some(0));
    match pick {
        Some(i) => {
            let (h, l) = lists.swap_remove(i);
            (Ok(l), Some(h))
        }
        None => (Err(last_err), None),
    }
}

/// Whether the job needs no libfabric rail: the user named this component,
/// every rank is on this host, our own shared-memory rail serves them (shm
/// `auto` or `on`), and no provider, NIC or fault was asked for. Such a job
/// skips libfabric's start-up (every provider's initialisation, the most
/// of MPI_Init at 32 ranks on one host); naming a provider opens it, which
/// processes of other jobs (MPI_Comm_spawn, connect/accept) need.
fn shm_only(s: &config::Settings) -> bool {
    s.explicit
        && s.one_host
        && matches!(s.shm, config::ShmMode::Auto | config::ShmMode::On)
        && s.include.is_empty()
        && s.exclude.is_empty()
        && s.nic.is_empty()
        // The faults of the network rails; late_comm and excid_lost are
        // the shim's own.
        && matches!(
            s.fault,
            config::Fault::None | config::Fault::LateComm | config::Fault::ExcidLost
        )
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
        let mut out = Finished::new();
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
