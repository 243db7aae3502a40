#!/usr/bin/env bash
# Links the Rust static library (which carries the C shim) into the
# loadable Open MPI component mca_mtl_rustofi.so.
#   build/link.sh <libmtl_rustofi.a> <output.so>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=$1
out=$2
mkdir -p "$(dirname "$out")"
ompi_libdir=$(mpicc --showme:libdirs | awk '{print $1}')
tmp="$out.tmp.$$"
cc -shared -o "$tmp" \
  -Wl,--version-script="$here/../config/exports.map" \
  -Wl,-u,mca_mtl_rustofi_component \
  -Wl,--gc-sections -Wl,-z,defs \
  "$lib" \
  -L"$ompi_libdir" -lmpi -lopen-pal -lopen-rte -lfabric \
  -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
# Atomic replace: a job loading the component never sees a half-written file.
mv -f "$tmp" "$out"
