/*
 * probe_cancel: Iprobe, Probe, Mprobe/Mrecv, Improbe/Imrecv and MPI_Cancel.
 *
 * Phases (separated by barriers on a dup'ed communicator; only ranks 0 and 1
 * exchange messages):
 *  A  Iprobe(ANY_SOURCE, ANY_TAG) polled until a 1000-byte eager message
 *     (below every provider's default eager limit; udp's is 1 KiB) shows
 *     up (source/tag/count checked, a second Iprobe still sees it), then
 *     Iprobe(1, 17) for a rendezvous-size message, then both are received.
 *  B  Probe(1, ANY_TAG) of 4000 MPI_INTs: Get_count in MPI_INT and MPI_BYTE,
 *     and Test_cancelled false on the probe's status (set true before).
 *  C  Mprobe(ANY_SOURCE, 9) of a rendezvous-size message followed by a small
 *     message with the same tag: after the Mprobe, Recv(1, 9) must get the
 *     small one (the probed message is out of the matching queue); then
 *     Mrecv gets the big one.  Repeated with MPI_ANY_TAG.
 *  D  Improbe(ANY_SOURCE, ANY_TAG) polled, Imrecv + Wait, for an eager and a
 *     rendezvous-size message.
 *  E  Irecvs that never match (specific source and ANY_SOURCE) are
 *     cancelled: Test_cancelled is true, and messages with those tags sent
 *     afterwards are received by new receives.  A receive that already
 *     completed is "cancelled": Test_cancelled is false and the data is there.
 */
#include "common.h"

#define POLL_TIMEOUT 20.0

static MPI_Comm sync_comm;

static void phase_end(void) { MPI_CHECK(MPI_Barrier(sync_comm)); }

static void send_pattern(int size, int tag, uint64_t seed)
{
    uint8_t *b = xmalloc(size);
    fill_pattern(b, size, seed);
    MPI_CHECK(MPI_Send(b, size, MPI_BYTE, 0, tag, MPI_COMM_WORLD));
    free(b);
}

static uint8_t *isend_pattern(int size, int tag, uint64_t seed,
                              MPI_Request *req)
{
    uint8_t *b = xmalloc(size);
    fill_pattern(b, size, seed);
    MPI_CHECK(MPI_Isend(b, size, MPI_BYTE, 0, tag, MPI_COMM_WORLD, req));
    return b;
}

static void check_status(const MPI_Status *st, int src, int tag, int count,
                         const char *what)
{
    int c;
    CHECK(st->MPI_SOURCE == src, "%s: MPI_SOURCE %d, expected %d", what,
          st->MPI_SOURCE, src);
    CHECK(st->MPI_TAG == tag, "%s: MPI_TAG %d, expected %d", what, st->MPI_TAG,
          tag);
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &c));
    CHECK(c == count, "%s: MPI_Get_count %d, expected %d", what, c, count);
}

/* A value of MPI_ERROR the probes must leave as it is: calls that return
 * one status do not set that field (MPI 4.0, 3.2.5). */
#define CALLERS_ERROR 777

static void check_error_kept(const MPI_Status *st, const char *what)
{
    CHECK(st->MPI_ERROR == CALLERS_ERROR,
          "%s: MPI_ERROR is %d: the caller's %d was overwritten", what,
          st->MPI_ERROR, CALLERS_ERROR);
}

static void recv_pattern(int src, int tag, int size, uint64_t seed,
                         const char *what)
{
    uint8_t *b = xmalloc(size);
    MPI_Status st;
    MPI_CHECK(MPI_Recv(b, size, MPI_BYTE, src, tag, MPI_COMM_WORLD, &st));
    check_status(&st, 1, tag, size, what);
    EXPECT_PATTERN(b, (size_t)size, seed, "%s", what);
    free(b);
}

static void poll_iprobe(int src, int tag, MPI_Status *st, const char *what)
{
    int flag = 0;
    double t0 = now_sec();
    while (!flag) {
        MPI_CHECK(MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, st));
        CHECK(flag || now_sec() - t0 < POLL_TIMEOUT,
              "%s: message not found by Iprobe within %.0f s", what,
              POLL_TIMEOUT);
    }
}

static void phase_a(void)
{
    if (test_rank == 1) {
        send_pattern(1000, 7, 7);
        send_pattern(RNDV_SIZE, 17, 17); /* blocks until rank 0 receives */
    } else if (test_rank == 0) {
        MPI_Status st;
        st.MPI_ERROR = CALLERS_ERROR;
        poll_iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, &st, "Iprobe(ANY,ANY)");
        check_status(&st, 1, 7, 1000, "Iprobe(ANY,ANY)");
        check_error_kept(&st, "Iprobe(ANY,ANY)");
        int flag = 0;
        MPI_CHECK(MPI_Iprobe(1, 7, MPI_COMM_WORLD, &flag, &st));
        CHECK(flag, "second Iprobe(1,7) no longer sees the probed message");
        check_status(&st, 1, 7, 1000, "second Iprobe(1,7)");
        poll_iprobe(1, 17, &st, "Iprobe(1,17)");
        check_status(&st, 1, 17, RNDV_SIZE, "Iprobe(1,17) rendezvous");
        recv_pattern(1, 7, 1000, 7, "Iprobe'd eager message");
        recv_pattern(1, 17, RNDV_SIZE, 17, "Iprobe'd rendezvous message");
    }
    phase_end();
}

