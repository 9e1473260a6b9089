"""The public surface: one list of public names, and the types that say what they guarantee
(:class:`clmagic.Outcome` a str-valued Enum that every file, JSON and frame keeps as its plain
word; :meth:`clmagic.Entry.create` refusing a field it does not store)."""

from __future__ import annotations

import ast
import inspect
import json
import pickle
import sqlite3
from pathlib import Path

import pytest

import clmagic
from clmagic.entry import META_FIELDS, Entry
from clmagic.outcome import SERVED, UNCACHED, Outcome

INIT = Path(clmagic.__file__)
SAXPY = "__kernel void saxpy(__global float *y, float a) { y[get_global_id(0)] *= a; }"


def _type_checking_imports() -> dict[str, str]:
    """name → module (as ``_LAZY`` writes it) of the ``from clmagic.X import ...`` lines under
    ``if TYPE_CHECKING:`` in ``clmagic/__init__.py``."""
    tree = ast.parse(INIT.read_text())
    found: dict[str, str] = {}
    blocks = [n for n in tree.body
              if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    assert blocks, "clmagic/__init__.py has no TYPE_CHECKING block"
    for block in blocks:
        for node in ast.walk(block):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clmagic."):
                for alias in node.names:
                    assert alias.asname is None, f"{alias.name} imported as {alias.asname}"
                    assert alias.name not in found, f"{alias.name} imported twice"
                    found[alias.name] = node.module.removeprefix("clmagic.")
    return found


def test_the_type_checkers_imports_are_the_lazy_names_from_their_modules():
    assert _type_checking_imports() == clmagic._LAZY


def test_all_is_the_lazy_names_and_the_functions_defined_here_once_each():
    assert len(clmagic.__all__) == len(set(clmagic.__all__))
    assert set(clmagic.__all__) == set(clmagic._LAZY) | set(clmagic._HERE)
    for name in clmagic._HERE:
        assert inspect.isfunction(vars(clmagic)[name]), name


@pytest.mark.parametrize("name", clmagic.__all__)
def test_every_public_name_resolves_to_what_its_module_defines(name):
    value = getattr(clmagic, name)
    if name in clmagic._LAZY:
        module = __import__(f"clmagic.{clmagic._LAZY[name]}", fromlist=[name])
        assert value is getattr(module, name)
    assert name in dir(clmagic)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Outcomes'"):
        clmagic.Outcomes  # noqa: B018


# -- Outcome ------------------------------------------------------------------------------------


def test_outcome_is_its_plain_word_in_every_form():
    hit = Outcome.HIT
    assert isinstance(hit, str) and hit == "HIT" and Outcome("HIT") is hit
    assert str(hit) == "HIT" and f"{hit}" == "HIT" and f"{hit:<7}|" == "HIT    |"
    assert "%s" % hit == "HIT" and hit.value == "HIT" and type(hit.value) is str  # noqa: UP031
    assert json.dumps({hit: hit}) == '{"HIT": "HIT"}'
    assert json.dumps([hit], indent=1) == '[\n "HIT"\n]'
    assert pickle.loads(pickle.dumps(hit)) is hit  # warm's worker processes send them back
    with sqlite3.connect(":memory:") as conn:
        assert conn.execute("SELECT ?, typeof(?)", (hit, hit)).fetchone() == ("HIT", "text")
    conn.close()
    assert {"HIT": 1}[hit] == 1 and hit in {"HIT"}  # a name read from a file finds it
    with pytest.raises(ValueError):
        Outcome("HITS")


def test_outcome_groups_are_outcomes():
    assert SERVED == {Outcome.HIT, Outcome.MEMORY, Outcome.REKEYED}
    assert UNCACHED == {Outcome.BYPASS, Outcome.FAILED}
    assert not SERVED & UNCACHED and (SERVED | UNCACHED) < set(Outcome)


def test_a_trips_outcome_is_an_outcome_and_its_tables_hold_plain_words(compiler):
    first, second = compiler.build(SAXPY), compiler.build(SAXPY)
    assert (first.outcome, second.outcome) == (Outcome.MISS, Outcome.MEMORY)
    assert all(type(r.outcome) is Outcome for r in compiler.history.records)
    frame = clmagic.history_frame(compiler=compiler)
    assert list(frame["outcome"]) == ["MISS", "MEMORY"]
    assert {type(v) for v in frame["outcome"]} == {str}  # not the Enum, in a DataFrame
    stats = clmagic.stats(compiler)
    assert {type(k) for k in stats.session.counts} == {str}
    assert {type(k) for k in stats.outcomes()} == {str}
    assert json.loads(json.dumps(stats.as_dict()))["session"]["counts"] == {"MISS": 1,
                                                                            "MEMORY": 1}
    assert {type(name) for _fp, name in compiler.counters.session} == {str}


# -- Entry.create -------------------------------------------------------------------------------

#: what ``Entry.create`` fills in itself (the binary's) or leaves to the store (the seal)
_FILLED = {"binary_bytes", "binary_xxh3", "digest", "signature"}
_FIELDS = dict(kernels=["k"], options="", device="d", platform="p", driver="1",
               source_bytes=1, build_ms=1.0, created=1.0)


def test_entry_create_takes_each_stored_field_by_name():
    params = inspect.signature(Entry.create).parameters
    named = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert named | {"key", "fingerprint"} == {f.name for f in META_FIELDS} - _FILLED
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def test_entry_create_refuses_a_misspelt_field():
    e = Entry.create("a" * 64, "b" * 16, b"\x01\x02", **_FIELDS)
    assert e.meta.other == {} and e.meta.binary_bytes == 2
    with pytest.raises(TypeError, match="build_msec"):
        Entry.create("a" * 64, "b" * 16, b"\x01", **_FIELDS, build_msec=2.0)
    with pytest.raises(TypeError, match="digest"):
        Entry.create("a" * 64, "b" * 16, b"\x01", **_FIELDS, digest="0" * 64)


def test_entry_create_makes_the_metadata_a_parse_would():
    e = Entry.create("a" * 64, "b" * 16, b"\x01\x02", **_FIELDS, headers=["h.h"],
                     build_log="x" * 100_000)
    assert e.meta == e.meta.parse(e.meta.to_json())
    assert len(e.meta.build_log) == 64 << 10 and e.meta.headers == ("h.h",)
    assert type(e.meta.parse({**e.meta.to_json(), "build_ms": 1}).build_ms) is float
    assert type(Entry.create("a" * 64, "b" * 16, b"\x01", **{**_FIELDS, "build_ms": 3}
                             ).meta.build_ms) is float  # checked as a parse is
