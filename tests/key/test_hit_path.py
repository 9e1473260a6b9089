"""A HIT's own work kept small without serving a stale program: remembered preparations of
sources that include files (checked by stat on reuse), and the rest of the HIT path."""

from __future__ import annotations

import os
import time

import pytest
from conftest import kernel_value

from clmagic import Compiler, Outcome
from clmagic.key import stamps
from clmagic.key.clock import rebuilt_alike

MAIN = '#include "params.h"\n__kernel void k(__global int *a) { a[get_global_id(0)] = VAL; }\n'
#: how new a file may be before memory trusts it, in these tests (the real rule: 2 s)
YOUNG_NS = 50_000_000


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A working folder and an include folder holding ``params.h``; files count as old
    after :data:`YOUNG_NS` (:func:`settle` waits that long)."""
    work = tmp_path / "work"
    (work / "inc").mkdir(parents=True)
    (work / "inc" / "params.h").write_text("#define VAL 41\n")
    monkeypatch.chdir(work)
    monkeypatch.setattr(stamps, "TOO_NEW_NS", YOUNG_NS)
    settle()
    return work


def settle() -> None:
    """Wait until every file written so far is old enough to be trusted from memory."""
    time.sleep(YOUNG_NS * 2 / 1e9)


def prepared(compiler, source=MAIN, options="-Iinc"):
    return compiler.state.prepare(source, options, compiler.resolve()[0])


def test_a_source_with_headers_is_prepared_once_while_nothing_changes(project, compiler):
    first = compiler.build(MAIN, "-Iinc")
    assert first.outcome == Outcome.MISS and kernel_value(first) == 41
    again = prepared(compiler)
    assert prepared(compiler) is again  # remembered, checked by stat alone
    assert compiler.build(MAIN, "-Iinc").outcome == Outcome.MEMORY


def test_an_edit_that_keeps_size_and_mtime_is_seen(project, compiler):
    header = project / "inc" / "params.h"
    assert kernel_value(compiler.build(MAIN, "-Iinc")) == 41
    st = header.stat()
    header.write_text("#define VAL 57\n")  # same size
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime: only ctime moves
    assert header.stat().st_size == st.st_size and header.stat().st_mtime_ns == st.st_mtime_ns
    r = compiler.build(MAIN, "-Iinc")
    assert r.outcome == Outcome.MISS and kernel_value(r) == 57


def test_a_header_appearing_earlier_in_the_search_is_seen(project, compiler):
    assert kernel_value(compiler.build(MAIN, "-Iinc")) == 41
    settle()
    prepared(compiler)
    (project / "params.h").write_text("#define VAL 7\n")  # the includer's folder: first
    r = compiler.build(MAIN, "-Iinc")
    assert r.outcome == Outcome.MISS and kernel_value(r) == 7
    settle()
    (project / "params.h").unlink()  # removed: inc/params.h again
    r = compiler.build(MAIN, "-Iinc")
    assert r.outcome in (Outcome.MEMORY, Outcome.HIT) and kernel_value(r) == 41


def test_a_folder_in_the_way_and_a_removed_header(project, compiler):
    (project / "params.h").mkdir()  # a folder: the compiler skips it
    assert kernel_value(compiler.build(MAIN, "-Iinc")) == 41
    (project / "params.h").rmdir()
    (project / "params.h").write_text("#define VAL 8\n")  # a file where the folder was
    assert kernel_value(compiler.build(MAIN, "-Iinc")) == 8
    (project / "params.h").unlink()
    (project / "inc" / "params.h").unlink()
    with pytest.raises(Exception) as info:  # nothing left to include: the compiler says so
        compiler.build(MAIN, "-Iinc")
    assert "params.h" in getattr(info.value, "log", str(info.value))


def test_a_switched_symlink_is_seen(project, compiler):
    inc = project / "inc"
    (inc / "a.h").write_text("#define VAL 1\n")
    (inc / "b.h").write_text("#define VAL 2\n")
    (inc / "params.h").unlink()
    (inc / "params.h").symlink_to("a.h")
    settle()
    assert kernel_value(compiler.build(MAIN, "-Iinc")) == 1
    (inc / "next.h").symlink_to("b.h")
    os.replace(inc / "next.h", inc / "params.h")  # the link now names another file
    assert kernel_value(compiler.build(MAIN, "-Iinc")) == 2


def test_a_switched_link_to_a_folder_moves_the_nested_search(project, compiler, settings):
    """A header's own includes are covered from its folder as named and as resolved (the
    drivers differ): the same file reached through a link into another folder covers that
    folder's headers, in memory as in a new process."""
    for name, val in (("one", 1), ("two", 2)):
        (project / name).mkdir()
        (project / name / "val.h").write_text(f"#define VAL {val}\n")
    (project / "one" / "params.h").write_text('#include "val.h"\n')
    os.link(project / "one" / "params.h", project / "two" / "params.h")  # the same file
    (project / "inc" / "params.h").unlink()
    (project / "inc" / "params.h").symlink_to(project / "one" / "params.h")
    settle()
    first = prepared(compiler)
    assert prepared(compiler) is first
    os.replace(_link(project / "inc" / "tmp", project / "two" / "params.h"),
               project / "inc" / "params.h")
    moved = prepared(compiler)
    assert moved.key != first.key and moved.key == Compiler(settings).key(MAIN, "-Iinc")
    assert [d for _, d in moved.files] == [b'#include "val.h"\n', b"#define VAL 2\n"]


