"""A build trip under way: what :meth:`Compiler.build <clmagic.trip.compiler.Compiler.build>`
carries from one step to the next (its own module: the state, the rekey and the compiler's
steps all take one, and none of them needs the others for it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyopencl as cl

from clmagic.key.prepare import Prepared, complete
from clmagic.opencl.devices import DeviceInfo

__all__ = ["Memo", "Trip"]

#: the (fingerprint, key) of one program in the memory front
Memo = tuple[str, str]


@dataclass(frozen=True)
class Trip:
    """One :meth:`Compiler.build <clmagic.trip.compiler.Compiler.build>` under way: the
    prepared source and its device, context and queue, and when the trip's clock started."""

    prep: Prepared
    info: DeviceInfo
    dev: cl.Device
    ctx: cl.Context
    queue: cl.CommandQueue
    line_offset: int
    t0: float
    setup_ms: float = 0.0

    @property
    def memo(self) -> Memo:
        """Where the trip's program is kept in the memory front."""
        return self.info.fingerprint, self.prep.key

    def completed(self) -> Trip:
        """This trip with its source fully prepared (headers read), before it is built or
        rekeyed: a preparation taken from the manifest answers a lookup only."""
        prep = complete(self.prep, self.info)
        return self if prep is self.prep else dataclasses.replace(self, prep=prep)