static void phase_b(void)
{
    if (test_rank == 1) {
        int *v = xmalloc(4000 * sizeof(int));
        for (int i = 0; i < 4000; i++)
            v[i] = i * 3 + 1;
        MPI_CHECK(MPI_Send(v, 4000, MPI_INT, 0, 8, MPI_COMM_WORLD));
        free(v);
    } else if (test_rank == 0) {
        MPI_Status st;
        int n, nb, cancelled;
        /* A status that says "cancelled" before the probe must not
         * after it: a probed message is never a cancelled one. */
        MPI_CHECK(MPI_Status_set_cancelled(&st, 1));
        st.MPI_ERROR = CALLERS_ERROR;
        MPI_CHECK(MPI_Probe(1, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        check_error_kept(&st, "Probe");
        CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 8,
              "Probe: source %d tag %d, expected 1/8", st.MPI_SOURCE,
              st.MPI_TAG);
        MPI_CHECK(MPI_Test_cancelled(&st, &cancelled));
        CHECK(!cancelled, "Probe: MPI_Test_cancelled is true on a probe's status");
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &nb));
        CHECK(n == 4000 && nb == 16000,
              "Probe: Get_count %d MPI_INT / %d MPI_BYTE, expected 4000/16000",
              n, nb);
        int *v = xmalloc(n * sizeof(int));
        MPI_CHECK(MPI_Recv(v, n, MPI_INT, st.MPI_SOURCE, st.MPI_TAG,
                           MPI_COMM_WORLD, &st));
        for (int i = 0; i < 4000; i++)
            CHECK(v[i] == i * 3 + 1, "Probe'd message: element %d is %d", i,
                  v[i]);
        free(v);
    }
    phase_end();
}

static void phase_c(void)
{
    for (int round = 0; round < 2; round++) {
        int probe_tag = round == 0 ? 9 : MPI_ANY_TAG;
        if (test_rank == 1) {
            MPI_Request req[2];
            uint8_t *b0 = isend_pattern(RNDV_SIZE, 9, 90 + round, &req[0]);
            uint8_t *b1 = isend_pattern(100, 9, 95 + round, &req[1]);
            MPI_CHECK(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));
            free(b0);
            free(b1);
        } else if (test_rank == 0) {
            MPI_Message msg;
            MPI_Status st;
            st.MPI_ERROR = CALLERS_ERROR;
            MPI_CHECK(MPI_Mprobe(MPI_ANY_SOURCE, probe_tag, MPI_COMM_WORLD,
                                 &msg, &st));
            check_status(&st, 1, 9, RNDV_SIZE, "Mprobe");
            check_error_kept(&st, "Mprobe");
            CHECK(msg != MPI_MESSAGE_NULL, "Mprobe returned MPI_MESSAGE_NULL");
            /* The matched message is no longer visible to receives. */
            recv_pattern(1, 9, 100, 95 + round,
                         "Recv after Mprobe (must get the second message)");
            uint8_t *b = xmalloc(RNDV_SIZE);
            MPI_CHECK(MPI_Mrecv(b, RNDV_SIZE, MPI_BYTE, &msg, &st));
            CHECK(msg == MPI_MESSAGE_NULL, "Mrecv did not reset the handle");
            check_status(&st, 1, 9, RNDV_SIZE, "Mrecv");
            EXPECT_PATTERN(b, RNDV_SIZE, 90 + round, "Mrecv'd message");
            free(b);
        }
        phase_end();
    }
}

static void phase_d(void)
{
    static const int sizes[2] = {5000, RNDV_SIZE + 12345};
    for (int i = 0; i < 2; i++) {
        int tag = 12 + i;
        if (test_rank == 1) {
            send_pattern(sizes[i], tag, 120 + i);
        } else if (test_rank == 0) {
            MPI_Message msg = MPI_MESSAGE_NULL;
            MPI_Status st;
            MPI_Request req;
            int flag = 0;
            double t0 = now_sec();
            st.MPI_ERROR = CALLERS_ERROR;
            while (!flag) {
                MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG,
                                      MPI_COMM_WORLD, &flag, &msg, &st));
                CHECK(flag || now_sec() - t0 < POLL_TIMEOUT,
                      "Improbe: no message within %.0f s", POLL_TIMEOUT);
            }
            check_status(&st, 1, tag, sizes[i], "Improbe");
            check_error_kept(&st, "Improbe");
            uint8_t *b = xmalloc(sizes[i]);
            MPI_CHECK(MPI_Imrecv(b, sizes[i], MPI_BYTE, &msg, &req));
            MPI_CHECK(MPI_Wait(&req, &st));
            check_status(&st, 1, tag, sizes[i], "Imrecv");
            EXPECT_PATTERN(b, (size_t)sizes[i], 120 + i, "Imrecv'd message");
            free(b);
        }
        phase_end();
    }
}

