"""Load a repository script (a bench, a CI check) as a module, by its path: the scripts are
not a package, and tests call their functions directly."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_script(relpath: str, register: bool = False) -> ModuleType:
    """The module of ``ROOT / relpath``, named after its file; ``register``: put it in
    ``sys.modules`` first (dataclasses, pickling and worker processes look it up there)."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
