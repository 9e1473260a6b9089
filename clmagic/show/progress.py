"""A progress bar for a library call that reports ``progress(done, total)`` as it goes (an
import proving each binary in a child process): tqdm's (``tqdm.auto``: a widget in a notebook,
text on a terminal), made only once there are enough steps to wait for. The call itself stays
free of any drawing (the library works without a notebook or a terminal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["counted_bar"]


@contextmanager
def counted_bar(desc: str, unit: str, *, show: bool = True,
                least: int = 10) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback that draws a bar when ``show`` and there are at
    least ``least`` steps (a few entries are done before a bar would be read); the bar goes
    when the block ends."""
    bar: list[Any] = []

    def step(done: int, total: int) -> None:
        if not show or total < least:
            return
        if not bar:
            from tqdm.auto import tqdm

            bar.append(tqdm(total=total, desc=desc, unit=unit, leave=False))
        bar[0].update(done - bar[0].n)

    try:
        yield step
    finally:
        if bar:
            bar[0].close()
