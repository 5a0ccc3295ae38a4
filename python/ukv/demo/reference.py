"""The reference cache: plain per-request tensors, no pool, nothing ever moves.

It stores what the pooled cache stores, in the same dtypes (K/V and conv state in the
cache dtype, the temporal state in float32), so a correct pool makes the model compute
exactly the same floats with either.
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence

from ukv.demo.model import Group, ModelConfig


class ReferenceCache:
    """Per-request K/V lists and state tensors.

    Args:
        cfg: The model's shapes.
        dtype: Storage dtype of K/V and of the conv state.
        device: Where the tensors live.
    """

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device | str) -> None:
        self.cfg, self.dtype, self.device = cfg, dtype, torch.device(device)
        self._kv: dict[tuple[bool, int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self._state: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def admit(self, rid: int) -> None:
        """Give request ``rid`` empty K/V and zero states."""
        cfg = self.cfg
        empty = torch.empty(0, cfg.kv_heads, cfg.head_dim, dtype=self.dtype, device=self.device)
        for full in (False, True):
            for i in range(cfg.num_full if full else cfg.num_other):
                self._kv[(full, i, rid)] = (empty, empty)
        if cfg.variant == "mamba":
            for i in range(cfg.num_other):
                conv = torch.zeros(cfg.conv_width - 1, cfg.conv_channels, dtype=self.dtype)
                temporal = torch.zeros(cfg.ssm_heads, cfg.ssm_dim, cfg.ssm_dim)
                self._state[(i, rid)] = (conv.to(self.device), temporal.to(self.device))

    def release(self, rid: int) -> None:
        """Drop everything request ``rid`` holds."""
        for kv in [k for k in self._kv if k[2] == rid]:
            del self._kv[kv]
        for st in [k for k in self._state if k[1] == rid]:
            del self._state[st]

    def attend_kv(
        self, full: bool, index: int, group: Group, los: list[int], k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """See :meth:`ukv.demo.model.Cache.attend_kv`."""
        keys, vals = [], []
        for b, (rid, start, lo) in enumerate(zip(group.rids, group.starts, los)):
            ks, vs = self._kv[(full, index, rid)]
            assert ks.shape[0] == start, (rid, ks.shape[0], start)
            ks = torch.cat([ks, k[b].to(self.dtype)])
            vs = torch.cat([vs, v[b].to(self.dtype)])
            self._kv[(full, index, rid)] = (ks, vs)
            keys.append(ks[lo:].float())
            vals.append(vs[lo:].float())
        return pad_sequence(keys, batch_first=True), pad_sequence(vals, batch_first=True)

    def read_state(self, index: int, rids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """See :meth:`ukv.demo.model.Cache.read_state`."""
        states = [self._state[(index, r)] for r in rids]
        conv = torch.stack([c for c, _ in states]).float()
        return conv, torch.stack([t for _, t in states])

    def write_state(
        self, index: int, rids: list[int], conv: torch.Tensor, temporal: torch.Tensor
    ) -> None:
        """See :meth:`ukv.demo.model.Cache.write_state`."""
        conv = conv.to(self.dtype)
        for b, r in enumerate(rids):
            self._state[(index, r)] = (conv[b].clone(), temporal[b].clone())
