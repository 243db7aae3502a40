#!/usr/bin/env bash
# Multi-host test for mtl_rustofi: two "hosts" h1 and h2 are Linux network
# namespaces on this machine, each with one veth (eth0, 10.77.0.1/24 and
# 10.77.0.2/24) into a bridge that lives in a third namespace (rustofi-br).
# mpirun runs inside h1 with hostname h1 and reaches h2 through
# tests/multihost/agent.sh (an ssh stand-in), so the two ranks run in different
# network namespaces and can only talk over the veth link: the component must
# publish a usable fabric address through the modex and carry the MPI traffic
# over libfabric's tcp provider. With two ranks per host, same-host pairs
# talk over the shm rail and cross-host pairs over tcp at the same time,
# under one matching engine (wildcard receives see both).
#
#   tests/multihost.sh            (root; BUILD_DIR overrides target/multihost)
#   OMPI_PREFIX=/opt/openmpi-5.0 tests/multihost.sh
#                                 the same on the Open MPI installed there, with
#                                 the component of `scripts/build --ompi PREFIX`
#
# Prints "ok   multihost NAME" or "FAIL multihost NAME: reason" per check and
# exits nonzero if any check failed.  Namespaces left from an earlier run are
# removed first, and everything is removed again at exit.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/.." && pwd)
. "$ROOT/scripts/env.sh"
# shellcheck source=tests/lib/counters.sh
. "$ROOT/tests/lib/counters.sh"

AGENT="$here/multihost/agent.sh"
BUILD_DIR="${BUILD_DIR:-$RUSTOFI_TARGET/multihost}"
BRIDGE_NS=rustofi-br
HOSTS=(h1 h2)
ADDRS=(10.77.0.1 10.77.0.2)
IFACE=eth0
RUN_TIMEOUT=120
MIB=$((1024 * 1024))

TEST_NAME=multihost
# shellcheck source=tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"

# One bridge, one interface per host: setup_one_bridge (tests/lib/netns.sh).
setup() {
    setup_one_bridge
}

# Byte counter (rx_bytes or tx_bytes) of the veth inside h2.
h2_counter() {
    ip netns exec "${HOSTS[1]}" cat "/sys/class/net/$IFACE/statistics/$1"
}

# mpirun inside h1 (hostname h1), NP ranks spread evenly over the hosts
# (NP/2 per host).  Output to file $1.
# Launcher (runtime) parameters: Open MPI 5's mpirun is PRRTE's, which
# takes them as --prtemca, and its rsh launcher is called ssh.
if ((OMPI_MAJOR >= 5)); then
    RTE_MCA=--prtemca PLM_AGENT=plm_ssh_agent
else
    RTE_MCA=--mca PLM_AGENT=plm_rsh_agent
fi
run_mpi() {
    local out=$1 np=$2
    shift 2
    timeout -k 10 "$RUN_TIMEOUT" \
        ip netns exec "${HOSTS[0]}" unshare --uts \
        sh -c 'hostname "$0" && exec "$@"' "${HOSTS[0]}" \
        mpirun -np "$np" --hostfile "$tmp/hostfile$((np / 2))" --bind-to none \
        --map-by node --oversubscribe \
        "$RTE_MCA" "$PLM_AGENT" "$AGENT" \
        "$RTE_MCA" oob_tcp_if_include "$IFACE" \
        -x FI_TCP_IFACE="$IFACE" \
        -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
        -x OMPI_MCA_mca_base_component_path \
        "$@" </dev/null >"$out" 2>&1 &
    # wait (unlike a foreground command) lets the INT/TERM traps run at once.
    wait $!
}

