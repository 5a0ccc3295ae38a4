"""A small seeded hybrid language model in plain torch, agnostic of where its cache lives.

Two variants share one code path:

- ``mamba``: recurrent layers (a causal depthwise conv, then a gated linear recurrence
  ``S_t = a_t S_{t-1} + k_t v_t^T``, ``y_t = q_t S_t``: Mamba2 / gated-delta style, with a
  conv state and a temporal state per request) interleaved with full-attention layers.
- ``swa``: sliding-window attention layers interleaved with full-attention layers.

The model never stores anything itself: every layer hands its new K/V or its state to a
:class:`Cache` (``ukv.demo.pooled`` reads and writes through a ukv pool,
``ukv.demo.reference`` through plain per-request tensors). The math between the cache
reads and writes is the same function for both, on the same shapes, so with the same
bytes in the cache the two produce the same floats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import torch

Variant = Literal["mamba", "swa"]


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of the demo model (defaults: a few MFLOP per token, runs anywhere).

    Attributes:
        variant: ``"mamba"`` (recurrent + full attention) or ``"swa"`` (sliding + full).
        vocab: Vocabulary size.
        d_model: Residual width.
        num_layers: Layers; even layers are recurrent / sliding, odd ones full attention.
        q_heads: Attention query heads.
        kv_heads: Attention K/V heads (grouped-query attention).
        head_dim: Attention head size.
        window: Sliding window in tokens (``swa``).
        ssm_heads: Recurrent heads (``mamba``).
        ssm_dim: Recurrent head size: the temporal state is ``[ssm_heads, ssm_dim, ssm_dim]``.
        conv_width: Causal conv kernel width: the conv state keeps ``conv_width - 1`` inputs.
        seed: Weight seed.
    """

    variant: Variant = "mamba"
    vocab: int = 128
    d_model: int = 64
    num_layers: int = 4
    q_heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    window: int = 48
    ssm_heads: int = 4
    ssm_dim: int = 32
    conv_width: int = 4
    seed: int = 0

    def is_full(self, layer: int) -> bool:
        """Whether ``layer`` is a full-attention layer (the odd ones)."""
        return layer % 2 == 1

    @property
    def conv_channels(self) -> int:
        """Channels through the conv: q, k and v of every recurrent head."""
        return 3 * self.ssm_heads * self.ssm_dim

    @property
    def num_full(self) -> int:
        """Full-attention layers."""
        return self.num_layers // 2

    @property
    def num_other(self) -> int:
        """Recurrent (``mamba``) or sliding-window (``swa``) layers."""
        return self.num_layers - self.num_full


class Cache(Protocol):
    """Where the model's per-request memory lives. ``rid`` names a request; ``index`` is
    the layer's index among its kind (full or other)."""

    def attend_kv(
        self, full: bool, index: int, rid: int, start: int, lo: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k``, ``v`` (shape ``[n, kv_heads, head_dim]``) at positions
        ``[start, start + n)`` and return K, V of positions ``[lo, start + n)`` as float32."""
        ...

    def read_state(self, index: int, rid: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Conv state ``[conv_width - 1, conv_channels]`` and temporal state
        ``[ssm_heads, ssm_dim, ssm_dim]``, as float32 copies."""
        ...

    def write_state(self, index: int, rid: int, conv: torch.Tensor, temporal: torch.Tensor) -> None:
        """Store the request's new states (same shapes as :meth:`read_state`)."""
        ...


@dataclass(frozen=True)
class Chunk:
    """One request's share of a forward: ``tokens`` (shape ``[n]`` int64) at positions
    ``[start, start + n)``."""

    rid: int
    start: int
    tokens: torch.Tensor


class HybridModel:
    """Seeded random weights and the forward pass.

    Args:
        cfg: The shapes.
        device: Where the weights and activations live.
    """

    def __init__(self, cfg: ModelConfig, device: torch.device | str = "cpu") -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        gen = torch.Generator().manual_seed(cfg.seed)
        d = cfg.d_model

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, generator=gen) / shape[0] ** 0.5).to(self.device)

        self.embed = w(cfg.vocab, d) * cfg.vocab**0.5
        self.layers: list[dict[str, torch.Tensor]] = []
        for layer in range(cfg.num_layers):
            if cfg.variant == "swa" or cfg.is_full(layer):
                qkv = (cfg.q_heads + 2 * cfg.kv_heads) * cfg.head_dim
                p = {"in": w(d, qkv), "out": w(cfg.q_heads * cfg.head_dim, d)}
            else:
                inner = cfg.ssm_heads * cfg.ssm_dim
                p = {
                    "in": w(d, cfg.conv_channels + cfg.ssm_heads + inner),
                    "conv": w(cfg.conv_width, cfg.conv_channels),
                    "out": w(inner, d),
                }
            p["up"], p["down"] = w(d, 2 * d), w(2 * d, d)
            self.layers.append(p)
        self.head = w(d, cfg.vocab)

    def forward(self, chunks: list[Chunk], cache: Cache) -> torch.Tensor:
        """Run one batch step; the cache is read and written as a side effect.

        Args:
            chunks: The batch, one chunk per request (prefill chunks and decode tokens).
            cache: Where K/V and states are stored and read back.

        Returns:
            Tensor: shape ``[len(chunks), vocab]`` float32 logits at each chunk's last token.
        """
        cfg = self.cfg
        tokens = torch.cat([c.tokens for c in chunks]).to(self.device)
        x = self.embed[tokens]
        bounds = _bounds(chunks)
        counts = [0, 0]  # layers seen so far: [other, full]
        for layer, p in enumerate(self.layers):
            full = cfg.is_full(layer)
            index = counts[full]
            counts[full] += 1
            h = _rms(x) @ p["in"]
            if cfg.variant == "swa" or full:
                y = self._attention(h, chunks, bounds, cache, full, index)
            else:
                y = self._recurrent(h, p, chunks, bounds, cache, index)
            x = x + y @ p["out"]
            x = x + torch.nn.functional.gelu(_rms(x) @ p["up"]) @ p["down"]
        last = torch.tensor([b - 1 for _, b in bounds], device=self.device)
        return _rms(x[last]) @ self.head

    def _attention(
        self, h: torch.Tensor, chunks: list[Chunk], bounds: list[tuple[int, int]],
        cache: Cache, full: bool, index: int,
    ) -> torch.Tensor:
        cfg = self.cfg
        hd, nq, nkv = cfg.head_dim, cfg.q_heads, cfg.kv_heads
        q, k, v = h.split([nq * hd, nkv * hd, nkv * hd], dim=1)
        pos = torch.cat([torch.arange(c.start, c.start + len(c.tokens)) for c in chunks])
        pos = pos.to(self.device)
        q = _rope(q.reshape(-1, nq, hd), pos)
        k = _rope(k.reshape(-1, nkv, hd), pos)
        v = v.reshape(-1, nkv, hd)
        out = []
        for c, (a, b) in zip(chunks, bounds):
            lo = 0 if full else max(0, c.start - cfg.window + 1)
            keys, vals = cache.attend_kv(full, index, c.rid, c.start, lo, k[a:b], v[a:b])
            window = None if full else cfg.window
            out.append(_attend(q[a:b], keys, vals, c.start, lo, window))
        return torch.cat(out)

    def _recurrent(
        self, h: torch.Tensor, p: dict[str, torch.Tensor], chunks: list[Chunk],
        bounds: list[tuple[int, int]], cache: Cache, index: int,
    ) -> torch.Tensor:
        cfg = self.cfg
        xc, decay, gate = h.split([cfg.conv_channels, cfg.ssm_heads, h.shape[1] - cfg.conv_channels - cfg.ssm_heads], 1)
        out = []
        for c, (a, b) in zip(chunks, bounds):
            conv, temporal = cache.read_state(index, c.rid)
            y, conv, temporal = _mixer(cfg, p["conv"], xc[a:b], decay[a:b], conv, temporal)
            cache.write_state(index, c.rid, conv, temporal)
            out.append(y * torch.sigmoid(gate[a:b]))
        return torch.cat(out)


