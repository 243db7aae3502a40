//! Safe RAII wrappers over the libfabric handles the MTL uses.
//!
//! Ownership encodes libfabric's teardown order: every child handle holds an
//! `Arc` of its parent (endpoint → CQ, AV, domain; MR → domain; domain →
//! fabric), so a parent is closed only after all of its children. The engine
//! closes its endpoint before it frees the buffers posted on it (see
//! `engine::Engine::drop`).

use crate::config::RndvProtocol;
use crate::sys;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::Arc;

/// A libfabric error: the operation that failed and its (positive) errno.
#[derive(Debug, Clone)]
pub(crate) struct FiError {
    pub op: &'static str,
    pub code: i32,
}

impl FiError {
    pub(crate) fn new(op: &'static str, ret: i64) -> Self {
        FiError {
            op,
            code: (-ret) as i32,
        }
    }
}

impl std::fmt::Display for FiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failed: {} ({})",
            self.op,
            strerror(self.code),
            self.code
        )
    }
}

/// `fi_strerror` as an owned string.
#[cfg(not(miri))]
pub(crate) fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string
    // for any input value.
    unsafe { CStr::from_ptr(sys::fi_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

/// Miri cannot call into libfabric: the code alone.
#[cfg(miri)]
pub fn strerror(code: i32) -> String {
    format!("libfabric error {code}")
}

fn check(op: &'static str, ret: c_int) -> Result<(), FiError> {
    if ret == 0 {
        Ok(())
    } else {
        Err(FiError::new(op, ret as i64))
    }
}

/// Closes a fid, logging (not panicking on) failure; used by every Drop.
fn close_fid(fid: *mut sys::fid, what: &str) {
    if fid.is_null() {
        return;
    }
    // SAFETY: `fid` is a live handle owned by the wrapper being dropped; it
    // is closed exactly once, here.
    let ret = unsafe { sys::fi_close(fid) };
    if ret != 0 {
        tracing::warn!("fi_close({what}) failed: {}", strerror(-ret));
    }
}

pub(crate) const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The oldest API version the MTL works with (its mode bits, mr_mode bits
/// and fi_context2 are all defined from 1.9 on).
pub(crate) const API_MIN: u32 = fi_version(1, 9);

/// The API version of the headers this crate was compiled against: never
/// ask for more, since newer semantics would apply to calls and structs
/// written for these headers.
pub(crate) const API_HEADERS: u32 = fi_version(sys::FI_MAJOR_VERSION, sys::FI_MINOR_VERSION);

/// The version to ask `fi_getinfo` for: the newest the loaded libfabric
/// offers, capped by the headers, never below [`API_MIN`] (an older library
/// then refuses with one message). Asking for 1.18 or later matters on
/// EFA: its provider uses device RDMA read by default only then. What
/// changes from 1.18 on for the hints used here: nothing the MTL must undo
/// (FI_MR_LOCAL, FI_MR_PROV_KEY, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED and
/// FI_MR_ENDPOINT keep their meaning; FI_CONTEXT2 still asks for a
/// 64-byte context, which every operation gets).
pub(crate) const fn choose_api(runtime: u32, headers: u32) -> u32 {
    let v = if runtime < headers { runtime } else { headers };
    if v < API_MIN {
        API_MIN
    } else {
        v
    }
}

/// The loaded libfabric's own version (`fi_version()`).
pub(crate) fn runtime_version() -> u32 {
    // SAFETY: fi_version takes no arguments and only returns a constant.
    unsafe { sys::fi_version() }
}

/// The API version every `fi_getinfo` of this process asks for.
pub(crate) fn api_version() -> u32 {
    choose_api(runtime_version(), API_HEADERS)
}

/// `major.minor` of a packed version.
pub(crate) fn version_text(v: u32) -> String {
    format!("{}.{}", v >> 16, v & 0xffff)
}

/// An owned `fi_info` list (from `fi_getinfo` or `fi_dupinfo`).
pub(crate) struct InfoList {
    head: *mut sys::fi_info,
}

// SAFETY: an fi_info list is plain heap data with no thread affinity; it is
// only read through `&self` and freed once in Drop.
unsafe impl Send for InfoList {}
// SAFETY: `&InfoList` only reads the list (no interior mutability), and
// libfabric never writes an fi_info after returning it.
unsafe impl Sync for InfoList {}

/// What the MTL asks of a provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hints {
    pub want_rma: bool,
    /// FI_TAGGED: only for the send rendezvous, on providers without RMA
    /// (asking for it shuts out providers that lack it, such as efa-direct).
    pub want_tagged: bool,
    /// Ask for FI_PROGRESS_MANUAL (EFA's mode; it also keeps providers
    /// from starting progress threads that compete with the ranks for
    /// cores).
    pub manual_progress: bool,
}

impl Hints {
    /// What to ask for, most capable first: each combination of
    /// capabilities the rendezvous setting can use, with manual progress
    /// before automatic. `tagged`: FI_TAGGED may be used (`tagged = auto`).
    pub(crate) fn preference(tagged: bool, rndv: RndvProtocol) -> Vec<Hints> {
        // (want_rma, want_tagged)
        let caps: &[(bool, bool)] = match (rndv, tagged) {
            (RndvProtocol::Send, _) => &[(true, true), (false, true)],
            // Read without RMA fails later, with a message naming the
            // provider.
            (RndvProtocol::Read, _) => &[(true, false), (false, false)],
            (RndvProtocol::Msg, _) => &[(false, false)],
            (RndvProtocol::Auto, true) => &[(true, false), (false, true), (false, false)],
            (RndvProtocol::Auto, false) => &[(true, false), (false, false)],
        };
        [true, false]
            .iter()
            .flat_map(|&manual_progress| {
                caps.iter().map(move |&(want_rma, want_tagged)| Hints {
                    want_rma,
                    want_tagged,
                    manual_progress,
                })
            })
            .collect()
    }

    /// The capability bits asked for.
    pub(crate) fn caps(&self) -> u64 {
        let mut caps = sys::FI_MSG as u64;
        if self.want_tagged {
            caps |= sys::FI_TAGGED as u64;
        }
        if self.want_rma {
            caps |= (sys::FI_RMA | sys::FI_READ | sys::FI_REMOTE_READ) as u64;
        }
        caps
    }

    /// The capabilities asked for, by name (printed at verbose 2).
    pub(crate) fn caps_text(&self) -> String {
        let mut v = vec!["FI_MSG"];
        if self.want_tagged {
            v.push("FI_TAGGED");
        }
        if self.want_rma {
            v.extend(["FI_RMA", "FI_READ", "FI_REMOTE_READ"]);
        }
        v.join("|")
    }
}

impl InfoList {
    /// Runs `fi_getinfo` for reliable-datagram endpoints with the
    /// capabilities and mode bits the MTL supports.
    pub(crate) fn query(h: Hints) -> Result<InfoList, FiError> {
        // SAFETY: fi_allocinfo returns a zeroed fi_info with all attribute
        // structs allocated, or NULL.
        let hints = unsafe { sys::fi_allocinfo() };
        if hints.is_null() {
            return Err(FiError::new("fi_allocinfo", -(sys::FI_ENOMEM as i64)));
        }
        // SAFETY: `hints` and its attribute pointers were just allocated by
        // fi_allocinfo and are exclusively ours until fi_freeinfo below.
        let ret = unsafe {
            let hi = &mut *hints;
            hi.caps = h.caps();
            // We give every operation a struct fi_context2 of our own.
            hi.mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
            (*hi.ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
            let dom = &mut *hi.domain_attr;
            dom.mr_mode = (sys::FI_MR_LOCAL
                | sys::FI_MR_VIRT_ADDR
                | sys::FI_MR_ALLOCATED
                | sys::FI_MR_PROV_KEY
                | sys::FI_MR_ENDPOINT) as c_int;
            // All libfabric calls are made by the progress-token holder,
            // one thread at a time (CONCURRENCY.md).
            dom.threading = sys::fi_threading_FI_THREAD_DOMAIN;
            dom.resource_mgmt = sys::fi_resource_mgmt_FI_RM_ENABLED;
            if h.manual_progress {
                dom.control_progress = sys::fi_progress_FI_PROGRESS_MANUAL;
                dom.data_progress = sys::fi_progress_FI_PROGRESS_MANUAL;
            }
            let mut out: *mut sys::fi_info = ptr::null_mut();
            let r = sys::fi_getinfo(api_version(), ptr::null(), ptr::null(), 0, hints, &mut out);
            sys::fi_freeinfo(hints);
            if r == 0 {
                Ok(out)
            } else {
                Err(r)
            }
        };
        match ret {
            Ok(head) => Ok(InfoList { head }),
            Err(r) => Err(FiError::new("fi_getinfo", r as i64)),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Info<'_>> {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            // SAFETY: `cur` is a non-null node of the list owned by `self`,
            // alive for the borrow.
            let raw = unsafe { &*cur };
            let item = Info { raw };
            cur = item.raw.next;
            Some(item)
        })
    }

    /// Copies one entry into a list of its own (for opening it).
    pub(crate) fn dup_one(info: Info<'_>) -> Result<InfoList, FiError> {
        // SAFETY: `info.raw` is a valid fi_info; fi_dupinfo deep-copies it
        // (including `next`, which we clear on the copy).
        let head = unsafe { sys::fi_dupinfo(info.raw) };
        if head.is_null() {
            return Err(FiError::new("fi_dupinfo", -(sys::FI_ENOMEM as i64)));
        }
        // SAFETY: `head` is our fresh copy.
        unsafe {
            if !(*head).next.is_null() {
                sys::fi_freeinfo((*head).next);
                (*head).next = ptr::null_mut();
            }
        }
        Ok(InfoList { head })
    }

    pub(crate) fn first(&self) -> Option<Info<'_>> {
        self.iter().next()
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.head.is_null() {
            // SAFETY: the list came from fi_getinfo/fi_dupinfo and is freed once.
            unsafe { sys::fi_freeinfo(self.head) };
        }
    }
}

/// A borrowed entry of an [`InfoList`].
#[derive(Clone, Copy)]
pub(crate) struct Info<'a> {
    raw: &'a sys::fi_info,
}

