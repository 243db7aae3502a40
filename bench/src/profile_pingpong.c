/*
 * profile_pingpong: a fixed-size blocking ping-pong between ranks 0 and 1,
 * made to be run under callgrind by bench/profile.
 *
 * Usage: profile_pingpong size iters [idle_polls [settle_us]]
 *
 *   size        message size in bytes (MPI_BYTE)
 *   iters       measured round trips: rank 0 MPI_Send then MPI_Recv, rank 1
 *               MPI_Recv then MPI_Send; 100 warm-up round trips come
 *               first, whatever iters is, so that they cancel when two runs
 *               with different iters are subtracted
 *   idle_polls  after the ping-pong, rank 0 calls MPI_Test this many times
 *               on a receive that cannot match yet, while rank 1 waits in
 *               MPI_Recv for a go-ahead; then the two exchange one 1-byte
 *               message each. Every progress call in that phase finds
 *               nothing, which lets bench/profile price an empty poll.
 *               Default 0 (no idle phase).
 *   settle_us   a round trip every settle_us microseconds on a common
 *               clock (CLOCK_MONOTONIC, common because both ranks run on
 *               one host; from a start rank 0 sends): rank 0
 *               sends at the start of its period, rank 1 receives a third
 *               of the period later and answers at once, rank 0 receives
 *               at two thirds. Each sleeps outside MPI until then, so that
 *               (with a period long enough for a third to hold a send
 *               under valgrind) each receive starts after its message is
 *               there: it makes no poll that finds nothing, and the count
 *               is the work alone, the same from run to run. The message
 *               waits unread meanwhile (no progress runs during a sleep),
 *               so the receive is posted before the message is read, as in
 *               the ping-pong without it. Absolute times keep the two
 *               ranks' phases from drifting, and the measured rounds start
 *               a second later than the warm-up's pace would have them, so
 *               that neither rank waits in MPI while the other writes its
 *               callgrind dump; a rank late for a time goes on at once (its
 *               polls show in the report). Default 0 (no sleep: a receive
 *               polls while it waits, the dumps' time included).
 *
 * Under callgrind the program dumps the counts at three points
 * (CALLGRIND_DUMP_STATS_AT), so a run's output has four parts: <file>.1
 * start-up and warm-up, <file>.2 the measured round trips, <file>.3 the idle
 * phase, <file> (written at exit) the teardown. Outside valgrind these
 * requests do nothing.
 *
 * The first and last byte of every received payload are checked; the exit
 * status is 1 on a mismatch.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_DUMP_STATS_AT
#define CALLGRIND_DUMP_STATS_AT(s) ((void) (s))
#endif

/* The paced round trips of settle_us: period and start of round 0. */
static long period_ns;
static struct timespec start;

/* Rounds from `warm` on start this much later (ns): the callgrind dump
 * between warm-up and measured rounds takes each rank a while, and a rank
 * that finished its dump first must not poll for the other in the
 * measured rounds. */
static const long long DUMP_GAP_NS = 1000000000LL;

/* Sleeps outside MPI until `frac_num`/3 of round `i`'s period has passed
 * (at once if that time has passed). */
static void pace(long i, long warm, long frac_num)
{
    if (period_ns == 0) {
        return;
    }
    long long ns = (long long) start.tv_nsec + (long long) i * period_ns + frac_num * period_ns / 3
                 + (i >= warm ? DUMP_GAP_NS : 0);
    struct timespec t = {start.tv_sec + (time_t) (ns / 1000000000LL), (long) (ns % 1000000000LL)};
    int rc;
    do {
        rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
    } while (rc == EINTR);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: profile_pingpong size iters [idle_polls [settle_us]]\n");
        MPI_Finalize();
        return 2;
    }
    long size = atol(argv[1]), iters = atol(argv[2]);
    long idle = argc > 3 ? atol(argv[3]) : 0;
    long settle_us = argc > 4 ? atol(argv[4]) : 0;
    if (np != 2 || size < 1 || iters < 1 || idle < 0 || settle_us < 0 || settle_us >= 1000000) {
        if (rank == 0)
            fprintf(stderr, "profile_pingpong needs 2 ranks, size >= 1, iters >= 1, idle >= 0, "
                            "0 <= settle_us < 1000000\n");
        MPI_Finalize();
        return 2;
    }
    unsigned char *sbuf = malloc((size_t) size), *rbuf = malloc((size_t) size);
    if (!sbuf || !rbuf) MPI_Abort(MPI_COMM_WORLD, 3);
    const unsigned char mine = (unsigned char) (rank + 1), theirs = (unsigned char) (2 - rank);
    memset(sbuf, mine, (size_t) size);
    memset(rbuf, 0, (size_t) size);
    const int peer = 1 - rank;
    const long warm = 100;
    int bad = 0;

    if (settle_us > 0) {
        /* Round 0 starts 10 ms after rank 0's clock now: both ranks sleep
         * to the same absolute times. */
        period_ns = settle_us * 1000;
        long long t0[2] = {0, 0};
        if (rank == 0) {
            clock_gettime(CLOCK_MONOTONIC, &start);
            t0[0] = (long long) start.tv_sec;
            t0[1] = (long long) start.tv_nsec + 10000000LL;
        }
        MPI_Bcast(t0, 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
        start.tv_sec = (time_t) (t0[0] + t0[1] / 1000000000LL);
        start.tv_nsec = (long) (t0[1] % 1000000000LL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < warm + iters; i++) {
        if (i == warm) CALLGRIND_DUMP_STATS_AT("start-up and warm-up");
        if (rank == 0) {
            pace(i, warm, 0);
            MPI_Send(sbuf, (int) size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            pace(i, warm, 2);
            MPI_Recv(rbuf, (int) size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            pace(i, warm, 1);
            MPI_Recv(rbuf, (int) size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, (int) size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
    }
    CALLGRIND_DUMP_STATS_AT("round trips");
    if (rbuf[0] != theirs || rbuf[size - 1] != theirs) {
        fprintf(stderr, "rank %d: payload mismatch (first %u last %u want %u)\n", rank, rbuf[0],
                rbuf[size - 1], theirs);
        bad = 1;
    }

    if (idle > 0) {
        char go = 0, done = 0;
        if (rank == 0) {
            MPI_Request req;
            int flag = 0;
            MPI_Irecv(&done, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, &req);
            for (long i = 0; i < idle; i++) {
                MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
                if (flag) {
                    fprintf(stderr, "idle phase: receive completed before the go-ahead\n");
                    bad = 1;
                    break;
                }
            }
            MPI_Send(&go, 1, MPI_CHAR, peer, 2, MPI_COMM_WORLD);
            if (!flag) MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&go, 1, MPI_CHAR, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&done, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
        }
    }
    CALLGRIND_DUMP_STATS_AT("idle phase");

    int anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("profile_pingpong: size %ld iters %ld idle %ld: %s\n", size, iters, idle,
                          anybad ? "FAIL" : "ok");
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return anybad;
}
