/*
 * unexpected_reverse: many unexpected messages matched in reverse tag order.
 *
 * Rank 1 Isends 100 messages with tags 0..99 to rank 0 before rank 0 has
 * posted anything (a barrier on a dup'ed communicator orders this), with a mix
 * of sizes: zero bytes, small eager messages, sizes around the default eager
 * limit (8191/8192/8193), 64 KiB and 64 KiB+1, and every tenth message above
 * 64 KiB (rendezvous even with eager_limit 65536).
 *
 * Round 1: rank 0 receives them with blocking MPI_Recv(src 1, tag) for tags
 *          99..0.
 * Round 2: rank 0 posts Irecv(MPI_ANY_SOURCE, tag) for tags 99..0 at once,
 *          then Waitall.
 * Every message is checked for source, tag, count and contents.
 */
#include "common.h"

#define NTAGS 100
#define NROUNDS 2

static int msg_size(int tag)
{
    switch (tag) {
    case 0: return 0;
    case 15: return 8191;
    case 25: return 8192;
    case 35: return 8193;
    case 45: return 65536;
    case 55: return 65537;
    }
    if (tag % 10 == 9)
        return 70000 + tag * 100;
    return 8 + tag * 37;
}

static uint64_t seed_of(int round, int tag) { return (uint64_t)round * 7919 + tag; }

static void check_msg(int round, int tag, const uint8_t *buf, MPI_Status *st)
{
    int count;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &count));
    CHECK(st->MPI_SOURCE == 1, "round %d tag %d: MPI_SOURCE %d", round, tag,
          st->MPI_SOURCE);
    CHECK(st->MPI_TAG == tag, "round %d tag %d: MPI_TAG %d", round, tag,
          st->MPI_TAG);
    CHECK(count == msg_size(tag), "round %d tag %d: count %d, expected %d",
          round, tag, count, msg_size(tag));
    EXPECT_PATTERN(buf, (size_t)count, seed_of(round, tag), "round %d tag %d",
                   round, tag);
}

int main(int argc, char **argv)
{
    MPI_Comm sync;
    test_init(&argc, &argv, "unexpected_reverse");
    require_np(2);
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &sync));

    for (int round = 0; round < NROUNDS; round++) {
        if (test_rank == 1) {
            uint8_t *bufs[NTAGS];
            MPI_Request reqs[NTAGS];
            for (int t = 0; t < NTAGS; t++) {
                bufs[t] = xmalloc(msg_size(t));
                fill_pattern(bufs[t], msg_size(t), seed_of(round, t));
            }
            for (int t = 0; t < NTAGS; t++)
                MPI_CHECK(MPI_Isend(bufs[t], msg_size(t), MPI_BYTE, 0, t,
                                    MPI_COMM_WORLD, &reqs[t]));
            MPI_CHECK(MPI_Barrier(sync));
            MPI_CHECK(MPI_Waitall(NTAGS, reqs, MPI_STATUSES_IGNORE));
            for (int t = 0; t < NTAGS; t++)
                free(bufs[t]);
        } else if (test_rank == 0) {
            uint8_t *bufs[NTAGS];
            MPI_CHECK(MPI_Barrier(sync));
            sleep_ms(200); /* let the eager data land as unexpected */
            for (int t = 0; t < NTAGS; t++) {
                bufs[t] = xmalloc(msg_size(t) + 16);
                memset(bufs[t], 0xee, msg_size(t) + 16);
            }
            if (round == 0) {
                for (int t = NTAGS - 1; t >= 0; t--) {
                    MPI_Status st;
                    MPI_CHECK(MPI_Recv(bufs[t], msg_size(t) + 16, MPI_BYTE, 1,
                                       t, MPI_COMM_WORLD, &st));
                    check_msg(round, t, bufs[t], &st);
                }
            } else {
                MPI_Request reqs[NTAGS];
                MPI_Status sts[NTAGS];
                for (int t = NTAGS - 1; t >= 0; t--)
                    MPI_CHECK(MPI_Irecv(bufs[t], msg_size(t) + 16, MPI_BYTE,
                                        MPI_ANY_SOURCE, t, MPI_COMM_WORLD,
                                        &reqs[t]));
                MPI_CHECK(MPI_Waitall(NTAGS, reqs, sts));
                for (int t = NTAGS - 1; t >= 0; t--)
                    check_msg(round, t, bufs[t], &sts[t]);
            }
            for (int t = 0; t < NTAGS; t++) {
                CHECK(check_fill(bufs[t] + msg_size(t), 16, 0xee) == (size_t)-1,
                      "round %d tag %d: bytes past the message were modified",
                      round, t);
                free(bufs[t]);
            }
        } else {
            MPI_CHECK(MPI_Barrier(sync));
        }
        MPI_CHECK(MPI_Barrier(sync));
    }

    if (test_rank == 0) {
        long long bytes = 0;
        int gt1024 = 0, eq1024 = 0;
        int gt8192 = 0, gt65536 = 0, eq8192 = 0, eq65536 = 0, zero = 0;
        for (int t = 0; t < NTAGS; t++) {
            bytes += msg_size(t);
            gt1024 += msg_size(t) > 1024;
            eq1024 += msg_size(t) == 1024;
            gt8192 += msg_size(t) > 8192;
            gt65536 += msg_size(t) > 65536;
            eq8192 += msg_size(t) == 8192;
            eq65536 += msg_size(t) == 65536;
            zero += msg_size(t) == 0;
        }
        printf("STATS unexpected_reverse msgs=%d bytes=%lld gt1024=%d "
               "eq1024=%d gt8192=%d gt65536=%d eq8192=%d eq65536=%d zero=%d\n",
               NTAGS * NROUNDS, bytes * NROUNDS, gt1024 * NROUNDS,
               eq1024 * NROUNDS, gt8192 * NROUNDS,
               gt65536 * NROUNDS, eq8192 * NROUNDS, eq65536 * NROUNDS,
               zero * NROUNDS);
    }
    MPI_CHECK(MPI_Comm_free(&sync));
    return test_finish();
}
