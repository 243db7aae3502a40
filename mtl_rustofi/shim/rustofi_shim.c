/*
 * mtl_rustofi: the Open MPI side of the component.
 *
 * This file does only what must touch Open MPI's macros and inline
 * functions: the component structure, MCA parameters, modex publish and
 * lookup of endpoint names, proc-to-peer lookup, convertor pack/unpack for
 * non-contiguous data, filling statuses and calling request completion
 * callbacks, and the progress hook. Everything else (provider selection,
 * libfabric resources, wire protocol, matching, progress) is the Rust
 * library behind rustofi.h. Enumerated parameters, help messages, output
 * and MPI_T performance variables are in rustofi_site.c.
 */

#include "ompi_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "ompi/communicator/communicator.h"
#include "ompi/message/message.h"
#include "ompi/mca/mtl/base/base.h"
#include "ompi/mca/mtl/base/mtl_base_datatype.h"
#include "ompi/mca/mtl/mtl.h"
#include "ompi/mca/pml/pml.h"
#include "ompi/proc/proc.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/memory/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"

/* ==== Open MPI version differences (4.1 / 5.0) ===================== */
#if OMPI_MAJOR_VERSION >= 5
#include <pthread.h>
#include <time.h>
#include "ompi/runtime/ompi_rte.h"
#include "opal/mca/pmix/pmix-internal.h"
#define RUSTOFI_MODEX_SCOPE PMIX_GLOBAL
/* Referenced by the inline datatype helpers; weak so that this build still
 * loads into a 4.1 process (which lacks it) far enough to refuse cleanly. */
#pragma weak opal_accelerator
#else
#include "opal/mca/pmix/pmix.h"
#define RUSTOFI_MODEX_SCOPE OPAL_PMIX_GLOBAL
#endif
/* ==== end of version differences =================================== */

#include "rustofi.h"
#include "rustofi_site.h"

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
static long param_verbose = 0;
static long param_coalesce = 1;
static long param_mr_cache_size = 64;
static long param_stripe = 0;
static long param_stripe_min = 1L << 20;
static long param_send_queue_limit = 4L << 20;
static long param_send_queue_total = 32L << 20;
static long param_rndv_chunk = 64L * 1024 * 1024;
static long param_rx_buffers = 256;
static long param_peer_timeout = 30;
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
    /* Device (GPU) buffers are not handled here: Open MPI stages them
     * through host memory before they reach an MTL without it. */
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
        "Comma-separated libfabric providers to use, first usable wins (e.g. efa, tcp, udp, shm, "
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
             OPAL_INFO_LVL_1, &param_verbose);
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
             OPAL_INFO_LVL_4, &param_peer_timeout);
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
static int rustofi_send(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                        int dest, int tag, struct opal_convertor_t *convertor,
                        mca_pml_base_send_mode_t mode);
static int rustofi_mtl_isend(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                             int dest, int tag, struct opal_convertor_t *convertor,
                             mca_pml_base_send_mode_t mode, bool blocking,
                             mca_mtl_request_t *mtl_request);
static int rustofi_mtl_irecv(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                             int src, int tag, struct opal_convertor_t *convertor,
                             mca_mtl_request_t *mtl_request);
static int rustofi_mtl_iprobe(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                              int src, int tag, int *flag, struct ompi_status_public_t *status);
static int rustofi_mtl_imrecv(struct mca_mtl_base_module_t *mtl,
                              struct opal_convertor_t *convertor,
                              struct ompi_message_t **message, mca_mtl_request_t *mtl_request);
static int rustofi_mtl_improbe(struct mca_mtl_base_module_t *mtl,
                               struct ompi_communicator_t *comm, int src, int tag, int *matched,
                               struct ompi_message_t **message,
                               struct ompi_status_public_t *status);
static int rustofi_mtl_cancel(struct mca_mtl_base_module_t *mtl, mca_mtl_request_t *mtl_request,
                              int flag);
static int rustofi_add_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm);
static int rustofi_del_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm);

#if OMPI_MAJOR_VERSION >= 5
/* Context id of the messages that exchange communicator indexes (see
 * "Extended communicator ids" below); communicators use the ids below it. */
#define RUSTOFI_EXCID_CTX 0x7fffffffu
#endif

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

/* Completion callbacks, called by the Rust library after it has released its
 * progress token (so a callback may start new operations). */

