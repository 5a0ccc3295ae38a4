"""Read a local Hugging Face ``config.json`` into a :class:`ModelShape` (no network).

One reader per ``model_type`` (:mod:`ukv.models.families_state` for the families with
recurrent state, :mod:`ukv.models.families_attention` for the attention-only ones), each a
:class:`~ukv.models.family.Family`: field tables that name the config keys in the config's
own spelling, and a layer-pattern decoder. A refusal is a :class:`ukv.PoolConfigError`
naming the layer pattern's bad key, else every table key that is missing or malformed.
Where a published config leaves a key out because the transformers config class supplies a
default, the reader applies that default (Gemma 3's head counts, Mistral's window, ...).

Dtypes: the cache follows the serving dtype (``torch_dtype`` / ``dtype``, an fp32
checkpoint served in bf16, bf16 when none is named); the SSM state is fp32 unless the config
names ``mamba_ssm_cache_dtype`` / ``mamba_ssm_dtype`` (SGLang's convention; see
:mod:`ukv.models.dtypes` for vLLM's and for explicit dtypes).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ukv.errors import PoolConfigError
from ukv.models.config_fields import ConfigFields
from ukv.models.families_attention import ATTENTION_READERS
from ukv.models.families_state import STATE_READERS
from ukv.models.shape import ModelShape

__all__ = ["CONFIG_FILE", "SUPPORTED_MODEL_TYPES", "from_hf_config", "read_config"]

CONFIG_FILE = "config.json"
"""File name looked for when a directory is given."""

_READERS: Mapping[str, Callable[[ConfigFields, str], ModelShape]] = {
    **STATE_READERS,
    **ATTENTION_READERS,
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_READERS))
"""``model_type`` values :func:`from_hf_config` reads."""

_CACHE_KEY = re.compile(
    r"layer|attn|attention|window|chunk|mamba|ssm|conv|linear|kv|head|state|lora|hybrid|block",
    re.IGNORECASE,
)


def _unmapped_fields(config: Mapping[str, Any]) -> list[str]:
    """Keys of an unknown family's config that describe its cache (and so could not be
    mapped without a reader): layer patterns, heads, windows, state sizes."""
    found = []
    for key, value in config.items():
        if key == "text_config" and isinstance(value, Mapping):
            found += [f"text_config.{k}" for k in _unmapped_fields(value)]
        elif _CACHE_KEY.search(key) and not key.startswith("_"):
            found.append(key)
    return found


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
            message names the cache fields it could not map and lists the supported
            types), or a key is missing or malformed (the message names it).
    """
    if isinstance(source, Mapping):
        config, path = dict(source), None
    else:
        config, path = read_config(source), Path(source)
    model_type = config.get("model_type")
    reader = _READERS.get(model_type) if isinstance(model_type, str) else None
    if reader is None:
        fields = _unmapped_fields(config)
        raise PoolConfigError(
            f"unsupported model_type {model_type!r}: ukv could not map its cache fields "
            f"{fields if fields else '(none found)'}; supported model_types: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    assert isinstance(model_type, str)
    return reader(ConfigFields(config, model_type), name or _default_name(config, path))
