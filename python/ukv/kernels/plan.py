"""Execute one sub-pool's part of a packed plan in one launch: page moves, table rows, ids.

The Rust core packs a plan into one flat int64 payload (``Arena.pack_plan``): the ids an
allocation returns, then per sub-pool the ``(src, dst)`` page pairs and the changed
``[v2p | p2v]`` table rows with their values. On CUDA the payload sits in pinned host
memory and this kernel reads it straight from there (no host-to-device copy), so an
allocator call costs one launch whatever it changed.

Grid ``(num_pairs + num_tab_blocks + num_tok_blocks, num_chunks)``, axis 0 split into three
ranges: page pairs (each copying chunk ``program_id(1)`` of one page envelope, as
:mod:`.move_pages` does), then blocks of table rows, then blocks of returned ids. Table and
id programs work only at chunk 0. The src and dst sets of a plan are disjoint and a row
repeated in one plan carries one value, so no two programs race.

Returned ids: ``out[i] = tokens[i]``, except, when ``HAS_REQ`` and ``req[i] >= 0``
(``alloc_extend``/``alloc_decode`` with ``last_loc`` on the device), a token continuing
request ``r = req[i]``'s partial page: ``tokens[i] = k + page_size * e`` and the id is
``last_loc[r] + k`` when ``last_loc[r]`` lies in ``[id_lo, id_hi)``, at in-page offset
``e``, on a page whose ``v2p`` row is bound; otherwise 0 (the padding sink), counted in
``err[0]`` with ``err[1]`` lowered to ``r << 32 | clamp(last_loc[r] + 1, 0, 2^32 - 1)``
(see :mod:`ukv.execution.continuation`).
"""

import triton
import triton.language as tl

from .move_pages import copy_envelope_chunk, update_table_block


@triton.jit
def write_ids_block(
    tok_ptr,
    req_ptr,
    last_ptr,
    out_ptr,
    v2p_ptr,
    err_ptr,
    pid_block,
    num_tokens,
    stride_last,
    page_size,
    id_lo,
    id_hi,
    HAS_REQ: tl.constexpr,
    TAB_BLOCK: tl.constexpr,
):
    """Write returned ids ``[pid_block*TAB_BLOCK, ...)``, finishing continuations."""
    offs = pid_block.to(tl.int64) * TAB_BLOCK + tl.arange(0, TAB_BLOCK)
    mask = offs < num_tokens
    ids = tl.load(tok_ptr + offs, mask=mask, other=0).to(tl.int64)
    if HAS_REQ:
        req = tl.load(req_ptr + offs, mask=mask, other=-1).to(tl.int64)
        has_req = mask & (req >= 0)
        last = tl.load(last_ptr + req * stride_last, mask=has_req, other=-1).to(tl.int64)
        ps = page_size.to(tl.int64)
        k = ids % ps
        want = ids // ps
        in_range = has_req & (last >= id_lo) & (last < id_hi)
        page = tl.where(in_range, last // ps, 0)
        bound = tl.load(v2p_ptr + page, mask=in_range, other=-1) >= 0
        ok = in_range & bound & ((last % ps) == want) & (k >= 1)
        bad = has_req & (ok == 0)
        ids = tl.where(has_req, tl.where(ok, last + k, 0), ids)
        n_bad = tl.sum(bad.to(tl.int64), axis=0)
        if n_bad > 0:
            value = tl.minimum(tl.maximum(last + 1, 0), 4294967295)
            key = tl.where(bad, (req << 32) | value, 9223372036854775807)
            tl.atomic_add(err_ptr, n_bad)
            tl.atomic_min(err_ptr + 1, tl.min(key, axis=0))
    tl.store(out_ptr + offs, ids, mask=mask)


@triton.jit(
    do_not_specialize=[
        "num_pairs",
        "num_updates",
        "num_tokens",
        "num_tab_blocks",
        "page_size",
        "id_lo",
        "id_hi",
    ]
)
def apply_plan_kernel(
    buf_ptr,
    src_ptr,
    dst_ptr,
    tables_ptr,
    tab_idx_ptr,
    tab_val_ptr,
    tok_ptr,
    req_ptr,
    last_ptr,
    out_ptr,
    v2p_ptr,
    err_ptr,
    num_pairs,
    page_words,
    num_pages,
    num_updates,
    table_len,
    num_tokens,
    num_tab_blocks,
    stride_last,
    page_size,
    id_lo,
    id_hi,
    BLOCK: tl.constexpr,
    TILES: tl.constexpr,
    TAB_BLOCK: tl.constexpr,
    HAS_TOKENS: tl.constexpr,
    HAS_REQ: tl.constexpr,
):
    """Moves, then table rows, then returned ids; every payload array has stride 1."""
    pid = tl.program_id(0)
    pid_chunk = tl.program_id(1)
    if pid < num_pairs:
        copy_envelope_chunk(
            buf_ptr,
            src_ptr,
            dst_ptr,
            pid,
            pid_chunk,
            num_pairs,
            page_words,
            num_pages,
            1,
            1,
            BLOCK,
            TILES,
        )
    elif pid < num_pairs + num_tab_blocks:
        if pid_chunk == 0:
            update_table_block(
                tables_ptr,
                tab_idx_ptr,
                tab_val_ptr,
                pid - num_pairs,
                num_updates,
                table_len,
                1,
                1,
                1,
                TAB_BLOCK,
            )
    elif HAS_TOKENS:
        if pid_chunk == 0:
            write_ids_block(
                tok_ptr,
                req_ptr,
                last_ptr,
                out_ptr,
                v2p_ptr,
                err_ptr,
                pid - num_pairs - num_tab_blocks,
                num_tokens,
                stride_last,
                page_size,
                id_lo,
                id_hi,
                HAS_REQ,
                TAB_BLOCK,
            )
