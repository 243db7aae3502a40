/*
 * Shared helpers for the mtl_rustofi MPI integration tests.
 *
 * Every test calls test_init() first and test_finish() last.  test_init()
 * installs MPI_ERRORS_RETURN on MPI_COMM_WORLD so that an unexpected MPI
 * error is reported through MPI_CHECK() as "FAIL: ..." instead of an abort
 * without context.  A failed check prints "FAIL: reason" on stderr and calls
 * MPI_Abort, so mpirun exits nonzero and no peer is left hanging.
 */
#ifndef RUSTOFI_TEST_COMMON_H
#define RUSTOFI_TEST_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <mpi.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KIB (1024)
#define MIB (1024 * 1024)

/* Sizes used by the tests; the default eager limit of the MTL is 8192. */
#define EAGER_SIZE 1000
#define RNDV_SIZE (256 * KIB)

static __attribute__((unused)) const char *test_name = "?";
static __attribute__((unused)) int test_rank = -1;
static __attribute__((unused)) int test_size = 0;

static inline void __attribute__((noreturn, format(printf, 1, 2)))
fail(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL: %s [test %s, rank %d]\n", msg, test_name, test_rank);
    fflush(stderr);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static inline const char *mpi_err_str(int rc)
{
    static __thread char buf[MPI_MAX_ERROR_STRING + 64];
    char s[MPI_MAX_ERROR_STRING];
    int len = 0, cls = -1;
    s[0] = '\0';
    MPI_Error_string(rc, s, &len);
    MPI_Error_class(rc, &cls);
    snprintf(buf, sizeof(buf), "rc=%d class=%d (%s)", rc, cls, s);
    return buf;
}

static inline int mpi_err_class(int rc)
{
    int cls = -1;
    MPI_Error_class(rc, &cls);
    return cls;
}

#define MPI_CHECK(call)                                                        \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != MPI_SUCCESS)                                                \
            fail("%s:%d: %s returned %s", __FILE__, __LINE__, #call,           \
                 mpi_err_str(rc_));                                            \
    } while (0)

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond))                                                           \
            fail(__VA_ARGS__);                                                 \
    } while (0)

static inline double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        fail("malloc(%zu) failed", n);
    return p;
}

/* ---- deterministic data pattern ---------------------------------------- */

static inline uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static inline uint64_t pattern_word(uint64_t seed, uint64_t k)
{
    return splitmix64((seed * 0x100000001b3ULL) ^ (k + 0x51ed270b27b6e1d3ULL));
}

/* Byte i of the pattern with the given seed (little-endian word layout). */
static inline uint8_t pattern_byte(uint64_t seed, size_t i)
{
    return (uint8_t)(pattern_word(seed, i / 8) >> (8 * (i % 8)));
}

static inline void fill_pattern(void *buf, size_t n, uint64_t seed)
{
    uint8_t *p = (uint8_t *)buf;
    size_t words = n / 8, k;
    for (k = 0; k < words; k++) {
        uint64_t w = pattern_word(seed, k);
        memcpy(p + 8 * k, &w, 8);
    }
    for (k = words * 8; k < n; k++)
        p[k] = pattern_byte(seed, k);
}

/* Returns the index of the first byte that differs from the pattern, or
 * (size_t)-1 if the buffer matches. */
static inline size_t check_pattern(const void *buf, size_t n, uint64_t seed)
{
    const uint8_t *p = (const uint8_t *)buf;
    size_t words = n / 8, k;
    for (k = 0; k < words; k++) {
        uint64_t w = pattern_word(seed, k), got;
        memcpy(&got, p + 8 * k, 8);
        if (got != w) {
            size_t b;
            for (b = 8 * k; b < 8 * k + 8; b++)
                if (p[b] != pattern_byte(seed, b))
                    return b;
        }
    }
    for (k = words * 8; k < n; k++)
        if (p[k] != pattern_byte(seed, k))
            return k;
    return (size_t)-1;
}

#define EXPECT_PATTERN(buf, n, seed, ...)                                      \
    do {                                                                       \
        size_t bad_ = check_pattern((buf), (n), (seed));                       \
        if (bad_ != (size_t)-1) {                                              \
            char what_[512];                                                   \
            snprintf(what_, sizeof(what_), __VA_ARGS__);                       \
            fail("%s: data mismatch at byte %zu of %zu (got 0x%02x, "          \
                 "expected 0x%02x)",                                           \
                 what_, bad_, (size_t)(n), ((const uint8_t *)(buf))[bad_],     \
                 pattern_byte((seed), bad_));                                  \
        }                                                                      \
    } while (0)

/* Returns the index of the first byte != val, or (size_t)-1. */
static inline size_t check_fill(const void *buf, size_t n, uint8_t val)
{
    const uint8_t *p = (const uint8_t *)buf;
    size_t i;
    for (i = 0; i < n; i++)
        if (p[i] != val)
            return i;
    return (size_t)-1;
}

/* 64-bit FNV-1a style checksum over 8-byte words plus the tail bytes. */
static inline uint64_t checksum64(const void *buf, size_t n)
{
    const uint8_t *p = (const uint8_t *)buf;
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t words = n / 8, k;
    for (k = 0; k < words; k++) {
        uint64_t w;
        memcpy(&w, p + 8 * k, 8);
        h = (h ^ w) * 0x100000001b3ULL;
    }
    for (k = words * 8; k < n; k++)
        h = (h ^ p[k]) * 0x100000001b3ULL;
    return h ^ (uint64_t)n;
}

/* ---- init / finish ----------------------------------------------------- */

static inline void test_setup(const char *name)
{
    test_name = name;
    MPI_Comm_rank(MPI_COMM_WORLD, &test_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &test_size);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    setvbuf(stdout, NULL, _IOLBF, 0);
}

static inline void test_init(int *argc, char ***argv, const char *name)
{
    test_name = name;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "FAIL: MPI_Init failed [test %s]\n", name);
        exit(1);
    }
    test_setup(name);
}

static inline void require_np(int min)
{
    if (test_size < min)
        fail("needs at least %d ranks, running with %d", min, test_size);
}

/* Final barrier, "PASS name" from rank 0, MPI_Finalize. */
static inline int test_finish(void)
{
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    int rank = test_rank;
    if (MPI_Finalize() != MPI_SUCCESS) {
        fprintf(stderr, "FAIL: MPI_Finalize failed [test %s, rank %d]\n",
                test_name, rank);
        return 1;
    }
    if (rank == 0) {
        printf("PASS %s\n", test_name);
        fflush(stdout);
    }
    return 0;
}

#endif /* RUSTOFI_TEST_COMMON_H */
