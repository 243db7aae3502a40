/* Bidirectional bandwidth (OSU methodology): ranks 0 and 1 each post a window
 * of 64 MPI_Irecv and 64 MPI_Isend at the same time and wait for all of them.
 * Reports the sum of both directions in MB/s (10^6 bytes/s).
 * Usage: bibw [max_bytes] [iteration_scale] */
#include "osu_common.h"

int main(int argc, char **argv)
{
    int rank, np, errors = 0;
    MPI_Request req[2 * OSU_WINDOW];
    osu_init(&argc, &argv, "bibw", 2, &rank, &np);
    osu_args(argc, argv, 1);
    unsigned char *sbuf = osu_alloc(osu_max_size), *rbuf = osu_alloc(osu_max_size);
    int peer = rank == 0 ? 1 : 0;
    if (rank == 0) {
        printf("# bibw: size MB/s (both directions, window %d)\n", OSU_WINDOW);
        fflush(stdout);
    }
    osu_warmup(rank, rank < 2 ? peer : -1);
    for (long size = 1; size <= osu_max_size; size *= 2) {
        long iters = osu_scaled(size > OSU_LARGE ? 20 : 100, 1);
        long skip = osu_scaled(size > OSU_LARGE ? 2 : 10, 0);
        memset(sbuf, osu_pattern(rank, size, 1), size);
        memset(rbuf, 0, size);
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank < 2) {
            for (long i = 0; i < iters + skip; i++) {
                if (i == skip)
                    t0 = MPI_Wtime();
                for (int w = 0; w < OSU_WINDOW; w++)
                    MPI_Irecv(rbuf, (int)size, MPI_CHAR, peer, 200, MPI_COMM_WORLD, &req[w]);
                for (int w = 0; w < OSU_WINDOW; w++)
                    MPI_Isend(sbuf, (int)size, MPI_CHAR, peer, 200, MPI_COMM_WORLD,
                              &req[OSU_WINDOW + w]);
                MPI_Waitall(2 * OSU_WINDOW, req, MPI_STATUSES_IGNORE);
            }
            double t = MPI_Wtime() - t0;
            if (rank == 0) {
                printf("%ld %.2f\n", size, 2.0 * size * OSU_WINDOW * iters / t / 1e6);
                fflush(stdout);
            }
            errors += osu_check("bibw", rank, rbuf, size, osu_pattern(peer, size, 1));
        }
    }
    free(sbuf);
    free(rbuf);
    return osu_finish(errors);
}