/* Forgets an operation's bounce buffer or packed copy, once freed. */
static inline void forget_bounce(RustofiReqHead *head)
{
    head->buffer = NULL;
    head->free_after = false;
}

/* Frees an operation's bounce buffer or packed copy (`free_after` set) and
 * forgets it. */
static void drop_bounce(RustofiReqHead *head)
{
    free(head->buffer);
    forget_bounce(head);
}

/* A receive through a bounce buffer, complete: unpacks it into the user's
 * datatype and frees it. Out of line, so that the common completion (into
 * the user's buffer) is a leaf that saves no registers and ends in a tail
 * call. */
static __attribute__((noinline)) void unpack_bounce(RustofiReqHead *head, size_t bytes)
{
    if (0 == bytes) {
        drop_bounce(head);
        return;
    }
    /* unpacks into the user's datatype and frees the buffer */
    ompi_mtl_datatype_unpack((struct opal_convertor_t *) head->convertor, head->buffer, bytes);
    forget_bounce(head);
}

static void cb_recv_complete(RustofiReqHead *head, int32_t src, int32_t tag, size_t bytes,
                             int status)
{
    mca_mtl_request_t *req = (mca_mtl_request_t *) head;
    ompi_status_public_t *st = &req->ompi_req->req_status;
    st->MPI_SOURCE = src;
    st->MPI_TAG = tag;
    st->_ucount = bytes;
    st->MPI_ERROR = STATUS_OK == status ? OMPI_SUCCESS
                  : STATUS_TRUNCATED == status ? MPI_ERR_TRUNCATE : MPI_ERR_OTHER;
    if (OPAL_UNLIKELY(head->free_after)) {
        unpack_bounce(head, bytes);
    }
    req->completion_callback(req);
}

/* A blocking send on the caller's stack: its completion flips `done`. */
typedef struct {
    union {
        RustofiReqHead head;
        char storage[512];
    } u;
    volatile int done;
    int error;
} rustofi_blocking_t;

/* A send's completion handed to Open MPI. */
static inline __attribute__((always_inline)) void send_done(RustofiReqHead *head, int status)
{
    mca_mtl_request_t *req = (mca_mtl_request_t *) head;
    int err = STATUS_OK == status ? OMPI_SUCCESS : MPI_ERR_OTHER;
    if (NULL != req->ompi_req) {
        req->ompi_req->req_status.MPI_ERROR = err;
    } else {
        ((rustofi_blocking_t *) head)->error = err;
    }
    req->completion_callback(req);
}

/* The completion of a send whose bytes were packed into a copy (a type with
 * gaps): frees the copy first. Out of line, as unpack_bounce is. */
static __attribute__((noinline)) void send_done_bounced(RustofiReqHead *head, int status)
{
    drop_bounce(head);
    send_done(head, status);
}

static void cb_send_complete(RustofiReqHead *head, int status)
{
    if (OPAL_UNLIKELY(head->free_after)) {
        send_done_bounced(head, status);
        return;
    }
    send_done(head, status);
}

static void cb_cancel_complete(RustofiReqHead *head)
{
    mca_mtl_request_t *req = (mca_mtl_request_t *) head;
    if (head->free_after) {
        drop_bounce(head);
    }
    req->ompi_req->req_status._cancelled = true;
    req->ompi_req->req_status.MPI_ERROR = OMPI_SUCCESS;
    req->completion_callback(req);
}

static int rustofi_progress_cb(void)
{
    int n = rustofi_progress();
    return n > 0 ? n : 0;
}

#if OMPI_MAJOR_VERSION >= 5
static int excid_start(void);
static void excid_stop(void);
#endif

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
    if (!ok && param_verbose >= 1) {
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
        .verbose = param_verbose,
        .fault_inject = rustofi_enum_text(RUSTOFI_ENUM_FAULT_INJECT),
        .shm = rustofi_enum_text(RUSTOFI_ENUM_SHM),
        .coalesce = param_coalesce,
        .priority = param_priority,
        .peer_timeout = param_peer_timeout,
        .named = rustofi_named(),
        .my_name = proc_name64(OMPI_PROC_MY_NAME),
        .rank = (int64_t) OMPI_PROC_MY_NAME->vpid,
        .nic = param_nic,
        .mr_cache_size = param_mr_cache_size,
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
    if (OMPI_SUCCESS != excid_start()) {
        mem_hooks_stop();
        rustofi_finalize();
        return NULL;
    }
#endif
    opal_progress_register(rustofi_progress_cb);
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
    /* Device buffers are left to Open MPI, which stages them through host
     * memory for MTLs without accelerator support. */
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
    excid_stop();
#endif
    opal_progress_unregister(rustofi_progress_cb);
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
static __attribute__((noinline, cold)) size_t add_peer_late(ompi_proc_t *proc)
{
    if (OMPI_SUCCESS != rustofi_add_procs(&rustofi_module, 1, &proc)) {
        return 0;
    }
    return (size_t) proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL];
}

