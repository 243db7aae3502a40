#!/usr/bin/env bash
# The own shared-memory rail where ranks of one host are partly walled off
# from each other, as in containers: a /dev/shm with little room, a
# /dev/shm of their own, a process table of their own. The rail shrinks
# its rings, or refuses with a message, or the ranks reach each other
# otherwise; never a SIGBUS part way through a job, a silent hang, a
# message read from another process, or a live peer taken for dead.
#
# Usage: tests/shm_containers.sh (as root: it makes mount and PID
# namespaces, which nothing outside them sees)
#
# The segment of NP = 4 local ranks takes 4,199,424 bytes with the
# preferred rings (8,192 cells) and 2,102,272 with the least (4,096). The
# /dev/shm cases run tests/mpi/containers/fill_rings.c (every rank sends
# every other one 20 windows of 64 x 4 KiB, checked byte by byte, so every
# ring wraps round and each of its pages is written) on a fresh tmpfs of
# the size given:
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
# Then each rank in a PID namespace of its own (one /dev/shm), where a
# peer's process id names another process, or none:
#   pidns-cma   np 2, address randomisation off (setarch -R: the probe
#               word of every rank is at the same address), the read
#               rendezvous: tests/mpi/big_checksum.c (64 MiB, checked).
#               Cross-memory attach to the pid a peer published would read
#               the wrong process (with a probe word of fixed value, a
#               rank read itself, and big_checksum found the bytes wrong):
#               each rank must refuse the peer's word ("does not hold the
#               peer's probe word ... come through the rings" at verbose
#               2), answer its read rendezvous as message rendezvous
#               (reads_declined in the finalize line) and pass, with no
#               checksum wrong.
#   pidns-cma-read  the same with mtl_rustofi_rndv_protocol read:
#               MPI_Init fails, naming the reason and the setting.
#   mixed-cma   np 2 on one host, rank 0 under a seccomp filter that
#               forbids cross-memory attach (tests/mpi/containers/no_cma.c)
#               and rank 1 not: rank 0 reports cma=off and rndv=msg, rank
#               1 cma=on and rndv=read; rank 0 answers rank 1's read
#               rendezvous as message rendezvous (reads_declined), and
#               big_checksum passes.
#   mixed-cma-tiny  the same pair with rank 1 under the filter and an
#               eager limit of 8 bytes (no room for data packets): rank 1
#               must say so, and the job must fail, not hang.
#   pidns-busy  np 3, the message rendezvous (no cross-memory attach),
#               each rank's pid 100 apart in its namespace so that none
#               names a rank in another's: tests/mpi/peerfail/peer_death.c
#               busy (rank 1 sleeps 5 s outside MPI while rank 0 waits on
#               it, peer_timeout 3) must pass. Asked about the published
#               pid, the kernel says no such process: a rank that did not
#               know the pid is of another namespace failed the receive
#               in under a second ("its process 5 has exited").
#   pidns-flood np 2, the same namespaces: tests/mpi/flood/flood.c sends
#               20,000 x 4 KiB to a rank asleep 5 s outside MPI, whose
#               ring fills: the sender asks now and then whether the
#               reader still exists, which it must not do by a pid of
#               another namespace (a build that did failed the sends:
#               "peer 1 can no longer be reached"); all must arrive.
# No case may print "Bus error" or report a rank killed by a signal.
# Environment: OMPI_PREFIX (Open MPI 5: see scripts/ompi-prefix.sh),
# RUSTOFI_MCA_DIR, OMPI_COMPONENT_DIR.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/ompi-prefix.sh
. "$REPO/scripts/ompi-prefix.sh"
BUILD_DIR=$RUSTOFI_TARGET/containers
mkdir -p "$BUILD_DIR"
FILL=$BUILD_DIR/fill_rings
FLOOD=$BUILD_DIR/flood
CHECKSUM=$BUILD_DIR/big_checksum
BUSY=$BUILD_DIR/peer_death
mpicc -O2 -o "$FILL" "$REPO/tests/mpi/containers/fill_rings.c"
mpicc -O2 -o "$FLOOD" "$REPO/tests/mpi/flood/flood.c"
mpicc -O2 -o "$CHECKSUM" "$REPO/tests/mpi/big_checksum.c"
NO_CMA=$BUILD_DIR/no_cma
mpicc -O2 -o "$NO_CMA" "$REPO/tests/mpi/containers/no_cma.c"
mpicc -O2 -pthread -o "$BUSY" "$REPO/tests/mpi/peerfail/peer_death.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mca_base_component_path=$RUSTOFI_MCA_DIR:$OMPI_COMPONENT_DIR
unset OMPI_MCA_pml OMPI_MCA_mtl
root_args=()
((OMPI_MAJOR >= 5)) && root_args=(--allow-run-as-root)
# peer_death's survivors leave without MPI_Finalize.
if ((OMPI_MAJOR >= 5)); then
    recovery=(--enable-recovery)
