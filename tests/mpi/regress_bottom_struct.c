/*
 * regress_bottom_struct: sends of a contiguous datatype whose data does not
 * start at the buffer pointer (true lower bound != 0).
 *
 * mpi4py test: test_cco_vec.TestCCOVec*.testAlltoallwBottom, which calls
 * MPI_Alltoallw(MPI_BOTTOM, counts=1, displs=0, types[i]) where types[i] is
 * MPI_Type_create_struct(1, {n}, {absolute address of block i}, {base type}).
 * coll basic turns that into MPI_Isend(MPI_BOTTOM, 1, types[i], ...).  Such a
 * type is contiguous, so the data to send lives at buf + true_lb.  Open MPI
 * 4.1.4's ompi_mtl_datatype_pack() returns convertor->pBaseBuf (the user
 * pointer) for contiguous types without adding true_lb, so an MTL that uses
 * it sends from the wrong address: from NULL for MPI_BOTTOM (segfault in the
 * sender's copy), from buf instead of buf + lb otherwise (wrong data).
 * The receive side (ompi_mtl_datatype_recv_buf) adds the displacement.
 *
 * Cases, rank 0 -> rank 1 (np 2; more ranks just take part in the barriers):
 *  A  MPI_Send(buf, 1, struct{n ints at +64 bytes}) for an eager size (n=16)
 *     and a rendezvous size (n=64K ints): received data must be the block at
 *     buf + 64, not the bytes at buf.
 *  B  MPI_Send(MPI_BOTTOM, 1, struct{n ints at absolute address}), eager and
 *     rendezvous sizes; MPI_Recv into MPI_BOTTOM with an absolute struct.
 *  C  MPI_Alltoallw(MPI_BOTTOM, ...) exactly as mpi4py's testAlltoallwBottom.
 */
#include "common.h"

#define OFFSET_INTS 16 /* 64 bytes */

static const int sizes[] = {16, 64 * 1024};
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

static int value(int c, int i) { return c * 1000003 + i * 11 + 7; }

static MPI_Datatype block_at(MPI_Aint disp, int n)
{
    MPI_Datatype t;
    int bl = n;
    MPI_CHECK(MPI_Type_create_struct(1, &bl, &disp, (MPI_Datatype[]){MPI_INT}, &t));
    MPI_CHECK(MPI_Type_commit(&t));
    return t;
}

static void check_block(const int *p, int n, int c, const char *what)
{
    for (int i = 0; i < n; i++)
        CHECK(p[i] == value(c, i), "%s: element %d is %d, expected %d%s", what,
              i, p[i], value(c, i),
              p[i] == -1 - i ? " (the bytes at the buffer pointer were sent, "
                               "not those at buffer + lower bound)" : "");
}

