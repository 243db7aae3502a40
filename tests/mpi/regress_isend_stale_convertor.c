/*
 * regress_isend_stale_convertor: a contiguous MPI_Isend right after a
 * non-contiguous one must send its own buffer from its first byte.
 *
 * mpi4py tests: test_cco_nb_vec.TestCCOVecInplaceWorld.testAlltoallv (np 2:
 * segfault in the MTL's send copy under coll libnbc's progress), and
 * test_attributes.TestCommAttrWorld.testAttr (np 3: all ranks spin in
 * MPI_Comm_dup -> ompi_comm_nextcid, or a rank segfaults): the plain
 * MPI_INT/MPI_BYTE isends of libnbc and of the CID agreement carry the wrong
 * bytes.
 *
 * pml cm builds the convertor of a "thin" send request (MPI_Isend, MPI_Issend,
 * MPI_Irsend, and the isends of libnbc) by hand for contiguous types: it sets
 * remoteArch, flags, master, local_size, pBaseBuf = buf + true_lb, count and
 * pDesc, and leaves every other field (bConverted, ...) as the previous user
 * of the recycled request object left it.  An MTL that locates the data with
 * opal_convertor_get_current_pointer() (pBaseBuf + bConverted + true_lb) on
 * such a convertor adds true_lb a second time and adds the stale bConverted:
 * after a non-contiguous isend (packed through the convertor, bConverted =
 * its packed size), the next contiguous isend that gets the same request
 * object sends from buf + that size.  ob1 and stock mtl ofi are correct.
 *
 * The fields are not even initialised for a request object fresh from the
 * free list, so any isend can read from a wild address: a bare
 * MPI_Comm_dup(MPI_COMM_WORLD) (libnbc's MPI_Iallreduce of MPI_INTs inside
 * ompi_comm_nextcid) segfaults or spins.
 *
 *  A  rank 0 -> rank 1, for an eager (16 ints) and a rendezvous (64K ints)
 *     message and for MPI_Isend and MPI_Issend: a non-contiguous isend of a
 *     vector (64 ints with stride 2, 256 packed bytes), then a contiguous
 *     send of n MPI_INTs with the same call; the receiver checks both.  A
 *     blocking MPI_Send after the vector is checked as well.
 *  B  all ranks: MPI_Iallreduce(MPI_INT, MPI_SUM) with the result checked,
 *     and MPI_Comm_dup(MPI_COMM_WORLD) + MPI_Allreduce on the duplicate, 20
 *     times each (mpi4py's test_attributes.TestCommAttrWorld.testAttr).
 * With the argument "collectives" only B runs.
 */
#include "common.h"

#define VEC_INTS 64 /* elements of the vector type; packed size 256 bytes */

static const int sizes[] = {16, 64 * 1024};
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

enum { ISEND, ISSEND, SEND, NMODES };
static const char *mode_name[NMODES] = {"MPI_Isend", "MPI_Issend", "MPI_Send"};

static int value(int c, int i) { return c * 1000003 + i * 13 + 5; }

static void send_mode(int mode, const void *buf, int count, MPI_Datatype t,
                      int tag)
{
    MPI_Request r;
    switch (mode) {
    case ISEND:
        MPI_CHECK(MPI_Isend(buf, count, t, 1, tag, MPI_COMM_WORLD, &r));
        break;
    case ISSEND:
        MPI_CHECK(MPI_Issend(buf, count, t, 1, tag, MPI_COMM_WORLD, &r));
        break;
    default:
        MPI_CHECK(MPI_Send(buf, count, t, 1, tag, MPI_COMM_WORLD));
        return;
    }
    MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
}

