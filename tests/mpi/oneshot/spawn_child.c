/* MPI_Comm_spawn from a job that runs on one host (tests/one_host.sh,
 * tests/spawn_ompi5.sh).
 *
 * The parent (no parent communicator) spawns one copy of itself with
 * MPI_ERRORS_RETURN on MPI_COMM_WORLD, prints "SPAWN rc=<code>", and when
 * the spawn succeeded sends 42 to the child and prints "SENT". The child
 * receives it from its parent and prints "CHILD got=<value>". Both then
 * disconnect at once: Open MPI 4.1's MPI_Comm_disconnect waits in a PMIx
 * fence that drives no MPI progress, so the parent's MPI_Send must have
 * handed its message to the provider before returning (a first send to a
 * new peer over tcp;ofi_rxm meets rxm's connection set-up).
 *
 * With the argument "isend" the parent sends with MPI_Isend and MPI_Wait
 * instead: the wait must not return before the packet has left the
 * component's queue either. ("send", or no argument: MPI_Send.)
 *
 * With the argument "reply" (tests/spawn_ompi5.sh) both sides use
 * MPI_ERRORS_RETURN on the intercommunicator, the child answers, and each
 * side prints the return code of each call instead of stopping at the
 * first error: "PARENT send rc=", "PARENT recv rc=", "CHILD recv rc=",
 * "CHILD send rc=". A peer no rail reaches must fail each call, not
 * leave a receive from it waiting. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

/* The "reply" exchange on `comm` (the intercommunicator to the other
 * side), as `who` (PARENT or CHILD): the parent sends, then receives. */
static void reply(MPI_Comm comm, const char *who, int parent_side)
{
    int x = 42, rc;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    for (int step = 0; step < 2; step++) {
        if ((step == 0) == parent_side) {
            rc = MPI_Send(&x, 1, MPI_INT, 0, step, comm);
            printf("%s send rc=%d\n", who, rc);
        } else {
            rc = MPI_Recv(&x, 1, MPI_INT, 0, step, comm, MPI_STATUS_IGNORE);
            printf("%s recv rc=%d\n", who, rc);
        }
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    MPI_Comm parent, inter;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    int replying = argc > 1 && 0 == strcmp(argv[1], "reply");
    int isend = argc > 1 && 0 == strcmp(argv[1], "isend");
    if (parent == MPI_COMM_NULL) {
        int err = 0;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        /* The child takes the parent's argument: it answers in "reply". */
        char *args[] = {replying ? "reply" : NULL, NULL};
        int rc = MPI_Comm_spawn(argv[0], args, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                                &err);
        printf("SPAWN rc=%d\n", rc);
        fflush(stdout);
        if (rc == MPI_SUCCESS && replying) {
            reply(inter, "PARENT", 1);
        } else if (rc == MPI_SUCCESS) {
            int x = 42;
            if (isend) {
                MPI_Request r;
                MPI_Isend(&x, 1, MPI_INT, 0, 0, inter, &r);
                MPI_Wait(&r, MPI_STATUS_IGNORE);
            } else {
                MPI_Send(&x, 1, MPI_INT, 0, 0, inter);
            }
            printf("SENT\n");
            fflush(stdout);
            MPI_Comm_disconnect(&inter);
        }
    } else if (replying) {
        reply(parent, "CHILD", 0);
    } else {
        int x = 0;
        MPI_Recv(&x, 1, MPI_INT, 0, 0, parent, MPI_STATUS_IGNORE);
        printf("CHILD got=%d\n", x);
        fflush(stdout);
        MPI_Comm_disconnect(&parent);
    }
    MPI_Finalize();
    return 0;
}
