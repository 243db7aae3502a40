# Sourced by the build, test and benchmark scripts: which Open MPI to use.
#   OMPI_PREFIX unset      the system's (Debian 12's 4.1.4); outputs under target/
#   OMPI_PREFIX=DIR        the one installed in DIR (e.g. /opt/openmpi-5.0 from
#                          scripts/setup-ompi5); its bin/ goes first on PATH and
#                          outputs go under target/ompiN/ (N: its major version),
#                          where scripts/build --ompi DIR puts the component
# Sets and exports OMPI_MAJOR, RUSTOFI_TARGET (target or target/ompiN),
# OMPI_COMPONENT_DIR (Open MPI's own component directory) and RUSTOFI_MCA_DIR
# (the directory of the built mca_mtl_rustofi.so) unless already set.
_rustofi_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${OMPI_PREFIX:-}" ]; then
  if [ ! -x "$OMPI_PREFIX/bin/mpicc" ]; then
    echo "OMPI_PREFIX=$OMPI_PREFIX has no bin/mpicc (scripts/setup-ompi5 installs one)" >&2
    return 2 2>/dev/null || exit 2
  fi
  case ":$PATH:" in
    *":$OMPI_PREFIX/bin:"*) ;;
    *) export PATH="$OMPI_PREFIX/bin:$PATH" ;;
  esac
  OMPI_MAJOR=$(mpicc --showme:version 2>&1 | sed -n 's/.*Open MPI \([0-9]*\)\..*/\1/p')
  RUSTOFI_TARGET=$_rustofi_root/target/ompi$OMPI_MAJOR
  : "${OMPI_COMPONENT_DIR:=$OMPI_PREFIX/lib/openmpi}"
  # Open MPI 5's PMIx also reads OMPI_MCA_mca_base_component_path and then
  # complains about every non-PMIx file in those directories: keep it on
  # its own components.
  if [ "${OMPI_MAJOR:-0}" -ge 5 ] && [ -d "$OMPI_PREFIX/lib/pmix" ]; then
    export PMIX_MCA_mca_base_component_path="${PMIX_MCA_mca_base_component_path:-$OMPI_PREFIX/lib/pmix}"
  fi
else
  OMPI_MAJOR=$(mpicc --showme:version 2>&1 | sed -n 's/.*Open MPI \([0-9]*\)\..*/\1/p')
  RUSTOFI_TARGET=$_rustofi_root/target
  : "${OMPI_COMPONENT_DIR:=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3}"
fi
: "${OMPI_MAJOR:=4}"
: "${RUSTOFI_MCA_DIR:=$RUSTOFI_TARGET/mca}"
export OMPI_MAJOR RUSTOFI_TARGET OMPI_COMPONENT_DIR RUSTOFI_MCA_DIR
# mpirun option that writes every rank's output to DIR/<job>/rank.N/std*:
# --output-filename DIR on 4.1; Open MPI 5's (PRRTE's) --output-filename
# writes DIR.<job>.N.err files instead, and --output dir=DIR keeps the layout.
#   cmd+=($(ompi_output_dir_args DIR))   (DIR without spaces)
ompi_output_dir_args() {
  if [ "${OMPI_MAJOR:-4}" -ge 5 ]; then echo "--output dir=$1"; else echo "--output-filename $1"; fi
}
unset _rustofi_root
