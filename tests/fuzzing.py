"""What the fuzz tests of stored data share (tests/store/test_fuzz_*.py): hypothesis settings,
strategies of hostile input, and a count of the inputs each parser was given.

The property of every parser of stored data (the validators' contract, :mod:`clmagic._valid`):
for arbitrary bytes and for structured-but-wrong JSON (huge integers, NaN and infinity, wrong
types, deep nesting, long strings, unicode) it returns a valid value or raises
:class:`~clmagic.errors.CorruptEntry` (or its one other clear error), never anything else.

``CLMAGIC_FUZZ_EXAMPLES`` sets the examples per test (default 300: the default run stays fast;
set 5000 for a long run). The counts are written at the end of each fuzz module (the terminal's
last lines), and appended as JSON to ``CLMAGIC_FUZZ_REPORT`` when it names a file.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import RUN_DIR

# hypothesis keeps its caches (unicode tables, constants) in the run's folder, not the checkout
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(RUN_DIR / "hypothesis"))

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

__all__ = ["FUZZ", "tried", "TRIED", "json_values", "json_texts", "hostile_bytes", "fuzz_report",
           "deep", "mutations", "holds"]

EXAMPLES = int(os.environ.get("CLMAGIC_FUZZ_EXAMPLES", "300"))
#: every fuzz test's settings: no deadline (a loaded machine is slow), no example database (it
#: would be written in the working folder)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much])
#: inputs given to each parser in this run
TRIED: Counter[str] = Counter()


def tried(parser: str) -> None:
    """Count one input given to ``parser``."""
    TRIED[parser] += 1


# -- hostile values ----------------------------------------------------------------------------

_HUGE = st.integers(min_value=-(10 ** 450), max_value=10 ** 450)
_SCALARS = (st.none() | st.booleans() | _HUGE | st.integers(-(2 ** 70), 2 ** 70)
            | st.floats(allow_nan=True, allow_infinity=True)
            | st.sampled_from([10 ** 400, -(10 ** 400), 1e308, -1e308, 2 ** 63, 2 ** 64, -1,
                               math.inf, math.nan, "", "²", "٣", "1e999", "NaN", "-0"])
            | st.text(max_size=40) | st.text(min_size=2000, max_size=4000))
#: JSON values of every kind, nested a little
json_values = st.recursive(
    _SCALARS, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.text(max_size=12), kids, max_size=4), max_leaves=10)


def deep(n: int, kind: str = "[") -> str:
    """A JSON text nested ``n`` deep."""
    return "[" * n + "]" * n if kind == "[" else '{"a":' * n + "1" + "}" * n


def _dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=True)


#: JSON texts: any value, nested past the parser's stack, or cut short
json_texts = (json_values.map(_dumps)
              | st.integers(1, 40_000).map(deep)
              | st.integers(1, 40_000).map(lambda n: deep(n, "{"))
              | json_values.map(_dumps).map(lambda t: t[: max(1, len(t) // 2)]))
#: bytes: anything, or JSON text that is not UTF-8 where it matters
hostile_bytes = (st.binary(max_size=2000)
                 | json_texts.map(lambda t: t.encode("utf-8", "surrogatepass"))
                 | st.binary(max_size=50).map(lambda b: b'{"k":"' + b + b'"}'))


def mutations(doc: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Structured-but-wrong versions of a valid JSON object: one field replaced by any value,
    one removed, one added, or the whole replaced."""
    keys = sorted(doc)
    replaced = st.tuples(st.sampled_from(keys), json_values).map(
        lambda kv: {**doc, kv[0]: kv[1]})
    removed = st.sampled_from(keys).map(lambda k: {n: v for n, v in doc.items() if n != k})
    added = st.tuples(st.text(max_size=12), json_values).map(lambda kv: {**doc, kv[0]: kv[1]})
    return replaced | removed | added | json_values


# -- the report --------------------------------------------------------------------------------

def fuzz_report(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module fixture's body: after the module, say how many inputs each parser was given."""
    before = Counter(TRIED)
    yield
    counts = {k: v - before.get(k, 0) for k, v in sorted(TRIED.items()) if v - before.get(k, 0)}
    line = "fuzz inputs tried: " + ", ".join(f"{k} {v}" for k, v in counts.items())
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if capture is not None and reporter is not None:  # past pytest's capture, on the terminal
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)
    target = os.environ.get("CLMAGIC_FUZZ_REPORT")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(json.dumps(counts) + "\n")


def holds(parser: str, call: Callable[[], Any], *allowed: type[BaseException]) -> Any:
    """Call one parser on one input (counted): its value, or ``None`` where it raised one of
    the ``allowed`` errors; any other exception fails the test."""
    tried(parser)
    try:
        return call()
    except allowed:
        return None