else
    recovery=(--mca orte_enable_recovery 1)
fi
NP=4
FAILED=0

fail() { echo "FAIL shm_containers $1: ${*:2}"; FAILED=1; CASE_FAILED=1; }

if [[ $(id -u) != 0 ]] || ! unshare -m true 2>/dev/null || ! unshare -p -f true 2>/dev/null; then
    fail setup "must run as root with mount and PID namespaces (unshare -m, unshare -p)"
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
# Runs the rest of the command line in a PID namespace of its own, where
# it has pid 2 + 100 x its rank (processes started first take the lower
# numbers): no rank's pid is that of a rank, or a thread of one, in
# another's namespace. (--kill-child: a rank left behind by a timeout
# goes with its namespace.)
with_pidns=(unshare --kill-child -p -f sh -c '
    r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-}}
    [ -n "$r" ] || { echo "no rank in the environment" >&2; exit 98; }
    i=0
    while [ $i -lt $((100 * r)) ]; do
        true & wait
        i=$((i + 1))
    done
    "$@"' sh)

# run_case NAME WHERE EXPECT(pass|fail) MCA-ARGS... [-- PROGRAM ARGS...]
# WHERE: job:SIZE (one tmpfs that mpirun and every rank inherit), rank:SIZE
# (each rank a tmpfs of its own, as in containers that share the host's
# name but not its /dev/shm), pidns (each rank a PID namespace of its own)
# or pidns-norand (each rank pid 1 of a PID namespace of its own, with
# address randomisation off: a peer's pid names this rank), or none (the
# ranks as mpirun starts them; the program may name app contexts). The program
# is fill_rings at np 4 (np 2 for rank: and pidns) unless given; CASE_NP
# and PASS_RE, when set, say the count and the line a passing run prints.
run_case() {
    local name=$1 where=$2 expect=$3 log=$BUILD_DIR/$1.log rc=0
    shift 3
    local -a mca=() prog=("$FILL") job=() rank=()
    while (($#)); do
        if [[ $1 == -- ]]; then
            shift
            prog=("$@")
            break
        fi
        mca+=("$1")
        shift
    done
    CASE_FAILED=0
    local np=$NP pass_re=${PASS_RE:-PASS fill_rings (}
    case $where in
        job:*) job=("${with_shm[@]}" "${where#job:}") ;;
        rank:*) rank=("${with_shm[@]}" "${where#rank:}") np=2 ;;
        pidns) rank=("${with_pidns[@]}") np=2 ;;
        pidns-norand) rank=(unshare --kill-child -p -f setarch -R) np=2 ;;
    esac
    np=${CASE_NP:-$np}
    timeout -k 10 180 "${job[@]}" \
        mpirun -np "$np" --oversubscribe --bind-to none "${root_args[@]}" \
        --mca btl self,tcp --mca mtl rustofi "${mca[@]}" "${rank[@]}" "${prog[@]}" \
        >"$log" 2>&1 || rc=$?
    if ((rc == 99)) || grep -aq 'cannot mount rustofi-room' "$log"; then
        fail "$name" "cannot mount a tmpfs on /dev/shm (log $log)"
        return
    fi
    if grep -aq 'no rank in the environment' "$log"; then
        fail "$name" "the PID namespace wrapper found no rank variable (log $log)"
        return
    fi
    if grep -aqiE 'bus error|signal 7|exited on signal' "$log"; then
        fail "$name" "a rank was killed by a signal (log $log)"
    fi
    case $expect in
        pass)
            # Not anchored: on 5.0 a NUL byte of show_help's output can
            # end up in front of it.
            if ((rc != 0)) || ! grep -aqF "$pass_re" "$log"; then
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
((CASE_FAILED)) || echo "ok   shm_containers roomy (8 MiB: 8,192 cells per ring, job passed on the rail)"

run_case shrunk job:3m pass --mca mtl_rustofi_verbose 2
want_each shrunk "rings shrunk to fit" \
    'ring_cells=4096 (fewer than 8192: no room for more in /dev/shm)'
want_each shrunk "finalize line on the rail" 'shm=rustofi-shm .*shm_peers=4 '
((CASE_FAILED)) || echo "ok   shm_containers shrunk (3 MiB: 4,096 cells per ring, job passed on the rail)"

