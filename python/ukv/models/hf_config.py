"""Read a local Hugging Face ``config.json`` into a :class:`ModelShape` (no network).

One reader per supported ``model_type``; each names the config keys it uses, in the
config's own spelling, and fails with a :class:`ukv.PoolConfigError` naming the first key
that is missing or malformed. Where a published config leaves a key out because the
transformers config class supplies a default, that default is applied here and listed:

* ``gemma3`` / ``gemma3_text``: ``sliding_window_pattern`` defaults to 6 (the published
  Gemma 3 configs omit it), used only when the config has no ``layer_types``.
* Every architecture: the cache dtype is ``torch_dtype`` (or ``dtype``), else bfloat16
  (gpt-oss publishes none); the SSM state is fp32 unless the config names
  ``mamba_ssm_dtype``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from ukv.errors import PoolConfigError
from ukv.models import layers
from ukv.models.attention import AttentionShape
from ukv.models.layers import LayerKind
from ukv.models.shape import ModelShape
from ukv.models.state import GatedDeltaNetMixer, Mamba1Mixer, Mamba2Mixer, Mixer, StateShape

__all__ = ["CONFIG_FILE", "SUPPORTED_MODEL_TYPES", "from_hf_config", "read_config"]

CONFIG_FILE = "config.json"
"""File name looked for when a directory is given."""

DEFAULT_DTYPE = torch.bfloat16
"""Cache dtype when the config names none."""

DEFAULT_TEMPORAL_DTYPE = torch.float32
"""SSM-state dtype when the config names none (engines keep the recurrence in fp32)."""

GEMMA3_SLIDING_WINDOW_PATTERN = 6
"""transformers' Gemma3TextConfig default: every 6th layer is global."""

_DTYPES: Mapping[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}

_FULL_SLIDING: Mapping[str, LayerKind] = {"full_attention": "full", "sliding_attention": "swa"}
_QWEN3_NEXT_TYPES: Mapping[str, LayerKind] = {
    "full_attention": "full",
    "linear_attention": "mamba",
}
_GRANITE_TYPES: Mapping[str, LayerKind] = {"attention": "full", "mamba": "mamba"}


class _Config:
    """A config dict with typed, error-naming getters."""

    def __init__(self, values: Mapping[str, Any], model_type: str, prefix: str = "") -> None:
        self.values = values
        self.model_type = model_type
        self.prefix = prefix  # "text_config." for Gemma 3's nested text model

    def _missing(self, key: str) -> PoolConfigError:
        return PoolConfigError(f"{self.model_type} config is missing key {self.prefix + key!r}")

    def has(self, key: str) -> bool:
        return key in self.values and self.values[key] is not None

    def raw(self, key: str) -> Any:
        if not self.has(key):
            raise self._missing(key)
        return self.values[key]

    def integer(self, key: str, *fallbacks: str, minimum: int = 1) -> int:
        """An int ``>= minimum`` at ``key``, else at the first fallback key present."""
        for k in (key, *fallbacks):
            if self.has(k):
                value = self.values[k]
                if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                    raise PoolConfigError(
                        f"{self.model_type} config key {self.prefix + k!r} must be an "
                        f"int >= {minimum}, got {value!r}"
                    )
                return value
        raise self._missing(key)

    def sequence(self, key: str) -> list[Any]:
        value = self.raw(key)
        if not isinstance(value, list):
            raise PoolConfigError(
                f"{self.model_type} config key {self.prefix + key!r} must be a list, got {value!r}"
            )
        return value

    def dtype(self, key: str, default: torch.dtype) -> torch.dtype:
        if not self.has(key):
            return default
        value = self.values[key]
        if value not in _DTYPES:
            raise PoolConfigError(
                f"{self.model_type} config key {self.prefix + key!r} is {value!r}; "
                f"supported dtypes are {sorted(_DTYPES)}"
            )
        return _DTYPES[value]

    def head_dim_from_hidden(self) -> int:
        """``hidden_size // num_attention_heads`` (models without a ``head_dim`` key)."""
        hidden, heads = self.integer("hidden_size"), self.integer("num_attention_heads")
        if hidden % heads:
            raise PoolConfigError(
                f"{self.model_type} config: hidden_size {hidden} is not a multiple of "
                f"num_attention_heads {heads}"
            )
        return hidden // heads


def _model_dtype(*configs: _Config) -> torch.dtype:
    """``torch_dtype`` / ``dtype`` of the first config that names one, else bf16."""
    for cfg in configs:
        for key in ("torch_dtype", "dtype"):
            if cfg.has(key):
                return cfg.dtype(key, DEFAULT_DTYPE)
    return DEFAULT_DTYPE


def _checked_kinds(cfg: _Config, kinds: tuple[LayerKind, ...]) -> tuple[LayerKind, ...]:
    """Check the layer pattern covers exactly ``num_hidden_layers`` layers."""
    num_layers = cfg.integer("num_hidden_layers")
    if len(kinds) != num_layers:
        raise PoolConfigError(
            f"{cfg.model_type} config: layer pattern has {len(kinds)} entries but "
            f"num_hidden_layers is {num_layers}"
        )
    return kinds


