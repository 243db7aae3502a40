/*
 * mtl_rustofi's C side: what its files share. The C side does only what
 * must touch Open MPI's macros and inline functions; everything else
 * (provider selection, libfabric resources, wire protocol, matching,
 * progress) is the Rust library behind rustofi.h.
 * - rustofi_shim.c: the component, MCA parameters, init and finalize,
 *   modex publish and lookup, peers;
 * - rustofi_p2p.c: the point-to-point calls (convertors, statuses) and the
 *   completion callbacks the Rust library calls;
 * - rustofi_excid.c: communicator ids (Open MPI 5's extended ids);
 * - rustofi_site.c: enumerated parameters, help messages, output, MPI_T
 *   performance variables.
 * Every name declared here is hidden (config/exports.map exports only the
 * component), so calls between the files bind locally and one defined
 * in the same file may be inlined.
 */
#ifndef RUSTOFI_SHIM_H
#define RUSTOFI_SHIM_H

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

#pragma GCC visibility push(hidden)

/* MCA parameter mtl_rustofi_verbose (rustofi_shim.c). */
extern long rustofi_param_verbose;
extern long rustofi_param_peer_timeout;

/* Prefixes a statement whose call into the Rust library is to be inlined
 * when the build optimises the shim and the library together
 * (scripts/build, RUSTOFI_LTO): the per-message send and receive post,
 * whose Rust bodies are otherwise too large for the inliner to take. A
 * call-site attribute of clang's (in C from clang 17; without the
 * optimisation it has nothing to inline); nothing under other compilers,
 * which build without that optimisation. */
#if defined(__clang__) && __clang_major__ >= 17
#define RUSTOFI_INLINE_CALL [[clang::always_inline]]
#else
#define RUSTOFI_INLINE_CALL
#endif

#if OMPI_MAJOR_VERSION >= 5
/* Context id of the messages that exchange communicator indexes (see
 * rustofi_excid.c); communicators use the ids below it. */
#define RUSTOFI_EXCID_CTX 0x7fffffffu
#endif

/* A blocking send on the caller's stack: its completion sets `error`, then
 * `done` (a release store: under MPI_THREAD_MULTIPLE another thread's
 * progress may complete it), which the waiting thread reads with acquire
 * before it reads `error`. */
typedef struct {
    union {
        RustofiReqHead head;
        char storage[512];
    } u;
    int done;
    int error;
} rustofi_blocking_t;

/* ---- rustofi_p2p.c: the module's point-to-point calls ---- */
int rustofi_send(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm, int dest,
                 int tag, struct opal_convertor_t *convertor, mca_pml_base_send_mode_t mode);
int rustofi_mtl_isend(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                      int dest, int tag, struct opal_convertor_t *convertor,
                      mca_pml_base_send_mode_t mode, bool blocking,
                      mca_mtl_request_t *mtl_request);
int rustofi_mtl_irecv(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                      int src, int tag, struct opal_convertor_t *convertor,
                      mca_mtl_request_t *mtl_request);
int rustofi_mtl_iprobe(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                       int src, int tag, int *flag, struct ompi_status_public_t *status);
int rustofi_mtl_imrecv(struct mca_mtl_base_module_t *mtl, struct opal_convertor_t *convertor,
                       struct ompi_message_t **message, mca_mtl_request_t *mtl_request);
int rustofi_mtl_improbe(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                        int src, int tag, int *matched, struct ompi_message_t **message,
                        struct ompi_status_public_t *status);
int rustofi_mtl_cancel(struct mca_mtl_base_module_t *mtl, mca_mtl_request_t *mtl_request,
                       int flag);

/* Completion callbacks, called by the Rust library after it has released
 * its progress token (so a callback may start new operations). */
void cb_recv_complete(RustofiReqHead *head, int32_t src, int32_t tag, size_t bytes, int status);
void cb_send_complete(RustofiReqHead *head, int status);
void cb_cancel_complete(RustofiReqHead *head);

/* ---- rustofi_excid.c: communicators ---- */
int rustofi_add_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm);
int rustofi_del_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm);
#if OMPI_MAJOR_VERSION >= 5
/* Posts the receive of index messages (init) and cancels it (finalize). */
int rustofi_excid_start(void);
void rustofi_excid_stop(void);
#endif

/* ---- rustofi_shim.c: peers ---- */
/* The peer handle of a process met for the first time (a dynamic process,
 * or a proc Open MPI adds lazily): added now; 0 if that fails. */
size_t rustofi_add_peer_late(ompi_proc_t *proc);

/* The peer handle of process `proc`, which is added first if it is not
 * yet. One load when the peer is known, the common case. */
static inline __attribute__((always_inline)) size_t proc_peer(ompi_proc_t *proc)
{
    size_t peer = (size_t) proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL];
    if (OPAL_UNLIKELY(0 == peer)) {
        return rustofi_add_peer_late(proc);
    }
    return peer;
}

/* The peer handle of `rank` of the communicator's remote group. Inlined
 * into every send and receive: one lookup and one load when the peer is
 * known. */
static inline __attribute__((always_inline)) size_t peer_of(struct ompi_communicator_t *comm,
                                                            int rank)
{
    return proc_peer(ompi_comm_peer_lookup(comm, rank));
}

/* The peer handle of a receive's or probe's source (0: MPI_ANY_SOURCE):
 * a receive from a peer that is given up fails instead of waiting. A
 * source that cannot be added (no rail reaches it) is 0 too: the callers
 * refuse it (source_unreachable) rather than wait on any source. */
static inline __attribute__((always_inline)) size_t source_peer(struct ompi_communicator_t *comm,
                                                                int src)
{
    return MPI_ANY_SOURCE == src ? 0 : peer_of(comm, src);
}

/* Whether source_peer's answer names a source that cannot be reached. */
static inline __attribute__((always_inline)) bool source_unreachable(int src, size_t peer)
{
    return OPAL_UNLIKELY(0 == peer && MPI_ANY_SOURCE != src);
}


/* ---- context ids of sends and receives (version differences) ---- */
#if OMPI_MAJOR_VERSION >= 5
/* send_cid of a communicator whose members index it each their own way:
 * the index learnt from the peer (exchanged first if it is not known yet). */
int send_cid_exchanged(struct ompi_communicator_t *comm, int dest, uint32_t *cid);

/* The context id this rank's messages carry (its local index). */
static inline uint32_t recv_cid(struct ompi_communicator_t *comm)
{
    return comm->c_index;
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

#pragma GCC visibility pop

#endif /* RUSTOFI_SHIM_H */
