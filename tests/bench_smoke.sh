#!/usr/bin/env bash
# Smoke test of the benchmark script's quick mode: runs `bench/p2p --quick`
# and checks that it completed and wrote its files (raw.csv, medians.csv with
# lat rows for rustofi, ofi and ob1-tcp, report.md with the lat table, PNG
# plots), then `bench/bwphase` for one short run (both ranks' phases in
# raw.csv, a table row per configuration in summary.md) and `bench/ab-small`
# for two rounds (every round's sizes in raw.csv, their quartiles in
# summary.md). Checks completion and files only, no speed thresholds.
#   tests/bench_smoke.sh        (BENCH_SMOKE_TIMEOUT s overall, default 600)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

fail() { echo "bench smoke: FAIL: $*" >&2; exit 1; }

marker=$(mktemp /tmp/bench_smoke.XXXXXX)
log=$(mktemp /tmp/bench_smoke_log.XXXXXX)
trap 'rm -f "$marker" "$log"' EXIT
sleep 1  # results folders are named by the second: keep this run's name new

set +e
timeout -k 10 "${BENCH_SMOKE_TIMEOUT:-600}" bench/p2p --quick >"$log" 2>&1
rc=$?
set -e
if [ $rc -ne 0 ]; then
  tail -40 "$log" >&2
  [ $rc -eq 124 ] && fail "bench/p2p --quick did not finish within ${BENCH_SMOKE_TIMEOUT:-600} s"
  fail "bench/p2p --quick exited with status $rc"
fi

# the folder this run created: the newest results/bench/* made after the start
out=
if [ -d results/bench ]; then
  out=$(find results/bench -mindepth 1 -maxdepth 1 -type d -newer "$marker" -printf '%T@ %p\n' \
    | sort -n | tail -1 | cut -d' ' -f2-)
fi
[ -n "$out" ] || { tail -20 "$log" >&2; fail "no results/bench/* folder created by this run"; }
echo "bench smoke: results in $out"

for f in raw.csv medians.csv report.md; do
  [ -s "$out/$f" ] || fail "$out/$f missing or empty"
done
[ "$(head -1 "$out/raw.csv")" = "benchmark,config,repeat,size,value" ] ||
  fail "$out/raw.csv: unexpected header"
[ "$(wc -l <"$out/raw.csv")" -gt 1 ] || fail "$out/raw.csv has no data rows"
[ "$(head -1 "$out/medians.csv")" = "benchmark,config,size,median,min,max" ] ||
  fail "$out/medians.csv: unexpected header"
for c in rustofi ofi ob1-tcp; do
  grep -Eq "^lat,$c,[0-9]+,[0-9.eE+-]+,[0-9.eE+-]+,[0-9.eE+-]+$" "$out/medians.csv" ||
    fail "$out/medians.csv has no lat row for $c (see $out/missing.txt and $out/logs/)"
done
grep -q '^## lat' "$out/report.md" || fail "$out/report.md has no '## lat' section"
grep -q '^| size | rustofi | ofi | ob1-tcp' <<<"$(sed -n '/^## lat/,/^## /p' "$out/report.md")" ||
  fail "$out/report.md: the lat section has no table"

pngs=0
for p in lat.png bw.png; do
  if [ -s "$out/$p" ] && [ "$(head -c 8 "$out/$p" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
    pngs=$((pngs + 1))
  else
    echo "bench smoke: note: $out/$p missing, empty or not a PNG"
  fi
done
[ $pngs -gt 0 ] || fail "no non-empty PNG plot (lat.png, bw.png) in $out"
for p in "$out"/*.png; do
  [ -s "$p" ] || fail "$p is empty"
done

if [ -s "$out/missing.txt" ]; then
  echo "bench smoke: runs recorded as missing (not a failure here):"
  sed 's/^/  /' "$out/missing.txt"
fi
echo "bench smoke: OK ($(wc -l <"$out/raw.csv") raw lines, $pngs of lat.png/bw.png)"

# bench/bwphase: one short run per configuration.
sleep 1
touch "$marker"
sleep 1
set +e
timeout -k 10 120 bench/bwphase --sizes 8 --runs 1 --iters 200 >"$log" 2>&1
rc=$?
set -e
[ $rc -eq 0 ] || { tail -20 "$log" >&2; fail "bench/bwphase exited with status $rc"; }
phases=$(find results/bwphase -mindepth 1 -maxdepth 1 -type d -newer "$marker" | sort | tail -1)
[ -n "$phases" ] || fail "no results/bwphase/* folder created by this run"
[ "$(head -1 "$phases/raw.csv")" = "run,config,size,rank,total,post,wait,ack" ] ||
  fail "$phases/raw.csv: unexpected header"
for c in rustofi-shm ob1-vader; do
  for r in 0 1; do
    grep -Eq "^1,$c,8,$r,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+$" "$phases/raw.csv" ||
      fail "$phases/raw.csv has no phases of rank $r for $c"
  done
  grep -q "^| $c | 8 | 1 |" "$phases/summary.md" || fail "$phases/summary.md has no row for $c"
done
echo "bench smoke: bwphase OK ($phases)"

# bench/ab-small: two rounds against the current build as its own base.
sleep 1
touch "$marker"
sleep 1
set +e
timeout -k 10 120 bench/ab-small target/mca --bench bw --max 8 --rounds 2 >"$log" 2>&1
rc=$?
set -e
[ $rc -eq 0 ] || { tail -20 "$log" >&2; fail "bench/ab-small exited with status $rc"; }
small=$(find results/ab-small -mindepth 1 -maxdepth 1 -type d -newer "$marker" | sort | tail -1)
[ -n "$small" ] || fail "no results/ab-small/* folder created by this run"
for c in A B V; do
  for s in 1 2 4 8; do
    [ "$(grep -Ec "^$c,[12],$s,[0-9.]+$" "$small/raw.csv")" -eq 2 ] ||
      fail "$small/raw.csv lacks the two rounds of $c at $s B"
  done
done
for s in 1 2 4 8; do
  grep -Eq "^\| $s \| [0-9.e+]+ / [0-9.e+]+ / [0-9.e+]+ \|" "$small/summary.md" ||
    fail "$small/summary.md has no quartiles at $s B"
done
echo "bench smoke: ab-small OK ($small)"
