#!/usr/bin/env bash
# Matching stress test under MPI_THREAD_MULTIPLE (tests/mpi/stress/stress_threads.c).
#
# Usage: tests/stress.sh [options] [-- program arguments]
#
#   --np "LIST"      rank counts to run (default "2 4"; np > 2 adds --oversubscribe)
#   --repeat N       run every configuration N times (default 1)
#   --messages N     messages per run, all ranks together (default 200000)
#   --seed S         plan seed (default: a new random seed per run, printed
#                    on every result line so a failure can be replayed)
#   --ob1            also run the same seeds on pml ob1 (reference: tells a
#                    broken test from a broken component)
#   --ob1-only       run only on pml ob1
#   --timeout-scale N  multiply the timeouts by N (default 1)
#   --provider P     libfabric provider rustofi runs on (default tcp; udp,
#                    shm and sockets too)
#   -- ARGS          passed to the program (e.g. --wild-mode anysrc,
#                    --max-size 8192, --threads 2; see the program's header)
#
# Each run is one mpirun under `timeout` (a hang is a failure):
#   mpirun -np N --bind-to none --mca mtl rustofi
#          --mca mtl_rustofi_provider_include P --mca mtl_rustofi_verbose 1
#          [--mca mtl_rustofi_shm off  at np 2: P carries the traffic; at
#           np > 2 the default shm rail does]
# and passes when mpirun exits 0, nothing printed "FAIL:", rank 0 printed
# "PASS stress_threads ...", and (rustofi) every rank printed its
# "rustofi: rank=..." counter line on P with errors=0, with
# sum(sent_msgs) == sum(recv_msgs) and sum(sent_bytes) == sum(recv_bytes).
#
# Timeouts are about 3x the time measured on a 2-core Debian 12 VM shared
# with other jobs (200000 messages, mpirun wall time: rustofi np 2 15-20 s,
# np 4 10-13 s; ob1 np 2 20-25 s, np 4 5 s): 75 s at np 2, 45 s at np 4,
# scaled up with --messages.  "seconds" in the result is the program's
# traffic phase (slowest rank), "mpirun" the whole launch.  The program's
# own watchdog (--stall, a third of the timeout, at most 30 s) reports a rank
# that makes no progress before the timeout hits, with its pending requests.
#
# Environment: MPIRUN_EXTRA_ARGS (word-split, added to every mpirun, e.g.
# "--mca mtl_rustofi_eager_limit 0"), RUSTOFI_MCA_DIR (default
# <repo>/target/mca), BUILD_DIR (default <repo>/target/stress; logs in
# $BUILD_DIR/logs), OMPI_COMPONENT_DIR.
# Exits nonzero if any run failed.

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/lib/counters.sh
. "$REPO/tests/lib/counters.sh"
# shellcheck source=tests/lib/sockets_rmem.sh
. "$REPO/tests/lib/sockets_rmem.sh"
SRC=$REPO/tests/mpi/stress/stress_threads.c
BUILD_DIR=${BUILD_DIR:-$REPO/target/stress}
LOG_DIR=$BUILD_DIR/logs
PROG=$BUILD_DIR/stress_threads
RUSTOFI_MCA_DIR=${RUSTOFI_MCA_DIR:-$REPO/target/mca}
OMPI_COMPONENT_DIR=${OMPI_COMPONENT_DIR:-/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3}

NPS="2 4"
REPEAT=1
MESSAGES=200000
SEED=""
RUN_RUSTOFI=1
RUN_OB1=0
TIMEOUT_SCALE=1
PROVIDER=tcp
PROG_ARGS=()
read -r -a EXTRA_ARGS <<<"${MPIRUN_EXTRA_ARGS:-}"

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

while (($#)); do
    case $1 in
        --np) NPS=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --messages) MESSAGES=$2; shift 2 ;;
        --seed) SEED=$2; shift 2 ;;
        --ob1) RUN_OB1=1; shift ;;
        --ob1-only) RUN_OB1=1; RUN_RUSTOFI=0; shift ;;
        --timeout-scale) TIMEOUT_SCALE=$2; shift 2 ;;
        --provider) PROVIDER=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        --) shift; PROG_ARGS=("$@"); break ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

