/*
 * regress_tx_depth: many more eager messages in flight to one peer than the
 * provider's transmit queue holds.
 *
 * udp;ofi_rxd (tx_attr->size 1024) accepts sends beyond its queue depth
 * without returning EAGAIN and then never delivers them: rank 1 received
 * exactly 1024 of rank 0's messages and hung. The MTL must bound its own
 * in-flight transmit operations by the provider's queue depth.
 *
 * Rank 0 sends NMSG eager messages (each carrying its index) with MPI_Send
 * (copied: complete once the provider takes them) while rank 1 sleeps, then rank 1 receives them all in
 * order and checks every index. Ranks beyond 2 only join the barrier.
 */
#include "common.h"

#define NMSG 3000
#define LEN 100

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "regress_tx_depth");
    require_np(2);
    int buf[LEN / sizeof(int)];
    if (test_rank == 0) {
        for (int i = 0; i < NMSG; i++) {
            buf[0] = i;
            MPI_CHECK(MPI_Send(buf, LEN, MPI_BYTE, 1, 7, MPI_COMM_WORLD));
        }
    } else if (test_rank == 1) {
        sleep_ms(1000);
        double start = now_sec();
        for (int i = 0; i < NMSG; i++) {
            MPI_Status st;
            MPI_CHECK(MPI_Recv(buf, LEN, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &st));
            CHECK(buf[0] == i, "message %d carries index %d", i, buf[0]);
            CHECK(now_sec() - start < 60, "only %d of %d messages in 60 s", i, NMSG);
        }
    }
    return test_finish();
}
