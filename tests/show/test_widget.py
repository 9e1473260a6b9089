"""The cache widget driven headlessly: dropdown set, buttons clicked, table and store checked."""

from __future__ import annotations

import pytest
from conftest import SAXPY

import clmagic
from clmagic.store import DirectoryStore

TWICE = "__kernel void twice(__global float *y) { y[get_global_id(0)] *= 2.0f; }\n"


@pytest.fixture
def built(compiler, pocl, oclgrind):
    return {
        "saxpy": compiler.build(SAXPY, "-cl-mad-enable", device=pocl),
        "twice": compiler.build(TWICE, device=pocl),
        "ocl": compiler.build(SAXPY, device=oclgrind),
    }


def keys_of(compiler, spec) -> set[str]:
    fp = clmagic.resolve_device(spec)[0].fingerprint
    return {e.key for e in compiler.store.entries(fp)}


def test_widget_device_table_and_clears(compiler, built, pocl, oclgrind):
    w = clmagic.CacheWidget(compiler)
    assert w.last_error is None and w.errors.value == ""
    labels = dict(w.device.options)
    assert set(labels.values()) == {d.spec for d in clmagic.list_devices()}
    assert w.device.value == pocl
    assert {v: k for k, v in labels.items()}[pocl] == built["saxpy"].device.label
    rows = dict((key, text) for text, key in w.rows)
    assert set(rows) == {built["saxpy"].key, built["twice"].key}
    for name, r in built.items():  # each row starts with the entry's short key
        if name != "ocl":
            assert rows[r.key].startswith(r.key[:12] + "… ")
    assert rows[built["saxpy"].key][14:].startswith("saxpy, scale") and "-cl-mad-enable" in (
        rows[built["saxpy"].key])
    assert rows[built["twice"].key][14:].startswith("twice ")
    assert "<b>2</b> entries" in w.status.value and "hit rate" in w.status.value
    assert bytes(w.plot.value).startswith(b"\x89PNG")

    # looking at Oclgrind's entries does not choose it for the builds ...
    assert "builds on <b>" + built["saxpy"].device.label in w.building.value
    assert w.use_button.disabled  # POCL shown, and it is the build device
    w.device.value = oclgrind
    assert compiler.resolve()[0].spec == pocl and "showing the entries of" in w.message.value
    assert [key for _, key in w.rows] == [built["ocl"].key]
    assert not w.use_button.disabled
    # ... "Use for %%clkernel" does: the next builds go there, POCL's programs leave memory
    w.use_button.click()
    assert compiler.resolve()[0].spec == oclgrind and w.use_button.disabled
    assert "Oclgrind Simulator" in w.building.value
    assert not [k for k in compiler.state.in_memory() if k[0] == built["saxpy"].device.fingerprint]
    assert [key for _, key in w.rows] == [built["ocl"].key]
    assert compiler.build(SAXPY).outcome == "MEMORY"  # the Oclgrind program, still in memory
    w.device.value = pocl
    w.use_button.click()
    assert compiler.resolve()[0].spec == pocl

    # clear one selected entry
    w.table.value = (built["twice"].key,)
    w.clear_selected_button.click()
    assert w.errors.value == "" and "removed 1 entry" in w.message.value
    assert keys_of(compiler, pocl) == {built["saxpy"].key}
    assert keys_of(compiler, oclgrind) == {built["ocl"].key}
    assert [key for _, key in w.rows] == [built["saxpy"].key] and w.table.value == ()

    # clear all asks for a second click; a refresh in between disarms it
    w.clear_all_button.click()
    assert "Click again" in w.clear_all_button.description
    assert keys_of(compiler, pocl) == {built["saxpy"].key}
    w.refresh_button.click()
    assert w.clear_all_button.description == "Clear all for this device"
    w.clear_all_button.click()
    w.clear_all_button.click()
    assert keys_of(compiler, pocl) == set() and w.rows == []
    assert keys_of(compiler, oclgrind) == {built["ocl"].key}
    assert "<b>0</b> entries" in w.status.value and "removed 1 entry" in w.message.value
    assert compiler.build(SAXPY, "-cl-mad-enable").outcome == "MISS"  # gone from memory too


def test_clear_selected_without_a_selection_says_so(compiler, built):
    w = clmagic.CacheWidget(compiler, plot=False)
    w.clear_selected_button.click()
    assert "select entries" in w.message.value and len(w.rows) == 2


def test_refresh_shows_new_entries_and_hits(compiler, built, pocl):
    w = clmagic.CacheWidget(compiler, plot=False)
    other = clmagic.Compiler(compiler.settings)
    other.build(SAXPY, "-cl-mad-enable", device=pocl)  # a store hit from another compiler
    fresh = other.build("__kernel void k3(__global int *a) { a[0] = 3; }", device=pocl)
    w.refresh_button.click()
    rows = {key: text for text, key in w.rows}
    assert set(rows) == {built["saxpy"].key, built["twice"].key, fresh.key}
    hits = {key: int(text.split()[-3]) for key, text in rows.items()}
    assert hits == {built["saxpy"].key: 1, built["twice"].key: 0, fresh.key: 0}
    assert w.rows[0][1] == fresh.key  # most recently used first


class _FailingDelete(DirectoryStore):
    """A real directory store whose deletes fail, as a dying disk would."""

    def delete(self, fingerprint: str, key: str) -> bool:
        raise OSError(5, "Input/output error")


def test_callback_errors_are_shown_in_the_widget(settings, built, pocl):
    c = clmagic.Compiler(settings, store=_FailingDelete(settings.cache))
    w = clmagic.CacheWidget(c, plot=False)
    w.table.value = (built["twice"].key,)
    w.clear_selected_button.click()
    assert isinstance(w.last_error, OSError)
    assert "OSError" in w.errors.value and "Input/output error" in w.errors.value
    assert built["twice"].key in {e.key for e in c.store.entries()}
    w.refresh_button.click()  # the next action that works clears the message
    assert w.errors.value == "" and w.last_error is None


def test_the_panel_follows_builds_and_clears_made_elsewhere_once_per_cell(shell, compiler,
                                                                           pocl):
    w = clmagic.CacheWidget(compiler, plot=False)
    assert w.rows == [] and "<b>0</b> entries" in w.status.value
    refreshes = []
    real = w.refresh
    w.refresh = lambda: refreshes.append(1) or real()  # type: ignore[method-assign]
    three = "\n".join(f"c.build({TWICE.replace('twice', f't{i}')!r})"
                      for i in range(3))
    shell.user_ns["c"] = compiler
    assert shell.run_cell(f"import clmagic\n{three}").success
    assert len(w.rows) == 3 and "<b>3</b> entries" in w.status.value  # without Refresh
    assert refreshes == [1]  # once for the cell, not once per build
    assert shell.run_cell(f"%%clkernel --quiet --device {pocl}\n{SAXPY}").success
    assert len(w.rows) == 4
    assert shell.run_cell("clmagic.clear_cache(compiler=c)").success
    assert w.rows == [] and "<b>0</b> entries" in w.status.value
    assert shell.run_cell("x = 1").success
    assert len(refreshes) == 3  # a cell that neither built nor cleared leaves it alone