def _bounds(chunks: list[Chunk]) -> list[tuple[int, int]]:
    out, a = [], 0
    for c in chunks:
        out.append((a, a + len(c.tokens)))
        a += len(c.tokens)
    return out


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding over the last dim of ``x`` ``[T, H, D]``."""
    half = x.shape[-1] // 2
    freq = 10000.0 ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    ang = pos.to(torch.float32)[:, None, None] * freq
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, lo: int, window: int | None
) -> torch.Tensor:
    """Causal (optionally sliding) attention of one request's chunk.

    Args:
        q: shape ``[n, q_heads, D]``, queries at positions ``[start, start + n)``.
        k, v: shape ``[L, kv_heads, D]`` float32, keys at positions ``[lo, lo + L)``.

    Returns:
        Tensor: shape ``[n, q_heads * D]``.
    """
    n, nq, d = q.shape
    rep = nq // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / d**0.5
    qpos = torch.arange(start, start + n, device=q.device)[:, None]
    kpos = torch.arange(lo, lo + k.shape[0], device=q.device)[None, :]
    mask = kpos > qpos
    if window is not None:
        mask |= kpos <= qpos - window
    probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", probs, v).reshape(n, nq * d)


def _mixer(
    cfg: ModelConfig, weight: torch.Tensor, xc: torch.Tensor, decay: torch.Tensor,
    conv: torch.Tensor, temporal: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One request's chunk through the conv and the linear recurrence.

    Args:
        weight: shape ``[conv_width, C]`` depthwise conv taps.
        xc: shape ``[n, C]`` conv inputs; ``decay``: shape ``[n, ssm_heads]`` decay logits.
        conv: shape ``[conv_width - 1, C]`` previous inputs; ``temporal``: ``[H, D, D]``.

    Returns:
        (y ``[n, H * D]``, new conv state, new temporal state).
    """
    n, w = xc.shape[0], cfg.conv_width
    seq = torch.cat([conv, xc])  # [w - 1 + n, C]
    windows = seq.unfold(0, w, 1)  # [n, C, w]
    u = torch.nn.functional.silu(torch.einsum("ncw,wc->nc", windows, weight))
    H, D = cfg.ssm_heads, cfg.ssm_dim
    q, k, v = u.reshape(n, 3, H, D).unbind(1)
    k = torch.nn.functional.normalize(k, dim=-1)
    a = torch.sigmoid(decay)
    ys = []
    for t in range(n):
        temporal = a[t, :, None, None] * temporal + k[t, :, :, None] * v[t, :, None, :]
        ys.append(torch.einsum("hd,hde->he", q[t], temporal))
    return torch.stack(ys).reshape(n, H * D), seq[n:].clone(), temporal
