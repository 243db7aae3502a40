/* Shared helpers for the OSU-methodology benchmarks in this directory.
 *
 * Common command line:  prog [max_bytes] [iteration_scale]
 *   max_bytes        largest message size (default 4 MiB), sizes go 1, 2, 4, ...
 *   iteration_scale  multiplies every iteration and warm-up count (default 1.0);
 *                    e.g. 0.1 for a quick run. Counts never drop below 1 / 0.
 * Output (rank 0): one header line starting with '#', then "size value" lines.
 * Exit status is nonzero when a received payload's first or last byte is wrong.
 */
#ifndef OSU_COMMON_H
#define OSU_COMMON_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OSU_DEFAULT_MAX (4L << 20)
#define OSU_LARGE 8192L /* above this, fewer iterations */
#define OSU_WINDOW 64

static long osu_max_size = OSU_DEFAULT_MAX;
static double osu_scale = 1.0;

/* Parse [max_bytes] [scale] starting at argv[first]. */
static void osu_args(int argc, char **argv, int first)
{
    if (argc > first) {
        osu_max_size = atol(argv[first]);
        if (osu_max_size < 1)
            osu_max_size = 1;
    }
    if (argc > first + 1) {
        osu_scale = atof(argv[first + 1]);
        if (osu_scale <= 0)
            osu_scale = 1.0;
    }
}

static long osu_scaled(long n, long floor)
{
    long v = (long)(n * osu_scale + 0.5);
    return v < floor ? floor : v;
}

static void *osu_alloc(long bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, (size_t)(bytes < 4096 ? 4096 : bytes)) != 0) {
        fprintf(stderr, "out of memory (%ld bytes)\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(p, 0, (size_t)(bytes < 4096 ? 4096 : bytes));
    return p;
}

/* Byte pattern a given sender uses for a given size: never 0, differs per
 * sender rank, per size and per "slot" (thread / direction). */
static unsigned char osu_pattern(int sender, long size, int slot)
{
    int lg = 0;
    while ((1L << lg) < size)
        lg++;
    return (unsigned char)(1 + (sender * 31 + lg * 7 + slot * 13) % 251);
}

/* Returns 1 (and reports) if buf's first or last byte is not `want`. */
static int osu_check(const char *what, int rank, const unsigned char *buf,
                     long size, unsigned char want)
{
    if (buf[0] != want || buf[size - 1] != want) {
        fprintf(stderr, "%s: rank %d size %ld: payload mismatch (first %u last %u want %u)\n",
                what, rank, size, buf[0], buf[size - 1], want);
        return 1;
    }
    return 0;
}

/* Start-up warm-up before the size loop: 200 one-byte round trips with
 * `peer` (-1: this rank only joins the closing barrier), so connection set-up
 * and first-touch costs do not land in the first measured size. */
static void osu_warmup(int rank, int peer)
{
    char a = 0, b = 0;
    if (peer >= 0) {
        for (int i = 0; i < 200; i++)
            MPI_Sendrecv(&a, 1, MPI_CHAR, peer, 999, &b, 1, MPI_CHAR, peer, 999,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    (void)rank;
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Collect error counts; returns the process exit status. */
static int osu_finish(int errors)
{
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return total ? 1 : 0;
}


/* MPI_Init, rank and size; exits with status 2 (message from rank 0) when
 * fewer than min_np ranks run. */
static inline void osu_init(int *argc, char ***argv, const char *name, int min_np, int *rank,
                            int *np)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, np);
    if (*np < min_np) {
        if (*rank == 0)
            fprintf(stderr, "%s needs at least %d ranks\n", name, min_np);
        MPI_Finalize();
        exit(2);
    }
}

#endif
