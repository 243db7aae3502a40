#!/usr/bin/env bash
# Every `unsafe` block or impl in the crate must carry a `// SAFETY:`
# comment on one of the (up to 6) lines before it, or on its own line.
# Generated bindings (src/sys.rs includes them) are exempt.
set -euo pipefail
cd "$(dirname "$0")/../mtl_rustofi/src"
status=0
for f in *.rs; do
  [ "$f" = sys.rs ] && continue
  awk -v file="$f" '
    { line[NR] = $0 }
    /unsafe[ ]*(\{|impl)/ && $0 !~ /^[ \t]*\/\// {
      ok = 0
      for (i = NR; i >= NR - 6 && i >= 1; i--) if (line[i] ~ /SAFETY:/) { ok = 1; break }
      if (!ok) { printf "%s:%d: unsafe without a SAFETY comment: %s\n", file, NR, $0; bad = 1 }
    }
    END { exit bad }' "$f" || status=1
done
[ $status -eq 0 ] && echo "ok   every unsafe block has a SAFETY comment"
exit $status
