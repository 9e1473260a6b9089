"""The validators' contract, fuzzed on the parsers of the other stored files: the manifest
(lines whose checksum holds, so the parse is reached), a sweep's results file, the lifetime
counters (their slots and their files' names), a directory store's temp files' names, and the
kernel facts an entry keeps; and the contract's own readers. Each returns a valid value or
raises CorruptEntry (or says nothing: a line not there, a count left out), never anything else
(see tests/fuzzing.py)."""

from __future__ import annotations

import json
import os
import zlib

import pytest
import xxhash
from fuzzing import FUZZ, holds, hostile_bytes, json_texts, json_values, mutations
from fuzzing import fuzz_report as _report
from hypothesis import given
from hypothesis import strategies as st

from clmagic import _valid
from clmagic.cache import sweep
from clmagic.errors import CorruptEntry
from clmagic.key.manifest import Manifest, Remembered
from clmagic.opencl.facts import KernelFacts, facts_from_json
from clmagic.opencl.stored_facts import stored_facts
from clmagic.store import lifetime
from clmagic.store.directory import files


@pytest.fixture(scope="module", autouse=True)
def fuzz_report(request):
    yield from _report(request)


# -- the manifest -------------------------------------------------------------------------------

NAME = b"0" * 32
GOOD = {"k": "ab" * 32, "n": False, "h": ['"x.h" @cwd'], "s": False,
        "p": [["/tmp/x.h", [1, 2, 3, 4, 5]], ["/tmp/y.h", None]], "c": "/tmp", "o": "",
        "v": "__kernel void k()", "b": 40}


@pytest.fixture(scope="module")
def manifest_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("manifest")
    folder.chmod(0o700)
    path = folder / "manifest"
    Manifest(path).add(NAME, Remembered("k", False, (), True, {}, "/", "", "", 1))
    return path


@FUZZ
@given(st.one_of(mutations(GOOD).map(lambda d: json.dumps(d, allow_nan=True).encode()),
                 hostile_bytes.filter(lambda b: b"\n" not in b)))
def test_manifest_lines(manifest_path, body):
    """A line whose checksum holds, of any body: a Remembered or nothing."""
    head = manifest_path.read_bytes().split(b"\n")[0]
    line = NAME + xxhash.xxh3_128_hexdigest(NAME + b" " + body).encode() + body
    manifest_path.write_bytes(head + b"\n" + line + b"\n")
    manifest_path.chmod(0o600)
    got = holds("manifest line", lambda: Manifest(manifest_path).get(NAME))
    assert got is None or isinstance(got, Remembered)
    if got is not None:
        assert 0 <= got.size <= _valid.MAX_WHOLE and all(isinstance(n, str) for n in got.names)


@FUZZ
@given(hostile_bytes)
def test_manifest_files(manifest_path, data):
    manifest_path.write_bytes(data)
    manifest_path.chmod(0o600)
    got = holds("manifest file", lambda: Manifest(manifest_path).get(NAME))
    assert got is None or isinstance(got, Remembered)


# -- a sweep's results ----------------------------------------------------------------------------

ROW = {"params": {"N": "4"}, "outcome": "MISS", "error": "", "median_us": 12.5, "min_us": 11.0,
       "spread_us": 0.5}


@pytest.fixture(scope="module")
def results_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweeps")
    folder.chmod(0o700)
    return folder / "results.json"


@FUZZ
@given(st.one_of(
    mutations(ROW).map(lambda r: {"version": 1, "rows": {"k": r}}),
    json_values.map(lambda v: {"version": 1, "rows": v}),
    json_values).map(lambda d: json.dumps(d, allow_nan=True).encode()) | hostile_bytes)
def test_sweep_results(results_path, data):
    """What a sweep resumes from (read by another engineer's safe reader, shaped by the
    sweep's own check): rows of the written shape, or none."""
    results_path.write_bytes(data)
    rows = holds("sweep results", lambda: sweep._load(results_path))
    assert isinstance(rows, dict) and all(isinstance(r, dict) for r in rows.values())


# -- the lifetime counters ------------------------------------------------------------------------

def _slot(fp: bytes, name: bytes, count: float, value: float) -> bytes:
    """One slot as a counter file holds it: its checksum right, its numbers anything."""
    body = lifetime._BODY.pack(fp, name, count, value)
    return body + lifetime._CRC.pack(zlib.crc32(body))


_NUMBERS = (st.floats(allow_nan=True, allow_infinity=True)
            | st.sampled_from([1e308, -1.0, 2.0 ** 60]))


