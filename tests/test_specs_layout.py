"""Tests for ukv.specs (byte geometry, validation) and ukv.layout (strided views).

The view tests never trust the layout code to describe itself: expected byte addresses come
from the formulas of reference-design §2.4/§2.5, written out again here, and the buffer is
pre-filled with each element's own index so reading a view through an integer bit-view
reveals exactly which bytes it covers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import torch

from ukv.errors import ArgumentError, PoolConfigError
from ukv.layout import mha_views, mla_views, page_envelope_view, state_views, views_for
from ukv.specs import MambaSpec, MHASpec, MLASpec, Spec, reserved_floor

PAGE_SIZES = (1, 8, 16)
NUM_PAGES = 5
SEED = 0x5EED


# -- factories ---------------------------------------------------------------------------


def _mha(**overrides: Any) -> MHASpec:
    """Worked geometry (§2.7): L=2, H=2, D=4, fp16 -> 64 B per token."""
    fields: dict[str, Any] = {"name": "full", "layer_num": 2, "head_num": 2, "head_dim": 4}
    fields["dtype"] = torch.float16
    return MHASpec(**{**fields, **overrides})


def _odd_mha(dtype: torch.dtype = torch.float32) -> MHASpec:
    return MHASpec("odd", layer_num=3, head_num=3, head_dim=5, dtype=dtype, v_head_dim=7)


def _mamba(**overrides: Any) -> MambaSpec:
    """Worked geometry (§2.7): L=2, conv (4,3) fp32, temporal (2,2,2) fp32 -> 160 B."""
    fields: dict[str, Any] = {
        "name": "mamba",
        "layer_num": 2,
        "conv_shapes": ((4, 3),),
        "conv_dtype": torch.float32,
        "temporal_shape": (2, 2, 2),
        "temporal_dtype": torch.float32,
        "grow": "down",
    }
    return MambaSpec(**{**fields, **overrides})


def _odd_mamba(
    conv_dtype: torch.dtype = torch.float32, temporal_dtype: torch.dtype = torch.float32
) -> MambaSpec:
    return MambaSpec(
        "odd_mamba",
        layer_num=3,
        conv_shapes=((5, 3), (3, 7)),
        conv_dtype=conv_dtype,
        temporal_shape=(3, 2, 5),
        temporal_dtype=temporal_dtype,
    )


def _mla(**overrides: Any) -> MLASpec:
    fields: dict[str, Any] = {"name": "mla", "layer_num": 3, "kv_lora_rank": 7}
    fields.update(qk_rope_head_dim=3, dtype=torch.float32)
    return MLASpec(**{**fields, **overrides})


def _indexed_raw(nbytes: int) -> torch.Tensor:
    """A uint8 buffer whose int32 words hold their own word index."""
    words = torch.arange(nbytes // 4, dtype=torch.int32)
    return words.view(torch.uint8).clone()


def _word_addresses(view: torch.Tensor) -> torch.Tensor:
    """Word indices a 4-byte-element view covers, read through an int32 bit-view."""
    return view.view(torch.int32).reshape(-1).to(torch.int64)


def _assert_exact_cover(views: list[torch.Tensor], nbytes: int) -> None:
    """Every 4-byte word of [0, nbytes) is covered by exactly one view element."""
    covered = torch.cat([_word_addresses(v) for v in views]).sort().values
    assert torch.equal(covered, torch.arange(nbytes // 4)), "views overlap or leave gaps"


def _fill_random_then_check(views: list[torch.Tensor]) -> None:
    """Write distinct random data into every view in turn, then read every one back."""
    gen = torch.Generator().manual_seed(SEED)
    written = []
    for view in views:
        data = torch.randn(view.shape, generator=gen).to(view.dtype)
        view.copy_(data)
        written.append(data)
    for view, data in zip(views, written, strict=True):
        assert torch.equal(view, data)


# -- spec geometry -----------------------------------------------------------------------


def test_worked_geometry_entry_bytes() -> None:
    full, mamba = _mha(), _mamba()
    assert (full.k_row_bytes, full.v_row_bytes, full.entry_bytes) == (16, 16, 64)
    assert mamba.conv_row_bytes == (48,)
    assert mamba.temporal_row_bytes == 32
    assert mamba.temporal_region_offset == 96
    assert mamba.entry_bytes == 160


def test_kind_paging_and_store_dtype() -> None:
    full, mamba, mla = _mha(), _mamba(), _mla()
    assert [s.kind for s in (full, mamba, mla)] == ["mha", "mamba", "mla"]
    assert [s.is_paged for s in (full, mamba, mla)] == [True, False, True]
    assert all(isinstance(s, Spec) for s in (full, mamba, mla))
    assert full.store_dtype == torch.float16
    assert mamba.store_dtype == mamba.conv_store_dtype == torch.float32
    assert mamba.page_bytes(16) == mamba.entry_bytes, "mamba ignores the pool page size"
    assert full.page_bytes(16) == 16 * full.entry_bytes


@pytest.mark.parametrize("page_size", [1, 8, 64, 256])
def test_mha_page_bytes_and_layer_offsets(page_size: int) -> None:
    spec = _odd_mha(torch.bfloat16)
    k_row, v_row = 3 * 5 * 2, 3 * 7 * 2
    assert (spec.k_row_bytes, spec.v_row_bytes) == (k_row, v_row)
    assert spec.entry_bytes == 3 * (k_row + v_row)
    assert spec.page_bytes(page_size) == page_size * spec.entry_bytes
    for layer in range(spec.layer_num):
        k_off = layer * page_size * (k_row + v_row)
        assert spec.layer_k_offset_in_page(layer, page_size) == k_off
        assert spec.layer_v_offset_in_page(layer, page_size) == k_off + page_size * k_row


def test_v_head_dim_defaults_to_head_dim() -> None:
    assert _mha().v_head_dim == 4
    assert _mha() == _mha(v_head_dim=4)
    assert hash(_mha()) == hash(_mha(v_head_dim=4))
    assert _mha(v_head_dim=3).v_row_bytes == 2 * 3 * 2


def test_mla_geometry() -> None:
    spec = _mla(dtype=torch.bfloat16)
    assert spec.latent_dim == 10
    assert spec.row_bytes == 20
    assert spec.entry_bytes == 60
    assert spec.layer_offset_in_page(2, 8) == 2 * 8 * 20


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_is_stored_as_uint8(fp8: torch.dtype) -> None:
    mha, mla = _mha(dtype=fp8), _mla(dtype=fp8)
    assert (mha.dtype, mha.store_dtype) == (fp8, torch.uint8)
    assert (mla.dtype, mla.store_dtype) == (fp8, torch.uint8)
    assert mha.entry_bytes == 2 * (8 + 8)
    k, _ = mha_views(torch.zeros(mha.page_bytes(8) * 2, dtype=torch.uint8), mha, 8, 2)
    assert k[0].dtype == torch.uint8
    values = torch.tensor([1.0, -2.0, 0.5, 4.0], dtype=fp8)
    k[1][1, 3, 1].view(fp8).copy_(values)  # bit-view write, as a store kernel would
    assert torch.equal(k[1][1, 3, 1], values.view(torch.uint8))


def test_mamba_spec_normalises_shapes_to_tuples() -> None:
    spec = _mamba(conv_shapes=[[4, 3]], temporal_shape=[2, 2, 2])
    assert spec.conv_shapes == ((4, 3),)
    assert spec.temporal_shape == (2, 2, 2)
    assert spec == _mamba()
    assert hash(spec) == hash(_mamba())


def test_specs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _mha().layer_num = 3  # type: ignore[misc]


def test_reserved_floor_covers_paged_envelopes() -> None:
    full = _mha(layer_num=4, head_num=8, head_dim=16)  # 2 KiB per token
    mamba = _mamba(layer_num=1, conv_shapes=((1192,),))  # 4.8 KB entry (reference §2.6)
    assert (full.entry_bytes, mamba.entry_bytes) == (2048, 4800)
    assert reserved_floor([full, mamba], 1) == mamba.entry_bytes
    assert reserved_floor([full, mamba], 16) == 16 * full.entry_bytes
    assert reserved_floor([mamba], 16) == mamba.entry_bytes


def test_reserved_floor_rejects_bad_input() -> None:
    with pytest.raises(PoolConfigError, match="at least one spec"):
        reserved_floor([], 1)
    with pytest.raises(PoolConfigError, match="page_size.*0"):
        reserved_floor([_mha()], 0)


# -- spec validation ---------------------------------------------------------------------

_MHA_BAD = [
    ("name", ""),
    ("name", "   "),
    ("name", 3),
    ("layer_num", 0),
    ("layer_num", -1),
    ("layer_num", True),
    ("layer_num", 2.0),
    ("layer_num", "2"),
    ("layer_num", None),
    ("head_num", 0),
    ("head_num", 1.5),
    ("head_dim", 0),
    ("head_dim", False),
    ("v_head_dim", 0),
    ("v_head_dim", -3),
    ("v_head_dim", 2.0),
    ("dtype", torch.int8),
    ("dtype", torch.float64),
    ("dtype", "float16"),
    ("dtype", None),
    ("grow", "sideways"),
    ("grow", "UP"),
    ("grow", None),
]

_MLA_BAD = [
    ("kv_lora_rank", 0),
    ("kv_lora_rank", 7.0),
    ("qk_rope_head_dim", True),
    ("qk_rope_head_dim", -1),
    ("dtype", torch.int32),
    ("grow", "float"),
]

_MAMBA_BAD = [  # (field, value, what the message must show)
    ("layer_num", 0, "0"),
    ("conv_shapes", None, "None"),
    ("conv_shapes", (4, 3), "(4, 3)"),
    ("conv_shapes", ((4, 0),), "conv_shapes[0]"),
    ("conv_shapes", ((4, -1),), "(4, -1)"),
    ("conv_shapes", ((),), "conv_shapes[0]"),
    ("conv_shapes", ((4, 2.0),), "(4, 2.0)"),
    ("conv_shapes", ((4, 3), (True, 2)), "conv_shapes[1]"),
    ("conv_shapes", ((4, 3), (True, 2)), "(True, 2)"),
    ("temporal_shape", (), "()"),
    ("temporal_shape", (2, 0), "(2, 0)"),
    ("temporal_shape", (True,), "(True,)"),
    ("temporal_shape", 8, "8"),
    ("conv_dtype", torch.int64, "torch.int64"),
    ("temporal_dtype", torch.float64, "torch.float64"),
]


def _assert_config_error(build: Any, field: str, value: object, shown: str = "") -> None:
    with pytest.raises(PoolConfigError) as info:
        build(**{field: value})
    message = str(info.value)
    assert field in message, message
    assert (shown or repr(value)) in message, message


@pytest.mark.parametrize(("field", "value"), _MHA_BAD)
def test_mha_spec_rejects(field: str, value: object) -> None:
    _assert_config_error(_mha, field, value)


@pytest.mark.parametrize(("field", "value"), _MLA_BAD)
def test_mla_spec_rejects(field: str, value: object) -> None:
    _assert_config_error(_mla, field, value)


@pytest.mark.parametrize(("field", "value", "shown"), _MAMBA_BAD)
def test_mamba_spec_rejects(field: str, value: object, shown: str) -> None:
    _assert_config_error(_mamba, field, value, shown)


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        _mha(layer_num=0)


@pytest.mark.parametrize(
    ("conv_dtype", "conv_shape", "temporal_dtype", "temporal_shape", "entry"),
    [
        (torch.bfloat16, (1, 1), torch.float32, (1,), 6),  # reference §2.5 example
        (torch.float32, (3,), torch.bfloat16, (5,), 22),
        (torch.float16, (3, 1), torch.float32, (2, 2), 22),
    ],
)
def test_mamba_misaligned_entry_rejected(
    conv_dtype: torch.dtype,
    conv_shape: tuple[int, ...],
    temporal_dtype: torch.dtype,
    temporal_shape: tuple[int, ...],
    entry: int,
) -> None:
    with pytest.raises(PoolConfigError, match="misaligned") as info:
        MambaSpec("m", 1, (conv_shape,), conv_dtype, temporal_shape, temporal_dtype)
    assert f"entry_bytes {entry}" in str(info.value)


def test_mamba_aligned_mixed_dtypes_accepted() -> None:
    spec = MambaSpec("m", 2, ((2, 3),), torch.bfloat16, (2,), torch.float32)
    assert spec.entry_bytes == 2 * 12 + 2 * 8
    fp8 = MambaSpec("m", 1, ((4, 2),), torch.float8_e4m3fn, (2,), torch.float32)
    assert (fp8.conv_store_dtype, fp8.temporal_store_dtype) == (torch.uint8, torch.float32)


def test_helpers_reject_out_of_range() -> None:
    with pytest.raises(ArgumentError, match="layer.*3"):
        _odd_mha().layer_k_offset_in_page(3, 1)
    with pytest.raises(ArgumentError, match="layer.*-1"):
        _mla().layer_offset_in_page(-1, 1)
    with pytest.raises(ArgumentError, match="conv index.*2"):
        _odd_mamba().conv_region_offset(2)
    with pytest.raises(PoolConfigError, match="page_size.*True"):
        _mha().page_bytes(True)


# -- MHA views ---------------------------------------------------------------------------


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_mha_view_shapes_and_strides(page_size: int) -> None:
    spec = _odd_mha(torch.bfloat16)
    isz, k_row, v_row = 2, 3 * 5 * 2, 3 * 7 * 2
    page_bytes = page_size * spec.entry_bytes
    raw = torch.zeros(page_bytes * NUM_PAGES + 3, dtype=torch.uint8)
    k, v = mha_views(raw, spec, page_size, NUM_PAGES)
    assert len(k) == len(v) == 3
    for layer in range(3):
        k_off = layer * page_size * (k_row + v_row)
        assert k[layer].shape == (NUM_PAGES, page_size, 3, 5)
        assert v[layer].shape == (NUM_PAGES, page_size, 3, 7)
        assert k[layer].stride() == (page_bytes // isz, k_row // isz, 5, 1)
        assert v[layer].stride() == (page_bytes // isz, v_row // isz, 7, 1)
        assert k[layer].storage_offset() == k_off // isz
        assert v[layer].storage_offset() == (k_off + page_size * k_row) // isz
        assert k[layer].dtype == v[layer].dtype == torch.bfloat16
        assert k[layer].untyped_storage().data_ptr() == raw.untyped_storage().data_ptr()
    if page_size == 1:
        assert k[0].stride(0) == spec.entry_bytes // isz


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_mha_views_cover_every_byte_once(page_size: int) -> None:
    spec = _odd_mha(torch.float32)
    nbytes = spec.page_bytes(page_size) * NUM_PAGES
    k, v = mha_views(_indexed_raw(nbytes), spec, page_size, NUM_PAGES)
    _assert_exact_cover(k + v, nbytes)


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_mha_element_addresses_follow_page_major_formula(page_size: int) -> None:
    spec = _odd_mha(torch.float32)
    k_row, v_row, page_bytes = 3 * 5 * 4, 3 * 7 * 4, spec.page_bytes(page_size)
    k, v = mha_views(_indexed_raw(page_bytes * NUM_PAGES), spec, page_size, NUM_PAGES)
    page = torch.arange(NUM_PAGES).view(-1, 1, 1, 1)
    slot = torch.arange(page_size).view(1, -1, 1, 1)
    for layer in range(3):
        block = page * page_bytes + layer * page_size * (k_row + v_row)
        k_elem = torch.arange(15).view(1, 1, 3, 5) * 4
        v_elem = torch.arange(21).view(1, 1, 3, 7) * 4
        k_bytes = block + slot * k_row + k_elem
        v_bytes = block + page_size * k_row + slot * v_row + v_elem
        assert torch.equal(k[layer].view(torch.int32).long(), k_bytes // 4)
        assert torch.equal(v[layer].view(torch.int32).long(), v_bytes // 4)


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_mha_views_round_trip(page_size: int) -> None:
    spec = _odd_mha(torch.float16)
    raw = torch.zeros(spec.page_bytes(page_size) * NUM_PAGES, dtype=torch.uint8)
    k, v = mha_views(raw, spec, page_size, NUM_PAGES)
    _fill_random_then_check(k + v)


def test_mha_byte_identity_at_page_size_one() -> None:
    spec = _mha()
    raw = torch.zeros(spec.entry_bytes * 11, dtype=torch.uint8)
    k, v = mha_views(raw, spec, 1, 11)
    for slot in (0, 5, 10):
        for layer in range(2):
            k[layer][slot, 0, 0, 0] = 100 * layer + slot + 1
            v[layer][slot, 0, 0, 0] = -(100 * layer + slot + 1)
            k_byte = slot * 64 + layer * (16 + 16)
            assert raw[k_byte : k_byte + 2].view(torch.float16).item() == 100 * layer + slot + 1
            v_byte = k_byte + 16
            assert raw[v_byte : v_byte + 2].view(torch.float16).item() == -(100 * layer + slot + 1)


def test_mha_write_does_not_alias_neighbours() -> None:
    """Layer 0, page 0, token 3 (ps=8) touches nothing in layer 1, V, or page 1."""
    spec = _mha()
    raw = torch.zeros(spec.page_bytes(8) * 3, dtype=torch.uint8)
    k, v = mha_views(raw, spec, 8, 3)
    k[0][0, 3] = 1.0
    assert int(torch.count_nonzero(raw)) == 8  # 8 halves; 1.0 is 0x3C00, one nonzero byte
    assert not k[1].any() and not v[0].any() and not v[1].any() and not k[0][1].any()
    token_byte = 3 * 16
    assert torch.equal(raw[token_byte : token_byte + 16].view(torch.float16), torch.ones(8).half())


# -- MLA views ---------------------------------------------------------------------------


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_mla_views(page_size: int) -> None:
    spec = _mla()
    row, page_bytes = 10 * 4, spec.page_bytes(page_size)
    raw = _indexed_raw(page_bytes * NUM_PAGES)
    views = mla_views(raw, spec, page_size, NUM_PAGES)
    assert len(views) == 3
    for layer, view in enumerate(views):
        assert view.shape == (NUM_PAGES, page_size, 10)
        assert view.stride() == (page_bytes // 4, 10, 1)
        assert view.storage_offset() == layer * page_size * row // 4
    _assert_exact_cover(views, page_bytes * NUM_PAGES)
    _fill_random_then_check(views)


# -- Mamba views -------------------------------------------------------------------------


def test_mamba_view_shapes_and_strides() -> None:
    spec = _odd_mamba(torch.bfloat16, torch.float32)
    slots = 7
    entry = 3 * (15 + 21) * 2 + 3 * 30 * 4
    assert spec.entry_bytes == entry
    conv, temporal = state_views(torch.zeros(entry * slots + 1, dtype=torch.uint8), spec, slots)
    assert [c.shape for c in conv] == [(3, slots, 5, 3), (3, slots, 3, 7)]
    assert conv[0].stride() == (15, entry // 2, 3, 1)
    assert conv[1].stride() == (21, entry // 2, 7, 1)
    assert conv[0].storage_offset() == 0
    assert conv[1].storage_offset() == 3 * 15
    assert conv[0].dtype == torch.bfloat16
    assert temporal.shape == (3, slots, 3, 2, 5)
    assert temporal.stride() == (30, entry // 4, 10, 5, 1)
    assert temporal.storage_offset() == 3 * (15 + 21) * 2 // 4
    assert temporal.dtype == torch.float32


def test_mamba_views_cover_every_byte_once() -> None:
    spec = _odd_mamba()
    slots = 6
    conv, temporal = state_views(_indexed_raw(spec.entry_bytes * slots), spec, slots)
    _assert_exact_cover([*conv, temporal], spec.entry_bytes * slots)


@pytest.mark.parametrize(
    ("conv_dtype", "temporal_dtype"),
    [
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.bfloat16),
    ],
)
def test_mamba_views_equal_contiguous_reference(
    conv_dtype: torch.dtype, temporal_dtype: torch.dtype
) -> None:
    spec = _odd_mamba(conv_dtype, temporal_dtype)
    slots = 9
    raw = torch.zeros(spec.entry_bytes * slots, dtype=torch.uint8)
    conv, temporal = state_views(raw, spec, slots)
    tag = (torch.arange(3).view(3, 1) * slots + torch.arange(slots).view(1, slots)).float()
    for view in [*conv, temporal]:
        view.copy_(tag.view(3, slots, *[1] * (view.dim() - 2)).expand(view.shape))
    # Contiguous reference: per slot, [conv0 × layers][conv1 × layers][temporal × layers].
    reference = [
        torch.cat([_layer_rows(spec, slot, slots, i) for i in range(3)]) for slot in range(slots)
    ]
    assert torch.equal(raw, torch.cat(reference))
    for view in [*conv, temporal]:
        assert torch.equal(view[1, 4].float(), torch.full(view.shape[2:], float(slots + 4)))
        assert torch.equal(view[2, 6].float(), torch.full(view.shape[2:], float(2 * slots + 6)))


def _layer_rows(spec: MambaSpec, slot: int, slots: int, region: int) -> torch.Tensor:
    """Bytes of one slot's region ``region`` (conv index, or temporal when past them)."""
    is_temporal = region == len(spec.conv_shapes)
    shape = spec.temporal_shape if is_temporal else spec.conv_shapes[region]
    dtype = spec.temporal_dtype if is_temporal else spec.conv_dtype
    rows = [torch.full(shape, float(layer * slots + slot), dtype=dtype) for layer in range(3)]
    return torch.stack(rows).reshape(-1).view(torch.uint8)