def _num_layers(cfg: _Config, kinds: tuple[LayerKind, ...], kind: LayerKind) -> int:
    """Layers of one kind; a hybrid needs at least one of each of its two kinds."""
    num = layers.count(kinds, kind)
    if num == 0:
        raise PoolConfigError(
            f"{cfg.model_type} config has no {kind!r} layers in its layer pattern; "
            f"ukv models hybrids with both kinds"
        )
    return num


def _mamba_shape(
    cfg: _Config, name: str, kinds: tuple[LayerKind, ...], head_dim: int, mixer: Mixer
) -> ModelShape:
    """Assemble a full-attention + recurrent-state model from its parts."""
    dtype = _model_dtype(cfg)
    return ModelShape(
        name=name,
        architecture=cfg.model_type,
        full=AttentionShape(
            num_layers=_num_layers(cfg, kinds, "full"),
            num_kv_heads=cfg.integer("num_key_value_heads"),
            head_dim=head_dim,
            dtype=dtype,
        ),
        state=StateShape(
            num_layers=_num_layers(cfg, kinds, "mamba"),
            mixer=mixer,
            conv_dtype=dtype,
            temporal_dtype=cfg.dtype("mamba_ssm_dtype", DEFAULT_TEMPORAL_DTYPE),
        ),
        layer_kinds=kinds,
    )


def _swa_shape(
    cfg: _Config, name: str, kinds: tuple[LayerKind, ...], dtype: torch.dtype, architecture: str
) -> ModelShape:
    """Assemble a full + sliding-window model (both share one KV geometry)."""
    heads, head_dim = cfg.integer("num_key_value_heads"), cfg.integer("head_dim")
    return ModelShape(
        name=name,
        architecture=architecture,
        full=AttentionShape(_num_layers(cfg, kinds, "full"), heads, head_dim, dtype),
        swa=AttentionShape(
            _num_layers(cfg, kinds, "swa"),
            heads,
            head_dim,
            dtype,
            window=cfg.integer("sliding_window"),
        ),
        layer_kinds=kinds,
    )


# -- one reader per model_type ----------------------------------------------------------


def _qwen3_next(cfg: _Config, name: str) -> ModelShape:
    """Qwen3-Next: ``layer_types`` if present, else full attention every
    ``full_attention_interval`` layers (at ``(i + 1) % interval == 0``)."""
    if cfg.has("layer_types"):
        kinds = layers.from_layer_types(
            cfg.sequence("layer_types"), _QWEN3_NEXT_TYPES, "layer_types"
        )
    else:
        interval = cfg.integer("full_attention_interval")
        kinds = layers.every_nth(
            cfg.integer("num_hidden_layers"), interval, interval - 1, "full", "mamba"
        )
    mixer = GatedDeltaNetMixer(
        num_k_heads=cfg.integer("linear_num_key_heads"),
        num_v_heads=cfg.integer("linear_num_value_heads"),
        head_k_dim=cfg.integer("linear_key_head_dim"),
        head_v_dim=cfg.integer("linear_value_head_dim"),
        conv_kernel=cfg.integer("linear_conv_kernel_dim"),
    )
    return _mamba_shape(cfg, name, _checked_kinds(cfg, kinds), cfg.integer("head_dim"), mixer)


def _nemotron_h(cfg: _Config, name: str) -> ModelShape:
    """Nemotron-H: ``hybrid_override_pattern`` (``M`` Mamba2, ``*`` attention)."""
    kinds = layers.from_nemotron_pattern(cfg.raw("hybrid_override_pattern"))
    mixer = Mamba2Mixer(
        num_heads=cfg.integer("mamba_num_heads"),
        head_dim=cfg.integer("mamba_head_dim"),
        num_groups=cfg.integer("n_groups"),
        d_state=cfg.integer("ssm_state_size"),
        d_conv=cfg.integer("conv_kernel"),
    )
    head_dim = cfg.integer("head_dim", "attention_head_dim")
    return _mamba_shape(cfg, name, _checked_kinds(cfg, kinds), head_dim, mixer)


def _jamba(cfg: _Config, name: str) -> ModelShape:
    """Jamba: attention where ``i % attn_layer_period == attn_layer_offset``; Mamba1
    elsewhere, with ``d_inner = mamba_expand * hidden_size``."""
    num_layers = cfg.integer("num_hidden_layers")
    kinds = layers.every_nth(
        num_layers,
        cfg.integer("attn_layer_period"),
        cfg.integer("attn_layer_offset", minimum=0),
        "full",
        "mamba",
    )
    mixer = Mamba1Mixer(
        d_inner=cfg.integer("mamba_expand") * cfg.integer("hidden_size"),
        d_state=cfg.integer("mamba_d_state"),
        d_conv=cfg.integer("mamba_d_conv"),
    )
    return _mamba_shape(cfg, name, kinds, cfg.head_dim_from_hidden(), mixer)


