"""Factories: a ready hybrid pool from layer shapes (or a model) and a size.

``build_mamba_hybrid`` and ``build_swa_hybrid`` take the two specs (or a model preset /
``config.json`` path / :class:`ukv.models.ModelShape`, sharded for tensor parallelism), and
either a byte budget or the token and request counts to size for. They build the pool (the
SWA side bound to full's ids), the composite allocator and a :class:`RequestTable`, and
check at boot that one worst-case request fits, with an error that says by how many bytes
it does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ukv.errors import PoolConfigError
from ukv.hybrid.mamba import MambaHybridAllocator
from ukv.hybrid.request_table import RequestTable
from ukv.hybrid.swa import SWAHybridAllocator
from ukv.pool import UnifiedKVPool
from ukv.specs import MambaSpec, MHASpec, MLASpec, Spec, reserved_floor


@dataclass(frozen=True)
class HybridPool:
    """What a factory builds.

    Attributes:
        pool: The unified pool.
        allocator: The composite (``MambaHybridAllocator`` or ``SWAHybridAllocator``).
        requests: Request slot → tokens (and state) table, or None without ``max_requests``.
        window: The sliding window in tokens (SWA hybrids), else None.
    """

    pool: UnifiedKVPool
    allocator: Any
    requests: RequestTable | None
    window: int | None = None


def build_mamba_hybrid(
    full: MHASpec | None = None,
    mamba: MambaSpec | None = None,
    *,
    model: Any = None,
    tp_size: int = 1,
    tp_rank: int = 0,
    total_bytes: int | None = None,
    max_tokens: int | None = None,
    max_requests: int | None = None,
    max_context_len: int,
    page_size: int = 16,
    device: str | torch.device = "cuda",
    lazy: bool = False,
) -> HybridPool:
    """A full-attention + Mamba pool, its composite allocator and request table.

    Args:
        full: Full-attention spec (grows up), unless ``model`` is given.
        mamba: State spec (grows down), unless ``model`` is given.
        model: A preset name, a ``config.json`` path or a ``ModelShape`` (a Mamba model).
        tp_size: Tensor-parallel degree to shard ``model``'s heads by.
        tp_rank: This rank, in ``[0, tp_size)`` (every rank holds the same shape; it is
            recorded on the sharded model and checked).
        total_bytes: The byte budget; else sized from ``max_tokens`` and ``max_requests``.
        max_tokens: Full-attention tokens to size for (without ``total_bytes``).
        max_requests: Concurrent requests: states to size for, and request-table rows.
        max_context_len: The longest request in tokens (the boot check's worst case).
        page_size: Tokens per KV page.
        device: ``cuda``, ``cpu`` or ``meta``.
        lazy: Lazy compaction.

    Raises:
        PoolConfigError: missing or contradictory sizes, a model that is not a Mamba
            hybrid, or a pool in which one worst-case request does not fit.
    """
    full, mamba = _specs(full, mamba, model, (tp_size, tp_rank), MambaSpec, "mamba")
    assert isinstance(mamba, MambaSpec)
    kv_pages = _pages(max_context_len, page_size)
    worst = kv_pages * full.page_bytes(page_size) + mamba.entry_bytes
    total = _budget(
        total_bytes,
        max_tokens,
        max_requests,
        lambda t, r: _pages(t, page_size) * full.page_bytes(page_size) + r * mamba.entry_bytes,
    )
    _boot_check(total, [full, mamba], page_size, worst, max_context_len, "and one state")
    pool = UnifiedKVPool(total, [full, mamba], page_size=page_size, device=device, lazy=lazy)
    alloc = MambaHybridAllocator(pool, full.name, mamba.name)
    return HybridPool(pool, alloc, _table(alloc, max_requests, max_context_len))


def build_swa_hybrid(
    full: MHASpec | None = None,
    swa: MHASpec | None = None,
    *,
    window: int | None = None,
    model: Any = None,
    tp_size: int = 1,
    tp_rank: int = 0,
    total_bytes: int | None = None,
    max_tokens: int | None = None,
    max_requests: int | None = None,
    max_context_len: int,
    max_extend_tokens: int | None = None,
    page_size: int = 16,
    device: str | torch.device = "cuda",
    lazy: bool = False,
) -> HybridPool:
    """A full-attention + sliding-window pool (the SWA side bound to full's ids), its
    composite allocator and request table.

    Args:
        full: Full-attention spec (grows up), unless ``model`` is given.
        swa: Sliding-window spec (grows down), unless ``model`` is given.
        window: The sliding window in tokens (taken from ``model`` when given).
        model: A preset name, a ``config.json`` path or a ``ModelShape`` (an SWA model).
        max_extend_tokens: The largest single extend (the prefill chunk); default
            ``max_context_len`` (unchunked prefill). An extend binds all its new tokens on
            the SWA side too until ``free_swa`` trims them, so the boot check admits one
            request of ``max_context_len`` tokens whose SWA side holds its window plus one
            such extend.
        tp_size, tp_rank, total_bytes, max_tokens, max_requests, max_context_len, page_size,
        device, lazy: As :func:`build_mamba_hybrid`; ``max_tokens`` counts full tokens,
            and each request is sized for ``min(max_context_len, window + page_size)``
            SWA tokens, plus one extend in flight.

    Raises:
        PoolConfigError: as :func:`build_mamba_hybrid`, or a missing window.
    """
    if model is not None:
        shape = _shape(model, (tp_size, tp_rank))
        window = shape.swa.window if shape.swa is not None else window
    full, swa = _specs(full, swa, model, (tp_size, tp_rank), MHASpec, "swa")
    if window is None or isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise PoolConfigError(f"invalid window = {window!r}: must be a positive int (tokens)")
    if isinstance(max_context_len, bool) or not isinstance(max_context_len, int):
        raise PoolConfigError(
            f"invalid max_context_len = {max_context_len!r}: must be a positive int"
        )
    extend = max_context_len if max_extend_tokens is None else max_extend_tokens
    if isinstance(extend, bool) or not isinstance(extend, int) or extend <= 0:
        raise PoolConfigError(
            f"invalid max_extend_tokens = {max_extend_tokens!r}: must be a positive int"
        )
    win_tokens = min(max_context_len, window + page_size)
    # The window, then one extend binding every new token on the SWA side as well.
    peak_tokens = min(max_context_len, window + page_size + extend)

    def bytes_for(tokens: int, requests: int) -> int:
        kv = _pages(tokens, page_size) * full.page_bytes(page_size)
        swa_pages = (requests - 1) * _pages(win_tokens, page_size) + _pages(peak_tokens, page_size)
        return kv + swa_pages * swa.page_bytes(page_size)

    worst = bytes_for(max_context_len, 1)
    total = _budget(total_bytes, max_tokens, max_requests, bytes_for)
    _boot_check(
        total, [full, swa], page_size, worst, max_context_len, "with its window and one extend"
    )
    pool = UnifiedKVPool(
        total,
        [full, swa],
        page_size=page_size,
        device=device,
        lazy=lazy,
        bind={swa.name: full.name},
    )
    alloc = SWAHybridAllocator(pool, full.name, swa.name)
    return HybridPool(pool, alloc, _table(alloc, max_requests, max_context_len), window)


# ----- helpers ------------------------------------------------------------------------------


def _shape(model: Any, tp: tuple[int, int]) -> Any:
    from ukv import models

    shape = model if isinstance(model, models.ModelShape) else models.load(model)
    return shape.sharded(*tp) if tp != (1, 0) else shape


def _specs(
    full: MHASpec | None,
    other: Spec | None,
    model: Any,
    tp: tuple[int, int],
    kind: type,
    label: str,
) -> tuple[MHASpec, Any]:
    if model is not None:
        if full is not None or other is not None:
            raise PoolConfigError(
                "invalid arguments: give either model= or the two specs, not both"
            )
        shape = _shape(model, tp)
        specs = list(shape.specs())
        if len(specs) != 2:
            raise PoolConfigError(
                f"model {shape.name!r} has one kind of cache ({shape.kind!r}), not a hybrid: "
                f"build a UnifiedKVPool from its one spec (shape.specs()) instead"
            )
        full, other = specs[0], specs[1]
    # An MLA latent (Kimi-Linear) is a full-attention side like any other for a Mamba hybrid.
    full_kinds = (MHASpec, MLASpec) if kind is MambaSpec else (MHASpec,)
    if not isinstance(full, full_kinds) or not isinstance(other, kind):
        raise PoolConfigError(
            f"invalid specs ({type(full).__name__}, {type(other).__name__}): need an MHASpec "
            f"and a {kind.__name__} for the {label} side (or model=)"
        )
    return full, other


def _pages(tokens: int, page_size: int) -> int:
    return -(-int(tokens) // page_size)


def _budget(total_bytes: int | None, max_tokens: int | None, max_requests: int | None, cost) -> int:
    if total_bytes is not None:
        if max_tokens is not None:
            raise PoolConfigError("invalid arguments: give total_bytes or max_tokens, not both")
        return int(total_bytes)
    if max_tokens is None or max_requests is None:
        raise PoolConfigError(
            "invalid arguments: give total_bytes, or both max_tokens and max_requests"
        )
    for name, v in (("max_tokens", max_tokens), ("max_requests", max_requests)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise PoolConfigError(f"invalid {name} = {v!r}: must be a positive int")
    return int(cost(max_tokens, max_requests))


def _boot_check(
    total: int, specs: list[Spec], page_size: int, worst: int, ctx: int, what: str
) -> None:
    """One worst-case request (``ctx`` tokens plus its state or window) must fit."""
    if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx <= 0:
        raise PoolConfigError(f"invalid max_context_len = {ctx!r}: must be a positive int")
    floor = reserved_floor(specs, page_size)
    need = floor + worst
    if need > total:
        raise PoolConfigError(
            f"invalid pool size: one request of max_context_len={ctx} tokens {what} needs "
            f"{need} bytes (reserved floor {floor} + {worst}), the pool has {total}: "
            f"short by {need - total} bytes"
        )


def _table(alloc: Any, max_requests: int | None, ctx: int) -> RequestTable | None:
    return None if max_requests is None else RequestTable(alloc, max_requests, ctx)
