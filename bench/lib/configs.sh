# shellcheck shell=bash
# Benchmark configurations shared by bench/p2p and bench/osu
# (sourced). Every configuration runs 2 ranks on this machine:
#
#   rustofi     pml cm + mtl rustofi, libfabric tcp carrying all traffic
#               (mtl_rustofi_shm off): the network path, compared with ofi
#               and ob1-tcp
#   ofi         pml cm + Open MPI's own mtl ofi over libfabric tcp
#   ob1-tcp     pml ob1 + btl tcp,self
#   rustofi-shm pml cm + mtl rustofi, tcp with the same-host rail on its
#               default (auto): the component's own shared-memory transport;
#               compared with ob1-vader
#   rustofi-fishm  the same with mtl_rustofi_shm libfabric: the same-host
#               peer is reached through libfabric's shm provider
#   ob1-vader   pml ob1 + btl vader,self (shared memory; btl sm,self on
#               Open MPI 5, where vader is called sm)
# shellcheck disable=SC2034  # used by the scripts that source this file
BENCH_CONFIGS_ALL="rustofi ofi ob1-tcp rustofi-shm rustofi-fishm ob1-vader"
config_args() {
  case "$1" in
    rustofi) echo "--mca pml cm --mca mtl rustofi --mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_shm off" ;;
    rustofi-shm) echo "--mca pml cm --mca mtl rustofi --mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_shm auto" ;;
    rustofi-fishm) echo "--mca pml cm --mca mtl rustofi --mca mtl_rustofi_provider_include tcp --mca mtl_rustofi_shm libfabric" ;;
    ofi) echo "--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp" ;;
    ob1-tcp) echo "--mca pml ob1 --mca btl tcp,self" ;;
    # Open MPI 5 renamed btl vader to sm
    ob1-vader) if [ "${OMPI_MAJOR:-4}" -ge 5 ]; then echo "--mca pml ob1 --mca btl sm,self"
               else echo "--mca pml ob1 --mca btl vader,self"; fi ;;
  esac
}

# Sets py (a python with matplotlib if one can be had) and plotter
# (matplotlib, gnuplot or none) for bench/lib/report.py. $1: repo root.
# shellcheck disable=SC2034  # py and plotter are for the caller
pick_plotter() {
  local venv="$1/.venv-bench"
  py=python3
  if [ ! -x "$venv/bin/python" ]; then
    if python3 -m venv "$venv" >/dev/null 2>&1; then
      "$venv/bin/pip" install -q matplotlib >/dev/null 2>&1 || true
    fi
  fi
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    py="$venv/bin/python"
    plotter=matplotlib
  elif command -v gnuplot >/dev/null 2>&1; then
    plotter=gnuplot
  else
    apt-get install -y gnuplot-nox >/dev/null 2>&1 || true
    if command -v gnuplot >/dev/null 2>&1; then plotter=gnuplot; else plotter=none; fi
  fi
}
