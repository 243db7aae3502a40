/*
 * pingpong: 2-rank latency (blocking ping-pong, half round trip) and
 * bandwidth (a window of 64 MPI_Isend/MPI_Irecv then a 1-byte ack) for
 * message sizes 1 B .. 4 MiB, with warm-up iterations that are not timed.
 * Every received buffer's first and last byte are checked.
 *
 * Usage: pingpong [max_bytes]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static int iters_for(size_t n) { return n <= 8192 ? 2000 : n <= 262144 ? 400 : 40; }
static int warm_for(size_t n) { return n <= 8192 ? 200 : 10; }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "pingpong needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : (4u << 20);
    /* the bandwidth window uses a separate slot per message while the
     * window fits in 64 MiB, else every message reuses the same slot */
    const size_t area = (64u << 20) > max ? (64u << 20) : max;
    char *buf = malloc(area);
    char *rbuf = malloc(area);
    if (!buf || !rbuf) MPI_Abort(MPI_COMM_WORLD, 3);
    int peer = 1 - rank, bad = 0;
    if (rank == 0) printf("%-10s %14s %14s\n", "# bytes", "latency_us", "bandwidth_MBps");
    for (size_t n = 1; n <= max; n *= 2) {
        int iters = iters_for(n), warm = warm_for(n);
        memset(buf, (int) (n & 0x7f) + 1, n);
        double t0 = 0;
        for (int i = 0; i < iters + warm; i++) {
            if (i == warm) t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, (int) n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int) n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(rbuf, (int) n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, (int) n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            }
        }
        double lat = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
        if (rbuf[0] != (char) ((n & 0x7f) + 1) || rbuf[n - 1] != (char) ((n & 0x7f) + 1)) bad = 1;

        /* bandwidth: rank 0 streams windows, rank 1 acks each window */
        int biters = iters / 10 > 4 ? iters / 10 : 4;
        size_t slot = n * WINDOW > area ? 0 : n;
        MPI_Request reqs[WINDOW];
        for (int i = 0; i < biters + 2; i++) {
            if (i == 2) t0 = MPI_Wtime();
            for (int w = 0; w < WINDOW; w++) {
                if (rank == 0)
                    MPI_Isend(buf + w * slot, (int) n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
                else
                    MPI_Irecv(rbuf + w * slot, (int) n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
            }
            MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
            char ack = 0;
            if (rank == 0)
                MPI_Recv(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else
                MPI_Send(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
        }
        double bw = (double) n * WINDOW * biters / (MPI_Wtime() - t0) / 1e6;
        if (rank == 1 && (rbuf[0] != (char) ((n & 0x7f) + 1))) bad = 1;
        if (rank == 0) printf("%-10zu %14.2f %14.2f\n", n, lat, bw);
        fflush(stdout);
    }
    int anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && anybad) printf("FAIL: corrupted payload\n");
    free(buf);
    free(rbuf);
    MPI_Finalize();
    return anybad;
}
