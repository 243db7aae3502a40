/*
 * mtl_rustofi: the point-to-point calls of the module (where a message's
 * bytes are, through Open MPI's convertors; statuses) and the completion
 * callbacks through which the Rust library hands operations back.
 */

#include "rustofi_shim.h"

/* ------------------------------------------------------------------ */
/* Completions                                                         */

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
 * datatype, frees it and hands the request to Open MPI. Out of line, and
 * ending in the same tail call as the common completion (into the user's
 * buffer), so that that one is a leaf under either compiler: it saves no
 * registers and sets up no frame. */
static __attribute__((noinline)) void complete_bounced(mca_mtl_request_t *req,
                                                       RustofiReqHead *head, size_t bytes)
{
    if (0 == bytes) {
        drop_bounce(head);
    } else {
        /* unpacks into the user's datatype and frees the buffer */
        ompi_mtl_datatype_unpack((struct opal_convertor_t *) head->convertor, head->buffer,
                                 bytes);
        forget_bounce(head);
    }
    req->completion_callback(req);
}

/* The MPI error of a receive that did not complete with STATUS_OK. */
static inline int recv_error(int status)
{
    return STATUS_TRUNCATED == status ? MPI_ERR_TRUNCATE : MPI_ERR_OTHER;
}

void cb_recv_complete(RustofiReqHead *head, int32_t src, int32_t tag, size_t bytes,
                             int status)
{
    mca_mtl_request_t *req = (mca_mtl_request_t *) head;
    ompi_status_public_t *st = &req->ompi_req->req_status;
    st->MPI_SOURCE = src;
    st->MPI_TAG = tag;
    st->_ucount = bytes;
    st->MPI_ERROR = OPAL_LIKELY(STATUS_OK == status) ? OMPI_SUCCESS : recv_error(status);
    if (OPAL_UNLIKELY(head->free_after)) {
        complete_bounced(req, head, bytes);
        return;
    }
    req->completion_callback(req);
}

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
 * gaps): frees the copy first. Out of line, as complete_bounced is. */
static __attribute__((noinline)) void send_done_bounced(RustofiReqHead *head, int status)
{
    drop_bounce(head);
    send_done(head, status);
}

void cb_send_complete(RustofiReqHead *head, int status)
{
    if (OPAL_UNLIKELY(head->free_after)) {
        send_done_bounced(head, status);
        return;
    }
    send_done(head, status);
}

