/*
 * sessions_fanin: every rank of a communicator made through MPI sessions
 * (Open MPI 5) sends to rank 0 at once, so that rank 0 gets the index
 * message of every peer (the index exchange of a communicator whose
 * members index it each their own way) and must answer each of them.
 *
 * Run with mtl_rustofi_fault_inject late_comm, rank 0 registers the
 * communicator only once all those messages wait for it (tests/excid_fanin.sh).
 * With an argument S, rank 0 waits S seconds outside MPI once it has the
 * communicator, so that every peer's index message is there when it next
 * drives progress. Rank 0 receives one message from every other rank
 * (MPI_ANY_SOURCE) and answers each; every rank checks what it got. Rank 0 prints
 * "PASS sessions_fanin"; a failure prints "FAIL: ..." and aborts.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CHECK(call)                                                            \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != MPI_SUCCESS) {                                              \
            fprintf(stderr, "FAIL: %s:%d: %s returned %d\n", __FILE__,         \
                    __LINE__, #call, rc_);                                     \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

int main(int argc, char **argv)
{
    int pause_s = argc > 1 ? atoi(argv[1]) : 0;
    MPI_Session session;
    MPI_Group world;
    MPI_Comm comm;
    CHECK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session));
    CHECK(MPI_Group_from_session_pset(session, "mpi://WORLD", &world));
    CHECK(MPI_Comm_create_from_group(world, "rustofi.sessions.fanin", MPI_INFO_NULL,
                                     MPI_ERRORS_RETURN, &comm));
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (rank == 0) {
        if (pause_s > 0) {
            sleep((unsigned)pause_s); /* the peers' index messages pile up */
        }
        char *seen = calloc((size_t)size, 1);
        for (int i = 1; i < size; i++) {
            int v = -1;
            MPI_Status st;
            CHECK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 7, comm, &st));
            if (st.MPI_SOURCE < 1 || st.MPI_SOURCE >= size || seen[st.MPI_SOURCE] ||
                v != 1000 + st.MPI_SOURCE) {
                fprintf(stderr, "FAIL: message %d from rank %d (seen before: %d)\n", v,
                        st.MPI_SOURCE, st.MPI_SOURCE > 0 && st.MPI_SOURCE < size
                                           ? seen[st.MPI_SOURCE] : -1);
                MPI_Abort(comm, 1);
            }
            seen[st.MPI_SOURCE] = 1;
            int answer = 2000 + st.MPI_SOURCE;
            CHECK(MPI_Send(&answer, 1, MPI_INT, st.MPI_SOURCE, 8, comm));
        }
        free(seen);
    } else {
        int v = 1000 + rank, answer = -1;
        CHECK(MPI_Send(&v, 1, MPI_INT, 0, 7, comm));
        CHECK(MPI_Recv(&answer, 1, MPI_INT, 0, 8, comm, MPI_STATUS_IGNORE));
        if (answer != 2000 + rank) {
            fprintf(stderr, "FAIL: rank %d got answer %d\n", rank, answer);
            MPI_Abort(comm, 1);
        }
    }
    CHECK(MPI_Barrier(comm));
    if (rank == 0) {
        printf("PASS sessions_fanin %d ranks\n", size);
        fflush(stdout);
    }
    CHECK(MPI_Comm_free(&comm));
    MPI_Group_free(&world);
    CHECK(MPI_Session_finalize(&session));
    return 0;
}
