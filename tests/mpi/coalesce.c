/*
 * coalesce: back-to-back small sends to one peer, which the MTL may carry
 * several to a packet (mtl_rustofi_coalesce), must arrive intact, matched in
 * MPI order, and must never be held back while the sender waits for
 * something else.
 *
 * Phase 1, windows: rank 0 posts WINDOW non-blocking sends of varying
 * small sizes (0 .. 3000 bytes) with tags 0..4 to rank 1, with one
 * synchronous send and one rendezvous-sized send in the middle of each
 * window, then waits for all. In even windows rank 1 receives everything
 * with MPI_ANY_TAG after the sends were issued (unexpected path); in odd
 * windows it pre-posts receives with the exact tags and only then tells rank
 * 0 to start (expected path). Every payload carries a pattern seeded by its
 * index; sizes, tags and order are checked.
 *
 * Phase 2, no hold-back: rank 0 issues three small non-blocking sends, then
 * blocks in MPI_Recv for rank 1's reply, which rank 1 sends only after it
 * got all three. Then the same with an MPI_Iprobe loop instead of
 * MPI_Recv. A message held in a coalescing buffer until the next send would
 * deadlock here.
 *
 * Phase 3, waited sends leave: rank 0 issues three small non-blocking sends,
 * waits for them with MPI_Waitall and then makes no MPI call for HOLD_S
 * seconds. Rank 1 must get all three well before that pause ends: a send
 * may only complete once its packet was handed to the provider.
 */
#include "common.h"

#define WINDOWS 40
#define WINDOW 64
#define ROUNDS 200
#define HOLD_S 2.0

static size_t msg_size(int w, int i)
{
    if (i == WINDOW / 2)
        return RNDV_SIZE;
    return (size_t)((w * 131 + i * 97) % 3001);
}

static int msg_tag(int i) { return i % 5; }

static uint64_t msg_seed(int w, int i) { return (uint64_t)w * WINDOW + (uint64_t)i + 1; }

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "coalesce");
    require_np(2);
    char *bufs[WINDOW];
    for (int i = 0; i < WINDOW; i++)
        bufs[i] = xmalloc(RNDV_SIZE);
    MPI_Request reqs[WINDOW];
    int go = 0;

    for (int w = 0; w < WINDOWS && test_rank < 2; w++) {
        int expected_path = w % 2;
        if (test_rank == 0) {
            if (expected_path)
                MPI_CHECK(MPI_Recv(&go, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (int i = 0; i < WINDOW; i++) {
                fill_pattern(bufs[i], msg_size(w, i), msg_seed(w, i));
                if (i == WINDOW / 4)
                    MPI_CHECK(MPI_Issend(bufs[i], (int)msg_size(w, i), MPI_BYTE, 1, msg_tag(i),
                                         MPI_COMM_WORLD, &reqs[i]));
                else
                    MPI_CHECK(MPI_Isend(bufs[i], (int)msg_size(w, i), MPI_BYTE, 1, msg_tag(i),
                                        MPI_COMM_WORLD, &reqs[i]));
            }
            MPI_CHECK(MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE));
        } else {
            if (expected_path) {
                for (int i = 0; i < WINDOW; i++)
                    MPI_CHECK(MPI_Irecv(bufs[i], RNDV_SIZE, MPI_BYTE, 0, msg_tag(i),
                                        MPI_COMM_WORLD, &reqs[i]));
                MPI_CHECK(MPI_Send(&go, 1, MPI_INT, 0, 99, MPI_COMM_WORLD));
            } else {
                sleep_ms(w == 0 ? 200 : 5);
                for (int i = 0; i < WINDOW; i++)
                    MPI_CHECK(MPI_Irecv(bufs[i], RNDV_SIZE, MPI_BYTE, 0, MPI_ANY_TAG,
                                        MPI_COMM_WORLD, &reqs[i]));
            }
            MPI_Status st[WINDOW];
            MPI_CHECK(MPI_Waitall(WINDOW, reqs, st));
            for (int i = 0; i < WINDOW; i++) {
                int n = -1;
                MPI_CHECK(MPI_Get_count(&st[i], MPI_BYTE, &n));
                CHECK((size_t)n == msg_size(w, i), "window %d message %d: %d bytes, sent %zu",
                      w, i, n, msg_size(w, i));
                CHECK(st[i].MPI_TAG == msg_tag(i), "window %d message %d: tag %d, sent %d", w,
                      i, st[i].MPI_TAG, msg_tag(i));
                EXPECT_PATTERN(bufs[i], (size_t)n, msg_seed(w, i), "window %d message %d", w, i);
            }
        }
    }

    /* Phase 2: a rank that waits on something else must not hold its sends. */
    int small[3] = {0, 0, 0}, reply = 0;
    for (int r = 0; r < ROUNDS && test_rank < 2; r++) {
        if (test_rank == 0) {
            for (int k = 0; k < 3; k++) {
                small[k] = r * 3 + k;
                MPI_CHECK(MPI_Isend(&small[k], 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &reqs[k]));
            }
            if (r % 2 == 0) {
                MPI_CHECK(MPI_Recv(&reply, 1, MPI_INT, 1, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            } else {
                int flag = 0;
                double start = now_sec();
                while (!flag) {
                    MPI_CHECK(MPI_Iprobe(1, 6, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
                    CHECK(now_sec() - start < 30, "round %d: no reply in 30 s (sends held?)", r);
                }
                MPI_CHECK(MPI_Recv(&reply, 1, MPI_INT, 1, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            }
            CHECK(reply == r, "round %d: reply %d", r, reply);
            MPI_CHECK(MPI_Waitall(3, reqs, MPI_STATUSES_IGNORE));
        } else {
            for (int k = 0; k < 3; k++) {
                int v = -1;
                MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(v == r * 3 + k, "round %d: got %d, expected %d", r, v, r * 3 + k);
            }
            reply = r;
            MPI_CHECK(MPI_Send(&reply, 1, MPI_INT, 0, 6, MPI_COMM_WORLD));
        }
    }
    /* Phase 3: completed sends are on their way even if the sender pauses. */
    if (test_rank < 2) {
        MPI_CHECK(MPI_Send(&reply, 1, MPI_INT, 1 - test_rank, 7, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Recv(&reply, 1, MPI_INT, 1 - test_rank, 7, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
        if (test_rank == 0) {
            for (int k = 0; k < 3; k++) {
                small[k] = 1000 + k;
                MPI_CHECK(MPI_Isend(&small[k], 1, MPI_INT, 1, 8, MPI_COMM_WORLD, &reqs[k]));
            }
            MPI_CHECK(MPI_Waitall(3, reqs, MPI_STATUSES_IGNORE));
            sleep_ms((int)(HOLD_S * 1000));
        } else {
            double start = now_sec();
            for (int k = 0; k < 3; k++) {
                int v = -1;
                MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(v == 1000 + k, "phase 3: got %d, expected %d", v, 1000 + k);
            }
            double took = now_sec() - start;
            CHECK(took < 0.75 * HOLD_S,
                  "phase 3: the sends arrived after %.2f s, while the sender paused outside "
                  "MPI for %.1f s after they completed (held back?)",
                  took, HOLD_S);
        }
    }
    for (int i = 0; i < WINDOW; i++)
        free(bufs[i]);
    return test_finish();
}