/* The peer handle of `rank` of the communicator's remote group. Inlined
 * into every send and receive: one lookup and one load when the peer is
 * known, the common case. */
static inline __attribute__((always_inline)) size_t peer_of(struct ompi_communicator_t *comm,
                                                            int rank)
{
    ompi_proc_t *proc = ompi_comm_peer_lookup(comm, rank);
    size_t peer = (size_t) proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL];
    if (OPAL_UNLIKELY(0 == peer)) {
        return add_peer_late(proc);
    }
    return peer;
}

/* The peer handle of a receive's or probe's source (0: MPI_ANY_SOURCE):
 * a receive from a peer that is given up fails instead of waiting. */
static inline __attribute__((always_inline)) size_t source_peer(struct ompi_communicator_t *comm,
                                                                int src)
{
    return MPI_ANY_SOURCE == src ? 0 : peer_of(comm, src);
}

/* ==== Communicator ids: version differences ======================== */
#if OMPI_MAJOR_VERSION >= 5
/*
 * Extended communicator ids (Open MPI 5). The wire carries a 32-bit context
 * id, and the receiver matches on its own local index of the communicator
 * (c_index). Communicators made the classic way get an index agreed by all
 * members (OMPI_COMM_GLOBAL_INDEX), so a sender uses its own. Communicators
 * made from groups (MPI_Comm_create_from_group, i.e. MPI sessions) have an
 * extended id (c_contextid) agreed by all members but a local index each:
 * before its first send to a peer on such a communicator, a rank sends the
 * peer {extended id, own c_index, own rank} on a context id of its own
 * (RUSTOFI_EXCID_CTX) and waits for the peer's own message, which the peer
 * sends when it learns the sender's (as Open MPI's mtl ofi does). Each side of
 * a pair so sends exactly one such message. A message for a communicator the
 * receiver has not added yet waits in a list until rustofi_add_comm.
 */
enum { CID_NOT_EXCHANGED = 0, CID_EXCHANGING = 1, CID_EXCHANGED = 2 };

typedef struct {
    uint64_t cid_base;
    uint64_t cid_sub;
    uint32_t c_index; /* the sender's local index of the communicator */
    int32_t rank;     /* the sender's rank in it (its local group) */
} rustofi_excid_msg_t;

struct rustofi_cid_peer {
    uint32_t c_index;
    int state; /* CID_*, accessed atomically */
};

struct mca_mtl_comm_t {
    struct mca_mtl_comm_t *next; /* in excid_comms */
    ompi_communicator_t *comm;
    int size; /* remote group size */
    struct rustofi_cid_peer peer[];
};

typedef struct rustofi_excid_pending {
    struct rustofi_excid_pending *next;
    rustofi_excid_msg_t msg;
} rustofi_excid_pending_t;

/* A send of one exchange message; freed by its completion. */
typedef struct {
    rustofi_blocking_t b;
    rustofi_excid_msg_t msg;
} rustofi_excid_send_t;

static pthread_mutex_t excid_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mca_mtl_comm_t *excid_comms = NULL;        /* non-global communicators */
static rustofi_excid_pending_t *excid_pending = NULL;    /* messages for unknown ones */
static rustofi_blocking_t excid_rx;                      /* the posted receive */
static ompi_request_t excid_rx_ompi;                     /* receives its status */
static rustofi_excid_msg_t excid_rx_buf;
static volatile bool excid_running = false;
static int excid_nsent = 0, excid_nrecv = 0; /* reported at finalize (verbose) */
static int excid_nwaited = 0; /* messages that arrived before their communicator */

static bool excid_same(const rustofi_excid_msg_t *m, const ompi_communicator_t *comm)
{
    return m->cid_base == comm->c_contextid.cid_base
        && m->cid_sub == comm->c_contextid.cid_sub.u64;
}

static void excid_send_done(struct mca_mtl_request_t *req)
{
    free(req);
}

