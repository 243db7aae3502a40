#!/usr/bin/env bash
# Registration cache checks with real MPI jobs (np 2, tcp, read rendezvous:
# the sender registers its buffer with FI_REMOTE_READ for every rendezvous).
#
#   tests/mrcache.sh
#
# 1. cache on (default size): tests/mpi/mrcache/mrcache.c's 200 sends of
#    4 MiB from one buffer make one registration, and every unmapped and
#    re-mapped (or freed and re-allocated) buffer a new one: rank 0's mr_reg
#    and mr_hits must equal the counts the program prints (EXPECT line), and
#    the receiver checks every byte. The verbose 2 line must say the cache is on.
# 2. mtl_rustofi_mr_cache_size 0: every rendezvous registers (mr_reg = sends,
#    mr_hits = 0), same data checks.
# 3. mtl_rustofi_mr_cache_bytes 1 MiB, below the 4 MiB buffers: no
#    registration is kept once its send ends (mr_reg = sends, mr_hits = 0),
#    and the verbose 2 line states the bound.
# 4. mtl_rustofi_mr_cache_size -1: refused with one message, job on ob1.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/lib/counters.sh
. "$REPO/tests/lib/counters.sh"
# shellcheck source=../scripts/ompi-prefix.sh
. "$REPO/scripts/ompi-prefix.sh"
BUILD_DIR=${BUILD_DIR:-$RUSTOFI_TARGET/mpi-tests}
LOG_DIR=$BUILD_DIR/logs
mkdir -p "$LOG_DIR"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mca_base_component_path=$RUSTOFI_MCA_DIR:$OMPI_COMPONENT_DIR
unset OMPI_MCA_pml OMPI_MCA_mtl
PROG=$BUILD_DIR/mrcache
mpicc -O2 -Wall -Werror -o "$PROG" "$REPO/tests/mpi/mrcache/mrcache.c"

FAILED=0
fail() { echo "FAIL mrcache: $*"; FAILED=1; }

run() { # name args...
    local name=$1
    shift
    LOG=$LOG_DIR/mrcache-$name.log
    if ! timeout -k 10 180 mpirun -np 2 --bind-to none --mca mtl rustofi \
        --mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_shm off \
        "$@" "$PROG" >"$LOG" 2>&1 </dev/null; then
        fail "$name: mpirun failed (log $LOG)"
        tail -n 20 "$LOG" | sed 's/^/    | /'
        return 1
    fi
    if ! grep -q '^PASS mrcache' "$LOG" || grep -q 'FAIL:' "$LOG"; then
        fail "$name: the program did not pass (log $LOG)"
        return 1
    fi
}

rank0_field() { # key
    local line
    line=$(counter_lines "$LOG" | grep '^rustofi: rank=0 ' | head -n 1)
    counter_field "${line#"$COUNTER_PREFIX"}" "$1"
}

expect_field() { # key
    grep -o "EXPECT .*" "$LOG" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'
}

check_counts() { # name want_reg want_hits
    local reg hits
    reg=$(rank0_field mr_reg)
    hits=$(rank0_field mr_hits)
    if [[ "$reg" != "$2" || "$hits" != "$3" ]]; then
        fail "$1: rank 0 mr_reg=$reg mr_hits=$hits, expected mr_reg=$2 mr_hits=$3 (log $LOG)"
    else
        echo "ok   mrcache $1: mr_reg=$reg mr_hits=$hits"
    fi
}

if run on --mca mtl_rustofi_verbose 2; then
    grep -q 'registration cache on' "$LOG" || fail "on: no 'registration cache on' line (log $LOG)"
    check_counts on "$(expect_field mr_reg)" "$(expect_field mr_hits)"
fi
if run off --mca mtl_rustofi_verbose 1 --mca mtl_rustofi_mr_cache_size 0; then
    check_counts off "$(expect_field sends)" 0
fi
if run bytes --mca mtl_rustofi_verbose 2 --mca mtl_rustofi_mr_cache_bytes 1048576; then
    grep -q 'registration cache on, up to 64 unused registrations of up to 1048576 bytes' "$LOG" ||
        fail "bytes: no line stating the 1048576-byte bound (log $LOG)"
    check_counts bytes "$(expect_field sends)" 0
fi
LOG=$LOG_DIR/mrcache-bad.log
if timeout -k 10 120 mpirun -np 2 --bind-to none --mca mtl rustofi \
    --mca mtl_rustofi_mr_cache_size -1 "$PROG" >"$LOG" 2>&1 </dev/null &&
    grep -q 'mtl_rustofi_mr_cache_size = -1 is out of range: it must be 0 to 65536' "$LOG" &&
    ! has_counter_line "$LOG"; then
    echo "ok   mrcache bad size: refused, job on ob1"
else
    fail "bad size: expected the message and a job on ob1 (log $LOG)"
fi
exit "$FAILED"
