"""Config readers of the families with recurrent state: hybrids of attention and Mamba,
Gated-DeltaNet, lightning attention, KDA or short convolutions, and pure state models.

Each family is a :class:`~ukv.models.family.Family`: field tables that name the keys in the
config's own spelling, with transformers' default where a published config leaves a key out
(the ``default=`` next to the key), and a layer-pattern decoder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ukv.errors import PoolConfigError
from ukv.models import layers
from ukv.models.config_fields import ConfigFields
from ukv.models.family import (
    HEAD_DIM,
    HEAD_DIM_FROM_HIDDEN,
    Check,
    Family,
    LayerPattern,
    derived,
    every_layer,
    expanded,
    gqa,
    key,
    listed_layers,
    per_head,
    periodic,
)
from ukv.models.layers import LayerKind
from ukv.models.state import (
    GatedDeltaNetMixer,
    KDAMixer,
    LightningMixer,
    Mamba1Mixer,
    Mamba2Mixer,
    ShortConvMixer,
)

__all__ = ["STATE_READERS"]

_LINEAR_FULL: Mapping[str, LayerKind] = {"full_attention": "full", "linear_attention": "mamba"}
_GRANITE: Mapping[str, LayerKind] = {"attention": "full", "mamba": "mamba"}
_NEMOTRON_BLOCKS: Mapping[str, LayerKind] = {
    "mamba": "mamba",
    "attention": "full",
    "mlp": "none",
    "moe": "none",
    # transformers' newest NemotronHConfig renames the first two when it saves a config
    # (remap_legacy_layer_types): Mamba2 is "linear_attention", attention "full_attention".
    "linear_attention": "mamba",
    "full_attention": "full",
}
_ZAMBA2_BLOCKS: Mapping[str, LayerKind] = {
    "mamba": "mamba",
    "hybrid": "full+mamba",
    # Zyphra's own configs (e.g. Zamba2-1.2B at 4f8e85cd), as their transformers fork reads
    # them: "m" a Mamba2 layer, "g" the shared transformer block followed by a Mamba2 layer.
    "m": "mamba",
    "g": "full+mamba",
}
_LFM2: Mapping[str, LayerKind] = {"full_attention": "full", "conv": "mamba"}


# -- layer patterns -------------------------------------------------------------------------


def _indices(cfg: ConfigFields, key: str, bound: int, low: int = 0) -> list[int]:
    """A list of layer indices in ``[low, bound)`` at ``key``."""
    values = cfg.sequence(key)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v < bound:
            raise PoolConfigError(
                f"{cfg.model_type} config key {cfg.key(key)!r} holds {v!r}; expected layer "
                f"indices in [{low}, {bound})"
            )
    return list(values)


def _attention_at(list_key: str) -> LayerPattern:
    """Full attention at the layer indices listed at ``list_key``, state elsewhere."""

    def pattern(cfg: ConfigFields) -> tuple[LayerKind, ...]:
        num_layers = cfg.integer("num_hidden_layers")
        attn = set(_indices(cfg, list_key, num_layers))
        return tuple("full" if i in attn else "mamba" for i in range(num_layers))

    return pattern


def _nemotron_num_layers(cfg: ConfigFields) -> int | None:
    """transformers 5 derives ``num_hidden_layers`` from the layer list (the key is
    deprecated, and configs it writes may leave it out): the list's length, if any."""
    for list_key in ("layers_block_type", "hybrid_override_pattern"):
        value = cfg.values.get(list_key)
        if isinstance(value, (list, str)):
            return len(value)
    return None


def _nemotron(cfg: ConfigFields) -> tuple[LayerKind, ...]:
    """Nemotron-H: ``hybrid_override_pattern`` (``M`` Mamba2, ``*`` attention, ``-``/``E``
    MLP), or transformers 5's ``layers_block_type`` list."""
    if cfg.has("hybrid_override_pattern"):
        return layers.from_nemotron_pattern(cfg.raw("hybrid_override_pattern"))
    if cfg.has("layers_block_type"):
        return layers.from_layer_types(
            cfg.sequence("layers_block_type"), _NEMOTRON_BLOCKS, "layers_block_type"
        )
    raise PoolConfigError(
        "nemotron_h config is missing key 'hybrid_override_pattern' "
        "(or transformers 5's 'layers_block_type')"
    )


