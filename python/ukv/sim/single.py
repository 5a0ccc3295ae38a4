"""A model with one kind of cache (full attention only, state only, or sliding window only):
one pool, so the unified pool, SGLang's split and vLLM's padded pool are the same layout.

:class:`SingleKindBackend` counts that one pool (pages of ``page_size`` tokens, or one slot
per request for a pure state model). It is also SGLang's layout for Gemma 2/3, which SGLang
serves with hybrid SWA memory off (every layer keeps full KV):
:func:`ukv.sim.baselines.all_full_shape` makes that shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ukv.errors import PoolConfigError
from ukv.models import ModelShape
from ukv.sim.backends import Backend, pages, swa_pages, swa_step, window_pages

__all__ = ["SingleKindBackend"]


class SingleKindBackend(Backend):
    """One pool of one cache kind, counted with integer arithmetic.

    * ``"full"``: a request holds ``pages(tokens)`` pages of ``kv_bytes_per_token * P``.
    * ``"sliding"``: a request holds ``min(pages(tokens), pages(window) + 1)`` pages; a
      prefill chunk takes its pages first, then the pages before the window are freed.
    * ``"state"``: a request holds one state slot; tokens cost nothing.

    Args:
        shape: A single-kind model (one rank).
        total_bytes: Pool bytes.
        page_size: Tokens per page.
        name: Label.

    Raises:
        PoolConfigError: ``shape`` is a hybrid (use the hybrid backends).
    """

    def __init__(
        self, shape: ModelShape, total_bytes: int, page_size: int, name: str = "unified"
    ) -> None:
        if shape.is_hybrid:
            raise PoolConfigError(
                f"model {shape.name!r} is a {shape.kind!r} hybrid, not a single-kind model"
            )
        self.name, self.total_bytes, self.kind, self.P = (
            name,
            int(total_bytes),
            shape.kind,
            page_size,
        )
        if self.kind == "state":
            self.unit = shape.state_bytes_per_request()
        elif self.kind == "full":
            self.unit = shape.kv_bytes_per_token() * page_size
        else:
            swa = shape._swa()
            assert swa.window is not None
            self.window = int(swa.window)
            self.unit = shape.swa_bytes_per_token() * page_size
        self.cap = self.total_bytes // self.unit
        self.used = 0
        self.states = 0
        self.page_tokens = page_size
        self.short = "full"

    def _held(self, tokens: np.ndarray | int) -> np.ndarray:
        if self.kind == "full":
            return np.asarray(pages(tokens, self.P))
        return swa_pages(np.asarray(tokens), self.P, self.window)

    def admit(self, r: int) -> bool:
        if self.kind != "state":
            return True
        if self.used + 1 > self.cap:
            return False
        self.used += 1
        self.states += 1
        return True

    def grow(self, rids: np.ndarray, old: np.ndarray, new: np.ndarray) -> bool:
        if self.kind == "state":
            return True
        if self.kind == "full":
            need = int((pages(new, self.P) - pages(old, self.P)).sum())
            if self.used + need > self.cap:
                return False
            self.used += need
            return True
        step = swa_step(old, new, self.P, self.window)
        if self.used + step.need > self.cap:
            return False
        self.used += step.change
        self.bytes_freed += step.freed * self.unit
        return True

    def release(self, rids: np.ndarray, held: np.ndarray) -> None:
        n = int(rids.size) if self.kind == "state" else int(self._held(held).sum())
        self.states -= int(rids.size) if self.kind == "state" else 0
        self.used -= n
        self.bytes_freed += n * self.unit

    def fits(self, states: int, tokens: int, ev_pages: int = 0, ev_ckpt: int = 0) -> bool:
        if self.kind == "state":
            return self.used + states <= self.cap
        if self.kind == "full":
            return self.used - ev_pages + int(pages(tokens, self.P)) <= self.cap
        window = states * window_pages(self.window, self.P)
        return self.used + min(window, int(pages(tokens, self.P)) + states) <= self.cap

    def fits_alone(self, tokens: int) -> bool:
        if self.kind == "state":
            return self.cap >= 1
        return int(self._held(int(tokens))) <= self.cap

    def usage(self) -> tuple[int, int]:
        if self.kind == "full":
            return self.used * self.unit, 0
        return 0, self.used * self.unit

    # -- prefix cache (full-attention pools only: tree pages stay in ``used``) --

    def tree_adopt(self, r: int, held: int, k: int, keep_window: bool = False) -> tuple[Any, Any]:
        assert self.kind == "full", "prefix caching is simulated on full-attention pools"
        return k, None

    def tree_free(self, handle: Any) -> None:
        self.used -= int(handle)
        self.bytes_freed += int(handle) * self.unit

    def tree_split(self, handle: Any, k: int) -> tuple[Any, Any]:
        return k, int(handle) - k

    def ckpt_free(self, handle: Any) -> None:
        raise AssertionError("a full-attention pool holds no checkpoints")

    def ckpt_units(self, handle: Any) -> int:
        return 0