def test_mamba_views_round_trip_with_fp8_conv() -> None:
    spec = MambaSpec("m", 3, ((5, 3), (3, 3)), torch.float8_e5m2, (3, 2), torch.float32)
    conv, temporal = state_views(torch.zeros(spec.entry_bytes * 5, dtype=torch.uint8), spec, 5)
    assert conv[0].dtype == torch.uint8
    _fill_random_then_check([*conv, temporal])


# -- views of two specs over one buffer --------------------------------------------------


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_two_specs_disjoint_byte_ranges_do_not_alias(page_size: int) -> None:
    """A paged MHA pool's low pages and a Mamba pool's high slots share one buffer."""
    full, mamba = _odd_mha(torch.float16), _odd_mamba(torch.bfloat16, torch.float32)
    total = 4096 * 11 + 5
    raw = torch.zeros(total, dtype=torch.uint8)
    full_pages = total // full.page_bytes(page_size)
    mamba_slots = total // mamba.entry_bytes
    k, v = mha_views(raw, full, page_size, full_pages)
    conv, temporal = state_views(raw, mamba, mamba_slots)
    low_pages = full_pages // 2
    first_slot = math.ceil(low_pages * full.page_bytes(page_size) / mamba.entry_bytes)
    assert first_slot < mamba_slots
    full_parts = [view[:low_pages] for view in k + v]
    mamba_parts = [view[:, first_slot:] for view in [*conv, temporal]]
    _fill_random_then_check(full_parts + mamba_parts)
    _fill_random_then_check(mamba_parts + full_parts)


