/*
 * Start-up cost of a whole MPI job, for bench/startup.
 *
 * Every rank takes the wall-clock time just before MPI_Init and just after
 * it, then the job does a barrier, an allreduce and a first point-to-point
 * exchange (rank 0 with the rank furthest from it: the first message
 * between that pair, which pays any per-peer setup left to first use), and
 * MPI_Finalize. Rank 0 prints one line:
 *   STARTUP np=N init_max_ms=.. init_min_ms=.. barrier_ms=.. allreduce_ms=..
 *           first_msg_us=.. second_msg_us=.. rss_max_mb=.. rss_sum_mb=..
 * init_* are over ranks; rss is each rank's resident set (VmRSS) after the
 * collectives, max over ranks and the sum. The whole job's wall time is
 * measured by the script around mpirun.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof(line), f)) {
        if (0 == strncmp(line, "VmRSS:", 6)) {
            kb = atof(line + 6);
        }
    }
    if (f) {
        fclose(f);
    }
    return kb / 1024.0;
}

/* One round trip between ranks a and b; returns half of it in µs (rank a). */
static double exchange(int rank, int a, int b)
{
    char byte = 0;
    double t0 = now_s();
    if (rank == a) {
        MPI_Send(&byte, 1, MPI_CHAR, b, 7, MPI_COMM_WORLD);
        MPI_Recv(&byte, 1, MPI_CHAR, b, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == b) {
        MPI_Recv(&byte, 1, MPI_CHAR, a, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&byte, 1, MPI_CHAR, a, 7, MPI_COMM_WORLD);
    }
    return (now_s() - t0) * 1e6 / 2;
}

int main(int argc, char **argv)
{
    int rank, size;
    double t0 = now_s();
    MPI_Init(&argc, &argv);
    double init = now_s() - t0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    double t1 = now_s();
    MPI_Barrier(MPI_COMM_WORLD);
    double barrier = now_s() - t1;
    double v = rank, sum = 0;
    t1 = now_s();
    MPI_Allreduce(&v, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double allreduce = now_s() - t1;
    if (sum != (double) size * (size - 1) / 2) {
        printf("FAIL: allreduce gave %g\n", sum);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* The pair (0, size/2) exchanged nothing directly yet on most
     * collective algorithms; the first message pays first-use setup. */
    MPI_Barrier(MPI_COMM_WORLD);
    int peer = size / 2;
    double first = size > 1 ? exchange(rank, 0, peer) : 0;
    double second = size > 1 ? exchange(rank, 0, peer) : 0;

    double mine[2] = {init, -init}, ext[2];
    MPI_Reduce(mine, ext, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    double rss = rss_mb(), rss_max = 0, rss_sum = 0;
    MPI_Reduce(&rss, &rss_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&rss, &rss_sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (0 == rank) {
        printf("STARTUP np=%d init_max_ms=%.1f init_min_ms=%.1f barrier_ms=%.2f "
               "allreduce_ms=%.2f first_msg_us=%.1f second_msg_us=%.1f rss_max_mb=%.1f "
               "rss_sum_mb=%.1f\n",
               size, ext[0] * 1e3, -ext[1] * 1e3, barrier * 1e3, allreduce * 1e3, first, second,
               rss_max, rss_sum);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
