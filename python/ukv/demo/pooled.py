"""The model's cache through a ukv pool: every K/V row and every state lives in the pool.

Requests hold **virtual** ids only (tokens, state slots). Each step translates them once,
after the step's allocations and before its forward (nothing frees or flushes in between,
so the physical ids stay valid for the whole forward), stores new K/V with
``pool.set_kv`` at the translated ids, gathers K/V from ``pool.kv_views`` and reads and
writes states in ``pool.state_views`` at translated slots. Between steps, requests finish
and free (eager pools compact at once; lazy ones on ``flush``), moving other requests'
bytes under their virtual ids.

- :class:`MambaPooledCache`: full attention + recurrent state, one
  :func:`ukv.build_mamba_hybrid` pool (``MambaHybridAllocator`` and its ``mamba_slots``).
- :class:`SWAPooledCache`: full + sliding-window attention, one :func:`ukv.build_swa_hybrid`
  pool (``SWAHybridAllocator``: one virtual id per token for both sides; the SWA side of
  pages that left the window released with ``free_swa``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from ukv.demo.model import Chunk, Group, ModelConfig
from ukv.hybrid import build_mamba_hybrid, build_swa_hybrid
from ukv.pool import UnifiedKVPool
from ukv.specs import MambaSpec, MHASpec


class _PooledCache:
    """Bookkeeping shared by both variants: virtual ids per request, per-step translation."""

    pool: UnifiedKVPool
    full: Any

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, page_size: int) -> None:
        self.cfg, self.dtype, self.page_size = cfg, dtype, page_size
        self._ids: dict[int, torch.Tensor] = {}  # rid -> virtual full ids, host int64
        self._phys: dict[tuple[bool, int], torch.Tensor] = {}  # (full?, rid) -> this step's

    def _retry(self, op: Callable[[], Any], what: str) -> Any:
        """Run an allocation; a lazy pool packs (urgent flush) and tries once more. The
        scheduler admits only what fits, so a second failure is a bug worth stopping on."""
        res = op()
        if res is None and self.pool.lazy:
            self.pool.flush(urgent=True)
            res = op()
        if res is None:
            raise RuntimeError(f"pool out of room for {what}: {self.pool.stats()}")
        return res

    def _extend(
        self, alloc: Any, ids: dict[int, torch.Tensor], batch: list[tuple[int, int]]
    ) -> None:
        """Allocate each request's next ``n`` tokens in one ``alloc_extend`` call."""
        pre = torch.tensor([len(ids[r]) for r, _ in batch], dtype=torch.int64)
        seq = pre + torch.tensor([n for _, n in batch], dtype=torch.int64)
        last = torch.tensor([int(ids[r][-1]) if len(ids[r]) else -1 for r, _ in batch])
        total = int((seq - pre).sum())
        new = self._retry(
            lambda: alloc.alloc_extend(pre, pre, seq, seq, last, total, host=True),
            f"{total} tokens",
        )
        a = 0
        for r, n in batch:
            ids[r] = torch.cat([ids[r], new[a : a + n]])
            a += n

    def _translate(self, alloc: Any, ids: torch.Tensor) -> torch.Tensor:
        return alloc.translate_kv_loc(ids.to(self.pool.device))

    def _store_and_gather(
        self,
        name: str,
        layer: int,
        full: bool,
        group: Group,
        los: list[int],
        k: torch.Tensor,
        v: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One ``set_kv`` for the group's new rows, one gather of its keys (padded with
        the sink, then zeroed, as the reference pads)."""
        n, phys = group.n, [self._phys[(full, r)] for r in group.rids]
        new = torch.cat([p[s : s + n] for p, s in zip(phys, group.starts)])
        self.pool.set_kv(name, layer, new, k.flatten(0, 1), v.flatten(0, 1))
        spans = [p[lo : s + n] for p, s, lo in zip(phys, group.starts, los)]
        at = pad_sequence(spans, batch_first=True)  # [B, L]; 0 (the sink) past each end
        valid = (
            torch.arange(at.shape[1], device=at.device)
            < torch.tensor([len(x) for x in spans], device=at.device)[:, None]
        )
        ks, vs = self.pool.kv_views(name)
        pages, offs = at // self.page_size, at % self.page_size
        keep = valid[..., None, None]
        return (
            torch.where(keep, ks[layer][pages, offs].float(), 0.0),
            torch.where(keep, vs[layer][pages, offs].float(), 0.0),
        )


class MambaPooledCache(_PooledCache):
    """Full-attention K/V and recurrent states in one Mamba-hybrid ukv pool.

    Args:
        cfg: The model (``variant="mamba"``).
        total_bytes: Pool size.
        max_context_len: Longest request (the factory's boot check).
        dtype: K/V and conv-state dtype (the temporal state is float32).
        page_size: Tokens per KV page.
        device: Pool device.
        lazy: Lazy compaction.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        total_bytes: int,
        max_context_len: int,
        dtype: torch.dtype,
        page_size: int,
        device: torch.device | str,
        lazy: bool,
    ) -> None:
        super().__init__(cfg, dtype, page_size)
        full = MHASpec("full", cfg.num_full, cfg.kv_heads, cfg.head_dim, dtype, grow="up")
        mamba = MambaSpec(
            "mamba",
            layer_num=cfg.num_other,
            conv_shapes=((cfg.conv_width - 1, cfg.conv_channels),),
            conv_dtype=dtype,
            temporal_shape=(cfg.ssm_heads, cfg.ssm_dim, cfg.ssm_dim),
            temporal_dtype=torch.float32,
            grow="down",
        )
        hp = build_mamba_hybrid(
            full,
            mamba,
            total_bytes=total_bytes,
            max_context_len=max_context_len,
            page_size=page_size,
            device=device,
            lazy=lazy,
        )
        self.pool, self.full = hp.pool, hp.allocator
        self.slots = hp.allocator.mamba_slots
        self._slot: dict[int, torch.Tensor] = {}
        self._phys_slot: dict[int, int] = {}

    def request_bytes(self, num_tokens: int) -> tuple[int, int]:
        """(full-side, state-side) bytes one request of ``num_tokens`` tokens can reach."""
        pages = -(-num_tokens // self.page_size)
        return pages * self.pool.spec("full").page_bytes(self.page_size), self.pool.spec(
            "mamba"
        ).entry_bytes

    def admit(self, rid: int) -> None:
        """Give request ``rid`` a state slot (zeroed: a reused slot holds old bytes)."""
        self._slot[rid] = self._retry(lambda: self.slots.alloc(1, host=True), "a state")
        self._ids[rid] = torch.empty(0, dtype=torch.int64)
        s = int(self.slots.translate(self._slot[rid])[0])
        conv, temporal = self.pool.state_views("mamba")
        conv[0][:, s] = 0
        temporal[:, s] = 0

    def prepare(self, batch: list[tuple[int, int]]) -> None:
        """Allocate the step's tokens, then translate every id the forward will use."""
        self._extend(self.full, self._ids, batch)
        for r, _ in batch:
            self._phys[(True, r)] = self._translate(self.full, self._ids[r])
            self._phys_slot[r] = int(self.slots.translate(self._slot[r])[0])

    def after_step(self, chunks: list[Chunk]) -> None:
        """Nothing to trim on this variant."""

    def release(self, rid: int) -> None:
        """Free the request's tokens and its state slot."""
        self.full.free(self._ids.pop(rid))
        self.slots.free(self._slot.pop(rid))

    def attend_kv(self, full, index, group, los, k, v):  # type: ignore[no-untyped-def]
        """See :meth:`ukv.demo.model.Cache.attend_kv` (full layers only here)."""
        assert full, "the mamba variant has no sliding layers"
        return self._store_and_gather("full", index, True, group, los, k, v)

    def _slots(self, rids: list[int]) -> torch.Tensor:
        return torch.tensor([self._phys_slot[r] for r in rids], device=self.pool.device)

    def read_state(self, index: int, rids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """See :meth:`ukv.demo.model.Cache.read_state`."""
        conv, temporal = self.pool.state_views("mamba")
        s = self._slots(rids)
        return conv[0][index, s].float(), temporal[index, s]

    def write_state(
        self, index: int, rids: list[int], conv: torch.Tensor, temporal: torch.Tensor
    ) -> None:
        """See :meth:`ukv.demo.model.Cache.write_state`."""
        views, tview = self.pool.state_views("mamba")
        s = self._slots(rids)
        views[0][index, s] = conv.to(views[0].dtype)
        tview[index, s] = temporal


class SWAPooledCache(_PooledCache):
    """Full and sliding-window K/V in one :func:`ukv.build_swa_hybrid` pool: one virtual
    id per token for both sides (``SWAHybridAllocator``), the SWA side released with
    ``free_swa`` as tokens leave the window.

    Args: as :class:`MambaPooledCache` (``cfg.variant == "swa"``).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        total_bytes: int,
        max_context_len: int,
        dtype: torch.dtype,
        page_size: int,
        device: torch.device | str,
        lazy: bool,
    ) -> None:
        super().__init__(cfg, dtype, page_size)
        hybrid = build_swa_hybrid(
            full=MHASpec("full", cfg.num_full, cfg.kv_heads, cfg.head_dim, dtype, grow="up"),
            swa=MHASpec("swa", cfg.num_other, cfg.kv_heads, cfg.head_dim, dtype, grow="down"),
            window=cfg.window,
            total_bytes=total_bytes,
            max_context_len=max_context_len,
            page_size=page_size,
            device=device,
            lazy=lazy,
        )
        self.pool = hybrid.pool
        self.full = hybrid.allocator
        self._swa_freed: dict[int, int] = {}  # rid -> SWA pages already released

    def request_bytes(self, num_tokens: int) -> tuple[int, int]:
        """(full-side, SWA-side) bytes one request of ``num_tokens`` tokens can reach: the
        SWA side holds at most the window, the step's chunk and a partial page each side."""
        ps = self.page_size
        pages = -(-num_tokens // ps)
        swa_pages = min(pages, self._max_swa_pages)
        return (
            pages * self.pool.spec("full").page_bytes(ps),
            swa_pages * self.pool.spec("swa").page_bytes(ps),
        )

    #: Chunked prefill bounds the SWA side; the scheduler sets it (window + chunk + 2 pages).
    _max_swa_pages = 1 << 30

    def set_chunk(self, chunk: int) -> None:
        """Tell the cache the scheduler's prefill chunk (bounds a request's SWA pages)."""
        self._max_swa_pages = -(-(self.cfg.window + chunk) // self.page_size) + 2

    def admit(self, rid: int) -> None:
        """Start request ``rid`` with no tokens."""
        self._ids[rid] = torch.empty(0, dtype=torch.int64)
        self._swa_freed[rid] = 0

    def prepare(self, batch: list[tuple[int, int]]) -> None:
        """Allocate the step's tokens (both sides in one call), then translate every id in
        use on both sides (SWA ids whose side is released map to the sink, never read)."""
        self._extend(self.full, self._ids, batch)
        for r, _ in batch:
            ids = self._ids[r].to(self.pool.device)
            self._phys[(True, r)] = self.full.translate_kv_loc(ids)
            self._phys[(False, r)] = self.full.translate_loc_from_full_to_swa(ids).long()

    def after_step(self, chunks: list[Chunk]) -> None:
        """Release the SWA side of the pages no later query can see: every key before the
        next query's window start ``len - window + 1``."""
        ps = self.page_size
        for c in chunks:
            first_live = c.start + len(c.tokens) - self.cfg.window + 1
            dead = max(0, first_live) // ps
            done = self._swa_freed[c.rid]
            if dead > done:
                self.full.free_swa(self._ids[c.rid][done * ps : dead * ps])
                self._swa_freed[c.rid] = dead

    def release(self, rid: int) -> None:
        """Free the request's tokens (the full side and what is left of the SWA side)."""
        self.full.free(self._ids.pop(rid))
        del self._swa_freed[rid]

    def attend_kv(self, full, index, group, los, k, v):  # type: ignore[no-untyped-def]
        """See :meth:`ukv.demo.model.Cache.attend_kv`."""
        name = "full" if full else "swa"
        return self._store_and_gather(name, index, full, group, los, k, v)

    def read_state(self, index: int, rids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The SWA variant has no recurrent state."""
        raise AssertionError("the swa variant has no recurrent layers")

    def write_state(
        self, index: int, rids: list[int], conv: torch.Tensor, temporal: torch.Tensor
    ) -> None:
        """The SWA variant has no recurrent state."""
        raise AssertionError("the swa variant has no recurrent layers")
