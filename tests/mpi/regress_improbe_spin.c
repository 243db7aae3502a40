/*
 * regress_improbe_spin: a message already sent must eventually be found by
 * a loop of nonblocking probes that makes no other MPI call.
 *
 * mpi4py test: test_p2p_buf_matched.TestP2PMatchedWorld.testProbeRecv, whose
 * ranks exchange a message each way and then spin in
 *     while not m: m = comm.Improbe(peer, 1)
 * for a message the peer sent with MPI_Send (eager, already complete on the
 * sender).  Both ranks spun forever in MPI_Improbe (rank 1 never saw rank
 * 0's tag-1 message, rank 0 waited for rank 1's reply): the probe must drive
 * the MTL's progress (receive the packets that arrived) before it reports
 * "no match".
 *
 * Rank 0 -> rank 1 (np 2; other ranks only join the final barrier), with
 * 0, 4 and 4096 bytes:
 *  A  MPI_Send, then the receiver spins in MPI_Improbe(src, tag), MPI_Mrecv;
 *  B  the same with MPI_Iprobe + MPI_Recv and with
 *     MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG);
 *  C  mpi4py's exact sequence: Improbe (nothing there), Send, Mprobe + Mrecv
 *     of the peer's message, Send with tag 1, spin in Improbe(peer, 1),
 *     Imrecv + Wait, and rank 1 answers with tag 1 only after its own spin.
 * Every spin gives up after 30 s with FAIL (a hang otherwise).
 */
#include "common.h"

#define SPIN_LIMIT 30.0

static const int sizes[] = {0, 4, 4096};
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

enum { IMPROBE, IPROBE, IPROBE_ANY, NMODES };
static const char *mode_name[NMODES] = {"MPI_Improbe(src, tag)",
                                        "MPI_Iprobe(src, tag)",
                                        "MPI_Iprobe(ANY_SOURCE, ANY_TAG)"};

/* Spins in a nonblocking probe until the message (src, tag) is there, then
 * receives it into buf; fails after SPIN_LIMIT seconds. */