/* Sends this rank's index of `comm` to its rank `dest`. */
static int excid_send(ompi_communicator_t *comm, int dest)
{
    size_t peer = peer_of(comm, dest);
    if (0 == peer) {
        return OMPI_ERR_UNREACH;
    }
    rustofi_excid_send_t *s = calloc(1, sizeof(*s));
    if (NULL == s) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    s->msg.cid_base = comm->c_contextid.cid_base;
    s->msg.cid_sub = comm->c_contextid.cid_sub.u64;
    s->msg.c_index = comm->c_index;
    s->msg.rank = comm->c_my_rank;
    s->b.u.head.mtl.ompi_req = NULL;
    s->b.u.head.mtl.completion_callback = (void (*)(MtlRequest *)) excid_send_done;
    s->b.u.head.convertor = NULL;
    s->b.u.head.buffer = &s->msg;
    s->b.u.head.length = sizeof(s->msg);
    s->b.u.head.free_after = false;
    int rc = rustofi_isend(peer, RUSTOFI_EXCID_CTX, comm->c_my_rank, 0, false, &s->b.u.head);
    if (rc < 0) {
        free(s);
        return OMPI_ERROR;
    }
    __atomic_add_fetch(&excid_nsent, 1, __ATOMIC_RELAXED);
    if (rc > 0) {
        cb_send_complete(&s->b.u.head, STATUS_OK);
    }
    return OMPI_SUCCESS;
}

/* Records a peer's index; called with excid_lock held. Returns whether this
 * rank must now send its own index back. */
static bool excid_apply(struct mca_mtl_comm_t *mc, const rustofi_excid_msg_t *m)
{
    if (m->rank < 0 || m->rank >= mc->size) {
        opal_output(0, "mtl_rustofi: communicator index message from invalid rank %d dropped",
                    m->rank);
        return false;
    }
    struct rustofi_cid_peer *p = &mc->peer[m->rank];
    int old = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
    p->c_index = m->c_index;
    __atomic_store_n(&p->state, CID_EXCHANGED, __ATOMIC_RELEASE);
    return CID_NOT_EXCHANGED == old;
}

static void excid_received(const rustofi_excid_msg_t *m)
{
    ompi_communicator_t *reply = NULL;
    pthread_mutex_lock(&excid_lock);
    struct mca_mtl_comm_t *mc = excid_comms;
    while (NULL != mc && !excid_same(m, mc->comm)) {
        mc = mc->next;
    }
    if (NULL == mc) {
        rustofi_excid_pending_t *p = malloc(sizeof(*p));
        if (NULL != p) {
            p->msg = *m;
            p->next = excid_pending;
            excid_pending = p;
        } else {
            /* its sender will wait for this rank's index in vain */
            opal_output(0, "mtl_rustofi: out of memory: the communicator index message from "
                        "rank %d is lost", m->rank);
        }
    } else if (excid_apply(mc, m)) {
        reply = mc->comm;
    }
    pthread_mutex_unlock(&excid_lock);
    /* outside the lock: a send may deliver completions, which may land here */
    if (NULL != reply && OMPI_SUCCESS != excid_send(reply, m->rank)) {
        opal_output(0, "mtl_rustofi: could not send the communicator index to rank %d", m->rank);
    }
}

static int excid_post(void);

static void excid_rx_done(struct mca_mtl_request_t *req)
{
    rustofi_excid_msg_t m = excid_rx_buf;
    bool ok = OMPI_SUCCESS == excid_rx_ompi.req_status.MPI_ERROR
           && !excid_rx_ompi.req_status._cancelled
           && sizeof(m) == excid_rx_ompi.req_status._ucount;
    if (!excid_running) {
        return;
    }
    if (OMPI_SUCCESS != excid_post()) {
        opal_output(0, "mtl_rustofi: could not repost the communicator index receive");
    }
    if (ok) {
        __atomic_add_fetch(&excid_nrecv, 1, __ATOMIC_RELAXED);
        excid_received(&m);
    }
}

static int excid_post(void)
{
    memset(&excid_rx_ompi.req_status, 0, sizeof(excid_rx_ompi.req_status));
    excid_rx.u.head.mtl.ompi_req = &excid_rx_ompi;
    excid_rx.u.head.mtl.completion_callback = (void (*)(MtlRequest *)) excid_rx_done;
    excid_rx.u.head.convertor = NULL;
    excid_rx.u.head.buffer = &excid_rx_buf;
    excid_rx.u.head.length = sizeof(excid_rx_buf);
    excid_rx.u.head.free_after = false;
    return 0 == rustofi_irecv(RUSTOFI_EXCID_CTX, MPI_ANY_SOURCE, 0, 0, &excid_rx.u.head)
         ? OMPI_SUCCESS : OMPI_ERROR;
}

