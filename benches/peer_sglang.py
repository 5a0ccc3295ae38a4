"""SGLang peer for the allocator benches: SGLang's own unified memory pool on CPU or CUDA.

Builds the reference ``UnifiedKVPool`` (``sglang.srt.mem_cache.unified_memory_pool``) and one
``MultiEndedAllocator`` per sub-pool (``sglang.srt.mem_cache.allocator.unified_sub_pool``), the
way SGLang's allocator unit tests do: two independent id-owning sub-allocators, bound to each
other as peers, over one byte buffer on device ``"cpu"`` or ``"cuda"``. The benches then drive
the same op trace through this peer and through ukv's Python API, in one process.

On CUDA, SGLang imports ``sgl_kernel`` at module level; where that package is missing (the
lent GPU machine has none), ``load(device="cuda")`` registers an import hook that serves a
stand-in: every attribute is another stand-in and every call raises. The allocator path
never calls it; a call would fail the run instead of measuring less. The hook sits last on
``sys.meta_path``, so an installed ``sgl_kernel`` always wins.

SGLang is an optional dependency, installed without dependency resolution so that the
project's torch stays as it is (see ``benches/requirements-peer.txt``)::

    pip install --no-deps sglang==0.5.23
    pip install --no-deps -r benches/requirements-peer.txt

Usage::

    factory, reason = load()
    if factory is None:
        print(f"SGLang peer skipped: {reason}")
    else:
        peer = factory(total_bytes, {"layer_num": 4, "head_num": 8, "head_dim": 128,
                                     "dtype": torch.bfloat16, "grow": "up"},
                       {"kind": "mamba", "layer_num": 4, "conv_shapes": ((4096, 3),),
                        "conv_dtype": torch.bfloat16, "temporal_shape": (32, 64, 128),
                        "temporal_dtype": torch.float32},
                       page_size=16, lazy=True)
        ids = peer.alloc(16)           # full side, virtual token ids (int64) or None
        peer.free(ids)
        slot = peer.other.alloc(1)     # the second sub-pool
        peer.other.free(slot)

Run it with ``torch.set_num_threads(1)`` on a small CPU box: every SGLang ``free`` does a
``torch.cat`` over the whole free-id list, and once that list passes 32K ids torch runs the cat
on its thread pool, which on a 2-core machine costs ~8 ms per call in OpenMP wake-ups
(single-threaded it is ~50 µs for 64K ids). So a pair's cost also grows with the number of
free ids (pool size / entry bytes / page size): compare at equal pool sizes.

Self-check (prints µs per op and exits 0; exits 2 with the reason when SGLang is missing);
without ``--selfcheck`` it only imports the allocator path and says how that went::

    python benches/peer_sglang.py --selfcheck [--device cuda]
    python benches/peer_sglang.py --device cuda     # import check (used by .gpu/peer/install.sh)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import statistics
import sys
import time
import types
import warnings
from collections.abc import Mapping
from typing import Any

import torch

SGLANG_VERSION = "0.5.23"
INSTALL_HINT = (
    f"pip install --no-deps sglang=={SGLANG_VERSION} && "
    "pip install --no-deps -r benches/requirements-peer.txt"
)
# Where the two classes live, newest layout first (0.5.23 is the first).
POOL_MODULES = ("sglang.srt.mem_cache.unified_memory_pool",)
ALLOCATOR_MODULES = (
    "sglang.srt.mem_cache.allocator.unified_sub_pool",
    "sglang.srt.mem_cache.unified_sub_pool",
)
POOL_NAMES = (
    "UnifiedKVPool",
    "MHASubPoolSpec",
    "MambaSubPoolSpec",
    "UnifiedMHATokenToKVPool",
    "UnifiedMambaPool",
)
ALLOCATOR_NAMES = ("MultiEndedAllocator",)
KV_MODES = ("auto", "real", "fake")
MARKER_BYTES = 8  # one int64 stamp per token/slot entry
STANDIN_ROOT = "sgl_kernel"  # the CUDA kernel wheel SGLang imports at module level

_sg: dict[str, Any] = {}  # resolved SGLang classes, filled by load()


# ----- import ------------------------------------------------------------------------------


def _import_first(candidates: tuple[str, ...], names: tuple[str, ...]) -> tuple[Any, list[str]]:
    """The first module of ``candidates`` that imports and defines every name in ``names``."""
    errors = []
    for module_name in candidates:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - any import failure is a reason to report
            errors.append(f"import {module_name}: {type(exc).__name__}: {exc}")
            continue
        missing = [n for n in names if not hasattr(module, n)]
        if not missing:
            return module, errors
        errors.append(f"{module_name} has no {', '.join(missing)}")
    return None, errors


class StandIn:
    """An attribute of the ``sgl_kernel`` stand-in: its attributes are further stand-ins,
    and calling it raises, naming what was called.

    Args:
        name: Dotted name it stands for (for the error message).
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> StandIn:
        if attr.startswith("__"):
            raise AttributeError(attr)  # keep copy/pickle/inspect probes honest
        return StandIn(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"{self._name} was called, but {STANDIN_ROOT} is a stand-in registered by "
            "benches/peer_sglang.py (the package is not installed): this SGLang code path "
            "needs the real kernel wheel"
        )

    def __repr__(self) -> str:
        return f"<stand-in {self._name}>"


