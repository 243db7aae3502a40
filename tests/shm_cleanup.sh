#!/usr/bin/env bash
# Nothing left in /dev/shm: the shared-memory files of both same-host
# rails are removed when a job ends, whether the ranks finalize or one is
# killed with SIGKILL.
#
# Usage: tests/shm_cleanup.sh
#
# Runs tests/mpi/cleanup/wait_for_kill.c at np 3 (--mca mtl rustofi, tcp, so
# every peer is reached over shared memory), first with libfabric's shm
# provider (mtl_rustofi_shm libfabric):
#   killed   every rank reports READY with its pid; the script checks that
#            each rank's /dev/shm/<pid>:* file exists (the check below is not
#            vacuous), kills rank 1 with SIGKILL, waits for mpirun to take
#            the job down, and then requires that no /dev/shm/<pid>:* of any
#            rank remains;
#   finished the same job ending in MPI_Finalize: no file may remain;
# then with the component's own rail (the default, auto), whose segment
# (named at verbose 2: segment=/dev/shm/rustofi1-<uid>-<jobid>-<host>) is unlinked
# as soon as every local rank has attached: killed-own and finished-own
# require that the verbose line names it (the rail is in use), that it is
# already gone while the ranks wait (READY comes after MPI_Init), and that
# it is gone after the job.
# Other jobs may create and remove files in /dev/shm meanwhile: only names
# starting with this job's pids are judged. The runtime removes the files
# when it tears the job down; the script allows it up to 20 s after mpirun
# exits.
# Environment: OMPI_PREFIX (Open MPI 5: see scripts/ompi-prefix.sh),
# RUSTOFI_MCA_DIR, OMPI_COMPONENT_DIR.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/ompi-prefix.sh
. "$REPO/scripts/ompi-prefix.sh"
BUILD_DIR=$RUSTOFI_TARGET/cleanup
mkdir -p "$BUILD_DIR"
PROG=$BUILD_DIR/wait_for_kill
mpicc -O2 -o "$PROG" "$REPO/tests/mpi/cleanup/wait_for_kill.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mca_base_component_path=$RUSTOFI_MCA_DIR:$OMPI_COMPONENT_DIR
unset OMPI_MCA_pml OMPI_MCA_mtl
root_args=()
((OMPI_MAJOR >= 5)) && root_args=(--allow-run-as-root)
NP=3
FAILED=0

fail() { echo "FAIL shm_cleanup $1: ${*:2}"; FAILED=1; CASE_FAILED=1; }

# Files in /dev/shm whose names start with one of the given pids.
leftovers() {
    local pid
    for pid in "$@"; do
        compgen -G "/dev/shm/$pid:*" || true
    done
}

# The own rail's segment path(s) named in a log.
own_segments() {
    grep -o 'segment=/dev/shm/rustofi1-[0-9a-f-]*' "$1" | sed 's/^segment=//' | sort -u
}

run_case() {
    local mode=$1 log=$BUILD_DIR/$1.log own=0
    [[ $mode == *-own ]] && own=1
    local -a rail=(--mca mtl_rustofi_shm libfabric)
    ((own)) && rail=(--mca mtl_rustofi_shm auto --mca mtl_rustofi_verbose 2)
    CASE_FAILED=0
    : >"$log"
    local what=${mode%-own}
    timeout -k 10 120 mpirun -np $NP --oversubscribe --bind-to none "${root_args[@]}" \
        --mca mtl rustofi --mca mtl_rustofi_provider_include tcp "${rail[@]}" \
        "$PROG" "${what%ed}" >"$log" 2>&1 &
    local runner=$! pids=() i
    for ((i = 0; i < 600; i++)); do
        mapfile -t pids < <(awk '$1 == "READY" { print $3 }' "$log")
        ((${#pids[@]} == NP)) && break
        kill -0 $runner 2>/dev/null || break
        sleep 0.1
    done
    if ((${#pids[@]} != NP)); then
        kill $runner 2>/dev/null || true
        wait $runner || true
        fail "$mode" "only ${#pids[@]} of $NP ranks got ready (log $log)"
        return
    fi
    local segs=""
    if ((own)); then
        segs=$(own_segments "$log")
        if [[ -z $segs ]]; then
            fail "$mode" "no rank named its shared-memory segment (the own rail was not in use?)"
        fi
        local s
        for s in $segs; do
            if [[ -e $s ]]; then
                fail "$mode" "$s still exists after every rank attached"
            fi
        done
        if [[ $what == killed ]]; then
            kill -KILL "$(awk '$1 == "READY" && $2 == 1 { print $3 }' "$log")"
        fi
    elif [[ $what == killed ]]; then
        local during
        during=$(leftovers "${pids[@]}" | wc -l)
        if ((during < NP)); then
            fail "$mode" "expected a /dev/shm file per rank while running, found $during" \
                "(the shm rail was not in use?)"
        fi
        local victim
        victim=$(awk '$1 == "READY" && $2 == 1 { print $3 }' "$log")
        kill -KILL "$victim"
    fi
    local rc=0
    wait $runner || rc=$?
    if [[ $what == finished ]] && { ((rc != 0)) || ! grep -q '^PASS wait_for_kill' "$log"; }; then
        fail "$mode" "job failed (exit $rc, log $log)"
    fi
    if [[ $what == killed ]] && ((rc == 0 || rc == 124)); then
        fail "$mode" "mpirun exit $rc after a rank was killed (expected an abort, log $log)"
    fi
    local left=""
    for ((i = 0; i < 200; i++)); do
        left=$(
            leftovers "${pids[@]}"
            for s in $segs; do
                if [[ -e $s ]]; then echo "$s"; fi
            done
        )
        [[ -z $left ]] && break
        sleep 0.1
    done
    if [[ -n $left ]]; then
        fail "$mode" "left behind: $(echo $left)"
    elif ((CASE_FAILED == 0)); then
        echo "ok   shm_cleanup $mode (np $NP, pids ${pids[*]}, nothing left in /dev/shm)"
    fi
}

run_case killed
run_case finished
run_case killed-own
run_case finished-own
exit $FAILED
