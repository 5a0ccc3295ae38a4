"""One entry point for ``--model``: a preset name, a local ``config.json``, or a model id
found in the local Hugging Face cache."""

from __future__ import annotations

import os
from pathlib import Path

from ukv.errors import PoolConfigError
from ukv.models.hf_config import from_hf_config
from ukv.models.hub_cache import find_cached_config, hub_cache_dir
from ukv.models.presets import find_preset, preset_names
from ukv.models.shape import ModelShape

__all__ = ["load"]


def load(model: str | os.PathLike[str]) -> ModelShape:
    """Resolve what a user passed as ``--model``.

    A path that exists wins (as in transformers' ``from_pretrained``): a ``config.json``
    file, or a directory holding one. Otherwise ``model`` is looked up as a preset name,
    ignoring case, then as a Hugging Face model id (``ORG/NAME``) in the local hub cache
    (:mod:`ukv.models.hub_cache`; nothing is downloaded).

    Args:
        model: A preset name (e.g. ``"Qwen3-Next-80B-A3B"``), a path to ``config.json``
            or to a model directory, or a cached model id (``"Qwen/Qwen3.5-35B-A3B"``).

    Returns:
        The unsharded shape.

    Raises:
        PoolConfigError: ``model`` is neither an existing path nor a preset name (the
            message lists the presets and the cache searched), or the config cannot be
            read (see :func:`from_hf_config`).
    """
    if not isinstance(model, (str, os.PathLike)):
        raise PoolConfigError(f"model must be a preset name or a path, got {model!r}")
    if Path(model).exists():
        return from_hf_config(model)
    shape = find_preset(model) if isinstance(model, str) else None
    if shape is not None:
        return shape
    cached = find_cached_config(model) if isinstance(model, str) else None
    if cached is not None:
        return from_hf_config(cached, name=str(model).strip().rsplit("/", 1)[-1])
    raise PoolConfigError(
        f"model {str(model)!r} is neither a path to a config.json, a preset, nor a model id "
        f"in the Hugging Face cache {str(hub_cache_dir())!r}; presets are: "
        f"{', '.join(preset_names())}"
    )