def _attn_type_list(cfg: ConfigFields) -> tuple[LayerKind, ...]:
    """MiniMax: ``attn_type_list`` of 0 (lightning) and 1 (softmax attention)."""
    types = [str(t) for t in cfg.sequence("attn_type_list")]
    return layers.from_layer_types(types, {"0": "mamba", "1": "full"}, "attn_type_list")


def _kimi(cfg: ConfigFields) -> tuple[LayerKind, ...]:
    """Kimi-Linear: ``linear_attn_config`` lists the MLA and the KDA layers (1-based unless
    ``kda_layer_index_base`` says 0); each layer in exactly one list."""
    lin = cfg.mapping("linear_attn_config")
    num_layers = cfg.integer("num_hidden_layers")
    base = lin.integer("kda_layer_index_base", minimum=0, default=1)
    full = {i - base for i in _indices(lin, "full_attn_layers", num_layers + base, base)}
    kda = {i - base for i in _indices(lin, "kda_layers", num_layers + base, base)}
    for i in range(num_layers):
        if (i in full) == (i in kda):
            raise PoolConfigError(
                f"kimi_linear config: layer {i + base} must be in exactly one of "
                f"linear_attn_config.full_attn_layers and linear_attn_config.kda_layers"
            )
    return tuple("full" if i in full else "mamba" for i in range(num_layers))


# -- mixer tables ---------------------------------------------------------------------------


def _heads_fill(heads: str, head: str, inner: str) -> Check:
    """Refuse Mamba2 heads x head size that is not the inner size ``d_ssm``."""

    def check(cfg: ConfigFields, got: Mapping[str, int]) -> None:
        if got["num_heads"] * got["head_dim"] != got["d_ssm"]:
            raise PoolConfigError(
                f"{cfg.model_type} config: {heads} {got['num_heads']} x {head} "
                f"{got['head_dim']} != {inner} {got['d_ssm']}"
            )

    return check


_HEAD_AUTO = key("mamba_d_head", default=per_head("d_ssm", "num_heads"), auto=True)
"""Bamba / Falcon-H1 head size: ``"auto"`` or absent means ``d_ssm // heads``."""


# -- families -------------------------------------------------------------------------------

QWEN3_NEXT = Family(
    layers=listed_layers(
        _LINEAR_FULL, periodic(key("full_attention_interval", default=4), "full", "mamba")
    ),
    mixer=GatedDeltaNetMixer,
    mixer_fields={
        "num_k_heads": key("linear_num_key_heads", default=16),
        "num_v_heads": key("linear_num_value_heads", default=32),
        "head_k_dim": key("linear_key_head_dim", default=128),
        "head_v_dim": key("linear_value_head_dim", default=128),
        "conv_kernel": key("linear_conv_kernel_dim", default=4),
    },
    attention=gqa(key("head_dim", default=256), kv_heads=2),
    text_config="either",
)
"""Qwen3-Next and the Qwen3.5 MoE models (same maths; Qwen3.5 nests it in ``text_config``):
``layer_types``, else full attention every ``full_attention_interval``-th layer; 2 KV heads
unless named."""

QWEN3_5 = dataclasses.replace(QWEN3_NEXT, attention=gqa(key("head_dim", default=256)))
"""Dense Qwen3.5: as Qwen3-Next, but KV heads default to the query heads."""

NEMOTRON_H = Family(
    layers=_nemotron,
    mixer=Mamba2Mixer,
    mixer_fields={
        "num_heads": key("mamba_num_heads"),
        "head_dim": key("mamba_head_dim"),
        "num_groups": key("n_groups"),
        "d_state": key("ssm_state_size"),
        "d_conv": key("conv_kernel"),
    },
    attention=gqa(key("head_dim", "attention_head_dim", default=128)),
    defaults={"num_hidden_layers": _nemotron_num_layers},
)
"""Nemotron-H: Mamba2, attention and MLP layers; ``num_hidden_layers`` defaults to the
layer list's length, as in transformers 5."""

