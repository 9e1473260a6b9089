"""clmagic.install(): every pyopencl.Program(...).build() from source through the cache, on real
POCL (and Oclgrind), in this process and in fresh ones."""

from __future__ import annotations

import re
import subprocess
import sys
import threading

import numpy as np
import pyopencl as cl
import pytest
from conftest import ROOT, SAXPY, child_env, last_json, run_child

import clmagic
from clmagic.cache.manage import entry_origin
from clmagic.key.source import normalise_source
from clmagic.outcome import Outcome
from clmagic.process import hook

WORKLOAD = ROOT / "benchmarks" / "hook_workload.py"
ORIGINAL_BUILD = cl.Program.__dict__["build"]


@pytest.fixture
def hooked(compiler):
    """The hook installed on this test's compiler, removed afterwards whatever happens."""
    hook.install(compiler)
    yield compiler
    hook.uninstall()


def _context(spec: str) -> tuple[cl.Context, cl.CommandQueue, cl.Device]:
    dev = clmagic.resolve_device(spec)[1]
    ctx = cl.Context([dev])
    return ctx, cl.CommandQueue(ctx), dev


def _saxpy_runs(prg: cl.Program, ctx, queue) -> bool:
    x = np.arange(64, dtype=np.float32)
    y = np.ones_like(x)
    mf = cl.mem_flags
    xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    prg.saxpy(queue, x.shape, None, np.float32(2), xb, yb)  # kernel attribute access
    cl.Kernel(prg, "scale")(queue, x.shape, None, np.float32(3), yb)
    cl.enqueue_copy(queue, y, yb)
    return bool(np.allclose(y, 3 * (2 * x + 1)))


def test_install_and_uninstall_swap_pyopencls_build_exactly(compiler):
    assert cl.Program.__dict__["build"] is ORIGINAL_BUILD and not hook.installed()
    assert clmagic.install(compiler) is True
    try:
        assert cl.Program.build is not ORIGINAL_BUILD and hook.installed()
        assert cl.Program.build.__doc__ == ORIGINAL_BUILD.__doc__
        assert clmagic.install(compiler) is False  # once only, never wrapped twice
    finally:
        assert clmagic.uninstall() is True
    assert cl.Program.__dict__["build"] is ORIGINAL_BUILD and not hook.installed()
    assert clmagic.uninstall() is False


@pytest.mark.parametrize("which", ["pocl", "oclgrind"])
def test_a_hooked_program_is_pyopencls_program_miss_then_hit(which, request, settings):
    spec = request.getfixturevalue(which)
    ctx, queue, dev = _context(spec)
    for expected in (Outcome.MISS, Outcome.HIT):  # a new compiler: as in a new process
        compiler = clmagic.Compiler(settings)
        hook.install(compiler)
        try:
            prg = cl.Program(ctx, SAXPY).build()
        finally:
            hook.uninstall()
        assert isinstance(prg, cl.Program)
        assert sorted(k.function_name for k in prg.all_kernels()) == ["saxpy", "scale"]
        assert sorted(prg.get_info(cl.program_info.KERNEL_NAMES).split(";")) == ["saxpy", "scale"]
        assert prg.kernel_names.count(";") == 1 and prg.num_kernels == 2
        assert prg.get_build_info(dev, cl.program_build_info.STATUS) == 0  # CL_BUILD_SUCCESS
        assert prg.devices == [dev] and prg.context == ctx
        assert _saxpy_runs(prg, ctx, queue)
        [rec] = compiler.history.records
        assert (rec.outcome, rec.origin, rec.kernels) == (expected, __name__, ["saxpy", "scale"])
        if which == "oclgrind":  # pyopencl's per-platform option reaches the driver and the key
            assert "-D PYOPENCL_USING_OCLGRIND" in rec.options


