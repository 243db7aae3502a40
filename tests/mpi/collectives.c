/*
 * collectives: collectives running over the MTL's point-to-point path.
 *
 *  - MPI_Allreduce SUM on int (1, 1000, 262144 elements = 1 MiB) and MAX on
 *    double, MIN with MPI_IN_PLACE
 *  - MPI_Alltoall with 1 and 10000 ints per peer
 *  - MPI_Bcast of 1 MiB from every root
 *  - MPI_Allgather, MPI_Reduce to the last rank
 *  - MPI_Comm_split (even/odd, reversed key) then Allreduce and Bcast on the
 *    sub-communicators
 *  - MPI_Barrier loops on MPI_COMM_WORLD and on the sub-communicators
 */
#include "common.h"

static void test_allreduce(MPI_Comm comm, const char *cname)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    static const int counts[] = {1, 1000, 262144};
    for (int c = 0; c < 3; c++) {
        int n = counts[c];
        int *in = xmalloc(sizeof(int) * n), *out = xmalloc(sizeof(int) * n);
        for (int i = 0; i < n; i++)
            in[i] = rank * 1000 + (i % 977);
        MPI_CHECK(MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, comm));
        for (int i = 0; i < n; i++) {
            int expect = 1000 * size * (size - 1) / 2 + size * (i % 977);
            CHECK(out[i] == expect, "Allreduce SUM %d ints on %s: element %d "
                  "is %d, expected %d", n, cname, i, out[i], expect);
        }
        free(in);
        free(out);
    }
    int n = 5000;
    double *d = xmalloc(sizeof(double) * n), *dm = xmalloc(sizeof(double) * n);
    for (int i = 0; i < n; i++)
        d[i] = (double)((rank + i) % size) + 0.5;
    MPI_CHECK(MPI_Allreduce(d, dm, n, MPI_DOUBLE, MPI_MAX, comm));
    for (int i = 0; i < n; i++)
        CHECK(dm[i] == (double)(size - 1) + 0.5, "Allreduce MAX on %s: "
              "element %d is %g", cname, i, dm[i]);
    for (int i = 0; i < n; i++)
        d[i] = (double)(rank + 1) * (i + 1);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, d, n, MPI_DOUBLE, MPI_MIN, comm));
    for (int i = 0; i < n; i++)
        CHECK(d[i] == (double)(i + 1), "Allreduce MIN in place on %s: "
              "element %d is %g", cname, i, d[i]);
    free(d);
    free(dm);
}

static void test_bcast(MPI_Comm comm, const char *cname, int n)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    uint8_t *buf = xmalloc(n);
    for (int root = 0; root < size; root++) {
        if (rank == root)
            fill_pattern(buf, n, 7000 + root);
        else
            memset(buf, 0, n);
        MPI_CHECK(MPI_Bcast(buf, n, MPI_BYTE, root, comm));
        EXPECT_PATTERN(buf, (size_t)n, 7000 + root, "Bcast %d bytes from "
                       "root %d on %s", n, root, cname);
    }
    free(buf);
}

static void test_alltoall(void)
{
    int size = test_size, rank = test_rank;
    static const int counts[] = {1, 10000};
    for (int c = 0; c < 2; c++) {
        int n = counts[c];
        int *sb = xmalloc(sizeof(int) * n * size);
        int *rb = xmalloc(sizeof(int) * n * size);
        for (int p = 0; p < size; p++)
            for (int i = 0; i < n; i++)
                sb[p * n + i] = rank * 1000000 + p * 10000 + (i % 10000);
        memset(rb, 0xff, sizeof(int) * n * size);
        MPI_CHECK(MPI_Alltoall(sb, n, MPI_INT, rb, n, MPI_INT,
                               MPI_COMM_WORLD));
        for (int p = 0; p < size; p++)
            for (int i = 0; i < n; i++) {
                int expect = p * 1000000 + rank * 10000 + (i % 10000);
                CHECK(rb[p * n + i] == expect, "Alltoall %d ints: element %d "
                      "from rank %d is %d, expected %d", n, i, p,
                      rb[p * n + i], expect);
            }
        free(sb);
        free(rb);
    }
}

static void test_allgather_reduce(void)
{
    int size = test_size, rank = test_rank, n = 3000;
    int *sb = xmalloc(sizeof(int) * n), *rb = xmalloc(sizeof(int) * n * size);
    for (int i = 0; i < n; i++)
        sb[i] = rank * 7 + i;
    MPI_CHECK(MPI_Allgather(sb, n, MPI_INT, rb, n, MPI_INT, MPI_COMM_WORLD));
    for (int p = 0; p < size; p++)
        for (int i = 0; i < n; i++)
            CHECK(rb[p * n + i] == p * 7 + i, "Allgather: element %d from %d "
                  "is %d", i, p, rb[p * n + i]);
    long long v = rank + 1, total = 0;
    int root = size - 1;
    MPI_CHECK(MPI_Reduce(&v, &total, 1, MPI_LONG_LONG, MPI_SUM, root,
                         MPI_COMM_WORLD));
    if (rank == root)
        CHECK(total == (long long)size * (size + 1) / 2,
              "Reduce to %d: %lld, expected %lld", root, total,
              (long long)size * (size + 1) / 2);
    free(sb);
    free(rb);
}

static void test_split(void)
{
    MPI_Comm sub;
    int color = test_rank % 2;
    /* reversed key: sub-rank order is the reverse of world order */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, test_size - test_rank,
                             &sub));
    int srank, ssize;
    MPI_Comm_rank(sub, &srank);
    MPI_Comm_size(sub, &ssize);
    int expect_size = (test_size + 1 - color) / 2;
    CHECK(ssize == expect_size, "split color %d: size %d, expected %d", color,
          ssize, expect_size);
    /* world ranks of the members, in sub-rank order */
    int *members = xmalloc(sizeof(int) * ssize);
    MPI_CHECK(MPI_Allgather(&test_rank, 1, MPI_INT, members, 1, MPI_INT, sub));
    for (int i = 1; i < ssize; i++)
        CHECK(members[i] < members[i - 1] && members[i] % 2 == color,
              "split color %d: member order wrong at %d (%d after %d)", color,
              i, members[i], members[i - 1]);
    CHECK(members[srank] == test_rank, "split: member table wrong");
    int sum = 0, expect = 0;
    for (int i = 0; i < ssize; i++)
        expect += members[i];
    MPI_CHECK(MPI_Allreduce(&test_rank, &sum, 1, MPI_INT, MPI_SUM, sub));
    CHECK(sum == expect, "split color %d: Allreduce %d, expected %d", color,
          sum, expect);
    char cname[32];
    snprintf(cname, sizeof(cname), "split color %d", color);
    test_allreduce(sub, cname);
    test_bcast(sub, cname, 1 * MIB);
    for (int i = 0; i < 20; i++)
        MPI_CHECK(MPI_Barrier(sub));
    free(members);
    MPI_CHECK(MPI_Comm_free(&sub));
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "collectives");
    for (int i = 0; i < 20; i++)
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    test_allreduce(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    test_alltoall();
    test_bcast(MPI_COMM_WORLD, "MPI_COMM_WORLD", 1 * MIB);
    test_bcast(MPI_COMM_WORLD, "MPI_COMM_WORLD", 100);
    test_allgather_reduce();
    test_split();
    for (int i = 0; i < 20; i++)
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    return test_finish();
}
