"""The code key (clmagic.key.code): equal only where comments and spacing are all that differ,
absent wherever they could reach the program. Checked against the real preprocessor (GCC's
cpp) and the real compiler (POCL) as well as by itself."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pyopencl as cl
import pytest

from clmagic.key.code import _TOKEN, code_form, header_refusal, option_refusal
from clmagic.key.digest import cache_key, code_key
from clmagic.opencl.devices import DeviceInfo

DEV = DeviceInfo(0, 0, "Some platform", "dev", "driver 1", "OpenCL C 1.2", "OpenCL 3.0", "CPU",
                 "f" * 16)


def form(src: str) -> str | None:
    return code_form(src)[0]


def key(src: str, options: str = "", headers=()) -> str | None:
    return code_key(src, options, DEV, headers).key


# -- the same code ---------------------------------------------------------------------------

SAME = [
    ("__kernel void k(__global int *a) { a[0] = 1; }\n",
     "__kernel void k(__global int *a)\n{\n    // set it\n    a[0] = 1;   /* one */\n}\n"),
    ("int f(int x){return x+1;}\n", "int  f ( int x )\t{ return x + 1 ; }\n"),
    ("int a = b - -c;\n", "int a = b -   -c;  // not a decrement\n"),
    ("float x = y . z;\n", "float x = y.z;\n"),
    ("#define N 4\nint a[N];\n", "#define N 4   // four\n\n\nint a[N];\n"),
    ("#define N 4\nint a[N];\n", "  #  define N 4\nint a[N];\n"),
    ("#define F(x) ((x)+1)\n", "#define F(x) ((x)+1) /* plus one */\n"),
    ("#define F(x) ((x) + 1)\n", "#define F(x) ((x)/**/+ 1)\n"),  # a comment is one space
    ("#define F(x) ((x) + 1)\n", "#define F(x) ((x)   +\t1)\n"),
    ("x /* a\n b */ y\n", "x y\n"),  # a block comment's line breaks vanish
    ("#define X 1 + 2\n", "#define X 1 /* spans\n lines */ + 2\n"),
    ("int y = F(a);\n", "int y = F (a);\n"),  # a macro call may have space before (
    ('char *s = "a  b";\n', 'char *s =\n    "a  b"; // string kept\n'),
    ("char c = '/';\n", "char c = '/'; /* ' */\n"),
    ("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\nint a;\n",
     "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n\n// doubles\nint   a;\n"),
    ("#if 0\nold code here\n#endif\nint a;\n", "#if 0\nold  code /* x */ here\n\n#endif\nint a;\n"),
    ("#if 0\n#if X\n#endif\n#endif\n", "#if 0\n  // nested\n#if X\n#endif\n#endif\n"),
    ("#include <a.h>\nint a;\n", "#include <a.h>\n\n\nint a;\n"),
    ("a ## b\n", "a ##  b\n"),  # outside a #define ## is an ordinary (stray) token
]


@pytest.mark.parametrize("a,b", SAME)
def test_comment_and_spacing_changes_share_a_form(a, b):
    assert form(a) is not None
    assert form(a) == form(b), (a, b)
    assert key(a) == key(b) is not None


# -- different code --------------------------------------------------------------------------

DIFFERENT = [
    ("int a = b - -c;\n", "int a = b--c;\n"),
    ("int a = b + +c;\n", "int a = b++c;\n"),
    ("int a = b / /*x*/ c;\n", "int a = b // c;\n"),
    ("float a = x . 1;\n", "float a = x .1;\n"),
    ("float a = 1 . x;\n", "float a = 1. x;\n"),
    ("int a = b & &c;\n", "int a = b && c;\n"),
    ("int a = b < <c;\n", "int a = b << c;\n"),
    ("int a = b > = c;\n", "int a = b >= c;\n"),
    ("int a = p - > x;\n", "int a = p -> x;\n"),
    ("x = . . .;\n", "x = ...;\n"),
    ("int L = 1; char *s = L \"x\";\n", "int L = 1; char *s = L\"x\";\n"),
    ("int u8 = 1; x = u8 'a';\n", "int u8 = 1; x = u8'a';\n"),
    ("int a = 1e + 5;\n", "int a = 1e+5;\n"),
    ("int a = 0x1 p;\n", "int a = 0x1p;\n"),
    ("int ab;\n", "int a b;\n"),
    ('char *s = "a b";\n', 'char *s = "a  b";\n'),
    ('char *s = "a/*b*/";\n', 'char *s = "a";\n'),
    ("char c = ' ';\n", "char c = '\t';\n"),
    ("#define F(x) (x)\nint a = F(1);\n", "#define F (x) (x)\nint a = F(1);\n"),
    ("#define F(x) (x)\n", "#define F/**/(x) (x)\n"),
    ("#define X a+b\n", "#define X a + b\n"),  # whitespace separation is part of a macro
    ("#define X 1\nint a = X;\n", "#define X 1 int a = X;\n"),
    ("#define X 1\n", "#define X 2\n"),
    ("#if 0\nint a;\n#endif\n", "#if 1\nint a;\n#endif\n"),
    ("#if 0\n#if X\n#endif\n#endif\n", "#if 0\n#if Y\n#endif\n#endif\n"),
    ("#include <a.h>\n", "#include <b.h>\n"),
    ("#include <a b.h>\n", "#include <a  b.h>\n"),
    ("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n",
     "#pragma OPENCL EXTENSION cl_khr_fp64 :  enable\n"),  # pragma lines kept byte for byte
    ("#pragma unroll 4\nfor(;;);\n", "#pragma unroll 8\nfor(;;);\n"),
    ("a\n#define X\n", "a #define X\n"),
    ("int a = 1;\n", "int a = 2;\n"),
]


@pytest.mark.parametrize("a,b", DIFFERENT)
def test_different_code_has_different_forms(a, b):
    fa, fb = form(a), form(b)
    assert fa is not None
    assert fa != fb, (a, b)
    if fb is not None:
        assert key(a) != key(b)


def test_the_key_covers_options_device_format_and_headers():
    src = "__kernel void k(__global int *a) { a[0] = 1; }\n"
    header = [('"a.h" @.', b"#define A 1\n")]
    base = code_key(src, "-O2", DEV, header).key
    assert base is not None
    others = [
        code_key(src, "-O3", DEV, header).key,
        code_key(src, "-O2", replace(DEV, platform_version="OpenCL 2.0"), header).key,
        code_key(src, "-O2", replace(DEV, driver_version="driver 2"), header).key,
        code_key(src, "-O2", DEV, [('"a.h" @.', b"#define A 2\n")]).key,
        code_key(src, "-O2", DEV, [('"a.h" @-Iinc', b"#define A 1\n")]).key,
        code_key(src, "-O2", DEV, []).key,
    ]
    assert base not in others and len(set(others)) == len(others)
    # never an exact key, not even of the form itself
    form_bytes = code_form(src)[0].encode()
    assert base not in (cache_key(src.encode(), "-O2", DEV, header),
                        cache_key(form_bytes, "-O2", DEV, header))


# -- where there is no form ------------------------------------------------------------------

REFUSED = [
    ("#define SQ(x) \\\n ((x)*(x))\n", "continuation"),
    ("int a = 1 + \\\n 2;\n", "continuation"),
    ("// note \\\nint a;\n", "continuation"),  # a continued // comment swallows a line
    ('char *s = "a\\\nb";\n', "continuation"),
    ("#define S(x) #x\n", "stringizes"),
    ("#define S(x) # x\n", "stringizes"),
    ("#define HASH #\n", "stringizes"),
    ("#define CAT(a, b) a ## b\n", "pastes"),
    ("#define CAT(a,b) a##b\n", "pastes"),
    ("int a = __LINE__;\n", "__LINE__"),
    ("#define L __LINE__\n", "__LINE__"),
    ("#if __LINE__ > 3\n#endif\n", "__LINE__"),
    ("#if 0\n__LINE__\n#endif\n", "__LINE__"),
    ('constant char *f = __FILE__;\n', "__FILE__"),
    ("int a = __COUNTER__;\n", "__COUNTER__"),
    ("int a = __builtin_LINE();\n", "__builtin_LINE"),
    ("int a = __builtin_COLUMN();\n", "__builtin_COLUMN"),
    ('_Pragma("unroll") for(;;);\n', "_Pragma"),
    ("#if __has_include(<a b.h>)\n#endif\n", "__has_include"),
    ("#line 10\nint a;\n", "#line"),
    ('# 10 "x.cl"\nint a;\n', "#line"),
    ("#pragma clang diagnostic error \"-Wmisleading-indentation\"\n", "#pragma clang"),
    ("#pragma GCC diagnostic push\n", "#pragma GCC"),
    ("#pragma message(\"hi\")\n", "#pragma message"),
    ("#pragma\nint a;\n", "#pragma"),
    ("#include <a.h> // the a header\n", "#include"),
    ("#include <a/*b*/.h>\n", "#include"),
    ('#include "a.h" /* why */\n', "#include"),
    ("#if 0\nit's old\n#endif\n", "unterminated character"),
    ('#if 0\n"open\n#endif\n', "unterminated string"),
    ("int a; /* open\n", "comment is not closed"),
    ("int ??= a;\n", "trigraph"),
    ('char *s = "??/";\n', "trigraph"),
    ("int a<:2:>;\n", "digraph"),
    ("%:define X 1\n", "digraph"),
    ("int caf\u00e9 = 1;\n", "outside literals"),
    ("int a = b \\ c;\n", "outside literals"),
    ("// only a comment\n", "no code"),
    ("x" * (1 << 20) + "\n", "MiB"),
]


@pytest.mark.parametrize("src,why", REFUSED)
def test_no_form_where_spacing_or_position_can_matter(src, why):
    got, reason = code_form(src)
    assert got is None
    assert why.lower() in reason.lower(), reason
    assert key(src) is None


def test_comments_and_literals_with_refused_words_are_fine():
    src = ('// __LINE__ #define S(x) #x \\ caf\u00e9 ?? =\n'
           'constant char *s = "__FILE__ # ## \\\\ caf\u00e9 /* */ //";\n'
           "constant char c = '#';\n/* #pragma clang diagnostic error */\n")
    assert form(src) is not None


@pytest.mark.parametrize("options,why", [
    ("-g", "debug"), ("-O2 -g", "debug"), ("-gline-tables-only", "debug"),
    ("-nv-line-info", "debug"), ("-lineinfo", "debug"), ("-Werror", "Werror"),
    ("-Werror=misleading-indentation", "Werror"),
    ("-cl-std=CLC++", "C++"), ("-cl-std=clc++2021", "C++"), ("-DS(x)=#x", "#"),
    ("-DL=__LINE__", "position"),
])
def test_options_that_make_lines_or_spacing_matter_rule_rekeying_out(options, why):
    assert why.lower() in option_refusal(options).lower()
    got = code_key("__kernel void k(){}\n", options, DEV)
    assert got.key is None and got.reason


@pytest.mark.parametrize("options", ["", "-O2", "-cl-fast-relaxed-math -DN=4", "-I inc -w",
                                     "-DDEBUG=0", "-Idebug",
                                     "-cl-std=CL2.0", "-DGROUP=64 -cl-mad-enable"])
def test_ordinary_options_allow_rekeying(options):
    assert option_refusal(options) == ""


@pytest.mark.parametrize("header,why", [
    (b"#define STR(x) #x\n", "stringizes"),
    (b"#define HERE __LINE__\n", "__LINE__"),
    (b"#pragma clang diagnostic error \"-Wall\"\n", "#pragma clang"),
    (b"\xff\xfe#define A\n", "UTF-8"),
    (b"#define WHERE __FILE__\n", "__FILE__"),
])
def test_headers_that_could_expose_the_includers_spacing_rule_rekeying_out(header, why):
    assert why.lower() in header_refusal(header).lower()
    got = code_key("#include \"h.h\"\nint a;\n", "", DEV, [('"h.h" @.', header)])
    assert got.key is None and "h.h" in got.reason


@pytest.mark.parametrize("header", [
    b"#define CAT(a, b) a ## b\n#define TYPED(t) CAT(t, _fn)\n",
    b"#define SQ(x) \\\n  ((x) * (x))\r\n",
    b"#include <other.h> // why\n#line 3\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n",
    b"",
])
def test_headers_whose_own_text_is_harmless_allow_rekeying(header):
    assert header_refusal(header) == ""
    got = code_key("#include \"h.h\"\nint a;\n", "", DEV, [('"h.h" @.', header)])
    assert got.key is not None


# -- random sources and random edits ---------------------------------------------------------

_VOCAB = ["a", "b", "x1", "L", "u8", "e", "p", "1", "0x1", "1e", "1.5", ".", "..", "-", "+", "/",
          "*", "<", ">", "=", "&", "|", "%", ":", "!", "^", "?", "(", ")", "[", "]", "{", "}",
          ";", ",", '"s  t"', "'c'", "'/'", '"//"', '"/*"', "~", "->", "++", "--", "<<", "F",
          "G", "N", "F(", "#x"]


def _random_code(rng: random.Random, n: int) -> str:
    """A line-oriented random source: code lines of tricky tokens and a few directives."""
    lines = []
    for _ in range(n):
        r = rng.random()
        if r < 0.12:
            name = rng.choice(["F", "G", "N"])
            params = rng.choice(["", "(x)", " (x)", "(x, y)"])
            body = "".join(rng.choice(_VOCAB[:30]) + rng.choice(["", " "]) for _ in range(4))
            lines.append(f"#define {name}{params} {body}".rstrip())
        elif r < 0.18:
            lines.append(rng.choice(["#if 0", "#ifdef N", "#else", "#endif", "#undef F"]))
        else:
            toks = [rng.choice(_VOCAB[:-1]) for _ in range(rng.randint(1, 12))]
            lines.append("".join(t + rng.choice(["", " ", "  "]) for t in toks).rstrip())
    return "\n".join(lines) + "\n"


def _edit(rng: random.Random, src: str) -> str:
    """Comment and spacing changes only: widen existing spacing anywhere, and at token
    boundaries of code lines add spaces, line breaks or comments; append comments to lines.
    A comment always comes after a space (``/`` then ``/* c */`` would be ``//* c */``)."""
    out = []
    for line in src.split("\n"):
        directive = line.lstrip().startswith("#")
        verbatim = re.match(r"\s*#\s*(include|pragma)", line)
        pieces, pos = [], 0
        for m in _TOKEN.finditer(line):
            if m.lastgroup == "ws" and not verbatim:
                pieces.append(rng.choice([m.group(), " /* c */ ", "\t", "   ", " /**/"]))
                continue
            if not directive and pos and rng.random() < 0.3:
                pieces.append(rng.choice([" ", "\n", "\n\n  ", " /* z */", " // c\n"]))
            pieces.append(m.group())
            pos += 1
        text = "".join(pieces)
        in_comment = any(m.lastgroup == "lc" for m in _TOKEN.finditer(text.split("\n")[-1]))
        if rng.random() < 0.2 and not re.match(r"\s*#\s*include", text) and not in_comment:
            text += rng.choice([" // tail", " /* tail\n over lines */", "\t"])
        out.append(text)
        if rng.random() < 0.1:
            out.append(rng.choice(["", "   ", "// a comment line", "/* block */"]))
    return "\n".join(out)


def _tokens(src: str) -> list[str]:
    return [m.group() for m in _TOKEN.finditer(src.replace("\n", " "))
            if m.lastgroup not in ("ws", "nl", "lc", "bc")]


def test_random_sources_and_random_spacing_edits():
    rng = random.Random(14)
    formed = 0
    for _ in range(600):
        src = _random_code(rng, rng.randint(1, 8))
        base, _why = code_form(src)
        if base is None:
            continue
        formed += 1
        for _ in range(4):
            edited = _edit(rng, src)
            got, why = code_form(edited)
            if got is None:
                # only a refusal a comment/spacing edit may cause: none of the above may
                pytest.fail(f"edit refused ({why}):\n{src!r}\n{edited!r}")
            assert got == base, (src, edited)
    assert formed > 300


def test_random_sources_with_one_token_changed_differ():
    rng = random.Random(41)
    checked = 0
    for _ in range(600):
        src = _random_code(rng, rng.randint(1, 6))
        base = form(src)
        if base is None:
            continue
        toks = list(_TOKEN.finditer(src))
        sig = [m for m in toks if m.lastgroup not in ("ws", "nl", "lc", "bc")]
        victim = rng.choice(sig)
        new = rng.choice(["q", "7", "+", ";", '"z"'])
        changed = src[:victim.start()] + new + src[victim.end():]
        if _tokens(changed) == _tokens(src):
            continue
        got = form(changed)
        assert got != base, (src, changed)
        checked += 1
        # and joining two tokens that had space between them changes the form where they merge
        gaps = [m for m in toks if m.lastgroup == "ws"]
        if gaps:
            g = rng.choice(gaps)
            joined = src[:g.start()] + src[g.end():]
            if _tokens(joined) != _tokens(src) or (
                    src[:g.start()].split("\n")[-1].lstrip().startswith("#")):
                assert form(joined) != base, (src, joined)
    assert checked > 300


# -- against the real preprocessor and the real compiler -------------------------------------

CPP = shutil.which("cpp")


def _preprocessed(src: str) -> list[str]:
    out = subprocess.run([CPP, "-P", "-undef", "-nostdinc", "-std=c99", "-"], input=src,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return _tokens(out.stdout)


MACRO_SOURCES = [
    "#define F(x) ((x) * 2)\n#define G (x)\nint x = 3;\nint a = F(x) + F (1);\nint b = G;\n",
    "#define N 4\n#if N > 3\nint big = N;\n#else\nint small = N;\n#endif\n#undef N\nint N;\n",
    "#if 0\nthis is old code, not compiled\n#if 1\nstill not\n#endif\n#endif\nint kept;\n",
    "#define MAX(a, b) ((a) > (b) ? (a) : (b))\nint m = MAX(1, - -2) - MAX(3, 4);\n",
    "#define EMPTY\n#define ID(x) x\nint EMPTY y = ID(5) ID(+) ID(+) 1;\n",
]


@pytest.mark.skipif(CPP is None, reason="GCC's cpp is not installed")
@pytest.mark.parametrize("src", MACRO_SOURCES)
def test_same_form_means_same_preprocessor_output(src):
    rng = random.Random(hash(src) & 0xFFFF)
    expected = _preprocessed(src)
    assert _preprocessed(code_form(src)[0]) == expected  # the form itself preprocesses alike
    for _ in range(6):
        edited = _edit(rng, src)
        assert form(edited) == form(src)
        assert _preprocessed(edited) == expected, edited


@pytest.mark.skipif(CPP is None, reason="GCC's cpp is not installed")
def test_random_sources_preprocess_alike_after_spacing_edits():
    """Random sources with macros (object- and function-like, invoked) and conditionals: the
    form and a spacing edit preprocess to the same tokens as the source, per GCC's cpp."""
    rng = random.Random(1414)
    compared = 0
    while compared < 80:
        src = _random_code(rng, rng.randint(2, 10))
        if form(src) is None:
            continue
        out = subprocess.run([CPP, "-P", "-undef", "-nostdinc", "-std=c99", "-"], input=src,
                             capture_output=True, text=True, timeout=30)
        if out.returncode:  # unbalanced #if, a bad macro call: nothing to compare
            continue
        expected = _tokens(out.stdout)
        assert _preprocessed(form(src)) == expected, src
        edited = _edit(rng, src)
        assert form(edited) == form(src)
        assert _preprocessed(edited) == expected, (src, edited)
        compared += 1


@pytest.mark.skipif(CPP is None, reason="GCC's cpp is not installed")
@pytest.mark.parametrize("a,b", [
    ("#define F(x) (x)\nint a = F(1);\n", "#define F (x) (x)\nint a = F(1);\n"),
    ("int a = b - -c;\n", "int a = b--c;\n"),
    ("#if 0\nint a;\n#endif\n", "#if 1\nint a;\n#endif\n"),
])
def test_different_form_where_the_preprocessor_output_differs(a, b):
    assert _preprocessed(a) != _preprocessed(b)
    assert form(a) != form(b)


KERNELS = {
    "axpb": ("#define SCALE(v) ((v) * 3.0f)\n#pragma OPENCL EXTENSION cl_khr_byte_addressable_store"
             " : enable\n__kernel void k(__global float *y)\n{\n  int i = get_global_id(0);\n"
             "  float t = i - -1.5f;\n  y[i] = SCALE(t) + 0.5f / 2;\n}\n"),
    "chars": ("__kernel void k(__global float *y)\n{\n  int i = get_global_id(0);\n"
              "  constant char *s = \"a /* b */  c\";\n  char c = '/';\n"
              "  y[i] = s[i % 11] + (c == '/' ? 1 : 2);\n}\n"),
    "if0": ("#if 0\nold version: y[i] = 0;\n#endif\n#define N 4\n__kernel void k(__global float *y)"
            "\n{\n  int i = get_global_id(0);\n  int j = i; j++; j += + +j;\n"
            "  y[i] = (float)(j % N) + (float)i / N;\n}\n"),
    "loop": ("__kernel void k(__global float *y)\n{\n  int i = get_global_id(0);\n"
             "  float acc = 0;\n#pragma unroll 2\n"
             "  for (int j = 0; j < i; j++) acc += j * 0.25f;\n  y[i] = acc;\n}\n"),
}


CHANGES = {"axpb": ("0.5f / 2", "0.5f / 4"), "chars": ('*/  c"', '*/ c"'),
           "if0": ("#define N 4", "#define N 3"), "loop": ("j * 0.25f", "j * 0.5f")}


def _run(ctx, queue, src: str) -> np.ndarray:
    prg = cl.Program(ctx, src).build()
    y = np.zeros(16, np.float32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=y)
    prg.k(queue, y.shape, None, buf)
    cl.enqueue_copy(queue, y, buf)
    return y


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_equal_code_keys_build_programs_that_compute_the_same(name, pocl):
    import clmagic

    info, dev = clmagic.resolve_device(pocl)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    src = KERNELS[name]
    base = code_key(src, "", info).key
    assert base is not None
    expected = _run(ctx, queue, src)
    rng = random.Random(name)
    for _ in range(3):
        edited = _edit(rng, src)
        assert code_key(edited, "", info).key == base
        np.testing.assert_array_equal(_run(ctx, queue, edited), expected)
    # a change of meaning: the key differs and so does the result
    old, new = CHANGES[name]
    changed = src.replace(old, new)
    assert changed != src
    assert code_key(changed, "", info).key != base
    assert not np.array_equal(_run(ctx, queue, changed), expected)