@pytest.mark.parametrize("level", ["summary", "full"])
def test_a_hooked_hits_record_keeps_the_source_at_level_full_only(pocl, cache_dir, level):
    """A HIT through the hook makes no source text for its record unless the history keeps it;
    its size and preview are the source's either way."""
    settings = clmagic.Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache_dir),
                                          "CLMAGIC_RECORD": level})
    ctx, _, _ = _context(pocl)
    source = SAXPY.replace("\n", "  \r\n")  # trailing blanks and CRLF: normalised
    for expected in (Outcome.MISS, Outcome.HIT):
        compiler = clmagic.Compiler(settings)
        hook.install(compiler)
        try:
            cl.Program(ctx, source).build()
        finally:
            hook.uninstall()
        compiler.flush()
        [rec] = compiler.history.records
        assert rec.outcome == expected
        normal = normalise_source(source)
        assert rec.source == (normal if level == "full" else None)
        assert rec.source_bytes == len(normal.encode()) and rec.preview in normal


def test_binaries_and_existing_programs_pass_through(hooked, pocl):
    ctx, queue, dev = _context(pocl)
    built = cl.Program(ctx, SAXPY).build()
    binary = built.get_info(cl.program_info.BINARIES)[0]
    n = len(hooked.history.records)
    from_binary = cl.Program(ctx, [dev], [binary]).build()
    wrapped = cl.Program(cl._cl._Program(ctx, SAXPY)).build()
    assert len(hooked.history.records) == n  # pyopencl's own build did both
    assert _saxpy_runs(from_binary, ctx, queue) and _saxpy_runs(wrapped, ctx, queue)


def test_cache_dir_false_and_pyopencl_no_cache_keep_their_meaning(hooked, pocl, monkeypatch):
    ctx, queue, _ = _context(pocl)
    prg = cl.Program(ctx, SAXPY).build(cache_dir=False)
    assert hooked.history.records == [] and _saxpy_runs(prg, ctx, queue)
    monkeypatch.setattr(cl, "_PYOPENCL_NO_CACHE", True)  # what PYOPENCL_NO_CACHE=1 sets
    prg = cl.Program(ctx, SAXPY).build()
    assert hooked.history.records == [] and _saxpy_runs(prg, ctx, queue)
    monkeypatch.setattr(cl, "_PYOPENCL_NO_CACHE", False)
    cl.Program(ctx, SAXPY).build()
    assert [r.outcome for r in hooked.history.records] == [Outcome.MISS]


BROKEN = "__kernel void broken(__global float *a) { a[0] = undefined_name; }\n"


@pytest.mark.parametrize("which", ["pocl", "oclgrind"])
def test_a_build_error_is_pyopencls_own_exception_and_log(which, request, compiler):
    ctx, _, _ = _context(request.getfixturevalue(which))

    def failure() -> cl.RuntimeError:
        with pytest.raises(cl.RuntimeError) as info:
            cl.Program(ctx, BROKEN).build(options=["-DX=1"])
        return info.value

    plain = failure()
    hook.install(compiler)
    try:
        hooked = failure()
    finally:
        hook.uninstall()
    assert type(hooked) is type(plain) and hooked.code == plain.code == \
        cl.status_code.BUILD_PROGRAM_FAILURE
    assert "undefined_name" in str(hooked) and "(options: -DX=1" in str(hooked)
    def same(text: str) -> str:  # the driver's temp file names differ from build to build
        return re.sub(r"tempfile_\w+|/tmp/[\w/.-]+\.cl", "TEMP", text)

    assert same(str(hooked)) == same(str(plain))
    (failed,) = compiler.history.records  # recorded as FAILED, with its first error; no entry
    assert failed.outcome == "FAILED" and "undefined_name" in failed.note
    assert list(compiler.store.entries()) == []


def test_threads_build_at_once_through_the_hook(hooked, pocl):
    ctx, queue, _ = _context(pocl)
    sources = [SAXPY.replace("y[i] = a", f"y[i] = {k} * 0 + a") for k in range(4)]
    results: list = [None] * 8
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            results[i] = cl.Program(ctx, sources[i % 4]).build()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(_saxpy_runs(p, ctx, queue) for p in results)
    assert len(hooked.history.records) == 8
    assert {r.key for r in hooked.history.records} == {
        r.key for r in hooked.history.records if r.outcome == Outcome.MISS}
    assert len(list(hooked.store.entries())) == 4


