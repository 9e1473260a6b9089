"""Never the wrong program (issue 11, part A): every way to include a file is keyed or bypasses
the cache; a header edited during the build is not saved; normalisation keeps the meaning;
build options reach the driver as written. Real drivers (POCL, Oclgrind), real files.

Each include instance first shows that the driver really reads the file (the kernel computes the
header's value), then edits it and builds with a new ``Compiler`` on the same store: MISS or
BYPASS and the new value, never a stale HIT.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest
from conftest import kernel_value as value
from conftest import last_json, run_child

from clmagic import Compiler, Outcome
from clmagic.config import Settings
from clmagic.errors import BuildError
from clmagic.key.includes import Unkeyable, find_headers, option_inputs
from clmagic.key.options import parse_options

K = "\n__kernel void k(__global int *a) { a[0] = (int)(VAL); }\n"


@dataclass
class Case:
    id: str
    src: str
    opts: str = ""
    #: the file edited between the builds (relative to the working directory)
    edit: str = "params.h"
    driver: str = "pocl"
    bypass: bool = False  # clmagic cannot tell: every build bypasses the cache
    files: dict[str, str] = field(default_factory=dict)


P = '"params.h"'
CASES = [
    Case("plain", f"#include {P}" + K),
    Case("splice", f"#inc\\\nlude {P}" + K),
    Case("splice-crlf", f"#inc\\\r\nlude {P}" + K),
    Case("splice-in-name", '#include "par\\\nams.h"' + K),
    Case("splice-blanks", f"#inc\\  \nlude {P}" + K),  # clang splices "\\  \n" (a warning)
    Case("comment-inside", f"# /*x*/ include {P}" + K),
    Case("comment-before", f"/* c */ #include {P}" + K),
    Case("multiline-comment-before", f"/* c\n */ #include {P}" + K),
    Case("digraph", f"%:include {P}" + K),
    Case("trigraph", f"??=include {P}" + K),
    Case("trigraph-splice", f"#inc??/\nlude {P}" + K),
    Case("cr-newline", f"// a comment\r#include {P}\r" + K),
    Case("import", f"#import {P}" + K),
    Case("include_next", f"#include_next {P}" + K),
    Case("has_include", '#if __has_include("opt.h")\n#define VAL 2\n#else\n#define VAL 1\n#endif'
         + K, edit="opt.h"),
    Case("absolute", '#include "@/abs.h"' + K, edit="abs.h"),
    Case("in-header-spliced", '#include "outer.h"' + K,
         files={"outer.h": f"#inc\\\nlude {P}\n"}),
    Case("symlink-dotdot", '#include "link/../params.h"' + K, edit="real/params.h",
         files={"real/sub/.keep": "", "real/params.h": "#define VAL 1\n"}),
    Case("symlinked-header", '#include "lnk.h"' + K, edit="target.h",
         files={"target.h": "#define VAL 1\n"}),
    Case("-I DIR", "#include <only.h>" + K, "-I inc", edit="inc/only.h"),
    Case("-Iabsolute", "#include <only.h>" + K, "-I@/inc", edit="inc/only.h"),
    Case("computed", "#define H " + P + "\n#include H" + K, bypass=True),
    Case("computed-angle", "#define H <params.h>\n#include H" + K, bypass=True),
    Case("-include", K, "-include params.h", driver="oclgrind"),
    Case("--include", K, "--include params.h", driver="oclgrind"),
    Case("-imacros", K, "-imacros params.h", driver="oclgrind"),
    Case("-isystem", "#include <only.h>" + K, "-isystem inc", edit="inc/only.h",
         driver="oclgrind"),
    Case("-isystemDIR", "#include <only.h>" + K, "-isysteminc", edit="inc/only.h",
         driver="oclgrind"),
    Case("-iquote", '#include "only.h"' + K, "-iquote inc", edit="inc/only.h",
         driver="oclgrind"),
    Case("-idirafter", "#include <only.h>" + K, "-idirafter inc", edit="inc/only.h",
         driver="oclgrind"),
    Case("-iprefix", "#include <only.h>" + K, "-iprefix @/ -iwithprefix inc",
         edit="inc/only.h", driver="oclgrind", bypass=True),
]


def _setup(work: Path, case: Case) -> None:
    (work / "inc").mkdir(parents=True)
    (work / "params.h").write_text("#define VAL 1\n")
    (work / "inc" / "only.h").write_text("#define VAL 1\n")
    (work / "abs.h").write_text("#define VAL 1\n")
    for name, text in case.files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    if case.id == "symlink-dotdot":  # link/.. is real/, not the working directory
        (work / "link").symlink_to(work / "real" / "sub")
    if case.id == "symlinked-header":
        (work / "lnk.h").symlink_to(work / "target.h")


def _edit(work: Path, case: Case) -> int:
    """Change what the driver reads; returns the value the kernel must now compute."""
    if case.id == "has_include":
        (work / "opt.h").write_text("")
        return 2
    if case.id == "symlinked-header":  # the same target, retargeted
        (work / "other.h").write_text("#define VAL 2\n")
        (work / "lnk.h").unlink()
        (work / "lnk.h").symlink_to(work / "other.h")
        return 2
    (work / case.edit).write_text("#define VAL 2\n")
    return 2


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_include_is_keyed_or_bypasses(case, tmp_path, monkeypatch, pocl, oclgrind):
    work = tmp_path / "work"
    _setup(work, case)
    monkeypatch.chdir(work)
    device = pocl if case.driver == "pocl" else oclgrind
    settings = Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "cache"),
                                  "CLMAGIC_DEVICE": device})
    src, opts = case.src.replace("@/", f"{work}/"), case.opts.replace("@/", f"{work}/")
    first = Compiler(settings).build(src, opts)
    assert value(first) == 1, "the driver reads the file"
    want = Outcome.BYPASS if case.bypass else Outcome.MISS
    assert first.outcome == want, first.note
    if case.bypass:
        assert first.note.startswith("not cached: ") and "cannot tell" in first.note
    again = Compiler(settings).build(src, opts)
    assert again.outcome == (Outcome.BYPASS if case.bypass else Outcome.HIT)
    new = _edit(work, case)
    edited = Compiler(settings).build(src, opts)
    assert edited.outcome in (Outcome.MISS, Outcome.BYPASS)
    assert value(edited) == new, "never the old binary"


@pytest.mark.parametrize("tokens", [
    ["-I=inc"], ["-Xclang", "-I", "-Xclang", "inc"], ["@rsp.txt"], ["-iprefix", "/x"],
    ["-isysroot", "/x"], ["--sysroot=/x"], ["-mllvm", "-x"], ["-fmodule-map-file=a"],
    ["-fplugin=a.so"], ["-ivfsoverlay", "a.yaml"], ["-Finc"], ["-Wp,-include,a.h"],
    ["-DX=a", "b"], ["-s", "k.cl"],
])
def test_options_that_may_read_unknown_files_cannot_be_keyed(tokens):
    with pytest.raises(Unkeyable, match="cannot tell"):
        option_inputs(tokens)


def test_options_known_not_to_read_files_pass():
    safe = ["-DN=4", "-UN", "-cl-std=CL2.0", "-cl-fast-relaxed-math", "-w", "-Werror",
            "-Wno-unused", "-g", "-O2", "-ffast-math", "-mcpu=x", "-cl-nv-maxrregcount=32"]
    assert option_inputs(safe) == ([], [])
    assert option_inputs(["-I", "a", "-Ib", "-isystem", "c", "-include", "d.h",
                          "--include=e.h", "-imacrosf.h"]) == (["a", "b", "c"],
                                                               ["d.h", "e.h", "f.h"])


def test_driver_flags_from_the_environment_are_keyed(tmp_path, pocl):
    """``POCL_EXTRA_BUILD_FLAGS`` changes the program: its value is in the key; POCL keeps the
    first value it read, so a change within a session bypasses the cache."""
    code = f"""