for v in "$REPEAT" "$MESSAGES" "$TIMEOUT_SCALE"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "expected a positive integer, got '$v'" >&2; exit 2; }
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mca_base_component_path=$RUSTOFI_MCA_DIR:$OMPI_COMPONENT_DIR
# Selection and rustofi parameters are given per run on the command line.
unset OMPI_MCA_pml OMPI_MCA_mtl
while IFS='=' read -r var _; do
    unset "$var"
done < <(env | grep -E '^OMPI_MCA_mtl_rustofi_' || true)

if ((RUN_RUSTOFI)) && [[ $PROVIDER == sockets ]]; then
    sockets_rmem_raise
fi

mkdir -p "$BUILD_DIR" "$LOG_DIR"
echo "== building $PROG"
if ! mpicc -O2 -Wall -Wextra -Werror -pthread -o "$PROG" "$SRC" -lm \
    >"$LOG_DIR/build.log" 2>&1; then
    echo "FAIL build stress_threads"
    sed 's/^/    | /' "$LOG_DIR/build.log" | tail -n 30
    exit 1
fi
if ((RUN_RUSTOFI)) && [[ ! -f $RUSTOFI_MCA_DIR/mca_mtl_rustofi.so ]]; then
    echo "error: $RUSTOFI_MCA_DIR/mca_mtl_rustofi.so not found; run scripts/build" >&2
    exit 2
fi

PASSED=0
FAILED=0
FAILURES=()

# Base timeout (s) for 200000 messages, ~3x the measured time.
base_timeout() { # np
    case $1 in
        2) echo 75 ;;
        3) echo 60 ;;
        *) echo 45 ;;
    esac
}

rank_files() { # log kind(stdout|stderr)
    local f found=0
    for f in "$1".ranks/*/rank.*/"$2"; do
        if [[ -f $f ]]; then
            echo "$f"
            found=1
        fi
    done
    ((found)) || echo "$1"
}

# Checks the rustofi counter lines; prints nothing if fine, else the reason.
check_counters() { # log np
    local -a files
    mapfile -t files < <(rank_files "$1" stderr)
    awk -v np="$2" -v prov="$PROVIDER" "$COUNTERS_AWK"'
    {
        if (!counter_fields(f)) next
        r = f["rank"]
        if (r in seen) { bad = bad "rank " r " printed two counter lines; " }
        seen[r] = 1
        if (index(f["provider"], prov) != 1) bad = bad "rank " r " provider=" f["provider"] "; "
        if (f["errors"] != "0") bad = bad "rank " r " errors=" f["errors"] "; "
        if (f["sent_msgs"] + 0 == 0 || f["recv_msgs"] + 0 == 0)
            bad = bad "rank " r " carried no traffic; "
        sm += f["sent_msgs"]; rm += f["recv_msgs"]
        sb += f["sent_bytes"]; rb += f["recv_bytes"]
    }
    END {
        for (r = 0; r < np; r++)
            if (!((r "") in seen)) bad = bad "no counter line from rank " r "; "
        if (sm != rm) bad = bad "sum(sent_msgs)=" sm " != sum(recv_msgs)=" rm "; "
        if (sb != rb) bad = bad "sum(sent_bytes)=" sb " != sum(recv_bytes)=" rb "; "
        if (bad != "") { sub(/; $/, "", bad); print bad }
    }' "${files[@]}"
}

report_fail() { # label log reason  (uses the caller's $ctx)
    printf 'FAIL %s (%s): %s\n' "$1" "$ctx" "$3"
    if [[ -s $2 ]]; then
        echo "    --- $2"
        { grep -E 'FAIL:|rank [0-9]+: no completion|^  rank|^    (send|recv|pending)' "$2" ||
            tail -n 25 "$2"; } | sed -n '1,60s/^/    | /p'
        local -a errs
        mapfile -t errs < <(rank_files "$2" stderr)
        { counter_lines "${errs[@]}" || true; } | sed 's/^/    | /'
    fi
    FAILED=$((FAILED + 1))
    FAILURES+=("$1 ($ctx): $3 [$2]")
}

