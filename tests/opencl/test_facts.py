"""Kernel facts (clmagic/opencl/facts.py) on POCL and Oclgrind: each figure is the driver's own
answer (compared with pyopencl's queries made here), absent where the driver does not say (no
ptxas figures off NVIDIA, no argument names on POCL without -cl-kernel-arg-info), never made up;
kept in the entry, so a HIT shows the MISS's facts; entries saved without facts still load."""

from __future__ import annotations

import pyopencl as cl
import pytest

import clmagic
from clmagic.opencl.facts import ArgFacts, KernelFacts, facts_from_json, facts_to_json, gather

SRC = """\
__kernel void saxpy(const float a, __global const float *x, __global float *y)
{ const int i = get_global_id(0); y[i] = a * x[i] + y[i]; }

__kernel __attribute__((reqd_work_group_size(8, 1, 1)))
void tile(__global float *y, __local float *scratch)
{
    __local float t[64];
    t[get_local_id(0)] = y[get_global_id(0)];
    scratch[get_local_id(0)] = 1.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    y[get_global_id(0)] = t[7 - get_local_id(0)] + scratch[0];
}
"""


def _device(spec: str) -> cl.Device:
    return clmagic.resolve_device(spec)[1]


def _program(dev: cl.Device, options: str = "") -> tuple[cl.Program, dict[str, cl.Kernel]]:
    ctx = cl.Context([dev])
    prg = cl.Program(ctx, SRC).build(options=options)
    return prg, {k.function_name: k for k in prg.all_kernels()}


def _direct(kernel: cl.Kernel, dev: cl.Device, what: int) -> object:
    try:
        return kernel.get_work_group_info(what, dev)
    except cl.Error:
        return None


@pytest.mark.parametrize("which", ["pocl", "oclgrind"])
def test_work_group_figures_are_the_drivers(which, request):
    dev = _device(request.getfixturevalue(which))
    _, kernels = _program(dev)
    facts = gather(kernels, dev)
    wg = cl.kernel_work_group_info
    for name, k in kernels.items():
        f = facts[name]
        assert f.work_group_size == _direct(k, dev, wg.WORK_GROUP_SIZE)
        assert list(f.compile_work_group_size or ()) == list(
            _direct(k, dev, wg.COMPILE_WORK_GROUP_SIZE))
        assert f.preferred_multiple == _direct(k, dev, wg.PREFERRED_WORK_GROUP_SIZE_MULTIPLE)
        assert f.local_mem == _direct(k, dev, wg.LOCAL_MEM_SIZE)
        assert f.private_mem == _direct(k, dev, wg.PRIVATE_MEM_SIZE)
        # no ptxas off NVIDIA: nothing of it is said
        assert (f.registers, f.spills, f.shared_mem, f.stack_frame) == (None,) * 4
        assert len(f.args or ()) == k.num_args
    assert facts["tile"].compile_work_group_size == (8, 1, 1)
    assert facts["saxpy"].compile_work_group_size == (0, 0, 0)  # fixes none
    assert facts["tile"].local_mem >= 64 * 4  # the static __local array


def test_argument_names_only_where_the_driver_keeps_them(pocl, oclgrind):
    """POCL keeps argument names only for a build with -cl-kernel-arg-info (clmagic adds no
    option); Oclgrind always. Each name is what pyopencl reads for it."""
    dev = _device(pocl)
    _, kernels = _program(dev)
    assert gather(kernels, dev)["saxpy"].args == (ArgFacts(),) * 3
    for spec, options in ((pocl, "-cl-kernel-arg-info"), (oclgrind, "")):
        dev = _device(spec)
        _, kernels = _program(dev, options)
        facts = gather(kernels, dev)
        assert facts["saxpy"].args == (
            ArgFacts(name="a", type_name="float", address="private"),
            ArgFacts(name="x", type_name="float*", address="global"),
            ArgFacts(name="y", type_name="float*", address="global"))
        assert facts["tile"].args[1].address == "local"
        assert facts["saxpy"].arg_names == [
            kernels["saxpy"].get_arg_info(i, cl.kernel_arg_info.NAME) for i in range(3)]


def test_ptxas_figures_come_from_nvidias_driver_only(pocl):
    """ptxas lines in a log are NVIDIA's report only on NVIDIA: on POCL they can only be the
    source's (a ``#warning`` says what it likes), so no kernel gets figures from them; the
    rest is the driver's."""
    dev = _device(pocl)
    _, kernels = _program(dev)
    log = ("ptxas info    : Compiling entry function 'saxpy' for 'sm_90'\n"
           "ptxas info    : Function properties for saxpy\n"
           "ptxas         .     0 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n"
           "ptxas info    : Used 32 registers, 360 bytes cmem[0]\n")
    facts = gather(kernels, dev, log)
    assert all(f.registers is None and f.spills is None for f in facts.values()), facts
    assert facts["saxpy"].work_group_size


