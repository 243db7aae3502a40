/*
 * posting_order: posted receives are matched in posting order.
 *
 * Rank 0 posts   r0 = Irecv(tag 1), r1 = Irecv(ANY_TAG), r2 = Irecv(tag 2)
 * Rank 1 sends   m0 (tag 2), m1 (tag 1), m2 (tag 2)
 * MPI semantics: m0 -> r1 (r0 does not match tag 2, r1 is posted before r2),
 *                m1 -> r0, m2 -> r2.
 * The same assignment is required when the messages are already queued as
 * unexpected at rank 0 when it posts the receives (r0 takes the first tag-1
 * message m1, r1 the oldest remaining m0, r2 the remaining m2).
 *
 * Rounds: pre-posted / unexpected, eager / rendezvous sizes, with the source
 * given explicitly or as MPI_ANY_SOURCE.  Ranks >= 2 only join the barriers,
 * which run on a dup of MPI_COMM_WORLD so they cannot interfere with
 * matching on MPI_COMM_WORLD.
 */
#include "common.h"

#define TAG_A 1
#define TAG_B 2

static const int send_tags[3] = {TAG_B, TAG_A, TAG_B};
/* expected message index for request r0, r1, r2 */
static const int expect_msg[3] = {1, 0, 2};

static uint64_t seed_of(int round, int m) { return 1000 + round * 10 + m; }

static void run_round(MPI_Comm sync, int round, int size, int any_source,
                      int preposted)
{
    const int recv_tags[3] = {TAG_A, MPI_ANY_TAG, TAG_B};
    if (test_rank == 0) {
        uint8_t *rbuf[3];
        MPI_Request req[3];
        MPI_Status st[3];
        int srcs[3] = {any_source ? MPI_ANY_SOURCE : 1,
                       any_source ? MPI_ANY_SOURCE : 1, 1};
        for (int r = 0; r < 3; r++) {
            rbuf[r] = xmalloc(size + 64);
            memset(rbuf[r], 0, size + 64);
        }
        if (preposted) {
            for (int r = 0; r < 3; r++)
                MPI_CHECK(MPI_Irecv(rbuf[r], size + 64, MPI_BYTE, srcs[r],
                                    recv_tags[r], MPI_COMM_WORLD, &req[r]));
            MPI_CHECK(MPI_Barrier(sync));
        } else {
            MPI_CHECK(MPI_Barrier(sync));
            sleep_ms(50); /* let the messages arrive as unexpected */
            for (int r = 0; r < 3; r++)
                MPI_CHECK(MPI_Irecv(rbuf[r], size + 64, MPI_BYTE, srcs[r],
                                    recv_tags[r], MPI_COMM_WORLD, &req[r]));
        }
        MPI_CHECK(MPI_Waitall(3, req, st));
        for (int r = 0; r < 3; r++) {
            int m = expect_msg[r], count, got;
            MPI_CHECK(MPI_Get_count(&st[r], MPI_BYTE, &count));
            memcpy(&got, rbuf[r], sizeof(int));
            CHECK(got == m,
                  "round %d: request r%d received message m%d, expected m%d",
                  round, r, got, m);
            CHECK(st[r].MPI_SOURCE == 1 && st[r].MPI_TAG == send_tags[m],
                  "round %d: r%d status source %d tag %d, expected 1/%d",
                  round, r, st[r].MPI_SOURCE, st[r].MPI_TAG, send_tags[m]);
            CHECK(count == size, "round %d: r%d count %d, expected %d", round,
                  r, count, size);
            EXPECT_PATTERN(rbuf[r] + sizeof(int), (size_t)size - sizeof(int),
                           seed_of(round, m), "round %d r%d", round, r);
            free(rbuf[r]);
        }
    } else if (test_rank == 1) {
        uint8_t *sbuf[3];
        MPI_Request req[3];
        for (int m = 0; m < 3; m++) {
            sbuf[m] = xmalloc(size);
            memcpy(sbuf[m], &m, sizeof(int));
            fill_pattern(sbuf[m] + sizeof(int), (size_t)size - sizeof(int),
                         seed_of(round, m));
        }
        if (preposted) {
            MPI_CHECK(MPI_Barrier(sync));
            for (int m = 0; m < 3; m++)
                MPI_CHECK(MPI_Send(sbuf[m], size, MPI_BYTE, 0, send_tags[m],
                                   MPI_COMM_WORLD));
        } else {
            for (int m = 0; m < 3; m++)
                MPI_CHECK(MPI_Isend(sbuf[m], size, MPI_BYTE, 0, send_tags[m],
                                    MPI_COMM_WORLD, &req[m]));
            MPI_CHECK(MPI_Barrier(sync));
            MPI_CHECK(MPI_Waitall(3, req, MPI_STATUSES_IGNORE));
        }
        for (int m = 0; m < 3; m++)
            free(sbuf[m]);
    } else {
        MPI_CHECK(MPI_Barrier(sync));
    }
    MPI_CHECK(MPI_Barrier(sync));
}

int main(int argc, char **argv)
{
    MPI_Comm sync;
    test_init(&argc, &argv, "posting_order");
    require_np(2);
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &sync));
    const int sizes[2] = {64, RNDV_SIZE};
    int round = 0;
    for (int preposted = 1; preposted >= 0; preposted--)
        for (int any = 0; any <= 1; any++)
            for (int s = 0; s < 2; s++)
                run_round(sync, round++, sizes[s], any, preposted);
    MPI_CHECK(MPI_Comm_free(&sync));
    return test_finish();
}
