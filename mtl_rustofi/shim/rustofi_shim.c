/*
 * mtl_rustofi: the Open MPI side of the component.
 *
 * This file does only what must touch Open MPI's macros and inline
 * functions: the component structure, MCA parameters, modex publish and
 * lookup of endpoint names, proc-to-peer lookup, convertor pack/unpack for
 * non-contiguous data, filling statuses and calling request completion
 * callbacks, and the progress hook. Everything else (provider selection,
 * libfabric resources, wire protocol, matching, progress) is the Rust
 * library behind rustofi.h.
 */

#include "ompi_config.h"

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
#include "opal/mca/pmix/pmix.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"

#include "rustofi.h"

/*
 * Layout of the structs shared with the Rust library, field by field. The
 * RUSTOFI_LAYOUT_* numbers come from ffi.rs, where const assertions hold
 * Rust's layout to them; here the C compiler's layout of rustofi.h is held
 * to the same numbers, and so are Open MPI's own types where a Rust struct
 * mirrors one (mca_mtl_request_t) or the shim copies a field into one
 * (ompi_status_public_t).
 */
#define FIELD_SIZE(type, field) sizeof(((type *) 0)->field)
#define ASSERT_FIELD(type, field, off)                                      \
    _Static_assert(offsetof(type, field) == (off),                          \
                   "offset of " #type "." #field " differs from ffi.rs")
#define ASSERT_SAME_FIELD(type, field, mirror, mfield)                      \
    _Static_assert(offsetof(type, field) == offsetof(mirror, mfield)        \
                       && FIELD_SIZE(type, field) == FIELD_SIZE(mirror, mfield), \
                   #mirror "." #mfield " does not mirror " #type "." #field)

/* MtlRequest mirrors Open MPI's mca_mtl_request_t. */
ASSERT_FIELD(mca_mtl_request_t, ompi_req, RUSTOFI_LAYOUT_MTL_REQUEST_OMPI_REQ);
ASSERT_FIELD(mca_mtl_request_t, completion_callback,
             RUSTOFI_LAYOUT_MTL_REQUEST_COMPLETION_CALLBACK);
_Static_assert(sizeof(mca_mtl_request_t) == RUSTOFI_LAYOUT_MTL_REQUEST_SIZE,
               "size of mca_mtl_request_t differs from ffi.rs");
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
               "size of RustofiReqHead differs from ffi.rs");
_Static_assert(0 == RUSTOFI_LAYOUT_REQ_HEAD_MTL,
               "a mca_mtl_request_t pointer must also point at its RustofiReqHead");

/* RustofiStatus (filled by Rust) and the receive callback's source, tag and
 * byte count are copied into ompi_status_public_t. */
ASSERT_FIELD(RustofiStatus, source, RUSTOFI_LAYOUT_STATUS_SOURCE);
ASSERT_FIELD(RustofiStatus, tag, RUSTOFI_LAYOUT_STATUS_TAG);
ASSERT_FIELD(RustofiStatus, count, RUSTOFI_LAYOUT_STATUS_COUNT);
_Static_assert(sizeof(RustofiStatus) == RUSTOFI_LAYOUT_STATUS_SIZE,
               "size of RustofiStatus differs from ffi.rs");
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
               "size of RustofiCallbacks differs from ffi.rs");
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
_Static_assert(sizeof(RustofiConfig) == RUSTOFI_LAYOUT_CONFIG_SIZE,
               "size of RustofiConfig differs from ffi.rs");

/* ------------------------------------------------------------------ */
/* MCA parameters                                                      */

static int param_priority = 25;
static char *param_include = NULL;
static char *param_exclude = NULL;
static int param_eager_limit = -1;
static int param_verbose = 0;
static char *param_rndv_protocol = NULL;
static char *param_shm = NULL;
static int param_coalesce = 1;
static long param_rndv_chunk = 64L * 1024 * 1024;
static int param_rx_buffers = 256;
static char *param_fault_inject = NULL;
static int idx_include = -1;
static int idx_exclude = -1;

static int rustofi_component_register(void);
static int rustofi_component_open(void);
static int rustofi_component_close(void);
static int rustofi_component_query(mca_base_module_t **module, int *priority);
static mca_mtl_base_module_t *rustofi_component_init(bool enable_progress_threads,
                                                     bool enable_mpi_threads);

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
};

static int reg_int(const char *name, const char *help, int level, int *storage)
{
    return mca_base_component_var_register(&mca_mtl_rustofi_component.mtl_version, name, help,
                                           MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, level,
                                           MCA_BASE_VAR_SCOPE_READONLY, storage);
}

static int reg_string(const char *name, const char *help, int level, char **storage)
{
    return mca_base_component_var_register(&mca_mtl_rustofi_component.mtl_version, name, help,
                                           MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, level,
                                           MCA_BASE_VAR_SCOPE_READONLY, storage);
}

