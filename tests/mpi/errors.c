/*
 * errors: error reporting for a failed rendezvous transfer, used with fault
 * injection.
 *
 * Usage: errors expect_error|expect_ok|expect_any
 *
 * Rank 1 sends a rendezvous-size message to rank 0 (MPI_ERRORS_RETURN on
 * both sides).  Run with
 *   --mca mtl_rustofi_fault_inject rma_key --mca mtl_rustofi_rndv_protocol read
 * the RMA read of that transfer fails, and the receive (or the send) must
 * return an MPI error instead of hanging or aborting ("expect_error").
 * Without fault injection the transfer must succeed and the data be intact
 * ("expect_ok").  "expect_any" accepts either outcome (for providers that do
 * not validate RMA keys, such as shm): no hang, and a receive that reports
 * success must hold the right data.
 *
 * In both modes the following traffic must work afterwards: a small message
 * 1 -> 0 carrying the send's return code, a second rendezvous-size message
 * 1 -> 0 (fault injection is one-shot) and a small reply 0 -> 1.  Rank 0
 * only ever sends small messages, so its own injection is never consumed.
 */
#include "common.h"

#define BIG (1 * MIB)

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "errors");
    require_np(2);
    int expect_error; /* 1: error required, 0: success required, -1: any */
    if (argc > 1 && strcmp(argv[1], "expect_error") == 0)
        expect_error = 1;
    else if (argc > 1 && strcmp(argv[1], "expect_ok") == 0)
        expect_error = 0;
    else if (argc > 1 && strcmp(argv[1], "expect_any") == 0)
        expect_error = -1;
    else
        fail("usage: errors expect_error|expect_ok|expect_any");
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

    if (test_rank == 1) {
        uint8_t *buf = xmalloc(BIG);
        MPI_Request req;
        int info[2], reply = 0;
        fill_pattern(buf, BIG, 1);
        int rc = MPI_Isend(buf, BIG, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &req);
        if (rc == MPI_SUCCESS)
            rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            printf("INFO errors: rank 1 send returned %s\n", mpi_err_str(rc));
        info[0] = rc;
        info[1] = rc == MPI_SUCCESS ? MPI_SUCCESS : mpi_err_class(rc);
        MPI_CHECK(MPI_Send(info, 2, MPI_INT, 0, 2, MPI_COMM_WORLD));
        fill_pattern(buf, BIG, 3);
        MPI_CHECK(MPI_Send(buf, BIG, MPI_BYTE, 0, 3, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Recv(&reply, 1, MPI_INT, 0, 4, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
        CHECK(reply == 4242, "reply from rank 0 is %d", reply);
        free(buf);
    } else if (test_rank == 0) {
        uint8_t *buf = xmalloc(BIG);
        MPI_Status st;
        int info[2] = {-1, -1}, count, reply = 4242;
        memset(buf, 0, BIG);
        int rrc = MPI_Recv(buf, BIG, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &st);
        if (rrc != MPI_SUCCESS)
            printf("INFO errors: rank 0 receive returned %s\n",
                   mpi_err_str(rrc));
        if (expect_error == 0)
            CHECK(rrc == MPI_SUCCESS, "receive returned %s", mpi_err_str(rrc));
        if (rrc == MPI_SUCCESS) {
            /* A receive that reports success must have the right data. */
            MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
            CHECK(count == BIG, "count %d, expected %d", count, BIG);
            EXPECT_PATTERN(buf, BIG, 1, "first rendezvous message (receive "
                           "reported success)");
        }

        /* Follow-up traffic must work in both modes. */
        MPI_CHECK(MPI_Recv(info, 2, MPI_INT, 1, 2, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 2, "small follow-up message: count %d", count);
        memset(buf, 0, BIG);
        MPI_CHECK(MPI_Recv(buf, BIG, MPI_BYTE, 1, 3, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK(count == BIG, "second rendezvous message: count %d", count);
        EXPECT_PATTERN(buf, BIG, 3, "second rendezvous message");
        MPI_CHECK(MPI_Send(&reply, 1, MPI_INT, 1, 4, MPI_COMM_WORLD));

        int src = info[0];
        if (expect_error == 1) {
            CHECK(rrc != MPI_SUCCESS || src != MPI_SUCCESS,
                  "fault injection active but neither the receive nor the "
                  "send reported an error (the corrupted transfer completed "
                  "silently)");
            printf("INFO errors: error reported (receive rc=%d, send rc=%d)\n",
                   rrc, src);
        } else if (expect_error == 0) {
            CHECK(src == MPI_SUCCESS, "send on rank 1 returned rc=%d (class "
                  "%d)", src, info[1]);
        } else {
            printf("INFO errors: receive rc=%d, send rc=%d\n", rrc, src);
        }
        free(buf);
    }
    return test_finish();
}
