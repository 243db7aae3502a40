/*
 * big_checksum: large messages with full verification.
 *
 * Usage: big_checksum [bytes]   (default 64 MiB; any size >= 1 up to INT_MAX)
 *
 *  1. rank 0 -> rank 1
 *  2. rank 1 -> rank 0
 *  3. both directions at the same time (Irecv + Isend on both ranks)
 *  4. rank 0 -> rank 1 into a receive buffer 1 MiB + 13 bytes larger than
 *     the message, with guard bytes checked after the message end
 * The sender also sends the checksum of the data in a separate small
 * message; the receiver checks count, checksum and every byte.
 */
#include "common.h"

#define EXTRA (1 * MIB + 13)
#define FILL 0x3c

static int nbytes = 64 * MIB;

static void sender_side(int peer, int tag, uint64_t seed)
{
    uint8_t *buf = xmalloc(nbytes);
    fill_pattern(buf, nbytes, seed);
    uint64_t sum = checksum64(buf, nbytes);
    MPI_CHECK(MPI_Send(&sum, 1, MPI_UINT64_T, peer, tag + 1000,
                       MPI_COMM_WORLD));
    MPI_CHECK(MPI_Send(buf, nbytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
    free(buf);
}

static void verify(const uint8_t *buf, const MPI_Status *st, int peer, int tag,
                   uint64_t seed, uint64_t sum, const char *what)
{
    int count;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &count));
    CHECK(st->MPI_SOURCE == peer && st->MPI_TAG == tag,
          "%s: status source %d tag %d", what, st->MPI_SOURCE, st->MPI_TAG);
    CHECK(count == nbytes, "%s: count %d, expected %d", what, count, nbytes);
    uint64_t got = checksum64(buf, nbytes);
    if (got != sum) {
        size_t bad = check_pattern(buf, nbytes, seed);
        fail("%s: checksum mismatch (got %016llx, sender %016llx), first "
             "bad byte at offset %zd",
             what, (unsigned long long)got, (unsigned long long)sum,
             (ssize_t)bad);
    }
    EXPECT_PATTERN(buf, (size_t)nbytes, seed, "%s", what);
}

static void receiver_side(int peer, int tag, uint64_t seed, size_t extra,
                          const char *what)
{
    size_t alloc = (size_t)nbytes + extra;
    uint8_t *buf = xmalloc(alloc);
    uint64_t sum;
    MPI_Status st;
    memset(buf, FILL, alloc);
    MPI_CHECK(MPI_Recv(&sum, 1, MPI_UINT64_T, peer, tag + 1000, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Recv(buf, (int)(alloc > INT_MAX ? INT_MAX : alloc), MPI_BYTE,
                       peer, tag, MPI_COMM_WORLD, &st));
    verify(buf, &st, peer, tag, seed, sum, what);
    if (extra) {
        size_t bad = check_fill(buf + nbytes, extra, FILL);
        CHECK(bad == (size_t)-1,
              "%s: byte %zu past the end of the message was modified", what,
              bad);
    }
    free(buf);
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "big_checksum");
    require_np(2);
    if (argc > 1) {
        long long v = atoll(argv[1]);
        CHECK(v >= 1 && v <= INT_MAX, "bad size argument '%s'", argv[1]);
        nbytes = (int)v;
    }
    int me = test_rank, peer = 1 - test_rank;
    double t0 = now_sec();

    /* 1 and 2: one direction at a time */
    for (int dir = 0; dir < 2; dir++) {
        char what[64];
        snprintf(what, sizeof(what), "%d bytes %d->%d", nbytes, dir, 1 - dir);
        if (me == dir)
            sender_side(peer, 10 + dir, 1000 + dir);
        else if (me == 1 - dir)
            receiver_side(peer, 10 + dir, 1000 + dir, 0, what);
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    }

    /* 3: simultaneous exchange */
    if (me < 2) {
        uint8_t *sbuf = xmalloc(nbytes), *rbuf = xmalloc(nbytes);
        uint64_t ssum, rsum;
        MPI_Request req[2];
        MPI_Status st[2];
        fill_pattern(sbuf, nbytes, 2000 + me);
        memset(rbuf, FILL, nbytes);
        ssum = checksum64(sbuf, nbytes);
        MPI_CHECK(MPI_Sendrecv(&ssum, 1, MPI_UINT64_T, peer, 30, &rsum, 1,
                               MPI_UINT64_T, peer, 30, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Irecv(rbuf, nbytes, MPI_BYTE, peer, 20, MPI_COMM_WORLD,
                            &req[0]));
        MPI_CHECK(MPI_Isend(sbuf, nbytes, MPI_BYTE, peer, 20, MPI_COMM_WORLD,
                            &req[1]));
        MPI_CHECK(MPI_Waitall(2, req, st));
        char what[64];
        snprintf(what, sizeof(what), "simultaneous exchange %d->%d", peer, me);
        verify(rbuf, &st[0], peer, 20, 2000 + peer, rsum, what);
        free(sbuf);
        free(rbuf);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    /* 4: receive buffer larger than the message */
    if (me == 0)
        sender_side(1, 40, 4000);
    else if (me == 1)
        receiver_side(0, 40, 4000, EXTRA, "larger receive buffer");

    if (me == 0)
        printf("INFO big_checksum: %d bytes, 4 transfers in %.2f s\n", nbytes,
               now_sec() - t0);
    return test_finish();
}
