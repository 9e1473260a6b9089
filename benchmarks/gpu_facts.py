"""Kernel facts and a sweep on an NVIDIA GPU (issue 25), for the lead's H200 run.

    python benchmarks/gpu_facts.py [--device nvidia] [--out DIR]   (default DIR: $OUT, else .)

1. Builds two kernels (a streaming saxpy; a register-hungry unrolled kernel that spills under
   ``-cl-nv-maxrregcount=32``) with ``-cl-nv-verbose``, and prints clmagic's facts
   (``r.kernel_info``) beside the raw ptxas lines of the driver's build log, with a check that
   registers, spills and shared memory agree with those lines.
2. Builds them again in a new compiler over the same cache (HIT): the facts must be the same.
3. Shows the PTX (``r.ptx``): its first lines and its ``.entry`` names (checked to be the
   program's kernels).
4. Sweeps a tiled matrix multiply over TS=8,16,32 and WPT=1,2,4 (work per item; one refused:
   TS=32 with WPT=4 is over the #if), timed with time_kernel and
   checked against numpy; runs it twice (MISS then all HITs, the timings resumed).

Writes ``gpu-facts.json`` and ``gpu-facts.md`` to the output folder. Exits 1 when a check fails
(the JSON says which). Off NVIDIA it runs too, and says which figures the driver did not give.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clmagic  # noqa: E402
from clmagic.config import Settings  # noqa: E402
from clmagic.opencl.code import ptx_entries  # noqa: E402
from clmagic.opencl.ptxas import parse_ptxas, ptxas_lines  # noqa: E402

KERNELS = """\
__kernel void saxpy(const float a, __global const float *x, __global float *y)
{ const int i = get_global_id(0); y[i] = a * x[i] + y[i]; }

