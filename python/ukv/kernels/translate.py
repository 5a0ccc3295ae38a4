"""Translate virtual token ids to physical token ids through a v2p page table.

``phys = v2p[id // page_size] * page_size + id % page_size`` (reference-design §3.9).
Anything that cannot name a live token maps to 0, the padding sink: a tombstoned page
(``v2p == -1``, giving ``[-page_size, -1]`` before the clamp), a negative id, and an id
whose page is past the table. Triton's integer division truncates toward zero, so
negative ids are masked out before dividing instead of relying on floor semantics.

Why a kernel and not the torch op chain: the chain is five launches and as many
temporaries per call, and translate runs on every forward step. This is one launch, no
host sync and no data-dependent shape, so it can be captured in a CUDA graph.

``SLOTS`` (state slots, page size 1): what names no live slot maps to -1 instead ("no
state", which state kernels skip), and so does id 0, the padding anchor (never a
request's state).

In-place use (``out`` aliasing ``ids``) is safe: each program loads its block of ids
before storing the same positions, and no two programs touch the same position.
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["num_ids"])
def translate_kernel(
    ids_ptr,
    v2p_ptr,
    out_ptr,
    num_ids,
    num_v2p,
    stride_ids,
    stride_v2p,
    stride_out,
    PAGE_SIZE: tl.constexpr,
    BLOCK: tl.constexpr,
    SLOTS: tl.constexpr = False,
):
    """Write ``out[i] = translate(ids[i])`` for ``BLOCK`` ids. Grid: ``cdiv(num_ids, BLOCK)``."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < num_ids
    ids = tl.load(ids_ptr + offs * stride_ids, mask=mask, other=-1).to(tl.int64)
    if SLOTS:
        valid = mask & (ids > 0)
    else:
        valid = mask & (ids >= 0)
    if PAGE_SIZE == 1:
        page = ids
    else:
        page = ids // PAGE_SIZE
    valid = valid & (page < num_v2p)
    base = tl.load(v2p_ptr + page * stride_v2p, mask=valid, other=-1).to(tl.int64)
    if PAGE_SIZE == 1:
        phys = base
    else:
        phys = base * PAGE_SIZE + ids % PAGE_SIZE
    if SLOTS:
        phys = tl.where(valid & (phys >= 0), phys, -1)
    else:
        phys = tl.where(valid & (phys >= 0), phys, 0)
    tl.store(out_ptr + offs * stride_out, phys.to(out_ptr.dtype.element_ty), mask=mask)
