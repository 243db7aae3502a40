/* Multi-pair bandwidth and message rate (OSU methodology): np must be even;
 * rank i (i < np/2) sends to rank i + np/2 with a window of 64 MPI_Isend, the
 * receiver posts 64 MPI_Irecv and returns a 4-byte ack per window.  The time
 * is taken on rank 0 between barriers, so it covers the slowest pair.
 * Output: size aggregate_MB/s messages_per_s
 * Usage: mbw_mr [max_bytes] [iteration_scale] */
#include "osu_common.h"

int main(int argc, char **argv)
{
    int rank, np, errors = 0;
    MPI_Request req[OSU_WINDOW];
    char ack[4] = {0};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (np < 2 || np % 2) {
        if (rank == 0)
            fprintf(stderr, "mbw_mr needs an even number of ranks\n");
        MPI_Finalize();
        return 2;
    }
    osu_args(argc, argv, 1);
    int pairs = np / 2;
    int sender = rank < pairs;
    int peer = sender ? rank + pairs : rank - pairs;
    unsigned char *buf = osu_alloc(osu_max_size);
    if (rank == 0) {
        printf("# mbw_mr: size MB/s msgs/s (%d pairs, window %d)\n", pairs, OSU_WINDOW);
        fflush(stdout);
    }
    osu_warmup(rank, peer);
    for (long size = 1; size <= osu_max_size; size *= 2) {
        long iters = osu_scaled(size > OSU_LARGE ? 20 : 100, 1);
        long skip = osu_scaled(size > OSU_LARGE ? 2 : 10, 0);
        if (sender)
            memset(buf, osu_pattern(rank, size, 2), size);
        else
            memset(buf, 0, size);
        double t0 = 0;
        /* warm-up */
        for (long i = 0; i < iters + skip; i++) {
            if (i == skip) {
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = MPI_Wtime();
            }
            if (sender) {
                for (int w = 0; w < OSU_WINDOW; w++)
                    MPI_Isend(buf, (int)size, MPI_CHAR, peer, 300, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(OSU_WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Recv(ack, 4, MPI_CHAR, peer, 301, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (int w = 0; w < OSU_WINDOW; w++)
                    MPI_Irecv(buf, (int)size, MPI_CHAR, peer, 300, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(OSU_WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Send(ack, 4, MPI_CHAR, peer, 301, MPI_COMM_WORLD);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime() - t0;
        if (rank == 0) {
            double msgs = (double)pairs * OSU_WINDOW * iters;
            printf("%ld %.2f %.0f\n", size, msgs * size / t / 1e6, msgs / t);
            fflush(stdout);
        }
        if (!sender)
            errors += osu_check("mbw_mr", rank, buf, size, osu_pattern(peer, size, 2));
    }
    free(buf);
    return osu_finish(errors);
}
