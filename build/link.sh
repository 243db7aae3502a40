#!/usr/bin/env bash
# Links the Rust static library (which carries the C shim) into the
# loadable Open MPI component mca_mtl_rustofi.so, against the Open MPI whose
# mpicc is first on PATH.
#   build/link.sh <libmtl_rustofi.a> <output.so>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=$1
out=$2
mkdir -p "$(dirname "$out")"
ompi_libdir=$(mpicc --showme:libdirs | awk '{print $1}')
major=$(mpicc --showme:version 2>&1 | sed -n 's/.*Open MPI \([0-9]*\)\..*/\1/p')
# ---- Open MPI version differences ----
if [ "${major:-4}" -ge 5 ]; then
  # 5.x: no libopen-rte (PRRTE is a separate program); libopen-pal is .so.80;
  # the modex macros call PMIx directly (libpmix).
  # The run path lets the component load (and refuse with a message) even
  # in a process of another Open MPI series.
  ompi_libs=(-lmpi -lopen-pal -lpmix -Wl,-rpath,"$ompi_libdir")
else
  ompi_libs=(-lmpi -lopen-pal -lopen-rte)
fi
# ---- end of version differences ----
tmp="$out.tmp.$$"
cc -shared -o "$tmp" \
  -Wl,--version-script="$here/../config/exports.map" \
  -Wl,-u,mca_mtl_rustofi_component \
  -Wl,--gc-sections -Wl,-z,defs \
  "$lib" \
  -L"$ompi_libdir" "${ompi_libs[@]}" -lfabric \
  -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
# Atomic replace: a job loading the component never sees a half-written file.
mv -f "$tmp" "$out"
