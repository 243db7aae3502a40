#!/usr/bin/env bash
# A peer that dies does not leave its survivors waiting for ever, and a peer
# that is merely busy outside MPI is not given up.
#
# Usage: tests/peer_failure.sh [PROVIDER...]   (default: tcp udp shm fishm)
#
# Runs tests/mpi/peerfail/peer_death.c at np 3 with MPI_ERRORS_RETURN, the
# runtime told to keep the survivors running (--mca orte_enable_recovery 1,
# on Open MPI 5 --enable-recovery) and mtl_rustofi_peer_timeout 5:
#   rndv_send, rndv_recv, eager_recv, probe
#            rank 1 kills itself with SIGKILL at the moment named; rank 0's
#            rendezvous send, rendezvous receive, eager receive or MPI_Probe
#            towards it must return an error within BOUND seconds (the
#            timeout plus a generous margin for a loaded machine), then rank
#            0 receives from the living rank 2 with MPI_ANY_SOURCE, and the
#            job must end within the run's time limit;
#   busy     rank 1 sleeps 10 s outside MPI (peer_timeout 3) while rank 0
#            waits in a receive from it: the receive must succeed;
#   excid    (Open MPI 5) as eager_recv, but rank 0's operation is its
#            first MPI_Send to rank 1 on a communicator made through MPI
#            sessions, which waits for rank 1's index of it, made by two
#            threads at once: both sends must fail (rank 1's index never
#            comes).
# Providers: tcp and udp with the shm rail off (every peer over the network
# provider); "shm": tcp with the own shared-memory rail, and "fishm": tcp
# with libfabric's shm provider as the rail, each carrying every peer here.
# Rank 0's error time is printed per case. Environment: OMPI_PREFIX (Open
# MPI 5: see scripts/ompi-prefix.sh), RUSTOFI_MCA_DIR, OMPI_COMPONENT_DIR.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/ompi-prefix.sh
. "$REPO/scripts/ompi-prefix.sh"
BUILD_DIR=$RUSTOFI_TARGET/peerfail
mkdir -p "$BUILD_DIR"
PROG=$BUILD_DIR/peer_death
mpicc -O2 -Wall -Werror -pthread -o "$PROG" "$REPO/tests/mpi/peerfail/peer_death.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mca_base_component_path=$RUSTOFI_MCA_DIR:$OMPI_COMPONENT_DIR
unset OMPI_MCA_pml OMPI_MCA_mtl
if ((OMPI_MAJOR >= 5)); then
    rt_args=(--allow-run-as-root --enable-recovery)
else
    rt_args=(--mca orte_enable_recovery 1)
fi
PEER_TIMEOUT=5
BOUND=20
LIMIT=90
PROVIDERS=("$@")
((${#PROVIDERS[@]})) || PROVIDERS=(tcp udp shm fishm)
FAILED=0

provider_args() {
    case $1 in
        tcp | udp) echo "--mca mtl_rustofi_provider_include $1 --mca mtl_rustofi_shm off" ;;
        shm) echo "--mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_shm on" ;;
        fishm) echo "--mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_shm libfabric" ;;
        *) echo "unknown provider $1" >&2; exit 2 ;;
    esac
}

run_case() { # provider mode
    local prov=$1 mode=$2 log=$BUILD_DIR/$1-$2.log timeout=$PEER_TIMEOUT extra=()
    if [[ $mode == busy ]]; then
        timeout=3
        extra=(10)
    fi
    local start rc=0
    start=$(date +%s)
    # shellcheck disable=SC2046
    timeout -k 10 $LIMIT mpirun -np 3 --oversubscribe --bind-to none "${rt_args[@]}" \
        --mca pml cm --mca mtl rustofi $(provider_args "$prov") \
        --mca mtl_rustofi_peer_timeout $timeout "$PROG" "$mode" "${extra[@]}" >"$log" 2>&1 ||
        rc=$?
    local took=$(($(date +%s) - start))
    local result
    result=$(awk -v m="$mode" '$1 == "RESULT" && $2 == m { print $3, $4 }' "$log")
    local want=error
    [[ $mode == busy ]] && want=ok
    local why=""
    if ((rc == 124 || rc == 137)); then
        why="the job did not end within $LIMIT s"
    elif [[ -z $result ]]; then
        why="rank 0 reported no result (exit $rc)"
    elif [[ ${result%% *} != "$want" ]]; then
        why="rank 0's operation ended '${result%% *}', expected '$want'"
    elif ! grep -q '^PASS peer_death' "$log"; then
        why="no PASS (the ANY_SOURCE receive from rank 2?)"
    elif [[ $mode != busy ]] && awk -v b=$BOUND '{ exit !($2 > b) }' <<<"$result"; then
        why="the error took ${result#* } s (bound $BOUND s)"
    fi
    if [[ -n $why ]]; then
        echo "FAIL peer_failure $mode ($prov): $why (log $log)"
        sed 's/^/    | /' "$log" | tail -n 15
        FAILED=1
    else
        echo "ok   peer_failure $mode ($prov, peer_timeout $timeout): rank 0's operation" \
            "ended ${result%% *} after ${result#* } s; job ${took} s"
    fi
}

MODES=(rndv_send rndv_recv eager_recv probe busy)
((OMPI_MAJOR >= 5)) && MODES+=(excid)
for prov in "${PROVIDERS[@]}"; do
    for mode in "${MODES[@]}"; do
        run_case "$prov" "$mode"
    done
done
exit $FAILED
