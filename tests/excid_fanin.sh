#!/usr/bin/env bash
# Open MPI 5: a communicator made through MPI sessions needs the index
# exchange (each member indexes it its own way), and a rank may get a
# peer's index message before it has the communicator itself: such a
# message waits in a list until the rank registers the communicator, which
# must then answer it (a peer whose message is never answered waits for
# the answer for good).
#
# Usage: tests/excid_fanin.sh [NP]      (default 8)
#
# tests/mpi/oneshot/sessions_fanin.c at NP ranks on this host (the
# component's own shared-memory transport alone, no libfabric): every rank
# sends to rank 0 on a new sessions communicator, rank 0 answers each.
# 1. With mtl_rustofi_fault_inject late_comm (rank 0 drives progress for
#    3 s before it registers the communicator): the job passes, and rank
#    0's finalize line says index messages waited for the communicator
#    (excid_waited >= 1), so the test took the path it is about. With a
#    peer timeout of 1 s, a rank whose send waits that long for rank 0's
#    index says so (a rank that never made the communicator would leave
#    it waiting for good): the log must hold that line.
# 2. Without the fault: the job passes (how many messages waited is
#    printed, not checked: usually none, but a rank descheduled while it
#    registers the communicator may see some).
# 3. Rank 0 away from MPI for 1 s once it has the communicator: every
#    peer's index message is there when it next drives progress, so the
#    index receive, posted again from its completion, finds the next ones
#    queued and completes inside the post. Rank 0's finalize line must
#    show that (excid_queued >= 2) and that it handled them one after the
#    other, not one call deeper each (excid_depth = 1; a build that nested
#    reached 5 here, and would overflow its stack at thousands of ranks).
# 4. With mtl_rustofi_fault_inject excid_lost: rank 0's first index
#    message (its answer to the first peer heard from) is held back and
#    reported failed once that peer's index is here, so the failure finds
#    the two crossed; the peer waits for rank 0's index, which must be sent
#    again: the job passes and rank 0 reports excid_failed=1 (a build that
#    did not send it again left that peer waiting for good).
# Environment: OMPI_PREFIX (an Open MPI 5 install, see
# scripts/ompi-prefix.sh), RUSTOFI_MCA_DIR, OMPI_COMPONENT_DIR.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/ompi-prefix.sh
. "$REPO/scripts/ompi-prefix.sh"
np=${1:-8}
[[ "$np" =~ ^[0-9]+$ ]] && ((np >= 2)) || { echo "usage: $0 [NP >= 2]" >&2; exit 2; }
((OMPI_MAJOR >= 5)) || { echo "excid_fanin: needs Open MPI 5 (OMPI_PREFIX)" >&2; exit 2; }
BUILD_DIR=$RUSTOFI_TARGET/excid_fanin
mkdir -p "$BUILD_DIR"
mpicc -O2 -o "$BUILD_DIR/sessions_fanin" "$REPO/tests/mpi/oneshot/sessions_fanin.c"
# shellcheck source=lib/mpienv.sh
. "$REPO/tests/lib/mpienv.sh"
fails=0
run() { # FAULT PAUSE [MCA args]: runs the job; prints how many messages waited at rank 0
  local fault=$1 pause=$2 log=$BUILD_DIR/np$np.$1.$2.log rc start=$SECONDS
  shift 2
  # btl ^ofi: Open MPI 5's btl/ofi would initialise libfabric in every rank.
  set +e
  timeout -k 10 120 mpirun -np "$np" --oversubscribe --bind-to none \
    --mca pml cm --mca mtl rustofi --mca btl ^ofi \
    --mca mtl_rustofi_fault_inject "$fault" --mca mtl_rustofi_verbose 1 "$@" \
    "$BUILD_DIR/sessions_fanin" "$pause" >"$log" 2>&1
  rc=$?
  set -e
  if [ $rc -ne 0 ] || ! grep -q "PASS sessions_fanin $np ranks" "$log"; then
    echo "FAIL: excid_fanin np $np, fault_inject $fault: exit $rc after $((SECONDS - start))s ($log)" >&2
    grep -m5 -E "FAIL|mtl_rustofi:" "$log" >&2 || true
    echo -1
    return
  fi
  sed -n 's/.*rank 0 communicator index exchanges .*excid_waited=\([0-9]*\).*/\1/p' "$log" | grep . ||
    echo -2
}
rank0() { # FIELD LOG: a field of rank 0's finalize line
  sed -n "s/.*rank 0 communicator index exchanges .*$1=\\([0-9]*\\).*/\\1/p" "$2"
}
judge() { # STATUS WHAT OK-TEXT FAIL-TEXT: prints a run's verdict, counts failures
  if [ "$1" = 0 ]; then
    echo "ok: excid_fanin np $np, $2: $3"
  else
    echo "FAIL: excid_fanin np $np, $2: $4"
    fails=$((fails + 1))
  fi
}
said="has waited [0-9]* s for that rank's index of the communicator"
waited=$(run late_comm 0 --mca mtl_rustofi_peer_timeout 1)
log=$BUILD_DIR/np$np.late_comm.0.log
st=0
[ "$waited" -ge 1 ] && grep -q "$said" "$log" || st=1
judge $st late_comm "$waited index message(s) waited for the communicator and were answered; $(grep -c "$said" "$log") wait(s) reported: $(grep -m1 "$said" "$log")" \
  "excid_waited=$waited (want >= 1), and a send that waited must say so ($log)"
waited=$(run none 0)
st=0
[ "$waited" -ge 0 ] || st=1
judge $st "no fault" "passed ($waited index message(s) waited)" "excid_waited: $waited"
waited=$(run none 1)
log=$BUILD_DIR/np$np.none.1.log
queued=$(rank0 excid_queued "$log")
depth=$(rank0 excid_depth "$log")
st=0
[ "$waited" -ge 0 ] && [ "${queued:-0}" -ge 2 ] && [ "$depth" = 1 ] || st=1
judge $st "rank 0 away 1 s" "$queued index message(s) found queued by the re-posted receive, handled one call deep" \
  "waited=$waited excid_queued=${queued:-?} (want >= 2) excid_depth=${depth:-?} (want 1) ($log)"
waited=$(run excid_lost 0)
log=$BUILD_DIR/np$np.excid_lost.0.log
failed=$(rank0 excid_failed "$log")
st=0
[ "$waited" -ge 0 ] && [ "$failed" = 1 ] && grep -q "fault_inject excid_lost: the index message to rank" "$log" || st=1
judge $st excid_lost "rank 0's first index message failed after the peer's crossed it, was sent again, and the job passed" \
  "waited=$waited excid_failed=${failed:-?} (want 1) ($log)"
exit $((fails > 0))
