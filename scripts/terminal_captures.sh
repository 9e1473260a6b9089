#!/usr/bin/env bash
# Retake docs/terminal/: what the `clmagic` command prints at 80 (and 100) columns, on a small
# cache made here (two programs of long kernel names, one with -I pyopencl's folder), so a
# change to how the command line reads is seen in review. `scripts/terminal_captures.sh`
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/terminal
w=$(mktemp -d /tmp/w35.XXXX)
export CLMAGIC_CACHE_DIR="$w/cache"
cm() { .venv/bin/python -m clmagic "$@"; }
.venv/bin/python - <<PY
import os, pyopencl, clmagic
inc = os.path.join(os.path.dirname(pyopencl.__file__), "cl")
long = "accumulate_the_partial_sums_of_every_tile"
for opts in (["-I", inc], "-DTILE=16 -cl-mad-enable"):
    clmagic.build(f"__kernel void {long}(__global float *a) {{ a[0] = TILE_OR(1); }}"
                  .replace("TILE_OR(1)", "1.0f")
                  + "__kernel void axpbyz(__global float *y) { y[0] *= 2.0f; }", opts)
PY
for n in 80 100; do
  COLUMNS=$n cm ls > "$out/ls-$n.txt"
  COLUMNS=$n cm config > "$out/config-$n.txt"
done
for c in devices info stats; do COLUMNS=80 cm "$c" > "$out/$c-80.txt"; done
COLUMNS=80 cm demo > "$out/demo-80.txt"
COLUMNS=80 cm ls --help > "$out/help-ls-80.txt"
{ COLUMNS=80 cm lss 2>&1 || echo "exit $?"; } > "$out/unknown-80.txt"
{ set +o pipefail; echo '$ clmagic devices | head -1; echo "exit ${PIPESTATUS[0]}"'
  cm devices | head -1; echo "exit ${PIPESTATUS[0]}"
  echo '$ clmagic ls --csv | head -c 200'; cm ls --csv | head -c 200; echo
  echo "exit ${PIPESTATUS[0]}"; } > "$out/pipe.txt"
rm -rf "$w"
echo "docs/terminal retaken" >&2