class StandInModule(types.ModuleType):
    """A package whose every attribute is a ``StandIn`` (submodules are served by the
    finder below)."""

    def __getattr__(self, attr: str) -> StandIn:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return StandIn(f"{self.__name__}.{attr}")


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``sgl_kernel`` and any ``sgl_kernel.*`` submodule as a ``StandInModule``."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != STANDIN_ROOT and not fullname.startswith(STANDIN_ROOT + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        return StandInModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # a package, so `import sgl_kernel.x.y` resolves here too


def install_standin() -> bool:
    """Register the ``sgl_kernel`` stand-in unless the real package is importable.

    Returns:
        True when the stand-in is (now or already) in place, False when the real package
        is installed and will be used.
    """
    if any(isinstance(f, StandInFinder) for f in sys.meta_path):
        return True
    if importlib.util.find_spec(STANDIN_ROOT) is not None:
        return False
    sys.meta_path.append(StandInFinder())  # last: consulted only when nothing else finds it
    return True


def _single_rank() -> str:
    """State a single-rank topology (decode context parallelism off) where SGLang has the
    hook: its allocators read ``attn_dcp_size``/``attn_dcp_rank``, which a server would
    publish at start-up. Returns a note for the description ('' when nothing was set)."""
    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:
        return ""
    parallel = get_parallel()
    if not hasattr(parallel, "override_permanently"):
        return ""
    parallel.override_permanently(attn_dcp_size=1, attn_dcp_rank=0)
    return "attn_dcp_size=1"


def load(device: str = "cpu") -> tuple[Any | None, str]:
    """Import SGLang's unified pool and allocator.

    Args:
        device: The device the peer will be built on; ``"cuda"`` registers the
            ``sgl_kernel`` stand-in first when that package is missing.

    Returns:
        ``(SGLangPeer, description)`` when they import, else ``(None, reason)`` where the
        reason says what failed (not installed, a missing dependency with its name, or an
        API that moved) and how to install the peer.
    """
    try:
        sglang_version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None, f"sglang is not installed ({INSTALL_HINT})"
    device_type = torch.device(device).type
    standin = install_standin() if device_type == "cuda" else False
    with warnings.catch_warnings():
        # Importing sglang on a machine without CUDA warns about AWQ/GGUF kernels.
        warnings.simplefilter("ignore")
        pool_module, pool_errors = _import_first(POOL_MODULES, POOL_NAMES)
        if pool_module is None:
            return None, _failure(sglang_version, pool_errors)
        alloc_module, alloc_errors = _import_first(ALLOCATOR_MODULES, ALLOCATOR_NAMES)
        if alloc_module is None:
            return None, _failure(sglang_version, alloc_errors)
    _sg.update({n: getattr(pool_module, n) for n in POOL_NAMES})
    _sg["MultiEndedAllocator"] = alloc_module.MultiEndedAllocator
    _sg["store_dtype_for"] = getattr(pool_module, "_store_dtype_for", None)
    notes = (
        [] if sglang_version == SGLANG_VERSION else [f"the bench was written for {SGLANG_VERSION}"]
    )
    if standin:
        notes.append(f"{STANDIN_ROOT} is a stand-in (not installed; the allocator never calls it)")
    topology = _single_rank()
    if topology:
        notes.append(f"single rank ({topology})")
    extra = f" ({'; '.join(notes)})" if notes else ""
    return SGLangPeer, (
        f"sglang {sglang_version}: {pool_module.__name__}.UnifiedKVPool + "
        f"{alloc_module.__name__}.MultiEndedAllocator on {device_type}{extra}"
    )