# -- page envelopes ----------------------------------------------------------------------


def test_page_envelope_view_rows_are_physical_pages() -> None:
    spec = _odd_mha(torch.float32)
    page_bytes = spec.page_bytes(8)
    raw = torch.zeros(page_bytes * NUM_PAGES + 7, dtype=torch.uint8)
    pages = page_envelope_view(raw, page_bytes, NUM_PAGES)
    assert pages.shape == (NUM_PAGES, page_bytes)
    assert pages.dtype == torch.uint8
    k, v = mha_views(raw, spec, 8, NUM_PAGES)
    k[2][3, 5] = 1.0
    v[2][3, 5] = 2.0
    nonzero_pages = pages.any(dim=1).nonzero().flatten().tolist()
    assert nonzero_pages == [3]
    pages[3].zero_()
    assert not k[2].any() and not v[2].any()


def _geometry(view: torch.Tensor) -> tuple[Any, ...]:
    """Everything that places a view over its buffer."""
    return (view.dtype, tuple(view.shape), view.stride(), view.storage_offset())


def _flat_views(views: Any) -> list[torch.Tensor]:
    """A sub-pool's views in a flat list, whatever its kind's nesting."""
    if isinstance(views, torch.Tensor):
        return [views]
    return [t for part in views for t in _flat_views(part)]


