#!/usr/bin/env bash
# Multi-NIC test for mtl_rustofi: two "hosts" rn1 and rn2 are network
# namespaces with two interfaces each, eth0 (10.87.0.0/24) and eth1
# (10.88.0.0/24), each interface a veth into its own bridge (br0, br1) in a
# third namespace. libfabric's tcp provider lists one `tcp;ofi_rxm` domain
# per interface (eth0, eth1, lo), so each host has two "NICs". Every
# interface is capped with `tc tbf` (RATE, default 400mbit) so that a NIC's
# link, not the CPU, bounds what it carries. FI_TCP_IFACE is not set (it
# would hide all interfaces but one).
#
# Checks, 2 hosts x 2 ranks (--map-by node: ranks 0, 2 on rn1 and 1, 3 on
# rn2, so ranks 0 and 1 have local rank 0, ranks 2 and 3 local rank 1):
#   choice     every rank's verbose lines name the NIC of its local rank
#              (eth0 for 0, eth1 for 1; lo is skipped), and both of rn2's
#              interfaces received the data of the pair that uses them;
#   named      mtl_rustofi_nic eth1 puts every rank on eth1;
#   unknown    mtl_rustofi_nic eth9 is one error per rank, and the job runs
#              on pml ob1;
#   spread_bw  two pairs (0,1) and (2,3) move 64 MiB each at the same time;
#              the median aggregate over ROUNDS rounds with the ranks spread
#              over both NICs is at least 1.7x the one with every rank on
#              eth0 (mtl_rustofi_nic eth0): each NIC adds its link's worth.
#   stripe_bw  one pair (0 on rn1, 1 on rn2, both on eth0) moves 64 MiB:
#              with striping (the default: eth1 is a stripe NIC of both),
#              the median bandwidth over ROUNDS rounds is at least 1.7x the
#              one with mtl_rustofi_stripe 1; the counter lines name eth1
#              as the stripe NIC and the receiver read through it, and
#              rn2's eth1 received at least a third of the data.
#
#   tests/multinic.sh       (root; RATE=400mbit ROUNDS=5 override)
#
# Prints "ok   multinic NAME" or "FAIL multinic NAME: reason" per check and
# exits nonzero if any check failed. Namespaces left from an earlier run
# are removed first, and everything is removed again at exit.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/.." && pwd)
. "$ROOT/scripts/env.sh"
# shellcheck source=tests/lib/counters.sh
. "$ROOT/tests/lib/counters.sh"
unset FI_TCP_IFACE

AGENT="$here/multihost/agent.sh"
BUILD_DIR="${BUILD_DIR:-$RUSTOFI_TARGET/multinic}"
BRIDGE_NS=rustofi-nicbr
HOSTS=(rn1 rn2)
IFACES=(eth0 eth1)
SUBNETS=(10.87.0 10.88.0)
RATE=${RATE:-400mbit}
ROUNDS=${ROUNDS:-5}
MIN_RATIO=1.7
RUN_TIMEOUT=180
MIB=$((1024 * 1024))

TEST_NAME=multinic
# shellcheck source=tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"

setup() {
    local i j h ifc
    ip netns add "$BRIDGE_NS" || return 1
    ip -n "$BRIDGE_NS" link set lo up || return 1
    for j in "${!IFACES[@]}"; do
        ip -n "$BRIDGE_NS" link add "br$j" type bridge || return 1
        ip -n "$BRIDGE_NS" link set "br$j" up || return 1
    done
    for i in "${!HOSTS[@]}"; do
        h=${HOSTS[$i]}
        ip netns add "$h" || return 1
        ip -n "$h" link set lo up || return 1
        # A pair of ranks on different subnets routes through the other
        # interface one way; do not drop that as spoofed.
        ip netns exec "$h" sysctl -qw net.ipv4.conf.all.rp_filter=0 \
            net.ipv4.conf.default.rp_filter=0 || return 1
        for j in "${!IFACES[@]}"; do
            ifc=${IFACES[$j]}
            ip -n "$h" link add "$ifc" type veth peer name "v$j-$h" netns "$BRIDGE_NS" || return 1
            ip -n "$h" addr add "${SUBNETS[$j]}.$((i + 1))/24" dev "$ifc" || return 1
            ip -n "$h" link set "$ifc" up || return 1
            ip netns exec "$h" tc qdisc add dev "$ifc" root tbf rate "$RATE" burst 256kb latency 50ms \
                || return 1
            ip -n "$BRIDGE_NS" link set "v$j-$h" master "br$j" || return 1
            ip -n "$BRIDGE_NS" link set "v$j-$h" up || return 1
        done
    done
}

