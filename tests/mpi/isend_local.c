/*
 * isend_local: MPI_Isend returns without waiting for the receiver.
 *
 * Rank 1 stays away from MPI for SLEEP_MS (a rank computing); rank 0
 * starts NMSG eager sends of LEN bytes to it, more than a shared-memory
 * ring holds (200 x 8,000 B against 256 KiB), and times the loop of
 * MPI_Isend calls alone. Each must return at once, whether its packet
 * went into the ring or waits in the component's queue: the loop must end
 * well before rank 1 is back (under a third of its absence, a wide margin
 * for a loaded host; a build that drained the queue inside MPI_Isend took
 * the whole absence). Then both sides complete every message and rank 1
 * checks their order and contents. Ranks beyond 2 only join the barrier.
 */
#include "common.h"

#define NMSG 200
#define LEN 8000
#define SLEEP_MS 3000

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "isend_local");
    require_np(2);
    static char buf[NMSG][LEN];
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (test_rank == 0) {
        MPI_Request r[NMSG];
        for (int i = 0; i < NMSG; i++) {
            memset(buf[i], i & 0xff, LEN);
        }
        double start = now_sec();
        for (int i = 0; i < NMSG; i++) {
            MPI_CHECK(MPI_Isend(buf[i], LEN, MPI_CHAR, 1, i, MPI_COMM_WORLD, &r[i]));
        }
        double took = now_sec() - start;
        CHECK(took < SLEEP_MS / 3000.0,
              "%d MPI_Isend calls took %.3f s while the receiver was away for %.1f s: "
              "MPI_Isend waited for it",
              NMSG, took, SLEEP_MS / 1000.0);
        MPI_CHECK(MPI_Waitall(NMSG, r, MPI_STATUSES_IGNORE));
    } else if (test_rank == 1) {
        sleep_ms(SLEEP_MS);
        for (int i = 0; i < NMSG; i++) {
            MPI_CHECK(MPI_Recv(buf[i], LEN, MPI_CHAR, 0, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (int k = 0; k < LEN; k++) {
                CHECK(buf[i][k] == (char) (i & 0xff), "message %d byte %d is %d", i, k,
                      buf[i][k]);
            }
        }
    }
    return test_finish();
}
