"""Config readers of the attention-only families: full attention (Llama, Qwen), all
sliding-window (Mistral-7B-v0.1), full + sliding (Gemma 2, Gemma 3, gpt-oss) and full +
chunked attention (Llama 4).

As in :mod:`ukv.models.families_state`, transformers' default for an omitted key is the
``default=`` next to the key.
"""

from __future__ import annotations

from collections.abc import Mapping

from ukv.models import layers
from ukv.models.config_fields import ConfigFields, assemble
from ukv.models.layers import LayerKind
from ukv.models.shape import ModelShape

__all__ = ["ATTENTION_READERS"]

_FULL_SLIDING: Mapping[str, LayerKind] = {"full_attention": "full", "sliding_attention": "swa"}
_FULL_CHUNKED: Mapping[str, LayerKind] = {"full_attention": "full", "chunked_attention": "swa"}

MISTRAL_SLIDING_WINDOW = 4096
"""transformers' MistralConfig default ``sliding_window`` (a saved null means none)."""


def _all(kind: LayerKind, num_layers: int) -> tuple[LayerKind, ...]:
    """Every layer of one kind."""
    return (kind,) * num_layers


def _gqa(cfg: ConfigFields, head_dim_default: int | None = None) -> dict:
    """Attention geometry: ``head_dim`` (default ``hidden_size // num_attention_heads``),
    KV heads (default: the query heads)."""
    q_heads = cfg.integer("num_attention_heads")
    default = cfg.head_dim_from_hidden() if head_dim_default is None else head_dim_default
    return {
        "num_kv_heads": cfg.integer("num_key_value_heads", default=q_heads),
        "head_dim": cfg.integer("head_dim", default=default),
        "num_q_heads": q_heads,
    }


def _kind(sliding: bool) -> LayerKind:
    return "swa" if sliding else "full"


def _llama(cfg: ConfigFields, name: str) -> ModelShape:
    """Llama, Qwen2/3 and other plain decoders: full attention in every layer, unless
    ``layer_types`` or ``use_sliding_window`` (layers from ``max_window_layers`` on) say
    otherwise."""
    num_layers = cfg.integer("num_hidden_layers")
    window = None
    if cfg.has("layer_types"):
        kinds = layers.from_layer_types(cfg.sequence("layer_types"), _FULL_SLIDING, "layer_types")
    elif cfg.raw("use_sliding_window", False) is True:
        first = cfg.integer("max_window_layers", minimum=0, default=num_layers)
        kinds = tuple(_kind(i >= first) for i in range(num_layers))
    else:
        kinds = _all("full", num_layers)
    if "swa" in kinds:
        window = cfg.integer("sliding_window")
    return assemble(cfg, name, kinds, attention=_gqa(cfg), window=window)


def _mistral(cfg: ConfigFields, name: str) -> ModelShape:
    """Mistral: every layer slides over ``sliding_window`` tokens (transformers' default
    4096 when the key is absent); a saved null means full attention (v0.2 on)."""
    num_layers = cfg.integer("num_hidden_layers")
    if "sliding_window" in cfg.values and cfg.values["sliding_window"] is None:
        return assemble(cfg, name, _all("full", num_layers), attention=_gqa(cfg))
    window = cfg.integer("sliding_window", default=MISTRAL_SLIDING_WINDOW)
    return assemble(cfg, name, _all("swa", num_layers), attention=_gqa(cfg), window=window)


def _mixtral(cfg: ConfigFields, name: str) -> ModelShape:
    """Mixtral: like Mistral, but transformers' default window is none (full attention)."""
    num_layers = cfg.integer("num_hidden_layers")
    if not cfg.has("sliding_window"):
        return assemble(cfg, name, _all("full", num_layers), attention=_gqa(cfg))
    window = cfg.integer("sliding_window")
    return assemble(cfg, name, _all("swa", num_layers), attention=_gqa(cfg), window=window)


def _gpt_oss(cfg: ConfigFields, name: str) -> ModelShape:
    """gpt-oss: ``layer_types`` of ``"sliding_attention"`` / ``"full_attention"``;
    transformers' defaults: 8 KV heads of 64, window 128."""
    kinds = layers.from_layer_types(cfg.sequence("layer_types"), _FULL_SLIDING, "layer_types")
    window = cfg.integer("sliding_window", default=128)
    q_heads = cfg.integer("num_attention_heads")
    attention = {
        "num_kv_heads": cfg.integer("num_key_value_heads", default=8),
        "head_dim": cfg.integer("head_dim", default=64),
        "num_q_heads": q_heads,
    }
    return assemble(cfg, name, kinds, attention=attention, window=window)


