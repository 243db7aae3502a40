/*
 * idle_peers: two ranks that talk among local ranks that do not.
 *
 * Ranks 0 and 1 run a blocking 8-byte ping-pong (warm-up, then timed
 * rounds; the half round trip is printed as "latency_us"), then rank 0
 * makes 2 x `polls` MPI_Test calls on a receive nothing matches yet, the
 * second half in empty_polls() (the cost of an empty progress poll once
 * a rank has waited a while, for callgrind: bench/idle-peers). Every
 * other rank posts one receive for the end of the test and waits for it
 * in MPI_Test calls 20 milliseconds apart, so that it takes almost no CPU
 * time from the two: what the many ranks change is only what the two
 * must look at when they poll.
 *
 * Usage: idle_peers [rounds [polls]]   (defaults 20000, 0)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The empty polls, in a function of their own for callgrind's
 * --toggle-collect (bench/idle-peers). */
static __attribute__((noinline)) void empty_polls(MPI_Request *r, int polls)
{
    int done = 0;
    for (int i = 0; i < polls; i++) MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (done) {
        fprintf(stderr, "idle_peers: a receive nothing matched yet completed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        fprintf(stderr, "idle_peers needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rounds = argc > 1 ? atoi(argv[1]) : 20000;
    int polls = argc > 2 ? atoi(argv[2]) : 0;
    int warm = rounds / 10 + 10;
    char out = 0, in = 0;
    if (rank >= 2) {
        MPI_Request r;
        MPI_Irecv(&in, 1, MPI_BYTE, 0, 9, MPI_COMM_WORLD, &r);
        int done = 0;
        while (!done) {
            MPI_Test(&r, &done, MPI_STATUS_IGNORE);
            if (!done) usleep(20000);
        }
    } else {
        int peer = 1 - rank;
        double t0 = 0;
        for (int i = 0; i < warm + rounds; i++) {
            if (i == warm) t0 = MPI_Wtime();
            out = (char) i;
            if (rank == 0) {
                MPI_Send(&out, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(&in, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(&in, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(&out, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            }
            if (in != (char) i) {
                fprintf(stderr, "rank %d: round %d received %d\n", rank, i, in);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        double lat = (MPI_Wtime() - t0) * 1e6 / (2.0 * rounds);
        if (rank == 0) {
            /* empty polls: a receive that rank 1 matches only after them */
            MPI_Request r;
            int done = 0;
            MPI_Irecv(&in, 1, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &r);
            for (int i = 0; i < polls; i++) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
            empty_polls(&r, polls);
            MPI_Send(&out, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            printf("ranks %d latency_us %.3f\n", size, lat);
            for (int p = 2; p < size; p++) MPI_Send(&out, 1, MPI_BYTE, p, 9, MPI_COMM_WORLD);
        } else {
            MPI_Recv(&in, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&out, 1, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        }
    }
    MPI_Finalize();
    return 0;
}