static void run_case(MPI_Datatype vec, int n, int mode, int c)
{
    char what[160];
    /* room for a send that starts up to 2 * 256 bytes late to stay in
     * bounds (and recognisable) */
    int total = n + 2 * VEC_INTS;
    if (test_rank == 0) {
        int *vbuf = xmalloc(2 * VEC_INTS * sizeof(int));
        int *buf = xmalloc((size_t)total * sizeof(int));
        for (int i = 0; i < 2 * VEC_INTS; i++)
            vbuf[i] = (i % 2) ? -7 : value(c + 500, i / 2);
        for (int i = 0; i < total; i++)
            buf[i] = value(c, i);
        send_mode(mode == SEND ? ISEND : mode, vbuf, 1, vec, 2 * c);
        send_mode(mode, buf, n, MPI_INT, 2 * c + 1);
        free(vbuf);
        free(buf);
    } else if (test_rank == 1) {
        int *vr = xmalloc(VEC_INTS * sizeof(int));
        int *r = xmalloc((size_t)n * sizeof(int));
        MPI_Status st;
        int cnt = -1;
        MPI_CHECK(MPI_Recv(vr, VEC_INTS, MPI_INT, 0, 2 * c, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
        for (int i = 0; i < VEC_INTS; i++)
            CHECK(vr[i] == value(c + 500, i), "%s of a vector type: element "
                  "%d is %d, expected %d", mode_name[mode == SEND ? ISEND : mode],
                  i, vr[i], value(c + 500, i));
        MPI_CHECK(MPI_Recv(r, n, MPI_INT, 0, 2 * c + 1, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &cnt));
        snprintf(what, sizeof(what), "%s(buf, %d, MPI_INT) right after an "
                 "isend of a non-contiguous type", mode_name[mode], n);
        CHECK(cnt == n, "%s: received %d ints, expected %d", what, cnt, n);
        for (int i = 0; i < n; i++) {
            if (r[i] == value(c, i))
                continue;
            int shift = -1;
            for (int k = 1; k < 2 * VEC_INTS && shift < 0; k++)
                if (r[i] == value(c, i + k))
                    shift = k;
            fail("%s: element %d is %d, expected %d%s%d%s", what, i, r[i],
                 value(c, i), shift > 0 ? " (data sent from buf + " : "",
                 shift > 0 ? shift * (int)sizeof(int) : 0,
                 shift > 0 ? " bytes; 256 = packed size of the previous "
                             "non-contiguous send)" : "");
        }
        free(vr);
        free(r);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

/* B: the collectives of mpi4py's first COMM_WORLD tests. */
static void case_collectives(void)
{
    for (int it = 0; it < 20; it++) {
        int in[4], out[4] = {0, 0, 0, 0};
        MPI_Request r;
        for (int k = 0; k < 4; k++)
            in[k] = test_rank * 100 + it * 4 + k;
        MPI_CHECK(MPI_Iallreduce(in, out, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                                 &r));
        MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        for (int k = 0; k < 4; k++) {
            int want = 100 * test_size * (test_size - 1) / 2 +
                       test_size * (it * 4 + k);
            CHECK(out[k] == want, "MPI_Iallreduce(MPI_INT, MPI_SUM) #%d: "
                  "element %d is %d, expected %d", it, k, out[k], want);
        }
    }
    for (int it = 0; it < 20; it++) {
        MPI_Comm dup;
        int one = 1, sum = 0;
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
        MPI_CHECK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, dup));
        CHECK(sum == test_size, "MPI_Allreduce on MPI_Comm_dup #%d: %d, "
              "expected %d", it, sum, test_size);
        MPI_CHECK(MPI_Comm_free(&dup));
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

int main(int argc, char **argv)
{
    MPI_Datatype vec;
    test_init(&argc, &argv, "regress_isend_stale_convertor");
    require_np(2);
    MPI_CHECK(MPI_Type_vector(VEC_INTS, 1, 2, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_commit(&vec));
    int only_coll = argc > 1 && strcmp(argv[1], "collectives") == 0;
    int c = 1;
    for (int m = 0; m < NMODES && !only_coll; m++)
        for (int s = 0; s < NSIZES; s++)
            for (int rep = 0; rep < 3; rep++)
                run_case(vec, sizes[s], m, c++);
    MPI_CHECK(MPI_Type_free(&vec));
    case_collectives();
    return test_finish();
}
