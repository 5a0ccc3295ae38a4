"""``MambaHybridAllocator``: full-attention tokens plus one Mamba state slot per request.

A Mamba hybrid (Qwen3-Next, Nemotron-H, Jamba, Granite-4-H) keeps KV per token on the full
side and a fixed-size recurrent state per request on the Mamba side. The two sides have
their own virtual ids and meet only in bytes: the pool's frontier lets either take what the
other is not using. The composite offers the token surface of the full side, a slot
allocator for states (:class:`MambaSlots`), and the exchange rate between them, which the
reference lacked: how many full tokens must be released before k more states fit, and the
converse (the reference never evicted KV for a state shortfall and crashed with the pool
a third used).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from ukv import _convert
from ukv.allocator import SubPoolAllocator
from ukv.errors import ArgumentError
from ukv.specs import MambaSpec

if TYPE_CHECKING:
    from ukv.pool import UnifiedKVPool


class MambaSlots:
    """State slots of the Mamba sub-pool, handed out per request.

    Obtain it as ``MambaHybridAllocator.mamba_slots``. Slots are virtual: compaction may
    move a state, so kernels read states at ``translate(slots)``.
    """

    def __init__(self, pool: UnifiedKVPool, name: str) -> None:
        self._pool = pool
        self._alloc = pool.allocator(name)
        self._index = pool._runtime.index(name)
        self.name = name
        self._group: list[int] | None = None
        self._reserved = np.empty(0, dtype=np.int64)

    def alloc(self, n: int = 1, *, host: bool = False) -> torch.Tensor | None:
        """Allocate ``n`` state slots; None when they do not fit (nothing changes).

        Inside :meth:`alloc_group_begin`, slots come from the reserved group first.

        Returns:
            Tensor | None: shape ``[n]`` int64 virtual slot ids, on the pool's device
            (the CPU with ``host=True``).
        """
        n = _convert.count("n", n)
        if self._group is not None and self._reserved.size:
            take = min(n, int(self._reserved.size))
            got, self._reserved = self._reserved[:take], self._reserved[take:]
            if take < n:
                rest = self._alloc.alloc(n - take, host=True)
                if rest is None:
                    self._reserved = np.concatenate([got, self._reserved])
                    return None
                got = np.concatenate([got, rest.numpy()])
            ids = torch.from_numpy(np.ascontiguousarray(got))
            return ids if host else ids.to(self._pool._runtime.tables[self._index].device)
        return self._alloc.alloc(n, host=host)

    def free(self, ids: torch.Tensor) -> None:
        """Free these slots (host or device ids, as ``SubPoolAllocator.free``)."""
        self._alloc.free(ids)

    def alloc_group_begin(self, k: int) -> bool:
        """Reserve ``k`` slots for the batch being scheduled; later :meth:`alloc` calls
        take them first. Returns False (and reserves nothing) when ``k`` do not fit.

        Raises:
            ArgumentError: a group is already open, or a bad ``k``.
        """
        k = _convert.count("k", k)
        if self._group is not None:
            raise ArgumentError(f"bad call alloc_group_begin on {self.name!r}: a group is open")
        got = self._alloc.alloc(k, host=True) if k else torch.empty(0, dtype=torch.int64)
        if got is None:
            return False
        self._group = []
        self._reserved = got.numpy().copy()
        return True

    def alloc_group_end(self) -> None:
        """Close the group and free the reserved slots nobody took.

        Raises:
            ArgumentError: no group is open.
        """
        if self._group is None:
            raise ArgumentError(f"bad call alloc_group_end on {self.name!r}: no group is open")
        leftover, self._reserved, self._group = self._reserved, self._reserved[:0], None
        if leftover.size:
            self._alloc.free(torch.from_numpy(leftover))

    def translate(self, ids: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """Virtual slot ids → physical slots on the tables' device, int64; −1 (padding,
        "no state") stays −1 and so does any id that names no live slot, slot 0 (the
        padding anchor, never a request's state) included."""
        self._pool._runtime.check_usable()
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int32, torch.int64):
            raise ArgumentError(f"bad argument ids: {ids!r} must be an int32/int64 tensor")
        # One launch: padding (-1), slot 0 (the padding anchor) and ids that name no live
        # slot all come out -1 (SubPoolAllocator.translate_slots).
        return self._alloc.translate_slots(ids.to(self._alloc.v2p.device), out=out)

    def available_size(self) -> int:
        """Slots ``alloc`` can take now."""
        return self._alloc.available_size()

    def schedulable_available_size(self) -> int:
        """Slots ``alloc`` is guaranteed to get (after an urgent flush of the full side)."""
        return self._alloc.schedulable_available_size()

    def allocated_count(self) -> int:
        """Live slots (reserved group slots included)."""
        return self._alloc.allocated_count()

    def is_slot_allocated(self, slot: int) -> bool:
        """Whether virtual slot ``slot`` is live."""
        return self._alloc.is_slot_allocated(slot)

    def clear(self) -> None:
        """Free every slot (and forget an open group)."""
        self._group, self._reserved = None, self._reserved[:0]
        self._alloc.clear()


class MambaHybridAllocator(SubPoolAllocator):
    """Token surface of the full side plus :attr:`mamba_slots` (API.md §5).

    Args:
        pool: A pool with an MHA sub-pool ``full`` and a Mamba sub-pool ``mamba``.
        full: The full-attention sub-pool.
        mamba: The state sub-pool.

    Raises:
        ArgumentError: unknown names or a ``mamba`` sub-pool that is not a Mamba spec.
    """

    def __init__(self, pool: UnifiedKVPool, full: str = "full", mamba: str = "mamba") -> None:
        if not isinstance(pool.spec(mamba), MambaSpec):
            raise ArgumentError(
                f"bad argument mamba = {mamba!r}: {type(pool.spec(mamba)).__name__} is not a Mamba sub-pool"
            )
        super().__init__(pool._runtime, pool._runtime.index(full))
        self._pool = pool
        self._mamba = pool._runtime.index(mamba)
        self.mamba_slots = MambaSlots(pool, mamba)

    def mamba_slot_full_token_cost(self) -> int:
        """Full-attention tokens of bytes that one state costs: ``ceil(state bytes /
        full bytes per token)`` (what an admission check charges per new request)."""
        state = self._pool.spec(self.mamba_slots.name).entry_bytes
        return math.ceil(state / self.entry_bytes)

    def tokens_to_release_for_states(self, k: int) -> int | None:
        """Full-attention tokens to free (as whole pages) before ``k`` more states fit;
        0 when they fit now, None when no amount would do (the state side is out of ids)."""
        k = _convert.count("k", k)
        pages = self._arena.shortage_pages(self._mamba, k, self._index)
        return None if pages is None else int(pages) * self.page_size

    def states_to_release_for_tokens(self, n: int) -> int | None:
        """States to free before ``n`` more full-attention tokens (a page multiple) fit; 0
        when they fit now, None when no amount would do."""
        n = _convert.count("n", n)
        if n % self.page_size:
            raise ArgumentError(
                f"bad argument n = {n}: not a multiple of page_size {self.page_size}"
            )
        slots = self._arena.shortage_pages(self._index, n // self.page_size, self._mamba)
        return None if slots is None else int(slots)

    def clear(self) -> None:
        """Free every token and every state."""
        super().clear()
        self.mamba_slots.clear()

    def __repr__(self) -> str:
        return (
            f"MambaHybridAllocator(full={self.name!r}, mamba={self.mamba_slots.name!r}, "
            f"page_size={self.page_size}, tokens_available={self.available_size()}, "
            f"states_available={self.mamba_slots.available_size()})"
        )