def test_a_build_asked_for_inside_the_hook_goes_to_pyopencl(compiler, pocl):
    ctx, queue, _ = _context(pocl)
    inner: list[cl.Program] = []

    def compiler_that_builds():  # called by the hook at each build, on the hook's thread
        inner.append(cl.Program(ctx, SAXPY.replace("*= a", "*= a * 1.0f")).build())
        return compiler

    hook.install(compiler_that_builds)
    try:
        outer = cl.Program(ctx, SAXPY).build()
    finally:
        hook.uninstall()
    assert len(inner) == 1 and _saxpy_runs(inner[0], ctx, queue) and _saxpy_runs(outer, ctx,
                                                                                   queue)
    assert [r.outcome for r in compiler.history.records] == [Outcome.MISS]


def test_pyopencls_include_folder_is_in_the_key(hooked, pocl):
    ctx, queue, _ = _context(pocl)
    src = ("#include <pyopencl-complex.h>\n"
           "__kernel void mag(__global const cfloat_t *z, __global float *m)\n"
           "{ int i = get_global_id(0); m[i] = cfloat_abs(z[i]); }\n")
    cl.Program(ctx, src).build()
    [entry] = list(hooked.store.entries())
    headers = entry.meta.headers
    assert any(h.startswith("<pyopencl-complex.h> @-I") for h in headers), headers
    assert entry.meta.origin == __name__


def test_sources_clmagic_cannot_key_build_through_pyopencl(hooked, pocl):
    ctx, queue, _ = _context(pocl)
    latin1 = SAXPY.encode() + b"// caf\xe9\n"  # not UTF-8: left to pyopencl
    assert _saxpy_runs(cl.Program(ctx, latin1).build(), ctx, queue)
    assert hooked.history.records == []


def test_a_damaged_entry_is_rebuilt_through_the_hook(settings, pocl, cache_dir):
    ctx, queue, _ = _context(pocl)
    first = clmagic.Compiler(settings)
    hook.install(first)
    try:
        cl.Program(ctx, SAXPY).build()
        first.flush()  # the MISS is saved in the background, as a cell's
        [path] = list(cache_dir.rglob("*.clbin"))
        data = bytearray(path.read_bytes())
        data[-40] ^= 0xFF  # inside the binary: its SHA-256 no longer matches
        path.write_bytes(bytes(data))
        second = clmagic.Compiler(settings)
        hook.install(second)
        prg = cl.Program(ctx, SAXPY).build()
    finally:
        hook.uninstall()
    assert _saxpy_runs(prg, ctx, queue)
    assert [r.outcome for r in second.history.records] == [Outcome.CORRUPT]


def test_origins_name_the_module_that_asked(hooked, pocl):
    import pyopencl.array as cla
    from pyopencl.elementwise import ElementwiseKernel

    ctx, queue, _ = _context(pocl)
    a = cla.to_device(queue, np.arange(8, dtype=np.float32))
    double = ElementwiseKernel(ctx, "float *x", "x[i] = 2 * x[i]", "double_it")
    double(a)
    assert float(cla.sum(a).get()) == 56.0
    cl.Program(ctx, SAXPY).build()
    origins = [r.origin for r in hooked.history.records]
    assert origins == ["pyopencl.elementwise", "pyopencl.reduction", "pyopencl.reduction",
                       __name__]
    by_origin = clmagic.stats(hooked, origin="pyopencl.reduction")
    assert (by_origin.misses, by_origin.hits) == (2, 0)
    assert clmagic.stats(hooked).misses == 4
    frame = clmagic.history_frame(compiler=hooked)
    assert list(frame["origin"]) == origins
    entries = clmagic.cache_frame(compiler=hooked, origin="pyopencl.elementwise")
    assert list(entries["kernels"]) == ["double_it"]