@pytest.mark.parametrize("page_size", (1, 16))
def test_views_for_builds_each_kind_like_its_builder(page_size: int) -> None:
    raw = torch.zeros(1 << 16, dtype=torch.uint8)
    full, mla, mamba = _odd_mha(torch.bfloat16), _mla(), _odd_mamba()
    expected = {
        full.name: mha_views(raw, full, page_size, 3),
        mla.name: mla_views(raw, mla, page_size, 3),
        mamba.name: state_views(raw, mamba, 3),  # one slot per page: page_size unused
    }
    for spec in (full, mla, mamba):
        got = _flat_views(views_for(raw, spec, page_size, 3))
        want = _flat_views(expected[spec.name])
        assert [_geometry(v) for v in got] == [_geometry(v) for v in want], spec.name
    k, v = views_for(raw, full, page_size, 3)
    assert len(k) == len(v) == full.layer_num


def test_views_for_rejects_what_is_not_a_spec() -> None:
    raw = torch.zeros(640, dtype=torch.uint8)
    with pytest.raises(ArgumentError, match="bad argument spec = 'full'.*str"):
        views_for(raw, "full", 1, 1)  # type: ignore[arg-type]
    with pytest.raises(PoolConfigError, match="704 bytes.*640"):
        views_for(raw, _mha(), 1, 11)


