# shellcheck shell=bash
# The one parser of rustofi's finalize counter line, sourced by the test
# scripts (tests/run_mpi_tests.sh, tests/stress.sh, tests/mpi4py.sh,
# tests/multihost.sh) and bench/matching.
#
# With mtl_rustofi_verbose >= 1 every rank prints one line at MPI_Finalize
# (`stats_line` in mtl_rustofi/src/engine.rs):
#   rustofi: rank=R provider=P nic=D shm=S net_peers=N shm_peers=N sent_msgs=N
#   sent_bytes=N recv_msgs=N recv_bytes=N eager=N rndv=N unexpected=N
#   errors=N coalesced=N mr_reg=N mr_hits=N net_tx_bytes=N net_rx_bytes=N
#   shm_tx_bytes=N shm_rx_bytes=N
# on one line, as space-separated key=value fields. Other output of the
# same rank may precede it on its line (in mpirun's combined output partial
# writes of ranks interleave), so everything before the marker is ignored.
# Checks on the values stay with each script; this file only finds the
# lines and splits them into fields.

COUNTER_PREFIX='rustofi: '
COUNTER_MARK="${COUNTER_PREFIX}rank="

# counter_lines FILE...: every counter line in the FILEs, from the marker
# on, in file order (what `grep -ho 'rustofi: rank=.*'` printed).
counter_lines() {
    awk -v m="$COUNTER_MARK" '{ p = index($0, m); if (p) print substr($0, p) }' "$@"
}

# has_counter_line FILE...: succeeds if any of the FILEs holds a counter line.
has_counter_line() {
    grep -qF -- "$COUNTER_MARK" "$@"
}

# without_counter_lines FILE: FILE's lines that hold no counter line.
without_counter_lines() {
    grep -vF -- "$COUNTER_MARK" "$1"
}

# counter_field LINE KEY: the value of field KEY in one counter line (as
# printed by counter_lines), or nothing if the line has no such field.
counter_field() {
    awk -v k="$2" '{
        for (i = 1; i <= NF; i++)
            if (index($i, k "=") == 1) { print substr($i, length(k) + 2); exit }
    }' <<<"$1"
}

# For awk programs that read output files: put "$COUNTERS_AWK" in front of
# the program text. counter_fields(f) returns 0 when the current record
# holds no counter line; otherwise it fills f[key] = value from the line,
# sets counter_line to its fields ("rank=R provider=P ...") and returns 1.
COUNTERS_AWK='
function counter_fields(f,    p, n, i, eq, kv) {
    p = index($0, "'"$COUNTER_MARK"'")
    if (p == 0) return 0
    split("", f)
    counter_line = substr($0, p + '${#COUNTER_PREFIX}')
    n = split(counter_line, kv, " ")
    for (i = 1; i <= n; i++) {
        eq = index(kv[i], "=")
        if (eq > 0) f[substr(kv[i], 1, eq - 1)] = substr(kv[i], eq + 1)
    }
    return 1
}
'
