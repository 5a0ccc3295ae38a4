"""``UnifiedKVPool`` under SGLang's name: the byte buffer, built by ukv once its shape is known.

SGLang builds the pool before its allocators, and its allocators decide what ukv's pool
must be built with: the page size of the KV sub-pools (SGLang may build the pool with
``page_size=1`` and its allocators with the serving page size), lazy or eager compaction,
and whether one sub-pool binds the other's ids (the SWA side of a full + SWA pair). So the
drop-in records what each allocator claims and builds ``UkvPool`` when both
sub-pools have an allocator, or earlier when something needs the bytes (views, ``_raw``).
Reading the geometry (``max_slots``, ``min_slot_index``) fixes nothing: ``max_slots`` is
SGLang's page-size-free ``total_bytes // entry_bytes``, and ``min_slot_index`` is answered
for the page size known at the time. Once ukv's pool is built, an allocator of another page
size is refused with :class:`~ukv.integrations.sglang.errors.SGLangConfigError`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from ukv.hybrid.swa import SWAHybridAllocator
from ukv.integrations.sglang import bases
from ukv.integrations.sglang.errors import (
    SGLangArgumentError,
    SGLangConfigError,
    translated,
)
from ukv.integrations.sglang.specs import MambaSubPoolSpec, MHASubPoolSpec
from ukv.pool import UnifiedKVPool as UkvPool
from ukv.specs import reserved_floor

__all__ = [
    "UnifiedKVPool",
    "lazy_compaction_disabled",
    "lockstep_required",
    "max_moves_per_call",
]

GB = 1024 * 1024 * 1024
_DEFAULT_MAX_MOVES = 4096


def lazy_compaction_disabled() -> bool:
    """``SGLANG_DISABLE_LAZY_COMPACTION=1``: eager compaction whatever the caller asks."""
    return os.environ.get("SGLANG_DISABLE_LAZY_COMPACTION", "0").lower() in ("1", "true", "yes")


def max_moves_per_call() -> int:
    """``SGLANG_LAZY_COMPACTION_MAX_MOVES_PER_CALL`` (default 4096): the page-move cap of
    one non-urgent flush.

    Raises:
        SGLangConfigError: the variable is not a positive int.
    """
    raw = os.environ.get("SGLANG_LAZY_COMPACTION_MAX_MOVES_PER_CALL", str(_DEFAULT_MAX_MOVES))
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise SGLangConfigError(
            f"SGLANG_LAZY_COMPACTION_MAX_MOVES_PER_CALL = {raw!r}: must be a positive int"
        )
    return value


def lockstep_required() -> bool:
    """Whether every free call applies its queued frees before it returns:
    ``UKV_SGLANG_LOCKSTEP`` ("1" or "0") when set, else yes.

    SGLang reads its pool's sizes right after it frees and expects them exact: admission,
    ``check_decode_mem`` and retraction decide on them, its idle leak check adds them up
    to the pool's capacity, and with tensor parallelism every rank's scheduler must see the
    same sizes from the same calls. A free of ids on the GPU counts once its asynchronous
    copy to the host has landed; in lockstep mode each free call waits for that copy (a
    short host wait, only when it frees GPU ids) so the sizes are exact when it returns.
    ``UKV_SGLANG_LOCKSTEP=0`` keeps frees deferred (no host wait; sizes lag until the copy
    lands, which SGLang's strict idle check reports as a leak).
    """
    raw = os.environ.get("UKV_SGLANG_LOCKSTEP")
    if raw is not None:
        return raw.strip().lower() in ("1", "true", "yes")
    return True


@dataclass(frozen=True)
class _Claim:
    """What one allocator asked of its sub-pool."""

    page_size: int
    is_id_owner: bool
    lazy: bool


class UnifiedKVPool:
    """One byte buffer shared by a grow-up and a grow-down sub-pool (SGLang's surface).

    Args:
        total_bytes: Size of the buffer.
        sub_pool_specs: Exactly two specs, one ``grow_direction="up"`` and one ``"down"``.
        device: ``"cuda"``, ``"cpu"`` or ``"meta"``.
        enable_memory_saver: Allocate the byte buffer inside SGLang's memory-saver
            region for KV cache (``TorchMemorySaverAdapter``, tag
            ``GPU_MEMORY_TYPE_KV_CACHE``), as SGLang's own pools do: SGLang's
            ``release_memory_occupation`` / ``resume_memory_occupation`` then pause and
            resume it and its virtual address stays, so CUDA graphs captured before stay
            valid. Needs SGLang's adapter and ``torch_memory_saver``, as SGLang does.
        page_size: Page size of the KV sub-pools unless an allocator fixes another one
            before the geometry is first read.

    Raises:
        SGLangConfigError: what SGLang asserts (page size, two specs, unique names, one
            of each direction) and a buffer too small for its floor plus a page each.
        SGLangNotImplementedError: ``enable_memory_saver=True`` without SGLang's adapter.
        ImportError: ``enable_memory_saver=True`` without ``torch_memory_saver`` (raised by
            SGLang's adapter, as for SGLang's own pools).
    """

    def __init__(
        self,
        *,
        total_bytes: int,
        sub_pool_specs: list[MHASubPoolSpec | MambaSubPoolSpec],
        device: str,
        enable_memory_saver: bool,
        page_size: int = 1,
    ) -> None:
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise SGLangConfigError(f"page_size must be >= 1; got {page_size!r}")
        specs = self._checked_specs(list(sub_pool_specs))
        if isinstance(total_bytes, bool) or not isinstance(total_bytes, int) or total_bytes <= 0:
            raise SGLangConfigError(f"total_bytes must be a positive int; got {total_bytes!r}")
        self.total_bytes = total_bytes
        self.sub_pool_specs = specs
        self.device = device
        self.enable_memory_saver = bool(enable_memory_saver)
        # SGLang's adapter (None without the memory saver): the buffer's allocation region.
        self.memory_saver_adapter = (
            bases.names["TorchMemorySaverAdapter"].create(enable=True)
            if self.enable_memory_saver
            else None
        )
        self._requested_page_size = page_size
        self._specs_by_name = {s.name: s for s in specs}
        self._claims: dict[str, _Claim] = {}
        self._kv_page_size: int | None = None  # fixed by a claim or by building ukv's pool
        # min_slot_index per sub-pool, per page size, read before ukv's pool exists.
        self._probes: dict[int, dict[str, int]] = {}
        self._max_moves = max_moves_per_call()
        self._pool: UkvPool | None = None
        self._swa: SWAHybridAllocator | None = None
        # Allocators whose kvcache hears about relocations: sub-pool name -> allocators.
        self._move_targets: dict[str, list[Any]] = {}
        self.lockstep = lockstep_required()
        self._check_fits(page_size)

    @staticmethod
    def _checked_specs(specs: list[Any]) -> list[Any]:
        """The specs, checked as SGLang 0.5.16 asserts: two, one of each direction.
        (SGLang 0.5.23's pool, ``v0523.pool``, overrides this.)"""
        if len(specs) != 2:
            raise SGLangConfigError(
                f"UnifiedKVPool currently supports exactly 2 sub-pools; got {len(specs)} "
                "(N>2 is not yet implemented)"
            )
        for s in specs:
            if not isinstance(s, (MHASubPoolSpec, MambaSubPoolSpec)):
                raise SGLangConfigError(f"unsupported SubPoolSpec type: {type(s).__name__}")
        names = [s.name for s in specs]
        if len(set(names)) != 2:
            raise SGLangConfigError(f"sub-pool names must be unique; got {names}")
        directions = sorted(s.grow_direction for s in specs)
        if directions != ["down", "up"]:
            raise SGLangConfigError(
                f"UnifiedKVPool needs one grow-up and one grow-down sub-pool; got {directions}"
            )
        return specs

    # ----- the page size, claims and the build -----------------------------------------------

    @property
    def page_size(self) -> int:
        """The KV page size ukv's pool uses (or will use, as far as is known now)."""
        return self._page_size_now()

    def _page_size_now(self) -> int:
        return self._kv_page_size if self._kv_page_size is not None else self._requested_page_size

    def fix_page_size(self, page_size: int, by: str) -> None:
        """Fix the KV sub-pools' page size (the first caller decides).

        Args:
            page_size: Tokens per KV page.
            by: Who asks (for the error message).

        Raises:
            SGLangConfigError: another page size is already fixed.
        """
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise SGLangConfigError(f"page_size must be >= 1; got {page_size!r} ({by})")
        if self._kv_page_size is None:
            self._kv_page_size = page_size
        elif self._kv_page_size != page_size:
            raise SGLangConfigError(
                f"page_size = {page_size} ({by}): this pool's KV page size is already fixed "
                f"at {self._kv_page_size} (by an earlier allocator, or by reading the "
                "views or the raw buffer, which builds ukv's pool)"
            )

    def claim(self, name: str, *, page_size: int, is_id_owner: bool, lazy: bool) -> None:
        """Record what an allocator of sub-pool ``name`` needs; the last sub-pool's claim
        builds ukv's pool.

        Raises:
            SGLangConfigError: an unknown name, a state sub-pool with ``page_size != 1``,
                a page size or compaction mode that disagrees with the pool, or a
                non-owner that is not the MHA partner of an MHA owner.
        """
        spec = self.spec(name)
        lazy = bool(lazy) and not lazy_compaction_disabled()
        if isinstance(spec, MambaSubPoolSpec):
            if page_size != 1:
                raise SGLangConfigError(
                    f"page_size = {page_size} for state sub-pool {name!r}: state is one slot "
                    "per request (page_size must be 1)"
                )
            if not is_id_owner:
                raise SGLangConfigError(f"is_id_owner = False for state sub-pool {name!r}")
        else:
            self.fix_page_size(page_size, f"allocator of {name!r}")
            if not is_id_owner and not isinstance(self.spec(self._other(name)), MHASubPoolSpec):
                raise SGLangConfigError(
                    f"is_id_owner = False for {name!r}: only the SWA side of two MHA "
                    "sub-pools binds its partner's ids"
                )
        for other, c in self._claims.items():
            if other != name and c.lazy != lazy:
                raise SGLangConfigError(
                    f"lazy_compaction = {lazy} for {name!r}: {other!r}'s allocator uses {c.lazy}"
                )
        claim = _Claim(page_size, bool(is_id_owner), lazy)
        if self._pool is not None:
            self._check_built_matches(name, claim)
        self._claims[name] = claim
        if self._pool is None and len(self._claims) == len(self._specs_by_name):
            self._build()

    def _other(self, name: str) -> str:
        return next(n for n in self._specs_by_name if n != name)

    def _check_built_matches(self, name: str, claim: _Claim) -> None:
        pool = self._pool
        assert pool is not None
        bound = pool.owner_of(name) is not None
        if bound == claim.is_id_owner or pool.lazy != claim.lazy:
            raise SGLangConfigError(
                f"allocator of {name!r} (is_id_owner={claim.is_id_owner}, "
                f"lazy_compaction={claim.lazy}) does not match the pool ukv already built "
                f"(binds ids: {bound}, lazy: {pool.lazy}); build allocators before reading views"
            )

    def _build(self) -> UkvPool:
        page_size = self._page_size_now()
        self._kv_page_size = page_size
        bind = {n: self._other(n) for n, c in self._claims.items() if not c.is_id_owner}
        lazy = any(c.lazy for c in self._claims.values())
        with translated():
            pool = UkvPool(
                self.total_bytes,
                [s.to_ukv() for s in self.sub_pool_specs],
                page_size=page_size,
                device=self.device,
                lazy=lazy,
                max_moves_per_flush=self._max_moves,
                bind=bind or None,
                allocation_context=self.allocation_context(),
            )
        if bind:
            ((swa, full),) = bind.items()
            self._swa = SWAHybridAllocator(pool, full, swa)
        pool.add_move_listener(self._on_moves)
        self._pool = pool
        return pool

    def allocation_context(self) -> Any:
        """What allocates memory SGLang's memory saver pauses and resumes (None without
        it): a context factory over SGLang's KV-cache region."""
        adapter = self.memory_saver_adapter
        if adapter is None:
            return None
        tag = bases.names["GPU_MEMORY_TYPE_KV_CACHE"]
        return lambda: adapter.region(tag)

    def report_moves_to(self, name: str, allocator: Any) -> None:
        """Hand every relocation of sub-pool ``name`` to ``allocator._report_moves``."""
        self._move_targets.setdefault(name, []).append(allocator)

    def _on_moves(self, moves: list[tuple[str, Any, Any]]) -> None:
        for name, src, dst in moves:
            for target in self._move_targets.get(name, ()):
                target._report_moves(src, dst)

    @property
    def max_moves(self) -> int:
        """The page-move cap of one non-urgent flush of ukv's pool."""
        return self._pool.max_moves_per_flush if self._pool is not None else self._max_moves

    @max_moves.setter
    def max_moves(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SGLangArgumentError(
                f"_lazy_max_moves_per_call = {value!r}: must be a positive int"
            )
        self._max_moves = value
        if self._pool is not None:
            self._pool.max_moves_per_flush = value

    def settle_if_lockstep(self) -> None:
        """In lockstep mode (see :func:`lockstep_required`), apply every queued free now."""
        if self.lockstep and self._pool is not None:
            self._pool.sync_frees()

    @property
    def ukv_pool(self) -> UkvPool:
        """ukv's pool behind this one (built now, with what is known, if not yet)."""
        return self._pool if self._pool is not None else self._build()

    @property
    def is_built(self) -> bool:
        """Whether ukv's pool exists yet."""
        return self._pool is not None

    def swa_hybrid(self) -> SWAHybridAllocator | None:
        """ukv's joint allocator of the SWA pair (None unless one side binds the other)."""
        self.ukv_pool  # noqa: B018 - builds
        return self._swa

    # ----- geometry -----------------------------------------------------------------------------

    def _check_fits(self, page_size: int) -> None:
        """SGLang's "Increase total_bytes" at construction: the reserved floor plus one page
        of each sub-pool must fit (cheap; the exact geometry comes from ukv later)."""
        specs = [s.to_ukv() for s in self.sub_pool_specs]
        need = reserved_floor(specs, page_size) + sum(s.page_bytes(page_size) for s in specs)
        if need > self.total_bytes:
            raise SGLangConfigError(
                f"total_bytes = {self.total_bytes}: the reserved floor and one page of each "
                f"sub-pool need {need} bytes at page_size {page_size}. Increase total_bytes."
            )

    def _min_slot_now(self, name: str) -> int:
        """``min_slot_index(name)`` at the page size known now, from ukv's geometry: of
        the built pool, or of a bookkeeping-only (``meta``) probe, cached per page size,
        which fixes nothing (allocators may still choose the page size)."""
        if self._pool is not None:
            return self._pool.min_slot_index(name)
        page_size = self._page_size_now()
        probe = self._probes.get(page_size)
        if probe is None:
            with translated():
                pool = UkvPool(
                    self.total_bytes,
                    [s.to_ukv() for s in self.sub_pool_specs],
                    page_size=page_size,
                    device="meta",
                )
            probe = {n: pool.min_slot_index(n) for n in self._specs_by_name}
            self._probes[page_size] = probe
        return probe[name]

    def spec(self, name: str) -> MHASubPoolSpec | MambaSubPoolSpec:
        """The spec of sub-pool ``name``.

        Raises:
            SGLangArgumentError: no such sub-pool.
        """
        try:
            return self._specs_by_name[name]
        except (KeyError, TypeError):
            raise SGLangArgumentError(
                f"no sub-pool named {name!r} (have {list(self._specs_by_name)})"
            ) from None

    def mha_spec(self, name: str) -> MHASubPoolSpec:
        """The spec of MHA sub-pool ``name`` (SGLangArgumentError if it is not MHA)."""
        s = self.spec(name)
        if not isinstance(s, MHASubPoolSpec):
            raise SGLangArgumentError(
                f"sub-pool {name!r} is {type(s).__name__}, expected MHASubPoolSpec"
            )
        return s

    def mamba_spec(self, name: str) -> MambaSubPoolSpec:
        """The spec of state sub-pool ``name`` (SGLangArgumentError if it is not Mamba)."""
        s = self.spec(name)
        if not isinstance(s, MambaSubPoolSpec):
            raise SGLangArgumentError(
                f"sub-pool {name!r} is {type(s).__name__}, expected MambaSubPoolSpec"
            )
        return s

    def max_slots(self, name: str) -> int:
        """Slots in ``name``'s index space: ``total_bytes // entry_bytes``, SGLang's rule,
        whatever the page size (ukv's pages number ``max_slots // page_size``, the same
        count). Reading it fixes nothing."""
        return self.total_bytes // self.spec(name).entry_bytes()

    def min_slot_index(self, name: str) -> int:
        """First slot of ``name`` above the reserved floor (the padding sink). ukv's
        floor holds one page of every paged sub-pool, so this depends on the page size:
        before the allocators fix it, the answer is for the page size known now (the
        pool's, or an allocator's claim), and reading it fixes nothing."""
        self.spec(name)
        return self._min_slot_now(name)

    def anchor_bytes(self, name: str) -> int:
        """Every sub-pool is anchored at byte 0."""
        self.spec(name)
        return 0

    # ----- bytes -----------------------------------------------------------------------------------

    @property
    def _raw(self) -> torch.Tensor:
        """The one ``uint8`` buffer (builds ukv's pool if needed)."""
        return self.ukv_pool.raw

    def mha_views_for(self, name: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-layer K and V page views of MHA sub-pool ``name``, each
        ``[max_slots // page_size, page_size, head_num, head_dim]``."""
        self.mha_spec(name)
        return self.ukv_pool.kv_views(name)

    def mamba_views_for(self, name: str) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Conv views ``[layers, max_slots, *conv_i]`` and the temporal view
        ``[layers, max_slots, *temporal]`` of state sub-pool ``name``."""
        self.mamba_spec(name)
        return self.ukv_pool.state_views(name)

    def __repr__(self) -> str:
        state = self._pool.summary() if self._pool is not None else "not built yet"
        return f"UnifiedKVPool(sglang drop-in, {self.total_bytes} bytes; {state})"

    def _sub_allocator(self, name: str) -> Any:
        """ukv's allocator of sub-pool ``name``."""
        return self.ukv_pool.allocator(name)