def test_json_round_trip_and_lenient_reading():
    f = KernelFacts(name="k", work_group_size=256, compile_work_group_size=(0, 0, 0),
                    registers=40, args=(ArgFacts(name="x", address="global"), ArgFacts()))
    doc = facts_to_json({"k": f})
    assert "private_mem" not in doc["k"] and doc["k"]["args"] == [
        {"name": "x", "address": "global"}, {}]
    assert facts_from_json(doc) == {"k": f}
    assert facts_from_json(None) is None  # an entry saved before clmagic kept facts
    odd = facts_from_json({"k": {"registers": "many", "work_group_size": True, "new": 1},
                           "bad": 3})
    assert odd == {"k": KernelFacts(name="k")}


def test_a_hit_shows_the_facts_of_its_miss(settings, oclgrind):
    """The MISS's facts are kept in the entry: a new compiler over the same store (a new
    kernel's) HITs and shows the same facts without asking the driver; the entry holds them as
    JSON; a comment-only change (REKEYED) carries them too."""
    first = clmagic.Compiler(settings).build(SRC, "", oclgrind)
    assert first.outcome == "MISS" and first.saved
    facts = first.kernel_info
    assert set(facts) == {"saxpy", "tile"} and facts["saxpy"].args[1].name == "x"
    entry = first_entry(settings, first)
    assert facts_from_json(entry.meta.kernel_facts) == facts
    again = clmagic.Compiler(settings).build(SRC, "", oclgrind)
    assert again.outcome == "HIT" and again.record.facts == facts and again.kernel_info == facts
    moved = clmagic.Compiler(settings).build("// same code\n" + SRC, "", oclgrind)
    assert moved.outcome == "REKEYED" and moved.kernel_info == facts


def first_entry(settings, result):
    from clmagic.store import store_for

    store = store_for(settings)
    entry = store.get(result.device.fingerprint, result.key)
    assert entry is not None
    return entry


def test_entries_without_facts_still_load(settings, pocl):
    """An entry saved before clmagic kept facts (no kernel_facts field) is a HIT; its facts are
    then asked of the driver for the loaded program, and equal those of a fresh build."""
    import dataclasses

    from clmagic.entry import Entry
    from clmagic.store import store_for

    built = clmagic.Compiler(settings).build(SRC, "", pocl)
    assert built.saved
    entry = first_entry(settings, built)
    meta = dataclasses.replace(entry.meta, kernel_facts=None, digest="", signature="")
    assert "kernel_facts" not in meta.to_json()
    store = store_for(settings)
    store.delete(built.device.fingerprint, built.key)
    assert store.put(Entry(meta=meta, binary=entry.binary))
    hit = clmagic.Compiler(settings).build(SRC, "", pocl)
    assert hit.outcome == "HIT" and hit.record.facts is None
    assert hit.kernel_info == built.kernel_info


@pytest.mark.parametrize("store_kind", ["directory", "sqlite"])
def test_facts_are_kept_as_one_json_text_and_older_entries_objects_still_read(
        tmp_path, pocl, store_kind):
    """A new entry keeps its facts as one JSON text inside the metadata (a HIT parses a string,
    not an object per kernel); an entry saved before, which holds the object itself, still
    HITs with the same facts, in each store that keeps metadata its own way."""
    import dataclasses
    import json

    from clmagic.config import Settings
    from clmagic.entry import Entry
    from clmagic.store import store_for

    where = {"directory": {"CLMAGIC_CACHE_DIR": str(tmp_path / "c")},
             "sqlite": {"CLMAGIC_CACHE_DIR": str(tmp_path / "c.db")}}[store_kind]
    settings = Settings.from_env({**where, "CLMAGIC_DEVICE": pocl})
    built = clmagic.Compiler(settings).build(SRC, "", pocl)
    assert built.saved
    entry = first_entry(settings, built)
    assert isinstance(entry.meta.kernel_facts, str)
    assert facts_from_json(entry.meta.kernel_facts) == built.kernel_info
    older = dataclasses.replace(entry.meta, kernel_facts=json.loads(entry.meta.kernel_facts),
                                digest="", signature="")
    store = store_for(settings)
    store.delete(built.device.fingerprint, built.key)
    assert store.put(Entry(meta=older, binary=entry.binary))
    assert isinstance(first_entry(settings, built).meta.kernel_facts, dict)
    hit = clmagic.Compiler(settings).build(SRC, "", pocl)
    assert hit.outcome == "HIT" and hit.record.facts == built.kernel_info
    store.close()


def test_the_compiled_code_says_what_the_binary_is(settings, pocl, oclgrind):
    compiler = clmagic.Compiler(settings)
    pocl_result = compiler.build(SRC, "", pocl)
    assert pocl_result.ptx is None and pocl_result.code.kind == "POCL binary"
    assert pocl_result.code.size is None  # never read for a view: it would generate code
    grind = compiler.build(SRC, "", oclgrind)
    assert grind.ptx is None and grind.code.kind == "LLVM bitcode" and grind.code.size > 0
