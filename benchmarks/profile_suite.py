"""Where the hook's time goes in the test-suite-shaped workload (a profile to read, not a
benchmark): ``benchmarks/bench_suite.py``'s workload run in this process through clmagic's hook
(as ``clmagic run`` does), with a timer around each step of a build; prints µs per
``Program.build`` for each step (nested steps overlap), and the workload's own line.

    python benchmarks/profile_suite.py [--device pocl] [--tests 50]

Run it twice on one cache folder (``CLMAGIC_CACHE_DIR``): the first fills it, the second is
every program a HIT. (The hook keeps no program in memory since issue 33: nothing is released
later, so the ``--release`` choice of earlier rounds is gone.)
"""

from __future__ import annotations

import argparse
import atexit
import collections
import runpy
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

#: (module, class or None, attribute) of the steps timed
STEPS = [
    ("clmagic.process.hook", None, "_through_cache"),
    ("clmagic.trip.route", None, "travel"), ("clmagic.trip.route", None, "_from_entries"),
    ("clmagic.trip.state", "TripState", "prepare"), ("clmagic.trip.state", "TripState", "lookup"),
    ("clmagic.store.directory.store", "DirectoryStore", "get"),
    ("clmagic.trip.state", "TripState", "load"), ("clmagic.opencl.pyopencl_program", None,
                                                   "raw_from_binaries"),
    ("clmagic.opencl.pyopencl_program", None, "bare_build"), ("clmagic.opencl.driver", None,
                                                              "_built"),
    ("clmagic.trip.state", "TripState", "keep_records"), ("clmagic.trip.state", "TripState",
                                                          "count"),
    ("clmagic.opencl.pyopencl_program", None, "adopt"),
]
spent: collections.Counter[str] = collections.Counter()


def _wrap(owner: Any, name: str, label: str) -> None:
    inner = getattr(owner, name)

    def timed(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter_ns()
        try:
            return inner(*a, **kw)
        finally:
            spent[label] += time.perf_counter_ns() - t
    setattr(owner, name, timed)


def main() -> None:
    import importlib

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--tests", type=int, default=50)
    args = ap.parse_args()
    for mod, cls, name in STEPS:
        m = importlib.import_module(mod)
        _wrap(getattr(m, cls) if cls else m, name, f"{cls or mod.split('.')[-1]}.{name}")
    import pyopencl as cl

    from clmagic.process.hook import install
    from clmagic.process.session import get_compiler
    install(get_compiler)
    _wrap(cl.Program, "build", "Program.build")
    calls = collections.Counter()
    counted = cl.Program.build

    def build(self: Any, *a: Any, **kw: Any) -> Any:
        calls["builds"] += 1
        return counted(self, *a, **kw)
    cl.Program.build = build

    def report() -> None:
        n = max(calls["builds"], 1)
        print(f"{n} Program.build calls; µs a build:", file=sys.stderr)
        for label, ns in spent.most_common():
            print(f"  {label:<40} {ns / n / 1000:8.1f}", file=sys.stderr)
    atexit.register(report)
    sys.argv = ["bench_suite.py", "--child", "--tests", str(args.tests),
                *(["--device", args.device] if args.device else [])]
    runpy.run_path(str(HERE / "bench_suite.py"), run_name="__main__")


if __name__ == "__main__":
    main()
