/*
 * mtl_rustofi: the component as Open MPI sees it. Its structure and MCA
 * parameters, init and finalize (the Rust library's start, the modex
 * publish of the endpoint name, the memory hooks, the progress hook) and
 * peers (modex lookup, proc to peer handle). The point-to-point calls are
 * in rustofi_p2p.c, communicator ids in rustofi_excid.c (rustofi_shim.h
 * lists what the files share).
 */

#include "rustofi_shim.h"

/*
 * Layout of the structs shared with the Rust library, field by field. The
 * RUSTOFI_LAYOUT_* numbers come from ffi/layout.rs, where const assertions hold
 * Rust's layout to them; here the C compiler's layout of rustofi.h is held
 * to the same numbers, and so are Open MPI's own types where a Rust struct
 * mirrors one (mca_mtl_request_t) or the shim copies a field into one
 * (ompi_status_public_t).
 */
#define FIELD_SIZE(type, field) sizeof(((type *) 0)->field)
#define ASSERT_FIELD(type, field, off)                                      \
    _Static_assert(offsetof(type, field) == (off),                          \
                   "offset of " #type "." #field " differs from ffi/layout.rs")
#define ASSERT_SAME_FIELD(type, field, mirror, mfield)                      \
    _Static_assert(offsetof(type, field) == offsetof(mirror, mfield)        \
                       && FIELD_SIZE(type, field) == FIELD_SIZE(mirror, mfield), \
                   #mirror "." #mfield " does not mirror " #type "." #field)

/* MtlRequest mirrors Open MPI's mca_mtl_request_t. */
ASSERT_FIELD(mca_mtl_request_t, ompi_req, RUSTOFI_LAYOUT_MTL_REQUEST_OMPI_REQ);
ASSERT_FIELD(mca_mtl_request_t, completion_callback,
             RUSTOFI_LAYOUT_MTL_REQUEST_COMPLETION_CALLBACK);
_Static_assert(sizeof(mca_mtl_request_t) == RUSTOFI_LAYOUT_MTL_REQUEST_SIZE,
               "size of mca_mtl_request_t differs from ffi/layout.rs");
ASSERT_SAME_FIELD(mca_mtl_request_t, ompi_req, MtlRequest, ompi_req);
ASSERT_SAME_FIELD(mca_mtl_request_t, completion_callback, MtlRequest, completion_callback);
_Static_assert(sizeof(MtlRequest) == sizeof(mca_mtl_request_t),
               "Rust mirror of mca_mtl_request_t has the wrong size");

/* RustofiReqHead: the request pml/cm allocates, mca_mtl_request_t first. */
ASSERT_FIELD(RustofiReqHead, mtl, RUSTOFI_LAYOUT_REQ_HEAD_MTL);
ASSERT_FIELD(RustofiReqHead, convertor, RUSTOFI_LAYOUT_REQ_HEAD_CONVERTOR);
ASSERT_FIELD(RustofiReqHead, buffer, RUSTOFI_LAYOUT_REQ_HEAD_BUFFER);
ASSERT_FIELD(RustofiReqHead, length, RUSTOFI_LAYOUT_REQ_HEAD_LENGTH);
ASSERT_FIELD(RustofiReqHead, free_after, RUSTOFI_LAYOUT_REQ_HEAD_FREE_AFTER);
_Static_assert(sizeof(RustofiReqHead) == RUSTOFI_LAYOUT_REQ_HEAD_SIZE,
               "size of RustofiReqHead differs from ffi/layout.rs");
_Static_assert(0 == RUSTOFI_LAYOUT_REQ_HEAD_MTL,
               "a mca_mtl_request_t pointer must also point at its RustofiReqHead");

/* RustofiStatus (filled by Rust) and the receive callback's source, tag and
 * byte count are copied into ompi_status_public_t. */
ASSERT_FIELD(RustofiStatus, source, RUSTOFI_LAYOUT_STATUS_SOURCE);
ASSERT_FIELD(RustofiStatus, tag, RUSTOFI_LAYOUT_STATUS_TAG);
ASSERT_FIELD(RustofiStatus, count, RUSTOFI_LAYOUT_STATUS_COUNT);
_Static_assert(sizeof(RustofiStatus) == RUSTOFI_LAYOUT_STATUS_SIZE,
               "size of RustofiStatus differs from ffi/layout.rs");
_Static_assert(FIELD_SIZE(RustofiStatus, source) == FIELD_SIZE(ompi_status_public_t, MPI_SOURCE)
                   && FIELD_SIZE(RustofiStatus, tag) == FIELD_SIZE(ompi_status_public_t, MPI_TAG)
                   && FIELD_SIZE(RustofiStatus, count) == FIELD_SIZE(ompi_status_public_t, _ucount)
                   && sizeof(size_t) == FIELD_SIZE(ompi_status_public_t, _ucount),
               "RustofiStatus fields do not fit ompi_status_public_t");

/* RustofiCallbacks and RustofiConfig: filled here, read by Rust. */
ASSERT_FIELD(RustofiCallbacks, recv_complete, RUSTOFI_LAYOUT_CALLBACKS_RECV_COMPLETE);
ASSERT_FIELD(RustofiCallbacks, send_complete, RUSTOFI_LAYOUT_CALLBACKS_SEND_COMPLETE);
ASSERT_FIELD(RustofiCallbacks, cancel_complete, RUSTOFI_LAYOUT_CALLBACKS_CANCEL_COMPLETE);
_Static_assert(sizeof(RustofiCallbacks) == RUSTOFI_LAYOUT_CALLBACKS_SIZE,
               "size of RustofiCallbacks differs from ffi/layout.rs");
ASSERT_FIELD(RustofiConfig, provider_include, RUSTOFI_LAYOUT_CONFIG_PROVIDER_INCLUDE);
ASSERT_FIELD(RustofiConfig, include_set, RUSTOFI_LAYOUT_CONFIG_INCLUDE_SET);
ASSERT_FIELD(RustofiConfig, provider_exclude, RUSTOFI_LAYOUT_CONFIG_PROVIDER_EXCLUDE);
ASSERT_FIELD(RustofiConfig, exclude_set, RUSTOFI_LAYOUT_CONFIG_EXCLUDE_SET);
ASSERT_FIELD(RustofiConfig, eager_limit, RUSTOFI_LAYOUT_CONFIG_EAGER_LIMIT);
ASSERT_FIELD(RustofiConfig, rndv_protocol, RUSTOFI_LAYOUT_CONFIG_RNDV_PROTOCOL);
ASSERT_FIELD(RustofiConfig, rndv_chunk_size, RUSTOFI_LAYOUT_CONFIG_RNDV_CHUNK_SIZE);
ASSERT_FIELD(RustofiConfig, rx_buffers, RUSTOFI_LAYOUT_CONFIG_RX_BUFFERS);
ASSERT_FIELD(RustofiConfig, verbose, RUSTOFI_LAYOUT_CONFIG_VERBOSE);
ASSERT_FIELD(RustofiConfig, fault_inject, RUSTOFI_LAYOUT_CONFIG_FAULT_INJECT);
ASSERT_FIELD(RustofiConfig, shm, RUSTOFI_LAYOUT_CONFIG_SHM);
ASSERT_FIELD(RustofiConfig, coalesce, RUSTOFI_LAYOUT_CONFIG_COALESCE);
ASSERT_FIELD(RustofiConfig, named, RUSTOFI_LAYOUT_CONFIG_NAMED);
ASSERT_FIELD(RustofiConfig, my_name, RUSTOFI_LAYOUT_CONFIG_MY_NAME);
ASSERT_FIELD(RustofiConfig, rank, RUSTOFI_LAYOUT_CONFIG_RANK);
ASSERT_FIELD(RustofiConfig, nic, RUSTOFI_LAYOUT_CONFIG_NIC);
ASSERT_FIELD(RustofiConfig, mr_cache_size, RUSTOFI_LAYOUT_CONFIG_MR_CACHE_SIZE);
ASSERT_FIELD(RustofiConfig, mem_hooks, RUSTOFI_LAYOUT_CONFIG_MEM_HOOKS);
ASSERT_FIELD(RustofiConfig, tagged, RUSTOFI_LAYOUT_CONFIG_TAGGED);
ASSERT_FIELD(RustofiConfig, priority, RUSTOFI_LAYOUT_CONFIG_PRIORITY);
ASSERT_FIELD(RustofiConfig, stripe, RUSTOFI_LAYOUT_CONFIG_STRIPE);
ASSERT_FIELD(RustofiConfig, stripe_min, RUSTOFI_LAYOUT_CONFIG_STRIPE_MIN);
ASSERT_FIELD(RustofiConfig, send_queue_limit, RUSTOFI_LAYOUT_CONFIG_SEND_QUEUE_LIMIT);
ASSERT_FIELD(RustofiConfig, send_queue_total, RUSTOFI_LAYOUT_CONFIG_SEND_QUEUE_TOTAL);
ASSERT_FIELD(RustofiConfig, peer_timeout, RUSTOFI_LAYOUT_CONFIG_PEER_TIMEOUT);
ASSERT_FIELD(RustofiConfig, mr_cache_bytes, RUSTOFI_LAYOUT_CONFIG_MR_CACHE_BYTES);
_Static_assert(sizeof(RustofiConfig) == RUSTOFI_LAYOUT_CONFIG_SIZE,
               "size of RustofiConfig differs from ffi/layout.rs");

/* ------------------------------------------------------------------ */
/* MCA parameters                                                      */

/* Numeric parameters are all registered as 64-bit longs (see reg_long). */
static long param_priority = 25;
static char *param_include = NULL;
static char *param_exclude = NULL;
static char *param_nic = NULL;
static long param_eager_limit = -1;
long rustofi_param_verbose = 0;
static long param_coalesce = 1;
static long param_mr_cache_size = 64;
static long param_mr_cache_bytes = -1;
static long param_stripe = 0;
static long param_stripe_min = 1L << 20;
static long param_send_queue_limit = 4L << 20;
static long param_send_queue_total = 32L << 20;
static long param_rndv_chunk = 64L * 1024 * 1024;
static long param_rx_buffers = 256;
long rustofi_param_peer_timeout = 30;
static int idx_include = -1;
static int idx_exclude = -1;

static int rustofi_component_register(void);
static int rustofi_component_open(void);
static int rustofi_component_close(void);
static int rustofi_component_query(mca_base_module_t **module, int *priority);
#if OMPI_MAJOR_VERSION >= 5
static mca_mtl_base_module_t *rustofi_component_init(bool enable_progress_threads,
                                                     bool enable_mpi_threads,
                                                     bool *accelerator_support);
#else
static mca_mtl_base_module_t *rustofi_component_init(bool enable_progress_threads,
                                                     bool enable_mpi_threads);
#endif

mca_mtl_base_component_2_0_0_t mca_mtl_rustofi_component = {
    .mtl_version = {
        MCA_MTL_BASE_VERSION_2_0_0,
        .mca_component_name = "rustofi",
        MCA_BASE_MAKE_VERSION(component, OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
                              OMPI_RELEASE_VERSION),
        .mca_open_component = rustofi_component_open,
        .mca_close_component = rustofi_component_close,
        .mca_query_component = rustofi_component_query,
        .mca_register_component_params = rustofi_component_register,
    },
    .mtl_data = {MCA_BASE_METADATA_PARAM_NONE},
    .mtl_init = rustofi_component_init,
#if OMPI_MAJOR_VERSION >= 5
    /* Device (GPU) buffers are not handled here: Open MPI's datatype
     * helpers for MTLs (ompi_mtl_datatype_pack, _recv_buf) stage them
     * through host memory for an MTL without it, and the shim's own
     * fast path for contiguous sends leaves device buffers to them. */
    .accelerator_support = false,
#endif
};

/*
 * A numeric parameter. Registered as a 64-bit long whatever its range, so
 * Open MPI takes any value it can parse without a message of its own (as
 * an int, a value that does not fit draws Open MPI's "invalid value" and
 * silently keeps the default); the Rust side checks the range and declines
 * with one message naming the parameter. The range rule comes from the
 * Rust table (rustofi_param_rule) and is appended to the help text.
 */
static int reg_long(const char *name, const char *help, int level, long *storage)
{
    const char *rule = rustofi_param_rule(name);
    char text[1024];
    if (NULL == rule) {
        opal_output(0, "mtl_rustofi: parameter %s has no range rule", name);
        return OPAL_ERROR;
    }
    snprintf(text, sizeof(text), "%s (range: %s)", help, rule);
    /* The variable system keeps its own copy of the help text. */
    return mca_base_component_var_register(&mca_mtl_rustofi_component.mtl_version, name, text,
                                           MCA_BASE_VAR_TYPE_LONG, NULL, 0, 0, level,
                                           MCA_BASE_VAR_SCOPE_READONLY, storage);
}

static int reg_string(const char *name, const char *help, int level, char **storage)
{
    return mca_base_component_var_register(&mca_mtl_rustofi_component.mtl_version, name, help,
                                           MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, level,
                                           MCA_BASE_VAR_SCOPE_READONLY, storage);
}

/*
 * The MCA loader checks only the MCA interface version, which 4.1 and 5.0
 * share, not the MTL ABI: a build for one series loaded into the other would
 * crash. So before anything else, compare the series this file was compiled
 * for with the running library's (MPI_Get_library_version may be called
 * before MPI_Init and is answered by whichever libmpi the process runs).
 * On a mismatch the component registers nothing (the variable API may differ
 * too) and its init declines before touching its arguments (the mtl_init
 * signatures differ); the component stays loaded, so Open MPI does not add
 * a "requested component not found" error of its own.
 */
static bool rustofi_wrong_series = false;

static bool rustofi_version_matches(void)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0, major = -1, minor = -1, release = -1;
    MPI_Get_library_version(lib, &len);
    const char *v = strstr(lib, "Open MPI v");
    if (NULL != v) {
        sscanf(v, "Open MPI v%d.%d.%d", &major, &minor, &release);
    }
    if (major == OMPI_MAJOR_VERSION) {
        return true;
    }
    fprintf(stderr,
            "mtl_rustofi: this build of mca_mtl_rustofi.so is for Open MPI %d.%d.%d but the "
            "running Open MPI is %d.%d.%d; the component disables itself (rebuild it against "
            "this Open MPI: scripts/build --ompi PREFIX)\n",
            OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION, major, minor, release);
    return false;
}

static int rustofi_component_register(void)
{
    if (!rustofi_version_matches()) {
        rustofi_wrong_series = true;
        return OMPI_SUCCESS;
    }
    rustofi_site_hooks(&mca_mtl_rustofi_component.mtl_version);
    reg_long("priority",
             "Priority of the rustofi MTL; pml cm competes with pml ob1 (20) at this value",
             OPAL_INFO_LVL_3, &param_priority);
    idx_include = reg_string(
        "provider_include",
        "Comma-separated libfabric providers to use, first one offered wins (e.g. efa, tcp, udp, shm, "
        "sockets); a name matches any layer of a provider such as tcp;ofi_rxm. Cannot be combined "
        "with provider_exclude",
        OPAL_INFO_LVL_1, &param_include);
    idx_exclude = reg_string(
        "provider_exclude",
        "Comma-separated libfabric providers never to use. Cannot be combined with "
        "provider_include. When neither is set and the component is not named with --mca mtl, "
        "software providers (shm, sockets, tcp, udp, rstream, net) are excluded",
        OPAL_INFO_LVL_1, &param_exclude);
    reg_string("nic",
               "Comma-separated NICs (libfabric domains of the chosen provider, e.g. "
               "rdmap16s27-rdm or eth1) this process may use; among them, or among all NICs but "
               "loopback when unset, each process takes the nearest to its CPUs and spreads over "
               "equally near ones by local rank",
               OPAL_INFO_LVL_3, &param_nic);
    reg_long("eager_limit",
             "Largest message sent eagerly; larger ones use the rendezvous protocol. -1 "
             "(default) picks it per provider: 65536 for tcp (rxm's eager limit is raised to "
             "match), 4048 for shm (its inject size less our header), 1024 for udp (a packet "
             "within one ofi_rxd datagram), 8192 for the others",
             OPAL_INFO_LVL_3, &param_eager_limit);
    reg_long("verbose",
             "Verbosity: 1 prints one line of traffic counters per rank at finalize and a "
             "report of what waits when nothing has moved for 10 s, 2 also the chosen "
             "provider and capabilities at startup",
             OPAL_INFO_LVL_1, &rustofi_param_verbose);
    reg_long("rndv_chunk_size",
             "Largest single libfabric transfer of a rendezvous (also capped by the provider's "
             "max_msg_size)",
             OPAL_INFO_LVL_5, &param_rndv_chunk);
    reg_long("coalesce",
             "1: back-to-back small eager sends to one peer, issued while an earlier packet to "
             "it is still in flight, share one packet (sent at the next call into the MTL that "
             "is not such a send, or when full); 0: every message is its own packet",
             OPAL_INFO_LVL_4, &param_coalesce);
    reg_long("mr_cache_size",
             "Registration cache: most registrations of rendezvous user buffers kept unused for "
             "reuse, least recently used evicted first (0: register every transfer). Active only "
             "where Open MPI's memory hooks report munmap and free",
             OPAL_INFO_LVL_4, &param_mr_cache_size);
    reg_long("mr_cache_bytes",
             "Registration cache: most bytes of user memory its unused registrations may "
             "cover (keep pinned), least recently used evicted first; a registration larger "
             "than this is not kept once unused. -1 (default): the host's physical memory "
             "divided by its CPUs, so that the ranks of a full node together keep at most the "
             "host's memory",
             OPAL_INFO_LVL_4, &param_mr_cache_bytes);
    reg_long("stripe",
             "Most NICs a large read rendezvous spreads over, the rank's own NIC included: "
             "1 keeps every transfer on the rank's own NIC; 0 (default) uses every NIC of the "
             "provider as near to the rank as its own (one endpoint per NIC). A peer is read "
             "through the NICs both ranks have besides their own",
             OPAL_INFO_LVL_4, &param_stripe);
    reg_long("stripe_min",
             "Smallest read rendezvous, in bytes, spread over several NICs (see "
             "mtl_rustofi_stripe)",
             OPAL_INFO_LVL_5, &param_stripe_min);
    reg_long("rx_buffers", "Receive bounce buffers kept posted", OPAL_INFO_LVL_5,
             &param_rx_buffers);
    reg_long("send_queue_limit",
             "Bytes the component may hold for one peer's sends that the provider has not "
             "completed (bounce buffers and bookkeeping); beyond it a send is not copied but "
             "waits: MPI_Send blocks and MPI_Isend stays incomplete while progress drains the "
             "queue",
             OPAL_INFO_LVL_4, &param_send_queue_limit);
    reg_long("send_queue_total",
             "Bytes the component may hold for uncompleted sends to all peers together; beyond "
             "it sends wait as with send_queue_limit",
             OPAL_INFO_LVL_4, &param_send_queue_total);
    reg_long("peer_timeout",
             "Seconds within which operations waiting on a peer whose process died (or that the "
             "provider reports unreachable) fail with an error: such peers are probed while "
             "something waits on them; a live peer that is merely busy is never failed "
             "(0: never probe)",
             OPAL_INFO_LVL_4, &rustofi_param_peer_timeout);
    /* enumerated parameters (rndv_protocol, shm, fault_inject) and the
     * MPI_T performance variables */
    return rustofi_site_register(&mca_mtl_rustofi_component.mtl_version);
}

static int rustofi_component_open(void)
{
    return OMPI_SUCCESS;
}

static int rustofi_component_close(void)
{
    return OMPI_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Module                                                              */

static int rustofi_add_procs(struct mca_mtl_base_module_t *mtl, size_t nprocs,
                             struct ompi_proc_t **procs);
static int rustofi_del_procs(struct mca_mtl_base_module_t *mtl, size_t nprocs,
                             struct ompi_proc_t **procs);
static int rustofi_mtl_finalize(struct mca_mtl_base_module_t *mtl);

static mca_mtl_base_module_t rustofi_module = {
#if OMPI_MAJOR_VERSION >= 5
    .mtl_max_contextid = RUSTOFI_EXCID_CTX - 1,
#else
    .mtl_max_contextid = 0x7fffffff,
#endif
    .mtl_max_tag = 0x7fffffff,
    .mtl_request_size = 0,
    /* All procs are added at MPI_Init, so an incoming packet's sender is
     * always known. */
#if OMPI_MAJOR_VERSION >= 5
    .mtl_flags = MCA_MTL_BASE_FLAG_REQUIRE_WORLD | MCA_MTL_BASE_FLAG_SUPPORTS_EXT_CID,
#else
    .mtl_flags = MCA_MTL_BASE_FLAG_REQUIRE_WORLD,
#endif
    .mtl_add_procs = rustofi_add_procs,
    .mtl_del_procs = rustofi_del_procs,
    .mtl_finalize = rustofi_mtl_finalize,
    .mtl_send = rustofi_send,
    .mtl_isend = rustofi_mtl_isend,
    .mtl_irecv = rustofi_mtl_irecv,
    .mtl_iprobe = rustofi_mtl_iprobe,
    .mtl_imrecv = rustofi_mtl_imrecv,
    .mtl_improbe = rustofi_mtl_improbe,
    .mtl_cancel = rustofi_mtl_cancel,
    .mtl_add_comm = rustofi_add_comm,
    .mtl_del_comm = rustofi_del_comm,
};

static int rustofi_component_query(mca_base_module_t **module, int *priority)
{
    /* A priority outside its range makes init decline with a message;
     * until then it must still fit the int Open MPI asks for. */
    *priority = param_priority < 0 ? 0 : param_priority > 1000 ? 1000 : (int) param_priority;
    *module = (mca_base_module_t *) &rustofi_module;
    return OMPI_SUCCESS;
}

/* Whether the user asked for this component by name (--mca mtl rustofi). */
static bool rustofi_named(void)
{
    const char **value = NULL;
    int idx = mca_base_var_find("ompi", "mtl", NULL, NULL);
    if (idx < 0 || OPAL_SUCCESS != mca_base_var_get_value(idx, &value, NULL, NULL)
        || NULL == value || NULL == *value || '^' == (*value)[0]) {
        return false;
    }
    char *copy = strdup(*value), *save = NULL;
    bool found = false;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (' ' == *tok) {
            tok++;
        }
        if (0 == strncmp(tok, "rustofi", 7) && ('\0' == tok[7] || ' ' == tok[7])) {
            found = true;
        }
    }
    free(copy);
    return found;
}

static bool var_is_set(int idx)
{
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;
    if (idx < 0 || OPAL_SUCCESS != mca_base_var_get_value(idx, NULL, &source, NULL)) {
        return false;
    }
    return MCA_BASE_VAR_SOURCE_DEFAULT != source;
}

static uint64_t proc_name64(const opal_process_name_t *name)
{
    return ((uint64_t) name->jobid << 32) | (uint64_t) name->vpid;
}

/*
 * The shm rail's endpoint lives in a shared-memory file that libfabric
 * unlinks when the endpoint closes (and on SIGINT/SIGTERM), but not when
 * the process is killed outright. As btl/vader does with its segment, the
 * path is registered with the runtime's PMIx server, which removes it when
 * the job ends, however this rank ended. Registration failing only loses
 * that safety net, so it is reported at verbose level and not fatal.
 */
static void rustofi_register_shm_cleanup(void)
{
    char path[512];
    if (0 != rustofi_shm_segment(path, sizeof(path))) {
        return;
    }
#if OMPI_MAJOR_VERSION >= 5
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, PMIX_REGISTER_CLEANUP, path, PMIX_STRING);
    pmix_status_t rc = PMIx_Job_control(NULL, 0, &info, 1, NULL, NULL);
    PMIX_INFO_DESTRUCT(&info);
    int ok = PMIX_SUCCESS == rc || PMIX_OPERATION_SUCCEEDED == rc;
#else
    int ok = NULL != opal_pmix.register_cleanup
             && OPAL_SUCCESS == opal_pmix.register_cleanup(path, false, false, false);
#endif
    if (!ok && rustofi_param_verbose >= 1) {
        opal_output(0, "mtl_rustofi: could not register %s for cleanup with the runtime; a "
                       "rank killed outright would leave it behind", path);
    }
}

