"""Small SWA hybrid pools the tests share: a full side growing up, an SWA side growing
down, sized in pages of each side plus the padding floor."""

from __future__ import annotations

from typing import Any

import torch

import ukv


def swa_hybrid(
    device: str,
    *,
    full_layers: int = 4,
    swa_layers: int = 2,
    heads: int = 2,
    head_dim: int = 4,
    dtype: torch.dtype = torch.float16,
    ps: int = 1,
    pages: tuple[int, int] = (32, 16),
    window: int = 8,
    lazy: bool = False,
    **kw: Any,
) -> tuple[ukv.UnifiedKVPool, ukv.SWAHybridAllocator]:
    """An SWA hybrid with room for ``pages`` = (full, swa) pages of ``ps`` tokens."""
    full = ukv.MHASpec("full", full_layers, heads, head_dim, dtype, grow="up")
    swa = ukv.MHASpec("swa", swa_layers, heads, head_dim, dtype, grow="down")
    total = pages[0] * full.page_bytes(ps) + pages[1] * swa.page_bytes(ps)
    total += ukv.specs.reserved_floor([full, swa], ps)
    hp = ukv.build_swa_hybrid(
        full, swa, window=window, total_bytes=total, max_context_len=ps, page_size=ps,
        device=device, lazy=lazy, **kw,
    )  # fmt: skip
    return hp.pool, hp.allocator
