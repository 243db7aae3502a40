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
    int dest;     /* the receiver's rank in the communicator */
    bool resent;  /* this is the one resend after a failure */
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
static int excid_nfailed = 0; /* index sends that failed after they started */
static int excid_nqueued = 0; /* messages the re-posted receive found queued */
static int excid_depth_max = 0; /* most index messages a thread handled nested */

static bool excid_same(const rustofi_excid_msg_t *m, const ompi_communicator_t *comm)
{
    return m->cid_base == comm->c_contextid.cid_base
        && m->cid_sub == comm->c_contextid.cid_sub.u64;
}

/* The communicator of index message `m`, if added; with excid_lock held. */
static struct mca_mtl_comm_t *excid_find(const rustofi_excid_msg_t *m)
{
    struct mca_mtl_comm_t *mc = excid_comms;
    while (NULL != mc && !excid_same(m, mc->comm)) {
        mc = mc->next;
    }
    return mc;
}

static void excid_send_done(struct mca_mtl_request_t *req);

/* fault_inject excid_lost (testing): rank 0's first index send is not
 * made but held here, and reported failed (excid_lost_release) once the
 * peer's own index has arrived, so that its failure finds the two crossed:
 * the peer waits for this rank's index, which must be sent again. */
static rustofi_excid_send_t *excid_lost_held;
static bool excid_lost_done;

/* Whether this is rank 0 of the job under the shim's own fault `name`. */
static __attribute__((cold)) bool rank0_fault(const char *name)
{
    return 0 == OMPI_PROC_MY_NAME->vpid
        && 0 == strcmp(rustofi_enum_text(RUSTOFI_ENUM_FAULT_INJECT), name);
}

/* Whether the fault takes this send (the first one of rank 0). */
static bool excid_lost_takes(rustofi_excid_send_t *s)
{
    if (excid_lost_done || !rank0_fault("excid_lost")) {
        return false;
    }
    excid_lost_done = true;
    __atomic_add_fetch(&excid_nsent, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&excid_lost_held, s, __ATOMIC_RELEASE);
    opal_output(0, "mtl_rustofi: fault_inject excid_lost: the index message to rank %d is held "
                   "back, to be reported failed once that rank's index is here", s->dest);
    return true;
}

/* This rank's index message for rank `dest` of `comm`, with the peer's
 * process (retained): taken while the communicator is sure to exist (its
 * caller has it, or excid_lock is held), sent (and the process released)
 * by excid_send after. The peer's handle is looked up there, not here:
 * adding a peer not added yet delivers the completions it finds, which
 * may land in this file's callbacks, which take excid_lock. */
typedef struct {
    ompi_proc_t *proc;
    int dest;
    rustofi_excid_msg_t msg;
} rustofi_excid_out_t;

static rustofi_excid_out_t excid_out(ompi_communicator_t *comm, int dest)
{
    ompi_proc_t *proc = ompi_comm_peer_lookup(comm, dest);
    OBJ_RETAIN(proc);
    rustofi_excid_out_t o = {
        .proc = proc,
        .dest = dest,
        .msg = {
            .cid_base = comm->c_contextid.cid_base,
            .cid_sub = comm->c_contextid.cid_sub.u64,
            .c_index = comm->c_index,
            .rank = comm->c_my_rank,
        },
    };
    return o;
}

/* Sends index message `o`: a synchronous send, so that it fails
 * if the peer is lost before it takes the message (the core watches the
 * peers that synchronous sends wait on), and the wait for the peer's
 * answer can end with an error instead of lasting for good. `resent` marks
 * the one resend after a failure (excid_send_failed). Not to be called
 * with excid_lock held: a send may deliver completions, which may land in
 * this file's callbacks. */
