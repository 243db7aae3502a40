/*
 * issend: synchronous, buffered and ready send modes.
 *
 * 1. Issend (0 bytes, eager size, rendezvous size): rank 0 calls MPI_Test on
 *    the Issend for 200 ms while rank 1 has not posted the receive (rank 1
 *    waits for a signal on a dup'ed communicator); the Issend must not
 *    complete.  Then rank 0 signals, rank 1 posts the receive, and the Issend
 *    completes.  Rank 1 checks the data.
 * 2. MPI_Ssend: rank 1 waits 300 ms before posting the receive; Ssend on
 *    rank 0 must take at least 150 ms.  Then the same in the other
 *    direction.  The receiver waits inside MPI (MPI_Iprobe on the signal
 *    communicator), not asleep: MPI does not require a process outside MPI
 *    to progress, and on a manual-progress provider (udp;ofi_rxd) its last
 *    barrier packet may then leave only after the sleep, so that the
 *    sender would leave the barrier, and start its clock, late.
 * 3. MPI_Bsend with an attached buffer: four messages (16 B .. 1 MiB) are
 *    Bsent while rank 1 sleeps 500 ms before receiving; the Bsends must
 *    return without waiting for the receiver.  Buffer_detach then waits for
 *    the transfers.
 * 4. MPI_Rsend both directions, eager and rendezvous sizes, with the receive
 *    posted before the sender is signalled.
 */
#include "common.h"

static const int sizes[] = {0, 64, RNDV_SIZE};
#define NSIZES 3

static void recv_check(int src, int tag, int size, uint64_t seed,
                       const char *what)
{
    uint8_t *buf = xmalloc(size + 16);
    MPI_Status st;
    int count;
    MPI_CHECK(MPI_Recv(buf, size + 16, MPI_BYTE, src, tag, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
    CHECK(count == size, "%s: count %d, expected %d", what, count, size);
    CHECK(st.MPI_SOURCE == src && st.MPI_TAG == tag,
          "%s: status source %d tag %d", what, st.MPI_SOURCE, st.MPI_TAG);
    EXPECT_PATTERN(buf, (size_t)size, seed, "%s", what);
    free(buf);
}

static uint8_t *make_buf(int size, uint64_t seed)
{
    uint8_t *b = xmalloc(size);
    fill_pattern(b, size, seed);
    return b;
}

static void test_issend(MPI_Comm sig)
{
    for (int i = 0; i < NSIZES; i++) {
        int size = sizes[i], tag = 10 + i;
        char what[64];
        snprintf(what, sizeof(what), "Issend %d bytes", size);
        if (test_rank == 0) {
            uint8_t *buf = make_buf(size, 100 + i);
            MPI_Request req;
            int flag = 0;
            long ntests = 0;
            MPI_CHECK(MPI_Issend(buf, size, MPI_BYTE, 1, tag, MPI_COMM_WORLD,
                                 &req));
            double t0 = now_sec();
            while (now_sec() - t0 < 0.2) {
                MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
                CHECK(!flag, "%s: completed after %ld MPI_Test calls "
                      "although the receiver has not posted the receive",
                      what, ntests);
                ntests++;
            }
            MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 1, i, sig));
            MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
            free(buf);
        } else if (test_rank == 1) {
            MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, 0, i, sig, MPI_STATUS_IGNORE));
            recv_check(0, tag, size, 100 + i, what);
        }
        MPI_CHECK(MPI_Barrier(sig));
    }
}

static void test_ssend(MPI_Comm sig)
{
    for (int dir = 0; dir < 2; dir++) {
        int from = dir, to = 1 - dir;
        for (int i = 0; i < NSIZES; i++) {
            int size = sizes[i], tag = 20 + i;
            char what[64];
            snprintf(what, sizeof(what), "Ssend %d bytes %d->%d", size, from,
                     to);
            MPI_CHECK(MPI_Barrier(sig));
            if (test_rank == from) {
                uint8_t *buf = make_buf(size, 200 + i + 10 * dir);
                double t0 = now_sec();
                MPI_CHECK(MPI_Ssend(buf, size, MPI_BYTE, to, tag,
                                    MPI_COMM_WORLD));
                double dt = now_sec() - t0;
                CHECK(dt >= 0.15, "%s: returned after %.3f s, but the "
                      "receive was posted only after 0.3 s", what, dt);
                free(buf);
            } else if (test_rank == to) {
                double t0 = now_sec();
                int flag;
                while (now_sec() - t0 < 0.3)
                    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, sig, &flag,
                                         MPI_STATUS_IGNORE));
                recv_check(from, tag, size, 200 + i + 10 * dir, what);
            }
        }
    }
    MPI_CHECK(MPI_Barrier(sig));
}

