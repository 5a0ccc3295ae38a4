"""ukv.models: presets, the config.json reader, byte math, tensor-parallel sharding and the
specs a pool is built from. Every expected byte count below is written out by hand from the
published config values, not computed by the code under test."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import torch

import ukv
from ukv import models
from ukv.models import (
    AttentionShape,
    GatedDeltaNetMixer,
    Mamba1Mixer,
    Mamba2Mixer,
    ModelShape,
    StateShape,
)

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
MiB = 1 << 20
NAMES = list(models.PRESETS)


def fixture_config(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text())


# ---------------------------------------------------------------------------- presets


def test_presets_are_the_six_benchmark_models() -> None:
    assert NAMES == [
        "Qwen3-Next-80B-A3B",
        "Nemotron-Nano-9B-v2",
        "Jamba-1.5-Mini",
        "Granite-4.0-H-Micro",
        "gpt-oss-120b",
        "Gemma-3-27B",
    ]
    assert models.preset_names() == tuple(NAMES)
    with pytest.raises(TypeError):
        models.PRESETS["x"] = models.PRESETS[NAMES[0]]  # type: ignore[index]


@pytest.mark.parametrize(
    "spelling", ["qwen3-next-80b-a3b", "QWEN3-NEXT-80B-A3B", " Qwen3-Next-80B-A3B "]
)
def test_preset_lookup_ignores_case(spelling: str) -> None:
    assert models.preset(spelling) is models.PRESETS["Qwen3-Next-80B-A3B"]


def test_unknown_preset_lists_the_names() -> None:
    with pytest.raises(ukv.PoolConfigError, match="'llama-3'") as info:
        models.preset("llama-3")
    for name in NAMES:
        assert name in str(info.value)


# Hand-computed from the published configs (bf16 = 2 bytes, fp32 = 4 bytes):
#   KV/token = full_layers * 2 (K and V) * kv_heads * head_dim * 2
#   state    = state_layers * (conv_channels * (d_conv - 1) * 2 + prod(temporal) * 4)
MAMBA_BYTES = {
    # 12 full layers, 2 x 256; 36 GDN layers, conv 2*16*128 + 32*128 = 8192 ch, (32, 128, 128)
    "Qwen3-Next-80B-A3B": (12 * 2 * 2 * 256 * 2, 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 4)),
    # 4 full, 8 x 128; 27 Mamba2, conv 128*80 + 2*8*128 = 12288 ch, (128, 80, 128)
    "Nemotron-Nano-9B-v2": (4 * 2 * 8 * 128 * 2, 27 * (12288 * 3 * 2 + 128 * 80 * 128 * 4)),
    # 4 full, 8 x 128; 28 Mamba1, d_inner 2*4096 = 8192, conv 8192 ch, (8192, 16)
    "Jamba-1.5-Mini": (4 * 2 * 8 * 128 * 2, 28 * (8192 * 3 * 2 + 8192 * 16 * 4)),
    # 4 full, 8 x 64; 36 Mamba2, conv 64*64 + 2*1*128 = 4352 ch, (64, 64, 128)
    "Granite-4.0-H-Micro": (4 * 2 * 8 * 64 * 2, 36 * (4352 * 3 * 2 + 64 * 64 * 128 * 4)),
}
MAMBA_SHAPES = {
    "Qwen3-Next-80B-A3B": (((8192, 3),), (32, 128, 128)),
    "Nemotron-Nano-9B-v2": (((12288, 3),), (128, 80, 128)),
    "Jamba-1.5-Mini": (((8192, 3),), (8192, 16)),
    "Granite-4.0-H-Micro": (((4352, 3),), (64, 64, 128)),
}
SWA_BYTES = {
    # 18 full + 18 SWA layers, 8 x 64, window 128
    "gpt-oss-120b": (18 * 2 * 8 * 64 * 2, 18 * 2 * 8 * 64 * 2, 128),
    # 10 full + 52 SWA layers, 16 x 128, window 1024
    "Gemma-3-27B": (10 * 2 * 16 * 128 * 2, 52 * 2 * 16 * 128 * 2, 1024),
}


@pytest.mark.parametrize("name", list(MAMBA_BYTES))
def test_mamba_preset_byte_math_matches_hand_values(name: str) -> None:
    shape = models.preset(name)
    kv, state = MAMBA_BYTES[name]
    assert shape.kind == "mamba"
    assert shape.kv_bytes_per_token() == kv
    assert shape.state_bytes_per_request() == state
    assert shape.state is not None
    assert (shape.state.conv_shapes, shape.state.temporal_shape) == MAMBA_SHAPES[name]
    assert shape.state.conv_dtype == torch.bfloat16
    assert shape.state.temporal_dtype == torch.float32
    assert shape.full.dtype == torch.bfloat16


@pytest.mark.parametrize("name", list(SWA_BYTES))
def test_swa_preset_byte_math_matches_hand_values(name: str) -> None:
    shape = models.preset(name)
    kv, swa, window = SWA_BYTES[name]
    assert shape.kind == "swa"
    assert shape.kv_bytes_per_token() == kv
    assert shape.swa_bytes_per_token() == swa
    assert shape.swa is not None and shape.swa.window == window
    assert shape.swa_bytes_per_request() == window * swa
    assert shape.swa_bytes_per_request(window // 2) == window // 2 * swa
    assert shape.swa_bytes_per_request(10 * window) == window * swa


def test_figures_quoted_in_benchmarks_md() -> None:
    assert models.preset("Qwen3-Next-80B-A3B").kv_bytes_per_token() == 24_576
    quoted_mib = {  # BENCHMARKS.md: "≈ 73.7", "≈ 137", "≈ 15", "≈ 73" MiB/request
        "Qwen3-Next-80B-A3B": 73.7,
        "Nemotron-Nano-9B-v2": 137,
        "Jamba-1.5-Mini": 15,
        "Granite-4.0-H-Micro": 73,
    }
    for name, mib in quoted_mib.items():
        assert models.preset(name).state_bytes_per_request() / MiB == pytest.approx(mib, abs=0.35)
    assert models.preset("Gemma-3-27B").swa_bytes_per_request() == 416 * MiB


LAYER_IDS = {
    "Qwen3-Next-80B-A3B": ("full", tuple(range(3, 48, 4))),
    "Nemotron-Nano-9B-v2": ("full", (14, 21, 30, 39)),
    "Jamba-1.5-Mini": ("full", (4, 12, 20, 28)),
    "Granite-4.0-H-Micro": ("full", (5, 15, 25, 35)),
    "gpt-oss-120b": ("full", tuple(range(1, 36, 2))),
    "Gemma-3-27B": ("full", (5, 11, 17, 23, 29, 35, 41, 47, 53, 59)),
}


@pytest.mark.parametrize("name", NAMES)
def test_layer_pattern(name: str) -> None:
    shape = models.preset(name)
    kind, ids = LAYER_IDS[name]
    assert shape.layer_ids(kind) == ids
    other = shape.layer_ids(shape.kind)
    none = shape.layer_ids("none")
    assert shape.layer_kinds is not None
    assert sorted(ids + other + none) == list(range(len(shape.layer_kinds)))
    # Only Nemotron-H has cache-less (MLP) layers: 25 of its 56.
    assert len(none) == (25 if name == "Nemotron-Nano-9B-v2" else 0)


def test_request_bytes() -> None:
    qwen = models.preset("Qwen3-Next-80B-A3B")
    assert qwen.request_bytes(0) == 77_266_944
    assert qwen.request_bytes(1024) == 1024 * 24_576 + 77_266_944
    gemma = models.preset("Gemma-3-27B")
    assert gemma.request_bytes(100) == 100 * 81_920 + 100 * 425_984
    assert gemma.request_bytes(5000) == 5000 * 81_920 + 1024 * 425_984
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ukv.ArgumentError, match="num_tokens"):
            qwen.request_bytes(bad)  # type: ignore[arg-type]


def test_asking_for_the_other_kind_is_an_argument_error() -> None:
    with pytest.raises(ukv.ArgumentError, match="gpt-oss-120b.*no recurrent state"):
        models.preset("gpt-oss-120b").state_bytes_per_request()
    with pytest.raises(ukv.ArgumentError, match="Jamba-1.5-Mini.*no sliding-window"):
        models.preset("Jamba-1.5-Mini").swa_bytes_per_token()
    with pytest.raises(ukv.ArgumentError, match="no sliding-window"):
        models.preset("Jamba-1.5-Mini").swa_bytes_per_request(10)
    with pytest.raises(ukv.ArgumentError, match="layer kind"):
        models.preset("Jamba-1.5-Mini").layer_ids("mlp")  # type: ignore[arg-type]


def test_with_dtypes() -> None:
    qwen = models.preset("Qwen3-Next-80B-A3B")
    fp8 = qwen.with_dtypes(kv=torch.float8_e4m3fn)
    assert fp8.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 1
    assert fp8.state_bytes_per_request() == qwen.state_bytes_per_request()
    bf16_ssm = qwen.with_dtypes(temporal=torch.bfloat16)
    assert bf16_ssm.state_bytes_per_request() == 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 2)
    gemma = models.preset("Gemma-3-27B").with_dtypes(kv=torch.float16)
    assert gemma.full.dtype == gemma.swa.dtype == torch.float16  # type: ignore[union-attr]
    with pytest.raises(ukv.ArgumentError, match="no state dtypes"):
        models.preset("Gemma-3-27B").with_dtypes(conv=torch.float16)
    with pytest.raises(ukv.PoolConfigError, match="dtype"):
        qwen.with_dtypes(kv=torch.int8)


# ------------------------------------------------------------------- tensor parallelism


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_qwen3_next_sharding(tp: int) -> None:
    shape = models.preset("Qwen3-Next-80B-A3B").sharded(tp, tp - 1)
    assert (shape.tp_size, shape.tp_rank) == (tp, tp - 1)
    # 2 KV heads: split at tp=2, replicated (one per rank) at tp=4 and 8.
    assert shape.full.num_kv_heads == 1
    assert shape.kv_bytes_per_token() == 12 * 2 * 1 * 256 * 2
    hk, hv = 16 // tp, 32 // tp
    assert shape.state is not None
    assert shape.state.conv_shapes == ((2 * hk * 128 + hv * 128, 3),)
    assert shape.state.temporal_shape == (hv, 128, 128)
    assert shape.state_bytes_per_request() == 36 * (8192 // tp * 3 * 2 + hv * 128 * 128 * 4)


@pytest.mark.parametrize("tp,kv_heads", [(2, 4), (4, 2), (8, 1)])
def test_nemotron_sharding(tp: int, kv_heads: int) -> None:
    shape = models.preset("Nemotron-Nano-9B-v2").sharded(tp)
    assert shape.full.num_kv_heads == kv_heads
    assert shape.kv_bytes_per_token() == 4 * 2 * kv_heads * 128 * 2
    heads, groups = 128 // tp, 8 // tp
    conv = heads * 80 + 2 * groups * 128
    assert shape.state_bytes_per_request() == 27 * (conv * 3 * 2 + heads * 80 * 128 * 4)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_granite_single_group_is_replicated(tp: int) -> None:
    shape = models.preset("Granite-4.0-H-Micro").sharded(tp)
    mixer = shape.state.mixer  # type: ignore[union-attr]
    assert isinstance(mixer, Mamba2Mixer)
    assert (mixer.num_heads, mixer.num_groups) == (64 // tp, 1)
    # conv keeps both 128-wide B and C channels of the one group on every rank
    conv = 64 // tp * 64 + 2 * 1 * 128
    assert shape.state_bytes_per_request() == 36 * (conv * 3 * 2 + 64 // tp * 64 * 128 * 4)
    if tp == 4:
        assert shape.state_bytes_per_request() == 19_150_848  # 36 * (3*1280*2 + 16*64*128*4)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_jamba_sharding(tp: int) -> None:
    shape = models.preset("Jamba-1.5-Mini").sharded(tp)
    d_inner = 8192 // tp
    assert shape.state.temporal_shape == (d_inner, 16)  # type: ignore[union-attr]
    assert shape.state_bytes_per_request() == 28 * (d_inner * 3 * 2 + d_inner * 16 * 4)
    assert shape.kv_bytes_per_token() == 4 * 2 * (8 // tp) * 128 * 2


@pytest.mark.parametrize("tp,kv_heads", [(2, 4), (4, 2), (8, 1), (16, 1)])
def test_gpt_oss_sharding_splits_both_sides(tp: int, kv_heads: int) -> None:
    shape = models.preset("gpt-oss-120b").sharded(tp)
    assert shape.kv_bytes_per_token() == 18 * 2 * kv_heads * 64 * 2
    assert shape.swa_bytes_per_token() == 18 * 2 * kv_heads * 64 * 2
    assert shape.swa.window == 128  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "name,tp,message",
    [
        ("Qwen3-Next-80B-A3B", 3, "num_kv_heads 2 cannot be replicated over tp_size 3"),
        ("Jamba-1.5-Mini", 3, "tp_size 3 does not divide num_kv_heads 8"),
        ("Nemotron-Nano-9B-v2", 16, "tp_size 16 does not divide mamba num_groups 8"),
        ("Qwen3-Next-80B-A3B", 64, "tp_size 64 does not divide linear num_v_heads 32"),
        ("Granite-4.0-H-Micro", 128, "tp_size 128 does not divide mamba num_heads 64"),
        ("Gemma-3-27B", 6, "tp_size 6 does not divide num_kv_heads 16"),
        ("Gemma-3-27B", 24, "num_kv_heads 16 cannot be replicated over tp_size 24"),
    ],
)
def test_sharding_errors_name_the_value(name: str, tp: int, message: str) -> None:
    # Without the query-head count, so that the KV / state rule is the one that refuses.
    shape = models.preset(name)
    unknown_q = {
        g: dataclasses.replace(getattr(shape, g), num_q_heads=None)
        for g in ("full", "swa")
        if getattr(shape, g) is not None
    }
    with pytest.raises(ukv.PoolConfigError, match=message):
        dataclasses.replace(shape, **unknown_q).sharded(tp)


@pytest.mark.parametrize(
    "name,tp,q_heads",
    [
        ("Qwen3-Next-80B-A3B", 3, 16),
        ("Jamba-1.5-Mini", 3, 32),
        ("Nemotron-Nano-9B-v2", 16, 40),
        ("Granite-4.0-H-Micro", 64, 32),
        ("Gemma-3-27B", 6, 32),
    ],
)
def test_sharding_refuses_what_does_not_divide_the_query_heads(
    name: str, tp: int, q_heads: int
) -> None:
    # vLLM (ModelConfig.verify_with_parallel_config) and SGLang (the attention layers'
    # total_num_heads % tp_size check) both refuse these.
    message = rf"tp_size {tp} does not divide num_attention_heads \(query heads\) {q_heads}"
    with pytest.raises(ukv.PoolConfigError, match=message):
        models.preset(name).sharded(tp)


def test_mixer_sharding_errors_name_the_value() -> None:
    with pytest.raises(ukv.PoolConfigError, match="tp_size 3 does not divide mamba d_inner 8192"):
        Mamba1Mixer(d_inner=8192, d_state=16, d_conv=4).sharded(3)
    gdn = GatedDeltaNetMixer(
        num_k_heads=3, num_v_heads=12, head_k_dim=8, head_v_dim=8, conv_kernel=4
    )
    with pytest.raises(ukv.PoolConfigError, match="linear num_k_heads 3"):
        gdn.sharded(2)
    single = GatedDeltaNetMixer(
        num_k_heads=1, num_v_heads=4, head_k_dim=8, head_v_dim=8, conv_kernel=4
    )
    assert single.sharded(4) == GatedDeltaNetMixer(1, 1, 8, 8, 4)


@pytest.mark.parametrize(
    "tp_size,tp_rank,message",
    [
        (0, 0, "tp_size must be a positive int, got 0"),
        (-2, 0, "tp_size must be a positive int, got -2"),
        (True, 0, "tp_size must be a positive int, got True"),
        (2.0, 0, "tp_size must be a positive int, got 2.0"),
        (2, 2, r"tp_rank must be in \[0, 2\), got 2"),
        (2, -1, r"tp_rank must be in \[0, 2\), got -1"),
        (2, None, r"tp_rank must be in \[0, 2\), got None"),
    ],
)
def test_bad_tp_arguments(tp_size, tp_rank, message: str) -> None:
    with pytest.raises(ukv.PoolConfigError, match=message):
        models.preset("Jamba-1.5-Mini").sharded(tp_size, tp_rank)


def test_sharding_twice_is_refused_and_tp1_is_identity() -> None:
    jamba = models.preset("Jamba-1.5-Mini")
    assert jamba.sharded(1) == jamba
    with pytest.raises(ukv.PoolConfigError, match="already sharded \\(tp_size 2\\)"):
        jamba.sharded(2).sharded(2)


# ------------------------------------------------------------------------------ specs


def _per_layer_sum(spec) -> int:
    """entry_bytes rebuilt layer by layer from the spec's row sizes."""
    if isinstance(spec, ukv.MambaSpec):
        return sum(
            sum(spec.conv_row_bytes) + spec.temporal_row_bytes for _ in range(spec.layer_num)
        )
    return sum(spec.k_row_bytes + spec.v_row_bytes for _ in range(spec.layer_num))


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("name", NAMES)
def test_specs_match_the_byte_math(name: str, tp: int) -> None:
    shape = models.preset(name).sharded(tp)
    full, other = shape.specs()
    assert isinstance(full, ukv.MHASpec)
    assert (full.name, full.grow, other.grow) == ("full", "up", "down")
    assert full.entry_bytes == _per_layer_sum(full) == shape.kv_bytes_per_token()
    assert full.layer_num == len(shape.layer_ids("full"))
    if shape.kind == "mamba":
        assert isinstance(other, ukv.MambaSpec) and other.name == "mamba"
        assert other.entry_bytes == _per_layer_sum(other) == shape.state_bytes_per_request()
        assert other.conv_shapes == shape.state.conv_shapes  # type: ignore[union-attr]
        assert other.temporal_shape == shape.state.temporal_shape  # type: ignore[union-attr]
    else:
        assert isinstance(other, ukv.MHASpec) and other.name == "swa"
        assert other.entry_bytes == _per_layer_sum(other) == shape.swa_bytes_per_token()