fn cstr_or_empty(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: libfabric attribute strings are NUL-terminated and live as
        // long as the fi_info they belong to.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl<'a> Info<'a> {
    pub(crate) fn provider(&self) -> String {
        // SAFETY: fabric_attr is always allocated in fi_getinfo results.
        cstr_or_empty(unsafe { (*self.raw.fabric_attr).prov_name })
    }
    pub(crate) fn caps(&self) -> u64 {
        self.raw.caps
    }
    pub(crate) fn mr_mode(&self) -> u32 {
        // SAFETY: domain_attr is always allocated in fi_getinfo results.
        unsafe { (*self.raw.domain_attr).mr_mode as u32 }
    }
    pub(crate) fn max_msg_size(&self) -> usize {
        // SAFETY: ep_attr is always allocated in fi_getinfo results.
        unsafe { (*self.raw.ep_attr).max_msg_size }
    }
    pub(crate) fn iov_limit(&self) -> usize {
        // SAFETY: tx_attr is always allocated in fi_getinfo results.
        unsafe { (*self.raw.tx_attr).iov_limit }
    }
    pub(crate) fn inject_size(&self) -> usize {
        // SAFETY: tx_attr is always allocated in fi_getinfo results.
        unsafe { (*self.raw.tx_attr).inject_size }
    }
    pub(crate) fn tx_size(&self) -> usize {
        // SAFETY: tx_attr is always allocated in fi_getinfo results.
        unsafe { (*self.raw.tx_attr).size }
    }
    pub(crate) fn rx_size(&self) -> usize {
        // SAFETY: rx_attr is always allocated in fi_getinfo results.
        unsafe { (*self.raw.rx_attr).size }
    }
    /// The domain's name (EFA: the device, tcp: the interface).
    pub(crate) fn domain_name(&self) -> String {
        // SAFETY: domain_attr is always allocated in fi_getinfo results.
        cstr_or_empty(unsafe { (*self.raw.domain_attr).name })
    }
    /// The NIC's PCI address (domain, bus, device, function) when the
    /// provider reports one.
    pub(crate) fn pci_bus(&self) -> Option<(u16, u8, u8, u8)> {
        let nic = self.raw.nic;
        if nic.is_null() {
            return None;
        }
        // SAFETY: a non-null `nic` of an fi_info points to a fid_nic whose
        // attribute pointers are null or valid for the fi_info's lifetime;
        // the union is read as PCI only when bus_type says PCI.
        unsafe {
            let bus = (*nic).bus_attr;
            if bus.is_null() || (*bus).bus_type != sys::fi_bus_type_FI_BUS_PCI {
                return None;
            }
            let p = (*bus).attr.pci;
            Some((p.domain_id, p.bus_id, p.device_id, p.function_id))
        }
    }
    pub(crate) fn raw(&self) -> *mut sys::fi_info {
        self.raw as *const sys::fi_info as *mut sys::fi_info
    }
}

