#!/usr/bin/env bash
# The Debian package (scripts/package) on this machine's Open MPI 4.1:
# installs it with apt-get, checks that ompi_info lists the component, that
# `mpirun --mca mtl rustofi` runs a test program on it with no environment
# variables at all (no component path: the component comes from Open MPI's
# own directory), and that a bad parameter prints the installed help text;
# then purges the package and checks that none of its files is left.
# The package is purged on any failure too. It refuses to run when the
# component is already installed (scripts/install or the package), so as
# not to remove someone else's installation.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$root/target/package-test
mkdir -p "$work"
log=$work/log.txt
: >"$log"
fail() { echo "FAIL package: $*" >&2; [ -s "$log" ] && tail -30 "$log" >&2; exit 1; }

compdir=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
if dpkg-query -W -f='${Status}' mtl-rustofi 2>/dev/null | grep -q "install ok installed"; then
  fail "mtl-rustofi is already installed (apt-get purge mtl-rustofi first)"
fi
[ ! -e "$compdir/mca_mtl_rustofi.so" ] || fail "$compdir/mca_mtl_rustofi.so exists (scripts/uninstall first)"

deb=$(env -u OMPI_PREFIX "$root/scripts/package" | tail -1)
[ -f "$deb" ] || fail "scripts/package printed no package path ($deb)"
echo "package: $deb"

installed=0
cleanup() {
  if [ $installed -eq 1 ]; then
    apt-get purge -y mtl-rustofi >>"$log" 2>&1 || true
  fi
}
trap cleanup EXIT

# A test program built outside the tests' own build directory.
mpicc -O2 -o "$work/order_wildcard" "$root/tests/mpi/order_wildcard.c" || fail "mpicc"

apt-get install -y "$deb" >>"$log" 2>&1 || fail "apt-get install $deb"
installed=1
files=$(dpkg -L mtl-rustofi)
for f in "$compdir/mca_mtl_rustofi.so" /usr/share/openmpi/help-mtl-rustofi.txt; do
  grep -qx "$f" <<<"$files" || fail "the package does not install $f"
  [ -f "$f" ] || fail "$f missing after installation"
done

# Nothing from the caller's environment: no component path, no MCA
# settings; root is allowed by option.
clean=(env -i PATH=/usr/bin:/bin HOME="$HOME")
"${clean[@]}" ompi_info --param mtl rustofi --level 9 >"$work/ompi_info.txt" 2>&1 \
  || fail "ompi_info"
grep -q 'Valid values: 2:"auto", 1:"on", 0:"off"' "$work/ompi_info.txt" \
  || fail "ompi_info does not list mtl_rustofi_shm with its values"

run() { # output file, mpirun arguments...
  local out=$1
  shift
  timeout 120 "${clean[@]}" mpirun --allow-run-as-root -np 2 --bind-to none "$@" \
    "$work/order_wildcard" >"$out" 2>&1
}
run "$work/run.txt" --mca mtl rustofi --mca mtl_rustofi_provider_include tcp \
  --mca mtl_rustofi_verbose 1 || { cat "$work/run.txt" >>"$log"; fail "mpirun --mca mtl rustofi failed"; }
grep -q "PASS order_wildcard" "$work/run.txt" || fail "the program did not pass"
n=$(grep -c "rustofi: rank=[01] provider=tcp" "$work/run.txt" || true)
[ "$n" -eq 2 ] || { cat "$work/run.txt" >>"$log"; fail "expected 2 rustofi counter lines, got $n"; }
echo "ok   package: mpirun --mca mtl rustofi ran on the installed component"

run "$work/badvalue.txt" --mca mtl rustofi --mca mtl_rustofi_provider_include tcp \
  --mca mtl_rustofi_coalesce 5 || fail "a bad parameter broke the job"
grep -q "An MCA parameter of the rustofi MTL has a value it cannot use" "$work/badvalue.txt" \
  || { cat "$work/badvalue.txt" >>"$log"; fail "the installed help text was not printed"; }
echo "ok   package: a bad value prints the installed help text"

apt-get purge -y mtl-rustofi >>"$log" 2>&1 || fail "apt-get purge"
installed=0
if dpkg-query -W -f='${Status}' mtl-rustofi 2>/dev/null | grep -q installed; then
  fail "dpkg still lists mtl-rustofi after purge"
fi
left=()
while read -r f; do
  # directories are shared with other packages; only files must go
  if [ -e "$f" ] && [ ! -d "$f" ]; then
    left+=("$f")
  fi
done <<<"$files"
[ -d /usr/share/doc/mtl-rustofi ] && left+=(/usr/share/doc/mtl-rustofi)
[ ${#left[@]} -eq 0 ] || fail "left after purge: ${left[*]}"
echo "ok   package: purged, nothing left"