# -- meta device and layout errors -------------------------------------------------------


def test_views_on_meta_build_without_allocating() -> None:
    total = 1 << 44  # 16 TiB: would fail if anything were allocated
    raw = torch.empty(total, dtype=torch.uint8, device="meta")
    full, mamba, mla = _odd_mha(torch.bfloat16), _odd_mamba(), _mla(dtype=torch.float8_e4m3fn)
    num_pages = total // full.page_bytes(16)
    k, v = mha_views(raw, full, 16, num_pages)
    assert k[2].shape == (num_pages, 16, 3, 5) and k[2].device.type == "meta"
    assert v[2].shape == (num_pages, 16, 3, 7)
    conv, temporal = state_views(raw, mamba, total // mamba.entry_bytes)
    assert temporal.shape == (3, total // mamba.entry_bytes, 3, 2, 5)
    assert conv[1].is_meta
    latent = mla_views(raw, mla, 64, total // mla.page_bytes(64))
    assert latent[0].dtype == torch.uint8 and latent[0].is_meta
    assert page_envelope_view(raw, full.page_bytes(16), num_pages).shape[0] == num_pages


def test_views_reject_bad_buffer() -> None:
    spec = _mha()
    with pytest.raises(ArgumentError, match="uint8"):
        mha_views(torch.zeros(640, dtype=torch.float16), spec, 1, 5)
    with pytest.raises(ArgumentError, match=r"shape=\(10, 64\)"):
        mha_views(torch.zeros(10, 64, dtype=torch.uint8), spec, 1, 5)
    with pytest.raises(ArgumentError, match="contiguous"):
        mha_views(torch.zeros(1280, dtype=torch.uint8)[::2], spec, 1, 5)


def test_views_reject_sizes_that_do_not_fit() -> None:
    raw = torch.zeros(640, dtype=torch.uint8)
    with pytest.raises(PoolConfigError, match="704 bytes.*640"):
        mha_views(raw, _mha(), 1, 11)
    with pytest.raises(PoolConfigError, match="800 bytes"):
        state_views(raw, _mamba(), 5)
    with pytest.raises(PoolConfigError, match="num_pages.*-1"):
        mla_views(raw, _mla(), 1, -1)
    with pytest.raises(PoolConfigError, match="page_size.*0"):
        mha_views(raw, _mha(), 0, 1)
    with pytest.raises(PoolConfigError, match="page_bytes.*0"):
        page_envelope_view(raw, 0, 1)


def test_views_reject_misaligned_buffer_offset() -> None:
    raw = torch.zeros(1024, dtype=torch.uint8)[2:]
    with pytest.raises(PoolConfigError, match="misaligned"):
        state_views(raw, _mamba(), 2)
    k, _ = mha_views(raw, _mha(), 1, 2)  # fp16 views tolerate a 2-byte offset
    k[0][0, 0, 0, 0] = 1.0
    assert raw[:2].view(torch.float16).item() == 1.0
