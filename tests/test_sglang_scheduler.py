"""SGLang 0.5.16's own scheduler on its unified pool and on the ukv drop-in, side by side.

``benches/sglang_scheduler_driver.py`` drives SGLang's admission (``PrefillAdder``),
allocation with eviction, radix caches, retraction and idle leak check in strict mode on
one pool per process; these tests run it in child processes over the configuration matrix
and assert the pass criteria. They need SGLang installed ``--no-deps`` outside
site-packages and named by ``UKV_SGLANG_PATH`` (docs/SGLANG.md, "Testing against SGLang"),
and are skipped otherwise, as ``tests/test_sglang_dropin_real.py`` is.

The drop-in defects the driver found have their regression tests here too; they run
everywhere (the drop-in's stand-in bases suffice).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from dropin_builders import swa_bundle  # noqa: E402

# ----- drop-in defects the driver found ------------------------------------------------------


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("lazy", [False, True])
def test_free_swa_skips_tokens_already_freed(page_size: int, lazy: bool) -> None:
    """SGLang's ``UnifiedRadixCache`` evicts a node's full side first (``allocator.free``,
    which releases both sides), then its SWA component calls ``free_swa`` on the same ids
    (``SWAComponent.evict_component``). SGLang's composite keeps only the tokens whose SWA
    page is still bound, so that call does nothing; the drop-in raised
    ``SGLangDoubleFreeError`` ("not live") and took the scheduler down."""
    a = swa_bundle(full_tokens=64, swa_tokens=64, page_size=page_size, lazy=lazy)
    a = a.token_to_kv_pool_allocator
    gone = a.alloc(2 * page_size)
    kept = a.alloc(2 * page_size)
    a.free(gone)
    sizes = (a.full_available_size(), a.swa_available_size(), a.available_size())
    a.free_swa(gone)  # all of them freed already: nothing to do
    assert (a.full_available_size(), a.swa_available_size(), a.available_size()) == sizes
    a.free_swa(torch.cat([gone, kept]))  # a mix: only the live ones lose their SWA slot
    assert bool((a.translate_loc_from_full_to_swa(kept) == 0).all())
    assert bool((a.translate_kv_loc(kept) > 0).all())
    a.free(kept)