GRANITE_MOE_HYBRID = Family(
    layers=listed_layers(_GRANITE),
    mixer=Mamba2Mixer,
    mixer_fields={
        "num_heads": key("mamba_n_heads"),
        "head_dim": key("mamba_d_head"),
        "num_groups": key("mamba_n_groups"),
        "d_state": key("mamba_d_state"),
        "d_conv": key("mamba_d_conv"),
    },
    attention=gqa(HEAD_DIM_FROM_HIDDEN),
)
"""GraniteMoeHybrid (Granite-4.0): ``layer_types`` of ``"attention"`` / ``"mamba"``; a
config whose layers are all attention (Granite-4.0-Micro) is a full-attention model."""

BAMBA = Family(
    layers=_attention_at("attn_layer_indices"),
    mixer=Mamba2Mixer,
    mixer_fields={
        "d_ssm": derived(expanded("mamba_expand")),
        "num_heads": key("mamba_n_heads", default=128),
        "head_dim": _HEAD_AUTO,
        "num_groups": key("mamba_n_groups", default=1),
        "d_state": key("mamba_d_state", default=256),
        "d_conv": key("mamba_d_conv", default=4),
    },
    attention=gqa(HEAD_DIM_FROM_HIDDEN),
)
"""Bamba: attention at ``attn_layer_indices``, Mamba2 of inner size ``mamba_expand *
hidden_size`` elsewhere."""

FALCON_H1 = Family(
    layers=every_layer("full+mamba"),
    mixer=Mamba2Mixer,
    mixer_fields={  # Bamba's keys; the inner size may be named, the heads must be
        **BAMBA.mixer_fields,
        "d_ssm": key("mamba_d_ssm", default=expanded("mamba_expand")),
        "num_heads": key("mamba_n_heads"),
    },
    check=_heads_fill("mamba_n_heads", "mamba_d_head", "the mixer's inner size"),
    attention=gqa(HEAD_DIM),
)
"""Falcon-H1: every layer runs attention and a Mamba2 mixer side by side."""

ZAMBA2 = Family(
    layers=listed_layers(_ZAMBA2_BLOCKS, list_key="layers_block_type"),
    mixer=Mamba2Mixer,
    mixer_fields={  # transformers' keys first, then those of Zyphra's own configs
        "d_ssm": derived(expanded("mamba_expand", "expansion_factor")),
        "head_dim": key("mamba_headdim", default=64),
        "num_heads": key("n_mamba_heads", default=per_head("d_ssm", "head_dim")),
        "num_groups": key("mamba_ngroups", default=1),
        "d_state": key("mamba_d_state", "state_size", default=64),
        "d_conv": key("mamba_d_conv", "conv_dimension", default=4),
    },
    check=_heads_fill("n_mamba_heads", "mamba_headdim", "mamba_expand * hidden_size"),
    attention=gqa(
        key(
            "attention_head_dim",
            default=lambda cfg, got: 2 * cfg.integer("hidden_size") // got["num_q_heads"],
        )
    ),
)
"""Zamba2: ``layers_block_type`` of ``"mamba"`` / ``"hybrid"`` (``"m"`` / ``"g"`` in
Zyphra's own configs, whose Mamba2 keys are ``state_size``, ``conv_dimension`` and
``expansion_factor``); a hybrid layer runs the shared attention block (its own KV cache,
heads of ``2 * hidden_size / num_attention_heads`` on the concatenated input) next to its
Mamba2 mixer."""

MAMBA2 = Family(
    layers=every_layer("mamba"),
    mixer=Mamba2Mixer,
    mixer_fields={
        "num_heads": key("num_heads", default=128),
        "head_dim": key("head_dim", default=64),
        "num_groups": key("n_groups", default=8),
        "d_state": key("state_size", default=128),
        "d_conv": key("conv_kernel", default=4),
    },
    defaults={"num_hidden_layers": 64},
)
"""Pure Mamba-2 (e.g. Mamba-Codestral): every layer a Mamba2 mixer."""