static int excid_start(void)
{
    excid_running = true;
    return excid_post();
}

static void excid_stop(void)
{
    if (param_verbose >= 1 && (excid_nsent > 0 || excid_nrecv > 0)) {
        fprintf(stderr, "mtl_rustofi: rank %u communicator index exchanges excid_sent=%d "
                "excid_recv=%d excid_waited=%d\n", OMPI_PROC_MY_NAME->vpid, excid_nsent,
                excid_nrecv, excid_nwaited);
    }
    excid_running = false;
    (void) rustofi_cancel(&excid_rx.u.head);
    pthread_mutex_lock(&excid_lock);
    while (NULL != excid_pending) {
        rustofi_excid_pending_t *p = excid_pending;
        excid_pending = p->next;
        free(p);
    }
    pthread_mutex_unlock(&excid_lock);
}

/* fault_inject late_comm (testing): rank 0 drives progress for 3 s before
 * it registers a communicator that needs the index exchange, so that the
 * index messages its peers send it meanwhile arrive before the
 * communicator does and wait for it. */
static __attribute__((cold)) void excid_late_comm(void)
{
    if (0 != OMPI_PROC_MY_NAME->vpid
        || 0 != strcmp(rustofi_enum_text(RUSTOFI_ENUM_FAULT_INJECT), "late_comm")) {
        return;
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        opal_progress();
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 3000000000L);
}

static int rustofi_add_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm)
{
    comm->c_mtl_comm = NULL;
    if (OMPI_COMM_IS_GLOBAL_INDEX(comm)) {
        return OMPI_SUCCESS;
    }
    int size = OMPI_COMM_IS_INTER(comm) ? ompi_comm_remote_size(comm) : ompi_comm_size(comm);
    struct mca_mtl_comm_t *mc = calloc(1, sizeof(*mc) + (size_t) size * sizeof(mc->peer[0]));
    if (NULL == mc) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    mc->comm = comm;
    mc->size = size;
    if (OMPI_COMM_IS_INTRA(comm)) {
        mc->peer[comm->c_my_rank].c_index = comm->c_index;
        mc->peer[comm->c_my_rank].state = CID_EXCHANGED;
    }
    /* The ranks whose waiting messages need this rank's index back: each
     * at most once (excid_apply answers true only for a rank not heard
     * from before), so `size` entries hold them all, however many peers
     * sent theirs before this communicator existed here. Every waiting
     * message of this communicator is applied: one left waiting would
     * never be, and its sender would wait for the answer for good. */
    int *replies = malloc((size_t) size * sizeof(*replies));
    if (NULL == replies) {
        free(mc);
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    int nreplies = 0;
    excid_late_comm();
    pthread_mutex_lock(&excid_lock);
    comm->c_mtl_comm = mc;
    mc->next = excid_comms;
    excid_comms = mc;
    /* messages that arrived before this communicator existed here */
    for (rustofi_excid_pending_t **pp = &excid_pending; NULL != *pp;) {
        rustofi_excid_pending_t *p = *pp;
        if (excid_same(&p->msg, comm)) {
            excid_nwaited++;
            if (excid_apply(mc, &p->msg) && nreplies < size) {
                replies[nreplies++] = p->msg.rank;
            }
            *pp = p->next;
            free(p);
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&excid_lock);
    int ret = OMPI_SUCCESS;
    for (int i = 0; i < nreplies && OMPI_SUCCESS == ret; i++) {
        ret = excid_send(comm, replies[i]) == OMPI_SUCCESS ? OMPI_SUCCESS : OMPI_ERROR;
    }
    free(replies);
    return ret;
}

static int rustofi_del_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm)
{
    struct mca_mtl_comm_t *mc = comm->c_mtl_comm;
    if (NULL == mc) {
        return OMPI_SUCCESS;
    }
    pthread_mutex_lock(&excid_lock);
    for (struct mca_mtl_comm_t **pp = &excid_comms; NULL != *pp; pp = &(*pp)->next) {
        if (*pp == mc) {
            *pp = mc->next;
            break;
        }
    }
    comm->c_mtl_comm = NULL;
    pthread_mutex_unlock(&excid_lock);
    free(mc);
    return OMPI_SUCCESS;
}

/* The context id this rank's messages carry (its local index). */
static inline uint32_t recv_cid(struct ompi_communicator_t *comm)
{
    return comm->c_index;
}

/* send_cid of a communicator whose members index it each their own way:
 * the index learnt from the peer (exchanged first if it is not known yet). */
static int __attribute__((noinline)) send_cid_exchanged(struct ompi_communicator_t *comm,
                                                        int dest, uint32_t *cid)
{
    struct mca_mtl_comm_t *mc = comm->c_mtl_comm;
    if (NULL == mc || dest < 0 || dest >= mc->size) {
        return OMPI_ERR_BAD_PARAM;
    }
    struct rustofi_cid_peer *p = &mc->peer[dest];
    if (CID_EXCHANGED != __atomic_load_n(&p->state, __ATOMIC_ACQUIRE)) {
        int expected = CID_NOT_EXCHANGED;
        if (__atomic_compare_exchange_n(&p->state, &expected, CID_EXCHANGING, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            int ret = excid_send(comm, dest);
            if (OMPI_SUCCESS != ret) {
                return ret;
            }
        }
        while (CID_EXCHANGED != __atomic_load_n(&p->state, __ATOMIC_ACQUIRE)) {
            opal_progress();
        }
    }
    *cid = p->c_index;
    return OMPI_SUCCESS;
}

/* The context id a message to `dest` carries: the receiver's index. Inline:
 * every send asks, and the usual communicator's index is agreed by all. */
static inline int send_cid(struct ompi_communicator_t *comm, int dest, uint32_t *cid)
{
    if (OPAL_LIKELY(OMPI_COMM_IS_GLOBAL_INDEX(comm))) {
        *cid = comm->c_index;
        return OMPI_SUCCESS;
    }
    return send_cid_exchanged(comm, dest, cid);
}
#else
static int rustofi_add_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm)
{
    return OMPI_SUCCESS;
}

static int rustofi_del_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm)
{
    return OMPI_SUCCESS;
}