/* A: nonzero displacement from a real buffer. */
static void case_offset(int n, int c)
{
    char what[96];
    snprintf(what, sizeof(what), "Send(buf, 1, struct{%d ints at +%d bytes})",
             n, OFFSET_INTS * (int)sizeof(int));
    if (test_rank == 0) {
        int *buf = xmalloc((size_t)(n + OFFSET_INTS) * sizeof(int));
        for (int i = 0; i < n + OFFSET_INTS; i++)
            buf[i] = -1 - i; /* what a send from buf (ignoring lb) would carry */
        for (int i = 0; i < n; i++)
            buf[OFFSET_INTS + i] = value(c, i);
        MPI_Datatype t = block_at(OFFSET_INTS * (MPI_Aint)sizeof(int), n);
        MPI_CHECK(MPI_Send(buf, 1, t, 1, c, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Type_free(&t));
        free(buf);
    } else if (test_rank == 1) {
        int *buf = xmalloc((size_t)n * sizeof(int));
        MPI_Status st;
        int cnt = -1;
        MPI_CHECK(MPI_Recv(buf, n, MPI_INT, 0, c, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &cnt));
        CHECK(cnt == n, "%s: received %d ints, expected %d", what, cnt, n);
        check_block(buf, n, c, what);
        free(buf);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

/* B: MPI_BOTTOM with absolute addresses on both sides. */
static void case_bottom(int n, int c)
{
    char what[96];
    snprintf(what, sizeof(what), "Send(MPI_BOTTOM, 1, struct{%d ints at "
             "absolute address})", n);
    int *buf = xmalloc((size_t)n * sizeof(int));
    MPI_Aint addr;
    MPI_CHECK(MPI_Get_address(buf, &addr));
    MPI_Datatype t = block_at(addr, n);
    if (test_rank == 0) {
        for (int i = 0; i < n; i++)
            buf[i] = value(c, i);
        MPI_CHECK(MPI_Send(MPI_BOTTOM, 1, t, 1, c, MPI_COMM_WORLD));
    } else if (test_rank == 1) {
        MPI_Status st;
        int cnt = -1;
        for (int i = 0; i < n; i++)
            buf[i] = -1;
        MPI_CHECK(MPI_Recv(MPI_BOTTOM, 1, t, 0, c, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &cnt));
        CHECK(cnt == n, "%s: received %d ints, expected %d", what, cnt, n);
        check_block(buf, n, c, what);
    }
    MPI_CHECK(MPI_Type_free(&t));
    free(buf);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

/* C: mpi4py's testAlltoallwBottom for block lengths 1..size. */
static void case_alltoallw(int c)
{
    int size = test_size;
    for (int n = 1; n <= size; n++) {
        int *sbuf = xmalloc((size_t)size * n * sizeof(int));
        int *rbuf = xmalloc((size_t)size * n * sizeof(int));
        int *counts = xmalloc((size_t)size * sizeof(int));
        int *displs = xmalloc((size_t)size * sizeof(int));
        MPI_Datatype *st = xmalloc((size_t)size * sizeof(MPI_Datatype));
        MPI_Datatype *rt = xmalloc((size_t)size * sizeof(MPI_Datatype));
        MPI_Aint sa, ra;
        for (int i = 0; i < size * n; i++) {
            sbuf[i] = value(c, test_rank * 1000 + i);
            rbuf[i] = -1;
        }
        MPI_CHECK(MPI_Get_address(sbuf, &sa));
        MPI_CHECK(MPI_Get_address(rbuf, &ra));
        for (int p = 0; p < size; p++) {
            counts[p] = 1;
            displs[p] = 0;
            st[p] = block_at(sa + (MPI_Aint)p * n * (MPI_Aint)sizeof(int), n);
            rt[p] = block_at(ra + (MPI_Aint)p * n * (MPI_Aint)sizeof(int), n);
        }
        MPI_CHECK(MPI_Alltoallw(MPI_BOTTOM, counts, displs, st, MPI_BOTTOM,
                                counts, displs, rt, MPI_COMM_WORLD));
        for (int p = 0; p < size; p++)
            for (int j = 0; j < n; j++) {
                int want = value(c, p * 1000 + test_rank * n + j);
                CHECK(rbuf[p * n + j] == want, "Alltoallw(MPI_BOTTOM, struct "
                      "types) n=%d: block from rank %d element %d is %d, "
                      "expected %d", n, p, j, rbuf[p * n + j], want);
            }
        for (int p = 0; p < size; p++) {
            MPI_CHECK(MPI_Type_free(&st[p]));
            MPI_CHECK(MPI_Type_free(&rt[p]));
        }
        free(sbuf); free(rbuf); free(counts); free(displs); free(st); free(rt);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "regress_bottom_struct");
    require_np(2);
    int c = 1;
    for (int s = 0; s < NSIZES; s++)
        case_offset(sizes[s], c++);
    for (int s = 0; s < NSIZES; s++)
        case_bottom(sizes[s], c++);
    case_alltoallw(c++);
    return test_finish();
}