static int excid_send(rustofi_excid_out_t *o, bool resent)
{
    size_t peer = proc_peer(o->proc);
    OBJ_RELEASE(o->proc);
    if (0 == peer) {
        return OMPI_ERR_UNREACH;
    }
    rustofi_excid_send_t *s = calloc(1, sizeof(*s));
    if (NULL == s) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    s->msg = o->msg;
    s->dest = o->dest;
    s->resent = resent;
    s->b.u.head.mtl.ompi_req = NULL;
    s->b.u.head.mtl.completion_callback = (void (*)(MtlRequest *)) excid_send_done;
    s->b.u.head.convertor = NULL;
    s->b.u.head.buffer = &s->msg;
    s->b.u.head.length = sizeof(s->msg);
    s->b.u.head.free_after = false;
    if (OPAL_UNLIKELY(excid_lost_takes(s))) {
        return OMPI_SUCCESS;
    }
    int rc = rustofi_isend(peer, RUSTOFI_EXCID_CTX, o->msg.rank, 0, true, &s->b.u.head);
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

/* excid_send of this rank's index of `comm`, which the caller holds. */
static int excid_send_to(ompi_communicator_t *comm, int dest)
{
    rustofi_excid_out_t o = excid_out(comm, dest);
    return excid_send(&o, false);
}

/* Rank `dest`'s entry in the communicator of index message `m`, if that
 * communicator is added here (`*mc` is set to it); with excid_lock held. */
static struct rustofi_cid_peer *excid_find_peer(const rustofi_excid_msg_t *m, int dest,
                                                struct mca_mtl_comm_t **mc)
{
    *mc = excid_find(m);
    return NULL != *mc && dest >= 0 && dest < (*mc)->size ? &(*mc)->peer[dest] : NULL;
}

/* An index send failed after it started (its peer lost, or a completion
 * error). If the peer's own index has not come, the sends waiting for it
 * (excid_wait) would wait for good: the state goes back to not exchanged,
 * which ends their wait with an error, and a later send tries again. If
 * it has come (it crossed ours), the peer waits for ours: it is sent once
 * more. */
static void excid_send_failed(const rustofi_excid_send_t *s)
{
    __atomic_add_fetch(&excid_nfailed, 1, __ATOMIC_RELAXED);
    opal_output(0, "mtl_rustofi: this rank's index of a communicator made from a group could not "
                   "be delivered to its rank %d%s", s->dest,
                s->resent ? " (a second time)" : "");
    bool again = false;
    rustofi_excid_out_t o;
    pthread_mutex_lock(&excid_lock);
    struct mca_mtl_comm_t *mc;
    struct rustofi_cid_peer *p = excid_find_peer(&s->msg, s->dest, &mc);
    int expected = CID_EXCHANGING;
    if (NULL != p
        && !__atomic_compare_exchange_n(&p->state, &expected, CID_NOT_EXCHANGED, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
        && CID_EXCHANGED == expected && !s->resent) {
        again = true;
        o = excid_out(mc->comm, s->dest);
    }
    pthread_mutex_unlock(&excid_lock);
    if (again && OMPI_SUCCESS != excid_send(&o, true)) {
        opal_output(0, "mtl_rustofi: could not send the communicator index to rank %d again",
                    s->dest);
    }
}

static void excid_send_done(struct mca_mtl_request_t *req)
{
    rustofi_excid_send_t *s = (rustofi_excid_send_t *) req;
    if (OMPI_SUCCESS != s->b.error) {
        excid_send_failed(s);
    }
    free(s);
}

/* excid_lost: reports the held send failed once its peer's index is known. */
static void excid_lost_release(void)
{
    rustofi_excid_send_t *s = __atomic_load_n(&excid_lost_held, __ATOMIC_ACQUIRE);
    if (OPAL_LIKELY(NULL == s)) {
        return;
    }
    pthread_mutex_lock(&excid_lock);
    struct mca_mtl_comm_t *mc;
    struct rustofi_cid_peer *p = excid_find_peer(&s->msg, s->dest, &mc);
    bool known = NULL != p && CID_EXCHANGED == __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&excid_lock);
    if (known && __atomic_compare_exchange_n(&excid_lost_held, &s, NULL, false, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE)) {
        cb_send_complete(&s->b.u.head, STATUS_FAILED);
    }
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
    bool reply = false;
    rustofi_excid_out_t ours;
    pthread_mutex_lock(&excid_lock);
    struct mca_mtl_comm_t *mc = excid_find(m);
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
        reply = true;
        ours = excid_out(mc->comm, m->rank);
    }
    pthread_mutex_unlock(&excid_lock);
    if (reply && OMPI_SUCCESS != excid_send(&ours, false)) {
        opal_output(0, "mtl_rustofi: could not send the communicator index to rank %d", m->rank);
    }
    excid_lost_release();
}

static int excid_post(void);

