"""vLLM's single-page-size baseline (``PaddedBackend``): the block vLLM computes per layer,
the layer groups that share it, and vLLM's own dtypes.

The block sizes checked against vLLM's reports: 528 tokens for Qwen3.5-4B (TP1) and, for
Qwen3.5-35B-A3B at TP2, 1056 by upstream vLLM's rule; the 2048 reported for that model is
vllm-ascend's rule (docs/SIMULATOR.md, "vLLM's block"), recomputed here to show where it
comes from.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ukv import models
from ukv.sim.backends import PaddedBackend, vllm_blocks, vllm_group_size

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
QWEN = models.load("Qwen3-Next-80B-A3B")  # 12 attention + 36 Gated-DeltaNet layers
GEMMA = models.load("Gemma-3-27B")  # 10 full + 52 sliding layers, 16 x 128 KV heads


def _z(n: int = 1) -> np.ndarray:
    return np.zeros(n, np.int64)


@pytest.mark.parametrize(
    "full, other, group",
    [
        (12, 36, 12),
        (4, 27, 4),
        (10, 52, 10),
        (18, 18, 18),
        (12, 13, 13),
        (10, 14, 14),
        (10, 15, 10),
    ],  # fmt: skip
)
def test_group_size_is_the_smaller_count_unless_the_larger_is_close(full, other, group):
    assert vllm_group_size(full, other) == group == vllm_group_size(other, full)


def test_qwen35_4b_block_is_528_tokens():
    # vLLM's log for Qwen3.5-4B: "Setting attention block size to 528 tokens". Per layer:
    # KV 2 x 4 heads x 256 x 2 B = 4,096 B/token; Gated-DeltaNet state in vLLM's dtypes
    # (Qwen3.5 hook: the config's mamba_ssm_dtype, float32): conv 3 x 8,192 x 2 B +
    # temporal 32 x 128 x 128 x 4 B = 2,146,304 B; 16 x ceil(2,146,304 / (16 x 4,096)) = 528.
    b = PaddedBackend(models.load(FIXTURES / "Qwen3.5-4B"), 1 << 30)
    assert b.B == 528 and b.geometry.page == 528 * 4096
    # 8 attention and 24 state layers: groups of 8, one attention group, three state groups.
    assert (b.geometry.group, b.full_groups, b.other_groups) == (8, 1, 3)
    assert b.block == 8 * 528 * 4096


def test_qwen35_35b_tp2_block_upstream_and_the_ascend_2048():
    shape = models.load(FIXTURES / "Qwen3.5-35B-A3B").sharded(2)
    b = PaddedBackend(shape, 1 << 30)
    # Upstream vLLM (CUDA): KV 2 x 1 head x 256 x 2 B = 1,024 B/token per layer; state
    # 3 x 4,096 x 2 B + 16 x 128 x 128 x 4 B = 1,073,152 B -> 16 x ceil(1,048.0...) = 1056.
    assert b.shape.state is not None
    assert b.shape.state.bytes_per_layer() == 1_073_152 and b.B == 1056
    # The 2048 reported for this model at TP2 is vllm-ascend's patch_mamba_config.py rule:
    # the block sized from the K half of the page only (256 x 2 B = 512 B/token) against
    # the temporal state only (conv padded separately), aligned to 128-token kernel blocks.
    temporal = math.prod(b.shape.state.temporal_shape or ()) * 4
    k_only = 1 * 256 * 2
    assert 128 * math.ceil(temporal / (128 * k_only)) == 2048 != b.B


def test_vllm_dtypes_not_sglang_ones():
    # The preset follows SGLang (fp32 temporal state); vLLM keeps Qwen3-Next's in bf16.
    vllm, as_given = PaddedBackend(QWEN, 1 << 30), PaddedBackend(QWEN, 1 << 30, engine=None)
    assert vllm.B == 16 * math.ceil((3 * 8192 * 2 + 32 * 128 * 128 * 2) / (16 * 2048)) == 544
    assert as_given.B == 16 * math.ceil((3 * 8192 * 2 + 32 * 128 * 128 * 4) / (16 * 2048))


def test_state_model_counts_blocks_per_group():
    b0 = PaddedBackend(QWEN, 1 << 30)
    block = 12 * 544 * 2048  # 12 layers per group x a 544-token page of 2,048 B/token
    assert b0.block == block and (b0.full_groups, b0.other_groups) == (1, 3)
    b = PaddedBackend(QWEN, 100 * block)
    assert b.cap == 100
    assert b.admit(0) and b.used == 3  # the state: one block in each of 3 state groups
    assert b.grow(np.array([0]), _z(), np.array([545]))  # 2 blocks of the attention group
    assert b.used == 5 and b.usage() == (2 * block, 3 * block)
    # 95 block ids left: a new state (3) and 92 blocks of tokens fit, one token more does not.
    assert b.fits(1, 92 * 544) and not b.fits(1, 92 * 544 + 1)
    assert b.fits_alone(97 * 544) and not b.fits_alone(97 * 544 + 1)
    b.release(np.array([0]), np.array([545]))
    assert b.used == 0 and b.usage() == (0, 0) and b.bytes_freed == 5 * block


def test_swa_model_pads_the_last_group_and_slides_the_window():
    g = vllm_blocks(GEMMA)
    page = 16 * 2 * 16 * 128 * 2  # 16 tokens of one layer's K and V (bf16)
    assert (g.page, g.group, g.full_groups, g.other_groups) == (page, 10, 1, 6)
    b = PaddedBackend(GEMMA, 1000 * g.block)
    win = 1024 // 16 + 1
    # A 2,048-token chunk takes 128 blocks in the full group and 128 in each of the 6
    # sliding groups at its peak, then keeps the window (+1 block) per sliding group.
    assert b.grow(np.array([0]), _z(), np.array([2048]))
    assert b.used == 128 + 6 * win and b.bytes_freed == 6 * (128 - win) * g.block
    assert not b.grow(np.array([1]), _z(), np.array([16 * 130]))  # 7 x 130 > what is left
    assert b.fits(1, 16 * (1000 - b.used - 6 * win)) and not b.fits(
        1, 16 * (1001 - b.used - 6 * win)
    )


def test_padded_ratio_is_taken_in_vllms_dtypes():
    from ukv.sim import baselines, traces

    cols = ("ukv", "vllm", "vllm-equal", "ukv-vllm", "jenga")
    c = baselines.compare(QWEN, 4 << 30, traces.chat(60, seed=1), layouts=cols)
    # Qwen3-Next: vLLM keeps the temporal state in bf16, SGLang (the preset) in fp32, so
    # ukv runs a second time in vLLM's dtypes and vLLM's layouts (and Jenga, run in vLLM's
    # dtypes) are compared with it; vLLM's layout in SGLang's dtypes is compared with ukv.
    assert c.peer("vllm") == "ukv-vllm" and c.peer("jenga") == "ukv-vllm"
    assert c.peer("vllm-equal") == "ukv"
    mine = c.summaries["ukv-vllm"]["served_tok_s"]
    assert c.ratio("vllm") == pytest.approx(mine / c.summaries["vllm"]["served_tok_s"])
    assert "ukv-vllm" not in c.ratios()
    gpt = baselines.compare(models.load("gpt-oss-120b"), 2 << 30, traces.chat(30), layouts=cols)
    assert "ukv-vllm" not in gpt.summaries  # no state: the dtypes are the same


def test_swa_pages_of_unequal_layers_hold_different_token_counts():
    import dataclasses

    assert GEMMA.swa is not None
    half = dataclasses.replace(GEMMA, swa=dataclasses.replace(GEMMA.swa, num_kv_heads=8))
    g = vllm_blocks(half)
    # The sliding layers' token is half the bytes: their page holds 32 tokens, so every
    # page is 16 tokens of a full layer (vLLM's unify_kv_cache_spec_page_size).
    assert (g.page, g.full_tokens, g.other_tokens) == (16 * 2 * 16 * 128 * 2, 16, 32)


def test_mla_blocks_align_to_64_tokens():
    shape = models.load(FIXTURES / "Kimi-Linear-48B-A3B")
    b = PaddedBackend(shape, 1 << 30)
    assert shape.full is not None and shape.full.is_mla and b.shape.state is not None
    kv1 = shape.full.bytes_per_token() // shape.full.num_layers
    st1 = b.shape.state.bytes_per_layer()
    assert b.B == 64 * math.ceil(st1 / (64 * kv1)) and b.B % 64 == 0