pub(crate) struct Fabric {
    raw: *mut sys::fid_fabric,
}
// SAFETY: the fabric handle is only used to open a domain and to close it;
// libfabric fabric objects are thread-safe for those calls.
unsafe impl Send for Fabric {}
// SAFETY: as for Send: the shared handle is only used for fi_domain and
// fi_close, which libfabric allows from any thread.
unsafe impl Sync for Fabric {}

impl Fabric {
    pub(crate) fn open(info: Info<'_>) -> Result<Arc<Fabric>, FiError> {
        let mut raw = ptr::null_mut();
        // SAFETY: fabric_attr comes from a valid fi_info; `raw` receives the handle.
        check("fi_fabric", unsafe {
            sys::fi_fabric(info.raw.fabric_attr, &mut raw, ptr::null_mut())
        })?;
        Ok(Arc::new(Fabric { raw }))
    }
}
impl Drop for Fabric {
    fn drop(&mut self) {
        close_fid(self.raw as *mut sys::fid, "fabric");
    }
}

pub(crate) struct Domain {
    raw: *mut sys::fid_domain,
    _fabric: Arc<Fabric>,
}
// SAFETY: the handle has no thread affinity and may move between threads;
// every call on the domain and its children is made by the holder of the
// progress token (see CONCURRENCY.md), one thread at a time, which is all
// FI_THREAD_DOMAIN asks.
unsafe impl Send for Domain {}
// SAFETY: `&Domain` reaches other threads, but only the progress-token
// holder calls libfabric through it, as for Send.
unsafe impl Sync for Domain {}

