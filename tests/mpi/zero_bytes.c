/*
 * zero_bytes: zero-byte messages.
 *
 *  - Send/Recv with count 0 and a NULL buffer, MPI_BYTE and MPI_INT.
 *  - Send count 0 into a receive of 10 bytes: status count 0, buffer untouched.
 *  - Ssend and Issend of zero bytes.
 *  - 100 zero-byte messages with tags 0..99 received with
 *    (ANY_SOURCE, ANY_TAG): the tags must come out in send order.
 *  - Pre-posted Irecv(ANY_SOURCE, ANY_TAG) of zero bytes.
 *  - Probe of a zero-byte message reports count 0.
 * Both directions (rank 0 -> 1 and rank 1 -> 0).
 */
#include "common.h"

static void expect_status(const MPI_Status *st, int src, int tag,
                          const char *what)
{
    int c = -1;
    CHECK(st->MPI_SOURCE == src, "%s: MPI_SOURCE %d, expected %d", what,
          st->MPI_SOURCE, src);
    CHECK(tag == MPI_ANY_TAG || st->MPI_TAG == tag,
          "%s: MPI_TAG %d, expected %d", what, st->MPI_TAG, tag);
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &c));
    CHECK(c == 0, "%s: MPI_Get_count(MPI_BYTE) %d, expected 0", what, c);
    MPI_CHECK(MPI_Get_count(st, MPI_INT, &c));
    CHECK(c == 0, "%s: MPI_Get_count(MPI_INT) %d, expected 0", what, c);
}

static void run_direction(int from, int to, MPI_Comm sync)
{
    MPI_Comm w = MPI_COMM_WORLD;
    MPI_Status st;
    char what[96];
#define WHAT(s) (snprintf(what, sizeof(what), "%s %d->%d", s, from, to), what)

    if (test_rank == from) {
        uint8_t dummy[16] = {0};
        MPI_Request req;
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, to, 1, w));
        MPI_CHECK(MPI_Send(dummy, 0, MPI_INT, to, 2, w));
        MPI_CHECK(MPI_Send(dummy, 0, MPI_BYTE, to, 3, w));
        MPI_CHECK(MPI_Ssend(NULL, 0, MPI_BYTE, to, 4, w));
        MPI_CHECK(MPI_Issend(NULL, 0, MPI_BYTE, to, 5, w, &req));
        MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        for (int t = 0; t < 100; t++)
            MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, to, t, w));
        MPI_CHECK(MPI_Barrier(sync)); /* receiver has pre-posted */
        MPI_CHECK(MPI_Send(dummy, 0, MPI_BYTE, to, 77, w));
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, to, 6, w));
    } else if (test_rank == to) {
        uint8_t buf[16];
        MPI_Request req;
        int flag = 0;
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, from, 1, w, &st));
        expect_status(&st, from, 1, WHAT("NULL/0 MPI_BYTE"));
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, MPI_ANY_SOURCE, 2, w, &st));
        expect_status(&st, from, 2, WHAT("NULL/0 MPI_INT ANY_SOURCE"));
        memset(buf, 0x5a, sizeof(buf));
        MPI_CHECK(MPI_Recv(buf, 10, MPI_BYTE, from, MPI_ANY_TAG, w, &st));
        expect_status(&st, from, 3, WHAT("0 bytes into 10-byte buffer"));
        CHECK(check_fill(buf, sizeof(buf), 0x5a) == (size_t)-1,
              "%s: receive buffer modified by a zero-byte message",
              WHAT("0 bytes into 10-byte buffer"));
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, w,
                           &st));
        expect_status(&st, from, 4, WHAT("Ssend 0 bytes"));
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, from, 5, w, &st));
        expect_status(&st, from, 5, WHAT("Issend 0 bytes"));
        for (int t = 0; t < 100; t++) {
            char w2[64];
            snprintf(w2, sizeof(w2), "ANY/ANY zero-byte message #%d %d->%d", t,
                     from, to);
            MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG,
                               w, &st));
            expect_status(&st, from, t, w2);
        }
        memset(buf, 0x5a, sizeof(buf));
        MPI_CHECK(MPI_Irecv(buf, 16, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, w,
                            &req));
        MPI_CHECK(MPI_Barrier(sync));
        MPI_CHECK(MPI_Wait(&req, &st));
        expect_status(&st, from, 77, WHAT("pre-posted ANY/ANY Irecv"));
        CHECK(check_fill(buf, sizeof(buf), 0x5a) == (size_t)-1,
              "%s: buffer modified", WHAT("pre-posted ANY/ANY Irecv"));
        double t0 = now_sec();
        do {
            MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, 6, w, &flag, &st));
            CHECK(flag || now_sec() - t0 < 20, "zero-byte message not found "
                  "by Iprobe");
        } while (!flag);
        expect_status(&st, from, 6, WHAT("Iprobe"));
        MPI_CHECK(MPI_Probe(from, MPI_ANY_TAG, w, &st));
        expect_status(&st, from, 6, WHAT("Probe"));
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, from, 6, w, &st));
        expect_status(&st, from, 6, WHAT("Recv after Probe"));
    } else {
        MPI_CHECK(MPI_Barrier(sync));
    }
    MPI_CHECK(MPI_Barrier(sync));
#undef WHAT
}

int main(int argc, char **argv)
{
    MPI_Comm sync;
    test_init(&argc, &argv, "zero_bytes");
    require_np(2);
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &sync));
    run_direction(0, 1, sync);
    run_direction(1, 0, sync);
    MPI_CHECK(MPI_Comm_free(&sync));
    return test_finish();
}
