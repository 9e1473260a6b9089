"""Timing a kernel launch with OpenCL's profiling events: :func:`time_kernel`.

Why events and a queue of its own: the events' ``START``..``END`` is the device's own account of
the kernel's run, without Python, the enqueue or the wait around it; and profiling is a property
a queue is made with, so the user's queue (made without it, as ``cl_queue`` is) cannot give it.
The profiling queue is made once per context and device and kept. The user's queue is finished
first, so the launches read what it wrote.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import pyopencl as cl

from clmagic._memo import remember
from clmagic.errors import OptionsError
from clmagic.opencl.refusals import launch_sizes, refused, set_arguments

__all__ = ["Timing", "time_kernel", "profiling_queue"]

_QUEUES: OrderedDict[tuple[cl.Context, cl.Device], cl.CommandQueue] = OrderedDict()
#: profiling queues kept (one per context and device)
_QUEUES_MAX = 16

Size = int | Sequence[int]


@dataclass(frozen=True)
class Timing:
    """The launches of one kernel, each in µs as the device's profiling events say; ``median``,
    ``min`` and ``spread`` (the interquartile range: half the launches lie within it) summarise
    them."""

    kernel: str
    times_us: tuple[float, ...]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None

    @property
    def median_us(self) -> float:
        return statistics.median(self.times_us)

    @property
    def min_us(self) -> float:
        return min(self.times_us)

    @property
    def max_us(self) -> float:
        return max(self.times_us)

    @property
    def spread_us(self) -> float:
        """The interquartile range of the launches (0 for fewer than two)."""
        if len(self.times_us) < 2:
            return 0.0
        q = statistics.quantiles(self.times_us, n=4, method="inclusive")
        return q[2] - q[0]

    @property
    def repeats(self) -> int:
        return len(self.times_us)

    def __str__(self) -> str:
        local = "×".join(map(str, self.local_size)) if self.local_size else "driver's choice"
        return (f"{self.kernel} · median {self.median_us:.1f} µs · min {self.min_us:.1f} µs · "
                f"spread {self.spread_us:.1f} µs · {self.repeats} launches of "
                f"{'×'.join(map(str, self.global_size))} (groups {local})")


def profiling_queue(context: cl.Context, device: cl.Device) -> cl.CommandQueue:
    """A queue with profiling on, for ``context`` and ``device`` (made once, then kept)."""
    key = (context, device)
    queue = _QUEUES.get(key)
    if queue is None:
        queue = cl.CommandQueue(context, device,
                                properties=cl.command_queue_properties.PROFILING_ENABLE)
        remember(_QUEUES, key, queue, _QUEUES_MAX)
    return queue


def time_kernel(kernel: cl.Kernel, queue: cl.CommandQueue, global_size: Size,
                local_size: Size | None, *args: object, repeats: int = 20,
                warmup: int = 1) -> Timing:
    """Launch ``kernel`` ``warmup`` + ``repeats`` times over ``global_size`` in groups of
    ``local_size`` (``None``: the driver chooses) with ``args`` (none: the arguments already
    set), on a profiling queue of ``queue``'s context and device; the ``repeats`` timed
    launches' device times. A launch that cannot be made (sizes, arguments, a group the device
    refuses) is an :class:`~clmagic.errors.OptionsError` of one line
    (:mod:`clmagic.opencl.refusals`)."""
    if not isinstance(repeats, int) or repeats < 1:
        raise OptionsError(f"repeats={repeats}: need at least one launch (-r 1 or more)")
    gs, ls = launch_sizes(global_size, local_size)
    if args or not isinstance(kernel, cl.Kernel):
        set_arguments(kernel, args)
    if not isinstance(queue, cl.CommandQueue):
        raise OptionsError(f"{queue!r} is not a command queue: give the one the kernel's "
                           "context has (cl_queue after %%clkernel)")
    queue.finish()  # what the user's queue wrote is there before the first launch
    pq = profiling_queue(queue.context, queue.device)
    try:
        for _ in range(max(warmup, 0)):
            cl.enqueue_nd_range_kernel(pq, kernel, gs, ls)
        events = [cl.enqueue_nd_range_kernel(pq, kernel, gs, ls) for _ in range(repeats)]
    except cl.Error as exc:  # a launch the driver refuses: one line that says what to change
        raise refused(exc, kernel, queue.device, gs, ls) from None
    pq.finish()
    times = tuple((e.profile.end - e.profile.start) / 1000.0 for e in events)
    return Timing(str(kernel.function_name), times, gs, ls)