impl Domain {
    pub(crate) fn open(fabric: &Arc<Fabric>, info: Info<'_>) -> Result<Arc<Domain>, FiError> {
        let mut raw = ptr::null_mut();
        // SAFETY: `fabric.raw` is live (we hold an Arc); info is valid.
        check("fi_domain", unsafe {
            sys::fi_domain(fabric.raw, info.raw(), &mut raw, ptr::null_mut())
        })?;
        Ok(Arc::new(Domain {
            raw,
            _fabric: fabric.clone(),
        }))
    }
}
impl Drop for Domain {
    fn drop(&mut self) {
        close_fid(self.raw as *mut sys::fid, "domain");
    }
}

pub(crate) struct CompletionQueue {
    raw: *mut sys::fid_cq,
    _domain: Arc<Domain>,
}
// SAFETY: as for Domain: no thread affinity, and only the progress-token
// holder calls libfabric through it, one thread at a time.
unsafe impl Send for CompletionQueue {}
// SAFETY: as for Domain: shared references are only used for libfabric
// calls by the progress-token holder.
unsafe impl Sync for CompletionQueue {}

/// One completion read from the CQ.
pub(crate) type CqEntry = sys::fi_cq_tagged_entry;

/// Outcome of a CQ error read.
pub(crate) struct CqError {
    pub context: *mut c_void,
    pub err: i32,
    pub message: String,
    /// Bytes the operation moved before it failed (a truncated receive's
    /// placed bytes).
    pub len: usize,
}

