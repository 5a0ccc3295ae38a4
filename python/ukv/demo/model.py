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


@dataclass(frozen=True)
class Chunk:
    """One request's share of a forward: ``tokens`` (shape ``[n]`` int64) at positions
    ``[start, start + n)``."""

    rid: int
    start: int
    tokens: torch.Tensor


@dataclass(frozen=True)
class Group:
    """Requests the model runs together through a layer's cache step: all decode tokens
    of a batch (``n == 1``), or one request's prefill chunk.

    Attributes:
        rids: The requests, ``B`` of them.
        starts: Each one's first position in this step.
        n: Tokens per request in this step.
        rows: shape ``[B * n]`` rows of the batch's token matrix, request-major.
    """

    rids: list[int]
    starts: list[int]
    n: int
    rows: torch.Tensor


class Cache(Protocol):
    """Where the model's per-request memory lives; ``index`` is the layer's index among
    its kind (full or other). Both implementations return the same shapes."""

    def attend_kv(
        self, full: bool, index: int, group: Group, los: list[int], k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k``, ``v`` (shape ``[B, n, kv_heads, head_dim]``) at each request's
        positions ``[start, start + n)``; return K, V of positions ``[lo, start + n)``,
        shape ``[B, L, kv_heads, head_dim]`` float32, ``L`` the longest, zero-padded."""
        ...

    def read_state(self, index: int, rids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Conv states ``[B, conv_width - 1, conv_channels]`` and temporal states
        ``[B, ssm_heads, ssm_dim, ssm_dim]``, float32 copies."""
        ...

    def write_state(
        self, index: int, rids: list[int], conv: torch.Tensor, temporal: torch.Tensor
    ) -> None:
        """Store the requests' new states (shapes as :meth:`read_state`)."""
        ...


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
        x = self.embed[torch.cat([c.tokens for c in chunks]).to(self.device)]
        pos = torch.cat([torch.arange(c.start, c.start + len(c.tokens)) for c in chunks])
        pos = pos.to(self.device)
        groups, last = _groups(chunks, self.device)
        counts = [0, 0]  # layers seen so far: [other, full]
        for layer, p in enumerate(self.layers):
            full = cfg.is_full(layer)
            index = counts[full]
            counts[full] += 1
            h = _rms(x) @ p["in"]
            y = torch.empty(h.shape[0], p["out"].shape[0], device=self.device)
            for g in groups:
                if cfg.variant == "swa" or full:
                    y[g.rows] = self._attention(h[g.rows], pos[g.rows], g, cache, full, index)
                else:
                    y[g.rows] = self._recurrent(h[g.rows], p, g, cache, index)
            x = x + y @ p["out"]
            x = x + torch.nn.functional.gelu(_rms(x) @ p["up"]) @ p["down"]
        return _rms(x[last]) @ self.head

    def _attention(
        self, h: torch.Tensor, pos: torch.Tensor, g: Group, cache: Cache, full: bool, index: int
    ) -> torch.Tensor:
        cfg = self.cfg
        hd, nq, nkv, b = cfg.head_dim, cfg.q_heads, cfg.kv_heads, len(g.rids)
        q, k, v = h.split([nq * hd, nkv * hd, nkv * hd], dim=1)
        q = _rope(q.reshape(-1, nq, hd), pos).reshape(b, g.n, nq, hd)
        k = _rope(k.reshape(-1, nkv, hd), pos).reshape(b, g.n, nkv, hd)
        v = v.reshape(b, g.n, nkv, hd)
        los = [0 if full else max(0, s - cfg.window + 1) for s in g.starts]
        keys, vals = cache.attend_kv(full, index, g, los, k, v)
        return _attend(q, keys, vals, g, los, None if full else cfg.window).reshape(b * g.n, -1)

    def _recurrent(
        self, h: torch.Tensor, p: dict[str, torch.Tensor], g: Group, cache: Cache, index: int
    ) -> torch.Tensor:
        cfg = self.cfg
        b, c, nh = len(g.rids), cfg.conv_channels, cfg.ssm_heads
        xc, decay, gate = h.reshape(b, g.n, -1).split([c, nh, h.shape[1] - c - nh], dim=-1)
        conv, temporal = cache.read_state(index, g.rids)
        y, conv, temporal = _mixer(cfg, p["conv"], xc, decay, conv, temporal)
        cache.write_state(index, g.rids, conv, temporal)
        return (y * torch.sigmoid(gate)).reshape(b * g.n, -1)


def _groups(chunks: list[Chunk], device: torch.device) -> tuple[list[Group], torch.Tensor]:
    """All decode tokens as one group, each prefill chunk as its own; and the row of each
    chunk's last token."""
    starts, a = [], 0
    for c in chunks:
        starts.append(a)
        a += len(c.tokens)
    last = torch.tensor([s + len(c.tokens) - 1 for s, c in zip(starts, chunks)], device=device)
    dec = [i for i, c in enumerate(chunks) if len(c.tokens) == 1]
    groups = []
    if dec:
        rows = torch.tensor([starts[i] for i in dec], device=device)
        groups.append(Group([chunks[i].rid for i in dec], [chunks[i].start for i in dec], 1, rows))
    for i, c in enumerate(chunks):
        if len(c.tokens) > 1:
            rows = torch.arange(starts[i], starts[i] + len(c.tokens), device=device)
            groups.append(Group([c.rid], [c.start], len(c.tokens), rows))
    return groups, last


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
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: Group, los: list[int], window: int | None
) -> torch.Tensor:
    """Causal (optionally sliding) attention of a group.

    Args:
        q: shape ``[B, n, q_heads, D]``, request b's queries at ``[start_b, start_b + n)``.
        k, v: shape ``[B, L, kv_heads, D]`` float32, request b's keys at ``[lo_b, lo_b + L)``
            (past ``start_b + n``: padding).

    Returns:
        Tensor: shape ``[B, n, q_heads * D]``.
    """
    b, n, nq, d = q.shape
    rep = nq // k.shape[2]
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    scores = q.transpose(1, 2) @ k.permute(0, 2, 3, 1) / d**0.5  # [B, H, n, L]
    dev = q.device
    qpos = torch.tensor(g.starts, device=dev)[:, None] + torch.arange(n, device=dev)  # [B, n]
    kpos = torch.tensor(los, device=dev)[:, None] + torch.arange(k.shape[1], device=dev)
    mask = kpos[:, None, :] > qpos[:, :, None]  # [B, n, L]; also hides the padding
    if window is not None:
        mask |= kpos[:, None, :] <= qpos[:, :, None] - window
    probs = scores.masked_fill(mask[:, None], float("-inf")).softmax(-1)
    return (probs @ v.transpose(1, 2)).transpose(1, 2).reshape(b, n, nq * d)