MULTI = """
import json, sys, numpy as np, pyopencl as cl, clmagic
platform = cl.get_platforms()[int(sys.argv[1])]
devs = platform.get_devices()
ctx = cl.Context(devs)
clmagic.install()
subset = {"first": devs[:1], "all": None}[sys.argv[2]]
prg = cl.Program(ctx, SAXPY).build(devices=subset)
ok = []
for dev in (subset or devs):
    q = cl.CommandQueue(ctx, dev)
    x = np.arange(32, dtype=np.float32); y = np.ones_like(x)
    mf = cl.mem_flags
    xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    prg.saxpy(q, x.shape, None, np.float32(2), xb, yb)
    cl.enqueue_copy(q, y, yb)
    ok.append(bool(np.allclose(y, 2 * x + 1)))
recs = clmagic.get_compiler().history.records
print(json.dumps({"devices": len(devs), "ok": ok, "outcomes": [r.outcome for r in recs],
                  "notes": [r.note for r in recs], "keys": len({r.key for r in recs})}))
"""


def test_a_two_device_context_has_one_entry_per_device(pocl, cache_dir):
    code = f"SAXPY = {SAXPY!r}\n" + MULTI
    env = dict(CLMAGIC_CACHE_DIR=str(cache_dir), POCL_DEVICES="pthread basic")

    def run(subset: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", code, pocl.split(":")[0], subset],
                              env=child_env(**env), capture_output=True, text=True, timeout=240)
        return last_json(proc)

    first = run("first")  # one device of the two: one entry
    assert (first["devices"], first["ok"], first["outcomes"]) == (2, [True], ["MISS"])
    both = run("all")  # one hits, one misses: built from source for both, the missing one saved
    assert both["ok"] == [True, True] and both["outcomes"] == ["MISS", "MISS"]
    assert both["notes"] == ["built with the other devices", "saved"] and both["keys"] == 2
    again = run("all")  # every device hits: the program is made from both binaries
    assert again["ok"] == [True, True] and again["outcomes"] == ["HIT", "HIT"]


@pytest.mark.slow  # over 12 s: the default run stays under 5 min on 2 cores
def test_a_workload_misses_then_hits_everything_in_a_second_process(pocl, cache_dir):
    """pyopencl.array arithmetic, sum, dot, cumsum, an ElementwiseKernel, a ReductionKernel and
    silx's Convolution under ``python -m clmagic run``, twice."""
    cmd = [sys.executable, "-m", "clmagic", "run", str(WORKLOAD), "--device", pocl, "--json"]
    env = child_env(CLMAGIC_CACHE_DIR=str(cache_dir))
    runs = []
    for _ in range(2):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=280)
        runs.append(last_json(proc))
    first, second = runs
    # HIT: pyopencl's scan may build one program twice in a process; the hook keeps no program
    # in memory, so the second is a HIT of what the first saved (or a MISS, its save under way)
    assert Outcome.MISS in first["outcomes"] and set(first["outcomes"]) <= {Outcome.MISS,
                                                                           Outcome.HIT}
    assert set(second["outcomes"]) == {Outcome.HIT}  # nothing MISSes
    # the same programs (pyopencl's scan builds one twice in some runs: either run may say so)
    assert abs(second["builds"] - len(first["outcomes"])) <= 1
    assert first["origins"] == second["origins"] == [
        "pyopencl.elementwise", "pyopencl.reduction", "pyopencl.scan", "silx.opencl.processing"]
    for run in runs:
        assert set(run["errors"]) == {"arithmetic", "sum", "dot", "cumsum", "elementwise",
                                      "reduction", "silx_convolution"}
        assert max(run["errors"].values()) < 1e-5, run["errors"]


