/* MPI_Comm_spawn from a job that runs on one host (tests/one_host.sh).
 *
 * The parent (no parent communicator) spawns one copy of itself with
 * MPI_ERRORS_RETURN on MPI_COMM_WORLD, prints "SPAWN rc=<code>", and when
 * the spawn succeeded sends 42 to the child and prints "SENT". The child
 * receives it from its parent and prints "CHILD got=<value>". Both then
 * disconnect at once: Open MPI 4.1's MPI_Comm_disconnect waits in a PMIx
 * fence that drives no MPI progress, so the parent's MPI_Send must have
 * handed its message to the provider before returning (a first send to a
 * new peer over tcp;ofi_rxm meets rxm's connection set-up). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    MPI_Comm parent, inter;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent == MPI_COMM_NULL) {
        int err = 0;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int rc = MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD,
                                &inter, &err);
        printf("SPAWN rc=%d\n", rc);
        fflush(stdout);
        if (rc == MPI_SUCCESS) {
            int x = 42;
            MPI_Send(&x, 1, MPI_INT, 0, 0, inter);
            printf("SENT\n");
            fflush(stdout);
            MPI_Comm_disconnect(&inter);
        }
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
