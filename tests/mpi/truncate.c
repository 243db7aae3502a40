/*
 * truncate: a message longer than the receive buffer is an MPI_ERR_TRUNCATE
 * error at the receiver, no byte outside the receive buffer is written, the
 * sender completes normally and the connection keeps working.
 *
 * Cases (send size -> receive size):
 *   1000    -> 100      eager
 *   1 MiB   -> 1000     rendezvous, receive buffer below the eager limit
 *   300000  -> 100000   rendezvous into a rendezvous-size buffer
 *   10      -> 0        zero-byte receive
 *   1 MiB   -> 0        rendezvous into a zero-byte receive (a grant of
 *                       nothing under the message rendezvous)
 * each with MPI_Recv, and the first two also with Irecv+Wait and
 * Irecv+Waitall.  The return code must be of class MPI_ERR_TRUNCATE
 * (MPI_ERR_IN_STATUS for Waitall); status.MPI_ERROR must be MPI_ERR_TRUNCATE
 * for Waitall and either untouched or MPI_ERR_TRUNCATE for Recv/Wait.  The
 * receive buffer sits inside a larger allocation with guard bytes on both
 * sides.  After every truncated message, rank 1 sends a normal message
 * (alternately eager and rendezvous
 * size) that must arrive intact.
 */
#include "common.h"

#define GUARD 4096
#define GUARD_BYTE 0xA5
#define STATUS_SENTINEL 0x5eadbeef

enum { USE_RECV, USE_WAIT, USE_WAITALL };

struct tcase {
    int send_size;
    int recv_size;
    int how;
};

static const struct tcase cases[] = {
    {1000, 100, USE_RECV},
    {1 * MIB, 1000, USE_RECV},
    {300000, 100000, USE_RECV},
    {10, 0, USE_RECV},
    {1 * MIB, 0, USE_RECV},
    {1000, 100, USE_WAIT},
    {1 * MIB, 1000, USE_WAIT},
    {1000, 100, USE_WAITALL},
    {1 * MIB, 1000, USE_WAITALL},
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

static const char *how_name[] = {"MPI_Recv", "Irecv+Wait", "Irecv+Waitall"};

static int follow_size(int c) { return (c % 2) ? 200000 : 1000; }

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "truncate");
    require_np(2);
    /* test_init already set MPI_ERRORS_RETURN on MPI_COMM_WORLD. */

    for (int c = 0; c < NCASES; c++) {
        const struct tcase *tc = &cases[c];
        int tag = 100 + c, ftag = 200 + c, fsize = follow_size(c);
        if (test_rank == 1) {
            uint8_t *sbuf = xmalloc(tc->send_size);
            uint8_t *fbuf = xmalloc(fsize);
            fill_pattern(sbuf, tc->send_size, 77 + c);
            fill_pattern(fbuf, fsize, 500 + c);
            int rc = MPI_Send(sbuf, tc->send_size, MPI_BYTE, 0, tag,
                              MPI_COMM_WORLD);
            CHECK(rc == MPI_SUCCESS,
                  "case %d: sender of the truncated message got %s "
                  "(truncation is a receive-side error)",
                  c, mpi_err_str(rc));
            MPI_CHECK(MPI_Send(fbuf, fsize, MPI_BYTE, 0, ftag, MPI_COMM_WORLD));
            free(sbuf);
            free(fbuf);
        } else if (test_rank == 0) {
            size_t alloc = (size_t)GUARD + tc->recv_size + GUARD;
            uint8_t *area = xmalloc(alloc);
            uint8_t *rbuf = area + GUARD;
            MPI_Status st;
            int rc, cls;
            memset(area, GUARD_BYTE, alloc);
            memset(&st, 0, sizeof(st));
            st.MPI_ERROR = STATUS_SENTINEL;
            char what[128];
            snprintf(what, sizeof(what), "case %d (%d bytes into %d, %s)", c,
                     tc->send_size, tc->recv_size, how_name[tc->how]);

            if (tc->how == USE_RECV) {
                rc = MPI_Recv(rbuf, tc->recv_size, MPI_BYTE, 1, tag,
                              MPI_COMM_WORLD, &st);
                CHECK(rc != MPI_SUCCESS, "%s: receive succeeded, expected "
                      "MPI_ERR_TRUNCATE", what);
                cls = mpi_err_class(rc);
                CHECK(cls == MPI_ERR_TRUNCATE,
                      "%s: return code %s, expected class MPI_ERR_TRUNCATE "
                      "(%d)", what, mpi_err_str(rc), MPI_ERR_TRUNCATE);
            } else {
                MPI_Request req;
                MPI_CHECK(MPI_Irecv(rbuf, tc->recv_size, MPI_BYTE, 1, tag,
                                    MPI_COMM_WORLD, &req));
                if (tc->how == USE_WAIT) {
                    rc = MPI_Wait(&req, &st);
                    CHECK(mpi_err_class(rc) == MPI_ERR_TRUNCATE,
                          "%s: MPI_Wait returned %s, expected "
                          "MPI_ERR_TRUNCATE", what, mpi_err_str(rc));
                } else {
                    rc = MPI_Waitall(1, &req, &st);
                    CHECK(mpi_err_class(rc) == MPI_ERR_IN_STATUS,
                          "%s: MPI_Waitall returned %s, expected "
                          "MPI_ERR_IN_STATUS", what, mpi_err_str(rc));
                }
            }
            /* MPI-3.1 section 3.2.5: single-completion calls leave
             * status.MPI_ERROR alone (Open MPI follows this); the
             * multiple-completion calls must set it.  Either way it must
             * never claim anything but truncation. */
            if (tc->how == USE_WAITALL || st.MPI_ERROR != STATUS_SENTINEL)
                CHECK(mpi_err_class(st.MPI_ERROR) == MPI_ERR_TRUNCATE,
                      "%s: status.MPI_ERROR is %s, expected MPI_ERR_TRUNCATE",
                      what, st.MPI_ERROR == STATUS_SENTINEL
                                ? "unset" : mpi_err_str(st.MPI_ERROR));
            CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == tag,
                  "%s: status source %d tag %d, expected 1/%d", what,
                  st.MPI_SOURCE, st.MPI_TAG, tag);
            size_t bad = check_fill(area, GUARD, GUARD_BYTE);
            CHECK(bad == (size_t)-1,
                  "%s: guard byte %zu before the receive buffer modified",
                  what, GUARD - bad);
            bad = check_fill(rbuf + tc->recv_size, GUARD, GUARD_BYTE);
            CHECK(bad == (size_t)-1,
                  "%s: byte %zu past the end of the receive buffer modified "
                  "(0x%02x)", what, bad, rbuf[tc->recv_size + bad]);
            free(area);

            /* The next message on the same connection must be intact. */
            uint8_t *fbuf = xmalloc(fsize);
            int count;
            MPI_CHECK(MPI_Recv(fbuf, fsize, MPI_BYTE, 1, ftag, MPI_COMM_WORLD,
                               &st));
            MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
            CHECK(count == fsize, "%s: follow-up message count %d, expected "
                  "%d", what, count, fsize);
            EXPECT_PATTERN(fbuf, (size_t)fsize, 500 + c,
                           "%s: follow-up message", what);
            free(fbuf);
        }
    }
    return test_finish();
}
