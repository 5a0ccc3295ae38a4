"""The version seam: which SGLang modules the drop-in serves, and from where, per release.

SGLang moved its unified pool between releases: 0.5.16 has it in
``mem_cache.unified_memory_pool`` and ``mem_cache.multi_ended_allocator``; 0.5.23 moved
the allocators to ``mem_cache.allocator.unified_{sub_pool,mamba,hybrid_swa}`` and grew
the pool module. Each :class:`Layout` holds one release's tables: the modules the finder
serves (SGLang module -> {name: (ukv module, attribute)}), the names passed through from
SGLang itself, and where SGLang keeps the base classes the drop-in derives from.
``install`` and ``bases`` read the tables here and nowhere else.

:func:`current` picks the layout of the SGLang found on ``sys.path`` without importing
any SGLang module: it reads the version from the distribution metadata next to the
``sglang`` package (``sglang-*.dist-info``), else from ``sglang/_version.py``, else from
``importlib.metadata``. ``UKV_SGLANG_LAYOUT`` (``0.5.16`` or ``0.5.23``) overrides the
choice; with no SGLang (or no version) the 0.5.16 layout is served, as before.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import re
import sys
import warnings
from dataclasses import dataclass

__all__ = [
    "LAYOUTS",
    "SGLANG_0516",
    "SGLANG_0523",
    "Layout",
    "current",
    "installed_version",
    "layout_for",
    "served_module_names",
]

_PKG = "ukv.integrations.sglang"
_NEW = f"{_PKG}.v0523"

Table = dict[str, dict[str, tuple[str, str]]]


@dataclass(frozen=True)
class Layout:
    """One SGLang release's module layout, as the drop-in serves it.

    Attributes:
        version: The release this layout was written for (``"0.5.16"``).
        modules: SGLang module -> {name: (ukv module, attribute)}: what the finder serves.
        passthrough: SGLang module -> {name: (SGLang module, attribute)}: names SGLang's
            module re-exports from SGLang itself, served when SGLang has them (its tests
            replace them at runtime; the drop-in never calls them).
        bases: name -> (SGLang module, attribute): the base classes the drop-in's classes
            derive from (``bases`` imports them lazily, stand-ins without SGLang).
    """

    version: str
    modules: Table
    passthrough: Table
    bases: dict[str, tuple[str, str]]


_BASES_0516: dict[str, tuple[str, str]] = {
    "BaseTokenToKVPoolAllocator": ("sglang.srt.mem_cache.allocator", "BaseTokenToKVPoolAllocator"),
    "SWATokenToKVPoolAllocator": (
        "sglang.srt.mem_cache.allocator.swa",
        "SWATokenToKVPoolAllocator",
    ),
    "SWAKVPool": ("sglang.srt.mem_cache.swa_memory_pool", "SWAKVPool"),
    "ReqToTokenPool": ("sglang.srt.mem_cache.memory_pool", "ReqToTokenPool"),
    "HybridReqToTokenPool": ("sglang.srt.mem_cache.memory_pool", "HybridReqToTokenPool"),
    "HybridLinearKVPool": ("sglang.srt.mem_cache.memory_pool", "HybridLinearKVPool"),
    "MHATokenToKVPool": ("sglang.srt.mem_cache.memory_pool", "MHATokenToKVPool"),
    "MambaPool": ("sglang.srt.mem_cache.memory_pool", "MambaPool"),
    "KVWriteLoc": ("sglang.srt.mem_cache.memory_pool", "KVWriteLoc"),
    "TorchMemorySaverAdapter": (
        "sglang.srt.utils.torch_memory_saver_adapter",
        "TorchMemorySaverAdapter",
    ),
    "GPU_MEMORY_TYPE_KV_CACHE": ("sglang.srt.constants", "GPU_MEMORY_TYPE_KV_CACHE"),
}

SGLANG_0516 = Layout(
    version="0.5.16",
    modules={
        "sglang.srt.mem_cache.unified_memory_pool": {
            "GB": (f"{_PKG}.pool", "GB"),
            "SubPoolSpec": (f"{_PKG}.specs", "SubPoolSpec"),
            "MHASubPoolSpec": (f"{_PKG}.specs", "MHASubPoolSpec"),
            "MambaSubPoolSpec": (f"{_PKG}.specs", "MambaSubPoolSpec"),
            "UnifiedKVPool": (f"{_PKG}.pool", "UnifiedKVPool"),
            "UnifiedMHATokenToKVPool": (f"{_PKG}.kvcache", "UnifiedMHATokenToKVPool"),
            "UnifiedMambaPool": (f"{_PKG}.kvcache", "UnifiedMambaPool"),
            "UnifiedSWAKVPool": (f"{_PKG}.kvcache", "UnifiedSWAKVPool"),
            "UnifiedMambaSlotAllocator": (f"{_PKG}.requests", "UnifiedMambaSlotAllocator"),
            "UnifiedHybridReqToTokenPool": (f"{_PKG}.requests", "UnifiedHybridReqToTokenPool"),
            "UnifiedPoolBundle": (f"{_PKG}.factories", "UnifiedPoolBundle"),
            "UnifiedSWAPoolBundle": (f"{_PKG}.factories", "UnifiedSWAPoolBundle"),
            "init_unified_mamba_pools": (f"{_PKG}.factories", "init_unified_mamba_pools"),
            "init_unified_swa_pools": (f"{_PKG}.factories", "init_unified_swa_pools"),
        },
        "sglang.srt.mem_cache.multi_ended_allocator": {
            "MultiEndedAllocator": (f"{_PKG}.allocator", "MultiEndedAllocator"),
            "UnifiedMambaTokenToKVPoolAllocator": (
                f"{_PKG}.composites",
                "UnifiedMambaTokenToKVPoolAllocator",
            ),
            "UnifiedSWATokenToKVPoolAllocator": (
                f"{_PKG}.composites",
                "UnifiedSWATokenToKVPoolAllocator",
            ),
            "UnifiedKVPool": (f"{_PKG}.pool", "UnifiedKVPool"),
        },
    },
    passthrough={
        "sglang.srt.mem_cache.multi_ended_allocator": {
            "alloc_extend_kernel": ("sglang.srt.mem_cache.allocator.paged", "alloc_extend_kernel"),
            "alloc_decode_kernel": ("sglang.srt.mem_cache.allocator.paged", "alloc_decode_kernel"),
        },
    },
    bases=_BASES_0516,
)

SGLANG_0523 = Layout(
    version="0.5.23",
    modules={
        "sglang.srt.mem_cache.unified_memory_pool": {
            "GB": (f"{_PKG}.pool", "GB"),
            "SubPoolSpec": (f"{_PKG}.specs", "SubPoolSpec"),
            "MHASubPoolSpec": (f"{_NEW}.specs", "MHASubPoolSpec"),
            "MLASubPoolSpec": (f"{_NEW}.specs", "MLASubPoolSpec"),
            "MambaSubPoolSpec": (f"{_NEW}.specs", "MambaSubPoolSpec"),
            "_store_dtype_for": (f"{_NEW}.specs", "_store_dtype_for"),
            "_reserved_floor_bytes": (f"{_NEW}.specs", "_reserved_floor_bytes"),
            "UnifiedKVPool": (f"{_NEW}.pool", "UnifiedKVPool"),
            "UnifiedMHATokenToKVPool": (f"{_NEW}.kvcache", "UnifiedMHATokenToKVPool"),
            "UnifiedMLATokenToKVPool": (f"{_NEW}.kvcache", "UnifiedMLATokenToKVPool"),
            "UnifiedMambaPool": (f"{_NEW}.kvcache", "UnifiedMambaPool"),
            "UnifiedSWAKVPool": (f"{_NEW}.kvcache", "UnifiedSWAKVPool"),
            "UnifiedHybridLinearKVPool": (f"{_NEW}.kvcache", "UnifiedHybridLinearKVPool"),
            "UnifiedMambaSlotAllocator": (f"{_PKG}.requests", "UnifiedMambaSlotAllocator"),
            "UnifiedHybridReqToTokenPool": (f"{_NEW}.requests", "UnifiedHybridReqToTokenPool"),
            "UnifiedPoolBundle": (f"{_PKG}.factories", "UnifiedPoolBundle"),
            "UnifiedSWAPoolBundle": (f"{_PKG}.factories", "UnifiedSWAPoolBundle"),
            "init_unified_mamba_pools": (f"{_NEW}.factories", "init_unified_mamba_pools"),
            "init_unified_swa_pools": (f"{_NEW}.factories", "init_unified_swa_pools"),
            "init_unified_mamba_swa_pools": (f"{_NEW}.factories", "init_unified_mamba_swa_pools"),
        },
        "sglang.srt.mem_cache.allocator.unified_sub_pool": {
            "MultiEndedAllocator": (f"{_NEW}.allocator", "MultiEndedAllocator"),
            "FloatMultiEndedAllocator": (f"{_NEW}.allocator", "FloatMultiEndedAllocator"),
            "install_move_gate": (f"{_NEW}.allocator", "install_move_gate"),
        },
        "sglang.srt.mem_cache.allocator.unified_mamba": {
            "UnifiedMambaTokenToKVPoolAllocator": (
                f"{_NEW}.composites",
                "UnifiedMambaTokenToKVPoolAllocator",
            ),
        },
        "sglang.srt.mem_cache.allocator.unified_hybrid_swa": {
            "UnifiedSWAAllocatorBase": (f"{_NEW}.composites", "UnifiedSWAAllocatorBase"),
            "UnifiedSWATokenToKVPoolAllocator": (
                f"{_NEW}.composites",
                "UnifiedSWATokenToKVPoolAllocator",
            ),
            "UnifiedMambaSWATokenToKVPoolAllocator": (
                f"{_NEW}.composites",
                "UnifiedMambaSWATokenToKVPoolAllocator",
            ),
        },
    },
    passthrough={},
    bases={
        **_BASES_0516,
        "MLATokenToKVPool": ("sglang.srt.mem_cache.memory_pool", "MLATokenToKVPool"),
    },
)

#: Every layout, oldest first.
LAYOUTS: tuple[Layout, ...] = (SGLANG_0516, SGLANG_0523)

_ENV = "UKV_SGLANG_LAYOUT"
_VERSION_LINE = re.compile(r"^Version:\s*(\S+)", re.MULTILINE)
_VERSION_PY = re.compile(
    r"""^__version__\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M
)