def _failure(version: str, errors: list[str]) -> str:
    first = errors[0] if errors else "unknown error"
    hint = ""
    if "ModuleNotFoundError" in first:
        hint = f"; install the peer's dependencies: {INSTALL_HINT}"
    return f"sglang {version} is installed but its allocator does not import: {first}{hint}"


# ----- spec parameters ---------------------------------------------------------------------


def _field(params: Any, name: str, default: Any = ...) -> Any:
    """``params[name]`` for a mapping, ``params.name`` for an object (e.g. a ukv spec)."""
    if isinstance(params, Mapping):
        value = params.get(name, default)
    else:
        value = getattr(params, name, default)
    if value is ...:
        raise TypeError(f"sub-pool parameters lack {name!r}: {params!r}")
    return value


def _dtype(value: Any) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    dtype = getattr(torch, str(value).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"not a torch dtype: {value!r}")
    return dtype


def _kind(params: Any) -> str:
    """``"mha"`` or ``"mamba"``: an explicit ``kind`` (``"swa"`` counts as mha), else by fields."""
    kind = _field(params, "kind", None)
    if kind is None:
        has_conv = _field(params, "conv_shapes", None) is not None
        kind = "mamba" if has_conv else "mha"
    kind = str(kind).lower()
    if kind in ("mha", "swa", "full"):
        return "mha"
    if kind == "mamba":
        return "mamba"
    raise ValueError(f"unsupported sub-pool kind {kind!r}: the peer builds mha or mamba sub-pools")


def _mha_spec(params: Any, name: str, grow: str) -> Any:
    dtype = _dtype(_field(params, "dtype"))
    store = _sg["store_dtype_for"](dtype) if _sg["store_dtype_for"] else dtype
    return _sg["MHASubPoolSpec"](
        name=name,
        layer_num=int(_field(params, "layer_num")),
        head_num=int(_field(params, "head_num")),
        head_dim=int(_field(params, "head_dim")),
        v_head_dim=_field(params, "v_head_dim", None),
        store_dtype=store,
        kv_cache_dtype=dtype,
        grow_direction=grow,
    )


def _mamba_spec(params: Any, name: str, grow: str) -> Any:
    return _sg["MambaSubPoolSpec"](
        name=name,
        layer_num=int(_field(params, "layer_num")),
        conv_state_shapes=tuple(tuple(int(x) for x in s) for s in _field(params, "conv_shapes")),
        conv_dtype=_dtype(_field(params, "conv_dtype")),
        temporal_state_shape=tuple(int(x) for x in _field(params, "temporal_shape")),
        temporal_dtype=_dtype(_field(params, "temporal_dtype")),
        grow_direction=grow,
    )


# ----- KV caches ---------------------------------------------------------------------------


