"""A Jenga-style layout (Jenga, SOSP'25: "Effective Memory Management for Serving LLM with
Heterogeneity"): a two-level allocator over large pages of the least common multiple of the
layers' page sizes.

Each layer carves its small pages (a full-attention layer's ``P``-token page, a state layer's
one state, a sliding layer's ``P``-token page) out of *large* pages of ``lcm(small sizes)``
bytes; a large page belongs to one layer while any of its small pages is live, and returns
to the shared pool when the last one is freed. There is no padding (unlike vLLM's one page
size) and no compaction (unlike ukv): a large page half full of one kind's small pages is
lost to the other kind until it empties.

The layers of a kind allocate in lockstep (every full-attention layer holds the same pages
of the same requests), so the simulator runs one slab per kind (one representative layer)
and charges ``layers`` large pages for each large page it opens. Small pages go into the
most recently opened or freed-into large page that has room (Jenga's request-aware
placement keeps a request's pages together; new requests fill the holes others left).

Sliding-window presets have equal per-layer pages on both kinds (gpt-oss-120b: 32 KiB,
Gemma-3-27B: 128 KiB at 16 tokens), so their large page is one small page and the layout is
a page-granular shared pool; :class:`JengaBackend` counts it that way (and refuses an SWA
model whose per-layer pages differ).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ukv.errors import PoolConfigError
from ukv.models import ModelShape
from ukv.sim.backends import Backend, _window, pages, swa_pages, swa_step, window_pages


class JengaGeometry:
    """Page and large-page sizes of one model under Jenga.

    Attributes:
        small_full: One full-attention layer's ``P``-token page, bytes.
        small_other: One state layer's state, or one sliding layer's page, bytes.
        large: ``lcm(small_full, small_other)`` bytes.
        per_large_full, per_large_other: Small pages per large page.
        layers_full, layers_other: Layers of each kind.
        count: Large pages in ``total_bytes``.
    """

    def __init__(self, shape: ModelShape, total_bytes: int, page_size: int) -> None:
        full = shape.full
        if full is None or not shape.is_hybrid:
            raise PoolConfigError(f"model {shape.name!r} is not a hybrid: Jenga needs two kinds")
        self.layers_full = full.num_layers
        self.small_full = page_size * (shape.kv_bytes_per_token() // self.layers_full)
        if shape.kind == "mamba":
            assert shape.state is not None
            self.layers_other = shape.state.num_layers
            self.small_other = int(shape.state.bytes_per_layer())
        else:
            swa = shape._swa()
            self.layers_other = swa.num_layers
            self.small_other = page_size * (shape.swa_bytes_per_token() // self.layers_other)
        self.large = math.lcm(self.small_full, self.small_other)
        self.per_large_full = self.large // self.small_full
        self.per_large_other = self.large // self.small_other
        self.count = int(total_bytes) // self.large


class Slab:
    """Large pages of ``k`` small pages each, for one representative layer."""

    def __init__(self, k: int, n_max: int) -> None:
        self.k = int(k)
        self.fill = np.zeros(max(n_max, 1), dtype=np.int64)
        self.free_ids = list(range(max(n_max, 1) - 1, -1, -1))
        self.partial: list[int] = []
        self.in_partial = np.zeros(max(n_max, 1), dtype=bool)
        self.used = 0  # large pages open
        self.room = 0  # free small pages in open large pages

    def new_needed(self, n: int) -> int:
        """Large pages ``n`` more small pages would open."""
        return max(0, -(-(n - self.room) // self.k))

    def alloc(self, n: int) -> np.ndarray:
        """``n`` small pages (the caller checked the large pages exist); their large ids."""
        out = np.empty(n, dtype=np.int64)
        i = 0
        while i < n:
            lid = -1
            while self.partial:
                c = self.partial[-1]
                if self.in_partial[c] and 0 < self.fill[c] < self.k:
                    lid = c
                    break
                self.partial.pop()
                if self.fill[c] in (0, self.k):
                    self.in_partial[c] = False
            if lid < 0:
                lid = self.free_ids.pop()
                self.used += 1
                self.room += self.k
            take = min(self.k - int(self.fill[lid]), n - i)
            out[i : i + take] = lid
            self.fill[lid] += take
            self.room -= take
            i += take
            if self.fill[lid] == self.k:
                self.in_partial[lid] = False
            elif not self.in_partial[lid]:
                self.partial.append(lid)
                self.in_partial[lid] = True
        return out

    def free(self, lids: np.ndarray) -> None:
        if lids.size == 0:
            return
        ids, counts = np.unique(lids, return_counts=True)
        for lid, c in zip(ids.tolist(), counts.tolist()):
            self.fill[lid] -= c
            self.room += c
            assert self.fill[lid] >= 0
            if self.fill[lid] == 0:
                self.used -= 1
                self.room -= self.k
                self.in_partial[lid] = False
                self.free_ids.append(lid)
            elif not self.in_partial[lid]:
                self.partial.append(lid)
                self.in_partial[lid] = True


class JengaBackend(Backend):
    """The layout of the module docstring (Mamba hybrids: slabs; SWA presets: a page pool).

    Args:
        shape: A hybrid model (one rank).
        total_bytes: Bytes of the pool.
        page_size: Tokens per full-attention (and sliding) page.
        name: Label.

    Raises:
        PoolConfigError: not a hybrid, or an SWA model whose per-layer pages differ.
    """

    def __init__(
        self, shape: ModelShape, total_bytes: int, page_size: int, name: str = "jenga"
    ) -> None:
        self.name, self.total_bytes, self.kind, self.P = (
            name,
            int(total_bytes),
            shape.kind,
            page_size,
        )
        self.page_tokens = page_size
        self.short = "any"
        self.geo = g = JengaGeometry(shape, total_bytes, page_size)
        self.full_page = shape.kv_bytes_per_token() * page_size
        if self.kind == "swa":
            if g.per_large_full != 1 or g.per_large_other != 1:
                raise PoolConfigError(
                    f"model {shape.name!r}: Jenga's SWA layout is simulated for equal per-layer "
                    f"pages only (here {g.small_full} and {g.small_other} bytes)"
                )
            self.window = _window(shape)
            self.other_unit = shape.swa_bytes_per_token() * page_size
            self.full_used = 0  # pages (each g.layers_full large pages)
            self.other_used = 0
        else:
            self.other_unit = shape.state_bytes_per_request()
            self.sf = Slab(g.per_large_full, g.count // g.layers_full + 1)
            self.so = Slab(g.per_large_other, g.count // g.layers_other + 1)
            self.own: dict[int, list[np.ndarray]] = {}
            self.state: dict[int, int] = {}

    # -- large-page accounting --

    def _free_large(self) -> int:
        g = self.geo
        if self.kind == "swa":
            return g.count - g.layers_full * self.full_used - g.layers_other * self.other_used
        return g.count - g.layers_full * self.sf.used - g.layers_other * self.so.used

    def _fits_new(self, full_pages: int, states: int) -> bool:
        g = self.geo
        need = g.layers_full * self.sf.new_needed(full_pages) + g.layers_other * self.so.new_needed(
            states
        )
        return need <= self._free_large()

    # -- Backend --

    def admit(self, r: int) -> bool:
        if self.kind == "swa":
            return True
        self.own.setdefault(r, [])
        if not self._fits_new(0, 1):
            return False
        self.state[r] = int(self.so.alloc(1)[0])
        return True

    def grow(self, rids: np.ndarray, old: np.ndarray, new: np.ndarray) -> bool:
        need = pages(new, self.P) - pages(old, self.P)
        k = int(need.sum())
        if self.kind == "swa":
            step = swa_step(old, new, self.P, self.window)
            g = self.geo
            extra = g.layers_full * k + g.layers_other * step.need
            if extra > self._free_large():
                return False
            self.full_used += k
            self.other_used += step.change
            self.bytes_freed += step.freed * self.other_unit
            return True
        if k == 0:
            return True
        if not self._fits_new(k, 0):
            return False
        lids = self.sf.alloc(k)
        idx = np.flatnonzero(need)
        parts = np.split(lids, np.cumsum(need[idx])[:-1]) if idx.size else []
        for r, part in zip(rids[idx].tolist(), parts):
            self.own.setdefault(r, []).append(part)
        return True

    def release(self, rids: np.ndarray, held: np.ndarray) -> None:
        if self.kind == "swa":
            full = int(pages(held, self.P).sum())
            other = int(swa_pages(held, self.P, self.window).sum())
            self.full_used -= full
            self.other_used -= other
            self.bytes_freed += full * self.full_page + other * self.other_unit
            return
        lids = []
        for r in rids.tolist():
            lids.extend(self.own.pop(r, []))
            s = self.state.pop(r, None)
            if s is not None:
                self.so.free(np.array([s]))
                self.bytes_freed += self.other_unit
        if lids:
            arr = np.concatenate(lids)
            self.sf.free(arr)
            self.bytes_freed += int(arr.size) * self.full_page

    def fits(self, states: int, tokens: int, ev_pages: int = 0, ev_ckpt: int = 0) -> bool:
        g = self.geo
        if self.kind == "swa":
            win = states * window_pages(self.window, self.P)
            need = g.layers_full * int(pages(tokens, self.P)) + g.layers_other * win
            have = self._free_large() + g.layers_full * ev_pages + g.layers_other * ev_ckpt
            return need <= have
        # Evictable small pages count as free room (optimistic: their large pages may
        # still hold other live pages).
        nf = max(0, -(-(int(pages(tokens, self.P)) - self.sf.room - ev_pages) // self.sf.k))
        no = max(0, -(-(states - self.so.room - ev_ckpt) // self.so.k))
        return g.layers_full * nf + g.layers_other * no <= self._free_large()

    def fits_alone(self, tokens: int) -> bool:
        g = self.geo
        if self.kind == "swa":
            need = g.layers_full * int(pages(tokens, self.P)) + g.layers_other * window_pages(
                self.window, self.P
            )
            return need <= g.count
        nf = -(-int(pages(tokens, self.P)) // g.per_large_full)
        return g.layers_full * nf + g.layers_other <= g.count

    def usage(self) -> tuple[int, int]:
        g = self.geo
        if self.kind == "swa":
            return self.full_used * self.full_page, self.other_used * self.other_unit
        return g.layers_full * self.sf.used * g.large, g.layers_other * self.so.used * g.large

    # -- prefix cache --

    def tree_adopt(self, r: int, held: int, k: int, keep_window: bool = False) -> tuple[Any, Any]:
        if self.kind == "swa":
            gone = int(swa_pages(np.int64(held), self.P, self.window)) - int(
                swa_pages(np.int64(max(held - k * self.P, 0)), self.P, self.window)
            )
            if keep_window and gone > 0:
                return k, gone
            self.other_used -= gone
            self.bytes_freed += gone * self.other_unit
            return k, None
        own = self.own.get(r, [])
        ids = np.concatenate(own) if own else np.empty(0, dtype=np.int64)
        self.own[r] = [ids[k:]] if ids.size > k else []
        return ids[:k], None

    def tree_free(self, handle: Any) -> None:
        if self.kind == "swa":
            self.full_used -= int(handle)
            self.bytes_freed += int(handle) * self.full_page
            return
        self.sf.free(handle)
        self.bytes_freed += int(handle.size) * self.full_page

    def tree_split(self, handle: Any, k: int) -> tuple[Any, Any]:
        if self.kind == "swa":
            return k, int(handle) - k
        return handle[:k], handle[k:]

    def ckpt_copy(self) -> Any:
        if self.kind == "swa" or not self._fits_new(0, 1):
            return None
        return self.so.alloc(1)

    def ckpt_donate(self, r: int) -> Any:
        if self.kind == "swa":
            return None
        s = self.state.pop(r, None)
        return None if s is None else np.array([s])

    def ckpt_free(self, handle: Any) -> None:
        if self.kind == "swa":
            self.other_used -= int(handle)
            self.bytes_freed += int(handle) * self.other_unit
            return
        self.so.free(handle)
        self.bytes_freed += self.other_unit

    def ckpt_units(self, handle: Any) -> int:
        return int(handle) if self.kind == "swa" else int(handle.size)
