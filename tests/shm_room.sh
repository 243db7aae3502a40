#!/usr/bin/env bash
# The own shared-memory rail on a /dev/shm with little room: its rings
# shrink to fit, or the rail is refused with a message; a rank is never
# killed by SIGBUS part way through a job.
#
# Usage: tests/shm_room.sh (as root: it mounts a small tmpfs on /dev/shm in
# a mount namespace of its own, which nothing outside it sees)
#
# The segment of NP = 4 local ranks takes 4,199,424 bytes with the
# preferred rings (8,192 cells) and 2,102,272 with the least (4,096). Each
# case runs tests/mpi/shmroom/fill_rings.c (every rank sends every other
# one 20 windows of 64 x 4 KiB, checked byte by byte, so every ring wraps
# round and each of its pages is written) on a fresh tmpfs of the size
# given:
#   roomy       8 MiB: the preferred rings (ring_cells=8192 at verbose 2,
#               with no note), the job passes on the rail.
#   shrunk      3 MiB: every rank reports ring_cells=4096 and why, the job
#               passes on the rail (shm=rustofi-shm, shm_peers=4 in the
#               finalize line). Sized for 8,192 cells, as before the check,
#               the rings outgrow the room and the first rank to write past
#               it dies of SIGBUS.
#   refused     1 MiB, every rank on this host and no provider named (the
#               rail would be the only one): the message that there is not
#               enough room in /dev/shm (Open MPI's show_help, which 5.0
#               prints once for all ranks), the component disables itself
#               and the job passes on pml ob1 (btl self,tcp).
#   refused-tcp 1 MiB, provider tcp named: every rank says so and that
#               same-host peers use tcp; the job passes on the component
#               over tcp (shm_peers=0, net_peers=4).
#   refused-on  1 MiB, mtl_rustofi_shm on with pml cm forced: the message,
#               and MPI_Init fails: mpirun exits non-zero, before its
#               timeout.
#   separate    np 2, each rank with a tmpfs of its own on /dev/shm (as
#               containers that share the host's name but not its IPC
#               namespace): each maps its own object of the job's segment
#               name, so neither may take the other for a peer on the rail
#               (rings nobody reads: a hang). With no provider named and
#               pml cm: the message that the peer is in another segment,
#               and MPI_Init fails, before the timeout.
#   separate-tcp  the same with tcp named: each rank reaches the other
#               over tcp and itself on the rail (net_peers=1 shm_peers=1),
#               the job passes.
# No case may print "Bus error" or report a rank killed by a signal.
# Environment: OMPI_PREFIX (Open MPI 5: see scripts/ompi-prefix.sh),
# RUSTOFI_MCA_DIR, OMPI_COMPONENT_DIR.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/ompi-prefix.sh
. "$REPO/scripts/ompi-prefix.sh"
BUILD_DIR=$RUSTOFI_TARGET/shmroom
mkdir -p "$BUILD_DIR"
PROG=$BUILD_DIR/fill_rings
mpicc -O2 -o "$PROG" "$REPO/tests/mpi/shmroom/fill_rings.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mca_base_component_path=$RUSTOFI_MCA_DIR:$OMPI_COMPONENT_DIR
unset OMPI_MCA_pml OMPI_MCA_mtl
root_args=()
((OMPI_MAJOR >= 5)) && root_args=(--allow-run-as-root)
NP=4
FAILED=0

fail() { echo "FAIL shm_room $1: ${*:2}"; FAILED=1; CASE_FAILED=1; }

if [[ $(id -u) != 0 ]] || ! unshare -m true 2>/dev/null; then
    fail setup "must run as root with mount namespaces (unshare -m)"
    exit 1
fi

# Lines of the log that match, counted.
# (-a: Open MPI 5's show_help output holds a NUL byte, which would make
# grep take the log for a binary file.)
count() { grep -ac -- "$2" "$1" || true; }

# Runs the rest of the command line with a fresh tmpfs of size $1 on
# /dev/shm, in a mount namespace of its own (exit 99, and a line saying
# so, if it cannot mount).
with_shm=(unshare -m sh -c '
    mount -t tmpfs -o "size=$1" rustofi-room /dev/shm ||
        { echo "cannot mount rustofi-room" >&2; exit 99; }
    shift
    exec "$@"' sh)

# run_case NAME WHERE:TMPFS_SIZE EXPECT(pass|fail) MCA-ARGS...
# WHERE: job (one tmpfs that mpirun and every rank inherit) or rank (each
# rank a tmpfs of its own, as in containers that share the host's name but
# not its /dev/shm).
run_case() {
    local name=$1 where=${2%%:*} size=${2#*:} expect=$3 log=$BUILD_DIR/$1.log rc=0
    shift 3
    CASE_FAILED=0
    local -a job=() rank=()
    if [[ $where == job ]]; then job=("${with_shm[@]}" "$size"); else rank=("${with_shm[@]}" "$size"); fi
    local np=$NP
    [[ $where == rank ]] && np=2
    timeout -k 10 180 "${job[@]}" \
        mpirun -np $np --oversubscribe --bind-to none "${root_args[@]}" \
        --mca btl self,tcp --mca mtl rustofi "$@" "${rank[@]}" "$PROG" >"$log" 2>&1 || rc=$?
    if ((rc == 99)) || grep -aq 'cannot mount rustofi-room' "$log"; then
        fail "$name" "cannot mount a tmpfs on /dev/shm (log $log)"
        return
    fi
    if grep -aqiE 'bus error|signal 7|exited on signal' "$log"; then
        fail "$name" "a rank was killed by a signal (log $log)"
    fi
    case $expect in
        pass)
            # Not anchored: on 5.0 a NUL byte of show_help's output can
            # end up in front of it.
            if ((rc != 0)) || ! grep -aq 'PASS fill_rings (' "$log"; then
                fail "$name" "job failed (exit $rc, log $log)"
            fi
            ;;
        fail)
            if ((rc == 0 || rc == 124 || rc == 137)); then
                fail "$name" "mpirun exit $rc: expected MPI_Init to fail, not to pass or hang (log $log)"
            fi
            ;;
    esac
}