/* The completion of the index receive, delivered by whichever thread's
 * progress (or post) finished it. Posting the receive again may find the
 * next index message queued and finish at once, inside the post: nested so,
 * a thread would go one call deeper per queued message, and thousands of
 * ranks sending first to one that has not polled would overflow its stack.
 * So a completion that comes while this thread handles one is stashed (one
 * at most: one receive is posted at a time, and the stashed one is not
 * posted again until the outer call does it) and handled by the outer
 * call's loop. Another thread's completion is handled by that thread. */
static __thread int excid_depth; /* this thread's calls handling a message */
static __thread bool excid_stashed;
static __thread bool excid_stash_ok;
static __thread rustofi_excid_msg_t excid_stash;

static void excid_rx_done(struct mca_mtl_request_t *req)
{
    rustofi_excid_msg_t m = excid_rx_buf;
    bool ok = OMPI_SUCCESS == excid_rx_ompi.req_status.MPI_ERROR
           && !excid_rx_ompi.req_status._cancelled
           && sizeof(m) == excid_rx_ompi.req_status._ucount;
    if (!excid_running) {
        return;
    }
    if (excid_depth > 0) {
        __atomic_add_fetch(&excid_nqueued, 1, __ATOMIC_RELAXED);
        excid_stash = m;
        excid_stash_ok = ok;
        excid_stashed = true;
        return;
    }
    if (++excid_depth > __atomic_load_n(&excid_depth_max, __ATOMIC_RELAXED)) {
        __atomic_store_n(&excid_depth_max, excid_depth, __ATOMIC_RELAXED);
    }
    for (;;) {
        if (OMPI_SUCCESS != excid_post()) {
            opal_output(0, "mtl_rustofi: could not repost the communicator index receive");
        }
        if (ok) {
            __atomic_add_fetch(&excid_nrecv, 1, __ATOMIC_RELAXED);
            excid_received(&m);
        }
        if (!excid_stashed) {
            break;
        }
        excid_stashed = false;
        m = excid_stash;
        ok = excid_stash_ok;
    }
    excid_depth--;
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
                "excid_recv=%d excid_waited=%d excid_queued=%d excid_depth=%d "
                "excid_failed=%d\n", OMPI_PROC_MY_NAME->vpid, excid_nsent, excid_nrecv,
                excid_nwaited, excid_nqueued, excid_depth_max, excid_nfailed);
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
    if (!rank0_fault("late_comm")) {
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
        if (OMPI_SUCCESS != excid_send_to(comm, replies[i])) {
            opal_output(0, "mtl_rustofi: could not send this rank's index of a new communicator "
                           "to its rank %d", replies[i]);
            ret = OMPI_ERROR;
        }
    }
    free(replies);
    excid_lost_release();
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

/* Waits for rank `dest`'s index of `comm`, after this rank's own was sent
 * (by this thread or another). Ends with an error if that send fails (the
 * state goes back to not exchanged: excid_send_failed, or at once in
 * send_cid_exchanged). A rank that never makes the communicator leaves
 * this wait for good, and nothing else would say why the send does not
 * return: so it says so once the wait has lasted the peer timeout (30 s
 * where that is 0), and again each time as long again has passed. The
 * clock is read once in 65536 rounds. */
static int excid_wait(ompi_communicator_t *comm, int dest, const struct rustofi_cid_peer *p)
{
    long every = rustofi_param_peer_timeout > 0 ? rustofi_param_peer_timeout : 30;
    long next = every;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned spins = 1;; spins++) {
        int state = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
        if (CID_EXCHANGED == state) {
            return OMPI_SUCCESS;
        }
        if (CID_NOT_EXCHANGED == state) {
            return OMPI_ERR_UNREACH;
        }
        opal_progress();
        if (0 != (spins & 0xffff)) {
            continue;
        }
        if (rustofi_failed()) {
            /* Broken by an internal error (already reported): the index
             * message will not be handled. */
            return OMPI_ERROR;
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
            int ret = excid_send_to(comm, dest);
            if (OMPI_SUCCESS != ret) {
                /* Not sent (the peer unreachable, or out of memory): this
                 * send fails, so do those of other threads waiting for the
                 * same answer, and the next one tries again. If the peer's
                 * index arrived meanwhile (EXCHANGED), it stays known. */
                expected = CID_EXCHANGING;
                __atomic_compare_exchange_n(&p->state, &expected, CID_NOT_EXCHANGED, false,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
                return ret;
            }
        }
        int ret = excid_wait(comm, dest, p);
        if (OMPI_SUCCESS != ret) {
            return ret;
        }
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