static inline uint32_t recv_cid(struct ompi_communicator_t *comm)
{
    return comm->c_contextid;
}

static inline int send_cid(struct ompi_communicator_t *comm, int dest, uint32_t *cid)
{
    *cid = comm->c_contextid;
    return OMPI_SUCCESS;
}
#endif
/* ==== end of communicator ids ======================================= */

/* ------------------------------------------------------------------ */
/* Point to point                                                      */

/*
 * Where the bytes of a send are. pml cm builds send convertors two ways:
 * - by opal_convertor_prepare_for_send (heavy requests: persistent,
 *   buffered; and every non-contiguous type): pBaseBuf is the user pointer
 *   and contiguous data starts at pBaseBuf + true_lb, which
 *   ompi_mtl_datatype_pack forgets (MPI_BOTTOM + absolute struct types);
 *   such convertors carry CONVERTOR_SEND;
 * - by hand for contiguous types (thin requests: MPI_Isend and the blocking
 *   send): pBaseBuf already includes true_lb, the flags are the local
 *   convertor's (no CONVERTOR_SEND), and the other fields (bConverted...) are
 *   stale from the request's previous use, so they must not be read.
 */
static inline __attribute__((always_inline)) int send_buffer(struct opal_convertor_t *convertor,
                                                            void **start, size_t *length,
                                                            bool *free_after)
{
    if (NULL != convertor->pDesc && !(convertor->flags & CONVERTOR_COMPLETED)
        && opal_datatype_is_contiguous_memory_layout(convertor->pDesc, convertor->count)) {
        *start = convertor->pBaseBuf;
        if (convertor->flags & CONVERTOR_SEND) {
            *start = convertor->pBaseBuf + convertor->pDesc->true_lb;
        }
        *length = convertor->local_size;
        *free_after = false;
        return OMPI_SUCCESS;
    }
    return ompi_mtl_datatype_pack(convertor, start, length, free_after);
}

/* Starts a send. Returns rustofi_isend's answer, 0 (started) or
 * RUSTOFI_SEND_COMPLETE / RUSTOFI_SEND_FLUSHED (complete already: the
 * caller completes the request), or an Open MPI error (negative). */
