#!/usr/bin/env bash
# Peer failure across two hosts (network namespaces h1 and h2 joined by a
# bridge, as in tests/multihost.sh): the peer on the other host is reached
# over libfabric's tcp provider only, so its death is found by the
# transport (a liveness probe's send fails once its connection is reset),
# not by a process check.
#
#   tests/multihost_peerfail.sh            (root)
#   tests/multihost_peerfail.sh --silent   also measure a silent host
#
# Runs tests/mpi/peerfail/peer_death.c at np 3 (--map-by node: ranks 0 and 2
# on h1, rank 1 on h2), the runtime keeping survivors alive
# (orte_enable_recovery), mtl_rustofi_peer_timeout 5:
#   rndv_send, rndv_recv, eager_recv, probe: rank 1 (h2) kills itself; rank
#   0's operation towards it must fail within BOUND seconds and rank 0 still
#   receives from rank 2 with MPI_ANY_SOURCE;
#   busy: rank 1 (h2) sleeps 10 s outside MPI while rank 0 waits in a
#   receive from it (peer timeout 5 here): the receive must succeed.
# --silent (a measurement, not a pass/fail check): rank 1 waits outside MPI,
# the script takes h2's link down and kills rank 1, and reports how long rank
# 0's receive from it waited (capped at SILENT_CAP s), first with the
# kernel's default TCP retransmission limit, then with
# net.ipv4.tcp_retries2=5 in h1.
# Prints "ok   multihost_peerfail NAME ..." or "FAIL ..." per check.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/.." && pwd)
. "$ROOT/scripts/env.sh"

AGENT="$here/multihost/agent.sh"
BUILD_DIR="${BUILD_DIR:-$RUSTOFI_TARGET/multihost_peerfail}"
BRIDGE_NS=rustofi-br
HOSTS=(h1 h2)
ADDRS=(10.77.0.1 10.77.0.2)
IFACE=eth0
RUN_TIMEOUT=${RUN_TIMEOUT:-90}
BOUND=20
SILENT_CAP=${SILENT_CAP:-70}
SILENT=0
[ "${1:-}" = "--silent" ] && SILENT=1

TEST_NAME=multihost_peerfail
# shellcheck source=tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"

# One bridge, one interface per host: setup_one_bridge (tests/lib/netns.sh).
setup() {
    setup_one_bridge
}

if ((OMPI_MAJOR >= 5)); then
    RTE_MCA=--prtemca PLM_AGENT=plm_ssh_agent RECOVERY=(--enable-recovery)
else
    RTE_MCA=--mca PLM_AGENT=plm_rsh_agent RECOVERY=(--mca orte_enable_recovery 1)
fi

# start_mpi OUT MODE: mpirun inside h1 in the background (pid in MPI_PID).
start_mpi() {
    local out=$1 mode=$2
    timeout -k 10 "$RUN_TIMEOUT" \
        ip netns exec "${HOSTS[0]}" unshare --uts \
        sh -c 'hostname "$0" && exec "$@"' "${HOSTS[0]}" \
        mpirun -np 3 --hostfile "$tmp/hostfile" --bind-to none --map-by node --oversubscribe \
        "$RTE_MCA" "$PLM_AGENT" "$AGENT" \
        "$RTE_MCA" oob_tcp_if_include "$IFACE" \
        "${RECOVERY[@]}" \
        -x FI_TCP_IFACE="$IFACE" \
        -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
        -x OMPI_MCA_mca_base_component_path \
        --mca pml cm --mca mtl rustofi --mca mtl_rustofi_provider_include tcp \
        --mca mtl_rustofi_peer_timeout 5 ${MH_EXTRA:-} \
        "$BUILD_DIR/peer_death" "$mode" </dev/null >"$out" 2>&1 &
    MPI_PID=$!
}

# Rank 0's "RESULT mode outcome seconds" line.
result_of() { awk -v m="$2" '$1 == "RESULT" && $2 == m { print $3, $4 }' "$1"; }

