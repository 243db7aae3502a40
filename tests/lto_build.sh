#!/usr/bin/env bash
# What the cross-language link-time optimisation of scripts/build
# (RUSTOFI_LTO) must give, read from the built component:
#   - the shim's per-message entry points hold the Rust send and receive
#     post inline: rustofi_send and rustofi_mtl_irecv make no call (nor tail
#     call) to rustofi_isend / rustofi_irecv (the instruction counts of
#     docs/performance.md depend on it);
#   - the unwind guard came with the Rust code (ffi::guard, catch_unwind):
#     each of the two functions calls catch_unwind's cleanup and
#     ffi::panicked (the handler that reports a panic and answers an
#     error), and its unwind entry carries a language-specific data area
#     (the landing pads), so that a panic in the engine is caught there
#     and reported rather than unwinding into Open MPI;
#   - a plain build (cc, no LTO) of the same sources still makes both
#     calls, so that the checks above tell one build from the other.
#   tests/lto_build.sh [component.so]   (default target/mca/mca_mtl_rustofi.so;
#                                        with OMPI_PREFIX set, that Open MPI's build)
# Fails when the component was built without LTO: run it where scripts/build
# reported "link-time optimisation".
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../scripts/ompi-prefix.sh
. "$ROOT/scripts/ompi-prefix.sh"
so=${1:-$RUSTOFI_TARGET/mca/mca_mtl_rustofi.so}
[ -f "$so" ] || { echo "lto_build: no $so (scripts/build)" >&2; exit 1; }
failed=0
fail() { echo "FAIL: $*"; failed=1; }

dis=$(mktemp)
trap 'rm -f "$dis"' EXIT
objdump -d --no-show-raw-insn "$so" >"$dis"
body() { awk -v f="<$1>:" '$2 == f {on = 1; next} on && /^$/ {exit} on' "$dis"; }
# Whether CALLER calls or tail-calls CALLEE, a clone of it (name.llvm.N,
# .specialized.N) or its PLT entry.
calls() { body "$1" | grep -Eq "(call|jmp) +[0-9a-f]+ <$2([.@][^>]*)?>"; }
for pair in rustofi_send:rustofi_isend rustofi_mtl_irecv:rustofi_irecv; do
  caller=${pair%%:*} callee=${pair#*:}
  n=$(body "$caller" | wc -l)
  [ "$n" -gt 0 ] || { fail "$caller not found in $so"; continue; }
  if calls "$caller" "$callee"; then
    fail "$caller calls $callee: not inlined (was the component built with LTO?)"
  else
    echo "ok   $caller holds $callee inline ($n instructions)"
  fi
done

# The guard's handler and catch_unwind's cleanup are called from each.
for f in rustofi_send rustofi_mtl_irecv; do
  calls=$(body "$f" | grep -oE "call +[0-9a-f]+ <[^>]*>")
  if grep -q "mtl_rustofi3ffi8panicked" <<<"$calls" && grep -q "catch_unwind7cleanup" <<<"$calls"; then
    echo "ok   $f calls the unwind guard's handler (ffi::panicked) and catch_unwind's cleanup"
  else
    fail "$f: no call to ffi::panicked and catch_unwind's cleanup: the unwind guard is not in it"
  fi
done

# The FDE that covers each function, and whether it has augmentation data
# (the LSDA pointer; its CIE names the personality routine).
frames=$(readelf --debug-dump=frames "$so" 2>/dev/null)
for f in rustofi_send rustofi_mtl_irecv; do
  addr=$(nm "$so" | awk -v f="$f" '$3 == f {print $1}')
  [ -n "$addr" ] || { fail "no symbol $f"; continue; }
  fde=$(python3 -c '
import re, sys
a = int(sys.argv[1], 16)
on = False
for line in sys.stdin:
    m = re.search(r" FDE .*pc=([0-9a-f]+)\.\.([0-9a-f]+)", line)
    if m:
        on = int(m.group(1), 16) <= a < int(m.group(2), 16)
    elif on and "Augmentation data:" in line:
        print("lsda"); break
    elif on and "DW_CFA" in line:
        print("none"); break
' "$addr" <<<"$frames")
  if [ "$fde" = lsda ]; then
    echo "ok   $f: its unwind entry carries landing pads (LSDA)"
  else
    fail "$f: unwind entry ${fde:-missing}, without a language-specific data area"
  fi
done

# The plain build, for contrast: the same check must find both calls.
# Built where scripts/build's plain build goes (target/, or target/ompiN/cargo),
# linked apart. LTO_CHECK_PLAIN=0 leaves it out (scripts/test does for 5.0,
# after the 4.1 stage has shown the contrast).
plain=$RUSTOFI_TARGET/lto-check-plain
if [ "${LTO_CHECK_PLAIN:-1}" = 1 ]; then
  cargo_dir=$ROOT/target
  [ -z "${OMPI_PREFIX:-}" ] || cargo_dir=$RUSTOFI_TARGET/cargo
  CARGO_TARGET_DIR=$cargo_dir cargo build -q --release -p mtl_rustofi --manifest-path "$ROOT/Cargo.toml"
  "$ROOT/build/link.sh" "$cargo_dir/release/libmtl_rustofi.a" "$plain/mca_mtl_rustofi.so"
  objdump -d --no-show-raw-insn "$plain/mca_mtl_rustofi.so" >"$dis"
  for pair in rustofi_send:rustofi_isend rustofi_mtl_irecv:rustofi_irecv; do
    caller=${pair%%:*} callee=${pair#*:}
    if calls "$caller" "$callee"; then
      echo "ok   the plain build's $caller calls $callee"
    else
      fail "the plain build's $caller makes no call to $callee: the check cannot tell the builds apart"
    fi
  done
fi
[ $failed -eq 0 ] && echo "lto_build: all checks passed"
exit $failed
