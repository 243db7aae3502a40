"""Runs mpi4py's test/main.py (path in argv[1]) with the remaining arguments,
and first prints on stderr, from every rank, the thread level MPI_Init_thread
actually provided:

    mpi4py: rank=R size=N thread_level requested=multiple provided=multiple

main.py sets mpi4py.rc from its own options (--thread-level, --threads)
before it imports mpi4py.MPI, so the line shows what the test run got, not
what a separate probe would get.  Used by tests/mpi4py.sh.

With RUSTOFI_RANK_LOG_DIR set, every rank first sends its own stdout and
stderr (file descriptors 1 and 2, so the MTL's output too) to
DIR/self/rank.R/stdout and .../stderr (R from OMPI_COMM_WORLD_RANK): Open MPI
5's launcher (PRRTE) can reorder small writes in the per-rank files of
`mpirun --output dir=`, which splits the lines parsed here.
"""

import importlib.util
import os
import pathlib
import sys

log_dir = os.environ.get("RUSTOFI_RANK_LOG_DIR")
if log_dir:
    rank_dir = pathlib.Path(log_dir) / "self" / f"rank.{os.environ['OMPI_COMM_WORLD_RANK']}"
    rank_dir.mkdir(parents=True, exist_ok=True)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        f = os.open(rank_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.dup2(f, fd)
        os.close(f)

sys.dont_write_bytecode = True
main_py = pathlib.Path(sys.argv[1]).resolve()
sys.argv = [str(main_py)] + sys.argv[2:]
sys.path.insert(0, str(main_py.parent))
spec = importlib.util.spec_from_file_location("main", main_py)
main = importlib.util.module_from_spec(spec)
sys.modules["main"] = main
spec.loader.exec_module(main)

_run_tests = main.TestProgram.runTests


def run_tests(self):
    import mpi4py
    from mpi4py import MPI

    names = {
        MPI.THREAD_SINGLE: "single",
        MPI.THREAD_FUNNELED: "funneled",
        MPI.THREAD_SERIALIZED: "serialized",
        MPI.THREAD_MULTIPLE: "multiple",
    }
    comm = MPI.COMM_WORLD
    provided = MPI.Query_thread()
    sys.stderr.write(
        f"mpi4py: rank={comm.Get_rank()} size={comm.Get_size()} thread_level"
        f" requested={mpi4py.rc.thread_level if mpi4py.rc.threads else 'single'}"
        f" provided={names.get(provided, provided)}\n"
    )
    sys.stderr.flush()
    _run_tests(self)


main.TestProgram.runTests = run_tests
main.main(module=None)
