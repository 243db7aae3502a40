/*
 * nic_bw: aggregate bandwidth of simultaneous large transfers between
 * rank pairs (0,1), (2,3), ...: in each round every even rank sends BYTES
 * to the next odd rank at the same time, and the round's aggregate is all
 * bytes moved over the slowest pair's time (send until the receiver's
 * zero-byte ack). Every received message is checked byte by byte.
 *
 * Usage: nic_bw [bytes [rounds]]   (default 64 MiB, 5 rounds; even np)
 * Prints "RESULT nic_bw pairs=P bytes=B rounds=R median_MBps=X all=..."
 * and "PASS nic_bw" on rank 0.
 */
#include "../mpi/common.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_name = "nic_bw";
    MPI_Comm_rank(MPI_COMM_WORLD, &test_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &test_size);
    long bytes = argc > 1 ? atol(argv[1]) : 64L * MIB;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    CHECK(test_size % 2 == 0, "needs an even number of ranks, got %d", test_size);
    CHECK(bytes > 0 && bytes <= INT_MAX && rounds > 0 && rounds <= 1000,
          "bad arguments: bytes %ld rounds %d", bytes, rounds);
    int peer = test_rank ^ 1;
    int sender = (test_rank % 2) == 0;
    uint8_t *buf = xmalloc((size_t)bytes);
    double *agg = xmalloc(sizeof(double) * (size_t)rounds);
    for (int r = 0; r < rounds; r++) {
        uint64_t seed = 1000u * (uint64_t)r + (uint64_t)test_rank / 2;
        if (sender) {
            fill_pattern(buf, (size_t)bytes, seed);
        } else {
            memset(buf, 0, (size_t)bytes);
        }
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = now_sec();
        if (sender) {
            MPI_CHECK(MPI_Send(buf, (int)bytes, MPI_BYTE, peer, r, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, peer, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            MPI_Status st;
            int count;
            MPI_CHECK(MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, r, MPI_COMM_WORLD, &st));
            MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, peer, r, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
            CHECK(count == bytes, "round %d: received %d bytes, expected %ld", r, count, bytes);
            EXPECT_PATTERN(buf, (size_t)bytes, seed, "round %d from rank %d", r, peer);
        }
        double dt = now_sec() - t0, slowest = 0;
        MPI_CHECK(MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
        agg[r] = (double)bytes * (test_size / 2) / slowest / 1e6;
    }
    if (test_rank == 0) {
        printf("RESULT nic_bw pairs=%d bytes=%ld rounds=%d", test_size / 2, bytes, rounds);
        double *sorted = xmalloc(sizeof(double) * (size_t)rounds);
        memcpy(sorted, agg, sizeof(double) * (size_t)rounds);
        qsort(sorted, (size_t)rounds, sizeof(double), cmp_double);
        printf(" median_MBps=%.1f all=", sorted[rounds / 2]);
        for (int r = 0; r < rounds; r++) {
            printf("%s%.1f", r ? "," : "", agg[r]);
        }
        printf("\n");
        free(sorted);
    }
    free(agg);
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank == 0) {
        printf("PASS nic_bw\n");
    }
    MPI_Finalize();
    return 0;
}