def _gemma2(cfg: ConfigFields, name: str) -> ModelShape:
    """Gemma 2: ``layer_types``, else even layers sliding and odd layers full (transformers'
    default); window ``sliding_window`` (older configs: ``sliding_window_size``), 4096
    by default; head_dim 256 by default."""
    num_layers = cfg.integer("num_hidden_layers", default=26)
    fields = ConfigFields({**cfg.values, "num_hidden_layers": num_layers}, cfg.model_type)
    if cfg.has("layer_types"):
        kinds = layers.from_layer_types(cfg.sequence("layer_types"), _FULL_SLIDING, "layer_types")
    else:
        kinds = layers.every_nth(num_layers, 2, 1, "full", "swa")
    window = cfg.integer("sliding_window", "sliding_window_size", default=4096)
    q_heads = cfg.integer("num_attention_heads", default=8)
    attention = {
        "num_kv_heads": cfg.integer("num_key_value_heads", default=4),
        "head_dim": cfg.integer("head_dim", default=256),
        "num_q_heads": q_heads,
    }
    return assemble(fields, name, kinds, attention=attention, window=window)


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


def _gemma3(cfg: ConfigFields, name: str) -> ModelShape:
    """Gemma 3: the text model (nested ``text_config`` for ``gemma3``); ``layer_types`` if
    present, else every ``sliding_window_pattern``-th layer global; omitted keys take
    :data:`GEMMA3_TEXT_DEFAULTS`."""
    outer = cfg
    text = cfg.mapping("text_config") if cfg.model_type == "gemma3" else cfg
    values = {**GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in text.values.items() if v is not None}}
    text = ConfigFields(values, text.model_type if text is cfg else "gemma3", text.prefix)
    if text.has("layer_types"):
        kinds = layers.from_layer_types(text.sequence("layer_types"), _FULL_SLIDING, "layer_types")
    else:
        period = text.integer("sliding_window_pattern")
        kinds = layers.every_nth(
            text.integer("num_hidden_layers"), period, period - 1, "full", "swa"
        )
    attention = {
        "num_kv_heads": text.integer("num_key_value_heads"),
        "head_dim": text.integer("head_dim"),
        "num_q_heads": text.integer("num_attention_heads"),
    }
    return assemble(
        text,
        name,
        kinds,
        attention=attention,
        window=text.integer("sliding_window"),
        outer=None if outer is text else outer,
    )


def _llama4(cfg: ConfigFields, name: str) -> ModelShape:
    """Llama 4: the text model (nested ``text_config`` for ``llama4``); layers with RoPE
    attend within chunks of ``attention_chunk_size`` tokens, the NoPE layers
    (``no_rope_layers[i] == 0``, default every 4th) attend globally."""
    outer = cfg
    text = cfg.mapping("text_config") if cfg.has("text_config") else cfg
    num_layers = text.integer("num_hidden_layers", default=48)
    if text.has("layer_types"):
        kinds = layers.from_layer_types(text.sequence("layer_types"), _FULL_CHUNKED, "layer_types")
    else:
        flags = text.raw("no_rope_layers", None) or [
            int((i + 1) % 4 != 0) for i in range(num_layers)
        ]
        kinds = layers.from_layer_types(
            [str(f) for f in flags], {"1": "swa", "0": "full"}, text.key("no_rope_layers")
        )
    chunk = text.integer("attention_chunk_size", default=8192)
    q_heads = text.integer("num_attention_heads", default=40)
    attention = {
        "num_kv_heads": text.integer("num_key_value_heads", default=8),
        "head_dim": text.integer("head_dim", default=128),
        "num_q_heads": q_heads,
    }
    fields = ConfigFields(
        {**text.values, "num_hidden_layers": num_layers}, text.model_type, text.prefix
    )
    return assemble(
        fields,
        name,
        kinds,
        attention=attention,
        window=chunk,
        chunked=True,
        outer=None if outer is text else outer,
    )


ATTENTION_READERS = {
    "llama": _llama,
    "qwen2": _llama,
    "qwen3": _llama,
    "qwen3_moe": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "gpt_oss": _gpt_oss,
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "gemma3_text": _gemma3,
    "llama4": _llama4,
    "llama4_text": _llama4,
}
"""``model_type`` -> reader, for the attention-only families."""
