/*
 * Registration cache, seen from an MPI program (np 2; rank 0 sends, rank 1
 * receives and checks every byte).
 *
 * Phase "reuse": REUSE_SENDS rendezvous of 4 MiB from one buffer.
 * Phase "remap": REMAPS times, a 4 MiB anonymous mapping is sent twice,
 * unmapped, and mapped again at the same address (MAP_FIXED) with new
 * contents; the cache must not serve the old registration to the new
 * mapping. Phase "free": the same with free() and malloc() of a large
 * block (glibc returns such a block to the system with munmap).
 *
 * The program checks the data; tests/mrcache.sh checks the registrations
 * in rank 0's counter line (mr_reg, mr_hits) against the counts printed
 * here ("EXPECT ...").
 */
#include "../common.h"
#include <malloc.h>
#include <sys/mman.h>

#define LEN (4 * MIB)
#define REUSE_SENDS 200
#define REMAPS 6
#define FREES 4

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i += 4096) {
        memset(b + i, (int) ((seed * 131 + i / 4096) & 0xff), n - i < 4096 ? n - i : 4096);
    }
    memcpy(b, &seed, sizeof(seed));
}

static void check(const unsigned char *b, size_t n, unsigned seed, const char *what)
{
    unsigned got;
    memcpy(&got, b, sizeof(got));
    if (got != seed) {
        fail("%s: message %u arrived as %u", what, seed, got);
    }
    for (size_t i = 4096; i < n; i += 4096) {
        if (b[i] != (unsigned char) ((seed * 131 + i / 4096) & 0xff)
            || b[n < i + 4095 ? n - 1 : i + 4095] != b[i]) {
            fail("%s: message %u: wrong byte at offset %zu", what, seed, i);
        }
    }
}

static void *map_at(void *want)
{
    void *p = mmap(want, LEN, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (want ? MAP_FIXED : 0), -1, 0);
    if (p == MAP_FAILED || (want && p != want)) {
        fail("mmap failed");
    }
    return p;
}

/* Rank 0 sends `buf` tagged with `seed`; rank 1 receives into `rbuf`. */
static void xfer(unsigned char *buf, unsigned char *rbuf, unsigned seed, const char *what)
{
    if (test_rank == 0) {
        fill(buf, LEN, seed);
        MPI_CHECK(MPI_Send(buf, LEN, MPI_BYTE, 1, 7, MPI_COMM_WORLD));
    } else {
        memset(rbuf, 0xee, 8192);
        MPI_CHECK(MPI_Recv(rbuf, LEN, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        check(rbuf, LEN, seed, what);
    }
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "mrcache");
    if (test_size != 2) {
        fail("needs exactly 2 ranks");
    }
    /* A fixed threshold: every 4 MiB block is its own mapping, and free()
     * unmaps it (glibc would otherwise raise the threshold after the first
     * free and keep later blocks in the heap). */
    mallopt(M_MMAP_THRESHOLD, 1 * MIB);
    unsigned seed = 1;
    unsigned char *rbuf = malloc(LEN);
    unsigned char *buf = malloc(LEN);
    if (!rbuf || !buf) {
        fail("malloc");
    }
    for (int i = 0; i < REUSE_SENDS; i++) {
        xfer(buf, rbuf, seed++, "reuse");
    }
    free(buf);

    unsigned char *m = map_at(NULL);
    for (int r = 0; r < REMAPS; r++) {
        xfer(m, rbuf, seed++, "remap");
        xfer(m, rbuf, seed++, "remap");
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (munmap(m, LEN) != 0) {
            fail("munmap");
        }
        if (r + 1 < REMAPS) {
            map_at(m);
        }
    }

    for (int r = 0; r < FREES; r++) {
        unsigned char *f = malloc(LEN);
        if (!f) {
            fail("malloc");
        }
        xfer(f, rbuf, seed++, "free");
        xfer(f, rbuf, seed++, "free");
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        free(f);
    }
    free(rbuf);
    if (test_rank == 0) {
        /* Each mapping and each malloc'd block registers once, its second
         * send is served from the cache; the reused buffer registers once. */
        printf("EXPECT mr_reg=%d mr_hits=%d sends=%d\n", 1 + REMAPS + FREES,
               REUSE_SENDS - 1 + REMAPS + FREES, REUSE_SENDS + 2 * (REMAPS + FREES));
        fflush(stdout);
    }
    test_finish();
    return 0;
}