kill_case() {
    local mode=$1 out="$tmp/$1.out" rc result want=error
    [ "$mode" = busy ] && want=ok
    start_mpi "$out" "$mode"
    wait "$MPI_PID"
    rc=$?
    result=$(result_of "$out" "$mode")
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        fail "$mode" "the job did not end within ${RUN_TIMEOUT}s"
        show_tail "$mode" "$out"
    elif [ "${result%% *}" != "$want" ]; then
        fail "$mode" "rank 0's operation on rank 1 ended '${result%% *}', expected '$want' (exit $rc)"
        show_tail "$mode" "$out"
    elif [ "$want" = error ] && awk -v b=$BOUND '{ exit !($2 > b) }' <<<"$result"; then
        fail "$mode" "the error took ${result#* } s (bound $BOUND s)"
    elif ! grep -q '^PASS peer_death' "$out"; then
        fail "$mode" "no PASS (the ANY_SOURCE receive from rank 2?)"
        show_tail "$mode" "$out"
    else
        ok "$mode (rank 1 on ${HOSTS[1]}): ${result%% *} after ${result#* } s"
    fi
}

# silent_case LABEL: h2's link goes down and rank 1 is killed while rank 0
# waits in a receive from it; prints how long rank 0 waited.
silent_case() {
    local label=$1 out="$tmp/silent-$1.out" pid="" i t0 result
    start_mpi "$out" silent
    for ((i = 0; i < 300; i++)); do
        pid=$(awk '$1 == "READY" { print $2 }' "$out")
        [ -n "$pid" ] && break
        sleep 0.1
    done
    if [ -z "$pid" ]; then
        fail "silent $label" "rank 1 never got ready"
        show_tail "silent $label" "$out"
        kill "$MPI_PID" 2>/dev/null
        wait "$MPI_PID"
        return
    fi
    sleep 1
    t0=$(date +%s.%N)
    ip -n "${HOSTS[1]}" link set "$IFACE" down
    kill -KILL "$pid"
    for ((i = 0; i < SILENT_CAP * 10; i++)); do
        result=$(result_of "$out" silent)
        [ -n "$result" ] && break
        kill -0 "$MPI_PID" 2>/dev/null || break
        sleep 0.1
    done
    local waited
    waited=$(echo "$(date +%s.%N) - $t0" | bc)
    if [ -n "$result" ]; then
        ok "silent $label: rank 0's receive ended ${result%% *} $(printf '%.1f' "$waited") s after the cut"
    elif kill -0 "$MPI_PID" 2>/dev/null; then
        ok "silent $label: rank 0 still waiting $(printf '%.0f' "$waited") s after the cut (measurement capped)"
    else
        ok "silent $label: the job ended without a result $(printf '%.1f' "$waited") s after the cut"
        show_tail "silent $label" "$out"
    fi
    kill "$MPI_PID" 2>/dev/null
    wait "$MPI_PID" 2>/dev/null
    teardown
    setup >/dev/null 2>&1 || fail "silent $label" "cannot rebuild the namespaces"
}

if [ "$(id -u)" -ne 0 ]; then
    fail setup "must run as root (creates network namespaces)"
    exit 1
fi
trap cleanup EXIT
trap 'echo "FAIL multihost_peerfail interrupted"; exec 2>/dev/null; exit 130' INT
trap 'echo "FAIL multihost_peerfail interrupted"; exec 2>/dev/null; exit 143' TERM

teardown
tmp=$(mktemp -d /tmp/rustofi-mh-peerfail.XXXXXX)
if ! setup >"$tmp/setup.out" 2>&1; then
    fail setup "cannot create the namespaces"
    show_tail setup "$tmp/setup.out"
    exit 1
fi
: >"$tmp/hostfile"
export RUSTOFI_MH_HOSTS=""
for i in "${!HOSTS[@]}"; do
    echo "${ADDRS[$i]} slots=2" >>"$tmp/hostfile"
    RUSTOFI_MH_HOSTS+="${ADDRS[$i]}=${HOSTS[$i]} "
done
mkdir -p "$BUILD_DIR"
if ! mpicc -O2 -Wall -Werror -o "$BUILD_DIR/peer_death" "$ROOT/tests/mpi/peerfail/peer_death.c" \
    >"$tmp/cc.out" 2>&1; then
    fail build "compiling peer_death.c failed"
    show_tail build "$tmp/cc.out"
    exit 1
fi

for mode in ${MH_MODES:-rndv_send rndv_recv eager_recv probe busy}; do
    kill_case "$mode"
done
if [ $SILENT -eq 1 ]; then
    silent_case default
    ip netns exec "${HOSTS[0]}" sysctl -qw net.ipv4.tcp_retries2=5
    silent_case tcp_retries2=5
fi
if [ "$failures" -ne 0 ]; then
    echo "multihost_peerfail: $failures check(s) failed"
    exit 1
fi
echo "multihost_peerfail: all checks passed"
