"""The pure-Python model: which virtual pages and state slots are live, and the bytes
every live token and slot must hold.

The model is logical: a free takes effect for the caller at the call, in call order,
whether the pool applies it at once, at a free group's end or once a queued device free
has landed. Pages freed but not yet released by the pool are *held*: the pool may still
have them allocated, but no caller owns them and their bytes are never checked. A held
page turns dead when the pool releases it (the driver observes that on the host tables).
"""

from __future__ import annotations

import numpy as np
import torch

DEAD, LIVE, HELD = 0, 1, 2


class PagedSide:
    """One paged (KV) sub-pool's view of an id space: page states and per-token bytes.

    ``views`` gives the per-token shape and dtype of each view (K then V per layer). For
    a bound side (the SWA side of a composite) the id space is the owner's.
    """

    def __init__(
        self, name: str, page_size: int, lo_page: int, num_pages: int, views: list[tuple]
    ) -> None:
        self.name = name
        self.ps = page_size
        self.lo_page = lo_page
        self.num_pages = num_pages
        self.state = np.zeros(num_pages, dtype=np.int8)
        n = num_pages * page_size
        self.written = np.zeros(n, dtype=bool)  # handed out and stamped
        self.influx = np.zeros(n, dtype=bool)  # a reported forward's write is pending
        self.data = [torch.zeros((n, *shape), dtype=dtype) for shape, dtype in views]

    def pages_of(self, ids: np.ndarray) -> np.ndarray:
        return np.unique(np.asarray(ids, dtype=np.int64) // self.ps)

    def tokens_of(self, pages: np.ndarray) -> np.ndarray:
        pages = np.asarray(pages, dtype=np.int64)
        return (pages[:, None] * self.ps + np.arange(self.ps)).reshape(-1)

    def bind(self, pages: np.ndarray) -> None:
        """Pages handed out by an allocation: they must be free for the caller."""
        pages = np.asarray(pages, dtype=np.int64)
        bad = pages[self.state[pages] == LIVE]
        assert bad.size == 0, f"{self.name}: pages {bad.tolist()} handed out while live"
        self.state[pages] = LIVE
        tok = self.tokens_of(pages)
        self.written[tok] = False
        self.influx[tok] = False

    def release(self, pages: np.ndarray) -> None:
        """The caller frees these pages (logically, now)."""
        pages = np.asarray(pages, dtype=np.int64)
        pages = pages[self.state[pages] == LIVE]
        self.state[pages] = HELD
        tok = self.tokens_of(pages)
        self.written[tok] = False
        self.influx[tok] = False

    def write(self, ids: np.ndarray, values: list[torch.Tensor]) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        t = torch.from_numpy(ids)
        for d, v in zip(self.data, values):
            d[t] = v
        self.written[ids] = True

    def live_pages(self) -> np.ndarray:
        return np.flatnonzero(self.state == LIVE)

    def checked_tokens(self) -> np.ndarray:
        """Tokens whose bytes the pool must hold now."""
        live = np.repeat(self.state == LIVE, self.ps)
        return np.flatnonzero(live & self.written & ~self.influx)

    def observe(self, v2p: np.ndarray) -> None:
        """Held pages the pool has released become dead."""
        held = np.flatnonzero(self.state == HELD)
        self.state[held[v2p[held] < 0]] = DEAD

    def clear(self) -> None:
        self.state[:] = DEAD
        self.written[:] = False
        self.influx[:] = False


class StateSide:
    """A state (Mamba) sub-pool: slot states and each slot's conv and temporal bytes
    (slot-major, as ``get_cpu_copy`` gathers them)."""

    def __init__(self, name: str, lo: int, num_slots: int, views: list[tuple]) -> None:
        self.name = name
        self.lo = lo
        self.state = np.zeros(num_slots, dtype=np.int8)
        self.written = np.zeros(num_slots, dtype=bool)
        self.influx = np.zeros(num_slots, dtype=bool)  # a forward's state update pending
        self.data = [torch.zeros((num_slots, *shape), dtype=dtype) for shape, dtype in views]

    def bind(self, slots: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64)
        bad = slots[self.state[slots] == LIVE]
        assert bad.size == 0, f"{self.name}: slots {bad.tolist()} handed out while live"
        self.state[slots] = LIVE
        self.written[slots] = False
        self.influx[slots] = False

    def release(self, slots: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64)
        slots = slots[self.state[slots] == LIVE]
        self.state[slots] = HELD
        self.written[slots] = False
        self.influx[slots] = False

    def write(self, slots: np.ndarray, values: list[torch.Tensor]) -> None:
        t = torch.from_numpy(np.asarray(slots, dtype=np.int64))
        for d, v in zip(self.data, values):
            d[t] = v
        self.written[np.asarray(slots, dtype=np.int64)] = True

    def checked_slots(self) -> np.ndarray:
        return np.flatnonzero((self.state == LIVE) & self.written & ~self.influx)

    def observe(self, v2p: np.ndarray) -> None:
        held = np.flatnonzero(self.state == HELD)
        self.state[held[v2p[held] < 0]] = DEAD

    def clear(self) -> None:
        self.state[:] = DEAD
        self.written[:] = False
        self.influx[:] = False