MAMBA = Family(
    layers=every_layer("mamba"),
    mixer=Mamba1Mixer,
    mixer_fields={
        "d_inner": key("intermediate_size", default=expanded("expand")),
        "d_state": key("state_size", default=16),
        "d_conv": key("conv_kernel", default=4),
    },
)
"""Pure Mamba (v1): every layer a Mamba1 mixer of ``expand * hidden_size`` channels."""

JAMBA = Family(
    layers=periodic(
        key("attn_layer_period", default=8),
        "full",
        "mamba",
        offset=key("attn_layer_offset", minimum=0, default=4),
    ),
    mixer=Mamba1Mixer,
    mixer_fields={
        "d_inner": derived(expanded("mamba_expand")),
        "d_state": key("mamba_d_state", default=16),
        "d_conv": key("mamba_d_conv", default=4),
    },
    attention=gqa(HEAD_DIM_FROM_HIDDEN),
)
"""Jamba: attention at a period and offset, Mamba1 of ``mamba_expand * hidden_size``
channels elsewhere."""

MINIMAX = Family(
    layers=listed_layers(_LINEAR_FULL, _attn_type_list),
    mixer=LightningMixer,
    mixer_fields={
        "num_heads": key("num_attention_heads"),
        "head_dim": HEAD_DIM,
    },
    attention=gqa(HEAD_DIM),
)
"""MiniMax-Text-01 / M1: ``attn_type_list`` or transformers' ``layer_types``; the lightning
heads are the attention heads."""

KIMI_LINEAR = Family(
    layers=_kimi,
    mixer=KDAMixer,
    mixer_section="linear_attn_config",
    mixer_fields={
        "num_heads": key("num_heads"),
        "head_dim": key("head_dim"),
        "conv_kernel": key("short_conv_kernel_size", default=4),
    },
    attention={  # MLA: one latent row of kv_lora_rank + qk_rope_head_dim
        "num_kv_heads": derived(1),
        "head_dim": key("qk_rope_head_dim"),
        "kv_lora_rank": key("kv_lora_rank"),
        "num_q_heads": key("num_attention_heads"),
    },
    max_positions=key("max_position_embeddings", "model_max_length", default=0, minimum=0),
)
"""Kimi-Linear: MLA and KDA layers; ``model_max_length`` when ``max_position_embeddings``
is absent."""

LFM2 = Family(
    layers=listed_layers(_LFM2, _attention_at("full_attn_idxs")),
    mixer=ShortConvMixer,
    mixer_fields={
        "channels": key("hidden_size"),
        "conv_kernel": key("conv_L_cache", default=3),
    },
    attention=gqa(HEAD_DIM_FROM_HIDDEN),
)
"""LFM2: ``layer_types`` (``"conv"`` / ``"full_attention"``), or the older
``full_attn_idxs``; a conv layer keeps ``conv_L_cache - 1`` inputs of ``hidden_size``."""


STATE_READERS: Mapping[str, Family] = {
    "qwen3_next": QWEN3_NEXT,
    "qwen3_5": QWEN3_5,
    "qwen3_5_moe": QWEN3_NEXT,
    "qwen3_5_text": QWEN3_5,
    "qwen3_5_moe_text": QWEN3_NEXT,
    "nemotron_h": NEMOTRON_H,
    "jamba": JAMBA,
    "granitemoehybrid": GRANITE_MOE_HYBRID,
    "bamba": BAMBA,
    "falcon_h1": FALCON_H1,
    "zamba2": ZAMBA2,
    "mamba2": MAMBA2,
    "mamba": MAMBA,
    "minimax_text_01": MINIMAX,
    "minimax_m1": MINIMAX,
    "minimax": MINIMAX,
    "kimi_linear": KIMI_LINEAR,
    "lfm2": LFM2,
}
"""``model_type`` -> reader, for the families with recurrent state."""