import json, os, numpy as np, pyopencl as cl, clmagic
from clmagic.config import Settings
src = "#ifndef VAL\\n#define VAL 1\\n#endif\\n" + {K!r}
def value(r):
    a = np.zeros(1, np.int32); b = cl.Buffer(r.context, cl.mem_flags.WRITE_ONLY, 4)
    r.kernels["k"](r.queue, (1,), None, b); cl.enqueue_copy(r.queue, a, b); return int(a[0])
c = clmagic.Compiler(Settings.from_env({{"CLMAGIC_CACHE_DIR": {str(tmp_path / "c")!r},
                                        "CLMAGIC_DEVICE": {pocl!r}}}))
out = []
r = c.build(src); out.append([r.outcome, value(r)])
os.environ["POCL_EXTRA_BUILD_FLAGS"] = os.environ["NEXT"]
r = c.build(src); out.append([r.outcome, value(r)])
print(json.dumps(out))
"""
    base = {"POCL_KERNEL_CACHE": "0"}
    first = last_json(run_child(code, POCL_EXTRA_BUILD_FLAGS="-DVAL=5", NEXT="-DVAL=6", **base))
    assert first == [["MISS", 5], ["BYPASS", 5]]  # POCL still uses -DVAL=5: not filed as 6
    second = last_json(run_child(code, POCL_EXTRA_BUILD_FLAGS="-DVAL=7", NEXT="-DVAL=7", **base))
    assert second == [["MISS", 7], ["MEMORY", 7]]
    third = last_json(run_child(code, POCL_EXTRA_BUILD_FLAGS="-DVAL=5", NEXT="-DVAL=5", **base))
    assert third[0] == ["HIT", 5]


# -- a header that changes during the build ---------------------------------------------------

@contextlib.contextmanager
def _header_edited_during_the_build(tmp_path: Path, monkeypatch) -> Iterator[None]:
    """In ``tmp_path`` (made the current folder), ``params.h`` says ``VAL 1``; every driver
    build inside the block rewrites it to ``VAL 2`` right after the real build (a hook point
    before clmagic's build ends). It stays ``VAL 2`` after the block."""
    monkeypatch.chdir(tmp_path)
    header = tmp_path / "params.h"
    header.write_text("#define VAL 1\n")
    real_build = cl._cl._Program._build

    def build_then_edit(self, *args, **kwargs):
        real_build(self, *args, **kwargs)
        header.write_text("#define VAL 2\n")

    monkeypatch.setattr(cl._cl._Program, "_build", build_then_edit)
    try:
        yield
    finally:
        monkeypatch.setattr(cl._cl._Program, "_build", real_build)


def test_a_header_edited_during_the_build_is_not_saved(tmp_path, monkeypatch, settings):
    """The driver builds with the header as it was; the header changes before the build ends
    (a hook point after the real driver build): nothing is saved, in memory or on disk."""
    c = Compiler(settings)
    with _header_edited_during_the_build(tmp_path, monkeypatch):
        r = c.build(f"#include {P}" + K)
    assert value(r) == 1 and not r.saved
    assert "params.h" in r.note and "changed during the build" in r.note
    assert not list((tmp_path / "cache").rglob("*.clbin"))
    r = c.build(f"#include {P}" + K)  # the same compiler: nothing stale in memory either
    assert r.outcome == Outcome.MISS and value(r) == 2
    assert Compiler(settings).build(f"#include {P}" + K).outcome == Outcome.HIT


def test_a_header_appearing_during_the_build_is_not_saved(tmp_path, monkeypatch, settings):
    """A file created in an earlier search slot while the driver builds changes the key too."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "params.h").write_text("#define VAL 1\n")
    real_build = cl._cl._Program._build

    def build_then_shadow(self, *args, **kwargs):
        real_build(self, *args, **kwargs)
        (tmp_path / "params.h").write_text("#define VAL 3\n")

    monkeypatch.setattr(cl._cl._Program, "_build", build_then_shadow)
    r = Compiler(settings).build(f"#include {P}" + K, "-Iinc")
    monkeypatch.setattr(cl._cl._Program, "_build", real_build)
    assert value(r) == 1 and not r.saved and "changed during the build" in r.note
    assert value(Compiler(settings).build(f"#include {P}" + K, "-Iinc")) == 3


@pytest.mark.slow  # over 12 s: the default run stays under 5 min on 2 cores
def test_a_header_rewritten_by_a_thread_while_the_driver_builds(tmp_path, monkeypatch,
                                                                  settings):
    """A thread keeps rewriting the header while POCL builds a large source: whatever was saved,
    every later build computes what the header on disk says."""
    monkeypatch.chdir(tmp_path)
    header = tmp_path / "params.h"
    header.write_text("#define VAL 1\n")
    body = "".join(f"__kernel void f{i}(__global float *a) {{ a[{i}] = sin(a[{i}]) * {i}; }}\n"
                   for i in range(100))
    src = f"#include {P}\n" + body + K
    stop = threading.Event()

    def rewrite():
        n = 0
        while not stop.is_set():
            n = n % 5 + 1
            tmp = tmp_path / "params.tmp"
            tmp.write_text(f"#define VAL {n}\n")
            os.replace(tmp, header)
            stop.wait(0.002)

    t = threading.Thread(target=rewrite)
    t.start()
    try:
        results = [Compiler(settings).build(src) for _ in range(2)]
    finally:
        stop.set()
        t.join()
    assert any("changed during the build" in r.note for r in results) or all(
        r.saved for r in results)
    final = int(header.read_text().split()[-1])
    r = Compiler(settings).build(src)
    assert value(r) == final, (r.outcome, r.note)


# -- normalisation keeps the meaning ----------------------------------------------------------

NORMALISE = [
    ("form-feed-in-comment", "a[0] = 1; // c\f a[0] = 2;"),
    ("vertical-tab-in-comment", "a[0] = 1; // c\v a[0] = 2;"),
    ("x1c-in-comment", "a[0] = 1; // c\x1c a[0] = 2;"),
    ("nel-in-comment", "a[0] = 1; // c\x85 a[0] = 2;"),
    ("u2028-in-comment", "a[0] = 1; // c\u2028 a[0] = 2;"),
    ("u2029-in-comment", "a[0] = 1; // c\u2029 a[0] = 2;"),
    ("cr-ends-a-comment", "a[0] = 1; // c\r a[0] = 2;"),
    ("backslash-blanks-splice", "a[0] = 1; // c\\   \n a[0] = 2;"),
    ("backslash-splice", "a[0] = 1; // c\\\n a[0] = 2;"),
    ("trigraph-splice-blanks", "a[0] = 1; // c??/  \n a[0] = 2;"),
    ("crlf", "a[0] = 1;\r\n // c\r\n a[0] = 2;"),
    ("byte-order-mark", "a[0] = 1; // c\n a[0] = 2;"),
    ("nbsp-at-line-end", "a[0] = 1; // c\n a[0] = 2;\u00a0"),
]


def _pyopencl_value(device_spec: str, src: str) -> int:
    from clmagic import resolve_device

    dev = resolve_device(device_spec)[1]
    ctx = cl.Context([dev])
    prg = cl.Program(ctx, src).build(cache_dir=False)
    a = np.zeros(1, np.int32)
    buf = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, a.nbytes)
    q = cl.CommandQueue(ctx)
    prg.k(q, (1,), None, buf)
    cl.enqueue_copy(q, a, buf)
    return int(a[0])


@pytest.mark.parametrize("body", [b for _, b in NORMALISE], ids=[i for i, _ in NORMALISE])
def test_normalisation_keeps_the_meaning(body, compiler, pocl):
    """clmagic computes what pyopencl computes from the same text; sources that compute
    different values never share a key."""
    src = "\ufeff" if body == NORMALISE[-2][1] else ""
    src += "__kernel void k(__global int *a) {\n" + body + "\n}\n"
    if "\u00a0" in body:  # a no-break space is not C whitespace: both must refuse it alike
        with pytest.raises(cl.Error):  # the driver's build fails
            _pyopencl_value(pocl, src)
        with pytest.raises(BuildError):  # the same failure, said by clmagic
            compiler.build(src)
        return
    want = _pyopencl_value(pocl, src)
    r = compiler.build(src)
    assert value(r) == want
    plain = {v: compiler.build("__kernel void k(__global int *a) {\n" + f"a[0] = {v};\n}}\n")
             for v in (1, 2)}
    assert r.key != plain[3 - want].key  # never the key of the other meaning


# -- build options as written -----------------------------------------------------------------

OPTION_VALUES = [("-DVAL=(2*3)", 6), ("-DVAL=1|6", 7), ("-DVAL=(1<<3)", 8), ("-DVAL=~0", -1),
                 ("-DVAL=!0", 1), ("-DVAL=6&3", 2), ("-DVAL=1?4:5", 4), ("-DVAL=(7>3)", 1),
                 ("-DVAL='a'", 97), ("-DVAL=(9)*(2)", 18)]


@pytest.mark.parametrize("driver", ["pocl", "oclgrind"])
def test_options_with_shell_characters_reach_the_driver_as_written(driver, tmp_path, pocl,
                                                                   oclgrind):
    device = pocl if driver == "pocl" else oclgrind
    c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "c"),
                                    "CLMAGIC_DEVICE": device}))
    keys = set()
    for written, want in OPTION_VALUES:
        if "'" in written:
            written = '"' + written + '"'  # a shell-quoted token: pyopencl unquotes it too
        r = c.build(K, written)
        assert r.options.effective == written.strip('"').replace('"', "")
        assert value(r) == want, written
        keys.add(r.key)
    assert len(keys) == len(OPTION_VALUES)


def test_effective_options_are_what_pyopencl_sends():
    import shlex

    for written in ["-DSCALE=(2*3)", "-DA=$x -DB=`y`", "-DM='a b'", "-cl-mad-enable  -DN=1"]:
        assert parse_options(written).effective == " ".join(shlex.split(written))


def test_find_headers_follows_forced_includes_recursively(tmp_path):
    (tmp_path / "f.h").write_text('#include "g.h"\n')
    (tmp_path / "g.h").write_text("#define G 1\n")
    names = [n for n, _ in find_headers(K, cwd=str(tmp_path), options="-include f.h")]
    assert names == ['"f.h" @.', '"g.h" @.']


def test_every_directive_that_names_a_file_is_scanned():
    """Forms the drivers here do not build (``#embed`` is C23) are covered all the same;
    ``#line`` names no file it reads; ``defined(__has_include)`` is no computed include."""
    from clmagic.key.includes import includes_of

    text = ('#embed "e.bin" limit(4)\n#if __has_embed("f.bin") && __has_include_next(<g.h>)\n'
            '#endif\n#line 7 "not-read.h"\n#if defined(__has_include)\n#endif\n'
            '%:  include_next <h.h>\n')
    assert includes_of(text) == ['"e.bin"', "<h.h>", '"f.bin"', "<g.h>"]
    for computed in ("#include HDR\n", "#if __has_include(HDR)\n#endif\n", "#import\n"):
        with pytest.raises(Unkeyable, match="computed include"):
            includes_of(computed)


def test_a_header_edited_during_a_program_build_is_not_saved(tmp_path, monkeypatch, settings):
    """The same check on ``Compiler.build_program`` (the pyopencl hook's path)."""
    c = Compiler(settings)
    ctx = c.build(K.replace("VAL", "0")).context
    with _header_edited_during_the_build(tmp_path, monkeypatch):
        built = c.build_program(ctx, f"#include {P}" + K)
    (rec,) = built.records
    assert not rec.saved_to_store and "changed during the build" in rec.note
    again = Compiler(settings).build_program(ctx, f"#include {P}" + K)
    assert again.outcome == Outcome.MISS


def test_the_quick_include_check_agrees_with_the_full_scan():
    """The substring check that lets most sources skip the scan never hides a name: on every
    case above, 3000 random sources built from the pieces that hide a directive (splices of
    every kind, trigraphs, comments, digraphs, ``__has_include``) and 3000 directives with such
    pieces between any two characters, whenever the full scan finds a name or a computed include,
    the quick check says the source may name one."""
    import random

    from clmagic.key.includes import _names_nothing, _scan_all

    pieces = ["#", "%:", "??=", "inc", "lude", "include", "_next", "import", "emb", "ed",
              "__has_", "(", ")", '"p.h"', "<p.h>", "\\\n", "\\ \n", "\\\r\n", "??/\n", "??/",
              "/*", "*/", "//", "\n", " ", "\t", "H", "#define H <p.h>\n", "x", " * included ",
              "a = embed;", "\r", "\f", "??"]
    rng = random.Random(7)
    hazards = ["\\\n", "\\ \n", "\\\r\n", "??/\n", "/**/", "/*\n*/", " ", "\n"]

    def directive() -> str:  # a directive with hazards between any two characters
        word = rng.choice(["include", "include_next", "import", "embed"])
        text = rng.choice(["#", "%:", "??=", " # "]) + word + rng.choice([' "p.h"', " <p.h>", " H"])
        if rng.random() < 0.3:
            text = f"#if {rng.choice(['__has_include', '__has_embed'])}(<p.h>)\n#endif"
        for _ in range(rng.randint(0, 3)):
            at = rng.randrange(len(text) + 1)
            text = text[:at] + rng.choice(hazards) + text[at:]
        return text + "\n"

    texts = [c.src for c in CASES] + [
        "".join(rng.choice(pieces) for _ in range(rng.randint(1, 14))) for _ in range(3000)] + [
        directive() for _ in range(3000)]
    found = skipped = 0
    for text in texts:
        full = _scan_all(text)
        if full.spellings or full.computed:
            found += 1
            assert not _names_nothing(text), text
        skipped += _names_nothing(text) and any(w in text for w in ("include", "embed"))
    assert found > 1000 and skipped > 300  # both sides of the check are exercised