# rx_bytes of interface $1 inside rn2.
rn2_rx() {
    ip netns exec "${HOSTS[1]}" cat "/sys/class/net/$1/statistics/rx_bytes"
}

if ((OMPI_MAJOR >= 5)); then
    RTE_MCA=--prtemca PLM_AGENT=plm_ssh_agent
else
    RTE_MCA=--mca PLM_AGENT=plm_rsh_agent
fi
# run_mpi OUT ARGS...: mpirun inside rn1 (hostname rn1), NP ranks (default
# 4), spread over the hosts one by one.
# The four ranks share the machine's two cores (and other jobs'), so idle
# ranks yield: a rank spinning in a wait would otherwise starve the pair
# whose transfer it waits for, and the run would measure the CPU, not the
# links.
run_mpi() {
    local out=$1
    shift
    timeout -k 10 "$RUN_TIMEOUT" \
        ip netns exec "${HOSTS[0]}" unshare --uts \
        sh -c 'hostname "$0" && exec "$@"' "${HOSTS[0]}" \
        mpirun -np "${NP:-4}" --hostfile "$tmp/hostfile" --bind-to none \
        --map-by node --oversubscribe \
        "$RTE_MCA" "$PLM_AGENT" "$AGENT" \
        "$RTE_MCA" oob_tcp_if_include eth0 --mca mpi_yield_when_idle 1 \
        -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
        -x OMPI_MCA_mca_base_component_path \
        --mca mtl rustofi --mca mtl_rustofi_provider_include tcp \
        "$@" </dev/null >"$out" 2>&1 &
    wait $!
}

# run_ok LABEL OUT ARGS...: run_mpi and check exit code and PASS line.
run_ok() {
    local label=$1 out=$2 rc
    shift 2
    run_mpi "$out" "$@"
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        fail "$label" "timed out after ${RUN_TIMEOUT}s (exit code $rc)"
    elif [ "$rc" -ne 0 ]; then
        fail "$label" "mpirun exit code $rc"
    elif ! grep -q "^PASS nic_bw\$" "$out"; then
        fail "$label" "no 'PASS nic_bw' line in the output"
    else
        return 0
    fi
    show_tail "$label" "$out"
    return 1
}