def test_spec_names() -> None:
    full, state = models.preset("Jamba-1.5-Mini").specs(names=("attn", "ssm"))
    assert (full.name, state.name) == ("attn", "ssm")
    for bad in [("a", "a"), ("a",), ("a", ""), "ab", ("a", 1)]:
        with pytest.raises(ukv.PoolConfigError, match="spec names"):
            models.preset("Jamba-1.5-Mini").specs(names=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("tp", [1, 4])
@pytest.mark.parametrize("name", NAMES)
def test_a_meta_pool_builds_from_a_preset(name: str, tp: int) -> None:
    shape = models.preset(name).sharded(tp)
    specs = shape.specs()
    pool = ukv.UnifiedKVPool(2 << 30, list(specs), page_size=16, device="meta")
    assert pool.spec("full").entry_bytes == shape.kv_bytes_per_token()
    tokens = pool.allocator("full").alloc(32)
    assert tokens is not None and tokens.numel() == 32
    other = pool.allocator(shape.other_name)
    got = other.alloc(1 if shape.kind == "mamba" else 16)
    assert got is not None
    pool.check_invariants()


# --------------------------------------------------------------------- config reader


@pytest.mark.parametrize("name", NAMES)
def test_fixture_parses_to_its_preset(name: str) -> None:
    expected = models.preset(name)
    directory = FIXTURES / name
    assert models.from_hf_config(directory) == expected
    assert models.from_hf_config(directory / "config.json") == expected
    assert models.from_hf_config(str(directory / "config.json")) == expected
    assert models.from_hf_config(fixture_config(name), name=name) == expected
    assert models.load(directory) == expected


def test_reader_name_defaults() -> None:
    cfg = fixture_config("Jamba-1.5-Mini")
    assert models.from_hf_config(cfg).name == "jamba"
    cfg["_name_or_path"] = "ai21labs/AI21-Jamba-1.5-Mini"
    assert models.from_hf_config(cfg).name == "AI21-Jamba-1.5-Mini"
    assert models.from_hf_config(cfg, name="mine").name == "mine"


def test_reader_does_not_modify_its_input() -> None:
    cfg = fixture_config("Gemma-3-27B")
    before = copy.deepcopy(cfg)
    models.from_hf_config(cfg)
    assert cfg == before


def test_qwen3_next_layer_types_agree_with_the_interval() -> None:
    cfg = fixture_config("Qwen3-Next-80B-A3B")
    cfg["layer_types"] = [
        "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(48)
    ]
    del cfg["full_attention_interval"]
    assert models.from_hf_config(cfg, name="Qwen3-Next-80B-A3B") == models.preset(
        "Qwen3-Next-80B-A3B"
    )


def test_gemma3_text_config_at_top_level() -> None:
    cfg = fixture_config("Gemma-3-27B")
    text = dict(cfg["text_config"], torch_dtype="bfloat16")
    shape = models.from_hf_config(text, name="Gemma-3-27B")
    assert shape == dataclasses.replace(models.preset("Gemma-3-27B"), architecture="gemma3_text")


def test_gemma3_explicit_pattern_and_layer_types() -> None:
    cfg = fixture_config("Gemma-3-27B")
    cfg["text_config"]["sliding_window_pattern"] = 2
    shape = models.from_hf_config(cfg)
    assert shape.full.num_layers == 31 and shape.swa.num_layers == 31  # type: ignore[union-attr]
    cfg["text_config"]["layer_types"] = ["full_attention"] * 2 + ["sliding_attention"] * 60
    shape = models.from_hf_config(cfg)
    assert shape.layer_ids("full") == (0, 1)


def test_dtypes_from_the_config() -> None:
    cfg = fixture_config("Nemotron-Nano-9B-v2")
    cfg["torch_dtype"] = "float16"
    shape = models.from_hf_config(cfg)
    assert shape.full.dtype == shape.state.conv_dtype == torch.float16  # type: ignore[union-attr]
    assert shape.state.temporal_dtype == torch.float32  # type: ignore[union-attr]
    cfg["mamba_ssm_dtype"] = "bfloat16"
    assert models.from_hf_config(cfg).state.temporal_dtype == torch.bfloat16  # type: ignore[union-attr]
    del cfg["torch_dtype"]
    cfg["dtype"] = "float32"  # newer transformers write "dtype"
    # An fp32 checkpoint is served (and its cache kept) in bf16, as both engines do.
    assert models.from_hf_config(cfg).full.dtype == torch.bfloat16
    assert "torch_dtype" not in fixture_config("gpt-oss-120b")
    assert models.preset("gpt-oss-120b").full.dtype == torch.bfloat16


def test_unknown_model_type_lists_the_supported_ones() -> None:
    for model_type in ("gpt2", None, 7):
        with pytest.raises(
            ukv.PoolConfigError, match=f"unsupported model_type {model_type!r}"
        ) as info:
            models.from_hf_config({"model_type": model_type})
        for supported in models.SUPPORTED_MODEL_TYPES:
            assert supported in str(info.value)


def test_unknown_family_names_the_fields_it_could_not_map() -> None:
    config = {
        "model_type": "rwkv7",
        "num_hidden_layers": 24,
        "head_size": 64,
        "attention_hidden_size": 2048,
        "vocab_size": 65536,
        "text_config": {"linear_state_size": 64},
    }
    with pytest.raises(ukv.PoolConfigError) as info:
        models.from_hf_config(config)
    message = str(info.value)
    for field in ("num_hidden_layers", "head_size", "attention_hidden_size"):
        assert repr(field) in message
    assert "text_config.linear_state_size" in message
    assert "vocab_size" not in message


REQUIRED_KEYS = {  # keys without a transformers default; the others are defaulted
    "Qwen3-Next-80B-A3B": ["num_hidden_layers", "num_attention_heads"],
    "Nemotron-Nano-9B-v2": [  # num_hidden_layers: the pattern's length (transformers 5)
        "hybrid_override_pattern",
        "mamba_num_heads",
        "mamba_head_dim",
        "n_groups",
        "ssm_state_size",
        "conv_kernel",
    ],
    "Jamba-1.5-Mini": ["hidden_size", "num_attention_heads", "num_hidden_layers"],
    "Granite-4.0-H-Micro": ["layer_types", "mamba_n_heads", "mamba_d_head", "mamba_n_groups"],
    "gpt-oss-120b": ["layer_types", "num_attention_heads"],
    "Gemma-3-27B": ["text_config"],
}


@pytest.mark.parametrize(
    "name,key", [(name, key) for name, keys in REQUIRED_KEYS.items() for key in keys]
)
def test_missing_key_is_named(name: str, key: str) -> None:
    cfg = fixture_config(name)
    holder = cfg["text_config"] if name == "Gemma-3-27B" and key != "text_config" else cfg
    del holder[key]
    prefix = "text_config." if holder is not cfg else ""
    with pytest.raises(ukv.PoolConfigError, match=f"missing key '{prefix}{key}'"):
        models.from_hf_config(cfg)


def test_every_unmapped_key_is_named_at_once() -> None:
    cfg = fixture_config("Nemotron-Nano-9B-v2")
    for key in ("mamba_num_heads", "n_groups", "num_attention_heads"):
        del cfg[key]
    missing = (
        "nemotron_h config is missing keys 'mamba_num_heads', 'n_groups', 'num_attention_heads'"
    )
    with pytest.raises(ukv.PoolConfigError, match=f"^{missing}$"):
        models.from_hf_config(cfg)
    cfg["ssm_state_size"] = 0
    malformed = "nemotron_h config key 'ssm_state_size' must be an int >= 1, got 0"
    with pytest.raises(ukv.PoolConfigError, match=f"^{missing}; {malformed}$"):
        models.from_hf_config(cfg)
    # Llama's KV-head and head_dim defaults need the query heads: named once, not thrice.
    cfg = fixture_config("Llama-3.1-8B")
    del cfg["num_attention_heads"]
    with pytest.raises(
        ukv.PoolConfigError, match="^llama config is missing key 'num_attention_heads'$"
    ):
        models.from_hf_config(cfg)


def test_nemotron_attention_head_dim_is_an_accepted_spelling() -> None:
    cfg = fixture_config("Nemotron-Nano-9B-v2")
    cfg["attention_head_dim"] = cfg.pop("head_dim")
    assert models.from_hf_config(cfg, name="Nemotron-Nano-9B-v2") == models.preset(
        "Nemotron-Nano-9B-v2"
    )


@pytest.mark.parametrize(
    "name,edit,message",
    [
        (
            "Granite-4.0-H-Micro",
            {"layer_types": ["mamba"] * 39 + ["moe"]},
            r"layer_types\[39\] is 'moe'",
        ),
        (
            "gpt-oss-120b",
            {"layer_types": ["full_attention"] * 35},
            "layer pattern has 35 entries but num_hidden_layers is 36",
        ),
        (
            "Granite-4.0-H-Micro",
            {"layer_types": ["mamba", "attention"] * 10},
            "20 entries but num_hidden_layers is 40",
        ),
        (
            "Nemotron-Nano-9B-v2",
            {"hybrid_override_pattern": "M*X"},
            r"hybrid_override_pattern\[2\] is 'X'",
        ),
        (
            "Nemotron-Nano-9B-v2",
            {"hybrid_override_pattern": ["M", "*"]},
            "hybrid_override_pattern must be a str",
        ),
        (
            "Jamba-1.5-Mini",
            {"num_key_value_heads": 0},
            "'num_key_value_heads' must be an int >= 1, got 0",
        ),
        (
            "Jamba-1.5-Mini",
            {"mamba_d_state": "16"},
            "'mamba_d_state' must be an int >= 1, got '16'",
        ),
        ("Jamba-1.5-Mini", {"attn_layer_offset": 8}, "period 8, offset 8"),
        (
            "Jamba-1.5-Mini",
            {"hidden_size": 4100},
            "hidden_size 4100 is not a multiple of num_attention_heads 32",
        ),
        ("Jamba-1.5-Mini", {"torch_dtype": "int8"}, "'torch_dtype' is 'int8'"),
        ("Qwen3-Next-80B-A3B", {"layer_types": "full"}, "'layer_types' must be a list"),
        ("Gemma-3-27B", {"text_config": [1]}, "'text_config' must be an object"),
    ],
)
def test_malformed_config_is_named(name: str, edit: dict, message: str) -> None:
    cfg = fixture_config(name)
    cfg.update(edit)
    with pytest.raises(ukv.PoolConfigError, match=message):
        models.from_hf_config(cfg)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ukv.PoolConfigError, match="no config file at"):
        models.from_hf_config(tmp_path)  # a directory without config.json
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ukv.PoolConfigError, match="cannot read .* as JSON"):
        models.from_hf_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ukv.PoolConfigError, match="must hold a JSON object, got list"):
        models.from_hf_config(bad)


