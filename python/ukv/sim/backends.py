"""Memory backends the serving loop runs against: the real ukv pool, and the baselines.

Every backend answers the same four questions for a request ``r`` holding ``h`` tokens on
the full-attention side: take its state (``admit``), grow it from ``old`` to ``new`` tokens
(``grow``, all or nothing, for a whole batch), give everything back (``release``), and
would ``k`` more states plus ``n`` more tokens fit (``fits``, the admission check).

* :class:`UnifiedBackend` is the real :class:`ukv.UnifiedKVPool` on ``device="meta"``:
  the allocator runs, compaction moves are planned and counted, no bytes exist.
* :class:`SplitBackend` is a static split, two fixed budgets of the same total bytes,
  counted with integer arithmetic (what SGLang does with ``mamba_full_memory_ratio`` /
  ``swa_full_tokens_ratio``; the rules are in docs/SIMULATOR.md).
* :class:`PaddedBackend` is vLLM's single page size: one pool of equal blocks, computed
  per layer and shared by groups of layers (:func:`vllm_blocks`), in vLLM's dtypes.

With prefix caching (:mod:`ukv.sim.prefix`) a request's *own* tokens are those the radix
tree does not hold; the tree takes pages over from a request (``tree_adopt``), frees them
(``tree_free``), splits them (``tree_split``) and holds checkpoints (``ckpt_copy``, a new
state; ``ckpt_donate``, the request's own state; ``tree_adopt(keep_window=True)``, the
request's window KV; ``ckpt_free``). Tree pages and checkpoints count as used memory; the
admission check may count what the tree could evict (``fits(..., ev_pages, ev_ckpt)``), as
SGLang's ``available + evictable`` does. ``short`` says which side ran out when an
allocation failed (``"full"``, ``"ckpt"``, or ``"any"`` for one pool).

Sliding-window side (SWA models), all backends alike: new tokens are written to both
sides, so growing ``old → new`` takes ``pages(new) − pages(old)`` pages on each side
first (the whole prefill chunk); then the SWA pages wholly before the window are
released, leaving ``min(pages(new), ceil(window / P) + 1)``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ukv.models import ModelShape
from ukv.models.dtypes import apply_engine_dtypes

SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9
"""SGLang's default ``mamba_full_memory_ratio``: state bytes / full-attention bytes."""
SGLANG_SWA_FULL_TOKENS_RATIO = 0.8
"""SGLang's default ``swa_full_tokens_ratio``: SWA tokens / full-attention tokens."""
VLLM_ALIGN = 16
"""vLLM's attention block alignment in tokens (FlashAttention / FlashInfer kernels)."""
VLLM_ALIGN_MLA = 64
"""vLLM's block alignment for MLA attention backends (``HybridAttentionMambaModelConfig``)."""
VLLM_GROUP_SLACK = 1.5
"""vLLM groups by the larger layer count when it is below this multiple of the smaller."""


