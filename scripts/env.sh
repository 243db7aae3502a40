# Sourced by the scripts: environment for running Open MPI as root with the
# component found from the build directory. With OMPI_PREFIX set, the Open MPI
# installed there (see scripts/ompi-prefix.sh).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's own component directory: the first entry of the default search
# path (ask without any override already in the environment).
if [ -z "${OMPI_COMPONENT_DIR:-}" ]; then
  OMPI_COMPONENT_DIR=$(env -u OMPI_MCA_mca_base_component_path \
    PATH="${OMPI_PREFIX:+$OMPI_PREFIX/bin:}$PATH" ompi_info --param mca base --level 9 2>/dev/null \
    | sed -n 's/.*"mca_base_component_path" (current value: "\([^:"]*\).*/\1/p' | head -1)
fi
# shellcheck source=ompi-prefix.sh
. "$ROOT/scripts/ompi-prefix.sh"
export OMPI_MCA_mca_base_component_path="$RUSTOFI_MCA_DIR:$OMPI_COMPONENT_DIR"
