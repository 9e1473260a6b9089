"""A first-run pyopencl workload: what a notebook or script typically builds in its first seconds.

    python benchmarks/hook_workload.py [--device SPEC] [--json]             # pyopencl's own path
    python -m clmagic run benchmarks/hook_workload.py [--device SPEC] [--json]  # through clmagic

pyopencl.array arithmetic, ``sum`` and ``dot`` (reductions), ``cumsum`` (a scan), an
``ElementwiseKernel``, a ``ReductionKernel`` and, when silx is installed, silx's OpenCL
``Convolution`` (an ``OpenclProcessing`` class). Each result is compared with numpy's.

``--json`` prints one JSON line: ``errors`` (the largest relative error of each step against
numpy), ``workload_s`` (from the first array operation to the last result, kernels built
included; imports, device and context choice excluded), ``build_s`` (time spent building: inside
``pyopencl.Program.build`` for pyopencl's path, the trips' own times from clmagic's records when
its hook is installed, so that a timing wrapper does not hide the module that asked), ``builds``
(how many), and with the hook the ``outcomes`` and ``origins`` of its records. Needs numpy,
pyopencl and Mako (pyopencl's generated kernels); silx is optional.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pyopencl as cl


def pick_device(spec: str | None) -> cl.Device:
    """``P:D``, or a case-insensitive part of "platform device" that can build; else the first
    GPU, else the first device."""
    pairs = [(p, d) for p in cl.get_platforms() for d in p.get_devices()]
    if spec and spec.replace(":", "").isdigit():
        pi, _, di = spec.partition(":")
        return cl.get_platforms()[int(pi)].get_devices()[int(di or 0)]
    if spec:  # "pocl" names POCL, whose platform is "Portable Computing Language"
        pairs = [(p, d) for p, d in pairs
                 if spec.lower() in f"{p.name} {d.name} {'pocl' * ('Portable' in p.name)}".lower()]
    else:
        pairs.sort(key=lambda pd: not pd[1].type & cl.device_type.GPU)
    for _, dev in pairs:  # the first that really builds (one POCL may not know this CPU)
        try:
            probe = "__kernel void k(__global int *a) {a[0] = 1;}"
            cl._cl._Program(cl.Context([dev]), probe)._build(options=b"", devices=[dev])
            return dev
        except cl.Error:
            continue
    raise SystemExit(f"no OpenCL device that builds matches {spec!r}")


class BuildTimer:
    """Time spent in ``pyopencl.Program.build`` (whatever it is: pyopencl's or clmagic's)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        inner = cl.Program.build

        def build(prg, *args, **kwargs):
            t = time.perf_counter()
            try:
                return inner(prg, *args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t
                self.calls += 1

        cl.Program.build = build  # type: ignore[method-assign]


def _rel(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)))


def import_all() -> bool:
    """Import what the workload uses (not timed: a notebook imports in its first cell); returns
    whether silx is there."""
    import pyopencl.array  # noqa: F401
    import pyopencl.elementwise  # noqa: F401
    import pyopencl.reduction  # noqa: F401
    import pyopencl.scan  # noqa: F401

    try:
        import silx.opencl.convolution  # noqa: F401
    except ImportError:
        return False
    return True


def workload(ctx: cl.Context, queue: cl.CommandQueue) -> dict[str, float]:
    """Run every step; returns each step's largest relative error against numpy."""
    import pyopencl.array as cla
    from pyopencl.elementwise import ElementwiseKernel
    from pyopencl.reduction import ReductionKernel

    rng = np.random.default_rng(0)
    x = rng.random(4096, dtype=np.float32)
    y = rng.random(4096, dtype=np.float32)
    a, b = cla.to_device(queue, x), cla.to_device(queue, y)
    errors = {
        "arithmetic": _rel((2 * a + b * b - 1).get(), 2 * x + y * y - 1),
        "sum": _rel(cla.sum(a).get(), x.astype(np.float64).sum()),
        "dot": _rel(cla.dot(a, b).get(), np.dot(x.astype(np.float64), y)),
        "cumsum": _rel(cla.cumsum(a).get(), np.cumsum(x.astype(np.float64))),
    }
    fma = ElementwiseKernel(ctx, "float *x, float *y, float *z", "z[i] = x[i] * y[i] + sin(x[i])",
                            "fma_sin")
    z = cla.empty_like(a)
    fma(a, b, z)
    errors["elementwise"] = _rel(z.get(), x * y + np.sin(x))
    sumsq = ReductionKernel(ctx, np.float32, neutral="0", reduce_expr="a+b",
                            map_expr="x[i]*x[i]", arguments="__global const float *x")
    errors["reduction"] = _rel(sumsq(a).get(), np.dot(x.astype(np.float64), x))
    try:
        from silx.opencl.convolution import Convolution
    except ImportError:
        return errors
    taps = np.array([1, 2, 3, 4, 5], np.float32) / 15
    conv = Convolution(x.shape, taps, mode="wrap", ctx=ctx)
    errors["silx_convolution"] = _rel(conv(x), sum(taps[j] * np.roll(x, j - 2) for j in range(5)))
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help='"P:D" or part of the platform/device name')
    ap.add_argument("--json", action="store_true", help="print one JSON line of results")
    args = ap.parse_args(argv)
    try:
        import mako  # noqa: F401 - pyopencl's reductions and scans are Mako templates
    except ImportError:
        raise SystemExit("hook_workload: pip install mako (pyopencl needs it for sum, dot, "
                         "cumsum)") from None
    dev = pick_device(args.device)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    hook = sys.modules.get("clmagic.process.hook")
    hooked = hook is not None and hook.installed()
    import_all()
    timer = None if hooked else BuildTimer()
    t0 = time.perf_counter()
    errors = workload(ctx, queue)
    queue.finish()
    out: dict = {"device": f"{dev.platform.name} · {dev.name}", "errors": errors,
                 "workload_s": time.perf_counter() - t0}
    if timer is not None:
        out.update(build_s=timer.seconds, builds=timer.calls)
    else:
        from clmagic import get_compiler

        records = get_compiler().history.records
        out.update(build_s=sum(r.ms for r in records) / 1000, builds=len(records),
                   outcomes=[r.outcome for r in records],
                   origins=sorted({r.origin for r in records}))
    if args.json:
        print(json.dumps(out))
    else:
        for step, err in errors.items():
            print(f"{step:<18} max relative error vs numpy {err:.2e}")
        print(f"workload {out['workload_s']:.3f} s, of which {out['builds']} builds "
              f"{out['build_s']:.3f} s · {out['device']}")
    return 0 if max(errors.values()) < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