static void phase_e(void)
{
    /* Receives that never match, cancelled. */
    if (test_rank == 0) {
        MPI_Request req[2];
        MPI_Status st;
        uint8_t *b0 = xmalloc(RNDV_SIZE), *b1 = xmalloc(64);
        MPI_CHECK(MPI_Irecv(b0, RNDV_SIZE, MPI_BYTE, 1, 999, MPI_COMM_WORLD,
                            &req[0]));
        MPI_CHECK(MPI_Irecv(b1, 64, MPI_BYTE, MPI_ANY_SOURCE, 998,
                            MPI_COMM_WORLD, &req[1]));
        for (int i = 0; i < 2; i++) {
            int cancelled = 0;
            MPI_CHECK(MPI_Cancel(&req[i]));
            MPI_CHECK(MPI_Wait(&req[i], &st));
            MPI_CHECK(MPI_Test_cancelled(&st, &cancelled));
            CHECK(cancelled, "unmatched Irecv #%d: MPI_Test_cancelled is "
                  "false after MPI_Cancel", i);
        }
        free(b0);
        free(b1);
    }
    phase_end();
    /* Messages with the cancelled tags must reach new receives. */
    if (test_rank == 1) {
        send_pattern(64, 998, 998);
        send_pattern(RNDV_SIZE, 999, 999);
    } else if (test_rank == 0) {
        recv_pattern(1, 998, 64, 998, "message after cancelled ANY_SOURCE recv");
        recv_pattern(1, 999, RNDV_SIZE, 999, "message after cancelled recv");
    }
    phase_end();

    /* A persistent receive: cancelled once started (Open MPI marks a
     * persistent request complete while it is not started, which the
     * component's cancel must not take for "complete already"), then
     * started again for a message that arrives. */
    if (test_rank == 0) {
        MPI_Request req;
        MPI_Status st;
        int cancelled = 0;
        uint8_t *b = xmalloc(64);
        MPI_CHECK(MPI_Recv_init(b, 64, MPI_BYTE, 1, 997, MPI_COMM_WORLD, &req));
        MPI_CHECK(MPI_Start(&req));
        MPI_CHECK(MPI_Cancel(&req));
        MPI_CHECK(MPI_Wait(&req, &st));
        MPI_CHECK(MPI_Test_cancelled(&st, &cancelled));
        CHECK(cancelled, "started persistent receive: MPI_Test_cancelled is "
              "false after MPI_Cancel");
        MPI_CHECK(MPI_Start(&req));
        MPI_CHECK(MPI_Barrier(sync_comm)); /* rank 1 sends now */
        MPI_CHECK(MPI_Wait(&req, &st));
        MPI_CHECK(MPI_Test_cancelled(&st, &cancelled));
        CHECK(!cancelled, "persistent receive started again: reported as "
              "cancelled");
        check_status(&st, 1, 997, 64, "persistent receive started again");
        EXPECT_PATTERN(b, 64, 997, "persistent receive started again");
        MPI_CHECK(MPI_Request_free(&req));
        free(b);
    } else if (test_rank == 1) {
        MPI_CHECK(MPI_Barrier(sync_comm));
        send_pattern(64, 997, 997);
    } else {
        MPI_CHECK(MPI_Barrier(sync_comm));
    }
    phase_end();

    /* Cancel of a receive that has already completed. */
    static const int sizes[2] = {64, RNDV_SIZE};
    for (int i = 0; i < 2; i++) {
        if (test_rank == 1) {
            send_pattern(sizes[i], 11, 1100 + i);
        } else if (test_rank == 0) {
            MPI_Request req;
            MPI_Status st;
            int flag = 0, cancelled = 1;
            uint8_t *b = xmalloc(sizes[i]);
            MPI_CHECK(MPI_Irecv(b, sizes[i], MPI_BYTE, MPI_ANY_SOURCE, 11,
                                MPI_COMM_WORLD, &req));
            double t0 = now_sec();
            while (!flag) {
                MPI_CHECK(MPI_Request_get_status(req, &flag, &st));
                CHECK(flag || now_sec() - t0 < POLL_TIMEOUT,
                      "receive did not complete within %.0f s", POLL_TIMEOUT);
            }
            MPI_CHECK(MPI_Cancel(&req));
            MPI_CHECK(MPI_Wait(&req, &st));
            MPI_CHECK(MPI_Test_cancelled(&st, &cancelled));
            CHECK(!cancelled, "completed receive (%d bytes) reported as "
                  "cancelled", sizes[i]);
            check_status(&st, 1, 11, sizes[i], "completed-then-cancelled recv");
            EXPECT_PATTERN(b, (size_t)sizes[i], 1100 + i,
                           "completed-then-cancelled recv");
            free(b);
        }
        phase_end();
    }
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "probe_cancel");
    require_np(2);
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &sync_comm));
    phase_a();
    phase_b();
    phase_c();
    phase_d();
    phase_e();
    MPI_CHECK(MPI_Comm_free(&sync_comm));
    return test_finish();
}
