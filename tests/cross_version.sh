#!/usr/bin/env bash
# A component built for one Open MPI series must refuse to load into the
# other with one clear message, and the job must still run (on pml ob1).
#   tests/cross_version.sh [OMPI5_PREFIX]     (default /opt/openmpi-5.0)
# Needs both builds: target/mca (4.1, scripts/build) and target/ompi5/mca
# (scripts/build --ompi PREFIX); builds whichever is missing.
#   4.1 build into 5.0: 5.0's mpirun, component path target/mca first
#   5.0 build into 4.1: the system mpirun, component path target/ompi5/mca first
# Each run: `--mca mtl rustofi` (the user asks for it), np 2; passes when the
# program passes, pml ob1 was selected, no rustofi counter line appeared, and
# every rank printed exactly one line, the refusal naming both versions.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
P5=${1:-/opt/openmpi-5.0}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMPI_MCA_pml OMPI_MCA_mtl OMPI_MCA_mca_base_component_path
work=$ROOT/target/cross-version
mkdir -p "$work"
passed=0 failed=0

[ -f "$ROOT/target/mca/mca_mtl_rustofi.so" ] || "$ROOT/scripts/build" >/dev/null
[ -f "$ROOT/target/ompi5/mca/mca_mtl_rustofi.so" ] || "$ROOT/scripts/build" --ompi "$P5" >/dev/null
v4=$(mpicc --showme:version 2>&1 | sed -n 's/.*Open MPI \([0-9.]*\).*/\1/p')
v5=$("$P5/bin/mpicc" --showme:version 2>&1 | sed -n 's/.*Open MPI \([0-9.]*\).*/\1/p')

# check NAME BUILT_FOR RUNNING MCA_DIR SYS_COMPONENT_DIR MPIRUN MPICC [VAR=VALUE...]
check() {
  local name=$1 built=$2 running=$3 mcadir=$4 sysdir=$5 mpirun=$6 mpicc=$7
  shift 7
  local prog=$work/order_wildcard-$running log=$work/$name.log why="" n
  if ! "$mpicc" -O2 -o "$prog" "$ROOT/tests/mpi/order_wildcard.c" >"$work/$name.cc.log" 2>&1; then
    why="test program did not build"
  else
    env "$@" OMPI_MCA_mca_base_component_path="$mcadir:$sysdir" timeout -k 10 120 \
      "$mpirun" -np 2 --bind-to none --mca mtl rustofi --mca mtl_rustofi_verbose 1 \
      --mca pml_base_verbose 10 "$prog" >"$log" 2>&1 </dev/null
    local rc=$?
    local want="mtl_rustofi: this build of mca_mtl_rustofi.so is for Open MPI $built but the running Open MPI is $running; the component disables itself"
    n=$(grep -acF "$want" "$log")
    if [ $rc -ne 0 ]; then
      why="mpirun exited with status $rc"
    elif ! grep -q "^PASS order_wildcard$" "$log"; then
      why="no 'PASS order_wildcard' line"
    elif ! grep -q "select: component ob1 selected" "$log"; then
      why="pml ob1 was not selected"
    elif grep -q "rustofi: rank=" "$log"; then
      why="rustofi carried traffic"
    elif [ "$n" -ne 2 ]; then
      why="expected the refusal once per rank (2), found $n: '$want'"
    elif [ "$(grep -ac 'mtl_rustofi' "$log")" -ne 2 ]; then
      why="other mtl_rustofi messages besides the refusal"
    elif grep -aq "requested component was not found" "$log"; then
      why="Open MPI reported the component as not found (it must load and decline)"
    fi
  fi
  if [ -n "$why" ]; then
    echo "FAIL $name: $why"
    [ -f "$log" ] && tail -n 20 "$log" | sed 's/^/    | /'
    failed=$((failed + 1))
  else
    echo "ok   $name ($(grep -m1 -oF "Open MPI $built but the running Open MPI is $running" "$log"))"
    passed=$((passed + 1))
  fi
}

# (5.0's PMIx also reads the component path: keep it on its own components)
check "4.1-build-in-5.0" "$v4" "$v5" "$ROOT/target/mca" "$P5/lib/openmpi" \
  "$P5/bin/mpirun" "$P5/bin/mpicc" PMIX_MCA_mca_base_component_path="$P5/lib/pmix"
check "5.0-build-in-4.1" "$v5" "$v4" "$ROOT/target/ompi5/mca" \
  /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 /usr/bin/mpirun /usr/bin/mpicc
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