def pages(tokens: np.ndarray | np.integer | int, page: int) -> Any:
    """``ceil(tokens / page)`` for ints or int64 arrays."""
    return -(-tokens // page)


def _window(shape: ModelShape) -> int:
    """The sliding window of an SWA model, in tokens."""
    window = shape._swa().window
    assert window is not None, f"{shape.name}: an SWA model without a window"
    return int(window)


def window_pages(window: int, page: int) -> int:
    """The most SWA pages a request holds between steps: its window plus one page (the
    window rarely starts on a page boundary)."""
    return int(pages(window, page)) + 1


def swa_pages(tokens: np.ndarray | np.integer, page: int, window: int) -> np.ndarray:
    """SWA pages a request of ``tokens`` holds between steps (the window plus one page)."""
    return np.minimum(pages(tokens, page), window_pages(window, page))


class SwaStep(NamedTuple):
    """Pages of an SWA side over one step (see :func:`swa_step`)."""

    need: int  # taken at the step's peak, before the out-of-window pages go
    change: int  # held after the step minus held before it
    freed: int  # released at the end of the step


def swa_step(old: np.ndarray, new: np.ndarray, page: int, window: int) -> SwaStep:
    """What one step from ``old`` to ``new`` tokens costs an SWA side, summed over requests:
    a prefill chunk takes all its pages first, then the pages that fell out of the window go.
    """
    held = swa_pages(old, page, window)
    peak = held + pages(new, page) - pages(old, page)
    after = swa_pages(new, page, window)
    return SwaStep(int((peak - held).sum()), int((after - held).sum()), int((peak - after).sum()))


class Backend:
    """What the serving loop needs from a memory layout (see the module docstring).

    Attributes:
        name: Label in tables and plots.
        total_bytes: Bytes it manages.
        bytes_freed: Bytes released so far (for moved-per-freed).
    """

    name: str
    total_bytes: int
    bytes_freed: int = 0

    def admit(self, r: int) -> bool:
        """Take request ``r``'s state (or nothing); False when it does not fit."""
        raise NotImplementedError

    def grow(self, rids: np.ndarray, old: np.ndarray, new: np.ndarray) -> bool:
        """Grow each ``rids[i]`` from ``old[i]`` to ``new[i]`` full tokens, all or none."""
        raise NotImplementedError

    def release(self, rids: np.ndarray, held: np.ndarray) -> None:
        """Give back everything of these requests (state included)."""
        raise NotImplementedError

    def fits(self, states: int, tokens: int, ev_pages: int = 0, ev_ckpt: int = 0) -> bool:
        """Whether ``states`` more states and ``tokens`` more full tokens fit now, counting
        ``ev_pages`` tree pages and ``ev_ckpt`` checkpoint units the tree could evict."""
        raise NotImplementedError

    def fits_alone(self, tokens: int) -> bool:
        """Whether one request of ``tokens`` tokens (and its state) fits the empty layout;
        engines reject a request that does not."""
        raise NotImplementedError

    def usage(self) -> tuple[int, int]:
        """Bytes in use: ``(full-attention side, state or SWA side)``."""
        raise NotImplementedError

    def bytes_moved(self) -> int:
        """Bytes compaction moved so far (0 for layouts that never move)."""
        return 0

    # -- the prefix cache's side (see the module docstring) --

    page_tokens: int = 16
    """Tokens per page of this layout (the radix tree's page)."""
    short: str = "full"
    """Which side the last failed allocation lacked: ``"full"``, ``"ckpt"`` or ``"any"``."""

    def tree_adopt(self, r: int, held: int, k: int, keep_window: bool = False) -> tuple[Any, Any]:
        """Hand the first ``k`` of request ``r``'s own pages (it holds ``held`` own tokens)
        to the tree. SWA: the SWA pages of those tokens leave the request too: kept as a
        checkpoint handle (``keep_window``) or freed. Returns ``(kv handle, window handle or
        None)``."""
        raise NotImplementedError

    def tree_free(self, handle: Any) -> None:
        """Free tree pages."""
        raise NotImplementedError

    def tree_split(self, handle: Any, k: int) -> tuple[Any, Any]:
        """A handle of pages cut after its first ``k`` pages."""
        raise NotImplementedError

    def ckpt_copy(self) -> Any:
        """A new state for a checkpoint (None: it does not fit; ``short`` says why)."""
        return None

    def ckpt_donate(self, r: int) -> Any:
        """Request ``r``'s own state becomes a checkpoint (``r`` holds none after)."""
        return None

    def ckpt_free(self, handle: Any) -> None:
        """Free a checkpoint (a state, or window pages)."""
        raise NotImplementedError

    def ckpt_units(self, handle: Any) -> int:
        """A checkpoint's size: states, or SWA pages."""
        raise NotImplementedError

    def ckpt_split(self, handle: Any, k: int) -> tuple[Any, Any]:
        """A window checkpoint cut after its first (oldest) ``k`` SWA pages (page-count
        handles; :class:`UnifiedBackend` overrides for its page ids)."""
        return k, int(handle) - k

    def ckpt_merge(self, a: Any, b: Any) -> Any:
        """Two window checkpoint handles as one (``a`` the older pages)."""
        return int(a) + int(b)


# ----- static budgets ---------------------------------------------------------------------


class SplitBackend(Backend):
    """A static split: ``share`` of the bytes to the state (or SWA) side, the rest to full
    attention, each side a fixed count of pages (slots for Mamba).

    Args:
        shape: The model (one rank).
        total_bytes: Bytes of both sides together.
        share: Fraction of bytes given to the state / SWA side, in ``(0, 1)``.
        page_size: Tokens per KV page.
        name: Label.
    """

    def __init__(
        self, shape: ModelShape, total_bytes: int, share: float, page_size: int, name: str
    ) -> None:
        self.name, self.total_bytes, self.share, self.P = name, int(total_bytes), share, page_size
        self.page_tokens = page_size
        self.kind = shape.kind
        self.full_page = shape.kv_bytes_per_token() * page_size
        if self.kind == "mamba":
            self.other_unit = shape.state_bytes_per_request()
        else:
            self.other_unit = shape.swa_bytes_per_token() * page_size
            self.window = _window(shape)
        self.other_cap = int(total_bytes * share) // self.other_unit
        self.full_cap = (self.total_bytes - self.other_cap * self.other_unit) // self.full_page
        self.full_used = 0
        self.other_used = 0
        self.stateful: set[int] = set()

    def admit(self, r: int) -> bool:
        if self.kind != "mamba":
            return True
        if self.other_used + 1 > self.other_cap:
            self.short = "ckpt"
            return False
        self.other_used += 1
        self.stateful.add(r)
        return True

    def grow(self, rids: np.ndarray, old: np.ndarray, new: np.ndarray) -> bool:
        dfull = int((pages(new, self.P) - pages(old, self.P)).sum())
        if self.full_used + dfull > self.full_cap:
            self.short = "full"
            return False
        if self.kind == "swa":
            step = swa_step(old, new, self.P, self.window)
            if self.other_used + step.need > self.other_cap:
                self.short = "ckpt"
                return False
            self.other_used += step.change
            self.bytes_freed += step.freed * self.other_unit
        self.full_used += dfull
        return True

    def release(self, rids: np.ndarray, held: np.ndarray) -> None:
        full = int(pages(held, self.P).sum())
        if self.kind == "mamba":
            other = 0
            for r in rids.tolist():
                if r in self.stateful:
                    self.stateful.remove(r)
                    other += 1
        else:
            other = int(swa_pages(held, self.P, self.window).sum())
        self.full_used -= full
        self.other_used -= other
        self.bytes_freed += full * self.full_page + other * self.other_unit

    def fits(self, states: int, tokens: int, ev_pages: int = 0, ev_ckpt: int = 0) -> bool:
        ok = self.full_used - ev_pages + pages(tokens, self.P) <= self.full_cap
        if self.kind == "mamba":
            return ok and self.other_used - ev_ckpt + states <= self.other_cap
        win = states * window_pages(self.window, self.P)
        return ok and self.other_used - ev_ckpt + win <= self.other_cap

    def fits_alone(self, tokens: int) -> bool:
        other = 1 if self.kind == "mamba" else window_pages(self.window, self.P)
        return pages(tokens, self.P) <= self.full_cap and other <= self.other_cap

    def usage(self) -> tuple[int, int]:
        return self.full_used * self.full_page, self.other_used * self.other_unit

    # -- prefix cache: counts only (tree pages stay in full_used) --

    def tree_adopt(self, r: int, held: int, k: int, keep_window: bool = False) -> tuple[Any, Any]:
        win = None
        if self.kind == "swa":
            gone = int(swa_pages(np.int64(held), self.P, self.window)) - int(
                swa_pages(np.int64(max(held - k * self.P, 0)), self.P, self.window)
            )
            if keep_window and gone > 0:
                win = gone
            else:
                self.other_used -= gone
                self.bytes_freed += gone * self.other_unit
        return k, win

    def tree_free(self, handle: Any) -> None:
        self.full_used -= int(handle)
        self.bytes_freed += int(handle) * self.full_page

    def tree_split(self, handle: Any, k: int) -> tuple[Any, Any]:
        return k, int(handle) - k

    def ckpt_copy(self) -> Any:
        if self.kind != "mamba" or self.other_used + 1 > self.other_cap:
            self.short = "ckpt"
            return None
        self.other_used += 1
        return 1

    def ckpt_donate(self, r: int) -> Any:
        if r not in self.stateful:
            return None
        self.stateful.remove(r)
        return 1

    def ckpt_free(self, handle: Any) -> None:
        self.other_used -= int(handle)
        self.bytes_freed += int(handle) * self.other_unit

    def ckpt_units(self, handle: Any) -> int:
        return int(handle)


def sglang_default_share(shape: ModelShape) -> float:
    """The state / SWA byte share SGLang's default ratios give.

    Mamba: ``mamba_full_memory_ratio`` r is state bytes over full bytes, so the state
    share is ``r / (1 + r)``. SWA: ``swa_full_tokens_ratio`` r is SWA tokens over full
    tokens, so the SWA share of bytes is ``r·swa / (kv + r·swa)`` (bytes per token).
    """
    if shape.kind == "mamba":
        r = SGLANG_MAMBA_FULL_MEMORY_RATIO
        return r / (1 + r)
    r = SGLANG_SWA_FULL_TOKENS_RATIO
    swa, kv = shape.swa_bytes_per_token(), shape.kv_bytes_per_token()
    return r * swa / (kv + r * swa)


class VllmBlocks(NamedTuple):
    """vLLM's one block size for a hybrid model (see :func:`vllm_blocks`)."""

    page: int  # bytes of one layer's page (every layer's page is this size)
    group: int  # layers per group; a block id costs ``group * page`` bytes
    full_tokens: int  # tokens of one full-attention page
    other_tokens: int  # tokens of one SWA page (Mamba: 0, a state page holds one state)
    full_groups: int  # groups of full-attention layers (the last one padded)
    other_groups: int  # groups of state / SWA layers (the last one padded)

    @property
    def block(self) -> int:
        """Bytes one block id costs: one page in each of the ``group`` layers it spans."""
        return self.group * self.page


def engine_shape(shape: ModelShape, engine: str) -> ModelShape:
    """``shape`` with ``engine``'s cache-dtype convention applied to its state (conv and
    recurrent state, :mod:`ukv.models.dtypes`), its KV dtype kept as given."""
    kv = shape.full.dtype if shape.full is not None else None
    return apply_engine_dtypes(shape, engine, kv=kv)[0]


def vllm_group_size(full_layers: int, other_layers: int) -> int:
    """Layers per group in vLLM's uniform-page-size grouping: the smaller layer count, or
    the larger when it is below 1.5 times the smaller (vLLM ``v1/core/kv_cache_utils.py``,
    ``_get_kv_cache_groups_uniform_page_size``)."""
    low, high = min(full_layers, other_layers), max(full_layers, other_layers)
    return high if high < VLLM_GROUP_SLACK * low else low


def vllm_blocks(shape: ModelShape) -> VllmBlocks:
    """vLLM's block geometry for ``shape``, computed per layer as vLLM does.

    State models (vLLM ``model_executor/models/config.py``,
    ``HybridAttentionMambaModelConfig.verify_and_update_config``; newer releases
    ``Platform._align_hybrid_block_size``, no prefix caching): with ``kv1`` one attention
    layer's KV bytes per token and ``st1`` one state layer's bytes per request, the
    attention block is ``B = a * ceil(st1 / (a * kv1))`` tokens (``a`` the attention
    kernel's alignment: 16, MLA 64), and each state page is padded to ``B * kv1``. SWA
    models: 16-token pages; when the two kinds' per-layer bytes differ, the smaller one's
    page holds more tokens so that every page has the same size (vLLM's
    ``unify_kv_cache_spec_page_size``). Then layers are grouped
    (:func:`vllm_group_size`) and every group shares the block ids.

    Args:
        shape: A hybrid model (one rank), in the dtypes vLLM would use.

    Returns:
        VllmBlocks: the page, group and block counts.
    """
    full = shape.full
    assert full is not None and shape.is_hybrid, f"{shape.name}: not a hybrid model"
    kv1 = full.bytes_per_token() // full.num_layers
    if shape.kind == "mamba":
        assert shape.state is not None
        other_layers = shape.state.num_layers
        align = VLLM_ALIGN_MLA if full.is_mla else VLLM_ALIGN
        tokens = align * math.ceil(shape.state.bytes_per_layer() / (align * kv1))
        page, other_tokens = tokens * kv1, 0
    else:
        swa = shape._swa()
        other_layers = swa.num_layers
        swa1 = swa.bytes_per_token() // swa.num_layers
        page = VLLM_ALIGN * max(kv1, swa1)
        tokens, other_tokens = page // kv1, page // swa1
    g = vllm_group_size(full.num_layers, other_layers)
    return VllmBlocks(
        page=page,
        group=g,
        full_tokens=tokens,
        other_tokens=other_tokens,
        full_groups=math.ceil(full.num_layers / g),
        other_groups=math.ceil(other_layers / g),
    )


class PaddedBackend(Backend):
    """vLLM's hybrid KV-cache manager: one pool of equal blocks (BENCHMARKS.md, "The
    single-page-size baseline"; geometry from :func:`vllm_blocks`).

    Every layer's page has one size, layers are cut into groups of ``g``, and one block
    id is a page in each of a group's ``g`` layers (``g * page`` bytes); the pool holds
    ``total_bytes // (g * page)`` block ids, shared by all groups. A request of ``t``
    tokens holds ``ceil(t / B)`` blocks in each full-attention group and, Mamba, one
    block in each state group (its padded state; no prefix caching), or, SWA, its
    window's blocks in each SWA group (a prefill chunk first takes all its blocks, then
    those before the window are freed, as on every layout).

    Args:
        shape: The model (one rank).
        total_bytes: Bytes of the pool.
        name: Label.
        engine: Whose cache-dtype convention to apply first (:mod:`ukv.models.dtypes`):
            ``"vllm"`` (the default: this is vLLM's layout, so its recurrent state is in
            vLLM's dtype; the KV dtype of ``shape`` is kept), or None to take ``shape``'s
            dtypes as they are.

    Attributes:
        shape: The shape counted (vLLM's dtypes applied).
        geometry: The :class:`VllmBlocks`.
        B: Tokens per full-attention block.
        block: Bytes per block id.
        cap: Block ids in the pool.
    """

    def __init__(
        self,
        shape: ModelShape,
        total_bytes: int,
        name: str = "padded",
        engine: str | None = "vllm",
    ) -> None:
        if engine is not None:
            shape = engine_shape(shape, engine)
        self.name, self.total_bytes, self.kind, self.shape = (
            name,
            int(total_bytes),
            shape.kind,
            shape,
        )
        self.geometry = geo = vllm_blocks(shape)
        self.B, self.block = geo.full_tokens, geo.block
        self.full_groups, self.other_groups = geo.full_groups, geo.other_groups
        if self.kind == "swa":
            self.window = _window(shape)
            self.B_other = geo.other_tokens
        self.cap = self.total_bytes // self.block
        self.used = 0
        self.states = 0
        self.stateful: set[int] = set()
        self.page_tokens = self.B
        self.short = "any"

    def admit(self, r: int) -> bool:
        if self.kind != "mamba":
            return True
        if self.used + self.other_groups > self.cap:
            return False
        self.used += self.other_groups
        self.states += 1
        self.stateful.add(r)
        return True

    def _blocks(self, held: Any) -> np.ndarray:
        """Blocks of the token side(s) a request of ``held`` tokens holds between steps."""
        full = self.full_groups * pages(held, self.B)
        if self.kind == "mamba":
            return full
        return full + self.other_groups * swa_pages(held, self.B_other, self.window)

    def grow(self, rids: np.ndarray, old: np.ndarray, new: np.ndarray) -> bool:
        before = self._blocks(old)
        peak = self.full_groups * pages(new, self.B)
        if self.kind == "swa":
            sw_old = swa_pages(old, self.B_other, self.window)
            sw_new = pages(new, self.B_other) - pages(old, self.B_other)
            peak = peak + self.other_groups * (sw_old + sw_new)
        if self.used + int((peak - before).sum()) > self.cap:
            return False
        after = self._blocks(new)
        self.used += int((after - before).sum())
        self.bytes_freed += int((peak - after).sum()) * self.block
        return True

    def release(self, rids: np.ndarray, held: np.ndarray) -> None:
        states = 0
        if self.kind == "mamba":
            for r in rids.tolist():
                if r in self.stateful:
                    self.stateful.remove(r)
                    states += 1
        n = int(self._blocks(held).sum()) + states * self.other_groups
        self.used -= n
        self.states -= states
        self.bytes_freed += n * self.block

    def fits(self, states: int, tokens: int, ev_pages: int = 0, ev_ckpt: int = 0) -> bool:
        need = self.full_groups * pages(tokens, self.B)
        if self.kind == "mamba":
            need += states * self.other_groups
        else:
            need += self.other_groups * states * window_pages(self.window, self.B_other)
        free = self.cap - self.used + ev_pages * self.full_groups + ev_ckpt * self.other_groups
        return need <= free

    def fits_alone(self, tokens: int) -> bool:
        states = self.other_groups if self.kind == "mamba" else 0
        return int(self._blocks(np.int64(tokens))) + states <= self.cap

    def usage(self) -> tuple[int, int]:
        if self.kind == "mamba":
            other = self.states * self.other_groups * self.block
            return self.used * self.block - other, other
        return self.used * self.block, 0

    # -- prefix cache (vLLM's block pool: cached blocks stay in ``used``) --

    def tree_adopt(self, r: int, held: int, k: int, keep_window: bool = False) -> tuple[Any, Any]:
        win = None
        if self.kind == "swa":
            rest = max(held - k * self.B, 0)
            gone = int(swa_pages(np.int64(held), self.B_other, self.window)) - int(
                swa_pages(np.int64(rest), self.B_other, self.window)
            )
            if keep_window and gone > 0:
                win = gone
            else:
                self.used -= gone * self.other_groups
                self.bytes_freed += gone * self.other_groups * self.block
        return k, win

    def tree_free(self, handle: Any) -> None:
        self.used -= int(handle) * self.full_groups
        self.bytes_freed += int(handle) * self.full_groups * self.block

    def tree_split(self, handle: Any, k: int) -> tuple[Any, Any]:
        return k, int(handle) - k

    def ckpt_copy(self) -> Any:
        if self.kind != "mamba" or self.used + self.other_groups > self.cap:
            return None
        self.used += self.other_groups
        self.states += 1
        return 1

    def ckpt_donate(self, r: int) -> Any:
        if r not in self.stateful:
            return None
        self.stateful.remove(r)
        return 1

    def ckpt_free(self, handle: Any) -> None:
        self.used -= int(handle) * self.other_groups
        if self.kind == "mamba":
            self.states -= int(handle)
        self.bytes_freed += int(handle) * self.other_groups * self.block

    def ckpt_units(self, handle: Any) -> int:
        return int(handle)


# ----- the real pool ------------------------------------------------------------------------


class UnifiedBackend(Backend):
    """The real ukv pool on ``device="meta"``: one byte range, the full side growing up and
    the state / SWA side growing down, eager compaction planned and counted.

    Mamba models use :func:`ukv.build_mamba_hybrid` (its token surface and
    ``mamba_slots``). SWA models use :func:`ukv.build_swa_hybrid`: the SWA sub-pool binds
    the full side's ids, so one allocation of the composite
    (:class:`~ukv.hybrid.swa.SWAHybridAllocator`) binds a page on both sides at once (all
    or nothing), ``free_swa`` releases the SWA side of the pages that left the window, and
    the composite ``free`` releases the full side and whatever SWA pages are still bound.

    Per request it keeps one id per page (a free of any token frees its page), as numpy;
    for SWA models also the ids whose SWA side is still bound.

    Attributes:
        alloc: The composite allocator every allocation and free goes through.
        full: The full-attention side's own allocator (SWA models: read-only counts).
        other: The state slots, or the SWA side's allocator (SWA: read-only counts).

    Args:
        shape: The model (one rank).
        total_bytes: Pool bytes.
        page_size: Tokens per KV page.
        max_context_len: Longest request (the factory's boot check).
        name: Label.
        chunk: The prefill chunk (SWA models: an extend binds its tokens on the SWA side
            too, so the boot check sizes for one chunk, not one whole prompt); None:
            unchunked.

    Raises:
        PoolConfigError: one request of ``max_context_len`` tokens (and its state or
            window) does not fit ``total_bytes``.
    """

    def __init__(
        self,
        shape: ModelShape,
        total_bytes: int,
        page_size: int,
        max_context_len: int,
        name: str = "unified",
        chunk: int | None = None,
    ) -> None:
        import ukv

        self.name, self.total_bytes, self.kind, self.P = (
            name,
            int(total_bytes),
            shape.kind,
            page_size,
        )
        sizes: dict[str, Any] = dict(
            model=shape,
            total_bytes=self.total_bytes,
            max_context_len=max_context_len,
            page_size=page_size,
            device="meta",
        )
        if self.kind == "mamba":
            hp = ukv.build_mamba_hybrid(**sizes)
        else:
            hp = ukv.build_swa_hybrid(**sizes, max_extend_tokens=chunk)
        self.pool, self.alloc = hp.pool, hp.allocator
        if self.kind == "mamba":
            self.full, self.other = hp.allocator, hp.allocator.mamba_slots
            self.other_unit = shape.state_bytes_per_request()
        else:
            # Read-only views of each side (counts); allocating on them would bypass the
            # binding, so every alloc and free below goes through self.alloc.
            self.full, self.other = self.pool.allocator("full"), hp.allocator.swa
            assert hp.window is not None
            self.window = int(hp.window)
            self.other_unit = shape.swa_bytes_per_token() * page_size
        self.full_page = shape.kv_bytes_per_token() * page_size
        self._floor = self.pool.stats().reserved_floor_bytes
        self.pages: dict[int, list[np.ndarray]] = {}
        self.swa: dict[int, np.ndarray] = {}  # rid -> page ids whose SWA side is bound
        self.slot: dict[int, np.ndarray] = {}
        self._full_live = 0
        self._other_live = 0
        self.page_tokens = page_size
        self.short = "any"

    def admit(self, r: int) -> bool:
        self.pages[r] = []
        if self.kind != "mamba":
            self.swa[r] = np.empty(0, dtype=np.int64)
            return True
        got = self.other.alloc(1, host=True)
        if got is None:
            del self.pages[r]
            return False
        self.slot[r] = got.numpy()
        self._other_live += 1
        return True

    def grow(self, rids: np.ndarray, old: np.ndarray, new: np.ndarray) -> bool:
        need = pages(new, self.P) - pages(old, self.P)
        k = int(need.sum())
        ids = np.empty(0, dtype=np.int64)
        if k:
            # SWA: one composite call binds the k pages on both sides, or nothing at all.
            got = self.alloc.alloc(k * self.P, host=True)
            if got is None:
                return False
            ids = got.numpy()[:: self.P].copy()
        idx = np.flatnonzero(need)
        parts = _parts(ids, need, idx)
        for r, part in zip(rids[idx].tolist(), parts):
            self.pages[r].append(part)
        self._full_live += k
        if self.kind == "swa":
            self._other_live += k
            self._slide(rids, new, idx, parts)
        return True

    def _slide(
        self, rids: np.ndarray, new: np.ndarray, idx: np.ndarray, parts: list[np.ndarray]
    ) -> None:
        """Add the new pages to each window, then release the SWA side of those wholly
        before it (their full side stays)."""
        keep = swa_pages(new, self.P, self.window)
        drop = []
        for i, part in zip(idx.tolist(), parts):
            r = int(rids[i])
            held = np.concatenate([self.swa[r], part])
            excess = held.size - int(keep[i])
            if excess > 0:
                drop.append(held[:excess])
                held = held[excess:]
            self.swa[r] = held
        if drop:
            ids = np.concatenate(drop)
            self.alloc.free_swa(ids)
            self._other_live -= int(ids.size)
            self.bytes_freed += int(ids.size) * self.other_unit

    def release(self, rids: np.ndarray, held: np.ndarray) -> None:
        full, other = [], []
        for r in rids.tolist():
            full.extend(self.pages.pop(r))
            if self.kind == "mamba":
                slot = self.slot.pop(r, None)
                if slot is not None:
                    other.append(slot)
            else:
                other.append(self.swa.pop(r))
        # SWA: the composite free releases the full side and the SWA pages still bound
        # (the ids in ``other``); Mamba: the tokens and the state slots separately.
        n_other = sum(int(o.size) for o in other)
        if full:
            ids = np.concatenate(full)
            if ids.size:
                self.alloc.free(ids)
            self._full_live -= int(ids.size)
            self.bytes_freed += int(ids.size) * self.full_page
        if self.kind == "mamba" and n_other:
            self.other.free(np.concatenate(other))
        self._other_live -= n_other
        self.bytes_freed += n_other * self.other_unit

    def fits(self, states: int, tokens: int, ev_pages: int = 0, ev_ckpt: int = 0) -> bool:
        # Evictable tree memory counts as free: its bytes return to the one gap.
        ev_bytes = ev_pages * self.full_page + ev_ckpt * self.other_unit
        if self.kind == "mamba":
            if states > self.other.available_size() + ev_bytes // self.other_unit:
                return False
            # The two sides share one gap: charge the states in full-side pages.
            charge = pages(states * self.other_unit, self.full_page) * self.P
            return (
                tokens + charge
                <= self.full.available_size() + (ev_bytes // self.full_page) * self.P
            )
        # SWA: a window's pages are bound on both sides at once, so they need the joint
        # room; the rest of the tokens need full pages only, in what remains of the gap
        # once the windows' SWA bytes are taken (charged in full pages, as for states).
        win = states * window_pages(self.window, self.P)
        joint = ev_bytes // (self.full_page + self.other_unit)
        if win * self.P > self.alloc.available_size() + joint * self.P:
            return False
        charge = pages(win * self.other_unit, self.full_page) * self.P
        return (
            tokens + charge
            <= self.alloc.full_available_size() + (ev_bytes // self.full_page) * self.P
        )

    def fits_alone(self, tokens: int) -> bool:
        other = self.other_unit * (1 if self.kind == "mamba" else window_pages(self.window, self.P))
        need = pages(tokens, self.P) * self.full_page + other + self._floor
        return need <= self.total_bytes

    def usage(self) -> tuple[int, int]:
        return self._full_live * self.full_page, self._other_live * self.other_unit

    def bytes_moved(self) -> int:
        return int(self.pool.stats().bytes_moved)

    # -- prefix cache: the tree holds real page ids and state slots of the pool --

    def tree_adopt(self, r: int, held: int, k: int, keep_window: bool = False) -> tuple[Any, Any]:
        own = self.pages.get(r, [])
        ids = np.concatenate(own) if own else np.empty(0, dtype=np.int64)
        take, rest = ids[:k], ids[k:]
        self.pages[r] = [rest] if rest.size else []
        win = None
        if self.kind == "swa":
            bound = self.swa[r]
            inside = np.isin(bound, take)
            moved = bound[inside]
            self.swa[r] = bound[~inside]
            if keep_window and moved.size:
                win = moved
            elif moved.size:
                self.alloc.free_swa(moved)
                self._other_live -= int(moved.size)
                self.bytes_freed += int(moved.size) * self.other_unit
        return take, win

    def tree_free(self, handle: Any) -> None:
        if handle.size:
            self.alloc.free(handle)
        self._full_live -= int(handle.size)
        self.bytes_freed += int(handle.size) * self.full_page

    def tree_split(self, handle: Any, k: int) -> tuple[Any, Any]:
        return handle[:k], handle[k:]

    def ckpt_copy(self) -> Any:
        if self.kind != "mamba":
            return None
        got = self.other.alloc(1, host=True)
        if got is None:
            return None
        self._other_live += 1
        return got.numpy()

    def ckpt_donate(self, r: int) -> Any:
        return self.slot.pop(r, None) if self.kind == "mamba" else None

    def ckpt_free(self, handle: Any) -> None:
        if self.kind == "mamba":
            self.other.free(handle)
        else:
            self.alloc.free_swa(handle)
        self._other_live -= int(handle.size)
        self.bytes_freed += int(handle.size) * self.other_unit

    def ckpt_units(self, handle: Any) -> int:
        return int(handle.size)

    def ckpt_split(self, handle: Any, k: int) -> tuple[Any, Any]:
        return handle[:k], handle[k:]

    def ckpt_merge(self, a: Any, b: Any) -> Any:
        return np.concatenate([a, b])


def _parts(ids: np.ndarray, need: np.ndarray, idx: np.ndarray) -> list[np.ndarray]:
    """Split ``ids`` (one per page) into the runs ``need[idx]`` asked for."""
    return np.split(ids, np.cumsum(need[idx])[:-1]) if idx.size else []
