/*
 * Companion of tests/shm_containers.sh. Every rank sends every other rank, in
 * each of ROUNDS rounds, a window of WINDOW messages of LEN bytes (posted
 * receives first, then the sends, then one MPI_Waitall), so that every
 * ring between two ranks wraps round several times and each of its pages
 * is written. Every message carries a pattern of its sender, round and
 * index, checked on arrival. Rank 0 prints "PASS fill_rings" when no rank
 * found a wrong byte.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { WINDOW = 64, LEN = 4096, ROUNDS = 20 };

static unsigned char pattern(int from, int round, int i, int k)
{
    return (unsigned char)(from * 131 + round * 31 + i * 7 + k);
}

int main(int argc, char **argv)
{
    int rank, size, bad = 0, all_bad = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t slots = (size_t)size * WINDOW;
    unsigned char *in = malloc(slots * LEN), *out = malloc(slots * LEN);
    MPI_Request *req = malloc(sizeof(MPI_Request) * 2 * slots);
    if (!in || !out || !req) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int round = 0; round < ROUNDS; round++) {
        int n = 0;
        for (int p = 0; p < size; p++) {
            if (p == rank)
                continue;
            for (int i = 0; i < WINDOW; i++)
                MPI_Irecv(in + ((size_t)p * WINDOW + i) * LEN, LEN, MPI_BYTE, p, i,
                          MPI_COMM_WORLD, &req[n++]);
        }
        for (int p = 0; p < size; p++) {
            if (p == rank)
                continue;
            for (int i = 0; i < WINDOW; i++) {
                unsigned char *b = out + ((size_t)p * WINDOW + i) * LEN;
                for (int k = 0; k < LEN; k++)
                    b[k] = pattern(rank, round, i, k);
                MPI_Isend(b, LEN, MPI_BYTE, p, i, MPI_COMM_WORLD, &req[n++]);
            }
        }
        MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
        for (int p = 0; p < size; p++) {
            if (p == rank)
                continue;
            for (int i = 0; i < WINDOW; i++) {
                const unsigned char *b = in + ((size_t)p * WINDOW + i) * LEN;
                for (int k = 0; k < LEN; k++)
                    if (b[k] != pattern(p, round, i, k)) {
                        if (bad++ == 0)
                            fprintf(stderr, "rank %d: round %d, message %d from %d: byte %d wrong\n",
                                    rank, round, i, p, k);
                        break;
                    }
            }
        }
    }
    MPI_Reduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all_bad == 0)
            printf("PASS fill_rings (np %d, %d rounds of %d x %d B to every peer)\n", size, ROUNDS,
                   WINDOW, LEN);
        else
            printf("FAIL fill_rings: %d wrong messages\n", all_bad);
    }
    free(in);
    free(out);
    free(req);
    MPI_Finalize();
    return all_bad != 0;
}
