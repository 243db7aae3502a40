# Runs on libfabric's sockets provider get a larger default TCP receive
# buffer while they last.  Sourced by tests/run_mpi_tests.sh and
# tests/stress.sh.
#
# Why: the sockets provider (1.17) starts reading a message on a connection
# only once it can MSG_PEEK the whole 24-byte message header.  Over loopback
# a segment carries up to 64 KiB, and the kernel charges the receive buffer
# for the whole segment until its last byte is read.  When a segment ends
# inside a header, the bytes of that header already there keep about
# 100 KB charged; with the default 128 KiB buffer (net.ipv4.tcp_rmem's
# middle value) the free space is below one segment, so the receiver
# advertises a zero window, the sender cannot send the rest of the header,
# and the provider waits for it for good.  Seen in this suite as a rank
# whose socket holds 13 unread bytes and 103 KB of receive memory while its
# peer holds 287 KB unsent behind a zero window (README, Known limits).
# A 1 MiB default leaves room for the rest of the header whatever one
# segment holds.
#
# The setting is per network namespace: it applies to the sockets this
# shell's namespace creates from now on, and the old value is put back when
# the sourcing script exits.

SOCKETS_RMEM_DEFAULT=1048576
SOCKETS_RMEM_SAVED=""

sockets_rmem_restore() {
    if [[ -n "$SOCKETS_RMEM_SAVED" ]]; then
        echo "$SOCKETS_RMEM_SAVED" >/proc/sys/net/ipv4/tcp_rmem 2>/dev/null || true
        SOCKETS_RMEM_SAVED=""
    fi
}

# Raises net.ipv4.tcp_rmem's default to SOCKETS_RMEM_DEFAULT when it is
# lower; says what it did, or why it could not (then runs on sockets can
# stop for good now and then: the test's timeout reports them).
sockets_rmem_raise() {
    local f=/proc/sys/net/ipv4/tcp_rmem min def max
    [[ -z "$SOCKETS_RMEM_SAVED" ]] || return 0
    if ! read -r min def max <"$f" 2>/dev/null; then
        echo "== sockets: cannot read $f; runs on sockets may stall (README, Known limits)" >&2
        return 0
    fi
    ((def < SOCKETS_RMEM_DEFAULT)) || return 0
    ((max >= SOCKETS_RMEM_DEFAULT)) || max=$SOCKETS_RMEM_DEFAULT
    if echo "$min $SOCKETS_RMEM_DEFAULT $max" >"$f" 2>/dev/null; then
        SOCKETS_RMEM_SAVED="$min $def $max"
        trap sockets_rmem_restore EXIT
        echo "== sockets: net.ipv4.tcp_rmem default $def -> $SOCKETS_RMEM_DEFAULT while these runs last (README, Known limits)"
    else
        echo "== sockets: cannot raise net.ipv4.tcp_rmem (not root?); runs on sockets may stall (README, Known limits)" >&2
    fi
}