class MarkerKVCache:
    """Fake KV cache of the SGLang unit tests: ``buf[t]`` is the marker stored at physical
    token ``t``; a compaction move copies markers, not bytes.

    Args:
        num_tokens: Physical token (or state slot) rows, ``num_pages * page_size``.
        device: Where the markers live (the pool's device).
    """

    def __init__(self, num_tokens: int, device: str | torch.device = "cpu") -> None:
        self.buf = torch.full((num_tokens,), -1, dtype=torch.int64, device=device)

    def move_physical_pages(
        self, dst_pages: torch.Tensor, src_pages: torch.Tensor, page_size: int
    ) -> None:
        """Copy the markers of whole pages ``src_pages`` -> ``dst_pages`` (disjoint sets)."""
        offs = torch.arange(page_size, device=dst_pages.device)
        dst = (dst_pages[:, None] * page_size + offs).flatten()
        src = (src_pages[:, None] * page_size + offs).flatten()
        self.buf[dst] = self.buf[src].clone()

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        """Token-granular move (the older allocator entry point)."""
        self.buf[tgt_loc] = self.buf[src_loc].clone()


# ----- one side ----------------------------------------------------------------------------


class SGLangSide:
    """One sub-pool of the peer: its ``MultiEndedAllocator`` plus the KV cache it moves.

    Ids are SGLang's virtual TOKEN ids (int64, stable across compaction); for a paged side
    ``alloc(n)`` needs ``n % page_size == 0`` and returns whole pages.

    Attributes:
        name: Sub-pool name.
        kind: ``"mha"`` or ``"mamba"``.
        page_size: Tokens per page of this side (1 for mamba).
        allocator: The SGLang ``MultiEndedAllocator``.
        kvcache: ``UnifiedMHATokenToKVPool`` / ``UnifiedMambaPool`` (real bytes) or a
            ``MarkerKVCache``.
    """

    def __init__(
        self, peer: SGLangPeer, name: str, kind: str, page_size: int, allocator: Any, kvcache: Any
    ) -> None:
        self._peer = peer
        self.name = name
        self.kind = kind
        self.page_size = page_size
        self.allocator = allocator
        self.kvcache = kvcache
        self.entry_bytes = int(allocator.entry_bytes)

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """``need_size`` virtual token ids (shape ``[need_size]``, int64), or None when the
        side cannot get them even after flushing its peer (lazy)."""
        return self.allocator.alloc(int(need_size))

    def free(self, ids: Any) -> None:
        """Free virtual token ids (a tensor, list or array; partial pages free the page)."""
        if not isinstance(ids, torch.Tensor):
            ids = torch.as_tensor(ids, dtype=torch.int64, device=self._peer.device)
        self.allocator.free(ids)

    def available_size(self) -> int:
        """Tokens allocatable right now without compacting anything."""
        return int(self.allocator.available_size())

    def schedulable_available_size(self) -> int:
        """Tokens allocatable after an urgent flush of the peer's holes."""
        return int(self.allocator.schedulable_available_size())

    def allocated_count(self) -> int:
        """Live tokens (lazy: excludes holes)."""
        return int(self.allocator.allocated_count())

    def flush(self, urgent: bool = False) -> int:
        """Lazy compaction pass (SGLang ``_flush``); the number of page moves. 0 when eager."""
        if urgent:
            return int(self.allocator.flush_for_allocation())
        return int(self.allocator.flush_opportunistic())

    def translate(self, ids: torch.Tensor) -> torch.Tensor:
        """Physical token ids of virtual token ids (``translate_kv_loc``)."""
        return self.allocator.translate_kv_loc(ids)

    def stamp(self, ids: torch.Tensor) -> None:
        """Write each id as a marker into its current physical slot (outside timed code)."""
        phys = self.translate(ids)
        if isinstance(self.kvcache, MarkerKVCache):
            self.kvcache.buf[phys] = ids
        else:
            self._marker_view()[phys] = ids

    def read_stamps(self, ids: torch.Tensor) -> torch.Tensor:
        """The markers found at the ids' current physical slots (equal to ``ids`` when every
        compaction moved its data along)."""
        phys = self.translate(ids)
        if isinstance(self.kvcache, MarkerKVCache):
            return self.kvcache.buf[phys].clone()
        return self._marker_view()[phys].clone()

    def _marker_view(self) -> torch.Tensor:
        # Both 0.5.23 layouts are token-major: token/slot t's entry is bytes
        # [t*entry, (t+1)*entry) of the raw buffer; its first 8 bytes hold the marker.
        raw = self._peer.pool._raw
        assert self.entry_bytes % MARKER_BYTES == 0, (
            f"entry of {self.entry_bytes} B cannot hold an int64 marker"
        )
        rows = raw.numel() // self.entry_bytes
        return raw[: rows * self.entry_bytes].view(torch.int64).view(rows, -1)[:, 0]

    def __repr__(self) -> str:
        return (
            f"SGLangSide({self.name!r}, {self.kind}, grow={self.allocator.grow_direction}, "
            f"ps={self.page_size}, entry={self.entry_bytes} B, avail={self.available_size()})"
        )


