"""Every ukv kernel against its pure-torch reference (``ukv.reference.*_ref``).

On CPU the kernels run under Triton's interpreter (``tests/conftest.py`` sets
``TRITON_INTERPRET=1``), which executes each program in Python: shapes are tiny and odd
(odd head counts, rows that are not powers of two, buffers that are not a whole number of
pages) so every mask is exercised. The same tests run on CUDA when a GPU is present
(``@pytest.mark.gpu``, skipped otherwise). Each test compares the *whole* buffer byte for
byte, so a stray write anywhere fails it, not just a wrong value where we looked.
"""

from __future__ import annotations

import pytest
import torch

from ukv import ops, reference
from ukv.errors import ArgumentError
from ukv.kernels import move_pages as move_kernels
from ukv.kernels import state as state_kernels
from ukv.kernels import store_kv as store_kernels
from ukv.kernels import translate as translate_kernels

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]

# The worked geometry of reference-design §2.7: a 160-byte Mamba entry.
MAMBA_ENTRY_BYTES = 160


class LaunchCounter:
    """Stands in for a ``@triton.jit`` kernel and counts ``kernel[grid](...)`` launches."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.launches = 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


def _launches(device: str, count: int = 1) -> int:
    """Launches expected on ``device``: none where ops fall back to the torch reference."""
    return count if ops.use_triton(device) else 0


def _count_launches(monkeypatch, module, name: str) -> LaunchCounter:
    counter = LaunchCounter(getattr(module, name))
    monkeypatch.setattr(module, name, counter)
    return counter


def _random_bytes(num_bytes: int, device: str, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (num_bytes,), dtype=torch.uint8, generator=gen).to(device)


def _disjoint_pairs(num_pages: int, num_pairs: int, dtype: torch.dtype, device: str, seed=0):
    """``num_pairs`` (src, dst) pages: dst distinct, src and dst sets disjoint."""
    gen = torch.Generator().manual_seed(seed)
    pages = torch.randperm(num_pages, generator=gen)[: 2 * num_pairs]
    return pages[:num_pairs].to(device, dtype), pages[num_pairs:].to(device, dtype)


# --------------------------------------------------------------------------- store_kv


def _kv_views(raw: torch.Tensor, layer: int, geometry: dict):
    """Layer ``layer``'s (K, V) views over ``raw``, laid out as the pool does (§2.4)."""
    num_layers, num_pages, page_size = (geometry[n] for n in ("layers", "pages", "page_size"))
    heads, head_dim, v_head_dim = (geometry[n] for n in ("heads", "head_dim", "v_head_dim"))
    typed = raw.view(geometry["store_dtype"])
    k_row, v_row = heads * head_dim, heads * v_head_dim  # in elements
    page = num_layers * page_size * (k_row + v_row)
    k_offset = layer * page_size * (k_row + v_row)
    k_view = typed.as_strided(
        (num_pages, page_size, heads, head_dim), (page, k_row, head_dim, 1), k_offset
    )
    v_view = typed.as_strided(
        (num_pages, page_size, heads, v_head_dim),
        (page, v_row, v_head_dim, 1),
        k_offset + page_size * k_row,
    )
    return k_view, v_view


def _kv_buffer(geometry: dict, device: str) -> torch.Tensor:
    itemsize = geometry["store_dtype"].itemsize
    row = geometry["heads"] * (geometry["head_dim"] + geometry["v_head_dim"]) * itemsize
    page_bytes = geometry["layers"] * geometry["page_size"] * row
    return _random_bytes(geometry["pages"] * page_bytes, device)


def _geometry(page_size=3, heads=3, head_dim=5, v_head_dim=3, store_dtype=torch.bfloat16):
    return {
        "layers": 2,
        "pages": 9,
        "page_size": page_size,
        "heads": heads,
        "head_dim": head_dim,
        "v_head_dim": v_head_dim,
        "store_dtype": store_dtype,
    }