impl CompletionQueue {
    pub(crate) fn open(domain: &Arc<Domain>, size: usize) -> Result<Arc<CompletionQueue>, FiError> {
        let mut attr = sys::fi_cq_attr {
            size,
            format: sys::fi_cq_format_FI_CQ_FORMAT_TAGGED,
            wait_obj: sys::fi_wait_obj_FI_WAIT_NONE,
            ..Default::default()
        };
        let mut raw = ptr::null_mut();
        // SAFETY: the domain is live; attr is a valid initialised struct.
        check("fi_cq_open", unsafe {
            sys::fi_cq_open(domain.raw, &mut attr, &mut raw, ptr::null_mut())
        })?;
        Ok(Arc::new(CompletionQueue {
            raw,
            _domain: domain.clone(),
        }))
    }

    /// Reads up to `buf.len()` completions. Ok(n) with n >= 0; Err(true) if
    /// an error entry is waiting (read it with `read_error`); Err(false) for
    /// any other failure.
    pub(crate) fn read(&self, buf: &mut [CqEntry]) -> Result<usize, i64> {
        // SAFETY: `buf` is a writable array of `buf.len()` tagged entries,
        // matching the CQ's FI_CQ_FORMAT_TAGGED.
        let r = unsafe { sys::fi_cq_read(self.raw, buf.as_mut_ptr() as *mut c_void, buf.len()) };
        if r >= 0 {
            Ok(r as usize)
        } else if r == -(sys::FI_EAGAIN as isize) {
            Ok(0)
        } else {
            Err(r as i64)
        }
    }

    pub(crate) fn read_error(&self) -> Option<CqError> {
        let mut e = sys::fi_cq_err_entry::default();
        // SAFETY: `e` is a zeroed error entry (err_data_size 0 asks for the
        // provider's own err_data buffer).
        let r = unsafe { sys::fi_cq_readerr(self.raw, &mut e, 0) };
        if r <= 0 {
            return None;
        }
        let mut text = [0 as std::os::raw::c_char; 256];
        // SAFETY: prov_errno/err_data come from the entry just read; `text`
        // is a writable buffer of the given length.
        let msg = unsafe {
            let p = sys::fi_cq_strerror(
                self.raw,
                e.prov_errno,
                e.err_data,
                text.as_mut_ptr(),
                text.len(),
            );
            cstr_or_empty(p)
        };
        Some(CqError {
            context: e.op_context,
            err: e.err,
            message: format!("{} ({})", strerror(e.err), msg),
            len: e.len,
        })
    }
}
impl Drop for CompletionQueue {
    fn drop(&mut self) {
        close_fid(self.raw as *mut sys::fid, "cq");
    }
}

pub(crate) struct AddressVector {
    raw: *mut sys::fid_av,
    _domain: Arc<Domain>,
}
// SAFETY: as for Domain: no thread affinity, and only the progress-token
// holder calls libfabric through it, one thread at a time.
unsafe impl Send for AddressVector {}
// SAFETY: as for Domain: shared references are only used for libfabric
// calls by the progress-token holder.
unsafe impl Sync for AddressVector {}

impl AddressVector {
    /// An AV expecting `count` addresses (0: the provider's default). fi_av
    /// takes the count as a hint for its first allocation: libfabric's
    /// utility AV (rxm's) allocates entries for the whole universe (1024,
    /// 128 KiB, all touched) on the first insert unless told, and grows past
    /// the count when more peers arrive.
    pub(crate) fn open(domain: &Arc<Domain>, count: usize) -> Result<Arc<AddressVector>, FiError> {
        let mut attr = sys::fi_av_attr {
            type_: sys::fi_av_type_FI_AV_UNSPEC,
            count: count as _,
            ..Default::default()
        };
        let mut raw = ptr::null_mut();
        // SAFETY: the domain is live; attr is initialised.
        check("fi_av_open", unsafe {
            sys::fi_av_open(domain.raw, &mut attr, &mut raw, ptr::null_mut())
        })?;
        Ok(Arc::new(AddressVector {
            raw,
            _domain: domain.clone(),
        }))
    }

