"""A build trip under way: what :func:`clmagic.trip.route.travel` carries from one step to the
next, for one device (a cell) or several (a caller's program, the pyopencl hook). Its own
module: the state, the rekey and the route's steps all take one, and none of them needs the
others for it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyopencl as cl

from clmagic.key.prepare import Prepared, complete
from clmagic.opencl.devices import DeviceInfo
from clmagic.outcome import Outcome

__all__ = ["Memo", "Trip"]

#: the (fingerprint, key) of one program in the memory front
Memo = tuple[str, str]


@dataclass(frozen=True)
class Trip:
    """One build under way: the prepared source of each device, the devices and their context,
    and when the trip's clock started.

    A cell's trip (``caller`` false: ``%%clkernel``, :func:`clmagic.build`) is over one device of
    a context clmagic chose, with its queue: its kernels are made, its program is kept in the
    memory front, a MISS says why it missed and a lookup waits for a save of its key under way.
    A caller's trip (``caller`` true: the pyopencl hook) builds in the caller's context for the
    caller's devices and hands back a program as pyopencl's own path would make it: from the
    caller's text as given, no kernels, nothing kept in memory (no OpenCL object of the
    caller's outlives the caller's own references), and no lookup waits for a save."""

    preps: tuple[Prepared, ...]
    infos: tuple[DeviceInfo, ...]
    devs: tuple[cl.Device, ...]
    ctx: cl.Context
    queue: cl.CommandQueue | None
    t0: float
    #: the text the driver compiles on a miss: the caller's own (the hook), else ``None``: the
    #: prepared source (normalised, as the key hashed it)
    text: str | bytes | None = None
    origin: str = "cell"
    caller: bool = False
    line_offset: int = 0
    #: before the trip's clock: choosing the device and making its context (a cell's)
    setup_ms: float = 0.0
    #: (outcome, note) of another process's trip for this very build, which counted it (a
    #: sweep's worker): a load from memory or the store is recorded so, and counted nowhere
    elsewhere: tuple[Outcome, str] | None = None

    @property
    def prep(self) -> Prepared:
        """The first device's preparation (a cell's only one)."""
        return self.preps[0]

    @property
    def info(self) -> DeviceInfo:
        """The first device's identity (a cell's only one)."""
        return self.infos[0]

    @property
    def dev(self) -> cl.Device:
        """The first device (a cell's only one)."""
        return self.devs[0]

    @property
    def memo(self) -> Memo:
        """Where a cell's program is kept in the memory front."""
        return self.info.fingerprint, self.prep.key

    @property
    def source(self) -> str | bytes:
        """What the driver compiles on a miss."""
        return self.prep.source if self.text is None else self.text

    def completed(self) -> Trip:
        """This trip with every source fully prepared (headers read), before it is built or
        rekeyed: a preparation taken from the manifest answers a lookup only."""
        preps = tuple(complete(p, i) for p, i in zip(self.preps, self.infos, strict=True))
        if all(a is b for a, b in zip(preps, self.preps, strict=True)):
            return self
        return dataclasses.replace(self, preps=preps)
