/*
 * threads: MPI_THREAD_MULTIPLE with concurrent traffic.
 *
 * Ranks are paired rank <-> rank^1; with an odd number of ranks the last rank
 * is paired with itself (self-communication through the MTL).  Each rank runs
 * NTHREADS worker threads; worker t exchanges NMSG messages with worker t of
 * the peer on MPI_COMM_WORLD with tag t, in windows of WINDOW pre-posted
 * Irecvs + Isends.  Sizes vary, some are rendezvous-size.  Each message
 * carries (rank, thread, seq) and a pattern; messages from a given
 * (peer, tag) must arrive in order.
 *
 * An extra thread exchanges NMSG messages with the peer's extra thread on a
 * dup'ed communicator, receiving with MPI_ANY_SOURCE / MPI_ANY_TAG; the
 * status tag and source and the sequence must match the send order.
 */
#include "common.h"
#include <pthread.h>

#define NTHREADS 4
#define NMSG 2000
#define WINDOW 8
#define MAXSZ (80000 + 16)

static int peer;
static MPI_Comm anycomm;

static int msg_size(int t, int i)
{
    if (i % 100 == 7 + t)
        return 70000 + (i % 13) * 700; /* rendezvous size */
    return 16 + (i * 131 + t * 17) % 3000;
}

static uint64_t msg_seed(int rank, int t, int i)
{
    return ((uint64_t)rank << 40) ^ ((uint64_t)t << 32) ^ (uint64_t)i;
}

static void build(uint8_t *buf, int rank, int t, int i)
{
    int hdr[4] = {rank, t, i, msg_size(t, i)};
    memcpy(buf, hdr, 16);
    fill_pattern(buf + 16, msg_size(t, i) - 16, msg_seed(rank, t, i));
}

static void check(const uint8_t *buf, const MPI_Status *st, int t, int i,
                  int expect_tag, const char *what)
{
    int hdr[4], count;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &count));
    memcpy(hdr, buf, 16);
    CHECK(st->MPI_SOURCE == peer, "%s thread %d msg %d: source %d, expected %d",
          what, t, i, st->MPI_SOURCE, peer);
    CHECK(st->MPI_TAG == expect_tag, "%s thread %d msg %d: tag %d, expected %d",
          what, t, i, st->MPI_TAG, expect_tag);
    CHECK(hdr[0] == peer && hdr[1] == t && hdr[2] == i,
          "%s thread %d: expected msg %d from rank %d thread %d, got msg %d "
          "from rank %d thread %d (order or matching broken)",
          what, t, i, peer, t, hdr[2], hdr[0], hdr[1]);
    CHECK(count == msg_size(t, i) && hdr[3] == count,
          "%s thread %d msg %d: count %d, expected %d", what, t, i, count,
          msg_size(t, i));
    EXPECT_PATTERN(buf + 16, (size_t)count - 16, msg_seed(peer, t, i),
                   "%s thread %d msg %d", what, t, i);
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    uint8_t *sbuf[WINDOW], *rbuf[WINDOW];
    MPI_Request req[2 * WINDOW];
    MPI_Status st[2 * WINDOW];
    for (int w = 0; w < WINDOW; w++) {
        sbuf[w] = xmalloc(MAXSZ);
        rbuf[w] = xmalloc(MAXSZ);
    }
    for (int base = 0; base < NMSG; base += WINDOW) {
        for (int w = 0; w < WINDOW; w++)
            MPI_CHECK(MPI_Irecv(rbuf[w], MAXSZ, MPI_BYTE, peer, t,
                                MPI_COMM_WORLD, &req[w]));
        for (int w = 0; w < WINDOW; w++) {
            build(sbuf[w], test_rank, t, base + w);
            MPI_CHECK(MPI_Isend(sbuf[w], msg_size(t, base + w), MPI_BYTE, peer,
                                t, MPI_COMM_WORLD, &req[WINDOW + w]));
        }
        MPI_CHECK(MPI_Waitall(2 * WINDOW, req, st));
        for (int w = 0; w < WINDOW; w++)
            check(rbuf[w], &st[w], t, base + w, t, "worker");
    }
    for (int w = 0; w < WINDOW; w++) {
        free(sbuf[w]);
        free(rbuf[w]);
    }
    return NULL;
}

/* thread index NTHREADS: ANY_SOURCE/ANY_TAG receives on the dup'ed comm */
static void *any_worker(void *arg)
{
    (void)arg;
    const int t = NTHREADS;
    uint8_t *sbuf = xmalloc(MAXSZ), *rbuf = xmalloc(MAXSZ);
    for (int i = 0; i < NMSG; i++) {
        MPI_Request sreq;
        MPI_Status st;
        int tag = 100 + (i * 5) % 7;
        build(sbuf, test_rank, t, i);
        MPI_CHECK(MPI_Isend(sbuf, msg_size(t, i), MPI_BYTE, peer, tag, anycomm,
                            &sreq));
        MPI_CHECK(MPI_Recv(rbuf, MAXSZ, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG,
                           anycomm, &st));
        MPI_CHECK(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        check(rbuf, &st, t, i, tag, "ANY_TAG thread");
    }
    free(sbuf);
    free(rbuf);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = -1;
    test_name = "threads";
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) !=
        MPI_SUCCESS) {
        fprintf(stderr, "FAIL: MPI_Init_thread failed\n");
        return 1;
    }
    test_setup("threads");
    CHECK(provided >= MPI_THREAD_MULTIPLE,
          "MPI_Init_thread provided %d, need MPI_THREAD_MULTIPLE (%d)",
          provided, MPI_THREAD_MULTIPLE);
    peer = test_rank ^ 1;
    if (peer >= test_size)
        peer = test_rank;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &anycomm));

    double t0 = now_sec();
    pthread_t th[NTHREADS + 1];
    for (int t = 0; t < NTHREADS; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0,
              "pthread_create failed");
    CHECK(pthread_create(&th[NTHREADS], NULL, any_worker, NULL) == 0,
          "pthread_create failed");
    for (int t = 0; t <= NTHREADS; t++)
        pthread_join(th[t], NULL);
    if (test_rank == 0)
        printf("INFO threads: %d threads x %d messages in %.2f s\n",
               NTHREADS + 1, NMSG, now_sec() - t0);

    MPI_CHECK(MPI_Comm_free(&anycomm));
    return test_finish();
}
