#!/usr/bin/env bash
# Short runs of the fuzz targets in mtl_rustofi/fuzz (everything the
# component decodes from outside: packet headers, the modex record, and a
# protocol core fed fuzzed packets, coalesced runs and RTS/CTS/FIN bodies).
# Each runs FUZZ_SECONDS (default 20) from the committed seed corpus; a
# crash, a panic, a failed assertion or an input taking over 5 s fails it.
#   tests/fuzz_short.sh [TARGET...]
# Long runs (docs/testing.md): cargo +nightly fuzz run -O TARGET -- -runs=10000000
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/env.sh"
cd "$ROOT/mtl_rustofi"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(header peer_info core_packets)
cargo +nightly fuzz build -O >/dev/null
for t in "${targets[@]}"; do
  # A scratch corpus seeded from the committed one, so that runs here
  # never change the repository.
  work=$(mktemp -d)
  cp -r "fuzz/seeds/$t/." "$work/" 2>/dev/null || true
  log=$(mktemp)
  if ! cargo +nightly fuzz run -O "$t" "$work" -- -max_total_time="${FUZZ_SECONDS:-20}" \
      -max_len=4096 -timeout=5 -artifact_prefix="$work/" >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "fuzz target $t failed; the input is in $work" >&2
    exit 1
  fi
  runs=$(grep -o 'Done [0-9]* runs' "$log" | awk '{print $2}')
  [ -n "$runs" ] && [ "$runs" -gt 0 ] || { tail -20 "$log" >&2; echo "fuzz target $t ran nothing" >&2; exit 1; }
  echo "fuzz $t: $runs runs, no finding"
  rm -rf "$work" "$log"
done
