/*
 * huge: one message of INT_MAX (2 GiB - 1) MPI_BYTEs from rank 1 to rank 0.
 *
 * The sender fills the buffer with the pattern and sends its checksum in a
 * separate message.  The receiver checks the count, 1M pseudo-random sample
 * positions plus the first and last 64 KiB against the pattern, and the
 * checksum of the whole buffer.  Needs about 2 GiB of memory per rank.
 */
#include "common.h"

#define SEED 0x4855474555ULL
#define NSAMPLES (1 << 20)
#define EDGE (64 * 1024)

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "huge");
    require_np(2);
    const int count = INT_MAX;
    const size_t n = (size_t)count;

    if (test_rank == 1) {
        uint8_t *buf = malloc(n);
        CHECK(buf != NULL, "malloc(%zu) failed on the sender", n);
        fill_pattern(buf, n, SEED);
        uint64_t sum = checksum64(buf, n);
        MPI_CHECK(MPI_Send(&sum, 1, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(buf, count, MPI_BYTE, 0, 2, MPI_COMM_WORLD));
        free(buf);
    } else if (test_rank == 0) {
        uint8_t *buf = malloc(n);
        CHECK(buf != NULL, "malloc(%zu) failed on the receiver", n);
        uint64_t sum;
        MPI_Status st;
        int got;
        memset(buf, 0, n);
        MPI_CHECK(MPI_Recv(&sum, 1, MPI_UINT64_T, 1, 1, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
        double t0 = now_sec();
        MPI_CHECK(MPI_Recv(buf, count, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &st));
        double dt = now_sec() - t0;
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &got));
        CHECK(got == count, "count %d, expected %d", got, count);
        CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 2, "status source %d tag %d",
              st.MPI_SOURCE, st.MPI_TAG);
        /* sampling */
        for (size_t i = 0; i < EDGE; i++) {
            CHECK(buf[i] == pattern_byte(SEED, i), "byte %zu is 0x%02x, "
                  "expected 0x%02x", i, buf[i], pattern_byte(SEED, i));
            size_t j = n - 1 - i;
            CHECK(buf[j] == pattern_byte(SEED, j), "byte %zu is 0x%02x, "
                  "expected 0x%02x", j, buf[j], pattern_byte(SEED, j));
        }
        for (uint64_t k = 0; k < NSAMPLES; k++) {
            size_t i = (size_t)(splitmix64(k) % n);
            CHECK(buf[i] == pattern_byte(SEED, i), "sampled byte %zu is 0x%02x,"
                  " expected 0x%02x", i, buf[i], pattern_byte(SEED, i));
        }
        /* full checksum */
        uint64_t mine = checksum64(buf, n);
        if (mine != sum) {
            size_t bad = check_pattern(buf, n, SEED);
            fail("checksum mismatch (got %016llx, sender %016llx); first bad "
                 "byte at %zd", (unsigned long long)mine,
                 (unsigned long long)sum, (ssize_t)bad);
        }
        printf("INFO huge: %d bytes in %.2f s (%.0f MB/s)\n", count, dt,
               count / dt / 1e6);
        free(buf);
    }
    return test_finish();
}
