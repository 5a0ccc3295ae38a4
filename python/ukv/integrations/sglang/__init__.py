"""ukv inside SGLang: a drop-in for SGLang's unified memory pool (docs/SGLANG.md).

``install()`` serves ``sglang.srt.mem_cache.unified_memory_pool`` and
``sglang.srt.mem_cache.multi_ended_allocator`` from this package (same class names,
keywords and methods, ukv's core and kernels inside); ``uninstall()`` undoes it. The
classes live in one module per concept (``pool``, ``specs``, ``allocator``,
``composites``, ``kvcache``, ``requests``, ``factories``); they derive from SGLang's base
classes when SGLang is importable (``bases``), else from stand-ins.
"""

from ukv.integrations.sglang.install import install, installed, uninstall

__all__ = ["install", "installed", "uninstall"]