# ----- the peer ----------------------------------------------------------------------------


class SGLangPeer:
    """SGLang's ``UnifiedKVPool`` with an MHA "full" sub-pool and a second sub-pool (Mamba or
    a second MHA), each with its own id-owning ``MultiEndedAllocator``, on one device.

    The full side's ``alloc``/``free``/``available_size`` are on the peer itself; the
    second side's are on ``peer.other``.

    Args:
        total_bytes: Size of the shared byte buffer.
        full_spec_params: The MHA "full" sub-pool: a mapping or an object (a ukv ``MHASpec``
            works) with ``layer_num``, ``head_num``, ``head_dim``, ``dtype`` (torch dtype or
            name), optional ``v_head_dim``, ``grow`` (``"up"``/``"down"``, default ``"up"``)
            and ``name`` (default ``"full"``).
        mamba_or_swa_params: The second sub-pool. Mamba: ``layer_num``, ``conv_shapes``,
            ``conv_dtype``, ``temporal_shape``, ``temporal_dtype``; MHA: the same fields as
            the full side. ``kind`` (``"mamba"``, ``"mha"`` or ``"swa"``) is optional (mamba
            when ``conv_shapes`` is present); ``grow`` defaults to the opposite of the full
            side's; ``name`` defaults to ``"mamba"`` / ``"swa"``.
        page_size: Tokens per page of the MHA sides (a Mamba side always uses 1).
        lazy: Lazy compaction (frees leave holes; ``flush`` or an alloc shortfall packs)
            instead of eager compaction at free time.
        kv: ``"real"``: SGLang's ``UnifiedMHATokenToKVPool`` / ``UnifiedMambaPool`` over the
            buffer, so compaction copies bytes (and MHA allocs zero their pages, as in
            SGLang); ``"fake"``: marker caches as in SGLang's unit tests; ``"auto"``: real,
            falling back to fake when the real pools do not build.
        max_moves_per_flush: Page-move cap of a non-urgent lazy flush (SGLang's
            ``SGLANG_LAZY_COMPACTION_MAX_MOVES_PER_CALL``); None keeps SGLang's default.
        device: ``"cpu"`` or ``"cuda"`` (call ``load(device)`` with the same device first:
            on CUDA it registers the ``sgl_kernel`` stand-in before SGLang is imported).

    Attributes:
        peer_moves_bytes: True when compaction moves real bytes through SGLang's KV pools,
            False when it moves markers in a fake cache.
        kv_note: Why the fake caches were used, when they were.
        pool: The SGLang ``UnifiedKVPool``.
        full, other: The two ``SGLangSide`` objects.

    Raises:
        RuntimeError: ``load()`` has not succeeded.
        TypeError, ValueError: Bad parameters. SGLang's own AssertionError/RuntimeError pass
            through for layouts it rejects (e.g. a buffer too small for the reserved floor).
    """

    def __init__(
        self,
        total_bytes: int,
        full_spec_params: Any,
        mamba_or_swa_params: Any,
        page_size: int = 1,
        lazy: bool = False,
        *,
        kv: str = "auto",
        max_moves_per_flush: int | None = None,
        device: str = "cpu",
    ) -> None:
        if not _sg:
            raise RuntimeError("SGLang is not loaded: call peer_sglang.load() first")
        if kv not in KV_MODES:
            raise ValueError(f"kv must be one of {KV_MODES}; got {kv!r}")
        self.total_bytes = int(total_bytes)
        self.page_size = int(page_size)
        self.lazy = bool(lazy)
        self.device = str(device)
        full_name, other_name, other_kind, specs = self._specs(
            full_spec_params, mamba_or_swa_params
        )
        self.pool = _sg["UnifiedKVPool"](
            total_bytes=self.total_bytes,
            sub_pool_specs=specs,
            device=self.device,
            enable_memory_saver=False,
            page_size=self.page_size,
        )
        self.kv_note = ""
        kvcaches = self._kvcaches(kv, full_name, other_name, other_kind)
        self.peer_moves_bytes = not isinstance(kvcaches[0], MarkerKVCache)
        other_ps = 1 if other_kind == "mamba" else self.page_size
        fa = self._allocator(full_name, kvcaches[0], self.page_size, max_moves_per_flush)
        oa = self._allocator(other_name, kvcaches[1], other_ps, max_moves_per_flush)
        fa.bind_peer(oa)
        oa.bind_peer(fa)
        self.full = SGLangSide(self, full_name, "mha", self.page_size, fa, kvcaches[0])
        self.other = SGLangSide(self, other_name, other_kind, other_ps, oa, kvcaches[1])

    # -- construction helpers --

    def _specs(self, full_params: Any, other_params: Any) -> tuple[str, str, str, list[Any]]:
        if _kind(full_params) != "mha":
            raise ValueError("full_spec_params must describe an MHA sub-pool")
        full_grow = str(_field(full_params, "grow", "up"))
        other_kind = _kind(other_params)
        other_grow = str(_field(other_params, "grow", "down" if full_grow == "up" else "up"))
        full_name = str(_field(full_params, "name", "full"))
        default_other = "mamba" if other_kind == "mamba" else "swa"
        other_name = str(_field(other_params, "name", default_other))
        full = _mha_spec(full_params, full_name, full_grow)
        make = _mamba_spec if other_kind == "mamba" else _mha_spec
        return full_name, other_name, other_kind, [full, make(other_params, other_name, other_grow)]

    def _kvcaches(
        self, kv: str, full_name: str, other_name: str, other_kind: str
    ) -> tuple[Any, Any]:
        if kv != "fake":
            try:
                return self._real_kvcache(full_name, "mha"), self._real_kvcache(
                    other_name, other_kind
                )
            except Exception as exc:  # noqa: BLE001 - reported through kv_note
                if kv == "real":
                    raise
                self.kv_note = (
                    f"real KV pools did not build on {self.device} ({type(exc).__name__}: {exc})"
                )
        else:
            self.kv_note = "fake KV cache requested"
        return self._marker_kvcache(full_name, self.page_size), self._marker_kvcache(
            other_name, 1 if other_kind == "mamba" else self.page_size
        )

    def _real_kvcache(self, name: str, kind: str) -> Any:
        if kind == "mamba":
            layer_num = self.pool.spec(name).layer_num
            return _sg["UnifiedMambaPool"](
                unified_buffer=self.pool,
                sub_pool_name=name,
                spec_state_size=1,
                mamba_layer_ids=list(range(layer_num)),
            )
        return _sg["UnifiedMHATokenToKVPool"](
            unified_buffer=self.pool, sub_pool_name=name, page_size=self.page_size
        )

    def _marker_kvcache(self, name: str, page_size: int) -> MarkerKVCache:
        num_pages = self.pool.max_slots(name) // page_size
        return MarkerKVCache(num_pages * page_size, self.device)

    def _allocator(self, name: str, kvcache: Any, page_size: int, max_moves: int | None) -> Any:
        allocator = _sg["MultiEndedAllocator"](
            kvcache=kvcache,
            unified_buffer=self.pool,
            sub_pool_name=name,
            device=self.device,
            is_id_owner=True,
            page_size=page_size,
            need_sort=False,
            lazy_compaction=self.lazy,
        )
        if max_moves is not None:
            allocator._lazy_max_moves_per_call = int(max_moves)
        return allocator

    # -- the full side --

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """Full side: see ``SGLangSide.alloc``."""
        return self.full.alloc(need_size)

    def free(self, ids: Any) -> None:
        """Full side: see ``SGLangSide.free``."""
        self.full.free(ids)

    def available_size(self) -> int:
        """Full side: see ``SGLangSide.available_size``."""
        return self.full.available_size()

    def schedulable_available_size(self) -> int:
        """Full side: see ``SGLangSide.schedulable_available_size``."""
        return self.full.schedulable_available_size()

    def allocated_count(self) -> int:
        """Full side: see ``SGLangSide.allocated_count``."""
        return self.full.allocated_count()

    def flush(self, urgent: bool = False) -> int:
        """Flush both sides (lazy); the total number of page moves."""
        return self.full.flush(urgent) + self.other.flush(urgent)

    def __repr__(self) -> str:
        mode = "lazy" if self.lazy else "eager"
        moves = "bytes" if self.peer_moves_bytes else "markers"
        return (
            f"SGLangPeer({self.total_bytes} B on {self.device}, ps={self.page_size}, {mode}, "
            f"moves {moves}: {self.full!r}, {self.other!r})"
        )