# Every rank's line matching PATTERN, NP of them.
want_each() {
    local name=$1 what=$2 pattern=$3 log=$BUILD_DIR/$1.log n
    n=$(count "$log" "$pattern")
    if ((n != NP)); then
        fail "$name" "$what: $n of $NP ranks (pattern '$pattern', log $BUILD_DIR/$name.log)"
    fi
}

run_case roomy job:8m pass --mca mtl_rustofi_verbose 2
want_each roomy "the preferred rings" 'ring_cells=8192 eager_limit'
want_each roomy "finalize line on the rail" 'shm=rustofi-shm .*shm_peers=4 '
((CASE_FAILED)) || echo "ok   shm_room roomy (8 MiB: 8,192 cells per ring, job passed on the rail)"

run_case shrunk job:3m pass --mca mtl_rustofi_verbose 2
want_each shrunk "rings shrunk to fit" \
    'ring_cells=4096 (fewer than 8192: no room for more in /dev/shm)'
want_each shrunk "finalize line on the rail" 'shm=rustofi-shm .*shm_peers=4 '
((CASE_FAILED)) || echo "ok   shm_room shrunk (3 MiB: 4,096 cells per ring, job passed on the rail)"

room_msg='not enough room in /dev/shm for /dev/shm/rustofi1-.*need at least 2102272 bytes'
run_case refused job:1m pass
# A message through Open MPI's show_help, which 5.0 prints once for all
# ranks.
if [[ $(count "$BUILD_DIR/refused.log" "$room_msg") -lt 1 ]] ||
    [[ $(count "$BUILD_DIR/refused.log" 'The rustofi MTL disables itself') -lt 1 ]]; then
    fail refused "no message that /dev/shm has not enough room and the component disables itself"
fi
((CASE_FAILED)) || echo "ok   shm_room refused (1 MiB, one host: message, component off, job passed on ob1)"

run_case refused-tcp job:1m pass --mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_verbose 1
want_each refused-tcp "the refusal" "$room_msg.*same-host peers use tcp"
want_each refused-tcp "finalize line over tcp" 'provider=tcp;ofi_rxm .*net_peers=4 shm_peers=0 '
((CASE_FAILED)) || echo "ok   shm_room refused-tcp (1 MiB, tcp named: message, job passed over tcp)"

run_case refused-on job:1m fail --mca pml cm --mca mtl_rustofi_shm on
if [[ $(count "$BUILD_DIR/refused-on.log" "$room_msg") -lt 1 ]]; then
    fail refused-on "no message that /dev/shm has not enough room (log $BUILD_DIR/refused-on.log)"
fi
((CASE_FAILED)) || echo "ok   shm_room refused-on (1 MiB, shm on: message, MPI_Init failed, no hang)"

# Each of two ranks in a /dev/shm of its own: each makes and maps its own
# object of the job's segment name, and neither may take the other for a
# peer on the rail (the rings it wrote would never be read: a hang).
other_msg='a rank on this host .* is in another shared-memory segment of this job'
run_case separate rank:8m fail --mca pml cm
if [[ $(count "$BUILD_DIR/separate.log" "$other_msg") -lt 1 ]]; then
    fail separate "no message that the peer is in another segment (log $BUILD_DIR/separate.log)"
fi
((CASE_FAILED)) || echo "ok   shm_room separate (a /dev/shm per rank, no provider: message, MPI_Init failed, no hang)"

run_case separate-tcp rank:8m pass --mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_verbose 1
n=$(count "$BUILD_DIR/separate-tcp.log" 'provider=tcp;ofi_rxm .*net_peers=1 shm_peers=1 ')
((n == 2)) || fail separate-tcp "finalize lines with the other rank over tcp, itself on the rail: $n of 2"
((CASE_FAILED)) || echo "ok   shm_room separate-tcp (a /dev/shm per rank, tcp named: the other rank over tcp, job passed)"

exit $FAILED
