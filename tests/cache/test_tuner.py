"""Kernel Tuner through the cache: a tune under ``clmagic.install()`` on real POCL, twice (the
second served from clmagic's cache, with the same results), and ``clmagic.kernel_tuner``'s
FactsObserver adding each configuration's kernel facts to Kernel Tuner's results."""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np
import pytest

pytest.importorskip("kernel_tuner")  # the `tune` and `test` extras install it

from kernel_tuner import tune_kernel  # noqa: E402

import clmagic  # noqa: E402
from clmagic.config import Settings  # noqa: E402
from clmagic.kernel_tuner import COLUMNS, FactsObserver  # noqa: E402
from clmagic.outcome import Outcome  # noqa: E402
from clmagic.process import hook  # noqa: E402

#: a kernel whose ``__local`` use follows the tuned block size: 4 bytes a work-item
ADD = """\
__kernel void vector_add(__global float *c, __global const float *a,
                         __global const float *b, int n)
{
    __local float tile[block_size_x];
    int i = get_global_id(0);
    tile[get_local_id(0)] = i < n ? a[i] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (i < n) c[i] = tile[get_local_id(0)] + b[i];
}
"""
SIZES = [16, 32, 64]
N = 1000


def _tune(spec: str, observers: list | None = None) -> list[dict]:
    """Kernel Tuner's brute force over SIZES on the device ``P:D``, every output checked against
    numpy's (``answer``): the results, one dict a configuration."""
    info = clmagic.resolve_device(spec)[0]
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(N, np.float32), rng.standard_normal(N, np.float32)
    args = [np.zeros_like(a), a, b, np.int32(N)]
    results, _env = tune_kernel("vector_add", ADD, N, args, {"block_size_x": SIZES},
                                answer=[a + b, None, None, None], lang="OpenCL",
                                platform=info.platform_index, device=info.device_index,
                                observers=observers, quiet=True, cache=None, iterations=2)
    return results


def _by_key(records) -> dict[str, list[Outcome]]:
    """Each program's outcomes, in order."""
    found: dict[str, list[Outcome]] = defaultdict(list)
    for rec in records:
        found[rec.key].append(rec.outcome)
    return found


@pytest.fixture
def hooked(compiler):
    hook.install(compiler)
    yield compiler
    hook.uninstall()


def test_a_retune_under_the_hook_is_served_from_the_cache_with_the_same_results(hooked, pocl):
    first = _tune(pocl, [FactsObserver(hooked)])
    seen = len(hooked.history.records)
    second = _tune(pocl, [FactsObserver(hooked)])
    records = hooked.history.records
    assert {r.origin for r in records} == {"kernel_tuner.backends.opencl"}
    before, after = _by_key(records[:seen]), _by_key(records[seen:])
    assert len(before) == len(SIZES) and after.keys() == before.keys()  # one program a size
    # the first build of each program: MISS, then HIT. Kernel Tuner builds its first
    # configuration twice (a warm-up, then the measured one): the hook waits for no save, so in
    # the first tune that repeat is a HIT, or a MISS again while the warm-up's save is under way
    assert {o[0] for o in before.values()} == {Outcome.MISS}
    assert {o[0] for o in after.values()} == {Outcome.HIT}
    assert {x for o in before.values() for x in o[1:]} <= {Outcome.MISS, Outcome.HIT}
    assert {x for o in after.values() for x in o[1:]} <= {Outcome.HIT}
    assert [r["clmagic_outcome"] for r in first[1:]] == ["MISS"] * (len(SIZES) - 1)
    assert [r["clmagic_outcome"] for r in second[1:]] == ["HIT"] * (len(SIZES) - 1)
    facts = ("block_size_x", "work_group_size", "local_mem", "private_mem")
    assert [{k: r[k] for k in facts} for r in first] == [{k: r[k] for k in facts}
                                                         for r in second]
    assert all("__error__" not in r for r in first + second)  # every output was a + b


def test_the_observer_adds_the_kernels_facts_to_each_configuration(hooked, pocl):
    results = _tune(pocl, [FactsObserver(hooked)])
    assert [r["block_size_x"] for r in results] == SIZES
    for r in results:
        assert set(COLUMNS) <= r.keys()
        assert r["work_group_size"] >= r["block_size_x"] > 0  # it ran with that group size
        assert r["local_mem"] == 4 * r["block_size_x"]  # float tile[block_size_x]
        assert isinstance(r["private_mem"], int) and r["private_mem"] >= 0
        assert "registers" not in r  # NVIDIA's ptxas figures only


def test_the_class_itself_is_an_observer_kernel_tuner_makes(pocl, cache_dir, monkeypatch):
    """``observers=[FactsObserver]``: Kernel Tuner calls it with a dict of its arguments; it
    reads the process's compiler, the one ``clmagic.install()`` builds with."""
    monkeypatch.setenv("CLMAGIC_CACHE_DIR", str(cache_dir))
    clmagic.install()
    try:
        results = _tune(pocl, [FactsObserver])
    finally:
        clmagic.uninstall()
        clmagic.get_compiler().flush()
    assert [r["local_mem"] for r in results] == [4 * s for s in SIZES]
    assert [r["clmagic_outcome"] for r in results[1:]] == ["MISS"] * (len(SIZES) - 1)


def test_the_observer_works_without_the_hook(compiler, pocl):
    results = _tune(pocl, [FactsObserver(compiler)])
    assert [r["local_mem"] for r in results] == [4 * s for s in SIZES]
    assert {r["clmagic_outcome"] for r in results} == {None}  # pyopencl built them itself
    assert compiler.history.records == []


def test_with_no_history_kept_the_observer_still_gives_the_facts(cache_dir, pocl):
    """CLMAGIC_RECORD=off: the hook builds through the cache but keeps no record to read the
    outcome from; the facts are the driver's all the same."""
    compiler = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(cache_dir),
                                                   "CLMAGIC_DEVICE": pocl,
                                                   "CLMAGIC_RECORD": "off"}))
    hook.install(compiler)
    try:
        results = _tune(pocl, [FactsObserver(compiler)])
    finally:
        hook.uninstall()
    assert [r["local_mem"] for r in results] == [4 * s for s in SIZES]
    assert {r["clmagic_outcome"] for r in results} == {None}
    compiler.flush()  # the saves, on the saver's thread
    assert compiler.history.records == []
    assert len(list(compiler.store.entries())) == len(SIZES)  # built through the cache


def test_the_observer_refuses_a_backend_without_opencl_kernels():
    class CudaLikeBackend:  # what Kernel Tuner's CUDA backends have: no OpenCL context
        name = "A100"

    with pytest.raises(NotImplementedError, match="CudaLikeBackend backend builds none: tune "
                                                  "with lang='OpenCL'"):
        FactsObserver().register_device(CudaLikeBackend())


def test_without_kernel_tuner_the_import_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "kernel_tuner.observers.observer", None)
    monkeypatch.delitem(sys.modules, "clmagic.cache.tuner")
    monkeypatch.delitem(sys.modules, "clmagic.kernel_tuner")
    with pytest.raises(ImportError, match=r"pip install 'clmagic\[tune\]'"):
        import clmagic.kernel_tuner  # noqa: F401