static void test_bsend(MPI_Comm sig)
{
    static const int bsizes[] = {16, 5000, RNDV_SIZE, 1 * MIB};
    const int n = 4;
    if (test_rank == 0) {
        int total = 0;
        for (int i = 0; i < n; i++)
            total += bsizes[i] + MPI_BSEND_OVERHEAD;
        void *attach = xmalloc(total);
        uint8_t *bufs[4];
        MPI_CHECK(MPI_Buffer_attach(attach, total));
        for (int i = 0; i < n; i++)
            bufs[i] = make_buf(bsizes[i], 300 + i);
        MPI_CHECK(MPI_Barrier(sig));
        double t0 = now_sec();
        for (int i = 0; i < n; i++)
            MPI_CHECK(MPI_Bsend(bufs[i], bsizes[i], MPI_BYTE, 1, 30 + i,
                                MPI_COMM_WORLD));
        double dt = now_sec() - t0;
        /* The user buffers may be reused right away. */
        for (int i = 0; i < n; i++)
            memset(bufs[i], 0, bsizes[i]);
        CHECK(dt < 0.4, "MPI_Bsend blocked for %.3f s waiting for the "
              "receiver (buffered sends must complete locally)", dt);
        void *det;
        int detsize;
        MPI_CHECK(MPI_Buffer_detach(&det, &detsize));
        CHECK(det == attach && detsize == total,
              "Buffer_detach returned %p/%d, attached %p/%d", det, detsize,
              attach, total);
        for (int i = 0; i < n; i++)
            free(bufs[i]);
        free(attach);
    } else if (test_rank == 1) {
        MPI_CHECK(MPI_Barrier(sig));
        sleep_ms(500);
        for (int i = 0; i < n; i++) {
            char what[64];
            snprintf(what, sizeof(what), "Bsend %d bytes", bsizes[i]);
            recv_check(0, 30 + i, bsizes[i], 300 + i, what);
        }
    } else {
        MPI_CHECK(MPI_Barrier(sig));
    }
    MPI_CHECK(MPI_Barrier(sig));
}

static void test_rsend(MPI_Comm sig)
{
    static const int rsizes[] = {64, RNDV_SIZE};
    for (int dir = 0; dir < 2; dir++) {
        int from = dir, to = 1 - dir;
        for (int i = 0; i < 2; i++) {
            int size = rsizes[i], tag = 40 + i;
            uint64_t seed = 400 + i + 10 * dir;
            if (test_rank == to) {
                uint8_t *buf = xmalloc(size);
                MPI_Request req;
                MPI_Status st;
                int count;
                MPI_CHECK(MPI_Irecv(buf, size, MPI_BYTE, from, tag,
                                    MPI_COMM_WORLD, &req));
                MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, from, 99, sig));
                MPI_CHECK(MPI_Wait(&req, &st));
                MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
                CHECK(count == size, "Rsend %d->%d: count %d, expected %d",
                      from, to, count, size);
                EXPECT_PATTERN(buf, (size_t)size, seed, "Rsend %d bytes %d->%d",
                               size, from, to);
                free(buf);
            } else if (test_rank == from) {
                uint8_t *buf = make_buf(size, seed);
                MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, to, 99, sig,
                                   MPI_STATUS_IGNORE));
                MPI_CHECK(MPI_Rsend(buf, size, MPI_BYTE, to, tag,
                                    MPI_COMM_WORLD));
                free(buf);
            }
        }
    }
    MPI_CHECK(MPI_Barrier(sig));
}

int main(int argc, char **argv)
{
    MPI_Comm sig;
    test_init(&argc, &argv, "issend");
    require_np(2);
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &sig));
    test_issend(sig);
    test_ssend(sig);
    test_bsend(sig);
    test_rsend(sig);
    MPI_CHECK(MPI_Comm_free(&sig));
    return test_finish();
}