    /// Inserts one endpoint name and returns its fi_addr.
    pub(crate) fn insert(&self, name: &[u8]) -> Result<u64, FiError> {
        let mut addr: sys::fi_addr_t = 0;
        // SAFETY: `name` is a readable endpoint name of its length; one
        // address is inserted and written to `addr`.
        let r = unsafe {
            sys::fi_av_insert(
                self.raw,
                name.as_ptr() as *const c_void,
                1,
                &mut addr,
                0,
                ptr::null_mut(),
            )
        };
        if r == 1 {
            Ok(addr)
        } else {
            Err(FiError::new(
                "fi_av_insert",
                if r < 0 {
                    r as i64
                } else {
                    -(sys::FI_EINVAL as i64)
                },
            ))
        }
    }
}
impl Drop for AddressVector {
    fn drop(&mut self) {
        close_fid(self.raw as *mut sys::fid, "av");
    }
}

pub(crate) struct Endpoint {
    raw: *mut sys::fid_ep,
    _cq: Arc<CompletionQueue>,
    _av: Arc<AddressVector>,
    _domain: Arc<Domain>,
}
// SAFETY: as for Domain: no thread affinity, and only the progress-token
// holder calls libfabric through it, one thread at a time.
unsafe impl Send for Endpoint {}
// SAFETY: as for Domain: shared references are only used for libfabric
// calls by the progress-token holder.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// Opens an endpoint, binds one CQ for transmit and receive and the AV,
    /// and enables it.
    pub(crate) fn open(
        domain: &Arc<Domain>,
        info: Info<'_>,
        cq: &Arc<CompletionQueue>,
        av: &Arc<AddressVector>,
    ) -> Result<Endpoint, FiError> {
        let mut raw = ptr::null_mut();
        // SAFETY: domain and info are valid; `raw` receives the endpoint.
        check("fi_endpoint", unsafe {
            sys::fi_endpoint(domain.raw, info.raw(), &mut raw, ptr::null_mut())
        })?;
        let ep = Endpoint {
            raw,
            _cq: cq.clone(),
            _av: av.clone(),
            _domain: domain.clone(),
        };
        // SAFETY: ep, cq and av are live handles of the same domain.
        unsafe {
            check(
                "fi_ep_bind(cq)",
                sys::fi_ep_bind(
                    ep.raw,
                    cq.raw as *mut sys::fid,
                    (sys::FI_TRANSMIT | sys::FI_RECV) as u64,
                ),
            )?;
            check(
                "fi_ep_bind(av)",
                sys::fi_ep_bind(ep.raw, av.raw as *mut sys::fid, 0),
            )?;
            check("fi_enable", sys::fi_enable(ep.raw))?;
        }
        Ok(ep)
    }

    /// The endpoint's own address, to publish through the modex.
    pub(crate) fn name(&self) -> Result<Vec<u8>, FiError> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: `buf` is writable for `len` bytes; fi_getname updates len.
        let mut r = unsafe {
            sys::fi_getname(
                self.raw as *mut sys::fid,
                buf.as_mut_ptr() as *mut c_void,
                &mut len,
            )
        };
        if r == -(sys::FI_ETOOSMALL as i32) {
            buf.resize(len, 0);
            // SAFETY: as above with the size the provider asked for.
            r = unsafe {
                sys::fi_getname(
                    self.raw as *mut sys::fid,
                    buf.as_mut_ptr() as *mut c_void,
                    &mut len,
                )
            };
        }
        check("fi_getname", r)?;
        buf.truncate(len);
        Ok(buf)
    }

    pub(crate) fn raw(&self) -> *mut sys::fid_ep {
        self.raw
    }
}
impl Drop for Endpoint {
    fn drop(&mut self) {
        close_fid(self.raw as *mut sys::fid, "endpoint");
    }
}

