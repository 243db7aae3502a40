/*
 * sessions: a communicator made through MPI sessions (MPI 4; Open MPI 5)
 * carries point-to-point traffic and collectives over the MTL.
 *
 *  - MPI_Session_init -> MPI_Group_from_session_pset("mpi://WORLD") ->
 *    MPI_Comm_create_from_group; no MPI_Init, so no MPI_COMM_WORLD.
 *  - Before that, odd ranks make (and keep) a communicator of their own from
 *    "mpi://SELF", so the shared communicator gets a different local index
 *    on odd and even ranks: messages only match if the MTL exchanged the
 *    indexes of this non-global communicator correctly.
 *  - Ring exchange of patterned data at 0 B ... 4 MiB (eager and rendezvous
 *    sizes), with MPI_Isend/MPI_Irecv, MPI_Ssend, MPI_ANY_SOURCE receives;
 *    every byte checked, statuses checked.
 *  - A second communicator made from the first one's group (a second
 *    exchange) and MPI_Comm_split of the first (a global one).
 *  - Allreduce, Bcast of 1 MiB from every root, Alltoall and Barrier.
 *
 * Rank 0 prints "PASS sessions"; a failure prints "FAIL: ..." and aborts.
 * Built only against MPI >= 4 (the runner skips it for Open MPI 4.1).
 */
#include "common.h"

/* Open MPI 5.0 has MPI sessions but reports MPI_VERSION 3 */
#if MPI_VERSION < 4 && !(defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
#error "sessions.c needs MPI sessions (MPI 4, Open MPI 5)"
#endif

static MPI_Comm s_comm = MPI_COMM_NULL;
static int s_rank = -1;

static void __attribute__((noreturn, format(printf, 1, 2))) sfail(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL: %s [test sessions, rank %d]\n", msg, s_rank);
    fflush(stderr);
    if (s_comm != MPI_COMM_NULL)
        MPI_Abort(s_comm, 1);
    exit(1);
}

#define SCHECK(call)                                                           \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != MPI_SUCCESS)                                                \
            sfail("%s:%d: %s returned %d", __FILE__, __LINE__, #call, rc_);    \
    } while (0)

#define SEXPECT(cond, ...)                                                     \
    do {                                                                       \
        if (!(cond))                                                           \
            sfail(__VA_ARGS__);                                                \
    } while (0)

static void expect_data(const void *buf, size_t n, uint64_t seed, const char *what, int from)
{
    size_t bad = check_pattern(buf, n, seed);
    SEXPECT(bad == (size_t)-1, "%s from rank %d, %zu bytes: mismatch at byte %zu", what, from,
            n, bad);
}

static const size_t sizes[] = {0, 1, 1000, 8192, 8193, 65536, 65537, 262144, 4 * MIB};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static uint64_t seed_of(int src, size_t n, int round)
{
    return ((uint64_t)src << 40) ^ ((uint64_t)n << 4) ^ (uint64_t)round;
}

/* Ring: every rank sends to the next and receives from the previous. */
static void ring(MPI_Comm comm, const char *cname, int round)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        uint8_t *out = xmalloc(n), *in = xmalloc(n);
        fill_pattern(out, n, seed_of(rank, n, round));
        memset(in, 0xee, n);
        MPI_Request rq[2];
        MPI_Status st[2];
        SCHECK(MPI_Irecv(in, (int)n, MPI_BYTE, prev, 100 + (int)k, comm, &rq[0]));
        SCHECK(MPI_Isend(out, (int)n, MPI_BYTE, next, 100 + (int)k, comm, &rq[1]));
        SCHECK(MPI_Waitall(2, rq, st));
        int count = -1;
        MPI_Get_count(&st[0], MPI_BYTE, &count);
        SEXPECT(st[0].MPI_SOURCE == prev && st[0].MPI_TAG == 100 + (int)k &&
                    count == (int)n,
                "%s ring %zu B: status source %d tag %d count %d", cname, n,
                st[0].MPI_SOURCE, st[0].MPI_TAG, count);
        expect_data(in, n, seed_of(prev, n, round), cname, prev);
        free(out);
        free(in);
    }
}

/* Everyone sends to rank 0 synchronously; rank 0 receives from any source
 * and answers each with a blocking send (one tag per size: a rank that got
 * its answer may send the next size before the others' arrive). */