def test_load_resolves_paths_then_presets(tmp_path: Path) -> None:
    assert models.load("gemma-3-27b") is models.preset("Gemma-3-27B")
    path = tmp_path / "config.json"
    cfg = fixture_config("gpt-oss-120b")
    path.write_text(json.dumps(cfg))
    assert models.load(str(path)) == dataclasses.replace(
        models.preset("gpt-oss-120b"), name=tmp_path.name
    )
    with pytest.raises(
        ukv.PoolConfigError, match="neither a path to a config.json, a preset, nor a model id"
    ) as info:
        models.load("no/such/model")
    assert "Gemma-3-27B" in str(info.value)
    with pytest.raises(ukv.PoolConfigError, match="preset name or a path"):
        models.load(3)  # type: ignore[arg-type]


# ---------------------------------------------------------------- shape validation


def _full() -> AttentionShape:
    return AttentionShape(num_layers=2, num_kv_heads=2, head_dim=64)


def _state() -> StateShape:
    return StateShape(num_layers=2, mixer=Mamba1Mixer(d_inner=64, d_state=16, d_conv=4))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            dict(state=_state(), swa=AttentionShape(2, 2, 64, window=8)),
            "at most one of state and swa",
        ),
        (dict(full=None), "has no cache"),
        (dict(swa=AttentionShape(2, 2, 64)), "swa must be an AttentionShape with a window"),
        (
            dict(state=_state(), full=AttentionShape(2, 2, 64, window=8)),
            "full must be an AttentionShape without a window",
        ),
        (dict(state=_state(), name=""), "model name must be a non-empty str"),
        (
            dict(state=_state(), layer_kinds=("full", "mamba", "mamba")),
            "1 'full' layers, but the full group has 2",
        ),
        (dict(state=_state(), layer_kinds=("full", "mlp")), "layer_kinds must be a tuple"),
        (dict(state=_state(), tp_size=2, tp_rank=3), r"tp_rank must be in \[0, 2\), got 3"),
        (dict(state="state"), "state must be a StateShape"),
    ],
)
def test_model_shape_validation(kwargs: dict, message: str) -> None:
    fields = dict(name="m", architecture="test", full=_full()) | kwargs
    with pytest.raises(ukv.PoolConfigError, match=message):
        ModelShape(**fields)