# nics_ok LABEL OUT WANT0 WANT1: rank r's startup line says local rank
# (r / 2) and NIC WANT<local rank>, and its counter line names the same NIC.
nics_ok() {
    local label=$1 out=$2 r lr want opened line nic
    local -a want_of=("$3" "$4")
    for r in 0 1 2 3; do
        lr=$((r / 2))
        want=${want_of[$lr]}
        opened=$(grep -o "rustofi: opened rank=$r provider=tcp;ofi_rxm nic=[^ ]* local_rank=[0-9]*" "$out")
        if [ "$opened" != "rustofi: opened rank=$r provider=tcp;ofi_rxm nic=$want local_rank=$lr" ]; then
            fail "$label" "rank $r: expected 'nic=$want local_rank=$lr' in its startup line, got '${opened:-nothing}'"
            show_tail "$label" "$out"
            return 1
        fi
        line=$(counter_lines "$out" | awk -v r="$r" "$COUNTERS_AWK"'
            counter_fields(f) && f["rank"] == r { print counter_line }')
        nic=$(counter_field "$line" nic)
        if [ "$nic" != "$want" ]; then
            fail "$label" "rank $r: counter line names nic '${nic:-none}', expected $want"
            show_tail "$label" "$out"
            return 1
        fi
    done
}

median_of() {
    sed -n 's/^RESULT nic_bw .*median_MBps=\([0-9.]*\) .*/\1/p' "$1"
}

if [ "$(id -u)" -ne 0 ]; then
    fail setup "must run as root (creates network namespaces)"
    exit 1
fi
trap cleanup EXIT
trap 'echo "FAIL multinic interrupted"; exec 2>/dev/null; exit 130' INT
trap 'echo "FAIL multinic interrupted"; exec 2>/dev/null; exit 143' TERM

teardown
tmp=$(mktemp -d /tmp/rustofi-multinic.XXXXXX)
if ! setup >"$tmp/setup.out" 2>&1; then
    fail setup "cannot create the namespaces"
    show_tail setup "$tmp/setup.out"
    exit 1
fi
: >"$tmp/hostfile"
export RUSTOFI_MH_HOSTS=""
for i in "${!HOSTS[@]}"; do
    echo "${SUBNETS[0]}.$((i + 1)) slots=2" >>"$tmp/hostfile"
    RUSTOFI_MH_HOSTS+="${SUBNETS[0]}.$((i + 1))=${HOSTS[$i]} "
done

if [ ! -f "$RUSTOFI_MCA_DIR/mca_mtl_rustofi.so" ]; then
    if ! "$ROOT/scripts/build" ${OMPI_PREFIX:+--ompi "$OMPI_PREFIX"} >"$tmp/build.out" 2>&1; then
        fail build "scripts/build failed"
        show_tail build "$tmp/build.out"
        exit 1
    fi
fi
mkdir -p "$BUILD_DIR"
if ! mpicc -O2 -o "$BUILD_DIR/nic_bw" "$here/multinic/nic_bw.c" >"$tmp/cc.out" 2>&1; then
    fail compile "compiling tests/multinic/nic_bw.c failed"
    show_tail mpicc "$tmp/cc.out"
    exit 1
fi

# choice: 16 MiB per pair, 2 rounds, verbose startup and counter lines.
out="$tmp/choice.out"
small=$((16 * MIB))
rx0_0=$(rn2_rx eth0) && rx0_1=$(rn2_rx eth1)
if run_ok choice "$out" --mca mtl_rustofi_verbose 2 "$BUILD_DIR/nic_bw" "$small" 2 &&
    nics_ok choice "$out" eth0 eth1; then
    d0=$(($(rn2_rx eth0) - rx0_0))
    d1=$(($(rn2_rx eth1) - rx0_1))
    if [ "$d0" -lt $((2 * small)) ] || [ "$d1" -lt $((2 * small)) ]; then
        fail choice "rn2 received $d0 bytes on eth0 and $d1 on eth1, expected at least $((2 * small)) on each"
    else
        ok "choice (local rank 0 on eth0, 1 on eth1; rn2 rx eth0 +$d0 eth1 +$d1 bytes)"
    fi
fi

# named: every rank on eth1.
out="$tmp/named.out"
if run_ok named "$out" --mca mtl_rustofi_verbose 2 --mca mtl_rustofi_nic eth1 \
    "$BUILD_DIR/nic_bw" "$MIB" 1 && nics_ok named "$out" eth1 eth1; then
    ok "named (mtl_rustofi_nic eth1: every rank on eth1)"
fi

# unknown: a NIC name that is no domain of the provider is one error per
# rank naming it and the NICs there; the component declines and the job
# runs on (and passes with) pml ob1.
out="$tmp/unknown.out"
if run_ok unknown "$out" --mca mtl_rustofi_nic eth9 "$BUILD_DIR/nic_bw" "$MIB" 1; then
    n=$(grep -c "mtl_rustofi_nic names 'eth9', which is not a NIC of this provider here (NICs: eth0, eth1, lo); the component is disabled" "$out")
    if [ "$n" -ne 4 ]; then
        fail unknown "expected the error once per rank (4), found it $n times"
        show_tail unknown "$out"
    elif has_counter_line "$out"; then
        fail unknown "rustofi carried traffic although it should have declined"
        show_tail unknown "$out"
    else
        ok "unknown (mtl_rustofi_nic eth9: one error per rank, job passes on ob1)"
    fi
fi

# spread_bw: the same two concurrent 64 MiB transfers, spread over both
# NICs and all on eth0.
one="$tmp/bw-one.out" two="$tmp/bw-spread.out"
if run_ok spread_bw "$one" --mca mtl_rustofi_nic eth0 "$BUILD_DIR/nic_bw" $((64 * MIB)) "$ROUNDS" &&
    run_ok spread_bw "$two" "$BUILD_DIR/nic_bw" $((64 * MIB)) "$ROUNDS"; then
    m1=$(median_of "$one")
    m2=$(median_of "$two")
    if [ -z "$m1" ] || [ -z "$m2" ]; then
        fail spread_bw "no RESULT line (one NIC: '${m1}', spread: '${m2}')"
    else
        ratio=$(awk -v a="$m2" -v b="$m1" 'BEGIN { printf "%.2f", a / b }')
        msg="2 pairs x 64 MiB, tbf $RATE per NIC, median of $ROUNDS: one NIC $m1 MB/s, spread $m2 MB/s, ${ratio}x"
        if awk -v r="$ratio" -v m="$MIN_RATIO" 'BEGIN { exit !(r >= m) }'; then
            ok "spread_bw ($msg)"
            grep -h "^RESULT" "$one" "$two" | sed "s/^/    /"
        else
            fail spread_bw "$msg, expected at least ${MIN_RATIO}x"
            grep '^RESULT' "$one" "$two"
        fi
    fi
fi

# stripe_bw: one pair, striped over both NICs and kept on eth0.
one="$tmp/stripe-off.out" two="$tmp/stripe-on.out"
if NP=2 run_ok stripe_bw "$one" --mca mtl_rustofi_stripe 1 "$BUILD_DIR/nic_bw" $((64 * MIB)) "$ROUNDS" &&
    rx1=$(rn2_rx eth1) &&
    NP=2 run_ok stripe_bw "$two" --mca mtl_rustofi_verbose 1 "$BUILD_DIR/nic_bw" $((64 * MIB)) "$ROUNDS"; then
    d1=$(($(rn2_rx eth1) - rx1))
    m1=$(median_of "$one")
    m2=$(median_of "$two")
    recv_line=$(counter_lines "$two" | awk "$COUNTERS_AWK"'
        counter_fields(f) && f["rank"] == 1 { print counter_line }')
    stripe_nics=$(counter_field "$recv_line" stripe_nics)
    stripe_rx=$(counter_field "$recv_line" stripe_rx_bytes)
    want_rx=$((64 * MIB * ROUNDS / 3))
    if [ -z "$m1" ] || [ -z "$m2" ]; then
        fail stripe_bw "no RESULT line (unstriped: '${m1}', striped: '${m2}')"
    elif [ "$stripe_nics" != eth1 ]; then
        fail stripe_bw "the receiver's counter line names stripe NICs '${stripe_nics:-none}', expected eth1"
        show_tail stripe_bw "$two"
    elif [ "${stripe_rx:-0}" -lt "$want_rx" ] || [ "$d1" -lt "$want_rx" ]; then
        fail stripe_bw "the receiver read ${stripe_rx:-0} bytes through eth1 (rn2 eth1 rx +$d1), expected at least $want_rx"
        show_tail stripe_bw "$two"
    else
        ratio=$(awk -v a="$m2" -v b="$m1" 'BEGIN { printf "%.2f", a / b }')
        msg="1 pair x 64 MiB, tbf $RATE per NIC, median of $ROUNDS: one NIC $m1 MB/s, striped $m2 MB/s, ${ratio}x; receiver read $stripe_rx bytes through eth1"
        if awk -v r="$ratio" -v m="$MIN_RATIO" 'BEGIN { exit !(r >= m) }'; then
            ok "stripe_bw ($msg)"
        else
            fail stripe_bw "$msg, expected at least ${MIN_RATIO}x"
        fi
    fi
fi

if [ "$failures" -ne 0 ]; then
    echo "multinic: $failures check(s) failed"
    exit 1
fi
echo "multinic: all checks passed"