def _run_store(device, geometry, loc, k, v, **kwargs):
    """Store into layer 1 with the op and with the reference; return both buffers."""
    raw = _kv_buffer(geometry, device)
    expected = raw.clone()
    ops.store_kv(*_kv_views(raw, 1, geometry), loc, k, v, **kwargs)
    reference.store_kv_ref(*_kv_views(expected, 1, geometry), loc, k, v, **kwargs)
    return raw, expected


def _random_kv(num_tokens: int, geometry: dict, dtype: torch.dtype, device: str):
    gen = torch.Generator().manual_seed(1)
    shape = (num_tokens, geometry["heads"])
    k = torch.randn(*shape, geometry["head_dim"], generator=gen) * 4
    v = torch.randn(*shape, geometry["v_head_dim"], generator=gen) * 4
    return k.to(device, dtype), v.to(device, dtype)


def _random_loc(num_tokens: int, geometry: dict, dtype: torch.dtype, device: str):
    num_slots = geometry["pages"] * geometry["page_size"]
    gen = torch.Generator().manual_seed(2)
    return torch.randperm(num_slots, generator=gen)[:num_tokens].to(device, dtype)


STORE_CASES = [
    # (page_size, store dtype, input dtype, fp8 dtype, scale)
    pytest.param(1, torch.bfloat16, torch.float32, None, None, id="ps1-bf16-from-fp32"),
    pytest.param(3, torch.float16, torch.float16, None, None, id="ps3-fp16"),
    pytest.param(4, torch.float32, torch.bfloat16, None, 0.5, id="ps4-fp32-from-bf16-scaled"),
    pytest.param(3, torch.uint8, torch.bfloat16, torch.float8_e5m2, None, id="ps3-fp8e5m2"),
    pytest.param(1, torch.uint8, torch.float32, torch.float8_e4m3fn, 2.0, id="ps1-fp8e4m3-scaled"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("loc_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize(
    ("page_size", "store_dtype", "in_dtype", "fp8_dtype", "scale"), STORE_CASES
)
def test_store_kv_matches_reference(
    device, loc_dtype, page_size, store_dtype, in_dtype, fp8_dtype, scale
):
    geometry = _geometry(page_size=page_size, store_dtype=store_dtype)
    k, v = _random_kv(7, geometry, in_dtype, device)
    k_before, v_before = k.clone(), v.clone()
    loc = _random_loc(7, geometry, loc_dtype, device)
    kwargs = {"k_scale": scale, "v_scale": scale, "fp8_dtype": fp8_dtype}
    raw, expected = _run_store(device, geometry, loc, k, v, **kwargs)
    assert torch.equal(raw, expected)
    assert torch.equal(k, k_before) and torch.equal(v, v_before)  # caller's tensors intact


@pytest.mark.parametrize("device", DEVICES)
def test_store_kv_matches_advanced_indexing(device):
    """The contract itself, not via the reference: ``k_view[loc // ps, loc % ps] = k``."""
    geometry = _geometry(page_size=4)
    k, v = _random_kv(5, geometry, torch.bfloat16, device)
    loc = _random_loc(5, geometry, torch.int64, device)
    raw = _kv_buffer(geometry, device)
    expected = raw.clone()
    ops.store_kv(*_kv_views(raw, 0, geometry), loc, k, v)
    k_view, v_view = _kv_views(expected, 0, geometry)
    k_view[loc // 4, loc % 4] = k
    v_view[loc // 4, loc % 4] = v
    assert torch.equal(raw, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_store_kv_row_split_into_column_tiles(device, monkeypatch):
    """Rows longer than one column tile are walked in several tiles, the last one partial."""
    monkeypatch.setattr(ops, "STORE_MAX_ROW_BYTES", 16)  # 8 bf16 per tile: 15-wide K rows
    geometry = _geometry(page_size=2, heads=3, head_dim=5, v_head_dim=7)
    k, v = _random_kv(6, geometry, torch.bfloat16, device)
    loc = _random_loc(6, geometry, torch.int64, device)
    raw, expected = _run_store(device, geometry, loc, k, v)
    assert torch.equal(raw, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_store_kv_strided_and_non_contiguous_inputs(device):
    """k as a slice of a fused qkv row (token stride > row), v with permuted inner dims."""
    geometry = _geometry(page_size=3, heads=3, head_dim=4, v_head_dim=4)
    num_tokens = 5
    qkv = torch.randn(num_tokens, 40).to(device, torch.bfloat16)
    k = qkv[:, 7 : 7 + 12].view(num_tokens, 3, 4)
    v = torch.randn(num_tokens, 4, 3).to(device, torch.bfloat16).transpose(1, 2)
    loc = _random_loc(num_tokens, geometry, torch.int32, device)
    raw, expected = _run_store(device, geometry, loc, k, v)
    assert torch.equal(raw, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_store_kv_preencoded_fp8_and_bytes(device):
    geometry = _geometry(page_size=3, store_dtype=torch.uint8)
    k, v = _random_kv(4, geometry, torch.float32, device)
    loc = _random_loc(4, geometry, torch.int64, device)
    k8, v8 = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
    raw, expected = _run_store(device, geometry, loc, k8, v8)  # fp8 input, no fp8_dtype
    assert torch.equal(raw, expected)
    raw, expected = _run_store(device, geometry, loc, k8.view(torch.uint8), v8.view(torch.uint8))
    assert torch.equal(raw, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_store_kv_skips_out_of_range_loc(device):
    geometry = _geometry(page_size=3)
    k, v = _random_kv(3, geometry, torch.bfloat16, device)
    loc = torch.tensor([-1, 4, 27], device=device)  # 27 == pages * page_size
    raw, expected = _run_store(device, geometry, loc, k, v)
    assert torch.equal(raw, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_store_kv_empty_is_a_no_op(device, monkeypatch):
    counter = _count_launches(monkeypatch, store_kernels, "store_kv_kernel")
    geometry = _geometry()
    k, v = _random_kv(0, geometry, torch.bfloat16, device)
    loc = torch.empty(0, dtype=torch.int64, device=device)
    raw, expected = _run_store(device, geometry, loc, k, v)
    assert torch.equal(raw, expected)
    assert counter.launches == 0


def test_store_kv_rejects_bad_arguments():
    geometry = _geometry()
    raw = _kv_buffer(geometry, "cpu")
    k_view, v_view = _kv_views(raw, 0, geometry)
    k, v = _random_kv(3, geometry, torch.bfloat16, "cpu")
    loc = torch.tensor([1, 2, 3])
    with pytest.raises(ArgumentError, match="loc must be int32 or int64, got float32"):
        ops.store_kv(k_view, v_view, loc.float(), k, v)
    with pytest.raises(ArgumentError, match=r"k must have shape \(3, 3, 5\), got \(3, 3, 3\)"):
        ops.store_kv(k_view, v_view, loc, v, v)
    with pytest.raises(ArgumentError, match=r"v must have shape \(2, 3, 3\)"):
        ops.store_kv(k_view, v_view, loc[:2], k[:2], v)
    with pytest.raises(ArgumentError, match="k_view must have contiguous trailing"):
        ops.store_kv(k_view.transpose(2, 3), v_view, loc, k, v)
    with pytest.raises(ArgumentError, match="v_view must be 4-D"):
        ops.store_kv(k_view, v_view[0], loc, k, v)
    with pytest.raises(ArgumentError, match="fp8_dtype=float8_e5m2 needs uint8 views"):
        ops.store_kv(k_view, v_view, loc, k, v, fp8_dtype=torch.float8_e5m2)


@pytest.mark.parametrize("device", DEVICES)
def test_store_target_is_reusable_and_checks_views_once(device):
    """A target validated once serves many stores (how the pool's set_kv runs); each
    store equals the one-shot store_kv, and bad views fail when the target is built."""
    geometry = _geometry(page_size=2, heads=3, head_dim=5, v_head_dim=7)
    raw = _kv_buffer(geometry, device)
    expected = raw.clone()
    target = ops.store_target(*_kv_views(raw, 1, geometry))
    assert target.num_slots == geometry["pages"] * geometry["page_size"]
    for seed in range(3):
        k, v = (x * (seed + 1) for x in _random_kv(4, geometry, torch.bfloat16, device))
        dtype = torch.int32 if seed % 2 else torch.int64
        loc = _random_loc(12, geometry, dtype, device)[4 * seed : 4 * seed + 4]
        ops.store_kv_to(target, loc, k, v)
        reference.store_kv_ref(*_kv_views(expected, 1, geometry), loc, k, v)
        assert torch.equal(raw, expected)
    with pytest.raises(ArgumentError, match=r"k must have shape \(4, 3, 5\)"):
        ops.store_kv_to(target, loc, v, v)
    k_view, v_view = _kv_views(raw, 0, geometry)
    with pytest.raises(ArgumentError, match="k_view must have contiguous trailing"):
        ops.store_target(k_view.transpose(2, 3), v_view)


def test_store_kv_uint8_views_need_fp8_dtype():
    geometry = _geometry(store_dtype=torch.uint8)
    k_view, v_view = _kv_views(_kv_buffer(geometry, "cpu"), 0, geometry)
    k, v = _random_kv(2, geometry, torch.bfloat16, "cpu")
    loc = torch.tensor([1, 2])
    with pytest.raises(ArgumentError, match="fp8_dtype is needed to store k of bfloat16"):
        ops.store_kv(k_view, v_view, loc, k, v)
    with pytest.raises(ArgumentError, match="fp8_dtype must be"):
        ops.store_kv(k_view, v_view, loc, k, v, fp8_dtype=torch.float16)


# ------------------------------------------------------------------------- move_pages


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize(
    ("page_bytes", "word"),
    [(24, torch.int64), (12, torch.int32), (6, torch.int16), (5, torch.uint8)],
)
def test_move_pages_matches_reference(device, index_dtype, page_bytes, word):
    buf = _random_bytes(11 * page_bytes + 3, device)  # a partial page at the end
    assert ops._word_dtype(buf, page_bytes) == word
    expected = buf.clone()
    src, dst = _disjoint_pairs(11, 5, index_dtype, device)
    ops.move_pages(buf, page_bytes, src, dst)
    reference.move_pages_ref(expected, page_bytes, src, dst)
    assert torch.equal(buf, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_move_pages_reference_is_the_contract(device):
    """``pages[dst] = pages[src]`` with the right-hand side gathered first."""
    buf = _random_bytes(7 * 16, device)
    pages = buf.clone().view(7, 16)
    src = torch.tensor([0, 2, 4], device=device)
    dst = torch.tensor([5, 6, 1], device=device)
    ops.move_pages(buf, 16, src, dst)
    pages[dst] = pages[src].clone()
    assert torch.equal(buf.view(7, 16), pages)


@pytest.mark.parametrize("device", DEVICES)
def test_move_pages_misaligned_buffer_uses_narrower_words(device):
    raw = _random_bytes(9 * 24 + 1, device)
    buf = raw[1:]  # the page size allows int64, the address only bytes
    assert ops._word_dtype(buf, 24) == torch.uint8
    expected = raw.clone()
    src, dst = _disjoint_pairs(9, 4, torch.int64, device)
    ops.move_pages(buf, 24, src, dst)
    reference.move_pages_ref(expected[1:], 24, src, dst)
    assert torch.equal(raw, expected)


@pytest.mark.parametrize(("offset", "word"), [(0, torch.int64), (4, torch.int32), (1, torch.uint8)])
def test_word_envelope_is_the_whole_pages_as_words(offset, word):
    raw = _random_bytes(11 * 24 + 3 + offset, "cpu")
    buf = raw[offset:]  # a partial page at the end, and the offset limits the word
    env = ops._word_envelope(buf, 24)
    assert env.words.dtype == word and env.num_units == 11
    assert env.unit_words * word.itemsize == 24
    assert env.words.data_ptr() == buf.data_ptr()
    assert torch.equal(env.words.view(torch.uint8), buf[: 11 * 24])
    assert (env.block, env.tiles, env.chunks) == ops._envelope_tiling(env.unit_words, word.itemsize)


@pytest.mark.parametrize("device", DEVICES)
def test_move_pages_many_chunks_per_page(device, monkeypatch):
    """A page spans several programs (axis 1) and several tiles each, the last partial."""
    monkeypatch.setattr(ops, "MOVE_TILE_BYTES", 16)  # 2 int64 words per tile
    monkeypatch.setattr(ops, "MOVE_TILES", 2)
    buf = _random_bytes(6 * 200, device)  # 25 words per page: 7 chunks, last one partial
    expected = buf.clone()
    src, dst = _disjoint_pairs(6, 3, torch.int64, device)
    ops.move_pages(buf, 200, src, dst)
    reference.move_pages_ref(expected, 200, src, dst)
    assert torch.equal(buf, expected)


def _table_update(device: str):
    tables = torch.arange(13, device=device) * 10 - 1
    tab_idx = torch.tensor([3, 12, 0, 3, 7, 13, -1], device=device)  # dup 3, two out of range
    tab_val = torch.tensor([30, 120, 0, 30, 70, 99, 99], device=device)
    return tables, tab_idx, tab_val


@pytest.mark.parametrize("device", DEVICES)
def test_move_pages_fused_table_update_is_one_launch(device, monkeypatch):
    counter = _count_launches(monkeypatch, move_kernels, "move_pages_kernel")
    buf = _random_bytes(8 * 40, device)
    expected = buf.clone()
    tables, tab_idx, tab_val = _table_update(device)
    expected_tables = tables.clone()
    src, dst = _disjoint_pairs(8, 3, torch.int64, device)
    ops.move_pages(buf, 40, src, dst, tables=tables, tab_idx=tab_idx, tab_val=tab_val)
    reference.move_pages_ref(
        expected, 40, src, dst, tables=expected_tables, tab_idx=tab_idx, tab_val=tab_val
    )
    assert counter.launches == _launches(device)
    assert torch.equal(buf, expected)
    assert torch.equal(tables, expected_tables)


@pytest.mark.parametrize("device", DEVICES)
def test_move_pages_table_update_without_pages_still_launches_once(device, monkeypatch):
    counter = _count_launches(monkeypatch, move_kernels, "move_pages_kernel")
    monkeypatch.setattr(ops, "TABLE_BLOCK", 4)  # two table programs
    buf = _random_bytes(8 * 40, device)
    buf_before = buf.clone()
    tables, tab_idx, tab_val = _table_update(device)
    expected_tables = tables.clone()
    expected_tables[tab_idx[:5]] = tab_val[:5]
    empty = torch.empty(0, dtype=torch.int64, device=device)
    ops.move_pages(buf, 40, empty, empty, tables=tables, tab_idx=tab_idx, tab_val=tab_val)
    assert counter.launches == _launches(device)
    assert torch.equal(buf, buf_before)
    assert torch.equal(tables, expected_tables)


@pytest.mark.parametrize("device", DEVICES)
def test_move_pages_more_updates_than_table_rows(device):
    """Every update applies, however short the table (out-of-range ones are skipped)."""
    buf = _random_bytes(4 * 8, device)
    tables = torch.full((3,), -1, device=device)
    tab_idx = torch.tensor([2, 5, 0, 1, 2, -2], device=device)
    tab_val = torch.tensor([7, 9, 5, 6, 7, 9], device=device)
    empty = torch.empty(0, dtype=torch.int64, device=device)
    ops.move_pages(buf, 8, empty, empty, tables=tables, tab_idx=tab_idx, tab_val=tab_val)
    assert tables.tolist() == [5, 6, 7]


@pytest.mark.parametrize("device", DEVICES)
def test_move_pages_empty_plan_does_not_launch(device, monkeypatch):
    counter = _count_launches(monkeypatch, move_kernels, "move_pages_kernel")
    buf = _random_bytes(64, device)
    empty = torch.empty(0, dtype=torch.int64, device=device)
    ops.move_pages(buf, 16, empty, empty)
    ops.move_pages(buf, 16, empty, empty, tables=empty, tab_idx=empty, tab_val=empty)
    assert counter.launches == 0


def test_move_pages_rejects_bad_arguments():
    buf = _random_bytes(64, "cpu")
    pages = torch.tensor([0, 1])
    with pytest.raises(ArgumentError, match="buf must be uint8, got int32"):
        ops.move_pages(buf.view(torch.int32), 16, pages, pages)
    with pytest.raises(ArgumentError, match="page_bytes must be a positive int, got 0"):
        ops.move_pages(buf, 0, pages, pages)
    with pytest.raises(ArgumentError, match="page_bytes=65 exceeds buf's 64 bytes"):
        ops.move_pages(buf, 65, pages, pages)
    with pytest.raises(ArgumentError, match="dst has 1 elements but src has 2"):
        ops.move_pages(buf, 16, pages, pages[:1])
    with pytest.raises(ArgumentError, match="src must be int32 or int64, got float32"):
        ops.move_pages(buf, 16, pages.float(), pages)
    with pytest.raises(ArgumentError, match="missing tab_idx, tab_val"):
        ops.move_pages(buf, 16, pages, pages, tables=pages)
    with pytest.raises(ArgumentError, match="tab_val has 1 elements but tab_idx has 2"):
        ops.move_pages(buf, 16, pages, pages, tables=pages, tab_idx=pages, tab_val=pages[:1])
    with pytest.raises(ArgumentError, match="buf must be contiguous"):
        ops.move_pages(buf[::2], 16, pages, pages)


# ------------------------------------------------------------------------- state slots


@pytest.mark.parametrize("device", DEVICES)
def test_copy_slots_matches_reference(device):
    buf = _random_bytes(9 * MAMBA_ENTRY_BYTES + 17, device)
    expected = buf.clone()
    src, dst = _disjoint_pairs(9, 4, torch.int32, device)
    ops.copy_slots(buf, MAMBA_ENTRY_BYTES, src, dst)
    reference.copy_slots_ref(expected, MAMBA_ENTRY_BYTES, src, dst)
    assert torch.equal(buf, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("entry_bytes", [MAMBA_ENTRY_BYTES, 6, 7])
def test_clear_slots_matches_reference(device, entry_bytes, monkeypatch):
    counter = _count_launches(monkeypatch, state_kernels, "clear_slots_kernel")
    buf = _random_bytes(9 * entry_bytes + 5, device)
    expected = buf.clone()
    slots = torch.tensor([4, -1, 0, 8, -1, 9, 2], device=device)  # padding, one past the end
    ops.clear_slots(buf, entry_bytes, slots)
    reference.clear_slots_ref(expected, entry_bytes, slots)
    assert counter.launches == _launches(device)
    assert torch.equal(buf, expected)
    cleared = expected[: 9 * entry_bytes].view(9, entry_bytes)[[4, 0, 8, 2]]
    assert not cleared.any()


def test_state_ops_reject_bad_arguments():
    buf = _random_bytes(320, "cpu")
    with pytest.raises(ArgumentError, match="slots must be 1-D"):
        ops.clear_slots(buf, 160, torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(ArgumentError, match="entry_bytes must be a positive int, got -160"):
        ops.clear_slots(buf, -160, torch.tensor([1]))
    with pytest.raises(ArgumentError, match="entry_bytes must be a positive int, got True"):
        ops.copy_slots(buf, True, torch.tensor([1]), torch.tensor([0]))


# -------------------------------------------------------------------------- translate


def _translate_inputs(device: str, ids_dtype=torch.int64):
    v2p = torch.tensor([0, 5, -1, 2, 7, -1, 3], device=device)  # tombstones at 2 and 5
    ids = torch.tensor(
        [0, 1, 2, 3, 5, 6, 7, 8, 11, 14, 16, 17, 20, 21, 22, 27, -1, -2, -5, 1000],
        device=device,
        dtype=ids_dtype,
    )
    return ids, v2p


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size", [1, 3, 4])
@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("out_dtype", [torch.int64, torch.int32])
def test_translate_matches_reference(device, page_size, ids_dtype, out_dtype):
    ids, v2p = _translate_inputs(device, ids_dtype)
    got = ops.translate(ids, v2p, page_size, out_dtype=out_dtype)
    assert got.dtype == out_dtype and got.shape == ids.shape
    assert torch.equal(got, reference.translate_ref(ids, v2p, page_size, out_dtype=out_dtype))


def test_translate_reference_values():
    """The rule spelled out: page math, tombstones, negatives and overflow map to 0."""
    ids, v2p = _translate_inputs("cpu")
    got = reference.translate_ref(ids, v2p, 3)
    # ids 0..2 -> page 0 -> phys 0..2; 3,5 -> page 1 -> 15,17; 6..8 -> tombstone -> 0;
    # 11 -> page 3 -> 6+2; 14 -> page 4 -> 21+2; 16,17 -> tombstone; 20 -> page 6 -> 9+2;
    # 21,22 -> page 7 (past the table); negatives and 1000 -> 0.
    expected = [0, 1, 2, 15, 17, 0, 0, 0, 8, 23, 0, 0, 11, 0, 0, 0, 0, 0, 0, 0]
    assert got.tolist() == expected


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("out_dtype", [torch.int64, torch.int32])
def test_translate_slots_keeps_no_state_as_minus_one(device, ids_dtype, out_dtype):
    """State slots: the live ones map through v2p; padding (-1), slot 0 (the padding
    anchor), tombstoned slots and ids past the table all come out -1 ("no state")."""
    ids, v2p = _translate_inputs(device, ids_dtype)
    got = ops.translate(ids, v2p, 1, out_dtype=out_dtype, slots=True)
    want = reference.translate_ref(ids, v2p, 1, out_dtype=out_dtype, slots=True)
    assert got.dtype == out_dtype and torch.equal(got, want)
    # ids 0..7 then 8 .. 27 (past the 7-row table), negatives, 1000.
    assert want.tolist() == [-1, 5, -1, 2, -1, 3] + [-1] * 14
    # In place when the dtypes agree (``out`` aliasing the ids), else into a fresh ``out``.
    out = ids.clone() if out_dtype == ids_dtype else torch.empty_like(got)
    src = out if out_dtype == ids_dtype else ids
    assert ops.translate(src, v2p, 1, out=out, out_dtype=out_dtype, slots=True) is out
    assert torch.equal(out, want)
    with pytest.raises(ArgumentError, match="page_size 1"):
        ops.translate(ids, v2p, 4, slots=True)


@pytest.mark.parametrize("device", DEVICES)
def test_translate_out_keeps_identity_and_may_alias_ids(device):
    ids, v2p = _translate_inputs(device)
    expected = reference.translate_ref(ids, v2p, 4)
    out = torch.full_like(ids, 123)
    ptr = out.data_ptr()
    assert ops.translate(ids, v2p, 4, out=out) is out and out.data_ptr() == ptr
    assert torch.equal(out, expected)
    in_place = ids.clone()
    assert ops.translate(in_place, v2p, 4, out=in_place) is in_place
    assert torch.equal(in_place, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_translate_slice_in_place_leaves_the_rest(device):
    ids, v2p = _translate_inputs(device)
    buf = torch.cat([torch.full((3,), -7, device=device), ids, torch.full((2,), -9, device=device)])
    window = buf[3 : 3 + ids.numel()]
    ops.translate(window, v2p, 3, out=window)
    assert torch.equal(window, reference.translate_ref(ids, v2p, 3))
    assert buf[:3].eq(-7).all() and buf[-2:].eq(-9).all()


@pytest.mark.parametrize("device", DEVICES)
def test_translate_partially_overlapping_out_is_staged(device):
    ids, v2p = _translate_inputs(device)
    n = ids.numel()
    base = torch.cat([ids, torch.zeros(1, dtype=ids.dtype, device=device)])
    expected = reference.translate_ref(ids, v2p, 3)
    out = base[1 : n + 1]  # shifted by one element: programs would race without staging
    ops.translate(base[:n], v2p, 3, out=out)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_translate_strided_ids_and_empty_inputs(device):
    ids, v2p = _translate_inputs(device)
    strided = ids[::3]
    assert torch.equal(ops.translate(strided, v2p, 3), reference.translate_ref(strided, v2p, 3))
    empty = ids[:0]
    assert ops.translate(empty, v2p, 3).shape == (0,)
    no_table = v2p[:0]
    assert not ops.translate(ids, no_table, 3).any()
    assert torch.equal(reference.translate_ref(ids, no_table, 3), torch.zeros_like(ids))


def test_translate_rejects_bad_arguments():
    ids, v2p = _translate_inputs("cpu")
    with pytest.raises(ArgumentError, match="out must be int64, got int32"):
        ops.translate(ids, v2p, 3, out=ids.int())
    with pytest.raises(ArgumentError, match="out must be int32, got int64"):
        ops.translate(ids, v2p, 3, out=ids, out_dtype=torch.int32)
    with pytest.raises(ArgumentError, match=r"out must have the shape of ids \(20,\), got \(19,\)"):
        ops.translate(ids, v2p, 3, out=ids[1:].clone())
    with pytest.raises(ArgumentError, match="out_dtype must be int64 or int32"):
        ops.translate(ids, v2p, 3, out_dtype=torch.float32)
    with pytest.raises(ArgumentError, match="page_size must be a positive int, got 0"):
        ops.translate(ids, v2p, 0)
    with pytest.raises(ArgumentError, match="ids must be int32 or int64, got float32"):
        ops.translate(ids.float(), v2p, 3)
    with pytest.raises(ArgumentError, match="v2p must be 1-D"):
        ops.translate(ids, v2p.view(1, -1), 3)


@pytest.mark.gpu
def test_translate_is_cuda_graph_capturable():
    ids, v2p = _translate_inputs("cuda")
    out = torch.zeros_like(ids)
    ops.translate(ids, v2p, 3, out=out)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.translate(ids, v2p, 3, out=out)
    ids.copy_(ids.flip(0))
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, reference.translate_ref(ids, v2p, 3))


# ---------------------------------------------------------------------------- dispatch


def test_dispatch_follows_device_and_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert ops.use_triton("cpu") and ops.use_triton(torch.device("cuda"))
    assert not ops.use_triton("meta")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not ops.use_triton("cpu")


def test_cpu_fallback_runs_the_reference_without_launching(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    counter = _count_launches(monkeypatch, translate_kernels, "translate_kernel")
    ids, v2p = _translate_inputs("cpu")
    assert torch.equal(ops.translate(ids, v2p, 3), reference.translate_ref(ids, v2p, 3))
    buf = _random_bytes(5 * 16, "cpu")
    expected = buf.clone()
    ops.clear_slots(buf, 16, torch.tensor([1, -1, 3]))
    reference.clear_slots_ref(expected, 16, torch.tensor([1, -1, 3]))
    assert torch.equal(buf, expected)
    assert counter.launches == 0