def test_clmagic_run_passes_arguments_and_exit_status(tmp_path, cache_dir):
    script = tmp_path / "script.py"
    script.write_text("import sys, clmagic.process.hook\n"
                      "print(sys.argv[1:], clmagic.process.hook.installed())\nsys.exit(3)\n")
    proc = subprocess.run([sys.executable, "-m", "clmagic", "run", str(script), "a", "--b"],
                          env=child_env(CLMAGIC_CACHE_DIR=str(cache_dir)), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 3 and proc.stdout.strip() == "['a', '--b'] True"
    proc = subprocess.run([sys.executable, "-m", "clmagic", "run", str(tmp_path / "nope.py")],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr


def test_clcache_install_and_the_config_switch(shell, pocl):
    magics = shell.magics_manager.registry["CLMagics"]
    shell.run_line_magic("clcache", "install")
    try:
        assert hook.installed() and magics.cache_every_program
        ctx, queue, _ = _context(pocl)
        prg = cl.Program(ctx, SAXPY).build()
        assert _saxpy_runs(prg, ctx, queue)
        assert [r.origin for r in magics.compiler.history.records] == [__name__]
        shell.run_cell_magic("clkernel", "--no-cache --quiet", SAXPY)  # still its own meaning
        assert [(r.outcome, r.origin) for r in magics.compiler.history.records][1:] == [
            (Outcome.BYPASS, "cell")]
        assert len(list(magics.compiler.store.entries())) == 1
        shell.run_line_magic("clcache", "uninstall")
        assert not hook.installed() and cl.Program.__dict__["build"] is ORIGINAL_BUILD
        shell.run_line_magic("config", "CLMagics.cache_every_program = True")
        assert hook.installed()
        shell.run_line_magic("config", "CLMagics.cache_every_program = False")
        assert not hook.installed()
    finally:
        hook.uninstall()


def test_library_install_uses_the_process_compiler(tmp_path, pocl):
    code = (f"SAXPY = {SAXPY!r}\n"
            "import json, pyopencl as cl, clmagic\n"
            f"dev = clmagic.resolve_device({pocl!r})[1]\n"
            "ctx = cl.Context([dev])\n"
            "clmagic.install()\n"
            "cl.Program(ctx, SAXPY).build()\n"
            "print(json.dumps([r.outcome for r in clmagic.get_compiler().history.records]))\n")
    out = [last_json(run_child(code, CLMAGIC_CACHE_DIR=str(tmp_path / "c"))) for _ in range(2)]
    assert out == [["MISS"], ["HIT"]]


def test_the_widget_filters_by_origin(hooked, pocl):
    from clmagic.show.widget import CacheWidget

    hooked.build(SAXPY, device=pocl)  # a cell's entry
    panel = CacheWidget(hooked, plot=False)
    assert panel.origin not in panel.children  # one origin: no choice to offer
    ctx, _, _ = _context(pocl)
    cl.Program(ctx, SAXPY.replace("*= a", "*= 2 * a")).build()
    panel.refresh()
    assert panel.origin in panel.children
    assert [v for _, v in panel.origin.options] == ["", "cell", __name__]
    assert len(panel.rows) == 2
    panel.origin.value = __name__
    assert [text.split()[1] for text, _ in panel.rows] == ["saxpy,"] and len(panel.rows) == 1
    assert "hit rate <b>0%</b>" in panel.status.value
    panel.clear_all_button.click()
    panel.clear_all_button.click()  # confirmed: clears what the table shows, not the cell's
    assert panel.last_error is None and panel.rows == []
    assert [entry_origin(e) for e in hooked.store.entries()] == ["cell"]


def _more_of_pyopencl(ctx: cl.Context, queue: cl.CommandQueue) -> dict[str, bool]:
    """pyopencl facilities beyond the workload's, each checked against numpy."""
    import pyopencl.array as cla
    from pyopencl.algorithm import copy_if
    from pyopencl.bitonic_sort import BitonicSort
    from pyopencl.clrandom import PhiloxGenerator
    from pyopencl.scan import InclusiveScanKernel

    x = np.random.default_rng(1).random(1024).astype(np.float32)
    a = cla.to_device(queue, x)
    big, count, _ = copy_if(a, "ary[i] > 0.5f")
    n = int(count.get())
    srt, _ = BitonicSort(ctx)(a.copy(), axis=0)
    rnd = PhiloxGenerator(ctx, seed=3).uniform(queue, 4096, np.float32).get()
    scan = InclusiveScanKernel(ctx, np.int32, "max(a, b)", neutral="INT_MIN")
    ints = (np.arange(256) * 7919 % 101).astype(np.int32)
    return {
        "copy_if": bool(np.array_equal(np.sort(big.get()[:n]), np.sort(x[x > 0.5]))),
        "bitonic_sort": bool(np.array_equal(srt.get(), np.sort(x))),
        "philox": bool(rnd.min() >= 0 and rnd.max() < 1 and abs(rnd.mean() - 0.5) < 0.05),
        "scan_max": bool(np.array_equal(scan(cla.to_device(queue, ints)).get(),
                                        np.maximum.accumulate(ints))),
        "where": bool(np.array_equal(cla.if_positive(a - 0.5, a, -a).get(),
                                     np.where(x - 0.5 > 0, x, -x))),
    }


@pytest.mark.slow  # a dozen cold POCL builds
def test_more_of_pyopencl_misses_then_hits_with_the_same_results(settings, pocl):
    for expected in (Outcome.MISS, Outcome.HIT):
        compiler = clmagic.Compiler(settings)  # and a new context: pyopencl memoizes per context
        ctx, queue, _ = _context(pocl)
        hook.install(compiler)
        try:
            checks = _more_of_pyopencl(ctx, queue)
        finally:
            hook.uninstall()
        assert all(checks.values()), checks
        records = compiler.history.records
        # a repeat build in the cold run is a HIT of what the first saved (the hook keeps no
        # program in memory); a MISS in the warm run never
        assert {r.outcome for r in records} <= {expected, Outcome.HIT}, records
        assert {"pyopencl.bitonic_sort", "pyopencl.clrandom", "pyopencl.scan",  # copy_if: a scan
                "pyopencl.elementwise"} <= {r.origin for r in records}


def test_clcache_filters_by_origin(shell, pocl):
    from clmagic.errors import OptionsError

    magics = shell.magics_manager.registry["CLMagics"]
    shell.run_cell_magic("clkernel", "--quiet", SAXPY)
    hook.install(magics.compiler)
    try:
        import pyopencl.array as cla

        ctx, queue, _ = _context(pocl)
        assert float(cla.sum(cla.to_device(queue, np.ones(8, np.float32))).get()) == 8.0
    finally:
        hook.uninstall()
    run = shell.run_line_magic
    assert run("clcache", "stats --origin pyopencl").misses == 2
    assert run("clcache", "stats --origin cell").misses == 1
    assert list(run("clcache", "history --origin pyopencl.reduction")["kernels"]) == [
        "reduce_kernel_stage1", "reduce_kernel_stage2"]
    assert set(run("clcache", "--origin pyopencl")["origin"]) == {"pyopencl.reduction"}
    with pytest.raises(OptionsError, match="--origin goes with"):
        run("clcache", "info --origin pyopencl")
    # what the shell shows for the clear's report (its display formatter: the show layer's view,
    # the report itself a plain data type)
    shown, _ = shell.display_formatter.format(run("clcache", "clear --origin pyopencl"))
    assert shown["text/plain"].startswith("removed 2 entries"), shown["text/plain"]
    assert list(run("clcache", "")["origin"]) == ["cell"]


def test_clmagic_ls_and_clear_filter_by_origin(hooked, pocl, cache_dir):
    import json as _json

    import pyopencl.array as cla

    hooked.build(SAXPY, device=pocl)  # a cell's entry
    ctx, queue, _ = _context(pocl)
    assert float(cla.sum(cla.to_device(queue, np.ones(8, np.float32))).get()) == 8.0
    hooked.flush()  # the hook's MISSes are saved in the background: in the store for the CLI

    def clmagic_cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "clmagic", *argv], capture_output=True,
                              text=True, timeout=120,
                              env=child_env(CLMAGIC_CACHE_DIR=str(cache_dir)))

    listed = clmagic_cli("ls", "--origin", "pyopencl", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = _json.loads(listed.stdout)
    assert sorted(r["kernels"] for r in rows) == ["reduce_kernel_stage1", "reduce_kernel_stage2"]
    assert {r["origin"] for r in rows} == {"pyopencl.reduction"}
    cleared = clmagic_cli("clear", "--origin", "pyopencl.reduction")
    assert cleared.returncode == 0 and cleared.stdout.startswith("removed 2 entries"), cleared
    rest = _json.loads(clmagic_cli("ls", "--json").stdout)
    assert [r["origin"] for r in rest] == ["cell"]
