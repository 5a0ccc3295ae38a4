"""One entry point for ``--model``: a preset name or a local ``config.json``."""

from __future__ import annotations

import os
from pathlib import Path

from ukv.errors import PoolConfigError
from ukv.models.hf_config import from_hf_config
from ukv.models.presets import find_preset, preset_names
from ukv.models.shape import ModelShape

__all__ = ["load"]


def load(model: str | os.PathLike[str]) -> ModelShape:
    """Resolve what a user passed as ``--model``.

    A path that exists wins (as in transformers' ``from_pretrained``): a ``config.json``
    file, or a directory holding one. Otherwise ``model`` is looked up as a preset name,
    ignoring case.

    Args:
        model: A preset name (e.g. ``"Qwen3-Next-80B-A3B"``), or a path to ``config.json``
            or to a model directory.

    Returns:
        The unsharded shape.

    Raises:
        PoolConfigError: ``model`` is neither an existing path nor a preset name (the
            message lists the presets), or the config cannot be read (see
            :func:`from_hf_config`).
    """
    if not isinstance(model, (str, os.PathLike)):
        raise PoolConfigError(f"model must be a preset name or a path, got {model!r}")
    if Path(model).exists():
        return from_hf_config(model)
    shape = find_preset(model) if isinstance(model, str) else None
    if shape is None:
        raise PoolConfigError(
            f"model {str(model)!r} is neither a path to a config.json nor a preset; "
            f"presets are: {', '.join(preset_names())}"
        )
    return shape
