"""Move whole page envelopes inside the pool's byte buffer, as wide words, in one launch.

Layout (reference-design §2.3): every sub-pool is anchored at byte 0, so physical page
``p`` of a sub-pool is the byte range ``[p*page_bytes, (p+1)*page_bytes)`` of the one
buffer, whatever the layer count or the K/V split inside the page. A compaction plan is
a list of ``(src, dst)`` page pairs; copying the envelopes byte for byte moves every
layer's K and V (or every Mamba state row) of those pages at once.

Why this shape:

- The wrapper views the buffer as the widest integer dtype that divides both the page
  size and the buffer's alignment (int64 for any realistic page), so each thread moves
  16-byte vectors, never single bytes.
- Grid ``(num_pairs + num_table_blocks, cdiv(page_words, BLOCK * TILES))``: axis 0 is the
  page pair, axis 1 a chunk of ``TILES`` tiles of ``BLOCK`` words. Big pages split into
  many programs, so even a plan of a few 4 MiB pages fills the GPU.
- The plan's ``src`` and ``dst`` sets are disjoint, so programs never race.
- The optional table update (``tables[tab_idx[i]] = tab_val[i]``) runs in the trailing
  axis-0 programs of the same launch: a plan costs one launch, and with no pages to move
  the launch only updates the tables. Duplicate indices carry identical values, so the
  order of those stores does not matter.
"""

import triton
import triton.language as tl


@triton.jit
def copy_envelope_chunk(
    buf_ptr,
    src_ptr,
    dst_ptr,
    pid_pair,
    pid_chunk,
    num_pairs,
    page_words,
    num_pages,
    stride_src,
    stride_dst,
    BLOCK: tl.constexpr,
    TILES: tl.constexpr,
):
    """Copy chunk ``pid_chunk`` of page ``src[pid_pair]`` onto page ``dst[pid_pair]``.

    A pair with either page outside ``[0, num_pages)`` is skipped (every access masked).
    """
    has_pair = pid_pair < num_pairs
    src = tl.load(src_ptr + pid_pair.to(tl.int64) * stride_src, mask=has_pair, other=-1)
    dst = tl.load(dst_ptr + pid_pair.to(tl.int64) * stride_dst, mask=has_pair, other=-1)
    src = src.to(tl.int64)
    dst = dst.to(tl.int64)
    valid = (src >= 0) & (src < num_pages) & (dst >= 0) & (dst < num_pages)
    # A skipped pair has no words to copy. Folding the scalar predicate into the bound
    # keeps every block mask a single block comparison: `block & scalar_predicate` is
    # int1 to the compiler, but Triton's interpreter splats the scalar as an integer and
    # from Triton 3.9 on its loads reject the resulting non-bool mask.
    num_words = tl.where(valid, page_words, 0)
    src_base = buf_ptr + src * page_words
    dst_base = buf_ptr + dst * page_words
    chunk_start = pid_chunk.to(tl.int64) * (BLOCK * TILES)
    for tile in tl.static_range(TILES):
        offs = chunk_start + tile * BLOCK + tl.arange(0, BLOCK)
        mask = offs < num_words
        words = tl.load(src_base + offs, mask=mask)
        tl.store(dst_base + offs, words, mask=mask)


@triton.jit
def update_table_block(
    tables_ptr,
    tab_idx_ptr,
    tab_val_ptr,
    pid_block,
    num_updates,
    table_len,
    stride_tables,
    stride_tab_idx,
    stride_tab_val,
    TAB_BLOCK: tl.constexpr,
):
    """Apply updates ``[pid_block*TAB_BLOCK, ...)`` of ``tables[tab_idx[i]] = tab_val[i]``.

    Indices outside ``[0, table_len)`` are skipped.
    """
    offs = pid_block.to(tl.int64) * TAB_BLOCK + tl.arange(0, TAB_BLOCK)
    mask = offs < num_updates
    idx = tl.load(tab_idx_ptr + offs * stride_tab_idx, mask=mask, other=-1).to(tl.int64)
    val = tl.load(tab_val_ptr + offs * stride_tab_val, mask=mask, other=0)
    mask = mask & (idx >= 0) & (idx < table_len)
    tl.store(tables_ptr + idx * stride_tables, val, mask=mask)


# Plan sizes change every call: no recompile for them (page_words stays specialised, so
# the compiler can prove 16-byte alignment of every page and vectorise).
@triton.jit(do_not_specialize=["num_pairs", "num_updates", "table_len"])
def move_pages_kernel(
    buf_ptr,
    src_ptr,
    dst_ptr,
    tables_ptr,
    tab_idx_ptr,
    tab_val_ptr,
    num_pairs,
    page_words,
    num_pages,
    num_updates,
    table_len,
    stride_src,
    stride_dst,
    stride_tables,
    stride_tab_idx,
    stride_tab_val,
    BLOCK: tl.constexpr,
    TILES: tl.constexpr,
    TAB_BLOCK: tl.constexpr,
    HAS_TABLES: tl.constexpr,
):
    """Copy ``buf[dst[i]] = buf[src[i]]`` per page (words), then the fused table update.

    Grid: ``(num_pairs + cdiv(num_updates, TAB_BLOCK), cdiv(page_words, BLOCK*TILES))``;
    the table programs are the trailing axis-0 ones, and only their chunk 0 works.
    """
    pid_pair = tl.program_id(0)
    pid_chunk = tl.program_id(1)
    if pid_pair < num_pairs:
        copy_envelope_chunk(
            buf_ptr,
            src_ptr,
            dst_ptr,
            pid_pair,
            pid_chunk,
            num_pairs,
            page_words,
            num_pages,
            stride_src,
            stride_dst,
            BLOCK,
            TILES,
        )
    elif HAS_TABLES:  # compile-time test; the runtime one stays a separate `if`
        if pid_chunk == 0:
            update_table_block(
                tables_ptr,
                tab_idx_ptr,
                tab_val_ptr,
                pid_pair - num_pairs,
                num_updates,
                table_len,
                stride_tables,
                stride_tab_idx,
                stride_tab_val,
                TAB_BLOCK,
            )
