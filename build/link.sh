#!/usr/bin/env bash
# Links the Rust static library (which carries the C shim) into the
# loadable Open MPI component mca_mtl_rustofi.so, against the Open MPI whose
# mpicc is first on PATH.
#   build/link.sh <libmtl_rustofi.a> <output.so>
#   LINK_CC      the compiler driver that links (default cc; scripts/build
#                names the clang of its cross-language LTO)
#   LINK_FLAGS   extra flags for the link (tests/asan.sh: -fsanitize=address)
#   LINK_CHECK_FLAGS  extra flags for the 5.x symbol check's link only
# The component is linked -z nodelete: Open MPI's memory hooks call our
# release callback without holding their lock, so a thread may still be
# inside it after finalize unregistered it and Open MPI dlclose()d the
# component; with nodelete its code (and the never-freed release ring it
# pushes on) stays mapped until the process exits.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=$1
out=$2
mkdir -p "$(dirname "$out")"
ompi_libdir=$(mpicc --showme:libdirs | awk '{print $1}')
major=$(mpicc --showme:version 2>&1 | sed -n 's/.*Open MPI \([0-9]*\)\..*/\1/p')
tmp="$out.tmp.$$"
trap 'rm -f "$tmp" "$tmp.check"' EXIT
link() { # output, Open MPI libraries and flags...
  local o=$1
  shift
  # shellcheck disable=SC2086
  ${LINK_CC:-cc} -shared ${LINK_FLAGS:-} -o "$o" \
    -Wl,--version-script="$here/../config/exports.map" \
    -Wl,-u,mca_mtl_rustofi_component \
    -Wl,--gc-sections \
    -Wl,-z,nodelete \
    "$lib" \
    -L"$ompi_libdir" "$@" -lfabric \
    -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
}
# ---- Open MPI version differences ----
if [ "${major:-4}" -ge 5 ]; then
  # 5.x: no libopen-rte (PRRTE is a separate program); libopen-pal is .so.80;
  # the modex macros call PMIx directly (libpmix). First a link that checks
  # every symbol resolves; then the component itself names only libmpi.so.40
  # (whose own dependencies bring libopen-pal and libpmix): Debian's 4.1
  # has libmpi.so.40 and libpmix.so.2 too, so in a 4.1 process this build
  # still loads (its Open MPI symbols bind lazily to what is there) and can
  # refuse with its message instead of failing in the loader.
  # shellcheck disable=SC2086
  link "$tmp.check" ${LINK_CHECK_FLAGS:-} -Wl,-z,defs -lmpi -lopen-pal -lpmix
  link "$tmp" -lmpi -Wl,-rpath,"$ompi_libdir"
else
  link "$tmp" -Wl,-z,defs -lmpi -lopen-pal -lopen-rte
fi
# ---- end of version differences ----
# Atomic replace: a job loading the component never sees a half-written file.
mv -f "$tmp" "$out"
# The help file beside the component: found there when it runs from this
# directory (installed, it goes to Open MPI's data directory).
install -m 0644 "$here/../mtl_rustofi/shim/help-mtl-rustofi.txt" "$(dirname "$out")/"
