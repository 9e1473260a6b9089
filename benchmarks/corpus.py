"""Kernel corpora for the benchmarks.

1. Real kernels from the silx and pyFAI wheels: the wheels are downloaded with pip into a temp
   folder at run time (nothing of theirs is committed) and their ``.cl`` files read. Many of them
   expect helper files to be prepended and ``-D`` defines set by their Python code; each file is
   built as silx/pyFAI build it (``CHAINS``), else alone and then after the helper preludes,
   with a common set of defines. Files that do not build on the device are skipped and listed.
2. Kernels pyopencl generates itself (elementwise, reduction, scan), captured at build time.
3. A size sweep of generated kernels with 1 to 256 functions.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Kernel", "wheel_kernels", "pyopencl_kernels", "size_sweep"]

DEFINES = (
    "-DWORKGROUP_SIZE=64 -DNBINS=64 -DNIMAGE=1 -DNB_COLOR=1 -DIMAGE_DIMS=2 -DFILTER_DIMS=1 "
    "-DUSED_CONV_MODE=1 -DMAX_CONST_SIZE=16384 -DIMAGE_WIDTH=64 -DIDX_DTYPE=int -DDTYPE=float "
    "-DNUM_BINS=64 -DSIZE=64 -DNUM_THREADS=64 -DBLOCK_SIZE=16 -DLZ=1 -DX=1"
)
# helper files that silx/pyFAI prepend to other kernels, in the order they use
PRELUDES = ("doubleword.cl", "kahan.cl", "collective/reduction.cl", "collective/scan.cl")

# How silx 3.1 and pyFAI 2026.9 build their kernels: (files concatenated in this order, -D
# options), read from the ``kernel_files`` lists and ``compile_kernels`` methods of
# silx/opencl/{medfilt,statistics,sift/plan,sift/match}.py and pyFAI/opencl/{azim_csr,azim_lut,
# azim_hist,peak_finder,sort,ocl_hist_pixelsplit,OCLFullSplit}.py; sizes are typical values.
# A file is built after the files before it in a chain, with that chain's options, trying each
# chain that lists it in turn; files in no chain (or failing all) get the generic attempts.
# Still skipped on POCL, as their own source does not compile: ocl_bispev.cl (``__kernel__``),
# ocl_lut_pixelsplit.cl (unbalanced ``)``) and reduction_test.cl (undeclared ``thread_id_loc``).
_S, _P = "silx/resources/opencl/", "pyFAI/resources/openCL/"
_SIFT = "sift convolution preprocess algebra image gaussian reductions memset"
CHAINS = [
    ([_S + f"sift/{f}.cl" for f in (_SIFT + " orientation_gpu descriptor_gpu1 descriptor_gpu2"
                                    " orientation_cpu descriptor_cpu").split()],
     "-DWORKGROUP_SIZE=128"),
    ([_S + f"sift/{f}.cl" for f in ("sift", "memset", "matching_gpu")], "-DWORKGROUP_SIZE=64"),
    ([_S + f"sift/{f}.cl" for f in ("sift", "memset", "matching_cpu")], "-DWORKGROUP_SIZE=16"),
    ([_S + "preprocess.cl", _S + "bitonic.cl", _S + "medfilt.cl"], "-DNIMAGE=1048576"),
    ([_S + "doubleword.cl", _S + "statistics.cl"], ""),
    ([_S + "doubleword.cl"] + [_P + f + ".cl" for f in (
        "preprocess memset ocl_azim_CSR collective/reduction collective/scan "
        "collective/comb_sort medfilt").split()], "-DNBINS=1000 -DNIMAGE=1048576"),
    ([_S + "doubleword.cl", _P + "preprocess.cl", _P + "memset.cl", _P + "ocl_azim_LUT.cl"],
     "-DNBINS=1000 -DNIMAGE=1048576 -DNLUT=64 -DON_CPU=1"),
    # azim_hist retries with deactivate_atomic64.cl first where the first build fails (POCL)
    *(([*first, _S + "doubleword.cl", _P + "preprocess.cl", _P + "ocl_histo.cl"],
       "-DNBINS=1000 -DNIMAGE=1048576 -DWORKGROUP_SIZE=64")
      for first in ([], [_P + "deactivate_atomic64.cl"])),
    # OCL_PeakFinder uses the CSR integrator's options; OCL_SimplePeakFinder none
    ([_S + "doubleword.cl"] + [_P + f + ".cl" for f in
                               "preprocess memset ocl_azim_CSR sparsify peakfinder".split()],
     "-DNBINS=1000 -DNIMAGE=1048576"),
    ([_P + "simple_peak_picker.cl"], ""),
    ([_S + "doubleword.cl"] + [_P + f + ".cl" for f in "bitonic separate sigma_clip".split()], ""),
    ([_P + "ocl_hist_pixelsplit.cl"],
     "-DBINS=1000 -DNIMAGE=1048576 -DWORKGROUP_SIZE=64 -DEPS=1.192093e-07"),
    # OCLFullSplit's options for ocl_lut.cl, also used for its older variants
    *(([_P + f"ocl_lut{v}.cl"], "-DBINS=1000 -DPOS_SIZE=8 -DSIZE=1048576 -DNIMAGE=1048576 "
       "-DWORKGROUP_SIZE=64 -DEPS=1.192093e-07")
      for v in ("", "_pixelsplit", "_pixelsplit2", "_pixelsplit3", "_pixelsplit_test")),
]


def _read(path: Path) -> str:
    """A ``.cl`` file without its ``#include`` lines, as silx's ``read_cl_file`` reads it."""
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("#include ")) + "\n"


