"""Config readers of the attention-only families: full attention (Llama, Qwen), all
sliding-window (Mistral-7B-v0.1), full + sliding (Gemma 2, Gemma 3, gpt-oss) and full +
chunked attention (Llama 4).

Each family is a :class:`~ukv.models.family.Family`: its field tables (transformers'
default for an omitted key is the ``default=`` next to the key) and its layer pattern.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ukv.models import layers
from ukv.models.config_fields import ConfigFields
from ukv.models.family import (
    HEAD_DIM,
    Family,
    derived,
    every_layer,
    gqa,
    key,
    listed_layers,
    periodic,
)
from ukv.models.layers import LayerKind

__all__ = ["ATTENTION_READERS"]

_FULL_SLIDING: Mapping[str, LayerKind] = {"full_attention": "full", "sliding_attention": "swa"}
_FULL_CHUNKED: Mapping[str, LayerKind] = {"full_attention": "full", "chunked_attention": "swa"}

MISTRAL_SLIDING_WINDOW = 4096
"""transformers' MistralConfig default ``sliding_window`` (a saved null means none)."""


# -- layer patterns -------------------------------------------------------------------------


def _qwen_sliding(cfg: ConfigFields) -> list[LayerKind]:
    """Full attention, unless ``use_sliding_window``: then layers from
    ``max_window_layers`` on slide."""
    num_layers = first = cfg.integer("num_hidden_layers")
    if cfg.raw("use_sliding_window", False) is True:
        first = cfg.integer("max_window_layers", minimum=0, default=num_layers)
    kinds: list[LayerKind] = ["full" if i < first else "swa" for i in range(num_layers)]
    return kinds


def _mistral_kind(cfg: ConfigFields) -> LayerKind:
    """Mistral slides unless the config saves ``sliding_window: null`` (v0.2 on)."""
    saved_null = "sliding_window" in cfg.values and cfg.values["sliding_window"] is None
    return "full" if saved_null else "swa"


def _no_rope_layers(cfg: ConfigFields) -> tuple[LayerKind, ...]:
    """Llama 4: RoPE layers (``no_rope_layers[i] == 1``) attend within a chunk, NoPE layers
    globally; transformers' default makes every 4th layer NoPE."""
    num_layers = cfg.integer("num_hidden_layers")
    flags = cfg.raw("no_rope_layers", None) or [int((i + 1) % 4 != 0) for i in range(num_layers)]
    return layers.from_layer_types(
        [str(f) for f in flags], {"1": "swa", "0": "full"}, cfg.key("no_rope_layers")
    )


# -- families -------------------------------------------------------------------------------

_GQA = gqa(HEAD_DIM)

LLAMA = Family(
    layers=listed_layers(_FULL_SLIDING, _qwen_sliding),
    attention=_GQA,
    window=key("sliding_window"),
)
"""Llama, Qwen2/3 and other plain decoders: full attention in every layer, unless
``layer_types`` or ``use_sliding_window`` say otherwise; KV heads default to the query
heads, ``head_dim`` to ``hidden_size // num_attention_heads``."""

MISTRAL = Family(
    layers=every_layer(_mistral_kind),
    attention=_GQA,
    window=key("sliding_window", default=MISTRAL_SLIDING_WINDOW),
)
"""Mistral: every layer slides over ``sliding_window`` tokens (4096 when the key is
absent); a saved null means full attention."""

MIXTRAL = Family(
    layers=every_layer(lambda cfg: "swa" if cfg.has("sliding_window") else "full"),
    attention=_GQA,
    window=key("sliding_window"),
)
"""Mixtral: like Mistral, but transformers' default window is none (full attention)."""

GPT_OSS = Family(
    layers=listed_layers(_FULL_SLIDING),
    attention=gqa(key("head_dim", default=64), kv_heads=8),
    window=key("sliding_window", default=128),
)
"""gpt-oss: ``layer_types`` (required) of ``"sliding_attention"`` / ``"full_attention"``."""

GEMMA2 = Family(
    layers=listed_layers(_FULL_SLIDING, periodic(derived(2), "full", "swa")),
    attention=gqa(key("head_dim", default=256), kv_heads=4, q_heads=8),
    window=key("sliding_window", "sliding_window_size", default=4096),
    defaults={"num_hidden_layers": 26},
)
"""Gemma 2: ``layer_types``, else even layers sliding and odd layers full; the window is
``sliding_window`` (older configs: ``sliding_window_size``)."""

GEMMA3_TEXT_DEFAULTS: Mapping[str, int] = {
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "max_position_embeddings": 131072,
}
"""transformers' Gemma3TextConfig defaults the published 4B / 12B configs rely on."""

GEMMA3 = Family(
    layers=listed_layers(_FULL_SLIDING, periodic(key("sliding_window_pattern"), "full", "swa")),
    attention=_GQA,
    window=key("sliding_window"),
    defaults=GEMMA3_TEXT_DEFAULTS,
    text_config="nested",
)
"""Gemma 3: the text model (``text_config``; ``gemma3_text`` at the top level);
``layer_types`` if present, else every ``sliding_window_pattern``-th layer global."""

LLAMA4 = Family(
    layers=listed_layers(_FULL_CHUNKED, _no_rope_layers),
    attention=gqa(key("head_dim", default=128), kv_heads=8, q_heads=40),
    window=key("attention_chunk_size", default=8192),
    chunked=True,
    defaults={"num_hidden_layers": 48},
    text_config="either",
)
"""Llama 4: the text model (``text_config`` when present); layers with RoPE attend within
chunks of ``attention_chunk_size`` tokens, the NoPE layers attend globally."""


ATTENTION_READERS: Mapping[str, Family] = {
    "llama": LLAMA,
    "qwen2": LLAMA,
    "qwen3": LLAMA,
    "qwen3_moe": LLAMA,
    "mistral": MISTRAL,
    "mixtral": MIXTRAL,
    "gpt_oss": GPT_OSS,
    "gemma2": GEMMA2,
    "gemma3": GEMMA3,
    "gemma3_text": dataclasses.replace(GEMMA3, text_config="top"),
    "llama4": LLAMA4,
    "llama4_text": LLAMA4,
}
"""``model_type`` -> reader, for the attention-only families."""