def _mixer(
    cfg: ModelConfig,
    weight: torch.Tensor,
    xc: torch.Tensor,
    decay: torch.Tensor,
    conv: torch.Tensor,
    temporal: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A group's chunks through the conv and the linear recurrence.

    Args:
        weight: shape ``[conv_width, C]`` depthwise conv taps.
        xc: shape ``[B, n, C]`` conv inputs; ``decay``: shape ``[B, n, ssm_heads]`` logits.
        conv: shape ``[B, conv_width - 1, C]`` previous inputs; ``temporal``: ``[B, H, D, D]``.

    Returns:
        (y ``[B, n, H * D]``, new conv states, new temporal states).
    """
    b, n, w = xc.shape[0], xc.shape[1], cfg.conv_width
    seq = torch.cat([conv, xc], dim=1)  # [B, w - 1 + n, C]
    u = torch.nn.functional.silu((seq.unfold(1, w, 1) * weight.T).sum(-1))  # [B, n, C]
    H, D = cfg.ssm_heads, cfg.ssm_dim
    q, k, v = u.reshape(b, n, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, n, D]
    k = torch.nn.functional.normalize(k, dim=-1)
    # The recurrence S_t = a_t S_{t-1} + k_t v_t^T in closed form over the chunk (a_t in
    # (0, 1)): with L = cumsum(log a), S_t = e^{L_t} S_0 + sum_{s<=t} e^{L_t - L_s} k_s v_s^T.
    logs = torch.nn.functional.logsigmoid(decay).transpose(1, 2).cumsum(-1)  # [B, H, n]
    rel = logs[..., :, None] - logs[..., None, :]
    rel = rel.masked_fill(torch.ones(n, n, dtype=torch.bool, device=xc.device).triu(1), -torch.inf)
    scores = (q @ k.transpose(-1, -2)) * rel.exp()  # [B, H, n, n]
    y = (q * logs.exp()[..., None]) @ temporal + scores @ v  # [B, H, n, D]
    tail = (logs[..., -1:] - logs).exp()[..., None]  # [B, H, n, 1]
    temporal = logs[..., -1].exp()[..., None, None] * temporal + (k * tail).transpose(-1, -2) @ v
    return y.transpose(1, 2).reshape(b, n, H * D), seq[:, n:].clone(), temporal
