"""Serve SGLang's unified-memory-pool modules from ukv (a ``sys.meta_path`` finder).

After :func:`install`, ``import sglang.srt.mem_cache.unified_memory_pool`` and
``import sglang.srt.mem_cache.multi_ended_allocator`` give modules whose names are the
drop-in's classes and factories, so SGLang's own ``isinstance`` checks and imports see
ukv's objects. :func:`uninstall` removes the finder and forgets modules it served.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__all__ = ["MODULES", "PASSTHROUGH", "install", "installed", "uninstall"]

_PKG = "ukv.integrations.sglang"

#: SGLang module -> {name: (ukv module, attribute)} (SGLang 0.5.16's layout: the
#: version seam; 0.5.23 moved these under ``mem_cache.allocator.unified_*``).
MODULES: dict[str, dict[str, tuple[str, str]]] = {
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
}


#: Names SGLang's module re-exports from SGLang itself and its tests may replace at
#: runtime (``monkeypatch.setattr`` needs them present). Served when SGLang has them; the
#: drop-in never calls them (ukv allocates in its core), so replacing them changes nothing.
PASSTHROUGH: dict[str, dict[str, tuple[str, str]]] = {
    "sglang.srt.mem_cache.multi_ended_allocator": {
        "alloc_extend_kernel": ("sglang.srt.mem_cache.allocator.paged", "alloc_extend_kernel"),
        "alloc_decode_kernel": ("sglang.srt.mem_cache.allocator.paged", "alloc_decode_kernel"),
    },
}


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        module.__doc__ = f"SGLang's {module.__name__}, served by the ukv drop-in ({_PKG})."
        for name, (source, attr) in MODULES[module.__name__].items():
            setattr(module, name, getattr(importlib.import_module(source), attr))
        for name, (source, attr) in PASSTHROUGH.get(module.__name__, {}).items():
            try:
                setattr(module, name, getattr(importlib.import_module(source), attr))
            except (ImportError, AttributeError):
                pass  # SGLang without them: nothing to replace
        module.__all__ = list(MODULES[module.__name__])  # type: ignore[attr-defined]
        module.__ukv_dropin__ = True  # type: ignore[attr-defined]


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), origin=f"ukv:{_PKG}")


_finder: _Finder | None = None


def installed() -> bool:
    """Whether the finder is on ``sys.meta_path``."""
    return _finder is not None and _finder in sys.meta_path


def install() -> None:
    """Serve SGLang's unified-pool modules from ukv (idempotent). Call it before SGLang
    imports them; modules of those names imported earlier are dropped from
    ``sys.modules`` so the next import gets the drop-in (objects already built from them
    stay SGLang's)."""
    global _finder
    if installed():
        return
    _finder = _Finder()
    sys.meta_path.insert(0, _finder)
    for name in MODULES:
        mod = sys.modules.get(name)
        if mod is not None and not getattr(mod, "__ukv_dropin__", False):
            del sys.modules[name]


def uninstall() -> None:
    """Remove the finder and forget the modules it served (idempotent)."""
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None
    for name in MODULES:
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__ukv_dropin__", False):
            del sys.modules[name]
