"""Ratios, tables and result files for bench_build.py."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from pathlib import Path

RATIOS = {
    "HIT / bare load": ("hit", "bare", "≤ 1.10"),
    "MISS / cold build": ("miss", "cold", "≤ 1.05"),
    "MISS / (cold + binary readout)": ("miss", "cold+readout", "clmagic's own cost"),
    "cold / HIT": ("cold", "hit", "speed-up"),
    "(cold / HIT) / (cold / bare)": ("bare", "hit", "share of the limit"),
    "1st launch after MISS / after cold": ("launch_miss", "launch_cold", "≤ 1 (sweep)"),
    "pyopencl default / HIT": ("pyopencl", "hit", "speed-up"),
    "%%clkernel HIT / bare load": ("magic", "bare", "end to end"),
    "(%%clkernel − no-op magic) / bare": ("magic-cell", "bare", "without IPython's own cost"),
    "MEMORY / bare load": ("memory", "bare", ""),
}
COLUMNS = ("cold", "readout", "miss", "bare", "hit", "memory", "magic", "cell", "pyopencl",
           "launch_cold", "launch_miss")


def _quantiles(values: list[float]) -> dict:
    values = sorted(values)
    if len(values) == 1:
        return {"median": values[0], "p25": values[0], "p75": values[0], "n": 1}
    q = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": statistics.median(values), "p25": q[0], "p75": q[2], "n": len(values)}


def summarise(corpus: dict, timings: dict, imports: dict, args) -> dict:
    """Per-kernel medians, per-corpus ratio quantiles and the overall table."""
    import pyopencl

    per_kernel = []
    for k in corpus["kernels"]:
        t = timings.get(k["name"], {})
        med = {c: statistics.median(t[c]) for c in COLUMNS if t.get(c)}
        if "magic" in med and "cell" in med:
            med["magic-cell"] = med["magic"] - med["cell"]
        if "cold" in med and "readout" in med:
            med["cold+readout"] = statistics.median(
                [c + r for c, r in zip(t["cold"], t["readout"], strict=True)])
        ratios = {n: med[a] / med[b] for n, (a, b, _) in RATIOS.items()
                  if a in med and b in med and med[b] > 0}
        per_kernel.append({"corpus": k["corpus"], "name": k["name"],
                           "source_bytes": len(k["source"]), "median_ms": med,
                           "ratios": ratios, "runs_ms": t})
    groups: dict[str, list[dict]] = {"all": per_kernel}
    for row in per_kernel:
        groups.setdefault(row["corpus"], []).append(row)
    table = {}
    for group, rows in groups.items():
        table[group] = {
            n: _quantiles([r["ratios"][n] for r in rows if n in r["ratios"]])
            for n in RATIOS if any(n in r["ratios"] for r in rows)
        }
        table[group]["median ms"] = {
            c: statistics.median([r["median_ms"][c] for r in rows if c in r["median_ms"]])
            for c in COLUMNS if any(c in r["median_ms"] for r in rows)
        }
    commit = os.environ.get("CLMAGIC_BENCH_COMMIT", "")  # a copy without .git (the GPU host)
    try:
        commit = commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                          capture_output=True, text=True,
                                          cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        pass
    return {
        "device": corpus["device"], "device_label": corpus["label"],
        "skipped": corpus["skipped"], "kernels": len(per_kernel), "repeats": args.repeats,
        "pyopencl": pyopencl.VERSION_TEXT, "clmagic_commit": commit,
        "sample": (f"at most {args.max_real} sources of at most {args.max_bytes} bytes, evenly"
                   if args.max_real < 1000 or args.max_bytes < 1 << 30 else ""),
        "import_ms": imports, "table": table, "per_kernel": per_kernel,
    }


def markdown(s: dict) -> str:
    """The summary as a markdown page."""
    d = s["device"]
    lines = [
        f"# clmagic build benchmark — {s['device_label']}", "",
        f"- device: {d['platform_name']} · {d['device_name']} · driver {d['driver_version']} · "
        f"{d['device_version']} · {d['platform_version']}",
        "- machine: " + ", ".join(f"{k} {v}" for k, v in s["machine"].items())
        + f"; pyopencl {s['pyopencl']}; clmagic {s['clmagic_commit']}",
        f"- {s['kernels']} kernels × {s['repeats']} repeats; driver caches "
        f"{s.get('driver_cache', 'off')} for the clmagic roles; wall {s.get('wall_s')} s; "
        f"silx/pyFAI files that do not build on this device: {len(s['skipped'])}"
        + (f"; silx/pyFAI sample: {s['sample']}" if s.get("sample") else ""),
        "", "Ratios: median over kernels of each kernel's median ratio [p25–p75].", "",
        "| corpus | " + " | ".join(RATIOS) + " |",
        "|---|" + "---|" * len(RATIOS),
    ]
    for group, row in s["table"].items():
        cells = []
        for n in RATIOS:
            q = row.get(n)
            cells.append(f"{q['median']:.2f} [{q['p25']:.2f}–{q['p75']:.2f}]" if q else "–")
        n = sum(1 for r in s["per_kernel"] if group in ("all", r["corpus"]))
        lines.append(f"| {group} (n={n}) | " + " | ".join(cells) + " |")
    lines += ["", "Median milliseconds:", "", "| corpus | " + " | ".join(COLUMNS) + " |",
              "|---|" + "---|" * len(COLUMNS)]
    for group, row in s["table"].items():
        ms = row["median ms"]
        lines.append(f"| {group} | " + " | ".join(
            f"{ms[c]:.2f}" if c in ms else "–" for c in COLUMNS) + " |")
    imp = s["import_ms"]
    lines += ["", f"`import pyopencl` then `%load_ext clmagic` {imp['load_ext']:.1f} ms vs "
              f"`import pyopencl` {imp['import_pyopencl']:.1f} ms: difference "
              f"{imp['difference']:.1f} ms (goal ≤ 25); `%load_ext clmagic` alone "
              f"{imp.get('load_ext_alone', float('nan')):.1f} ms"]
    if s["skipped"]:
        lines += ["", "Skipped: " + ", ".join(s["skipped"])]
    return "\n".join(lines) + "\n"


def write_results(summary: dict, out: Path, label: str | None) -> None:
    """Print the markdown summary and write ``<label>.json`` and ``<label>.md`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    label = label or summary["device_label"].replace(" ", "-").lower()
    (out / f"{label}.json").write_text(json.dumps(summary, indent=1))
    md = markdown(summary)
    (out / f"{label}.md").write_text(md)
    print(md)
