/*
 * huge: one message of INT_MAX (2 GiB - 1) MPI_BYTEs from rank 1 to rank 0,
 * or, with an argument B (a multiple of 3), one message of B bytes as
 * B / 3 elements of a 3-byte contiguous type: beyond 4 GiB, lengths that
 * fit no 32-bit field and end off a page boundary.
 *
 * The sender fills the buffer with the pattern and sends its checksum in a
 * separate message.  The receiver checks the count (and, for B, the bytes
 * through MPI_Get_elements_x), 1M pseudo-random sample positions plus the
 * first and last 64 KiB against the pattern, and the checksum of the whole
 * buffer.  Needs about 2 GiB (or B bytes) of memory per rank.
 */
#include "common.h"

#define SEED 0x4855474555ULL
#define NSAMPLES (1 << 20)
#define EDGE (64 * 1024)

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "huge");
    require_np(2);
    int count = INT_MAX;
    size_t n = (size_t)count;
    MPI_Datatype type = MPI_BYTE;
    if (argc > 1) {
        unsigned long long b = strtoull(argv[1], NULL, 0);
        CHECK(b > 0 && b % 3 == 0 && b / 3 <= INT_MAX,
              "the size %s is not a positive multiple of 3 below 6 GiB", argv[1]);
        n = (size_t)b;
        count = (int)(b / 3);
        MPI_CHECK(MPI_Type_contiguous(3, MPI_BYTE, &type));
        MPI_CHECK(MPI_Type_commit(&type));
    }

    if (test_rank == 1) {
        uint8_t *buf = malloc(n);
        CHECK(buf != NULL, "malloc(%zu) failed on the sender", n);
        fill_pattern(buf, n, SEED);
        uint64_t sum = checksum64(buf, n);
        MPI_CHECK(MPI_Send(&sum, 1, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(buf, count, type, 0, 2, MPI_COMM_WORLD));
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
        MPI_CHECK(MPI_Recv(buf, count, type, 1, 2, MPI_COMM_WORLD, &st));
        double dt = now_sec() - t0;
        MPI_CHECK(MPI_Get_count(&st, type, &got));
        CHECK(got == count, "count %d, expected %d", got, count);
        MPI_Count bytes;
        MPI_CHECK(MPI_Get_elements_x(&st, MPI_BYTE, &bytes));
        CHECK((size_t)bytes == n, "%lld bytes received, expected %zu",
              (long long)bytes, n);
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
        printf("INFO huge: %zu bytes in %.2f s (%.0f MB/s)\n", n, dt,
               n / dt / 1e6);
        free(buf);
    }
    if (type != MPI_BYTE) {
        MPI_CHECK(MPI_Type_free(&type));
    }
    return test_finish();
}
