"""Every published family the config reader accepts (issue 21): one fixture config each
(tests/fixtures/configs/<name>/config.json, written from the published shapes), the bytes
checked against formulas written out here from the engines' state-shape code, both dtype
conventions, tensor-parallel refusals, and the reader's refusals.

Formulas (per layer; bf16 = 2 B, fp32 = 4 B):

* attention KV per token, vLLM ``FullAttentionSpec.page_size_bytes`` / SGLang
  ``MHATokenToKVPool``: ``2 * kv_heads * head_dim * itemsize`` (K and V).
* MLA per token, vLLM ``MLAAttentionSpec`` / SGLang ``MLATokenToKVPool``:
  ``(kv_lora_rank + qk_rope_head_dim) * itemsize``, the same on every TP rank.
* Mamba2, vLLM ``MambaStateShapeCalculator.mamba2_state_shape`` (SGLang
  ``Mamba2StateShape.create``, same maths): conv ``(d_conv - 1, I + 2 * G * N)``,
  temporal ``(H, P, N)``.
* Mamba1, ``mamba1_state_shape``: conv ``(d_conv - 1, I)``, temporal ``(I, N)``.
* Gated-DeltaNet, ``gated_delta_net_state_shape``: conv ``(k - 1, 2 * Hk * dk + Hv * dv)``,
  temporal ``(Hv, dv, dk)``.
* Lightning, ``linear_attention_state_shape``: ``(H, d, d)``, no conv.
* KDA, ``kda_state_shape``: conv ``(k - 1, 3 * H * d)`` (SGLang: three convs of ``H * d``),
  recurrent ``(H, d, d)``, always fp32 (``kda_state_dtype``).
* Short conv, ``short_conv_state_shape``: ``(L_cache - 1, hidden)`` only.

Dtypes: SGLang keeps the recurrent state fp32 (``mamba2_state_dtype``: --mamba-ssm-dtype
default float32, a config's ``mamba_ssm_dtype`` first); vLLM keeps it in the serving dtype
(``MambaStateDtypeCalculator._mamba_state_dtype`` with ``auto``) except Nemotron-H (fp32
unless the config says otherwise), Qwen3.5 (the config's ``mamba_ssm_dtype``) and KDA.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import ukv
from ukv import models
from ukv.models.dtypes import apply_engine_dtypes, engine_dtypes, parse_dtype

FIXTURES = Path(__file__).parent / "fixtures" / "configs"


def config(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text())


def mamba2(layers: int, I: int, G: int, N: int, H: int, P: int, k: int, ssm: int) -> int:  # noqa: E741, N803
    return layers * ((k - 1) * (I + 2 * G * N) * 2 + H * P * N * ssm)


# name: (kind, KV B/token, other side with SGLang dtypes, other side with vLLM dtypes)
# "other" is state bytes per request, or sliding/chunked bytes per token.
EXPECTED: dict[str, tuple[str, int, int, int]] = {
    # 40 layers, full every 4th: 10 x (2 KV heads x 256); 30 GDN layers, 16/32 heads of 128,
    # conv 4; the config names mamba_ssm_dtype float32, which both engines honour.
    "Qwen3.5-35B-A3B": (
        "mamba",
        10 * 2 * 2 * 256 * 2,
        30 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4),
        30 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4),
    ),
    # 44 parallel layers: each has attention (2 KV heads x 128) and Mamba2 (I = d_ssm 3072,
    # 1 group, N 256, 24 heads of 128, conv 4).
    "Falcon-H1-7B": (
        "mamba",
        44 * 2 * 2 * 128 * 2,
        mamba2(44, 3072, 1, 256, 24, 128, 4, ssm=4),
        mamba2(44, 3072, 1, 256, 24, 128, 4, ssm=2),
    ),
    # 54 Mamba2 layers (I = 2 x 2560, 1 group, N 64, 80 heads of 64); 9 of them hybrid, each
    # with its own KV of the shared block: 32 KV heads x (2 x 2560 / 32 = 160).
    "Zamba2-2.7B": (
        "mamba",
        9 * 2 * 32 * 160 * 2,
        mamba2(54, 5120, 1, 64, 80, 64, 4, ssm=4),
        mamba2(54, 5120, 1, 64, 80, 64, 4, ssm=2),
    ),
    # attention at 9, 18, 27 (8 KV heads x 128); 29 Mamba2 (I 8192, 1 group, N 128, 128 x 64).
    "Bamba-9B": (
        "mamba",
        3 * 2 * 8 * 128 * 2,
        mamba2(29, 8192, 1, 128, 128, 64, 4, ssm=4),
        mamba2(29, 8192, 1, 128, 128, 64, 4, ssm=2),
    ),
    # 80 layers, softmax attention every 8th (8 KV heads x 128); 70 lightning layers of
    # 64 heads x 128 x 128; vLLM keeps that state in the serving dtype.
    "MiniMax-Text-01": (
        "mamba",
        10 * 2 * 8 * 128 * 2,
        70 * 64 * 128 * 128 * 4,
        70 * 64 * 128 * 128 * 2,
    ),
    # 7 MLA layers (512 + 64 latent); 20 KDA layers of 32 heads x 128, conv 4, fp32 state.
    "Kimi-Linear-48B-A3B": (
        "mamba",
        7 * (512 + 64) * 2,
        20 * (3 * 3 * 32 * 128 * 2 + 32 * 128 * 128 * 4),
        20 * (3 * 3 * 32 * 128 * 2 + 32 * 128 * 128 * 4),
    ),
    # 6 attention layers (8 KV heads x 2048 / 32 = 64); 10 short-conv layers, L_cache 3.
    "LFM2-1.2B": ("mamba", 6 * 2 * 8 * 64 * 2, 10 * 2 * 2048 * 2, 10 * 2 * 2048 * 2),
    # 42 layers alternating (8 KV heads x 256), window 4096; an fp32 checkpoint served bf16.
    "Gemma-2-9B": ("swa", 21 * 2 * 8 * 256 * 2, 21 * 2 * 8 * 256 * 2, 21 * 2 * 8 * 256 * 2),
    # transformers' defaults: 4 KV heads x 256; 34 layers, every 6th global: 5 full, 29 SWA.
    "Gemma-3-4B": ("swa", 5 * 2 * 4 * 256 * 2, 29 * 2 * 4 * 256 * 2, 29 * 2 * 4 * 256 * 2),
    # 8 KV heads named, head_dim left to its default 256; 48 layers: 8 full, 40 SWA.
    "Gemma-3-12B": ("swa", 8 * 2 * 8 * 256 * 2, 40 * 2 * 8 * 256 * 2, 40 * 2 * 8 * 256 * 2),
    # every layer slides over 4096 tokens (8 KV heads x 128).
    "Mistral-7B-v0.1": ("sliding", 0, 32 * 2 * 8 * 128 * 2, 32 * 2 * 8 * 128 * 2),
    # 48 layers: every 4th NoPE layer global (12), the rest chunked by 8192 (36).
    "Llama-4-Scout-17B-16E": (
        "swa",
        12 * 2 * 8 * 128 * 2,
        36 * 2 * 8 * 128 * 2,
        36 * 2 * 8 * 128 * 2,
    ),
    # 64 Mamba2 layers: I 8192, 8 groups, N 128, 128 heads of 64.
    "Mamba-Codestral-7B": (
        "state",
        0,
        mamba2(64, 8192, 8, 128, 128, 64, 4, ssm=4),
        mamba2(64, 8192, 8, 128, 128, 64, 4, ssm=2),
    ),
    # 64 Mamba1 layers of I = 2 x 2560, N 16; an fp32 checkpoint, served (conv too) in bf16.
    "Mamba-2.8B": (
        "state",
        0,
        64 * (3 * 5120 * 2 + 5120 * 16 * 4),
        64 * (3 * 5120 * 2 + 5120 * 16 * 2),
    ),
    "Llama-3.1-8B": ("full", 32 * 2 * 8 * 128 * 2, 0, 0),
    # granitemoehybrid with no Mamba layer: 40 attention layers, 8 KV heads x 2560 / 40.
    "Granite-4.0-Micro": ("full", 40 * 2 * 8 * 64 * 2, 0, 0),
    # the same model as the preset, saved by transformers 5 (layers_block_type);
    # vLLM's NemotronH hook keeps the SSM state fp32.
    "Nemotron-Nano-9B-v2-tf5": (
        "mamba",
        4 * 2 * 8 * 128 * 2,
        mamba2(27, 128 * 80, 8, 128, 128, 80, 4, ssm=4),
        mamba2(27, 128 * 80, 8, 128, 128, 80, 4, ssm=4),
    ),
    # Zyphra's own config (issue 30): "m"/"g" layers, state_size / conv_dimension /
    # expansion_factor. 38 Mamba2 layers (I = 2 x 2048, 1 group, N 128, 64 heads of 64);
    # the 6 "g" layers each hold the shared block's KV: 32 KV heads x (2 x 2048 / 32 = 128).
    "Zamba2-1.2B": (
        "mamba",
        6 * 2 * 32 * 128 * 2,
        mamba2(38, 4096, 1, 128, 64, 64, 4, ssm=4),
        mamba2(38, 4096, 1, 128, 64, 64, 4, ssm=2),
    ),
    # written by transformers 5 (issue 30): no num_hidden_layers. 1 attention layer (2 KV
    # heads x 128), 1 Mamba2 (8 heads x 4 = I 32, 1 group, N 16); fp32 SSM state named.
    "tiny-NemotronHForCausalLM": (
        "mamba",
        1 * 2 * 2 * 128 * 2,
        mamba2(1, 32, 1, 16, 8, 4, 4, ssm=4),
        mamba2(1, 32, 1, 16, 8, 4, 4, ssm=4),
    ),
    # the presets' families, vLLM's column now in the serving dtype (issue 21: was 2x off)
    "Qwen3-Next-80B-A3B": (
        "mamba",
        12 * 2 * 2 * 256 * 2,
        36 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4),
        36 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 2),
    ),
    "Jamba-1.5-Mini": (
        "mamba",
        4 * 2 * 8 * 128 * 2,
        28 * (3 * 8192 * 2 + 8192 * 16 * 4),
        28 * (3 * 8192 * 2 + 8192 * 16 * 2),
    ),
    "Granite-4.0-H-Micro": (
        "mamba",
        4 * 2 * 8 * 64 * 2,
        mamba2(36, 64 * 64, 1, 128, 64, 64, 4, ssm=4),
        mamba2(36, 64 * 64, 1, 128, 64, 64, 4, ssm=2),
    ),
}


def other_bytes(shape: models.ModelShape) -> int:
    if shape.state is not None:
        return shape.state_bytes_per_request()
    return shape.swa_bytes_per_token() if shape.swa is not None else 0


@pytest.mark.parametrize("name", list(EXPECTED))
def test_family_bytes_match_both_engines(name: str) -> None:
    kind, kv, sglang, vllm = EXPECTED[name]
    shape = models.from_hf_config(FIXTURES / name)
    assert shape.kind == kind
    for engine, other in (("sglang", sglang), ("vllm", vllm)):
        served, _ = apply_engine_dtypes(shape, engine)
        assert served.kv_bytes_per_token() == kv, engine
        assert other_bytes(served) == other, engine


@pytest.mark.parametrize("name", list(EXPECTED))
def test_family_specs_build_a_pool(name: str) -> None:
    # A hybrid's two specs build the unified pool; a single-kind model has one spec (an
    # ordinary paged or slot pool: there is no second side to share bytes with).
    shape = models.from_hf_config(FIXTURES / name)
    specs = shape.specs()
    assert len(specs) == (2 if shape.is_hybrid else 1)
    if shape.is_hybrid:
        pool = ukv.UnifiedKVPool(4 << 30, list(specs), page_size=16, device="meta")
        assert [pool.spec(s.name) for s in specs] == list(specs)
    sizes = {s.name: s.entry_bytes for s in specs}
    if shape.full is not None:
        assert sizes["full"] == shape.kv_bytes_per_token()
    if shape.state is not None:
        assert sizes[shape.other_name] == shape.state_bytes_per_request()
    if shape.swa is not None:
        assert sizes["swa"] == shape.swa_bytes_per_token()


def test_fixture_directory_has_every_family() -> None:
    # Qwen3.5-4B: the vLLM block-size fixture of tests/test_sim_padded.py (same family as 35B).
    on_disk = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert (
        set(EXPECTED) | {"Nemotron-Nano-9B-v2", "gpt-oss-120b", "Gemma-3-27B", "Qwen3.5-4B"}
        == on_disk
    )


# ----------------------------------------------------------------------------- layouts


def test_layer_patterns() -> None:
    kimi = models.from_hf_config(FIXTURES / "Kimi-Linear-48B-A3B")
    assert kimi.layer_ids("full") == (3, 7, 11, 15, 19, 23, 26)  # 1-based 4, 8, ..., 27
    assert kimi.full is not None and kimi.full.is_mla
    assert isinstance(kimi.specs()[0], ukv.MLASpec)
    falcon = models.from_hf_config(FIXTURES / "Falcon-H1-7B")
    assert falcon.layer_kinds == ("full+mamba",) * 44
    assert falcon.full is not None and falcon.state is not None
    assert falcon.full.num_layers == falcon.state.num_layers == 44
    zamba = models.from_hf_config(FIXTURES / "Zamba2-2.7B")
    assert zamba.layer_ids("full+mamba") == (6, 12, 18, 24, 30, 36, 42, 47, 51)
    minimax = models.from_hf_config(FIXTURES / "MiniMax-Text-01")
    assert minimax.layer_ids("full") == tuple(range(7, 80, 8))
    assert minimax.state is not None and minimax.state.conv_shapes == ()
    llama4 = models.from_hf_config(FIXTURES / "Llama-4-Scout-17B-16E")
    assert llama4.layer_ids("full") == tuple(range(3, 48, 4))
    assert llama4.swa is not None and llama4.swa.chunked and llama4.swa.window == 8192
    gemma2 = models.from_hf_config(FIXTURES / "Gemma-2-9B")
    assert gemma2.layer_ids("swa") == tuple(range(0, 42, 2))
    lfm2 = models.from_hf_config(FIXTURES / "LFM2-1.2B")
    assert lfm2.layer_ids("full") == (2, 5, 8, 10, 12, 14)
    assert lfm2.state is not None and lfm2.state.temporal_shape is None


@pytest.mark.parametrize(
    "fixture,model_type,kind",
    [
        ("Llama-3.1-8B", "qwen2", "full"),
        ("Llama-3.1-8B", "qwen3", "full"),
        ("Llama-3.1-8B", "qwen3_moe", "full"),
        ("Llama-3.1-8B", "mixtral", "full"),
        ("Mistral-7B-v0.1", "mixtral", "sliding"),
        ("MiniMax-Text-01", "minimax_m1", "mamba"),
    ],
)
def test_sibling_model_types_read_alike(fixture: str, model_type: str, kind: str) -> None:
    cfg = config(fixture)
    cfg["model_type"] = model_type
    shape = models.from_hf_config(cfg)
    assert shape.kind == kind and shape.architecture == model_type
    assert (
        shape.kv_bytes_per_token() == models.from_hf_config(FIXTURES / fixture).kv_bytes_per_token()
    )


def test_qwen_sliding_layers_from_max_window_layers() -> None:
    cfg = config("Llama-3.1-8B")
    cfg.update(
        model_type="qwen2", use_sliding_window=True, sliding_window=4096, max_window_layers=28
    )
    shape = models.from_hf_config(cfg)
    assert shape.layer_ids("swa") == (28, 29, 30, 31) and shape.swa.window == 4096  # type: ignore[union-attr]


def test_lfm2_older_full_attn_idxs() -> None:
    cfg = config("LFM2-1.2B")
    del cfg["layer_types"]
    assert models.from_hf_config(cfg, name="LFM2-1.2B") == models.from_hf_config(
        FIXTURES / "LFM2-1.2B"
    )


def test_nemotron_transformers5_equals_the_preset_pattern() -> None:
    tf5 = models.from_hf_config(FIXTURES / "Nemotron-Nano-9B-v2-tf5", name="Nemotron-Nano-9B-v2")
    old = models.from_hf_config(FIXTURES / "Nemotron-Nano-9B-v2")
    assert tf5 == old


# ------------------------------------------------ published configs once refused (issue 30)


def test_zamba2_1_2b_plans_with_its_exact_bytes() -> None:
    """``Zyphra/Zamba2-1.2B`` at revision 4f8e85cd31975fe07d8fc3145239d58913192294, its
    config.json as published (the fixture keeps every key). It predates transformers'
    Zamba2Config: ``layers_block_type`` holds ``"m"`` / ``"g"`` and the Mamba2 sizes are
    ``state_size`` 128, ``conv_dimension`` 4, ``expansion_factor`` 2 (transformers would
    read ``mamba_d_state`` and fall back to 64). Zyphra's transformers fork reads them so:
    configuration_zamba2.py ("m" a Mamba layer, "g" the shared transformer block followed by
    a Mamba layer), mamba2_layer.py (``d_state = state_size``, ``d_conv =
    conv_dimension``, ``d_inner = expansion_factor * hidden_size``, ``ngroups = 1``,
    ``nheads = d_inner // mamba_headdim``), and the shared attention's KV of
    ``num_query_groups`` 32 heads of ``2 * kv_channels`` = ``2 * 2048 / 32`` = 128.

    By hand (MODELS.md's formulas; bf16 KV and conv, fp32 SSM state as SGLang keeps it):
    KV per token 6 "g" layers x 2 (K, V) x 32 heads x 128 x 2 B = 98,304 B; state per
    request 38 layers x (conv (4096 + 2 x 1 x 128) x 3 x 2 B = 26,112 B + temporal
    64 x 64 x 128 x 4 B = 2,097,152 B) = 38 x 2,123,264 = 80,684,032 B (vLLM, bf16 state:
    38 x (26,112 + 1,048,576) = 40,838,144 B).
    """
    shape = models.from_hf_config(FIXTURES / "Zamba2-1.2B")
    assert shape.layer_ids("full+mamba") == (5, 11, 17, 23, 29, 35)
    assert shape.layer_ids("mamba") == tuple(i for i in range(38) if i % 6 != 5)
    assert shape.state is not None and shape.state.mixer == models.Mamba2Mixer(
        num_heads=64, head_dim=64, num_groups=1, d_state=128, d_conv=4
    )
    assert shape.kv_bytes_per_token() == 98_304
    assert shape.state_bytes_per_request() == 80_684_032
    assert apply_engine_dtypes(shape, "vllm")[0].state_bytes_per_request() == 40_838_144
    assert shape.max_position_embeddings == 4096
    # The letters are the words transformers spells: the same model either way.
    words = config("Zamba2-1.2B")
    words["layers_block_type"] = [
        {"m": "mamba", "g": "hybrid"}[t] for t in words["layers_block_type"]
    ]
    assert models.from_hf_config(words, name="Zamba2-1.2B") == shape


def test_zamba2_transformers_keys_come_before_zyphras() -> None:
    # A config with both spellings is read as transformers reads it.
    cfg = config("Zamba2-1.2B")
    cfg.update(mamba_d_state=64, mamba_d_conv=3, mamba_expand=1)
    mixer = models.from_hf_config(cfg).state.mixer  # type: ignore[union-attr]
    assert (mixer.d_state, mixer.d_conv, mixer.num_heads * mixer.head_dim) == (64, 3, 2048)


def test_tiny_nemotron_h_from_transformers5_plans_with_its_exact_bytes() -> None:
    """``trl-internal-testing/tiny-NemotronHForCausalLM``, config.json as on the Hub's main
    page (transformers 5 writes it; the fixture keeps the keys up to ``time_step_floor``
    and drops the later time-step, ``use_*`` and vocabulary keys, none of which sizes a
    cache). Transformers 5's NemotronHConfig deprecates ``num_hidden_layers`` and derives
    it from ``layers_block_type`` (here ``["mamba", "attention"]``, so 2 layers); it also
    writes ``mtp_layers_block_type``, the multi-token-prediction layers, which a model only
    runs with ``num_nextn_predict_layers`` > 0 (0 here) as a speculative-decoding draft.

    By hand: KV per token 1 attention layer x 2 (K, V) x 2 KV heads x head_dim 128 x 2 B =
    1,024 B; state per request 1 Mamba2 layer x (conv (8 x 4 + 2 x 1 x 16) x 3 x 2 B =
    384 B + temporal 8 x 4 x 16 x 4 B = 2,048 B) = 2,432 B, the same for both engines
    (``mamba_ssm_cache_dtype`` float32, which vLLM's Nemotron-H hook keeps).
    """
    shape = models.from_hf_config(FIXTURES / "tiny-NemotronHForCausalLM")
    assert shape.layer_kinds == ("mamba", "full")
    assert shape.kv_bytes_per_token() == 1_024
    assert shape.state_bytes_per_request() == 2_432
    assert apply_engine_dtypes(shape, "vllm")[0].state_bytes_per_request() == 2_432
    # num_hidden_layers, when a config names it, must agree with the list.
    cfg = config("tiny-NemotronHForCausalLM")
    cfg["num_hidden_layers"] = 2
    assert models.from_hf_config(cfg, name="tiny-NemotronHForCausalLM") == shape
    cfg["num_hidden_layers"] = 3
    with pytest.raises(ukv.PoolConfigError, match="layer pattern has 2 entries but"):
        models.from_hf_config(cfg)
    # The newest transformers saves the Mamba2 and attention layers under new names.
    cfg = config("tiny-NemotronHForCausalLM")
    cfg["layers_block_type"] = ["linear_attention", "full_attention"]
    assert models.from_hf_config(cfg, name="tiny-NemotronHForCausalLM") == shape


def test_nemotron_pattern_without_num_hidden_layers_counts_its_characters() -> None:
    cfg = config("Nemotron-Nano-9B-v2")
    del cfg["num_hidden_layers"]
    shape = models.from_hf_config(cfg, name="Nemotron-Nano-9B-v2")
    assert shape == models.from_hf_config(FIXTURES / "Nemotron-Nano-9B-v2")


def test_transformers_defaults_fill_omitted_keys() -> None:
    # Gemma 3: the 4B text_config leaves heads, head_dim and the pattern to Gemma3TextConfig.
    explicit = config("Gemma-3-4B")
    explicit["text_config"].update(
        num_attention_heads=8, num_key_value_heads=4, head_dim=256, sliding_window_pattern=6
    )
    assert models.from_hf_config(explicit, name="g") == models.from_hf_config(
        config("Gemma-3-4B"), name="g"
    )
    # Mistral: a missing sliding_window is MistralConfig's 4096; a saved null is none.
    cfg = config("Mistral-7B-v0.1")
    del cfg["sliding_window"]
    assert models.from_hf_config(cfg).swa.window == 4096  # type: ignore[union-attr]
    cfg["sliding_window"] = None
    assert models.from_hf_config(cfg).kind == "full"
    # Llama: KV heads default to the query heads, head_dim to hidden / heads.
    cfg = config("Llama-3.1-8B")
    del cfg["num_key_value_heads"]
    assert models.from_hf_config(cfg).kv_bytes_per_token() == 32 * 2 * 32 * 128 * 2
    # Llama 4: without no_rope_layers every 4th layer is NoPE (global).
    assert "no_rope_layers" not in config("Llama-4-Scout-17B-16E")["text_config"]


def test_a_default_is_computed_only_when_its_keys_are_absent() -> None:
    # Falcon-H1 names head_dim and mamba_d_ssm, so hidden_size feeds neither default.
    cfg = config("Falcon-H1-7B")
    cfg["hidden_size"] = 3001  # not a multiple of the 12 query heads
    assert models.from_hf_config(cfg, name="Falcon-H1-7B") == models.from_hf_config(
        FIXTURES / "Falcon-H1-7B"
    )
    del cfg["head_dim"]
    with pytest.raises(ukv.PoolConfigError, match="hidden_size 3001 is not a multiple of"):
        models.from_hf_config(cfg)


def test_fp32_checkpoint_is_served_bf16_unless_told() -> None:
    shape = models.from_hf_config(FIXTURES / "Gemma-2-9B")
    assert config("Gemma-2-9B")["torch_dtype"] == "float32"
    assert shape.model_dtype == torch.bfloat16 and shape.full.dtype == torch.bfloat16  # type: ignore[union-attr]
    told, dtypes = apply_engine_dtypes(shape, "vllm", kv=torch.float32)
    assert dtypes.kv == torch.float32
    assert told.kv_bytes_per_token() == 2 * shape.kv_bytes_per_token()


# ----------------------------------------------------------------------------- dtypes


def test_engine_conventions_and_explicit_dtypes() -> None:
    qwen = models.preset("Qwen3-Next-80B-A3B")
    assert engine_dtypes(qwen, "sglang").temporal == torch.float32
    assert engine_dtypes(qwen, "vllm").temporal == torch.bfloat16
    assert engine_dtypes(qwen, "vllm", state=torch.float32).temporal == torch.float32
    fp8, _ = apply_engine_dtypes(qwen, "sglang", kv=parse_dtype("fp8"))
    assert fp8.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 1
    lfm2 = models.from_hf_config(FIXTURES / "LFM2-1.2B")
    with pytest.raises(ukv.ArgumentError, match="keep only a conv window"):
        engine_dtypes(lfm2, "sglang", state=torch.float32)
    with pytest.raises(ukv.ArgumentError, match="has no state"):
        engine_dtypes(models.preset("gpt-oss-120b"), "vllm", state=torch.float32)
    with pytest.raises(ukv.ArgumentError, match="bad engine 'trtllm'"):
        engine_dtypes(qwen, "trtllm")
    with pytest.raises(ukv.ArgumentError, match="bad dtype 'int4'"):
        parse_dtype("int4")


# ----------------------------------------------------------------------------- TP


@pytest.mark.parametrize(
    "name,tp,kv,other",
    [
        # Falcon-H1: 2 KV heads replicated at tp 4; Mamba2 heads split, the 1 group kept.
        ("Falcon-H1-7B", 4, 44 * 2 * 1 * 128 * 2, mamba2(44, 768, 1, 256, 6, 128, 4, ssm=4)),
        # Kimi-Linear: the MLA latent is whole on every rank; KDA heads split.
        ("Kimi-Linear-48B-A3B", 4, 7 * 576 * 2, 20 * (3 * 3 * 8 * 128 * 2 + 8 * 128 * 128 * 4)),
        ("MiniMax-Text-01", 8, 10 * 2 * 1 * 128 * 2, 70 * 8 * 128 * 128 * 4),
        ("LFM2-1.2B", 2, 6 * 2 * 4 * 64 * 2, 10 * 2 * 1024 * 2),
        ("Zamba2-2.7B", 2, 9 * 2 * 16 * 160 * 2, mamba2(54, 2560, 1, 64, 40, 64, 4, ssm=4)),
    ],
)
def test_tensor_parallel_rank_bytes(name: str, tp: int, kv: int, other: int) -> None:
    shape = models.from_hf_config(FIXTURES / name).sharded(tp)
    assert shape.kv_bytes_per_token() == kv
    assert other_bytes(shape) == other


@pytest.mark.parametrize(
    "name,tp,message",
    [
        ("Falcon-H1-7B", 8, r"tp_size 8 does not divide num_attention_heads \(query heads\) 12"),
        ("MiniMax-Text-01", 3, r"tp_size 3 does not divide num_attention_heads"),
        ("Llama-4-Scout-17B-16E", 16, r"does not divide num_attention_heads \(query heads\) 40"),
        ("Gemma-2-9B", 32, r"does not divide num_attention_heads \(query heads\) 16"),
        ("Kimi-Linear-48B-A3B", 64, r"does not divide num_attention_heads \(query heads\) 32"),
        ("Mamba-Codestral-7B", 3, "tp_size 3 does not divide mamba num_heads 128"),
        ("Zamba2-2.7B", 32, "tp_size 32 does not divide mamba num_heads 80"),
    ],
)
def test_tensor_parallel_refusals(name: str, tp: int, message: str) -> None:
    with pytest.raises(ukv.PoolConfigError, match=message):
        models.from_hf_config(FIXTURES / name).sharded(tp)


# ----------------------------------------------------------------------------- refusals


def _edit(name: str, path: tuple[str, ...], value: Any) -> dict:
    cfg = config(name)
    holder = cfg
    for key in path[:-1]:
        holder = holder[key]
    if value is ...:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return cfg


@pytest.mark.parametrize(
    "name,path,value,message",
    [
        ("Kimi-Linear-48B-A3B", ("linear_attn_config",), ..., "missing key 'linear_attn_config'"),
        (
            "Kimi-Linear-48B-A3B",
            ("linear_attn_config", "kda_layers"),
            [1, 2],
            "layer 3 must be in exactly one of",
        ),
        ("Kimi-Linear-48B-A3B", ("kv_lora_rank",), ..., "missing key 'kv_lora_rank'"),
        (
            "Kimi-Linear-48B-A3B",
            ("linear_attn_config", "full_attn_layers", 0),
            0,
            r"'linear_attn_config.full_attn_layers' holds 0; expected layer indices in \[1, 28\)",
        ),
        ("Falcon-H1-7B", ("mamba_d_head",), 64, "mamba_n_heads 24 x mamba_d_head 64"),
        ("Zamba2-2.7B", ("n_mamba_heads",), 81, "n_mamba_heads 81 x mamba_headdim 64"),
        ("Zamba2-2.7B", ("layers_block_type", 3), "moe", r"layers_block_type\[3\] is 'moe'"),
        (
            "Zamba2-1.2B",
            ("layers_block_type", 5),
            "x",
            r"layers_block_type\[5\] is 'x'; expected one of 'g', 'hybrid', 'm', 'mamba'$",
        ),
        (
            "tiny-NemotronHForCausalLM",
            ("layers_block_type", 1),
            "M",
            r"layers_block_type\[1\] is 'M'; expected one of 'attention', 'full_attention', "
            r"'linear_attention', 'mamba', 'mlp', 'moe'$",
        ),
        (
            "Nemotron-Nano-9B-v2",
            ("hybrid_override_pattern",),
            "M-M*X",
            r"hybrid_override_pattern\[4\] is 'X'; expected one of '\*', '-', 'E', 'M'$",
        ),
        (
            "tiny-NemotronHForCausalLM",
            ("layers_block_type",),
            ...,
            "missing key 'hybrid_override_pattern'",
        ),
        ("MiniMax-Text-01", ("attn_type_list", 5), 2, r"attn_type_list\[5\] is '2'"),
        ("LFM2-1.2B", ("layer_types", 0), "ssm", r"layer_types\[0\] is 'ssm'"),
        ("Bamba-9B", ("attn_layer_indices",), [9, 40], "holds 40"),
        ("Bamba-9B", ("attn_layer_indices",), ..., "missing key 'attn_layer_indices'"),
        ("Llama-3.1-8B", ("num_attention_heads",), ..., "missing key 'num_attention_heads'"),
        ("Qwen3.5-35B-A3B", ("text_config", "layer_types", 0), "mamba", "layer_types"),
        ("Mamba-Codestral-7B", ("torch_dtype",), "int8", "'torch_dtype' is 'int8'"),
        (
            "Nemotron-Nano-9B-v2-tf5",
            ("layers_block_type",),
            ...,
            "missing key 'hybrid_override_pattern'",
        ),
        ("Gemma-2-9B", ("head_dim",), 0, "'head_dim' must be an int >= 1, got 0"),
    ],
)
def test_reader_refusals_name_the_key(name: str, path: tuple, value: Any, message: str) -> None:
    cfg = _edit(name, path, value)
    with pytest.raises(ukv.PoolConfigError, match=message):
        models.from_hf_config(cfg)


def test_a_state_and_a_window_together_are_refused() -> None:
    # No published family has both; the shape model says so instead of guessing.
    cfg = config("Llama-3.1-8B")
    cfg.update(model_type="mistral", sliding_window=4096)
    assert models.from_hf_config(cfg).kind == "sliding"
    with pytest.raises(ukv.PoolConfigError, match="at most one of state and swa"):
        models.ModelShape(
            name="x",
            architecture="x",
            full=None,
            state=models.preset("Jamba-1.5-Mini").state,
            swa=models.preset("gpt-oss-120b").swa,
        )


def test_single_kind_models_are_not_hybrid_pools() -> None:
    with pytest.raises(ukv.PoolConfigError, match="one kind of cache"):
        ukv.build_mamba_hybrid(
            model=models.from_hf_config(FIXTURES / "Mamba-Codestral-7B"),
            total_bytes=1 << 30,
            max_context_len=1024,
            device="meta",
        )


# ----------------------------------------------------------------------------- HF cache


def _fake_cache(root: Path, repo: str, cfg: dict, revision: str = "abc123") -> Path:
    org, name = repo.split("/")
    snap = root / f"models--{org}--{name}" / "snapshots" / revision
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(cfg))
    refs = root / f"models--{org}--{name}" / "refs"
    refs.mkdir()
    (refs / "main").write_text(revision)
    return snap


def test_model_id_resolved_from_the_hf_cache(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    _fake_cache(tmp_path / "home" / "hub", "google/gemma-2-9b", config("Gemma-2-9B"))
    shape = models.load("google/gemma-2-9b")
    assert shape.name == "gemma-2-9b" and shape.kind == "swa"
    # HF_HUB_CACHE wins over HF_HOME; refs/main picks the snapshot.
    hub = tmp_path / "hub"
    _fake_cache(hub, "meta-llama/Llama-3.1-8B", config("Llama-3.1-8B"))
    other = hub / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "zzz"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(config("Mistral-7B-v0.1")))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    assert models.load("meta-llama/Llama-3.1-8B").kind == "full"
    with pytest.raises(ukv.PoolConfigError, match=str(hub)):
        models.load("google/gemma-2-9b")
