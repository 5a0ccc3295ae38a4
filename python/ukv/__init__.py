"""ukv: a unified KV-cache memory pool for serving hybrid LLMs.

One byte buffer holds both kinds of cache of a hybrid model (full-attention KV and Mamba
state, or full and sliding-window KV); two sub-pools grow from its opposite ends, frees
compact each side, callers hold stable virtual ids, and a virtual→physical table absorbs
every move. See ``UnifiedKVPool`` and ``SubPoolAllocator``.
"""

from ukv.allocator import SubPoolAllocator
from ukv.errors import (
    ArgumentError,
    DeferredFreeError,
    DoubleFreeError,
    InvalidIdError,
    InvariantError,
    PoolConfigError,
    PoolPoisonedError,
    UkvError,
)
from ukv.hybrid import (
    HybridPool,
    MambaHybridAllocator,
    MambaSlots,
    RequestTable,
    SWAHybridAllocator,
    build_mamba_hybrid,
    build_swa_hybrid,
)
from ukv.pool import PoolStats, SubPoolStats, UnifiedKVPool
from ukv.specs import MambaSpec, MHASpec, MLASpec, Spec

__all__ = [
    "ArgumentError",
    "DeferredFreeError",
    "DoubleFreeError",
    "HybridPool",
    "InvalidIdError",
    "InvariantError",
    "MHASpec",
    "MambaHybridAllocator",
    "MambaSlots",
    "MLASpec",
    "MambaSpec",
    "PoolConfigError",
    "PoolPoisonedError",
    "PoolStats",
    "RequestTable",
    "SWAHybridAllocator",
    "Spec",
    "SubPoolAllocator",
    "SubPoolStats",
    "UkvError",
    "UnifiedKVPool",
    "build_mamba_hybrid",
    "build_swa_hybrid",
]