/// A registered memory region.
pub(crate) struct MemoryRegion {
    raw: *mut sys::fid_mr,
    _domain: Arc<Domain>,
}
// SAFETY: as for Domain: no thread affinity, and only the progress-token
// holder calls libfabric through it, one thread at a time.
unsafe impl Send for MemoryRegion {}
// SAFETY: as for Domain: shared references are only used for libfabric
// calls by the progress-token holder.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers `[addr, addr+len)` with `access` flags. With FI_MR_ENDPOINT
    /// the region is bound to `ep` and enabled, as that mode requires.
    ///
    /// # Safety
    /// The memory must stay valid until the region is dropped.
    pub(crate) unsafe fn register(
        domain: &Arc<Domain>,
        addr: *const u8,
        len: usize,
        access: u64,
        requested_key: u64,
        bind_ep: Option<&Endpoint>,
    ) -> Result<MemoryRegion, FiError> {
        let mut raw = ptr::null_mut();
        // SAFETY: caller guarantees the buffer's lifetime; domain is live.
        check("fi_mr_reg", unsafe {
            sys::fi_mr_reg(
                domain.raw,
                addr as *const c_void,
                len,
                access,
                0,
                requested_key,
                0,
                &mut raw,
                ptr::null_mut(),
            )
        })?;
        let mr = MemoryRegion {
            raw,
            _domain: domain.clone(),
        };
        if let Some(ep) = bind_ep {
            // SAFETY: the MR and endpoint are live and of the same domain.
            unsafe {
                check(
                    "fi_mr_bind",
                    sys::fi_mr_bind(mr.raw, ep.raw as *mut sys::fid, 0),
                )?;
                check("fi_mr_enable", sys::fi_mr_enable(mr.raw))?;
            }
        }
        Ok(mr)
    }

    pub(crate) fn desc(&self) -> *mut c_void {
        // SAFETY: the MR is live.
        unsafe { sys::fi_mr_desc(self.raw) }
    }

    pub(crate) fn key(&self) -> u64 {
        // SAFETY: the MR is live.
        unsafe { sys::fi_mr_key(self.raw) }
    }
}
impl Drop for MemoryRegion {
    fn drop(&mut self) {
        close_fid(self.raw as *mut sys::fid, "mr");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_is_the_newest_both_offer() {
        let v = fi_version;
        // A newer library than the headers: the headers' version.
        assert_eq!(choose_api(v(2, 1), v(1, 17)), v(1, 17));
        assert_eq!(choose_api(v(1, 22), v(1, 18)), v(1, 18));
        // An older library than the headers: the library's.
        assert_eq!(choose_api(v(1, 18), v(2, 0)), v(1, 18));
        assert_eq!(choose_api(v(1, 17), v(1, 17)), v(1, 17));
        // Never below the minimum (the library then refuses, cleanly).
        assert_eq!(choose_api(v(1, 5), v(1, 17)), API_MIN);
        assert_eq!(version_text(v(1, 18)), "1.18");
        const { assert!(API_HEADERS >= API_MIN) };
    }

    #[test]
    fn tagged_is_asked_for_only_where_the_send_rendezvous_needs_it() {
        let tagged = |h: &[Hints]| h.iter().filter(|h| h.want_tagged).count();
        let off = Hints::preference(false, RndvProtocol::Auto);
        assert_eq!(tagged(&off), 0);
        assert!(off.iter().all(|h| h.caps() & sys::FI_TAGGED as u64 == 0));
        let auto = Hints::preference(true, RndvProtocol::Auto);
        // With RMA, tagged is never asked for; without, it is tried first.
        assert!(auto.iter().all(|h| !(h.want_rma && h.want_tagged)));
        assert_eq!(tagged(&auto), 2);
        assert_eq!(auto[0].caps_text(), "FI_MSG|FI_RMA|FI_READ|FI_REMOTE_READ");
        assert!(auto[0].manual_progress && !auto.last().unwrap().manual_progress);
        let send = Hints::preference(true, RndvProtocol::Send);
        assert!(send.iter().all(|h| h.want_tagged));
        assert_eq!(tagged(&Hints::preference(true, RndvProtocol::Msg)), 0);
        assert_eq!(tagged(&Hints::preference(true, RndvProtocol::Read)), 0);
    }
}
