/*
 * vector_type: non-contiguous datatypes.
 *
 * For each vector shape (eager size and > 64 KiB total):
 *  A  rank 0 sends one MPI_Type_vector from a strided buffer, rank 1 receives
 *     count*blocklen contiguous ints.
 *  B  rank 0 sends contiguous ints, rank 1 receives one vector into a strided
 *     buffer pre-filled with a sentinel: all blocks correct, every gap and
 *     everything past the extent untouched.
 *  C  strided send into a differently strided receive (vector with stride 2
 *     of blocklen 1), gaps checked.
 *  D  the same as A and B in the other direction (rank 1 -> rank 0), with
 *     MPI_Get_count / MPI_Get_elements checked on the vector receive.
 */
#include "common.h"

#define SENTINEL ((int)0xDEADBEEF)
#define TAIL 64 /* ints after the extent that must stay untouched */

struct shape {
    int count, blocklen, stride;
};

static const struct shape shapes[] = {
    {100, 3, 5},       /* 1200 bytes of data: eager */
    {20000, 2, 3},     /* 160000 bytes: rendezvous */
    {50, 1000, 1500},  /* 200000 bytes in big blocks */
    {1, 3000, 3000},   /* degenerate vector (one block), 12000 bytes */
};
#define NSHAPES ((int)(sizeof(shapes) / sizeof(shapes[0])))

static int value(int shape, int i) { return (shape + 1) * 10000000 + i * 7 + 3; }

/* number of ints spanned by a vector: (count-1)*stride + blocklen */
static int span(const struct shape *s)
{
    return (s->count - 1) * s->stride + s->blocklen;
}

static void fill_strided(int *buf, const struct shape *s, int si)
{
    int n = span(s) + TAIL;
    for (int i = 0; i < n; i++)
        buf[i] = -1 - i; /* gap values that must not be transferred */
    int k = 0;
    for (int b = 0; b < s->count; b++)
        for (int j = 0; j < s->blocklen; j++)
            buf[b * s->stride + j] = value(si, k++);
}

static void check_strided(const int *buf, const struct shape *s, int si,
                          const char *what)
{
    int n = span(s) + TAIL, k = 0;
    for (int i = 0; i < n; i++) {
        int b = i / s->stride, j = i % s->stride;
        int in_block = (b < s->count && j < s->blocklen);
        if (in_block) {
            CHECK(buf[i] == value(si, k), "%s: element %d (block %d, +%d) is "
                  "%d, expected %d", what, i, b, j, buf[i], value(si, k));
            k++;
        } else {
            CHECK(buf[i] == SENTINEL, "%s: gap element %d (after %d data "
                  "elements) was modified to %d", what, i, k, buf[i]);
        }
    }
}

static void check_contig(const int *buf, int n, int si, const char *what)
{
    for (int i = 0; i < n; i++)
        CHECK(buf[i] == value(si, i), "%s: element %d is %d, expected %d",
              what, i, buf[i], value(si, i));
    for (int i = n; i < n + TAIL; i++)
        CHECK(buf[i] == SENTINEL, "%s: element %d past the data modified",
              what, i);
}

static void run_shape(int si, int from, int to)
{
    const struct shape *s = &shapes[si];
    int n = s->count * s->blocklen, sp = span(s);
    MPI_Datatype vec, vec2;
    MPI_Status st;
    char what[128];
    MPI_CHECK(MPI_Type_vector(s->count, s->blocklen, s->stride, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_commit(&vec));
    MPI_CHECK(MPI_Type_vector(n, 1, 2, MPI_INT, &vec2));
    MPI_CHECK(MPI_Type_commit(&vec2));

    int *strided = xmalloc(sizeof(int) * (sp + TAIL));
    int *contig = xmalloc(sizeof(int) * (n + TAIL));
    int *wide = xmalloc(sizeof(int) * (2 * n + TAIL));
    int tagbase = 100 * si + 10 * from;

    if (test_rank == from) {
        /* A: strided -> contiguous */
        fill_strided(strided, s, si);
        MPI_CHECK(MPI_Send(strided, 1, vec, to, tagbase + 1, MPI_COMM_WORLD));
        /* B: contiguous -> strided */
        for (int i = 0; i < n; i++)
            contig[i] = value(si, i);
        MPI_CHECK(MPI_Send(contig, n, MPI_INT, to, tagbase + 2,
                           MPI_COMM_WORLD));
        /* C: strided -> other stride */
        MPI_CHECK(MPI_Send(strided, 1, vec, to, tagbase + 3, MPI_COMM_WORLD));
    } else if (test_rank == to) {
        int cnt;
        /* A */
        for (int i = 0; i < n + TAIL; i++)
            contig[i] = SENTINEL;
        MPI_CHECK(MPI_Recv(contig, n + TAIL, MPI_INT, from, tagbase + 1,
                           MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &cnt));
        snprintf(what, sizeof(what), "vector(%d,%d,%d) %d->%d into contiguous",
                 s->count, s->blocklen, s->stride, from, to);
        CHECK(cnt == n, "%s: count %d, expected %d", what, cnt, n);
        check_contig(contig, n, si, what);
        /* B */
        for (int i = 0; i < sp + TAIL; i++)
            strided[i] = SENTINEL;
        MPI_CHECK(MPI_Recv(strided, 1, vec, from, tagbase + 2, MPI_COMM_WORLD,
                           &st));
        snprintf(what, sizeof(what), "contiguous %d->%d into vector(%d,%d,%d)",
                 from, to, s->count, s->blocklen, s->stride);
        MPI_CHECK(MPI_Get_count(&st, vec, &cnt));
        CHECK(cnt == 1, "%s: MPI_Get_count(vector) %d, expected 1", what, cnt);
        MPI_CHECK(MPI_Get_elements(&st, vec, &cnt));
        CHECK(cnt == n, "%s: MPI_Get_elements %d, expected %d", what, cnt, n);
        check_strided(strided, s, si, what);
        /* C */
        for (int i = 0; i < 2 * n + TAIL; i++)
            wide[i] = SENTINEL;
        MPI_CHECK(MPI_Recv(wide, 1, vec2, from, tagbase + 3, MPI_COMM_WORLD,
                           &st));
        snprintf(what, sizeof(what), "vector(%d,%d,%d) %d->%d into "
                 "vector(%d,1,2)", s->count, s->blocklen, s->stride, from, to,
                 n);
        for (int i = 0; i < 2 * n + TAIL; i++) {
            int expect = (i % 2 == 0 && i < 2 * n - 1) ? value(si, i / 2)
                                                       : SENTINEL;
            CHECK(wide[i] == expect, "%s: element %d is %d, expected %d", what,
                  i, wide[i], expect);
        }
    }
    free(strided);
    free(contig);
    free(wide);
    MPI_CHECK(MPI_Type_free(&vec));
    MPI_CHECK(MPI_Type_free(&vec2));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "vector_type");
    require_np(2);
    for (int dir = 0; dir < 2; dir++)
        for (int si = 0; si < NSHAPES; si++)
            run_shape(si, dir, 1 - dir);
    return test_finish();
}