static void gather_any(MPI_Comm comm, const char *cname)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        uint8_t *buf = xmalloc(n);
        if (rank == 0) {
            for (int i = 1; i < size; i++) {
                MPI_Status st;
                SCHECK(MPI_Recv(buf, (int)n, MPI_BYTE, MPI_ANY_SOURCE, 1000 + (int)k, comm, &st));
                expect_data(buf, n, seed_of(st.MPI_SOURCE, n, 99), cname, st.MPI_SOURCE);
                fill_pattern(buf, n, seed_of(0, n, st.MPI_SOURCE));
                SCHECK(MPI_Send(buf, (int)n, MPI_BYTE, st.MPI_SOURCE, 2000 + (int)k, comm));
            }
        } else {
            fill_pattern(buf, n, seed_of(rank, n, 99));
            SCHECK(MPI_Ssend(buf, (int)n, MPI_BYTE, 0, 1000 + (int)k, comm));
            memset(buf, 0, n);
            SCHECK(MPI_Recv(buf, (int)n, MPI_BYTE, 0, 2000 + (int)k, comm, MPI_STATUS_IGNORE));
            expect_data(buf, n, seed_of(0, n, rank), cname, 0);
        }
        free(buf);
    }
}

static void collectives(MPI_Comm comm, const char *cname)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int n = 100000;
    int *a = xmalloc(sizeof(int) * n), *b = xmalloc(sizeof(int) * n);
    for (int i = 0; i < n; i++)
        a[i] = rank + i;
    SCHECK(MPI_Allreduce(a, b, n, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < n; i++)
        SEXPECT(b[i] == size * (size - 1) / 2 + size * i, "%s Allreduce element %d is %d",
                cname, i, b[i]);
    size_t bn = MIB;
    uint8_t *bb = xmalloc(bn);
    for (int root = 0; root < size; root++) {
        if (rank == root)
            fill_pattern(bb, bn, seed_of(root, bn, 1234));
        else
            memset(bb, 0, bn);
        SCHECK(MPI_Bcast(bb, (int)bn, MPI_BYTE, root, comm));
        expect_data(bb, bn, seed_of(root, bn, 1234), "Bcast", root);
    }
    int per = 5000;
    int *sa = xmalloc(sizeof(int) * per * size), *ra = xmalloc(sizeof(int) * per * size);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < per; i++)
            sa[p * per + i] = rank * 1000003 + p * 7919 + i;
    SCHECK(MPI_Alltoall(sa, per, MPI_INT, ra, per, MPI_INT, comm));
    for (int p = 0; p < size; p++)
        for (int i = 0; i < per; i++)
            SEXPECT(ra[p * per + i] == p * 1000003 + rank * 7919 + i,
                    "%s Alltoall from %d element %d is %d", cname, p, i, ra[p * per + i]);
    for (int i = 0; i < 50; i++)
        SCHECK(MPI_Barrier(comm));
    free(a);
    free(b);
    free(bb);
    free(sa);
    free(ra);
}

int main(void)
{
    MPI_Session session;
    MPI_Group world, self;
    MPI_Comm own = MPI_COMM_NULL, comm2, split;

    SCHECK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session));
    SCHECK(MPI_Group_from_session_pset(session, "mpi://WORLD", &world));
    MPI_Group_rank(world, &s_rank);
    int size;
    MPI_Group_size(world, &size);
    SEXPECT(size >= 2, "needs at least 2 processes, got %d", size);

    if (s_rank % 2 == 1) {
        SCHECK(MPI_Group_from_session_pset(session, "mpi://SELF", &self));
        SCHECK(MPI_Comm_create_from_group(self, "rustofi.sessions.self", MPI_INFO_NULL,
                                          MPI_ERRORS_RETURN, &own));
        MPI_Group_free(&self);
    }
    SCHECK(MPI_Comm_create_from_group(world, "rustofi.sessions.world", MPI_INFO_NULL,
                                      MPI_ERRORS_RETURN, &s_comm));
    int rank;
    MPI_Comm_rank(s_comm, &rank);
    SEXPECT(rank == s_rank, "rank %d in the communicator, %d in the group", rank, s_rank);

    ring(s_comm, "session comm", 0);
    gather_any(s_comm, "session comm");
    collectives(s_comm, "session comm");

    /* a second communicator from the same group: a second exchange, and its
     * traffic must not mix with the first one's */
    SCHECK(MPI_Comm_create_from_group(world, "rustofi.sessions.second", MPI_INFO_NULL,
                                      MPI_ERRORS_RETURN, &comm2));
    ring(comm2, "second comm", 1);
    ring(s_comm, "session comm", 2);
    collectives(comm2, "second comm");

    /* a communicator derived the classic way */
    SCHECK(MPI_Comm_split(s_comm, rank % 2, -rank, &split));
    ring(split, "split comm", 3);
    collectives(split, "split comm");

    SCHECK(MPI_Comm_free(&split));
    SCHECK(MPI_Comm_free(&comm2));
    if (own != MPI_COMM_NULL)
        SCHECK(MPI_Comm_free(&own));
    SCHECK(MPI_Barrier(s_comm));
    if (rank == 0) {
        printf("PASS sessions\n");
        fflush(stdout);
    }
    SCHECK(MPI_Comm_free(&s_comm));
    MPI_Group_free(&world);
    SCHECK(MPI_Session_finalize(&session));
    return 0;
}