@dataclass
class Kernel:
    """One benchmark input: a name, the source and the build options."""

    corpus: str
    name: str
    source: str
    options: str = ""


def _download(names: list[str], dest: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "-d", str(dest), *names]
    subprocess.run(cmd, check=True, capture_output=True)
    return sorted(dest.glob("*.whl"))


def extract_cl(wheels: list[Path], dest: Path) -> Path:
    """Unpack the ``.cl`` files of the wheels under ``dest``."""
    for whl in wheels:
        with zipfile.ZipFile(whl) as z:
            for name in z.namelist():
                if name.endswith(".cl"):
                    z.extract(name, dest)
    return dest


def wheel_kernels(builds, corpus_dir: Path | None = None) -> tuple[list[Kernel], list[str]]:
    """silx and pyFAI kernels that ``builds(source, options) -> bool`` accepts, and the names
    of the skipped ones. ``corpus_dir``: an already unpacked tree (for machines without PyPI)."""
    if corpus_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="clmagic-corpus-"))
        corpus_dir = extract_cl(_download(["silx", "pyFAI"], tmp / "wheels"), tmp / "src")
    recipes: dict[str, list[tuple[list[str], str]]] = {}
    for files, options in CHAINS:
        for i, rel in enumerate(files):
            recipes.setdefault(rel, []).append((files[:i], options))
    kept: list[Kernel] = []
    skipped: list[str] = []
    for folder in sorted({p.parent for p in corpus_dir.rglob("*.cl")}):
        root = next((p for p in [folder, *folder.parents] if p.name.lower() == "opencl"), folder)
        preludes = "".join(_read(root / p) for p in PRELUDES if (root / p).exists())
        for path in sorted(folder.glob("*.cl")):
            rel = path.relative_to(corpus_dir).as_posix()
            text = _read(path)
            attempts = [
                ("".join(_read(corpus_dir / p) for p in before) + text, options)
                for before, options in recipes.get(rel, [])
            ] + [(text, DEFINES), (preludes + text, DEFINES)]
            for source, opts in attempts:
                if builds(source, opts):
                    kept.append(Kernel("silx/pyFAI", rel, source, opts))
                    break
            else:
                skipped.append(rel)
    return kept, skipped


def pyopencl_kernels(ctx) -> list[Kernel]:
    """Sources pyopencl generates for elementwise, reduction and scan kernels, captured at
    build time by wrapping ``pyopencl.Program.build``."""
    import numpy as np
    import pyopencl as cl
    import pyopencl.array as cla
    from pyopencl.elementwise import ElementwiseKernel
    from pyopencl.reduction import ReductionKernel
    from pyopencl.scan import GenericScanKernel

    include = cl._find_pyopencl_include_path()
    captured: list[Kernel] = []
    original = cl.Program.build

    def capture(self, options=None, devices=None, cache_dir=None):
        src = getattr(self, "_source", None)
        if src is not None:
            opts = " ".join(options) if isinstance(options, (list, tuple)) else (options or "")
            opts = f"{opts} -I{include}".strip()  # pyopencl adds its header folder itself
            captured.append(Kernel("pyopencl", f"generated-{len(captured)}", str(src), opts))
        return original(self, options=options, devices=devices, cache_dir=cache_dir)

    cl.Program.build = capture
    try:
        queue = cl.CommandQueue(ctx)
        a = cla.to_device(queue, np.arange(1024, dtype=np.float32))
        ElementwiseKernel(ctx, "float *x, float *y, float a", "y[i] = a * x[i] + y[i]")(a, a, 2)
        ElementwiseKernel(ctx, "float *x", "x[i] = sin(x[i]) * cos(x[i])")(a)
        ReductionKernel(ctx, np.float32, "0", "a+b", "x[i]*x[i]", "float *x")(a).get()
        ReductionKernel(ctx, np.float32, "-INFINITY", "fmax(a,b)", "x[i]", "float *x")(a).get()
        GenericScanKernel(ctx, np.float32, arguments="float *x, float *y", input_expr="x[i]",
                          scan_expr="a+b", neutral="0", output_statement="y[i] = item;")(a, a)
    finally:
        cl.Program.build = original
    seen: set[tuple[str, str]] = set()
    unique = []
    for k in captured:
        if (k.source, k.options) not in seen:
            seen.add((k.source, k.options))
            unique.append(k)
    return unique


def size_sweep(sizes=(1, 4, 16, 64, 256)) -> list[Kernel]:
    """Generated programs of ``n`` kernels, each a few lines of arithmetic."""
    out = []
    for n in sizes:
        parts = []
        for i in range(n):
            parts.append(
                f"__kernel void k{i}(__global float *a, __global const float *b, const float s)\n"
                "{\n    const int g = get_global_id(0);\n"
                f"    float v = b[g] * s + {i}.0f;\n"
                f"    for (int j = 0; j < {1 + i % 7}; ++j) v = v * 0.5f + sin(v + j);\n"
                "    a[g] = v;\n}\n"
            )
        out.append(Kernel("sweep", f"{n}-functions", "".join(parts)))
    return out
