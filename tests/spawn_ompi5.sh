#!/usr/bin/env bash
# MPI_Comm_spawn on Open MPI 5.0 (tests/mpi/oneshot/spawn_child.c).
#
# Usage: OMPI_PREFIX=/opt/openmpi-5.0 tests/spawn_ompi5.sh
#
# 1. With tcp named, the parent sends to its child with MPI_Send, and
#    again with MPI_Isend + MPI_Wait, right before MPI_Comm_disconnect:
#    the child receives 42 (the first send to a new peer meets rxm's
#    connection set-up; the packet must reach the provider before the
#    disconnect's fence, which drives no MPI progress).
# 2. A peer that no rail reaches fails every call on it, receives and
#    probes included, instead of leaving a receive from it waiting.
#    Open MPI 5.0 adds peers on first use, so a job on one host with no
#    provider named (the shared-memory rail alone, btl/ofi off so that
#    libfabric is not initialised by Open MPI itself) can spawn a child:
#    the child is another job, which that rail cannot reach. The parent
#    then sends to the child and receives from it; the child receives
#    from its parent and answers ("reply", with MPI_ERRORS_RETURN). Each
#    of the four calls must return an error code, the component must name
#    the remedy, and the job must end within the timeout. (Open MPI 4.1
#    adds the child's peers at the spawn, which fails
#    there: tests/one_host.sh.)
# Environment: OMPI_PREFIX (an Open MPI 5), RUSTOFI_MCA_DIR, OMPI_COMPONENT_DIR.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/ompi-prefix.sh
. "$REPO/scripts/ompi-prefix.sh"
if [ "${OMPI_MAJOR:-0}" -lt 5 ]; then
  echo "FAIL: needs Open MPI 5 (OMPI_PREFIX); 4.1 is covered by tests/one_host.sh" >&2
  exit 2
fi
BUILD_DIR=$RUSTOFI_TARGET/spawn_ompi5
mkdir -p "$BUILD_DIR"
mpicc -O2 -o "$BUILD_DIR/spawn_child" "$REPO/tests/mpi/oneshot/spawn_child.c"
# shellcheck source=lib/mpienv.sh
. "$REPO/tests/lib/mpienv.sh"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for mode in send isend; do
  log=$BUILD_DIR/named-$mode.log
  if timeout -k 10 60 mpirun --bind-to none -np 1 --mca pml cm --mca mtl rustofi \
    --mca mtl_rustofi_provider_include tcp "$BUILD_DIR/spawn_child" $mode >"$log" 2>&1 &&
    grep -q '^SPAWN rc=0$' "$log" && grep -q '^CHILD got=42$' "$log"; then
    echo "ok: spawn with tcp named: the child receives from its parent ($mode, then disconnect)"
  else
    fail "spawn with tcp named, $mode ($log)"
  fi
done

log=$BUILD_DIR/reply.log
rc=0
timeout -k 10 60 mpirun --bind-to none -np 1 --mca pml cm --mca mtl rustofi --mca btl ^ofi \
  "$BUILD_DIR/spawn_child" reply >"$log" 2>&1 || rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  fail "the job did not end within 60 s ($log)"
fi
grep -q '^SPAWN rc=0$' "$log" || fail "the spawn did not succeed ($log)"
for call in "PARENT send" "PARENT recv" "CHILD recv" "CHILD send"; do
  line=$(grep "^$call rc=" "$log" || true)
  if [ -z "$line" ]; then
    fail "$call never returned ($log)"
  elif [ "$line" = "$call rc=0" ]; then
    fail "$call succeeded with no rail to its peer ($log)"
  fi
done
grep -q 'opened no network rail.*another job or host.*mtl_rustofi_provider_include' "$log" ||
  fail "no message naming the remedy ($log)"
if [ "$fails" = 0 ]; then
  echo "ok: a peer no rail reaches: send, receive (both sides) fail with an error, the job ends"
fi
[ "$fails" = 0 ]
