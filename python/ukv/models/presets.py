"""Presets: the cache shapes of the six models in BENCHMARKS.md, from their published configs.

Each preset copies the values of the model's Hugging Face ``config.json`` (repository named
in its comment), at tensor-parallel size 1, with a bf16 KV cache, bf16 conv state and fp32
SSM state. ``tests/fixtures/configs/<name>/config.json`` holds the same values in the
config's own spelling, and the tests check that reading it gives exactly the preset.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ukv.errors import PoolConfigError
from ukv.models import layers
from ukv.models.attention import AttentionShape
from ukv.models.shape import ModelShape
from ukv.models.state import GatedDeltaNetMixer, Mamba1Mixer, Mamba2Mixer, StateShape

__all__ = ["PRESETS", "find_preset", "preset", "preset_names"]

# NVIDIA-Nemotron-Nano-9B-v2 hybrid_override_pattern: 27 Mamba2, 4 attention, 25 MLP layers.
_NEMOTRON_NANO_9B_V2_PATTERN = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"


def _qwen3_next_80b_a3b() -> ModelShape:
    # Qwen/Qwen3-Next-80B-A3B-Instruct: 48 layers, full attention every 4th
    # (full_attention_interval 4), the rest Gated-DeltaNet.
    return ModelShape(
        name="Qwen3-Next-80B-A3B",
        architecture="qwen3_next",
        full=AttentionShape(num_layers=12, num_kv_heads=2, head_dim=256, num_q_heads=16),
        state=StateShape(
            num_layers=36,
            mixer=GatedDeltaNetMixer(
                num_k_heads=16, num_v_heads=32, head_k_dim=128, head_v_dim=128, conv_kernel=4
            ),
        ),
        layer_kinds=layers.every_nth(48, period=4, offset=3, hit="full", other="mamba"),
        max_position_embeddings=262144,
    )


def _nemotron_nano_9b_v2() -> ModelShape:
    # nvidia/NVIDIA-Nemotron-Nano-9B-v2: mamba_num_heads 128, mamba_head_dim 80, n_groups 8,
    # ssm_state_size 128, conv_kernel 4; attention 8 KV heads x head_dim 128.
    return ModelShape(
        name="Nemotron-Nano-9B-v2",
        architecture="nemotron_h",
        full=AttentionShape(num_layers=4, num_kv_heads=8, head_dim=128, num_q_heads=40),
        state=StateShape(
            num_layers=27,
            mixer=Mamba2Mixer(num_heads=128, head_dim=80, num_groups=8, d_state=128, d_conv=4),
        ),
        layer_kinds=layers.from_nemotron_pattern(_NEMOTRON_NANO_9B_V2_PATTERN),
        max_position_embeddings=131072,
    )


def _jamba_1_5_mini() -> ModelShape:
    # ai21labs/AI21-Jamba-1.5-Mini: 32 layers, attention where i % 8 == 4; hidden 4096 with
    # 32 query heads (head_dim 128), 8 KV heads; mamba_expand 2 (d_inner 8192),
    # mamba_d_state 16, mamba_d_conv 4.
    return ModelShape(
        name="Jamba-1.5-Mini",
        architecture="jamba",
        full=AttentionShape(num_layers=4, num_kv_heads=8, head_dim=128, num_q_heads=32),
        state=StateShape(num_layers=28, mixer=Mamba1Mixer(d_inner=8192, d_state=16, d_conv=4)),
        layer_kinds=layers.every_nth(32, period=8, offset=4, hit="full", other="mamba"),
        max_position_embeddings=262144,
    )


def _granite_4_0_h_micro() -> ModelShape:
    # ibm-granite/granite-4.0-h-micro: 40 layers, layer_types has "attention" at 5, 15, 25,
    # 35; hidden 2048 with 32 query heads (head_dim 64), 8 KV heads; mamba_n_heads 64,
    # mamba_d_head 64, mamba_n_groups 1, mamba_d_state 128, mamba_d_conv 4.
    return ModelShape(
        name="Granite-4.0-H-Micro",
        architecture="granitemoehybrid",
        full=AttentionShape(num_layers=4, num_kv_heads=8, head_dim=64, num_q_heads=32),
        state=StateShape(
            num_layers=36,
            mixer=Mamba2Mixer(num_heads=64, head_dim=64, num_groups=1, d_state=128, d_conv=4),
        ),
        layer_kinds=layers.every_nth(40, period=10, offset=5, hit="full", other="mamba"),
        max_position_embeddings=131072,
    )


def _gpt_oss_120b() -> ModelShape:
    # openai/gpt-oss-120b: 36 layers alternating sliding (even) / full (odd), 8 KV heads x
    # head_dim 64, sliding_window 128.
    return ModelShape(
        name="gpt-oss-120b",
        architecture="gpt_oss",
        full=AttentionShape(num_layers=18, num_kv_heads=8, head_dim=64, num_q_heads=64),
        swa=AttentionShape(num_layers=18, num_kv_heads=8, head_dim=64, window=128, num_q_heads=64),
        layer_kinds=layers.every_nth(36, period=2, offset=1, hit="full", other="swa"),
        max_position_embeddings=131072,
    )


def _gemma_3_27b() -> ModelShape:
    # google/gemma-3-27b-it (text_config): 62 layers, every 6th global (the
    # sliding_window_pattern default of 6), 16 KV heads x head_dim 128, sliding_window 1024.
    return ModelShape(
        name="Gemma-3-27B",
        architecture="gemma3",
        full=AttentionShape(num_layers=10, num_kv_heads=16, head_dim=128, num_q_heads=32),
        swa=AttentionShape(
            num_layers=52, num_kv_heads=16, head_dim=128, window=1024, num_q_heads=32
        ),
        layer_kinds=layers.every_nth(62, period=6, offset=5, hit="full", other="swa"),
        max_position_embeddings=131072,
    )


PRESETS: Mapping[str, ModelShape] = MappingProxyType(
    {
        shape.name: shape
        for shape in (
            _qwen3_next_80b_a3b(),
            _nemotron_nano_9b_v2(),
            _jamba_1_5_mini(),
            _granite_4_0_h_micro(),
            _gpt_oss_120b(),
            _gemma_3_27b(),
        )
    }
)
"""Preset shapes by canonical name (read-only)."""

_BY_LOWER_NAME = {name.lower(): shape for name, shape in PRESETS.items()}


def preset_names() -> tuple[str, ...]:
    """Canonical preset names, in BENCHMARKS.md order."""
    return tuple(PRESETS)


def find_preset(name: str) -> ModelShape | None:
    """Look a preset up by name, ignoring case.

    Args:
        name: E.g. ``"qwen3-next-80b-a3b"``.

    Returns:
        The preset, or None when there is none of that name.
    """
    return _BY_LOWER_NAME.get(name.strip().lower())


def preset(name: str, *, tp_size: int = 1, tp_rank: int = 0) -> ModelShape:
    """The preset of one model, looked up by name, ignoring case.

    Args:
        name: A name from :data:`PRESETS`, in any case (e.g. ``"gemma-3-27b"``).
        tp_size: Tensor-parallel ranks to shard the heads over (1: unsharded).
        tp_rank: This rank, in ``[0, tp_size)``.

    Returns:
        The preset's :class:`ModelShape` (bf16 KV, fp32 SSM state), sharded for
        ``tp_size`` ranks by :meth:`ModelShape.sharded` unless ``tp_size`` is 1.

    Raises:
        PoolConfigError: No preset has that name (the message lists the names), or the
            model's heads cannot be split over ``tp_size`` ranks.
    """
    shape = find_preset(name) if isinstance(name, str) else None
    if shape is None:
        raise PoolConfigError(
            f"unknown model preset {name!r}; presets are: {', '.join(preset_names())}"
        )
    return shape if (tp_size, tp_rank) == (1, 0) else shape.sharded(tp_size, tp_rank)