static void spin_recv(int mode, int src, int tag, char *buf, int n,
                      const char *what)
{
    MPI_Comm w = MPI_COMM_WORLD;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    int flag = 0, cnt = -1;
    long polls = 0;
    double t0 = now_sec();
    do {
        if (mode == IMPROBE)
            MPI_CHECK(MPI_Improbe(src, tag, w, &flag, &msg, &st));
        else if (mode == IPROBE)
            MPI_CHECK(MPI_Iprobe(src, tag, w, &flag, &st));
        else
            MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, w, &flag, &st));
        polls++;
        CHECK(flag || now_sec() - t0 < SPIN_LIMIT, "%s: %s did not find the "
              "message from rank %d (tag %d, %d bytes) in %.0f s (%ld polls); "
              "the sender's MPI_Send has completed", what, mode_name[mode],
              src, tag, n, SPIN_LIMIT, polls);
    } while (!flag);
    CHECK(st.MPI_SOURCE == src && st.MPI_TAG == tag, "%s: %s found (%d, %d), "
          "expected (%d, %d)", what, mode_name[mode], st.MPI_SOURCE, st.MPI_TAG,
          src, tag);
    if (mode == IMPROBE)
        MPI_CHECK(MPI_Mrecv(buf, n, MPI_BYTE, &msg, &st));
    else
        MPI_CHECK(MPI_Recv(buf, n, MPI_BYTE, src, tag, w, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
    CHECK(cnt == n, "%s: received %d bytes, expected %d", what, cnt, n);
}

static void check_data(const char *buf, int n, uint64_t seed, const char *what)
{
    EXPECT_PATTERN(buf, (size_t)n, seed, "%s", what);
}

/* A and B */
static void case_simple(int mode, int n, int tag)
{
    char what[128];
    char *buf = xmalloc((size_t)n);
    snprintf(what, sizeof(what), "Send %d bytes then %s spin", n,
             mode_name[mode]);
    if (test_rank == 0) {
        fill_pattern(buf, (size_t)n, (uint64_t)tag);
        MPI_CHECK(MPI_Send(buf, n, MPI_BYTE, 1, tag, MPI_COMM_WORLD));
    } else if (test_rank == 1) {
        spin_recv(mode, 0, tag, buf, n, what);
        check_data(buf, n, (uint64_t)tag, what);
    }
    free(buf);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

/* C: test_p2p_buf_matched testProbeRecv, ranks 0 and 1. */
static void case_mpi4py(int n, int round)
{
    MPI_Comm w = MPI_COMM_WORLD;
    char what[128];
    char *sbuf = xmalloc((size_t)n), *rbuf = xmalloc((size_t)n);
    MPI_Message msg;
    MPI_Status st;
    MPI_Request req;
    int flag = 1;
    snprintf(what, sizeof(what), "mpi4py testProbeRecv sequence, %d bytes, "
             "round %d, rank %d", n, round, test_rank);
    fill_pattern(sbuf, (size_t)n, (uint64_t)(1000 + test_rank));
    if (test_rank == 0) {
        MPI_CHECK(MPI_Improbe(0, 0, w, &flag, &msg, &st));
        CHECK(!flag, "%s: Improbe(self, 0) found a message", what);
        MPI_CHECK(MPI_Send(sbuf, n, MPI_BYTE, 1, 0, w));
        MPI_CHECK(MPI_Mprobe(1, 0, w, &msg, &st));
        MPI_CHECK(MPI_Mrecv(rbuf, n, MPI_BYTE, &msg, &st));
        check_data(rbuf, n, 1001, what);
        MPI_CHECK(MPI_Improbe(0, 0, w, &flag, &msg, &st));
        CHECK(!flag, "%s: Improbe(self, 0) found a message", what);
        MPI_CHECK(MPI_Send(sbuf, n, MPI_BYTE, 1, 1, w));
        spin_recv(IMPROBE, 1, 1, rbuf, n, what);
        check_data(rbuf, n, 1001, what);
    } else if (test_rank == 1) {
        MPI_CHECK(MPI_Improbe(1, 0, w, &flag, &msg, &st));
        CHECK(!flag, "%s: Improbe(self, 0) found a message", what);
        MPI_CHECK(MPI_Mprobe(0, 0, w, &msg, &st));
        MPI_CHECK(MPI_Mrecv(rbuf, n, MPI_BYTE, &msg, &st));
        check_data(rbuf, n, 1000, what);
        MPI_CHECK(MPI_Improbe(1, 0, w, &flag, &msg, &st));
        CHECK(!flag, "%s: Improbe(self, 0) found a message", what);
        MPI_CHECK(MPI_Send(sbuf, n, MPI_BYTE, 0, 0, w));
        /* spin in Improbe, then Imrecv + Wait as mpi4py does */
        double t0 = now_sec();
        long polls = 0;
        do {
            MPI_CHECK(MPI_Improbe(0, 1, w, &flag, &msg, &st));
            polls++;
            CHECK(flag || now_sec() - t0 < SPIN_LIMIT, "%s: MPI_Improbe(0, 1) "
                  "did not find rank 0's message (its MPI_Send has completed) "
                  "in %.0f s (%ld polls)", what, SPIN_LIMIT, polls);
        } while (!flag);
        MPI_CHECK(MPI_Imrecv(rbuf, n, MPI_BYTE, &msg, &req));
        MPI_CHECK(MPI_Wait(&req, &st));
        check_data(rbuf, n, 1000, what);
        MPI_CHECK(MPI_Send(sbuf, n, MPI_BYTE, 0, 1, w));
    }
    free(sbuf);
    free(rbuf);
    MPI_CHECK(MPI_Barrier(w));
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "regress_improbe_spin");
    require_np(2);
    int tag = 10;
    for (int m = 0; m < NMODES; m++)
        for (int s = 0; s < NSIZES; s++)
            case_simple(m, sizes[s], tag++);
    for (int round = 0; round < 3; round++)
        for (int s = 0; s < NSIZES; s++)
            case_mpi4py(sizes[s], round);
    return test_finish();
}