# check_test NAME NP MIN_RX MIN_TX NET SHM: runs BUILD_DIR/NAME over mtl
# rustofi (shm rail on its default, auto) with NP ranks, and checks exit
# code, PASS line, per-rank counters (each rank reaches NET peers over tcp
# and SHM over shm, itself included) and the veth byte counters of h2
# (received and sent bytes must grow by at least MIN_RX and MIN_TX).
check_test() {
    local name=$1 np=$2 min_rx=$3 min_tx=$4 want_net=$5 want_shm=$6
    local out="$tmp/$1-np$2.out" label="$1 np$2"
    local rx0 tx0 rx1 tx1 rc r line sent recv n net shm
    rx0=$(h2_counter rx_bytes) && tx0=$(h2_counter tx_bytes) || {
        fail "$label" "cannot read the byte counters of $IFACE in ${HOSTS[1]}"
        return
    }
    run_mpi "$out" "$np" --mca mtl rustofi --mca mtl_rustofi_provider_include tcp \
        --mca mtl_rustofi_verbose 1 "$BUILD_DIR/$name"
    rc=$?
    rx1=$(h2_counter rx_bytes)
    tx1=$(h2_counter tx_bytes)
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        fail "$label" "timed out after ${RUN_TIMEOUT}s (exit code $rc)"
        show_tail "$label" "$out"
        return
    fi
    if [ "$rc" -ne 0 ]; then
        fail "$label" "mpirun exit code $rc"
        show_tail "$label" "$out"
        return
    fi
    if ! grep -q "^PASS $name\$" "$out"; then
        fail "$label" "no 'PASS $name' line in the output"
        show_tail "$label" "$out"
        return
    fi
    for r in $(seq 0 $((np - 1))); do
        # Rank r's counter lines on tcp;ofi_rxm with numeric counters.
        line=$(awk -v r="$r" "$COUNTERS_AWK"'
            counter_fields(f) && f["rank"] == r && f["provider"] == "tcp;ofi_rxm" \
                && f["shm"] == "rustofi-shm" && f["net_peers"] ~ /^[0-9]+$/ \
                && f["shm_peers"] ~ /^[0-9]+$/ && f["sent_msgs"] ~ /^[0-9]+$/ \
                && f["sent_bytes"] ~ /^[0-9]+$/ && f["recv_msgs"] ~ /^[0-9]+$/ {
                print counter_line
            }' "$out")
        n=$(grep -c . <<<"$line")
        if [ "$n" -ne 1 ]; then
            fail "$label" "expected 1 counter line 'rustofi: rank=$r provider=tcp;ofi_rxm ...', found $n"
            show_tail "$label" "$out"
            return
        fi
        sent=$(counter_field "$line" sent_msgs)
        recv=$(counter_field "$line" recv_msgs)
        net=$(counter_field "$line" net_peers)
        shm=$(counter_field "$line" shm_peers)
        if [ "$sent" -eq 0 ] || [ "$recv" -eq 0 ]; then
            fail "$label" "rank $r counted no traffic (sent_msgs=$sent recv_msgs=$recv)"
            show_tail "$label" "$out"
            return
        fi
        if [ "$net" -ne "$want_net" ] || [ "$shm" -ne "$want_shm" ]; then
            fail "$label" "rank $r reaches $net peers over tcp and $shm over shm, expected $want_net and $want_shm"
            show_tail "$label" "$out"
            return
        fi
    done
    if [ $((rx1 - rx0)) -lt "$min_rx" ] || [ $((tx1 - tx0)) -lt "$min_tx" ]; then
        fail "$label" "$IFACE in ${HOSTS[1]} received $((rx1 - rx0)) and sent $((tx1 - tx0)) bytes, expected at least $min_rx and $min_tx"
        show_tail "$label" "$out"
        return
    fi
    ok "$label (${HOSTS[1]} $IFACE rx +$((rx1 - rx0)) tx +$((tx1 - tx0)) bytes)"
}

if [ "$(id -u)" -ne 0 ]; then
    fail setup "must run as root (creates network namespaces)"
    exit 1
fi
trap cleanup EXIT
# Interrupted: report it, then let the EXIT trap tear down (processes killed
# there would otherwise each be reported by the shell).
trap 'echo "FAIL multihost interrupted"; exec 2>/dev/null; exit 130' INT
trap 'echo "FAIL multihost interrupted"; exec 2>/dev/null; exit 143' TERM

teardown
tmp=$(mktemp -d /tmp/rustofi-multihost.XXXXXX)

if ! setup >"$tmp/setup.out" 2>&1; then
    fail setup "cannot create the namespaces"
    show_tail setup "$tmp/setup.out"
    exit 1
fi
: >"$tmp/hostfile1"
: >"$tmp/hostfile2"
for i in "${!HOSTS[@]}"; do
    echo "${ADDRS[$i]} slots=1" >>"$tmp/hostfile1"
    echo "${ADDRS[$i]} slots=2" >>"$tmp/hostfile2"
done
# agent.sh maps the hostfile addresses to namespace and host names.
export RUSTOFI_MH_HOSTS=""
for i in "${!HOSTS[@]}"; do
    RUSTOFI_MH_HOSTS+="${ADDRS[$i]}=${HOSTS[$i]} "
done

if [ ! -f "$RUSTOFI_MCA_DIR/mca_mtl_rustofi.so" ]; then
    if ! "$ROOT/scripts/build" ${OMPI_PREFIX:+--ompi "$OMPI_PREFIX"} >"$tmp/build.out" 2>&1; then
        fail build "scripts/build failed"
        show_tail build "$tmp/build.out"
        exit 1
    fi
fi
mkdir -p "$BUILD_DIR"
for t in order_wildcard big_checksum; do
    if ! mpicc -O2 -pthread -o "$BUILD_DIR/$t" "$ROOT/tests/mpi/$t.c" >"$tmp/cc-$t.out" 2>&1; then
        fail "$t" "compiling tests/mpi/$t.c failed"
        show_tail "mpicc $t" "$tmp/cc-$t.out"
        exit 1
    fi
done

# The two ranks run on different hosts: rank 0 on h1, rank 1 on h2.
out="$tmp/hosts.out"
run_mpi "$out" 2 sh -c 'echo "rank=$OMPI_COMM_WORLD_RANK host=$(hostname)"'
rc=$?
want=$(printf 'rank=0 host=%s\nrank=1 host=%s' "${HOSTS[0]}" "${HOSTS[1]}")
got=$(grep '^rank=' "$out" | sort)
if [ "$rc" -ne 0 ]; then
    fail hosts "mpirun exit code $rc"
    show_tail hosts "$out"
elif [ "$got" != "$want" ]; then
    fail hosts "ranks did not run on ${HOSTS[0]} and ${HOSTS[1]}: $(tr '\n' ' ' <<<"$got")"
    show_tail hosts "$out"
else
    ok "hosts (rank 0 on ${HOSTS[0]}, rank 1 on ${HOSTS[1]})"
fi

# order_wildcard: rank 1 (h2) sends 1,421,980 payload bytes to rank 0.
# One rank per host: the peer over tcp, itself over shm.
check_test order_wildcard 2 0 1421980 1 1
# big_checksum: 64 MiB messages in both directions.
check_test big_checksum 2 $((64 * MIB)) $((64 * MIB)) 1 1
# Two ranks per host (--map-by node: ranks 0, 2 on h1 and 1, 3 on h2):
# every rank receives by wildcard from a same-host peer over shm and a
# remote one over tcp at once.
check_test order_wildcard 4 0 1421980 2 2
check_test big_checksum 4 $((64 * MIB)) $((64 * MIB)) 2 2

if [ "$failures" -ne 0 ]; then
    echo "multihost: $failures check(s) failed"
    exit 1
fi
echo "multihost: all checks passed"
