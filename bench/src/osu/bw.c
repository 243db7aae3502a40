/* Unidirectional bandwidth (OSU methodology): rank 0 posts a window of 64
 * MPI_Isend, rank 1 a window of 64 MPI_Irecv; after each window the receiver
 * returns a 4-byte ack.  Reports MB/s (10^6 bytes/s).
 * Usage: bw [max_bytes] [iteration_scale] */
#include "osu_common.h"

int main(int argc, char **argv)
{
    int rank, np, errors = 0;
    MPI_Request req[OSU_WINDOW];
    char ack[4] = {0};
    osu_init(&argc, &argv, "bw", 2, &rank, &np);
    osu_args(argc, argv, 1);
    unsigned char *buf = osu_alloc(osu_max_size);
    if (rank == 0) {
        printf("# bw: size MB/s (window %d)\n", OSU_WINDOW);
        fflush(stdout);
    }
    osu_warmup(rank, rank < 2 ? 1 - rank : -1);
    for (long size = 1; size <= osu_max_size; size *= 2) {
        long iters = osu_scaled(size > OSU_LARGE ? 20 : 100, 1);
        long skip = osu_scaled(size > OSU_LARGE ? 2 : 10, 0);
        if (rank == 0)
            memset(buf, osu_pattern(0, size, 0), size);
        else
            memset(buf, 0, size);
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            for (long i = 0; i < iters + skip; i++) {
                if (i == skip)
                    t0 = MPI_Wtime();
                for (int w = 0; w < OSU_WINDOW; w++)
                    MPI_Isend(buf, (int)size, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(OSU_WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Recv(ack, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
            double t = MPI_Wtime() - t0;
            printf("%ld %.2f\n", size, (double)size * OSU_WINDOW * iters / t / 1e6);
            fflush(stdout);
        } else if (rank == 1) {
            for (long i = 0; i < iters + skip; i++) {
                for (int w = 0; w < OSU_WINDOW; w++)
                    MPI_Irecv(buf, (int)size, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(OSU_WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Send(ack, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
            }
            errors += osu_check("bw", rank, buf, size, osu_pattern(0, size, 0));
        }
    }
    free(buf);
    return osu_finish(errors);
}
