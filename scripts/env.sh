# Sourced by the scripts: environment for running Open MPI as root with the
# component found from the build directory.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's own component directory: the first entry of the default search
# path (ask without any override already in the environment).
OMPI_COMPONENT_DIR=$(env -u OMPI_MCA_mca_base_component_path ompi_info --param mca base --level 9 2>/dev/null \
  | sed -n 's/.*"mca_base_component_path" (current value: "\([^:"]*\).*/\1/p' | head -1)
: "${OMPI_COMPONENT_DIR:=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3}"
export RUSTOFI_MCA_DIR="${RUSTOFI_MCA_DIR:-$ROOT/target/mca}"
export OMPI_MCA_mca_base_component_path="$RUSTOFI_MCA_DIR:$OMPI_COMPONENT_DIR"
