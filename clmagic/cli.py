"""The ``clmagic`` command: ``demo``, ``devices``, ``info``, ``run``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

__all__ = ["main", "DEMO_SOURCE"]

DEMO_SOURCE = r"""
// A small n-body step plus saxpy: enough code that the driver's build time shows.
__kernel void saxpy(const float a, __global const float *x, __global float *y)
{
    const int i = get_global_id(0);
    y[i] = a * x[i] + y[i];
}

__kernel void nbody_step(__global const float4 *pos, __global const float4 *vel,
                         __global float4 *new_pos, __global float4 *new_vel,
                         const int n, const float dt, const float eps)
{
    const int i = get_global_id(0);
    float4 p = pos[i];
    float4 acc = (float4)(0.0f);
    for (int j = 0; j < n; ++j) {
        float4 d = pos[j] - p;
        d.w = 0.0f;
        float inv = rsqrt(dot(d, d) + eps * eps);
        acc += d * (pos[j].w * inv * inv * inv);
    }
    float4 v = vel[i] + acc * dt;
    new_vel[i] = v;
    new_pos[i] = (float4)(p.xyz + v.xyz * dt, p.w);
}
"""


def _demo_child(args: argparse.Namespace) -> int:
    import numpy as np
    import pyopencl as cl

    from .compiler import Compiler
    from .config import Settings

    settings = Settings.from_env({**os.environ, "CLMAGIC_CACHE_DIR": args.cache_dir})
    compiler = Compiler(settings)
    result = compiler.build(DEMO_SOURCE, args.opts, args.device)
    x = np.arange(1024, dtype=np.float32)
    y = np.ones_like(x)
    mf = cl.mem_flags
    xb = cl.Buffer(result.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(result.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    result.kernels["saxpy"](result.queue, x.shape, None, np.float32(2.0), xb, yb)
    out = np.empty_like(y)
    cl.enqueue_copy(result.queue, out, yb)
    ok = bool(np.allclose(out, 2 * x + 1))
    print(json.dumps({"line": result.summary(), "outcome": result.outcome, "ms": result.ms,
                      "build_ms": result.build_ms, "correct": ok}))
    return 0 if ok else 1


def _demo(args: argparse.Namespace) -> int:
    if args.cache_dir:
        return _demo_runs(args, args.cache_dir)
    with tempfile.TemporaryDirectory(prefix="clmagic-demo-") as cache_dir:
        return _demo_runs(args, cache_dir)


def _demo_runs(args: argparse.Namespace, cache_dir: str) -> int:
    env = {**os.environ, "POCL_KERNEL_CACHE": "0", "CUDA_CACHE_DISABLE": "1"}
    print(f"clmagic demo: cache at {cache_dir} (driver caches off); two separate processes")
    cmd = [sys.executable, "-m", "clmagic", "_demo-child", "--cache-dir", cache_dir]
    if args.device:
        cmd += ["--device", args.device]
    cmd.append(f"--opts={args.opts}")
    runs = []
    for n in (1, 2):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0 or not proc.stdout.strip():
            print(f"process {n} failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        run = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append(run)
        check = "result correct" if run["correct"] else "WRONG RESULT"
        print(f"process {n}: {run['line']} · {check}")
    first, second = runs
    if (first["outcome"], second["outcome"]) != ("MISS", "HIT"):
        print("expected MISS then HIT", file=sys.stderr)
        return 1
    print(f"MISS {first['ms']:.1f} ms → HIT {second['ms']:.2f} ms: "
          f"{first['ms'] / max(second['ms'], 1e-6):.0f}× faster from the cache")
    return 0


def _devices(args: argparse.Namespace) -> int:
    from .config import Settings
    from .devices import default_device, list_devices
    from .errors import DeviceError

    try:
        default: str | None = default_device(Settings.from_env().device)[0].fingerprint
    except DeviceError as exc:
        default = None
        print(f"clmagic: no default device: {exc}", file=sys.stderr)
    for d in list_devices():
        mark = "*" if d.fingerprint == default else " "
        state = "" if d.usable else f" · cannot build here: {d.problem}"
        print(f"{mark} {d.spec:<5} {d.type:<5} {d.platform_name} · {d.device_name} "
              f"· driver {d.driver_version} · {d.fingerprint}{state}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from .manage import cache_info

    print(cache_info())
    return 0


def _run(args: argparse.Namespace) -> int:
    """Run a script (or ``-m`` module) as ``python`` would, every pyopencl build through the
    cache; its exit status is the command's."""
    import runpy

    from ._session import get_compiler  # the process's: the script's clmagic calls see it
    from .hook import install

    from .errors import ClmagicError

    target = args.target
    if not args.module and not os.path.isfile(target):
        raise ClmagicError(f"no script {target!r}")
    sys.argv = [target, *args.args]
    install(get_compiler)
    code: object = 0
    try:
        if args.module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    finally:
        if args.stats:
            from .manage import stats

            print(stats(get_compiler()), file=sys.stderr)
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``clmagic`` command."""
    from .errors import ClmagicError

    parser = argparse.ArgumentParser(prog="clmagic", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    demo = sub.add_parser("demo", help="compile a kernel in two processes: MISS, then HIT")
    child = sub.add_parser("_demo-child")
    for p in (demo, child):
        p.add_argument("--cache-dir", default=None, help="cache folder (default: a temp folder)")
        p.add_argument("--device", default=None, help='device spec, e.g. "pocl" or "0:0"')
        p.add_argument("--opts", default="-O3", help="build options (default: -O3)")
    sub.add_parser("devices", help="list OpenCL devices (* = default), and those that "
                   "cannot build here")
    sub.add_parser("info", help="where the cache is, settings in effect, devices")
    run = sub.add_parser("run", help="run a Python script with every pyopencl build through "
                                     "the cache: clmagic run SCRIPT [ARGS...]")
    run.add_argument("-m", dest="module", action="store_true",
                     help="run a module, as python -m does (clmagic run -m pkg.mod ARGS)")
    run.add_argument("--stats", action="store_true",
                     help="print this run's hits, misses and time saved to stderr at the end")
    run.add_argument("target", metavar="SCRIPT", help="the script (or, with -m, the module)")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    args = parser.parse_args(argv)
    handler = {"demo": _demo, "_demo-child": _demo_child, "devices": _devices, "info": _info,
               "run": _run}
    try:
        return handler[args.cmd](args)
    except ClmagicError as exc:
        print(f"clmagic: {exc}", file=sys.stderr)
        if hasattr(exc, "log"):
            print(exc.log, file=sys.stderr)
        return 2