run_one() { # pml np run seed
    local pml=$1 np=$2 run=$3 seed=$4
    local to=$(($(base_timeout "$np") * TIMEOUT_SCALE))
    if ((MESSAGES > 200000)); then
        to=$(((to * MESSAGES + 199999) / 200000))
    fi
    local stall=$((to / 3 < 30 ? to / 3 : 30))
    ((stall >= 5)) || stall=5
    local label="stress np=$np" ctx="seed $seed, run $run"
    [[ $pml == ob1 ]] && label+=" ob1"
    local log=$LOG_DIR/stress-np$np-$pml-run$run.log
    rm -rf "$log.ranks"
    local -a cmd=(mpirun -np "$np" --bind-to none --output-filename "$log.ranks")
    ((np > 2)) && cmd+=(--oversubscribe)
    if [[ $pml == ob1 ]]; then
        cmd+=(--mca pml ob1)
    else
        cmd+=(--mca mtl rustofi --mca mtl_rustofi_provider_include "$PROVIDER"
            --mca mtl_rustofi_verbose 1)
        ((np > 2)) || cmd+=(--mca mtl_rustofi_shm off)
    fi
    cmd+=("${EXTRA_ARGS[@]}" "$PROG" "$MESSAGES" --seed "$seed" --stall "$stall" "${PROG_ARGS[@]}")
    echo "# ${cmd[*]}" >"$log.cmd"

    local t0=$EPOCHREALTIME rc=0
    timeout -k 15 "$to" "${cmd[@]}" >"$log" 2>&1 </dev/null || rc=$?
    local wall
    wall=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')

    if ((rc == 124 || rc == 137)); then
        report_fail "$label" "$log" "timed out after ${to}s (hang)"
        return
    elif ((rc != 0)); then
        report_fail "$label" "$log" "mpirun exited with status $rc after ${wall}s"
        return
    elif grep -q 'FAIL:' "$log"; then
        report_fail "$label" "$log" "$(grep -m1 -o 'FAIL:.*' "$log")"
        return
    fi
    local pass
    local -a outs
    mapfile -t outs < <(rank_files "$log" stdout)
    pass=$(grep -h '^PASS stress_threads ' "${outs[@]}" | head -n1 || true)
    if [[ -z $pass ]]; then
        report_fail "$label" "$log" "no 'PASS stress_threads' line from rank 0"
        return
    fi
    if [[ $pml == rustofi ]]; then
        local why
        why=$(check_counters "$log" "$np")
        if [[ -n $why ]]; then
            report_fail "$label" "$log" "counters: $why"
            return
        fi
    fi
    local msgs secs bytes
    msgs=$(sed -n 's/.* messages=\([0-9]*\).*/\1/p' <<<"$pass")
    bytes=$(sed -n 's/.* bytes=\([0-9]*\).*/\1/p' <<<"$pass")
    secs=$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' <<<"$pass")
    printf 'ok   %s (%s messages, %s s; %s bytes, mpirun %s s, timeout %s s, %s)\n' \
        "$label" "$msgs" "$secs" "$bytes" "$wall" "$to" "$ctx"
    PASSED=$((PASSED + 1))
}

for ((run = 1; run <= REPEAT; run++)); do
    for np in $NPS; do
        seed=${SEED:-$((RANDOM * 32768 + RANDOM))}
        if ((RUN_RUSTOFI)); then
            run_one rustofi "$np" "$run" "$seed"
        fi
        if ((RUN_OB1)); then
            run_one ob1 "$np" "$run" "$seed"
        fi
    done
done

echo
echo "$PASSED passed, $FAILED failed (logs in $LOG_DIR)"
if ((FAILED)); then
    printf '  %s\n' "${FAILURES[@]}"
    exit 1
fi
