"""Frees of ids that live on the GPU, applied once their copy to the host has landed.

The core reads ids on the host. Copying device ids back and waiting for them would make
``free`` wait for every kernel queued before it, so a CUDA pool instead queues an
asynchronous device-to-host copy into pinned memory, records an event, and returns. The
free is applied, in call order, by the first later call that finds the event complete
(or at once, waiting, when an allocation needs those pages or the caller asks with
``sync_frees``). Free-group boundaries issued while such frees are queued are queued with
them, so a group holds exactly the frees it held when they were issued. The queue itself
and its order rules live in :mod:`ukv.execution.frees`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

Kind = Literal["free", "group_begin", "group_end"]


class LandingIds:
    """Ids copied from the GPU into pinned memory; readable once the copy has landed.

    Built by :meth:`stage` (an asynchronous copy on the current stream into a staging-ring
    slot, or into a pinned buffer of its own when larger than a ring segment) or by
    :meth:`ready` (ids already on the host).
    """

    __slots__ = ("array", "event", "_ring", "_seg")

    def __init__(self, array: np.ndarray, event: Any = None, ring: Any = None, seg: int = -1):
        self.array = array
        self.event = event
        self._ring = ring
        self._seg = seg

    @classmethod
    def stage(cls, ring: Any, ids: torch.Tensor) -> LandingIds:
        """Queue the copy of device ``ids`` (1-D int32/int64) to the host; never waits."""
        n = ids.numel()
        wide = ids.dtype == torch.int64
        units = n if wide else (n + 1) // 2
        if units > ring.seg_len:
            pinned = torch.empty(n, dtype=ids.dtype, pin_memory=True)
            pinned.copy_(ids, non_blocking=True)
            return cls(pinned.numpy(), ring.record_now())
        off = ring.take(units)
        if wide:
            ring.tensor[off : off + n].copy_(ids, non_blocking=True)
            array = ring.array[off : off + n]
        else:
            ring.tensor32[2 * off : 2 * off + n].copy_(ids, non_blocking=True)
            array = ring.array32[2 * off : 2 * off + n]
        return cls(array, ring.record_now(), ring, ring.hold(off))

    @classmethod
    def ready(cls, array: np.ndarray) -> LandingIds:
        """Ids that are on the host already."""
        return cls(array)

    @property
    def segment(self) -> int:
        """The staging-ring segment this slot holds (-1: none)."""
        return self._seg

    def landed(self) -> bool:
        """Whether the ids can be read without waiting."""
        return self.event is None or bool(self.event.query())

    def wait(self) -> None:
        """Wait until the ids have landed."""
        if self.event is not None:
            self.event.synchronize()

    def take(self) -> np.ndarray:
        """The landed ids; the slot is given back, so read them before the next staging use."""
        self.release()
        return self.array

    def detach(self) -> None:
        """Wait for the ids, keep a private copy and give the staging slot back."""
        if self._ring is not None:
            self.wait()
            self.array = self.array.copy()
            self.release()

    def release(self) -> None:
        """Give the staging slot and the event back (idempotent)."""
        if self._ring is not None:
            self._ring.release(self._seg)
            self._ring.recycle(self.event)
            self._ring = None
            # The ring records the recycled event again for other work: this landing must
            # not ask it (it has landed, and its ids are read or privately copied).
            self.event = None


@dataclass
class Deferred:
    """One queued operation on sub-pool ``pool``.

    Attributes:
        pool: Sub-pool index.
        kind: ``"free"``, or a free-group boundary queued behind frees.
        landing: The ids of a free (None for boundaries).
        apply: What applies it to the core, given the landed ids (None for a boundary).
    """

    pool: int
    kind: Kind
    landing: LandingIds | None = None
    apply: Callable[[Any], None] | None = None

    def landed(self) -> bool:
        """Whether this entry can be applied without waiting."""
        return self.landing is None or self.landing.landed()

    def wait(self) -> None:
        """Wait until it can be applied."""
        if self.landing is not None:
            self.landing.wait()