/* Registration cache: Open MPI's memory hooks (same interface in 4.1 and
 * 5.0) report memory going back to the system. The callback runs inside
 * munmap/free in any thread; the Rust side only pushes on a lock-free ring.
 * Open MPI installs the hooks (the memory framework's patcher) only for a
 * component that opens the framework, as mtl/ofi and the UCX components do. */
static bool mem_hooks_registered = false;
static bool mem_framework_open = false;

static bool mem_hooks_usable(void)
{
    int need = OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT;
    if (!mem_framework_open
        && OPAL_SUCCESS == mca_base_framework_open(&opal_memory_base_framework, 0)) {
        mem_framework_open = true;
    }
    return mem_framework_open && (opal_mem_hooks_support_level() & need) == need;
}

static void mem_release_cb(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    (void) cbdata;
    (void) from_alloc;
    rustofi_mem_release(buf, length);
}

/* Registered before rustofi_init, so that no range released after the
 * cache starts can be missed (earlier ones find no cache and are ignored). */
static bool mem_hooks_start(void)
{
    if (param_mr_cache_size > 0 && mem_hooks_usable()
        && OPAL_SUCCESS == opal_mem_hooks_register_release(mem_release_cb, NULL)) {
        mem_hooks_registered = true;
    }
    return mem_hooks_registered;
}

