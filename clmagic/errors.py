"""clmagic's exceptions. Each renders as a short message in IPython, without a traceback."""

from __future__ import annotations

from clmagic._format import tidy_log

__all__ = ["ClmagicError", "DeviceError", "OptionsError", "BuildError", "CorruptEntry"]


class ClmagicError(Exception):
    """Base of clmagic's user-facing errors: shown in IPython as one line, no traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"clmagic: {type(self).__name__}: {self}"]


class DeviceError(ClmagicError):
    """No OpenCL platform, or no device matches the spec."""


class OptionsError(ClmagicError):
    """Build options or magic arguments that cannot be used."""


class CorruptEntry(Exception):
    """A stored entry that failed its checks; the store reports why."""


class BuildError(ClmagicError):
    """The driver refused to build the source; carries the driver's build log, as shown: the
    cell's line numbers, each message once, and, given the ``source``, the line each message
    points at with a caret under its column (:func:`clmagic._format.tidy_log`)."""

    def __init__(self, log: str, *, options: str, device: str, line_offset: int = 0,
                 source: str | None = None):
        self.raw_log = log
        self.log = tidy_log(log, line_offset, source) or "(the driver gave no build log)"
        self.options = options
        self.device = device
        shown = f" (options: {options})" if options else ""
        super().__init__(f"build failed on {device}{shown}")

    @property
    def first_error(self) -> str:
        """The log's first line that says ``error`` (else its first line): what a FAILED
        record keeps."""
        lines = [line.strip() for line in self.log.splitlines() if line.strip()]
        for line in lines:
            if "error" in line.lower():
                return line[:300]
        return lines[0][:300] if lines else str(self)

    def _render_traceback_(self) -> list[str]:
        return [f"clmagic: {self}", *self.log.splitlines()]
