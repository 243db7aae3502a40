/* Blocking ping-pong latency (OSU methodology): rank 0 <-> rank 1,
 * MPI_Send/MPI_Recv, warm-up iterations skipped, reports half the round trip
 * in microseconds.  Usage: lat [max_bytes] [iteration_scale] */
#include "osu_common.h"

int main(int argc, char **argv)
{
    int rank, np, errors = 0;
    osu_init(&argc, &argv, "lat", 2, &rank, &np);
    osu_args(argc, argv, 1);
    unsigned char *sbuf = osu_alloc(osu_max_size), *rbuf = osu_alloc(osu_max_size);
    int peer = rank == 0 ? 1 : 0;
    if (rank == 0) {
        printf("# lat: size latency_us (half round trip)\n");
        fflush(stdout);
    }
    osu_warmup(rank, rank < 2 ? peer : -1);
    for (long size = 1; size <= osu_max_size; size *= 2) {
        long iters = osu_scaled(size > OSU_LARGE ? 1000 : 10000, 1);
        long skip = osu_scaled(size > OSU_LARGE ? 10 : 100, 0);
        memset(sbuf, osu_pattern(rank, size, 0), size);
        memset(rbuf, 0, size);
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            for (long i = 0; i < iters + skip; i++) {
                if (i == skip)
                    t0 = MPI_Wtime();
                MPI_Send(sbuf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
            double t = MPI_Wtime() - t0;
            printf("%ld %.2f\n", size, t * 1e6 / (2.0 * iters));
            fflush(stdout);
        } else if (rank == 1) {
            for (long i = 0; i < iters + skip; i++) {
                MPI_Recv(rbuf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(sbuf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
            }
        }
        if (rank < 2)
            errors += osu_check("lat", rank, rbuf, size, osu_pattern(peer, size, 0));
    }
    free(sbuf);
    free(rbuf);
    return osu_finish(errors);
}
