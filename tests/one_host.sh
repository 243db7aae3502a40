#!/usr/bin/env bash
# A job on one host with no provider named opens no libfabric endpoint.
#
# Usage: tests/one_host.sh
#
# 1. tests/mpi/collectives.c at np 4 with `--mca mtl rustofi` alone (and
#    FI_LOG_LEVEL=info, under which libfabric logs every provider it
#    registers when it initialises): every rank says at verbose 2 that
#    libfabric is not initialised, libfabric logs nothing, the program
#    passes, and every counter line reads provider=none, net_peers=0,
#    shm_peers=4, errors=0 with shared-memory bytes sent and received.
# 2. The same job with `mtl_rustofi_provider_include tcp`: libfabric does
#    log its providers (the check in 1 is not vacuous) and the counter lines
#    name tcp.
# 3. tests/mpi/oneshot/spawn_child.c (MPI_Comm_spawn) with `--mca mtl
#    rustofi` alone: the spawn fails with an MPI error code and the
#    component's message that names the remedy (no hang: mpirun ends under a
#    timeout); with `mtl_rustofi_provider_include tcp` the spawn succeeds
#    and the child receives 42 from its parent, sent with MPI_Send (and
#    again with MPI_Isend + MPI_Wait) right before MPI_Comm_disconnect.
# Runs on Open MPI 4.1 (scripts/test). Open MPI 5.0's btl/ofi initialises
# libfabric in every process itself (unless `--mca btl ^ofi`), and 5.0
# adds peers on first use, so there a spawn without a network rail reports
# the component's message at the first send instead of failing the spawn.
# Environment: RUSTOFI_MCA_DIR, OMPI_COMPONENT_DIR.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/ompi-prefix.sh
. "$REPO/scripts/ompi-prefix.sh"
# shellcheck source=lib/counters.sh
. "$REPO/tests/lib/counters.sh"
BUILD_DIR=$RUSTOFI_TARGET/one_host
mkdir -p "$BUILD_DIR"
mpicc -O2 -o "$BUILD_DIR/collectives" "$REPO/tests/mpi/collectives.c"
mpicc -O2 -o "$BUILD_DIR/spawn_child" "$REPO/tests/mpi/oneshot/spawn_child.c"
# shellcheck source=lib/mpienv.sh
. "$REPO/tests/lib/mpienv.sh"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
run() { # LOG SECONDS ARGS...
  local log=$1 secs=$2
  shift 2
  timeout -k 10 "$secs" mpirun --bind-to none --oversubscribe -x FI_LOG_LEVEL=info "$@" >"$log" 2>&1
}

log=$BUILD_DIR/alone.log
if run "$log" 120 -np 4 --mca mtl rustofi --mca mtl_rustofi_verbose 2 "$BUILD_DIR/collectives"; then
  n=$(grep -c 'libfabric is not initialised' "$log" || true)
  [ "$n" = 4 ] || fail "alone: $n of 4 ranks said libfabric is not initialised ($log)"
  if grep -q 'libfabric:' "$log"; then fail "alone: libfabric logged ($log)"; fi
  lines=$(counter_lines "$log")
  [ "$(echo "$lines" | grep -c .)" = 4 ] || fail "alone: not 4 counter lines ($log)"
  while read -r l; do
    [ -n "$l" ] || continue
    for kv in provider=none net_peers=0 shm_peers=4 errors=0; do
      [ "$(counter_field "$l" "${kv%=*}")" = "${kv#*=}" ] || fail "alone: $kv expected in: $l"
    done
    [ "$(counter_field "$l" shm_tx_bytes)" -gt 0 ] && [ "$(counter_field "$l" shm_rx_bytes)" -gt 0 ] ||
      fail "alone: no shared-memory traffic in: $l"
  done <<<"$lines"
  ok "np 4, no provider named: shm rail alone, libfabric silent"
else
  fail "alone: mpirun failed ($log)"
fi

log=$BUILD_DIR/named.log
if run "$log" 120 -np 4 --mca mtl rustofi --mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_verbose 1 "$BUILD_DIR/collectives"; then
  grep -q 'libfabric:' "$log" || fail "named: libfabric logged nothing; FI_LOG_LEVEL has no effect here ($log)"
  [ "$(counter_lines "$log" | grep -c 'provider=tcp;ofi_rxm')" = 4 ] || fail "named: counter lines do not name tcp ($log)"
  ok "np 4, tcp named: libfabric initialised"
else
  fail "named: mpirun failed ($log)"
fi

log=$BUILD_DIR/spawn-alone.log
run "$log" 60 -np 1 --mca mtl rustofi "$BUILD_DIR/spawn_child" || true
if grep -q '^SPAWN rc=0' "$log"; then
  fail "spawn alone: the spawn succeeded without a network rail ($log)"
elif grep -q '^SPAWN rc=' "$log" && grep -q 'opened no network rail.*another job or host.*mtl_rustofi_provider_include' "$log"; then
  ok "spawn without a provider: an MPI error and the component's message"
else
  fail "spawn alone: no error code or no message ($log)"
fi

# MPI_Send, then MPI_Isend + MPI_Wait ("isend"): either way the packet
# must have reached the provider when the call returns.
for mode in send isend; do
  log=$BUILD_DIR/spawn-named-$mode.log
  if run "$log" 60 -np 1 --mca mtl rustofi --mca mtl_rustofi_provider_include tcp "$BUILD_DIR/spawn_child" $mode &&
    grep -q '^SPAWN rc=0' "$log" && grep -q '^CHILD got=42' "$log"; then
    ok "spawn with tcp named: the child receives from its parent ($mode, then disconnect)"
  else
    fail "spawn named, $mode: ($log)"
  fi
done
echo "$fails failed"
[ "$fails" = 0 ]
