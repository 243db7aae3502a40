/*
 * bw_phases: which side limits a window of small messages (OSU's bandwidth
 * pattern), by timing each phase of a window on both ranks. Run by
 * bench/bwphase.
 *
 * Usage: bw_phases size [iters] [window]
 *
 *   Each iteration: rank 0 posts `window` (default 64) MPI_Isend of `size`
 *   bytes and waits for them all, then receives a 1-byte ack; rank 1 posts
 *   `window` MPI_Irecv, waits for them all, then sends the ack. After 300
 *   warm-up iterations, `iters` (default 4000) are timed, each phase on its
 *   own (MPI_Wtime around it). Every payload's first and last byte are
 *   checked (window index, iteration).
 *
 * Output: one line per rank,
 *   phases rank=R size=S window=W iters=N total=T post=P wait=A ack=K
 *   in nanoseconds per message (the phase's time summed over the timed
 *   iterations, divided by iters x window). The side whose post + wait
 *   fills the window's time is the limit: a sender that posts slower than
 *   the receiver takes the window in spends little time in its ack wait;
 *   a faster one waits there for the receiver. Exit status 1 on a payload
 *   mismatch.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_WINDOW 1024
#define MAX_SIZE 65536

int main(int argc, char **argv)
{
    int rank = 0, np = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    long size = argc > 1 ? atol(argv[1]) : 8;
    long iters = argc > 2 ? atol(argv[2]) : 4000;
    long window = argc > 3 ? atol(argv[3]) : 64;
    if (np != 2 || size < 2 || size > MAX_SIZE || iters < 1 || window < 1
        || window > MAX_WINDOW) {
        if (0 == rank) {
            fprintf(stderr, "usage: bw_phases size(2..%d) [iters>=1] [window(1..%d)], 2 ranks\n",
                    MAX_SIZE, MAX_WINDOW);
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    unsigned char *buf = malloc((size_t) window * size);
    MPI_Request *rq = malloc(sizeof(MPI_Request) * window);
    if (NULL == buf || NULL == rq) {
        fprintf(stderr, "bw_phases: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const long warm = 300;
    double post = 0, wait = 0, ack_t = 0, t0 = 0;
    int bad = 0;
    char ack = 0;
    for (long i = 0; i < warm + iters; i++) {
        if (i == warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            post = wait = ack_t = 0;
            t0 = MPI_Wtime();
        }
        double a = MPI_Wtime();
        for (long w = 0; w < window; w++) {
            unsigned char *p = buf + w * size;
            if (0 == rank) {
                p[0] = (unsigned char) w;
                p[size - 1] = (unsigned char) i;
                MPI_Isend(p, (int) size, MPI_BYTE, 1, 100, MPI_COMM_WORLD, &rq[w]);
            } else {
                p[0] = p[size - 1] = 0xff;
                MPI_Irecv(p, (int) size, MPI_BYTE, 0, 100, MPI_COMM_WORLD, &rq[w]);
            }
        }
        double b = MPI_Wtime();
        MPI_Waitall((int) window, rq, MPI_STATUSES_IGNORE);
        double c = MPI_Wtime();
        if (0 == rank) {
            MPI_Recv(&ack, 1, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (long w = 0; w < window; w++) {
                const unsigned char *p = buf + w * size;
                bad |= p[0] != (unsigned char) w || p[size - 1] != (unsigned char) i;
            }
            MPI_Send(&ack, 1, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
        }
        double d = MPI_Wtime();
        post += b - a;
        wait += c - b;
        ack_t += d - c;
    }
    double total = MPI_Wtime() - t0, per = 1e9 / ((double) iters * window);
    printf("phases rank=%d size=%ld window=%ld iters=%ld total=%.1f post=%.1f wait=%.1f ack=%.1f\n",
           rank, size, window, iters, total * per, post * per, wait * per, ack_t * per);
    if (bad) {
        fprintf(stderr, "bw_phases: rank %d received a wrong payload\n", rank);
    }
    free(buf);
    free(rq);
    MPI_Finalize();
    return bad;
}