# ----- self-check --------------------------------------------------------------------------

SELFCHECK_PAIRS = 1000
SELFCHECK_RELOCATIONS = 200
SELFCHECK_LIVE = 64  # live one-page allocations under the relocating frees
SELFCHECK_BYTES = 4 << 20
SELFCHECK_ROUNDS = 5


def _selfcheck_specs() -> tuple[dict[str, Any], dict[str, Any]]:
    # The reference tests' geometry (design §2.7): full 2 layers x 2 heads x 4, fp16 = 64 B
    # per token; mamba 2 layers, conv (4, 3) fp32 + temporal (2, 2, 2) fp32 = 160 B per slot.
    full = {"layer_num": 2, "head_num": 2, "head_dim": 4, "dtype": torch.float16, "grow": "up"}
    mamba = {
        "kind": "mamba",
        "layer_num": 2,
        "conv_shapes": ((4, 3),),
        "conv_dtype": torch.float32,
        "temporal_shape": (2, 2, 2),
        "temporal_dtype": torch.float32,
    }
    return full, mamba


def _time_pairs(side: SGLangSide, n: int) -> float:
    """µs per alloc(one page) + free pair: the median over SELFCHECK_ROUNDS rounds of the
    mean of n / SELFCHECK_ROUNDS pairs (a 2-core box is noisy)."""
    ps = side.page_size
    per_round = max(1, n // SELFCHECK_ROUNDS)
    rounds = []
    for _ in range(SELFCHECK_ROUNDS):
        t0 = time.perf_counter()
        for _ in range(per_round):
            side.free(side.alloc(ps))
        rounds.append((time.perf_counter() - t0) / per_round * 1e6)
    return statistics.median(rounds)


def _must_alloc(side: SGLangSide, need_size: int) -> torch.Tensor:
    ids = side.alloc(need_size)
    assert ids is not None, f"{side.name}: alloc({need_size}) failed with {side!r}"
    return ids


def _moves_since(side: SGLangSide, start: int) -> int:
    """Pages relocated since the allocator's inverse history had ``start`` entries."""
    history = side.allocator._inverse_history
    return sum(int(src.numel()) for src, _dst, _v in history[start:])


def _time_relocating_frees(peer: SGLangPeer, side: SGLangSide, n: int) -> tuple[float, float]:
    """µs per relocating free: with SELFCHECK_LIVE one-page allocations live, free the
    oldest one, which sits farthest from the frontier, so the newest page moves into its
    hole. Eager moves it inside ``free``; lazy is timed as ``free`` plus the urgent flush
    that moves it. Stamps written before and checked after prove the data followed its ids.

    Returns:
        (median µs per relocating free, pages moved per free).
    """
    ps = side.page_size
    live = [_must_alloc(side, ps) for _ in range(SELFCHECK_LIVE)]
    for ids in live:
        side.stamp(ids)
    side.allocator.clear_inverse_history()
    samples = []
    for _ in range(n):
        victim = live.pop(0)
        t0 = time.perf_counter()
        side.free(victim)
        if peer.lazy:
            side.flush(urgent=True)
        samples.append((time.perf_counter() - t0) * 1e6)
        new = _must_alloc(side, ps)
        side.stamp(new)
        live.append(new)
    moved_pages = _moves_since(side, 0)
    for ids in live:
        got = side.read_stamps(ids)
        assert torch.equal(got, ids), (
            f"{side.name}: data did not follow its ids: {ids.tolist()} -> {got.tolist()}"
        )
    for ids in live:
        side.free(ids)
    peer.flush(urgent=True)
    side.allocator.clear_inverse_history()
    assert side.allocated_count() == 0, f"{side.name}: {side.allocated_count()} tokens leaked"
    return statistics.median(samples), moved_pages / n


def selfcheck(kv: str = "auto", threads: int = 1, device: str = "cpu") -> int:
    """Build peers for page sizes 1 and 16, eager and lazy; time alloc+free pairs and
    relocating frees on both sides; print the table. Returns the exit status."""
    factory, reason = load(device)
    print(f"SGLang peer: {reason}")
    if factory is None:
        return 2
    if threads > 0:
        # SGLang's free does torch.cat over the whole free-id list; past 32K elements torch
        # parallelizes it, and on a 2-core box each such op then costs ~8 ms of OpenMP
        # wake-ups instead of ~50 µs. The bench should run with the same setting.
        torch.set_num_threads(threads)
    print(
        f"torch threads: {torch.get_num_threads()}, buffer {SELFCHECK_BYTES >> 20} MiB on {device}"
    )
    full, mamba = _selfcheck_specs()
    print(
        f"{'ps':>3} {'mode':>5} {'side':>6} {'moves':>7} {'free ids':>9} {'alloc+free µs':>14} {'reloc free µs':>14} {'pages/free':>10}"
    )
    for ps in (1, 16):
        for lazy in (False, True):
            peer = factory(
                SELFCHECK_BYTES, full, mamba, page_size=ps, lazy=lazy, kv=kv, device=device
            )
            for side in (peer.full, peer.other):
                pair = _time_pairs(side, SELFCHECK_PAIRS)
                reloc, per = _time_relocating_frees(peer, side, SELFCHECK_RELOCATIONS)
                assert per >= 1.0, f"{side.name}: the relocating free moved nothing"
                what = "bytes" if peer.peer_moves_bytes else "markers"
                mode = "lazy" if lazy else "eager"
                free_ids = len(side.allocator.free_virtual_ids)
                print(
                    f"{ps:>3} {mode:>5} {side.name:>6} {what:>7} {free_ids:>9} {pair:>14.1f} {reloc:>14.1f} {per:>10.2f}"
                )
    if peer.kv_note:
        print(f"note: {peer.kv_note}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--selfcheck", action="store_true", help="build peers, time ops, exit 0")
    parser.add_argument("--kv", choices=KV_MODES, default="auto", help="real bytes or fake markers")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch.set_num_threads (0: leave as is)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    args = parser.parse_args(argv)
    if not args.selfcheck:
        factory, reason = load(args.device)
        print(reason)
        return 0 if factory is not None else 2
    return selfcheck(args.kv, args.threads, args.device)


if __name__ == "__main__":
    sys.exit(main())