__kernel void heavy(__global const float *x, __global float *y)
{
    const int i = get_global_id(0);
    float acc[64];
    #pragma unroll
    for (int k = 0; k < 64; k++) acc[k] = x[(i + k * 131) & 0xFFFF] * (k + 1);
    float s = 0.0f;
    #pragma unroll
    for (int k = 0; k < 64; k++) s += acc[k] * acc[63 - k];
    y[i] = s;
}
"""

MATMUL = """\
#if TS * TS * WPT > 2048
#error "tile too large for this sweep"
#endif
__kernel void matmul(const int n, __global const float *A, __global const float *B,
                     __global float *C)
{
    const int lc = get_local_id(0), lr = get_local_id(1);
    const int col = TS * get_group_id(0) + lc, row0 = TS * WPT * get_group_id(1) + lr;
    __local float As[TS * WPT][TS];
    __local float Bs[TS][TS];
    float acc[WPT];
    for (int w = 0; w < WPT; w++) acc[w] = 0.0f;
    for (int t = 0; t < n / TS; t++) {
        for (int w = 0; w < WPT; w++)
            As[lr + w * TS][lc] = A[(row0 + w * TS) * n + TS * t + lc];
        Bs[lr][lc] = B[(TS * t + lr) * n + col];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TS; k++)
            for (int w = 0; w < WPT; w++)
                acc[w] += As[lr + w * TS][k] * Bs[k][lc];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int w = 0; w < WPT; w++) C[(row0 + w * TS) * n + col] = acc[w];
}
"""
N = 512


def facts_vs_log(result: clmagic.BuildResult) -> list[dict[str, object]]:
    """Each kernel's facts beside what the log's ptxas lines say (None where they say nothing)."""
    raw = parse_ptxas(result.build_log)
    rows = []
    for name, f in result.kernel_info.items():
        u = raw.get(name)
        rows.append({
            "kernel": name, "registers": f.registers, "spills": f.spills,
            "spill_stores": f.spill_stores, "spill_loads": f.spill_loads,
            "shared_mem": f.shared_mem, "work_group_size": f.work_group_size,
            "preferred_multiple": f.preferred_multiple, "local_mem": f.local_mem,
            "private_mem": f.private_mem,
            "log_registers": u.registers if u else None, "log_spills": u.spills if u else None,
            "log_shared_mem": u.shared_mem if u else None,
            "agree": u is None or (u.registers, u.spills, u.shared_mem) == (
                f.registers, f.spills, f.shared_mem),
        })
    return rows


def launch(r: clmagic.BuildResult) -> clmagic.Timing:
    rng = np.random.default_rng(0)
    a = rng.random((N, N), dtype=np.float32)
    b = rng.random((N, N), dtype=np.float32)
    mf = cl.mem_flags
    ab = cl.Buffer(r.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    bb = cl.Buffer(r.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    cb = cl.Buffer(r.context, mf.WRITE_ONLY, a.nbytes)
    opts = dict(o[2:].split("=") for o in r.options.effective.split() if o.startswith("-D"))
    ts, wpt = int(opts["TS"]), int(opts["WPT"])
    t = clmagic.time_kernel(r.kernels["matmul"], r.queue, (N, N // wpt), (ts, ts),
                            np.int32(N), ab, bb, cb, repeats=10)
    c = np.empty_like(a)
    cl.enqueue_copy(r.queue, c, cb)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    return t


def facts_part(settings: Settings, device: str, report: dict[str, object],
               checks: dict[str, bool]) -> tuple[str, clmagic.BuildResult]:
    """Step 1: the two kernels built with -cl-nv-verbose (without it off NVIDIA), clmagic's
    facts beside the ptxas lines; returns the options used and the MISS."""
    first = clmagic.Compiler(settings)
    opts = "-cl-nv-verbose -cl-nv-maxrregcount=32 -cl-kernel-arg-info"
    try:
        miss = first.build(KERNELS, opts, device)
    except clmagic.BuildError:  # not NVIDIA: the nv options are refused; the facts without them
        opts = ""
        miss = first.build(KERNELS, opts, device)
    report["device"], report["options"] = miss.device.label, opts
    first.flush()
    print(f"{miss.outcome} {miss.device.label} options {opts!r}")
    print("ptxas lines of the build log:")
    lines = ptxas_lines(miss.build_log)
    print("\n".join("  " + ln for ln in lines) or "  (none: not NVIDIA, or no -cl-nv-verbose)")
    rows = facts_vs_log(miss)
    for row in rows:
        print("  clmagic:", {k: v for k, v in row.items() if not k.startswith("log_")})
    report["ptxas_lines"], report["facts"] = lines, rows
    checks["facts agree with the ptxas lines"] = all(bool(r["agree"]) for r in rows)
    checks["registers known on NVIDIA"] = (not lines) or all(r["registers"] for r in rows)
    return opts, miss


def code_part(settings: Settings, device: str, opts: str, miss: clmagic.BuildResult,
              report: dict[str, object], checks: dict[str, bool]) -> None:
    """Steps 2 and 3: a HIT in a new compiler has the MISS's facts; the PTX's first lines and
    its ``.entry`` names (every kernel of the program, none made up)."""
    hit = clmagic.Compiler(settings).build(KERNELS, opts, device)
    checks["a HIT shows the MISS's facts"] = (hit.outcome == "HIT"
                                             and hit.kernel_info == miss.kernel_info)
    ptx = hit.ptx
    entries = ptx_entries(ptx) if ptx else []
    report["code"] = {"kind": hit.code.kind, "note": hit.code.note,
                      "head": ptx.splitlines()[:12] if ptx else None, "entries": entries}
    print("compiled code:", hit.code.note)
    if ptx:
        print("\n".join("  " + ln for ln in ptx.splitlines()[:12]))
        print("  .entry functions:", ", ".join(entries) or "(none found)")
        checks["the PTX's .entry names are the kernels"] = sorted(entries) == sorted(
            hit.kernel_info)


def sweep_part(settings: Settings, device: str, report: dict[str, object],
               checks: dict[str, bool]) -> None:
    """Step 4: the matmul sweep, twice (MISS, then all HITs with the timings resumed)."""
    runs: list[dict[str, Any]] = []
    for attempt in ("first", "again"):
        t0 = time.perf_counter()
        df = clmagic.sweep(MATMUL, {"TS": [8, 16, 32], "WPT": [1, 2, 4]}, launch,
                           device=device, compiler=clmagic.Compiler(settings),
                           label=f"n={N}", progress=False)
        runs.append({"attempt": attempt, "seconds": round(time.perf_counter() - t0, 2),
                     "best": df.attrs["best"],
                     "rows": json.loads(df.drop(columns=["options"]).to_json(orient="records"))})
        print(f"sweep ({attempt}, {runs[-1]['seconds']} s):")
        print(df.drop(columns=["options"]).to_string())
    first, again = runs[0]["rows"], runs[1]["rows"]
    checks["sweep re-run all HITs"] = all(r["outcome"] == "HIT" for r in again
                                          if r["outcome"] != "FAILED")
    checks["one variant refused"] = sum(r["outcome"] == "FAILED" for r in first) >= 1
    report["sweeps"] = runs


def markdown(report: dict[str, Any], checks: dict[str, bool]) -> str:
    """The report as a page (``gpu-facts.md``)."""
    rows, code = report["facts"], report["code"]
    md = [f"# Kernel facts and a sweep on {report['device']}", "",
          f"options `{report['options']}`", "", "## ptxas lines", "", "```",
          *report["ptxas_lines"], "```", "", "## clmagic's facts", "",
          "| kernel | regs | spills | smem | wg ≤ | ×mult | local | private | log regs | "
          "log spills | agree |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['kernel']} | {r['registers']} | {r['spills']} | {r['shared_mem']} | "
           f"{r['work_group_size']} | {r['preferred_multiple']} | {r['local_mem']} | "
           f"{r['private_mem']} | {r['log_registers']} | {r['log_spills']} | {r['agree']} |"
           for r in rows]
    md += ["", "## Compiled code", "", str(code["note"]), ""]
    if code["head"]:
        md += [f"`.entry` functions: {', '.join(code['entries']) or '(none found)'}", "",
               "```", *code["head"], "```"]
    again = report["sweeps"][1]
    md += ["", "## Sweep (second run)", "", f"best: {again['best']}", ""]
    md += [f"- {r['TS']}×{r['WPT']}: {r['outcome']} median {r['median_us']} µs "
           f"regs {r['registers']} {r['error'] or ''}" for r in again["rows"]]
    md += ["", "## Checks", ""] + [f"- {k}: {'ok' if v else 'FAILED'}" for k, v in checks.items()]
    return "\n".join(md) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="nvidia")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="clmagic-gpu-facts-")
    settings = Settings.from_env({**os.environ, "CLMAGIC_CACHE_DIR": cache})
    report: dict[str, Any] = {"device": None, "checks": {}}
    checks: dict[str, bool] = {}
    opts, miss = facts_part(settings, args.device, report, checks)
    code_part(settings, args.device, opts, miss, report, checks)
    sweep_part(settings, args.device, report, checks)
    report["checks"] = checks
    (out / "gpu-facts.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "gpu-facts.md").write_text(markdown(report, checks))
    print(json.dumps(checks, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
