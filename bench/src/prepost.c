/*
 * prepost: cost per message when the receiver has N receives pre-posted.
 *
 * Rank 0 (receiver) posts N MPI_Irecv of 8 bytes from rank 1 with tags
 * 0 .. N-1, both ranks enter MPI_Barrier, rank 1 (sender) sends tag N-1
 * first and tag 0 last (MPI_Send, 8 bytes), and rank 0 waits for all of them
 * (MPI_Waitall) and then sends a 0-byte acknowledgement. The sender times
 * from leaving the barrier (before its first send) to receiving the
 * acknowledgement; that time divided by N is the time per message. (Timing
 * on the receiver from its barrier exit would miss the messages the sender
 * got through while the receiver was still finishing the barrier.) The
 * acknowledgement adds one one-way latency to the total, i.e. latency/N per
 * message. Every message carries its tag as payload and is checked.
 *
 * One untimed warm-up round, then `repeats` timed rounds (a barrier separates
 * rounds); the sender prints one line per N:
 *
 *   RESULT n=<N> repeats=<R> median_us=<median> min_us=<min> max_us=<max>
 *
 * Usage: prepost [-r repeats] N [N ...]     (exactly 2 ranks)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t) n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* One round; returns the sender's elapsed seconds (0 on the receiver).
 * Sets *bad on a wrong payload. */
static double round_once(int rank, int n, int ack_tag, uint64_t *buf, MPI_Request *reqs,
                         int *bad)
{
    double elapsed = 0;
    if (rank == 0) {
        for (int i = 0; i < n; i++) {
            buf[i] = UINT64_MAX;
            MPI_Irecv(&buf[i], 1, MPI_UINT64_T, 1, i, MPI_COMM_WORLD, &reqs[i]);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
        MPI_Send(NULL, 0, MPI_BYTE, 1, ack_tag, MPI_COMM_WORLD);
        for (int i = 0; i < n; i++)
            if (buf[i] != (uint64_t) i) {
                if (!*bad)
                    fprintf(stderr, "FAIL: n=%d tag %d received %llu\n", n, i,
                            (unsigned long long) buf[i]);
                *bad = 1;
            }
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = n - 1; i >= 0; i--) {
            uint64_t v = (uint64_t) i;
            MPI_Send(&v, 1, MPI_UINT64_T, 0, i, MPI_COMM_WORLD);
        }
        MPI_Recv(NULL, 0, MPI_BYTE, 0, ack_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        elapsed = MPI_Wtime() - t0;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return elapsed;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "prepost needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int repeats = 5, argi = 1;
    if (argi + 1 < argc && strcmp(argv[argi], "-r") == 0) {
        repeats = atoi(argv[argi + 1]);
        argi += 2;
    }
    if (repeats < 1 || argi >= argc) {
        if (rank == 0) fprintf(stderr, "usage: prepost [-r repeats] N [N ...]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int tag_ub = 32767, flag = 0, *ub = NULL;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    if (flag) tag_ub = *ub;

    int bad = 0;
    for (; argi < argc; argi++) {
        int n = atoi(argv[argi]);
        if (n < 1 || n > tag_ub) {
            if (rank == 0) fprintf(stderr, "N=%d out of range (tag_ub %d)\n", n, tag_ub);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        uint64_t *buf = malloc((size_t) n * sizeof *buf);
        MPI_Request *reqs = malloc((size_t) n * sizeof *reqs);
        double *t = malloc((size_t) repeats * sizeof *t);
        if (!buf || !reqs || !t) MPI_Abort(MPI_COMM_WORLD, 3);

        round_once(rank, n, n, buf, reqs, &bad); /* warm-up */
        for (int r = 0; r < repeats; r++)
            t[r] = round_once(rank, n, n, buf, reqs, &bad) * 1e6 / n;
        if (rank == 1) {
            double lo = t[0], hi = t[0];
            for (int r = 1; r < repeats; r++) {
                if (t[r] < lo) lo = t[r];
                if (t[r] > hi) hi = t[r];
            }
            printf("RESULT n=%d repeats=%d median_us=%.3f min_us=%.3f max_us=%.3f\n", n,
                   repeats, median(t, repeats), lo, hi);
            fflush(stdout);
        }
        free(buf);
        free(reqs);
        free(t);
    }
    int anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return anybad ? 1 : 0;
}