static inline __attribute__((always_inline)) int
start_send(struct ompi_communicator_t *comm, int dest, int tag, struct opal_convertor_t *convertor,
           mca_pml_base_send_mode_t mode, RustofiReqHead *head)
{
    void *start = NULL;
    size_t length = 0;
    bool free_after = false;
    size_t peer = peer_of(comm, dest);
    if (0 == peer) {
        return OMPI_ERR_UNREACH;
    }
    uint32_t cid = 0;
    int ret = send_cid(comm, dest, &cid);
    if (OMPI_SUCCESS != ret) {
        return ret;
    }
    ret = send_buffer(convertor, &start, &length, &free_after);
    if (OMPI_SUCCESS != ret) {
        return ret;
    }
    head->convertor = convertor;
    head->buffer = start;
    head->length = length;
    head->free_after = free_after;
    int rc = rustofi_isend(peer, cid, comm->c_my_rank, tag, MCA_PML_BASE_SEND_SYNCHRONOUS == mode,
                           head);
    if (OPAL_UNLIKELY(rc < 0)) {
        if (free_after) {
            drop_bounce(head);
        }
        return OMPI_ERROR;
    }
    return rc;
}

_Static_assert(OMPI_SUCCESS == 0 && RUSTOFI_SEND_COMPLETE > 0 && RUSTOFI_SEND_FLUSHED > 0,
               "start_send's answers: errors negative, started 0, complete positive");

static int rustofi_mtl_isend(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                             int dest, int tag, struct opal_convertor_t *convertor,
                             mca_pml_base_send_mode_t mode, bool blocking,
                             mca_mtl_request_t *mtl_request)
{
    RustofiReqHead *head = (RustofiReqHead *) mtl_request;
    int rc = start_send(comm, dest, tag, convertor, mode, head);
    if (rc <= 0) {
        return rc;
    }
    /* Copied into its rail already: no callback follows. */
    cb_send_complete(head, STATUS_OK);
    return OMPI_SUCCESS;
}

static void blocking_done(struct mca_mtl_request_t *req)
{
    ((rustofi_blocking_t *) req)->done = 1;
}

static int rustofi_send(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                        int dest, int tag, struct opal_convertor_t *convertor,
                        mca_pml_base_send_mode_t mode)
{
    rustofi_blocking_t b;
    b.u.head.mtl.ompi_req = NULL;
    b.u.head.mtl.completion_callback = (void (*)(MtlRequest *)) blocking_done;
    b.done = 0;
    b.error = OMPI_SUCCESS;
    int rc = start_send(comm, dest, tag, convertor, mode, &b.u.head);
    if (OPAL_LIKELY(RUSTOFI_SEND_FLUSHED == rc)) {
        /* Copied into its rail, nothing queued behind: done, without the
         * request's callback and the queue's question below. */
        if (OPAL_UNLIKELY(b.u.head.free_after)) {
            free(b.u.head.buffer);
        }
        return OMPI_SUCCESS;
    }
    if (rc < 0) {
        return rc;
    }
    if (RUSTOFI_SEND_COMPLETE == rc) {
        cb_send_complete(&b.u.head, STATUS_OK);
    }
    while (!b.done) {
        opal_progress();
    }
    /* A copied eager send is complete once copied; its packet may still
     * wait in the component's queue (e.g. while rxm connects to a new
     * peer). A blocking send returns once the provider has it, so that a
     * caller waiting outside MPI progress next (MPI_Comm_disconnect's
     * fence in Open MPI 4.1) does not leave it behind. */
    while (rustofi_tx_queued() == 1) {
        opal_progress();
    }
    return b.error;
}

/* Where a receive lands: the user buffer, or a bounce buffer unpacked
 * through the convertor at completion (non-contiguous types). */
