/*
 * mtl_rustofi: communicator ids. Open MPI 4.1 gives every communicator a
 * context id agreed by all members, which messages carry as they are;
 * Open MPI 5 may not (below). The per-message part, the context id a send
 * or a receive carries, is inline in rustofi_shim.h.
 */

#include "rustofi_shim.h"

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

int rustofi_excid_start(void)
{
    excid_running = true;
    return excid_post();
}

void rustofi_excid_stop(void)
{
    if (rustofi_param_verbose >= 1 && (excid_nsent > 0 || excid_nrecv > 0)) {
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

int rustofi_add_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm)
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
    /* Every answer is tried (one that fails leaves only its own peer
     * waiting). On failure Open MPI releases the communicator without
     * del_comm, so it must leave the list here: a later index message
     * would otherwise read the freed communicator. */
    int ret = OMPI_SUCCESS;
    for (int i = 0; i < nreplies; i++) {
        if (OMPI_SUCCESS != excid_send(comm, replies[i])) {
            opal_output(0, "mtl_rustofi: could not send this rank's index of a new communicator "
                           "to its rank %d", replies[i]);
            ret = OMPI_ERROR;
        }
    }
    free(replies);
    if (OMPI_SUCCESS != ret) {
        rustofi_del_comm(mtl, comm);
    }
    return ret;
}

int rustofi_del_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm)
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

/* Waits for rank `dest`'s index of `comm`. A rank that never makes the
 * communicator, or is gone, leaves this wait for good, and nothing else
 * would say why the send does not return: so it says so once the wait has
 * lasted the peer timeout (30 s where that is 0), and again each time as
 * long again has passed. The clock is read once in 65536 rounds. */
static void excid_wait(ompi_communicator_t *comm, int dest, const struct rustofi_cid_peer *p)
{
    long every = rustofi_param_peer_timeout > 0 ? rustofi_param_peer_timeout : 30;
    long next = every;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned spins = 1; CID_EXCHANGED != __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
         spins++) {
        opal_progress();
        if (0 != (spins & 0xffff)) {
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        long waited = t.tv_sec - t0.tv_sec;
        if (waited >= next) {
            opal_output(0,
                        "mtl_rustofi: a send to rank %d of communicator %s has waited %ld s for "
                        "that rank's index of the communicator (a communicator made from a "
                        "group): the rank has not made the communicator yet, or is gone",
                        dest, comm->c_name, waited);
            next = waited + every;
        }
    }
}

/* Out of line (see send_cid): the usual communicator never comes here. */
__attribute__((noinline)) int send_cid_exchanged(struct ompi_communicator_t *comm, int dest,
                                                 uint32_t *cid)
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
                /* Not sent (the peer unreachable, or out of memory): this
                 * send fails, and the next one tries again instead of
                 * waiting for an answer that cannot come. If the peer's
                 * index arrived meanwhile (EXCHANGED), it stays known. */
                expected = CID_EXCHANGING;
                __atomic_compare_exchange_n(&p->state, &expected, CID_NOT_EXCHANGED, false,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
                return ret;
            }
        }
        excid_wait(comm, dest, p);
    }
    *cid = p->c_index;
    return OMPI_SUCCESS;
}
#else
int rustofi_add_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm)
{
    return OMPI_SUCCESS;
}

int rustofi_del_comm(struct mca_mtl_base_module_t *mtl, struct ompi_communicator_t *comm)
{
    return OMPI_SUCCESS;
}
#endif