def _release(version: str) -> tuple[int, ...]:
    """``"0.5.23.post1"`` -> ``(0, 5, 23)`` (the leading release numbers)."""
    parts = []
    for piece in version.split("."):
        m = re.match(r"\d+", piece)
        if m is None:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):
            break
    return tuple(parts)


def _package_dir() -> str | None:
    """The directory holding the ``sglang`` package the import system would load
    (already loaded or found on ``sys.path``); no SGLang code runs."""
    loaded = sys.modules.get("sglang")
    if loaded is not None:
        paths = list(getattr(loaded, "__path__", []) or [])
        return os.path.dirname(os.path.abspath(paths[0])) if paths else None
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(os.path.abspath(list(spec.submodule_search_locations)[0]))


def installed_version() -> str | None:
    """The version of the SGLang on ``sys.path``, read without importing SGLang; None
    when there is no SGLang or no version to read."""
    root = _package_dir()
    if root is None:
        return None
    for meta in sorted(glob.glob(os.path.join(root, "sglang-*.dist-info", "METADATA"))):
        with open(meta, encoding="utf-8", errors="replace") as f:
            m = _VERSION_LINE.search(f.read(4096))
        if m:
            return m.group(1)
    version_py = os.path.join(root, "sglang", "_version.py")
    if os.path.isfile(version_py):
        with open(version_py, encoding="utf-8", errors="replace") as f:
            m = _VERSION_PY.search(f.read())
        if m:
            return m.group(1)
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def layout_for(version: str | None) -> Layout:
    """The layout to serve for SGLang ``version``: the newest layout whose release is
    not newer than it (0.5.16's for None or anything older). A version that no layout
    was written for gets a ``UserWarning`` naming the layout served."""
    if version is None:
        return SGLANG_0516
    release = _release(version)
    chosen = SGLANG_0516
    for layout in LAYOUTS:
        if _release(layout.version) <= release:
            chosen = layout
    if _release(chosen.version) != release:
        warnings.warn(
            f"ukv's SGLang drop-in: SGLang {version} has no layout of its own; serving "
            f"{chosen.version}'s module layout (docs/SGLANG.md)",
            stacklevel=3,
        )
    return chosen


_cached: Layout | None = None


def current() -> Layout:
    """The layout for the SGLang found now (``UKV_SGLANG_LAYOUT`` overrides it). Cached
    once an SGLang version has been read; until then (no SGLang on the path yet) the
    answer is 0.5.16's and is asked again next time.

    Raises:
        ValueError: ``UKV_SGLANG_LAYOUT`` names no layout.
    """
    global _cached
    forced = os.environ.get(_ENV)
    if forced:
        for layout in LAYOUTS:
            if layout.version == forced:
                return layout
        raise ValueError(f"{_ENV} = {forced!r}: must be one of {[lay.version for lay in LAYOUTS]}")
    if _cached is not None:
        return _cached
    version = installed_version()
    layout = layout_for(version)
    if version is not None:
        _cached = layout
    return layout


def served_module_names() -> frozenset[str]:
    """Every SGLang module name some layout serves (what an installed finder answers
    for, and what a late ``install()`` looks for in ``sys.modules``)."""
    return frozenset(name for layout in LAYOUTS for name in layout.modules)