@pytest.mark.parametrize(
    "build,message",
    [
        (lambda: AttentionShape(0, 2, 64), "attention num_layers must be a positive int, got 0"),
        (lambda: AttentionShape(1, 2, 64, dtype=torch.int32), "attention dtype must be one of"),
        (
            lambda: AttentionShape(1, 2, 64, window=0),
            "attention window must be a positive int, got 0",
        ),
        (
            lambda: Mamba2Mixer(8, 8, 1, 16, d_conv=True),
            "mamba2 d_conv must be a positive int, got True",
        ),
        (lambda: StateShape(1, mixer="m"), "state mixer must be one of Mamba1Mixer"),  # type: ignore[arg-type]
        (lambda: StateShape(1, _state().mixer, temporal_dtype=torch.int64), "state temporal_dtype"),
    ],
)
def test_part_validation(build, message: str) -> None:
    with pytest.raises(ukv.PoolConfigError, match=message):
        build()


def test_v_head_dim_defaults_and_counts() -> None:
    attn = AttentionShape(num_layers=3, num_kv_heads=4, head_dim=192, v_head_dim=128)
    assert attn.bytes_per_token() == 3 * 4 * (192 + 128) * 2
    assert attn.spec("full", "up").entry_bytes == attn.bytes_per_token()
    assert AttentionShape(1, 1, 64).v_head_dim == 64


def test_public_surface() -> None:
    for name in models.__all__:
        assert hasattr(models, name), name
    shape = models.preset("Jamba-1.5-Mini")
    with pytest.raises(dataclasses.FrozenInstanceError):
        shape.name = "x"  # type: ignore[misc]
    assert hash(shape) == hash(models.from_hf_config(FIXTURES / "Jamba-1.5-Mini"))
