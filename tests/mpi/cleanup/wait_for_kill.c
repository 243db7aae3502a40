/*
 * Companion of tests/shm_cleanup.sh. Every rank exchanges a message with
 * every other (so the shm rail is in use), prints "READY <rank> <pid>" and
 * then blocks in a receive nobody answers until the script kills one rank
 * with SIGKILL and the runtime takes the job down. With an argument
 * "finish" it returns normally after the exchange instead.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size, token, i;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (i = 0; i < size; i++) {
        int peer = (rank + i) % size, from = (rank - i + size) % size;
        MPI_Sendrecv(&rank, 1, MPI_INT, peer, 1, &token, 1, MPI_INT, from, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        if (token != from) {
            printf("FAIL: rank %d got %d from %d\n", rank, token, from);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    printf("READY %d %d\n", rank, (int) getpid());
    fflush(stdout);
    if (argc > 1 && 0 == strcmp(argv[1], "finish")) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        if (0 == rank) {
            printf("PASS wait_for_kill\n");
        }
        return 0;
    }
    MPI_Recv(&token, 1, MPI_INT, MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
