#!/usr/bin/env bash
# The GPU host's benchmark run (NVIDIA, Python 3.12, no package registry): a venv from carried
# cp312 wheels (.whl/: numpy, pyopencl and its pure-Python needs, IPython for the magic role,
# Mako), the silx/pyFAI corpus unpacked in .corpus/ (benchmarks/corpus.py extract_cl), results
# in $OUT.
#
#   benchmarks/gpu_run.sh real hook on off suite facts profile split tune ab  (steps in order;
#   real-on, real-off, suite-on, suite-off: one side; FILES_REAL, REPEATS_REAL, COUNT_REAL=1,
#   LABEL_REAL, MAX_REAL_ON/OFF, REPEATS_ON/OFF/HOOK/SUITE/PROFILE/TUNE, TESTS_SUITE,
#   WIDTH_TUNE, LABEL_TUNE, AB_BASE, PAIRS_AB)
#
# real, tune and ab run in a venv from the cp312 wheels carried in .gpu-wheels/ (pyopencl and
# its pure-Python needs, blake3, Mako, Kernel Tuner's) with numpy, pandas, xxhash and pytest
# from the host's python3 (on the lent H100 they live in /opt/torch/.venv, which a venv made
# with --system-site-packages does not see: a .pth line names their folders).
set -euo pipefail
cd "$(dirname "$0")/.."
# the OpenCL ICD loader pointed at NVIDIA's library (as ../shared/tools/nvidia-opencl-env.sh)
for lib in /usr/lib/libnvidia-opencl.so.1 /usr/lib/libnvidia-opencl.so \
           /usr/local/nvidia/lib64/libnvidia-opencl.so.1; do
  if [ -e "$lib" ]; then
    mkdir -p /tmp/opencl-vendors && echo "$lib" > /tmp/opencl-vendors/nvidia.icd
    export OCL_ICD_VENDORS=/tmp/opencl-vendors
    break
  fi
done
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
# the venv from .whl/ for the older steps; real, tune and ab use the one from .gpu-wheels/
steps_need_whl=false
for step in "$@"; do
  case $step in real|real-on|real-off|tune|ab) ;; *) steps_need_whl=true ;; esac
