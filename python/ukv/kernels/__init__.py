"""ukv's Triton kernels: ``@triton.jit`` functions only, no validation, no allocation.

Every kernel here moves bytes the Rust core has already decided about, so each is a
plain gather/scatter over a strided view of the pool's one ``uint8`` buffer:

- :mod:`.store_kv` writes new K/V rows at physical token ids (page-major views).
- :mod:`.move_pages` copies whole page envelopes as wide words, one launch per move
  plan, optionally updating the allocator's v2p/p2v tables in the same launch.
- :mod:`.plan` executes a packed plan (moves, table rows, returned ids) in one launch.
- :mod:`.state` zeroes Mamba state slots (slot copies reuse the page-move kernel).
- :mod:`.translate` maps virtual token ids to physical ones through a v2p table.

The validating wrappers and the grid computation live in ``ukv.ops``, the pure-torch
references in ``ukv.reference``; call the kernels through ``ukv.ops``, never directly. This
directory is shipped inside the wheel as ``ukv.kernels``, so modules here use relative imports
only.
"""

from . import move_pages, plan, state, store_kv, translate

__all__ = ["move_pages", "plan", "state", "store_kv", "translate"]