/* Unregistering does not wait for a callback already running in another
 * thread (Open MPI drops its lock around each call): the component is
 * linked -z nodelete (build/link.sh), so that callback's code stays mapped
 * after dlclose, and what it pushes on is never freed. */
static void mem_hooks_stop(void)
{
    if (mem_hooks_registered) {
        opal_mem_hooks_unregister_release(mem_release_cb);
        mem_hooks_registered = false;
    }
    if (mem_framework_open) {
        mca_base_framework_close(&opal_memory_base_framework);
        mem_framework_open = false;
    }
}

static mca_mtl_base_module_t *rustofi_init_module(void)
{
    RustofiConfig cfg = {
        .provider_include = param_include,
        .include_set = var_is_set(idx_include),
        .provider_exclude = param_exclude,
        .exclude_set = var_is_set(idx_exclude),
        .eager_limit = param_eager_limit,
        .rndv_protocol = rustofi_enum_text(RUSTOFI_ENUM_RNDV_PROTOCOL),
        .rndv_chunk_size = param_rndv_chunk,
        .rx_buffers = param_rx_buffers,
        .verbose = rustofi_param_verbose,
        .fault_inject = rustofi_enum_text(RUSTOFI_ENUM_FAULT_INJECT),
        .shm = rustofi_enum_text(RUSTOFI_ENUM_SHM),
        .coalesce = param_coalesce,
        .priority = param_priority,
        .peer_timeout = rustofi_param_peer_timeout,
        .named = rustofi_named(),
        .my_name = proc_name64(OMPI_PROC_MY_NAME),
        .rank = (int64_t) OMPI_PROC_MY_NAME->vpid,
        .nic = param_nic,
        .mr_cache_size = param_mr_cache_size,
        .mr_cache_bytes = param_mr_cache_bytes,
        .stripe = param_stripe,
        .stripe_min = param_stripe_min,
        .send_queue_limit = param_send_queue_limit,
        .send_queue_total = param_send_queue_total,
        .mem_hooks = mem_hooks_start(),
        .tagged = rustofi_enum_text(RUSTOFI_ENUM_TAGGED),
    };
    RustofiCallbacks cb = {
        .recv_complete = cb_recv_complete,
        .send_complete = cb_send_complete,
        .cancel_complete = cb_cancel_complete,
    };
    if (sizeof(mca_mtl_request_t) + rustofi_request_extra() > sizeof(((rustofi_blocking_t *) 0)->u)) {
        opal_output(0, "mtl_rustofi: request layout larger than the blocking-send buffer");
        mem_hooks_stop();
        return NULL;
    }
    if (0 != rustofi_init(&cfg, &cb)) {
        mem_hooks_stop();
        return NULL;
    }

    uint8_t name[1024];
    size_t len = sizeof(name);
    int ret;
    if (0 != rustofi_endpoint_name(name, &len)) {
        mem_hooks_stop();
        rustofi_finalize();
        return NULL;
    }
    OPAL_MODEX_SEND(ret, RUSTOFI_MODEX_SCOPE, &mca_mtl_rustofi_component.mtl_version, name, len);
    if (OMPI_SUCCESS != ret) {
        opal_output(0, "mtl_rustofi: could not publish the endpoint name (modex): %d", ret);
        mem_hooks_stop();
        rustofi_finalize();
        return NULL;
    }
    rustofi_register_shm_cleanup();
    rustofi_module.mtl_request_size = rustofi_request_extra();
#if OMPI_MAJOR_VERSION >= 5
    if (OMPI_SUCCESS != rustofi_excid_start()) {
        mem_hooks_stop();
        rustofi_finalize();
        return NULL;
    }
#endif
    /* Registered as it is: its answer is the events it handled, never
     * negative (opal_progress adds them up). */
    opal_progress_register(rustofi_progress);
    return &rustofi_module;
}

