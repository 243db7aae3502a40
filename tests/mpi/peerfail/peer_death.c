/*
 * A peer dies (SIGKILL) while rank 0 waits on it; the runtime keeps the
 * survivors running (orte_enable_recovery / PRRTE's recovery), and rank 0
 * must get an MPI error instead of waiting for ever, then still receive
 * from a living rank with MPI_ANY_SOURCE.
 *
 * Usage: peer_death MODE [SECONDS]   (np 3; MPI_ERRORS_RETURN on the world)
 *   rndv_send  rank 1 sees rank 0's rendezvous RTS arrive (MPI_Iprobe) and
 *              kills itself before taking the data: rank 0's MPI_Send fails
 *   rndv_recv  rank 1 starts a rendezvous MPI_Isend to rank 0 and kills
 *              itself; rank 0 then posts the MPI_Recv: it fails
 *   eager_recv rank 1 kills itself; rank 0's MPI_Recv from it fails
 *   probe      rank 1 kills itself; rank 0's MPI_Probe for it fails
 *   excid      (Open MPI 5, MPI_THREAD_MULTIPLE) every rank makes a
 *              communicator through MPI sessions, whose members index it
 *              each their own way; rank 1 kills itself, and rank 0's first
 *              MPI_Send to it there, which must first exchange indexes with
 *              it, fails, and so does the one a second thread of rank 0
 *              makes at the same time (one sends the index, the other
 *              waits for the same answer)
 *   busy       rank 1 sleeps SECONDS outside MPI, then sends: rank 0's
 *              MPI_Recv from it must succeed (a busy peer is not dead)
 *   silent     rank 1 prints "READY <pid>" and waits outside MPI for the
 *              caller to cut its host's link and kill it; rank 0's MPI_Recv
 *              from it reports what happens (the time is the measurement;
 *              either outcome passes)
 * After that rank 2 sends a message that rank 0 receives with
 * MPI_ANY_SOURCE. Rank 0 prints "RESULT <mode> error|ok <seconds>" for the
 * operation on rank 1, then "PASS peer_death" when all went as expected.
 * The survivors leave with _exit (no MPI_Finalize: it would wait for the
 * dead rank in the runtime).
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RNDV (4 * 1024 * 1024)
#define TAG_OP 7
#define TAG_LIVE 8

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *why)
{
    fprintf(stderr, "FAIL: %s\n", why);
    fflush(stderr);
    _exit(1);
}

/* A communicator of every rank made through MPI sessions (Open MPI 5),
 * with MPI_ERRORS_RETURN, and ranks in the order 2, 0, 1. Open MPI's
 * collectives as it makes the communicator (rooted at its rank 0, here
 * world rank 2) exchange indexes between that rank and each other one, so
 * that world ranks 0 and 1 have not exchanged theirs when it returns.
 * `*rank1` is world rank 1's rank in it. */
static MPI_Comm sessions_comm(int *rank1)
{
#if OMPI_MAJOR_VERSION >= 5
    MPI_Session session;
    MPI_Group world, order;
    MPI_Comm comm;
    const int ranks[3] = {2, 0, 1};
    int one = 1;
    if (MPI_SUCCESS != MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session)
        || MPI_SUCCESS != MPI_Group_from_session_pset(session, "mpi://WORLD", &world)
        || MPI_SUCCESS != MPI_Group_incl(world, 3, ranks, &order)
        || MPI_SUCCESS != MPI_Group_translate_ranks(world, 1, &one, order, rank1)
        || MPI_SUCCESS != MPI_Comm_create_from_group(order, "rustofi.peer_death", MPI_INFO_NULL,
                                                     MPI_ERRORS_RETURN, &comm)) {
        die("could not make the sessions communicator");
    }
    return comm;
#else
    (void) rank1;
    die("mode excid needs Open MPI 5 (MPI sessions)");
    return MPI_COMM_NULL;
#endif
}

/* excid: the second thread's send to world rank 1 */
struct side_send {
    MPI_Comm comm;
    int peer;
    char *buf;
    int rc;
};