void cb_cancel_complete(RustofiReqHead *head)
{
    mca_mtl_request_t *req = (mca_mtl_request_t *) head;
    if (head->free_after) {
        drop_bounce(head);
    }
    req->ompi_req->req_status._cancelled = true;
    req->ompi_req->req_status.MPI_ERROR = OMPI_SUCCESS;
    req->completion_callback(req);
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
 * A device (GPU) buffer on Open MPI 5 takes ompi_mtl_datatype_pack's way,
 * which stages it through host memory for an MTL without accelerator
 * support (the component's pointer would be one the CPU cannot read);
 * its flag joins the mask tested anyway, so host buffers pay nothing.
 */
#if OMPI_MAJOR_VERSION >= 5
#    define SEND_BUFFER_SLOW_FLAGS (CONVERTOR_COMPLETED | CONVERTOR_ACCELERATOR)
#else
#    define SEND_BUFFER_SLOW_FLAGS CONVERTOR_COMPLETED
#endif

/* The request head's view of an operation's bytes: where they are, how
 * many, and whether they are the shim's copy (freed at completion). */
static inline __attribute__((always_inline)) void
set_head_bytes(RustofiReqHead *head, struct opal_convertor_t *convertor, void *start,
               size_t length, bool free_after)
{
    head->convertor = convertor;
    head->buffer = start;
    head->length = length;
    head->free_after = free_after;
}

/* Whether a send's bytes are contiguous in the user's buffer, and where
 * they start (`*start`) if so. */
static inline __attribute__((always_inline)) bool send_contiguous(struct opal_convertor_t *convertor,
                                                                 void **start)
{
    if (NULL != convertor->pDesc && !(convertor->flags & SEND_BUFFER_SLOW_FLAGS)
        && opal_datatype_is_contiguous_memory_layout(convertor->pDesc, convertor->count)) {
        *start = convertor->pBaseBuf;
        if (convertor->flags & CONVERTOR_SEND) {
            *start = convertor->pBaseBuf + convertor->pDesc->true_lb;
        }
        return true;
    }
    return false;
}

/* start_send for a send whose bytes are not contiguous in the user's
 * buffer: ompi_mtl_datatype_pack finds them (packs a copy, or stages a
 * device buffer), then the send starts as start_send's does. Out of
 * line, so that the common send keeps no value in memory across a call
 * before rustofi_isend (or the Rust send inlined in its place, with the
 * link-time optimisation), and its locals are not ones whose addresses
 * pack takes. */
static __attribute__((noinline)) int start_send_packed(size_t peer, uint32_t cid, int rank,
                                                       int tag, bool sync,
                                                       struct opal_convertor_t *convertor,
                                                       RustofiReqHead *head)
{
    void *start = NULL;
    size_t length = 0;
    bool free_after = false;
    int ret = ompi_mtl_datatype_pack(convertor, &start, &length, &free_after);
    if (OMPI_SUCCESS != ret) {
        return ret;
    }
    set_head_bytes(head, convertor, start, length, free_after);
    int rc = rustofi_isend(peer, cid, rank, tag, sync, head);
    if (OPAL_UNLIKELY(rc < 0)) {
        if (free_after) {
            drop_bounce(head);
        }
        return OMPI_ERROR;
    }
    return rc;
}

/* Starts a send. Returns rustofi_isend's answer, 0 (started) or
 * RUSTOFI_SEND_COMPLETE / RUSTOFI_SEND_FLUSHED (complete already: the
 * caller completes the request), or an Open MPI error (negative). */
static inline __attribute__((always_inline)) int
start_send(struct ompi_communicator_t *comm, int dest, int tag, struct opal_convertor_t *convertor,
           mca_pml_base_send_mode_t mode, RustofiReqHead *head)
{
    size_t peer = peer_of(comm, dest);
    if (0 == peer) {
        return OMPI_ERR_UNREACH;
    }
    uint32_t cid = 0;
    int ret = send_cid(comm, dest, &cid);
    if (OMPI_SUCCESS != ret) {
        return ret;
    }
    bool sync = MCA_PML_BASE_SEND_SYNCHRONOUS == mode;
    void *start = NULL;
    if (OPAL_UNLIKELY(!send_contiguous(convertor, &start))) {
        return start_send_packed(peer, cid, comm->c_my_rank, tag, sync, convertor, head);
    }
    set_head_bytes(head, convertor, start, convertor->local_size, false);
    int rc;
    RUSTOFI_INLINE_CALL rc = rustofi_isend(peer, cid, comm->c_my_rank, tag, sync, head);
    /* Nothing to release: the user's own buffer. */
    return OPAL_UNLIKELY(rc < 0) ? OMPI_ERROR : rc;
}

_Static_assert(OMPI_SUCCESS == 0 && RUSTOFI_SEND_COMPLETE > 0 && RUSTOFI_SEND_FLUSHED > 0,
               "start_send's answers: errors negative, started 0, complete positive");

int rustofi_mtl_isend(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
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
    /* The last access to the request: its owner may return at once. */
    __atomic_store_n(&((rustofi_blocking_t *) req)->done, 1, __ATOMIC_RELEASE);
}

int rustofi_send(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
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
    while (!__atomic_load_n(&b.done, __ATOMIC_ACQUIRE)) {
        opal_progress();
        if (OPAL_UNLIKELY(rustofi_failed())) {
            /* Broken by an internal error (already reported): no
             * completion is coming. The engine may still hold a pointer
             * into `b` (a queued command lives in it), but a broken
             * engine applies nothing and delivers nothing any more, so
             * nothing reads it after this returns. A packed copy is left
             * to leak for the same reason. */
            return OMPI_ERROR;
        }
    }
    /* The send's own packet has left the component's queue once the
     * request is complete (a copied send completes only then); other
     * packets may still wait there (e.g. while rxm connects to a new
     * peer: an acknowledgement, a resend). A blocking send returns once
     * the provider has them all, so that a caller waiting outside MPI
     * progress next (MPI_Comm_disconnect's fence in Open MPI 4.1) leaves
     * nothing behind. */
    while (rustofi_tx_queued() == 1) {
        if (OPAL_UNLIKELY(rustofi_failed())) {
            return OMPI_ERROR; /* its packet will not leave */
        }
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
    if (OPAL_UNLIKELY(free_after && NULL == start)) {
        /* Open MPI 4.1 does not check the bounce buffer's allocation. (A
         * user's buffer may start at address 0 plus an offset: MPI_BOTTOM
         * with absolute addresses.) */
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    set_head_bytes(head, convertor, start, length, free_after);
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
                                                   size_t peer, int tag, RustofiReqHead *head)
{
    if (0 != rustofi_irecv(recv_cid(comm), src, peer, tag, head)) {
        release_recv(head);
        return OMPI_ERROR;
    }
    return OMPI_SUCCESS;
}

int rustofi_mtl_irecv(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                             int src, int tag, struct opal_convertor_t *convertor,
                             mca_mtl_request_t *mtl_request)
{
    RustofiReqHead *head = (RustofiReqHead *) mtl_request;
    /* The source first: one that cannot be reached fails the receive
     * before a bounce buffer is made for it. */
    size_t peer = source_peer(comm, src);
    if (source_unreachable(src, peer)) {
        return OMPI_ERR_UNREACH;
    }
    int ret = prepare_recv(convertor, head);
    if (OPAL_UNLIKELY(OMPI_SUCCESS != ret)) {
        return ret;
    }
    if (OPAL_LIKELY(!head->free_after)) {
        /* Into the user's buffer: nothing to release if the post fails,
         * so its answer is ours (a tail call, or the Rust post inlined
         * here with the link-time optimisation). */
        RUSTOFI_INLINE_CALL return rustofi_irecv(recv_cid(comm), src, peer, tag, head);
    }
    return irecv_bounced(comm, src, peer, tag, head);
}

static void fill_status(ompi_status_public_t *status, const RustofiStatus *st)
{
    if (MPI_STATUS_IGNORE != status && NULL != status) {
        /* MPI_ERROR is the caller's: calls that return one status leave
         * it as it was (MPI 4.0, 3.2.5), as ob1 and mtl ofi do. */
        status->MPI_SOURCE = st->source;
        status->MPI_TAG = st->tag;
        status->_ucount = st->count;
        /* A probed message is never a cancelled one (MPI_Test_cancelled
         * on this status must say so, whatever the caller's held). */
        status->_cancelled = false;
    }
}

int rustofi_mtl_iprobe(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm,
                              int src, int tag, int *flag, struct ompi_status_public_t *status)
{
    RustofiStatus st;
    size_t peer = source_peer(comm, src);
    if (source_unreachable(src, peer)) {
        return OMPI_ERR_UNREACH;
    }
    if (0 != rustofi_iprobe(recv_cid(comm), src, peer, tag, flag, &st)) {
        return OMPI_ERROR;
    }
    if (*flag) {
        fill_status(status, &st);
    }
    return OMPI_SUCCESS;
}

int rustofi_mtl_improbe(struct mca_mtl_base_module_t *mtl,
                               struct ompi_communicator_t *comm, int src, int tag, int *matched,
                               struct ompi_message_t **message,
                               struct ompi_status_public_t *status)
{
    RustofiStatus st;
    void *handle = NULL;
    size_t peer = source_peer(comm, src);
    if (source_unreachable(src, peer)) {
        return OMPI_ERR_UNREACH;
    }
    /* The message object first: a matched probe takes the message out of
     * matching for good, so no failure may come after it. */
    struct ompi_message_t *msg = ompi_message_alloc();
    if (NULL == msg) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    if (0 != rustofi_improbe(recv_cid(comm), src, peer, tag, matched, &st, &handle)) {
        ompi_message_return(msg);
        return OMPI_ERROR;
    }
    if (!*matched) {
        ompi_message_return(msg);
        *message = MPI_MESSAGE_NULL;
        return OMPI_SUCCESS;
    }
    fill_status(status, &st);
    *message = msg;
    (*message)->comm = comm;
    (*message)->req_ptr = handle;
    (*message)->peer = st.source;
    (*message)->count = st.count;
    return OMPI_SUCCESS;
}

int rustofi_mtl_imrecv(struct mca_mtl_base_module_t *mtl,
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

int rustofi_mtl_cancel(struct mca_mtl_base_module_t *mtl, mca_mtl_request_t *mtl_request,
                              int flag)
{
    /* Receives still queued are cancelled (the callback marks them);
     * matched receives and sends complete normally. A request complete
     * already has nothing to cancel, and one never started (a persistent
     * request before MPI_Start, which Open MPI marks complete) has no
     * state of ours to read: neither is passed on. */
    ompi_request_t *ompi_req = mtl_request->ompi_req;
    if (NULL != ompi_req && REQUEST_COMPLETE(ompi_req)) {
        return OMPI_SUCCESS;
    }
    return rustofi_cancel((RustofiReqHead *) mtl_request) < 0 ? OMPI_ERROR : OMPI_SUCCESS;
}