#if OMPI_MAJOR_VERSION >= 5
static mca_mtl_base_module_t *rustofi_component_init(bool enable_progress_threads,
                                                     bool enable_mpi_threads,
                                                     bool *accelerator_support)
{
    if (rustofi_wrong_series) {
        return NULL; /* called by 4.1 without the third argument */
    }
    /* Device buffers are left to Open MPI's datatype helpers, which stage
     * them through host memory for MTLs without accelerator support. */
    *accelerator_support = false;
    return rustofi_init_module();
}
#else
static mca_mtl_base_module_t *rustofi_component_init(bool enable_progress_threads,
                                                     bool enable_mpi_threads)
{
    if (rustofi_wrong_series) {
        return NULL;
    }
    return rustofi_init_module();
}
#endif

static int rustofi_mtl_finalize(struct mca_mtl_base_module_t *mtl)
{
#if OMPI_MAJOR_VERSION >= 5
    rustofi_excid_stop();
#endif
    opal_progress_unregister(rustofi_progress);
    mem_hooks_stop();
    return 0 == rustofi_finalize() ? OMPI_SUCCESS : OMPI_ERROR;
}

/* ------------------------------------------------------------------ */
/* Peers                                                               */

static int rustofi_add_procs(struct mca_mtl_base_module_t *mtl, size_t nprocs,
                             struct ompi_proc_t **procs)
{
    for (size_t i = 0; i < nprocs; i++) {
        if (NULL != procs[i]->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL]) {
            continue;
        }
        uint8_t *addr = NULL;
        size_t size = 0;
        int ret;
        OPAL_MODEX_RECV(ret, &mca_mtl_rustofi_component.mtl_version, &procs[i]->super.proc_name,
                        (void **) &addr, &size);
        if (OMPI_SUCCESS != ret || NULL == addr) {
            opal_output(0,
                        "mtl_rustofi: process %u has published no rustofi address (is the "
                        "component disabled there?)",
                        procs[i]->super.proc_name.vpid);
            return OMPI_ERR_UNREACH;
        }
        bool local = OPAL_PROC_ON_LOCAL_NODE(procs[i]->super.proc_flags);
        size_t handle =
            rustofi_add_peer(proc_name64(&procs[i]->super.proc_name), addr, size, local);
        free(addr);
        if (0 == handle) {
            return OMPI_ERR_UNREACH;
        }
        procs[i]->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL] = (void *) handle;
    }
    return OMPI_SUCCESS;
}

static int rustofi_del_procs(struct mca_mtl_base_module_t *mtl, size_t nprocs,
                             struct ompi_proc_t **procs)
{
    for (size_t i = 0; i < nprocs; i++) {
        procs[i]->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL] = NULL;
    }
    return OMPI_SUCCESS;
}

/* The peer handle of a process met for the first time (a dynamic process,
 * or a proc Open MPI adds lazily): added now; 0 if that fails. */
__attribute__((noinline, cold)) size_t rustofi_add_peer_late(ompi_proc_t *proc)
{
    if (OMPI_SUCCESS != rustofi_add_procs(&rustofi_module, 1, &proc)) {
        return 0;
    }
    return (size_t) proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL];
}

