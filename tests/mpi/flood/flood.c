/*
 * flood: many small blocking sends to a receiver that is busy outside MPI.
 *
 *   flood [count] [bytes] [sleep_ms]      (defaults 300000 8 5000)
 *
 * Rank 0 sends `count` messages of `bytes` bytes to rank 1 with MPI_Send,
 * each carrying its index in its first 8 bytes (and a pattern derived from
 * it in the rest), while rank 1 sleeps `sleep_ms` outside MPI; rank 1 then
 * receives them all and checks every index and byte, in order. Both ranks
 * end with a barrier and print their peak and current resident set size
 * (VmHWM and VmRSS of /proc/self/status, in KiB) and the peak of their
 * malloc heap in use, sampled every 4096 messages and at the end
 * (mallinfo2: small and mmapped blocks, every arena), as
 * `RSS rank=R hwm_kib=N rss_kib=M heap_peak_kib=H`; rank 0 prints
 * `PASS flood`. Ranks beyond 2 only join the barrier (and print their RSS).
 *
 * The heap holds what Open MPI, libfabric and the component allocate with
 * malloc: the component's unexpected queue, send bounce buffers and
 * bookkeeping, which grow with a flood. What is mapped instead is in the
 * resident set only: the component's receive buffers and shared-memory
 * rings (fixed in size), and libfabric's buffer pools (rxd's grows with a
 * flood over udp). Without glibc's mallinfo2 (glibc before 2.33) the heap
 * is not measured and the line carries no heap_peak_kib.
 */
#include "../common.h"
#if defined(__GLIBC__)
#include <malloc.h>
#if __GLIBC_PREREQ(2, 33)
#define FLOOD_HEAP 1
#endif
#endif

/* A field of /proc/self/status in KiB ("VmHWM", "VmRSS"), -1 if absent. */
static long status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256], fmt[64];
    long kib = -1;
    if (!f)
        return -1;
    snprintf(fmt, sizeof fmt, "%s: %%ld kB", field);
    while (fgets(line, sizeof line, f))
        if (sscanf(line, fmt, &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* The peak of the malloc heap in use seen so far, in KiB. */
#ifdef FLOOD_HEAP
static long heap_peak_kib;
#endif

static void sample_heap(void)
{
#ifdef FLOOD_HEAP
    struct mallinfo2 m = mallinfo2();
    long kib = (long)((m.uordblks + m.hblkhd) / 1024);
    if (kib > heap_peak_kib)
        heap_peak_kib = kib;
#endif
}

static void fill(unsigned char *buf, size_t n, uint64_t i)
{
    memcpy(buf, &i, n < 8 ? n : 8);
    for (size_t k = 8; k < n; k++)
        buf[k] = (unsigned char)(i * 31 + k);
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "flood");
    require_np(2);
    long count = argc > 1 ? atol(argv[1]) : 300000;
    long bytes = argc > 2 ? atol(argv[2]) : 8;
    int pause = argc > 3 ? atoi(argv[3]) : 5000;
    CHECK(count > 0 && bytes >= 8 && pause >= 0, "bad arguments");
    unsigned char *buf = xmalloc((size_t)bytes);
    unsigned char *want = xmalloc((size_t)bytes);
    double t0 = now_sec();
    if (test_rank == 0) {
        for (long i = 0; i < count; i++) {
            fill(buf, (size_t)bytes, (uint64_t)i);
            if ((i & 4095) == 0)
                sample_heap();
            MPI_CHECK(MPI_Send(buf, (int)bytes, MPI_BYTE, 1, 3, MPI_COMM_WORLD));
        }
        printf("SENT count=%ld bytes=%ld secs=%.2f\n", count, bytes, now_sec() - t0);
    } else if (test_rank == 1) {
        sleep_ms(pause);
        for (long i = 0; i < count; i++) {
            MPI_Status st;
            int n = -1;
            MPI_CHECK(MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 3, MPI_COMM_WORLD, &st));
            if ((i & 4095) == 0)
                sample_heap();
            MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
            CHECK(n == bytes, "message %ld has %d bytes, expected %ld", i, n, bytes);
            fill(want, (size_t)bytes, (uint64_t)i);
            if (memcmp(buf, want, (size_t)bytes) != 0) {
                uint64_t got;
                memcpy(&got, buf, 8);
                fail("message %ld out of order or damaged (carries index %llu)", i,
                     (unsigned long long)got);
            }
        }
        printf("RECEIVED count=%ld secs=%.2f\n", count, now_sec() - t0);
    }
    sample_heap();
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    printf("RSS rank=%d hwm_kib=%ld rss_kib=%ld", test_rank, status_kib("VmHWM"),
           status_kib("VmRSS"));
#ifdef FLOOD_HEAP
    printf(" heap_peak_kib=%ld", heap_peak_kib);
#endif
    printf("\n");
    fflush(stdout);
    free(buf);
    free(want);
    return test_finish();
}
