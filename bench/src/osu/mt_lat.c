/* Multi-threaded ping-pong latency (OSU methodology, MPI_THREAD_MULTIPLE):
 * ranks 0 and 1 each run T threads; thread t of rank 0 ping-pongs with thread
 * t of rank 1 on tag t, all threads at once.  Reports the mean over threads
 * of the half round trip in microseconds.
 * Usage: mt_lat [threads] [max_bytes] [iteration_scale]  (threads default 2) */
#include "osu_common.h"
#include <pthread.h>

#define MAX_SIZES 40

static int rank, nthreads = 2;
static pthread_barrier_t bar;
static double lat_us[256][MAX_SIZES];
static int thread_errors[256];

static void *worker(void *arg)
{
    int tid = (int)(long)arg;
    int peer = rank == 0 ? 1 : 0;
    unsigned char *sbuf = osu_alloc(osu_max_size), *rbuf = osu_alloc(osu_max_size);
    int idx = 0;
    for (long size = 1; size <= osu_max_size; size *= 2, idx++) {
        long iters = osu_scaled(size > OSU_LARGE ? 100 : 1000, 1);
        long skip = osu_scaled(size > OSU_LARGE ? 10 : 50, 0);
        memset(sbuf, osu_pattern(rank, size, tid), size);
        memset(rbuf, 0, size);
        pthread_barrier_wait(&bar);
        if (tid == 0)
            MPI_Barrier(MPI_COMM_WORLD);
        pthread_barrier_wait(&bar);
        double t0 = 0;
        if (rank < 2) {
            for (long i = 0; i < iters + skip; i++) {
                if (i == skip)
                    t0 = MPI_Wtime();
                if (rank == 0) {
                    MPI_Send(sbuf, (int)size, MPI_CHAR, peer, tid, MPI_COMM_WORLD);
                    MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, tid, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, tid, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(sbuf, (int)size, MPI_CHAR, peer, tid, MPI_COMM_WORLD);
                }
            }
            lat_us[tid][idx] = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
            thread_errors[tid] += osu_check("mt_lat", rank, rbuf, size, osu_pattern(peer, size, tid));
        }
    }
    free(sbuf);
    free(rbuf);
    return NULL;
}

int main(int argc, char **argv)
{
    int np, provided, errors = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc > 1)
        nthreads = atoi(argv[1]);
    if (nthreads < 1 || nthreads > 256) {
        if (rank == 0)
            fprintf(stderr, "threads must be 1..256\n");
        MPI_Finalize();
        return 2;
    }
    if (provided < MPI_THREAD_MULTIPLE || np < 2) {
        if (rank == 0)
            fprintf(stderr, "mt_lat needs MPI_THREAD_MULTIPLE (got %d) and 2 ranks\n", provided);
        MPI_Finalize();
        return 2;
    }
    osu_args(argc, argv, 2);
    if (rank == 0) {
        printf("# mt_lat: size latency_us (mean over %d threads per rank, half round trip)\n",
               nthreads);
        fflush(stdout);
    }
    osu_warmup(rank, rank < 2 ? 1 - rank : -1);
    pthread_t th[256];
    pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
    for (int t = 0; t < nthreads; t++)
        pthread_create(&th[t], NULL, worker, (void *)(long)t);
    for (int t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
        errors += thread_errors[t];
    }
    pthread_barrier_destroy(&bar);
    if (rank == 0) {
        int idx = 0;
        for (long size = 1; size <= osu_max_size; size *= 2, idx++) {
            double sum = 0;
            for (int t = 0; t < nthreads; t++)
                sum += lat_us[t][idx];
            printf("%ld %.2f\n", size, sum / nthreads);
        }
    }
    return osu_finish(errors);
}