@FUZZ
@given(st.one_of(
    st.lists(st.tuples(st.binary(max_size=16), st.binary(max_size=16), _NUMBERS, _NUMBERS).map(
        lambda t: _slot(*t)), max_size=4).map(b"".join),
    hostile_bytes))
def test_lifetime_counter_files(tmp_path, data):
    """A counter file of any slots (checksummed) or any bytes: its tally, damage left out."""
    folder = tmp_path / "stats"
    folder.mkdir(mode=0o700, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    (folder / f"{lifetime._host()}.1.x{lifetime._SUFFIX}").write_bytes(data)
    tally = holds("lifetime counters", lifetime.Counters(folder).lifetime)
    assert tally is not None
    for count, value in tally.values():
        assert 0 <= count <= 4 * lifetime.MAX_NUMBER and 0 <= value <= 4 * lifetime.MAX_NUMBER


_NAMES = st.one_of(st.text(max_size=30), st.sampled_from(["9" * 30, "9" * 5000, "²", "٣", "-1",
                                                          "0", " 12", "1_0", "4294967296"]))


@FUZZ
@given(_NAMES)
def test_names_that_spell_a_process(tmp_path, spelled):
    """A counter file's or a temp file's name spells its writer's process: any name is a pid
    that ``os.kill`` takes, or none; claiming dead writers' files and sweeping temp files never
    raise on a name."""
    pid = holds("process id in a name", lambda: _valid.pid_of(spelled))
    assert pid is None or 1 <= pid <= _valid.MAX_PID
    if "/" in spelled or "\0" in spelled or spelled in ("", ".", ".."):
        return
    folder = tmp_path / "names"
    folder.mkdir(mode=0o700, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    host = lifetime._host()
    for name in (f"{host}.{spelled}.x{lifetime._SUFFIX}", f"e{files.TMP}{spelled}.1"):
        try:
            (folder / name).write_bytes(b"")
        except OSError:  # a name too long for the file system
            return
    def count_and_claim() -> None:  # opening its own file, a process claims the dead's
        counters = lifetime.Counters(folder)
        counters.add("0123456789abcdef", "HIT", 1, 0.0)
        counters.flush()
        counters.lifetime()
        counters.close()

    holds("counter file names", count_and_claim)
    holds("temp file names", lambda: files.sweep_tmp(folder, os.listdir(folder), "e"))


# -- stored kernel facts -------------------------------------------------------------------------

FACTS = {"k": {"work_group_size": 256, "local_mem": 0, "private_mem": 8, "registers": 12,
               "compile_work_group_size": [0, 0, 0],
               "args": [{"name": "a", "type_name": "int*", "address": "global"}]}}


@FUZZ
@given(st.one_of(mutations(FACTS).map(lambda d: json.dumps(d, allow_nan=True)), json_texts,
                 mutations(FACTS["k"]).map(lambda d: json.dumps({"k": d}, allow_nan=True)),
                 json_values))
def test_stored_kernel_facts(raw):
    """An entry's facts (text, or the object an older entry holds): facts whose figures are
    whole numbers in range, or none."""
    def read() -> object:
        facts = stored_facts(raw)
        return None if facts is None else dict(facts)

    got = holds("stored kernel facts", read)
    assert got is None or all(isinstance(f, KernelFacts) for f in got.values())
    direct = holds("kernel facts JSON", lambda: facts_from_json(raw))
    for f in (direct or {}).values():
        for figure in (f.work_group_size, f.local_mem, f.private_mem, f.registers):
            assert figure is None or 0 <= figure <= _valid.MAX_WHOLE


# -- the contract's readers ------------------------------------------------------------------------

@FUZZ
@given(json_values, st.sampled_from(["whole", "number", "text", "texts", "object"]))
def test_the_readers(value, kind):
    """Each typed reader: its type, in range, or CorruptEntry."""
    fields = _valid.Fields({"f": value}, "a record")
    got = holds(f"reader {kind}", lambda: getattr(fields, kind)("f"), CorruptEntry)
    if got is None:
        return
    expected = {"whole": int, "number": float, "text": str, "texts": tuple, "object": dict}[kind]
    assert isinstance(got, expected)
    if kind == "number":
        assert abs(got) <= _valid.MAX_NUMBER


@FUZZ
@given(hostile_bytes | json_texts)
def test_load_json(raw):
    holds("JSON loader", lambda: _valid.load_json(raw, "a record"), CorruptEntry)