def _granitemoehybrid(cfg: _Config, name: str) -> ModelShape:
    """GraniteMoeHybrid (Granite-4.0-H): ``layer_types`` of ``"attention"`` / ``"mamba"``."""
    kinds = layers.from_layer_types(cfg.sequence("layer_types"), _GRANITE_TYPES, "layer_types")
    mixer = Mamba2Mixer(
        num_heads=cfg.integer("mamba_n_heads"),
        head_dim=cfg.integer("mamba_d_head"),
        num_groups=cfg.integer("mamba_n_groups"),
        d_state=cfg.integer("mamba_d_state"),
        d_conv=cfg.integer("mamba_d_conv"),
    )
    return _mamba_shape(cfg, name, _checked_kinds(cfg, kinds), cfg.head_dim_from_hidden(), mixer)


def _gpt_oss(cfg: _Config, name: str) -> ModelShape:
    """gpt-oss: ``layer_types`` of ``"sliding_attention"`` / ``"full_attention"``."""
    kinds = layers.from_layer_types(cfg.sequence("layer_types"), _FULL_SLIDING, "layer_types")
    return _swa_shape(cfg, name, _checked_kinds(cfg, kinds), _model_dtype(cfg), cfg.model_type)


def _gemma3(cfg: _Config, name: str) -> ModelShape:
    """Gemma 3: the text model (nested ``text_config`` for ``gemma3``); ``layer_types`` if
    present, else every ``sliding_window_pattern``-th layer global (default 6)."""
    outer = cfg
    if cfg.model_type == "gemma3":
        text = cfg.raw("text_config")
        if not isinstance(text, Mapping):
            raise PoolConfigError(
                f"gemma3 config key 'text_config' must be an object, got {text!r}"
            )
        cfg = _Config(text, "gemma3", prefix="text_config.")
    if cfg.has("layer_types"):
        kinds = layers.from_layer_types(cfg.sequence("layer_types"), _FULL_SLIDING, "layer_types")
    else:
        period = (
            cfg.integer("sliding_window_pattern")
            if cfg.has("sliding_window_pattern")
            else GEMMA3_SLIDING_WINDOW_PATTERN
        )
        kinds = layers.every_nth(
            cfg.integer("num_hidden_layers"), period, period - 1, "full", "swa"
        )
    dtype = _model_dtype(cfg, outer)
    return _swa_shape(cfg, name, _checked_kinds(cfg, kinds), dtype, outer.model_type)


_READERS: Mapping[str, Callable[[_Config, str], ModelShape]] = {
    "qwen3_next": _qwen3_next,
    "nemotron_h": _nemotron_h,
    "jamba": _jamba,
    "granitemoehybrid": _granitemoehybrid,
    "gpt_oss": _gpt_oss,
    "gemma3": _gemma3,
    "gemma3_text": _gemma3,
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_READERS)
"""``model_type`` values :func:`from_hf_config` reads."""


# -- entry points -------------------------------------------------------------------------


def read_config(source: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a ``config.json`` (or the one inside a directory) as a dict.

    Args:
        source: Path to the file, or to a directory that holds ``config.json``.

    Returns:
        The parsed JSON object.

    Raises:
        PoolConfigError: The file does not exist, is not valid JSON, or is not an object.
    """
    path = Path(source)
    if path.is_dir():
        path = path / CONFIG_FILE
    if not path.is_file():
        raise PoolConfigError(f"no config file at {str(path)!r}")
    try:
        with path.open(encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PoolConfigError(f"cannot read {str(path)!r} as JSON: {err}") from err
    if not isinstance(config, dict):
        raise PoolConfigError(f"{str(path)!r} must hold a JSON object, got {type(config).__name__}")
    return config


def _default_name(config: Mapping[str, Any], path: Path | None) -> str:
    """``_name_or_path``'s last component, else the config's directory, else model_type."""
    saved = config.get("_name_or_path")
    if isinstance(saved, str) and saved.strip("/"):
        return saved.rstrip("/").rsplit("/", 1)[-1]
    if path is not None:
        directory = path if path.is_dir() else path.resolve().parent
        if directory.name:
            return directory.name
    return str(config.get("model_type"))


def from_hf_config(
    source: str | os.PathLike[str] | Mapping[str, Any], *, name: str | None = None
) -> ModelShape:
    """Read a Hugging Face config into a :class:`ModelShape` (local only, no network).

    Args:
        source: A parsed config dict, a path to ``config.json``, or a directory holding
            one (e.g. a downloaded model snapshot).
        name: The shape's name; default: the config's ``_name_or_path``, else the name of
            the directory holding the file, else the ``model_type``.

    Returns:
        The unsharded shape (use :meth:`ModelShape.sharded` for one tensor-parallel rank).

    Raises:
        PoolConfigError: The file cannot be read, ``model_type`` is not supported (the
            message lists the supported ones), or a key is missing or malformed (the
            message names it).
    """
    if isinstance(source, Mapping):
        config, path = dict(source), None
    else:
        config, path = read_config(source), Path(source)
    model_type = config.get("model_type")
    reader = _READERS.get(model_type) if isinstance(model_type, str) else None
    if reader is None:
        raise PoolConfigError(
            f"unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    assert isinstance(model_type, str)
    return reader(_Config(config, model_type), name or _default_name(config, path))