room_msg='not enough room in /dev/shm for /dev/shm/rustofi1-.*need at least 2102272 bytes'
run_case refused job:1m pass
# A message through Open MPI's show_help, which 5.0 prints once for all
# ranks.
if [[ $(count "$BUILD_DIR/refused.log" "$room_msg") -lt 1 ]] ||
    [[ $(count "$BUILD_DIR/refused.log" 'The rustofi MTL disables itself') -lt 1 ]]; then
    fail refused "no message that /dev/shm has not enough room and the component disables itself"
fi
((CASE_FAILED)) || echo "ok   shm_containers refused (1 MiB, one host: message, component off, job passed on ob1)"

run_case refused-tcp job:1m pass --mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_verbose 1
want_each refused-tcp "the refusal" "$room_msg.*same-host peers use tcp"
want_each refused-tcp "finalize line over tcp" 'provider=tcp;ofi_rxm .*net_peers=4 shm_peers=0 '
((CASE_FAILED)) || echo "ok   shm_containers refused-tcp (1 MiB, tcp named: message, job passed over tcp)"

run_case refused-on job:1m fail --mca pml cm --mca mtl_rustofi_shm on
if [[ $(count "$BUILD_DIR/refused-on.log" "$room_msg") -lt 1 ]]; then
    fail refused-on "no message that /dev/shm has not enough room (log $BUILD_DIR/refused-on.log)"
fi
((CASE_FAILED)) || echo "ok   shm_containers refused-on (1 MiB, shm on: message, MPI_Init failed, no hang)"

# Each of two ranks in a /dev/shm of its own: each makes and maps its own
# object of the job's segment name, and neither may take the other for a
# peer on the rail (the rings it wrote would never be read: a hang).
other_msg='a rank on this host .* is in another shared-memory segment of this job'
run_case separate rank:8m fail --mca pml cm
if [[ $(count "$BUILD_DIR/separate.log" "$other_msg") -lt 1 ]]; then
    fail separate "no message that the peer is in another segment (log $BUILD_DIR/separate.log)"
fi
((CASE_FAILED)) || echo "ok   shm_containers separate (a /dev/shm per rank, no provider: message, MPI_Init failed, no hang)"

run_case separate-tcp rank:8m pass --mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_verbose 1
n=$(count "$BUILD_DIR/separate-tcp.log" 'provider=tcp;ofi_rxm .*net_peers=1 shm_peers=1 ')
((n == 2)) || fail separate-tcp "finalize lines with the other rank over tcp, itself on the rail: $n of 2"
((CASE_FAILED)) || echo "ok   shm_containers separate-tcp (a /dev/shm per rank, tcp named: the other rank over tcp, job passed)"


# Each rank in a PID namespace of its own, address randomisation off: a
# peer's pid names another process here (pid 1 names this rank itself,
# whose probe word is at the peer's address), which must be refused, not
# read from.
# Each rank then answers the other's read rendezvous as message
# rendezvous (the data through the rings), and says why at verbose 2.
PASS_RE='PASS big_checksum' run_case pidns-cma pidns-norand pass --mca pml cm \
    --mca mtl_rustofi_verbose 2 -- "$CHECKSUM"
if [[ $(count "$BUILD_DIR/pidns-cma.log" "does not hold the peer's probe word.*come through the rings") -ne 2 ]]; then
    fail pidns-cma "not both ranks said the peer's probe word is not there (log $BUILD_DIR/pidns-cma.log)"
fi
if [[ $(count "$BUILD_DIR/pidns-cma.log" 'checksum mismatch') -gt 0 ]]; then
    fail pidns-cma "a message was read from another process (log $BUILD_DIR/pidns-cma.log)"
fi
if [[ $(count "$BUILD_DIR/pidns-cma.log" 'shm=rustofi-shm .*reads_declined=[1-9]') -ne 2 ]]; then
    fail pidns-cma "not both ranks declined reads on the rail (log $BUILD_DIR/pidns-cma.log)"
fi
((CASE_FAILED)) || echo "ok   shm_containers pidns-cma (a PID namespace per rank: the wrong process's probe word refused, nothing read from it, large messages through the rings)"

# The same with reads asked for by name: MPI_Init fails, and says why.
run_case pidns-cma-read pidns-norand fail --mca pml cm \
    --mca mtl_rustofi_rndv_protocol read -- "$CHECKSUM"
if [[ $(count "$BUILD_DIR/pidns-cma-read.log" "does not hold the peer's probe word.*rndv_protocol is read") -lt 1 ]]; then
    fail pidns-cma-read "no message that the peer cannot be read (log $BUILD_DIR/pidns-cma-read.log)"
