"""Serve SGLang's unified-memory-pool modules from ukv (a ``sys.meta_path`` finder).

After :func:`install`, importing the modules of the installed SGLang's layout
(``layouts``: 0.5.16's ``sglang.srt.mem_cache.unified_memory_pool`` and
``...multi_ended_allocator``; 0.5.23's ``...unified_memory_pool`` and
``...allocator.unified_{sub_pool,mamba,hybrid_swa}``) gives modules whose names are the
drop-in's classes and factories, so SGLang's own ``isinstance`` checks and imports see
ukv's objects. :func:`uninstall` removes the finder and forgets modules it served.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from typing import Any

from ukv.integrations.sglang import layouts
from ukv.integrations.sglang.layouts import Layout, served_module_names

__all__ = ["ENV_FLAG", "SITE_DIR", "install", "installed", "uninstall"]

_PKG = "ukv.integrations.sglang"


class _Loader(importlib.abc.Loader):
    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        layout = self.layout
        module.__doc__ = (
            f"SGLang {layout.version}'s {module.__name__}, served by the ukv drop-in ({_PKG})."
        )
        for name, (source, attr) in layout.modules[module.__name__].items():
            setattr(module, name, getattr(importlib.import_module(source), attr))
        for name, (source, attr) in layout.passthrough.get(module.__name__, {}).items():
            try:
                setattr(module, name, getattr(importlib.import_module(source), attr))
            except (ImportError, AttributeError):
                pass  # SGLang without them: nothing to replace
        module.__all__ = list(layout.modules[module.__name__])  # type: ignore[attr-defined]
        module.__ukv_dropin__ = True  # type: ignore[attr-defined]
        module.__ukv_sglang_layout__ = layout.version  # type: ignore[attr-defined]


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in served_module_names():
            return None
        # Asked when SGLang imports the module, so SGLang's package is on the path by
        # now: the layout is that of the SGLang being imported.
        layout = layouts.current()
        if fullname not in layout.modules:
            return None  # another release's module: SGLang's own (or none)
        return importlib.machinery.ModuleSpec(fullname, _Loader(layout), origin=f"ukv:{_PKG}")


_finder: _Finder | None = None


def installed() -> bool:
    """Whether the finder is on ``sys.meta_path``."""
    return _finder is not None and _finder in sys.meta_path


def _served_elsewhere() -> list[str]:
    """SGLang's own modules of the names the drop-in serves that are already imported.

    Any module that bound a name from them (``from ...multi_ended_allocator import X``)
    imported them first, so their presence is exactly the case a late install cannot
    make consistent."""
    return [
        name
        for name in sorted(served_module_names())
        if name in sys.modules and not getattr(sys.modules[name], "__ukv_dropin__", False)
    ]


def _forget(name: str) -> None:
    """Drop module ``name`` from ``sys.modules`` and from its parent package's
    attributes, so neither ``import a.b.c`` nor ``from a.b import c`` finds it."""
    sys.modules.pop(name, None)
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name)
    if parent is not None and child in vars(parent):
        delattr(parent, child)


#: The directory of the start-up hook child processes import (``sitecustomize``).
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")
#: Set to "1" in the environment while the drop-in is installed with ``propagate``.
ENV_FLAG = "UKV_SGLANG_DROPIN"


def _propagate(on: bool) -> None:
    """Export (or withdraw) the drop-in to processes started from now on."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != SITE_DIR]
    if on:
        os.environ[ENV_FLAG] = "1"
        paths.insert(0, SITE_DIR)
    else:
        os.environ.pop(ENV_FLAG, None)
    if paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    else:
        os.environ.pop("PYTHONPATH", None)


def install(*, replace_loaded: bool = False, propagate: bool = True) -> None:
    """Serve SGLang's unified-pool modules from ukv (idempotent). Call it before SGLang
    imports them.

    SGLang runs its scheduler in processes it starts; with ``propagate`` (the default)
    they install the drop-in too: this sets ``UKV_SGLANG_DROPIN=1`` and puts ukv's
    start-up hook (``_site/sitecustomize.py``, which runs any ``sitecustomize`` it
    shadows) first on ``PYTHONPATH``, both inherited by every Python process started
    from now on. So calling ``install()`` in the launcher is enough.

    Args:
        replace_loaded: Install even though SGLang's own modules of these names are
            already imported: they are dropped from ``sys.modules`` so the next import
            gets the drop-in, but names other modules bound from them, and objects built
            from them, stay SGLang's (a mixed installation: only for side-by-side
            comparisons of the two, as ``benches/bench_sglang_dropin.py`` makes).
        propagate: Install in the Python processes started from this one too.

    Raises:
        SGLangInstallError: SGLang's own modules are already imported and
            ``replace_loaded`` is False (nothing is installed).
    """
    global _finder
    if installed():
        return
    loaded = _served_elsewhere()
    if loaded and not replace_loaded:
        from ukv.integrations.sglang.errors import SGLangInstallError

        raise SGLangInstallError(
            f"install(): SGLang already imported {loaded}; modules that imported them "
            "hold SGLang's classes, so the drop-in could not be installed consistently. "
            "Call install() before SGLang imports its memory pool (docs/SGLANG.md)"
        )
    _finder = _Finder()
    sys.meta_path.insert(0, _finder)
    for name in loaded:
        _forget(name)
    if propagate:
        _propagate(True)


def uninstall() -> None:
    """Remove the finder and forget the modules it served, in ``sys.modules`` and as
    their parent package's attributes (idempotent)."""
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None
    for name in served_module_names():
        if getattr(sys.modules.get(name), "__ukv_dropin__", False):
            _forget(name)
    _propagate(False)
