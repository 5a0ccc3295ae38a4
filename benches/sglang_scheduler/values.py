"""What the bytes hold: content keys and their encoding as K/V rows and state slots.

A token's K/V depends on the tokens up to and including it (causal attention), so its
*content key* is a hash chain over the token ids: two requests sharing a prefix write
the same K/V there, and a radix-cache hit must hand out exactly those bytes. A request's
state after ``n`` tokens is keyed the same way (the key of its first ``n`` tokens);
the empty state (a cleared slot) is all zeros.

A key is spread over a row as bytes, each stored as a small integer (1..256) so every
dtype the pools use (bf16, fp16, fp32) holds it exactly: element ``j`` of a layer's K
row is byte ``j % 4`` of ``mix(key, layer, kind)`` XOR ``j // 4`` (salted so that a
row shifted or read from another layer does not match), plus one (never zero).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

_MOD = (1 << 31) - 1
_SEED = 0x1234567
K, V, CONV, TEMPORAL = 0, 1, 2, 3


def chain(tokens: Sequence[int], start: int = _SEED) -> np.ndarray:
    """Content keys of every prefix: ``out[i]`` keys ``tokens[: i + 1]``."""
    out = np.empty(len(tokens), dtype=np.int64)
    h = start
    for i, t in enumerate(tokens):
        h = (h * 1000003 + int(t) + 1) % _MOD
        out[i] = h
    return out


def mix(keys: torch.Tensor, layer: int, kind: int) -> torch.Tensor:
    """A 32-bit mix of each key with (layer, kind); int64 in, int64 out."""
    x = (keys * 0x9E3779B1 + layer * 0x85EBCA6B + kind * 0xC2B2AE35 + 0x27D4EB2F) & 0xFFFFFFFF
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def encode(
    keys: torch.Tensor, layer: int, kind: int, numel: int, dtype: torch.dtype
) -> torch.Tensor:
    """Rows for ``keys``: shape ``[len(keys), numel]`` of ``dtype``.

    Args:
        keys: int64 content keys, shape ``[n]`` (any device; the rows are built there).
    """
    m = mix(keys.to(torch.int64), layer, kind)
    j = torch.arange(numel, device=keys.device, dtype=torch.int64)
    shift = (j % 4) * 8
    byte = ((m[:, None] >> shift[None, :]) & 0xFF) ^ ((j // 4) & 0xFF)[None, :]
    return (byte + 1).to(dtype)
