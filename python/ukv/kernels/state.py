"""Mamba state slots: zero whole slot envelopes in one launch.

Layout (reference-design §2.5): a Mamba sub-pool is anchored at byte 0 like every other
sub-pool, and slot ``s`` owns the byte range ``[s*entry_bytes, (s+1)*entry_bytes)`` (all
conv rows of all layers, then all temporal rows). Clearing a slot therefore means zeroing
one contiguous envelope, which the wrapper does as wide words, like a page move.

Slot copy-on-write (``copy_slots``) is exactly a page move with ``page_bytes =
entry_bytes``, so it reuses :func:`..move_pages.move_pages_kernel` rather than keeping a
second copy kernel in step with it.

Padding ids (``< 0``, the engine's "no state" marker) are skipped, as are ids past the
buffer, so a CUDA-graph padded batch can be cleared without host-side filtering.
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["num_ids"])
def clear_slots_kernel(
    buf_ptr,
    slots_ptr,
    num_ids,
    slot_words,
    num_slots,
    stride_slots,
    BLOCK: tl.constexpr,
    TILES: tl.constexpr,
):
    """Zero chunk ``program_id(1)`` of the envelope of slot ``slots[program_id(0)]``.

    Grid: ``(num_ids, cdiv(slot_words, BLOCK * TILES))``.
    """
    pid_id = tl.program_id(0)
    pid_chunk = tl.program_id(1)
    has_id = pid_id < num_ids
    slot = tl.load(slots_ptr + pid_id.to(tl.int64) * stride_slots, mask=has_id, other=-1)
    slot = slot.to(tl.int64)
    valid = (slot >= 0) & (slot < num_slots)
    # A skipped id has no words to zero: the predicate goes into the bound, so the mask
    # is one block comparison (see move_pages.copy_envelope_chunk for why).
    num_words = tl.where(valid, slot_words, 0)
    base = buf_ptr + slot * slot_words
    zeros = tl.zeros([BLOCK], dtype=buf_ptr.dtype.element_ty)
    chunk_start = pid_chunk.to(tl.int64) * (BLOCK * TILES)
    for tile in tl.static_range(TILES):
        offs = chunk_start + tile * BLOCK + tl.arange(0, BLOCK)
        mask = offs < num_words
        tl.store(base + offs, zeros, mask=mask)
