"""The two sides the allocator benches drive with one trace: ukv and SGLang's peer.

Both ``bench_allocator.py`` (CPU) and ``bench_cuda_host.py`` (a CUDA pool) run their traces
against a *side*: an object with the same allocator calls (``alloc``, ``free``,
``alloc_extend``, ``alloc_decode``, ``flush``), a page-move counter (``moved``) and byte
markers (``stamp`` / ``read_stamps``) that prove data followed its ids after a move.
:class:`UkvSide` is ukv through its public API; :class:`PeerSide` is SGLang's unified pool
and ``MultiEndedAllocator`` built by ``peer_sglang.py`` (see ``harness.load_peer``) with the
same specs. The checks every trace shares (:func:`must`, :func:`check_stamps`) live here.

Geometry: small entries so the benches measure bookkeeping, not memcpy. Full-attention KV
of 2 layers x 2 heads x 16 (bf16) = 256 B per token (4 KiB per 16-token page); a 2-layer
Mamba state of 160 B per slot. 72K full token slots in one 18 MiB buffer: 73,728 pages at
page size 1, 4,608 at page size 16 (enough for a 4096-page batch).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import ukv

FULL_SPEC = ukv.MHASpec("full", 2, 2, 16, torch.bfloat16, grow="up")
MAMBA_SPEC = ukv.MambaSpec(
    "mamba", 2, ((4, 3),), torch.float32, (2, 2, 2), torch.float32, grow="down"
)
FULL_SLOTS = 72 * 1024
TOTAL_BYTES = FULL_SLOTS * FULL_SPEC.entry_bytes


# ----- sides -------------------------------------------------------------------------------


def _nothing() -> None:
    pass


def accepts(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` takes a keyword argument ``name`` (an API that is still growing)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read: assume not
        return False


class UkvSide:
    """ukv through its public API: one pool, the "full" allocator's bound methods.

    Attributes:
        alloc_host: ``alloc(n, host=True)`` (ids on the CPU, no device copy), or None when
            this ukv build does not take ``host=`` yet.
        settle: ``pool.sync_frees`` (apply every in-flight free of CUDA ids now), or a no-op
            when this ukv build frees synchronously.
    """

    label = "ukv"

    def __init__(self, page_size: int, lazy: bool, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.pool = ukv.UnifiedKVPool(
            TOTAL_BYTES, [FULL_SPEC, MAMBA_SPEC], page_size=page_size, device=device, lazy=lazy
        )
        a = self.pool.allocator("full")
        self.allocator = a
        self.page_size = page_size
        self.alloc = a.alloc
        self.free = a.free
        self.alloc_extend = a.alloc_extend
        self.alloc_decode = a.alloc_decode
        self.flush = self.pool.flush
        self.alloc_host = (
            functools.partial(a.alloc, host=True) if accepts(a.alloc, "host") else None
        )
        self.settle = getattr(self.pool, "sync_frees", _nothing)
        k, v = self.pool.kv_views("full")
        # Markers: the first 8 bytes of layer 0's K and the last 8 of the last layer's V of
        # each token, so a check covers both ends of the page envelope.
        self._marks = (
            k[0].view(torch.int64)[:, :, 0, 0],
            v[-1].view(torch.int64)[:, :, -1, -1],
        )

    def geometry(self) -> dict[str, int]:
        a = self.allocator
        return {
            "num_pages": a.num_pages,
            "first_page": a.min_page_index,
            "available_tokens": a.available_size(),
        }

    def moved(self) -> int:
        return self.pool.stats().sub_pools[0].pages_moved

    def _on_device(self, ids: torch.Tensor) -> torch.Tensor:
        # Host ids (alloc(host=True)) are copied for the checks only, never in timed code.
        return ids if ids.device.type == self.device.type else ids.to(self.device)

    def translate(self, ids: torch.Tensor) -> torch.Tensor:
        return self.allocator.translate_kv_loc(self._on_device(ids))

    def stamp(self, ids: torch.Tensor) -> None:
        ids = self._on_device(ids)
        phys = self.translate(ids)
        for m in self._marks:
            m[phys // self.page_size, phys % self.page_size] = ids

    def read_stamps(self, ids: torch.Tensor) -> torch.Tensor:
        phys = self.translate(ids)
        a, b = (m[phys // self.page_size, phys % self.page_size] for m in self._marks)
        return torch.where(a == b, a, torch.full_like(a, -2))


class PeerSide:
    """SGLang's UnifiedKVPool + MultiEndedAllocator, built by peer_sglang with the same specs.

    Page zeroing on alloc (SGLang's ``_zero_pages_on_alloc`` for MHA pools) is switched off:
    ukv does not zero on alloc, and zeroing 4096 pages is memset time, not bookkeeping.
    """

    label = "sglang"
    settle = staticmethod(_nothing)  # its frees are applied before they return

    def __init__(self, factory: Any, page_size: int, lazy: bool, device: str = "cpu") -> None:
        self.peer = factory(
            TOTAL_BYTES,
            FULL_SPEC,
            MAMBA_SPEC,
            page_size=page_size,
            lazy=lazy,
            kv="real",
            device=device,
        )
        if not self.peer.peer_moves_bytes:
            raise RuntimeError(f"the SGLang peer does not move real bytes: {self.peer.kv_note}")
        a = self.peer.full.allocator
        a._zero_pages_on_alloc = False
        self.allocator = a
        self.page_size = page_size
        self.alloc = a.alloc
        self.free = a.free
        self.alloc_extend = a.alloc_extend
        self.alloc_decode = a.alloc_decode
        self.flush = self.peer.flush  # both sub-pools, like ukv's pool.flush
        self._moved_base = 0

    def geometry(self) -> dict[str, int]:
        a = self.allocator
        return {
            "num_pages": int(a.num_pages),
            "first_page": int(a.min_page_index),
            "available_tokens": int(a.available_size()),
        }

    def moved(self) -> int:
        # Page moves recorded in the allocator's inverse history (page granular); folded
        # into a base and cleared, so the list does not grow over a run.
        history = self.allocator._inverse_history
        self._moved_base += sum(int(src.numel()) for src, _dst, _v in history)
        history.clear()
        return self._moved_base

    def translate(self, ids: torch.Tensor) -> torch.Tensor:
        return self.peer.full.translate(ids)

    def stamp(self, ids: torch.Tensor) -> None:
        self.peer.full.stamp(ids)

    def read_stamps(self, ids: torch.Tensor) -> torch.Tensor:
        return self.peer.full.read_stamps(ids)


# ----- checks shared by the traces --------------------------------------------------------


class CheckError(AssertionError):
    pass


def must(ids: torch.Tensor | None, what: str) -> torch.Tensor:
    if ids is None:
        raise CheckError(f"{what} returned None")
    return ids


def check_stamps(side: Any, ids: torch.Tensor, what: str) -> None:
    got = side.read_stamps(ids)
    ids = ids.to(got.device)
    if not torch.equal(got, ids):
        bad = (got != ids).nonzero().flatten()[:4].tolist()
        raise CheckError(
            f"{side.label} {what}: data did not follow its ids at {bad}: "
            f"{ids[bad].tolist()} -> {got[bad].tolist()}"
        )


def half_full(side: Any) -> torch.Tensor:
    ps = side.page_size
    pages = side.allocator.available_size() // ps // 2
    bg = must(side.alloc(pages * ps), "background alloc")
    side.stamp(bg)
    return bg


@dataclass
class Requests:
    """One batch of requests with prefixes already allocated (page size 16)."""

    prefix: torch.Tensor  # [B] int64 tokens already held
    last_loc: torch.Tensor  # [B] int64, -1 for an empty prefix
    live: list[torch.Tensor] = field(default_factory=list)


def requests(side: Any, prefix: np.ndarray) -> Requests:
    """Allocate each request's prefix as whole pages (plain alloc); last_loc is the id of its
    last prefix token."""
    ps = side.page_size
    last = np.full(len(prefix), -1, dtype=np.int64)
    live = []
    for r, p in enumerate(prefix):
        if p == 0:
            continue
        ids = must(side.alloc(-(-int(p) // ps) * ps), "prefix alloc")
        live.append(ids)
        last[r] = int(ids[int(p) - 1])
    return Requests(torch.from_numpy(prefix.astype(np.int64)), torch.from_numpy(last), live)