done
WPY=/tmp/tune-venv/bin/python
wheel_venv() {
  [ -x $WPY ] && $WPY -c 'import pyopencl, numpy, pytest' 2>/dev/null && return 0
  python3 -m venv --system-site-packages /tmp/tune-venv
  /tmp/tune-venv/bin/pip install -q --no-index --no-deps .gpu-wheels/*.whl
  for m in numpy pandas xxhash pytest; do
    python3 -c "import $m, os; print(os.path.dirname(os.path.dirname($m.__file__)))"
  done | sort -u > "$($WPY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/host-packages.pth"
}
if $steps_need_whl && ! /tmp/gpu-venv/bin/python -c 'import numpy, pyopencl, IPython, mako' 2>/dev/null; then
  python3 -m venv --system-site-packages /tmp/gpu-venv
  /tmp/gpu-venv/bin/pip install -q --no-index --find-links .whl numpy pyopencl mako ipython \
    platformdirs pytools siphash24 typing_extensions markupsafe xxhash blake3
fi
PY=/tmp/gpu-venv/bin/python
# pandas (the sweep's and the workbench's frames) from the host's own Python when the venv lacks
# it; a .pth line goes after the venv's packages, so the carried numpy and pyopencl still win
if $steps_need_whl && ! $PY -c 'import pandas' 2>/dev/null; then
  python3 -c 'import pandas, os; print(os.path.dirname(os.path.dirname(pandas.__file__)))' \
    > "$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/host-pandas.pth" || true
fi
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/machine.txt" || true
for step in "$@"; do
  case $step in
    on)  $PY benchmarks/bench_build.py --device nvidia --corpus-dir .corpus --driver-cache on \
           --max-real "${MAX_REAL_ON:-9}" --repeats "${REPEATS_ON:-3}" --label nvidia-h200-on \
           --out "$OUT" ;;
    off) $PY benchmarks/bench_build.py --device nvidia --corpus-dir .corpus --driver-cache off \
           --max-real "${MAX_REAL_OFF:-5}" --max-bytes 30000 --repeats "${REPEATS_OFF:-2}" \
           --label nvidia-h200-off --out "$OUT" ;;
    hook) $PY benchmarks/bench_hook.py --device nvidia --repeats "${REPEATS_HOOK:-7}" \
           --label nvidia-h200 --out "$OUT" ;;
    suite|suite-on|suite-off)
      for cache in on off; do
        [ "$step" = suite ] || [ "$step" = "suite-$cache" ] || continue
        $PY benchmarks/bench_suite.py --device nvidia --driver-cache $cache \
          --tests "${TESTS_SUITE:-50}" --repeats "${REPEATS_SUITE:-3}" \
          --label nvidia-h200-$cache --out "$OUT"
      done ;;
    facts) $PY benchmarks/gpu_facts.py --device nvidia --out "$OUT" > "$OUT/gpu-facts.log" 2>&1 ;;
    profile) $PY benchmarks/profile_hit.py --device nvidia --repeats "${REPEATS_PROFILE:-20}" \
           --json "$OUT/profile-hit-nvidia-h200.json" > "$OUT/profile-hit-nvidia-h200.txt" ;;
    split) export CLMAGIC_CACHE_DIR=$(mktemp -d)/cache  # filled once, then every build a HIT
           $PY benchmarks/profile_suite.py --device nvidia > /dev/null 2>&1
           for _ in 1 2; do
             $PY benchmarks/profile_suite.py --device nvidia 2>&1 | cut -c1-300
           done > "$OUT/profile-suite-nvidia-h200.txt"
           unset CLMAGIC_CACHE_DIR ;;
    real|real-on|real-off)  # pyopencl's own test files, plain against clmagic run
      wheel_venv
      for cache in on off; do
        [ "$step" = real ] || [ "$step" = "real-$cache" ] || continue
        # shellcheck disable=SC2086
        $WPY benchmarks/bench_pyopencl_suite.py --device nvidia --driver-cache $cache \
          --files ${FILES_REAL:-test_array.py test_algorithm.py} \
          --repeats "$( [ "$cache" = on ] && echo "${REPEATS_REAL_ON:-${REPEATS_REAL:-1}}" || echo "${REPEATS_REAL:-1}")" \
          ${COUNT_REAL:+--count} --label "${LABEL_REAL:-nvidia}-$cache" --out "$OUT"
      done ;;
    prof) # where a first run under clmagic run spends its time on the main thread (cProfile)
      wheel_venv
      dir=$(mktemp -d) && cp tests/data/pyopencl/${FILE_PROF:-test_array.py} "$dir/"
      (cd "$dir" && PYOPENCL_TEST=nvidia CLMAGIC_CACHE_DIR="$dir/cache" $WPY -m cProfile \
        -o "$dir/first.prof" -m clmagic run -m pytest -q -p no:cacheprovider -o addopts= \
        "${FILE_PROF:-test_array.py}" > /dev/null 2>&1 || true)
      $WPY -c "import pstats, sys; s = pstats.Stats('$dir/first.prof', stream=sys.stdout)
s.sort_stats('cumulative').print_stats('clmagic|pyopencl/__init__|tools.py', 45)
s.sort_stats('tottime').print_stats(30)" > "$OUT/profile-first-nvidia.txt" 2>&1 ;;
    tune) # Kernel Tuner's re-tune (no scipy, scikit-learn or pymoo: the brute force needs none)
          wheel_venv
          $WPY benchmarks/bench_tune.py --device nvidia --driver-cache both \
            --width "${WIDTH_TUNE:-512}" --repeats "${REPEATS_TUNE:-5}" \
            --label "${LABEL_TUNE:-nvidia-h100}" --out "$OUT" ;;
    ab) wheel_venv
        $WPY benchmarks/ab_hit.py --device nvidia --base "${AB_BASE:-.ab-base}" \
           --pairs "${PAIRS_AB:-8}" --label nvidia-h200 --out "$OUT" ;;  # AB_BASE: git archive
    *) echo "gpu_run.sh: unknown step $step (real, real-on, real-off, prof, on, off, hook, suite, suite-on, suite-off, facts, profile, split, tune, ab)" >&2; exit 2 ;;
  esac
done
