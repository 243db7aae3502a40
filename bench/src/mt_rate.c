/*
 * mt_rate: multi-threaded message rate under MPI_THREAD_MULTIPLE.
 *
 * Two ranks, T threads each. Thread t of rank 0 ping-pongs 8-byte messages
 * with thread t of rank 1 on tag t (blocking MPI_Send / MPI_Recv), so the T
 * pairs run concurrently through the same MPI library and matching engine.
 * Messages per second = messages delivered in the whole job (both directions,
 * all threads) / wall time on rank 0, from the moment all threads are
 * released together to the moment the last one finished.
 *
 * Rounds are time-bounded rather than count-bounded, so a slow or loaded
 * machine still finishes: a rank-0 thread keeps starting round trips until
 * `seconds` have passed and marks its last ping with a stop bit that its
 * peer thread sees (the payload is checked either way).
 *
 * One untimed warm-up round (seconds/5), then `repeats` timed rounds; rank 0
 * prints:
 *
 *   RESULT threads=<T> seconds=<S> repeats=<R> median_msgs_per_s=<m>
 *          min_msgs_per_s=<lo> max_msgs_per_s=<hi>
 *
 * Usage: mt_rate [-r repeats] [-s seconds] T      (exactly 2 ranks)
 */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STOP (UINT64_C(1) << 63)

struct worker {
    pthread_t th;
    int tag, rank, bad;
    double deadline;   /* rank 0: stop starting round trips after this */
    uint64_t trips;    /* round trips completed */
    pthread_barrier_t *start;
};

/* Payload of round trip i of thread `tag`: tag in bits 32..47, i below. */
static uint64_t payload(int tag, uint64_t i) { return ((uint64_t) tag << 32) | (i & 0xffffffffu); }

static void *run(void *arg)
{
    struct worker *w = arg;
    int peer = 1 - w->rank;
    uint64_t out = 0, in = 0;
    pthread_barrier_wait(w->start);
    for (uint64_t i = 0;; i++) {
        if (w->rank == 0) {
            int last = MPI_Wtime() >= w->deadline;
            out = payload(w->tag, i) | (last ? STOP : 0);
            MPI_Send(&out, 1, MPI_UINT64_T, peer, w->tag, MPI_COMM_WORLD);
            MPI_Recv(&in, 1, MPI_UINT64_T, peer, w->tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (in != out + 1) w->bad = 1;
            w->trips++;
            if (last) break;
        } else {
            MPI_Recv(&in, 1, MPI_UINT64_T, peer, w->tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if ((in & ~STOP) != payload(w->tag, i)) w->bad = 1;
            out = in + 1;
            MPI_Send(&out, 1, MPI_UINT64_T, peer, w->tag, MPI_COMM_WORLD);
            w->trips++;
            if (in & STOP) break;
        }
    }
    return NULL;
}

/* Runs T thread pairs for about `seconds`; returns the job's messages per
 * second as seen by rank 0 (0 on rank 1). */
static double round_once(int rank, int nthreads, double seconds, int *bad)
{
    struct worker *w = calloc((size_t) nthreads, sizeof *w);
    pthread_barrier_t start;
    if (!w || pthread_barrier_init(&start, NULL, (unsigned) nthreads + 1))
        MPI_Abort(MPI_COMM_WORLD, 3);
    for (int t = 0; t < nthreads; t++) {
        w[t] = (struct worker){.tag = t, .rank = rank, .start = &start};
        if (pthread_create(&w[t].th, NULL, run, &w[t])) MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int t = 0; t < nthreads; t++) w[t].deadline = t0 + seconds;
    pthread_barrier_wait(&start);
    uint64_t trips = 0;
    for (int t = 0; t < nthreads; t++) {
        pthread_join(w[t].th, NULL);
        trips += w[t].trips;
        if (w[t].bad) {
            if (!*bad) fprintf(stderr, "FAIL: rank %d thread %d wrong payload\n", rank, t);
            *bad = 1;
        }
    }
    double el = MPI_Wtime() - t0;
    pthread_barrier_destroy(&start);
    free(w);
    MPI_Barrier(MPI_COMM_WORLD);
    return rank == 0 ? 2.0 * (double) trips / el : 0.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) fprintf(stderr, "FAIL: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "mt_rate needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int repeats = 5, argi = 1;
    double seconds = 1.0;
    while (argi + 1 < argc && argv[argi][0] == '-') {
        if (strcmp(argv[argi], "-r") == 0) repeats = atoi(argv[argi + 1]);
        else if (strcmp(argv[argi], "-s") == 0) seconds = atof(argv[argi + 1]);
        else break;
        argi += 2;
    }
    int nthreads = argi < argc ? atoi(argv[argi]) : 0;
    if (repeats < 1 || !(seconds > 0) || nthreads < 1 || nthreads > 1024 || argi + 1 != argc) {
        if (rank == 0) fprintf(stderr, "usage: mt_rate [-r repeats] [-s seconds] T\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    int bad = 0;
    round_once(rank, nthreads, seconds / 5, &bad); /* warm-up */
    double *rate = malloc((size_t) repeats * sizeof *rate);
    if (!rate) MPI_Abort(MPI_COMM_WORLD, 3);
    for (int r = 0; r < repeats; r++) rate[r] = round_once(rank, nthreads, seconds, &bad);
    if (rank == 0) {
        qsort(rate, (size_t) repeats, sizeof *rate, cmp_double);
        double med = repeats % 2 ? rate[repeats / 2]
                                 : (rate[repeats / 2 - 1] + rate[repeats / 2]) / 2.0;
        printf("RESULT threads=%d seconds=%g repeats=%d median_msgs_per_s=%.0f "
               "min_msgs_per_s=%.0f max_msgs_per_s=%.0f\n",
               nthreads, seconds, repeats, med, rate[0], rate[repeats - 1]);
        fflush(stdout);
    }
    free(rate);
    int anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return anybad ? 1 : 0;
}
