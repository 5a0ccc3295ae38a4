"""Find a model's ``config.json`` in the local Hugging Face cache (no network).

``huggingface_hub`` stores a download of ``ORG/NAME`` under
``<cache>/models--ORG--NAME/snapshots/<revision>/config.json``, and the revision ``main``
points to in ``<cache>/models--ORG--NAME/refs/main``. The cache directory is
``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``
(huggingface_hub's own order).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["find_cached_config", "hub_cache_dir"]

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache directory this environment uses."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def find_cached_config(model_id: str) -> Path | None:
    """The cached ``config.json`` of ``model_id`` (``"ORG/NAME"``), or None.

    The snapshot ``refs/main`` names wins; else the most recently modified snapshot that
    holds a ``config.json``.

    Args:
        model_id: A Hugging Face repository id.

    Returns:
        The path, or None when ``model_id`` is not a repository id or is not cached.
    """
    if not isinstance(model_id, str) or not _REPO_ID.match(model_id.strip()):
        return None
    org, name = model_id.strip().split("/")
    repo = hub_cache_dir() / f"models--{org}--{name}"
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file():
        main = snapshots / ref.read_text(encoding="utf-8").strip() / "config.json"
        if main.is_file():
            return main
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None