static int rustofi_component_register(void)
{
    reg_int("priority",
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
    reg_int("eager_limit",
            "Largest message (bytes, 0..1048576) sent eagerly; larger ones use the rendezvous "
            "protocol. -1 (default) picks it per provider: 65536 for tcp (rxm's bounce buffers "
            "are enlarged to match unless FI_OFI_RXM_BUFFER_SIZE is set), 4048 for shm (its "
            "inject size less our header), 8192 for the others",
            OPAL_INFO_LVL_3, &param_eager_limit);
    reg_int("verbose",
            "Verbosity: 1 prints one line of traffic counters per rank at finalize, 2 also the "
            "chosen provider and capabilities at startup",
            OPAL_INFO_LVL_1, &param_verbose);
    reg_string("rndv_protocol",
               "Rendezvous data path: auto (RMA read when the provider has FI_RMA, else send), "
               "read, or send",
               OPAL_INFO_LVL_5, &param_rndv_protocol);
    mca_base_component_var_register(&mca_mtl_rustofi_component.mtl_version, "rndv_chunk_size",
                                    "Largest single libfabric transfer of a rendezvous (bytes, at "
                                    "least 4096; also capped by the provider's max_msg_size)",
                                    MCA_BASE_VAR_TYPE_LONG, NULL, 0, 0, OPAL_INFO_LVL_5,
                                    MCA_BASE_VAR_SCOPE_READONLY, &param_rndv_chunk);
    param_shm = "auto";
    reg_string("shm",
               "Reach peers on the same host through libfabric's shm provider beside the network "
               "provider, with one matching engine above both: auto (on for tcp, udp, sockets and "
               "other providers that would loop local traffic through the network stack; off for "
               "efa, which already routes same-host peers through shm itself, and when the "
               "provider is shm), on, or off",
               OPAL_INFO_LVL_3, &param_shm);
    reg_int("coalesce",
            "1: back-to-back small eager sends to one peer, issued while an earlier packet to "
            "it is still in flight, share one packet (sent at the next call into the MTL that "
            "is not such a send, or when full); 0: every message is its own packet",
            OPAL_INFO_LVL_4, &param_coalesce);
    reg_int("rx_buffers", "Receive bounce buffers kept posted (8..65536)", OPAL_INFO_LVL_5,
            &param_rx_buffers);
    reg_string("fault_inject",
               "Testing only: none, rma_key (corrupt the key of the next rendezvous read so the "
               "provider reports a completion error) or bad_packet (send one malformed packet)",
               OPAL_INFO_LVL_9, &param_fault_inject);
    return OMPI_SUCCESS;
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

static mca_mtl_base_module_t rustofi_module = {
    .mtl_max_contextid = 0x7fffffff,
    .mtl_max_tag = 0x7fffffff,
    .mtl_request_size = 0,
    /* All procs are added at MPI_Init, so an incoming packet's sender is
     * always known. */
    .mtl_flags = MCA_MTL_BASE_FLAG_REQUIRE_WORLD,
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
    *priority = param_priority;
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
    if (head->free_after) {
        if (bytes > 0) {
            /* unpacks into the user's datatype and frees the buffer */
            ompi_mtl_datatype_unpack((struct opal_convertor_t *) head->convertor, head->buffer,
                                     bytes);
        } else {
            free(head->buffer);
        }
        head->buffer = NULL;
        head->free_after = false;
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

static void cb_send_complete(RustofiReqHead *head, int status)
{
    mca_mtl_request_t *req = (mca_mtl_request_t *) head;
    int err = STATUS_OK == status ? OMPI_SUCCESS : MPI_ERR_OTHER;
    if (head->free_after) {
        free(head->buffer);
        head->buffer = NULL;
        head->free_after = false;
    }
    if (NULL != req->ompi_req) {
        req->ompi_req->req_status.MPI_ERROR = err;
    } else {
        ((rustofi_blocking_t *) head)->error = err;
    }
    req->completion_callback(req);
}

static void cb_cancel_complete(RustofiReqHead *head)
{
    mca_mtl_request_t *req = (mca_mtl_request_t *) head;
    if (head->free_after) {
        free(head->buffer);
        head->buffer = NULL;
        head->free_after = false;
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

static mca_mtl_base_module_t *rustofi_component_init(bool enable_progress_threads,
                                                     bool enable_mpi_threads)
{
    RustofiConfig cfg = {
        .provider_include = param_include,
        .include_set = var_is_set(idx_include),
        .provider_exclude = param_exclude,
        .exclude_set = var_is_set(idx_exclude),
        .eager_limit = param_eager_limit,
        .rndv_protocol = param_rndv_protocol,
        .rndv_chunk_size = param_rndv_chunk,
        .rx_buffers = param_rx_buffers,
        .verbose = param_verbose,
        .fault_inject = param_fault_inject,
        .shm = param_shm,
        .coalesce = param_coalesce,
        .named = rustofi_named(),
        .my_name = proc_name64(OMPI_PROC_MY_NAME),
        .rank = (int64_t) OMPI_PROC_MY_NAME->vpid,
    };
    RustofiCallbacks cb = {
        .recv_complete = cb_recv_complete,
        .send_complete = cb_send_complete,
        .cancel_complete = cb_cancel_complete,
    };
    if (sizeof(mca_mtl_request_t) + rustofi_request_extra() > sizeof(((rustofi_blocking_t *) 0)->u)) {
        opal_output(0, "mtl_rustofi: request layout larger than the blocking-send buffer");
        return NULL;
    }
    if (0 != rustofi_init(&cfg, &cb)) {
        return NULL;
    }

    uint8_t name[1024];
    size_t len = sizeof(name);
    int ret;
    if (0 != rustofi_endpoint_name(name, &len)) {
        rustofi_finalize();
        return NULL;
    }
    OPAL_MODEX_SEND(ret, OPAL_PMIX_GLOBAL, &mca_mtl_rustofi_component.mtl_version, name, len);
    if (OMPI_SUCCESS != ret) {
        opal_output(0, "mtl_rustofi: could not publish the endpoint name (modex): %d", ret);
        rustofi_finalize();
        return NULL;
    }
    rustofi_module.mtl_request_size = rustofi_request_extra();
    opal_progress_register(rustofi_progress_cb);
    return &rustofi_module;
}

static int rustofi_mtl_finalize(struct mca_mtl_base_module_t *mtl)
{
    opal_progress_unregister(rustofi_progress_cb);
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

static size_t peer_of(struct ompi_communicator_t *comm, int rank)
{
    ompi_proc_t *proc = ompi_comm_peer_lookup(comm, rank);
    if (OPAL_UNLIKELY(NULL == proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL])) {
        if (OMPI_SUCCESS != rustofi_add_procs(&rustofi_module, 1, &proc)) {
            return 0;
        }
    }
    return (size_t) proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL];
}

static int rustofi_add_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm)
{
    return OMPI_SUCCESS;
}

static int rustofi_del_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm)
{
    return OMPI_SUCCESS;
}

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
static int send_buffer(struct opal_convertor_t *convertor, void **start, size_t *length,
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

static int start_send(struct ompi_communicator_t *comm, int dest, int tag,
                      struct opal_convertor_t *convertor, mca_pml_base_send_mode_t mode,
                      RustofiReqHead *head)
{
    void *start = NULL;
    size_t length = 0;
    bool free_after = false;
    size_t peer = peer_of(comm, dest);
    if (0 == peer) {
        return OMPI_ERR_UNREACH;
    }
    int ret = send_buffer(convertor, &start, &length, &free_after);
    if (OMPI_SUCCESS != ret) {
        return ret;
    }
    head->convertor = convertor;
    head->buffer = free_after ? start : NULL;
    head->length = length;
    head->free_after = free_after;
    if (0 != rustofi_isend(peer, comm->c_contextid, comm->c_my_rank, tag, start, length,
                           MCA_PML_BASE_SEND_SYNCHRONOUS == mode, head)) {
        if (free_after) {
            free(start);
        }
        return OMPI_ERROR;
    }
    return OMPI_SUCCESS;
}

static int rustofi_mtl_isend(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                             int dest, int tag, struct opal_convertor_t *convertor,
                             mca_pml_base_send_mode_t mode, bool blocking,
                             mca_mtl_request_t *mtl_request)
{
    return start_send(comm, dest, tag, convertor, mode, (RustofiReqHead *) mtl_request);
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
    int ret = start_send(comm, dest, tag, convertor, mode, &b.u.head);
    if (OMPI_SUCCESS != ret) {
        return ret;
    }
    while (!b.done) {
        opal_progress();
    }
    return b.error;
}

/* Where a receive lands: the user buffer, or a bounce buffer unpacked
 * through the convertor at completion (non-contiguous types). */
static int prepare_recv(struct opal_convertor_t *convertor, RustofiReqHead *head)
{
    void *start = NULL;
    size_t length = 0;
    bool free_after = false;
    int ret = ompi_mtl_datatype_recv_buf(convertor, &start, &length, &free_after);
    if (OMPI_SUCCESS != ret) {
        return ret;
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
        free(head->buffer);
        head->buffer = NULL;
        head->free_after = false;
    }
}

static int rustofi_mtl_irecv(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                             int src, int tag, struct opal_convertor_t *convertor,
                             mca_mtl_request_t *mtl_request)
{
    RustofiReqHead *head = (RustofiReqHead *) mtl_request;
    int ret = prepare_recv(convertor, head);
    if (OMPI_SUCCESS != ret) {
        return ret;
    }
    if (0 != rustofi_irecv(comm->c_contextid, src, tag, head->buffer, head->length, head)) {
        release_recv(head);
        return OMPI_ERROR;
    }
    return OMPI_SUCCESS;
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
    if (0 != rustofi_iprobe(comm->c_contextid, src, tag, flag, &st)) {
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
    if (0 != rustofi_improbe(comm->c_contextid, src, tag, matched, &st, &handle)) {
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
    if (0 != rustofi_imrecv(handle, head->buffer, head->length, head)) {
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
