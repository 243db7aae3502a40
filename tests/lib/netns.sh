# Shared by the tests that build hosts from network namespaces
# (tests/multihost.sh, tests/multinic.sh): result lines and the teardown of
# the namespaces. The caller sets TEST_NAME, HOSTS (the host namespaces) and
# BRIDGE_NS (the namespace holding the bridges) before sourcing it, and may
# set tmp to a scratch directory that cleanup removes.
# shellcheck shell=bash

failures=0
tmp=""

# The namespace and bridge names are fixed, so two such tests (or two
# checkouts running their suites) on one machine would tear down each
# other's hosts: each waits here for the one before it to finish.
exec 9>/run/lock/rustofi-netns.lock
flock 9

ok() { echo "ok   $TEST_NAME $1"; }
fail() {
    echo "FAIL $TEST_NAME $1: $2"
    failures=$((failures + 1))
}
show_tail() {
    echo "---- last 30 lines of output ($1) ----"
    tail -n 30 "$2" | sed 's/^/    /'
    echo "----"
}

# Removes the namespaces, first stopping processes still running in them
# (only processes of this test can be there).
teardown() {
    local ns pids
    for ns in "${HOSTS[@]}" "$BRIDGE_NS"; do
        [ -e "/run/netns/$ns" ] || continue
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        if [ -n "$pids" ]; then
            # shellcheck disable=SC2086
            kill -KILL $pids 2>/dev/null || true
        fi
        ip netns del "$ns" 2>/dev/null || true
    done
}

cleanup() {
    teardown
    [ -n "$tmp" ] && rm -rf "$tmp"
}

# Hosts on one bridge: each host namespace in HOSTS gets interface IFACE
# with its address from ADDRS (same index, /24), a veth into bridge br0
# in BRIDGE_NS.
setup_one_bridge() {
    local i h
    ip netns add "$BRIDGE_NS" || return 1
    ip -n "$BRIDGE_NS" link set lo up || return 1
    ip -n "$BRIDGE_NS" link add br0 type bridge || return 1
    ip -n "$BRIDGE_NS" link set br0 up || return 1
    for i in "${!HOSTS[@]}"; do
        h=${HOSTS[$i]}
        ip netns add "$h" || return 1
        ip -n "$h" link set lo up || return 1
        ip -n "$h" link add "$IFACE" type veth peer name "veth-$h" netns "$BRIDGE_NS" || return 1
        ip -n "$h" addr add "${ADDRS[$i]}/24" dev "$IFACE" || return 1
        ip -n "$h" link set "$IFACE" up || return 1
        ip -n "$BRIDGE_NS" link set "veth-$h" master br0 || return 1
        ip -n "$BRIDGE_NS" link set "veth-$h" up || return 1
    done
}