fi
((CASE_FAILED)) || echo "ok   shm_containers pidns-cma-read (the same with rndv_protocol read: MPI_Init fails with the reason)"

# Ranks of one host that differ: rank 0 under a seccomp filter that
# forbids cross-memory attach (tests/mpi/containers/no_cma.c), rank 1
# without. Rank 1 sends read rendezvous, which rank 0 answers as message
# rendezvous; rank 0 sends message rendezvous. Every transfer of
# big_checksum (both ways, and both at once) arrives intact.
CASE_NP=1 PASS_RE='PASS big_checksum' run_case mixed-cma none pass --mca pml cm \
    --mca mtl_rustofi_verbose 2 -- "$NO_CMA" "$CHECKSUM" : -np 1 "$CHECKSUM"
if grep -aq 'no_cma: cannot' "$BUILD_DIR/mixed-cma.log"; then
    fail mixed-cma "the seccomp filter could not be set (log $BUILD_DIR/mixed-cma.log)"
fi
if [[ $(count "$BUILD_DIR/mixed-cma.log" 'local_rank=0 of 2 .*cma=off (process_vm_readv.*not permitted.*rndv=msg') -ne 1 ]] ||
    [[ $(count "$BUILD_DIR/mixed-cma.log" 'local_rank=1 of 2 .*cma=on rndv=read') -ne 1 ]]; then
    fail mixed-cma "rank 0 without and rank 1 with cross-memory attach expected (log $BUILD_DIR/mixed-cma.log)"
fi
if [[ $(count "$BUILD_DIR/mixed-cma.log" 'rank=0 .*shm=rustofi-shm .*reads_declined=[1-9]') -ne 1 ]]; then
    fail mixed-cma "rank 0 declined no read rendezvous (log $BUILD_DIR/mixed-cma.log)"
fi
((CASE_FAILED)) || echo "ok   shm_containers mixed-cma (one rank without cross-memory attach: its peer's read rendezvous come as data packets, 64 MiB both ways intact)"

# The same pair the other way round (rank 1 without cross-memory attach,
# so that rank 0's read rendezvous comes first) with an eager limit of 8
# bytes, which leaves no room for data packets: rank 1 cannot answer with
# a grant either, and both ranks fail the message with a message, no hang.
CASE_NP=1 run_case mixed-cma-tiny none fail --mca pml cm --mca mtl_rustofi_eager_limit 8 \
    -- "$CHECKSUM" 100000 : -np 1 "$NO_CMA" "$CHECKSUM" 100000
if [[ $(count "$BUILD_DIR/mixed-cma-tiny.log" 'cannot, and the eager limit of 8 bytes leaves no room for data packets') -ne 1 ]]; then
    fail mixed-cma-tiny "rank 1 did not say why it failed the message (log $BUILD_DIR/mixed-cma-tiny.log)"
fi
((CASE_FAILED)) || echo "ok   shm_containers mixed-cma-tiny (the same with an 8-byte eager limit: the message fails on both ranks, with the reason, no hang)"

# A busy peer in another PID namespace is not taken for dead on the word
# of this namespace's process table.
CASE_NP=3 PASS_RE='RESULT busy ok' run_case pidns-busy pidns pass "${recovery[@]}" --mca pml cm \
    --mca mtl_rustofi_rndv_protocol msg --mca mtl_rustofi_peer_timeout 3 -- "$BUSY" busy 5
if [[ $(count "$BUILD_DIR/pidns-busy.log" 'has exited') -gt 0 ]]; then
    fail pidns-busy "a live peer was taken for dead (log $BUILD_DIR/pidns-busy.log)"
fi
((CASE_FAILED)) || echo "ok   shm_containers pidns-busy (a PID namespace per rank: a peer busy 5 s outside MPI is not failed)"

# The same sender, its ring full: a full ring makes the rail ask whether
# the reader still exists, by its pid, which must not be asked here.
PASS_RE='PASS flood' run_case pidns-flood pidns pass --mca pml cm \
    --mca mtl_rustofi_rndv_protocol msg -- "$FLOOD" 20000 4096 5000
if [[ $(count "$BUILD_DIR/pidns-flood.log" 'can no longer be reached') -gt 0 ]]; then
    fail pidns-flood "a live reader was taken for dead (log $BUILD_DIR/pidns-flood.log)"
fi
((CASE_FAILED)) || echo "ok   shm_containers pidns-flood (a PID namespace per rank: 20,000 x 4 KiB to a reader asleep 5 s, its ring full, all arrive)"

exit $FAILED