static inline __attribute__((always_inline)) int prepare_recv(struct opal_convertor_t *convertor,
                                                             RustofiReqHead *head)
{
    void *start = NULL;
    size_t length = 0;
    bool free_after = false;
    int ret = ompi_mtl_datatype_recv_buf(convertor, &start, &length, &free_after);
    if (OMPI_SUCCESS != ret) {
        return ret;
    }
    if (OPAL_UNLIKELY(NULL == start && length > 0)) {
        /* Open MPI 4.1 does not check the bounce buffer's allocation. */
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    head->convertor = convertor;
    head->buffer = start;
    head->length = length;
    head->free_after = free_after;
    return OMPI_SUCCESS;
}

/* Frees the bounce buffer of a receive that could not be started. */
static void release_recv(RustofiReqHead *head)
{
    if (head->free_after) {
        drop_bounce(head);
    }
}

/* rustofi_irecv's error is OMPI_ERROR, so that its answer can be returned
 * as it is. */
_Static_assert(OMPI_SUCCESS == 0 && OMPI_ERROR == -1, "rustofi_irecv answers 0 or -1");

/* rustofi_mtl_irecv into a bounce buffer (a type with gaps, a
 * heterogeneous peer, device memory), which a failed post releases. Out
 * of line, so that the common post saves no registers for it. */
static __attribute__((noinline)) int irecv_bounced(struct ompi_communicator_t *comm, int src,
                                                   int tag, RustofiReqHead *head)
{
    if (0 != rustofi_irecv(recv_cid(comm), src, source_peer(comm, src), tag, head)) {
        release_recv(head);
        return OMPI_ERROR;
    }
    return OMPI_SUCCESS;
}

static int rustofi_mtl_irecv(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                             int src, int tag, struct opal_convertor_t *convertor,
                             mca_mtl_request_t *mtl_request)
{
    RustofiReqHead *head = (RustofiReqHead *) mtl_request;
    int ret = prepare_recv(convertor, head);
    if (OPAL_UNLIKELY(OMPI_SUCCESS != ret)) {
        return ret;
    }
    if (OPAL_LIKELY(!head->free_after)) {
        /* Into the user's buffer: nothing to release if the post fails,
         * so its answer is ours, by a tail call. */
        return rustofi_irecv(recv_cid(comm), src, source_peer(comm, src), tag, head);
    }
    return irecv_bounced(comm, src, tag, head);
}

static void fill_status(ompi_status_public_t *status, const RustofiStatus *st)
{
    if (MPI_STATUS_IGNORE != status && NULL != status) {
        status->MPI_SOURCE = st->source;
        status->MPI_TAG = st->tag;
        status->MPI_ERROR = OMPI_SUCCESS;
        status->_ucount = st->count;
    }
}

static int rustofi_mtl_iprobe(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                              int src, int tag, int *flag, struct ompi_status_public_t *status)
{
    RustofiStatus st;
    if (0 != rustofi_iprobe(recv_cid(comm), src, source_peer(comm, src), tag, flag, &st)) {
        return OMPI_ERROR;
    }
    if (*flag) {
        fill_status(status, &st);
    }
    return OMPI_SUCCESS;
}

static int rustofi_mtl_improbe(struct mca_mtl_base_module_t *mtl,
                               struct ompi_communicator_t *comm, int src, int tag, int *matched,
                               struct ompi_message_t **message,
                               struct ompi_status_public_t *status)
{
    RustofiStatus st;
    void *handle = NULL;
    if (0 != rustofi_improbe(recv_cid(comm), src, source_peer(comm, src), tag, matched, &st,
                             &handle)) {
        return OMPI_ERROR;
    }
    if (!*matched) {
        *message = MPI_MESSAGE_NULL;
        return OMPI_SUCCESS;
    }
    fill_status(status, &st);
    *message = ompi_message_alloc();
    if (NULL == *message) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    (*message)->comm = comm;
    (*message)->req_ptr = handle;
    (*message)->peer = st.source;
    (*message)->count = st.count;
    return OMPI_SUCCESS;
}

static int rustofi_mtl_imrecv(struct mca_mtl_base_module_t *mtl,
                              struct opal_convertor_t *convertor,
                              struct ompi_message_t **message, mca_mtl_request_t *mtl_request)
{
    RustofiReqHead *head = (RustofiReqHead *) mtl_request;
    void *handle = (*message)->req_ptr;
    int ret = prepare_recv(convertor, head);
    if (OMPI_SUCCESS != ret) {
        return ret;
    }
    ompi_message_return(*message);
    *message = MPI_MESSAGE_NULL;
    if (0 != rustofi_imrecv(handle, head)) {
        release_recv(head);
        return OMPI_ERROR;
    }
    return OMPI_SUCCESS;
}

static int rustofi_mtl_cancel(struct mca_mtl_base_module_t *mtl, mca_mtl_request_t *mtl_request,
                              int flag)
{
    /* Receives still queued are cancelled (the callback marks them);
     * matched receives and sends complete normally. */
    return rustofi_cancel((RustofiReqHead *) mtl_request) < 0 ? OMPI_ERROR : OMPI_SUCCESS;
}
