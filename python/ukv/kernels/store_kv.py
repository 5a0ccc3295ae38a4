"""Store new K/V rows into the page-major per-layer views of the pool.

Layout (reference-design §2.4): per layer, ``K[L]`` is a strided view
``(num_pages, page_size, head_num, head_dim)`` over the pool's byte buffer, with
element strides ``(page_bytes/isz, k_row/isz, head_dim, 1)``; ``V[L]`` is the same with
``v_head_dim``. Physical token ``t`` lives at ``[t // page_size, t % page_size]``. The
trailing two dims are contiguous, so one token's row of ``head_num*head_dim`` elements
is a single contiguous run of memory: the kernel treats it as a flat row.

Why one program per *block of tokens* rather than per token: a decode step stores a few
hundred short rows, a prefill hundreds of thousands. A 2-D tile ``BLOCK_N x BLOCK_ROW``
keeps every thread busy with wide (16-byte) accesses whatever the row length, and the
page/token split is computed once per token, not once per row chunk. Axis 1 of the grid
selects K (0) or V (1), whose rows may differ in length (``v_head_dim != head_dim``).

The wrapper bit-views all data as same-width integers, so the kernel moves bits and is
byte-identical to ``k_view[loc // ps, loc % ps] = k`` (fp8 included).
"""

import triton
import triton.language as tl


@triton.jit
def _store_rows(
    view_ptr,
    src_ptr,
    loc,
    offs_n,
    mask_n,
    stride_src_n,
    stride_view_page,
    stride_view_tok,
    ROW: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_ROW: tl.constexpr,
):
    """Copy the rows ``src[offs_n, :ROW]`` to their physical slots ``view[loc]``."""
    if PAGE_SIZE == 1:
        dst_row = loc * stride_view_page
    else:
        dst_row = (loc // PAGE_SIZE) * stride_view_page + (loc % PAGE_SIZE) * stride_view_tok
    src_row = offs_n.to(tl.int64) * stride_src_n
    for col_start in tl.static_range(0, ROW, BLOCK_ROW):
        offs_col = col_start + tl.arange(0, BLOCK_ROW)
        mask = mask_n[:, None] & (offs_col < ROW)[None, :]
        rows = tl.load(src_ptr + src_row[:, None] + offs_col[None, :], mask=mask)
        tl.store(view_ptr + dst_row[:, None] + offs_col[None, :], rows, mask=mask)


# The token count changes every step: no recompile for it. The strides stay specialised
# (multiples of 16 let the compiler prove 16-byte alignment and vectorise).
@triton.jit(do_not_specialize=["num_tokens"])
def store_kv_kernel(
    k_view_ptr,
    v_view_ptr,
    k_ptr,
    v_ptr,
    loc_ptr,
    num_tokens,
    num_slots,
    stride_loc,
    stride_kview_page,
    stride_kview_tok,
    stride_vview_page,
    stride_vview_tok,
    stride_k_n,
    stride_v_n,
    PAGE_SIZE: tl.constexpr,
    K_ROW: tl.constexpr,
    V_ROW: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    """Scatter ``BLOCK_N`` tokens' K (axis 1 == 0) or V (axis 1 == 1) rows.

    Grid: ``(cdiv(num_tokens, BLOCK_N), 2)``. Tokens whose ``loc`` falls outside
    ``[0, num_slots)`` are skipped instead of writing outside the view.
    """
    pid_n = tl.program_id(0)
    pid_kv = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < num_tokens
    loc = tl.load(loc_ptr + offs_n.to(tl.int64) * stride_loc, mask=mask_n, other=0).to(tl.int64)
    mask_n = mask_n & (loc >= 0) & (loc < num_slots)
    if pid_kv == 0:
        _store_rows(
            k_view_ptr,
            k_ptr,
            loc,
            offs_n,
            mask_n,
            stride_k_n,
            stride_kview_page,
            stride_kview_tok,
            K_ROW,
            PAGE_SIZE,
            BLOCK_K,
        )
    else:
        _store_rows(
            v_view_ptr,
            v_ptr,
            loc,
            offs_n,
            mask_n,
            stride_v_n,
            stride_vview_page,
            stride_vview_tok,
            V_ROW,
            PAGE_SIZE,
            BLOCK_V,
        )