def _link(path, target):
    path.symlink_to(target)
    return path


def test_a_header_too_new_is_read_again(project, compiler, monkeypatch):
    monkeypatch.setattr(stamps, "TOO_NEW_NS", 2_000_000_000)  # the real rule
    header = project / "inc" / "params.h"
    header.write_text("#define VAL 43\n")
    assert kernel_value(compiler.build(MAIN, "-Iinc")) == 43
    assert prepared(compiler) is not prepared(compiler)  # not remembered: read each time
    st = header.stat()
    header.write_text("#define VAL 44\n")
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert kernel_value(compiler.build(MAIN, "-Iinc")) == 44


def test_a_changed_working_folder_prepares_again(project, compiler, monkeypatch, tmp_path):
    assert kernel_value(compiler.build(MAIN.replace('"params.h"', "<params.h>"), "-Iinc")) == 41
    other = tmp_path / "other"
    (other / "inc").mkdir(parents=True)
    (other / "inc" / "params.h").write_text("#define VAL 9\n")
    monkeypatch.chdir(other)
    settle()
    assert kernel_value(compiler.build(MAIN.replace('"params.h"', "<params.h>"), "-Iinc")) == 9


def test_an_include_folder_alone_does_not_stop_the_helper_rebuild():
    """pyopencl passes ``-I <pyopencl>/cl`` to every build: a folder is searched only for a
    file named, so a source that names none builds alike anywhere; a forced include does not."""
    plain = "__kernel void k(__global int *a) { a[0] = 1; }\n"
    assert rebuilt_alike(plain, "-I /opt/pyopencl/cl -DX=1")
    assert not rebuilt_alike(plain, "-include x.h")
    assert not rebuilt_alike(plain, "-I /opt/inc -imacros m.h")
    assert not rebuilt_alike('#include "x.h"\n' + plain, "-I /opt/inc")


def test_a_large_source_is_normalised_as_before():
    """The byte-wise check of a large source's normal form (numpy) agrees with the text's."""
    from clmagic.key.source import check_source, normalise_source

    body = "".join(f"__kernel void k{i}(__global int *a) {{ a[{i}] = {i}; }}\n"
                   for i in range(400))
    assert len(body) > 8192
    text, src = check_source(body)
    assert text is body and src == body.encode()
    for bad in (body.replace("\n", " \n", 7), body.replace("\n", "\t\n", 3),
                body.replace("\n", "\r\n"), body[:-1], "é" + body.replace("\n", "  \n", 2)):
        text, src = check_source(bad)
        assert text == normalise_source(bad) and src == text.encode()


def _stored(tmp_path):
    from clmagic.entry import Entry, seal

    entry = Entry.create("ab" * 32, "cd" * 8, b"binary", kernels=["k"], options="", device="d",
                         platform="p", driver="1", source_bytes=1, build_ms=1.0, created=1.0,
                         kernel_facts={"k": {"work_group_size": 64}})
    return Entry(seal(entry.meta, None), binary=entry.binary)


def _with_meta(data: bytes, meta: bytes) -> bytes:
    """An entry file's bytes with its metadata replaced (the header's length and CRC mended)."""
    import zlib

    from clmagic.entry_file import HEADER

    magic, version, length, _crc, zero, blen = HEADER.unpack_from(data)
    head = HEADER.pack(magic, version, len(meta), zlib.crc32(meta), zero, blen)
    return head + meta + data[HEADER.size + length:]


def test_the_digest_is_checked_over_the_stored_bytes_and_otherwise(tmp_path):
    """The metadata's digest holds over the bytes as stored (no JSON encoded again); metadata
    written in another layout is checked the slow way, and an edit fails either way."""
    import json

    from clmagic.entry_file import HEADER, decode, encode
    from clmagic.errors import CorruptEntry

    entry = _stored(tmp_path)
    data = encode(entry)
    assert decode(data, entry.key, entry.fingerprint).meta == entry.meta
    meta = json.loads(data[HEADER.size:HEADER.size + HEADER.unpack_from(data)[2]])
    spaced = json.dumps(meta, indent=1).encode()  # the same metadata, another layout
    assert decode(_with_meta(data, spaced)).meta == entry.meta
    for field, value in (("device", "e"), ("build_ms", 2.0), ("kernels", []), ("digest", "0" * 32)):
        edited = json.dumps({**meta, field: value}, separators=(",", ":"), sort_keys=True)
        with pytest.raises(CorruptEntry, match="digest"):
            decode(_with_meta(data, edited.encode()))


def test_a_hit_hands_on_the_kernel_facts_of_its_miss(compiler):
    from conftest import SAXPY

    first = compiler.build(SAXPY)
    compiler.forget()
    hit = compiler.build(SAXPY)
    assert hit.outcome == Outcome.HIT
    assert hit.kernel_info == first.kernel_info and set(hit.kernel_info) == {"saxpy", "scale"}
    assert hit.record.facts == first.record.facts
