"""Hybrid composites: the units a scheduler thinks in (tokens and requests) over two
sub-pools of one :class:`~ukv.pool.UnifiedKVPool`.

- :class:`SWAHybridAllocator`: full + sliding-window attention over one id space.
- :class:`MambaHybridAllocator`: full-attention tokens + per-request state slots.
- :class:`RequestTable`: request → tokens / state, on the device with a host mirror.
- :func:`build_mamba_hybrid`, :func:`build_swa_hybrid`: sized, checked pools from shapes.
"""

from ukv.hybrid.factories import HybridPool, build_mamba_hybrid, build_swa_hybrid
from ukv.hybrid.mamba import MambaHybridAllocator, MambaSlots
from ukv.hybrid.request_table import RequestTable
from ukv.hybrid.swa import SWAHybridAllocator

__all__ = [
    "HybridPool",
    "MambaHybridAllocator",
    "MambaSlots",
    "RequestTable",
    "SWAHybridAllocator",
    "build_mamba_hybrid",
    "build_swa_hybrid",
]
