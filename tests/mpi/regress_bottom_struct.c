/*
 * regress_bottom_struct: sends of a contiguous datatype whose data does not
 * start at the buffer pointer (true lower bound != 0), through every pml cm
 * send path.
 *
 * mpi4py test: test_cco_vec.TestCCOVec*.testAlltoallwBottom, which calls
 * MPI_Alltoallw(MPI_BOTTOM, counts=1, displs=0, types[i]) where types[i] is
 * MPI_Type_create_struct(1, {n}, {absolute address of block i}, {base type}).
 * coll basic implements Alltoallw with persistent requests
 * (MPI_Send_init/MPI_Recv_init + MPI_Startall); under rustofi the sender
 * segfaulted reading address 0 in the MTL's send path.
 *
 * Such a type is contiguous, so its data lives at buf + true_lb.  pml cm
 * hands the MTL two kinds of send convertors:
 *  - MPI_Send/Ssend/Isend/Issend/Rsend (pml cm's "thin" requests and its
 *    blocking send): built by hand, pBaseBuf = buf + true_lb already;
 *  - MPI_Send_init/Ssend_init + MPI_Start ("heavy" requests): prepared by
 *    opal_convertor_copy_and_prepare_for_send(), pBaseBuf = buf.
 * Open MPI 4.1.4's ompi_mtl_datatype_pack() returns pBaseBuf for contiguous
 * types, so it is right for the first kind and wrong for the second (reads
 * buf instead of buf + true_lb: NULL for MPI_BOTTOM -> segfault, the wrong
 * bytes otherwise); stock mtl ofi has the same bug, ob1 is correct.  Adding
 * true_lb for every nonblocking send (mtl isend) is wrong the other way:
 * Isend/Issend then read from buf + 2*true_lb.  The receive side
 * (ompi_mtl_datatype_recv_buf adds the displacement) is correct.
 *
 * Cases, rank 0 -> rank 1 (np 2; more ranks only join the collectives), for
 * each send call of MPI_Send, MPI_Ssend, MPI_Isend, MPI_Issend,
 * MPI_Send_init+MPI_Start, MPI_Ssend_init+MPI_Start:
 *  A  struct{n ints at +64 bytes} from a real buffer, n = 16 (eager) and
 *     64K ints (rendezvous); the receiver must get the block at buf + 64;
 *  B  MPI_BOTTOM with a struct at the absolute address on both sides, same
 *     sizes;
 * then
 *  C  MPI_Alltoallw(MPI_BOTTOM, ...) exactly as mpi4py's testAlltoallwBottom.
 * A reports wrong data cleanly; B and C crash where A fails.  With the
 * argument "bottom" only B and C run.
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

enum { SEND, SSEND, ISEND, ISSEND, SEND_INIT, SSEND_INIT, NMODES };
static const char *mode_name[NMODES] = {
    "MPI_Send", "MPI_Ssend", "MPI_Isend", "MPI_Issend",
    "MPI_Send_init+MPI_Start", "MPI_Ssend_init+MPI_Start"};

static void send_mode(int mode, const void *buf, MPI_Datatype t, int tag)
{
    MPI_Comm w = MPI_COMM_WORLD;
    MPI_Request r;
    switch (mode) {
    case SEND:
        MPI_CHECK(MPI_Send(buf, 1, t, 1, tag, w));
        return;
    case SSEND:
        MPI_CHECK(MPI_Ssend(buf, 1, t, 1, tag, w));
        return;
    case ISEND:
        MPI_CHECK(MPI_Isend(buf, 1, t, 1, tag, w, &r));
        MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        return;
    case ISSEND:
        MPI_CHECK(MPI_Issend(buf, 1, t, 1, tag, w, &r));
        MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        return;
    case SEND_INIT:
        MPI_CHECK(MPI_Send_init(buf, 1, t, 1, tag, w, &r));
        break;
    default:
        MPI_CHECK(MPI_Ssend_init(buf, 1, t, 1, tag, w, &r));
        break;
    }
    MPI_CHECK(MPI_Start(&r));
    MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Request_free(&r));
}

static void check_block(const int *p, int n, int c, const char *what)
{
    for (int i = 0; i < n; i++)
        CHECK(p[i] == value(c, i), "%s: element %d is %d, expected %d%s", what,
              i, p[i], value(c, i),
              p[i] == -1 - i ? " (sent from the buffer pointer, lower bound "
                               "not added)"
              : p[i] == value(c, i + OFFSET_INTS)
                  ? " (sent from buffer + 2 * lower bound)" : "");
}

/* A: nonzero displacement from a real buffer. */
static void case_offset(int n, int mode, int c)
{
    char what[160];
    snprintf(what, sizeof(what), "%s(buf, 1, struct{%d ints at +%d bytes})",
             mode_name[mode], n, OFFSET_INTS * (int)sizeof(int));
    if (test_rank == 0) {
        /* [0, lb): -1 - i, what a send ignoring lb would carry; the data
         * from lb on, continued for another lb so that a send from
         * buf + 2 * lb stays in bounds and is recognisable. */
        int *buf = xmalloc((size_t)(n + 2 * OFFSET_INTS) * sizeof(int));
        for (int i = 0; i < OFFSET_INTS; i++)
            buf[i] = -1 - i;
        for (int i = 0; i < n + OFFSET_INTS; i++)
            buf[OFFSET_INTS + i] = value(c, i);
        MPI_Datatype t = block_at(OFFSET_INTS * (MPI_Aint)sizeof(int), n);
        send_mode(mode, buf, t, c);
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
static void case_bottom(int n, int mode, int c)
{
    char what[160];
    snprintf(what, sizeof(what), "%s(MPI_BOTTOM, 1, struct{%d ints at "
             "absolute address})", mode_name[mode], n);
    int *buf = xmalloc((size_t)n * sizeof(int));
    MPI_Aint addr;
    MPI_CHECK(MPI_Get_address(buf, &addr));
    MPI_Datatype t = block_at(addr, n);
    if (test_rank == 0) {
        for (int i = 0; i < n; i++)
            buf[i] = value(c, i);
        send_mode(mode, MPI_BOTTOM, t, c);
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
    int only_bottom = argc > 1 && strcmp(argv[1], "bottom") == 0;
    int c = 1;
    for (int m = 0; m < NMODES && !only_bottom; m++)
        for (int s = 0; s < NSIZES; s++)
            case_offset(sizes[s], m, c++);
    for (int m = 0; m < NMODES; m++)
        for (int s = 0; s < NSIZES; s++)
            case_bottom(sizes[s], m, c++);
    case_alltoallw(c++);
    return test_finish();
}
