"""Where clmagic's idea of the source is not the compiler's (issue 22, classes 1 and 2).

Lexing the compiler's way: clang ends a line at ``\\n``, ``\\r\\n`` and a lone ``\\r``, splices
a backslash (or ``??/``) followed by blanks and any line end, pastes tokens (``a##b``) and knows
digraphs and trigraphs. Many generated forms of each, every one checked against POCL itself: a
plain MISS computes what pyopencl computes from the text as written (through ``clmagic.build``
and through the hook), and whenever the code key says "same code" the two programs compute the
same. Sources that read the clock (``__TIME__``, ``__DATE__``, ``__TIMESTAMP__``, in any of the
ways the preprocessor can find them) are built every time, never stored, and say why.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import clmagic
from clmagic import Compiler, Outcome
from clmagic.key.clock import clock_reason, rebuilt_alike, spells
from clmagic.key.code import code_form, header_refusal
from clmagic.key.digest import code_key
from clmagic.key.source import check_source, normalise_source, normalising_keeps_meaning
from clmagic.process import hook

HEAD = "__kernel void k(__global int *a)\n{\n    a[0] = 0;\n"
TAIL = "    a[1] = __LINE__;\n}\n"

#: what may follow ``// c`` on a line: a splice (or none), blanks, one or two line ends
SPLICES = ["", "\\", "??/", "\\\\"]
BLANKS = ["", " ", "\t", "  ", "\f", " \v", "\t "]
ENDS = ["\n", "\r", "\r\n", "\n\r", "\r\r\n", "\r\n\r"]


def _hazard(rng: random.Random) -> str:
    text = rng.choice(SPLICES) + rng.choice(BLANKS) + rng.choice(ENDS)
    if rng.random() < 0.4:
        text += rng.choice(BLANKS) + rng.choice(ENDS)
    return text


def _bits(hazards: list[str], values: list[int] | None = None, line: bool = True) -> str:
    """A kernel setting bit ``i`` of ``a[0]`` on a line that follows ``// c`` + hazard ``i``:
    which bits are set says which lines the compiler read as code; ``a[1]`` is a line number
    (with ``line``; else 0: a source with ``__LINE__`` has no code key)."""
    values = values or [1 << i for i in range(len(hazards))]
    lines = "".join(f"    // c{h} a[0] |= {v};\n" for h, v in zip(hazards, values, strict=True))
    return HEAD + lines + (TAIL if line else "    a[1] = 0;\n}\n")


@pytest.fixture(scope="module")
def device(pocl):
    info, dev = clmagic.resolve_device(pocl)
    ctx = cl.Context([dev])
    return info, ctx, cl.CommandQueue(ctx)


def _run(ctx, queue, kernel) -> tuple[int, int]:
    a = np.zeros(2, np.int32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    kernel(queue, (1,), None, buf)
    cl.enqueue_copy(queue, a, buf)
    return int(a[0]), int(a[1])


def _pyopencl(device, src: str, options: str = "") -> tuple[int, int] | str:
    """What POCL computes from ``src`` exactly as written (pyopencl, no cache), or "error"."""
    _info, ctx, queue = device
    try:
        prg = cl.Program(ctx, src).build(options, cache_dir=False)
    except cl.RuntimeError:
        return "error"
    return _run(ctx, queue, prg.k)


def _clmagic(compiler: Compiler, src: str, options: str = "") -> tuple[tuple[int, int] | str, str]:
    try:
        r = compiler.build(src, options)
    except clmagic.BuildError:
        return "error", "FAILED"
    return _run(r.context, r.queue, r.kernels["k"]), r.outcome


# -- normalisation never changes what the compiler sees --------------------------------------

def _clang_lines(text: str) -> list[str]:
    """The logical lines clang reads (a model of its phases 1–2: ``??/`` is a backslash; a
    backslash, blanks, then ``\\n``, ``\\r``, ``\\r\\n`` or ``\\n\\r`` is a splice; a line
    ends at ``\\n``, ``\\r\\n`` or ``\\r``), each without trailing blanks (the preprocessor skips
    them), a newline at the very end not counted."""
    text = text.replace("??/", "\\")
    out: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            j = i + 1
            while j < len(text) and text[j] in " \t\f\v":
                j += 1
            if j < len(text) and text[j] in "\r\n":
                k = j + 1
                if k < len(text) and text[k] in "\r\n" and text[k] != text[j]:
                    k += 1
                i = k
                continue
        if c in "\r\n":
            out.append("".join(cur).rstrip(" \t\f\v"))
            cur = []
            i += 2 if text[i:i + 2] == "\r\n" else 1
            continue
        cur.append(c)
        i += 1
    if cur or not out:
        out.append("".join(cur).rstrip(" \t\f\v"))
    return out


def test_normalisation_is_used_only_where_clang_reads_the_same_lines():
    """50,000 random texts of splices, blanks and every line end: where clmagic normalises,
    clang's logical lines (their text and their count: line numbers) are those of the text as
    written; where they differ, clmagic compiles the text as written."""
    rng = random.Random(2201)
    pieces = ["a", "b;", " ", "\t", "\f", "\v", "\\", "??/", "\r", "\n", "\r\n", "//", "\"s\""]
    differ = normalised = 0
    for _ in range(50_000):
        s = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        text, src = check_source(s) if s.strip() else (s, b"")
        same = _clang_lines(normalise_source(s)) == _clang_lines(s)
        differ += not same
        if normalising_keeps_meaning(s):
            assert same, repr(s)
            normalised += text != s
        else:
            assert not s.strip() or text == s, repr(s)  # as written, for the key and the driver
    assert differ > 1000 and normalised > 5000  # both sides are exercised


@pytest.mark.parametrize("seed", range(4))
def test_a_plain_miss_runs_the_program_as_written(seed, device, settings, compiler):
    """Generated kernels whose lines are code or comment depending on how a line ends: what
    clmagic.build, a HIT of its entry and the hook compute is what POCL computes from the text
    as written; the normalised reading computes something else for some of them."""
    rng = random.Random(seed)
    hazards = [_hazard(rng) for _ in range(14)]
    if seed == 0:  # the example: \\ \r blanks \n
        hazards[:3] = ["\\\r  \n", "\\ \r \n", "\r\r\n"]
    src = _bits(hazards)
    want = _pyopencl(device, src)
    assert want != "error"
    got, outcome = _clmagic(compiler, src)
    assert (got, outcome) == (want, Outcome.MISS)
    compiler.flush()
    assert _clmagic(Compiler(settings), src) == (want, Outcome.HIT)
    with_hook = Compiler(settings, store=None)
    hook.install(with_hook)
    try:
        _info, ctx, queue = device
        assert _run(ctx, queue, cl.Program(ctx, src).build().k) == want
        assert with_hook.history.records[-1].outcome == Outcome.MISS
    finally:
        hook.uninstall()
    if seed == 0:
        assert _pyopencl(device, normalise_source(src)) != want  # the reading avoided


def test_oclgrind_too_runs_the_text_as_written_and_bypasses_the_clock(oclgrind, tmp_path):
    """The second driver: the same generated kernel as written (the issue's example among its
    lines) and a clock source, through clmagic.build."""
    from clmagic import Settings

    info, dev = clmagic.resolve_device(oclgrind)
    ctx = cl.Context([dev])
    grind = (info, ctx, cl.CommandQueue(ctx))
    c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(tmp_path / "c"),
                                    "CLMAGIC_DEVICE": oclgrind}))
    rng = random.Random(5)
    src = _bits(["\\\r  \n", "\r\r\n", *(_hazard(rng) for _ in range(8))])
    want = _pyopencl(grind, src)
    assert want != "error" and _clmagic(c, src) == (want, Outcome.MISS)
    r = c.build(READ % "__TI\\\nME__")
    assert r.outcome == Outcome.BYPASS and "reads the clock (__TIME__)" in r.note


@pytest.mark.parametrize("src,options", [
    (HEAD + TAIL + "\\", ""),  # a stray backslash; with a newline after it, a splice
    (HEAD + TAIL + "??/", ""),
    (HEAD + TAIL + "\\  ", ""),
])
def test_the_end_of_the_text_is_kept_as_written(src, options, device, compiler):
    assert check_source(src, options)[0] == src
    assert _pyopencl(device, src, options) == "error"
    with pytest.raises(clmagic.BuildError):
        compiler.build(src, options)
    assert _pyopencl(device, normalise_source(src), options) != "error"  # the reading avoided


def test_options_that_make_a_missing_newline_an_error_keep_the_text_as_written():
    src = HEAD + TAIL.rstrip("\n")
    assert check_source(src)[0] == src + "\n"
    for options in ("-pedantic-errors", "-Werror -Wnewline-eof", "-Weverything -Werror"):
        assert check_source(src, options)[0] == src


# -- the code key models clang's lexing or refuses -------------------------------------------

#: forms the code key's lexer could read otherwise than clang, wherever they stand (trigraphs
#: are read before comments), and digraphs, which are tokens only outside comments and literals
UNMODELLED = ["\r", "\\\r", "\\ \n", "\\\t\n", "\\\f\n", "\\\v\r\n", "\\\n\r", "??/\n", "??/",
              "??=", "??(", "??<", "??!", "\\\n"]
DIGRAPHS = ["<:", ":>", "<%", "%>", "%:", "%:%:"]


def test_every_unmodelled_form_is_refused_anywhere():
    """Each unmodelled form, put at random places of kernels the code key otherwise accepts (in
    code, in comments, in strings), takes the code key away."""
    rng = random.Random(22)
    bases = [_bits(["\n"] * 3, line=False), "#define N 4\n" + _bits(["\n", "\n"], line=False),
             "constant char s[] = \"a b\";\n" + _bits(["\n"], line=False)]
    tried = 0
    for base in bases:
        assert code_form(base)[0] is not None
        for form in UNMODELLED + DIGRAPHS:
            places = ";" if form in DIGRAPHS else " \n;/\""
            for _ in range(8):
                at = rng.choice([m for m in range(len(base)) if base[m] in places
                                 and not (form.endswith("\r") and base[m] == "\n")])
                src = base[:at] + form + base[at:]
                text = check_source(src)[0]
                assert code_form(text)[0] is None, repr(src)
                tried += 1
    assert tried == len(bases) * len(UNMODELLED + DIGRAPHS) * 8


#: line ends the code key models (``\r\n`` is normalised away)
SAFE = ["\n", " \n", "\t\n", "\r\n", " \t\r\n", "\n\n", "\n  \n"]


def _pairs(rng: random.Random, count: int) -> list[tuple[str, str]]:
    """Pairs of kernels: random hazards, then a comment, spacing or code edit on a line after a
    hazard (code to clang, a comment to a lexer that reads line ends otherwise)."""
    pairs = []
    for _ in range(count):
        hazards = [_hazard(rng) if rng.random() < 0.15 else rng.choice(SAFE) for _ in range(6)]
        a = _bits(hazards, line=False)
        line = rng.randrange(len(hazards))
        values = [1 << i for i in range(len(hazards))]
        kind = rng.choice(["comment", "spacing", "code"])
        if kind == "code":
            values[line] = 0
            b = _bits(hazards, values, line=False)
        elif kind == "comment":
            b = a.replace(f"// c{hazards[line]}", f"// another comment{hazards[line]}", 1)
        else:
            b = a.replace(f"|= {1 << line};", f"|=  {1 << line} ;", 1)
        pairs.append((a, b))
    return pairs


def test_same_code_key_means_same_program_on_pocl(device):
    """400 generated pairs: whenever the code key says "same code" (of the texts the driver
    receives), POCL computes the same from both; where it computes differently, the code key
    says no. Pairs of each kind are compiled (not only refusals)."""
    info = device[0]
    rng = random.Random(2202)
    same = compared = 0
    for a, b in _pairs(rng, 400):
        ka = code_key(check_source(a)[0], "", info).key
        kb = code_key(check_source(b)[0], "", info).key
        if ka is None or ka != kb:
            continue
        same += 1
        if compared < 30:  # POCL builds are slow: a sample of them
            assert _pyopencl(device, a) == _pyopencl(device, b), (a, b)
            compared += 1
    assert same > 40 and compared == 30


TRAPS = [  # (original, edited): the same tokens to a lexer that reads line ends otherwise
    (_bits(["\r"], line=False), _bits(["\r"], [0], line=False)),  # the example
    (_bits(["\r\r"], line=False), _bits(["\r\r"], [0], line=False)),
    (_bits([" \t\r "], line=False), _bits([" \t\r "], [0], line=False)),
    (_bits(["\n#define V 1 // c\r"], line=False),
     _bits(["\n#define V 1 // c\r"], [0], line=False)),
]


@pytest.mark.parametrize("a,b", TRAPS, ids=["cr", "cr-cr", "blanks-cr", "directive-cr"])
def test_an_edit_past_an_unmodelled_line_end_is_a_plain_miss(a, b, device, compiler):
    want_a, want_b = _pyopencl(device, a), _pyopencl(device, b)
    assert want_a != want_b  # POCL reads the edit as code
    assert _clmagic(compiler, a) == (want_a, Outcome.MISS)
    assert _clmagic(compiler, b) == (want_b, Outcome.MISS)


HEADER_TRAPS = {  # a header whose macros the code key's lexer would not see as clang does
    "cr-hides-a-stringizing-macro": ("// c\r#define S(x) #x\n",
                                     "a[0] = S(x  +  y)[2]; a[1] = 0;",
                                     "a[0] = S(x+y)[2]; a[1] = 0;"),
    "splice-newline-cr": ("#define L __LI\\\n\rNE__\n", "a[0] = L;", "\na[0] = L;"),
    "splice-blanks": ("#define L __LI\\  \nNE__\n", "a[0] = L;", "\na[0] = L;"),
    "paste-spells-__LINE__": ("#define CAT(a, b) a##b\n", "a[0] = CAT(__LI, NE__);",
                              "\na[0] = CAT(__LI, NE__);"),
    "paste-own-pieces": ("#define CAT(a, b) a##b\n#define L CAT(__LI, NE__)\n", "a[0] = L;",
                         "\na[0] = L;"),
}


@pytest.mark.parametrize("name", sorted(HEADER_TRAPS))
def test_a_header_the_lexer_cannot_read_like_clang_stops_rekeying(name, device, compiler,
                                                                  tmp_path, monkeypatch):
    header, body_a, body_b = HEADER_TRAPS[name]
    monkeypatch.chdir(tmp_path)
    Path("h.h").write_bytes(header.encode())
    a, b = (f'#include "h.h"\n__kernel void k(__global int *a)\n{{\n{body}\n}}\n'
            for body in (body_a, body_b))
    key = code_key(a, "", device[0], [('"h.h" @.', header.encode())])
    assert key.key is None and key.reason
    want_a, want_b = _pyopencl(device, a), _pyopencl(device, b)
    assert want_a != want_b
    assert _clmagic(compiler, a) == (want_a, Outcome.MISS)
    assert _clmagic(compiler, b) == (want_b, Outcome.MISS)


def test_a_header_that_pastes_only_harmless_names_keeps_rekeying(device):
    header = b"#define CAT(a, b) a##b\n#define F(x) CAT(f_, x)\n"
    assert header_refusal(header) == ""
    src = '#include "h.h"\nint f_one(void) { return 1; }\n' + _bits(["\n"], line=False)
    assert code_key(src, "", device[0], [('"h.h" @.', header)]).key is not None


def test_spelling_by_pieces():
    assert spells("__LINE__", {"__LI", "NE__"}) and spells("__LINE__", {"_", "LINE"})
    assert not spells("__LINE__", {"__LINE__"}) and not spells("__LINE__", {"__LI", "NE_"})
    assert not spells("__TIME__", {"TIME", "__"} - {"__"})


# -- sources that read the clock -------------------------------------------------------------

READ = ("__kernel void k(__global int *a)\n{\n    constant char *t = %s;\n"
        "    a[0] = t[0]; a[1] = 0;\n}\n")
CLOCKS = {
    "__TIME__": (READ % "__TIME__", "", {}),
    "__DATE__": (READ % "__DATE__", "", {}),
    "__TIMESTAMP__": (READ % "__TIMESTAMP__", "", {}),
    "spliced": (READ % "__TI\\\nME__", "", {}),
    "spliced-blanks": (READ % "__TI\\  \nME__", "", {}),
    "spliced-crlf": (READ % "__DA\\\r\nTE__", "", {}),
    "spliced-cr": (READ % "__DA\\\rTE__", "", {}),
    "trigraph-splice": (READ % "__TI??/\nME__", "", {}),
    "pasted": ("#define CAT(a, b) a##b\n#define X(a, b) CAT(a, b)\n" + READ % "X(__TI, ME__)",
               "", {}),
    "option": (READ % "STAMP", "-DSTAMP=__TIME__", {}),
    "header": ('#include "stamp.h"\n' + READ % "STAMP", "",
               {"stamp.h": "#define STAMP __DATE__\n"}),
    "header-spliced": ('#include "stamp.h"\n' + READ % "STAMP", "",
                       {"stamp.h": "#define STAMP __TIME\\\n__\n"}),
    "header-pastes": ('#include "cat.h"\n' + READ % "CAT(__TI, ME__)", "",
                      {"cat.h": "#define CAT(a, b) a ## b\n"}),
    "two-headers-deep": ('#include "outer.h"\n' + READ % "STAMP", "",
                         {"outer.h": '#include "inner.h"\n',
                          "inner.h": "#define STAMP __TIME__\n"}),
    "in-a-comment": ("// built at __TIME__\n" + READ % '"x"', "", {}),
}


@pytest.mark.parametrize("name", sorted(CLOCKS))
def test_a_source_that_reads_the_clock_is_built_every_time_and_never_stored(
        name, settings, tmp_path, monkeypatch, device):
    src, options, files = CLOCKS[name]
    monkeypatch.chdir(tmp_path)
    for path, text in files.items():
        Path(path).write_text(text)
    c = Compiler(settings)
    if name != "in-a-comment":  # the build reads the clock indeed: a digit or a month's letter
        value = _clmagic(c, src, options)[0]
        assert value != "error" and chr(value[0]).isalnum()
    for compiler in (c, Compiler(settings)):
        r = compiler.build(src, options)
        assert r.outcome == Outcome.BYPASS and not r.saved
        assert "not cached:" in r.note and ("reads the clock" in r.note or "paste" in r.note)
        assert "another build's time" in r.note
        assert compiler.store.get(r.device.fingerprint, r.key) is None
    built = c.build_program(device[1], src, options)  # the hook's path
    assert built.outcome == Outcome.BYPASS and "not cached:" in built.records[0].note


def test_names_that_only_look_like_the_clock_are_cached(compiler):
    for body in ("int TIME = 1, __TIME = 2, DATE_ = 3; a[0] = TIME + __TIME + DATE_;",
                 "a[0] = 1;"):
        src = "#define CAT(a, b) a##b\n__kernel void k(__global int *a) {\n" + body + "\n}\n"
        assert clock_reason(src, "", []) == ""
        assert compiler.build(src).outcome == Outcome.MISS


def test_the_cell_says_why_a_clock_source_is_not_cached(shell):
    from IPython.utils.capture import capture_output

    cell = READ % "__TIME__"
    for _ in range(2):
        with capture_output() as cap:
            shell.run_cell(f"%%clkernel\n{cell}")
        text = cap.outputs[0].data["text/plain"]
        assert "not cached: the source reads the clock (__TIME__)" in text, text


# -- the binary a MISS stores is the user's ----------------------------------------------------

def test_only_builds_of_the_text_alone_go_to_the_readout_helper(monkeypatch):
    plain = _bits(["\n"])
    assert rebuilt_alike(plain, "")
    assert not rebuilt_alike('#if __has_include("later.h")\n#endif\n' + plain, "")
    assert not rebuilt_alike(READ % '__FILE__', "")
    assert not rebuilt_alike(READ % "__TIME__", "")
    assert not rebuilt_alike(plain, "-include x.h")
    monkeypatch.setenv("POCL_EXTRA_BUILD_FLAGS", "-DVAL=1")
    assert not rebuilt_alike(plain, "")


def _file_name(r) -> bytes:
    out = np.zeros(200, np.int8)
    buf = cl.Buffer(r.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=out)
    r.kernels["k"](r.queue, (1,), None, buf)
    cl.enqueue_copy(r.queue, out, buf)
    return bytes(out).rstrip(b"\0")


def test_the_stored_binary_is_the_one_the_user_ran(settings, monkeypatch):
    """POCL compiles a temporary file with a new name at every build: a kernel that reads
    ``__FILE__`` is read out of the user's own program, so a HIT of it prints the name the
    user's program printed (a helper's build would have another)."""
    monkeypatch.setenv("CLMAGIC_READOUT_HELPER", "1")
    src = ("__kernel void k(__global char *a)\n{\n    constant char *f = __FILE__;\n"
           "    for (int i = 0; i < 199 && f[i]; i++) a[i] = f[i];\n}\n")
    c = Compiler(settings)
    r = c.build(src)
    assert r.outcome == Outcome.MISS and r.saved
    ran = _file_name(r)
    hit = Compiler(settings).build(src)
    assert hit.outcome == Outcome.HIT and _file_name(hit) == ran
