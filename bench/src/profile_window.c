/*
 * profile_window: windows of small non-blocking messages from rank 0 to
 * rank 1, as OSU's bandwidth and message-rate tests send them, made to be
 * run under callgrind by bench/profile-window.
 *
 * Usage: profile_window size window iters idle_polls [recv_delay_us [unexpected]]
 *
 *   Each iteration: rank 0 posts `window` MPI_Isend of `size` bytes (one
 *   tag) and waits for them all, then receives a 1-byte ack; rank 1 posts
 *   `window` MPI_Irecv, waits for them all, then sends the ack. With
 *   recv_delay_us > 0 rank 1 sleeps that long between posting its receives
 *   and waiting for them, so that the window has arrived when it first
 *   polls: then how many polls it makes no longer depends on timing, and
 *   its progress calls price the arrivals alone. With `unexpected` 1, the
 *   window arrives before its receives instead: rank 0 sends a 1-byte
 *   marker (tag 3) after each window, and rank 1, after its sleep, calls
 *   MPI_Iprobe for the marker until it is there (every message of the
 *   window, sent before it, has then been read into the unexpected queue),
 *   receives it, and only then posts the window's receives, each of which
 *   takes its message from the unexpected queue. 20 warm-up iterations
 *   come first. Then, as in profile_pingpong, an idle phase:
 *   rank 0 calls MPI_Test `idle_polls` times (0: none) on a receive that
 *   cannot match yet while rank 1 waits in MPI_Recv, so that both ranks'
 *   polls in it find nothing, which prices an empty poll.
 *
 * Under callgrind the counts are dumped after the warm-up (<file>.1), after
 * the windows (<file>.2) and after the idle phase (<file>.3). Every
 * received payload is checked (first and last byte: window index and
 * iteration); the exit status is 1 on a mismatch.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_DUMP_STATS_AT
#define CALLGRIND_DUMP_STATS_AT(s) ((void) (s))
#endif

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (argc < 5) {
        if (rank == 0) fprintf(stderr, "usage: profile_window size window iters idle_polls\n");
        MPI_Finalize();
        return 2;
    }
    long size = atol(argv[1]), window = atol(argv[2]), iters = atol(argv[3]);
    long idle = atol(argv[4]);
    long delay = argc > 5 ? atol(argv[5]) : 0;
    const int unexpected = argc > 6 && atol(argv[6]) != 0;
    /* size >= 2: the first and last byte carry different checks. */
    if (np != 2 || size < 2 || window < 1 || iters < 1 || idle < 0 || delay < 0) {
        if (rank == 0)
            fprintf(stderr, "profile_window needs 2 ranks, size >= 2, window and iters >= 1, "
                            "idle and delay >= 0\n");
        MPI_Finalize();
        return 2;
    }
    unsigned char *buf = malloc((size_t) (size * window));
    MPI_Request *req = malloc(sizeof(*req) * (size_t) window);
    if (!buf || !req) MPI_Abort(MPI_COMM_WORLD, 3);
    const int peer = 1 - rank;
    const long warm = 20;
    int bad = 0;
    char ack = 0;

    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < warm + iters; i++) {
        if (i == warm) CALLGRIND_DUMP_STATS_AT("start-up and warm-up");
        if (rank == 0) {
            for (long w = 0; w < window; w++) {
                unsigned char *m = buf + w * size;
                m[0] = (unsigned char) w;
                m[size - 1] = (unsigned char) i;
                MPI_Isend(m, (int) size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &req[w]);
            }
            MPI_Waitall((int) window, req, MPI_STATUSES_IGNORE);
            if (unexpected) MPI_Send(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
            MPI_Recv(&ack, 1, MPI_CHAR, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (unexpected) {
            if (delay > 0) usleep((useconds_t) delay);
            int there = 0;
            while (!there) MPI_Iprobe(peer, 3, MPI_COMM_WORLD, &there, MPI_STATUS_IGNORE);
            MPI_Recv(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (long w = 0; w < window; w++)
                MPI_Irecv(buf + w * size, (int) size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall((int) window, req, MPI_STATUSES_IGNORE);
            for (long w = 0; w < window; w++) {
                const unsigned char *m = buf + w * size;
                if (m[0] != (unsigned char) w || m[size - 1] != (unsigned char) i) bad = 1;
            }
            MPI_Send(&ack, 1, MPI_CHAR, peer, 2, MPI_COMM_WORLD);
        } else {
            for (long w = 0; w < window; w++)
                MPI_Irecv(buf + w * size, (int) size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &req[w]);
            if (delay > 0) usleep((useconds_t) delay);
            MPI_Waitall((int) window, req, MPI_STATUSES_IGNORE);
            for (long w = 0; w < window; w++) {
                const unsigned char *m = buf + w * size;
                if (m[0] != (unsigned char) w || m[size - 1] != (unsigned char) i) bad = 1;
            }
            MPI_Send(&ack, 1, MPI_CHAR, peer, 2, MPI_COMM_WORLD);
        }
    }
    CALLGRIND_DUMP_STATS_AT("windows");
    if (bad) fprintf(stderr, "rank %d: a payload arrived wrong or out of order\n", rank);

    char go = 0, done = 0;
    if (rank == 0) {
        MPI_Request r;
        int flag = 0;
        MPI_Irecv(&done, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, &r);
        for (long i = 0; i < idle && !flag; i++) MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            fprintf(stderr, "idle phase: receive completed before the go-ahead\n");
            bad = 1;
        }
        MPI_Send(&go, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
        if (!flag) MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(&go, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&done, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
    }
    CALLGRIND_DUMP_STATS_AT("idle phase");

    int anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("profile_window: size %ld window %ld iters %ld: %s\n", size, window, iters,
               anybad ? "FAIL" : "ok");
    free(buf);
    free(req);
    MPI_Finalize();
    return anybad;
}