static void *side_send(void *arg)
{
    struct side_send *s = arg;
    s->rc = MPI_Send(s->buf, 64, MPI_CHAR, s->peer, TAG_OP, s->comm);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int secs = argc > 2 ? atoi(argv[2]) : 10;
    int rank, size;
    int excid = 0 == strcmp(mode, "excid");
    if (excid) {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided < MPI_THREAD_MULTIPLE) {
            die("mode excid needs MPI_THREAD_MULTIPLE");
        }
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (size != 3) {
        die("run with np 3");
    }
    char *buf = calloc(1, RNDV);
    if (!buf) {
        die("out of memory");
    }
    int busy = 0 == strcmp(mode, "busy");
    MPI_Comm op_comm = MPI_COMM_WORLD; /* where rank 0's operation goes */
    int op_peer = 1;                   /* rank 1 there */
    if (excid) {
        op_comm = sessions_comm(&op_peer);
    }
    /* Every pair talks once, so connections exist before the death. */
    for (int peer = 0; peer < size; peer++) {
        if (peer != rank) {
            char out = 1, in = 0;
            MPI_Sendrecv(&out, 1, MPI_CHAR, peer, 1, &in, 1, MPI_CHAR, peer, 1, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (1 == rank) {
        if (0 == strcmp(mode, "rndv_send")) {
            int flag = 0;
            while (!flag) {
                MPI_Iprobe(0, TAG_OP, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            }
        } else if (0 == strcmp(mode, "rndv_recv")) {
            MPI_Request r;
            MPI_Isend(buf, RNDV, MPI_CHAR, 0, TAG_OP, MPI_COMM_WORLD, &r);
            for (int i = 0; i < 1000; i++) {
                int done;
                MPI_Test(&r, &done, MPI_STATUS_IGNORE);
            }
            usleep(200000);
        } else if (busy) {
            sleep(secs);
            MPI_Send(buf, 100, MPI_CHAR, 0, TAG_OP, MPI_COMM_WORLD);
            printf("rank 1 sent after %d s outside MPI\n", secs);
            fflush(stdout);
            _exit(0);
        } else if (0 == strcmp(mode, "silent")) {
            printf("READY %d\n", (int) getpid());
            fflush(stdout);
            for (;;) {
                pause();
            }
        } else if (strcmp(mode, "eager_recv") && strcmp(mode, "probe") && strcmp(mode, "excid")) {
            die("unknown mode");
        }
        printf("rank 1 kills itself (pid %d)\n", (int) getpid());
        fflush(stdout);
        raise(SIGKILL);
    }
    if (2 == rank) {
        /* Well after rank 0 started waiting on rank 1. */
        sleep(busy ? 2 : 1);
        int rc = MPI_Send(buf, 64, MPI_CHAR, 0, TAG_LIVE, MPI_COMM_WORLD);
        if (MPI_SUCCESS != rc) {
            die("rank 2's send to rank 0 failed");
        }
        _exit(0);
    }
    /* rank 0 */
    double t0 = now();
    int rc;
    MPI_Status st;
    if (0 == strcmp(mode, "rndv_send")) {
        rc = MPI_Send(buf, RNDV, MPI_CHAR, 1, TAG_OP, MPI_COMM_WORLD);
    } else if (0 == strcmp(mode, "rndv_recv")) {
        sleep(1); /* rank 1 is gone by now; its RTS is here */
        t0 = now();
        rc = MPI_Recv(buf, RNDV, MPI_CHAR, 1, TAG_OP, MPI_COMM_WORLD, &st);
    } else if (0 == strcmp(mode, "probe")) {
        rc = MPI_Probe(1, TAG_OP, MPI_COMM_WORLD, &st);
    } else if (excid) {
        sleep(1); /* rank 1 is gone by now */
        t0 = now();
        struct side_send side = {op_comm, op_peer, buf + RNDV / 2, MPI_SUCCESS};
        pthread_t thread;
        if (0 != pthread_create(&thread, NULL, side_send, &side)) {
            die("pthread_create");
        }
        rc = MPI_Send(buf, 64, MPI_CHAR, op_peer, TAG_OP, op_comm);
        pthread_join(thread, NULL);
        printf("excid: main thread's send %s, second thread's send %s\n",
               MPI_SUCCESS == rc ? "ok" : "error", MPI_SUCCESS == side.rc ? "ok" : "error");
        if (MPI_SUCCESS == side.rc) {
            rc = MPI_SUCCESS; /* reported as "ok": one send did not fail */
        }
    } else {
        rc = MPI_Recv(buf, RNDV, MPI_CHAR, 1, TAG_OP, MPI_COMM_WORLD, &st);
    }
    double took = now() - t0;
    printf("RESULT %s %s %.2f\n", mode, MPI_SUCCESS == rc ? "ok" : "error", took);
    fflush(stdout);
    if (0 == strcmp(mode, "silent")) {
        printf("PASS peer_death\n");
        fflush(stdout);
        _exit(0);
    }
    if ((MPI_SUCCESS == rc) != busy) {
        die(busy ? "the receive from a busy peer failed"
                 : "the operation on a dead peer did not fail");
    }
    rc = MPI_Recv(buf, RNDV, MPI_CHAR, MPI_ANY_SOURCE, TAG_LIVE, MPI_COMM_WORLD, &st);
    if (MPI_SUCCESS != rc || 2 != st.MPI_SOURCE) {
        die("the ANY_SOURCE receive from the living rank 2 failed");
    }
    printf("PASS peer_death\n");
    fflush(stdout);
    _exit(0);
}
