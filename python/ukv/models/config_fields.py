"""Typed, error-naming access to one Hugging Face config dict, and the shape assembly every
family reader shares.

A :class:`ConfigFields` wraps the dict (or a nested ``text_config``) of one ``model_type``;
each getter names the key, in the config's own spelling, when it is missing or malformed.
Where transformers' config class supplies a default for an omitted key, the reader passes
it as ``default=`` so the default is written next to the key it fills.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ukv.errors import PoolConfigError
from ukv.models import layers
from ukv.models.attention import AttentionShape
from ukv.models.layers import LayerKind
from ukv.models.shape import ModelShape
from ukv.models.state import Mixer, StateShape

__all__ = ["DEFAULT_DTYPE", "ConfigFields", "MissingKeys", "assemble", "serving_dtype"]

DEFAULT_DTYPE = torch.bfloat16
"""Serving dtype when the config names none, or names fp32 (engines serve an fp32
checkpoint in bf16 unless told otherwise)."""

DTYPES: Mapping[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}

_NO_DEFAULT = object()


class MissingKeys(PoolConfigError):
    """Config keys that are absent and have no default, named together.

    Args:
        model_type: The family, for the message.
        keys: The keys as a message shows them (with any nesting prefix), in reading order.
    """

    def __init__(self, model_type: str, keys: Sequence[str]) -> None:
        self.model_type = model_type
        self.keys = tuple(keys)
        noun = "key" if len(self.keys) == 1 else "keys"
        super().__init__(
            f"{model_type} config is missing {noun} {', '.join(repr(k) for k in self.keys)}"
        )


class ConfigFields:
    """A config dict with typed getters whose errors name the key.

    Args:
        values: The config (or its nested text config).
        model_type: The family, for messages.
        prefix: Prepended to key names in messages (``"text_config."`` when nested).
    """

    def __init__(self, values: Mapping[str, Any], model_type: str, prefix: str = "") -> None:
        self.values = values
        self.model_type = model_type
        self.prefix = prefix

    def key(self, key: str) -> str:
        """``key`` as a message shows it (with the nesting prefix)."""
        return self.prefix + key

    def missing(self, key: str) -> MissingKeys:
        """The error for a key that is absent and has no default."""
        return MissingKeys(self.model_type, [self.key(key)])

    def has(self, key: str) -> bool:
        """Whether ``key`` is present and not null."""
        return key in self.values and self.values[key] is not None

    def raw(self, key: str, default: Any = _NO_DEFAULT) -> Any:
        """The value at ``key``, else ``default``, else a missing-key error."""
        if self.has(key):
            return self.values[key]
        if default is _NO_DEFAULT:
            raise self.missing(key)
        return default

    def integer(
        self, key: str, *fallbacks: str, minimum: int = 1, default: Any = _NO_DEFAULT
    ) -> int:
        """An int ``>= minimum`` at ``key``, else at the first fallback present, else
        ``default`` (transformers' default), else a missing-key error."""
        for k in (key, *fallbacks):
            if self.has(k):
                value = self.values[k]
                if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                    raise PoolConfigError(
                        f"{self.model_type} config key {self.key(k)!r} must be an "
                        f"int >= {minimum}, got {value!r}"
                    )
                return value
        if default is _NO_DEFAULT:
            raise self.missing(key)
        return int(default)

    def sequence(self, key: str) -> list[Any]:
        """A list at ``key``."""
        value = self.raw(key)
        if not isinstance(value, list):
            raise PoolConfigError(
                f"{self.model_type} config key {self.key(key)!r} must be a list, got {value!r}"
            )
        return value

    def mapping(self, key: str) -> ConfigFields:
        """The object at ``key`` as nested fields (messages show ``key.``)."""
        value = self.raw(key)
        if not isinstance(value, Mapping):
            raise PoolConfigError(
                f"{self.model_type} config key {self.key(key)!r} must be an object, got {value!r}"
            )
        return ConfigFields(value, self.model_type, self.key(key) + ".")

    def dtype(self, key: str) -> torch.dtype | None:
        """The dtype named at ``key`` (``"bfloat16"``, ``"float16"``, ``"float32"``), or None."""
        if not self.has(key):
            return None
        value = self.values[key]
        if value not in DTYPES:
            raise PoolConfigError(
                f"{self.model_type} config key {self.key(key)!r} is {value!r}; "
                f"supported dtypes are {sorted(DTYPES)}"
            )
        return DTYPES[value]

    def head_dim_from_hidden(self, hidden_key: str = "hidden_size") -> int:
        """``hidden_size // num_attention_heads`` (transformers' default head size)."""
        hidden, heads = self.integer(hidden_key), self.integer("num_attention_heads")
        if hidden % heads:
            raise PoolConfigError(
                f"{self.model_type} config: {self.key(hidden_key)} {hidden} is not a multiple "
                f"of {self.key('num_attention_heads')} {heads}"
            )
        return hidden // heads

    def checked_kinds(self, kinds: Sequence[LayerKind]) -> tuple[LayerKind, ...]:
        """Check a layer pattern covers exactly ``num_hidden_layers`` layers."""
        num_layers = self.integer("num_hidden_layers")
        if len(kinds) != num_layers:
            raise PoolConfigError(
                f"{self.model_type} config: layer pattern has {len(kinds)} entries but "
                f"{self.key('num_hidden_layers')} is {num_layers}"
            )
        return tuple(kinds)


def serving_dtype(*configs: ConfigFields) -> torch.dtype:
    """The dtype an engine serves the model in: ``torch_dtype`` / ``dtype`` of the first
    config naming one; fp32 checkpoints and configs naming none are served in bf16."""
    for cfg in configs:
        for key in ("torch_dtype", "dtype"):
            named = cfg.dtype(key)
            if named is not None:
                return DEFAULT_DTYPE if named == torch.float32 else named
    return DEFAULT_DTYPE


def config_ssm_dtype(*configs: ConfigFields) -> torch.dtype | None:
    """The SSM-state dtype a config names itself (``mamba_ssm_cache_dtype``, Nemotron-H;
    ``mamba_ssm_dtype``, Qwen3.5), or None."""
    for cfg in configs:
        for key in ("mamba_ssm_cache_dtype", "mamba_ssm_dtype"):
            named = cfg.dtype(key)
            if named is not None:
                return named
    return None


def assemble(
    cfg: ConfigFields,
    name: str,
    kinds: Sequence[LayerKind],
    *,
    attention: dict[str, Any] | None = None,
    mixer: Mixer | None = None,
    window: int | None = None,
    chunked: bool = False,
    outer: ConfigFields | None = None,
    max_positions: int | None = None,
) -> ModelShape:
    """Build a :class:`ModelShape` from a decoded layer pattern and its geometries.

    Args:
        cfg: The (text) config.
        name: Shape name.
        kinds: One kind per decoder layer (``num_hidden_layers`` long).
        attention: ``AttentionShape`` fields shared by full and sliding layers
            (``num_kv_heads``, ``head_dim``, optional ``v_head_dim``, ``num_q_heads``,
            ``kv_lora_rank``); needed when any layer is full or sliding.
        mixer: The state layers' mixer; needed when any layer holds state.
        window: Sliding window (or chunk) of the ``"swa"`` layers.
        chunked: The window is an attention chunk.
        outer: The outer config of a nested ``text_config`` (dtype lookup).
        max_positions: ``max_position_embeddings`` if the reader found it elsewhere.

    Returns:
        The unsharded shape, in the SGLang dtype convention (see
        :mod:`ukv.models.dtypes`).

    Raises:
        PoolConfigError: The pattern needs a geometry the reader did not give.
    """
    kinds = cfg.checked_kinds(kinds)
    configs = (cfg,) if outer is None else (cfg, outer)
    dtype = serving_dtype(*configs)
    ssm_dtype = config_ssm_dtype(*configs)
    n_full = layers.cache_layers(kinds, "full")
    n_state = layers.cache_layers(kinds, "mamba")
    n_swa = layers.cache_layers(kinds, "swa")
    if (n_full or n_swa) and attention is None:
        raise PoolConfigError(f"{cfg.model_type} config: attention layers without a geometry")
    if n_state and mixer is None:
        raise PoolConfigError(f"{cfg.model_type} config: state layers without a mixer")
    if n_full + n_state + n_swa == 0:
        raise PoolConfigError(f"{cfg.model_type} config: no layer holds a cache")
    attn = attention or {}
    full = AttentionShape(num_layers=n_full, dtype=dtype, **attn) if n_full else None
    swa = None
    if n_swa:
        if window is None:
            raise PoolConfigError(f"{cfg.model_type} config: sliding layers without a window")
        swa = AttentionShape(num_layers=n_swa, dtype=dtype, window=window, chunked=chunked, **attn)
    state = None
    if n_state:
        assert mixer is not None
        temporal = torch.float32 if ssm_dtype is None else ssm_dtype
        state = StateShape(
            num_layers=n_state, mixer=mixer, conv_dtype=dtype, temporal_dtype=temporal
        )
    if max_positions is None:
        for c in configs:
            if c.has("max_position_embeddings"):
                max_positions = c.integer("max_position_embeddings")
                break
    return ModelShape(
        name=name,
        architecture=(outer or cfg).model_type,
        full=full,
        state=state,
        swa=swa,
        layer_kinds=kinds,
        max_position_embeddings=max_positions,
        model_dtype=dtype,
        config_ssm_dtype=ssm_dtype,
    )
