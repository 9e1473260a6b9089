"""``clmagic.check_kernel``: one launch of a kernel checked under Oclgrind, in a child process.

The kernel's source and options are those clmagic built it from (:mod:`clmagic.trip.sources`;
for a kernel of another program built from source, the driver's copy of its text), built again
for Oclgrind through the cache; its arguments are copied (:mod:`.launch_args`: the user's
buffers are read, never written); the child (:mod:`.child`) launches it once with Oclgrind's
memory, data-race, uninitialised-value and API checks on, and its log is read back here into
distinct findings (:mod:`.findings`).

How big a launch is reasonable: Oclgrind interprets every instruction of every work-item.
Measured on this project's 2-core test machine with every check on, a kernel of a few dozen
instructions ran at about 50,000 work-items a second (4096 in 0.09 s, 65536 in 1.1 s); a loop
of a thousand iterations per work-item is a thousand times slower. Check the launch that shows
the bug at its smallest size: a launch of over :data:`LARGE` work-items is warned about before
it starts, and any launch is stopped after ``timeout`` seconds (the child killed).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import pyopencl as cl

from clmagic._format import count_of
from clmagic._launch import launch
from clmagic.cache.checker.findings import BufferInfo, CheckReport, findings_of
from clmagic.cache.checker.launch_args import capture, payload
from clmagic.cache.checker.oclgrind_log import SUPPRESSED, messages
from clmagic.errors import BuildError, ClmagicError, OptionsError
from clmagic.process.session import get_compiler
from clmagic.trip.compiler import Compiler
from clmagic.trip.sources import record_of

__all__ = ["check_kernel", "CHECKS", "RATE", "LARGE", "DEFAULT_TIMEOUT_S"]

#: Oclgrind's checks the child turns on (read by Oclgrind when its platform loads)
CHECKS = {"OCLGRIND_DATA_RACES": "1", "OCLGRIND_UNINITIALIZED": "1", "OCLGRIND_CHECK_API": "1"}
#: work-items a second Oclgrind simulated here with every check on (a small kernel)
RATE = 50_000
#: a launch of more work-items than this is warned about first (about 20 s at :data:`RATE`)
LARGE = 1 << 20
#: the longest a check may take, build and launch, before its child is killed
DEFAULT_TIMEOUT_S = 60.0
#: the most of Oclgrind's log read back (its own cap is 1000 messages, about a megabyte)
_LOG_MAX = 16 << 20

Size = int | Sequence[int]


def _size(value: Size | None, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        sizes = (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise OptionsError(f"{what} {value!r}: give a number or a tuple of 1 to 3 numbers") \
            from None
    if not 1 <= len(sizes) <= 3 or min(sizes) < 1:
        raise OptionsError(f"{what} {value!r}: give a number or a tuple of 1 to 3 numbers")
    return sizes


def _program(kernel: cl.Kernel) -> tuple[str, str, int]:
    """(source, options, line offset) the kernel was built from."""
    rec = record_of(kernel)
    if rec is not None and rec.source:
        return rec.source, rec.options, rec.line_offset
    try:
        program = cast("cl.Program", kernel.get_info(cl.kernel_info.PROGRAM))
        source = str(program.get_info(cl.program_info.SOURCE) or "")
        device = cast("list[cl.Device]", program.get_info(cl.program_info.DEVICES))[0]
        options = str(program.get_build_info(  # type: ignore[no-untyped-call]
            device, cl.program_build_info.OPTIONS) or "")
    except (cl.Error, AttributeError, IndexError):
        source, options = "", ""
    if not source.strip():
        raise OptionsError(f"clmagic does not know the source of kernel "
                           f"{kernel.function_name!r}: check a kernel of a %%clkernel cell or "
                           "of clmagic.build(...), whose program is still alive")
    return source, options, 0


def _env(compiler: Compiler, log: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCLGRIND_")}
    cache = compiler.settings.cache
    env.update(CHECKS, OCLGRIND_LOG=str(log), CLMAGIC_CACHE_DIR=cache if cache else "off")
    env.pop("CLMAGIC_DEVICE", None)
    return env


def _answers(out: bytes) -> list[dict[str, Any]]:
    found = []
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            found.append(obj)
    return found


def _run_child(data: bytes, env: dict[str, str], timeout: float
               ) -> tuple[list[dict[str, Any]], bytes, bool]:
    """The child's answers, its stderr, and whether it was killed for taking too long."""
    try:
        proc = launch("clmagic.cache.checker.child", stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        raise ClmagicError(f"the checker's process could not start ({exc.strerror})") from None
    with proc:
        try:
            out, err = proc.communicate(data, timeout=timeout)
            killed = False
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            killed = True
    if not killed and proc.returncode != 0 and not _answers(out):
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        raise ClmagicError(f"the checker's process ended with status {proc.returncode} "
                           f"({last[0][:200]})")
    return _answers(out), err, killed


def _log_from(log: Path, start: int) -> str:
    try:
        with log.open("rb") as fh:
            fh.seek(start)
            return fh.read(_LOG_MAX).decode("utf-8", "replace")
    except OSError:
        return ""


def _note_size(kernel: str, work_items: int, timeout: float,
               note: Callable[[str], None] | None) -> None:
    if note is None or work_items < RATE:
        return
    guess = work_items / RATE
    said = (f"checking {kernel} over {count_of(work_items, 'work-item')} under Oclgrind, an "
            f"interpreter: about {guess:.0f} s or more (stopped after {timeout:.0f} s)")
    if work_items > LARGE:
        said += "; a smaller launch that shows the same bug is checked far sooner"
    note(said)


def check_kernel(kernel: cl.Kernel, queue: cl.CommandQueue, global_size: Size,
                 local_size: Size | None, *args: object, timeout: float = DEFAULT_TIMEOUT_S,
                 compiler: Compiler | None = None,
                 note: Callable[[str], None] | None = print) -> CheckReport:
    """Launch ``kernel`` once over ``global_size`` in groups of ``local_size`` with ``args``
    (as the kernel is called) under Oclgrind, with its memory, data-race, uninitialised-value
    and barrier checks on, in a child process; its findings, each distinct problem once, with
    the cell's lines. The user's buffers are read, not changed; the launch on the user's
    device does not happen. ``timeout``: seconds before the child is killed (the report then
    says so, with what was found until then); ``note`` gets one line before a long launch."""
    gs, ls = _size(global_size, "global size"), _size(local_size, "local size")
    assert gs is not None
    if ls is not None and len(ls) != len(gs):
        raise OptionsError(f"local size {ls} and global size {gs} differ in dimensions")
    name = str(kernel.function_name)
    if int(kernel.num_args) != len(args):
        raise OptionsError(f"{name} takes {kernel.num_args} arguments, {len(args)} given")
    source, options, offset = _program(kernel)
    copied = capture(queue, args)
    compiler = compiler if compiler is not None else get_compiler()
    request = {"source": source, "options": options, "line_offset": offset, "kernel": name,
               "global_size": list(gs), "local_size": None if ls is None else list(ls)}
    report = CheckReport(name, gs, ls, (), 0.0, source=source, line_offset=offset)
    _note_size(name, report.work_items, timeout, note)
    with tempfile.TemporaryDirectory(prefix="clmagic-check-") as folder:
        log = Path(folder) / "oclgrind.log"
        t0 = time.monotonic()
        answers, _, killed = _run_child(payload(request, copied), _env(compiler, log), timeout)
        seconds = time.monotonic() - t0
        start = next((a["launching"] for a in answers if "launching" in a), None)
        text = _log_from(log, int(start)) if start is not None else ""
    return _report(report, answers, text, killed, seconds, options)


def _report(report: CheckReport, answers: list[dict[str, Any]], text: str, killed: bool,
            seconds: float, options: str) -> CheckReport:
    last = answers[-1] if answers else {}
    if last.get("error") == "build":
        raise BuildError(str(last.get("log", "")), options=options, device="Oclgrind",
                         line_offset=report.line_offset, source=report.source)
    if "error" in last:
        raise ClmagicError(f"check of {report.kernel}: {last['error']}")
    if not killed and not last.get("done"):
        raise ClmagicError(f"check of {report.kernel}: the checker's process gave no answer")
    started = next((a for a in answers if "launching" in a), {})
    buffers = tuple(BufferInfo(**b) for b in started.get("buffers", ()))
    found = findings_of(messages(text), buffers, len(report.global_size), report.line_offset)
    return CheckReport(report.kernel, report.global_size, report.local_size, found, seconds,
                       timed_out=killed, capped=SUPPRESSED in text, source=report.source,
                       line_offset=report.line_offset, built=str(started.get("outcome", "")))
